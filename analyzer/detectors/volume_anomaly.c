/* volume_anomaly.c: a run sending more than its budget.
 *
 * Fires when one run's proxy requests within any
 * detect.volume_anomaly.window_s seconds of event time exceed
 * detect.volume_anomaly.max_requests, or their bytes_out exceed
 * detect.volume_anomaly.max_bytes_out. Severity is high past twice the
 * budget, medium otherwise.
 *
 * A run's requests are a sorted set in Redis (member: source, event id and
 * bytes out; score: event time), so adding one twice changes nothing; its
 * bytes out are added to a per-tenth-of-the-window bucket only when the
 * request was new.
 * One server-side script per request (EVALSHA) does both and returns the
 * window's count (exact) and byte sum (over the ten buckets ending with the
 * event's): one pipelined step, a constant cost however large the window,
 * and only two numbers cross the network. A finding covers one budget
 * window, keyed by the window-length slot of event time in which the budget
 * was exceeded; its evidence is every request made over the budget.
 *
 * Like runwin's windows, a run's state is trimmed to 2 x window +
 * detect.lateness_s of event time behind the batch's newest on-time request
 * (a late or skewed one trims nothing): requests below that and byte
 * buckets of older minutes are removed by a second script, once per run,
 * only after the batch's offsets are committed (detect.h). Until then a
 * redo finds every request it needs, and each one it adds again is not new,
 * so its bytes are not counted twice. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "detect.h"
#include "log.h"

#define NAME "volume_anomaly"
#define VERSION 1

/* KEYS: the run's request set, the run's bytes per minute.
 * ARGV: ts, member, window start, minute, bytes, ttl, the window's ten
 * minutes (the event's first), the start of the event's minute.
 * A request counts once however often it is added (ZADD says whether it
 * was new); bytes are summed per minute of event time, so the byte budget
 * is measured over the window's whole minutes. The event's own minute is
 * summed from its members (their bytes end the member) up to the event:
 * its bucket may already hold later requests that a failed attempt of the
 * batch added, which a redo must not count. */
static const char *script =
    "if redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2]) == 1 then "
    "  redis.call('HINCRBY', KEYS[2], ARGV[4], ARGV[5]) "
    "end "
    "redis.call('EXPIRE', KEYS[1], ARGV[6]) "
    "redis.call('EXPIRE', KEYS[2], ARGV[6]) "
    "local n = redis.call('ZCOUNT', KEYS[1], ARGV[3], ARGV[1]) "
    "local b = redis.call('HMGET', KEYS[2], unpack(ARGV, 8, 16)) "
    "local bytes = 0 "
    "for i = 1, #b do bytes = bytes + (tonumber(b[i]) or 0) end "
    "for _, m in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], ARGV[17], ARGV[1])) do "
    "  bytes = bytes + (tonumber(string.match(m, '\\31(%d+)$')) or 0) "
    "end "
    "return {n, tostring(bytes)}";

/* After the commits. KEYS: as above. ARGV: the oldest time and the oldest
 * minute to keep. A bucket goes only when every request it counted is
 * gone (its minute ends before the oldest time kept). */
static const char *trim_script =
    "redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1]) "
    "local keep = tonumber(ARGV[2]) "
    "for _, f in ipairs(redis.call('HKEYS', KEYS[2])) do "
    "  if tonumber(f) < keep then redis.call('HDEL', KEYS[2], f) end "
    "end "
    "return 0";

struct pending {
    struct va_state *st;
    const struct st_event *ev;
    int late;
    int ooo; /* late or skewed: trims nothing */
};

struct va_state {
    const struct st_analyzer_conf *conf;
    struct st_findings *findings;
    struct pending *pend;
    size_t npend, cap;
    const struct pending **runs; /* after_commit: on-time requests by run */
};

static void *va_create(const struct st_analyzer_conf *conf)
{
    struct va_state *st = st_calloc(1, sizeof(*st));
    st->conf = conf;
    return st;
}

static void va_destroy(void *state)
{
    struct va_state *st = state;
    if (!st)
        return;
    free(st->pend);
    free(st->runs);
    free(st);
}

static void va_begin(void *state, size_t n)
{
    struct va_state *st = state;
    if (st->cap < n) {
        st->pend = st_realloc(st->pend, n * sizeof(*st->pend));
        st->runs = st_realloc(st->runs, n * sizeof(*st->runs));
        st->cap = n;
    }
}

static void va_reset(void *state)
{
    ((struct va_state *)state)->npend = 0;
}

static int on_window(const redisReply *r, void *arg)
{
    struct pending *p = arg;
    struct va_state *st = p->st;
    const struct st_analyzer_conf *conf = st->conf;
    const struct st_event *ev = p->ev;

    if (r->type != REDIS_REPLY_ARRAY || r->elements != 2)
        return -1;
    long long count = r->element[0]->integer;
    long long bytes = r->element[1]->str ? strtoll(r->element[1]->str, NULL, 10) : 0;
    int64_t max_req = st_override_int(&conf->overrides, ev,
                                      "detect.volume_anomaly.max_requests",
                                      conf->vol_max_requests);
    int64_t max_bytes = st_override_int(&conf->overrides, ev,
                                        "detect.volume_anomaly.max_bytes_out",
                                        conf->vol_max_bytes_out);
    int over_req = count > max_req;
    int over_bytes = bytes > max_bytes;
    if (!over_req && !over_bytes)
        return 0;

    char key[64], id[33], summary[256];
    int64_t window_us = conf->vol_window_s * 1000000;
    int64_t slot = ev->ts_us / window_us;
    snprintf(key, sizeof(key), "slot:%" PRId64, slot);
    st_finding_id(id, NAME, ev->task_id, ev->run_id, key);
    int high = count > 2 * max_req || bytes > 2 * max_bytes;
    snprintf(summary, sizeof(summary),
             "%lld proxy requests and %lld bytes out within %" PRId64
             " s (budget %" PRId64 " requests, %" PRId64 " bytes)",
             count, bytes, conf->vol_window_s, max_req, max_bytes);
    struct st_finding *f = st_findings_update(
        st->findings, id, NAME, VERSION, high ? ST_SEV_HIGH : ST_SEV_MEDIUM,
        ev->task_id, ev->run_id, ev->ts_us, ev->ts_us, summary);
    /* the evidence is every request made over the budget, so event_count
     * says by how much the run went over */
    st_finding_add_event(f, ev->source_name, ev->event_id, p->late);
    return 0;
}

static void va_feed(void *state, struct st_detect_ctx *ctx, const struct st_event *ev)
{
    struct va_state *st = state;
    const struct st_analyzer_conf *conf = st->conf;
    int64_t bytes = 0;

    if (ev->type != ST_TYPE_REQUEST)
        return;
    if (st->npend == st->cap)
        st_fatal("volume_anomaly: fed more events than begin_batch announced");
    st->findings = ctx->findings;
    struct pending *p = &st->pend[st->npend++];
    p->st = st;
    p->ev = ev;
    p->late = ctx->late;
    p->ooo = ctx->late || ctx->skewed;

    st_json_int(ev->attrs, "bytes_out", &bytes);
    int64_t window_us = conf->vol_window_s * 1000000;
    int64_t minute_us = window_us / 10 > 0 ? window_us / 10 : 1;
    int64_t minute = ev->ts_us / minute_us;
    char *key = st_detect_key(conf, NAME, "w", ev->task_id, ev->run_id);
    char *bkey = st_detect_key(conf, NAME, "b", ev->task_id, ev->run_id);
    char ts[24], from[24], min[24], nbytes[24], ttl[24], mins[10][24], min_start[24];
    struct st_buf member;
    st_buf_init(&member);
    st_buf_printf(&member, "%s\x1f%s\x1f%" PRId64, ev->source_name, ev->event_id,
                  bytes < 0 ? 0 : bytes);
    snprintf(ts, sizeof(ts), "%" PRId64, ev->ts_us);
    snprintf(from, sizeof(from), "(%" PRId64, ev->ts_us - window_us);
    snprintf(min, sizeof(min), "%" PRId64, minute);
    snprintf(nbytes, sizeof(nbytes), "%" PRId64, bytes < 0 ? 0 : bytes);
    snprintf(ttl, sizeof(ttl), "%" PRId64, conf->state_ttl_s);
    const char *argv[19] = {key, bkey, ts, member.data, from, min, nbytes, ttl};
    for (int i = 0; i < 10; i++) {
        snprintf(mins[i], sizeof(mins[i]), "%" PRId64, minute - i);
        argv[8 + i] = mins[i];
    }
    snprintf(min_start, sizeof(min_start), "%" PRId64, minute * minute_us);
    argv[18] = min_start;
    st_rpipe_script(ctx->redis, on_window, p, script, 2, 19, argv);
    st_buf_fini(&member);
    free(key);
    free(bkey);
}

static void va_end_batch(void *state, struct st_detect_ctx *ctx)
{
}

static int cmp_run(const void *a, const void *b)
{
    const struct st_event *x = (*(const struct pending *const *)a)->ev;
    const struct st_event *y = (*(const struct pending *const *)b)->ev;
    int c = strcmp(x->task_id, y->task_id);
    return c ? c : strcmp(x->run_id, y->run_id);
}

/* One trim per run, behind its newest on-time request of the batch. */
static void va_after_commit(void *state, struct st_detect_ctx *ctx)
{
    struct va_state *st = state;
    const struct st_analyzer_conf *conf = st->conf;
    int64_t window_us = conf->vol_window_s * 1000000;
    int64_t minute_us = window_us / 10 > 0 ? window_us / 10 : 1;
    int64_t keep_us = 2 * window_us + conf->lateness_s * 1000000;
    size_t n = 0;

    for (size_t i = 0; i < st->npend; i++)
        if (!st->pend[i].ooo)
            st->runs[n++] = &st->pend[i];
    if (n > 1)
        qsort(st->runs, n, sizeof(*st->runs), cmp_run);
    for (size_t i = 0; i < n;) {
        const struct st_event *ev = st->runs[i]->ev;
        int64_t max = ev->ts_us;
        size_t j = i + 1;
        for (; j < n && cmp_run(&st->runs[i], &st->runs[j]) == 0; j++)
            if (st->runs[j]->ev->ts_us > max)
                max = st->runs[j]->ev->ts_us;
        char oldest[24], oldest_min[24];
        snprintf(oldest, sizeof(oldest), "%" PRId64, max - keep_us);
        snprintf(oldest_min, sizeof(oldest_min), "%" PRId64,
                 (max - keep_us) / minute_us - 1);
        char *key = st_detect_key(conf, NAME, "w", ev->task_id, ev->run_id);
        char *bkey = st_detect_key(conf, NAME, "b", ev->task_id, ev->run_id);
        const char *argv[] = {key, bkey, oldest, oldest_min};
        st_rpipe_script(ctx->redis, NULL, NULL, trim_script, 2, 4, argv);
        free(key);
        free(bkey);
        i = j;
    }
}

const struct st_detector_ops st_volume_anomaly_ops = {
    .name = NAME,
    .version = VERSION,
    .create = va_create,
    .destroy = va_destroy,
    .begin_batch = va_begin,
    .feed = va_feed,
    .end_batch = va_end_batch,
    .after_commit = va_after_commit,
    .reset_batch = va_reset,
};
