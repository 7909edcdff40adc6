/* registry.c: cross-run detector state in memory (see registry.h).
 *
 * One table of entries of three kinds (credential, fingerprint,
 * destination), chained by hash, and a list ordered by last use from which
 * idle entries are evicted. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "buf.h"
#include "checkpoint.h"
#include "log.h"
#include "registry.h"

enum kind { K_CRED, K_FP, K_DEST };
enum { E_LOADING, E_READY };

struct entry {
    struct entry *hnext, *prev, *next;
    enum kind kind;
    char *name;
    uint64_t hash;
    int state;
    uint64_t queued_gen;
    int64_t touched_s;
    int64_t exp_s; /* EXPIRE last sent (st_detect_expire_due) */
    uint64_t ck_seq;
    int dirty, in_loaded;
    /* K_CRED */
    struct st_registry_cred cred;
    char *scopes, *audience, *task, *run;
    int issue_dirty, revoke_dirty;
    /* K_FP */
    char *value;
    /* K_DEST */
    struct st_registry_field *f;
    size_t nf, capf;
    int refresh; /* HGETALL queued in this prefetch */
};

struct st_registry {
    const struct st_analyzer_conf *conf;
    struct entry **table;
    size_t tcap, n;
    struct entry *head, *tail;
    struct entry **dirty; /* changed since the last checkpoint, or refreshed */
    size_t ndirty, capdirty;
    struct entry **refresh;
    size_t nrefresh, caprefresh;
    struct entry **loaded; /* read in this batch: dropped when absent */
    size_t nloaded, caploaded;
    struct st_detect_stats *stats; /* may be NULL */
    uint64_t gen;
};

static const char *kind_name[] = {"cred", "credfp", "dest"};

struct st_registry *st_registry_new(const struct st_analyzer_conf *conf)
{
    struct st_registry *r = st_calloc(1, sizeof(*r));
    r->conf = conf;
    r->tcap = 1024;
    r->table = st_calloc_table(r->tcap, sizeof(*r->table));
    return r;
}

static void entry_clear(struct entry *e)
{
    free(e->scopes);
    free(e->audience);
    free(e->task);
    free(e->run);
    free(e->value);
    e->scopes = e->audience = e->task = e->run = e->value = NULL;
    memset(&e->cred, 0, sizeof(e->cred));
    e->cred.issued = INT64_MIN;
    for (size_t i = 0; i < e->nf; i++) {
        free(e->f[i].field);
        free(e->f[i].member);
    }
    e->nf = 0;
}

static void entry_free(struct entry *e)
{
    entry_clear(e);
    free(e->f);
    free(e->name);
    free(e);
}

void st_registry_forget(struct st_registry *r, struct st_detect_ctx *ctx)
{
    for (struct entry *e = r->head, *next; e; e = next) {
        next = e->next;
        entry_free(e);
    }
    if (ctx && ctx->stats)
        ctx->stats->entries -= (int64_t)r->n;
    memset(r->table, 0, r->tcap * sizeof(*r->table));
    r->n = 0;
    r->head = r->tail = NULL;
    r->ndirty = r->nrefresh = r->nloaded = 0;
}

void st_registry_destroy(struct st_registry *r)
{
    if (!r)
        return;
    st_registry_forget(r, NULL);
    free(r->table);
    free(r->dirty);
    free(r->refresh);
    free(r->loaded);
    free(r);
}

void st_registry_begin(struct st_registry *r, struct st_detect_ctx *ctx)
{
    r->stats = ctx->stats;
    r->gen++;
    r->nrefresh = 0;
}

static uint64_t hash(enum kind k, const char *s)
{
    uint64_t h = 0xcbf29ce484222325ULL ^ (uint64_t)k;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        h = (h ^ *p) * 0x100000001b3ULL;
    return h;
}

static struct entry *find(struct st_registry *r, enum kind k, const char *name)
{
    uint64_t h = hash(k, name);
    for (struct entry *e = r->table[st_hash_slot(h, r->tcap)]; e; e = e->hnext)
        if (e->hash == h && e->kind == k && !strcmp(e->name, name))
            return e;
    return NULL;
}

static void lru_unlink(struct st_registry *r, struct entry *e)
{
    if (e->prev)
        e->prev->next = e->next;
    else
        r->head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        r->tail = e->prev;
    e->prev = e->next = NULL;
}

static void lru_append(struct st_registry *r, struct entry *e)
{
    e->prev = r->tail;
    e->next = NULL;
    if (r->tail)
        r->tail->next = e;
    else
        r->head = e;
    r->tail = e;
}

static void touch(struct st_registry *r, struct entry *e)
{
    int64_t now = (int64_t)time(NULL);
    if (now == e->touched_s && e == r->tail)
        return;
    e->touched_s = now;
    lru_unlink(r, e);
    lru_append(r, e);
}

static struct entry *create(struct st_registry *r, enum kind k, const char *name)
{
    struct entry *e = st_calloc(1, sizeof(*e));
    e->kind = k;
    e->name = st_strdup(name);
    e->hash = hash(k, name);
    e->cred.issued = INT64_MIN;
    e->touched_s = (int64_t)time(NULL);
    if (r->n >= r->tcap) {
        size_t cap = 2 * r->tcap;
        struct entry **t = st_calloc_table(cap, sizeof(*t));
        for (size_t i = 0; i < r->tcap; i++)
            for (struct entry *x = r->table[i], *next; x; x = next) {
                next = x->hnext;
                x->hnext = t[st_hash_slot(x->hash, cap)];
                t[st_hash_slot(x->hash, cap)] = x;
            }
        free(r->table);
        r->table = t;
        r->tcap = cap;
    }
    e->hnext = r->table[st_hash_slot(e->hash, r->tcap)];
    r->table[st_hash_slot(e->hash, r->tcap)] = e;
    r->n++;
    lru_append(r, e);
    if (r->stats)
        r->stats->entries++;
    return e;
}

static void remove_entry(struct st_registry *r, struct entry *e)
{
    struct entry **p = &r->table[st_hash_slot(e->hash, r->tcap)];
    while (*p != e)
        p = &(*p)->hnext;
    *p = e->hnext;
    r->n--;
    lru_unlink(r, e);
    entry_free(e);
    if (r->stats)
        r->stats->entries--;
}

static void mark_dirty(struct st_registry *r, struct entry *e)
{
    if (e->dirty)
        return;
    e->dirty = 1;
    if (r->ndirty == r->capdirty) {
        r->capdirty = r->capdirty ? 2 * r->capdirty : 64;
        r->dirty = st_realloc(r->dirty, r->capdirty * sizeof(*r->dirty));
    }
    r->dirty[r->ndirty++] = e;
}

static char *key_of(const struct st_registry *r, const struct entry *e)
{
    switch (e->kind) {
    case K_CRED: return st_detect_key(r->conf, "scope_drift", "cred", e->name, "");
    case K_FP: return st_detect_key(r->conf, "credfp", e->name, "", "");
    default: return st_detect_key(r->conf, "scope_drift", "dest", e->name, "");
    }
}

static char *dupnull(const char *s)
{
    return s ? st_strdup(s) : NULL;
}

static void set_str(char **dst, const char **view, const char *s)
{
    free(*dst);
    *dst = dupnull(s);
    *view = *dst;
}

/* The entry of (k, name), created loading and its read queued when it is
 * not in memory (or an earlier read of it failed). NULL when ready. */
static struct entry *want(struct st_registry *r, struct st_detect_ctx *ctx, enum kind k,
                          const char *name)
{
    struct entry *e = find(r, k, name);
    if (e && (e->state == E_READY || e->queued_gen == r->gen))
        return NULL;
    if (!e)
        e = create(r, k, name);
    else
        entry_clear(e);
    e->state = E_LOADING;
    e->queued_gen = r->gen;
    if (ctx->stats)
        ctx->stats->loads++;
    if (!e->in_loaded) {
        e->in_loaded = 1;
        if (r->nloaded == r->caploaded) {
            r->caploaded = r->caploaded ? 2 * r->caploaded : 64;
            r->loaded = st_realloc(r->loaded, r->caploaded * sizeof(*r->loaded));
        }
        r->loaded[r->nloaded++] = e;
    }
    return e;
}

static int on_cred(const redisReply *rep, void *arg)
{
    struct entry *e = arg;
    if (rep->type != REDIS_REPLY_ARRAY)
        return -1;
    for (size_t i = 0; i + 1 < rep->elements; i += 2) {
        const char *k = rep->element[i]->str, *v = rep->element[i + 1]->str;
        if (!k || !v)
            return -1;
        e->cred.nfields++;
        if (!strcmp(k, "scopes"))
            set_str(&e->scopes, &e->cred.scopes, v);
        else if (!strcmp(k, "audience"))
            set_str(&e->audience, &e->cred.audience, v);
        else if (!strcmp(k, "task"))
            set_str(&e->task, &e->cred.task, v);
        else if (!strcmp(k, "run"))
            set_str(&e->run, &e->cred.run, v);
        else if (!strcmp(k, "expires"))
            e->cred.expires = strtoll(v, NULL, 10);
        else if (!strcmp(k, "revoked"))
            e->cred.revoked = strtoll(v, NULL, 10);
        else if (!strcmp(k, "issued"))
            e->cred.issued = strtoll(v, NULL, 10);
    }
    e->state = E_READY;
    return 0;
}

static int on_fp(const redisReply *rep, void *arg)
{
    struct entry *e = arg;
    if (rep->type != REDIS_REPLY_STRING && rep->type != REDIS_REPLY_NIL)
        return -1;
    if (rep->type == REDIS_REPLY_STRING)
        e->value = st_strdup(rep->str);
    e->state = E_READY;
    return 0;
}

void st_registry_want_cred(struct st_registry *r, struct st_detect_ctx *ctx,
                           const char *cred)
{
    struct entry *e = want(r, ctx, K_CRED, cred);
    if (!e)
        return;
    char *key = key_of(r, e);
    const char *argv[] = {"HGETALL", key};
    st_rpipe_cmd(ctx->redis, on_cred, e, 2, argv);
    free(key);
}

void st_registry_want_fp(struct st_registry *r, struct st_detect_ctx *ctx, const char *fp)
{
    struct entry *e = want(r, ctx, K_FP, fp);
    if (!e)
        return;
    char *key = key_of(r, e);
    const char *argv[] = {"GET", key};
    st_rpipe_cmd(ctx->redis, on_fp, e, 2, argv);
    free(key);
}

static struct st_registry_field *field_find(struct entry *e, const char *field)
{
    for (size_t i = 0; i < e->nf; i++)
        if (!strcmp(e->f[i].field, field))
            return &e->f[i];
    return NULL;
}

static struct st_registry_field *field_add(struct entry *e, const char *field,
                                           const char *member, int visible)
{
    if (e->nf == e->capf) {
        e->capf = e->capf ? 2 * e->capf : 4;
        e->f = st_realloc(e->f, e->capf * sizeof(*e->f));
    }
    struct st_registry_field *f = &e->f[e->nf++];
    f->field = st_strdup(field);
    f->member = st_strdup(member);
    f->visible = visible;
    return f;
}

/* The destination's hash, after this batch's claims: Redis decides which
 * request was first. A claim of ours that won stays invisible until its
 * request is fed, as if the request had made it then. */
static int on_dest(const redisReply *rep, void *arg)
{
    struct entry *e = arg;
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements % 2)
        return -1;
    for (size_t i = 0; i + 1 < rep->elements; i += 2) {
        const char *k = rep->element[i]->str, *v = rep->element[i + 1]->str;
        if (!k || !v)
            return -1;
        struct st_registry_field *f = field_find(e, k);
        if (!f) {
            field_add(e, k, v, 1);
        } else if (strcmp(f->member, v) != 0) {
            free(f->member);
            f->member = st_strdup(v);
            f->visible = 1; /* another request was first */
        }
    }
    e->state = E_READY;
    return 0;
}

void st_registry_want_dest(struct st_registry *r, struct st_detect_ctx *ctx,
                           const char *host, const char *field, const char *member)
{
    struct entry *e = find(r, K_DEST, host);
    if (!e) {
        e = create(r, K_DEST, host);
        if (ctx->stats)
            ctx->stats->loads++;
    }
    struct st_registry_field *f = field_find(e, field);
    if (f && (e->state == E_READY || e->queued_gen == r->gen))
        return; /* known, or claimed by an earlier request of this batch */
    if (!f)
        f = field_add(e, field, member, 0);
    if (!f->visible) {
        /* claimed again after a read that failed: HSETNX changes nothing */
        char *key = key_of(r, e);
        const char *hsetnx[] = {"HSETNX", key, field, f->member};
        st_rpipe_cmd(ctx->redis, NULL, NULL, 4, hsetnx);
        free(key);
    }
    e->state = E_LOADING;
    if (e->queued_gen != r->gen) {
        e->queued_gen = r->gen;
        if (r->nrefresh == r->caprefresh) {
            r->caprefresh = r->caprefresh ? 2 * r->caprefresh : 64;
            r->refresh = st_realloc(r->refresh, r->caprefresh * sizeof(*r->refresh));
        }
        r->refresh[r->nrefresh++] = e;
    }
}

void st_registry_prefetch_end(struct st_registry *r, struct st_detect_ctx *ctx)
{
    for (size_t i = 0; i < r->nrefresh; i++) {
        struct entry *e = r->refresh[i];
        char *key = key_of(r, e);
        const char *argv[] = {"HGETALL", key};
        st_rpipe_cmd(ctx->redis, on_dest, e, 2, argv);
        free(key);
    }
    r->nrefresh = 0;
}

static struct entry *ready(struct st_registry *r, enum kind k, const char *name)
{
    struct entry *e = find(r, k, name);
    if (!e || e->state != E_READY)
        st_fatal("registry: %s \"%s\" used but not prefetched", kind_name[k], name);
    touch(r, e);
    return e;
}

const struct st_registry_cred *st_registry_cred(struct st_registry *r, const char *cred)
{
    return &ready(r, K_CRED, cred)->cred;
}

void st_registry_issue(struct st_registry *r, const char *cred, const char *scopes,
                       const char *audience, int64_t expires, const char *task,
                       const char *run, int64_t issued)
{
    struct entry *e = ready(r, K_CRED, cred);
    /* HSET of six fields: a hash that held none gains six */
    int had_revoked = e->cred.revoked != 0;
    set_str(&e->scopes, &e->cred.scopes, scopes);
    set_str(&e->audience, &e->cred.audience, audience);
    set_str(&e->task, &e->cred.task, task);
    set_str(&e->run, &e->cred.run, run);
    e->cred.expires = expires;
    e->cred.issued = issued;
    e->cred.nfields = 6 + had_revoked;
    e->issue_dirty = 1;
    mark_dirty(r, e);
}

void st_registry_revoke(struct st_registry *r, const char *cred, int64_t at)
{
    struct entry *e = ready(r, K_CRED, cred);
    if (e->cred.revoked)
        return; /* a redo of an earlier use must not find a later one */
    e->cred.revoked = at;
    e->cred.nfields++;
    e->revoke_dirty = 1;
    mark_dirty(r, e);
}

const char *st_registry_fp(struct st_registry *r, const char *fp)
{
    return ready(r, K_FP, fp)->value;
}

void st_registry_fp_set(struct st_registry *r, const char *fp, const char *value)
{
    struct entry *e = find(r, K_FP, fp);
    if (!e) {
        e = create(r, K_FP, fp);
        e->state = E_READY;
    }
    free(e->value);
    e->value = st_strdup(value);
    e->state = E_READY;
    touch(r, e);
    mark_dirty(r, e);
}

size_t st_registry_dest_feed(struct st_registry *r, const char *host, const char *field,
                             const char *member, const struct st_registry_field **f)
{
    struct entry *e = ready(r, K_DEST, host);
    struct st_registry_field *mine = field_find(e, field);
    if (mine && !mine->visible && !strcmp(mine->member, member))
        mine->visible = 1;
    mark_dirty(r, e); /* its TTL is renewed */
    *f = e->f;
    return e->nf;
}

void st_registry_end_batch(struct st_registry *r, struct st_detect_ctx *ctx)
{
    char ttl[24], num[24];
    if (!ctx->ckpt)
        return; /* no checkpoint with this batch: the entries stay dirty */
    /* every entry dirty, whatever ctx->pending_from (the rolling
     * write-back, detect.h): a few writes per batch, and writing a change
     * sooner than asked is always safe -- after its batch's PostgreSQL
     * commit, absolute values, a redo computing them again */
    snprintf(ttl, sizeof(ttl), "%" PRId64, ctx->conf->state_ttl_s);
    for (size_t i = 0; i < r->ndirty; i++) {
        struct entry *e = r->dirty[i];
        char *key = key_of(r, e);
        if (e->kind == K_CRED && e->issue_dirty) {
            char exp[24], iss[24];
            snprintf(exp, sizeof(exp), "%" PRId64, e->cred.expires);
            snprintf(iss, sizeof(iss), "%" PRId64, e->cred.issued);
            const char *hset[] = {"HSET", key, "scopes", e->scopes ? e->scopes : "",
                                  "audience", e->audience ? e->audience : "",
                                  "expires", exp, "task", e->task ? e->task : "",
                                  "run", e->run ? e->run : "", "issued", iss};
            const char *expire[] = {"EXPIRE", key, ttl};
            st_checkpoint_cmd(ctx->ckpt, 14, hset);
            st_checkpoint_cmd(ctx->ckpt, 3, expire);
        }
        if (e->kind == K_CRED && e->revoke_dirty) {
            snprintf(num, sizeof(num), "%" PRId64, e->cred.revoked);
            const char *hsetnx[] = {"HSETNX", key, "revoked", num};
            st_checkpoint_cmd(ctx->ckpt, 4, hsetnx);
        }
        if (e->kind == K_FP && e->value) {
            const char *set[] = {"SET", key, e->value, "EX", ttl};
            st_checkpoint_cmd(ctx->ckpt, 5, set);
        }
        if (e->kind == K_DEST && st_detect_expire_due(&e->exp_s, r->conf)) {
            /* its fields were claimed in the prefetch (HSETNX) */
            const char *expire[] = {"EXPIRE", key, ttl};
            st_checkpoint_cmd(ctx->ckpt, 3, expire);
        }
        free(key);
        e->issue_dirty = e->revoke_dirty = e->dirty = 0;
        e->ck_seq = ctx->seq;
    }
    r->ndirty = 0;
}

void st_registry_after_commit(struct st_registry *r, struct st_detect_ctx *ctx)
{
    /* what Redis did not hold is read again when next referenced:
     * another partition may issue it meanwhile */
    for (size_t i = 0; i < r->nloaded; i++) {
        struct entry *e = r->loaded[i];
        e->in_loaded = 0;
        int absent = (e->kind == K_CRED && e->cred.nfields == 0) ||
                     (e->kind == K_FP && !e->value) || e->state != E_READY;
        if (absent && !e->dirty)
            remove_entry(r, e);
    }
    r->nloaded = 0;
    int64_t now = (int64_t)time(NULL);
    for (struct entry *e = r->head, *next; e; e = next) {
        next = e->next;
        if (now - e->touched_s < ctx->conf->state_evict_s)
            break; /* the rest were used later */
        if (e->dirty || e->ck_seq > ctx->seq)
            continue; /* not yet in a checkpoint that ran: next time */
        if (ctx->stats)
            ctx->stats->evictions++;
        remove_entry(r, e);
    }
}
