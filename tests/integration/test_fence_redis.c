/* test_fence_redis.c: st_fence_exec against the real Redis (session 6
 * review):
 *   - a checkpoint whose commands take Redis longer, in all, than the
 *     connection's read timeout (5 s, rpipe.c) is written: before the
 *     fence, its pipelined replies came back one by one while Redis ran
 *     them; a single MULTI/EXEC holds every reply until the last command
 *     ran, the read timed out, and the checkpoint was retried, whole,
 *     forever (each retry blocking Redis as long);
 *   - the fenced transactions never split a MULTI/EXEC the checkpoint
 *     holds (runwin.c's layout switch). */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "analyzer.h"
#include "checkpoint.h"
#include "fence.h"
#include "rpipe.h"
#include "timeutil.h"

#define SETN 5000 /* members of the set each slow command reads */

static char prefix[64], bigkey[96], donekey[96];
static char err[512];
static struct st_analyzer_conf conf;

static struct st_rpipe *open_pipe(void)
{
    const char *url = getenv("SANDTRAIL_REDIS_URL");
    ck_assert_ptr_nonnull(url);
    struct st_rpipe *p = st_rpipe_new(url, NULL, err, sizeof(err));
    ck_assert_msg(p != NULL, "%s", err);
    snprintf(prefix, sizeof(prefix), "test_fence_%ld_%d:", (long)time(NULL), (int)getpid());
    snprintf(bigkey, sizeof(bigkey), "%sbig", prefix);
    snprintf(donekey, sizeof(donekey), "%sdone", prefix);
    conf.redis_prefix = prefix;
    conf.topic_events = "events";
    return p;
}

static void run(struct st_rpipe *p, int argc, const char **argv)
{
    st_rpipe_cmd(p, NULL, NULL, argc, argv);
    ck_assert_msg(st_rpipe_exec(p, err, sizeof(err)) == 0, "%s", err);
}

/* A command that reads the whole set: about a fraction of a ms in Redis,
 * a few bytes on the wire. */
static void slow_cmd(struct st_checkpoint *c)
{
    const char *argv[] = {"SINTERCARD", "2", bigkey, bigkey};
    st_checkpoint_cmd(c, 4, argv);
}

static char got[32];

static int on_get(const redisReply *r, void *arg)
{
    (void)arg;
    snprintf(got, sizeof(got), "%s", r->type == REDIS_REPLY_STRING ? r->str : "(none)");
    return 0;
}

START_TEST(fence_checkpoint_longer_than_the_read_timeout_is_written)
{
    struct st_rpipe *p = open_pipe();
    /* the set, with an expiry: a failed run leaves nothing for long */
    for (int i = 0; i < SETN; i += 500) {
        const char *argv[2 + 500];
        char members[500][16];
        argv[0] = "SADD";
        argv[1] = bigkey;
        for (int k = 0; k < 500; k++) {
            snprintf(members[k], sizeof(members[k]), "m%d", i + k);
            argv[2 + k] = members[k];
        }
        run(p, 2 + 500, argv);
    }
    const char *exp[] = {"EXPIRE", bigkey, "600"};
    run(p, 3, exp);

    /* what one command costs Redis here and now (pipelined, unfenced) */
    struct st_checkpoint *c = st_checkpoint_new();
    for (int i = 0; i < 400; i++)
        slow_cmd(c);
    int64_t t0 = st_time_mono_us();
    ck_assert_msg(st_checkpoint_exec(c, p, err, sizeof(err)) == 0, "%s", err);
    double per_us = (double)(st_time_mono_us() - t0) / 400;
    /* enough of them for 8 s in all */
    long n = (long)(8e6 / per_us);
    if (n > 1000000)
        n = 1000000;
    fprintf(stderr, "a command: %.1f us; a checkpoint of %ld (about %.1f s)\n", per_us, n,
            (double)n * per_us / 1e6);
    st_checkpoint_clear(c);
    for (long i = 0; i < n; i++)
        slow_cmd(c);
    const char *set[] = {"SET", donekey, "1", "EX", "600"};
    st_checkpoint_cmd(c, 5, set);

    struct st_fence *f = st_fence_new(&conf, 0);
    int32_t part = 0;
    ck_assert_msg(st_fence_claim(f, p, &part, 1, err, sizeof(err)) == 0, "%s", err);
    t0 = st_time_mono_us();
    int rc = st_fence_exec(f, p, c, err, sizeof(err));
    fprintf(stderr, "fenced: %d after %.1f s%s%s\n", rc,
            (double)(st_time_mono_us() - t0) / 1e6, rc ? ": " : "", rc ? err : "");
    ck_assert_msg(rc == 0, "the fenced checkpoint failed: %s", err);
    const char *get[] = {"GET", donekey};
    st_rpipe_cmd(p, on_get, NULL, 2, get);
    ck_assert_msg(st_rpipe_exec(p, err, sizeof(err)) == 0, "%s", err);
    ck_assert_str_eq(got, "1");

    char epoch[128];
    snprintf(epoch, sizeof(epoch), "%sepoch:events:0", prefix);
    const char *del[] = {"DEL", bigkey, donekey, epoch};
    run(p, 4, del);
    st_fence_destroy(f);
    st_checkpoint_destroy(c);
    st_rpipe_destroy(p);
}
END_TEST

static void cmd1(struct st_checkpoint *c, const char *name)
{
    const char *argv[] = {name};
    st_checkpoint_cmd(c, 1, argv);
}

/* No fenced transaction splits the MULTI/EXEC a checkpoint holds: a part
 * ends where asked, or past the EXEC of a MULTI inside it. */
START_TEST(fence_parts_keep_an_inner_transaction_whole)
{
    struct st_rpipe *p = open_pipe();
    struct st_checkpoint *c = st_checkpoint_new();
    for (int i = 0; i < 10; i++)
        cmd1(c, "PING"); /* 0..9 */
    cmd1(c, "MULTI");    /* 10 */
    for (int i = 0; i < 3; i++)
        cmd1(c, "PING"); /* 11..13 */
    cmd1(c, "EXEC");     /* 14 */
    for (int i = 0; i < 5; i++)
        cmd1(c, "PING"); /* 15..19 */
    struct {
        size_t from, max, max_bytes, next;
    } cases[] = {
        {0, 10, SIZE_MAX, 10}, {0, 11, SIZE_MAX, 15}, {0, 14, SIZE_MAX, 15},
        {0, 15, SIZE_MAX, 15}, {15, 11, SIZE_MAX, 20}, {0, 100, SIZE_MAX, 20},
        {0, 100, 1, 1},        {10, 100, 1, 15},       {12, 1, SIZE_MAX, 13},
    };
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        size_t next = st_checkpoint_queue_part(c, p, cases[k].from, cases[k].max,
                                               cases[k].max_bytes, 1);
        st_rpipe_discard(p);
        ck_assert_msg(next == cases[k].next, "from %zu max %zu bytes %zu: %zu, not %zu",
                      cases[k].from, cases[k].max, cases[k].max_bytes, next, cases[k].next);
    }
    st_checkpoint_destroy(c);
    st_rpipe_destroy(p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("fence_redis");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, fence_checkpoint_longer_than_the_read_timeout_is_written);
    tcase_add_test(tc, fence_parts_keep_an_inner_transaction_whole);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
