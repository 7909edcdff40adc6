/* test_tail.c: sandtrail-collector --follow against a file that a writer
 * appends to, rotates by rename and by copytruncate, while the collector is
 * stopped gracefully and killed: every line reaches Kafka, none is lost,
 * and a graceful restart re-reads nothing. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "world.h"

static char dir[128], collector_log[192], path[200];
static int metrics_port; /* from world_free_port(), the same across restarts */

static void append(const char *file, int from, int to)
{
    FILE *f = fopen(file, "a");
    ck_assert_ptr_nonnull(f);
    for (int i = from; i < to; i++)
        fprintf(f,
                "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"t-%05d\","
                "\"ts\":\"2026-11-29T14:00:00Z\",\"source\":{\"kind\":\"proxy\","
                "\"name\":\"squid\"},\"task_id\":\"T-TAIL\",\"run_id\":\"run-tail\","
                "\"type\":\"request\",\"attrs\":{\"host\":\"h%d.example\"}}\n",
                i, i % 7);
    fclose(f);
}

static int start(struct world *w)
{
    char pidf[200];
    snprintf(pidf, sizeof(pidf), "%s/pid", dir);
    run(w, w->name, w->name,
        BIN "/collector/sandtrail-collector --follow %s -X input.poll_ms=50"
            " -X metrics.listen=127.0.0.1:%d"
            " -X input.checkpoint_lines=25 2>>%s & echo \\$! > %s",
        path, metrics_port, collector_log, pidf);
    FILE *f = fopen(pidf, "r");
    int pid = 0;
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fscanf(f, "%d", &pid), 1);
    fclose(f);
    return pid;
}

/* Waits until the topic holds want messages; returns how many it holds. */
static int wait_for(struct world *w, int want, char **dump)
{
    int n = 0;
    for (int i = 0; i < 100; i++) {
        free(*dump);
        *dump = topic_dump(w->topic, &n);
        if (n >= want)
            break;
        usleep(200000);
    }
    return n;
}

static void stop(int pid, int sig)
{
    kill(pid, sig);
    for (int i = 0; i < 100 && kill(pid, 0) == 0; i++)
        usleep(100000);
}

static int distinct(const char *dump, int upto)
{
    int n = 0;
    char id[32];
    for (int i = 0; i < upto; i++) {
        snprintf(id, sizeof(id), "\"t-%05d\"", i);
        n += strstr(dump, id) != NULL;
    }
    return n;
}

START_TEST(tail_follows_rotation_and_restarts_without_loss)
{
    struct world w;
    char cmd[1024], *dump = NULL;
    metrics_port = world_free_port();
    snprintf(dir, sizeof(dir), "/tmp/st_tail_%d", (int)getpid());
    snprintf(path, sizeof(path), "%s/access.log", dir);
    snprintf(cmd, sizeof(cmd), "rm -rf %s && mkdir -p %s", dir, dir);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(collector_log, sizeof(collector_log), "%s/collector.log", dir);
    world_init(&w, "tail");
    /* the topic must exist before the collector appends to it */
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/collector/sandtrail-collector --input /dev/null 2>/dev/null"),
                     0);

    append(path, 0, 100);
    int pid = start(&w);
    ck_assert_int_eq(wait_for(&w, 100, &dump), 100);
    /* a long-running collector serves its metrics; the delivery reports may
     * come a little after the messages are readable: wait up to 20 s */
    char *metrics = NULL;
    for (int i = 0; i < 100; i++) {
        free(metrics);
        metrics = world_shf("curl -s http://127.0.0.1:%d/metrics", metrics_port);
        if (strstr(metrics, "sandtrail_collector_accepted_total 100\n") &&
            strstr(metrics, "sandtrail_collector_delivery_seconds_count 100\n"))
            break;
        usleep(200000);
    }
    ck_assert_ptr_nonnull(strstr(metrics, "sandtrail_collector_accepted_total 100\n"));
    ck_assert_ptr_nonnull(strstr(metrics, "sandtrail_collector_delivery_seconds_count 100\n"));
    ck_assert_ptr_nonnull(strstr(metrics, "sandtrail_collector_produce_errors_total 0\n"));
    free(metrics);

    /* rotation by rename: the old file's last lines, then the new file */
    append(path, 100, 120);
    snprintf(cmd, sizeof(cmd), "mv %s %s.1", path, path);
    ck_assert_int_eq(system(cmd), 0);
    append(path, 120, 200);
    ck_assert_int_eq(wait_for(&w, 200, &dump), 200);

    /* rotation by copytruncate */
    snprintf(cmd, sizeof(cmd), "cp %s %s.2 && : > %s", path, path, path);
    ck_assert_int_eq(system(cmd), 0);
    usleep(300000);
    append(path, 200, 300);
    ck_assert_int_eq(wait_for(&w, 300, &dump), 300);

    /* graceful stop, lines written while down, restart: nothing re-read */
    stop(pid, SIGTERM);
    append(path, 300, 350);
    pid = start(&w);
    ck_assert_int_eq(wait_for(&w, 350, &dump), 350);
    usleep(500000);
    ck_assert_int_eq(wait_for(&w, 350, &dump), 350);

    /* killed outright: lines after the last checkpoint may come twice, none
     * may be missing */
    stop(pid, SIGKILL);
    append(path, 350, 400);
    pid = start(&w);
    int n = wait_for(&w, 400, &dump);
    ck_assert_int_ge(n, 400);
    ck_assert_int_le(n, 400 + 25);
    ck_assert_int_eq(distinct(dump, 400), 400);
    stop(pid, SIGTERM);

    free(dump);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
    world_drop(&w);
}
END_TEST

int main(void)
{
    if (world_setup())
        return EXIT_FAILURE;
    Suite *s = suite_create("tail");
    TCase *tc = tcase_create("follow");
    tcase_set_timeout(tc, 180);
    tcase_add_test(tc, tail_follows_rotation_and_restarts_without_loss);
    suite_add_tcase(s, tc);
    return world_run(s);
}
