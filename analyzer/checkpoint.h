/* checkpoint.h: the Redis commands that make Redis hold the detectors'
 * state, detached from the detectors.
 *
 * The detectors keep their state in process memory (runwin.c, registry.c)
 * and, at the end of a batch that carries a checkpoint (one per
 * state.checkpoint_ms; every batch with 0), append to a checkpoint the
 * commands that copy what changed since the previous checkpoint to Redis,
 * each run once however many batches changed it: absolute values only
 * (a small run's whole state as one string: SET; or ZADD of members, HSET
 * of totals, EXPIRE, and the deletions of the trims since; HSETNX where
 * the first value wins), so that running a checkpoint twice changes
 * nothing. (An older one run again after a newer would put older strings
 * back: checkpoints run in order, a failed one retried before the next.)
 * The analyzer
 * runs it after the PostgreSQL commit of the batch carrying it (so of every
 * batch it covers) and before that batch's Kafka commit, which alone
 * commits offsets (docs/architecture.md, "One batch in the analyzer"):
 * Redis never holds state PostgreSQL has not committed, and Kafka offsets
 * never pass state Redis lacks.
 *
 * A checkpoint owns copies of everything it holds: once built it can be run
 * from another thread while the detectors go on with the next batch. It is
 * not thread-safe itself (one owner at a time). */
#ifndef ST_CHECKPOINT_H
#define ST_CHECKPOINT_H

#include <stddef.h>

#include "rpipe.h"

struct st_checkpoint;

struct st_checkpoint *st_checkpoint_new(void);
void st_checkpoint_destroy(struct st_checkpoint *c); /* accepts NULL */

/* Appends one command; argv strings are copied (formatted at once). Any
 * number of arguments. */
void st_checkpoint_cmd(struct st_checkpoint *c, int argc, const char **argv);

/* The same with each argument's length (argvlen[i] bytes, which may hold
 * NUL: a run's state as one string, runblob.h). */
void st_checkpoint_cmd_lens(struct st_checkpoint *c, int argc, const char **argv,
                            const size_t *argvlen);

/* Moves every command of src to the end of dst, in order; src is left
 * empty (workers.c joins the parts its threads built). */
void st_checkpoint_take(struct st_checkpoint *dst, struct st_checkpoint *src);

/* Commands held. */
size_t st_checkpoint_len(const struct st_checkpoint *c);

/* Drops every command (the object is reused for the next batch). */
void st_checkpoint_clear(struct st_checkpoint *c);

/* Sends every command in one pipelined round trip on p. The checkpoint is
 * kept: on failure (-1, errstr set) it is simply run again later. */
int st_checkpoint_exec(const struct st_checkpoint *c, struct st_rpipe *p, char *errstr,
                       size_t errsz);

#endif
