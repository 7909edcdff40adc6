/* spool.h: the on-disk spool in front of Kafka.
 *
 * Every message the collector produces is first appended to a spool
 * segment (records with a CRC); the segment is fsynced at each durable
 * point (an HTTP answer, a tail checkpoint, the end of an input), which is
 * when the input may consider its lines safe, whether or not Kafka has
 * acknowledged them yet. A segment is deleted once Kafka has acknowledged
 * every record in it; a segment with a failed or unsent record is produced
 * again later, and every segment found at start (a crash, or Kafka down at
 * exit) is produced again. Kafka may so see a message twice; its event_id
 * makes the copy a duplicate that PostgreSQL drops. When the spool holds
 * spool.max_bytes the inputs push back (HTTP 503, the tail waits). */
#ifndef ST_SPOOL_H
#define ST_SPOOL_H

#include <stddef.h>
#include <stdint.h>

struct st_spool;

struct st_spool *st_spool_open(const char *dir, int64_t max_bytes, char *errstr,
                               size_t errsz);
void st_spool_close(struct st_spool *s); /* accepts NULL */

/* Appends one message; returns the id of its segment (> 0), or -1 on an
 * I/O error. Not yet durable: see st_spool_sync. */
int64_t st_spool_append(struct st_spool *s, int dlq, const char *topic, const char *key,
                        size_t keylen, const char *value, size_t len);

/* Makes everything appended durable and starts a new segment. 0 or -1. */
int st_spool_sync(struct st_spool *s);

/* A message of segment seg was handed to Kafka (queued) or not. */
void st_spool_queued(struct st_spool *s, int64_t seg, int queued);

/* Kafka's delivery report for a message of segment seg. */
void st_spool_delivered(struct st_spool *s, int64_t seg, int ok);

/* Deletes finished segments; for each segment that must be produced again,
 * calls fn for each of its records, in order, and stops at the first fn
 * that returns non-zero (the segment then waits for the next call). */
typedef int (*st_spool_fn)(void *arg, int64_t seg, int dlq, const char *topic,
                           const char *key, size_t keylen, const char *value, size_t len);
void st_spool_maintain(struct st_spool *s, st_spool_fn fn, void *arg);

int st_spool_full(const struct st_spool *s);
int64_t st_spool_bytes(const struct st_spool *s);
int64_t st_spool_segments(const struct st_spool *s);

#endif
