/* test_runblob.c: a run's state as one string (runblob.h): what is written
 * reads back the same, whatever the numbers and bytes; a string cut
 * anywhere, another version or bytes after the end read as malformed. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "runblob.h"

static const int64_t times[] = {INT64_MIN, -5, 0, 0, 1, 1700000000000000LL, INT64_MAX};
static const char *const keys[] = {"a\x1f" "b\x1f" "c", "", "x", "s\x1f" "e\x1f{}",
                                   "\x1f\x1f", "long member", "z"};
static const size_t klens[] = {5, 0, 1, 7, 2, 11, 1};

static void write_state(struct st_buf *b)
{
    int64_t prev;
    st_runblob_start(b, &prev);
    st_runblob_count(b, 7);
    for (int i = 0; i < 7; i++)
        st_runblob_member(b, &prev, times[i], keys[i], klens[i]);
    st_runblob_count(b, 2);
    st_runblob_episode(b, "0123456789abcdef0123456789abcdef", -7, INT64_MAX);
    st_runblob_episode(b, "ffffffffffffffffffffffffffffffff", INT64_MIN, INT64_MIN);
    st_runblob_count(b, 3);
    st_runblob_bucket(b, -1, INT64_MIN);
    st_runblob_bucket(b, 0, 0);
    st_runblob_bucket(b, INT64_MAX, 12345);
}

/* reads what write_state wrote; returns 0, or -1 at the first refusal */
static int read_state(const char *data, size_t len, int check)
{
    struct st_runblob_reader r;
    uint64_t n;
    if (st_runblob_open(&r, data, len) || st_runblob_get_count(&r, &n))
        return -1;
    if (check)
        ck_assert_uint_eq(n, 7);
    for (uint64_t i = 0; i < n; i++) {
        int64_t ts;
        const char *k;
        size_t kl;
        if (st_runblob_get_member(&r, &ts, &k, &kl))
            return -1;
        if (check) {
            ck_assert(ts == times[i]);
            ck_assert_uint_eq(kl, klens[i]);
            ck_assert(memcmp(k, keys[i], kl) == 0);
        }
    }
    if (st_runblob_get_count(&r, &n))
        return -1;
    if (check)
        ck_assert_uint_eq(n, 2);
    for (uint64_t i = 0; i < n; i++) {
        const char *id;
        int64_t first, last;
        if (st_runblob_get_episode(&r, &id, &first, &last))
            return -1;
        if (check && i == 0) {
            ck_assert(memcmp(id, "0123456789abcdef0123456789abcdef", 32) == 0);
            ck_assert(first == -7 && last == INT64_MAX);
        }
        if (check && i == 1)
            ck_assert(first == INT64_MIN && last == INT64_MIN);
    }
    if (st_runblob_get_count(&r, &n))
        return -1;
    for (uint64_t i = 0; i < n; i++) {
        int64_t key, sum;
        if (st_runblob_get_bucket(&r, &key, &sum))
            return -1;
        if (check && i == 0)
            ck_assert(key == -1 && sum == INT64_MIN);
        if (check && i == 2)
            ck_assert(key == INT64_MAX && sum == 12345);
    }
    return st_runblob_close(&r);
}

START_TEST(runblob_reads_back_what_it_wrote)
{
    struct st_buf b;
    st_buf_init(&b);
    write_state(&b);
    ck_assert_int_eq(b.data[0], ST_RUNBLOB_VERSION);
    ck_assert_int_eq(read_state(b.data, b.len, 1), 0);
    st_buf_fini(&b);
}
END_TEST

START_TEST(runblob_refuses_what_is_not_exactly_one)
{
    struct st_buf b;
    st_buf_init(&b);
    write_state(&b);
    for (size_t cut = 0; cut < b.len; cut++)
        ck_assert_msg(read_state(b.data, cut, 0) == -1, "cut at %zu read", cut);
    st_buf_addc(&b, 0); /* a byte after the end */
    ck_assert_int_eq(read_state(b.data, b.len, 0), -1);
    b.len--;
    b.data[0] = ST_RUNBLOB_VERSION + 1;
    ck_assert_int_eq(read_state(b.data, b.len, 0), -1);
    /* a count larger than the bytes left, a varint of more than 64 bits */
    const char huge[] = {1, (char)0xff, (char)0xff, 0x7f};
    ck_assert_int_eq(read_state(huge, sizeof(huge), 0), -1);
    const char wide[] = {1, (char)0x80, (char)0x80, (char)0x80, (char)0x80, (char)0x80,
                         (char)0x80, (char)0x80, (char)0x80, (char)0x80, 0x02};
    ck_assert_int_eq(read_state(wide, sizeof(wide), 0), -1);
    st_buf_fini(&b);
}
END_TEST

/* Each read checks what it reads against the bytes left, by itself (not
 * only the close at the end): a caller sizes by a count, and reads a
 * member's bytes, as soon as the call returns. Found by a review: the
 * refusals above still held with any one of these checks taken out (a
 * later read or the close refused instead). */
START_TEST(runblob_each_read_checks_its_bounds)
{
    struct st_runblob_reader r;
    uint64_t n;
    int64_t ts, first, last;
    const char *k;
    size_t kl;
    /* a count of 65535 with no byte left */
    const char huge[] = {1, (char)0xff, (char)0xff, 0x03};
    ck_assert_int_eq(st_runblob_open(&r, huge, sizeof(huge)), 0);
    ck_assert_int_eq(st_runblob_get_count(&r, &n), -1);
    /* a varint of ten bytes whose last one has more than the 64th bit */
    const char wide[] = {1, (char)0x80, (char)0x80, (char)0x80, (char)0x80, (char)0x80,
                         (char)0x80, (char)0x80, (char)0x80, (char)0x80, 0x02};
    ck_assert_int_eq(st_runblob_open(&r, wide, sizeof(wide)), 0);
    ck_assert_int_eq(st_runblob_get_count(&r, &n), -1);
    /* the same with the 64th bit only: 2^63, then too large a count */
    const char top[] = {1, (char)0x80, (char)0x80, (char)0x80, (char)0x80, (char)0x80,
                        (char)0x80, (char)0x80, (char)0x80, (char)0x80, 0x01};
    ck_assert_int_eq(st_runblob_open(&r, top, sizeof(top)), 0);
    ck_assert_int_eq(st_runblob_get_count(&r, &n), -1);
    /* one member of 100 bytes with 2 left */
    const char cut[] = {1, 1, 0, 100, 'a', 'b'};
    ck_assert_int_eq(st_runblob_open(&r, cut, sizeof(cut)), 0);
    ck_assert_int_eq(st_runblob_get_count(&r, &n), 0);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(st_runblob_get_member(&r, &ts, &k, &kl), -1);
    /* one episode of 31 bytes */
    char ep[2 + 31 + 2] = {1, 1};
    ck_assert_int_eq(st_runblob_open(&r, ep, 2 + 31), 0);
    ck_assert_int_eq(st_runblob_get_count(&r, &n), 0);
    ck_assert_int_eq(st_runblob_get_episode(&r, &k, &first, &last), -1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("runblob");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, runblob_reads_back_what_it_wrote);
    tcase_add_test(tc, runblob_refuses_what_is_not_exactly_one);
    tcase_add_test(tc, runblob_each_read_checks_its_bounds);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
