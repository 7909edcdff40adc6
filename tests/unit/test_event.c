/* test_event.c: validation of sandtrail.event.v1. Every example in
 * schemas/examples must be accepted, every file in schemas/invalid rejected
 * with the reason its name starts with, and each kind of malformed line
 * rejected with its own reason. */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "event.h"
#include "redact.h"

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    ck_assert(fread(buf, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = '\0';
    *len = (size_t)n;
    return buf;
}

static const char *parse_code(const char *line, size_t len)
{
    static struct st_reject rej;
    struct st_event ev;
    if (st_event_parse(&ev, line, len, &rej) == 0) {
        st_event_fini(&ev);
        return "ok";
    }
    ck_assert_ptr_nonnull(rej.code);
    ck_assert_msg(rej.msg[0] != '\0', "a rejection must say why");
    return rej.code;
}

static const char *parse_str(const char *line)
{
    return parse_code(line, strlen(line));
}

#define VALID_PREFIX                                                         \
    "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"e1\",\"ts\":\"2026-11-29T07:00:00Z\"," \
    "\"source\":{\"kind\":\"proxy\",\"name\":\"p\"},\"task_id\":\"T\",\"run_id\":\"R\","   \
    "\"type\":\"request\",\"attrs\":{\"host\":\"h\"}"

START_TEST(event_accepts_every_example)
{
    const char *dir = SANDTRAIL_SOURCE_DIR "/schemas/examples";
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;
    ck_assert_ptr_nonnull(d);
    while ((de = readdir(d))) {
        if (!strstr(de->d_name, ".json"))
            continue;
        char path[1024];
        size_t len;
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        char *buf = slurp(path, &len);
        struct st_event ev;
        struct st_reject rej = {0};
        int rc = st_event_parse(&ev, buf, len, &rej);
        ck_assert_msg(rc == 0, "%s rejected: %s: %s", de->d_name, rej.code, rej.msg);
        st_event_fini(&ev);
        free(buf);
        n++;
    }
    closedir(d);
    ck_assert_int_ge(n, 9);
}
END_TEST

START_TEST(event_rejects_every_invalid_example_with_its_reason)
{
    const char *dir = SANDTRAIL_SOURCE_DIR "/schemas/invalid";
    DIR *d = opendir(dir);
    struct dirent *de;
    int n = 0;
    ck_assert_ptr_nonnull(d);
    while ((de = readdir(d))) {
        const char *sep = strstr(de->d_name, "--");
        if (!sep)
            continue;
        char path[1024], want[64];
        size_t len;
        snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        snprintf(want, sizeof(want), "%.*s", (int)(sep - de->d_name), de->d_name);
        char *buf = slurp(path, &len);
        const char *got = parse_code(buf, len);
        ck_assert_msg(strcmp(got, want) == 0, "%s: want %s, got %s", de->d_name, want,
                      got);
        free(buf);
        n++;
    }
    closedir(d);
    ck_assert_int_ge(n, 15);
}
END_TEST

START_TEST(event_parses_fields_and_keeps_unknown_members)
{
    size_t len;
    char *buf = slurp(SANDTRAIL_SOURCE_DIR "/schemas/examples/commit.json", &len);
    struct st_event ev;
    struct st_reject rej;
    ck_assert_int_eq(st_event_parse(&ev, buf, len, &rej), 0);
    ck_assert_str_eq(ev.event_id, "sbx-0003");
    ck_assert_str_eq(ev.task_id, "T-42");
    ck_assert_str_eq(ev.run_id, "run-7");
    ck_assert_int_eq(ev.type, ST_TYPE_COMMIT);
    ck_assert_int_eq(ev.source_kind, ST_SOURCE_SANDBOX);
    ck_assert_int_eq(ev.decision, ST_DECISION_ALLOW);
    /* 07:00:05+01:00 is 06:00:05Z */
    ck_assert_int_eq(ev.ts_us, 1795932005LL * 1000000);
    ck_assert_str_eq(ev.content, "Fix retry loop in client");
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(ev.doc, "x_vendor_field");
    ck_assert_ptr_nonnull(x);
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(x, "kept")));
    st_event_fini(&ev);
    free(buf);
}
END_TEST

START_TEST(event_decision_and_target)
{
    size_t len;
    char *buf = slurp(SANDTRAIL_SOURCE_DIR "/schemas/examples/request_deny.json", &len);
    struct st_event ev;
    struct st_reject rej;
    ck_assert_int_eq(st_event_parse(&ev, buf, len, &rej), 0);
    ck_assert_int_eq(ev.decision, ST_DECISION_DENY);
    ck_assert_str_eq(st_event_target(&ev), "paste.example.net");
    ck_assert_str_eq(ev.reason, "not_in_allowlist");
    st_event_fini(&ev);
    free(buf);
}
END_TEST

/* token_write skips the walk of an event whose text cannot hold a
 * redaction marker: the flag must be 1 whenever some string could. */
static int may_mark_of(const char *attrs)
{
    char buf[1024];
    snprintf(buf, sizeof(buf),
             "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"m-1\","
             "\"ts\":\"2026-11-29T07:00:02Z\",\"source\":{\"kind\":\"proxy\","
             "\"name\":\"squid\"},\"task_id\":\"T\",\"run_id\":\"R\","
             "\"type\":\"request\",\"attrs\":%s}",
             attrs);
    struct st_event ev;
    struct st_reject rej;
    ck_assert_msg(st_event_parse(&ev, buf, strlen(buf), &rej) == 0, "%s: %s", buf, rej.msg);
    int m = ev.may_mark;
    st_event_fini(&ev);
    return m;
}

/* The attrs members the schema names are kept at validation; one it does
 * not name is still found (the document carries it); a null one is absent;
 * the same whether the event was parsed into an arena or from a tree. */
START_TEST(event_attrs_kept_at_validation_match_the_document)
{
    static const char line[] =
        "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"e1\","
        "\"ts\":\"2026-11-29T10:00:00Z\",\"source\":{\"kind\":\"proxy\",\"name\":\"squid\"},"
        "\"task_id\":\"T\",\"run_id\":\"r\",\"type\":\"request\","
        "\"attrs\":{\"host\":\"h.example\",\"port\":443,\"path\":null,\"extra\":\"x\"}}";
    for (int tree = 0; tree < 2; tree++) {
        struct st_event ev;
        struct st_reject rej;
        int rc = tree ? st_event_parse_tree(&ev, line, strlen(line), &rej)
                      : st_event_parse(&ev, line, strlen(line), &rej);
        ck_assert_msg(rc == 0, "%s", rej.msg);
        ck_assert_int_eq(ev.attrs_named, 1);
        int64_t port = 0;
        ck_assert_str_eq(st_event_attr_str(&ev, "host"), "h.example");
        ck_assert(st_event_attr_str(&ev, "host") == st_json_str(ev.attrs, "host"));
        ck_assert(st_event_attr_int(&ev, "port", &port));
        ck_assert_int_eq(port, 443);
        ck_assert_ptr_null(st_event_attr(&ev, "path"));
        ck_assert_ptr_null(st_event_attr(&ev, "status"));
        ck_assert_str_eq(st_event_attr_str(&ev, "extra"), "x");
        ck_assert_str_eq(st_event_target(&ev), "h.example");
        st_event_fini(&ev);
    }
}
END_TEST

START_TEST(event_may_mark_whenever_a_string_could_hold_a_marker)
{
    ck_assert_int_eq(may_mark_of("{\"host\":\"h.example\",\"path\":\"/[x]\"}"), 0);
    /* a marker after other '[' (each first byte tried in turn), and a
     * marker's opening cut short */
    ck_assert_int_eq(may_mark_of("{\"host\":\"h\",\"path\":\"/[[[" ST_REDACT_MARKER_OPEN "x:0]\"}"), 1);
    ck_assert_int_eq(may_mark_of("{\"host\":\"h\",\"path\":\"/[REDACTED\"}"), 0);
    ck_assert_int_eq(may_mark_of("{\"host\":\"h\",\"path\":\"/?t=" ST_REDACT_MARKER_OPEN "bearer:0a1b]\"}"), 1);
    /* the marker's opening spelled with an escape: the text does not show
     * it, the parsed string does */
    ck_assert_int_eq(may_mark_of("{\"host\":\"h\",\"path\":\"/?t=\\u005bREDACTED:bearer:0a1b]\"}"), 1);
    ck_assert_int_eq(may_mark_of("{\"host\":\"h\",\"path\":\"caf\\u00e9\"}"), 1);
    /* a tree has no text: always looked at */
    struct st_reject rej;
    cJSON *doc = cJSON_Parse("{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"m-2\","
                             "\"ts\":\"2026-11-29T07:00:02Z\",\"source\":{\"kind\":"
                             "\"proxy\",\"name\":\"squid\"},\"task_id\":\"T\","
                             "\"run_id\":\"R\",\"type\":\"request\","
                             "\"attrs\":{\"host\":\"h\"}}");
    struct st_event ev;
    ck_assert_int_eq(st_event_from_doc(&ev, doc, &rej), 0);
    ck_assert_int_eq(ev.may_mark, 1);
    st_event_fini(&ev);
}
END_TEST

START_TEST(event_rejects_malformed_json)
{
    ck_assert_str_eq(parse_str(VALID_PREFIX), ST_REASON_JSON); /* unterminated */
    ck_assert_str_eq(parse_str("{\"a\":}"), ST_REASON_JSON);
    ck_assert_str_eq(parse_str(VALID_PREFIX "} trailing"), ST_REASON_JSON);
    ck_assert_str_eq(parse_str(VALID_PREFIX "}{}"), ST_REASON_JSON);
    ck_assert_str_eq(parse_str(VALID_PREFIX "}  "), "ok");
    /* a raw control byte inside a string is not JSON (escaped, it is) */
    ck_assert_str_eq(parse_str(VALID_PREFIX ",\"reason\":\"a\tb\"}"), ST_REASON_JSON);
    ck_assert_str_eq(parse_str(VALID_PREFIX ",\"reason\":\"a\\tb\"}"), "ok");
}
END_TEST

START_TEST(event_rejects_invalid_utf8)
{
    /* a stray continuation byte, an overlong '/', a surrogate, and a
     * truncated sequence, each inside a string value */
    const char *bad[] = {"\x80", "\xC0\xAF", "\xED\xA0\x80", "\xE2\x82"};
    for (size_t i = 0; i < 4; i++) {
        char line[512];
        snprintf(line, sizeof(line), VALID_PREFIX ",\"reason\":\"x%sy\"}", bad[i]);
        ck_assert_msg(strcmp(parse_str(line), ST_REASON_UTF8) == 0, "case %zu", i);
    }
    /* valid multibyte text passes */
    ck_assert_str_eq(parse_str(VALID_PREFIX ",\"reason\":\"caf\xC3\xA9 \xF0\x9F\x94\x92\"}"),
                     "ok");
}
END_TEST

START_TEST(event_rejects_nul_bytes)
{
    char line[512];
    int n = snprintf(line, sizeof(line), VALID_PREFIX ",\"reason\":\"a");
    line[n++] = '\0';
    memcpy(line + n, "b\"}", 3);
    n += 3;
    ck_assert_str_eq(parse_code(line, (size_t)n), ST_REASON_NUL);
    ck_assert_str_eq(parse_str(VALID_PREFIX ",\"reason\":\"a\\u0000b\"}"), ST_REASON_NUL);
}
END_TEST

/* The bounds of what PostgreSQL stores are inclusive: the edge values pass. */
START_TEST(event_accepts_the_edges_of_the_store)
{
    const char *tail = "\"source\":{\"kind\":\"proxy\",\"name\":\"p\"},\"task_id\":\"T\","
                       "\"run_id\":\"R\",\"type\":\"request\",\"attrs\":{\"host\":\"h\"}}";
    char line[512];
    snprintf(line, sizeof(line),
             "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"e\",\"ts\":\"%s\",%s",
             "1970-01-01T00:00:00Z", tail);
    ck_assert_str_eq(parse_str(line), "ok");
    snprintf(line, sizeof(line),
             "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"e\",\"ts\":\"%s\",%s",
             "9999-12-31T23:59:59.999999Z", tail);
    ck_assert_str_eq(parse_str(line), "ok");
    ck_assert_str_eq(parse_str(VALID_PREFIX ",\"x\":1.7e308}"), "ok");
    ck_assert_str_eq(parse_str(VALID_PREFIX ",\"x\":-1.7e308}"), "ok");
    ck_assert_str_eq(parse_str(VALID_PREFIX ",\"x\":1.5e-16382}"), "ok");
    ck_assert_str_eq(parse_str(VALID_PREFIX ",\"x\":-1e131073}"), ST_REASON_NUMBER);
    ck_assert_str_eq(parse_str(VALID_PREFIX ",\"x\":[1e99999999999]}"), ST_REASON_NUMBER);
}
END_TEST

START_TEST(event_rejects_deep_nesting)
{
    /* 10,000 levels: rejected by the pre-scan before any recursion */
    size_t depth = 10000;
    char *line = malloc(depth * 2 + 64);
    size_t n = 0;
    n += (size_t)sprintf(line, "{\"x\":");
    for (size_t i = 0; i < depth; i++)
        line[n++] = '[';
    for (size_t i = 0; i < depth; i++)
        line[n++] = ']';
    line[n++] = '}';
    ck_assert_str_eq(parse_code(line, n), ST_REASON_DEPTH);
    free(line);
    /* brackets inside strings do not count */
    char ok[1024];
    snprintf(ok, sizeof(ok), VALID_PREFIX ",\"reason\":\"%s\"}",
             "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[");
    ck_assert_str_eq(parse_str(ok), "ok");
}
END_TEST

START_TEST(event_rejects_duplicate_keys)
{
    ck_assert_str_eq(parse_str(VALID_PREFIX ",\"task_id\":\"other\"}"), ST_REASON_DUPLICATE);
    ck_assert_str_eq(parse_str(VALID_PREFIX ",\"x\":{\"a\":1,\"a\":2}}"), ST_REASON_DUPLICATE);
    /* keys of a small object that share their first bytes, or differ
     * only in length; one spelled with an escape */
    ck_assert_str_eq(parse_str(VALID_PREFIX ",\"x\":{\"abcdefgh\":1,\"abcdefgh\":2}}"),
                     ST_REASON_DUPLICATE);
    ck_assert_str_eq(parse_str(VALID_PREFIX ",\"x\":{\"abcdefgh_x1\":1,\"b\":0,"
                                            "\"abcdefgh_x1\":2}}"),
                     ST_REASON_DUPLICATE);
    ck_assert_str_eq(parse_str(VALID_PREFIX ",\"x\":{\"abcdefgh_x1\":1,\"abcdefgh_x2\":2,"
                                            "\"abcdefgh\":3,\"abcdefg\":4,\"abcdefgh_x\":5}}"),
                     "ok");
    ck_assert_str_eq(parse_str(VALID_PREFIX ",\"x\":{\"\\u0061b\":1,\"ab\":2}}"),
                     ST_REASON_DUPLICATE); /* the same key once decoded */
    /* a large object takes the sorting path */
    char line[2048];
    int n = snprintf(line, sizeof(line), VALID_PREFIX ",\"big\":{");
    for (int i = 0; i < 40; i++)
        n += snprintf(line + n, sizeof(line) - (size_t)n, "\"k%d\":%d,", i, i);
    snprintf(line + n, sizeof(line) - (size_t)n, "\"k17\":0}}");
    ck_assert_str_eq(parse_str(line), ST_REASON_DUPLICATE);
    line[n] = '\0';
    snprintf(line + n, sizeof(line) - (size_t)n, "\"k99\":0}}");
    ck_assert_str_eq(parse_str(line), "ok");
}
END_TEST

START_TEST(event_rejects_empty_and_non_object)
{
    ck_assert_str_eq(parse_str(""), ST_REASON_JSON);
    ck_assert_str_eq(parse_str("42"), ST_REASON_NOT_OBJECT);
    ck_assert_str_eq(parse_str("null"), ST_REASON_NOT_OBJECT);
}
END_TEST

START_TEST(utf8_sanitize_never_splits_or_passes_invalid_bytes)
{
    char *s = st_utf8_sanitize("ab\xC3\xA9" "c\xFF\0d", 8, 100);
    ck_assert_str_eq(s, "ab\xC3\xA9" "c??d");
    free(s);
    s = st_utf8_sanitize("ab\xC3\xA9", 4, 3); /* cut inside é: dropped whole */
    ck_assert_str_eq(s, "ab");
    ck_assert(st_utf8_valid(s, strlen(s)));
    free(s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("event");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, event_accepts_every_example);
    tcase_add_test(tc, event_rejects_every_invalid_example_with_its_reason);
    tcase_add_test(tc, event_parses_fields_and_keeps_unknown_members);
    tcase_add_test(tc, event_decision_and_target);
    tcase_add_test(tc, event_attrs_kept_at_validation_match_the_document);
    tcase_add_test(tc, event_may_mark_whenever_a_string_could_hold_a_marker);
    tcase_add_test(tc, event_rejects_malformed_json);
    tcase_add_test(tc, event_rejects_invalid_utf8);
    tcase_add_test(tc, event_rejects_nul_bytes);
    tcase_add_test(tc, event_accepts_the_edges_of_the_store);
    tcase_add_test(tc, event_rejects_deep_nesting);
    tcase_add_test(tc, event_rejects_duplicate_keys);
    tcase_add_test(tc, event_rejects_empty_and_non_object);
    tcase_add_test(tc, utf8_sanitize_never_splits_or_passes_invalid_bytes);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
