/* tail.c: following a log file across rotation (see tail.h).
 *
 * The files a followed path has been, oldest first, form one stream: the
 * rotated files the glob finds (ordered by modification time, then FILE.2
 * before FILE.1), then FILE itself. The tail reads one of them at a time to
 * its end, then moves to the next; a checkpoint names the file being read
 * by identity and the offset in it, so every older file is known to be
 * done and every newer one not started. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "log.h"
#include "metrics.h"
#include "tail.h"

#define FP_MAX ST_TAIL_FP_MAX
#define CKPT_MAGIC "sandtrail-tail-v2"

enum { CKPT_NONE, CKPT_V2, CKPT_OLD };

/* A checkpoint: which file, where in it. */
struct ckpt {
    uintmax_t dev, ino;
    intmax_t pos, mtime_ns;
    size_t fp_len;
    unsigned char fp[32];
};

/* A file the followed path is, or was rotated to. */
struct cand {
    char *name;
    uint64_t dev, ino;
    int64_t size, mtime_ns;
    long num; /* trailing number of the name, -1 without */
    int live;
};

struct st_tail {
    char *path, *ckpt_path, *glob;
    size_t max_line;
    int64_t grace_ms;
    struct st_metric *m_at_risk;
    /* the file being read */
    int fd;
    char *name;
    uint64_t dev, ino;
    int64_t open_mtime_ns; /* its mtime when opened: later ones are newer */
    unsigned char head[FP_MAX]; /* its first bytes, as last checked */
    size_t head_len;
    int64_t size_seen;   /* largest size seen */
    int64_t last_growth; /* monotonic ms of the last read that gave data */
    int trunc_fd; /* while reading a copy: the truncated file, read next */
    int64_t pos;  /* file offset of buf[start] */
    char *buf;
    size_t cap, start, end;
    int skipping; /* inside the tail of a line already returned as too long */
};

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t mtime_ns(const struct stat *st)
{
    return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

static void sha256(const unsigned char *d, size_t n, unsigned char out[32])
{
    if (!EVP_Digest(d, n, out, NULL, EVP_sha256(), NULL))
        st_fatal("SHA-256 failed in OpenSSL");
}

/* The first FP_MAX bytes of fd (fewer when it is shorter); -1 on error. */
static ssize_t read_head(int fd, unsigned char *h)
{
    size_t n = 0;
    while (n < FP_MAX) {
        ssize_t r = pread(fd, h + n, FP_MAX - n, (off_t)n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        n += (size_t)r;
    }
    return (ssize_t)n;
}

/* 1 when the first fp_len bytes of the file called name hash to fp. */
static int fp_matches(const char *name, size_t fp_len, const unsigned char *fp)
{
    unsigned char h[FP_MAX], d[32];
    int fd = open(name, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read_head(fd, h);
    close(fd);
    if (n < 0 || (size_t)n < fp_len)
        return 0;
    sha256(h, fp_len, d);
    return memcmp(d, fp, 32) == 0;
}

/* ---- the rotated files ---- */

static int compressed(const char *name)
{
    static const char *const ext[] = {".gz", ".bz2", ".xz", ".zst", ".lz4",
                                      ".lzma", ".Z", ".zip", NULL};
    size_t n = strlen(name);
    for (int i = 0; ext[i]; i++) {
        size_t e = strlen(ext[i]);
        if (n > e && strcmp(name + n - e, ext[i]) == 0)
            return 1;
    }
    return 0;
}

static int cand_cmp(const void *a, const void *b)
{
    const struct cand *x = a, *y = b;
    if (x->live != y->live)
        return x->live - y->live;
    if (x->mtime_ns != y->mtime_ns)
        return x->mtime_ns < y->mtime_ns ? -1 : 1;
    if (x->num != y->num) /* logrotate's FILE.2 is older than FILE.1 */
        return x->num > y->num ? -1 : 1;
    return strcmp(x->name, y->name);
}

static void cands_free(struct cand *c, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(c[i].name);
    free(c);
}

/* Appends s to out at *o, glob characters escaped. */
static void glob_escape(char *out, size_t n, size_t *o, const char *s, size_t len)
{
    for (size_t i = 0; i < len && *o + 2 < n; i++) {
        if (strchr("*?[]\\", s[i]))
            out[(*o)++] = '\\';
        out[(*o)++] = s[i];
    }
    out[*o] = '\0';
}

/* The glob of rotated files: FILE stands for the followed file's name, a
 * relative pattern is relative to its folder. */
static void rotated_pattern(const struct st_tail *t, char *out, size_t n)
{
    const char *slash = strrchr(t->path, '/');
    const char *base = slash ? slash + 1 : t->path;
    size_t o = 0;
    out[0] = '\0';
    if (t->glob[0] != '/' && slash)
        glob_escape(out, n, &o, t->path, (size_t)(base - t->path));
    for (const char *p = t->glob; *p && o + 1 < n;) {
        if (strncmp(p, "FILE", 4) == 0) {
            glob_escape(out, n, &o, base, strlen(base));
            p += 4;
        } else {
            out[o++] = *p++;
        }
    }
    out[o < n ? o : n - 1] = '\0';
}

static void cand_add(struct cand **c, size_t *n, const char *name,
                     const struct stat *st, int live)
{
    const char *p = name + strlen(name);
    *c = st_realloc(*c, (*n + 1) * sizeof(**c));
    struct cand *x = &(*c)[(*n)++];
    while (p > name && isdigit((unsigned char)p[-1]))
        p--;
    x->name = st_strdup(name);
    x->dev = (uint64_t)st->st_dev;
    x->ino = (uint64_t)st->st_ino;
    x->size = (int64_t)st->st_size;
    x->mtime_ns = mtime_ns(st);
    x->num = *p ? strtol(p, NULL, 10) : -1;
    x->live = live;
}

/* The rotated files and FILE (last, when it exists), oldest first. */
static size_t list_cands(const struct st_tail *t, struct cand **out)
{
    struct cand *c = NULL;
    size_t n = 0;
    struct stat live;
    int have_live = stat(t->path, &live) == 0 && S_ISREG(live.st_mode);
    if (t->glob[0]) {
        char pat[8192], tmp[4200];
        glob_t g;
        memset(&g, 0, sizeof(g));
        rotated_pattern(t, pat, sizeof(pat));
        snprintf(tmp, sizeof(tmp), "%s.tmp", t->ckpt_path);
        if (glob(pat, 0, NULL, &g) == 0)
            for (size_t i = 0; i < g.gl_pathc; i++) {
                const char *nm = g.gl_pathv[i];
                struct stat st;
                if (strcmp(nm, t->path) == 0 || strcmp(nm, t->ckpt_path) == 0 ||
                    strcmp(nm, tmp) == 0 || compressed(nm) || stat(nm, &st) != 0 ||
                    !S_ISREG(st.st_mode) ||
                    (have_live && st.st_dev == live.st_dev && st.st_ino == live.st_ino))
                    continue;
                cand_add(&c, &n, nm, &st, 0);
            }
        globfree(&g);
    }
    if (have_live)
        cand_add(&c, &n, t->path, &live, 1);
    if (n > 1)
        qsort(c, n, sizeof(*c), cand_cmp);
    *out = c;
    return n;
}

/* ---- the file being read ---- */

/* Makes fd (owned from now on, closed on failure), called name, the file
 * being read from offset. keep: the buffered bytes go on (a copy holds the
 * same bytes at the same offsets). Returns 0, or -1 with errno. */
static int adopt(struct st_tail *t, int fd, const char *name, int64_t offset, int keep)
{
    struct stat st;
    unsigned char h[FP_MAX];
    ssize_t hn;
    if (fstat(fd, &st) < 0 || (hn = read_head(fd, h)) < 0 ||
        lseek(fd, (off_t)offset, SEEK_SET) < 0) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    if (t->fd >= 0)
        close(t->fd);
    t->fd = fd;
    if (name != t->name) {
        free(t->name);
        t->name = st_strdup(name);
    }
    t->dev = (uint64_t)st.st_dev;
    t->ino = (uint64_t)st.st_ino;
    t->open_mtime_ns = mtime_ns(&st);
    memcpy(t->head, h, (size_t)hn);
    t->head_len = (size_t)hn;
    t->size_seen = (int64_t)st.st_size;
    t->last_growth = mono_ms();
    if (!keep) {
        t->pos = offset;
        t->start = t->end = 0;
        t->skipping = 0;
    }
    return 0;
}

static int open_file(struct st_tail *t, const char *name, int64_t offset, int keep)
{
    int fd = open(name, O_RDONLY | O_CLOEXEC);
    return fd < 0 ? -1 : adopt(t, fd, name, offset, keep);
}

/* 1 when the first bytes of the file are no longer those seen before (it
 * was truncated and written again); else the head grows with the file. */
static int head_changed(struct st_tail *t)
{
    unsigned char h[FP_MAX];
    ssize_t n = read_head(t->fd, h);
    if (n < 0)
        return 0; /* a read error shows on the next read */
    if ((size_t)n < t->head_len || memcmp(h, t->head, t->head_len) != 0)
        return 1;
    memcpy(t->head, h, (size_t)n);
    t->head_len = (size_t)n;
    return 0;
}

static void at_risk(struct st_tail *t, int64_t bytes, const char *why)
{
    if (bytes <= 0)
        return;
    if (t->m_at_risk)
        st_metric_add(t->m_at_risk, bytes);
    st_warn("\"%s\": %" PRId64 " bytes at risk of loss (%s)", t->path, bytes, why);
}

static int64_t max0(int64_t v)
{
    return v > 0 ? v : 0;
}

/* The file shrank or its first bytes changed under us (copytruncate): what
 * was not read yet is in the copy, if there is one; then the file itself
 * from 0. Returns 1 (read on). */
static int truncated(struct st_tail *t)
{
    int64_t roff = t->pos + (int64_t)(t->end - t->start); /* read up to */
    int64_t partial = t->skipping ? 0 : (int64_t)(t->end - t->start);
    int64_t seen = t->size_seen; /* of the truncated file, before it shrank */
    unsigned char fp[32];
    struct cand *c;
    size_t n = list_cands(t, &c);

    if (t->trunc_fd >= 0) { /* the copy itself changed: nothing sane to go back to */
        close(t->trunc_fd);
        t->trunc_fd = -1;
    }
    for (size_t i = n; i-- > 0;) { /* newest first */
        /* a copy may be shorter than the head we saw: compare what it has */
        size_t len = c[i].size < (int64_t)t->head_len ? (size_t)c[i].size : t->head_len;
        if (c[i].live || (c[i].dev == t->dev && c[i].ino == t->ino) ||
            c[i].size <= roff)
            continue;
        sha256(t->head, len, fp);
        if (!fp_matches(c[i].name, len, fp))
            continue;
        int copy = open(c[i].name, O_RDONLY | O_CLOEXEC), self = t->fd;
        if (copy < 0)
            continue;
        t->fd = -1; /* kept open: read again from 0 after the copy */
        if (adopt(t, copy, c[i].name, roff, 1) < 0) {
            t->fd = self;
            continue;
        }
        t->trunc_fd = self;
        st_warn("\"%s\" was truncated: reading the %" PRId64 " bytes not read yet "
                "from its copy \"%s\", then \"%s\" from the start",
                t->path, c[i].size - roff, c[i].name, t->path);
        at_risk(t, max0(seen - c[i].size),
                "seen in the file but missing from its copy");
        cands_free(c, n);
        return 1;
    }
    cands_free(c, n);
    st_warn("\"%s\" was truncated at offset %" PRId64 " and no copy holds what follows: "
            "reading it again from the start",
            t->path, roff);
    at_risk(t, max0(seen - roff) + partial,
            "truncated before they were read, or a line cut by the truncation");
    int fd = dup(t->fd);
    if (fd < 0 || adopt(t, fd, t->name, 0, 0) < 0) {
        /* cannot go back to 0 on this descriptor: the next read tells */
        t->pos = 0;
        t->start = t->end = 0;
        t->skipping = 0;
    }
    return 1;
}

/* The copy of a truncated file is read: back to that file, from 0. A line
 * the copy ends inside was cut by the copy: its start alone would be a torn
 * event, its end was truncated away. */
static int after_copy(struct st_tail *t)
{
    int fd = t->trunc_fd;
    t->trunc_fd = -1;
    at_risk(t, t->skipping ? 0 : (int64_t)(t->end - t->start),
            "a line cut where the copy ends");
    st_info("\"%s\" read to its end: reading \"%s\" from the start", t->name, t->path);
    if (adopt(t, fd, t->path, 0, 0) < 0)
        return open_file(t, t->path, 0, 0) == 0;
    return 1;
}

/* The path names another file, or none: ours was rotated. Once a newer file
 * has data and ours has not grown for the grace period, move on to the next
 * file (the next rotated one, or FILE). Returns 1 when moved, 2 when the
 * unterminated last line of ours must be handed out first, 0 to wait. */
static int next_file(struct st_tail *t, const struct stat *cur)
{
    struct cand *c;
    size_t n = list_cands(t, &c), i, next;
    int rc = 0, data = 0;
    struct timespec now;

    for (i = 0; i < n && !(c[i].dev == t->dev && c[i].ino == t->ino); i++)
        ;
    if (i < n)
        next = i + 1;
    else /* ours is gone (deleted, renamed out of the pattern) */
        for (next = 0; next < n && c[next].mtime_ns < t->open_mtime_ns; next++)
            ;
    for (i = next; i < n; i++)
        data |= c[i].size > 0;
    clock_gettime(CLOCK_REALTIME, &now);
    int64_t still_ns = (int64_t)now.tv_sec * 1000000000 + now.tv_nsec - mtime_ns(cur);
    int idle = mono_ms() - t->last_growth >= t->grace_ms ||
               still_ns >= t->grace_ms * 1000000;
    if (next < n && data && idle) {
        if (t->end > t->start && !t->skipping) {
            rc = 2;
        } else {
            char *done = st_strdup(t->name);
            if (open_file(t, c[next].name, 0, 0) == 0) {
                st_info("\"%s\" read to its end: reading \"%s\"", done, c[next].name);
                rc = 1;
            }
            free(done);
        }
    }
    cands_free(c, n);
    return rc;
}

/* At the end of the file being read: more data, truncation, rotation? */
static int at_end(struct st_tail *t)
{
    struct stat st, sp;
    int64_t roff = t->pos + (int64_t)(t->end - t->start);
    if (fstat(t->fd, &st) < 0)
        return 0;
    if ((int64_t)st.st_size > t->size_seen)
        t->size_seen = (int64_t)st.st_size;
    if (t->trunc_fd >= 0)
        return after_copy(t);
    /* shrunk, or truncated and written again up to where we are */
    if ((int64_t)st.st_size < roff || head_changed(t))
        return truncated(t);
    if ((int64_t)st.st_size > roff)
        return 1; /* written since the read */
    if (stat(t->path, &sp) == 0 && (uint64_t)sp.st_dev == t->dev &&
        (uint64_t)sp.st_ino == t->ino)
        return 0;
    return next_file(t, &st);
}

/* ---- checkpoints ---- */

/* CKPT_NONE when there is none, CKPT_V2 or CKPT_OLD (inode and offset
 * only); -1 with errstr set when it cannot be read or understood. */
static int ckpt_read(const char *path, struct ckpt *c, char *errstr, size_t errsz)
{
    char line[8192], hex[65], extra;
    uintmax_t dev, ino;
    intmax_t pos, mt;
    size_t fp_len;
    FILE *f = fopen(path, "r");
    int kind = -1;

    memset(c, 0, sizeof(*c));
    if (!f && errno == ENOENT)
        return CKPT_NONE;
    if (!f) {
        snprintf(errstr, errsz, "could not read checkpoint \"%s\": %s", path,
                 strerror(errno));
        return -1;
    }
    if (fgets(line, sizeof(line), f)) {
        if (sscanf(line,
                   CKPT_MAGIC " dev=%ju ino=%ju pos=%jd fp_len=%zu fp=%64[0-9a-f] "
                              "mtime_ns=%jd",
                   &dev, &ino, &pos, &fp_len, hex, &mt) == 6 &&
            strlen(hex) == 64 && fp_len <= FP_MAX && pos >= 0) {
            c->dev = dev, c->ino = ino, c->pos = pos, c->mtime_ns = mt;
            c->fp_len = fp_len;
            for (int i = 0; i < 32; i++) {
                unsigned b;
                sscanf(hex + 2 * i, "%2x", &b);
                c->fp[i] = (unsigned char)b;
            }
            kind = CKPT_V2;
        } else if (sscanf(line, "%ju %jd %c", &ino, &pos, &extra) == 2 && pos >= 0) {
            c->ino = ino, c->pos = pos;
            kind = CKPT_OLD;
        }
    }
    fclose(f);
    if (kind < 0)
        snprintf(errstr, errsz,
                 "checkpoint \"%s\" is in no format this collector reads (expected "
                 "\"" CKPT_MAGIC " dev=... ino=... pos=...\"): move it away to read "
                 "the file from its start",
                 path);
    return kind;
}

/* 1 when offset starts a line of the file (0, or just after a newline). */
static int starts_line(const char *name, int64_t offset)
{
    char ch = 0;
    if (offset == 0)
        return 1;
    int fd = open(name, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    int ok = pread(fd, &ch, 1, (off_t)(offset - 1)) == 1 && ch == '\n';
    close(fd);
    return ok;
}

/* Opens the file the checkpoint names, at its offset, or, when it is gone,
 * the oldest file changed since. Returns -1 to start at FILE's beginning. */
static int resume(struct st_tail *t, int kind, const struct ckpt *ck)
{
    struct cand *c;
    size_t n = list_cands(t, &c), i = n, at = n;
    int64_t off = 0;

    if (kind == CKPT_OLD) {
        for (i = 0; i < n; i++)
            if (c[i].ino == ck->ino && c[i].size >= ck->pos &&
                starts_line(c[i].name, ck->pos))
                break;
        if (i < n) {
            st_warn("checkpoint \"%s\" is in the old format (inode and offset): taking "
                    "\"%s\" for its file, offset %jd starting a line; the next "
                    "checkpoint names the file by its fingerprint too",
                    t->ckpt_path, c[i].name, ck->pos);
            at = i, off = ck->pos;
        } else {
            st_warn("checkpoint \"%s\" (old format) names no file found here: reading "
                    "\"%s\" from its start",
                    t->ckpt_path, t->path);
        }
    } else {
        /* the same file: device, inode and fingerprint */
        for (i = 0; i < n; i++)
            if (c[i].dev == ck->dev && c[i].ino == ck->ino && c[i].size >= ck->pos &&
                fp_matches(c[i].name, ck->fp_len, ck->fp))
                break;
        /* or a copy of it (copytruncate): the same first bytes elsewhere */
        if (i == n)
            for (i = n; i-- > 0;)
                if (!(c[i].dev == ck->dev && c[i].ino == ck->ino) &&
                    fp_matches(c[i].name, ck->fp_len, ck->fp))
                    break;
        if (i < n && c[i].size >= ck->pos) {
            at = i, off = ck->pos;
            if (!c[i].live)
                st_info("resuming in \"%s\" at offset %jd: read to its end before the "
                        "files rotated after it",
                        c[i].name, ck->pos);
        } else if (i < n) {
            /* a copy that ends before our offset: all of it was read */
            at = i + 1;
        } else {
            int reused = 0;
            for (i = 0; i < n; i++)
                reused |= c[i].ino == ck->ino && c[i].dev == ck->dev;
            for (at = 0; at < n && c[at].mtime_ns < ck->mtime_ns; at++)
                ;
            if (at == n && n && c[n - 1].live)
                at = n - 1;
            st_warn("checkpoint \"%s\" names a file (device %ju inode %ju) no longer "
                    "among \"%s\" and its rotated files%s: reading the %zu changed "
                    "since from their start; lines after offset %jd of that file may "
                    "be lost",
                    t->ckpt_path, ck->dev, ck->ino, t->path,
                    reused ? " (its inode number now belongs to another file)" : "",
                    n - at, ck->pos);
        }
    }
    int rc = at < n ? open_file(t, c[at].name, off, 0) : -1;
    cands_free(c, n);
    return rc;
}

struct st_tail *st_tail_open(const char *path, const char *ckpt_path,
                             const struct st_tail_opts *opts, char *errstr,
                             size_t errsz)
{
    struct st_tail *t = st_calloc(1, sizeof(*t));
    struct ckpt ck;

    t->path = st_strdup(path);
    t->ckpt_path = st_strdup(ckpt_path);
    t->glob = st_strdup(opts->rotated_glob ? opts->rotated_glob : "");
    t->grace_ms = opts->grace_ms;
    t->fd = t->trunc_fd = -1;
    t->max_line = opts->max_line;
    t->cap = opts->max_line + 1;
    t->buf = st_malloc(t->cap);
    if (opts->metrics)
        t->m_at_risk = st_metric_get(
            opts->metrics, ST_METRIC_COUNTER,
            "sandtrail_collector_tail_bytes_at_risk_total",
            "bytes of a followed file that may be lost: truncated before they were read "
            "(copytruncate)",
            "");

    int kind = ckpt_read(ckpt_path, &ck, errstr, errsz);
    if (kind < 0)
        goto err;
    if (kind != CKPT_NONE && resume(t, kind, &ck) == 0)
        return t;
    if (open_file(t, path, 0, 0) == 0)
        return t;
    snprintf(errstr, errsz, "could not open \"%s\": %s", path, strerror(errno));
err:
    st_tail_close(t);
    return NULL;
}

void st_tail_close(struct st_tail *t)
{
    if (!t)
        return;
    if (t->fd >= 0)
        close(t->fd);
    if (t->trunc_fd >= 0)
        close(t->trunc_fd);
    free(t->path);
    free(t->ckpt_path);
    free(t->glob);
    free(t->name);
    free(t->buf);
    free(t);
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
        if (r > 0) {
            struct stat st;
            /* truncated and written again past our offset: these bytes may
             * be the new content's, not the continuation of ours */
            if (head_changed(t)) {
                truncated(t);
                continue;
            }
            t->end += (size_t)r;
            t->last_growth = mono_ms();
            if (fstat(t->fd, &st) == 0 && (int64_t)st.st_size > t->size_seen)
                t->size_seen = (int64_t)st.st_size;
            continue;
        }
        int e = at_end(t);
        if (e == 2) {
            /* the last line of a rotated file, without its newline */
            *line = t->buf + t->start;
            *len = t->end - t->start;
            *too_long = 0;
            t->pos += (int64_t)*len;
            t->start = t->end;
            return 1;
        }
        if (e == 0)
            return 0;
    }
}

int st_tail_checkpoint(struct st_tail *t, char *errstr, size_t errsz)
{
    char tmp[4200], hex[65];
    unsigned char fp[32];
    struct stat st;

    if (t->head_len < FP_MAX)
        head_changed(t); /* a longer fingerprint, if the start is unchanged */
    sha256(t->head, t->head_len, fp);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", fp[i]);
    int64_t mt = fstat(t->fd, &st) == 0 ? mtime_ns(&st) : t->open_mtime_ns;
    snprintf(tmp, sizeof(tmp), "%s.tmp", t->ckpt_path);
    FILE *f = fopen(tmp, "w");
    int ok = f &&
             fprintf(f,
                     CKPT_MAGIC " dev=%" PRIu64 " ino=%" PRIu64 " pos=%" PRId64
                                " fp_len=%zu fp=%s mtime_ns=%" PRId64 " name=%s\n",
                     t->dev, t->ino, t->pos, t->head_len, hex, mt, t->name) > 0 &&
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
