/* checkpoint.c: a queue of formatted Redis commands (see checkpoint.h). */
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "checkpoint.h"
#include "log.h"

struct st_checkpoint {
    char **cmds; /* RESP-formatted, owned */
    size_t *lens;
    size_t n, cap;
};

struct st_checkpoint *st_checkpoint_new(void)
{
    return st_calloc(1, sizeof(struct st_checkpoint));
}

void st_checkpoint_clear(struct st_checkpoint *c)
{
    for (size_t i = 0; i < c->n; i++)
        free(c->cmds[i]);
    c->n = 0;
}

void st_checkpoint_destroy(struct st_checkpoint *c)
{
    if (!c)
        return;
    st_checkpoint_clear(c);
    free(c->cmds);
    free(c->lens);
    free(c);
}

void st_checkpoint_cmd(struct st_checkpoint *c, int argc, const char **argv)
{
    char *cmd;
    size_t n = st_rpipe_format(argc, argv, &cmd);
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 64;
        c->cmds = st_realloc(c->cmds, c->cap * sizeof(*c->cmds));
        c->lens = st_realloc(c->lens, c->cap * sizeof(*c->lens));
    }
    c->cmds[c->n] = cmd;
    c->lens[c->n] = n;
    c->n++;
}

void st_checkpoint_take(struct st_checkpoint *dst, struct st_checkpoint *src)
{
    if (src->n == 0)
        return; /* and its arrays may not exist yet */
    if (dst->n + src->n > dst->cap) {
        dst->cap = dst->n + src->n > 2 * dst->cap ? dst->n + src->n : 2 * dst->cap;
        dst->cmds = st_realloc(dst->cmds, dst->cap * sizeof(*dst->cmds));
        dst->lens = st_realloc(dst->lens, dst->cap * sizeof(*dst->lens));
    }
    memcpy(dst->cmds + dst->n, src->cmds, src->n * sizeof(*src->cmds));
    memcpy(dst->lens + dst->n, src->lens, src->n * sizeof(*src->lens));
    dst->n += src->n;
    src->n = 0;
}

size_t st_checkpoint_len(const struct st_checkpoint *c)
{
    return c->n;
}

int st_checkpoint_exec(const struct st_checkpoint *c, struct st_rpipe *p, char *errstr,
                       size_t errsz)
{
    for (size_t i = 0; i < c->n; i++)
        st_rpipe_formatted(p, c->cmds[i], c->lens[i]);
    return st_rpipe_exec(p, errstr, errsz);
}
