/* smokescreen.c: Stripe Smokescreen's log, one logrus JSON object per line.
 *
 * Two messages are events (type "request", source.kind "proxy"); every other
 * line (startup and shutdown messages, errors that a canonical line repeats,
 * and the non-JSON "warn: ..." lines written before logging is set up) is
 * skipped. Event ids are "smokescreen-" + hash of the raw line: a decision
 * and the close of the same connection have different lines, hence
 * different ids; Smokescreen's own connection id is kept in attrs.conn_id to
 * join them.
 *
 * CANONICAL-PROXY-DECISION
 *   decision   "deny" when allow is false, else "allow"; in report mode
 *              (allow true, enforce_would_deny true) the decision stays
 *              "allow" and attrs.would_deny is true
 *   reason     decision_reason
 *   ts         start_time, else time (as every decoded ts: UTC, microseconds)
 *   attrs      host and port from requested_host (kept whole as host when
 *              it is not host[:port]), status from status_code
 *              (407 for a deny without one), method "CONNECT" for
 *              proxy_type connect (Smokescreen does not log the method of
 *              plain HTTP requests), dst_ip from outbound_remote_addr,
 *              error, proxy_type, project, conn_id
 * CANONICAL-PROXY-CN-CLOSE (a connection that was allowed, now closed)
 *   decision "allow", ts end_time (else time), attrs.phase "close",
 *   bytes_in, bytes_out, duration_ms (from duration in seconds), host/port,
 *   dst_ip, error, conn_id
 *
 * task_id and run_id: Smokescreen logs no request header but the trace id,
 * so the per-client values are those of the client's certificate: its first
 * OU (inbound_remote_x509_ou) when it has one, else the role (the
 * certificate's CN, which is also the key of the ACL), read as "task/run",
 * as Squid's proxy-auth user is. With the OU, certificates name a few fixed
 * roles of one ACL and each run has its own OU; the role is then kept as
 * attrs.role. A value without '/' is the task with run "unknown"; none (as
 * in the captured sample, where every line has "role":"") gives task and
 * run "unknown". project is the owner of the ACL rule, the
 * same for every task, so it is kept as attrs.project, not used as the task.
 * trace_id is trace_id when not empty (the X-Smokescreen-Trace-ID header). */
#include <math.h>
#include <string.h>

#include "decoder.h"

/* The event time: the RFC 3339 member first, else logrus's "time" (whole
 * seconds), normalized into out. */
static int pick_ts(const cJSON *doc, const char *first, char *out, size_t size,
                   struct st_reject *rej)
{
    const char *key = first, *s;
    if (st_decode_str(doc, "", first, 0, &s, rej) < 0)
        return -1;
    if (!s && st_decode_str(doc, "", key = "time", 1, &s, rej) < 0)
        return -1;
    if (st_decode_ts(s, out, size, NULL))
        return st_decode_reject(rej, ST_REASON_TIMESTAMP,
                                "field \"%s\" is not an RFC 3339 date-time", key);
    return 0;
}

/* The fields both messages carry. */
struct smk_common {
    char ts[40];
    const char *role, *ou, *trace, *requested_host, *remote, *error, *proxy_type,
        *project, *conn_id;
    char host[1024];
    const char *host_out; /* host, or requested_host as written */
    int64_t port;
};

static int smk_common(const cJSON *doc, const char *ts_key, struct smk_common *c,
                      struct st_reject *rej)
{
    if (pick_ts(doc, ts_key, c->ts, sizeof(c->ts), rej) ||
        st_decode_str(doc, "", "requested_host", 1, &c->requested_host, rej) < 0 ||
        st_decode_str(doc, "", "role", 0, &c->role, rej) < 0 ||
        st_decode_str(doc, "", "inbound_remote_x509_ou", 0, &c->ou, rej) < 0 ||
        st_decode_str(doc, "", "trace_id", 0, &c->trace, rej) < 0 ||
        st_decode_str(doc, "", "outbound_remote_addr", 0, &c->remote, rej) < 0 ||
        st_decode_str(doc, "", "error", 0, &c->error, rej) < 0 ||
        st_decode_str(doc, "", "proxy_type", 0, &c->proxy_type, rej) < 0 ||
        st_decode_str(doc, "", "project", 0, &c->project, rej) < 0 ||
        st_decode_str(doc, "", "id", 0, &c->conn_id, rej) < 0)
        return -1;
    if (*c->requested_host == '\0')
        return st_decode_reject(rej, ST_REASON_VALUE, "field \"requested_host\" is empty");
    /* what the client asked for, even when it is not host[:port]: the
     * request happened and is worth its line */
    c->host_out = c->host;
    if (st_decode_host_port(c->requested_host, strlen(c->requested_host), c->host,
                            sizeof(c->host), &c->port)) {
        c->host_out = c->requested_host;
        c->port = -1;
    }
    return 0;
}

/* The event with everything but decision, reason and attrs. */
static cJSON *smk_event(const char *line, size_t len, const struct st_decode_ctx *ctx,
                        const struct smk_common *c)
{
    char id[64];
    st_decode_line_id("smokescreen", line, len, id, sizeof(id));
    cJSON *ev = st_decode_event_new(ctx, "smokescreen", id, c->ts, "proxy");

    /* "task/run": the certificate's OU when it has one, else the role */
    const char *role = c->ou && *c->ou ? c->ou : c->role ? c->role : "";
    const char *slash = strchr(role, '/');
    size_t task_len = slash ? (size_t)(slash - role) : strlen(role);
    st_decode_add_id(ev, "task_id", role, task_len);
    if (slash && task_len > 0)
        st_decode_add_id(ev, "run_id", slash + 1, strlen(slash + 1));
    else
        st_decode_add_id(ev, "run_id", NULL, 0);
    if (c->trace && *c->trace)
        st_decode_add_id(ev, "trace_id", c->trace, strlen(c->trace));
    cJSON_AddStringToObject(ev, "type", "request");
    return ev;
}

static void smk_attrs(cJSON *attrs, const struct smk_common *c)
{
    /* the ACL role, when the run came from the OU */
    if (c->ou && *c->ou && c->role && *c->role)
        cJSON_AddStringToObject(attrs, "role", c->role);
    if (c->proxy_type && strcmp(c->proxy_type, "connect") == 0)
        cJSON_AddStringToObject(attrs, "method", "CONNECT");
    cJSON_AddStringToObject(attrs, "host", c->host_out);
    if (c->port >= 0)
        cJSON_AddNumberToObject(attrs, "port", (double)c->port);
}

static void smk_attrs_tail(cJSON *attrs, const struct smk_common *c)
{
    char ip[1024];
    int64_t ignored;
    if (c->remote &&
        st_decode_host_port(c->remote, strlen(c->remote), ip, sizeof(ip), &ignored) == 0)
        cJSON_AddStringToObject(attrs, "dst_ip", ip);
    st_decode_add_opt(attrs, "error", c->error);
    st_decode_add_opt(attrs, "proxy_type", c->proxy_type);
    st_decode_add_opt(attrs, "project", c->project);
    st_decode_add_opt(attrs, "conn_id", c->conn_id);
}

static int smk_decision(const char *line, size_t len, const cJSON *doc,
                        const struct st_decode_ctx *ctx, cJSON **out,
                        struct st_reject *rej)
{
    struct smk_common c;
    const char *reason;
    int allow, would_deny = 0;
    int64_t status = 0;
    int has_status;

    if (smk_common(doc, "start_time", &c, rej) ||
        st_decode_bool(doc, "", "allow", 1, &allow, rej) < 0 ||
        st_decode_bool(doc, "", "enforce_would_deny", 0, &would_deny, rej) < 0 ||
        st_decode_str(doc, "", "decision_reason", 0, &reason, rej) < 0 ||
        (has_status = st_decode_int(doc, "", "status_code", 0, 0, 999, &status, rej)) < 0)
        return -1;

    cJSON *ev = smk_event(line, len, ctx, &c);
    cJSON_AddStringToObject(ev, "decision", allow ? "allow" : "deny");
    if (reason && *reason)
        cJSON_AddStringToObject(ev, "reason", reason);
    cJSON *attrs = cJSON_AddObjectToObject(ev, "attrs");
    smk_attrs(attrs, &c);
    if (has_status && status > 0)
        cJSON_AddNumberToObject(attrs, "status", (double)status);
    else if (!allow)
        cJSON_AddNumberToObject(attrs, "status", 407); /* Smokescreen's refusal */
    smk_attrs_tail(attrs, &c);
    if (allow && would_deny)
        cJSON_AddBoolToObject(attrs, "would_deny", 1);
    *out = ev;
    return 0;
}

static int smk_close(const char *line, size_t len, const cJSON *doc,
                     const struct st_decode_ctx *ctx, cJSON **out, struct st_reject *rej)
{
    struct smk_common c;
    int64_t bytes_in = 0, bytes_out = 0;
    int has_in, has_out;
    const cJSON *dur = cJSON_GetObjectItemCaseSensitive(doc, "duration");

    if (smk_common(doc, "end_time", &c, rej) ||
        (has_in = st_decode_int(doc, "", "bytes_in", 0, 0, INT64_C(1) << 53, &bytes_in,
                                rej)) < 0 ||
        (has_out = st_decode_int(doc, "", "bytes_out", 0, 0, INT64_C(1) << 53,
                                 &bytes_out, rej)) < 0)
        return -1;
    if (dur && !cJSON_IsNull(dur) &&
        (!cJSON_IsNumber(dur) || !isfinite(dur->valuedouble) || dur->valuedouble < 0 ||
         dur->valuedouble > 1e9))
        return st_decode_reject(rej, ST_REASON_VALUE,
                                "field \"duration\" must be a number of seconds");

    cJSON *ev = smk_event(line, len, ctx, &c);
    cJSON_AddStringToObject(ev, "decision", "allow");
    cJSON *attrs = cJSON_AddObjectToObject(ev, "attrs");
    smk_attrs(attrs, &c);
    cJSON_AddStringToObject(attrs, "phase", "close");
    if (has_out)
        cJSON_AddNumberToObject(attrs, "bytes_out", (double)bytes_out);
    if (has_in)
        cJSON_AddNumberToObject(attrs, "bytes_in", (double)bytes_in);
    if (cJSON_IsNumber(dur))
        cJSON_AddNumberToObject(attrs, "duration_ms", dur->valuedouble * 1000.0);
    smk_attrs_tail(attrs, &c);
    *out = ev;
    return 0;
}

static int smokescreen_decode(const char *line, size_t len,
                              const struct st_decode_ctx *ctx, cJSON **out,
                              struct st_reject *rej)
{
    const char *msg;
    size_t i = 0;
    int rc;

    *out = NULL;
    if (st_decode_check_line(line, len, rej))
        return -1;
    while (i < len && (line[i] == ' ' || line[i] == '\t'))
        i++;
    if (i == len || line[i] != '{')
        return 1; /* "warn: no statsd addr provided, ..." and the like */
    cJSON *doc = st_decode_parse_object(line, len, rej);
    if (!doc)
        return -1;
    if (st_decode_str(doc, "", "msg", 1, &msg, rej) < 0)
        rc = -1;
    else if (strcmp(msg, "CANONICAL-PROXY-DECISION") == 0)
        rc = smk_decision(line, len, doc, ctx, out, rej);
    else if (strcmp(msg, "CANONICAL-PROXY-CN-CLOSE") == 0)
        rc = smk_close(line, len, doc, ctx, out, rej);
    else
        rc = 1;
    cJSON_Delete(doc);
    return rc;
}

const struct st_decoder_ops st_smokescreen_decoder = {
    .name = "smokescreen",
    .decode = smokescreen_decode,
};
