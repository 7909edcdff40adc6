/* test_conf.c: configuration tables: defaults, precedence, refusals. */
#include <check.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf.h"

struct tconf {
    char *name;
    int64_t count;
    int flag;
};

static const struct st_conf_prop props[] = {
    {"x.name", "ST_TEST_NAME", ST_CONF_STR, offsetof(struct tconf, name), 0, 0, "dflt",
     "a name"},
    {"x.count", "ST_TEST_COUNT", ST_CONF_INT, offsetof(struct tconf, count), 1, 100,
     "10", "a count"},
    {"x.flag", NULL, ST_CONF_BOOL, offsetof(struct tconf, flag), 0, 0, "false", "a flag"},
    {NULL},
};

START_TEST(conf_defaults_env_file_and_args_in_order)
{
    struct tconf c = {0};
    char err[256], path[] = "/tmp/st_conf_XXXXXX";
    ck_assert_int_eq(st_conf_defaults(props, &c, err, sizeof(err)), 0);
    ck_assert_str_eq(c.name, "dflt");
    ck_assert_int_eq(c.count, 10);

    setenv("ST_TEST_NAME", "from-env", 1);
    setenv("ST_TEST_COUNT", "20", 1);
    ck_assert_int_eq(st_conf_load_env(props, &c, err, sizeof(err)), 0);
    ck_assert_str_eq(c.name, "from-env");
    ck_assert_int_eq(c.count, 20);

    int fd = mkstemp(path);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "# comment\n  x.count = 30  \n\nx.flag=yes\n");
    fclose(f);
    ck_assert_int_eq(st_conf_load_file(props, &c, path, err, sizeof(err)), 0);
    ck_assert_int_eq(c.count, 30);
    ck_assert_int_eq(c.flag, 1);
    unlink(path);

    ck_assert_int_eq(st_conf_set_arg(props, &c, "x.name=from-arg", err, sizeof(err)), 0);
    ck_assert_str_eq(c.name, "from-arg");
    st_conf_fini(props, &c);
    ck_assert_ptr_null(c.name);
    unsetenv("ST_TEST_NAME");
    unsetenv("ST_TEST_COUNT");
}
END_TEST

START_TEST(conf_refuses_unknown_keys_and_bad_values)
{
    struct tconf c = {0};
    char err[256], path[] = "/tmp/st_conf_XXXXXX";
    st_conf_defaults(props, &c, err, sizeof(err));
    ck_assert_int_eq(st_conf_set(props, &c, "x.nmae", "v", err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "unknown configuration property \"x.nmae\""));
    ck_assert_int_eq(st_conf_set(props, &c, "x.count", "101", err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, "x.count"));
    ck_assert_int_eq(st_conf_set(props, &c, "x.count", "12abc", err, sizeof(err)), -1);
    ck_assert_int_eq(st_conf_set(props, &c, "x.flag", "perhaps", err, sizeof(err)), -1);
    ck_assert_int_eq(c.count, 10);

    int fd = mkstemp(path);
    FILE *f = fdopen(fd, "w");
    fprintf(f, "x.count = 5\nbogus.key = 1\n");
    fclose(f);
    ck_assert_int_eq(st_conf_load_file(props, &c, path, err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, ":2: unknown configuration property \"bogus.key\""));
    unlink(path);
    st_conf_fini(props, &c);
}
END_TEST

START_TEST(conf_report_fixed_names_only_changed_properties_not_live)
{
    struct tconf a = {0}, b = {0};
    char err[256];
    static const char *const live[] = {"x.name", NULL};
    ck_assert_int_eq(st_conf_defaults(props, &a, err, sizeof(err)), 0);
    ck_assert_int_eq(st_conf_defaults(props, &b, err, sizeof(err)), 0);
    ck_assert_int_eq(st_conf_report_fixed(props, &a, &b, live), 0);
    ck_assert_int_eq(st_conf_set(props, &b, "x.name", "other", err, sizeof(err)), 0);
    ck_assert_int_eq(st_conf_report_fixed(props, &a, &b, live), 0); /* live */
    ck_assert_int_eq(st_conf_report_fixed(props, &a, &b, NULL), 1);
    ck_assert_int_eq(st_conf_set(props, &b, "x.count", "11", err, sizeof(err)), 0);
    ck_assert_int_eq(st_conf_set(props, &b, "x.flag", "true", err, sizeof(err)), 0);
    ck_assert_int_eq(st_conf_report_fixed(props, &a, &b, live), 2);
    st_conf_fini(props, &a);
    st_conf_fini(props, &b);
}
END_TEST

START_TEST(conf_hash_follows_only_prefixed_values)
{
    struct tconf c = {0};
    char err[256], h1[17], h2[17], h3[17];
    st_conf_defaults(props, &c, err, sizeof(err));
    st_conf_hash(props, &c, "x.count", h1);
    st_conf_set(props, &c, "x.name", "other", err, sizeof(err));
    st_conf_hash(props, &c, "x.count", h2);
    ck_assert_str_eq(h1, h2);
    st_conf_set(props, &c, "x.count", "11", err, sizeof(err));
    st_conf_hash(props, &c, "x.count", h3);
    ck_assert_str_ne(h1, h3);
    st_conf_fini(props, &c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("conf");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, conf_defaults_env_file_and_args_in_order);
    tcase_add_test(tc, conf_refuses_unknown_keys_and_bad_values);
    tcase_add_test(tc, conf_hash_follows_only_prefixed_values);
    tcase_add_test(tc, conf_report_fixed_names_only_changed_properties_not_live);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
