/* main.c: sandtrail-collector.
 *
 *   input (input_file.c, tail.c, input_http.c)
 *     -> ingest.c: batches accepted by input.workers threads (accept.c:
 *        decode, redact, validate), outcomes in input order
 *     -> produce.c (spool.c in front of Kafka) / dead-letter topic (dlq.c)
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
#include "ingest.h"
#include "input.h"
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
    {"kafka.queue.max_messages", NULL, ST_CONF_INT, C(queue_max_messages), 1000, 10000000,
     "500000",
     "messages the producer holds in memory before the input waits (a queue that "
     "fills stalls every worker; Kafka takes acknowledgements in bursts)"},
    {"kafka.queue.max_kbytes", NULL, ST_CONF_INT, C(queue_max_kbytes), 1024, 2097151,
     "262144", "KiB the producer holds in memory before the input waits"},
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
     0, NULL, "--listen: lines \"<token> <source kind> <source name>\", one per source"},
    {"http.max_body_bytes", NULL, ST_CONF_INT, C(http_max_body), 1024,
     INT64_C(1073741824), "8388608", "--listen: largest request body, inflated (413 above)"},
    {"spool.dir", "SANDTRAIL_SPOOL_DIR", ST_CONF_STR, C(spool_dir), 0, 0, NULL,
     "folder of the on-disk spool in front of Kafka (unset: no spool, inputs wait "
     "for Kafka)"},
    {"spool.max_bytes", NULL, ST_CONF_INT, C(spool_max_bytes), 1024 * 1024,
     INT64_C(1099511627776), "1073741824",
     "spool size at which inputs push back (HTTP 503, the tail waits)"},
    {"input.workers", NULL, ST_CONF_INT, C(workers), 0, 16, "0",
     "threads that decode, redact and validate lines (0: one per CPU); events are "
     "produced in input order whatever the number"},
    {"fault.redact_rule_off", NULL, ST_CONF_STR, C(fault_rule_off), 0, 0, NULL,
     "fault injection for tests: this redaction rule never matches, so that a "
     "test can prove it would see the leak. Never set it in production"},
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
    if (st_conf_load(collector_props, &conf, config_file, sets, nsets, NULL, NULL, errstr,
                     sizeof(errstr)))
        goto conf_error;
    free(sets);
    sets = NULL;
    if (st_log_configure(conf.log_level, conf.log_format, errstr, sizeof(errstr)))
        goto conf_error;
    if (listen_at && st_conf_set(collector_props, &conf, "http.listen", listen_at, errstr,
                                 sizeof(errstr)))
        goto conf_error;

    FILE *in = !input ? NULL : strcmp(input, "-") == 0 ? stdin : fopen(input, "rb");
    if (input && !in) {
        st_error("could not open input \"%s\": %s", input, strerror(errno));
        st_conf_fini(collector_props, &conf);
        return 66;
    }
    if (conf.fault_rule_off && *conf.fault_rule_off)
        st_warn("fault injection: redaction rule \"%s\" is off; values of its shape "
                "pass unredacted",
                conf.fault_rule_off);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);

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
    struct st_producer *prod = st_producer_new(&conf, metrics, errstr, sizeof(errstr));
    if (!prod) {
        st_error("%s", errstr);
        st_ingest_fini(&ing);
        st_metrics_destroy(metrics);
        status = 2;
        goto out;
    }
    ing.prod = prod;
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
    st_info("lines=%ld accepted=%ld rejected=%ld skipped=%ld delivered=%" PRId64
            " failed=%" PRId64 " undelivered=%" PRId64,
            rs.lines, rs.accepted, rs.rejected, rs.skipped, ps.delivered, ps.failed,
            undelivered);
    log_redactions(&ing);
    st_ingest_fini(&ing);
    st_producer_destroy(prod);
    prod = NULL;
    st_metrics_destroy(metrics);
    if (rc || (!spooled && (undelivered || ps.failed)))
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
