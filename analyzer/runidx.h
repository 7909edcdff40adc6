/* runidx.h: per partition, the runs whose detector state Redis may hold,
 * so that a run never seen costs no Redis read (issue 11, item 1).
 *
 * Redis key (detect.h): <prefix>runs:<partition>, a sorted set whose
 * member is a run ("<len>:<task>:<len>:<run>", the run part of the state
 * keys) and whose score is the wall time (s) at which a checkpoint last
 * wrote the run's state with an EXPIRE. It is read once per partition,
 * the first time a batch holds an event of it after assignment (start,
 * rebalance): st_runidx_queue_loads, before that batch's prefetch. Then a
 * run not in memory is loaded only when the index holds it; otherwise it
 * is new and starts empty, with no read.
 *
 * In memory a partition's index is a set of 64-bit hashes of the run
 * (st_runidx_hash) with the score: two runs with the same hash only cost
 * the second one a load that finds nothing (safe: an empty load is what a
 * new run starts with), never a lost state.
 *
 * Writes go into the batch's checkpoint, BEFORE the state they cover
 * (st_runidx_flush is called with the part's checkpoint still empty, the
 * detectors' commands are appended after): Redis applies one connection's
 * pipeline in order, so a crash mid-checkpoint leaves at worst an index
 * entry without state (a load that finds nothing), never state without an
 * entry (state a restart would not read). A run's entry is written when
 * its state is first written by this process and again whenever one of
 * its keys gets an EXPIRE (st_detect_expire_due): the score is then never
 * older than the newest EXPIRE of any of its keys. Entries older than
 * 2 x state.ttl_s are removed (ZREMRANGEBYSCORE, once per partition every
 * tenth of the TTL): their state expired at least a TTL before (docs/
 * architecture.md, "Why a redone batch changes nothing").
 *
 * Threading: one instance per detection part (workers.c), used by that
 * part's thread only, like its detectors. Partitions are those the part
 * sees; two parts may hold the same partition (a worker and the global
 * part): each loads and writes it, ZADD of the same member being
 * harmless. */
#ifndef ST_RUNIDX_H
#define ST_RUNIDX_H

#include <stdint.h>

#include "analyzer.h"
#include "checkpoint.h"
#include "rpipe.h"

struct st_runidx;

struct st_runidx *st_runidx_new(const struct st_analyzer_conf *conf);
void st_runidx_destroy(struct st_runidx *x); /* accepts NULL */

/* The hash of a run (FNV-1a of task, 0x1f, run): also runwin's table hash,
 * so a run's is computed once. */
uint64_t st_runidx_hash(const char *task_id, const char *run_id);

/* Starts a batch's prefetch pass (before its st_runidx_queue_load). */
void st_runidx_begin(struct st_runidx *x);

/* Queues on p the load of partition's index unless it is loaded or
 * queued. Returns 1 when queued: the caller runs p before any lookup. A
 * load that fails leaves the partition unloaded (queued again next
 * batch). */
int st_runidx_queue_load(struct st_runidx *x, struct st_rpipe *p, int32_t partition);

/* The reply of a partition's load (ZRANGE ... WITHSCORES): its runs
 * join the index, which is then loaded. Members that are not a run are
 * ignored; returns -1 when the reply is not an array of pairs (the load
 * is then tried again). Called by the load's callback; public for tests. */
int st_runidx_load_reply(struct st_runidx *x, int32_t partition, const redisReply *rep);

/* Whether Redis may hold state of the run (hash h) of partition: 1 when
 * the index holds it, or when the partition's index is not loaded (then
 * only a load can tell). */
int st_runidx_has(const struct st_runidx *x, int32_t partition, uint64_t h);

/* The run's state goes into the checkpoint being built, with an EXPIRE
 * when expired is set: queues the index entry's write when the index
 * does not hold the run, or when expired and its score is older than now
 * (wall seconds). The ids are copied when a write is queued. */
void st_runidx_note(struct st_runidx *x, int32_t partition, const char *task_id,
                    const char *run_id, uint64_t h, int expired, int64_t now);

/* Appends to ckpt the writes queued (one ZADD per partition) and, when
 * due, each partition's sweep of old entries. */
void st_runidx_flush(struct st_runidx *x, struct st_checkpoint *ckpt, int64_t now);

/* Forgets every partition (revoked): each is loaded again when next seen. */
void st_runidx_forget(struct st_runidx *x);

/* Runs held in memory, all partitions. */
int64_t st_runidx_size(const struct st_runidx *x);

#endif
