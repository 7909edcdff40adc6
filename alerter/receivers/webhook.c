/* webhook.c: the signed webhook receiver.
 *
 * One sandtrail.alert.v1 document per notification (schemas/alert.schema.json),
 * POSTed with
 *   X-Sandtrail-Delivery:  the notification's delivery id, the same on
 *                          every attempt, so a receiver can drop repeats
 *   X-Sandtrail-Timestamp: Unix seconds of this attempt
 *   X-Sandtrail-Signature: sha256=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>
 * The secret is read once from alert.webhook[.N].secret_file (trailing
 * newlines dropped); without one, no signature is sent. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "alerter.h"
#include "buf.h"
#include "http.h"
#include "log.h"
#include "timeutil.h"
#include "webhook.h"

struct webhook {
    char *url;
    char *secret;
    size_t secret_len;
    char *link_template;
    struct st_http *http;
};

void st_webhook_sign(const char *secret, size_t secret_len, const char *timestamp,
                     const char *body, size_t len, char out[72])
{
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int maclen = 0;
    struct st_buf msg;
    st_buf_init(&msg);
    st_buf_adds(&msg, timestamp);
    st_buf_addc(&msg, '.');
    st_buf_add(&msg, body, len);
    HMAC(EVP_sha256(), secret, (int)secret_len, (const unsigned char *)msg.data, msg.len,
         mac, &maclen);
    st_buf_fini(&msg);
    memcpy(out, "sha256=", 7);
    for (unsigned int i = 0; i < maclen && i < 32; i++)
        snprintf(out + 7 + 2 * i, 3, "%02x", mac[i]);
}

void *st_webhook_new(const struct st_alerter_conf *conf, const struct st_webhook_conf *wh,
                     char *errstr, size_t errsz)
{
    if (strncmp(wh->url, "http://", 7) && strncmp(wh->url, "https://", 8)) {
        snprintf(errstr, errsz, "webhook URL \"%s\" is not an http(s) URL", wh->url);
        return NULL;
    }
    struct webhook *w = st_calloc(1, sizeof(*w));
    if (wh->secret_file && *wh->secret_file) {
        FILE *f = fopen(wh->secret_file, "rb");
        char buf[4096];
        size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
        if (!f || ferror(f)) {
            snprintf(errstr, errsz, "could not read webhook secret \"%s\": %s",
                     wh->secret_file, strerror(errno));
            if (f)
                fclose(f);
            free(w);
            return NULL;
        }
        fclose(f);
        while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
            n--;
        if (n == 0) {
            snprintf(errstr, errsz, "webhook secret \"%s\" is empty", wh->secret_file);
            free(w);
            return NULL;
        }
        w->secret = st_strndup(buf, n);
        w->secret_len = n;
        memset(buf, 0, sizeof(buf));
    }
    w->url = st_strdup(wh->url);
    w->link_template = conf->link_template ? st_strdup(conf->link_template) : NULL;
    w->http = st_http_new((long)conf->timeout_ms);
    return w;
}

static void webhook_destroy(void *state)
{
    struct webhook *w = state;
    if (!w)
        return;
    st_http_destroy(w->http);
    free(w->url);
    if (w->secret)
        memset(w->secret, 0, w->secret_len);
    free(w->secret);
    free(w->link_template);
    free(w);
}

void st_webhook_post(void *state, const char *delivery_id, const char *body,
                     struct st_send_result *r)
{
    struct webhook *w = state;
    char h_delivery[256], h_ts[64], h_sig[128], ts[24], sig[72];
    const char *headers[4] = {h_delivery, h_ts, NULL, NULL};
    size_t len = strlen(body);

    snprintf(ts, sizeof(ts), "%" PRId64, st_time_now_us() / 1000000);
    snprintf(h_delivery, sizeof(h_delivery), "X-Sandtrail-Delivery: %s", delivery_id);
    snprintf(h_ts, sizeof(h_ts), "X-Sandtrail-Timestamp: %s", ts);
    if (w->secret) {
        st_webhook_sign(w->secret, w->secret_len, ts, body, len, sig);
        snprintf(h_sig, sizeof(h_sig), "X-Sandtrail-Signature: %s", sig);
        headers[2] = h_sig;
    }
    st_http_post_json(w->http, w->url, headers, body, len, r);
}

static void webhook_send(void *state, const struct st_alert *a, struct st_send_result *r)
{
    struct webhook *w = state;
    cJSON *o = st_alert_json(a, w->link_template);
    char *body = cJSON_PrintUnformatted(o);
    st_webhook_post(state, a->delivery_id, body, r);
    free(body);
    cJSON_Delete(o);
}

const struct st_receiver_ops st_receiver_webhook = {
    .kind = "webhook",
    .send = webhook_send,
    .send_digest = st_webhook_post,
    .destroy = webhook_destroy,
};
