/* test_roles.c: a store and a detect analyzer (analyzer.role), each in its
 * own consumer group, leave what one analyzer of the all role leaves on
 * the same stream: the same events, findings, finding_events and evidence,
 * and one dead-letter record per bad message (written by the store role
 * only), whichever of the two runs ahead and when detect crashes between
 * its PostgreSQL and Kafka commits. Against the real services. */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "timeutil.h"
#include "world.h"

#define ANALYZER BIN "/analyzer/sandtrail-analyzer"
#define COLLECTOR BIN "/collector/sandtrail-collector"
#define CLI BIN "/cli/sandtrail"

/* denial_burst, retry_across_paths and volume_anomaly all fire; several
 * batches; a checkpoint every 500 leaves; a batch grows while as many
 * events again wait, however recent (batch.behind_ms=0) */
#define OPTS                                                                           \
    " --drain -X batch.max_events=400 -X batch.behind_ms=0"                           \
    " -X detect.denial_burst.threshold=4"                                              \
    " -X detect.volume_anomaly.window_s=120 -X detect.volume_anomaly.max_requests=25" \
    " -X evidence.checkpoint_events=500 -X detect.lateness_s=5"

static const char *queries[] = {
    "SELECT source_name, event_id, ts, task_id, run_id, type, decision, target,"
    " body::text, skewed, kafka_partition, kafka_offset FROM events"
    " ORDER BY source_name, event_id",
    "SELECT finding_id, detector, detector_version, severity, task_id, run_id,"
    " first_seen, last_seen, event_count, late_event_count, skewed_event_count,"
    " evidence::text, summary, config_hash FROM findings ORDER BY finding_id",
    "SELECT * FROM finding_events ORDER BY 1, 2, 3",
    /* which notifications a finding gets depends on the batches it grew
     * in (created medium, then raised to high, or created high at once):
     * what must hold is that each finding was notified at its severity */
    "SELECT f.finding_id, f.severity, bool_or(n.severity = f.severity)"
    " FROM findings f LEFT JOIN notifications n USING (finding_id)"
    " WHERE f.status <> 'false_positive' GROUP BY 1, 2 ORDER BY 1",
    "SELECT kafka_topic, kafka_partition, seq, first_offset, last_offset, tree_size,"
    " root, hash, body, signature FROM evidence_checkpoints ORDER BY 1, 2, 3",
    "SELECT * FROM evidence_skips ORDER BY 1, 2, 3",
};

/* A proxy request of run r-<run>, t_ms after 2026-11-29T07:00:00Z. */
static void request(FILE *f, const char *id, int run, long t_ms, int deny,
                    const char *host, const char *path, int status)
{
    fprintf(f,
            "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"%s\","
            "\"ts\":\"2026-11-29T%02ld:%02ld:%02ld.%03ldZ\","
            "\"source\":{\"kind\":\"proxy\",\"name\":\"squid\"},"
            "\"task_id\":\"T-%d\",\"run_id\":\"r-%d\",\"trace_id\":\"tr-%d\","
            "\"type\":\"request\",\"decision\":\"%s\",%s\"attrs\":{\"method\":\"GET\","
            "\"host\":\"%s\",\"path\":\"%s\",\"port\":443,\"status\":%d,"
            "\"bytes_out\":%ld}}\n",
            id, 7 + t_ms / 3600000, t_ms / 60000 % 60, t_ms / 1000 % 60, t_ms % 1000, run,
            run, run, deny ? "deny" : "allow",
            deny ? "\"reason\":\"not_in_allowlist\"," : "", host, path, status,
            100 + t_ms % 900);
}

/* n events of 16 runs, one every 250 ms of event time, with bursts: every
 * 40th event starts six denials in a row from one run. */
static void bursts(const char *path, unsigned seed, int n, int from)
{
    static const char *hosts[] = {"a.example", "b.example", "c.example", "d.example"};
    static const char *paths[] = {"/", "/x", "/y"};
    FILE *f = fopen(path, "w");
    char id[32];
    int burst = 0, brun = 0;
    ck_assert_ptr_nonnull(f);
    srand(seed);
    for (int i = from; i < from + n; i++) {
        long t_ms = 250L * i;
        int run = rand() % 16, r = rand() % 100;
        if (i % 40 == 0) {
            burst = 6;
            brun = run;
        }
        snprintf(id, sizeof(id), "ro%u-%d", seed, i);
        if (burst > 0) {
            burst--;
            request(f, id, brun, t_ms, 1, hosts[rand() % 4], paths[rand() % 3], 403);
        } else {
            request(f, id, run, t_ms, r < 15, hosts[rand() % 4], paths[rand() % 3],
                    r < 15 ? 403 : r < 25 ? 404 : 200);
        }
    }
    fclose(f);
}

/* w, its topic holding n events of bursts(seed), loaded by the collector. */
static void world_loaded(struct world *w, const char *tag, unsigned seed, int n)
{
    char input[128];
    world_init(w, tag);
    snprintf(input, sizeof(input), "/tmp/st_roles_%s_%d.ndjson", tag, (int)getpid());
    bursts(input, seed, n, 0);
    ck_assert_int_eq(run(w, w->name, w->name, COLLECTOR " --input %s 2>/dev/null", input), 0);
    unlink(input);
}

/* ref's topic: 1,500 events, two messages that are not events, 1,500 more,
 * drained by the all role with every batch's events in its own transaction
 * (pg.copy_connections=1: the reference the split batches are held to).
 * pair reads the same topic and has its own dead-letter topic. */
static void setup(struct world *ref, struct world *pair, const char *tag)
{
    char input[128], tag2[64];
    world_init(ref, tag);
    snprintf(tag2, sizeof(tag2), "%s2", tag);
    world_init(pair, tag2);
    snprintf(pair->topic, sizeof(pair->topic), "%s", ref->topic);
    snprintf(input, sizeof(input), "/tmp/st_roles_%d.ndjson", (int)getpid());
    bursts(input, 7, 1500, 0);
    ck_assert_int_eq(run(ref, ref->name, ref->name, COLLECTOR " --input %s 2>/dev/null",
                         input),
                     0);
    FILE *f = fopen(input, "w");
    ck_assert_ptr_nonnull(f);
    fputs("not json at all\n{\"schema\":1}\n", f);
    fclose(f);
    free(world_shf("kcat -P -b '%s' -t '%s' < %s", getenv("SANDTRAIL_KAFKA_BROKERS"),
                   ref->topic, input));
    bursts(input, 7, 1500, 1500);
    ck_assert_int_eq(run(ref, ref->name, ref->name, COLLECTOR " --input %s 2>/dev/null",
                         input),
                     0);
    unlink(input);
    ck_assert_int_eq(run(ref, ref->name, ref->name,
                         ANALYZER OPTS " 2>/dev/null -X analyzer.role=all"
                                       " -X pg.copy_connections=1"),
                     0);
    char *n = rows(ref->dsn, "SELECT (SELECT count(*) FROM events),"
                             " (SELECT count(DISTINCT detector) FROM findings)");
    ck_assert_str_eq(n, "3000|3\n");
    free(n);
}

/* Every dead-letter record's reason and offset, sorted. */
static char *dead_letters(const char *topic, int *count)
{
    char *dump = topic_dump(topic, count);
    char *path = strdup("/tmp/st-roles-dlq-XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, dump, strlen(dump)), (ssize_t)strlen(dump));
    close(fd);
    char *out = world_shf("jq -c '{reason, partition, offset}' %s | sort",
                          path);
    unlink(path);
    free(path);
    free(dump);
    return out;
}

/* `sandtrail evidence audit` of a database: what it says, then its exit status. */
#define AUDIT "SANDTRAIL_PG_DSN='%s' " CLI " evidence audit 2>&1; echo $?"

/* crashed: an analyzer of the pair was killed after a PostgreSQL commit,
 * before its Kafka commit. The dead-letter records are still exactly the
 * reference's: each is produced in the transaction that commits the offset
 * past its message (deadletter.h), so a redo neither loses one nor sends
 * one again. */
static void assert_same(const struct world *ref, const struct world *pair, int crashed)
{
    char diff[800];
    for (size_t i = 0; i < sizeof(queries) / sizeof(queries[0]); i++) {
        char *x = rows(ref->dsn, queries[i]), *y = rows(pair->dsn, queries[i]);
        ck_assert_msg(strlen(x) > 0, "query %zu returned nothing", i);
        if (strcmp(x, y) != 0)
            world_first_difference("all", x, y, diff, sizeof(diff));
        ck_assert_msg(strcmp(x, y) == 0, "query %zu differs at %s", i, diff);
        free(x);
        free(y);
    }
    char *audit_ref = world_shf(AUDIT, ref->dsn);
    char *audit_pair = world_shf(AUDIT, pair->dsn);
    ck_assert_msg(strstr(audit_ref, "intact"), "%s", audit_ref);
    ck_assert_str_eq(audit_pair, audit_ref);
    free(audit_ref);
    free(audit_pair);
    int nref, npair;
    char *dref = dead_letters(ref->dlq, &nref), *dpair = dead_letters(pair->dlq, &npair);
    ck_assert_int_eq(nref, 2);
    /* the store role's, once each, crash or not */
    ck_assert_msg(npair == 2, "%d dead-letter records (crashed: %d):\n%s", npair, crashed,
                  dpair);
    ck_assert_str_eq(dpair, dref);
    free(dref);
    free(dpair);
}

#define STORE(w) ANALYZER OPTS " -X analyzer.role=store -X kafka.group=%s-store"
#define DETECT(w) ANALYZER OPTS " -X analyzer.role=detect -X kafka.group=%s-detect"

/* The pair's store killed by the fault option (exit 3), then run to the
 * end: the pair then equals ref, a crash between (assert_same); both
 * worlds dropped. */
static void store_crash_then_equal(struct world *ref, struct world *pair, const char *fault)
{
    ck_assert_int_eq(run(pair, pair->name, pair->name, STORE(pair) " 2>/dev/null %s",
                         pair->name, fault),
                     3);
    /* the restart does not wait for Kafka to abort what the crash left
     * open (transaction.timeout.ms, 60 s): its next producer of the
     * partition aborts it at the assignment (st_deadletter_claim) */
    int64_t t0 = st_time_mono_ms();
    ck_assert_int_eq(run(pair, pair->name, pair->name, STORE(pair) " 2>/dev/null",
                         pair->name),
                     0);
    int64_t took = st_time_mono_ms() - t0;
    ck_assert_msg(took < 30000, "the restarted store took %" PRId64 " ms", took);
    assert_same(ref, pair, 1);
    world_drop(ref);
    world_drop(pair);
}

/* The two roles at once: both drain, and the tables equal the all role's.
 * The store analyzer is pointed at a Redis where nothing listens: it never
 * connects to Redis. */
START_TEST(roles_store_and_detect_side_by_side_equal_all)
{
    struct world ref, pair;
    setup(&ref, &pair, "roles");
    int noredis = world_free_port();
    ck_assert_int_eq(run(&pair, pair.name, pair.name,
                         STORE(pair) " -X redis.url=redis://127.0.0.1:%d/0 2>/dev/null &"
                                     " p=\\$!; " DETECT(pair)
                                     " 2>/dev/null; d=\\$?; wait \\$p; s=\\$?;"
                                     " exit \\$((s * 16 + d))",
                         pair.name, noredis, pair.name),
                     0);
    assert_same(&ref, &pair, 0);
    world_drop(&ref);
    world_drop(&pair);
}
END_TEST

/* detect runs wholly before store (its findings written while no event is
 * stored: the store role's refresh completes them), and crashes twice
 * after a PostgreSQL commit before the Kafka commit; then the store crashes
 * once right after its events' commit, before the refresh that follows it
 * (sink.c's parts[]): the redone batch refreshes them. The detect
 * analyzer's batches stay at 400 events (batch.behind_events=0), so that
 * its crashes fall mid-stream. */
START_TEST(roles_detect_crash_then_store_equal_all)
{
    struct world ref, pair;
    setup(&ref, &pair, "rolecrash");
    ck_assert_int_eq(run(&pair, pair.name, pair.name,
                         DETECT(pair) " 2>/dev/null -X batch.behind_events=0"
                                       " -X fault.crash_after_pg_commits=2",
                         pair.name),
                     3);
    ck_assert_int_eq(run(&pair, pair.name, pair.name,
                         DETECT(pair) " 2>/dev/null -X batch.behind_events=0"
                                       " -X fault.crash_after_pg_commits=3",
                         pair.name),
                     3);
    ck_assert_int_eq(run(&pair, pair.name, pair.name,
                         DETECT(pair) " 2>/dev/null -X batch.behind_events=0", pair.name),
                     0);
    char *n = rows(pair.dsn, "SELECT (SELECT count(*) FROM events),"
                             " (SELECT count(*) > 0 FROM findings),"
                             " (SELECT count(*) FROM evidence_checkpoints)");
    ck_assert_str_eq(n, "0|t|0\n"); /* detect stores no event, no evidence */
    free(n);
    int ndlq;
    free(topic_dump(pair.dlq, &ndlq));
    ck_assert_int_eq(ndlq, 0); /* nor dead-letters */
    store_crash_then_equal(&ref, &pair, "-X fault.crash_after_pg_commits=2");
}
END_TEST

/* The store role is killed inside its first dead-letter transaction, once
 * Kafka holds the records and the offset was sent, before they commit
 * (the point where an at-least-once producer would have sent them for
 * good):
 * the restarted store, the partition's next producer, aborts that
 * transaction, redoes the batch and commits each record once. The records
 * equal the reference's, one each. */
START_TEST(roles_store_crash_inside_dead_letter_commit_sends_each_once)
{
    struct world ref, pair;
    setup(&ref, &pair, "roledlq");
    ck_assert_int_eq(run(&pair, pair.name, pair.name, DETECT(pair) " 2>/dev/null",
                         pair.name),
                     0);
    store_crash_then_equal(&ref, &pair, "-X fault.crash_in_dlq_commits=1");
}
END_TEST

/* A message whose record would pass Kafka's size limits (900,000 control
 * bytes, printed as six each, with dlq.raw_bytes at its 1 MiB maximum):
 * its raw message is cut until the record fits, so it is committed and the
 * drain ends; a record Kafka refused would hold its partition's offsets
 * for good (the store retries the commit until it stops). */
START_TEST(roles_store_dead_letters_a_huge_message_within_kafka_limits)
{
    struct world w;
    char input[128];
    world_loaded(&w, "rolehuge", 13, 20);
    snprintf(input, sizeof(input), "/tmp/st_roles_huge_%d.ndjson", (int)getpid());
    FILE *f = fopen(input, "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 900000; i++)
        fputc('\x01', f);
    fputc('\n', f);
    fclose(f);
    free(world_shf("kcat -P -b '%s' -t '%s' < %s", getenv("SANDTRAIL_KAFKA_BROKERS"), w.topic,
                   input));
    unlink(input);
    ck_assert_int_eq(run(&w, w.name, w.name,
                         "timeout -k 5 60 " ANALYZER OPTS " -X analyzer.role=store"
                         " -X kafka.group=%s-store -X dlq.raw_bytes=1048576 2>/dev/null",
                         w.name),
                     0);
    int n;
    char *dump = topic_dump(w.dlq, &n);
    ck_assert_int_eq(n, 1);
    ck_assert_msg(strlen(dump) <= 512 * 1024 + 1, "a record of %zu bytes", strlen(dump));
    ck_assert_ptr_nonnull(strstr(dump, "\"raw_truncated\":true"));
    ck_assert_ptr_nonnull(strstr(dump, "\"raw_bytes\":900000"));
    free(dump);
    char *rows_n = rows(w.dsn, "SELECT count(*) FROM events");
    ck_assert_str_eq(rows_n, "20\n");
    free(rows_n);
    world_drop(&w);
}
END_TEST

/* The transactions (batches= in its last log line) of an analyzer of role
 * ("store" or "all") that drains the topic with batch.max_events=100 and
 * extra options, into w. */
static long role_batches_said(const struct world *w, const char *role, const char *extra,
                              char **said)
{
    char log[96];
    snprintf(log, sizeof(log), "/tmp/st_roles_batches_%d.log", (int)getpid());
    ck_assert_int_eq(run(w, w->name, w->name,
                         ANALYZER OPTS " -X analyzer.role=%s -X kafka.group=%s-%s"
                                       " -X batch.max_events=100 %s 2>%s",
                         role, w->name, role, extra, log),
                     0);
    if (said)
        *said = world_shf("grep ' consuming ' %s", log);
    char *n = world_shf("sed -n 's/.* batches=\\([0-9]*\\) .*/\\1/p' %s; rm -f %s", log, log);
    long batches = atol(n);
    free(n);
    return batches;
}

static long role_batches(const struct world *w, const char *role, const char *extra)
{
    return role_batches_said(w, role, extra, NULL);
}

/* queries[] the roles write: the store role's rows and evidence (events,
 * checkpoints, skips); the all role's, every table. */
static void assert_same_rows(const struct world *ref, const struct world *w, int all)
{
    char diff[800];
    for (size_t i = 0; i < sizeof(queries) / sizeof(queries[0]); i++) {
        if (!all && i != 0 && i != 4 && i != 5)
            continue;
        char *x = rows(ref->dsn, queries[i]), *y = rows(w->dsn, queries[i]);
        ck_assert_msg(strlen(x) > 0, "query %zu returned nothing", i);
        if (strcmp(x, y) != 0)
            world_first_difference("all", x, y, diff, sizeof(diff));
        ck_assert_msg(strcmp(x, y) == 0, "query %zu differs at %s", i, diff);
        free(x);
        free(y);
    }
    char *audit = world_shf(AUDIT, w->dsn);
    ck_assert_msg(strstr(audit, "intact") && strstr(audit, "\n0\n"), "%s", audit);
    free(audit);
}

/* The same rows, evidence and dead-letter records as ref's. */
static void assert_same_stored(const struct world *ref, const struct world *w)
{
    assert_same_rows(ref, w, 0);
    int nref, nw;
    char *dref = dead_letters(ref->dlq, &nref), *dw = dead_letters(w->dlq, &nw);
    ck_assert_int_eq(nw, 2);
    ck_assert_str_eq(dw, dref);
    free(dref);
    free(dw);
}

/* Behind (the whole topic waits), the store role's batch grows past
 * batch.max_events up to batch.behind_events (by default 10000): a few
 * large transactions instead of one per 100 events, with the same rows, the same signed evidence checkpoints and the same dead-letter
 * records (checkpoints are cut per leaf, not per batch). */
START_TEST(roles_store_behind_writes_fewer_larger_transactions)
{
    struct world ref, small, large;
    setup(&ref, &small, "rolebig");
    world_init(&large, "rolebig3");
    snprintf(large.topic, sizeof(large.topic), "%s", ref.topic);
    long nsmall = role_batches(&small, "store", "-X batch.behind_events=100");
    /* batch.behind_ms by role (-1, its default): 0 for the store, whose
     * batch grows however recent the messages waiting */
    char *said = NULL;
    long nlarge = role_batches_said(&large, "store", "-X batch.behind_ms=-1", &said);
    ck_assert_msg(strstr(said, "batch.behind_events=10000, batch.behind_ms=0)"), "%s", said);
    free(said);
    fprintf(stderr, "store role behind: %ld transactions, %ld with batch.behind_events=100\n",
            nlarge, nsmall);
    ck_assert_msg(nsmall >= 30, "batch.behind_events=100: %ld transactions", nsmall);
    ck_assert_msg(nlarge >= 1 && nlarge <= 3, "batch.behind_events by default: %ld transactions",
                  nlarge);
    assert_same_stored(&ref, &small);
    assert_same_stored(&ref, &large);
    world_drop(&ref);
    world_drop(&small);
    world_drop(&large);
}
END_TEST

/* The same for the all role, which also detects: batches of 100 events
 * (batch.behind_events=100) and a few large ones (the default) leave the
 * same events, findings, finding_events, notifications and signed evidence
 * as the reference (setup: one analyzer, one connection). Event time, not
 * batch boundaries, decides what a detector finds. And a batch grows only
 * past messages older than batch.behind_ms: with an hour, these (written
 * a minute ago at most) keep every batch at 100 events. */
START_TEST(roles_all_behind_writes_fewer_larger_transactions)
{
    struct world ref, small, large, recent;
    setup(&ref, &small, "allbig");
    world_init(&large, "allbig3");
    world_init(&recent, "allbig4");
    snprintf(large.topic, sizeof(large.topic), "%s", ref.topic);
    snprintf(recent.topic, sizeof(recent.topic), "%s", ref.topic);
    /* batch.behind_ms by role (-1, its default) is 5 s for the all role:
     * these messages may be younger or older than that by now, so the
     * value it runs with is read from its log (its batches cannot grow
     * past 100 here anyway) */
    char *said = NULL;
    long nsmall = role_batches_said(&small, "all",
                                    "-X batch.behind_events=100 -X batch.behind_ms=-1", &said);
    ck_assert_msg(strstr(said, "batch.behind_events=100, batch.behind_ms=5000)"), "%s", said);
    free(said);
    long nlarge = role_batches(&large, "all", "");
    long nrecent = role_batches(&recent, "all", "-X batch.behind_ms=3600000");
    fprintf(stderr,
            "all role behind: %ld transactions, %ld with batch.behind_events=100, %ld with"
            " batch.behind_ms=3600000\n",
            nlarge, nsmall, nrecent);
    ck_assert_msg(nsmall >= 30, "batch.behind_events=100: %ld transactions", nsmall);
    ck_assert_msg(nlarge >= 1 && nlarge <= 3, "batch.behind_events by default: %ld transactions",
                  nlarge);
    ck_assert_msg(nrecent >= 30, "batch.behind_ms=3600000: %ld transactions", nrecent);
    assert_same_rows(&ref, &small, 1);
    assert_same_rows(&ref, &large, 1);
    assert_same_rows(&ref, &recent, 1);
    world_drop(&ref);
    world_drop(&small);
    world_drop(&large);
    world_drop(&recent);
}
END_TEST

/* Every batch split (pg.copy_split_events=1): its events stored over
 * pg.copy_connections=2, a transaction per share, committed before the
 * batch's own transaction (evidence, findings, dead-letter skips). */
#define SPLIT " -X pg.copy_split_events=1 -X pg.copy_connections=2"

/* The roles that store events, by loop index. */
static const char *const storing_roles[] = {"store", "all"};

/* Runs role on w's topic in group and Redis prefix <w>-<role>-<run> with
 * extra options; its exit status, its stderr in *log (caller frees). */
static int split_run(const struct world *w, const char *role, const char *run_name,
                     const char *extra, char **log)
{
    char path[96], group[128];
    snprintf(path, sizeof(path), "/tmp/st_roles_split_%d.log", (int)getpid());
    snprintf(group, sizeof(group), "%s-%s-%s", w->name, role, run_name);
    int st = run(w, group, group,
                 "timeout 60 " ANALYZER OPTS " -X analyzer.role=%s -X kafka.group=%s"
                 " %s 2>%s",
                 role, group, extra, path);
    *log = world_slurp(path);
    unlink(path);
    return st;
}

/* The value of "name=" in an analyzer's closing log line (-1: none). */
static long log_count(const char *log, const char *name)
{
    char key[64];
    snprintf(key, sizeof(key), " %s=", name);
    const char *p = NULL, *q = log;
    while ((q = strstr(q, key)))
        p = q++;
    return p ? atol(p + strlen(key)) : -1;
}

/* The stored events: "rows|distinct keys" */
static const char *q_once = "SELECT count(*), count(DISTINCT (source_name, event_id))"
                            " FROM events";

/* The store role (_i = 0: after a detect analyzer drained the topic) or
 * the all role (1) crashes right after a split batch's shares committed,
 * before the batch's transaction, twice (the second time after redoing the
 * first's batch, whose events were all stored): each redo, in larger
 * batches (100 events, then 400: stored events and new ones in the same
 * shares), meets those events on the primary key and stores each once, and
 * the rows, the signed evidence, the findings and the dead-letter records
 * are those of the unsplit all role. Then a new group (and Redis prefix)
 * replays the whole topic, split: its events are all there already;
 * nothing is stored twice, nothing refused, nothing changes. */
START_TEST(roles_crash_between_split_shares_equal_unsplit)
{
    struct world ref, pair;
    const char *role = storing_roles[_i];
    char *log, *n;
    setup(&ref, &pair, _i ? "splitall" : "splitstore");
    /* the store role after a detect analyzer that ran first: its refresh
     * completes findings written while none of their events was stored */
    if (_i == 0)
        ck_assert_int_eq(run(&pair, pair.name, pair.name, DETECT(pair) " 2>/dev/null",
                             pair.name),
                         0);
    int st = split_run(&pair, role, "a",
                       SPLIT " -X batch.max_events=100 -X batch.behind_events=100"
                             " -X fault.crash_after_copy_splits=1",
                       &log);
    ck_assert_msg(st == 3, "exit %d: %.2000s", st, log);
    ck_assert_msg(strstr(log, "after the events of split batch 1 were stored"), "%.2000s",
                  log);
    free(log);
    /* the first batch's events are stored; the batch itself is not */
    n = rows(pair.dsn, "SELECT count(*) BETWEEN 1 AND 100,"
                       " (SELECT count(*) FROM evidence_skips) FROM events");
    ck_assert_str_eq(n, "t|0\n");
    free(n);
    /* an audit now: those rows are stored ahead of their evidence
     * (events_ahead, written with each share's rows), not added after the fact */
    n = world_shf(AUDIT, pair.dsn);
    ck_assert_msg(strstr(n, "stored ahead of their evidence: ") && strstr(n, "intact") &&
                      !strstr(n, "added after the fact") && strstr(n, "\n0\n"),
                  "%s", n);
    free(n);
    st = split_run(&pair, role, "a",
                   SPLIT " -X batch.behind_events=400 -X fault.crash_after_copy_splits=2",
                   &log);
    ck_assert_msg(st == 3, "exit %d: %.2000s", st, log);
    ck_assert_msg(strstr(log, "after the events of split batch 2 were stored"), "%.2000s",
                  log);
    free(log);
    /* the first two split batches not stored ahead of the batch before
     * them (fault.fail_copy_ahead): the writer stores them itself */
    st = split_run(&pair, role, "a",
                   SPLIT " -X batch.behind_events=400 -X fault.fail_copy_ahead=2", &log);
    ck_assert_msg(st == 0, "exit %d: %.2000s", st, log);
    long nb = log_count(log, "batches"), na = log_count(log, "stored_ahead");
    ck_assert_msg(nb >= 4 && na >= 1 && na <= nb - 2, "batches=%ld stored_ahead=%ld: %.2000s",
                  nb, na, log);
    /* said once for the run of failures, not per batch */
    const char *w1 = strstr(log, "could not be stored ahead");
    ck_assert_msg(w1 && !strstr(w1 + 1, "could not be stored ahead"), "%.2000s", log);
    free(log);
    n = rows(pair.dsn, q_once);
    ck_assert_str_eq(n, "3000|3000\n");
    free(n);
    assert_same_rows(&ref, &pair, 1);
    int nref, npair;
    char *dref = dead_letters(ref.dlq, &nref), *dpair = dead_letters(pair.dlq, &npair);
    ck_assert_int_eq(npair, 2);
    ck_assert_str_eq(dpair, dref);
    free(dref);
    free(dpair);

    /* the replay: a new group from offset 0 */
    st = split_run(&pair, role, "replay", SPLIT, &log);
    ck_assert_msg(st == 0, "exit %d: %.2000s", st, log);
    ck_assert_msg(strstr(log, " events=3000 invalid=2 refused=0 "), "%.2000s", log);
    /* its batches split and stored ahead (the replay's rows through the
     * staging path), but the last one, which only seals the evidence, and
     * maybe one of only the two invalid messages */
    nb = log_count(log, "batches");
    na = log_count(log, "stored_ahead");
    ck_assert_msg(na >= 1 && na >= nb - 2, "batches=%ld stored_ahead=%ld", nb, na);
    free(log);
    n = rows(pair.dsn, q_once);
    ck_assert_str_eq(n, "3000|3000\n");
    free(n);
    dpair = dead_letters(pair.dlq, &npair);
    ck_assert_msg(!strstr(dpair, "store_refused"), "%s", dpair);
    free(dpair);
    assert_same_rows(&ref, &pair, 1);
    world_drop(&ref);
    world_drop(&pair);
}
END_TEST

/* Caught up, the store role still writes an event within about
 * batch.max_ms (200 ms) of its arrival: a batch grows only while more
 * events already wait. */
START_TEST(roles_store_caught_up_stores_an_event_at_once)
{
    struct world w;
    char input[128], pidf[128];
    world_init(&w, "rolelive");
    snprintf(input, sizeof(input), "/tmp/st_roles_live_%d.ndjson", (int)getpid());
    snprintf(pidf, sizeof(pidf), "/tmp/st_roles_live_%d.pid", (int)getpid());
    bursts(input, 9, 500, 0);
    ck_assert_int_eq(run(&w, w.name, w.name, COLLECTOR " --input %s 2>/dev/null", input), 0);
    ck_assert_int_eq(run(&w, w.name, w.name,
                         ANALYZER " -X analyzer.role=store -X kafka.group=%s-store"
                                  " -X batch.max_events=100 -X batch.max_ms=200"
                                  " 2>/dev/null & echo \\$! > %s",
                         w.name, pidf),
                     0);
    world_wait_table(&w, "events", 60);
    char *n = NULL;
    for (int i = 0; i < 300; i++) { /* caught up: the 500 stored */
        free(n);
        n = rows(w.dsn, "SELECT count(*) FROM events");
        if (!strcmp(n, "500\n"))
            break;
        usleep(100000);
    }
    ck_assert_str_eq(n, "500\n");
    free(n);
    usleep(1000000); /* idle polls of batch.max_ms */
    bursts(input, 9, 1, 500);
    ck_assert_int_eq(run(&w, w.name, w.name, COLLECTOR " --input %s 2>/dev/null", input), 0);
    /* the collector exits once Kafka acknowledged the event */
    int64_t t0 = st_time_mono_ms(), took = -1;
    for (int i = 0; i < 500 && took < 0; i++) {
        n = rows(w.dsn, "SELECT count(*) FROM events");
        if (!strcmp(n, "501\n"))
            took = st_time_mono_ms() - t0;
        free(n);
        if (took < 0)
            usleep(10000);
    }
    /* stopped, and waited for: a stop writes the state and commits, and
     * the analyzer (its output the test's, inherited through the shell)
     * must not outlive the world it uses */
    int64_t s0 = st_time_mono_ms();
    char *left = world_shf("p=$(cat %s); kill $p 2>/dev/null;"
                           " for i in $(seq 1 600); do kill -0 $p 2>/dev/null || break;"
                           " sleep 0.1; done; kill -0 $p 2>/dev/null && echo running;"
                           " rm -f %s %s",
                           pidf, pidf, input);
    int64_t stop_ms = st_time_mono_ms() - s0;
    fprintf(stderr, "caught up, an event stored after %" PRId64 " ms; stopped in %" PRId64
                    " ms\n",
            took, stop_ms);
    ck_assert_msg(strcmp(left, "running\n") != 0, "the analyzer still runs 60 s after SIGTERM");
    free(left);
    ck_assert_msg(took >= 0 && took < 2000, "the event was stored after %" PRId64 " ms", took);
    world_drop(&w);
}
END_TEST

/* Milliseconds a store-role drain of w's topic, with nothing left to
 * store, takes with extra options (the fastest of two). */
static int64_t empty_drain_ms(const struct world *w, const char *extra)
{
    int64_t best = -1;
    for (int i = 0; i < 2; i++) {
        int64_t t0 = st_time_mono_ms();
        ck_assert_int_eq(run(w, w->name, w->name,
                             ANALYZER " --drain -X analyzer.role=store -X kafka.group=%s-store"
                                      " %s 2>/dev/null",
                             w->name, extra),
                         0);
        int64_t ms = st_time_mono_ms() - t0;
        if (best < 0 || ms < best)
            best = ms;
    }
    return best;
}

/* A drain ends on every partition's end-of-partition event, which comes
 * with the answer to a fetch at the partition's end; the broker holds that
 * fetch fetch.wait.max.ms (librdkafka's default 500 ms). --drain asks for
 * 10 ms: a drain with nothing to do ends about half a second sooner than
 * with 500 ms, the old default, given explicitly (which still wins). */
START_TEST(roles_drain_ends_without_the_broker_wait)
{
    struct world w;
    world_loaded(&w, "roledrain", 11, 200);
    empty_drain_ms(&w, ""); /* stores the 200 */
    int64_t waited = empty_drain_ms(&w, "-X kafka.rdkafka.fetch.wait.max.ms=500");
    int64_t fast = empty_drain_ms(&w, "");
    fprintf(stderr, "an empty drain: %" PRId64 " ms, %" PRId64 " ms with the broker's wait\n",
            fast, waited);
    ck_assert_msg(fast + 250 < waited,
                  "an empty drain took %" PRId64 " ms, %" PRId64 " ms with the broker's wait",
                  fast, waited);
    world_drop(&w);
}
END_TEST

/* A store or detect analyzer in the all role's default group would commit
 * offsets the other role has not seen: it refuses to start. */
START_TEST(roles_refuse_the_default_group)
{
    char *out = world_sh(ANALYZER " -X analyzer.role=detect"
                                  " -X kafka.group=sandtrail-analyzer 2>&1; echo $?");
    ck_assert_msg(strstr(out, "needs a consumer group of its own"), "%s", out);
    ck_assert_msg(strstr(out, "\n78\n"), "%s", out);
    free(out);
}
END_TEST

int main(void)
{
    if (world_setup())
        return EXIT_FAILURE;
    Suite *s = suite_create("roles");
    /* three cases, one ctest test each (CK_RUN_CASE: tests/CMakeLists.txt),
     * so that they run side by side */
    TCase *tc = tcase_create("roles");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, roles_refuse_the_default_group);
    tcase_add_test(tc, roles_store_and_detect_side_by_side_equal_all);
    tcase_add_test(tc, roles_detect_crash_then_store_equal_all);
    tcase_add_test(tc, roles_store_caught_up_stores_an_event_at_once);
    tcase_add_test(tc, roles_drain_ends_without_the_broker_wait);
    suite_add_tcase(s, tc);
    tc = tcase_create("dlq");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, roles_store_crash_inside_dead_letter_commit_sends_each_once);
    tcase_add_test(tc, roles_store_dead_letters_a_huge_message_within_kafka_limits);
    suite_add_tcase(s, tc);
    tc = tcase_create("batches");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, roles_store_behind_writes_fewer_larger_transactions);
    tcase_add_test(tc, roles_all_behind_writes_fewer_larger_transactions);
    tcase_add_loop_test(tc, roles_crash_between_split_shares_equal_unsplit, 0, 2);
    suite_add_tcase(s, tc);
    return world_run(s);
}
