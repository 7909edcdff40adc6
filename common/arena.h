/* arena.h: a bump allocator whose blocks are freed all at once.
 *
 * For memory that lives and dies together (one event's parsed document:
 * every node and string of it), so that building it is one malloc in the
 * common case and freeing it is one free, instead of one malloc and one
 * free per node. Not thread-safe: an arena belongs to one owner at a time
 * (the event that holds it; the event may move between threads with it).
 * A small arena's block (2 KB or 4 KB, the smallest that holds the hint),
 * destroyed, is kept in a cache of the destroying thread's (at most
 * ST_ARENA_CACHE_BLOCKS blocks of each size) for its next st_arena_new of
 * that size, and freed when the thread ends. An arena may be made on
 * one thread and destroyed on another (the analyzer's parse workers:
 * st_workers_parse): its first block then joins the destroying thread's
 * cache; a cache that is full gives ST_ARENA_MOVE_BLOCKS blocks to a pool
 * shared by the threads (one per size, at most 32 and 64 MB, under a lock), and an empty one
 * takes as many from it before it asks malloc, so that blocks made on one
 * thread and freed on another come back. Each cache is touched only by its
 * own thread; the pool, once per ST_ARENA_MOVE_BLOCKS blocks, under its
 * lock. */
#ifndef ST_ARENA_H
#define ST_ARENA_H

#include <stddef.h>

struct st_arena;

/* A new arena whose first block holds about hint bytes (more blocks are
 * added as needed). Cannot fail (out of memory aborts). */
struct st_arena *st_arena_new(size_t hint);

/* Frees every block, and so everything allocated from a. Accepts NULL. */
void st_arena_destroy(struct st_arena *a);

/* n bytes from a, aligned for any object of at most 8-byte alignment;
 * valid until st_arena_destroy(a). Cannot fail. */
void *st_arena_alloc(struct st_arena *a, size_t n);

/* Bytes a holds from the allocator: every block, headers included (a
 * walk of its blocks: one for most events). Accepts NULL (0). */
size_t st_arena_bytes(const struct st_arena *a);

/* Blocks a thread keeps for its next arenas, and blocks moved at a time
 * between a thread and the shared pool (arena.c says why these sizes). */
#define ST_ARENA_CACHE_BLOCKS 8192
#define ST_ARENA_MOVE_BLOCKS 512

/* Blocks in the shared pool now (for tests). */
size_t st_arena_pooled(void);

/* n bytes from a with no alignment (strings). */
void *st_arena_alloc_bytes(struct st_arena *a, size_t n);

#endif
