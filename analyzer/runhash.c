/* runhash.c: a checkpoint's small run states, grouped by bucket (see
 * runhash.h). */
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "detect.h"
#include "log.h"
#include "runhash.h"

struct entry {
    const char *field; /* the detector */
    size_t flen;       /* strlen(field) */
    size_t off, len;   /* the value in h->vals */
    int del;
    size_t next;       /* the run's next entry; 0: none (entries start at 1) */
};

struct group {
    const void *id; /* the caller's name for the run; NULL: its ids name it */
    uint64_t hash;
    const char *task, *run;
    size_t first, last; /* entries */
    size_t slot;        /* its place in h->slot */
    size_t poff, plen;  /* at flush: its fields' common prefix in h->fields */
};

struct st_runhash {
    const struct st_analyzer_conf *conf;
    struct entry *e; /* [0] unused */
    size_t ne, cape;
    struct group *g; /* runs, in the order first put */
    size_t ng, capg;
    size_t *slot;    /* open addressing: group index + 1; 0 empty */
    size_t nslot;    /* a power of two, at least 2 x ng */
    struct st_buf vals, key, fields;
    size_t *order; /* at flush: the runs by bucket */
    size_t caporder;
    char ttl[ST_I64_LEN];
};

struct st_runhash *st_runhash_new(const struct st_analyzer_conf *conf)
{
    struct st_runhash *h = st_calloc(1, sizeof(*h));
    h->conf = conf;
    h->ne = 1;
    st_buf_init(&h->vals);
    st_buf_init(&h->key);
    st_buf_init(&h->fields);
    st_fmt_i64(h->ttl, conf->state_ttl_s);
    return h;
}

void st_runhash_destroy(struct st_runhash *h)
{
    if (!h)
        return;
    free(h->e);
    free(h->g);
    free(h->slot);
    free(h->order);
    st_buf_fini(&h->vals);
    st_buf_fini(&h->key);
    st_buf_fini(&h->fields);
    free(h);
}

size_t st_runhash_pending(const struct st_runhash *h)
{
    return h->ng;
}

static void rehash(struct st_runhash *h)
{
    size_t n = h->nslot ? 2 * h->nslot : 1024;
    free(h->slot);
    h->slot = st_calloc(n, sizeof(*h->slot));
    h->nslot = n;
    for (size_t i = 0; i < h->ng; i++) {
        size_t s = h->g[i].hash & (n - 1);
        while (h->slot[s])
            s = (s + 1) & (n - 1);
        h->slot[s] = i + 1;
        h->g[i].slot = s;
    }
}

static struct group *group_of(struct st_runhash *h, const void *id, uint64_t hash,
                              const char *task, const char *run)
{
    if (2 * (h->ng + 1) > h->nslot)
        rehash(h);
    size_t s = hash & (h->nslot - 1);
    for (; h->slot[s]; s = (s + 1) & (h->nslot - 1)) {
        struct group *g = &h->g[h->slot[s] - 1];
        if (g->hash != hash || g->id != id)
            continue;
        /* the same id is the same run: no comparison of ids that are cold
         * by now (they were 6% of the detect role's CPU) */
        if (id || (!strcmp(g->run, run) && !strcmp(g->task, task)))
            return g;
    }
    if (h->ng == h->capg) {
        h->capg = h->capg ? 2 * h->capg : 256;
        h->g = st_realloc(h->g, h->capg * sizeof(*h->g));
    }
    h->slot[s] = h->ng + 1;
    struct group *g = &h->g[h->ng++];
    *g = (struct group){id, hash, task, run, 0, 0, s, 0, 0};
    return g;
}

void st_runhash_put(struct st_runhash *h, const void *id, uint64_t hash, const char *task,
                    const char *run, const char *field, const char *data, size_t len)
{
    struct group *g = group_of(h, id, hash, task, run);
    if (h->ne >= h->cape) {
        h->cape = h->cape ? 2 * h->cape : 256;
        h->e = st_realloc(h->e, h->cape * sizeof(*h->e));
    }
    size_t i = h->ne++;
    h->e[i] = (struct entry){field, strlen(field), h->vals.len, data ? len : 0, data == NULL, 0};
    if (data)
        st_buf_add(&h->vals, data, len);
    if (g->last)
        h->e[g->last].next = i;
    else
        g->first = i;
    g->last = i;
}

/* The commands of one bucket's runs, order[0 .. n): HSET of every field
 * set, HDEL of every field emptied, then the key's EXPIRE when anything
 * was set (a key the HSET creates gets its TTL in the same checkpoint;
 * an HDEL alone leaves the TTL the last HSET gave). Each argument is
 * formatted straight into ck; a field is its run's prefix, built once per
 * run, and its detector's name. */
static void flush_bucket(struct st_runhash *h, struct st_checkpoint *ck, const size_t *order,
                         size_t n)
{
    const char *key = st_detect_run_bucket_key_buf(&h->key, h->conf, h->g[order[0]].hash);
    size_t klen = h->key.len;
    st_buf_reset(&h->fields);
    size_t nset = 0, ndel = 0;
    for (size_t k = 0; k < n; k++) {
        struct group *g = &h->g[order[k]];
        g->poff = h->fields.len;
        st_detect_run_field_prefix_add(&h->fields, g->task, g->run);
        g->plen = h->fields.len - g->poff;
        for (size_t i = g->first; i; i = h->e[i].next) {
            if (h->e[i].del)
                ndel++;
            else
                nset++;
        }
    }
    for (int pass = 0; pass < 2; pass++) {
        size_t count = pass ? ndel : nset;
        if (!count)
            continue;
        st_checkpoint_begin(ck, 2 + (pass ? count : 2 * count));
        st_checkpoint_arg(ck, pass ? "HDEL" : "HSET", 4, NULL, 0);
        st_checkpoint_arg(ck, key, klen, NULL, 0);
        for (size_t k = 0; k < n; k++) {
            const struct group *g = &h->g[order[k]];
            for (size_t i = g->first; i; i = h->e[i].next) {
                const struct entry *e = &h->e[i];
                if (e->del != pass)
                    continue;
                st_checkpoint_arg(ck, h->fields.data + g->poff, g->plen, e->field, e->flen);
                if (!pass)
                    st_checkpoint_arg(ck, h->vals.data + e->off, e->len, NULL, 0);
            }
        }
        st_checkpoint_end(ck);
    }
    if (nset) {
        const char *ex[] = {"EXPIRE", key, h->ttl};
        size_t exl[] = {6, klen, strlen(h->ttl)};
        st_checkpoint_cmd_lens(ck, 3, ex, exl);
    }
}

void st_runhash_flush(struct st_runhash *h, struct st_checkpoint *ck)
{
    /* the runs by bucket, each bucket's in the order first put (a counting
     * sort) */
    size_t start[ST_DETECT_RUN_BUCKETS + 1] = {0};
    for (size_t gi = 0; gi < h->ng; gi++)
        start[st_detect_run_bucket(h->g[gi].hash) + 1]++;
    for (size_t b = 0; b < ST_DETECT_RUN_BUCKETS; b++)
        start[b + 1] += start[b];
    if (h->ng > h->caporder) {
        h->caporder = h->ng;
        h->order = st_realloc(h->order, h->caporder * sizeof(*h->order));
    }
    size_t at[ST_DETECT_RUN_BUCKETS];
    memcpy(at, start, sizeof(at));
    for (size_t gi = 0; gi < h->ng; gi++)
        h->order[at[st_detect_run_bucket(h->g[gi].hash)]++] = gi;
    for (size_t b = 0; b < ST_DETECT_RUN_BUCKETS; b++)
        if (start[b + 1] > start[b])
            flush_bucket(h, ck, h->order + start[b], start[b + 1] - start[b]);
    /* only the slots used: after one large flush (a forced one, of every
     * run) the table stays large, and clearing all of it per batch cost
     * more than the batch's own runs */
    for (size_t gi = 0; gi < h->ng; gi++)
        h->slot[h->g[gi].slot] = 0;
    h->ng = 0;
    h->ne = 1;
    st_buf_reset(&h->vals);
}
