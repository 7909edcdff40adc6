/* refresh.c: the store role's refresh of the findings that name the
 * events it stores (see refresh.h). */
#include <stdlib.h>

#include "buf.h"
#include "log.h"
#include "pg.h"
#include "sinks/refresh.h"

/* The keys of one batch's events, as the open element lists of two array
 * literals (closed into a copy at write time, so that a retry finds them
 * as staged). Owned by the batch; written by the filling thread, read by
 * the writer once the batch is handed over. */
struct refresh_batch {
    struct st_buf sources, ids;
    size_t n;
};

/* The closed copies of the lists, the committer's (refresh_write runs in
 * st_sink_write_after). */
struct refresh_part {
    struct st_buf sources, ids;
};

/* First the rows naming the events stored take their values
 * (sql/011_finding_events_cache.sql: a detect analyzer wrote them before
 * the events were here), so that the refresh reads them from the rows, as
 * an all analyzer's rows have them: of an event id stored twice (two
 * times), the earliest, as the findings sink takes. The rows without
 * values are found through sql/012's partial index. */
static const char *sql_fill =
    "UPDATE finding_events t SET event_ts = x.ts, event_trace_id = x.trace_id,"
    " event_target = x.target, event_skewed = x.skewed"
    " FROM unnest($1::text[], $2::text[]) AS u(s, e)"
    " CROSS JOIN LATERAL (SELECT ev.ts, ev.trace_id, ev.target, ev.skewed FROM events ev"
    "  WHERE ev.source_name = u.s AND ev.event_id = u.e ORDER BY ev.ts LIMIT 1) x"
    " WHERE t.source_name = u.s AND t.event_id = u.e AND t.event_ts IS NULL";

/* Then the refresh sinks/findings.c runs for the findings of a batch
 * (sql/009_finding_refresh.sql, sql/011), for every finding naming one of
 * the events (test_roles compares the result with an analyzer of the all
 * role). The findings naming them: an index probe per event (the
 * LATERAL subquery, kept one by OFFSET 0). As a plain join PostgreSQL
 * planned a hash join over a scan of every finding_events row: 122 ms a
 * batch of 10,000 at 275,000 rows, growing with the table; the probes
 * take 25 ms, whatever its size. */
static const char *sql_refresh =
    "SELECT sandtrail_refresh_findings(ARRAY("
    " SELECT DISTINCT x.finding_id FROM unnest($1::text[], $2::text[]) AS u(s, e)"
    " CROSS JOIN LATERAL (SELECT t.finding_id FROM finding_events t"
    "  WHERE t.source_name = u.s AND t.event_id = u.e OFFSET 0) x))";

static void *refresh_create(const struct st_analyzer_conf *conf, char *errstr,
                            size_t errsz)
{
    (void)conf;
    (void)errstr;
    (void)errsz;
    return st_calloc(1, sizeof(struct refresh_part));
}

static int refresh_prepare(void *state, PGconn *pg, char *errstr, size_t errsz)
{
    (void)state;
    return st_pg_exec(pg, ST_REFRESH_ISOLATION, errstr, errsz);
}

static void refresh_destroy(void *state)
{
    struct refresh_part *p = state;
    if (!p)
        return;
    st_buf_fini(&p->sources);
    st_buf_fini(&p->ids);
    free(p);
}

static void *refresh_batch_new(void *state)
{
    (void)state;
    return st_calloc(1, sizeof(struct refresh_batch));
}

static void refresh_batch_destroy(void *batch)
{
    struct refresh_batch *b = batch;
    if (!b)
        return;
    st_buf_fini(&b->sources);
    st_buf_fini(&b->ids);
    free(b);
}

static void refresh_stage(void *state, void *batch, const struct st_sink_event *se)
{
    struct refresh_batch *b = batch;
    (void)state;
    st_pg_array_add(&b->sources, se->ev->source_name);
    st_pg_array_add(&b->ids, se->ev->event_id);
    b->n++;
}

/* A copy of the open list `from`, closed. */
static const char *closed(struct st_buf *to, const struct st_buf *from)
{
    st_buf_reset(to);
    if (from->len)
        st_buf_add(to, from->data, from->len);
    st_pg_array_end(to);
    return to->data;
}

static int refresh_write(void *state, void *batch, PGconn *pg,
                         struct st_sink_txn *tx, char *errstr, size_t errsz)
{
    struct refresh_part *p = state;
    struct refresh_batch *b = batch;
    int rc;
    (void)tx;
    if (b->n == 0)
        return ST_SINK_OK;
    /* the events are committed (this part follows their transaction):
     * held from here to this transaction's commit */
    if ((rc = st_sink_result(PQexec(pg, ST_REFRESH_LOCK),
                             "could not lock the findings' refresh", errstr, errsz)))
        return rc;
    const char *v[2] = {closed(&p->sources, &b->sources), closed(&p->ids, &b->ids)};
    if ((rc = st_sink_result(PQexecParams(pg, sql_fill, 2, NULL, v, NULL, NULL, 0),
                             "could not give finding_events their stored events' values",
                             errstr, errsz)))
        return rc;
    return st_sink_result(PQexecParams(pg, sql_refresh, 2, NULL, v, NULL, NULL, 0),
                          "could not refresh the findings naming stored events", errstr,
                          errsz);
}

static void refresh_end(void *state, void *batch, int committed)
{
    struct refresh_batch *b = batch;
    (void)state;
    if (!committed)
        return;
    st_buf_reset(&b->sources);
    st_buf_reset(&b->ids);
    b->n = 0;
}

/* A refused message's key may stay in the lists: refreshing a finding
 * whose event is absent only recomputes it. */
const struct st_sink_part_ops st_sink_refresh = {
    .name = "refresh",
    .create = refresh_create,
    .destroy = refresh_destroy,
    .prepare = refresh_prepare,
    .batch_new = refresh_batch_new,
    .batch_destroy = refresh_batch_destroy,
    .stage = refresh_stage,
    .write = refresh_write,
    .end = refresh_end,
};
