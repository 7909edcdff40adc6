/* denial_burst.c: many denied events from one run in a short event-time
 * window.
 *
 * Fires when, within any window of detect.denial_burst.window_s seconds of
 * event time, one run (task_id, run_id) has detect.denial_burst.threshold or
 * more events whose decision is deny. Severity is high when those events
 * name detect.denial_burst.high_targets or more distinct targets, medium
 * otherwise. Overlapping windows that fire form one episode and one finding.
 *
 * State in Redis, per run:
 *   <prefix>denial_burst:w:<run>   sorted set of the run's denials, scored by
 *                                  event time; the member names the event and
 *                                  its target, so adding an event twice is a
 *                                  no-op
 *   <prefix>denial_burst:ep:<run>  hash {id, first, last} of the open episode
 * For each denial one pipeline step adds it, trims what no window can reach,
 * and reads back the window ending at the event. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "detect.h"
#include "log.h"
#include "window.h"

#define NAME "denial_burst"
#define VERSION 1
#define SEP '\x1f' /* separates the parts of a member: never in valid ids */

/* One run's episode as the batch sees it: loaded from Redis by the first
 * denial of the run in the batch, updated in memory, written back at
 * end_batch. */
struct run_state {
    char *task_id, *run_id;
    char *ep_key;
    int loaded;  /* reply of HGETALL seen */
    int has_ep;
    int dirty;
    char ep_id[33];
    struct st_episode ep;
};

struct pending {
    struct db_state *st;
    const struct st_event *ev;
    struct run_state *run;
    int late;
};

struct db_state {
    const struct st_analyzer_conf *conf;
    struct st_findings *findings;
    struct run_state *runs;
    size_t nruns, capruns;
    struct pending *pend;
    size_t npend, cappend;
};

static void *db_create(const struct st_analyzer_conf *conf)
{
    struct db_state *st = st_calloc(1, sizeof(*st));
    st->conf = conf;
    return st;
}

static void db_reset(void *state)
{
    struct db_state *st = state;
    for (size_t i = 0; i < st->nruns; i++) {
        free(st->runs[i].task_id);
        free(st->runs[i].run_id);
        free(st->runs[i].ep_key);
    }
    st->nruns = 0;
    /* pending entries are freed in one go: the arrays are reused */
    st->npend = 0;
}

static void db_destroy(void *state)
{
    struct db_state *st = state;
    if (!st)
        return;
    db_reset(st);
    free(st->runs);
    free(st->pend);
    free(st);
}

static int on_episode(const redisReply *r, void *arg)
{
    struct run_state *run = arg;
    if (r->type != REDIS_REPLY_ARRAY)
        return -1;
    run->loaded = 1;
    const char *id = NULL, *first = NULL, *last = NULL;
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        const char *k = r->element[i]->str, *v = r->element[i + 1]->str;
        if (!k || !v)
            return -1;
        if (!strcmp(k, "id"))
            id = v;
        else if (!strcmp(k, "first"))
            first = v;
        else if (!strcmp(k, "last"))
            last = v;
    }
    if (id && first && last && strlen(id) == 32) {
        memcpy(run->ep_id, id, 33);
        run->ep.first_us = strtoll(first, NULL, 10);
        run->ep.last_us = strtoll(last, NULL, 10);
        run->has_ep = 1;
    }
    return 0;
}

/* One window that met the threshold: extend the run's episode (or open a
 * new one) and record the window's events as its evidence. m is sorted by
 * time; [lo, hi) are the window's members; end_us is its last event. */
static int db_trigger(struct pending *p, const redisReply *r,
                      const struct st_window_member *m, size_t lo, size_t hi,
                      int64_t end_us)
{
    struct db_state *st = p->st;
    const struct st_analyzer_conf *conf = st->conf;
    const struct st_event *ev = p->ev;
    struct run_state *run = p->run;
    int64_t window_us = conf->db_window_s * 1000000;
    size_t count, targets;

    st_window_count(m + lo, hi - lo, end_us - window_us, end_us, &count, &targets);
    if ((int64_t)count < conf->db_threshold)
        return 0;
    if (!run->has_ep || !st_episode_continues(&run->ep, end_us, window_us)) {
        /* the member that opens the window names the episode: the same
         * events give the same id whatever process sees them */
        st_finding_id(run->ep_id, NAME, ev->task_id, ev->run_id, r->element[2 * m[lo].idx]->str);
        run->ep.first_us = run->ep.last_us = end_us;
        run->has_ep = 1;
    }
    st_episode_extend(&run->ep, end_us);
    run->dirty = 1;

    char summary[256];
    enum st_severity sev =
        (int64_t)targets >= conf->db_high_targets ? ST_SEV_HIGH : ST_SEV_MEDIUM;
    snprintf(summary, sizeof(summary),
             "%zu denied events within %" PRId64 " s to %zu distinct target(s)", count,
             conf->db_window_s, targets);
    struct st_finding *f =
        st_findings_update(st->findings, run->ep_id, NAME, VERSION, sev, ev->task_id,
                           ev->run_id, m[lo].ts_us, end_us, summary);
    for (size_t i = lo; i < hi; i++) {
        const char *member = r->element[2 * m[i].idx]->str;
        const char *a = strchr(member, SEP);
        const char *b = a ? strchr(a + 1, SEP) : NULL;
        if (!a || !b)
            return -1;
        char *source = st_strndup(member, (size_t)(a - member));
        char *id = st_strndup(a + 1, (size_t)(b - a - 1));
        int is_self = p->late && !strcmp(source, ev->source_name) &&
                      !strcmp(id, ev->event_id);
        st_finding_add_event(f, source, id, is_self);
        free(source);
        free(id);
    }
    return 0;
}

/* The reply is ZRANGEBYSCORE ... WITHSCORES over [ts - window, ts], or, for
 * a late event, [ts - window, ts + window]: a late event also belongs to the
 * windows that end after it, which were evaluated before it came. */
static int on_window(const redisReply *r, void *arg)
{
    struct pending *p = arg;
    const struct st_analyzer_conf *conf = p->st->conf;
    int64_t window_us = conf->db_window_s * 1000000;
    int64_t ts = p->ev->ts_us;
    int rc = 0;

    if (r->type != REDIS_REPLY_ARRAY || r->elements % 2 || !p->run->loaded)
        return -1;
    size_t n = r->elements / 2;
    if ((int64_t)n < conf->db_threshold)
        return 0;
    struct st_window_member *m = st_malloc(n * sizeof(*m));
    for (size_t i = 0; i < n; i++) {
        const char *member = r->element[2 * i]->str;
        const char *score = r->element[2 * i + 1]->str;
        if (!member || !score) {
            free(m);
            return -1;
        }
        const char *t = strrchr(member, SEP);
        m[i].target = t ? t + 1 : "";
        m[i].ts_us = strtoll(score, NULL, 10);
        m[i].idx = i; /* Redis returns members sorted by score */
    }
    if (!p->late) {
        /* the reply is exactly the window ending at this event */
        rc = db_trigger(p, r, m, 0, n, ts);
    } else {
        /* every window ending at or after the late event holds it */
        size_t lo = 0;
        for (size_t e = 0; e < n && rc == 0; e++) {
            if (m[e].ts_us < ts)
                continue;
            if (e + 1 < n && m[e + 1].ts_us == m[e].ts_us)
                continue; /* equal times: one window, ending at the last */
            while (m[lo].ts_us < m[e].ts_us - window_us)
                lo++;
            rc = db_trigger(p, r, m, lo, e + 1, m[e].ts_us);
        }
    }
    free(m);
    return rc;
}

static struct run_state *run_get(struct db_state *st, struct st_detect_ctx *ctx,
                                 const struct st_event *ev)
{
    for (size_t i = 0; i < st->nruns; i++)
        if (!strcmp(st->runs[i].run_id, ev->run_id) &&
            !strcmp(st->runs[i].task_id, ev->task_id))
            return &st->runs[i];
    if (st->nruns == st->capruns) {
        /* run_state pointers are handed to callbacks: grow only between
         * batches, never while commands are queued */
        st_fatal("denial_burst: more than %zu runs in one batch", st->capruns);
    }
    struct run_state *run = &st->runs[st->nruns++];
    memset(run, 0, sizeof(*run));
    run->task_id = st_strdup(ev->task_id);
    run->run_id = st_strdup(ev->run_id);
    run->ep_key = st_detect_key(ctx->conf, NAME, "ep", ev->task_id, ev->run_id);
    const char *argv[] = {"HGETALL", run->ep_key};
    st_rpipe_cmd(ctx->redis, on_episode, run, 2, argv);
    return run;
}

static void db_begin_batch(void *state, size_t nevents)
{
    struct db_state *st = state;
    /* size both arrays for the whole batch up front: callbacks hold pointers */
    if (st->capruns < nevents) {
        st->runs = st_realloc(st->runs, nevents * sizeof(*st->runs));
        st->capruns = nevents;
        st->pend = st_realloc(st->pend, nevents * sizeof(*st->pend));
        st->cappend = nevents;
    }
}

static void db_feed(void *state, struct st_detect_ctx *ctx, const struct st_event *ev)
{
    struct db_state *st = state;
    const struct st_analyzer_conf *conf = st->conf;

    if (ev->decision != ST_DECISION_DENY)
        return;
    st->findings = ctx->findings;
    if (st->npend == st->cappend)
        st_fatal("denial_burst: fed more events than begin_batch announced");

    struct run_state *run = run_get(st, ctx, ev);
    struct pending *p = &st->pend[st->npend++];
    p->st = st;
    p->ev = ev;
    p->run = run;
    p->late = ctx->late;

    int64_t window_us = conf->db_window_s * 1000000;
    /* keep what a late event's window can still reach */
    int64_t keep_us = window_us * 2 + conf->lateness_s * 1000000;
    char *wkey = st_detect_key(conf, NAME, "w", ev->task_id, ev->run_id);
    char ts[24], from[24], trim[24], ttl[24];
    snprintf(ts, sizeof(ts), "%" PRId64, ev->ts_us);
    snprintf(from, sizeof(from), "%" PRId64, ev->ts_us - window_us);
    char to[24];
    snprintf(to, sizeof(to), "%" PRId64, ctx->late ? ev->ts_us + window_us : ev->ts_us);
    snprintf(trim, sizeof(trim), "(%" PRId64, ev->ts_us - keep_us);
    snprintf(ttl, sizeof(ttl), "%" PRId64, conf->state_ttl_s);
    struct st_buf member;
    st_buf_init(&member);
    st_buf_adds(&member, ev->source_name);
    st_buf_addc(&member, SEP);
    st_buf_adds(&member, ev->event_id);
    st_buf_addc(&member, SEP);
    st_buf_adds(&member, st_event_target(ev));

    const char *zadd[] = {"ZADD", wkey, ts, member.data};
    const char *zrem[] = {"ZREMRANGEBYSCORE", wkey, "-inf", trim};
    const char *zrange[] = {"ZRANGEBYSCORE", wkey, from, to, "WITHSCORES"};
    const char *expire[] = {"EXPIRE", wkey, ttl};
    st_rpipe_cmd(ctx->redis, NULL, NULL, 4, zadd);
    st_rpipe_cmd(ctx->redis, NULL, NULL, 4, zrem);
    st_rpipe_cmd(ctx->redis, on_window, p, 5, zrange);
    st_rpipe_cmd(ctx->redis, NULL, NULL, 3, expire);
    st_buf_fini(&member);
    free(wkey);
}

static void db_end_batch(void *state, struct st_detect_ctx *ctx)
{
    struct db_state *st = state;
    char first[24], last[24], ttl[24];

    snprintf(ttl, sizeof(ttl), "%" PRId64, st->conf->state_ttl_s);
    for (size_t i = 0; i < st->nruns; i++) {
        struct run_state *run = &st->runs[i];
        if (!run->dirty)
            continue;
        snprintf(first, sizeof(first), "%" PRId64, run->ep.first_us);
        snprintf(last, sizeof(last), "%" PRId64, run->ep.last_us);
        const char *hset[] = {"HSET",  run->ep_key, "id",   run->ep_id,
                              "first", first,       "last", last};
        const char *expire[] = {"EXPIRE", run->ep_key, ttl};
        st_rpipe_cmd(ctx->redis, NULL, NULL, 8, hset);
        st_rpipe_cmd(ctx->redis, NULL, NULL, 3, expire);
    }
}

const struct st_detector_ops st_denial_burst_ops = {
    .name = NAME,
    .version = VERSION,
    .create = db_create,
    .destroy = db_destroy,
    .begin_batch = db_begin_batch,
    .feed = db_feed,
    .end_batch = db_end_batch,
    .reset_batch = db_reset,
};
