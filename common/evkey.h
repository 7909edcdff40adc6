/* evkey.h: what the analyzer, `sandtrail evidence` and any verifier share
 * about signed checkpoints: Ed25519 keys (OpenSSL libcrypto), their ids, the
 * leaf bytes of an offset that holds no stored event, and JSON quoting for
 * the documents that get signed.
 *
 * A key id is the first 16 hex digits of SHA-256 of the raw 32-byte public
 * key, so several trusted keys can be told apart and keys can rotate. */
#ifndef ST_EVKEY_H
#define ST_EVKEY_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"

#define ST_EVIDENCE_SIG 64
#define ST_EVIDENCE_KEY_ID 16

struct st_evkey {
    void *pkey;                      /* EVP_PKEY, owned */
    int private;                     /* 1 when it can sign */
    char id[ST_EVIDENCE_KEY_ID + 1];
};

/* Loads a PEM Ed25519 private key (openssl genpkey -algorithm ed25519) or,
 * when private_ is 0, a PEM public key. Returns 0, or -1 with errstr naming
 * the file. */
int st_evkey_load(struct st_evkey *k, const char *path, int private_, char *errstr,
                  size_t errsz);
void st_evkey_fini(struct st_evkey *k);

/* Signs data; sig gets 64 bytes. Returns 0, or -1 (not a private key). */
int st_evkey_sign(const struct st_evkey *k, const void *data, size_t len,
                  uint8_t sig[ST_EVIDENCE_SIG]);
/* Returns 1 when sig is k's signature of data. */
int st_evkey_verify(const struct st_evkey *k, const void *data, size_t len,
                    const uint8_t sig[ST_EVIDENCE_SIG]);

/* SHA-256 of data as 64 hex digits (out has 65 bytes). */
void st_sha256_hex(const void *data, size_t len, char out[65]);

/* The leaf bytes of offsets first..last of a partition that hold no stored
 * event (dead-lettered, a duplicate of an event already stored, or never
 * delivered by Kafka), for `reason`. Never starts with '{', so it cannot be
 * mistaken for an event. Appended to b. */
void st_evidence_skip_leaf(struct st_buf *b, int32_t partition, int64_t first,
                           int64_t last, const char *reason);

/* Appends s as a JSON string (quotes, escapes; UTF-8 passed through). */
void st_json_quote(struct st_buf *b, const char *s);

#endif
