/* test_timeutil.c: RFC 3339 parsing and formatting. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "timeutil.h"

static int parse(const char *s, int64_t *us)
{
    return st_time_parse_rfc3339(s, strlen(s), us);
}

START_TEST(time_parses_utc_offsets_and_fractions)
{
    int64_t us;
    ck_assert_int_eq(parse("1970-01-01T00:00:00Z", &us), 0);
    ck_assert_int_eq(us, 0);
    ck_assert_int_eq(parse("2026-11-29T07:16:10Z", &us), 0);
    ck_assert_int_eq(us, 1795936570LL * 1000000);
    ck_assert_int_eq(parse("2026-11-29T08:16:10.5+01:00", &us), 0);
    ck_assert_int_eq(us, 1795936570LL * 1000000 + 500000);
    ck_assert_int_eq(parse("2026-11-29t07:16:10.123456789z", &us), 0);
    ck_assert_int_eq(us, 1795936570LL * 1000000 + 123456);
    ck_assert_int_eq(parse("2024-02-29T00:00:00-00:30", &us), 0);
    ck_assert_int_eq(us, (1709164800LL + 1800) * 1000000);
    ck_assert_int_eq(parse("1969-12-31T23:59:59Z", &us), 0);
    ck_assert_int_eq(us, -1000000);
}
END_TEST

START_TEST(time_rejects_what_is_not_rfc3339)
{
    int64_t us;
    const char *bad[] = {"2026-11-29",           "2026-11-29T07:16:10",
                         "2026-02-30T00:00:00Z", "2025-02-29T00:00:00Z",
                         "2026-11-29T24:00:00Z", "2026-11-29T07:16:10.Z",
                         "2026-11-29T07:16:10+1:00", "2026-11-29T07:16:10Zjunk",
                         "1795936570",           "2026-11-29T07:61:00Z"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(parse(bad[i], &us) == -1, "accepted %s", bad[i]);
}
END_TEST

/* The parser as first written (digit by digit, the fraction's scale
 * divided by ten each digit): st_time_parse_rfc3339 must give the same
 * answer and value on every input. */
static int ref_digits(const char *s, size_t n, int *out)
{
    int v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 0;
}

static int64_t ref_days(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static int ref_parse(const char *s, size_t len, int64_t *us)
{
    static const int dim[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int y, mo, d, h, mi, sec, frac_us = 0;
    size_t i;
    if (len < 20 || s[4] != '-' || s[7] != '-' || s[13] != ':' || s[16] != ':')
        return -1;
    if (s[10] != 'T' && s[10] != 't' && s[10] != ' ')
        return -1;
    if (ref_digits(s, 4, &y) || ref_digits(s + 5, 2, &mo) || ref_digits(s + 8, 2, &d) ||
        ref_digits(s + 11, 2, &h) || ref_digits(s + 14, 2, &mi) ||
        ref_digits(s + 17, 2, &sec))
        return -1;
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    if (mo < 1 || mo > 12 || d < 1 || d > (mo == 2 ? 28 + leap : dim[mo - 1]) ||
        h > 23 || mi > 59 || sec > 60)
        return -1;
    i = 19;
    if (i < len && s[i] == '.') {
        size_t start = ++i;
        int scale = 100000;
        while (i < len && s[i] >= '0' && s[i] <= '9') {
            frac_us += (s[i] - '0') * scale;
            scale /= 10;
            i++;
        }
        if (i == start)
            return -1;
    }
    if (i >= len)
        return -1;
    int offset_min = 0;
    if (s[i] == 'Z' || s[i] == 'z') {
        i++;
    } else if (s[i] == '+' || s[i] == '-') {
        int oh, om;
        if (len - i < 6 || s[i + 3] != ':' || ref_digits(s + i + 1, 2, &oh) ||
            ref_digits(s + i + 4, 2, &om) || oh > 23 || om > 59)
            return -1;
        offset_min = (oh * 60 + om) * (s[i] == '-' ? -1 : 1);
        i += 6;
    } else {
        return -1;
    }
    if (i != len)
        return -1;
    if (sec == 60)
        sec = 59, frac_us = 999999;
    int64_t t = ref_days(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec;
    t -= (int64_t)offset_min * 60;
    *us = t * 1000000 + frac_us;
    return 0;
}

START_TEST(time_parse_matches_the_plain_parser)
{
    static const char *const seeds[] = {
        "2026-11-29T07:16:10Z", "2026-11-29T08:16:10.5+01:00",
        "2026-11-29t07:16:10.123456789z", "2024-02-29T00:00:00-00:30",
        "1969-12-31T23:59:59.999999Z", "2016-12-31T23:59:60.1234567Z",
        "0000-01-01 00:00:00.0000001-23:59"};
    static const char alphabet[] = "0123456789:-+.TtZz /a\x7f";
    uint64_t r = 0x9E3779B97F4A7C15u;
    size_t agree = 0;
    for (int n = 0; n < 200000; n++) {
        char b[48];
        const char *seed = seeds[n % (sizeof(seeds) / sizeof(seeds[0]))];
        size_t len = strlen(seed);
        memcpy(b, seed, len);
        for (int k = 0; k < 1 + n % 3; k++) {
            r ^= r << 13, r ^= r >> 7, r ^= r << 17;
            b[r % len] = alphabet[(r >> 20) % (sizeof(alphabet) - 1)];
        }
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        if (r % 5 == 0)
            len -= (r >> 8) % len;
        int64_t got = 0, want = 0;
        int rc = st_time_parse_rfc3339(b, len, &got), wrc = ref_parse(b, len, &want);
        ck_assert_msg(rc == wrc && (rc || got == want), "%.*s: %d %lld, want %d %lld",
                      (int)len, b, rc, (long long)got, wrc, (long long)want);
        agree += rc == 0;
    }
    ck_assert_msg(agree > 10000, "only %zu mutated dates were valid", agree);
}
END_TEST

START_TEST(time_format_round_trips)
{
    char buf[40];
    int64_t us, back;
    const int64_t samples[] = {0, 1795936570123456LL, -1000000, 951782400000001LL};
    for (size_t i = 0; i < 4; i++) {
        us = samples[i];
        st_time_format(us, buf, sizeof(buf));
        ck_assert_int_eq(parse(buf, &back), 0);
        ck_assert_int_eq(back, us);
    }
    st_time_format(1795936570123456LL, buf, sizeof(buf));
    ck_assert_str_eq(buf, "2026-11-29T07:16:10.123456Z");
}
END_TEST

/* Formatted by hand for four-digit years: the bytes printf would write,
 * checked against the civil date gmtime gives, over the whole range. */
START_TEST(time_format_matches_gmtime)
{
    char buf[40], want[64];
    uint64_t r = 88172645463325252u;
    for (int i = 0; i < 50000; i++) {
        r ^= r << 13, r ^= r >> 7, r ^= r << 17;
        int64_t us = (int64_t)(r % (uint64_t)253402300800000000LL);
        if (i < 1000)
            us = (int64_t)i * 86399999999LL; /* day ends */
        time_t secs = (time_t)(us / 1000000);
        struct tm tm;
        gmtime_r(&secs, &tm);
        snprintf(want, sizeof(want), "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ",
                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                 tm.tm_sec, (int)(us % 1000000));
        st_time_format(us, buf, sizeof(buf));
        ck_assert_str_eq(buf, want);
    }
    st_time_format(-1, buf, sizeof(buf)); /* before 1970: printf's path */
    ck_assert_str_eq(buf, "1969-12-31T23:59:59.999999Z");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("timeutil");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60); /* 50,000 dates under ASan on a loaded machine */
    tcase_add_test(tc, time_parses_utc_offsets_and_fractions);
    tcase_add_test(tc, time_rejects_what_is_not_rfc3339);
    tcase_add_test(tc, time_parse_matches_the_plain_parser);
    tcase_add_test(tc, time_format_round_trips);
    tcase_add_test(tc, time_format_matches_gmtime);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
