/* scope_drift.c: credentials used beyond what was issued, and policies that
 * disagree.
 *
 * A credential registry (registry.c: in memory, Redis its checkpoint and
 * what analyzers share), written from broker events:
 *   <prefix>scope_drift:cred:<credential_id>  hash: scopes, audience,
 *        expires (µs), revoked (µs), task, run, issued (µs)
 * token_issue fills it, token_revoke marks it. Each token_use is checked
 * against it; a finding per (run, credential, kind):
 *   scope     the operation is outside the scopes issued      (high)
 *   audience  the audience differs from the one issued        (medium)
 *   expired   used after expires_at                           (high)
 *   revoked   used after token_revoke                         (high)
 *   replay    used by another run than the one it was issued to (critical)
 * A scope requested in a loop: detect.scope_drift.deny_loop_count or more
 * token_deny for one run within detect.scope_drift.deny_loop_window_s
 * (medium; windows and episodes through runwin.c).
 * Allowlist drift, visible only in aggregate: a destination allowed by
 * detect.scope_drift.allowlist_platforms or more distinct source.platform
 * values while another platform denies it (medium; task_id and run_id are
 * "*": the finding belongs to no single run). Per destination a hash in
 * Redis maps "allow:<platform>" / "deny:<platform>" to the first request
 * that reported it (claimed with HSETNX in the batch's prefetch, so a retry
 * finds its own request there again, and analyzers agree which was first).
 * The finding's evidence is those first requests: at most two per
 * platform, however many requests follow, and only a request that is one
 * of them updates the finding, so later traffic to the host neither grows
 * the evidence nor makes the sink re-aggregate it. Across partitions which
 * request came first, and so that list, may vary between runs; its size
 * and the finding itself do not.
 *
 * token_write reads the credential fingerprints this detector records:
 *   <prefix>credfp:<fingerprint> -> "credential_id\x1fissued (µs)"
 *
 * A use compares with a record only when it was issued no later than the
 * use: a batch redone after a failed commit finds the records its own
 * later events wrote, which a use before them did not see the first time. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "detect.h"
#include "log.h"
#include "registry.h"
#include "runwin.h"
#include "timeutil.h"

#define NAME "scope_drift"
/* its run windows of denials (runwin.h): their state's name */
#define DENY_WINDOW "scope_drift_deny"
#define VERSION 1

struct pending {
    struct sd_state *st;
    const struct st_event *ev;
    int late;
};

struct sd_state {
    const struct st_analyzer_conf *conf;
    struct st_findings *findings;
    struct st_runwin *denies;
    struct pending *pend;
    size_t npend, cap;
};

static void *sd_create(const struct st_analyzer_conf *conf)
{
    struct sd_state *st = st_calloc(1, sizeof(*st));
    int64_t w = conf->scope_deny_window_s * 1000000;
    st->conf = conf;
    st->denies = st_runwin_new(conf, DENY_WINDOW, w, 2 * w + conf->lateness_s * 1000000,
                               ST_RUNWIN_EPISODES, 0);
    return st;
}

static void sd_destroy(void *state)
{
    struct sd_state *st = state;
    if (!st)
        return;
    st_runwin_destroy(st->denies);
    free(st->pend);
    free(st);
}

static void sd_begin(void *state, size_t n)
{
    struct sd_state *st = state;
    st_runwin_begin(st->denies, n);
    if (st->cap < n) {
        st->pend = st_realloc(st->pend, n * sizeof(*st->pend));
        st->cap = n;
    }
}

static void sd_reset(void *state)
{
    struct sd_state *st = state;
    st_runwin_reset(st->denies);
    st->npend = 0;
}

static struct pending *pend_new(struct sd_state *st, struct st_detect_ctx *ctx,
                                const struct st_event *ev)
{
    if (st->npend == st->cap)
        st_fatal("scope_drift: fed more events than begin_batch announced");
    struct pending *p = &st->pend[st->npend++];
    p->st = st;
    p->ev = ev;
    p->late = ctx->late;
    return p;
}

static void finding(struct sd_state *st, const struct pending *p, const char *task,
                    const char *run, const char *key, enum st_severity sev,
                    const char *summary)
{
    char id[33];
    st_finding_id(id, NAME, task, run, key);
    struct st_finding *f = st_findings_update(st->findings, id, NAME, VERSION, sev, task,
                                              run, p->ev->ts_us, p->ev->ts_us, summary);
    st_finding_add_event(f, p->ev->source_name, p->ev->event_id, p->late);
}

/* A scope covers an operation when equal, or when it is "*" or ends in
 * ":*" and the operation starts with what precedes the '*'. */
static int scope_covers(const char *scope, size_t len, const char *op)
{
    if (len == 1 && scope[0] == '*')
        return 1;
    if (len >= 2 && scope[len - 1] == '*' && scope[len - 2] == ':')
        return strncmp(op, scope, len - 1) == 0;
    return strlen(op) == len && strncmp(op, scope, len) == 0;
}

static int scopes_cover(const char *scopes, const char *op)
{
    const char *s = scopes;
    while (*s) {
        size_t len = strcspn(s, " ");
        if (len && scope_covers(s, len, op))
            return 1;
        s += len;
        while (*s == ' ')
            s++;
    }
    return 0;
}

static void check_use(struct sd_state *st, const struct pending *p,
                      const struct st_registry_cred *c)
{
    const struct st_event *ev = p->ev;
    char key[400], summary[256];

    if (c->nfields == 0)
        return; /* issued before our records: nothing to compare with */
    if (c->issued > ev->ts_us)
        return; /* issued after this use: not there when it was made */
    const char *scopes = c->scopes, *aud = c->audience, *task = c->task, *run = c->run;
    int64_t expires = c->expires, revoked = c->revoked;
    const char *cred = st_json_str(ev->identity, "credential_id");
    const char *op = st_event_attr_str(ev, "operation");
    const char *use_aud = st_event_attr_str(ev, "audience");
    if (!use_aud)
        use_aud = st_json_str(ev->identity, "audience");

    if (op && scopes && *scopes && !scopes_cover(scopes, op)) {
        snprintf(key, sizeof(key), "scope:%s", cred);
        snprintf(summary, sizeof(summary),
                 "credential \"%.64s\" used for \"%.64s\" outside its scopes (%.80s)", cred,
                 op, scopes);
        finding(st, p, ev->task_id, ev->run_id, key, ST_SEV_HIGH, summary);
    }
    if (use_aud && aud && *aud && strcmp(use_aud, aud) != 0) {
        snprintf(key, sizeof(key), "audience:%s", cred);
        snprintf(summary, sizeof(summary),
                 "credential \"%.64s\" used for audience \"%.64s\", issued for \"%.64s\"",
                 cred, use_aud, aud);
        finding(st, p, ev->task_id, ev->run_id, key, ST_SEV_MEDIUM, summary);
    }
    if (expires && ev->ts_us > expires) {
        snprintf(key, sizeof(key), "expired:%s", cred);
        snprintf(summary, sizeof(summary), "credential \"%.64s\" used %" PRId64
                 " s after it expired", cred, (ev->ts_us - expires) / 1000000);
        finding(st, p, ev->task_id, ev->run_id, key, ST_SEV_HIGH, summary);
    }
    if (revoked && ev->ts_us > revoked) {
        snprintf(key, sizeof(key), "revoked:%s", cred);
        snprintf(summary, sizeof(summary), "credential \"%.64s\" used %" PRId64
                 " s after it was revoked", cred, (ev->ts_us - revoked) / 1000000);
        finding(st, p, ev->task_id, ev->run_id, key, ST_SEV_HIGH, summary);
    }
    if (task && run && (strcmp(task, ev->task_id) != 0 || strcmp(run, ev->run_id) != 0)) {
        snprintf(key, sizeof(key), "replay:%s", cred);
        snprintf(summary, sizeof(summary),
                 "credential \"%.64s\" issued to run \"%.64s\" used by this run", cred, run);
        finding(st, p, ev->task_id, ev->run_id, key, ST_SEV_CRITICAL, summary);
    }
}

static void check_destination(struct sd_state *st, const struct pending *p,
                              const struct st_registry_field *fl, size_t nf,
                              const char *self)
{
    size_t allow = 0, deny_other = 0;
    char key[300], summary[256];

    int first = 0; /* this request is the first of its decision and platform */
    for (size_t i = 0; i < nf; i++) {
        const char *f = fl[i].field, *v = fl[i].member;
        if (!fl[i].visible)
            continue; /* claimed by a request of this batch not yet fed */
        if (!strcmp(v, self))
            first = 1;
        if (!strncmp(f, "allow:", 6)) {
            allow++;
            continue;
        }
        if (strncmp(f, "deny:", 5) != 0)
            continue;
        int also_allows = 0;
        for (size_t j = 0; j < nf; j++)
            if (fl[j].visible && !strncmp(fl[j].field, "allow:", 6) &&
                !strcmp(fl[j].field + 6, f + 5))
                also_allows = 1;
        deny_other += !also_allows;
    }
    if (!first || (int64_t)allow < st->conf->scope_platforms || deny_other == 0)
        return;
    const char *host = st_event_target(p->ev);
    snprintf(key, sizeof(key), "allowlist:%.256s", host);
    snprintf(summary, sizeof(summary),
             "destination \"%.64s\" allowed by %zu platform(s) and denied by %zu other(s)",
             host, allow, deny_other);
    char id[33];
    st_finding_id(id, NAME, "*", "*", key);
    struct st_finding *f = st_findings_update(st->findings, id, NAME, VERSION,
                                              ST_SEV_MEDIUM, "*", "*", p->ev->ts_us,
                                              p->ev->ts_us, summary);
    st_finding_add_event(f, p->ev->source_name, p->ev->event_id, p->late);
    for (size_t i = 0; i < nf; i++) {
        const char *v = fl[i].member, *sep = strchr(v, '\x1f');
        if (!fl[i].visible || !sep || !strcmp(v, self))
            continue;
        char *source = st_strndup(v, (size_t)(sep - v));
        st_finding_add_event(f, source, sep + 1, 0);
        free(source);
    }
}

static int deny_window(void *arg, const struct st_runwin_view *v, size_t lo, size_t hi,
                       int64_t end_us)
{
    struct sd_state *st = arg;
    char id[33], summary[256];
    if ((int64_t)(hi - lo) < st_override_int(&st->conf->overrides, v->ev,
                                             "detect.scope_drift.deny_loop_count",
                                             st->conf->scope_deny_count))
        return 0;
    st_runwin_episode(st->denies, v, end_us, &v->m[lo], id);
    snprintf(summary, sizeof(summary),
             "%zu credential requests denied within %" PRId64 " s", hi - lo,
             st->conf->scope_deny_window_s);
    struct st_finding *f =
        st_findings_update(st->findings, id, NAME, VERSION, ST_SEV_MEDIUM, v->ev->task_id,
                           v->ev->run_id, v->m[lo].ts_us, end_us, summary);
    st_runwin_evidence(v, f, lo, hi);
    return 0;
}

static int on_denies(void *arg, const struct st_runwin_view *v)
{
    return st_runwin_each_window(v, deny_window, arg);
}

static void issue(struct sd_state *st, struct st_detect_ctx *ctx, const struct st_event *ev,
                  const char *cred)
{
    struct st_buf scopes;
    int64_t expires = 0;
    const char *exp = st_event_attr_str(ev, "expires_at");
    const char *aud = st_json_str(ev->identity, "audience");
    const char *fp = st_json_str(ev->identity, "credential_fp");
    int64_t exp_us;
    const cJSON *sc;

    (void)st;
    st_buf_init(&scopes);
    st_buf_adds(&scopes, "");
    cJSON_ArrayForEach(sc, cJSON_GetObjectItemCaseSensitive(ev->identity, "scopes"))
    {
        if (cJSON_IsString(sc)) {
            if (scopes.len)
                st_buf_addc(&scopes, ' ');
            st_buf_adds(&scopes, sc->valuestring);
        }
    }
    if (exp && st_time_parse_rfc3339(exp, strlen(exp), &exp_us) == 0)
        expires = exp_us;
    st_registry_issue(ctx->registry, cred, scopes.data, aud ? aud : "", expires,
                      ev->task_id, ev->run_id, ev->ts_us);
    if (fp) {
        struct st_buf val;
        st_buf_init(&val);
        st_buf_printf(&val, "%s\x1f%" PRId64, cred, ev->ts_us);
        st_registry_fp_set(ctx->registry, fp, val.data);
        st_buf_fini(&val);
    }
    st_buf_fini(&scopes);
}

/* The event's credential, when a broker event that the registry tracks. */
static const char *broker_cred(const struct st_event *ev)
{
    const char *cred = st_json_str(ev->identity, "credential_id");
    if (!cred || ev->source_kind != ST_SOURCE_BROKER)
        return NULL;
    if (ev->type != ST_TYPE_TOKEN_ISSUE && ev->type != ST_TYPE_TOKEN_REVOKE &&
        ev->type != ST_TYPE_TOKEN_USE)
        return NULL;
    return cred;
}

/* A request that counts for allowlist drift: its field and member
 * (st_detect_dest_format). */
static int dest_of(const struct st_event *ev, char field[300], char member[600])
{
    if (ev->type != ST_TYPE_REQUEST || !ev->source_platform ||
        ev->decision == ST_DECISION_ERROR || !st_event_target(ev)[0])
        return 0;
    st_detect_dest_format(ev->decision == ST_DECISION_DENY, ev->source_platform,
                          ev->source_name, ev->event_id, field, member);
    return 1;
}

static void sd_prefetch(void *state, struct st_detect_ctx *ctx, const struct st_event *ev)
{
    struct sd_state *st = state;
    const char *cred = broker_cred(ev);
    char field[300], member[600];

    if (cred)
        st_registry_want_cred(ctx->registry, ctx, cred);
    if (ev->type == ST_TYPE_TOKEN_DENY)
        st_runwin_prefetch(st->denies, ctx, ev);
    if (dest_of(ev, field, member))
        st_registry_want_dest(ctx->registry, ctx, st_event_target(ev), field, member);
}

static void sd_feed(void *state, struct st_detect_ctx *ctx, const struct st_event *ev)
{
    struct sd_state *st = state;
    const char *cred = broker_cred(ev);
    char field[300], member[600];

    st->findings = ctx->findings;
    if (cred) {
        if (ev->type == ST_TYPE_TOKEN_ISSUE) {
            issue(st, ctx, ev, cred);
        } else if (ev->type == ST_TYPE_TOKEN_REVOKE) {
            /* the first revoke stands: a redo of an earlier use must not
             * find a later one there */
            st_registry_revoke(ctx->registry, cred, ev->ts_us);
        } else {
            check_use(st, pend_new(st, ctx, ev), st_registry_cred(ctx->registry, cred));
        }
    }
    if (ev->type == ST_TYPE_TOKEN_DENY)
        st_runwin_feed(st->denies, ctx, ev, st_event_target(ev), 0, on_denies, st);
    if (dest_of(ev, field, member)) {
        const struct st_registry_field *fl;
        size_t nf = st_registry_dest_feed(ctx->registry, st_event_target(ev), field,
                                          member, &fl);
        check_destination(st, pend_new(st, ctx, ev), fl, nf, member);
    }
}

static void sd_end_batch(void *state, struct st_detect_ctx *ctx)
{
    st_runwin_end_batch(((struct sd_state *)state)->denies, ctx);
}

static void sd_after_commit(void *state, struct st_detect_ctx *ctx)
{
    st_runwin_after_commit(((struct sd_state *)state)->denies, ctx);
}

static void sd_forget(void *state, struct st_detect_ctx *ctx)
{
    st_runwin_forget(((struct sd_state *)state)->denies, ctx);
}

static const char *const run_states[] = {DENY_WINDOW, NULL};

const struct st_detector_ops st_scope_drift_ops = {
    .name = NAME,
    .version = VERSION,
    /* the registry spans partitions: the main thread only */
    .scope = ST_DETECT_GLOBAL,
    .create = sd_create,
    .destroy = sd_destroy,
    .begin_batch = sd_begin,
    .prefetch = sd_prefetch,
    .feed = sd_feed,
    .end_batch = sd_end_batch,
    .after_commit = sd_after_commit,
    .reset_batch = sd_reset,
    .forget = sd_forget,
    .run_states = run_states,
};
