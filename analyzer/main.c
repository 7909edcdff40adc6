/* main.c: sandtrail-analyzer.
 *
 *   consume (consume.c) -> parse (common/event.c) -> detect (detectors/,
 *   state in Redis via rpipe.c) -> sink (sinks/postgres.c) -> commit offsets
 *
 * A batch's offsets are committed only after the PostgreSQL transaction that
 * holds its events and findings has committed. When Redis or PostgreSQL
 * fails, the batch is retried with backoff, never skipped; every write is
 * idempotent, so a retry or a replay after a crash leaves the same rows.
 *
 * Exit status: 0 stopped cleanly (or --drain caught up); 1 runtime failure;
 * 64 usage; 78 configuration. */
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analyzer.h"
#include "conf.h"
#include "consume.h"
#include "detect.h"
#include "log.h"
#include "pg.h"
#include "rpipe.h"
#include "sinks/postgres.h"
#include "timeutil.h"

#ifndef SANDTRAIL_SQL_DIR
#define SANDTRAIL_SQL_DIR "sql"
#endif

#define A(field) offsetof(struct st_analyzer_conf, field)

static const struct st_conf_prop analyzer_props[] = {
    {"kafka.brokers", "SANDTRAIL_KAFKA_BROKERS", ST_CONF_STR, A(brokers), 0, 0,
     "127.0.0.1:19092", "Kafka bootstrap servers"},
    {"kafka.topic.events", "SANDTRAIL_TOPIC_EVENTS", ST_CONF_STR, A(topic_events), 0,
     0, "sandtrail.events", "topic of validated events"},
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
     "PostgreSQL connection string (libpq)"},
    {"redis.url", "SANDTRAIL_REDIS_URL", ST_CONF_STR, A(redis_url), 0, 0,
     "redis://127.0.0.1:16380/0", "Redis holding detector windows"},
    {"redis.prefix", "SANDTRAIL_REDIS_PREFIX", ST_CONF_STR, A(redis_prefix), 0, 0,
     "st:", "prefix of every Redis key the analyzer writes"},
    {"sql.dir", "SANDTRAIL_SQL_DIR", ST_CONF_STR, A(sql_dir), 0, 0, NULL,
     "folder of numbered migrations applied at start (unset: the source tree's "
     "sql/, fixed at build time)"},
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
    {"detect.lateness_s", NULL, ST_CONF_INT, A(lateness_s), 0, 86400, "30",
     "how late (event time) an event may arrive and still count in its window"},
    {"detect.denial_burst.threshold", NULL, ST_CONF_INT, A(db_threshold), 2, 1000000,
     "10", "denied events in one window that make a burst"},
    {"detect.denial_burst.window_s", NULL, ST_CONF_INT, A(db_window_s), 1, 86400,
     "60", "length of the denial_burst window, event time"},
    {"detect.denial_burst.high_targets", NULL, ST_CONF_INT, A(db_high_targets), 1,
     1000000, "5", "distinct targets in a burst that make it high severity"},
    {"fault.crash_after_pg_commits", NULL, ST_CONF_INT, A(crash_after_commits), 0,
     1000000, "0",
     "tests only: exit abruptly after this many PostgreSQL commits, before the "
     "Kafka commit (0 = never)"},
    {NULL},
};

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
    stop = 1;
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
    struct st_pgsink *sink;
    void *det_state[16];
    struct st_findings findings;
    long events, invalid, batches, commits, findings_written;
};

static void detectors_reset(struct analyzer *a)
{
    for (int i = 0; st_detectors[i]; i++)
        st_detectors[i]->reset_batch(a->det_state[i]);
    st_findings_reset(&a->findings);
}

/* Runs the detectors and writes the batch. Returns 0, or -1 with errstr. */
static int batch_try(struct analyzer *a, const struct st_sink_event *evs, size_t n,
                     char *errstr, size_t errsz)
{
    struct st_detect_ctx ctx = {a->redis, &a->findings, &a->conf};

    detectors_reset(a);
    for (size_t i = 0; i < n; i++)
        for (int d = 0; st_detectors[d]; d++)
            st_detectors[d]->feed(a->det_state[d], &ctx, evs[i].ev);
    if (st_rpipe_exec(a->redis, errstr, errsz))
        return -1;
    for (int d = 0; st_detectors[d]; d++)
        st_detectors[d]->end_batch(a->det_state[d], &ctx);
    if (st_rpipe_exec(a->redis, errstr, errsz))
        return -1;
    return st_pgsink_write(a->sink, evs, n, &a->findings, errstr, errsz);
}

static int batch_process(struct analyzer *a, rd_kafka_message_t **msgs, int n)
{
    struct st_event *evs = st_calloc((size_t)n, sizeof(*evs));
    struct st_sink_event *sevs = st_calloc((size_t)n, sizeof(*sevs));
    size_t ok = 0;
    int64_t backoff = 100;
    char errstr[1024];

    for (int i = 0; i < n; i++) {
        struct st_reject rej;
        if (st_event_parse(&evs[ok], msgs[i]->payload, msgs[i]->len, &rej)) {
            /* the collector validated it: a schema the analyzer does not
             * know. It stays in Kafka at this offset for inspection. */
            a->invalid++;
            st_warn("skipping invalid event at %s [%" PRId32 "] offset %" PRId64
                    ": %s: %s",
                    rd_kafka_topic_name(msgs[i]->rkt), msgs[i]->partition,
                    msgs[i]->offset, rej.code, rej.msg);
            continue;
        }
        sevs[ok].ev = &evs[ok];
        sevs[ok].msg = msgs[i];
        ok++;
    }

    while (batch_try(a, sevs, ok, errstr, sizeof(errstr))) {
        st_error("batch of %zu events not written, retrying in %" PRId64 " ms: %s", ok,
                 backoff, errstr);
        if (stop)
            break;
        usleep((useconds_t)backoff * 1000);
        backoff = backoff * 2 > a->conf.retry_max_backoff_ms
                      ? a->conf.retry_max_backoff_ms
                      : backoff * 2;
    }
    int rc = stop && ok ? -1 : 0;
    if (rc == 0) {
        a->events += (long)ok;
        a->findings_written += (long)a->findings.n;
        a->batches++;
    }
    detectors_reset(a);
    for (size_t i = 0; i < ok; i++)
        st_event_fini(&evs[i]);
    free(evs);
    free(sevs);
    return rc;
}

static int run(struct analyzer *a, int drain)
{
    int max = (int)a->conf.batch_max_events;
    rd_kafka_message_t **msgs = st_calloc((size_t)max, sizeof(*msgs));
    int64_t start = st_time_mono_ms();
    int rc = 0;

    while (!stop) {
        int n = st_consumer_poll_batch(a->consumer, msgs, max, (int)a->conf.batch_max_ms);
        if (n < 0) {
            rc = -1;
            break;
        }
        if (n > 0) {
            int failed = batch_process(a, msgs, n);
            if (!failed) {
                a->commits++;
                if (a->conf.crash_after_commits &&
                    a->commits >= a->conf.crash_after_commits) {
                    st_warn("fault injection: exiting after PostgreSQL commit %ld, "
                            "before the Kafka commit",
                            a->commits);
                    _exit(3);
                }
                st_consumer_commit(a->consumer, msgs, n);
            }
            for (int i = 0; i < n; i++)
                rd_kafka_message_destroy(msgs[i]);
            if (failed)
                break;
        }
        if (drain) {
            if (st_consumer_drained(a->consumer))
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
    free(msgs);
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
    if (st_conf_defaults(analyzer_props, &a.conf, errstr, sizeof(errstr)) ||
        st_conf_load_env(analyzer_props, &a.conf, errstr, sizeof(errstr)) ||
        (config_file &&
         st_conf_load_file(analyzer_props, &a.conf, config_file, errstr, sizeof(errstr))))
        goto conf_error;
    for (int i = 0; i < nsets; i++)
        if (st_conf_set_arg(analyzer_props, &a.conf, sets[i], errstr, sizeof(errstr)))
            goto conf_error;
    free(sets);
    sets = NULL;
    st_conf_hash(analyzer_props, &a.conf, "detect.", a.conf.config_hash);

    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);

    if (migrate) {
        PGconn *pg = st_pg_connect(a.conf.pg_dsn, errstr, sizeof(errstr));
        int applied;
        const char *dir = a.conf.sql_dir ? a.conf.sql_dir : SANDTRAIL_SQL_DIR;
        if (!pg || st_pg_migrate(pg, dir, &applied, errstr, sizeof(errstr))) {
            st_error("%s", errstr);
            PQfinish(pg);
            goto out;
        }
        PQfinish(pg);
    }
    if (!(a.sink = st_pgsink_new(a.conf.pg_dsn, a.conf.config_hash, errstr,
                                 sizeof(errstr))) ||
        !(a.redis = st_rpipe_new(a.conf.redis_url, errstr, sizeof(errstr))) ||
        !(a.consumer = st_consumer_new(&a.conf, errstr, sizeof(errstr)))) {
        st_error("%s", errstr);
        goto out;
    }
    st_findings_init(&a.findings);
    for (int i = 0; st_detectors[i]; i++)
        a.det_state[i] = st_detectors[i]->create(&a.conf);

    st_info("consuming \"%s\" as group \"%s\"%s", a.conf.topic_events, a.conf.group,
            drain ? " until caught up" : "");
    status = run(&a, drain) ? 1 : 0;
    st_info("events=%ld invalid=%ld batches=%ld findings_updated=%ld", a.events,
            a.invalid, a.batches, a.findings_written);

    for (int i = 0; st_detectors[i]; i++)
        st_detectors[i]->destroy(a.det_state[i]);
    st_findings_fini(&a.findings);
out:
    st_consumer_destroy(a.consumer);
    st_rpipe_destroy(a.redis);
    st_pgsink_destroy(a.sink);
    st_conf_fini(analyzer_props, &a.conf);
    return status;

conf_error:
    st_error("%s", errstr);
    free(sets);
    st_conf_fini(analyzer_props, &a.conf);
    return 78;
}
