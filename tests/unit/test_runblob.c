/* test_runblob.c: a run's state as one string (runblob.h): what is written
 * reads back the same, whatever the numbers and bytes; a string cut
 * anywhere, another version or bytes after the end read as malformed. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
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
    b.data[0] = ST_RUNBLOB_VERSION_TRIM + 1; /* another version */
    ck_assert_int_eq(read_state(b.data, b.len, 0), -1);
    b.data[0] = ST_RUNBLOB_VERSION_TRIM; /* says a trailer follows: none does */
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

/* Reads a state's members, episodes and buckets, up to its trailer. */
static void read_body(struct st_runblob_reader *r)
{
    uint64_t n;
    ck_assert_int_eq(st_runblob_get_count(r, &n), 0);
    for (uint64_t i = 0; i < n; i++) {
        int64_t t;
        const char *k;
        size_t kl;
        ck_assert_int_eq(st_runblob_get_member(r, &t, &k, &kl), 0);
    }
    ck_assert_int_eq(st_runblob_get_count(r, &n), 0);
    for (uint64_t i = 0; i < n; i++) {
        const char *id;
        int64_t f, l;
        ck_assert_int_eq(st_runblob_get_episode(r, &id, &f, &l), 0);
    }
    ck_assert_int_eq(st_runblob_get_count(r, &n), 0);
    for (uint64_t i = 0; i < n; i++) {
        int64_t k, sum;
        ck_assert_int_eq(st_runblob_get_bucket(r, &k, &sum), 0);
    }
}

/* Version 2: the same state and a pending trim after it (runwin.c's
 * trailer); a string with none pending stays version 1, read as before
 * (no trim: INT64_MIN, -1). The trailer is read back, is left unread
 * safely (the close checks it), and a cut in it or a byte after it is
 * refused. */
START_TEST(runblob_carries_a_pending_trim)
{
    struct st_buf b;
    st_buf_init(&b);
    write_state(&b);
    size_t v1len = b.len;
    struct st_runblob_reader r;
    int64_t ts, o;
    ck_assert_int_eq(st_runblob_open(&r, b.data, b.len), 0);
    ck_assert_int_eq((unsigned char)b.data[0], ST_RUNBLOB_VERSION);
    ck_assert_int_eq(read_state(b.data, b.len, 1), 0);
    st_runblob_pending_trim(&b, -1700000000000000LL, 123456789012LL);
    ck_assert_int_eq((unsigned char)b.data[0], ST_RUNBLOB_VERSION_TRIM);
    ck_assert_int_eq(read_state(b.data, b.len, 1), 0); /* trailer left to the close */
    /* read explicitly */
    ck_assert_int_eq(st_runblob_open(&r, b.data, b.len), 0);
    read_body(&r);
    ck_assert_int_eq(st_runblob_get_pending_trim(&r, &ts, &o), 0);
    ck_assert(ts == -1700000000000000LL);
    ck_assert(o == 123456789012LL);
    ck_assert_int_eq(st_runblob_close(&r), 0);
    for (size_t cut = v1len; cut < b.len; cut++)
        ck_assert_msg(read_state(b.data, cut, 0) == -1, "cut at %zu read", cut);
    st_buf_addc(&b, 0);
    ck_assert_int_eq(read_state(b.data, b.len, 0), -1);
    /* version 1: no trim pending */
    b.len = v1len;
    b.data[0] = ST_RUNBLOB_VERSION;
    ck_assert_int_eq(st_runblob_open(&r, b.data, b.len), 0);
    read_body(&r);
    ck_assert_int_eq(st_runblob_get_pending_trim(&r, &ts, &o), 0);
    ck_assert(ts == INT64_MIN);
    ck_assert(o == -1);
    ck_assert_int_eq(st_runblob_close(&r), 0);
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

/* --- the members' log ------------------------------------------------ */

/* what a log read gave: members as "ts key", sorted, distinct */
struct seen {
    char items[32][48];
    int n;
};

static void collect(void *arg, int64_t ts, const char *key, size_t len)
{
    struct seen *s = arg;
    char one[48];
    snprintf(one, sizeof(one), "%lld %.*s", (long long)ts, (int)len, key);
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->items[i], one))
            return;
    ck_assert_int_lt(s->n, 32);
    strcpy(s->items[s->n++], one);
}

static int cmp_item(const void *a, const void *b)
{
    return strcmp(a, b);
}

/* the members held, as one line "ts key,ts key" sorted; NULL when malformed */
static char *log_set(const char *data, size_t len)
{
    static char out[32 * 48];
    struct seen s = {.n = 0};
    if (st_runblob_log_read(data, len, collect, &s))
        return NULL;
    qsort(s.items, (size_t)s.n, sizeof(s.items[0]), cmp_item);
    out[0] = '\0';
    for (int i = 0; i < s.n; i++) {
        if (i)
            strcat(out, ",");
        strcat(out, s.items[i]);
    }
    return out;
}

static void log_add(struct st_buf *b, int n, const int64_t *ts, const char *const *ks)
{
    int64_t prev;
    st_runblob_log_members(b, (uint64_t)n, &prev);
    for (int i = 0; i < n; i++)
        st_runblob_member(b, &prev, ts[i], ks[i], strlen(ks[i]));
}

/* Frames apply in order: a trim removes the members appended before it
 * with an older time, never one appended after it (a late event's member
 * added once the trim was sent), nor one at its time. */
START_TEST(runblob_log_applies_frames_in_order)
{
    struct st_buf b;
    st_buf_init(&b);
    ck_assert_str_eq(log_set("", 0), ""); /* empty: nothing */
    log_add(&b, 3, (int64_t[]){10, 20, 30}, (const char *[]){"a", "b", "c"});
    ck_assert_str_eq(log_set(b.data, b.len), "10 a,20 b,30 c");
    st_runblob_log_trim(&b, 20);
    ck_assert_str_eq(log_set(b.data, b.len), "20 b,30 c");
    log_add(&b, 2, (int64_t[]){5, 40}, (const char *[]){"late", "d"});
    ck_assert_str_eq(log_set(b.data, b.len), "20 b,30 c,40 d,5 late");
    /* a later trim reaches the late one, and a smaller trim after a larger
     * one takes nothing back */
    st_runblob_log_trim(&b, 35);
    st_runblob_log_trim(&b, 1);
    ck_assert_str_eq(log_set(b.data, b.len), "40 d");
    /* a member appended again after the trim that removed it is held */
    log_add(&b, 1, (int64_t[]){10}, (const char *[]){"a"});
    ck_assert_str_eq(log_set(b.data, b.len), "10 a,40 d");
    ck_assert_int_eq(st_runblob_log_count(b.data, b.len), 2);
    log_add(&b, 2, (int64_t[]){40, 40}, (const char *[]){"d", "e"});
    ck_assert_int_eq(st_runblob_log_count(b.data, b.len), 3);
    ck_assert_int_eq(st_runblob_log_count(b.data, b.len - 1), -1);
    st_buf_fini(&b);
}
END_TEST

/* A checkpoint's append (a trim, then members below and above it) sent
 * twice -- a redo -- holds what it held sent once; a member in two frames
 * comes once. */
START_TEST(runblob_log_twice_is_once)
{
    struct st_buf one, two;
    st_buf_init(&one);
    st_buf_init(&two);
    log_add(&one, 3, (int64_t[]){10, 20, 30}, (const char *[]){"a", "b", "c"});
    st_buf_add(&two, one.data, one.len);
    struct st_buf step;
    st_buf_init(&step);
    st_runblob_log_trim(&step, 25);
    log_add(&step, 2, (int64_t[]){15, 40}, (const char *[]){"late", "c"});
    st_buf_add(&one, step.data, step.len);
    st_buf_add(&two, step.data, step.len);
    st_buf_add(&two, step.data, step.len);
    char *a = strdup(log_set(one.data, one.len));
    ck_assert_str_eq(a, "15 late,30 c,40 c");
    ck_assert_str_eq(log_set(two.data, two.len), a);
    free(a);
    st_buf_fini(&one);
    st_buf_fini(&two);
    st_buf_fini(&step);
}
END_TEST

static int calls;
static void count_call(void *arg, int64_t ts, const char *key, size_t len)
{
    (void)arg, (void)ts, (void)key, (void)len;
    calls++;
}

/* A log cut inside a frame, a kind unknown, a member holding a NUL: -1,
 * with no member handed out (the whole log is checked first). A cut
 * between frames is a shorter log, and reads. */
START_TEST(runblob_log_refuses_what_is_not_a_log)
{
    struct st_buf b;
    st_buf_init(&b);
    log_add(&b, 2, (int64_t[]){1700000000000000LL, 1700000000000001LL},
            (const char *[]){"s\x1f" "e1\x1f{}", "s\x1f" "e2\x1f{}"});
    size_t end1 = b.len;
    st_runblob_log_trim(&b, 1700000000000001LL);
    size_t end2 = b.len;
    log_add(&b, 1, (int64_t[]){-3}, (const char *[]){"x"});
    for (size_t cut = 0; cut <= b.len; cut++) {
        calls = 0;
        int rc = st_runblob_log_read(b.data, cut, count_call, NULL);
        int boundary = cut == 0 || cut == end1 || cut == end2 || cut == b.len;
        ck_assert_msg(rc == (boundary ? 0 : -1), "cut at %zu: %d", cut, rc);
        if (rc)
            ck_assert_int_eq(calls, 0);
    }
    b.data[end2] = 'X'; /* the third frame's kind */
    calls = 0;
    ck_assert_int_eq(st_runblob_log_read(b.data, b.len, count_call, NULL), -1);
    ck_assert_int_eq(calls, 0);
    b.data[end2] = ST_RUNBLOB_LOG_MEMBERS;
    b.data[b.len - 1] = '\0'; /* the last member's one byte */
    ck_assert_int_eq(st_runblob_log_read(b.data, b.len, count_call, NULL), -1);
    ck_assert_int_eq(calls, 0);
    st_buf_fini(&b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("runblob");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, runblob_reads_back_what_it_wrote);
    tcase_add_test(tc, runblob_refuses_what_is_not_exactly_one);
    tcase_add_test(tc, runblob_carries_a_pending_trim);
    tcase_add_test(tc, runblob_each_read_checks_its_bounds);
    tcase_add_test(tc, runblob_log_applies_frames_in_order);
    tcase_add_test(tc, runblob_log_twice_is_once);
    tcase_add_test(tc, runblob_log_refuses_what_is_not_a_log);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
