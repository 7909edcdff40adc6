/* events.c: the sink part that stores a batch's events (see events.h). */
#include <inttypes.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buf.h"
#include "log.h"
#include "pg.h"
#include "sinks/events.h"
#include "sinks/pgside.h"
#include "timeutil.h"

/* Most connections a large batch's events are COPYed over at once
 * (pg.copy_connections). */
#define MAX_SHARES 8

/* Where one staged row lies: its share's COPY data, and where in it. */
struct row {
    int32_t partition;
    int64_t offset;
    int share;
    size_t start, len;
};

/* One batch's rows in COPY binary format (without header and trailer), in
 * shares: a row goes to the share its primary key hashes to, so that two
 * shares never hold the same event (stored over two connections at once,
 * neither waits for the other's uncommitted row). Where each row lies, and
 * the UTC days (of event time) they fall on, so that their partitions
 * exist before the COPY (sql/005_partitions.sql). Owned by the batch, reset
 * on commit. stored: this try's events_before stored every share in
 * transactions of their own (all_new: each went straight into events). */
struct events_batch {
    struct st_buf copy[MAX_SHARES];
    int nshares;
    struct row *rows;
    size_t nrows, caprows;
    int64_t *days;     /* distinct days of the staged rows */
    size_t ndays, capdays;
    int64_t last_day;  /* the last staged row's day (most rows share it) */
    struct ahead *ahead; /* per partition staged, for events_ahead (sql/010) */
    size_t nahead, capahead;
    int stored, all_new;
};

/* A partition's offsets a batch stages: every one below `below`. */
struct ahead {
    char *topic;
    const rd_kafka_topic_t *rkt; /* the topic's handle seen first: compared before its name */
    int32_t partition;
    int64_t below;
};

/* One share's COPY on a side connection (pgside.h): what it stores and
 * what it found. */
struct share_job {
    const struct st_buf *copy;
    const struct events_batch *batch; /* its marks (mark_ahead) */
    int all_new;
};

/* Two threads use it: the writer (before, write, end, isolate) and the
 * store's prestorer (ahead), on batches of their own. Under known_mu: the
 * days whose partition a committed batch made sure of, sorted. Under
 * shares_mu: the side connections (nshares - 1 of them; set at creation)
 * and the fault counters, that is a split batch's shares from start to
 * finish, whichever thread stores them. The rest is set at creation. */
struct events_part {
    pthread_mutex_t known_mu, shares_mu;
    int64_t *known;
    size_t nknown, capknown;
    int nshares;        /* pg.copy_connections */
    int64_t split_min;  /* pg.copy_split_events */
    struct st_pgside *side[MAX_SHARES - 1];
    int64_t crash_after_splits, splits; /* fault.crash_after_copy_splits */
    int64_t fail_sides;                 /* fault.fail_copy_sides: left to fail */
    int64_t fail_ahead;                 /* fault.fail_copy_ahead: left to fail */
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

static int events_prepare(void *state, PGconn *pg, char *errstr, size_t errsz);
static void events_destroy(void *state);

static void *events_create(const struct st_analyzer_conf *conf, char *errstr,
                           size_t errsz)
{
    struct events_part *p = st_calloc(1, sizeof(*p));
    pthread_mutex_init(&p->known_mu, NULL);
    pthread_mutex_init(&p->shares_mu, NULL);
    p->fail_ahead = conf->fail_copy_ahead;
    p->nshares = conf->copy_connections < 1 ? 1
                 : conf->copy_connections > MAX_SHARES ? MAX_SHARES
                                                      : (int)conf->copy_connections;
    p->split_min = conf->copy_split_events;
    p->crash_after_splits = conf->crash_after_copy_splits;
    p->fail_sides = conf->fail_copy_sides;
    for (int i = 0; i + 1 < p->nshares; i++) {
        if (!(p->side[i] = st_pgside_new(conf->pg_dsn, events_prepare, p, errstr, errsz))) {
            events_destroy(p);
            return NULL;
        }
    }
    return p;
}

static void events_destroy(void *state)
{
    struct events_part *p = state;
    if (!p)
        return;
    for (int i = 0; i + 1 < p->nshares; i++)
        st_pgside_destroy(p->side[i]);
    free(p->known);
    pthread_mutex_destroy(&p->known_mu);
    pthread_mutex_destroy(&p->shares_mu);
    free(p);
}

static void *events_batch_new(void *state)
{
    struct events_part *p = state;
    struct events_batch *b = st_calloc(1, sizeof(*b));
    b->nshares = p->nshares;
    return b;
}

static void events_batch_destroy(void *batch)
{
    struct events_batch *b = batch;
    if (!b)
        return;
    for (int i = 0; i < MAX_SHARES; i++)
        st_buf_fini(&b->copy[i]);
    free(b->rows);
    free(b->days);
    for (size_t i = 0; i < b->nahead; i++)
        free(b->ahead[i].topic);
    free(b->ahead);
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

/* Raises the staged offsets' bound of the message's partition past it. */
static void note_ahead(struct events_batch *p, const rd_kafka_message_t *msg)
{
    const char *topic = rd_kafka_topic_name(msg->rkt);
    struct ahead *a = NULL;
    /* the last one first: a batch's messages come a partition at a time */
    for (size_t i = p->nahead; i-- > 0 && !a;)
        if (p->ahead[i].partition == msg->partition &&
            (p->ahead[i].rkt == msg->rkt || !strcmp(p->ahead[i].topic, topic)))
            a = &p->ahead[i];
    if (!a) {
        if (p->nahead == p->capahead) {
            p->capahead = p->capahead ? p->capahead * 2 : 4;
            p->ahead = st_realloc(p->ahead, p->capahead * sizeof(*p->ahead));
        }
        a = &p->ahead[p->nahead++];
        *a = (struct ahead){st_strdup(topic), msg->rkt, msg->partition, 0};
    }
    if (msg->offset + 1 > a->below)
        a->below = msg->offset + 1;
}

/* The share of an event: by the hash of its primary key's identity
 * (source and event id; a resent event has the same ts), so that an event
 * and its copies fall in the same share. */
static int share_of(const struct st_event *ev, int nshares)
{
    return (int)(st_hash_pair(ev->source_name, ev->event_id) % (uint64_t)nshares);
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
    r->share = p->nshares > 1 ? share_of(se->ev, p->nshares) : 0;
    struct st_buf *copy = &p->copy[r->share];
    r->start = copy->len;
    copy_row(copy, se);
    r->len = copy->len - r->start;
    note_day(p, se->ev->ts_us);
    note_ahead(p, se->msg);
    p->stored = 0; /* a row not stored yet, whatever was before */
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
        int share = r->share;
        struct st_buf *copy = &p->copy[share];
        memmove(copy->data + start, copy->data + start + len, copy->len - start - len);
        copy->len -= len;
        memmove(r, r + 1, (p->nrows - i - 1) * sizeof(*r));
        p->nrows--;
        for (size_t k = i; k < p->nrows; k++)
            if (p->rows[k].share == share)
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
        pthread_mutex_lock(&p->known_mu);
        int known = p->nknown && bsearch(&b->days[i], p->known, p->nknown,
                                         sizeof(b->days[i]), cmp_day);
        pthread_mutex_unlock(&p->known_mu);
        if (known)
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

/* Some COPY binary rows, as they lie in a share's buffer. */
struct piece {
    const char *data;
    size_t len;
};

/* Sends pieces as the rows of one COPY statement sql. Returns 0, 1 when the
 * primary key refused them (a row stored before: a replay), or an error
 * class with errstr set. */
static int copy_rows(const struct piece *pc, int n, PGconn *pg, const char *sql,
                     char *errstr, size_t errsz)
{
    PGresult *res = PQexec(pg, sql);
    if (PQresultStatus(res) != PGRES_COPY_IN)
        return st_sink_result(res, "could not start COPY of events", errstr, errsz);
    PQclear(res);
    int ok = PQputCopyData(pg, copy_header, sizeof(copy_header)) == 1;
    for (int i = 0; ok && i < n; i++)
        ok = pc[i].len == 0 || PQputCopyData(pg, pc[i].data, (int)pc[i].len) == 1;
    if (!ok || PQputCopyData(pg, copy_trailer, sizeof(copy_trailer)) != 1 ||
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

/* Stores pieces inside the open transaction. Rows usually are new: COPY
 * them straight into events (*all_new = 1). Only a replay brings rows
 * already there; then the COPY fails on the primary key, and the rows go
 * through the staging table and INSERT ... ON CONFLICT DO NOTHING instead.
 * The savepoint keeps the transaction usable. */
static int store_rows(PGconn *pg, const struct piece *pc, int n, int *all_new,
                      char *errstr, size_t errsz)
{
    char err[512];
    int rc;
    *all_new = 0;
    if (st_pg_exec(pg, "SAVEPOINT copy_direct", err, sizeof(err))) {
        snprintf(errstr, errsz, "could not set a savepoint: %s", err);
        return ST_SINK_RETRY;
    }
    rc = copy_rows(pc, n, pg, sql_copy_direct, errstr, errsz);
    if (rc == 0)
        *all_new = 1;
    if (rc <= 0)
        return rc;
    if (st_pg_exec(pg, "ROLLBACK TO SAVEPOINT copy_direct", err, sizeof(err))) {
        snprintf(errstr, errsz, "could not roll back to the savepoint: %s", err);
        return ST_SINK_RETRY;
    }
    if ((rc = copy_rows(pc, n, pg, sql_copy, errstr, errsz)))
        return rc < 0 ? rc : ST_SINK_DATA;
    return st_sink_result(PQexec(pg, sql_move), "could not insert events", errstr, errsz);
}

/* After a failed try: ends whatever the try left open on pg, so that the
 * connection is idle again or known lost. A COPY the client could not
 * finish is ended with an error; a transaction still open is rolled back;
 * a failed COMMIT ended its transaction already (no ROLLBACK then: libpq
 * would print the server's warning on stderr). */
static void end_open(PGconn *pg)
{
    char err[512];
    PGresult *res;
    if (PQtransactionStatus(pg) == PQTRANS_ACTIVE) {
        PQputCopyEnd(pg, "the analyzer gave up this COPY");
        while ((res = PQgetResult(pg)))
            PQclear(res);
    }
    PGTransactionStatusType st = PQtransactionStatus(pg);
    if (st == PQTRANS_INTRANS || st == PQTRANS_INERROR)
        st_pg_exec(pg, "ROLLBACK", err, sizeof(err));
}

/* In each share's transaction, after its rows: raises events_ahead.below
 * (sql/010) past the batch's offsets, so that an audit that sees the
 * shares' rows before the batch's evidence (or after a crash in between)
 * reports them as stored ahead of it, not as added after the fact. The
 * mark commits with the rows. Two shares' marks of a partition take the
 * same row: the later waits for the earlier's COMMIT, which follows its
 * mark at once (a lock wait PostgreSQL sees, never a cycle). */
static int mark_ahead(const struct events_batch *b, PGconn *pg, char *errstr, size_t errsz)
{
    struct st_buf topics, parts, belows;
    st_buf_init(&topics);
    st_buf_init(&parts);
    st_buf_init(&belows);
    for (size_t i = 0; i < b->nahead; i++) {
        char n[24];
        st_pg_array_add(&topics, b->ahead[i].topic);
        snprintf(n, sizeof(n), "%" PRId32, b->ahead[i].partition);
        st_pg_array_add(&parts, n);
        snprintf(n, sizeof(n), "%" PRId64, b->ahead[i].below);
        st_pg_array_add(&belows, n);
    }
    st_pg_array_end(&topics);
    st_pg_array_end(&parts);
    st_pg_array_end(&belows);
    const char *v[3] = {topics.data, parts.data, belows.data};
    int rc = st_sink_result(
        PQexecParams(pg,
                     "INSERT INTO events_ahead (kafka_topic, kafka_partition, below)"
                     " SELECT * FROM unnest($1::text[], $2::int[], $3::bigint[]) ORDER BY 1, 2"
                     " ON CONFLICT (kafka_topic, kafka_partition) DO UPDATE"
                     " SET below = GREATEST(events_ahead.below, EXCLUDED.below)",
                     3, NULL, v, NULL, NULL, 0),
        "could not mark the batch's events as stored ahead of their evidence", errstr,
        errsz);
    st_buf_fini(&topics);
    st_buf_fini(&parts);
    st_buf_fini(&belows);
    return rc == ST_SINK_DATA ? ST_SINK_RETRY : rc; /* nothing of the events in it */
}

/* One share in a transaction of its own (a pgside job, or the writer's own
 * share in events_before): stored and committed, or rolled back. */
static int store_share(void *arg, PGconn *pg, char *errstr, size_t errsz)
{
    struct share_job *j = arg;
    struct piece pc = {j->copy->data, j->copy->len};
    char err[512];
    j->all_new = 0;
    if (st_pg_exec(pg, "BEGIN", err, sizeof(err))) {
        snprintf(errstr, errsz, "could not begin a transaction: %s", err);
        return ST_SINK_RETRY;
    }
    int rc = store_rows(pg, &pc, 1, &j->all_new, errstr, errsz);
    if (rc == ST_SINK_OK)
        rc = mark_ahead(j->batch, pg, errstr, errsz);
    if (rc == ST_SINK_OK)
        rc = st_sink_result(PQexec(pg, "COMMIT"), "could not commit a share of the events",
                            errstr, errsz);
    if (rc)
        end_open(pg);
    return rc;
}

/* The worse of two results: a retry before a refusal of data (a lost
 * connection says nothing about the rows; the next try tells). */
static int worse(int a, int b)
{
    if (a == ST_SINK_RETRY || b == ST_SINK_RETRY)
        return ST_SINK_RETRY;
    return a ? a : b;
}

/* 1 when b is stored over several connections (pg.copy_connections above
 * 1, pg.copy_split_events or more rows). */
static int splits(const struct events_part *p, const struct events_batch *b)
{
    return p->nshares >= 2 && (int64_t)b->nrows >= p->split_min;
}

/* Stores a split batch's events ahead of its transaction: each share in a
 * transaction of its own, the first on pg (the caller's connection), the
 * others on the side connections, all at once, so that as many backends
 * parse and index rows as there are shares. The batch's transaction then
 * holds the parts that describe them (evidence, findings), which commit
 * only after every share did: a crash in between leaves events stored
 * whose batch is redone, and the redo's COPY meets them on the primary key
 * (the staging path: stored once). The caller waits for the sides outside
 * any transaction of its own, and no two shares hold the same event, so
 * none of these transactions waits for another's uncommitted rows in a way
 * PostgreSQL cannot see. Sets b->stored (and b->all_new) when every share
 * committed. Runs under shares_mu: the writer's `before` and the
 * prestorer's `ahead` may both store shares. */
static int store_split(struct events_part *p, struct events_batch *b, PGconn *pg,
                       char *errstr, size_t errsz)
{
    int rc = ST_SINK_OK;
    struct share_job jobs[MAX_SHARES];
    int refused[MAX_SHARES] = {0}; /* fault.fail_copy_sides */
    pthread_mutex_lock(&p->shares_mu);
    for (int i = 0; i < b->nshares; i++)
        jobs[i] = (struct share_job){&b->copy[i], b, 1};
    for (int i = 1; i < b->nshares; i++) {
        if (!b->copy[i].len)
            continue;
        if (p->fail_sides > 0) {
            p->fail_sides--;
            refused[i] = 1;
            continue;
        }
        st_pgside_start(p->side[i - 1], store_share, &jobs[i]);
    }
    if (b->copy[0].len)
        rc = store_share(&jobs[0], pg, errstr, errsz);
    for (int i = 1; i < b->nshares; i++) {
        char err[1024];
        int r = ST_SINK_OK;
        if (refused[i]) {
            snprintf(err, sizeof(err), "fault injection: a side connection refused");
            r = ST_SINK_RETRY;
        } else if (b->copy[i].len) {
            r = st_pgside_wait(p->side[i - 1], err, sizeof(err));
        }
        if (r == ST_SINK_RETRY && rc != ST_SINK_RETRY) {
            /* the side could not (a connection refused: max_connections,
             * or dropped while idle): the caller's connection, which
             * works (its own share stored or refused for its data), stores
             * that share too, now -- else a side that never connects would
             * hide a refusal behind retries for ever */
            st_warn("a share of the batch's events failed on a side connection, stored "
                    "on the analyzer's own (the writer's or the prestorer's): %s",
                    err);
            r = store_share(&jobs[i], pg, err, sizeof(err));
        }
        if (r && worse(rc, r) != rc) {
            snprintf(errstr, errsz, "%s", err);
            rc = r;
        }
    }
    if (rc == ST_SINK_OK) {
        b->stored = 1;
        b->all_new = 1;
        for (int i = 0; i < b->nshares; i++)
            b->all_new &= jobs[i].all_new;
        if (p->crash_after_splits && ++p->splits >= p->crash_after_splits) {
            st_warn("fault injection: exiting after the events of split batch %" PRId64
                    " were stored, before its transaction",
                    p->splits);
            _exit(3);
        }
    }
    pthread_mutex_unlock(&p->shares_mu);
    return rc;
}

/* The writer, before the batch's transaction: the partitions of its days,
 * then a split batch's shares (store_split), unless the prestorer stored
 * them already (ahead: b->stored). */
static int events_before(void *state, void *batch, PGconn *pg, char *errstr, size_t errsz)
{
    struct events_part *p = state;
    struct events_batch *b = batch;
    if (b->stored)
        return ST_SINK_OK;
    int rc = ensure_partitions(p, b, pg, errstr, errsz);
    if (rc || !splits(p, b))
        return rc;
    return store_split(p, b, pg, errstr, errsz);
}

/* The prestorer, while the writer still writes the batch before: a split
 * batch's partitions and shares, so that the backends store its events
 * while the previous batch's transaction (evidence, findings) runs. A
 * failure leaves b as it was (not stored): the writer's `before` then
 * stores it, with its retries and its isolation of a refused event.
 * Returns 1 when it stored them, ST_SINK_OK when b is not split. */
static int events_ahead(void *state, void *batch, PGconn *pg, char *errstr, size_t errsz)
{
    struct events_part *p = state;
    struct events_batch *b = batch;
    if (b->stored || !splits(p, b))
        return ST_SINK_OK;
    pthread_mutex_lock(&p->shares_mu);
    int fail = p->fail_ahead > 0 && p->fail_ahead--;
    pthread_mutex_unlock(&p->shares_mu);
    if (fail) {
        snprintf(errstr, errsz, "fault injection: the prestore of a split batch failed");
        return ST_SINK_RETRY;
    }
    int rc = ensure_partitions(p, b, pg, errstr, errsz);
    if (!rc)
        rc = store_split(p, b, pg, errstr, errsz);
    return rc ? rc : 1;
}

/* 1 when batch is split, not stored yet; with batch NULL, when batches
 * may be split (pg.copy_connections above 1) */
static int events_ahead_on(const void *state, const void *batch)
{
    const struct events_part *p = state;
    const struct events_batch *b = batch;
    return b ? !b->stored && splits(p, b) : p->nshares >= 2;
}

static void events_end(void *state, void *batch, int committed)
{
    struct events_part *p = state;
    struct events_batch *b = batch;
    b->stored = 0;
    if (!committed)
        return;
    for (int i = 0; i < b->nshares; i++)
        st_buf_reset(&b->copy[i]);
    b->nrows = 0;
    for (size_t i = 0; i < b->nahead; i++)
        free(b->ahead[i].topic);
    b->nahead = 0;
    pthread_mutex_lock(&p->known_mu);
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
    pthread_mutex_unlock(&p->known_mu);
    b->ndays = 0;
}

static int events_write(void *state, void *batch, PGconn *pg, struct st_sink_txn *tx,
                        char *errstr, size_t errsz)
{
    struct events_batch *p = batch;
    if (p->stored) { /* by events_before, in transactions of their own */
        tx->events_all_new = p->all_new;
        return ST_SINK_OK;
    }
    struct piece pc[MAX_SHARES];
    int n = 0;
    for (int i = 0; i < p->nshares; i++)
        if (p->copy[i].len)
            pc[n++] = (struct piece){p->copy[i].data, p->copy[i].len};
    if (n == 0) {
        tx->events_all_new = 1; /* none staged: none can be a duplicate */
        return ST_SINK_OK;
    }
    return store_rows(pg, pc, n, &tx->events_all_new, errstr, errsz);
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
        struct piece pc = {p->copy[r->share].data + r->start, r->len};
        int rc = copy_rows(&pc, 1, pg, sql_copy, why, sizeof(why));
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
    .ahead = events_ahead,
    .ahead_on = events_ahead_on,
    .write = events_write,
    .isolate = events_isolate,
    .end = events_end,
};
