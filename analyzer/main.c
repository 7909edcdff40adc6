/* main.c: sandtrail-analyzer.
 *
 *   consume (consume.c) -> parse (common/event.c) -> detect (detectors/,
 *   state in memory, what is missing prefetched from Redis via rpipe.c) ->
 *   store (store.c, its own thread: one transaction over the sink parts in
 *   sinks/, then the detectors' checkpoint to Redis (checkpoint.c: the
 *   changes made one state.checkpoint_ms ago) and the offsets' commit)
 *
 * This thread polls, parses and detects batch N+1 while the store thread writes
 * batch N (the parse and the detection spread over the detection workers, this
 * thread being worker 0: workers.h, ingest below); it hands N+1 over only once
 * N is done (pipeline depth 1). Every batch carries a checkpoint, of the
 * detectors' changes made in the batches up to its cut (the newest batch
 * detected state.checkpoint_ms ago: the rolling write-back), and commits
 * the offsets recorded when its cut was built, so never past a change not
 * in Redis (nothing when the cut did not move; everything up to now in
 * detectors_flush); after the PostgreSQL transactions holding the events and
 * findings up to them have committed, after that checkpoint ran, and after
 * Kafka acknowledged the dead-letter records queued (deadletter.c).
 * When Redis or PostgreSQL is unavailable, the batch is retried with backoff,
 * never skipped; when PostgreSQL refuses the batch for its data, the refused
 * events are dead-lettered and the rest written. Redis is written only after
 * the PostgreSQL commit, so it never holds state PostgreSQL has not. Every
 * write is idempotent, and the detectors' trims run only after the Kafka
 * commit, so a retry or a replay after a crash leaves the same rows
 * (docs/architecture.md).
 *
 * analyzer.role (role.h) keeps one half: store (no detector, no Redis) or
 * detect (no events rows, no evidence, no dead-letter records); the sink
 * has only the role's parts (sink.c).
 *
 * Exit status: 0 stopped cleanly (or --drain caught up); 1 runtime failure;
 * 64 usage; 78 configuration (also when Kafka refuses our login or
 * certificate). */
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ahead.h"
#include "analyzer.h"
#include "buf.h"
#include "checkpoint.h"
#include "conf.h"
#include "consume.h"
#include "deadletter.h"
#include "detect.h"
#include "fence.h"
#include "log.h"
#include "metrics.h"
#include "onepass.h"
#include "pg.h"
#include "registry.h"
#include "reorder.h"
#include "role.h"
#include "rpipe.h"
#include "sink.h"
#include "sources.h"
#include "store.h"
#include "timeutil.h"
#include "workers.h"

#ifndef SANDTRAIL_SQL_DIR
#define SANDTRAIL_SQL_DIR "sql"
#endif

/* batch.behind_ms of analyzer.role=all and detect when unset (-1): an
 * analyzer up to this far behind a live stream keeps its batches small (at
 * 30,000 events/s the all role's lag reaches 2-3 s and clears by itself;
 * growing past 2 s put its findings' p99 at 1.8 s: docs/architecture.md,
 * "Larger transactions while behind") */
#define ST_BEHIND_MS 5000
#define ST_BEHIND_MS_S "5000"

#define A(field) offsetof(struct st_analyzer_conf, field)

static const struct st_conf_prop analyzer_props[] = {
    {"analyzer.role", "SANDTRAIL_ANALYZER_ROLE", ST_CONF_STR, A(role_name), 0, 0, "all",
     "all: store every event and detect, in one transaction per batch; store: "
     "events, evidence and dead-letter records only (no detector, no Redis); "
     "detect: findings and alerts only (no events rows, no evidence; invalid "
     "messages counted, not dead-lettered). A store and a detect analyzer read "
     "the same topic in two consumer groups of their own (kafka.group must be set, "
     "not the default); docs/architecture.md, \"Two roles\""},
    {"kafka.brokers", "SANDTRAIL_KAFKA_BROKERS", ST_CONF_STR, A(brokers), 0, 0,
     "127.0.0.1:19092", "Kafka bootstrap servers"},
    {"kafka.sasl.password_file", "SANDTRAIL_KAFKA_PASSWORD_FILE", ST_CONF_STR,
     A(kafka.password_file), 0, 0, NULL,
     "file holding the SASL password (librdkafka's sasl.password), read at start. "
     "Any librdkafka property is passed through as kafka.rdkafka.<name>, e.g. "
     "kafka.rdkafka.security.protocol=SASL_SSL; an unknown name stops start-up; "
     "the program's own settings (acks, idempotence, group, offsets) still win"},
    {"kafka.topic.events", "SANDTRAIL_TOPIC_EVENTS", ST_CONF_STR, A(topic_events), 0,
     0, "sandtrail.events", "topic of validated events"},
    {"kafka.topic.dlq", "SANDTRAIL_TOPIC_DLQ", ST_CONF_STR, A(topic_dlq), 0, 0,
     "sandtrail.events.dlq",
     "dead-letter topic for consumed messages that are not valid events or that "
     "PostgreSQL refuses (the collector's)"},
    {"dlq.raw_bytes", NULL, ST_CONF_INT, A(dlq_raw_bytes), 0, 1024 * 1024, "4096",
     "bytes of a dead-lettered message kept in its record (redacted first; fewer when "
     "the record would pass 512 KiB, so that Kafka's default size limits take it)"},
    {"kafka.group", "SANDTRAIL_GROUP", ST_CONF_STR, A(group), 0, 0,
     "sandtrail-analyzer", "consumer group; analyzers in one group split partitions"},
    {"kafka.group.instance_id", "SANDTRAIL_GROUP_INSTANCE_ID", ST_CONF_STR,
     A(group_instance_id), 0, 0, NULL,
     "static group membership: a restarted analyzer with the same id takes its "
     "partitions back at once instead of after the session timeout"},
    {"kafka.session.timeout.ms", NULL, ST_CONF_INT, A(session_timeout_ms), 6000,
     300000, "10000", "how long the group waits for a silent analyzer before "
     "giving its partitions to others"},
    {"pg.dsn", "SANDTRAIL_PG_DSN", ST_CONF_STR, A(pg_dsn), 0, 0,
     "host=127.0.0.1 port=15433 user=sandtrail dbname=sandtrail",
     "PostgreSQL connection string (libpq): TLS and login are libpq's options, e.g. "
     "sslmode=verify-full sslrootcert=FILE passfile=FILE; the password is never logged"},
    {"pg.copy_connections", NULL, ST_CONF_INT, A(copy_connections), 1, 8, "2",
     "connections a batch of pg.copy_split_events or more stores its events over at "
     "once, each share (by event id) in a transaction of its own committed before the "
     "batch's transaction, so that as many PostgreSQL backends parse and index them "
     "(docs/architecture.md, \"A large batch's events over several connections\"); "
     "1: every batch's events in the batch's transaction"},
    {"pg.copy_split_events", NULL, ST_CONF_INT, A(copy_split_events), 1, 1000000, "1000",
     "a batch with fewer events stores them in its own transaction, over one "
     "connection (see pg.copy_connections)"},
    {"redis.url", "SANDTRAIL_REDIS_URL", ST_CONF_STR, A(redis_url), 0, 0,
     "redis://127.0.0.1:16380/0",
     "Redis holding detector windows: redis://[user[:password]@]host:port[/db] "
     "(an ACL user; AUTH is sent on every connection). Redis has no TLS here: "
     "reach a remote one through a TLS tunnel (README)"},
    {"redis.password_file", "SANDTRAIL_REDIS_PASSWORD_FILE", ST_CONF_STR,
     A(redis_password_file), 0, 0, NULL,
     "file holding the Redis password, read at start; takes precedence over the "
     "URL's"},
    {"redis.prefix", "SANDTRAIL_REDIS_PREFIX", ST_CONF_STR, A(redis_prefix), 0, 0,
     "st:", "prefix of every Redis key the analyzer writes"},
    {"redis.round_trip_timeout_ms", NULL, ST_CONF_INT, A(redis_round_trip_ms), 100,
     3600000, "30000",
     "longest wait for one round trip to Redis (a pipeline sent, every reply read; "
     "each read or write also waits at most 5 s, but a Redis that answers one reply "
     "at a time, slowly, would reset that): past it the connection is dropped and "
     "the call fails as on a lost connection: the batch's checkpoint (or prefetch) is "
     "retried with backoff, its offsets not committed"},
    {"sql.dir", "SANDTRAIL_SQL_DIR", ST_CONF_STR, A(sql_dir), 0, 0, NULL,
     "folder of numbered migrations applied at start (unset: the source tree's "
     "sql/, fixed at build time)"},
    {"log.level", "SANDTRAIL_LOG_LEVEL", ST_CONF_STR, A(log_level), 0, 0, "info",
     "least important log records written: debug, info, warn or error"},
    {"log.format", "SANDTRAIL_LOG_FORMAT", ST_CONF_STR, A(log_format), 0, 0, "text",
     "text (one line a record) or json (one object a line, for log shippers); "
     "never event content"},
    {"metrics.listen", "SANDTRAIL_ANALYZER_METRICS", ST_CONF_STR, A(metrics_listen), 0,
     0, "", "host:port serving Prometheus metrics at /metrics (empty: off)"},
    {"batch.max_events", NULL, ST_CONF_INT, A(batch_max_events), 1, ST_BATCH_MOST_EVENTS, "1000",
     "most events processed in one transaction (while behind: batch.behind_events)"},
    {"batch.behind_events", NULL, ST_CONF_INT, A(batch_behind_events), 0,
     ST_BATCH_MOST_EVENTS, "10000",
     "most events in one transaction while the analyzer is behind: a batch that "
     "fills batch.max_events while at least as many more wait in its partitions "
     "goes on up to this many (fewer, larger transactions and checkpoints while "
     "catching up; a caught-up batch still closes at batch.max_events or "
     "batch.max_ms). Up to three batches are held at a time, each with up to this "
     "many messages and their rows, and in the all and detect roles each event "
     "parsed (2 or 4 KB an event) until it is stored. At or below "
     "batch.max_events (0, say): off (docs/architecture.md, \"Larger transactions while "
     "behind\")"},
    {"batch.behind_ms", NULL, ST_CONF_INT, A(batch_behind_ms), -1, 3600000, "-1",
     "a batch grows past batch.max_events (see batch.behind_events) only while "
     "its newest message was written to Kafka at least this long ago: an analyzer "
     "near real time keeps its batches, and the latency of its findings, small. "
     "0: whenever as many events again wait; -1: by role, 0 for analyzer.role=store "
     "(no findings to delay; larger batches keep it up with a live stream) and "
     ST_BEHIND_MS_S " for all and detect"},
    {"batch.max_ms", NULL, ST_CONF_INT, A(batch_max_ms), 1, 60000, "200",
     "longest wait to fill a batch"},
    {"drain.assign_timeout_ms", NULL, ST_CONF_INT, A(assign_timeout_ms), 1000,
     600000, "30000", "--drain fails when no partition is assigned within this"},
    {"retry.max_backoff_ms", NULL, ST_CONF_INT, A(retry_max_backoff_ms), 10,
     600000, "30000", "longest pause between retries of a failed batch"},
    {"state.ttl_s", NULL, ST_CONF_INT, A(state_ttl_s), 60, 30 * 86400, "86400",
     "Redis keys of a run idle this long (wall clock) expire"},
    {"state.evict_s", NULL, ST_CONF_INT, A(state_evict_s), 0, 30 * 86400, "600",
     "detector state of a run (or credential, destination) not used for this long "
     "(wall clock) is dropped from memory once Redis holds it, and read back on "
     "its next event; must be below state.ttl_s (0: after every batch, tests)"},
    {"state.blob_max_bytes", NULL, ST_CONF_INT, A(state_blob_max), 256, 1048576, "1024",
     "a run's state of a windowed detector up to this size is written whole at each "
     "checkpoint (a field of the run's hash in Redis); a larger one as an append-only "
     "log of its members, written incrementally, until trims take it below half "
     "(docs/architecture.md, \"A large run's members as a log\")"},
    {"state.checkpoint_ms", "SANDTRAIL_CHECKPOINT_MS", ST_CONF_INT, A(checkpoint_ms), 0,
     3600000, "1000",
     "a change of the detectors' state is written to Redis this long after it was made "
     "(by the checkpoint of the first batch detected that much later, after its "
     "PostgreSQL commit; every batch writes the changes that have waited so long), and "
     "the Kafka offsets are committed up to the oldest change not yet written: a run "
     "changed in several batches of an interval costs one write-back. Findings are "
     "still written per batch; a crash redoes the batches since the offsets committed "
     "(about this long). A revoke, the end of --drain, a stop and an idle stream write "
     "everything first (0: every change with its own batch)"},
    {"state.checkpoint_behind_ms", NULL, ST_CONF_INT, A(checkpoint_behind_ms), 0, 3600000,
     "5000",
     "state.checkpoint_ms for a batch detected while the analyzer is behind (the batch "
     "grew past batch.max_events: batch.behind_events): catching up, a run changed "
     "again within this long is written to Redis once, so fewer writes per event; a "
     "crash then redoes about this long of the catch-up. Live batches keep "
     "state.checkpoint_ms. At or below state.checkpoint_ms, or with "
     "state.checkpoint_ms=0: state.checkpoint_ms throughout"},
    {"state.hold_trims", NULL, ST_CONF_INT, A(hold_trims), 0, 1, "0",
     "1: a run's Redis deletions (its window trims) wait, while fewer than 64, for a "
     "checkpoint that writes the run anyway, or its idleness (state.evict_s), instead "
     "of going with the next one (needs state.checkpoint_ms > 0). Fewer Redis commands "
     "on streams of short runs, but every checkpoint visits each run holding trims, "
     "and a revoke, stop or --drain end sends them all at once: measured slower, and "
     "900 MB more peak memory, with 1,000,000 runs (docs/architecture.md)"},
    {"state.write_final_trims", NULL, ST_CONF_INT, A(write_final_trims), 0, 1, "0",
     "0: the end of --drain, a stop and a revoke do not rewrite a small run only to "
     "send its last trim: its string, written with the events the trim waits for, "
     "carries it (runblob version 2) and the next load applies it. 1: they write "
     "every trim, so that (unless a crash left one pending) every small run's string "
     "is version 1 and holds exactly what a load gives: for the last stop before a "
     "downgrade to a release before session 18, or to compare two analyzers' Redis "
     "state byte for byte"},
    {"detect.workers", "SANDTRAIL_DETECT_WORKERS", ST_CONF_INT, A(detect_workers), 1, 64,
     "2",
     "detection workers: worker w runs the per-run detectors over the partitions p "
     "with p % workers == w; worker 0 is the detection thread (detect.overlap=1) or "
     "the main thread, and also runs the cross-run ones (scope_drift, token_write) "
     "over every event, the others are threads of their own (1: none). The findings, "
     "and the state a load of Redis gives, do not depend on it"},
    {"detect.overlap", NULL, ST_CONF_INT, A(detect_overlap), 0, 1, "1",
     "1: a batch polled while behind (batch.behind_events) is detected on a thread "
     "of its own (with the detection workers) while the main thread polls, parses "
     "and releases the next one; a live batch is still handed to the store before "
     "the next poll, which may wait for messages. 0: the main thread detects each "
     "batch itself before it polls the next. The findings, the state written and "
     "the offsets committed do not depend on it (docs/architecture.md, \"Session "
     "20\")"},
    {"detect.parse_split_min", NULL, ST_CONF_INT, A(parse_split_min), 0, 1000000, "256",
     "a batch of at least this many messages is parsed by the detection workers at "
     "once (in equal shares of the batch: the main thread is worker 0); a smaller one, "
     "and every batch with detect.workers=1, detect.overlap=1 (the workers detect "
     "the batch before meanwhile) or analyzer.role=store, by the main thread alone "
     "(0: never). The stored rows, dead-letter records and findings do not depend "
     "on it"},
    {"detect.park_above", NULL, ST_CONF_INT, A(park_above), 0, 100000000, "65536",
     "while more events than this wait in the reorder buffer (detect.lateness_s), an "
     "event still waiting at the end of its batch keeps only its text (about 0.3 KB) "
     "and is parsed again when it leaves; at or below it, events keep their parsed "
     "document (about 5 KB each) and are parsed once (0: always park). The findings do "
     "not depend on it"},
    {"detect.lateness_s", NULL, ST_CONF_INT, A(lateness_s), 0, 86400, "30",
     "how late (event time) an event may arrive and still count in its window"},
    {"detect.max_future_s", NULL, ST_CONF_INT, A(max_future_s), 0, 30 * 86400, "300",
     "an event stamped further than this after the collector produced it is "
     "skewed: detected on its receive time, moves no watermark (0 = off)"},
    {"detect.max_past_s", NULL, ST_CONF_INT, A(max_past_s), 0, 3650LL * 86400, "0",
     "an event stamped further than this before the collector produced it is "
     "skewed (0 = off: backfilled files and a drained spool carry old times)"},
    {"detect.enabled", "SANDTRAIL_DETECT_ENABLED", ST_CONF_STR, A(detect_enabled), 0, 0, "all",
     "the detectors that run: all, or some of denial_burst, retry_across_paths, "
     "scope_drift, token_write, volume_anomaly, private_destination, separated by "
     "commas. One left out finds nothing and keeps no state; what it left in Redis "
     "goes with its runs (the sweep, state.ttl_s), and its findings in PostgreSQL "
     "stay. Enabled again, it starts from what Redis still holds"},
    {"detect.denial_burst.threshold", NULL, ST_CONF_INT, A(db_threshold), 2, 1000000,
     "10", "denied events in one window that make a burst"},
    {"detect.denial_burst.window_s", NULL, ST_CONF_INT, A(db_window_s), 1, 86400,
     "60", "length of the denial_burst window, event time"},
    {"detect.denial_burst.high_targets", NULL, ST_CONF_INT, A(db_high_targets), 1,
     1000000, "5", "distinct targets in a burst that make it high severity"},
    {"detect.retry_across_paths.window_s", NULL, ST_CONF_INT, A(retry_window_s), 1,
     86400, "120", "how long after a refused attempt further attempts count"},
    {"detect.retry_across_paths.min_attempts", NULL, ST_CONF_INT,
     A(retry_min_attempts), 1, 1000000, "3",
     "attempts to other targets after a refusal that make a finding"},
    {"detect.volume_anomaly.window_s", NULL, ST_CONF_INT, A(vol_window_s), 1, 86400,
     "600", "length of the volume budget window, event time"},
    {"detect.volume_anomaly.max_requests", NULL, ST_CONF_INT, A(vol_max_requests), 1,
     INT64_C(1000000000), "1000", "proxy requests one run may make in the window"},
    {"detect.volume_anomaly.max_bytes_out", NULL, ST_CONF_INT, A(vol_max_bytes_out), 1,
     INT64_C(1000000000000), "52428800", "bytes one run may send in the window"},
    {"detect.scope_drift.deny_loop_count", NULL, ST_CONF_INT, A(scope_deny_count), 1,
     1000000, "3", "token_deny events of one run that make a scope-request loop"},
    {"detect.scope_drift.deny_loop_window_s", NULL, ST_CONF_INT,
     A(scope_deny_window_s), 1, 86400, "600", "window of the scope-request loop"},
    {"detect.scope_drift.allowlist_platforms", NULL, ST_CONF_INT, A(scope_platforms), 2,
     1000, "3",
     "platforms allowing a destination that another denies, for allowlist drift"},
    {"detect.token_write.canary_fingerprints", "SANDTRAIL_CANARY_FINGERPRINTS",
     ST_CONF_STR, A(canary_fps), 0, 0, NULL,
     "comma-separated fingerprints of canary values: written anywhere, critical"},
    {"evidence.key_file", "SANDTRAIL_EVIDENCE_KEY_FILE", ST_CONF_STR,
     A(evidence_key_file), 0, 0, NULL,
     "PEM Ed25519 private key that signs evidence checkpoints (unset: no "
     "checkpoints)"},
    {"evidence.checkpoint_events", NULL, ST_CONF_INT, A(evidence_checkpoint_events), 1,
     10000000, "1000", "leaves of a partition's evidence tree per signed checkpoint"},
    {"evidence.checkpoint_s", NULL, ST_CONF_INT, A(evidence_checkpoint_s), 1, 86400,
     "60",
     "longest span (Kafka timestamps) of one checkpoint; a caught-up analyzer "
     "also signs what is pending once it is this old"},
    {"health.max_lag", NULL, ST_CONF_INT, A(health_max_lag), 1, INT64_C(1000000000000),
     "100000", "/readyz answers 503 (backed up) while more events than this wait "
     "in the assigned partitions"},
    {"fault.crash_after_pg_commits", NULL, ST_CONF_INT, A(crash_after_commits), 0,
     1000000, "0",
     "tests only: exit abruptly after this many PostgreSQL commits, before the "
     "Kafka commit (0 = never)"},
    {"fault.crash_in_dlq_commits", NULL, ST_CONF_INT, A(crash_in_dlq_commits), 0, 1000000,
     "0",
     "tests only: exit abruptly inside this many-th transaction of dead-letter records, "
     "once Kafka holds its records and its offset, before it commits them (0 = never)"},
    {"fault.fail_pg_commits", NULL, ST_CONF_INT, A(fail_pg_commits), 0, 1000000, "0",
     "tests only: the first this many PostgreSQL transactions fail, after the "
     "batch's detection and before its Redis checkpoint, as an unavailable "
     "database would (0 = never)"},
    {"fault.crash_after_copy_splits", NULL, ST_CONF_INT, A(crash_after_copy_splits), 0,
     1000000, "0",
     "tests only: exit abruptly once this many batches' events were stored over "
     "pg.copy_connections, before each such batch's own transaction (0 = never)"},
    {"fault.fail_copy_sides", NULL, ST_CONF_INT, A(fail_copy_sides), 0, 1000000000, "0",
     "tests only: the first this many shares of split batches fail on their side "
     "connection as a refused connection would (0 = never)"},
    {"fault.fail_copy_ahead", NULL, ST_CONF_INT, A(fail_copy_ahead), 0, 1000000000, "0",
     "tests only: the first this many split batches fail to be stored ahead of "
     "the batch before them, so that the writer stores them (0 = never)"},
    {"fault.stall_checkpoint_ms", NULL, ST_CONF_INT, A(stall_checkpoint_ms), 0, 600000,
     "0",
     "tests only: every detectors' checkpoint waits this long between its owner-epoch "
     "read (WATCH) and its EXEC, as a stalled process would (0 = never)"},
    {"fault.slow_detect_ms", NULL, ST_CONF_INT, A(slow_detect_ms), 0, 600000, "0",
     "tests only: every batch's detection starts this much later, as a slow one "
     "would take longer (with detect.overlap, a rebalance then lands while a batch "
     "is being detected; 0 = never)"},
    {NULL},
};

static volatile sig_atomic_t stop;

/* The most events one batch releases from the reorder buffer (at least
 * twice a full batch): a flush (the end of --drain) or a partition idle
 * for detect.lateness_s releases what it holds over the next batches,
 * each parsed again (2 or 4 KB an event: 32-64 MB a batch), instead of all at once
 * (900,000 events, 3.6 GB, at the default lateness on a 30k/s stream).
 * Not smaller: every batch costs a transaction and a checkpoint (2,000 a
 * batch ended a drain holding those 900,000 events with 450 more
 * batches; this, 55). */
#define ST_RELEASE_MAX 16384

/* The most events of a batch polled while behind (batch.behind_events),
 * never below batch.max_events. */
static int batch_most(const struct st_analyzer_conf *c)
{
    int64_t behind = c->batch_behind_events;
    return (int)(behind > c->batch_max_events ? behind : c->batch_max_events);
}

/* How old a batch's newest message must be for the batch to grow
 * (batch.behind_ms, -1 resolved by role). */
static int64_t behind_ms(const struct st_analyzer_conf *c)
{
    if (c->batch_behind_ms >= 0)
        return c->batch_behind_ms;
    return c->role == ST_ROLE_STORE ? 0 : ST_BEHIND_MS;
}

/* names outside the table: kafka.rdkafka.* then override.* */
static int analyzer_extra(void *arg, const char *name, const char *value, char *errstr,
                          size_t errsz)
{
    struct st_analyzer_conf *conf = arg;
    int rc = st_kafka_props_parse(&conf->kafka, name, value, errstr, errsz);
    return rc == 1 ? st_override_parse(&conf->overrides, name, value, errstr, errsz) : rc;
}

static volatile sig_atomic_t hup;

static void on_signal(int sig)
{
    if (sig == SIGHUP)
        hup = 1; /* run() reloads between batches */
    else
        stop = 1;
}

/* At the end, the detectors' state in memory (every run of every window:
 * 744,000 of them after a million denials) is written by the last
 * revoke's flush and then left to the process's exit instead of being
 * freed run by run: 0.1-0.2 s of a drain's end (docs/architecture.md,
 * "Session 19"). A build with AddressSanitizer frees it, so that its leak
 * check still sees everything else. */
#if defined(__SANITIZE_ADDRESS__)
#define LEAVE_STATE_AT_EXIT 0
#else
#define LEAVE_STATE_AT_EXIT 1
#endif

/* What start-up read the configuration from (set once by main, then read
 * by the main thread only), for a reload. */
static struct {
    const char *config_file;
    char **sets;
    int nsets;
} origin;

/* SIGHUP: the configuration read again as at start; log.level applies now,
 * every other property that changed is logged as needing a restart. A
 * reload that fails changes nothing. @locality the main loop */
static void reload(const struct st_analyzer_conf *running)
{
    static const char *const live[] = {"log.level", NULL};
    struct st_analyzer_conf fresh;
    char errstr[512];
    hup = 0;
    memset(&fresh, 0, sizeof(fresh));
    fresh.overrides.props = analyzer_props;
    if (st_conf_load(analyzer_props, &fresh, origin.config_file, origin.sets, origin.nsets,
                     analyzer_extra, &fresh, errstr, sizeof(errstr)) ||
        st_log_configure(fresh.log_level, NULL, errstr, sizeof(errstr))) {
        st_error("reload: %s; keeping every setting as it was", errstr);
    } else {
        st_conf_report_fixed(analyzer_props, running, &fresh, live);
        st_info("reload: done (log.level=%s)", fresh.log_level);
    }
    st_overrides_fini(&fresh.overrides);
    st_kafka_props_fini(&fresh.kafka);
    st_conf_fini(analyzer_props, &fresh);
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: sandtrail-analyzer [--drain] [--no-migrate] [-c CONFIG] "
            "[-X name=value]...\n"
            "       sandtrail-analyzer --config-doc\n"
            "\n"
            "Consumes events from Kafka in a consumer group, stores them in\n"
            "PostgreSQL and runs the detectors. --drain stops once every assigned\n"
            "partition is caught up and committed.\n");
}

/* One batch on the main thread's side: what the store carries (b) and the
 * events the reorder buffer released for detection in it (rel, fed to the
 * detectors, which hold pointers into them until the next detection). */
/* one batch being filled and detected, and those in flight */
/* one being filled, one being detected (detect.overlap), the store's */
#define NSLOTS (2 + ST_STORE_IN_FLIGHT)

struct slot {
    struct st_store_batch *b;
    struct st_reorder_item *rel;
    size_t nrel, relcap;
    /* the detectors' write-back of this batch, run by the store thread
     * after the PostgreSQL commit (store_checkpoint); seq is its number */
    struct st_checkpoint *ckpt;
    uint64_t seq;
    /* its cut: the checkpoint holds every change of the batches up to it
     * not yet written (the rolling write-back, see cut_of); commits: the
     * cut moved with this batch, which commits the offsets recorded for
     * the cut's batch (none otherwise) */
    uint64_t cut;
    int commits;
    int64_t ms; /* monotonic time it was detected (its cut decided) */
    int behind; /* polled while behind (grew past batch.max_events) */
    /* the events topic's partitions when its detection started (read
     * from the consumer on the main thread: detect_start) */
    int32_t topic_parts;
};

/* A batch detected whose offsets are not committed yet: its number, when
 * it was detected, and the offsets every partition may commit once the
 * changes up to it are in Redis (batch_offsets). */
struct mark {
    uint64_t seq;
    int64_t ms;
    int32_t *parts;
    int64_t *offsets;
    int64_t *clocks; /* each offset's clock (reorder.h) */
    int n;
};

/* Where the main thread's time goes (wall, monotonic), summed over a run
 * of run(): the last log line's phase_ms (docs/architecture.md, "Where
 * the analyzer's time goes"). */
enum {
    PH_POLL,
    PH_INGEST,
    PH_RELEASE,
    PH_DETECT,
    PH_STORE_WAIT,
    PH_SUBMIT,
    PH_IDLE,
    PH_END,
    PH__N
};
static const char *const phase_names[PH__N] = {"poll",       "ingest", "release", "detect",
                                                "store_wait", "submit", "idle",    "end"};

struct analyzer {
    struct st_analyzer_conf conf;
    int64_t phase_us[PH__N];
    struct st_consumer *consumer;
    struct st_rpipe *redis;        /* global detectors' prefetch, idle trims */
    struct st_rpipe *store_redis;  /* checkpoints (the store thread only) */
    /* the owner epochs of the partitions held, around every checkpoint
     * (fence.h); NULL in analyzer.role=store, which writes no Redis */
    struct st_fence *fence;
    struct st_registry *registry;  /* cross-run detector state */
    struct st_workers *workers;    /* every detector instance (workers.h) */
    struct st_detect_stats stats;  /* the workers' sum, read between batches */
    /* checkpoints built; the newest that ran and whose batch's offsets
     * Kafka took (what after_commit may trim and evict up to) */
    uint64_t ck_seq, committed_seq;
    /* the newest cut: every change of the batches up to it is in the
     * checkpoints built; the batches detected since, oldest first (the
     * offsets a later batch commits when its cut reaches them) */
    uint64_t cut_seq;
    struct mark *marks;
    size_t nmarks, capmarks;
    int64_t last_ckpt_ms; /* monotonic time of the last batch or flush */
    struct st_checkpoint *flush_ckpt; /* detectors_flush's (main thread) */
    /* a forced detectors_flush is running (the state leaves memory next),
     * and the offsets its commit took (final_n 0: none yet): its
     * after_commit leaves out the writes a load reproduces (detect.h's
     * ctx->final) */
    int flushing_final;
    int final_n;
    int32_t final_parts[1024];
    int64_t final_offsets[1024];
    int64_t loads_seen, evictions_seen, malformed_seen;
    struct st_sink *sink;
    struct st_store *store;
    struct st_reorder *reorder;
    struct st_onepass *reader; /* the main thread's (st_event_read) */
    struct st_parsed *parsed; /* ingest's parse results, parsedcap of them */
    size_t parsedcap;
    /* slots[fill] is being filled; the others may be in flight (store.h:
     * one stored ahead, one written, one committed) */
    struct slot slots[NSLOTS];
    int fill;
    struct slot *detected; /* the slot whose batch the detectors hold */
    /* The batch detected, or being detected, and not handed to the store
     * yet (finish_pending); NULL: none. With detect.overlap its detection
     * runs on det_thread (detect_main) while this thread polls, parses
     * and releases the next batch: everything else that touches the
     * detectors, the marks, a->redis or a->conf (batch_done, a flush, the
     * rebalance callbacks, a reload) first waits for it (finish_pending
     * or detect_wait). det_mu guards det_busy, det_quit and det_rc. */
    struct slot *pending;
    int det_started;
    pthread_t det_thread;
    pthread_mutex_t det_mu;
    pthread_cond_t det_cv;
    int det_busy, det_quit, det_rc;
    /* the store gave up during a revocation (asked to stop), or run()
     * failed: on_revoke (at the consumer's close) then writes nothing */
    int gave_up;
    /* run() has returned: the consumer's close revokes every partition
     * and the process exits next, so the detectors' state, written by that
     * revoke's flush, is not freed run by run (LEAVE_STATE_AT_EXIT) */
    int exiting;
    struct st_deadletter *dlq;
    long events, invalid, refused, late, skewed, batches, findings_written;
    struct st_metrics *metrics;
    struct st_sources *sources; /* per-source metrics */
    struct st_metric *m_events, *m_invalid, *m_late, *m_skewed, *m_batches, *m_buffered;
    struct st_metric *m_buffered_bytes, *m_unparsed;
    size_t unparsed_seen;
    struct st_metric *m_redis_s, *m_redis_err;
    struct st_metric *m_runs, *m_entries, *m_loads, *m_evictions, *m_malformed, *m_ckpt_s;
};

static void metrics_init(struct analyzer *a)
{
    struct st_metrics *m = a->metrics = st_metrics_new();
    a->m_events = st_metric_get(m, ST_METRIC_COUNTER, "sandtrail_analyzer_events_total",
                                "events consumed and stored", "");
    a->m_invalid = st_metric_get(m, ST_METRIC_COUNTER,
                                 "sandtrail_analyzer_events_invalid_total",
                                 "messages that are not valid events (dead-lettered, but "
                                 "by the store role when analyzer.role=detect)", "");
    a->m_late = st_metric_get(m, ST_METRIC_COUNTER, "sandtrail_analyzer_events_late_total",
                              "events that arrived after their partition's watermark", "");
    a->m_skewed = st_metric_get(m, ST_METRIC_COUNTER,
                                "sandtrail_analyzer_events_skewed_total",
                                "events stamped too far from their receive time "
                                "(detected on the receive time)", "");
    a->m_batches = st_metric_get(m, ST_METRIC_COUNTER, "sandtrail_analyzer_batches_total",
                                 "batches written to PostgreSQL", "");
    a->m_buffered = st_metric_get(m, ST_METRIC_GAUGE, "sandtrail_analyzer_reorder_buffered",
                                  "events waiting for their watermark", "");
    a->m_buffered_bytes = st_metric_get(
        m, ST_METRIC_GAUGE, "sandtrail_analyzer_reorder_buffered_bytes",
        "bytes the events waiting for their watermark hold (most parked: their text)", "");
    a->m_unparsed = st_metric_get(m, ST_METRIC_COUNTER,
                                  "sandtrail_analyzer_events_unparsed_total",
                                  "parked events that did not parse again when released "
                                  "(stored, not detected; logged)", "");
    a->m_redis_s = st_metric_get(m, ST_METRIC_HISTOGRAM, "sandtrail_analyzer_redis_seconds",
                                 "time of one batch's prefetch round trip (state not in memory)", "");
    a->m_redis_err = st_metric_get(m, ST_METRIC_COUNTER, "sandtrail_analyzer_redis_errors_total",
                                   "failed Redis round trips (the batch is retried)", "");
    a->m_runs = st_metric_get(m, ST_METRIC_GAUGE, "sandtrail_analyzer_state_runs",
                              "per-detector run states in memory", "");
    a->m_entries = st_metric_get(m, ST_METRIC_GAUGE, "sandtrail_analyzer_state_entries",
                                 "credentials, fingerprints and destinations in memory", "");
    a->m_loads = st_metric_get(m, ST_METRIC_COUNTER, "sandtrail_analyzer_state_loads_total",
                               "detector states read from Redis (not in memory)", "");
    a->m_evictions = st_metric_get(m, ST_METRIC_COUNTER,
                                   "sandtrail_analyzer_state_evictions_total",
                                   "detector states dropped from memory, idle "
                                   "(state.evict_s)", "");
    a->m_malformed = st_metric_get(m, ST_METRIC_COUNTER,
                                   "sandtrail_analyzer_state_malformed_total",
                                   "detector states read from Redis that were not in "
                                   "our format (ignored: the run went on without them)", "");
    a->m_ckpt_s = st_metric_get(m, ST_METRIC_HISTOGRAM,
                                "sandtrail_analyzer_checkpoint_seconds",
                                "time of one batch's Redis checkpoint", "");
}

static void metrics_state(struct analyzer *a)
{
    st_workers_stats(a->workers, &a->stats);
    st_metric_set(a->m_runs, a->stats.runs);
    st_metric_set(a->m_entries, a->stats.entries);
    st_metric_add(a->m_loads, a->stats.loads - a->loads_seen);
    st_metric_add(a->m_evictions, a->stats.evictions - a->evictions_seen);
    a->loads_seen = a->stats.loads;
    a->evictions_seen = a->stats.evictions;
    st_metric_add(a->m_malformed, a->stats.malformed - a->malformed_seen);
    a->malformed_seen = a->stats.malformed;
}

static void metrics_findings(struct analyzer *a, const struct st_findings *fs)
{
    char labels[128];
    for (size_t i = 0; i < fs->n; i++) {
        const struct st_finding *f = &fs->items[i];
        snprintf(labels, sizeof(labels), "detector=\"%s\",severity=\"%s\"", f->detector,
                 st_severity_name(f->severity));
        st_metric_add(st_metric_get(a->metrics, ST_METRIC_COUNTER,
                                    "sandtrail_analyzer_finding_updates_total",
                                    "findings created or updated, by detector and severity",
                                    labels),
                      1);
    }
}

/* Publishes the lag per partition and says whether the analyzer is ready:
 * partitions assigned and no more than health.max_lag events behind. */
static void metrics_lag(struct analyzer *a, const int32_t *parts, const int64_t *offsets,
                        int n)
{
    char labels[64], reason[160];
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        int64_t lag = st_consumer_lag(a->consumer, parts[i], offsets[i]);
        if (lag < 0)
            continue;
        total += lag;
        snprintf(labels, sizeof(labels), "partition=\"%d\"", (int)parts[i]);
        st_metric_set(st_metric_get(a->metrics, ST_METRIC_GAUGE,
                                    "sandtrail_analyzer_consumer_lag",
                                    "messages not yet committed, per partition", labels),
                      lag);
    }
    if (st_store_retrying(a->store)) {
        /* not ready: the store thread said why */
    } else if (n == 0) {
        st_metrics_set_ready(a->metrics, "no partition assigned");
    } else if (total > a->conf.health_max_lag) {
        snprintf(reason, sizeof(reason),
                 "backed up: %" PRId64 " events behind (health.max_lag %" PRId64 ")", total,
                 a->conf.health_max_lag);
        st_metrics_set_ready(a->metrics, reason);
    } else {
        st_metrics_set_ready(a->metrics, NULL);
    }
}

static void detectors_reset(struct analyzer *a)
{
    if (a->workers) /* none in analyzer.role=store */
        st_workers_reset(a->workers);
}

/* Runs the detectors over the slot's released events (workers.h: per-run
 * detectors on the workers, the others on this thread), recording findings
 * in its batch and the write-back in its checkpoint. Redis is read only for
 * state not in memory: one round trip per worker, or none. Returns 0, or -1
 * with errstr (nothing was fed: the detection is simply tried again). */
static int detect_try(struct analyzer *a, struct slot *sl, char *errstr, size_t errsz)
{
    st_findings_reset(&sl->b->findings);
    st_checkpoint_clear(sl->ckpt);
    a->detected = sl;
    /* partitions added change where a task's events go (runidx.h) */
    st_workers_set_partitions(a->workers, sl->topic_parts);
    if (st_workers_detect(a->workers, sl->rel, sl->nrel, a->ck_seq + 1, sl->cut + 1,
                          &sl->b->findings, sl->ckpt, errstr, errsz))
        return -1;
    sl->seq = ++a->ck_seq;
    return 0;
}

/* Drops the n oldest marks. */
static void marks_drop(struct analyzer *a, size_t n)
{
    if (n == 0)
        return;
    for (size_t i = 0; i < n; i++) {
        free(a->marks[i].parts);
        free(a->marks[i].offsets);
        free(a->marks[i].clocks);
    }
    memmove(a->marks, a->marks + n, (a->nmarks - n) * sizeof(*a->marks));
    a->nmarks -= n;
}

/* The cut of the batch about to be detected (number a->ck_seq + 1): the
 * newest batch detected state.checkpoint_ms ago or more (for a batch
 * polled while behind, state.checkpoint_behind_ms when longer), which the
 * marks tell; with 0 the batch itself. Its checkpoint then holds what changed in
 * the batches up to the cut, and commits the offsets of the cut's batch;
 * when no newer batch is that old, the cut stays (the batch commits
 * nothing). Decided once per batch, before its first attempt. */
static void cut_of(struct analyzer *a, struct slot *sl)
{
    int64_t now = st_time_mono_ms();
    a->last_ckpt_ms = sl->ms = now;
    sl->commits = 0;
    if (a->conf.checkpoint_ms == 0) {
        sl->cut = a->ck_seq + 1;
        sl->commits = 1;
    } else {
        /* (every mark is newer than a->cut_seq: marks_commit drops the
         * others) */
        int64_t interval = a->conf.checkpoint_ms;
        if (sl->behind && a->conf.checkpoint_behind_ms > interval)
            interval = a->conf.checkpoint_behind_ms;
        for (size_t i = a->nmarks; i-- > 0;) {
            if (now - a->marks[i].ms >= interval) {
                a->cut_seq = a->marks[i].seq;
                sl->commits = 1;
                break;
            }
        }
        sl->cut = a->cut_seq;
    }
    a->cut_seq = sl->cut;
}

/* Notes the batch just detected (sl->seq) and its offsets (b's, from
 * batch_offsets), for the batch whose cut will reach it; then puts in b
 * the offsets the batch commits: those of its cut's batch, or none. */
static void marks_commit(struct analyzer *a, struct slot *sl, struct st_store_batch *b)
{
    if (a->conf.checkpoint_ms == 0)
        return; /* its cut is itself: b's own offsets */
    if (a->nmarks == a->capmarks) {
        a->capmarks = a->capmarks ? 2 * a->capmarks : 16;
        a->marks = st_realloc(a->marks, a->capmarks * sizeof(*a->marks));
    }
    struct mark *m = &a->marks[a->nmarks++];
    m->seq = sl->seq;
    m->ms = sl->ms;
    m->n = b->nparts;
    m->parts = st_malloc((size_t)(b->nparts ? b->nparts : 1) * sizeof(*m->parts));
    m->offsets = st_malloc((size_t)(b->nparts ? b->nparts : 1) * sizeof(*m->offsets));
    m->clocks = st_malloc((size_t)(b->nparts ? b->nparts : 1) * sizeof(*m->clocks));
    memcpy(m->parts, b->parts, (size_t)b->nparts * sizeof(*m->parts));
    memcpy(m->offsets, b->offsets, (size_t)b->nparts * sizeof(*m->offsets));
    memcpy(m->clocks, b->clocks, (size_t)b->nparts * sizeof(*m->clocks));
    b->nparts = 0;
    if (!sl->commits)
        return;
    size_t k = 0;
    while (k < a->nmarks && a->marks[k].seq <= sl->cut)
        k++;
    /* marks[k - 1] is the cut's batch (noted when it was submitted) */
    if (k > 0 && a->marks[k - 1].seq == sl->cut) {
        const struct mark *c = &a->marks[k - 1];
        size_t n = (size_t)(c->n ? c->n : 1);
        b->parts = st_realloc(b->parts, n * sizeof(*b->parts));
        b->offsets = st_realloc(b->offsets, n * sizeof(*b->offsets));
        b->clocks = st_realloc(b->clocks, n * sizeof(*b->clocks));
        memcpy(b->parts, c->parts, (size_t)c->n * sizeof(*b->parts));
        memcpy(b->offsets, c->offsets, (size_t)c->n * sizeof(*b->offsets));
        memcpy(b->clocks, c->clocks, (size_t)c->n * sizeof(*b->clocks));
        b->nparts = c->n;
    }
    marks_drop(a, k);
}

/* One wait of a retry loop on the main thread: not ready (why), then,
 * unless asked to stop (-1, logged as stopped while <stopped>), sleeps for
 * *backoff ms, logged as <what>, and doubles it up to retry.max_backoff_ms. */
static int retry_wait(struct analyzer *a, int64_t *backoff, const char *why,
                      const char *stopped, const char *what, const char *errstr)
{
    st_metrics_set_ready(a->metrics, why);
    if (stop) {
        st_error("stopped while %s (%s)", stopped, errstr);
        return -1;
    }
    st_error("%s, retrying in %" PRId64 " ms: %s", what, *backoff, errstr);
    usleep((useconds_t)*backoff * 1000);
    *backoff = *backoff * 2 > a->conf.retry_max_backoff_ms ? a->conf.retry_max_backoff_ms
                                                           : *backoff * 2;
    return 0;
}

/* Detects until Redis answers. Returns 0, or -1 when asked to stop first.
 * noinline (here, ingest and slot_clear): called once per batch, and kept
 * a symbol of its own for scripts/bench/cpu-drain's inclusive count. */
static __attribute__((noinline)) int detect(struct analyzer *a, struct slot *sl)
{
    int64_t backoff = 100;
    char errstr[1024];

    cut_of(a, sl);
    if (a->conf.slow_detect_ms > 0)
        usleep((useconds_t)a->conf.slow_detect_ms * 1000);
    while (detect_try(a, sl, errstr, sizeof(errstr)))
        if (retry_wait(a, &backoff,
                       "a batch cannot be written to PostgreSQL or Redis: retrying",
                       "a batch was being retried: its offsets are not committed",
                       "batch not written", errstr))
            return -1;
    return 0;
}

/* Sends msg to the dead-letter topic and tells the sink it will not be
 * stored with b. */
static void dead_letter(struct analyzer *a, struct st_store_batch *b,
                        const rd_kafka_message_t *msg, const char *reason, const char *error)
{
    char labels[96];
    /* the error may quote the message: only the record, redacted, holds it */
    st_warn("dead-lettering the message at %s [%" PRId32 "] offset %" PRId64 ": %s",
            rd_kafka_topic_name(msg->rkt), msg->partition, msg->offset, reason);
    st_deadletter_send(a->dlq, msg, reason, error);
    st_sink_skip(a->sink, b->rows, msg, reason);
    snprintf(labels, sizeof(labels), "reason=\"%s\"", reason);
    st_metric_add(st_metric_get(a->metrics, ST_METRIC_COUNTER,
                                "sandtrail_analyzer_dead_lettered_total",
                                "consumed messages sent to the dead-letter topic, by reason",
                                labels),
                  1);
}

/* The slot holding b (slots[i].b never changes after start-up: any
 * thread may read it). */
static struct slot *slot_of(struct analyzer *a, const struct st_store_batch *b)
{
    for (int i = 0; i < NSLOTS; i++)
        if (a->slots[i].b == b)
            return &a->slots[i];
    st_fatal("a batch of no slot");
}

/* Runs in the store's committer thread after a batch's PostgreSQL commit and before
 * its Kafka commit: the detectors' checkpoint the batch carries (the
 * changes of the batches up to its cut not yet written; with
 * state.checkpoint_ms=0 every change up to it) to Redis, on the store's own
 * connection. Idempotent (absolute values), so the store
 * runs it again after a failure; the offsets wait for it. Redis thus never
 * holds state PostgreSQL has not committed, and the offsets never pass
 * state Redis lacks. Fenced by the partitions' owner epochs (fence.h): a
 * checkpoint refused because another analyzer took a partition over is
 * fatal (logged; the store gives up, the analyzer exits 1 as after a lost
 * assignment). @locality the store thread */
static int store_checkpoint(void *arg, const struct st_store_batch *b, char *errstr,
                            size_t errsz)
{
    struct analyzer *a = arg;
    const struct slot *sl = slot_of(a, b);
    if (st_checkpoint_len(sl->ckpt) == 0)
        return 0; /* nothing to write */
    if (st_consumer_assignment_lost(a->consumer)) {
        stop = 1; /* the store gives up: nothing of this batch is committed */
        snprintf(errstr, errsz, "the partitions were lost: the detectors' checkpoint is "
                                "not written, another analyzer may own their runs");
        return -1;
    }
    int64_t t0 = st_time_mono_us();
    int rc = st_fence_exec(a->fence, a->store_redis, sl->ckpt, errstr, errsz);
    st_metric_observe(a->m_ckpt_s, (double)(st_time_mono_us() - t0) / 1e6);
    if (rc == ST_FENCE_LOST) {
        stop = 1; /* as a lost assignment: the store gives up, run() fails */
        return -1;
    }
    if (rc)
        st_metric_add(a->m_redis_err, 1);
    return rc;
}

/* Once nothing can redo a batch (its transaction, checkpoint and offsets
 * are committed, up to checkpoint a->committed_seq, the cut of the batch
 * that committed them): the detectors trim their state in memory, the
 * deletions going into a later checkpoint (as changes of the next batch
 * detected), and evict what is idle. Trims of batches detected later wait
 * in each run for their own commit. */
static void detectors_after_commit(struct analyzer *a)
{
    if (!a->workers)
        return; /* analyzer.role=store */
    struct st_detect_offsets final = {a->final_parts, a->final_offsets, a->final_n};
    st_workers_after_commit(a->workers, a->committed_seq, a->ck_seq + 1,
                            a->final_n ? &final : NULL);
    a->final_n = 0;
    metrics_state(a);
}

/* detectors_flush's steps (st_checkpoint_flush), on the main thread. */
static void flush_end_batch(void *arg, struct st_checkpoint *c, uint64_t seq, int all)
{
    struct analyzer *a = arg;
    st_workers_end_batch(a->workers, c, seq, all);
}

static int flush_exec(void *arg, const struct st_checkpoint *c, int retry)
{
    struct analyzer *a = arg;
    char errstr[512];
    int64_t backoff = 100;
    int rc;
    while ((rc = st_fence_exec(a->fence, a->redis, c, errstr, sizeof(errstr))) != 0) {
        if (rc == ST_FENCE_LOST) { /* logged; nothing more is written */
            a->gave_up = 1; /* run() ends with status 1 */
            stop = 1;
            return -1;
        }
        st_metric_add(a->m_redis_err, 1);
        if (!retry) {
            st_warn("detector state not trimmed in Redis: %s", errstr);
            return -1;
        }
        if (retry_wait(a, &backoff,
                       "the detectors' checkpoint cannot be written to Redis: retrying",
                       "the detectors' checkpoint was being retried: offsets not committed",
                       "detectors' checkpoint not written", errstr))
            return -1;
    }
    return 0;
}

/* The assigned partitions (at most 1024), the offset each may commit now
 * and its clock (the reorder buffer's commit point, committed with it);
 * returns their count. */
static int offsets_now(struct analyzer *a, int32_t parts[1024], int64_t offsets[1024],
                       int64_t clocks[1024])
{
    int n = st_consumer_partitions(a->consumer, parts, 1024);
    for (int i = 0; i < n; i++)
        offsets[i] = st_reorder_commit_point(a->reorder, parts[i], &clocks[i]);
    return n;
}

static int flush_commit(void *arg)
{
    struct analyzer *a = arg;
    char errstr[512];
    int32_t parts[1024];
    int64_t offsets[1024], clocks[1024];
    int n = offsets_now(a, parts, offsets, clocks);
    /* with the dead-letter records they pass (deadletter.h), retried until
     * Kafka takes them */
    int rc;
    while ((rc = st_deadletter_commit(a->dlq, a->consumer, parts, offsets, clocks, n, &stop,
                                      errstr, sizeof(errstr))) < 0) {
        st_error("%s: offsets are not committed until they are", errstr);
        if (stop)
            return -1;
        usleep(200 * 1000);
    }
    if (rc == 0 && a->flushing_final) {
        memcpy(a->final_parts, parts, (size_t)n * sizeof(*parts));
        memcpy(a->final_offsets, offsets, (size_t)n * sizeof(*offsets));
        a->final_n = n;
    }
    return rc ? 1 : 0;
}

static void flush_after_commit(void *arg, uint64_t seq)
{
    (void)seq; /* a->committed_seq, which st_checkpoint_flush keeps */
    detectors_after_commit(arg);
}

static const struct st_checkpoint_flush_ops flush_ops = {
    .end_batch = flush_end_batch,
    .exec = flush_exec,
    .commit = flush_commit,
    .after_commit = flush_after_commit,
};

/* Between batches, with no batch in flight (every batch detected is
 * committed to PostgreSQL): when a checkpoint is due (state.checkpoint_ms
 * passed since the last batch or flush: the stream is idle) or force is
 * set, writes every change the detectors hold that no checkpoint carried
 * yet -- those the rolling write-back keeps pending (the batches after the
 * last cut), the trims since -- then commits the offsets of
 * every assigned partition, which now cover only what PostgreSQL and Redis
 * hold; then trims and evicts. Used when the stream is idle, and forced
 * before a revoke forgets the state and at the end of --drain or a stop,
 * so that no change leaves memory unwritten (forced, it sends the trims
 * runwin.c holds back while few, too, and then the trims its own commit
 * allows, deletions only). Retried with backoff until
 * Redis takes it (the detectors marked the state saved in it: it must
 * run); returns -1 when asked to stop meanwhile (offsets not committed: the
 * batches are redone, as after a crash). @locality the main thread */
static int detectors_flush(struct analyzer *a, int force)
{
    if (!a->workers || st_store_busy(a->store))
        return 0;
    int64_t now = st_time_mono_ms();
    if (!force && a->conf.checkpoint_ms > 0 && now - a->last_ckpt_ms < a->conf.checkpoint_ms) {
        detectors_after_commit(a); /* evicts what is idle and written */
        return 0;
    }
    /* (when nothing changed too: held trims are looked at once an interval) */
    a->last_ckpt_ms = now;
    a->flushing_final = force;
    a->final_n = 0;
    int rc = st_checkpoint_flush(a->flush_ckpt, &flush_ops, a, &a->ck_seq, &a->committed_seq,
                                 force);
    a->flushing_final = 0;
    a->final_n = 0;
    if (rc)
        return -1;
    /* everything is written (the cut is now), and the offsets committed
     * are the newest: no batch commits an older mark's */
    a->cut_seq = a->ck_seq;
    marks_drop(a, a->nmarks);
    return 0;
}

/* Partitions revoked: every detector state is forgotten, and read again
 * from Redis when next needed. Called with no batch in flight, when
 * everything stored is in Redis (all of it, not only the revoked
 * partitions' runs: simpler, and it only costs reloads). */
static void detectors_forget(struct analyzer *a)
{
    if (!a->workers)
        return; /* not started yet, or shut down */
    st_workers_forget(a->workers);
    metrics_state(a);
}

/* Parses each message, stages its row for PostgreSQL in b and hands the
 * event to the reorder buffer; a message that is not a valid event goes to
 * the dead-letter topic. An event stamped too far from the time the
 * collector produced it (the message's timestamp) is stored as it came, but
 * detected on its receive time (reorder.h).
 *
 * Two phases: the parse of every message, on the detection workers at once
 * when there are several (st_workers_parse: by partition, this thread being
 * worker 0) and the batch is large enough (detect.parse_split_min), into
 * a->parsed; then, on this thread and in the messages' order, everything
 * else. Only the parse moves, so the rows, dead-letter records and released
 * events are those of a parse here, message after message. noinline: see
 * detect(). */
static __attribute__((noinline)) void ingest(struct analyzer *a, struct st_store_batch *b,
                                             int64_t now)
{
    int64_t wall_s = (int64_t)time(NULL);
    uint64_t events = 0;
    struct st_parsed *pre = NULL;
    /* below detect.parse_split_min, waking the other workers and waiting for
     * them costs about what their share of the parse saves
     * (docs/architecture.md, "Where the analyzer's time goes") */
    if (a->workers && !a->det_started && st_workers_count(a->workers) > 1 &&
        a->conf.parse_split_min > 0 && b->nmsgs >= a->conf.parse_split_min) {
        if ((size_t)b->nmsgs > a->parsedcap) {
            a->parsedcap = (size_t)b->nmsgs;
            a->parsed = st_realloc(a->parsed, a->parsedcap * sizeof(*a->parsed));
        }
        st_workers_parse(a->workers, b->msgs, (size_t)b->nmsgs, a->parsed);
        pre = a->parsed;
    }
    for (int i = 0; i < b->nmsgs; i++) {
        rd_kafka_message_t *m = b->msgs[i];
        struct st_parsed one, *p = pre ? &pre[i] : &one;
        /* parsed on another core: the source name read below is cold */
        if (pre && i + 8 < b->nmsgs && pre[i + 8].rc == 0)
            __builtin_prefetch(pre[i + 8].u.ev.source_name);
        if (!pre) {
            struct st_reject rej;
            p->rc = st_event_read(a->reader, &p->u.ev, m->payload, m->len, &rej);
            if (p->rc)
                p->u.rej = rej;
        }
        if (p->rc) {
            const struct st_reject *rej = &p->u.rej;
            a->invalid++;
            st_metric_add(a->m_invalid, 1);
            if (a->conf.role == ST_ROLE_DETECT)
                /* the store role dead-letters it: one record per message */
                st_warn("skipping the message at %s [%" PRId32 "] offset %" PRId64
                        ": %s (not dead-lettered by the detect role)",
                        rd_kafka_topic_name(m->rkt), m->partition, m->offset, rej->code);
            else
                dead_letter(a, b, m, rej->code, rej->msg);
            st_reorder_note(a->reorder, m->partition, m->offset);
            continue;
        }
        struct st_event ev = p->u.ev; /* ours from here */
        int64_t recv_ms = rd_kafka_message_timestamp(m, NULL);
        int64_t recv_us = recv_ms >= 0 ? recv_ms * 1000 : -1;
        int skewed = st_reorder_skewed(ev.ts_us, recv_us, a->conf.max_future_s * 1000000,
                                       a->conf.max_past_s * 1000000);
        st_sources_seen(a->sources, ev.source_name, wall_s);
        struct st_sink_event se = {&ev, m, skewed};
        st_sink_stage(a->sink, b->rows, &se);
        if (skewed) {
            a->skewed++;
            st_metric_add(a->m_skewed, 1);
            ev.ts_us = recv_us;
        }
        if (st_role_detects(a->conf.role))
            st_reorder_push(a->reorder, m->partition, m->offset, &ev, m->payload, m->len,
                            now, skewed);
        else { /* nothing to detect: its offset is done once stored */
            st_reorder_note(a->reorder, m->partition, m->offset);
            st_event_fini(&ev);
        }
        events++;
    }
    a->events += (long)events;
    st_metric_add(a->m_events, (int64_t)events); /* once a batch, not per event */
    st_sources_publish(a->sources);
}

/* The offsets everything before which is stored once b is, for every
 * assigned partition; also refreshes the lag and readiness from them. */
static void batch_offsets(struct analyzer *a, struct st_store_batch *b)
{
    int32_t parts[1024];
    int64_t offsets[1024], clocks[1024];
    int n = offsets_now(a, parts, offsets, clocks);
    b->parts = st_realloc(b->parts, (size_t)(n ? n : 1) * sizeof(*b->parts));
    b->offsets = st_realloc(b->offsets, (size_t)(n ? n : 1) * sizeof(*b->offsets));
    b->clocks = st_realloc(b->clocks, (size_t)(n ? n : 1) * sizeof(*b->clocks));
    memcpy(b->parts, parts, (size_t)n * sizeof(*b->parts));
    memcpy(b->offsets, offsets, (size_t)n * sizeof(*b->offsets));
    memcpy(b->clocks, clocks, (size_t)n * sizeof(*b->clocks));
    b->nparts = n;
    metrics_lag(a, b->parts, b->offsets, n);
    st_metric_set(a->m_buffered, (int64_t)st_reorder_buffered(a->reorder));
    /* (after the batch's park: a walk of the partitions only) */
    st_metric_set(a->m_buffered_bytes, (int64_t)st_reorder_bytes(a->reorder));
    size_t unparsed = st_reorder_unparsed(a->reorder);
    st_metric_add(a->m_unparsed, (int64_t)(unparsed - a->unparsed_seen));
    a->unparsed_seen = unparsed;
}

/* 1 when every partition the slot's released events came from is still
 * assigned (a partition revoked meanwhile is redone by its next owner). */
static int slot_held(struct analyzer *a, const struct slot *sl)
{
    int32_t parts[1024];
    int n = st_consumer_partitions(a->consumer, parts, 1024);
    for (size_t i = 0; i < sl->nrel; i++) {
        int held = 0;
        for (int j = 0; j < n && !held; j++)
            held = parts[j] == sl->rel[i].partition;
        if (!held)
            return 0;
    }
    return 1;
}

/* Frees the slot's released events and resets its batch. noinline: see
 * detect(). */
static __attribute__((noinline)) void slot_clear(struct slot *sl)
{
    for (size_t i = 0; i < sl->nrel; i++)
        st_reorder_item_fini(&sl->rel[i]);
    sl->nrel = 0;
    st_store_batch_reset(sl->b);
}

/* Waits for the batch in flight, if any, and finishes it on this side:
 * events the store refused leave the reorder buffer, and the detectors trim
 * their state if the Kafka commit took, the batch's partitions are still
 * ours (trims of a batch detected since wait in each run for its own
 * commit). Returns 0, or -1 when the store gave up
 * (asked to stop while retrying). @locality the main thread */
static int batch_done(struct analyzer *a)
{
    struct st_store_batch *b = st_store_wait(a->store);
    if (!b)
        return 0;
    struct slot *sl = slot_of(a, b);
    int failed = b->failed;
    /* (the store role has no detectors: every batch commits its offsets) */
    if (!failed) {
        for (size_t i = 0; i < b->nrefused; i++)
            st_reorder_forget(a->reorder, b->refused[i].partition, b->refused[i].offset);
        a->refused += (long)b->nrefused;
        a->findings_written += (long)b->findings.n;
        a->batches++;
        st_metric_add(a->m_batches, 1);
        metrics_findings(a, &b->findings);
        /* offsets Kafka did not take (a rebalance) may be redone by
         * another analyzer: then nothing is trimmed. Kafka took the
         * offsets of the batch's cut: nothing redoes the batches up to it,
         * whose trims may go; a batch whose cut did not move committed no
         * offsets: it trims nothing new, only evicts */
        if (b->committed && slot_held(a, sl)) {
            if (sl->commits && sl->cut > a->committed_seq)
                a->committed_seq = sl->cut;
            detectors_after_commit(a);
        }
    }
    if (a->detected == sl) {
        detectors_reset(a); /* the detectors drop their pointers into rel */
        a->detected = NULL;
    }
    slot_clear(sl);
    return failed ? -1 : 0;
}

/* The detection thread (detect.overlap): detects each batch handed over
 * (detect_start), one at a time, until told to quit. */
static void *detect_main(void *arg)
{
    struct analyzer *a = arg;
    pthread_mutex_lock(&a->det_mu);
    for (;;) {
        while (!a->det_busy && !a->det_quit)
            pthread_cond_wait(&a->det_cv, &a->det_mu);
        if (!a->det_busy)
            break;
        struct slot *sl = a->pending;
        pthread_mutex_unlock(&a->det_mu);
        int rc = detect(a, sl);
        pthread_mutex_lock(&a->det_mu);
        a->det_rc = rc;
        a->det_busy = 0;
        pthread_cond_broadcast(&a->det_cv);
    }
    pthread_mutex_unlock(&a->det_mu);
    return NULL;
}

/* Starts the detection of sl's batch, which becomes the pending one (none
 * may be pending): on the detection thread when there is one (returns 0),
 * else here (returns detect's result). */
static int detect_start(struct analyzer *a, struct slot *sl)
{
    sl->topic_parts = st_consumer_topic_partitions(a->consumer);
    a->pending = sl;
    if (!a->det_started)
        return a->det_rc = detect(a, sl);
    pthread_mutex_lock(&a->det_mu);
    a->det_rc = 0;
    a->det_busy = 1;
    pthread_cond_broadcast(&a->det_cv);
    pthread_mutex_unlock(&a->det_mu);
    return 0;
}

/* Waits until no detection runs: 0, or -1 when the pending batch's
 * detection failed (asked to stop while retrying). */
static int detect_wait(struct analyzer *a)
{
    if (!a->pending)
        return 0;
    if (a->det_started) {
        pthread_mutex_lock(&a->det_mu);
        while (a->det_busy)
            pthread_cond_wait(&a->det_cv, &a->det_mu);
        pthread_mutex_unlock(&a->det_mu);
    }
    return a->det_rc ? -1 : 0;
}

/* Hands the pending batch, if any, to the store, as the loop did right
 * after each detection before detect.overlap: waits for its detection,
 * then for the store to have room (finishing the oldest batch: batch_done),
 * notes its mark and submits it. Returns 0, or -1 when its detection or a
 * batch in flight failed; it is then not submitted, and run() drops it
 * at its end. */
static int finish_pending(struct analyzer *a)
{
    struct slot *sl = a->pending;
    if (!sl)
        return 0;
    if (detect_wait(a))
        return -1;
    while (st_store_in_flight(a->store) >= ST_STORE_IN_FLIGHT)
        if (batch_done(a))
            return -1;
    a->pending = NULL;
    marks_commit(a, sl, sl->b);
    st_store_submit(a->store, sl->b);
    return 0;
}

/* Stops the detection thread (none may be pending). */
static void detect_thread_stop(struct analyzer *a)
{
    if (!a->det_started)
        return;
    pthread_mutex_lock(&a->det_mu);
    a->det_quit = 1;
    pthread_cond_broadcast(&a->det_cv);
    pthread_mutex_unlock(&a->det_mu);
    pthread_join(a->det_thread, NULL);
    pthread_mutex_destroy(&a->det_mu);
    pthread_cond_destroy(&a->det_cv);
    a->det_started = 0;
}

/* A partition is taken away (inside st_consumer_poll_batch): the batches in
 * flight are stored, then every change no checkpoint carried yet is written
 * and the offsets committed (detectors_flush), while the partition is
 * still ours, so that every offset we had is either committed by us with
 * its state in Redis or redone by the next owner, and nothing we forget
 * below is missing from Redis.
 *
 * A lost assignment is different: this analyzer was out of its group
 * longer than kafka.session.timeout.ms (stopped, starved, cut off), and
 * another one may own the partition already and have written the runs'
 * state since -- a checkpoint of ours would replace a small run's string
 * with our older one. So nothing is written: no flush, and the checkpoints
 * of batches in flight refuse too (store_checkpoint); the analyzer stops
 * with status 1 as after a crash, and the owner redoes what we did not
 * commit. A checkpoint the committer was already sending when the process
 * was stopped is refused by Redis itself: every checkpoint is fenced by
 * the partitions' owner epochs, which the new owner incremented
 * (fence.h). A revoke's own flush is fenced too (and succeeds: nobody was
 * assigned the partition yet); the partition's epoch is released after
 * it. */
static void on_revoke(int32_t partition, int lost, void *arg)
{
    struct analyzer *a = arg;
    if (lost) {
        detect_wait(a); /* what it detected is not stored: dropped */
        a->gave_up = 1; /* run() ends with status 1 */
        stop = 1;       /* the store gives up retrying what refuses */
        st_reorder_drop(a->reorder, partition);
        st_deadletter_forget(a->dlq, partition);
        return;
    }
    /* the batch detected before this poll goes to the store first (as
     * without detect.overlap, where it went before the poll) */
    if (a->pending && a->det_started) {
        pthread_mutex_lock(&a->det_mu);
        int busy = a->det_busy;
        pthread_mutex_unlock(&a->det_mu);
        if (busy)
            st_info("partition %" PRId32 " revoked while a batch was being detected: "
                    "that batch is finished and stored first",
                    partition);
    }
    if (finish_pending(a))
        a->gave_up = 1;
    while (st_store_busy(a->store))
        if (batch_done(a))
            a->gave_up = 1; /* run() ends with status 1 */
    if (!a->gave_up && detectors_flush(a, 1))
        a->gave_up = 1;
    if (a->fence)
        st_fence_release(a->fence, partition);
    st_reorder_drop(a->reorder, partition);
    /* what its flush did not commit, the next owner redoes */
    st_deadletter_forget(a->dlq, partition);
    if (!a->exiting || !LEAVE_STATE_AT_EXIT)
        detectors_forget(a);
}

/* A partition is assigned whose committed offset carries its clock
 * (inside st_consumer_poll_batch, before any of its messages): the reorder
 * buffer starts it with that clock if it starts at that offset, so events
 * are late as they were for the process that committed it. */
static void on_resume(int32_t partition, int64_t offset, int64_t clock, void *arg)
{
    struct analyzer *a = arg;
    if (finish_pending(a)) /* the workers' state, below */
        a->gave_up = 1;
    st_reorder_resume(a->reorder, partition, offset, clock);
    if (a->workers) /* a load applies the trims its string carries below it */
        st_workers_resumed(a->workers, partition, offset);
}

/* Partitions assigned (inside st_consumer_poll_batch, before any of their
 * messages is fetched, so before any of their state is read): their owner
 * epochs are incremented and ours kept (fence.h), which refuses from now on
 * every checkpoint of an analyzer that held them before. Retried with
 * backoff while Redis is unavailable; asked to stop meanwhile, the
 * analyzer ends with status 1 without having read or written anything of
 * them. */
static void on_assign(const int32_t *parts, int n, void *arg)
{
    struct analyzer *a = arg;
    char errstr[512];
    int64_t backoff = 100;
    /* the roles that dead-letter: a crashed owner's open transaction
     * aborted at once (deadletter.h) */
    if (st_role_stores(a->conf.role) && !a->gave_up && !stop)
        st_deadletter_claim(a->dlq, a->consumer, parts, n);
    if (!a->fence)
        return; /* analyzer.role=store: no state */
    if (finish_pending(a)) /* the detection's use of a->redis */
        a->gave_up = 1;
    /* stopping (a lost assignment, a refused checkpoint, a signal): it will
     * write nothing of them, and an INCR would refuse the checkpoints of
     * the analyzer that holds them after us */
    if (a->gave_up || stop || st_fence_lost(a->fence))
        return;
    while (st_fence_claim(a->fence, a->redis, parts, n, errstr, sizeof(errstr))) {
        st_metric_add(a->m_redis_err, 1);
        if (retry_wait(a, &backoff,
                       "the partitions' owner epochs cannot be written to Redis: retrying",
                       "claiming the partitions' owner epochs",
                       "owner epochs not written", errstr)) {
            a->gave_up = 1;
            return;
        }
    }
}

/* finish_pending, its two waits added to the detect and store_wait
 * phases from *t (run's clock, moved on) */
static int hand_over(struct analyzer *a, int64_t *t)
{
    int rc = detect_wait(a);
    int64_t t1 = st_time_mono_us();
    a->phase_us[PH_DETECT] += t1 - *t;
    *t = t1;
    if (!rc)
        rc = finish_pending(a);
    t1 = st_time_mono_us();
    a->phase_us[PH_STORE_WAIT] += t1 - *t;
    *t = t1;
    return rc;
}

static int run(struct analyzer *a, int drain)
{
    int max = (int)a->conf.batch_max_events;
    int behind = batch_most(&a->conf);
    int64_t start = st_time_mono_ms();
    int64_t idle_ms = drain ? 0 : a->conf.lateness_s * 1000;
    size_t rel_max = 2 * (size_t)behind > ST_RELEASE_MAX ? 2 * (size_t)behind : ST_RELEASE_MAX;
    int rc = 0, failed = 0, more = 0;

    st_consumer_on_revoke(a->consumer, on_revoke, a);
    st_consumer_on_assign(a->consumer, on_assign, a);
    st_consumer_on_resume(a->consumer, on_resume, a);
    st_consumer_on_stop(a->consumer, &stop);
    a->last_ckpt_ms = st_time_mono_ms(); /* the first checkpoint one interval in */
    int64_t t = st_time_mono_us(), t1;
/* the time since the last mark goes to phase ph */
#define PHASE(ph) (t1 = st_time_mono_us(), a->phase_us[ph] += t1 - t, t = t1)
    while (!stop) {
        if (hup) { /* the detection reads the configuration */
            if (finish_pending(a)) {
                failed = 1;
                break;
            }
            reload(&a->conf);
        }
        struct slot *sl = &a->slots[a->fill];
        struct st_store_batch *b = sl->b;
        /* a live batch (not polled while behind) goes to the store before
         * the next poll, which may wait for messages: its findings wait for
         * no other batch. The overlap is for catching up. */
        if (a->pending && !a->pending->behind) {
            PHASE(PH_SUBMIT);
            if ((failed = hand_over(a, &t) != 0))
                break;
        }
        /* events left to release (a bounded release, below): no wait */
        PHASE(PH_SUBMIT);
        int n = st_consumer_poll_batch(a->consumer, b->msgs, max, behind,
                                      behind_ms(&a->conf),
                                      more ? 0 : (int)a->conf.batch_max_ms);
        PHASE(PH_POLL);
        if (n < 0) {
            rc = -1;
            break;
        }
        b->nmsgs = n;
        sl->behind = n > max;
        if (a->gave_up) {
            failed = 1;
            break;
        }
        int64_t now = st_time_mono_ms();
        ingest(a, b, now);
        PHASE(PH_INGEST);
        int flush = drain && st_consumer_drained(a->consumer);
        /* bounded: a flush (the end of --drain) or an idle partition
         * releases what it holds over the next batches (ST_RELEASE_MAX) */
        sl->nrel = st_reorder_release(a->reorder, flush, now, idle_ms, rel_max, &sl->rel,
                                      &sl->relcap);
        more = sl->nrel >= rel_max;
        /* what waits for a later batch keeps its text, not its parsed
         * document, while more than detect.park_above wait: copied now,
         * while b holds the messages */
        st_reorder_park(a->reorder, (size_t)a->conf.park_above);
        PHASE(PH_RELEASE);
        /* caught up: the evidence part signs what is pending (all of it at
         * the end of --drain, what is old enough otherwise) */
        if (flush || (!drain && st_consumer_drained(a->consumer)))
            st_sink_seal(a->sink, b->rows, flush ? 0 : st_time_now_us() / 1000);
        if (n > 0 || sl->nrel > 0 || !st_sink_batch_empty(b->rows)) {
            uint64_t late = 0;
            for (size_t i = 0; i < sl->nrel; i++)
                late += sl->rel[i].late;
            a->late += (long)late;
            if (late) /* once a batch: an atomic add per event cost 1% */
                st_metric_add(a->m_late, (int64_t)late);
            if (a->workers) { /* the store role has none */
                /* its offsets now, before the next batch's events enter
                 * the reorder buffer (with detect.overlap that batch is
                 * polled while this one is detected) */
                batch_offsets(a, b);
                PHASE(PH_RELEASE);
                /* the batch before, detected meanwhile, goes to the store
                 * first; at most ST_STORE_IN_FLIGHT batches in flight:
                 * batch N is finished there before N+3 goes (N+1 is being
                 * written, N+2's events stored ahead) */
                if ((failed = hand_over(a, &t) != 0))
                    break;
                /* this one's detection: on the detection thread, while
                 * the next batch is polled, or here */
                if ((failed = detect_start(a, sl) != 0))
                    break;
                PHASE(PH_DETECT);
                if (!a->det_started && (failed = hand_over(a, &t) != 0))
                    break;
            } else {
                while (!failed && st_store_in_flight(a->store) >= ST_STORE_IN_FLIGHT)
                    failed = batch_done(a);
                PHASE(PH_STORE_WAIT);
                if (failed)
                    break;
                batch_offsets(a, b);
                st_store_submit(a->store, b);
            }
            a->fill = (a->fill + 1) % NSLOTS;
        } else {
            /* idle: the batch detected meanwhile to the store, then
             * finish the batch in flight if it is done (waiting would
             * stop the polls that may bring the next one), refresh the
             * lag */
            if ((failed = finish_pending(a) != 0))
                break;
            while (!failed && st_store_done(a->store))
                failed = batch_done(a);
            if (failed || (failed = detectors_flush(a, 0)) != 0)
                break;
            batch_offsets(a, b);
            slot_clear(sl);
            PHASE(PH_IDLE);
        }
        if (drain) {
            if (flush && st_reorder_buffered(a->reorder) == 0)
                break;
            if (st_consumer_assigned(a->consumer) == 0 &&
                st_time_mono_ms() - start > a->conf.assign_timeout_ms) {
                st_error("no partition of \"%s\" assigned within %" PRId64 " ms",
                         a->conf.topic_events, a->conf.assign_timeout_ms);
                rc = -1;
                break;
            }
        }
    }
    PHASE(PH_SUBMIT);
    /* a clean stop, or the end of --drain, waits for the batch being
     * detected and the batches in flight, then writes what no checkpoint
     * carried yet (and the last trims) and commits the offsets */
    int det_failed = detect_wait(a) != 0;
    PHASE(PH_DETECT);
    if (!rc && !failed && (det_failed || finish_pending(a)))
        failed = 1;
    while (st_store_busy(a->store))
        if (batch_done(a))
            failed = 1;
    if (!rc && !failed && detectors_flush(a, 1))
        failed = 1;
    PHASE(PH_END);
#undef PHASE
    /* a batch detected and not stored (a failure): dropped, as a crash
     * would, for the next run or owner to redo */
    if (a->pending) {
        if (a->detected == a->pending) {
            detectors_reset(a);
            a->detected = NULL;
        }
        slot_clear(a->pending);
        a->pending = NULL;
    }
    slot_clear(&a->slots[a->fill]);
    /* A failed run leaves what it did not write as a crash does (a batch
     * the store gave up on, changes no checkpoint carried): closing the
     * consumer then revokes the partitions, and on_revoke must neither
     * write the detectors' state nor commit offsets, which would pass
     * that batch's events (released from the reorder buffer) unstored. */
    if (rc || failed)
        a->gave_up = 1;
    return rc || failed ? -1 : 0;
}

/* The last log line: what this run did (the store is idle now: its
 * connection's counter is read safely). */
static void log_totals(struct analyzer *a)
{
    char per[256] = "", cpu[256] = "", phases[256] = "";
    size_t used = 0, cused = 0, pused = 0;
    int64_t det_us = 0, wait_us = 0;
    unsigned long sent = a->redis ? st_rpipe_sent(a->redis) + st_rpipe_sent(a->store_redis) : 0;

    if (a->workers) {
        st_workers_stats(a->workers, &a->stats);
        for (int i = 0; i < st_workers_count(a->workers) && used < sizeof(per) - 24; i++)
            used += (size_t)snprintf(per + used, sizeof(per) - used, "%s%" PRId64,
                                     i ? "," : "", st_workers_events(a->workers, i));
        /* the workers', then the global detectors' */
        for (int i = 0; i <= st_workers_count(a->workers) && cused < sizeof(cpu) - 24; i++)
            cused += (size_t)snprintf(cpu + cused, sizeof(cpu) - cused, "%s%" PRId64,
                                      i ? "," : "", st_workers_cpu_us(a->workers, i) / 1000);
        st_workers_times(a->workers, &det_us, &wait_us);
        sent += st_workers_redis_sent(a->workers);
    }
    for (int i = 0; i < PH__N && pused < sizeof(phases) - 40; i++)
        pused += (size_t)snprintf(phases + pused, sizeof(phases) - pused, "%s%s:%" PRId64,
                                  i ? "," : "", phase_names[i], a->phase_us[i] / 1000);
    st_info("events=%ld invalid=%ld refused=%ld late=%ld skewed=%ld batches=%ld "
            "stored_ahead=%ld findings_updated=%ld redis_commands=%lu state_loads=%" PRId64
            " state_evictions=%" PRId64 " state_runs=%" PRId64
            " worker_events=%s detect_ms=%" PRId64 " detect_wait_ms=%" PRId64
            " detect_cpu_ms=%s phase_ms=%s",
            a->events, a->invalid, a->refused, a->late, a->skewed, a->batches,
            st_store_ahead(a->store), a->findings_written, sent, a->stats.loads, a->stats.evictions, a->stats.runs,
            per, det_us / 1000, wait_us / 1000, cpu, phases);
    size_t queued = a->dlq ? st_deadletter_queued(a->dlq) : 0;
    if (queued)
        st_warn("%zu dead-letter record(s) not committed: no offset passed their messages, "
                "which the next run dead-letters again",
                queued);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"drain", no_argument, NULL, 'd'},
        {"no-migrate", no_argument, NULL, 'M'},
        {"config", required_argument, NULL, 'c'},
        {"set", required_argument, NULL, 'X'},
        {"config-doc", no_argument, NULL, 'D'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct analyzer a;
    char errstr[1024];
    const char *config_file = NULL;
    char **sets = st_calloc((size_t)argc, sizeof(*sets));
    int nsets = 0, drain = 0, migrate = 1, c, status = 1;

    memset(&a, 0, sizeof(a));
    st_log_init("sandtrail-analyzer", ST_LOG_INFO);
    while ((c = getopt_long(argc, argv, "c:X:h", opts, NULL)) != -1) {
        switch (c) {
        case 'd': drain = 1; break;
        case 'M': migrate = 0; break;
        case 'c': config_file = optarg; break;
        case 'X': sets[nsets++] = optarg; break;
        case 'D': st_conf_print_doc(analyzer_props, stdout); free(sets); return 0;
        case 'h': usage(stdout); free(sets); return 0;
        default: usage(stderr); free(sets); return 64;
        }
    }
    if (optind != argc) {
        usage(stderr);
        free(sets);
        return 64;
    }
    a.conf.overrides.props = analyzer_props;
    if (st_conf_load(analyzer_props, &a.conf, config_file, sets, nsets, analyzer_extra,
                     &a.conf, errstr, sizeof(errstr)))
        goto conf_error;
    a.conf.drain = drain;
    if (a.conf.state_evict_s >= a.conf.state_ttl_s) {
        /* memory would hold state whose Redis keys expired, and write back
         * only what changed: Redis would keep a part of it */
        snprintf(errstr, sizeof(errstr),
                 "state.evict_s (%" PRId64 ") must be below state.ttl_s (%" PRId64 ")",
                 a.conf.state_evict_s, a.conf.state_ttl_s);
        goto conf_error;
    }
    if ((a.conf.role = st_role_parse(a.conf.role_name)) < 0) {
        snprintf(errstr, sizeof(errstr),
                 "analyzer.role \"%s\" is not all, store or detect", a.conf.role_name);
        goto conf_error;
    }
    if (st_detect_parse_enabled(a.conf.detect_enabled, &a.conf.detect_off, errstr,
                                sizeof(errstr)))
        goto conf_error;
    if (a.conf.role != ST_ROLE_ALL && strcmp(a.conf.group, ST_ROLE_DEFAULT_GROUP) == 0) {
        /* its commits would pass offsets the other role has not seen */
        snprintf(errstr, sizeof(errstr),
                 "analyzer.role=%s needs a consumer group of its own: set kafka.group "
                 "(e.g. \"sandtrail-%s\"), not the default \"%s\"",
                 a.conf.role_name, a.conf.role_name, ST_ROLE_DEFAULT_GROUP);
        goto conf_error;
    }
    origin.config_file = config_file;
    origin.sets = sets; /* freed at exit: a reload reads them again */
    origin.nsets = nsets;
    if (st_log_configure(a.conf.log_level, a.conf.log_format, errstr, sizeof(errstr)))
        goto conf_error;
    st_conf_hash(analyzer_props, &a.conf, "detect.", a.conf.config_hash);
    if (a.conf.overrides.n) {
        struct st_buf desc;
        char id[33];
        st_buf_init(&desc);
        st_overrides_describe(&a.conf.overrides, &desc);
        st_finding_id(id, "config", a.conf.config_hash, desc.data, "");
        memcpy(a.conf.config_hash, id, 16);
        a.conf.config_hash[16] = '\0';
        st_buf_fini(&desc);
    }

    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);

    {
        /* migrate, or with --no-migrate make sure the schema is the one
         * this release knows: never run against a newer or older one */
        PGconn *pg = st_pg_connect(a.conf.pg_dsn, errstr, sizeof(errstr));
        int applied;
        const char *dir = a.conf.sql_dir ? a.conf.sql_dir : SANDTRAIL_SQL_DIR;
        if (!pg || (migrate ? st_pg_migrate(pg, dir, &applied, errstr, sizeof(errstr))
                            : st_pg_schema_check(pg, dir, errstr, sizeof(errstr)))) {
            st_error("%s", errstr);
            PQfinish(pg);
            goto out;
        }
        PQfinish(pg);
    }
    metrics_init(&a);
    a.sources = st_sources_new(a.metrics);
    if (!(a.sink = st_sink_new(&a.conf, errstr, sizeof(errstr))) ||
        !(a.dlq = st_deadletter_new(&a.conf, errstr, sizeof(errstr))) ||
        (st_role_detects(a.conf.role) && /* store role: no Redis at all */
         (!(a.redis = st_rpipe_new(a.conf.redis_url, a.conf.redis_password_file, errstr,
                                   sizeof(errstr))) ||
          !(a.store_redis = st_rpipe_new(a.conf.redis_url, a.conf.redis_password_file,
                                         errstr, sizeof(errstr))))) ||
        !(a.consumer = st_consumer_new(&a.conf, errstr, sizeof(errstr)))) {
        st_error("%s", errstr);
        goto out;
    }
    if (a.redis) {
        st_rpipe_set_round_trip_ms(a.redis, a.conf.redis_round_trip_ms);
        st_rpipe_set_round_trip_ms(a.store_redis, a.conf.redis_round_trip_ms);
    }
    if (st_metrics_serve(a.metrics, a.conf.metrics_listen, errstr, sizeof(errstr))) {
        st_error("%s", errstr);
        goto out;
    }
    {
        struct st_store_conf sc = {
            .sink = a.sink,
            .dlq = a.dlq,
            .consumer = a.consumer,
            .metrics = a.metrics,
            .retry_max_backoff_ms = a.conf.retry_max_backoff_ms,
            .fail_pg_commits = a.conf.fail_pg_commits,
            .crash_after_commits = a.conf.crash_after_commits,
            .stop = &stop,
            .after_pg_commit = a.redis ? store_checkpoint : NULL,
            .hook_arg = &a,
        };
        if (!(a.store = st_store_new(&sc, errstr, sizeof(errstr)))) {
            st_error("%s", errstr);
            goto out;
        }
    }
    for (int i = 0; i < NSLOTS; i++) {
        /* a batch grows to batch.behind_events while behind (consume.h) */
        a.slots[i].b = st_store_batch_new(a.sink, batch_most(&a.conf));
        a.slots[i].ckpt = st_checkpoint_new();
    }
    a.flush_ckpt = st_checkpoint_new();
    a.reorder = st_reorder_new(a.conf.lateness_s * 1000000);
    a.reader = st_onepass_new(NULL);
    if (st_role_detects(a.conf.role)) {
        a.fence = st_fence_new(&a.conf, a.conf.stall_checkpoint_ms);
        a.registry = st_registry_new(&a.conf);
        struct st_workers_conf wc = {
            .conf = &a.conf,
            .registry = a.registry,
            .redis = a.redis,
            .metrics = a.metrics,
            .redis_s = a.m_redis_s,
            .redis_err = a.m_redis_err,
            .fence = a.fence,
        };
        if (!(a.workers = st_workers_new(&wc, errstr, sizeof(errstr)))) {
            st_error("%s", errstr);
            st_registry_destroy(a.registry);
            a.registry = NULL;
            st_reorder_destroy(a.reorder);
            a.reorder = NULL;
            goto out;
        }
        if (a.conf.detect_overlap) {
            pthread_mutex_init(&a.det_mu, NULL);
            pthread_cond_init(&a.det_cv, NULL);
            if (pthread_create(&a.det_thread, NULL, detect_main, &a))
                st_fatal("could not start the detection thread");
            a.det_started = 1;
        }
    }

    st_info("consuming \"%s\" as group \"%s\" (analyzer.role=%s, batch.max_events=%" PRId64
            ", batch.behind_events=%" PRId64 ", batch.behind_ms=%" PRId64 ")%s",
            a.conf.topic_events, a.conf.group, st_role_name(a.conf.role),
            a.conf.batch_max_events, (int64_t)batch_most(&a.conf), behind_ms(&a.conf),
            drain ? " until caught up" : "");
    status = run(&a, drain) ? 1 : 0;
    log_totals(&a);

    /* closing the consumer revokes its partitions, and the rebalance
     * callback drops them from the reorder buffer: close it first */
    a.exiting = 1;
    detect_thread_stop(&a); /* nothing is pending once run() returned */
    st_deadletter_detach(a.dlq); /* no init at exit; the claimer done with it */
    st_consumer_destroy(a.consumer);
    a.consumer = NULL;
    if (LEAVE_STATE_AT_EXIT)
        st_workers_quit(a.workers); /* accepts NULL */
    else
        st_workers_destroy(a.workers);
    a.workers = NULL;
    st_registry_destroy(a.registry);
    a.registry = NULL;
    st_reorder_destroy(a.reorder);
out:
    free(a.parsed);
    st_onepass_destroy(a.reader);
    st_deadletter_detach(a.dlq);
    st_consumer_destroy(a.consumer);
    st_fence_destroy(a.fence); /* after the consumer: its close may flush */
    st_store_destroy(a.store);
    for (int i = 0; i < NSLOTS; i++) {
        st_store_batch_destroy(a.slots[i].b);
        st_checkpoint_destroy(a.slots[i].ckpt);
        free(a.slots[i].rel);
    }
    st_checkpoint_destroy(a.flush_ckpt);
    marks_drop(&a, a.nmarks);
    free(a.marks);
    st_rpipe_destroy(a.redis);
    st_rpipe_destroy(a.store_redis);
    st_deadletter_destroy(a.dlq);
    st_sink_destroy(a.sink);
    st_overrides_fini(&a.conf.overrides);
    st_sources_destroy(a.sources);
    st_kafka_props_fini(&a.conf.kafka);
    st_metrics_destroy(a.metrics);
    st_conf_fini(analyzer_props, &a.conf);
    free(sets);
    return status;

conf_error:
    st_error("%s", errstr);
    free(sets);
    st_overrides_fini(&a.conf.overrides);
    st_kafka_props_fini(&a.conf.kafka);
    st_conf_fini(analyzer_props, &a.conf);
    return 78;
}
