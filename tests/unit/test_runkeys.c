/* test_runkeys.c: one record per run for a part's run windows
 * (analyzer/runkeys.h): found again by the run's ids, not by the event's
 * address; two runs whose hashes collide kept apart; freed with the last
 * window's state of it; the remembered last event forgotten at a batch's
 * start and when its record goes; slots given out to a bound; runs whose
 * ids share their digits spread over a table's slots (st_hash_slot). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "event.h"
#include "runkeys.h"

static struct st_event event(const char *task, const char *run, uint64_t hash)
{
    struct st_event ev = {0};
    ev.task_id = task;
    ev.run_id = run;
    ev.run_hash = hash; /* 0: computed from the ids */
    return ev;
}

/* 10,000 runs "T%07d"/"r%07d" (a run id made from its task's number, as
 * agents' runners often do) over 16,384 slots: a uniform hash takes
 * 16384 * (1 - e^(-10000/16384)) = 7,517 of them. FNV-1a's low bits alone
 * took 5,387 (every run the same lowest bit): longer chains in runkeys,
 * registry, runidx and credset tables. */
START_TEST(runkeys_hash_slots_spread_runs_with_shared_digits)
{
    enum { RUNS = 10000, SLOTS = 16384 };
    unsigned char *used = calloc(SLOTS, 1);
    size_t distinct = 0;
    for (int i = 0; i < RUNS; i++) {
        char task[16], run[16];
        snprintf(task, sizeof(task), "T%07d", i);
        snprintf(run, sizeof(run), "r%07d", i);
        size_t s = st_hash_slot(st_hash_pair(task, run), SLOTS);
        ck_assert_uint_lt(s, SLOTS);
        distinct += !used[s];
        used[s] = 1;
    }
    ck_assert_uint_ge(distinct, 7000);
    free(used);
}
END_TEST

START_TEST(runkeys_one_record_per_run)
{
    struct st_runkeys *t = st_runkeys_new();
    int a = st_runkeys_slot(t), b = st_runkeys_slot(t);
    ck_assert_int_ne(a, b);
    struct st_event e1 = event("T", "r1", 0), e2 = event("T", "r1", 0);
    ck_assert_ptr_null(st_runkeys_get(t, &e1, 0)); /* not made when not asked */
    struct st_runkey *k = st_runkeys_get(t, &e1, 1);
    ck_assert_ptr_nonnull(k);
    ck_assert_str_eq(k->task_id, "T");
    ck_assert_str_eq(k->run_id, "r1");
    ck_assert_ptr_eq(st_runkeys_get(t, &e2, 1), k); /* another event, same run */
    int sa = 1, sb = 2;
    st_runkeys_set(t, k, a, &sa);
    st_runkeys_set(t, k, b, &sb);
    /* a task's run and a run of another task with the same run id differ */
    struct st_event e3 = event("U", "r1", 0);
    struct st_runkey *k3 = st_runkeys_get(t, &e3, 1);
    ck_assert_ptr_ne(k3, k);
    st_runkeys_set(t, k3, a, &sa);
    ck_assert_uint_eq(st_runkeys_count(t), 2);
    /* the record stays while a window holds the run */
    st_runkeys_set(t, k, a, NULL);
    ck_assert_uint_eq(st_runkeys_count(t), 2);
    ck_assert_ptr_eq(st_runkeys_get(t, &e2, 0), k);
    st_runkeys_set(t, k, b, NULL);
    ck_assert_uint_eq(st_runkeys_count(t), 1);
    /* gone: its last event is not remembered either */
    ck_assert_ptr_null(st_runkeys_get(t, &e2, 0));
    st_runkeys_set(t, k3, a, NULL);
    ck_assert_uint_eq(st_runkeys_count(t), 0);
    st_runkeys_destroy(t);
}
END_TEST

START_TEST(runkeys_colliding_hashes_stay_apart)
{
    struct st_runkeys *t = st_runkeys_new();
    int s = st_runkeys_slot(t);
    struct st_event e1 = event("T", "a", 42), e2 = event("T", "b", 42);
    struct st_runkey *k1 = st_runkeys_get(t, &e1, 1), *k2 = st_runkeys_get(t, &e2, 1);
    ck_assert_ptr_ne(k1, k2);
    int x = 0;
    st_runkeys_set(t, k1, s, &x);
    st_runkeys_set(t, k2, s, &x);
    ck_assert_ptr_eq(st_runkeys_get(t, &e1, 0), k1);
    ck_assert_ptr_eq(st_runkeys_get(t, &e2, 0), k2);
    st_runkeys_set(t, k1, s, NULL); /* unlinked from the middle of a chain */
    ck_assert_ptr_null(st_runkeys_get(t, &e1, 0));
    ck_assert_ptr_eq(st_runkeys_get(t, &e2, 0), k2);
    st_runkeys_set(t, k2, s, NULL);
    st_runkeys_destroy(t);
}
END_TEST

/* The same event struct given other ids (a new batch's event at the
 * address of an old one) is the other run. */
START_TEST(runkeys_event_address_is_not_the_run)
{
    struct st_runkeys *t = st_runkeys_new();
    int s = st_runkeys_slot(t);
    int x = 0;
    struct st_event ev = event("T", "a", 0);
    struct st_runkey *ka = st_runkeys_get(t, &ev, 1);
    st_runkeys_set(t, ka, s, &x);
    ev = event("T", "b", 0);
    struct st_runkey *kb = st_runkeys_get(t, &ev, 1);
    ck_assert_ptr_ne(ka, kb);
    ck_assert_str_eq(kb->run_id, "b");
    st_runkeys_set(t, kb, s, &x);
    st_runkeys_begin(t);
    ev = event("T", "a", 0);
    ck_assert_ptr_eq(st_runkeys_get(t, &ev, 0), ka);
    st_runkeys_set(t, ka, s, NULL);
    st_runkeys_set(t, kb, s, NULL);
    st_runkeys_destroy(t);
}
END_TEST

/* Many runs (the table grows), each found again; slots run out. */
START_TEST(runkeys_many_runs_and_slots)
{
    struct st_runkeys *t = st_runkeys_new();
    for (int i = 0; i < ST_RUNKEYS_SLOTS; i++)
        ck_assert_int_eq(st_runkeys_slot(t), i);
    ck_assert_int_eq(st_runkeys_slot(t), -1);
    st_runkeys_slot_release(t, 2); /* a window destroyed: its slot again */
    ck_assert_int_eq(st_runkeys_slot(t), 2);
    ck_assert_int_eq(st_runkeys_slot(t), -1);
    enum { N = 20000 };
    static char ids[N][16];
    static struct st_runkey *k[N];
    int x = 0;
    for (int i = 0; i < N; i++) {
        snprintf(ids[i], sizeof(ids[i]), "r%d", i);
        struct st_event ev = event("T", ids[i], 0);
        k[i] = st_runkeys_get(t, &ev, 1);
        st_runkeys_set(t, k[i], i % ST_RUNKEYS_SLOTS, &x);
    }
    ck_assert_uint_eq(st_runkeys_count(t), N);
    for (int i = 0; i < N; i++) {
        struct st_event ev = event("T", ids[i], 0);
        st_runkeys_begin(t);
        ck_assert_ptr_eq(st_runkeys_get(t, &ev, 0), k[i]);
        st_runkeys_set(t, k[i], i % ST_RUNKEYS_SLOTS, NULL);
    }
    ck_assert_uint_eq(st_runkeys_count(t), 0);
    st_runkeys_destroy(t);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("runkeys");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, runkeys_one_record_per_run);
    tcase_add_test(tc, runkeys_colliding_hashes_stay_apart);
    tcase_add_test(tc, runkeys_event_address_is_not_the_run);
    tcase_add_test(tc, runkeys_many_runs_and_slots);
    tcase_add_test(tc, runkeys_hash_slots_spread_runs_with_shared_digits);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
