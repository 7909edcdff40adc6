/* test_event_arena.c: st_event_parse (the analyzer's parse, every node of
 * the document in one arena of the event's) against st_event_parse_tree
 * (the reference: st_json_parse's malloc'd tree, then st_event_from_doc).
 *
 * Every line is given to both: the test data, the shared samples, the
 * schema's examples and counter-examples, the fuzz corpora, both benchmark
 * generators' output and hostile lines (deep nesting, objects of many
 * members with a duplicate key, long escapes, documents many times larger
 * than their first arena block, numbers at the limits), with random
 * mutations of them. For each line the outcome, the refusal's reason and
 * message, every field of the event and the whole document (printed) must
 * be the same, and st_event_target too: what a detector or the COPY row
 * reads cannot tell the two apart. */
#include <check.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "arena.h"
#include "buf.h"
#include "corpus.h"
#include "event.h"
#include "quiet_marks.h"

static size_t lines, accepted;


static void compare(const char *line, size_t len)
{
    struct st_event a, t;
    struct st_reject ra = {0}, rt = {0};
    /* a copy of exactly len bytes: nothing may be read past the end */
    char *buf = malloc(len ? len : 1);
    memcpy(buf, line, len);
    int rca = st_event_parse(&a, buf, len, &ra);
    int rct = st_event_parse_tree(&t, buf, len, &rt);
    lines++;
    ck_assert_msg(rca == rct, "outcome differs (%d arena, %d tree; %s) on: %.*s", rca, rct,
                  rca ? ra.code : rt.code, (int)(len < 300 ? len : 300), line);
    if (rca) {
        ck_assert_msg(corpus_same_str(ra.code, rt.code) && strcmp(ra.msg, rt.msg) == 0,
                      "refusal differs: %s \"%s\" / %s \"%s\" on: %.*s", ra.code, ra.msg,
                      rt.code, rt.msg, (int)(len < 300 ? len : 300), line);
        ck_assert_ptr_null(a.doc);
        ck_assert_ptr_null(a.mem);
        free(buf);
        return;
    }
    accepted++;
    ck_assert_ptr_nonnull(a.mem);
    ck_assert_ptr_null(t.mem);
    /* the reorder buffer's accounting reads this, not the arena */
    ck_assert_uint_eq(a.mem_bytes, st_arena_bytes(a.mem));
    ck_assert_uint_eq(t.mem_bytes, 0);
    ck_assert(corpus_same_str(a.event_id, t.event_id));
    ck_assert(a.ts_us == t.ts_us);
    ck_assert(a.source_kind == t.source_kind);
    ck_assert(corpus_same_str(a.source_name, t.source_name));
    ck_assert(corpus_same_str(a.source_platform, t.source_platform));
    ck_assert(corpus_same_str(a.task_id, t.task_id));
    ck_assert(corpus_same_str(a.run_id, t.run_id));
    ck_assert(corpus_same_str(a.trace_id, t.trace_id));
    ck_assert(a.type == t.type);
    ck_assert(a.decision == t.decision);
    ck_assert(corpus_same_str(a.reason, t.reason));
    ck_assert(corpus_same_str(a.content, t.content));
    ck_assert(corpus_same_json(a.identity, t.identity));
    ck_assert(corpus_same_json(a.attrs, t.attrs));
    ck_assert(corpus_same_json(a.doc, t.doc));
    ck_assert(corpus_same_str(st_event_target(&a), st_event_target(&t)));
    st_event_fini(&a);
    st_event_fini(&t);
    ck_assert_ptr_null(a.mem);
    free(buf);
}

static uint64_t rng = 0x9e3779b97f4a7c15u;
static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* The line, then random mutations of it: a byte changed, removed or
 * repeated, a span cut out. */
static void compare_mutated(const char *line, size_t len, int mutations)
{
    static const char bytes[] = "{}[]\",:\\u0 1e-.\"aZ\x7f\xc3\xa9\xed\xa0\x80\t";
    char *m = malloc(len + 2);
    compare(line, len);
    for (int k = 0; k < mutations && len > 0; k++) {
        size_t at = next_rand() % len, n = len;
        memcpy(m, line, len);
        switch (next_rand() % 4) {
        case 0: m[at] = bytes[next_rand() % (sizeof(bytes) - 1)]; break;
        case 1: memmove(m + at, m + at + 1, len - at - 1), n--; break;
        case 2: memmove(m + at + 1, m + at, len - at), n++; break;
        default: {
            size_t cut = next_rand() % (len - at);
            memmove(m + at, m + at + cut, len - at - cut);
            n -= cut;
        }
        }
        compare(m, n);
    }
    free(m);
}

/* corpus.h's callback: arg is the number of mutations of each input. */
static void compare_each(const char *text, size_t len, void *arg)
{
    compare_mutated(text, len, *(const int *)arg);
}

static size_t compare_tree(const char *dir, int mutations)
{
    return corpus_tree(dir, compare_each, &mutations);
}

static void compare_generated(const char *head, const char *tail, int mutations)
{
    ck_assert_msg(corpus_generated(head, tail, compare_each, &mutations) == 0, "failed: %s",
                  head);
}

#define HEAD                                                                       \
    "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"e1\",\"ts\":\"2026-11-29T07:00:00Z\"," \
    "\"source\":{\"kind\":\"proxy\",\"name\":\"p\"},\"task_id\":\"T\",\"run_id\":\"R\","  \
    "\"type\":\"request\""

/* Lines built to be hostile to an arena: far larger than the first block,
 * refused late (after most of the document is built), deep, escaped. */
static void compare_hostile(void)
{
    struct st_buf b;
    st_buf_init(&b);
    /* an array of many small numbers: 64 bytes of node per 2 bytes of text */
    for (int n = 1; n <= 20000; n *= 3) {
        st_buf_reset(&b);
        st_buf_adds(&b, HEAD ",\"attrs\":{\"host\":\"h\",\"x\":[");
        for (int i = 0; i < n; i++)
            st_buf_adds(&b, i ? ",1" : "1");
        st_buf_adds(&b, "]}}");
        compare_mutated(b.data, b.len, 3);
    }
    /* many members, then a duplicate key (found once the object is whole) */
    for (int n = 2; n <= 4000; n *= 4) {
        for (int dup = 0; dup < 2; dup++) {
            st_buf_reset(&b);
            st_buf_adds(&b, HEAD ",\"attrs\":{\"host\":\"h\"");
            for (int i = 0; i < n; i++)
                st_buf_printf(&b, ",\"k%d\":{\"a\":[true,false,null,\"s\"]}", i);
            if (dup)
                st_buf_adds(&b, ",\"k1\":0");
            st_buf_adds(&b, "}}");
            compare_mutated(b.data, b.len, 2);
        }
    }
    /* nesting at and past the limit, in attrs */
    for (int depth = 60; depth <= 70; depth++) {
        st_buf_reset(&b);
        st_buf_adds(&b, HEAD ",\"attrs\":{\"host\":\"h\",\"x\":");
        for (int i = 0; i < depth; i++)
            st_buf_adds(&b, "[");
        for (int i = 0; i < depth; i++)
            st_buf_adds(&b, "]");
        st_buf_adds(&b, "}}");
        compare(b.data, b.len);
    }
    /* long strings with escapes and surrogate pairs, a number out of range
     * after them, trailing data */
    st_buf_reset(&b);
    st_buf_adds(&b, HEAD ",\"content\":\"");
    for (int i = 0; i < 3000; i++)
        st_buf_adds(&b, "a\\n\\u00e9\\ud83d\\ude00\\\"");
    st_buf_adds(&b, "\",\"attrs\":{\"host\":\"h\\u0041\",\"port\":443}}");
    compare_mutated(b.data, b.len, 20);
    st_buf_reset(&b);
    st_buf_adds(&b, HEAD ",\"attrs\":{\"host\":\"h\",\"port\":1e999}}");
    compare(b.data, b.len);
    st_buf_reset(&b);
    st_buf_adds(&b, HEAD ",\"attrs\":{\"host\":\"h\",\"port\":443.5}}");
    compare(b.data, b.len);
    st_buf_reset(&b);
    st_buf_adds(&b, HEAD ",\"attrs\":{\"host\":\"h\"}} x");
    compare(b.data, b.len);
    static const char *const odd[] = {"", " ", "[]", "1", "\"s\"", "null", "{", "}", "{}",
                                      "{} {}", "{}x", "\xef\xbb\xbf{}", "{\"a\":\"\\u0000\"}",
                                      "{\"a\":\"\\ud800\"}", "{\"a\":-0}", "{\"a\":01}"};
    for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++)
        compare(odd[i], strlen(odd[i]));
    st_buf_fini(&b);
}

START_TEST(event_arena_parse_same_as_tree_parse)
{
    size_t files = compare_tree(SANDTRAIL_SOURCE_DIR "/tests/data", 3);
    ck_assert_msg(files > 20, "only %zu files under tests/data", files);
    compare_tree(SANDTRAIL_SOURCE_DIR "/../shared/samples", 3);
    compare_tree(SANDTRAIL_SOURCE_DIR "/../../shared/samples", 3);
    compare_tree(SANDTRAIL_SOURCE_DIR "/schemas", 6);
    compare_tree(SANDTRAIL_SOURCE_DIR "/fuzz", 2);
    compare_generated("python3 " SANDTRAIL_SOURCE_DIR "/scripts/bench/gen_mixed.py 3000 ",
                      " 7 2>/dev/null", 2);
    compare_generated("python3 " SANDTRAIL_SOURCE_DIR "/scripts/bench/gen_events.py 3000 300 10 ",
                      " /dev/null 2>/dev/null", 2);
    compare_hostile();
    /* the comparison proves something only if both accept many lines and
     * refuse many others */
    ck_assert_msg(accepted > 5000 && lines - accepted > 5000,
                  "%zu lines, %zu accepted: too few of one kind", lines, accepted);
    printf("test_event_arena: %zu lines compared, %zu accepted\n", lines, accepted);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("event_arena");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, event_arena_parse_same_as_tree_parse);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
