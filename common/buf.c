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

size_t st_fmt_i64(char *out, int64_t v)
{
    char tmp[ST_I64_LEN];
    /* the magnitude as unsigned: -INT64_MIN does not fit an int64_t */
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    size_t k = 0, n = 0;
    do {
        tmp[k++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (v < 0)
        out[n++] = '-';
    while (k)
        out[n++] = tmp[--k];
    out[n] = '\0';
    return n;
}

void st_buf_addi64(struct st_buf *b, int64_t v)
{
    st_buf_reserve(b, ST_I64_LEN);
    b->len += st_fmt_i64(b->data + b->len, v);
}
