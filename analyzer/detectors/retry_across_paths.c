/* retry_across_paths.c: an agent routing around a refusal.
 *
 * After a refused or failed attempt (a proxy deny or error, an HTTP status
 * of 400 or more, a broker deny), detect.retry_across_paths.min_attempts or
 * more further attempts by the same run within
 * detect.retry_across_paths.window_s seconds to targets that had not failed
 * before them: another path, another host, another service. Retrying the
 * very target that failed is not counted: that is a retry, not a probe. It
 * fires whatever the number of denials, so an agent that stays under the
 * denial_burst threshold is still seen. Severity is high when one of those
 * other attempts got through, medium when all were refused too.
 *
 * Attempts are proxy requests (target host + path) and broker token_use and
 * token_deny (target "broker:" + audience, scope or operation). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "detect.h"
#include "log.h"
#include "runwin.h"

#define NAME "retry_across_paths"
#define VERSION 1

struct rp_state {
    const struct st_analyzer_conf *conf;
    struct st_findings *findings;
    struct st_runwin *win;
    struct st_buf payload;
};

/* Payload: 'F' (failed) or 'A' (went through), then the target. A failed
 * attempt is a marked member (st_runwin_set_mark): its flag is read once,
 * as it is added, and the window's scan reads no payload to find one. */
static int payload_failed(const char *p)
{
    return p[0] == 'F';
}

static void *rp_create(const struct st_analyzer_conf *conf)
{
    struct rp_state *st = st_calloc(1, sizeof(*st));
    int64_t window_us = conf->retry_window_s * 1000000;
    st->conf = conf;
    st->win = st_runwin_new(conf, NAME, window_us,
                            2 * window_us + conf->lateness_s * 1000000,
                            ST_RUNWIN_EPISODES, 0);
    st_runwin_set_mark(st->win, payload_failed);
    st_buf_init(&st->payload);
    return st;
}

static void rp_destroy(void *state)
{
    struct rp_state *st = state;
    if (!st)
        return;
    st_runwin_destroy(st->win);
    st_buf_fini(&st->payload);
    free(st);
}

static void rp_begin(void *state, size_t n)
{
    st_runwin_begin(((struct rp_state *)state)->win, n);
}

static void rp_reset(void *state)
{
    st_runwin_reset(((struct rp_state *)state)->win);
}

static int in_list(const char *const *list, size_t n, const char *s)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(list[i], s) == 0)
            return 1;
    return 0;
}

static int rp_window(void *arg, const struct st_runwin_view *v, size_t lo, size_t hi,
                     int64_t end_us)
{
    struct rp_state *st = arg;
    /* the common case on a busy stream: nothing failed in the window, so
     * nothing follows a refusal (counted in constant time) */
    if (!st_runwin_marked(v, lo, hi))
        return 0;
    /* the attempts before the first failure count for nothing */
    while (!v->m[lo].marked)
        lo++;
    const char **failed = st_malloc((hi - lo) * sizeof(*failed));
    size_t nfailed = 0, first = 0, other = 0, through = 0;
    int started = 0, rc = 0;
    char id[33], summary[256];

    /* walk the window in time order: once something failed, each attempt
     * at a target that had not failed before it is an attempt elsewhere */
    for (size_t i = lo; i < hi; i++) {
        const char *target = v->m[i].payload + 1;
        if (started && !in_list(failed, nfailed, target)) {
            other++;
            through += !v->m[i].marked;
        }
        if (v->m[i].marked) {
            if (!started)
                first = i;
            started = 1;
            if (!in_list(failed, nfailed, target))
                failed[nfailed++] = target;
        }
    }
    free(failed);
    if (!started ||
        (int64_t)other < st_override_int(&st->conf->overrides, v->ev,
                                         "detect.retry_across_paths.min_attempts",
                                         st->conf->retry_min_attempts))
        return 0;

    st_runwin_episode(st->win, v, end_us, &v->m[first], id);
    snprintf(summary, sizeof(summary),
             "%zu attempt(s) at other targets within %lld s after a refusal, "
             "%zu of them got through",
             other, (long long)st->conf->retry_window_s, through);
    struct st_finding *f = st_findings_update(
        st->findings, id, NAME, VERSION, through ? ST_SEV_HIGH : ST_SEV_MEDIUM,
        v->ev->task_id, v->ev->run_id, v->m[first].ts_us, end_us, summary);
    st_runwin_evidence(v, f, first, hi);
    return rc;
}

static int rp_on_window(void *arg, const struct st_runwin_view *v)
{
    return st_runwin_each_window(v, rp_window, arg);
}

static int rp_wants(const struct st_event *ev)
{
    return ev->type == ST_TYPE_REQUEST || ev->type == ST_TYPE_TOKEN_USE ||
           ev->type == ST_TYPE_TOKEN_DENY;
}

static void rp_prefetch(void *state, struct st_detect_ctx *ctx, const struct st_event *ev)
{
    if (rp_wants(ev))
        st_runwin_prefetch(((struct rp_state *)state)->win, ctx, ev);
}

static void rp_feed(void *state, struct st_detect_ctx *ctx, const struct st_event *ev)
{
    struct rp_state *st = state;
    int64_t status = 0;
    int failed = ev->decision != ST_DECISION_ALLOW;

    st_buf_reset(&st->payload);
    if (ev->type == ST_TYPE_REQUEST) {
        if (st_event_attr_int(ev, "status", &status) && status >= 400)
            failed = 1;
        const char *path = st_event_attr_str(ev, "path");
        st_buf_addc(&st->payload, failed ? 'F' : 'A');
        st_buf_adds(&st->payload, st_event_target(ev));
        if (path && strcmp(path, "/") != 0)
            st_buf_adds(&st->payload, path);
    } else if (ev->type == ST_TYPE_TOKEN_USE || ev->type == ST_TYPE_TOKEN_DENY) {
        const char *op = st_event_attr_str(ev, "operation");
        failed |= ev->type == ST_TYPE_TOKEN_DENY;
        st_buf_addc(&st->payload, failed ? 'F' : 'A');
        st_buf_adds(&st->payload, "broker:");
        st_buf_adds(&st->payload, st_event_target(ev));
        if (op) {
            st_buf_addc(&st->payload, ' ');
            st_buf_adds(&st->payload, op);
        }
    } else {
        return;
    }
    st->findings = ctx->findings;
    st_runwin_feed(st->win, ctx, ev, st->payload.data, 0, rp_on_window, st);
}

static void rp_end_batch(void *state, struct st_detect_ctx *ctx)
{
    st_runwin_end_batch(((struct rp_state *)state)->win, ctx);
}

static void rp_after_commit(void *state, struct st_detect_ctx *ctx)
{
    st_runwin_after_commit(((struct rp_state *)state)->win, ctx);
}

static void rp_forget(void *state, struct st_detect_ctx *ctx)
{
    st_runwin_forget(((struct rp_state *)state)->win, ctx);
}

static const char *const run_states[] = {NAME, NULL};

const struct st_detector_ops st_retry_across_paths_ops = {
    .name = NAME,
    .version = VERSION,
    /* all its state is keyed by run: one instance per worker */
    .scope = ST_DETECT_PER_RUN,
    .create = rp_create,
    .destroy = rp_destroy,
    .begin_batch = rp_begin,
    .prefetch = rp_prefetch,
    .feed = rp_feed,
    .end_batch = rp_end_batch,
    .after_commit = rp_after_commit,
    .reset_batch = rp_reset,
    .forget = rp_forget,
    .run_states = run_states,
};
