/* runidx.c: the per-partition index of the runs whose state Redis holds
 * (see runidx.h; key layout in detect.h).
 *
 * A partition's index in memory is an open-addressing table of (hash,
 * score) pairs, hash 0 meaning an empty slot (a run whose hash is 0 is
 * stored as 1: a collision, which only costs a load), at most 70% full:
 * 16 bytes a slot, 23 to 46 bytes a run. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "detect.h"
#include "buf.h"
#include "log.h"
#include "runidx.h"
#include "timeutil.h"

enum { PART_NONE, PART_QUEUED, PART_LOADED };

struct pidx {
    struct st_runidx *x;
    int32_t partition;
    int state;
    uint64_t queued_gen;
    /* a run's hash (0: empty) and its score side by side: a look-up
     * is one cache miss, not two */
    struct ent {
        uint64_t h;
        int64_t t;
    } *e;
    size_t n, cap;
    struct st_buf pend; /* the log's records queued: "<score> <member>\n" */
    size_t npend;
    int64_t swept_s; /* last sweep of old entries (0: never) */
    /* the log's records below compact_cutoff, and every record of a run
     * but its newest, are to be dropped (st_runidx_compact), once about a
     * quarter of them may be: records counts those read at the load and
     * appended since, stale those known to be superseded (a run's second
     * record, read or appended) or pruned */
    int compact_due;
    int64_t compact_cutoff;
    size_t records, stale;
    /* the owner epoch of another analyzer last logged as having claimed
     * the partition (compact_one tries again each batch until the next
     * checkpoint's fence stops this one: one line per claim) */
    int64_t claim_logged;
    /* the sweep of expired state (st_runidx_queue_sweep): its read, then
     * its deletions in the next flush */
    int sweep;            /* SWEEP_NONE, _QUEUED, _READ */
    uint64_t sweep_gen;   /* the load pass it was queued in */
    int64_t sweep_lo;     /* scores from here (inclusive) ... */
    int64_t sweep_hi;     /* ... to here (exclusive) were read */
    int64_t sweep_s;      /* last sweep flushed (0: never) */
    int sweep_full;       /* the read hit its limit: the next one at once */
    int64_t sweep_next;   /* then: where the next one starts */
    size_t sweep_max;     /* the limit of the next read */
    char **cand;          /* the members read, owned */
    int64_t *cscore;      /* and their scores in Redis */
    size_t ncand, capcand;
    struct st_buf sweepbuf; /* the sweep's read, as log records */
};

enum { SWEEP_NONE, SWEEP_QUEUED, SWEEP_READ };

/* At most this many runs per read of a sweep: a day's worth of expired
 * runs (a million) goes in steps, one per batch, never in one reply
 * (more only when that many share one score: see on_sweep) */
#define SWEEP_MAX 20000

/* Seconds between two checks when nothing else makes one due: how soon
 * an analyzer sees the marker another one moved (partitions added). */
#define CHECK_EVERY_S 10

struct st_runidx {
    const struct st_analyzer_conf *conf;
    struct pidx **parts; /* indexed by partition; NULL: never seen */
    size_t nparts;
    uint64_t gen;        /* load passes (st_runidx_queue_load) */
    int64_t size;
    int64_t since; /* the marker (st_runidx_set_since); -1: not known */
    int trusted;   /* state.ttl_s has passed since it (st_runidx_begin) */
    /* the check (st_runidx_check) */
    int check_due;            /* new, or partitions forgotten (an assignment) */
    int64_t checked_s;        /* wall time of the last check; 0: never */
    unsigned long reconnects; /* st_rpipe_reconnects() before the last check */
    int32_t topic_parts;      /* st_runidx_set_partitions; -1: not known */
    int32_t checked_parts;    /* topic_parts at the last check */
    char server[48];          /* Redis's run_id at the last check; "": none */
    int rebump;               /* a restart seen: the marker moves on again */
    /* <prefix>runs:moved_since as of the last check: the last time the
     * events topic gained partitions (0: never); the sweep keeps the runs
     * scored before it */
    int64_t moved_since;
    uint64_t rebump_seq;      /* once this checkpoint is in (_committed) */
    /* the detectors whose fields the sweep deletes (st_runidx_set_sweep;
     * not owned); none: this part sweeps nothing */
    const char *const *sweep_det;
    int nsweep_det;
    struct st_buf bkey, field;
    uint64_t flushes; /* st_runidx_flushes */
    void (*compact_read)(int32_t partition, void *arg); /* tests */
    void *compact_read_arg;
};

static void update_trust(struct st_runidx *x)
{
    x->trusted = x->since >= 0 && !x->rebump &&
                 (int64_t)time(NULL) - x->since >= x->conf->state_ttl_s;
}

void st_runidx_set_since(struct st_runidx *x, int64_t since)
{
    x->since = since;
    update_trust(x);
}

int st_runidx_trusted(const struct st_runidx *x)
{
    return x->trusted;
}

struct st_runidx *st_runidx_new(const struct st_analyzer_conf *conf)
{
    struct st_runidx *x = st_calloc(1, sizeof(*x));
    x->conf = conf;
    x->since = -1;
    x->check_due = 1;
    x->topic_parts = x->checked_parts = -1;
    x->flushes = 1;
    return x;
}

static void cand_clear(struct pidx *p)
{
    for (size_t i = 0; i < p->ncand; i++)
        free(p->cand[i]);
    p->ncand = 0;
    p->sweep = SWEEP_NONE;
}

static void pidx_clear(struct pidx *p)
{
    cand_clear(p);
    p->sweep_lo = p->sweep_s = 0;
    p->sweep_full = 0;
    p->sweep_max = SWEEP_MAX;
    st_buf_reset(&p->pend);
    p->npend = 0;
    p->compact_due = 0;
    p->records = p->stale = 0;
    st_buf_reset(&p->sweepbuf);
    free(p->e);
    p->x->size -= (int64_t)p->n;
    p->e = NULL;
    p->n = p->cap = 0;
    p->state = PART_NONE;
    p->swept_s = 0;
}

/* Every partition unloaded: each is read again when next seen. */
static void unload_all(struct st_runidx *x)
{
    for (size_t i = 0; i < x->nparts; i++)
        if (x->parts[i])
            pidx_clear(x->parts[i]);
}

void st_runidx_forget(struct st_runidx *x)
{
    unload_all(x);
    x->check_due = 1; /* an assignment follows: the count may have grown */
    x->flushes++;
}

uint64_t st_runidx_flushes(const struct st_runidx *x)
{
    return x->flushes;
}

void st_runidx_set_partitions(struct st_runidx *x, int32_t n)
{
    x->topic_parts = n > 0 ? n : -1;
}

void st_runidx_destroy(struct st_runidx *x)
{
    if (!x)
        return;
    for (size_t i = 0; i < x->nparts; i++) {
        if (!x->parts[i])
            continue;
        pidx_clear(x->parts[i]);
        st_buf_fini(&x->parts[i]->pend);
        st_buf_fini(&x->parts[i]->sweepbuf);
        free(x->parts[i]->cand);
        free(x->parts[i]->cscore);
        free(x->parts[i]);
    }
    free(x->parts);
    st_buf_fini(&x->bkey);
    st_buf_fini(&x->field);
    free(x);
}

int64_t st_runidx_size(const struct st_runidx *x)
{
    return x->size;
}

uint64_t st_runidx_hash(const char *task_id, const char *run_id)
{
    return st_hash_pair(task_id, run_id);
}

static struct pidx *part_get(struct st_runidx *x, int32_t partition, int create)
{
    if (partition < 0)
        st_fatal("run index: partition %" PRId32, partition);
    size_t i = (size_t)partition;
    if (i >= x->nparts) {
        if (!create)
            return NULL;
        size_t n = i + 1 > 2 * x->nparts ? i + 1 : 2 * x->nparts;
        x->parts = st_realloc(x->parts, n * sizeof(*x->parts));
        memset(x->parts + x->nparts, 0, (n - x->nparts) * sizeof(*x->parts));
        x->nparts = n;
    }
    if (!x->parts[i] && create) {
        x->parts[i] = st_calloc(1, sizeof(struct pidx));
        st_buf_init(&x->parts[i]->pend);
        st_buf_init(&x->parts[i]->sweepbuf);
        x->parts[i]->x = x;
        x->parts[i]->partition = partition;
        x->parts[i]->sweep_max = SWEEP_MAX;
    }
    return x->parts[i];
}

/* The slot of h: where it is, or the empty one where it would go. */
static size_t slot(const struct pidx *p, uint64_t h)
{
    size_t i = st_hash_slot(h, p->cap);
    while (p->e[i].h && p->e[i].h != h)
        i = (i + 1) & (p->cap - 1);
    return i;
}

/* Puts old[0..oldcap)'s entries (those scored at or past cutoff) into p's
 * table, new, of p->cap slots; frees old. */
static void rehash(struct pidx *p, struct ent *old, size_t oldcap, int64_t cutoff)
{
    p->e = st_calloc_table(p->cap, sizeof(*p->e));
    p->n = 0;
    for (size_t i = 0; i < oldcap; i++) {
        if (!old[i].h || old[i].t < cutoff)
            continue;
        p->e[slot(p, old[i].h)] = old[i];
        p->n++;
    }
    free(old);
}

static void grow(struct pidx *p)
{
    size_t oldcap = p->cap;
    p->cap = oldcap ? 2 * oldcap : 64;
    rehash(p, p->e, oldcap, INT64_MIN);
}

/* The score of h, or -1 when absent. */
static int64_t lookup(const struct pidx *p, uint64_t h)
{
    if (!p->cap)
        return -1;
    h = h ? h : 1;
    size_t i = slot(p, h);
    return p->e[i].h ? p->e[i].t : -1;
}

/* Sets h's score to t unless it is newer already. */
static void put(struct pidx *p, uint64_t h, int64_t t)
{
    h = h ? h : 1;
    if (10 * (p->n + 1) > 7 * p->cap) /* at most 70% full */
        grow(p);
    size_t i = slot(p, h);
    if (!p->e[i].h) {
        p->e[i].h = h;
        p->e[i].t = t;
        p->n++;
        p->x->size++;
    } else if (t > p->e[i].t) {
        p->e[i].t = t;
    }
}

/* Drops the entries scored below cutoff (rehashing what stays). */
static void prune(struct pidx *p, int64_t cutoff)
{
    size_t oldn = p->n;
    if (!p->cap)
        return;
    rehash(p, p->e, p->cap, cutoff);
    p->x->size -= (int64_t)(oldn - p->n);
}

/* Reads "<n>:" at *s (within end); returns -1 when it is not there. */
static long long read_len(const char **s, const char *end)
{
    long long n = 0;
    const char *p = *s;
    if (p >= end || *p < '0' || *p > '9')
        return -1;
    while (p < end && *p >= '0' && *p <= '9' && n < (1LL << 40))
        n = n * 10 + (*p++ - '0');
    if (p >= end || *p != ':')
        return -1;
    *s = p + 1;
    return n;
}

/* Splits a member "<lt>:<task>:<lr>:<run>" into new strings; -1 when it is
 * not one. */
static int member_split(const char *s, size_t len, char **task, char **run)
{
    const char *end = s + len;
    long long lt = read_len(&s, end);
    if (lt < 0 || lt >= end - s || s[lt] != ':')
        return -1;
    const char *t = s;
    s += lt + 1;
    long long lr = read_len(&s, end);
    if (lr < 0 || lr != end - s || memchr(t, '\0', (size_t)lt) || memchr(s, '\0', (size_t)lr))
        return -1;
    *task = st_malloc((size_t)lt + 1);
    memcpy(*task, t, (size_t)lt);
    (*task)[lt] = '\0';
    *run = st_malloc((size_t)lr + 1);
    memcpy(*run, s, (size_t)lr);
    (*run)[lr] = '\0';
    return 0;
}

/* The hash of a member "<lt>:<task>:<lr>:<run>"; 0 when it is not one
 * (a reply from Redis: validated, and what is not ours is ignored). */
static uint64_t member_hash(const char *s, size_t len)
{
    char *t, *r;
    if (member_split(s, len, &t, &r))
        return 0;
    uint64_t h = st_runidx_hash(t, r);
    free(t);
    free(r);
    return h ? h : 1;
}

/* Calls fn for each record "<score> <member>\n" of a log (the index's
 * string, runidx.h), in order; a record that is not one (no digits, no
 * member, no newline where its lengths end) is skipped to the next
 * newline: the log is only ever appended whole records, so none should
 * be, and one that is stands for no run. Returns the records skipped. */
static size_t log_each(const char *s, size_t len,
                       void (*fn)(void *arg, const char *m, size_t mlen, int64_t t), void *arg)
{
    const char *end = s + len;
    size_t bad = 0;
    while (s < end) {
        const char *rec = s;
        int64_t t = 0;
        int ok = s < end && *s >= '0' && *s <= '9';
        while (ok && s < end && *s >= '0' && *s <= '9' && t < INT64_MAX / 10)
            t = t * 10 + (*s++ - '0');
        ok = ok && s < end && *s == ' ';
        const char *m = ++s;
        /* the member's own lengths say where it ends */
        long long lt = ok ? read_len(&s, end) : -1;
        ok = lt >= 0 && lt < end - s && s[lt] == ':';
        if (ok) {
            s += lt + 1;
            long long lr = read_len(&s, end);
            ok = lr >= 0 && lr < end - s && s[lr] == '\n';
            if (ok)
                s += lr;
        }
        if (!ok) {
            const char *nl = memchr(rec, '\n', (size_t)(end - rec));
            s = nl ? nl + 1 : end;
            bad++;
            continue;
        }
        fn(arg, m, (size_t)(s - m), t);
        s++; /* the newline */
    }
    return bad;
}

/* Appends the record of member m (its run) scored t to b. */
static void log_add(struct st_buf *b, const char *m, size_t mlen, int64_t t)
{
    char score[ST_I64_LEN];
    size_t n = st_fmt_i64(score, t);
    st_buf_add(b, score, n);
    st_buf_addc(b, ' ');
    st_buf_add(b, m, mlen);
    st_buf_addc(b, '\n');
}

static void load_one(void *arg, const char *m, size_t mlen, int64_t t)
{
    struct pidx *p = arg;
    uint64_t h = member_hash(m, mlen);
    p->records++;
    if (h)
        put(p, h, t);
}

/* The sorted set's reply of a load (ZRANGE ... WITHSCORES): its runs join
 * the index. */
static int load_pairs(struct pidx *p, const redisReply *rep)
{
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements % 2)
        return -1;
    for (size_t i = 0; i + 1 < rep->elements; i += 2) {
        const redisReply *m = rep->element[i], *s = rep->element[i + 1];
        if (!m->str || !s->str)
            return -1;
        uint64_t h = member_hash(m->str, m->len);
        if (h)
            put(p, h, strtoll(s->str, NULL, 10));
    }
    return 0;
}

static int on_load_pairs(const redisReply *rep, void *arg)
{
    return load_pairs(arg, rep);
}

static int on_load_log(const redisReply *rep, void *arg)
{
    struct pidx *p = arg;
    if (rep->type == REDIS_REPLY_STRING)
        st_runidx_load_log(p->x, p->partition, rep->str, rep->len);
    else if (rep->type != REDIS_REPLY_NIL)
        return -1;
    p->state = PART_LOADED;
    return 0;
}

int st_runidx_load_reply(struct st_runidx *x, int32_t partition, const redisReply *rep)
{
    struct pidx *p = part_get(x, partition, 1);
    if (load_pairs(p, rep))
        return -1;
    p->state = PART_LOADED;
    return 0;
}

size_t st_runidx_load_log(struct st_runidx *x, int32_t partition, const char *log, size_t len)
{
    struct pidx *p = part_get(x, partition, 1);
    size_t n0 = p->n, r0 = p->records;
    size_t bad = log_each(log, len, load_one, p);
    /* records of a run read twice (or of one the sorted set had) */
    p->stale += (p->records - r0) - (p->n - n0) + bad;
    p->records += bad;
    if (bad)
        st_warn("run index of partition %" PRId32 ": %zu record(s) of its log are not a "
                "run's, ignored",
                partition, bad);
    p->state = PART_LOADED;
    return bad;
}

int st_runidx_queue_load(struct st_runidx *x, struct st_rpipe *rp, int32_t partition)
{
    struct pidx *p = part_get(x, partition, 1);
    if (p->state == PART_LOADED)
        return 0;
    /* queued in this pass: once is enough; in an earlier one: its round
     * trip failed before the reply came */
    if (p->state == PART_QUEUED && p->queued_gen == x->gen)
        return 0;
    p->state = PART_QUEUED;
    p->queued_gen = x->gen;
    /* the sorted set an older release wrote, then the log; loaded once the
     * log's reply is in (a failed round trip queues both again: a run read
     * twice keeps its newest score) */
    char *key = st_detect_index_key(x->conf, partition);
    const char *argv[] = {"ZRANGE", key, "0", "-1", "WITHSCORES"};
    st_rpipe_cmd(rp, on_load_pairs, p, 5, argv);
    free(key);
    key = st_detect_index_log_key(x->conf, partition);
    const char *get[] = {"GET", key};
    st_rpipe_cmd(rp, on_load_log, p, 2, get);
    free(key);
    return 1;
}

void st_runidx_begin(struct st_runidx *x)
{
    x->gen++;
    update_trust(x);
}

int st_runidx_has(const struct st_runidx *x, int32_t partition, uint64_t h)
{
    const struct pidx *p =
        partition >= 0 && (size_t)partition < x->nparts ? x->parts[partition] : NULL;
    if (!x->trusted || !p || p->state != PART_LOADED)
        return 1;
    return lookup(p, h) >= 0;
}

void st_runidx_note(struct st_runidx *x, int32_t partition, const char *task_id,
                    const char *run_id, uint64_t h, int expired, int64_t now)
{
    struct pidx *p = part_get(x, partition, 1);
    int64_t t = lookup(p, h);
    if (t >= 0 && (!expired || t >= now))
        return;
    put(p, h, now);
    p->records++;
    p->stale += t >= 0; /* its earlier record is superseded */
    /* "<score> <run>\n", the run as the state keys name it (detect.c's
     * "<lt>:<task>:<lr>:<run>:", its last colon the record's newline);
     * once per run and checkpoint: no printf */
    char num[ST_I64_LEN];
    st_buf_add(&p->pend, num, st_fmt_i64(num, now));
    st_buf_addc(&p->pend, ' ');
    st_detect_run_field_prefix_add(&p->pend, task_id, run_id);
    p->pend.data[p->pend.len - 1] = '\n';
    p->npend++;
}

void st_runidx_set_sweep(struct st_runidx *x, const char *const *detectors, int n)
{
    x->sweep_det = detectors;
    x->nsweep_det = n;
}

/* A run's newest score among the records of a sweep's read: an
 * open-addressing table keyed by the member's hash (the member compared
 * too), the members pointing into the read. */
struct newest {
    struct nent {
        uint64_t h;
        int64_t t;
        const char *m;
        size_t len;
    } *e;
    size_t n, cap;
};

static void newest_put(void *arg, const char *m, size_t len, int64_t t)
{
    struct newest *w = arg;
    if (10 * (w->n + 1) > 7 * w->cap) {
        struct nent *old = w->e;
        size_t oldcap = w->cap;
        w->cap = oldcap ? 2 * oldcap : 1024;
        w->e = st_calloc_table(w->cap, sizeof(*w->e));
        for (size_t i = 0; i < oldcap; i++) {
            if (!old[i].m)
                continue;
            size_t k = st_hash_slot(old[i].h, w->cap);
            while (w->e[k].m)
                k = (k + 1) & (w->cap - 1);
            w->e[k] = old[i];
        }
        free(old);
    }
    uint64_t h = 0xcbf29ce484222325ULL;
    for (size_t i = 0; i < len; i++)
        h = (h ^ (unsigned char)m[i]) * 0x100000001b3ULL;
    size_t k = st_hash_slot(h, w->cap);
    while (w->e[k].m && !(w->e[k].h == h && w->e[k].len == len && !memcmp(w->e[k].m, m, len)))
        k = (k + 1) & (w->cap - 1);
    if (!w->e[k].m) {
        w->e[k] = (struct nent){h, t, m, len};
        w->n++;
    } else if (t > w->e[k].t) {
        w->e[k].t = t;
    }
}

static int by_score(const void *a, const void *b)
{
    const struct nent *x = a, *y = b;
    if (x->t != y->t)
        return x->t < y->t ? -1 : 1;
    return x->len != y->len ? (x->len < y->len ? -1 : 1) : memcmp(x->m, y->m, x->len);
}

/* The sorted set's part of a sweep's read (every entry, WITHSCORES): kept
 * as log records until the log's part comes. */
static int on_sweep_pairs(const redisReply *rep, void *arg)
{
    struct pidx *p = arg;
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements % 2)
        return -1;
    st_buf_reset(&p->sweepbuf);
    for (size_t i = 0; i + 1 < rep->elements; i += 2) {
        const redisReply *m = rep->element[i], *sc = rep->element[i + 1];
        if (m->type != REDIS_REPLY_STRING || sc->type != REDIS_REPLY_STRING)
            return -1;
        if (memchr(m->str, '\n', m->len))
            continue; /* not a run's */
        log_add(&p->sweepbuf, m->str, m->len, strtoll(sc->str, NULL, 10));
    }
    return 0;
}

/* The log's part: each run's newest score, over both parts, and the
 * runs whose newest is within [sweep_lo, sweep_hi), oldest first, at most
 * sweep_max of them -- what ZRANGEBYSCORE ... LIMIT read from the sorted
 * set alone. A run written again after an old record has a newer one
 * (here or in the set), so an old record alone does not make it a
 * candidate. */
static int on_sweep_log(const redisReply *rep, void *arg)
{
    struct pidx *p = arg;
    if (rep->type != REDIS_REPLY_STRING && rep->type != REDIS_REPLY_NIL)
        return -1;
    if (rep->type == REDIS_REPLY_STRING)
        st_buf_add(&p->sweepbuf, rep->str, rep->len);
    struct newest w = {0};
    log_each(p->sweepbuf.data ? p->sweepbuf.data : "", p->sweepbuf.len, newest_put, &w);
    size_t n = 0;
    for (size_t i = 0; i < w.cap; i++)
        if (w.e[i].m && w.e[i].t >= p->sweep_lo && w.e[i].t < p->sweep_hi)
            w.e[n++] = w.e[i];
    qsort(w.e, n, sizeof(*w.e), by_score);
    cand_clear(p);
    size_t take = n < p->sweep_max ? n : p->sweep_max;
    if (take > p->capcand) {
        p->capcand = take;
        p->cand = st_realloc(p->cand, p->capcand * sizeof(*p->cand));
        p->cscore = st_realloc(p->cscore, p->capcand * sizeof(*p->cscore));
    }
    for (size_t i = 0; i < take; i++) {
        p->cscore[p->ncand] = w.e[i].t;
        p->cand[p->ncand++] = st_strndup(w.e[i].m, w.e[i].len);
    }
    /* cut short at the limit: the next read starts at the last score read
     * (its runs read again: harmless), or, when every run read had the
     * first score, at the same place with twice the limit -- every read
     * makes progress */
    p->sweep_full = n >= p->sweep_max;
    if (p->sweep_full) {
        int64_t last = take ? w.e[take - 1].t : p->sweep_lo;
        p->sweep_next = last > p->sweep_lo ? last : p->sweep_lo;
        if (last <= p->sweep_lo)
            p->sweep_max *= 2;
    } else {
        p->sweep_max = SWEEP_MAX;
    }
    free(w.e);
    st_buf_reset(&p->sweepbuf);
    p->sweep = SWEEP_READ;
    return 0;
}

/* Queues partition p's read when its sweep is due (st_runidx_queue_sweeps) */
static int queue_sweep(struct st_runidx *x, struct pidx *p, struct st_rpipe *rp, int64_t now)
{
    int64_t ttl = x->conf->state_ttl_s, every = ttl / 10 > 0 ? ttl / 10 : 1;
    if (p->state != PART_LOADED || p->sweep == SWEEP_READ)
        return 0;
    if (p->sweep == SWEEP_QUEUED && p->sweep_gen == x->gen)
        return 0;
    if (p->sweep == SWEEP_NONE && p->sweep_s && !p->sweep_full && now - p->sweep_s < every)
        return 0;
    /* the first sweep after an assignment from the start (what an earlier
     * owner left unswept), each next one where the last one ended: the
     * flush removes no entry this part has not swept past */
    int64_t lo = p->sweep_lo;
    p->sweep_hi = now - ttl;
    if (p->sweep_hi <= lo) {
        p->sweep_s = now;
        p->sweep_full = 0;
        return 0;
    }
    p->sweep = SWEEP_QUEUED;
    p->sweep_gen = x->gen;
    /* the whole index, both forms: a run's newest score decides */
    char *key = st_detect_index_key(x->conf, p->partition);
    const char *argv[] = {"ZRANGE", key, "0", "-1", "WITHSCORES"};
    st_rpipe_cmd(rp, on_sweep_pairs, p, 5, argv);
    free(key);
    key = st_detect_index_log_key(x->conf, p->partition);
    const char *get[] = {"GET", key};
    st_rpipe_cmd(rp, on_sweep_log, p, 2, get);
    free(key);
    return 1;
}

int st_runidx_queue_sweeps(struct st_runidx *x, struct st_rpipe *rp, int64_t now)
{
    int queued = 0;
    if (!x->nsweep_det)
        return 0;
    for (size_t i = 0; i < x->nparts; i++)
        if (x->parts[i])
            queued |= queue_sweep(x, x->parts[i], rp, now);
    return queued;
}

/* The deletions of a sweep read: this part's detectors' fields of each
 * run read whose score its memory still holds below the read's end (a run
 * this part wrote since has a score of then, and its state is new), one
 * HDEL per bucket. Before this checkpoint's state writes (the flush goes
 * first), after its index entries' (a run written in this batch was noted
 * already). The index entries stay: another part may have written the run
 * since the read (its fields are its own, and its entry its state's), and
 * the ZREMRANGEBYSCORE of entries twice as old, on Redis's scores, removes
 * them. */
static void sweep_flush(struct st_runidx *x, struct pidx *p, struct st_checkpoint *ckpt,
                        int64_t now)
{
    /* the runs to delete, grouped by bucket with a counting sort */
    size_t start[ST_DETECT_RUN_BUCKETS + 1] = {0};
    size_t n = 0;
    uint64_t *hs = st_malloc((p->ncand + 1) * sizeof(*hs));
    char **ts = st_malloc((p->ncand + 1) * sizeof(*ts)), **rs = st_malloc((p->ncand + 1) * sizeof(*rs));
    for (size_t i = 0; i < p->ncand; i++) {
        char *t, *r;
        if (member_split(p->cand[i], strlen(p->cand[i]), &t, &r))
            continue; /* not ours */
        uint64_t h = st_runidx_hash(t, r);
        int64_t score = lookup(p, h);
        /* kept: written by this part since the read (its score is of
         * then); or last written before the events topic gained
         * partitions (x->moved_since), whose run may have moved to a
         * partition another analyzer writes it from, in the same fields
         * (left to the bucket's TTL: a bounded, one-time leak, against
         * deleting a live state). Absent from memory: this
         * part has not written it since its load (pruned, or entered by
         * the other part of this process), and Redis's score, below the
         * cut, is newer than any write of ours. */
        if ((score >= 0 && score >= p->sweep_hi) || p->cscore[i] < x->moved_since) {
            free(t);
            free(r);
            continue;
        }
        hs[n] = h;
        ts[n] = t;
        rs[n++] = r;
        start[st_detect_run_bucket(h) + 1]++;
    }
    for (size_t b = 0; b < ST_DETECT_RUN_BUCKETS; b++)
        start[b + 1] += start[b];
    size_t at[ST_DETECT_RUN_BUCKETS], *order = st_malloc((n + 1) * sizeof(*order));
    memcpy(at, start, sizeof(at));
    for (size_t i = 0; i < n; i++)
        order[at[st_detect_run_bucket(hs[i])]++] = i;
    struct st_buf names;
    st_buf_init(&names);
    size_t nd = (size_t)x->nsweep_det;
    size_t *offs = st_malloc((n * nd + 1) * sizeof(*offs));
    for (size_t b = 0; b < ST_DETECT_RUN_BUCKETS; b++) {
        size_t first = start[b], last = start[b + 1];
        if (first == last)
            continue;
        st_buf_reset(&names);
        size_t k = 0;
        for (size_t j = first; j < last; j++)
            for (size_t d = 0; d < nd; d++) {
                size_t i = order[j];
                st_detect_run_field_buf(&x->field, ts[i], rs[i], x->sweep_det[d]);
                offs[k++] = names.len;
                st_buf_add(&names, x->field.data, x->field.len + 1);
            }
        const char **argv = st_malloc((k + 2) * sizeof(*argv));
        argv[0] = "HDEL";
        argv[1] = st_detect_run_bucket_key_buf(&x->bkey, x->conf, hs[order[first]]);
        for (size_t j = 0; j < k; j++)
            argv[j + 2] = names.data + offs[j];
        st_checkpoint_cmd(ckpt, (int)k + 2, argv);
        free(argv);
    }
    for (size_t i = 0; i < n; i++) {
        free(ts[i]);
        free(rs[i]);
    }
    free(hs);
    free(ts);
    free(rs);
    free(order);
    free(offs);
    st_buf_fini(&names);
    p->sweep_lo = p->sweep_full ? p->sweep_next : p->sweep_hi;
    p->sweep_s = now;
    cand_clear(p);
}

void st_runidx_flush(struct st_runidx *x, struct st_checkpoint *ckpt, int64_t now)
{
    x->flushes++;
    int64_t ttl = x->conf->state_ttl_s, every = ttl / 10 > 0 ? ttl / 10 : 1;
    for (size_t i = 0; i < x->nparts; i++) {
        struct pidx *p = x->parts[i];
        if (!p)
            continue;
        char *key = NULL;
        if (p->npend) { /* one APPEND of every record: no entry of its own
                         * in Redis per run (a ZADD each cost Redis as much
                         * as the run's state) */
            char *lkey = st_detect_index_log_key(x->conf, p->partition);
            const char *argv[] = {"APPEND", lkey, p->pend.data};
            size_t lens[] = {6, strlen(lkey), p->pend.len};
            st_checkpoint_cmd_lens(ckpt, 3, argv, lens);
            free(lkey);
            st_buf_reset(&p->pend);
            p->npend = 0;
        }
        if (p->sweep == SWEEP_READ)
            sweep_flush(x, p, ckpt, now);
        /* entries whose state expired long ago: only a loaded partition,
         * and rarely (a sweep walks the whole sorted set's tail) */
        if (p->state == PART_LOADED && (!p->swept_s || now - p->swept_s >= every)) {
            char below[24];
            int64_t cutoff = now - 2 * ttl;
            /* never past what this part has swept: the fields of an entry
             * removed unswept would stay */
            if (x->nsweep_det && cutoff > p->sweep_lo)
                cutoff = p->sweep_lo;
            snprintf(below, sizeof(below), "(%" PRId64, cutoff);
            if (!key)
                key = st_detect_index_key(x->conf, p->partition);
            /* the sorted set's old entries here; the log's at the next
             * batch's start (st_runidx_compact) */
            const char *argv[] = {"ZREMRANGEBYSCORE", key, "-inf", below};
            st_checkpoint_cmd(ckpt, 4, argv);
            size_t n0 = p->n;
            prune(p, cutoff);
            p->stale += n0 - p->n;
            p->compact_due = p->stale > 0 && 4 * p->stale >= p->records;
            p->compact_cutoff = cutoff;
            p->swept_s = now;
        }
        free(key);
    }
}

/* The marker: one synchronous command at a time on p. */
struct scan {
    const struct st_analyzer_conf *conf;
    char cursor[32];
    long keys;  /* keys the SCAN returned */
    char *first; /* the first state key found (owned) */
};

/* A SCAN reply: [cursor, [key, ...]]. */
static int on_scan(const redisReply *rep, void *arg)
{
    struct scan *sc = arg;
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
        rep->element[0]->type != REDIS_REPLY_STRING ||
        rep->element[0]->len >= sizeof(sc->cursor) ||
        rep->element[1]->type != REDIS_REPLY_ARRAY)
        return -1;
    memcpy(sc->cursor, rep->element[0]->str, rep->element[0]->len);
    sc->cursor[rep->element[0]->len] = '\0';
    const redisReply *keys = rep->element[1];
    for (size_t i = 0; i < keys->elements; i++) {
        const redisReply *k = keys->element[i];
        if (k->type != REDIS_REPLY_STRING)
            return -1;
        sc->keys++;
        if (!sc->first && st_detect_is_state_key(sc->conf, k->str, k->len))
            sc->first = st_strndup(k->str, k->len);
    }
    return 0;
}

struct marker_reply {
    int nil;
    int64_t v;
    int bad;
};

static int on_get(const redisReply *rep, void *arg)
{
    struct marker_reply *m = arg;
    m->nil = rep->type == REDIS_REPLY_NIL;
    if (m->nil)
        return 0;
    if (rep->type != REDIS_REPLY_STRING)
        return -1;
    char *end;
    errno = 0;
    long long v = strtoll(rep->str, &end, 10);
    m->bad = errno || end == rep->str || *end || v < 0;
    m->v = v;
    return 0;
}

/* EXEC's reply into arg (int): 1 when the transaction ran, 0 when a key
 * it WATCHed was written first (a nil reply). */
static int on_exec(const redisReply *rep, void *arg)
{
    int *ran = arg;
    if (rep->type != REDIS_REPLY_NIL && rep->type != REDIS_REPLY_ARRAY)
        return -1;
    *ran = rep->type == REDIS_REPLY_ARRAY;
    return 0;
}

/* Moves the marker on to now, never back: every writer after the first
 * SET NX (st_runidx_marker) means "the index is complete only from now
 * on", so the later of two times is the one that holds, and one analyzer
 * whose clock is behind another's must not undo the other's move (its
 * index would be trusted early by the skew). A marker that is absent or
 * not a time is overwritten. A check-and-set (not on the hot path: a
 * check or a restart seen): WATCH and GET, then MULTI, SET, EXEC only when
 * the value is older than now; EXEC does not run when another analyzer
 * wrote the marker in between, and the marker is read again. The
 * connection is the same from WATCH to EXEC: st_rpipe_exec reconnects only
 * at the start of an exec after a failed one, and a failed exec ends this.
 * Synchronous on p (nothing queued). *since gets the marker's value after
 * (now, or the later time found). Returns 0, or -1 with errstr set. */
static int marker_raise(struct st_rpipe *p, const char *marker, int64_t now, int64_t *since,
                        char *errstr, size_t errsz)
{
    char value[24];
    snprintf(value, sizeof(value), "%" PRId64, now);
    for (int tries = 0; tries < 16; tries++) {
        struct marker_reply m = {0};
        int ran = 0;
        const char *watch[] = {"WATCH", marker}, *get[] = {"GET", marker};
        st_rpipe_cmd(p, NULL, NULL, 2, watch);
        st_rpipe_cmd(p, on_get, &m, 2, get);
        if (st_rpipe_exec(p, errstr, errsz))
            return -1;
        if (!m.nil && !m.bad && m.v >= now) {
            const char *unwatch[] = {"UNWATCH"};
            st_rpipe_cmd(p, NULL, NULL, 1, unwatch);
            if (st_rpipe_exec(p, errstr, errsz))
                return -1;
            *since = m.v;
            return 0;
        }
        const char *multi[] = {"MULTI"}, *set[] = {"SET", marker, value}, *exec[] = {"EXEC"};
        st_rpipe_cmd(p, NULL, NULL, 1, multi);
        st_rpipe_cmd(p, NULL, NULL, 3, set);
        st_rpipe_cmd(p, on_exec, &ran, 1, exec);
        if (st_rpipe_exec(p, errstr, errsz))
            return -1;
        if (ran) {
            *since = now;
            return 0;
        }
    }
    snprintf(errstr, errsz, "run index marker \"%s\" written by others in each of 16 tries",
             marker);
    return -1;
}

/* The log's compaction: its runs' newest records, those at or past
 * cutoff, in place of the log, by a check-and-set. */
struct compact {
    struct newest w;
    int nil;
    char *log; /* the log read (owned) */
    size_t len;
};

static int on_compact_get(const redisReply *rep, void *arg)
{
    struct compact *c = arg;
    c->nil = rep->type == REDIS_REPLY_NIL;
    if (c->nil)
        return 0;
    if (rep->type != REDIS_REPLY_STRING)
        return -1;
    c->log = st_malloc(rep->len + 1);
    memcpy(c->log, rep->str, rep->len);
    c->log[rep->len] = '\0';
    c->len = rep->len;
    return 0;
}

/* An owner epoch's GET: its value, -1 when absent or not a number. */
static int on_epoch(const redisReply *rep, void *arg)
{
    int64_t *v = arg;
    *v = -1;
    if (rep->type == REDIS_REPLY_STRING) {
        char *end;
        errno = 0;
        long long n = strtoll(rep->str, &end, 10);
        if (!errno && end != rep->str && !*end)
            *v = n;
    } else if (rep->type != REDIS_REPLY_NIL) {
        return -1;
    }
    return 0;
}

static int compact_one(struct st_runidx *x, struct pidx *p, struct st_rpipe *rp,
                       struct st_fence *fence, char *errstr, size_t errsz)
{
    int64_t ours = 0;
    if (fence && st_fence_epoch(fence, p->partition, &ours))
        return 0; /* not held (revoked meanwhile): its new owner's */
    char *key = st_detect_index_log_key(x->conf, p->partition);
    char *ekey = fence ? st_detect_epoch_key(x->conf, p->partition) : NULL;
    int rc = 0;
    for (int tries = 0; tries < 4; tries++) {
        struct compact c = {0};
        int ran = 0;
        int64_t epoch = ours;
        const char *watch[] = {"WATCH", key, ekey}, *get[] = {"GET", key};
        st_rpipe_cmd(rp, NULL, NULL, ekey ? 3 : 2, watch);
        st_rpipe_cmd(rp, on_compact_get, &c, 2, get);
        if (ekey) {
            const char *eget[] = {"GET", ekey};
            st_rpipe_cmd(rp, on_epoch, &epoch, 2, eget);
        }
        if ((rc = st_rpipe_exec(rp, errstr, errsz)) != 0) {
            free(c.log);
            break;
        }
        if (x->compact_read)
            x->compact_read(p->partition, x->compact_read_arg);
        if (epoch != ours) {
            /* another analyzer claimed the partition: the log is its
             * owner's to compact; the checkpoints find the loss (fence.h) */
            free(c.log);
            const char *unwatch[] = {"UNWATCH"};
            st_rpipe_cmd(rp, NULL, NULL, 1, unwatch);
            rc = st_rpipe_exec(rp, errstr, errsz);
            if (!rc && p->claim_logged != epoch) {
                p->claim_logged = epoch;
                st_info("run index: partition %" PRId32 " claimed by another analyzer "
                        "(owner epoch %" PRId64 ", ours %" PRId64 "): its log not compacted",
                        p->partition, epoch, ours);
            }
            break;
        }
        size_t records = 0;
        struct st_buf out;
        st_buf_init(&out);
        if (!c.nil) {
            for (const char *q = c.log; (q = memchr(q, '\n', c.len - (size_t)(q - c.log)));
                 q++)
                records++;
            log_each(c.log, c.len, newest_put, &c.w);
            for (size_t i = 0; i < c.w.cap; i++)
                if (c.w.e[i].m && c.w.e[i].t >= p->compact_cutoff)
                    log_add(&out, c.w.e[i].m, c.w.e[i].len, c.w.e[i].t);
        }
        size_t kept = 0;
        for (size_t i = 0; i < c.w.cap; i++)
            kept += c.w.e[i].m && c.w.e[i].t >= p->compact_cutoff;
        free(c.w.e);
        free(c.log);
        if (kept == records) { /* nothing to drop */
            st_buf_fini(&out);
            const char *unwatch[] = {"UNWATCH"};
            st_rpipe_cmd(rp, NULL, NULL, 1, unwatch);
            rc = st_rpipe_exec(rp, errstr, errsz);
            if (!rc) {
                p->compact_due = 0;
                p->records = records;
                p->stale = 0;
            }
            break;
        }
        const char *multi[] = {"MULTI"}, *exec[] = {"EXEC"};
        st_rpipe_cmd(rp, NULL, NULL, 1, multi);
        if (out.len) {
            const char *set[] = {"SET", key, out.data};
            st_rpipe_cmd(rp, NULL, NULL, 3, set);
        } else {
            const char *del[] = {"DEL", key};
            st_rpipe_cmd(rp, NULL, NULL, 2, del);
        }
        st_rpipe_cmd(rp, on_exec, &ran, 1, exec);
        rc = st_rpipe_exec(rp, errstr, errsz);
        st_buf_fini(&out);
        if (rc)
            break;
        if (ran) { /* else appended meanwhile: read it again */
            p->compact_due = 0;
            p->records = kept;
            p->stale = 0;
            break;
        }
    }
    free(ekey);
    free(key);
    return rc ? -1 : 0;
}

void st_runidx_on_compact_read(struct st_runidx *x, void (*fn)(int32_t partition, void *arg),
                               void *arg)
{
    x->compact_read = fn;
    x->compact_read_arg = arg;
}

int st_runidx_compact(struct st_runidx *x, struct st_rpipe *rp, struct st_fence *fence,
                      char *errstr, size_t errsz)
{
    for (size_t i = 0; i < x->nparts; i++) {
        struct pidx *p = x->parts[i];
        if (p && p->state == PART_LOADED && p->compact_due &&
            compact_one(x, p, rp, fence, errstr, errsz))
            return -1;
    }
    return 0;
}

/* A glob that matches exactly the keys beginning with prefix. */
static char *prefix_glob(const char *prefix)
{
    size_t n = strlen(prefix);
    char *g = st_malloc(2 * n + 2), *o = g;
    for (const char *s = prefix; *s; s++) {
        if (strchr("*?[]\\", *s))
            *o++ = '\\';
        *o++ = *s;
    }
    *o++ = '*';
    *o = '\0';
    return g;
}

int st_runidx_marker(struct st_rpipe *p, const struct st_analyzer_conf *conf,
                     int64_t *since, char *errstr, size_t errsz)
{
    char *key = st_detect_marker_key(conf), *glob = NULL;
    struct scan sc = {.conf = conf, .cursor = "0"};
    struct marker_reply m = {0};
    const char *get[] = {"GET", key};
    int rc = -1;

    st_rpipe_cmd(p, on_get, &m, 2, get);
    if (st_rpipe_exec(p, errstr, errsz))
        goto out;
    if (m.nil) {
        /* once per prefix: on the first start with the index */
        int64_t t0 = st_time_mono_us(), timed_out = 0;
        glob = prefix_glob(conf->redis_prefix);
        do {
            const char *scan[] = {"SCAN", sc.cursor, "MATCH", glob, "COUNT", "10000"};
            st_rpipe_cmd(p, on_scan, &sc, 6, scan);
            if (st_rpipe_exec(p, errstr, errsz))
                goto out;
            timed_out = st_time_mono_us() - t0 > 10000000;
        } while (!sc.first && strcmp(sc.cursor, "0") && !timed_out);
        char value[24];
        int64_t now = (int64_t)time(NULL);
        snprintf(value, sizeof(value), "%" PRId64, sc.first || timed_out ? now : 0);
        if (sc.first)
            st_info("run index: no marker \"%s\"; run state found (\"%s\", after %ld "
                    "keys, %" PRId64 " ms): an upgrade, runs the index does not hold "
                    "are loaded until state.ttl_s (%" PRId64 " s) has passed",
                    key, sc.first, sc.keys, (st_time_mono_us() - t0) / 1000,
                    conf->state_ttl_s);
        else if (timed_out)
            st_warn("run index: no marker \"%s\"; no run state in the %ld keys scanned "
                    "in 10 s, the scan stopped: taken as an upgrade, runs the index does "
                    "not hold are loaded until state.ttl_s (%" PRId64 " s) has passed",
                    key, sc.keys, conf->state_ttl_s);
        else
            st_info("run index: no marker \"%s\"; no run state under prefix \"%s\" "
                    "(%ld keys scanned, %" PRId64 " ms): the index is complete",
                    key, conf->redis_prefix, sc.keys, (st_time_mono_us() - t0) / 1000);
        /* the first analyzer's value wins: all of them then agree */
        const char *set[] = {"SET", key, value, "NX"};
        st_rpipe_cmd(p, NULL, NULL, 4, set);
        st_rpipe_cmd(p, on_get, &m, 2, get);
        if (st_rpipe_exec(p, errstr, errsz))
            goto out;
        if (m.nil) {
            snprintf(errstr, errsz, "run index marker \"%s\" vanished after SET NX", key);
            goto out;
        }
    }
    if (m.bad) {
        snprintf(errstr, errsz, "run index marker \"%s\" in Redis is not a time", key);
        goto out;
    }
    *since = m.v;
    int64_t left = m.v + conf->state_ttl_s - (int64_t)time(NULL);
    if (left <= 0)
        st_info("run index: trusted (complete since %" PRId64 ", \"%s\")", m.v, key);
    else
        st_info("run index: not trusted for %" PRId64 " s more (complete since %" PRId64
                ", \"%s\"): runs it does not hold are loaded",
                left, m.v, key);
    rc = 0;
out:
    free(sc.first);
    free(glob);
    free(key);
    return rc;
}

/* The check (st_runidx_check): what can make the index miss a run whose
 * state Redis holds, read in one round trip, and the marker moved on when
 * one of them happened. */

/* "<prefix>runs:<what>": the run_id of the Redis the index was last
 * checked against ("server"), the events topic's partition count
 * ("partitions"). Neither matches a state key or an index key. */
static char *meta_key(const struct st_analyzer_conf *conf, const char *what)
{
    size_t n = strlen(conf->redis_prefix) + strlen(what) + sizeof("runs:");
    char *key = st_malloc(n);
    snprintf(key, n, "%sruns:%s", conf->redis_prefix, what);
    return key;
}

/* INFO server's run_id into arg (char[48]); "" when absent. */
static int on_info(const redisReply *rep, void *arg)
{
    char *out = arg;
    if (rep->type != REDIS_REPLY_STRING)
        return -1;
    out[0] = '\0';
    const char *at = strstr(rep->str, "run_id:");
    if (at && (at == rep->str || at[-1] == '\n')) {
        at += strlen("run_id:");
        size_t n = strcspn(at, "\r\n");
        if (n < 48) {
            memcpy(out, at, n);
            out[n] = '\0';
        }
    }
    return 0;
}

/* A string value into arg (char[48]); "" when nil or longer. */
static int on_str(const redisReply *rep, void *arg)
{
    char *out = arg;
    out[0] = '\0';
    if (rep->type == REDIS_REPLY_NIL)
        return 0;
    if (rep->type != REDIS_REPLY_STRING)
        return -1;
    if (rep->len < 48) {
        memcpy(out, rep->str, rep->len);
        out[rep->len] = '\0';
    }
    return 0;
}

static int check(struct st_runidx *x, struct st_rpipe *p, uint64_t seq, char *errstr,
                 size_t errsz)
{
    const struct st_analyzer_conf *conf = x->conf;
    char *marker = st_detect_marker_key(conf), *skey = meta_key(conf, "server"),
         *pkey = meta_key(conf, "partitions"), *mkey = meta_key(conf, "moved_since");
    char server[48] = "", recorded[48] = "";
    struct marker_reply m = {0}, count = {0}, moved = {0};
    unsigned long reconnects = st_rpipe_reconnects();
    int rc = -1;

    /* the server key before the marker: another analyzer sets the marker
     * before the server key, so whoever sees its server key sees its
     * marker */
    const char *info[] = {"INFO", "server"}, *gs[] = {"GET", skey}, *gm[] = {"GET", marker},
               *gp[] = {"GET", pkey}, *gv[] = {"GET", mkey};
    st_rpipe_cmd(p, on_info, server, 2, info);
    st_rpipe_cmd(p, on_str, recorded, 2, gs);
    st_rpipe_cmd(p, on_get, &m, 2, gm);
    st_rpipe_cmd(p, on_get, &count, 2, gp);
    st_rpipe_cmd(p, on_get, &moved, 2, gv);
    if (st_rpipe_exec(p, errstr, errsz))
        goto out;
    if (!moved.nil && !moved.bad && moved.v > x->moved_since)
        x->moved_since = moved.v;

    int64_t now = (int64_t)time(NULL);
    /* this part wrote to another Redis process than this one: what it
     * holds in memory may name runs whose entry that Redis lost */
    int restarted = server[0] && x->server[0] && strcmp(server, x->server);
    /* Redis restarted since an analyzer last checked: it may have lost
     * acknowledged writes (what it acknowledged to analyzers running then) */
    int lost = server[0] && recorded[0] && strcmp(server, recorded);
    /* more partitions than recorded; fewer is an analyzer whose metadata
     * is behind (Kafka never takes partitions away): ignored */
    int grown = x->topic_parts > 0 && !count.nil && (count.bad || count.v < x->topic_parts);
    const char *why = NULL;
    if (restarted || lost)
        why = "Redis restarted (its run_id changed): it may have lost acknowledged writes";
    else if (grown)
        why = "the events topic's partition count changed";
    else if (m.nil)
        why = "its marker was deleted";
    else if (m.bad)
        why = "its marker is not a time";
    int64_t since = m.nil || m.bad ? now : m.v;
    if (why) {
        /* on to now, never back (a later time set by an analyzer whose
         * clock is ahead stays), before the server key is recorded */
        if ((since < now || m.nil || m.bad) &&
            marker_raise(p, marker, now, &since, errstr, errsz))
            goto out;
        st_warn("run index of \"%s\" not trusted for state.ttl_s (%" PRId64 " s): %s "
                "(run_id %s, recorded %s; partitions %" PRId32 ", recorded %" PRId64 "); "
                "runs it does not hold are loaded",
                conf->redis_prefix, conf->state_ttl_s, why, server[0] ? server : "?",
                recorded[0] ? recorded : "none", x->topic_parts, count.nil ? -1 : count.v);
    }
    /* recorded after the marker (the order above): a crash between the two
     * only repeats the check */
    if (server[0] && strcmp(server, recorded)) {
        const char *set[] = {"SET", skey, server};
        st_rpipe_cmd(p, NULL, NULL, 3, set);
    }
    if (x->topic_parts > 0 && (count.nil || grown)) {
        char n[16];
        snprintf(n, sizeof(n), "%" PRId32, x->topic_parts);
        const char *set[] = {"SET", pkey, n};
        /* the time runs may have moved partition from: before the count
         * (a crash between the two repeats the check), and only on (an
         * analyzer whose clock is behind does not take it back much: the
         * sweep keeps the runs scored before it, the safe side) */
        if (grown) {
            char t[ST_I64_LEN];
            st_fmt_i64(t, now);
            const char *mv[] = {"SET", mkey, t};
            st_rpipe_cmd(p, NULL, NULL, 3, mv);
            if (now > x->moved_since)
                x->moved_since = now;
        }
        st_rpipe_cmd(p, NULL, NULL, 3, set);
    }
    if (st_rpipe_exec(p, errstr, errsz))
        goto out;

    if (restarted) {
        /* read every partition's index again; what a checkpoint built
         * before now wrote may still lack its entry (the runs this part
         * believed indexed): the marker moves on again once those
         * checkpoints are in (st_runidx_committed). A reconnection to the
         * same Redis process (same run_id) lost nothing it acknowledged:
         * nothing to read again. */
        unload_all(x);
        x->rebump = 1;
        x->rebump_seq = seq;
    }
    if (!server[0] && !x->checked_s)
        st_warn("run index: Redis's INFO server has no run_id: a Redis that restarts "
                "and loses writes cannot be told (runidx.h)");
    x->since = since;
    x->reconnects = reconnects;
    x->checked_s = now;
    x->checked_parts = x->topic_parts;
    x->check_due = 0;
    if (server[0])
        memcpy(x->server, server, sizeof(x->server));
    rc = 0;
out:
    free(marker);
    free(skey);
    free(pkey);
    free(mkey);
    return rc;
}

int st_runidx_check(struct st_runidx *x, struct st_rpipe *p, uint64_t seq, char *errstr,
                    size_t errsz)
{
    int64_t now = (int64_t)time(NULL);
    if (x->check_due || st_rpipe_reconnects() != x->reconnects ||
        x->topic_parts != x->checked_parts || now - x->checked_s >= CHECK_EVERY_S)
        return check(x, p, seq, errstr, errsz);
    return 0;
}

int st_runidx_committed(struct st_runidx *x, struct st_rpipe *p, uint64_t seq)
{
    char errstr[256];
    if (!x->rebump || seq < x->rebump_seq)
        return 0;
    char *marker = st_detect_marker_key(x->conf);
    int64_t since;
    /* never back: another analyzer may have moved it later already */
    int rc = marker_raise(p, marker, (int64_t)time(NULL), &since, errstr, sizeof(errstr));
    if (rc)
        st_warn("run index marker \"%s\" not moved on (tried again after the next "
                "commit): %s",
                marker, errstr);
    else {
        x->rebump = 0;
        x->since = since;
        update_trust(x);
    }
    free(marker);
    return rc;
}
