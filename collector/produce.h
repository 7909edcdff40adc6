/* produce.h: the collector's output to Kafka.
 *
 * Accepted events go to the events topic, keyed by task_id so that one
 * task's events stay in order on one partition; rejected lines go to the
 * dead-letter topic with their reason. The producer is idempotent with
 * acks=all: a retried send is never written twice. */
#ifndef ST_PRODUCE_H
#define ST_PRODUCE_H

#include <stddef.h>
#include <stdint.h>

struct st_collector_conf;
struct st_metrics;
struct st_producer;

/* Creates the producer and the topics if missing; delivery latency and
 * errors go to metrics (may be NULL). Returns NULL with errstr set. */
struct st_producer *st_producer_new(const struct st_collector_conf *conf,
                                    struct st_metrics *metrics, char *errstr,
                                    size_t errsz);

/* Flushes what is queued (bounded by the delivery timeout) and frees. Accepts
 * NULL. */
void st_producer_destroy(struct st_producer *p);

/* Queues one accepted event (value copied). Blocks while the local queue is
 * full. Returns 0, or -1 on a fatal producer error. */
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

/* Waits until every queued message has a delivery report, or timeout_ms.
 * Returns the number of messages that failed or are still undelivered: 0
 * means everything queued so far is durably in Kafka. */
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
    int64_t queued, delivered, failed;
};
void st_producer_stats(const struct st_producer *p, struct st_producer_stats *s);

#endif
