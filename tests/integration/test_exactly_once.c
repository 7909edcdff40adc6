/* test_exactly_once.c: a batch redone after a PostgreSQL error or a crash
 * leaves what one clean run leaves (issue 13, item 1), against the real
 * services.
 *
 * The detectors' state in Redis is written before the PostgreSQL commit;
 * what destroys information (trims) runs only after the batch's offsets
 * are committed. These tests redo batches whose event time spans more than
 * a window's keep time, where a trim run before the commit removes what
 * the redo needs. */
#include <check.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "buf.h"
#include "rpipe.h"
#include "runblob.h"
#include "world.h"

#define ANALYZER BIN "/analyzer/sandtrail-analyzer"
#define COLLECTOR BIN "/collector/sandtrail-collector"

static const char *q_findings =
    "SELECT detector, detector_version, severity, task_id, run_id, first_seen,"
    " last_seen, event_count, evidence::text, summary, finding_id, config_hash"
    " FROM findings ORDER BY finding_id";
static const char *q_events =
    "SELECT source_name, event_id, ts, task_id, run_id, type, decision, target,"
    " body::text, kafka_partition, kafka_offset FROM events"
    " ORDER BY source_name, event_id";
static const char *q_finding_events = "SELECT * FROM finding_events ORDER BY 1, 2, 3";

/* A proxy request of run r-<run> of task T-<run>, t_ms after
 * 2026-11-29T07:00:00Z. */
static void request(FILE *f, const char *id, int run, long t_ms, int deny,
                    const char *host, const char *path, int status)
{
    fprintf(f,
            "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"%s\","
            "\"ts\":\"2026-11-29T%02ld:%02ld:%02ld.%03ldZ\","
            "\"source\":{\"kind\":\"proxy\",\"name\":\"squid\"},"
            "\"task_id\":\"T-%d\",\"run_id\":\"r-%d\",\"type\":\"request\","
            "\"decision\":\"%s\",%s\"attrs\":{\"method\":\"GET\",\"host\":\"%s\","
            "\"path\":\"%s\",\"port\":443,\"status\":%d,\"bytes_out\":%ld}}\n",
            id, 7 + t_ms / 3600000, t_ms / 60000 % 60, t_ms / 1000 % 60, t_ms % 1000, run,
            run, deny ? "deny" : "allow", deny ? "\"reason\":\"not_in_allowlist\"," : "",
            host, path, status, 100 + t_ms % 900);
}

static void post(const struct world *w, const char *path)
{
    ck_assert_int_eq(run(w, w->name, w->name, COLLECTOR " --input %s 2>/dev/null", path),
                     0);
}

/* The 7-event stream of issue 13: one denied request, two allowed ones to
 * other hosts, a pause, one 30 s later (the third attempt elsewhere after
 * the refusal: a high retry_across_paths finding), one 400 s after that,
 * which moves the run's window far enough to trim the first four, and two
 * more. The first three come in one batch, the rest in the next. */
static void seven_events(const char *first, const char *rest)
{
    FILE *f = fopen(first, "w");
    ck_assert_ptr_nonnull(f);
    request(f, "x-1", 1, 0, 1, "paste.example.net", "/", 403);
    request(f, "x-2", 1, 1000, 0, "gist.example.com", "/", 200);
    request(f, "x-3", 1, 2000, 0, "files.example.org", "/", 200);
    fclose(f);
    f = fopen(rest, "w");
    ck_assert_ptr_nonnull(f);
    request(f, "x-4", 1, 32000, 0, "drop.example.io", "/", 200);
    request(f, "x-5", 1, 432000, 0, "docs.example.com", "/", 200);
    request(f, "x-6", 1, 433000, 0, "docs.example.com", "/a", 200);
    request(f, "x-7", 1, 434000, 0, "docs.example.com", "/b", 200);
    fclose(f);
}

/* Holds a SHARE lock on the world's events table for ms
 * milliseconds, from a child process; returns once the lock is held. */
static pid_t lock_events(const struct world *w, int ms)
{
    int fds[2];
    char c;
    ck_assert_int_eq(pipe(fds), 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        PGconn *pg = PQconnectdb(w->dsn);
        /* SHARE: inserts wait, reads (the staging table made LIKE events
         * at start) do not */
        PGresult *r = PQexec(pg, "BEGIN; LOCK TABLE events IN SHARE MODE");
        int ok = PQresultStatus(r) == PGRES_COMMAND_OK;
        PQclear(r);
        if (write(fds[1], ok ? "y" : "n", 1) != 1)
            _exit(1);
        usleep((useconds_t)ms * 1000);
        PQclear(PQexec(pg, "COMMIT"));
        PQfinish(pg);
        _exit(ok ? 0 : 1);
    }
    close(fds[1]);
    ck_assert_int_eq(read(fds[0], &c, 1), 1);
    close(fds[0]);
    ck_assert_msg(c == 'y', "could not lock events");
    return pid;
}

static void lock_wait(pid_t pid)
{
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void assert_same_tables(const struct world *a, const struct world *b)
{
    const char *qs[] = {q_events, q_findings, q_finding_events};
    char diff[800];
    for (int i = 0; i < 3; i++) {
        char *x = rows(a->dsn, qs[i]), *y = rows(b->dsn, qs[i]);
        ck_assert_msg(strlen(x) > 0, "query %d returned nothing", i);
        if (strcmp(x, y) != 0)
            world_first_difference("clean", x, y, diff, sizeof(diff));
        ck_assert_msg(strcmp(x, y) == 0, "query %d differs at %s", i, diff);
        free(x);
        free(y);
    }
}

/* lateness 0: each event is released as it comes, so the batches are the
 * first three events, then the rest */
#define SEVEN_OPTS " -X detect.lateness_s=0 -X batch.max_events=3 -X batch.behind_events=0"

/* Sets up the 7-event case: a clean world analyzes all seven; the other
 * has committed the first three and has the rest waiting in the topic. */
static void seven_setup(struct world *clean, struct world *w, char *first, char *rest)
{
    world_init(clean, "clean7");
    world_init(w, "redo7");
    snprintf(w->topic, sizeof(w->topic), "%s", clean->topic);
    snprintf(w->dlq, sizeof(w->dlq), "%s", clean->dlq);
    seven_events(first, rest);
    post(clean, first);
    ck_assert_int_eq(run(w, w->name, w->name, ANALYZER " --drain 2>/dev/null" SEVEN_OPTS),
                     0);
    post(clean, rest);
    ck_assert_int_eq(
        run(clean, clean->name, clean->name, ANALYZER " --drain 2>/dev/null" SEVEN_OPTS), 0);
    char *f = rows(clean->dsn, "SELECT detector, severity, event_count FROM findings"
                               " ORDER BY 1");
    ck_assert_str_eq(f, "retry_across_paths|high|4\n");
    free(f);
}

/* PostgreSQL refuses the second batch for ~3 s (a lock the analyzer's
 * lock_timeout gives up on): the batch is retried and still finds the high
 * finding its events make with the first batch's. */
START_TEST(exactly_once_transient_pg_error_keeps_the_finding)
{
    struct world clean, w;
    char first[128], rest[128], log[128];
    snprintf(first, sizeof(first), "/tmp/st_eo_%d_a.ndjson", (int)getpid());
    snprintf(rest, sizeof(rest), "/tmp/st_eo_%d_b.ndjson", (int)getpid());
    snprintf(log, sizeof(log), "/tmp/st_eo_%d.log", (int)getpid());
    seven_setup(&clean, &w, first, rest);

    pid_t locker = lock_events(&w, 3000);
    ck_assert_int_eq(run(&w, w.name, w.name,
                         "PGOPTIONS='-c lock_timeout=200' " ANALYZER
                         " --drain 2>%s" SEVEN_OPTS " -X retry.max_backoff_ms=200",
                         log),
                     0);
    lock_wait(locker);
    char *text = world_slurp(log);
    ck_assert_msg(strstr(text, "batch not written, retrying"), "no retry: %s", text);
    free(text);
    assert_same_tables(&clean, &w);
    unlink(first);
    unlink(rest);
    unlink(log);
    world_drop(&clean);
    world_drop(&w);
}
END_TEST

/* The same, but the analyzer is killed (-9) while it retries; the next one
 * redoes the batch from the committed offsets. */
START_TEST(exactly_once_kill_during_retry_keeps_the_finding)
{
    struct world clean, w;
    char first[128], rest[128], log[128];
    snprintf(first, sizeof(first), "/tmp/st_eo_%d_c.ndjson", (int)getpid());
    snprintf(rest, sizeof(rest), "/tmp/st_eo_%d_d.ndjson", (int)getpid());
    snprintf(log, sizeof(log), "/tmp/st_eo_%d_k.log", (int)getpid());
    seven_setup(&clean, &w, first, rest);

    pid_t locker = lock_events(&w, 4000);
    /* killed once it has failed to write the batch at least once */
    run(&w, w.name, w.name,
        "PGOPTIONS='-c lock_timeout=200' " ANALYZER " --drain 2>%s" SEVEN_OPTS
        " -X retry.max_backoff_ms=200 & p=\\$!;"
        " for i in \\$(seq 100); do grep -q retrying %s && break; sleep 0.05; done;"
        " kill -9 \\$p; wait \\$p",
        log, log);
    char *text = world_slurp(log);
    ck_assert_msg(strstr(text, "batch not written, retrying"), "no retry: %s", text);
    free(text);
    lock_wait(locker);
    ck_assert_int_eq(run(&w, w.name, w.name, ANALYZER " --drain 2>/dev/null" SEVEN_OPTS),
                     0);
    assert_same_tables(&clean, &w);
    unlink(first);
    unlink(rest);
    unlink(log);
    world_drop(&clean);
    world_drop(&w);
}
END_TEST

/* The same, but the analyzer is stopped (SIGTERM) while PostgreSQL keeps
 * refusing the batch: the store gives up on it, and nothing may commit its
 * offsets on the way out -- closing the consumer revokes the partitions,
 * whose callback wrote the detectors' checkpoint and committed every
 * offset (the unwritten batch's too: its events were lost). The next
 * analyzer redoes the batch. */
START_TEST(exactly_once_stop_during_retry_commits_nothing)
{
    struct world clean, w;
    char first[128], rest[128], log[128];
    snprintf(first, sizeof(first), "/tmp/st_eo_%d_s.ndjson", (int)getpid());
    snprintf(rest, sizeof(rest), "/tmp/st_eo_%d_t.ndjson", (int)getpid());
    snprintf(log, sizeof(log), "/tmp/st_eo_%d_s.log", (int)getpid());
    seven_setup(&clean, &w, first, rest);

    run(&w, w.name, w.name,
        ANALYZER " --drain 2>%s" SEVEN_OPTS
        " -X retry.max_backoff_ms=200 -X fault.fail_pg_commits=1000000 & p=\\$!;"
        " for i in \\$(seq 200); do grep -q retrying %s && break; sleep 0.05; done;"
        " kill -TERM \\$p; wait \\$p",
        log, log);
    char *text = world_slurp(log);
    ck_assert_msg(strstr(text, "retrying"), "no retry: %s", text);
    free(text);
    ck_assert_int_eq(run(&w, w.name, w.name, ANALYZER " --drain 2>/dev/null" SEVEN_OPTS),
                     0);
    assert_same_tables(&clean, &w);
    unlink(first);
    unlink(rest);
    unlink(log);
    world_drop(&clean);
    world_drop(&w);
}
END_TEST

static long members_reply;

/* a window's members: a sorted set's ZCARD, or a run's string's count */
static int on_members(const redisReply *r, void *arg)
{
    struct st_runblob_reader rd;
    uint64_t n;
    (void)arg;
    if (r->type == REDIS_REPLY_INTEGER) {
        members_reply = (long)r->integer;
        return 0;
    }
    if (r->type == REDIS_REPLY_NIL)
        return 0;
    if (arg && r->type == REDIS_REPLY_STRING) { /* a log (runblob.h) */
        members_reply = st_runblob_log_count(r->str, r->len);
        return members_reply < 0 ? -1 : 0;
    }
    if (r->type != REDIS_REPLY_STRING || st_runblob_open(&rd, r->str, r->len) ||
        st_runblob_get_count(&rd, &n))
        return -1;
    members_reply = (long)n;
    return 0;
}

/* The member count of each run window of detector det under prefix, one
 * line each, whichever layout holds it (runwin.c: a field of the run's
 * bucket while small, a log when large), in the order of the keys and
 * fields. */
static char *window_sizes(const char *prefix, const char *det)
{
    char err[256];
    /* "key" for a log, "key field" for a bucket's field of det */
    char *keys = world_shf("u=\"$SANDTRAIL_REDIS_URL\"; "
                           "{ redis-cli -u \"$u\" --scan --pattern '%s:%s:l:*'; "
                           "for k in $(redis-cli -u \"$u\" --scan --pattern '%s:run:b:*'); do "
                           "redis-cli -u \"$u\" hkeys \"$k\" | grep ':%s$' | sed \"s|^|$k |\"; "
                           "done; } | sort",
                           prefix, det, prefix, det);
    struct st_rpipe *p = st_rpipe_new(getenv("SANDTRAIL_REDIS_URL"), NULL, err, sizeof(err));
    ck_assert_msg(p != NULL, "%s", err);
    struct st_buf out;
    st_buf_init(&out);
    st_buf_adds(&out, "");
    for (char *k = strtok(keys, "\n"); k; k = strtok(NULL, "\n")) {
        char *field = strchr(k, ' ');
        if (field)
            *field++ = '\0';
        const char *get[] = {"HGET", k, field}, *zcard[] = {"GET", k};
        members_reply = -1;
        st_rpipe_cmd(p, on_members, field ? NULL : (void *)1, field ? 3 : 2,
                     field ? get : zcard);
        ck_assert_msg(st_rpipe_exec(p, err, sizeof(err)) == 0, "%s: %s", k, err);
        if (members_reply >= 0)
            st_buf_printf(&out, "%ld\n", members_reply);
    }
    st_rpipe_destroy(p);
    free(keys);
    return out.data;
}

/* The end of --drain leaves Redis what a load makes the memory it had:
 * the seven events in one run with no checkpoint before the last (a long
 * state.checkpoint_ms), whose commit lets x-5 trim x-1..x-4. Memory then
 * holds the three newest members per window. The run's string holds all
 * seven and carries that trim (runblob.h's trailer: session 18, no second
 * write of every run at the end), so a load must apply it: a second drain
 * brings a late event of the run (x-8, between x-4 and x-5: late, so it
 * trims nothing), and the run it writes back holds x-5..x-8, four, as a
 * run kept in memory throughout would -- not eight, which a load that
 * ignored the trim would give (and with it another window to the late
 * event). With state.write_final_trims=1 (the second pass) the end writes
 * that trim instead: the string holds x-5..x-7, three, and the second
 * drain gives the same four. */
START_TEST(exactly_once_drain_end_writes_its_last_trims)
{
    struct world w;
    char first[128], rest[128], late[128], name[16];
    const char *opts = _i ? SEVEN_OPTS " -X state.checkpoint_ms=3600000 -X state.write_final_trims=1"
                          : SEVEN_OPTS " -X state.checkpoint_ms=3600000";
    snprintf(first, sizeof(first), "/tmp/st_eo_%d_u.ndjson", (int)getpid());
    snprintf(rest, sizeof(rest), "/tmp/st_eo_%d_v.ndjson", (int)getpid());
    snprintf(late, sizeof(late), "/tmp/st_eo_%d_l.ndjson", (int)getpid());
    snprintf(name, sizeof(name), "trims7%d", _i);
    world_init(&w, name);
    seven_events(first, rest);
    post(&w, first);
    post(&w, rest);
    ck_assert_int_eq(run(&w, w.name, w.name,
                         ANALYZER " --drain 2>/dev/null%s", opts),
                     0);
    char *out = window_sizes(w.name, "retry_across_paths");
    /* the trim carried, not written; or written */
    ck_assert_str_eq(out, _i ? "3\n" : "7\n");
    free(out);
    FILE *f = fopen(late, "w");
    ck_assert_ptr_nonnull(f);
    request(f, "x-8", 1, 200000, 0, "late.example.net", "/", 200);
    fclose(f);
    post(&w, late);
    ck_assert_int_eq(run(&w, w.name, w.name,
                         ANALYZER " --drain 2>/dev/null%s", opts),
                     0);
    out = window_sizes(w.name, "retry_across_paths");
    ck_assert_str_eq(out, "4\n");
    free(out);
    unlink(first);
    unlink(rest);
    unlink(late);
    world_drop(&w);
}
END_TEST

/* A use of a credential and a write of its value, both before its issue
 * in the same batch: the first time through neither finds the issue in
 * the registry; a redo after a failed transaction must not either. */
START_TEST(exactly_once_redo_does_not_see_later_issues)
{
    struct world clean, w;
    char input[128];
    snprintf(input, sizeof(input), "/tmp/st_eo_%d_iss.ndjson", (int)getpid());
    FILE *f = fopen(input, "w");
    ck_assert_ptr_nonnull(f);
    fputs("{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"i-1\","
          "\"ts\":\"2026-11-29T12:00:01.000Z\",\"source\":{\"kind\":\"broker\","
          "\"name\":\"vault\"},\"task_id\":\"T-I\",\"run_id\":\"r-i\","
          "\"type\":\"token_use\",\"identity\":{\"credential_id\":\"acc-i\"},"
          "\"attrs\":{\"operation\":\"repo:write\",\"audience\":\"github.com\"}}\n"
          "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"i-2\","
          "\"ts\":\"2026-11-29T12:00:02.000Z\",\"source\":{\"kind\":\"sandbox\","
          "\"name\":\"sbx\"},\"task_id\":\"T-I\",\"run_id\":\"r-i\",\"type\":\"commit\","
          "\"attrs\":{\"branch\":\"main\"},\"content\":\"+GITHUB_TOKEN="
          "ghp_Zx3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zQQ7C\\n\"}\n"
          "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"i-3\","
          "\"ts\":\"2026-11-29T12:00:03.000Z\",\"source\":{\"kind\":\"broker\","
          "\"name\":\"vault\"},\"task_id\":\"T-I\",\"run_id\":\"r-i\","
          "\"type\":\"token_issue\",\"identity\":{\"subject\":\"agent\","
          "\"credential_id\":\"acc-i\",\"credential\":"
          "\"ghp_Zx3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zQQ7C\",\"scopes\":[\"repo:read\"],"
          "\"audience\":\"github.com\"}}\n",
          f);
    fclose(f);
    world_init(&clean, "cleaniss");
    world_init(&w, "redoiss");
    snprintf(w.topic, sizeof(w.topic), "%s", clean.topic);
    snprintf(w.dlq, sizeof(w.dlq), "%s", clean.dlq);
    post(&clean, input);
    /* lateness 0: the three are fed in the first batch, the one that fails */
    ck_assert_int_eq(run(&clean, clean.name, clean.name,
                         ANALYZER " --drain 2>/dev/null -X detect.lateness_s=0"),
                     0);
    ck_assert_int_eq(run(&w, w.name, w.name,
                         ANALYZER " --drain 2>/dev/null -X detect.lateness_s=0"
                                  " -X fault.fail_pg_commits=1"),
                     0);
    char *f1 = rows(clean.dsn, "SELECT detector, severity FROM findings ORDER BY 1");
    ck_assert_str_eq(f1, "token_write|high\n");
    free(f1);
    assert_same_tables(&clean, &w);
    unlink(input);
    world_drop(&clean);
    world_drop(&w);
}
END_TEST

/* A catch-up stream: 24 runs, each active a third of the time, one event
 * every 500 ms of event time, so that a 1,000-event batch spans 500 s, more
 * than any window's keep time here (2 x 120 s + 30 s). Denials, allowed
 * and failed requests to a few hosts and paths: denial_burst,
 * retry_across_paths and volume_anomaly fire, episodes open and close. */
static void catch_up(const char *path, unsigned seed, int n)
{
    static const char *hosts[] = {"a.example", "b.example", "c.example", "d.example",
                                  "e.example", "f.example"};
    static const char *paths[] = {"/", "/x", "/y"};
    FILE *f = fopen(path, "w");
    char id[32];
    ck_assert_ptr_nonnull(f);
    srand(seed);
    for (int i = 0; i < n; i++) {
        long t_ms = 500L * i;
        int slot = (int)(t_ms / 200000), run;
        do
            run = rand() % 24;
        while ((slot + run) % 3 != 0);
        int r = rand() % 100;
        snprintf(id, sizeof(id), "g%u-%d", seed, i);
        request(f, id, run, t_ms, r < 25, hosts[rand() % 6], paths[rand() % 3],
                r < 25 ? 403 : r < 35 ? 404 : 200);
    }
    fclose(f);
}

#define CATCH_UP_OPTS                                                                  \
    " -X batch.max_events=1000 -X batch.behind_events=0 -X detect.denial_burst.threshold=4"                     \
    " -X detect.volume_anomaly.window_s=120 -X detect.volume_anomaly.max_requests=25"

/* kill -9 and crashes at several points of a drain (after the Redis
 * write-back with PostgreSQL failing, after the PostgreSQL commit before
 * the Kafka commit, anywhere), over several seeds: events, findings and
 * their evidence equal a clean run's. */
START_TEST(exactly_once_crashes_in_long_batches_equal_clean_run)
{
    for (unsigned seed = 1; seed <= 3; seed++) {
        struct world clean, w;
        char input[128];
        snprintf(input, sizeof(input), "/tmp/st_eo_%d_%u.ndjson", (int)getpid(), seed);
        catch_up(input, seed, 6000);
        world_init(&clean, "cleanlong");
        world_init(&w, "crashlong");
        snprintf(w.topic, sizeof(w.topic), "%s", clean.topic);
        snprintf(w.dlq, sizeof(w.dlq), "%s", clean.dlq);
        post(&clean, input);
        ck_assert_int_eq(run(&clean, clean.name, clean.name,
                             ANALYZER " --drain 2>/dev/null" CATCH_UP_OPTS),
                         0);
        /* after the PostgreSQL commit, before the Kafka commit */
        ck_assert_int_eq(run(&w, w.name, w.name,
                             ANALYZER " --drain 2>/dev/null" CATCH_UP_OPTS
                                      " -X fault.crash_after_pg_commits=2"),
                         3);
        /* the first batch's transaction fails twice after its Redis
         * write-back (as if the process had died there), then a crash
         * after a later commit */
        ck_assert_int_eq(run(&w, w.name, w.name,
                             ANALYZER " --drain 2>/dev/null" CATCH_UP_OPTS
                                      " -X fault.fail_pg_commits=2"
                                      " -X fault.crash_after_pg_commits=%u",
                             1 + seed),
                         3);
        /* anywhere: a kill -9 after a while, failing its first batch once
         * so that it is still at work */
        run(&w, w.name, w.name,
            ANALYZER " --drain 2>/dev/null" CATCH_UP_OPTS " -X fault.fail_pg_commits=1 &"
                     " p=\\$!; sleep 0.%u; kill -9 \\$p; wait \\$p",
            3 + 2 * seed);
        ck_assert_int_eq(
            run(&w, w.name, w.name, ANALYZER " --drain 2>/dev/null" CATCH_UP_OPTS), 0);
        assert_same_tables(&clean, &w);
        char *n = rows(w.dsn, "SELECT (SELECT count(*) FROM events),"
                              " (SELECT count(DISTINCT detector) FROM findings)");
        ck_assert_str_eq(n, "6000|3\n");
        free(n);
        unlink(input);
        world_drop(&clean);
        world_drop(&w);
    }
}
END_TEST

/* One unlabelled metric of the analyzer listening on port; -1 when absent. */
static long metric(int port, const char *name)
{
    char cmd[128], key[128];
    snprintf(cmd, sizeof(cmd), "curl -s http://127.0.0.1:%d/metrics", port);
    snprintf(key, sizeof(key), "\n%s ", name);
    char *text = world_sh(cmd);
    const char *at = text ? strstr(text, key) : NULL;
    long v = at ? strtol(at + strlen(key), NULL, 10) : -1;
    free(text);
    return v;
}

/* PostgreSQL blocks the first batch's transaction (a lock on events): the
 * analyzer goes on to detect the next batch meanwhile (the store stage has
 * its own thread and connection) but stores and commits nothing; killed
 * with -9 during the lock and run again, it leaves what a clean run
 * leaves, so no offset was committed past the batch not stored. */
START_TEST(exactly_once_store_overlaps_detection)
{
    struct world clean, w;
    char first[128], rest[128], log[128], pidfile[128];
    snprintf(first, sizeof(first), "/tmp/st_eo_%d_o1.ndjson", (int)getpid());
    snprintf(rest, sizeof(rest), "/tmp/st_eo_%d_o2.ndjson", (int)getpid());
    snprintf(log, sizeof(log), "/tmp/st_eo_%d_o.log", (int)getpid());
    snprintf(pidfile, sizeof(pidfile), "/tmp/st_eo_%d_o.pid", (int)getpid());
    FILE *f = fopen(first, "w");
    ck_assert_ptr_nonnull(f);
    request(f, "o-1", 99, 0, 0, "a.example", "/", 200);
    fclose(f);
    catch_up(rest, 7, 3000);
    world_init(&clean, "cleanovl");
    world_init(&w, "overlap");
    snprintf(w.topic, sizeof(w.topic), "%s", clean.topic);
    snprintf(w.dlq, sizeof(w.dlq), "%s", clean.dlq);
    /* w has its schema and the first event; the 3,000 others wait */
    post(&clean, first);
    ck_assert_int_eq(run(&w, w.name, w.name, ANALYZER " --drain 2>/dev/null" CATCH_UP_OPTS),
                     0);
    post(&clean, rest);
    ck_assert_int_eq(run(&clean, clean.name, clean.name,
                         ANALYZER " --drain 2>/dev/null" CATCH_UP_OPTS),
                     0);

    int port = world_free_port();
    pid_t locker = lock_events(&w, 30000);
    run(&w, w.name, w.name,
        ANALYZER " --drain 2>%s" CATCH_UP_OPTS " -X metrics.listen=127.0.0.1:%d &"
                 " echo \\$! >%s",
        log, port, pidfile);
    long detected = -1, stored = -1, pg = -1;
    for (int i = 0; i < 100 && detected < 2; i++) {
        usleep(200000);
        detected = metric(port, "sandtrail_analyzer_redis_seconds_count");
        stored = metric(port, "sandtrail_analyzer_batches_total");
        pg = metric(port, "sandtrail_analyzer_pg_seconds_count");
    }
    int pid = world_read_int(pidfile);
    ck_assert_int_gt(pid, 0);
    kill(pid, SIGKILL);
    kill(locker, SIGKILL);
    waitpid(locker, NULL, 0);
    ck_assert_msg(detected >= 2 && stored == 0 && pg == 0,
                  "with the first batch's transaction blocked: %ld batches detected, "
                  "%ld stored, %ld transactions ended (want >= 2, 0, 0)",
                  detected, stored, pg);
    char *n = rows(w.dsn, "SELECT count(*) FROM events");
    ck_assert_str_eq(n, "1\n");
    free(n);
    ck_assert_int_eq(run(&w, w.name, w.name, ANALYZER " --drain 2>/dev/null" CATCH_UP_OPTS),
                     0);
    assert_same_tables(&clean, &w);
    n = rows(w.dsn, "SELECT count(*) FROM events");
    ck_assert_str_eq(n, "3001\n");
    free(n);
    unlink(first);
    unlink(rest);
    unlink(log);
    unlink(pidfile);
    world_drop(&clean);
    world_drop(&w);
}
END_TEST

int main(void)
{
    if (world_setup())
        return EXIT_FAILURE;
    Suite *s = suite_create("exactly_once");
    TCase *tc = tcase_create("exactly_once");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, exactly_once_transient_pg_error_keeps_the_finding);
    tcase_add_test(tc, exactly_once_kill_during_retry_keeps_the_finding);
    tcase_add_test(tc, exactly_once_redo_does_not_see_later_issues);
    tcase_add_test(tc, exactly_once_crashes_in_long_batches_equal_clean_run);
    tcase_add_test(tc, exactly_once_store_overlaps_detection);
    suite_add_tcase(s, tc);
    TCase *stop = tcase_create("stop"); /* CK_RUN_CASE=stop */
    tcase_set_timeout(stop, 240);
    tcase_add_test(stop, exactly_once_stop_during_retry_commits_nothing);
    tcase_add_loop_test(stop, exactly_once_drain_end_writes_its_last_trims, 0, 2);
    suite_add_tcase(s, stop);
    return world_run(s);
}
