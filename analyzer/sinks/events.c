/* events.c: the sink part that stores a batch's events (see events.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "log.h"
#include "pg.h"
#include "sinks/events.h"
#include "timeutil.h"

/* The batch's rows in COPY text format. Owned here, reset on commit. */
struct events_part {
    struct st_buf copy;
};

static const char *sql_stage =
    "CREATE TEMP TABLE IF NOT EXISTS events_stage"
    " (LIKE events INCLUDING DEFAULTS) ON COMMIT DELETE ROWS";

#define EVENT_COLS                                                              \
    "source_name, event_id, source_kind, source_platform, ts, task_id, run_id, " \
    "trace_id, type, decision, reason, target, body, kafka_topic, "             \
    "kafka_partition, kafka_offset, raw"

static const char *sql_copy = "COPY events_stage (" EVENT_COLS ") FROM STDIN";
static const char *sql_copy_direct = "COPY events (" EVENT_COLS ") FROM STDIN";

static const char *sql_move =
    "INSERT INTO events (" EVENT_COLS ") SELECT " EVENT_COLS
    " FROM events_stage ON CONFLICT (source_name, event_id) DO NOTHING";

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
    copy_str(b, num);
    /* the exact bytes the evidence tree hashes (body normalises them) */
    copy_field(b, m->payload, m->len, 1);
}

static void *events_create(const struct st_analyzer_conf *conf, char *errstr,
                           size_t errsz)
{
    return st_calloc(1, sizeof(struct events_part));
}

static void events_destroy(void *state)
{
    struct events_part *p = state;
    if (!p)
        return;
    st_buf_fini(&p->copy);
    free(p);
}

static int events_prepare(void *state, PGconn *pg, char *errstr, size_t errsz)
{
    char err[512];
    if (st_pg_exec(pg, sql_stage, err, sizeof(err))) {
        snprintf(errstr, errsz, "could not create the staging table: %s", err);
        return ST_SINK_RETRY;
    }
    return ST_SINK_OK;
}

static void events_stage(void *state, const struct st_sink_event *se)
{
    struct events_part *p = state;
    copy_row(&p->copy, se);
}

static void events_end(void *state, int committed)
{
    struct events_part *p = state;
    if (committed)
        st_buf_reset(&p->copy);
}

static int copy_rows(struct events_part *p, PGconn *pg, const char *sql, char *errstr,
                     size_t errsz)
{
    PGresult *res = PQexec(pg, sql);
    if (PQresultStatus(res) != PGRES_COPY_IN)
        return st_sink_result(res, "could not start COPY of events", errstr, errsz);
    PQclear(res);
    if (PQputCopyData(pg, p->copy.data, (int)p->copy.len) != 1 ||
        PQputCopyEnd(pg, NULL) != 1) {
        snprintf(errstr, errsz, "COPY of events failed: %s", PQerrorMessage(pg));
        return ST_SINK_RETRY;
    }
    res = PQgetResult(pg);
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    int dup = PQresultStatus(res) == PGRES_FATAL_ERROR && state &&
              strcmp(state, "23505") == 0;
    int rc = st_sink_result(res, "COPY of events failed", errstr, errsz);
    while ((res = PQgetResult(pg)))
        PQclear(res);
    return dup ? 1 : rc;
}

/* Rows usually are new: COPY them straight into events. Only a replay
 * brings rows already there; then the COPY fails on the primary key, and the
 * batch goes through the staging table and INSERT ... ON CONFLICT DO
 * NOTHING instead. The savepoint keeps the transaction usable. */
static int events_write(void *state, PGconn *pg, const struct st_findings *fs,
                        char *errstr, size_t errsz)
{
    struct events_part *p = state;
    char err[512];
    if (p->copy.len == 0)
        return ST_SINK_OK;
    if (st_pg_exec(pg, "SAVEPOINT copy_direct", err, sizeof(err))) {
        snprintf(errstr, errsz, "could not set a savepoint: %s", err);
        return ST_SINK_RETRY;
    }
    int rc = copy_rows(p, pg, sql_copy_direct, errstr, errsz);
    if (rc <= 0)
        return rc;
    if (st_pg_exec(pg, "ROLLBACK TO SAVEPOINT copy_direct", err, sizeof(err))) {
        snprintf(errstr, errsz, "could not roll back to the savepoint: %s", err);
        return ST_SINK_RETRY;
    }
    if ((rc = copy_rows(p, pg, sql_copy, errstr, errsz)))
        return rc < 0 ? rc : ST_SINK_DATA;
    return st_sink_result(PQexec(pg, sql_move), "could not insert events", errstr, errsz);
}

const struct st_sink_part_ops st_sink_events = {
    .name = "events",
    .create = events_create,
    .destroy = events_destroy,
    .prepare = events_prepare,
    .stage = events_stage,
    .write = events_write,
    .end = events_end,
};
