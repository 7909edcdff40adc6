/* http.c: JSON POSTs over libcurl (see http.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <curl/curl.h>

#include "http.h"
#include "log.h"

struct st_http {
    CURL *curl;
    long timeout_ms;
    int64_t retry_after_s; /* of the answer being read */
};

struct st_http *st_http_new(long timeout_ms)
{
    static int global_done;
    if (!global_done) {
        curl_global_init(CURL_GLOBAL_DEFAULT);
        global_done = 1;
    }
    struct st_http *h = st_calloc(1, sizeof(*h));
    h->curl = curl_easy_init();
    if (!h->curl)
        st_fatal("could not initialize libcurl");
    h->timeout_ms = timeout_ms;
    return h;
}

void st_http_destroy(struct st_http *h)
{
    if (!h)
        return;
    curl_easy_cleanup(h->curl);
    free(h);
}

static size_t drop_body(char *p, size_t size, size_t n, void *arg)
{
    return size * n;
}

/* Retry-After in seconds (the HTTP-date form is rare for these APIs and
 * falls back to our own backoff) */
static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
    struct st_http *h = arg;
    size_t len = size * n;
    static const char name[] = "retry-after:";
    if (len > sizeof(name) - 1 && strncasecmp(p, name, sizeof(name) - 1) == 0) {
        char v[32];
        size_t vl = len - (sizeof(name) - 1);
        if (vl >= sizeof(v))
            vl = sizeof(v) - 1;
        memcpy(v, p + sizeof(name) - 1, vl);
        v[vl] = '\0';
        char *end;
        long s = strtol(v, &end, 10);
        while (*end == ' ' || *end == '\r' || *end == '\n')
            end++;
        if (end != v && *end == '\0' && s >= 0)
            h->retry_after_s = s;
    }
    return len;
}

void st_http_post_json(struct st_http *h, const char *url, const char *const *headers,
                       const char *body, size_t len, struct st_send_result *r)
{
    struct curl_slist *hl = curl_slist_append(NULL, "Content-Type: application/json");
    for (size_t i = 0; headers && headers[i]; i++)
        hl = curl_slist_append(hl, headers[i]);
    hl = curl_slist_append(hl, "Expect:");

    CURL *c = h->curl;
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POST, 1L);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, hl);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, h->timeout_ms);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, h->timeout_ms);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, drop_body);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, h);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "sandtrail-alerter");
    h->retry_after_s = -1;

    memset(r, 0, sizeof(*r));
    CURLcode rc = curl_easy_perform(c);
    r->retry_after_s = h->retry_after_s;
    if (rc != CURLE_OK) {
        r->outcome = ST_SEND_RETRY;
        snprintf(r->error, sizeof(r->error), "%s", curl_easy_strerror(rc));
    } else {
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r->http_status);
        long s = r->http_status;
        if (s >= 200 && s < 300)
            r->outcome = ST_SEND_DELIVERED;
        else if (s == 408 || s == 429 || s >= 500)
            r->outcome = ST_SEND_RETRY;
        else
            r->outcome = ST_SEND_FAILED;
        if (r->outcome != ST_SEND_DELIVERED)
            snprintf(r->error, sizeof(r->error), "HTTP status %ld", s);
    }
    curl_slist_free_all(hl);
}
