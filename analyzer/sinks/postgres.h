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

/* Writes and commits. Returns 0, or -1 with errstr set after rolling back;
 * the connection is reset on the next call if it was lost. */
int st_pgsink_write(struct st_pgsink *s, const struct st_sink_event *evs, size_t n,
                    const struct st_findings *fs, char *errstr, size_t errsz);

#endif
