/* test_arena.c: the blocks of arenas made on one thread and destroyed on
 * another come back to the first through the shared pool (arena.h), 256 at
 * a time, instead of going to free on one side and coming from malloc on
 * the other. */
#include <check.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "arena.h"

#define N 3000

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
    /* the destroying thread's cache holds 2,048; past that it gave 256 at a
     * time to the pool: at the 2,049th, 2,305th, 2,561st and 2,817th */
    ck_assert_uint_eq(st_arena_pooled(), 4 * 256);
    /* this thread's cache is empty: it takes 256 from the pool */
    struct st_arena *a = st_arena_new(100);
    ck_assert_uint_eq(st_arena_pooled(), 3 * 256);
    int found = 0;
    for (int i = 0; i < N && !found; i++)
        found = (void *)made[i] == (void *)a;
    ck_assert_msg(found, "the new arena is not in a block the other thread freed");
    /* and the next 255 come from this thread's cache, not the pool */
    struct st_arena *more[255];
    for (int i = 0; i < 255; i++)
        more[i] = st_arena_new(100);
    ck_assert_uint_eq(st_arena_pooled(), 3 * 256);
    for (int i = 0; i < 255; i++)
        st_arena_destroy(more[i]);
    st_arena_destroy(a);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("arena");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, arena_blocks_cross_threads_through_the_pool);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
