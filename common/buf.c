/* buf.c: a growable byte buffer. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "log.h"

void st_buf_init(struct st_buf *b)
{
    b->data = NULL;
    b->len = b->cap = 0;
}

void st_buf_fini(struct st_buf *b)
{
    free(b->data);
    st_buf_init(b);
}

void st_buf_reset(struct st_buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

void st_buf_reserve(struct st_buf *b, size_t n)
{
    if (b->len + n + 1 <= b->cap)
        return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + n + 1)
        cap *= 2;
    b->data = st_realloc(b->data, cap);
    b->cap = cap;
}

void st_buf_add(struct st_buf *b, const void *p, size_t n)
{
    st_buf_reserve(b, n);
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void st_buf_adds(struct st_buf *b, const char *s)
{
    st_buf_add(b, s, strlen(s));
}

void st_buf_addc(struct st_buf *b, char c)
{
    st_buf_add(b, &c, 1);
}

void st_buf_printf(struct st_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    st_buf_reserve(b, (size_t)n);
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* "00" to "99": two digits per division (a checkpoint's numbers are
 * mostly 16-digit times) */
static const char pairs[201] = "00010203040506070809101112131415161718192021222324"
                               "25262728293031323334353637383940414243444546474849"
                               "50515253545556575859606162636465666768697071727374"
                               "75767778798081828384858687888990919293949596979899";

size_t st_fmt_i64(char *out, int64_t v)
{
    char tmp[ST_I64_LEN];
    size_t k = sizeof(tmp);
    /* the magnitude as unsigned: -INT64_MIN does not fit an int64_t */
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    while (u >= 100) {
        size_t i = (size_t)(u % 100) * 2;
        u /= 100;
        tmp[--k] = pairs[i + 1];
        tmp[--k] = pairs[i];
    }
    if (u >= 10) {
        tmp[--k] = pairs[u * 2 + 1];
        tmp[--k] = pairs[u * 2];
    } else {
        tmp[--k] = (char)('0' + u);
    }
    size_t n = 0;
    if (v < 0)
        out[n++] = '-';
    memcpy(out + n, tmp + k, sizeof(tmp) - k);
    n += sizeof(tmp) - k;
    out[n] = '\0';
    return n;
}

void st_buf_addi64(struct st_buf *b, int64_t v)
{
    st_buf_reserve(b, ST_I64_LEN);
    b->len += st_fmt_i64(b->data + b->len, v);
}

uint64_t st_hash_pair(const char *a, const char *b)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    for (const unsigned char *p = (const unsigned char *)a; *p; p++)
        h = (h ^ *p) * 0x100000001b3ULL;
    h = (h ^ 0x1f) * 0x100000001b3ULL;
    for (const unsigned char *p = (const unsigned char *)b; *p; p++)
        h = (h ^ *p) * 0x100000001b3ULL;
    return h;
}
