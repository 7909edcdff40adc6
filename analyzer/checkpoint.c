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
        redisFreeCommand(c->cmds[i]);
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
    size_t small[32] = {0};
    int heap = argc > 32;
    size_t *lens = heap ? st_malloc((size_t)argc * sizeof(*lens)) : small;
    char *cmd;

    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    int n = redisFormatCommandArgv(&cmd, argc, argv, lens);
    if (heap)
        free(lens);
    if (n < 0)
        st_fatal("out of memory formatting a Redis command");
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 64;
        c->cmds = st_realloc(c->cmds, c->cap * sizeof(*c->cmds));
        c->lens = st_realloc(c->lens, c->cap * sizeof(*c->lens));
    }
    c->cmds[c->n] = cmd;
    c->lens[c->n] = (size_t)n;
    c->n++;
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
