/* test_json.c: st_json_parse builds the tree cJSON would, strictly.
 *
 * The same documents parsed by st_json_parse and by cJSON print the same;
 * so does every line of the project's test data and shared samples that
 * both accept. What RFC 8259 refuses and cJSON takes (leading zeros, "+1",
 * ".5", lone surrogates) is refused with invalid_json. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

static char *printed(cJSON *doc)
{
    char *s = cJSON_PrintUnformatted(doc);
    ck_assert_ptr_nonnull(s);
    return s;
}

/* 1 when both parsers accept text and build the same tree; 0 when ours
 * refuses it (rej filled). */
static int same_as_cjson(const char *text, struct st_reject *rej)
{
    cJSON *ours = st_json_parse(text, strlen(text), rej);
    if (!ours)
        return 0;
    cJSON *theirs = cJSON_ParseWithLength(text, strlen(text));
    ck_assert_msg(theirs != NULL, "cJSON refuses what we took: %s", text);
    char *a = printed(ours), *b = printed(theirs);
    ck_assert_msg(strcmp(a, b) == 0, "%s\n ours:   %s\n cJSON:  %s", text, a, b);
    /* the list links are cJSON's too: adding to a parsed array works */
    cJSON *arr = cJSON_GetObjectItemCaseSensitive(ours, "arr");
    if (cJSON_IsArray(arr)) {
        int n = cJSON_GetArraySize(arr);
        cJSON_AddItemToArray(arr, cJSON_CreateNumber(7));
        ck_assert_int_eq(cJSON_GetArraySize(arr), n + 1);
        ck_assert_int_eq((int)cJSON_GetArrayItem(arr, n)->valuedouble, 7);
    }
    free(a);
    free(b);
    cJSON_Delete(ours);
    cJSON_Delete(theirs);
    return 1;
}

START_TEST(json_builds_the_tree_cjson_builds)
{
    static const char *docs[] = {
        "{}",
        "[]",
        " { \"a\" : 1 , \"b\" : [ true , false , null ] } ",
        "{\"s\":\"plain\",\"e\":\"q\\\"b\\\\s\\/n\\nt\\tr\\rb\\bf\\f\"}",
        "{\"u\":\"caf\\u00e9 \\u20ac \\ud83d\\udd12 \\u0041\"}",
        "{\"raw\":\"caf\xC3\xA9 \xF0\x9F\x94\x92\"}",
        "{\"n\":[0,-0,1,-1,42,123456789012345,1234567890123456,99999999999999999999]}",
        "{\"f\":[0.5,-0.25,1e3,1E-3,2.5e+10,-1.5E2,3.0,1e308,2147483648,-2147483649]}",
        "{\"arr\":[1,[2,[3,{\"x\":[4]}]],\"s\"],\"o\":{\"p\":{\"q\":{}}}}",
        "{\"\":\"empty key\",\"k\":\"\"}",
        "[{\"a\":1},{\"a\":2}]",
        "\"just a string\"",
        "17",
        "{\"x\":1}\n",
    };
    struct st_reject rej;
    for (size_t i = 0; i < sizeof(docs) / sizeof(docs[0]); i++)
        ck_assert_msg(same_as_cjson(docs[i], &rej), "refused %s: %s", docs[i], rej.msg);
}
END_TEST

/* Each byte a string may not hold as it is, and each it may, at every
 * place of strings of 1 to 20 bytes: the plain strings' fast scan (8 bytes
 * at a time) must stop at every one of them, whatever its place in a word,
 * and give the tree cJSON gives, or refuse what RFC 8259 refuses. */
START_TEST(json_strings_special_bytes_anywhere)
{
    static const struct {
        const char *bytes; /* inserted as they are in the JSON text */
        int ok;            /* 1: a valid string */
    } ins[] = {
        {"\\\"", 1}, {"\\\\", 1}, {"\\n", 1}, {"\\u00e9", 1}, {"\\ud83d\\udd12", 1},
        {"\xC3\xA9", 1}, {"\xF0\x9F\x94\x92", 1}, {"\x7F", 1}, {" ", 1}, {"~", 1},
        {"\x01", 0}, {"\x1F", 0}, {"\t", 0}, {"\xC3", 0}, {"\xFF", 0}, {"\x80", 0},
        {"\\x", 0}, {"\\q", 0},
    };
    char text[192];
    struct st_reject rej;
    for (size_t k = 0; k < sizeof(ins) / sizeof(ins[0]); k++)
        for (int len = 1; len <= 20; len++)
            for (int at = 0; at < len; at++) {
                char str[64];
                int n = 0;
                for (int i = 0; i < len; i++) {
                    if (i == at)
                        n += snprintf(str + n, sizeof(str) - (size_t)n, "%s", ins[k].bytes);
                    else
                        str[n++] = (char)('a' + i % 26);
                }
                str[n] = '\0';
                snprintf(text, sizeof(text), "{\"k%s\":\"%s\",\"z\":1}", str, str);
                if (ins[k].ok) {
                    ck_assert_msg(same_as_cjson(text, &rej), "refused %s: %s", text, rej.msg);
                } else {
                    cJSON *doc = st_json_parse(text, strlen(text), &rej);
                    ck_assert_msg(doc == NULL, "took %s", text);
                }
            }
}
END_TEST

START_TEST(json_valueint_is_clamped_like_cjson)
{
    struct st_reject rej;
    const char *t = "[3000000000,-3000000000,12.9,-12.9]";
    cJSON *doc = st_json_parse(t, strlen(t), &rej);
    ck_assert_ptr_nonnull(doc);
    ck_assert_int_eq(cJSON_GetArrayItem(doc, 0)->valueint, 2147483647);
    ck_assert_int_eq(cJSON_GetArrayItem(doc, 1)->valueint, -2147483647 - 1);
    ck_assert_int_eq(cJSON_GetArrayItem(doc, 2)->valueint, 12);
    ck_assert_int_eq(cJSON_GetArrayItem(doc, 3)->valueint, -12);
    cJSON_Delete(doc);
}
END_TEST

START_TEST(json_refuses_what_rfc8259_refuses)
{
    static const char *bad[] = {
        "{\"n\":01}",      "{\"n\":+1}",        "{\"n\":.5}",      "{\"n\":1.}",
        "{\"n\":1e}",      "{\"n\":-}",         "{\"n\":1.e5}",    "{\"a\":1,}",
        "[1,]",            "{\"a\" 1}",         "{a:1}",           "{\"a\":tru}",
        "{\"a\":nul}",     "{\"s\":\"\\x\"}",   "{\"s\":\"\\u12\"}", "{\"s\":\"\\udc00\"}",
        "{\"s\":\"\\ud800\"}", "{\"s\":\"\\ud800\\u0041\"}", "{\"s\":\"open}",
        "{\"a\":1",        "[",                 "",                "   ",
        "{\"a\":1}}",      "{\"a\":1} x",       "{\"a\":[1 2]}",   "{\"a\":'s'}",
    };
    struct st_reject rej;
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        rej.code = NULL;
        cJSON *doc = st_json_parse(bad[i], strlen(bad[i]), &rej);
        ck_assert_msg(doc == NULL, "took %s", bad[i]);
        ck_assert_msg(rej.code && strcmp(rej.code, ST_REASON_JSON) == 0, "%s: %s", bad[i],
                      rej.code ? rej.code : "(none)");
    }
}
END_TEST

/* The parser reads a valid line once; a line it refuses gets the reason of
 * its first fault, whatever comes first in the line. */
START_TEST(json_refusals_name_the_first_fault)
{
    static const struct {
        const char *text;
        size_t len;
        const char *reason;
    } cases[] = {
        {"{\"a\":\"x\0y\"}", 11, ST_REASON_NUL},
        {"{\"a\":\"x\\u0000y\"}", 0, ST_REASON_NUL},
        {"{\"a\":\"x\xffy\"}", 0, ST_REASON_UTF8},
        {"{\"k\xc3\":1}", 0, ST_REASON_UTF8},
        {"{\"a\":\"\xed\xa0\x80\"}", 0, ST_REASON_UTF8}, /* a surrogate */
        {"{\"a\":\"tab\there\"}", 0, ST_REASON_JSON},
        {"{\"a\":tru,\"b\":\"\xff\"}", 0, ST_REASON_UTF8}, /* the scan's fault */
        {"{\"a\":1} \0", 10, ST_REASON_NUL},
        {"{\"a\":1} \xff", 0, ST_REASON_UTF8},
    };
    struct st_reject rej;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t len = cases[i].len ? cases[i].len : strlen(cases[i].text);
        rej.code = NULL;
        ck_assert_ptr_null(st_json_parse(cases[i].text, len, &rej));
        ck_assert_msg(rej.code && !strcmp(rej.code, cases[i].reason), "case %zu: %s", i,
                      rej.code ? rej.code : "(none)");
    }
    /* 64 levels are taken, 65 are not */
    char deep[200];
    for (int levels = 64; levels <= 65; levels++) {
        int n = 0;
        for (int k = 0; k < levels; k++)
            deep[n++] = '[';
        for (int k = 0; k < levels; k++)
            deep[n++] = ']';
        cJSON *doc = st_json_parse(deep, (size_t)n, &rej);
        if (levels == 64) {
            ck_assert_ptr_nonnull(doc);
            cJSON_Delete(doc);
        } else {
            ck_assert_ptr_null(doc);
            ck_assert_str_eq(rej.code, ST_REASON_DEPTH);
        }
    }
}
END_TEST

/* Every line of the test data and of the shared samples (JSON ones) that
 * both parsers accept gives the same tree. */
START_TEST(json_test_data_parses_as_cjson_does)
{
    const char *cmd = "cat " SANDTRAIL_SOURCE_DIR "/tests/data/*/*.ndjson "
                      SANDTRAIL_SOURCE_DIR "/tests/data/samples/*.json* "
                      SANDTRAIL_SOURCE_DIR "/tests/data/samples/*.log "
                      SANDTRAIL_SOURCE_DIR "/schemas/examples/*.json 2>/dev/null";
    FILE *f = popen(cmd, "r");
    ck_assert_ptr_nonnull(f);
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int same = 0;
    struct st_reject rej;
    while ((n = getline(&line, &cap, f)) > 0) {
        if (line[0] != '{')
            continue;
        cJSON *theirs = cJSON_ParseWithLength(line, (size_t)n);
        if (!theirs)
            continue;
        cJSON_Delete(theirs);
        same += same_as_cjson(line, &rej);
    }
    free(line);
    pclose(f);
    ck_assert_int_gt(same, 100);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("json");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, json_builds_the_tree_cjson_builds);
    tcase_add_test(tc, json_strings_special_bytes_anywhere);
    tcase_add_test(tc, json_valueint_is_clamped_like_cjson);
    tcase_add_test(tc, json_refuses_what_rfc8259_refuses);
    tcase_add_test(tc, json_refusals_name_the_first_fault);
    tcase_add_test(tc, json_test_data_parses_as_cjson_does);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
