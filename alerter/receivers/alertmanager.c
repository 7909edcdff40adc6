/* alertmanager.c: the Prometheus Alertmanager receiver (API v2,
 * POST /api/v2/alerts).
 *
 * An alert's labels identify it: alertname (sandtrail_<detector>),
 * severity, detector, task_id, run_id, finding_id and source_platform.
 * Alertmanager resolves an alert whose endsAt has passed, so a firing
 * finding is posted with endsAt ahead (the alerter re-sends it every
 * alert.repeat_s), and a resolved or dismissed one with endsAt = now. When
 * a finding's severity rises, the alert under its former severity label is
 * ended in the same request. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alerter.h"
#include "http.h"
#include "log.h"
#include "timeutil.h"

struct am {
    char *url; /* .../api/v2/alerts */
    char *link_template;
    struct st_http *http;
};

void *st_alertmanager_new(const struct st_alerter_conf *conf, char *errstr, size_t errsz)
{
    const char *base = conf->am_url;
    size_t n = strlen(base);
    if (strncmp(base, "http://", 7) && strncmp(base, "https://", 8)) {
        snprintf(errstr, errsz, "alert.alertmanager.url \"%s\" is not an http(s) URL", base);
        return NULL;
    }
    struct am *am = st_calloc(1, sizeof(*am));
    am->url = st_malloc(n + 32);
    snprintf(am->url, n + 32, "%.*s/api/v2/alerts", (int)(n && base[n - 1] == '/' ? n - 1 : n),
             base);
    am->link_template = conf->link_template ? st_strdup(conf->link_template) : NULL;
    am->http = st_http_new((long)conf->timeout_ms);
    return am;
}

static void am_destroy(void *state)
{
    struct am *am = state;
    if (!am)
        return;
    st_http_destroy(am->http);
    free(am->url);
    free(am->link_template);
    free(am);
}

static const char *first_targets(const char *json, char *out, size_t size)
{
    cJSON *t = cJSON_Parse(json ? json : "[]");
    size_t len = 0;
    int i = 0;
    const cJSON *e;
    out[0] = '\0';
    cJSON_ArrayForEach(e, t)
    {
        if (!cJSON_IsString(e) || i == 5 || len >= size)
            continue;
        len += (size_t)snprintf(out + len, len < size ? size - len : 0, "%s%s",
                                i ? ", " : "", e->valuestring);
        i++;
    }
    int total = cJSON_GetArraySize(t);
    if (total > i && len < size)
        snprintf(out + len, size - len, " (+%d more)", total - i);
    cJSON_Delete(t);
    return out;
}

static cJSON *am_alert(struct am *am, const struct st_alert *a, const char *severity,
                       int64_t ends_us)
{
    char name[128], ts[40], targets[1024];
    cJSON *o = cJSON_CreateObject();
    cJSON *l = cJSON_AddObjectToObject(o, "labels");
    snprintf(name, sizeof(name), "sandtrail_%s", a->detector);
    cJSON_AddStringToObject(l, "alertname", name);
    cJSON_AddStringToObject(l, "severity", severity);
    cJSON_AddStringToObject(l, "detector", a->detector);
    cJSON_AddStringToObject(l, "task_id", a->task_id);
    cJSON_AddStringToObject(l, "run_id", a->run_id);
    cJSON_AddStringToObject(l, "finding_id", a->finding_id);
    if (a->platform && *a->platform)
        cJSON_AddStringToObject(l, "source_platform", a->platform);
    cJSON *an = cJSON_AddObjectToObject(o, "annotations");
    cJSON_AddStringToObject(an, "summary", a->summary);
    cJSON_AddStringToObject(an, "targets", first_targets(a->targets, targets, sizeof(targets)));
    cJSON_AddStringToObject(an, "event_count", a->event_count);
    cJSON_AddStringToObject(an, "first_seen", a->first_seen);
    cJSON_AddStringToObject(an, "last_seen", a->last_seen);
    cJSON_AddStringToObject(an, "status", a->status);
    cJSON_AddStringToObject(o, "startsAt", a->first_seen);
    st_time_format(ends_us, ts, sizeof(ts));
    cJSON_AddStringToObject(o, "endsAt", ts);
    char *link = st_alert_link(am->link_template, a);
    if (link)
        cJSON_AddStringToObject(o, "generatorURL", link);
    free(link);
    return o;
}

/* Adds the alerts of a: the current severity ending at a->ends_at_us, and
 * each lower severity notified before ending now. */
static void add_alerts(struct am *am, cJSON *arr, const struct st_alert *a)
{
    cJSON_AddItemToArray(arr, am_alert(am, a, a->severity, a->ends_at_us));
    const char *p = a->lower_severities;
    if (!p || *p != '{')
        return;
    int64_t now = st_time_now_us();
    for (p++; *p && *p != '}';) {
        char sev[16];
        size_t n = strcspn(p, ",}");
        if (n && n < sizeof(sev)) {
            memcpy(sev, p, n);
            sev[n] = '\0';
            cJSON_AddItemToArray(arr, am_alert(am, a, sev, now));
        }
        p += n;
        if (*p == ',')
            p++;
    }
}

static void post(struct am *am, cJSON *arr, struct st_send_result *r)
{
    char *body = cJSON_PrintUnformatted(arr);
    st_http_post_json(am->http, am->url, NULL, body, strlen(body), r);
    free(body);
}

static void am_send_batch(void *state, const struct st_alert *a, size_t n,
                          struct st_send_result *r)
{
    struct am *am = state;
    cJSON *arr = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++)
        add_alerts(am, arr, &a[i]);
    post(am, arr, r);
    cJSON_Delete(arr);
}

static void am_send(void *state, const struct st_alert *a, struct st_send_result *r)
{
    am_send_batch(state, a, 1, r);
}

static int am_resend(void *state, const struct st_alert *a, size_t n, struct st_send_result *r)
{
    struct am *am = state;
    cJSON *arr = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++)
        cJSON_AddItemToArray(arr, am_alert(am, &a[i], a[i].severity, a[i].ends_at_us));
    post(am, arr, r);
    cJSON_Delete(arr);
    return r->outcome == ST_SEND_DELIVERED ? 0 : -1;
}

const struct st_receiver_ops st_receiver_alertmanager = {
    .kind = "alertmanager",
    .send = am_send,
    .send_batch = am_send_batch,
    .resend = am_resend,
    .destroy = am_destroy,
};
