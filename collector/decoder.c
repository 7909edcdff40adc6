/* decoder.c: the registry of decoders and the helpers they share (see
 * decoder.h). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>

#include "buf.h"
#include "decoder.h"
#include "event.h"
#include "log.h"
#include "timeutil.h"

static const struct st_decoder_ops *const decoders[] = {
    &st_native_decoder, &st_squid_decoder, &st_smokescreen_decoder,
    &st_srt_decoder,    &st_vault_decoder,
};

const struct st_decoder_ops *st_decoder_find(const char *name)
{
    for (size_t i = 0; i < sizeof(decoders) / sizeof(decoders[0]); i++)
        if (name && strcmp(decoders[i]->name, name) == 0)
            return decoders[i];
    return NULL;
}

int st_decode_reject(struct st_reject *rej, const char *code, const char *fmt, ...)
{
    va_list ap;
    rej->code = code;
    va_start(ap, fmt);
    vsnprintf(rej->msg, sizeof(rej->msg), fmt, ap);
    va_end(ap);
    return -1;
}

int st_decode_check_line(const char *line, size_t len, struct st_reject *rej)
{
    /* line is not NUL-terminated: scan within len, never with strspn */
    for (size_t i = 0; i < len; i++)
        if (line[i] != ' ' && line[i] != '\t' && line[i] != '\r')
            return 0;
    return st_decode_reject(rej, ST_REASON_EMPTY, "empty line");
}

cJSON *st_decode_parse_object(const char *line, size_t len, struct st_reject *rej)
{
    cJSON *doc = st_json_parse(line, len, rej);
    if (doc && !cJSON_IsObject(doc)) {
        cJSON_Delete(doc);
        st_decode_reject(rej, ST_REASON_NOT_OBJECT, "a line must be a JSON object");
        return NULL;
    }
    return doc;
}

static void sha256(const void *p, size_t len, unsigned char md[32])
{
    unsigned int n = 0;
    if (!EVP_Digest(p, len, md, &n, EVP_sha256(), NULL) || n != 32)
        st_fatal("could not compute SHA-256");
}

static void hex(const unsigned char *p, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[p[i] >> 4];
        out[2 * i + 1] = digits[p[i] & 15];
    }
    out[2 * n] = '\0';
}

void st_decode_line_id(const char *prefix, const char *line, size_t len, char *out,
                       size_t size)
{
    unsigned char md[32];
    char h[25];
    sha256(line, len, md);
    hex(md, 12, h);
    snprintf(out, size, "%s-%s", prefix, h);
}

cJSON *st_decode_event_new(const struct st_decode_ctx *ctx, const char *fallback_name,
                           const char *event_id, const char *ts, const char *kind)
{
    cJSON *ev = cJSON_CreateObject();
    cJSON *src = cJSON_CreateObject();
    const char *name = ctx && ctx->source_name && *ctx->source_name ? ctx->source_name
                                                                     : fallback_name;

    if (!ev || !src)
        st_fatal("out of memory");
    cJSON_AddStringToObject(ev, "schema", ST_EVENT_SCHEMA);
    cJSON_AddStringToObject(ev, "event_id", event_id);
    cJSON_AddStringToObject(ev, "ts", ts);
    cJSON_AddStringToObject(src, "kind", kind);
    cJSON_AddStringToObject(src, "name", name);
    if (ctx && ctx->platform && *ctx->platform)
        cJSON_AddStringToObject(src, "platform", ctx->platform);
    cJSON_AddItemToObject(ev, "source", src);
    return ev;
}

int st_decode_utf8_len(const unsigned char *p, size_t left)
{
    unsigned char c = p[0];
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF)
        return left >= 2 && (p[1] & 0xC0) == 0x80 ? 2 : -1;
    if (c >= 0xE0 && c <= 0xEF) {
        if (left < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80)
            return -1;
        if ((c == 0xE0 && p[1] < 0xA0) || (c == 0xED && p[1] >= 0xA0))
            return -1; /* overlong, or a UTF-16 surrogate */
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (left < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 ||
            (p[3] & 0xC0) != 0x80)
            return -1;
        if ((c == 0xF0 && p[1] < 0x90) || (c == 0xF4 && p[1] >= 0x90))
            return -1; /* overlong, or above U+10FFFF */
        return 4;
    }
    return -1;
}

#define REPLACEMENT "\xEF\xBF\xBD" /* U+FFFD */

void st_decode_add_id(cJSON *obj, const char *key, const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    struct st_buf b;
    size_t i = 0, cut = 0;

    if (!s || len == 0) {
        cJSON_AddStringToObject(obj, key, ST_DECODE_UNKNOWN);
        return;
    }
    /* room for "~" and 16 hex digits after a cut */
    const size_t keep = ST_DECODE_ID_MAX - 17;
    st_buf_init(&b);
    while (i < len) {
        int n = st_decode_utf8_len(p + i, len - i);
        if (n < 0 || p[i] < 0x20 || p[i] == 0x7f) {
            st_buf_add(&b, REPLACEMENT, 3);
            i++;
        } else {
            st_buf_add(&b, p + i, (size_t)n);
            i += (size_t)n;
        }
        if (b.len <= keep)
            cut = b.len; /* the longest prefix that ends on a character */
        if (b.len > ST_DECODE_ID_MAX)
            break; /* bounded: the rest only feeds the hash */
    }
    if (b.len > ST_DECODE_ID_MAX) {
        unsigned char md[32];
        char h[17];
        sha256(s, len, md);
        hex(md, 8, h);
        b.len = cut;
        b.data[cut] = '\0';
        st_buf_printf(&b, "~%s", h);
    }
    cJSON_AddStringToObject(obj, key, b.data);
    st_buf_fini(&b);
}

void st_decode_add_run(cJSON *ev, const char *task_id, const char *run_id)
{
    st_decode_add_id(ev, "task_id", task_id, task_id ? strlen(task_id) : 0);
    st_decode_add_id(ev, "run_id", run_id, run_id ? strlen(run_id) : 0);
}

int st_decode_ts(const char *s, char *out, size_t size, int64_t *us)
{
    int64_t t;
    /* 1970 to 9999 in UTC: an offset may move a valid text out of the
     * four-digit years that RFC 3339, and so the formatted ts, can hold */
    if (!s || st_time_parse_rfc3339(s, strlen(s), &t) || t < 0 ||
        t >= INT64_C(253402300800) * 1000000)
        return -1;
    st_time_format(t, out, size);
    if (us)
        *us = t;
    return 0;
}

static int is_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return 1;
}

int st_decode_traceparent(const char *s, char *out, size_t size)
{
    /* version "-" trace-id "-" parent-id "-" flags: 2+1+32+1+16+1+2 bytes;
     * later versions may append fields after another "-" */
    size_t n = s ? strlen(s) : 0;
    if (n < 55 || size < 33 || (n > 55 && s[55] != '-'))
        return -1;
    if (!is_hex(s, 2) || strncmp(s, "ff", 2) == 0 || s[2] != '-' ||
        !is_hex(s + 3, 32) || s[35] != '-' || !is_hex(s + 36, 16) || s[52] != '-' ||
        !is_hex(s + 53, 2))
        return -1;
    if (strncmp(s + 3, "00000000000000000000000000000000", 32) == 0)
        return -1;
    memcpy(out, s + 3, 32);
    out[32] = '\0';
    return 0;
}

int st_decode_uint(const char *s, size_t len, int64_t max, int64_t *out)
{
    int64_t v = 0;
    if (len == 0 || len > 18)
        return -1;
    for (size_t i = 0; i < len; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
    }
    if (v > max)
        return -1;
    *out = v;
    return 0;
}

int st_decode_host_port(const char *s, size_t len, char *host, size_t host_size,
                        int64_t *port)
{
    const char *h = s, *colon = NULL;
    size_t hlen;

    *port = -1;
    if (len > 0 && s[0] == '[') {
        const char *close = memchr(s, ']', len);
        if (!close)
            return -1;
        h = s + 1;
        hlen = (size_t)(close - h);
        size_t rest = len - (size_t)(close + 1 - s);
        if (rest > 0) {
            if (close[1] != ':')
                return -1;
            colon = close + 1;
        }
    } else {
        colon = memchr(s, ':', len);
        /* a bare IPv6 address has several colons and no port */
        if (colon && memchr(colon + 1, ':', len - (size_t)(colon + 1 - s)))
            colon = NULL;
        hlen = colon ? (size_t)(colon - s) : len;
    }
    if (hlen == 0 || hlen >= host_size)
        return -1;
    if (colon && st_decode_uint(colon + 1, len - (size_t)(colon + 1 - s), 65535, port))
        return -1;
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    return 0;
}

static const cJSON *member(const cJSON *obj, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static int absent(const char *path, const char *key, int required,
                  struct st_reject *rej)
{
    if (required)
        return st_decode_reject(rej, ST_REASON_MISSING, "missing required field \"%s%s\"",
                                path, key);
    return 0;
}

int st_decode_str(const cJSON *obj, const char *path, const char *key, int required,
                  const char **out, struct st_reject *rej)
{
    const cJSON *v = member(obj, key);
    *out = NULL;
    if (!v)
        return absent(path, key, required, rej);
    if (!cJSON_IsString(v))
        return st_decode_reject(rej, ST_REASON_TYPE, "field \"%s%s\" must be a string",
                                path, key);
    *out = v->valuestring;
    return 1;
}

int st_decode_int(const cJSON *obj, const char *path, const char *key, int required,
                  int64_t min, int64_t max, int64_t *out, struct st_reject *rej)
{
    const cJSON *v = member(obj, key);
    if (!v)
        return absent(path, key, required, rej);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) ||
        v->valuedouble != floor(v->valuedouble))
        return st_decode_reject(rej, ST_REASON_TYPE, "field \"%s%s\" must be an integer",
                                path, key);
    /* compare as doubles first: converting an out-of-range double is undefined */
    if (v->valuedouble < (double)min || v->valuedouble > (double)max)
        return st_decode_reject(rej, ST_REASON_VALUE,
                                "field \"%s%s\" is out of range (%lld to %lld)", path, key,
                                (long long)min, (long long)max);
    *out = (int64_t)v->valuedouble;
    return 1;
}

int st_decode_bool(const cJSON *obj, const char *path, const char *key, int required,
                   int *out, struct st_reject *rej)
{
    const cJSON *v = member(obj, key);
    if (!v)
        return absent(path, key, required, rej);
    if (!cJSON_IsBool(v))
        return st_decode_reject(rej, ST_REASON_TYPE, "field \"%s%s\" must be a boolean",
                                path, key);
    *out = cJSON_IsTrue(v);
    return 1;
}

int st_decode_obj(const cJSON *obj, const char *path, const char *key, int required,
                  const cJSON **out, struct st_reject *rej)
{
    const cJSON *v = member(obj, key);
    *out = NULL;
    if (!v)
        return absent(path, key, required, rej);
    if (!cJSON_IsObject(v))
        return st_decode_reject(rej, ST_REASON_TYPE, "field \"%s%s\" must be an object",
                                path, key);
    *out = v;
    return 1;
}

void st_decode_add_opt(cJSON *obj, const char *key, const char *s)
{
    if (s && *s && strcmp(s, "-") != 0)
        cJSON_AddStringToObject(obj, key, s);
}
