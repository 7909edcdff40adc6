/* test_runwin_sums.c: what runwin.c keeps beside a run's members so that a
 * dense stream's detectors read no window per event (session 7) gives, at
 * every step, what reading the window gives:
 *   - st_runwin_bucket_upto (volume_anomaly's bytes of the event's own
 *     tenth of the window, read from the bucket's sum when it is known to be
 *     exactly its members') against the sum of the members' values over
 *     st_runwin_range, the computation volume_anomaly made before;
 *     st_runwin_bucket_sum against the buckets one by one;
 *   - st_runwin_marked (retry_across_paths' "did anything fail in this
 *     window", from the running count of marks in the members) against a
 *     count of the marked payloads of every window a feed evaluates.
 * Over random streams of several runs, against the real Redis: in order,
 * late and skewed events (fed out of order), duplicates, values past 32
 * bits, failed attempts of a batch redone (the members they added stay),
 * runs evicted, forgotten (a revoke) and loaded again in either layout,
 * and crashes in the middle of a checkpoint (only its first commands sent:
 * Redis then holds members whose bytes its bucket sums lack, which the
 * redone batch does not add again), each followed by the redo of the batch.
 * Checked to fail (each tried by hand, then undone): a bucket made by a feed
 * marked exact whatever its other members, a loaded member that leaves its
 * bucket exact, a trim that leaves its buckets exact, the fast path taken
 * while a later member is in the bucket, a marked member inserted out of
 * order that does not raise the counts after it. */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analyzer.h"
#include "buf.h"
#include "checkpoint.h"
#include "detect.h"
#include "log.h"
#include "rpipe.h"
#include "runwin.h"

#include "../unit/quiet_marks.h"

#define NRUNS 3
#define BUCKET_US 10000000LL /* the volume window's tenth: window 100 s */

static struct st_analyzer_conf conf;
static struct st_runwin *vw, *mw; /* values (buckets), marks */
static uint64_t rng;
static long checks, windows;

static uint64_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static int64_t value_of(const char *payload)
{
    return strtoll(payload, NULL, 10);
}

static int failed(const char *payload)
{
    return payload[0] == 'F';
}

struct tev {
    char id[24];
    int64_t ts;
    int run, late, skewed;
    char vpay[96], mpay[16];
    struct st_event ev;
};

static const char *run_ids[NRUNS] = {"r0", "r1", "r2"};

/* Every window a feed of mw evaluates: the marks counted in constant time
 * against the payloads read, for the window and some ranges inside it */
static int check_window(void *arg, const struct st_runwin_view *v, size_t lo, size_t hi,
                        int64_t end_us)
{
    (void)arg;
    (void)end_us;
    size_t want = 0;
    for (size_t i = lo; i < hi; i++)
        want += failed(v->m[i].payload);
    ck_assert_uint_eq(st_runwin_marked(v, lo, hi), want);
    for (int k = 0; k < 3 && hi > lo; k++) {
        size_t a = lo + rnd() % (hi - lo), b = a + rnd() % (hi - a + 1);
        size_t n = 0;
        for (size_t i = a; i < b; i++) {
            ck_assert_int_eq(v->m[i].marked, failed(v->m[i].payload));
            n += failed(v->m[i].payload);
        }
        ck_assert_uint_eq(st_runwin_marked(v, a, b), n);
    }
    windows++;
    return 0;
}

static int on_marks(void *arg, const struct st_runwin_view *v)
{
    return st_runwin_each_window(v, check_window, arg);
}

/* volume_anomaly's computation before session 7: the members of the
 * bucket up to to_us, their payloads summed */
static int64_t upto_by_walk(int64_t bucket, int64_t to_us)
{
    const struct st_runwin_member *m;
    size_t n = st_runwin_range(vw, bucket * BUCKET_US, to_us, &m);
    int64_t sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += strtoll(m[i].payload, NULL, 10);
    return sum;
}

static void check_sums(const struct tev *e)
{
    int64_t b = e->ts / BUCKET_US;
    int64_t want = upto_by_walk(b, e->ts);
    ck_assert_msg(st_runwin_bucket_upto(vw, b, e->ts) == want,
                  "event %s at %" PRId64 ": bucket_upto %" PRId64 ", the walk %" PRId64,
                  e->id, e->ts, st_runwin_bucket_upto(vw, b, e->ts), want);
    int64_t nine = 0;
    for (int i = 1; i < 10; i++)
        nine += st_runwin_bucket_get(vw, b - i);
    ck_assert(st_runwin_bucket_sum(vw, b - 9, b - 1) == nine);
    /* and at the time of another member of the run: the fast path holds
     * only where nothing later is in the bucket */
    const struct st_runwin_member *m;
    size_t n = st_runwin_range(vw, INT64_MIN + 1, INT64_MAX, &m);
    if (n) {
        int64_t t = m[rnd() % n].ts_us;
        int64_t tb = t / BUCKET_US;
        want = upto_by_walk(tb, t);
        ck_assert(st_runwin_bucket_upto(vw, tb, t) == want);
    }
    checks++;
}

/* One attempt of a batch: prefetch, load, feed each event to both windows
 * with the checks. */
static void attempt(struct st_rpipe *p, struct st_detect_ctx *ctx, struct tev *evs, size_t n)
{
    char err[256];
    st_runwin_begin(vw, n);
    st_runwin_begin(mw, n);
    for (size_t i = 0; i < n; i++) {
        st_runwin_prefetch(vw, ctx, &evs[i].ev);
        st_runwin_prefetch(mw, ctx, &evs[i].ev);
    }
    ck_assert_msg(st_rpipe_exec(p, err, sizeof(err)) == 0, "%s", err);
    for (size_t i = 0; i < n; i++) {
        ctx->late = evs[i].late;
        ctx->skewed = evs[i].skewed;
        st_runwin_add(vw, ctx, &evs[i].ev, evs[i].vpay);
        check_sums(&evs[i]);
        st_runwin_feed(mw, ctx, &evs[i].ev, evs[i].mpay, 0, on_marks, NULL);
    }
    ctx->late = ctx->skewed = 0;
}

/* The batch's checkpoint, cut after its first `cut` commands (a crash)
 * when cut >= 0 */
static void checkpoint(struct st_rpipe *p, struct st_detect_ctx *ctx, long cut)
{
    char err[256];
    struct st_checkpoint *ck = st_checkpoint_new();
    ctx->ckpt = ck;
    st_runwin_end_batch(vw, ctx);
    st_runwin_end_batch(mw, ctx);
    ctx->ckpt = NULL;
    if (cut < 0) {
        ck_assert_msg(st_checkpoint_exec(ck, p, err, sizeof(err)) == 0, "%s", err);
        st_runwin_after_commit(vw, ctx);
        st_runwin_after_commit(mw, ctx);
    } else {
        size_t len = st_checkpoint_len(ck);
        st_checkpoint_queue_part(ck, p, 0, len ? (size_t)cut % (len + 1) : 0, SIZE_MAX, 0);
        ck_assert_msg(st_rpipe_exec(p, err, sizeof(err)) == 0, "%s", err);
    }
    st_checkpoint_destroy(ck);
}

static void cleanup(struct st_rpipe *p)
{
    char err[256];
    const char *names[] = {"vs", "ms"}, *kinds[] = {"w", "eps", "b", "s", "l"};
    for (int r = 0; r < NRUNS; r++) {
        struct st_buf b;
        st_buf_init(&b);
        st_detect_run_hash_key_buf(&b, &conf, "task", run_ids[r]);
        const char *d[] = {"DEL", b.data};
        st_rpipe_cmd(p, NULL, NULL, 2, d);
        st_rpipe_exec(p, err, sizeof(err));
        st_buf_fini(&b);
        for (int i = 0; i < 2; i++)
            for (int k = 0; k < 5; k++) {
                char *key = st_detect_key(&conf, names[i], kinds[k], "task", run_ids[r]);
                const char *dd[] = {"DEL", key};
                st_rpipe_cmd(p, NULL, NULL, 2, dd);
                st_rpipe_exec(p, err, sizeof(err));
                free(key);
            }
    }
}

START_TEST(runwin_sums_and_marks_match_the_window)
{
    char err[256], prefix[64];
    rng = 0x9e3779b97f4a7c15ULL * (uint64_t)(_i + 1);
    checks = windows = 0;
    snprintf(prefix, sizeof(prefix), "st_runwin_sums_%d_%d:", (int)getpid(), _i);
    memset(&conf, 0, sizeof(conf));
    conf.redis_prefix = prefix;
    conf.state_ttl_s = 86400;
    conf.state_blob_max = 4096; /* the sizes below are made for it */
    conf.state_evict_s = 100;
    const char *url = getenv("SANDTRAIL_REDIS_URL");
    ck_assert_msg(url != NULL, "the services' environment: scripts/services env");
    struct st_rpipe *p = st_rpipe_new(url, NULL, err, sizeof(err));
    ck_assert_msg(p != NULL, "%s", err);
    vw = st_runwin_new(&conf, "vs", 10 * BUCKET_US, 20 * BUCKET_US + 30000000, ST_RUNWIN_BUCKETS,
                       BUCKET_US);
    st_runwin_set_value(vw, value_of);
    mw = st_runwin_new(&conf, "ms", 60000000, 150000000, ST_RUNWIN_EPISODES, 0);
    st_runwin_set_mark(mw, failed);

    enum { NEV = 3000 };
    struct tev *all = calloc(NEV, sizeof(*all));
    int64_t cursor[NRUNS];
    for (int r = 0; r < NRUNS; r++)
        cursor[r] = 1700000000000000LL + (int64_t)r * 7000000;
    for (int i = 0; i < NEV; i++) {
        struct tev *e = &all[i];
        int r = (int)(rnd() % NRUNS), kind = (int)(rnd() % 100);
        if (kind < 5 && i > 0) {
            *e = all[rnd() % (uint64_t)i]; /* the same event again */
        } else {
            snprintf(e->id, sizeof(e->id), "e%d", i);
            e->run = r;
            cursor[r] += (int64_t)(rnd() % 3000000);
            e->ts = cursor[r];
            if (kind < 15) { /* late: up to 300 s back, below the trims */
                e->ts -= (int64_t)(rnd() % 300000000);
                e->late = 1;
            } else if (kind < 18) { /* skewed: ahead of the run */
                e->ts += (int64_t)(rnd() % 100000000);
                e->skewed = 1;
            }
            uint64_t v = rnd() % 100 < 3 ? 5000000000ULL + rnd() % 1000 : rnd() % 5000;
            /* payloads of several lengths (the value, then padding that
             * strtoll stops at): runs cross the string layout's 4 KB both
             * ways */
            snprintf(e->vpay, sizeof(e->vpay), "%" PRIu64 " %.*s", v, (int)(rnd() % 70),
                     "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");
            snprintf(e->mpay, sizeof(e->mpay), "%ct%d", rnd() % 100 < 8 ? 'F' : 'A',
                     (int)(rnd() % 6));
        }
        e->ev.event_id = e->id;
        e->ev.ts_us = e->ts;
        e->ev.source_name = "s";
        e->ev.task_id = "task";
        e->ev.run_id = run_ids[e->run];
    }

    struct st_detect_ctx ctx = {.redis = p, .conf = &conf, .now_s = 1000};
    uint64_t seq = 0;
    int forgets = 0, crashes = 0, redos = 0;
    for (int i = 0; i < NEV;) {
        size_t n = 1 + rnd() % 20;
        if (n > (size_t)(NEV - i))
            n = (size_t)(NEV - i);
        /* the events of one batch live until its end, as in the analyzer
         * (a copy, since a duplicate may repeat a struct of this batch) */
        struct tev *b = calloc(n, sizeof(*b));
        memcpy(b, all + i, n * sizeof(*b));
        for (size_t k = 0; k < n; k++) {
            b[k].ev.event_id = b[k].id;
            b[k].ev.run_id = run_ids[b[k].run];
        }
        ctx.seq = ctx.dirty_seq = ++seq;
        ctx.now_s += (int64_t)(rnd() % 100 < 5 ? 150 : rnd() % 3);
        int what = (int)(rnd() % 100);
        if (what < 10) { /* a failed attempt, then the redo */
            attempt(p, &ctx, b, n);
            st_runwin_reset(vw);
            st_runwin_reset(mw);
            redos++;
        } else if (what < 20) { /* a crash inside the checkpoint: memory
                                 * gone, Redis holds part of it */
            attempt(p, &ctx, b, n);
            checkpoint(p, &ctx, (long)(rnd() % 64));
            st_runwin_forget(vw, &ctx);
            st_runwin_forget(mw, &ctx);
            ctx.seq = ctx.dirty_seq = ++seq;
            crashes++;
        }
        attempt(p, &ctx, b, n);
        checkpoint(p, &ctx, -1);
        if (rnd() % 100 < 4) { /* a revoke: loaded again from Redis */
            st_runwin_forget(vw, &ctx);
            st_runwin_forget(mw, &ctx);
            forgets++;
        }
        free(b);
        i += (int)n;
    }
    fprintf(stderr,
            "seed %d: %ld events checked, %ld windows; %d redos, %d crashes, %d revokes\n",
            _i, checks, windows, redos, crashes, forgets);
    cleanup(p);
    free(all);
    st_runwin_destroy(vw);
    st_runwin_destroy(mw);
    st_rpipe_destroy(p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("runwin_sums");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, runwin_sums_and_marks_match_the_window, 0, 8);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
