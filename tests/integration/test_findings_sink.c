/* test_findings_sink.c: the findings sink part (analyzer/sinks/findings.c)
 * against the real PostgreSQL, driven through st_sink_new/st_sink_write of
 * the detect role, over several batches: a finding's evidence row keeps
 * the late flag of every mention of its event, whatever batch each came in.
 *
 * When one event is named by one finding in two batches with different
 * late flags (the rule: analyzer/runwin.c st_runwin_evidence names late
 * only the event being judged, every other member of its window not late;
 * so does scope_drift's allowlist finding):
 *   - late, then not late: a late event E makes or grows a finding, and a
 *     later on-time event F of the same run grows it again; F's window
 *     holds E and the finding sends its whole window again, E not late.
 *     Every finding a late event joined and that grew afterwards does this.
 *   - not late, then late: E named first as a member of another event's
 *     window, then by its own late judgement. In a clean run a window holds
 *     E only after E was judged, so this needs a redo: after a crash the
 *     batches after the committed cut are in PostgreSQL and their members
 *     in Redis, so E, late again in the redo (its partition's clock is
 *     committed with the offset), reads a window `[ts - window, ts +
 *     window]` that holds those later members and can name the finding
 *     that a later batch had already written naming E not late
 *     (docs/architecture.md, "Why a redone batch changes nothing" and
 *     "Where exactness ends").
 * What a user relies on: finding_events.late and the finding's
 * late_event_count (sql/009_finding_refresh.sql) say "this event arrived
 * late for this finding" once any mention said so, as one batch holding
 * both mentions writes them (st_finding_add_event's duplicates are merged
 * "late if either was"): the order and the batching of the mentions change
 * nothing, and a late row is never turned back. A row that does not change
 * is not rewritten (the statement's WHERE: an UPDATE that changes nothing
 * still writes a row version), checked by its xmin. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyzer.h"
#include "findings.h"
#include "pg.h"
#include "role.h"
#include "sink.h"
#include "world.h"

#define T0 1796164822000000LL /* event time of the finding's first event (us) */

/* One mention of an event in a batch's finding. */
struct mention {
    const char *event_id;
    int late;
};

static struct world w;
static struct st_analyzer_conf conf;
static struct st_sink *sink;
static struct st_sink_batch *batch;

static void setup(void)
{
    char err[512];
    int applied = 0;
    world_init(&w, "fsink");
    PGconn *pg = st_pg_connect(w.dsn, err, sizeof(err));
    ck_assert_msg(pg, "%s", err);
    ck_assert_msg(st_pg_migrate(pg, SANDTRAIL_SOURCE_DIR "/sql", &applied, err,
                                sizeof(err)) == 0,
                  "%s", err);
    PQfinish(pg);
    memset(&conf, 0, sizeof(conf));
    conf.role = ST_ROLE_DETECT;
    conf.pg_dsn = w.dsn;
    snprintf(conf.config_hash, sizeof(conf.config_hash), "fsinktest");
    sink = st_sink_new(&conf, err, sizeof(err));
    ck_assert_msg(sink, "%s", err);
    batch = st_sink_batch_new(sink);
}

static void teardown(void)
{
    st_sink_batch_destroy(batch);
    st_sink_destroy(sink);
    world_drop(&w);
}

/* Writes one batch holding one finding (id from key) that names the
 * mentions in order, through the sink; fails the test on an error. */
static void write_batch(const char *key, const struct mention *m, size_t n)
{
    char id[33], err[512];
    struct st_findings fs;
    st_findings_init(&fs);
    st_finding_id(id, "denial_burst", "task-1", "run-1", key);
    struct st_finding *f = st_findings_update(&fs, id, "denial_burst", 1, ST_SEV_MEDIUM,
                                              "task-1", "run-1", T0, T0 + 1000000,
                                              "a test finding");
    for (size_t i = 0; i < n; i++)
        st_finding_add_event(f, "src", m[i].event_id, m[i].late);
    ck_assert_msg(st_sink_write(sink, batch, &fs, err, sizeof(err)) == ST_SINK_OK, "%s",
                  err);
    st_findings_fini(&fs);
}

/* "event|late" per evidence row of the finding of key, in event order. */
static char *evidence_rows(const char *key)
{
    char id[33], sql[300];
    st_finding_id(id, "denial_burst", "task-1", "run-1", key);
    snprintf(sql, sizeof(sql),
             "SELECT event_id, late FROM finding_events WHERE finding_id = '%s'"
             " ORDER BY event_id",
             id);
    return rows(w.dsn, sql);
}

/* "event_count|late_event_count" of the finding of key. */
static char *counts(const char *key)
{
    char id[33], sql[300];
    st_finding_id(id, "denial_burst", "task-1", "run-1", key);
    snprintf(sql, sizeof(sql),
             "SELECT event_count, late_event_count FROM findings WHERE finding_id = '%s'",
             id);
    return rows(w.dsn, sql);
}

/* The xmin (the transaction that wrote the row version) of one evidence
 * row of the finding of key. */
static char *row_version(const char *key, const char *event_id)
{
    char id[33], sql[300];
    st_finding_id(id, "denial_burst", "task-1", "run-1", key);
    snprintf(sql, sizeof(sql),
             "SELECT xmin FROM finding_events WHERE finding_id = '%s' AND event_id = '%s'",
             id, event_id);
    return rows(w.dsn, sql);
}

static void assert_text(char *got, const char *want, const char *what)
{
    ck_assert_msg(strcmp(got, want) == 0, "%s: got \"%s\", want \"%s\"", what, got, want);
    free(got);
}

/* E named not late in batch 1 (a member of another event's window), late
 * in batch 2 (its own judgement, in a redo): the row becomes late, the
 * finding counts one late event, as a finding written in one batch with
 * both mentions does; the row of F, named not late twice, is not
 * rewritten. */
START_TEST(findings_sink_row_named_late_later_becomes_late)
{
    const struct mention b1[] = {{"E", 0}, {"F", 0}};
    const struct mention b2[] = {{"E", 1}, {"F", 0}, {"G", 0}};
    write_batch("grow", b1, 2);
    assert_text(evidence_rows("grow"), "E|f\nF|f\n", "after batch 1, evidence");
    assert_text(counts("grow"), "2|0\n", "after batch 1, event_count|late_event_count");
    char *f_version = row_version("grow", "F");

    write_batch("grow", b2, 3);
    assert_text(evidence_rows("grow"), "E|t\nF|f\nG|f\n", "after batch 2, evidence");
    assert_text(counts("grow"), "3|1\n", "after batch 2, event_count|late_event_count");
    assert_text(row_version("grow", "F"), f_version, "F's row version after batch 2");
    free(f_version);

    /* the same mentions in one batch */
    const struct mention one[] = {{"E", 0}, {"F", 0}, {"E", 1}, {"F", 0}, {"G", 0}};
    write_batch("one", one, 5);
    assert_text(evidence_rows("one"), "E|t\nF|f\nG|f\n", "one batch, evidence");
    assert_text(counts("one"), "3|1\n", "one batch, event_count|late_event_count");
}
END_TEST

/* E named late in batch 1 (its own judgement), not late in batch 2 (a
 * member of a later on-time event's window): the row stays late, the
 * finding still counts one late event, and E's row is not rewritten. */
START_TEST(findings_sink_late_row_stays_late)
{
    const struct mention b1[] = {{"E", 1}, {"F", 0}};
    const struct mention b2[] = {{"E", 0}, {"F", 0}, {"G", 0}};
    write_batch("keep", b1, 2);
    assert_text(evidence_rows("keep"), "E|t\nF|f\n", "after batch 1, evidence");
    assert_text(counts("keep"), "2|1\n", "after batch 1, event_count|late_event_count");
    char *e_version = row_version("keep", "E");

    write_batch("keep", b2, 3);
    assert_text(evidence_rows("keep"), "E|t\nF|f\nG|f\n", "after batch 2, evidence");
    assert_text(counts("keep"), "3|1\n", "after batch 2, event_count|late_event_count");
    assert_text(row_version("keep", "E"), e_version, "E's row version after batch 2");
    free(e_version);
}
END_TEST

/* Stores event id of source "src" at T0 + sec seconds (a row as the events
 * sink writes it, the columns the refresh reads set). */
static void store_event(const char *id, int sec, const char *trace, const char *target,
                        int skewed)
{
    char sql[1024], tr[64];
    if (trace)
        snprintf(tr, sizeof(tr), "'%s'", trace);
    else
        snprintf(tr, sizeof(tr), "NULL");
    snprintf(sql, sizeof(sql),
             "INSERT INTO events (source_name, event_id, source_kind, ts, task_id, run_id,"
             " trace_id, type, decision, target, body, kafka_topic, kafka_partition,"
             " kafka_offset, skewed) VALUES ('src', '%s', 'proxy',"
             " to_timestamp(%lld / 1e6) + interval '%d seconds', 'task-1', 'run-1', %s,"
             " 'request', 'deny', '%s', '{}', 't', 0, 0, %s) RETURNING 1",
             id, (long long)T0, sec, tr, target, skewed ? "true" : "false");
    free(rows(w.dsn, sql));
}

/* 1 when the finding of key holds exactly what sql/009's refresh, a join
 * of its rows to the stored events, makes of them: counts, window and
 * evidence. */
static int as_the_join_makes(const char *key)
{
    char id[33], sql[2048];
    st_finding_id(id, "denial_burst", "task-1", "run-1", key);
    snprintf(sql, sizeof(sql),
             "SELECT f.event_count = s.n AND f.late_event_count = s.late"
             " AND f.skewed_event_count = s.skewed"
             " AND f.evidence = jsonb_build_object('event_ids', s.ids, 'trace_ids',"
             "  s.traces, 'targets', s.targets)"
             " FROM findings f, (SELECT count(*)::int AS n,"
             "  (count(*) FILTER (WHERE fe.late))::int AS late,"
             "  (count(*) FILTER (WHERE e.skewed))::int AS skewed,"
             "  jsonb_agg(fe.event_id ORDER BY e.ts, fe.event_id) AS ids,"
             "  coalesce(jsonb_agg(DISTINCT e.trace_id) FILTER (WHERE e.trace_id IS NOT NULL),"
             "   '[]') AS traces,"
             "  coalesce(jsonb_agg(DISTINCT e.target) FILTER (WHERE e.target <> ''), '[]')"
             "   AS targets"
             "  FROM finding_events fe LEFT JOIN events e USING (source_name, event_id)"
             "  WHERE fe.finding_id = '%s') s WHERE f.finding_id = '%s'",
             id, id);
    char *got = rows(w.dsn, sql);
    int same = strcmp(got, "t\n") == 0;
    free(got);
    return same;
}

/* Empties the event values of the row of finding id naming event_id (as
 * an analyzer before sql/011 left it, or a detect analyzer before its
 * event was stored), when event_id is not NULL; else of all its rows. */
static void clear_values(const char *id, const char *event_id)
{
    char sql[512];
    snprintf(sql, sizeof(sql),
             "UPDATE finding_events SET event_ts = NULL, event_trace_id = NULL,"
             " event_target = NULL, event_skewed = NULL WHERE finding_id = '%s'"
             " AND event_id = coalesce(%s%s%s, event_id) RETURNING 1",
             id, event_id ? "'" : "", event_id ? event_id : "NULL", event_id ? "'" : "");
    free(rows(w.dsn, sql));
}

/* Each finding_events row carries its event's time, trace id, target and
 * skew (sql/011), so that the refresh of a finding updated again does not
 * look its whole window up in the events again; and the finding comes
 * out as the join of sql/009 makes it, whoever wrote its rows (but for an
 * id stored twice, below, and an event retention removed: sql/011):
 *   - events stored before the finding: their rows get their values;
 *   - an event stored after (a detect analyzer ahead of the store): its
 *     row has none, the refresh looks it up; the finding's next write
 *     gives the row its values;
 *   - a row without them (written before the migration): the refresh
 *     looks it up; with them, it does not (a value differing from the
 *     event's, put there by hand, is what the refresh reads). */
START_TEST(findings_sink_rows_carry_their_events_values)
{
    store_event("A", 2, "t1", "h1", 0);
    store_event("B", 1, NULL, "h2", 1);
    const struct mention m[] = {{"A", 0}, {"B", 0}, {"C", 0}};
    write_batch("cache", m, 3);
    char id[33], sql[512];
    st_finding_id(id, "denial_burst", "task-1", "run-1", "cache");
    snprintf(sql, sizeof(sql),
             "SELECT event_id, extract(epoch FROM event_ts - to_timestamp(%lld / 1e6)),"
             " event_trace_id, event_target, event_skewed FROM finding_events"
             " WHERE finding_id = '%s' ORDER BY event_id",
             (long long)T0, id);
    assert_text(rows(w.dsn, sql), "A|2.000000|t1|h1|f\nB|1.000000|NULL|h2|t\nC|NULL|NULL|NULL|NULL\n",
                "the rows' values, C not stored yet");
    ck_assert(as_the_join_makes("cache"));

    store_event("C", 0, "t3", "h3", 0); /* stored after: the earliest */
    char call[256];
    snprintf(call, sizeof(call), "SELECT sandtrail_refresh_findings(ARRAY['%s'])", id);
    free(rows(w.dsn, call));
    ck_assert(as_the_join_makes("cache")); /* C looked up: first in time */
    write_batch("cache", m, 3);
    assert_text(rows(w.dsn, sql), "A|2.000000|t1|h1|f\nB|1.000000|NULL|h2|t\nC|0.000000|t3|h3|f\n",
                "the rows' values after the next write");
    ck_assert(as_the_join_makes("cache"));

    /* A's row as an analyzer before sql/011 left it: looked up */
    char upd[512];
    clear_values(id, "A");
    free(rows(w.dsn, call));
    ck_assert(as_the_join_makes("cache"));
    /* B's row holds its values: read from the row, not the event */
    snprintf(upd, sizeof(upd),
             "UPDATE finding_events SET event_target = 'from-the-row'"
             " WHERE finding_id = '%s' AND event_id = 'B' RETURNING 1",
             id);
    free(rows(w.dsn, upd));
    free(rows(w.dsn, call));
    snprintf(upd, sizeof(upd), "SELECT evidence -> 'targets' FROM findings WHERE finding_id = '%s'",
             id);
    assert_text(rows(w.dsn, upd), "[\"from-the-row\", \"h1\", \"h3\"]\n", "targets");
}
END_TEST

/* An event id stored with two times (the events' key holds ts: a source
 * that sent one id twice with different times): the finding naming it is
 * written -- two looked-up rows for one evidence row would make the
 * statement update a row twice, an error that retried the batch for good
 * -- and the row is one event, at the earlier time, in the counts and
 * evidence too, also when the refresh looks it up. */
START_TEST(findings_sink_event_id_stored_twice_is_one_event)
{
    store_event("D", 5, "t5", "h5", 0);
    store_event("D", 3, "t4", "h4", 0);
    const struct mention m[] = {{"D", 0}};
    write_batch("dup", m, 1);
    char id[33], sql[512];
    st_finding_id(id, "denial_burst", "task-1", "run-1", "dup");
    snprintf(sql, sizeof(sql),
             "SELECT extract(epoch FROM fe.event_ts - to_timestamp(%lld / 1e6)),"
             " fe.event_target, f.event_count, f.evidence::text FROM finding_events fe"
             " JOIN findings f USING (finding_id) WHERE finding_id = '%s'",
             (long long)T0, id);
    const char *want = "3.000000|h4|1|{\"targets\": [\"h4\"], \"event_ids\": [\"D\"],"
                       " \"trace_ids\": [\"t4\"]}\n";
    assert_text(rows(w.dsn, sql), want, "the row and its finding");
    char call[256];
    clear_values(id, NULL);
    snprintf(call, sizeof(call), "SELECT sandtrail_refresh_findings(ARRAY['%s'])", id);
    free(rows(w.dsn, call));
    snprintf(sql, sizeof(sql),
             "SELECT event_count, evidence::text FROM findings WHERE finding_id = '%s'", id);
    assert_text(rows(w.dsn, sql),
                "1|{\"targets\": [\"h4\"], \"event_ids\": [\"D\"], \"trace_ids\": [\"t4\"]}\n",
                "looked up by the refresh");
}
END_TEST

int main(void)
{
    if (world_setup())
        return EXIT_FAILURE;
    Suite *s = suite_create("findings_sink");
    TCase *tc = tcase_create("findings_sink");
    tcase_set_timeout(tc, 120);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, findings_sink_row_named_late_later_becomes_late);
    tcase_add_test(tc, findings_sink_late_row_stays_late);
    tcase_add_test(tc, findings_sink_rows_carry_their_events_values);
    tcase_add_test(tc, findings_sink_event_id_stored_twice_is_one_event);
    suite_add_tcase(s, tc);
    return world_run(s);
}
