/* main.c: sandtrail-collector.
 *
 *   input (input_file.c, tail.c, input_http.c)
 *     -> ingest.c: batches accepted by input.workers threads (accept.c:
 *        decode, redact, validate), outcomes in input order
 *     -> produce.c (spool.c in front of Kafka) / dead-letter topic (dlq.c)
 *
 * Exit status: 0 every line was accepted and delivered; 1 some lines were
 * rejected (each reported on stderr and delivered to the dead-letter topic);
 * 2 some message could not be delivered to Kafka; 64 usage; 78 configuration
 * (also when Kafka refuses our login or certificate: st_kafka_refused_exit).
 * A message Kafka refuses for good (too large, invalid) is dead-lettered and
 * counts as rejected (1), never as a failure. */
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
#include "ingest.h"
#include "input.h"
#include "buf.h"
#include "collector.h"
#include "conf.h"
#include "credset.h"
#include "dlq.h"
#include "event.h"
#include "linereader.h"
#include "log.h"
#include "metrics.h"
#include "produce.h"
#include "redact.h"
#include "spool.h"
#include "tail.h"

#define C(field) offsetof(struct st_collector_conf, field)

static const struct st_conf_prop collector_props[] = {
    {"kafka.brokers", "SANDTRAIL_KAFKA_BROKERS", ST_CONF_STR, C(brokers), 0, 0,
     "127.0.0.1:19092", "Kafka bootstrap servers"},
    {"kafka.sasl.password_file", "SANDTRAIL_KAFKA_PASSWORD_FILE", ST_CONF_STR,
     C(kafka.password_file), 0, 0, NULL,
     "file holding the SASL password (librdkafka's sasl.password), read at start. "
     "Any librdkafka property is passed through as kafka.rdkafka.<name>, e.g. "
     "kafka.rdkafka.security.protocol=SASL_SSL; an unknown name stops start-up; "
     "the program's own settings (acks, idempotence, group, offsets) still win"},
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
    {"kafka.queue.max_messages", NULL, ST_CONF_INT, C(queue_max_messages), 1000, 10000000,
     "500000",
     "messages the producer holds in memory before the input waits (a queue that "
     "fills stalls every worker; Kafka takes acknowledgements in bursts)"},
    {"kafka.queue.max_kbytes", NULL, ST_CONF_INT, C(queue_max_kbytes), 1024, 2097151,
     "262144", "KiB the producer holds in memory before the input waits"},
    {"kafka.message_max_bytes", NULL, ST_CONF_INT, C(message_max_bytes), 65536,
     100 * 1024 * 1024, "1000000",
     "largest event (with its key) produced to Kafka: a larger one is rejected "
     "(too_large, in the dead-letter topic); must not exceed what the broker and "
     "topic take (Kafka's message.max.bytes, 1048588 by default). librdkafka's "
     "message.max.bytes is derived from it"},
    {"input.max_line_bytes", NULL, ST_CONF_INT, C(max_line_bytes), 1024,
     64 * 1024 * 1024, "1048576",
     "longest line read; longer ones are rejected (line_too_long). An accepted "
     "event is also held to kafka.message_max_bytes"},
    {"input.format", "SANDTRAIL_INPUT_FORMAT", ST_CONF_STR, C(format), 0, 0, "native",
     "decoder of the input: native (event v1), squid, smokescreen, srt or vault"},
    {"input.single_pass", NULL, ST_CONF_INT, C(single_pass), 0, 1, "1",
     "native lines are parsed, validated and redacted in one pass, without a cJSON "
     "tree (1), or through the tree (0: the reference path; same events, reasons "
     "and redactions, slower)"},
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
    {"input.rotated_pattern", NULL, ST_CONF_STR, C(rotated_pattern), 0, 0, "FILE.[0-9]*",
     "--follow: glob of the rotated files, FILE standing for the followed file's name, "
     "relative to its folder (\"\": none); compressed ones (.gz, ...) are skipped"},
    {"input.rotate_grace_ms", NULL, ST_CONF_INT, C(rotate_grace_ms), 0, 3600000, "2000",
     "--follow: how long a renamed file must stay still, once a newer one has data, "
     "before it is left"},
    {"log.level", "SANDTRAIL_LOG_LEVEL", ST_CONF_STR, C(log_level), 0, 0, "info",
     "least important log records written: debug, info, warn or error"},
    {"log.format", "SANDTRAIL_LOG_FORMAT", ST_CONF_STR, C(log_format), 0, 0, "text",
     "text (one line a record) or json (one object a line, for log shippers); "
     "never event content"},
    {"metrics.listen", "SANDTRAIL_COLLECTOR_METRICS", ST_CONF_STR, C(metrics_listen), 0,
     0, "", "host:port serving Prometheus metrics at /metrics (empty: off)"},
    {"http.listen", "SANDTRAIL_HTTP_LISTEN", ST_CONF_STR, C(http_listen), 0, 0, "",
     "--listen: host:port of POST /v1/events"},
    {"http.tokens_file", "SANDTRAIL_HTTP_TOKENS_FILE", ST_CONF_STR, C(http_tokens_file), 0,
     0, NULL, "--listen: lines \"<token> <source kind> <source name> [<task id pattern>]\", "
     "one per source; with a pattern (fnmatch, e.g. T-42*) the token may send "
     "only events whose task_id matches it"},
    {"http.tls_cert_file", "SANDTRAIL_HTTP_TLS_CERT_FILE", ST_CONF_STR, C(http_tls_cert),
     0, 0, NULL,
     "--listen: PEM certificate chain; with http.tls_key_file the listener serves "
     "HTTPS only (plain HTTP gets no answer)"},
    {"http.tls_key_file", "SANDTRAIL_HTTP_TLS_KEY_FILE", ST_CONF_STR, C(http_tls_key), 0,
     0, NULL, "--listen: PEM private key (unencrypted) of http.tls_cert_file"},
    {"http.max_body_bytes", NULL, ST_CONF_INT, C(http_max_body), 1024,
     INT64_C(1073741824), "8388608", "--listen: largest request body, inflated (413 above)"},
    {"http.concurrency", NULL, ST_CONF_INT, C(http_concurrency), 1, 64, "4",
     "--listen: requests decoded and produced at once, each with its own "
     "input.workers (a heavy request holds one; others wait only when all are busy)"},
    {"http.max_connections", NULL, ST_CONF_INT, C(http_max_conns), 1, 100000, "512",
     "--listen: open connections at most (one thread each); more are refused"},
    {"http.max_connections_per_ip", NULL, ST_CONF_INT, C(http_max_conns_ip), 1, 100000,
     "64", "--listen: open connections at most from one client address"},
    {"http.header_timeout_ms", NULL, ST_CONF_INT, C(http_header_ms), 100, 3600000,
     "10000",
     "--listen: a connection must send a request's headers within this, from its "
     "start or the end of its last request, or it is closed"},
    {"http.request_timeout_ms", NULL, ST_CONF_INT, C(http_request_ms), 100, 3600000,
     "60000", "--listen: a request's body must arrive within this after its headers"},
    {"http.idle_timeout_s", NULL, ST_CONF_INT, C(http_idle_s), 1, 3600, "15",
     "--listen: a connection that sends nothing for this long is closed"},
    {"http.max_errors", NULL, ST_CONF_INT, C(http_max_errors), 0, 100000, "100",
     "--listen: rejected lines listed in an answer; the rest are counted by reason"},
    {"http.max_dlq_records", NULL, ST_CONF_INT, C(http_max_dlq), 1, 100000000, "1000",
     "--listen: dead-letter records (and stderr lines) per request; the rest of its "
     "rejected lines are counted by reason in the answer and the metrics only"},
    {"spool.dir", "SANDTRAIL_SPOOL_DIR", ST_CONF_STR, C(spool_dir), 0, 0, NULL,
     "folder of the on-disk spool in front of Kafka (unset: no spool, inputs wait "
     "for Kafka)"},
    {"spool.max_bytes", NULL, ST_CONF_INT, C(spool_max_bytes), 1024 * 1024,
     INT64_C(1099511627776), "1073741824",
     "spool size at which inputs push back (HTTP 503, the tail and --input wait); "
     "a full disk pushes back the same way"},
    {"spool.min_free_bytes", NULL, ST_CONF_INT, C(spool_min_free_bytes), 0,
     INT64_C(1099511627776), "16777216",
     "free space under which the spool's disk counts as full: inputs push back "
     "before a write fails (0: only when a write fails with ENOSPC or EDQUOT)"},
    {"spool.registry", NULL, ST_CONF_STR, C(spool_registry), 0, 0, NULL,
     "file recording the spool folder each input used last, so that a spool left "
     "behind when spool.dir is removed or changed is reported at start (default "
     "$XDG_STATE_HOME/sandtrail/collector-spools or "
     "~/.local/state/sandtrail/collector-spools; empty: off)"},
    {"input.workers", NULL, ST_CONF_INT, C(workers), 0, 16, "0",
     "threads that decode, redact and validate lines (0: one per CPU); events are "
     "produced in input order whatever the number"},
    {"fault.redact_rule_off", NULL, ST_CONF_STR, C(fault_rule_off), 0, 0, NULL,
     "fault injection for tests: this redaction rule never matches, so that a "
     "test can prove it would see the leak. Never set it in production"},
    {"kafka.topic.credentials", "SANDTRAIL_TOPIC_CREDENTIALS", ST_CONF_STR,
     C(topic_credentials), 0, 0, ST_CREDSET_TOPIC,
     "compacted topic of the fingerprints of credentials brokers issued, shared by "
     "every collector so that each redacts them in any text (empty: lineage off)"},
    {"lineage.poll_ms", NULL, ST_CONF_INT, C(lineage_poll_ms), 10, 10000, "100",
     "longest wait of the credentials topic's reader for a new record: bounds the "
     "time a credential issued behind another collector may pass unredacted"},
    {"lineage.catchup_ms", NULL, ST_CONF_INT, C(lineage_catchup_ms), 0, 600000, "5000",
     "how long start-up waits to read the credentials topic to its end before "
     "accepting lines (then it goes on in the background, with a warning)"},
    {"dlq.raw_bytes", NULL, ST_CONF_INT, C(dlq_raw_bytes), 0, 1024 * 1024, "4096",
     "how much of a rejected line its dead-letter record quotes"},
    {NULL},
};

static volatile sig_atomic_t stop, hup;

static void on_signal(int sig)
{
    if (sig == SIGHUP)
        hup = 1; /* the input's loop reloads (ingest.h: st_reload) */
    else
        stop = 1;
}

/* What start-up loaded the configuration from, kept for a reload: written
 * once by main before any signal is handled, then read by the main thread
 * only. */
static struct {
    const char *config_file, *listen_at;
    char **sets;
    int nsets;
} origin;

/* The properties a reload applies live (the inputs, ingest.c, log.c). */
static const char *const live_props[] = {"http.tokens_file", "redact.canaries_file",
                                         "log.level", NULL};

/* st_reload.load: the configuration read again the way start-up read it;
 * every other property that differs is logged as needing a restart.
 * @locality the input's main loop */
static struct st_collector_conf *reload_load(const struct st_collector_conf *running)
{
    char errstr[512];
    struct st_collector_conf *fresh = st_calloc(1, sizeof(*fresh));
    if (st_conf_load(collector_props, fresh, origin.config_file, origin.sets, origin.nsets,
                     st_kafka_props_parse, &fresh->kafka, errstr, sizeof(errstr)) ||
        (origin.listen_at && st_conf_set(collector_props, fresh, "http.listen",
                                         origin.listen_at, errstr, sizeof(errstr)))) {
        st_error("reload: %s", errstr);
        st_kafka_props_fini(&fresh->kafka);
        st_conf_fini(collector_props, fresh);
        free(fresh);
        return NULL;
    }
    st_conf_report_fixed(collector_props, running, fresh, live_props);
    int kafka_same = running->kafka.n == fresh->kafka.n;
    for (size_t i = 0; kafka_same && i < fresh->kafka.n; i++)
        kafka_same = !strcmp(running->kafka.names[i], fresh->kafka.names[i]) &&
                     !strcmp(running->kafka.values[i], fresh->kafka.values[i]);
    if (!kafka_same)
        st_warn("reload: cannot change while running: " ST_KAFKA_PREFIX "* (restart to "
                "apply)");
    return fresh;
}

static void reload_release(struct st_collector_conf *fresh)
{
    st_kafka_props_fini(&fresh->kafka);
    st_conf_fini(collector_props, fresh);
    free(fresh);
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: sandtrail-collector --input FILE|- [-c CONFIG] [-X name=value]...\n"
            "       sandtrail-collector --follow FILE [-c CONFIG] [-X name=value]...\n"
            "       sandtrail-collector --listen HOST:PORT [-c CONFIG] [-X name=value]...\n"
            "       sandtrail-collector --config-doc\n"
            "\n"
            "Reads one event a line (schema sandtrail.event.v1, or a source's own\n"
            "format with -X input.format=squid|smokescreen|srt|vault), removes every\n"
            "token-shaped value and canary, validates the event and produces it to\n"
            "Kafka; rejected lines are reported on stderr and sent, redacted, to the\n"
            "dead-letter topic with their reason.\n");
}

static void log_redactions(const struct st_ingest *ing)
{
    char line[512];
    size_t n = 0;
    line[0] = '\0';
    for (size_t i = 0; i < st_ingest_nrules(ing) && n < sizeof(line); i++) {
        uint64_t hits = st_ingest_rule_hits(ing, i);
        if (hits)
            n += (size_t)snprintf(line + n, sizeof(line) - n, " %s=%llu",
                                  st_ingest_rule_name(ing, i), (unsigned long long)hits);
    }
    st_info("redactions:%s", n ? line : " none");
}

/* A spool folder this input used before and spool.dir no longer names is
 * reported (spool.c's registry); the input is named by its mode and
 * absolute path (or listening address). */
static void report_stranded(const struct st_collector_conf *conf, const char *mode,
                            const char *arg, struct st_metrics *metrics)
{
    char ident[4200], real[4096];
    if (strcmp(arg, "-") && strcmp(mode, "--listen") && realpath(arg, real))
        arg = real;
    snprintf(ident, sizeof(ident), "%s %s", mode, arg);
    int64_t bytes = st_spool_registry(conf->spool_registry, ident,
                                      conf->spool_dir && *conf->spool_dir ? conf->spool_dir
                                                                          : NULL);
    st_metric_set(st_metric_get(metrics, ST_METRIC_GAUGE,
                                "sandtrail_collector_spool_stranded_bytes",
                                "bytes in a spool folder of an earlier run that spool.dir "
                                "no longer names",
                                ""),
                  bytes);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"input", required_argument, NULL, 'i'},
        {"follow", required_argument, NULL, 'f'},
        {"listen", required_argument, NULL, 'l'},
        {"config", required_argument, NULL, 'c'},
        {"set", required_argument, NULL, 'X'},
        {"config-doc", no_argument, NULL, 'D'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    struct st_collector_conf conf;
    char errstr[512];
    const char *input = NULL, *followed = NULL, *listen_at = NULL, *config_file = NULL;
    char **sets = st_calloc((size_t)argc, sizeof(*sets));
    int nsets = 0, c, status;

    st_log_init("sandtrail-collector", ST_LOG_INFO);
    while ((c = getopt_long(argc, argv, "i:c:X:h", opts, NULL)) != -1) {
        switch (c) {
        case 'i': input = optarg; break;
        case 'f': followed = optarg; break;
        case 'l': listen_at = optarg; break;
        case 'c': config_file = optarg; break;
        case 'X': sets[nsets++] = optarg; break;
        case 'D': st_conf_print_doc(collector_props, stdout); free(sets); return 0;
        case 'h': usage(stdout); free(sets); return 0;
        default: usage(stderr); free(sets); return 64;
        }
    }
    if (!!input + !!followed + !!listen_at != 1 || optind != argc) {
        usage(stderr);
        free(sets);
        return 64;
    }

    memset(&conf, 0, sizeof(conf));
    if (st_conf_load(collector_props, &conf, config_file, sets, nsets, st_kafka_props_parse,
                     &conf.kafka, errstr, sizeof(errstr)))
        goto conf_error;
    origin.config_file = config_file;
    origin.listen_at = listen_at;
    origin.sets = sets; /* freed at exit: a reload reads them again */
    origin.nsets = nsets;
    if (st_log_configure(conf.log_level, conf.log_format, errstr, sizeof(errstr)))
        goto conf_error;
    if (listen_at && st_conf_set(collector_props, &conf, "http.listen", listen_at, errstr,
                                 sizeof(errstr)))
        goto conf_error;

    /* a dead-letter record quotes at most dlq.raw_bytes, each byte escaped
     * to at most 6: it must always fit in a Kafka message */
    if (conf.dlq_raw_bytes * 6 + 4096 > conf.message_max_bytes) {
        snprintf(errstr, sizeof(errstr),
                 "dlq.raw_bytes (%" PRId64 ") is too large for kafka.message_max_bytes "
                 "(%" PRId64 "): a dead-letter record could not be produced",
                 conf.dlq_raw_bytes, conf.message_max_bytes);
        goto conf_error;
    }

    FILE *in = !input ? NULL : strcmp(input, "-") == 0 ? stdin : fopen(input, "rb");
    if (input && !in) {
        st_error("could not open input \"%s\": %s", input, strerror(errno));
        free(sets);
        st_kafka_props_fini(&conf.kafka);
        st_conf_fini(collector_props, &conf);
        return 66;
    }
    if (conf.fault_rule_off && *conf.fault_rule_off)
        st_warn("fault injection: redaction rule \"%s\" is off; values of its shape "
                "pass unredacted",
                conf.fault_rule_off);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);

    struct st_metrics *metrics = st_metrics_new();
    struct st_ingest ing;
    /* the key and canaries are checked before anything is served */
    if (st_ingest_init(&ing, &conf, NULL, metrics,
                       followed    ? followed
                       : listen_at ? "http"
                       : in == stdin ? "stdin"
                                     : input,
                       errstr, sizeof(errstr))) {
        st_error("%s", errstr);
        st_metrics_destroy(metrics);
        status = 78;
        goto out;
    }
    if (st_metrics_serve(metrics, conf.metrics_listen, errstr, sizeof(errstr))) {
        st_error("%s", errstr);
        st_ingest_fini(&ing);
        st_metrics_destroy(metrics);
        status = 78;
        goto out;
    }
    report_stranded(&conf, listen_at  ? "--listen"
                           : input    ? "--input"
                                      : "--follow",
                    listen_at ? listen_at : input ? input : followed, metrics);
    struct st_producer *prod = st_producer_new(&conf, metrics, errstr, sizeof(errstr));
    if (!prod) {
        st_error("%s", errstr);
        st_ingest_fini(&ing);
        st_metrics_destroy(metrics);
        status = 2;
        goto out;
    }
    ing.prod = prod;
    static const struct st_reload reload = {&hup, reload_load, reload_release};
    ing.reload = &reload;
    st_producer_set_input(prod, ing.input_name);
    st_producer_set_stop(prod, &stop);
    st_producer_set_disk_wait(prod, !listen_at); /* HTTP: 503, come back later */
    /* producing: /readyz answers 200 (an input pushing back says so) */
    st_metrics_set_ready(metrics, NULL);
    int rc = listen_at  ? st_input_http(&ing, &stop)
             : followed ? st_input_follow(followed, &ing, &stop)
                        : st_input_file(in, &ing, &stop);
    struct st_ingest_stats rs = ing.stats;
    /* a long-running input with a spool leaves what Kafka has not taken on
     * disk for the next start; otherwise wait for every delivery report */
    int spooled = conf.spool_dir && *conf.spool_dir && !input;
    int64_t undelivered =
        st_producer_flush(prod, spooled ? 2000 : (int)conf.delivery_timeout_ms + 5000);
    struct st_producer_stats ps;
    st_producer_stats(prod, &ps);
    /* replayed records are not failures: "retried" counts the deliveries
     * that failed and were kept in the spool, "failed" what is lost */
    st_info("lines=%ld accepted=%ld rejected=%ld skipped=%ld delivered=%" PRId64
            " refused=%" PRId64 " retried=%" PRId64 " maybe_twice=%" PRId64
            " replayed=%" PRId64 " failed=%" PRId64 " undelivered=%" PRId64
            " spool_bytes=%" PRId64,
            rs.lines, rs.accepted, rs.rejected, rs.skipped, ps.delivered, ps.refused,
            ps.retried, ps.maybe_twice, ps.replayed, ps.failed, undelivered,
            ps.spool_bytes);
    log_redactions(&ing);
    st_ingest_fini(&ing);
    st_producer_destroy(prod);
    prod = NULL;
    st_metrics_destroy(metrics);
    if (rc || (!spooled && (undelivered || ps.failed)))
        status = 2;
    else if (rs.rejected || ps.refused)
        status = 1; /* a line Kafka refused is dead-lettered, as a rejected one */
    else
        status = 0;
out:
    free(sets);
    if (in && in != stdin)
        fclose(in);
    st_kafka_props_fini(&conf.kafka);
    st_conf_fini(collector_props, &conf);
    return status;

conf_error:
    st_error("%s", errstr);
    free(sets);
    st_kafka_props_fini(&conf.kafka);
    st_conf_fini(collector_props, &conf);
    return 78;
}
