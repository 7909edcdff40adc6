/* test_state.c: detector state in the analyzer's memory, Redis its
 * write-behind checkpoint (issue 11, items 1 and 4), against the real
 * Kafka, PostgreSQL and Redis.
 *
 * Each case compares with a clean world that drains the same events in one
 * uninterrupted run: the findings (id, detector, severity, evidence count)
 * must be equal. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#include "kafka.h"
#include "timeutil.h"
#include "world.h"

/* A shell command printing how many runs hold state in the run buckets
 * under the prefix given as the printf argument that follows (detect.h:
 * a field is "<run>:<detector>"); ARGS are redis-cli's connection
 * arguments. */
#define RUNS_IN_BUCKETS(ARGS)                                                                  \
    "for k in $(redis-cli " ARGS " --scan --pattern '%s:run:b:*'); do "                         \
    "redis-cli " ARGS " hkeys \"$k\"; done | sed 's/:[^:]*$//' | sort -u | wc -l"

/* The runs of partition 0's run index, one a line, sorted: its log's
 * (records "<score> <run>") and the sorted set's older releases wrote
 * (two %s: the world's name) */
#define INDEX_RUNS(ARGS)                                                                       \
    "{ redis-cli " ARGS " zrange '%s:runs:0' 0 -1; "                                          \
    "redis-cli " ARGS " --raw get '%s:runs:0:log' | cut -d' ' -f2-; } | grep -v '^$' | sort -u"

#define ANALYZER BIN "/analyzer/sandtrail-analyzer"
#define FINDINGS "SELECT finding_id, detector, severity, event_count FROM findings ORDER BY 1"

static rd_kafka_t *producer(const struct world *w)
{
    return world_topic_producer(w->topic, 1);
}

/* Produces n proxy requests of task T-S, run run, one every step_s seconds
 * of event time from t_ms, ids prefix-0.. (first, first + n). */
static void produce_requests(const struct world *w, const char *run, const char *prefix,
                             int first, int n, int64_t t_ms, int step_s,
                             const char *decision)
{
    rd_kafka_t *rk = producer(w);
    char line[1024], ts[40];
    for (int i = first; i < first + n; i++) {
        int64_t at = t_ms + (int64_t)i * step_s * 1000;
        st_time_format(at * 1000, ts, sizeof(ts));
        snprintf(line, sizeof(line),
                 "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"%s-%d\",\"ts\":\"%s\","
                 "\"source\":{\"kind\":\"proxy\",\"name\":\"squid\",\"platform\":\"squid\"},"
                 "\"task_id\":\"T-S\",\"run_id\":\"%s\",\"type\":\"request\","
                 "\"decision\":\"%s\",\"attrs\":{\"method\":\"GET\",\"host\":\"h%d.example\","
                 "\"port\":443,\"status\":403,\"bytes_out\":100}}",
                 prefix, i, ts, run, decision, i % 7);
        ck_assert_int_eq(rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(w->topic),
                                           RD_KAFKA_V_PARTITION(0),
                                           RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                           RD_KAFKA_V_VALUE(line, strlen(line)),
                                           RD_KAFKA_V_TIMESTAMP(at), RD_KAFKA_V_END),
                         0);
    }
    ck_assert_int_eq(rd_kafka_flush(rk, 30000), 0);
    rd_kafka_destroy(rk);
}

/* Produces n denied proxy requests (ids <run>-first..) for each of the
 * runs <prefix>0 .. <prefix>nruns-1 of task T-N, one every 3 s of event
 * time from t_ms, all to one destination, on partition. */
static void produce_runs_on(const struct world *w, const char *prefix, int nruns,
                            int first, int n, int64_t t_ms, int32_t partition)
{
    rd_kafka_t *rk = producer(w);
    char line[1024], ts[40];
    for (int r = 0; r < nruns; r++) {
        for (int i = first; i < first + n; i++) {
            int64_t at = t_ms + (int64_t)i * 3000;
            st_time_format(at * 1000, ts, sizeof(ts));
            snprintf(line, sizeof(line),
                     "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"%s%d-%d\","
                     "\"ts\":\"%s\",\"source\":{\"kind\":\"proxy\",\"name\":\"squid\","
                     "\"platform\":\"squid\"},\"task_id\":\"T-N\",\"run_id\":\"%s%d\","
                     "\"type\":\"request\",\"decision\":\"deny\",\"attrs\":{"
                     "\"method\":\"GET\",\"host\":\"h.example\",\"port\":443,"
                     "\"status\":403,\"bytes_out\":100}}",
                     prefix, r, i, ts, prefix, r);
            ck_assert_int_eq(rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(w->topic),
                                               RD_KAFKA_V_PARTITION(partition),
                                               RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                               RD_KAFKA_V_VALUE(line, strlen(line)),
                                               RD_KAFKA_V_TIMESTAMP(at), RD_KAFKA_V_END),
                             0);
        }
    }
    ck_assert_int_eq(rd_kafka_flush(rk, 30000), 0);
    rd_kafka_destroy(rk);
}

static void produce_runs(const struct world *w, const char *prefix, int nruns, int first,
                         int n, int64_t t_ms)
{
    produce_runs_on(w, prefix, nruns, first, n, t_ms, 0);
}

/* Gives the world's topic n partitions in all (Kafka's admin API, as
 * kafka-topics.sh --alter does). */
static void grow_topic(const struct world *w, int n)
{
    rd_kafka_t *rk = producer(w);
    char err[512];
    rd_kafka_NewPartitions_t *np = rd_kafka_NewPartitions_new(w->topic, (size_t)n, err,
                                                              sizeof(err));
    ck_assert_msg(np, "%s", err);
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_CreatePartitions(rk, &np, 1, NULL, q);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 30000);
    ck_assert_ptr_nonnull(ev);
    const rd_kafka_CreatePartitions_result_t *res =
        rd_kafka_event_CreatePartitions_result(ev);
    ck_assert_ptr_nonnull(res);
    size_t cnt;
    const rd_kafka_topic_result_t **tr = rd_kafka_CreatePartitions_result_topics(res, &cnt);
    ck_assert_int_eq(cnt, 1);
    ck_assert_msg(rd_kafka_topic_result_error(tr[0]) == RD_KAFKA_RESP_ERR_NO_ERROR, "%s",
                  rd_kafka_topic_result_error_string(tr[0]));
    rd_kafka_event_destroy(ev);
    rd_kafka_queue_destroy(q);
    rd_kafka_NewPartitions_destroy(np);
    /* until the brokers' metadata says so (a producer asked sooner would
     * not know the new partition) */
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, w->topic, NULL);
    int seen = 0;
    for (int i = 0; i < 300 && seen != n; i++) {
        const struct rd_kafka_metadata *md;
        if (!rd_kafka_metadata(rk, 0, rkt, &md, 5000)) {
            seen = md->topic_cnt == 1 ? md->topics[0].partition_cnt : 0;
            rd_kafka_metadata_destroy(md);
        }
        if (seen != n)
            usleep(100000);
    }
    ck_assert_int_eq(seen, n);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_destroy(rk);
}

/* Drains the world's topic with a new analyzer process; its log in log. */
static void drain(const struct world *w, const char *opts, const char *log)
{
    ck_assert_int_eq(run(w, w->name, w->name, "timeout 120 " ANALYZER " --drain %s 2>%s",
                         opts, log),
                     0);
}

/* The number after "name=" in the analyzer's final log line. */
static long logged(const char *log, const char *name)
{
    char *text = world_slurp(log), key[64];
    snprintf(key, sizeof(key), " %s=", name);
    const char *p = strstr(text, key);
    ck_assert_msg(p, "%s not in %s", name, text);
    long v = atol(p + strlen(key));
    free(text);
    return v;
}

static void assert_same_findings(const struct world *a, const struct world *b)
{
    char *ra = rows(a->dsn, FINDINGS), *rb = rows(b->dsn, FINDINGS);
    ck_assert_msg(strlen(ra) > 0, "no finding at all");
    ck_assert_str_eq(ra, rb);
    free(ra);
    free(rb);
}

/* Denial bursts found. */
#define BURSTS "SELECT count(*) FROM findings WHERE detector = 'denial_burst'"
/* The events of each burst. */
#define BURST_EVENTS "SELECT event_count FROM findings WHERE detector = 'denial_burst'"

/* The rows of sql in dsn are want. */
static void assert_rows(const char *dsn, const char *sql, const char *want)
{
    char *r = rows(dsn, sql);
    ck_assert_str_eq(r, want);
    free(r);
}

/* sql gives the same rows in a and b. */
static void assert_same_rows(const struct world *a, const struct world *b, const char *sql)
{
    char *ra = rows(a->dsn, sql), *rb = rows(b->dsn, sql);
    ck_assert_str_eq(ra, rb);
    free(ra);
    free(rb);
}

/* Most tests: a world w and a clean one to compare it with (tag and
 * tag"clean"), the analyzer's log in /tmp/<w's name>.log. */
static void pair_init(struct world *w, struct world *clean, char *log, size_t logsz,
                      const char *tag)
{
    char ctag[64];
    snprintf(ctag, sizeof(ctag), "%sclean", tag);
    world_init(w, tag);
    world_init(clean, ctag);
    snprintf(log, logsz, "/tmp/%s.log", w->name);
}

static void pair_drop(struct world *w, struct world *clean, const char *log)
{
    unlink(log);
    world_drop(w);
    world_drop(clean);
}
/* A denial burst half seen by one analyzer process, half by the next: the
 * first half reaches the second only through Redis (its offsets are
 * committed, so Kafka does not give it again), and the burst is found as
 * in one run. */
START_TEST(state_survives_a_restart_through_redis)
{
    struct world w, clean;
    char log[128];
    pair_init(&w, &clean, log, sizeof(log), "restart");
    int64_t t = st_time_now_us() / 1000 - 3600000;

    produce_requests(&w, "run-r", "d", 0, 6, t, 3, "deny");
    drain(&w, "", log);
    assert_rows(w.dsn, BURSTS, "0\n"); /* 6 denials: no burst yet */
    produce_requests(&w, "run-r", "d", 6, 6, t, 3, "deny");
    drain(&w, "", log);
    ck_assert_int_eq(logged(log, "events"), 6); /* only the second half read */
    ck_assert_int_gt(logged(log, "state_loads"), 0);

    produce_requests(&clean, "run-r", "d", 0, 12, t, 3, "deny");
    drain(&clean, "", log);
    assert_rows(w.dsn, BURST_EVENTS, "12\n");
    assert_same_findings(&w, &clean);
    pair_drop(&w, &clean, log);
}
END_TEST

/* With state.evict_s=0 every run leaves memory after each batch: its next
 * events read it back from Redis and extend the same windows and episodes.
 * The runs-in-memory gauge is then 0 at the end, not so by default. */
START_TEST(state_evicted_run_extends_its_episode)
{
    struct world w, clean;
    char log[128];
    pair_init(&w, &clean, log, sizeof(log), "evict");
    int64_t t = st_time_now_us() / 1000 - 3600000;
    const char *opts = "-X detect.lateness_s=0 -X batch.max_events=2 -X batch.behind_events=0";

    produce_requests(&w, "run-e", "d", 0, 14, t, 3, "deny");
    produce_requests(&clean, "run-e", "d", 0, 14, t, 3, "deny");
    char evict[256];
    snprintf(evict, sizeof(evict), "%s -X state.evict_s=0", opts);
    drain(&w, evict, log);
    long batches = logged(log, "batches");
    ck_assert_int_ge(batches, 4); /* several batches, so evictions between them */
    ck_assert_int_gt(logged(log, "state_evictions"), 0);
    ck_assert_int_gt(logged(log, "state_loads"), 4); /* runs read back */
    ck_assert_int_eq(logged(log, "state_runs"), 0);

    drain(&clean, opts, log);
    ck_assert_int_eq(logged(log, "state_evictions"), 0);
    ck_assert_int_gt(logged(log, "state_runs"), 0);
    assert_rows(w.dsn, BURSTS, "1\n");
    assert_same_findings(&w, &clean);
    pair_drop(&w, &clean, log);
}
END_TEST

/* The hot path sends no Redis command per event: for many events of one
 * known run, a bounded number of commands per batch whatever its size
 * (per window: the trim, one ZADD, EXPIRE, the changed episodes or sums
 * and their EXPIRE -- about 12 here), and the run's state is read once.
 * Before, each event cost two to three commands. */
START_TEST(state_redis_commands_do_not_grow_with_events)
{
    struct world w;
    char log[128];
    world_init(&w, "commands");
    snprintf(log, sizeof(log), "/tmp/%s.log", w.name);
    int64_t t = st_time_now_us() / 1000 - 7200000;

    produce_requests(&w, "run-c", "r", 0, 3000, t, 1, "allow");
    drain(&w, "-X detect.lateness_s=0 -X batch.max_events=500 -X batch.behind_events=0", log);
    long events = logged(log, "events"), batches = logged(log, "batches");
    long cmds = logged(log, "redis_commands");
    ck_assert_int_eq(events, 3000);
    ck_assert_msg(cmds <= 20 * batches + 10 && cmds < events / 10,
                  "%ld Redis commands for %ld events in %ld batches", cmds, events, batches);
    /* the seven destinations' allow:squid, once each; volume_anomaly's and
     * retry_across_paths' run is new (not in the run index): no read */
    ck_assert_int_eq(logged(log, "state_loads"), 7);
    unlink(log);
    world_drop(&w);
}
END_TEST

/* The run index (runidx.h): a run no checkpoint ever wrote costs no
 * Redis read, a run whose state Redis holds is read after a restart, and
 * no run has state in Redis without its index entry. Twenty runs get six
 * denials from a first analyzer process, then six more (a burst of twelve
 * across the restart) from a second one, beside twenty new runs; the
 * findings equal one clean run's. The only loads of the first process are
 * the destination's (one host: 1); the second reads exactly the run
 * states the first held (its state_runs), and the destination. */
START_TEST(state_new_runs_cost_no_load)
{
    struct world w, clean;
    char log[128];
    pair_init(&w, &clean, log, sizeof(log), "runidx");
    int64_t t = st_time_now_us() / 1000 - 3600000;

    produce_runs(&w, "old", 20, 0, 6, t);
    drain(&w, "", log);
    ck_assert_int_eq(logged(log, "events"), 120);
    ck_assert_int_eq(logged(log, "state_loads"), 1); /* the destination */
    long runs = logged(log, "state_runs");
    ck_assert_int_ge(runs, 20); /* denial_burst's, at least */

    /* every run whose state Redis holds is in the index of partition 0 */
    char *missing = world_shf(
        "u=\"$SANDTRAIL_REDIS_URL\"; idx=$(" INDEX_RUNS("-u \"$u\"") "); "
        "redis-cli -u \"$u\" --scan --pattern '%s:*:[swh]:*' | while read -r k; do "
        "m=$(echo \"$k\" | sed 's/^[^:]*:[^:]*:[swh]://'); "
        "echo \"$idx\" | grep -qxF -- \"$m\" || echo \"$k\"; done; "
        "echo \"$idx\" | grep -c .",
        w.name, w.name, w.name);
    ck_assert_str_eq(missing, "20\n");
    free(missing);
    /* a prefix with no state before it: the index is complete at once */
    char *marker = world_shf(
        "redis-cli -u \"$SANDTRAIL_REDIS_URL\" get '%s:runs:complete_since'", w.name);
    ck_assert_str_eq(marker, "0\n");
    free(marker);
    /* recorded beside it: the topic's partition count, Redis's run_id */
    char *meta = world_shf("u=\"$SANDTRAIL_REDIS_URL\"; "
                           "redis-cli -u \"$u\" get '%s:runs:partitions'; "
                           "[ \"$(redis-cli -u \"$u\" get '%s:runs:server')\" = "
                           "\"$(redis-cli -u \"$u\" info server | sed -n 's/^run_id://p' | "
                           "tr -d '\\r')\" ] && echo same",
                           w.name, w.name);
    ck_assert_str_eq(meta, "1\nsame\n");
    free(meta);

    produce_runs(&w, "old", 20, 6, 6, t);
    produce_runs(&w, "new", 20, 0, 3, t);
    drain(&w, "", log);
    ck_assert_int_eq(logged(log, "events"), 180);
    /* the checks found nothing changed: still trusted, the new runs cost
     * no load */
    ck_assert_int_eq(logged(log, "state_loads"), runs + 1);
    char *text = world_slurp(log);
    ck_assert_msg(!strstr(text, "not trusted"), "%s", text);
    free(text);

    produce_runs(&clean, "old", 20, 0, 12, t);
    produce_runs(&clean, "new", 20, 0, 3, t);
    drain(&clean, "", log);
    ck_assert_int_eq(logged(log, "state_loads"), 1);
    assert_rows(w.dsn, BURSTS, "20\n");
    assert_same_findings(&w, &clean);
    pair_drop(&w, &clean, log);
}
END_TEST

/* An upgrade from a release without the run index: Redis holds run state
 * that no index entry names. Simulated by a first analyzer process whose
 * index keys and marker are then deleted; the second process finds state
 * under the prefix, sets the marker to now, and reads every run the index
 * does not hold until state.ttl_s has passed: the bursts that span the
 * two processes are found as in one clean run (without the marker they
 * started empty: six denials, no burst). */
START_TEST(state_upgrade_reads_state_written_before_the_index)
{
    struct world w, clean;
    char log[128];
    pair_init(&w, &clean, log, sizeof(log), "upgrade");
    int64_t t = st_time_now_us() / 1000 - 3600000;

    produce_runs(&w, "old", 20, 0, 6, t);
    drain(&w, "", log);
    long runs = logged(log, "state_runs");
    ck_assert_int_ge(runs, 20);
    char *out = world_shf("u=\"$SANDTRAIL_REDIS_URL\"; "
                          "redis-cli -u \"$u\" --scan --pattern '%s:runs:*' | "
                          "while read -r k; do "
                          "redis-cli -u \"$u\" del \"$k\" >/dev/null; done; "
                          "redis-cli -u \"$u\" --scan --pattern '%s:runs:*' | wc -l; "
                          RUNS_IN_BUCKETS("-u \"$u\""),
                          w.name, w.name, w.name);
    ck_assert_str_eq(out, "0\n20\n"); /* no index, no marker; the state stays */
    free(out);

    produce_runs(&w, "old", 20, 6, 6, t);
    produce_runs(&w, "new", 20, 0, 3, t);
    drain(&w, "", log);
    ck_assert_int_eq(logged(log, "events"), 180);
    /* every old run read back (and, the index not yet trusted, the new
     * ones tried too), and the destination */
    ck_assert_int_ge(logged(log, "state_loads"), runs + 1);
    char *text = world_slurp(log);
    ck_assert_msg(strstr(text, "run index: no marker") && strstr(text, "run state found") &&
                      strstr(text, "run index: not trusted"),
                  "%s", text);
    free(text);
    char *marker = world_shf(
        "redis-cli -u \"$SANDTRAIL_REDIS_URL\" get '%s:runs:complete_since'", w.name);
    ck_assert_int_gt(atol(marker), 0); /* the upgrade's time */
    free(marker);

    produce_runs(&clean, "old", 20, 0, 12, t);
    produce_runs(&clean, "new", 20, 0, 3, t);
    drain(&clean, "", log);
    assert_rows(w.dsn, BURSTS, "20\n");
    assert_same_findings(&w, &clean);
    pair_drop(&w, &clean, log);
}
END_TEST

/* What the run index cannot see by itself: the events topic is given a
 * second partition, and the twenty runs' next events arrive there, where
 * no index names them (a task's events move when partitions are added).
 * The second process reads the partition count the first recorded beside
 * the marker (1), finds 2, sets the marker to now and loads every run the
 * index does not hold for state.ttl_s: the bursts that span the move are
 * found as in one clean run on one partition. Without the check the moved
 * runs started empty (six denials: no burst). */
START_TEST(state_partitions_added_reads_runs_that_moved)
{
    struct world w, clean;
    char log[128];
    pair_init(&w, &clean, log, sizeof(log), "grown");
    int64_t t = st_time_now_us() / 1000 - 3600000;

    /* the first process's static membership gone before the second joins:
     * a rebalance computed on two partitions, not the one it had */
    const char *fresh = "-X kafka.session.timeout.ms=6000";
    produce_runs(&w, "old", 20, 0, 6, t);
    drain(&w, fresh, log);
    long runs = logged(log, "state_runs");
    ck_assert_int_ge(runs, 20);
    char *out = world_shf("redis-cli -u \"$SANDTRAIL_REDIS_URL\" get '%s:runs:partitions'",
                          w.name);
    ck_assert_str_eq(out, "1\n");
    free(out);

    grow_topic(&w, 2);
    produce_runs_on(&w, "old", 20, 6, 6, t, 1);
    produce_runs_on(&w, "new", 20, 0, 3, t, 1);
    sleep(7);
    drain(&w, fresh, log);
    ck_assert_int_eq(logged(log, "events"), 180);
    ck_assert_int_ge(logged(log, "state_loads"), runs);
    char *text = world_slurp(log);
    ck_assert_msg(strstr(text, "partition count changed"), "%s", text);
    free(text);
    out = world_shf("u=\"$SANDTRAIL_REDIS_URL\"; "
                    "redis-cli -u \"$u\" get '%s:runs:partitions'; "
                    "redis-cli -u \"$u\" get '%s:runs:complete_since'",
                    w.name, w.name);
    ck_assert_msg(strncmp(out, "2\n", 2) == 0 && atol(out + 2) > 0, "%s", out);
    free(out);
    /* and when runs may have moved from: the sweep keeps those scored
     * before it (runidx.c) */
    out = world_shf("redis-cli -u \"$SANDTRAIL_REDIS_URL\" get '%s:runs:moved_since'", w.name);
    ck_assert_msg(atol(out) > t / 1000, "moved_since %s", out);
    free(out);

    produce_runs(&clean, "old", 20, 0, 12, t);
    produce_runs(&clean, "new", 20, 0, 3, t);
    drain(&clean, "", log);
    assert_rows(w.dsn, BURSTS, "20\n");
    assert_same_findings(&w, &clean);
    pair_drop(&w, &clean, log);
}
END_TEST

/* A Redis of the test's own (append-only, fsync always), so that it can be
 * restarted without touching the shared one. */
#define START_REDIS                                                                       \
    "mkdir -p %s && redis-server --bind 127.0.0.1 --port %d --dir %s"                     \
    " --daemonize yes --appendonly yes --appendfsync always --save ''"                    \
    " --logfile %s/log --pidfile %s/pid >/dev/null && for i in $(seq 1 100); do"           \
    " redis-cli -p %d ping 2>/dev/null | grep -q PONG && exit 0; sleep 0.1; done; exit 1"

/* A Redis that lost acknowledged writes: it is restarted having lost the
 * index of partition 0 (deleted before the restart) while the twenty runs'
 * state remains -- what a restored backup or a crash inside its
 * appendfsync second can leave when the index's memory in a running
 * analyzer wrote state without its entry. The next process finds Redis's
 * run_id changed from the one recorded beside the marker, sets the marker
 * to now and loads every run the index does not hold: the bursts are found
 * as in one clean run. Without the check they started empty. */
START_TEST(state_redis_restart_reads_runs_its_index_lost)
{
    struct world w, clean;
    char log[128], dir[128], cmd[1024], opts[96];
    pair_init(&w, &clean, log, sizeof(log), "lost");
    snprintf(dir, sizeof(dir), "/tmp/%s_redis", w.name);
    int port = world_free_port();
    snprintf(cmd, sizeof(cmd), START_REDIS, dir, port, dir, dir, dir, port);
    ck_assert_msg(system(cmd) == 0, "the test's Redis did not start");
    snprintf(opts, sizeof(opts), "-X redis.url=redis://127.0.0.1:%d/0", port);
    int64_t t = st_time_now_us() / 1000 - 3600000;

    produce_runs(&w, "old", 20, 0, 6, t);
    drain(&w, opts, log);
    long runs = logged(log, "state_runs");
    ck_assert_int_ge(runs, 20);
    char *before = world_shf("redis-cli -p %d get '%s:runs:server'", port, w.name);
    ck_assert_int_eq(strlen(before), 41); /* run_id and newline */
    char *out = world_shf("redis-cli -p %d del '%s:runs:0' '%s:runs:0:log' >/dev/null; "
                          "redis-cli -p %d shutdown >/dev/null 2>&1; sleep 0.5; "
                          START_REDIS,
                          port, w.name, w.name, port, dir, port, dir, dir, dir, port);
    free(out);
    out = world_shf("p=%d; " RUNS_IN_BUCKETS("-p $p") "; "
                    "redis-cli -p %d exists '%s:runs:0' '%s:runs:0:log'",
                    port, w.name, port, w.name, w.name);
    ck_assert_str_eq(out, "20\n0\n"); /* the state stays, its index is gone */
    free(out);

    produce_runs(&w, "old", 20, 6, 6, t);
    produce_runs(&w, "new", 20, 0, 3, t);
    drain(&w, opts, log);
    ck_assert_int_eq(logged(log, "events"), 180);
    ck_assert_int_ge(logged(log, "state_loads"), runs);
    char *text = world_slurp(log);
    ck_assert_msg(strstr(text, "Redis restarted"), "%s", text);
    free(text);
    char *after = world_shf("redis-cli -p %d get '%s:runs:server'", port, w.name);
    ck_assert_str_ne(before, after); /* the new run_id is recorded */
    free(before);
    free(after);

    produce_runs(&clean, "old", 20, 0, 12, t);
    produce_runs(&clean, "new", 20, 0, 3, t);
    drain(&clean, "", log);
    assert_rows(w.dsn, BURSTS, "20\n");
    assert_same_findings(&w, &clean);
    snprintf(cmd, sizeof(cmd), "redis-cli -p %d shutdown nosave >/dev/null 2>&1; rm -rf %s",
             port, dir);
    ck_assert_int_eq(system(cmd), 0);
    pair_drop(&w, &clean, log);
}
END_TEST

/* Waits until the world's events table holds n rows (an analyzer started
 * in the background may not have made the table yet: a loaded machine saw
 * the count asked first). */
static void wait_events(const struct world *w, int n)
{
    char want[24], *out = NULL;
    snprintf(want, sizeof(want), "%d\n", n);
    for (int i = 0; i < 600; i++) {
        free(out);
        out = rows(w->dsn, "SELECT to_regclass('events') IS NOT NULL");
        if (strcmp(out, "t\n")) {
            usleep(100000);
            continue;
        }
        free(out);
        out = rows(w->dsn, "SELECT count(*) FROM events");
        if (!strcmp(out, want))
            break;
        usleep(100000);
    }
    ck_assert_str_eq(out, want);
    free(out);
    sleep(1); /* the batch's checkpoint, after its rows */
}

/* The same loss while an analyzer runs: it holds the twenty runs in
 * memory, believing their index entries written, when Redis comes back
 * without them (the index deleted, then a restart). Its first batch after
 * that is checkpointed on the belief (state with no entry); at the next
 * one it finds Redis's run_id changed, reads the index again -- so the
 * runs it writes get their entries back -- and moves the marker, once at
 * once and once more after that checkpoint: a second process loads the
 * runs and finds the bursts of one clean run. */
START_TEST(state_redis_restart_midstream_rewrites_the_index)
{
    struct world w, clean;
    char log[128], log2[160], dir[128], cmd[1024], opts[96];
    pair_init(&w, &clean, log, sizeof(log), "midlost");
    snprintf(log2, sizeof(log2), "/tmp/%s.2.log", w.name);
    snprintf(dir, sizeof(dir), "/tmp/%s_redis", w.name);
    int port = world_free_port();
    snprintf(cmd, sizeof(cmd), START_REDIS, dir, port, dir, dir, dir, port);
    ck_assert_msg(system(cmd) == 0, "the test's Redis did not start");
    snprintf(opts, sizeof(opts), "-X redis.url=redis://127.0.0.1:%d/0", port);
    int64_t t = st_time_now_us() / 1000 - 3600000;

    produce_runs(&w, "old", 20, 0, 6, t);
    run(&w, w.name, w.name,
        "timeout 300 " ANALYZER " %s -X detect.lateness_s=0 2>%s & echo \\$! > %s.pid",
        opts, log, log);
    world_wait_table(&w, "events", 60);
    wait_events(&w, 120);
    /* every run's first checkpoint, its entry included, is in Redis (a
     * later one would write the entries again) */
    char *out = NULL;
    for (int i = 0; i < 300; i++) {
        free(out);
        out = world_shf("p=%d; " INDEX_RUNS("-p $p") " | wc -l; " RUNS_IN_BUCKETS("-p $p"),
                        port, w.name, w.name, w.name);
        if (!strcmp(out, "20\n20\n"))
            break;
        usleep(100000);
    }
    ck_assert_str_eq(out, "20\n20\n");
    free(out);
    sleep(1);
    int64_t restart_s = st_time_now_us() / 1000000;
    out = world_shf("redis-cli -p %d del '%s:runs:0' '%s:runs:0:log' >/dev/null; "
                    "redis-cli -p %d shutdown >/dev/null 2>&1; sleep 0.5; " START_REDIS,
                    port, w.name, w.name, port, dir, port, dir, dir, dir, port);
    free(out);
    out = world_shf("redis-cli -p %d exists '%s:runs:0' '%s:runs:0:log'", port, w.name,
                    w.name);
    ck_assert_str_eq(out, "0\n");
    free(out);
    /* nine denials in all before the stop, one short of a burst: no key
     * is created (no EXPIRE, whose entry would hide the loss) */
    produce_runs(&w, "old", 20, 6, 2, t);
    wait_events(&w, 160);
    produce_runs(&w, "old", 20, 8, 1, t);
    wait_events(&w, 180);
    snprintf(cmd, sizeof(cmd),
             "pid=$(cat %s.pid); kill -TERM $pid; for i in $(seq 1 100); do "
             "kill -0 $pid 2>/dev/null || exit 0; sleep 0.1; done; exit 1",
             log);
    ck_assert_msg(system(cmd) == 0, "the analyzer did not stop");
    char *text = world_slurp(log);
    ck_assert_msg(strstr(text, "Redis restarted"), "%s", text);
    free(text);
    /* the runs it held are indexed again; the marker moved past the restart */
    out = world_shf("p=%d; " INDEX_RUNS("-p $p") " | wc -l; "
                    "redis-cli -p %d get '%s:runs:complete_since'",
                    port, w.name, w.name, port, w.name);
    ck_assert_msg(strncmp(out, "20\n", 3) == 0 && atol(out + 3) >= restart_s, "%s", out);
    free(out);

    produce_runs(&w, "old", 20, 9, 3, t);
    drain(&w, opts, log2);
    ck_assert_int_eq(logged(log2, "events"), 60);
    ck_assert_int_ge(logged(log2, "state_loads"), 20);

    produce_runs(&clean, "old", 20, 0, 12, t);
    drain(&clean, "", log2);
    assert_rows(w.dsn, BURSTS, "20\n");
    assert_same_findings(&w, &clean);
    snprintf(cmd, sizeof(cmd), "redis-cli -p %d shutdown nosave >/dev/null 2>&1; rm -rf %s",
             port, dir);
    ck_assert_int_eq(system(cmd), 0);
    unlink(log2);
    pair_drop(&w, &clean, log);
}
END_TEST

/* state.checkpoint_ms: the detectors' state goes to Redis once per
 * interval, a run touched in several batches costing one write-back. The
 * same four bursts drained in batches of 2 with a checkpoint after every
 * batch (0), in batches of 2 with one interval longer than the drain (only
 * the final checkpoint of --drain), and in one batch: the last two send
 * the same checkpoint commands, the first at least one more per batch, and
 * all three find the same. */
START_TEST(state_checkpoint_interval_coalesces_writes)
{
    struct world w[3];
    const char *opts[3] = {"-X batch.max_events=2 -X batch.behind_events=0 -X state.checkpoint_ms=0",
                           "-X batch.max_events=2 -X batch.behind_events=0 -X state.checkpoint_ms=600000",
                           "-X batch.max_events=1000 -X batch.behind_events=0 -X state.checkpoint_ms=600000"};
    long cmds[3], batches[3];
    int64_t secs[3];
    char log[4096], o[256];
    int64_t t = st_time_now_us() / 1000 - 3600000;

    for (int i = 0; i < 3; i++) {
        char tag[16];
        snprintf(tag, sizeof(tag), "ckint%d", i);
        world_init(&w[i], tag);
        snprintf(log, sizeof(log), "/tmp/%s.log", w[i].name);
        produce_runs(&w[i], "c", 4, 0, 12, t);
        snprintf(o, sizeof(o), "-X detect.lateness_s=0 %s", opts[i]);
        int64_t t0 = st_time_mono_ms();
        drain(&w[i], o, log);
        secs[i] = (st_time_mono_ms() - t0) / 1000;
        cmds[i] = logged(log, "redis_commands");
        batches[i] = logged(log, "batches");
        ck_assert_int_eq(logged(log, "events"), 48);
        unlink(log);
    }
    fprintf(stderr,
            "Redis commands: %ld in %ld batches (checkpoint each), %ld in %ld batches "
            "(one interval), %ld in %ld batches\n",
            cmds[0], batches[0], cmds[1], batches[1], cmds[2], batches[2]);
    ck_assert_int_ge(batches[1], 20);
    /* the same checkpoint commands; the run index's check (runidx.h: at
     * assignment, then every 10 s; with the marker's check-and-set up to
     * about ten commands) adds more when a drain on a busy machine takes
     * longer than that: allowed per 10 s either drain took */
    long slack = 10 * (1 + (long)(secs[1] + secs[2]) / 10);
    ck_assert_msg(labs(cmds[1] - cmds[2]) <= slack, "%ld vs %ld (%ld s, %ld s)", cmds[1],
                  cmds[2], (long)secs[1], (long)secs[2]);
    /* and a checkpoint per batch at least one more per batch but four:
     * each batch's run written again, one HSET for its detectors (the
     * run's hash), where one interval writes each of the four runs once
     * (with a run's state as one string a write is one command: the fixed
     * costs -- the index's check, the registry's reads -- no longer leave
     * the total of the per-batch checkpoints at twice the interval's, as
     * the sorted sets' four to six per write did). Less the index's
     * check, as above: on a shared Redis holding many keys its SCAN for
     * older state (runidx.h) took 200 commands a drain and differed by
     * 16 between two drains */
    long slack0 = 10 * (1 + (long)(secs[0] + secs[1]) / 10);
    ck_assert_msg(cmds[0] - cmds[1] >= batches[0] - 4 - slack0,
                  "%ld vs %ld in %ld batches (%ld s, %ld s)", cmds[0], cmds[1], batches[0],
                  (long)secs[0], (long)secs[1]);
    assert_rows(w[1].dsn, BURSTS, "4\n");
    assert_same_findings(&w[0], &w[1]);
    assert_same_findings(&w[2], &w[1]);
    for (int i = 0; i < 3; i++)
        world_drop(&w[i]);
}
END_TEST

/* A crash after PostgreSQL commits whose batches no checkpoint carried yet
 * (fault.crash_after_pg_commits inside one long state.checkpoint_ms): their
 * offsets were not committed either, so the next process redoes them all
 * over the older Redis state, and the findings equal a clean run's. Offsets
 * committed without their checkpoint would make the next process start
 * after them with k0's first denials in no state: its burst would be
 * lost. */
/* Two runs of 12 denials drained with opts and killed after 4 PostgreSQL
 * commits (stored: between 1 and most_stored events), then drained again:
 * with no offset committed before the crash every event is redone, and
 * the findings and their evidence rows equal a clean run's. */
static void crash_redoes_everything(const char *tag, const char *opts, int most_stored)
{
    struct world w, clean;
    char log[128], q[128];
    pair_init(&w, &clean, log, sizeof(log), tag);
    int64_t t = st_time_now_us() / 1000 - 3600000;

    produce_runs(&w, "k", 2, 0, 12, t);
    produce_runs(&clean, "k", 2, 0, 12, t);
    ck_assert_int_eq(run(&w, w.name, w.name,
                         "timeout 120 " ANALYZER " --drain %s -X fault.crash_after_pg_commits=4"
                         " 2>%s",
                         opts, log),
                     3);
    snprintf(q, sizeof(q), "SELECT count(*) BETWEEN 1 AND %d FROM events", most_stored);
    assert_rows(w.dsn, q, "t\n");
    drain(&w, opts, log);
    long redone = logged(log, "events");
    drain(&clean, opts, log);
    assert_same_findings(&w, &clean);
    assert_rows(w.dsn, BURST_EVENTS " ORDER BY 1", "12\n12\n");
    ck_assert_int_eq(redone, 24); /* nothing was committed before the crash */
    assert_same_rows(&w, &clean, "SELECT * FROM finding_events ORDER BY 1, 2, 3");
    pair_drop(&w, &clean, log);
}

START_TEST(state_crash_before_the_interval_checkpoint_redoes_its_batches)
{
    /* at most 8 of k0's 12 denials are stored: its burst (10) is not yet */
    crash_redoes_everything("ckcrash",
                            "-X detect.lateness_s=0 -X batch.max_events=2 "
                            "-X batch.behind_events=0 -X state.checkpoint_ms=600000",
                            8);
}
END_TEST

/* state.checkpoint_behind_ms: batches polled while behind (grown past
 * batch.max_events) take the longer interval. A live interval of 1 ms
 * would commit offsets after nearly every batch; the behind interval,
 * longer than the drain, commits none before the crash, so the next process
 * redoes every event, and the findings equal a clean run's. A behind batch
 * cut on state.checkpoint_ms would have committed some: fewer redone. */
START_TEST(state_crash_while_behind_redoes_the_behind_interval)
{
    crash_redoes_everything("ckbehind",
                            "-X detect.lateness_s=0 -X batch.max_events=2 "
                            "-X batch.behind_events=4 -X batch.behind_ms=0 "
                            "-X state.checkpoint_ms=1 -X state.checkpoint_behind_ms=600000",
                            16);
}
END_TEST

/* With state.evict_s=0 and a checkpoint interval longer than the drain,
 * every batch asks to evict idle runs, but a run whose changes no
 * checkpoint carried yet stays in memory: the burst is found whole, as in
 * a clean run, and the runs leave memory only after the final checkpoint.
 * Evicting a run with pending writes would read it back empty (the run
 * index does not hold it yet) and split the burst. */
START_TEST(state_eviction_waits_for_the_interval_checkpoint)
{
    struct world w, clean;
    char log[128];
    pair_init(&w, &clean, log, sizeof(log), "ckevict");
    int64_t t = st_time_now_us() / 1000 - 3600000;
    const char *opts = "-X detect.lateness_s=0 -X batch.max_events=2 -X batch.behind_events=0";

    produce_requests(&w, "run-p", "d", 0, 14, t, 3, "deny");
    produce_requests(&clean, "run-p", "d", 0, 14, t, 3, "deny");
    char o[256];
    snprintf(o, sizeof(o), "%s -X state.evict_s=0 -X state.checkpoint_ms=600000", opts);
    drain(&w, o, log);
    ck_assert_int_ge(logged(log, "batches"), 4);
    ck_assert_int_gt(logged(log, "state_evictions"), 0); /* after the last checkpoint */
    ck_assert_int_eq(logged(log, "state_runs"), 0);
    ck_assert_int_eq(logged(log, "state_loads"), 7); /* the 7 destinations, once */
    drain(&clean, opts, log);
    assert_rows(w.dsn, BURST_EVENTS, "14\n");
    assert_same_findings(&w, &clean);
    pair_drop(&w, &clean, log);
}
END_TEST


/* The digest of every run state of denial_burst under the world's prefix:
 * each key and its value, in either layout. */
static char *state_digest(const struct world *w)
{
    return world_shf("u=\"$SANDTRAIL_REDIS_URL\"; { for k in $(redis-cli -u \"$u\" --scan "
                     "--pattern '%s:denial_burst:[wl]:*' | sort); do echo \"$k\"; "
                     "redis-cli -u \"$u\" --no-raw get \"$k\" 2>/dev/null | "
                     "grep -v WRONGTYPE; "
                     "redis-cli -u \"$u\" --no-raw zrange \"$k\" 0 -1 2>/dev/null | "
                     "grep -v WRONGTYPE; done; "
                     "for k in $(redis-cli -u \"$u\" --scan --pattern '%s:run:b:*'); do "
                     "for f in $(redis-cli -u \"$u\" hkeys \"$k\" | grep ':denial_burst$'); do "
                     "echo \"$f\"; redis-cli -u \"$u\" --no-raw hget \"$k\" \"$f\"; done; "
                     "done | paste - - | sort; } | md5sum",
                     w->name, w->name);
}

/* A lost assignment writes nothing. Analyzer A holds twenty runs' changes
 * (four denials each) that no checkpoint carried yet (an interval longer
 * than the test) when it is stopped (SIGSTOP) past its session timeout;
 * B, another member of the group, takes the partition, redoes the events
 * from the last committed offset with two more per run, and writes the
 * runs' state. When A resumes, Kafka tells it the assignment was lost: it
 * must exit 1 without writing its older state over B's. Before, its
 * revoke flushed it (each small run's string replaced by A's four-member
 * one) and it went on. */
START_TEST(state_lost_assignment_writes_nothing)
{
    struct world w;
    char log[128], log2[160], cmd[1024];
    world_init(&w, "lostasg");
    snprintf(log, sizeof(log), "/tmp/%s.log", w.name);
    snprintf(log2, sizeof(log2), "/tmp/%s.2.log", w.name);
    int64_t t = st_time_now_us() / 1000 - 3600000;
    const char *opts = "-X detect.lateness_s=0 -X state.checkpoint_ms=600000"
                       " -X kafka.session.timeout.ms=6000";

    produce_runs(&w, "lost", 20, 0, 4, t);
    run(&w, w.name, w.name,
        "(timeout 300 " ANALYZER " %s 2>%s; echo \\$? > %s.rc) & sleep 0.2;"
        " pgrep -n -f 'sandtrail-analyzer %s' > %s.pid",
        opts, log, log, opts, log);
    wait_events(&w, 80);
    sleep(1); /* its batch done: the changes wait for the interval */
    snprintf(cmd, sizeof(cmd), "kill -STOP $(cat %s.pid)", log);
    ck_assert_int_eq(system(cmd), 0);
    sleep(10); /* past kafka.session.timeout.ms: the broker drops A */
    produce_runs(&w, "lost", 20, 4, 2, t);
    ck_assert_int_eq(run(&w, w.name, w.name,
                         "SANDTRAIL_GROUP_INSTANCE_ID=%s-2 timeout 120 " ANALYZER
                         " --drain %s 2>%s",
                         w.name, opts, log2),
                     0);
    ck_assert_int_eq(logged(log2, "events"), 120); /* A committed nothing */
    char *b_state = state_digest(&w);
    snprintf(cmd, sizeof(cmd),
             "kill -CONT $(cat %s.pid); for i in $(seq 1 600); do"
             " [ -s %s.rc ] && exit 0; sleep 0.1; done; kill $(cat %s.pid); exit 1",
             log, log, log);
    int exited = system(cmd) == 0;
    char *text = world_slurp(log);
    ck_assert_msg(exited, "A went on after losing its partition: %s", text);
    ck_assert_msg(strstr(text, "lost 1 partition"), "%s", text);
    free(text);
    snprintf(cmd, sizeof(cmd), "%s.rc", log);
    char *rc = world_slurp(cmd);
    ck_assert_str_eq(rc, "1\n");
    free(rc);
    unlink(cmd);
    snprintf(cmd, sizeof(cmd), "%s.pid", log);
    unlink(cmd);
    char *after = state_digest(&w);
    ck_assert_str_eq(after, b_state); /* B's state, not A's */
    free(after);
    free(b_state);
    unlink(log2);
    unlink(log);
    world_drop(&w);
}
END_TEST


/* Waits (up to 60 s) until log holds what. */
static void wait_logged(const char *log, const char *what)
{
    char *text = NULL;
    for (int i = 0; i < 600; i++) {
        free(text);
        text = world_slurp(log);
        if (strstr(text, what))
            break;
        usleep(100000);
    }
    ck_assert_msg(strstr(text, what), "\"%s\" not in %s", what, text);
    free(text);
}

/* The race a lost-assignment flag cannot close: analyzer A's committer
 * has read the owner epochs and is about to send its checkpoint
 * (fault.stall_checkpoint_ms holds it there) when A is stopped past its
 * session timeout; B takes the partition (its INCR moves the epoch),
 * redoes the events with two more per run and writes the runs' state.
 * When A resumes, its committer sends MULTI, the checkpoint, EXEC at once:
 * Redis must not run it (a watched epoch changed), A must exit 1, and
 * Redis keep B's state. Without the fence the checkpoint lands (each small
 * run's string replaced by A's four-member one). */
START_TEST(state_fenced_checkpoint_in_flight_does_not_land)
{
    struct world w;
    char log[128], log2[160], cmd[1024];
    world_init(&w, "fenced");
    snprintf(log, sizeof(log), "/tmp/%s.log", w.name);
    snprintf(log2, sizeof(log2), "/tmp/%s.2.log", w.name);
    int64_t t = st_time_now_us() / 1000 - 3600000;
    const char *opts = "-X detect.lateness_s=0 -X state.checkpoint_ms=0"
                       " -X kafka.session.timeout.ms=6000";

    produce_runs(&w, "fence", 20, 0, 4, t);
    run(&w, w.name, w.name,
        "(timeout 300 " ANALYZER " %s -X fault.stall_checkpoint_ms=15000 2>%s;"
        " echo \\$? > %s.rc) & sleep 0.2;"
        " pgrep -n -f 'sandtrail-analyzer %s' > %s.pid",
        opts, log, log, opts, log);
    wait_events(&w, 80);
    /* the committer has read the epochs and waits before its EXEC */
    wait_logged(log, "fault.stall_checkpoint_ms");
    snprintf(cmd, sizeof(cmd), "kill -STOP $(cat %s.pid)", log);
    ck_assert_int_eq(system(cmd), 0);
    sleep(10); /* past kafka.session.timeout.ms: the broker drops A */
    produce_runs(&w, "fence", 20, 4, 2, t);
    ck_assert_int_eq(run(&w, w.name, w.name,
                         "SANDTRAIL_GROUP_INSTANCE_ID=%s-2 timeout 120 " ANALYZER
                         " --drain %s 2>%s",
                         w.name, opts, log2),
                     0);
    ck_assert_int_eq(logged(log2, "events"), 120); /* A committed nothing */
    char *b_state = state_digest(&w);
    /* A resumes with its stall over: the EXEC goes at once */
    snprintf(cmd, sizeof(cmd),
             "kill -CONT $(cat %s.pid); for i in $(seq 1 600); do"
             " [ -s %s.rc ] && exit 0; sleep 0.1; done; kill $(cat %s.pid); exit 1",
             log, log, log);
    int exited = system(cmd) == 0;
    char *after = state_digest(&w);
    char *text = world_slurp(log);
    /* B's state, not A's (the unfenced send fails here) */
    ck_assert_msg(!strcmp(after, b_state), "A's checkpoint landed: %s", text);
    free(after);
    free(b_state);
    ck_assert_msg(exited, "A went on after losing its partition: %s", text);
    /* refused by Redis: the epoch moved after A's read (which came before
     * the stall, so before the stop) */
    ck_assert_msg(strstr(text, "the assignment is lost (an owner epoch changed between "
                               "the fence's read and its EXEC)"),
                  "%s", text);
    free(text);
    snprintf(cmd, sizeof(cmd), "%s.rc", log);
    char *rc = world_slurp(cmd);
    ck_assert_str_eq(rc, "1\n");
    free(rc);
    unlink(cmd);
    snprintf(cmd, sizeof(cmd), "%s.pid", log);
    unlink(cmd);
    unlink(log2);
    unlink(log);
    world_drop(&w);
}
END_TEST

/* The detectors' state a world's Redis holds, but the run index (whose
 * scores are wall times): each key without the prefix, its type and value,
 * sorted. */
static char *redis_state(const struct world *w)
{
    return world_shf(
        "u=\"$SANDTRAIL_REDIS_URL\"; "
        "redis-cli -u \"$u\" --scan --pattern '%s:*' | grep -v '^%s:runs:' |"
        " grep -v '^%s:epoch:' | sort | "
        "while read -r k; do t=$(redis-cli -u \"$u\" type \"$k\"); "
        "echo \"${k#%s:} $t\"; case $t in "
        "string) redis-cli -u \"$u\" --no-raw get \"$k\";; "
        "hash) redis-cli -u \"$u\" --no-raw hgetall \"$k\" | paste - - | sort;; "
        "zset) redis-cli -u \"$u\" --no-raw zrange \"$k\" 0 -1 withscores;; "
        "esac; done",
        w->name, w->name, w->name, w->name);
}

/* The rolling write-back: each batch's checkpoint writes the changes made
 * state.checkpoint_ms ago and commits the offsets of the batch detected
 * then (its cut), so the offsets committed never pass a change Redis does
 * not hold. A crash after PostgreSQL commit n (before that batch's
 * checkpoint and Kafka commit, i.e. with batches 1 .. n - 1 wholly done),
 * for several n and intervals that put the cut one or several batches
 * back: the next process redoes from the cut's offsets and the findings,
 * their events and the detectors' state in Redis equal a clean run's.
 * Offsets committed past the cut (a batch's own, with its runs' changes
 * still pending) would start the redo after denials Redis never got: a
 * burst split, its findings different; the redo's count of events fails
 * first (checked: a batch committing its own offsets fails 4 of the 6). */
static const int roll_ms[] = {1, 1, 1, 20, 20, 20};
static const int roll_n[] = {3, 6, 10, 3, 6, 10};

START_TEST(state_rolling_crash_after_any_batch_redoes_from_the_cut)
{
    struct world w, clean;
    char log[128], tag[16], opts[160];
    snprintf(tag, sizeof(tag), "roll%d", _i);
    pair_init(&w, &clean, log, sizeof(log), tag);
    int64_t t = st_time_now_us() / 1000 - 3600000;
    snprintf(opts, sizeof(opts),
             "-X detect.lateness_s=0 -X batch.max_events=2 -X batch.behind_events=0 -X state.checkpoint_ms=%d",
             roll_ms[_i]);

    /* two runs one after the other in time: no event late (late events
     * after a crash: state_crash_keeps_late_events_late) */
    produce_runs(&w, "k", 1, 0, 12, t);
    produce_runs(&w, "j", 1, 0, 12, t + 40000);
    produce_runs(&clean, "k", 1, 0, 12, t);
    produce_runs(&clean, "j", 1, 0, 12, t + 40000);
    ck_assert_int_eq(run(&w, w.name, w.name,
                         "timeout 120 " ANALYZER
                         " --drain %s -X fault.crash_after_pg_commits=%d 2>%s",
                         opts, roll_n[_i], log),
                     3);
    drain(&w, opts, log);
    long redone = logged(log, "events");
    drain(&clean, opts, log);
    fprintf(stderr, "rolling, checkpoint_ms=%d, crash after PostgreSQL commit %d: %ld "
            "of 24 events redone\n", roll_ms[_i], roll_n[_i], redone);
    /* the crashed batch's two events at least; the cut is a batch back at
     * least, so the batch before it too */
    ck_assert_int_ge(redone, 24 - 2 * (roll_n[_i] - 2));
    assert_same_findings(&w, &clean);
    assert_rows(w.dsn, BURST_EVENTS " ORDER BY 1", "12\n12\n");
    assert_same_rows(&w, &clean, "SELECT * FROM finding_events ORDER BY 1, 2, 3");
    char *rw = redis_state(&w), *rc = redis_state(&clean);
    ck_assert_msg(strlen(rw) > 0, "no state in Redis");
    char diff[512];
    world_first_difference("crashed", rw, rc, diff, sizeof(diff));
    ck_assert_msg(!strcmp(rw, rc), "Redis: %s", diff);
    free(rw);
    free(rc);
    pair_drop(&w, &clean, log);
}
END_TEST

/* The findings with what their evidence says about lateness. */
#define FINDINGS_LATE "SELECT finding_id, detector, severity, event_count, late_event_count " \
                      "FROM findings ORDER BY 1"
#define EVIDENCE_LATE "SELECT finding_id, event_id, late FROM finding_events ORDER BY 1, 2"

/* Two overlapping runs on one partition: k's first six denials, then j's
 * twelve, each a second after k's of the same rank, then k's last six,
 * older than j's newest: late in a clean run (with detect.lateness_s=0,
 * which buffers nothing; the three that come after k's burst of ten is
 * found are marked late on it). The analyzer crashes after PostgreSQL
 * commit 11 (batches of two: k's 7th to 10th denials stored) with offsets
 * committed at most up to k's 9th; the next process must judge k's last
 * denials late too. It did not: a partition's watermark lived only in
 * memory, and a new process started it again from the events it redid
 * (k's alone: none late), so k's last two evidence rows said on time and
 * the finding counted 1 late event instead of 3 (state.checkpoint_ms=0).
 * Each commit now carries the partition's clock (reorder.h), restored when
 * it is assigned. The second round commits a cut's offsets a batch or more
 * back (state.checkpoint_ms=1), with the clocks noted with them. */
START_TEST(state_crash_keeps_late_events_late)
{
    struct world w, clean;
    char log[128], tag[16], opts[160];
    snprintf(tag, sizeof(tag), "latecrash%d", _i);
    pair_init(&w, &clean, log, sizeof(log), tag);
    int64_t t = st_time_now_us() / 1000 - 3600000;
    /* 0: every batch commits its own offsets; 1: those of its cut (the
     * rolling write-back: each clock travels with its offsets in the
     * marks) */
    snprintf(opts, sizeof(opts),
             "-X detect.lateness_s=0 -X batch.max_events=2 -X batch.behind_events=0 -X state.checkpoint_ms=%d", _i);

    for (int i = 0; i < 2; i++) {
        struct world *x = i ? &clean : &w;
        produce_runs(x, "k", 1, 0, 6, t);
        produce_runs(x, "j", 1, 0, 12, t + 1000);
        produce_runs(x, "k", 1, 6, 6, t);
    }
    ck_assert_int_eq(run(&w, w.name, w.name,
                         "timeout 120 " ANALYZER
                         " --drain %s -X fault.crash_after_pg_commits=11 2>%s",
                         opts, log),
                     3);
    drain(&w, opts, log);
    long redone = logged(log, "events");
    drain(&clean, opts, log);
    if (_i == 0)
        ck_assert_int_le(redone, 8); /* k's last denials (and j's last two at most) */
    assert_rows(clean.dsn, "SELECT late_event_count FROM findings ORDER BY 1", "0\n3\n");
    assert_same_rows(&w, &clean, FINDINGS_LATE);
    assert_same_rows(&w, &clean, EVIDENCE_LATE);
    pair_drop(&w, &clean, log);
}
END_TEST

/* The same with the default lateness (30 s), where a crash redoes the
 * buffered events, which set the watermark again; but the end of --drain
 * (as a partition idle for the lateness in live mode) releases every event
 * and commits past them all: the next process starts after the events
 * that made the watermark. k's first six denials and j's twelve, 100 s
 * later, are drained; then k's last six come, older than j's newest by
 * more than the lateness: late, as in one clean run of all of them (the
 * finding counted none late before). */
START_TEST(state_restart_after_a_whole_release_keeps_late_events_late)
{
    struct world w, clean;
    char log[128];
    pair_init(&w, &clean, log, sizeof(log), "lateidle");
    int64_t t = st_time_now_us() / 1000 - 3600000;

    produce_runs(&w, "k", 1, 0, 6, t);
    produce_runs(&w, "j", 1, 0, 12, t + 100000);
    drain(&w, "", log);
    produce_runs(&w, "k", 1, 6, 6, t);
    drain(&w, "", log);
    ck_assert_int_eq(logged(log, "events"), 6);
    produce_runs(&clean, "k", 1, 0, 6, t);
    produce_runs(&clean, "j", 1, 0, 12, t + 100000);
    produce_runs(&clean, "k", 1, 6, 6, t);
    drain(&clean, "", log);
    assert_rows(clean.dsn, "SELECT late_event_count FROM findings ORDER BY 1", "0\n3\n");
    assert_same_rows(&w, &clean, FINDINGS_LATE);
    assert_same_rows(&w, &clean, EVIDENCE_LATE);
    pair_drop(&w, &clean, log);
}
END_TEST

int main(void)
{
    if (world_setup())
        return EXIT_FAILURE;
    Suite *s = suite_create("state");
    TCase *tc = tcase_create("services");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, state_survives_a_restart_through_redis);
    tcase_add_test(tc, state_evicted_run_extends_its_episode);
    tcase_add_test(tc, state_redis_commands_do_not_grow_with_events);
    tcase_add_test(tc, state_new_runs_cost_no_load);
    tcase_add_test(tc, state_upgrade_reads_state_written_before_the_index);
    tcase_add_test(tc, state_partitions_added_reads_runs_that_moved);
    tcase_add_test(tc, state_redis_restart_reads_runs_its_index_lost);
    tcase_add_test(tc, state_redis_restart_midstream_rewrites_the_index);
    tcase_add_test(tc, state_crash_before_the_interval_checkpoint_redoes_its_batches);
    tcase_add_test(tc, state_eviction_waits_for_the_interval_checkpoint);
    tcase_add_test(tc, state_lost_assignment_writes_nothing);
    tcase_add_test(tc, state_fenced_checkpoint_in_flight_does_not_land);
    suite_add_tcase(s, tc);
    /* a case of its own (ctest's test_state_rolling: CK_RUN_CASE=rolling) */
    TCase *rolling = tcase_create("rolling");
    tcase_set_timeout(rolling, 300);
    tcase_add_loop_test(rolling, state_rolling_crash_after_any_batch_redoes_from_the_cut, 0, 6);
    suite_add_tcase(s, rolling);
    /* a case of its own: CK_RUN_CASE=late runs these alone */
    TCase *late = tcase_create("late");
    tcase_set_timeout(late, 300);
    tcase_add_loop_test(late, state_crash_keeps_late_events_late, 0, 2);
    tcase_add_test(late, state_restart_after_a_whole_release_keeps_late_events_late);
    suite_add_tcase(s, late);
    /* CK_RUN_CASE=interval runs these alone */
    TCase *interval = tcase_create("interval");
    tcase_set_timeout(interval, 300);
    tcase_add_test(interval, state_checkpoint_interval_coalesces_writes);
    tcase_add_test(interval, state_crash_while_behind_redoes_the_behind_interval);
    suite_add_tcase(s, interval);
    return world_run(s);
}
