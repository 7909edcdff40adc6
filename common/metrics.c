/* metrics.c: Prometheus metrics (see metrics.h). */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <microhttpd.h>

#include "buf.h"
#include "log.h"
#include "metrics.h"

static const double buckets[] = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                 0.05,   0.1,   0.25,   0.5,   1,    2.5};
#define NBUCKETS (sizeof(buckets) / sizeof(buckets[0]))

struct st_metric {
    enum st_metric_type type;
    char *name, *help, *labels;
    _Atomic int64_t value;             /* counter, gauge */
    _Atomic uint64_t counts[NBUCKETS + 1]; /* histogram; the last is +Inf */
    _Atomic uint64_t sum_us;
    struct st_metric *next;
};

struct st_metrics {
    pthread_mutex_t lock; /* guards the list and unready, not the values */
    struct st_metric *head, *tail;
    struct MHD_Daemon *httpd;
    char *unready; /* why /readyz answers 503; NULL: ready */
};

struct st_metrics *st_metrics_new(void)
{
    struct st_metrics *m = st_calloc(1, sizeof(*m));
    pthread_mutex_init(&m->lock, NULL);
    m->unready = st_strdup("starting");
    return m;
}

void st_metrics_destroy(struct st_metrics *m)
{
    if (!m)
        return;
    if (m->httpd)
        MHD_stop_daemon(m->httpd);
    for (struct st_metric *s = m->head, *n; s; s = n) {
        n = s->next;
        free(s->name);
        free(s->help);
        free(s->labels);
        free(s);
    }
    pthread_mutex_destroy(&m->lock);
    free(m->unready);
    free(m);
}

void st_metrics_set_ready(struct st_metrics *m, const char *reason)
{
    pthread_mutex_lock(&m->lock);
    if (!reason ? m->unready != NULL : !m->unready || strcmp(m->unready, reason) != 0) {
        free(m->unready);
        m->unready = reason ? st_strdup(reason) : NULL;
    }
    pthread_mutex_unlock(&m->lock);
}

static enum MHD_Result answer(struct MHD_Connection *conn, unsigned status, char *text)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", "text/plain; charset=utf-8");
    enum MHD_Result ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

struct st_metric *st_metric_get(struct st_metrics *m, enum st_metric_type type,
                                const char *name, const char *help, const char *labels)
{
    struct st_metric *s;
    pthread_mutex_lock(&m->lock);
    for (s = m->head; s; s = s->next)
        if (!strcmp(s->name, name) && !strcmp(s->labels, labels))
            break;
    if (!s) {
        s = st_calloc(1, sizeof(*s));
        s->type = type;
        s->name = st_strdup(name);
        s->help = st_strdup(help);
        s->labels = st_strdup(labels);
        /* series of one name stay together, as the format wants */
        struct st_metric *after = NULL;
        for (struct st_metric *x = m->head; x; x = x->next)
            if (!strcmp(x->name, name))
                after = x;
        if (after) {
            s->next = after->next;
            after->next = s;
            if (m->tail == after)
                m->tail = s;
        } else if (m->tail) {
            m->tail->next = s;
            m->tail = s;
        } else {
            m->head = m->tail = s;
        }
    }
    pthread_mutex_unlock(&m->lock);
    return s;
}

void st_metric_add(struct st_metric *s, int64_t v)
{
    atomic_fetch_add_explicit(&s->value, v, memory_order_relaxed);
}

void st_metric_set(struct st_metric *s, int64_t v)
{
    atomic_store_explicit(&s->value, v, memory_order_relaxed);
}

void st_metric_observe(struct st_metric *s, double seconds)
{
    size_t i = 0;
    while (i < NBUCKETS && seconds > buckets[i])
        i++;
    atomic_fetch_add_explicit(&s->counts[i], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->sum_us, (uint64_t)(seconds * 1e6), memory_order_relaxed);
}

static void render_labels(struct st_buf *b, const char *labels, const char *extra)
{
    if (!*labels && !extra)
        return;
    st_buf_addc(b, '{');
    st_buf_adds(b, labels);
    if (extra) {
        if (*labels)
            st_buf_addc(b, ',');
        st_buf_adds(b, extra);
    }
    st_buf_addc(b, '}');
}

char *st_metrics_render(struct st_metrics *m)
{
    static const char *types[] = {"counter", "gauge", "histogram"};
    struct st_buf b;
    const char *last = "";

    st_buf_init(&b);
    st_buf_adds(&b, "");
    pthread_mutex_lock(&m->lock);
    for (struct st_metric *s = m->head; s; s = s->next) {
        if (strcmp(s->name, last) != 0) {
            st_buf_printf(&b, "# HELP %s %s\n# TYPE %s %s\n", s->name, s->help, s->name,
                          types[s->type]);
            last = s->name;
        }
        if (s->type != ST_METRIC_HISTOGRAM) {
            st_buf_adds(&b, s->name);
            render_labels(&b, s->labels, NULL);
            st_buf_printf(&b, " %lld\n", (long long)atomic_load(&s->value));
            continue;
        }
        uint64_t cum = 0;
        char le[48];
        for (size_t i = 0; i <= NBUCKETS; i++) {
            cum += atomic_load(&s->counts[i]);
            if (i < NBUCKETS)
                snprintf(le, sizeof(le), "le=\"%g\"", buckets[i]);
            else
                snprintf(le, sizeof(le), "le=\"+Inf\"");
            st_buf_printf(&b, "%s_bucket", s->name);
            render_labels(&b, s->labels, le);
            st_buf_printf(&b, " %llu\n", (unsigned long long)cum);
        }
        st_buf_printf(&b, "%s_sum", s->name);
        render_labels(&b, s->labels, NULL);
        st_buf_printf(&b, " %.6f\n", (double)atomic_load(&s->sum_us) / 1e6);
        st_buf_printf(&b, "%s_count", s->name);
        render_labels(&b, s->labels, NULL);
        st_buf_printf(&b, " %llu\n", (unsigned long long)cum);
    }
    pthread_mutex_unlock(&m->lock);
    return b.data;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_size,
                                  void **con_cls)
{
    struct st_metrics *m = cls;
    struct MHD_Response *r;
    enum MHD_Result ret;

    if (strcmp(method, "GET") == 0 && strcmp(url, "/healthz") == 0)
        return answer(conn, MHD_HTTP_OK, st_strdup("ok\n"));
    if (strcmp(method, "GET") == 0 && strcmp(url, "/readyz") == 0) {
        struct st_buf b;
        st_buf_init(&b);
        pthread_mutex_lock(&m->lock);
        st_buf_printf(&b, "%s\n", m->unready ? m->unready : "ready");
        unsigned status = m->unready ? MHD_HTTP_SERVICE_UNAVAILABLE : MHD_HTTP_OK;
        pthread_mutex_unlock(&m->lock);
        return answer(conn, status, b.data);
    }
    if (strcmp(method, "GET") != 0 || strcmp(url, "/metrics") != 0) {
        static const char nf[] = "not found: GET /metrics, /healthz or /readyz\n";
        r = MHD_create_response_from_buffer(sizeof(nf) - 1, (void *)nf,
                                            MHD_RESPMEM_PERSISTENT);
        ret = MHD_queue_response(conn, MHD_HTTP_NOT_FOUND, r);
        MHD_destroy_response(r);
        return ret;
    }
    char *text = st_metrics_render(m);
    r = MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    MHD_add_response_header(r, "Content-Type", "text/plain; version=0.0.4");
    ret = MHD_queue_response(conn, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return ret;
}

int st_metrics_serve(struct st_metrics *m, const char *listen, char *errstr,
                     size_t errsz)
{
    struct sockaddr_in sa;
    char host[64];
    int port;

    if (!listen || !*listen)
        return 0;
    if (sscanf(listen, "%63[^:]:%d", host, &port) != 2 || port <= 0 || port > 65535) {
        snprintf(errstr, errsz, "invalid metrics address \"%s\": expected host:port",
                 listen);
        return -1;
    }
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    if (inet_pton(AF_INET, host, &sa.sin_addr) != 1) {
        snprintf(errstr, errsz, "invalid metrics address \"%s\": not an IPv4 address",
                 listen);
        return -1;
    }
    m->httpd = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD, (uint16_t)port, NULL,
                                NULL, on_request, m, MHD_OPTION_SOCK_ADDR, &sa,
                                MHD_OPTION_END);
    if (!m->httpd) {
        snprintf(errstr, errsz, "could not serve metrics on \"%s\"", listen);
        return -1;
    }
    return 0;
}
