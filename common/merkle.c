/* merkle.c: RFC 6962 Merkle tree hashes (see merkle.h). */
#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "log.h"
#include "merkle.h"

/* SHA-256 as fetched once, and one digest context per thread, kept: an
 * EVP_MD_CTX_new and an implicit fetch for every hash cost more than
 * hashing a 400-byte event (every staged event is hashed, and every leaf
 * costs node hashes). The key's destructor frees a thread's context when
 * the thread ends. */
static pthread_once_t sha_once = PTHREAD_ONCE_INIT;
static pthread_key_t sha_key;
static EVP_MD *sha_md;

static void ctx_free(void *ctx)
{
    EVP_MD_CTX_free(ctx);
}

static void sha_init(void)
{
    sha_md = EVP_MD_fetch(NULL, "SHA256", NULL);
    if (!sha_md || pthread_key_create(&sha_key, ctx_free))
        st_fatal("could not set up SHA-256");
}

static void sha256_prefixed(uint8_t prefix, const void *a, size_t alen, const void *b,
                            size_t blen, uint8_t out[ST_MERKLE_HASH])
{
    pthread_once(&sha_once, sha_init);
    EVP_MD_CTX *ctx = pthread_getspecific(sha_key);
    if (!ctx) {
        ctx = EVP_MD_CTX_new();
        if (!ctx || pthread_setspecific(sha_key, ctx))
            abort();
    }
    unsigned int n = 0;
    if (!EVP_DigestInit_ex2(ctx, sha_md, NULL) || !EVP_DigestUpdate(ctx, &prefix, 1) ||
        !EVP_DigestUpdate(ctx, a, alen) || (blen && !EVP_DigestUpdate(ctx, b, blen)) ||
        !EVP_DigestFinal_ex(ctx, out, &n))
        abort(); /* SHA-256 cannot fail but for lack of memory */
}

void st_merkle_leaf_hash(const void *data, size_t len, uint8_t out[ST_MERKLE_HASH])
{
    sha256_prefixed(0x00, data, len, NULL, 0, out);
}

void st_merkle_node_hash(const uint8_t l[ST_MERKLE_HASH], const uint8_t r[ST_MERKLE_HASH],
                         uint8_t out[ST_MERKLE_HASH])
{
    sha256_prefixed(0x01, l, ST_MERKLE_HASH, r, ST_MERKLE_HASH, out);
}

void st_merkle_frontier_init(struct st_merkle_frontier *f)
{
    memset(f, 0, sizeof(*f));
}

/* Like a binary counter: each trailing 1 bit of size is a perfect subtree
 * that merges with the new one. */
void st_merkle_frontier_add(struct st_merkle_frontier *f, const uint8_t leaf[ST_MERKLE_HASH])
{
    uint8_t h[ST_MERKLE_HASH];
    memcpy(h, leaf, ST_MERKLE_HASH);
    for (uint64_t s = f->size; s & 1; s >>= 1) {
        assert(f->n > 0);
        st_merkle_node_hash(f->node[f->n - 1], h, h);
        f->n--;
    }
    memcpy(f->node[f->n++], h, ST_MERKLE_HASH);
    f->size++;
}

void st_merkle_frontier_root(const struct st_merkle_frontier *f, uint8_t out[ST_MERKLE_HASH])
{
    if (f->n == 0) {
        unsigned int n = 0;
        EVP_Digest("", 0, out, &n, EVP_sha256(), NULL);
        return;
    }
    uint8_t h[ST_MERKLE_HASH];
    memcpy(h, f->node[f->n - 1], ST_MERKLE_HASH);
    for (int i = f->n - 2; i >= 0; i--)
        st_merkle_node_hash(f->node[i], h, h);
    memcpy(out, h, ST_MERKLE_HASH);
}

size_t st_merkle_frontier_save(const struct st_merkle_frontier *f, uint8_t *out)
{
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)(f->size >> (56 - 8 * i));
    memcpy(out + 8, f->node, (size_t)f->n * ST_MERKLE_HASH);
    return 8 + (size_t)f->n * ST_MERKLE_HASH;
}

int st_merkle_frontier_load(struct st_merkle_frontier *f, const uint8_t *buf, size_t len)
{
    st_merkle_frontier_init(f);
    if (len < 8)
        return -1;
    for (int i = 0; i < 8; i++)
        f->size = f->size << 8 | buf[i];
    f->n = __builtin_popcountll(f->size);
    if (len != 8 + (size_t)f->n * ST_MERKLE_HASH) {
        st_merkle_frontier_init(f);
        return -1;
    }
    memcpy(f->node, buf + 8, len - 8);
    return 0;
}

struct st_merkle_levels {
    int depth;                     /* number of levels; the last has one node */
    uint64_t count[ST_MERKLE_MAX_DEPTH + 1];
    uint8_t (*level[ST_MERKLE_MAX_DEPTH + 1])[ST_MERKLE_HASH];
};

struct st_merkle_levels *st_merkle_levels_new(const uint8_t (*leaves)[ST_MERKLE_HASH],
                                              uint64_t n)
{
    struct st_merkle_levels *t = st_calloc(1, sizeof(*t));
    t->count[0] = n;
    t->level[0] = st_malloc((n ? n : 1) * ST_MERKLE_HASH);
    memcpy(t->level[0], leaves, n * ST_MERKLE_HASH);
    t->depth = 1;
    while (t->count[t->depth - 1] > 1) {
        int d = t->depth;
        uint64_t below = t->count[d - 1], m = (below + 1) / 2;
        t->count[d] = m;
        t->level[d] = st_malloc(m * ST_MERKLE_HASH);
        for (uint64_t i = 0; i < m; i++) {
            if (2 * i + 1 < below)
                st_merkle_node_hash(t->level[d - 1][2 * i], t->level[d - 1][2 * i + 1],
                                    t->level[d][i]);
            else
                memcpy(t->level[d][i], t->level[d - 1][2 * i], ST_MERKLE_HASH);
        }
        t->depth++;
    }
    return t;
}

void st_merkle_levels_destroy(struct st_merkle_levels *t)
{
    if (!t)
        return;
    for (int d = 0; d < t->depth; d++)
        free(t->level[d]);
    free(t);
}

void st_merkle_levels_root(const struct st_merkle_levels *t, uint8_t out[ST_MERKLE_HASH])
{
    if (t->count[0] == 0) {
        struct st_merkle_frontier f;
        st_merkle_frontier_init(&f);
        st_merkle_frontier_root(&f, out);
        return;
    }
    memcpy(out, t->level[t->depth - 1][0], ST_MERKLE_HASH);
}

int st_merkle_levels_proof(const struct st_merkle_levels *t, uint64_t index,
                           uint8_t path[][ST_MERKLE_HASH])
{
    int n = 0;
    assert(index < t->count[0]);
    for (int d = 0; d + 1 < t->depth; d++) {
        uint64_t sib = index ^ 1;
        if (sib < t->count[d])
            memcpy(path[n++], t->level[d][sib], ST_MERKLE_HASH);
        index >>= 1;
    }
    return n;
}

int st_merkle_verify(const uint8_t leaf[ST_MERKLE_HASH], uint64_t index, uint64_t size,
                     const uint8_t path[][ST_MERKLE_HASH], int pathlen,
                     const uint8_t root[ST_MERKLE_HASH])
{
    if (index >= size)
        return 0;
    uint64_t fn = index, sn = size - 1;
    uint8_t r[ST_MERKLE_HASH];
    memcpy(r, leaf, ST_MERKLE_HASH);
    for (int i = 0; i < pathlen; i++) {
        if (sn == 0)
            return 0;
        if ((fn & 1) || fn == sn) {
            st_merkle_node_hash(path[i], r, r);
            while (!(fn & 1) && fn != 0) {
                fn >>= 1;
                sn >>= 1;
            }
        } else {
            st_merkle_node_hash(r, path[i], r);
        }
        fn >>= 1;
        sn >>= 1;
    }
    return sn == 0 && memcmp(r, root, ST_MERKLE_HASH) == 0;
}

void st_hex(const uint8_t *in, size_t len, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < len; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * len] = '\0';
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int st_from_hex(const char *hex, uint8_t *out, size_t len)
{
    if (!hex || strlen(hex) != 2 * len)
        return -1;
    for (size_t i = 0; i < len; i++) {
        int hi = hexval(hex[2 * i]), lo = hexval(hex[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return -1;
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}
