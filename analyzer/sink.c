/* sink.c: one PostgreSQL transaction per batch over the outputs listed in
 * parts[] that the analyzer's role writes (see sink.h and role.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "log.h"
#include "pg.h"
#include "role.h"
#include "sink.h"
#include "sinks/events.h"
#include "sinks/evidence.h"
#include "sinks/findings.h"
#include "sinks/outbox.h"
#include "sinks/refresh.h"

#define ALL (1u << ST_ROLE_ALL)
#define STORE (1u << ST_ROLE_STORE)
#define DETECT (1u << ST_ROLE_DETECT)

/* The order in which one transaction writes them: a later part may read
 * the rows an earlier one wrote (a finding's refresh reads its events).
 * roles: the analyzer.role values whose transactions write the part; this
 * is the one place that says what each role writes. after: the part is
 * written by st_sink_write_after, in a transaction of its own once the
 * batch's has committed, on a second connection, so that the next batch's
 * transaction does not wait for it. */
static const struct part {
    const struct st_sink_part_ops *ops;
    unsigned roles;
    int after;
} parts[] = {
    {&st_sink_events, ALL | STORE, 0},
    {&st_sink_evidence, ALL | STORE, 0}, /* reads the rows events wrote */
    {&st_sink_findings, ALL | DETECT, 0},
    {&st_sink_outbox, ALL | DETECT, 0}, /* reads the findings just written */
    /* detection runs in another analyzer: its findings may have been
     * written before these events. After their commit: its lock
     * (refresh.h) then never holds up the events' COPY */
    {&st_sink_refresh, STORE, 1},
    {NULL, 0, 0},
};

#define NPARTS (sizeof(parts) / sizeof(parts[0]) - 1)

/* The connection and the parts' state: the connection is the writing
 * thread's (one write or isolate at a time); see sink.h for which of a
 * part's callbacks run where. */
struct st_sink {
    PGconn *pg;
    PGconn *pg_after; /* st_sink_write_after's, made on first use */
    PGconn *pg_ahead; /* st_sink_prestore's, made on first use */
    int ahead;        /* some part's ahead_on */
    char *dsn;
    int on[NPARTS]; /* the role writes parts[i] */
    int nafter;     /* of them, parts written after the batch's commit */
    void *state[NPARTS];
};

/* One batch's staging: each part's, and how many stage, skip or seal calls
 * it holds. Owned by the caller of st_sink_batch_new. */
struct st_sink_batch {
    struct st_sink *sink;
    void *part[NPARTS];
    size_t staged;
};

/* parts[i]'s callback cb when the role writes it, else NULL */
#define OP(s, i, cb) ((s)->on[i] ? parts[i].ops->cb : NULL)

int st_sink_error_class(const PGresult *res)
{
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    if (!state || strlen(state) != 5)
        return ST_SINK_RETRY;
    if (strncmp(state, "22", 2) == 0 || strncmp(state, "23", 2) == 0 ||
        strncmp(state, "54", 2) == 0)
        return ST_SINK_DATA;
    return ST_SINK_RETRY;
}

int st_sink_result(PGresult *res, const char *what, char *errstr, size_t errsz)
{
    ExecStatusType st = PQresultStatus(res);
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) {
        PQclear(res);
        return ST_SINK_OK;
    }
    int cls = st_sink_error_class(res);
    snprintf(errstr, errsz, "%s: %s", what, PQresultErrorMessage(res));
    size_t n = strlen(errstr);
    if (n && errstr[n - 1] == '\n')
        errstr[n - 1] = '\0';
    PQclear(res);
    return cls;
}

/* (Re)opens *pg, the connection of the parts with after == after. */
static int sink_connect(struct st_sink *s, PGconn **pg, int after, char *errstr,
                        size_t errsz)
{
    PQfinish(*pg);
    *pg = st_pg_connect(s->dsn, errstr, errsz);
    if (!*pg)
        return ST_SINK_RETRY;
    /* No JIT for the batch's statements: while a drain grows the tables
     * faster than their statistics, the planner's estimates pass
     * jit_above_cost and the findings' refresh spent about 0.3 s
     * compiling per batch, for statements that run in milliseconds
     * (docs/architecture.md, "Findings per batch, not per finding") */
    if (st_pg_exec(*pg, "SET jit = off", errstr, errsz)) {
        PQfinish(*pg);
        *pg = NULL;
        return ST_SINK_RETRY;
    }
    for (size_t i = 0; i < NPARTS; i++) {
        if (parts[i].after == after && OP(s, i, prepare) &&
            OP(s, i, prepare)(s->state[i], *pg, errstr, errsz)) {
            PQfinish(*pg);
            *pg = NULL;
            return ST_SINK_RETRY;
        }
    }
    return ST_SINK_OK;
}

struct st_sink *st_sink_new(const struct st_analyzer_conf *conf, char *errstr,
                            size_t errsz)
{
    struct st_sink *s = st_calloc(1, sizeof(*s));
    s->dsn = st_strdup(conf->pg_dsn);
    for (size_t i = 0; i < NPARTS; i++) {
        s->on[i] = (parts[i].roles >> conf->role) & 1;
        s->nafter += s->on[i] && parts[i].after;
    }
    for (size_t i = 0; i < NPARTS; i++) {
        if (OP(s, i, create) &&
            !(s->state[i] = OP(s, i, create)(conf, errstr, errsz))) {
            st_sink_destroy(s);
            return NULL;
        }
    }
    for (size_t i = 0; i < NPARTS; i++)
        s->ahead |= OP(s, i, ahead) && OP(s, i, ahead_on) &&
                    OP(s, i, ahead_on)(s->state[i], NULL);
    if (sink_connect(s, &s->pg, 0, errstr, errsz)) {
        st_sink_destroy(s);
        return NULL;
    }
    return s;
}

void st_sink_destroy(struct st_sink *s)
{
    if (!s)
        return;
    PQfinish(s->pg);
    PQfinish(s->pg_after);
    PQfinish(s->pg_ahead);
    for (size_t i = 0; i < NPARTS; i++)
        if (OP(s, i, destroy))
            OP(s, i, destroy)(s->state[i]);
    free(s->dsn);
    free(s);
}

struct st_sink_batch *st_sink_batch_new(struct st_sink *s)
{
    struct st_sink_batch *b = st_calloc(1, sizeof(*b));
    b->sink = s;
    for (size_t i = 0; i < NPARTS; i++)
        if (OP(s, i, batch_new))
            b->part[i] = OP(s, i, batch_new)(s->state[i]);
    return b;
}

void st_sink_batch_destroy(struct st_sink_batch *b)
{
    if (!b)
        return;
    for (size_t i = 0; i < NPARTS; i++)
        if (OP(b->sink, i, batch_destroy))
            OP(b->sink, i, batch_destroy)(b->part[i]);
    free(b);
}

int st_sink_batch_empty(const struct st_sink_batch *b)
{
    return b->staged == 0;
}

void st_sink_stage(struct st_sink *s, struct st_sink_batch *b,
                   const struct st_sink_event *se)
{
    int staged = 0;
    for (size_t i = 0; i < NPARTS; i++)
        if (OP(s, i, stage)) {
            OP(s, i, stage)(s->state[i], b->part[i], se);
            staged = 1;
        }
    /* a role none of whose parts stage events (detect) opens no
     * transaction for them */
    b->staged += staged;
}

void st_sink_skip(struct st_sink *s, struct st_sink_batch *b, const rd_kafka_message_t *msg,
                  const char *reason)
{
    int staged = 0;
    for (size_t i = 0; i < NPARTS; i++)
        if (OP(s, i, skip)) {
            OP(s, i, skip)(s->state[i], b->part[i], msg, reason);
            staged = 1;
        }
    b->staged += staged;
}

int st_sink_seal(struct st_sink *s, struct st_sink_batch *b, int64_t now_ms)
{
    int want = 0;
    for (size_t i = 0; i < NPARTS; i++)
        if (OP(s, i, seal) && OP(s, i, seal)(s->state[i], b->part[i], now_ms))
            want = 1;
    if (want)
        b->staged++;
    return want;
}

/* Ends the parts with after == after. */
static void end_all(struct st_sink *s, struct st_sink_batch *b, int after, int committed)
{
    for (size_t i = 0; i < NPARTS; i++)
        if (parts[i].after == after && OP(s, i, end))
            OP(s, i, end)(s->state[i], b->part[i], committed);
    if (committed && !after)
        b->staged = 0;
}

int st_sink_prestore(struct st_sink *s, struct st_sink_batch *b, char *errstr,
                     size_t errsz)
{
    int rc = ST_SINK_OK, want = 0;
    if (!s->ahead || b->staged == 0)
        return ST_SINK_OK;
    for (size_t i = 0; i < NPARTS && !want; i++)
        want = OP(s, i, ahead) && !parts[i].after && OP(s, i, ahead_on) &&
               OP(s, i, ahead_on)(s->state[i], b->part[i]);
    if (!want)
        return ST_SINK_OK;
    /* prepared as the writer's (the parts that write the batch's
     * transaction: the events' staging table) */
    if ((!s->pg_ahead || PQstatus(s->pg_ahead) != CONNECTION_OK) &&
        (rc = sink_connect(s, &s->pg_ahead, 0, errstr, errsz)))
        return rc;
    int stored = 0;
    for (size_t i = 0; i < NPARTS && rc >= ST_SINK_OK; i++)
        if (OP(s, i, ahead) && !parts[i].after &&
            (rc = OP(s, i, ahead)(s->state[i], b->part[i], s->pg_ahead, errstr, errsz)) > 0)
            stored = 1;
    if (PQstatus(s->pg_ahead) != CONNECTION_OK) {
        PQfinish(s->pg_ahead);
        s->pg_ahead = NULL;
    }
    return rc < ST_SINK_OK ? rc : stored;
}

int st_sink_isolate(struct st_sink *s, struct st_sink_batch *b, st_sink_refused_cb cb,
                    void *arg, char *errstr, size_t errsz)
{
    char err[512];
    int rc = ST_SINK_OK;
    if ((!s->pg || PQstatus(s->pg) != CONNECTION_OK) &&
        (rc = sink_connect(s, &s->pg, 0, errstr, errsz)))
        return rc;
    if (st_pg_exec(s->pg, "BEGIN", err, sizeof(err))) {
        snprintf(errstr, errsz, "could not begin a transaction: %s", err);
        rc = ST_SINK_RETRY;
    }
    for (size_t i = 0; i < NPARTS && rc == ST_SINK_OK; i++)
        if (!parts[i].after && OP(s, i, isolate))
            rc = OP(s, i, isolate)(s->state[i], b->part[i], s->pg, cb, arg, errstr,
                                   errsz);
    if (PQtransactionStatus(s->pg) == PQTRANS_INTRANS ||
        PQtransactionStatus(s->pg) == PQTRANS_INERROR)
        st_pg_exec(s->pg, "ROLLBACK", err, sizeof(err));
    if (PQstatus(s->pg) != CONNECTION_OK) {
        PQfinish(s->pg);
        s->pg = NULL;
        rc = ST_SINK_RETRY;
    }
    return rc == ST_SINK_OK ? ST_SINK_OK : ST_SINK_RETRY;
}

/* One transaction on *pg over the parts with after == after, then their
 * end. Returns ST_SINK_OK, or an error class with errstr set after rolling
 * back (*pg closed when the connection was lost). */
static int write_parts(struct st_sink *s, PGconn **pg, int after, struct st_sink_batch *b,
                       const struct st_findings *fs, char *errstr, size_t errsz)
{
    char err[512];
    int rc;

    if ((!*pg || PQstatus(*pg) != CONNECTION_OK) &&
        (rc = sink_connect(s, pg, after, errstr, errsz)))
        return rc;
    for (size_t i = 0; i < NPARTS; i++)
        if (s->on[i] && parts[i].after == after && OP(s, i, before) &&
            (rc = OP(s, i, before)(s->state[i], b->part[i], *pg, errstr, errsz)))
            goto fail_outside; /* no transaction open yet */
    if (st_pg_exec(*pg, "BEGIN", err, sizeof(err))) {
        snprintf(errstr, errsz, "could not begin a transaction: %s", err);
        rc = ST_SINK_RETRY;
        goto fail;
    }
    struct st_sink_txn tx = {fs, 0};
    for (size_t i = 0; i < NPARTS; i++)
        if (s->on[i] && parts[i].after == after &&
            (rc = OP(s, i, write)(s->state[i], b->part[i], *pg, &tx, errstr, errsz)))
            goto fail;
    PGresult *res = PQexec(*pg, "COMMIT");
    if ((rc = st_sink_result(res, "could not commit", errstr, errsz)))
        goto fail;
    end_all(s, b, after, 1);
    return ST_SINK_OK;
fail:
    /* not after a failed BEGIN or COMMIT (no transaction left: libpq
     * would print the server's warning on stderr) */
    if (PQtransactionStatus(*pg) == PQTRANS_INTRANS ||
        PQtransactionStatus(*pg) == PQTRANS_INERROR)
        st_pg_exec(*pg, "ROLLBACK", err, sizeof(err));
fail_outside:
    if (PQstatus(*pg) != CONNECTION_OK) {
        PQfinish(*pg);
        *pg = NULL;
        rc = ST_SINK_RETRY;
    }
    end_all(s, b, after, 0);
    return rc;
}

int st_sink_write(struct st_sink *s, struct st_sink_batch *b, const struct st_findings *fs,
                  char *errstr, size_t errsz)
{
    /* an empty batch opens no transaction (it would be left idle in one) */
    if (b->staged == 0 && fs->n == 0)
        return ST_SINK_OK;
    return write_parts(s, &s->pg, 0, b, fs, errstr, errsz);
}

int st_sink_write_after(struct st_sink *s, struct st_sink_batch *b, char *errstr,
                        size_t errsz)
{
    static const struct st_findings none = {0};
    if (s->nafter == 0)
        return ST_SINK_OK;
    /* nothing it writes is refused for its data: the same write succeeds
     * later, so every failure is retried */
    return write_parts(s, &s->pg_after, 1, b, &none, errstr, errsz) ? ST_SINK_RETRY
                                                                      : ST_SINK_OK;
}
