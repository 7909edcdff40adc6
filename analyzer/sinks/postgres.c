/* postgres.c: the analyzer's PostgreSQL sink (see postgres.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "log.h"
#include "pg.h"
#include "postgres.h"
#include "timeutil.h"

struct st_pgsink {
    PGconn *pg;
    char *dsn;
    char *config_hash;
    struct st_buf copy;
    struct st_buf a1, a2, a3;
};

static const char *sql_stage =
    "CREATE TEMP TABLE IF NOT EXISTS events_stage"
    " (LIKE events INCLUDING DEFAULTS) ON COMMIT DELETE ROWS";

#define EVENT_COLS                                                              \
    "source_name, event_id, source_kind, source_platform, ts, task_id, run_id, " \
    "trace_id, type, decision, reason, target, body, kafka_topic, "             \
    "kafka_partition, kafka_offset"

static const char *sql_copy = "COPY events_stage (" EVENT_COLS ") FROM STDIN";
static const char *sql_copy_direct = "COPY events (" EVENT_COLS ") FROM STDIN";

static const char *sql_move =
    "INSERT INTO events (" EVENT_COLS ") SELECT " EVENT_COLS
    " FROM events_stage ON CONFLICT (source_name, event_id) DO NOTHING";

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
 * the same however often and in whatever batches the events were seen */
static const char *sql_finding_refresh =
    "UPDATE findings f SET event_count = s.n, late_event_count = s.late,"
    " first_seen = LEAST(f.first_seen, s.first),"
    " last_seen = GREATEST(f.last_seen, s.last),"
    " evidence = jsonb_build_object('event_ids', s.ids, 'trace_ids', s.traces,"
    "   'targets', s.targets)"
    " FROM (SELECT count(*)::int AS n, (count(*) FILTER (WHERE fe.late))::int AS late,"
    "   min(e.ts) AS first, max(e.ts) AS last,"
    "   jsonb_agg(fe.event_id ORDER BY e.ts, fe.event_id) AS ids,"
    "   coalesce(jsonb_agg(DISTINCT e.trace_id) FILTER (WHERE e.trace_id IS NOT NULL),"
    "     '[]') AS traces,"
    "   coalesce(jsonb_agg(DISTINCT e.target) FILTER (WHERE e.target <> ''),"
    "     '[]') AS targets"
    "  FROM finding_events fe LEFT JOIN events e USING (source_name, event_id)"
    "  WHERE fe.finding_id = $1) s"
    " WHERE f.finding_id = $1";

static int sink_connect(struct st_pgsink *s, char *errstr, size_t errsz)
{
    char err[512];
    if (s->pg)
        PQfinish(s->pg);
    s->pg = st_pg_connect(s->dsn, errstr, errsz);
    if (!s->pg)
        return -1;
    if (st_pg_exec(s->pg, sql_stage, err, sizeof(err))) {
        snprintf(errstr, errsz, "could not create the staging table: %s", err);
        PQfinish(s->pg);
        s->pg = NULL;
        return -1;
    }
    return 0;
}

struct st_pgsink *st_pgsink_new(const char *dsn, const char *config_hash,
                                char *errstr, size_t errsz)
{
    struct st_pgsink *s = st_calloc(1, sizeof(*s));
    s->dsn = st_strdup(dsn);
    s->config_hash = st_strdup(config_hash);
    if (sink_connect(s, errstr, errsz)) {
        st_pgsink_destroy(s);
        return NULL;
    }
    return s;
}

void st_pgsink_destroy(struct st_pgsink *s)
{
    if (!s)
        return;
    if (s->pg)
        PQfinish(s->pg);
    free(s->dsn);
    free(s->config_hash);
    st_buf_fini(&s->copy);
    st_buf_fini(&s->a1);
    st_buf_fini(&s->a2);
    st_buf_fini(&s->a3);
    free(s);
}

/* COPY text format: backslash, tab, newline and carriage return escaped. */
static void copy_field(struct st_buf *b, const char *v, size_t len, int last)
{
    if (!v) {
        st_buf_adds(b, "\\N");
    } else {
        for (size_t i = 0; i < len; i++) {
            switch (v[i]) {
            case '\\': st_buf_adds(b, "\\\\"); break;
            case '\t': st_buf_adds(b, "\\t"); break;
            case '\n': st_buf_adds(b, "\\n"); break;
            case '\r': st_buf_adds(b, "\\r"); break;
            default: st_buf_addc(b, v[i]); break;
            }
        }
    }
    st_buf_addc(b, last ? '\n' : '\t');
}

static void copy_str(struct st_buf *b, const char *v)
{
    copy_field(b, v, v ? strlen(v) : 0, 0);
}

static void copy_row(struct st_buf *b, const struct st_sink_event *se)
{
    const struct st_event *ev = se->ev;
    const rd_kafka_message_t *m = se->msg;
    char ts[40], num[24];

    copy_str(b, ev->source_name);
    copy_str(b, ev->event_id);
    copy_str(b, st_source_kind_name(ev->source_kind));
    copy_str(b, ev->source_platform);
    st_time_format(ev->ts_us, ts, sizeof(ts));
    copy_str(b, ts);
    copy_str(b, ev->task_id);
    copy_str(b, ev->run_id);
    copy_str(b, ev->trace_id);
    copy_str(b, st_event_type_name(ev->type));
    copy_str(b, st_decision_name(ev->decision));
    copy_str(b, ev->reason);
    copy_str(b, st_event_target(ev));
    copy_field(b, m->payload, m->len, 0);
    copy_str(b, rd_kafka_topic_name(m->rkt));
    snprintf(num, sizeof(num), "%" PRId32, m->partition);
    copy_str(b, num);
    snprintf(num, sizeof(num), "%" PRId64, m->offset);
    copy_field(b, num, strlen(num), 1);
}

static int result_ok(PGresult *res, const char *what, char *errstr, size_t errsz)
{
    ExecStatusType st = PQresultStatus(res);
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
        PQclear(res);
        return 0;
    }
    snprintf(errstr, errsz, "%s: %s", what, PQresultErrorMessage(res));
    size_t n = strlen(errstr);
    if (n && errstr[n - 1] == '\n')
        errstr[n - 1] = '\0';
    PQclear(res);
    return -1;
}

void st_pgsink_stage(struct st_pgsink *s, const struct st_sink_event *evs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        copy_row(&s->copy, &evs[i]);
}

static int copy_rows(struct st_pgsink *s, const char *sql, char *errstr, size_t errsz)
{
    PGresult *res = PQexec(s->pg, sql);
    if (PQresultStatus(res) != PGRES_COPY_IN)
        return result_ok(res, "could not start COPY of events", errstr, errsz);
    PQclear(res);
    if (PQputCopyData(s->pg, s->copy.data, (int)s->copy.len) != 1 ||
        PQputCopyEnd(s->pg, NULL) != 1) {
        snprintf(errstr, errsz, "COPY of events failed: %s", PQerrorMessage(s->pg));
        return -1;
    }
    res = PQgetResult(s->pg);
    if (PQresultStatus(res) == PGRES_FATAL_ERROR) {
        const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        int dup = state && strcmp(state, "23505") == 0;
        result_ok(res, "COPY of events failed", errstr, errsz);
        while ((res = PQgetResult(s->pg)))
            PQclear(res);
        return dup ? 1 : -1;
    }
    int rc = result_ok(res, "COPY of events failed", errstr, errsz);
    while ((res = PQgetResult(s->pg)))
        PQclear(res);
    return rc;
}

/* Rows usually are new: COPY them straight into events. Only a replay
 * brings rows already there; then the COPY fails on the primary key, and the
 * batch goes through the staging table and INSERT ... ON CONFLICT DO
 * NOTHING instead. The savepoint keeps the transaction usable. */
static int write_events(struct st_pgsink *s, char *errstr, size_t errsz)
{
    char err[512];
    if (s->copy.len == 0)
        return 0;
    if (st_pg_exec(s->pg, "SAVEPOINT copy_direct", err, sizeof(err))) {
        snprintf(errstr, errsz, "could not set a savepoint: %s", err);
        return -1;
    }
    int rc = copy_rows(s, sql_copy_direct, errstr, errsz);
    if (rc <= 0)
        return rc;
    if (st_pg_exec(s->pg, "ROLLBACK TO SAVEPOINT copy_direct", err, sizeof(err))) {
        snprintf(errstr, errsz, "could not roll back to the savepoint: %s", err);
        return -1;
    }
    if (copy_rows(s, sql_copy, errstr, errsz))
        return -1;
    return result_ok(PQexec(s->pg, sql_move), "could not insert events", errstr, errsz);
}

static int write_finding(struct st_pgsink *s, const struct st_finding *f,
                         char *errstr, size_t errsz)
{
    char version[16], first[40], last[40];
    snprintf(version, sizeof(version), "%d", f->detector_version);
    st_time_format(f->first_us, first, sizeof(first));
    st_time_format(f->last_us, last, sizeof(last));
    const char *p[10] = {f->id,     f->detector, version,    s->config_hash,
                         st_severity_name(f->severity), f->task_id, f->run_id,
                         first,     last,        f->summary};
    if (result_ok(PQexecParams(s->pg, sql_finding, 10, NULL, p, NULL, NULL, 0),
                  "could not upsert finding", errstr, errsz))
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
    if (result_ok(PQexecParams(s->pg, sql_finding_events, 4, NULL, pe, NULL, NULL, 0),
                  "could not record finding evidence", errstr, errsz))
        return -1;
    const char *pr[1] = {f->id};
    return result_ok(PQexecParams(s->pg, sql_finding_refresh, 1, NULL, pr, NULL, NULL, 0),
                     "could not refresh finding", errstr, errsz);
}

int st_pgsink_write(struct st_pgsink *s, const struct st_findings *fs, char *errstr,
                    size_t errsz)
{
    char err[512];

    if ((!s->pg || PQstatus(s->pg) != CONNECTION_OK) &&
        sink_connect(s, errstr, errsz))
        return -1;
    if (st_pg_exec(s->pg, "BEGIN", err, sizeof(err))) {
        snprintf(errstr, errsz, "could not begin a transaction: %s", err);
        goto fail;
    }
    if (s->copy.len == 0 && fs->n == 0)
        return 0;
    if (write_events(s, errstr, errsz))
        goto fail;
    for (size_t i = 0; i < fs->n; i++)
        if (write_finding(s, &fs->items[i], errstr, errsz))
            goto fail;
    if (st_pg_exec(s->pg, "COMMIT", err, sizeof(err))) {
        snprintf(errstr, errsz, "could not commit: %s", err);
        goto fail;
    }
    st_buf_reset(&s->copy);
    return 0;
fail:
    st_pg_exec(s->pg, "ROLLBACK", err, sizeof(err));
    if (PQstatus(s->pg) != CONNECTION_OK) {
        PQfinish(s->pg);
        s->pg = NULL;
    }
    return -1;
}
