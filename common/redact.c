/* redact.c: secrets removed at the edge (see redact.h).
 *
 * A string is redacted in four steps:
 *   1. prefilter: one pass over the bytes looks for every rule's keywords and
 *      gives the set of rules worth running (usually none);
 *   2. collect: each of those rules' regex (or memmem for literals) is run
 *      over the original string, every match recorded;
 *   3. resolve: matches are sorted left to right (at one start the longest
 *      first, then the rule listed first) and a match that overlaps one
 *      already kept is dropped;
 *   4. build: the kept matches are replaced by markers in one copy.
 * Markers are inserted only in step 4, after all matching, so a marker is
 * never scanned in the pass that inserted it; the patterns are written so
 * that a marker does not match them in a later pass either. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <openssl/core_names.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <pcre2.h>

#include "buf.h"
#include "credset.h"
#include "json.h"
#include "log.h"
#include "redact.h"

/* Rules, in priority order: when two matches start at the same byte and end
 * at the same byte, the rule listed first names the redaction. Literal rules
 * come first (a planted canary is more telling than its shape), generic
 * rules (jwt, bearer, url_userinfo) last. */
enum {
    R_CANARY,
    R_CREDENTIAL,
    R_PRIVATE_KEY,
    R_AWS_ACCESS_KEY,
    R_AWS_SECRET_KEY,
    R_GITHUB_PAT,
    R_GITHUB_TOKEN,
    R_GITLAB_TOKEN,
    R_SLACK_TOKEN,
    R_STRIPE_KEY,
    R_ANTHROPIC_KEY,
    R_OPENAI_KEY,
    R_GOOGLE_API_KEY,
    R_JWT,
    R_BEARER,
    R_URL_USERINFO,
    /* lineage: a credential a broker issued, whatever its shape (last: a
     * rule that matches the same span, or inside it, names it) */
    R_ISSUED,
    NRULES
};

#define MAX_KEYWORDS 6

struct rule_def {
    const char *name;
    /* PCRE2 pattern, or NULL for a literal rule. When the pattern has a
     * capture group, only group 1 is redacted (the credential after "Bearer",
     * the password of a URL); otherwise the whole match is. */
    const char *pattern;
    /* Literals of which at least one occurs in every match (prefilter). */
    const char *keywords[MAX_KEYWORDS];
    int icase; /* keywords compared ignoring ASCII case */
    /* Also tried on "<member name>=<value>", for secrets that are recognised
     * by the name they are stored under: {"AWS_SECRET_ACCESS_KEY": "..."}. */
    int keyed;
};

/* clang-format off */
static const struct rule_def rule_defs[NRULES] = {
    [R_CANARY] = {.name = "canary"},
    [R_CREDENTIAL] = {.name = "credential"},
    /* A whole PEM block, with real or literal "\n" line breaks. When the END
     * line is missing (a line cut short) the base64 body is taken to the end
     * of the run, so a truncated key does not leak either. */
    [R_PRIVATE_KEY] = {
        .name = "private_key",
        .pattern = "-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
                   "(?:[\\s\\S]*?"
                   "-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
                   "|(?:[A-Za-z0-9+/=:,.\\s-]|\\\\[rn])*)",
        .keywords = {"-----BEGIN"}},
    [R_AWS_ACCESS_KEY] = {
        .name = "aws_access_key",
        .pattern = "(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])",
        .keywords = {"AKIA", "ASIA"}},
    /* 40 base64 chars after an aws secret keyword. Requiring one uppercase
     * letter, '/' or '+' keeps lowercase hex (a fingerprint, a digest) out;
     * a real secret lacks all three with probability ~1e-10. */
    [R_AWS_SECRET_KEY] = {
        .name = "aws_secret_key",
        .pattern = "(?i:aws.?secret.?(?:access.?)?key|secret.?access.?key)"
                   "[\\\\\"'\\s]{0,4}(?:=>|[:=])[\\\\\"'\\s]{0,4}"
                   "((?=[a-z0-9]*[A-Z/+])[A-Za-z0-9/+]{40})(?![A-Za-z0-9/+=])",
        .keywords = {"secret"}, .icase = 1, .keyed = 1},
    [R_GITHUB_PAT] = {
        .name = "github_pat",
        .pattern = "(?<![A-Za-z0-9])github_pat_[A-Za-z0-9_]{50,}",
        .keywords = {"github_pat_"}},
    [R_GITHUB_TOKEN] = {
        .name = "github_token",
        .pattern = "(?<![A-Za-z0-9])gh[pousr]_[A-Za-z0-9]{36,}(?![A-Za-z0-9])",
        .keywords = {"ghp_", "gho_", "ghu_", "ghs_", "ghr_"}},
    [R_GITLAB_TOKEN] = {
        .name = "gitlab_token",
        .pattern = "(?<![A-Za-z0-9])glpat-[A-Za-z0-9_-]{20,}"
                   "(?:\\.[A-Za-z0-9_-]+)*",
        .keywords = {"glpat-"}},
    [R_SLACK_TOKEN] = {
        .name = "slack_token",
        .pattern = "(?<![A-Za-z0-9])xox[abposr]-[A-Za-z0-9-]{10,}",
        .keywords = {"xox"}},
    [R_STRIPE_KEY] = {
        .name = "stripe_key",
        .pattern = "(?<![A-Za-z0-9])[rs]k_(?:live|test)_[A-Za-z0-9]{16,}",
        .keywords = {"k_live_", "k_test_"}},
    [R_ANTHROPIC_KEY] = {
        .name = "anthropic_key",
        .pattern = "(?<![A-Za-z0-9_-])sk-ant-[A-Za-z0-9_-]{20,}",
        .keywords = {"sk-ant-"}},
    /* sk- and 20+ chars of which one is uppercase or a digit: all-lowercase
     * kebab-case names ("sk-learn-compatible-estimator") are not keys. */
    [R_OPENAI_KEY] = {
        .name = "openai_key",
        .pattern = "(?<![A-Za-z0-9_-])sk-(?=[a-z_-]*[A-Z0-9])"
                   "[A-Za-z0-9_-]{20,}",
        .keywords = {"sk-"}},
    [R_GOOGLE_API_KEY] = {
        .name = "google_api_key",
        .pattern = "(?<![A-Za-z0-9_-])AIza[A-Za-z0-9_-]{35}(?![A-Za-z0-9_-])",
        .keywords = {"AIza"}},
    /* header.payload.signature, the header starting {" (eyJ); up to two more
     * segments for a JWE. */
    [R_JWT] = {
        .name = "jwt",
        .pattern = "(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{10,}"
                   "\\.[A-Za-z0-9_-]{10,}"
                   "\\.[A-Za-z0-9_-]*(?:\\.[A-Za-z0-9_-]+){0,2}",
        .keywords = {"eyJ"}},
    /* The credential after "Bearer " or "Basic ": 8+ token68 chars, with an
     * uppercase letter or a digit after the first char ("Basic
     * Authentication", "Bearer realm=..." are prose, not credentials); a
     * final '.' ends a sentence, not the token. */
    [R_BEARER] = {
        .name = "bearer",
        .pattern = "(?<![A-Za-z0-9])(?i:bearer|basic)[ \\t]+"
                   "((?=[A-Za-z0-9._~+/=-]{8})"
                   "(?=[A-Za-z0-9_~+/-][a-z._~+/-]*[A-Z0-9])"
                   "[A-Za-z0-9_~+/-]+(?:\\.[A-Za-z0-9_~+/-]+)*=*)",
        .keywords = {"bearer", "basic"}, .icase = 1},
    /* scheme://user:password@host: only the password. The password may hold
     * '@' (taken up to the last one before the host) but not start a
     * marker. Lengths are bounded so a long run of letters stays linear. */
    [R_URL_USERINFO] = {
        .name = "url_userinfo",
        .pattern = "[A-Za-z][A-Za-z0-9+.-]{0,31}://"
                   "[^\\s/?#@:\\[\\]\"'<>]{0,256}:"
                   "(?!\\[REDACTED:)([^\\s/?#\"'<>]{1,256})@",
        .keywords = {"://"}},
    [R_ISSUED] = {.name = "issued"},
};
/* clang-format on */

#define BIT(i) (1u << (i))

struct rule {
    pcre2_code *code; /* NULL for literal rules */
    int jit;          /* 1 when JIT-compiled (else the interpreter runs) */
    uint32_t group;   /* the capture group redacted: 0 or 1 */
};

/* A prefilter keyword, in the bucket of its first byte (both cases when
 * icase). */
struct keyword {
    const char *s;
    size_t len;
    int icase;
    unsigned rule;
};

struct match {
    size_t start, end;
    unsigned rule;
    char fp[ST_REDACT_FP_MAX + 1];
};

struct literal {
    char *s;
    size_t len;
};

struct st_redactor {
    struct rule rules[NRULES];
    uint64_t hits[NRULES];

    struct literal *canaries;
    size_t ncanaries;

    struct keyword *kws; /* grouped by first byte */
    size_t nkws;
    uint32_t bucket_start[256], bucket_len[256];
    /* pairs[a << 8 | b]: bit 0 when some keyword starts with bytes a, b,
     * bit 1 when some keyword's bytes 1 and 2 are a, b. Every keyword being
     * at least 3 bytes (step 2), looking at every other pair finds every
     * start: most of a string is dismissed by one lookup per two bytes */
    uint8_t pairs[65536];
    unsigned step; /* 2, or 1 when a keyword is shorter than 3 bytes */
    uint32_t keyed; /* rules with rule_def.keyed */

    pcre2_match_data *md;
    pcre2_match_context *mctx;
    pcre2_jit_stack *jstack;

    EVP_MAC *mac;
    EVP_MAC_CTX *hmac; /* keyed once; re-initialised per fingerprint */
    int fp_len;

    struct match *m; /* matches of the string being redacted */
    size_t nm, capm;
    struct st_buf out;     /* the redacted string */
    struct st_buf scratch; /* "<name>=<value>" for keyed rules */
    struct st_buf path;    /* path of a redaction, built when recorded */
    /* the members and elements from the root down to the string being
     * redacted, kept as pointers: most events redact nothing, so the path
     * text is only made for a redaction */
    struct frame {
        const cJSON *item;
        size_t idx;
        int in_array;
    } *frames;
    size_t capframes;

    /* During st_redact_event: the identity.credential being removed, also
     * redacted wherever else it occurs; NULL otherwise. */
    const char *cred;
    size_t credlen;
    const struct st_credset *issued; /* shared, not owned; NULL: none */
    cJSON *doc;     /* the event being redacted */
    cJSON *entries; /* its new "redactions" array, made at the first entry */
};

/* ---- set-up ------------------------------------------------------------ */

static unsigned char ascii_lower(unsigned char c)
{
    return c >= 'A' && c <= 'Z' ? (unsigned char)(c - 'A' + 'a') : c;
}

static unsigned char ascii_upper(unsigned char c)
{
    return c >= 'a' && c <= 'z' ? (unsigned char)(c - 'a' + 'A') : c;
}

static void add_keyword(struct keyword **v, size_t *n, size_t *cap,
                        const char *s, size_t len, int icase, unsigned rule)
{
    if (*n == *cap) {
        *cap = *cap ? *cap * 2 : 32;
        *v = st_realloc(*v, *cap * sizeof(**v));
    }
    (*v)[(*n)++] = (struct keyword){s, len, icase, rule};
}

/* Lays the keywords out by first byte so the prefilter looks at one bucket
 * per byte of input. */
static void build_prefilter(struct st_redactor *r)
{
    struct keyword *all = NULL;
    size_t nall = 0, capall = 0;

    for (unsigned i = 0; i < NRULES; i++)
        for (size_t k = 0; k < MAX_KEYWORDS && rule_defs[i].keywords[k]; k++)
            add_keyword(&all, &nall, &capall, rule_defs[i].keywords[k],
                        strlen(rule_defs[i].keywords[k]), rule_defs[i].icase,
                        i);
    for (size_t i = 0; i < r->ncanaries; i++)
        add_keyword(&all, &nall, &capall, r->canaries[i].s,
                    r->canaries[i].len, 0, R_CANARY);

    size_t cap = 0;
    for (unsigned c = 0; c < 256; c++) {
        r->bucket_start[c] = (uint32_t)r->nkws;
        for (size_t k = 0; k < nall; k++) {
            unsigned char first = (unsigned char)all[k].s[0];
            int hit = all[k].icase ? ascii_lower((unsigned char)c) ==
                                         ascii_lower(first)
                                   : c == first;
            if (hit)
                add_keyword(&r->kws, &r->nkws, &cap, all[k].s, all[k].len,
                            all[k].icase, all[k].rule);
        }
        r->bucket_len[c] = (uint32_t)(r->nkws - r->bucket_start[c]);
    }
    r->step = 2;
    for (size_t k = 0; k < r->nkws; k++)
        if (r->kws[k].len < 3)
            r->step = 1;
    for (size_t k = 0; k < r->nkws; k++) {
        const unsigned char *w = (const unsigned char *)r->kws[k].s;
        /* bytes 0,1 mark a start here; bytes 1,2 a start one byte before */
        for (unsigned at = 0; at < (r->step == 2 ? 2u : 1u); at++) {
            unsigned char a[2] = {w[at], w[at]}, b[2] = {w[at + 1], w[at + 1]};
            if (r->kws[k].icase) {
                a[0] = ascii_lower(w[at]), a[1] = ascii_upper(w[at]);
                b[0] = ascii_lower(w[at + 1]), b[1] = ascii_upper(w[at + 1]);
            }
            for (int i = 0; i < 2; i++)
                for (int j = 0; j < 2; j++)
                    r->pairs[(unsigned)a[i] << 8 | b[j]] |= (uint8_t)(1u << at);
        }
    }
    free(all);
}

static int compile_rules(struct st_redactor *r, char *errstr, size_t errsz)
{
    for (unsigned i = 0; i < NRULES; i++) {
        const struct rule_def *d = &rule_defs[i];
        int err;
        PCRE2_SIZE off;
        uint32_t ncap = 0;

        if (!d->pattern)
            continue;
        r->rules[i].code = pcre2_compile((PCRE2_SPTR)d->pattern,
                                         PCRE2_ZERO_TERMINATED, 0, &err, &off,
                                         NULL);
        if (!r->rules[i].code) {
            PCRE2_UCHAR msg[120];
            pcre2_get_error_message(err, msg, sizeof(msg));
            snprintf(errstr, errsz,
                     "could not compile redaction rule \"%s\": %s at offset "
                     "%zu",
                     d->name, (const char *)msg, (size_t)off);
            return -1;
        }
        pcre2_pattern_info(r->rules[i].code, PCRE2_INFO_CAPTURECOUNT, &ncap);
        if (ncap > 1) {
            snprintf(errstr, errsz,
                     "redaction rule \"%s\" has %u capture groups, at most 1 "
                     "is allowed",
                     d->name, ncap);
            return -1;
        }
        r->rules[i].group = ncap;
        /* Without JIT support (an unusual platform) the interpreter gives
         * the same matches, only slower. */
        r->rules[i].jit =
            pcre2_jit_compile(r->rules[i].code, PCRE2_JIT_COMPLETE) == 0;
        if (!r->rules[i].jit)
            st_warn("redaction rule \"%s\" is not JIT-compiled: PCRE2 has no "
                    "JIT here",
                    d->name);
    }
    return 0;
}

static int setup_hmac(struct st_redactor *r, const unsigned char *key,
                      size_t keylen, char *errstr, size_t errsz)
{
    OSSL_PARAM params[] = {
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, "SHA256", 0),
        OSSL_PARAM_construct_end()};

    r->mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
    if (r->mac)
        r->hmac = EVP_MAC_CTX_new(r->mac);
    if (!r->hmac || !EVP_MAC_init(r->hmac, key, keylen, params)) {
        snprintf(errstr, errsz, "could not set up HMAC-SHA256 with OpenSSL");
        return -1;
    }
    return 0;
}

struct st_redactor *st_redactor_new(const struct st_redact_conf *conf,
                                    char *errstr, size_t errsz)
{
    struct st_redactor *r;

    if (!conf || !conf->key || conf->keylen < ST_REDACT_KEY_MIN) {
        snprintf(errstr, errsz,
                 "redaction key is %zu bytes, at least %d are needed",
                 conf && conf->key ? conf->keylen : 0, ST_REDACT_KEY_MIN);
        return NULL;
    }
    if (conf->fp_hex_len < 0 || conf->fp_hex_len > ST_REDACT_FP_MAX) {
        snprintf(errstr, errsz,
                 "fingerprint length %d is out of range 1..%d (0 means %d)",
                 conf->fp_hex_len, ST_REDACT_FP_MAX, ST_REDACT_FP_DEFAULT);
        return NULL;
    }
    for (size_t i = 0; i < conf->ncanaries; i++) {
        size_t len = conf->canaries[i] ? strlen(conf->canaries[i]) : 0;
        /* a short canary would redact ordinary words */
        if (len < ST_REDACT_CANARY_MIN) {
            snprintf(errstr, errsz,
                     "canary %zu is %zu bytes, at least %d are needed", i + 1,
                     len, ST_REDACT_CANARY_MIN);
            return NULL;
        }
    }

    r = st_calloc(1, sizeof(*r));
    r->fp_len = conf->fp_hex_len ? conf->fp_hex_len : ST_REDACT_FP_DEFAULT;
    r->issued = conf->issued;
    st_buf_init(&r->out);
    st_buf_init(&r->scratch);
    st_buf_init(&r->path);
    r->ncanaries = conf->ncanaries;
    r->canaries = st_calloc(r->ncanaries, sizeof(*r->canaries));
    for (size_t i = 0; i < r->ncanaries; i++) {
        r->canaries[i].s = st_strdup(conf->canaries[i]);
        r->canaries[i].len = strlen(r->canaries[i].s);
    }
    if (compile_rules(r, errstr, errsz) < 0 ||
        setup_hmac(r, conf->key, conf->keylen, errstr, errsz) < 0)
        goto err;
    if (conf->fault_rule_off && *conf->fault_rule_off) {
        unsigned i = 0;
        while (i < NRULES && !(rule_defs[i].pattern &&
                               !strcmp(rule_defs[i].name, conf->fault_rule_off)))
            i++;
        if (i == NRULES) {
            snprintf(errstr, errsz, "no redaction rule is named \"%.64s\"",
                     conf->fault_rule_off);
            goto err;
        }
        pcre2_code_free(r->rules[i].code);
        r->rules[i].code = NULL;
    }
    build_prefilter(r);
    for (unsigned i = 0; i < NRULES; i++)
        if (rule_defs[i].keyed)
            r->keyed |= BIT(i);

    /* one group at most (compile_rules), so two ovector pairs suffice */
    r->md = pcre2_match_data_create(2, NULL);
    r->mctx = pcre2_match_context_create(NULL);
    /* PEM blocks are a few kB; the default 32 kB JIT stack is enough for
     * these patterns, the larger limit is head room for hostile input */
    r->jstack = pcre2_jit_stack_create(32 * 1024, 1024 * 1024, NULL);
    if (!r->md || !r->mctx || !r->jstack)
        st_fatal("out of memory setting up PCRE2 match data");
    pcre2_jit_stack_assign(r->mctx, NULL, r->jstack);
    return r;

err:
    st_redactor_destroy(r);
    return NULL;
}

void st_redactor_destroy(struct st_redactor *r)
{
    if (!r)
        return;
    for (unsigned i = 0; i < NRULES; i++)
        pcre2_code_free(r->rules[i].code);
    for (size_t i = 0; i < r->ncanaries; i++)
        free(r->canaries[i].s);
    free(r->canaries);
    free(r->kws);
    pcre2_match_data_free(r->md);
    pcre2_match_context_free(r->mctx);
    pcre2_jit_stack_free(r->jstack);
    EVP_MAC_CTX_free(r->hmac);
    EVP_MAC_free(r->mac);
    free(r->m);
    free(r->frames);
    st_buf_fini(&r->out);
    st_buf_fini(&r->scratch);
    st_buf_fini(&r->path);
    free(r);
}

/* ---- fingerprints -------------------------------------------------------- */

/* Writes r->fp_len hex chars and a NUL to out[ST_REDACT_FP_MAX + 1]. */
static void fingerprint(const struct st_redactor *r, const char *v, size_t len,
                        char *out)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char mac[32];
    size_t maclen = 0;

    /* a NULL key re-initialises with the key set in _new */
    if (!EVP_MAC_init(r->hmac, NULL, 0, NULL) ||
        !EVP_MAC_update(r->hmac, (const unsigned char *)v, len) ||
        !EVP_MAC_final(r->hmac, mac, &maclen, sizeof(mac)) || maclen != 32)
        st_fatal("HMAC-SHA256 failed in OpenSSL");
    for (int i = 0; i < r->fp_len; i++)
        out[i] = hex[(mac[i / 2] >> (i % 2 ? 0 : 4)) & 0xf];
    out[r->fp_len] = '\0';
}

/* A private key's fingerprint is that of its key material: the base64
 * characters of the body, without the BEGIN/END lines, the line breaks
 * (real, CRLF, or a literal "\n") or what a decoder made of them (U+FFFD),
 * so that one key gives one fingerprint however a source wrapped it. */
static void fingerprint_key(const struct st_redactor *r, const char *v, size_t len,
                            char *out)
{
    const char *end = v + len, *p = v;
    struct st_buf body;
    st_buf_init(&body);
    /* past "-----BEGIN ... PRIVATE KEY-----" */
    const char *hdr = memmem(v + 5, len > 5 ? len - 5 : 0, "-----", 5);
    if (hdr)
        p = hdr + 5;
    for (; p < end; p++) {
        if (*p == '\\' && p + 1 < end) {
            p++;
            continue;
        }
        if (*p == '-' && end - p >= 8 && memcmp(p, "-----END", 8) == 0)
            break;
        if ((*p >= 'A' && *p <= 'Z') || (*p >= 'a' && *p <= 'z') ||
            (*p >= '0' && *p <= '9') || *p == '+' || *p == '/' || *p == '=')
            st_buf_addc(&body, *p);
    }
    if (body.len)
        fingerprint(r, body.data, body.len, out);
    else
        fingerprint(r, v, len, out);
    st_buf_fini(&body);
}

void st_redact_fingerprint(const struct st_redactor *r, const char *v,
                           size_t len, char *out, size_t outsz)
{
    char fp[ST_REDACT_FP_MAX + 1];

    if (outsz == 0)
        return;
    fingerprint(r, v, len, fp);
    size_t n = strlen(fp) < outsz - 1 ? strlen(fp) : outsz - 1;
    memcpy(out, fp, n);
    out[n] = '\0';
}

/* ---- matching ------------------------------------------------------------ */

/* The set of rules (bits) whose keywords occur in s[0..len). Every keyword
 * is at least 2 bytes long (canaries 8). */
/* Whether some keyword (of rule or canary) starts at p[i]: sets its rule's
 * bit in *mask. */
static void keyword_at(const struct st_redactor *r, const unsigned char *p, size_t len,
                       size_t i, uint32_t *mask)
{
    uint32_t n = r->bucket_len[p[i]];
    const struct keyword *k = r->kws + r->bucket_start[p[i]];
    for (uint32_t j = 0; j < n; j++) {
        if ((*mask & BIT(k[j].rule)) || k[j].len > len - i)
            continue;
        if (k[j].icase) {
            size_t x = 1;
            while (x < k[j].len &&
                   ascii_lower(p[i + x]) == ascii_lower((unsigned char)k[j].s[x]))
                x++;
            if (x == k[j].len)
                *mask |= BIT(k[j].rule);
        } else if (memcmp(p + i + 1, k[j].s + 1, k[j].len - 1) == 0) {
            *mask |= BIT(k[j].rule);
        }
    }
}

static uint32_t prefilter(const struct st_redactor *r, const char *s,
                          size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    uint32_t mask = 0;

    /* a keyword of 3 or more bytes starting at an even offset shows its
     * first pair at an even offset, one starting at an odd offset its
     * second pair */
    for (size_t i = 0; i + 1 < len; i += r->step) {
        unsigned t = r->pairs[(unsigned)p[i] << 8 | p[i + 1]];
        if (!t)
            continue;
        if ((t & 2) && i > 0 && r->step == 2)
            keyword_at(r, p, len, i - 1, &mask);
        if (t & 1)
            keyword_at(r, p, len, i, &mask);
    }
    return mask;
}

static void push_match(struct st_redactor *r, size_t start, size_t end,
                       unsigned rule)
{
    if (r->nm == r->capm) {
        r->capm = r->capm ? r->capm * 2 : 16;
        r->m = st_realloc(r->m, r->capm * sizeof(*r->m));
    }
    r->m[r->nm].start = start;
    r->m[r->nm].end = end;
    r->m[r->nm].rule = rule;
    r->m[r->nm].fp[0] = '\0';
    r->nm++;
}

/* Runs rule i over subj[0..slen) and records the matches that lie at or after
 * skip, shifted back by skip (skip > 0 when subj is "<name>=<value>"). */
static void run_regex(struct st_redactor *r, unsigned i, const char *subj,
                      size_t slen, size_t skip)
{
    const struct rule *ru = &r->rules[i];
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(r->md);
    size_t off = 0;

    while (off <= slen) {
        int rc = ru->jit ? pcre2_jit_match(ru->code, (PCRE2_SPTR)subj, slen,
                                           off, 0, r->md, r->mctx)
                         : pcre2_match(ru->code, (PCRE2_SPTR)subj, slen, off,
                                       0, r->md, r->mctx);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0) {
            /* A resource limit hit by hostile input: fail closed, the rest
             * of the string is withheld rather than let through. */
            st_warn("redaction rule \"%s\" failed on a %zu-byte string "
                    "(PCRE2 error %d): redacting the rest of it",
                    rule_defs[i].name, slen - skip, rc);
            size_t from = off > skip ? off : skip;
            if (slen > from)
                push_match(r, from - skip, slen - skip, i);
            break;
        }
        size_t gs = ov[2 * ru->group], ge = ov[2 * ru->group + 1];
        if (gs != PCRE2_UNSET && ge > gs && gs >= skip)
            push_match(r, gs - skip, ge - skip, i);
        off = ov[1] > ov[0] ? ov[1] : ov[0] + 1;
    }
}

/* Whether s[start..end) lies inside a marker "[REDACTED:rule:hex]" (a
 * canary may be a word that markers hold). */
static int in_marker(const char *s, size_t len, size_t start, size_t end)
{
    static const char open[] = "[REDACTED:";
    const size_t olen = sizeof(open) - 1;
    const size_t lim = start > 128 ? start - 128 : 0;
    size_t b = start, e;

    while (s[b] != '[') {
        if (b == lim || (s[b] == ']' && b < start))
            return 0;
        b--;
    }
    if (len - b < olen || memcmp(s + b, open, olen) != 0)
        return 0;
    e = b + olen;
    while (e < len && ((s[e] >= 'a' && s[e] <= 'z') || s[e] == '_'))
        e++;
    if (e == b + olen || e >= len || s[e] != ':')
        return 0;
    e++;
    while (e < len && ((s[e] >= 'a' && s[e] <= 'f') ||
                       (s[e] >= '0' && s[e] <= '9')))
        e++;
    return e < len && s[e] == ']' && end <= e + 1;
}

static void find_literal(struct st_redactor *r, unsigned rule, const char *s,
                         size_t len, const char *lit, size_t litlen)
{
    size_t off = 0;
    const char *p;

    while (off < len && (p = memmem(s + off, len - off, lit, litlen))) {
        size_t start = (size_t)(p - s);
        if (!in_marker(s, len, start, start + litlen))
            push_match(r, start, start + litlen, rule);
        off = start + litlen;
    }
}

/* ---- lineage hook (credset.c): credentials brokers issued --------------
 * Every candidate substring of s whose fingerprint is that of an issued
 * credential is a match of rule "issued"; its marker carries the same
 * fingerprint as the issue's identity.credential_fp. Where a rule matches
 * inside it (the password of an issued URL, a token an issued string
 * holds), the rule names that part instead: what a rule finds keeps its
 * marker, and the rest is not secret by any rule. */
static void issued_fp(void *arg, const char *v, size_t len, char *fp)
{
    fingerprint(arg, v, len, fp);
}

static void issued_hit(void *arg, size_t off, size_t len, const char *fp)
{
    struct st_redactor *r = arg;
    for (size_t i = 0; i < r->nm; i++)
        if (r->m[i].rule != R_ISSUED && r->m[i].start < off + len && off < r->m[i].end)
            return;
    push_match(r, off, off + len, R_ISSUED);
}

static int issued_on(const struct st_redactor *r)
{
    return r->issued && st_credset_count(r->issued) > 0;
}
/* ---- end of the lineage hook --------------------------------------------- */

/* Step 2: every match of the rules in mask over s[0..len); name (namelen
 * bytes) is the member name the string is stored under, or NULL, and kmask
 * the rules whose keywords it holds. */
static void collect(struct st_redactor *r, const char *s, size_t len,
                    uint32_t mask, const char *name, size_t namelen,
                    uint32_t kmask)
{
    r->nm = 0;
    /* no rule to run: a string searched only for issued credentials */
    for (unsigned i = 0; i < NRULES && (mask | (kmask & r->keyed)); i++) {
        if (!r->rules[i].code)
            continue;
        if (rule_defs[i].keyed && name && (kmask & BIT(i))) {
            /* one run over "<name>=<value>" also finds what the value
             * alone holds */
            st_buf_reset(&r->scratch);
            st_buf_add(&r->scratch, name, namelen);
            st_buf_addc(&r->scratch, '=');
            st_buf_add(&r->scratch, s, len);
            run_regex(r, i, r->scratch.data, r->scratch.len, namelen + 1);
        } else if (mask & BIT(i)) {
            run_regex(r, i, s, len, 0);
        }
    }
    if (mask & BIT(R_CANARY))
        for (size_t i = 0; i < r->ncanaries; i++)
            find_literal(r, R_CANARY, s, len, r->canaries[i].s,
                         r->canaries[i].len);
    if (r->cred && r->credlen >= ST_REDACT_CANARY_MIN)
        find_literal(r, R_CREDENTIAL, s, len, r->cred, r->credlen);
    if (issued_on(r)) /* lineage hook */
        st_credset_find(r->issued, s, len, issued_fp, issued_hit, r);
}

static int match_cmp(const void *a, const void *b)
{
    const struct match *x = a, *y = b;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    if (x->end != y->end)
        return x->end > y->end ? -1 : 1; /* longest first */
    return x->rule < y->rule ? -1 : x->rule > y->rule;
}

/* Step 3: keeps, left to right, the matches that do not overlap a kept one. */
static void resolve(struct st_redactor *r)
{
    size_t kept = 0, last_end = 0;

    if (r->nm > 1)
        qsort(r->m, r->nm, sizeof(*r->m), match_cmp);
    for (size_t i = 0; i < r->nm; i++) {
        if (kept && r->m[i].start < last_end)
            continue;
        r->m[kept++] = r->m[i];
        last_end = r->m[i].end;
    }
    r->nm = kept;
}

/* Step 4: r->out = s with every kept match replaced by its marker. */
static void build(struct st_redactor *r, const char *s, size_t len)
{
    size_t pos = 0;

    st_buf_reset(&r->out);
    for (size_t i = 0; i < r->nm; i++) {
        struct match *m = &r->m[i];
        if (m->rule == R_PRIVATE_KEY)
            fingerprint_key(r, s + m->start, m->end - m->start, m->fp);
        else
            fingerprint(r, s + m->start, m->end - m->start, m->fp);
        st_buf_add(&r->out, s + pos, m->start - pos);
        st_buf_adds(&r->out, "[REDACTED:");
        st_buf_adds(&r->out, rule_defs[m->rule].name);
        st_buf_addc(&r->out, ':');
        st_buf_adds(&r->out, m->fp);
        st_buf_addc(&r->out, ']');
        pos = m->end;
        r->hits[m->rule]++;
    }
    st_buf_add(&r->out, s + pos, len - pos);
}

/* Redacts s[0..len) into r->out; returns the number of redactions (r->m
 * holds them), 0 when s has no secret (r->out is then not set). */
static size_t redact_string(struct st_redactor *r, const char *s, size_t len,
                            uint32_t mask, const char *name, size_t namelen,
                            uint32_t kmask)
{
    if (!name)
        kmask = 0;
    if (!mask && !(kmask & r->keyed) &&
        !(r->cred && r->credlen >= ST_REDACT_CANARY_MIN) && !issued_on(r))
        return 0;
    collect(r, s, len, mask, name, namelen, kmask);
    if (!r->nm)
        return 0;
    resolve(r);
    build(r, s, len);
    return r->nm;
}

/* ---- documents ----------------------------------------------------------- */

static char *cjson_strdup_buf(const struct st_buf *b)
{
    char *s = cJSON_malloc(b->len + 1);
    if (!s)
        st_fatal("out of memory allocating %zu bytes", b->len + 1);
    memcpy(s, b->data, b->len + 1);
    return s;
}

static void path_add_key(struct st_buf *path, const char *key)
{
    if (key[0] && !strpbrk(key, ".[]\"\\")) {
        if (path->len)
            st_buf_addc(path, '.');
        st_buf_adds(path, key);
        return;
    }
    st_buf_adds(path, "[\"");
    for (const char *p = key; *p; p++) {
        if (*p == '"' || *p == '\\')
            st_buf_addc(path, '\\');
        st_buf_addc(path, *p);
    }
    st_buf_adds(path, "\"]");
}

/* r->path = the path of frames[0..depth]. */
static const char *path_build(struct st_redactor *r, size_t depth)
{
    st_buf_reset(&r->path);
    for (size_t i = 0; i <= depth; i++) {
        if (r->frames[i].in_array)
            st_buf_printf(&r->path, "[%zu]", r->frames[i].idx);
        else
            path_add_key(&r->path, r->frames[i].item->string);
    }
    return r->path.data ? r->path.data : "";
}

static void add_entry(struct st_redactor *r, const char *path, unsigned rule,
                      const char *fp)
{
    if (!cJSON_IsObject(r->doc))
        return;
    if (!r->entries && !(r->entries = cJSON_CreateArray()))
        st_fatal("out of memory building a redaction record");
    cJSON *e = cJSON_CreateObject();
    if (!e || !cJSON_AddStringToObject(e, "path", path) ||
        !cJSON_AddStringToObject(e, "rule", rule_defs[rule].name) ||
        !cJSON_AddStringToObject(e, "fingerprint", fp))
        st_fatal("out of memory building a redaction record");
    cJSON_AddItemToArray(r->entries, e);
}

/* Records the matches in r->m for the string at frames[0..depth]. */
static void add_entries(struct st_redactor *r, size_t depth)
{
    const char *path = path_build(r, depth);
    for (size_t i = 0; i < r->nm; i++)
        add_entry(r, path, r->m[i].rule, r->m[i].fp);
}

static int walk(struct st_redactor *r, cJSON *node, size_t depth)
{
    int n = 0, is_obj = cJSON_IsObject(node);
    size_t idx = 0;

    if (depth == r->capframes) {
        r->capframes = r->capframes ? r->capframes * 2 : 16;
        r->frames = st_realloc(r->frames, r->capframes * sizeof(*r->frames));
    }
    for (cJSON *c = node->child; c; c = c->next, idx++) {
        struct frame *f = &r->frames[depth];
        const char *name = NULL;
        size_t namelen = 0;
        uint32_t kmask = 0;

        f->item = c;
        f->idx = idx;
        f->in_array = !is_obj || !c->string;
        if (!f->in_array) {
            namelen = strlen(c->string);
            kmask = prefilter(r, c->string, namelen);
            size_t k =
                redact_string(r, c->string, namelen, kmask, NULL, 0, 0);
            if (k) {
                if (!(c->type & cJSON_StringIsConst))
                    cJSON_free(c->string);
                c->type &= ~cJSON_StringIsConst;
                c->string = cjson_strdup_buf(&r->out);
                namelen = r->out.len;
                kmask = prefilter(r, c->string, namelen);
                add_entries(r, depth); /* the path holds the new name */
                n += (int)k;
            }
            name = c->string;
        }

        if ((c->type & 0xFF) == cJSON_String && c->valuestring) {
            size_t len = strlen(c->valuestring);
            size_t k = redact_string(r, c->valuestring, len,
                                     prefilter(r, c->valuestring, len), name,
                                     namelen, kmask);
            if (k) {
                cJSON_free(c->valuestring);
                c->valuestring = cjson_strdup_buf(&r->out);
                add_entries(r, depth);
                n += (int)k;
            }
        } else if ((c->type & 0xFF) == cJSON_Object ||
                   (c->type & 0xFF) == cJSON_Array) {
            n += walk(r, c, depth + 1);
        }
    }
    return n;
}

int st_redact_event(struct st_redactor *r, cJSON *doc)
{
    char fp[ST_REDACT_FP_MAX + 1];
    cJSON *identity, *cred = NULL;
    int n = 0;

    if (!doc)
        return 0;
    r->doc = doc;
    r->entries = NULL;
    /* the sender's own list, forged or not, is never passed on (every copy:
     * cJSON keeps duplicate keys of documents not checked by st_json_parse) */
    if (cJSON_IsObject(doc))
        while (st_json_get(doc, "redactions"))
            cJSON_DeleteItemFromObjectCaseSensitive(doc, "redactions");

    identity = st_json_get(doc, "identity");
    if (cJSON_IsObject(identity)) {
        cred = st_json_get(identity, "credential");
        if (cJSON_IsString(cred) && cred->valuestring) {
            cJSON_DetachItemViaPointer(identity, cred);
            r->cred = cred->valuestring;
            r->credlen = strlen(r->cred);
            fingerprint(r, r->cred, r->credlen, fp);
            add_entry(r, "identity.credential", R_CREDENTIAL, fp);
            r->hits[R_CREDENTIAL]++;
            n++;
        } else {
            cred = NULL;
        }
    }

    n += walk(r, doc, 0);

    if (cred) {
        while (st_json_get(identity, "credential_fp"))
            cJSON_DeleteItemFromObjectCaseSensitive(identity, "credential_fp");
        if (!cJSON_AddStringToObject(identity, "credential_fp", fp))
            st_fatal("out of memory building a redaction record");
        cJSON_Delete(cred);
        r->cred = NULL;
        r->credlen = 0;
    }
    if (r->entries)
        cJSON_AddItemToObject(doc, "redactions", r->entries);
    r->entries = NULL;
    r->doc = NULL;
    return n;
}

char *st_redact_bytes(struct st_redactor *r, const char *s, size_t len,
                      int *count, size_t *outlen)
{
    size_t k = redact_string(r, s, len, prefilter(r, s, len), NULL, 0, 0);
    const char *src = k ? r->out.data : s;
    size_t n = k ? r->out.len : len;
    char *res = st_malloc(n + 1);

    memcpy(res, src, n);
    res[n] = '\0';
    if (count)
        *count = (int)k;
    if (outlen)
        *outlen = n;
    return res;
}

char *st_redact_text(struct st_redactor *r, const char *s, size_t len,
                     int *count)
{
    return st_redact_bytes(r, s, len, count, NULL);
}

const char *st_redact_match(const struct st_redactor *r, size_t i,
                            const char **fingerprint)
{
    if (i >= r->nm)
        return NULL;
    *fingerprint = r->m[i].fp;
    return rule_defs[r->m[i].rule].name;
}

size_t st_redact_nrules(const struct st_redactor *r)
{
    return NRULES;
}

const char *st_redact_rule_name(const struct st_redactor *r, size_t i)
{
    return i < NRULES ? rule_defs[i].name : NULL;
}

uint64_t st_redact_rule_hits(const struct st_redactor *r, size_t i)
{
    return i < NRULES ? r->hits[i] : 0;
}
