/* test_escape.c: control characters from event data are printed as visible
 * escapes (findings' summaries, the CLI), everything else as it is. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"

static char *esc(const char *s, size_t len, int json)
{
    struct st_buf b;
    st_buf_init(&b);
    st_escape_ctl(&b, s, len, json);
    st_buf_addc(&b, '\0');
    char *out = strdup(b.data);
    st_buf_fini(&b);
    return out;
}

START_TEST(escape_terminal_sequences_become_visible)
{
    /* an OSC 52 clipboard write, a CSI colour, the 8-bit CSI U+009B, DEL,
     * a NUL and a byte that is not UTF-8 */
    const char in[] = "a\x1b]52;c;ZXZpbA==\x07 b\x1b[31mred\xc2\x9b" "2J\x7f\0z\xff";
    char *out = esc(in, sizeof(in) - 1, 0);
    ck_assert_str_eq(out, "a\\x1b]52;c;ZXZpbA==\\x07 b\\x1b[31mred\\u009b2J\\x7f\\x00z\\xff");
    ck_assert(st_escape_needed(in, sizeof(in) - 1));
    free(out);
}
END_TEST

START_TEST(escape_keeps_text_and_utf8)
{
    const char in[] = "T-1 wrote [REDACTED:github_token:0123] to /work/\xc3\xa9t\xc3\xa9 \xe2\x80\x94 ok\t";
    char *out = esc(in, strlen(in) - 1, 0); /* without the tab */
    ck_assert_int_eq(strlen(out), strlen(in) - 1);
    ck_assert(!st_escape_needed(in, strlen(in) - 1));
    free(out);
    out = esc("\t\n", 2, 0);
    ck_assert_str_eq(out, "\\x09\\x0a");
    free(out);
}
END_TEST

START_TEST(escape_json_output_stays_json)
{
    /* PostgreSQL's row_to_json escapes C0 but not DEL or C1 */
    const char in[] = "{\"summary\":\"x\x7f\xc2\x9b[2J\"}";
    char *out = esc(in, sizeof(in) - 1, 1);
    ck_assert_str_eq(out, "{\"summary\":\"x\\u007f\\u009b[2J\"}");
    free(out);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("escape");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, escape_terminal_sequences_become_visible);
    tcase_add_test(tc, escape_keeps_text_and_utf8);
    tcase_add_test(tc, escape_json_output_stays_json);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
