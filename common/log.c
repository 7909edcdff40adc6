/* log.c: one-line log records on stderr, and aborting allocators. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"

static const char *log_program = "sandtrail";
static enum st_log_level log_min = ST_LOG_INFO;

void st_log_init(const char *program, enum st_log_level min_level)
{
    log_program = program;
    log_min = min_level;
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
    char line[1024];
    int n = vsnprintf(line, sizeof(line), fmt, ap);
    if (n < 0)
        line[0] = '\0';
    fprintf(stderr, "%s.%03ldZ %s %s: %s\n", stamp, now.tv_nsec / 1000000,
            log_program, names[level], line);
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
