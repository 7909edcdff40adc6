/* escape.c: control characters written as visible escapes (see escape.h). */
#include "escape.h"

#include <stdint.h>
#include <stdio.h>

/* The length of the valid UTF-8 sequence at p[0..n) (1 for ASCII), 0 when
 * it is not valid. */
static size_t utf8_len(const unsigned char *p, size_t n)
{
    size_t need;
    uint32_t cp;

    if (p[0] < 0x80)
        return 1;
    if (p[0] >= 0xC2 && p[0] <= 0xDF)
        need = 2, cp = p[0] & 0x1F;
    else if (p[0] >= 0xE0 && p[0] <= 0xEF)
        need = 3, cp = p[0] & 0x0F;
    else if (p[0] >= 0xF0 && p[0] <= 0xF4)
        need = 4, cp = p[0] & 0x07;
    else
        return 0;
    if (n < need)
        return 0;
    for (size_t i = 1; i < need; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3F);
    }
    if ((need == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ||
        (need == 4 && (cp < 0x10000 || cp > 0x10FFFF)))
        return 0;
    return need;
}

/* What to do with the character at p: 0 copy it (*n bytes), 1 escape the
 * byte p[0], 2 escape the C1 control p[1] (a 2-byte sequence). */
static int classify(const unsigned char *p, size_t left, size_t *n)
{
    *n = utf8_len(p, left);
    if (*n == 0) {
        *n = 1;
        return 1;
    }
    if (*n == 1)
        return p[0] < 0x20 || p[0] == 0x7F;
    if (*n == 2 && p[0] == 0xC2 && p[1] <= 0x9F)
        return 2;
    return 0;
}

void st_escape_ctl(struct st_buf *out, const char *s, size_t len, int json)
{
    const unsigned char *p = (const unsigned char *)s;
    char esc[8];

    for (size_t i = 0; i < len;) {
        size_t n;
        switch (classify(p + i, len - i, &n)) {
        case 0:
            st_buf_add(out, p + i, n);
            break;
        case 1:
            snprintf(esc, sizeof(esc), json ? "\\u%04x" : "\\x%02x", p[i]);
            st_buf_adds(out, esc);
            break;
        case 2:
            snprintf(esc, sizeof(esc), "\\u%04x", p[i + 1]);
            st_buf_adds(out, esc);
            break;
        }
        i += n;
    }
}

int st_escape_needed(const char *s, size_t len)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; i < len;) {
        size_t n;
        if (classify(p + i, len - i, &n))
            return 1;
        i += n;
    }
    return 0;
}
