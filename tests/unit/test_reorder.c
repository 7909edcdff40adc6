/* test_reorder.c: the event-time reorder buffer without services: revoked
 * partitions' slots are reused, skewed events leave at once and move no
 * watermark, a forgotten event no longer holds commits back, a partition
 * resumed at a commit point with its clock judges lateness as before. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reorder.h"

#define S 1000000LL

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
    ck_assert_int_eq(st_event_parse(&ev, line, strlen(line), &rej), 0);
    ev.ts_us = ts_us;
    st_reorder_push(r, part, off, &ev, 0, skewed);
}

static size_t release(struct st_reorder *r, int flush, int *late)
{
    struct st_reorder_item *out = NULL;
    size_t cap = 0, n = st_reorder_release(r, flush, 0, 0, &out, &cap);
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
    size_t cap = 0, n = st_reorder_release(r, flush, 0, 0, &out, &cap);
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
        } else {
            struct st_reorder_item *out = NULL;
            size_t cap = 0, got = st_reorder_release(r, rand() % 20 == 0, 0, 0, &out, &cap);
            for (size_t i = 0; i < got; i++) {
                int q = out[i].partition;
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
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
