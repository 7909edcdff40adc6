/* runkeys.c: the runs of a detection part, one record each (see
 * runkeys.h). A chained hash table on the run's hash, grown at a load of
 * one. */
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "event.h"
#include "log.h"
#include "runkeys.h"

struct st_runkeys {
    struct st_runkey **table;
    size_t cap;   /* a power of two */
    uint64_t n;   /* records */
    unsigned slots; /* slots given out, a bit each */
    const struct st_event *last_ev; /* the last event asked for, and its run */
    struct st_runkey *last;
};

struct st_runkeys *st_runkeys_new(void)
{
    struct st_runkeys *t = st_calloc(1, sizeof(*t));
    t->cap = 1024;
    t->table = st_calloc_table(t->cap, sizeof(*t->table));
    return t;
}

void st_runkeys_destroy(struct st_runkeys *t)
{
    if (!t)
        return;
    if (t->n)
        st_fatal("runkeys: destroyed with %llu runs held", (unsigned long long)t->n);
    free(t->table);
    free(t);
}

int st_runkeys_slot(struct st_runkeys *t)
{
    for (int i = 0; i < ST_RUNKEYS_SLOTS; i++)
        if (!(t->slots & (1u << i))) {
            t->slots |= 1u << i;
            return i;
        }
    return -1;
}

void st_runkeys_slot_release(struct st_runkeys *t, int slot)
{
    t->slots &= ~(1u << slot);
}

void st_runkeys_begin(struct st_runkeys *t)
{
    t->last_ev = NULL;
    t->last = NULL;
}

static void grow(struct st_runkeys *t)
{
    size_t cap = 2 * t->cap;
    struct st_runkey **nt = st_calloc_table(cap, sizeof(*nt));
    for (size_t i = 0; i < t->cap; i++) {
        for (struct st_runkey *k = t->table[i], *next; k; k = next) {
            next = k->hnext;
            k->hnext = nt[st_hash_slot(k->hash, cap)];
            nt[st_hash_slot(k->hash, cap)] = k;
        }
    }
    free(t->table);
    t->table = nt;
    t->cap = cap;
}

struct st_runkey *st_runkeys_get(struct st_runkeys *t, const struct st_event *ev, int make)
{
    uint64_t h = st_event_run_hash(ev);
    /* (the hash too: a caller that changed the event's ids in place, as
     * tests do, is not given the old run) */
    if (ev == t->last_ev && h == t->last->hash)
        return t->last;
    struct st_runkey *k = t->table[st_hash_slot(h, t->cap)];
    for (; k; k = k->hnext)
        if (k->hash == h && !strcmp(k->run_id, ev->run_id) && !strcmp(k->task_id, ev->task_id))
            break;
    if (!k && make) {
        size_t lt = strlen(ev->task_id), lr = strlen(ev->run_id);
        /* the ids in the record's own block: a lookup that finds it
         * compares them without a second cache miss */
        k = st_calloc(1, sizeof(*k) + lt + lr + 2);
        char *ids = (char *)(k + 1);
        memcpy(ids, ev->task_id, lt + 1);
        memcpy(ids + lt + 1, ev->run_id, lr + 1);
        k->task_id = ids;
        k->run_id = ids + lt + 1;
        k->hash = h;
        if (t->n >= t->cap)
            grow(t);
        k->hnext = t->table[st_hash_slot(h, t->cap)];
        t->table[st_hash_slot(h, t->cap)] = k;
        t->n++;
    }
    if (k) {
        t->last_ev = ev;
        t->last = k;
    }
    return k;
}

void st_runkeys_prefetch(const struct st_runkeys *t, uint64_t hash, int stage)
{
    struct st_runkey *const *slot = &t->table[st_hash_slot(hash, t->cap)];
    if (stage == 1)
        __builtin_prefetch(slot);
    else if (*slot)
        __builtin_prefetch(*slot);
}

void st_runkeys_set(struct st_runkeys *t, struct st_runkey *k, int slot, void *state)
{
    k->slot[slot] = state;
    if (state)
        return;
    for (int i = 0; i < ST_RUNKEYS_SLOTS; i++)
        if (k->slot[i])
            return;
    struct st_runkey **p = &t->table[st_hash_slot(k->hash, t->cap)];
    while (*p != k)
        p = &(*p)->hnext;
    *p = k->hnext;
    t->n--;
    if (t->last == k)
        st_runkeys_begin(t);
    free(k);
}

uint64_t st_runkeys_count(const struct st_runkeys *t)
{
    return t->n;
}
