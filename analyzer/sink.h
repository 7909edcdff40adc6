/* sink.h: where a batch goes.
 *
 * One PostgreSQL transaction per batch holds every output of the batch: its
 * events, the findings they produced, and whatever else describes those
 * rows and must commit or roll back with them (an alert outbox, evidence
 * checkpoints). Each output is a part behind `struct st_sink_part_ops`,
 * listed once in sink.c in the order the transaction writes them; main.c
 * knows only the st_sink_* functions.
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

/* One output of a batch. Every callback but write may be NULL.
 * @locality: the analyzer's main thread. */
struct st_sink_part_ops {
    const char *name;
    /* Returns the part's state, or NULL with errstr set (start-up fails). */
    void *(*create)(const struct st_analyzer_conf *conf, char *errstr, size_t errsz);
    void (*destroy)(void *state);
    /* Called once per connection, outside any transaction (temp tables,
     * prepared statements). */
    int (*prepare)(void *state, PGconn *pg, char *errstr, size_t errsz);
    /* Copies what the part needs of one event for the next write. */
    void (*stage)(void *state, const struct st_sink_event *se);
    /* A consumed message that will not be stored (not a valid event, or
     * refused by PostgreSQL for its data): it went to the dead-letter
     * topic for `reason`. Parts that account for every offset (evidence)
     * record it with the next write. A part that staged this message
     * before (a refused one) forgets what it staged of it. */
    void (*skip)(void *state, const rd_kafka_message_t *msg, const char *reason);
    /* After a write failed with ST_SINK_DATA, inside a transaction that is
     * rolled back afterwards: tries each staged message alone (in a
     * savepoint) and calls cb for each PostgreSQL refuses for its data.
     * Returns ST_SINK_OK or ST_SINK_RETRY with errstr set. */
    int (*isolate)(void *state, PGconn *pg, st_sink_refused_cb cb, void *arg,
                   char *errstr, size_t errsz);
    /* Writes the part's rows inside the open transaction. Returns ST_SINK_OK
     * or an error class with errstr set. */
    int (*write)(void *state, PGconn *pg, const struct st_findings *fs, char *errstr,
                 size_t errsz);
    /* The transaction committed (committed = 1: forget the staged data,
     * advance in-memory state) or was rolled back (0: keep the staged data
     * for the retry, undo in-memory changes made by write). */
    void (*end)(void *state, int committed);
    /* The analyzer caught up with its partitions at wall-clock now_ms (0:
     * the end of --drain). Returns 1 when the part has something to write
     * (evidence: a checkpoint to cut), so that a transaction is opened. */
    int (*seal)(void *state, int64_t now_ms);
};

struct st_sink;

/* Creates every part and connects. Returns NULL with errstr set. */
struct st_sink *st_sink_new(const struct st_analyzer_conf *conf, char *errstr,
                            size_t errsz);
void st_sink_destroy(struct st_sink *s);

/* Hands one event to every part for the next write (copied). */
void st_sink_stage(struct st_sink *s, const struct st_sink_event *se);

/* Tells every part that this message will not be stored (see skip). */
void st_sink_skip(struct st_sink *s, const rd_kafka_message_t *msg, const char *reason);

/* Tells every part the analyzer caught up (see seal). Returns 1 when the
 * next st_sink_write must run even with nothing staged. */
int st_sink_seal(struct st_sink *s, int64_t now_ms);

/* Writes everything staged and the findings in one transaction. Returns
 * ST_SINK_OK (staged data forgotten), or an error class with errstr set
 * after rolling back (staged data kept for the retry; the connection is
 * reopened on the next call if it was lost). */
int st_sink_write(struct st_sink *s, const struct st_findings *fs, char *errstr,
                  size_t errsz);

/* After st_sink_write returned ST_SINK_DATA: finds the staged messages
 * that PostgreSQL refuses on their own (see isolate) and reports each to cb;
 * the caller dead-letters them and calls st_sink_skip for each, then writes
 * again. Writes nothing. Returns ST_SINK_OK (cb may not have been called: the
 * refusal then lies in no single event) or ST_SINK_RETRY with errstr. */
int st_sink_isolate(struct st_sink *s, st_sink_refused_cb cb, void *arg, char *errstr,
                    size_t errsz);

/* The class of a failed result: ST_SINK_DATA for data exceptions (22),
 * integrity violations (23) and program limits (54), else ST_SINK_RETRY. */
int st_sink_error_class(const PGresult *res);

/* Fills errstr with "what: PostgreSQL's message" and returns the class of a
 * failed result, or returns ST_SINK_OK for a successful one. Clears res. */
int st_sink_result(PGresult *res, const char *what, char *errstr, size_t errsz);

#endif
