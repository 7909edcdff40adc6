/* checkpoint.c: a queue of formatted Redis commands (see checkpoint.h). */
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "buf.h"
#include "checkpoint.h"
#include "log.h"

/* The commands lie in segments, each a buffer of commands end to end: a
 * checkpoint's own commands go to its last segment; st_checkpoint_take
 * moves the buffers of another checkpoint's segments in whole (no copy of
 * their bytes) and gives it spare, emptied buffers back in exchange, so
 * that buffers go round between the workers' parts and the batches'
 * checkpoints at the size they grew to, instead of each batch's being
 * copied from its parts (docs/architecture.md, "Where the analyzer's
 * memory goes"). segs[nsegs ..] are spare buffers, empty, kept for reuse. */
struct seg {
    struct st_buf bytes;
    size_t first; /* its first command's index */
};

struct st_checkpoint {
    struct seg *segs;
    size_t nsegs, capsegs;
    size_t *offs, *lens; /* where each command starts in its segment's bytes, and its length */
    size_t n, cap;
};

struct st_checkpoint *st_checkpoint_new(void)
{
    return st_calloc(1, sizeof(struct st_checkpoint));
}

void st_checkpoint_clear(struct st_checkpoint *c)
{
    for (size_t i = 0; i < c->nsegs; i++)
        st_buf_reset(&c->segs[i].bytes);
    c->nsegs = 0;
    c->n = 0;
}

void st_checkpoint_destroy(struct st_checkpoint *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->capsegs; i++)
        st_buf_fini(&c->segs[i].bytes);
    free(c->segs);
    free(c->offs);
    free(c->lens);
    free(c);
}

/* The next segment (a spare buffer when there is one), starting at command
 * c->n. */
static struct seg *seg_open(struct st_checkpoint *c)
{
    if (c->nsegs == c->capsegs) {
        size_t cap = c->capsegs ? 2 * c->capsegs : 4;
        c->segs = st_realloc(c->segs, cap * sizeof(*c->segs));
        for (size_t i = c->capsegs; i < cap; i++)
            st_buf_init(&c->segs[i].bytes);
        c->capsegs = cap;
    }
    struct seg *g = &c->segs[c->nsegs++];
    g->first = c->n;
    return g;
}

static void cmds_reserve(struct st_checkpoint *c, size_t more)
{
    if (c->n + more <= c->cap)
        return;
    c->cap = c->n + more > 2 * c->cap ? c->n + more : 2 * c->cap;
    if (c->cap < 64)
        c->cap = 64;
    c->offs = st_realloc(c->offs, c->cap * sizeof(*c->offs));
    c->lens = st_realloc(c->lens, c->cap * sizeof(*c->lens));
}

void st_checkpoint_cmd(struct st_checkpoint *c, int argc, const char **argv)
{
    st_checkpoint_cmd_lens(c, argc, argv, NULL);
}

void st_checkpoint_cmd_lens(struct st_checkpoint *c, int argc, const char **argv,
                            const size_t *argvlen)
{
    cmds_reserve(c, 1);
    struct st_buf *b = &(c->nsegs ? &c->segs[c->nsegs - 1] : seg_open(c))->bytes;
    c->offs[c->n] = b->len;
    c->lens[c->n] = st_rpipe_format_buf_lens(b, argc, argv, argvlen);
    c->n++;
}

/* A segment of at least this many bytes is moved by st_checkpoint_take; a
 * smaller one (the run index's notes, the registry's few writes, a quiet
 * batch's) is copied to the end of dst's last segment: moving it would put
 * one more buffer into circulation, where every buffer grows to the
 * largest part it ever carries. */
#define TAKE_MOVE_MIN (64 * 1024)

/* A new segment holding from's buffer, whole (no copy); from gets the
 * segment's spare (emptied) buffer in exchange. Its first command is
 * c->n: a caller moving several commands sets first. */
static struct seg *seg_move_in(struct st_checkpoint *c, struct st_buf *from)
{
    struct seg *g = seg_open(c);
    struct st_buf spare = g->bytes;
    g->bytes = *from;
    st_buf_reset(&spare);
    *from = spare;
    return g;
}

void st_checkpoint_cmd_take(struct st_checkpoint *c, struct st_buf *b, size_t start)
{
    size_t len = b->len - start;
    cmds_reserve(c, 1);
    if (len < TAKE_MOVE_MIN) {
        struct st_buf *to = &(c->nsegs ? &c->segs[c->nsegs - 1] : seg_open(c))->bytes;
        c->offs[c->n] = to->len;
        c->lens[c->n++] = len;
        st_buf_add(to, b->data + start, len);
        st_buf_reset(b);
        return;
    }
    seg_move_in(c, b);
    c->offs[c->n] = start;
    c->lens[c->n++] = len;
}

void st_checkpoint_take(struct st_checkpoint *dst, struct st_checkpoint *src)
{
    if (src->n == 0)
        return; /* and its arrays may not exist yet */
    cmds_reserve(dst, src->n);
    memcpy(dst->offs + dst->n, src->offs, src->n * sizeof(*src->offs));
    memcpy(dst->lens + dst->n, src->lens, src->n * sizeof(*src->lens));
    for (size_t k = 0; k < src->nsegs; k++) {
        struct st_buf *from = &src->segs[k].bytes;
        size_t first = src->segs[k].first;
        size_t end = k + 1 < src->nsegs ? src->segs[k + 1].first : src->n;
        if (from->len < TAKE_MOVE_MIN) {
            /* copied: its commands' offsets move by where it lands */
            struct st_buf *to = &(dst->nsegs ? &dst->segs[dst->nsegs - 1]
                                             : seg_open(dst))->bytes;
            size_t base = to->len;
            st_buf_add(to, from->data, from->len);
            for (size_t i = first; i < end; i++)
                dst->offs[dst->n + i] += base;
            st_buf_reset(from);
            continue;
        }
        seg_move_in(dst, from)->first = dst->n + first;
    }
    dst->n += src->n;
    src->nsegs = 0;
    src->n = 0;
}

size_t st_checkpoint_len(const struct st_checkpoint *c)
{
    return c->n;
}

/* A command's bytes as st_rpipe_format writes them. */
#define RESP_MULTI "*1\r\n$5\r\nMULTI\r\n"
#define RESP_EXEC "*1\r\n$4\r\nEXEC\r\n"

static int is_cmd(const char *cmd, size_t len, const char *resp, size_t rlen)
{
    return len == rlen && memcmp(cmd, resp, len) == 0;
}

size_t st_checkpoint_queue_part(const struct st_checkpoint *c, struct st_rpipe *p,
                                size_t from, size_t max, size_t max_bytes, int unwrap)
{
    size_t s = 0, i = from, bytes = 0;
    int inside = 0; /* between a MULTI and its EXEC */
    for (; i < c->n && ((i - from < max && bytes < max_bytes) || inside); i++) {
        bytes += c->lens[i];
        while (s + 1 < c->nsegs && c->segs[s + 1].first <= i)
            s++;
        const char *cmd = c->segs[s].bytes.data + c->offs[i];
        if (is_cmd(cmd, c->lens[i], RESP_MULTI, sizeof(RESP_MULTI) - 1)) {
            inside = 1;
            if (unwrap)
                continue;
        } else if (is_cmd(cmd, c->lens[i], RESP_EXEC, sizeof(RESP_EXEC) - 1)) {
            inside = 0;
            if (unwrap)
                continue;
        }
        st_rpipe_formatted(p, cmd, c->lens[i]);
    }
    return i;
}

void st_checkpoint_queue(const struct st_checkpoint *c, struct st_rpipe *p, int unwrap)
{
    st_checkpoint_queue_part(c, p, 0, SIZE_MAX, SIZE_MAX, unwrap);
}

int st_checkpoint_exec(const struct st_checkpoint *c, struct st_rpipe *p, char *errstr,
                       size_t errsz)
{
    st_checkpoint_queue(c, p, 0);
    return st_rpipe_exec(p, errstr, errsz);
}

int st_checkpoint_flush(struct st_checkpoint *c, const struct st_checkpoint_flush_ops *ops,
                        void *arg, uint64_t *ck_seq, uint64_t *committed_seq, int force)
{
    st_checkpoint_clear(c);
    ops->end_batch(arg, c, *ck_seq + 1, force);
    if (st_checkpoint_len(c) == 0 && *committed_seq == *ck_seq) {
        ops->after_commit(arg, *committed_seq);
        return 0; /* nothing changed, every offset committed */
    }
    (*ck_seq)++;
    if (ops->exec(arg, c, 1))
        return -1;
    st_checkpoint_clear(c);
    int rc = ops->commit(arg);
    if (rc < 0)
        return -1;
    if (rc == 0)
        *committed_seq = *ck_seq;
    ops->after_commit(arg, *committed_seq);
    /* forced: the trims that commit just allowed, deletions of committed
     * state only */
    if (force && *committed_seq == *ck_seq) {
        ops->end_batch(arg, c, *ck_seq + 1, 1);
        if (st_checkpoint_len(c) > 0) {
            (*ck_seq)++;
            if (ops->exec(arg, c, 0) == 0)
                *committed_seq = *ck_seq;
            st_checkpoint_clear(c);
        }
    }
    return 0;
}
