/* test_arena.c: the blocks of arenas made on one thread and destroyed on
 * another come back to the first through the shared pool (arena.h),
 * ST_ARENA_MOVE_BLOCKS at a time, instead of going to free on one side and coming from malloc on
 * the other. */
#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"

#define CACHE ST_ARENA_CACHE_BLOCKS
#define MOVE ST_ARENA_MOVE_BLOCKS
/* past the destroying thread's cache, four moves to the pool and half of
 * a fifth */
#define N (CACHE + 3 * MOVE + MOVE / 2)

static struct st_arena *made[N];

static void *destroy_all(void *arg)
{
    for (int i = 0; i < N; i++) {
        ck_assert_ptr_nonnull(made[i]);
        st_arena_destroy(made[i]);
    }
    return NULL;
}

START_TEST(arena_blocks_cross_threads_through_the_pool)
{
    ck_assert_uint_eq(st_arena_pooled(), 0);
    for (int i = 0; i < N; i++) {
        made[i] = st_arena_new(100);
        memset(st_arena_alloc(made[i], 64), i & 0xff, 64);
    }
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, destroy_all, NULL), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    /* the destroying thread's cache holds CACHE; past that it gave MOVE at
     * a time to the pool: at the CACHE+1st, +MOVE+1st, +2 MOVE+1st and
     * +3 MOVE+1st */
    ck_assert_uint_eq(st_arena_pooled(), 4 * MOVE);
    /* this thread's cache is empty: it takes MOVE from the pool */
    struct st_arena *a = st_arena_new(100);
    ck_assert_uint_eq(st_arena_pooled(), 3 * MOVE);
    int found = 0;
    for (int i = 0; i < N && !found; i++)
        found = (void *)made[i] == (void *)a;
    ck_assert_msg(found, "the new arena is not in a block the other thread freed");
    /* and the next MOVE - 1 come from this thread's cache, not the pool */
    static struct st_arena *more[MOVE - 1];
    for (int i = 0; i < MOVE - 1; i++)
        more[i] = st_arena_new(100);
    ck_assert_uint_eq(st_arena_pooled(), 3 * MOVE);
    for (int i = 0; i < MOVE - 1; i++)
        st_arena_destroy(more[i]);
    st_arena_destroy(a);
}
END_TEST

/* A first block is of the smaller size (2 KB) that holds the arena's
 * hint, and a block destroyed is taken again only by an arena of its own
 * size: an event of 320 bytes does not hold 4 KB, and one of 600 bytes
 * does not get a block too small for it (a second block, from malloc,
 * for every such event). */
START_TEST(arena_blocks_come_in_three_sizes)
{
    struct st_arena *tiny = st_arena_new(600), *small = st_arena_new(1500),
                    *large = st_arena_new(3000);
    ck_assert_uint_eq(st_arena_bytes(tiny), 1024);
    ck_assert_uint_eq(st_arena_bytes(small), 2048);
    ck_assert_uint_eq(st_arena_bytes(large), 4096);
    /* a hint just past a size's room: the next size */
    struct st_arena *edge = st_arena_new(2040), *edge1 = st_arena_new(1016);
    ck_assert_uint_eq(st_arena_bytes(edge), 4096);
    ck_assert_uint_eq(st_arena_bytes(edge1), 2048);
    void *tb = tiny, *sb = small, *lb = large, *eb = edge, *e1b = edge1;
    st_arena_destroy(tiny);
    st_arena_destroy(small);
    st_arena_destroy(large);
    st_arena_destroy(edge);
    st_arena_destroy(edge1);
    /* each size's stack gives back its own last block, not another's */
    struct st_arena *l2 = st_arena_new(3000), *s2 = st_arena_new(1500),
                    *t2 = st_arena_new(600);
    ck_assert_ptr_eq((void *)l2, eb);
    ck_assert_ptr_eq((void *)s2, e1b);
    ck_assert_ptr_eq((void *)t2, tb);
    struct st_arena *l3 = st_arena_new(3000), *s3 = st_arena_new(1500);
    ck_assert_ptr_eq((void *)l3, lb);
    ck_assert_ptr_eq((void *)s3, sb);
    /* a hint past every size: a block of its own, to size */
    struct st_arena *big = st_arena_new(10000);
    ck_assert_uint_ge(st_arena_bytes(big), 10000);
    /* what a small first block cannot hold goes to a block of its own */
    void *x = st_arena_alloc(t2, 900), *y = st_arena_alloc(t2, 900);
    memset(x, 1, 900);
    memset(y, 2, 900);
    ck_assert_uint_gt(st_arena_bytes(t2), 1024);
    ck_assert_int_eq(((unsigned char *)x)[899], 1);
    st_arena_destroy(big);
    st_arena_destroy(l2);
    st_arena_destroy(s2);
    st_arena_destroy(t2);
    st_arena_destroy(l3);
    st_arena_destroy(s3);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("arena");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, arena_blocks_cross_threads_through_the_pool);
    tcase_add_test(tc, arena_blocks_come_in_three_sizes);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
