/* test_reorder.c: the event-time reorder buffer without services: revoked
 * partitions' slots are reused, skewed events leave at once and move no
 * watermark, a forgotten event no longer holds commits back. */
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

int main(void)
{
    Suite *s = suite_create("reorder");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, reorder_reuses_a_revoked_partitions_slot);
    tcase_add_test(tc, reorder_skewed_event_moves_no_watermark);
    tcase_add_test(tc, reorder_forget_drops_one_event);
    tcase_add_test(tc, reorder_skew_bounds);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
