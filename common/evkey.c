/* evkey.c: keys, signatures and shared formats of signed checkpoints
 * (see evkey.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "evkey.h"
#include "merkle.h"

int st_evkey_load(struct st_evkey *k, const char *path, int private_, char *errstr,
                  size_t errsz)
{
    uint8_t raw[32], digest[32];
    size_t rawlen = sizeof(raw);
    char hex[65];
    memset(k, 0, sizeof(*k));
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(errstr, errsz, "could not open key file \"%s\": %s", path, strerror(errno));
        return -1;
    }
    EVP_PKEY *p = private_ ? PEM_read_PrivateKey(f, NULL, NULL, NULL)
                           : PEM_read_PUBKEY(f, NULL, NULL, NULL);
    fclose(f);
    ERR_clear_error();
    if (!p || EVP_PKEY_get_id(p) != EVP_PKEY_ED25519 ||
        !EVP_PKEY_get_raw_public_key(p, raw, &rawlen) || rawlen != 32) {
        snprintf(errstr, errsz, "\"%s\" is not a PEM Ed25519 %s key", path,
                 private_ ? "private" : "public");
        EVP_PKEY_free(p);
        return -1;
    }
    unsigned int n = 0;
    EVP_Digest(raw, rawlen, digest, &n, EVP_sha256(), NULL);
    st_hex(digest, sizeof(digest), hex);
    memcpy(k->id, hex, ST_EVIDENCE_KEY_ID);
    k->id[ST_EVIDENCE_KEY_ID] = '\0';
    k->pkey = p;
    k->private = private_;
    return 0;
}

void st_evkey_fini(struct st_evkey *k)
{
    EVP_PKEY_free(k->pkey);
    k->pkey = NULL;
}

int st_evkey_sign(const struct st_evkey *k, const void *data, size_t len,
                  uint8_t sig[ST_EVIDENCE_SIG])
{
    size_t siglen = ST_EVIDENCE_SIG;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int ok = k->private && ctx && EVP_DigestSignInit(ctx, NULL, NULL, NULL, k->pkey) == 1 &&
             EVP_DigestSign(ctx, sig, &siglen, data, len) == 1 && siglen == ST_EVIDENCE_SIG;
    EVP_MD_CTX_free(ctx);
    ERR_clear_error();
    return ok ? 0 : -1;
}

int st_evkey_verify(const struct st_evkey *k, const void *data, size_t len,
                    const uint8_t sig[ST_EVIDENCE_SIG])
{
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    int ok = ctx && EVP_DigestVerifyInit(ctx, NULL, NULL, NULL, k->pkey) == 1 &&
             EVP_DigestVerify(ctx, sig, ST_EVIDENCE_SIG, data, len) == 1;
    EVP_MD_CTX_free(ctx);
    ERR_clear_error();
    return ok;
}

void st_sha256_hex(const void *data, size_t len, char out[65])
{
    uint8_t d[32];
    unsigned int n = 0;
    EVP_Digest(data, len, d, &n, EVP_sha256(), NULL);
    st_hex(d, sizeof(d), out);
}

void st_evidence_skip_leaf(struct st_buf *b, int32_t partition, int64_t first,
                           int64_t last, const char *reason)
{
    st_buf_printf(b, "sandtrail.skip %" PRId32 " %" PRId64 "-%" PRId64 " %s", partition,
                  first, last, reason);
}

void st_json_quote(struct st_buf *b, const char *s)
{
    st_buf_addc(b, '"');
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': st_buf_adds(b, "\\\""); break;
        case '\\': st_buf_adds(b, "\\\\"); break;
        case '\n': st_buf_adds(b, "\\n"); break;
        case '\r': st_buf_adds(b, "\\r"); break;
        case '\t': st_buf_adds(b, "\\t"); break;
        default:
            if (*p < 0x20)
                st_buf_printf(b, "\\u%04x", *p);
            else
                st_buf_addc(b, (char)*p);
        }
    }
    st_buf_addc(b, '"');
}
