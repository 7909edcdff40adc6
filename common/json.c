/* json.c: strict JSON parsing on top of cJSON (see json.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "log.h"

static int utf8_seq_len(const unsigned char *p, size_t left)
{
    unsigned char c = p[0];
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        if (left >= 2 && (p[1] & 0xC0) == 0x80)
            return 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        if (left >= 3 && (p[1] & 0xC0) == 0x80 && (p[2] & 0xC0) == 0x80) {
            if (c == 0xE0 && p[1] < 0xA0)
                return -1; /* overlong */
            if (c == 0xED && p[1] >= 0xA0)
                return -1; /* UTF-16 surrogate */
            return 3;
        }
    } else if (c >= 0xF0 && c <= 0xF4) {
        if (left >= 4 && (p[1] & 0xC0) == 0x80 && (p[2] & 0xC0) == 0x80 &&
            (p[3] & 0xC0) == 0x80) {
            if (c == 0xF0 && p[1] < 0x90)
                return -1;
            if (c == 0xF4 && p[1] >= 0x90)
                return -1; /* above U+10FFFF */
            return 4;
        }
    }
    return -1;
}

int st_utf8_valid(const char *buf, size_t len)
{
    const unsigned char *p = (const unsigned char *)buf;
    size_t i = 0;
    while (i < len) {
        int n = utf8_seq_len(p + i, len - i);
        if (n < 0)
            return 0;
        i += (size_t)n;
    }
    return 1;
}

char *st_utf8_sanitize(const char *buf, size_t len, size_t max)
{
    const unsigned char *p = (const unsigned char *)buf;
    size_t cap = len < max ? len : max;
    char *out = st_malloc(cap + 1);
    size_t i = 0, o = 0;

    while (i < len && o < cap) {
        int n = utf8_seq_len(p + i, len - i);
        if (n < 0 || p[i] == 0) {
            out[o++] = '?';
            i++;
            continue;
        }
        if (o + (size_t)n > cap)
            break;
        memcpy(out + o, p + i, (size_t)n);
        o += (size_t)n;
        i += (size_t)n;
    }
    out[o] = '\0';
    return out;
}

/* Bytes that need no attention inside a string: printable ASCII other than
 * the quote and the backslash (0x20-0x7f but 0x22, 0x5c). */
static const unsigned char plain_in_string[256] = {
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1,
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
};

/* One pass over the raw bytes: UTF-8, NUL bytes, raw control characters in
 * strings and nesting depth. Brackets
 * inside strings do not count, so string state is tracked. */
static int json_prescan(const char *buf, size_t len, struct st_reject *rej)
{
    const unsigned char *p = (const unsigned char *)buf;
    int depth = 0, in_str = 0;
    size_t i = 0;

    while (i < len) {
        /* most of a line is plain ASCII inside strings: skip it fast */
        if (in_str)
            while (i < len && plain_in_string[p[i]])
                i++;
        if (i == len)
            break;
        unsigned char c = p[i];
        if (c == 0) {
            rej->code = ST_REASON_NUL;
            snprintf(rej->msg, sizeof(rej->msg), "NUL byte at offset %zu", i);
            return -1;
        }
        if (c >= 0x80) {
            int n = utf8_seq_len(p + i, len - i);
            if (n < 0) {
                rej->code = ST_REASON_UTF8;
                snprintf(rej->msg, sizeof(rej->msg),
                         "invalid UTF-8 sequence at offset %zu", i);
                return -1;
            }
            i += (size_t)n;
            continue;
        }
        if (in_str) {
            if (c == '\\') {
                /* \u0000 would cut a C string short inside cJSON */
                if (len - i >= 6 && memcmp(p + i + 1, "u0000", 5) == 0) {
                    rej->code = ST_REASON_NUL;
                    snprintf(rej->msg, sizeof(rej->msg),
                             "escaped NUL (\\u0000) at offset %zu", i);
                    return -1;
                }
                i++; /* the escaped byte cannot end the string */
            } else if (c == '"') {
                in_str = 0;
            } else if (c < 0x20) {
                /* cJSON would take it; JSON does not */
                rej->code = ST_REASON_JSON;
                snprintf(rej->msg, sizeof(rej->msg),
                         "unescaped control character in a string at offset %zu", i);
                return -1;
            }
        } else if (c == '"') {
            in_str = 1;
        } else if (c == '{' || c == '[') {
            if (++depth > ST_JSON_MAX_DEPTH) {
                rej->code = ST_REASON_DEPTH;
                snprintf(rej->msg, sizeof(rej->msg),
                         "nesting deeper than %d levels at offset %zu",
                         ST_JSON_MAX_DEPTH, i);
                return -1;
            }
        } else if (c == '}' || c == ']') {
            depth--;
        }
        i++;
    }
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Finds a key that appears twice in one object, at any depth. Small objects
 * are checked pairwise; large ones are sorted so that a hostile object with
 * many keys costs n log n, not n^2. */
static const char *json_find_duplicate(const cJSON *item)
{
    for (const cJSON *c = item->child; c; c = c->next) {
        const char *d = json_find_duplicate(c);
        if (d)
            return d;
    }
    if (!cJSON_IsObject(item))
        return NULL;

    size_t n = 0;
    for (const cJSON *c = item->child; c; c = c->next)
        n++;
    if (n < 2)
        return NULL;
    if (n <= 16) {
        for (const cJSON *a = item->child; a; a = a->next)
            for (const cJSON *b = a->next; b; b = b->next)
                if (a->string[0] == b->string[0] && strcmp(a->string, b->string) == 0)
                    return a->string;
        return NULL;
    }
    const char **keys = st_malloc(n * sizeof(*keys));
    const char *dup = NULL;
    size_t i = 0;
    for (const cJSON *c = item->child; c; c = c->next)
        keys[i++] = c->string;
    qsort(keys, n, sizeof(*keys), cmp_str);
    for (i = 1; i < n && !dup; i++)
        if (strcmp(keys[i - 1], keys[i]) == 0)
            dup = keys[i];
    free(keys);
    return dup;
}

cJSON *st_json_parse(const char *buf, size_t len, struct st_reject *rej)
{
    const char *end = NULL;
    cJSON *doc;

    if (json_prescan(buf, len, rej))
        return NULL;
    doc = cJSON_ParseWithLengthOpts(buf, len, &end, 0);
    if (!doc) {
        rej->code = ST_REASON_JSON;
        snprintf(rej->msg, sizeof(rej->msg), "invalid JSON at offset %zu",
                 end && end >= buf ? (size_t)(end - buf) : (size_t)0);
        return NULL;
    }
    /* only whitespace may follow the document */
    for (; end < buf + len; end++) {
        if (*end != ' ' && *end != '\t' && *end != '\r' && *end != '\n') {
            rej->code = ST_REASON_JSON;
            snprintf(rej->msg, sizeof(rej->msg),
                     "unexpected data after the JSON value at offset %zu",
                     (size_t)(end - buf));
            cJSON_Delete(doc);
            return NULL;
        }
    }
    const char *dup = json_find_duplicate(doc);
    if (dup) {
        rej->code = ST_REASON_DUPLICATE;
        char *q = st_utf8_sanitize(dup, strlen(dup), 64);
        snprintf(rej->msg, sizeof(rej->msg), "duplicate key \"%s\"", q);
        free(q);
        cJSON_Delete(doc);
        return NULL;
    }
    return doc;
}

const char *st_json_str(const cJSON *obj, const char *key)
{
    const cJSON *v = st_json_get(obj, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

int st_json_int(const cJSON *obj, const char *key, int64_t *out)
{
    const cJSON *v = st_json_get(obj, key);
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
        fabs(v->valuedouble) > 9007199254740992.0)
        return 0;
    *out = (int64_t)v->valuedouble;
    return 1;
}
