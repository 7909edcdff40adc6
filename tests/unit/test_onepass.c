/* test_onepass.c: the one-pass reader of native lines (common/onepass.c)
 * against the tree path it replaces on the hot path.
 *
 * Two executors are built from the same configuration, key and canaries,
 * one with input.single_pass on and one with it off, and every line is
 * given to both: the test data, the shared samples, the schema's examples
 * and counter-examples, the benchmark's generator output, every string of
 * test_redact.c placed where a sender could put it, and generated tricky
 * lines (duplicates, deep nesting, escapes, surrogates, numbers at the
 * limits, forged markers and "redactions") with random mutations of all
 * of them. For each line the outcome, the bytes produced, the key, the
 * event's fields, the refusal's reason and message and every rule's hit
 * count must be the same; and the one-pass reader must decide most valid
 * lines itself, or the comparison would prove nothing. The analyzer's
 * reader (st_event_read) is compared the same way with st_event_parse, on
 * every line and on every event the collector produced from one. */
#include <check.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "accept.h"
#include "buf.h"
#include "collector.h"
#include "corpus.h"
#include "credset.h"
#include "event.h"
#include "onepass.h"
#include "quiet_marks.h"
#include "redact.h"

#define KEY "onepass-test-key-0123456789abcdef"
#define ISSUED "Zq8ISSUEDcred7Xk2mP4vT9wR3"

struct pair {
    struct st_accept *fast, *tree;
    struct st_credset *issued;
    size_t lines, accepted, decided; /* decided: accepted by the one pass */
    /* the analyzer's reader (st_event_read) against st_event_parse, on
     * every line and on every event the collector produced */
    struct st_onepass *reader;
    size_t read_lines, read_accepted, read_decided; /* decided: no tree made */
};

static struct st_accept *new_accept(int single_pass, const struct st_credset *issued)
{
    struct st_collector_conf conf;
    struct st_buf key;
    char err[256] = "", *canaries = NULL;
    size_t n;

    memset(&conf, 0, sizeof(conf));
    conf.format = "native";
    conf.fp_chars = 16;
    conf.single_pass = single_pass;
    st_buf_init(&key);
    st_buf_adds(&key, KEY);
    char *file = corpus_slurp(SANDTRAIL_SOURCE_DIR "/tests/data/canary/canaries.txt", &n);
    struct st_buf c;
    st_buf_init(&c);
    st_buf_adds(&c, "CANARY-7f3e9a21-do-not-use\n");
    if (file)
        st_buf_adds(&c, file);
    canaries = c.data;
    struct st_accept *a =
        st_accept_new_canaries(&conf, issued, &key, canaries, err, sizeof(err));
    ck_assert_msg(a != NULL, "st_accept_new_canaries: %s", err);
    free(file);
    st_buf_fini(&c);
    st_buf_fini(&key);
    return a;
}

static void pair_init(struct pair *p, int with_issued)
{
    memset(p, 0, sizeof(*p));
    if (with_issued) {
        char fp[ST_REDACT_FP_MAX + 1];
        p->issued = st_credset_new();
        p->fast = new_accept(1, p->issued);
        st_redact_fingerprint(st_accept_redactor(p->fast), ISSUED, strlen(ISSUED), fp,
                              sizeof(fp));
        ck_assert_int_eq(st_credset_add(p->issued, fp, strlen(ISSUED)), 1);
    } else {
        p->fast = new_accept(1, NULL);
    }
    p->tree = new_accept(0, p->issued);
    p->reader = st_onepass_new(NULL);
}

static void pair_fini(struct pair *p)
{
    st_accept_destroy(p->fast);
    st_accept_destroy(p->tree);
    st_credset_destroy(p->issued);
    st_onepass_destroy(p->reader);
}

static int same_str(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

/* One line through st_event_read and st_event_parse: the same outcome,
 * the same refusal, the same event (attrs and identity as trees, each
 * attribute the schema names, the target); a document only where a
 * detector needs one (may_mark). */
static void compare_read(struct pair *p, const char *line, size_t len)
{
    struct st_event a, b;
    struct st_reject ra = {NULL, ""}, rb = {NULL, ""};
    int xa = st_event_read(p->reader, &a, line, len, &ra);
    int xb = st_event_parse(&b, line, len, &rb);
    int shown = len > 300 ? 300 : (int)len;

    p->read_lines++;
    ck_assert_msg(xa == xb, "read %d, parse %d: %.*s", xa, xb, shown, line);
    if (xa) {
        ck_assert_msg(same_str(ra.code, rb.code) && strcmp(ra.msg, rb.msg) == 0,
                      "read refused %s \"%s\", parse %s \"%s\": %.*s", ra.code, ra.msg,
                      rb.code, rb.msg, shown, line);
        return;
    }
    ck_assert_msg(same_str(a.event_id, b.event_id) && a.ts_us == b.ts_us &&
                      a.source_kind == b.source_kind &&
                      same_str(a.source_name, b.source_name) &&
                      same_str(a.source_platform, b.source_platform) &&
                      same_str(a.task_id, b.task_id) && same_str(a.run_id, b.run_id) &&
                      same_str(a.trace_id, b.trace_id) && a.type == b.type &&
                      a.decision == b.decision && same_str(a.reason, b.reason) &&
                      same_str(a.content, b.content) && a.may_mark == b.may_mark &&
                      a.run_hash == b.run_hash && a.attrs_named == b.attrs_named &&
                      same_str(a.target, b.target),
                  "read's event fields differ: %.*s", shown, line);
    ck_assert_msg(corpus_same_json(a.attrs, b.attrs) && corpus_same_json(a.identity, b.identity),
                  "read's attrs or identity differ: %.*s", shown, line);
    for (int i = 0; i < ST_EVENT_ATTRS_MAX; i++)
        ck_assert_msg(corpus_same_json(a.attr[i], b.attr[i]), "read's attr[%d] differs: %.*s",
                      i, shown, line);
    /* a member the schema does not name is found as st_event_parse finds it */
    ck_assert(corpus_same_json(st_event_attr(&a, "x"), st_event_attr(&b, "x")));
    /* token_write walks the document of an event that may hold a marker */
    ck_assert_msg(!a.may_mark || a.doc != NULL, "read made no document, may_mark 1: %.*s",
                  shown, line);
    p->read_accepted++;
    if (!a.doc)
        p->read_decided++;
    st_event_fini(&a);
    st_event_fini(&b);
}

/* One line through both; any difference fails with the line quoted. */
static void compare(struct pair *p, const char *line, size_t len)
{
    const char *of = NULL, *ot = NULL, *kf = NULL, *kt = NULL;
    size_t lf = 0, lt = 0;
    struct st_reject rf = {NULL, ""}, rt = {NULL, ""};
    int xf = st_accept_line(p->fast, line, len, &of, &lf, &kf, &rf);
    int xt = st_accept_line(p->tree, line, len, &ot, &lt, &kt, &rt);
    int shown = len > 300 ? 300 : (int)len;

    p->lines++;
    ck_assert_msg(xf == xt, "outcome %d, tree %d: %.*s", xf, xt, shown, line);
    compare_read(p, line, len);
    if (xf == 0) /* what the analyzer reads */
        compare_read(p, of, lf);
    if (xf == 0) {
        const struct st_event *a = st_accept_event(p->fast), *b = st_accept_event(p->tree);
        ck_assert_msg(lf == lt && memcmp(of, ot, lf) == 0,
                      "output differs:\n one pass %.*s\n tree     %.*s\n line     %.*s",
                      (int)lf, of, (int)lt, ot, shown, line);
        ck_assert_msg(same_str(kf, kt), "key %s, tree %s", kf, kt);
        ck_assert_msg(same_str(a->event_id, b->event_id) && a->ts_us == b->ts_us &&
                          a->source_kind == b->source_kind &&
                          same_str(a->source_name, b->source_name) &&
                          same_str(a->source_platform, b->source_platform) &&
                          same_str(a->task_id, b->task_id) &&
                          same_str(a->run_id, b->run_id) &&
                          same_str(a->trace_id, b->trace_id) && a->type == b->type &&
                          a->decision == b->decision && same_str(a->reason, b->reason) &&
                          same_str(a->content, b->content),
                      "event fields differ: %.*s", shown, line);
        ck_assert_msg(st_accept_issued_len(p->fast) == st_accept_issued_len(p->tree),
                      "issued_len differs: %.*s", shown, line);
        p->accepted++;
        if (!a->doc)
            p->decided++;
    } else if (xf < 0) {
        ck_assert_msg(same_str(rf.code, rt.code) && strcmp(rf.msg, rt.msg) == 0,
                      "refusal %s \"%s\", tree %s \"%s\": %.*s", rf.code, rf.msg, rt.code,
                      rt.msg, shown, line);
    }
    struct st_redactor *rdf = st_accept_redactor(p->fast), *rdt = st_accept_redactor(p->tree);
    for (size_t i = 0; i < st_redact_nrules(rdf); i++)
        ck_assert_msg(st_redact_rule_hits(rdf, i) == st_redact_rule_hits(rdt, i),
                      "hits of %s: %llu, tree %llu after %.*s", st_redact_rule_name(rdf, i),
                      (unsigned long long)st_redact_rule_hits(rdf, i),
                      (unsigned long long)st_redact_rule_hits(rdt, i), shown, line);
}

static uint64_t rng = 0x9e3779b97f4a7c15u;
static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* The line, then some random mutations of it: a byte changed, removed or
 * repeated, a span cut out. */
static void compare_mutated(struct pair *p, const char *line, size_t len, int mutations)
{
    static const char bytes[] = "{}[]\",:\\u0 1e-.\"aZ\x7f\xc3\xa9\xed\xa0\x80\t";
    char *m = malloc(len + 64);
    compare(p, line, len);
    /* with a secret up front, so that the event is printed, not passed on:
     * every number and string of it then goes through the printer */
    const char *brace = memchr(line, '{', len < 8 ? len : 8);
    if (brace) {
        static const char secret[] = "\"zz\":\"ghp_0123456789abcdefghijABCDEFGHIJ012345\",";
        size_t head = (size_t)(brace - line) + 1;
        memcpy(m, line, head);
        memcpy(m + head, secret, sizeof(secret) - 1);
        memcpy(m + head + sizeof(secret) - 1, line + head, len - head);
        compare(p, m, len + sizeof(secret) - 1);
    }
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
        compare(p, m, n);
    }
    free(m);
}

/* corpus.h's callback and its argument. */
struct each {
    struct pair *p;
    int mutations;
};

static void compare_each(const char *text, size_t len, void *arg)
{
    const struct each *e = arg;
    compare_mutated(e->p, text, len, e->mutations);
}

static size_t compare_tree(struct pair *p, const char *dir, int mutations)
{
    struct each e = {p, mutations};
    return corpus_tree(dir, compare_each, &e);
}

/* The string literals of a C file, unescaped (adjacent ones not joined). */
static size_t c_strings(const char *path, char ***out)
{
    size_t len, n = 0;
    char *src = corpus_slurp(path, &len), **v = NULL;
    ck_assert_msg(src != NULL, "cannot read %s", path);
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '/' && i + 1 < len && src[i + 1] == '*') {
            char *end = strstr(src + i + 2, "*/");
            i = end ? (size_t)(end - src) + 1 : len;
            continue;
        }
        if (src[i] == '\'' && i + 2 < len) { /* '"' is not a string */
            i += src[i + 1] == '\\' ? 3 : 2;
            continue;
        }
        if (src[i] != '"')
            continue;
        struct st_buf s;
        st_buf_init(&s);
        st_buf_adds(&s, "");
        for (i++; i < len && src[i] != '"'; i++) {
            char c = src[i];
            if (c == '\\' && i + 1 < len) {
                c = src[++i];
                c = c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c == '0' ? ' ' : c;
            }
            st_buf_addc(&s, c);
        }
        v = realloc(v, (n + 1) * sizeof(*v));
        v[n++] = s.data;
    }
    free(src);
    *out = v;
    return n;
}

/* s as the body of a JSON string: escaped as needed, and in odd forms when
 * form says so (1: every other ASCII letter as \u00XX; 2: '/' as \/). */
static void json_body(struct st_buf *b, const char *s, int form)
{
    for (size_t i = 0; s[i]; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            st_buf_printf(b, "\\%c", c);
        else if (c < 0x20)
            st_buf_printf(b, "\\u%04x", c);
        else if (form == 1 && i % 2 && ((c | 32) >= 'a' && (c | 32) <= 'z'))
            st_buf_printf(b, "\\u%04X", c);
        else if (form == 2 && c == '/')
            st_buf_adds(b, "\\/");
        else
            st_buf_addc(b, (char)c);
    }
}

static const char *const HEAD =
    "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"e-1\",\"ts\":\"2026-11-29T10:00:00Z\","
    "\"source\":{\"kind\":\"sandbox\",\"name\":\"sb-1\"},\"task_id\":\"T-1\",\"run_id\":"
    "\"r-1\",\"type\":\"exec\"";

/* Lines that place s where a sender could: a value, a key, an array
 * element, deep inside attrs, in identifiers, in content. */
static void compare_placed(struct pair *p, const char *s)
{
    static const char *const fmt[] = {
        "%s,\"attrs\":{\"command\":\"@\"}}",
        "%s,\"attrs\":{\"command\":\"ls\",\"@\":1}}",
        "%s,\"attrs\":{\"command\":\"ls\",\"argv\":[\"a\",\"@\",{\"x\":[\"@\"]}]}}",
        "%s,\"content\":\"@\",\"attrs\":{\"command\":\"ls\",\"env\":{\"API_TOKEN\":\"@\","
        "\"headers\":{\"Authorization\":\"@\"}}}}",
        "%s,\"reason\":\"@\",\"attrs\":{\"command\":\"ls\",\"cwd\":\"@\"}}",
        "{\"attrs\":{\"command\":\"@\"},\"schema\":\"sandtrail.event.v1\",\"event_id\":\"@\","
        "\"ts\":\"2026-11-29T10:00:00Z\",\"source\":{\"kind\":\"sandbox\",\"name\":\"@\"},"
        "\"task_id\":\"@\",\"run_id\":\"r\",\"type\":\"exec\"}",
    };
    for (int form = 0; form < 3; form++) {
        struct st_buf body;
        st_buf_init(&body);
        st_buf_adds(&body, "");
        json_body(&body, s, form);
        for (size_t f = 0; f < sizeof(fmt) / sizeof(fmt[0]); f++) {
            struct st_buf line;
            st_buf_init(&line);
            for (const char *c = fmt[f]; *c; c++) {
                if (*c == '%' && c[1] == 's') {
                    st_buf_adds(&line, HEAD);
                    c++;
                } else if (*c == '@') {
                    st_buf_add(&line, body.data, body.len);
                } else {
                    st_buf_addc(&line, *c);
                }
            }
            compare_mutated(p, line.data, line.len, form == 0 ? 3 : 0);
            st_buf_fini(&line);
        }
        st_buf_fini(&body);
    }
}

static void compare_with(struct pair *p, const char *fmt, const char *v)
{
    struct st_buf line;
    int nth = 0;
    /* the first %s is the head, any other v */
    st_buf_init(&line);
    st_buf_adds(&line, "");
    for (const char *c = fmt; *c; c++) {
        if (c[0] == '%' && c[1] == 's') {
            st_buf_adds(&line, nth++ ? v : HEAD);
            c++;
        } else {
            st_buf_addc(&line, *c);
        }
    }
    compare_mutated(p, line.data, line.len, 2);
    st_buf_fini(&line);
}

/* Lines made to reach the cases the one-pass reader gives back, and the
 * edges of those it keeps. */
static void compare_tricky(struct pair *p)
{
    static const char *const numbers[] = {
        "0", "-0", "1", "-1", "0.0", "-0.0", "1.0", "1e2", "1E+2", "1e-2", "0.1", "123456789",
        "-123456789", "1234567890", "2147483647", "2147483648", "-2147483648", "-2147483649",
        "9007199254740992", "9007199254740993", "12345678901234567890", "1.7976931348623157e308",
        "1e308", "1e309", "-1e309", "4.9e-324", "1e-400", "0.30000000000000004",
        "3.141592653589793", "1.5", "100.25", "1e16383", "1e-16383", "1e-16384",
        "0.00000000000000000001", "01", "1.", ".5", "+1", "1e", "-", "--1", "0x10", "NaN",
        "Infinity", "1.0e+00"};
    static const char *const values[] = {
        "\"\"", "\"\\u00e9\\u4e2d\\ud83d\\ude00\"", "\"\\ud83d\"", "\"\\ude00\"",
        "\"\\ud83d\\u0041\"", "\"\\udbff\\udfff\"", "\"\\udb40\\udc00x\"",
        "\"\\ud800\\udc00\"", "\"\\uDBFF\\uDFFF\\u00E9\"", "\"\\udbff\"", "\"\\u0000\"", "\"\\u001f\\u007f\\b\\f\\n\\r\\t\"",
        "\"a\\/b\\\\c\\\"d\"", "\"\\x41\"", "\"\\u12\"", "\"\\uZZZZ\"", "\"é中😀\"",
        "\"\xc3\x28\"", "\"\xed\xa0\x80\"", "\"\xf4\x90\x80\x80\"", "\"\xc0\xaf\"",
        "\"\x7f\"", "\"tab\there\"", "true", "false", "null", "tru", "nul", "[]", "{}",
        "[1,2,[3,[4]]]", "[1,]", "{\"a\":1,}", "{\"a\" 1}", "[\"a\" \"b\"]",
        "\"[REDACTED:aws_access_key:0123456789abcdef]\"", "\"[REDACTED:nope:0123456789abcdef]\"",
        "\"[REDACTED:aws_access_key:0123456789ABCDEF]\"", "\"[REDACTED:canary:zz]\"",
        "\"" ISSUED "\"", "\"token=" ISSUED ".\"", "\"CANARY-7f3e9a21-do-not-use\"",
        "\"ghp_0123456789abcdefghijABCDEFGHIJ012345\"", "{\"credential\":\"x\"}"};
    static const char *const fmts[] = {
        "%s,\"attrs\":{\"command\":\"ls\",\"duration_ms\":%s}}",
        "%s,\"attrs\":{\"command\":\"ls\",\"exit_code\":%s}}",
        "%s,\"attrs\":{\"command\":%s}}",
        "%s,\"attrs\":{\"command\":\"ls\",\"extra\":%s}}",
        "%s,\"content\":%s,\"attrs\":{\"command\":\"ls\"}}",
        "%s,\"redactions\":%s,\"attrs\":{\"command\":\"ls\"}}",
        "%s,\"attrs\":{\"command\":\"ls\"},\"redactions\":%s}",
        "%s,\"identity\":{\"subject\":%s},\"attrs\":{\"command\":\"ls\"}}",
        "%s,\"identity\":{\"credential\":%s},\"attrs\":{\"command\":\"ls\"}}",
        "%s,\"attrs\":{\"command\":\"ls\",\"redactions\":%s,\"identity\":{\"credential\":%s}}}",
        "%s,\"identity\":{\"scopes\":[\"a\",%s]},\"attrs\":{\"command\":\"ls\"}}",
        "%s,\"trace_id\":%s,\"attrs\":{\"command\":\"ls\"}}",
        "%s,\"decision\":%s,\"attrs\":{\"command\":\"ls\"}}",
        "%s,\"attrs\":{\"command\":\"ls\",\"a\\u0062\":%s,\"ab\":1}}",
        " \t%s , \"attrs\" : { \"command\" : %s } } \r\n ",
    };
    for (size_t f = 0; f < sizeof(fmts) / sizeof(fmts[0]); f++) {
        for (size_t i = 0; i < sizeof(numbers) / sizeof(numbers[0]); i++)
            compare_with(p, fmts[f], numbers[i]);
        for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++)
            compare_with(p, fmts[f], values[i]);
    }

    /* every field of the head missing, null, of each type, empty */
    static const char *const fields[] = {"schema", "event_id", "ts", "source", "kind",
                                         "name", "task_id", "run_id", "type"};
    static const char *const repl[] = {"null", "1", "\"\"", "[]", "{}", "true",
                                       "\"x\"", "\"a\\u0001b\"", "\"broker\"",
                                       "\"token_use\""};
    for (size_t f = 0; f < sizeof(fields) / sizeof(fields[0]); f++) {
        char pat[64];
        snprintf(pat, sizeof(pat), "\"%s\":", fields[f]);
        const char *at = strstr(HEAD, pat);
        ck_assert(at);
        const char *v = at + strlen(pat), *ve = v;
        if (*v == '{')
            ve = strchr(v, '}') + 1;
        else
            ve = strchr(v + 1, '"') + 1;
        for (size_t r = 0; r <= sizeof(repl) / sizeof(repl[0]); r++) {
            struct st_buf line;
            st_buf_init(&line);
            if (r == sizeof(repl) / sizeof(repl[0])) { /* removed */
                const char *from = at[-1] == ',' ? at - 1 : at;
                st_buf_add(&line, HEAD, (size_t)(from - HEAD));
                st_buf_adds(&line, *ve == ',' && from == at ? ve + 1 : ve);
            } else {
                st_buf_add(&line, HEAD, (size_t)(v - HEAD));
                st_buf_adds(&line, repl[r]);
                st_buf_adds(&line, ve);
            }
            st_buf_adds(&line, ",\"attrs\":{\"command\":\"ls\"}}");
            compare(p, line.data, line.len);
            st_buf_fini(&line);
        }
    }

    /* duplicates: at the top, in source, in attrs, deep, among many keys */
    static const char *const dups[] = {
        "{\"schema\":\"a\",\"schema\":\"a\"}",
        "%s,\"type\":\"exec\",\"attrs\":{\"command\":\"ls\"}}",
        "%s,\"attrs\":{\"command\":\"ls\",\"command\":\"ls\"}}",
        "%s,\"attrs\":{\"command\":\"ls\",\"x\":{\"a\":{\"b\":1,\"b\":2}},\"x\":1}}",
        "%s,\"attrs\":{\"command\":\"ls\",\"x\":[{\"a\":1,\"a\":1}]}}",
        "%s,\"attrs\":{\"command\":\"ls\",\"\\u0061\":1,\"a\":2}}",
        "%s,\"attrs\":{\"command\":\"ls\",\"\":1,\"\":2}}",
        "%s,\"attrs\":{\"command\":\"ls\",\"\":1,\"x\":{\"\":[{\"\":3,\"\":4}]}}}",
        "%s,\"\":1,\"\":2,\"attrs\":{\"command\":\"ls\"}}",
        "%s,\"redactions\":1,\"redactions\":2,\"attrs\":{\"command\":\"ls\"}}",
        "%s,\"redactions\":{\"a\":1,\"a\":2},\"attrs\":{\"command\":\"ls\"}}",
        "%s,\"identity\":{\"credential\":\"" ISSUED "\"},\"attrs\":{\"command\":\"ls\"}}",
    };
    for (size_t i = 0; i < sizeof(dups) / sizeof(dups[0]); i++)
        compare_with(p, dups[i], "");

    /* many keys: with and without a duplicate, and one hidden past 16 */
    for (int n = 10; n <= 70; n += 6) {
        for (int dup = 0; dup < 3; dup++) {
            struct st_buf line;
            st_buf_init(&line);
            st_buf_printf(&line, "%s,\"attrs\":{\"command\":\"ls\"", HEAD);
            for (int k = 0; k < n; k++)
                st_buf_printf(&line, ",\"k%d\":%d", dup == 2 && k == n - 1 ? 3 : k, k);
            if (dup == 1)
                st_buf_adds(&line, ",\"k1\":0");
            st_buf_adds(&line, "}}");
            compare(p, line.data, line.len);
            st_buf_fini(&line);
        }
    }

    /* nesting around the limit of 64, in objects and arrays */
    for (int depth = 58; depth <= 68; depth++) {
        for (int arr = 0; arr < 2; arr++) {
            struct st_buf line;
            st_buf_init(&line);
            st_buf_printf(&line, "%s,\"attrs\":{\"command\":\"ls\",\"n\":", HEAD);
            for (int k = 2; k < depth; k++)
                st_buf_adds(&line, arr ? "[" : "{\"a\":");
            st_buf_adds(&line, "\"ghp_0123456789abcdefghijABCDEFGHIJ012345\"");
            for (int k = 2; k < depth; k++)
                st_buf_adds(&line, arr ? "]" : "}");
            st_buf_adds(&line, "}}");
            compare(p, line.data, line.len);
            st_buf_fini(&line);
        }
    }

    /* keys that paths write ["..."], and a key holding a secret */
#define GHP "ghp_0123456789abcdefghijABCDEFGHIJ012345"
    compare_with(p,
                 "%s,\"attrs\":{\"command\":\"ls\",\"a.b\":{\"[0]\":[\"%s\"],\"\":\"" GHP
                 "\",\"q\\\"\\\\\":\"" GHP "\"}}}",
                 GHP);
    compare_with(p,
                 "%s,\"attrs\":{\"command\":\"ls\",\"ghp_0123456789abcdefghijABCDEFGHIJ012345\":"
                 "\"%s\"}}",
                 "x");
    /* not objects, empty, blank */
    static const char *const odd[] = {"", " ", "\r", "\t \r", "[]", "1", "\"s\"", "null",
                                      "{", "}", "{}", "{} {}", "{}x", "\xef\xbb\xbf{}",
                                      "{\"a\":1}\x00", "{\"a\":\"\x00\"}"};
    for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++)
        compare(p, odd[i], strlen(odd[i]) + (i >= sizeof(odd) / sizeof(odd[0]) - 2));
}

static void compare_everything(struct pair *p)
{
    size_t files = compare_tree(p, SANDTRAIL_SOURCE_DIR "/tests/data", 2);
    ck_assert_msg(files > 20, "only %zu files under tests/data", files);
    compare_tree(p, SANDTRAIL_SOURCE_DIR "/../shared/samples", 2);
    compare_tree(p, SANDTRAIL_SOURCE_DIR "/../../shared/samples", 2);
    compare_tree(p, SANDTRAIL_SOURCE_DIR "/schemas", 4);
    compare_tree(p, SANDTRAIL_SOURCE_DIR "/fuzz", 2);

    /* the benchmark's own input (skipped without python3) */
    struct each gen = {p, 1};
    corpus_generated("python3 " SANDTRAIL_SOURCE_DIR "/scripts/bench/gen_mixed.py 3000 ",
                     " 7 2>/dev/null", compare_each, &gen);

    char **strs;
    size_t n = c_strings(SANDTRAIL_SOURCE_DIR "/tests/unit/test_redact.c", &strs);
    ck_assert_msg(n > 200, "only %zu strings in test_redact.c", n);
    for (size_t i = 0; i < n; i++) {
        compare_placed(p, strs[i]);
        free(strs[i]);
    }
    free(strs);
    compare_placed(p, ISSUED);
    compare_placed(p, "CANARY-7f3e9a21-do-not-use");
    compare_tricky(p);

    /* splice (redacted strings put into the line, no second pass) is
     * compared with the tree path like the rest: it must have run */
    size_t spliced = st_accept_spliced(p->fast);
    printf("onepass: %zu lines, %zu accepted, %zu of them by the one pass, %zu spliced\n",
           p->lines, p->accepted, p->decided, spliced);
    ck_assert_msg(spliced > 500, "only %zu events spliced", spliced);
    printf("st_event_read: %zu lines, %zu accepted, %zu of them without a tree\n",
           p->read_lines, p->read_accepted, p->read_decided);
    ck_assert_msg(p->read_decided * 2 > p->read_accepted,
                  "%zu accepted, only %zu by st_event_read without a tree", p->read_accepted,
                  p->read_decided);
    /* the collector's output is what the lean pass is for: most of the
     * lines read without a tree must have been its (each compared above) */
    size_t lean = st_onepass_lean_reads(p->reader);
    printf("st_event_read: %zu of them by the lean pass\n", lean);
    ck_assert_msg(lean * 2 > p->read_decided, "only %zu of %zu by the lean pass", lean,
                  p->read_decided);
    ck_assert_msg(p->accepted > 2000 && p->decided * 10 > p->accepted * 9,
                  "%zu lines, %zu accepted, only %zu by the one pass", p->lines,
                  p->accepted, p->decided);
}

/* The lean pass (st_onepass_read's first try) takes the collector's shape
 * and gives every other line back to the full pass: each line here is
 * compared with st_event_parse, and the lean pass must have taken it or
 * not, as said. */
START_TEST(onepass_lean_pass_takes_only_the_collectors_shape)
{
#define HEAD "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"e1\",\"ts\":\"2026-11-29T10:00:00Z\","
#define PROXY "\"source\":{\"kind\":\"proxy\",\"name\":\"squid\"},\"task_id\":\"t\",\"run_id\":\"r\",\"type\":\"request\","
    static const struct {
        const char *line;
        int lean; /* taken by the lean pass */
    } cases[] = {
        {HEAD PROXY "\"decision\":\"deny\",\"attrs\":{\"host\":\"a.example\",\"port\":443,\"x\":null,\"y\":true}}", 1},
        /* the same place, a key of the same length: not the last line's
         * host (required: refused), then an empty key and a second one */
        {HEAD PROXY "\"decision\":\"deny\",\"attrs\":{\"hosT\":\"a.example\",\"port\":443}}", 1},
        {HEAD PROXY "\"decision\":\"deny\",\"attrs\":{\"\":\"a\",\"host\":\"a.example\"}}", 1},
        {HEAD PROXY "\"decision\":\"deny\",\"attrs\":{\"\":\"a\",\"host\":\"b\",\"\":1}}", 0},
        /* a valid line's values with escapes: still the collector's shape */
        {HEAD PROXY "\"reason\":\"a\\\"b\\n\",\"attrs\":{\"host\":\"h\\u00e9\"}}", 1},
        {HEAD PROXY "\"attrs\":{\"host\":\"a\",\"port\":443.5}}", 1},            /* refused */
        {HEAD PROXY "\"attrs\":{\"host\":\"a\",\"host\":\"b\"}}", 0},          /* duplicate */
        {HEAD PROXY "\"attrs\":{\"host\":\"a\"},\"task_id\":\"u\"}", 0},       /* duplicate */
        {HEAD PROXY "\"attrs\":{\"host\":\"a\",\"h\":{\"x\":1}}}", 0},         /* nested */
        {HEAD PROXY "\"attrs\":{\"host\":\"a\",\"h\":[1]}}", 0},                 /* array */
        {HEAD PROXY "\"attrs\":{\"ho\\u0073t\":\"a\"}}", 0},                     /* escaped key */
        {HEAD PROXY "\"attrs\": {\"host\":\"a\"}}", 0},                            /* whitespace */
        {HEAD PROXY "\"attrs\":{\"host\":\"a\"}} ", 0},                            /* trailing */
        {HEAD PROXY "\"attrs\":{\"host\":\"a\"},\"redactions\":[]}", 0},         /* the sender's */
        {HEAD PROXY "\"x\":{\"y\":1},\"attrs\":{\"host\":\"a\"}}", 0},         /* other object */
        {HEAD "\"source\":{\"kind\":\"broker\",\"name\":\"vault\"},\"task_id\":\"t\",\"run_id\":\"r\","
              "\"type\":\"token_use\",\"identity\":{\"credential_id\":\"c1\",\"credential\":\"s\"}}", 0},
        {HEAD "\"source\":{\"kind\":\"broker\",\"name\":\"vault\"},\"task_id\":\"t\",\"run_id\":\"r\","
              "\"type\":\"token_use\",\"identity\":{\"credential_id\":\"c1\",\"scopes\":[\"a\"]}}", 0},
        {HEAD "\"source\":{\"kind\":\"broker\",\"name\":\"vault\"},\"task_id\":\"t\",\"run_id\":\"r\","
              "\"type\":\"token_use\",\"identity\":{\"credential_id\":\"c1\"}}", 1},
        /* an id with a control byte (0x7f): refused, by either pass */
        {HEAD "\"source\":{\"kind\":\"proxy\",\"name\":\"sq\x7fuid\"},\"task_id\":\"t\",\"run_id\":\"r\","
              "\"type\":\"request\",\"attrs\":{\"host\":\"a\"}}", 1},
    };
#undef HEAD
#undef PROXY
    struct pair p;
    pair_init(&p, 0);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        size_t before = st_onepass_lean_reads(p.reader);
        size_t accepted = p.read_accepted;
        compare_read(&p, cases[i].line, strlen(cases[i].line));
        size_t taken = st_onepass_lean_reads(p.reader) - before;
        /* a refused line is counted by neither (only what st_onepass_read
         * decides is): a lean line that is refused shows as not taken */
        int refused = p.read_accepted == accepted;
        ck_assert_msg(taken == (size_t)(cases[i].lean && !refused),
                      "case %zu: lean pass took %zu (expected %d, refused %d): %s", i, taken,
                      cases[i].lean, refused, cases[i].line);
    }
    ck_assert_msg(p.read_accepted >= 6, "only %zu of the cases accepted", p.read_accepted);
    pair_fini(&p);
}
END_TEST

START_TEST(onepass_same_as_tree_path)
{
    struct pair p;
    pair_init(&p, 0);
    compare_everything(&p);
    pair_fini(&p);
}
END_TEST

START_TEST(onepass_same_as_tree_path_with_issued_credentials)
{
    struct pair p;
    pair_init(&p, 1);
    compare_everything(&p);
    pair_fini(&p);
}
END_TEST

/* A credential issued after a value was read is found in it the next time:
 * the redactor's value cache (st_redact_value) remembers values of 16 bytes
 * or more only while no credential is issued. */
START_TEST(onepass_finds_a_credential_issued_after_its_value_was_seen)
{
    struct pair p;
    char fp[ST_REDACT_FP_MAX + 1];
    memset(&p, 0, sizeof(p));
    p.issued = st_credset_new(); /* empty: lineage on, nothing issued yet */
    p.fast = new_accept(1, p.issued);
    p.tree = new_accept(0, p.issued);
    struct st_redactor *r = st_accept_redactor(p.fast);
    size_t issued_rule = 0;
    while (strcmp(st_redact_rule_name(r, issued_rule), "issued") != 0)
        issued_rule++;

    compare_placed(&p, ISSUED); /* nothing to find yet, remembered */
    compare_placed(&p, "x" ISSUED "y");
    ck_assert_uint_eq(st_redact_rule_hits(r, issued_rule), 0);
    st_redact_fingerprint(r, ISSUED, strlen(ISSUED), fp, sizeof(fp));
    ck_assert_int_eq(st_credset_add(p.issued, fp, strlen(ISSUED)), 1);
    compare_placed(&p, ISSUED);
    compare_placed(&p, "x" ISSUED "y");
    ck_assert_uint_gt(st_redact_rule_hits(r, issued_rule), 0);
    pair_fini(&p);
}
END_TEST

/* The one pass decides a line with a secret itself (it does not hand every
 * redaction to the tree path), and what it produces is redacted. */
START_TEST(onepass_decides_a_redacted_line_itself)
{
    struct pair p;
    const char *line = "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"e-1\",\"ts\":"
                       "\"2026-11-29T10:00:00Z\",\"source\":{\"kind\":\"sandbox\",\"name\":"
                       "\"sb\"},\"task_id\":\"T\",\"run_id\":\"r\",\"type\":\"exec\",\"attrs\":"
                       "{\"command\":\"curl -H 'Authorization: token "
                       "ghp_0123456789abcdefghijABCDEFGHIJ012345'\"}}";
    pair_init(&p, 0);
    compare(&p, line, strlen(line));
    ck_assert_int_eq(p.decided, 1);
    const char *out, *key;
    size_t len;
    struct st_reject rej;
    ck_assert_int_eq(st_accept_line(p.fast, line, strlen(line), &out, &len, &key, &rej), 0);
    ck_assert_ptr_eq(st_accept_event(p.fast)->doc, NULL);
    const char *entry = "\"redactions\":[{\"path\":\"attrs.command\",\"rule\":";
    ck_assert(memmem(out, len, entry, strlen(entry)));
    ck_assert(!memmem(out, len, "ghp_0123", 8));
    pair_fini(&p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("onepass");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, onepass_decides_a_redacted_line_itself);
    tcase_add_test(tc, onepass_same_as_tree_path);
    tcase_add_test(tc, onepass_lean_pass_takes_only_the_collectors_shape);
    tcase_add_test(tc, onepass_same_as_tree_path_with_issued_credentials);
    tcase_add_test(tc, onepass_finds_a_credential_issued_after_its_value_was_seen);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
