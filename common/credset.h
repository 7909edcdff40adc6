/* credset.h: the fingerprints of the credentials brokers issued, and the
 * search for them in text (issued-credential lineage).
 *
 * A collector that decodes a broker's token_issue learns the fingerprint of
 * the credential it carried (identity.credential_fp: the redactor's keyed
 * HMAC); collectors share these fingerprints -- never the values -- over
 * the compacted topic ST_CREDSET_TOPIC (collector/lineage.c). The set is
 * then searched for in every string the redactor sees, whatever the
 * credential's shape: candidate substrings are fingerprinted and looked up,
 * and a hit is redacted as rule "issued" with the issue's fingerprint.
 *
 * Candidates. In a run of printable ASCII (no blank, no control, nothing
 * above 0x7E, none of " ' ` \ , ; < > ( ) [ ] { } |, which no generated
 * credential holds and which surround one in JSON, shell and prose), every
 * other non-alphanumeric byte is a boundary: a candidate
 * starts at the run's start or after a boundary, ends at the run's end or
 * before a boundary, so "token=XYZ", "Bearer XYZ", "/tmp/XYZ.txt", "hvs.XYZ"
 * and "XYZ." all yield XYZ, as does a credential holding '.', '-', '_'
 * itself. Only lengths of a credential in the set are tried (each record
 * carries the length: a fingerprint without one is not followed), and a
 * candidate must hold at least ST_CREDSET_MIN_DISTINCT distinct bytes (a
 * cheap entropy test: a generated credential does, words and paddings of
 * that length rarely). Nothing is scanned while the set is empty.
 *
 * Threading: a set is shared by every thread of a collector. Adding takes a
 * write lock; st_credset_find looks for candidates without a lock (the
 * known lengths are atomic) and takes the read lock for each candidate's
 * lookup; st_credset_count takes no lock. */
#ifndef ST_CREDSET_H
#define ST_CREDSET_H

#include <stddef.h>

/* The compacted topic of issued credentials' fingerprints: key the
 * fingerprint, value {"fp","credential_id","expires","source","len"}. A
 * contract between collectors (and any tool that reads it). */
#define ST_CREDSET_TOPIC "sandtrail.credentials"

#define ST_CREDSET_MIN_LEN 16      /* shorter credentials are not followed */
#define ST_CREDSET_MAX_LEN 1024    /* nor longer ones */
#define ST_CREDSET_MIN_DISTINCT 8  /* distinct bytes in a candidate */
#define ST_CREDSET_FP_MAX 64       /* hex chars of a fingerprint at most */

struct st_credset;

/* An empty set. Cannot fail. */
struct st_credset *st_credset_new(void);
void st_credset_destroy(struct st_credset *cs); /* accepts NULL */

/* Adds the fingerprint fp (1..ST_CREDSET_FP_MAX lowercase hex chars, not
 * kept) of a credential of credlen bytes. Returns 1 when it was new, 0 when
 * known already, -1 when fp is not lowercase hex of that size or credlen is
 * outside
 * ST_CREDSET_MIN_LEN..ST_CREDSET_MAX_LEN (nothing added). Thread-safe. */
int st_credset_add(struct st_credset *cs, const char *fp, size_t credlen);

/* 1 when fp is in the set. Thread-safe. */
int st_credset_has(const struct st_credset *cs, const char *fp);

/* Fingerprints in the set (no lock: a recent value). */
size_t st_credset_count(const struct st_credset *cs);

/* Whether s[0..len) could be followed: its length in range and at least
 * ST_CREDSET_MIN_DISTINCT distinct bytes (what a candidate must pass). */
int st_credset_followable(const char *s, size_t len);

/* Writes the fingerprint of v[0..len) to fp (NUL-terminated, at most
 * ST_CREDSET_FP_MAX chars). */
typedef void st_credset_fp_fn(void *arg, const char *v, size_t len, char *fp);
/* Called for a candidate s[off..off+len) whose fingerprint fp is in the
 * set; fp is valid during the call. */
typedef void st_credset_hit_fn(void *arg, size_t off, size_t len,
                               const char *fp);

/* Fingerprints every candidate of s[0..len) with fpf and calls hit for
 * each one in the set (overlapping hits are all reported). Returns the
 * number of candidates fingerprinted; 0 at once when the set is empty. */
size_t st_credset_find(const struct st_credset *cs, const char *s, size_t len,
                       st_credset_fp_fn *fpf, st_credset_hit_fn *hit,
                       void *arg);

#endif
