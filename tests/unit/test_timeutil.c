/* test_timeutil.c: RFC 3339 parsing and formatting. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

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

int main(void)
{
    Suite *s = suite_create("timeutil");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, time_parses_utc_offsets_and_fractions);
    tcase_add_test(tc, time_rejects_what_is_not_rfc3339);
    tcase_add_test(tc, time_format_round_trips);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
