/* vault.c: HashiCorp Vault's audit device (file or socket), one JSON entry
 * per line: {"time", "type": "request"|"response", "auth", "request",
 * "response", "error"}. Vault writes every request twice, before ("request")
 * and after ("response"); each event is mapped from one of the two so that a
 * request is never counted twice. Tokens and accessors appear as
 * "hmac-sha256:..." (the audit device's HMAC), which is what identities are
 * joined on: the same accessor has the same HMAC in every entry.
 *
 * Mapping (source.kind "broker", event_id "vault-" + request.id + "-" +
 * type, ts = time):
 *   request entry whose error says "permission denied"
 *       -> token_deny, decision "deny", reason the error ("1 error occurred:
 *          * permission denied" reads "permission denied"), attrs
 *          requested_scope = request.path, operation = request.operation;
 *          identity is the caller's token when there is one
 *   request entry on auth/token/revoke* (revoke, revoke-self,
 *   revoke-accessor, revoke-orphan), without error
 *       -> token_revoke; identity.credential_id is the revoked token's
 *          accessor (request.data.accessor; for revoke-self the caller's
 *          auth.accessor); when only the token is given (request.data.token,
 *          its HMAC) that HMAC is the credential_id and credential_fp
 *   response entry that issued a token (response.auth.accessor set, no
 *   error, not a renewal): token create, any auth method's login
 *       -> token_issue, identity.credential_id = the new accessor, scopes =
 *          response.auth.policies, subject = its display_name, attrs
 *          expires_at = time + token_ttl (none for a ttl of 0, which never
 *          expires), issued_by = the parent token's accessor; when the audit
 *          device logs tokens raw (log_raw=true), identity.credential =
 *          response.auth.client_token, which the redactor replaces by its
 *          fingerprint (identity.credential_fp) and lineage follows
 *   other request entries made with a token (auth.accessor set)
 *       -> token_use, identity.credential_id = auth.accessor, attrs.operation
 *          = operation + " " + path; an error other than a denial gives
 *          decision "error" and the error as reason
 *   everything else (request entries of token creation and logins, whose
 *   response carries the issue; unauthenticated requests; the response of
 *   any request already mapped from its request entry) is skipped.
 *
 * task_id and run_id: the token's metadata, which is where an agent's broker
 * puts them (vault token create -metadata task_id=T-42 -metadata
 * run_id=run-7): for token_issue the new token's response.auth.metadata, else
 * the caller's auth.metadata; then the request headers that the audit device
 * was told to log (sys/config/auditing/request-headers: X-Task-Id, X-Run-Id,
 * logged as "headers":{"x-task-id":["T-42"]}); else "unknown". trace_id is
 * from a logged traceparent header. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "decoder.h"
#include "log.h"
#include "timeutil.h"

#define TEXT_MAX 1024 /* identity members: event.c's limit */

/* identity/attrs text: non-empty, at most TEXT_MAX bytes cut on a character */
static void add_text(cJSON *obj, const char *key, const char *s)
{
    if (!s || !*s)
        return;
    size_t n = strlen(s);
    if (n > TEXT_MAX) {
        n = TEXT_MAX;
        while (n > 0 && ((unsigned char)s[n] & 0xC0) == 0x80)
            n--; /* back to the start of the character that did not fit */
    }
    char *t = st_strndup(s, n);
    cJSON_AddStringToObject(obj, key, t);
    free(t);
}

/* A request header the audit device logged: "headers": {"x-task-id":
 * ["T-42"]} (Vault lowercases names and logs a list of values). */
static const char *header(const cJSON *req, const char *name)
{
    const cJSON *h = cJSON_GetObjectItemCaseSensitive(req, "headers");
    const cJSON *v = cJSON_IsObject(h) ? cJSON_GetObjectItemCaseSensitive(h, name) : NULL;
    if (cJSON_IsArray(v))
        v = cJSON_GetArrayItem(v, 0);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static const char *meta(const cJSON *auth, const char *key)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(auth, "metadata");
    const char *s = cJSON_IsObject(m) ? st_json_str(m, key) : NULL;
    return s && *s ? s : NULL;
}

static void add_run(cJSON *ev, const cJSON *first_auth, const cJSON *auth,
                    const cJSON *req)
{
    const char *task = meta(first_auth, "task_id"), *run = meta(first_auth, "run_id");
    if (!task)
        task = meta(auth, "task_id");
    if (!run)
        run = meta(auth, "run_id");
    if (!task)
        task = header(req, "x-task-id");
    if (!run)
        run = header(req, "x-run-id");
    st_decode_add_run(ev, task, run);
}

static void add_identity(cJSON *ev, const cJSON *auth, const char *credential_id)
{
    const cJSON *pol = cJSON_GetObjectItemCaseSensitive(auth, "policies");
    cJSON *id = cJSON_AddObjectToObject(ev, "identity");
    add_text(id, "subject", st_json_str(auth, "display_name"));
    add_text(id, "credential_id", credential_id);
    if (cJSON_IsArray(pol)) {
        cJSON *scopes = cJSON_AddArrayToObject(id, "scopes");
        const cJSON *p;
        cJSON_ArrayForEach(p, pol) if (cJSON_IsString(p))
            cJSON_AddItemToArray(scopes, cJSON_CreateString(p->valuestring));
    }
}

/* "1 error occurred:\n\t* permission denied\n\n" -> "permission denied":
 * the items of Go's multierror, joined by "; ". */
static char *clean_error(const char *err)
{
    struct st_buf b;
    const char *p = strstr(err, "\t* ");
    st_buf_init(&b);
    if (!p || !strstr(err, "occurred:")) {
        st_buf_adds(&b, err);
    } else {
        while (p) {
            p += 3;
            size_t n = strcspn(p, "\n");
            if (b.len)
                st_buf_adds(&b, "; ");
            st_buf_add(&b, p, n);
            p = strstr(p + n, "\t* ");
        }
    }
    while (b.len > 0 && strchr(" \t\r\n", b.data[b.len - 1]))
        b.data[--b.len] = '\0';
    if (b.len == 0)
        st_buf_adds(&b, "error");
    return b.data;
}

static int starts_with(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static int is_issue_path(const char *path)
{
    return starts_with(path, "auth/token/create") ||
           (starts_with(path, "auth/") && strstr(path, "/login"));
}

static int is_renew_path(const char *path)
{
    return strstr(path, "renew") != NULL;
}

/* "vault-<request id>-<type>"; a request id that is not a plain token is
 * replaced by its hash. */
static void vault_event_id(const char *req_id, const char *type, char *out, size_t size)
{
    size_t n = strlen(req_id);
    int ok = n > 0 && n <= 64;
    for (size_t i = 0; ok && i < n; i++) {
        char c = req_id[i];
        ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
             c == '-' || c == '_' || c == '.';
    }
    if (ok) {
        snprintf(out, size, "vault-%s-%s", req_id, type);
    } else {
        char h[64];
        st_decode_line_id("vault", req_id, n, h, sizeof(h));
        snprintf(out, size, "%s-%s", h, type);
    }
}

struct vault_entry {
    const char *time, *type, *error;
    const cJSON *auth, *req, *resp;
    const char *req_id, *operation, *path, *accessor;
    char ts[40];
    int64_t ts_us;
};

static int vault_read(const cJSON *doc, struct vault_entry *e, struct st_reject *rej)
{
    if (st_decode_str(doc, "", "time", 1, &e->time, rej) < 0 ||
        st_decode_str(doc, "", "type", 1, &e->type, rej) < 0 ||
        st_decode_str(doc, "", "error", 0, &e->error, rej) < 0 ||
        st_decode_obj(doc, "", "auth", 0, &e->auth, rej) < 0 ||
        st_decode_obj(doc, "", "request", 1, &e->req, rej) < 0 ||
        st_decode_obj(doc, "", "response", 0, &e->resp, rej) < 0 ||
        st_decode_str(e->req, "request.", "id", 1, &e->req_id, rej) < 0 ||
        st_decode_str(e->req, "request.", "path", 1, &e->path, rej) < 0 ||
        st_decode_str(e->req, "request.", "operation", 0, &e->operation, rej) < 0 ||
        st_decode_str(e->auth, "auth.", "accessor", 0, &e->accessor, rej) < 0)
        return -1;
    if (strcmp(e->type, "request") != 0 && strcmp(e->type, "response") != 0)
        return st_decode_reject(rej, ST_REASON_VALUE,
                                "field \"type\" must be request or response");
    if (st_decode_ts(e->time, e->ts, sizeof(e->ts), &e->ts_us))
        return st_decode_reject(rej, ST_REASON_TIMESTAMP,
                                "field \"time\" is not an RFC 3339 date-time");
    if (*e->req_id == '\0')
        return st_decode_reject(rej, ST_REASON_VALUE, "field \"request.id\" is empty");
    if (e->error && !*e->error)
        e->error = NULL;
    if (e->accessor && !*e->accessor)
        e->accessor = NULL;
    if (!e->operation)
        e->operation = "";
    return 0;
}

static cJSON *vault_event(const struct vault_entry *e, const struct st_decode_ctx *ctx,
                          const cJSON *first_auth, const char *type)
{
    char id[160], trace[33];
    vault_event_id(e->req_id, e->type, id, sizeof(id));
    cJSON *ev = st_decode_event_new(ctx, "vault", id, e->ts, "broker");
    add_run(ev, first_auth, e->auth, e->req);
    const char *tp = header(e->req, "traceparent");
    if (tp && st_decode_traceparent(tp, trace, sizeof(trace)) == 0)
        cJSON_AddStringToObject(ev, "trace_id", trace);
    cJSON_AddStringToObject(ev, "type", type);
    return ev;
}

static void add_operation(cJSON *attrs, const struct vault_entry *e)
{
    struct st_buf b;
    st_buf_init(&b);
    st_buf_printf(&b, "%s %s", e->operation, e->path);
    cJSON_AddStringToObject(attrs, "operation", b.data);
    st_buf_fini(&b);
    st_decode_add_opt(attrs, "remote_address", st_json_str(e->req, "remote_address"));
}

static int vault_issue(const struct vault_entry *e, const struct st_decode_ctx *ctx,
                       cJSON **out, struct st_reject *rej)
{
    const cJSON *new_auth;
    const char *accessor;
    int64_t ttl = 0;
    int has_ttl;

    if (st_decode_obj(e->resp, "response.", "auth", 0, &new_auth, rej) < 0)
        return -1;
    if (!new_auth || e->error || is_renew_path(e->path))
        return 1;
    if (st_decode_str(new_auth, "response.auth.", "accessor", 0, &accessor, rej) < 0 ||
        (has_ttl = st_decode_int(new_auth, "response.auth.", "token_ttl", 0, 0,
                                 INT64_C(100) * 366 * 86400, &ttl, rej)) < 0)
        return -1;
    if (!accessor || !*accessor)
        return 1; /* batch tokens have no accessor: nothing to follow */

    cJSON *ev = vault_event(e, ctx, new_auth, "token_issue");
    add_identity(ev, new_auth, accessor);
    /* Vault's own HMAC, or a value the text pass already redacted, is not
     * the token */
    const char *tok = st_json_str(new_auth, "client_token");
    if (tok && *tok && strncmp(tok, "hmac-sha256:", 12) != 0 &&
        strncmp(tok, "[REDACTED:", 10) != 0)
        add_text(st_json_get(ev, "identity"), "credential", tok);
    cJSON *attrs = cJSON_AddObjectToObject(ev, "attrs");
    int64_t expires_us = e->ts_us + ttl * 1000000;
    if (has_ttl && ttl > 0 && expires_us < INT64_C(253402300800) * 1000000) {
        char exp[40];
        st_time_format(expires_us, exp, sizeof(exp));
        cJSON_AddStringToObject(attrs, "expires_at", exp);
    }
    if (e->accessor)
        add_text(attrs, "issued_by", e->accessor);
    add_operation(attrs, e);
    *out = ev;
    return 0;
}

static int vault_request(const struct vault_entry *e, const struct st_decode_ctx *ctx,
                         cJSON **out, struct st_reject *rej)
{
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(e->req, "data");
    int revoke = starts_with(e->path, "auth/token/revoke");
    cJSON *ev, *attrs;

    if (e->error && strstr(e->error, "permission denied")) {
        char *why = clean_error(e->error);
        ev = vault_event(e, ctx, NULL, "token_deny");
        cJSON_AddStringToObject(ev, "decision", "deny");
        cJSON_AddStringToObject(ev, "reason", why);
        free(why);
        if (e->auth)
            add_identity(ev, e->auth, e->accessor);
        attrs = cJSON_AddObjectToObject(ev, "attrs");
        add_text(attrs, "requested_scope", e->path);
        cJSON_AddStringToObject(attrs, "operation", e->operation);
        st_decode_add_opt(attrs, "remote_address", st_json_str(e->req, "remote_address"));
    } else if (revoke && !e->error) {
        const char *cred = cJSON_IsObject(data) ? st_json_str(data, "accessor") : NULL;
        const char *token = cJSON_IsObject(data) ? st_json_str(data, "token") : NULL;
        if (!cred && starts_with(e->path, "auth/token/revoke-self"))
            cred = e->accessor;
        if (!cred)
            cred = token;
        if (!cred || !*cred)
            return st_decode_reject(rej, ST_REASON_MISSING,
                                    "token revocation names no token or accessor");
        ev = vault_event(e, ctx, NULL, "token_revoke");
        cJSON *id = cJSON_AddObjectToObject(ev, "identity");
        add_text(id, "credential_id", cred);
        if (cred == token)
            add_text(id, "credential_fp", token);
        attrs = cJSON_AddObjectToObject(ev, "attrs");
        if (e->accessor)
            add_text(attrs, "revoked_by", e->accessor);
        add_operation(attrs, e);
    } else if (is_issue_path(e->path) || !e->accessor) {
        return 1; /* the response entry carries the issue; no token used */
    } else {
        ev = vault_event(e, ctx, NULL, "token_use");
        if (e->error) {
            char *why = clean_error(e->error);
            cJSON_AddStringToObject(ev, "decision", "error");
            cJSON_AddStringToObject(ev, "reason", why);
            free(why);
        }
        add_identity(ev, e->auth, e->accessor);
        attrs = cJSON_AddObjectToObject(ev, "attrs");
        add_operation(attrs, e);
    }
    *out = ev;
    return 0;
}

static int vault_decode(const char *line, size_t len, const struct st_decode_ctx *ctx,
                        cJSON **out, struct st_reject *rej)
{
    struct vault_entry e;
    int rc;

    *out = NULL;
    if (st_decode_check_line(line, len, rej))
        return -1;
    cJSON *doc = st_decode_parse_object(line, len, rej);
    if (!doc)
        return -1;
    memset(&e, 0, sizeof(e));
    if (vault_read(doc, &e, rej))
        rc = -1;
    else if (strcmp(e.type, "request") == 0)
        rc = vault_request(&e, ctx, out, rej);
    else if (e.resp)
        rc = vault_issue(&e, ctx, out, rej);
    else
        rc = 1;
    cJSON_Delete(doc);
    return rc;
}

const struct st_decoder_ops st_vault_decoder = {
    .name = "vault",
    .decode = vault_decode,
};
