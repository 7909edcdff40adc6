/* merkle.h: RFC 6962 Merkle tree hashes (Certificate Transparency), the
 * structure behind sandtrail's tamper-evident event store.
 *
 *   leaf hash  = SHA-256(0x00 || data)
 *   node hash  = SHA-256(0x01 || left || right)
 *   MTH(D[n])  = node(MTH(D[0:k]), MTH(D[k:n])), k the largest power of two
 *                smaller than n
 *
 * A frontier (compact range) holds the roots of the perfect subtrees that
 * make up a tree of `size` leaves, largest first: enough to append leaves and
 * compute the root without keeping the leaves. A level table holds every
 * node of a tree of fixed size, from which inclusion proofs are read.
 *
 * Everything here is pure computation: no I/O, nothing can fail but
 * allocation (which aborts). */
#ifndef ST_MERKLE_H
#define ST_MERKLE_H

#include <stddef.h>
#include <stdint.h>

#define ST_MERKLE_HASH 32
#define ST_MERKLE_MAX_DEPTH 64

void st_merkle_leaf_hash(const void *data, size_t len, uint8_t out[ST_MERKLE_HASH]);
void st_merkle_node_hash(const uint8_t l[ST_MERKLE_HASH], const uint8_t r[ST_MERKLE_HASH],
                         uint8_t out[ST_MERKLE_HASH]);

/* Embedded; st_merkle_frontier_init makes the empty tree. */
struct st_merkle_frontier {
    uint64_t size;
    int n;                                         /* = popcount(size) */
    uint8_t node[ST_MERKLE_MAX_DEPTH][ST_MERKLE_HASH]; /* largest subtree first */
};

void st_merkle_frontier_init(struct st_merkle_frontier *f);
/* Appends one leaf given its leaf hash. */
void st_merkle_frontier_add(struct st_merkle_frontier *f, const uint8_t leaf[ST_MERKLE_HASH]);
/* The tree head; the empty tree's is SHA-256 of nothing. */
void st_merkle_frontier_root(const struct st_merkle_frontier *f, uint8_t out[ST_MERKLE_HASH]);
/* Serialised form: 8-byte big-endian size, then the n nodes. Returns the
 * length written (at most 8 + 64 * 32). */
size_t st_merkle_frontier_save(const struct st_merkle_frontier *f, uint8_t *out);
/* Returns 0, or -1 when buf is not a frontier's serialised form. */
int st_merkle_frontier_load(struct st_merkle_frontier *f, const uint8_t *buf, size_t len);

/* Every node of a tree over `n` leaf hashes (copied), the last odd node of a
 * level promoted unchanged, which gives RFC 6962's shape. Heap; destroy
 * accepts NULL. */
struct st_merkle_levels;
struct st_merkle_levels *st_merkle_levels_new(const uint8_t (*leaves)[ST_MERKLE_HASH],
                                              uint64_t n);
void st_merkle_levels_destroy(struct st_merkle_levels *t);
void st_merkle_levels_root(const struct st_merkle_levels *t, uint8_t out[ST_MERKLE_HASH]);
/* The audit path of leaf `index` (RFC 6962 PATH), leaf side first, into
 * path; returns its length. */
int st_merkle_levels_proof(const struct st_merkle_levels *t, uint64_t index,
                           uint8_t path[][ST_MERKLE_HASH]);

/* Checks an inclusion proof (RFC 9162 2.1.3.2). Returns 1 when leaf `index`
 * with hash `leaf` is in the tree of `size` leaves whose head is root. */
int st_merkle_verify(const uint8_t leaf[ST_MERKLE_HASH], uint64_t index, uint64_t size,
                     const uint8_t path[][ST_MERKLE_HASH], int pathlen,
                     const uint8_t root[ST_MERKLE_HASH]);

/* Hex helpers for hashes: out gets 2 * len + 1 characters. from_hex returns
 * 0, or -1 unless hex is exactly 2 * len hex digits. */
void st_hex(const uint8_t *in, size_t len, char *out);
int st_from_hex(const char *hex, uint8_t *out, size_t len);

#endif
