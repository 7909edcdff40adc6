/* credset.c: issued credentials' fingerprints and their search in text (see
 * credset.h).
 *
 * The set is an open-addressing table of the hex fingerprints (linear
 * probing, at most half full), hashed on their leading hex digits: an HMAC
 * is uniform already. Beside it, the lengths of the credentials as a
 * bitmap, which is what makes the search cheap: for each start of a
 * candidate only those lengths are tried. The bitmap and the shortest and
 * longest lengths are read without the lock (atomic loads: a length being
 * added may be seen a moment late), so a string with no candidate costs one
 * scan and no lock; only a candidate's lookup takes the read lock. */
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
    /* credential lengths: bit L of lenbits; atomic, written under the lock */
    uint64_t lenbits[ST_CREDSET_MAX_LEN / 64 + 1];
    size_t minlen, maxlen; /* 0 while empty */
    size_t nlens;          /* distinct lengths; atomic */
};

/* Byte classes of the search: C_BREAK ends a run, C_BOUND is a boundary
 * inside one, C_ALNUM is neither. Filled once (see classes()). */
enum { C_BREAK, C_BOUND, C_ALNUM };
static unsigned char cls[256];
static pthread_once_t cls_once = PTHREAD_ONCE_INIT;

/* Bytes that end a run: never inside a generated credential, always around
 * one in JSON, shell and prose ("...", '...', (...), [...], {...}, a, b). */
static void classes(void)
{
    static const char breaks[] = "\"'`\\,;<>()[]{}|";
    for (unsigned c = 0; c < 256; c++)
        cls[c] = c <= 0x20 || c >= 0x7F || (c && strchr(breaks, (int)c)) ? C_BREAK
                 : (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')
                     ? C_ALNUM
                     : C_BOUND;
}

static int is_alnum(unsigned char c)
{
    return cls[c] == C_ALNUM;
}

struct st_credset *st_credset_new(void)
{
    struct st_credset *cs = st_calloc(1, sizeof(*cs));
    pthread_once(&cls_once, classes);
    if (pthread_rwlock_init(&cs->lock, NULL))
        st_fatal("could not create a lock");
    cs->cap = 64;
    cs->slots = st_calloc_table(cs->cap, sizeof(*cs->slots));
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
    size_t i = st_hash_slot(h, cap);
    while (slots[i].h && !(slots[i].h == h && !strcmp(slots[i].fp, fp)))
        i = (i + 1) & (cap - 1);
    return &slots[i];
}

static void grow(struct st_credset *cs)
{
    size_t cap = cs->cap * 2;
    struct slot *slots = st_calloc_table(cap, sizeof(*slots));
    for (size_t i = 0; i < cs->cap; i++)
        if (cs->slots[i].h)
            *lookup(slots, cap, cs->slots[i].h, cs->slots[i].fp) = cs->slots[i];
    free(cs->slots);
    cs->slots = slots;
    cs->cap = cap;
}

static void add_len(struct st_credset *cs, size_t len)
{
    if (!(cs->lenbits[len / 64] & UINT64_C(1) << (len % 64)))
        __atomic_add_fetch(&cs->nlens, 1, __ATOMIC_RELEASE);
    __atomic_or_fetch(&cs->lenbits[len / 64], UINT64_C(1) << (len % 64), __ATOMIC_RELEASE);
    if (!cs->minlen || len < cs->minlen)
        __atomic_store_n(&cs->minlen, len, __ATOMIC_RELEASE);
    if (len > cs->maxlen)
        __atomic_store_n(&cs->maxlen, len, __ATOMIC_RELEASE);
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
    struct st_credset *cs;
    const char *s;
    st_credset_fp_fn *fpf;
    st_credset_hit_fn *hit;
    void *arg;
    size_t tried;
};

/* Fingerprints s[a..b), a candidate, and looks it up. */
static void try(struct search *q, size_t a, size_t b)
{
    char fp[ST_CREDSET_FP_MAX + 1];
    if (!st_credset_followable(q->s + a, b - a))
        return;
    fp[0] = '\0';
    q->fpf(q->arg, q->s + a, b - a, fp);
    q->tried++;
    pthread_rwlock_rdlock(&q->cs->lock);
    int known = has_locked(q->cs, fp);
    pthread_rwlock_unlock(&q->cs->lock);
    if (known)
        q->hit(q->arg, a, b - a, fp);
}

static int has_len(const struct st_credset *cs, size_t len)
{
    return (__atomic_load_n(&cs->lenbits[len / 64], __ATOMIC_RELAXED) >> (len % 64)) & 1;
}

/* The candidates starting at a in the run s[..re): one per known length in
 * lo..hi whose end is the run's or a boundary. */
static void from(struct search *q, size_t a, size_t re, size_t lo, size_t hi)
{
    const unsigned char *p = (const unsigned char *)q->s;
    if (hi > re - a)
        hi = re - a;
    for (size_t w = lo / 64; w <= hi / 64; w++) {
        uint64_t bits = __atomic_load_n(&q->cs->lenbits[w], __ATOMIC_ACQUIRE);
        while (bits) {
            size_t len = w * 64 + (size_t)__builtin_ctzll(bits);
            bits &= bits - 1;
            if (len < lo)
                continue;
            if (len > hi)
                break;
            if (a + len == re || !is_alnum(p[a + len]))
                try(q, a, a + len);
        }
    }
}


size_t st_credset_find(const struct st_credset *cs, const char *s, size_t len,
                       st_credset_fp_fn *fpf, st_credset_hit_fn *hit, void *arg)
{
    /* the lock is taken per lookup; cs is not changed otherwise */
    struct search q = {(struct st_credset *)cs, s, fpf, hit, arg, 0};
    const unsigned char *p = (const unsigned char *)s;
    size_t lo = cs ? __atomic_load_n(&cs->minlen, __ATOMIC_ACQUIRE) : 0;
    size_t hi = cs ? __atomic_load_n(&cs->maxlen, __ATOMIC_ACQUIRE) : 0;
    size_t i = 0;

    if (!lo || len < lo)
        return 0;
    while (i < len) {
        while (i < len && cls[p[i]] == C_BREAK)
            i++;
        size_t rs = i;
        while (i < len && cls[p[i]] != C_BREAK)
            i++;
        size_t re = i;
        if (re - rs < lo)
            continue;
        /* With many lengths known, trying each end (a boundary) costs less
         * than trying each length: ends[] holds the run's, ascending. */
        size_t ends[256], nends = 0;
        if (__atomic_load_n(&cs->nlens, __ATOMIC_RELAXED) > 8) {
            for (size_t b = rs + lo; b < re && nends < 255; b++)
                if (!is_alnum(p[b]))
                    ends[nends++] = b;
            if (nends < 255)
                ends[nends++] = re;
            else
                nends = 0; /* too many: by length */
        }
        for (size_t a = rs, e0 = 0; a + lo <= re; a++) {
            if (a != rs && is_alnum(p[a - 1]))
                continue;
            if (!nends) {
                from(&q, a, re, lo, hi);
                continue;
            }
            while (e0 < nends && ends[e0] < a + lo)
                e0++;
            for (size_t e = e0; e < nends && ends[e] - a <= hi; e++)
                if (has_len(cs, ends[e] - a))
                    try(&q, a, ends[e]);
        }
    }
    return q.tried;
}
