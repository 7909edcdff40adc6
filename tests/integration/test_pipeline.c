/* test_pipeline.c: collector -> Kafka -> analyzer -> PostgreSQL, against the
 * real services that scripts/services starts (their settings come from the
 * environment, as `scripts/services env` prints them).
 *
 * Each test works in its own PostgreSQL database, Kafka topics, consumer
 * group and Redis key prefix, so tests neither see nor disturb each other. */
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>

#include "buf.h"

#define BIN SANDTRAIL_BINARY_DIR
#define FIXTURE SANDTRAIL_SOURCE_DIR "/tests/data/demo.ndjson"

static char base_dsn[512];
static char brokers[256];

/* One isolated world: database, topics, group, Redis prefix. */
struct world {
    char name[64];
    char dsn[700];
    char topic[96];
    char dlq[96];
};

static void world_init(struct world *w, const char *tag)
{
    static int seq;
    snprintf(w->name, sizeof(w->name), "st_it_%d_%ld_%d_%s", (int)getpid(),
             (long)time(NULL) % 100000, seq++, tag);
    snprintf(w->dsn, sizeof(w->dsn), "%s dbname=%s", base_dsn, w->name);
    snprintf(w->topic, sizeof(w->topic), "%s.events", w->name);
    snprintf(w->dlq, sizeof(w->dlq), "%s.dlq", w->name);

    char dsn[700], sql[200];
    snprintf(dsn, sizeof(dsn), "%s dbname=postgres", base_dsn);
    PGconn *pg = PQconnectdb(dsn);
    ck_assert_msg(PQstatus(pg) == CONNECTION_OK, "PostgreSQL: %s", PQerrorMessage(pg));
    snprintf(sql, sizeof(sql), "CREATE DATABASE %s", w->name);
    PGresult *r = PQexec(pg, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK, "%s", PQresultErrorMessage(r));
    PQclear(r);
    PQfinish(pg);
}

static void world_drop(struct world *w)
{
    char dsn[700], sql[200];
    snprintf(dsn, sizeof(dsn), "%s dbname=postgres", base_dsn);
    PGconn *pg = PQconnectdb(dsn);
    snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS %s WITH (FORCE)", w->name);
    PQclear(PQexec(pg, sql));
    PQfinish(pg);
}

/* Runs a program with the world's settings; returns its exit status. */
static int run(const struct world *w, const char *group, const char *prefix,
               const char *fmt, ...)
{
    char cmd[4096], tail[1500];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tail, sizeof(tail), fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof(cmd),
             "SANDTRAIL_PG_DSN='%s' SANDTRAIL_TOPIC_EVENTS='%s' SANDTRAIL_TOPIC_DLQ='%s' "
             "SANDTRAIL_GROUP='%s' SANDTRAIL_GROUP_INSTANCE_ID='%s-1' "
             "SANDTRAIL_REDIS_PREFIX='%s:' %s",
             w->dsn, w->topic, w->dlq, group, group, prefix, tail);
    int st = system(cmd);
    ck_assert_msg(st != -1 && WIFEXITED(st), "could not run: %s", cmd);
    return WEXITSTATUS(st);
}

/* Every row of a query, '|' between columns, '\n' after each row. */
static char *rows(const char *dsn, const char *sql)
{
    PGconn *pg = PQconnectdb(dsn);
    ck_assert_msg(PQstatus(pg) == CONNECTION_OK, "%s", PQerrorMessage(pg));
    PGresult *r = PQexec(pg, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "%s: %s", sql,
                  PQresultErrorMessage(r));
    struct st_buf b;
    st_buf_init(&b);
    st_buf_adds(&b, "");
    for (int i = 0; i < PQntuples(r); i++) {
        for (int j = 0; j < PQnfields(r); j++) {
            if (j)
                st_buf_addc(&b, '|');
            st_buf_adds(&b, PQgetisnull(r, i, j) ? "NULL" : PQgetvalue(r, i, j));
        }
        st_buf_addc(&b, '\n');
    }
    PQclear(r);
    PQfinish(pg);
    return b.data;
}

static const char *q_findings =
    "SELECT detector, detector_version, severity, task_id, run_id,"
    " to_char(first_seen AT TIME ZONE 'UTC', 'HH24:MI:SS.MS'),"
    " to_char(last_seen AT TIME ZONE 'UTC', 'HH24:MI:SS.MS'), event_count,"
    " evidence::text, summary, finding_id, config_hash"
    " FROM findings ORDER BY finding_id";
static const char *q_events =
    "SELECT source_name, event_id, source_kind, ts, task_id, run_id, trace_id, type,"
    " decision, reason, target, body::text, kafka_partition, kafka_offset"
    " FROM events ORDER BY source_name, event_id";
static const char *q_finding_events =
    "SELECT * FROM finding_events ORDER BY 1, 2, 3";

/* Reads every message of a topic from the beginning. */
static char *topic_dump(const char *topic, int *count)
{
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", brokers, err, sizeof(err));
    rd_kafka_conf_set(conf, "group.id", "st-it-reader", err, sizeof(err));
    rd_kafka_conf_set(conf, "enable.partition.eof", "true", err, sizeof(err));
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
    ck_assert_ptr_nonnull(rk);
    const struct rd_kafka_metadata *md;
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    ck_assert_int_eq(rd_kafka_metadata(rk, 0, rkt, &md, 10000), 0);
    ck_assert_int_eq(md->topic_cnt, 1);
    int nparts = md->topics[0].partition_cnt;
    rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(nparts);
    for (int p = 0; p < nparts; p++)
        rd_kafka_topic_partition_list_add(l, topic, p)->offset = RD_KAFKA_OFFSET_BEGINNING;
    rd_kafka_assign(rk, l);
    rd_kafka_topic_partition_list_destroy(l);

    struct st_buf b;
    st_buf_init(&b);
    st_buf_adds(&b, "");
    int eofs = 0;
    *count = 0;
    time_t deadline = time(NULL) + 30;
    while (eofs < nparts && time(NULL) < deadline) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 500);
        if (!m)
            continue;
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF)
            eofs++;
        else if (!m->err) {
            st_buf_add(&b, m->payload, m->len);
            st_buf_addc(&b, '\n');
            (*count)++;
        }
        rd_kafka_message_destroy(m);
    }
    ck_assert_int_eq(eofs, nparts);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return b.data;
}

START_TEST(pipeline_finds_the_burst_and_not_the_benign_runs)
{
    struct world w;
    world_init(&w, "burst");
    ck_assert_int_eq(run(&w, w.name, w.name, BIN "/collector/sandtrail-collector --input %s",
                         FIXTURE),
                     1); /* 1: one line was rejected */
    ck_assert_int_eq(run(&w, w.name, w.name, BIN "/analyzer/sandtrail-analyzer --drain"), 0);

    char *f = rows(w.dsn, "SELECT detector, severity, task_id, run_id,"
                          " to_char(first_seen AT TIME ZONE 'UTC', 'HH24:MI:SS'),"
                          " to_char(last_seen AT TIME ZONE 'UTC', 'HH24:MI:SS'),"
                          " event_count, evidence->>'event_ids',"
                          " evidence->>'trace_ids', summary FROM findings");
    ck_assert_str_eq(
        f, "denial_burst|high|T-100|run-burst|07:00:02|07:00:35|12|"
           "[\"sq-100\", \"sq-101\", \"sq-102\", \"sq-103\", \"sq-104\", \"sq-105\", "
           "\"sq-106\", \"sq-107\", \"sq-108\", \"sq-109\", \"sq-110\", \"sq-111\"]|"
           "[\"tr-100\"]|12 denied events within 60 s to 6 distinct target(s)\n");
    free(f);
    /* every valid line, including those around the malformed one, is stored */
    char *n = rows(w.dsn, "SELECT count(*), count(*) FILTER (WHERE event_id IN"
                          " ('sq-111', 'sq-200')) FROM events");
    ck_assert_str_eq(n, "40|2\n");
    free(n);
    world_drop(&w);
}
END_TEST

START_TEST(pipeline_thresholds_come_from_config)
{
    struct world w;
    world_init(&w, "thresh");
    run(&w, w.name, w.name, BIN "/collector/sandtrail-collector --input %s 2>/dev/null",
        FIXTURE);
    /* with a threshold of 9 the 9-denial benign run fires too, at medium
     * (one target), and the slow run (at most 7 per minute) still does not */
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/analyzer/sandtrail-analyzer --drain"
                             " -X detect.denial_burst.threshold=9"),
                     0);
    char *f = rows(w.dsn, "SELECT run_id, severity, event_count FROM findings"
                          " ORDER BY run_id");
    ck_assert_str_eq(f, "run-benign|medium|9\nrun-burst|high|12\n");
    free(f);
    world_drop(&w);
}
END_TEST

START_TEST(pipeline_rejected_line_reaches_dead_letter_topic_with_reason)
{
    struct world w;
    world_init(&w, "dlq");
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/collector/sandtrail-collector --input %s 2>/dev/null",
                         FIXTURE),
                     1);
    int n;
    char *dlq = topic_dump(w.dlq, &n);
    ck_assert_int_eq(n, 1);
    ck_assert_ptr_nonnull(strstr(dlq, "\"reason\":\"invalid_json\""));
    ck_assert_ptr_nonnull(strstr(dlq, "\"line\":15"));
    ck_assert_ptr_nonnull(strstr(dlq, "\"error\":\"invalid JSON at offset 49\""));
    free(dlq);
    char *events = topic_dump(w.topic, &n);
    ck_assert_int_eq(n, 40);
    free(events);
    world_drop(&w);
}
END_TEST

/* A crash between the PostgreSQL commit and the Kafka commit makes the next
 * run replay committed rows; two such crashes and a clean finish must leave
 * exactly what one clean run leaves. */
START_TEST(pipeline_crash_and_restart_equals_clean_run)
{
    struct world clean, crashed;
    world_init(&clean, "clean");
    world_init(&crashed, "crash");
    /* both read the same topic: the clean world's */
    snprintf(crashed.topic, sizeof(crashed.topic), "%s", clean.topic);
    snprintf(crashed.dlq, sizeof(crashed.dlq), "%s", clean.dlq);
    run(&clean, clean.name, clean.name,
        BIN "/collector/sandtrail-collector --input %s 2>/dev/null", FIXTURE);

    ck_assert_int_eq(run(&clean, clean.name, clean.name,
                         BIN "/analyzer/sandtrail-analyzer --drain 2>/dev/null"
                             " -X batch.max_events=4"),
                     0);
    ck_assert_int_eq(run(&crashed, crashed.name, crashed.name,
                         BIN "/analyzer/sandtrail-analyzer --drain 2>/dev/null"
                             " -X batch.max_events=4 -X fault.crash_after_pg_commits=3"),
                     3);
    ck_assert_int_eq(run(&crashed, crashed.name, crashed.name,
                         BIN "/analyzer/sandtrail-analyzer --drain 2>/dev/null"
                             " -X batch.max_events=4 -X fault.crash_after_pg_commits=5"),
                     3);
    ck_assert_int_eq(run(&crashed, crashed.name, crashed.name,
                         BIN "/analyzer/sandtrail-analyzer --drain 2>/dev/null"
                             " -X batch.max_events=4"),
                     0);

    const char *qs[] = {q_events, q_findings, q_finding_events};
    for (int i = 0; i < 3; i++) {
        char *a = rows(clean.dsn, qs[i]), *b = rows(crashed.dsn, qs[i]);
        ck_assert_msg(strlen(a) > 0, "query %d returned nothing", i);
        ck_assert_str_eq(a, b);
        free(a);
        free(b);
    }
    char *n = rows(crashed.dsn, "SELECT count(*) FROM events");
    ck_assert_str_eq(n, "40\n");
    free(n);
    world_drop(&clean);
    world_drop(&crashed);
}
END_TEST

/* Replaying a topic from offset 0 (a new consumer group) into the same
 * database and Redis adds no row and changes no finding. */
START_TEST(pipeline_replay_from_zero_changes_nothing)
{
    struct world w;
    world_init(&w, "replay");
    run(&w, w.name, w.name, BIN "/collector/sandtrail-collector --input %s 2>/dev/null",
        FIXTURE);
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/analyzer/sandtrail-analyzer --drain 2>/dev/null"), 0);
    char *before_f = rows(w.dsn, q_findings), *before_e = rows(w.dsn, q_events);
    char group2[96];
    snprintf(group2, sizeof(group2), "%s-replay", w.name);
    ck_assert_int_eq(run(&w, group2, w.name,
                         BIN "/analyzer/sandtrail-analyzer --drain 2>/dev/null"
                             " -X batch.max_events=7"),
                     0);
    char *after_f = rows(w.dsn, q_findings), *after_e = rows(w.dsn, q_events);
    ck_assert_str_eq(before_f, after_f);
    ck_assert_str_eq(before_e, after_e);
    free(before_f);
    free(before_e);
    free(after_f);
    free(after_e);
    world_drop(&w);
}
END_TEST

int main(void)
{
    const char *dsn = getenv("SANDTRAIL_PG_DSN");
    const char *b = getenv("SANDTRAIL_KAFKA_BROKERS");
    if (!dsn || !b) {
        fprintf(stderr, "integration tests need the services: "
                        "eval \"$(scripts/services up)\"\n");
        return EXIT_FAILURE;
    }
    /* the tests choose the database themselves */
    snprintf(base_dsn, sizeof(base_dsn), "%s", dsn);
    char *db = strstr(base_dsn, "dbname=");
    if (db)
        *db = '\0';
    snprintf(brokers, sizeof(brokers), "%s", b);

    Suite *s = suite_create("pipeline");
    TCase *tc = tcase_create("services");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, pipeline_finds_the_burst_and_not_the_benign_runs);
    tcase_add_test(tc, pipeline_thresholds_come_from_config);
    tcase_add_test(tc, pipeline_rejected_line_reaches_dead_letter_topic_with_reason);
    tcase_add_test(tc, pipeline_crash_and_restart_equals_clean_run);
    tcase_add_test(tc, pipeline_replay_from_zero_changes_nothing);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
