/* dlq.c: dead-letter records (see dlq.h). */
#include <stdlib.h>
#include <sys/random.h>

#include "dlq.h"
#include "log.h"
#include "timeutil.h"

void st_dlq_record(struct st_buf *out, const struct st_reject *rej,
                   const char *input, long lineno, const char *raw, size_t len,
                   size_t raw_max)
{
    char now[40], id[33];
    unsigned char r[16];
    cJSON *o = cJSON_CreateObject();
    char *quoted = st_utf8_sanitize(raw, len, raw_max);

    st_time_format(st_time_now_us(), now, sizeof(now));
    if (getrandom(r, sizeof(r), 0) != (ssize_t)sizeof(r))
        st_fatal("could not read random bytes for a dead-letter record's id");
    for (size_t i = 0; i < sizeof(r); i++) {
        id[2 * i] = "0123456789abcdef"[r[i] >> 4];
        id[2 * i + 1] = "0123456789abcdef"[r[i] & 15];
    }
    id[32] = '\0';
    cJSON_AddStringToObject(o, "schema", "sandtrail.dlq.v1");
    cJSON_AddStringToObject(o, "record_id", id);
    cJSON_AddStringToObject(o, "reason", rej->code);
    cJSON_AddStringToObject(o, "error", rej->msg);
    cJSON_AddStringToObject(o, "input", input);
    cJSON_AddNumberToObject(o, "line", (double)lineno);
    cJSON_AddStringToObject(o, "rejected_at", now);
    cJSON_AddNumberToObject(o, "raw_bytes", (double)len);
    cJSON_AddBoolToObject(o, "raw_truncated", len > raw_max);
    cJSON_AddStringToObject(o, "raw", quoted);
    free(quoted);

    char *text = cJSON_PrintUnformatted(o);
    if (!text)
        st_fatal("out of memory printing a dead-letter record");
    st_buf_reset(out);
    st_buf_adds(out, text);
    free(text);
    cJSON_Delete(o);
}
