/* detect.h: the detector interface.
 *
 * A detector is one file in detectors/ behind a const struct
 * st_detector_ops. Its state lives in process memory, per run (runwin.c)
 * or, for what spans runs, in the registry (registry.c); Redis is the
 * durable copy of it, read only for what is not in memory and written
 * behind, a run's change one state.checkpoint_ms after it was made
 * (docs/architecture.md, "One batch in the analyzer").
 *
 * For each batch the analyzer calls prefetch() once per event, in
 * partition order: a detector queues on ctx->redis the loads of the state
 * the event needs that is not in memory (nothing, in steady state). One
 * pipelined round trip runs them all. Then feed() once per event, in the
 * same order: synchronous, in memory, no Redis command; findings go to
 * ctx->findings.
 *
 * Which events, and on which thread (workers.h), follows the detector's
 * scope: a per-run detector (ST_DETECT_PER_RUN) has one instance per
 * detection worker and sees only the events of that worker's partitions,
 * on that worker's thread and Redis connection, with ctx->registry NULL;
 * a global one (ST_DETECT_GLOBAL, the default) has one instance, sees
 * every event and runs on the main thread (which is also worker 0). An instance is only ever used
 * by one thread at a time; every call other than begin_batch, prefetch,
 * feed and end_batch of a batch is made by the main thread. Two instances
 * never write the same Redis key (keys name their detector and run), but
 * for the run index, which only ever gains members (runidx.h), and a run's
 * hash of small states, where each writes and deletes only its own field
 * (runhash.h; the parts' checkpoints run in one pipeline). end_batch()
 * appends to ctx->ckpt the commands that copy to Redis what changed before
 * batch ctx->pending_from and no checkpoint carried yet (checkpoint.h; a
 * per-run detector's changes wait one interval, state.checkpoint_ms, the
 * rolling write-back), and keeps the rest pending (all of it with
 * ctx->ckpt NULL); the analyzer runs each batch's checkpoint after its
 * PostgreSQL commit and before its Kafka commit, which commits the offsets
 * of the batch the checkpoint completes (the cut: every change of it and
 * of the batches before it is then in Redis), or none when the cut did not
 * move. A batch is retried,
 * or replayed after a crash, until its offsets are committed, so what feed
 * keeps must be what a redo computes again: members keyed by event (adding
 * one twice changes nothing), episodes that only grow.
 *
 * What destroys information -- trimming windows, dropping old episodes --
 * is done by after_commit(), which the analyzer runs only once the batch's
 * PostgreSQL transaction, its checkpoint and its Kafka offsets are all
 * committed, so no redo can need what it removes (docs/architecture.md,
 * "Why a redone batch changes nothing"). It trims relative to the newest
 * on-time event of the batch, keeping 2 x window + detect.lateness_s behind
 * it, records the deletions for the next checkpoint, and evicts state idle
 * for state.evict_s whose changes are in a checkpoint that ran: state with
 * writes pending (changes or deletions no checkpoint carried yet) is never
 * evicted, and a revoke (forget) comes only after a forced checkpoint.
 *
 * Events reach feed() per partition in event-time order (reorder.c), except
 * late ones, which come when they arrive with ctx->late set: a detector
 * re-evaluates what a late event changes and marks it late in the evidence.
 *
 * Redis keys (all built by st_detect_key; <run> is task and run id):
 *   <prefix>run:b:<n>               hash, one of ST_DETECT_RUN_BUCKETS, the
 *                                   bucket of every run whose
 *                                   st_runidx_hash modulo that count is n;
 *                                   field "<run>:<detector>" (the run index's
 *                                   member, ':', the detector): that
 *                                   detector's small state of the run, whole
 *                                   (members, episodes, buckets; runblob.h),
 *                                   instead of the three keys below, which a
 *                                   large one uses (runwin.c: never both at
 *                                   once, the switch is a MULTI); written
 *                                   with one HSET per bucket and checkpoint
 *                                   for all the runs it changed (runhash.h;
 *                                   st_detect_run_bucket_key_buf,
 *                                   st_detect_run_field_buf). The key's
 *                                   EXPIRE (state.ttl_s) is renewed by every
 *                                   write; a run's fields are deleted
 *                                   state.ttl_s after its index score by the
 *                                   partition's owner (runidx.h, the sweep)
 *   <prefix>run:h:<run>             hash, field <detector>: the same state
 *                                   as written before the buckets (up to
 *                                   session 11), one key per run: read when
 *                                   the bucket lacks the field, deleted by
 *                                   the run's next write (runwin.c;
 *                                   st_detect_run_hash_key_buf)
 *   <prefix><detector>:s:<run>      string, the same state as written
 *                                   before the hash (up to session 6): read
 *                                   when the hash lacks the field, deleted
 *                                   by the run's next write (runwin.c)
 *   <prefix><detector>:l:<run>      string, a large run's window as a log
 *                                   of frames appended to (runblob.h,
 *                                   runwin.c; volume_anomaly's request set)
 *   <prefix><detector>:w:<run>      sorted set, the same window as written
 *                                   before the log (up to session 7): read,
 *                                   deleted by the run's next write
 *   <prefix><detector>:eps:<run>    hash, a run's episodes (runwin.c)
 *   <prefix>volume_anomaly:b:<run>  hash, bytes out per tenth of a window
 *   <prefix>scope_drift:cred:<credential>  hash, the credential registry
 *   <prefix>credfp:<fingerprint>    string, "credential\x1fissued"
 *   <prefix>scope_drift:dest:<host> hash, "allow|deny:<platform>" -> first
 *                                   request (registry.c)
 *   <prefix>runs:<partition>:log    string, the runs whose state the
 *                                   keys above may hold, appended: records
 *                                   "<score> <run>\n", score the wall time
 *                                   (s) of the run's last EXPIRE, a run's
 *                                   newest record the one that counts
 *                                   (runidx.h; st_detect_index_log_key)
 *   <prefix>runs:<partition>        sorted set, the same as written up to
 *                                   session 20 (member <run>, score):
 *                                   read, never written, its entries
 *                                   removed as they age (runidx.h;
 *                                   st_detect_index_key)
 *   <prefix>runs:complete_since     string, the wall time (s) from which
 *                                   every state write above also wrote its
 *                                   index entry: 0 on a prefix first used
 *                                   with the index, the upgrade's time on
 *                                   one holding older state; the index is
 *                                   trusted state.ttl_s after it (runidx.h;
 *                                   st_detect_marker_key)
 *   <prefix>runs:moved_since        string, the wall time (s) the events
 *                                   topic last gained partitions: the
 *                                   sweep keeps the runs scored before it
 *                                   (runidx.c)
 *   <prefix>epoch:<topic>:<partition>  string, the partition's owner
 *                                   epoch: incremented by each analyzer
 *                                   assigned the partition, watched by
 *                                   every checkpoint (fence.h;
 *                                   st_detect_epoch_key). No TTL */
#ifndef ST_DETECT_H
#define ST_DETECT_H

#include <stdint.h>

#include "analyzer.h"
#include "checkpoint.h"
#include "event.h"
#include "findings.h"
#include "rpipe.h"

struct st_registry;
struct st_runhash;
struct st_runidx;
struct st_runkeys;

/* Counters the analyzer publishes as metrics. */
struct st_detect_stats {
    int64_t runs;      /* per-detector run states in memory */
    int64_t entries;   /* registry entries in memory */
    int64_t loads;     /* states read from Redis */
    int64_t evictions; /* states dropped from memory, idle */
    int64_t malformed; /* states Redis held that were not ours (ignored) */
};

/* Kafka offsets by partition (borrowed arrays of n entries). */
struct st_detect_offsets {
    const int32_t *parts;
    const int64_t *offsets;
    int n;
};

/* o's offset for partition, or -1 when o is NULL or does not name it. */
int64_t st_detect_offset_of(const struct st_detect_offsets *o, int32_t partition);

struct st_detect_ctx {
    struct st_rpipe *redis;       /* prefetch: loads queued here */
    struct st_checkpoint *ckpt;   /* end_batch: write-back appended here */
    /* end_batch: the small run states' writes, grouped by run and
     * appended to ckpt after every detector's end_batch (runhash.h); NULL:
     * a detector appends its own at the end of its end_batch */
    struct st_runhash *runhash;
    struct st_findings *findings;
    const struct st_analyzer_conf *conf;
    struct st_registry *registry; /* cross-run state (registry.h) */
    struct st_detect_stats *stats;
    /* the runs of each partition whose state Redis holds (runidx.h); NULL:
     * every run not in memory is loaded */
    struct st_runidx *runidx;
    /* the part's runs, one record each shared by its run windows
     * (runkeys.h); NULL: each window keeps its own */
    struct st_runkeys *runkeys;
    int32_t partition; /* prefetch, feed: the event's Kafka partition */
    int64_t offset;    /* feed: the event's Kafka offset (-1: unknown) */
    /* prefetch: each partition's committed offset as it was assigned
     * (NULL: none known). A load applies a run's pending trim (runblob.h's
     * trailer) when every event behind it lies below that offset: the
     * analyzer that wrote it trimmed the run after that commit. */
    const struct st_detect_offsets *resumed;
    /* after_commit of a forced flush whose commit took, the state leaving
     * memory next (a revoke, a stop, the end of --drain): the offsets that
     * commit took. A small run whose trim it allows, and whose trimmed
     * events all lie below them, is not written again: its string's
     * trailer makes a load trim it the same way. NULL otherwise. */
    const struct st_detect_offsets *final;
    /* prefetch, feed, end_batch: the number of the batch, which is that of
     * the checkpoint it carries; after_commit: the newest checkpoint that
     * ran and up to which Kafka took the offsets (the cut of the batch that
     * committed them: the trims of later batches wait, their state is not
     * evicted) */
    uint64_t seq;
    /* end_batch, the rolling write-back: a per-run detector writes what
     * became dirty in a batch before pending_from (main.c: the cut + 1,
     * the newest batch detected state.checkpoint_ms ago), and keeps the
     * rest pending; 0: everything dirty (a forced flush, and every batch
     * with state.checkpoint_ms=0). Writing more than asked is always safe
     * (registry.c writes everything: its writes are few) */
    uint64_t pending_from;
    /* after_commit: the batch whose checkpoint the changes it makes (the
     * trims' deletions) wait for, as if made in it: the next batch to be
     * detected */
    uint64_t dirty_seq;
    int64_t now_s; /* wall clock, for eviction (0: read the clock) */
    int late; /* the event being fed arrived after its partition's watermark */
    /* its time is the receive time (reorder.h): fed out of order, like a
     * late event, and never moves a run's newest time (no trim) */
    int skewed;
    /* end_batch: a run's trims may stay out of this checkpoint (fewer than
     * 64 things removed, the run not idle for state.evict_s, nothing
     * written after them that they would delete): the run stays dirty, so
     * it is never evicted with them pending. 0: every trim is sent (a
     * forced checkpoint before a revoke or at a stop, and
     * state.checkpoint_ms=0) */
    int hold_trims;
};

/* Where a detector's state lives, which decides the thread that runs it
 * (workers.h). */
enum st_detector_scope {
    /* Anything that spans runs (the registry, ctx->registry): run by the
     * main thread over every event of the batch, one instance. The
     * default, so that a detector that says nothing stays single-threaded. */
    ST_DETECT_GLOBAL = 0,
    /* Every piece of state keyed by one run (runwin.c, or none): one
     * instance per worker, fed only the events of its partitions; never
     * touches ctx->registry (NULL there). */
    ST_DETECT_PER_RUN = 1,
};

struct st_detector_ops {
    const char *name;
    int version;
    enum st_detector_scope scope;
    /* Returns the detector's state; NULL when it has none. */
    void *(*create)(const struct st_analyzer_conf *conf);
    void (*destroy)(void *state);
    /* Called before the batch's first prefetch with the number of events
     * it will feed. */
    void (*begin_batch)(void *state, size_t nevents);
    /* Queues the loads ev needs; NULL when the detector keeps no state.
     * ev lives until reset_batch. */
    void (*prefetch)(void *state, struct st_detect_ctx *ctx, const struct st_event *ev);
    void (*feed)(void *state, struct st_detect_ctx *ctx, const struct st_event *ev);
    /* Appends the write-back to ctx->ckpt: what became dirty before batch
     * ctx->pending_from (0: everything), more being safe; also called
     * between batches (no feed) to flush everything pending. NULL: no
     * state. */
    void (*end_batch)(void *state, struct st_detect_ctx *ctx);
    /* Trims and evicts, after the commits; NULL when there is nothing.
     * Called between batches (never between a batch's prefetch and its
     * end_batch), possibly after the next batch was detected. */
    void (*after_commit)(void *state, struct st_detect_ctx *ctx);
    /* Forgets the batch (after it is written, or before it is retried). */
    void (*reset_batch)(void *state);
    /* Forgets all state in memory (partitions revoked); NULL: none. */
    void (*forget)(void *state, struct st_detect_ctx *ctx);
    /* The names of the run windows it keeps (st_runwin_new), NULL-
     * terminated; NULL: none. Their fields of the run buckets are what
     * the sweep of the part that runs it deletes (runidx.h). */
    const char *const *run_states;
};

extern const struct st_detector_ops st_denial_burst_ops;
extern const struct st_detector_ops st_retry_across_paths_ops;
extern const struct st_detector_ops st_scope_drift_ops;
extern const struct st_detector_ops st_token_write_ops;
extern const struct st_detector_ops st_volume_anomaly_ops;
extern const struct st_detector_ops st_private_destination_ops;

struct st_buf;

/* NULL-terminated list of every detector. */
extern const struct st_detector_ops *const st_detectors[];

/* detect.enabled: "all", or detector names separated by commas (spaces
 * around a name allowed). Sets *off to the detectors left out (bit d for
 * st_detectors[d]). Returns 0, or -1 with err set: a name no detector
 * has, or no name at all. */
int st_detect_parse_enabled(const char *list, uint32_t *off, char *err, size_t errsz);

/* Joins a Redis key: conf->redis_prefix, detector, kind, task, run. The
 * parts are separated by ':' and the ids are length-prefixed so that no pair
 * of ids can collide. Returns a new string. */
char *st_detect_key(const struct st_analyzer_conf *conf, const char *detector,
                    const char *kind, const char *task_id, const char *run_id);

/* The same key written into b (emptied first), with no allocation once b
 * is large enough: the checkpoints name three keys per run. Returns
 * b->data, valid until b next changes. */
const char *st_detect_key_buf(struct st_buf *b, const struct st_analyzer_conf *conf,
                              const char *detector, const char *kind, const char *task_id,
                              const char *run_id);

/* scope_drift's allowlist field and member of a request: the bytes of
 * snprintf(field, 300, "%s:%.256s", deny ? "deny" : "allow", platform) and
 * snprintf(member, 600, "%s\x1f%s", source, event_id), truncation
 * included, without printf (it was 5% of the detect role's instructions;
 * test_fastfmt compares the two). */
void st_detect_dest_format(int deny, const char *platform, const char *source,
                           const char *event_id, char field[300], char member[600]);

/* The run part of a key, "<len>:<task>:<len>:<run>": the member of the
 * run index (runidx.h). Returns a new string. */
char *st_detect_run_member(const char *task_id, const char *run_id);

/* The "detector" part of the run hash's key: no detector may take it
 * (st_runwin_new refuses it) */
#define ST_DETECT_RUN_HASH "run"

/* A run's hash of the versions before the buckets (<prefix>run:h:<run>:
 * every detector's small state of the run) written into b like
 * st_detect_key_buf: read and deleted, never written (runwin.c). */
const char *st_detect_run_hash_key_buf(struct st_buf *b, const struct st_analyzer_conf *conf,
                                       const char *task_id, const char *run_id);

/* How many bucket hashes hold the small run states. A contract with the
 * state Redis holds: changing it moves runs to other buckets, where a
 * load would not find them. */
#define ST_DETECT_RUN_BUCKETS 64

/* The bucket of the run whose st_runidx_hash is hash, and its key
 * (<prefix>run:b:<n>) written into b. */
unsigned st_detect_run_bucket(uint64_t hash);
const char *st_detect_run_bucket_key_buf(struct st_buf *b, const struct st_analyzer_conf *conf,
                                         uint64_t hash);

/* The field of a detector's small state of a run in its bucket,
 * "<len>:<task>:<len>:<run>:<detector>", written into b; the run's part,
 * "<len>:<task>:<len>:<run>:", which every detector's field of the run
 * starts with, appended to b (runhash.c builds it once per run). */
void st_detect_run_field_prefix_add(struct st_buf *b, const char *task_id, const char *run_id);
const char *st_detect_run_field_buf(struct st_buf *b, const char *task_id, const char *run_id,
                                    const char *detector);

/* The run index of a partition: conf->redis_prefix "runs:" partition.
 * Returns a new string. */
char *st_detect_index_key(const struct st_analyzer_conf *conf, int32_t partition);
/* Its log: conf->redis_prefix "runs:" partition ":log". */
char *st_detect_index_log_key(const struct st_analyzer_conf *conf, int32_t partition);

/* The run index's completeness marker: conf->redis_prefix
 * "runs:complete_since". Returns a new string. */
char *st_detect_marker_key(const struct st_analyzer_conf *conf);

/* The owner epoch of a partition of the events topic: conf->redis_prefix
 * "epoch:" kafka.topic.events ":" partition (fence.h). Returns a new
 * string. */
char *st_detect_epoch_key(const struct st_analyzer_conf *conf, int32_t partition);

/* Whether key (len bytes, from Redis) is a run's state key: conf's prefix,
 * a name without ':', then ":s:", ":w:", ":l:", ":eps:", ":b:" or ":h:" and the run part
 * "<len>:<task>:<len>:<run>", lengths exact (the shape st_detect_key
 * gives those kinds); or a run bucket, "run:b:<n>". Registry and index
 * keys are not. */
int st_detect_is_state_key(const struct st_analyzer_conf *conf, const char *key, size_t len);

/* Whether a key's EXPIRE (state.ttl_s) is due in this checkpoint: when it
 * was never sent by this process (*last_s == 0), or a tenth of the TTL ago.
 * A key then expires after 0.9 to 1 x state.ttl_s of idleness, and a busy
 * run costs no EXPIRE per batch. Sets *last_s when due. */
int st_detect_expire_due(int64_t *last_s, const struct st_analyzer_conf *conf);

#endif
