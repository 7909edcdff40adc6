/* ingest.h: what happens to one input line, whatever the input.
 *
 * accept.c turns the line into a redacted, validated event; here it is
 * produced to the events topic, or, rejected, reported (stderr, metrics)
 * and produced, redacted, to the dead-letter topic with its reason. The
 * file, follow and HTTP inputs all call st_ingest_line. */
#ifndef ST_INGEST_H
#define ST_INGEST_H

#include <stddef.h>

#include "buf.h"
#include "json.h"

struct st_accept;
struct st_collector_conf;
struct st_metric;
struct st_metrics;
struct st_producer;

#define ST_REASON_SOURCE "source_not_allowed"

struct st_ingest_stats {
    long lines, accepted, rejected, skipped;
};

struct st_ingest {
    const struct st_collector_conf *conf; /* none of these is owned */
    struct st_accept *acc;
    struct st_producer *prod;
    struct st_metrics *metrics;
    const char *input_name; /* in messages and dead-letter records */
    long lineno;            /* of the current input; the caller may reset it */
    /* when set, an event must claim this source (HTTP: the caller's token) */
    const char *allow_kind, *allow_name;
    struct st_reject last;  /* the last rejection */
    struct st_ingest_stats stats;
    struct st_buf dlq;
    struct st_metric *m_lines, *m_accepted, *m_skipped;
};

void st_ingest_init(struct st_ingest *in, const struct st_collector_conf *conf,
                    struct st_accept *acc, struct st_producer *prod,
                    struct st_metrics *metrics, const char *input_name);
void st_ingest_fini(struct st_ingest *in);

/* Returns 0 when the line was produced (or carried no event), 1 when it was
 * rejected (in->last says why; it went to the dead-letter topic), -1 when
 * the producer failed for good. */
int st_ingest_line(struct st_ingest *in, const char *line, size_t len, int too_long);

/* Brings the redaction counters of the metrics up to date. */
void st_ingest_sync_metrics(struct st_ingest *in);

#endif
