/* checkpoint.c: a queue of formatted Redis commands (see checkpoint.h). */
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "buf.h"
#include "checkpoint.h"
#include "log.h"

struct st_checkpoint {
    struct st_buf bytes; /* every command, RESP-formatted, end to end */
    size_t *offs, *lens; /* where each starts in bytes, and its length */
    size_t n, cap;
};

struct st_checkpoint *st_checkpoint_new(void)
{
    return st_calloc(1, sizeof(struct st_checkpoint));
}

void st_checkpoint_clear(struct st_checkpoint *c)
{
    st_buf_reset(&c->bytes);
    c->n = 0;
}

void st_checkpoint_destroy(struct st_checkpoint *c)
{
    if (!c)
        return;
    st_buf_fini(&c->bytes);
    free(c->offs);
    free(c->lens);
    free(c);
}

void st_checkpoint_cmd(struct st_checkpoint *c, int argc, const char **argv)
{
    st_checkpoint_cmd_lens(c, argc, argv, NULL);
}

void st_checkpoint_cmd_lens(struct st_checkpoint *c, int argc, const char **argv,
                            const size_t *argvlen)
{
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 64;
        c->offs = st_realloc(c->offs, c->cap * sizeof(*c->offs));
        c->lens = st_realloc(c->lens, c->cap * sizeof(*c->lens));
    }
    c->offs[c->n] = c->bytes.len;
    c->lens[c->n] = st_rpipe_format_buf_lens(&c->bytes, argc, argv, argvlen);
    c->n++;
}

void st_checkpoint_take(struct st_checkpoint *dst, struct st_checkpoint *src)
{
    if (src->n == 0)
        return; /* and its arrays may not exist yet */
    if (dst->n + src->n > dst->cap) {
        dst->cap = dst->n + src->n > 2 * dst->cap ? dst->n + src->n : 2 * dst->cap;
        dst->offs = st_realloc(dst->offs, dst->cap * sizeof(*dst->offs));
        dst->lens = st_realloc(dst->lens, dst->cap * sizeof(*dst->lens));
    }
    size_t base = dst->bytes.len;
    for (size_t i = 0; i < src->n; i++)
        dst->offs[dst->n + i] = base + src->offs[i];
    memcpy(dst->lens + dst->n, src->lens, src->n * sizeof(*src->lens));
    st_buf_add(&dst->bytes, src->bytes.data, src->bytes.len);
    dst->n += src->n;
    st_checkpoint_clear(src);
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

void st_checkpoint_queue(const struct st_checkpoint *c, struct st_rpipe *p, int unwrap)
{
    for (size_t i = 0; i < c->n; i++) {
        const char *cmd = c->bytes.data + c->offs[i];
        if (unwrap && (is_cmd(cmd, c->lens[i], RESP_MULTI, sizeof(RESP_MULTI) - 1) ||
                       is_cmd(cmd, c->lens[i], RESP_EXEC, sizeof(RESP_EXEC) - 1)))
            continue;
        st_rpipe_formatted(p, cmd, c->lens[i]);
    }
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
