/* test_rotation.c: sandtrail-collector --follow against a writer appending
 * 2,500 lines/s while the file is rotated the ways logrotate does it:
 * rename with kept files (the collector down across two rotations), rename
 * and create with the writer reopening 0.5 s later, an inode reused by the
 * new file, copytruncate with the collector running and killed (-9), and a
 * truncation that cuts a line. Every line is counted by its event id in
 * the topic: none may be missing, none may reach the dead-letter topic torn.
 * Only after kill -9 may a line come twice (same event id: the analyzer
 * stores an event once by its id). */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "world.h"

#define RATE 2500 /* lines per second */
static char dir[128], collector_log[192], path[200], ckpt[240];
static int metrics_port; /* from world_free_port(), per test */
static int main_pid; /* collectors started: /tmp/st_rot_<main_pid>.pids */

struct writer {
    int fd;
    int next; /* event id of the next line */
};

static int line_of(char *buf, size_t n, int id)
{
    return snprintf(buf, n,
                    "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"r-%06d\","
                    "\"ts\":\"2026-11-29T14:00:00Z\",\"source\":{\"kind\":\"proxy\","
                    "\"name\":\"squid\"},\"task_id\":\"T-ROT\",\"run_id\":\"run-rot\","
                    "\"type\":\"request\",\"attrs\":{\"host\":\"h%d.example\"}}\n",
                    id, id % 97);
}

static void w_open(struct writer *wr)
{
    wr->fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
    ck_assert_int_ge(wr->fd, 0);
}

/* The writer closes its file and opens the path again (a HUP). */
static void w_reopen(struct writer *wr)
{
    close(wr->fd);
    w_open(wr);
}

/* n lines at RATE, one write() each. */
static void w_write(struct writer *wr, int n)
{
    struct timespec t0, at;
    char line[512];
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < n; i++) {
        long long ns = (long long)t0.tv_nsec + (long long)i * 1000000000 / RATE;
        at.tv_sec = t0.tv_sec + (time_t)(ns / 1000000000);
        at.tv_nsec = (long)(ns % 1000000000);
        clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &at, NULL);
        int len = line_of(line, sizeof(line), wr->next++);
        ck_assert_int_eq(write(wr->fd, line, (size_t)len), len);
    }
}

static void rotated(char *out, size_t n, int k)
{
    snprintf(out, n, "%s.%d", path, k);
}

/* logrotate's numbered names: FILE.keep dropped, FILE.k -> FILE.k+1. */
static void shift(int keep)
{
    char from[256], to[256];
    rotated(to, sizeof(to), keep);
    unlink(to);
    for (int k = keep - 1; k >= 1; k--) {
        rotated(from, sizeof(from), k);
        rotated(to, sizeof(to), k + 1);
        ck_assert(rename(from, to) == 0 || errno == ENOENT);
    }
}

/* Rename rotation; create: an empty FILE is made at once (logrotate's
 * create), before the writer reopens. */
static void rotate_rename(int keep, int create)
{
    char to[256];
    shift(keep);
    rotated(to, sizeof(to), 1);
    ck_assert_int_eq(rename(path, to), 0);
    if (create) {
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
        ck_assert_int_ge(fd, 0);
        close(fd);
    }
}

/* copytruncate: FILE copied to FILE.1, then truncated (the writer, whose
 * file is opened for appending, goes on at 0). */
static void rotate_copytruncate(int keep)
{
    char to[256], buf[65536];
    ssize_t r;
    shift(keep);
    rotated(to, sizeof(to), 1);
    int in = open(path, O_RDONLY), out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ck_assert(in >= 0 && out >= 0);
    while ((r = read(in, buf, sizeof(buf))) > 0)
        ck_assert_int_eq(write(out, buf, (size_t)r), r);
    close(in);
    close(out);
    ck_assert_int_eq(truncate(path, 0), 0);
}

static int start(struct world *w)
{
    char pidf[200];
    snprintf(pidf, sizeof(pidf), "%s/pid", dir);
    run(w, w->name, w->name,
        BIN "/collector/sandtrail-collector --follow %s -X input.poll_ms=100"
            " -X input.checkpoint_lines=500 -X input.rotate_grace_ms=1000"
            " -X metrics.listen=127.0.0.1:%d 2>>%s & echo \\$! > %s",
        path, metrics_port, collector_log, pidf);
    FILE *f = fopen(pidf, "r");
    int pid = 0;
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fscanf(f, "%d", &pid), 1);
    fclose(f);
    snprintf(pidf, sizeof(pidf), "/tmp/st_rot_%d.pids", main_pid);
    f = fopen(pidf, "a");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "%d\n", pid);
    fclose(f);
    return pid;
}

/* Stops the collectors a failed test left running. */
static void stop_leftovers(void)
{
    char pidf[64];
    int pid;
    snprintf(pidf, sizeof(pidf), "/tmp/st_rot_%d.pids", main_pid);
    FILE *f = fopen(pidf, "r");
    if (!f)
        return;
    while (fscanf(f, "%d", &pid) == 1) {
        /* still ours: the pid may have been given to another process */
        char proc[64], cmd[4096];
        snprintf(proc, sizeof(proc), "/proc/%d/cmdline", pid);
        FILE *pf = fopen(proc, "r");
        if (!pf)
            continue;
        size_t n = fread(cmd, 1, sizeof(cmd) - 1, pf);
        fclose(pf);
        for (size_t i = 0; i < n; i++)
            if (!cmd[i])
                cmd[i] = ' ';
        cmd[n] = '\0';
        if (strstr(cmd, "sandtrail-collector") && strstr(cmd, "/tmp/st_rot_"))
            kill(pid, SIGKILL);
    }
    fclose(f);
    unlink(pidf);
}

static void stop(int pid, int sig)
{
    kill(pid, sig);
    for (int i = 0; i < 150 && kill(pid, 0) == 0; i++)
        usleep(100000);
    ck_assert_msg(kill(pid, 0) != 0, "the collector did not stop");
}

static void setup(struct world *w, const char *tag)
{
    char cmd[512];
    metrics_port = world_free_port();
    snprintf(dir, sizeof(dir), "/tmp/st_rot_%d_%s", (int)getpid(), tag);
    snprintf(path, sizeof(path), "%s/access.log", dir);
    snprintf(ckpt, sizeof(ckpt), "%s.sandtrail.pos", path);
    snprintf(collector_log, sizeof(collector_log), "%s/collector.log", dir);
    snprintf(cmd, sizeof(cmd), "rm -rf %s && mkdir -p %s", dir, dir);
    ck_assert_int_eq(system(cmd), 0);
    world_init(w, tag);
    /* the topics must exist before the collector appends to them */
    ck_assert_int_eq(run(w, w->name, w->name,
                         BIN "/collector/sandtrail-collector --input /dev/null 2>/dev/null"),
                     0);
}

static void teardown(struct world *w)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
    world_drop(w);
}

/* How many of the ids 0..n-1 are in the topic (waiting up to 40 s for all
 * of them); *total gets the messages of this test's ids. */
static int count_ids(struct world *w, int n, int *total)
{
    int distinct = 0;
    int *seen = calloc((size_t)n, sizeof(int));
    for (int round = 0; round < 40; round++) {
        int count;
        char *dump = topic_dump(w->topic, &count);
        memset(seen, 0, (size_t)n * sizeof(int));
        distinct = *total = 0;
        for (const char *p = dump; (p = strstr(p, "\"event_id\":\"r-")); p++) {
            int id = atoi(p + 14);
            ck_assert(id >= 0 && id < n);
            distinct += seen[id]++ == 0;
            (*total)++;
        }
        free(dump);
        if (distinct == n)
            break;
        sleep(1);
    }
    if (distinct < n) {
        int shown = 0;
        fprintf(stderr, "missing ids:");
        for (int i = 0; i < n && shown < 20; i++)
            if (!seen[i]) {
                fprintf(stderr, " %d", i);
                shown++;
            }
        fprintf(stderr, " ... (%d missing)\n", n - distinct);
    }
    free(seen);
    return distinct;
}

static int dlq_count(struct world *w)
{
    int n;
    free(topic_dump(w->dlq, &n));
    return n;
}

static long metric(const char *name)
{
    char cmd[256], series[128], *text, *p;
    long v = -1;
    snprintf(cmd, sizeof(cmd), "curl -s http://127.0.0.1:%d/metrics", metrics_port);
    snprintf(series, sizeof(series), "\n%s ", name);
    text = world_sh(cmd);
    if ((p = strstr(text, series)))
        v = atol(p + strlen(series));
    free(text);
    return v;
}

/* Every id once (once at least after a kill: *exact 0), nothing torn. */
static void assert_all(struct world *w, int n, int exact)
{
    int total;
    int distinct = count_ids(w, n, &total);
    ck_assert_int_eq(distinct, n);
    if (exact)
        ck_assert_int_eq(total, n);
    ck_assert_int_eq(dlq_count(w), 0);
}

START_TEST(rotation_rename_kept_files_collector_down_across_two)
{
    struct world w;
    struct writer wr = {0};
    setup(&w, "rename");
    w_open(&wr);
    int pid = start(&w);
    w_write(&wr, 3000);
    rotate_rename(3, 0);
    w_reopen(&wr);
    w_write(&wr, 2500);
    stop(pid, SIGTERM);
    /* down across two rotations, the writer going on */
    w_write(&wr, 2500);
    rotate_rename(3, 0);
    w_reopen(&wr);
    w_write(&wr, 2500);
    rotate_rename(3, 0);
    w_reopen(&wr);
    w_write(&wr, 2500);
    pid = start(&w);
    w_write(&wr, 2500);
    assert_all(&w, wr.next, 1);
    stop(pid, SIGTERM);
    close(wr.fd);
    teardown(&w);
}
END_TEST

START_TEST(rotation_rename_create_writer_reopens_later)
{
    struct world w;
    struct writer wr = {0};
    setup(&w, "create");
    w_open(&wr);
    int pid = start(&w);
    w_write(&wr, 2500);
    for (int i = 0; i < 2; i++) {
        rotate_rename(2, 1);
        w_write(&wr, RATE / 2); /* 0.5 s more into the renamed file */
        w_reopen(&wr);
        w_write(&wr, 2500);
    }
    assert_all(&w, wr.next, 1);
    stop(pid, SIGTERM);
    close(wr.fd);
    teardown(&w);
}
END_TEST

/* Points the checkpoint at inode ino, in place of the one it names (as if
 * the file system had given the new file the old file's inode). */
static void checkpoint_names_inode(unsigned long long ino)
{
    char *text = world_slurp(ckpt), out[8192];
    char *p = strstr(text, " ino=");
    if (p) {
        char *e = strchr(p + 5, ' ');
        snprintf(out, sizeof(out), "%.*s ino=%llu%s", (int)(p - text), text, ino, e);
    } else { /* the format of old: "inode offset" */
        snprintf(out, sizeof(out), "%llu%s", ino, strchr(text, ' '));
    }
    FILE *f = fopen(ckpt, "w");
    ck_assert_ptr_nonnull(f);
    fputs(out, f);
    fclose(f);
    free(text);
}

START_TEST(rotation_inode_reused_read_from_start)
{
    struct world w;
    struct writer wr = {0};
    struct stat st;
    int total;
    setup(&w, "reuse");
    w_open(&wr);
    int pid = start(&w);
    w_write(&wr, 2500);
    ck_assert_int_eq(count_ids(&w, wr.next, &total), wr.next);
    stop(pid, SIGTERM); /* the checkpoint names FILE, read to its end */
    ck_assert_int_eq(stat(path, &st), 0);
    unsigned long long first = (unsigned long long)st.st_ino;

    /* one kept file: the first one is deleted at the second rotation, and
     * the new FILE gets its inode back */
    rotate_rename(1, 0);
    w_reopen(&wr);
    w_write(&wr, 2500);
    rotate_rename(1, 1);
    w_reopen(&wr);
    ck_assert_int_eq(stat(path, &st), 0);
    if ((unsigned long long)st.st_ino != first) {
        fprintf(stderr, "inode %llu not reused (FILE is %llu): the checkpoint is made "
                        "to name it\n",
                first, (unsigned long long)st.st_ino);
        checkpoint_names_inode((unsigned long long)st.st_ino);
    }
    /* more than the checkpoint's offset: an offset taken as valid here
     * would cut a line */
    w_write(&wr, 3100);
    pid = start(&w);
    w_write(&wr, 2500);
    assert_all(&w, wr.next, 1);
    stop(pid, SIGTERM);
    char *log = world_slurp(collector_log);
    ck_assert_ptr_nonnull(strstr(log, "its inode number now belongs to another file"));
    free(log);
    close(wr.fd);
    teardown(&w);
}
END_TEST

START_TEST(rotation_copytruncate_while_running)
{
    struct world w;
    struct writer wr = {0};
    setup(&w, "copytrunc");
    w_open(&wr);
    int pid = start(&w);
    w_write(&wr, 2500);
    for (int i = 0; i < 3; i++) {
        rotate_copytruncate(3);
        w_write(&wr, 2500);
    }
    assert_all(&w, wr.next, 1);
    ck_assert_int_eq(metric("sandtrail_collector_tail_bytes_at_risk_total"), 0);
    stop(pid, SIGTERM);
    close(wr.fd);
    teardown(&w);
}
END_TEST

START_TEST(rotation_copytruncate_collector_killed)
{
    struct world w;
    struct writer wr = {0};
    setup(&w, "copykill");
    w_open(&wr);
    int total;
    int pid = start(&w);
    w_write(&wr, 2500);
    ck_assert_int_eq(count_ids(&w, wr.next, &total), wr.next);
    w_write(&wr, 1000);
    stop(pid, SIGKILL); /* in the middle of reading and delivering */
    w_write(&wr, 1000);
    rotate_copytruncate(3);
    /* past the checkpoint's offset: an offset taken as valid in the
     * truncated file would cut a line */
    w_write(&wr, 3600);
    pid = start(&w);
    w_write(&wr, 2500);
    assert_all(&w, wr.next, 0);
    stop(pid, SIGTERM);
    close(wr.fd);
    teardown(&w);
}
END_TEST

START_TEST(rotation_truncated_line_counted_at_risk)
{
    struct world w;
    struct writer wr = {0};
    char line[512];
    int total;
    setup(&w, "atrisk");
    w_open(&wr);
    int pid = start(&w);
    w_write(&wr, 500);
    /* half a line, then truncated without a copy: its end never comes */
    int len = line_of(line, sizeof(line), 999999) / 2;
    ck_assert_int_eq(write(wr.fd, line, (size_t)len), len);
    ck_assert_int_eq(count_ids(&w, wr.next, &total), wr.next);
    ck_assert_int_eq(truncate(path, 0), 0);
    w_write(&wr, 500);
    assert_all(&w, wr.next, 1);
    ck_assert_int_eq(metric("sandtrail_collector_tail_bytes_at_risk_total"), len);
    stop(pid, SIGTERM);
    char *log = world_slurp(collector_log);
    ck_assert_ptr_nonnull(strstr(log, "bytes at risk"));
    free(log);
    close(wr.fd);
    teardown(&w);
}
END_TEST

int main(void)
{
    if (world_setup())
        return EXIT_FAILURE;
    Suite *s = suite_create("rotation");
    TCase *tc = tcase_create("follow");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, rotation_rename_kept_files_collector_down_across_two);
    tcase_add_test(tc, rotation_rename_create_writer_reopens_later);
    tcase_add_test(tc, rotation_inode_reused_read_from_start);
    tcase_add_test(tc, rotation_copytruncate_while_running);
    tcase_add_test(tc, rotation_copytruncate_collector_killed);
    tcase_add_test(tc, rotation_truncated_line_counted_at_risk);
    suite_add_tcase(s, tc);
    main_pid = (int)getpid();
    int status = world_run(s);
    stop_leftovers();
    return status;
}
