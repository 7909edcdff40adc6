/* linereader.c: bounded NDJSON line reading (see linereader.h). */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "linereader.h"
#include "log.h"

struct st_linereader {
    FILE *f;
    /* f's descriptor, read directly so that a pipe's lines are returned as
     * they come (fread waits to fill the buffer); -1: f has none (a memory
     * stream), read with fread */
    int fd;
    int err;  /* a read() failed (errno kept) */
    char *buf;
    size_t cap;   /* max_line + 1: room for one whole line and its '\n' */
    size_t max_line;
    size_t start; /* first unread byte */
    size_t end;   /* one past the last byte read */
    int eof;
    int skipping; /* inside the tail of a line already reported as too long */
};

struct st_linereader *st_linereader_new(FILE *f, size_t max_line)
{
    struct st_linereader *r = st_calloc(1, sizeof(*r));
    r->f = f;
    r->fd = fileno(f);
    r->max_line = max_line;
    r->cap = max_line + 1;
    r->buf = st_malloc(r->cap);
    return r;
}

void st_linereader_destroy(struct st_linereader *r)
{
    if (!r)
        return;
    free(r->buf);
    free(r);
}

/* Moves unread bytes to the front and reads more. Returns bytes read. */
static size_t fill(struct st_linereader *r)
{
    if (r->start > 0) {
        memmove(r->buf, r->buf + r->start, r->end - r->start);
        r->end -= r->start;
        r->start = 0;
    }
    if (r->eof || r->end == r->cap)
        return 0;
    size_t n;
    if (r->fd >= 0) {
        ssize_t got;
        do
            got = read(r->fd, r->buf + r->end, r->cap - r->end);
        while (got < 0 && errno == EINTR);
        r->err = got < 0;
        n = got > 0 ? (size_t)got : 0;
    } else {
        n = fread(r->buf + r->end, 1, r->cap - r->end, r->f);
    }
    if (n == 0)
        r->eof = 1;
    r->end += n;
    return n;
}

int st_linereader_next(struct st_linereader *r, const char **line, size_t *len,
                       int *too_long)
{
    for (;;) {
        char *nl = memchr(r->buf + r->start, '\n', r->end - r->start);
        if (r->skipping) {
            if (nl) {
                r->start = (size_t)(nl - r->buf) + 1;
                r->skipping = 0;
                continue;
            }
            r->start = r->end = 0;
            if (fill(r) == 0)
                return r->err || ferror(r->f) ? -1 : 0;
            continue;
        }
        if (nl) {
            *line = r->buf + r->start;
            *len = (size_t)(nl - *line);
            r->start += *len + 1;
            if (*len && (*line)[*len - 1] == '\r')
                (*len)--;
            *too_long = 0;
            return 1;
        }
        if (r->end - r->start >= r->max_line) {
            /* no newline within max_line bytes: report the prefix, skip the
             * rest on the next call */
            *line = r->buf + r->start;
            *len = r->max_line;
            r->start += r->max_line;
            r->skipping = 1;
            *too_long = 1;
            return 1;
        }
        if (fill(r) == 0) {
            if (r->err || ferror(r->f))
                return -1;
            if (r->end == r->start)
                return 0;
            /* last line without a newline */
            *line = r->buf + r->start;
            *len = r->end - r->start;
            r->start = r->end;
            *too_long = 0;
            return 1;
        }
    }
}

int st_linereader_would_block(const struct st_linereader *r)
{
    if (r->fd < 0 || r->eof || memchr(r->buf + r->start, '\n', r->end - r->start))
        return 0;
    struct pollfd p = {.fd = r->fd, .events = POLLIN};
    return poll(&p, 1, 0) == 0;
}
