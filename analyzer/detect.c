/* detect.c: the detector registry and shared helpers. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "buf.h"
#include "detect.h"
#include "log.h"

const struct st_detector_ops *const st_detectors[] = {
    &st_denial_burst_ops,
    &st_retry_across_paths_ops,
    &st_scope_drift_ops,
    &st_token_write_ops,
    &st_volume_anomaly_ops,
    &st_private_destination_ops,
    NULL,
};

int st_detect_parse_enabled(const char *list, uint32_t *off, char *err, size_t errsz)
{
    uint32_t on = 0;
    int n = 0;
    for (int d = 0; st_detectors[d]; d++)
        n++;
    if (n > 32) {
        snprintf(err, errsz, "detect.enabled: more than 32 detectors");
        return -1;
    }
    uint32_t all = n == 32 ? UINT32_MAX : (UINT32_C(1) << n) - 1;
    const char *p = list ? list : "";
    while (*p) {
        while (*p == ' ' || *p == ',')
            p++;
        size_t len = strcspn(p, ",");
        while (len && p[len - 1] == ' ')
            len--;
        if (!len)
            break;
        int found = 0;
        if (len == 3 && !memcmp(p, "all", 3)) {
            on = all;
            found = 1;
        }
        for (int d = 0; !found && st_detectors[d]; d++)
            if (strlen(st_detectors[d]->name) == len && !memcmp(p, st_detectors[d]->name, len)) {
                on |= UINT32_C(1) << d;
                found = 1;
            }
        if (!found) {
            struct st_buf names;
            st_buf_init(&names);
            for (int d = 0; st_detectors[d]; d++)
                st_buf_printf(&names, "%s%s", d ? ", " : "", st_detectors[d]->name);
            snprintf(err, errsz, "detect.enabled: no detector is named \"%.*s\" (all, or "
                     "some of: %s)", (int)(len > 64 ? 64 : len), p, names.data);
            st_buf_fini(&names);
            return -1;
        }
        p += strcspn(p, ",");
    }
    if (!on) {
        snprintf(err, errsz, "detect.enabled names no detector (all, or a list of names; "
                 "analyzer.role=store runs none)");
        return -1;
    }
    *off = all & ~on;
    return 0;
}

/* Appends n in decimal. */
static char *put_size(char *o, size_t n)
{
    char tmp[24];
    int k = 0;
    do {
        tmp[k++] = (char)('0' + n % 10);
        n /= 10;
    } while (n);
    while (k)
        *o++ = tmp[--k];
    return o;
}

static char *put(char *o, const char *s, size_t n)
{
    memcpy(o, s, n);
    return o + n;
}

/* Built by hand, not with printf: every checkpoint and load names keys. */
const char *st_detect_key_buf(struct st_buf *b, const struct st_analyzer_conf *conf,
                              const char *detector, const char *kind, const char *task_id,
                              const char *run_id)
{
    size_t lp = strlen(conf->redis_prefix), ld = strlen(detector), lk = strlen(kind);
    size_t lt = strlen(task_id), lr = strlen(run_id);
    st_buf_reset(b);
    st_buf_reserve(b, lp + ld + lk + lt + lr + 2 * 24 + 6);
    char *o = b->data;
    o = put(o, conf->redis_prefix, lp);
    o = put(o, detector, ld);
    *o++ = ':';
    o = put(o, kind, lk);
    *o++ = ':';
    o = put_size(o, lt);
    *o++ = ':';
    o = put(o, task_id, lt);
    *o++ = ':';
    o = put_size(o, lr);
    *o++ = ':';
    o = put(o, run_id, lr);
    *o = '\0';
    b->len = (size_t)(o - b->data);
    return b->data;
}

const char *st_detect_run_hash_key_buf(struct st_buf *b, const struct st_analyzer_conf *conf,
                                       const char *task_id, const char *run_id)
{
    return st_detect_key_buf(b, conf, ST_DETECT_RUN_HASH, "h", task_id, run_id);
}

int64_t st_detect_offset_of(const struct st_detect_offsets *o, int32_t partition)
{
    if (!o)
        return -1;
    for (int i = 0; i < o->n; i++)
        if (o->parts[i] == partition)
            return o->offsets[i];
    return -1;
}

unsigned st_detect_run_bucket(uint64_t hash)
{
    return (unsigned)(hash % ST_DETECT_RUN_BUCKETS);
}

const char *st_detect_run_bucket_key_buf(struct st_buf *b, const struct st_analyzer_conf *conf,
                                         uint64_t hash)
{
    size_t lp = strlen(conf->redis_prefix);
    st_buf_reset(b);
    st_buf_reserve(b, lp + sizeof(ST_DETECT_RUN_HASH) + 4 + 24);
    char *o = b->data;
    o = put(o, conf->redis_prefix, lp);
    o = put(o, ST_DETECT_RUN_HASH ":b:", sizeof(ST_DETECT_RUN_HASH) + 2);
    o = put_size(o, st_detect_run_bucket(hash));
    *o = '\0';
    b->len = (size_t)(o - b->data);
    return b->data;
}

void st_detect_run_field_prefix_add(struct st_buf *b, const char *task_id, const char *run_id)
{
    size_t lt = strlen(task_id), lr = strlen(run_id);
    st_buf_reserve(b, lt + lr + 2 * 24 + 3);
    char *o = b->data + b->len;
    o = put_size(o, lt);
    *o++ = ':';
    o = put(o, task_id, lt);
    *o++ = ':';
    o = put_size(o, lr);
    *o++ = ':';
    o = put(o, run_id, lr);
    *o++ = ':';
    *o = '\0';
    b->len = (size_t)(o - b->data);
}

const char *st_detect_run_field_buf(struct st_buf *b, const char *task_id, const char *run_id,
                                    const char *detector)
{
    st_buf_reset(b);
    st_detect_run_field_prefix_add(b, task_id, run_id);
    st_buf_adds(b, detector);
    return b->data;
}

char *st_detect_key(const struct st_analyzer_conf *conf, const char *detector,
                    const char *kind, const char *task_id, const char *run_id)
{
    struct st_buf b = {0};
    st_detect_key_buf(&b, conf, detector, kind, task_id, run_id);
    return st_realloc(b.data, b.len + 1); /* the caller's, its own size */
}

/* Appends at most max bytes of s at o, stopping at its NUL. */
static char *put_max(char *o, const char *s, size_t max)
{
    size_t n = strnlen(s, max);
    memcpy(o, s, n);
    return o + n;
}

void st_detect_dest_format(int deny, const char *platform, const char *source,
                           const char *event_id, char field[300], char member[600])
{
    char *o = deny ? put(field, "deny:", 5) : put(field, "allow:", 6);
    o = put_max(o, platform, 256);
    *o = '\0';
    o = put_max(member, source, 599);
    if (o < member + 599)
        *o++ = '\x1f';
    o = put_max(o, event_id, (size_t)(member + 599 - o));
    *o = '\0';
}

char *st_detect_run_member(const char *task_id, const char *run_id)
{
    size_t lt = strlen(task_id), lr = strlen(run_id);
    char *m = st_malloc(lt + lr + 2 * 24 + 3), *o = m;
    o = put_size(o, lt);
    *o++ = ':';
    o = put(o, task_id, lt);
    *o++ = ':';
    o = put_size(o, lr);
    *o++ = ':';
    o = put(o, run_id, lr);
    *o = '\0';
    return m;
}

char *st_detect_index_key(const struct st_analyzer_conf *conf, int32_t partition)
{
    size_t lp = strlen(conf->redis_prefix);
    char *key = st_malloc(lp + 32);
    snprintf(key, lp + 32, "%sruns:%" PRId32, conf->redis_prefix, partition);
    return key;
}

char *st_detect_index_log_key(const struct st_analyzer_conf *conf, int32_t partition)
{
    size_t lp = strlen(conf->redis_prefix);
    char *key = st_malloc(lp + 40);
    snprintf(key, lp + 40, "%sruns:%" PRId32 ":log", conf->redis_prefix, partition);
    return key;
}

char *st_detect_epoch_key(const struct st_analyzer_conf *conf, int32_t partition)
{
    size_t n = strlen(conf->redis_prefix) + strlen(conf->topic_events) + 32;
    char *key = st_malloc(n);
    snprintf(key, n, "%sepoch:%s:%" PRId32, conf->redis_prefix, conf->topic_events,
             partition);
    return key;
}

char *st_detect_marker_key(const struct st_analyzer_conf *conf)
{
    size_t lp = strlen(conf->redis_prefix);
    char *key = st_malloc(lp + sizeof("runs:complete_since"));
    memcpy(key, conf->redis_prefix, lp);
    memcpy(key + lp, "runs:complete_since", sizeof("runs:complete_since"));
    return key;
}

int st_detect_is_state_key(const struct st_analyzer_conf *conf, const char *key, size_t len)
{
    size_t lp = strlen(conf->redis_prefix);
    if (len <= lp || memcmp(key, conf->redis_prefix, lp))
        return 0;
    const char *p = key + lp, *end = key + len;
    /* a run bucket: "run:b:<n>" */
    static const char bucket[] = ST_DETECT_RUN_HASH ":b:";
    if ((size_t)(end - p) > sizeof(bucket) - 1 && !memcmp(p, bucket, sizeof(bucket) - 1)) {
        const char *d = p + sizeof(bucket) - 1;
        while (d < end && *d >= '0' && *d <= '9')
            d++;
        if (d == end)
            return 1;
    }
    const char *colon = memchr(p, ':', (size_t)(end - p));
    if (!colon || colon == p)
        return 0;
    p = colon + 1;
    static const char *const kinds[] = {"w:", "l:", "eps:", "b:", "s:", "h:"};
    int kind = -1;
    for (int i = 0; i < 6 && kind < 0; i++) {
        size_t lk = strlen(kinds[i]);
        if ((size_t)(end - p) > lk && !memcmp(p, kinds[i], lk)) {
            kind = i;
            p += lk;
        }
    }
    if (kind < 0)
        return 0;
    /* "<len>:<task>:<len>:<run>", the lengths exact */
    for (int part = 0; part < 2; part++) {
        size_t n = 0;
        const char *d = p;
        while (p < end && *p >= '0' && *p <= '9' && n < ((size_t)1 << 40))
            n = n * 10 + (size_t)(*p++ - '0');
        if (p == d || p >= end || *p != ':' || (size_t)(end - p - 1) < n)
            return 0;
        p += 1 + n;
        if (part == 0 && (p >= end || *p++ != ':'))
            return 0;
    }
    return p == end;
}

int st_detect_expire_due(int64_t *last_s, const struct st_analyzer_conf *conf)
{
    int64_t now = (int64_t)time(NULL), every = conf->state_ttl_s / 10;
    if (*last_s && now - *last_s < (every > 0 ? every : 1))
        return 0;
    *last_s = now;
    return 1;
}
