/* spool.h: the on-disk spool in front of Kafka.
 *
 * Every message the collector produces is first appended to a spool
 * segment (records with a CRC); the segment is fsynced at each durable
 * point (an HTTP answer, a tail checkpoint, the end of an input), which is
 * when the input may consider its lines safe, whether or not Kafka has
 * acknowledged them yet. A segment is deleted once Kafka has acknowledged
 * every record in it; a record whose delivery failed, and every record
 * never handed to Kafka (a full queue), is produced again later (the
 * records Kafka acknowledged beside them are not), and every segment found
 * at start (a crash, or Kafka down at exit) is produced again whole. Kafka
 * may so see a message twice: a delivery that failed after the broker
 * stored it (librdkafka's RD_KAFKA_MSG_STATUS_POSSIBLY_PERSISTED: a
 * timeout in flight), or an acknowledged record of a segment found at
 * start; its event_id makes the copy a duplicate that PostgreSQL drops. When the spool holds
 * spool.max_bytes, or its disk is full (ENOSPC, EDQUOT), the inputs push
 * back (HTTP 503 with Retry-After, the tail and --input wait); nothing is
 * dropped and the collector does not exit. */
#ifndef ST_SPOOL_H
#define ST_SPOOL_H

#include <stddef.h>
#include <stdint.h>

struct st_spool;

/* Opens (creates) the spool in dir; what an earlier run left there is to
 * be produced again. It is full at max_bytes, or when its disk has less
 * than min_free bytes free (0: only a failed write says). NULL with errstr
 * set when dir cannot be used or another collector holds it. */
struct st_spool *st_spool_open(const char *dir, int64_t max_bytes, int64_t min_free,
                               char *errstr, size_t errsz);
void st_spool_close(struct st_spool *s); /* accepts NULL */

/* Appends one message; returns its token (> 0: its segment and its place
 * there, which the calls below take), -2 when the disk is full (nothing of the record is kept: append it again later), or
 * -1 on another I/O error. Not yet durable: see st_spool_sync. */
int64_t st_spool_append(struct st_spool *s, int dlq, const char *topic, const char *key,
                        size_t keylen, const char *value, size_t len);

/* Makes everything appended durable and starts a new segment. 0 or -1. */
int st_spool_sync(struct st_spool *s);

/* The message of token tok was handed to Kafka (queued) or not. */
void st_spool_queued(struct st_spool *s, int64_t tok, int queued);

/* 1 when a record of tok's segment (the open segment) was left unqueued:
 * later records wait behind it, in order, for the replay. */
int st_spool_unsent(const struct st_spool *s, int64_t tok);

/* Kafka's delivery report for the message of token tok: a failed one is
 * produced again (st_spool_maintain). */
void st_spool_delivered(struct st_spool *s, int64_t tok, int ok);

/* Deletes finished segments; for each segment with records to produce
 * again (all of it when found at start; the records whose delivery failed,
 * once every report of the segment is in; the records from its first
 * unqueued one on), calls fn for each of those records, in order, with the
 * record's token, and stops at the first fn that returns non-zero (the
 * segment goes on from that record at the next call). */
typedef int (*st_spool_fn)(void *arg, int64_t tok, int dlq, const char *topic,
                           const char *key, size_t keylen, const char *value, size_t len);
void st_spool_maintain(struct st_spool *s, st_spool_fn fn, void *arg);

/* 1 at spool.max_bytes, with less than min_free bytes free on its disk, or
 * for a second after the disk was found full. */
int st_spool_full(struct st_spool *s);
int64_t st_spool_bytes(const struct st_spool *s);
int64_t st_spool_segments(const struct st_spool *s);

/* The registry (a file of lines "<spool folder>\t<input>") remembers the
 * spool each input last used, so that a spool left behind when spool.dir
 * is removed or changed is not forgotten: for each earlier folder of this
 * input that still holds segments, an error names it and what to do; then
 * dir (NULL: no spool) is recorded for the input. Returns the bytes so
 * stranded. registry NULL: $XDG_STATE_HOME/sandtrail/collector-spools (or
 * ~/.local/state/...); "": does nothing. Never fails (a registry that
 * cannot be written is a warning). */
int64_t st_spool_registry(const char *registry, const char *input, const char *dir);

#endif
