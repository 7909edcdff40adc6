/* test_integrity.c: what one message or one sender can do to the analyzer
 * (issue 13), against the real Kafka, PostgreSQL and Redis.
 *
 * Messages are produced straight to the world's events topic (one
 * partition), with the Kafka timestamp a collector would have given them,
 * so that a test chooses both an event's claimed time and its receive
 * time. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <librdkafka/rdkafka.h>
#include <libpq-fe.h>

#include "detect.h"
#include "kafka.h"
#include "timeutil.h"
#include "runblob.h"
#include "runidx.h"
#include "world.h"

#define ANALYZER BIN "/analyzer/sandtrail-analyzer"
#define CLI BIN "/cli/sandtrail"
#define SECRET "ghp_R4nd0mT0k3nV4lu3F0rT3st1ngAbCdEf1234"

static rd_kafka_t *producer(const struct world *w)
{
    return world_topic_producer(w->topic, 1);
}

/* Produces value to partition 0 with the Kafka timestamp ts_ms. */
static void produce(rd_kafka_t *rk, const struct world *w, const char *value, int64_t ts_ms)
{
    ck_assert_int_eq(rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(w->topic), RD_KAFKA_V_PARTITION(0),
                                       RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                       RD_KAFKA_V_VALUE((void *)value, strlen(value)),
                                       RD_KAFKA_V_TIMESTAMP(ts_ms), RD_KAFKA_V_END),
                     0);
}

static void produce_done(rd_kafka_t *rk)
{
    ck_assert_int_eq(rd_kafka_flush(rk, 30000), 0);
    rd_kafka_destroy(rk);
}

/* A proxy request event of task T-I, run run; ts_us its claimed time. */
static const char *event(const char *id, int64_t ts_us, const char *run, const char *host,
                         const char *decision)
{
    static char line[1024];
    char ts[40];
    st_time_format(ts_us, ts, sizeof(ts));
    snprintf(line, sizeof(line),
             "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"%s\",\"ts\":\"%s\","
             "\"source\":{\"kind\":\"proxy\",\"name\":\"squid\"},\"task_id\":\"T-I\","
             "\"run_id\":\"%s\",\"type\":\"request\",\"decision\":\"%s\","
             "\"attrs\":{\"method\":\"GET\",\"host\":\"%s\",\"port\":443,\"status\":403,"
             "\"bytes_out\":100}}",
             id, ts, run, decision, host);
    return line;
}

static int64_t now_ms(void)
{
    return st_time_now_us() / 1000;
}

static int drain(const struct world *w, const char *opts)
{
    return run(w, w->name, w->name, "timeout 60 " ANALYZER " --drain %s 2>/dev/null", opts);
}

static long count(const struct world *w, const char *sql)
{
    char *r = rows(w->dsn, sql);
    long n = atol(r);
    free(r);
    return n;
}

/* `sandtrail evidence audit` of w's database finds every offset accounted
 * for and every stored row as signed. */
static void assert_audit_intact(const struct world *w)
{
    char *out = world_shf("SANDTRAIL_PG_DSN='%s' " CLI " evidence audit 2>&1; echo $?", w->dsn);
    ck_assert_msg(strstr(out, "intact") && strstr(out, "\n0\n"), "%s", out);
    free(out);
}

/* The offset the world's group committed for partition 0 (-1: none). */
static int64_t committed(const struct world *w)
{
    char err[512];
    rd_kafka_conf_t *kc = st_kafka_conf_new(getenv("SANDTRAIL_KAFKA_BROKERS"), err,
                                            sizeof(err));
    ck_assert_int_eq(st_kafka_conf_set(kc, "group.id", w->name, err, sizeof(err)), 0);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, kc, err, sizeof(err));
    ck_assert_ptr_nonnull(rk);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(1);
    rd_kafka_topic_partition_list_add(l, w->topic, 0);
    int64_t off = -1;
    if (rd_kafka_committed(rk, l, 10000) == 0 && l->elems[0].err == 0)
        off = l->elems[0].offset;
    rd_kafka_topic_partition_list_destroy(l);
    rd_kafka_destroy(rk);
    return off;
}

/* Item 3: a message in the events topic that is not a valid event goes to
 * the dead-letter topic with its reason, redacted; the rest is stored. */
START_TEST(integrity_invalid_messages_go_to_the_dead_letter_topic)
{
    struct world w;
    world_init(&w, "invalid");
    int64_t t = now_ms();
    rd_kafka_t *rk = producer(&w);
    produce(rk, &w, event("ok-1", t * 1000, "run-1", "a.example", "allow"), t);
    produce(rk, &w, "not json, token " SECRET, t);
    produce(rk, &w,
            "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"y0\",\"ts\":\"0000-01-01T00:00:00Z\","
            "\"source\":{\"kind\":\"proxy\",\"name\":\"squid\"},\"task_id\":\"T-I\","
            "\"run_id\":\"run-1\",\"type\":\"request\",\"attrs\":{\"host\":\"h\"}}",
            t);
    produce(rk, &w,
            "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"big\",\"ts\":\"2026-11-29T07:00:00Z\","
            "\"source\":{\"kind\":\"proxy\",\"name\":\"squid\"},\"task_id\":\"T-I\","
            "\"run_id\":\"run-1\",\"type\":\"request\",\"attrs\":{\"host\":\"h\",\"n\":1e131073}}",
            t);
    produce(rk, &w, event("ok-2", t * 1000, "run-1", "b.example", "allow"), t);
    produce_done(rk);

    ck_assert_int_eq(drain(&w, ""), 0);
    ck_assert_int_eq(count(&w, "SELECT count(*) FROM events"), 2);
    int n;
    char *dlq = topic_dump(w.dlq, &n);
    ck_assert_int_eq(n, 3);
    ck_assert_ptr_nonnull(strstr(dlq, "\"reason\":\"invalid_json\""));
    ck_assert_ptr_nonnull(strstr(dlq, "\"reason\":\"invalid_timestamp\""));
    ck_assert_ptr_nonnull(strstr(dlq, "\"reason\":\"number_out_of_range\""));
    ck_assert_ptr_nonnull(strstr(dlq, "\"partition\":0,\"offset\":1,"));
    ck_assert_ptr_nonnull(strstr(dlq, "\"schema\":\"sandtrail.dlq.v1\""));
    ck_assert_ptr_null(strstr(dlq, SECRET));
    ck_assert_ptr_nonnull(strstr(dlq, "[REDACTED:"));
    free(dlq);
    ck_assert_int_eq(committed(&w), 5);
    world_drop(&w);
}
END_TEST

/* How the batches of a loop test's run _i store their events: in the
 * batch's transaction (pg.copy_connections=1), or split (every batch's
 * events over two connections, a transaction per share committed before
 * the batch's own). */
static const char *const store_modes[] = {
    "-X pg.copy_connections=1",
    "-X pg.copy_connections=2 -X pg.copy_split_events=1",
    /* split, every side connection refused: the writer's stores its share */
    "-X pg.copy_connections=2 -X pg.copy_split_events=1 -X fault.fail_copy_sides=1000000",
};

/* Item 2: PostgreSQL refuses one event of a batch for its data (here a
 * constraint the database gained): that event is dead-lettered with
 * PostgreSQL's error, the rest of the batch is stored once and detected
 * on, and the evidence names the refused offset. Split, the share that
 * holds the event is refused, the other commits before the refusal is
 * isolated: the batch written again meets those rows on the primary key. */
START_TEST(integrity_refused_event_is_dead_lettered_and_the_rest_stored)
{
    struct world w;
    const char *mode = store_modes[_i];
    world_init(&w, (const char *[]){"refused", "refsplit", "refside"}[_i]);
    int64_t t = now_ms();
    rd_kafka_t *rk = producer(&w);
    produce(rk, &w, event("first", (t - 600000) * 1000, "run-0", "a.example", "allow"),
            t - 600000);
    rd_kafka_flush(rk, 30000);
    ck_assert_int_eq(drain(&w, ""), 0);
    char *r = rows(w.dsn, "SELECT 1");
    free(r);
    PGconn *pg = PQconnectdb(w.dsn);
    PQclear(PQexec(pg, "ALTER TABLE events ADD CONSTRAINT it_no_poison"
                       " CHECK (event_id <> 'poison')"));
    PQfinish(pg);
    for (int i = 0; i < 12; i++) {
        char id[16], host[32];
        snprintf(id, sizeof(id), i == 5 ? "poison" : "d-%d", i);
        snprintf(host, sizeof(host), "h%d.example", i);
        produce(rk, &w, event(id, (t + i * 1000) * 1000, "run-1", host, "deny"),
                t + i * 1000);
    }
    produce_done(rk);

    ck_assert_int_eq(drain(&w, mode), 0);
    ck_assert_int_eq(count(&w, "SELECT count(*) FROM events"), 12);
    ck_assert_int_eq(count(&w, "SELECT count(DISTINCT event_id) FROM events"), 12);
    ck_assert_int_eq(count(&w, "SELECT count(*) FROM events WHERE event_id = 'poison'"), 0);
    char *skips = rows(w.dsn, "SELECT kafka_partition, kafka_offset, last_offset, reason"
                              " FROM evidence_skips");
    ck_assert_str_eq(skips, "0|6|6|store_refused\n");
    free(skips);
    ck_assert_int_eq(count(&w, "SELECT count(*) FROM findings WHERE detector = 'denial_burst'"
                               " AND run_id = 'run-1'"),
                     1);
    int n;
    char *dlq = topic_dump(w.dlq, &n);
    ck_assert_int_eq(n, 1);
    ck_assert_ptr_nonnull(strstr(dlq, "\"reason\":\"store_refused\""));
    ck_assert_ptr_nonnull(strstr(dlq, "it_no_poison"));
    ck_assert_ptr_nonnull(strstr(dlq, "\"partition\":0,\"offset\":6,"));
    free(dlq);
    ck_assert_int_eq(committed(&w), 13);
    assert_audit_intact(&w);
    world_drop(&w);
}
END_TEST

/* The same event delivered twice in one batch (the same bytes resent, at
 * offsets 3 and 4): stored once, at its first offset, the second offset
 * accounted for as a duplicate by the evidence, nothing dead-lettered.
 * Split, both copies fall in the same share (by their primary key): its
 * COPY meets the conflict and goes through the staging table. */
START_TEST(integrity_event_twice_in_a_batch_is_stored_once)
{
    struct world w;
    world_init(&w, (const char *[]){"twice", "twicesplit", "twiceside"}[_i]);
    int64_t t = now_ms();
    rd_kafka_t *rk = producer(&w);
    for (int i = 0; i < 12; i++) {
        char id[16], host[32];
        snprintf(id, sizeof(id), "d-%d", i);
        snprintf(host, sizeof(host), "h%d.example", i);
        const char *line = event(id, (t + i * 1000) * 1000, "run-1", host, "deny");
        produce(rk, &w, line, t + i * 1000);
        if (i == 3)
            produce(rk, &w, line, t + i * 1000 + 10);
    }
    produce_done(rk);

    ck_assert_int_eq(drain(&w, store_modes[_i]), 0);
    char *r = rows(w.dsn, "SELECT count(*), count(DISTINCT event_id),"
                          " min(kafka_offset) FILTER (WHERE event_id = 'd-3') FROM events");
    ck_assert_str_eq(r, "12|12|3\n");
    free(r);
    r = rows(w.dsn, "SELECT kafka_partition, kafka_offset, last_offset, reason"
                    " FROM evidence_skips");
    ck_assert_str_eq(r, "0|4|4|duplicate\n");
    free(r);
    ck_assert_int_eq(count(&w, "SELECT count(*) FROM findings WHERE detector = 'denial_burst'"),
                     1);
    int n;
    free(topic_dump(w.dlq, &n));
    ck_assert_int_eq(n, 0);
    ck_assert_int_eq(committed(&w), 13);
    assert_audit_intact(&w);
    world_drop(&w);
}
END_TEST

/* Item 4: one event of the run stamped 2099 between the halves of a burst
 * neither hides the burst nor makes the second half late; it is flagged on
 * the finding. */
START_TEST(integrity_forged_future_time_hides_no_burst)
{
    struct world w;
    world_init(&w, "future");
    int64_t t = now_ms();
    rd_kafka_t *rk = producer(&w);
    for (int i = 0; i < 12; i++) {
        char id[16], host[32];
        if (i == 6)
            produce(rk, &w, event("forged", 4070908800LL * 1000000, "run-1", "x.example",
                                  "deny"),
                    t + 5500);
        snprintf(id, sizeof(id), "d-%d", i);
        snprintf(host, sizeof(host), "h%d.example", i);
        produce(rk, &w, event(id, (t + i * 1000) * 1000, "run-1", host, "deny"),
                t + i * 1000);
    }
    produce_done(rk);

    ck_assert_int_eq(drain(&w, ""), 0);
    char *r = rows(w.dsn, "SELECT severity, late_event_count, skewed_event_count"
                          " FROM findings WHERE detector = 'denial_burst'");
    ck_assert_str_eq(r, "high|0|1\n");
    free(r);
    r = rows(w.dsn, "SELECT ts, skewed FROM events WHERE event_id = 'forged'");
    ck_assert_str_eq(r, "2099-01-01 00:00:00+00|t\n");
    free(r);
    world_drop(&w);
}
END_TEST

/* Starts a live analyzer in the background, its stderr in log. */
static void live_start(const struct world *w, const char *log, const char *opts)
{
    run(w, w->name, w->name, ANALYZER " %s 2>%s & echo \\$! > %s.pid", opts, log, log);
}

/* Stops it with TERM, waits for it and returns its log. */
static char *live_stop(const struct world *w, const char *log)
{
    ck_assert_int_eq(run(w, w->name, w->name,
                         "kill -TERM \\$(cat %s.pid); while kill -0 \\$(cat %s.pid)"
                         " 2>/dev/null; do sleep 0.1; done",
                         log, log),
                     0);
    char *text = world_slurp(log);
    char pid[160];
    snprintf(pid, sizeof(pid), "%s.pid", log);
    unlink(pid);
    unlink(log);
    return text;
}

static long idle_in_transaction(const struct world *w)
{
    char sql[512];
    snprintf(sql, sizeof(sql),
             "SELECT count(*) FROM pg_stat_activity WHERE datname = '%s'"
             " AND state LIKE 'idle in transaction%%'",
             w->name);
    return count(w, sql);
}

/* Item 4: in a live analyzer, after one event stamped 2099 the later
 * events of the partition are not late and the committed offset moves past
 * the forged one at once (not after detect.lateness_s of idleness). Item 3:
 * the message that is not an event is counted by reason. */
START_TEST(integrity_forged_time_stalls_no_commit)
{
    struct world w;
    world_init(&w, "stall");
    int64_t t = now_ms();
    rd_kafka_t *rk = producer(&w);
    produce(rk, &w, event("forged", 4070908800LL * 1000000, "run-1", "x.example", "allow"),
            t);
    produce(rk, &w, "not an event", t);
    for (int i = 0; i < 5; i++) {
        char id[16];
        snprintf(id, sizeof(id), "e-%d", i);
        produce(rk, &w, event(id, (t - 100000 + i * 20000) * 1000, "run-1", "a.example",
                              "allow"),
                t);
    }
    produce_done(rk);

    char log[128];
    snprintf(log, sizeof(log), "/tmp/%s.log", w.name);
    char listen[64];
    int port = world_free_port();
    snprintf(listen, sizeof(listen), "-X metrics.listen=127.0.0.1:%d", port);
    live_start(&w, log, listen);
    int64_t off = -1;
    /* up to 60 s: the suite runs eight tests on two cores */
    for (int i = 0; i < 240 && off < 1; i++) {
        usleep(250000);
        off = committed(&w);
    }
    char *metrics = world_shf("curl -s http://127.0.0.1:%d/metrics", port);
    char *text = live_stop(&w, log);
    ck_assert_ptr_nonnull(strstr(metrics, "sandtrail_analyzer_events_skewed_total 1\n"));
    ck_assert_ptr_nonnull(strstr(metrics, "sandtrail_analyzer_dead_lettered_total{reason="
                                          "\"invalid_json\"} 1\n"));
    free(metrics);
    ck_assert_msg(off >= 1, "committed offset %lld: stuck at the forged event",
                  (long long)off);
    ck_assert_msg(strstr(text, " late=0 ") && strstr(text, " skewed=1 "), "%s", text);
    free(text);
    world_drop(&w);
}
END_TEST

/* Item 5: a live analyzer whose reorder buffer releases events after the
 * partition went idle writes a batch with no new row; afterwards, idle, no
 * session of it is left idle in a transaction. */
START_TEST(integrity_idle_analyzer_holds_no_transaction_open)
{
    struct world w;
    world_init(&w, "idletx");
    int64_t t = now_ms();
    rd_kafka_t *rk = producer(&w);
    produce(rk, &w, event("e-0", (t - 10000) * 1000, "run-1", "a.example", "allow"), t);
    produce(rk, &w, event("e-1", t * 1000, "run-1", "a.example", "allow"), t);
    produce_done(rk);

    char log[128];
    snprintf(log, sizeof(log), "/tmp/%s.log", w.name);
    live_start(&w, log, "-X detect.lateness_s=1");
    /* the analyzer makes the tables at start: wait for them (under load
     * that may take a while), then for the rows */
    world_wait_table(&w, "events", 60);
    long stored = 0;
    for (int i = 0; i < 240 && stored < 2; i++) {
        usleep(250000);
        stored = count(&w, "SELECT count(*) FROM events");
    }
    sleep(3); /* e-1 left the buffer after 1 s of idleness; now idle */
    long idle = idle_in_transaction(&w);
    char *text = live_stop(&w, log);
    ck_assert_int_eq(stored, 2);
    ck_assert_int_eq(idle, 0);
    free(text);
    world_drop(&w);
}
END_TEST

/* Item 4: twelve denials stamped 61 s apart from 1970 but received 1 s
 * apart. With detect.max_past_s set they are skewed, detected on their
 * receive time, and give the burst that twelve stamped 1 s apart give. */
START_TEST(integrity_spread_old_times_are_detected_on_receive_time)
{
    struct world w;
    world_init(&w, "past");
    int64_t t = now_ms();
    rd_kafka_t *rk = producer(&w);
    for (int i = 0; i < 12; i++) {
        char id[16], host[32];
        snprintf(id, sizeof(id), "d-%d", i);
        snprintf(host, sizeof(host), "h%d.example", i);
        produce(rk, &w, event(id, (int64_t)i * 61 * 1000000, "run-1", host, "deny"),
                t + i * 1000);
    }
    produce_done(rk);
    ck_assert_int_eq(drain(&w, "-X detect.max_past_s=86400"), 0);
    char *r = rows(w.dsn, "SELECT severity, event_count, skewed_event_count FROM findings"
                          " WHERE detector = 'denial_burst'");
    ck_assert_str_eq(r, "high|12|12\n");
    free(r);
    world_drop(&w);
}
END_TEST

/* Item 5: an analyzer stopped with TERM while a batch is being retried
 * exits 1 and says so. */
START_TEST(integrity_term_while_retrying_exits_1)
{
    struct world w;
    world_init(&w, "term");
    int64_t t = now_ms();
    rd_kafka_t *rk = producer(&w);
    produce(rk, &w, event("e-0", t * 1000, "run-1", "a.example", "allow"), t);
    rd_kafka_flush(rk, 30000);
    ck_assert_int_eq(drain(&w, ""), 0);
    produce(rk, &w, event("e-1", t * 1000, "run-1", "b.example", "allow"), t);
    produce_done(rk);

    /* inserts wait for this lock and give up after lock_timeout: an
     * availability error, retried */
    PGconn *pg = PQconnectdb(w.dsn);
    PQclear(PQexec(pg, "BEGIN"));
    PGresult *res = PQexec(pg, "LOCK TABLE events IN SHARE MODE");
    ck_assert_int_eq(PQresultStatus(res), PGRES_COMMAND_OK);
    PQclear(res);
    char log[128];
    snprintf(log, sizeof(log), "/tmp/%s.log", w.name);
    int st = run(&w, w.name, w.name,
                 "PGOPTIONS='-c lock_timeout=200' " ANALYZER " 2>%s & pid=\\$!;"
                 " for i in \\$(seq 300); do grep -q 'batch not written' %s && break;"
                 " sleep 0.1; done; kill -TERM \\$pid; wait \\$pid",
                 log, log);
    PQclear(PQexec(pg, "ROLLBACK"));
    PQfinish(pg);
    char *text = world_slurp(log);
    ck_assert_msg(strstr(text, "batch not written"), "%s", text);
    ck_assert_int_eq(st, 1);
    ck_assert_ptr_nonnull(strstr(text, "stopped while a batch was being retried"));
    free(text);
    unlink(log);
    world_drop(&w);
}
END_TEST

/* Item 5: volume_anomaly's Redis state is trimmed like runwin's windows:
 * 2 x window + lateness of event time behind the newest request: of 300
 * requests a minute apart, in batches of 50, 21 stay, in memory and in
 * Redis (every trim goes with the next checkpoint). */
START_TEST(integrity_volume_state_is_trimmed)
{
    struct world w;
    world_init(&w, "volume");
    int64_t t = now_ms() - 6 * 3600000LL;
    rd_kafka_t *rk = producer(&w);
    for (int i = 0; i < 300; i++) {
        char id[16];
        snprintf(id, sizeof(id), "r-%d", i);
        produce(rk, &w, event(id, (t + i * 60000LL) * 1000, "run-v", "a.example", "allow"),
                t + i * 60000LL);
    }
    produce_done(rk);
    ck_assert_int_eq(drain(&w, "-X batch.max_events=50 -X batch.behind_events=0"), 0);

    char key[256];
    redisContext *rc = redisConnect("127.0.0.1", atoi(strrchr(getenv("SANDTRAIL_REDIS_URL"),
                                                              ':') + 1));
    ck_assert_msg(rc && !rc->err, "redis");
    /* window 600 s, lateness 30 s: requests up to 1230 s behind the newest;
     * the run's state is its field of its bucket while small (runwin.c), a log
     * of members and a hash of buckets when large: either layout, counted alike */
    long members = -1, buckets = -1;
    snprintf(key, sizeof(key), "%s:run:b:%u", w.name,
             st_detect_run_bucket(st_runidx_hash("T-I", "run-v")));
    redisReply *r = redisCommand(rc, "HGET %s 3:T-I:5:run-v:volume_anomaly", key);
    ck_assert_ptr_nonnull(r);
    if (r->type == REDIS_REPLY_STRING) {
        struct st_runblob_reader rd;
        uint64_t n;
        int64_t ts, k, sum;
        const char *m;
        size_t len;
        ck_assert_int_eq(st_runblob_open(&rd, r->str, r->len), 0);
        ck_assert_int_eq(st_runblob_get_count(&rd, &n), 0);
        members = (long)n;
        for (uint64_t i = 0; i < n; i++)
            ck_assert_int_eq(st_runblob_get_member(&rd, &ts, &m, &len), 0);
        ck_assert_int_eq(st_runblob_get_count(&rd, &n), 0);
        for (uint64_t i = 0; i < n; i++)
            ck_assert_int_eq(st_runblob_get_episode(&rd, &m, &ts, &k), 0);
        ck_assert_int_eq(st_runblob_get_count(&rd, &n), 0);
        buckets = (long)n;
        for (uint64_t i = 0; i < n; i++)
            ck_assert_int_eq(st_runblob_get_bucket(&rd, &k, &sum), 0);
        ck_assert_int_eq(st_runblob_close(&rd), 0);
    } else {
        freeReplyObject(r);
        snprintf(key, sizeof(key), "%s:volume_anomaly:l:3:T-I:5:run-v", w.name);
        r = redisCommand(rc, "GET %s", key);
        ck_assert_int_eq(r->type, REDIS_REPLY_STRING);
        members = st_runblob_log_count(r->str, r->len);
        freeReplyObject(r);
        snprintf(key, sizeof(key), "%s:volume_anomaly:b:3:T-I:5:run-v", w.name);
        r = redisCommand(rc, "HLEN %s", key);
        buckets = (long)r->integer;
    }
    freeReplyObject(r);
    ck_assert_int_eq(members, 21);
    ck_assert_int_le(buckets, 23);
    ck_assert_int_gt(buckets, 0);
    redisFree(rc);
    world_drop(&w);
}
END_TEST

/* Item 5: the cross-platform allowlist-drift finding keeps the first
 * request of each platform's decision as evidence; the requests that
 * follow (here 50, over several batches) neither grow it nor update it. */
START_TEST(integrity_allowlist_drift_evidence_is_bounded)
{
    static const char *plat[] = {"squid", "smokescreen", "envoy", "strict"};
    struct world w;
    world_init(&w, "drift");
    int64_t t = now_ms();
    rd_kafka_t *rk = producer(&w);
    char line[1024], ts[40];
    for (int i = 0; i < 54; i++) {
        st_time_format((t + i * 100) * 1000, ts, sizeof(ts));
        snprintf(line, sizeof(line),
                 "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"r-%d\",\"ts\":\"%s\","
                 "\"source\":{\"kind\":\"proxy\",\"name\":\"p-%s\",\"platform\":\"%s\"},"
                 "\"task_id\":\"T-%d\",\"run_id\":\"run\",\"type\":\"request\","
                 "\"decision\":\"%s\",\"attrs\":{\"host\":\"drift.example\"}}",
                 i, ts, plat[i < 4 ? i : 0], plat[i < 4 ? i : 0], i % 3,
                 i == 3 ? "deny" : "allow");
        produce(rk, &w, line, t + i * 100);
    }
    produce_done(rk);
    ck_assert_int_eq(drain(&w, "-X batch.max_events=10 -X batch.behind_events=0"), 0);
    char *r = rows(w.dsn, "SELECT event_count FROM findings WHERE detector = 'scope_drift'");
    ck_assert_str_eq(r, "4\n");
    free(r);
    world_drop(&w);
}
END_TEST

int main(void)
{
    if (world_setup())
        return EXIT_FAILURE;
    Suite *s = suite_create("integrity");
    TCase *tc = tcase_create("services");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, integrity_invalid_messages_go_to_the_dead_letter_topic);
    tcase_add_loop_test(tc, integrity_refused_event_is_dead_lettered_and_the_rest_stored, 0,
                        3);
    tcase_add_loop_test(tc, integrity_event_twice_in_a_batch_is_stored_once, 0, 3);
    tcase_add_test(tc, integrity_forged_future_time_hides_no_burst);
    tcase_add_test(tc, integrity_forged_time_stalls_no_commit);
    tcase_add_test(tc, integrity_idle_analyzer_holds_no_transaction_open);
    tcase_add_test(tc, integrity_spread_old_times_are_detected_on_receive_time);
    tcase_add_test(tc, integrity_term_while_retrying_exits_1);
    tcase_add_test(tc, integrity_volume_state_is_trimmed);
    tcase_add_test(tc, integrity_allowlist_drift_evidence_is_bounded);
    suite_add_tcase(s, tc);
    return world_run(s);
}
