/* test_runidx.c: the run index (analyzer/runidx.h) without Redis: what a
 * load's reply makes known, what a checkpoint writes and in which case,
 * the sweep of old entries, forgetting on revoke. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "analyzer.h"
#include "checkpoint.h"
#include "detect.h"
#include "runidx.h"

static struct st_analyzer_conf conf;

static void setup(void)
{
    memset(&conf, 0, sizeof(conf));
    conf.redis_prefix = "t:";
    conf.state_ttl_s = 1000;
}

/* An index known complete (a fresh prefix: marker 0). */
static struct st_runidx *trusted_new(void)
{
    struct st_runidx *x = st_runidx_new(&conf);
    st_runidx_set_since(x, 0);
    return x;
}

/* A ZRANGE ... WITHSCORES reply of n (member, score) pairs. */
struct reply {
    redisReply top;
    redisReply *el[16];
    redisReply items[16];
};

static void reply_init(struct reply *r, const char *const *pairs, size_t n)
{
    memset(r, 0, sizeof(*r));
    r->top.type = REDIS_REPLY_ARRAY;
    r->top.elements = 2 * n;
    r->top.element = r->el;
    for (size_t i = 0; i < 2 * n; i++) {
        r->items[i].type = REDIS_REPLY_STRING;
        r->items[i].str = (char *)pairs[i];
        r->items[i].len = strlen(pairs[i]);
        r->el[i] = &r->items[i];
    }
}

START_TEST(runidx_unloaded_partition_may_hold_anything)
{
    struct st_runidx *x = trusted_new();
    /* nothing known yet: only a load can tell, so the run must be read */
    ck_assert_int_eq(st_runidx_has(x, 3, st_runidx_hash("T", "r")), 1);
    st_runidx_destroy(x);
}
END_TEST

START_TEST(runidx_load_makes_its_runs_known_and_others_new)
{
    struct st_runidx *x = trusted_new();
    char *m = st_detect_run_member("T-1", "run-a");
    ck_assert_str_eq(m, "3:T-1:5:run-a");
    /* a run, a member that is not one (ignored), a run with ':' in ids */
    const char *pairs[] = {m, "100", "garbage", "5", "3:a:b:1:c", "7"};
    struct reply r;
    reply_init(&r, pairs, 3);
    ck_assert_int_eq(st_runidx_load_reply(x, 0, &r.top), 0);
    ck_assert_int_eq(st_runidx_has(x, 0, st_runidx_hash("T-1", "run-a")), 1);
    ck_assert_int_eq(st_runidx_has(x, 0, st_runidx_hash("a:b", "c")), 1);
    ck_assert_int_eq(st_runidx_has(x, 0, st_runidx_hash("T-1", "run-b")), 0);
    ck_assert_int_eq(st_runidx_size(x), 2);
    /* another partition is not loaded by it */
    ck_assert_int_eq(st_runidx_has(x, 1, st_runidx_hash("T-1", "run-b")), 1);
    free(m);
    st_runidx_destroy(x);
}
END_TEST

START_TEST(runidx_bad_reply_fails_the_load)
{
    struct st_runidx *x = trusted_new();
    redisReply err = {.type = REDIS_REPLY_ERROR};
    ck_assert_int_eq(st_runidx_load_reply(x, 0, &err), -1);
    ck_assert_int_eq(st_runidx_has(x, 0, st_runidx_hash("T", "r")), 1);
    st_runidx_destroy(x);
}
END_TEST

/* The writes a checkpoint gets: a run new to the index once, a known run
 * only with an EXPIRE and at a later second; one ZADD per partition, and
 * the sweep of a loaded partition at its first flush. */
START_TEST(runidx_note_writes_new_runs_and_refreshes_with_expire)
{
    struct st_runidx *x = trusted_new();
    struct st_checkpoint *ck = st_checkpoint_new();
    struct reply r;
    reply_init(&r, NULL, 0);
    ck_assert_int_eq(st_runidx_load_reply(x, 0, &r.top), 0);

    uint64_t ha = st_runidx_hash("T", "a"), hb = st_runidx_hash("T", "b");
    st_runidx_note(x, 0, "T", "a", ha, 1, 5000);
    st_runidx_note(x, 0, "T", "a", ha, 1, 5000); /* a second detector, same second */
    st_runidx_note(x, 0, "T", "b", hb, 0, 5000);
    ck_assert_int_eq(st_runidx_has(x, 0, ha), 1);
    st_runidx_flush(x, ck, 5000);
    ck_assert_uint_eq(st_checkpoint_len(ck), 2); /* ZADD (a, b), ZREMRANGEBYSCORE */
    st_checkpoint_clear(ck);

    st_runidx_note(x, 0, "T", "a", ha, 0, 5050); /* no EXPIRE: nothing */
    st_runidx_flush(x, ck, 5050);
    ck_assert_uint_eq(st_checkpoint_len(ck), 0); /* no sweep: a tenth of the TTL */
    st_runidx_note(x, 0, "T", "a", ha, 1, 5050); /* EXPIRE: the score follows */
    st_runidx_note(x, 7, "T", "c", st_runidx_hash("T", "c"), 0, 5050);
    st_runidx_flush(x, ck, 5050);
    ck_assert_uint_eq(st_checkpoint_len(ck), 2); /* one ZADD per partition */
    st_checkpoint_destroy(ck);
    st_runidx_destroy(x);
}
END_TEST

/* Entries older than 2 x state.ttl_s leave memory at the sweep; newer
 * ones stay. */
START_TEST(runidx_sweep_drops_only_old_entries)
{
    struct st_runidx *x = trusted_new();
    struct st_checkpoint *ck = st_checkpoint_new();
    char *a = st_detect_run_member("T", "old"), *b = st_detect_run_member("T", "recent");
    const char *pairs[] = {a, "1000", b, "2500"};
    struct reply r;
    reply_init(&r, pairs, 2);
    ck_assert_int_eq(st_runidx_load_reply(x, 0, &r.top), 0);
    st_runidx_flush(x, ck, 3100); /* cutoff 1100 */
    ck_assert_uint_eq(st_checkpoint_len(ck), 1);
    ck_assert_int_eq(st_runidx_has(x, 0, st_runidx_hash("T", "old")), 0);
    ck_assert_int_eq(st_runidx_has(x, 0, st_runidx_hash("T", "recent")), 1);
    ck_assert_int_eq(st_runidx_size(x), 1);
    free(a);
    free(b);
    st_checkpoint_destroy(ck);
    st_runidx_destroy(x);
}
END_TEST

START_TEST(runidx_forget_unloads_every_partition)
{
    struct st_runidx *x = trusted_new();
    struct reply r;
    reply_init(&r, NULL, 0);
    ck_assert_int_eq(st_runidx_load_reply(x, 2, &r.top), 0);
    uint64_t h = st_runidx_hash("T", "n");
    ck_assert_int_eq(st_runidx_has(x, 2, h), 0);
    st_runidx_forget(x);
    ck_assert_int_eq(st_runidx_has(x, 2, h), 1); /* read again on next sight */
    ck_assert_int_eq(st_runidx_size(x), 0);
    st_runidx_destroy(x);
}
END_TEST

/* Many runs: the table grows and keeps every one. */
START_TEST(runidx_holds_many_runs)
{
    struct st_runidx *x = trusted_new();
    struct st_checkpoint *ck = st_checkpoint_new();
    char run[32];
    for (int i = 0; i < 5000; i++) {
        snprintf(run, sizeof(run), "r%d", i);
        st_runidx_note(x, 0, "T", run, st_runidx_hash("T", run), 1, 10);
    }
    struct reply r;
    reply_init(&r, NULL, 0);
    ck_assert_int_eq(st_runidx_load_reply(x, 0, &r.top), 0);
    for (int i = 0; i < 5000; i++) {
        snprintf(run, sizeof(run), "r%d", i);
        ck_assert_int_eq(st_runidx_has(x, 0, st_runidx_hash("T", run)), 1);
    }
    ck_assert_int_eq(st_runidx_size(x), 5000);
    st_runidx_flush(x, ck, 10);
    ck_assert_uint_eq(st_checkpoint_len(ck), 2);
    st_checkpoint_destroy(ck);
    st_runidx_destroy(x);
}
END_TEST

/* Until state.ttl_s has passed since the marker (an upgrade), state written
 * before the index may remain: a run the index does not hold must still
 * be read; afterwards it is new. */
START_TEST(runidx_untrusted_until_ttl_after_marker)
{
    struct st_runidx *x = st_runidx_new(&conf);
    char *m = st_detect_run_member("T", "known");
    const char *pairs[] = {m, "100"};
    struct reply r;
    reply_init(&r, pairs, 1);
    ck_assert_int_eq(st_runidx_load_reply(x, 0, &r.top), 0);
    uint64_t other = st_runidx_hash("T", "other");
    /* marker not read yet */
    ck_assert_int_eq(st_runidx_trusted(x), 0);
    ck_assert_int_eq(st_runidx_has(x, 0, other), 1);
    /* upgraded just now */
    st_runidx_set_since(x, (int64_t)time(NULL));
    st_runidx_begin(x);
    ck_assert_int_eq(st_runidx_trusted(x), 0);
    ck_assert_int_eq(st_runidx_has(x, 0, other), 1);
    /* upgraded a little less than a TTL ago */
    st_runidx_set_since(x, (int64_t)time(NULL) - conf.state_ttl_s + 5);
    st_runidx_begin(x);
    ck_assert_int_eq(st_runidx_has(x, 0, other), 1);
    /* a TTL ago: every older key expired or was indexed */
    st_runidx_set_since(x, (int64_t)time(NULL) - conf.state_ttl_s);
    st_runidx_begin(x);
    ck_assert_int_eq(st_runidx_trusted(x), 1);
    ck_assert_int_eq(st_runidx_has(x, 0, other), 0);
    ck_assert_int_eq(st_runidx_has(x, 0, st_runidx_hash("T", "known")), 1);
    free(m);
    st_runidx_destroy(x);
}
END_TEST

/* The upgrade check's filter: run state, not the registry or the index. */
START_TEST(runidx_state_key_shape)
{
    const char *yes[] = {"t:denial_burst:w:1:T:1:r", "t:scope_drift_deny:eps:3:T-1:1:r",
                         "t:volume_anomaly:b:1:T:1:r", "t:denial_burst:s:1:T:1:r",
                         "t:run:h:1:T:1:r", "t:denial_burst:l:1:T:1:r", "t:run:b:0",
                         "t:run:b:63"};
    const char *no[] = {"t:runs:0", "t:runs:complete_since", "t:scope_drift:cred:abc",
                        "t:credfp:0a1b", "t:scope_drift:dest:h.example",
                        "t:denial_burst:w:2:T:1:r", "t:denial_burst:w:1:T:1:rr",
                        "t:denial_burst:l:2:T:1:r", "t:denial_burst:l:", "t:denial_burst:L:1:T:1:r",
                        "t:denial_burst:s:1:T:1:", "t:denial_burst:x:1:T:1:r", "t:run:h:1:T:1",
                        "u:denial_burst:w:1:T:1:r", "t::w:1:T:1:r", "t:x:w:", "t", "t:run:b:",
                        "t:run:b:1x", "t:runs:b:1"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(*yes); i++)
        ck_assert_msg(st_detect_is_state_key(&conf, yes[i], strlen(yes[i])), "%s", yes[i]);
    for (size_t i = 0; i < sizeof(no) / sizeof(*no); i++)
        ck_assert_msg(!st_detect_is_state_key(&conf, no[i], strlen(no[i])), "%s", no[i]);
    /* the key st_detect_key builds is one */
    char *k = st_detect_key(&conf, "denial_burst", "w", "a:b", "c");
    ck_assert(st_detect_is_state_key(&conf, k, strlen(k)));
    free(k);
    k = st_detect_key(&conf, "denial_burst", "s", "a:b", "c");
    ck_assert(st_detect_is_state_key(&conf, k, strlen(k)));
    free(k);
    k = st_detect_key(&conf, "denial_burst", "l", "a:b", "c");
    ck_assert(st_detect_is_state_key(&conf, k, strlen(k)));
    free(k);
    k = st_detect_marker_key(&conf);
    ck_assert_str_eq(k, "t:runs:complete_since");
    free(k);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("runidx");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, runidx_unloaded_partition_may_hold_anything);
    tcase_add_test(tc, runidx_load_makes_its_runs_known_and_others_new);
    tcase_add_test(tc, runidx_bad_reply_fails_the_load);
    tcase_add_test(tc, runidx_note_writes_new_runs_and_refreshes_with_expire);
    tcase_add_test(tc, runidx_sweep_drops_only_old_entries);
    tcase_add_test(tc, runidx_forget_unloads_every_partition);
    tcase_add_test(tc, runidx_holds_many_runs);
    tcase_add_test(tc, runidx_untrusted_until_ttl_after_marker);
    tcase_add_test(tc, runidx_state_key_shape);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
