/* redact.h: secrets removed at the edge, before an event leaves the collector.
 *
 * Every string of an event (values and object keys, at any depth) is matched
 * against a fixed set of rules (docs/redaction.md lists them against
 * gitleaks' defaults): one PCRE2 pattern each or, where a regex could not be
 * both right and linear in its input, a hand-written scanner; plus configured
 * literals ("canaries") and, whatever their shape, the credentials brokers
 * issued (rule "issued": conf.issued, credset.h). Each match is replaced by
 * the marker
 *
 *     [REDACTED:<rule>:<fingerprint>]
 *
 * (ST_REDACT_MARKER_OPEN ... ST_REDACT_MARKER_CLOSE: the one definition of
 * its form) where the fingerprint is a truncated HMAC-SHA256 of the secret
 * under a key that only the pipeline holds: the same secret gets the same
 * fingerprint in every event (so an analyst can follow a token across runs
 * without seeing it), and nobody without the key can confirm a guess.
 * Markers never match a rule, so redacting twice changes nothing.
 *
 * Markers in input are not trusted: a "[REDACTED:" that is not exactly one of
 * ours (a rule name we have, a fingerprint of our length in lowercase hex) is
 * itself redacted (rule "forged_marker"), and a canary or issued credential
 * found in a marker's fingerprint takes the whole marker.
 *
 * Encoded forms are scanned too: a string with percent-encoding, JSON
 * escapes (\uXXXX, \/, \\, \") or zero-width characters (U+00AD,
 * U+200B-D, U+2060, U+FEFF) is also matched in its decoded form, and every
 * base64 run of ST_REDACT_B64_MIN chars or more is decoded and matched; a
 * secret found in a decoded form replaces the encoded bytes it came from (the
 * whole base64 run), fingerprinted as the decoded secret.
 *
 * Each rule has cheap literal keywords ("AKIA", "ghp_", "eyJ", ...) looked for
 * in one pass over the string first; a rule runs only when one of its
 * keywords is present, so most strings cost two scans and no regex. Every
 * rule is linear in its input (test_redact times them on hostile input).
 *
 * A redactor is used from one thread (it owns one PCRE2 match data and one
 * HMAC context). */
#ifndef ST_REDACT_H
#define ST_REDACT_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

struct st_credset;

#define ST_REDACT_KEY_MIN 16    /* bytes of HMAC key at least */
#define ST_REDACT_CANARY_MIN 8  /* bytes of a canary at least */
#define ST_REDACT_FP_DEFAULT 16 /* hex chars of fingerprint by default */
#define ST_REDACT_FP_MAX 64     /* all of HMAC-SHA256 */

/* The form of a marker: OPEN rule ':' fingerprint CLOSE. */
#define ST_REDACT_MARKER_OPEN "[REDACTED:"
#define ST_REDACT_MARKER_CLOSE "]"
/* base64 runs at least this long are decoded and scanned */
#define ST_REDACT_B64_MIN 20
/* bits of Shannon entropy per char a value assigned to a *_SECRET, *_TOKEN,
 * *_KEY or *_PASSWORD name needs to be redacted (rule secret_assignment) */
#define ST_REDACT_ENTROPY_MIN 3.0

struct st_redact_conf {
    const unsigned char *key; /* HMAC key, not copied: used only by _new */
    size_t keylen;            /* at least ST_REDACT_KEY_MIN */
    /* Literal values to redact wherever they occur (rule "canary"), each at
     * least ST_REDACT_CANARY_MIN bytes; copied by _new. */
    const char *const *canaries;
    size_t ncanaries;
    int fp_hex_len; /* hex chars of the fingerprint kept, 1..64; 0 means 16 */
    /* Fault injection, for the tests that prove a leak would be seen: the
     * token-shape rule of this name never matches. NULL normally. */
    const char *fault_rule_off;
    /* Credentials brokers issued (credset.h): any substring of a string, or
     * of its decoded forms, whose fingerprint is in the set is redacted as
     * rule "issued" (a rule matching the same text, or inside it, names it
     * instead). Shared by the redactors of every thread, kept (not owned):
     * it outlives the redactor; NULL for none. */
    const struct st_credset *issued;
};

struct st_redactor;

/* Compiles and JIT-compiles every rule and sets up the HMAC. Nothing in conf
 * is kept but conf->issued. Returns the redactor, or NULL with errstr saying
 * what in conf is refused (key too short, a short canary, fp_hex_len out of
 * range) or which rule failed to compile. */
struct st_redactor *st_redactor_new(const struct st_redact_conf *conf,
                                    char *errstr, size_t errsz);

/* Frees the redactor. Accepts NULL. */
void st_redactor_destroy(struct st_redactor *r);

/* Writes the fingerprint of v[0..len): the first fp_hex_len hex chars of
 * HMAC-SHA256(key, v), lowercase, NUL-terminated, cut to outsz - 1 chars.
 * Cannot fail. */
void st_redact_fingerprint(const struct st_redactor *r, const char *v,
                           size_t len, char *out, size_t outsz);

/* Redacts, in place, every string value and object key at any depth of doc.
 *
 * - A member "redactions" that doc already has comes from the sender and is
 *   removed first, whatever it holds, so a sender cannot forge entries.
 * - When doc has identity.credential as a string (a broker handing over the
 *   token it issued), the member is removed and identity.credential_fp is set
 *   to the fingerprint of its whole value (rule "credential"); any other
 *   occurrence of that value in the event is redacted with the same rule.
 * - For each match, one object {"path":"attrs.headers.Authorization",
 *   "rule":"bearer","fingerprint":"..."} is appended to a top-level array
 *   "redactions" (created when the first match is found). Paths use the
 *   redacted names; array elements are "[i]"; a name that holds '.', '[',
 *   ']', '"' or '\' or is empty is written ["name"].
 *
 * Strings are changed with cJSON's allocator. When doc is not an object the
 * values are still redacted but no "redactions" array can be added. Returns
 * the number of redactions; 0 means nothing was redacted (a forged
 * "redactions" member may still have been removed). */
int st_redact_event(struct st_redactor *r, cJSON *doc);

/* One string at a time, for a reader that redacts an event as it parses it
 * (common/onepass.c) and must do exactly what st_redact_event does to
 * the same document, walking it in document order.
 *
 * st_redact_key: the object key key[0..len) (decoded, no NUL inside, need
 * not be NUL-terminated). Returns the number of redactions of the key (0
 * mostly; when not 0 the matches are st_redact_match's and the hits are
 * counted) and sets *kmask to what st_redact_value needs for the member's
 * value.
 *
 * st_redact_value: the string s[0..len) (decoded) stored under the member
 * name[0..namelen) (already redacted; NULL for an array element) whose
 * st_redact_key gave kmask. Returns the number of redactions; when not 0,
 * *out, *outlen is the redacted string (valid until the next call on r),
 * st_redact_match gives each match and the hits are counted. Cannot fail. */
size_t st_redact_key(struct st_redactor *r, const char *key, size_t len,
                     uint64_t *kmask);
size_t st_redact_value(struct st_redactor *r, const char *s, size_t len,
                       const char *name, size_t namelen, uint64_t kmask,
                       const char **out, size_t *outlen);

/* The rule number (st_redact_rule_name) of match i of the last call. */
unsigned st_redact_match_rule(const struct st_redactor *r, size_t i);

/* Takes back one hit of rule, counted by a redaction whose result was
 * thrown away (a reader that gave up on an event and hands it to
 * st_redact_event, which counts it again). */
void st_redact_uncount(struct st_redactor *r, unsigned rule);

/* Appends the key to a redaction's path as st_redact_event writes it:
 * ".key", or ["key"] when the key is empty or holds '.', '[', ']', '"' or
 * '\'. key is NUL-terminated. */
struct st_buf;
void st_redact_path_add_key(struct st_buf *path, const char *key);

/* Redacts the raw bytes s[0..len), which need not be JSON or UTF-8 (e.g. a
 * rejected line quoted in a dead-letter record: redact it before truncating
 * it, or a cut token would no longer match). Returns a new NUL-terminated
 * string (caller frees with free) and sets *count to the number of
 * redactions. Embedded NUL bytes are copied as they are. */
char *st_redact_text(struct st_redactor *r, const char *s, size_t len,
                     int *count);

/* The same, with the length of the result in *outlen (NUL bytes kept). */
char *st_redact_bytes(struct st_redactor *r, const char *s, size_t len,
                      int *count, size_t *outlen);

/* Match i of the last st_redact_text/_bytes call: its rule's name, and its
 * fingerprint in *fingerprint (valid until the next call); NULL past the
 * last match. */
const char *st_redact_match(const struct st_redactor *r, size_t i,
                            const char **fingerprint);

/* Shannon entropy of v[0..n) in bits per byte (0 for n == 0). */
double st_redact_entropy(const char *v, size_t n);

/* Per-rule counters for metrics: rules are numbered 0..nrules-1, names are
 * static strings; hits count redactions since _new. */
size_t st_redact_nrules(const struct st_redactor *r);
const char *st_redact_rule_name(const struct st_redactor *r, size_t i);
uint64_t st_redact_rule_hits(const struct st_redactor *r, size_t i);

#endif
