/* spool.c: the on-disk spool in front of Kafka (see spool.h).
 *
 * A segment is DIR/<id>.seg, a sequence of records:
 *   u32 magic "STS1" | u32 payload length | u32 crc32(payload) | payload
 *   payload = u8 dlq | u16 topic length | topic | u32 key length | key | value
 * The topic travels with the record, so that a spool outlives a change of
 * configuration without sending anything to the wrong topic.
 * Replay stops at the first record that does not check out: only a record
 * written after the last fsync can be torn, and its input has not been told
 * it is safe. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <zlib.h>

#include "buf.h"
#include "log.h"
#include "spool.h"
#include "timeutil.h"

#define MAGIC 0x31535453u /* "STS1" */
#define SEGMENT_BYTES (4 << 20)

/* A record's token (what st_spool_append returns and the producer hands to
 * Kafka as the message's opaque): its segment's id in the high 32 bits,
 * its offset in the segment in the low 32. A segment ends at its first
 * record past SEGMENT_BYTES, a record is at most 64 MiB (input.max_line_
 * bytes), so offsets fit; ids count segments from 1. */
#define TOKEN(id, off) ((int64_t)(id) << 32 | (int64_t)(off))
#define TOKEN_SEG(t) ((t) >> 32)
#define TOKEN_OFF(t) ((t) & 0xFFFFFFFF)

struct segment {
    int64_t id;
    int64_t bytes;
    int64_t records;
    int64_t outstanding; /* queued in the producer, not yet reported */
    int failed;          /* found at start: all of it is produced again */
    /* offsets of the records whose delivery failed: those are produced
     * again, not the records Kafka acknowledged beside them */
    int64_t *redo;
    size_t nredo, capredo;
    int unsent;          /* records from offset resume on were never queued
                          * (a full producer queue): produced from there */
    int64_t resume;
    int closed;          /* no more appends */
    struct segment *next;
};

struct st_spool {
    char *dir;
    int64_t max_bytes, total;
    int64_t nospace_ms; /* when the disk last said it was full, or 0 */
    int64_t min_free;   /* spool.min_free_bytes */
    int64_t statfs_ms;  /* when the free space was last asked */
    int low_space;      /* it was under min_free then */
    int64_t next_id;
    struct segment *segs; /* oldest first */
    struct segment *cur;  /* the open one, or NULL */
    int fd;               /* of cur */
    int lock_fd;          /* DIR/LOCK, held while open: one collector per spool */
    int64_t last_off;     /* of the record appended last, in cur */
    struct st_buf rec;
};

static void seg_path(const struct st_spool *s, int64_t id, char *out, size_t n)
{
    snprintf(out, n, "%s/%016" PRId64 ".seg", s->dir, id);
}

static struct segment *seg_find(struct st_spool *s, int64_t id)
{
    for (struct segment *g = s->segs; g; g = g->next)
        if (g->id == id)
            return g;
    return NULL;
}

static struct segment *seg_add(struct st_spool *s, int64_t id)
{
    struct segment *g = st_calloc(1, sizeof(*g)), **p = &s->segs;
    g->id = id;
    while (*p)
        p = &(*p)->next;
    *p = g;
    if (id >= s->next_id)
        s->next_id = id + 1;
    return g;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

struct st_spool *st_spool_open(const char *dir, int64_t max_bytes, int64_t min_free,
                               char *errstr, size_t errsz)
{
    struct st_spool *s = st_calloc(1, sizeof(*s));
    s->dir = st_strdup(dir);
    s->max_bytes = max_bytes;
    s->min_free = min_free;
    s->next_id = 1;
    s->fd = -1;
    s->lock_fd = -1;
    st_buf_init(&s->rec);
    if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
        snprintf(errstr, errsz, "could not create spool folder \"%s\": %s", dir,
                 strerror(errno));
        st_spool_close(s);
        return NULL;
    }
    char lock[4096];
    snprintf(lock, sizeof(lock), "%s/LOCK", dir);
    s->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (s->lock_fd < 0 || flock(s->lock_fd, LOCK_EX | LOCK_NB) < 0) {
        snprintf(errstr, errsz,
                 "spool folder \"%s\" is in use by another collector (each needs its own)",
                 dir);
        st_spool_close(s);
        return NULL;
    }
    DIR *d = opendir(dir);
    if (!d) {
        snprintf(errstr, errsz, "could not open spool folder \"%s\": %s", dir,
                 strerror(errno));
        st_spool_close(s);
        return NULL;
    }
    int64_t *ids = NULL;
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t len = strlen(de->d_name);
        if (len < 5 || strcmp(de->d_name + len - 4, ".seg"))
            continue;
        ids = st_realloc(ids, (n + 1) * sizeof(*ids));
        ids[n++] = strtoll(de->d_name, NULL, 10);
    }
    closedir(d);
    if (n)
        qsort(ids, n, sizeof(*ids), cmp_i64);
    for (size_t i = 0; i < n; i++) {
        /* left by an earlier run: produced again, whatever became of it */
        char path[4096];
        struct stat st;
        struct segment *g = seg_add(s, ids[i]);
        seg_path(s, ids[i], path, sizeof(path));
        g->bytes = stat(path, &st) == 0 ? st.st_size : 0;
        g->closed = 1;
        g->failed = 1;
        s->total += g->bytes;
    }
    free(ids);
    if (n)
        st_info("spool \"%s\": %zu segment(s), %" PRId64 " bytes to produce again", dir, n,
                s->total);
    return s;
}

void st_spool_close(struct st_spool *s)
{
    if (!s)
        return;
    if (s->fd >= 0) {
        fsync(s->fd);
        close(s->fd);
    }
    for (struct segment *g = s->segs, *n; g; g = n) {
        n = g->next;
        free(g->redo);
        free(g);
    }
    if (s->lock_fd >= 0)
        close(s->lock_fd); /* releases the lock */
    st_buf_fini(&s->rec);
    free(s->dir);
    free(s);
}

static void put32(struct st_buf *b, uint32_t v)
{
    unsigned char x[4] = {(unsigned char)v, (unsigned char)(v >> 8),
                          (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
    st_buf_add(b, x, 4);
}

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
           (uint32_t)p[3] << 24;
}

/* The disk is full: what was written of the record is taken back, so that
 * the segment stays a sequence of whole records. */
static int64_t no_space(struct st_spool *s, const char *what)
{
    if (!s->nospace_ms)
        st_warn("spool \"%s\": %s: %s; pushing back until there is room", s->dir, what,
                strerror(errno));
    s->nospace_ms = st_time_mono_ms();
    if (s->fd >= 0 && s->cur) {
        if (ftruncate(s->fd, (off_t)s->cur->bytes) < 0 ||
            lseek(s->fd, (off_t)s->cur->bytes, SEEK_SET) < 0)
            st_warn("spool \"%s\": could not take back a partial record: %s", s->dir,
                    strerror(errno));
    }
    return -2;
}

static int out_of_space(int err)
{
    return err == ENOSPC || err == EDQUOT;
}

int64_t st_spool_append(struct st_spool *s, int dlq, const char *topic, const char *key,
                        size_t keylen, const char *value, size_t len)
{
    char path[4096];
    /* a long input (--input, a busy tail) is cut into segments that can be
     * produced again and deleted each on its own */
    if (s->cur && s->cur->bytes >= SEGMENT_BYTES && st_spool_sync(s) < 0)
        return -1;
    if (!s->cur) {
        s->cur = seg_add(s, s->next_id);
        seg_path(s, s->cur->id, path, sizeof(path));
        s->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        if (s->fd < 0) {
            if (out_of_space(errno))
                return no_space(s, "could not create a segment");
            st_error("could not create spool segment \"%s\": %s", path, strerror(errno));
            return -1;
        }
    }
    st_buf_reset(&s->rec);
    put32(&s->rec, MAGIC);
    size_t tlen = strlen(topic);
    put32(&s->rec, (uint32_t)(1 + 2 + tlen + 4 + keylen + len));
    put32(&s->rec, 0); /* crc, filled in below */
    st_buf_addc(&s->rec, (char)(dlq ? 1 : 0));
    st_buf_addc(&s->rec, (char)(tlen & 0xff));
    st_buf_addc(&s->rec, (char)(tlen >> 8));
    st_buf_add(&s->rec, topic, tlen);
    put32(&s->rec, (uint32_t)keylen);
    if (keylen)
        st_buf_add(&s->rec, key, keylen);
    st_buf_add(&s->rec, value, len);
    uint32_t crc = (uint32_t)crc32(0L, (const Bytef *)s->rec.data + 12,
                                   (uInt)(s->rec.len - 12));
    unsigned char *c = (unsigned char *)s->rec.data + 8;
    c[0] = (unsigned char)crc, c[1] = (unsigned char)(crc >> 8),
    c[2] = (unsigned char)(crc >> 16), c[3] = (unsigned char)(crc >> 24);
    size_t off = 0;
    while (off < s->rec.len) {
        ssize_t w = write(s->fd, s->rec.data + off, s->rec.len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0 && out_of_space(errno))
            return no_space(s, "the disk is full");
        if (w <= 0) {
            st_error("could not write to the spool: %s", strerror(errno));
            return -1;
        }
        off += (size_t)w;
    }
    if (s->nospace_ms)
        st_info("spool \"%s\": room on the disk again", s->dir);
    s->nospace_ms = 0;
    s->last_off = s->cur->bytes;
    s->cur->bytes += (int64_t)s->rec.len;
    s->cur->records++;
    s->total += (int64_t)s->rec.len;
    return TOKEN(s->cur->id, s->last_off);
}

int st_spool_sync(struct st_spool *s)
{
    if (!s->cur)
        return 0;
    if (fsync(s->fd) < 0) {
        st_error("could not fsync the spool: %s", strerror(errno));
        return -1;
    }
    close(s->fd);
    s->fd = -1;
    s->cur->closed = 1;
    s->cur = NULL;
    return 0;
}

void st_spool_queued(struct st_spool *s, int64_t tok, int queued)
{
    struct segment *g = seg_find(s, TOKEN_SEG(tok));
    if (!g)
        return;
    if (queued)
        g->outstanding++;
    else if (!g->unsent) {
        /* the first record left behind; a replay sets resume itself */
        g->unsent = 1;
        g->resume = g == s->cur ? s->last_off : 0;
    }
}

int st_spool_unsent(const struct st_spool *s, int64_t tok)
{
    const struct segment *g = s->cur && s->cur->id == TOKEN_SEG(tok) ? s->cur : NULL;
    return g && g->unsent;
}

static void redo_add(struct segment *g, int64_t off)
{
    if (g->nredo == g->capredo) {
        g->capredo = g->capredo ? 2 * g->capredo : 16;
        g->redo = st_realloc(g->redo, g->capredo * sizeof(*g->redo));
    }
    g->redo[g->nredo++] = off;
}

void st_spool_delivered(struct st_spool *s, int64_t tok, int ok)
{
    struct segment *g = seg_find(s, TOKEN_SEG(tok));
    if (!g)
        return;
    g->outstanding--;
    if (!ok)
        redo_add(g, TOKEN_OFF(tok));
}

/* Produces g again: all of it when it was found at start, the records
 * whose delivery failed, and the records never queued (from g->resume on).
 * Stops at the first fn that returns non-zero, and remembers where (returns
 * that value); -1 when g cannot be read. What it produces is taken out of
 * g first: the reports of these records, which can come while it runs
 * (hand_over polls), note their failures afresh. */
static int replay(struct st_spool *s, struct segment *g, st_spool_fn fn, void *arg)
{
    char path[4096];
    struct st_buf data;
    int rc = 0, all = g->failed, unsent = g->unsent;
    int64_t resume = g->resume, *redo = g->redo;
    size_t nredo = g->nredo, r = 0;

    g->redo = NULL;
    g->nredo = g->capredo = 0;
    g->failed = g->unsent = 0;
    if (nredo > 1)
        qsort(redo, nredo, sizeof(*redo), cmp_i64);
    int64_t from = all ? 0 : unsent ? resume : INT64_MAX;
    if (nredo && redo[0] < from)
        from = redo[0];

    seg_path(s, g->id, path, sizeof(path));
    FILE *f = fopen(path, "rb");
    if (!f) {
        /* removed by hand, or unreadable: nothing more can come of it */
        st_error("spool segment \"%s\" cannot be read (%s): skipped", path, strerror(errno));
        free(redo);
        return -1;
    }
    st_buf_init(&data);
    char chunk[65536];
    size_t n;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        st_buf_add(&data, chunk, n);
    fclose(f);
    const unsigned char *start = (const unsigned char *)data.data, *end = start + data.len;
    const unsigned char *p = start;
    if (from > 0 && from <= (int64_t)data.len)
        p += from;
    while (p && end - p >= 12) {
        uint32_t magic = get32(p), plen = get32(p + 4), crc = get32(p + 8);
        if (magic != MAGIC || (size_t)(end - p - 12) < plen || plen < 7 ||
            (uint32_t)crc32(0L, p + 12, plen) != crc) {
            st_warn("spool segment \"%s\": a torn record at its end is dropped", path);
            break;
        }
        uint32_t tlen = (uint32_t)p[13] | (uint32_t)p[14] << 8;
        if (plen < 7 + tlen || get32(p + 15 + tlen) > plen - 7 - tlen)
            break;
        int64_t off = (int64_t)(p - start);
        while (r < nredo && redo[r] < off)
            r++;
        int whole = all || (unsent && off >= resume);
        if (!whole && !(r < nredo && redo[r] == off)) {
            p += 12 + plen;
            continue;
        }
        uint32_t klen = get32(p + 15 + tlen);
        char topic[256];
        snprintf(topic, sizeof(topic), "%.*s", (int)(tlen < 255 ? tlen : 255),
                 (const char *)p + 15);
        const char *key = (const char *)p + 19 + tlen;
        rc = fn(arg, TOKEN(g->id, off), p[12], topic, key, klen, key + klen,
                plen - 7 - tlen - klen);
        if (rc) {
            /* the next call goes on from this record: every record from
             * here when all of it, or the never-queued ones, were due;
             * else the failed ones left, and the never-queued ones from
             * where they were */
            g->unsent = whole || unsent;
            g->resume = whole ? off : resume;
            for (size_t k = r; k < nredo; k++)
                if (!whole)
                    redo_add(g, redo[k]);
            break;
        }
        p += 12 + plen;
    }
    st_buf_fini(&data);
    free(redo);
    return rc;
}

void st_spool_maintain(struct st_spool *s, st_spool_fn fn, void *arg)
{
    struct segment **pp = &s->segs;
    while (*pp) {
        struct segment *g = *pp;
        if (g->closed && g->outstanding == 0 && !g->failed && !g->unsent && !g->nredo) {
            char path[4096];
            seg_path(s, g->id, path, sizeof(path));
            unlink(path);
            s->total -= g->bytes;
            s->nospace_ms = 0; /* room again, perhaps: the next append says */
            *pp = g->next;
            free(g->redo);
            free(g);
            continue;
        }
        /* failed deliveries wait for every report of the segment (its
         * failed records are produced again together, in order); records
         * never queued go at once */
        if (g->closed && fn &&
            (g->failed || g->nredo ? g->outstanding == 0 : g->unsent) &&
            replay(s, g, fn, arg) > 0)
            break; /* the queue is full: later segments wait their turn */
        pp = &g->next;
    }
}

int st_spool_full(struct st_spool *s)
{
    int64_t now = st_time_mono_ms();
    /* the free space is asked at most ten times a second: --input asks
     * for every line */
    if (s->min_free > 0 && now - s->statfs_ms >= 100) {
        struct statvfs vfs;
        s->statfs_ms = now;
        if (statvfs(s->dir, &vfs) == 0) {
            int low = (int64_t)vfs.f_bavail * (int64_t)vfs.f_frsize < s->min_free;
            if (low && !s->low_space)
                st_warn("spool \"%s\": less than spool.min_free_bytes free on its disk: "
                        "pushing back", s->dir);
            else if (!low && s->low_space)
                st_info("spool \"%s\": room on its disk again", s->dir);
            s->low_space = low;
        }
    }
    /* a full disk is asked again after a second: another program may have
     * made room */
    return s->total >= s->max_bytes || s->low_space ||
           (s->nospace_ms && now - s->nospace_ms < 1000);
}

int64_t st_spool_bytes(const struct st_spool *s)
{
    return s->total;
}

int64_t st_spool_segments(const struct st_spool *s)
{
    int64_t n = 0;
    for (const struct segment *g = s->segs; g; g = g->next)
        n++;
    return n;
}

/* Bytes of segments in dir (0 when it has none or cannot be read). */
static int64_t segment_bytes(const char *dir)
{
    DIR *d = opendir(dir);
    int64_t bytes = 0;
    struct dirent *de;
    if (!d)
        return 0;
    while ((de = readdir(d))) {
        size_t len = strlen(de->d_name);
        char path[4096];
        struct stat st;
        if (len < 5 || strcmp(de->d_name + len - 4, ".seg"))
            continue;
        snprintf(path, sizeof(path), "%.3800s/%.255s", dir, de->d_name);
        /* an empty segment still says the folder was left with a spool */
        if (stat(path, &st) == 0)
            bytes += st.st_size ? st.st_size : 1;
    }
    closedir(d);
    return bytes;
}

static void mkdir_parents(const char *path)
{
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            mkdir(tmp, 0700);
            *p = '/';
        }
}

int64_t st_spool_registry(const char *registry, const char *input, const char *dir)
{
    int64_t stranded = 0;
    struct st_buf keep;
    char line[8192], tmp[4200];
    char def[4096];
    int changed = dir != NULL;

    if (!registry) {
        const char *state = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
        if (state && *state)
            snprintf(def, sizeof(def), "%s/sandtrail/collector-spools", state);
        else if (home && *home)
            snprintf(def, sizeof(def), "%s/.local/state/sandtrail/collector-spools", home);
        else
            return 0;
        registry = def;
    }
    if (!*registry)
        return 0;
    st_buf_init(&keep);
    FILE *f = fopen(registry, "r");
    while (f && fgets(line, sizeof(line), f)) {
        char *tab = strchr(line, '\t'), *nl = strchr(line, '\n');
        if (!tab || !nl)
            continue;
        *tab = *nl = '\0';
        const char *old = line, *who = tab + 1;
        if (strcmp(who, input) != 0 && access(old, F_OK) != 0) {
            changed = 1; /* its folder is gone: nothing left to strand */
            continue;
        }
        if (strcmp(who, input) != 0) {
            st_buf_adds(&keep, old), st_buf_addc(&keep, '\t'), st_buf_adds(&keep, who),
                st_buf_addc(&keep, '\n');
            continue;
        }
        if (dir && strcmp(old, dir) == 0)
            continue; /* recorded again below */
        int64_t bytes = segment_bytes(old);
        if (!bytes) {
            changed = 1;
            continue; /* nothing left there: forgotten */
        }
        stranded += bytes;
        st_error("spool \"%s\" of an earlier run of this input (%s) still holds %" PRId64
                 " bytes not acknowledged by Kafka, and %s: set spool.dir=%s to deliver "
                 "them, or remove the folder to discard them",
                 old, input, bytes,
                 dir ? "spool.dir now names another folder" : "spool.dir is now unset",
                 old);
        /* kept in the registry: warned at every start until dealt with */
        st_buf_adds(&keep, old), st_buf_addc(&keep, '\t'), st_buf_adds(&keep, input),
            st_buf_addc(&keep, '\n');
    }
    if (f)
        fclose(f);
    if (dir) {
        st_buf_adds(&keep, dir), st_buf_addc(&keep, '\t'), st_buf_adds(&keep, input),
            st_buf_addc(&keep, '\n');
    }
    if (!changed) {
        st_buf_fini(&keep);
        return stranded;
    }
    /* rewritten whole and renamed into place: never half a registry */
    mkdir_parents(registry);
    snprintf(tmp, sizeof(tmp), "%s.%d.tmp", registry, (int)getpid());
    FILE *o = fopen(tmp, "w");
    if (!o || fwrite(keep.data ? keep.data : "", 1, keep.len, o) != keep.len ||
        fclose(o) != 0 || rename(tmp, registry) != 0) {
        st_warn("could not record the spool in \"%s\": %s", registry, strerror(errno));
        unlink(tmp);
    }
    st_buf_fini(&keep);
    return stranded;
}
