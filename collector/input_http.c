/* input_http.c: POST /v1/events (see input.h).
 *
 * The body is NDJSON, optionally gzip-compressed (Content-Encoding: gzip).
 * Each caller authenticates with a bearer token from http.tokens_file, whose
 * lines are "<token> <source kind> <source name>": every event of the request
 * must claim that source, so a compromised sandbox cannot forge proxy or
 * broker events. The answer comes only once the accepted events are in
 * Kafka (and the rejected lines in the dead-letter topic):
 *   200 {"accepted":N,"rejected":M,"errors":[{"line":i,"reason":..,"error":..}]}
 *   401 no or unknown token     413 body over http.max_body_bytes
 *   503 (Retry-After) the spool is full, or, without a spool, Kafka did not
 *       acknowledge in time: send again; event ids make a resent event a
 *       duplicate that PostgreSQL drops
 * With a spool (spool.dir) the answer waits for the spool's fsync, not for
 * Kafka.
 * libmicrohttpd runs one thread; requests are handled one at a time (the
 * lines of one request are accepted by ingest.c's workers), which keeps the
 * producer single-threaded. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <zlib.h>

#include "buf.h"
#include "collector.h"
#include "ingest.h"
#include "input.h"
#include "log.h"
#include "produce.h"

struct token {
    char *token, *kind, *name;
};

struct http {
    struct st_ingest *in;
    struct token *tokens;
    size_t ntokens;
};

struct request {
    struct st_buf body;
    const struct token *tok;
    int too_big;
    int gzip;
};

static int load_tokens(struct http *h, const char *path)
{
    char line[1024];
    FILE *f = path && *path ? fopen(path, "r") : NULL;
    if (!f) {
        st_error("could not open \"http.tokens_file\" \"%s\"", path ? path : "");
        return -1;
    }
    while (fgets(line, sizeof(line), f)) {
        char tok[512], kind[32], name[257];
        if (line[0] == '#' || sscanf(line, "%511s %31s %256s", tok, kind, name) != 3)
            continue;
        h->tokens = st_realloc(h->tokens, (h->ntokens + 1) * sizeof(*h->tokens));
        h->tokens[h->ntokens].token = st_strdup(tok);
        h->tokens[h->ntokens].kind = st_strdup(kind);
        h->tokens[h->ntokens].name = st_strdup(name);
        h->ntokens++;
    }
    fclose(f);
    return h->ntokens ? 0 : -1;
}

/* Compares in constant time, so the answer's timing leaks no prefix. */
static const struct token *find_token(const struct http *h, const char *auth)
{
    if (!auth || strncmp(auth, "Bearer ", 7) != 0)
        return NULL;
    const char *t = auth + 7;
    size_t n = strlen(t);
    const struct token *found = NULL;
    for (size_t i = 0; i < h->ntokens; i++)
        if (strlen(h->tokens[i].token) == n && CRYPTO_memcmp(h->tokens[i].token, t, n) == 0)
            found = &h->tokens[i];
    return found;
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

/* Inflates a gzip body, refusing to grow past max (a small bomb must not
 * cost memory). Returns 0, 1 when too big, -1 when not gzip. */
static int gunzip(const struct st_buf *in, size_t max, struct st_buf *out)
{
    z_stream z;
    unsigned char chunk[16384];
    int rc;

    memset(&z, 0, sizeof(z));
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK)
        return -1;
    z.next_in = (unsigned char *)in->data;
    z.avail_in = (uInt)in->len;
    st_buf_adds(out, "");
    do {
        z.next_out = chunk;
        z.avail_out = sizeof(chunk);
        rc = inflate(&z, Z_NO_FLUSH);
        if (rc != Z_OK && rc != Z_STREAM_END) {
            inflateEnd(&z);
            return -1;
        }
        st_buf_add(out, chunk, sizeof(chunk) - z.avail_out);
        if (out->len > max) {
            inflateEnd(&z);
            return 1;
        }
    } while (rc != Z_STREAM_END && z.avail_in > 0);
    inflateEnd(&z);
    return rc == Z_STREAM_END ? 0 : -1;
}

/* Each rejected line of a request, in its answer. */
static void add_error(void *arg, long lineno, const struct st_reject *rej)
{
    cJSON *e = cJSON_CreateObject();
    cJSON_AddNumberToObject(e, "line", (double)lineno);
    cJSON_AddStringToObject(e, "reason", rej->code);
    cJSON_AddStringToObject(e, "error", rej->msg);
    cJSON_AddItemToArray((cJSON *)arg, e);
}

static enum MHD_Result process(struct http *h, struct MHD_Connection *c,
                               struct request *rq)
{
    struct st_ingest *in = h->in;
    size_t max_line = (size_t)in->conf->max_line_bytes;
    struct st_buf plain;
    const struct st_buf *body = &rq->body;
    long accepted = in->stats.accepted, rejected = in->stats.rejected;

    st_buf_init(&plain);
    if (rq->gzip) {
        int g = gunzip(&rq->body, (size_t)in->conf->http_max_body, &plain);
        if (g) {
            st_buf_fini(&plain);
            return g > 0 ? reply(c, 413, "{\"error\":\"body too large once inflated\"}", 0)
                         : reply(c, 400, "{\"error\":\"body is not valid gzip\"}", 0);
        }
        body = &plain;
    }
    cJSON *resp = cJSON_CreateObject();
    cJSON *errors = cJSON_CreateArray();
    in->lineno = 0;
    in->input_name = "http";
    in->allow_kind = rq->tok->kind;
    in->allow_name = rq->tok->name;
    in->on_reject = add_error;
    in->on_reject_arg = errors;
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
    in->allow_kind = in->allow_name = NULL;
    in->on_reject = NULL;
    st_buf_fini(&plain);

    /* durable before we answer: everything of this request acknowledged */
    int64_t undelivered = fatal ? 1 : st_producer_durable(in->prod,
                                                          (int)in->conf->delivery_timeout_ms);
    st_ingest_sync_metrics(in);
    enum MHD_Result ret;
    if (undelivered) {
        cJSON_Delete(errors);
        cJSON_AddStringToObject(resp, "error",
                                "Kafka did not acknowledge every event: send the batch again");
        char *text = cJSON_PrintUnformatted(resp);
        ret = reply(c, 503, text, 1);
        free(text);
    } else {
        cJSON_AddNumberToObject(resp, "accepted", (double)(in->stats.accepted - accepted));
        cJSON_AddNumberToObject(resp, "rejected", (double)(in->stats.rejected - rejected));
        cJSON_AddItemToObject(resp, "errors", errors);
        char *text = cJSON_PrintUnformatted(resp);
        ret = reply(c, 200, text, 0);
        free(text);
    }
    cJSON_Delete(resp);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_size, void **state)
{
    struct http *h = cls;
    struct request *rq = *state;
    size_t max = (size_t)h->in->conf->http_max_body;

    if (!rq) {
        if (strcmp(url, "/v1/events") != 0)
            return reply(c, 404, "{\"error\":\"not found: POST /v1/events\"}", 0);
        if (strcmp(method, "POST") != 0)
            return reply(c, 405, "{\"error\":\"use POST\"}", 0);
        const struct token *tok = find_token(
            h, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization"));
        if (!tok)
            return reply(c, 401, "{\"error\":\"missing or unknown bearer token\"}", 0);
        if (st_producer_full(h->in->prod))
            return reply(c, 503, "{\"error\":\"the spool is full: Kafka is behind\"}", 1);
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > max)
            return reply(c, 413, "{\"error\":\"body larger than http.max_body_bytes\"}", 0);
        const char *ce = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Encoding");
        rq = st_calloc(1, sizeof(*rq));
        st_buf_init(&rq->body);
        rq->tok = tok;
        rq->gzip = ce && strcmp(ce, "gzip") == 0;
        *state = rq;
        return MHD_YES;
    }
    if (*upload_size) {
        if (rq->body.len + *upload_size > max)
            rq->too_big = 1; /* keep reading, keep nothing */
        else
            st_buf_add(&rq->body, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    if (rq->too_big)
        return reply(c, 413, "{\"error\":\"body larger than http.max_body_bytes\"}", 0);
    return process(h, c, rq);
}

static void on_done(void *cls, struct MHD_Connection *c, void **state,
                    enum MHD_RequestTerminationCode code)
{
    struct request *rq = *state;
    if (!rq)
        return;
    st_buf_fini(&rq->body);
    free(rq);
    *state = NULL;
}

int st_input_http(struct st_ingest *in, volatile sig_atomic_t *stop)
{
    const struct st_collector_conf *conf = in->conf;
    struct http h = {in, NULL, 0};
    struct sockaddr_in sa;
    char host[64];
    int port, rc = -1;

    if (load_tokens(&h, conf->http_tokens_file))
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
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD, (uint16_t)port, NULL, NULL, on_request, &h,
        MHD_OPTION_SOCK_ADDR, &sa, MHD_OPTION_NOTIFY_COMPLETED, on_done, NULL,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)30, MHD_OPTION_END);
    if (!d) {
        st_error("could not listen on \"%s\"", conf->http_listen);
        goto out;
    }
    st_info("listening on http://%s/v1/events (%zu source token(s))", conf->http_listen,
            h.ntokens);
    while (!*stop) {
        st_producer_poll(in->prod);
        usleep(100000);
    }
    MHD_stop_daemon(d);
    rc = 0;
out:
    for (size_t i = 0; i < h.ntokens; i++) {
        free(h.tokens[i].token);
        free(h.tokens[i].kind);
        free(h.tokens[i].name);
    }
    free(h.tokens);
    return rc;
}
