/* test_refusal.c: an event Kafka cannot take is one message's problem, not
 * the collector's (issue 12, item 3). A valid event of 1,000,001 to
 * 1,048,576 bytes -- under input.max_line_bytes, over what Kafka takes -- is
 * dead-lettered with its reason; --input reads on and exits 1; a spool
 * holding a record Kafka refuses dead-letters it and produces the records
 * after it, once each. Against the real Kafka. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "world.h"

static char dir[128];

/* One valid event; pad > 0 adds an attribute of pad bytes of letters that
 * do not compress (a broker limit applies to the compressed batch). */
static void write_event(FILE *f, const char *id, size_t pad)
{
    fprintf(f,
            "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"%s\","
            "\"ts\":\"2026-11-29T16:00:00Z\",\"source\":{\"kind\":\"sandbox\","
            "\"name\":\"sbx\"},\"task_id\":\"T-RF\",\"run_id\":\"run-rf\","
            "\"type\":\"exec\",\"attrs\":{\"command\":\"make\"",
            id);
    if (pad) {
        unsigned x = 12345;
        fputs(",\"blob\":\"", f);
        for (size_t i = 0; i < pad; i++) {
            x = x * 1103515245u + 12345u;
            fputc(i % 8 == 7 ? ' ' : 'a' + (int)((x >> 16) % 26), f);
        }
        fputc('"', f);
    }
    fputs("}}\n", f);
}

/* Events <tag>-0 .. <tag>-(n-1); the one at index big has pad bytes. */
static void write_input(const char *path, const char *tag, int n, int big, size_t pad)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < n; i++) {
        char id[64];
        snprintf(id, sizeof(id), "%s-%04d", tag, i);
        write_event(f, id, i == big ? pad : 0);
    }
    fclose(f);
}

static int occurrences(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

static void setup_dir(void)
{
    char cmd[300];
    snprintf(dir, sizeof(dir), "/tmp/st_refusal_%d", (int)getpid());
    snprintf(cmd, sizeof(cmd), "rm -rf %s && mkdir -p %s", dir, dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void cleanup_dir(void)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}

/* Default settings: the event is over kafka.message_max_bytes (1,000,000,
 * librdkafka's own default) and under input.max_line_bytes (1,048,576). */
START_TEST(refusal_oversized_event_is_dead_lettered_and_input_reads_on)
{
    struct world w;
    char in[200], id[32];
    int n;
    setup_dir();
    world_init(&w, "refusal");
    snprintf(in, sizeof(in), "%s/in.ndjson", dir);
    write_input(in, "rf", 10, 3, 1020000);

    int st = run(&w, w.name, w.name,
                 BIN "/collector/sandtrail-collector --input %s "
                     " 2>%s/collector.log",
                 in, dir);
    char *log = world_slurp(strcat(strcpy((char[200]){0}, dir), "/collector.log"));
    ck_assert_msg(st == 1, "exit %d (want 1: some rejected):\n%.2000s", st, log);
    free(log);

    /* every line after it was read and produced */
    char *events = topic_dump(w.topic, &n);
    ck_assert_int_eq(n, 9);
    for (int i = 0; i < 10; i++) {
        snprintf(id, sizeof(id), "\"rf-%04d\"", i);
        ck_assert_int_eq(occurrences(events, id), i == 3 ? 0 : 1);
    }
    free(events);
    /* the dead-letter topic has it, with its reason and line, quoted in part */
    char *dlq = topic_dump(w.dlq, &n);
    ck_assert_int_eq(n, 1);
    ck_assert_ptr_nonnull(strstr(dlq, "\"reason\":\"too_large\""));
    ck_assert_ptr_nonnull(strstr(dlq, "\"line\":4"));
    ck_assert_ptr_nonnull(strstr(dlq, "\"raw_truncated\":true"));
    ck_assert_ptr_nonnull(strstr(dlq, "rf-0003"));
    ck_assert_int_lt((int)strlen(dlq), 20000);
    free(dlq);
    cleanup_dir();
    world_drop(&w);
}
END_TEST

/* A spool holds a record Kafka refuses: written while Kafka was out of reach
 * by a collector that allowed larger events, replayed by one that does not.
 * The record is dead-lettered and the records after it leave, each once:
 * no replay loop on one record. */
START_TEST(refusal_in_the_spool_is_dead_lettered_and_replay_goes_on)
{
    struct world w;
    char in[200], empty[200], id[32];
    int n;
    setup_dir();
    world_init(&w, "refspool");
    snprintf(in, sizeof(in), "%s/in.ndjson", dir);
    snprintf(empty, sizeof(empty), "%s/empty.ndjson", dir);
    write_input(in, "rs", 10, 3, 1020000);
    ck_assert_int_eq(system(strcat(strcpy((char[300]){0}, "touch "), empty)), 0);

    /* Kafka out of reach: everything stays in the spool (exit 2) */
    int st = run(&w, w.name, w.name,
                 BIN "/collector/sandtrail-collector --input %s "
                     " -X spool.dir=%s/spool -X kafka.brokers=127.0.0.1:19099"
                     " -X kafka.delivery.timeout.ms=1000 -X kafka.message_max_bytes=2000000"
                     " -X input.max_line_bytes=2000000 2>%s/first.log",
                 in, dir, dir);
    ck_assert_int_eq(st, 2);

    /* Kafka within reach, the default limit: the spool is replayed */
    st = run(&w, w.name, w.name,
             BIN "/collector/sandtrail-collector --input %s "
                 " -X spool.dir=%s/spool 2>%s/second.log",
             empty, dir, dir);
    char *log = world_slurp(strcat(strcpy((char[200]){0}, dir), "/second.log"));
    ck_assert_msg(st == 1, "exit %d (want 1: one refused):\n%.2000s", st, log);
    ck_assert_ptr_nonnull(strstr(log, "refused=1"));
    free(log);

    char *events = topic_dump(w.topic, &n);
    for (int i = 0; i < 10; i++) {
        snprintf(id, sizeof(id), "\"rs-%04d\"", i);
        ck_assert_msg(occurrences(events, id) == (i == 3 ? 0 : 1), "%s seen %d times", id,
                      occurrences(events, id));
    }
    free(events);
    char *dlq = topic_dump(w.dlq, &n);
    ck_assert_int_eq(n, 1);
    ck_assert_ptr_nonnull(strstr(dlq, "\"reason\":\"too_large\""));
    ck_assert_ptr_nonnull(strstr(dlq, "Kafka refused"));
    ck_assert_ptr_nonnull(strstr(dlq, "rs-0003"));
    free(dlq);
    /* and the spool is empty */
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "test -z \"$(ls %s/spool | grep seg)\"", dir);
    ck_assert_msg(system(cmd) == 0, "the spool was not emptied");
    cleanup_dir();
    world_drop(&w);
}
END_TEST

/* The record_id of a line's dead-letter record (collector/dlq.h): a copy
 * the spool sends again (here the spool of a collector that could not
 * reach Kafka, copied before it was replayed: what a crash after the
 * delivery leaves, segments Kafka had acknowledged) carries the same id;
 * the same line rejected again gets a new one. A reader keeping one record
 * per record_id sees each rejection once. */
START_TEST(refusal_record_id_names_the_rejection_not_the_copy)
{
    struct world w;
    char in[200], empty[200], cmd[600];
    int n;
    setup_dir();
    world_init(&w, "refrecid");
    snprintf(in, sizeof(in), "%s/in.ndjson", dir);
    snprintf(empty, sizeof(empty), "%s/empty.ndjson", dir);
    FILE *f = fopen(in, "w");
    ck_assert_ptr_nonnull(f);
    fputs("this line is not an event\n", f);
    fclose(f);
    ck_assert_int_eq(system(strcat(strcpy((char[300]){0}, "touch "), empty)), 0);

    /* Kafka out of reach: the record stays in the spool, copied aside */
    int st = run(&w, w.name, w.name,
                 BIN "/collector/sandtrail-collector --input %s -X spool.dir=%s/spool"
                     " -X spool.registry= -X kafka.brokers=127.0.0.1:19099"
                     " -X kafka.delivery.timeout.ms=1000 2>%s/first.log",
                 in, dir, dir);
    ck_assert_int_eq(st, 2);
    snprintf(cmd, sizeof(cmd), "cp -r %s/spool %s/spool2", dir, dir);
    ck_assert_int_eq(system(cmd), 0);
    /* both spools replayed: the record twice */
    for (int i = 0; i < 2; i++) {
        st = run(&w, w.name, w.name,
                 BIN "/collector/sandtrail-collector --input %s -X spool.dir=%s/spool%s"
                     " -X spool.registry= 2>>%s/replay.log",
                 empty, dir, i ? "2" : "", dir);
        ck_assert_int_eq(st, 0);
    }
    /* the same line sent again: a second rejection */
    st = run(&w, w.name, w.name,
             BIN "/collector/sandtrail-collector --input %s 2>%s/again.log", in, dir);
    ck_assert_int_eq(st, 1);

    char *dlq = topic_dump(w.dlq, &n);
    ck_assert_int_eq(n, 3);
    char ids[3][33];
    int k = 0;
    for (const char *p = strstr(dlq, "\"record_id\":\""); p && k < 3;
         p = strstr(p + 1, "\"record_id\":\"")) {
        ck_assert_int_eq(sscanf(p, "\"record_id\":\"%32[0-9a-f]\"", ids[k]), 1);
        ck_assert_uint_eq(strlen(ids[k]), 32);
        k++;
    }
    ck_assert_int_eq(k, 3);
    /* two copies of the spooled record and the new rejection, in the
     * order of the topic's partitions: two ids, one of them twice */
    int same01 = !strcmp(ids[0], ids[1]), same02 = !strcmp(ids[0], ids[2]),
        same12 = !strcmp(ids[1], ids[2]);
    ck_assert_msg(same01 + same02 + same12 == 1, "ids %s %s %s", ids[0], ids[1], ids[2]);
    ck_assert_int_eq(occurrences(dlq, "this line is not an event"), 3);
    free(dlq);
    cleanup_dir();
    world_drop(&w);
}
END_TEST

/* The broker's own limit (1,048,588 by default) refuses what the
 * collector's allowed: a delivery report, not a produce error. Dead-lettered
 * too; the lines after it are read and produced; exit 1. */
START_TEST(refusal_by_the_broker_is_dead_lettered)
{
    struct world w;
    char in[200], id[32];
    int n;
    setup_dir();
    world_init(&w, "refbroker");
    snprintf(in, sizeof(in), "%s/in.ndjson", dir);
    write_input(in, "rb", 6, 2, 1100000);
    int st = run(&w, w.name, w.name,
                 BIN "/collector/sandtrail-collector --input %s "
                     " -X kafka.message_max_bytes=2000000 -X input.max_line_bytes=2000000"
                     " 2>%s/collector.log",
                 in, dir);
    ck_assert_int_eq(st, 1);
    char *events = topic_dump(w.topic, &n);
    ck_assert_int_eq(n, 5);
    for (int i = 0; i < 6; i++) {
        snprintf(id, sizeof(id), "\"rb-%04d\"", i);
        ck_assert_int_eq(occurrences(events, id), i == 2 ? 0 : 1);
    }
    free(events);
    char *dlq = topic_dump(w.dlq, &n);
    ck_assert_int_eq(n, 1);
    ck_assert_ptr_nonnull(strstr(dlq, "\"reason\":\"too_large\""));
    ck_assert_ptr_nonnull(strstr(dlq, "rb-0002"));
    free(dlq);
    cleanup_dir();
    world_drop(&w);
}
END_TEST

/* Over HTTP: the request holding the event is answered 200, the event
 * listed as rejected (too_large); the next request is answered 200 too. */
START_TEST(refusal_over_http_is_listed_and_the_next_request_is_served)
{
    struct world w;
    char batch[200], cmd[900];
    int n;
    setup_dir();
    world_init(&w, "refhttp");
    snprintf(batch, sizeof(batch), "%s/batch.ndjson", dir);
    write_input(batch, "rh", 3, 1, 1020000);
    snprintf(cmd, sizeof(cmd), "echo 'rf-token-0123456789 sandbox sbx' > %s/tokens", dir);
    ck_assert_int_eq(system(cmd), 0);
    int port = world_free_port();
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/collector/sandtrail-collector --listen 127.0.0.1:%d"
                             " -X http.tokens_file=%s/tokens 2>%s/collector.log &"
                             " echo \\$! > %s/pid",
                         port, dir, dir, dir),
                     0);
    int up = 0;
    for (int i = 0; i < 100 && !up; i++) {
        char *r = world_shf("curl -s -o /dev/null -w '%%{http_code}' -X POST "
                            "http://127.0.0.1:%d/v1/events", port);
        up = !strcmp(r, "401");
        free(r);
        if (!up)
            usleep(100000);
    }
    ck_assert_msg(up, "the collector did not start");
    for (int round = 0; round < 2; round++) {
        snprintf(cmd, sizeof(cmd),
                 "curl -s -w ' %%{http_code}' --max-time 30 -H 'Authorization: Bearer "
                 "rf-token-0123456789' --data-binary @%s http://127.0.0.1:%d/v1/events",
                 batch, port);
        char *r = world_sh(cmd);
        ck_assert_msg(strstr(r, " 200") != NULL, "round %d: %s", round, r);
        ck_assert_msg(strstr(r, "\"rejected\":1") != NULL, "%s", r);
        ck_assert_msg(strstr(r, "\"reason\":\"too_large\"") != NULL, "%s", r);
        free(r);
    }
    snprintf(cmd, sizeof(cmd),
             "pid=$(cat %s/pid); kill $pid; for i in $(seq 1 100); do kill -0 $pid "
             "2>/dev/null || exit 0; sleep 0.1; done; kill -9 $pid; exit 1",
             dir);
    ck_assert_int_eq(system(cmd), 0);
    char *events = topic_dump(w.topic, &n);
    ck_assert_int_eq(n, 4); /* rh-0000 and rh-0002, twice */
    free(events);
    char *dlq = topic_dump(w.dlq, &n);
    ck_assert_int_eq(n, 2);
    free(dlq);
    cleanup_dir();
    world_drop(&w);
}
END_TEST

/* --follow: the event is dead-lettered, the lines after it produced, and
 * the collector still runs (it used to exit, and send it again at every
 * restart). */
START_TEST(refusal_while_following_does_not_stop_the_tail)
{
    struct world w;
    char in[200], cmd[900], id[32];
    int n = 0;
    setup_dir();
    world_init(&w, "reffollow");
    snprintf(in, sizeof(in), "%s/followed.ndjson", dir);
    write_input(in, "rw", 5, 2, 1020000);
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/collector/sandtrail-collector --follow %s -X input.poll_ms=50"
                             " 2>%s/collector.log & echo \\$! > %s/pid",
                         in, dir, dir),
                     0);
    char *events = NULL;
    for (int i = 0; i < 60 && n < 4; i++) {
        usleep(500000);
        free(events);
        events = topic_dump(w.topic, &n);
    }
    ck_assert_int_eq(n, 4);
    for (int i = 0; i < 5; i++) {
        snprintf(id, sizeof(id), "\"rw-%04d\"", i);
        ck_assert_int_eq(occurrences(events, id), i == 2 ? 0 : 1);
    }
    free(events);
    snprintf(cmd, sizeof(cmd), "kill -0 $(cat %s/pid)", dir);
    ck_assert_msg(system(cmd) == 0, "the collector stopped");
    char *dlq = topic_dump(w.dlq, &n);
    ck_assert_int_eq(n, 1);
    ck_assert_ptr_nonnull(strstr(dlq, "\"reason\":\"too_large\""));
    free(dlq);
    snprintf(cmd, sizeof(cmd),
             "pid=$(cat %s/pid); kill $pid; for i in $(seq 1 100); do kill -0 $pid "
             "2>/dev/null || exit 0; sleep 0.1; done; kill -9 $pid; exit 1",
             dir);
    ck_assert_int_eq(system(cmd), 0);
    cleanup_dir();
    world_drop(&w);
}
END_TEST

/* A failed test leaves no collector behind (nor, here, a mount). */
static void teardown(void)
{
    char cmd[1000];
    if (!*dir)
        return;
    snprintf(cmd, sizeof(cmd),
             "test -f %s/pid && kill $(cat %s/pid) 2>/dev/null; sleep 0.3;"
             " mountpoint -q %s/mnt && umount %s/mnt; rm -rf %s",
             dir, dir, dir, dir, dir);
    if (system(cmd)) {
        /* nothing was left */
    }
}

int main(void)
{
    if (world_setup())
        return EXIT_FAILURE;
    Suite *s = suite_create("refusal");
    TCase *tc = tcase_create("kafka");
    tcase_set_timeout(tc, 90);
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, refusal_oversized_event_is_dead_lettered_and_input_reads_on);
    tcase_add_test(tc, refusal_in_the_spool_is_dead_lettered_and_replay_goes_on);
    tcase_add_test(tc, refusal_record_id_names_the_rejection_not_the_copy);
    tcase_add_test(tc, refusal_by_the_broker_is_dead_lettered);
    tcase_add_test(tc, refusal_over_http_is_listed_and_the_next_request_is_served);
    tcase_add_test(tc, refusal_while_following_does_not_stop_the_tail);
    suite_add_tcase(s, tc);
    return world_run(s);
}
