/* audit.c: `sandtrail evidence audit [--since T] [--pubkey FILES]`:
 * recomputes each partition's tree from the stored rows and names every row
 * altered, deleted or added after the fact, every gap, and every checkpoint
 * that does not match (see docs/evidence.md and sql/004_evidence.sql). */
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

#include "ahead.h"
#include "audit.h"
#include "buf.h"
#include "event.h"
#include "evidence.h"
#include "evkey.h"
#include "log.h"
#include "merkle.h"
#include "pg.h"
#include "timeutil.h"

static void fault(struct walk *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fault(struct walk *w, const char *fmt, ...)
{
    va_list ap;
    char line[1024];
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    st_buf_printf(w->out, "%s\n", line);
    w->faults++;
}

void walk_fini(struct walk *w)
{
    for (int i = 0; i < w->ncp; i++) {
        free(w->cps[i].body);
        free(w->cps[i].sig);
        cJSON_Delete(w->cps[i].doc);
    }
    free(w->cps);
    free(w->leaves);
    free(w->leaf_offset);
}

static int64_t jint(const cJSON *doc, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(doc, key);
    return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : -1;
}

static void jstr(const cJSON *doc, const char *key, char *out, size_t size)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(doc, key);
    snprintf(out, size, "%s", cJSON_IsString(v) ? v->valuestring : "");
}

/* Parses a signed body into c and checks it against its signature. Returns
 * NULL, or what is wrong. */
static const char *cp_parse(struct cp *c, const char *body, const char *sighex,
                            const struct keyring *kr)
{
    uint8_t sig[ST_EVIDENCE_SIG];
    memset(c, 0, sizeof(*c));
    c->body = st_strdup(body);
    c->sig = st_strdup(sighex);
    st_sha256_hex(body, strlen(body), c->hash);
    c->doc = cJSON_Parse(body);
    if (!c->doc)
        return "its body is not JSON";
    c->seq = jint(c->doc, "seq");
    c->first_offset = jint(c->doc, "first_offset");
    c->last_offset = jint(c->doc, "last_offset");
    c->first_index = jint(c->doc, "first_index");
    c->tree_size = jint(c->doc, "tree_size");
    jstr(c->doc, "root", c->root, sizeof(c->root));
    jstr(c->doc, "prev", c->prev, sizeof(c->prev));
    jstr(c->doc, "key_id", c->key_id, sizeof(c->key_id));
    jstr(c->doc, "time", c->time, sizeof(c->time));
    const struct st_evkey *k = keyring_find(kr, c->key_id);
    if (!k)
        return "it is signed by a key that is not trusted";
    if (st_from_hex(sighex, sig, sizeof(sig)) || !st_evkey_verify(k, body, strlen(body), sig))
        return "its signature does not verify";
    return NULL;
}

static void leaf_add(struct walk *w, struct st_merkle_frontier *f,
                     const uint8_t h[ST_MERKLE_HASH], int64_t offset)
{
    st_merkle_frontier_add(f, h);
    if (!w->collect)
        return;
    if (w->nleaves == w->cap) {
        w->cap = w->cap ? 2 * w->cap : 4096;
        w->leaves = st_realloc(w->leaves, w->cap * ST_MERKLE_HASH);
        w->leaf_offset = st_realloc(w->leaf_offset, w->cap * sizeof(int64_t));
    }
    memcpy(w->leaves[w->nleaves], h, ST_MERKLE_HASH);
    w->leaf_offset[w->nleaves++] = offset;
}

enum {
    R_OFFSET, R_SOURCE, R_ID, R_RAW, R_KIND, R_PLATFORM, R_TS, R_TASK, R_RUN, R_TRACE,
    R_TYPE, R_DECISION, R_REASON, R_TARGET, R_BODY
};

static const char *sql_rows =
    "SELECT kafka_offset, source_name, event_id, raw, source_kind, source_platform,"
    " (extract(epoch FROM ts) * 1000000)::bigint, task_id, run_id, trace_id, type,"
    " decision, reason, target, body::text FROM events"
    " WHERE kafka_topic = $1 AND kafka_partition = $2 AND kafka_offset >= $3"
    " ORDER BY kafka_offset, source_name, event_id";

static int col_differs(const PGresult *r, int i, int col, const char *want)
{
    if (PQgetisnull(r, i, col))
        return want != NULL;
    return !want || strcmp(PQgetvalue(r, i, col), want) != 0;
}

/* Names the first content column of row i that its raw bytes do not
 * explain; NULL when the row agrees with them. */
static const char *row_check(const PGresult *r, int i)
{
    static char why[64];
    struct st_event ev;
    struct st_reject rej;
    if (PQgetisnull(r, i, R_RAW))
        return "raw";
    const char *raw = PQgetvalue(r, i, R_RAW);
    if (st_event_parse(&ev, raw, strlen(raw), &rej))
        return "raw (not a valid event)";
    const char *bad = NULL;
    char ts[24];
    snprintf(ts, sizeof(ts), "%" PRId64, ev.ts_us);
    if (col_differs(r, i, R_SOURCE, ev.source_name))
        bad = "source_name";
    else if (col_differs(r, i, R_ID, ev.event_id))
        bad = "event_id";
    else if (col_differs(r, i, R_KIND, st_source_kind_name(ev.source_kind)))
        bad = "source_kind";
    else if (col_differs(r, i, R_PLATFORM, ev.source_platform))
        bad = "source_platform";
    else if (col_differs(r, i, R_TS, ts))
        bad = "ts";
    else if (col_differs(r, i, R_TASK, ev.task_id))
        bad = "task_id";
    else if (col_differs(r, i, R_RUN, ev.run_id))
        bad = "run_id";
    else if (col_differs(r, i, R_TRACE, ev.trace_id))
        bad = "trace_id";
    else if (col_differs(r, i, R_TYPE, st_event_type_name(ev.type)))
        bad = "type";
    else if (col_differs(r, i, R_DECISION, st_decision_name(ev.decision)))
        bad = "decision";
    else if (col_differs(r, i, R_REASON, ev.reason))
        bad = "reason";
    else if (col_differs(r, i, R_TARGET, st_event_target(&ev)))
        bad = "target";
    else {
        /* jsonb normalised the document: compare meaning, not bytes */
        cJSON *body = cJSON_Parse(PQgetvalue(r, i, R_BODY));
        if (!body || !cJSON_Compare(body, ev.doc, 1))
            bad = "body";
        cJSON_Delete(body);
    }
    st_event_fini(&ev);
    if (!bad)
        return NULL;
    snprintf(why, sizeof(why), "%s", bad);
    return why;
}

static void row_name(const PGresult *r, int i, char *out, size_t size)
{
    snprintf(out, size, "event \"%s\" of source \"%s\"", PQgetvalue(r, i, R_ID),
             PQgetvalue(r, i, R_SOURCE));
}

/* Per (task, run) counts of one checkpoint's stored events. */
struct tally {
    char (*key)[520];
    long *n;
    size_t len, cap;
};

static void tally_add(struct tally *t, const char *task, const char *run)
{
    char key[520];
    snprintf(key, sizeof(key), "%s\x1f%s", task, run);
    for (size_t i = 0; i < t->len; i++)
        if (strcmp(t->key[i], key) == 0) {
            t->n[i]++;
            return;
        }
    if (t->len == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 16;
        t->key = st_realloc(t->key, t->cap * sizeof(*t->key));
        t->n = st_realloc(t->n, t->cap * sizeof(long));
    }
    memcpy(t->key[t->len], key, sizeof(key));
    t->n[t->len++] = 1;
}

static void tally_addn(struct tally *t, const char *task, const char *run, long n)
{
    for (long i = 0; i < n; i++)
        tally_add(t, task, run);
}

/* What retention removed from this partition's checkpoints
 * (evidence_pruned): every offset, sorted, and per checkpoint the runs. */
struct pruned {
    int64_t *off;
    size_t n;
    PGresult *res; /* seq, offsets, runs */
};

static int pruned_has(const struct pruned *p, int64_t o)
{
    size_t lo = 0, hi = p->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (p->off[mid] < o)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < p->n && p->off[lo] == o;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Loads the partition's pruned offsets; a database without the table
 * (before 007) has none. Returns 0, or -1 with errstr. */
static int pruned_load(PGconn *pg, const char *topic, const char *part, struct pruned *p,
                       char *errstr, size_t errsz)
{
    memset(p, 0, sizeof(*p));
    PGresult *r = PQexec(pg, "SELECT to_regclass('evidence_pruned') IS NOT NULL");
    int have = PQresultStatus(r) == PGRES_TUPLES_OK && strcmp(PQgetvalue(r, 0, 0), "t") == 0;
    PQclear(r);
    if (!have)
        return 0;
    const char *v[2] = {topic, part};
    p->res = PQexecParams(pg,
                          "SELECT seq, array_to_string(offsets, ','), runs::text"
                          " FROM evidence_pruned WHERE kafka_topic = $1"
                          " AND kafka_partition = $2 ORDER BY seq",
                          2, NULL, v, NULL, NULL, 0);
    if (PQresultStatus(p->res) != PGRES_TUPLES_OK) {
        snprintf(errstr, errsz, "could not read evidence_pruned: %s",
                 PQresultErrorMessage(p->res));
        return -1;
    }
    size_t cap = 0;
    for (int i = 0; i < PQntuples(p->res); i++) {
        for (char *s = PQgetvalue(p->res, i, 1); *s;) {
            char *end;
            int64_t o = strtoll(s, &end, 10);
            if (end == s)
                break;
            if (p->n == cap) {
                cap = cap ? 2 * cap : 1024;
                p->off = st_realloc(p->off, cap * sizeof(*p->off));
            }
            p->off[p->n++] = o;
            s = *end == ',' ? end + 1 : end;
        }
    }
    if (p->n) /* qsort(NULL, 0) is undefined */
        qsort(p->off, p->n, sizeof(*p->off), cmp_i64);
    return 0;
}

/* Adds to t the events of each run retention removed from checkpoint seq. */
static void pruned_tally(const struct pruned *p, int64_t seq, struct tally *t)
{
    for (int i = 0; p->res && i < PQntuples(p->res); i++) {
        if (strtoll(PQgetvalue(p->res, i, 0), NULL, 10) != seq)
            continue;
        cJSON *runs = cJSON_Parse(PQgetvalue(p->res, i, 2)), *e;
        cJSON_ArrayForEach(e, runs)
        {
            const cJSON *task = cJSON_GetArrayItem(e, 0), *run = cJSON_GetArrayItem(e, 1),
                        *n = cJSON_GetArrayItem(e, 2);
            if (cJSON_IsString(task) && cJSON_IsString(run) && cJSON_IsNumber(n))
                tally_addn(t, task->valuestring, run->valuestring, (long)n->valuedouble);
        }
        cJSON_Delete(runs);
    }
}

static void pruned_fini(struct pruned *p)
{
    free(p->off);
    PQclear(p->res);
}

static long tally_get(const struct tally *t, const char *task, const char *run)
{
    char key[520];
    snprintf(key, sizeof(key), "%s\x1f%s", task, run);
    for (size_t i = 0; i < t->len; i++)
        if (strcmp(t->key[i], key) == 0)
            return t->n[i];
    return 0;
}

/* Compares a checkpoint's signed per-run counts with the stored rows. */
static void check_runs(struct walk *w, const struct cp *c, struct tally *t)
{
    const cJSON *runs = cJSON_GetObjectItemCaseSensitive(c->doc, "runs"), *e;
    long signed_total = 0;
    cJSON_ArrayForEach(e, runs)
    {
        const cJSON *task = cJSON_GetArrayItem(e, 0), *run = cJSON_GetArrayItem(e, 1),
                    *n = cJSON_GetArrayItem(e, 2);
        if (!cJSON_IsString(task) || !cJSON_IsString(run) || !cJSON_IsNumber(n))
            continue;
        long have = tally_get(t, task->valuestring, run->valuestring);
        signed_total += (long)n->valuedouble;
        if (have != (long)n->valuedouble)
            fault(w,
                  "checkpoint %s[%d] #%" PRId64 ": signed %ld event(s) of run \"%s\" "
                  "(task \"%s\"), %ld stored",
                  w->topic, (int)w->partition, c->seq, (long)n->valuedouble,
                  run->valuestring, task->valuestring, have);
    }
    long total = 0;
    for (size_t i = 0; i < t->len; i++)
        total += t->n[i];
    if (total > signed_total)
        fault(w, "checkpoint %s[%d] #%" PRId64 ": %ld stored event(s) of runs it does not sign",
              w->topic, (int)w->partition, c->seq, total - signed_total);
    t->len = 0;
}

/* The leaves recomputed for one checkpoint, in order: hash (all zero and
 * missing = 1 for a gap), offset, and the row it came from (-1: a skip). */
struct mine {
    uint8_t (*leaf)[ST_MERKLE_HASH];
    int64_t *off;
    int *row;
    size_t n, cap;
};

static void mine_add(struct mine *m, const uint8_t *h, int64_t off, int row)
{
    if (m->n == m->cap) {
        m->cap = m->cap ? 2 * m->cap : 1024;
        m->leaf = st_realloc(m->leaf, m->cap * ST_MERKLE_HASH);
        m->off = st_realloc(m->off, m->cap * sizeof(int64_t));
        m->row = st_realloc(m->row, m->cap * sizeof(int));
    }
    if (h)
        memcpy(m->leaf[m->n], h, ST_MERKLE_HASH);
    else
        memset(m->leaf[m->n], 0, ST_MERKLE_HASH);
    m->off[m->n] = off;
    m->row[m->n++] = h ? row : -2;
}

static const char *leaves_of(const PGresult *cr, int ncr, int64_t seq)
{
    for (int i = 0; i < ncr; i++)
        if (strtoll(PQgetvalue(cr, i, 0), NULL, 10) == seq)
            return PQgetvalue(cr, i, 5);
    return NULL;
}

/* A checkpoint's root did not match. When its stored leaf hashes still give
 * the signed root, they are authentic: name each row whose leaf differs.
 * Returns 1 when it could (and did), 0 when only the range can be named. */
static int name_altered(struct walk *w, const PGresult *er, const struct cp *cp,
                        const struct st_merkle_frontier *f0, const struct mine *m,
                        const char *hex)
{
    size_t want = (size_t)(cp->tree_size - cp->first_index);
    if (!hex || strlen(hex) != 2 * want * ST_MERKLE_HASH)
        return 0;
    uint8_t(*stored)[ST_MERKLE_HASH] = st_malloc(want * ST_MERKLE_HASH + 1);
    struct st_merkle_frontier f = *f0;
    uint8_t root[ST_MERKLE_HASH];
    char roothex[65], name[600];
    int named = 0;
    if (st_from_hex(hex, (uint8_t *)stored, want * ST_MERKLE_HASH) == 0) {
        for (size_t i = 0; i < want; i++)
            st_merkle_frontier_add(&f, stored[i]);
        st_merkle_frontier_root(&f, root);
        st_hex(root, sizeof(root), roothex);
        if (strcmp(roothex, cp->root) == 0 && m->n == want) {
            named = 1;
            for (size_t i = 0; i < want; i++) {
                if (m->row[i] == -2 || !memcmp(m->leaf[i], stored[i], ST_MERKLE_HASH))
                    continue; /* a gap is named already */
                if (m->row[i] >= 0) {
                    row_name(er, m->row[i], name, sizeof(name));
                    fault(w, "altered: %s at %s[%d] offset %" PRId64 ": its stored bytes"
                             " (raw) are not those signed in checkpoint #%" PRId64,
                          name, w->topic, (int)w->partition, m->off[i], cp->seq);
                } else {
                    fault(w, "altered: the skip record of %s[%d] offset %" PRId64
                             " is not the one signed in checkpoint #%" PRId64,
                          w->topic, (int)w->partition, m->off[i], cp->seq);
                }
            }
        }
    }
    free(stored);
    return named;
}

/* Walks one partition: checkpoints from the first at or after since (NULL:
 * all), the stored rows and skips they cover, and the rows after them.
 * Returns 0, or -1 when the database could not be read. */
int walk_partition(PGconn *pg, struct walk *w, const struct keyring *kr,
                          const char *since, char *errstr, size_t errsz)
{
    char part[16], from[24];
    snprintf(part, sizeof(part), "%" PRId32, w->partition);
    const char *v[3] = {w->topic, part, since};
    int rc = -1;
    PGresult *cr = PQexecParams(pg,
                                "SELECT seq, body, signature, encode(frontier, 'hex'),"
                                " ($3::timestamptz IS NULL OR cp_time >= $3),"
                                " encode(leaves, 'hex') FROM"
                                " evidence_checkpoints WHERE kafka_topic = $1"
                                " AND kafka_partition = $2 ORDER BY seq",
                                3, NULL, v, NULL, NULL, 0);
    PGresult *sr = NULL, *er = NULL, *st = NULL;
    struct tally tally = {0};
    struct mine mine = {0};
    struct pruned pruned = {0};
    if (PQresultStatus(cr) != PGRES_TUPLES_OK) {
        snprintf(errstr, errsz, "could not read evidence_checkpoints: %s",
                 PQresultErrorMessage(cr));
        goto out;
    }
    st = PQexecParams(pg,
                      "SELECT next_offset FROM evidence_state WHERE kafka_topic = $1"
                      " AND kafka_partition = $2",
                      2, NULL, v, NULL, NULL, 0);
    if (PQresultStatus(st) != PGRES_TUPLES_OK) {
        snprintf(errstr, errsz, "could not read evidence_state: %s", PQresultErrorMessage(st));
        goto out;
    }
    w->next_offset = PQntuples(st) ? strtoll(PQgetvalue(st, 0, 0), NULL, 10) : -1;
    PQclear(st);
    /* a database no analyzer of sql/010 or later has migrated has none */
    st = PQexec(pg, "SELECT to_regclass('events_ahead') IS NOT NULL");
    int has_ahead = PQresultStatus(st) == PGRES_TUPLES_OK && PQntuples(st) == 1 &&
                    !strcmp(PQgetvalue(st, 0, 0), "t");
    PQclear(st);
    st = NULL;
    w->ahead_below = -1;
    if (has_ahead) {
        st = PQexecParams(pg,
                          "SELECT below FROM events_ahead WHERE kafka_topic = $1"
                          " AND kafka_partition = $2",
                          2, NULL, v, NULL, NULL, 0);
        if (PQresultStatus(st) != PGRES_TUPLES_OK) {
            snprintf(errstr, errsz, "could not read events_ahead: %s",
                     PQresultErrorMessage(st));
            goto out;
        }
        if (PQntuples(st))
            w->ahead_below = strtoll(PQgetvalue(st, 0, 0), NULL, 10);
    }
    /* a mark covers only the last ST_AHEAD_MOST_OFFSETS offsets below it,
     * and may lie only that far past the evidence: else it could hide
     * rows added anywhere after it for good */
    int64_t ahead_from = w->ahead_below - ST_AHEAD_MOST_OFFSETS;
    if (w->next_offset >= 0 && ahead_from < w->next_offset)
        ahead_from = w->next_offset;
    if (w->next_offset >= 0 && w->ahead_below > w->next_offset + ST_AHEAD_MOST_OFFSETS) {
        fault(w, "events_ahead of %s[%d] marks offsets up to %" PRId64 ", more than %d past"
                 " the evidence (next offset %" PRId64 "): no batch stores that far ahead",
              w->topic, (int)w->partition, w->ahead_below - 1, ST_AHEAD_MOST_OFFSETS,
              w->next_offset);
        w->ahead_below = -1;
    }
    if (pruned_load(pg, w->topic, part, &pruned, errstr, errsz))
        goto out;

    /* the first checkpoint to check, and the tree before it */
    struct st_merkle_frontier f;
    st_merkle_frontier_init(&f);
    int ncr = PQntuples(cr), start = 0;
    while (start < ncr && strcmp(PQgetvalue(cr, start, 4), "t") != 0)
        start++;
    w->cps = st_calloc((size_t)ncr + 1, sizeof(*w->cps));
    char prev_hash[65];
    memset(prev_hash, '0', 64);
    prev_hash[64] = '\0';
    int64_t prev_seq = 0, prev_last = -1;
    if (start > 0) {
        struct cp before;
        const char *why = cp_parse(&before, PQgetvalue(cr, start - 1, 1),
                                   PQgetvalue(cr, start - 1, 2), kr);
        const char *fhex = PQgetvalue(cr, start - 1, 3);
        size_t flen = strlen(fhex) / 2;
        uint8_t *fb = st_malloc(flen + 1), root[ST_MERKLE_HASH];
        char roothex[65];
        int bad = st_from_hex(fhex, fb, flen) || st_merkle_frontier_load(&f, fb, flen);
        free(fb);
        st_merkle_frontier_root(&f, root);
        st_hex(root, sizeof(root), roothex);
        if (why || bad || strcmp(roothex, before.root) != 0 ||
            (int64_t)f.size != before.tree_size)
            fault(w, "checkpoint %s[%d] #%" PRId64 ": %s", w->topic, (int)w->partition,
                  before.seq, why ? why : "its stored tree state does not match its root");
        memcpy(prev_hash, before.hash, sizeof(prev_hash));
        prev_seq = before.seq;
        prev_last = before.last_offset;
        free(before.body);
        free(before.sig);
        cJSON_Delete(before.doc);
    }
    for (int i = start; i < ncr; i++) {
        struct cp *c = &w->cps[w->ncp++];
        const char *why = cp_parse(c, PQgetvalue(cr, i, 1), PQgetvalue(cr, i, 2), kr);
        if (why)
            fault(w, "checkpoint %s[%d] #%s: %s", w->topic, (int)w->partition,
                  PQgetvalue(cr, i, 0), why);
        else if (c->seq != strtoll(PQgetvalue(cr, i, 0), NULL, 10) || c->seq != prev_seq + 1)
            fault(w, "checkpoint %s[%d] #%s: out of sequence", w->topic, (int)w->partition,
                  PQgetvalue(cr, i, 0));
        else if (strcmp(c->prev, prev_hash) != 0)
            fault(w, "checkpoint %s[%d] #%" PRId64 ": does not chain to the one before",
                  w->topic, (int)w->partition, c->seq);
        else if (prev_last >= 0 && c->first_offset != prev_last + 1)
            fault(w, "checkpoint %s[%d] #%" PRId64 ": offsets do not follow the one before",
                  w->topic, (int)w->partition, c->seq);
        memcpy(prev_hash, c->hash, sizeof(prev_hash));
        prev_seq = c->seq;
        prev_last = c->last_offset;
    }

    int64_t first = w->ncp ? w->cps[0].first_offset : prev_last + 1;
    snprintf(from, sizeof(from), "%" PRId64, first);
    const char *rv[3] = {w->topic, part, from};
    er = PQexecParams(pg, sql_rows, 3, NULL, rv, NULL, NULL, 0);
    sr = PQexecParams(pg,
                      "SELECT kafka_offset, last_offset, reason FROM evidence_skips"
                      " WHERE kafka_topic = $1 AND kafka_partition = $2"
                      " AND kafka_offset >= $3 ORDER BY kafka_offset",
                      3, NULL, rv, NULL, NULL, 0);
    if (PQresultStatus(er) != PGRES_TUPLES_OK || PQresultStatus(sr) != PGRES_TUPLES_OK) {
        snprintf(errstr, errsz, "could not read events: %s",
                 PQresultErrorMessage(PQresultStatus(er) != PGRES_TUPLES_OK ? er : sr));
        goto out;
    }
    int ne = PQntuples(er), ns = PQntuples(sr), ri = 0, si = 0;
    char name[600];
    struct st_buf skip;
    st_buf_init(&skip);
    for (int c = 0; c < w->ncp; c++) {
        struct cp *cp = &w->cps[c];
        long before = w->faults;
        int64_t o = cp->first_offset;
        struct st_merkle_frontier f0 = f;
        mine.n = 0;
        while (o <= cp->last_offset) {
            int k = 0;
            while (ri + k < ne && strtoll(PQgetvalue(er, ri + k, R_OFFSET), NULL, 10) == o)
                k++;
            int has_skip = si < ns && strtoll(PQgetvalue(sr, si, 0), NULL, 10) == o;
            if (has_skip) {
                int64_t last = strtoll(PQgetvalue(sr, si, 1), NULL, 10);
                uint8_t h[ST_MERKLE_HASH];
                st_buf_reset(&skip);
                st_evidence_skip_leaf(&skip, w->partition, o, last,
                                      PQgetvalue(sr, si, 2));
                st_merkle_leaf_hash(skip.data, skip.len, h);
                leaf_add(w, &f, h, o);
                mine_add(&mine, h, o, -1);
                for (int j = 0; j < k; j++) {
                    row_name(er, ri + j, name, sizeof(name));
                    fault(w, "added after the fact: %s at %s[%d] offset %" PRId64
                             ", an offset that held no event",
                          name, w->topic, (int)w->partition, o);
                }
                si++;
                ri += k;
                /* rows inside a multi-offset skip were added later too */
                while (ri < ne && strtoll(PQgetvalue(er, ri, R_OFFSET), NULL, 10) <= last) {
                    row_name(er, ri, name, sizeof(name));
                    fault(w, "added after the fact: %s at %s[%d] offset %s", name, w->topic,
                          (int)w->partition, PQgetvalue(er, ri, R_OFFSET));
                    ri++;
                }
                o = last + 1;
                continue;
            }
            if (k == 0 && pruned_has(&pruned, o)) {
                /* removed by retention: the checkpoint's signed leaf hash
                 * stands in for the row */
                const char *hex = leaves_of(cr, ncr, cp->seq);
                uint8_t h[ST_MERKLE_HASH];
                size_t at = mine.n * 2 * ST_MERKLE_HASH;
                if (hex && strlen(hex) >= at + 2 * ST_MERKLE_HASH) {
                    char one[2 * ST_MERKLE_HASH + 1];
                    memcpy(one, hex + at, 2 * ST_MERKLE_HASH);
                    one[2 * ST_MERKLE_HASH] = '\0';
                    if (st_from_hex(one, h, sizeof(h)) == 0) {
                        leaf_add(w, &f, h, o);
                        mine_add(&mine, h, o, -1);
                        o++;
                        continue;
                    }
                }
                fault(w, "pruned: %s[%d] offset %" PRId64 " was removed by retention but"
                         " checkpoint #%" PRId64 " keeps no leaf hash for it",
                      w->topic, (int)w->partition, o, cp->seq);
                mine_add(&mine, NULL, o, -1);
                o++;
                continue;
            }
            if (k == 0) {
                fault(w, "gap: %s[%d] offset %" PRId64 " holds no stored event (deleted?)",
                      w->topic, (int)w->partition, o);
                mine_add(&mine, NULL, o, -1);
                o++;
                continue;
            }
            const char *why = row_check(er, ri);
            row_name(er, ri, name, sizeof(name));
            if (why)
                fault(w, "altered: %s at %s[%d] offset %" PRId64 ": %s does not match"
                         " the stored bytes",
                      name, w->topic, (int)w->partition, o, why);
            uint8_t h[ST_MERKLE_HASH];
            const char *raw = PQgetisnull(er, ri, R_RAW) ? "" : PQgetvalue(er, ri, R_RAW);
            st_merkle_leaf_hash(raw, strlen(raw), h);
            leaf_add(w, &f, h, o);
            mine_add(&mine, h, o, ri);
            /* a row of a pruned offset back from a replay (events_expired,
             * removed by the next retention) is counted with the pruned */
            if (!pruned_has(&pruned, o))
                tally_add(&tally, PQgetvalue(er, ri, R_TASK), PQgetvalue(er, ri, R_RUN));
            for (int j = 1; j < k; j++) {
                row_name(er, ri + j, name, sizeof(name));
                fault(w, "added after the fact: %s at %s[%d] offset %" PRId64
                         ", an offset already holding an event",
                      name, w->topic, (int)w->partition, o);
            }
            ri += k;
            o++;
        }
        uint8_t root[ST_MERKLE_HASH];
        char roothex[65];
        st_merkle_frontier_root(&f, root);
        st_hex(root, sizeof(root), roothex);
        if ((int64_t)f.size != cp->tree_size || strcmp(roothex, cp->root) != 0) {
            if (!name_altered(w, er, cp, &f0, &mine, leaves_of(cr, ncr, cp->seq)))
                fault(w, "checkpoint %s[%d] #%" PRId64 ": its root does not match the"
                         " stored rows of offsets %" PRId64 "..%" PRId64 "%s",
                      w->topic, (int)w->partition, cp->seq, cp->first_offset,
                      cp->last_offset,
                      w->faults == before ? " (an event's stored bytes were altered)"
                                          : " (see above)");
            /* go on from the signed tree so later checkpoints are judged alone */
            const char *fhex = NULL;
            for (int i = 0; i < ncr; i++)
                if (strtoll(PQgetvalue(cr, i, 0), NULL, 10) == cp->seq)
                    fhex = PQgetvalue(cr, i, 3);
            if (fhex) {
                size_t flen = strlen(fhex) / 2;
                uint8_t *fb = st_malloc(flen + 1);
                if (st_from_hex(fhex, fb, flen) == 0)
                    st_merkle_frontier_load(&f, fb, flen);
                free(fb);
            }
        }
        pruned_tally(&pruned, cp->seq, &tally);
        check_runs(w, cp, &tally);
    }
    st_buf_fini(&skip);
    /* after the last checkpoint: pending rows, rows a split batch stored
     * ahead of its evidence (events_ahead), and rows the analyzer never
     * wrote (at or past its position) */
    int64_t ahead_first = -1, ahead_last = -1;
    for (; ri < ne; ri++) {
        int64_t o = strtoll(PQgetvalue(er, ri, R_OFFSET), NULL, 10);
        row_name(er, ri, name, sizeof(name));
        if (w->next_offset < 0 && PQgetisnull(er, ri, R_RAW))
            continue; /* stored before evidence was kept: not covered */
        if (o >= ahead_from && o < w->ahead_below) {
            if (w->ahead++ == 0)
                ahead_first = o;
            ahead_last = o;
            continue;
        }
        if (w->next_offset < 0 || o >= w->next_offset) {
            fault(w, "added after the fact: %s at %s[%d] offset %" PRId64
                     ", past every offset the analyzer stored evidence for%s",
                  name, w->topic, (int)w->partition, o,
                  has_ahead ? ""
                            : " (or stored by a batch of an analyzer older than sql/010 whose"
                              " evidence is not committed yet: audit again once it has caught"
                              " up)");
            continue;
        }
        const char *why = row_check(er, ri);
        if (why)
            fault(w, "altered: %s at %s[%d] offset %" PRId64 ": %s does not match the"
                     " stored bytes",
                  name, w->topic, (int)w->partition, o, why);
    }
    if (w->ahead)
        st_buf_printf(w->out,
                      "stored ahead of their evidence: %ld row(s) at %s[%d] offsets %" PRId64
                      "..%" PRId64 ", of a batch whose evidence is not committed yet (in"
                      " flight, or interrupted by a crash: the analyzer redoes it); not"
                      " covered yet: audit again once the analyzer has caught up\n",
                      w->ahead, w->topic, (int)w->partition, ahead_first, ahead_last);
    rc = 0;
out:
    pruned_fini(&pruned);
    free(tally.key);
    free(tally.n);
    free(mine.leaf);
    free(mine.off);
    free(mine.row);
    PQclear(cr);
    PQclear(sr);
    PQclear(er);
    PQclear(st);
    return rc;
}

/* Every (topic, partition) that holds evidence or events with raw bytes. */
static PGresult *partitions(PGconn *pg, char *errstr, size_t errsz)
{
    PGresult *r = PQexec(pg, "SELECT kafka_topic, kafka_partition FROM evidence_state"
                             " UNION SELECT DISTINCT kafka_topic, kafka_partition FROM events"
                             " WHERE raw IS NOT NULL ORDER BY 1, 2");
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        snprintf(errstr, errsz, "could not list partitions: %s", PQresultErrorMessage(r));
        PQclear(r);
        return NULL;
    }
    return r;
}

int st_cli_audit(int argc, char **argv, const char *dsn)
{
    static const struct option opts[] = {
        {"since", required_argument, NULL, 's'},
        {"pubkey", required_argument, NULL, 'k'},
        {NULL, 0, NULL, 0},
    };
    const char *since = NULL, *pubkeys = NULL;
    char errstr[1024];
    struct keyring kr = {0};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 's': since = optarg; break;
        case 'k': pubkeys = optarg; break;
        default: return 64;
        }
    }
    if (load_trusted(&kr, pubkeys, errstr, sizeof(errstr))) {
        st_error("%s", errstr);
        return 2;
    }
    PGconn *pg = st_pg_connect(dsn, errstr, sizeof(errstr));
    /* one snapshot for every read: a batch that commits meanwhile is seen
     * whole (its rows with their evidence) or not at all */
    if (pg && st_pg_exec(pg, "BEGIN ISOLATION LEVEL REPEATABLE READ, READ ONLY", errstr,
                         sizeof(errstr))) {
        PQfinish(pg);
        pg = NULL;
    }
    PGresult *parts = pg ? partitions(pg, errstr, sizeof(errstr)) : NULL;
    if (!parts) {
        st_error("%s", errstr);
        PQfinish(pg);
        keyring_fini(&kr);
        return 2;
    }
    long faults = 0, cps = 0, ahead = 0;
    struct st_buf out;
    st_buf_init(&out);
    st_buf_adds(&out, "");
    int status = 0;
    for (int i = 0; i < PQntuples(parts); i++) {
        struct walk w = {.topic = PQgetvalue(parts, i, 0),
                         .partition = (int32_t)atoi(PQgetvalue(parts, i, 1)),
                         .out = &out};
        if (walk_partition(pg, &w, &kr, since, errstr, sizeof(errstr))) {
            st_error("%s", errstr);
            status = 2;
        }
        faults += w.faults;
        ahead += w.ahead;
        cps += w.ncp;
        walk_fini(&w);
    }
    fputs(out.data, stdout);
    if (status == 0)
        printf("%s: %d partition(s), %ld checkpoint(s), %ld fault(s)%s\n",
               faults ? "NOT INTACT" : "intact", PQntuples(parts), cps, faults,
               ahead ? ", rows stored ahead of their evidence (above)" : "");
    st_buf_fini(&out);
    PQclear(parts);
    PQfinish(pg);
    keyring_fini(&kr);
    return status ? status : faults ? 1 : 0;
}

