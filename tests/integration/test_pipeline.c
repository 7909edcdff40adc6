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

#define FIXTURE SANDTRAIL_SOURCE_DIR "/tests/data/demo.ndjson"

#include "world.h"

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
                          " evidence->>'trace_ids', summary FROM findings"
                          " ORDER BY detector");
    /* the burst, and the same run probing five other hosts after the first
     * refusal; the run denied nine times and the slow run give nothing */
    ck_assert_str_eq(
        f, "denial_burst|high|T-100|run-burst|07:00:02|07:00:35|12|"
           "[\"sq-100\", \"sq-101\", \"sq-102\", \"sq-103\", \"sq-104\", \"sq-105\", "
           "\"sq-106\", \"sq-107\", \"sq-108\", \"sq-109\", \"sq-110\", \"sq-111\"]|"
           "[\"tr-100\"]|12 denied events within 60 s to 6 distinct target(s)\n"
           "retry_across_paths|medium|T-100|run-burst|07:00:02|07:00:35|12|"
           "[\"sq-100\", \"sq-101\", \"sq-102\", \"sq-103\", \"sq-104\", \"sq-105\", "
           "\"sq-106\", \"sq-107\", \"sq-108\", \"sq-109\", \"sq-110\", \"sq-111\"]|"
           "[\"tr-100\"]|5 attempt(s) at other targets within 120 s after a refusal, "
           "0 of them got through\n");
    char *ctx = rows(w.dsn, "SELECT c.commands, c.credentials FROM finding_context c"
                            " JOIN findings f USING (finding_id)"
                            " WHERE f.detector = 'denial_burst'");
    /* the command and the credential behind the network attempts */
    ck_assert_str_eq(ctx, "[\"python upload.py\"]|[\"acc-1\"]\n");
    free(ctx);
    free(f);
    /* every valid line, including those around the malformed one, is stored */
    char *n = rows(w.dsn, "SELECT count(*), count(*) FILTER (WHERE event_id IN"
                          " ('sq-111', 'sq-300')) FROM events");
    ck_assert_str_eq(n, "40|2\n");
    free(n);
    world_drop(&w);
}
END_TEST

/* Every column of a stored event says what the event says, whatever its
 * bytes: escapes in strings (a backslash, a tab, a newline, a quote, a
 * non-ASCII letter), optional fields absent or present, a time with
 * microseconds, one before 2000 (PostgreSQL's epoch: the COPY is binary,
 * so the analyzer encodes times itself) and skewed (a boolean true), the
 * Kafka timestamp as received_at (detect.max_past_s of ten years: only
 * the one of 1999 is skewed). */
START_TEST(pipeline_stored_columns_are_the_events_own)
{
    static const char *lines[] = {
        "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"esc-1\","
        "\"ts\":\"2026-11-29T07:00:02.123456Z\",\"source\":{\"kind\":\"proxy\","
        "\"name\":\"squid\",\"platform\":\"linux\"},\"task_id\":\"T-\\\\1\","
        "\"run_id\":\"run-\\u00e9\",\"type\":\"request\",\"trace_id\":\"tr\\\"1\","
        "\"decision\":\"deny\",\"reason\":\"not\\nlisted\",\"attrs\":{\"method\":"
        "\"GET\",\"host\":\"a\\\\b\\tc.example\",\"port\":443,\"status\":403}}",
        "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"old-1\","
        "\"ts\":\"1999-12-31T23:59:59.5Z\",\"source\":{\"kind\":\"sandbox\","
        "\"name\":\"sbx-a\"},\"task_id\":\"T-2\",\"run_id\":\"run-2\",\"type\":\"exec\","
        "\"attrs\":{\"command\":\"ls\",\"exit_code\":0,\"cwd\":\"/w\"}}",
        NULL};
    struct world w;
    char path[128];
    world_init(&w, "columns");
    snprintf(path, sizeof(path), "/tmp/%s.ndjson", w.name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; lines[i]; i++)
        fprintf(f, "%s\n", lines[i]);
    fclose(f);
    ck_assert_int_eq(run(&w, w.name, w.name, BIN "/collector/sandtrail-collector --input %s",
                         path),
                     0);
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/analyzer/sandtrail-analyzer --drain"
                             " -X detect.max_past_s=315360000"),
                     0);
    unlink(path);
    char *got = rows(
        w.dsn,
        "SELECT event_id, source_kind, coalesce(source_platform, '-'),"
        " to_char(ts AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US'),"
        " ts = (raw::jsonb->>'ts')::timestamptz, task_id = raw::jsonb->>'task_id',"
        " run_id = raw::jsonb->>'run_id', length(run_id),"
        " coalesce(trace_id, '-') = coalesce(raw::jsonb->>'trace_id', '-'),"
        " type, decision, coalesce(reason, '-') = coalesce(raw::jsonb->>'reason', '-'),"
        " target = coalesce(raw::jsonb->'attrs'->>'host', raw::jsonb->'attrs'->>'command'),"
        " length(target), body = raw::jsonb, kafka_partition >= 0 AND kafka_offset >= 0,"
        " received_at > now() - interval '10 minutes' AND received_at <= now(), skewed"
        " FROM events ORDER BY event_id");
    ck_assert_str_eq(got, "esc-1|proxy|linux|2026-11-29 07:00:02.123456|t|t|t|5|t|request|"
                          "deny|t|t|13|t|t|t|f\n"
                          "old-1|sandbox|-|1999-12-31 23:59:59.500000|t|t|t|5|t|exec|"
                          "allow|t|t|2|t|t|t|t\n");
    free(got);
    world_drop(&w);
}
END_TEST

START_TEST(pipeline_thresholds_come_from_config)
{
    struct world w;
    world_init(&w, "thresh");
    run(&w, w.name, w.name, BIN "/collector/sandtrail-collector --input %s 2>/dev/null",
        FIXTURE);
    /* with a threshold of 9 for task T-200 its 9-denial run fires too, at
     * medium (one target); the slow run (at most 7 per minute) still does
     * not, nor would it at 9 */
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/analyzer/sandtrail-analyzer --drain"
                             " -X override.task.T-200.detect.denial_burst.threshold=9"
                             " -X override.task.T-300.detect.denial_burst.threshold=9"),
                     0);
    char *f = rows(w.dsn, "SELECT run_id, severity, event_count FROM findings"
                          " WHERE detector = 'denial_burst' ORDER BY run_id");
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
    ck_assert_ptr_nonnull(strstr(dlq, "\"error\":\"invalid JSON at offset 50\""));
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
                             " -X batch.max_events=4 -X batch.behind_events=0"),
                     0);
    ck_assert_int_eq(run(&crashed, crashed.name, crashed.name,
                         BIN "/analyzer/sandtrail-analyzer --drain 2>/dev/null"
                             " -X batch.max_events=4 -X batch.behind_events=0 -X fault.crash_after_pg_commits=3"),
                     3);
    ck_assert_int_eq(run(&crashed, crashed.name, crashed.name,
                         BIN "/analyzer/sandtrail-analyzer --drain 2>/dev/null"
                             " -X batch.max_events=4 -X batch.behind_events=0 -X fault.crash_after_pg_commits=5"),
                     3);
    ck_assert_int_eq(run(&crashed, crashed.name, crashed.name,
                         BIN "/analyzer/sandtrail-analyzer --drain 2>/dev/null"
                             " -X batch.max_events=4 -X batch.behind_events=0"),
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
                             " -X batch.max_events=7 -X batch.behind_events=0"),
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

/* Two worlds on one topic: clean and pair (tags tc, tp), the scenarios'
 * events (all but the alerts') loaded into it by the collector; input is
 * the file they were read from, to unlink. */
static void shared_topic(struct world *clean, struct world *pair, const char *tc,
                         const char *tp, char *input, size_t inlen)
{
    snprintf(input, inlen, "/tmp/st_%s_%d.ndjson", tp, (int)getpid());
    char cmd[1200];
    snprintf(cmd, sizeof(cmd),
             "cat " SANDTRAIL_SOURCE_DIR "/tests/data/scenarios/[!a]*.ndjson > %s.part && "
             "mv %s.part %s", input, input, input);
    ck_assert_int_eq(system(cmd), 0);
    world_init(clean, tc);
    world_init(pair, tp);
    snprintf(pair->topic, sizeof(pair->topic), "%s", clean->topic);
    snprintf(pair->dlq, sizeof(pair->dlq), "%s", clean->dlq);
    ck_assert_int_eq(run(clean, clean->name, clean->name,
                         BIN "/collector/sandtrail-collector --input %s 2>/dev/null", input),
                     0);
}

/* The stored events, findings and their evidence rows of two worlds are
 * the same (and not empty). */
static void assert_same_tables(const struct world *a, const struct world *b)
{
    const char *qs[] = {q_events, q_findings, q_finding_events};
    for (int i = 0; i < 3; i++) {
        char *x = rows(a->dsn, qs[i]), *y = rows(b->dsn, qs[i]);
        ck_assert_msg(strlen(x) > 0, "query %d returned nothing", i);
        ck_assert_str_eq(x, y);
        free(x);
        free(y);
    }
}

/* Two analyzers in one group split the partitions; one is killed between
 * its PostgreSQL and Kafka commits mid-stream and started again. The tables
 * must equal those of one analyzer run clean. */
START_TEST(pipeline_two_analyzers_one_killed_equal_one_clean)
{
    struct world clean, pair;
    char input[256];
    shared_topic(&clean, &pair, "one", "two", input, sizeof(input));
    ck_assert_int_eq(run(&clean, clean.name, clean.name,
                         BIN "/analyzer/sandtrail-analyzer --drain 2>/dev/null"
                             " -X batch.max_events=50 -X batch.behind_events=0"),
                     0);
    /* a: crashes after 3 commits, then comes back with the same instance id;
     * b: runs beside it throughout */
    run(&pair, pair.name, pair.name,
        "( " BIN "/analyzer/sandtrail-analyzer --drain -X batch.max_events=50 -X batch.behind_events=0"
        " -X kafka.group.instance_id=a -X fault.crash_after_pg_commits=3 2>/dev/null;"
        "  " BIN "/analyzer/sandtrail-analyzer --drain -X batch.max_events=50 -X batch.behind_events=0"
        " -X kafka.group.instance_id=a 2>/dev/null ) &"
        " " BIN "/analyzer/sandtrail-analyzer --drain -X batch.max_events=50 -X batch.behind_events=0"
        " -X kafka.group.instance_id=b 2>/dev/null; wait");
    /* whoever finished first may have left partitions to the other: drain
     * once more to be sure everything was seen, as an operator would */
    ck_assert_int_eq(run(&pair, pair.name, pair.name,
                         BIN "/analyzer/sandtrail-analyzer --drain 2>/dev/null"
                             " -X kafka.group.instance_id=a"),
                     0);
    assert_same_tables(&clean, &pair);
    char *n = rows(pair.dsn, "SELECT count(*) > 2000, count(DISTINCT kafka_partition) > 1"
                             " FROM events");
    ck_assert_str_eq(n, "t|t\n");
    free(n);
    unlink(input);
    world_drop(&clean);
    world_drop(&pair);
}
END_TEST

/* A rebalance while a batch is being detected (detect.overlap: a batch
 * polled while behind is detected on a thread of its own while the main
 * thread polls the next). a drains the backlog in batches whose detection
 * is slowed (fault.slow_detect_ms; batch.behind_ms=0: the events were
 * just written, and a batch grows past batch.max_events only when it is
 * behind), so that when b joins the group, a's
 * revoke comes inside its poll while the detection thread holds a batch:
 * that batch is detected and stored first, then every change written and
 * the offsets committed, before the partitions go. The tables equal one
 * clean analyzer's, and a's log says the revoke met a detection. */
START_TEST(pipeline_rebalance_while_detecting_equals_one_clean)
{
    struct world clean, pair;
    char input[256], alog[256];
    snprintf(alog, sizeof(alog), "/tmp/st_rebal_%d.a.log", (int)getpid());
    shared_topic(&clean, &pair, "rbclean", "rbpair", input, sizeof(input));
#define REBAL_BATCH                                                                      \
    " -X batch.max_events=20 -X batch.behind_events=50 -X batch.behind_ms=0"                \
    " -X detect.overlap=1"
    ck_assert_int_eq(run(&clean, clean.name, clean.name,
                         BIN "/analyzer/sandtrail-analyzer --drain 2>/dev/null" REBAL_BATCH),
                     0);
    /* a: every detection 250 ms late, about 43 batches (11 s); b joins a
     * second in (its join takes a few seconds more) */
    run(&pair, pair.name, pair.name,
        BIN "/analyzer/sandtrail-analyzer --drain" REBAL_BATCH
            " -X kafka.group.instance_id=a -X fault.slow_detect_ms=250 2>%s &"
            " sleep 1; " BIN "/analyzer/sandtrail-analyzer --drain" REBAL_BATCH
            " -X kafka.group.instance_id=b 2>/dev/null; wait",
        alog);
    ck_assert_int_eq(run(&pair, pair.name, pair.name,
                         BIN "/analyzer/sandtrail-analyzer --drain 2>/dev/null" REBAL_BATCH
                             " -X kafka.group.instance_id=a"),
                     0);
#undef REBAL_BATCH
    char *log = world_slurp(alog);
    ck_assert_msg(strstr(log, "revoked while a batch was being detected") != NULL,
                  "no revoke met a detection (%s):\n%.3000s", alog, log);
    free(log);
    assert_same_tables(&clean, &pair);
    unlink(input);
    unlink(alog);
    world_drop(&clean);
    world_drop(&pair);
}
END_TEST

/* Redis goes away in the middle of a drain and comes back: the analyzer
 * retries the batch instead of skipping detection or committing, and ends
 * with the tables of a run that saw no outage. The Redis here is a second,
 * real one that the test starts and stops, so the shared one is left alone. */
START_TEST(pipeline_redis_outage_loses_and_duplicates_nothing)
{
    struct world clean, outage;
    char input[256], dir[128], log[160];
    snprintf(input, sizeof(input), "/tmp/st_outage_%d.ndjson", (int)getpid());
    snprintf(dir, sizeof(dir), "/tmp/st_outage_redis_%d", (int)getpid());
    snprintf(log, sizeof(log), "/tmp/st_outage_%d.log", (int)getpid());
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "cat " SANDTRAIL_SOURCE_DIR "/tests/data/scenarios/[!a]*.ndjson > %s", input);
    ck_assert_int_eq(system(cmd), 0);
#define START_REDIS                                                            \
    "mkdir -p %s && redis-server --bind 127.0.0.1 --port %d --dir %s"          \
    " --daemonize yes --appendonly yes --appendfsync always --save ''"         \
    " --logfile %s/log --pidfile %s/pid >/dev/null"
    /* its own port: no other Redis can stand in for it */
    int port = world_free_port();
    snprintf(cmd, sizeof(cmd), START_REDIS, dir, port, dir, dir, dir);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(cmd, sizeof(cmd),
             "for i in $(seq 1 100); do redis-cli -p %d ping 2>/dev/null | grep -q PONG &&"
             " exit 0; sleep 0.1; done; exit 1", port);
    ck_assert_msg(system(cmd) == 0, "the test's Redis did not start");

    world_init(&clean, "calm");
    world_init(&outage, "outage");
    snprintf(outage.topic, sizeof(outage.topic), "%s", clean.topic);
    snprintf(outage.dlq, sizeof(outage.dlq), "%s", clean.dlq);
    run(&clean, clean.name, clean.name,
        BIN "/collector/sandtrail-collector --input %s 2>/dev/null", input);
    ck_assert_int_eq(run(&clean, clean.name, clean.name,
                         BIN "/analyzer/sandtrail-analyzer --drain 2>/dev/null"
                             " -X batch.max_events=8 -X batch.behind_events=0"),
                     0);
    /* the drain in the background; Redis stops for three seconds once the
     * analyzer has connected to it and before its first batch (it is still
     * joining its group then: a drain done faster than any fixed pause
     * would otherwise see no outage) */
    run(&outage, outage.name, outage.name,
        BIN "/analyzer/sandtrail-analyzer --drain -X batch.max_events=8 -X batch.behind_events=0"
            " -X redis.url=redis://127.0.0.1:%d/0 2>%s & echo \\$! > %s.pid",
        port, log, log);
    snprintf(cmd, sizeof(cmd),
             "for i in $(seq 1 300); do grep -q 'consuming' %s 2>/dev/null && exit 0;"
             " sleep 0.1; done; exit 1", log);
    ck_assert_msg(system(cmd) == 0, "the analyzer did not start");
    snprintf(cmd, sizeof(cmd), "redis-cli -p %d shutdown >/dev/null 2>&1; sleep 3", port);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(cmd, sizeof(cmd), START_REDIS, dir, port, dir, dir, dir);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(cmd, sizeof(cmd),
             "pid=$(cat %s.pid); for i in $(seq 1 120); do kill -0 $pid 2>/dev/null ||"
             " exit 0; sleep 0.5; done; exit 1",
             log);
    ck_assert_msg(system(cmd) == 0, "the analyzer did not finish after Redis returned");

    char *text = NULL;
    FILE *f = fopen(log, "r");
    ck_assert_ptr_nonnull(f);
    struct st_buf b;
    char chunk[4096];
    size_t n;
    st_buf_init(&b);
    st_buf_adds(&b, "");
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        st_buf_add(&b, chunk, n);
    fclose(f);
    text = b.data;
    ck_assert_msg(strstr(text, "retrying") != NULL, "the outage was not seen:\n%s", text);

    const char *qs[] = {q_events, q_findings, q_finding_events};
    for (int i = 0; i < 3; i++) {
        char *x = rows(clean.dsn, qs[i]), *y = rows(outage.dsn, qs[i]);
        ck_assert_str_eq(x, y);
        free(x);
        free(y);
    }
    free(text);
    snprintf(cmd, sizeof(cmd), "redis-cli -p %d shutdown nosave >/dev/null 2>&1", port);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(cmd, sizeof(cmd), "rm -rf %s %s %s %s.pid", dir, input, log, log);
    ck_assert_int_eq(system(cmd), 0);
    world_drop(&clean);
    world_drop(&outage);
}
END_TEST

/* A live analyzer serves Prometheus metrics: events, findings by detector
 * and severity, consumer lag per partition; and no event content. */
START_TEST(pipeline_live_analyzer_serves_metrics)
{
    struct world w;
    char *text = NULL, pidf[64];
    int port = world_free_port();
    snprintf(pidf, sizeof(pidf), "/tmp/st_metrics_%d.pid", (int)getpid());
    world_init(&w, "metrics");
    run(&w, w.name, w.name, BIN "/collector/sandtrail-collector --input %s 2>/dev/null",
        FIXTURE);
    run(&w, w.name, w.name,
        BIN "/analyzer/sandtrail-analyzer -X metrics.listen=127.0.0.1:%d"
            " -X detect.lateness_s=1 2>/dev/null & echo \\$! > %s",
        port, pidf);
    for (int i = 0; i < 60; i++) {
        free(text);
        text = NULL;
        char curl[64];
        snprintf(curl, sizeof(curl), "curl -s http://127.0.0.1:%d/metrics", port);
        FILE *p = popen(curl, "r");
        struct st_buf b;
        char chunk[4096];
        size_t n;
        st_buf_init(&b);
        st_buf_adds(&b, "");
        while ((n = fread(chunk, 1, sizeof(chunk), p)) > 0)
            st_buf_add(&b, chunk, n);
        pclose(p);
        text = b.data;
        if (strstr(text, "sandtrail_analyzer_events_total 40\n") &&
            strstr(text, "detector=\"denial_burst\",severity=\"high\"") &&
            strstr(text, "sandtrail_analyzer_consumer_lag{partition="))
            break;
        usleep(500000);
    }
    char kill[200];
    snprintf(kill, sizeof(kill), "kill $(cat %s); rm -f %s", pidf, pidf);
    ck_assert_int_eq(system(kill), 0);
    ck_assert_ptr_nonnull(strstr(text, "sandtrail_analyzer_events_total 40\n"));
    ck_assert_ptr_nonnull(strstr(text, "sandtrail_analyzer_finding_updates_total{detector="
                                       "\"denial_burst\",severity=\"high\"}"));
    ck_assert_ptr_nonnull(strstr(text, "sandtrail_analyzer_consumer_lag{partition="));
    ck_assert_ptr_nonnull(strstr(text, "sandtrail_analyzer_pg_seconds_bucket{le=\"+Inf\"}"));
    ck_assert_ptr_null(strstr(text, "example"));
    ck_assert_ptr_null(strstr(text, "T-100"));
    free(text);
    world_drop(&w);
}
END_TEST

/* A live pipe (`tail -F log | sandtrail-collector --input -`): a line is
 * produced while the pipe stays open and quiet, not once a batch of lines
 * has filled (a slow stream would otherwise wait for minutes, and reading
 * waited for a megabyte of input). */
START_TEST(pipeline_stdin_line_is_produced_while_the_pipe_is_quiet)
{
    struct world w;
    char input[128], pidf[128];
    world_init(&w, "pipe");
    snprintf(input, sizeof(input), "/tmp/st_pipe_%d.ndjson", (int)getpid());
    snprintf(pidf, sizeof(pidf), "/tmp/st_pipe_%d.pid", (int)getpid());
    char *cmd = world_shf("head -n 1 " SANDTRAIL_SOURCE_DIR "/tests/data/demo.ndjson > %s",
                          input);
    free(cmd);
    /* the writer keeps the pipe open for 20 s after its one line */
    run(&w, w.name, w.name,
        "(cat %s; sleep 20) | " BIN "/collector/sandtrail-collector --input - 2>/dev/null"
        " & echo \\$! > %s",
        input, pidf);
    int count = 0;
    for (int i = 0; i < 100 && count == 0; i++) {
        free(topic_dump(w.topic, &count));
        if (count == 0)
            usleep(100000);
    }
    cmd = world_shf("kill $(cat %s) 2>/dev/null; rm -f %s %s", pidf, pidf, input);
    free(cmd);
    ck_assert_msg(count == 1, "the line was not produced while the pipe was open (%d)",
                  count);
    world_drop(&w);
}
END_TEST

int main(void)
{
    if (world_setup())
        return EXIT_FAILURE;
    Suite *s = suite_create("pipeline");
    TCase *tc = tcase_create("services");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, pipeline_finds_the_burst_and_not_the_benign_runs);
    tcase_add_test(tc, pipeline_stdin_line_is_produced_while_the_pipe_is_quiet);
    tcase_add_test(tc, pipeline_stored_columns_are_the_events_own);
    tcase_add_test(tc, pipeline_thresholds_come_from_config);
    tcase_add_test(tc, pipeline_rejected_line_reaches_dead_letter_topic_with_reason);
    tcase_add_test(tc, pipeline_crash_and_restart_equals_clean_run);
    tcase_add_test(tc, pipeline_replay_from_zero_changes_nothing);
    tcase_add_test(tc, pipeline_two_analyzers_one_killed_equal_one_clean);
    tcase_add_test(tc, pipeline_rebalance_while_detecting_equals_one_clean);
    tcase_add_test(tc, pipeline_live_analyzer_serves_metrics);
    tcase_add_test(tc, pipeline_redis_outage_loses_and_duplicates_nothing);
    suite_add_tcase(s, tc);
    return world_run(s);
}
