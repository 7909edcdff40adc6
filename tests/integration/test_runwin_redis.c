/* test_runwin_redis.c: a run's windows against the real Redis, checkpoint
 * by checkpoint (found by a review of the run index, 2026-12-01):
 *   - a key a trim empties (Redis deletes it) and the same checkpoint
 *     writes again still gets its EXPIRE: no state without a TTL;
 *   - a run forgotten (revoke; an eviction drops it the same way) and
 *     loaded again gives a late event the window it had in memory: every
 *     trim reached Redis with the checkpoint after it;
 *   - with state.checkpoint_ms, a run whose trims and members no
 *     checkpoint carried yet is not evicted, and a revoke's forced
 *     checkpoint writes them before the run is forgotten;
 *   - a forced flush (st_checkpoint_flush, main.c's detectors_flush) sends
 *     in its second, deletions-only checkpoint the trims its own commit
 *     allows: a run loaded again after the revoke has no member memory
 *     dropped. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analyzer.h"
#include "checkpoint.h"
#include "detect.h"
#include "rpipe.h"
#include "runwin.h"

static struct st_analyzer_conf conf;
static struct st_runwin *w;
static long long ttl_reply;

static size_t seen_n;

static int count_window(void *arg, const struct st_runwin_view *v)
{
    (void)arg;
    seen_n = v->n;
    return 0;
}

static int open_episode(void *arg, const struct st_runwin_view *v)
{
    char id[33];
    if (*(int *)arg)
        st_runwin_episode(w, v, v->ev->ts_us, &v->m[0], id);
    return 0;
}

static int on_ttl(const redisReply *r, void *arg)
{
    (void)arg;
    ttl_reply = r->integer;
    return 0;
}

static void batch(struct st_rpipe *p, struct st_detect_ctx *ctx, uint64_t seq,
                  const char *id, int64_t ts, int late, int episode)
{
    char err[256];
    struct st_event ev = {0};
    ev.event_id = id;
    ev.ts_us = ts;
    ev.source_name = "s";
    ev.task_id = "task";
    ev.run_id = "run";
    struct st_checkpoint *ck = st_checkpoint_new();
    ctx->ckpt = ck;
    ctx->late = late;
    ctx->seq = seq;
    st_runwin_begin(w, 1);
    st_runwin_prefetch(w, ctx, &ev);
    ck_assert_int_eq(st_rpipe_exec(p, err, sizeof(err)), 0);
    if (episode < 0)
        st_runwin_feed(w, ctx, &ev, "{}", 0, count_window, NULL);
    else
        st_runwin_feed(w, ctx, &ev, "{}", 0, open_episode, &episode);
    st_runwin_end_batch(w, ctx);
    ck_assert_int_eq(st_checkpoint_exec(ck, p, err, sizeof(err)), 0);
    st_runwin_after_commit(w, ctx);
    st_checkpoint_destroy(ck);
}

START_TEST(runwin_emptied_key_keeps_its_ttl)
{
    char err[256], prefix[64];
    snprintf(prefix, sizeof(prefix), "st_runwin_redis_%d:", (int)getpid());
    memset(&conf, 0, sizeof(conf));
    conf.redis_prefix = prefix;
    conf.state_ttl_s = 86400;
    conf.state_evict_s = 600;
    const char *url = getenv("SANDTRAIL_REDIS_URL");
    ck_assert_ptr_nonnull(url);
    struct st_rpipe *p = st_rpipe_new(url, NULL, err, sizeof(err));
    ck_assert_msg(p != NULL, "%s", err);
    int64_t win = 60000000, keep = 2 * win + 30000000, T = 1700000000000000LL;
    w = st_runwin_new(&conf, "rv", win, keep, ST_RUNWIN_EPISODES, 0);
    struct st_detect_ctx ctx = {.redis = p, .conf = &conf};
    batch(p, &ctx, 1, "e1", T, 0, 1);                   /* episode E1 opened */
    batch(p, &ctx, 2, "e2", T + 600000000LL, 0, 0);     /* trims e1 and E1 */
    batch(p, &ctx, 3, "e3", T + 590000000LL, 1, 1);     /* late: HDEL E1 (the hash emptied), HSET E2 */
    char *ekey = st_detect_key(&conf, "rv", "eps", "task", "run");
    char *wkey = st_detect_key(&conf, "rv", "w", "task", "run");
    const char *t1[] = {"TTL", ekey};
    st_rpipe_cmd(p, on_ttl, NULL, 2, t1);
    ck_assert_int_eq(st_rpipe_exec(p, err, sizeof(err)), 0);
    long long eps_ttl = ttl_reply;
    const char *t2[] = {"TTL", wkey};
    st_rpipe_cmd(p, on_ttl, NULL, 2, t2);
    ck_assert_int_eq(st_rpipe_exec(p, err, sizeof(err)), 0);
    fprintf(stderr, "TTL %s = %lld, TTL %s = %lld\n", ekey, eps_ttl, wkey, ttl_reply);
    const char *d[] = {"DEL", ekey, wkey};
    st_rpipe_cmd(p, NULL, NULL, 3, d);
    st_rpipe_exec(p, err, sizeof(err));
    free(ekey);
    free(wkey);
    st_runwin_destroy(w);
    st_rpipe_destroy(p);
    ck_assert_msg(eps_ttl > 0, "episode hash has no TTL (%lld)", eps_ttl);
}
END_TEST

/* The late-window scenarios' run: windows of 60 s kept 150 s, under
 * prefix, in detector name's keys, on a connection of its own. */
static struct st_rpipe *late_open(char *prefix, int64_t evict_s, const char *name)
{
    char err[256];
    memset(&conf, 0, sizeof(conf));
    conf.redis_prefix = prefix;
    conf.state_ttl_s = 86400;
    conf.state_evict_s = evict_s;
    const char *url = getenv("SANDTRAIL_REDIS_URL");
    ck_assert_msg(url != NULL, "the services' environment: scripts/services env");
    struct st_rpipe *p = st_rpipe_new(url, NULL, err, sizeof(err));
    ck_assert_msg(p != NULL, "%s", err);
    int64_t win = 60000000, keep = 2 * win + 30000000;
    w = st_runwin_new(&conf, name, win, keep, 0, 0);
    return p;
}

/* Deletes the run's window key and closes what late_open made. */
static void late_close(struct st_rpipe *p, const char *name)
{
    char err[256];
    char *wkey = st_detect_key(&conf, name, "w", "task", "run");
    const char *d[] = {"DEL", wkey};
    st_rpipe_cmd(p, NULL, NULL, 2, d);
    st_rpipe_exec(p, err, sizeof(err));
    free(wkey);
    st_runwin_destroy(w);
    st_rpipe_destroy(p);
}

/* the same events, once with the run held in memory throughout, once
 * forgotten (revoke; eviction drops it the same way) and reloaded: the
 * late event's window differs (Redis kept the member memory trimmed). */
static size_t late_window(int reload)
{
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "st_runwin_redis_%d_%d:", (int)getpid(), reload);
    int64_t T = 1700000000000000LL;
    struct st_rpipe *p = late_open(prefix, 600, "rv");
    struct st_detect_ctx ctx = {.redis = p, .conf = &conf};
    batch(p, &ctx, 1, "e1", T, 0, -1);
    batch(p, &ctx, 2, "e2", T + 600000000LL, 0, -1); /* e1 trimmed */
    batch(p, &ctx, 3, "e2b", T + 601000000LL, 0, -1);
    if (reload)
        st_runwin_forget(w, &ctx);
    batch(p, &ctx, 4, "e3", T + 30000000LL, 1, -1); /* late: window T-30 s .. T+90 s */
    late_close(p, "rv");
    return seen_n;
}

START_TEST(runwin_reloaded_run_gives_a_late_event_the_same_window)
{
    size_t cont = late_window(0), rel = late_window(1);
    fprintf(stderr, "late event's window: %zu members held throughout, %zu reloaded\n",
            cont, rel);
    ck_assert_uint_eq(cont, rel);
}
END_TEST

/* One batch of one event with state.checkpoint_ms: the batch carries a
 * checkpoint (write) or not (its changes stay pending in memory); then the
 * trims and evictions of a commit up to checkpoint committed. */
static void batch_deferred(struct st_rpipe *p, struct st_detect_ctx *ctx, uint64_t seq,
                           uint64_t committed, const char *id, int64_t ts, int late,
                           int write)
{
    char err[256];
    struct st_event ev = {0};
    ev.event_id = id;
    ev.ts_us = ts;
    ev.source_name = "s";
    ev.task_id = "task";
    ev.run_id = "run";
    struct st_checkpoint *ck = st_checkpoint_new();
    ctx->ckpt = write ? ck : NULL;
    ctx->late = late;
    ctx->seq = seq;
    st_runwin_begin(w, 1);
    st_runwin_prefetch(w, ctx, &ev);
    ck_assert_int_eq(st_rpipe_exec(p, err, sizeof(err)), 0);
    st_runwin_feed(w, ctx, &ev, "{}", 0, count_window, NULL);
    st_runwin_end_batch(w, ctx);
    ck_assert_int_eq(st_checkpoint_exec(ck, p, err, sizeof(err)), 0);
    ctx->seq = committed;
    st_runwin_after_commit(w, ctx);
    st_checkpoint_destroy(ck);
}

/* A checkpoint with no batch, forced (a revoke's, as main.c's
 * detectors_flush makes it: st_checkpoint_flush, the same steps in the same
 * order, its second deletions-only checkpoint included), over the test's
 * one runwin on p; nothing for Kafka to take, so every checkpoint is
 * committed at once. *ck_seq (the newest checkpoint built) and *committed
 * move on as in the analyzer. */
struct flush_arg {
    struct st_rpipe *p;
    const struct st_detect_ctx *ctx;
};

static void flush_end_batch(void *arg, struct st_checkpoint *c, uint64_t seq, int all)
{
    const struct flush_arg *f = arg;
    struct st_detect_ctx ctx = *f->ctx; /* as workers.c's part_ctx: one per call */
    ctx.ckpt = c;
    ctx.seq = seq;
    if (all)
        ctx.hold_trims = 0;
    st_runwin_end_batch(w, &ctx);
}

static int flush_exec(void *arg, const struct st_checkpoint *c, int retry)
{
    const struct flush_arg *f = arg;
    char err[256];
    int rc = st_checkpoint_exec(c, f->p, err, sizeof(err));
    ck_assert_msg(rc == 0 || !retry, "%s", err);
    return rc;
}

static int flush_commit(void *arg)
{
    (void)arg;
    return 0;
}

static void flush_after_commit(void *arg, uint64_t seq)
{
    const struct flush_arg *f = arg;
    struct st_detect_ctx ctx = *f->ctx;
    ctx.ckpt = NULL;
    ctx.seq = seq;
    st_runwin_after_commit(w, &ctx);
}

static void flush(struct st_rpipe *p, const struct st_detect_ctx *ctx, uint64_t *ck_seq,
                  uint64_t *committed)
{
    static const struct st_checkpoint_flush_ops ops = {
        .end_batch = flush_end_batch,
        .exec = flush_exec,
        .commit = flush_commit,
        .after_commit = flush_after_commit,
    };
    struct flush_arg f = {p, ctx};
    struct st_checkpoint *ck = st_checkpoint_new();
    ck_assert_int_eq(st_checkpoint_flush(ck, &ops, &f, ck_seq, committed, 1), 0);
    st_checkpoint_destroy(ck);
}

/* state.checkpoint_ms: e1 is trimmed after checkpoint 2 is committed; its
 * deletion, and a late event of batch 3 (which carries no checkpoint), are
 * pending when a commit asks to evict idle runs (state.evict_s 0) or a
 * revoke forgets the run. how: 0 held throughout, 1 eviction asked (must
 * wait: the run has pending writes), 2 revoke (a forced checkpoint first,
 * as on_revoke does, then forgotten and loaded again). A later late
 * event's window must be the same in all three. */
static size_t late_window_deferred(int how)
{
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "st_runwin_redis_%d_d%d:", (int)getpid(), how);
    int64_t T = 1700000000000000LL;
    struct st_rpipe *p = late_open(prefix, how == 1 ? 0 : 600, "rd");
    struct st_detect_ctx ctx = {.redis = p, .conf = &conf, .hold_trims = 1};
    uint64_t ck = 3, committed = 2; /* after the first three batches */
    batch_deferred(p, &ctx, 1, 1, "e1", T, 0, 1);
    batch_deferred(p, &ctx, 2, 2, "e2", T + 600000000LL, 0, 1); /* e1 trimmed, pending */
    batch_deferred(p, &ctx, 3, 2, "e2l", T + 599000000LL, 1, 0); /* no checkpoint */
    if (how == 2) {
        flush(p, &ctx, &ck, &committed); /* forced: holds nothing back */
        st_runwin_forget(w, &ctx);
    }
    batch_deferred(p, &ctx, ck + 1, committed, "e3", T + 30000000LL, 1,
                   0); /* late: T-30 s .. T+90 s */
    late_close(p, "rd");
    return seen_n;
}

/* Held trims (ctx->hold_trims, state.checkpoint_ms > 0): e1's trim is
 * held out of the checkpoints while few; a late event L below the trim
 * point is then added: its checkpoint must send the held deletion before
 * L's ZADD, or the deletion, sent later (here by a revoke's forced
 * checkpoint), would delete L in Redis while memory keeps it. reload: 0
 * held throughout, 1 forced checkpoint, forgotten and loaded again. */
static size_t late_window_held(int reload)
{
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "st_runwin_redis_%d_h%d:", (int)getpid(), reload);
    int64_t T = 1700000000000000LL;
    struct st_rpipe *p = late_open(prefix, 600, "rh");
    struct st_detect_ctx ctx = {.redis = p, .conf = &conf, .hold_trims = 1};
    uint64_t ck = 4, committed = 4; /* after the first four batches */
    batch_deferred(p, &ctx, 1, 1, "e1", T, 0, 1);
    batch_deferred(p, &ctx, 2, 2, "e2", T + 600000000LL, 0, 1); /* e1 trimmed */
    batch_deferred(p, &ctx, 3, 3, "e2b", T + 601000000LL, 0, 1); /* its deletion held */
    batch_deferred(p, &ctx, 4, 4, "L", T + 400000000LL, 1, 1); /* late, below the trim */
    if (reload) {
        flush(p, &ctx, &ck, &committed);
        st_runwin_forget(w, &ctx);
    }
    /* its own commit not yet counted */
    batch_deferred(p, &ctx, ck + 1, committed, "e6", T + 420000000LL, 1,
                   1); /* T+360 s .. T+480 s */
    late_close(p, "rh");
    return seen_n;
}

/* A forced flush (a revoke's) whose own commit allows a trim: e2 comes in
 * a batch with no checkpoint and moves the run 600 s on, and e1's trim
 * waits for e2's commit, which only the flush's checkpoint brings. e1's
 * deletion then goes in the flush's second, deletions-only checkpoint;
 * without it Redis keeps e1, which memory dropped, and the run loaded
 * again after the revoke gives a late event e1 in its window. reload: 0
 * held throughout, 1 forgotten and loaded again. */
static size_t late_window_flushed(int reload)
{
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "st_runwin_redis_%d_f%d:", (int)getpid(), reload);
    int64_t T = 1700000000000000LL;
    struct st_rpipe *p = late_open(prefix, 600, "rf");
    struct st_detect_ctx ctx = {.redis = p, .conf = &conf, .hold_trims = 1};
    uint64_t ck = 2, committed = 1; /* after the first two batches */
    batch_deferred(p, &ctx, 1, 1, "e1", T, 0, 1);
    batch_deferred(p, &ctx, 2, 1, "e2", T + 600000000LL, 0, 0); /* e1's trim waits */
    flush(p, &ctx, &ck, &committed);
    if (reload)
        st_runwin_forget(w, &ctx);
    batch_deferred(p, &ctx, ck + 1, committed, "e3", T + 30000000LL, 1,
                   0); /* late: T-30 s .. T+90 s */
    late_close(p, "rf");
    return seen_n;
}

START_TEST(runwin_forced_flush_sends_the_trims_its_commit_allows)
{
    size_t held = late_window_flushed(0), rel = late_window_flushed(1);
    fprintf(stderr, "late event's window after a forced flush: %zu held, %zu reloaded\n",
            held, rel);
    ck_assert_uint_eq(held, 1); /* e3 alone: e1 trimmed */
    ck_assert_uint_eq(rel, held);
}
END_TEST

START_TEST(runwin_held_trim_goes_before_a_write_it_would_delete)
{
    size_t held = late_window_held(0), rel = late_window_held(1);
    fprintf(stderr, "late event's window with a held trim: %zu held, %zu reloaded\n", held,
            rel);
    ck_assert_uint_eq(held, 2);
    ck_assert_uint_eq(rel, held);
}
END_TEST

START_TEST(runwin_pending_writes_survive_eviction_and_revoke)
{
    size_t held = late_window_deferred(0), evict = late_window_deferred(1),
           revoke = late_window_deferred(2);
    fprintf(stderr,
            "late event's window with writes pending: %zu held, %zu eviction asked, "
            "%zu revoked\n",
            held, evict, revoke);
    ck_assert_uint_eq(held, 1);
    ck_assert_uint_eq(evict, held);
    ck_assert_uint_eq(revoke, held);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("runwin_redis");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, runwin_emptied_key_keeps_its_ttl);
    tcase_add_test(tc, runwin_reloaded_run_gives_a_late_event_the_same_window);
    tcase_add_test(tc, runwin_pending_writes_survive_eviction_and_revoke);
    tcase_add_test(tc, runwin_held_trim_goes_before_a_write_it_would_delete);
    tcase_add_test(tc, runwin_forced_flush_sends_the_trims_its_commit_allows);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
