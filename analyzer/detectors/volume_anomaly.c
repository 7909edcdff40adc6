/* volume_anomaly.c: a run sending more than its budget.
 *
 * Fires when one run's proxy requests within any
 * detect.volume_anomaly.window_s seconds of event time exceed
 * detect.volume_anomaly.max_requests, or their bytes_out exceed
 * detect.volume_anomaly.max_bytes_out. Severity is high past twice the
 * budget, medium otherwise.
 *
 * A run's requests are a runwin window (member: source, event id and bytes
 * out; score: event time), so adding one twice changes nothing; its bytes
 * out are added to a per-tenth-of-the-window bucket only when the request
 * was new (runwin.c does it: st_runwin_set_value). Per request, in memory:
 * the window's count (exact) and its byte sum (the nine buckets before the
 * event's, then the event's own tenth up to the event: its bucket may
 * already hold later requests that a failed attempt of the batch added,
 * which a redo must not count, so st_runwin_bucket_upto reads the bucket's
 * sum only when no member of it is later than the event and the sum is
 * known to be its members', and sums the members otherwise: the same
 * number either way, without a walk of the tenth per request on a dense
 * stream). A finding covers one budget window, keyed by the
 * window-length slot of event time in which the budget was exceeded; its
 * evidence is every request made over the budget.
 *
 * Like the other windows, a run's state is trimmed to 2 x window +
 * detect.lateness_s of event time behind the batch's newest on-time request
 * (a late or skewed one trims nothing), buckets only once every request
 * they counted is gone, after the batch's offsets are committed (detect.h).
 * Redis holds the checkpoint: the set, and the buckets as absolute sums
 * (HSET, so a checkpoint run twice counts nothing twice). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "detect.h"
#include "log.h"
#include "runwin.h"

#define NAME "volume_anomaly"
#define VERSION 1

struct va_state {
    const struct st_analyzer_conf *conf;
    struct st_runwin *win;
    struct st_buf payload;
};

/* A member's payload is its bytes out */
static int64_t va_value(const char *payload)
{
    return strtoll(payload, NULL, 10);
}

static void *va_create(const struct st_analyzer_conf *conf)
{
    struct va_state *st = st_calloc(1, sizeof(*st));
    int64_t window_us = conf->vol_window_s * 1000000;
    int64_t minute_us = window_us / 10 > 0 ? window_us / 10 : 1;
    st->conf = conf;
    st->win = st_runwin_new(conf, NAME, window_us,
                            2 * window_us + conf->lateness_s * 1000000,
                            ST_RUNWIN_BUCKETS, minute_us);
    st_runwin_set_value(st->win, va_value);
    st_buf_init(&st->payload);
    return st;
}

static void va_destroy(void *state)
{
    struct va_state *st = state;
    if (!st)
        return;
    st_runwin_destroy(st->win);
    st_buf_fini(&st->payload);
    free(st);
}

static void va_begin(void *state, size_t n)
{
    st_runwin_begin(((struct va_state *)state)->win, n);
}

static void va_reset(void *state)
{
    st_runwin_reset(((struct va_state *)state)->win);
}

static void va_prefetch(void *state, struct st_detect_ctx *ctx, const struct st_event *ev)
{
    if (ev->type == ST_TYPE_REQUEST)
        st_runwin_prefetch(((struct va_state *)state)->win, ctx, ev);
}

static void va_feed(void *state, struct st_detect_ctx *ctx, const struct st_event *ev)
{
    struct va_state *st = state;
    const struct st_analyzer_conf *conf = st->conf;
    int64_t bytes = 0;

    if (ev->type != ST_TYPE_REQUEST)
        return;
    st_event_attr_int(ev, "bytes_out", &bytes);
    if (bytes < 0)
        bytes = 0;
    int64_t window_us = conf->vol_window_s * 1000000;
    int64_t minute_us = window_us / 10 > 0 ? window_us / 10 : 1;
    int64_t minute = ev->ts_us / minute_us;
    st_buf_reset(&st->payload);
    st_buf_addi64(&st->payload, bytes);
    /* new: its bytes go to its minute's bucket (va_value) */
    st_runwin_add(st->win, ctx, ev, st->payload.data);

    const struct st_runwin_member *m;
    long long count = (long long)st_runwin_range(st->win, ev->ts_us - window_us + 1,
                                                 ev->ts_us, &m);
    long long sum = st_runwin_bucket_sum(st->win, minute - 9, minute - 1) +
                    st_runwin_bucket_upto(st->win, minute, ev->ts_us);

    int64_t max_req = st_override_int(&conf->overrides, ev,
                                      "detect.volume_anomaly.max_requests",
                                      conf->vol_max_requests);
    int64_t max_bytes = st_override_int(&conf->overrides, ev,
                                        "detect.volume_anomaly.max_bytes_out",
                                        conf->vol_max_bytes_out);
    int over_req = count > max_req;
    int over_bytes = sum > max_bytes;
    if (!over_req && !over_bytes)
        return;

    char key[64], id[33], summary[256];
    int64_t slot = ev->ts_us / window_us;
    snprintf(key, sizeof(key), "slot:%" PRId64, slot);
    st_finding_id(id, NAME, ev->task_id, ev->run_id, key);
    int high = count > 2 * max_req || sum > 2 * max_bytes;
    snprintf(summary, sizeof(summary),
             "%lld proxy requests and %lld bytes out within %" PRId64
             " s (budget %" PRId64 " requests, %" PRId64 " bytes)",
             count, sum, conf->vol_window_s, max_req, max_bytes);
    struct st_finding *f = st_findings_update(
        ctx->findings, id, NAME, VERSION, high ? ST_SEV_HIGH : ST_SEV_MEDIUM,
        ev->task_id, ev->run_id, ev->ts_us, ev->ts_us, summary);
    /* the evidence is every request made over the budget, so event_count
     * says by how much the run went over */
    st_finding_add_event(f, ev->source_name, ev->event_id, ctx->late);
}

static void va_end_batch(void *state, struct st_detect_ctx *ctx)
{
    st_runwin_end_batch(((struct va_state *)state)->win, ctx);
}

static void va_after_commit(void *state, struct st_detect_ctx *ctx)
{
    st_runwin_after_commit(((struct va_state *)state)->win, ctx);
}

static void va_forget(void *state, struct st_detect_ctx *ctx)
{
    st_runwin_forget(((struct va_state *)state)->win, ctx);
}

static const char *const run_states[] = {NAME, NULL};

const struct st_detector_ops st_volume_anomaly_ops = {
    .name = NAME,
    .version = VERSION,
    /* all its state is keyed by run: one instance per worker */
    .scope = ST_DETECT_PER_RUN,
    .create = va_create,
    .destroy = va_destroy,
    .begin_batch = va_begin,
    .prefetch = va_prefetch,
    .feed = va_feed,
    .end_batch = va_end_batch,
    .after_commit = va_after_commit,
    .reset_batch = va_reset,
    .forget = va_forget,
    .run_states = run_states,
};
