/* fuzz_onepass.c: the one-pass reader of native lines against the tree
 * path, on any line. Two executors of the same key and canaries, one with
 * input.single_pass on and one off, must agree on everything a line makes:
 * the outcome, the bytes produced, the key, the event's fields, the reason
 * and its message, and every rule's hit count (tests/unit/test_onepass.c
 * runs the same comparison over the test data). The analyzer's reader
 * (st_event_read) is held to st_event_parse the same way, on the line and
 * on the event produced from it. Any difference aborts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "accept.h"
#include "buf.h"
#include "collector.h"
#include "event.h"
#include "onepass.h"
#include "redact.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct st_accept *fast, *tree;

static struct st_accept *executor(int single_pass)
{
    struct st_collector_conf conf;
    struct st_buf key;
    char err[256];
    memset(&conf, 0, sizeof(conf));
    conf.format = "native";
    conf.fp_chars = 16;
    conf.single_pass = single_pass;
    st_buf_init(&key);
    st_buf_adds(&key, "fuzz-onepass-key-0123456789abcdef");
    struct st_accept *a = st_accept_new_canaries(
        &conf, NULL, &key, "CANARY-7f3e9a21-do-not-use\nCANARY-7f3a9c1e2b44d0\n", err,
        sizeof(err));
    st_buf_fini(&key);
    if (!a)
        abort();
    return a;
}

static int same(const char *a, const char *b)
{
    return a == b || (a && b && strcmp(a, b) == 0);
}

static struct st_onepass *reader;

static int same_json(const cJSON *a, const cJSON *b)
{
    return a == b || (a && b && cJSON_Compare(a, b, 1));
}

/* The analyzer's reader (st_event_read) against st_event_parse, on one
 * line: the same outcome, refusal and event; any difference aborts. */
static void compare_read(const char *line, size_t size)
{
    struct st_event a, b;
    struct st_reject ra = {0}, rb = {0};
    int xa = st_event_read(reader, &a, line, size, &ra);
    int xb = st_event_parse(&b, line, size, &rb);
    if (xa != xb)
        abort();
    if (xa) {
        if (!same(ra.code, rb.code) || strcmp(ra.msg, rb.msg))
            abort();
        return;
    }
    if (!same(a.event_id, b.event_id) || a.ts_us != b.ts_us ||
        a.source_kind != b.source_kind || !same(a.source_name, b.source_name) ||
        !same(a.source_platform, b.source_platform) || !same(a.task_id, b.task_id) ||
        !same(a.run_id, b.run_id) || !same(a.trace_id, b.trace_id) || a.type != b.type ||
        a.decision != b.decision || !same(a.reason, b.reason) || !same(a.content, b.content) ||
        a.may_mark != b.may_mark || a.run_hash != b.run_hash || !same(a.target, b.target) ||
        !same_json(a.attrs, b.attrs) || !same_json(a.identity, b.identity) ||
        (a.may_mark && !a.doc))
        abort();
    for (int i = 0; i < ST_EVENT_ATTRS_MAX; i++)
        if (!same_json(a.attr[i], b.attr[i]))
            abort();
    st_event_fini(&a);
    st_event_fini(&b);
}

/* One line through both executors; any difference aborts. */
static void compare(const char *line, size_t size)
{
    const char *of = NULL, *ot = NULL, *kf = NULL, *kt = NULL;
    size_t lf = 0, lt = 0;
    struct st_reject rf = {0}, rt = {0};

    int xf = st_accept_line(fast, line, size, &of, &lf, &kf, &rf);
    int xt = st_accept_line(tree, line, size, &ot, &lt, &kt, &rt);
    if (xf != xt)
        abort();
    compare_read(line, size);
    if (xf == 0) /* what the analyzer reads */
        compare_read(of, lf);
    if (xf == 0) {
        const struct st_event *a = st_accept_event(fast), *b = st_accept_event(tree);
        if (lf != lt || memcmp(of, ot, lf) || !same(kf, kt) ||
            !same(a->event_id, b->event_id) || a->ts_us != b->ts_us ||
            a->source_kind != b->source_kind || !same(a->source_name, b->source_name) ||
            !same(a->source_platform, b->source_platform) || !same(a->task_id, b->task_id) ||
            !same(a->run_id, b->run_id) || !same(a->trace_id, b->trace_id) ||
            a->type != b->type || a->decision != b->decision ||
            !same(a->reason, b->reason) || !same(a->content, b->content) ||
            st_accept_issued_len(fast) != st_accept_issued_len(tree))
            abort();
    } else if (xf < 0 && (!same(rf.code, rt.code) || strcmp(rf.msg, rt.msg))) {
        abort();
    }
    struct st_redactor *rf_ = st_accept_redactor(fast), *rt_ = st_accept_redactor(tree);
    for (size_t i = 0; i < st_redact_nrules(rf_); i++)
        if (st_redact_rule_hits(rf_, i) != st_redact_rule_hits(rt_, i))
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* the input as a line, and as members of a valid event's attrs: most
     * mutations of a whole line make it invalid, which the tree path
     * decides alone; inside attrs they keep reaching the one pass */
    static const char head[] =
        "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"e-1\",\"ts\":"
        "\"2026-11-29T10:00:00Z\",\"source\":{\"kind\":\"sandbox\",\"name\":\"sb\"},"
        "\"task_id\":\"T\",\"run_id\":\"r\",\"type\":\"exec\",\"attrs\":{\"command\":"
        "\"ls\",";
    struct st_buf wrapped;

    if (!fast) {
        fast = executor(1);
        tree = executor(0);
        reader = st_onepass_new(NULL);
    }
    compare((const char *)data, size);
    st_buf_init(&wrapped);
    st_buf_add(&wrapped, head, sizeof(head) - 1);
    st_buf_add(&wrapped, data, size);
    st_buf_add(&wrapped, "}}", 2);
    compare(wrapped.data, wrapped.len);
    st_buf_fini(&wrapped);
    return 0;
}
