/* test_runidx_redis.c: the run index's marker <prefix>runs:complete_since
 * against a real Redis (runidx.h). The marker says from when every state
 * write also wrote its index entry; every analyzer that moves it means "not
 * before now", so it only ever moves on: an analyzer whose clock is behind
 * another's must not move back what the other set (the index would be
 * trusted early by the skew). Its clock being behind is played by writing
 * the marker 1000 s past this host's time, as the other analyzer would.
 *   - the move after a Redis restart (st_runidx_committed), on a Redis of
 *     the test's own that it restarts;
 *   - the move of a check (st_runidx_check: the recorded run_id differs,
 *     the marker deleted or not a time), on the shared Redis under a
 *     prefix of the test's own. */
#include <check.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "analyzer.h"
#include "detect.h"
#include "rpipe.h"
#include "runidx.h"
#include "world.h"

#define AHEAD 1000 /* the other analyzer's clock, ahead of this host's (s) */

static struct st_analyzer_conf conf;

/* A Redis of the test's own, no persistence: a restart loses everything
 * and has a new run_id. Not a daemon: under timeout, so that one a failed
 * test leaves running goes after 120 s. */
#define START_REDIS                                                                       \
    "mkdir -p %s && (timeout 120 redis-server --bind 127.0.0.1 --port %d --dir %s"        \
    " --appendonly no --save '' --logfile %s/log >/dev/null 2>&1 &) && "                  \
    "for i in $(seq 1 100); do"                                                           \
    " redis-cli -p %d ping 2>/dev/null | grep -q PONG && exit 0; sleep 0.1; done; exit 1"

static void redis_start(const char *dir, int port)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), START_REDIS, dir, port, dir, dir, port);
    ck_assert_msg(system(cmd) == 0, "the test's Redis did not start");
}

static void redis_stop(int port)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd),
             "redis-cli -p %d shutdown nosave >/dev/null 2>&1; for i in $(seq 1 100); do"
             " redis-cli -p %d ping >/dev/null 2>&1 || exit 0; sleep 0.1; done; exit 1",
             port, port);
    ck_assert_msg(system(cmd) == 0, "the test's Redis did not stop");
}

static int on_int(const redisReply *r, void *arg)
{
    *(int64_t *)arg = r->type == REDIS_REPLY_STRING ? atoll(r->str)
                      : r->type == REDIS_REPLY_NIL  ? -1
                                                    : -2;
    return 0;
}

/* The marker's value; -1 when absent. */
static int64_t marker_get(struct st_rpipe *p)
{
    char err[256], *key = st_detect_marker_key(&conf);
    int64_t v = -2;
    const char *get[] = {"GET", key};
    st_rpipe_cmd(p, on_int, &v, 2, get);
    ck_assert_msg(st_rpipe_exec(p, err, sizeof(err)) == 0, "%s", err);
    free(key);
    return v;
}

/* SET <prefix>runs:<what> value (what "complete_since": the marker). */
static void key_set(struct st_rpipe *p, const char *what, const char *value)
{
    char err[256], key[256];
    snprintf(key, sizeof(key), "%sruns:%s", conf.redis_prefix, what);
    const char *set[] = {"SET", key, value};
    st_rpipe_cmd(p, NULL, NULL, 3, set);
    ck_assert_msg(st_rpipe_exec(p, err, sizeof(err)) == 0, "%s", err);
}

/* The marker set to now + delta, as an analyzer whose clock is delta s
 * from this host's would set it. */
static int64_t marker_set(struct st_rpipe *p, int64_t delta)
{
    char v[24];
    int64_t t = (int64_t)time(NULL) + delta;
    snprintf(v, sizeof(v), "%" PRId64, t);
    key_set(p, "complete_since", v);
    return t;
}

/* Redis restarted under p: the first command fails (the connection was
 * closed), the next one reconnects, which makes the next check run
 * (st_rpipe_reconnects), as in the analyzer after a failed checkpoint. */
static void redis_restart(struct st_rpipe *p, const char *dir, int port)
{
    char err[256];
    const char *ping[] = {"PING"};
    redis_stop(port);
    redis_start(dir, port);
    st_rpipe_cmd(p, NULL, NULL, 1, ping);
    ck_assert_int_ne(st_rpipe_exec(p, err, sizeof(err)), 0);
    st_rpipe_cmd(p, NULL, NULL, 1, ping);
    ck_assert_msg(st_rpipe_exec(p, err, sizeof(err)) == 0, "%s", err);
}

/* A check, retried past the failures a connection to a restarted Redis
 * gives first (the next exec reconnects). */
static void check_now(struct st_runidx *x, struct st_rpipe *p, uint64_t seq)
{
    char err[256];
    int i;
    for (i = 0; i < 5 && st_runidx_check(x, p, seq, err, sizeof(err)); i++)
        usleep(100000);
    ck_assert_msg(i < 5, "st_runidx_check: %s", err);
}

/* After a restart of Redis the analyzer saw, the marker moves on to now
 * once the checkpoints built before the check are in (st_runidx_committed):
 * but not back, when another analyzer whose clock is ahead moved it later
 * meanwhile; and forward from an older value, as meant. */
START_TEST(runidx_committed_never_moves_the_marker_back)
{
    char dir[128], prefix[96], url[64], err[256];
    int port = world_free_port();
    snprintf(dir, sizeof(dir), "/tmp/st_runidx_redis_%d_%ld", (int)getpid(),
             (long)time(NULL));
    snprintf(prefix, sizeof(prefix), "st_runidx_redis_%d_%ld:", (int)getpid(),
             (long)time(NULL));
    memset(&conf, 0, sizeof(conf));
    conf.redis_prefix = prefix;
    conf.state_ttl_s = 3600;
    redis_start(dir, port);
    snprintf(url, sizeof(url), "redis://127.0.0.1:%d/0", port);
    struct st_rpipe *p = st_rpipe_new(url, NULL, err, sizeof(err));
    ck_assert_msg(p != NULL, "%s", err);
    struct st_runidx *x = st_runidx_new(&conf);

    check_now(x, p, 1); /* no marker: set to now; this Redis's run_id seen */
    ck_assert_int_gt(marker_get(p), 0);

    /* restarted: the check sets the marker to now and waits for seq 2 */
    redis_restart(p, dir, port);
    check_now(x, p, 2);
    st_runidx_begin(x);
    ck_assert_int_eq(st_runidx_trusted(x), 0);
    /* another analyzer, its clock ahead, moved it later meanwhile */
    int64_t later = marker_set(p, AHEAD);
    ck_assert_int_eq(st_runidx_committed(x, p, 2), 0);
    ck_assert_int_eq(marker_get(p), later); /* not back to this host's now */
    ck_assert_int_eq(st_runidx_trusted(x), 0);

    /* restarted again; the marker older than now by the time of the commit
     * (an analyzer behind wrote it): moved on to now */
    redis_restart(p, dir, port);
    check_now(x, p, 3);
    marker_set(p, -AHEAD);
    int64_t t0 = (int64_t)time(NULL);
    ck_assert_int_eq(st_runidx_committed(x, p, 3), 0);
    int64_t v = marker_get(p);
    ck_assert_msg(v >= t0 && v <= (int64_t)time(NULL), "marker %" PRId64 ", now %" PRId64,
                  v, t0);
    ck_assert_int_eq(st_runidx_trusted(x), 0);

    st_runidx_destroy(x);
    st_rpipe_destroy(p);
    redis_stop(port);
    snprintf(err, sizeof(err), "rm -rf %s", dir);
    ck_assert_int_eq(system(err), 0);
}
END_TEST

/* A check that finds a reason to distrust the index (Redis's run_id not
 * the one recorded, the marker deleted or not a time) sets the marker to
 * now, but leaves a later time alone. */
START_TEST(runidx_check_never_moves_the_marker_back)
{
    char prefix[96], err[256];
    snprintf(prefix, sizeof(prefix), "st_runidx_redis_%d_%ld_c:", (int)getpid(),
             (long)time(NULL));
    memset(&conf, 0, sizeof(conf));
    conf.redis_prefix = prefix;
    conf.state_ttl_s = 3600;
    const char *url = getenv("SANDTRAIL_REDIS_URL");
    ck_assert_ptr_nonnull(url);
    struct st_rpipe *p = st_rpipe_new(url, getenv("SANDTRAIL_REDIS_PASSWORD_FILE"), err,
                                      sizeof(err));
    ck_assert_msg(p != NULL, "%s", err);
    struct st_runidx *x = st_runidx_new(&conf);

    /* a Redis restart another analyzer recorded, the marker later than now */
    int64_t later = marker_set(p, AHEAD);
    key_set(p, "server", "a-redis-process-before-this-one");
    check_now(x, p, 1);
    ck_assert_int_eq(marker_get(p), later);

    /* the same with an older marker: moved on to now */
    const char *moves[] = {"restart", "deleted", "not a time"};
    for (int i = 0; i < 3; i++) {
        if (i == 0) {
            marker_set(p, -AHEAD);
            key_set(p, "server", "a-redis-process-before-this-one");
        } else if (i == 1) {
            char *key = st_detect_marker_key(&conf);
            const char *del[] = {"DEL", key};
            st_rpipe_cmd(p, NULL, NULL, 2, del);
            ck_assert_int_eq(st_rpipe_exec(p, err, sizeof(err)), 0);
            free(key);
        } else {
            key_set(p, "complete_since", "soon");
        }
        st_runidx_forget(x); /* the next check checks */
        int64_t t0 = (int64_t)time(NULL);
        check_now(x, p, 2 + (uint64_t)i);
        int64_t v = marker_get(p);
        ck_assert_msg(v >= t0 && v <= (int64_t)time(NULL),
                      "%s: marker %" PRId64 ", now %" PRId64, moves[i], v, t0);
        st_runidx_begin(x);
        ck_assert_int_eq(st_runidx_trusted(x), 0);
    }

    char key[3][160];
    const char *del[4] = {"DEL", key[0], key[1], key[2]};
    snprintf(key[0], sizeof(key[0]), "%sruns:complete_since", prefix);
    snprintf(key[1], sizeof(key[1]), "%sruns:server", prefix);
    snprintf(key[2], sizeof(key[2]), "%sruns:partitions", prefix);
    st_rpipe_cmd(p, NULL, NULL, 4, del);
    ck_assert_int_eq(st_rpipe_exec(p, err, sizeof(err)), 0);
    st_runidx_destroy(x);
    st_rpipe_destroy(p);
}
END_TEST

int main(void)
{
    if (world_setup())
        return EXIT_FAILURE;
    Suite *s = suite_create("runidx_redis");
    TCase *tc = tcase_create("runidx_redis");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, runidx_committed_never_moves_the_marker_back);
    tcase_add_test(tc, runidx_check_never_moves_the_marker_back);
    suite_add_tcase(s, tc);
    return world_run(s);
}
