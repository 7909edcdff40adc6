/* test_override.c: per-task and per-platform thresholds. */
#include <check.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "override.h"

static const struct st_conf_prop props[] = {
    {"detect.denial_burst.threshold", NULL, ST_CONF_INT, 0, 2, 1000, "10", "t"},
    {"detect.denial_burst.window_s", NULL, ST_CONF_INT, 8, 1, 1000, "60", "w"},
    {NULL},
};

static struct st_event event(const char *task, const char *platform)
{
    struct st_event ev;
    memset(&ev, 0, sizeof(ev));
    ev.task_id = task;
    ev.source_platform = platform;
    return ev;
}

START_TEST(override_task_beats_platform_beats_default)
{
    struct st_overrides o = {NULL, 0, props};
    char err[256];
    const char *p = "detect.denial_burst.threshold";
    ck_assert_int_eq(st_override_parse(&o, "override.platform.squid.detect.denial_burst.threshold",
                                       "20", err, sizeof(err)), 0);
    ck_assert_int_eq(st_override_parse(&o, "override.task.T.1.detect.denial_burst.threshold",
                                       "5", err, sizeof(err)), 0);
    struct st_event a = event("T.1", "squid"), b = event("T-2", "squid"),
                    c = event("T-2", "envoy"), d = event("T-2", NULL);
    ck_assert_int_eq(st_override_int(&o, &a, p, 10), 5);  /* task id with a dot */
    ck_assert_int_eq(st_override_int(&o, &b, p, 10), 20);
    ck_assert_int_eq(st_override_int(&o, &c, p, 10), 10);
    ck_assert_int_eq(st_override_int(&o, &d, p, 10), 10);
    st_overrides_fini(&o);
}
END_TEST

START_TEST(override_refuses_windows_unknown_names_and_bad_values)
{
    struct st_overrides o = {NULL, 0, props};
    char err[256];
    ck_assert_int_eq(st_override_parse(&o, "override.task.T.detect.denial_burst.window_s",
                                       "5", err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "cannot be overridden"));
    ck_assert_int_eq(st_override_parse(&o, "override.task.T.detect.denial_burst.threshold",
                                       "1", err, sizeof(err)), -1);
    ck_assert_int_eq(st_override_parse(&o, "override.task.detect.denial_burst.threshold",
                                       "5", err, sizeof(err)), -1);
    ck_assert_int_eq(st_override_parse(&o, "override.region.eu.detect.denial_burst.threshold",
                                       "5", err, sizeof(err)), 1); /* not an override */
    ck_assert_int_eq(o.n, 0);
    st_overrides_fini(&o);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("override");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, override_task_beats_platform_beats_default);
    tcase_add_test(tc, override_refuses_windows_unknown_names_and_bad_values);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
