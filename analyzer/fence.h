/* fence.h: owner epochs that keep an analyzer which lost its partitions
 * from writing detector state to Redis.
 *
 * Redis holds, per partition of the events topic, an owner epoch
 * (st_detect_epoch_key: <prefix>epoch:<topic>:<partition>, a counter that
 * only grows). An analyzer that is assigned a partition increments it
 * (INCR) before it reads any state of the partition, and remembers the
 * value it got. Every checkpoint then runs as a transaction fenced by
 * those values (st_fence_exec): WATCH the epochs of every partition held
 * and read them (one round trip); if one differs from ours, another
 * analyzer was assigned the partition since, and the checkpoint is
 * refused; else MULTI, the checkpoint's commands, EXEC (a second round
 * trip), which Redis does not run (a nil reply) when an epoch was
 * incremented between the read and the EXEC. A large checkpoint is
 * several such transactions in order, each fenced (fence.c, CHUNK_CMDS:
 * Redis answers a transaction only once it ran all of it). So a checkpoint of an
 * analyzer whose assignment was lost never lands after the new owner's
 * INCR, hence never after any state the new owner wrote (it writes only
 * after its INCR); one that landed before that INCR is read by the new
 * owner, like a checkpoint followed by a crash (docs/architecture.md,
 * "One batch in the analyzer").
 *
 * A refusal is fatal for the process: the assignment is lost, the
 * analyzer stops with status 1 as after a crash, and the new owner redoes
 * what it did not commit. It is sticky (st_fence_lost).
 *
 * Every partition held is watched, not only those whose runs a checkpoint
 * writes: per-run state keys do not name their partition, and the
 * registry's state (scope_drift, token_write) spans partitions. A lost
 * assignment is lost whole (librdkafka), so this refuses nothing an exact
 * set would have let through.
 *
 * Threads: st_fence_claim and st_fence_release on the main thread (the
 * rebalance callbacks); st_fence_exec on the store's committer or, with no
 * batch in flight, the main thread, each on its own connection; the table
 * of epochs is under a lock. */
#ifndef ST_FENCE_H
#define ST_FENCE_H

#include <stddef.h>
#include <stdint.h>

#include "analyzer.h"
#include "checkpoint.h"
#include "rpipe.h"

struct st_fence;

/* conf's redis.prefix and kafka.topic.events name the keys; conf must
 * outlive the fence. stall_ms (fault.stall_checkpoint_ms, tests only): each
 * st_fence_exec sleeps this long between its fence read and its EXEC. */
struct st_fence *st_fence_new(const struct st_analyzer_conf *conf, int64_t stall_ms);
void st_fence_destroy(struct st_fence *f); /* accepts NULL */

/* Takes the n partitions: INCR of each one's epoch in one round trip on p,
 * the values kept. Before any state of them is read. Returns 0, or -1 with
 * errstr set (nothing kept: the caller retries). */
int st_fence_claim(struct st_fence *f, struct st_rpipe *p, const int32_t *parts, int n,
                   char *errstr, size_t errsz);

/* Gives the partition up (revoked, after its forced checkpoint): no later
 * checkpoint watches it. */
void st_fence_release(struct st_fence *f, int32_t partition);

/* Our epoch of partition (what our INCR got) in *epoch: 0, or -1 when we
 * do not hold it. Thread-safe (a detection worker asks: the run index's
 * compaction, runidx.h). */
int st_fence_epoch(struct st_fence *f, int32_t partition, int64_t *epoch);

/* st_fence_exec's result when the assignment is lost. */
#define ST_FENCE_LOST 1

/* Runs checkpoint c fenced, on p (see above): 0 written; -1 Redis failed
 * (errstr set; its first transactions may have landed, the rest not: run
 * it again, it is idempotent); ST_FENCE_LOST another analyzer owns a
 * partition we hold (or none is held: a checkpoint with no partition has
 * no owner), or the fence was lost before: nothing more written (the
 * transactions before the refusal landed before the new owner's INCR),
 * errstr set and logged once as an error; the caller stops. An empty
 * checkpoint is not sent (0, no round trip). A MULTI/EXEC pair inside c
 * (runwin.c's layout switch) is left out, never split between two
 * transactions: each transaction is one already. */
int st_fence_exec(struct st_fence *f, struct st_rpipe *p, const struct st_checkpoint *c,
                  char *errstr, size_t errsz);

/* 1 once a checkpoint was refused (any thread). */
int st_fence_lost(struct st_fence *f);

#endif
