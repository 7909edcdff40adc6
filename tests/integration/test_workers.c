/* test_workers.c: more accepting threads change nothing but the speed.
 *
 * 20,000 lines -- every 97th malformed, every 50th holding a token -- go
 * through the collector with input.workers=1 and with input.workers=4 (more
 * than this machine's cores, so the threads interleave). Both runs give the
 * same events and dead-letter records in the same order: each task's events
 * in input order (a task is one key, one partition), the rejections
 * reported on stderr with their line numbers in increasing order. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "world.h"

#define LINES 20000
#define TASKS 5
#define TOKEN "ghp_Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAB7C"

static int malformed(int i)
{
    return i % 97 == 96;
}

static void write_input(const char *path)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < LINES; i++) {
        if (malformed(i))
            fprintf(f, "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"w-%d\"\n", i);
        else
            fprintf(f,
                    "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"w-%d\","
                    "\"ts\":\"2026-11-29T12:00:00Z\",\"source\":{\"kind\":\"sandbox\","
                    "\"name\":\"sbx\"},\"task_id\":\"T-W%d\",\"run_id\":\"run-w\","
                    "\"type\":\"exec\",\"attrs\":{\"command\":\"step %d%s\"}}\n",
                    i, i % TASKS, i, i % 50 == 0 ? " " TOKEN : "");
    }
    fclose(f);
}

/* Checks that each task's events come in input order; returns how many. */
static int check_order(const char *dump)
{
    int last[TASKS], n = 0;
    for (int t = 0; t < TASKS; t++)
        last[t] = -1;
    for (const char *p = strstr(dump, "\"event_id\":\"w-"); p;
         p = strstr(p + 1, "\"event_id\":\"w-")) {
        int id = atoi(p + strlen("\"event_id\":\"w-"));
        int t = id % TASKS;
        ck_assert_msg(id > last[t], "task %d: event %d after %d", t, id, last[t]);
        last[t] = id;
        n++;
    }
    return n;
}

/* 1 when a and b hold the same lines (the dump's interleaving of the
 * partitions is the consumer's, not the producer's). */
static int same_lines(const char *dir, const char *a, const char *b)
{
    char pa[160], pb[160], cmd[1100];
    snprintf(pa, sizeof(pa), "%s/a", dir);
    snprintf(pb, sizeof(pb), "%s/b", dir);
    FILE *f = fopen(pa, "w");
    fputs(a, f);
    fclose(f);
    f = fopen(pb, "w");
    fputs(b, f);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "sort %s > %s.s && sort %s > %s.s && cmp -s %s.s %s.s", pa, pa,
             pb, pb, pa, pb);
    return system(cmd) == 0;
}

/* The line numbers of the rejections on stderr, in order, one a line. */
static char *rejected_lines(const char *log)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd),
             "sed -n 's/^[^:]*:\\([0-9]*\\): rejected: .*/\\1/p' %s", log);
    return world_sh(cmd);
}

START_TEST(workers_keep_input_order)
{
    char dir[128], input[160], log1[160], log4[160];
    snprintf(dir, sizeof(dir), "/tmp/st_workers_%d", (int)getpid());
    snprintf(input, sizeof(input), "%s/in.ndjson", dir);
    snprintf(log1, sizeof(log1), "%s/w1.log", dir);
    snprintf(log4, sizeof(log4), "%s/w4.log", dir);
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s && mkdir -p %s", dir, dir);
    ck_assert_int_eq(system(cmd), 0);
    write_input(input);

    struct world one, four;
    world_init(&one, "work1");
    world_init(&four, "work4");
    ck_assert_int_eq(run(&one, one.name, one.name,
                         BIN "/collector/sandtrail-collector -X input.workers=1 --input %s"
                             " 2>%s",
                         input, log1),
                     1);
    ck_assert_int_eq(run(&four, four.name, four.name,
                         BIN "/collector/sandtrail-collector -X input.workers=4 --input %s"
                             " 2>%s",
                         input, log4),
                     1);

    int bad = 0;
    char expect[LINES / 97 * 8 + 16] = "";
    for (int i = 0; i < LINES; i++)
        if (malformed(i)) {
            bad++;
            snprintf(expect + strlen(expect), sizeof(expect) - strlen(expect), "%d\n", i + 1);
        }
    int n1, n4, d1, d4;
    char *ev1 = topic_dump(one.topic, &n1), *ev4 = topic_dump(four.topic, &n4);
    char *dl1 = topic_dump(one.dlq, &d1), *dl4 = topic_dump(four.dlq, &d4);
    ck_assert_int_eq(n4, LINES - bad);
    ck_assert_int_eq(d4, bad);
    ck_assert_int_eq(check_order(ev4), LINES - bad);
    ck_assert_int_eq(check_order(ev1), LINES - bad);
    /* the same messages, the same per-partition order, the same records */
    ck_assert_int_eq(n1, n4);
    ck_assert_int_eq(same_lines(dir, ev1, ev4), 1);
    ck_assert_ptr_null(strstr(ev4, TOKEN));
    ck_assert_int_eq(d1, d4);
    char *r1 = rejected_lines(log1), *r4 = rejected_lines(log4);
    ck_assert_str_eq(r4, expect);
    ck_assert_str_eq(r1, expect);
    /* the dead-letter records name the same lines (the clock aside) */
    for (const char *p = expect; *p; p = strchr(p, '\n') + 1) {
        char needle[32];
        snprintf(needle, sizeof(needle), "\"line\":%d,", atoi(p));
        ck_assert_msg(strstr(dl4, needle) != NULL, "no dead-letter record for line %d",
                      atoi(p));
    }

    free(r1);
    free(r4);
    free(ev1);
    free(ev4);
    free(dl1);
    free(dl4);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
    world_drop(&one);
    world_drop(&four);
}
END_TEST

int main(void)
{
    if (world_setup())
        return EXIT_FAILURE;
    Suite *s = suite_create("workers");
    TCase *tc = tcase_create("services");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, workers_keep_input_order);
    suite_add_tcase(s, tc);
    return world_run(s);
}
