/* runwin.c: per-run event-time windows in memory, Redis as their
 * checkpoint (see runwin.h; key layout in detect.h).
 *
 * Keys, per run (st_detect_key), in one of two layouts:
 *   <prefix>run:h:<run>       hash, field <name>: the whole state
 *                             (runblob.h), while small (state.blob_max_bytes),
 *                             beside the run's other detectors' (runhash.h);
 *                             or
 *   <prefix><name>:l:<run>    string, the log of the members (runblob.h):
 *                             frames "these members" (time, member
 *                             "source\x1fevent_id\x1fpayload") and "the
 *                             members older than T are gone", in order
 *   <prefix><name>:eps:<run>  hash: episode id -> "first last" (event time,
 *                             µs) of every episode not yet trimmed
 *   <prefix><name>:b:<run>    hash: bucket -> sum (volume_anomaly's bytes)
 * A small state is rewritten whole at each checkpoint that changes it, as
 * its field of the run's bucket: one HSET per bucket for every run the
 * checkpoint changed in it, with the bucket's EXPIRE, HDEL of the field
 * once empty (runhash.h); a
 * large one is written incrementally: one APPEND to the log of its trim
 * (if one is due) and its new members, HSET of the changed episodes and
 * buckets, HDEL of the trimmed ones, EXPIREs. The log is rewritten whole
 * (SET ... EX: compacted) instead when the append would take it past
 * twice its live members' bytes plus LOG_SLACK, so that its size stays
 * within a constant factor of the run's. (Up to session 7 the members
 * were a sorted set, <prefix><name>:w:<run>, score the time: a ZADD per
 * run and checkpoint cost Redis about 2 µs per member, 78% of its CPU on
 * a dense stream; an APPEND copies bytes. A load still reads it, and the
 * run's next write of the log writes it whole and deletes the set, in
 * the same checkpoint.) A run changes layout in a MULTI: the full write of
 * the new one and the deletion of the old keys (or field), so Redis never
 * holds both, nor neither of a state. A load reads both and takes what
 * exists: the HGET of the field and an EXISTS of the other keys in the
 * prefetch's round trip, then, only when one of those exists (a large
 * run, or an older version's state), a round of their own in the same
 * exec (on_exists): HGET of the field of the run's hash, GET of the
 * string the versions before the hash wrote, <prefix><name>:s:<run>,
 * ZRANGE of the old sorted set, GET of the log and HGETALLs. (Before
 * session 16 every load sent them all, five to seven commands a run: on a
 * restart with 100,000 runs, 1.5 million commands where the small runs
 * need two each.)
 * state written before the string layout (the three keys only) loads as
 * before, and is rewritten as a field by the run's next write when small;
 * the old string is read only when the hash lacks the field (a field is
 * always newer: the write that makes it deletes the string, after it) and
 * is deleted by the run's next write, whatever the layout.
 *
 * What a redo of a batch computes again is what memory keeps between
 * attempts: members keyed by event (adding one twice changes nothing: in
 * the log too, whose reader takes the members as a set, and whose frames
 * of one checkpoint appended twice load as once), and
 * episodes, which only grow (first only earlier, last only later). Episodes
 * are kept, not replaced by the next one: a redo of a batch that closed one
 * episode and opened another must still find the first for the triggers
 * that extended it. Members and episodes older than 2 x window + lateness
 * behind the batch's newest on-time event are removed by
 * st_runwin_after_commit, once nothing can redo the batch; the next
 * checkpoint deletes them from Redis.
 *
 * Runs live in a chained hash table and on a list ordered by the wall-clock
 * time they were last fed (least recent first), from which idle ones are
 * evicted. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "buf.h"
#include "checkpoint.h"
#include "log.h"
#include "runblob.h"
#include "runhash.h"
#include "runidx.h"
#include "runkeys.h"
#include "runwin.h"
#include "window.h"

#define SEP '\x1f'
/* the keys a load may read besides the bucket's field (load_keys) */
#define LOAD_KEYS_MAX 6

struct episode {
    char id[33];
    struct st_episode ep;
    int dirty; /* extended or opened since the last checkpoint */
};

/* A bucket's sum, and whether it is known to be exactly the sum of the
 * values of the run's members in the bucket (time / bucket_us == key).
 * Invariant: exact => sum == that sum over the members held now. Kept
 * by every change of a member or a sum: a member a feed adds new adds its
 * value to its bucket (the equality holds), and sets exact on a bucket it
 * creates when no other member is in the bucket; anything else clears it
 * -- a sum loaded from Redis (whose sums and members may disagree: a
 * checkpoint cut between fenced transactions by a crash, both layouts
 * loaded as their union), a member loaded, a trim of members of the
 * bucket -- until st_runwin_bucket_upto sums the members again and finds
 * them equal. A redo's feed of a member held already changes neither. */
struct bucket {
    int64_t key, sum;
    int dirty;
    int exact;
};

enum { RUN_LOADING, RUN_READY };

/* Which of the layouts Redis holds a run's state in, as far as this
 * process knows (bits: a load may find both, written by hand or by two
 * versions at once; the next write then leaves one) */
enum {
    LAYOUT_NONE = 0,
    LAYOUT_BLOB = 1,
    LAYOUT_SETS = 2,
    LAYOUT_OLD = 4,
    LAYOUT_ZSET = 8,
    LAYOUT_RUNH = 16
};
/* LAYOUT_BLOB: the run's field of its bucket (runhash.h); LAYOUT_RUNH: its
 * field of the run's own hash, <prefix>run:h:<run>, of the versions before
 * the buckets (read, then deleted by the run's next write); LAYOUT_OLD: the
 * string <prefix><name>:s:<run> of the versions before it (read, then
 * deleted by the run's next write); LAYOUT_ZSET (with LAYOUT_SETS): the
 * sorted set <prefix><name>:w:<run> that held a large run's members
 * before the log (read, then deleted by the run's next write, in the
 * checkpoint that writes the log whole) */

/* r->lbytes when the log's size is not known (a log that is not ours,
 * the layout just made): the next write of the log rewrites it whole */
#define LOG_UNKNOWN UINT32_MAX
/* A log is rewritten whole (compacted: SET) instead of appended to when
 * it would grow past twice its members' bytes plus this: its size stays
 * within a constant factor of the run's, and the rewrite, which costs
 * about what the run's members cost Redis to copy, comes at most once
 * per as many bytes appended -- while an append costs Redis one string
 * copy of the new bytes, against a ZADD's skiplist and dict insertion
 * per member (78% of Redis's CPU on a dense stream of 30,000 events/s). */
#define LOG_SLACK 4096

/* A state whose estimated string (state_bytes) is at most
 * state.blob_max_bytes (conf->state_blob_max) is written whole as one
 * string; above, as the log and hashes, incrementally. The trade: a write
 * costs Redis mostly per command (parsing, the key's lookup, the AOF
 * append, the reply: microseconds each), a string's bytes less (copied in
 * memory and to the AOF), and the incremental layout costs a run 1 to 5
 * commands per write (APPEND or SET of the log, HSET, HDEL, EXPIREs)
 * against the string's one. Most runs are far below it (the denial
 * stream's hold 1 to 8 members of under 100 bytes, the mixed stream's
 * under 1 KB); a run above it is a busy one, fed at every checkpoint,
 * whose whole rewrite each second would copy its whole window again (to
 * the analyzer's buffer, Redis and its AOF) instead of its new members.
 * 1 KB by default since session 9: on the live stream of 30,000 events/s
 * (10,000 runs of about 180 members) 4 KB strings cost Redis 2.1-2.5 s
 * and the analyzer 9.9-10.5 s of CPU, 1 KB 1.5-1.9 s and 8.3-9.7 s, same
 * findings (docs/architecture.md, "Redis on the live stream"). A large
 * run goes back to a string only once its trims took it below half the
 * limit, so that a run near it, trimmed and refilled, does not switch (a
 * MULTI of 4 to 9 commands) every checkpoint. */

/* One run's state. Counts are 32-bit and flags one byte, so that the
 * struct is 256 bytes (a malloc size class; 328 before, allocated as 384):
 * a run of each windowed detector is held per run of the stream
 * (docs/architecture.md, "State bounds"). */
struct run {
    /* its ids and hash, shared with the run's other windows of the part
     * (runkeys.h); this state is the record's slot w->slot */
    struct st_runkey *key;
    struct run *prev, *next;  /* least recently fed first */
    uint64_t queued_gen;      /* prefetch pass that queued its load */
    struct st_runwin_member *m; /* sorted by (time, member) like Redis */
    struct episode *eps;
    struct bucket *b;
    /* pending deletions (the trims), for the next checkpoint */
    char (*del_eps)[33];
    int64_t *del_b;           /* buckets trimmed */
    int64_t trim_below;       /* INT64_MIN: none */
    int64_t max_ts;           /* newest on-time event of the run in this batch */
    int64_t trim_ts;          /* newest on-time event of batches not yet trimmed */
    int64_t o_max;            /* their events' highest Kafka offset; -1 none known */
    uint64_t trim_seq;        /* the last of those batches' checkpoint */
    int64_t touched_s;        /* wall clock of the last feed */
    int64_t w_exp_s, e_exp_s, b_exp_s; /* EXPIRE last sent (st_detect_expire_due) */
    int64_t s_exp_s;          /* the same for the string (SET ... EX) */
    uint32_t keybytes;        /* the members' lengths, summed (state_bytes) */
    uint32_t lbytes;          /* the log's bytes in Redis (LAYOUT_SETS; LOG_UNKNOWN) */
    struct st_runwin *owner;  /* for a load's replies */
    uint64_t ck_seq;          /* checkpoint holding its latest change */
    /* dirty: the checkpoint (batch) in which it became dirty; the dirty
     * list is in this order (ctx->pending_from) */
    uint64_t dirty_seq;
    uint32_t n, cap, nunsaved; /* members */
    uint32_t neps, capeps;
    uint32_t nb, capb;
    uint32_t ndel_eps, ndel_b;
    uint32_t ndel_m;          /* members trimmed since the deletion was last sent */
    uint32_t in_trimq;        /* its entries in the trim queue */
    int32_t partition;        /* its task's Kafka partition (run index) */
    uint16_t pending;         /* loads queued whose replies have not come */
    uint8_t state;
    uint8_t layout;           /* LAYOUT_*: what Redis holds */
    uint8_t in_batch, dirty;
    uint8_t fed; /* fed since its last checkpoint (its window key's EXPIRE may be due) */
};

_Static_assert(sizeof(struct run) <= 256, "struct run: keep it in the 256-byte size class");
/* a member of each windowed detector per event in its window: the marks,
 * the flags and the lengths live in what was padding; its source and event
 * id are told by their lengths in its key, not copied again (48 bytes and
 * two copies of the key before session 19) */
_Static_assert(sizeof(struct st_runwin_member) <= 40, "struct st_runwin_member: 40 bytes");

struct st_runwin {
    const struct st_analyzer_conf *conf;
    char *name;
    int64_t window_us, keep_us, bucket_us;
    int flags;
    /* the runs' records (runkeys.h): the context's table of the part,
     * taken at the first prefetch, or the window's own (own_keys) when the
     * context has none or no slot left; slot: this window's in each */
    struct st_runkeys *keys;
    int slot, own_keys;
    size_t nruns;
    struct run *lru_head, *lru_tail;
    struct run **batch; /* runs fed in this batch */
    size_t nbatch, capbatch;
    /* runs with changes not yet in a checkpoint, by dirty_seq (the order
     * they became dirty in: batch order); dirty_seq of the last one */
    struct run **dirty;
    /* [dirty_head, ndirty) is the list: a checkpoint takes runs from its
     * head, and the space before it is reclaimed when the list would grow
     * (moving the whole rest up at each batch was a memmove of every run
     * dirty within the interval, per batch) */
    size_t dirty_head, ndirty, capdirty;
    uint64_t last_dirty_seq;
    /* runs to trim once their batch is committed: an entry per run and
     * batch that fed it, in batch order (seqs never go down), so that a
     * commit takes entries from the head only, [trimq_head, ntrimq), instead
     * of walking every run fed since the last commit (an interval's worth
     * with the rolling write-back: that walk was 14% of the detect role's
     * CPU on the denial stream). A run is trimmed at its last entry. */
    struct trim_entry {
        struct run *r;
        uint64_t seq;
    } *trimq;
    size_t trimq_head, ntrimq, captrimq;
    struct run *cur;
    st_runwin_value_fn value; /* ST_RUNWIN_BUCKETS: a member's value */
    st_runwin_mark_fn mark;   /* NULL: no member is marked */
    int64_t clock_s;          /* batch_s */
    uint64_t gen;
    /* the run of each prefetched event, in prefetch order: the feeds come
     * in the same order, and take their run from here instead of hashing
     * and comparing the ids again (the lookup was 5% of the analyzer's
     * CPU). Emptied whenever a run may be freed. */
    struct memo {
        const struct st_event *ev;
        struct run *run;
    } *memo;
    size_t nmemo, capmemo, next_memo;
    struct st_buf member;
    struct st_buf wkey, lkey, ekey, bkey, skey, hkey; /* the keys of the run being checkpointed */
    struct st_buf bucket, field; /* its bucket's key and its field there (detect.h) */
    /* the small states' writes when end_batch's ctx->runhash is NULL:
     * flushed at the end of end_batch (created at the first) */
    struct st_runhash *own;
    struct st_buf blob;       /* the string of the run being checkpointed */
    struct st_detect_stats *stats; /* the last prefetch's (a load's replies count) */
    struct st_rpipe *load_pipe;    /* the last prefetch's (on_exists queues there) */
    const struct st_detect_offsets *resumed; /* the last prefetch's (load_done) */
    struct st_buf loadkeys[LOAD_KEYS_MAX]; /* load_keys' */
    struct cmd {
        const char **argv; /* NULL: the number formatted in num[i] */
        char (*num)[2 * ST_I64_LEN]; /* one or two numbers per argument */
        int argc, cap;
    } cmd; /* reused by every checkpoint */
};

static int64_t wall_s(const struct st_detect_ctx *ctx)
{
    return ctx->now_s ? ctx->now_s : (int64_t)time(NULL);
}

/* The wall clock as read at the batch's start (st_runwin_begin) or at its
 * checkpoint's (end_batch): for what is noted per run (the time it was
 * fed, written), which a batch's length changes by nothing that matters
 * (state.evict_s is minutes), without a clock read per run (they were 2%
 * of the detect role's CPU on a dense stream). Eviction reads the clock. */
static int64_t batch_s(const struct st_runwin *w, const struct st_detect_ctx *ctx)
{
    return ctx->now_s ? ctx->now_s : w->clock_s ? w->clock_s : (int64_t)time(NULL);
}

struct st_runwin *st_runwin_new(const struct st_analyzer_conf *conf, const char *name,
                                int64_t window_us, int64_t keep_us, int flags,
                                int64_t bucket_us)
{
    /* the run's hash is named like a detector's keys (detect.h): a detector
     * of that name would write its windows over it */
    if (!strcmp(name, ST_DETECT_RUN_HASH)) {
        st_error("a detector's state may not be named \"%s\" (the run's hash)", name);
        abort();
    }
    struct st_runwin *w = st_calloc(1, sizeof(*w));
    w->conf = conf;
    w->name = st_strdup(name);
    w->window_us = window_us;
    w->keep_us = keep_us;
    w->flags = flags;
    w->bucket_us = bucket_us > 0 ? bucket_us : 1;
    st_buf_init(&w->member);
    st_buf_init(&w->wkey);
    st_buf_init(&w->lkey);
    st_buf_init(&w->ekey);
    st_buf_init(&w->bkey);
    st_buf_init(&w->skey);
    st_buf_init(&w->hkey);
    st_buf_init(&w->bucket);
    st_buf_init(&w->field);
    st_buf_init(&w->blob);
    return w;
}

/* The table of the window's runs (see struct st_runwin). */
static struct st_runkeys *keys_of(struct st_runwin *w, const struct st_detect_ctx *ctx)
{
    if (w->keys)
        return w->keys;
    if (ctx && ctx->runkeys && (w->slot = st_runkeys_slot(ctx->runkeys)) >= 0) {
        w->keys = ctx->runkeys;
    } else {
        w->keys = st_runkeys_new();
        w->own_keys = 1;
        w->slot = st_runkeys_slot(w->keys);
    }
    return w->keys;
}

/* Frees r, the window's state of a run, and leaves the run's record (freed
 * with its last window's state). */
static void run_free(struct st_runwin *w, struct run *r)
{
    st_runkeys_set(w->keys, r->key, w->slot, NULL);
    w->nruns--;
    for (size_t i = 0; i < r->n; i++)
        free((char *)r->m[i].key);
    free(r->m);
    free(r->eps);
    free(r->b);
    free(r->del_eps);
    free(r->del_b);
    free(r);
}

static void lru_unlink(struct st_runwin *w, struct run *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        w->lru_head = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else
        w->lru_tail = r->prev;
    r->prev = r->next = NULL;
}

static void lru_append(struct st_runwin *w, struct run *r)
{
    r->prev = w->lru_tail;
    r->next = NULL;
    if (w->lru_tail)
        w->lru_tail->next = r;
    else
        w->lru_head = r;
    w->lru_tail = r;
}

void st_runwin_forget(struct st_runwin *w, struct st_detect_ctx *ctx)
{
    if (ctx && ctx->stats)
        ctx->stats->runs -= (int64_t)w->nruns;
    for (struct run *r = w->lru_head, *next; r; r = next) {
        next = r->next;
        run_free(w, r);
    }
    w->lru_head = w->lru_tail = NULL;
    w->nbatch = w->dirty_head = w->ndirty = w->ntrimq = w->trimq_head = 0;
    w->cur = NULL;
    w->nmemo = w->next_memo = 0;
}

void st_runwin_destroy(struct st_runwin *w)
{
    if (!w)
        return;
    st_runwin_forget(w, NULL);
    if (w->own_keys)
        st_runkeys_destroy(w->keys);
    else if (w->keys)
        st_runkeys_slot_release(w->keys, w->slot); /* no run holds it now */
    free(w->batch);
    free(w->dirty);
    free(w->trimq);
    free(w->memo);
    st_buf_fini(&w->member);
    st_buf_fini(&w->wkey);
    st_buf_fini(&w->lkey);
    st_buf_fini(&w->ekey);
    st_buf_fini(&w->bkey);
    st_buf_fini(&w->skey);
    st_buf_fini(&w->hkey);
    st_buf_fini(&w->bucket);
    st_buf_fini(&w->field);
    for (int i = 0; i < LOAD_KEYS_MAX; i++)
        st_buf_fini(&w->loadkeys[i]);
    st_buf_fini(&w->blob);
    st_runhash_destroy(w->own);
    free(w->cmd.argv);
    free(w->cmd.num);
    free(w->name);
    free(w);
}

void st_runwin_begin(struct st_runwin *w, size_t nevents)
{
    (void)nevents;
    w->clock_s = (int64_t)time(NULL);
    w->gen++;
    w->nmemo = w->next_memo = 0;
    if (w->keys)
        st_runkeys_begin(w->keys); /* the last batch's events are gone */
}

/* How far ahead the walks over a batch's runs (reset, the trims after a
 * commit) ask for the run they will reach: each is one of hundreds of
 * thousands, out of the cache by then (their reads were 45% of
 * st_runwin_after_commit's samples). */
#define WALK_AHEAD 8

void st_runwin_reset(struct st_runwin *w)
{
    for (size_t i = 0; i < w->nbatch; i++) {
        if (i + WALK_AHEAD < w->nbatch) {
            __builtin_prefetch(&w->batch[i + WALK_AHEAD]->in_batch, 1);
            __builtin_prefetch(&w->batch[i + WALK_AHEAD]->max_ts, 1);
        }
        w->batch[i]->in_batch = 0;
        w->batch[i]->max_ts = INT64_MIN;
    }
    w->nbatch = 0;
    w->cur = NULL;
    w->nmemo = w->next_memo = 0;
}

static struct run *run_find(struct st_runwin *w, const struct st_event *ev)
{
    if (!w->keys)
        return NULL;
    struct st_runkey *k = st_runkeys_get(w->keys, ev, 0);
    return k ? k->slot[w->slot] : NULL;
}

/* Appends r to the dirty list as dirty since checkpoint seq (never below
 * the last one's: the list stays sorted whatever a caller passes). */
static void dirty_append(struct st_runwin *w, struct run *r, uint64_t seq)
{
    if (seq < w->last_dirty_seq)
        seq = w->last_dirty_seq;
    w->last_dirty_seq = seq;
    r->dirty = 1;
    r->dirty_seq = seq;
    if (w->ndirty == w->capdirty) {
        if (w->dirty_head > w->ndirty / 2) {
            /* the written half goes instead of growing */
            w->ndirty -= w->dirty_head;
            memmove(w->dirty, w->dirty + w->dirty_head, w->ndirty * sizeof(*w->dirty));
            w->dirty_head = 0;
        } else {
            w->capdirty = w->capdirty ? 2 * w->capdirty : 64;
            w->dirty = st_realloc(w->dirty, w->capdirty * sizeof(*w->dirty));
        }
    }
    w->dirty[w->ndirty++] = r;
}

static void mark_dirty(struct st_runwin *w, struct run *r, uint64_t seq)
{
    if (!r->dirty)
        dirty_append(w, r, seq);
}

/* Copies a member's key (one allocation; its source and event id are
 * told by their lengths, not copied again). Returns -1 when it is not
 * "a\x1fb\x1fc", or its source or event id is longer than an event's can
 * be (a string not ours). nmarked is left to the caller. */
static int member_init(struct st_runwin *w, struct st_runwin_member *m, int64_t ts,
                       const char *key, size_t len, int saved)
{
    const char *a = memchr(key, SEP, len);
    const char *b = a ? memchr(a + 1, SEP, len - (size_t)(a + 1 - key)) : NULL;
    if (!b || a - key > UINT16_MAX || b - a - 1 > UINT16_MAX)
        return -1;
    char *block = st_malloc(len + 1);
    memcpy(block, key, len);
    block[len] = '\0';
    m->ts_us = ts;
    m->key = block;
    m->payload = block + (b - key) + 1;
    m->src_len = (uint16_t)(a - key);
    m->id_len = (uint16_t)(b - a - 1);
    m->saved = (uint8_t)saved;
    m->klen = len < UINT16_MAX ? (uint16_t)len : UINT16_MAX;
    m->marked = w->mark && w->mark(m->payload);
    m->nmarked = 0;
    return 0;
}

/* strlen(m->key) without reading the key, for all but the longest (a small
 * run's checkpoint writes every member's key: the strlen of each was 6% of
 * the detect role's samples on a dense stream) */
static size_t member_len(const struct st_runwin_member *m)
{
    return m->klen < UINT16_MAX ? m->klen : strlen(m->key);
}

static int member_cmp(int64_t ts, const char *key, const struct st_runwin_member *m)
{
    if (ts != m->ts_us)
        return ts < m->ts_us ? -1 : 1;
    return strcmp(key, m->key);
}

/* First index whose member is not below (ts, key); key NULL: first at ts. */
static size_t lower_bound(const struct run *r, int64_t ts, const char *key)
{
    size_t lo = 0, hi = r->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int below = key ? member_cmp(ts, key, &r->m[mid]) > 0 : r->m[mid].ts_us < ts;
        if (below)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

static struct bucket *bucket_find(struct run *r, int64_t key, int create);

/* The bucket of a member's time (C division, as the detectors compute it) */
static int64_t bucket_of(const struct st_runwin *w, int64_t ts)
{
    return ts / w->bucket_us;
}

/* Keeps the buckets' sums (ST_RUNWIN_BUCKETS, struct bucket) as member
 * r->m[i] is added: fed (saved 0), its value goes to its bucket's sum;
 * loaded, its bucket is no longer known exact. */
static void bucket_count(struct st_runwin *w, struct run *r, size_t i, int saved)
{
    int64_t key = bucket_of(w, r->m[i].ts_us);
    if (saved) {
        struct bucket *b = bucket_find(r, key, 0);
        if (b)
            b->exact = 0;
        return;
    }
    size_t nb = r->nb;
    struct bucket *b = bucket_find(r, key, 1);
    b->sum += w->value ? w->value(r->m[i].payload) : 0;
    b->dirty = 1;
    /* made now, for a member alone in its bucket: exact */
    if (r->nb > nb)
        b->exact = (i == 0 || bucket_of(w, r->m[i - 1].ts_us) != key) &&
                   (i + 1 == r->n || bucket_of(w, r->m[i + 1].ts_us) != key);
}

/* Inserts a member in order; returns 1 when new. */
static int member_insert(struct st_runwin *w, struct run *r, int64_t ts, const char *key,
                         size_t len, int saved)
{
    /* after the newest (an event in order, a load in Redis's order): its
     * place without a search of the run */
    size_t i = !r->n || member_cmp(ts, key, &r->m[r->n - 1]) > 0 ? r->n
                                                                 : lower_bound(r, ts, key);
    if (i < r->n && member_cmp(ts, key, &r->m[i]) == 0) {
        if (saved && !r->m[i].saved) {
            r->m[i].saved = 1;
            r->nunsaved--;
        }
        return 0;
    }
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 2; /* most runs are short */
        r->m = st_realloc(r->m, r->cap * sizeof(*r->m));
    }
    struct st_runwin_member m;
    if (member_init(w, &m, ts, key, len, saved))
        return -1;
    memmove(&r->m[i + 1], &r->m[i], (r->n - i) * sizeof(*r->m));
    /* the running count of marks: the count before it (at the front, the
     * count before the old first member, now at 1: after trims it is not
     * 0) plus its own, and one more for every member after it when it is
     * marked (an out-of-order insert) */
    uint32_t before = i ? r->m[i - 1].nmarked : r->n ? r->m[1].nmarked - r->m[1].marked : 0;
    m.nmarked = before + m.marked;
    r->m[i] = m;
    r->n++;
    if (m.marked)
        for (size_t j = i + 1; j < r->n; j++)
            r->m[j].nmarked++;
    r->keybytes += len;
    r->nunsaved += !saved;
    if (w->flags & ST_RUNWIN_BUCKETS)
        bucket_count(w, r, i, saved);
    return 1;
}

static struct episode *episode_add(struct run *run, const char *id, int64_t first_us,
                                   int64_t last_us)
{
    if (run->neps == run->capeps) {
        run->capeps = run->capeps ? 2 * run->capeps : 4;
        run->eps = st_realloc(run->eps, run->capeps * sizeof(*run->eps));
    }
    struct episode *e = &run->eps[run->neps++];
    memcpy(e->id, id, 33);
    e->ep.first_us = first_us;
    e->ep.last_us = last_us;
    e->dirty = 0;
    return e;
}

static struct bucket *bucket_find(struct run *r, int64_t key, int create)
{
    for (size_t i = 0; i < r->nb; i++)
        if (r->b[i].key == key)
            return &r->b[i];
    if (!create)
        return NULL;
    if (r->nb == r->capb) {
        r->capb = r->capb ? 2 * r->capb : 2; /* most runs are short */
        r->b = st_realloc(r->b, r->capb * sizeof(*r->b));
    }
    struct bucket *b = &r->b[r->nb++];
    b->key = key;
    b->sum = 0;
    b->dirty = 0;
    b->exact = 0;
    return b;
}

static void run_trim(struct st_runwin *w, struct run *r);

/* A load's last reply in: the run is ready. A pending trim its string
 * carried (runblob.h) whose events all lie below the offset its partition
 * was committed at when assigned is applied now, as the analyzer that
 * wrote it applied it after that commit (its trims' deletions then go
 * with the run's next write, as any); otherwise it stays pending, and the
 * redo, which feeds those events again, trims it after its own commit. */
static int load_done(struct run *r)
{
    if (--r->pending)
        return 0;
    r->state = RUN_READY;
    struct st_runwin *w = r->owner;
    if (r->trim_ts != INT64_MIN && r->o_max >= 0 && !r->in_trimq &&
        r->o_max < st_detect_offset_of(w->resumed, r->partition)) {
        run_trim(w, r);
        r->trim_ts = INT64_MIN;
        r->o_max = -1;
    }
    return 0;
}

/* Replies of a load, in the order queued: members, then episodes and
 * buckets as the flags ask. A load that fails leaves the run loading: the
 * next prefetch queues it again from scratch. */
static int on_members(const redisReply *rep, void *arg)
{
    struct run *r = arg;
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements % 2)
        return -1;
    if (rep->elements)
        r->layout |= LAYOUT_SETS | LAYOUT_ZSET;
    for (size_t i = 0; i + 1 < rep->elements; i += 2) {
        const redisReply *k = rep->element[i], *s = rep->element[i + 1];
        if (!k->str || !s->str)
            return -1;
        /* not ours when not "a\x1fb\x1fc": ignored, like a missing member */
        member_insert(r->owner, r, strtoll(s->str, NULL, 10), k->str, k->len, 1);
    }
    return load_done(r);
}

static void log_member(void *arg, int64_t ts, const char *key, size_t len)
{
    struct run *r = arg;
    struct st_runwin *w = r->owner;
    st_buf_reset(&w->member); /* NUL-terminated for the comparisons */
    st_buf_add(&w->member, key, len);
    /* not ours when not "a\x1fb\x1fc": ignored, like a missing member */
    member_insert(w, r, ts, w->member.data, len, 1);
}

/* The log's GET (runblob.h), after the sorted set's ZRANGE: its members
 * join what the run holds (a set: one held twice is one). A log that is
 * not ours is handled as a string that is not ours (on_blob): ignored,
 * logged and counted, and rewritten whole by the run's next write of it
 * (or deleted by a switch to the string); the other replies still load. */
static int on_log(const redisReply *rep, void *arg)
{
    struct run *r = arg;
    struct st_runwin *w = r->owner;
    if (rep->type == REDIS_REPLY_NIL)
        return load_done(r);
    if (rep->type != REDIS_REPLY_STRING)
        return -1;
    r->layout |= LAYOUT_SETS;
    r->lbytes = rep->len < LOG_UNKNOWN ? (uint32_t)rep->len : LOG_UNKNOWN;
    if (st_runblob_log_read(rep->str, rep->len, log_member, r)) {
        st_warn("%s: the log of run \"%s\" in Redis (%zu bytes) is not in a format "
                "this analyzer reads: ignored, the run goes on without it",
                w->name, r->key->run_id, rep->len);
        if (w->stats)
            w->stats->malformed++;
        r->lbytes = LOG_UNKNOWN;
    }
    return load_done(r);
}

static int on_episodes(const redisReply *rep, void *arg)
{
    struct run *r = arg;
    if (rep->type != REDIS_REPLY_ARRAY)
        return -1;
    if (rep->elements)
        r->layout |= LAYOUT_SETS;
    for (size_t i = 0; i + 1 < rep->elements; i += 2) {
        const char *k = rep->element[i]->str, *v = rep->element[i + 1]->str;
        long long first, last;
        if (!k || !v)
            return -1;
        if (strlen(k) != 32 || sscanf(v, "%lld %lld", &first, &last) != 2)
            continue; /* not ours: ignored, like a missing episode */
        struct episode *e = NULL;
        for (size_t j = 0; (r->layout & (LAYOUT_BLOB | LAYOUT_RUNH | LAYOUT_OLD)) && j < r->neps && !e;
             j++)
            if (!strcmp(r->eps[j].id, k))
                e = &r->eps[j]; /* both layouts held it: the union */
        if (!e) {
            episode_add(r, k, first, last);
        } else {
            st_episode_extend(&e->ep, first);
            st_episode_extend(&e->ep, last);
        }
    }
    return load_done(r);
}

static int on_buckets(const redisReply *rep, void *arg)
{
    struct run *r = arg;
    if (rep->type != REDIS_REPLY_ARRAY)
        return -1;
    if (rep->elements)
        r->layout |= LAYOUT_SETS;
    for (size_t i = 0; i + 1 < rep->elements; i += 2) {
        const char *k = rep->element[i]->str, *v = rep->element[i + 1]->str;
        if (!k || !v)
            return -1;
        struct bucket *b = bucket_find(r, strtoll(k, NULL, 10), 1);
        b->sum = strtoll(v, NULL, 10);
        b->exact = 0; /* Redis's: the members may disagree */
    }
    return load_done(r);
}

static void run_clear(struct run *r)
{
    for (size_t i = 0; i < r->n; i++)
        free((char *)r->m[i].key);
    r->n = r->nunsaved = r->neps = r->nb = r->keybytes = 0;
}

/* The string of a run's state (runblob.h) read into r, which is empty (the
 * GET is a load's first reply). Returns -1 when it is not ours, with r
 * left empty. */
static int blob_decode(struct st_runwin *w, struct run *r, const char *data, size_t len)
{
    struct st_runblob_reader rd;
    uint64_t n;
    if (st_runblob_open(&rd, data, len) || st_runblob_get_count(&rd, &n))
        goto bad;
    for (uint64_t i = 0; i < n; i++) {
        int64_t ts;
        const char *key;
        size_t klen;
        if (st_runblob_get_member(&rd, &ts, &key, &klen) || memchr(key, '\0', klen))
            goto bad;
        st_buf_reset(&w->member); /* NUL-terminated for the comparisons */
        st_buf_add(&w->member, key, klen);
        if (member_insert(w, r, ts, w->member.data, klen, 1) != 1)
            goto bad; /* not "a\x1fb\x1fc", or twice */
    }
    if (st_runblob_get_count(&rd, &n))
        goto bad;
    for (uint64_t i = 0; i < n; i++) {
        const char *id;
        char id33[33];
        int64_t first, last;
        if (st_runblob_get_episode(&rd, &id, &first, &last) || memchr(id, '\0', 32))
            goto bad;
        memcpy(id33, id, 32);
        id33[32] = '\0';
        episode_add(r, id33, first, last);
    }
    if (st_runblob_get_count(&rd, &n))
        goto bad;
    for (uint64_t i = 0; i < n; i++) {
        int64_t key, sum;
        if (st_runblob_get_bucket(&rd, &key, &sum))
            goto bad;
        struct bucket *bk = bucket_find(r, key, 1);
        bk->sum = sum;
        bk->exact = 0; /* Redis's: the members may disagree */
    }
    int64_t trim_ts, o_max;
    if (st_runblob_get_pending_trim(&rd, &trim_ts, &o_max) || st_runblob_close(&rd))
        goto bad;
    if (trim_ts != INT64_MIN) { /* applied, or kept, by load_done */
        if (trim_ts > r->trim_ts)
            r->trim_ts = trim_ts;
        if (o_max > r->o_max)
            r->o_max = o_max;
    }
    return 0;
bad:
    run_clear(r);
    return -1;
}

/* A load's string replies: the run's field of its bucket, then (in the
 * second round, on_exists) the field of the run's hash and the
 * string of the versions before it (read only when the field is absent:
 * the field is newer). A string that is not
 * ours (another version, cut short, written by hand) is a data error of
 * this one state, handled as a member or an episode that is not ours:
 * ignored, the run going on with what else Redis holds of it (the other
 * layout's keys, if any: nothing, normally), logged and counted
 * (sandtrail_analyzer_state_malformed_total). Not an availability error:
 * reading it again gives the same bytes, and a batch retried on it would
 * stop every partition for good; not fatal for the same reason. Its next
 * write replaces it. A reply of another type is -1, as on_members's. */
static int on_blob(const redisReply *rep, struct run *r, int layout)
{
    struct st_runwin *w = r->owner;
    if (rep->type == REDIS_REPLY_NIL)
        return load_done(r);
    if (rep->type != REDIS_REPLY_STRING)
        return -1;
    /* a string of an older layout, beside a newer one's (the replies come
     * newest first: the bucket's field, the run's hash, the old string) */
    int shadowed = r->layout & (LAYOUT_BLOB | LAYOUT_RUNH);
    r->layout |= layout;
    if (!shadowed && blob_decode(w, r, rep->str, rep->len)) {
        st_warn("%s: the state of run \"%s\" in Redis (%zu bytes) is not in a format "
                "this analyzer reads: ignored, the run starts without it",
                w->name, r->key->run_id, rep->len);
        if (w->stats)
            w->stats->malformed++;
    }
    return load_done(r);
}

static int on_field(const redisReply *rep, void *arg)
{
    return on_blob(rep, arg, LAYOUT_BLOB);
}

static int on_legacy_field(const redisReply *rep, void *arg)
{
    return on_blob(rep, arg, LAYOUT_RUNH);
}

static int on_old_blob(const redisReply *rep, void *arg)
{
    return on_blob(rep, arg, LAYOUT_OLD);
}

/* The keys of a run's state other than its bucket's field, in the order a
 * load reads them: the run's hash of the versions before the buckets, the
 * old string, the sorted set of the versions before the log, the log (a
 * large run's members), then its episodes and buckets hashes when the
 * window keeps them (a large run's too). Returns their count. */
enum { LK_RUNH, LK_OLD, LK_ZSET, LK_LOG, LK_EPS, LK_BUCKETS };

static int load_keys(struct st_runwin *w, const struct run *r)
{
    struct st_buf *keys = w->loadkeys;
    const char *task = r->key->task_id, *run = r->key->run_id;
    int n = 0;
    st_detect_run_hash_key_buf(&keys[n++], w->conf, task, run);
    st_detect_key_buf(&keys[n++], w->conf, w->name, "s", task, run);
    st_detect_key_buf(&keys[n++], w->conf, w->name, "w", task, run);
    st_detect_key_buf(&keys[n++], w->conf, w->name, "l", task, run);
    if (w->flags & ST_RUNWIN_EPISODES)
        st_detect_key_buf(&keys[n++], w->conf, w->name, "eps", task, run);
    if (w->flags & ST_RUNWIN_BUCKETS)
        st_detect_key_buf(&keys[n++], w->conf, w->name, "b", task, run);
    return n;
}

/* A load's second reply: how many of the run's other keys (load_keys)
 * exist. None (every small run a version since the buckets wrote): the
 * load is done with the field. Some (a large run, or state of an older
 * version): they are read, in load_keys' order, in a round trip of their
 * own within the same exec (rpipe.h), as the first round read them all
 * before session 16. */
static int on_exists(const redisReply *rep, void *arg)
{
    struct run *r = arg;
    struct st_runwin *w = r->owner;
    if (rep->type != REDIS_REPLY_INTEGER)
        return -1;
    if (rep->integer > 0) {
        int n = load_keys(w, r);
        const struct st_buf *keys = w->loadkeys;
        struct st_rpipe *p = w->load_pipe;
        const char *hget[] = {"HGET", keys[LK_RUNH].data, w->name};
        st_rpipe_cmd(p, on_legacy_field, r, 3, hget);
        const char *get[] = {"GET", keys[LK_OLD].data};
        st_rpipe_cmd(p, on_old_blob, r, 2, get);
        const char *zr[] = {"ZRANGE", keys[LK_ZSET].data, "0", "-1", "WITHSCORES"};
        st_rpipe_cmd(p, on_members, r, 5, zr);
        const char *gl[] = {"GET", keys[LK_LOG].data};
        st_rpipe_cmd(p, on_log, r, 2, gl);
        r->pending += 4;
        for (int i = LK_EPS; i < n; i++) {
            int eps = i == LK_EPS && (w->flags & ST_RUNWIN_EPISODES);
            const char *hg[] = {"HGETALL", keys[i].data};
            st_rpipe_cmd(p, eps ? on_episodes : on_buckets, r, 2, hg);
            r->pending++;
        }
    }
    return load_done(r);
}

static void memo_add(struct st_runwin *w, const struct st_event *ev, struct run *r)
{
    if (w->nmemo == w->capmemo) {
        w->capmemo = w->capmemo ? 2 * w->capmemo : 256;
        w->memo = st_realloc(w->memo, w->capmemo * sizeof(*w->memo));
    }
    w->memo[w->nmemo].ev = ev;
    w->memo[w->nmemo++].run = r;
}

void st_runwin_prefetch(struct st_runwin *w, struct st_detect_ctx *ctx,
                        const struct st_event *ev)
{
    struct st_runkeys *keys = keys_of(w, ctx);
    struct st_runkey *k = st_runkeys_get(keys, ev, 1);
    uint64_t h = k->hash;
    struct run *r = k->slot[w->slot];
    if (r && (r->state == RUN_READY || r->queued_gen == w->gen)) {
        memo_add(w, ev, r);
        return;
    }
    if (!r) {
        r = st_calloc(1, sizeof(*r));
        r->key = k;
        st_runkeys_set(keys, k, w->slot, r);
        r->max_ts = r->trim_ts = INT64_MIN;
        r->o_max = -1;
        r->trim_below = INT64_MIN;
        r->touched_s = batch_s(w, ctx);
        r->partition = ctx->partition;
        w->nruns++;
        lru_append(w, r);
        if (ctx->stats)
            ctx->stats->runs++;
        /* never checkpointed by anyone (the partition's run index does not
         * hold it): new, nothing to read */
        if (ctx->runidx && !st_runidx_has(ctx->runidx, ctx->partition, h)) {
            r->state = RUN_READY;
            memo_add(w, ev, r);
            return;
        }
    } else {
        run_clear(r); /* a load that failed: start again */
    }
    memo_add(w, ev, r);
    r->state = RUN_LOADING;
    r->queued_gen = w->gen;
    r->owner = w;
    r->layout = LAYOUT_NONE;
    r->lbytes = 0;
    w->stats = ctx->stats;
    w->load_pipe = ctx->redis;
    w->resumed = ctx->resumed;
    /* both layouts, the strings first (read into an empty run), newest
     * first: the field of the run's bucket, then (on_exists) the other
     * keys, read only when one of them exists */
    r->pending = 2;
    const char *bkey = st_detect_run_bucket_key_buf(&w->bucket, w->conf, h);
    const char *field = st_detect_run_field_buf(&w->field, ev->task_id, ev->run_id, w->name);
    const char *bget[] = {"HGET", bkey, field};
    st_rpipe_cmd(ctx->redis, on_field, r, 3, bget);
    const char *argv[1 + LOAD_KEYS_MAX] = {"EXISTS"};
    int n = load_keys(w, r);
    for (int i = 0; i < n; i++)
        argv[1 + i] = w->loadkeys[i].data;
    st_rpipe_cmd(ctx->redis, on_exists, r, 1 + n, argv);
    if (ctx->stats)
        ctx->stats->loads++;
}

/* The run of ev, made current and marked fed. */
static struct run *run_fed(struct st_runwin *w, struct st_detect_ctx *ctx,
                           const struct st_event *ev)
{
    struct run *r;
    /* events live from their prefetch to reset_batch: the same pointer is
     * the same event. A feed that was not prefetched in order (not done by
     * any detector) looks its run up. */
    if (w->next_memo < w->nmemo && w->memo[w->next_memo].ev == ev) {
        r = w->memo[w->next_memo++].run;
        /* cache hints for the runs of the next feeds (each run's state is
         * cold, one of hundreds of thousands): its struct 4 ahead, its
         * members 2 ahead (the struct then in cache) */
        if (w->next_memo + 4 < w->nmemo)
            __builtin_prefetch(w->memo[w->next_memo + 4].run);
        if (w->next_memo + 2 < w->nmemo)
            __builtin_prefetch(w->memo[w->next_memo + 2].run->m);
    } else {
        r = w->cur;
        if (!r || strcmp(r->key->run_id, ev->run_id) || strcmp(r->key->task_id, ev->task_id))
            r = run_find(w, ev);
    }
    if (!r || r->state != RUN_READY)
        st_fatal("%s: fed a run that was not prefetched", w->name);
    w->cur = r;
    r->fed = 1;
    if (!r->in_batch) {
        r->in_batch = 1;
        if (w->nbatch == w->capbatch) {
            w->capbatch = w->capbatch ? 2 * w->capbatch : 64;
            w->batch = st_realloc(w->batch, w->capbatch * sizeof(*w->batch));
        }
        w->batch[w->nbatch++] = r;
        int64_t now = batch_s(w, ctx);
        if (now != r->touched_s || r != w->lru_tail) {
            r->touched_s = now;
            lru_unlink(w, r);
            lru_append(w, r);
        }
    }
    mark_dirty(w, r, ctx->seq);
    /* trimming happens once per run, after the commits; an old late event
     * must not trim what newer windows still need */
    if (!(ctx->late || ctx->skewed)) {
        if (ev->ts_us > r->max_ts)
            r->max_ts = ev->ts_us;
        if (ctx->offset > r->o_max)
            r->o_max = ctx->offset; /* its trim waits for this offset's commit */
    }
    return r;
}

int st_runwin_add(struct st_runwin *w, struct st_detect_ctx *ctx,
                  const struct st_event *ev, const char *payload)
{
    struct st_buf *member = &w->member;
    struct run *r = run_fed(w, ctx, ev);
    st_buf_reset(member);
    st_buf_adds(member, ev->source_name);
    st_buf_addc(member, SEP);
    st_buf_adds(member, ev->event_id);
    st_buf_addc(member, SEP);
    st_buf_adds(member, payload);
    return member_insert(w, r, ev->ts_us, member->data, member->len, 0) == 1;
}

size_t st_runwin_range(struct st_runwin *w, int64_t from_us, int64_t to_us,
                       const struct st_runwin_member **m)
{
    struct run *r = w->cur;
    /* the run's ends first: a window that reaches the newest member (an
     * event in order) needs no search for its end */
    size_t lo = !r->n || r->m[0].ts_us >= from_us ? 0 : lower_bound(r, from_us, NULL);
    size_t hi = to_us == INT64_MAX || !r->n || r->m[r->n - 1].ts_us <= to_us
                    ? r->n
                    : lower_bound(r, to_us + 1, NULL);
    *m = r->m + lo;
    return hi > lo ? hi - lo : 0;
}

void st_runwin_feed(struct st_runwin *w, struct st_detect_ctx *ctx,
                    const struct st_event *ev, const char *payload, int add_only,
                    st_runwin_cb cb, void *arg)
{
    st_runwin_add(w, ctx, ev, payload);
    if (add_only)
        return;
    int ooo = ctx->late || ctx->skewed; /* out of order: see every window */
    struct st_runwin_view v = {ev, ctx->late, NULL, 0, w->window_us, ooo};
    v.n = st_runwin_range(w, ev->ts_us - w->window_us,
                          ooo ? ev->ts_us + w->window_us : ev->ts_us, &v.m);
    if (cb(arg, &v))
        st_warn("%s: a window of run \"%s\" not evaluated", w->name, ev->run_id);
}

void st_runwin_set_value(struct st_runwin *w, st_runwin_value_fn value)
{
    w->value = value;
}

void st_runwin_set_mark(struct st_runwin *w, st_runwin_mark_fn mark)
{
    w->mark = mark;
}

int64_t st_runwin_bucket_get(struct st_runwin *w, int64_t bucket)
{
    struct bucket *b = bucket_find(w->cur, bucket, 0);
    return b ? b->sum : 0;
}

int64_t st_runwin_bucket_sum(struct st_runwin *w, int64_t from, int64_t to)
{
    const struct run *r = w->cur;
    int64_t sum = 0;
    for (size_t i = 0; i < r->nb; i++)
        if (r->b[i].key >= from && r->b[i].key <= to)
            sum += r->b[i].sum;
    return sum;
}

int64_t st_runwin_bucket_upto(struct st_runwin *w, int64_t bucket, int64_t to_us)
{
    struct run *r = w->cur;
    int64_t from_us = bucket * w->bucket_us;
    /* from bucket 1 on, [from_us, from_us + bucket_us) is exactly the
     * times whose bucket it is (C division rounds towards zero: bucket 0
     * holds the negative times above -bucket_us too) */
    int whole = bucket > 0 && bucket_of(w, to_us) == bucket;
    struct bucket *b = whole ? bucket_find(r, bucket, 0) : NULL;
    /* no member newer than to_us: the members up to it are all of the
     * bucket's */
    if (b && b->exact && r->n && r->m[r->n - 1].ts_us <= to_us)
        return b->sum;
    int64_t part = 0, all = 0;
    size_t i = lower_bound(r, from_us, NULL);
    for (; i < r->n && (whole ? bucket_of(w, r->m[i].ts_us) == bucket
                              : r->m[i].ts_us <= to_us); i++) {
        int64_t v = w->value ? w->value(r->m[i].payload) : 0;
        all += v;
        if (r->m[i].ts_us <= to_us)
            part += v;
    }
    /* the bucket's members summed whole: its sum is known exact or not */
    if (b)
        b->exact = all == b->sum;
    return part;
}

size_t st_runwin_marked(const struct st_runwin_view *v, size_t lo, size_t hi)
{
    if (hi <= lo)
        return 0;
    return (uint32_t)(v->m[hi - 1].nmarked - v->m[lo].nmarked + v->m[lo].marked);
}

void st_runwin_episode(struct st_runwin *w, const struct st_runwin_view *v,
                       int64_t end_us, const struct st_runwin_member *opener,
                       char out[33])
{
    struct run *run = w->cur;
    struct episode *e = NULL;
    /* In event-time order episodes lie more than a window apart, so a
     * trigger continues at most one of them: the one a run that never
     * failed had open, even when a failed attempt already stored the later
     * ones. A late trigger may bridge two; the latest wins. */
    for (size_t i = 0; i < run->neps; i++) {
        struct episode *c = &run->eps[i];
        if (st_episode_continues(&c->ep, end_us, w->window_us) &&
            (!e || c->ep.last_us > e->ep.last_us ||
             (c->ep.last_us == e->ep.last_us && strcmp(c->id, e->id) < 0)))
            e = c;
    }
    if (!e) {
        char id[33];
        st_finding_id(id, w->name, v->ev->task_id, v->ev->run_id, opener->key);
        for (size_t i = 0; i < run->neps && !e; i++)
            if (!strcmp(run->eps[i].id, id))
                e = &run->eps[i];
        if (!e)
            e = episode_add(run, id, end_us, end_us);
    }
    st_episode_extend(&e->ep, end_us);
    e->dirty = 1;
    memcpy(out, e->id, 33);
}

/* One command with a growing argument list, built in place. */
static void cmd_grow(struct cmd *c)
{
    if (c->argc == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 16;
        c->argv = st_realloc(c->argv, (size_t)c->cap * sizeof(*c->argv));
        c->num = st_realloc(c->num, (size_t)c->cap * sizeof(*c->num));
    }
}

/* s is not copied: it must live until cmd_flush */
static void cmd_arg(struct cmd *c, const char *s)
{
    cmd_grow(c);
    c->argv[c->argc++] = s;
}

/* Numbers are formatted into the command's own slots, without printf or an
 * allocation each (they were a tenth of the detect role's instructions). */
static void cmd_num(struct cmd *c, int64_t v)
{
    cmd_grow(c);
    st_fmt_i64(c->num[c->argc], v);
    c->argv[c->argc++] = NULL;
}

/* "a b": an episode's first and last time */
static void cmd_num2(struct cmd *c, int64_t a, int64_t b)
{
    cmd_grow(c);
    char *o = c->num[c->argc];
    size_t n = st_fmt_i64(o, a);
    o[n] = ' ';
    st_fmt_i64(o + n + 1, b);
    c->argv[c->argc++] = NULL;
}

static void cmd_flush(struct cmd *c, struct st_checkpoint *ck, int min_argc)
{
    if (c->argc > min_argc) {
        /* the slots are final now: num does not move until the next add */
        for (int i = 0; i < c->argc; i++)
            if (!c->argv[i])
                c->argv[i] = c->num[i];
        st_checkpoint_cmd(ck, c->argc, c->argv);
    }
    c->argc = 0;
}

/* Whether Redis holds an episode (bucket) the run still has: written and
 * not changed since. Then a deletion cannot empty the key. */
static int any_saved_episode(const struct run *r)
{
    for (size_t i = 0; i < r->neps; i++)
        if (!r->eps[i].dirty)
            return 1;
    return 0;
}

static int any_saved_bucket(const struct run *r)
{
    for (size_t i = 0; i < r->nb; i++)
        if (!r->b[i].dirty)
            return 1;
    return 0;
}

/* Held trims (ctx->hold_trims): a run's deletions wait while they removed
 * fewer than this many things and the run is not idle (state.evict_s). */
#define HOLD_MAX 64

/* Whether the run holds something its pending deletions would delete in
 * Redis once written: a member below the trim point (a late event added
 * after the trim), an episode or bucket trimmed and made again. Such a
 * deletion must go first, before the write, as an unheld one does. */
static int trims_hit_writes(const struct run *r)
{
    if (r->trim_below != INT64_MIN && r->n && r->m[0].ts_us < r->trim_below)
        return 1;
    for (size_t i = 0; i < r->ndel_eps; i++)
        for (size_t j = 0; j < r->neps; j++)
            if (!strcmp(r->del_eps[i], r->eps[j].id))
                return 1;
    for (size_t i = 0; i < r->ndel_b; i++)
        for (size_t j = 0; j < r->nb; j++)
            if (r->del_b[i] == r->b[j].key)
                return 1;
    return 0;
}

static int has_trims(const struct run *r)
{
    return r->trim_below != INT64_MIN || r->ndel_eps || r->ndel_b;
}

/* Whether the run's trims stay out of this checkpoint (ctx->hold_trims):
 * in Redis they only remove what no window in memory uses, so they may
 * wait and be sent together -- but never past the run's stay in memory:
 * a run idle for state.evict_s (about to be evicted) sends them, and a
 * revoke's or stop's checkpoint holds none (docs/architecture.md, "A
 * checkpoint per interval"). A run whose trims are held is visited again
 * one interval later (it goes to the back of the dirty list). */
static int trims_held(const struct run *r, const struct st_detect_ctx *ctx, int64_t now)
{
    return ctx->hold_trims && has_trims(r) &&
           r->ndel_m + r->ndel_eps + r->ndel_b < HOLD_MAX &&
           now - r->touched_s < ctx->conf->state_evict_s && !trims_hit_writes(r);
}

/* The run's entry in its partition's run index, for a write of its state
 * in the checkpoint being built, with its EXPIRE when due: once per run
 * and checkpoint for all the run's windows of the part (the record
 * remembers the index flush it was noted in), unless a later window's
 * write asks for more (an expiry due, a later second) -- what
 * st_runidx_note would do with the second call: nothing. */
static void note_run(struct st_runwin *w, struct run *r, struct st_detect_ctx *ctx, int due)
{
    if (!ctx->runidx)
        return;
    struct st_runkey *k = r->key;
    uint64_t gen = st_runidx_flushes(ctx->runidx);
    int64_t now = batch_s(w, ctx);
    /* (the partition too: a window's state of the run made after the
     * topic gained partitions may be on another one than an older
     * window's, and each needs its entry) */
    int same = k->noted_by == ctx->runidx && k->noted == gen && k->noted_part == r->partition;
    if (same && (!due || (k->noted_due && now <= k->noted_s)))
        return;
    st_runidx_note(ctx->runidx, r->partition, k->task_id, k->run_id, k->hash, due, now);
    if (!same) {
        k->noted_by = ctx->runidx;
        k->noted = gen;
        k->noted_part = r->partition;
        k->noted_due = 0;
    }
    if (due) {
        k->noted_due = 1;
        k->noted_s = now;
    }
}

static const char *run_key(struct st_runwin *w, const struct run *r, struct st_buf *b,
                           const char *kind)
{
    return st_detect_key_buf(b, w->conf, w->name, kind, r->key->task_id, r->key->run_id);
}

static int any_dirty_episode(const struct run *r)
{
    for (size_t i = 0; i < r->neps; i++)
        if (r->eps[i].dirty)
            return 1;
    return 0;
}

static int any_dirty_bucket(const struct run *r)
{
    for (size_t i = 0; i < r->nb; i++)
        if (r->b[i].dirty)
            return 1;
    return 0;
}

static void run_checkpoint(struct st_runwin *w, struct run *r, struct st_detect_ctx *ctx,
                           struct cmd *c, const char *ttl, int hold)
{
    /* state written (a key may be created), and with an EXPIRE: the run's
     * index entry goes before it (runidx.h) */
    int wrote = 0, expired = 0;
    /* the keys are named when first needed: a run whose trims are held
     * is checkpointed again each time, mostly with nothing to write */
    const char *lkey = NULL, *ekey = NULL, *bkey = NULL;
#define LKEY() (lkey ? lkey : (lkey = run_key(w, r, &w->lkey, "l")))
#define EKEY() (ekey ? ekey : (ekey = run_key(w, r, &w->ekey, "eps")))
#define BKEY() (bkey ? bkey : (bkey = run_key(w, r, &w->bkey, "b")))
    int has_eps = (w->flags & ST_RUNWIN_EPISODES) != 0;
    int has_b = (w->flags & ST_RUNWIN_BUCKETS) != 0;
    /* Every trim goes to Redis with the next checkpoint, so that a run
     * loaded again (after an eviction, a revoke or a restart) holds what
     * memory held (a lazier trim, tried, made a very late event's window
     * depend on when its run had been evicted). A deletion can empty a key,
     * which Redis then deletes; the write that follows in this checkpoint
     * makes it again without a TTL, so its EXPIRE is due again (last sent
     * set to 0) when nothing Redis holds of the key is left in memory. */
    /* The members: one command, to the log (runblob.h). An APPEND of the
     * trim (first: a member re-added after the trim is then kept) and of
     * the new members; or, when the log would outgrow its members
     * (LOG_SLACK), is not known, or the sorted set of the versions before
     * it is still there, its rewrite whole: a SET of every member (the
     * held trim of the members applied with it: memory holds what is left
     * of them), with its TTL (SET drops it), and the DEL of the sorted
     * set, which the log then holds. */
    int trim = !hold && r->trim_below != INT64_MIN;
    if (trim || r->nunsaved || (r->layout & LAYOUT_ZSET)) {
        struct st_buf *b = &w->blob;
        int64_t prev;
        st_buf_reset(b);
        if (trim)
            st_runblob_log_trim(b, r->trim_below);
        if (r->nunsaved) {
            st_runblob_log_members(b, r->nunsaved, &prev);
            for (size_t i = 0; i < r->n; i++)
                if (!r->m[i].saved)
                    st_runblob_member(b, &prev, r->m[i].ts_us, r->m[i].key,
                                      member_len(&r->m[i]));
        }
        uint64_t live = (uint64_t)r->keybytes + 10 * (uint64_t)r->n;
        if (!r->lbytes || r->lbytes == LOG_UNKNOWN || (r->layout & LAYOUT_ZSET) ||
            (uint64_t)r->lbytes + b->len > 2 * live + LOG_SLACK ||
            (uint64_t)r->lbytes + b->len >= LOG_UNKNOWN) {
            st_buf_reset(b);
            st_runblob_log_members(b, r->n, &prev);
            for (size_t i = 0; i < r->n; i++)
                st_runblob_member(b, &prev, r->m[i].ts_us, r->m[i].key, member_len(&r->m[i]));
            /* the set's replacement in a MULTI of its own: a large
             * checkpoint, run as several transactions (fence.c), never
             * splits it, so a crash leaves the set or the log */
            const char *multi[] = {"MULTI"}, *exec[] = {"EXEC"};
            int zset = (r->layout & LAYOUT_ZSET) != 0;
            if (zset)
                st_checkpoint_cmd(ctx->ckpt, 1, multi);
            const char *set[] = {"SET", LKEY(), b->data, "EX", ttl};
            size_t lens[] = {3, w->lkey.len, b->len, 2, strlen(ttl)};
            st_checkpoint_cmd_lens(ctx->ckpt, 5, set, lens);
            if (zset) {
                const char *del[] = {"DEL", run_key(w, r, &w->wkey, "w")};
                st_checkpoint_cmd(ctx->ckpt, 2, del);
                st_checkpoint_cmd(ctx->ckpt, 1, exec);
                r->layout &= (uint8_t)~LAYOUT_ZSET;
            }
            r->w_exp_s = (int64_t)time(NULL);
            expired = 1;
            r->trim_below = INT64_MIN; /* held or not: applied */
            r->ndel_m = 0;
            r->lbytes = b->len < LOG_UNKNOWN ? (uint32_t)b->len : LOG_UNKNOWN;
        } else {
            const char *app[] = {"APPEND", LKEY(), b->data};
            size_t lens[] = {6, w->lkey.len, b->len};
            st_checkpoint_cmd_lens(ctx->ckpt, 3, app, lens);
            r->lbytes += (uint32_t)b->len;
            if (!r->nunsaved && !r->fed) {
                /* a trim alone of a run not fed since: should the log be
                 * gone from Redis (lost writes, a DEL by hand), the APPEND
                 * made it again, and no EXPIRE follows (not fed): every
                 * key a process creates gets one (runidx.h) */
                const char *expire[] = {"EXPIRE", LKEY(), ttl};
                st_checkpoint_cmd(ctx->ckpt, 3, expire);
                r->w_exp_s = (int64_t)time(NULL);
                expired = 1;
            }
        }
        if (trim) {
            r->trim_below = INT64_MIN;
            r->ndel_m = 0;
        }
        for (size_t i = 0; r->nunsaved && i < r->n; i++)
            r->m[i].saved = 1;
        r->nunsaved = 0;
        wrote = 1;
    }
    if (!hold && r->ndel_eps && has_eps) {
        cmd_arg(c, "HDEL");
        cmd_arg(c, EKEY());
        for (size_t i = 0; i < r->ndel_eps; i++)
            cmd_arg(c, r->del_eps[i]);
        cmd_flush(c, ctx->ckpt, 2);
        if (!any_saved_episode(r))
            r->e_exp_s = 0;
    }
    if (!hold)
        r->ndel_eps = 0;
    if (!hold && r->ndel_b && has_b) {
        cmd_arg(c, "HDEL");
        cmd_arg(c, BKEY());
        for (size_t i = 0; i < r->ndel_b; i++)
            cmd_num(c, r->del_b[i]);
        cmd_flush(c, ctx->ckpt, 2);
        if (!any_saved_bucket(r))
            r->b_exp_s = 0;
    }
    if (!hold)
        r->ndel_b = 0;
    /* fed in any batch since the last checkpoint (with state.checkpoint_ms
     * that may be several: in_batch only tells the last one) */
    if (r->fed && st_detect_expire_due(&r->w_exp_s, w->conf)) {
        const char *expire[] = {"EXPIRE", LKEY(), ttl};
        st_checkpoint_cmd(ctx->ckpt, 3, expire);
        wrote = expired = 1;
    }
    if (has_eps && any_dirty_episode(r)) {
        cmd_arg(c, "HSET");
        cmd_arg(c, EKEY());
        for (size_t i = 0; i < r->neps; i++) {
            struct episode *e = &r->eps[i];
            if (!e->dirty)
                continue;
            cmd_arg(c, e->id);
            cmd_num2(c, e->ep.first_us, e->ep.last_us);
            e->dirty = 0;
        }
        if (c->argc > 2) {
            cmd_flush(c, ctx->ckpt, 2);
            wrote = 1;
            if (st_detect_expire_due(&r->e_exp_s, w->conf)) {
                const char *expire[] = {"EXPIRE", EKEY(), ttl};
                st_checkpoint_cmd(ctx->ckpt, 3, expire);
                expired = 1;
            }
        }
        cmd_flush(c, ctx->ckpt, 1000000);
    }
    if (has_b && any_dirty_bucket(r)) {
        /* absolute sums: running this twice changes nothing */
        cmd_arg(c, "HSET");
        cmd_arg(c, BKEY());
        for (size_t i = 0; i < r->nb; i++) {
            if (!r->b[i].dirty)
                continue;
            cmd_num(c, r->b[i].key);
            cmd_num(c, r->b[i].sum);
            r->b[i].dirty = 0;
        }
        if (c->argc > 2) {
            cmd_flush(c, ctx->ckpt, 2);
            wrote = 1;
            if (st_detect_expire_due(&r->b_exp_s, w->conf)) {
                const char *expire[] = {"EXPIRE", BKEY(), ttl};
                st_checkpoint_cmd(ctx->ckpt, 3, expire);
                expired = 1;
            }
        }
        cmd_flush(c, ctx->ckpt, 1000000);
    }
    if (wrote)
        note_run(w, r, ctx, expired);
    r->ck_seq = ctx->seq;
    r->fed = 0;
#undef LKEY
#undef EKEY
#undef BKEY
}

/* The size of the run's state as a string, near enough (runblob.h: a
 * member's time and length take about 10 bytes, an episode 32 + 12) */
static size_t state_bytes(const struct run *r)
{
    return r->keybytes + 10 * r->n + 44 * r->neps + 12 * r->nb;
}

static void mark_all_saved(struct run *r)
{
    for (size_t i = 0; i < r->n; i++)
        r->m[i].saved = 1;
    r->nunsaved = 0;
    for (size_t i = 0; i < r->neps; i++)
        r->eps[i].dirty = 0;
    for (size_t i = 0; i < r->nb; i++)
        r->b[i].dirty = 0;
}

/* The state in Redis is now exactly memory's: no deletion is pending. */
static void drop_trims(struct run *r)
{
    r->trim_below = INT64_MIN;
    r->ndel_m = r->ndel_eps = r->ndel_b = 0;
}

/* The DEL of the keys of the run's layouts in `layout` but its fields
 * (LAYOUT_BLOB, LAYOUT_RUNH: cmd_hdel_field, cmd_hdel_legacy); returns 1
 * when it named one. */
static int cmd_del_layout(struct st_runwin *w, struct run *r, struct cmd *c, int layout)
{
    cmd_arg(c, "DEL");
    if (layout & LAYOUT_OLD)
        cmd_arg(c, run_key(w, r, &w->skey, "s"));
    if (layout & LAYOUT_SETS) {
        cmd_arg(c, run_key(w, r, &w->lkey, "l"));
        if (layout & LAYOUT_ZSET)
            cmd_arg(c, run_key(w, r, &w->wkey, "w"));
        if (w->flags & ST_RUNWIN_EPISODES)
            cmd_arg(c, run_key(w, r, &w->ekey, "eps"));
        if (w->flags & ST_RUNWIN_BUCKETS)
            cmd_arg(c, run_key(w, r, &w->bkey, "b"));
    }
    return c->argc > 1;
}

/* The HDEL of the run's field of its bucket, alone (in a layout switch) */
static void cmd_hdel_field(struct st_runwin *w, struct run *r, struct st_checkpoint *ck)
{
    const char *key = st_detect_run_bucket_key_buf(&w->bucket, w->conf, r->key->hash);
    const char *field = st_detect_run_field_buf(&w->field, r->key->task_id, r->key->run_id, w->name);
    const char *hdel[] = {"HDEL", key, field};
    st_checkpoint_cmd(ck, 3, hdel);
}

/* The HDEL of the run's field of its own hash (LAYOUT_RUNH), alone */
static void cmd_hdel_legacy(struct st_runwin *w, struct run *r, struct st_checkpoint *ck)
{
    const char *key = st_detect_run_hash_key_buf(&w->hkey, w->conf, r->key->task_id, r->key->run_id);
    const char *hdel[] = {"HDEL", key, w->name};
    st_checkpoint_cmd(ck, 3, hdel);
}

static struct st_runhash *runhash_of(struct st_runwin *w, struct st_detect_ctx *ctx)
{
    if (ctx->runhash)
        return ctx->runhash;
    if (!w->own)
        w->own = st_runhash_new(w->conf);
    return w->own;
}

/* A small run's checkpoint: its whole state as one string, its field of
 * the run's hash, rewritten when anything changed (members, episodes,
 * buckets, trims), or when fed with the key's EXPIRE due (as the window
 * key's EXPIRE today). Queued on the checkpoint's runhash (runhash.h),
 * which sends one HSET per bucket for every run the checkpoint changed in
 * it, with the bucket's EXPIRE; the run's index entry notes the expiry when
 * one's is due (st_detect_expire_due, per detector: the first write of
 * the field by this process or since it was deleted, then once per tenth
 * of the TTL), and an HDEL of the field once empty. From the other layout
 * (its keys in Redis) or with the string of the versions before the hash
 * (LAYOUT_OLD), on its own, not queued: a MULTI of the HSET, the EXPIRE
 * and the DEL of those keys, the string deleted after the field is
 * written. The string is memory's state, trims applied, so the trims need
 * no command; held trims (hold) only make a run whose one change they are
 * wait, as they do in the other layout. */
static void run_checkpoint_blob(struct st_runwin *w, struct run *r, struct st_detect_ctx *ctx,
                                struct cmd *c, const char *ttl, int hold)
{
    int content = r->nunsaved || any_dirty_episode(r) || any_dirty_bucket(r);
    int64_t exp = r->s_exp_s;
    int due = st_detect_expire_due(&exp, w->conf);
    if (!content && !(has_trims(r) && !hold) && !(r->fed && due))
        goto out;
    /* keys of the other layout, or the old string, to delete */
    int other = r->layout & (LAYOUT_SETS | LAYOUT_OLD | LAYOUT_ZSET | LAYOUT_RUNH);
    if (!r->n && !r->neps && !r->nb) {
        /* emptied by its trims: nothing left to write */
        if (cmd_del_layout(w, r, c, r->layout))
            cmd_flush(c, ctx->ckpt, 1);
        c->argc = 0;
        if (r->layout & LAYOUT_RUNH)
            cmd_hdel_legacy(w, r, ctx->ckpt);
        if (r->layout & LAYOUT_BLOB)
            st_runhash_put(runhash_of(w, ctx), r->key->hash, r->key->task_id,
                           r->key->run_id, w->name, NULL, 0);
        drop_trims(r);
        r->layout = LAYOUT_NONE;
        r->lbytes = 0;
        r->s_exp_s = r->w_exp_s = r->e_exp_s = r->b_exp_s = 0;
        goto out;
    }
    int64_t prev;
    struct st_buf *b = &w->blob;
    st_runblob_start(b, &prev);
    st_runblob_count(b, r->n);
    for (size_t i = 0; i < r->n; i++)
        st_runblob_member(b, &prev, r->m[i].ts_us, r->m[i].key, member_len(&r->m[i]));
    st_runblob_count(b, r->neps);
    for (size_t i = 0; i < r->neps; i++)
        st_runblob_episode(b, r->eps[i].id, r->eps[i].ep.first_us, r->eps[i].ep.last_us);
    st_runblob_count(b, r->nb);
    for (size_t i = 0; i < r->nb; i++)
        st_runblob_bucket(b, r->b[i].key, r->b[i].sum);
    /* a trim pending once its events' offsets are committed: carried, so
     * that a load applies it as this analyzer will (load_done) */
    if (r->trim_ts != INT64_MIN && r->o_max >= 0)
        st_runblob_pending_trim(b, r->trim_ts, r->o_max);
    if (other) {
        if (!(r->layout & LAYOUT_BLOB)) {
            due = 1; /* a new field: the key may be new */
            exp = (int64_t)time(NULL);
        }
        /* the bucket's key may be new: its EXPIRE always */
        const char *multi[] = {"MULTI"}, *exec[] = {"EXEC"};
        st_checkpoint_cmd(ctx->ckpt, 1, multi);
        const char *bkey = st_detect_run_bucket_key_buf(&w->bucket, w->conf, r->key->hash);
        const char *field = st_detect_run_field_buf(&w->field, r->key->task_id, r->key->run_id, w->name);
        const char *hset[] = {"HSET", bkey, field, b->data};
        size_t lens[] = {4, w->bucket.len, w->field.len, b->len};
        st_checkpoint_cmd_lens(ctx->ckpt, 4, hset, lens);
        const char *expire[] = {"EXPIRE", bkey, ttl};
        st_checkpoint_cmd(ctx->ckpt, 3, expire);
        if (other & LAYOUT_RUNH)
            cmd_hdel_legacy(w, r, ctx->ckpt);
        if (cmd_del_layout(w, r, c, other))
            cmd_flush(c, ctx->ckpt, 1);
        c->argc = 0;
        st_checkpoint_cmd(ctx->ckpt, 1, exec);
        r->w_exp_s = r->e_exp_s = r->b_exp_s = 0;
    } else {
        st_runhash_put(runhash_of(w, ctx), r->key->hash, r->key->task_id,
                       r->key->run_id, w->name, b->data, b->len);
    }
    if (due)
        r->s_exp_s = exp;
    r->layout = LAYOUT_BLOB;
    r->lbytes = 0;
    mark_all_saved(r);
    drop_trims(r);
    note_run(w, r, ctx, due);
out:
    r->ck_seq = ctx->seq;
    r->fed = 0;
}

/* A run grown past state.blob_max_bytes whose state Redis holds as a string (its
 * field, or the old string): in a MULTI, the deletion of the string (and
 * of any key of the other layout a load found beside it), then the whole
 * state as the sorted set and hashes, each with its EXPIRE. Trims and held
 * trims are in it (memory's state). */
static void run_checkpoint_to_sets(struct st_runwin *w, struct run *r,
                                   struct st_detect_ctx *ctx, struct cmd *c, const char *ttl)
{
    const char *multi[] = {"MULTI"}, *exec[] = {"EXEC"};
    st_checkpoint_cmd(ctx->ckpt, 1, multi);
    if (r->layout & LAYOUT_BLOB)
        cmd_hdel_field(w, r, ctx->ckpt);
    if (r->layout & LAYOUT_RUNH)
        cmd_hdel_legacy(w, r, ctx->ckpt);
    if (cmd_del_layout(w, r, c, r->layout))
        cmd_flush(c, ctx->ckpt, 1);
    c->argc = 0;
    r->w_exp_s = r->e_exp_s = r->b_exp_s = r->s_exp_s = 0;
    for (size_t i = 0; i < r->n; i++)
        r->m[i].saved = 0;
    r->nunsaved = r->n;
    for (size_t i = 0; i < r->neps; i++)
        r->eps[i].dirty = 1;
    for (size_t i = 0; i < r->nb; i++)
        r->b[i].dirty = 1;
    drop_trims(r);
    r->lbytes = LOG_UNKNOWN; /* the log written whole, with its TTL */
    r->layout &= (uint8_t)~LAYOUT_ZSET; /* deleted above (and no MULTI in this one) */
    r->fed = 1; /* the episodes' and buckets' EXPIREs (due: never sent) */
    run_checkpoint(w, r, ctx, c, ttl, 0);
    st_checkpoint_cmd(ctx->ckpt, 1, exec);
    r->layout = LAYOUT_SETS;
}

/* A run's checkpoint in the layout its size asks for (state.blob_max_bytes,
 * half of it on the way down) */
static void run_write(struct st_runwin *w, struct run *r, struct st_detect_ctx *ctx,
                      struct cmd *c, const char *ttl, int hold)
{
    size_t bytes = state_bytes(r);
    /* (an old sorted set beside the log is the sets layout too) */
    /* (a configuration not made by main.c's table: its default) */
    size_t max = ctx->conf->state_blob_max > 0 ? (size_t)ctx->conf->state_blob_max : 1024;
    int blob = (r->layout & ~LAYOUT_ZSET) == LAYOUT_SETS ? bytes < max / 2 : bytes <= max;
    if (blob) {
        run_checkpoint_blob(w, r, ctx, c, ttl, hold);
    } else if (r->layout & (LAYOUT_BLOB | LAYOUT_RUNH | LAYOUT_OLD)) {
        run_checkpoint_to_sets(w, r, ctx, c, ttl);
    } else {
        run_checkpoint(w, r, ctx, c, ttl, hold); /* incremental, as before */
        if (r->n || r->neps || r->nb)
            r->layout = LAYOUT_SETS;
    }
}

void st_runwin_end_batch(struct st_runwin *w, struct st_detect_ctx *ctx)
{
    char ttl[ST_I64_LEN];
    struct cmd *c = &w->cmd;

    st_fmt_i64(ttl, ctx->conf->state_ttl_s);
    /* the trims this batch will allow once committed (after_commit): kept
     * here, so that the next batch may be fed before this one commits */
    for (size_t i = 0; i < w->nbatch; i++) {
        struct run *r = w->batch[i];
        if (r->max_ts == INT64_MIN)
            continue; /* only late or skewed events: they trim nothing */
        if (r->max_ts > r->trim_ts)
            r->trim_ts = r->max_ts;
        if (r->in_trimq && r->trim_seq == ctx->seq)
            continue; /* queued for this batch already */
        r->trim_seq = ctx->seq;
        r->in_trimq++;
        if (w->ntrimq == w->captrimq) {
            if (w->trimq_head > w->ntrimq / 2) {
                /* the committed half goes instead of growing */
                w->ntrimq -= w->trimq_head;
                memmove(w->trimq, w->trimq + w->trimq_head, w->ntrimq * sizeof(*w->trimq));
                w->trimq_head = 0;
            } else {
                w->captrimq = w->captrimq ? 2 * w->captrimq : 64;
                w->trimq = st_realloc(w->trimq, w->captrimq * sizeof(*w->trimq));
            }
        }
        w->trimq[w->ntrimq++] = (struct trim_entry){r, ctx->seq};
    }
    /* no checkpoint with this batch: the runs stay dirty, and a later
     * checkpoint writes each of them once, whatever the number of batches
     * that changed it */
    if (!ctx->ckpt)
        return;
    /* The rolling write-back (docs/architecture.md, "One batch in the
     * analyzer"): the runs that became dirty before checkpoint
     * ctx->pending_from (all of them with 0), from the front of the list,
     * which is sorted by dirty_seq; the rest stay pending. A run kept dirty
     * by its held trims goes to the back as dirty since this checkpoint,
     * so that the list stays sorted. */
    int64_t now = wall_s(ctx);
    w->clock_s = now;
    size_t i = w->dirty_head, nheld = 0;
    for (; i < w->ndirty; i++) {
        struct run *r = w->dirty[i];
        if (i + 4 < w->ndirty) /* cache hints, as in run_fed */
            __builtin_prefetch(w->dirty[i + 4]);
        if (i + 2 < w->ndirty)
            __builtin_prefetch(w->dirty[i + 2]->m);
        if (ctx->pending_from && r->dirty_seq >= ctx->pending_from)
            break;
        run_write(w, r, ctx, c, ttl, trims_held(r, ctx, now));
        if (has_trims(r))
            w->dirty[w->dirty_head + nheld++] = r; /* dirty while its trims wait: not evicted */
        else
            r->dirty = 0;
    }
    /* the written ones leave the head; the held go to the back, as dirty
     * since this checkpoint */
    struct run **held = NULL;
    if (nheld) {
        held = st_malloc(nheld * sizeof(*held));
        memcpy(held, w->dirty + w->dirty_head, nheld * sizeof(*held));
    }
    w->dirty_head = i;
    if (w->dirty_head == w->ndirty)
        w->dirty_head = w->ndirty = 0;
    for (size_t j = 0; j < nheld; j++) {
        held[j]->dirty = 0;
        dirty_append(w, held[j], ctx->seq);
    }
    free(held);
    /* no runhash shared by the caller: this detector's writes alone */
    if (!ctx->runhash && w->own)
        st_runhash_flush(w->own, ctx->ckpt);
}

static void run_trim(struct st_runwin *w, struct run *r)
{
    int64_t oldest = r->trim_ts - w->keep_us;
    /* most runs of a batch lose nothing: no search, no move */
    size_t k = r->n && r->m[0].ts_us < oldest ? lower_bound(r, oldest, NULL) : 0;
    for (size_t i = 0; i < k; i++) {
        r->nunsaved -= !r->m[i].saved;
        r->keybytes -= member_len(&r->m[i]);
        free((char *)r->m[i].key);
    }
    /* the buckets that lost members are exact no more */
    if (k)
        for (size_t j = 0; j < r->nb; j++)
            if (r->b[j].key <= bucket_of(w, r->m[k - 1].ts_us))
                r->b[j].exact = 0;
    if (k)
        memmove(r->m, r->m + k, (r->n - k) * sizeof(*r->m));
    r->n -= k;
    r->ndel_m += k;
    if (k && r->trim_below < oldest)
        r->trim_below = oldest;
    /* no on-time trigger to come can continue an episode that ended
     * before the oldest member kept */
    size_t keep = 0;
    for (size_t j = 0; j < r->neps; j++) {
        if (r->eps[j].ep.last_us >= oldest) {
            r->eps[keep++] = r->eps[j];
            continue;
        }
        r->del_eps = st_realloc(r->del_eps, (r->ndel_eps + 1) * sizeof(*r->del_eps));
        memcpy(r->del_eps[r->ndel_eps++], r->eps[j].id, 33);
    }
    r->neps = keep;
    /* a bucket goes only when every member it counted is gone (it ends
     * before the oldest time kept) */
    int64_t oldest_b = oldest / w->bucket_us - 1;
    keep = 0;
    for (size_t j = 0; j < r->nb; j++) {
        if (r->b[j].key >= oldest_b) {
            r->b[keep++] = r->b[j];
            continue;
        }
        r->del_b = st_realloc(r->del_b, (r->ndel_b + 1) * sizeof(*r->del_b));
        r->del_b[r->ndel_b++] = r->b[j].key;
    }
    r->nb = keep;
}

void st_runwin_after_commit(struct st_runwin *w, struct st_detect_ctx *ctx)
{
    /* the entries of committed batches are at the head; the rest wait */
    while (w->trimq_head < w->ntrimq && w->trimq[w->trimq_head].seq <= ctx->seq) {
        if (w->trimq_head + WALK_AHEAD < w->ntrimq) {
            const struct run *ahead = w->trimq[w->trimq_head + WALK_AHEAD].r;
            __builtin_prefetch(ahead);
            __builtin_prefetch(&ahead->in_trimq, 1);
        }
        if (w->trimq_head + WALK_AHEAD / 2 < w->ntrimq)
            __builtin_prefetch(w->trimq[w->trimq_head + WALK_AHEAD / 2].r->m);
        struct run *r = w->trimq[w->trimq_head++].r;
        if (--r->in_trimq)
            continue; /* a later batch fed it too: trimmed at that entry */
        run_trim(w, r);
        /* the state leaves memory next (ctx->final): a small run whose
         * trimmed events all lie below the offsets just committed is not
         * written again, its string (written with every event it holds)
         * carries this trim for the load (load_done) */
        int carried = ctx->final && !w->conf->write_final_trims && r->layout == LAYOUT_BLOB &&
                      r->o_max >= 0 &&
                      r->o_max < st_detect_offset_of(ctx->final, r->partition);
        r->trim_ts = INT64_MIN;
        r->o_max = -1;
        /* deletions of the next batch's checkpoint (ctx->dirty_seq) */
        if (!carried && (r->trim_below != INT64_MIN || r->ndel_eps || r->ndel_b))
            mark_dirty(w, r, ctx->dirty_seq);
    }
    if (w->trimq_head == w->ntrimq)
        w->trimq_head = w->ntrimq = 0;
    /* the batch list is only needed up to end_batch: emptied here, so that
     * no run evicted below is still pointed at */
    st_runwin_reset(w);
    /* idle runs whose state Redis holds: dropped, reloaded when they come
     * back */
    int64_t now = wall_s(ctx);
    for (struct run *r = w->lru_head, *next; r; r = next) {
        next = r->next;
        if (now - r->touched_s < ctx->conf->state_evict_s)
            break; /* the rest were fed later */
        /* a load that failed holds nothing; a change not yet in a
         * checkpoint that ran waits for the next pass */
        if (r->state == RUN_READY &&
            (r->dirty || r->in_trimq || r->in_batch || r->ck_seq > ctx->seq))
            continue;
        lru_unlink(w, r);
        run_free(w, r);
        if (ctx->stats) {
            ctx->stats->runs--;
            ctx->stats->evictions++;
        }
    }
}

int st_runwin_each_window(const struct st_runwin_view *v, st_runwin_window_fn fn,
                          void *arg)
{
    int64_t ts = v->ev->ts_us;
    if (v->n == 0)
        return 0;
    if (!v->ooo)
        return fn(arg, v, 0, v->n, ts); /* the view is exactly that window */
    size_t lo = 0;
    for (size_t e = 0; e < v->n; e++) {
        if (v->m[e].ts_us < ts)
            continue;
        if (e + 1 < v->n && v->m[e + 1].ts_us == v->m[e].ts_us)
            continue; /* equal times: one window, ending at the last */
        while (v->m[lo].ts_us < v->m[e].ts_us - v->window_us)
            lo++;
        int rc = fn(arg, v, lo, e + 1, v->m[e].ts_us);
        if (rc)
            return rc;
    }
    return 0;
}

void st_runwin_evidence(const struct st_runwin_view *v, struct st_finding *f,
                        size_t lo, size_t hi)
{
    for (size_t i = lo; i < hi; i++) {
        size_t sl, il;
        const char *src = st_runwin_member_source(&v->m[i], &sl);
        const char *id = st_runwin_member_event_id(&v->m[i], &il);
        int self = v->late && !strncmp(src, v->ev->source_name, sl) &&
                   !v->ev->source_name[sl] && !strncmp(id, v->ev->event_id, il) &&
                   !v->ev->event_id[il];
        st_finding_add_event_n(f, src, sl, id, il, self);
    }
}
