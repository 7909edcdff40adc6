/* registry.h: detector state that spans runs, in process memory with Redis
 * as its durable and shared copy (keys: detect.h):
 *   - the credential registry (scope_drift: what a broker issued, revoked);
 *   - credential fingerprints (written by scope_drift, read by token_write);
 *   - per destination, the first request of each platform's decision
 *     (scope_drift's allowlist drift).
 *
 * Unlike a run's window these are not owned by one partition: a
 * credential issued to one task may be used by another, a destination is
 * reached from every task. The rule that keeps today's cross-analyzer
 * behaviour at one round trip a batch (docs/architecture.md, "Detectors"):
 * whatever a batch references that is not in memory is read in the batch's
 * prefetch; what this process already holds is used as it is, and written
 * back by the batch's checkpoint. A destination field (decision and
 * platform) this process has not seen is claimed in the prefetch with
 * HSETNX, followed by HGETALL of the destination, so the first request of a
 * platform's decision is decided by Redis across analyzers, and the event
 * that completes a set sees every platform known by then. A fingerprint or
 * credential Redis does not hold is not remembered (read again when next
 * referenced): another partition may issue it.
 *
 * Entries idle for state.evict_s whose changes are in a checkpoint that ran
 * are dropped (st_registry_after_commit); st_registry_forget drops all.
 * Threading: the detecting thread only. */
#ifndef ST_REGISTRY_H
#define ST_REGISTRY_H

#include <stdint.h>

#include "detect.h"

/* A credential as issued; NULL strings were never set. */
struct st_registry_cred {
    int nfields; /* 0: Redis holds nothing for it */
    const char *scopes, *audience, *task, *run;
    int64_t expires, revoked, issued; /* issued: INT64_MIN when not set */
};

/* A destination's field: "allow:<platform>" or "deny:<platform>", and the
 * first request ("source\x1fevent_id") that reported it. */
struct st_registry_field {
    char *field;
    char *member;
    int visible; /* claimed by a request of this batch not yet fed: 0 */
};

struct st_registry;

struct st_registry *st_registry_new(const struct st_analyzer_conf *conf);
void st_registry_destroy(struct st_registry *r); /* accepts NULL */

/* Before a batch's prefetch. */
void st_registry_begin(struct st_registry *r, struct st_detect_ctx *ctx);

/* Prefetch: queue on ctx->redis what is not in memory. */
void st_registry_want_cred(struct st_registry *r, struct st_detect_ctx *ctx,
                           const char *cred);
void st_registry_want_fp(struct st_registry *r, struct st_detect_ctx *ctx, const char *fp);
void st_registry_want_dest(struct st_registry *r, struct st_detect_ctx *ctx,
                           const char *host, const char *field, const char *member);
/* After every event's prefetch: the destinations' HGETALL. */
void st_registry_prefetch_end(struct st_registry *r, struct st_detect_ctx *ctx);

/* Feed. A credential or fingerprint must have been wanted in this batch.
 * The strings are copied. */
const struct st_registry_cred *st_registry_cred(struct st_registry *r, const char *cred);
void st_registry_issue(struct st_registry *r, const char *cred, const char *scopes,
                       const char *audience, int64_t expires, const char *task,
                       const char *run, int64_t issued);
/* The first revoke stands. */
void st_registry_revoke(struct st_registry *r, const char *cred, int64_t at);
const char *st_registry_fp(struct st_registry *r, const char *fp); /* NULL: none */
void st_registry_fp_set(struct st_registry *r, const char *fp, const char *value);
/* The request (member) reporting field of host is fed: its field becomes
 * visible. Returns the destination's visible and invisible fields. */
size_t st_registry_dest_feed(struct st_registry *r, const char *host, const char *field,
                             const char *member, const struct st_registry_field **f);

/* Appends the write-back of what changed since the last checkpoint to
 * ctx->ckpt; ctx->ckpt NULL (a batch without a checkpoint): nothing, the
 * changes stay pending (and the entries are not evicted). */
void st_registry_end_batch(struct st_registry *r, struct st_detect_ctx *ctx);
/* Evicts idle entries (ctx->seq: the newest checkpoint that ran). */
void st_registry_after_commit(struct st_registry *r, struct st_detect_ctx *ctx);
void st_registry_forget(struct st_registry *r, struct st_detect_ctx *ctx);

#endif
