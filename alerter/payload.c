/* payload.c: a finding as a sandtrail.alert.v1 object, and its link (see
 * alerter.h). Everything here comes from PostgreSQL, where the collector's
 * redaction already replaced secrets by markers and fingerprints. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alerter.h"
#include "buf.h"
#include "log.h"

static void add_encoded(struct st_buf *b, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
            (*p >= '0' && *p <= '9') || strchr("-._~", *p)) {
            st_buf_addc(b, (char)*p);
        } else {
            st_buf_addc(b, '%');
            st_buf_addc(b, hex[*p >> 4]);
            st_buf_addc(b, hex[*p & 15]);
        }
    }
}

char *st_alert_link(const char *tpl, const struct st_alert *a)
{
    static const struct {
        const char *name;
        size_t off;
    } vars[] = {
        {"{finding_id}", offsetof(struct st_alert, finding_id)},
        {"{task_id}", offsetof(struct st_alert, task_id)},
        {"{run_id}", offsetof(struct st_alert, run_id)},
    };
    if (!tpl || !*tpl)
        return NULL;
    struct st_buf b;
    st_buf_init(&b);
    st_buf_adds(&b, "");
    for (const char *p = tpl; *p;) {
        size_t i;
        for (i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
            size_t n = strlen(vars[i].name);
            if (strncmp(p, vars[i].name, n) == 0) {
                add_encoded(&b, *(const char *const *)((const char *)a + vars[i].off));
                p += n;
                break;
            }
        }
        if (i == sizeof(vars) / sizeof(vars[0]))
            st_buf_addc(&b, *p++);
    }
    return b.data;
}

cJSON *st_alert_json(const struct st_alert *a, const char *link_template)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "schema", "sandtrail.alert.v1");
    cJSON_AddStringToObject(o, "type", "finding");
    cJSON_AddStringToObject(o, "delivery_id", a->delivery_id);
    cJSON_AddStringToObject(o, "kind", a->kind);
    cJSON_AddStringToObject(o, "finding_id", a->finding_id);
    cJSON_AddStringToObject(o, "detector", a->detector);
    cJSON_AddStringToObject(o, "severity", a->severity);
    cJSON_AddStringToObject(o, "status", a->status);
    cJSON_AddStringToObject(o, "task_id", a->task_id);
    cJSON_AddStringToObject(o, "run_id", a->run_id);
    if (a->platform && *a->platform)
        cJSON_AddStringToObject(o, "source_platform", a->platform);
    cJSON_AddStringToObject(o, "summary", a->summary);
    cJSON_AddStringToObject(o, "first_seen", a->first_seen);
    cJSON_AddStringToObject(o, "last_seen", a->last_seen);
    cJSON_AddNumberToObject(o, "event_count", atof(a->event_count));
    cJSON *t = cJSON_Parse(a->targets ? a->targets : "[]");
    if (!cJSON_IsArray(t)) {
        cJSON_Delete(t);
        t = cJSON_CreateArray();
    }
    cJSON_AddItemToObject(o, "targets", t);
    char *link = st_alert_link(link_template, a);
    if (link)
        cJSON_AddStringToObject(o, "link", link);
    else
        cJSON_AddNullToObject(o, "link");
    free(link);
    return o;
}
