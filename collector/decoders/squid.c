/* squid.c: Squid's access log written with the JSON logformat of
 * tests/data/samples/squid.conf ("audit_json"), one request per line.
 *
 * Squid's %" quoting is not JSON escaping: it puts a backslash before '"' and
 * '\' and copies every other byte, so a header with a control byte or with
 * invalid UTF-8 yields a line that a strict parser rejects. Losing such a line
 * would hide exactly the requests an auditor wants, so the line is first
 * rewritten inside its strings: raw control bytes become \u00XX, NUL and
 * invalid UTF-8 become U+FFFD, a backslash that starts no valid escape is
 * escaped itself, and a bare "-" value (Squid's "none" for an unquoted code)
 * becomes null. Anything else that is not JSON (a line that is not an object,
 * broken structure) is still refused.
 *
 * Mapping (type "request", source.kind "proxy", event_id "squid-" + hash of
 * the raw line, since Squid's transaction ids restart with the process):
 *   ts          epoch seconds with millis ("ts") as RFC 3339
 *   decision    "deny" when Squid denied (squid_status TCP_DENIED*, or
 *               err_code ERR_ACCESS_DENIED) whatever the note says; else the
 *               "decision" note (allow, deny, error); else "allow"
 *   reason      the "reason" note, else err_code
 *   task_id     the X-Task-Id header ("task_id"); when missing, the proxy-auth
 *               user ("user") read as "task/run"; else "unknown"
 *   run_id      the X-Run-Id header ("run_id"); when missing, the run part of
 *               the user, but only when the user names the same task; else
 *               "unknown"
 *   trace_id    the trace id of the W3C "traceparent" header, when well formed
 *   attrs       method, host ("host", else from the url), port ("port", else
 *               from the url), path (from the url; none for CONNECT, whose url
 *               is host:port), status ("-" or 0: absent), bytes_out
 *               (req_bytes), bytes_in (resp_bytes), dst_ip (server_ip unless
 *               "-"), and duration_ms (tr_ms), squid_status, err_code,
 *               err_detail, client, user_agent (ua)
 * Identifiers with control bytes keep their other characters (the control
 * bytes become U+FFFD) rather than lose the line. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "buf.h"
#include "decoder.h"
#include "timeutil.h"

#define REPLACEMENT "\xEF\xBF\xBD" /* U+FFFD */

static int hexval(unsigned char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* The code unit of "\uXXXX" at p (left bytes), or -1. */
static long u_escape(const unsigned char *p, size_t left)
{
    long v = 0;
    if (left < 6 || p[0] != '\\' || p[1] != 'u')
        return -1;
    for (int i = 2; i < 6; i++) {
        int h = hexval(p[i]);
        if (h < 0)
            return -1;
        v = v * 16 + h;
    }
    return v;
}

/* Handles the escape at p[0] == '\\' inside a string; returns the bytes used. */
static size_t repair_escape(const unsigned char *p, size_t left, struct st_buf *out)
{
    if (left >= 2 && p[1] != '\0' && strchr("\"\\/bfnrt", p[1])) {
        st_buf_add(out, p, 2);
        return 2;
    }
    long u = u_escape(p, left);
    if (u < 0) {
        st_buf_adds(out, "\\\\"); /* a lone backslash stands for itself */
        return 1;
    }
    if (u >= 0xD800 && u <= 0xDBFF) {
        long lo = u_escape(p + 6, left - 6);
        if (lo >= 0xDC00 && lo <= 0xDFFF) {
            st_buf_add(out, p, 12);
            return 12;
        }
    }
    if (u == 0 || (u >= 0xD800 && u <= 0xDFFF))
        st_buf_adds(out, "\\ufffd"); /* NUL and lone surrogates */
    else
        st_buf_add(out, p, 6);
    return 6;
}

/* Rewrites line into strict JSON in out (see the file comment). At most six
 * output bytes per input byte. */
static int squid_repair(const char *line, size_t len, struct st_buf *out,
                        struct st_reject *rej)
{
    const unsigned char *p = (const unsigned char *)line;
    size_t i = 0;
    int in_str = 0;
    char last = 0; /* last byte outside strings that is not whitespace */

    while (i < len && (p[i] == ' ' || p[i] == '\t'))
        i++;
    if (i == len || p[i] != '{')
        return st_decode_reject(rej, ST_REASON_NOT_OBJECT,
                                "a Squid JSON log line must be a JSON object");
    while (i < len) {
        unsigned char c = p[i];
        if (!in_str) {
            if (c == '"')
                in_str = 1;
            if (c == '-' && last == ':') {
                size_t j = i + 1;
                while (j < len && (p[j] == ' ' || p[j] == '\t'))
                    j++;
                if (j < len && (p[j] == ',' || p[j] == '}')) {
                    st_buf_adds(out, "null");
                    last = 'l';
                    i++;
                    continue;
                }
            }
            if (c != ' ' && c != '\t')
                last = (char)c;
            st_buf_addc(out, (char)c);
            i++;
        } else if (c == '"') {
            in_str = 0;
            last = '"';
            st_buf_addc(out, '"');
            i++;
        } else if (c == '\\') {
            i += repair_escape(p + i, len - i, out);
        } else if (c == 0) {
            st_buf_adds(out, "\\ufffd");
            i++;
        } else if (c < 0x20) {
            st_buf_printf(out, "\\u%04x", c);
            i++;
        } else if (c >= 0x80) {
            int n = st_decode_utf8_len(p + i, len - i);
            if (n < 0) {
                st_buf_add(out, REPLACEMENT, 3);
                i++;
            } else {
                st_buf_add(out, p + i, (size_t)n);
                i += (size_t)n;
            }
        } else {
            st_buf_addc(out, (char)c);
            i++;
        }
    }
    return 0;
}

/* A string member, with "-" and "" read as absent. */
static int opt_str(const cJSON *doc, const char *key, const char **out,
                   struct st_reject *rej)
{
    if (st_decode_str(doc, "", key, 0, out, rej) < 0)
        return -1;
    if (*out && (**out == '\0' || strcmp(*out, "-") == 0))
        *out = NULL;
    return 0;
}

/* A number that the logformat writes either bare (%>st) or quoted (%>Hs):
 * 1 with *out set, 0 when absent or "-", -1 when malformed. */
static int opt_num(const cJSON *doc, const char *key, int64_t max, int64_t *out,
                   struct st_reject *rej)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(doc, key);
    if (cJSON_IsString(v)) {
        const char *s = v->valuestring;
        if (*s == '\0' || strcmp(s, "-") == 0)
            return 0;
        if (st_decode_uint(s, strlen(s), max, out))
            return st_decode_reject(rej, ST_REASON_VALUE,
                                    "field \"%s\" must be a number from 0 to %lld", key,
                                    (long long)max);
        return 1;
    }
    return st_decode_int(doc, "", key, 0, 0, max, out, rej);
}

struct url_parts {
    const char *auth; /* authority (host[:port]), NULL when none */
    size_t auth_len;
    const char *path; /* path and query, NULL when none */
};

static void url_split(const char *url, int is_connect, struct url_parts *u)
{
    const char *scheme_end = strstr(url, "://");
    const char *slash = strchr(url, '/');

    memset(u, 0, sizeof(*u));
    if (is_connect || (!scheme_end && url[0] != '/')) {
        u->auth = url; /* CONNECT's authority form: host:port */
        u->auth_len = strlen(url);
        return;
    }
    if (!scheme_end || (slash && slash < scheme_end)) {
        u->path = url; /* origin form: only a path */
        return;
    }
    const char *a = scheme_end + 3;
    size_t n = strcspn(a, "/?#");
    /* never keep user:password@ */
    for (size_t i = n; i > 0; i--)
        if (a[i - 1] == '@') {
            a += i;
            n -= i;
            break;
        }
    u->auth = a;
    u->auth_len = n;
    if (a[n] != '\0')
        u->path = a + n;
}

/* ts in epoch seconds (a JSON number with millis) as RFC 3339. */
static int squid_ts(const cJSON *doc, char *out, size_t size, struct st_reject *rej)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(doc, "ts");
    if (!v || cJSON_IsNull(v))
        return st_decode_reject(rej, ST_REASON_MISSING, "missing required field \"ts\"");
    if (!cJSON_IsNumber(v))
        return st_decode_reject(rej, ST_REASON_TYPE,
                                "field \"ts\" must be a number (epoch seconds)");
    /* up to 9999-12-31T23:59:59Z */
    if (!isfinite(v->valuedouble) || v->valuedouble < 0 ||
        v->valuedouble >= 253402300800.0)
        return st_decode_reject(rej, ST_REASON_TIMESTAMP,
                                "field \"ts\" is not a time from 1970 to 9999");
    int64_t ms = (int64_t)llround(v->valuedouble * 1000.0);
    st_time_format(ms * 1000, out, size);
    return 0;
}

static int squid_map(const char *line, size_t len, const cJSON *doc,
                     const struct st_decode_ctx *ctx, cJSON **out,
                     struct st_reject *rej)
{
    const char *method, *url, *host_f, *squid_status, *err_code, *err_detail,
        *note_dec, *note_reason, *user, *task, *run, *tp, *server_ip, *client, *ua;
    int64_t port = -1, status = 0, req_bytes, resp_bytes, tr_ms;
    int has_status, has_req, has_resp, has_tr;
    char ts[40], id[64], host[1024];

    if (squid_ts(doc, ts, sizeof(ts), rej) ||
        st_decode_str(doc, "", "url", 1, &url, rej) < 0 ||
        opt_str(doc, "method", &method, rej) || opt_str(doc, "host", &host_f, rej) ||
        opt_str(doc, "squid_status", &squid_status, rej) ||
        opt_str(doc, "err_code", &err_code, rej) ||
        opt_str(doc, "err_detail", &err_detail, rej) ||
        opt_str(doc, "decision", &note_dec, rej) ||
        opt_str(doc, "reason", &note_reason, rej) || opt_str(doc, "user", &user, rej) ||
        opt_str(doc, "task_id", &task, rej) || opt_str(doc, "run_id", &run, rej) ||
        opt_str(doc, "traceparent", &tp, rej) ||
        opt_str(doc, "server_ip", &server_ip, rej) || opt_str(doc, "client", &client, rej) ||
        opt_str(doc, "ua", &ua, rej))
        return -1;
    if ((has_status = opt_num(doc, "status", 999, &status, rej)) < 0 ||
        (has_req = opt_num(doc, "req_bytes", INT64_C(1) << 53, &req_bytes, rej)) < 0 ||
        (has_resp = opt_num(doc, "resp_bytes", INT64_C(1) << 53, &resp_bytes, rej)) < 0 ||
        (has_tr = opt_num(doc, "tr_ms", INT64_C(1) << 53, &tr_ms, rej)) < 0)
        return -1;

    int is_connect = method && strcmp(method, "CONNECT") == 0;
    struct url_parts u;
    int64_t url_port = -1, field_port;
    url_split(url, is_connect, &u);

    /* host: Squid's own field, else the url's authority */
    char url_host[1024];
    if (!u.auth ||
        st_decode_host_port(u.auth, u.auth_len, url_host, sizeof(url_host), &url_port))
        url_host[0] = '\0';
    const char *host_out = host;
    if (host_f) {
        /* brackets off an IPv6 address; anything odder is kept as written */
        if (st_decode_host_port(host_f, strlen(host_f), host, sizeof(host), &field_port))
            host_out = host_f;
    } else if (url_host[0]) {
        host_out = url_host;
    } else {
        return st_decode_reject(rej, ST_REASON_MISSING,
                                "no host in field \"host\" or in field \"url\"");
    }
    int r = opt_num(doc, "port", 65535, &port, rej);
    if (r < 0)
        return -1;
    if (r == 0)
        port = url_port;

    /* Squid's own denial wins over the note: the note is only what the
     * http_access rule said, a later rule may still deny */
    const char *decision = "allow";
    if ((squid_status && strstr(squid_status, "DENIED")) ||
        (err_code && strcmp(err_code, "ERR_ACCESS_DENIED") == 0))
        decision = "deny";
    else if (note_dec && (strcmp(note_dec, "allow") == 0 || strcmp(note_dec, "deny") == 0 ||
                          strcmp(note_dec, "error") == 0))
        decision = note_dec;

    /* task and run: headers first, then the proxy-auth user "task/run" */
    size_t task_len = task ? strlen(task) : 0, run_len = run ? strlen(run) : 0;
    if (user) {
        const char *slash = strchr(user, '/');
        size_t utask_len = slash ? (size_t)(slash - user) : strlen(user);
        if (!task) {
            task = user;
            task_len = utask_len;
        }
        if (!run && slash && slash[1] && task_len == utask_len &&
            memcmp(task, user, utask_len) == 0) {
            run = slash + 1;
            run_len = strlen(run);
        }
    }

    st_decode_line_id("squid", line, len, id, sizeof(id));
    cJSON *ev = st_decode_event_new(ctx, "squid", id, ts, "proxy");
    st_decode_add_id(ev, "task_id", task, task_len);
    st_decode_add_id(ev, "run_id", run, run_len);
    char trace[33];
    if (tp && st_decode_traceparent(tp, trace, sizeof(trace)) == 0)
        cJSON_AddStringToObject(ev, "trace_id", trace);
    cJSON_AddStringToObject(ev, "type", "request");
    cJSON_AddStringToObject(ev, "decision", decision);
    if (note_reason || err_code)
        cJSON_AddStringToObject(ev, "reason", note_reason ? note_reason : err_code);

    cJSON *attrs = cJSON_AddObjectToObject(ev, "attrs");
    st_decode_add_opt(attrs, "method", method);
    cJSON_AddStringToObject(attrs, "host", host_out);
    if (port >= 0)
        cJSON_AddNumberToObject(attrs, "port", (double)port);
    if (!is_connect)
        st_decode_add_opt(attrs, "path", u.path);
    if (has_status && status > 0)
        cJSON_AddNumberToObject(attrs, "status", (double)status);
    if (has_req)
        cJSON_AddNumberToObject(attrs, "bytes_out", (double)req_bytes);
    if (has_resp)
        cJSON_AddNumberToObject(attrs, "bytes_in", (double)resp_bytes);
    st_decode_add_opt(attrs, "dst_ip", server_ip);
    if (has_tr)
        cJSON_AddNumberToObject(attrs, "duration_ms", (double)tr_ms);
    st_decode_add_opt(attrs, "squid_status", squid_status);
    st_decode_add_opt(attrs, "err_code", err_code);
    st_decode_add_opt(attrs, "err_detail", err_detail);
    st_decode_add_opt(attrs, "client", client);
    /* what the agent sent is kept: the redactor sees it before it leaves */
    st_decode_add_opt(attrs, "user_agent", ua);
    *out = ev;
    return 0;
}

static int squid_decode(const char *line, size_t len, const struct st_decode_ctx *ctx,
                        cJSON **out, struct st_reject *rej)
{
    struct st_buf fixed;
    int rc = -1;

    *out = NULL;
    if (st_decode_check_line(line, len, rej))
        return -1;
    st_buf_init(&fixed);
    if (squid_repair(line, len, &fixed, rej))
        goto done;
    cJSON *doc = st_decode_parse_object(fixed.data, fixed.len, rej);
    if (!doc)
        goto done;
    rc = squid_map(line, len, doc, ctx, out, rej);
    cJSON_Delete(doc);
done:
    st_buf_fini(&fixed);
    return rc;
}

const struct st_decoder_ops st_squid_decoder = {
    .name = "squid",
    .decode = squid_decode,
};
