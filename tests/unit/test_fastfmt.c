/* test_fastfmt.c: the hand-written formatters of the analyzer's per-event
 * path give the bytes of the plain ways they replaced: st_fmt_i64 and
 * st_buf_addi64 those of snprintf "%" PRId64, st_detect_key_buf and
 * st_detect_key those of the key's layout by snprintf, st_detect_dest_format those of its two snprintf calls
 * (lengths around every truncation point). */
#include <check.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyzer.h"
#include "buf.h"
#include "detect.h"
#include "quiet_marks.h"

START_TEST(fastfmt_i64_as_printf)
{
    int64_t vals[] = {0, 1, -1, 9, 10, -10, 99, 100, 1796129760000000, -1796129760000000,
                      INT64_MAX, INT64_MIN, INT64_MAX - 1, INT64_MIN + 1, 1000000000000000000};
    struct st_buf b;
    st_buf_init(&b);
    uint64_t x = 88172645463325252u;
    for (int i = 0; i < 200000; i++) {
        int64_t v;
        if (i < (int)(sizeof(vals) / sizeof(vals[0]))) {
            v = vals[i];
        } else { /* xorshift, then every magnitude */
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            v = (int64_t)(x >> (i % 64));
            if (i % 3 == 0)
                v = -v;
        }
        char want[32], got[ST_I64_LEN];
        int wn = snprintf(want, sizeof(want), "%" PRId64, v);
        size_t gn = st_fmt_i64(got, v);
        ck_assert_uint_eq(gn, (size_t)wn);
        ck_assert_str_eq(got, want);
        st_buf_reset(&b);
        st_buf_adds(&b, "x");
        st_buf_addi64(&b, v);
        ck_assert_uint_eq(b.len, (size_t)wn + 1);
        ck_assert_str_eq(b.data + 1, want);
    }
    st_buf_fini(&b);
}
END_TEST

START_TEST(fastfmt_key_buf_as_key)
{
    static char big[5001];
    memset(big, 'r', sizeof(big) - 1);
    const char *ids[] = {"", "T-1", "run-7", "a:b", "\x1f", big, big + 4000};
    struct st_analyzer_conf conf;
    memset(&conf, 0, sizeof(conf));
    struct st_buf b;
    st_buf_init(&b);
    const char *prefixes[] = {"", "st:", "bench_cpu_1_2.x:"};
    for (size_t p = 0; p < 3; p++) {
        conf.redis_prefix = (char *)prefixes[p];
        for (size_t t = 0; t < sizeof(ids) / sizeof(ids[0]); t++)
            for (size_t r = 0; r < sizeof(ids) / sizeof(ids[0]); r++) {
                /* the layout detect.h gives (st_detect_key) */
                char want[12000];
                snprintf(want, sizeof(want), "%sdenial_burst:eps:%zu:%s:%zu:%s",
                         prefixes[p], strlen(ids[t]), ids[t], strlen(ids[r]), ids[r]);
                const char *got =
                    st_detect_key_buf(&b, &conf, "denial_burst", "eps", ids[t], ids[r]);
                ck_assert_str_eq(got, want);
                ck_assert_uint_eq(b.len, strlen(want));
                char *key = st_detect_key(&conf, "denial_burst", "eps", ids[t], ids[r]);
                ck_assert_str_eq(key, want);
                free(key);
            }
    }
    st_buf_fini(&b);
}
END_TEST

/* the truncation is what is compared */
#pragma GCC diagnostic ignored "-Wformat-truncation"

START_TEST(fastfmt_dest_as_snprintf)
{
    static char s1[800], s2[800], s3[800];
    size_t lens[] = {0, 1, 5, 255, 256, 257, 290, 298, 299, 300, 500, 597, 598, 599, 600, 799};
    size_t nl = sizeof(lens) / sizeof(lens[0]);
    for (size_t a = 0; a < nl; a++)
        for (size_t c = 0; c < nl; c++)
            for (int deny = 0; deny < 2; deny++) {
                memset(s1, 'p', lens[a]);
                s1[lens[a]] = '\0';
                memset(s2, 's', lens[c]);
                s2[lens[c]] = '\0';
                memset(s3, 'e', lens[(a + c) % nl]);
                s3[lens[(a + c) % nl]] = '\0';
                char wf[300], wm[600], gf[300], gm[600];
                snprintf(wf, 300, "%s:%.256s", deny ? "deny" : "allow", s1);
                snprintf(wm, 600, "%s\x1f%s", s2, s3);
                memset(gf, 0x55, sizeof(gf));
                memset(gm, 0x55, sizeof(gm));
                st_detect_dest_format(deny, s1, s2, s3, gf, gm);
                ck_assert_str_eq(gf, wf);
                ck_assert_str_eq(gm, wm);
                /* and the other way round for the member */
                snprintf(wm, 600, "%s\x1f%s", s3, s2);
                st_detect_dest_format(deny, s1, s3, s2, gf, gm);
                ck_assert_str_eq(gm, wm);
            }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fastfmt");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60); /* 200,000 numbers under ASan on a loaded machine */
    tcase_add_test(tc, fastfmt_i64_as_printf);
    tcase_add_test(tc, fastfmt_key_buf_as_key);
    tcase_add_test(tc, fastfmt_dest_as_snprintf);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
