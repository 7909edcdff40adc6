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

/* One batch's rows in COPY text format and where each lies, and the UTC
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

static const char *sql_copy = "COPY events_stage (" EVENT_COLS ") FROM STDIN";
static const char *sql_copy_direct = "COPY events (" EVENT_COLS ") FROM STDIN";

static const char *sql_move =
    "INSERT INTO events (" EVENT_COLS ") SELECT " EVENT_COLS
    " FROM events_stage ON CONFLICT DO NOTHING";

/* The index of the first byte of v[0..len) that COPY text escapes
 * (backslash, tab, newline, carriage return), or len. Eight bytes at a time
 * while none is a backslash or below 0x0e: a payload (staged twice per
 * row) rarely has one. */
static size_t plain_run(const char *v, size_t len)
{
    const uint64_t ones = 0x0101010101010101u, highs = 0x8080808080808080u;
    size_t i = 0;
    while (i < len) {
        size_t n = 1;
        if (i + 8 <= len) {
            uint64_t w, bs;
            memcpy(&w, v + i, 8);
            bs = w ^ (ones * '\\');
            /* neither a byte below 0x0e nor a zero byte of bs (a backslash) */
            if (!(((w - ones * 0x0e) & ~w & highs) | ((bs - ones) & ~bs & highs))) {
                i += 8;
                continue;
            }
            n = 8;
        }
        for (size_t k = i; k < i + n; k++)
            if (v[k] == '\\' || v[k] == '\t' || v[k] == '\n' || v[k] == '\r')
                return k;
        i += n;
    }
    return len;
}

/* COPY text format: backslash, tab, newline and carriage return escaped. */
static void copy_field(struct st_buf *b, const char *v, size_t len, int last)
{
    if (!v) {
        st_buf_add(b, last ? "\\N\n" : "\\N\t", 3);
        return;
    }
    /* runs of plain bytes in one copy: this is every event's raw text */
    size_t from = 0;
    for (;;) {
        size_t i = from + plain_run(v + from, len - from);
        st_buf_add(b, v + from, i - from);
        if (i == len)
            break;
        const char *esc = v[i] == '\\' ? "\\\\" : v[i] == '\t' ? "\\t" : v[i] == '\n' ? "\\n" : "\\r";
        st_buf_add(b, esc, 2);
        from = i + 1;
    }
    st_buf_addc(b, last ? '\n' : '\t');
}

static void copy_str(struct st_buf *b, const char *v)
{
    copy_field(b, v, v ? strlen(v) : 0, 0);
}

/* v in decimal, then a tab: COPY's integer columns (no printf per row). */
static void copy_int(struct st_buf *b, int64_t v)
{
    char num[24];
    size_t at = sizeof(num);
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    num[--at] = '\t';
    do {
        num[--at] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        num[--at] = '-';
    st_buf_add(b, num + at, sizeof(num) - at);
}

static void copy_row(struct st_buf *b, const struct st_sink_event *se)
{
    const struct st_event *ev = se->ev;
    const rd_kafka_message_t *m = se->msg;
    char ts[40];

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
    size_t body = b->len;
    copy_field(b, m->payload, m->len, 0);
    size_t body_len = b->len - body - 1; /* the payload escaped, without its tab */
    copy_str(b, rd_kafka_topic_name(m->rkt));
    copy_int(b, m->partition);
    copy_int(b, m->offset);
    int64_t recv_ms = rd_kafka_message_timestamp(m, NULL);
    if (recv_ms >= 0)
        st_time_format(recv_ms * 1000, ts, sizeof(ts));
    copy_str(b, recv_ms >= 0 ? ts : NULL);
    copy_field(b, se->skewed ? "t" : "f", 1, 0);
    /* the exact bytes the evidence tree hashes (body normalises them):
     * the payload as escaped for body above, copied, not escaped again */
    st_buf_reserve(b, body_len + 1);
    memcpy(b->data + b->len, b->data + body, body_len);
    b->len += body_len;
    st_buf_addc(b, '\n');
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

/* Makes the partitions of the staged rows' new days, inside the batch's
 * transaction (rolled back with it). */
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
    if (PQputCopyData(pg, data, (int)len) != 1 ||
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
    int rc = ensure_partitions(state, p, pg, errstr, errsz);
    if (rc)
        return rc;
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
    .write = events_write,
    .isolate = events_isolate,
    .end = events_end,
};
