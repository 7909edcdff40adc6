/* postgres.h: the analyzer's PostgreSQL sink.
 *
 * Writes one batch -- its events and the findings they produced -- in one
 * transaction: events with COPY into a staging table and one INSERT ... ON
 * CONFLICT DO NOTHING, findings as upserts keyed by finding_id. Writing the
 * same batch twice leaves the same rows. */
#ifndef ST_SINK_POSTGRES_H
#define ST_SINK_POSTGRES_H

#include <stddef.h>

#include <librdkafka/rdkafka.h>

#include "event.h"
#include "findings.h"

struct st_pgsink;

/* One consumed event and where it came from (neither is copied). */
struct st_sink_event {
    const struct st_event *ev;
    const rd_kafka_message_t *msg;
};

/* Connects and prepares the session. Returns NULL with errstr set. */
struct st_pgsink *st_pgsink_new(const char *dsn, const char *config_hash,
                                char *errstr, size_t errsz);
void st_pgsink_destroy(struct st_pgsink *s);

/* Adds the events' rows to the next write (their data is copied: the
 * events and messages may be freed afterwards). */
void st_pgsink_stage(struct st_pgsink *s, const struct st_sink_event *evs, size_t n);

/* Writes the staged events and the findings in one transaction. Returns 0
 * (the staged rows are then forgotten), or -1 with errstr set after rolling
 * back, keeping the staged rows for the retry; the connection is reopened on
 * the next call if it was lost. */
int st_pgsink_write(struct st_pgsink *s, const struct st_findings *fs, char *errstr,
                    size_t errsz);

#endif
