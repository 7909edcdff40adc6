/* evidence.c: `sandtrail evidence audit` and `export` (see evidence.h and
 * sql/004_evidence.sql for what the tree's leaves are). */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "buf.h"
#include "event.h"
#include "evidence.h"
#include "evkey.h"
#include "log.h"
#include "merkle.h"
#include "pg.h"
#include "timeutil.h"

#define VERSION "sandtrail 0.1"

/* --- keys ------------------------------------------------------------- */

int keyring_load(struct keyring *kr, const char *paths, char *errstr, size_t errsz)
{
    char *copy = st_strdup(paths), *save = NULL;
    for (char *p = strtok_r(copy, ":", &save); p; p = strtok_r(NULL, ":", &save)) {
        if (kr->n == (int)(sizeof(kr->keys) / sizeof(kr->keys[0]))) {
            snprintf(errstr, errsz, "too many public keys");
            free(copy);
            return -1;
        }
        if (st_evkey_load(&kr->keys[kr->n], p, 0, errstr, errsz)) {
            free(copy);
            return -1;
        }
        kr->n++;
    }
    free(copy);
    return 0;
}

const struct st_evkey *keyring_find(const struct keyring *kr, const char *id)
{
    for (int i = 0; i < kr->n; i++)
        if (id && strcmp(kr->keys[i].id, id) == 0)
            return &kr->keys[i];
    return NULL;
}

void keyring_fini(struct keyring *kr)
{
    for (int i = 0; i < kr->n; i++)
        st_evkey_fini(&kr->keys[i]);
    kr->n = 0;
}

int read_file(const char *dir, const char *name, struct st_buf *b)
{
    char path[4096], chunk[65536];
    size_t n;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    st_buf_reset(b);
    st_buf_adds(b, "");
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        st_buf_add(b, chunk, n);
    fclose(f);
    return 0;
}

int write_file(const char *dir, const char *name, const void *data, size_t len,
               char *errstr, size_t errsz)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, len, f) != len || fclose(f)) {
        snprintf(errstr, errsz, "could not write \"%s\": %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* --- walking a partition's tree ---------------------------------------- */

/* One signed checkpoint, its fields read from the signed body. */
struct cp {
    int64_t seq, first_offset, last_offset, first_index, tree_size;
    char root[65], prev[65], hash[65], key_id[ST_EVIDENCE_KEY_ID + 1], time[40];
    char *body, *sig;
    cJSON *doc;
};

struct walk {
    const char *topic;
    int32_t partition;
    struct cp *cps;
    int ncp;
    int collect;                  /* keep every leaf (export) */
    uint8_t (*leaves)[ST_MERKLE_HASH];
    int64_t *leaf_offset;
    size_t nleaves, cap;
    int64_t next_offset;          /* evidence_state (-1: none) */
    long faults;
    struct st_buf *out;           /* fault lines */
};

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

static void cps_free(struct walk *w)
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
static int walk_partition(PGconn *pg, struct walk *w, const struct keyring *kr,
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
        check_runs(w, cp, &tally);
    }
    st_buf_fini(&skip);
    /* after the last checkpoint: pending rows, and rows the analyzer never
     * wrote (at or past its position) */
    for (; ri < ne; ri++) {
        int64_t o = strtoll(PQgetvalue(er, ri, R_OFFSET), NULL, 10);
        row_name(er, ri, name, sizeof(name));
        if (w->next_offset < 0 && PQgetisnull(er, ri, R_RAW))
            continue; /* stored before evidence was kept: not covered */
        if (w->next_offset < 0 || o >= w->next_offset) {
            fault(w, "added after the fact: %s at %s[%d] offset %" PRId64
                     ", past every offset the analyzer stored",
                  name, w->topic, (int)w->partition, o);
            continue;
        }
        const char *why = row_check(er, ri);
        if (why)
            fault(w, "altered: %s at %s[%d] offset %" PRId64 ": %s does not match the"
                     " stored bytes",
                  name, w->topic, (int)w->partition, o, why);
    }
    rc = 0;
out:
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

static int load_trusted(struct keyring *kr, const char *pubkeys, char *errstr,
                        size_t errsz)
{
    const char *env = getenv("SANDTRAIL_EVIDENCE_PUBLIC_KEY_FILE");
    const char *list = pubkeys ? pubkeys : env;
    if (!list || !*list) {
        snprintf(errstr, errsz, "no public key: give --pubkey FILE or set "
                                "SANDTRAIL_EVIDENCE_PUBLIC_KEY_FILE");
        return -1;
    }
    return keyring_load(kr, list, errstr, errsz);
}

static int cmd_audit(int argc, char **argv, const char *dsn)
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
    PGresult *parts = pg ? partitions(pg, errstr, sizeof(errstr)) : NULL;
    if (!parts) {
        st_error("%s", errstr);
        PQfinish(pg);
        keyring_fini(&kr);
        return 2;
    }
    long faults = 0, cps = 0;
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
        cps += w.ncp;
        cps_free(&w);
    }
    fputs(out.data, stdout);
    if (status == 0)
        printf("%s: %d partition(s), %ld checkpoint(s), %ld fault(s)\n",
               faults ? "NOT INTACT" : "intact", PQntuples(parts), cps, faults);
    st_buf_fini(&out);
    PQclear(parts);
    PQfinish(pg);
    keyring_fini(&kr);
    return status ? status : faults ? 1 : 0;
}

/* --- export ----------------------------------------------------------- */

int run_argv(char *const argv[])
{
    pid_t pid = fork();
    if (pid == 0) {
        execvp(argv[0], argv);
        _exit(127);
    }
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) < 0)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

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
static const char *const finding_tables[] = {
    "finding_triage", "finding_history", "triage_history", "finding_status_history",
    "notifications", "alert_deliveries", "deliveries", "alert_outbox", NULL,
};

static int exec_ok(PGresult *r, const char *what, char *errstr, size_t errsz)
{
    if (PQresultStatus(r) == PGRES_TUPLES_OK)
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

/* The findings document: the run's findings, their events, and whatever
 * history or deliveries other tables hold for them. */
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
    for (int i = 0; finding_tables[i]; i++) {
        const char *tv[1] = {finding_tables[i]};
        r = PQexecParams(pg,
                         "SELECT 1 FROM information_schema.columns WHERE table_schema ="
                         " current_schema() AND table_name = $1 AND column_name ="
                         " 'finding_id'",
                         1, NULL, tv, NULL, NULL, 0);
        int present = PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0;
        PQclear(r);
        if (!present)
            continue;
        char sql[512];
        /* the table name comes from the fixed list above, never from input */
        snprintf(sql, sizeof(sql),
                 "SELECT coalesce(json_agg(t), '[]')::text FROM %s t WHERE t.finding_id IN"
                 " (SELECT finding_id FROM findings WHERE task_id = $1"
                 " AND run_id = ANY($2::text[]))",
                 finding_tables[i]);
        r = PQexecParams(pg, sql, 2, NULL, v, NULL, NULL, 0);
        if (PQresultStatus(r) == PGRES_TUPLES_OK) {
            cJSON *t = cJSON_Parse(PQgetvalue(r, 0, 0));
            queries_add(queries, finding_tables[i], sql, v, 2, cJSON_GetArraySize(t));
            cJSON_AddItemToObject(doc, finding_tables[i], t);
        }
        PQclear(r);
    }
    char *s = cJSON_Print(doc);
    cJSON_Delete(doc);
    return s;
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

static int cmd_export(int argc, char **argv, const char *dsn)
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
        cps_free(&walks[w]);
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

int st_cli_evidence(int argc, char **argv, const char *pg_dsn)
{
    if (argc >= 2 && !strcmp(argv[1], "audit"))
        return cmd_audit(argc - 1, argv + 1, pg_dsn);
    if (argc >= 2 && !strcmp(argv[1], "export"))
        return cmd_export(argc - 1, argv + 1, pg_dsn);
    if (argc >= 2 && !strcmp(argv[1], "verify"))
        return st_cli_verify(argc - 1, argv + 1);
    fprintf(stderr, "usage: sandtrail evidence audit [--since T] [--pubkey FILE[:FILE]]\n"
                    "       sandtrail evidence export --task T (--run R | --since T1"
                    " [--until T2])\n"
                    "                 (--out DIR | --archive FILE.tar.gz) [--force]\n"
                    "       sandtrail evidence verify DIR|FILE.tar.gz [--pubkey FILE]\n");
    return 64;
}
