/* credset.c: issued credentials' fingerprints and their search in text (see
 * credset.h).
 *
 * The set is an open-addressing table of the hex fingerprints (linear
 * probing, at most half full), hashed on their leading hex digits: an HMAC
 * is uniform already. Beside it, the distinct lengths of the credentials,
 * sorted, which is what makes the search cheap: for each start of a
 * candidate only those lengths are tried. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "credset.h"
#include "log.h"

struct slot {
    uint64_t h; /* 0: empty */
    char fp[ST_CREDSET_FP_MAX + 1];
};

struct st_credset {
    pthread_rwlock_t lock;
    struct slot *slots;
    size_t cap; /* a power of two */
    size_t n;   /* read without the lock by st_credset_count */
    /* distinct credential lengths, ascending */
    unsigned short lens[ST_CREDSET_MAX_LEN + 1];
    size_t nlens;
};

struct st_credset *st_credset_new(void)
{
    struct st_credset *cs = st_calloc(1, sizeof(*cs));
    if (pthread_rwlock_init(&cs->lock, NULL))
        st_fatal("could not create a lock");
    cs->cap = 64;
    cs->slots = st_calloc(cs->cap, sizeof(*cs->slots));
    return cs;
}

void st_credset_destroy(struct st_credset *cs)
{
    if (!cs)
        return;
    pthread_rwlock_destroy(&cs->lock);
    free(cs->slots);
    free(cs);
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* The hash of a valid fingerprint (never 0), or 0 when fp is not 1..64
 * lowercase hex chars. */
static uint64_t fp_hash(const char *fp)
{
    uint64_t h = 0;
    size_t i = 0;
    for (; fp[i]; i++) {
        int v = hexval(fp[i]);
        if (v < 0 || i >= ST_CREDSET_FP_MAX)
            return 0;
        if (i < 16)
            h = h << 4 | (uint64_t)v;
    }
    /* the length is part of the key: "0a" and "a" differ */
    h ^= (uint64_t)i * 0x9E3779B97F4A7C15u;
    return i && h ? h : (i ? 1 : 0);
}

static struct slot *lookup(struct slot *slots, size_t cap, uint64_t h, const char *fp)
{
    size_t i = (size_t)(h ^ h >> 29) & (cap - 1);
    while (slots[i].h && !(slots[i].h == h && !strcmp(slots[i].fp, fp)))
        i = (i + 1) & (cap - 1);
    return &slots[i];
}

static void grow(struct st_credset *cs)
{
    size_t cap = cs->cap * 2;
    struct slot *slots = st_calloc(cap, sizeof(*slots));
    for (size_t i = 0; i < cs->cap; i++)
        if (cs->slots[i].h)
            *lookup(slots, cap, cs->slots[i].h, cs->slots[i].fp) = cs->slots[i];
    free(cs->slots);
    cs->slots = slots;
    cs->cap = cap;
}

static void add_len(struct st_credset *cs, size_t len)
{
    size_t i = 0;
    while (i < cs->nlens && cs->lens[i] < len)
        i++;
    if (i < cs->nlens && cs->lens[i] == len)
        return;
    memmove(cs->lens + i + 1, cs->lens + i, (cs->nlens - i) * sizeof(*cs->lens));
    cs->lens[i] = (unsigned short)len;
    cs->nlens++;
}

int st_credset_add(struct st_credset *cs, const char *fp, size_t credlen)
{
    uint64_t h = fp_hash(fp);
    int added = 0;
    if (!h || credlen < ST_CREDSET_MIN_LEN || credlen > ST_CREDSET_MAX_LEN)
        return -1;
    pthread_rwlock_wrlock(&cs->lock);
    struct slot *s = lookup(cs->slots, cs->cap, h, fp);
    if (!s->h) {
        s->h = h;
        strcpy(s->fp, fp);
        __atomic_store_n(&cs->n, cs->n + 1, __ATOMIC_RELEASE);
        if (cs->n * 2 > cs->cap)
            grow(cs);
        added = 1;
    }
    add_len(cs, credlen);
    pthread_rwlock_unlock(&cs->lock);
    return added;
}

static int has_locked(const struct st_credset *cs, const char *fp)
{
    uint64_t h = fp_hash(fp);
    return h && lookup(cs->slots, cs->cap, h, fp)->h != 0;
}

int st_credset_has(const struct st_credset *cs, const char *fp)
{
    struct st_credset *w = (struct st_credset *)cs; /* the lock only */
    pthread_rwlock_rdlock(&w->lock);
    int r = has_locked(cs, fp);
    pthread_rwlock_unlock(&w->lock);
    return r;
}

size_t st_credset_count(const struct st_credset *cs)
{
    return cs ? __atomic_load_n(&cs->n, __ATOMIC_ACQUIRE) : 0;
}

/* ---- the search ----------------------------------------------------------- */

static int is_alnum(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static int is_graph(unsigned char c)
{
    return c > 0x20 && c < 0x7F;
}

int st_credset_followable(const char *s, size_t len)
{
    uint64_t seen[2] = {0, 0};
    int distinct = 0;
    if (len < ST_CREDSET_MIN_LEN || len > ST_CREDSET_MAX_LEN)
        return 0;
    for (size_t i = 0; i < len && distinct < ST_CREDSET_MIN_DISTINCT; i++) {
        unsigned char c = (unsigned char)s[i] & 0x7F;
        uint64_t bit = UINT64_C(1) << (c & 63);
        if (!(seen[c >> 6] & bit)) {
            seen[c >> 6] |= bit;
            distinct++;
        }
    }
    return distinct >= ST_CREDSET_MIN_DISTINCT;
}

struct search {
    const struct st_credset *cs;
    const char *s;
    st_credset_fp_fn *fpf;
    st_credset_hit_fn *hit;
    void *arg;
    size_t tried;
};

/* Tries s[a..b) when b ends a candidate within the run ending at re. */
static void try(struct search *q, size_t a, size_t b, size_t re)
{
    char fp[ST_CREDSET_FP_MAX + 1];
    if (b > re || (b < re && is_alnum((unsigned char)q->s[b])) ||
        !st_credset_followable(q->s + a, b - a))
        return;
    fp[0] = '\0';
    q->fpf(q->arg, q->s + a, b - a, fp);
    q->tried++;
    if (has_locked(q->cs, fp))
        q->hit(q->arg, a, b - a, fp);
}

/* The candidates starting at a, in the run s[..re): one per known length. */
static void from(struct search *q, size_t a, size_t re)
{
    const struct st_credset *cs = q->cs;
    for (size_t i = 0; i < cs->nlens && a + cs->lens[i] <= re; i++)
        try(q, a, a + cs->lens[i], re);
}

size_t st_credset_find(const struct st_credset *cs, const char *s, size_t len,
                       st_credset_fp_fn *fpf, st_credset_hit_fn *hit, void *arg)
{
    struct search q = {cs, s, fpf, hit, arg, 0};
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;

    if (!st_credset_count(cs) || len < ST_CREDSET_MIN_LEN)
        return 0;
    pthread_rwlock_rdlock(&((struct st_credset *)cs)->lock);
    while (i < len) {
        while (i < len && !is_graph(p[i]))
            i++;
        size_t rs = i;
        while (i < len && is_graph(p[i]))
            i++;
        size_t re = i;
        if (re - rs < ST_CREDSET_MIN_LEN)
            continue;
        for (size_t a = rs; a + ST_CREDSET_MIN_LEN <= re; a++)
            if (a == rs || !is_alnum(p[a - 1]))
                from(&q, a, re);
    }
    pthread_rwlock_unlock(&((struct st_credset *)cs)->lock);
    return q.tried;
}
