/* test_stranded.c: other ways the spool could strand data (issue 12, item
 * 5): a spool left behind when spool.dir is removed from the configuration
 * is reported at the next start, by name, with what to do; --input with a
 * spool does not exit 0 while records a full producer queue refused sit in
 * the open segment. Against the real Kafka. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "world.h"

static char dir[128];

static void setup_dir(void)
{
    char cmd[300];
    snprintf(dir, sizeof(dir), "/tmp/st_stranded_%d", (int)getpid());
    snprintf(cmd, sizeof(cmd), "rm -rf %s && mkdir -p %s", dir, dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void cleanup_dir(void)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void write_input(const char *path, const char *tag, int n)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < n; i++)
        fprintf(f,
                "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"%s-%05d\","
                "\"ts\":\"2026-11-29T16:00:00Z\",\"source\":{\"kind\":\"sandbox\","
                "\"name\":\"sbx\"},\"task_id\":\"T-ST%d\",\"run_id\":\"run-st\","
                "\"type\":\"exec\",\"attrs\":{\"command\":\"make\"}}\n",
                tag, i, i % 7);
    fclose(f);
}

static char *slurp_in_dir(const char *name)
{
    char path[300];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return world_slurp(path);
}

/* Kafka out of reach leaves the events in the spool; the next start without
 * spool.dir names the folder, its bytes and the fix; so does a start whose
 * spool.dir names another folder. Set back, the spool is delivered. */
START_TEST(stranded_spool_is_reported_when_spool_dir_is_removed)
{
    struct world w;
    char in[200], cmd[600];
    int n;
    setup_dir();
    world_init(&w, "stranded");
    snprintf(in, sizeof(in), "%s/in.ndjson", dir);
    write_input(in, "sd", 500);
    int st = run(&w, w.name, w.name,
                 BIN "/collector/sandtrail-collector --input %s -X spool.registry=%s/registry"
                     " -X spool.dir=%s/spool -X kafka.brokers=127.0.0.1:19099"
                     " -X kafka.delivery.timeout.ms=1000 2>%s/first.log",
                 in, dir, dir, dir);
    ck_assert_int_eq(st, 2);

    /* spool.dir removed: the same input again */
    st = run(&w, w.name, w.name,
             BIN "/collector/sandtrail-collector --input %s -X spool.registry=%s/registry"
                 " -X metrics.listen= 2>%s/second.log",
             in, dir, dir);
    char *log = slurp_in_dir("second.log");
    snprintf(cmd, sizeof(cmd), "spool \"%s/spool\" of an earlier run", dir);
    ck_assert_msg(strstr(log, cmd) != NULL, "no word of the stranded spool:\n%.2000s", log);
    ck_assert_ptr_nonnull(strstr(log, "spool.dir is now unset"));
    snprintf(cmd, sizeof(cmd), "set spool.dir=%s/spool", dir);
    ck_assert_ptr_nonnull(strstr(log, cmd));
    free(log);

    /* spool.dir naming another folder: reported too */
    st = run(&w, w.name, w.name,
             BIN "/collector/sandtrail-collector --input %s -X spool.registry=%s/registry"
                 " -X spool.dir=%s/other 2>%s/third.log",
             in, dir, dir, dir);
    log = slurp_in_dir("third.log");
    ck_assert_msg(strstr(log, "spool.dir now names another folder") != NULL, "%.2000s", log);
    free(log);

    /* set back: the stranded events are delivered (500 from here, 1000
     * from the two runs between) */
    st = run(&w, w.name, w.name,
             BIN "/collector/sandtrail-collector --input /dev/null -X spool.registry=%s/registry"
                 " -X spool.dir=%s/spool 2>%s/fourth.log",
             dir, dir, dir);
    ck_assert_int_eq(st, 0);
    char *dump = topic_dump(w.topic, &n);
    ck_assert_int_eq(n, 1500);
    free(dump);
    cleanup_dir();
    world_drop(&w);
}
END_TEST

/* A producer queue much smaller than the input: records it refuses stay in
 * the open segment; --input must produce them before it exits 0. */
START_TEST(stranded_input_with_spool_delivers_what_the_full_queue_left)
{
    struct world w;
    char in[200];
    int n;
    setup_dir();
    world_init(&w, "queuefull");
    snprintf(in, sizeof(in), "%s/in.ndjson", dir);
    write_input(in, "qf", 30000);
    int st = run(&w, w.name, w.name,
                 BIN "/collector/sandtrail-collector --input %s -X spool.dir=%s/spool"
                     " -X kafka.queue.max_messages=1000 -X kafka.linger.ms=50"
                     " 2>%s/collector.log",
                 in, dir, dir);
    char *log = slurp_in_dir("collector.log");
    ck_assert_msg(st == 0, "exit %d:\n%.2000s", st, log);
    free(log);
    char *dump = topic_dump(w.topic, &n);
    static char seen[30000];
    int missing = 0;
    memset(seen, 0, sizeof(seen));
    for (const char *p = strstr(dump, "\"qf-"); p; p = strstr(p + 1, "\"qf-")) {
        int i = atoi(p + 4);
        if (i >= 0 && i < 30000)
            seen[i] = 1;
    }
    for (int i = 0; i < 30000; i++)
        missing += !seen[i];
    free(dump);
    ck_assert_msg(missing == 0, "%d of 30000 events never reached Kafka after exit 0",
                  missing);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "test -z \"$(ls %s/spool | grep seg)\"", dir);
    ck_assert_msg(system(cmd) == 0, "the spool was not emptied");
    cleanup_dir();
    world_drop(&w);
}
END_TEST

int main(void)
{
    if (world_setup())
        return EXIT_FAILURE;
    Suite *s = suite_create("stranded");
    TCase *tc = tcase_create("spool");
    tcase_set_timeout(tc, 90);
    tcase_add_test(tc, stranded_spool_is_reported_when_spool_dir_is_removed);
    tcase_add_test(tc, stranded_input_with_spool_delivers_what_the_full_queue_left);
    suite_add_tcase(s, tc);
    return world_run(s);
}
