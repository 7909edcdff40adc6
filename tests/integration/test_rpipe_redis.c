/* test_rpipe_redis.c: a pipeline larger than the socket's buffers against
 * the real Redis (session 6: st_rpipe_exec writes the commands from where
 * they lie, no longer through hiredis's output buffer, and a checkpoint
 * takes its parts' buffers instead of copying them):
 *   - the commands of checkpoints joined with st_checkpoint_take (large
 *     parts moved as segments, small ones copied, commands appended after
 *     a take), between commands queued
 *     one by one, reach Redis whole and in order, and each callback gets
 *     its own reply, over megabytes that take many partial writes;
 *   - the same checkpoint objects reused (their buffers gone round between
 *     them) carry the next round's commands, not the last's;
 *   - a connection Redis closed fails the exec with an error (no SIGPIPE
 *     ends the process) and the next exec reconnects;
 *   - a round trip is bounded as a whole (st_rpipe_set_round_trip_ms):
 *     replies that come one at a time, slowly (each within the socket's
 *     5 s timeout), or a Redis that stops answering, fail the exec at the
 *     deadline, and the next exec goes through on a new connection;
 *   - commands a callback queues go in a round of their own within the
 *     same exec. */
#include <check.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "rpipe.h"
#include "timeutil.h"
#include "world.h"

#define NKEYS 3000
#define VLEN 2000

static char prefix[64];
static char err[512];

static struct st_rpipe *open_pipe(void)
{
    const char *url = getenv("SANDTRAIL_REDIS_URL");
    ck_assert_ptr_nonnull(url);
    struct st_rpipe *p = st_rpipe_new(url, NULL, err, sizeof(err));
    ck_assert_msg(p != NULL, "%s", err);
    snprintf(prefix, sizeof(prefix), "test_rpipe_%ld_%d:", (long)time(NULL), (int)getpid());
    return p;
}

static void key_of(char *out, size_t n, int i)
{
    snprintf(out, n, "%sk%d", prefix, i);
}

/* value i of round: VLEN bytes that differ by key and round */
static void value_of(char *out, int i, int round)
{
    int k = snprintf(out, VLEN + 1, "r%d:k%d:", round, i);
    memset(out + k, 'a' + (i + round) % 26, (size_t)(VLEN - k));
    out[VLEN] = '\0';
}

static void set_cmd(struct st_checkpoint *c, int i, int round)
{
    char key[96], val[VLEN + 1];
    key_of(key, sizeof(key), i);
    value_of(val, i, round);
    /* EX: a failed run leaves nothing for long */
    const char *argv[] = {"SET", key, val, "EX", "600"};
    st_checkpoint_cmd(c, 5, argv);
}

static int replies, order_bad;

static int on_echo(const redisReply *r, void *arg)
{
    long want = (long)(intptr_t)arg;
    char s[32];
    snprintf(s, sizeof(s), "%ld", want);
    if (r->type != REDIS_REPLY_STRING || strcmp(r->str, s) || replies != want)
        order_bad++;
    replies++;
    return 0;
}

static void echo(struct st_rpipe *p, long n)
{
    char s[32];
    snprintf(s, sizeof(s), "%ld", n);
    const char *argv[] = {"ECHO", s};
    st_rpipe_cmd(p, on_echo, (void *)(intptr_t)n, 2, argv);
}

static int got_bad;
static const char *got_want;

static int on_get(const redisReply *r, void *arg)
{
    (void)arg;
    if (r->type != REDIS_REPLY_STRING || strcmp(r->str, got_want))
        got_bad++;
    return 0;
}

/* every key holds its value of round */
static void check_round(struct st_rpipe *p, int round)
{
    char key[96], val[VLEN + 1];
    for (int i = 0; i < NKEYS; i++) {
        key_of(key, sizeof(key), i);
        value_of(val, i, round);
        got_want = val;
        const char *argv[] = {"GET", key};
        st_rpipe_cmd(p, on_get, NULL, 2, argv);
        ck_assert_msg(st_rpipe_exec(p, err, sizeof(err)) == 0, "%s", err);
        ck_assert_msg(got_bad == 0, "key %d does not hold its round-%d value", i, round);
    }
}

static void drop_keys(struct st_rpipe *p)
{
    char key[96];
    for (int i = 0; i < NKEYS; i++) {
        key_of(key, sizeof(key), i);
        const char *argv[] = {"DEL", key};
        st_rpipe_cmd(p, NULL, NULL, 2, argv);
    }
    st_rpipe_exec(p, err, sizeof(err));
}

/* A callback that queues a follow-up (rpipe.h): ECHO "d" at depth d
 * queues ECHO "d+1" up to depth 2. */
static struct st_rpipe *chain_pipe;
static int chain_seen[3];

static int on_chain(const redisReply *r, void *arg)
{
    long d = (long)(intptr_t)arg;
    if (r->type != REDIS_REPLY_STRING)
        return -1;
    chain_seen[d] = atol(r->str) == d ? 1 : -1;
    if (d < 2) {
        char s[24];
        snprintf(s, sizeof(s), "%ld", d + 1);
        const char *argv[] = {"ECHO", s};
        st_rpipe_cmd(chain_pipe, on_chain, (void *)(intptr_t)(d + 1), 2, argv);
    }
    return 0;
}

/* Commands a callback queues go in a round of their own within the same
 * exec, after the replies of the round that queued them: every callback
 * has run when the exec returns, a follow-up's follow-up too, the other
 * commands' replies in order; nothing is left for the next exec. A
 * runwin load reads a run's older layouts this way, only when its first
 * round found them (runwin.c). Fails when an exec sends only what was
 * queued before it, or reads replies of commands it did not send. */
START_TEST(rpipe_callback_follow_ups_run_in_the_same_exec)
{
    struct st_rpipe *p = open_pipe();
    chain_pipe = p;
    memset(chain_seen, 0, sizeof(chain_seen));
    replies = order_bad = 0;
    unsigned long sent0 = st_rpipe_sent(p);
    echo(p, 0);
    const char *argv[] = {"ECHO", "0"};
    st_rpipe_cmd(p, on_chain, (void *)(intptr_t)0, 2, argv);
    echo(p, 1);
    ck_assert_msg(st_rpipe_exec(p, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(chain_seen[0], 1);
    ck_assert_int_eq(chain_seen[1], 1);
    ck_assert_int_eq(chain_seen[2], 1);
    ck_assert_int_eq(replies, 2);
    ck_assert_int_eq(order_bad, 0);
    ck_assert_uint_eq(st_rpipe_sent(p) - sent0, 5); /* 3, then 1, then 1 */
    /* nothing left over: the next exec sends only its own command */
    echo(p, 2);
    ck_assert_msg(st_rpipe_exec(p, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(st_rpipe_sent(p) - sent0, 6);
    ck_assert_int_eq(replies, 3);
    ck_assert_int_eq(order_bad, 0);
    st_rpipe_destroy(p);
}
END_TEST

START_TEST(rpipe_large_pipeline_of_joined_checkpoints)
{
    struct st_rpipe *p = open_pipe();
    struct st_checkpoint *parts[5], *all = st_checkpoint_new();
    for (int k = 0; k < 5; k++)
        parts[k] = st_checkpoint_new();
    for (int round = 0; round < 3; round++) {
        /* keys [0, 1000) in part 0, [1000, 2000) in part 1, [2000, 2990)
         * in part 2 (megabytes each: moved by st_checkpoint_take), [2990,
         * 2995) in part 3 and [2995, 2999) in part 4 (a few KB: copied);
         * part 2 taken into part 0 first (a checkpoint of two segments);
         * part 3 copied into the empty joined one, parts 0 and 1 moved
         * after it, part 4 copied to the end of a moved segment, the last
         * key appended after the takes */
        for (int i = 0; i < NKEYS - 1; i++)
            set_cmd(parts[i < 2990 ? i / 1000 : i < 2995 ? 3 : 4], i, round);
        st_checkpoint_take(parts[0], parts[2]);
        ck_assert_uint_eq(st_checkpoint_len(parts[2]), 0);
        st_checkpoint_take(all, parts[3]);
        st_checkpoint_take(all, parts[0]);
        st_checkpoint_take(all, parts[1]);
        st_checkpoint_take(all, parts[4]);
        set_cmd(all, NKEYS - 1, round);
        ck_assert_uint_eq(st_checkpoint_len(all), NKEYS);
        replies = order_bad = 0;
        echo(p, 0);
        /* the checkpoint's commands between two queued one by one */
        ck_assert_msg(st_checkpoint_exec(all, p, err, sizeof(err)) == 0, "%s", err);
        /* ECHO 0 went first in that exec; the connection is still in
         * step after it */
        ck_assert_int_eq(replies, 1);
        echo(p, 1);
        ck_assert_msg(st_rpipe_exec(p, err, sizeof(err)) == 0, "%s", err);
        ck_assert_int_eq(replies, 2);
        ck_assert_int_eq(order_bad, 0);
        /* parts 1 and 0 hold the keys in the wrong order: a command of the
         * wrong segment would leave the last round's or a wrong value */
        check_round(p, round);
        st_checkpoint_clear(all);
    }
    drop_keys(p);
    for (int k = 0; k < 5; k++)
        st_checkpoint_destroy(parts[k]);
    st_checkpoint_destroy(all);
    st_rpipe_destroy(p);
}
END_TEST

static long long client_id;

static int on_id(const redisReply *r, void *arg)
{
    (void)arg;
    client_id = r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    return 0;
}

START_TEST(rpipe_closed_connection_is_an_error_then_reconnects)
{
    struct st_rpipe *p = open_pipe();
    const char *id[] = {"CLIENT", "ID"};
    st_rpipe_cmd(p, on_id, NULL, 2, id);
    ck_assert_msg(st_rpipe_exec(p, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_gt(client_id, 0);
    /* another connection closes this one */
    struct st_rpipe *killer = open_pipe();
    char idstr[32];
    snprintf(idstr, sizeof(idstr), "%lld", client_id);
    const char *kill[] = {"CLIENT", "KILL", "ID", idstr};
    st_rpipe_cmd(killer, NULL, NULL, 4, kill);
    ck_assert_msg(st_rpipe_exec(killer, err, sizeof(err)) == 0, "%s", err);
    /* megabytes to a closed connection: an error, not a signal */
    struct st_checkpoint *c = st_checkpoint_new();
    for (int i = 0; i < NKEYS; i++)
        set_cmd(c, i, 7);
    int rc = st_checkpoint_exec(c, p, err, sizeof(err));
    ck_assert_int_eq(rc, -1);
    fprintf(stderr, "exec on the closed connection: %s\n", err);
    /* the next one reconnects and goes through */
    ck_assert_msg(st_checkpoint_exec(c, p, err, sizeof(err)) == 0, "%s", err);
    check_round(p, 7);
    drop_keys(p);
    st_checkpoint_destroy(c);
    st_rpipe_destroy(killer);
    st_rpipe_destroy(p);
}
END_TEST

/* A Redis of the test's own, no persistence, so that it can be stopped
 * (SIGSTOP) without stalling other tests. Not a daemon: under timeout, so
 * that one a failed test leaves running goes after 120 s. */
#define START_REDIS                                                                       \
    "mkdir -p %s && (timeout 120 redis-server --bind 127.0.0.1 --port %d --dir %s"        \
    " --appendonly no --save '' --logfile %s/log >/dev/null 2>&1 &) && "                  \
    "for i in $(seq 1 100); do"                                                           \
    " redis-cli -p %d ping 2>/dev/null | grep -q PONG && exit 0; sleep 0.1; done; exit 1"

/* The process id of the Redis on port. */
static long redis_pid(int port)
{
    char cmd[256], line[64] = "";
    snprintf(cmd, sizeof(cmd),
             "redis-cli -p %d info server | sed -n 's/^process_id:\\([0-9]*\\).*/\\1/p'",
             port);
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_ptr_nonnull(fgets(line, sizeof(line), f));
    pclose(f);
    long pid = atol(line);
    ck_assert_int_gt(pid, 1);
    return pid;
}

#define DEADLINE_MS 2000
#define MARGIN_MS 1500 /* a loaded machine's scheduling, the close */

/* The exec of what p holds fails at its deadline, not before and not
 * long after (the socket's 5 s timeout, or never) */
static void exec_fails_at_deadline(struct st_rpipe *p, const char *what)
{
    int64_t t0 = st_time_mono_ms();
    int rc = st_rpipe_exec(p, err, sizeof(err));
    int64_t took = st_time_mono_ms() - t0;
    fprintf(stderr, "%s: rc %d after %lld ms: %s\n", what, rc, (long long)took,
            rc ? err : "");
    ck_assert_msg(rc == -1, "%s: the exec went through after %lld ms", what,
                  (long long)took);
    ck_assert_msg(took >= DEADLINE_MS && took <= DEADLINE_MS + MARGIN_MS,
                  "%s: failed after %lld ms, the deadline is %d ms", what, (long long)took,
                  DEADLINE_MS);
    ck_assert_msg(strstr(err, "redis.round_trip_timeout_ms") != NULL, "%s", err);
}

/* The next exec reconnects (a new client) and goes through. */
static void next_exec_reconnects(struct st_rpipe *p, long long old_id)
{
    unsigned long before = st_rpipe_reconnects();
    const char *id[] = {"CLIENT", "ID"};
    st_rpipe_cmd(p, on_id, NULL, 2, id);
    replies = order_bad = 0;
    echo(p, 0);
    ck_assert_msg(st_rpipe_exec(p, err, sizeof(err)) == 0, "%s", err);
    ck_assert_int_eq(replies, 1);
    ck_assert_int_eq(order_bad, 0);
    ck_assert_uint_eq(st_rpipe_reconnects(), before + 1);
    ck_assert_int_gt(client_id, 0);
    ck_assert_int_ne(client_id, old_id);
}

START_TEST(rpipe_round_trip_past_its_deadline_fails_then_reconnects)
{
    char dir[128], url[64];
    int port = world_free_port();
    snprintf(dir, sizeof(dir), "/tmp/st_rpipe_redis_%d_%ld", (int)getpid(),
             (long)time(NULL));
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), START_REDIS, dir, port, dir, dir, port);
    ck_assert_msg(system(cmd) == 0, "the test's Redis did not start");
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d/0", port);
    struct st_rpipe *p = st_rpipe_new(url, NULL, err, sizeof(err));
    ck_assert_msg(p != NULL, "%s", err);
    st_rpipe_set_round_trip_ms(p, DEADLINE_MS);
    const char *id[] = {"CLIENT", "ID"};
    st_rpipe_cmd(p, on_id, NULL, 2, id);
    ck_assert_msg(st_rpipe_exec(p, err, sizeof(err)) == 0, "%s", err);
    long long first = client_id;

    /* replies that trickle in: 8 BLPOPs of a key nothing pushes, each
     * answered (nil) 1 s after the one before, as a slow Redis answers a
     * MULTI's commands one by one; no read waits 5 s, the whole 8 s */
    const char *blpop[] = {"BLPOP", "test_rpipe_deadline:never", "1"};
    for (int i = 0; i < 8; i++)
        st_rpipe_cmd(p, NULL, NULL, 3, blpop);
    exec_fails_at_deadline(p, "replies one a second");
    ck_assert_msg(strstr(err, "round trip of 8 commands") != NULL, "%s", err);
    next_exec_reconnects(p, first);
    long long second = client_id;

    /* Redis stops answering at all */
    long pid = redis_pid(port);
    ck_assert_int_eq(kill((pid_t)pid, SIGSTOP), 0);
    replies = order_bad = 0;
    for (int i = 0; i < 3; i++)
        echo(p, i);
    exec_fails_at_deadline(p, "Redis stopped");
    ck_assert_int_eq(replies, 0);
    ck_assert_int_eq(kill((pid_t)pid, SIGCONT), 0);
    next_exec_reconnects(p, second);

    st_rpipe_destroy(p);
    snprintf(cmd, sizeof(cmd), "redis-cli -p %d shutdown nosave >/dev/null 2>&1; rm -rf %s",
             port, dir);
    (void)system(cmd);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("rpipe_redis");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, rpipe_large_pipeline_of_joined_checkpoints);
    tcase_add_test(tc, rpipe_callback_follow_ups_run_in_the_same_exec);
    tcase_add_test(tc, rpipe_closed_connection_is_an_error_then_reconnects);
    tcase_add_test(tc, rpipe_round_trip_past_its_deadline_fails_then_reconnects);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
