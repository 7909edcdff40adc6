/* pgside.h: a PostgreSQL connection of its own and a thread that runs one
 * job on it at a time, so that a sink part can keep a second backend busy
 * while the writing thread uses its own (events.c: a large batch's rows
 * COPYed over several connections at once).
 *
 * The side connects on its first job (and again after losing its
 * connection), runs `prepare` on each new connection (temp tables), then
 * runs the job. A job runs outside any transaction: it opens and ends its
 * own. st_pgside_start hands one over and returns at once;
 * st_pgside_wait returns its result. One job at a time: start, wait,
 * start, wait.
 *
 * @locality st_pgside_new, st_pgside_destroy: one thread (the sink's
 * owner); st_pgside_start, st_pgside_wait: one thread at a time (the
 * store's writer or prestorer, under the events part's shares_mu); the job
 * and prepare run on the side's own thread. */
#ifndef ST_PGSIDE_H
#define ST_PGSIDE_H

#include <stddef.h>

#include <libpq-fe.h>

struct st_pgside;

/* A job: returns ST_SINK_OK or an error class (sink.h) with errstr set. */
typedef int (*st_pgside_job)(void *arg, PGconn *pg, char *errstr, size_t errsz);

/* The side of dsn (copied). prepare may be NULL. Returns NULL with errstr
 * set when its thread cannot be started. Connects on the first job. */
struct st_pgside *st_pgside_new(const char *dsn, st_pgside_job prepare, void *prepare_arg,
                                char *errstr, size_t errsz);

/* Runs job(arg, ...) on the side's thread. arg is the caller's until
 * st_pgside_wait returns. */
void st_pgside_start(struct st_pgside *s, st_pgside_job job, void *arg);

/* Waits for the job started last: its result, or ST_SINK_RETRY when the
 * side could not connect (errstr set either way on failure). */
int st_pgside_wait(struct st_pgside *s, char *errstr, size_t errsz);

/* Accepts NULL. No job may be running (wait for it first). */
void st_pgside_destroy(struct st_pgside *s);

#endif
