/* evidence.c: the sink part that keeps the tamper-evident store (see
 * evidence.h and sql/004_evidence.sql). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "evkey.h"
#include "log.h"
#include "merkle.h"
#include "sinks/evidence.h"
#include "timeutil.h"

/* One consumed offset: an event to be stored (its exact payload copied at
 * stage time, its leaf hash taken by the writer) or a message that will
 * not be stored. */
struct item {
    int32_t partition;
    int64_t offset;
    int64_t ts_ms; /* Kafka timestamp */
    size_t order;  /* staging order: of two items for an offset the later wins */
    int skip;      /* 1: reason says why it holds no event */
    int dup;       /* this write found no row at the offset (set per write) */
    char reason[48];
    size_t at, len;  /* the payload in the batch's payloads */
    size_t run_at;   /* its "task\0run\0" in the batch's runs */
    int hashed;      /* leaf holds its hash (a retried write hashes once) */
    uint8_t leaf[ST_MERKLE_HASH];
};

/* A partition's tree as read from evidence_state in this transaction. */
struct tree {
    int32_t partition;
    int exists;          /* a row was read */
    int touched;         /* to be written back */
    int64_t next_offset; /* -1: nothing yet */
    struct st_merkle_frontier f;
    int64_t seq;
    char last_hash[65];
    int64_t pending_leaves, pending_first, pending_since_ms, pending_last_ms;
    /* leaf hashes appended in this transaction since the load or the last
     * cut; before the first cut they follow evidence_state.pending */
    struct st_buf mem;
    int after_db; /* no cut yet: mem continues the stored pending */
    /* "task\0run\0" of every stored event among the pending leaves, when
     * runs_known (the writer saw each of them: see struct pending_runs);
     * else the next cut counts them in events */
    struct st_buf runs;
    int runs_known;
};

/* What the writer remembers of a partition's pending leaves between
 * transactions: the runs of their stored events, valid while the stored
 * tree is still the one it left (same seq, first pending offset, next
 * offset and pending count: no other writer, no rolled-back batch came
 * between). Then a cut signs the per-run counts from memory instead of
 * counting the rows again. `next` is this transaction's, kept by end()
 * only when it commits. */
struct runs_key {
    int64_t seq, first, next, leaves;
};

struct pending_runs {
    int32_t partition;
    int valid, next_set, next_valid;
    struct runs_key key, next_key;
    struct st_buf runs, next_runs;
};

/* One batch's offsets, and whether it carries a seal. Owned by the batch. */
struct evidence_batch {
    struct item *items;
    size_t n, cap;
    /* the staged payloads, end to end: SHA-256 is the writer's work, off
     * the main thread, which only copies them */
    struct st_buf payloads;
    struct st_buf runs; /* each staged event's "task\0run\0" */
    int seal;          /* a seal is pending for this batch's write */
    int64_t seal_now;  /* its wall clock (0: everything) */
};

/* topic, key, on, every_*: set at creation, read-only after.
 * staged_any, last_live_seal: the filling thread's (staged_any is atomic:
 * a refused message is skipped by the writer).
 * seen, scratch, pend: the writing thread's. */
struct evidence_part {
    char *topic;
    struct st_evkey key;
    int on;
    int64_t every_events, every_ms;
    int staged_any; /* an offset was staged: there may be something to seal */
    int64_t last_live_seal;
    int32_t *seen; /* partitions ever written here, sorted: sealed when caught up */
    size_t nseen, capseen;
    struct st_buf scratch;
    struct pending_runs *pend; /* one per partition of seen, same order */
};

static void *evidence_create(const struct st_analyzer_conf *conf, char *errstr,
                             size_t errsz)
{
    struct evidence_part *p = st_calloc(1, sizeof(*p));
    p->topic = st_strdup(conf->topic_events);
    p->every_events = conf->evidence_checkpoint_events;
    p->every_ms = conf->evidence_checkpoint_s * 1000;
    if (conf->evidence_key_file && *conf->evidence_key_file) {
        char err[512];
        if (st_evkey_load(&p->key, conf->evidence_key_file, 1, err, sizeof(err))) {
            snprintf(errstr, errsz, "evidence.key_file: %s", err);
            free(p->topic);
            free(p);
            return NULL;
        }
        p->on = 1;
    }
    st_buf_init(&p->scratch);
    return p;
}

static void evidence_destroy(void *state)
{
    struct evidence_part *p = state;
    if (!p)
        return;
    st_evkey_fini(&p->key);
    st_buf_fini(&p->scratch);
    for (size_t i = 0; i < p->nseen; i++) {
        st_buf_fini(&p->pend[i].runs);
        st_buf_fini(&p->pend[i].next_runs);
    }
    free(p->pend);
    free(p->seen);
    free(p->topic);
    free(p);
}

static void *evidence_batch_new(void *state)
{
    return st_calloc(1, sizeof(struct evidence_batch));
}

static void evidence_batch_destroy(void *batch)
{
    struct evidence_batch *b = batch;
    if (!b)
        return;
    free(b->items);
    st_buf_fini(&b->payloads);
    st_buf_fini(&b->runs);
    free(b);
}

static void note_partition(struct evidence_part *p, int32_t part)
{
    size_t i = 0;
    while (i < p->nseen && p->seen[i] < part)
        i++;
    if (i < p->nseen && p->seen[i] == part)
        return;
    if (p->nseen == p->capseen) {
        p->capseen = p->capseen ? 2 * p->capseen : 8;
        p->seen = st_realloc(p->seen, p->capseen * sizeof(*p->seen));
        p->pend = st_realloc(p->pend, p->capseen * sizeof(*p->pend));
    }
    memmove(p->seen + i + 1, p->seen + i, (p->nseen - i) * sizeof(*p->seen));
    memmove(p->pend + i + 1, p->pend + i, (p->nseen - i) * sizeof(*p->pend));
    p->seen[i] = part;
    memset(&p->pend[i], 0, sizeof(p->pend[i]));
    p->pend[i].partition = part;
    st_buf_init(&p->pend[i].runs);
    st_buf_init(&p->pend[i].next_runs);
    p->nseen++;
}

static struct item *push(struct evidence_part *e, struct evidence_batch *p,
                         const rd_kafka_message_t *m)
{
    if (p->n == p->cap) {
        p->cap = p->cap ? 2 * p->cap : 1024;
        p->items = st_realloc(p->items, p->cap * sizeof(*p->items));
    }
    struct item *it = &p->items[p->n++];
    memset(it, 0, sizeof(*it));
    it->order = p->n;
    it->partition = m->partition;
    it->offset = m->offset;
    it->ts_ms = rd_kafka_message_timestamp(m, NULL);
    if (!__atomic_load_n(&e->staged_any, __ATOMIC_RELAXED))
        __atomic_store_n(&e->staged_any, 1, __ATOMIC_RELAXED);
    return it;
}

static void evidence_stage(void *state, void *batch, const struct st_sink_event *se)
{
    struct evidence_part *p = state;
    if (!p->on)
        return;
    struct evidence_batch *b = batch;
    struct item *it = push(p, b, se->msg);
    it->at = b->payloads.len;
    it->len = se->msg->len;
    st_buf_add(&b->payloads, se->msg->payload, se->msg->len);
    it->run_at = b->runs.len;
    st_buf_add(&b->runs, se->ev->task_id, strlen(se->ev->task_id) + 1);
    st_buf_add(&b->runs, se->ev->run_id, strlen(se->ev->run_id) + 1);
}

static void evidence_skip(void *state, void *batch, const rd_kafka_message_t *msg,
                          const char *reason)
{
    struct evidence_part *p = state;
    if (!p->on)
        return;
    struct item *it = push(p, batch, msg);
    it->skip = 1;
    snprintf(it->reason, sizeof(it->reason), "%s", reason ? reason : "dead-lettered");
}

static int evidence_seal(void *state, void *batch, int64_t now_ms)
{
    struct evidence_part *p = state;
    struct evidence_batch *b = batch;
    if (!p->on || !__atomic_load_n(&p->staged_any, __ATOMIC_RELAXED))
        return 0;
    /* whether anything is pending is known only inside the transaction: a
     * live analyzer asks at most once per checkpoint_s */
    if (now_ms && now_ms - p->last_live_seal < p->every_ms)
        return 0;
    if (now_ms)
        p->last_live_seal = now_ms;
    b->seal = 1;
    b->seal_now = now_ms;
    return 1;
}

static void evidence_end(void *state, void *batch, int committed)
{
    struct evidence_part *p = state;
    struct evidence_batch *b = batch;
    if (committed) {
        b->n = 0;
        b->seal = 0;
        st_buf_reset(&b->payloads);
        st_buf_reset(&b->runs);
    }
    for (size_t i = 0; p && i < p->nseen; i++) {
        struct pending_runs *r = &p->pend[i];
        if (committed && r->next_set) {
            struct st_buf t = r->runs;
            r->runs = r->next_runs;
            r->next_runs = t;
            r->key = r->next_key;
            r->valid = r->next_valid;
        }
        r->next_set = 0;
    }
}

/* --- the transaction -------------------------------------------------- */

static int exec_params(PGconn *pg, const char *sql, int n, const char *const *v,
                       PGresult **out, const char *what, char *errstr, size_t errsz)
{
    PGresult *res = PQexecParams(pg, sql, n, NULL, v, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(res);
    if (out && st == PGRES_TUPLES_OK) {
        *out = res;
        return ST_SINK_OK;
    }
    /* a query that should have returned rows and did not is an error */
    int rc = st_sink_result(res, what, errstr, errsz);
    return rc == ST_SINK_OK && out ? ST_SINK_RETRY : rc;
}

/* A tree not stored yet: empty. */
static void tree_empty(struct tree *t)
{
    st_merkle_frontier_init(&t->f);
    st_buf_reset(&t->mem);
    st_buf_reset(&t->runs);
    t->runs_known = 1; /* nothing pending yet */
    t->exists = 0;
    t->after_db = 1;
    t->next_offset = -1;
    t->seq = 0;
    memset(t->last_hash, '0', 64);
    t->last_hash[64] = '\0';
    t->pending_leaves = t->pending_first = t->pending_since_ms = t->pending_last_ms = 0;
}

static struct pending_runs *pending_of(struct evidence_part *p, int32_t partition)
{
    for (size_t i = 0; i < p->nseen; i++)
        if (p->seen[i] == partition)
            return &p->pend[i];
    return NULL; /* cannot happen: every tree's partition was noted */
}

static struct runs_key key_of(const struct tree *t)
{
    struct runs_key k = {t->seq, t->pending_first, t->next_offset, t->pending_leaves};
    if (t->pending_leaves == 0)
        k.first = 0; /* meaningless with nothing pending */
    return k;
}

/* After t was read: the runs of its pending leaves, if what the last
 * committed transaction of this writer left is still what is stored. */
static void runs_recall(struct evidence_part *p, struct tree *t)
{
    struct pending_runs *r = pending_of(p, t->partition);
    struct runs_key k = key_of(t);
    st_buf_reset(&t->runs);
    if (t->pending_leaves == 0) {
        t->runs_known = 1;
        return;
    }
    t->runs_known = r && r->valid && memcmp(&r->key, &k, sizeof(k)) == 0;
    if (t->runs_known && r->runs.len)
        st_buf_add(&t->runs, r->runs.data, r->runs.len);
}

/* Before t's transaction commits: what end() keeps if it does. */
static void runs_propose(struct evidence_part *p, const struct tree *t)
{
    struct pending_runs *r = pending_of(p, t->partition);
    if (!r)
        return;
    r->next_key = key_of(t);
    r->next_valid = t->runs_known;
    st_buf_reset(&r->next_runs);
    if (t->runs.len)
        st_buf_add(&r->next_runs, t->runs.data, t->runs.len);
    r->next_set = 1;
}

/* One run's "task\0run\0" record in a list of them. */
struct run_ref {
    const char *task, *run;
};

static int run_ref_cmp(const void *a, const void *b)
{
    const struct run_ref *x = a, *y = b;
    int c = strcmp(x->task, y->task);
    return c ? c : strcmp(x->run, y->run);
}

/* Appends the "runs" member's entries ([task, run, count], ordered by task
 * then run, bytewise) counted from t->runs. */
static void runs_json(const struct tree *t, struct st_buf *body)
{
    size_t n = 0, cap = 64;
    struct run_ref *v = st_malloc(cap * sizeof(*v));
    for (size_t at = 0; at < t->runs.len;) {
        const char *task = t->runs.data + at;
        const char *run = task + strlen(task) + 1;
        at = (size_t)(run + strlen(run) + 1 - t->runs.data);
        if (n == cap) {
            cap *= 2;
            v = st_realloc(v, cap * sizeof(*v));
        }
        v[n++] = (struct run_ref){task, run};
    }
    qsort(v, n, sizeof(*v), run_ref_cmp);
    for (size_t i = 0, out = 0; i < n;) {
        size_t j = i + 1;
        while (j < n && run_ref_cmp(&v[i], &v[j]) == 0)
            j++;
        st_buf_adds(body, out++ ? ",[" : "[");
        st_json_quote(body, v[i].task);
        st_buf_addc(body, ',');
        st_json_quote(body, v[i].run);
        st_buf_addc(body, ',');
        st_buf_addi64(body, (int64_t)(j - i));
        st_buf_addc(body, ']');
        i = j;
    }
    free(v);
}

/* Reads the stored state of the n trees in trees[] (partitions ascending)
 * in one statement, and locks their rows in that order, so that two
 * analyzers cannot deadlock. A partition without a row gets an empty tree. */
static int trees_load(struct evidence_part *p, PGconn *pg, struct tree **trees, size_t n,
                      char *errstr, size_t errsz)
{
    struct st_buf arr;
    st_buf_init(&arr);
    st_buf_addc(&arr, '{');
    for (size_t i = 0; i < n; i++) {
        tree_empty(trees[i]);
        st_buf_printf(&arr, i ? ",%" PRId32 : "%" PRId32, trees[i]->partition);
    }
    st_buf_addc(&arr, '}');
    const char *v[2] = {p->topic, arr.data};
    PGresult *res = NULL;
    int rc = exec_params(pg,
                         "SELECT kafka_partition, next_offset, encode(frontier, 'hex'), seq,"
                         " last_hash, pending_leaves, pending_first, pending_since_ms,"
                         " pending_last_ms FROM evidence_state"
                         " WHERE kafka_topic = $1 AND kafka_partition = ANY ($2::int[])"
                         " ORDER BY kafka_partition FOR UPDATE",
                         2, v, &res, "could not read evidence_state", errstr, errsz);
    st_buf_fini(&arr);
    if (rc)
        return rc;
    size_t j = 0;
    for (int r = 0; r < PQntuples(res); r++) {
        int32_t part = (int32_t)strtol(PQgetvalue(res, r, 0), NULL, 10);
        while (j < n && trees[j]->partition < part)
            j++;
        if (j == n || trees[j]->partition != part)
            continue; /* not asked for: cannot happen */
        struct tree *t = trees[j];
        const char *fhex = PQgetvalue(res, r, 2);
        size_t flen = strlen(fhex) / 2;
        uint8_t *fb = st_malloc(flen + 1);
        int bad = st_from_hex(fhex, fb, flen) || st_merkle_frontier_load(&t->f, fb, flen);
        free(fb);
        if (bad) {
            PQclear(res);
            snprintf(errstr, errsz,
                     "evidence_state of partition %" PRId32 " holds no valid frontier", part);
            return ST_SINK_DATA;
        }
        t->exists = 1;
        t->next_offset = strtoll(PQgetvalue(res, r, 1), NULL, 10);
        t->seq = strtoll(PQgetvalue(res, r, 3), NULL, 10);
        snprintf(t->last_hash, sizeof(t->last_hash), "%s", PQgetvalue(res, r, 4));
        t->pending_leaves = strtoll(PQgetvalue(res, r, 5), NULL, 10);
        t->pending_first = strtoll(PQgetvalue(res, r, 6), NULL, 10);
        t->pending_since_ms = strtoll(PQgetvalue(res, r, 7), NULL, 10);
        t->pending_last_ms = strtoll(PQgetvalue(res, r, 8), NULL, 10);
    }
    PQclear(res);
    for (size_t i = 0; i < n; i++)
        runs_recall(p, trees[i]);
    return ST_SINK_OK;
}

static void frontier_hex(const struct st_merkle_frontier *f, struct st_buf *b)
{
    uint8_t raw[8 + ST_MERKLE_MAX_DEPTH * ST_MERKLE_HASH];
    char hex[2 * sizeof(raw) + 1];
    size_t len = st_merkle_frontier_save(f, raw);
    st_hex(raw, len, hex);
    st_buf_reset(b);
    st_buf_adds(b, "\\x");
    st_buf_adds(b, hex);
}

/* A bytea literal ("\\x" and hex) of raw bytes. */
static void leaves_hex(const struct st_buf *raw, struct st_buf *out)
{
    static const char digits[] = "0123456789abcdef";
    size_t n = raw->len;
    st_buf_reset(out);
    st_buf_add(out, "\\x", 2);
    if (n == 0)
        return;
    /* grown to its length (and NUL-terminated) by two copies of raw, then
     * overwritten in place: two hex digits a byte */
    st_buf_add(out, raw->data, n);
    st_buf_add(out, raw->data, n);
    char *h = out->data + 2;
    for (size_t i = 0; i < n; i++) {
        h[2 * i] = digits[(uint8_t)raw->data[i] >> 4];
        h[2 * i + 1] = digits[(uint8_t)raw->data[i] & 15];
    }
}

static int tree_save(struct evidence_part *p, PGconn *pg, const struct tree *t,
                     char *errstr, size_t errsz)
{
    char part[16], next[24], seq[24], pl[24], pf[24], ps[24], pe[24];
    snprintf(part, sizeof(part), "%" PRId32, t->partition);
    snprintf(next, sizeof(next), "%" PRId64, t->next_offset);
    snprintf(seq, sizeof(seq), "%" PRId64, t->seq);
    snprintf(pl, sizeof(pl), "%" PRId64, t->pending_leaves);
    snprintf(pf, sizeof(pf), "%" PRId64, t->pending_first);
    snprintf(ps, sizeof(ps), "%" PRId64, t->pending_since_ms);
    snprintf(pe, sizeof(pe), "%" PRId64, t->pending_last_ms);
    frontier_hex(&t->f, &p->scratch);
    struct st_buf mem;
    st_buf_init(&mem);
    leaves_hex(&t->mem, &mem);
    const char *v[12] = {p->topic, part, next, p->scratch.data, seq, t->last_hash,
                         pl, pf, ps, pe, mem.data, t->after_db ? "t" : "f"};
    int rc = exec_params(
        pg,
        "INSERT INTO evidence_state (kafka_topic, kafka_partition, next_offset,"
        " frontier, seq, last_hash, pending_leaves, pending_first, pending_since_ms,"
        " pending_last_ms, pending) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10,"
        " $11) ON CONFLICT (kafka_topic, kafka_partition) DO UPDATE SET"
        " next_offset = $3, frontier = $4, seq = $5, last_hash = $6,"
        " pending_leaves = $7, pending_first = $8, pending_since_ms = $9,"
        " pending_last_ms = $10, pending = CASE WHEN $12::boolean"
        " THEN evidence_state.pending || $11::bytea ELSE $11::bytea END",
        12, v, NULL, "could not write evidence_state", errstr, errsz);
    st_buf_fini(&mem);
    return rc;
}

/* Signs the pending leaves of t as the next checkpoint. The per-run counts
 * are those of the rows stored at the pending offsets: counted in memory
 * when this writer saw every pending leaf (t->runs_known), else counted in
 * events (after a restart, a rebalance or a rolled-back transaction). Both
 * order the runs bytewise, so a replay signs the same body. */
static int tree_cut(struct evidence_part *p, PGconn *pg, struct tree *t, char *errstr,
                    size_t errsz)
{
    char part[16], first[24], last[24], seq[24], fidx[24], size[24], ts[40];
    char roothex[65], hash[65], sighex[2 * ST_EVIDENCE_SIG + 1];
    uint8_t root[ST_MERKLE_HASH], sig[ST_EVIDENCE_SIG];
    int64_t last_offset = t->next_offset - 1;

    if (t->pending_leaves == 0)
        return ST_SINK_OK;
    snprintf(part, sizeof(part), "%" PRId32, t->partition);
    snprintf(first, sizeof(first), "%" PRId64, t->pending_first);
    snprintf(last, sizeof(last), "%" PRId64, last_offset);
    const char *qv[4] = {p->topic, part, first, last};
    PGresult *res = NULL;
    int rc = ST_SINK_OK;
    if (!t->runs_known)
        rc = exec_params(pg,
                         "SELECT task_id, run_id, count(*) FROM events"
                         " WHERE kafka_topic = $1 AND kafka_partition = $2"
                         " AND kafka_offset BETWEEN $3 AND $4"
                         " GROUP BY 1, 2"
                         " ORDER BY task_id COLLATE \"C\", run_id COLLATE \"C\"",
                         4, qv, &res, "could not count a checkpoint's runs", errstr, errsz);
    if (rc)
        return rc;
    st_merkle_frontier_root(&t->f, root);
    st_hex(root, sizeof(root), roothex);
    st_time_format(t->pending_last_ms * 1000, ts, sizeof(ts));

    struct st_buf body;
    st_buf_init(&body);
    st_buf_adds(&body, "{\"type\":\"sandtrail.checkpoint.v1\",\"topic\":");
    st_json_quote(&body, p->topic);
    st_buf_printf(&body,
                  ",\"partition\":%" PRId32 ",\"seq\":%" PRId64 ",\"first_offset\":%" PRId64
                  ",\"last_offset\":%" PRId64 ",\"first_index\":%" PRId64
                  ",\"tree_size\":%" PRIu64 ",\"root\":\"%s\",\"prev\":\"%s\","
                  "\"time\":\"%s\",\"key_id\":\"%s\",\"runs\":[",
                  t->partition, t->seq + 1, t->pending_first, last_offset,
                  (int64_t)t->f.size - t->pending_leaves, t->f.size, roothex, t->last_hash, ts,
                  p->key.id);
    for (int i = 0; res && i < PQntuples(res); i++) {
        st_buf_adds(&body, i ? ",[" : "[");
        st_json_quote(&body, PQgetvalue(res, i, 0));
        st_buf_addc(&body, ',');
        st_json_quote(&body, PQgetvalue(res, i, 1));
        st_buf_printf(&body, ",%s]", PQgetvalue(res, i, 2));
    }
    if (!res)
        runs_json(t, &body);
    st_buf_adds(&body, "]}");
    PQclear(res);

    if (st_evkey_sign(&p->key, body.data, body.len, sig)) {
        st_buf_fini(&body);
        snprintf(errstr, errsz, "could not sign an evidence checkpoint");
        return ST_SINK_DATA;
    }
    st_hex(sig, sizeof(sig), sighex);
    st_sha256_hex(body.data, body.len, hash);
    snprintf(seq, sizeof(seq), "%" PRId64, t->seq + 1);
    snprintf(fidx, sizeof(fidx), "%" PRId64, (int64_t)t->f.size - t->pending_leaves);
    snprintf(size, sizeof(size), "%" PRIu64, t->f.size);
    frontier_hex(&t->f, &p->scratch);
    struct st_buf mem;
    st_buf_init(&mem);
    leaves_hex(&t->mem, &mem);
    const char *v[17] = {p->topic, part, seq, first, last, fidx, size, roothex,
                         t->last_hash, hash, ts, p->key.id, body.data, sighex,
                         p->scratch.data, mem.data, t->after_db ? "t" : "f"};
    rc = exec_params(pg,
                     "INSERT INTO evidence_checkpoints (kafka_topic, kafka_partition, seq,"
                     " first_offset, last_offset, first_index, tree_size, root, prev_hash,"
                     " hash, cp_time, key_id, body, signature, frontier, leaves) VALUES"
                     " ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15,"
                     " CASE WHEN $17::boolean THEN coalesce((SELECT pending FROM"
                     " evidence_state WHERE kafka_topic = $1 AND kafka_partition = $2),"
                     " ''::bytea) || $16::bytea ELSE $16::bytea END)",
                     17, v, NULL, "could not write an evidence checkpoint", errstr, errsz);
    st_buf_fini(&mem);
    st_buf_fini(&body);
    if (rc)
        return rc;
    t->seq++;
    memcpy(t->last_hash, hash, sizeof(hash));
    t->pending_leaves = 0;
    st_buf_reset(&t->mem);
    st_buf_reset(&t->runs);
    t->runs_known = 1; /* every later pending leaf passes through this writer */
    t->after_db = 0;
    t->touched = 1;
    return ST_SINK_OK;
}

/* run: the "task\0run\0" of the event stored at the leaf's offset, NULL
 * for a leaf without a row (a skip). */
static int add_leaf(struct evidence_part *p, PGconn *pg, struct tree *t,
                    const uint8_t leaf[ST_MERKLE_HASH], int64_t first, int64_t last,
                    int64_t ts_ms, const char *run, char *errstr, size_t errsz)
{
    int rc;
    /* a leaf that starts a new span of checkpoint_s closes the old one */
    if (t->pending_leaves > 0 && ts_ms - t->pending_since_ms >= p->every_ms &&
        (rc = tree_cut(p, pg, t, errstr, errsz)))
        return rc;
    if (t->pending_leaves == 0) {
        t->pending_first = first;
        t->pending_since_ms = ts_ms;
    }
    st_merkle_frontier_add(&t->f, leaf);
    st_buf_add(&t->mem, leaf, ST_MERKLE_HASH);
    if (run) {
        size_t task_len = strlen(run) + 1;
        st_buf_add(&t->runs, run, task_len + strlen(run + task_len) + 1);
    }
    t->pending_leaves++;
    t->pending_last_ms = ts_ms;
    t->next_offset = last + 1;
    t->touched = 1;
    if (t->pending_leaves >= p->every_events)
        return tree_cut(p, pg, t, errstr, errsz);
    return ST_SINK_OK;
}

static int add_skip(struct evidence_part *p, PGconn *pg, struct tree *t, int64_t first,
                    int64_t last, int64_t ts_ms, const char *reason, char *errstr,
                    size_t errsz)
{
    char part[16], a[24], b[24];
    uint8_t leaf[ST_MERKLE_HASH];
    snprintf(part, sizeof(part), "%" PRId32, t->partition);
    snprintf(a, sizeof(a), "%" PRId64, first);
    snprintf(b, sizeof(b), "%" PRId64, last);
    const char *v[5] = {p->topic, part, a, b, reason};
    int rc = exec_params(pg,
                         "INSERT INTO evidence_skips (kafka_topic, kafka_partition,"
                         " kafka_offset, last_offset, reason) VALUES ($1, $2, $3, $4, $5)",
                         5, v, NULL, "could not record a skipped offset", errstr, errsz);
    if (rc)
        return rc;
    st_buf_reset(&p->scratch);
    st_evidence_skip_leaf(&p->scratch, t->partition, first, last, reason);
    st_merkle_leaf_hash(p->scratch.data, p->scratch.len, leaf);
    return add_leaf(p, pg, t, leaf, first, last, ts_ms, NULL, errstr, errsz);
}

static int item_cmp(const void *a, const void *b)
{
    const struct item *x = a, *y = b;
    if (x->partition != y->partition)
        return x->partition < y->partition ? -1 : 1;
    if (x->offset != y->offset)
        return x->offset < y->offset ? -1 : 1;
    return x->order < y->order ? -1 : 1;
}

/* One partition's part of the batch: its tree and its items from the
 * tree's next offset on (those before were leaves already: a replay, a
 * redone batch). */
struct span {
    struct tree *t;
    struct item *items;
    size_t n;
};

/* Which items of the spans (offsets ascending in each) have a row at their
 * offset: the others were duplicates of events already stored, and the
 * events part did not insert them. One statement for all the partitions;
 * each one's range is read through the events_kafka index (the LATERAL
 * subquery, kept apart by OFFSET 0, is planned as one index scan per
 * partition whatever the statistics say). */
static int mark_duplicates(struct evidence_part *p, PGconn *pg, struct span *sp, size_t n,
                           char *errstr, size_t errsz)
{
    struct st_buf parts, los, his;
    size_t asked = 0;
    st_buf_init(&parts);
    st_buf_init(&los);
    st_buf_init(&his);
    st_buf_addc(&parts, '{');
    st_buf_addc(&los, '{');
    st_buf_addc(&his, '{');
    for (size_t i = 0; i < n; i++) {
        if (sp[i].n == 0)
            continue;
        const char *sep = asked++ ? "," : "";
        st_buf_printf(&parts, "%s%" PRId32, sep, sp[i].t->partition);
        st_buf_printf(&los, "%s%" PRId64, sep, sp[i].items[0].offset);
        st_buf_printf(&his, "%s%" PRId64, sep, sp[i].items[sp[i].n - 1].offset);
    }
    st_buf_addc(&parts, '}');
    st_buf_addc(&los, '}');
    st_buf_addc(&his, '}');
    PGresult *res = NULL;
    int rc = ST_SINK_OK;
    if (asked) {
        const char *v[4] = {p->topic, parts.data, los.data, his.data};
        rc = exec_params(pg,
                         "SELECT r.p, e.kafka_offset FROM unnest($2::int[], $3::bigint[],"
                         " $4::bigint[]) AS r (p, lo, hi) CROSS JOIN LATERAL"
                         " (SELECT kafka_offset FROM events WHERE kafka_topic = $1"
                         " AND kafka_partition = r.p AND kafka_offset BETWEEN r.lo AND r.hi"
                         " OFFSET 0) e ORDER BY 1, 2",
                         4, v, &res, "could not read stored offsets", errstr, errsz);
    }
    st_buf_fini(&parts);
    st_buf_fini(&los);
    st_buf_fini(&his);
    if (rc || !asked)
        return rc;
    int rows = PQntuples(res), r = 0;
    for (size_t s = 0; s < n; s++) {
        int32_t part = sp[s].t->partition;
        while (r < rows && strtol(PQgetvalue(res, r, 0), NULL, 10) < part)
            r++;
        for (size_t i = 0; i < sp[s].n; i++) {
            struct item *it = &sp[s].items[i];
            it->dup = 0;
            if (it->skip)
                continue;
            while (r < rows && strtol(PQgetvalue(res, r, 0), NULL, 10) == part &&
                   strtoll(PQgetvalue(res, r, 1), NULL, 10) < it->offset)
                r++;
            if (r < rows && strtol(PQgetvalue(res, r, 0), NULL, 10) == part &&
                strtoll(PQgetvalue(res, r, 1), NULL, 10) == it->offset)
                continue;
            /* not on the item for good: a redone batch asks again */
            it->dup = 1;
        }
    }
    PQclear(res);
    return ST_SINK_OK;
}

static int write_partition(struct evidence_part *p, PGconn *pg, struct tree *t,
                           struct item *items, size_t n, const struct st_buf *runs,
                           char *errstr, size_t errsz)
{
    int rc;
    for (size_t i = 0; i < n; i++) {
        struct item *it = &items[i];
        if (i + 1 < n && items[i + 1].offset == it->offset)
            continue; /* the later item for this offset wins */
        if (t->next_offset >= 0 && it->offset > t->next_offset &&
            (rc = add_skip(p, pg, t, t->next_offset, it->offset - 1, it->ts_ms,
                           "not delivered", errstr, errsz)))
            return rc;
        rc = it->skip  ? add_skip(p, pg, t, it->offset, it->offset, it->ts_ms, it->reason,
                                  errstr, errsz)
             : it->dup ? add_skip(p, pg, t, it->offset, it->offset, it->ts_ms, "duplicate",
                                  errstr, errsz)
                       : add_leaf(p, pg, t, it->leaf, it->offset, it->offset, it->ts_ms,
                                 runs->data + it->run_at, errstr, errsz);
        if (rc)
            return rc;
    }
    return ST_SINK_OK;
}

static int evidence_write(void *state, void *batch, PGconn *pg,
                          struct st_sink_txn *tx, char *errstr, size_t errsz)
{
    struct evidence_part *p = state;
    struct evidence_batch *b = batch;
    int rc = ST_SINK_OK;
    if (!p->on || (b->n == 0 && !b->seal))
        return ST_SINK_OK;
    for (size_t i = 0; i < b->n; i++) {
        struct item *it = &b->items[i];
        if (!it->skip && !it->hashed) {
            st_merkle_leaf_hash(b->payloads.data + it->at, it->len, it->leaf);
            it->hashed = 1;
        }
    }
    if (b->n) /* a seal alone: no items (qsort wants an array) */
        qsort(b->items, b->n, sizeof(*b->items), item_cmp);
    for (size_t i = 0; i < b->n; i++)
        if (i == 0 || b->items[i].partition != b->items[i - 1].partition)
            note_partition(p, b->items[i].partition);

    /* the trees of every partition this analyzer has seen that the batch
     * touches (all of them when it seals), read and locked in ascending
     * order in one statement; then which of the batch's events are
     * duplicates, in one statement */
    struct tree *trees = st_calloc(p->nseen ? p->nseen : 1, sizeof(*trees));
    struct tree **want = st_calloc(p->nseen ? p->nseen : 1, sizeof(*want));
    struct span *sp = st_calloc(p->nseen ? p->nseen : 1, sizeof(*sp));
    size_t nt = 0, at = 0;
    for (size_t j = 0; j < p->nseen; j++) {
        struct tree *t = &trees[j];
        t->partition = p->seen[j];
        size_t from = at;
        while (at < b->n && b->items[at].partition == t->partition)
            at++;
        if (from == at && !b->seal)
            continue;
        sp[nt].t = t;
        sp[nt].items = b->items + from;
        sp[nt].n = at - from;
        want[nt++] = t;
    }
    if (nt)
        rc = trees_load(p, pg, want, nt, errstr, errsz);
    for (size_t j = 0; j < nt && !rc; j++) {
        /* offsets already leaves (a replay, a redone batch) are passed over */
        struct tree *t = sp[j].t;
        while (sp[j].n > 0 && t->next_offset >= 0 && sp[j].items[0].offset < t->next_offset) {
            sp[j].items++;
            sp[j].n--;
        }
    }
    /* only a batch that went the redo's way (some of its events already
     * stored) can hold duplicates: a first delivery needs no query */
    if (!rc && nt && !tx->events_all_new)
        rc = mark_duplicates(p, pg, sp, nt, errstr, errsz);
    else
        for (size_t i = 0; i < b->n; i++)
            b->items[i].dup = 0; /* a retry's earlier try may have set it */
    for (size_t j = 0; j < nt && !rc; j++) {
        struct tree *t = sp[j].t;
        rc = write_partition(p, pg, t, sp[j].items, sp[j].n, &b->runs, errstr, errsz);
        if (!rc && b->seal && t->pending_leaves > 0 &&
            (b->seal_now == 0 || b->seal_now - t->pending_since_ms >= p->every_ms))
            rc = tree_cut(p, pg, t, errstr, errsz);
        if (!rc && t->touched)
            rc = tree_save(p, pg, t, errstr, errsz);
        if (!rc)
            runs_propose(p, t);
    }
    for (size_t j = 0; j < p->nseen; j++) {
        st_buf_fini(&trees[j].mem);
        st_buf_fini(&trees[j].runs);
    }
    free(sp);
    free(want);
    free(trees);
    return rc;
}

const struct st_sink_part_ops st_sink_evidence = {
    .name = "evidence",
    .create = evidence_create,
    .destroy = evidence_destroy,
    .batch_new = evidence_batch_new,
    .batch_destroy = evidence_batch_destroy,
    .stage = evidence_stage,
    .skip = evidence_skip,
    .write = evidence_write,
    .end = evidence_end,
    .seal = evidence_seal,
};
