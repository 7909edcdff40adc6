/* redact.h: secrets removed at the edge, before an event leaves the collector.
 *
 * Every string of an event (values and object keys, at any depth) is matched
 * against a fixed set of rules, one PCRE2 pattern each (AWS keys, GitHub,
 * GitLab, Slack, Stripe, OpenAI and Anthropic keys, Google API keys, JWTs,
 * PEM private keys, Authorization credentials, URL passwords) plus configured
 * literals ("canaries") and, whatever their shape, the credentials brokers
 * issued (rule "issued": conf.issued, credset.h). Each match is replaced by
 * the marker
 *
 *     [REDACTED:<rule>:<fingerprint>]
 *
 * where the fingerprint is a truncated HMAC-SHA256 of the secret under a key
 * that only the pipeline holds: the same secret gets the same fingerprint in
 * every event (so an analyst can follow a token across runs without seeing
 * it), and nobody without the key can confirm a guess. Markers never match a
 * rule, so redacting twice changes nothing.
 *
 * Each rule has cheap literal keywords ("AKIA", "ghp_", "eyJ", ...) looked for
 * in one pass over the string first; a rule's regex runs only when one of its
 * keywords is present, so most strings cost one scan and no regex.
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
    const char *fault_rule_off;    /* Credentials brokers issued (credset.h): any substring whose
     * fingerprint is in the set is redacted as rule "issued". Shared by
     * the redactors of every thread, not owned; NULL for none. */
    const struct st_credset *issued;
};

struct st_redactor;

/* Compiles and JIT-compiles every rule and sets up the HMAC. Nothing in conf
 * is kept. Returns the redactor, or NULL with errstr saying what in conf is
 * refused (key too short, a short canary, fp_hex_len out of range) or which
 * rule failed to compile. */
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

/* Per-rule counters for metrics: rules are numbered 0..nrules-1, names are
 * static strings; hits count redactions since _new. */
size_t st_redact_nrules(const struct st_redactor *r);
const char *st_redact_rule_name(const struct st_redactor *r, size_t i);
uint64_t st_redact_rule_hits(const struct st_redactor *r, size_t i);

#endif
