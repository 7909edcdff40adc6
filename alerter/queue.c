/* queue.c: the outbox as the alerter sees it (see queue.h). */
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "buf.h"
#include "log.h"
#include "pg.h"
#include "queue.h"

struct st_queue {
    PGconn *pg;      /* claims and records */
    PGconn *listen;  /* LISTEN sandtrail_alerts only */
    char *dsn;
    char names[1024], minsevs[256]; /* our receivers, as array literals */
    char repeat[24], quiet[24], backfill[24], alerter[96];
    PGresult *rows;  /* of the last claim or firing */
};

/* What a receiver needs of one notification and its finding; the queue
 * columns come first (NULLs for a re-send). ends_at: now for an alert that
 * has ended, else repeat_s x 3 ahead, or the end of the quiet time. */
#define ALERT_COLS                                                                    \
    " n.delivery_id, n.kind, n.severity, f.finding_id, f.detector, f.status,"        \
    " f.task_id, f.run_id, f.summary,"                                               \
    " to_char(f.first_seen AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'),"  \
    " to_char(f.last_seen AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"'),"   \
    " f.event_count, coalesce(f.evidence -> 'targets', '[]')::text,"                 \
    " coalesce((SELECT min(e.source_platform) FROM finding_events fe JOIN events e"  \
    "   USING (source_name, event_id) WHERE fe.finding_id = f.finding_id), ''),"     \
    " (SELECT array_agg(DISTINCT l.severity ORDER BY l.severity)::text"              \
    "   FROM notifications l WHERE l.finding_id = f.finding_id"                      \
    "   AND l.kind IN ('created', 'severity_raised') AND l.severity < n.severity),"  \
    " (extract(epoch FROM CASE WHEN n.kind IN ('resolved', 'dismissed')"             \
    "   OR f.status IN ('resolved', 'false_positive') THEN now()"                    \
    "   WHEN $2::int > 0 THEN least(now() + make_interval(secs => $1::int * 3),"     \
    "     f.updated_at + make_interval(secs => $2::int))"                            \
    "   ELSE now() + make_interval(secs => $1::int * 3) END) * 1000000)::bigint,"    \
    " (extract(epoch FROM n.created_at) * 1000000)::bigint"

enum { C_ID, C_RECEIVER, C_ATTEMPTS, C_DELIVERY, C_WINDOW_END = C_DELIVERY + 17 };

/* the rows are locked first, then their columns computed for those only */
static const char *sql_claim =
    "WITH c AS (SELECT q.notification_id, q.receiver, q.attempts, q.next_attempt_at"
    "  FROM notification_queue q WHERE q.state = 'pending' AND q.next_attempt_at <= now()"
    "  AND q.receiver = ANY ($3::text[])"
    "  ORDER BY q.next_attempt_at, q.notification_id LIMIT $4 FOR UPDATE SKIP LOCKED)"
    " SELECT c.notification_id, c.receiver, c.attempts," ALERT_COLS
    " FROM c JOIN notifications n USING (notification_id) JOIN findings f USING (finding_id)"
    " ORDER BY c.next_attempt_at, c.notification_id";

/* held rows whose window has closed, grouped for their digests; the
 * advisory lock gives each receiver and task's rows to one alerter, so
 * that alerters side by side send one digest, not a share each */
static const char *sql_claim_held =
    "WITH c AS (SELECT q.notification_id, q.receiver, q.attempts, q.next_attempt_at,"
    "  n.task_id FROM notification_queue q JOIN notifications n USING (notification_id)"
    "  WHERE q.state = 'held' AND q.next_attempt_at <= now()"
    "  AND q.receiver = ANY ($3::text[])"
    "  AND pg_try_advisory_xact_lock(74657302, hashtext(q.receiver || '/' || n.task_id))"
    "  ORDER BY q.receiver, n.task_id, q.next_attempt_at, q.notification_id LIMIT $4"
    "  FOR UPDATE OF q SKIP LOCKED)"
    " SELECT c.notification_id, c.receiver, c.attempts," ALERT_COLS ","
    " extract(epoch FROM c.next_attempt_at)::bigint"
    " FROM c JOIN notifications n USING (notification_id) JOIN findings f USING (finding_id)"
    " ORDER BY c.receiver, c.task_id, c.next_attempt_at, c.notification_id";

static const char *sql_hold =
    "WITH d AS (INSERT INTO deliveries (notification_id, receiver, attempt, outcome,"
    "  error, alerter) VALUES ($1, $2, $3, 'held', 'over the throttle: in the digest at '"
    "  || to_timestamp($4::bigint), $5))"
    " UPDATE notification_queue SET state = 'held',"
    " next_attempt_at = to_timestamp($4::bigint)"
    " WHERE notification_id = $1 AND receiver = $2";

/* the latest notification of each finding still firing that reached
 * Alertmanager; quiet findings are sent (ended) for a while after */
static const char *sql_firing =
    "SELECT 0, 'alertmanager', 0," ALERT_COLS
    " FROM findings f"
    " JOIN LATERAL (SELECT * FROM notifications n0 WHERE n0.finding_id = f.finding_id"
    "  AND n0.kind IN ('created', 'severity_raised')"
    "  ORDER BY n0.severity DESC LIMIT 1) n ON true"
    " WHERE f.status IN ('open', 'acknowledged')"
    " AND ($2::int = 0 OR f.updated_at + make_interval(secs => $2::int + 3 * $1::int) > now())"
    " AND EXISTS (SELECT 1 FROM notification_queue q JOIN notifications m"
    "  USING (notification_id) WHERE m.finding_id = f.finding_id"
    "  AND q.receiver = 'alertmanager' AND q.state = 'delivered')"
    " ORDER BY f.finding_id";

static const char *sql_fanout =
    "INSERT INTO notification_queue (notification_id, receiver)"
    " SELECT n.notification_id, r.name FROM notifications n"
    " CROSS JOIN unnest($1::text[], $2::severity[]) AS r(name, minsev)"
    " WHERE n.created_at > now() - make_interval(secs => $3::int)"
    " AND n.severity >= r.minsev"
    " AND NOT EXISTS (SELECT 1 FROM notification_queue q"
    "  WHERE q.notification_id = n.notification_id AND q.receiver = r.name)"
    " ORDER BY n.notification_id"
    " ON CONFLICT DO NOTHING";

static const char *sql_attempt =
    "INSERT INTO deliveries (notification_id, receiver, attempt, outcome, http_status,"
    " error, alerter, digest_id)"
    " VALUES ($1, $2, $3, $4, nullif($5::int, 0), nullif($6, ''), $7, $8)";

/* The next attempt's time counts from now, the answer just read: not from
 * now(), the claiming transaction's start, before every send of the claim
 * -- a retry of the claim's later rows came that much early, less than
 * their receiver's Retry-After after its 429 (test_alerts). */
static const char *sql_update =
    "UPDATE notification_queue SET attempts = $3, state = $4,"
    " next_attempt_at = clock_timestamp()"
    "  + make_interval(secs => $5::double precision / 1000),"
    " done_at = CASE WHEN $4 IN ('pending', 'held') THEN NULL ELSE clock_timestamp() END"
    " WHERE notification_id = $1 AND receiver = $2";

/* Reconnects what was lost; a claim left open by a failure is rolled back
 * here, before anything else runs on the connection. */
static int connect_all(struct st_queue *q, char *errstr, size_t errsz)
{
    char err[512];
    if (q->pg && PQstatus(q->pg) == CONNECTION_OK &&
        PQtransactionStatus(q->pg) != PQTRANS_IDLE)
        st_pg_exec(q->pg, "ROLLBACK", err, sizeof(err));
    if (!q->pg || PQstatus(q->pg) != CONNECTION_OK) {
        PQfinish(q->pg);
        if (!(q->pg = st_pg_connect(q->dsn, errstr, errsz)))
            return -1;
    }
    if (!q->listen || PQstatus(q->listen) != CONNECTION_OK) {
        PQfinish(q->listen);
        if (!(q->listen = st_pg_connect(q->dsn, errstr, errsz)))
            return -1;
        if (st_pg_exec(q->listen, "LISTEN sandtrail_alerts", err, sizeof(err))) {
            snprintf(errstr, errsz, "could not listen: %s", err);
            PQfinish(q->listen);
            q->listen = NULL;
            return -1;
        }
    }
    return 0;
}

struct st_queue *st_queue_new(const struct st_alerter_conf *conf,
                              const struct st_receiver *rcv, size_t nrcv, char *errstr,
                              size_t errsz)
{
    struct st_queue *q = st_calloc(1, sizeof(*q));
    struct st_buf names, sevs;
    char host[64] = "";
    st_buf_init(&names);
    st_buf_init(&sevs);
    for (size_t i = 0; i < nrcv; i++) {
        st_pg_array_add(&names, rcv[i].name);
        st_pg_array_add(&sevs, rcv[i].min_severity);
    }
    st_pg_array_end(&names);
    st_pg_array_end(&sevs);
    snprintf(q->names, sizeof(q->names), "%s", names.data);
    snprintf(q->minsevs, sizeof(q->minsevs), "%s", sevs.data);
    st_buf_fini(&names);
    st_buf_fini(&sevs);
    snprintf(q->repeat, sizeof(q->repeat), "%" PRId64, conf->repeat_s);
    snprintf(q->quiet, sizeof(q->quiet), "%" PRId64, conf->quiet_s);
    snprintf(q->backfill, sizeof(q->backfill), "%" PRId64, conf->backfill_s);
    gethostname(host, sizeof(host) - 1);
    snprintf(q->alerter, sizeof(q->alerter), "%s:%d", host, (int)getpid());
    q->dsn = st_strdup(conf->pg_dsn);
    if (connect_all(q, errstr, errsz)) {
        st_queue_destroy(q);
        return NULL;
    }
    /* the analyzer (or `sandtrail migrate`) creates the outbox: without it
     * there is nothing to wait for */
    PGresult *res = PQexec(q->pg, "SELECT to_regclass('notification_queue') IS NOT NULL");
    int ok = PQresultStatus(res) == PGRES_TUPLES_OK && !strcmp(PQgetvalue(res, 0, 0), "t");
    PQclear(res);
    if (!ok) {
        snprintf(errstr, errsz, "no alert outbox in the database (migration 003_alerts.sql): "
                                "run `sandtrail migrate` or start the analyzer first");
        st_queue_destroy(q);
        return NULL;
    }
    return q;
}

void st_queue_destroy(struct st_queue *q)
{
    if (!q)
        return;
    PQclear(q->rows);
    PQfinish(q->pg);
    PQfinish(q->listen);
    free(q->dsn);
    free(q);
}

static int failed(PGresult *res, ExecStatusType want, const char *what, char *errstr,
                  size_t errsz)
{
    if (PQresultStatus(res) == want)
        return 0;
    snprintf(errstr, errsz, "%s: %s", what, PQresultErrorMessage(res));
    size_t n = strlen(errstr);
    if (n && errstr[n - 1] == '\n')
        errstr[n - 1] = '\0';
    return 1;
}

long st_queue_fanout(struct st_queue *q, char *errstr, size_t errsz)
{
    if (connect_all(q, errstr, errsz))
        return -1;
    const char *p[3] = {q->names, q->minsevs, q->backfill};
    PGresult *res = PQexecParams(q->pg, sql_fanout, 3, NULL, p, NULL, NULL, 0);
    long n = -1;
    if (!failed(res, PGRES_COMMAND_OK, "could not queue notifications", errstr, errsz))
        n = atol(PQcmdTuples(res));
    PQclear(res);
    return n;
}

static int load_rows(struct st_queue *q, const char *sql, int nparams,
                     const char *const *p, const char *what, char *errstr, size_t errsz)
{
    PQclear(q->rows);
    q->rows = PQexecParams(q->pg, sql, nparams, NULL, p, NULL, NULL, 0);
    if (failed(q->rows, PGRES_TUPLES_OK, what, errstr, errsz)) {
        PQclear(q->rows);
        q->rows = NULL;
        return -1;
    }
    return PQntuples(q->rows);
}

static int claim(struct st_queue *q, const char *sql, int limit, char *errstr,
                 size_t errsz)
{
    char err[512], lim[16];
    if (connect_all(q, errstr, errsz))
        return -1;
    if (st_pg_exec(q->pg, "BEGIN", err, sizeof(err))) {
        snprintf(errstr, errsz, "could not begin a transaction: %s", err);
        return -1;
    }
    snprintf(lim, sizeof(lim), "%d", limit);
    const char *p[4] = {q->repeat, q->quiet, q->names, lim};
    int n = load_rows(q, sql, 4, p, "could not claim notifications", errstr, errsz);
    if (n <= 0)
        st_pg_exec(q->pg, "ROLLBACK", err, sizeof(err));
    return n;
}

int st_queue_claim(struct st_queue *q, int limit, char *errstr, size_t errsz)
{
    return claim(q, sql_claim, limit, errstr, errsz);
}

int st_queue_claim_held(struct st_queue *q, int limit, char *errstr, size_t errsz)
{
    return claim(q, sql_claim_held, limit, errstr, errsz);
}

int64_t st_queue_window_end(const struct st_queue *q, int i)
{
    return strtoll(PQgetvalue(q->rows, i, C_WINDOW_END), NULL, 10);
}

int st_queue_hold(struct st_queue *q, int64_t notification_id, const char *receiver,
                  int attempt, int64_t until_s, char *errstr, size_t errsz)
{
    char id[24], att[16], until[24];
    snprintf(id, sizeof(id), "%" PRId64, notification_id);
    snprintf(att, sizeof(att), "%d", attempt);
    snprintf(until, sizeof(until), "%" PRId64, until_s);
    const char *p[5] = {id, receiver, att, until, q->alerter};
    PGresult *res = PQexecParams(q->pg, sql_hold, 5, NULL, p, NULL, NULL, 0);
    int bad = failed(res, PGRES_COMMAND_OK, "could not hold a notification", errstr, errsz);
    PQclear(res);
    return bad ? -1 : 0;
}

int st_queue_firing(struct st_queue *q, char *errstr, size_t errsz)
{
    if (connect_all(q, errstr, errsz))
        return -1;
    const char *p[2] = {q->repeat, q->quiet};
    return load_rows(q, sql_firing, 2, p, "could not read firing findings", errstr, errsz);
}

void st_queue_alert(const struct st_queue *q, int i, struct st_alert *a,
                    const char **receiver, int *attempts)
{
    PGresult *r = q->rows;
    int c = C_DELIVERY;
    memset(a, 0, sizeof(*a));
    a->notification_id = strtoll(PQgetvalue(r, i, C_ID), NULL, 10);
    *receiver = PQgetvalue(r, i, C_RECEIVER);
    *attempts = atoi(PQgetvalue(r, i, C_ATTEMPTS));
    a->delivery_id = PQgetvalue(r, i, c++);
    a->kind = PQgetvalue(r, i, c++);
    a->severity = PQgetvalue(r, i, c++);
    a->finding_id = PQgetvalue(r, i, c++);
    a->detector = PQgetvalue(r, i, c++);
    a->status = PQgetvalue(r, i, c++);
    a->task_id = PQgetvalue(r, i, c++);
    a->run_id = PQgetvalue(r, i, c++);
    a->summary = PQgetvalue(r, i, c++);
    a->first_seen = PQgetvalue(r, i, c++);
    a->last_seen = PQgetvalue(r, i, c++);
    a->event_count = PQgetvalue(r, i, c++);
    a->targets = PQgetvalue(r, i, c++);
    a->platform = PQgetvalue(r, i, c++);
    a->lower_severities = PQgetisnull(r, i, c) ? NULL : PQgetvalue(r, i, c);
    c++;
    a->ends_at_us = strtoll(PQgetvalue(r, i, c++), NULL, 10);
    a->notified_us = strtoll(PQgetvalue(r, i, c++), NULL, 10);
}

const char *st_queue_record(struct st_queue *q, int64_t notification_id,
                            const char *receiver, int attempt,
                            const struct st_send_result *r, int64_t retry_ms,
                            const char *digest_id, char *errstr, size_t errsz)
{
    char id[24], att[16], status[16], delay[24];
    const char *outcome, *state;
    switch (r->outcome) {
    case ST_SEND_DELIVERED: outcome = state = "delivered"; break;
    case ST_SEND_RETRY:
        outcome = retry_ms < 0 ? "failed" : "retry";
        state = retry_ms < 0 ? "failed" : digest_id ? "held" : "pending";
        break;
    default: outcome = state = "failed"; break;
    }
    snprintf(id, sizeof(id), "%" PRId64, notification_id);
    snprintf(att, sizeof(att), "%d", attempt);
    snprintf(status, sizeof(status), "%ld", r->http_status);
    snprintf(delay, sizeof(delay), "%" PRId64, retry_ms < 0 ? 0 : retry_ms);
    const char *pa[8] = {id, receiver, att, outcome, status, r->error, q->alerter, digest_id};
    PGresult *res = PQexecParams(q->pg, sql_attempt, 8, NULL, pa, NULL, NULL, 0);
    int bad = failed(res, PGRES_COMMAND_OK, "could not record delivery", errstr, errsz);
    PQclear(res);
    if (bad)
        return NULL;
    const char *pu[5] = {id, receiver, att, state, delay};
    res = PQexecParams(q->pg, sql_update, 5, NULL, pu, NULL, NULL, 0);
    bad = failed(res, PGRES_COMMAND_OK, "could not update the queue", errstr, errsz);
    PQclear(res);
    return bad ? NULL : state;
}

int st_queue_commit(struct st_queue *q, char *errstr, size_t errsz)
{
    char err[512];
    if (st_pg_exec(q->pg, "COMMIT", err, sizeof(err))) {
        snprintf(errstr, errsz, "could not commit deliveries: %s", err);
        st_pg_exec(q->pg, "ROLLBACK", err, sizeof(err));
        return -1;
    }
    return 0;
}

long st_queue_pending(struct st_queue *q, int64_t *due_ms, char *errstr, size_t errsz)
{
    if (connect_all(q, errstr, errsz))
        return -1;
    const char *p[1] = {q->names};
    PGresult *res = PQexecParams(
        q->pg,
        "SELECT count(*), coalesce(greatest(0, ceil(extract(epoch FROM"
        " min(next_attempt_at) - now()) * 1000)), -1)::bigint"
        " FROM notification_queue WHERE state IN ('pending', 'held')"
        " AND receiver = ANY ($1::text[])",
        1, NULL, p, NULL, NULL, 0);
    long n = -1;
    if (!failed(res, PGRES_TUPLES_OK, "could not count pending notifications", errstr,
                errsz)) {
        n = atol(PQgetvalue(res, 0, 0));
        *due_ms = strtoll(PQgetvalue(res, 0, 1), NULL, 10);
    }
    PQclear(res);
    return n;
}

int st_queue_wait(struct st_queue *q, int64_t timeout_ms)
{
    char errstr[512];
    if (connect_all(q, errstr, sizeof(errstr))) {
        st_warn("%s", errstr);
        usleep((useconds_t)(timeout_ms > 1000 ? 1000 : timeout_ms) * 1000);
        return -1;
    }
    struct pollfd pfd = {PQsocket(q->listen), POLLIN, 0};
    int woken = 0;
    if (poll(&pfd, 1, (int)timeout_ms) > 0) {
        if (!PQconsumeInput(q->listen)) {
            PQfinish(q->listen);
            q->listen = NULL;
            return -1;
        }
    }
    PGnotify *n;
    while ((n = PQnotifies(q->listen))) {
        woken = 1;
        PQfreemem(n);
    }
    return woken;
}
