/* sink.h: where a batch goes.
 *
 * One PostgreSQL transaction per batch holds every output of the batch: its
 * events, the findings they produced, and whatever else describes those
 * rows and must commit or roll back with them (an alert outbox, evidence
 * checkpoints). Each output is a part behind `struct st_sink_part_ops`,
 * listed once in sink.c in the order the transaction writes them, with the
 * analyzer roles (role.h) that write it: a sink has only its role's parts.
 * main.c knows only the st_sink_* functions.
 *
 * What a batch stages lives in a `struct st_sink_batch` (one per batch in
 * flight, owned by the caller), not in the sink: the main thread stages
 * batch N+1 into one while the store thread (store.c) writes batch N from
 * another. A part's state is split the same way: what stage, skip and seal
 * touch is per batch (or main-thread only), what write, isolate and end
 * touch is per batch or the writer's only.
 *
 * Errors are classed: ST_SINK_RETRY (PostgreSQL unavailable, a lost
 * connection, a serialization failure: the same batch will succeed later)
 * or ST_SINK_DATA (PostgreSQL refused the batch's data: retrying the same
 * rows can never succeed). */
#ifndef ST_SINK_H
#define ST_SINK_H

#include <stddef.h>
#include <stdint.h>

#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>

#include "analyzer.h"
#include "event.h"
#include "findings.h"

enum { ST_SINK_OK = 0, ST_SINK_RETRY = -1, ST_SINK_DATA = -2 };

/* One consumed event and where it came from (neither is copied). skewed:
 * its time is far from the time the collector produced it (reorder.h). */
struct st_sink_event {
    const struct st_event *ev;
    const rd_kafka_message_t *msg;
    int skewed;
};

/* Reports one staged message that PostgreSQL refuses on its own, with
 * PostgreSQL's message. */
typedef void (*st_sink_refused_cb)(void *arg, int32_t partition, int64_t offset,
                                   const char *error);

/* What one transaction's parts share: the batch's findings, and what an
 * earlier part learned that spares a later one a query. Set up by
 * st_sink_write, one per try. */
struct st_sink_txn {
    const struct st_findings *fs;
    /* set by the events part: every event staged in the batch was inserted
     * at its own offset by this try (the COPY straight into events, in
     * this transaction or in the shares' transactions its `before` just
     * committed, took them all: none was stored before), so the evidence
     * part need not ask which ones were duplicates */
    int events_all_new;
};

/* One output of a batch. Every callback but write may be NULL; batch_new
 * and batch_destroy go together. `batch` is what batch_new returned (NULL
 * for a part without it).
 * @locality create, destroy, batch_new, batch_destroy: any thread, while
 *   no other callback of the part runs on the same state or batch;
 *   stage, skip, seal: the thread filling the batch (the main thread),
 *   except skip of a refused message, which the writer calls on the batch
 *   it writes (anything skip touches outside the batch must allow that);
 *   prepare, before, write, isolate, end: the thread writing (the store
 *   thread); ahead: the store's prestorer, at the same time as the
 *   writer's callbacks on another batch (what both touch of the part's
 *   state must be locked);
 *   The three may run at once on different batches. */
struct st_sink_part_ops {
    const char *name;
    /* Returns the part's state, or NULL with errstr set (start-up fails). */
    void *(*create)(const struct st_analyzer_conf *conf, char *errstr, size_t errsz);
    void (*destroy)(void *state);
    /* The part's staging of one batch, empty; batch_destroy frees it. */
    void *(*batch_new)(void *state);
    void (*batch_destroy)(void *batch);
    /* Called once per connection, outside any transaction (temp tables,
     * prepared statements). */
    int (*prepare)(void *state, PGconn *pg, char *errstr, size_t errsz);
    /* Called before the batch's transaction opens, on its connection,
     * outside any transaction (each statement, or transaction of its own,
     * commits on its own): for what the write needs made first whose lock
     * must not be held for the whole transaction (the events' day
     * partitions: ACCESS EXCLUSIVE on events), or what may be stored
     * ahead of it (a large batch's events, over several connections).
     * Must be harmless when the transaction then fails (the batch is
     * written again). Returns ST_SINK_OK or an error class with errstr
     * set (ST_SINK_DATA: as from write). */
    int (*before)(void *state, void *batch, PGconn *pg, char *errstr, size_t errsz);
    /* Called by the store's prestorer (store.h) ahead of the batch's
     * `before` and transaction, while the writer may still write the batch
     * before it, on a connection of its own, outside any transaction: what
     * `before` may store early (a split batch's events). Must leave the
     * batch as it found it when it fails, so that `before` does it all
     * then (the writer retries, reports and isolates; the prestorer does
     * none of that). Returns 1 when it stored something, ST_SINK_OK when
     * it had nothing to store, or an error class with errstr set.
     * ahead_on: 1 when the part would store something of batch ahead, or,
     * with batch NULL, of some batch (the sink then has a prestorer, which
     * connects only for a batch some part would store something of). */
    int (*ahead)(void *state, void *batch, PGconn *pg, char *errstr, size_t errsz);
    int (*ahead_on)(const void *state, const void *batch);
    /* Copies what the part needs of one event for the next write. */
    void (*stage)(void *state, void *batch, const struct st_sink_event *se);
    /* A consumed message that will not be stored (not a valid event, or
     * refused by PostgreSQL for its data): it went to the dead-letter
     * topic for `reason`. Parts that account for every offset (evidence)
     * record it with the next write. A part that staged this message
     * before (a refused one) forgets what it staged of it. */
    void (*skip)(void *state, void *batch, const rd_kafka_message_t *msg,
                 const char *reason);
    /* After a write failed with ST_SINK_DATA, inside a transaction that is
     * rolled back afterwards: tries each staged message alone (in a
     * savepoint) and calls cb for each PostgreSQL refuses for its data.
     * Returns ST_SINK_OK or ST_SINK_RETRY with errstr set. */
    int (*isolate)(void *state, void *batch, PGconn *pg, st_sink_refused_cb cb,
                   void *arg, char *errstr, size_t errsz);
    /* Writes the part's rows inside the open transaction. Returns ST_SINK_OK
     * or an error class with errstr set. */
    int (*write)(void *state, void *batch, PGconn *pg, struct st_sink_txn *tx,
                 char *errstr, size_t errsz);
    /* The transaction committed (committed = 1: forget the staged data,
     * advance in-memory state) or was rolled back (0: keep the staged data
     * for the retry, undo in-memory changes made by write). */
    void (*end)(void *state, void *batch, int committed);
    /* The analyzer caught up with its partitions at wall-clock now_ms (0:
     * the end of --drain). Returns 1 when the part has something to write
     * (evidence: a checkpoint to cut), so that a transaction is opened. */
    int (*seal)(void *state, void *batch, int64_t now_ms);
};

struct st_sink;
struct st_sink_batch;

/* Creates the parts of conf->role and connects. Returns NULL with errstr
 * set. */
struct st_sink *st_sink_new(const struct st_analyzer_conf *conf, char *errstr,
                            size_t errsz);
/* Accepts NULL. Every batch of the sink must be destroyed first. */
void st_sink_destroy(struct st_sink *s);

/* An empty batch of s to stage into; the caller owns it (one per batch in
 * flight) and frees it with st_sink_batch_destroy (accepts NULL). */
struct st_sink_batch *st_sink_batch_new(struct st_sink *s);
void st_sink_batch_destroy(struct st_sink_batch *b);

/* 1 when st_sink_write of b would open no transaction: nothing staged,
 * skipped or sealed. */
int st_sink_batch_empty(const struct st_sink_batch *b);

/* Hands one event to every part for b's write (copied).
 * @locality the thread filling b */
void st_sink_stage(struct st_sink *s, struct st_sink_batch *b,
                   const struct st_sink_event *se);

/* Tells every part that this message will not be stored (see skip). May be
 * called by the writing thread on a batch it writes (a refused message).
 * @locality the thread that owns b at the time */
void st_sink_skip(struct st_sink *s, struct st_sink_batch *b, const rd_kafka_message_t *msg,
                  const char *reason);

/* Tells every part the analyzer caught up (see seal). Returns 1 when the
 * write of b must run even with nothing staged.
 * @locality the thread filling b */
int st_sink_seal(struct st_sink *s, struct st_sink_batch *b, int64_t now_ms);

/* Runs the parts' `ahead` on b, on the sink's prestore connection (made on
 * first use), before st_sink_write of b and while st_sink_write of the
 * batch before b may run: what it stores, st_sink_write does not store
 * again. Returns 1 when it stored something, ST_SINK_OK when nothing was
 * to be stored ahead, or an error class with errstr set; after a failure b
 * is as before (st_sink_write then does it all: nothing to retry here).
 * @locality one thread (the store's prestorer) */
int st_sink_prestore(struct st_sink *s, struct st_sink_batch *b, char *errstr,
                     size_t errsz);

/* Writes everything staged in b and the findings in one transaction
 * (every part but those that follow it: st_sink_write_after).
 * Returns ST_SINK_OK (b emptied), or an error class with errstr set after
 * rolling back (b kept for the retry; the connection is reopened on the
 * next call if it was lost).
 * @locality the writing thread (one at a time: the sink's connection) */
int st_sink_write(struct st_sink *s, struct st_sink_batch *b, const struct st_findings *fs,
                  char *errstr, size_t errsz);

/* Writes the parts that follow b's transaction (parts[] in sink.c: the
 * store role's refresh of the findings naming the events just stored) in a
 * transaction of their own, on the sink's second connection, once
 * st_sink_write of b has committed. Returns ST_SINK_OK (their staging
 * emptied; at once when the role has no such part or nothing is staged),
 * or ST_SINK_RETRY with errstr set after rolling back (kept for the retry).
 * Until it succeeds the batch's offsets must not be committed: a redo of
 * the batch writes these parts again.
 * @locality one thread at a time, not st_sink_write's at the same time as
 * it writes the same batch (the store's committer: store.c) */
int st_sink_write_after(struct st_sink *s, struct st_sink_batch *b, char *errstr,
                        size_t errsz);

/* After st_sink_write returned ST_SINK_DATA: finds the messages staged in
 * b that PostgreSQL refuses on their own (see isolate) and reports each to
 * cb; the caller dead-letters them and calls st_sink_skip for each, then
 * writes again. Writes nothing. Returns ST_SINK_OK (cb may not have been
 * called: the refusal then lies in no single event) or ST_SINK_RETRY with
 * errstr. @locality the writing thread */
int st_sink_isolate(struct st_sink *s, struct st_sink_batch *b, st_sink_refused_cb cb,
                    void *arg, char *errstr, size_t errsz);

/* The class of a failed result: ST_SINK_DATA for data exceptions (22),
 * integrity violations (23) and program limits (54), else ST_SINK_RETRY. */
int st_sink_error_class(const PGresult *res);

/* Fills errstr with "what: PostgreSQL's message" and returns the class of a
 * failed result, or returns ST_SINK_OK for a successful one. Clears res. */
int st_sink_result(PGresult *res, const char *what, char *errstr, size_t errsz);

#endif
