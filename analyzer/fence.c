/* fence.c: owner epochs around the checkpoints (see fence.h). */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "detect.h"
#include "fence.h"
#include "log.h"
#include "timeutil.h"

struct held {
    int32_t partition;
    int64_t epoch; /* the value our INCR got */
    char *key;
};

struct st_fence {
    const struct st_analyzer_conf *conf;
    int64_t stall_ms;
    pthread_mutex_t lock; /* over held, n, cap */
    struct held *held;
    int n, cap;
    atomic_int lost;
};

struct st_fence *st_fence_new(const struct st_analyzer_conf *conf, int64_t stall_ms)
{
    struct st_fence *f = st_calloc(1, sizeof(*f));
    f->conf = conf;
    f->stall_ms = stall_ms;
    pthread_mutex_init(&f->lock, NULL);
    return f;
}

void st_fence_destroy(struct st_fence *f)
{
    if (!f)
        return;
    for (int i = 0; i < f->n; i++)
        free(f->held[i].key);
    free(f->held);
    pthread_mutex_destroy(&f->lock);
    free(f);
}

int st_fence_lost(struct st_fence *f)
{
    return atomic_load(&f->lost);
}

/* An integer reply into arg (int64_t). */
static int on_incr(const redisReply *r, void *arg)
{
    if (r->type != REDIS_REPLY_INTEGER)
        return -1;
    *(int64_t *)arg = r->integer;
    return 0;
}

int st_fence_claim(struct st_fence *f, struct st_rpipe *p, const int32_t *parts, int n,
                   char *errstr, size_t errsz)
{
    if (n <= 0)
        return 0;
    int64_t *got = st_calloc((size_t)n, sizeof(*got));
    char **keys = st_calloc((size_t)n, sizeof(*keys));
    for (int i = 0; i < n; i++) {
        keys[i] = st_detect_epoch_key(f->conf, parts[i]);
        const char *incr[] = {"INCR", keys[i]};
        st_rpipe_cmd(p, on_incr, &got[i], 2, incr);
    }
    int rc = st_rpipe_exec(p, errstr, errsz);
    if (rc == 0) {
        pthread_mutex_lock(&f->lock);
        for (int i = 0; i < n; i++) {
            struct held *h = NULL;
            for (int j = 0; j < f->n && !h; j++)
                if (f->held[j].partition == parts[i])
                    h = &f->held[j];
            if (!h) {
                if (f->n == f->cap) {
                    f->cap = f->cap ? 2 * f->cap : 16;
                    f->held = st_realloc(f->held, (size_t)f->cap * sizeof(*f->held));
                }
                h = &f->held[f->n++];
                h->partition = parts[i];
                h->key = keys[i];
                keys[i] = NULL;
            }
            h->epoch = got[i];
        }
        pthread_mutex_unlock(&f->lock);
        for (int i = 0; i < n; i++)
            st_debug("partition %" PRId32 ": owner epoch %" PRId64, parts[i], got[i]);
    }
    for (int i = 0; i < n; i++)
        free(keys[i]);
    free(keys);
    free(got);
    return rc;
}

void st_fence_release(struct st_fence *f, int32_t partition)
{
    pthread_mutex_lock(&f->lock);
    for (int i = 0; i < f->n; i++)
        if (f->held[i].partition == partition) {
            free(f->held[i].key);
            f->held[i] = f->held[--f->n];
            break;
        }
    pthread_mutex_unlock(&f->lock);
}

int st_fence_epoch(struct st_fence *f, int32_t partition, int64_t *epoch)
{
    int rc = -1;
    pthread_mutex_lock(&f->lock);
    for (int i = 0; i < f->n; i++)
        if (f->held[i].partition == partition) {
            *epoch = f->held[i].epoch;
            rc = 0;
            break;
        }
    pthread_mutex_unlock(&f->lock);
    return rc;
}

/* MGET's reply: each epoch Redis holds, -1 when absent or not a number. */
struct epochs {
    int64_t *v;
    int n;
};

static int on_mget(const redisReply *r, void *arg)
{
    struct epochs *e = arg;
    if (r->type != REDIS_REPLY_ARRAY || (int)r->elements != e->n)
        return -1;
    for (int i = 0; i < e->n; i++) {
        const redisReply *x = r->element[i];
        char *end;
        e->v[i] = -1;
        if (x->type != REDIS_REPLY_STRING)
            continue;
        errno = 0;
        long long v = strtoll(x->str, &end, 10);
        if (!errno && end != x->str && !*end)
            e->v[i] = v;
    }
    return 0;
}

/* EXEC's reply into arg (int): 1 when the transaction ran, 0 when a key it
 * WATCHed was written first (nil). */
static int on_exec(const redisReply *r, void *arg)
{
    if (r->type != REDIS_REPLY_NIL && r->type != REDIS_REPLY_ARRAY)
        return -1;
    *(int *)arg = r->type == REDIS_REPLY_ARRAY;
    return 0;
}

/* The fence is lost for good: logged once, errstr set. */
static int refuse(struct st_fence *f, char *errstr, size_t errsz, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int refuse(struct st_fence *f, char *errstr, size_t errsz, const char *fmt, ...)
{
    char why[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    snprintf(errstr, errsz,
             "the assignment is lost (%s): the detectors' checkpoint is not written, "
             "another analyzer owns the runs",
             why);
    if (!atomic_exchange(&f->lost, 1))
        st_error("%s; stopping", errstr);
    return ST_FENCE_LOST;
}

/* A fenced transaction holds at most this many of a checkpoint's commands
 * (and, past CHUNK_BYTES of them, no more; a MULTI/EXEC the checkpoint
 * holds is never split): Redis answers a transaction only once it ran all
 * of it, and one of a large checkpoint (an interval's changes at a high
 * rate, a forced flush of every held trim) could take longer than the
 * connection's read timeout (5 s, rpipe.c), or the round trip's deadline
 * (redis.round_trip_timeout_ms), then be retried whole for ever, each try
 * blocking Redis as long. The transactions of one
 * checkpoint land in order; one refused ends it, those before having
 * landed before the new owner's INCR: as a crash in the middle of an
 * unfenced checkpoint's pipeline, which the next owner's redo overwrites
 * (docs/architecture.md, "Owner epochs"). */
#define CHUNK_CMDS 16384
#define CHUNK_BYTES (4u << 20)

/* The commands of c from *at on, up to a transaction's worth, fenced by
 * the n epochs h: 0 (*at moved past them), -1 or ST_FENCE_LOST as
 * st_fence_exec. */
static int fenced_chunk(struct st_fence *f, struct st_rpipe *p, const struct st_checkpoint *c,
                        const struct held *h, int n, size_t *at, char *errstr, size_t errsz)
{
    /* one round trip: WATCH every epoch, and read them */
    const char **argv = st_calloc((size_t)n + 1, sizeof(*argv));
    int64_t *now = st_calloc((size_t)n, sizeof(*now));
    struct epochs e = {now, n};
    for (int i = 0; i < n; i++)
        argv[i + 1] = h[i].key;
    argv[0] = "WATCH";
    st_rpipe_cmd(p, NULL, NULL, n + 1, argv);
    argv[0] = "MGET";
    st_rpipe_cmd(p, on_mget, &e, n + 1, argv);
    free(argv);
    if (st_rpipe_exec(p, errstr, errsz)) {
        free(now);
        return -1; /* the connection is dropped: nothing stays watched */
    }
    for (int i = 0; i < n; i++)
        if (now[i] != h[i].epoch) {
            const char *unwatch[] = {"UNWATCH"};
            char ignored[128];
            st_rpipe_cmd(p, NULL, NULL, 1, unwatch);
            (void)st_rpipe_exec(p, ignored, sizeof(ignored));
            char theirs[32];
            if (now[i] < 0)
                snprintf(theirs, sizeof(theirs), "none");
            else
                snprintf(theirs, sizeof(theirs), "%" PRId64, now[i]);
            int rc = refuse(f, errstr, errsz,
                            "partition %" PRId32 " has owner epoch %s in Redis, ours is %" PRId64,
                            h[i].partition, theirs, h[i].epoch);
            free(now);
            return rc;
        }
    free(now);
    if (f->stall_ms > 0) { /* fault.stall_checkpoint_ms: the race, widened */
        st_warn("fault.stall_checkpoint_ms: the checkpoint waits %" PRId64
                " ms between its fence read and its EXEC",
                f->stall_ms);
        int64_t until = st_time_mono_ms() + f->stall_ms;
        for (int64_t left; (left = until - st_time_mono_ms()) > 0;)
            usleep((useconds_t)(left > 100 ? 100 : left) * 1000);
    }
    /* the second: the commands in one transaction, which Redis does not
     * run when an epoch moved since the WATCH */
    int ran = 0;
    const char *multi[] = {"MULTI"}, *exec[] = {"EXEC"};
    st_rpipe_cmd(p, NULL, NULL, 1, multi);
    size_t next = st_checkpoint_queue_part(c, p, *at, CHUNK_CMDS, CHUNK_BYTES, 1);
    st_rpipe_cmd(p, on_exec, &ran, 1, exec);
    if (st_rpipe_exec(p, errstr, errsz))
        return -1;
    if (!ran)
        return refuse(f, errstr, errsz,
                      "an owner epoch changed between the fence's read and its EXEC");
    *at = next;
    return 0;
}

int st_fence_exec(struct st_fence *f, struct st_rpipe *p, const struct st_checkpoint *c,
                  char *errstr, size_t errsz)
{
    if (atomic_load(&f->lost))
        return refuse(f, errstr, errsz, "a checkpoint was refused before");
    if (st_checkpoint_len(c) == 0)
        return 0; /* writes nothing: nothing to fence, no round trip */
    /* the keys and our epochs, copied: the main thread may change the table
     * (a cooperative assignment) while the committer runs */
    pthread_mutex_lock(&f->lock);
    int n = f->n;
    struct held *h = st_calloc((size_t)(n ? n : 1), sizeof(*h));
    for (int i = 0; i < n; i++) {
        h[i] = f->held[i];
        h[i].key = st_strdup(f->held[i].key);
    }
    pthread_mutex_unlock(&f->lock);

    int rc = -1;
    if (n == 0) {
        rc = refuse(f, errstr, errsz, "no partition is held");
        goto out;
    }
    /* in transactions of at most CHUNK_CMDS commands (CHUNK_BYTES), each
     * fenced on its own (see CHUNK_CMDS) */
    for (size_t at = 0, total = st_checkpoint_len(c); at < total;) {
        rc = fenced_chunk(f, p, c, h, n, &at, errstr, errsz);
        if (rc)
            goto out;
    }
    rc = 0;
out:
    for (int i = 0; i < n; i++)
        free(h[i].key);
    free(h);
    return rc;
}
