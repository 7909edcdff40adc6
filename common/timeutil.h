/* timeutil.h: RFC 3339 timestamps as microseconds since the Unix epoch. */
#ifndef ST_TIMEUTIL_H
#define ST_TIMEUTIL_H

#include <stddef.h>
#include <stdint.h>

/* Parses an RFC 3339 date-time ("2026-11-29T07:16:10.25Z", offsets allowed,
 * fractions truncated to microseconds). Returns 0 and sets *us, or -1 when
 * the text is not a valid RFC 3339 date-time. s need not be NUL-terminated. */
int st_time_parse_rfc3339(const char *s, size_t len, int64_t *us);

/* Writes us as "YYYY-MM-DDTHH:MM:SS.ffffffZ" into buf (at least 32 bytes). */
void st_time_format(int64_t us, char *buf, size_t size);

/* Wall clock, microseconds since the epoch. */
int64_t st_time_now_us(void);

/* Monotonic clock, microseconds. */
int64_t st_time_mono_us(void);

/* Monotonic clock, milliseconds. */
int64_t st_time_mono_ms(void);

#endif
