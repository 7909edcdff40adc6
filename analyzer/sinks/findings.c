/* findings.c: the sink part that upserts findings (see findings.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "log.h"
#include "pg.h"
#include "role.h"
#include "sinks/findings.h"
#include "sinks/refresh.h"
#include "timeutil.h"

/* The batch's findings as parameter arrays (one element per finding, or
 * per evidence row), reused across batches; config_hash copied from the
 * configuration. */
enum { F_ID, F_DETECTOR, F_VERSION, F_SEVERITY, F_TASK, F_RUN, F_FIRST, F_LAST, F_SUMMARY,
       F_N };
enum { E_FINDING, E_SOURCE, E_EVENT, E_LATE, E_N };
struct findings_part {
    char *config_hash;
    /* analyzer.role=detect: the events are stored by another analyzer,
     * whose refresh this one's must not miss (sinks/refresh.h) */
    int lock;
    struct st_buf f[F_N], e[E_N], ids;
};

/* Every finding of the batch in one statement: a statement per finding
 * (parsed and planned each time) was most of PostgreSQL's time on a
 * stream with many findings (docs/architecture.md, "Findings per batch,
 * not per finding"). The ids of one batch are distinct (findings.h), as
 * ON CONFLICT DO UPDATE needs; ordered, so rows are locked in id order. */
static const char *sql_finding =
    "INSERT INTO findings (finding_id, detector, detector_version, config_hash,"
    " severity, task_id, run_id, first_seen, last_seen, event_count, evidence,"
    " summary)"
    " SELECT u.id, u.detector, u.version, $10, u.severity::severity, u.task, u.run,"
    "  u.first, u.last, 0, '{}', u.summary"
    " FROM unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::text[], $6::text[],"
    "  $7::timestamptz[], $8::timestamptz[], $9::text[])"
    "  AS u(id, detector, version, severity, task, run, first, last, summary)"
    " ORDER BY u.id"
    " ON CONFLICT (finding_id) DO UPDATE SET"
    " severity = GREATEST(findings.severity, EXCLUDED.severity),"
    " first_seen = LEAST(findings.first_seen, EXCLUDED.first_seen),"
    " last_seen = GREATEST(findings.last_seen, EXCLUDED.last_seen),"
    " detector_version = EXCLUDED.detector_version,"
    " config_hash = EXCLUDED.config_hash,"
    " summary = EXCLUDED.summary,"
    " updated_at = now()";

/* Every evidence row of the batch's findings in one statement; an event
 * seen twice for one finding is one row, late if either was. A finding
 * updated again sends its whole window again: a row already there is
 * rewritten only when it becomes late, or when it gets its event's values
 * (an UPDATE that changes nothing still writes a new row version, its
 * index entries and WAL). Each row carries its event's time, trace id,
 * target and skew (sql/011_finding_events_cache.sql), which the refresh
 * reads instead of joining the events again: looked up here only for a
 * row not already holding them, NULL when the event is not stored yet
 * (the store role's refresh fills them then). The lateral subquery's
 * LIMIT keeps it from being pulled up into a plain join, so that its gate
 * (the NOT EXISTS, outer values only) is a one-time filter before its
 * index scans, not a join filter after them; and it takes one row of an
 * event id stored twice (the events' key holds ts: a source that sent
 * one id with two times), the earliest -- two would make the statement
 * update one row twice, an error that would retry the batch for good. */
static const char *sql_finding_events =
    "INSERT INTO finding_events (finding_id, source_name, event_id, late, event_ts,"
    " event_trace_id, event_target, event_skewed)"
    " SELECT u.f, u.s, u.e, u.l, ev.ts, ev.trace_id, ev.target, ev.skewed"
    " FROM (SELECT f, s, e, bool_or(l) AS l"
    "       FROM unnest($1::text[], $2::text[], $3::text[], $4::boolean[]) AS u(f, s, e, l)"
    "       GROUP BY f, s, e) u"
    " LEFT JOIN LATERAL (SELECT x.ts, x.trace_id, x.target, x.skewed FROM events x"
    "   WHERE NOT EXISTS (SELECT 1 FROM finding_events k WHERE k.finding_id = u.f"
    "                     AND k.source_name = u.s AND k.event_id = u.e"
    "                     AND k.event_ts IS NOT NULL)"
    "     AND x.source_name = u.s AND x.event_id = u.e ORDER BY x.ts LIMIT 1) ev ON true"
    " ORDER BY u.f, u.s, u.e"
    " ON CONFLICT (finding_id, source_name, event_id)"
    " DO UPDATE SET late = finding_events.late OR EXCLUDED.late,"
    "  event_ts = coalesce(finding_events.event_ts, EXCLUDED.event_ts),"
    "  event_trace_id = CASE WHEN finding_events.event_ts IS NULL"
    "   THEN EXCLUDED.event_trace_id ELSE finding_events.event_trace_id END,"
    "  event_target = CASE WHEN finding_events.event_ts IS NULL"
    "   THEN EXCLUDED.event_target ELSE finding_events.event_target END,"
    "  event_skewed = CASE WHEN finding_events.event_ts IS NULL"
    "   THEN EXCLUDED.event_skewed ELSE finding_events.event_skewed END"
    " WHERE (EXCLUDED.late AND NOT finding_events.late)"
    "  OR (finding_events.event_ts IS NULL AND EXCLUDED.event_ts IS NOT NULL)";

/* count, window and evidence follow from finding_events, so they come out
 * the same however often and in whatever batches the events were seen
 * (sql/009_finding_refresh.sql) */
static const char *sql_finding_refresh = "SELECT sandtrail_refresh_findings($1::text[])";

static void *findings_create(const struct st_analyzer_conf *conf, char *errstr,
                             size_t errsz)
{
    struct findings_part *p = st_calloc(1, sizeof(*p));
    p->config_hash = st_strdup(conf->config_hash);
    p->lock = conf->role == ST_ROLE_DETECT;
    return p;
}

static int findings_prepare(void *state, PGconn *pg, char *errstr, size_t errsz)
{
    struct findings_part *p = state;
    return p->lock ? st_pg_exec(pg, ST_REFRESH_ISOLATION, errstr, errsz) : 0;
}

static void findings_destroy(void *state)
{
    struct findings_part *p = state;
    if (!p)
        return;
    free(p->config_hash);
    for (int i = 0; i < F_N; i++)
        st_buf_fini(&p->f[i]);
    for (int i = 0; i < E_N; i++)
        st_buf_fini(&p->e[i]);
    st_buf_fini(&p->ids);
    free(p);
}

/* Queues the batch's three statements on the pipeline: the findings'
 * upsert, their evidence rows, and the refresh of what follows from those
 * rows (count, window, evidence; a finding's refresh reads only its own).
 * libpq copies the parameters as it queues. Returns 0, or -1 when the
 * connection refused to queue. */
static int queue_findings(struct findings_part *s, PGconn *pg, const struct st_findings *fs)
{
    for (int i = 0; i < F_N; i++)
        st_buf_reset(&s->f[i]);
    for (int i = 0; i < E_N; i++)
        st_buf_reset(&s->e[i]);
    st_buf_reset(&s->ids);
    for (size_t k = 0; k < fs->n; k++) {
        const struct st_finding *f = &fs->items[k];
        char version[16], first[40], last[40];
        snprintf(version, sizeof(version), "%d", f->detector_version);
        st_time_format(f->first_us, first, sizeof(first));
        st_time_format(f->last_us, last, sizeof(last));
        st_pg_array_add(&s->f[F_ID], f->id);
        st_pg_array_add(&s->f[F_DETECTOR], f->detector);
        st_pg_array_add(&s->f[F_VERSION], version);
        st_pg_array_add(&s->f[F_SEVERITY], st_severity_name(f->severity));
        st_pg_array_add(&s->f[F_TASK], f->task_id);
        st_pg_array_add(&s->f[F_RUN], f->run_id);
        st_pg_array_add(&s->f[F_FIRST], first);
        st_pg_array_add(&s->f[F_LAST], last);
        st_pg_array_add(&s->f[F_SUMMARY], f->summary ? f->summary : "");
        for (size_t i = 0; i < f->nevents; i++) {
            st_pg_array_add(&s->e[E_FINDING], f->id);
            st_pg_array_add(&s->e[E_SOURCE], f->events[i].source_name);
            st_pg_array_add(&s->e[E_EVENT], f->events[i].event_id);
            st_pg_array_add(&s->e[E_LATE], f->events[i].late ? "t" : "f");
        }
        st_pg_array_add(&s->ids, f->id);
    }
    for (int i = 0; i < F_N; i++)
        st_pg_array_end(&s->f[i]);
    for (int i = 0; i < E_N; i++)
        st_pg_array_end(&s->e[i]);
    st_pg_array_end(&s->ids);
    const char *pf[10];
    for (int i = 0; i < F_N; i++)
        pf[i] = s->f[i].data;
    pf[F_N] = s->config_hash;
    const char *pe[E_N];
    for (int i = 0; i < E_N; i++)
        pe[i] = s->e[i].data;
    const char *pr[1] = {s->ids.data};
    return PQsendQueryParams(pg, sql_finding, 10, NULL, pf, NULL, NULL, 0) &&
                   PQsendQueryParams(pg, sql_finding_events, E_N, NULL, pe, NULL, NULL, 0) &&
                   PQsendQueryParams(pg, sql_finding_refresh, 1, NULL, pr, NULL, NULL, 0)
               ? 0
               : -1;
}

/* Every finding of the batch in one round trip (libpq's pipeline mode,
 * inside the batch's transaction): three statements, run by the server in
 * order. The first error is
 * the part's, with its class; the statements after it are aborted by the
 * server and the transaction is rolled back by the sink. */
static int findings_write(void *state, void *batch, PGconn *pg, struct st_sink_txn *tx,
                          char *errstr, size_t errsz)
{
    const struct st_findings *fs = tx->fs;
    struct findings_part *p = state;
    int rc = ST_SINK_OK;
    (void)batch;
    if (fs->n == 0)
        return ST_SINK_OK;
    if (p->lock && (rc = st_sink_result(PQexec(pg, ST_REFRESH_LOCK),
                                        "could not lock the findings' refresh", errstr,
                                        errsz)))
        return rc;
    if (!PQenterPipelineMode(pg)) {
        snprintf(errstr, errsz, "could not upsert findings: %s", PQerrorMessage(pg));
        return ST_SINK_RETRY;
    }
    if (queue_findings(p, pg, fs))
        rc = ST_SINK_RETRY;
    if (rc || !PQpipelineSync(pg)) {
        snprintf(errstr, errsz, "could not upsert findings: %s", PQerrorMessage(pg));
        PQexitPipelineMode(pg); /* fails while results are pending: the
                                 * sink then drops the connection */
        return ST_SINK_RETRY;
    }
    /* one result (then NULL) per statement, then the sync's */
    for (;;) {
        PGresult *res = PQgetResult(pg);
        if (!res) {
            if (PQstatus(pg) != CONNECTION_OK) {
                snprintf(errstr, errsz, "could not upsert findings: %s", PQerrorMessage(pg));
                return ST_SINK_RETRY;
            }
            continue; /* the end of one statement's results */
        }
        ExecStatusType st = PQresultStatus(res);
        if (st == PGRES_PIPELINE_SYNC) {
            PQclear(res);
            break;
        }
        if (st == PGRES_PIPELINE_ABORTED) {
            PQclear(res);
            continue;
        }
        char later[256]; /* an error after the first one is not reported */
        int one = st_sink_result(res, "could not upsert a finding", rc ? later : errstr,
                                 rc ? sizeof(later) : errsz);
        if (one && !rc)
            rc = one;
    }
    if (!PQexitPipelineMode(pg) && rc == ST_SINK_OK) {
        snprintf(errstr, errsz, "could not upsert findings: %s", PQerrorMessage(pg));
        rc = ST_SINK_RETRY;
    }
    return rc;
}

const struct st_sink_part_ops st_sink_findings = {
    .name = "findings",
    .create = findings_create,
    .destroy = findings_destroy,
    .prepare = findings_prepare,
    .write = findings_write,
};
