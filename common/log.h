/* log.h: one-line log records on stderr.
 *
 * Records never contain event content: callers pass identifiers, counts and
 * error strings only. */
#ifndef ST_LOG_H
#define ST_LOG_H

#include <stddef.h>

enum st_log_level { ST_LOG_DEBUG, ST_LOG_INFO, ST_LOG_WARN, ST_LOG_ERROR };

/* Sets the program name shown in each record (not copied: pass a literal). */
void st_log_init(const char *program, enum st_log_level min_level);

/* Sets the minimum level ("debug", "info", "warn", "error") and the format
 * ("text": one line; "json": one JSON object per line, for log shippers);
 * NULL leaves one as it is. Safe to call again on reload. Returns 0, or -1
 * with errstr naming the property. Either way, a record's message has its
 * control characters escaped. */
int st_log_configure(const char *level, const char *format, char *errstr, size_t errsz);

void st_log(enum st_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#define st_debug(...) st_log(ST_LOG_DEBUG, __VA_ARGS__)
#define st_info(...) st_log(ST_LOG_INFO, __VA_ARGS__)
#define st_warn(...) st_log(ST_LOG_WARN, __VA_ARGS__)
#define st_error(...) st_log(ST_LOG_ERROR, __VA_ARGS__)

/* Aborts with a message: used on allocation failure and broken invariants. */
void st_fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Allocation wrappers that abort on failure (callers never check). */
void *st_malloc(size_t n);
void *st_calloc(size_t n, size_t size);
/* st_calloc for a large table that is read before it is written (an
 * open-addressing probe, a chain's head): its bytes are zeroed by a write
 * at once. calloc leaves memory fresh from the kernel untouched, so each
 * page's first read maps the kernel's shared zero page and its first write
 * then copies it, a second fault and a TLB flush on every core the process
 * runs on (an interrupt each): the run index's rehash spent 8% of a
 * detection worker's time in those (docs/architecture.md, "Session 22"). */
void *st_calloc_table(size_t n, size_t size);
void *st_realloc(void *p, size_t n);
char *st_strdup(const char *s);
char *st_strndup(const char *s, size_t n);

#endif
