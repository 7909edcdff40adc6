/* events.c: the sink part that stores a batch's events (see events.h). */
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "log.h"
#include "pg.h"
#include "sinks/events.h"
#include "timeutil.h"

/* Where one staged row lies in the COPY text. */
struct row {
    int32_t partition;
    int64_t offset;
    size_t start, len;
};

/* One batch's rows in COPY binary format (without header and trailer) and
 * where each lies, and the UTC
 * days (of event time) they fall on, so that their partitions exist before
 * the COPY (sql/005_partitions.sql). Owned by the batch, reset on commit. */
struct events_batch {
    struct st_buf copy;
    struct row *rows;
    size_t nrows, caprows;
    int64_t *days;     /* distinct days of the staged rows */
    size_t ndays, capdays;
    int64_t last_day;  /* the last staged row's day (most rows share it) */
};

/* @locality the writing thread (write, end): days whose partition a
 * committed batch made sure of, sorted. */
struct events_part {
    int64_t *known;
    size_t nknown, capknown;
};

static const char *sql_partitions = "SELECT sandtrail_event_partitions($1::date[])";

static const char *sql_stage =
    "CREATE TEMP TABLE IF NOT EXISTS events_stage"
    " (LIKE events INCLUDING DEFAULTS) ON COMMIT DELETE ROWS";

#define EVENT_COLS                                                              \
    "source_name, event_id, source_kind, source_platform, ts, task_id, run_id, " \
    "trace_id, type, decision, reason, target, body, kafka_topic, "             \
    "kafka_partition, kafka_offset, received_at, skewed, raw"

static const char *sql_copy =
    "COPY events_stage (" EVENT_COLS ") FROM STDIN WITH (FORMAT binary)";
static const char *sql_copy_direct =
    "COPY events (" EVENT_COLS ") FROM STDIN WITH (FORMAT binary)";

static const char *sql_move =
    "INSERT INTO events (" EVENT_COLS ") SELECT " EVENT_COLS
    " FROM events_stage ON CONFLICT DO NOTHING";

/* COPY's binary format (PostgreSQL's "Binary Format" of COPY): a header,
 * then per row the number of fields and each field as a length (-1: NULL)
 * and the bytes of the type's binary form, then a trailer. A row's bytes
 * are staged alone (struct row), so that one row can be sent by itself
 * between the header and the trailer (isolate). Binary rather than text:
 * nothing is escaped on the main thread, no time is formatted and parsed
 * again, and the server spends less per row (measured in
 * docs/architecture.md, "The events table at ingest"). Text columns are
 * checked by the server as in text format (encoding, no NUL byte), jsonb's
 * binary form is its text after a version byte, parsed the same way. */
static const char copy_header[19] = "PGCOPY\n\377\r\n\0" /* signature */
                                    "\0\0\0\0"           /* flags */
                                    "\0\0\0\0";          /* no extension */
static const char copy_trailer[2] = {'\377', '\377'};

#define EVENT_NCOLS 19

/* microseconds between the Unix epoch and PostgreSQL's, 2000-01-01 */
#define PG_EPOCH_US INT64_C(946684800000000)

static void put_be32(struct st_buf *b, uint32_t v)
{
    char x[4] = {(char)(v >> 24), (char)(v >> 16), (char)(v >> 8), (char)v};
    st_buf_add(b, x, 4);
}

static void put_be64(struct st_buf *b, uint64_t v)
{
    put_be32(b, (uint32_t)(v >> 32));
    put_be32(b, (uint32_t)v);
}

static void copy_bytes(struct st_buf *b, const char *v, size_t len)
{
    put_be32(b, (uint32_t)len);
    st_buf_add(b, v, len);
}

static void copy_str(struct st_buf *b, const char *v)
{
    if (!v) {
        put_be32(b, UINT32_MAX); /* -1: NULL */
        return;
    }
    copy_bytes(b, v, strlen(v));
}

static void copy_time(struct st_buf *b, int64_t unix_us)
{
    put_be32(b, 8);
    put_be64(b, (uint64_t)(unix_us - PG_EPOCH_US));
}

static void copy_row(struct st_buf *b, const struct st_sink_event *se)
{
    const struct st_event *ev = se->ev;
    const rd_kafka_message_t *m = se->msg;

    st_buf_add(b, (const char[2]){0, EVENT_NCOLS}, 2);
    copy_str(b, ev->source_name);
    copy_str(b, ev->event_id);
    copy_str(b, st_source_kind_name(ev->source_kind));
    copy_str(b, ev->source_platform);
    copy_time(b, ev->ts_us);
    copy_str(b, ev->task_id);
    copy_str(b, ev->run_id);
    copy_str(b, ev->trace_id);
    copy_str(b, st_event_type_name(ev->type));
    copy_str(b, st_decision_name(ev->decision));
    copy_str(b, ev->reason);
    copy_str(b, st_event_target(ev));
    /* jsonb: a version byte (1), then the JSON text */
    put_be32(b, (uint32_t)m->len + 1);
    st_buf_addc(b, 1);
    st_buf_add(b, m->payload, m->len);
    copy_str(b, rd_kafka_topic_name(m->rkt));
    put_be32(b, 4);
    put_be32(b, (uint32_t)m->partition);
    put_be32(b, 8);
    put_be64(b, (uint64_t)m->offset);
    int64_t recv_ms = rd_kafka_message_timestamp(m, NULL);
    if (recv_ms >= 0)
        copy_time(b, recv_ms * 1000);
    else
        put_be32(b, UINT32_MAX);
    put_be32(b, 1);
    st_buf_addc(b, se->skewed ? 1 : 0);
    /* the exact bytes the evidence tree hashes (body normalises them) */
    copy_bytes(b, m->payload, m->len);
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
    free(p->known);
    free(p);
}

static void *events_batch_new(void *state)
{
    return st_calloc(1, sizeof(struct events_batch));
}

static void events_batch_destroy(void *batch)
{
    struct events_batch *b = batch;
    if (!b)
        return;
    st_buf_fini(&b->copy);
    free(b->rows);
    free(b->days);
    free(b);
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

static int64_t day_of(int64_t ts_us)
{
    int64_t d = ts_us / (86400 * INT64_C(1000000));
    return ts_us < 0 && ts_us % (86400 * INT64_C(1000000)) ? d - 1 : d;
}

static int cmp_day(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Remembers the day of a staged row (the writer passes over those a
 * committed batch already made). */
static void note_day(struct events_batch *p, int64_t ts_us)
{
    int64_t d = day_of(ts_us);
    if (p->ndays && d == p->last_day)
        return;
    p->last_day = d;
    for (size_t i = 0; i < p->ndays; i++)
        if (p->days[i] == d)
            return;
    if (p->ndays == p->capdays) {
        p->capdays = p->capdays ? p->capdays * 2 : 8;
        p->days = st_realloc(p->days, p->capdays * sizeof(*p->days));
    }
    p->days[p->ndays++] = d;
}

static void events_stage(void *state, void *batch, const struct st_sink_event *se)
{
    struct events_batch *p = batch;
    if (p->nrows == p->caprows) {
        p->caprows = p->caprows ? p->caprows * 2 : 256;
        p->rows = st_realloc(p->rows, p->caprows * sizeof(*p->rows));
    }
    struct row *r = &p->rows[p->nrows++];
    r->partition = se->msg->partition;
    r->offset = se->msg->offset;
    r->start = p->copy.len;
    copy_row(&p->copy, se);
    r->len = p->copy.len - r->start;
    note_day(p, se->ev->ts_us);
}

/* A refused message: its staged row, if any, leaves the batch. */
static void events_skip(void *state, void *batch, const rd_kafka_message_t *msg,
                        const char *reason)
{
    struct events_batch *p = batch;
    for (size_t i = 0; i < p->nrows; i++) {
        struct row *r = &p->rows[i];
        if (r->partition != msg->partition || r->offset != msg->offset)
            continue;
        size_t start = r->start, len = r->len;
        memmove(p->copy.data + start, p->copy.data + start + len,
                p->copy.len - start - len);
        p->copy.len -= len;
        memmove(r, r + 1, (p->nrows - i - 1) * sizeof(*r));
        p->nrows--;
        for (size_t k = i; k < p->nrows; k++)
            p->rows[k].start -= len;
        return;
    }
}

/* Makes the partitions of the staged rows' new days. CREATE TABLE ...
 * PARTITION OF locks events ACCESS EXCLUSIVE until its transaction ends:
 * the write makes them before the batch's transaction (events_before), so
 * that readers of events (the detect role's refresh, the dashboards) wait
 * for that statement only, not for the batch's COPY and commit (once a
 * day, and at the start of a drain). A partition made for a batch that
 * then fails stays, empty: harmless. The isolation of a refused batch
 * calls it inside its transaction, after the write made them. */
static int ensure_partitions(struct events_part *p, struct events_batch *b, PGconn *pg,
                             char *errstr, size_t errsz)
{
    struct st_buf arr;
    size_t n = 0;
    st_buf_init(&arr);
    for (size_t i = 0; i < b->ndays; i++) {
        char day[40];
        if (p->nknown && bsearch(&b->days[i], p->known, p->nknown, sizeof(b->days[i]),
                                 cmp_day))
            continue;
        n++;
        st_time_format(b->days[i] * 86400 * INT64_C(1000000), day, sizeof(day));
        day[10] = '\0'; /* YYYY-MM-DD */
        st_pg_array_add(&arr, day);
    }
    if (n == 0) {
        st_buf_fini(&arr);
        return ST_SINK_OK;
    }
    st_pg_array_end(&arr);
    const char *params[1] = {arr.data};
    int rc = st_sink_result(PQexecParams(pg, sql_partitions, 1, NULL, params, NULL, NULL, 0),
                            "could not make the events' day partitions", errstr, errsz);
    st_buf_fini(&arr);
    /* a refusal here is about the database, not about the rows */
    return rc ? ST_SINK_RETRY : ST_SINK_OK;
}

static int events_before(void *state, void *batch, PGconn *pg, char *errstr, size_t errsz)
{
    return ensure_partitions(state, batch, pg, errstr, errsz);
}

static void events_end(void *state, void *batch, int committed)
{
    struct events_part *p = state;
    struct events_batch *b = batch;
    if (!committed)
        return;
    st_buf_reset(&b->copy);
    b->nrows = 0;
    for (size_t i = 0; i < b->ndays; i++) {
        if (p->nknown && bsearch(&b->days[i], p->known, p->nknown, sizeof(*p->known),
                                 cmp_day))
            continue;
        if (p->nknown == p->capknown) {
            p->capknown = p->capknown ? p->capknown * 2 : 16;
            p->known = st_realloc(p->known, p->capknown * sizeof(*p->known));
        }
        p->known[p->nknown++] = b->days[i];
        qsort(p->known, p->nknown, sizeof(*p->known), cmp_day);
    }
    b->ndays = 0;
}

static int copy_rows(const char *data, size_t len, PGconn *pg, const char *sql,
                     char *errstr, size_t errsz)
{
    PGresult *res = PQexec(pg, sql);
    if (PQresultStatus(res) != PGRES_COPY_IN)
        return st_sink_result(res, "could not start COPY of events", errstr, errsz);
    PQclear(res);
    if (PQputCopyData(pg, copy_header, sizeof(copy_header)) != 1 ||
        PQputCopyData(pg, data, (int)len) != 1 ||
        PQputCopyData(pg, copy_trailer, sizeof(copy_trailer)) != 1 ||
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
static int events_write(void *state, void *batch, PGconn *pg, struct st_sink_txn *tx,
                        char *errstr, size_t errsz)
{
    struct events_batch *p = batch;
    char err[512];
    if (p->copy.len == 0) {
        tx->events_all_new = 1; /* none staged: none can be a duplicate */
        return ST_SINK_OK;
    }
    int rc;
    if (st_pg_exec(pg, "SAVEPOINT copy_direct", err, sizeof(err))) {
        snprintf(errstr, errsz, "could not set a savepoint: %s", err);
        return ST_SINK_RETRY;
    }
    rc = copy_rows(p->copy.data, p->copy.len, pg, sql_copy_direct, errstr, errsz);
    if (rc == 0)
        tx->events_all_new = 1;
    if (rc <= 0)
        return rc;
    if (st_pg_exec(pg, "ROLLBACK TO SAVEPOINT copy_direct", err, sizeof(err))) {
        snprintf(errstr, errsz, "could not roll back to the savepoint: %s", err);
        return ST_SINK_RETRY;
    }
    if ((rc = copy_rows(p->copy.data, p->copy.len, pg, sql_copy, errstr, errsz)))
        return rc < 0 ? rc : ST_SINK_DATA;
    return st_sink_result(PQexec(pg, sql_move), "could not insert events", errstr, errsz);
}

/* Each row alone, through the staging table as a replay would go, in a
 * savepoint rolled back whatever happened. A batch is refused rarely, so
 * four round trips per row are fine. */
static int events_isolate(void *state, void *batch, PGconn *pg, st_sink_refused_cb cb,
                          void *arg, char *errstr, size_t errsz)
{
    struct events_batch *p = batch;
    char err[512], why[1024];
    int prc = ensure_partitions(state, p, pg, errstr, errsz);
    if (prc)
        return prc;
    for (size_t i = 0; i < p->nrows; i++) {
        const struct row *r = &p->rows[i];
        if (st_pg_exec(pg, "SAVEPOINT probe", err, sizeof(err))) {
            snprintf(errstr, errsz, "could not set a savepoint: %s", err);
            return ST_SINK_RETRY;
        }
        int rc = copy_rows(p->copy.data + r->start, r->len, pg, sql_copy, why,
                           sizeof(why));
        if (rc == 0)
            rc = st_sink_result(PQexec(pg, sql_move), "could not insert events", why,
                                sizeof(why));
        if (rc == ST_SINK_RETRY) {
            snprintf(errstr, errsz, "%s", why);
            return rc;
        }
        if (rc)
            cb(arg, r->partition, r->offset, why);
        if (st_pg_exec(pg, "ROLLBACK TO SAVEPOINT probe", err, sizeof(err))) {
            snprintf(errstr, errsz, "could not roll back to the savepoint: %s", err);
            return ST_SINK_RETRY;
        }
    }
    return ST_SINK_OK;
}

const struct st_sink_part_ops st_sink_events = {
    .name = "events",
    .create = events_create,
    .destroy = events_destroy,
    .batch_new = events_batch_new,
    .batch_destroy = events_batch_destroy,
    .prepare = events_prepare,
    .stage = events_stage,
    .skip = events_skip,
    .before = events_before,
    .write = events_write,
    .isolate = events_isolate,
    .end = events_end,
};
