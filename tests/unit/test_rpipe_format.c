/* test_rpipe_format.c: st_rpipe_format writes the bytes hiredis's
 * redisFormatCommandArgv writes, for commands of every shape a checkpoint
 * sends (no argument to many, empty, binary-safe and long arguments), whole
 * or built argument by argument. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hiredis/hiredis.h>

#include "buf.h"
#include "rpipe.h"

static void same(int argc, const char **argv)
{
    size_t lens[200];
    char *want = NULL, *got = NULL;
    for (int i = 0; i < argc; i++)
        lens[i] = strlen(argv[i]);
    int wn = redisFormatCommandArgv(&want, argc, argv, lens);
    size_t gn = st_rpipe_format(argc, argv, &got);
    ck_assert_int_ge(wn, 0);
    ck_assert_uint_eq(gn, (size_t)wn);
    ck_assert(memcmp(got, want, gn) == 0);
    ck_assert_int_eq(got[gn], '\0');
    /* appended to a buffer already holding commands (a checkpoint's) */
    struct st_buf b;
    st_buf_init(&b);
    st_buf_adds(&b, "*1\r\n$4\r\nPING\r\n");
    size_t before = b.len;
    ck_assert_uint_eq(st_rpipe_format_buf(&b, argc, argv), (size_t)wn);
    ck_assert_uint_eq(b.len, before + (size_t)wn);
    ck_assert(memcmp(b.data, "*1\r\n$4\r\nPING\r\n", before) == 0);
    ck_assert(memcmp(b.data + before, want, (size_t)wn) == 0);
    st_buf_fini(&b);
    redisFreeCommand(want);
    free(got);
}

START_TEST(rpipe_format_same_bytes_as_hiredis)
{
    static char big[100001];
    memset(big, 'x', sizeof(big) - 1);
    const char *one[] = {"PING"};
    const char *zadd[] = {"ZADD", "st:denial_burst:T-1:run-7", "1796129760000000",
                          "m|0123|2026", "", "9", "\r\n$3\r\n"};
    const char *huge[] = {"SET", "k", big};
    same(1, one);
    same(7, zadd);
    same(3, huge);
    const char *many[200];
    char bufs[200][16];
    for (int n = 1; n <= 200; n += 13) {
        for (int i = 0; i < n; i++) {
            snprintf(bufs[i], sizeof(bufs[i]), "%d", i * 7919);
            many[i] = bufs[i];
        }
        same(n, many);
    }
}
END_TEST

/* Arguments with their lengths (a run's state as one string holds NUL
 * bytes): the bytes hiredis writes for the same lengths. */
START_TEST(rpipe_format_lens_is_binary_safe)
{
    const char blob[] = {1, 0, 5, '\r', '\n', 0, 0x7f};
    const char *argv[] = {"SET", "st:rx:s:1:T:1:r", blob, "KEEPTTL"};
    size_t lens[] = {3, strlen(argv[1]), sizeof(blob), 7};
    char *want = NULL;
    int wn = redisFormatCommandArgv(&want, 4, argv, lens);
    struct st_buf b;
    st_buf_init(&b);
    ck_assert_uint_eq(st_rpipe_format_buf_lens(&b, 4, argv, lens), (size_t)wn);
    ck_assert(memcmp(b.data, want, (size_t)wn) == 0);
    st_buf_fini(&b);
    redisFreeCommand(want);
}
END_TEST

/* Built argument by argument (st_rpipe_format_head, st_rpipe_format_arg:
 * runhash.c's HSET of a bucket, each field its run's prefix and its
 * detector's name as one argument): the bytes hiredis writes for the same
 * arguments whole, appended after what the buffer held. */
START_TEST(rpipe_format_by_argument_is_the_same_command)
{
    const char blob[] = {1, 0, 5, '\r', '\n', 0, 0x7f};
    const char *whole[] = {"HSET", "st:run:b:7", "4:T-01:5:run-1:denial_burst", blob,
                           "4:T-01:5:run-1:", ""};
    size_t lens[] = {4, 10, strlen(whole[2]), sizeof(blob), strlen(whole[4]), 0};
    char *want = NULL;
    int wn = redisFormatCommandArgv(&want, 6, whole, lens);
    ck_assert_int_gt(wn, 0);
    struct st_buf b;
    st_buf_init(&b);
    st_buf_adds(&b, "*1\r\n$4\r\nPING\r\n");
    size_t before = b.len;
    st_rpipe_format_head(&b, 6);
    st_rpipe_format_arg(&b, "HSET", 4, NULL, 0);
    st_rpipe_format_arg(&b, "st:run:b:7", 10, NULL, 0);
    st_rpipe_format_arg(&b, "4:T-01:5:run-1:", 15, "denial_burst", 12);
    st_rpipe_format_arg(&b, blob, sizeof(blob), NULL, 0);
    st_rpipe_format_arg(&b, "4:T-01:5:run-1:", 15, "", 0);
    st_rpipe_format_arg(&b, "", 0, NULL, 0);
    ck_assert_uint_eq(b.len - before, (size_t)wn);
    ck_assert(memcmp(b.data, "*1\r\n$4\r\nPING\r\n", before) == 0);
    ck_assert(memcmp(b.data + before, want, (size_t)wn) == 0);
    ck_assert_int_eq(b.data[b.len], '\0');
    st_buf_fini(&b);
    redisFreeCommand(want);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("rpipe_format");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, rpipe_format_same_bytes_as_hiredis);
    tcase_add_test(tc, rpipe_format_lens_is_binary_safe);
    tcase_add_test(tc, rpipe_format_by_argument_is_the_same_command);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
