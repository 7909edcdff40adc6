/* dlq.h: dead-letter records for rejected input.
 *
 * A record is one JSON object: schema "sandtrail.dlq.v1", the reason code and
 * message the sender was given, where the line came from (input, line
 * number), when it was rejected, and the line itself truncated to a bound and
 * made valid UTF-8, so that an operator can see what was refused and why.
 *
 * record_id (32 hex digits, random) names the rejection: the record is
 * spooled with it, so a copy the spool's replay sends again (a crash, a
 * delivery that timed out in flight: README, "Each event is in the topic
 * once") carries the same id, while the same line rejected twice (sent
 * twice) gets two. A reader of the dead-letter topic keeps one record per
 * record_id, as PostgreSQL keeps one event per source and event id. */
#ifndef ST_DLQ_H
#define ST_DLQ_H

#include <stddef.h>

#include "buf.h"
#include "json.h"

/* Writes the record into out (reset first). raw is not copied beyond
 * raw_max bytes. */
void st_dlq_record(struct st_buf *out, const struct st_reject *rej,
                   const char *input, long lineno, const char *raw, size_t len,
                   size_t raw_max);

#endif
