/* runblob.c: the byte string of a run's state (see runblob.h). */
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "log.h"
#include "runblob.h"

static void put_u(struct st_buf *b, uint64_t v)
{
    unsigned char out[10];
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (unsigned char)v;
    st_buf_add(b, out, n);
}

/* zigzag: small magnitudes of either sign take few bytes */
static void put_s(struct st_buf *b, int64_t v)
{
    put_u(b, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63));
}

void st_runblob_start(struct st_buf *b, int64_t *prev_ts)
{
    st_buf_reset(b);
    st_buf_addc(b, (char)ST_RUNBLOB_VERSION);
    *prev_ts = 0;
}

void st_runblob_count(struct st_buf *b, uint64_t n)
{
    put_u(b, n);
}

/* v as put_u writes it, into out (room for 10 bytes); returns the bytes */
static size_t enc_u(unsigned char *out, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        out[n++] = (unsigned char)(v | 0x80);
        v >>= 7;
    }
    out[n++] = (unsigned char)v;
    return n;
}

void st_runblob_member(struct st_buf *b, int64_t *prev_ts, int64_t ts, const char *key,
                       size_t len)
{
    /* the bytes of put_s, put_u and st_buf_add, written in place with one
     * reservation: a small run's checkpoint writes every member of the
     * run (a dense stream's runs: about six members per event) */
    st_buf_reserve(b, 20 + len);
    unsigned char *o = (unsigned char *)b->data + b->len;
    /* wraps like the reader's addition, so any pair of times round-trips */
    int64_t d = (int64_t)((uint64_t)ts - (uint64_t)*prev_ts);
    size_t n = enc_u(o, ((uint64_t)d << 1) ^ (uint64_t)(d >> 63));
    n += enc_u(o + n, len);
    memcpy(o + n, key, len);
    b->len += n + len;
    b->data[b->len] = '\0';
    *prev_ts = ts;
}

void st_runblob_episode(struct st_buf *b, const char id[32], int64_t first_us,
                        int64_t last_us)
{
    st_buf_add(b, id, 32);
    put_s(b, first_us);
    put_s(b, (int64_t)((uint64_t)last_us - (uint64_t)first_us));
}

void st_runblob_bucket(struct st_buf *b, int64_t key, int64_t sum)
{
    put_s(b, key);
    put_s(b, sum);
}

static int get_u(struct st_runblob_reader *r, uint64_t *v)
{
    uint64_t x = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        if (r->p >= r->end)
            return -1;
        unsigned char c = *r->p++;
        if (shift == 63 && c > 1)
            return -1; /* more than 64 bits */
        x |= (uint64_t)(c & 0x7f) << shift;
        if (!(c & 0x80)) {
            *v = x;
            return 0;
        }
    }
    return -1;
}

static int get_s(struct st_runblob_reader *r, int64_t *v)
{
    uint64_t u;
    if (get_u(r, &u))
        return -1;
    *v = (int64_t)((u >> 1) ^ (0 - (u & 1)));
    return 0;
}

int st_runblob_open(struct st_runblob_reader *r, const char *data, size_t len)
{
    r->p = (const unsigned char *)data;
    r->end = r->p + len;
    r->prev_ts = 0;
    if (len < 1 || (r->p[0] != ST_RUNBLOB_VERSION && r->p[0] != ST_RUNBLOB_VERSION_TRIM))
        return -1;
    r->version = r->p[0];
    r->p++;
    return 0;
}

void st_runblob_pending_trim(struct st_buf *b, int64_t trim_ts, int64_t o_max)
{
    b->data[0] = (char)ST_RUNBLOB_VERSION_TRIM;
    put_s(b, trim_ts);
    put_s(b, o_max);
}

int st_runblob_get_pending_trim(struct st_runblob_reader *r, int64_t *trim_ts,
                                int64_t *o_max)
{
    if (r->version != ST_RUNBLOB_VERSION_TRIM) {
        *trim_ts = INT64_MIN;
        *o_max = -1;
        return 0;
    }
    if (get_s(r, trim_ts) || get_s(r, o_max))
        return -1;
    r->version = ST_RUNBLOB_VERSION; /* read: nothing is left for close */
    return 0;
}

int st_runblob_get_count(struct st_runblob_reader *r, uint64_t *n)
{
    if (get_u(r, n) || *n > (uint64_t)(r->end - r->p))
        return -1;
    return 0;
}

int st_runblob_get_member(struct st_runblob_reader *r, int64_t *ts, const char **key,
                          size_t *len)
{
    int64_t d;
    uint64_t l;
    if (get_s(r, &d) || get_u(r, &l) || l > (uint64_t)(r->end - r->p))
        return -1;
    r->prev_ts = (int64_t)((uint64_t)r->prev_ts + (uint64_t)d);
    *ts = r->prev_ts;
    *key = (const char *)r->p;
    *len = (size_t)l;
    r->p += l;
    return 0;
}

int st_runblob_get_episode(struct st_runblob_reader *r, const char **id, int64_t *first_us,
                           int64_t *last_us)
{
    int64_t d;
    if (r->end - r->p < 32)
        return -1;
    *id = (const char *)r->p;
    r->p += 32;
    if (get_s(r, first_us) || get_s(r, &d))
        return -1;
    *last_us = (int64_t)((uint64_t)*first_us + (uint64_t)d);
    return 0;
}

int st_runblob_get_bucket(struct st_runblob_reader *r, int64_t *key, int64_t *sum)
{
    return get_s(r, key) || get_s(r, sum) ? -1 : 0;
}

int st_runblob_close(const struct st_runblob_reader *r)
{
    if (r->version == ST_RUNBLOB_VERSION_TRIM) { /* its trailer not read: read it here */
        struct st_runblob_reader t = *r;
        int64_t ts, o;
        return st_runblob_get_pending_trim(&t, &ts, &o) || t.p != t.end ? -1 : 0;
    }
    return r->p == r->end ? 0 : -1;
}

void st_runblob_log_members(struct st_buf *b, uint64_t n, int64_t *prev_ts)
{
    st_buf_addc(b, (char)ST_RUNBLOB_LOG_MEMBERS);
    put_u(b, n);
    *prev_ts = 0;
}

void st_runblob_log_trim(struct st_buf *b, int64_t below_us)
{
    st_buf_addc(b, (char)ST_RUNBLOB_LOG_TRIM);
    put_s(b, below_us);
}

/* One pass over the log's frames. Check pass (fn NULL): validates, and
 * appends each trim's time to *trims (*ntrims of them). Member pass:
 * calls fn for the members no later trim removes (sufmax[k]: the largest
 * time of trims k.. ; k the trims passed so far). */
static int log_pass(const char *data, size_t len, int64_t **trims, size_t *ntrims,
                    const int64_t *sufmax, st_runblob_member_fn fn, void *arg)
{
    struct st_runblob_reader r = {(const unsigned char *)data,
                                  (const unsigned char *)data + len, 0, 0};
    size_t k = 0, cap = 0;
    while (r.p < r.end) {
        unsigned char kind = *r.p++;
        if (kind == ST_RUNBLOB_LOG_TRIM) {
            int64_t t;
            if (get_s(&r, &t))
                return -1;
            if (!fn) {
                if (*ntrims == cap) {
                    cap = cap ? 2 * cap : 16;
                    *trims = st_realloc(*trims, cap * sizeof(**trims));
                }
                (*trims)[(*ntrims)++] = t;
            }
            k++;
        } else if (kind == ST_RUNBLOB_LOG_MEMBERS) {
            uint64_t n;
            if (st_runblob_get_count(&r, &n))
                return -1;
            r.prev_ts = 0;
            for (uint64_t i = 0; i < n; i++) {
                int64_t ts;
                const char *key;
                size_t klen;
                if (st_runblob_get_member(&r, &ts, &key, &klen) || memchr(key, '\0', klen))
                    return -1;
                if (fn && (!sufmax || k >= *ntrims || ts >= sufmax[k]))
                    fn(arg, ts, key, klen);
            }
        } else {
            return -1;
        }
    }
    return 0;
}

int st_runblob_log_read(const char *data, size_t len, st_runblob_member_fn fn, void *arg)
{
    int64_t *trims = NULL;
    size_t ntrims = 0;
    int rc = log_pass(data, len, &trims, &ntrims, NULL, NULL, NULL);
    if (!rc && fn) {
        /* in place: trims[k] becomes the largest of trims k.. */
        for (size_t k = ntrims; k-- > 1;)
            if (trims[k] > trims[k - 1])
                trims[k - 1] = trims[k];
        rc = log_pass(data, len, &trims, &ntrims, trims, fn, arg);
    }
    free(trims);
    return rc;
}

struct log_item {
    int64_t ts;
    const char *key;
    size_t len;
};

struct log_items {
    struct log_item *v;
    size_t n, cap;
};

static void log_collect(void *arg, int64_t ts, const char *key, size_t len)
{
    struct log_items *it = arg;
    if (it->n == it->cap) {
        it->cap = it->cap ? 2 * it->cap : 64;
        it->v = st_realloc(it->v, it->cap * sizeof(*it->v));
    }
    it->v[it->n++] = (struct log_item){ts, key, len};
}

static int log_item_cmp(const void *a, const void *b)
{
    const struct log_item *x = a, *y = b;
    if (x->ts != y->ts)
        return x->ts < y->ts ? -1 : 1;
    size_t l = x->len < y->len ? x->len : y->len;
    int c = memcmp(x->key, y->key, l);
    return c ? c : x->len < y->len ? -1 : x->len > y->len;
}

long st_runblob_log_count(const char *data, size_t len)
{
    struct log_items it = {NULL, 0, 0};
    if (st_runblob_log_read(data, len, log_collect, &it)) {
        free(it.v);
        return -1;
    }
    if (it.n)
        qsort(it.v, it.n, sizeof(*it.v), log_item_cmp);
    long n = 0;
    for (size_t i = 0; i < it.n; i++)
        n += i == 0 || log_item_cmp(&it.v[i - 1], &it.v[i]) != 0;
    free(it.v);
    return n;
}
