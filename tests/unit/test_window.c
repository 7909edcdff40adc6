/* test_window.c: event-time window arithmetic, finding ids, and the
 * joining of the detection workers' parts (findings, checkpoints). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "findings.h"
#include "window.h"

#define S 1000000LL

START_TEST(window_counts_inclusive_bounds_and_distinct_targets)
{
    struct st_window_member m[] = {
        {0 * S, "a", 0}, {10 * S, "b", 0}, {30 * S, "a", 0}, {60 * S, "c", 0}, {61 * S, "", 0},
    };
    size_t count, targets;
    st_window_count(m, 5, 0, 60 * S, &count, &targets);
    ck_assert_int_eq(count, 4);   /* both ends are inside */
    ck_assert_int_eq(targets, 3); /* a, b, c */
    st_window_count(m, 5, 1, 61 * S, &count, &targets);
    ck_assert_int_eq(count, 4);   /* 0 s drops out, 61 s comes in */
    ck_assert_int_eq(targets, 3); /* the empty target is not counted */
    st_window_count(m, 5, 100 * S, 200 * S, &count, &targets);
    ck_assert_int_eq(count, 0);
    ck_assert_int_eq(targets, 0);
}
END_TEST

START_TEST(window_order_of_members_does_not_matter)
{
    struct st_window_member a[] = {{5 * S, "x", 0}, {1 * S, "y", 0}, {3 * S, "x", 0}};
    struct st_window_member b[] = {{1 * S, "y", 0}, {3 * S, "x", 0}, {5 * S, "x", 0}};
    size_t ca, ta, cb, tb;
    st_window_count(a, 3, 2 * S, 5 * S, &ca, &ta);
    st_window_count(b, 3, 2 * S, 5 * S, &cb, &tb);
    ck_assert_int_eq(ca, cb);
    ck_assert_int_eq(ta, tb);
    ck_assert_int_eq(ca, 2);
    ck_assert_int_eq(ta, 1);
}
END_TEST

START_TEST(episode_continues_only_within_one_window)
{
    struct st_episode ep = {100 * S, 130 * S};
    ck_assert(st_episode_continues(&ep, 190 * S, 60 * S));  /* 60 s after last */
    ck_assert(!st_episode_continues(&ep, 191 * S, 60 * S)); /* a gap: new episode */
    ck_assert(st_episode_continues(&ep, 40 * S, 60 * S));   /* late, within reach */
    ck_assert(!st_episode_continues(&ep, 39 * S, 60 * S));
    st_episode_extend(&ep, 150 * S);
    ck_assert_int_eq(ep.last_us, 150 * S);
    ck_assert_int_eq(ep.first_us, 100 * S);
    st_episode_extend(&ep, 90 * S);
    ck_assert_int_eq(ep.first_us, 90 * S);
}
END_TEST

START_TEST(finding_id_is_deterministic_and_separates_parts)
{
    char a[33], b[33], c[33];
    st_finding_id(a, "denial_burst", "T", "R", "k");
    st_finding_id(b, "denial_burst", "T", "R", "k");
    ck_assert_str_eq(a, b);
    ck_assert_int_eq(strlen(a), 32);
    /* "T"+"Rk" must not equal "TR"+"k" */
    st_finding_id(b, "denial_burst", "TR", "", "k");
    st_finding_id(c, "denial_burst", "T", "Rk", "");
    ck_assert_str_ne(a, b);
    ck_assert_str_ne(b, c);
}
END_TEST

START_TEST(findings_merge_updates_in_a_batch)
{
    struct st_findings fs;
    st_findings_init(&fs);
    struct st_finding *f =
        st_findings_update(&fs, "0123456789abcdef0123456789abcdef", "d", 1, ST_SEV_MEDIUM,
                           "T", "R", 10, 20, "first");
    st_finding_add_event(f, "src", "e1", 0);
    f = st_findings_update(&fs, "0123456789abcdef0123456789abcdef", "d", 1, ST_SEV_LOW,
                           "T", "R", 5, 15, "second");
    ck_assert_int_eq(fs.n, 1);
    ck_assert_int_eq(f->severity, ST_SEV_MEDIUM); /* never falls */
    ck_assert_int_eq(f->first_us, 5);
    ck_assert_int_eq(f->last_us, 20);
    ck_assert_str_eq(f->summary, "second");
    ck_assert_int_eq(f->nevents, 1);
    st_findings_fini(&fs);
}
END_TEST

/* workers.c joins each worker's findings into the batch's: moved, in
 * order, the source emptied and reusable (ASan would see a double free or a
 * leak) */
START_TEST(findings_take_moves_every_finding_in_order)
{
    struct st_findings dst, src;
    char id[33] = "a"; /* ids are 33 bytes (findings.h) */
    st_findings_init(&dst);
    st_findings_init(&src);
    st_finding_add_event(
        st_findings_update(&dst, id, "d", 1, ST_SEV_LOW, "t", "r1", 1, 1, "one"), "s", "e1", 0);
    for (int i = 0; i < 20; i++) {
        snprintf(id, sizeof(id), "b%d", i);
        st_finding_add_event(st_findings_update(&src, id, "d", 1, ST_SEV_HIGH, "t", "r2", 2,
                                                3, "two"),
                             "s", "e2", 1);
    }
    st_findings_take(&dst, &src);
    ck_assert_int_eq(dst.n, 21);
    ck_assert_int_eq(src.n, 0);
    ck_assert_str_eq(dst.items[0].id, "a");
    ck_assert_str_eq(dst.items[1].id, "b0");
    ck_assert_str_eq(dst.items[20].id, "b19");
    ck_assert_str_eq(dst.items[20].events[0].event_id, "e2");
    /* the emptied part is filled again for the next batch */
    snprintf(id, sizeof(id), "c");
    st_findings_update(&src, id, "d", 1, ST_SEV_LOW, "t", "r3", 1, 1, "three");
    ck_assert_int_eq(src.n, 1);
    st_findings_fini(&src);
    st_findings_fini(&dst);
}
END_TEST

/* An id both hold (a run whose events came through two partitions, after
 * partitions were added: two workers) is one finding after the take,
 * merged as a later update would be: the sink writes a batch's findings in
 * one statement, which refuses an id twice. Few findings (a scan) and many
 * (a hash of the ids) */
START_TEST(findings_take_merges_an_id_both_hold)
{
    struct st_findings dst, src;
    char id[33], shared[33];
    int many = _i ? 40 : 3;
    st_findings_init(&dst);
    st_findings_init(&src);
    for (int i = 0; i < many; i++) {
        st_finding_id(id, "d", "t", "r", (char[2]){(char)('A' + i), 0});
        st_finding_add_event(
            st_findings_update(&dst, id, "d", 1, ST_SEV_MEDIUM, "t", "r", 10, 20, "dst"), "s",
            "e1", 0);
        if (i == many / 2)
            memcpy(shared, id, sizeof(id));
    }
    st_finding_id(id, "d", "t", "r", "only-src");
    st_findings_update(&src, id, "d", 1, ST_SEV_LOW, "t", "r", 1, 1, "src only");
    struct st_finding *f =
        st_findings_update(&src, shared, "d", 1, ST_SEV_HIGH, "t", "r", 5, 15, "src");
    st_finding_add_event(f, "s", "e2", 1);
    st_findings_take(&dst, &src);
    ck_assert_int_eq(dst.n, many + 1);
    ck_assert_int_eq(src.n, 0);
    int seen = 0;
    for (size_t i = 0; i < dst.n; i++) {
        if (strcmp(dst.items[i].id, shared) != 0)
            continue;
        seen++;
        ck_assert_int_eq(dst.items[i].severity, ST_SEV_HIGH);
        ck_assert_int_eq(dst.items[i].first_us, 5);
        ck_assert_int_eq(dst.items[i].last_us, 20);
        ck_assert_str_eq(dst.items[i].summary, "src");
        ck_assert_int_eq(dst.items[i].nevents, 2);
        ck_assert_str_eq(dst.items[i].events[0].event_id, "e1");
        ck_assert_str_eq(dst.items[i].events[1].event_id, "e2");
        ck_assert_int_eq(dst.items[i].events[1].late, 1);
    }
    ck_assert_int_eq(seen, 1);
    ck_assert_str_eq(dst.items[dst.n - 1].summary, "src only");
    st_findings_fini(&src);
    st_findings_fini(&dst);
}
END_TEST

START_TEST(checkpoint_take_appends_and_empties)
{
    struct st_checkpoint *dst = st_checkpoint_new(), *src = st_checkpoint_new();
    const char *a[] = {"SET", "k", "v"};
    st_checkpoint_cmd(dst, 3, a);
    for (int i = 0; i < 100; i++)
        st_checkpoint_cmd(src, 3, a);
    st_checkpoint_take(dst, src);
    ck_assert_uint_eq(st_checkpoint_len(dst), 101);
    ck_assert_uint_eq(st_checkpoint_len(src), 0);
    st_checkpoint_cmd(src, 3, a);
    st_checkpoint_take(dst, src);
    ck_assert_uint_eq(st_checkpoint_len(dst), 102);
    st_checkpoint_destroy(src);
    st_checkpoint_destroy(dst);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("window");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, window_counts_inclusive_bounds_and_distinct_targets);
    tcase_add_test(tc, window_order_of_members_does_not_matter);
    tcase_add_test(tc, episode_continues_only_within_one_window);
    tcase_add_test(tc, finding_id_is_deterministic_and_separates_parts);
    tcase_add_test(tc, findings_merge_updates_in_a_batch);
    tcase_add_test(tc, findings_take_moves_every_finding_in_order);
    tcase_add_loop_test(tc, findings_take_merges_an_id_both_hold, 0, 2);
    tcase_add_test(tc, checkpoint_take_appends_and_empties);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
