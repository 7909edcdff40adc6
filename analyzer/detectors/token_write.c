/* token_write.c: a credential written where it should not be.
 *
 * The collector replaces every token-shaped value with
 * "[REDACTED:<rule>:<fingerprint>]", the fingerprint being a keyed hash of
 * the value. This detector looks for those markers in what an agent wrote
 * or sent -- a sandbox file_write, commit or upload, a proxy request -- at
 * any depth of the event. A finding per (run, fingerprint): critical when
 * the fingerprint is that of a credential a broker issued (token_issue with
 * identity.credential_fp, recorded by scope_drift.c) or of a configured
 * canary (detect.token_write.canary_fingerprints), high otherwise. The
 * fingerprints are looked up in the registry (registry.c): read from Redis
 * in the batch's prefetch when not in memory. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "detect.h"
#include "json.h"
#include "log.h"
#include "redact.h"
#include "registry.h"

#define NAME "token_write"
#define VERSION 1
#define MAX_MARKS 16

struct mark {
    char rule[48];
    char fp[72];
    char path[128];
};

struct pending {
    struct tw_state *st;
    const struct st_event *ev;
    int late;
    struct mark mark;
};

struct tw_state {
    const struct st_analyzer_conf *conf;
    struct st_findings *findings;
    struct pending *pend; /* the marks of the batch, in feed order (grown as needed) */
    size_t npend, cap, next;
};

static void *tw_create(const struct st_analyzer_conf *conf)
{
    struct tw_state *st = st_calloc(1, sizeof(*st));
    st->conf = conf;
    return st;
}

static void tw_destroy(void *state)
{
    struct tw_state *st = state;
    if (!st)
        return;
    free(st->pend);
    free(st);
}

/* Nothing to size: few events carry marks, so pend grows as they come
 * (it was sized for 16 marks of every event of the batch, 270 bytes each:
 * hundreds of MB a catch-up batch, copied at each growth). */
static void tw_begin(void *state, size_t n)
{
    (void)state;
    (void)n;
}

static void tw_reset(void *state)
{
    ((struct tw_state *)state)->npend = 0;
    ((struct tw_state *)state)->next = 0;
}

/* Only the collector's marker form is a marker: a rule name of [a-z0-9_-]
 * and a fingerprint of lowercase hex. Anything else between "[REDACTED:"
 * and ']' (a sender's forgery, terminal escapes) is not parsed: it never
 * reaches a summary. */
static int is_rule_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}

static int is_hex_char(char c)
{
    return (c >= 'a' && c <= 'f') || (c >= '0' && c <= '9');
}

/* Parses the markers in s into marks (distinct fingerprints only). */
static void scan_string(const char *s, const char *path, struct mark *marks, size_t *n)
{
    for (const char *p = strstr(s, ST_REDACT_MARKER_OPEN); p && *n < MAX_MARKS;
         p = strstr(p + 1, ST_REDACT_MARKER_OPEN)) {
        const char *rule = p + strlen(ST_REDACT_MARKER_OPEN), *colon = rule, *end;
        while (is_rule_char(*colon))
            colon++;
        if (*colon != ':' || colon == rule || colon - rule >= 48)
            continue;
        end = colon + 1;
        while (is_hex_char(*end))
            end++;
        if (*end != ST_REDACT_MARKER_CLOSE[0] || end == colon + 1 || end - colon - 1 >= 72)
            continue;
        struct mark m;
        snprintf(m.rule, sizeof(m.rule), "%.*s", (int)(colon - rule), rule);
        snprintf(m.fp, sizeof(m.fp), "%.*s", (int)(end - colon - 1), colon + 1);
        snprintf(m.path, sizeof(m.path), "%s", path);
        int seen = 0;
        for (size_t i = 0; i < *n; i++)
            seen |= !strcmp(marks[i].fp, m.fp);
        if (!seen)
            marks[(*n)++] = m;
    }
}

/* 1 when some string of item (values only, as scan reads them) holds a
 * marker's opening: most events hold none, and this walk builds no path. */
static int has_marker(const cJSON *item)
{
    if (st_json_is(item, cJSON_String)) {
        /* the marker opens with '[': strchr (vectorized) rules most
         * strings out for less than strstr costs */
        const char *b = strchr(item->valuestring, ST_REDACT_MARKER_OPEN[0]);
        return b && strstr(b, ST_REDACT_MARKER_OPEN) != NULL;
    }
    for (const cJSON *c = item->child; c; c = c->next)
        if (has_marker(c))
            return 1;
    return 0;
}

static void scan(const cJSON *item, struct st_buf *path, struct mark *marks, size_t *n)
{
    size_t keep = path->len;
    if (st_json_is(item, cJSON_String)) {
        scan_string(item->valuestring, path->data ? path->data : "", marks, n);
        return;
    }
    int idx = 0;
    for (const cJSON *c = item->child; c; c = c->next, idx++) {
        if (st_json_is(item, cJSON_Object)) {
            /* the collector's own record of what it redacted, and the
             * identity the broker vouched for, are not what was written */
            if (keep == 0 && (!strcmp(c->string, "redactions") ||
                              !strcmp(c->string, "identity")))
                continue;
            if (keep)
                st_buf_addc(path, '.');
            st_buf_adds(path, c->string);
        } else {
            st_buf_printf(path, "[%d]", idx);
        }
        scan(c, path, marks, n);
        path->len = keep;
        if (path->data)
            path->data[keep] = '\0';
    }
}

static int is_canary(const struct st_analyzer_conf *conf, const char *fp)
{
    const char *s = conf->canary_fps;
    size_t len = strlen(fp);
    while (s && *s) {
        size_t n = strcspn(s, ", ");
        if (n == len && !strncmp(s, fp, n))
            return 1;
        s += n;
        s += strspn(s, ", ");
    }
    return 0;
}

static void check_mark(struct tw_state *st, const struct pending *p, const char *value)
{
    const struct st_event *ev = p->ev;
    char key[128], id[33], summary[512];

    /* "credential_id\x1fissued": a credential issued after the write is
     * not the one written (and a redone batch finds the issues of its own
     * later events) */
    char cred[128] = "";
    int issued = 0;
    if (value) {
        const char *sep = strchr(value, '\x1f');
        int64_t at = sep ? strtoll(sep + 1, NULL, 10) : INT64_MIN;
        snprintf(cred, sizeof(cred), "%.*s", sep ? (int)(sep - value) : 127, value);
        issued = at <= ev->ts_us;
    }
    int canary = is_canary(st->conf, p->mark.fp);
    snprintf(key, sizeof(key), "fp:%s", p->mark.fp);
    st_finding_id(id, NAME, ev->task_id, ev->run_id, key);
    snprintf(summary, sizeof(summary), "%s value (%.48s, fingerprint %.72s) in %s %.128s%s%.64s%s",
             canary ? "canary" : "credential-shaped", p->mark.rule, p->mark.fp,
             st_event_type_name(ev->type), p->mark.path,
             issued ? ": the credential \"" : "", issued ? cred : "",
             issued ? "\" a broker issued" : "");
    struct st_finding *f = st_findings_update(
        st->findings, id, NAME, VERSION,
        issued || canary ? ST_SEV_CRITICAL : ST_SEV_HIGH, ev->task_id, ev->run_id,
        ev->ts_us, ev->ts_us, summary);
    st_finding_add_event(f, ev->source_name, ev->event_id, p->late);
}

/* Scans ev once, keeps its marks for feed and wants their fingerprints. */
static void tw_prefetch(void *state, struct st_detect_ctx *ctx, const struct st_event *ev)
{
    struct tw_state *st = state;
    struct mark marks[MAX_MARKS];
    size_t n = 0;
    struct st_buf path;

    if (ev->type != ST_TYPE_FILE_WRITE && ev->type != ST_TYPE_COMMIT &&
        ev->type != ST_TYPE_UPLOAD && ev->type != ST_TYPE_REQUEST)
        return;
    /* most events' text holds no marker at all (st_event_parse's look) */
    if (!ev->may_mark || !has_marker(ev->doc))
        return;
    st_buf_init(&path);
    scan(ev->doc, &path, marks, &n);
    st_buf_fini(&path);
    for (size_t i = 0; i < n; i++) {
        if (st->npend == st->cap) {
            st->cap = st->cap ? 2 * st->cap : 64;
            st->pend = st_realloc(st->pend, st->cap * sizeof(*st->pend));
        }
        struct pending *p = &st->pend[st->npend++];
        p->st = st;
        p->ev = ev;
        p->late = 0;
        p->mark = marks[i];
        st_registry_want_fp(ctx->registry, ctx, marks[i].fp);
    }
}

static void tw_feed(void *state, struct st_detect_ctx *ctx, const struct st_event *ev)
{
    struct tw_state *st = state;

    st->findings = ctx->findings;
    for (; st->next < st->npend && st->pend[st->next].ev == ev; st->next++) {
        struct pending *p = &st->pend[st->next];
        p->late = ctx->late;
        /* in feed order: an issue earlier in the batch is seen */
        check_mark(st, p, st_registry_fp(ctx->registry, p->mark.fp));
    }
}

const struct st_detector_ops st_token_write_ops = {
    .name = NAME,
    .version = VERSION,
    /* the registry spans partitions: the main thread only */
    .scope = ST_DETECT_GLOBAL,
    .create = tw_create,
    .destroy = tw_destroy,
    .begin_batch = tw_begin,
    .prefetch = tw_prefetch,
    .feed = tw_feed,
    .reset_batch = tw_reset,
};
