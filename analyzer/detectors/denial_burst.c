/* denial_burst.c: many denied events from one run in a short event-time
 * window.
 *
 * Fires when, within any window of detect.denial_burst.window_s seconds of
 * event time, one run (task_id, run_id) has detect.denial_burst.threshold or
 * more events whose decision is deny. Severity is high when those events
 * name detect.denial_burst.high_targets or more distinct targets, medium
 * otherwise. Overlapping windows that fire form one episode and one finding
 * (runwin.c keeps the window and the episode, Redis their checkpoint). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "detect.h"
#include "log.h"
#include "runwin.h"
#include "window.h"

#define NAME "denial_burst"
#define VERSION 1

struct db_state {
    const struct st_analyzer_conf *conf;
    struct st_findings *findings;
    struct st_runwin *win;
};

static void *db_create(const struct st_analyzer_conf *conf)
{
    struct db_state *st = st_calloc(1, sizeof(*st));
    int64_t window_us = conf->db_window_s * 1000000;
    st->conf = conf;
    st->win = st_runwin_new(conf, NAME, window_us,
                            2 * window_us + conf->lateness_s * 1000000,
                            ST_RUNWIN_EPISODES, 0);
    return st;
}

static void db_destroy(void *state)
{
    struct db_state *st = state;
    if (!st)
        return;
    st_runwin_destroy(st->win);
    free(st);
}

static void db_begin(void *state, size_t n)
{
    st_runwin_begin(((struct db_state *)state)->win, n);
}

static void db_reset(void *state)
{
    st_runwin_reset(((struct db_state *)state)->win);
}

/* One window [lo, hi) ending at end_us: a burst when it holds enough. */
static int db_window(void *arg, const struct st_runwin_view *v, size_t lo, size_t hi,
                     int64_t end_us)
{
    struct db_state *st = arg;
    const struct st_analyzer_conf *conf = st->conf;
    struct st_window_member *m = st_malloc((hi - lo) * sizeof(*m));
    size_t count, targets;
    char id[33], summary[256];

    for (size_t i = lo; i < hi; i++) {
        m[i - lo].ts_us = v->m[i].ts_us;
        m[i - lo].target = v->m[i].payload;
        m[i - lo].idx = i;
    }
    st_window_count(m, hi - lo, end_us - v->window_us, end_us, &count, &targets);
    free(m);
    if ((int64_t)count < st_override_int(&conf->overrides, v->ev,
                                         "detect.denial_burst.threshold",
                                         conf->db_threshold))
        return 0;

    st_runwin_episode(st->win, v, end_us, &v->m[lo], id);
    enum st_severity sev =
        (int64_t)targets >= st_override_int(&conf->overrides, v->ev,
                                            "detect.denial_burst.high_targets",
                                            conf->db_high_targets)
            ? ST_SEV_HIGH
            : ST_SEV_MEDIUM;
    snprintf(summary, sizeof(summary),
             "%zu denied events within %" PRId64 " s to %zu distinct target(s)", count,
             conf->db_window_s, targets);
    struct st_finding *f =
        st_findings_update(st->findings, id, NAME, VERSION, sev, v->ev->task_id,
                           v->ev->run_id, v->m[lo].ts_us, end_us, summary);
    st_runwin_evidence(v, f, lo, hi);
    return 0;
}

static int db_on_window(void *arg, const struct st_runwin_view *v)
{
    return st_runwin_each_window(v, db_window, arg);
}

static void db_prefetch(void *state, struct st_detect_ctx *ctx, const struct st_event *ev)
{
    if (ev->decision == ST_DECISION_DENY)
        st_runwin_prefetch(((struct db_state *)state)->win, ctx, ev);
}

static void db_feed(void *state, struct st_detect_ctx *ctx, const struct st_event *ev)
{
    struct db_state *st = state;
    if (ev->decision != ST_DECISION_DENY)
        return;
    st->findings = ctx->findings;
    st_runwin_feed(st->win, ctx, ev, st_event_target(ev), 0, db_on_window, st);
}

static void db_end_batch(void *state, struct st_detect_ctx *ctx)
{
    st_runwin_end_batch(((struct db_state *)state)->win, ctx);
}

static void db_after_commit(void *state, struct st_detect_ctx *ctx)
{
    st_runwin_after_commit(((struct db_state *)state)->win, ctx);
}

static void db_forget(void *state, struct st_detect_ctx *ctx)
{
    st_runwin_forget(((struct db_state *)state)->win, ctx);
}

static const char *const run_states[] = {NAME, NULL};

const struct st_detector_ops st_denial_burst_ops = {
    .name = NAME,
    .version = VERSION,
    /* all its state is keyed by run: one instance per worker */
    .scope = ST_DETECT_PER_RUN,
    .create = db_create,
    .destroy = db_destroy,
    .begin_batch = db_begin,
    .prefetch = db_prefetch,
    .feed = db_feed,
    .end_batch = db_end_batch,
    .after_commit = db_after_commit,
    .reset_batch = db_reset,
    .forget = db_forget,
    .run_states = run_states,
};
