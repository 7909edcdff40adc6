/* log.c: one-line log records on stderr, and aborting allocators. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"

static const char *log_program = "sandtrail";
/* Read by every thread, written by the main thread at start-up and on
 * reload: a torn read is impossible for an int, and a record logged at the
 * old level during a reload is harmless. */
static volatile enum st_log_level log_min = ST_LOG_INFO;
static volatile int log_json;

void st_log_init(const char *program, enum st_log_level min_level)
{
    log_program = program;
    log_min = min_level;
}

int st_log_configure(const char *level, const char *format, char *errstr, size_t errsz)
{
    static const char *const levels[] = {"debug", "info", "warn", "error"};
    int lv = -1;
    for (int i = 0; level && i < 4; i++)
        if (strcmp(level, levels[i]) == 0)
            lv = i;
    if (level && lv < 0) {
        snprintf(errstr, errsz, "log.level must be debug, info, warn or error, not \"%s\"",
                 level);
        return -1;
    }
    if (format && strcmp(format, "text") != 0 && strcmp(format, "json") != 0) {
        snprintf(errstr, errsz, "log.format must be text or json, not \"%s\"", format);
        return -1;
    }
    if (level)
        log_min = (enum st_log_level)lv;
    if (format)
        log_json = strcmp(format, "json") == 0;
    return 0;
}

/* Appends s to out (at most outsz - 1 bytes, NUL-terminated): control
 * characters escaped, so a record stays one line and cannot carry terminal
 * escapes; for JSON also quotes and backslashes, and bytes that are not
 * ASCII replaced (a record is valid JSON whatever the message held). */
static void escape(const char *s, char *out, size_t outsz, int json)
{
    size_t o = 0;
    for (; *s && o + 7 < outsz; s++) {
        unsigned char c = (unsigned char)*s;
        if (c < 0x20 || c == 0x7f) {
            o += (size_t)snprintf(out + o, outsz - o, json ? "\\u%04x" : "\\x%02x", c);
        } else if (json && (c == '"' || c == '\\')) {
            out[o++] = '\\';
            out[o++] = (char)c;
        } else if (json && c >= 0x80) {
            out[o++] = '?';
        } else {
            out[o++] = (char)c;
        }
    }
    out[o] = '\0';
}

static void log_va(enum st_log_level level, const char *fmt, va_list ap)
{
    static const char *names[] = {"debug", "info", "warn", "error"};
    char stamp[32];
    struct timespec now;
    struct tm tm;

    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &tm);
    strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
    /* one fprintf per record so that concurrent writers do not interleave */
    char line[1024], esc[2048];
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    if (n < 0)
        line[0] = '\0';
    escape(line, esc, sizeof(esc), log_json);
    if (log_json)
        fprintf(stderr,
                "{\"ts\":\"%s.%03ldZ\",\"level\":\"%s\",\"program\":\"%s\",\"msg\":\"%s\"}\n",
                stamp, now.tv_nsec / 1000000, names[level], log_program, esc);
    else
        fprintf(stderr, "%s.%03ldZ %s %s: %s\n", stamp, now.tv_nsec / 1000000,
                log_program, names[level], esc);
}

void st_log(enum st_log_level level, const char *fmt, ...)
{
    va_list ap;

    if (level < log_min)
        return;
    va_start(ap, fmt);
    log_va(level, fmt, ap);
    va_end(ap);
}

void st_fatal(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    log_va(ST_LOG_ERROR, fmt, ap);
    va_end(ap);
    abort();
}

void *st_malloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        st_fatal("out of memory allocating %zu bytes", n);
    return p;
}

void *st_calloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        st_fatal("out of memory allocating %zu x %zu bytes", n, size);
    return p;
}

void *st_calloc_table(size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size)
        st_fatal("out of memory allocating %zu x %zu bytes", n, size);
    size_t len = (n ? n : 1) * (size ? size : 1);
    void *p = st_malloc(len);
    memset(p, 0, len);
    return p;
}

void *st_realloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        st_fatal("out of memory reallocating %zu bytes", n);
    return q;
}

char *st_strndup(const char *s, size_t n)
{
    char *p = st_malloc(n + 1);
    memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

char *st_strdup(const char *s)
{
    return st_strndup(s, strlen(s));
}
