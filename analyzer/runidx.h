/* runidx.h: per partition, the runs whose detector state Redis may hold,
 * so that a run never seen costs no Redis read (issue 11, item 1).
 *
 * Redis key (detect.h): <prefix>runs:<partition>:log, a string of
 * records "<score> <run>\n" appended, the run as in the state keys
 * ("<len>:<task>:<len>:<run>"), the score the wall time (s) at which a
 * checkpoint wrote the run's state with an EXPIRE; a run's newest record
 * is the one that counts. (Up to session 20 the index was the sorted set
 * <prefix>runs:<partition>, member the run, score the same: a ZADD per run
 * cost Redis as much as the run's state. The set is still read with the
 * log and its entries removed as they age; it is no longer written.) It
 * is read once per partition,
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
 * 2 x state.ttl_s are removed (in memory and from the set by
 * ZREMRANGEBYSCORE, once per partition every tenth of the TTL; from the
 * log by its compaction, st_runidx_compact, when about a quarter of its
 * records may go): their state expired at least a TTL before (docs/
 * architecture.md, "Why a redone batch changes nothing").
 *
 * The index is only trusted once it is known complete: Redis written by
 * an analyzer from before the index (or by any release without it, under
 * the same redis.prefix) holds state that no index entry names. The
 * marker <prefix>runs:complete_since (detect.h) holds the wall time (s)
 * from which every state write also wrote its entry; st_runidx_marker
 * reads it at start and, when it is absent, sets it once per prefix: 0
 * when a bounded SCAN finds no run state under the prefix (a fresh
 * deployment, trusted at once), the time now when it finds some (an
 * upgrade). Until state.ttl_s has passed since the marker, a run the
 * index does not hold is loaded as before the index (correct, slower);
 * afterwards it is new, with no read. Why state.ttl_s is enough: every
 * state key gets an EXPIRE of state.ttl_s whenever it is created by a
 * process (st_detect_expire_due: due when never sent) and at most every
 * tenth of the TTL while written, and no write clears a TTL (APPEND, HSET,
 * HDEL keep it; a large run's log rewritten whole is SET with EX); so a key written without an index entry
 * before the marker either was given no EXPIRE after it, and is gone
 * state.ttl_s after it, or was given one after it, by an analyzer that
 * writes index entries, and is then indexed (the entry goes before the
 * state in the same pipeline). This assumes that no analyzer without the
 * index writes under the prefix after the marker (all of them stopped
 * before the first new one starts, as a restart of all does, bar seconds)
 * and that the old release's state.ttl_s was not larger (docs/
 * architecture.md, "Upgrading to the run index").
 *
 * Two changes can make the index miss a run whose state Redis holds, and
 * both set the marker to now (the index untrusted for state.ttl_s, as
 * after an upgrade); st_runidx_check looks for them once per assignment,
 * per reconnection of any of the process's Redis connections, and every
 * CHECK_EVERY_S (10 s), never per event:
 * - Partitions added to the events topic: a task's events move to a
 *   partition whose index does not name its run. The count the consumer
 *   read from Kafka at its last assignment is compared with the one
 *   recorded in <prefix>runs:partitions (recorded when absent or lower;
 *   a lower count is an analyzer whose metadata is behind: ignored).
 * - A Redis that lost acknowledged writes (a crash inside its appendfsync
 *   second, a restored backup, a failover to a replica behind): every such
 *   loss comes with a new Redis process, so a new INFO server run_id. It
 *   is compared with the one this part last saw (then its memory of the
 *   index may name runs whose entry is gone, and a checkpoint built on it
 *   may have written their state with no entry) and with the one recorded
 *   in <prefix>runs:server (a restart while no analyzer ran, or one
 *   another analyzer saw first). Writes lost as a suffix of what Redis
 *   applied never leave state without its entry on their own (the entry
 *   goes first); the memory of a running analyzer does, hence: after a
 *   restart this part saw, every partition's index is read again (a
 *   reconnection to the same process lost nothing), and the marker is set
 *   to now once more when the
 *   checkpoints built before the check are in (st_runidx_committed), the
 *   index untrusted until then: a key written with no entry got its last
 *   EXPIRE before that, and is gone state.ttl_s after it unless written
 *   again, with its entry.
 * The marker set by one analyzer is seen by the others at their next
 * check (10 s at most). After its SET NX the marker only moves on, never
 * back (a check-and-set: WATCH, GET, MULTI, SET, EXEC): each later write
 * means "complete only from now on", so the later of two times holds, and
 * an analyzer whose clock is behind another's does not undo its move.
 *
 * Threading: one instance per detection part (workers.c), used by that
 * part's thread only, like its detectors. Partitions are those the part
 * sees; two parts may hold the same partition (a worker and the global
 * part): each loads and writes it, a second record of a run being
 * harmless. */
#ifndef ST_RUNIDX_H
#define ST_RUNIDX_H

#include <stdint.h>

#include "analyzer.h"
#include "checkpoint.h"
#include "fence.h"
#include "rpipe.h"

struct st_runidx;

struct st_runidx *st_runidx_new(const struct st_analyzer_conf *conf);
void st_runidx_destroy(struct st_runidx *x); /* accepts NULL */

/* Reads the marker of conf's prefix into *since and, when it is absent,
 * sets it (SET NX then GET: two analyzers starting at once agree) after
 * a SCAN for run state (st_detect_is_state_key) bounded to 10 s (past
 * that, state is assumed: the safe answer). Synchronous, on p with
 * nothing queued; logs what it did and whether the index is trusted.
 * Returns 0, or -1 with errstr set (Redis failed or holds a marker that
 * is not a time). */
int st_runidx_marker(struct st_rpipe *p, const struct st_analyzer_conf *conf,
                     int64_t *since, char *errstr, size_t errsz);

/* The marker's value (st_runidx_marker); until it is set (-1, the state
 * of a new index) the index is not trusted. */
void st_runidx_set_since(struct st_runidx *x, int64_t since);

/* Whether the index is trusted: state.ttl_s has passed since the marker,
 * as of the last st_runidx_begin or st_runidx_set_since. When it is not,
 * st_runidx_has holds every run. */
int st_runidx_trusted(const struct st_runidx *x);

/* The hash of a run (FNV-1a of task, 0x1f, run): also runwin's table hash,
 * so a run's is computed once. */
uint64_t st_runidx_hash(const char *task_id, const char *run_id);

/* The events topic's partition count as Kafka last told the consumer
 * (st_consumer_topic_partitions; <= 0: not known, nothing compared). A
 * change makes the next st_runidx_check check. */
void st_runidx_set_partitions(struct st_runidx *x, int32_t n);

/* Before the prefetch pass of batch seq (and its st_runidx_begin): when a
 * check is due -- the first
 * batch after st_runidx_new or st_runidx_forget (an assignment), a Redis
 * connection of the process made again since the last check
 * (st_rpipe_reconnects), a new partition count, or CHECK_EVERY_S (10 s)
 * since the last one -- runs it first, synchronously on p (nothing queued):
 * one round trip (INFO server, then GET of the server key, the marker and
 * the partitions key), a second one only to write what changed. The marker
 * is set to now when Redis's run_id differs from the one this part last
 * saw or the one recorded, the count differs from the one recorded, or the
 * marker is gone (never back: a later time stays); the run_id and the
 * count are then recorded. After a
 * restart this part saw (its own run_id changed), every partition is read
 * again and the marker is set to now once more when the checkpoint of batch
 * seq is in (st_runidx_committed), the index untrusted until then.
 * Returns 0, or -1 with errstr set when Redis failed or refused (a
 * per-batch error: the batch is tried again). */
int st_runidx_check(struct st_runidx *x, struct st_rpipe *p, uint64_t seq, char *errstr,
                    size_t errsz);

/* Starts a batch's prefetch pass (before its st_runidx_queue_load); reads
 * the clock for st_runidx_trusted. */
void st_runidx_begin(struct st_runidx *x);

/* Every checkpoint up to seq is in Redis: when a restart was seen (see
 * st_runidx_check) and seq has reached the batch of that check, the marker
 * is set to now unless it holds a later time already (set by an analyzer
 * whose clock is ahead), synchronously on p (nothing queued), and the index
 * is trusted again state.ttl_s after the marker. Returns 0, or -1 when Redis failed
 * (logged; tried again at the next call). */
int st_runidx_committed(struct st_runidx *x, struct st_rpipe *p, uint64_t seq);

/* Queues on p the load of partition's index unless it is loaded or
 * queued. Returns 1 when queued: the caller runs p before any lookup. A
 * load that fails leaves the partition unloaded (queued again next
 * batch). */
int st_runidx_queue_load(struct st_runidx *x, struct st_rpipe *p, int32_t partition);

/* A reply of the sorted set an older release wrote (ZRANGE ...
 * WITHSCORES): its runs join the index, which is then loaded (a load reads
 * the set, then the log: st_runidx_load_log). Members that are not a run
 * are ignored; returns -1 when the reply is not an array of pairs (the
 * load is then tried again). Public for tests. */
int st_runidx_load_reply(struct st_runidx *x, int32_t partition, const redisReply *rep);

/* The log's part of a partition's load (GET of <prefix>runs:<partition>:log):
 * each record's run joins the index at its newest score, and the
 * partition is then loaded. A record that is not a run's is skipped (and
 * logged); returns how many were. Called by the load's callback; public
 * for tests. */
size_t st_runidx_load_log(struct st_runidx *x, int32_t partition, const char *log, size_t len);

/* Before a batch's prefetch (synchronous on p, nothing queued): compacts
 * the log of each partition whose old entries a flush removed from memory
 * (st_runidx_flush, every tenth of state.ttl_s): a check-and-set (WATCH,
 * GET, then MULTI, SET, EXEC) writes back each run's newest record, those
 * not older than that flush's cutoff, in place of the log; an APPEND by
 * anyone in between makes EXEC not run, and the log is read again. A log
 * with nothing to drop is left alone. Fenced by the partition's owner
 * epoch when fence is given (fence.h): the epoch is watched and read with
 * the log, and a partition whose epoch is no longer ours (or that fence
 * does not hold) is left to its new owner, its compaction still due. NULL:
 * not fenced (tests). Returns 0, or -1 with errstr set (a per-batch error:
 * the batch is tried again). */
int st_runidx_compact(struct st_runidx *x, struct st_rpipe *p, struct st_fence *fence,
                      char *errstr, size_t errsz);

/* Tests only: fn(partition, arg) is called by st_runidx_compact after each
 * read of a partition's log and before its rewrite, while the WATCH holds
 * (what another analyzer's APPEND would land between); NULL: none. */
void st_runidx_on_compact_read(struct st_runidx *x, void (*fn)(int32_t partition, void *arg),
                               void *arg);

/* Whether Redis may hold state of the run (hash h) of partition: 1 when
 * the index holds it, when the partition's index is not loaded (then
 * only a load can tell), or when the index is not trusted. */
int st_runidx_has(const struct st_runidx *x, int32_t partition, uint64_t h);

/* The run's state goes into the checkpoint being built, with an EXPIRE
 * when expired is set: queues the index entry's write when the index
 * does not hold the run, or when expired and its score is older than now
 * (wall seconds). The ids are copied when a write is queued. */
void st_runidx_note(struct st_runidx *x, int32_t partition, const char *task_id,
                    const char *run_id, uint64_t h, int expired, int64_t now);

/* The sweep of expired state (detect.h, the run buckets): the names of
 * the run windows whose fields of a run this part deletes (its detectors'
 * run_states; not copied: they must outlive x); none: it sweeps nothing.
 * A part deletes only the fields it alone writes (the workers their
 * per-run detectors', the global part scope_drift's windows), judged by
 * its own memory of the scores. */
void st_runidx_set_sweep(struct st_runidx *x, const char *const *detectors, int n);

/* Queues on p the read of every loaded partition whose sweep is due (a
 * tenth of state.ttl_s since its last, or at once when that one was cut
 * at its limit): the runs whose newest score (over the log and the set:
 * the whole index is read) is below now - state.ttl_s and not below where
 * the last sweep ended (now - 2 x state.ttl_s after an assignment), the
 * oldest first, at most a limit of them. The next st_runidx_flush deletes
 * this part's fields of those whose score its memory still holds below
 * that end: state.ttl_s after the run's last write with its EXPIRE due,
 * as the EXPIRE of a key per run did. Every partition the part holds, not
 * only the batch's: a partition without events is swept all the same
 * while batches come. Returns 1 when queued: the caller runs p. A read
 * that fails is queued again. */
int st_runidx_queue_sweeps(struct st_runidx *x, struct st_rpipe *p, int64_t now);

/* Appends to ckpt the writes queued (one APPEND to the log per
 * partition), the deletions of a sweep read (one HDEL per bucket) and,
 * when due, each partition's removal of entries older than 2 x
 * state.ttl_s from the set (its log's compaction is then due). */
void st_runidx_flush(struct st_runidx *x, struct st_checkpoint *ckpt, int64_t now);

/* Forgets every partition (revoked): each is loaded again when next seen,
 * and the next st_runidx_check checks. */
void st_runidx_forget(struct st_runidx *x);

/* The number of st_runidx_flush and st_runidx_forget calls so far, from
 * 1: a caller that noted a run in the same number may skip noting it
 * again with an expiry no later (runwin.c notes a run once for all its
 * windows). */
uint64_t st_runidx_flushes(const struct st_runidx *x);

/* Runs held in memory, all partitions. */
int64_t st_runidx_size(const struct st_runidx *x);

#endif
