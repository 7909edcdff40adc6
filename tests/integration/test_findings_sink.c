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
    suite_add_tcase(s, tc);
    return world_run(s);
}
