/* timeutil.c: RFC 3339 parsing and formatting without the C library's local
 * time zone machinery (timegm is not in C11 and mktime depends on TZ). */
#include <stdio.h>
#include <time.h>

#include "timeutil.h"

/* Days since 1970-01-01 of a proleptic Gregorian date. */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static void civil_from_days(int64_t z, int *y, int *m, int *d)
{
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = (int)(yoe + era * 400 + (*m <= 2));
}

/* Inline, with n a constant at every call: the loop unrolls (every event's
 * "ts" goes through here). */
static inline __attribute__((always_inline)) int digits(const char *s, size_t n, int *out)
{
    int v = 0;
    unsigned bad = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned dg = (unsigned)(unsigned char)s[i] - '0';
        bad |= dg > 9;
        v = v * 10 + (int)dg;
    }
    if (bad)
        return -1;
    *out = v;
    return 0;
}

static int days_in_month(int y, int m)
{
    static const int dim[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return m == 2 ? 28 + leap : dim[m - 1];
}

int st_time_parse_rfc3339(const char *s, size_t len, int64_t *us)
{
    int y, mo, d, h, mi, sec, frac_us = 0;
    size_t i;

    /* YYYY-MM-DDTHH:MM:SS is 19 bytes, then a zone of at least one */
    if (len < 20 || s[4] != '-' || s[7] != '-' || s[13] != ':' || s[16] != ':')
        return -1;
    if (s[10] != 'T' && s[10] != 't' && s[10] != ' ')
        return -1;
    if (digits(s, 4, &y) || digits(s + 5, 2, &mo) || digits(s + 8, 2, &d) ||
        digits(s + 11, 2, &h) || digits(s + 14, 2, &mi) ||
        digits(s + 17, 2, &sec))
        return -1;
    if (mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo) || h > 23 ||
        mi > 59 || sec > 60)
        return -1;
    i = 19;
    if (i < len && s[i] == '.') {
        /* the digits after the sixth count for nothing (truncated) */
        static const int scale[6] = {100000, 10000, 1000, 100, 10, 1};
        size_t start = ++i;
        while (i < len && s[i] >= '0' && s[i] <= '9') {
            if (i - start < 6)
                frac_us += (s[i] - '0') * scale[i - start];
            i++;
        }
        if (i == start)
            return -1;
    }
    if (i >= len)
        return -1;
    int offset_min = 0;
    if (s[i] == 'Z' || s[i] == 'z') {
        i++;
    } else if (s[i] == '+' || s[i] == '-') {
        int oh, om;
        if (len - i < 6 || s[i + 3] != ':' || digits(s + i + 1, 2, &oh) ||
            digits(s + i + 4, 2, &om) || oh > 23 || om > 59)
            return -1;
        offset_min = (oh * 60 + om) * (s[i] == '-' ? -1 : 1);
        i += 6;
    } else {
        return -1;
    }
    if (i != len)
        return -1;
    if (sec == 60) /* a leap second sorts as the last microsecond before it */
        sec = 59, frac_us = 999999;
    int64_t t = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + sec;
    t -= (int64_t)offset_min * 60;
    *us = t * 1000000 + frac_us;
    return 0;
}

/* v (0 <= v < 10^n) as exactly n decimal digits at p. */
static void put_digits(char *p, int v, int n)
{
    for (int i = n - 1; i >= 0; i--) {
        p[i] = (char)('0' + v % 10);
        v /= 10;
    }
}

void st_time_format(int64_t us, char *buf, size_t size)
{
    int64_t secs = us >= 0 ? us / 1000000 : -((-us + 999999) / 1000000);
    int64_t rem = us - secs * 1000000;
    int64_t days = secs >= 0 ? secs / 86400 : -((-secs + 86399) / 86400);
    int64_t sod = secs - days * 86400;
    int y, m, d;

    civil_from_days(days, &y, &m, &d);
    /* every COPY row formats two times: by hand when the year has four
     * digits (all event times do), the same bytes snprintf would write */
    if (y >= 0 && y <= 9999 && size >= 28) {
        put_digits(buf, y, 4);
        buf[4] = '-';
        put_digits(buf + 5, m, 2);
        buf[7] = '-';
        put_digits(buf + 8, d, 2);
        buf[10] = 'T';
        put_digits(buf + 11, (int)(sod / 3600), 2);
        buf[13] = ':';
        put_digits(buf + 14, (int)(sod / 60 % 60), 2);
        buf[16] = ':';
        put_digits(buf + 17, (int)(sod % 60), 2);
        buf[19] = '.';
        put_digits(buf + 20, (int)rem, 6);
        buf[26] = 'Z';
        buf[27] = '\0';
        return;
    }
    snprintf(buf, size, "%04d-%02d-%02dT%02d:%02d:%02d.%06dZ", y, m, d,
             (int)(sod / 3600), (int)(sod / 60 % 60), (int)(sod % 60), (int)rem);
}

int64_t st_time_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t st_time_mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int64_t st_time_mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}
