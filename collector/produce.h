/* produce.h: the collector's output to Kafka.
 *
 * Accepted events go to the events topic, keyed by task_id so that one
 * task's events stay in order on one partition; rejected lines go to the
 * dead-letter topic with their reason. The producer is idempotent with
 * acks=all: a retried send is never written twice. */
#ifndef ST_PRODUCE_H
#define ST_PRODUCE_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

/* Reasons of dead-letter records for messages Kafka cannot take: larger
 * than kafka.message_max_bytes (refused before Kafka sees it, or by Kafka),
 * or refused by Kafka for another reason of its own (invalid record, ...).
 * Such a refusal concerns one message: it never stops the collector. */
#define ST_REASON_TOO_LARGE "too_large"
#define ST_REASON_KAFKA_REFUSED "kafka_refused"

struct st_collector_conf;
struct st_metrics;
struct st_producer;

/* Creates the producer and the topics if missing; delivery latency and
 * errors go to metrics (may be NULL). Returns NULL with errstr set. */
struct st_producer *st_producer_new(const struct st_collector_conf *conf,
                                    struct st_metrics *metrics, char *errstr,
                                    size_t errsz);

/* Names the input in dead-letter records of messages Kafka refused (not
 * copied; default "kafka"). */
void st_producer_set_input(struct st_producer *p, const char *name);

/* A wait for room on the spool's disk ends (the message not produced, -1)
 * once *stop is set (not copied; NULL: never). */
void st_producer_set_stop(struct st_producer *p, volatile sig_atomic_t *stop);

/* wait 1 (the default): a full disk under the spool makes produce wait for
 * room; 0: it fails the message at once (-1), for an input that can tell
 * its sender to come back (HTTP 503). */
void st_producer_set_disk_wait(struct st_producer *p, int wait);

/* Flushes what is queued (bounded by the delivery timeout) and frees. Accepts
 * NULL. */
void st_producer_destroy(struct st_producer *p);

/* Queues one accepted event (value copied). Blocks while the local queue is
 * full, or, with a spool, while its disk is full. A message Kafka refuses
 * for good (too large, invalid) is sent to the dead-letter topic with its
 * reason instead: that is not an error. Returns 0, or -1 on a fatal
 * producer error. */
int st_producer_event(struct st_producer *p, const char *key, const char *value,
                      size_t len);

/* Queues one dead-letter record (value copied), with the reason code in the
 * "reason" header. */
int st_producer_dlq(struct st_producer *p, const char *reason,
                    const char *value, size_t len);

/* Makes everything produced so far safe: with a spool, fsyncs it (Kafka may
 * acknowledge later; the spool produces again what it does not); without,
 * waits as st_producer_flush. Returns 0 when safe. */
int64_t st_producer_durable(struct st_producer *p, int timeout_ms);

/* Serves delivery reports, deletes finished spool segments and produces
 * again what must be. Call it when idle. */
void st_producer_poll(struct st_producer *p);

/* 1 when the spool is at spool.max_bytes: inputs must push back. */
int st_producer_full(struct st_producer *p);

/* Waits until every queued message has a delivery report, or timeout_ms;
 * with a spool, until the spool is empty (what a full queue left there
 * produced again, everything acknowledged). Returns what is still
 * undelivered (without a spool the messages that failed or have no report,
 * with one the bytes left in the spool): 0 means everything produced so far
 * is durably in Kafka (or, refused by it, in the dead-letter topic). */
int64_t st_producer_flush(struct st_producer *p, int timeout_ms);

/* Per-request delivery (without a spool): the messages this thread
 * produces after st_producer_track, until st_producer_track_wait, are
 * tracked on their own. NULL with a spool (its fsync is what counts). */
struct st_delivery;
struct st_delivery *st_producer_track(struct st_producer *p);
/* Stops tracking on this thread and waits until each tracked message has
 * its delivery report, or timeout_ms. Returns how many failed or are still
 * undelivered (0: all in Kafka); d is freed (a late report is absorbed).
 * Accepts NULL (returns 0). */
int64_t st_producer_track_wait(struct st_producer *p, struct st_delivery *d,
                               int timeout_ms);

struct st_producer_stats {
    int64_t queued, delivered;
    int64_t failed;      /* lost: no spool, or a refused dead-letter record */
    int64_t retried;     /* failed deliveries kept in the spool, produced again */
    int64_t maybe_twice; /* of retried: sent but not acknowledged, so perhaps
                          * stored already (a second copy in the topic) */
    int64_t refused;     /* refused by Kafka for good, dead-lettered */
    int64_t replayed;    /* records produced again from the spool */
    int64_t spool_bytes; /* still in the spool */
};
void st_producer_stats(const struct st_producer *p, struct st_producer_stats *s);

#endif
