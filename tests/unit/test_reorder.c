/* test_reorder.c: the event-time reorder buffer without services: revoked
 * partitions' slots are reused, skewed events leave at once and move no
 * watermark, a forgotten event no longer holds commits back, a partition
 * resumed at a commit point with its clock judges lateness as before; an
 * event parked (its text kept, its document freed) comes back as it was
 * parsed, and holds a few hundred bytes instead of its 4 KB arena. */
#include <check.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "corpus.h"
#include "quiet_marks.h"
#include "reorder.h"

#define S 1000000LL

/* The texts pushed (push's raw must live until the next park): freed by
 * texts_free at the end of a test. */
static char **texts;
static size_t ntexts, captexts;

static const char *text_keep(const char *s, size_t len)
{
    if (ntexts == captexts) {
        captexts = captexts ? 2 * captexts : 1024;
        texts = realloc(texts, captexts * sizeof(*texts));
    }
    char *t = malloc(len + 1);
    memcpy(t, s, len);
    t[len] = '\0';
    return texts[ntexts++] = t;
}

static void texts_free(void)
{
    for (size_t i = 0; i < ntexts; i++)
        free(texts[i]);
    free(texts);
    texts = NULL;
    ntexts = captexts = 0;
}

/* An event of id e<off> (its document's time is not ts_us: ts_us is what
 * the buffer orders by, as a skewed event's receive time). */
static void push(struct st_reorder *r, int32_t part, int64_t off, int64_t ts_us, int skewed)
{
    char line[512];
    struct st_event ev;
    struct st_reject rej;
    snprintf(line, sizeof(line),
             "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"e%lld\","
             "\"ts\":\"2026-11-29T07:00:00Z\",\"source\":{\"kind\":\"proxy\",\"name\":\"p\"},"
             "\"task_id\":\"T\",\"run_id\":\"R\",\"type\":\"request\",\"attrs\":{\"host\":\"h\"}}",
             (long long)off);
    const char *raw = text_keep(line, strlen(line));
    ck_assert_int_eq(st_event_parse(&ev, raw, strlen(raw), &rej), 0);
    ev.ts_us = ts_us;
    st_reorder_push(r, part, off, &ev, raw, strlen(raw), 0, skewed);
}

static size_t release(struct st_reorder *r, int flush, int *late)
{
    struct st_reorder_item *out = NULL;
    size_t cap = 0, n = st_reorder_release(r, flush, 0, 0, 0, &out, &cap);
    *late = 0;
    for (size_t i = 0; i < n; i++) {
        *late += out[i].late;
        st_reorder_item_fini(&out[i]);
    }
    free(out);
    return n;
}

START_TEST(reorder_reuses_a_revoked_partitions_slot)
{
    struct st_reorder *r = st_reorder_new(30 * S);
    int late;
    /* a rebalance storm: partitions come and go, at most two at a time */
    for (int32_t p = 0; p < 100; p++) {
        push(r, p, 0, 1000 * S, 0);
        push(r, p, 1, 1001 * S, 0);
        if (p > 0)
            st_reorder_drop(r, p - 1);
    }
    ck_assert_uint_le(st_reorder_slots(r), 2);
    ck_assert_uint_eq(st_reorder_buffered(r), 2);
    ck_assert_int_eq(st_reorder_commit_offset(r, 98), -1);
    ck_assert_int_eq(st_reorder_commit_offset(r, 99), 0);
    ck_assert_uint_eq(release(r, 1, &late), 2);
    ck_assert_int_eq(st_reorder_commit_offset(r, 99), 2);
    st_reorder_destroy(r);
}
END_TEST

START_TEST(reorder_skewed_event_moves_no_watermark)
{
    struct st_reorder *r = st_reorder_new(30 * S);
    int late;
    push(r, 0, 0, 1000 * S, 0);
    /* stamped 2099: pushed with its receive time, marked skewed */
    push(r, 0, 1, 1001 * S, 1);
    /* it leaves at once; the on-time event waits for the watermark */
    ck_assert_uint_eq(release(r, 0, &late), 1);
    ck_assert_int_eq(st_reorder_commit_offset(r, 0), 0);
    push(r, 0, 2, 1002 * S, 0);
    push(r, 0, 3, 1040 * S, 0);
    /* 1000 and 1002 are behind the watermark 1010: released, not late */
    ck_assert_uint_eq(release(r, 0, &late), 2);
    ck_assert_int_eq(late, 0);
    ck_assert_int_eq(st_reorder_commit_offset(r, 0), 3);
    st_reorder_destroy(r);
}
END_TEST

START_TEST(reorder_forget_drops_one_event)
{
    struct st_reorder *r = st_reorder_new(30 * S);
    int late;
    for (int i = 0; i < 5; i++)
        push(r, 0, i, (1000 + 5 - i) * S, 0);
    ck_assert_int_eq(st_reorder_forget(r, 0, 0), 1);
    ck_assert_int_eq(st_reorder_forget(r, 0, 0), 0);
    ck_assert_int_eq(st_reorder_commit_offset(r, 0), 1);
    ck_assert_uint_eq(st_reorder_buffered(r), 4);
    ck_assert_uint_eq(release(r, 1, &late), 4);
    ck_assert_int_eq(st_reorder_commit_offset(r, 0), 5);
    st_reorder_destroy(r);
}
END_TEST

START_TEST(reorder_skew_bounds)
{
    ck_assert_int_eq(st_reorder_skewed(4102444800LL * S, 1000 * S, 300 * S, 0), 1);
    ck_assert_int_eq(st_reorder_skewed(1300 * S, 1000 * S, 300 * S, 0), 0);
    ck_assert_int_eq(st_reorder_skewed(1301 * S, 1000 * S, 300 * S, 0), 1);
    ck_assert_int_eq(st_reorder_skewed(0, 100000 * S, 300 * S, 0), 0); /* past off */
    ck_assert_int_eq(st_reorder_skewed(0, 100000 * S, 300 * S, 3600 * S), 1);
    ck_assert_int_eq(st_reorder_skewed(4102444800LL * S, -1, 300 * S, 3600 * S), 0);
}
END_TEST

/* Releases what may leave (flush: everything) and records each event's
 * late flag at late_of[offset]. */
static void release_into(struct st_reorder *r, int flush, int *late_of)
{
    struct st_reorder_item *out = NULL;
    size_t cap = 0, n = st_reorder_release(r, flush, 0, 0, 0, &out, &cap);
    for (size_t i = 0; i < n; i++) {
        late_of[out[i].offset] = out[i].late;
        st_reorder_item_fini(&out[i]);
    }
    free(out);
}

#define NEV 120

/* Event times that go back and forth: runs that overlap, a burst, pauses
 * longer than the lateness, a forged time now and then (skewed). */
static void stream(int64_t *ts, int *skewed, unsigned seed)
{
    int64_t t = 1000 * S;
    for (int i = 0; i < NEV; i++) {
        seed = seed * 1103515245u + 12345u;
        unsigned x = (seed >> 8) % 100;
        if (x < 60)
            t += (int64_t)(x % 7) * S;
        else if (x < 90)
            t -= (int64_t)(x % 50) * S;
        else
            t += 100 * S;
        ts[i] = t;
        skewed[i] = x == 42;
    }
}

/* One process over offsets from..NEV-1, batches of k, starting the
 * partition with clock at from (resume 0: without); the late flag of each
 * event in late_of; the commit point after each batch in points. The end
 * is a flush (as --drain's). */
static void one_process(int64_t lateness, const int64_t *ts, const int *skewed, int from,
                        int k, int resume, int64_t clock, int *late_of,
                        int64_t (*points)[2])
{
    struct st_reorder *r = st_reorder_new(lateness);
    if (resume)
        st_reorder_resume(r, 0, from, clock);
    for (int i = from; i < NEV; i += k) {
        for (int j = i; j < i + k && j < NEV; j++)
            push(r, 0, j, ts[j], skewed[j]);
        release_into(r, i + k >= NEV, late_of);
        if (points)
            points[i / k][0] = st_reorder_commit_point(r, 0, &points[i / k][1]);
    }
    st_reorder_destroy(r);
}

/* A process that starts a partition at a commit point taken by another,
 * with its clock, judges every event from that offset on late or not as
 * the other did, whatever the lateness, the batch and where it stopped;
 * without the clock it does not (the same check fails at some point, so
 * the test can fail). */
START_TEST(reorder_resumed_clock_makes_the_same_late_events)
{
    static const int64_t lateness[] = {0, 30 * S};
    static const int batch[] = {1, 4, 16};
    int64_t ts[NEV];
    int sk[NEV], clean[NEV], again[NEV];
    int64_t points[NEV][2];
    int differs_without = 0, checked = 0;
    for (unsigned seed = 1; seed <= 3; seed++) {
        stream(ts, sk, seed);
        for (size_t l = 0; l < 2; l++) {
            for (size_t b = 0; b < 3; b++) {
                int k = batch[b];
                one_process(lateness[l], ts, sk, 0, k, 0, 0, clean, points);
                for (int c = 0; c < (NEV + k - 1) / k; c++) {
                    int from = (int)points[c][0];
                    if (from >= NEV)
                        continue;
                    ck_assert_int_ge(from, 0);
                    one_process(lateness[l], ts, sk, from, k, 1, points[c][1], again, NULL);
                    for (int i = from; i < NEV; i++)
                        ck_assert_msg(again[i] == clean[i],
                                      "seed %u lateness %lld batch %d from %d: event %d "
                                      "late %d, clean %d", seed, (long long)lateness[l],
                                      k, from, i, again[i], clean[i]);
                    checked++;
                    one_process(lateness[l], ts, sk, from, k, 0, 0, again, NULL);
                    for (int i = from; i < NEV; i++)
                        differs_without |= again[i] != clean[i];
                }
            }
        }
    }
    ck_assert_int_gt(checked, 100);
    ck_assert_int_eq(differs_without, 1);
}
END_TEST

/* The clock is the newest time before the committed offset: the oldest
 * buffered event's, not the partition's newest. */
START_TEST(reorder_commit_point_clock_is_before_the_oldest_buffered)
{
    struct st_reorder *r = st_reorder_new(30 * S);
    int late;
    int64_t clock;
    ck_assert_int_eq(st_reorder_commit_point(r, 0, &clock), -1);
    ck_assert(clock == ST_REORDER_NO_CLOCK);
    push(r, 0, 0, 1000 * S, 0);
    ck_assert_int_eq(st_reorder_commit_point(r, 0, &clock), 0);
    ck_assert(clock == ST_REORDER_NO_CLOCK); /* nothing before offset 0 */
    push(r, 0, 1, 1050 * S, 0);
    push(r, 0, 2, 1060 * S, 0);
    ck_assert_uint_eq(release(r, 0, &late), 1); /* 1000 */
    ck_assert_int_eq(st_reorder_commit_point(r, 0, &clock), 1);
    ck_assert(clock == 1000 * S);
    ck_assert_uint_eq(release(r, 1, &late), 2);
    ck_assert_int_eq(st_reorder_commit_point(r, 0, &clock), 3);
    ck_assert(clock == 1060 * S);
    st_reorder_destroy(r);
}
END_TEST

/* A clock resumed at an offset after the first one pushed (a seek back),
 * or on a partition that holds events, is not taken; one before it (a gap
 * of offsets without messages) is. */
START_TEST(reorder_resume_only_at_its_offset)
{
    struct st_reorder *r = st_reorder_new(30 * S);
    int late;
    st_reorder_resume(r, 0, 5, 2000 * S);
    push(r, 0, 4, 1000 * S, 0);
    ck_assert_uint_eq(release(r, 1, &late), 1);
    ck_assert_int_eq(late, 0);
    st_reorder_resume(r, 3, 5, 2000 * S);
    push(r, 3, 7, 1000 * S, 0);
    ck_assert_uint_eq(release(r, 0, &late), 1);
    ck_assert_int_eq(late, 1);
    st_reorder_resume(r, 1, 5, 2000 * S);
    push(r, 1, 5, 1000 * S, 0);
    ck_assert_uint_eq(release(r, 1, &late), 1);
    ck_assert_int_eq(late, 1);
    st_reorder_resume(r, 1, 6, 9000 * S); /* holds events: ignored */
    push(r, 1, 6, 1980 * S, 0);
    ck_assert_uint_eq(release(r, 0, &late), 0); /* buffered: on time */
    /* an invalid message at the offset first: the clock is taken too */
    st_reorder_resume(r, 2, 7, 2000 * S);
    st_reorder_note(r, 2, 7);
    push(r, 2, 8, 1000 * S, 0);
    ck_assert_uint_eq(release(r, 0, &late), 1);
    ck_assert_int_eq(late, 1);
    st_reorder_destroy(r);
}
END_TEST

/* The commit point against a model of the buffer (every offset pushed and
 * not yet released or forgotten, with the clock it was pushed with), over
 * random streams: gaps between offsets, skewed events, forgotten events,
 * releases while some are held, several partitions, a ring that wraps and
 * grows while it holds events. */
START_TEST(reorder_commit_point_is_the_oldest_still_buffered)
{
    enum { PARTS = 3, N = 3000 };
    static int64_t off_of[PARTS][N], clock_of[PARTS][N];
    static int held[PARTS][N];
    srand(7 + (unsigned)_i);
    struct st_reorder *r = st_reorder_new(5 * S);
    int64_t next[PARTS] = {0}, max_ts[PARTS], n[PARTS] = {0};
    for (int p = 0; p < PARTS; p++)
        max_ts[p] = ST_REORDER_NO_CLOCK;
    for (int step = 0; step < N; step++) {
        int p = rand() % PARTS;
        int op = rand() % 10;
        if (op < 7) {
            int64_t off = next[p] + (rand() % 4 == 0 ? 1 + rand() % 3 : 0);
            int64_t ts = (1000 + step / 4 + rand() % 20) * S;
            int skewed = rand() % 25 == 0;
            off_of[p][n[p]] = off;
            clock_of[p][n[p]] = max_ts[p];
            held[p][n[p]] = 1;
            n[p]++;
            next[p] = off + 1;
            if (!skewed && (max_ts[p] == ST_REORDER_NO_CLOCK || ts > max_ts[p]))
                max_ts[p] = ts;
            push(r, p, off, ts, skewed);
        } else if (op < 8 && n[p]) {
            int64_t k = rand() % n[p];
            ck_assert_int_eq(st_reorder_forget(r, p, off_of[p][k]), held[p][k]);
            held[p][k] = 0;
        } else if (op < 9 && _i % 2 == 1) {
            /* events parked, kept parsed (a threshold the buffer is below
             * at times: detect.park_above) and not, forgotten, released */
            st_reorder_park(r, rand() % 2 ? 0 : (size_t)(rand() % 40));
        } else {
            struct st_reorder_item *out = NULL;
            int flush = rand() % 20 == 0;
            size_t max = rand() % 3 ? 0 : (size_t)(1 + rand() % 8); /* bounded */
            size_t cap = 0, got = st_reorder_release(r, flush, 0, 0, max, &out, &cap);
            for (size_t i = 0; i < got; i++) {
                int q = out[i].partition;
                char id[32];
                snprintf(id, sizeof(id), "e%lld", (long long)out[i].offset);
                ck_assert_str_eq(out[i].ev.event_id, id);
                for (int64_t k = 0; k < n[q]; k++)
                    if (off_of[q][k] == out[i].offset) {
                        ck_assert(held[q][k]);
                        held[q][k] = 0;
                    }
                st_reorder_item_fini(&out[i]);
            }
            free(out);
        }
        for (int q = 0; q < PARTS; q++) {
            int64_t want = n[q] ? next[q] : -1, want_clock = max_ts[q], clock;
            for (int64_t k = 0; k < n[q]; k++)
                if (held[q][k]) {
                    want = off_of[q][k];
                    want_clock = clock_of[q][k];
                    break;
                }
            ck_assert_int_eq(st_reorder_commit_point(r, q, &clock), want);
            if (want >= 0)
                ck_assert(clock == want_clock);
        }
    }
    st_reorder_destroy(r);
    texts_free();
}
END_TEST


/* Every valid event of the corpora pushed, one in three skewed (its time
 * the receive time), in batches of 64 parked at each batch's end, on a
 * buffer that releases nothing before the flush. */
struct corpus_push {
    struct st_reorder *r;
    int64_t n;
    size_t keep; /* st_reorder_park's: events kept parsed while so few wait */
};

static void corpus_push_one(const char *text, size_t len, void *arg)
{
    struct corpus_push *c = arg;
    struct st_event ev;
    struct st_reject rej;
    const char *raw = text_keep(text, len); /* ntexts - 1: its number */
    if (st_event_parse(&ev, raw, len, &rej)) {
        free(texts[--ntexts]);
        return;
    }
    ck_assert_int_eq((int64_t)ntexts - 1, c->n);
    int skewed = c->n % 3 == 1;
    if (skewed)
        ev.ts_us = 1000 * S + c->n;
    st_reorder_push(c->r, (int32_t)(c->n % 2), c->n, &ev, raw, len, 0, skewed);
    if (++c->n % 64 == 0)
        st_reorder_park(c->r, c->keep);
}

/* A parked event comes back from st_reorder_release as the parse of its
 * text gives it: every field, its time as pushed (a skewed event's
 * receive time), the whole document printed, its target; and the flags
 * the buffer gave it. The corpora: the test data, the schemas' examples
 * and the mixed benchmark stream (every type, identity, attrs, unknown
 * fields, escapes). */
START_TEST(reorder_parked_event_comes_back_identical)
{
    /* _i 1: the first 1,000 or so kept parsed (detect.park_above), the
     * rest parked: both come back the same */
    struct corpus_push c = {st_reorder_new(86400 * S), 0, _i ? 1000 : 0};
    corpus_tree(SANDTRAIL_SOURCE_DIR "/tests/data", corpus_push_one, &c);
    corpus_tree(SANDTRAIL_SOURCE_DIR "/schemas", corpus_push_one, &c);
    ck_assert_int_eq(corpus_generated("python3 " SANDTRAIL_SOURCE_DIR
                                      "/scripts/bench/gen_mixed.py 2000 ",
                                      " 7 2>/dev/null", corpus_push_one, &c),
                     0);
    st_reorder_park(c.r, c.keep);
    ck_assert_int_gt(c.n, 2000);
    /* skewed ones too: nothing was released before */
    if (c.keep) {
        size_t parked = st_reorder_parked(c.r);
        ck_assert_uint_gt(parked, 0);
        ck_assert_uint_le((size_t)c.n - parked, c.keep + 64); /* kept: one batch over */
        ck_assert_uint_ge((size_t)c.n - parked, c.keep - 64);
    } else {
        ck_assert_uint_eq(st_reorder_parked(c.r), (size_t)c.n);
    }
    struct st_reorder_item *out = NULL;
    size_t cap = 0, got = st_reorder_release(c.r, 1, 0, 0, 0, &out, &cap);
    ck_assert_uint_eq(got, (size_t)c.n);
    ck_assert_uint_eq(st_reorder_buffered(c.r), 0);
    ck_assert_uint_eq(st_reorder_parked(c.r), 0);
    ck_assert_uint_eq(st_reorder_unparsed(c.r), 0);
    for (size_t i = 0; i < got; i++) {
        const struct st_event *a = &out[i].ev;
        struct st_event t;
        struct st_reject rej;
        int64_t k = out[i].offset;
        ck_assert_int_eq(st_event_parse(&t, texts[k], strlen(texts[k]), &rej), 0);
        ck_assert_int_eq(out[i].skewed, k % 3 == 1);
        ck_assert_int_eq(out[i].partition, k % 2);
        ck_assert(a->ts_us == (k % 3 == 1 ? 1000 * S + k : t.ts_us));
        ck_assert_ptr_nonnull(a->mem);
        ck_assert(corpus_same_str(a->event_id, t.event_id));
        ck_assert(a->source_kind == t.source_kind);
        ck_assert(corpus_same_str(a->source_name, t.source_name));
        ck_assert(corpus_same_str(a->source_platform, t.source_platform));
        ck_assert(corpus_same_str(a->task_id, t.task_id));
        ck_assert(corpus_same_str(a->run_id, t.run_id));
        ck_assert(corpus_same_str(a->trace_id, t.trace_id));
        ck_assert(a->type == t.type);
        ck_assert(a->decision == t.decision);
        ck_assert(corpus_same_str(a->reason, t.reason));
        ck_assert(corpus_same_str(a->content, t.content));
        ck_assert(corpus_same_json(a->identity, t.identity));
        ck_assert(corpus_same_json(a->attrs, t.attrs));
        ck_assert(corpus_same_json(a->doc, t.doc));
        ck_assert(corpus_same_str(st_event_target(a), st_event_target(&t)));
        st_event_fini(&t);
        st_reorder_item_fini(&out[i]);
    }
    free(out);
    st_reorder_destroy(c.r);
    texts_free();
}
END_TEST

/* What the buffer holds per event, counted (not RSS): 2 KB at least
 * parsed (its arena's block, the smaller size: arena.h); a few hundred
 * bytes parked: its text (180 bytes here, the
 * live benchmark's about 220) and the buffer's 40 + 24 bytes of ring and
 * key. Released in the batch it came (detect.lateness_s=0), nothing is
 * parked. */
START_TEST(reorder_parked_event_is_small)
{
    enum { BATCH = 1000, BATCHES = 50 };
    size_t heap0 = mallinfo2().uordblks;
    struct st_reorder *r = st_reorder_new(30 * S);
    size_t textlen = 0;
    for (int b = 0; b < BATCHES; b++) {
        size_t before = st_reorder_bytes(r);
        for (int i = 0; i < BATCH; i++) {
            int64_t off = (int64_t)b * BATCH + i;
            push(r, 0, off, 1000 * S + off, 0); /* 20 ms of event time */
            textlen += strlen(texts[ntexts - 1]);
        }
        /* parsed, each holds its arena */
        ck_assert_uint_ge(st_reorder_bytes(r) - before, (size_t)BATCH * 2000);
        ck_assert_uint_eq(st_reorder_park(r, 0), BATCH);
    }
    size_t n = (size_t)BATCH * BATCHES, per = st_reorder_bytes(r) / n;
    ck_assert_uint_eq(st_reorder_parked(r), n);
    printf("reorder: %zu bytes per parked event (text %zu)\n", per, textlen / n);
    ck_assert_uint_le(per, textlen / n + 160);
    /* and the heap (glibc's count: this test is not linked with jemalloc)
     * says the same, so that nothing the count misses is kept (a document
     * parked but not freed): the buffer, the texts the test keeps, and the
     * arenas' block caches (arena.h: at most 8 MB per thread and 8 MB
     * shared); a document kept would be 2 KB an event, 100 MB */
    size_t heap = mallinfo2().uordblks - heap0;
    printf("reorder: heap %zu bytes per parked event\n", heap / n);
    ck_assert_uint_le(heap, n * (2 * (textlen / n) + 160 + 48) + (17u << 20));
    int late;
    ck_assert_uint_eq(release(r, 1, &late), n);
    st_reorder_destroy(r);

    /* lateness 0: every event leaves in its batch, none is parked */
    r = st_reorder_new(0);
    for (int i = 0; i < BATCH; i++)
        push(r, 0, i, 1000 * S + i, 0);
    ck_assert_uint_eq(release(r, 0, &late), BATCH);
    ck_assert_uint_eq(st_reorder_park(r, 0), 0);
    st_reorder_destroy(r);
    texts_free();
}
END_TEST

/* A release bounded to max events gives, call after call, what one
 * unbounded release gives, in the same order (a flush of parked events
 * in slices). */
START_TEST(reorder_bounded_release_is_the_same_in_slices)
{
    struct st_reorder *one = st_reorder_new(30 * S), *sliced = st_reorder_new(30 * S);
    for (int i = 0; i < 600; i++) {
        int64_t ts = (1000 + (i * 7919) % 100) * S;
        push(one, i % 3, i, ts, i % 50 == 7);
        push(sliced, i % 3, i, ts, i % 50 == 7);
        if (i % 100 == 99) {
            st_reorder_park(one, 0);
            st_reorder_park(sliced, 0);
        }
    }
    struct st_reorder_item *a = NULL, *b = NULL;
    size_t capa = 0, capb = 0, na = st_reorder_release(one, 1, 0, 0, 0, &a, &capa), nb = 0;
    ck_assert_uint_eq(na, 600);
    int calls = 0;
    while (st_reorder_buffered(sliced)) {
        struct st_reorder_item *out = NULL;
        size_t cap = 0, got = st_reorder_release(sliced, 1, 0, 0, 7, &out, &cap);
        ck_assert_uint_le(got, 7 + 12); /* the skewed ones, all at once */
        for (size_t i = 0; i < got; i++) {
            if (nb == capb) {
                capb = capb ? 2 * capb : 64;
                b = realloc(b, capb * sizeof(*b));
            }
            b[nb++] = out[i];
        }
        free(out);
        calls++;
    }
    ck_assert_int_gt(calls, 80);
    ck_assert_uint_eq(nb, na);
    for (size_t i = 0; i < na; i++) {
        ck_assert_int_eq(a[i].partition, b[i].partition);
        ck_assert_int_eq(a[i].offset, b[i].offset);
        ck_assert_str_eq(a[i].ev.event_id, b[i].ev.event_id);
        st_reorder_item_fini(&a[i]);
        st_reorder_item_fini(&b[i]);
    }
    free(a);
    free(b);
    st_reorder_destroy(one);
    st_reorder_destroy(sliced);
    texts_free();
}
END_TEST

/* A parked event whose text no longer parses (it did: here the text given
 * is not the one parsed) is left out of the release, counted, and moves
 * the commit point like one released; forgetting a parked event, and
 * dropping a partition of parked events, free them. */
START_TEST(reorder_parked_event_that_does_not_parse_is_skipped)
{
    struct st_reorder *r = st_reorder_new(30 * S);
    struct st_event ev;
    struct st_reject rej;
    int late;
    push(r, 0, 0, 1000 * S, 0);
    const char *bad = text_keep("{\"schema\":", 10);
    const char *good = texts[0];
    ck_assert_int_eq(st_event_parse(&ev, good, strlen(good), &rej), 0);
    ev.ts_us = 1001 * S;
    st_reorder_push(r, 0, 1, &ev, bad, strlen(bad), 0, 0);
    push(r, 0, 2, 1002 * S, 0);
    push(r, 0, 3, 1003 * S, 0);
    push(r, 1, 0, 1003 * S, 0);
    ck_assert_uint_eq(st_reorder_park(r, 0), 5);
    ck_assert_int_eq(st_reorder_forget(r, 0, 2), 1);
    ck_assert_uint_eq(st_reorder_parked(r), 4);
    st_reorder_drop(r, 1);
    ck_assert_uint_eq(st_reorder_parked(r), 3);
    ck_assert_uint_eq(release(r, 1, &late), 2); /* offsets 0 and 3 */
    ck_assert_uint_eq(st_reorder_unparsed(r), 1);
    ck_assert_uint_eq(st_reorder_buffered(r), 0);
    ck_assert_int_eq(st_reorder_commit_offset(r, 0), 4);
    st_reorder_destroy(r);
    texts_free();
}
END_TEST

/* Events leave in (time, offset) order, each once, and only once the
 * watermark passed them, whatever order they came in: random streams over
 * two partitions where most events come in time order and some up to 4 s
 * early or late within a lateness of 5 s (none late), runs of equal times,
 * released at random points, bounded or not, then flushed. */
START_TEST(reorder_releases_in_time_order)
{
    enum { PARTS = 2, N = 4000 };
    srand(11 + (unsigned)_i);
    struct st_reorder *r = st_reorder_new(5 * S);
    int64_t next[PARTS] = {0}, clock[PARTS] = {0}, max_ts[PARTS], pushed = 0, left = 0;
    int64_t last_ts[PARTS], last_off[PARTS];
    static int64_t ts_of[PARTS][N];
    for (int p = 0; p < PARTS; p++) {
        max_ts[p] = INT64_MIN;
        last_ts[p] = INT64_MIN;
        last_off[p] = -1;
    }
    for (int step = 0; step < N + 1; step++) {
        int last = step == N;
        if (!last && rand() % 8) {
            int p = rand() % PARTS;
            clock[p] += rand() % 3 == 0 ? 0 : S / 4;
            int64_t ts = clock[p] + 100 * S;
            if (rand() % 6 == 0)
                ts += (rand() % 9 - 4) * S / 2; /* up to 2 s off either way */
            /* never late: at or past the watermark */
            if (max_ts[p] != INT64_MIN && ts < max_ts[p] - 5 * S)
                ts = max_ts[p] - 5 * S;
            ts_of[p][next[p]] = ts;
            if (ts > max_ts[p])
                max_ts[p] = ts;
            push(r, p, next[p]++, ts, 0);
            pushed++;
            continue;
        }
        struct st_reorder_item *out = NULL;
        size_t max = !last && rand() % 2 ? (size_t)(1 + rand() % 16) : 0;
        size_t cap = 0, got = st_reorder_release(r, last, 0, 0, max, &out, &cap);
        for (size_t i = 0; i < got; i++) {
            int q = out[i].partition;
            int64_t ts = ts_of[q][out[i].offset];
            ck_assert_int_eq(out[i].late, 0);
            ck_assert_int_eq(out[i].ev.ts_us, ts);
            /* in order after the partition's last one out */
            ck_assert_msg(ts > last_ts[q] || (ts == last_ts[q] && out[i].offset > last_off[q]),
                          "partition %d: offset %lld (ts %lld) after %lld (ts %lld)", q,
                          (long long)out[i].offset, (long long)ts, (long long)last_off[q],
                          (long long)last_ts[q]);
            if (!last)
                ck_assert(ts <= max_ts[q] - 5 * S);
            last_ts[q] = ts;
            last_off[q] = out[i].offset;
            st_reorder_item_fini(&out[i]);
        }
        left += (int64_t)got;
        free(out);
    }
    ck_assert_int_eq(left, pushed);
    ck_assert_uint_eq(st_reorder_buffered(r), 0);
    st_reorder_destroy(r);
    texts_free();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("reorder");
    TCase *tc = tcase_create("core");
    /* the random streams parse an event per push: seconds under ASan on a
     * loaded machine, past Check's default of 4 */
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, reorder_reuses_a_revoked_partitions_slot);
    tcase_add_test(tc, reorder_skewed_event_moves_no_watermark);
    tcase_add_test(tc, reorder_forget_drops_one_event);
    tcase_add_test(tc, reorder_skew_bounds);
    tcase_add_test(tc, reorder_resumed_clock_makes_the_same_late_events);
    tcase_add_test(tc, reorder_commit_point_clock_is_before_the_oldest_buffered);
    tcase_add_test(tc, reorder_resume_only_at_its_offset);
    tcase_add_loop_test(tc, reorder_commit_point_is_the_oldest_still_buffered, 0, 4);
    tcase_add_loop_test(tc, reorder_parked_event_comes_back_identical, 0, 2);
    tcase_add_test(tc, reorder_parked_event_is_small);
    tcase_add_test(tc, reorder_parked_event_that_does_not_parse_is_skipped);
    tcase_add_test(tc, reorder_bounded_release_is_the_same_in_slices);
    tcase_add_loop_test(tc, reorder_releases_in_time_order, 0, 4);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
