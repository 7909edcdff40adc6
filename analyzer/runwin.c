/* runwin.c: per-run event-time windows in Redis (see runwin.h).
 *
 * Keys, per run:
 *   <prefix><name>:w:<run>    sorted set: score event time, member
 *                             "source\x1fevent_id\x1fpayload"
 *   <prefix><name>:eps:<run>  hash: episode id -> "first last" (event time,
 *                             µs) of every episode not yet trimmed
 *
 * Before the PostgreSQL commit only what a redo computes again is written:
 * members keyed by event, and episodes, which only grow (first only
 * earlier, last only later). Episodes are kept, not replaced by the next
 * one: a redo of a batch that closed one episode and opened another must
 * still find the first for the triggers that extended it. Members and
 * episodes older than 2 x window + lateness behind the batch's newest
 * on-time event are removed by st_runwin_after_commit, once nothing can
 * redo the batch. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "log.h"
#include "runwin.h"
#include "window.h"

#define SEP '\x1f'

struct episode {
    char id[33];
    struct st_episode ep;
    int dirty; /* extended or opened in this batch */
};

struct run_state {
    char *task_id, *run_id;
    char *ep_key;
    char *w_key;
    uint64_t hash;
    int64_t max_ts; /* newest on-time event of the run in this batch */
    int loaded;
    struct episode *eps; /* the stored ones, then those opened here */
    size_t neps, capeps;
};

struct pending {
    struct st_runwin *w;
    const struct st_event *ev;
    struct run_state *run;
    int late;
    int ooo;
    st_runwin_cb cb;
    void *arg;
};

struct st_runwin {
    const struct st_analyzer_conf *conf;
    char *name;
    int64_t window_us, keep_us;
    struct run_state *runs;
    size_t nruns, capruns;
    int32_t *index; /* open addressing over runs, -1 = empty */
    size_t index_cap;
    struct pending *pend;
    size_t npend, cappend;
    struct st_buf member; /* reused for every event: no allocation per feed */
};

struct st_runwin *st_runwin_new(const struct st_analyzer_conf *conf,
                                const char *name, int64_t window_us, int64_t keep_us)
{
    struct st_runwin *w = st_calloc(1, sizeof(*w));
    w->conf = conf;
    w->name = st_strdup(name);
    w->window_us = window_us;
    w->keep_us = keep_us;
    return w;
}

void st_runwin_reset(struct st_runwin *w)
{
    for (size_t i = 0; i < w->nruns; i++) {
        free(w->runs[i].task_id);
        free(w->runs[i].run_id);
        free(w->runs[i].ep_key);
        free(w->runs[i].w_key);
        free(w->runs[i].eps);
    }
    w->nruns = 0;
    for (size_t i = 0; i < w->index_cap; i++)
        w->index[i] = -1;
    w->npend = 0;
}

void st_runwin_destroy(struct st_runwin *w)
{
    if (!w)
        return;
    st_runwin_reset(w);
    free(w->runs);
    free(w->index);
    free(w->pend);
    st_buf_fini(&w->member);
    free(w->name);
    free(w);
}

void st_runwin_begin(struct st_runwin *w, size_t nevents)
{
    /* sized once per batch: callbacks hold pointers into both arrays */
    if (w->capruns < nevents) {
        w->runs = st_realloc(w->runs, nevents * sizeof(*w->runs));
        w->capruns = nevents;
        w->pend = st_realloc(w->pend, nevents * sizeof(*w->pend));
        w->cappend = nevents;
    }
    if (w->index_cap < 2 * nevents) {
        size_t cap = 64;
        while (cap < 2 * nevents)
            cap *= 2;
        w->index = st_realloc(w->index, cap * sizeof(*w->index));
        w->index_cap = cap;
        for (size_t i = 0; i < cap; i++)
            w->index[i] = -1;
    }
}

static uint64_t run_hash(const char *task, const char *run)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const unsigned char *p = (const unsigned char *)task; *p; p++)
        h = (h ^ *p) * 0x100000001b3ULL;
    h = (h ^ 0x1f) * 0x100000001b3ULL;
    for (const unsigned char *p = (const unsigned char *)run; *p; p++)
        h = (h ^ *p) * 0x100000001b3ULL;
    return h;
}

/* The run of ev in this batch, or NULL; *slot gets where it would go. */
static struct run_state *run_find(struct st_runwin *w, const struct st_event *ev,
                                  uint64_t h, size_t *slot)
{
    size_t mask = w->index_cap - 1, i = (size_t)h & mask;
    for (; w->index[i] >= 0; i = (i + 1) & mask) {
        struct run_state *r = &w->runs[w->index[i]];
        if (r->hash == h && !strcmp(r->run_id, ev->run_id) &&
            !strcmp(r->task_id, ev->task_id))
            return r;
    }
    *slot = i;
    return NULL;
}

static struct episode *episode_add(struct run_state *run, const char *id,
                                   int64_t first_us, int64_t last_us)
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

static int on_episodes(const redisReply *r, void *arg)
{
    struct run_state *run = arg;

    if (r->type != REDIS_REPLY_ARRAY)
        return -1;
    run->loaded = 1;
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        const char *k = r->element[i]->str, *v = r->element[i + 1]->str;
        long long first, last;
        if (!k || !v)
            return -1;
        if (strlen(k) != 32 || sscanf(v, "%lld %lld", &first, &last) != 2)
            continue; /* not ours: ignored, like a missing episode */
        episode_add(run, k, first, last);
    }
    return 0;
}

static int on_window(const redisReply *r, void *arg)
{
    struct pending *p = arg;
    struct st_runwin_view v = {p->ev, p->late, NULL, 0, p->w->window_us, p->ooo};
    int rc;

    if (r->type != REDIS_REPLY_ARRAY || r->elements % 2 || !p->run->loaded)
        return -1;
    v.n = r->elements / 2;
    struct st_runwin_member *m = st_calloc(v.n ? v.n : 1, sizeof(*m));
    for (size_t i = 0; i < v.n; i++) {
        const char *key = r->element[2 * i]->str, *score = r->element[2 * i + 1]->str;
        const char *a = key ? strchr(key, SEP) : NULL;
        const char *b = a ? strchr(a + 1, SEP) : NULL;
        if (!score || !b) {
            v.n = i;
            rc = -1;
            goto out;
        }
        m[i].ts_us = strtoll(score, NULL, 10);
        m[i].key = key;
        m[i].source = st_strndup(key, (size_t)(a - key));
        m[i].event_id = st_strndup(a + 1, (size_t)(b - a - 1));
        m[i].payload = b + 1;
    }
    v.m = m;
    rc = p->cb(p->arg, &v);
out:
    for (size_t i = 0; i < v.n; i++) {
        free(m[i].source);
        free(m[i].event_id);
    }
    free(m);
    return rc;
}

static struct run_state *run_get(struct st_runwin *w, struct st_detect_ctx *ctx,
                                 const struct st_event *ev)
{
    uint64_t h = run_hash(ev->task_id, ev->run_id);
    size_t slot;
    struct run_state *run = run_find(w, ev, h, &slot);
    if (run)
        return run;
    if (w->nruns == w->capruns)
        st_fatal("%s: fed more events than begin_batch announced", w->name);
    w->index[slot] = (int32_t)w->nruns;
    run = &w->runs[w->nruns++];
    memset(run, 0, sizeof(*run));
    run->hash = h;
    run->max_ts = INT64_MIN;
    run->task_id = st_strdup(ev->task_id);
    run->run_id = st_strdup(ev->run_id);
    run->ep_key = st_detect_key(ctx->conf, w->name, "eps", ev->task_id, ev->run_id);
    run->w_key = st_detect_key(ctx->conf, w->name, "w", ev->task_id, ev->run_id);
    const char *argv[] = {"HGETALL", run->ep_key};
    st_rpipe_cmd(ctx->redis, on_episodes, run, 2, argv);
    return run;
}

void st_runwin_feed(struct st_runwin *w, struct st_detect_ctx *ctx,
                    const struct st_event *ev, const char *payload, int add_only,
                    st_runwin_cb cb, void *arg)
{
    char ts[24], from[24], to[24];
    struct st_buf *member = &w->member;
    struct run_state *run = run_get(w, ctx, ev);

    snprintf(ts, sizeof(ts), "%" PRId64, ev->ts_us);
    st_buf_reset(member);
    st_buf_adds(member, ev->source_name);
    st_buf_addc(member, SEP);
    st_buf_adds(member, ev->event_id);
    st_buf_addc(member, SEP);
    st_buf_adds(member, payload);
    /* trimming happens once per run, after the commits; an old late event
     * must not trim what newer windows still need */
    int ooo = ctx->late || ctx->skewed; /* out of order: see every window */
    if (!ooo && ev->ts_us > run->max_ts)
        run->max_ts = ev->ts_us;

    const char *zadd[] = {"ZADD", run->w_key, ts, member->data};
    st_rpipe_cmd(ctx->redis, NULL, NULL, 4, zadd);
    if (!add_only) {
        if (w->npend == w->cappend)
            st_fatal("%s: fed more events than begin_batch announced", w->name);
        struct pending *p = &w->pend[w->npend++];
        p->w = w;
        p->ev = ev;
        p->run = run;
        p->late = ctx->late;
        p->ooo = ooo;
        p->cb = cb;
        p->arg = arg;
        snprintf(from, sizeof(from), "%" PRId64, ev->ts_us - w->window_us);
        snprintf(to, sizeof(to), "%" PRId64,
                 ooo ? ev->ts_us + w->window_us : ev->ts_us);
        const char *zrange[] = {"ZRANGEBYSCORE", run->w_key, from, to, "WITHSCORES"};
        st_rpipe_cmd(ctx->redis, on_window, p, 5, zrange);
    }
}

void st_runwin_episode(struct st_runwin *w, const struct st_runwin_view *v,
                       int64_t end_us, const struct st_runwin_member *opener,
                       char out[33])
{
    size_t slot;
    struct run_state *run = run_find(w, v->ev, run_hash(v->ev->task_id, v->ev->run_id),
                                     &slot);
    struct episode *e = NULL;
    if (!run)
        st_fatal("%s: episode of a run that was not fed", w->name);
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

void st_runwin_end_batch(struct st_runwin *w, struct st_detect_ctx *ctx)
{
    char ttl[24];
    struct st_buf val;

    st_buf_init(&val);
    snprintf(ttl, sizeof(ttl), "%" PRId64, ctx->conf->state_ttl_s);
    for (size_t i = 0; i < w->nruns; i++) {
        struct run_state *run = &w->runs[i];
        const char *wexpire[] = {"EXPIRE", run->w_key, ttl};
        st_rpipe_cmd(ctx->redis, NULL, NULL, 3, wexpire);
        int dirty = 0;
        for (size_t j = 0; j < run->neps; j++) {
            struct episode *e = &run->eps[j];
            if (!e->dirty)
                continue;
            st_buf_reset(&val);
            st_buf_printf(&val, "%" PRId64 " %" PRId64, e->ep.first_us, e->ep.last_us);
            const char *hset[] = {"HSET", run->ep_key, e->id, val.data};
            st_rpipe_cmd(ctx->redis, NULL, NULL, 4, hset);
            dirty = 1;
        }
        if (dirty) {
            const char *expire[] = {"EXPIRE", run->ep_key, ttl};
            st_rpipe_cmd(ctx->redis, NULL, NULL, 3, expire);
        }
    }
    st_buf_fini(&val);
}

void st_runwin_after_commit(struct st_runwin *w, struct st_detect_ctx *ctx)
{
    char trim[24];

    for (size_t i = 0; i < w->nruns; i++) {
        struct run_state *run = &w->runs[i];
        if (run->max_ts == INT64_MIN)
            continue; /* only late or skewed events: they trim nothing */
        int64_t oldest = run->max_ts - w->keep_us;
        snprintf(trim, sizeof(trim), "(%" PRId64, oldest);
        const char *zrem[] = {"ZREMRANGEBYSCORE", run->w_key, "-inf", trim};
        st_rpipe_cmd(ctx->redis, NULL, NULL, 4, zrem);
        /* no on-time trigger to come can continue an episode that ended
         * before the oldest member kept */
        for (size_t j = 0; j < run->neps; j++) {
            if (run->eps[j].ep.last_us >= oldest)
                continue;
            const char *hdel[] = {"HDEL", run->ep_key, run->eps[j].id};
            st_rpipe_cmd(ctx->redis, NULL, NULL, 3, hdel);
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
        return fn(arg, v, 0, v->n, ts); /* the reply is exactly that window */
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
        int self = v->late && !strcmp(v->m[i].source, v->ev->source_name) &&
                   !strcmp(v->m[i].event_id, v->ev->event_id);
        st_finding_add_event(f, v->m[i].source, v->m[i].event_id, self);
    }
}
