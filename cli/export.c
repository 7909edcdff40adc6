/* export.c: `sandtrail evidence export`: a run's signed evidence bundle
 * (see docs/evidence.md for its files). */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "audit.h"
#include "buf.h"
#include "event.h"
#include "evidence.h"
#include "evkey.h"
#include "log.h"
#include "merkle.h"
#include "pg.h"
#include "timeutil.h"

#define VERSION "sandtrail 0.1"

/* A SQL literal for queries.sql (the values are what the user typed). */
static void sql_literal(struct st_buf *b, const char *s)
{
    if (!s) {
        st_buf_adds(b, "NULL");
        return;
    }
    st_buf_addc(b, '\'');
    for (; *s; s++) {
        if (*s == '\'')
            st_buf_addc(b, '\'');
        st_buf_addc(b, *s);
    }
    st_buf_addc(b, '\'');
}

static const char *sql_population =
    "SELECT kafka_topic, kafka_partition, kafka_offset, raw, event_id, source_name,\n"
    "       run_id\n"
    "  FROM events\n"
    " WHERE task_id = $1\n"
    "   AND ($2::text IS NULL OR run_id = $2)\n"
    "   AND run_id IN (SELECT run_id FROM events WHERE task_id = $1\n"
    "                    AND ($3::timestamptz IS NULL OR ts >= $3)\n"
    "                    AND ($4::timestamptz IS NULL OR ts < $4))\n"
    " ORDER BY ts, source_name, event_id";

static const char *sql_findings =
    "SELECT coalesce(json_agg(f ORDER BY f.first_seen, f.finding_id), '[]')::text\n"
    "  FROM (SELECT f.finding_id, f.detector, f.detector_version, f.severity,\n"
    "               f.task_id, f.run_id, f.first_seen, f.last_seen, f.event_count,\n"
    "               f.late_event_count, f.evidence, f.summary, f.created_at,\n"
    "               f.updated_at\n"
    "          FROM findings f\n"
    "         WHERE f.task_id = $1 AND f.run_id = ANY($2::text[])) f";

/* Tables other migrations may add that hold a finding's history or its
 * alert deliveries: exported when present and keyed by finding_id. */
/* What else describes a finding (sql/003_alerts.sql), where it exists:
 * its triage history and what on-call was told, per receiver, and when. */
static const char *const finding_tables[] = {
    "finding_status_history", "notifications", "finding_notices", NULL,
};

/* The run summary as the run drill-down dashboard's "Run summary" panel
 * computes it (dashboards/grafana/run-drilldown.json, view run_summary in
 * sql/006_analysts.sql): the same columns from the same view, so the
 * numbers an auditor reconciles are the dashboard's. */
static const char *sql_run_summary =
    "SELECT coalesce(json_agg(s ORDER BY s.run_id), '[]')::text FROM ("
    "SELECT run_id, first_ts, last_ts, events, commands, commands_failed, files_written,"
    " requests_allowed, requests_denied, destinations_denied, credentials_issued,"
    " findings, max_severity::text AS max_severity, redactions"
    " FROM run_summary WHERE task_id = $1 AND run_id = ANY($2::text[])) s";

static int exec_ok(PGresult *r, const char *what, char *errstr, size_t errsz)
{
    if (PQresultStatus(r) == PGRES_TUPLES_OK)
        return 0;
    snprintf(errstr, errsz, "%s: %s", what, PQresultErrorMessage(r));
    return -1;
}

static int exec_ok_command(PGresult *r, const char *what, char *errstr, size_t errsz)
{
    if (PQresultStatus(r) == PGRES_COMMAND_OK)
        return 0;
    snprintf(errstr, errsz, "%s: %s", what, PQresultErrorMessage(r));
    return -1;
}

static void queries_add(struct st_buf *q, const char *what, const char *sql,
                        const char *const *params, int nparams, long rows)
{
    st_buf_printf(q, "-- %s: %ld row(s)\n", what, rows);
    for (int i = 0; i < nparams; i++) {
        st_buf_printf(q, "-- $%d = ", i + 1);
        sql_literal(q, params[i]);
        st_buf_addc(q, '\n');
    }
    st_buf_printf(q, "%s;\n\n", sql);
}

/* Notes a part of the findings document left out, and why: in the
 * document's "not_exported" object (what a reader of the bundle sees), in
 * queries.sql and on stderr. */
static void left_out(cJSON *doc, struct st_buf *queries, const char *key, const char *why)
{
    cJSON *o = cJSON_GetObjectItemCaseSensitive(doc, "not_exported");
    if (!o)
        o = cJSON_AddObjectToObject(doc, "not_exported");
    cJSON_AddStringToObject(o, key, why);
    st_buf_printf(queries, "-- %s: not exported: %s\n\n", key, why);
    fprintf(stderr, "sandtrail: %s not exported: %s\n", key, why);
}

/* The reason a tolerated read failed, for the bundle and stderr: the
 * server's primary message (it names the object and the cause), except
 * for data errors (classes 22 and 23), whose message may quote a value:
 * then the SQLSTATE alone. One line, cut on a character's boundary. */
static void failure_reason(const PGresult *r, char *why, size_t whysz)
{
    const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    const char *m = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
    if (state && (!strncmp(state, "22", 2) || !strncmp(state, "23", 2)))
        snprintf(why, whysz, "the query failed on the data (SQLSTATE %s)", state);
    else
        snprintf(why, whysz, "%s", m ? m : "the query failed");
    for (char *c = why; *c; c++)
        if ((unsigned char)*c < 0x20)
            *c = ' ';
    /* snprintf may have cut a UTF-8 sequence: drop its lead and tail */
    size_t n = strlen(why);
    if (n + 1 == whysz) {
        size_t i = n;
        while (i > 0 && ((unsigned char)why[i - 1] & 0xC0) == 0x80)
            i--;
        if (i > 0 && (unsigned char)why[i - 1] >= 0xC0) {
            unsigned char lead = (unsigned char)why[i - 1];
            size_t want = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
            if (n - (i - 1) < want)
                why[i - 1] = '\0';
        }
    }
}

/* A failure no other read of this export could survive (the connection
 * lost, the statement cancelled or timed out, resources exhausted, the
 * transaction broken): the export fails rather than leave parts out. */
static int fatal_failure(PGconn *pg, const PGresult *r)
{
    const char *state = PQresultErrorField(r, PG_DIAG_SQLSTATE);
    return PQstatus(pg) != CONNECTION_OK || !state || !strncmp(state, "08", 2) ||
           !strncmp(state, "57", 2) || !strncmp(state, "53", 2) || !strncmp(state, "40", 2);
}

/* Adds the JSON document one query returns to doc as key; a failure of the
 * query itself (a policy or view that errs, a withheld column) leaves that
 * part out (left_out) rather than failing the export. The query runs in a
 * savepoint, so that its failure does not abort the export's one
 * transaction, and with it every later read. Returns 0, or -1 with errstr
 * set on a failure the export cannot survive (fatal_failure). */
static int tolerated(PGconn *pg, cJSON *doc, const char *key, const char *sql,
                     const char *const *v, int nv, struct st_buf *queries, char *errstr,
                     size_t errsz)
{
    PGresult *r = PQexec(pg, "SAVEPOINT tolerated");
    if (exec_ok_command(r, "could not make a savepoint", errstr, errsz)) {
        PQclear(r);
        return -1;
    }
    PQclear(r);
    r = PQexecParams(pg, sql, nv, NULL, v, NULL, NULL, 0);
    if (PQresultStatus(r) == PGRES_TUPLES_OK) {
        cJSON *t = cJSON_Parse(PQgetvalue(r, 0, 0));
        queries_add(queries, key, sql, v, nv, cJSON_GetArraySize(t));
        cJSON_AddItemToObject(doc, key, t);
        PQclear(r);
        PQclear(PQexec(pg, "RELEASE SAVEPOINT tolerated"));
        return 0;
    }
    if (fatal_failure(pg, r)) {
        snprintf(errstr, errsz, "could not read %s: %s", key, PQresultErrorMessage(r));
        PQclear(r);
        return -1;
    }
    char why[256];
    failure_reason(r, why, sizeof(why));
    PQclear(r);
    r = PQexec(pg, "ROLLBACK TO SAVEPOINT tolerated; RELEASE SAVEPOINT tolerated");
    int rolled = PQresultStatus(r) == PGRES_COMMAND_OK;
    if (!rolled)
        snprintf(errstr, errsz, "could not roll back a failed read of %s: %s", key,
                 PQresultErrorMessage(r));
    PQclear(r);
    if (!rolled)
        return -1;
    left_out(doc, queries, key, why);
    return 0;
}

/* Whether relation name exists (in the search path) with a column col (or
 * any, col NULL), and whether this role may read it: 1 readable, 0 absent,
 * 2 present but withheld; -1 with errstr when the check itself failed
 * (then nothing can be said: the export fails). pg_attribute lists a
 * column whatever the role may read, unlike information_schema. */
static int relation_state(PGconn *pg, const char *name, const char *col, char *errstr,
                          size_t errsz)
{
    const char *v[2] = {name, col ? col : ""};
    PGresult *r = PQexecParams(pg,
                               "SELECT has_table_privilege(c.oid, 'SELECT') FROM pg_class c"
                               " WHERE c.oid = to_regclass($1) AND ($2 = '' OR EXISTS"
                               " (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid"
                               " AND a.attname = $2 AND NOT a.attisdropped))",
                               2, NULL, v, NULL, NULL, 0);
    if (exec_ok(r, "could not look up a table", errstr, errsz)) {
        PQclear(r);
        return -1;
    }
    int st = PQntuples(r) == 0 ? 0 : !strcmp(PQgetvalue(r, 0, 0), "t") ? 1 : 2;
    PQclear(r);
    return st;
}

/* The findings document: the run's findings, their events, and whatever
 * history or deliveries other tables hold for them, and the run summary.
 * A table or view that exists but the exporting role may not read, or
 * whose read fails on its own, is left out and named (left_out). */
static char *findings_json(PGconn *pg, const char *task, const char *runs_array,
                           struct st_buf *queries, char *errstr, size_t errsz)
{
    const char *v[2] = {task, runs_array};
    PGresult *r = PQexecParams(pg, sql_findings, 2, NULL, v, NULL, NULL, 0);
    if (exec_ok(r, "could not read findings", errstr, errsz)) {
        PQclear(r);
        return NULL;
    }
    cJSON *doc = cJSON_CreateObject();
    cJSON *fs = cJSON_Parse(PQgetvalue(r, 0, 0));
    PQclear(r);
    queries_add(queries, "findings", sql_findings, v, 2, cJSON_GetArraySize(fs));
    cJSON_AddItemToObject(doc, "findings", fs);
    const char *sql_fe = "SELECT coalesce(json_agg(fe ORDER BY fe.finding_id,"
                         " fe.source_name, fe.event_id), '[]')::text FROM finding_events fe"
                         " JOIN findings f USING (finding_id)"
                         " WHERE f.task_id = $1 AND f.run_id = ANY($2::text[])";
    r = PQexecParams(pg, sql_fe, 2, NULL, v, NULL, NULL, 0);
    if (exec_ok(r, "could not read finding_events", errstr, errsz)) {
        PQclear(r);
        cJSON_Delete(doc);
        return NULL;
    }
    cJSON *fe = cJSON_Parse(PQgetvalue(r, 0, 0));
    PQclear(r);
    queries_add(queries, "finding events", sql_fe, v, 2, cJSON_GetArraySize(fe));
    cJSON_AddItemToObject(doc, "finding_events", fe);
    int failed = 0;
    for (int i = 0; finding_tables[i] && !failed; i++) {
        int st = relation_state(pg, finding_tables[i], "finding_id", errstr, errsz);
        if (st == 1) {
            char sql[512];
            /* the table name comes from the fixed list above, never from input */
            snprintf(sql, sizeof(sql),
                     "SELECT coalesce(json_agg(t), '[]')::text FROM %s t WHERE t.finding_id"
                     " IN (SELECT finding_id FROM findings WHERE task_id = $1"
                     " AND run_id = ANY($2::text[]))",
                     finding_tables[i]);
            failed = tolerated(pg, doc, finding_tables[i], sql, v, 2, queries, errstr, errsz);
        } else if (st == 2) {
            left_out(doc, queries, finding_tables[i], "this role may not read it");
        }
        failed |= st < 0;
    }
    if (!failed) {
        int st = relation_state(pg, "run_summary", NULL, errstr, errsz);
        if (st == 1)
            failed = tolerated(pg, doc, "run_summary", sql_run_summary, v, 2, queries, errstr,
                               errsz);
        else if (st == 2)
            left_out(doc, queries, "run_summary", "this role may not read it");
        failed |= st < 0;
    }
    char *out = failed ? NULL : cJSON_Print(doc);
    cJSON_Delete(doc);
    return out;
}

struct pop_event {
    int part;       /* index into the partition list */
    int64_t offset;
    const char *raw;
    const char *event_id, *source_name;
};

static int sign_file(const struct st_evkey *key, const char *dir, const char *name,
                     const char *signame, const struct st_buf *data, char *errstr,
                     size_t errsz)
{
    uint8_t sig[ST_EVIDENCE_SIG];
    if (st_evkey_sign(key, data->data, data->len, sig)) {
        snprintf(errstr, errsz, "could not sign %s", name);
        return -1;
    }
    return write_file(dir, signame, sig, sizeof(sig), errstr, errsz);
}

int st_cli_export(int argc, char **argv, const char *dsn)
{
    static const struct option opts[] = {
        {"task", required_argument, NULL, 't'},  {"run", required_argument, NULL, 'r'},
        {"since", required_argument, NULL, 's'}, {"until", required_argument, NULL, 'u'},
        {"out", required_argument, NULL, 'o'},   {"archive", required_argument, NULL, 'a'},
        {"force", no_argument, NULL, 'f'},       {"pubkey", required_argument, NULL, 'k'},
        {"key", required_argument, NULL, 'K'},   {NULL, 0, NULL, 0},
    };
    const char *task = NULL, *runid = NULL, *since = NULL, *until = NULL, *out = NULL,
               *archive = NULL, *pubkeys = NULL;
    const char *keyfile = getenv("SANDTRAIL_EVIDENCE_KEY_FILE");
    int force = 0, c, status = 1;
    char errstr[1024], tmpdir[] = "/tmp/sandtrail-export-XXXXXX";
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 't': task = optarg; break;
        case 'r': runid = optarg; break;
        case 's': since = optarg; break;
        case 'u': until = optarg; break;
        case 'o': out = optarg; break;
        case 'a': archive = optarg; break;
        case 'f': force = 1; break;
        case 'k': pubkeys = optarg; break;
        case 'K': keyfile = optarg; break;
        default: return 64;
        }
    }
    if (!task || (!runid && !since && !until) || (!out && !archive)) {
        fprintf(stderr, "usage: sandtrail evidence export --task T (--run R | --since T1"
                        " [--until T2]) (--out DIR | --archive FILE.tar.gz) [--force]\n");
        return 64;
    }
    struct keyring kr = {0};
    struct st_evkey key = {0};
    PGconn *pg = NULL;
    PGresult *pop = NULL;
    struct st_buf queries, buf, faults, sums;
    struct pop_event *ev = NULL;
    struct walk *walks = NULL;
    cJSON **docs = NULL, *runs = NULL, *cps = NULL, *partsj = NULL;
    struct st_buf runs_array;
    char *findings = NULL;
    int nwalks = 0, npop = 0;
    st_buf_init(&queries);
    st_buf_init(&buf);
    st_buf_init(&faults);
    st_buf_init(&sums);
    st_buf_init(&runs_array);
    st_buf_adds(&faults, "");
    if (!keyfile || !*keyfile) {
        snprintf(errstr, sizeof(errstr), "no signing key: set SANDTRAIL_EVIDENCE_KEY_FILE");
        goto fail;
    }
    if (st_evkey_load(&key, keyfile, 1, errstr, sizeof(errstr)) ||
        load_trusted(&kr, pubkeys, errstr, sizeof(errstr)))
        goto fail;
    if (!(pg = st_pg_connect(dsn, errstr, sizeof(errstr))))
        goto fail;
    /* one snapshot for every read: the run's rows, their evidence and the
     * context are of the same moment (audit.c) */
    if (st_pg_exec(pg, "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY", errstr,
                   sizeof(errstr)))
        goto fail;
    if (archive) {
        if (!mkdtemp(tmpdir)) {
            snprintf(errstr, sizeof(errstr), "could not make a temporary folder");
            goto fail;
        }
        out = tmpdir;
    } else if (mkdir(out, 0755) && errno != EEXIST) {
        snprintf(errstr, sizeof(errstr), "could not create \"%s\": %s", out, strerror(errno));
        goto fail;
    }

    /* the population */
    const char *pv[4] = {task, runid, since, until};
    pop = PQexecParams(pg, sql_population, 4, NULL, pv, NULL, NULL, 0);
    if (exec_ok(pop, "could not read events", errstr, sizeof(errstr)))
        goto fail;
    npop = PQntuples(pop);
    queries_add(&queries, "events of the bundle (events.ndjson, in this order)",
                sql_population, pv, 4, npop);
    if (npop == 0) {
        snprintf(errstr, sizeof(errstr), "no stored event of task \"%s\"%s%s", task,
                 runid ? " run " : "", runid ? runid : "");
        goto fail;
    }
    ev = st_calloc((size_t)npop, sizeof(*ev));
    walks = st_calloc((size_t)npop, sizeof(*walks));
    runs = cJSON_CreateArray();
    long uncovered = 0;
    for (int i = 0; i < npop; i++) {
        const char *topic = PQgetvalue(pop, i, 0);
        int32_t part = (int32_t)atoi(PQgetvalue(pop, i, 1));
        int w = 0;
        while (w < nwalks && !(walks[w].partition == part && !strcmp(walks[w].topic, topic)))
            w++;
        if (w == nwalks) {
            walks[w].topic = topic;
            walks[w].partition = part;
            walks[w].collect = 1;
            walks[w].out = &faults;
            nwalks++;
        }
        ev[i].part = w;
        ev[i].offset = strtoll(PQgetvalue(pop, i, 2), NULL, 10);
        ev[i].raw = PQgetisnull(pop, i, 3) ? NULL : PQgetvalue(pop, i, 3);
        ev[i].event_id = PQgetvalue(pop, i, 4);
        ev[i].source_name = PQgetvalue(pop, i, 5);
        const char *run = PQgetvalue(pop, i, 6);
        int seen = 0;
        const cJSON *r;
        cJSON_ArrayForEach(r, runs) seen |= strcmp(r->valuestring, run) == 0;
        if (!seen) {
            st_pg_array_add(&runs_array, run);
            cJSON_AddItemToArray(runs, cJSON_CreateString(run));
        }
    }
    st_pg_array_end(&runs_array);
    for (int w = 0; w < nwalks; w++)
        if (walk_partition(pg, &walks[w], &kr, NULL, errstr, sizeof(errstr)))
            goto fail;
    long nfaults = 0;
    for (int w = 0; w < nwalks; w++)
        nfaults += walks[w].faults;
    for (int i = 0; i < npop; i++) {
        struct walk *w = &walks[ev[i].part];
        if (!ev[i].raw || w->ncp == 0 || ev[i].offset > w->cps[w->ncp - 1].last_offset) {
            if (uncovered++ == 0)
                st_buf_printf(&faults,
                              "not yet covered by a signed checkpoint: event \"%s\" of"
                              " source \"%s\" (and any later ones)\n",
                              ev[i].event_id, ev[i].source_name);
        }
    }
    if ((nfaults || uncovered) && !force) {
        fputs(faults.data, stderr);
        snprintf(errstr, sizeof(errstr),
                 "refusing to export: the stored rows fail the audit (%ld fault(s), %ld"
                 " event(s) not covered); --force exports anyway and says so",
                 nfaults, uncovered);
        goto fail;
    }

    /* events.ndjson, proofs.json, checkpoints.json */
    cJSON *proofs = cJSON_CreateArray();
    cps = cJSON_CreateArray();
    partsj = cJSON_CreateArray();
    docs = st_calloc((size_t)npop, sizeof(*docs));
    st_buf_reset(&buf);
    for (int w = 0; w < nwalks; w++) {
        struct walk *wk = &walks[w];
        if (wk->ncp == 0)
            continue;
        const struct cp *last = &wk->cps[wk->ncp - 1];
        uint64_t size = (uint64_t)last->tree_size;
        if (size > wk->nleaves)
            size = wk->nleaves;
        struct st_merkle_levels *t = st_merkle_levels_new(wk->leaves, size);
        int64_t lo = INT64_MAX, hi = -1;
        for (int i = 0; i < npop; i++) {
            if (ev[i].part != w || !ev[i].raw)
                continue;
            /* the leaf index of this offset */
            size_t a = 0, b = wk->nleaves;
            while (a < b) {
                size_t m = (a + b) / 2;
                if (wk->leaf_offset[m] < ev[i].offset)
                    a = m + 1;
                else
                    b = m;
            }
            if (a >= size || wk->leaf_offset[a] != ev[i].offset)
                continue;
            uint8_t path[ST_MERKLE_MAX_DEPTH][ST_MERKLE_HASH];
            char hex[65];
            int len = st_merkle_levels_proof(t, a, path);
            cJSON *p = cJSON_CreateObject();
            cJSON_AddNumberToObject(p, "line", i + 1);
            cJSON_AddStringToObject(p, "event_id", ev[i].event_id);
            cJSON_AddStringToObject(p, "source_name", ev[i].source_name);
            cJSON_AddStringToObject(p, "topic", wk->topic);
            cJSON_AddNumberToObject(p, "partition", wk->partition);
            cJSON_AddNumberToObject(p, "offset", (double)ev[i].offset);
            cJSON_AddNumberToObject(p, "leaf_index", (double)a);
            cJSON_AddNumberToObject(p, "tree_size", (double)size);
            cJSON_AddNumberToObject(p, "checkpoint_seq", (double)last->seq);
            cJSON *pa = cJSON_AddArrayToObject(p, "path");
            for (int k = 0; k < len; k++) {
                st_hex(path[k], ST_MERKLE_HASH, hex);
                cJSON_AddItemToArray(pa, cJSON_CreateString(hex));
            }
            cJSON_AddItemToArray(proofs, p);
            if (ev[i].offset < lo)
                lo = ev[i].offset;
            if (ev[i].offset > hi)
                hi = ev[i].offset;
        }
        st_merkle_levels_destroy(t);
        /* the checkpoints from the first that holds any of the run's events */
        int from = 0;
        for (int k = 0; k < wk->ncp; k++)
            if (wk->cps[k].last_offset >= lo) {
                from = k;
                break;
            }
        for (int k = from; k < wk->ncp; k++) {
            cJSON *cj = cJSON_CreateObject();
            cJSON_AddStringToObject(cj, "body", wk->cps[k].body);
            cJSON_AddStringToObject(cj, "signature", wk->cps[k].sig);
            cJSON_AddItemToArray(cps, cj);
        }
        cJSON *pj = cJSON_CreateObject();
        cJSON_AddStringToObject(pj, "topic", wk->topic);
        cJSON_AddNumberToObject(pj, "partition", wk->partition);
        cJSON_AddNumberToObject(pj, "first_offset", (double)lo);
        cJSON_AddNumberToObject(pj, "last_offset", (double)hi);
        cJSON_AddItemToArray(partsj, pj);
    }
    for (int i = 0; i < npop; i++) {
        const char *raw = ev[i].raw ? ev[i].raw : "";
        st_buf_adds(&buf, raw);
        st_buf_addc(&buf, '\n');
        docs[i] = cJSON_Parse(raw);
    }
    char *pj = cJSON_PrintUnformatted(proofs), *cj = cJSON_Print(cps);
    int werr = write_file(out, "events.ndjson", buf.data, buf.len, errstr, sizeof(errstr)) ||
               write_file(out, "proofs.json", pj, strlen(pj), errstr, sizeof(errstr)) ||
               write_file(out, "checkpoints.json", cj, strlen(cj), errstr, sizeof(errstr));
    free(pj);
    free(cj);
    cJSON_Delete(proofs);
    if (werr)
        goto fail;

    findings = findings_json(pg, task, runs_array.data, &queries, errstr, sizeof(errstr));
    char now[40];
    st_time_format(st_time_now_us(), now, sizeof(now));
    cJSON *fdoc = findings ? cJSON_Parse(findings) : NULL;
    struct report_in rin = {
        .task = task,
        .runs = runs,
        .events = docs,
        .nevents = (size_t)npop,
        .findings = fdoc,
        .forced = (nfaults || uncovered) ? faults.data : NULL,
        .generated = now,
        .classes_file = getenv("SANDTRAIL_EVIDENCE_CLASSES"),
        .key_id = key.id,
        .partitions = partsj,
        .ncheckpoints = cJSON_GetArraySize(cps),
    };
    werr = !findings ||
           write_file(out, "findings.json", findings, strlen(findings), errstr,
                      sizeof(errstr)) ||
           write_file(out, "queries.sql", queries.data, queries.len, errstr, sizeof(errstr)) ||
           st_report_write(&rin, out, errstr, sizeof(errstr));
    cJSON_Delete(fdoc);

    /* the manifest, SHA256SUMS and their detached signatures */
    static const char *const files[] = {"events.ndjson", "findings.json", "proofs.json",
                                        "checkpoints.json", "queries.sql", "report.html",
                                        "report.md", NULL};
    cJSON *man = cJSON_CreateObject();
    cJSON_AddStringToObject(man, "type", "sandtrail.evidence.manifest.v1");
    cJSON *scope = cJSON_AddObjectToObject(man, "scope");
    cJSON_AddStringToObject(scope, "task_id", task);
    cJSON_AddItemToObject(scope, "run_ids", runs);
    runs = NULL; /* the manifest owns them now */
    if (since)
        cJSON_AddStringToObject(scope, "since", since);
    if (until)
        cJSON_AddStringToObject(scope, "until", until);
    cJSON_AddStringToObject(man, "generator", VERSION);
    cJSON_AddStringToObject(man, "generated_at", now);
    cJSON_AddBoolToObject(man, "forced", nfaults || uncovered);
    cJSON *counts = cJSON_AddObjectToObject(man, "counts");
    cJSON_AddNumberToObject(counts, "events", npop);
    cJSON_AddNumberToObject(counts, "checkpoints", cJSON_GetArraySize(cps));
    cJSON_AddItemToObject(man, "partitions", partsj);
    partsj = NULL;
    cJSON_AddStringToObject(man, "key_id", key.id);
    cJSON *fh = cJSON_AddObjectToObject(man, "files");
    for (int i = 0; !werr && files[i]; i++) {
        char hash[65];
        struct st_buf data;
        st_buf_init(&data);
        read_file(out, files[i], &data);
        st_sha256_hex(data.data, data.len, hash);
        st_buf_fini(&data);
        cJSON_AddStringToObject(fh, files[i], hash);
        st_buf_printf(&sums, "%s  %s\n", hash, files[i]);
    }
    char *mj = cJSON_Print(man);
    cJSON_Delete(man);
    st_buf_reset(&buf);
    st_buf_adds(&buf, mj);
    st_buf_addc(&buf, '\n');
    free(mj);
    char mhash[65];
    st_sha256_hex(buf.data, buf.len, mhash);
    st_buf_printf(&sums, "%s  manifest.json\n", mhash);
    werr = werr || write_file(out, "manifest.json", buf.data, buf.len, errstr, sizeof(errstr)) ||
           sign_file(&key, out, "manifest.json", "manifest.json.sig", &buf, errstr,
                     sizeof(errstr)) ||
           write_file(out, "SHA256SUMS", sums.data, sums.len, errstr, sizeof(errstr)) ||
           sign_file(&key, out, "SHA256SUMS", "SHA256SUMS.sig", &sums, errstr, sizeof(errstr));
    if (werr)
        goto fail;
    if (archive) {
        char *const tar[] = {"tar", "-czf", (char *)archive, "-C", tmpdir, ".", NULL};
        if (run_argv(tar) != 0) {
            snprintf(errstr, sizeof(errstr), "could not write the archive \"%s\"", archive);
            goto fail;
        }
    }
    printf("exported %d event(s) of task \"%s\" to %s%s\n", npop, task,
           archive ? archive : out, (nfaults || uncovered) ? " (FORCED: the audit failed)" : "");
    status = 0;
    goto done;
fail:
    st_error("%s", errstr);
done:
    if (archive && strcmp(tmpdir + strlen(tmpdir) - 6, "XXXXXX") != 0) {
        char *const rm[] = {"rm", "-rf", tmpdir, NULL};
        run_argv(rm);
    }
    for (int i = 0; docs && i < npop; i++)
        cJSON_Delete(docs[i]);
    cJSON_Delete(runs);
    cJSON_Delete(cps);
    cJSON_Delete(partsj);
    st_buf_fini(&runs_array);
    free(docs);
    for (int w = 0; w < nwalks; w++)
        walk_fini(&walks[w]);
    free(walks);
    free(ev);
    free(findings);
    PQclear(pop);
    PQfinish(pg);
    st_buf_fini(&queries);
    st_buf_fini(&buf);
    st_buf_fini(&faults);
    st_buf_fini(&sums);
    st_evkey_fini(&key);
    keyring_fini(&kr);
    return status;
}

