/* checkpoint.h: the Redis commands that make Redis hold the detectors'
 * state, detached from the detectors.
 *
 * The detectors keep their state in process memory (runwin.c, registry.c)
 * and, at the end of every batch, append to its checkpoint the commands
 * that copy to Redis what changed in the batches up to its cut (the newest
 * batch detected state.checkpoint_ms ago; the batch itself with 0: the
 * rolling write-back, detect.h) and no checkpoint carried yet, each run
 * once however many batches changed it: absolute values only
 * (a small run's whole state as one string, its field of the run's hash:
 * HSET, one per run for all its detectors, runhash.h; or APPEND of
 * members and trims to a large run's log, HSET of totals, EXPIRE, and the
 * deletions of the trims since; HSETNX where
 * the first value wins), so that running a checkpoint twice changes
 * nothing (an APPEND is no absolute value, but a log holding one
 * checkpoint's frames twice loads as once: runblob.h). (An older one
 * run again after a newer would put older strings back: checkpoints run
 * in order, a failed one retried before the next.)
 * The analyzer
 * runs it after the PostgreSQL commit of its batch (so of every batch
 * whose changes it holds) and before that batch's Kafka commit, which
 * commits the offsets of the cut (docs/architecture.md, "One batch in the
 * analyzer"): Redis never holds state PostgreSQL has not committed, and
 * Kafka offsets never pass state Redis lacks.
 *
 * A checkpoint owns copies of everything it holds: once built it can be run
 * from another thread while the detectors go on with the next batch. It is
 * not thread-safe itself (one owner at a time). */
#ifndef ST_CHECKPOINT_H
#define ST_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

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

/* Appends one command already formatted: b's bytes from start on (the
 * caller wrote its head right before its arguments, in room it left at
 * the buffer's start: runhash.c's HSET of a bucket, thousands of fields).
 * A command of 64 KB or more moves in as b's buffer, no copy (b gets an
 * emptied spare buffer back, as st_checkpoint_take gives); a smaller one
 * is copied. b is left empty either way. */
void st_checkpoint_cmd_take(struct st_checkpoint *c, struct st_buf *b, size_t start);

/* Moves every command of src to the end of dst, in order; src is left
 * empty (workers.c joins the parts its threads built). A part of 64 KB or
 * more moves as a buffer (no copy) and src gets an emptied buffer of dst's
 * back; a smaller one is copied. */
void st_checkpoint_take(struct st_checkpoint *dst, struct st_checkpoint *src);

/* Commands held. */
size_t st_checkpoint_len(const struct st_checkpoint *c);

/* Drops every command (the object is reused for the next batch). */
void st_checkpoint_clear(struct st_checkpoint *c);

/* Sends every command in one pipelined round trip on p, unfenced (the
 * analyzer runs its checkpoints fenced, st_fence_exec; tests run this).
 * The checkpoint is kept: on failure (-1, errstr set) it is simply run
 * again later. */
int st_checkpoint_exec(const struct st_checkpoint *c, struct st_rpipe *p, char *errstr,
                       size_t errsz);

/* Queues every command on p (not sent; borrowed: c must not change until
 * the next st_rpipe_exec or st_rpipe_discard of p). unwrap: leaves out the
 * MULTI and EXEC commands c holds (runwin.c's layout switch), for a caller
 * that runs the whole checkpoint in one MULTI (fence.h: Redis refuses a
 * MULTI inside a MULTI). */
void st_checkpoint_queue(const struct st_checkpoint *c, struct st_rpipe *p, int unwrap);

/* Queues, as st_checkpoint_queue, the commands from index from on: at most
 * max of them and, once max_bytes are queued, no more; past those limits
 * only to reach the EXEC of a MULTI begun among them (a transaction c
 * holds is never split). At least one command when any is left. Returns
 * the index of the first command not queued (st_checkpoint_len(c) when
 * none is left). */
size_t st_checkpoint_queue_part(const struct st_checkpoint *c, struct st_rpipe *p,
                                size_t from, size_t max, size_t max_bytes, int unwrap);

/* A checkpoint with no batch behind it (main.c's detectors_flush, between
 * batches): the steps are the caller's, the order is this. */
struct st_checkpoint_flush_ops {
    /* Appends to c every change of the detectors no checkpoint carried yet,
     * as checkpoint seq; all: the trims held back too (a forced flush). */
    void (*end_batch)(void *arg, struct st_checkpoint *c, uint64_t seq, int all);
    /* Runs c in Redis. retry: until it is in (0), or -1 when asked to stop
     * meanwhile; else once, -1 on a failure (the caller logs it). */
    int (*exec)(void *arg, const struct st_checkpoint *c, int retry);
    /* Commits what PostgreSQL and Redis now hold (the Kafka offsets): 0
     * done, 1 not (the offsets wait for the next one), -1 asked to stop. */
    int (*commit)(void *arg);
    /* Every checkpoint up to seq is committed: the detectors trim and
     * evict (st_detect_ops.after_commit). */
    void (*after_commit)(void *arg, uint64_t seq);
};

/* Builds in c (cleared first) every change not yet written, numbered
 * *ck_seq + 1; when there is none and every checkpoint is committed, only
 * after_commit. Else runs it (retried), commits, sets *committed_seq to
 * *ck_seq when the commit took, and calls after_commit. Forced, and the
 * commit taken: the trims that commit allowed go too, in a second,
 * deletions-only checkpoint (nothing for Kafka to take; tried once, a
 * failure leaves them to state.ttl_s as a crash would): the state may
 * leave memory next (a revoke forgets it, a stop or the end of --drain
 * exits), and Redis must not keep what memory dropped. *ck_seq counts the
 * checkpoints built (one or two); *committed_seq the newest committed. c
 * is left empty. Returns 0, or -1 when exec or commit was asked to stop
 * (offsets not committed: the batches are redone, as after a crash). */
int st_checkpoint_flush(struct st_checkpoint *c, const struct st_checkpoint_flush_ops *ops,
                        void *arg, uint64_t *ck_seq, uint64_t *committed_seq, int force);

#endif
