/* ingest.c: one input line to Kafka (see ingest.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accept.h"
#include "collector.h"
#include "dlq.h"
#include "event.h"
#include "ingest.h"
#include "log.h"
#include "metrics.h"
#include "produce.h"
#include "redact.h"

void st_ingest_init(struct st_ingest *in, const struct st_collector_conf *conf,
                    struct st_accept *acc, struct st_producer *prod,
                    struct st_metrics *metrics, const char *input_name)
{
    memset(in, 0, sizeof(*in));
    in->conf = conf;
    in->acc = acc;
    in->prod = prod;
    in->metrics = metrics;
    in->input_name = input_name;
    st_buf_init(&in->dlq);
    in->m_lines = st_metric_get(metrics, ST_METRIC_COUNTER, "sandtrail_collector_lines_total",
                                "input lines read", "");
    in->m_accepted = st_metric_get(metrics, ST_METRIC_COUNTER,
                                   "sandtrail_collector_accepted_total",
                                   "events accepted and produced", "");
    in->m_skipped = st_metric_get(metrics, ST_METRIC_COUNTER,
                                  "sandtrail_collector_skipped_total",
                                  "lines that carry no event in their format", "");
}

void st_ingest_fini(struct st_ingest *in)
{
    st_buf_fini(&in->dlq);
}

static void metric_rejected(struct st_ingest *in, const char *reason)
{
    char labels[96];
    snprintf(labels, sizeof(labels), "reason=\"%s\"", reason);
    st_metric_add(st_metric_get(in->metrics, ST_METRIC_COUNTER,
                                "sandtrail_collector_rejected_total",
                                "lines rejected, by reason (each in the dead-letter topic)",
                                labels),
                  1);
}

void st_ingest_sync_metrics(struct st_ingest *in)
{
    struct st_redactor *r = st_accept_redactor(in->acc);
    char labels[96];
    for (size_t i = 0; i < st_redact_nrules(r); i++) {
        uint64_t hits = st_redact_rule_hits(r, i);
        if (!hits)
            continue;
        snprintf(labels, sizeof(labels), "rule=\"%s\"", st_redact_rule_name(r, i));
        st_metric_set(st_metric_get(in->metrics, ST_METRIC_COUNTER,
                                    "sandtrail_collector_redactions_total",
                                    "values redacted, by rule", labels),
                      (int64_t)hits);
    }
}

/* An HTTP caller may send only as the source its token names: a
 * compromised sandbox cannot forge proxy or broker events. */
static int source_allowed(struct st_ingest *in, struct st_reject *rej)
{
    const struct st_event *ev = st_accept_event(in->acc);
    if (!in->allow_kind ||
        (!strcmp(st_source_kind_name(ev->source_kind), in->allow_kind) &&
         !strcmp(ev->source_name, in->allow_name)))
        return 1;
    rej->code = ST_REASON_SOURCE;
    snprintf(rej->msg, sizeof(rej->msg),
             "this token may send only as source %.16s/%.64s", in->allow_kind,
             in->allow_name);
    return 0;
}

int st_ingest_line(struct st_ingest *in, const char *line, size_t len, int too_long)
{
    const struct st_collector_conf *conf = in->conf;
    struct st_reject *rej = &in->last;
    const char *out, *key;
    size_t outlen;

    in->lineno++;
    in->stats.lines++;
    st_metric_add(in->m_lines, 1);
    if (too_long) {
        rej->code = ST_REASON_TOO_LONG;
        snprintf(rej->msg, sizeof(rej->msg), "line longer than %" PRId64 " bytes",
                 conf->max_line_bytes);
    } else if (len == 0 || strspn(line, " \t") == len) {
        return 0; /* blank lines separate nothing in NDJSON: skip */
    } else {
        int a = st_accept_line(in->acc, line, len, &out, &outlen, &key, rej);
        if (a == 1) {
            in->stats.skipped++;
            st_metric_add(in->m_skipped, 1);
            return 0;
        }
        if (a == 0 && source_allowed(in, rej)) {
            if (st_producer_event(in->prod, key, out, outlen))
                return -1;
            in->stats.accepted++;
            st_metric_add(in->m_accepted, 1);
            return 0;
        }
    }
    in->stats.rejected++;
    metric_rejected(in, rej->code);
    /* the reason is redacted by accept.c; the line is redacted here, before
     * it is cut to dlq.raw_bytes */
    fprintf(stderr, "%s:%ld: rejected: %s: %s\n", in->input_name, in->lineno, rej->code,
            rej->msg);
    size_t rlen;
    char *raw = st_accept_redact_raw(in->acc, line, len, &rlen);
    st_dlq_record(&in->dlq, rej, in->input_name, in->lineno, raw, rlen,
                  (size_t)conf->dlq_raw_bytes);
    free(raw);
    return st_producer_dlq(in->prod, rej->code, in->dlq.data, in->dlq.len) ? -1 : 1;
}
