/* runhash.c: a checkpoint's small run states, grouped by bucket (see
 * runhash.h). Each put is formatted at once, as the HSET or HDEL
 * arguments it becomes, at the end of its bucket's buffer: the flush only
 * puts each bucket's command head before them, and copies them into the
 * checkpoint in one piece. (Before, each put was copied aside and grouped
 * by run in a hash table, then every value formatted at the flush: 18% of
 * a detect-role drain's CPU, docs/architecture.md, "Session 18".) */
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "detect.h"
#include "log.h"
#include "runhash.h"
#include "rpipe.h"

struct bucket {
    struct st_buf set; /* the HSET's field and value arguments, formatted */
    struct st_buf del; /* the HDEL's field arguments, formatted */
    size_t nset, ndel;
};

struct st_runhash {
    const struct st_analyzer_conf *conf;
    struct bucket b[ST_DETECT_RUN_BUCKETS];
    size_t nput;
    struct st_buf key, prefix;
    char ttl[ST_I64_LEN];
};

struct st_runhash *st_runhash_new(const struct st_analyzer_conf *conf)
{
    struct st_runhash *h = st_calloc(1, sizeof(*h));
    h->conf = conf;
    for (size_t i = 0; i < ST_DETECT_RUN_BUCKETS; i++) {
        st_buf_init(&h->b[i].set);
        st_buf_init(&h->b[i].del);
    }
    st_buf_init(&h->key);
    st_buf_init(&h->prefix);
    st_fmt_i64(h->ttl, conf->state_ttl_s);
    return h;
}

void st_runhash_destroy(struct st_runhash *h)
{
    if (!h)
        return;
    for (size_t i = 0; i < ST_DETECT_RUN_BUCKETS; i++) {
        st_buf_fini(&h->b[i].set);
        st_buf_fini(&h->b[i].del);
    }
    st_buf_fini(&h->key);
    st_buf_fini(&h->prefix);
    free(h);
}

size_t st_runhash_pending(const struct st_runhash *h)
{
    return h->nput;
}

void st_runhash_put(struct st_runhash *h, uint64_t hash, const char *task, const char *run,
                    const char *field, const char *data, size_t len)
{
    struct bucket *b = &h->b[st_detect_run_bucket(hash)];
    st_buf_reset(&h->prefix);
    st_detect_run_field_prefix_add(&h->prefix, task, run);
    if (data) {
        st_rpipe_format_arg(&b->set, h->prefix.data, h->prefix.len, field, strlen(field));
        st_rpipe_format_arg(&b->set, data, len, NULL, 0);
        b->nset++;
    } else {
        st_rpipe_format_arg(&b->del, h->prefix.data, h->prefix.len, field, strlen(field));
        b->ndel++;
    }
    h->nput++;
}

/* One bucket's commands: the HSET of every field set, the HDEL of every
 * field emptied, then the key's EXPIRE when anything was set (a key the
 * HSET creates gets its TTL in the same checkpoint; an HDEL alone leaves
 * the TTL the last HSET gave). */
static void flush_bucket(struct st_runhash *h, struct st_checkpoint *ck, size_t i)
{
    struct bucket *b = &h->b[i];
    const char *key = st_detect_run_bucket_key_buf(&h->key, h->conf, (uint64_t)i);
    size_t klen = h->key.len;
    if (b->nset) {
        st_checkpoint_begin(ck, 2 + 2 * b->nset);
        st_checkpoint_arg(ck, "HSET", 4, NULL, 0);
        st_checkpoint_arg(ck, key, klen, NULL, 0);
        st_checkpoint_args_formatted(ck, b->set.data, b->set.len, 2 * b->nset);
        st_checkpoint_end(ck);
    }
    if (b->ndel) {
        st_checkpoint_begin(ck, 2 + b->ndel);
        st_checkpoint_arg(ck, "HDEL", 4, NULL, 0);
        st_checkpoint_arg(ck, key, klen, NULL, 0);
        st_checkpoint_args_formatted(ck, b->del.data, b->del.len, b->ndel);
        st_checkpoint_end(ck);
    }
    if (b->nset) {
        const char *ex[] = {"EXPIRE", key, h->ttl};
        size_t exl[] = {6, klen, strlen(h->ttl)};
        st_checkpoint_cmd_lens(ck, 3, ex, exl);
    }
    st_buf_reset(&b->set);
    st_buf_reset(&b->del);
    b->nset = b->ndel = 0;
}

void st_runhash_flush(struct st_runhash *h, struct st_checkpoint *ck)
{
    if (!h->nput)
        return;
    for (size_t i = 0; i < ST_DETECT_RUN_BUCKETS; i++)
        if (h->b[i].nset || h->b[i].ndel)
            flush_bucket(h, ck, i);
    h->nput = 0;
}
