/* store.h: the store stage, which makes batches durable while the main
 * thread works on the next.
 *
 * The main thread fills a `struct st_store_batch` (its messages, its staged
 * rows, its findings, the offsets to commit once it is stored) and hands it
 * over with st_store_submit. Three threads then work on it in turn:
 *   the prestorer
 *   0. stores what the sink may store ahead of the batch's transaction
 *      (st_sink_prestore: a split batch's events, in transactions of
 *      their own), while the writer still writes the batch before it;
 *      it only tries: what it could not store, the writer does; then hands
 *      it to the writer, which
 *   1. writes it in one PostgreSQL transaction (st_sink_write), retrying
 *      with exponential backoff while PostgreSQL is unavailable; when
 *      PostgreSQL refuses rows for their data, dead-letters those events,
 *      removes their rows and the finding evidence naming them, and writes
 *      the rest; then hands it to the committer, which
 *   2. writes the sink's parts that follow the batch's transaction (the
 *      store role's refresh: st_sink_write_after, on the sink's second
 *      connection), then runs the after_pg_commit hook (if any: the
 *      detectors' checkpoint to Redis), each until it succeeds;
 *   3. commits the Kafka offsets the batch holds (those of its cut, a batch
 *      before it: main.c; none, nparts 0, when the cut did not move), each
 *      in one Kafka transaction with the dead-letter records of the
 *      messages it passes (deadletter.h);
 * and marks the batch done. st_store_wait returns the oldest batch once it
 * is done. At most ST_STORE_IN_FLIGHT batches are in flight: while the
 * committer finishes batch N, the writer writes N+1, the prestorer stores
 * N+2's events and the main thread detects N+3. When the sink stores
 * nothing ahead (the detect role, one connection) the prestorer only
 * passes batches on, and the third batch in flight is a buffer between
 * detection and the committer's Redis checkpoint (measured: about 7%
 * faster on the denial stream than two).
 * Batches pass each step in the order they were submitted, so Redis is
 * written after PostgreSQL and offsets are committed in order, only once
 * everything up to them is durable (the events stored ahead of a batch's
 * transaction are those of a split batch, which may already commit before
 * it: sink.h).
 *
 * The writer owns the sink's connection for good (st_sink_write and
 * st_sink_isolate run only there), the committer its second
 * (st_sink_write_after), the prestorer its third (st_sink_prestore); the
 * store owns a submitted batch until
 * st_store_wait returns it. It never touches the reorder buffer, the
 * detectors or Redis (the hook does, on its own connection): what the main
 * thread must do after a batch (forget refused events, trim detector
 * state) it reads from the batch's result fields.
 *
 * @locality st_store_new, st_store_submit, st_store_wait, st_store_busy,
 * st_store_in_flight, st_store_done, st_store_destroy:
 * one thread (the analyzer's main thread). */
#ifndef ST_STORE_H
#define ST_STORE_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include <librdkafka/rdkafka.h>

#include "consume.h"
#include "deadletter.h"
#include "findings.h"
#include "metrics.h"
#include "sink.h"

/* Batches handed over and not yet returned by st_store_wait, at most. */
#define ST_STORE_IN_FLIGHT 3

/* One refused event, reported back to the main thread. */
struct st_store_refused {
    int32_t partition;
    int64_t offset;
};

/* Everything the store needs for one batch, and what it reports back.
 * Owned by the main thread while it fills it and after st_store_wait, by
 * the store in between. */
struct st_store_batch {
    /* filled by the main thread */
    struct st_sink_batch *rows; /* staged rows (st_sink_stage) */
    struct st_findings findings;
    rd_kafka_message_t **msgs; /* the batch's messages, destroyed by reset */
    int nmsgs, capmsgs;
    int32_t *parts; /* offsets to commit once stored: offsets[i] of parts[i] */
    int64_t *offsets;
    int64_t *clocks; /* each offset's clock (reorder.h), committed with it */
    int nparts;
    /* reported by the store */
    int failed;    /* asked to stop while retrying: nothing committed */
    int committed; /* Kafka took the offsets */
    struct st_store_refused *refused; /* dead-lettered by the store */
    size_t nrefused, caprefused;
    int done;      /* under the store's lock: the committer finished it */
    int64_t store_us;     /* time from submission to done */
    int64_t submitted_us; /* when it was handed over (monotonic) */
};

/* A new empty batch staging into sink's batches. */
struct st_store_batch *st_store_batch_new(struct st_sink *sink, int max_msgs);
/* Destroys the messages, empties the rows, findings and results (keeps the
 * memory). */
void st_store_batch_reset(struct st_store_batch *b);
void st_store_batch_destroy(struct st_store_batch *b); /* accepts NULL */

/* Runs in the committer thread after a batch's PostgreSQL transaction
 * committed, before its offsets are: returns 0, or -1 with errstr set to be
 * called again after a backoff. */
typedef int (*st_store_hook)(void *arg, const struct st_store_batch *b, char *errstr,
                             size_t errsz);

struct st_store_conf {
    struct st_sink *sink;         /* not owned; its connection becomes the store's */
    struct st_deadletter *dlq;    /* not owned; shared (deadletter.h is locked) */
    struct st_consumer *consumer; /* not owned; only st_consumer_commit is called */
    struct st_metrics *metrics;   /* not owned */
    int64_t retry_max_backoff_ms;
    int64_t fail_pg_commits;    /* fault.fail_pg_commits */
    int64_t crash_after_commits; /* fault.crash_after_pg_commits */
    volatile sig_atomic_t *stop; /* set by a signal: give up retrying */
    st_store_hook after_pg_commit; /* NULL: none */
    void *hook_arg;
};

/* Starts the store's threads (conf is copied). Returns NULL with errstr
 * set. */
struct st_store *st_store_new(const struct st_store_conf *conf, char *errstr,
                              size_t errsz);

/* Hands b over, once the prestorer is free (it passed the previous batch
 * on to the writer); fewer than ST_STORE_IN_FLIGHT batches may be in flight
 * (st_store_wait first). Adds the time waited to the store-wait metric. */
void st_store_submit(struct st_store *s, struct st_store_batch *b);

/* Waits until the oldest batch in flight is done and returns it (NULL when
 * none is in flight); the caller owns it again. Adds the time waited to
 * the store-wait metric. */
struct st_store_batch *st_store_wait(struct st_store *s);

/* 1 while a batch is in flight (done or not). */
int st_store_busy(const struct st_store *s);

/* How many batches are in flight (done or not). */
int st_store_in_flight(const struct st_store *s);

/* How many batches the prestorer stored something of (their events ahead
 * of their transaction); 0 for NULL. Any thread. */
long st_store_ahead(const struct st_store *s);

/* 1 while the store retries a batch (PostgreSQL or the hook unavailable):
 * the analyzer is not ready. Any thread. */
int st_store_retrying(const struct st_store *s);

/* 1 when the oldest batch in flight is done: st_store_wait would not
 * block. */
int st_store_done(struct st_store *s);

/* Waits for every batch in flight, stops the threads, frees. Accepts
 * NULL. */
void st_store_destroy(struct st_store *s);

#endif
