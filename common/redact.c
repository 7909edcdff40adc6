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
#include <assert.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

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
 * rules (jwt, bearer, url_userinfo, secret_assignment) last. */
enum {
    R_CANARY,
    R_CREDENTIAL,
    R_MARKER,
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
    R_VAULT_TOKEN,
    R_NPM_TOKEN,
    R_PYPI_TOKEN,
    R_HUGGINGFACE_TOKEN,
    R_DOCKER_HUB_TOKEN,
    R_AZURE_STORAGE_KEY,
    R_AZURE_SAS,
    R_GCP_SERVICE_ACCOUNT,
    R_DATABRICKS_TOKEN,
    R_TWILIO_KEY,
    R_SENDGRID_KEY,
    R_JWT,
    R_BEARER,
    R_URL_USERINFO,
    R_SECRET_ASSIGNMENT,
    /* lineage: a credential a broker issued, whatever its shape (last: a
     * rule that matches the same span, or inside it, names it) */
    R_ISSUED,
    NRULES
};

#define MAX_KEYWORDS 12

struct st_redactor;

struct rule_def {
    const char *name;
    /* PCRE2 pattern, or NULL for a literal rule or one with a scanner. When
     * the pattern has a capture group, only group 1 is redacted (the
     * credential after "Bearer", the password of a URL); otherwise the whole
     * match is. */
    const char *pattern;
    /* A hand-written matcher instead of a pattern, where a regex cannot be
     * both right and linear in its input (s is not NUL-terminated). */
    void (*scan)(struct st_redactor *r, unsigned rule, const char *s,
                 size_t len);
    /* Checks a pattern's match (group g0..g1 of subj[0..slen)) before it is
     * kept: entropy, placeholders, context. NULL keeps every match. */
    int (*check)(const char *subj, size_t slen, size_t g0, size_t g1);
    /* Literals of which at least one occurs in every match (prefilter). */
    const char *keywords[MAX_KEYWORDS];
    /* Literals that select the rule when the string starts with them. */
    const char *starts[2];
    int icase; /* keywords compared ignoring ASCII case */
    /* each keyword stands for itself followed by one lowercase hex digit
     * (so 2-byte prefixes such as "SK" keep the prefilter's 3-byte step) */
    int kw_hex;
    /* Also tried on "<member name>=<value>", for secrets that are recognised
     * by the name they are stored under: {"AWS_SECRET_ACCESS_KEY": "..."}. */
    int keyed;
};

static void scan_private_key(struct st_redactor *r, unsigned rule,
                             const char *s, size_t len);
static void scan_forged_marker(struct st_redactor *r, unsigned rule,
                               const char *s, size_t len);
static int check_assignment(const char *subj, size_t slen, size_t g0,
                            size_t g1);
static int check_sas(const char *subj, size_t slen, size_t g0, size_t g1);

/* What may separate a member name from its value: "k=v", "k: v",
 * "\"k\": \"v\"", "k => 'v'", with JSON's escaped quotes in a raw line. */
#define SEP "[\\\\\"'\\s]{0,4}(?:=>|:=|[:=])[\\\\\"'\\s]{0,4}"

/* clang-format off */
static const struct rule_def rule_defs[NRULES] = {
    [R_CANARY] = {.name = "canary"},
    [R_CREDENTIAL] = {.name = "credential"},
    /* "[REDACTED:" arriving in input that is not exactly a marker of ours
     * (a rule name we have, a fingerprint of our length): replaced whole, so
     * a rule text holding escapes or a secret does not pass as a marker. */
    [R_MARKER] = {
        .name = "forged_marker",
        .scan = scan_forged_marker,
        .keywords = {ST_REDACT_MARKER_OPEN}},
    /* A whole PEM block, with real or literal "\n" line breaks. When the END
     * line is missing (a line cut short) the base64 body is taken to the end
     * of the run, so a truncated key does not leak either. A scanner: the
     * regex for this was quadratic on repeated BEGIN lines. */
    [R_PRIVATE_KEY] = {
        .name = "private_key",
        .scan = scan_private_key,
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
    /* Vault: service (hvs.), batch (hvb.) and recovery (hvr.) tokens, and
     * the legacy s./b. + 24 base62 chars (mixed case: "s.getPropertyName..."
     * style identifiers are rarely exactly 24 chars, never after a word). */
    [R_VAULT_TOKEN] = {
        .name = "vault_token",
        .pattern = "(?<![A-Za-z0-9_.-])(?:hv[sbr]\\.[A-Za-z0-9_-]{24,}"
                   "|[sb]\\.(?=[a-z0-9]{0,23}[A-Z])(?=[A-Z0-9]{0,23}[a-z])"
                   "[A-Za-z0-9]{24}(?![A-Za-z0-9_-]))",
        .keywords = {"hvs.", "hvb.", "hvr.", ": s.", "\"s.", "'s.", "=s.",
                     ":s.", ": b.", "\"b.", "=b.", ":b."},
        .starts = {"s.", "b."}},
    [R_NPM_TOKEN] = {
        .name = "npm_token",
        .pattern = "(?<![A-Za-z0-9_])npm_[A-Za-z0-9]{36}(?![A-Za-z0-9])",
        .keywords = {"npm_"}},
    /* PyPI API tokens are macaroons whose base64 starts with the encoded
     * location "pypi.org" */
    [R_PYPI_TOKEN] = {
        .name = "pypi_token",
        .pattern = "pypi-AgEIcHlwaS5vcmc[A-Za-z0-9_-]{50,}",
        .keywords = {"pypi-AgEIcHlwaS5vcmc"}},
    [R_HUGGINGFACE_TOKEN] = {
        .name = "huggingface_token",
        .pattern = "(?<![A-Za-z0-9_])(?:hf|api_org)_(?=[a-z]{0,33}[A-Z])"
                   "(?=[A-Z]{0,33}[a-z])[A-Za-z]{34}(?![A-Za-z0-9])",
        .keywords = {"hf_", "api_org_"}},
    [R_DOCKER_HUB_TOKEN] = {
        .name = "docker_hub_token",
        .pattern = "(?<![A-Za-z0-9_])dckr_(?:pat|oat)_[A-Za-z0-9_-]{20,}",
        .keywords = {"dckr_pat_", "dckr_oat_"}},
    /* 64 bytes of key, base64: 86 chars and "==" */
    [R_AZURE_STORAGE_KEY] = {
        .name = "azure_storage_key",
        .pattern = "(?i:AccountKey)[\\\\\"'\\s]{0,4}[:=][\\\\\"'\\s]{0,4}"
                   "([A-Za-z0-9+/]{86}==)",
        .keywords = {"accountkey"}, .icase = 1},
    /* a shared access signature: sig= an HMAC-SHA256 in base64 (43 chars
     * and '='), in a query that also has the expiry se= (check_sas) */
    [R_AZURE_SAS] = {
        .name = "azure_sas",
        .pattern = "(?<![A-Za-z0-9_])sig=([A-Za-z0-9+/]{43}=?)"
                   "(?![A-Za-z0-9+/=])",
        .check = check_sas,
        .keywords = {"sig="}},
    /* a GCP service-account key file: its private_key_id (the key itself is
     * a PEM block, rule private_key) */
    [R_GCP_SERVICE_ACCOUNT] = {
        .name = "gcp_service_account",
        .pattern = "private_key_id" SEP "([0-9a-f]{40})(?![A-Za-z0-9])",
        .keywords = {"private_key_id"}, .keyed = 1},
    [R_DATABRICKS_TOKEN] = {
        .name = "databricks_token",
        .pattern = "(?<![A-Za-z0-9_])dapi[0-9a-f]{32}(?:-[0-9])?"
                   "(?![A-Za-z0-9])",
        .keywords = {"dapi"}},
    /* API key SID (SK) and account SID (AC): 32 lowercase hex */
    [R_TWILIO_KEY] = {
        .name = "twilio_key",
        .pattern = "(?<![A-Za-z0-9])(?:SK|AC)[0-9a-f]{32}(?![A-Za-z0-9])",
        .keywords = {"SK", "AC"}, .kw_hex = 1},
    [R_SENDGRID_KEY] = {
        .name = "sendgrid_key",
        .pattern = "(?<![A-Za-z0-9_-])SG\\.[A-Za-z0-9_-]{22}"
                   "\\.[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])",
        .keywords = {"SG."}},
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
    /* scheme://user:password@host (postgres, mysql, mongodb+srv, redis,
     * amqp, ...): only the password. The password may hold '@' (taken up to
     * the last one before the host) but not start a marker. Lengths are
     * bounded so a long run of letters stays linear. */
    [R_URL_USERINFO] = {
        .name = "url_userinfo",
        .pattern = "(?<![A-Za-z0-9])[A-Za-z][A-Za-z0-9+.-]{0,31}://"
                   "[^\\s/?#@:\\[\\]\"'<>]{0,256}:"
                   "(?!\\[REDACTED:)([^\\s/?#\"'<>]{1,256})@",
        .keywords = {"://"}},
    /* NAME_SECRET / _TOKEN / _KEY / _PASSWORD = value, as env, JSON or YAML
     * (and a member of that name in an event): the value when it looks
     * random (check_assignment: Shannon entropy, character classes, no
     * placeholder). Names such as public_key or sort_key are not secrets. */
    [R_SECRET_ASSIGNMENT] = {
        .name = "secret_assignment",
        .pattern = "(?i:secret|token|passw(?:or)?d|pwd|(?<=[_.-])key"
                   "|(?<=[a-z0-9])(?-i:Key))(?![A-Za-z0-9_.-])"
                   "(?<!(?i)public[_.-]key|primary[_.-]key|sort[_.-]key"
                   "|cache[_.-]key|partition[_.-]key|foreign[_.-]key"
                   "|idempotency[_.-]key|dedup[_.-]key|routing[_.-]key"
                   "|message[_.-]key|object[_.-]key|row[_.-]key)"
                   SEP
                   "((?![$%]\\{|\\$\\(|\\{\\{)"
                   "[^\\x00-\\x20\\x7f\"'\\\\`,;&<>\\[\\]{}|]{8,}+)",
        .check = check_assignment,
        .keywords = {"secret", "token", "password", "passwd", "pwd", "key"},
        .icase = 1, .keyed = 1},
    /* found by the lineage hook (collect), not by a pattern */
    [R_ISSUED] = {.name = "issued"},
};
/* clang-format on */

/* A set of rules is a uint64_t, rule i being BIT(i): every mask of rules
 * (prefilter's result, r->keyed, kmask) is one, and no other flag shares
 * its bits, so all 64 are rules'. */
#define BIT(i) ((uint64_t)1 << (i))
_Static_assert(NRULES <= 64, "a rule mask (uint64_t) holds 64 rules at most");

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

/* A decoded form of a string: its bytes, and for each byte the offset in the
 * string of the encoded unit it came from (map[len] = the string's length). */
struct view {
    struct st_buf text;
    size_t *map;
    size_t cap;
};

struct st_redactor {
    struct rule rules[NRULES];
    uint64_t hits[NRULES];

    struct literal *canaries;
    size_t ncanaries;

    struct keyword *kws; /* grouped by first byte */
    size_t nkws;
    uint32_t bucket_start[256], bucket_len[256];
    /* pairs[PAIR(a, b)]: bit 0 when some keyword starts with bytes a, b,
     * bit 1 when some keyword's bytes 1 and 2 are a, b. Every keyword being
     * at least 3 bytes (step 2), looking at every other pair finds every
     * start: most of a string is dismissed by one lookup per two bytes */
    uint8_t pairs[65536];
    /* a bit per hash of the first three bytes of each keyword (TRI, both
     * cases when icase): with step 2 every keyword has three, and a place
     * whose three bytes' bit is clear starts none. Most places a pair
     * points at (English pairs such as "ke", "to", "ea") stop here. */
    uint8_t tri[65536 / 8];
    unsigned step; /* 2, or 1 when a keyword is shorter than 3 bytes */
    uint64_t keyed; /* rules with rule_def.keyed */
    struct keyword starts[4]; /* rule_def.starts */
    size_t nstarts;
    char **kwstore; /* keywords made at set-up (kw_hex) */
    size_t nkwstore;
    int off[NRULES]; /* fault.redact_rule_off */
    /* No form of a string shorter than this holds a match of any rule, a
     * canary, the credential or an issued credential (set_min_len) */
    size_t min_len;

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
    /* decoded forms: views[0] of the string, views[1] of a base64 blob in
     * it; tmp is the first decoding step of either */
    struct view views[2], tmp;
    struct st_buf blob; /* a base64 blob, decoded */
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
    struct vcache *vc; /* st_redact_value's short values that hold nothing */
    cJSON *doc;     /* the event being redacted */
    cJSON *entries; /* its new "redactions" array, made at the first entry */
};

/* Values shorter than VCACHE_LEN in which st_redact_value found nothing,
 * when it was not run under a keyed name nor with a credential to remove:
 * the answer then depends only on the bytes, on the redactor's rules,
 * canaries, key and switched-off rules, fixed for its life, and on the
 * issued credentials. A value shorter than ST_CREDSET_MIN_LEN cannot hold
 * one in any form (decoding only shortens); a longer one is looked up and
 * remembered only while no credential is issued (issued_on false: the
 * answer is that of an empty set, whenever it was remembered). Most events
 * repeat the same values (a schema, a type, a host, a path). Two slots per
 * hash, as onepass.c's key cache. */
#define VCACHE_LEN 64
#define VCACHE_SLOTS 1024
_Static_assert(ST_CREDSET_MIN_LEN >= 16, "vcache_equal's sixteen-byte loads");
struct vcache {
    size_t len; /* 0: empty */
    char s[VCACHE_LEN];
};

/* Byte classes for the passes over every string (init_classes): base64
 * value + 1 (0 when not a base64 char, standard or URL-safe), and flags. */
enum { C_B64 = 0x7F, C_HEX = 0x80, C_TRIGGER = 0x100 };
static uint16_t cls[256];
static void init_classes(void);
/* prefilter's pair bits beyond the keywords' 1 and 2: either byte starts a
 * decoding; both are base64 chars; either is not lowercase hex; a rule's
 * starts[] begins with these two bytes. */
enum { P_TRIGGER = 4, P_B64 = 8, P_NONHEX = 16, P_START = 32 };
/* The index in pairs[] of bytes a, b (in that order): b in the high byte,
 * so that the pair at p is one 16-bit little-endian load, p[0] | p[1] << 8,
 * which compilers emit as such on x86. */
#define PAIR(a, b) ((unsigned)(a) | (unsigned)(b) << 8)

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

#define TRI(a, b, c) \
    ((((unsigned)(a) << 8 | (unsigned)(b)) ^ (unsigned)(c) * 0x9E5u) & 0xFFFFu)

/* Lays the keywords out by first byte so the prefilter looks at one bucket
 * per byte of input. */
static void build_prefilter(struct st_redactor *r)
{
    struct keyword *all = NULL;
    size_t nall = 0, capall = 0;

    for (unsigned i = 0; i < NRULES; i++) {
        const struct rule_def *d = &rule_defs[i];
        for (size_t k = 0; k < MAX_KEYWORDS && d->keywords[k]; k++) {
            size_t len = strlen(d->keywords[k]);
            if (!d->kw_hex) {
                add_keyword(&all, &nall, &capall, d->keywords[k], len,
                            d->icase, i);
                continue;
            }
            for (const char *h = "0123456789abcdef"; *h; h++) {
                char *w = st_malloc(len + 2);
                memcpy(w, d->keywords[k], len);
                w[len] = *h;
                w[len + 1] = '\0';
                r->kwstore = st_realloc(r->kwstore,
                                        (r->nkwstore + 1) * sizeof(char *));
                r->kwstore[r->nkwstore++] = w;
                add_keyword(&all, &nall, &capall, w, len + 1, d->icase, i);
            }
        }
        for (size_t k = 0; k < 2 && d->starts[k]; k++) {
            assert(r->nstarts < sizeof(r->starts) / sizeof(r->starts[0]));
            assert(strlen(d->starts[k]) == 2);
            r->pairs[PAIR((unsigned char)d->starts[k][0],
                          (unsigned char)d->starts[k][1])] |= P_START;
            r->starts[r->nstarts++] = (struct keyword){
                d->starts[k], strlen(d->starts[k]), 0, i};
        }
    }
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
    for (unsigned a = 0; a < 256; a++)
        for (unsigned b = 0; b < 256; b++) {
            uint8_t *t = &r->pairs[PAIR(a, b)];
            if ((cls[a] | cls[b]) & C_TRIGGER)
                *t |= P_TRIGGER;
            if ((cls[a] & C_B64) && (cls[b] & C_B64))
                *t |= P_B64;
            if (!(cls[a] & C_HEX) || !(cls[b] & C_HEX))
                *t |= P_NONHEX;
        }
    for (size_t k = 0; k < r->nkws && r->step == 2; k++) {
        const unsigned char *w = (const unsigned char *)r->kws[k].s;
        for (unsigned v = 0; v < 8; v++) {
            unsigned char c[3];
            for (int j = 0; j < 3; j++)
                c[j] = !r->kws[k].icase ? w[j]
                       : v >> j & 1     ? ascii_upper(w[j])
                                        : ascii_lower(w[j]);
            unsigned h = TRI(c[0], c[1], c[2]);
            r->tri[h >> 3] |= (uint8_t)(1u << (h & 7));
        }
    }
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
                    r->pairs[PAIR(a[i], b[j])] |= (uint8_t)(1u << at);
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

/* r->min_len: the shortest string any matcher can find something in. A
 * pattern's is PCRE2's own lower bound on the subject a match needs
 * (PCRE2_INFO_MINLENGTH, which pcre2_match uses to give up at once); a
 * scanner runs only when one of its keywords is in the string; canaries,
 * the credential and issued credentials have their own minimum lengths.
 * Decoded forms and base64 content are shorter than the string, never
 * longer. A keyed rule, run over "<name>=<value>", is not bounded by the
 * value's length: redact_string does not take this shortcut for it. */
static void set_min_len(struct st_redactor *r)
{
    size_t min = ST_REDACT_CANARY_MIN; /* canaries and the credential */

    if (r->issued && ST_CREDSET_MIN_LEN < min)
        min = ST_CREDSET_MIN_LEN;
    for (unsigned i = 0; i < NRULES; i++) {
        const struct rule_def *d = &rule_defs[i];
        size_t m = 0;
        if (r->rules[i].code) {
            uint32_t ml = 0;
            if (pcre2_pattern_info(r->rules[i].code, PCRE2_INFO_MINLENGTH, &ml))
                ml = 0;
            m = ml;
        } else if (d->scan) {
            m = SIZE_MAX;
            for (size_t k = 0; k < MAX_KEYWORDS && d->keywords[k]; k++)
                if (strlen(d->keywords[k]) < m)
                    m = strlen(d->keywords[k]);
            if (m == SIZE_MAX)
                m = 0;
        } else {
            continue; /* canary, credential, issued: above */
        }
        if (m < min)
            min = m;
    }
    r->min_len = min;
}

/* Whether nothing can be found in s of len bytes stored under name, whose
 * keywords are kmask: shorter than any match, and no keyed rule to run
 * over "<name>=<value>". */
static int too_short(const struct st_redactor *r, size_t len, const char *name,
                     uint64_t kmask)
{
    return len < r->min_len && !(name && (kmask & r->keyed));
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

    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, init_classes);
    r = st_calloc(1, sizeof(*r));
    r->vc = st_calloc(VCACHE_SLOTS, sizeof(*r->vc));
    r->fp_len = conf->fp_hex_len ? conf->fp_hex_len : ST_REDACT_FP_DEFAULT;
    r->issued = conf->issued;
    st_buf_init(&r->out);
    st_buf_init(&r->scratch);
    st_buf_init(&r->path);
    for (int i = 0; i < 2; i++)
        st_buf_init(&r->views[i].text);
    st_buf_init(&r->tmp.text);
    st_buf_init(&r->blob);
    r->ncanaries = conf->ncanaries;
    r->canaries = st_calloc(r->ncanaries, sizeof(*r->canaries));
    for (size_t i = 0; i < r->ncanaries; i++) {
        r->canaries[i].s = st_strdup(conf->canaries[i]);
        r->canaries[i].len = strlen(r->canaries[i].s);
    }
    if (compile_rules(r, errstr, errsz) < 0 ||
        setup_hmac(r, conf->key, conf->keylen, errstr, errsz) < 0)
        goto err;
    set_min_len(r);
    if (conf->fault_rule_off && *conf->fault_rule_off) {
        unsigned i = 0;
        while (i < NRULES &&
               !((rule_defs[i].pattern || rule_defs[i].scan) &&
                 !strcmp(rule_defs[i].name, conf->fault_rule_off)))
            i++;
        if (i == NRULES) {
            snprintf(errstr, errsz, "no redaction rule is named \"%.64s\"",
                     conf->fault_rule_off);
            goto err;
        }
        r->off[i] = 1;
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
    for (size_t i = 0; i < r->nkwstore; i++)
        free(r->kwstore[i]);
    free(r->kwstore);
    pcre2_match_data_free(r->md);
    pcre2_match_context_free(r->mctx);
    pcre2_jit_stack_free(r->jstack);
    EVP_MAC_CTX_free(r->hmac);
    EVP_MAC_free(r->mac);
    free(r->m);
    free(r->frames);
    free(r->vc);
    st_buf_fini(&r->out);
    st_buf_fini(&r->scratch);
    st_buf_fini(&r->path);
    for (int i = 0; i < 2; i++) {
        st_buf_fini(&r->views[i].text);
        free(r->views[i].map);
    }
    st_buf_fini(&r->tmp.text);
    free(r->tmp.map);
    st_buf_fini(&r->blob);
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

/* Whether some keyword (of rule or canary) starts at p[i]: sets its rule's
 * bit in *mask. */
static void keyword_at(const struct st_redactor *r, const unsigned char *p, size_t len,
                       size_t i, uint64_t *mask)
{
    if (r->step == 2) {
        if (len - i < 3)
            return;
        unsigned h = TRI(p[i], p[i + 1], p[i + 2]);
        if (!(r->tri[h >> 3] >> (h & 7) & 1))
            return;
    }
    uint32_t n = r->bucket_len[p[i]];
    const struct keyword *k = r->kws + r->bucket_start[p[i]];
    for (uint32_t j = 0; j < n; j++) {
        const unsigned char *w = (const unsigned char *)k[j].s;
        size_t x = 1;
        if ((*mask & BIT(k[j].rule)) || k[j].len > len - i)
            continue;
        /* inline: most candidates differ in their second or third byte */
        if (k[j].icase)
            while (x < k[j].len && ascii_lower(p[i + x]) == ascii_lower(w[x]))
                x++;
        else
            while (x < k[j].len && p[i + x] == w[x])
                x++;
        if (x == k[j].len)
            *mask |= BIT(k[j].rule);
    }
}

/* Whether s[0..len) may have another form to scan (prefilter's *forms):
 * a byte that starts a decoding, or a run of base64 chars that may be
 * ST_REDACT_B64_MIN long and is not lowercase hex only. Pairs of bytes are
 * looked at every r->step bytes, from the state (run, nonhex) of the pairs
 * before s: run bytes of base64 pairs, nonhex their P_NONHEX. This is the
 * reference; forms_sse2 gives the same answer sixteen bytes at a time. */
static int forms_pairs(const struct st_redactor *r, const unsigned char *p,
                       size_t len, size_t run, unsigned nonhex)
{
    for (size_t i = 0; i + 1 < len; i += r->step) {
        unsigned t = r->pairs[PAIR(p[i], p[i + 1])];
        if (t & P_TRIGGER)
            return 1;
        /* a run of lowercase hex only is not worth decoding */
        run = t & P_B64 ? run + r->step : 0;
        nonhex = t & P_B64 ? nonhex | t : 0;
        if (run + 2 >= ST_REDACT_B64_MIN && (nonhex & P_NONHEX))
            return 1;
    }
    return len % 2 && (cls[p[len - 1]] & C_TRIGGER);
}

#ifdef __SSE2__
/* A run of base64 pairs inside one 16-byte block (between two pairs that
 * are not base64) is 6 pairs at most: too short to count on its own. */
_Static_assert(6 * 2 + 2 < ST_REDACT_B64_MIN,
               "forms_runs skips the runs inside a block");

/* forms_pairs's runs with r->step == 2 for a string with no byte that
 * starts a decoding, sixteen bytes (eight pairs) at a time: cls's classes
 * (init_classes) as SSE2 compares, the pairs' bits made from them, and
 * only the runs that touch a block's edges followed (one inside a block is
 * too short). The last bytes are copied into a block of zeros, which are
 * not base64: the pair of an odd last byte ends a run, as in forms_pairs,
 * which never looks at that byte's pair. */
static int forms_runs(const unsigned char *p, size_t len)
{
    const __m128i d0 = _mm_set1_epi8((char)('0' + 128)),
                  d1 = _mm_set1_epi8((char)(10 - 128)),
                  lo0 = _mm_set1_epi8((char)('a' + 128)),
                  lo1 = _mm_set1_epi8((char)(26 - 128)),
                  hx1 = _mm_set1_epi8((char)(6 - 128)),
                  up0 = _mm_set1_epi8((char)('A' + 128)),
                  plus = _mm_set1_epi8('+'), slash = _mm_set1_epi8('/'),
                  dash = _mm_set1_epi8('-'), under = _mm_set1_epi8('_');
    unsigned char last[16];
    size_t run = 0;
    unsigned nh = 0;

    for (size_t i = 0; i < len; i += 16) {
        __m128i v;
        if (len - i >= 16) {
            v = _mm_loadu_si128((const __m128i *)(const void *)(p + i));
        } else {
            memset(last, 0, sizeof(last));
            memcpy(last, p + i, len - i);
            v = _mm_loadu_si128((const __m128i *)(const void *)last);
        }
        __m128i digit = _mm_cmplt_epi8(_mm_sub_epi8(v, d0), d1);
        __m128i lower = _mm_sub_epi8(v, lo0);
        __m128i hex = _mm_or_si128(digit, _mm_cmplt_epi8(lower, hx1));
        __m128i b64 = _mm_or_si128(
            _mm_or_si128(digit, _mm_or_si128(_mm_cmplt_epi8(_mm_sub_epi8(v, up0), lo1),
                                             _mm_cmplt_epi8(lower, lo1))),
            _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, plus), _mm_cmpeq_epi8(v, slash)),
                         _mm_or_si128(_mm_cmpeq_epi8(v, dash), _mm_cmpeq_epi8(v, under))));
        unsigned bm = (unsigned)_mm_movemask_epi8(b64);
        unsigned hm = (unsigned)_mm_movemask_epi8(hex);
        /* bit 2j: pair j (bytes 2j, 2j+1) is base64 (P_B64), or has a
         * byte that is not lowercase hex (P_NONHEX) */
        unsigned pb = bm & bm >> 1 & 0x5555u;
        unsigned pn = (~hm | ~hm >> 1) & 0x5555u;
        unsigned gap = ~pb & 0x5555u; /* pairs that end a run */
        if (!gap) {
            run += 16;
            nh |= pn;
            if (run + 2 >= ST_REDACT_B64_MIN && nh)
                return 1;
            continue;
        }
        /* the pairs before the first gap go on with the run so far */
        unsigned first = (unsigned)__builtin_ctz(gap);
        run += first;
        nh |= pn & ((1u << first) - 1);
        if (run + 2 >= ST_REDACT_B64_MIN && nh)
            return 1;
        /* those after the last gap start the run the next block goes on */
        unsigned lastgap = 31u - (unsigned)__builtin_clz(gap);
        run = 14 - lastgap;
        nh = pn >> (lastgap + 2);
    }
    return 0;
}
#endif

/* The set of rules (bits) whose keywords occur in s[0..len); *forms (when
 * forms is not NULL) is set to whether s may have another form to scan: a
 * byte that starts a decoding, or a run of base64 chars that may be
 * ST_REDACT_B64_MIN long (scan_forms looks closer). The pass over the
 * keywords' pairs also sees whether a pair holds a byte that starts a
 * decoding, or is base64; the runs are looked for (forms_runs) only in a
 * string long enough to hold one, with a base64 pair, and no such byte. */
static uint64_t prefilter(const struct st_redactor *r, const char *s,
                          size_t len, int *forms)
{
    const unsigned char *p = (const unsigned char *)s;
    uint64_t mask = 0;
    unsigned any = 0;

    /* every start is 2 bytes (asserted in build_prefilter) */
    if (len >= 2 && (r->pairs[PAIR(p[0], p[1])] & P_START))
        for (size_t k = 0; k < r->nstarts; k++)
            if (p[0] == (unsigned char)r->starts[k].s[0] &&
                p[1] == (unsigned char)r->starts[k].s[1])
                mask |= BIT(r->starts[k].rule);
    /* a keyword of 3 or more bytes starting at an even offset shows its
     * first pair at an even offset, one starting at an odd offset its
     * second pair */
    if (r->step == 2) {
        size_t i = 0;
        /* two pairs at a time, one load: most pairs start no keyword */
        for (; i + 3 < len; i += 4) {
            uint32_t w;
            memcpy(&w, p + i, 4);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
            w = __builtin_bswap32(w);
#endif
            unsigned t0 = r->pairs[w & 0xFFFF], t1 = r->pairs[w >> 16];
            any |= t0 | t1;
            if (!((t0 | t1) & 3))
                continue;
            if ((t0 & 2) && i > 0)
                keyword_at(r, p, len, i - 1, &mask);
            if (t0 & 1)
                keyword_at(r, p, len, i, &mask);
            if (t1 & 2)
                keyword_at(r, p, len, i + 1, &mask);
            if (t1 & 1)
                keyword_at(r, p, len, i + 2, &mask);
        }
        if (i + 1 < len) {
            unsigned t = r->pairs[PAIR(p[i], p[i + 1])];
            any |= t;
            if ((t & 2) && i > 0)
                keyword_at(r, p, len, i - 1, &mask);
            if (t & 1)
                keyword_at(r, p, len, i, &mask);
        }
    } else {
        for (size_t i = 0; i + 1 < len; i++) {
            unsigned t = r->pairs[PAIR(p[i], p[i + 1])];
            any |= t;
            if (t & 1)
                keyword_at(r, p, len, i, &mask);
        }
    }
    if (!forms)
        return mask;
    if ((any & P_TRIGGER) || (len % 2 && (cls[p[len - 1]] & C_TRIGGER)))
        *forms = 1;
    else if (!(any & P_B64) || len + 2 < ST_REDACT_B64_MIN)
        *forms = 0; /* no run long enough */
    else
#ifdef __SSE2__
        *forms = r->step == 2 ? forms_runs(p, len) : forms_pairs(r, p, len, 0, 0);
#else
        *forms = forms_pairs(r, p, len, 0, 0);
#endif
#ifdef ST_PREFILTER_CHECK
    if (*forms != forms_pairs(r, p, len, 0, 0))
        abort();
#endif
    return mask;
}

static struct match *push_match(struct st_redactor *r, size_t start,
                                 size_t end, unsigned rule)
{
    if (r->nm == r->capm) {
        r->capm = r->capm ? r->capm * 2 : 16;
        r->m = st_realloc(r->m, r->capm * sizeof(*r->m));
    }
    struct match *m = &r->m[r->nm++];
    m->start = start;
    m->end = end;
    m->rule = rule;
    m->fp[0] = '\0'; /* made by build() unless set here */
    return m;
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
        if (gs != PCRE2_UNSET && ge > gs && gs >= skip &&
            (!rule_defs[i].check || rule_defs[i].check(subj, slen, gs, ge)))
            push_match(r, gs - skip, ge - skip, i);
        off = ov[1] > ov[0] ? ov[1] : ov[0] + 1;
    }
}

/* ---- markers ------------------------------------------------------------- */

static int is_rule_name(const char *s, size_t n)
{
    for (unsigned i = 0; i < NRULES; i++)
        if (strlen(rule_defs[i].name) == n && memcmp(rule_defs[i].name, s, n) == 0)
            return 1;
    return 0;
}

static int lower_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

/* The length of the marker of ours that starts at s[b]: "[REDACTED:", one of
 * our rule names, ':', exactly fp_len lowercase hex chars, ']'; 0 when
 * s[b..) is anything else. *fp_at (when not NULL) is set to the offset of
 * the fingerprint from b. Only such a marker is left alone in input: any
 * other "[REDACTED:" is rule forged_marker's. */
static size_t own_marker(const struct st_redactor *r, const char *s,
                         size_t len, size_t b, size_t *fp_at)
{
    const size_t olen = sizeof(ST_REDACT_MARKER_OPEN) - 1;
    size_t n, f;

    if (len - b < olen || memcmp(s + b, ST_REDACT_MARKER_OPEN, olen) != 0)
        return 0;
    n = b + olen;
    while (n < len && n - b - olen < 32 &&
           ((s[n] >= 'a' && s[n] <= 'z') || s[n] == '_'))
        n++;
    if (n >= len || s[n] != ':' || !is_rule_name(s + b + olen, n - b - olen))
        return 0;
    f = ++n;
    while (n < len && n - f <= (size_t)r->fp_len && lower_hex(s[n]))
        n++;
    if (n - f != (size_t)r->fp_len || n >= len ||
        s[n] != ST_REDACT_MARKER_CLOSE[0])
        return 0;
    if (fp_at)
        *fp_at = f - b;
    return n + 1 - b;
}

/* Rule forged_marker: every "[REDACTED:" in s that does not start a marker
 * of ours, up to its ']' (at most 128 bytes, and not past a '[', where a
 * marker of ours may start). */
static void scan_forged_marker(struct st_redactor *r, unsigned rule,
                               const char *s, size_t len)
{
    const size_t olen = sizeof(ST_REDACT_MARKER_OPEN) - 1;
    size_t off = 0;
    const char *p;

    while (off < len &&
           (p = memmem(s + off, len - off, ST_REDACT_MARKER_OPEN, olen))) {
        size_t b = (size_t)(p - s), n = own_marker(r, s, len, b, NULL);
        if (n) {
            off = b + n;
            continue;
        }
        size_t e = b + olen;
        while (e < len && e - b < 128 && s[e] != ']' && s[e] != '[')
            e++;
        if (e < len && s[e] == ']')
            e++;
        push_match(r, b, e, rule);
        off = e;
    }
}

/* Where s[start..end) lies in a marker of ours: 0 outside one; 1 within its
 * "[REDACTED:<rule>:" (a canary may be a word that markers are made of);
 * 2 when it reaches into the fingerprint, which then is not ours but a
 * source's "[REDACTED:canary:<the canary>]": the marker [*ms, *me) is the
 * match. */
static int in_marker(const struct st_redactor *r, const char *s, size_t len,
                     size_t start, size_t end, size_t *ms, size_t *me)
{
    const size_t lim = start > 128 ? start - 128 : 0;
    size_t b = start, fp_at = 0, n;

    while (s[b] != '[') {
        if (b == lim || (s[b] == ']' && b < start))
            return 0;
        b--;
    }
    n = own_marker(r, s, len, b, &fp_at);
    if (!n || end > b + n)
        return 0;
    if (end <= b + fp_at)
        return 1;
    *ms = b;
    *me = b + n;
    return 2;
}

static void find_literal(struct st_redactor *r, unsigned rule, const char *s,
                         size_t len, const char *lit, size_t litlen)
{
    size_t off = 0, ms = 0, me = 0;
    const char *p;

    while (off < len && (p = memmem(s + off, len - off, lit, litlen))) {
        size_t start = (size_t)(p - s);
        switch (in_marker(r, s, len, start, start + litlen, &ms, &me)) {
        case 0:
            push_match(r, start, start + litlen, rule);
            break;
        case 2:
            fingerprint(r, lit, litlen, push_match(r, ms, me, rule)->fp);
            break;
        }
        off = start + litlen;
    }
}

/* ---- private keys -------------------------------------------------------- */

static int pem_space(unsigned char c)
{
    return c == ' ' || (c >= '\t' && c <= '\r');
}

static int pem_body(unsigned char c)
{
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (c >= '0' && c <= '9') || pem_space(c) || strchr("+/=:,.-", c);
}

/* The end of "<kw>[A-Z0-9 ]{0,40}PRIVATE KEY( BLOCK)?-----" at s[i..), or
 * 0 when that is not there. Bounded work. */
static size_t pem_line(const char *s, size_t len, size_t i, const char *kw,
                       size_t kwlen)
{
    static const char pk[] = "PRIVATE KEY", blk[] = " BLOCK-----";
    size_t h = i + kwlen;

    if (len - i < kwlen || memcmp(s + i, kw, kwlen) != 0)
        return 0;
    for (size_t j = h; j < len && j - h <= 40; j++) {
        if (len - j >= 11 && memcmp(s + j, pk, 11) == 0) {
            size_t e = j + 11;
            if (len - e >= 11 && memcmp(s + e, blk, 11) == 0)
                return e + 11;
            if (len - e >= 5 && memcmp(s + e, "-----", 5) == 0)
                return e + 5;
        }
        if (!((s[j] >= 'A' && s[j] <= 'Z') || (s[j] >= '0' && s[j] <= '9') ||
              s[j] == ' '))
            break;
    }
    return 0;
}

/* Rule private_key: from a BEGIN line to the first END line after it, or,
 * with no END line (a line cut short), over the run of base64, spaces and
 * literal "\n" after it. The next END line is searched once for all the
 * BEGIN lines before it, so repeated BEGIN lines cost one pass (the regex
 * this replaces searched to the end of the string from each: quadratic). */
static void scan_private_key(struct st_redactor *r, unsigned rule,
                             const char *s, size_t len)
{
    size_t pos = 0, end_from = 0, end_at = 0, end_to = 0;
    int have_end = 0, no_end = 0;
    const char *p;

    while (pos < len && (p = memmem(s + pos, len - pos, "-----BEGIN", 10))) {
        size_t b = (size_t)(p - s), h = pem_line(s, len, b, "-----BEGIN", 10);
        size_t e;

        if (!h) {
            pos = b + 1;
            continue;
        }
        if (!no_end && (!have_end || end_at < h)) {
            size_t from = end_from > h ? end_from : h;
            const char *q;
            have_end = 0;
            while (from < len &&
                   (q = memmem(s + from, len - from, "-----END", 8))) {
                size_t a = (size_t)(q - s);
                from = a + 1;
                if ((end_to = pem_line(s, len, a, "-----END", 8))) {
                    have_end = 1;
                    end_at = a;
                    break;
                }
            }
            end_from = from;
            no_end = !have_end;
        }
        if (have_end && end_at >= h) {
            e = end_to;
        } else {
            e = h;
            while (e < len) {
                if (pem_body((unsigned char)s[e]))
                    e++;
                else if (s[e] == '\\' && e + 1 < len &&
                         (s[e + 1] == 'n' || s[e + 1] == 'r'))
                    e += 2;
                else
                    break;
            }
        }
        push_match(r, b, e, rule);
        pos = e;
    }
}

/* ---- checks -------------------------------------------------------------- */

/* The bytes met are visited in increasing order, as a loop over all 256
 * would (the sum is the same to the last bit), through a bitmap of them. */
double st_redact_entropy(const char *v, size_t n)
{
    size_t counts[256];
    uint64_t met[4] = {0, 0, 0, 0};
    double h = 0;

    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)v[i];
        uint64_t bit = (uint64_t)1 << (c & 63);
        if (!(met[c >> 6] & bit)) {
            met[c >> 6] |= bit;
            counts[c] = 0;
        }
        counts[c]++;
    }
    for (int w = 0; w < 4; w++)
        for (uint64_t m = met[w]; m; m &= m - 1) {
            int c = w * 64 + __builtin_ctzll(m);
            double q = (double)counts[c] / (double)n;
            h -= q * log2(q);
        }
    return h;
}

/* Whether v[0..n) holds one of check_assignment's placeholder words,
 * ignoring ASCII case: one pass, each offset compared only with the words
 * that start with its byte. */
static int holds_placeholder(const char *v, size_t n)
{
    static const char *const words[] = {
        "changeme", "change_me", "change-me", "example", "placeholder",
        "redacted", "dummy", "your_", "your-", "xxxxx", "*****", "sample"};
    for (size_t i = 0; i < n; i++) {
        unsigned char c = ascii_lower((unsigned char)v[i]);
        switch (c) { /* every word's first byte */
        case 'c': case 'e': case 'p': case 'r': case 'd': case 'y': case 'x': case '*':
        case 's': break;
        default: continue;
        }
        for (size_t k = 0; k < sizeof(words) / sizeof(words[0]); k++) {
            const char *w = words[k];
            size_t x = 0;
            if ((unsigned char)w[0] != c)
                continue;
            while (w[x] && i + x < n && ascii_lower((unsigned char)v[i + x]) == (unsigned char)w[x])
                x++;
            if (!w[x])
                return 1;
        }
    }
    return 0;
}

/* Rule secret_assignment keeps a value that looks random: two kinds of
 * character at least (lowercase, uppercase, digit, other), Shannon entropy
 * of ST_REDACT_ENTROPY_MIN bits per char or more, and no placeholder word. */
static int check_assignment(const char *subj, size_t slen, size_t g0,
                            size_t g1)
{
    const char *v = subj + g0;
    size_t n = g1 - g0;
    int kinds[4] = {0};

    /* the name the value is assigned to: not a rule name in one of our
     * markers, nor the user of a URL (//x-access-token:<token>@host is
     * url_userinfo's) */
    size_t b = g0, lim = g0 > 256 ? g0 - 256 : 0;
    while (b > lim && strchr("\\\"' \t\r\n=:>", subj[b - 1]))
        b--;
    while (b > lim && (cls[(unsigned char)subj[b - 1]] & C_B64 ||
                       subj[b - 1] == '.') &&
           subj[b - 1] != '/' && subj[b - 1] != '+')
        b--;
    if ((b >= 10 && memcmp(subj + b - 10, ST_REDACT_MARKER_OPEN, 10) == 0) ||
        (b >= 2 && subj[b - 1] == '/' && subj[b - 2] == '/'))
        return 0;
    (void)slen;
    /* already hashed (Vault's audit log HMACs every secret it logs) */
    if ((n > 12 && memcmp(v, "hmac-sha256:", 12) == 0) ||
        (n > 7 && memcmp(v, "sha256:", 7) == 0))
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)v[i];
        kinds[c >= 'a' && c <= 'z'   ? 0
              : c >= 'A' && c <= 'Z' ? 1
              : c >= '0' && c <= '9' ? 2
                                     : 3] = 1;
    }
    if (kinds[0] + kinds[1] + kinds[2] + kinds[3] < 2 ||
        st_redact_entropy(v, n) < ST_REDACT_ENTROPY_MIN)
        return 0;
    return !holds_placeholder(v, n);
}

/* Rule azure_sas keeps a sig= whose query (within 1 kB around it) also has
 * the expiry se=. */
static int check_sas(const char *subj, size_t slen, size_t g0, size_t g1)
{
    size_t from = g0 > 1024 ? g0 - 1024 : 0, to = g1 + 1024 < slen ? g1 + 1024 : slen;
    for (size_t i = from + 1; i + 3 <= to; i++)
        if ((subj[i - 1] == '?' || subj[i - 1] == '&') &&
            memcmp(subj + i, "se=", 3) == 0)
            return 1;
    return 0;
}

/* ---- encoded forms ------------------------------------------------------- */

static int hexval(unsigned char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

static int hex4(const char *p)
{
    int v = 0;
    for (int i = 0; i < 4; i++) {
        int h = hexval((unsigned char)p[i]);
        if (h < 0)
            return -1;
        v = v << 4 | h;
    }
    return v;
}

/* Appends s[0..n) to v, byte i having come from offset from + i (step 0:
 * every byte from offset from). */
static void view_add_run(struct view *v, const char *s, size_t n, size_t from,
                         int step)
{
    if (v->text.len + n + 1 > v->cap) {
        v->cap = v->cap ? v->cap : 256;
        while (v->cap < v->text.len + n + 1)
            v->cap *= 2;
        v->map = st_realloc(v->map, v->cap * sizeof(*v->map));
    }
    for (size_t i = 0; i < n; i++)
        v->map[v->text.len + i] = from + (step ? i : 0);
    st_buf_add(&v->text, s, n);
}

static void view_add(struct view *v, unsigned char c, size_t from)
{
    char b = (char)c;
    view_add_run(v, &b, 1, from, 0);
}

/* The bytes that start a decoding: '%', '\\', and the lead bytes of the
 * zero-width characters (U+00AD, U+200B-D, U+2060, U+FEFF). */
static int decode_trigger(unsigned char c)
{
    return c == '%' || c == '\\' || c == 0xC2 || c == 0xE2 || c == 0xEF;
}

/* The length of the zero-width character at p[0..n), 0 if none. */
static size_t zero_width(const unsigned char *p, size_t n)
{
    if (n >= 2 && p[0] == 0xC2 && p[1] == 0xAD)
        return 2;
    if (n >= 3 && p[0] == 0xE2 && p[1] == 0x80 && p[2] >= 0x8B && p[2] <= 0x8D)
        return 3;
    if (n >= 3 && p[0] == 0xE2 && p[1] == 0x81 && p[2] == 0xA0)
        return 3;
    if (n >= 3 && p[0] == 0xEF && p[1] == 0xBB && p[2] == 0xBF)
        return 3;
    return 0;
}

/* Step 1 of decoding into r->tmp: percent-encoding, and JSON's \uXXXX
 * (surrogate pairs joined), \/, \\ and \". Returns whether anything was
 * decoded. */
static int decode_escapes(struct st_redactor *r, const char *s, size_t len)
{
    struct view *t = &r->tmp;
    int changed = 0;

    st_buf_reset(&t->text);
    for (size_t i = 0; i < len;) {
        unsigned char c = (unsigned char)s[i];
        if (c != '%' && c != '\\') {
            size_t j = i + 1;
            while (j < len && s[j] != '%' && s[j] != '\\')
                j++;
            view_add_run(t, s + i, j - i, i, 1);
            i = j;
            continue;
        }
        if (c == '%' && len - i >= 3 && hexval((unsigned char)s[i + 1]) >= 0 &&
            hexval((unsigned char)s[i + 2]) >= 0) {
            view_add(t, (unsigned char)(hexval((unsigned char)s[i + 1]) << 4 |
                                        hexval((unsigned char)s[i + 2])),
                     i);
            i += 3;
            changed = 1;
            continue;
        }
        if (c == '\\' && len - i >= 2 && s[i + 1] == '/') {
            view_add(t, (unsigned char)s[i + 1], i);
            i += 2;
            changed = 1;
            continue;
        }
        int cp;
        if (c == '\\' && len - i >= 6 && s[i + 1] == 'u' &&
            (cp = hex4(s + i + 2)) >= 0) {
            size_t next = i + 6;
            int lo;
            if (cp >= 0xD800 && cp <= 0xDBFF && len - i >= 12 &&
                s[i + 6] == '\\' && s[i + 7] == 'u' &&
                (lo = hex4(s + i + 8)) >= 0xDC00 && lo <= 0xDFFF) {
                cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                next = i + 12;
            }
            if (cp < 0x80) {
                view_add(t, (unsigned char)cp, i);
            } else if (cp < 0x800) {
                view_add(t, (unsigned char)(0xC0 | cp >> 6), i);
                view_add(t, (unsigned char)(0x80 | (cp & 0x3F)), i);
            } else if (cp < 0x10000) {
                view_add(t, (unsigned char)(0xE0 | cp >> 12), i);
                view_add(t, (unsigned char)(0x80 | (cp >> 6 & 0x3F)), i);
                view_add(t, (unsigned char)(0x80 | (cp & 0x3F)), i);
            } else {
                view_add(t, (unsigned char)(0xF0 | cp >> 18), i);
                view_add(t, (unsigned char)(0x80 | (cp >> 12 & 0x3F)), i);
                view_add(t, (unsigned char)(0x80 | (cp >> 6 & 0x3F)), i);
                view_add(t, (unsigned char)(0x80 | (cp & 0x3F)), i);
            }
            i = next;
            changed = 1;
            continue;
        }
        view_add(t, c, i);
        i++;
    }
    view_add(t, 0, len); /* map[len]; the NUL is not counted */
    t->text.len--;
    return changed;
}

/* Whether an encoded unit starts at p[0..n): "%XX", "\\/", "\\uXXXX" or
 * a zero-width character. */
static int decodable_at(const char *p, size_t n)
{
    if (p[0] == '%')
        return n >= 3 && hexval((unsigned char)p[1]) >= 0 &&
               hexval((unsigned char)p[2]) >= 0;
    if (p[0] == '\\')
        return n >= 2 && (p[1] == '/' || (p[1] == 'u' && n >= 6 && hex4(p + 2) >= 0));
    return zero_width((const unsigned char *)p, n) > 0;
}

/* The offset of the first byte of s[0..len) where a decoding starts
 * (decodable_at), len when none: sixteen bytes a load for the bytes that
 * may start one (decode_trigger), which most strings do not hold. */
static size_t first_decodable(const char *s, size_t len)
{
    size_t i = 0;
#ifdef __SSE2__
    const __m128i pct = _mm_set1_epi8('%'), bsl = _mm_set1_epi8('\\'),
                  c2 = _mm_set1_epi8((char)0xC2), e2 = _mm_set1_epi8((char)0xE2),
                  ef = _mm_set1_epi8((char)0xEF);
    for (; len - i >= 16; i += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
        unsigned m = (unsigned)_mm_movemask_epi8(_mm_or_si128(
            _mm_or_si128(_mm_cmpeq_epi8(v, pct), _mm_cmpeq_epi8(v, bsl)),
            _mm_or_si128(_mm_cmpeq_epi8(v, c2),
                         _mm_or_si128(_mm_cmpeq_epi8(v, e2), _mm_cmpeq_epi8(v, ef)))));
        for (; m; m &= m - 1) {
            size_t k = i + (size_t)__builtin_ctz(m);
            if (decodable_at(s + k, len - k))
                return k;
        }
    }
#endif
    for (; i < len; i++)
        if ((cls[(unsigned char)s[i]] & C_TRIGGER) && decodable_at(s + i, len - i))
            return i;
    return len;
}

/* v = the decoded view of s[0..len): escapes undone (decode_escapes), then
 * zero-width characters dropped, v->map giving each byte's offset in s.
 * Returns 0, without making v, when s has nothing to decode. */
static int decode_view(struct st_redactor *r, struct view *v, const char *s,
                       size_t len)
{
    const char *t;
    size_t n, i;

    /* most strings with a '%', '\\' or non-ASCII byte encode nothing */
    if (first_decodable(s, len) == len)
        return 0;
    decode_escapes(r, s, len);
    t = r->tmp.text.data;
    n = r->tmp.text.len;
    st_buf_reset(&v->text);
    for (i = 0; i < n;) {
        size_t z = zero_width((const unsigned char *)t + i, n - i), j;
        if (z) {
            i += z;
            continue;
        }
        for (j = i + 1; j < n && !(cls[(unsigned char)t[j]] & C_TRIGGER); j++)
            ;
        /* map through tmp's map: bytes from a plain run keep their step */
        size_t from = v->text.len;
        view_add_run(v, t + i, j - i, 0, 0);
        for (size_t k = 0; k < j - i; k++)
            v->map[from + k] = r->tmp.map[i + k];
        i = j;
    }
    view_add(v, 0, len);
    v->text.len--;
    return 1;
}

static void init_classes(void)
{
    static const char b64[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; i++)
        cls[(unsigned char)b64[i]] = (uint16_t)(i + 1);
    cls['-'] = 63;
    cls['_'] = 64;
    for (const char *h = "0123456789abcdef"; *h; h++)
        cls[(unsigned char)*h] |= C_HEX;
    for (int c = 0; c < 256; c++)
        if (decode_trigger((unsigned char)c))
            cls[c] |= C_TRIGGER;
}

static int b64val(unsigned char c)
{
    return (cls[c] & C_B64) - 1;
}

static void scan_forms(struct st_redactor *r, const char *s, size_t len,
                       uint64_t mask, const char *name, size_t namelen,
                       uint64_t kmask, int depth);

/* Sets the fingerprint of match m, found in text t (a decoded form), from
 * the bytes it matched there: one secret, one fingerprint, however it was
 * encoded. */
static void fingerprint_match(struct st_redactor *r, struct match *m,
                              const char *t)
{
    if (m->fp[0])
        return;
    if (m->rule == R_PRIVATE_KEY)
        fingerprint_key(r, t + m->start, m->end - m->start, m->fp);
    else
        fingerprint(r, t + m->start, m->end - m->start, m->fp);
}

/* Every run of ST_REDACT_B64_MIN or more base64 chars (standard or URL-safe)
 * in t[0..tlen) is decoded and scanned; when the decoded bytes hold a
 * secret the whole run is replaced, named after the first secret's rule
 * and fingerprinted as that secret. map (NULL for none) takes t's offsets
 * to the string's; len is the string's length. Runs of lowercase hex only
 * (digests, fingerprints in markers) are skipped: base64 of text always
 * has an uppercase letter. */
static void scan_base64(struct st_redactor *r, const char *t, size_t tlen,
                        const size_t *map)
{
    size_t i = 0;

    while (i < tlen) {
        if (b64val((unsigned char)t[i]) < 0) {
            i++;
            continue;
        }
        size_t b = i;
        int hexonly = 1;
        while (i < tlen && (cls[(unsigned char)t[i]] & C_B64))
            hexonly &= (cls[(unsigned char)t[i++]] & C_HEX) != 0;
        size_t e = i;
        while (i < tlen && t[i] == '=' && i - e < 2)
            i++;
        if (e - b < ST_REDACT_B64_MIN || hexonly)
            continue;
        /* a secret is text: the blob is left at its first bytes when they
         * are not (a path such as /usr/lib/x86_64-linux-gnu, binary) */
        unsigned acc = 0, bits = 0;
        int text = 1;
        st_buf_reset(&r->blob);
        for (size_t k = b; k < e && text; k++) {
            acc = acc << 6 | (unsigned)b64val((unsigned char)t[k]);
            bits += 6;
            if (bits >= 8) {
                unsigned char c = (unsigned char)(acc >> (bits - 8));
                bits -= 8;
                if (r->blob.len < 12 && !((c >= 0x20 && c < 0x7F) ||
                                          c == '\t' || c == '\n' || c == '\r'))
                    text = 0;
                st_buf_addc(&r->blob, (char)c);
            }
        }
        if (!text)
            continue;
        size_t before = r->nm, first = before;
        scan_forms(r, r->blob.data, r->blob.len,
                   prefilter(r, r->blob.data, r->blob.len, NULL), NULL, 0, 0, 1);
        if (r->nm == before)
            continue;
        for (size_t k = before + 1; k < r->nm; k++)
            if (r->m[k].start < r->m[first].start)
                first = k;
        struct match inner = r->m[first];
        fingerprint_match(r, &inner, r->blob.data);
        r->nm = before;
        struct match *m =
            push_match(r, map ? map[b] : b, map ? map[i] : i, inner.rule);
        memcpy(m->fp, inner.fp, sizeof(m->fp));
    }
}

/* ---- lineage hook (credset.c): credentials brokers issued --------------
 * Every candidate substring of a form of a string (as sent, decoded, base64
 * content: collect runs on each) whose fingerprint is that of an issued
 * credential is a match of rule "issued"; its marker carries the same
 * fingerprint as the issue's identity.credential_fp, that of the decoded
 * bytes when it was found in a decoded form. Where a rule matches inside it
 * (the password of an issued URL, a token an issued string holds), the rule
 * names that part instead (drop_issued_under_rules): what a rule finds
 * keeps its marker, and the rest is not secret by any rule. */
/* The string (one form of it) st_credset_find searches. */
struct issued_search {
    struct st_redactor *r;
    const char *s;
    size_t len;
};

static void issued_fp(void *arg, const char *v, size_t len, char *fp)
{
    fingerprint(((struct issued_search *)arg)->r, v, len, fp);
}

/* As a canary (find_literal): in a marker's fingerprint the credential
 * takes the whole marker; in its "[REDACTED:<rule>:" it is a rule name. */
static void issued_hit(void *arg, size_t off, size_t len, const char *fp)
{
    struct issued_search *q = arg;
    size_t ms = 0, me = 0;
    struct match *m;

    switch (in_marker(q->r, q->s, q->len, off, off + len, &ms, &me)) {
    case 0:
        m = push_match(q->r, off, off + len, R_ISSUED);
        break;
    case 2:
        m = push_match(q->r, ms, me, R_ISSUED);
        break;
    default:
        return;
    }
    snprintf(m->fp, sizeof(m->fp), "%s", fp); /* fingerprint() made it */
}

static int issued_on(const struct st_redactor *r)
{
    return r->issued && st_credset_count(r->issued) > 0;
}

static int match_cmp(const void *a, const void *b);

/* Drops the "issued" matches among r->m[from..nm) (all in one string's
 * offsets) that overlap a match of another rule there. Sorted by start, a
 * match overlaps one before it that ends after its start, or one after it
 * that starts before its end: one pass each way, whatever the count. */
static void drop_issued_under_rules(struct st_redactor *r, size_t from)
{
    struct match *m = r->m + from;
    size_t n = r->nm - from, kept = 0, edge = 0;

    if (n < 2)
        return;
    qsort(m, n, sizeof(*m), match_cmp);
    for (size_t i = 0; i < n; i++) { /* edge: the furthest end so far */
        if (m[i].rule != R_ISSUED && m[i].end > edge)
            edge = m[i].end;
        else if (m[i].rule == R_ISSUED && edge > m[i].start)
            m[i].rule = NRULES; /* dropped */
    }
    edge = SIZE_MAX;
    for (size_t i = n; i-- > 0;) { /* edge: the nearest start after */
        if (m[i].rule != R_ISSUED && m[i].rule != NRULES)
            edge = m[i].start;
        else if (m[i].rule == R_ISSUED && edge < m[i].end)
            m[i].rule = NRULES;
    }
    for (size_t i = 0; i < n; i++)
        if (m[i].rule != NRULES)
            m[kept++] = m[i];
    r->nm = from + kept;
}
/* ---- end of the lineage hook --------------------------------------------- */

/* Step 2: every match of the rules in mask over s[0..len); name (namelen
 * bytes) is the member name the string is stored under, or NULL, and kmask
 * the rules whose keywords it holds. */
static void collect(struct st_redactor *r, const char *s, size_t len,
                    uint64_t mask, const char *name, size_t namelen,
                    uint64_t kmask)
{
    /* no rule to run: a string searched only for decoded forms, the
     * credential or issued credentials */
    for (unsigned i = 0; i < NRULES && (mask | (kmask & r->keyed)); i++) {
        if (r->off[i])
            continue;
        if (rule_defs[i].scan) {
            if (mask & BIT(i))
                rule_defs[i].scan(r, i, s, len);
        } else if (!r->rules[i].code) {
            continue;
        } else if (rule_defs[i].keyed && name && (kmask & BIT(i))) {
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
    /* Hook: a matcher that is not a rule goes here: it sees every form of
     * the string (as sent, decoded, base64 content) and records its matches
     * with push_match, in s's offsets. */
    if (issued_on(r)) { /* lineage hook */
        struct issued_search q = {r, s, len};
        st_credset_find(r->issued, s, len, issued_fp, issued_hit, &q);
    }
}

/* Steps 1-2 over every form of s[0..len): the string as it is; its decoded
 * view, when it has percent-encoding, JSON escapes or zero-width characters;
 * and (depth 0 only) the content of the base64 blobs in it. A match in a
 * decoded form is recorded over the encoded bytes it came from, with the
 * fingerprint of its decoded bytes. */
static void scan_forms(struct st_redactor *r, const char *s, size_t len,
                       uint64_t mask, const char *name, size_t namelen,
                       uint64_t kmask, int depth)
{
    struct view *v = &r->views[depth];
    const char *t = s;
    size_t tlen = len;
    const size_t *map = NULL;
    const size_t first = r->nm;

    collect(r, s, len, mask, name, namelen, kmask);
    if (decode_view(r, v, s, len)) {
        size_t before = r->nm;
        collect(r, v->text.data, v->text.len,
                prefilter(r, v->text.data, v->text.len, NULL), name, namelen,
                kmask);
        for (size_t i = before; i < r->nm; i++) {
            struct match *m = &r->m[i];
            fingerprint_match(r, m, v->text.data);
            m->start = v->map[m->start];
            m->end = v->map[m->end];
        }
        t = v->text.data;
        tlen = v->text.len;
        map = v->map;
    }
    if (depth == 0)
        scan_base64(r, t, tlen, map);
    /* every form's matches are in s's offsets now */
    if (issued_on(r))
        drop_issued_under_rules(r, first);
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

/* Step 4: r->out = s with every kept match replaced by its marker, the one
 * form of which is ST_REDACT_MARKER_OPEN rule ':' fingerprint
 * ST_REDACT_MARKER_CLOSE. */
static void build(struct st_redactor *r, const char *s, size_t len)
{
    size_t pos = 0;

    st_buf_reset(&r->out);
    for (size_t i = 0; i < r->nm; i++) {
        struct match *m = &r->m[i];
        fingerprint_match(r, m, s);
        st_buf_add(&r->out, s + pos, m->start - pos);
        st_buf_adds(&r->out, ST_REDACT_MARKER_OPEN);
        st_buf_adds(&r->out, rule_defs[m->rule].name);
        st_buf_addc(&r->out, ':');
        st_buf_adds(&r->out, m->fp);
        st_buf_adds(&r->out, ST_REDACT_MARKER_CLOSE);
        pos = m->end;
        r->hits[m->rule]++;
    }
    st_buf_add(&r->out, s + pos, len - pos);
}

/* Redacts s[0..len) into r->out; returns the number of redactions (r->m
 * holds them), 0 when s has no secret (r->out is then not set). */
/* Whether nothing can match in a string whose prefilter gave mask and
 * forms, stored under a name whose keywords are kmask (0 without a name):
 * no rule's keyword, no other form, no keyed rule, and neither a
 * credential to remove nor issued credentials to look for. */
static inline int nothing_to_run(const struct st_redactor *r, uint64_t mask,
                                 int forms, uint64_t kmask)
{
    return !mask && !forms && !(kmask & r->keyed) &&
           !(r->cred && r->credlen >= ST_REDACT_CANARY_MIN) && !issued_on(r);
}

static size_t redact_string(struct st_redactor *r, const char *s, size_t len,
                            uint64_t mask, int forms, const char *name,
                            size_t namelen, uint64_t kmask)
{
    if (!name)
        kmask = 0;
    r->nm = 0;
    if (too_short(r, len, name, kmask) || nothing_to_run(r, mask, forms, kmask))
        return 0;
    scan_forms(r, s, len, mask, name, namelen, kmask, 0);
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

void st_redact_path_add_key(struct st_buf *path, const char *key)
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
            st_redact_path_add_key(&r->path, r->frames[i].item->string);
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
        uint64_t kmask = 0;
        int forms = 0;

        f->item = c;
        f->idx = idx;
        f->in_array = !is_obj || !c->string;
        if (!f->in_array) {
            namelen = strlen(c->string);
            kmask = prefilter(r, c->string, namelen, &forms);
            size_t k = redact_string(r, c->string, namelen, kmask, forms,
                                     NULL, 0, 0);
            if (k) {
                if (!(c->type & cJSON_StringIsConst))
                    cJSON_free(c->string);
                c->type &= ~cJSON_StringIsConst;
                c->string = cjson_strdup_buf(&r->out);
                namelen = r->out.len;
                kmask = prefilter(r, c->string, namelen, NULL);
                add_entries(r, depth); /* the path holds the new name */
                n += (int)k;
            }
            name = c->string;
        }

        if ((c->type & 0xFF) == cJSON_String && c->valuestring) {
            size_t len = strlen(c->valuestring);
            uint64_t mask = prefilter(r, c->valuestring, len, &forms);
            size_t k = redact_string(r, c->valuestring, len, mask, forms,
                                     name, namelen, kmask);
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

/* ---- one string at a time, for a reader without a tree ----------------- */

size_t st_redact_key(struct st_redactor *r, const char *key, size_t len,
                     uint64_t *kmask)
{
    int forms = 0;
    uint64_t mask = prefilter(r, key, len, &forms);
    size_t k = redact_string(r, key, len, mask, forms, NULL, 0, 0);
    /* as walk: the value is looked at under the name as redacted */
    *kmask = k ? prefilter(r, r->out.data, r->out.len, NULL) : mask;
    return k;
}

/* s[0..len) (len < VCACHE_LEN) is in c. Loads that overlap cover every
 * byte, none past s + len. */
static inline int vcache_equal(const struct vcache *c, const char *s, size_t len)
{
    if (c->len != len)
        return 0;
#ifdef __SSE2__
    if (len >= 16) {
        for (size_t i = 0;; i += 16) {
            size_t at = i + 16 <= len ? i : len - 16; /* the last overlaps */
            __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(s + at));
            __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(c->s + at));
            if (_mm_movemask_epi8(_mm_cmpeq_epi8(a, b)) != 0xFFFF)
                return 0;
            if (at + 16 >= len)
                return 1;
        }
    }
#endif
    /* (without SSE2: two eight-byte loads would leave the bytes between
     * them unread for len > 16) */
    if (len > 16)
        return memcmp(s, c->s, len) == 0;
    if (len >= 8) {
        uint64_t a, b, x, y;
        memcpy(&a, s, 8);
        memcpy(&b, s + len - 8, 8);
        memcpy(&x, c->s, 8);
        memcpy(&y, c->s + len - 8, 8);
        return a == x && b == y;
    }
    if (len >= 4) {
        uint32_t a, b, x, y;
        memcpy(&a, s, 4);
        memcpy(&b, s + len - 4, 4);
        memcpy(&x, c->s, 4);
        memcpy(&y, c->s + len - 4, 4);
        return a == x && b == y;
    }
    return memcmp(s, c->s, len) == 0;
}

/* The cache's two slots for s[0..len) (1 < len < VCACHE_LEN): a hash of
 * its first, middle and last eight bytes (four, two, for shorter ones). */
static inline struct vcache *vcache_slots(const struct st_redactor *r, const char *s,
                                          size_t len)
{
    uint64_t a, b, m = 0;
    if (len >= 8) {
        memcpy(&a, s, 8);
        memcpy(&b, s + len - 8, 8);
        if (len >= 16)
            memcpy(&m, s + len / 2 - 4, 8);
    } else if (len >= 4) {
        uint32_t x, y;
        memcpy(&x, s, 4);
        memcpy(&y, s + len - 4, 4);
        a = x, b = y;
    } else {
        a = (unsigned char)s[0], b = (unsigned char)s[len - 1];
    }
    uint64_t h = (a * 0x9E3779B97F4A7C15u) ^ (b * 0xC2B2AE3D27D4EB4Fu) ^
                 (m * 0x165667B19E3779F9u) ^ len;
    h *= 0x9E3779B97F4A7C15u;
    _Static_assert(VCACHE_SLOTS == 1024, "ten bits of the hash");
    return &r->vc[(h >> 54) & ~(uint64_t)1];
}

size_t st_redact_value(struct st_redactor *r, const char *s, size_t len,
                       const char *name, size_t namelen, uint64_t kmask,
                       const char **out, size_t *outlen)
{
    int forms = 0;
    struct vcache *c = NULL;
    if (too_short(r, len, name, kmask)) { /* most short values: no pass */
        r->nm = 0;
        return 0;
    }
    if (len >= 2 && len < VCACHE_LEN && !(name && (kmask & r->keyed)) &&
        !(r->cred && r->credlen >= ST_REDACT_CANARY_MIN) &&
        (len < ST_CREDSET_MIN_LEN || !issued_on(r))) {
        c = vcache_slots(r, s, len);
        if (vcache_equal(&c[0], s, len) || vcache_equal(&c[1], s, len)) {
            r->nm = 0;
            return 0;
        }
        c = c[0].len ? &c[1] : &c[0]; /* where it goes if it holds nothing */
    }
    uint64_t mask = prefilter(r, s, len, &forms);
    if (nothing_to_run(r, mask, forms, name ? kmask : 0)) { /* most values */
        r->nm = 0;
        if (c) {
            c->len = len;
            memcpy(c->s, s, len);
        }
        return 0;
    }
    size_t k = redact_string(r, s, len, mask, forms, name, namelen, kmask);
    if (!k && c) {
        c->len = len;
        memcpy(c->s, s, len);
    }
    if (k) {
        *out = r->out.data;
        *outlen = r->out.len;
    }
    return k;
}

unsigned st_redact_match_rule(const struct st_redactor *r, size_t i)
{
    return i < r->nm ? r->m[i].rule : NRULES;
}

void st_redact_uncount(struct st_redactor *r, unsigned rule)
{
    if (rule < NRULES && r->hits[rule])
        r->hits[rule]--;
}

char *st_redact_bytes(struct st_redactor *r, const char *s, size_t len,
                      int *count, size_t *outlen)
{
    int forms;
    uint64_t mask = prefilter(r, s, len, &forms);
    size_t k = redact_string(r, s, len, mask, forms, NULL, 0, 0);
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
