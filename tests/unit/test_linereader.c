/* test_linereader.c: bounded NDJSON line reading. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "linereader.h"

static FILE *mem(const char *data, size_t len)
{
    FILE *f = tmpfile();
    fwrite(data, 1, len, f);
    rewind(f);
    return f;
}

/* A pipe's line comes back as soon as it is written, and the reader says
 * when it would wait (the collector then produces what it holds). */
START_TEST(linereader_returns_a_pipe_line_as_it_comes)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    FILE *f = fdopen(p[0], "r");
    struct st_linereader *r = st_linereader_new(f, 1 << 20);
    const char *line;
    size_t len;
    int tl;
    alarm(10); /* reading that waits for a full buffer would hang here */
    ck_assert_int_eq(st_linereader_would_block(r), 1);
    ck_assert_int_eq(write(p[1], "one\ntw", 6), 6);
    ck_assert_int_eq(st_linereader_would_block(r), 0);
    ck_assert_int_eq(st_linereader_next(r, &line, &len, &tl), 1);
    ck_assert(len == 3 && memcmp(line, "one", 3) == 0);
    ck_assert_int_eq(st_linereader_would_block(r), 1); /* "tw" waits for its end */
    ck_assert_int_eq(write(p[1], "o\n", 2), 2);
    ck_assert_int_eq(st_linereader_next(r, &line, &len, &tl), 1);
    ck_assert(len == 3 && memcmp(line, "two", 3) == 0);
    close(p[1]);
    ck_assert_int_eq(st_linereader_next(r, &line, &len, &tl), 0);
    ck_assert_int_eq(st_linereader_would_block(r), 0);
    alarm(0);
    st_linereader_destroy(r);
    fclose(f);
}
END_TEST

START_TEST(linereader_splits_lines_and_strips_crlf)
{
    const char *data = "one\r\ntwo\n\nthree";
    FILE *f = mem(data, strlen(data));
    struct st_linereader *r = st_linereader_new(f, 64);
    const char *line;
    size_t len;
    int tl;
    const char *want[] = {"one", "two", "", "three"};
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(st_linereader_next(r, &line, &len, &tl), 1);
        ck_assert_int_eq(tl, 0);
        ck_assert_int_eq(len, strlen(want[i]));
        ck_assert(memcmp(line, want[i], len) == 0);
    }
    ck_assert_int_eq(st_linereader_next(r, &line, &len, &tl), 0);
    st_linereader_destroy(r);
    fclose(f);
}
END_TEST

START_TEST(linereader_cuts_a_long_line_and_resumes_after_it)
{
    /* a 10 MB line between two short ones, read with a 1 KiB bound */
    size_t big = 10 * 1024 * 1024;
    char *data = malloc(big + 32);
    size_t n = 0;
    memcpy(data, "first\n", 6);
    n = 6;
    memset(data + n, 'x', big);
    n += big;
    memcpy(data + n, "\nlast\n", 6);
    n += 6;
    FILE *f = mem(data, n);
    free(data);
    struct st_linereader *r = st_linereader_new(f, 1024);
    const char *line;
    size_t len;
    int tl;
    ck_assert_int_eq(st_linereader_next(r, &line, &len, &tl), 1);
    ck_assert(len == 5 && !tl);
    ck_assert_int_eq(st_linereader_next(r, &line, &len, &tl), 1);
    ck_assert_int_eq(tl, 1);
    ck_assert_int_eq(len, 1024);
    ck_assert_int_eq(st_linereader_next(r, &line, &len, &tl), 1);
    ck_assert_int_eq(tl, 0);
    ck_assert_int_eq(len, 4);
    ck_assert(memcmp(line, "last", 4) == 0);
    ck_assert_int_eq(st_linereader_next(r, &line, &len, &tl), 0);
    st_linereader_destroy(r);
    fclose(f);
}
END_TEST

START_TEST(linereader_accepts_a_line_of_exactly_the_bound)
{
    char data[] = "abcdefgh\nij\n";
    FILE *f = mem(data, strlen(data));
    struct st_linereader *r = st_linereader_new(f, 8);
    const char *line;
    size_t len;
    int tl;
    ck_assert_int_eq(st_linereader_next(r, &line, &len, &tl), 1);
    ck_assert(len == 8 && !tl);
    ck_assert_int_eq(st_linereader_next(r, &line, &len, &tl), 1);
    ck_assert(len == 2 && !tl);
    st_linereader_destroy(r);
    fclose(f);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("linereader");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, linereader_splits_lines_and_strips_crlf);
    tcase_add_test(tc, linereader_returns_a_pipe_line_as_it_comes);
    tcase_add_test(tc, linereader_cuts_a_long_line_and_resumes_after_it);
    tcase_add_test(tc, linereader_accepts_a_line_of_exactly_the_bound);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
