/* json.c: strict JSON parsing on top of cJSON (see json.h). */
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "json.h"
#include "log.h"

int st_json_utf8_len(const unsigned char *p, size_t left)
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
        int n = st_json_utf8_len(p + i, len - i);
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
        int n = st_json_utf8_len(p + i, len - i);
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

/* One pass over the raw bytes: UTF-8, NUL bytes, raw control characters in
 * strings and nesting depth. Run only on a line the parser refused, to name
 * its first fault. Brackets
 * inside strings do not count, so string state is tracked. */
static int json_prescan(const char *buf, size_t len, struct st_reject *rej)
{
    const unsigned char *p = (const unsigned char *)buf;
    int depth = 0, in_str = 0;
    size_t i = 0;

    while (i < len) {
        unsigned char c = p[i];
        if (c == 0) {
            rej->code = ST_REASON_NUL;
            snprintf(rej->msg, sizeof(rej->msg), "NUL byte at offset %zu", i);
            return -1;
        }
        if (c >= 0x80) {
            int n = st_json_utf8_len(p + i, len - i);
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

/* ---- the parser ----------------------------------------------------------
 *
 * Builds the same cJSON tree cJSON_Parse would, from text that json_prescan
 * has passed (valid UTF-8, no NUL, no raw control byte in a string, depth
 * within ST_JSON_MAX_DEPTH), but strictly to RFC 8259 -- no leading zeros,
 * no "+1", no bare ".5" -- and at a fraction of cJSON's cost: strings
 * without escapes are one memcpy, integers are read without strtod. Nodes
 * and strings come from malloc, as cJSON's default hooks expect, so
 * cJSON_Delete frees them; or, for st_json_parse_in, from an arena, freed
 * with it (never by cJSON_Delete). */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* Objects of up to this many members are checked pairwise as they are
 * parsed; larger ones are sorted once complete, so that a hostile object
 * with many keys costs n log n, not n^2. */
#define DUP_PAIRWISE 16

/* A key that the object obj holds twice, or NULL. */
static const char *object_duplicate(const cJSON *obj)
{
    size_t n = 0;
    for (const cJSON *c = obj->child; c; c = c->next)
        n++;
    const char **keys = st_malloc(n * sizeof(*keys));
    const char *dup = NULL;
    size_t i = 0;
    for (const cJSON *c = obj->child; c; c = c->next)
        keys[i++] = c->string;
    qsort(keys, n, sizeof(*keys), cmp_str);
    for (i = 1; i < n && !dup; i++)
        if (strcmp(keys[i - 1], keys[i]) == 0)
            dup = keys[i];
    free(keys);
    return dup;
}

struct jp {
    const unsigned char *p, *end;
    const unsigned char *err; /* where parsing failed */
    int depth;                /* containers open */
    const char *dup;          /* the first key found twice in an object */
    const unsigned char *big; /* the first number out of range */
    struct st_arena *arena;   /* where nodes and strings go (NULL: malloc) */
};

/* n bytes for a string; freed by jp_free, or with the arena. */
static char *jp_mem(struct jp *j, size_t n)
{
    if (j->arena)
        return st_arena_alloc_bytes(j->arena, n);
    char *p = malloc(n);
    if (!p)
        st_fatal("out of memory parsing JSON");
    return p;
}

static void jp_free(struct jp *j, void *p)
{
    if (!j->arena)
        free(p);
}

/* A tree given up: an arena's goes with the arena. */
static void jp_delete(struct jp *j, cJSON *c)
{
    if (!j->arena)
        cJSON_Delete(c);
}

/* c as a new node of type t: every other member zero. */
static cJSON *node_init(cJSON *c, int type)
{
    c->next = c->prev = c->child = NULL;
    c->type = type;
    c->valuestring = NULL;
    c->valueint = 0;
    c->valuedouble = 0;
    c->string = NULL;
    return c;
}

static cJSON *jp_node(struct jp *j, int type)
{
    if (j->arena)
        return st_json_node_in(j->arena, type);
    cJSON *c = malloc(sizeof(*c));
    if (!c)
        st_fatal("out of memory parsing JSON");
    return node_init(c, type);
}

cJSON *st_json_node_in(struct st_arena *arena, int type)
{
    return node_init(st_arena_alloc(arena, sizeof(cJSON)), type);
}

static void jp_ws(struct jp *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

static void *jp_fail(struct jp *j, const unsigned char *at)
{
    if (!j->err)
        j->err = at;
    return NULL;
}

int st_json_hex4(const unsigned char *p, const unsigned char *end, unsigned *out)
{
    unsigned v = 0;
    if (end - p < 4)
        return -1;
    for (int i = 0; i < 4; i++) {
        int h = p[i] >= '0' && p[i] <= '9'   ? p[i] - '0'
                : p[i] >= 'a' && p[i] <= 'f' ? p[i] - 'a' + 10
                : p[i] >= 'A' && p[i] <= 'F' ? p[i] - 'A' + 10
                                             : -1;
        if (h < 0)
            return -1;
        v = v << 4 | (unsigned)h;
    }
    *out = v;
    return 0;
}

/* 1 when s[0..n), the raw bytes of a string, hold no control byte and only
 * valid UTF-8; eight bytes at a time while they are printable ASCII. */
int st_json_bytes_ok(const unsigned char *s, size_t n)
{
    size_t i = 0;
    while (i < n) {
        if (i + 8 <= n) {
            uint64_t w;
            memcpy(&w, s + i, 8);
            if (!(((w - 0x2020202020202020u) | w) & 0x8080808080808080u)) {
                i += 8;
                continue;
            }
        }
        if (s[i] < 0x20)
            return 0;
        if (s[i] < 0x80) {
            i++;
            continue;
        }
        int len = st_json_utf8_len(s + i, n - i);
        if (len < 0)
            return 0;
        i += (size_t)len;
    }
    return 1;
}

/* The bytes of w (8 bytes of text, in memory order) that a plain
 * string cannot hold as they are: a quote, a backslash, a control byte
 * (< 0x20) or one of a multi-byte UTF-8 sequence (>= 0x80), each marked
 * by its high bit. 0 when there is none. The least significant mark is
 * exact (on a little-endian machine, the first such byte); a borrow may
 * mark more significant bytes, never less. The caller checks the byte it
 * stops at, so a mark that is not exact only costs the general path. */
static uint64_t plain_stop(uint64_t w)
{
    const uint64_t lo = 0x0101010101010101u, hi = 0x8080808080808080u;
    uint64_t q = w ^ (lo * '"'), b = w ^ (lo * '\\');
    return (((w - lo * 0x20) & ~w) | ((q - lo) & ~q) | ((b - lo) & ~b) | w) & hi;
}

/* j->p at the opening quote; returns the decoded string (jp_mem). */
static char *jp_string(struct jp *j)
{
    const unsigned char *s = ++j->p;
    /* the common case first, in one pass: printable ASCII up to the
     * closing quote (8 bytes at a time, then byte by byte); anything else
     * (an escape, UTF-8, a control byte, no end) takes the general path
     * below, from the start */
    const unsigned char *t = s;
    while (j->end - t >= 8) {
        uint64_t w, stop;
        memcpy(&w, t, 8);
        if ((stop = plain_stop(w)) != 0) {
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
            t += __builtin_clzll(stop) / 8; /* the first such byte */
#else
            t += __builtin_ctzll(stop) / 8;
#endif
            break;
        }
        t += 8;
    }
    if (j->end - t < 8)
        while (t < j->end && *t >= 0x20 && *t < 0x80 && *t != '"' && *t != '\\')
            t++;
    if (t < j->end && *t == '"') {
        size_t n = (size_t)(t - s);
        char *out = jp_mem(j, n + 1);
        memcpy(out, s, n);
        out[n] = '\0';
        j->p = t + 1;
        return out;
    }
    const unsigned char *q = memchr(s, '"', (size_t)(j->end - s));
    const unsigned char *bs = q ? memchr(s, '\\', (size_t)(q - s)) : NULL;
    if (q && !bs) {
        size_t n = (size_t)(q - s);
        if (!st_json_bytes_ok(s, n))
            return jp_fail(j, s);
        char *out = jp_mem(j, n + 1);
        memcpy(out, s, n);
        out[n] = '\0';
        j->p = q + 1;
        return out;
    }
    /* escapes: find the end, then decode (never longer than the source) */
    const unsigned char *e = bs ? bs : j->end;
    while (e < j->end && *e != '"')
        e += *e == '\\' ? 2 : 1;
    if (e >= j->end)
        return jp_fail(j, j->end);
    if (!st_json_bytes_ok(s, (size_t)(e - s)))
        return jp_fail(j, s);
    char *out = jp_mem(j, (size_t)(e - s) + 1);
    size_t o = 0;
    for (const unsigned char *x = s; x < e;) {
        if (*x != '\\') {
            out[o++] = (char)*x++;
            continue;
        }
        const unsigned char *at = x++;
        unsigned cp, lo;
        switch (*x) {
        case '"': case '\\': case '/': out[o++] = (char)*x++; continue;
        case 'b': out[o++] = '\b'; x++; continue;
        case 'f': out[o++] = '\f'; x++; continue;
        case 'n': out[o++] = '\n'; x++; continue;
        case 'r': out[o++] = '\r'; x++; continue;
        case 't': out[o++] = '\t'; x++; continue;
        case 'u': break;
        default: jp_free(j, out); return jp_fail(j, at);
        }
        if (st_json_hex4(x + 1, e, &cp)) {
            jp_free(j, out);
            return jp_fail(j, at);
        }
        x += 5;
        if (cp >= 0xDC00 && cp <= 0xDFFF) { /* a lone low surrogate */
            jp_free(j, out);
            return jp_fail(j, at);
        }
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (e - x < 6 || x[0] != '\\' || x[1] != 'u' || st_json_hex4(x + 2, e, &lo) ||
                lo < 0xDC00 || lo > 0xDFFF) {
                jp_free(j, out);
                return jp_fail(j, at);
            }
            x += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        if (cp == 0) { /* json_prescan rejects it first; never a C string cut */
            jp_free(j, out);
            return jp_fail(j, at);
        }
        if (cp < 0x80) {
            out[o++] = (char)cp;
        } else if (cp < 0x800) {
            out[o++] = (char)(0xC0 | cp >> 6);
            out[o++] = (char)(0x80 | (cp & 0x3F));
        } else if (cp < 0x10000) {
            out[o++] = (char)(0xE0 | cp >> 12);
            out[o++] = (char)(0x80 | (cp >> 6 & 0x3F));
            out[o++] = (char)(0x80 | (cp & 0x3F));
        } else {
            out[o++] = (char)(0xF0 | cp >> 18);
            out[o++] = (char)(0x80 | (cp >> 12 & 0x3F));
            out[o++] = (char)(0x80 | (cp >> 6 & 0x3F));
            out[o++] = (char)(0x80 | (cp & 0x3F));
        }
    }
    out[o] = '\0';
    j->p = e + 1;
    return out;
}

static cJSON *jp_number(struct jp *j)
{
    const unsigned char *s = j->p, *p = s;
    int simple = 1;
    if (p < j->end && *p == '-')
        p++;
    if (p < j->end && *p == '0') {
        p++;
    } else if (p < j->end && *p >= '1' && *p <= '9') {
        while (p < j->end && *p >= '0' && *p <= '9')
            p++;
    } else {
        return jp_fail(j, p);
    }
    int64_t frac = 0, exp = 0, expsign = 1;
    if (p < j->end && *p == '.') {
        simple = 0;
        if (++p >= j->end || *p < '0' || *p > '9')
            return jp_fail(j, p);
        while (p < j->end && *p >= '0' && *p <= '9')
            p++, frac++;
    }
    if (p < j->end && (*p == 'e' || *p == 'E')) {
        simple = 0;
        p++;
        if (p < j->end && (*p == '+' || *p == '-'))
            expsign = *p++ == '-' ? -1 : 1;
        if (p >= j->end || *p < '0' || *p > '9')
            return jp_fail(j, p);
        while (p < j->end && *p >= '0' && *p <= '9') {
            if (exp < 1000000) /* saturates: far beyond any limit below */
                exp = exp * 10 + (*p - '0');
            p++;
        }
    }
    size_t n = (size_t)(p - s);
    double v;
    if (simple && n <= 16) { /* at most 15 digits: exact in a double */
        int64_t i = 0;
        for (const unsigned char *d = *s == '-' ? s + 1 : s; d < p; d++)
            i = i * 10 + (*d - '0');
        v = *s == '-' ? -(double)i : (double)i;
    } else {
        char small[64], *buf = n < sizeof(small) ? small : malloc(n + 1);
        if (!buf)
            st_fatal("out of memory parsing JSON");
        memcpy(buf, s, n);
        buf[n] = '\0';
        v = strtod(buf, NULL);
        if (buf != small)
            free(buf);
    }
    /* PostgreSQL's numeric holds 131072 digits before the point, far more
     * than a double; after the point it holds ST_JSON_MAX_SCALE */
    if (!j->big && (!isfinite(v) || frac - expsign * exp > ST_JSON_MAX_SCALE))
        j->big = s;
    cJSON *c = jp_node(j, cJSON_Number);
    st_json_set_number(c, v);
    j->p = p;
    return c;
}

static cJSON *jp_value(struct jp *j);

/* Appends item to the children of parent, the cJSON way: the first child's
 * prev is the last child. */
void st_json_set_number(cJSON *c, double v)
{
    c->valuedouble = v;
    c->valueint = v >= INT_MAX ? INT_MAX : v <= (double)INT_MIN ? INT_MIN : (int)v;
}

void st_json_append(cJSON *parent, cJSON *item)
{
    cJSON *first = parent->child;
    if (!first) {
        parent->child = item;
        item->prev = item;
    } else {
        item->prev = first->prev;
        first->prev->next = item;
        first->prev = item;
    }
}

static cJSON *jp_container(struct jp *j, int object)
{
    if (++j->depth > ST_JSON_MAX_DEPTH)
        return jp_fail(j, j->p);
    cJSON *c = jp_node(j, object ? cJSON_Object : cJSON_Array);
    const unsigned char close = object ? '}' : ']';
    size_t members = 0;
    j->p++;
    jp_ws(j);
    if (j->p < j->end && *j->p == close) {
        j->p++;
        j->depth--;
        return c;
    }
    for (;;) {
        char *key = NULL;
        if (object) {
            if (j->p >= j->end || *j->p != '"' || !(key = jp_string(j)))
                goto fail;
            jp_ws(j);
            if (j->p >= j->end || *j->p != ':') {
                jp_free(j, key);
                goto fail;
            }
            j->p++;
            jp_ws(j);
        }
        cJSON *item = jp_value(j);
        if (!item) {
            jp_free(j, key);
            goto fail;
        }
        item->string = key;
        /* a small object is checked as it grows; a large one once whole */
        members++;
        if (object && !j->dup && members <= DUP_PAIRWISE)
            for (const cJSON *o = c->child; o; o = o->next)
                if (o->string[0] == key[0] && strcmp(o->string, key) == 0) {
                    j->dup = o->string;
                    break;
                }
        st_json_append(c, item);
        jp_ws(j);
        if (j->p < j->end && *j->p == ',') {
            j->p++;
            jp_ws(j);
            continue;
        }
        if (j->p < j->end && *j->p == close) {
            j->p++;
            j->depth--;
            if (object && !j->dup && members > DUP_PAIRWISE)
                j->dup = object_duplicate(c);
            return c;
        }
        goto fail;
    }
fail:
    jp_fail(j, j->p);
    jp_delete(j, c);
    return NULL;
}

static cJSON *jp_value(struct jp *j)
{
    if (j->p >= j->end)
        return jp_fail(j, j->p);
    switch (*j->p) {
    case '{': return jp_container(j, 1);
    case '[': return jp_container(j, 0);
    case '"': {
        char *s = jp_string(j);
        if (!s)
            return NULL;
        cJSON *c = jp_node(j, cJSON_String);
        c->valuestring = s;
        return c;
    }
    case 't':
        if (j->end - j->p >= 4 && memcmp(j->p, "true", 4) == 0) {
            j->p += 4;
            return jp_node(j, cJSON_True);
        }
        break;
    case 'f':
        if (j->end - j->p >= 5 && memcmp(j->p, "false", 5) == 0) {
            j->p += 5;
            return jp_node(j, cJSON_False);
        }
        break;
    case 'n':
        if (j->end - j->p >= 4 && memcmp(j->p, "null", 4) == 0) {
            j->p += 4;
            return jp_node(j, cJSON_NULL);
        }
        break;
    default:
        if (*j->p == '-' || (*j->p >= '0' && *j->p <= '9'))
            return jp_number(j);
    }
    return jp_fail(j, j->p);
}


static cJSON *parse(const char *buf, size_t len, struct st_arena *arena,
                    struct st_reject *rej)
{
    struct jp j = {(const unsigned char *)buf, (const unsigned char *)buf + len, NULL, 0, NULL,
                   NULL, arena};
    cJSON *doc;

    /* The parser refuses everything json_prescan would (a NUL, invalid
     * UTF-8, a control byte in a string, \u0000, nesting too deep) but
     * names it only "invalid JSON": a line it refuses is scanned again for
     * the specific reason, which the first such fault in the line gives,
     * as when the scan ran first. A valid line is read once. */
    jp_ws(&j);
    doc = jp_value(&j);
    if (!doc) {
        if (json_prescan(buf, len, rej))
            return NULL;
        rej->code = ST_REASON_JSON;
        snprintf(rej->msg, sizeof(rej->msg), "invalid JSON at offset %zu",
                 (size_t)((j.err ? j.err : j.p) - (const unsigned char *)buf));
        return NULL;
    }
    /* only whitespace may follow the document */
    jp_ws(&j);
    if (j.p < j.end) {
        jp_delete(&j, doc);
        if (json_prescan(buf, len, rej))
            return NULL;
        rej->code = ST_REASON_JSON;
        snprintf(rej->msg, sizeof(rej->msg),
                 "unexpected data after the JSON value at offset %zu",
                 (size_t)(j.p - (const unsigned char *)buf));
        return NULL;
    }
    const char *dup = j.dup;
    if (dup) {
        rej->code = ST_REASON_DUPLICATE;
        char *q = st_utf8_sanitize(dup, strlen(dup), 64);
        snprintf(rej->msg, sizeof(rej->msg), "duplicate key \"%s\"", q);
        free(q);
        jp_delete(&j, doc);
        return NULL;
    }
    if (j.big) {
        rej->code = ST_REASON_NUMBER;
        snprintf(rej->msg, sizeof(rej->msg),
                 "number at offset %zu is out of range (a finite double with at most "
                 "%d digits after the point)",
                 (size_t)(j.big - (const unsigned char *)buf), ST_JSON_MAX_SCALE);
        jp_delete(&j, doc);
        return NULL;
    }
    return doc;
}

cJSON *st_json_parse(const char *buf, size_t len, struct st_reject *rej)
{
    return parse(buf, len, NULL, rej);
}

cJSON *st_json_parse_in(const char *buf, size_t len, struct st_arena *arena,
                        struct st_reject *rej)
{
    return parse(buf, len, arena, rej);
}

const char *st_json_as_str(const cJSON *v)
{
    return st_json_is(v, cJSON_String) ? v->valuestring : NULL;
}

int st_json_as_int(const cJSON *v, int64_t *out)
{
    if (!st_json_is(v, cJSON_Number) || v->valuedouble != floor(v->valuedouble) ||
        fabs(v->valuedouble) > 9007199254740992.0)
        return 0;
    *out = (int64_t)v->valuedouble;
    return 1;
}

const char *st_json_str(const cJSON *obj, const char *key)
{
    return st_json_as_str(st_json_get(obj, key));
}

int st_json_int(const cJSON *obj, const char *key, int64_t *out)
{
    return st_json_as_int(st_json_get(obj, key), out);
}
