/* main.c: sandtrail-analyzer.
 *
 *   consume (consume.c) -> parse (common/event.c) -> detect (detectors/,
 *   state in memory, missing state prefetched from Redis via rpipe.c) ->
 *   sink (sink.c: one transaction over the parts in sinks/) -> checkpoint
 *   of the detector state to Redis (checkpoint.c) -> commit offsets
 *
 * A batch's offsets are committed only after the PostgreSQL transaction that
 * holds its events and findings has committed, after the batch's detector
 * checkpoint is in Redis, and after Kafka acknowledged the dead-letter
 * records of the batch (deadletter.c). Redis is written only after the
 * PostgreSQL commit, so it never holds state PostgreSQL has not. When Redis
 * or PostgreSQL is unavailable, the batch (or its checkpoint) is retried
 * with backoff, never skipped; when PostgreSQL refuses the batch for its
 * data, the refused events are dead-lettered and the rest written. Every
 * write is idempotent, and the detectors' trims run only after the Kafka
 * commit, so a retry or a replay after a crash leaves the same rows
 * (docs/architecture.md).
 *
 * Exit status: 0 stopped cleanly (or --drain caught up); 1 runtime failure;
 * 64 usage; 78 configuration (also when Kafka refuses our login or
 * certificate). */
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "analyzer.h"
#include "buf.h"
#include "conf.h"
#include "consume.h"
#include "deadletter.h"
#include "detect.h"
#include "log.h"
#include "metrics.h"
#include "pg.h"
#include "registry.h"
#include "reorder.h"
#include "rpipe.h"
#include "sink.h"
#include "sources.h"
#include "timeutil.h"

#ifndef SANDTRAIL_SQL_DIR
#define SANDTRAIL_SQL_DIR "sql"
#endif

#define A(field) offsetof(struct st_analyzer_conf, field)

static const struct st_conf_prop analyzer_props[] = {
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
     "bytes of a dead-lettered message kept in its record (redacted first)"},
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
    {"batch.max_events", NULL, ST_CONF_INT, A(batch_max_events), 1, 100000, "1000",
     "most events processed in one transaction"},
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
    {"detect.lateness_s", NULL, ST_CONF_INT, A(lateness_s), 0, 86400, "30",
     "how late (event time) an event may arrive and still count in its window"},
    {"detect.max_future_s", NULL, ST_CONF_INT, A(max_future_s), 0, 30 * 86400, "300",
     "an event stamped further than this after the collector produced it is "
     "skewed: detected on its receive time, moves no watermark (0 = off)"},
    {"detect.max_past_s", NULL, ST_CONF_INT, A(max_past_s), 0, 3650LL * 86400, "0",
     "an event stamped further than this before the collector produced it is "
     "skewed (0 = off: backfilled files and a drained spool carry old times)"},
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
    {"fault.fail_pg_commits", NULL, ST_CONF_INT, A(fail_pg_commits), 0, 1000000, "0",
     "tests only: the first this many PostgreSQL transactions fail, after the "
     "batch's detection and before its Redis checkpoint, as an unavailable "
     "database would (0 = never)"},
    {NULL},
};

static volatile sig_atomic_t stop;

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

struct analyzer {
    struct st_analyzer_conf conf;
    struct st_consumer *consumer;
    struct st_rpipe *redis;
    struct st_registry *registry;  /* cross-run detector state */
    struct st_checkpoint *ckpt;    /* the batch's write-back, run after its commit */
    struct st_detect_stats stats;
    /* checkpoints built; the newest that ran and whose batch's offsets
     * Kafka took (what after_commit may trim and evict up to) */
    uint64_t ck_seq, committed_seq;
    int64_t loads_seen, evictions_seen;
    struct st_sink *sink;
    struct st_reorder *reorder;
    struct st_reorder_item *rel; /* events released by the reorder buffer */
    size_t relcap;
    void *det_state[16];
    struct st_findings findings;
    struct st_deadletter *dlq;
    rd_kafka_message_t **msgs; /* the batch's messages, kept until written */
    int nmsgs;
    long events, invalid, refused, late, skewed, batches, commits, findings_written;
    long pg_faults; /* transactions failed by fault.fail_pg_commits */
    struct st_metrics *metrics;
    struct st_sources *sources; /* per-source metrics */
    struct st_metric *m_events, *m_invalid, *m_late, *m_skewed, *m_batches, *m_buffered;
    struct st_metric *m_redis_s, *m_pg_s, *m_redis_err, *m_pg_err;
    struct st_metric *m_runs, *m_entries, *m_loads, *m_evictions, *m_ckpt_s;
};

static void metrics_init(struct analyzer *a)
{
    struct st_metrics *m = a->metrics = st_metrics_new();
    a->m_events = st_metric_get(m, ST_METRIC_COUNTER, "sandtrail_analyzer_events_total",
                                "events consumed and stored", "");
    a->m_invalid = st_metric_get(m, ST_METRIC_COUNTER,
                                 "sandtrail_analyzer_events_invalid_total",
                                 "messages that are not valid events (dead-lettered)", "");
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
    a->m_redis_s = st_metric_get(m, ST_METRIC_HISTOGRAM, "sandtrail_analyzer_redis_seconds",
                                 "time of one batch's prefetch round trip (state not in memory)", "");
    a->m_pg_s = st_metric_get(m, ST_METRIC_HISTOGRAM, "sandtrail_analyzer_pg_seconds",
                              "time of one batch's PostgreSQL transaction", "");
    a->m_redis_err = st_metric_get(m, ST_METRIC_COUNTER, "sandtrail_analyzer_redis_errors_total",
                                   "failed Redis round trips (the batch is retried)", "");
    a->m_pg_err = st_metric_get(m, ST_METRIC_COUNTER, "sandtrail_analyzer_pg_errors_total",
                                "failed PostgreSQL transactions (the batch is retried)", "");
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
    a->m_ckpt_s = st_metric_get(m, ST_METRIC_HISTOGRAM,
                                "sandtrail_analyzer_checkpoint_seconds",
                                "time of one batch's Redis checkpoint", "");
}

static void metrics_state(struct analyzer *a)
{
    st_metric_set(a->m_runs, a->stats.runs);
    st_metric_set(a->m_entries, a->stats.entries);
    st_metric_add(a->m_loads, a->stats.loads - a->loads_seen);
    st_metric_add(a->m_evictions, a->stats.evictions - a->evictions_seen);
    a->loads_seen = a->stats.loads;
    a->evictions_seen = a->stats.evictions;
}

static struct st_detect_ctx detect_ctx(struct analyzer *a)
{
    struct st_detect_ctx ctx = {
        .redis = a->redis,
        .ckpt = a->ckpt,
        .findings = &a->findings,
        .conf = &a->conf,
        .registry = a->registry,
        .stats = &a->stats,
    };
    return ctx;
}

static void metrics_findings(struct analyzer *a)
{
    char labels[128];
    for (size_t i = 0; i < a->findings.n; i++) {
        const struct st_finding *f = &a->findings.items[i];
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
    if (n == 0) {
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
    for (int i = 0; st_detectors[i]; i++)
        st_detectors[i]->reset_batch(a->det_state[i]);
    st_findings_reset(&a->findings);
}

/* Runs the detectors over the released events and writes them, with the
 * staged event rows, in one transaction. Returns 0, or -1 with errstr. */
/* Runs the detectors over the released events and writes them, with the
 * staged event rows, in one transaction; the detectors' write-back goes to
 * a->ckpt, run by the caller after the commit (a retry appends to it: a
 * checkpoint holds absolute values, so the older commands are harmless).
 * Redis is read only for state not in memory: one round trip, or none.
 * Returns 0, or -1 with errstr. */
static int batch_try(struct analyzer *a, size_t nrel, char *errstr, size_t errsz)
{
    struct st_detect_ctx ctx = detect_ctx(a);
    ctx.seq = a->ck_seq + 1;

    detectors_reset(a);
    for (int d = 0; st_detectors[d]; d++)
        st_detectors[d]->begin_batch(a->det_state[d], nrel);
    st_registry_begin(a->registry, &ctx);
    for (size_t i = 0; i < nrel; i++) {
        ctx.late = a->rel[i].late;
        ctx.skewed = a->rel[i].skewed;
        for (int d = 0; st_detectors[d]; d++)
            if (st_detectors[d]->prefetch)
                st_detectors[d]->prefetch(a->det_state[d], &ctx, &a->rel[i].ev);
    }
    st_registry_prefetch_end(a->registry, &ctx);
    int64_t t0 = st_time_mono_us();
    int rc = st_rpipe_exec(a->redis, errstr, errsz);
    int64_t t1 = st_time_mono_us();
    if (t1 - t0 > 1)
        st_metric_observe(a->m_redis_s, (double)(t1 - t0) / 1e6);
    if (rc) {
        st_metric_add(a->m_redis_err, 1);
        return -1;
    }
    for (size_t i = 0; i < nrel; i++) {
        ctx.late = a->rel[i].late;
        ctx.skewed = a->rel[i].skewed;
        for (int d = 0; st_detectors[d]; d++)
            st_detectors[d]->feed(a->det_state[d], &ctx, &a->rel[i].ev);
    }
    for (int d = 0; st_detectors[d]; d++)
        if (st_detectors[d]->end_batch)
            st_detectors[d]->end_batch(a->det_state[d], &ctx);
    st_registry_end_batch(a->registry, &ctx);
    t1 = st_time_mono_us();
    if (a->pg_faults < a->conf.fail_pg_commits) {
        snprintf(errstr, errsz, "fault injection: PostgreSQL transaction %ld failed",
                 ++a->pg_faults);
        rc = -1;
    } else {
        rc = st_sink_write(a->sink, &a->findings, errstr, errsz);
    }
    st_metric_observe(a->m_pg_s, (double)(st_time_mono_us() - t1) / 1e6);
    if (rc)
        st_metric_add(a->m_pg_err, 1);
    return rc;
}

/* Sends msg to the dead-letter topic and tells the sink it will not be
 * stored. */
static void dead_letter(struct analyzer *a, const rd_kafka_message_t *msg,
                        const char *reason, const char *error)
{
    char labels[96];
    /* the error may quote the message: only the record, redacted, holds it */
    st_warn("dead-lettering the message at %s [%" PRId32 "] offset %" PRId64 ": %s",
            rd_kafka_topic_name(msg->rkt), msg->partition, msg->offset, reason);
    st_deadletter_send(a->dlq, msg, reason, error);
    st_sink_skip(a->sink, msg, reason);
    snprintf(labels, sizeof(labels), "reason=\"%s\"", reason);
    st_metric_add(st_metric_get(a->metrics, ST_METRIC_COUNTER,
                                "sandtrail_analyzer_dead_lettered_total",
                                "consumed messages sent to the dead-letter topic, by reason",
                                labels),
                  1);
}

struct refused {
    struct analyzer *a;
    size_t *nrel;
    int found;
};

/* A message PostgreSQL refuses: dead-lettered, and its event leaves the
 * batch and the reorder buffer. */
static void on_refused(void *arg, int32_t partition, int64_t offset, const char *error)
{
    struct refused *r = arg;
    struct analyzer *a = r->a;
    for (int i = 0; i < a->nmsgs; i++) {
        const rd_kafka_message_t *m = a->msgs[i];
        if (m->partition != partition || m->offset != offset)
            continue;
        dead_letter(a, m, ST_DEADLETTER_STORE_REFUSED, error);
        a->refused++;
        r->found++;
        break;
    }
    st_reorder_forget(a->reorder, partition, offset);
    for (size_t i = 0; i < *r->nrel; i++) {
        if (a->rel[i].partition == partition && a->rel[i].offset == offset) {
            st_reorder_item_fini(&a->rel[i]);
            memmove(&a->rel[i], &a->rel[i + 1], (*r->nrel - i - 1) * sizeof(a->rel[i]));
            (*r->nrel)--;
            break;
        }
    }
}

/* Retries until written or asked to stop. Returns 0 when written. */
static int batch_write(struct analyzer *a, size_t *nrel)
{
    int64_t backoff = 100;
    char errstr[1024];
    int rc;

    while ((rc = batch_try(a, *nrel, errstr, sizeof(errstr)))) {
        if (rc == ST_SINK_DATA) {
            struct refused r = {a, nrel, 0};
            char err[1024];
            if (st_sink_isolate(a->sink, on_refused, &r, err, sizeof(err)) == 0 &&
                r.found > 0)
                continue; /* write the rest at once */
            st_error("PostgreSQL refused the batch but no single event of it: %s", errstr);
        }
        /* the reason names the stores, not the error text, which may quote
         * event data */
        st_metrics_set_ready(a->metrics, "a batch cannot be written to PostgreSQL or "
                                         "Redis: retrying");
        if (stop) {
            st_error("stopped while a batch was being retried: its offsets are not "
                     "committed (%s)", errstr);
            return -1;
        }
        st_error("batch not written, retrying in %" PRId64 " ms: %s", backoff, errstr);
        usleep((useconds_t)backoff * 1000);
        backoff = backoff * 2 > a->conf.retry_max_backoff_ms
                      ? a->conf.retry_max_backoff_ms
                      : backoff * 2;
    }
    a->ck_seq++; /* a->ckpt is that checkpoint */
    a->findings_written += (long)a->findings.n;
    a->batches++;
    st_metric_add(a->m_batches, 1);
    metrics_findings(a);
    return 0;
}

/* Runs the checkpoint a->ckpt (the write-back of checkpoint a->ck_seq)
 * until Redis took it, with backoff: it is idempotent, and the offsets of
 * its batch wait for it. Returns 0, or -1 when asked to stop first. */
static int checkpoint_run(struct analyzer *a)
{
    int64_t backoff = 100;
    char errstr[512];

    for (;;) {
        int64_t t0 = st_time_mono_us();
        int rc = st_checkpoint_exec(a->ckpt, a->redis, errstr, sizeof(errstr));
        st_metric_observe(a->m_ckpt_s, (double)(st_time_mono_us() - t0) / 1e6);
        if (rc == 0)
            break;
        st_metric_add(a->m_redis_err, 1);
        st_metrics_set_ready(a->metrics, "the detector state cannot be written to Redis: "
                                         "retrying");
        if (stop) {
            st_error("stopped while a checkpoint was being retried: its offsets are not "
                     "committed (%s)", errstr);
            return -1;
        }
        st_error("detector checkpoint not written, retrying in %" PRId64 " ms: %s",
                 backoff, errstr);
        usleep((useconds_t)backoff * 1000);
        backoff = backoff * 2 > a->conf.retry_max_backoff_ms
                      ? a->conf.retry_max_backoff_ms
                      : backoff * 2;
    }
    st_checkpoint_clear(a->ckpt);
    return 0;
}

/* Once nothing can redo the batch (its transaction, checkpoint and offsets
 * are committed): the detectors trim their state in memory, the deletions
 * going into the next checkpoint, and evict what is idle. */
static void detectors_after_commit(struct analyzer *a)
{
    struct st_detect_ctx ctx = detect_ctx(a);
    ctx.seq = a->committed_seq;

    for (int d = 0; st_detectors[d]; d++)
        if (st_detectors[d]->after_commit)
            st_detectors[d]->after_commit(a->det_state[d], &ctx);
    st_registry_after_commit(a->registry, &ctx);
    metrics_state(a);
}

/* Between batches: writes what the last trims deleted, so that Redis is
 * trimmed while the stream is idle or stopped, and evicts idle state. A
 * failure keeps the commands for the next checkpoint. */
static void detectors_idle(struct analyzer *a)
{
    struct st_detect_ctx ctx = detect_ctx(a);
    char errstr[512];

    ctx.seq = a->ck_seq + 1;
    for (int d = 0; st_detectors[d]; d++)
        if (st_detectors[d]->end_batch)
            st_detectors[d]->end_batch(a->det_state[d], &ctx);
    st_registry_end_batch(a->registry, &ctx);
    if (st_checkpoint_len(a->ckpt) > 0) {
        a->ck_seq++;
        if (st_checkpoint_exec(a->ckpt, a->redis, errstr, sizeof(errstr))) {
            st_metric_add(a->m_redis_err, 1);
            st_warn("detector state not trimmed in Redis (the next checkpoint will): %s",
                    errstr);
            return;
        }
        st_checkpoint_clear(a->ckpt);
        /* deletions only: nothing for Kafka to take */
        if (a->committed_seq == a->ck_seq - 1)
            a->committed_seq = a->ck_seq;
    }
    detectors_after_commit(a);
}

/* Partitions revoked: every detector state is forgotten, and read again
 * from Redis when next needed. Called between batches, when everything
 * stored is in Redis (all of it, not only the revoked partitions' runs:
 * simpler, and it only costs reloads). */
static void detectors_forget(struct analyzer *a)
{
    struct st_detect_ctx ctx = detect_ctx(a);
    if (!a->registry)
        return; /* not started yet, or shut down */
    for (int d = 0; st_detectors[d]; d++)
        if (st_detectors[d]->forget)
            st_detectors[d]->forget(a->det_state[d], &ctx);
    st_registry_forget(a->registry, &ctx);
    metrics_state(a);
}

/* Parses each message, stages its row for PostgreSQL and hands the event
 * to the reorder buffer; a message that is not a valid event goes to the
 * dead-letter topic. An event stamped too far from the time the collector
 * produced it (the message's timestamp) is stored as it came, but detected
 * on its receive time (reorder.h). */
static void ingest(struct analyzer *a, rd_kafka_message_t **msgs, int n, int64_t now)
{
    int64_t wall_s = (int64_t)time(NULL);
    for (int i = 0; i < n; i++) {
        struct st_event ev;
        struct st_reject rej;
        if (st_event_parse(&ev, msgs[i]->payload, msgs[i]->len, &rej)) {
            a->invalid++;
            st_metric_add(a->m_invalid, 1);
            dead_letter(a, msgs[i], rej.code, rej.msg);
            st_reorder_note(a->reorder, msgs[i]->partition, msgs[i]->offset);
            continue;
        }
        int64_t recv_ms = rd_kafka_message_timestamp(msgs[i], NULL);
        int64_t recv_us = recv_ms >= 0 ? recv_ms * 1000 : -1;
        int skewed = st_reorder_skewed(ev.ts_us, recv_us, a->conf.max_future_s * 1000000,
                                       a->conf.max_past_s * 1000000);
        st_sources_seen(a->sources, ev.source_name, wall_s);
        struct st_sink_event se = {&ev, msgs[i], skewed};
        st_sink_stage(a->sink, &se);
        if (skewed) {
            a->skewed++;
            st_metric_add(a->m_skewed, 1);
            ev.ts_us = recv_us;
        }
        st_reorder_push(a->reorder, msgs[i]->partition, msgs[i]->offset, &ev, now,
                        skewed);
        a->events++;
        st_metric_add(a->m_events, 1);
    }
}

/* Waits until Kafka acknowledged the dead-letter records of the batch:
 * offsets past them are committed only then. Returns 0, or -1 when asked
 * to stop first. */
static int dead_letters_flush(struct analyzer *a)
{
    char errstr[512];
    while (st_deadletter_flush(a->dlq, 5000, errstr, sizeof(errstr))) {
        st_error("%s: offsets are not committed until they are", errstr);
        if (stop)
            return -1;
    }
    return 0;
}

/* Commits (commit = 1) the offsets everything before which is stored, and
 * refreshes the lag and readiness from them (commit = 0, idle: only that).
 * Returns 0 when Kafka took the offsets of every partition the nrel
 * released events came from (a partition revoked during the batch is
 * committed by its next owner, who redoes its events). */
static int commit_offsets(struct analyzer *a, int commit, size_t nrel)
{
    int32_t parts[1024];
    int64_t offsets[1024];
    int n = st_consumer_partitions(a->consumer, parts, 1024);
    for (int i = 0; i < n; i++)
        offsets[i] = st_reorder_commit_offset(a->reorder, parts[i]);
    int rc = 0;
    if (commit)
        rc = st_consumer_commit(a->consumer, parts, offsets, n);
    for (size_t i = 0; commit && i < nrel && rc == 0; i++) {
        int held = 0;
        for (int j = 0; j < n && !held; j++)
            held = parts[j] == a->rel[i].partition;
        rc = held ? 0 : -1;
    }
    metrics_lag(a, parts, offsets, n);
    st_metric_set(a->m_buffered, (int64_t)st_reorder_buffered(a->reorder));
    return rc;
}

static void on_revoke(int32_t partition, void *arg)
{
    struct analyzer *a = arg;
    st_reorder_drop(a->reorder, partition);
    detectors_forget(a);
}

static int run(struct analyzer *a, int drain)
{
    int max = (int)a->conf.batch_max_events;
    rd_kafka_message_t **msgs = a->msgs = st_calloc((size_t)max, sizeof(*msgs));
    int64_t start = st_time_mono_ms();
    int64_t idle_ms = drain ? 0 : a->conf.lateness_s * 1000;
    int rc = 0;

    st_consumer_on_revoke(a->consumer, on_revoke, a);
    while (!stop) {
        if (hup)
            reload(&a->conf);
        int n = st_consumer_poll_batch(a->consumer, msgs, max, (int)a->conf.batch_max_ms);
        if (n < 0) {
            rc = -1;
            break;
        }
        int64_t now = st_time_mono_ms();
        a->nmsgs = n;
        ingest(a, msgs, n, now);
        int flush = drain && st_consumer_drained(a->consumer);
        size_t nrel = st_reorder_release(a->reorder, flush, now, idle_ms, &a->rel,
                                         &a->relcap);
        /* caught up: the evidence part signs what is pending (all of it at
         * the end of --drain, what is old enough otherwise) */
        int seal = 0;
        if (flush || (!drain && st_consumer_drained(a->consumer)))
            seal = st_sink_seal(a->sink, flush ? 0 : st_time_now_us() / 1000);
        if (n > 0 || nrel > 0 || seal) {
            for (size_t i = 0; i < nrel; i++) {
                a->late += a->rel[i].late;
                st_metric_add(a->m_late, a->rel[i].late);
            }
            int failed = batch_write(a, &nrel) || dead_letters_flush(a);
            if (failed) {
                for (size_t i = 0; i < nrel; i++)
                    st_reorder_item_fini(&a->rel[i]);
                rc = -1;
                break;
            }
            a->commits++;
            if (a->conf.crash_after_commits && a->commits >= a->conf.crash_after_commits) {
                st_warn("fault injection: exiting after PostgreSQL commit %ld, "
                        "before the Kafka commit",
                        a->commits);
                _exit(3);
            }
            /* the state the batch changed, to Redis before its offsets
             * move (a crash just before this replays the batch from the
             * state Redis holds: the previous batch's) */
            if (checkpoint_run(a)) {
                for (size_t i = 0; i < nrel; i++)
                    st_reorder_item_fini(&a->rel[i]);
                rc = -1;
                break;
            }
            /* offsets Kafka did not take (a rebalance) may be redone by
             * another analyzer: then nothing is trimmed */
            if (commit_offsets(a, 1, nrel) == 0) {
                a->committed_seq = a->ck_seq;
                detectors_after_commit(a);
            }
            detectors_reset(a);
            for (size_t i = 0; i < nrel; i++)
                st_reorder_item_fini(&a->rel[i]);
        } else {
            commit_offsets(a, 0, 0);
            detectors_idle(a);
        }
        for (int i = 0; i < n; i++)
            rd_kafka_message_destroy(msgs[i]);
        a->nmsgs = 0;
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
    if (rc == 0)
        detectors_idle(a);
    for (int i = 0; i < a->nmsgs; i++)
        rd_kafka_message_destroy(msgs[i]);
    a->nmsgs = 0;
    free(msgs);
    a->msgs = NULL;
    return rc;
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
    if (a.conf.state_evict_s >= a.conf.state_ttl_s) {
        /* memory would hold state whose Redis keys expired, and write back
         * only what changed: Redis would keep a part of it */
        snprintf(errstr, sizeof(errstr),
                 "state.evict_s (%" PRId64 ") must be below state.ttl_s (%" PRId64 ")",
                 a.conf.state_evict_s, a.conf.state_ttl_s);
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
        !(a.redis = st_rpipe_new(a.conf.redis_url, a.conf.redis_password_file, errstr, sizeof(errstr))) ||
        !(a.consumer = st_consumer_new(&a.conf, errstr, sizeof(errstr)))) {
        st_error("%s", errstr);
        goto out;
    }
    if (st_metrics_serve(a.metrics, a.conf.metrics_listen, errstr, sizeof(errstr))) {
        st_error("%s", errstr);
        goto out;
    }
    st_findings_init(&a.findings);
    a.reorder = st_reorder_new(a.conf.lateness_s * 1000000);
    for (int i = 0; st_detectors[i]; i++)
        a.det_state[i] = st_detectors[i]->create(&a.conf);
    a.registry = st_registry_new(&a.conf);
    a.ckpt = st_checkpoint_new();

    st_info("consuming \"%s\" as group \"%s\"%s", a.conf.topic_events, a.conf.group,
            drain ? " until caught up" : "");
    status = run(&a, drain) ? 1 : 0;
    st_info("events=%ld invalid=%ld refused=%ld late=%ld skewed=%ld batches=%ld "
            "findings_updated=%ld redis_commands=%lu state_loads=%" PRId64
            " state_evictions=%" PRId64 " state_runs=%" PRId64,
            a.events, a.invalid, a.refused, a.late, a.skewed, a.batches,
            a.findings_written, st_rpipe_sent(a.redis), a.stats.loads,
            a.stats.evictions, a.stats.runs);

    /* closing the consumer revokes its partitions, and the rebalance
     * callback drops them from the reorder buffer: close it first */
    st_consumer_destroy(a.consumer);
    a.consumer = NULL;
    for (int i = 0; st_detectors[i]; i++)
        st_detectors[i]->destroy(a.det_state[i]);
    st_registry_destroy(a.registry);
    a.registry = NULL;
    st_checkpoint_destroy(a.ckpt);
    a.ckpt = NULL;
    st_findings_fini(&a.findings);
    st_reorder_destroy(a.reorder);
    free(a.rel);
out:
    st_consumer_destroy(a.consumer);
    st_rpipe_destroy(a.redis);
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
