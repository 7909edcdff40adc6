/* runwin.h: per-run event-time windows in process memory, checkpointed to
 * Redis, shared by the windowed detectors (denial_burst,
 * retry_across_paths, volume_anomaly, the token_deny loop of scope_drift).
 *
 * A run's window is an array of members sorted by event time (member:
 * source, event id and a detector-chosen payload, so that adding it twice
 * is a no-op). Feeding an event adds it and hands the detector's callback,
 * at once, the window ending at the event -- or, for a late event, every
 * window that holds it. What no window can reach any more is trimmed after
 * the batch is committed.
 *
 * An episode is a run of overlapping windows that met the detector's
 * condition: one finding. Its id is derived from the member that opened it,
 * so the same events give the same finding in any process.
 *
 * A run's state is owned by the partition its task is keyed to, so one
 * analyzer holds it at a time. Redis is its durable copy (keys: detect.h;
 * a small state as one string rewritten whole, a large one as a log of
 * members appended to and hashes written incrementally: runwin.c):
 * loaded by st_runwin_prefetch when the run is not in memory (after a
 * restart, a rebalance or an eviction) and its partition's run index
 * (ctx->runidx, runidx.h) says Redis holds it -- a run never written
 * starts empty with no read -- written back by
 * st_runwin_end_batch into the batch's checkpoint (checkpoint.h). A run
 * not fed for state.evict_s seconds, whose changes are in a checkpoint that
 * ran, is dropped from memory by st_runwin_after_commit.
 *
 * Threading: one thread (the detecting one) calls everything here; a
 * checkpoint, once built, owns its copies. */
#ifndef ST_RUNWIN_H
#define ST_RUNWIN_H

#include <stddef.h>
#include <stdint.h>

#include "detect.h"

struct st_runwin_member {
    int64_t ts_us;
    const char *key;     /* "source\x1fevent_id\x1fpayload": the whole member */
    const char *payload; /* its end of key (NUL-terminated) */
    /* marked members at or before this one in its run, modulo 2^32
     * (st_runwin_marked: the count in a range is a difference; runwin.c's
     * own) */
    uint32_t nmarked;
    uint16_t klen;    /* strlen(key), UINT16_MAX from there on (runwin.c's own) */
    uint16_t src_len; /* the source's bytes at key's start (st_runwin_member_source) */
    uint16_t id_len;  /* the event id's bytes after it and its \x1f */
    uint8_t marked;   /* the detector's mark of the payload (st_runwin_set_mark) */
    uint8_t saved;    /* in a checkpoint already (runwin.c's own) */
};

/* A member's source and event id: *len bytes at the pointer returned, not
 * NUL-terminated (parts of its key, which is held once). */
static inline const char *st_runwin_member_source(const struct st_runwin_member *m,
                                                  size_t *len)
{
    *len = m->src_len;
    return m->key;
}

static inline const char *st_runwin_member_event_id(const struct st_runwin_member *m,
                                                    size_t *len)
{
    *len = m->id_len;
    return m->key + m->src_len + 1;
}

struct st_runwin_view {
    const struct st_event *ev; /* the event fed */
    int late;
    const struct st_runwin_member *m; /* sorted by time; valid during the callback */
    size_t n;
    int64_t window_us;
    int ooo; /* late or skewed: every window that holds it is evaluated */
};

/* Called with the window of a fed event. Returns 0 (a nonzero return is
 * logged: detection has no failure of its own). */
typedef int (*st_runwin_cb)(void *arg, const struct st_runwin_view *v);

struct st_runwin;

/* What a runwin keeps per run besides its members. */
enum {
    ST_RUNWIN_EPISODES = 1, /* episodes: st_runwin_episode */
    ST_RUNWIN_BUCKETS = 2,  /* integer sums per bucket: st_runwin_bucket_* */
};

/* name names the detector in Redis keys; window_us is the window length;
 * keep_us how much event time behind the newest event is kept; bucket_us
 * the width of a bucket (with ST_RUNWIN_BUCKETS). */
struct st_runwin *st_runwin_new(const struct st_analyzer_conf *conf, const char *name,
                                int64_t window_us, int64_t keep_us, int flags,
                                int64_t bucket_us);
void st_runwin_destroy(struct st_runwin *w);

void st_runwin_begin(struct st_runwin *w, size_t nevents);
void st_runwin_reset(struct st_runwin *w);

/* Before the batch's first feed: queues on ctx->redis the load of ev's run
 * when it is not in memory (once per run and batch). The detector calls it
 * for exactly the events it will feed. */
void st_runwin_prefetch(struct st_runwin *w, struct st_detect_ctx *ctx,
                        const struct st_event *ev);

/* Adds ev (with payload, which must not contain '\x1f') to its run's window
 * and, unless add_only, calls cb(arg, view) with it before returning. No
 * Redis command. The run must have been prefetched. */
void st_runwin_feed(struct st_runwin *w, struct st_detect_ctx *ctx,
                    const struct st_event *ev, const char *payload, int add_only,
                    st_runwin_cb cb, void *arg);

/* Like an add_only feed; returns 1 when the member was new, 0 when it was
 * there already (a redo). The run becomes the current one for the calls
 * below. */
int st_runwin_add(struct st_runwin *w, struct st_detect_ctx *ctx,
                  const struct st_event *ev, const char *payload);

/* The current run's members with from_us <= ts <= to_us; *m points into
 * the run (valid until the next feed). */
size_t st_runwin_range(struct st_runwin *w, int64_t from_us, int64_t to_us,
                       const struct st_runwin_member **m);

/* With ST_RUNWIN_BUCKETS, before the first feed: a member's value, read
 * from its payload, which a feed that adds the member new (st_runwin_add
 * returns 1) adds to the sum of its bucket (time / bucket_us). The
 * function must give the same value for the same payload. */
typedef int64_t (*st_runwin_value_fn)(const char *payload);
void st_runwin_set_value(struct st_runwin *w, st_runwin_value_fn value);

/* The current run's bucket sums (ST_RUNWIN_BUCKETS): one bucket's, and
 * the sum of those of buckets from..to (one pass over the run's buckets). */
int64_t st_runwin_bucket_get(struct st_runwin *w, int64_t bucket);
int64_t st_runwin_bucket_sum(struct st_runwin *w, int64_t from, int64_t to);

/* The sum of the values of the current run's members with
 * bucket * bucket_us <= time <= to_us: always what summing them would
 * give, read from the bucket's sum when runwin.c knows that sum to be
 * exactly its members' and no member of the bucket is newer than to_us
 * (the common case: the run's newest event), else by summing them (an
 * out-of-order event, a redo, the first use of a loaded bucket). */
int64_t st_runwin_bucket_upto(struct st_runwin *w, int64_t bucket, int64_t to_us);

/* Before the first feed: whether a member is marked, read from its
 * payload once as it is added (fed or loaded), so that a window can be
 * asked whether it holds a marked member without reading any payload. */
typedef int (*st_runwin_mark_fn)(const char *payload);
void st_runwin_set_mark(struct st_runwin *w, st_runwin_mark_fn mark);

/* The number of marked members among v->m[lo, hi), in constant time. */
size_t st_runwin_marked(const struct st_runwin_view *v, size_t lo, size_t hi);

/* Inside a callback: the finding id for a window ending at end_us whose
 * oldest member is opener, extending the run's open episode when the window
 * overlaps it, opening a new one otherwise. out gets 33 bytes. */
void st_runwin_episode(struct st_runwin *w, const struct st_runwin_view *v,
                       int64_t end_us, const struct st_runwin_member *opener,
                       char out[33]);

/* After each batch's feeds: notes the trims the batch allows once
 * committed (checkpoint ctx->seq). Then, when ctx->ckpt is set, appends to
 * it the write of each run that became dirty in a batch before
 * ctx->pending_from (every dirty run with 0), over however many batches
 * changed it since: for a
 * small run its whole state, trims applied, as its field of the run's
 * hash (runhash.h); for a large one the trim of the committed batches'
 * members and the new members (one APPEND to the run's log, or the log
 * rewritten whole with SET ... EX once it outgrows its members), the
 * episodes and buckets changed (HSET of absolute values) and trimmed
 * (HDEL), EXPIRE; a run changing layout, both in a MULTI (runwin.c). It
 * notes each run written in its partition's run index
 * (ctx->runidx), whose entries the caller puts first. The dirty runs are
 * kept in the order they became dirty (batch order: a run fed in batch k
 * is dirty since k, one dirtied by after_commit's trims since
 * ctx->dirty_seq, one written with its trims held since this batch, at the
 * back), so the runs to write are a prefix of that list. The others, and
 * all of them with ctx->ckpt NULL, stay pending (the runs dirty, never
 * evicted) for a later checkpoint. */
void st_runwin_end_batch(struct st_runwin *w, struct st_detect_ctx *ctx);

/* Once the batch's offsets are committed (detect.h: up to checkpoint
 * ctx->seq): trims in memory the
 * members, episodes and buckets older than keep_us behind the newest
 * on-time event of each run of the batch, to be deleted from Redis by the
 * checkpoint of batch ctx->dirty_seq or a later one -- except, with
 * ctx->final (the state leaving memory next), a small run whose trimmed
 * events all lie below those offsets: its string already carries the
 * trim, which a load applies (detect.h); then evicts the runs idle for
 * state.evict_s whose last change is in checkpoint ctx->seq or older. */
void st_runwin_after_commit(struct st_runwin *w, struct st_detect_ctx *ctx);

/* Forgets every run (partitions revoked): the next sight reloads it. */
void st_runwin_forget(struct st_runwin *w, struct st_detect_ctx *ctx);

/* The windows a view holds: for an on-time event one, ending at it; for a
 * late event one ending at each later distinct time. Calls fn with the
 * index range [lo, hi) of each window and its end time. */
typedef int (*st_runwin_window_fn)(void *arg, const struct st_runwin_view *v,
                                   size_t lo, size_t hi, int64_t end_us);
int st_runwin_each_window(const struct st_runwin_view *v, st_runwin_window_fn fn,
                          void *arg);

/* Adds the members [lo, hi) to f's evidence; the fed event is marked late
 * when it was. */
void st_runwin_evidence(const struct st_runwin_view *v, struct st_finding *f,
                        size_t lo, size_t hi);

#endif
