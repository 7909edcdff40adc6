/* input_http.c: POST /v1/events (see input.h).
 *
 * The body is NDJSON, optionally gzip-compressed (Content-Encoding: gzip).
 * Each caller authenticates with a bearer token from http.tokens_file, whose
 * lines are "<token> <source kind> <source name>": every event of the request
 * must claim that source, so a compromised sandbox cannot forge proxy or
 * broker events. The answer comes only once the accepted events are in
 * Kafka (and the rejected lines in the dead-letter topic):
 *   200 {"accepted":N,"rejected":M,"errors":[{"line":i,"reason":..,"error":..}]}
 *     (at most http.max_errors listed; "errors_truncated" says how many were
 *     not, "rejected_by_reason" counts them all, "dead_lettered" how many of
 *     them have a dead-letter record: at most http.max_dlq_records)
 *   400 not gzip, or data after the gzip stream   401 no or unknown token
 *   413 body over http.max_body_bytes (compressed or inflated)
 *   415 a Content-Encoding other than gzip/x-gzip
 *   503 (Retry-After) the spool is full, or, without a spool, Kafka did not
 *       acknowledge this request's messages in time: send again; event ids
 *       make a resent event a duplicate that PostgreSQL drops
 * With a spool (spool.dir) the answer waits for the spool's fsync, not for
 * Kafka; without, for the delivery reports of the request's own messages
 * (a message of another request that failed for good is not its concern).
 *
 * Threads: libmicrohttpd gives each connection its own thread (polled with
 * poll(), so no select() limit on descriptors), up to http.max_connections
 * and http.max_connections_per_ip. Up to http.concurrency requests are
 * processed at once, each on its connection's thread with a "lane" of its
 * own (an st_ingest: batches and accept workers), so a slow or heavy
 * request never stalls another; the lanes are the one serialization point
 * (a request waits for a free lane), and the producer serializes itself
 * (its lock). A request that does not send its headers within
 * http.header_timeout_ms, or its body within http.request_timeout_ms, is
 * closed by the listener's thread (reap()), whatever the bytes trickling
 * in; the idle timeout closes silent connections. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <openssl/crypto.h>
#include <zlib.h>

#include "buf.h"
#include "collector.h"
#include "http_tls.h"
#include "ingest.h"
#include "input.h"
#include "log.h"
#include "metrics.h"
#include "produce.h"
#include "redact.h"
#include "timeutil.h"

struct token {
    char *token, *kind, *name;
    char *task; /* an fnmatch(3) pattern of task ids, or NULL: any */
};

/* The tokens in force: immutable once loaded. A reload (SIGHUP) loads a
 * new table and swaps http.tokens under tokens_mu; each request holds a
 * reference (refs, guarded by tokens_mu) from its token check to its end
 * (on_done), so a request in flight finishes with the token it started
 * with, and the last reference frees an old table. */
struct tokens {
    int refs;
    struct token *v;
    size_t n;
};

/* One TCP connection, from accept to close: its deadline, checked by
 * reap(). Guarded by http.conns_mu. */
struct conn {
    struct conn *prev, *next;
    int fd;
    int64_t deadline; /* mono ms; 0 while its request is processed */
    int closed;       /* reap() shut it down */
};

/* One request at a time: an st_ingest and what its metrics were synced at.
 * Guarded by http.lanes_mu while free; owned by its request while busy. */
struct lane {
    struct st_ingest *in;
    int busy, owned; /* owned: not the caller's st_ingest */
    uint64_t *synced; /* redaction hits already added to the metrics */
};

struct http {
    struct st_ingest *in; /* the caller's: conf, producer, metrics */
    pthread_mutex_t tokens_mu;
    struct tokens *tokens; /* the table in force; guarded by tokens_mu */
    struct lane *lanes;
    int nlanes;
    pthread_mutex_t lanes_mu;
    pthread_cond_t lane_free;
    pthread_mutex_t conns_mu;
    struct conn *conns;
    long reaped; /* connections closed at a deadline, not yet logged */
    int64_t reaped_logged_ms;
    struct st_metric *m_reaped;
};

struct request {
    struct st_buf body;
    struct tokens *table; /* a reference: tok is one of its tokens */
    const struct token *tok;
    int64_t deadline; /* the whole body must be in by then */
    int too_big;
    int gzip;
};

/* The answer being built for one request: errors listed up to a cap, every
 * rejection counted by reason. */
struct answer {
    cJSON *errors, *by_reason;
    long listed, max;
};

static void tokens_free(struct tokens *t)
{
    for (size_t i = 0; t && i < t->n; i++) {
        free(t->v[i].token);
        free(t->v[i].kind);
        free(t->v[i].name);
        free(t->v[i].task);
    }
    if (t)
        free(t->v);
    free(t);
}

/* @locality any @locks takes tokens_mu */
static void tokens_unref(struct http *h, struct tokens *t)
{
    pthread_mutex_lock(&h->tokens_mu);
    int last = --t->refs == 0;
    pthread_mutex_unlock(&h->tokens_mu);
    if (last)
        tokens_free(t);
}

/* A new table (one reference: the caller's), or NULL, the error logged. */
static struct tokens *load_tokens(const char *path)
{
    char line[1024];
    FILE *f = path && *path ? fopen(path, "r") : NULL;
    if (!f) {
        st_error("could not open \"http.tokens_file\" \"%s\"", path ? path : "");
        return NULL;
    }
    struct tokens *h = st_calloc(1, sizeof(*h));
    h->refs = 1;
    while (fgets(line, sizeof(line), f)) {
        char tok[512], kind[32], name[257], task[257];
        int n = line[0] == '#' ? 0
                               : sscanf(line, "%511s %31s %256s %256s", tok, kind, name, task);
        if (n < 3)
            continue;
        if (n == 4 && task[0] == '#') /* a comment after the source */
            n = 3;
        h->v = st_realloc(h->v, (h->n + 1) * sizeof(*h->v));
        h->v[h->n].token = st_strdup(tok);
        h->v[h->n].kind = st_strdup(kind);
        h->v[h->n].name = st_strdup(name);
        h->v[h->n].task = n == 4 ? st_strdup(task) : NULL;
        h->n++;
    }
    fclose(f);
    if (!h->n) {
        st_error("\"http.tokens_file\" \"%s\" holds no token", path);
        tokens_free(h);
        return NULL;
    }
    return h;
}

/* The token of auth in the table in force, with a reference to that table
 * in *table (NULL, no reference, when unknown). Compares in constant time,
 * so the answer's timing leaks no prefix.
 * @locality a connection's thread @locks takes tokens_mu */
static const struct token *find_token(struct http *h, const char *auth,
                                      struct tokens **table)
{
    *table = NULL;
    if (!auth || strncmp(auth, "Bearer ", 7) != 0)
        return NULL;
    pthread_mutex_lock(&h->tokens_mu);
    struct tokens *tt = h->tokens;
    tt->refs++;
    pthread_mutex_unlock(&h->tokens_mu);
    const char *t = auth + 7;
    size_t n = strlen(t);
    const struct token *found = NULL;
    for (size_t i = 0; i < tt->n; i++)
        if (strlen(tt->v[i].token) == n && CRYPTO_memcmp(tt->v[i].token, t, n) == 0)
            found = &tt->v[i];
    if (found)
        *table = tt;
    else
        tokens_unref(h, tt);
    return found;
}

/* SIGHUP: the configuration again, new tokens for new requests (the
 * canaries and log.level are ingest.c's). A file that cannot be read
 * keeps every setting. @locality the listener's loop (main thread) */
static void reload(struct http *h)
{
    const struct st_collector_conf *fresh;
    struct st_reload_txn *t = st_ingest_reload_begin(h->in, &fresh);
    if (!t)
        return;
    struct tokens *nt = load_tokens(fresh->http_tokens_file);
    if (st_ingest_reload_end(h->in, t, nt != NULL) || !nt) {
        if (nt)
            tokens_free(nt);
        return;
    }
    pthread_mutex_lock(&h->tokens_mu);
    struct tokens *old = h->tokens;
    h->tokens = nt;
    pthread_mutex_unlock(&h->tokens_mu);
    st_info("reload: %zu source token(s) for new requests", nt->n);
    tokens_unref(h, old);
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *body,
                             int retry_after)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_MUST_COPY);
    MHD_add_response_header(r, "Content-Type", "application/json");
    if (retry_after)
        MHD_add_response_header(r, "Retry-After", "5");
    enum MHD_Result ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

/* Inflates a gzip body, every member of it (concatenated members are one
 * stream, RFC 1952), refusing to grow past max (a small bomb must not cost
 * memory). Returns 0; 1 when too big; -1 when not gzip or cut short; -2
 * when something other than a gzip member follows the stream. */
static int gunzip(const struct st_buf *in, size_t max, struct st_buf *out)
{
    z_stream z;
    unsigned char chunk[16384];
    int rc, ret = -1;

    memset(&z, 0, sizeof(z));
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK)
        return -1;
    z.next_in = (unsigned char *)in->data;
    z.avail_in = (uInt)in->len;
    st_buf_adds(out, "");
    for (;;) {
        z.next_out = chunk;
        z.avail_out = sizeof(chunk);
        rc = inflate(&z, Z_NO_FLUSH);
        if (rc != Z_OK && rc != Z_STREAM_END)
            break; /* Z_BUF_ERROR: the input ended inside a member */
        st_buf_add(out, chunk, sizeof(chunk) - z.avail_out);
        if (out->len > max) {
            ret = 1;
            break;
        }
        if (rc != Z_STREAM_END)
            continue;
        if (z.avail_in == 0) {
            ret = 0;
            break;
        }
        if (z.avail_in < 2 || z.next_in[0] != 0x1f || z.next_in[1] != 0x8b) {
            ret = -2;
            break;
        }
        inflateReset(&z); /* the next member */
    }
    inflateEnd(&z);
    return ret;
}

/* Each rejected line of a request: listed in its answer up to the cap,
 * counted by reason always. */
static void add_error(void *arg, long lineno, const struct st_reject *rej)
{
    struct answer *a = arg;
    cJSON *n = cJSON_GetObjectItemCaseSensitive(a->by_reason, rej->code);
    if (n)
        cJSON_SetNumberValue(n, n->valuedouble + 1);
    else
        cJSON_AddNumberToObject(a->by_reason, rej->code, 1);
    if (a->listed >= a->max)
        return;
    a->listed++;
    cJSON *e = cJSON_CreateObject();
    cJSON_AddNumberToObject(e, "line", (double)lineno);
    cJSON_AddStringToObject(e, "reason", rej->code);
    cJSON_AddStringToObject(e, "error", rej->msg);
    cJSON_AddItemToArray(a->errors, e);
}

/* A free lane, waiting for one when every lane is busy: the one place
 * requests wait for each other (http.concurrency of them run at once).
 * @locality a connection's thread @locks takes lanes_mu */
static struct lane *lane_take(struct http *h)
{
    pthread_mutex_lock(&h->lanes_mu);
    struct lane *l = NULL;
    for (;;) {
        for (int k = 0; k < h->nlanes && !l; k++)
            if (!h->lanes[k].busy)
                l = &h->lanes[k];
        if (l)
            break;
        pthread_cond_wait(&h->lane_free, &h->lanes_mu);
    }
    l->busy = 1;
    pthread_mutex_unlock(&h->lanes_mu);
    return l;
}

/* @locality a connection's thread @locks takes lanes_mu */
static void lane_give(struct http *h, struct lane *l)
{
    pthread_mutex_lock(&h->lanes_mu);
    l->busy = 0;
    pthread_cond_signal(&h->lane_free);
    pthread_mutex_unlock(&h->lanes_mu);
}

/* Adds the lane's new redactions to the metrics. Its workers are idle:
 * st_ingest_drain returned. @locality the lane's owner */
static void lane_sync_metrics(struct lane *l)
{
    char labels[96];
    for (size_t i = 0; i < st_ingest_nrules(l->in); i++) {
        uint64_t hits = st_ingest_rule_hits(l->in, i);
        if (hits == l->synced[i])
            continue;
        snprintf(labels, sizeof(labels), "rule=\"%s\"", st_ingest_rule_name(l->in, i));
        st_metric_add(st_metric_get(l->in->metrics, ST_METRIC_COUNTER,
                                    "sandtrail_collector_redactions_total",
                                    "values redacted, by rule", labels),
                      (int64_t)(hits - l->synced[i]));
        l->synced[i] = hits;
    }
}

/* The connection's entry (NULL when it has none). */
static struct conn *conn_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* @locality a connection's thread @locks takes conns_mu */
static void conn_deadline(struct http *h, struct MHD_Connection *c, int64_t ms)
{
    struct conn *cn = conn_of(c);
    if (!cn)
        return;
    pthread_mutex_lock(&h->conns_mu);
    cn->deadline = ms ? st_time_mono_ms() + ms : 0;
    pthread_mutex_unlock(&h->conns_mu);
}

/* Decodes, accepts and produces one request's body on a lane of its own,
 * then answers once its own messages are durable.
 * @locality a connection's thread @locks a lane (lane_take), the
 * producer's inside st_producer_* */
static enum MHD_Result process(struct http *h, struct MHD_Connection *c,
                               struct request *rq)
{
    const struct st_collector_conf *conf = h->in->conf;
    size_t max_line = (size_t)conf->max_line_bytes;
    struct st_buf plain;
    const struct st_buf *body = &rq->body;

    st_buf_init(&plain);
    if (rq->gzip) {
        int g = gunzip(&rq->body, (size_t)conf->http_max_body, &plain);
        if (g) {
            st_buf_fini(&plain);
            return g > 0 ? reply(c, 413, "{\"error\":\"body too large once inflated\"}", 0)
                   : g == -2
                       ? reply(c, 400,
                               "{\"error\":\"data after the gzip stream\","
                               "\"reason\":\"gzip_trailing_data\"}",
                               0)
                       : reply(c, 400,
                               "{\"error\":\"body is not valid gzip\","
                               "\"reason\":\"gzip_invalid\"}",
                               0);
        }
        body = &plain;
    }
    struct lane *lane = lane_take(h);
    struct st_ingest *in = lane->in;
    long accepted = in->stats.accepted, rejected = in->stats.rejected;
    struct answer a = {cJSON_CreateArray(), cJSON_CreateObject(), 0, (long)conf->http_max_errors};
    in->lineno = 0;
    in->input_name = "http";
    in->allow_kind = rq->tok->kind;
    in->allow_name = rq->tok->name;
    in->allow_task = rq->tok->task;
    in->on_reject = add_error;
    in->on_reject_arg = &a;
    in->dlq_max = (long)conf->http_max_dlq;
    in->dlq_count = 0;
    /* without a spool, this request's messages are tracked on their own */
    struct st_delivery *d = st_producer_track(in->prod);
    const char *p = body->data ? body->data : "", *end = p + body->len;
    int fatal = 0;
    while (p < end && !fatal) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
        size_t used = len;
        if (len && p[len - 1] == '\r')
            len--;
        int too_long = len > max_line;
        if (st_ingest_add(in, p, too_long ? max_line : len, too_long) < 0)
            fatal = 1;
        p += used + (nl ? 1 : 0);
    }
    if (st_ingest_drain(in) < 0)
        fatal = 1;
    in->allow_kind = in->allow_name = in->allow_task = NULL;
    in->on_reject = NULL;
    st_buf_fini(&plain);
    long n_acc = in->stats.accepted - accepted, n_rej = in->stats.rejected - rejected;
    long dead_lettered = in->dlq_count;
    lane_sync_metrics(lane);
    lane_give(h, lane);
    if (n_rej > dead_lettered)
        st_warn("http: %s/%s: %ld rejected line(s) past http.max_dlq_records=%ld have no "
                "dead-letter record (counted in the answer and the metrics)",
                rq->tok->kind, rq->tok->name, n_rej - dead_lettered, dead_lettered);

    /* durable before we answer: everything of this request acknowledged */
    int wait_ms = fatal ? 0 : (int)conf->delivery_timeout_ms + 2000;
    int64_t undelivered = d ? st_producer_track_wait(in->prod, d, wait_ms)
                            : fatal ? 1
                                    : st_producer_durable(in->prod, wait_ms);
    cJSON *resp = cJSON_CreateObject();
    enum MHD_Result ret;
    if (undelivered || fatal) {
        cJSON_Delete(a.errors);
        cJSON_Delete(a.by_reason);
        cJSON_AddStringToObject(resp, "error",
                                "Kafka did not acknowledge every event: send the batch again");
        char *text = cJSON_PrintUnformatted(resp);
        ret = reply(c, 503, text, 1);
        free(text);
    } else {
        cJSON_AddNumberToObject(resp, "accepted", (double)n_acc);
        cJSON_AddNumberToObject(resp, "rejected", (double)n_rej);
        cJSON_AddItemToObject(resp, "errors", a.errors);
        cJSON_AddNumberToObject(resp, "errors_truncated", (double)(n_rej - a.listed));
        cJSON_AddItemToObject(resp, "rejected_by_reason", a.by_reason);
        cJSON_AddNumberToObject(resp, "dead_lettered", (double)dead_lettered);
        char *text = cJSON_PrintUnformatted(resp);
        ret = reply(c, 200, text, 0);
        free(text);
    }
    cJSON_Delete(resp);
    return ret;
}

/* 0 no encoding, 1 gzip, -1 one we do not read. */
static int encoding(const char *ce)
{
    if (!ce || !*ce || !strcasecmp(ce, "identity"))
        return 0;
    return !strcasecmp(ce, "gzip") || !strcasecmp(ce, "x-gzip") ? 1 : -1;
}

/* @locality a connection's thread */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_size, void **state)
{
    struct http *h = cls;
    struct request *rq = *state;
    const struct st_collector_conf *conf = h->in->conf;
    size_t max = (size_t)conf->http_max_body;

    if (!rq) {
        if (strcmp(url, "/v1/events") != 0)
            return reply(c, 404, "{\"error\":\"not found: POST /v1/events\"}", 0);
        if (strcmp(method, "POST") != 0)
            return reply(c, 405, "{\"error\":\"use POST\"}", 0);
        struct tokens *table;
        const struct token *tok = find_token(
            h, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization"), &table);
        if (!tok)
            return reply(c, 401, "{\"error\":\"missing or unknown bearer token\"}", 0);
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        int gz = encoding(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Encoding"));
        int full = st_producer_full(h->in->prod), big = cl && strtoull(cl, NULL, 10) > max;
        if (full || big || gz < 0) {
            tokens_unref(h, table); /* answered now: the request holds none */
            if (full)
                return reply(c, 503, "{\"error\":\"the spool is full: Kafka is behind\"}",
                             1);
            if (big)
                return reply(c, 413, "{\"error\":\"body larger than http.max_body_bytes\"}",
                             0);
            return reply(c, 415,
                         "{\"error\":\"unsupported Content-Encoding: gzip, x-gzip or none\"}",
                         0);
        }
        rq = st_calloc(1, sizeof(*rq));
        st_buf_init(&rq->body);
        rq->table = table;
        rq->tok = tok;
        rq->gzip = gz;
        rq->deadline = st_time_mono_ms() + conf->http_request_ms;
        conn_deadline(h, c, conf->http_request_ms);
        *state = rq;
        return MHD_YES;
    }
    if (*upload_size) {
        /* a body that trickles in past its deadline is cut here (reap()
         * cuts one that stops) */
        if (st_time_mono_ms() > rq->deadline)
            return MHD_NO;
        if (rq->body.len + *upload_size > max)
            rq->too_big = 1; /* keep reading, keep nothing */
        else
            st_buf_add(&rq->body, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    if (rq->too_big)
        return reply(c, 413, "{\"error\":\"body larger than http.max_body_bytes\"}", 0);
    conn_deadline(h, c, 0); /* processing is bounded by the delivery timeout */
    return process(h, c, rq);
}

/* The end of a request: the connection's next request has
 * http.header_timeout_ms again. @locality a connection's thread */
static void on_done(void *cls, struct MHD_Connection *c, void **state,
                    enum MHD_RequestTerminationCode code)
{
    struct http *h = cls;
    struct request *rq = *state;
    conn_deadline(h, c, h->in->conf->http_header_ms);
    if (!rq)
        return;
    st_buf_fini(&rq->body);
    tokens_unref(h, rq->table);
    free(rq);
    *state = NULL;
}

/* A connection opens or closes. libmicrohttpd reports the close before it
 * closes the socket, so an entry's fd is the connection's while listed.
 * @locality the listener's or the connection's thread @locks conns_mu */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    struct http *h = cls;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        struct conn *cn = st_calloc(1, sizeof(*cn));
        cn->fd = ci ? ci->connect_fd : -1;
        cn->deadline = st_time_mono_ms() + h->in->conf->http_header_ms;
        pthread_mutex_lock(&h->conns_mu);
        cn->next = h->conns;
        if (h->conns)
            h->conns->prev = cn;
        h->conns = cn;
        pthread_mutex_unlock(&h->conns_mu);
        *socket_context = cn;
        return;
    }
    struct conn *cn = *socket_context;
    if (!cn)
        return;
    pthread_mutex_lock(&h->conns_mu);
    if (cn->prev)
        cn->prev->next = cn->next;
    else
        h->conns = cn->next;
    if (cn->next)
        cn->next->prev = cn->prev;
    pthread_mutex_unlock(&h->conns_mu);
    free(cn);
    *socket_context = NULL;
}

/* Closes the connections past their deadline (headers or body not in
 * time, however slowly the bytes come): shutdown() wakes the connection's
 * thread, which closes it. @locality the listener's loop @locks conns_mu */
static void reap(struct http *h)
{
    int64_t now = st_time_mono_ms();
    long n = 0;
    pthread_mutex_lock(&h->conns_mu);
    for (struct conn *cn = h->conns; cn; cn = cn->next)
        if (!cn->closed && cn->deadline && now > cn->deadline && cn->fd >= 0) {
            shutdown(cn->fd, SHUT_RDWR);
            cn->closed = 1;
            n++;
        }
    pthread_mutex_unlock(&h->conns_mu);
    h->reaped += n;
    if (n && h->m_reaped)
        st_metric_add(h->m_reaped, n);
    if (h->reaped && now - h->reaped_logged_ms > 10000) {
        st_warn("http: closed %ld connection(s) that did not send their request within "
                "http.header_timeout_ms / http.request_timeout_ms",
                h->reaped);
        h->reaped = 0;
        h->reaped_logged_ms = now;
    }
}

int st_input_http(struct st_ingest *in, volatile sig_atomic_t *stop)
{
    const struct st_collector_conf *conf = in->conf;
    struct http h;
    struct sockaddr_in sa;
    struct st_http_tls tls = {0};
    char host[64], errstr[512];
    int port, rc = -1;
    struct MHD_Daemon *d = NULL;

    memset(&h, 0, sizeof(h));
    h.in = in;
    pthread_mutex_init(&h.lanes_mu, NULL);
    pthread_cond_init(&h.lane_free, NULL);
    pthread_mutex_init(&h.conns_mu, NULL);
    pthread_mutex_init(&h.tokens_mu, NULL);
    if (!(h.tokens = load_tokens(conf->http_tokens_file)))
        goto out;
    if (sscanf(conf->http_listen, "%63[^:]:%d", host, &port) != 2 || port <= 0 ||
        port > 65535) {
        st_error("invalid value for \"http.listen\": \"%s\" (host:port)", conf->http_listen);
        goto out;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        st_error("invalid value for \"http.listen\": \"%s\" is not an IPv4 address", host);
        goto out;
    }
    /* lane 0 is the caller's st_ingest, the others our own */
    h.nlanes = (int)conf->http_concurrency;
    h.lanes = st_calloc((size_t)h.nlanes, sizeof(*h.lanes));
    for (int k = 0; k < h.nlanes; k++) {
        struct lane *l = &h.lanes[k];
        if (k == 0) {
            l->in = in;
        } else {
            l->in = st_calloc(1, sizeof(*l->in));
            l->owned = 1;
            if (st_ingest_init_lane(l->in, in, "http", errstr, sizeof(errstr))) {
                st_error("%s", errstr);
                free(l->in);
                l->in = NULL;
                goto out;
            }
        }
        l->synced = st_calloc(st_ingest_nrules(l->in) + 1, sizeof(*l->synced));
        for (size_t i = 0; i < st_ingest_nrules(l->in); i++)
            l->synced[i] = st_ingest_rule_hits(l->in, i);
    }
    h.m_reaped = st_metric_get(in->metrics, ST_METRIC_COUNTER,
                               "sandtrail_collector_http_deadline_closed_total",
                               "connections closed for not sending their request in time",
                               "");
    if (st_http_tls_init(&tls, conf, errstr, sizeof(errstr))) {
        st_error("%s", errstr);
        goto out;
    }
    d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL |
            tls.flags,
        (uint16_t)port, NULL, NULL, on_request, &h, MHD_OPTION_SOCK_ADDR, &sa,
        MHD_OPTION_NOTIFY_COMPLETED, on_done, &h, MHD_OPTION_NOTIFY_CONNECTION,
        on_connection, &h, MHD_OPTION_CONNECTION_LIMIT, (unsigned)conf->http_max_conns,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)conf->http_max_conns_ip,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)conf->http_idle_s, MHD_OPTION_ARRAY,
        tls.opts, MHD_OPTION_END);
    if (!d) {
        st_error("could not listen on \"%s\"", conf->http_listen);
        goto out;
    }
    st_info("listening on %s://%s/v1/events (%zu source token(s), %d request(s) at "
            "once, %" PRId64 " connections)",
            tls.flags ? "https" : "http", conf->http_listen, h.tokens->n, h.nlanes, conf->http_max_conns);
    while (!*stop) {
        reload(&h);
        st_producer_poll(in->prod);
        reap(&h);
        usleep(100000);
    }
    rc = 0;
out:
    if (d)
        MHD_stop_daemon(d); /* joins every connection's thread */
    st_http_tls_fini(&tls);
    for (int k = 0; k < h.nlanes; k++) {
        struct lane *l = &h.lanes[k];
        if (l->owned && l->in) {
            st_ingest_absorb(in, l->in); /* the run's totals, for the summary */
            st_ingest_fini(l->in);
            free(l->in);
        }
        free(l->synced);
    }
    free(h.lanes);
    tokens_free(h.tokens); /* every request is over: the last reference */
    pthread_mutex_destroy(&h.tokens_mu);
    pthread_mutex_destroy(&h.lanes_mu);
    pthread_cond_destroy(&h.lane_free);
    pthread_mutex_destroy(&h.conns_mu);
    return rc;
}
