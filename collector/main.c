/* main.c: sandtrail-collector.
 *
 *   input (file, stdin) -> validate (common/event.c) -> produce (produce.c)
 *                                  \-> dead-letter topic (dlq.c)
 *
 * Exit status: 0 every line was accepted and delivered; 1 some lines were
 * rejected (each reported on stderr and delivered to the dead-letter topic);
 * 2 some message could not be delivered to Kafka; 64 usage; 78 configuration. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "accept.h"
#include "buf.h"
#include "collector.h"
#include "conf.h"
#include "dlq.h"
#include "event.h"
#include "linereader.h"
#include "log.h"
#include "metrics.h"
#include "produce.h"
#include "redact.h"
#include "tail.h"

#define C(field) offsetof(struct st_collector_conf, field)

static const struct st_conf_prop collector_props[] = {
    {"kafka.brokers", "SANDTRAIL_KAFKA_BROKERS", ST_CONF_STR, C(brokers), 0, 0,
     "127.0.0.1:19092", "Kafka bootstrap servers"},
    {"kafka.topic.events", "SANDTRAIL_TOPIC_EVENTS", ST_CONF_STR, C(topic_events), 0,
     0, "sandtrail.events", "topic that accepted events are produced to"},
    {"kafka.topic.dlq", "SANDTRAIL_TOPIC_DLQ", ST_CONF_STR, C(topic_dlq), 0, 0,
     "sandtrail.events.dlq", "dead-letter topic for rejected lines"},
    {"kafka.topic.partitions", "SANDTRAIL_TOPIC_PARTITIONS", ST_CONF_INT,
     C(topic_partitions), 1, 10000, "4",
     "partitions of a topic the collector creates (existing topics are kept)"},
    {"kafka.topic.replication", NULL, ST_CONF_INT, C(topic_replication), 1, 16, "1",
     "replication factor of a topic the collector creates"},
    {"kafka.delivery.timeout.ms", NULL, ST_CONF_INT, C(delivery_timeout_ms), 1000,
     3600000, "120000",
     "how long a message may wait for delivery before the run fails"},
    {"kafka.linger.ms", NULL, ST_CONF_INT, C(linger_ms), 0, 10000, "5",
     "how long the producer waits to fill a batch"},
    {"input.max_line_bytes", NULL, ST_CONF_INT, C(max_line_bytes), 1024,
     64 * 1024 * 1024, "1048576", "longest accepted line; longer ones are rejected"},
    {"input.format", "SANDTRAIL_INPUT_FORMAT", ST_CONF_STR, C(format), 0, 0, "native",
     "decoder of the input: native (event v1), squid, smokescreen, srt or vault"},
    {"input.source_name", "SANDTRAIL_SOURCE_NAME", ST_CONF_STR, C(source_name), 0, 0,
     "", "source.name given to decoded events (formats other than native)"},
    {"input.platform", "SANDTRAIL_SOURCE_PLATFORM", ST_CONF_STR, C(platform), 0, 0, "",
     "source.platform given to decoded events"},
    {"redact.key_file", "SANDTRAIL_REDACT_KEY_FILE", ST_CONF_STR, C(key_file), 0, 0,
     NULL, "file holding the HMAC key of secret fingerprints (hex or raw, at least "
     "16 bytes); required"},
    {"redact.canaries_file", "SANDTRAIL_CANARIES_FILE", ST_CONF_STR, C(canaries_file), 0,
     0, NULL, "file of canary values, one a line, redacted wherever they appear"},
    {"redact.fingerprint_chars", NULL, ST_CONF_INT, C(fp_chars), 1, 64, "16",
     "hex characters of HMAC-SHA256 kept in a fingerprint"},
    {"input.checkpoint", NULL, ST_CONF_STR, C(checkpoint), 0, 0, NULL,
     "--follow: file keeping the delivered position (default: FILE.sandtrail.pos)"},
    {"input.checkpoint_lines", NULL, ST_CONF_INT, C(checkpoint_lines), 1, 10000000, "1000",
     "--follow: lines between waits for delivery and checkpoints"},
    {"input.poll_ms", NULL, ST_CONF_INT, C(poll_ms), 10, 60000, "200",
     "--follow: how often to look for new lines and rotation at the end of the file"},
    {"metrics.listen", "SANDTRAIL_COLLECTOR_METRICS", ST_CONF_STR, C(metrics_listen), 0,
     0, "", "host:port serving Prometheus metrics at /metrics (empty: off)"},
    {"dlq.raw_bytes", NULL, ST_CONF_INT, C(dlq_raw_bytes), 0, 1024 * 1024, "4096",
     "how much of a rejected line its dead-letter record quotes"},
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
            "usage: sandtrail-collector --input FILE|- [-c CONFIG] [-X name=value]...\n"
            "       sandtrail-collector --follow FILE [-c CONFIG] [-X name=value]...\n"
            "       sandtrail-collector --config-doc\n"
            "\n"
            "Reads one event a line (schema sandtrail.event.v1, or a source's own\n"
            "format with -X input.format=squid|smokescreen|srt|vault), removes every\n"
            "token-shaped value and canary, validates the event and produces it to\n"
            "Kafka; rejected lines are reported on stderr and sent, redacted, to the\n"
            "dead-letter topic with their reason.\n");
}

struct run_stats {
    long lines, accepted, rejected, skipped;
};

struct line_ctx {
    const struct st_collector_conf *conf;
    struct st_accept *acc;
    struct st_producer *prod;
    struct run_stats *rs;
    const char *input_name;
    struct st_buf dlq;
    struct st_metrics *metrics;
    struct st_metric *m_lines, *m_accepted, *m_skipped;
};

static void metrics_rejected(struct line_ctx *lc, const char *reason)
{
    char labels[96];
    snprintf(labels, sizeof(labels), "reason=\"%s\"", reason);
    st_metric_add(st_metric_get(lc->metrics, ST_METRIC_COUNTER,
                                "sandtrail_collector_rejected_total",
                                "lines rejected, by reason (each in the dead-letter topic)",
                                labels),
                  1);
}

/* The redactor counts per rule; the series follow it. */
static void metrics_redactions(struct line_ctx *lc)
{
    struct st_redactor *r = st_accept_redactor(lc->acc);
    char labels[96];
    for (size_t i = 0; i < st_redact_nrules(r); i++) {
        uint64_t hits = st_redact_rule_hits(r, i);
        if (!hits)
            continue;
        snprintf(labels, sizeof(labels), "rule=\"%s\"", st_redact_rule_name(r, i));
        st_metric_set(st_metric_get(lc->metrics, ST_METRIC_COUNTER,
                                    "sandtrail_collector_redactions_total",
                                    "values redacted, by rule", labels),
                      (int64_t)hits);
    }
}

/* One input line: accepted events to the events topic, rejected lines (with
 * a redacted reason and quote) to stderr and the dead-letter topic. Returns
 * 0, or -1 when the producer failed for good. */
static int handle_line(struct line_ctx *lc, const char *line, size_t len, int too_long)
{
    const struct st_collector_conf *conf = lc->conf;
    struct run_stats *rs = lc->rs;
    struct st_reject rej;
    const char *out, *key;
    size_t outlen;

    rs->lines++;
    st_metric_add(lc->m_lines, 1);
    if (too_long) {
        rej.code = ST_REASON_TOO_LONG;
        snprintf(rej.msg, sizeof(rej.msg), "line longer than %" PRId64 " bytes",
                 conf->max_line_bytes);
    } else if (len == 0 || strspn(line, " \t") == len) {
        return 0; /* blank lines separate nothing in NDJSON: skip */
    } else {
        int a = st_accept_line(lc->acc, line, len, &out, &outlen, &key, &rej);
        if (a == 1) {
            rs->skipped++;
            st_metric_add(lc->m_skipped, 1);
            return 0;
        }
        if (a == 0) {
            if (st_producer_event(lc->prod, key, out, outlen))
                return -1;
            rs->accepted++;
            st_metric_add(lc->m_accepted, 1);
            return 0;
        }
    }
    rs->rejected++;
    metrics_rejected(lc, rej.code);
    /* the reason is redacted by accept.c; the line is redacted here, before
     * it is cut to dlq.raw_bytes */
    fprintf(stderr, "%s:%ld: rejected: %s: %s\n", lc->input_name, rs->lines, rej.code,
            rej.msg);
    size_t rlen;
    char *raw = st_accept_redact_raw(lc->acc, line, len, &rlen);
    st_dlq_record(&lc->dlq, &rej, lc->input_name, rs->lines, raw, rlen,
                  (size_t)conf->dlq_raw_bytes);
    free(raw);
    return st_producer_dlq(lc->prod, rej.code, lc->dlq.data, lc->dlq.len);
}

static int collect(FILE *in, struct line_ctx *lc)
{
    struct st_linereader *lr = st_linereader_new(in, (size_t)lc->conf->max_line_bytes);
    const char *line;
    size_t len;
    int too_long, r, rc = 0;

    while (!stop && (r = st_linereader_next(lr, &line, &len, &too_long)) > 0)
        if ((rc = handle_line(lc, line, len, too_long)))
            break;
    if (r < 0) {
        st_error("could not read \"%s\": %s", lc->input_name, strerror(errno));
        rc = -1;
    }
    st_linereader_destroy(lr);
    return rc;
}

/* --follow: lines as they are appended, across rotation; after every
 * input.checkpoint_lines lines, and whenever the file is idle, wait for
 * delivery and save the position. Runs until SIGINT or SIGTERM. */
static int follow(const char *path, struct line_ctx *lc)
{
    const struct st_collector_conf *conf = lc->conf;
    char errstr[512], ckpt[4096];
    const char *line;
    size_t len;
    int too_long, rc = 0;
    int64_t pending = 0;

    if (conf->checkpoint && *conf->checkpoint)
        snprintf(ckpt, sizeof(ckpt), "%s", conf->checkpoint);
    else
        snprintf(ckpt, sizeof(ckpt), "%s.sandtrail.pos", path);
    struct st_tail *t = st_tail_open(path, ckpt, (size_t)conf->max_line_bytes, errstr,
                                     sizeof(errstr));
    if (!t) {
        st_error("%s", errstr);
        return -1;
    }
    st_info("following \"%s\" (checkpoint \"%s\")", path, ckpt);
    while (!stop) {
        int r = st_tail_next(t, &line, &len, &too_long);
        if (r < 0) {
            st_error("could not read \"%s\": %s", path, strerror(errno));
            rc = -1;
            break;
        }
        if (r == 1) {
            if ((rc = handle_line(lc, line, len, too_long)))
                break;
            pending++;
        }
        if (pending && (r == 0 || pending >= conf->checkpoint_lines)) {
            /* the position is saved only once everything before it is in
             * Kafka: a restart re-reads at most this batch */
            if (st_producer_flush(lc->prod, (int)conf->delivery_timeout_ms)) {
                st_error("could not deliver to Kafka: not advancing the checkpoint");
                rc = -1;
                break;
            }
            if (st_tail_checkpoint(t, errstr, sizeof(errstr))) {
                st_error("%s", errstr);
                rc = -1;
                break;
            }
            pending = 0;
            metrics_redactions(lc);
        }
        if (r == 0)
            usleep((useconds_t)conf->poll_ms * 1000);
    }
    if (rc == 0 && pending && st_producer_flush(lc->prod, (int)conf->delivery_timeout_ms) == 0)
        rc = st_tail_checkpoint(t, errstr, sizeof(errstr));
    st_tail_close(t);
    return rc;
}

static void log_redactions(struct st_accept *acc)
{
    struct st_redactor *r = st_accept_redactor(acc);
    char line[512];
    size_t n = 0;
    line[0] = '\0';
    for (size_t i = 0; i < st_redact_nrules(r) && n < sizeof(line); i++) {
        uint64_t hits = st_redact_rule_hits(r, i);
        if (hits)
            n += (size_t)snprintf(line + n, sizeof(line) - n, " %s=%llu",
                                  st_redact_rule_name(r, i), (unsigned long long)hits);
    }
    st_info("redactions:%s", n ? line : " none");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"input", required_argument, NULL, 'i'},
        {"follow", required_argument, NULL, 'f'},
        {"config", required_argument, NULL, 'c'},
        {"set", required_argument, NULL, 'X'},
        {"config-doc", no_argument, NULL, 'D'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct st_collector_conf conf;
    char errstr[512];
    const char *input = NULL, *followed = NULL, *config_file = NULL;
    char **sets = st_calloc((size_t)argc, sizeof(*sets));
    int nsets = 0, c, status;

    st_log_init("sandtrail-collector", ST_LOG_INFO);
    while ((c = getopt_long(argc, argv, "i:c:X:h", opts, NULL)) != -1) {
        switch (c) {
        case 'i': input = optarg; break;
        case 'f': followed = optarg; break;
        case 'c': config_file = optarg; break;
        case 'X': sets[nsets++] = optarg; break;
        case 'D': st_conf_print_doc(collector_props, stdout); free(sets); return 0;
        case 'h': usage(stdout); free(sets); return 0;
        default: usage(stderr); free(sets); return 64;
        }
    }
    if (!!input == !!followed || optind != argc) {
        usage(stderr);
        free(sets);
        return 64;
    }

    memset(&conf, 0, sizeof(conf));
    if (st_conf_defaults(collector_props, &conf, errstr, sizeof(errstr)) ||
        st_conf_load_env(collector_props, &conf, errstr, sizeof(errstr)) ||
        (config_file &&
         st_conf_load_file(collector_props, &conf, config_file, errstr, sizeof(errstr))))
        goto conf_error;
    for (int i = 0; i < nsets; i++)
        if (st_conf_set_arg(collector_props, &conf, sets[i], errstr, sizeof(errstr)))
            goto conf_error;
    free(sets);
    sets = NULL;

    FILE *in = followed ? NULL : strcmp(input, "-") == 0 ? stdin : fopen(input, "rb");
    if (!followed && !in) {
        st_error("could not open input \"%s\": %s", input, strerror(errno));
        st_conf_fini(collector_props, &conf);
        return 66;
    }
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);

    struct st_accept *acc = st_accept_new(&conf, errstr, sizeof(errstr));
    if (!acc) {
        st_error("%s", errstr);
        status = 78;
        goto out;
    }
    struct st_metrics *metrics = st_metrics_new();
    if (st_metrics_serve(metrics, conf.metrics_listen, errstr, sizeof(errstr))) {
        st_error("%s", errstr);
        st_accept_destroy(acc);
        st_metrics_destroy(metrics);
        status = 78;
        goto out;
    }
    struct st_producer *prod = st_producer_new(&conf, metrics, errstr, sizeof(errstr));
    if (!prod) {
        st_error("%s", errstr);
        st_accept_destroy(acc);
        st_metrics_destroy(metrics);
        status = 2;
        goto out;
    }

    struct run_stats rs = {0};
    struct line_ctx lc = {&conf, acc, prod, &rs,
                          followed ? followed : in == stdin ? "stdin" : input, {0}, metrics,
                          NULL, NULL, NULL};
    st_buf_init(&lc.dlq);
    lc.m_lines = st_metric_get(metrics, ST_METRIC_COUNTER, "sandtrail_collector_lines_total",
                               "input lines read", "");
    lc.m_accepted = st_metric_get(metrics, ST_METRIC_COUNTER,
                                  "sandtrail_collector_accepted_total",
                                  "events accepted and produced", "");
    lc.m_skipped = st_metric_get(metrics, ST_METRIC_COUNTER,
                                 "sandtrail_collector_skipped_total",
                                 "lines that carry no event in their format", "");
    int rc = followed ? follow(followed, &lc) : collect(in, &lc);
    st_buf_fini(&lc.dlq);
    int64_t undelivered = st_producer_flush(prod, (int)conf.delivery_timeout_ms + 5000);
    struct st_producer_stats ps;
    st_producer_stats(prod, &ps);
    st_info("lines=%ld accepted=%ld rejected=%ld skipped=%ld delivered=%" PRId64
            " failed=%" PRId64 " undelivered=%" PRId64,
            rs.lines, rs.accepted, rs.rejected, rs.skipped, ps.delivered, ps.failed,
            undelivered);
    log_redactions(acc);
    st_producer_destroy(prod);
    prod = NULL;
    st_accept_destroy(acc);
    st_metrics_destroy(metrics);
    if (rc || undelivered || ps.failed)
        status = 2;
    else if (rs.rejected)
        status = 1;
    else
        status = 0;
out:
    if (in && in != stdin)
        fclose(in);
    st_conf_fini(collector_props, &conf);
    return status;

conf_error:
    st_error("%s", errstr);
    free(sets);
    st_conf_fini(collector_props, &conf);
    return 78;
}
