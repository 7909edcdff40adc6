/* test_tailfile.c: collector/tail.c on files alone (no services): which
 * file and offset a checkpoint resumes at, old checkpoints, rotated files
 * read in order, the unterminated last line of a rotated file. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "metrics.h"
#include "tail.h"

static char dir[64], path[128], ckpt[160];

static void put(const char *name, const char *mode, const char *text)
{
    FILE *f = fopen(name, mode);
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static struct st_tail *open_tail(char *errstr, size_t errsz)
{
    struct st_tail_opts o = {.max_line = 1024, .rotated_glob = "FILE.[0-9]*",
                             .grace_ms = 0};
    return st_tail_open(path, ckpt, &o, errstr, errsz);
}

/* The next line, as a string ("" when none is there yet). */
static const char *next(struct st_tail *t)
{
    static char out[1100];
    const char *l;
    size_t n;
    int too_long;
    out[0] = '\0';
    if (st_tail_next(t, &l, &n, &too_long) == 1)
        snprintf(out, sizeof(out), "%.*s", (int)n, l);
    return out;
}

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/st_tailfile_%d", (int)getpid());
    snprintf(path, sizeof(path), "%s/app.log", dir);
    snprintf(ckpt, sizeof(ckpt), "%s.sandtrail.pos", path);
    mkdir(dir, 0755);
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void save(struct st_tail *t)
{
    char err[256];
    ck_assert_msg(st_tail_checkpoint(t, err, sizeof(err)) == 0, "%s", err);
}

START_TEST(tail_old_checkpoint_resumes_where_a_line_starts)
{
    char err[256], text[128];
    struct stat st;
    put(path, "w", "line one\nline two\nline three\n");
    ck_assert_int_eq(stat(path, &st), 0);
    snprintf(text, sizeof(text), "%llu 9\n", (unsigned long long)st.st_ino);
    put(ckpt, "w", text);
    struct st_tail *t = open_tail(err, sizeof(err));
    ck_assert_ptr_nonnull(t);
    ck_assert_str_eq(next(t), "line two");
    save(t);
    st_tail_close(t);
    char *saved = NULL;
    size_t n = 0;
    FILE *f = fopen(ckpt, "r");
    ck_assert_int_gt(getline(&saved, &n, f), 0);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(saved, "sandtrail-tail-v2 "));
    ck_assert_ptr_nonnull(strstr(saved, " pos=18 "));
    free(saved);

    /* an old offset inside a line is not trusted */
    snprintf(text, sizeof(text), "%llu 12\n", (unsigned long long)st.st_ino);
    put(ckpt, "w", text);
    t = open_tail(err, sizeof(err));
    ck_assert_str_eq(next(t), "line one");
    st_tail_close(t);
}
END_TEST

START_TEST(tail_unreadable_checkpoint_refused)
{
    char err[256] = "";
    put(path, "w", "a\n");
    put(ckpt, "w", "position: 12\n");
    ck_assert_ptr_null(open_tail(err, sizeof(err)));
    ck_assert_ptr_nonnull(strstr(err, "in no format this collector reads"));
}
END_TEST

START_TEST(tail_same_inode_other_content_read_from_start)
{
    char err[256];
    put(path, "w", "first file 1\nfirst file 2\n");
    struct st_tail *t = open_tail(err, sizeof(err));
    ck_assert_str_eq(next(t), "first file 1");
    ck_assert_str_eq(next(t), "first file 2");
    save(t);
    st_tail_close(t);
    /* the same inode, other lines, longer than the saved offset */
    put(path, "w", "second 1\nsecond 2\nsecond 3\nsecond 4\n");
    t = open_tail(err, sizeof(err));
    ck_assert_str_eq(next(t), "second 1");
    st_tail_close(t);
}
END_TEST

START_TEST(tail_resumes_in_a_file_rotated_twice)
{
    char err[256], r1[160], r2[160];
    snprintf(r1, sizeof(r1), "%s.1", path);
    snprintf(r2, sizeof(r2), "%s.2", path);
    put(path, "w", "a1\na2\n");
    struct st_tail *t = open_tail(err, sizeof(err));
    ck_assert_str_eq(next(t), "a1");
    save(t);
    st_tail_close(t);
    /* down across two rotations */
    put(path, "a", "a3\n");
    ck_assert_int_eq(rename(path, r1), 0);
    put(path, "w", "b1\n");
    ck_assert_int_eq(rename(r1, r2), 0);
    ck_assert_int_eq(rename(path, r1), 0);
    put(path, "w", "c1\n");
    t = open_tail(err, sizeof(err));
    ck_assert_ptr_nonnull(t);
    ck_assert_str_eq(next(t), "a2");
    ck_assert_str_eq(next(t), "a3");
    ck_assert_str_eq(next(t), "b1");
    ck_assert_str_eq(next(t), "c1");
    ck_assert_str_eq(next(t), "");
    st_tail_close(t);
}
END_TEST

START_TEST(tail_rotated_file_last_line_without_newline)
{
    char err[256], r1[160];
    snprintf(r1, sizeof(r1), "%s.1", path);
    put(path, "w", "x1\nx2");
    struct st_tail *t = open_tail(err, sizeof(err));
    ck_assert_str_eq(next(t), "x1");
    ck_assert_str_eq(next(t), ""); /* x2 may still grow */
    ck_assert_int_eq(rename(path, r1), 0);
    ck_assert_str_eq(next(t), ""); /* no newer file with data yet */
    put(path, "w", "y1\n");
    ck_assert_str_eq(next(t), "x2");
    ck_assert_str_eq(next(t), "y1");
    st_tail_close(t);
}
END_TEST

START_TEST(tail_copytruncate_reads_the_copy_first)
{
    char err[256], r1[160];
    snprintf(r1, sizeof(r1), "%s.1", path);
    put(path, "w", "k1\n");
    struct st_tail *t = open_tail(err, sizeof(err));
    ck_assert_str_eq(next(t), "k1");
    put(path, "a", "k2\nk3\n");
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "cp %s %s && : > %s", path, r1, path);
    ck_assert_int_eq(system(cmd), 0);
    put(path, "a", "n1\n");
    ck_assert_str_eq(next(t), "k2");
    ck_assert_str_eq(next(t), "k3");
    ck_assert_str_eq(next(t), "n1");
    st_tail_close(t);
}
END_TEST

/* Lines written after the copy and seen before the truncation are lost:
 * counted at risk, and nothing torn is handed out. */
START_TEST(tail_bytes_missing_from_the_copy_counted_at_risk)
{
    char err[256], r1[160], cmd[512], text[64];
    struct st_metrics *m = st_metrics_new();
    struct st_tail_opts o = {.max_line = 16, .rotated_glob = "FILE.[0-9]*",
                             .grace_ms = 0, .metrics = m};
    snprintf(r1, sizeof(r1), "%s.1", path);
    for (int i = 1; i <= 20; i++) {
        snprintf(text, sizeof(text), "k%02d\n", i);
        put(path, i == 1 ? "w" : "a", text);
        if (i == 10) { /* the copy holds k01..k10 */
            snprintf(cmd, sizeof(cmd), "cp %s %s", path, r1);
            ck_assert_int_eq(system(cmd), 0);
        }
    }
    struct st_tail *t = st_tail_open(path, ckpt, &o, err, sizeof(err));
    ck_assert_ptr_nonnull(t);
    ck_assert_str_eq(next(t), "k01"); /* 17 of 80 bytes read, all 80 seen */
    ck_assert_int_eq(truncate(path, 0), 0);
    put(path, "a", "n1\n");
    for (int i = 2; i <= 10; i++) {
        snprintf(text, sizeof(text), "k%02d", i);
        ck_assert_str_eq(next(t), text);
    }
    ck_assert_str_eq(next(t), "n1");
    char *r = st_metrics_render(m);
    ck_assert_ptr_nonnull(strstr(r, "\nsandtrail_collector_tail_bytes_at_risk_total 40\n"));
    free(r);
    st_tail_close(t);
    st_metrics_destroy(m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tailfile");
    TCase *tc = tcase_create("tail");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, tail_old_checkpoint_resumes_where_a_line_starts);
    tcase_add_test(tc, tail_unreadable_checkpoint_refused);
    tcase_add_test(tc, tail_same_inode_other_content_read_from_start);
    tcase_add_test(tc, tail_resumes_in_a_file_rotated_twice);
    tcase_add_test(tc, tail_rotated_file_last_line_without_newline);
    tcase_add_test(tc, tail_copytruncate_reads_the_copy_first);
    tcase_add_test(tc, tail_bytes_missing_from_the_copy_counted_at_risk);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
