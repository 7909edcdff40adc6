/* test_operators.c: what an operator relies on, against the real services:
 * upgrades from the previous release's schema, refusing a schema a newer
 * release made, health endpoints, and JSON logs. */
#include <check.h>
#include <cjson/cJSON.h>
#include <libpq-fe.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "world.h"

#define DEMO SANDTRAIL_SOURCE_DIR "/tests/data/demo.ndjson"

static char *one(const char *dsn, const char *sql)
{
    char *r = rows(dsn, sql);
    r[strcspn(r, "\n")] = '\0';
    return r;
}

static void exec_sql(const char *dsn, const char *sql)
{
    free(rows(dsn, sql));
}

/* The previous release (0.1.0, as landed on 2026-11-30) shipped only
 * sql/001_init.sql: a folder with just that migration makes its schema. */
static void previous_release_schema(struct world *w, char *dir, size_t dirsz)
{
    snprintf(dir, dirsz, "/tmp/%s.sql-0.1.0", w->name);
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "rm -rf %s && mkdir -p %s && cp %s/sql/001_init.sql %s/",
             dir, dir, SANDTRAIL_SOURCE_DIR, dir);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_int_eq(run(w, w->name, w->name,
                         "SANDTRAIL_SQL_DIR=%s " BIN "/cli/sandtrail migrate >/dev/null", dir),
                     0);
}

START_TEST(upgrade_from_previous_release_keeps_its_rows)
{
    struct world w;
    char dir[256];
    world_init(&w, "upgrade");
    previous_release_schema(&w, dir, sizeof(dir));
    /* what 0.1.0 stored: an event and a finding */
    exec_sql(w.dsn,
             "INSERT INTO events (source_name, event_id, source_kind, ts, task_id, run_id,"
             " type, decision, body, kafka_topic, kafka_partition, kafka_offset)"
             " VALUES ('squid', 'old-1', 'proxy', '2026-11-20T10:00:00Z', 'T-OLD', 'run-old',"
             " 'request', 'deny', '{\"event_id\":\"old-1\"}', 't', 0, 0) RETURNING 1");
    exec_sql(w.dsn,
             "INSERT INTO findings (finding_id, detector, detector_version, config_hash,"
             " severity, task_id, run_id, first_seen, last_seen, event_count, evidence,"
             " summary) VALUES ('f-old', 'denial_burst', 1, 'h', 'high', 'T-OLD', 'run-old',"
             " '2026-11-20T10:00:00Z', '2026-11-20T10:00:00Z', 1, '{}', 'old')"
             " RETURNING 1");

    /* a new analyzer told not to migrate refuses the older schema */
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/analyzer/sandtrail-analyzer --drain --no-migrate"
                             " 2>/tmp/%s.err",
                         w.name),
                     1);
    char path[256];
    snprintf(path, sizeof(path), "/tmp/%s.err", w.name);
    char *err = world_slurp(path);
    ck_assert_msg(strstr(err, "older than this program"), "%s", err);
    free(err);

    /* migrate (as the README's upgrade order says), then run */
    ck_assert_int_eq(run(&w, w.name, w.name, BIN "/cli/sandtrail migrate >/dev/null"), 0);
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/collector/sandtrail-collector --input " DEMO " 2>/dev/null"),
                     1);
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/analyzer/sandtrail-analyzer --drain --no-migrate 2>/dev/null"),
                     0);
    char *r = rows(w.dsn, "SELECT event_id, ts FROM events WHERE task_id = 'T-OLD'");
    ck_assert_str_eq(r, "old-1|2026-11-20 10:00:00+00\n");
    free(r);
    r = rows(w.dsn, "SELECT finding_id, status FROM findings WHERE task_id = 'T-OLD'");
    ck_assert_str_eq(r, "f-old|open\n");
    free(r);
    r = one(w.dsn, "SELECT count(*) FROM events");
    ck_assert_str_eq(r, "41");
    free(r);
    r = one(w.dsn, "SELECT count(*) FROM findings WHERE task_id = 'T-100'");
    ck_assert_str_eq(r, "2");
    free(r);
    world_drop(&w);
}
END_TEST

/* A database migrated by a newer release: no program of this one runs
 * against it, with or without migrating, and nothing is applied. */
START_TEST(upgrade_newer_schema_is_refused)
{
    struct world w;
    world_init(&w, "newer");
    ck_assert_int_eq(run(&w, w.name, w.name, BIN "/cli/sandtrail migrate >/dev/null"), 0);
    exec_sql(w.dsn, "INSERT INTO schema_migrations (version) VALUES ('999_future.sql')"
                    " RETURNING 1");
    char *before = one(w.dsn, "SELECT count(*) FROM schema_migrations");
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/analyzer/sandtrail-analyzer --drain 2>/tmp/%s.err", w.name),
                     1);
    char path[256];
    snprintf(path, sizeof(path), "/tmp/%s.err", w.name);
    char *err = world_slurp(path);
    ck_assert_msg(strstr(err, "newer than this program") && strstr(err, "999_future.sql"),
                  "%s", err);
    free(err);
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/analyzer/sandtrail-analyzer --drain --no-migrate"
                             " 2>/dev/null"),
                     1);
    ck_assert_int_eq(run(&w, w.name, w.name, BIN "/cli/sandtrail migrate 2>/dev/null"), 1);
    char *after = one(w.dsn, "SELECT count(*) FROM schema_migrations");
    ck_assert_str_eq(before, after);
    free(before);
    free(after);
    world_drop(&w);
}
END_TEST

/* "BODY CODE" of GET url, the body's newlines taken out (a body ends
 * with one: "ready\n 200" never matched "ready 200", and each wait for
 * it ran to its end, 50 s of this test); caller frees. */
static char *get(const char *url)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd),
             "{ curl -s --max-time 2 -w ' %%{http_code}' %s 2>/dev/null || echo ' 000'; }"
             " | tr -d '\\n'",
             url);
    return world_sh(cmd);
}

/* Polls url until its answer holds want; returns the last answer. */
static char *wait_for(const char *url, const char *want, int seconds)
{
    char *r = NULL;
    for (int i = 0; i < seconds * 10; i++) {
        free(r);
        r = get(url);
        if (strstr(r, want))
            break;
        usleep(100000);
    }
    return r;
}

/* /healthz answers while the process lives; /readyz says ready once the
 * analyzer has its partitions, and 503 with the reason while a batch cannot
 * be written (PostgreSQL holding a lock past the statement timeout), then
 * ready again once it can. */
START_TEST(health_readyz_follows_the_stores)
{
    struct world w;
    char url_h[128], url_r[128];
    int port = world_free_port();
    world_init(&w, "health");
    ck_assert_int_eq(run(&w, w.name, w.name, BIN "/cli/sandtrail migrate >/dev/null"), 0);
    snprintf(url_h, sizeof(url_h), "http://127.0.0.1:%d/healthz", port);
    snprintf(url_r, sizeof(url_r), "http://127.0.0.1:%d/readyz", port);

    /* the collector makes the topics; an analyzer without partitions is
     * not ready */
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/collector/sandtrail-collector --input /dev/null 2>/dev/null"),
                     0);
    char pidfile[256];
    snprintf(pidfile, sizeof(pidfile), "/tmp/%s.pid", w.name);
    ck_assert_int_eq(
        run(&w, w.name, w.name,
            "SANDTRAIL_PG_DSN=\\\"\\$SANDTRAIL_PG_DSN options='-c statement_timeout=500'\\\" "
            BIN "/analyzer/sandtrail-analyzer --no-migrate -X metrics.listen=127.0.0.1:%d"
                " -X retry.max_backoff_ms=200 -X detect.lateness_s=0"
                " 2>/dev/null & echo \\$! >%s",
            port, pidfile),
        0);
    char *r = wait_for(url_r, "ready 200", 30);
    ck_assert_msg(strstr(r, "ready") && strstr(r, " 200"), "%s", r);
    free(r);

    /* PostgreSQL holds events locked: the next batch waits past the
     * statement timeout and is retried */
    PGconn *locker = PQconnectdb(w.dsn);
    ck_assert_int_eq(PQstatus(locker), CONNECTION_OK);
    PQclear(PQexec(locker, "BEGIN"));
    PGresult *lr = PQexec(locker, "LOCK TABLE events IN ACCESS EXCLUSIVE MODE");
    ck_assert_int_eq(PQresultStatus(lr), PGRES_COMMAND_OK);
    PQclear(lr);
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/collector/sandtrail-collector --input " DEMO " 2>/dev/null"),
                     1);
    r = wait_for(url_r, "cannot be written", 20);
    ck_assert_msg(strstr(r, "503") && strstr(r, "PostgreSQL"), "%s", r);
    free(r);
    r = get(url_h);
    ck_assert_msg(strstr(r, "ok") && strstr(r, " 200"), "%s", r);
    free(r);

    PQclear(PQexec(locker, "COMMIT"));
    PQfinish(locker);
    r = wait_for(url_r, "ready 200", 20);
    ck_assert_msg(strstr(r, "ready") && strstr(r, " 200"), "%s", r);
    free(r);
    for (int i = 0; i < 50; i++) { /* the retried batch is in */
        r = one(w.dsn, "SELECT count(*) FROM events");
        if (strcmp(r, "40") == 0)
            break;
        free(r);
        usleep(100000);
    }
    ck_assert_str_eq(r, "40");
    free(r);

    char *pid = world_slurp(pidfile);
    kill((pid_t)atoi(pid), SIGTERM);
    free(pid);
    sleep(1);
    world_drop(&w);
}
END_TEST

/* The threads of the live analyzer whose pid is in pidfile. */
static int threads_of(const char *pidfile)
{
    char *pid = world_slurp(pidfile);
    char *n = world_shf("ls /proc/%d/task 2>/dev/null | wc -l", atoi(pid));
    int k = atoi(n);
    free(pid);
    free(n);
    return k;
}

/* Starts a live analyzer of w with extra arguments, its pid in pidfile,
 * and waits until /readyz says ready. */
static void live_ready(struct world *w, const char *extra, const char *pidfile)
{
    char url[128];
    int port = world_free_port();
    snprintf(url, sizeof(url), "http://127.0.0.1:%d/readyz", port);
    ck_assert_int_eq(run(w, w->name, w->name,
                         BIN "/analyzer/sandtrail-analyzer --no-migrate"
                             " -X metrics.listen=127.0.0.1:%d %s 2>/dev/null"
                             " & echo \\$! >%s",
                         port, extra, pidfile),
                     0);
    char *r = wait_for(url, "ready 200", 30);
    ck_assert_msg(strstr(r, "ready 200"), "%s", r);
    free(r);
}

/* Stops the analyzer whose pid is in pidfile and waits until it is gone. */
static void live_stop_pidfile(const char *pidfile)
{
    free(world_shf("p=$(cat %s); kill $p; for i in $(seq 1 300); do kill -0 $p 2>/dev/null ||"
                   " break; sleep 0.1; done",
                   pidfile));
}

/* An idle analyzer that stores (the all role) keeps no dead-letter producer
 * per partition: the one each assigned partition's claim makes, to abort
 * what a crashed owner left open, is closed once initialised (four threads
 * and two connections each: 47 threads on 8 partitions when kept). Its
 * threads stay within a few of the detect role's, which makes none. */
START_TEST(idle_analyzer_keeps_no_producer_per_partition)
{
    struct world w;
    char pidfile[256];
    world_init(&w, "idlethreads");
    snprintf(pidfile, sizeof(pidfile), "/tmp/%s.pid", w.name);
    ck_assert_int_eq(run(&w, w.name, w.name, BIN "/cli/sandtrail migrate >/dev/null"), 0);
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/collector/sandtrail-collector --input /dev/null"
                             " -X kafka.topic.partitions=8 2>/dev/null"),
                     0);

    char detect_args[256];
    snprintf(detect_args, sizeof(detect_args),
             "-X analyzer.role=detect -X kafka.group=%s-detect", w.name);
    live_ready(&w, detect_args, pidfile);
    sleep(1);
    int detect = threads_of(pidfile);
    live_stop_pidfile(pidfile);

    live_ready(&w, "", pidfile);
    int all = 0;
    for (int i = 0; i < 150; i++) { /* the claims' inits, then the closes */
        all = threads_of(pidfile);
        if (all <= detect + 8)
            break;
        usleep(100000);
    }
    live_stop_pidfile(pidfile);
    ck_assert_msg(detect > 0 && all <= detect + 8,
                  "all role %d threads, detect role %d (8 partitions)", all, detect);
    world_drop(&w);
}
END_TEST

/* log.format=json: every record is one JSON object with ts, level, program
 * and msg, control characters escaped. */
START_TEST(logs_json_lines_parse)
{
    struct world w;
    world_init(&w, "logs");
    char path[256];
    snprintf(path, sizeof(path), "/tmp/%s.log", w.name);
    /* an unreachable database: an error record whose message has newlines */
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/analyzer/sandtrail-analyzer --drain -X log.format=json"
                             " -X pg.dsn='host=127.0.0.1 port=1 dbname=x' 2>%s",
                         path),
                     1);
    char *text = world_slurp(path);
    int lines = 0;
    for (char *l = strtok(text, "\n"); l; l = strtok(NULL, "\n")) {
        cJSON *doc = cJSON_Parse(l);
        ck_assert_msg(doc != NULL, "not JSON: %s", l);
        ck_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(doc, "program")),
                         "sandtrail-analyzer");
        ck_assert_ptr_nonnull(cJSON_GetStringValue(cJSON_GetObjectItem(doc, "ts")));
        ck_assert_ptr_nonnull(cJSON_GetStringValue(cJSON_GetObjectItem(doc, "level")));
        ck_assert_ptr_nonnull(strstr(cJSON_GetStringValue(cJSON_GetObjectItem(doc, "msg")),
                                     "could not connect"));
        cJSON_Delete(doc);
        lines++;
    }
    ck_assert_int_eq(lines, 1);
    free(text);
    /* a format that does not exist is a configuration error */
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/analyzer/sandtrail-analyzer -X log.format=xml 2>/dev/null"),
                     78);
    world_drop(&w);
}
END_TEST

int main(void)
{
    if (world_setup())
        return EXIT_FAILURE;
    Suite *s = suite_create("operators");
    TCase *tc = tcase_create("services");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, upgrade_from_previous_release_keeps_its_rows);
    tcase_add_test(tc, upgrade_newer_schema_is_refused);
    tcase_add_test(tc, health_readyz_follows_the_stores);
    tcase_add_test(tc, idle_analyzer_keeps_no_producer_per_partition);
    tcase_add_test(tc, logs_json_lines_parse);
    suite_add_tcase(s, tc);
    return world_run(s);
}
