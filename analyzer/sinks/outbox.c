/* outbox.c: the sink part that writes alert notifications (see outbox.h).
 *
 * Why a part and not a trigger on findings: the findings part updates a
 * finding up to three times per batch (upsert, evidence, refresh); a part
 * that runs once after it sees the batch's final rows and writes at most
 * one notification per finding with a single set-based statement, inside
 * the same transaction, so a finding change never commits without its
 * notification. Findings dismissed as false positives raise nothing more. */
#include <stdlib.h>

#include "buf.h"
#include "log.h"
#include "pg.h"
#include "sinks/outbox.h"

/* The batch's finding ids as one array literal, reused across batches. */
struct outbox_part {
    struct st_buf ids;
};

/* Per finding, what its notifications already say comes from one index
 * probe (notifications' key starts with finding_id): a LATERAL aggregate
 * is run per finding, where the EXISTS / NOT EXISTS form before it was
 * planned, with the table's statistics behind during a drain, as a sort
 * of every notification per batch (docs/architecture.md, "Findings per
 * batch, not per finding"). kind: 'severity_raised' when the finding was
 * announced before, else 'created'; written only when its severity is
 * above every one announced. */
static const char *sql_outbox =
    "INSERT INTO notifications (delivery_id, finding_id, kind, severity, task_id)"
    " SELECT f.finding_id || '.' || k.kind || '.' || f.severity, f.finding_id,"
    "  k.kind, f.severity, f.task_id"
    " FROM findings f"
    " CROSS JOIN LATERAL (SELECT CASE WHEN bool_or(n.kind = 'created')"
    "   THEN 'severity_raised' ELSE 'created' END AS kind, max(n.severity) AS top"
    "  FROM notifications n"
    "  WHERE n.finding_id = f.finding_id AND n.kind IN ('created', 'severity_raised')) k"
    " WHERE f.finding_id = ANY ($1::text[]) AND f.status <> 'false_positive'"
    "  AND (k.top IS NULL OR k.top < f.severity)"
    " ORDER BY f.finding_id"
    " ON CONFLICT DO NOTHING";

static void *outbox_create(const struct st_analyzer_conf *conf, char *errstr,
                           size_t errsz)
{
    return st_calloc(1, sizeof(struct outbox_part));
}

static void outbox_destroy(void *state)
{
    struct outbox_part *p = state;
    if (!p)
        return;
    st_buf_fini(&p->ids);
    free(p);
}

static int outbox_write(void *state, void *batch, PGconn *pg, struct st_sink_txn *tx,
                        char *errstr, size_t errsz)
{
    const struct st_findings *fs = tx->fs;
    struct outbox_part *p = state;
    if (fs->n == 0)
        return ST_SINK_OK;
    st_buf_reset(&p->ids);
    for (size_t i = 0; i < fs->n; i++)
        st_pg_array_add(&p->ids, fs->items[i].id);
    st_pg_array_end(&p->ids);
    const char *params[1] = {p->ids.data};
    return st_sink_result(PQexecParams(pg, sql_outbox, 1, NULL, params, NULL, NULL, 0),
                          "could not write alert notifications", errstr, errsz);
}

const struct st_sink_part_ops st_sink_outbox = {
    .name = "outbox",
    .create = outbox_create,
    .destroy = outbox_destroy,
    .write = outbox_write,
};
