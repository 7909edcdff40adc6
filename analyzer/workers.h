/* workers.h: the detection stage, spread over threads (issue 11, item 3).
 *
 * Owns every detector instance. A detector whose state is all keyed by a
 * run (ST_DETECT_PER_RUN, detect.h) has one instance per worker, and
 * worker w is fed only the released events whose partition % K == w
 * (K = detect.workers): a task is keyed to one partition, so all the
 * events of a run reach one worker, in the order the reorder buffer
 * released them. A global detector (ST_DETECT_GLOBAL: it uses the registry,
 * which spans partitions) has one instance, fed every event of the batch
 * in release order by the calling thread (after its worker 0 part) while
 * the other workers run, so the registry stays single-threaded and a
 * batch's findings do not depend on K. Each worker has its own Redis
 * connection for its prefetch, its own st_detect_stats and its own
 * findings and checkpoint part; once every
 * part is done they are joined into the batch's, in a fixed order (worker
 * 0 .. K-1, then the global part). Their Redis keys are disjoint: a run's
 * keys are built from its detector's name and run (detect.h), and the
 * global detectors' names (scope_drift, scope_drift_deny, credfp) are no
 * per-run detector's. The one exception is the run index of a partition
 * (runidx.h): each part keeps its own for the partitions it sees, reads it
 * once after assignment, before its first prefetch of the partition, and
 * writes its entries at the head of its own checkpoint part, before the
 * state they cover (a record of a run another part wrote only moves its
 * score), and compacts its log by a check-and-set that does not run when
 * the other part appended meanwhile.
 *
 * A batch is two hand-offs per worker: the prefetch round trip, then --
 * only once every part's Redis answered -- feed and end_batch. Nothing is
 * fed while any part's load failed, exactly as with one thread: a part
 * that fed would have marked its members saved in a checkpoint that the
 * retry then drops. A failure anywhere fails the batch's detection, which
 * the caller retries (every instance is reset first).
 *
 * Threading: every function here is called by one thread, the analyzer's
 * main thread, which is also worker 0 (the global part is cheap: on a
 * denial stream a seventh of the detection CPU, so a main thread that only
 * waited for K threads would leave a core idle). Workers 1 .. K-1 are
 * threads started by st_workers_new; they run only inside
 * st_workers_detect, st_workers_parse (the batch's parse, split the
 * same way: see there), st_workers_end_batch, st_workers_after_commit
 * and st_workers_forget (each part's own checkpoint part, trims and
 * evictions, between batches; its state freed, at a revoke)
 * and are parked (waiting on a condition variable) at
 * every other time, so the other calls use their instances with no lock,
 * and what one side wrote is seen by the other through the hand-off's
 * mutex. With K == 1 there is no thread: the single-threaded analyzer. No
 * lock is taken per event. */
#ifndef ST_WORKERS_H
#define ST_WORKERS_H

#include <stddef.h>
#include <stdint.h>

#include <librdkafka/rdkafka.h>

#include "analyzer.h"
#include "checkpoint.h"
#include "detect.h"
#include "event.h"
#include "fence.h"
#include "findings.h"
#include "metrics.h"
#include "reorder.h"
#include "rpipe.h"

struct st_registry;

/* What the stage uses and does not own. */
struct st_workers_conf {
    const struct st_analyzer_conf *conf; /* detect.workers, redis.*: K and connections */
    struct st_registry *registry;        /* the global detectors' */
    struct st_rpipe *redis;              /* the global part's prefetch connection */
    struct st_metrics *metrics;          /* per-worker series are added here */
    struct st_metric *redis_s, *redis_err; /* prefetch round trip; failures */
    struct st_fence *fence; /* owner epochs (the run index's compaction); NULL: none */
};

struct st_workers;

/* Creates every detector instance, connects each worker to Redis, reads
 * (or sets) the run index's marker on wc->redis (st_runidx_marker: a SCAN
 * of the prefix on its first use) and starts the K - 1 threads. Returns
 * NULL with errstr set (a connection or the marker failed). */
struct st_workers *st_workers_new(const struct st_workers_conf *wc, char *errstr,
                                  size_t errsz);
/* Stops and joins the threads, destroys every instance. Accepts NULL. */
void st_workers_destroy(struct st_workers *w);
/* Stops and joins the threads and frees nothing: for a process about to
 * exit, whose detectors' state is written (main.c: LEAVE_STATE_AT_EXIT).
 * w is of no further use. Accepts NULL. */
void st_workers_quit(struct st_workers *w);

/* Detects the nrel released events (they must live until the next
 * st_workers_reset: the detectors hold pointers into them): findings
 * appended to *findings, to ckpt (checkpoint number seq) the write-back of
 * what changed in batches before pending_from (the rolling write-back,
 * ctx->pending_from in detect.h; 0: everything changed); the rest stay
 * pending in the detectors for a later one. ckpt NULL: nothing written
 * (numbered seq still: its trims wait for the commit of a checkpoint
 * numbered seq or later).
 * Every instance is reset first. Returns 0, or -1 with errstr when a
 * prefetch round trip failed (nothing was fed; simply call again). */
int st_workers_detect(struct st_workers *w, const struct st_reorder_item *rel, size_t nrel,
                      uint64_t seq, uint64_t pending_from, struct st_findings *findings,
                      struct st_checkpoint *ckpt,
                      char *errstr, size_t errsz);

/* One message's parse (st_workers_parse): rc 0 and ev, which the caller
 * now owns (st_event_fini), or rc -1 and rej, the refusal. */
struct st_parsed {
    int rc;
    union {
        struct st_event ev;
        struct st_reject rej;
    } u;
};

/* Parses (st_event_read, each worker with its own reader) the payload of each of msgs[0..n) into
 * out[i]: worker w of K the messages [w n / K, (w + 1) n / K) -- equal
 * shares, not detection's split by partition --, worker 0 being the
 * caller, the others their threads, all at once; returns when every message is parsed. Serial work that depends
 * on the messages' order (dead-letter, staging, the reorder buffer) stays
 * the caller's, so the result is what parsing the messages one after the
 * other in the caller would give. The messages are only read; an event
 * parsed on another thread is the caller's like any other (its arena may
 * be destroyed on any thread: arena.h). The parse touches no shared
 * mutable state (common/event.c, common/json.c: no cJSON hooks, no static
 * buffer; the arenas' block cache is per thread). Workers must be parked
 * (any time but inside st_workers_detect). With K == 1 the caller parses
 * them all. Cannot fail: a refusal is a per-message result. */
void st_workers_parse(struct st_workers *w, rd_kafka_message_t *const *msgs, size_t n,
                      struct st_parsed *out);

/* The same operations for every instance and the registry (detect.h),
 * workers parked: */
void st_workers_reset(struct st_workers *w); /* reset_batch */
/* end_batch between batches (no feed), each part on its own thread:
 * every change pending into ckpt, the parts joined in st_workers_detect's
 * order;
 * all: the trims too, even those held while few (ctx->hold_trims: before
 * a revoke forgets the state, and at a stop) */
void st_workers_end_batch(struct st_workers *w, struct st_checkpoint *ckpt, uint64_t seq,
                          int all);
/* after_commit, each part on its own thread: every checkpoint up to seq ran and Kafka took the offsets
 * up to it; the trims' deletions wait for the checkpoint of batch
 * dirty_seq (the next one detected); final: a forced flush's committed
 * offsets, the state leaving memory next (detect.h), else NULL */
void st_workers_after_commit(struct st_workers *w, uint64_t seq, uint64_t dirty_seq,
                             const struct st_detect_offsets *final);
/* The partition's committed offset as assigned (main.c's on_resume); a
 * forced flush's commit (after_commit's final) updates them too. Loads
 * apply a pending trim whose events all lie below it (detect.h). */
void st_workers_resumed(struct st_workers *w, int32_t partition, int64_t offset);
/* forget, each part on its own thread (partitions revoked: every state
 * read again from Redis when next needed) */
void st_workers_forget(struct st_workers *w);

/* The events topic's partition count (st_consumer_topic_partitions), for
 * every part's run index (st_runidx_set_partitions). Workers parked. */
void st_workers_set_partitions(struct st_workers *w, int32_t n);

/* The sum of every part's counters. */
void st_workers_stats(const struct st_workers *w, struct st_detect_stats *sum);

/* K; the events worker i (0 <= i < K) has fed since start; the CPU time
 * worker i (K: the global part) spent in its batches' prefetch and feed,
 * Redis replies included. */
int st_workers_count(const struct st_workers *w);
int64_t st_workers_events(const struct st_workers *w, int i);
int64_t st_workers_cpu_us(const struct st_workers *w, int i);

/* The caller's time in st_workers_detect since start, and of it the time
 * it waited for the other workers once its own part (worker 0, then the
 * global detectors) was done. */
void st_workers_times(const struct st_workers *w, int64_t *detect_us, int64_t *wait_us);

/* Redis commands sent on the workers' own connections (not the global
 * part's, which is the caller's). */
unsigned long st_workers_redis_sent(const struct st_workers *w);

#endif
