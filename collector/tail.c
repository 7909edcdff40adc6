/* tail.c: following a log file across rotation (see tail.h). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "tail.h"

struct st_tail {
    char *path, *ckpt_path;
    int fd;
    uint64_t ino;
    int64_t pos;  /* file offset of buf[start] */
    char *buf;
    size_t cap, start, end, max_line;
    int skipping; /* inside the tail of a line already returned as too long */
    int draining; /* reading a rotated file to its end before switching */
};

static int open_at(struct st_tail *t, const char *path, int64_t offset)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    if (fstat(fd, &st) < 0 || (offset > 0 && lseek(fd, offset, SEEK_SET) < 0)) {
        close(fd);
        return -1;
    }
    if (t->fd >= 0)
        close(t->fd);
    t->fd = fd;
    t->ino = (uint64_t)st.st_ino;
    t->pos = offset;
    t->start = t->end = 0;
    t->skipping = 0;
    return 0;
}

struct st_tail *st_tail_open(const char *path, const char *ckpt_path, size_t max_line,
                             char *errstr, size_t errsz)
{
    struct st_tail *t = st_calloc(1, sizeof(*t));
    uint64_t ino = 0;
    int64_t off = 0;
    struct stat st;
    char rotated[4096];

    t->path = st_strdup(path);
    t->ckpt_path = st_strdup(ckpt_path);
    t->fd = -1;
    t->max_line = max_line;
    t->cap = max_line + 1;
    t->buf = st_malloc(t->cap);

    FILE *f = fopen(ckpt_path, "r");
    if (f) {
        if (fscanf(f, "%" SCNu64 " %" SCNd64, &ino, &off) != 2)
            ino = 0, off = 0;
        fclose(f);
    }
    snprintf(rotated, sizeof(rotated), "%s.1", path);
    if (ino && stat(path, &st) == 0 && (uint64_t)st.st_ino == ino && st.st_size >= off) {
        if (open_at(t, path, off) == 0)
            return t;
    } else if (ino && stat(rotated, &st) == 0 && (uint64_t)st.st_ino == ino &&
               st.st_size >= off) {
        /* rotated while we were down: finish the old file first */
        if (open_at(t, rotated, off) == 0) {
            t->draining = 1;
            return t;
        }
    }
    if (open_at(t, path, 0) == 0)
        return t;
    snprintf(errstr, errsz, "could not open \"%s\": %s", path, strerror(errno));
    st_tail_close(t);
    return NULL;
}

void st_tail_close(struct st_tail *t)
{
    if (!t)
        return;
    if (t->fd >= 0)
        close(t->fd);
    free(t->path);
    free(t->ckpt_path);
    free(t->buf);
    free(t);
}

/* At the end of the open file: has the path moved on to another file, or
 * been truncated under us? */
static int check_rotation(struct st_tail *t)
{
    struct stat st, cur;
    if (stat(t->path, &st) < 0)
        return 0; /* between rename and create: look again later */
    if (t->draining || (uint64_t)st.st_ino != t->ino) {
        t->draining = 0;
        return open_at(t, t->path, 0) == 0 ? 1 : 0;
    }
    if (fstat(t->fd, &cur) == 0 && cur.st_size < t->pos + (int64_t)(t->end - t->start)) {
        /* copytruncate: what was not read before the copy is in the copy */
        st_warn("\"%s\" was truncated: reading it again from the start", t->path);
        return open_at(t, t->path, 0) == 0 ? 1 : 0;
    }
    return 0;
}

int st_tail_next(struct st_tail *t, const char **line, size_t *len, int *too_long)
{
    for (;;) {
        char *nl = memchr(t->buf + t->start, '\n', t->end - t->start);
        if (nl) {
            size_t n = (size_t)(nl - (t->buf + t->start));
            const char *l = t->buf + t->start;
            t->start += n + 1;
            t->pos += (int64_t)n + 1;
            if (t->skipping) {
                t->skipping = 0;
                continue;
            }
            *line = l;
            *len = n && l[n - 1] == '\r' ? n - 1 : n;
            *too_long = 0;
            return 1;
        }
        if (t->end - t->start >= t->max_line) {
            size_t n = t->end - t->start;
            const char *l = t->buf + t->start;
            t->start = t->end;
            t->pos += (int64_t)n;
            if (t->skipping)
                continue;
            t->skipping = 1;
            *line = l;
            *len = t->max_line;
            *too_long = 1;
            return 1;
        }
        if (t->start > 0) {
            memmove(t->buf, t->buf + t->start, t->end - t->start);
            t->end -= t->start;
            t->start = 0;
        }
        ssize_t r = read(t->fd, t->buf + t->end, t->cap - t->end);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (r == 0) {
            if (check_rotation(t))
                continue;
            return 0;
        }
        t->end += (size_t)r;
    }
}

int st_tail_checkpoint(struct st_tail *t, char *errstr, size_t errsz)
{
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp", t->ckpt_path);
    FILE *f = fopen(tmp, "w");
    int ok = f && fprintf(f, "%" PRIu64 " %" PRId64 "\n", t->ino, t->pos) > 0 &&
             fflush(f) == 0 && fsync(fileno(f)) == 0;
    if (f && fclose(f) != 0)
        ok = 0;
    if (!ok || rename(tmp, t->ckpt_path) != 0) {
        snprintf(errstr, errsz, "could not write checkpoint \"%s\": %s", t->ckpt_path,
                 strerror(errno));
        return -1;
    }
    return 0;
}
