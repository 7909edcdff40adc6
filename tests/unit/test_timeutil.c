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
    tcase_add_test(tc, time_format_round_trips);
    tcase_add_test(tc, time_format_matches_gmtime);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
