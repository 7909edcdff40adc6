/* test_analysts.c: the views analysts query and the least-privilege roles
 * (sql/006_analysts.sql), against the real PostgreSQL loaded by the real
 * collector and analyzer with the demo's events. */
#include <check.h>
#include <cjson/cJSON.h>
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "world.h"

#define DEMO SANDTRAIL_SOURCE_DIR "/tests/data/demo.ndjson"

/* Feeds the demo through the collector and an analyzer (which migrates). */
static void load_demo(struct world *w, const char *analyzer_env)
{
    ck_assert_int_eq(run(w, w->name, w->name,
                         BIN "/collector/sandtrail-collector --input " DEMO " 2>/dev/null"),
                     1); /* one malformed line, on purpose */
    ck_assert_int_eq(run(w, w->name, w->name,
                         "%s " BIN "/analyzer/sandtrail-analyzer --drain 2>/dev/null",
                         analyzer_env),
                     0);
}

/* A login role of this world that is a member of group; returns its DSN. */
static void make_login(const struct world *w, const char *suffix, const char *group,
                       char *dsn, size_t dsnsz, char *role, size_t rolesz)
{
    char sql[512];
    snprintf(role, rolesz, "%s_%s", w->name, suffix);
    snprintf(sql, sizeof(sql), "CREATE ROLE %s LOGIN IN ROLE %s", role, group);
    PGconn *pg = PQconnectdb(w->dsn);
    PGresult *r = PQexec(pg, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK, "%s", PQresultErrorMessage(r));
    PQclear(r);
    PQfinish(pg);
    snprintf(dsn, dsnsz, "%s user=%s", w->dsn, role);
}

static void drop_login(const char *role)
{
    char dsn[700], sql[256];
    const char *base = getenv("SANDTRAIL_PG_DSN");
    snprintf(dsn, sizeof(dsn), "%s dbname=postgres", base);
    snprintf(sql, sizeof(sql), "DROP ROLE IF EXISTS %s", role);
    PGconn *pg = PQconnectdb(dsn);
    PQclear(PQexec(pg, sql));
    PQfinish(pg);
}

/* The SQLSTATE a statement fails with, "" when it succeeds. */
static const char *sqlstate(const char *dsn, const char *sql)
{
    static char state[8];
    PGconn *pg = PQconnectdb(dsn);
    ck_assert_msg(PQstatus(pg) == CONNECTION_OK, "%s", PQerrorMessage(pg));
    PGresult *r = PQexec(pg, sql);
    ExecStatusType st = PQresultStatus(r);
    const char *s = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    snprintf(state, sizeof(state), "%s",
             st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK ? "" : s ? s : "?");
    PQclear(r);
    PQfinish(pg);
    return state;
}

static char *one(const char *dsn, const char *sql)
{
    char *r = rows(dsn, sql);
    r[strcspn(r, "\n")] = '\0';
    return r;
}

#define ASSERT_ROWS(dsn, sql, want)                                                  \
    do {                                                                             \
        char *got_ = rows(dsn, sql);                                                 \
        ck_assert_msg(strcmp(got_, want) == 0, "%s\n got:\n%s want:\n%s", sql, got_, \
                      want);                                                         \
        free(got_);                                                                  \
    } while (0)

START_TEST(analysts_views_answer_the_questions)
{
    struct world w;
    world_init(&w, "views");
    load_demo(&w, "");

    /* open findings by severity: the burst run's two */
    ASSERT_ROWS(w.dsn,
                "SELECT detector, severity, status, task_id, run_id FROM open_findings"
                " ORDER BY detector",
                "denial_burst|high|open|T-100|run-burst\n"
                "retry_across_paths|medium|open|T-100|run-burst\n");
    char *age = one(w.dsn, "SELECT bool_and(age >= interval '0') FROM open_findings");
    ck_assert_str_eq(age, "t");
    free(age);

    /* the burst run's timeline across broker, sandbox and proxy */
    ASSERT_ROWS(w.dsn,
                "SELECT source_kind, type, decision, detail, cardinality(finding_ids)"
                " FROM run_timeline WHERE task_id = 'T-100' AND run_id = 'run-burst'"
                " ORDER BY ts, event_id LIMIT 3",
                "broker|token_issue|allow|acc-1 repo:read|0\n"
                "sandbox|exec|allow|python upload.py (exit 1)|0\n"
                "proxy|request|deny|CONNECT paste.example.net:443 403|2\n");

    /* a run under the threshold: what it did, no finding */
    ASSERT_ROWS(w.dsn,
                "SELECT events, commands, requests_allowed, requests_denied,"
                " destinations_denied, credentials_issued, findings, max_severity"
                " FROM run_summary WHERE run_id = 'run-benign'",
                "14|0|5|9|1|0|0|NULL\n");

    /* egress by destination across runs */
    ASSERT_ROWS(w.dsn,
                "SELECT host, requests, allowed, denied, runs FROM egress_by_destination"
                " WHERE host = 'paste.example.net'",
                "paste.example.net|2|0|2|1\n");

    /* the credential the broker issued to the burst run */
    ASSERT_ROWS(w.dsn,
                "SELECT credential_id, task_id, run_id, scopes::text, audience, uses, state"
                " FROM credential_lifecycle",
                "acc-1|T-100|run-burst|[\"repo:read\"]|github.com|0|active\n");

    /* sources: three that just wrote, none silent; then one that wrote
     * every ten seconds until an hour ago is silent */
    ASSERT_ROWS(w.dsn,
                "SELECT source_name, source_kind, silent FROM source_health ORDER BY 1",
                "sbx-a|sandbox|f\nsquid|proxy|f\nvault|broker|f\n");
    free(rows(w.dsn,
              "INSERT INTO events (source_name, event_id, source_kind, ts, task_id,"
              " run_id, type, decision, body, kafka_topic, kafka_partition,"
              " kafka_offset, ingested_at)"
              " SELECT 'sbx-quiet', 'q-' || i, 'sandbox', now() - interval '1 hour',"
              " 'T-Q', 'run-q', 'exec', 'allow', '{}', 't', 0, i,"
              " now() - interval '2 hours' + i * interval '10 seconds'"
              " FROM generate_series(1, 360) i RETURNING 1"));
    ASSERT_ROWS(w.dsn,
                "SELECT source_name, silent, median_gap_s FROM source_health"
                " WHERE source_name = 'sbx-quiet'",
                "sbx-quiet|t|10\n");
    world_drop(&w);
}
END_TEST

/* An analyst reads everything, changes nothing directly, and triages only
 * through sandtrail_triage, which records who and why. */
START_TEST(roles_analyst_reads_and_triages_only_through_the_function)
{
    struct world w;
    char dsn[800], role[128], sql[512];
    world_init(&w, "analyst");
    load_demo(&w, "");
    make_login(&w, "ana", "sandtrail_analyst", dsn, sizeof(dsn), role, sizeof(role));

    ck_assert_str_eq(sqlstate(dsn, "SELECT count(*) FROM run_summary"), "");
    ck_assert_str_eq(sqlstate(dsn, "SELECT count(*) FROM events"), "");
    ck_assert_str_eq(sqlstate(dsn, "SELECT count(*) FROM finding_status_history"), "");
    /* 42501: insufficient_privilege */
    ck_assert_str_eq(sqlstate(dsn, "UPDATE findings SET severity = 'low'"), "42501");
    ck_assert_str_eq(sqlstate(dsn, "UPDATE findings SET status = 'resolved'"), "42501");
    ck_assert_str_eq(sqlstate(dsn, "DELETE FROM findings"), "42501");
    ck_assert_str_eq(sqlstate(dsn, "DELETE FROM events"), "42501");
    ck_assert_str_eq(sqlstate(dsn, "UPDATE events SET body = '{}'"), "42501");
    ck_assert_str_eq(sqlstate(dsn, "INSERT INTO finding_events VALUES ('x', 'y', 'z')"),
                     "42501");
    ck_assert_str_eq(sqlstate(dsn, "DELETE FROM finding_status_history"), "42501");
    ck_assert_str_eq(sqlstate(dsn, "DELETE FROM notifications"), "42501");
    ck_assert_str_eq(sqlstate(dsn, "CREATE TABLE mine (x int)"), "42501");

    char *id = one(w.dsn, "SELECT finding_id FROM findings WHERE detector = 'denial_burst'");
    snprintf(sql, sizeof(sql),
             "SELECT sandtrail_triage('%s', 'false_positive', 'alice', 'load test')", id);
    ck_assert_str_eq(sqlstate(dsn, sql), "");
    snprintf(sql, sizeof(sql),
             "SELECT f.status, h.changed_by, h.db_user = '%s', h.from_status, h.to_status,"
             " h.note FROM findings f JOIN finding_status_history h USING (finding_id)"
             " WHERE finding_id = '%s'",
             role, id);
    ASSERT_ROWS(w.dsn, sql, "false_positive|alice|t|open|false_positive|load test\n");
    /* a triage without a name is refused, and changes nothing */
    snprintf(sql, sizeof(sql), "SELECT sandtrail_triage('%s', 'open', '', 'x')", id);
    ck_assert_str_eq(sqlstate(dsn, sql), "22023");
    ASSERT_ROWS(w.dsn, "SELECT count(*) FROM finding_status_history", "1\n");
    free(id);
    world_drop(&w);
    drop_login(role);
}
END_TEST

/* The analyzer runs as a member of sandtrail_writer, after the owner has
 * migrated; the writer can add events but never change or remove one.
 * Every batch is split (pg.copy_split_events=1), so the writer also marks
 * events stored ahead of their evidence (events_ahead, sql/010). */
START_TEST(roles_writer_runs_the_analyzer_and_cannot_edit_events)
{
    struct world w;
    char dsn[800], role[128], env[900];
    world_init(&w, "writer");
    ck_assert_int_eq(run(&w, w.name, w.name, BIN "/cli/sandtrail migrate >/dev/null"), 0);
    make_login(&w, "wr", "sandtrail_writer", dsn, sizeof(dsn), role, sizeof(role));
    snprintf(env, sizeof(env), "SANDTRAIL_PG_DSN='%s'", dsn);
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/collector/sandtrail-collector --input " DEMO " 2>/dev/null"),
                     1);
    ck_assert_int_eq(run(&w, w.name, w.name,
                         "%s " BIN "/analyzer/sandtrail-analyzer --drain --no-migrate"
                                   " -X pg.copy_split_events=1",
                         env),
                     0);
    ASSERT_ROWS(w.dsn, "SELECT count(*) FROM events", "40\n");
    ASSERT_ROWS(w.dsn, "SELECT count(*) > 0 FROM events_ahead", "t\n");
    ASSERT_ROWS(w.dsn, "SELECT detector FROM findings ORDER BY 1",
                "denial_burst\nretry_across_paths\n");
    ASSERT_ROWS(w.dsn, "SELECT kind, count(*) FROM notifications GROUP BY 1",
                "created|2\n");
    ck_assert_str_eq(sqlstate(dsn, "UPDATE events SET body = '{}'"), "42501");
    ck_assert_str_eq(sqlstate(dsn, "DELETE FROM events"), "42501");
    ck_assert_str_eq(sqlstate(dsn, "TRUNCATE events"), "42501");
    ck_assert_str_eq(sqlstate(dsn, "DELETE FROM finding_status_history"), "42501");
    world_drop(&w);
    drop_login(role);
}
END_TEST

/* An auditor reads every table and view and writes nothing. */
START_TEST(roles_auditor_reads_only)
{
    struct world w;
    char dsn[800], role[128];
    world_init(&w, "auditor");
    load_demo(&w, "");
    make_login(&w, "aud", "sandtrail_auditor", dsn, sizeof(dsn), role, sizeof(role));
    ck_assert_str_eq(sqlstate(dsn, "SELECT count(*) FROM run_timeline"), "");
    ck_assert_str_eq(sqlstate(dsn, "SELECT count(*) FROM deliveries"), "");
    ck_assert_str_eq(sqlstate(dsn, "UPDATE findings SET summary = ''"), "42501");
    ck_assert_str_eq(sqlstate(dsn, "INSERT INTO events (source_name) VALUES ('x')"),
                     "42501");
    char *id = one(w.dsn, "SELECT finding_id FROM findings LIMIT 1");
    char sql[256];
    snprintf(sql, sizeof(sql), "SELECT sandtrail_triage('%s', 'resolved', 'bob')", id);
    ck_assert_str_eq(sqlstate(dsn, sql), "42501");
    free(id);
    world_drop(&w);
    drop_login(role);
}
END_TEST

/* An auditor's export that meets a table it may not read, or a read that
 * fails, leaves that part out and says so, in the bundle and on stderr, and
 * still exports everything after it: the failed read must not abort the
 * export's one transaction. */
START_TEST(roles_auditor_export_names_what_it_leaves_out)
{
    struct world w;
    char dsn[800], role[128], dir[128];
    world_init(&w, "audexp");
    load_demo(&w, "");
    make_login(&w, "aud", "sandtrail_auditor", dsn, sizeof(dsn), role, sizeof(role));
    /* notifications withheld from auditors; finding_status_history's read
     * fails for them (a policy that divides by zero; its owner is exempt) */
    ck_assert_str_eq(sqlstate(w.dsn, "REVOKE SELECT ON notifications FROM sandtrail_auditor"),
                     "");
    ck_assert_str_eq(sqlstate(w.dsn, "ALTER TABLE finding_status_history ENABLE ROW LEVEL"
                                     " SECURITY"),
                     "");
    ck_assert_str_eq(sqlstate(w.dsn, "CREATE POLICY boom ON finding_status_history USING"
                                     " (1 / 0 = 1)"),
                     "");
    snprintf(dir, sizeof(dir), "/tmp/%s.bundle", w.name);
    char *out = world_shf("rm -rf %s; SANDTRAIL_PG_DSN='%s' " BIN "/cli/sandtrail evidence"
                          " export --task T-100 --run run-burst --out %s 2>&1; echo rc=$?",
                          dir, dsn, dir);
    ck_assert_msg(strstr(out, "rc=0"), "%s", out);
    /* a data error's text may quote a value: its SQLSTATE only */
    ck_assert_msg(strstr(out, "finding_status_history not exported: the query failed on the"
                              " data (SQLSTATE 22012)"),
                  "%s", out);
    ck_assert_msg(strstr(out, "notifications not exported: this role may not read it"), "%s",
                  out);
    free(out);
    char path[256];
    snprintf(path, sizeof(path), "%s/findings.json", dir);
    char *text = world_slurp(path);
    cJSON *doc = cJSON_Parse(text);
    ck_assert_ptr_nonnull(doc);
    /* read after the failure, in the same transaction */
    ck_assert_ptr_nonnull(cJSON_GetObjectItem(doc, "finding_notices"));
    cJSON *sum = cJSON_GetObjectItem(doc, "run_summary");
    ck_assert_int_eq(cJSON_GetArraySize(sum), 1);
    ck_assert_ptr_null(cJSON_GetObjectItem(doc, "notifications"));
    ck_assert_ptr_null(cJSON_GetObjectItem(doc, "finding_status_history"));
    cJSON *left = cJSON_GetObjectItem(doc, "not_exported");
    ck_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItem(left, "notifications")),
                     "this role may not read it");
    ck_assert_str_eq(
        cJSON_GetStringValue(cJSON_GetObjectItem(left, "finding_status_history")),
        "the query failed on the data (SQLSTATE 22012)");
    cJSON_Delete(doc);
    free(text);
    snprintf(path, sizeof(path), "%s/queries.sql", dir);
    text = world_slurp(path);
    ck_assert_msg(strstr(text, "-- notifications: not exported: this role may not read it"),
                  "%s", text);
    ck_assert_msg(strstr(text, "-- run_summary: 1 row(s)"), "%s", text);
    free(text);
    snprintf(path, sizeof(path), "%s/report.md", dir);
    text = world_slurp(path);
    ck_assert_msg(strstr(text, "not exported") &&
                      strstr(text, "notifications (this role may not read it)"),
                  "%s", text);
    free(text);
    /* what it holds still verifies */
    out = world_shf(BIN "/cli/sandtrail evidence verify %s 2>&1; echo rc=$?", dir);
    ck_assert_msg(strstr(out, "rc=0") && strstr(out, "valid"), "%s", out);
    free(out);
    free(world_shf("rm -rf %s", dir));
    world_drop(&w);
    drop_login(role);
}
END_TEST

/* Old days go whole: retention drops their partitions, records what went,
 * keeps the findings, and a replay from offset 0 does not bring the removed
 * days back as partitions (their events wait in events_expired for the next
 * run). */
START_TEST(retention_drops_old_days_whole_and_records_them)
{
    struct world w;
    char path[256], cmd[512];
    world_init(&w, "retention");
    snprintf(path, sizeof(path), "/tmp/%s.old.ndjson", w.name);
    FILE *f = fopen(path, "w");
    for (int day = 1; day <= 3; day++)
        for (int i = 0; i < 5; i++)
            fprintf(f,
                    "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"old-%d-%d\","
                    "\"ts\":\"2026-09-0%dT10:00:0%dZ\",\"source\":{\"kind\":\"proxy\","
                    "\"name\":\"squid\"},\"task_id\":\"T-OLD\",\"run_id\":\"run-old\","
                    "\"type\":\"request\",\"attrs\":{\"host\":\"pypi.org\"}}\n",
                    day, i, day, i);
    fclose(f);
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/collector/sandtrail-collector --input %s 2>/dev/null", path),
                     0);
    load_demo(&w, "");
    ASSERT_ROWS(w.dsn, "SELECT count(*) FROM events", "55\n");
    ASSERT_ROWS(w.dsn,
                "SELECT count(*) FROM pg_inherits WHERE inhparent = 'events'::regclass"
                " AND inhrelid::regclass::text LIKE 'events_202609%'",
                "3\n");

    /* keep everything from 2026-11-15 on, whatever today is */
    char *keep = one(w.dsn, "SELECT current_date - date '2026-11-15'");
    snprintf(cmd, sizeof(cmd), BIN "/cli/sandtrail retention --keep-days %s --dry-run", keep);
    char *out = NULL;
    ck_assert_int_eq(run(&w, w.name, w.name, "%s >/tmp/%s.out", cmd, w.name), 0);
    ASSERT_ROWS(w.dsn, "SELECT count(*) FROM events", "55\n");
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/cli/sandtrail retention --keep-days %s >/tmp/%s.out", keep,
                         w.name),
                     0);
    snprintf(path, sizeof(path), "/tmp/%s.out", w.name);
    out = world_slurp(path);
    ck_assert_msg(strstr(out, "removed 15 event(s) in day partition(s) "
                              "{events_20260901,events_20260902,events_20260903}"),
                  "%s", out);
    free(out);
    ASSERT_ROWS(w.dsn, "SELECT count(*), min(ts) >= '2026-11-15' FROM events", "40|t\n");
    ASSERT_ROWS(w.dsn,
                "SELECT keep_days = current_date - date '2026-11-15', horizon,"
                " cardinality(partitions), events,"
                " (SELECT sum((o ->> 'events')::int) FROM jsonb_array_elements(offsets) o)"
                " FROM retention_runs",
                "t|2026-11-15 00:00:00+00|3|15|15\n");
    ASSERT_ROWS(w.dsn, "SELECT count(*) FROM findings", "2\n");
    /* the evidence chain: what was removed is recorded per checkpoint, and
     * an audit of what remains passes */
    ASSERT_ROWS(w.dsn,
                "SELECT sum(cardinality(offsets)), count(DISTINCT retention_run)"
                " FROM evidence_pruned",
                "15|1\n");
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/cli/sandtrail evidence audit >/tmp/%s.audit 2>&1", w.name),
                     0);

    /* a replay from offset 0 by another group: the removed days stay removed */
    char replay[96];
    snprintf(replay, sizeof(replay), "%s_replay", w.name);
    ck_assert_int_eq(run(&w, replay, w.name,
                         BIN "/analyzer/sandtrail-analyzer --drain 2>/dev/null"),
                     0);
    ASSERT_ROWS(w.dsn,
                "SELECT count(*) FROM pg_inherits WHERE inhparent = 'events'::regclass"
                " AND inhrelid::regclass::text LIKE 'events_202609%'",
                "0\n");
    ASSERT_ROWS(w.dsn, "SELECT count(*) FROM events_expired", "15\n");
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/cli/sandtrail retention --keep-days %s >/dev/null", keep),
                     0);
    ASSERT_ROWS(w.dsn, "SELECT count(*) FROM events", "40\n");
    ASSERT_ROWS(w.dsn, "SELECT events FROM retention_runs ORDER BY run_id", "15\n15\n");
    ASSERT_ROWS(w.dsn, "SELECT sum(cardinality(offsets)) FROM evidence_pruned", "15\n");
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/cli/sandtrail evidence audit >/tmp/%s.audit 2>&1", w.name),
                     0);
    /* retention is no blanket pass: an event deleted by hand is named */
    free(rows(w.dsn, "DELETE FROM events WHERE event_id = 'sq-105' RETURNING 1"));
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/cli/sandtrail evidence audit >/tmp/%s.audit 2>&1", w.name),
                     1);
    snprintf(path, sizeof(path), "/tmp/%s.audit", w.name);
    out = world_slurp(path);
    ck_assert_msg(strstr(out, "gap") || strstr(out, "deleted"), "%s", out);
    free(out);
    free(keep);
    world_drop(&w);
}
END_TEST

int main(void)
{
    if (world_setup())
        return EXIT_FAILURE;
    Suite *s = suite_create("analysts");
    TCase *tc = tcase_create("services");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, analysts_views_answer_the_questions);
    tcase_add_test(tc, roles_analyst_reads_and_triages_only_through_the_function);
    tcase_add_test(tc, roles_writer_runs_the_analyzer_and_cannot_edit_events);
    tcase_add_test(tc, roles_auditor_reads_only);
    tcase_add_test(tc, roles_auditor_export_names_what_it_leaves_out);
    tcase_add_test(tc, retention_drops_old_days_whole_and_records_them);
    suite_add_tcase(s, tc);
    return world_run(s);
}
