/* runhash.c: a checkpoint's small run states, grouped by bucket (see
 * runhash.h). Each put is formatted at once, as the HSET or HDEL
 * arguments it becomes, at the end of its bucket's buffer, after room
 * left at the buffer's start for the command's head: the flush writes the
 * head there and hands the buffer to the checkpoint whole, no copy
 * (st_checkpoint_cmd_take). (Before session 18, each put was copied aside
 * and grouped by run in a hash table, then every value formatted at the
 * flush: 18% of a detect-role drain's CPU; in session 18 the flush still
 * copied each bucket's arguments into the checkpoint, growing its buffer
 * to a catch-up's size: a tenth of the page faults of a drain,
 * docs/architecture.md, "Session 19".) */
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
    struct st_buf key, prefix, head;
    size_t room; /* bytes left at the start of set and del for the head */
    char ttl[ST_I64_LEN];
};

/* The longest head of a bucket's command: "*<argc>\r\n$4\r\nHSET\r\n
 * $<key length>\r\n<key>\r\n", with two 20-digit counts. */
static size_t head_room(struct st_runhash *h)
{
    size_t klen = 0;
    for (uint64_t i = 0; i < ST_DETECT_RUN_BUCKETS; i++) {
        st_detect_run_bucket_key_buf(&h->key, h->conf, i);
        if (h->key.len > klen)
            klen = h->key.len;
    }
    return (1 + 20 + 2) + (1 + 1 + 2 + 4 + 2) + (1 + 20 + 2 + klen + 2);
}

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
    st_buf_init(&h->head);
    h->room = head_room(h);
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
    st_buf_fini(&h->head);
    free(h);
}

size_t st_runhash_pending(const struct st_runhash *h)
{
    return h->nput;
}

/* An empty buffer gets its room for the head first. */
static struct st_buf *args_of(struct st_runhash *h, struct st_buf *b)
{
    if (!b->len) {
        st_buf_reserve(b, h->room);
        b->len = h->room;
        b->data[b->len] = '\0';
    }
    return b;
}

void st_runhash_put(struct st_runhash *h, uint64_t hash, const char *task, const char *run,
                    const char *field, const char *data, size_t len)
{
    struct bucket *b = &h->b[st_detect_run_bucket(hash)];
    st_buf_reset(&h->prefix);
    st_detect_run_field_prefix_add(&h->prefix, task, run);
    if (data) {
        args_of(h, &b->set);
        st_rpipe_format_arg(&b->set, h->prefix.data, h->prefix.len, field, strlen(field));
        st_rpipe_format_arg(&b->set, data, len, NULL, 0);
        b->nset++;
    } else {
        args_of(h, &b->del);
        st_rpipe_format_arg(&b->del, h->prefix.data, h->prefix.len, field, strlen(field));
        b->ndel++;
    }
    h->nput++;
}

/* Writes the head of a command of nargs arguments after cmd, key into
 * the room at args' start, and hands the command to ck. */
static void take_cmd(struct st_runhash *h, struct st_checkpoint *ck, struct st_buf *args,
                     const char *cmd, const char *key, size_t klen, size_t nargs)
{
    st_buf_reset(&h->head);
    st_rpipe_format_head(&h->head, 2 + nargs);
    st_rpipe_format_arg(&h->head, cmd, 4, NULL, 0);
    st_rpipe_format_arg(&h->head, key, klen, NULL, 0);
    if (h->head.len > h->room)
        st_fatal("runhash: a command head of %zu bytes in %zu of room", h->head.len, h->room);
    size_t start = h->room - h->head.len;
    memcpy(args->data + start, h->head.data, h->head.len);
    st_checkpoint_cmd_take(ck, args, start);
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
    if (b->nset)
        take_cmd(h, ck, &b->set, "HSET", key, klen, 2 * b->nset);
    if (b->ndel)
        take_cmd(h, ck, &b->del, "HDEL", key, klen, b->ndel);
    if (b->nset) {
        const char *ex[] = {"EXPIRE", key, h->ttl};
        size_t exl[] = {6, klen, strlen(h->ttl)};
        st_checkpoint_cmd_lens(ck, 3, ex, exl);
    }
    b->nset = b->ndel = 0; /* (the buffers left empty by the take) */
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
