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

/* Parameter arrays reused across findings; config_hash copied from the
 * configuration. */
struct findings_part {
    char *config_hash;
    /* analyzer.role=detect: the events are stored by another analyzer,
     * whose refresh this one's must not miss (sinks/refresh.h) */
    int lock;
    struct st_buf a1, a2, a3;
};

static const char *sql_finding =
    "INSERT INTO findings (finding_id, detector, detector_version, config_hash,"
    " severity, task_id, run_id, first_seen, last_seen, event_count, evidence,"
    " summary)"
    " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 0, '{}', $10)"
    " ON CONFLICT (finding_id) DO UPDATE SET"
    " severity = GREATEST(findings.severity, EXCLUDED.severity),"
    " first_seen = LEAST(findings.first_seen, EXCLUDED.first_seen),"
    " last_seen = GREATEST(findings.last_seen, EXCLUDED.last_seen),"
    " detector_version = EXCLUDED.detector_version,"
    " config_hash = EXCLUDED.config_hash,"
    " summary = EXCLUDED.summary,"
    " updated_at = now()";

static const char *sql_finding_events =
    "INSERT INTO finding_events (finding_id, source_name, event_id, late)"
    " SELECT $1, s, e, bool_or(l) FROM unnest($2::text[], $3::text[], $4::boolean[])"
    "  AS u(s, e, l) GROUP BY s, e"
    " ON CONFLICT (finding_id, source_name, event_id)"
    " DO UPDATE SET late = finding_events.late OR EXCLUDED.late";

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
    st_buf_fini(&p->a1);
    st_buf_fini(&p->a2);
    st_buf_fini(&p->a3);
    free(p);
}

/* Queues the two statements of one finding (upsert, its evidence rows) on
 * the pipeline. libpq copies the parameters as it queues, so the arrays
 * are reused for the next finding. Returns 0, or -1 when the connection
 * refused to queue. */
static int queue_finding(struct findings_part *s, PGconn *pg, const struct st_finding *f)
{
    char version[16], first[40], last[40];
    snprintf(version, sizeof(version), "%d", f->detector_version);
    st_time_format(f->first_us, first, sizeof(first));
    st_time_format(f->last_us, last, sizeof(last));
    const char *p[10] = {f->id,     f->detector, version,    s->config_hash,
                         st_severity_name(f->severity), f->task_id, f->run_id,
                         first,     last,        f->summary};
    if (!PQsendQueryParams(pg, sql_finding, 10, NULL, p, NULL, NULL, 0))
        return -1;

    st_buf_reset(&s->a1);
    st_buf_reset(&s->a2);
    st_buf_reset(&s->a3);
    for (size_t i = 0; i < f->nevents; i++) {
        st_pg_array_add(&s->a1, f->events[i].source_name);
        st_pg_array_add(&s->a2, f->events[i].event_id);
        st_pg_array_add(&s->a3, f->events[i].late ? "t" : "f");
    }
    st_pg_array_end(&s->a1);
    st_pg_array_end(&s->a2);
    st_pg_array_end(&s->a3);
    const char *pe[4] = {f->id, s->a1.data, s->a2.data, s->a3.data};
    return PQsendQueryParams(pg, sql_finding_events, 4, NULL, pe, NULL, NULL, 0) ? 0 : -1;
}

/* Queues the refresh of what follows from the evidence rows (count,
 * window, evidence) of every finding of the batch: one statement, after
 * all their rows (a finding's refresh reads only its own). */
static int queue_refresh(struct findings_part *s, PGconn *pg,
                         const struct st_findings *fs)
{
    st_buf_reset(&s->a1);
    for (size_t i = 0; i < fs->n; i++)
        st_pg_array_add(&s->a1, fs->items[i].id);
    st_pg_array_end(&s->a1);
    const char *pr[1] = {s->a1.data};
    return PQsendQueryParams(pg, sql_finding_refresh, 1, NULL, pr, NULL, NULL, 0) ? 0 : -1;
}

/* Every finding of the batch in one round trip (libpq's pipeline mode,
 * inside the batch's transaction): two statements per finding and one
 * refresh of them all, run by the server in order. The first error is
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
    for (size_t i = 0; i < fs->n && rc == ST_SINK_OK; i++)
        if (queue_finding(state, pg, &fs->items[i]))
            rc = ST_SINK_RETRY;
    if (rc == ST_SINK_OK && queue_refresh(state, pg, fs))
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
