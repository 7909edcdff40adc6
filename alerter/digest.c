/* digest.c: digest documents (see digest.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "digest.h"
#include "log.h"
#include "timeutil.h"

void st_digest_id(const char *receiver, int64_t first_notification_id, char *out,
                  size_t size)
{
    snprintf(out, size, "digest.%s.%" PRId64, receiver, first_notification_id);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* "and 37 more findings for task T-9: 30 denial_burst, 7 retry_across_paths" */
static void summary(struct st_buf *b, const struct st_alert *a, size_t n)
{
    const char **det = st_calloc(n, sizeof(*det));
    for (size_t i = 0; i < n; i++)
        det[i] = a[i].detector;
    qsort(det, n, sizeof(*det), cmp_str);
    st_buf_printf(b, "and %zu more finding%s for task %s:", n, n == 1 ? "" : "s",
                  a[0].task_id);
    for (size_t i = 0, j; i < n; i = j) {
        for (j = i; j < n && !strcmp(det[j], det[i]); j++)
            ;
        st_buf_printf(b, "%s %zu %s", i ? "," : "", j - i, det[i]);
    }
    free(det);
}

char *st_digest_body(const char *delivery_id, int64_t window_s, int64_t window_end_s,
                     const struct st_alert *a, size_t n, const char *link_template)
{
    char start[40], end[40];
    struct st_buf sum;
    st_buf_init(&sum);
    summary(&sum, a, n);
    st_time_format((window_end_s - window_s) * 1000000, start, sizeof(start));
    st_time_format(window_end_s * 1000000, end, sizeof(end));
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "schema", "sandtrail.alert.v1");
    cJSON_AddStringToObject(o, "type", "digest");
    cJSON_AddStringToObject(o, "delivery_id", delivery_id);
    cJSON_AddStringToObject(o, "task_id", a[0].task_id);
    cJSON_AddStringToObject(o, "window_start", start);
    cJSON_AddStringToObject(o, "window_end", end);
    cJSON_AddStringToObject(o, "summary", sum.data);
    cJSON *arr = cJSON_AddArrayToObject(o, "findings");
    for (size_t i = 0; i < n; i++)
        cJSON_AddItemToArray(arr, st_alert_json(&a[i], link_template));
    char *body = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    st_buf_fini(&sum);
    return body;
}
