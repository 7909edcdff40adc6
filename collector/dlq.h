/* dlq.h: dead-letter records for rejected input.
 *
 * A record is one JSON object: schema "sandtrail.dlq.v1", the reason code and
 * message the sender was given, where the line came from (input, line
 * number), when it was rejected, and the line itself truncated to a bound and
 * made valid UTF-8, so that an operator can see what was refused and why. */
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
