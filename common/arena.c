/* arena.c: a bump allocator whose blocks are freed all at once (arena.h). */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"
#include "log.h"

/* A block: its header, then its bytes. The arena's own header is the
 * first thing in its first block, so that a small arena is one malloc. */
struct block {
    struct block *next; /* the block made before it */
    size_t used, cap;   /* bytes of data[] */
    _Alignas(8) unsigned char data[];
};

struct st_arena {
    struct block *cur;   /* where allocations go */
    struct block *first; /* holds the arena */
};

/* First blocks of a class's size (1, 2 or 4 KB: one event's document, for
 * events of up to about 350 or 700 bytes; an event read without its
 * whole tree, st_event_read, takes about 600 bytes for the same 320) are not freed but kept for the
 * next arena of that class, up to CACHE_MAX of each class per thread: a
 * batch of events is freed and the next one parsed on one thread, and the
 * allocator's own per-thread cache holds far fewer blocks of these sizes,
 * so that every batch went through its shared bins. Sized for a catch-up
 * batch (batch.behind_events, 10,000 events): with 2,048 a thread and
 * 2,048 in the pool, about 60 % of such a batch's arenas still came from
 * malloc and went back to free, at about 3,000 instructions the pair
 * (callgrind, session 13). Two classes, since session 19: an event of
 * about 320 bytes (a proxy denial) takes about 1.8 KB, and 4 KB blocks
 * for every event doubled the memory a catch-up's events in flight first
 * touch (the 2 KB class: a detect-role drain 0.2-0.3 s faster,
 * docs/architecture.md, "Session 19"); a third, 1 KB, since session 20,
 * for the events st_event_read makes. The key's destructor frees a
 * thread's blocks when it ends. */
#define NCLASS 3
static const size_t class_cap[NCLASS] = {1024 - sizeof(struct block),
                                         2048 - sizeof(struct block),
                                         4096 - sizeof(struct block)};
#define CACHE_MAX ST_ARENA_CACHE_BLOCKS

struct cache {
    struct block *v[NCLASS][CACHE_MAX]; /* stacks: the last destroyed on top */
    size_t n[NCLASS];
};

/* Between the threads' caches, a shared pool per class, moved in and out
 * MOVE blocks at a time under a lock (one lock per MOVE events): with the
 * parse split across the detection workers (workers.h), a worker makes
 * arenas that the main thread destroys, so its own cache stayed empty
 * (every block from malloc) while the main thread's overflowed (every
 * block to free); the pool carries the blocks back. At most POOL_MAX
 * blocks a class (16, 32 and 64 MB).
 * The cache and the pool are arrays of pointers, not lists through the
 * blocks: a block in them is long out of the processor's cache, and a
 * list's pop or move read each block's link (a cache miss each, one after
 * the other: the arenas were 7-9 % of a drain's samples, session 16),
 * where an array's is a copy of pointers; a block is touched again only
 * when it is used. */
#define MOVE ST_ARENA_MOVE_BLOCKS
#define POOL_MAX 16384
static pthread_mutex_t pool_mu = PTHREAD_MUTEX_INITIALIZER;
static struct block *pool_v[NCLASS][POOL_MAX];
static size_t pool_n[NCLASS];

/* The class of a first block of cap bytes; -1: none (malloc'd to size). */
static int class_of_cap(size_t cap)
{
    for (int k = 0; k < NCLASS; k++)
        if (cap == class_cap[k])
            return k;
    return -1;
}

/* Moves up to k blocks from the top of the stack from (counted by *nfrom)
 * to the top of to (counted by *nto, room for k more). */
static void move_blocks(struct block **from, size_t *nfrom, struct block **to, size_t *nto,
                        size_t k)
{
    if (k > *nfrom)
        k = *nfrom;
    memcpy(to + *nto, from + *nfrom - k, k * sizeof(*from));
    *nfrom -= k;
    *nto += k;
}

static pthread_once_t cache_once = PTHREAD_ONCE_INIT;
static pthread_key_t cache_key;

static void cache_free(void *arg)
{
    struct cache *c = arg;
    for (int k = 0; k < NCLASS; k++)
        while (c->n[k])
            free(c->v[k][--c->n[k]]);
    free(c);
}

static void cache_init(void)
{
    if (pthread_key_create(&cache_key, cache_free))
        st_fatal("could not set up the arenas' cache");
}

static struct cache *cache_get(void)
{
    pthread_once(&cache_once, cache_init);
    struct cache *c = pthread_getspecific(cache_key);
    if (!c) {
        c = st_calloc(1, sizeof(*c));
        if (pthread_setspecific(cache_key, c))
            st_fatal("could not set up the arenas' cache");
    }
    return c;
}

struct st_arena *st_arena_new(size_t hint)
{
    size_t head = (sizeof(struct st_arena) + 7) & ~(size_t)7;
    size_t cap = head + (hint < 256 ? 256 : (hint + 7) & ~(size_t)7);
    struct block *b = NULL;
    int k = 0;
    while (k < NCLASS && cap > class_cap[k])
        k++;
    if (k < NCLASS) {
        struct cache *c = cache_get();
        cap = class_cap[k];
        if (!c->n[k]) { /* uncontended, the lock costs far less than a malloc */
            pthread_mutex_lock(&pool_mu);
            move_blocks(pool_v[k], &pool_n[k], c->v[k], &c->n[k], MOVE);
            pthread_mutex_unlock(&pool_mu);
        }
        if (c->n[k]) {
            b = c->v[k][--c->n[k]];
            /* the next arena's block, on its way while this one is used */
            if (c->n[k])
                __builtin_prefetch(c->v[k][c->n[k] - 1], 1);
        }
    }
    if (!b)
        b = st_malloc(sizeof(*b) + cap);
    b->next = NULL;
    b->used = head;
    b->cap = cap;
    struct st_arena *a = (struct st_arena *)(void *)b->data;
    a->cur = a->first = b;
    return a;
}

void st_arena_destroy(struct st_arena *a)
{
    if (!a)
        return;
    struct block *first = a->first, *b = a->cur;
    while (b != first) {
        struct block *next = b->next;
        free(b);
        b = next;
    }
    int k = class_of_cap(first->cap);
    if (k >= 0) {
        struct cache *c = cache_get();
        if (c->n[k] >= CACHE_MAX) {
            pthread_mutex_lock(&pool_mu);
            if (pool_n[k] + MOVE <= POOL_MAX)
                move_blocks(c->v[k], &c->n[k], pool_v[k], &pool_n[k], MOVE);
            pthread_mutex_unlock(&pool_mu);
        }
        if (c->n[k] < CACHE_MAX) {
            c->v[k][c->n[k]++] = first; /* a, inside it, is dead from here */
            return;
        }
    }
    free(first); /* a with it */
}

/* A new current block of at least n bytes (twice the last, at least). */
static void grow(struct st_arena *a, size_t n)
{
    size_t cap = a->cur->cap * 2;
    if (cap < n)
        cap = (n + 7) & ~(size_t)7;
    struct block *b = st_malloc(sizeof(*b) + cap);
    b->next = a->cur;
    b->used = 0;
    b->cap = cap;
    a->cur = b;
}

void *st_arena_alloc_bytes(struct st_arena *a, size_t n)
{
    if (a->cur->cap - a->cur->used < n)
        grow(a, n);
    void *p = a->cur->data + a->cur->used;
    a->cur->used += n;
    return p;
}

void *st_arena_alloc(struct st_arena *a, size_t n)
{
    struct block *b = a->cur;
    size_t at = (b->used + 7) & ~(size_t)7;
    if (at > b->cap || b->cap - at < n) {
        grow(a, n);
        b = a->cur;
        at = 0;
    }
    b->used = at + n;
    return b->data + at;
}

size_t st_arena_pooled(void)
{
    pthread_mutex_lock(&pool_mu);
    size_t n = 0;
    for (int k = 0; k < NCLASS; k++)
        n += pool_n[k];
    pthread_mutex_unlock(&pool_mu);
    return n;
}

size_t st_arena_bytes(const struct st_arena *a)
{
    size_t n = 0;
    for (const struct block *b = a ? a->cur : NULL; b; b = b->next) {
        n += sizeof(*b) + b->cap;
        if (b == a->first)
            break;
    }
    return n;
}
