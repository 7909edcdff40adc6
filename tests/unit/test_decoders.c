/* test_decoders.c: the decoders that map real programs' logs onto
 * sandtrail.event.v1 (collector/decoder.h).
 *
 * The fixtures in tests/data/samples are real output (squid, smokescreen,
 * srt: copies of the captures in the shared samples, see squid.conf for the
 * log format) except vault-audit.handwritten.jsonl, written by hand in the
 * shape of Vault's file audit device. Every line of every fixture must either
 * decode to an event that st_event_parse accepts or be skipped on purpose;
 * the counts of both are pinned, and so are the fields a detector relies on. */
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decoder.h"
#include "event.h"

#define SAMPLES SANDTRAIL_SOURCE_DIR "/tests/data/samples/"

static const struct st_decode_ctx ctx = {"test-source", "test-platform"};

/* ---- helpers ---- */

struct lines {
    char *buf;
    char **line;
    size_t *len;
    size_t n;
};

/* Splits a file into lines (without '\n'), bytes untouched. */
static void lines_read(struct lines *l, const char *path)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    l->buf = malloc((size_t)size + 1);
    ck_assert(fread(l->buf, 1, (size_t)size, f) == (size_t)size);
    fclose(f);
    l->buf[size] = '\0';
    l->line = calloc((size_t)size + 1, sizeof(*l->line));
    l->len = calloc((size_t)size + 1, sizeof(*l->len));
    l->n = 0;
    for (char *p = l->buf, *end = l->buf + size; p < end;) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        size_t n = nl ? (size_t)(nl - p) : (size_t)(end - p);
        l->line[l->n] = p;
        l->len[l->n++] = n;
        p += n + 1;
    }
}

static void lines_free(struct lines *l)
{
    free(l->buf);
    free(l->line);
    free(l->len);
}

/* Decodes with the decoder called name and checks the contract: 0 gives an
 * object that st_event_parse accepts (left in *ev for the caller, who
 * finis it); 1 gives nothing; -1 gives nothing and a reason. The native
 * decoder alone may return an object that is not an event (-2 here). */
static int decode_n(const char *name, const char *line, size_t len,
                    struct st_event *ev, struct st_reject *rej)
{
    const struct st_decoder_ops *ops = st_decoder_find(name);
    cJSON *out = (cJSON *)&out; /* must be reset by the decoder */
    struct st_reject r = {0};

    ck_assert_ptr_nonnull(ops);
    memset(ev, 0, sizeof(*ev));
    int rc = ops->decode(line, len, &ctx, &out, &r);
    if (rej)
        *rej = r;
    if (rc != 0) {
        ck_assert_msg(rc == 1 || rc == -1, "%s: decode returned %d", name, rc);
        ck_assert_ptr_null(out);
        if (rc == -1) {
            ck_assert_ptr_nonnull(r.code);
            ck_assert_msg(r.msg[0] != '\0', "%s: a rejection must say why", name);
        }
        return rc;
    }
    ck_assert_ptr_nonnull(out);
    char *text = cJSON_PrintUnformatted(out);
    cJSON_Delete(out);
    ck_assert_ptr_nonnull(text);
    struct st_reject er = {0};
    int ok = st_event_parse(ev, text, strlen(text), &er);
    if (ok != 0 && strcmp(name, "native") == 0) {
        /* native passes objects through: the caller's validation refuses a
         * non-event, as it would without a decoder */
        free(text);
        if (rej)
            *rej = er;
        return -2;
    }
    ck_assert_msg(ok == 0, "%s: decoded event rejected: %s: %s\n  line: %.*s\n  event: %s",
                  name, er.code, er.msg, (int)(len > 300 ? 300 : len), line, text);
    free(text);
    return 0;
}

static int decode_s(const char *name, const char *line, struct st_event *ev,
                    struct st_reject *rej)
{
    return decode_n(name, line, strlen(line), ev, rej);
}

/* Decodes line i (1-based) of a fixture, which must give an event. */
static void decode_sample(const char *name, const char *file, size_t i,
                          struct st_event *ev)
{
    struct lines l;
    lines_read(&l, file);
    ck_assert_uint_le(i, l.n);
    int rc = decode_n(name, l.line[i - 1], l.len[i - 1], ev, NULL);
    ck_assert_msg(rc == 0, "%s line %zu: want an event, got %d", file, i, rc);
    lines_free(&l);
}

static int sample_rc(const char *name, const char *file, size_t i)
{
    struct lines l;
    struct st_event ev;
    lines_read(&l, file);
    ck_assert_uint_le(i, l.n);
    int rc = decode_n(name, l.line[i - 1], l.len[i - 1], &ev, NULL);
    st_event_fini(&ev);
    lines_free(&l);
    return rc;
}

static const char *attr_str(const struct st_event *ev, const char *key)
{
    return st_json_str(ev->attrs, key);
}

static int64_t attr_int(const struct st_event *ev, const char *key)
{
    int64_t v = -12345;
    ck_assert_msg(st_json_int(ev->attrs, key, &v), "attrs.%s is not an integer", key);
    return v;
}

static int has_attr(const struct st_event *ev, const char *key)
{
    return cJSON_GetObjectItemCaseSensitive(ev->attrs, key) != NULL;
}

static const char *reject_code(const char *name, const char *line)
{
    static struct st_reject rej;
    struct st_event ev;
    int rc = decode_s(name, line, &ev, &rej);
    st_event_fini(&ev);
    ck_assert_msg(rc == -1, "%s: want a rejection of %s, got %d", name, line, rc);
    return rej.code;
}

struct fixture {
    const char *decoder, *file;
    int events, skipped;
};

static const struct fixture fixtures[] = {
    {"squid", SAMPLES "squid-access.sample.json", 15, 0},
    {"smokescreen", SAMPLES "smokescreen.sample.log", 8, 9},
    {"srt", SAMPLES "srt-violations.sample.jsonl", 8, 16},
    {"vault", SAMPLES "vault-audit.handwritten.jsonl", 8, 8},
    {"native", SANDTRAIL_SOURCE_DIR "/tests/data/demo.ndjson", 40, 0},
};

#define SQUID SAMPLES "squid-access.sample.json"
#define SMOKE SAMPLES "smokescreen.sample.log"
#define SRT SAMPLES "srt-violations.sample.jsonl"
#define VAULT SAMPLES "vault-audit.handwritten.jsonl"

/* ---- the registry ---- */

START_TEST(decoder_find_knows_every_format)
{
    const char *names[] = {"native", "squid", "smokescreen", "srt", "vault"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        const struct st_decoder_ops *ops = st_decoder_find(names[i]);
        ck_assert_ptr_nonnull(ops);
        ck_assert_str_eq(ops->name, names[i]);
        ck_assert_ptr_nonnull(ops->decode);
    }
    ck_assert_ptr_null(st_decoder_find("teleport"));
    ck_assert_ptr_null(st_decoder_find(""));
    ck_assert_ptr_null(st_decoder_find(NULL));
}
END_TEST

/* ---- every sample line: an event that validates, or a deliberate skip ---- */

START_TEST(decoder_sample_counts)
{
    const struct fixture *fx = &fixtures[_i];
    struct lines l;
    int events = 0, skipped = 0;

    lines_read(&l, fx->file);
    for (size_t i = 0; i < l.n; i++) {
        struct st_event ev;
        struct st_reject rej = {0};
        if (l.len[i] == 0)
            continue; /* the collector skips blank lines before decoding */
        int rc = decode_n(fx->decoder, l.line[i], l.len[i], &ev, &rej);
        if (rc == 0) {
            events++;
            if (strcmp(fx->decoder, "native") != 0) {
                ck_assert_str_eq(ev.source_name, "test-source");
                ck_assert_str_eq(ev.source_platform, "test-platform");
            }
        } else if (rc == 1) {
            skipped++;
        } else if (strcmp(fx->decoder, "native") != 0) {
            ck_abort_msg("%s line %zu rejected: %s: %s", fx->file, i + 1, rej.code,
                         rej.msg);
        }
        st_event_fini(&ev);
    }
    ck_assert_msg(events == fx->events && skipped == fx->skipped,
                  "%s: want %d events and %d skipped, got %d and %d", fx->file,
                  fx->events, fx->skipped, events, skipped);
    lines_free(&l);
}
END_TEST

START_TEST(decoder_native_rejects_the_demo_malformed_line)
{
    struct lines l;
    struct st_event ev;
    struct st_reject rej;
    lines_read(&l, SANDTRAIL_SOURCE_DIR "/tests/data/demo.ndjson");
    ck_assert_int_eq(decode_n("native", l.line[14], l.len[14], &ev, &rej), -1);
    ck_assert_str_eq(rej.code, ST_REASON_JSON);
    lines_free(&l);
}
END_TEST

/* ---- event ids ---- */

START_TEST(decoder_ids_are_deterministic_and_distinct)
{
    char **ids = NULL;
    size_t n = 0;

    for (size_t f = 0; f < sizeof(fixtures) / sizeof(fixtures[0]); f++) {
        struct lines l;
        lines_read(&l, fixtures[f].file);
        for (size_t i = 0; i < l.n; i++) {
            struct st_event a, b;
            if (l.len[i] == 0 ||
                decode_n(fixtures[f].decoder, l.line[i], l.len[i], &a, NULL) != 0)
                continue;
            ck_assert_int_eq(decode_n(fixtures[f].decoder, l.line[i], l.len[i], &b, NULL),
                             0);
            ck_assert_str_eq(a.event_id, b.event_id);
            for (size_t j = 0; j < n; j++)
                ck_assert_msg(strcmp(ids[j], a.event_id) != 0, "duplicate id %s",
                              a.event_id);
            ids = realloc(ids, (n + 1) * sizeof(*ids));
            ids[n++] = strdup(a.event_id);
            st_event_fini(&a);
            st_event_fini(&b);
        }
        lines_free(&l);
    }
    ck_assert_uint_eq(n, 15 + 8 + 8 + 8 + 40);
    for (size_t j = 0; j < n; j++)
        free(ids[j]);
    free(ids);
}
END_TEST

START_TEST(decoder_line_id_is_prefix_and_24_hex)
{
    struct st_event ev;
    decode_sample("squid", SQUID, 1, &ev);
    ck_assert_uint_eq(strlen(ev.event_id), strlen("squid-") + 24);
    ck_assert(strncmp(ev.event_id, "squid-", 6) == 0);
    ck_assert_uint_eq(strspn(ev.event_id + 6, "0123456789abcdef"), 24);
    st_event_fini(&ev);
}
END_TEST

/* ---- squid ---- */

START_TEST(decoder_squid_maps_a_denial)
{
    struct st_event ev;
    decode_sample("squid", SQUID, 3, &ev);
    ck_assert_int_eq(ev.type, ST_TYPE_REQUEST);
    ck_assert_int_eq(ev.source_kind, ST_SOURCE_PROXY);
    ck_assert_int_eq(ev.decision, ST_DECISION_DENY);
    ck_assert_str_eq(ev.reason, "not_in_allowlist");
    ck_assert_str_eq(attr_str(&ev, "host"), "blocked.invalid");
    ck_assert_int_eq(attr_int(&ev, "port"), 80);
    ck_assert_str_eq(attr_str(&ev, "path"), "/path?");
    ck_assert_str_eq(attr_str(&ev, "method"), "GET");
    ck_assert_int_eq(attr_int(&ev, "status"), 403);
    ck_assert_int_eq(attr_int(&ev, "bytes_out"), 161);
    ck_assert_int_eq(attr_int(&ev, "bytes_in"), 3441);
    ck_assert_str_eq(attr_str(&ev, "err_code"), "ERR_ACCESS_DENIED");
    ck_assert(!has_attr(&ev, "dst_ip")); /* server_ip "-" */
    ck_assert_str_eq(ev.task_id, "T-42");
    ck_assert_str_eq(ev.run_id, "unknown"); /* X-Run-Id "-", no user */
    ck_assert_ptr_null(ev.trace_id);
    ck_assert_str_eq(st_event_target(&ev), "blocked.invalid");
    st_event_fini(&ev);
}
END_TEST

START_TEST(decoder_squid_maps_an_allowed_request_with_trace)
{
    struct st_event ev;
    decode_sample("squid", SQUID, 1, &ev);
    ck_assert_int_eq(ev.decision, ST_DECISION_ALLOW);
    ck_assert_str_eq(ev.reason, "allowlist");
    /* "ts":1795933736.012 */
    ck_assert_int_eq(ev.ts_us, INT64_C(1795933736012000));
    ck_assert_str_eq(ev.task_id, "T-42");
    ck_assert_str_eq(ev.run_id, "run-7");
    ck_assert_str_eq(ev.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
    ck_assert_str_eq(attr_str(&ev, "host"), "127.0.0.1");
    ck_assert_int_eq(attr_int(&ev, "port"), 18080);
    ck_assert_str_eq(attr_str(&ev, "path"), "/");
    ck_assert_int_eq(attr_int(&ev, "status"), 200);
    ck_assert_str_eq(attr_str(&ev, "dst_ip"), "127.0.0.1");
    ck_assert_int_eq(attr_int(&ev, "duration_ms"), 2);
    st_event_fini(&ev);
}
END_TEST

START_TEST(decoder_squid_connect_takes_host_and_port_from_the_authority)
{
    struct st_event ev;
    decode_sample("squid", SQUID, 4, &ev);
    ck_assert_int_eq(ev.decision, ST_DECISION_DENY);
    ck_assert_str_eq(ev.reason, "blocklist");
    ck_assert_str_eq(attr_str(&ev, "method"), "CONNECT");
    ck_assert_str_eq(attr_str(&ev, "host"), "evil.example");
    ck_assert_int_eq(attr_int(&ev, "port"), 443);
    ck_assert(!has_attr(&ev, "path"));
    ck_assert_str_eq(ev.task_id, "unknown");
    ck_assert_str_eq(ev.run_id, "unknown");
    st_event_fini(&ev);
}
END_TEST

START_TEST(decoder_squid_upstream_failure_is_allowed_with_its_error)
{
    struct st_event ev;
    decode_sample("squid", SQUID, 9, &ev);
    ck_assert_int_eq(ev.decision, ST_DECISION_ALLOW);
    ck_assert_int_eq(attr_int(&ev, "status"), 503);
    ck_assert_str_eq(ev.reason, "allowlist");
    ck_assert_str_eq(attr_str(&ev, "err_code"), "ERR_CONNECT_FAIL");
    ck_assert_str_eq(attr_str(&ev, "err_detail"), "WITH_SERVER");
    st_event_fini(&ev);
}
END_TEST

START_TEST(decoder_squid_keeps_the_control_byte_line)
{
    struct st_event ev;
    decode_sample("squid", SQUID, 12, &ev);
    /* X-Task-Id "café\x01\x7f": the control bytes become U+FFFD */
    ck_assert_str_eq(ev.task_id, "caf\xC3\xA9\xEF\xBF\xBD\xEF\xBF\xBD");
    ck_assert_str_eq(ev.run_id, "a\"b\\c");
    ck_assert_str_eq(attr_str(&ev, "path"), "/has%20space\"quote");
    ck_assert_int_eq(attr_int(&ev, "status"), 404);
    st_event_fini(&ev);
}
END_TEST

#define SQ_HEAD "{\"src\":\"squid\",\"ts\":1795933736.5,\"tr_ms\":0,\"client\":\"127.0.0.1:1\","
#define SQ_TAIL ",\"err_detail\":\"-\",\"traceparent\":\"-\",\"ua\":\"curl\",\"xid\":\"9\"}"

START_TEST(decoder_squid_denied_without_note_and_user_fallback)
{
    struct st_event ev;
    ck_assert_int_eq(
        decode_s("squid",
                 SQ_HEAD "\"method\":\"GET\",\"url\":\"http://x.test/a\",\"host\":\"x.test\","
                         "\"port\":\"80\",\"status\":\"403\",\"squid_status\":\"TCP_DENIED\","
                         "\"server_ip\":\"-\",\"req_bytes\":10,\"resp_bytes\":20,"
                         "\"err_code\":\"ERR_ACCESS_DENIED\",\"decision\":\"-\",\"reason\":\"-\","
                         "\"user\":\"T-9/run-3\",\"task_id\":\"-\",\"run_id\":\"-\"" SQ_TAIL,
                 &ev, NULL),
        0);
    ck_assert_int_eq(ev.decision, ST_DECISION_DENY);
    ck_assert_str_eq(ev.reason, "ERR_ACCESS_DENIED");
    ck_assert_str_eq(ev.task_id, "T-9");
    ck_assert_str_eq(ev.run_id, "run-3");
    st_event_fini(&ev);

    /* a header task wins; the user's run is not borrowed for another task */
    ck_assert_int_eq(
        decode_s("squid",
                 SQ_HEAD "\"method\":\"GET\",\"url\":\"http://x.test/a\",\"host\":\"-\","
                         "\"port\":\"-\",\"status\":\"200\",\"squid_status\":\"TCP_MISS\","
                         "\"server_ip\":\"10.0.0.1\",\"req_bytes\":10,\"resp_bytes\":20,"
                         "\"err_code\":\"-\",\"decision\":\"allow\",\"reason\":\"allowlist\","
                         "\"user\":\"T-1/run-1\",\"task_id\":\"T-9\",\"run_id\":\"-\"" SQ_TAIL,
                 &ev, NULL),
        0);
    ck_assert_str_eq(ev.task_id, "T-9");
    ck_assert_str_eq(ev.run_id, "unknown");
    ck_assert_str_eq(attr_str(&ev, "host"), "x.test"); /* from the url */
    ck_assert(!has_attr(&ev, "port"));
    st_event_fini(&ev);
}
END_TEST

START_TEST(decoder_squid_repairs_bytes_json_forbids)
{
    struct st_event ev;
    /* invalid UTF-8 and a tab in headers, a NUL in the user agent, a
     * backslash before a letter, a bare "-" number, credentials in the url */
    static const char line[] =
        SQ_HEAD "\"method\":\"GET\",\"url\":\"http://u:pw@x.test:8080/p\",\"host\":\"-\","
                "\"port\":\"-\",\"status\":\"-\",\"squid_status\":\"TCP_MISS\","
                "\"server_ip\":\"-\",\"req_bytes\":-,\"resp_bytes\":0,\"err_code\":\"-\","
                "\"decision\":\"allow\",\"reason\":\"allowlist\",\"user\":\"-\","
                "\"task_id\":\"T-\xFF\x41\",\"run_id\":\"r\tun\",\"traceparent\":\"-\","
                "\"ua\":\"a\0b\\qc\",\"xid\":\"9\"}";
    struct st_reject rej;
    ck_assert_ptr_null(st_json_parse(line, sizeof(line) - 1, &rej)); /* as written */
    ck_assert_int_eq(decode_n("squid", line, sizeof(line) - 1, &ev, NULL), 0);
    ck_assert_str_eq(ev.task_id, "T-\xEF\xBF\xBD" "A");
    ck_assert_str_eq(ev.run_id, "r\xEF\xBF\xBDun");
    ck_assert_str_eq(attr_str(&ev, "host"), "x.test");
    ck_assert_int_eq(attr_int(&ev, "port"), 8080);
    ck_assert(!has_attr(&ev, "bytes_out"));
    ck_assert(!has_attr(&ev, "status"));
    ck_assert_int_eq(attr_int(&ev, "bytes_in"), 0);
    st_event_fini(&ev);
}
END_TEST

START_TEST(decoder_squid_rejects_what_is_not_a_json_object)
{
    ck_assert_str_eq(reject_code("squid", "hello"), ST_REASON_NOT_OBJECT);
    ck_assert_str_eq(reject_code("squid", "[1,2]"), ST_REASON_NOT_OBJECT);
    ck_assert_str_eq(reject_code("squid", "{\"ts\":1"), ST_REASON_JSON);
    ck_assert_str_eq(reject_code("squid", "{\"ts\":1}{}"), ST_REASON_JSON);
    ck_assert_str_eq(reject_code("squid", "{\"url\":\"http://a/\"}"), ST_REASON_MISSING);
    ck_assert_str_eq(reject_code("squid", "{\"ts\":\"now\",\"url\":\"http://a/\"}"),
                     ST_REASON_TYPE);
    /* not a finite double: refused by the parser, before the decoder */
    ck_assert_str_eq(reject_code("squid", "{\"ts\":1e400,\"url\":\"http://a/\"}"),
                     ST_REASON_NUMBER);
    ck_assert_str_eq(reject_code("squid", "{\"ts\":1e300,\"url\":\"http://a/\"}"),
                     ST_REASON_TIMESTAMP);
    ck_assert_str_eq(reject_code("squid", "{\"ts\":253402300800,\"url\":\"http://a/\"}"),
                     ST_REASON_TIMESTAMP);
    ck_assert_str_eq(reject_code("squid", "{\"ts\":-5,\"url\":\"http://a/\"}"),
                     ST_REASON_TIMESTAMP);
    ck_assert_str_eq(reject_code("squid", "{\"ts\":1,\"url\":7}"), ST_REASON_TYPE);
    ck_assert_str_eq(reject_code("squid", "{\"ts\":1,\"url\":\"/only-a-path\"}"),
                     ST_REASON_MISSING);
    ck_assert_str_eq(
        reject_code("squid", "{\"ts\":1,\"url\":\"http://a/\",\"req_bytes\":1e30}"),
        ST_REASON_VALUE);
    ck_assert_str_eq(
        reject_code("squid", "{\"ts\":1,\"url\":\"http://a/\",\"port\":\"99999\"}"),
        ST_REASON_VALUE);
    ck_assert_str_eq(reject_code("squid", "{\"ts\":1,\"url\":\"http://a/\",\"ts\":2}"),
                     ST_REASON_DUPLICATE);
}
END_TEST

/* ---- smokescreen ---- */

START_TEST(decoder_smokescreen_maps_a_denial)
{
    struct st_event ev;
    decode_sample("smokescreen", SMOKE, 8, &ev);
    ck_assert_int_eq(ev.type, ST_TYPE_REQUEST);
    ck_assert_int_eq(ev.decision, ST_DECISION_DENY);
    ck_assert_str_eq(ev.reason, "default rule policy used");
    ck_assert_str_eq(attr_str(&ev, "host"), "blocked.invalid");
    ck_assert(!has_attr(&ev, "port"));
    ck_assert_int_eq(attr_int(&ev, "status"), 407);
    ck_assert_str_eq(attr_str(&ev, "project"), "audit-research");
    ck_assert_ptr_null(ev.trace_id); /* "trace_id":"" */
    ck_assert_str_eq(ev.task_id, "unknown"); /* "role":"" */
    ck_assert_str_eq(ev.run_id, "unknown");
    st_event_fini(&ev);

    decode_sample("smokescreen", SMOKE, 9, &ev);
    ck_assert_int_eq(ev.decision, ST_DECISION_DENY);
    ck_assert_str_eq(attr_str(&ev, "method"), "CONNECT");
    ck_assert_str_eq(attr_str(&ev, "host"), "evil.example");
    ck_assert_int_eq(attr_int(&ev, "port"), 443);
    st_event_fini(&ev);
}
END_TEST

START_TEST(decoder_smokescreen_maps_an_allowed_request)
{
    struct st_event ev;
    decode_sample("smokescreen", SMOKE, 5, &ev);
    ck_assert_int_eq(ev.decision, ST_DECISION_ALLOW);
    ck_assert_str_eq(ev.trace_id, "trace-abc123");
    ck_assert_str_eq(attr_str(&ev, "host"), "127.0.0.1");
    ck_assert_int_eq(attr_int(&ev, "port"), 18080);
    ck_assert_str_eq(attr_str(&ev, "dst_ip"), "127.0.0.1");
    ck_assert(!has_attr(&ev, "status"));
    ck_assert(!has_attr(&ev, "would_deny"));
    /* start_time 06:31:02.369363944Z, to the microsecond */
    ck_assert_int_eq(ev.ts_us, INT64_C(1795933862369363));
    st_event_fini(&ev);

    /* allowed, then the name did not resolve: allow, 502, the error */
    decode_sample("smokescreen", SMOKE, 12, &ev);
    ck_assert_int_eq(ev.decision, ST_DECISION_ALLOW);
    ck_assert_int_eq(attr_int(&ev, "status"), 502);
    ck_assert_ptr_nonnull(strstr(attr_str(&ev, "error"), "connection refused"));
    st_event_fini(&ev);
}
END_TEST

START_TEST(decoder_smokescreen_close_is_its_own_event_of_the_connection)
{
    struct st_event dec, cls;
    decode_sample("smokescreen", SMOKE, 6, &dec);
    decode_sample("smokescreen", SMOKE, 7, &cls);
    ck_assert_str_eq(attr_str(&cls, "phase"), "close");
    ck_assert_int_eq(attr_int(&cls, "bytes_in"), 205);
    ck_assert_int_eq(attr_int(&cls, "bytes_out"), 79);
    ck_assert(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(cls.attrs, "duration_ms")));
    ck_assert_str_eq(attr_str(&cls, "conn_id"), attr_str(&dec, "conn_id"));
    ck_assert_str_ne(cls.event_id, dec.event_id);
    ck_assert_str_eq(cls.trace_id, "trace-def456");
    ck_assert(!has_attr(&dec, "phase"));
    st_event_fini(&dec);
    st_event_fini(&cls);
}
END_TEST

START_TEST(decoder_smokescreen_skips_what_is_not_an_event)
{
    ck_assert_int_eq(sample_rc("smokescreen", SMOKE, 1), 1);  /* warn: no statsd */
    ck_assert_int_eq(sample_rc("smokescreen", SMOKE, 2), 1);  /* Loading egress ACL */
    ck_assert_int_eq(sample_rc("smokescreen", SMOKE, 11), 1); /* Failed to resolve */
    ck_assert_int_eq(sample_rc("smokescreen", SMOKE, 17), 1); /* closing */
}
END_TEST

#define SMK_HEAD "{\"level\":\"info\",\"msg\":\"CANONICAL-PROXY-DECISION\",\"time\":\"2026-11-29T06:31:02Z\","

START_TEST(decoder_smokescreen_report_mode_role_and_odd_targets)
{
    struct st_event ev;
    ck_assert_int_eq(decode_s("smokescreen",
                              SMK_HEAD "\"allow\":true,\"enforce_would_deny\":true,"
                                       "\"decision_reason\":\"report mode\","
                                       "\"requested_host\":\"[::1]:8443\",\"role\":\"T-42/run-7\","
                                       "\"project\":\"p\",\"proxy_type\":\"connect\",\"id\":\"x\"}",
                              &ev, NULL),
                     0);
    ck_assert_int_eq(ev.decision, ST_DECISION_ALLOW);
    ck_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(ev.attrs, "would_deny")));
    ck_assert_str_eq(attr_str(&ev, "host"), "::1");
    ck_assert_int_eq(attr_int(&ev, "port"), 8443);
    ck_assert_str_eq(ev.task_id, "T-42");
    ck_assert_str_eq(ev.run_id, "run-7");
    ck_assert_int_eq(ev.ts_us, INT64_C(1795933862000000)); /* no start_time: time */
    st_event_fini(&ev);

    /* a certificate's OU names the run; the role (its CN, the ACL's key)
     * is kept beside it */
    ck_assert_int_eq(decode_s("smokescreen",
                              SMK_HEAD "\"allow\":true,\"requested_host\":\"a:443\","
                                       "\"role\":\"agents-enforce\","
                                       "\"inbound_remote_x509_ou\":\"T-9/run-3\"}",
                              &ev, NULL),
                     0);
    ck_assert_str_eq(ev.task_id, "T-9");
    ck_assert_str_eq(ev.run_id, "run-3");
    ck_assert_str_eq(attr_str(&ev, "role"), "agents-enforce");
    st_event_fini(&ev);
    /* an empty OU is no OU */
    ck_assert_int_eq(decode_s("smokescreen",
                              SMK_HEAD "\"allow\":true,\"requested_host\":\"a:443\","
                                       "\"role\":\"T-8/run-2\",\"inbound_remote_x509_ou\":\"\"}",
                              &ev, NULL),
                     0);
    ck_assert_str_eq(ev.task_id, "T-8");
    ck_assert_str_eq(ev.run_id, "run-2");
    ck_assert(!has_attr(&ev, "role"));
    st_event_fini(&ev);

    /* an odd target is kept as the client wrote it, not lost */
    ck_assert_int_eq(decode_s("smokescreen",
                              SMK_HEAD "\"allow\":false,\"requested_host\":\"a:99999\"}",
                              &ev, NULL),
                     0);
    ck_assert_str_eq(attr_str(&ev, "host"), "a:99999");
    ck_assert(!has_attr(&ev, "port"));
    st_event_fini(&ev);
}
END_TEST

START_TEST(decoder_smokescreen_rejects_malformed_canonical_lines)
{
    ck_assert_str_eq(reject_code("smokescreen", "{\"msg\":\"CANONICAL-PROXY-DECISION\""),
                     ST_REASON_JSON);
    ck_assert_str_eq(reject_code("smokescreen", "{\"level\":\"info\"}"), ST_REASON_MISSING);
    ck_assert_str_eq(reject_code("smokescreen", SMK_HEAD "\"allow\":\"yes\","
                                                         "\"requested_host\":\"a\"}"),
                     ST_REASON_TYPE);
    ck_assert_str_eq(reject_code("smokescreen", SMK_HEAD "\"allow\":false}"),
                     ST_REASON_MISSING);
    ck_assert_str_eq(reject_code("smokescreen", SMK_HEAD "\"allow\":false,"
                                                         "\"requested_host\":\"\"}"),
                     ST_REASON_VALUE);
    ck_assert_str_eq(reject_code("smokescreen",
                                 "{\"msg\":\"CANONICAL-PROXY-DECISION\",\"allow\":true,"
                                 "\"requested_host\":\"a\",\"time\":\"yesterday\"}"),
                     ST_REASON_TIMESTAMP);
    ck_assert_str_eq(reject_code("smokescreen",
                                 "{\"msg\":\"CANONICAL-PROXY-CN-CLOSE\",\"requested_host\":\"a\","
                                 "\"time\":\"2026-11-29T06:31:02Z\",\"bytes_in\":1e300}"),
                     ST_REASON_VALUE);
}
END_TEST

/* ---- srt ---- */

START_TEST(decoder_srt_maps_a_network_violation_to_exec)
{
    struct st_event ev;
    decode_sample("srt", SRT, 17, &ev);
    ck_assert_int_eq(ev.type, ST_TYPE_EXEC);
    ck_assert_int_eq(ev.source_kind, ST_SOURCE_SANDBOX);
    ck_assert_int_eq(ev.decision, ST_DECISION_DENY);
    ck_assert_str_eq(ev.task_id, "T-42");
    ck_assert_str_eq(ev.run_id, "unknown");
    ck_assert_str_eq(ev.reason, "deny http-request GET http://127.0.0.1:18080/secret/key "
                                "(path /secret is not allowed for this task)");
    ck_assert_str_eq(attr_str(&ev, "command_id"), "T-42/tool-2");
    ck_assert_str_eq(attr_str(&ev, "violation"), "http-request");
    ck_assert_str_eq(attr_str(&ev, "target"), "GET http://127.0.0.1:18080/secret/key");
    ck_assert(strncmp(attr_str(&ev, "command"), "curl -sS", 8) == 0);
    /* "2026-11-29T06:27:55.038Z" */
    ck_assert_int_eq(ev.ts_us, INT64_C(1795933675038000));
    st_event_fini(&ev);

    decode_sample("srt", SRT, 18, &ev);
    ck_assert_str_eq(attr_str(&ev, "violation"), "network-outbound");
    ck_assert_str_eq(attr_str(&ev, "target"), "evil.example:443");
    ck_assert_str_eq(attr_str(&ev, "command_id"), "T-42/tool-4");
    st_event_fini(&ev);
}
END_TEST

START_TEST(decoder_srt_maps_a_write_violation_to_file_write)
{
    struct st_event ev;
    decode_sample("srt", SRT, 20, &ev);
    ck_assert_int_eq(ev.type, ST_TYPE_FILE_WRITE);
    ck_assert_int_eq(ev.decision, ST_DECISION_DENY);
    ck_assert_str_eq(attr_str(&ev, "path"), "/etc/srt-denied");
    ck_assert_str_eq(attr_str(&ev, "violation"), "openat");
    ck_assert_str_eq(ev.reason, "deny openat /etc/srt-denied");
    ck_assert_str_eq(ev.task_id, "T-42");
    ck_assert_str_eq(st_event_target(&ev), "/etc/srt-denied");
    st_event_fini(&ev);

    decode_sample("srt", SRT, 21, &ev);
    ck_assert_str_eq(attr_str(&ev, "path"), "/tmp");
    ck_assert_str_eq(attr_str(&ev, "violation"), "mkdir");
    st_event_fini(&ev);
}
END_TEST

START_TEST(decoder_srt_skips_other_hooks)
{
    ck_assert_int_eq(sample_rc("srt", SRT, 1), 1);  /* filterRequest */
    ck_assert_int_eq(sample_rc("srt", SRT, 2), 1);  /* command-exit, no time */
    ck_assert_int_eq(sample_rc("srt", SRT, 3), 1);  /* annotated-stderr */
    ck_assert_int_eq(sample_rc("srt", SRT, 12), 1); /* askCallback */
}
END_TEST

START_TEST(decoder_srt_command_ids_and_command_exit)
{
    struct st_event ev;
    /* "T-1/run-5/tool-9": a run in the middle; a bare store record */
    ck_assert_int_eq(decode_s("srt",
                              "{\"line\":\"deny network-outbound a.test:80\","
                              "\"command\":\"curl a.test\",\"encodedCommand\":"
                              "\"VC0xL3J1bi01L3Rvb2wtOQ==\",\"timestamp\":"
                              "\"2026-11-29T06:27:55Z\"}",
                              &ev, NULL),
                     0);
    ck_assert_str_eq(ev.task_id, "T-1");
    ck_assert_str_eq(ev.run_id, "run-5");
    ck_assert_str_eq(attr_str(&ev, "target"), "a.test:80");
    st_event_fini(&ev);

    /* no encodedCommand: task and run unknown, the command is still there */
    ck_assert_int_eq(decode_s("srt",
                              "{\"hook\":\"violation-store\",\"line\":\"deny mkdir /x\","
                              "\"command\":\"mkdir /x\",\"timestamp\":\"2026-11-29T06:27:55Z\"}",
                              &ev, NULL),
                     0);
    ck_assert_str_eq(ev.task_id, "unknown");
    ck_assert_str_eq(attr_str(&ev, "command"), "mkdir /x");
    st_event_fini(&ev);

    ck_assert_int_eq(decode_s("srt",
                              "{\"hook\":\"command-exit\",\"commandId\":\"T-42/tool-9\","
                              "\"command\":\"make test\",\"exit_code\":3,"
                              "\"timestamp\":\"2026-11-29T06:27:55Z\"}",
                              &ev, NULL),
                     0);
    ck_assert_int_eq(ev.type, ST_TYPE_EXEC);
    ck_assert_int_eq(ev.decision, ST_DECISION_ALLOW);
    ck_assert_int_eq(attr_int(&ev, "exit_code"), 3);
    ck_assert_str_eq(attr_str(&ev, "command"), "make test");
    ck_assert_str_eq(ev.task_id, "T-42");
    st_event_fini(&ev);
}
END_TEST

START_TEST(decoder_srt_rejects_malformed_records)
{
    ck_assert_str_eq(reject_code("srt", "deny mkdir /x"), ST_REASON_JSON);
    ck_assert_str_eq(reject_code("srt", "[]"), ST_REASON_NOT_OBJECT);
    ck_assert_str_eq(reject_code("srt", "{\"harness\":\"srt\"}"), ST_REASON_MISSING);
    ck_assert_str_eq(reject_code("srt", "{\"hook\":5}"), ST_REASON_TYPE);
    ck_assert_str_eq(reject_code("srt", "{\"hook\":\"violation-store\",\"line\":\"deny x\"}"),
                     ST_REASON_MISSING);
    ck_assert_str_eq(reject_code("srt", "{\"hook\":\"violation-store\",\"line\":\"deny x\","
                                        "\"timestamp\":\"2026-11-29T06:27:55Z\","
                                        "\"encodedCommand\":\"not base64!\"}"),
                     ST_REASON_VALUE);
    ck_assert_str_eq(reject_code("srt", "{\"hook\":\"violation-store\",\"line\":\"deny x\","
                                        "\"timestamp\":\"2026-11-29T06:27:55Z\","
                                        "\"encodedCommand\":\"VC0=x\"}"),
                     ST_REASON_VALUE);
    /* valid RFC 3339, but the offset takes it past year 9999 */
    ck_assert_str_eq(reject_code("srt", "{\"hook\":\"violation-store\",\"line\":\"deny x\","
                                        "\"timestamp\":\"9999-12-31T23:59:59-01:00\"}"),
                     ST_REASON_TIMESTAMP);
    ck_assert_str_eq(reject_code("srt", "{\"hook\":\"command-exit\",\"exit_code\":1e20,"
                                        "\"timestamp\":\"2026-11-29T06:27:55Z\"}"),
                     ST_REASON_VALUE);
}
END_TEST

/* ---- vault ---- */

#define AGENT_ACC "hmac-sha256:b1ba2b141241495ba05cd0836ddee7c2b7dd2fd912f1a0776a380b0185e2007d"

START_TEST(decoder_vault_maps_token_issue_from_the_response)
{
    struct st_event ev;
    ck_assert_int_eq(sample_rc("vault", VAULT, 1), 1); /* the create request */
    decode_sample("vault", VAULT, 2, &ev);
    ck_assert_int_eq(ev.type, ST_TYPE_TOKEN_ISSUE);
    ck_assert_int_eq(ev.source_kind, ST_SOURCE_BROKER);
    ck_assert_str_eq(ev.event_id, "vault-0b6b3b57-7c1e-4d1e-9b0b-2f4d5e6a7b01-response");
    ck_assert_str_eq(st_json_str(ev.identity, "credential_id"), AGENT_ACC);
    ck_assert_str_eq(st_json_str(ev.identity, "subject"), "token-agent-T-42");
    const cJSON *scopes = cJSON_GetObjectItemCaseSensitive(ev.identity, "scopes");
    ck_assert_int_eq(cJSON_GetArraySize(scopes), 2);
    ck_assert_str_eq(cJSON_GetArrayItem(scopes, 0)->valuestring, "agent-t42-read");
    /* time 07:00:00.104567Z + token_ttl 900 s */
    ck_assert_str_eq(attr_str(&ev, "expires_at"), "2026-11-29T07:15:00.104567Z");
    ck_assert_str_eq(ev.task_id, "T-42"); /* the new token's metadata */
    ck_assert_str_eq(ev.run_id, "run-7");
    st_event_fini(&ev);

    /* an approle login: task and run from the audited request headers */
    ck_assert_int_eq(sample_rc("vault", VAULT, 9), 1);
    decode_sample("vault", VAULT, 10, &ev);
    ck_assert_int_eq(ev.type, ST_TYPE_TOKEN_ISSUE);
    ck_assert_str_eq(ev.task_id, "T-43");
    ck_assert_str_eq(ev.run_id, "run-2");
    ck_assert_str_eq(ev.trace_id, "0af7651916cd43dd8448eb211c80319c");
    st_event_fini(&ev);
}
END_TEST

/* An audit device with log_raw=true logs the new token itself: it is handed
 * over as identity.credential (the redactor makes it credential_fp, lineage
 * follows it); Vault's own HMAC of it is not. */
START_TEST(decoder_vault_hands_over_a_raw_client_token)
{
    struct st_event ev;
    decode_sample("vault", SANDTRAIL_SOURCE_DIR "/tests/data/lineage/vault-issue.jsonl", 2,
                  &ev);
    ck_assert_int_eq(ev.type, ST_TYPE_TOKEN_ISSUE);
    ck_assert_str_eq(st_json_str(ev.identity, "credential"),
                     "zq8Xv3Lr7TgW2mKp9YbN4cHd6JfQ1sVa5RtE0uGi");
    st_event_fini(&ev);
    decode_sample("vault", VAULT, 2, &ev);
    ck_assert_ptr_null(st_json_get(ev.identity, "credential"));
    st_event_fini(&ev);
}
END_TEST

START_TEST(decoder_vault_maps_token_use_and_deny)
{
    struct st_event ev;
    decode_sample("vault", VAULT, 3, &ev);
    ck_assert_int_eq(ev.type, ST_TYPE_TOKEN_USE);
    ck_assert_int_eq(ev.decision, ST_DECISION_ALLOW);
    ck_assert_str_eq(st_json_str(ev.identity, "credential_id"), AGENT_ACC);
    ck_assert_str_eq(attr_str(&ev, "operation"), "read secret/data/ci/npm-token");
    ck_assert_str_eq(ev.task_id, "T-42");
    ck_assert_str_eq(ev.run_id, "run-7");
    st_event_fini(&ev);
    ck_assert_int_eq(sample_rc("vault", VAULT, 4), 1); /* its response */

    decode_sample("vault", VAULT, 5, &ev);
    ck_assert_int_eq(ev.type, ST_TYPE_TOKEN_DENY);
    ck_assert_int_eq(ev.decision, ST_DECISION_DENY);
    ck_assert_str_eq(ev.reason, "permission denied");
    ck_assert_str_eq(attr_str(&ev, "requested_scope"), "sys/policies/acl/agent-admin");
    ck_assert_str_eq(attr_str(&ev, "operation"), "update");
    ck_assert_str_eq(st_event_target(&ev), "sys/policies/acl/agent-admin");
    ck_assert_str_eq(ev.task_id, "T-42");
    st_event_fini(&ev);
    /* the response repeats the denial: not a second event */
    ck_assert_int_eq(sample_rc("vault", VAULT, 6), 1);

    /* a renewal is a use; its response is not a new token */
    decode_sample("vault", VAULT, 11, &ev);
    ck_assert_int_eq(ev.type, ST_TYPE_TOKEN_USE);
    st_event_fini(&ev);
    ck_assert_int_eq(sample_rc("vault", VAULT, 12), 1);
}
END_TEST

START_TEST(decoder_vault_maps_token_revoke)
{
    struct st_event ev;
    decode_sample("vault", VAULT, 13, &ev); /* revoke-self */
    ck_assert_int_eq(ev.type, ST_TYPE_TOKEN_REVOKE);
    ck_assert_str_eq(st_json_str(ev.identity, "credential_id"), AGENT_ACC);
    st_event_fini(&ev);

    decode_sample("vault", VAULT, 15, &ev); /* revoke-accessor, by the broker */
    ck_assert_int_eq(ev.type, ST_TYPE_TOKEN_REVOKE);
    ck_assert_str_eq(
        st_json_str(ev.identity, "credential_id"),
        "hmac-sha256:92eca5f94f33a66d0100041b16e490a86e68337ff5ed8f24930956826b18c0cd");
    ck_assert_str_eq(ev.task_id, "unknown"); /* the broker's token has no task */
    st_event_fini(&ev);
}
END_TEST

#define VLT_REQ "\"request\":{\"id\":\"r1\",\"operation\":\"read\",\"path\":\"secret/data/x\"}"

START_TEST(decoder_vault_other_errors_and_malformed_entries)
{
    struct st_event ev;
    ck_assert_int_eq(decode_s("vault",
                              "{\"time\":\"2026-11-29T07:00:00Z\",\"type\":\"request\","
                              "\"auth\":{\"accessor\":\"hmac-sha256:aa\"}," VLT_REQ
                              ",\"error\":\"1 error occurred:\\n\\t* no handler for route\\n\\n\"}",
                              &ev, NULL),
                     0);
    ck_assert_int_eq(ev.type, ST_TYPE_TOKEN_USE);
    ck_assert_int_eq(ev.decision, ST_DECISION_ERROR);
    ck_assert_str_eq(ev.reason, "no handler for route");
    st_event_fini(&ev);

    /* unauthenticated request: no token used, no event */
    ck_assert_int_eq(decode_s("vault", "{\"time\":\"2026-11-29T07:00:00Z\",\"type\":\"request\","
                                       "\"auth\":{}," VLT_REQ "}",
                              &ev, NULL),
                     1);

    ck_assert_str_eq(reject_code("vault", "{\"time\":\"2026-11-29T07:00:00Z\","
                                          "\"type\":\"audit\"," VLT_REQ "}"),
                     ST_REASON_VALUE);
    ck_assert_str_eq(reject_code("vault", "{\"time\":\"2026-11-29T07:00:00Z\","
                                          "\"type\":\"request\"}"),
                     ST_REASON_MISSING);
    ck_assert_str_eq(reject_code("vault", "{\"time\":\"2026-11-29T07:00:00Z\","
                                          "\"type\":\"request\",\"request\":[]}"),
                     ST_REASON_TYPE);
    ck_assert_str_eq(reject_code("vault", "{\"time\":1,\"type\":\"request\"," VLT_REQ "}"),
                     ST_REASON_TYPE);
    ck_assert_str_eq(reject_code("vault",
                                 "{\"time\":\"2026-11-29T07:00:00Z\",\"type\":\"response\","
                                 "\"request\":{\"id\":\"r1\",\"path\":\"auth/token/create\"},"
                                 "\"response\":{\"auth\":{\"accessor\":\"a\","
                                 "\"token_ttl\":1e300}}}"),
                     ST_REASON_VALUE);
    ck_assert_str_eq(reject_code("vault",
                                 "{\"time\":\"2026-11-29T07:00:00Z\",\"type\":\"request\","
                                 "\"request\":{\"id\":\"r1\",\"path\":\"auth/token/revoke\"}}"),
                     ST_REASON_MISSING);
}
END_TEST

/* ---- every decoder against hostile input ---- */

START_TEST(decoder_rejects_empty_and_blank_lines)
{
    const char *names[] = {"native", "squid", "smokescreen", "srt", "vault"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        struct st_event ev;
        struct st_reject rej;
        ck_assert_int_eq(decode_n(names[i], "", 0, &ev, &rej), -1);
        ck_assert_str_eq(rej.code, ST_REASON_EMPTY);
        ck_assert_int_eq(decode_n(names[i], " \t ", 3, &ev, &rej), -1);
        ck_assert_str_eq(rej.code, ST_REASON_EMPTY);
        /* len is honoured: the bytes after it are not part of the line */
        ck_assert_int_eq(decode_n(names[i], "   {\"x\":1}", 2, &ev, &rej), -1);
        ck_assert_str_eq(rej.code, ST_REASON_EMPTY);
    }
    ck_assert_str_eq(reject_code("native", "{\"a\":\"\\u0000\"}"), ST_REASON_NUL);
    ck_assert_str_eq(reject_code("native", "42"), ST_REASON_NOT_OBJECT);
}
END_TEST

START_TEST(decoder_survives_deep_nesting_and_long_values)
{
    const char *names[] = {"native", "squid", "smokescreen", "srt", "vault"};
    size_t n = 100000;
    char *deep = malloc(2 * n + 1);
    memset(deep, '[', n);
    memset(deep + n, ']', n);
    deep[2 * n] = '\0';
    deep[0] = '{'; /* still not valid JSON, and far too deep */
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        struct st_event ev;
        ck_assert_int_eq(decode_n(names[i], deep, 2 * n, &ev, NULL), -1);
    }
    free(deep);

    /* a 300 kB task id: the event keeps a bounded, valid identifier */
    size_t big = 300000;
    char *line = malloc(big + 200);
    int k = snprintf(line, 200, "{\"hook\":\"command-exit\",\"timestamp\":"
                                "\"2026-11-29T06:27:55Z\",\"commandId\":\"");
    memset(line + k, 'x', big);
    strcpy(line + k + big, "/tool-1\"}");
    struct st_event ev, ev2;
    ck_assert_int_eq(decode_s("srt", line, &ev, NULL), 0);
    ck_assert_uint_le(strlen(ev.task_id), ST_DECODE_ID_MAX);
    ck_assert_ptr_nonnull(strchr(ev.task_id, '~'));
    /* a different long id stays different */
    line[k + 5] = 'y';
    ck_assert_int_eq(decode_s("srt", line, &ev2, NULL), 0);
    ck_assert_str_ne(ev.task_id, ev2.task_id);
    st_event_fini(&ev);
    st_event_fini(&ev2);
    free(line);
}
END_TEST

static uint64_t rng_state = 0x9E3779B97F4A7C15u;

static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Mutated sample lines, and every sample fed to every decoder: whatever
 * comes in, a decoder returns -1, 0 or 1, and what it returns as an event
 * validates (decode_n checks both). ASan and UBSan watch the rest. */
START_TEST(decoder_survives_mutated_and_foreign_lines)
{
    const char *names[] = {"native", "squid", "smokescreen", "srt", "vault"};
    for (size_t f = 0; f < sizeof(fixtures) / sizeof(fixtures[0]); f++) {
        struct lines l;
        lines_read(&l, fixtures[f].file);
        for (size_t i = 0; i < l.n; i++) {
            struct st_event ev;
            for (size_t d = 0; d < sizeof(names) / sizeof(names[0]); d++) {
                decode_n(names[d], l.line[i], l.len[i], &ev, NULL);
                st_event_fini(&ev);
            }
            if (l.len[i] == 0)
                continue;
            char *m = malloc(l.len[i] + 16);
            for (int round = 0; round < 150; round++) {
                size_t len = l.len[i];
                memcpy(m, l.line[i], len);
                int edits = 1 + (int)(rng() % 4);
                for (int e = 0; e < edits; e++) {
                    size_t at = (size_t)(rng() % len);
                    switch (rng() % 4) {
                    case 0: m[at] = (char)(rng() & 0xff); break;
                    case 1: len = at > 0 ? at : 1; break;
                    case 2: m[at] = "\"\\{}[]:,-0\x01\xff "[rng() % 14]; break;
                    default: m[at] = (char)('0' + rng() % 10); break;
                    }
                }
                decode_n(fixtures[f].decoder, m, len, &ev, NULL);
                st_event_fini(&ev);
            }
            free(m);
        }
        lines_free(&l);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("decoders");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, decoder_find_knows_every_format);
    tcase_add_loop_test(tc, decoder_sample_counts, 0,
                        (int)(sizeof(fixtures) / sizeof(fixtures[0])));
    tcase_add_test(tc, decoder_native_rejects_the_demo_malformed_line);
    tcase_add_test(tc, decoder_ids_are_deterministic_and_distinct);
    tcase_add_test(tc, decoder_line_id_is_prefix_and_24_hex);
    tcase_add_test(tc, decoder_squid_maps_a_denial);
    tcase_add_test(tc, decoder_squid_maps_an_allowed_request_with_trace);
    tcase_add_test(tc, decoder_squid_connect_takes_host_and_port_from_the_authority);
    tcase_add_test(tc, decoder_squid_upstream_failure_is_allowed_with_its_error);
    tcase_add_test(tc, decoder_squid_keeps_the_control_byte_line);
    tcase_add_test(tc, decoder_squid_denied_without_note_and_user_fallback);
    tcase_add_test(tc, decoder_squid_repairs_bytes_json_forbids);
    tcase_add_test(tc, decoder_squid_rejects_what_is_not_a_json_object);
    tcase_add_test(tc, decoder_smokescreen_maps_a_denial);
    tcase_add_test(tc, decoder_smokescreen_maps_an_allowed_request);
    tcase_add_test(tc, decoder_smokescreen_close_is_its_own_event_of_the_connection);
    tcase_add_test(tc, decoder_smokescreen_skips_what_is_not_an_event);
    tcase_add_test(tc, decoder_smokescreen_report_mode_role_and_odd_targets);
    tcase_add_test(tc, decoder_smokescreen_rejects_malformed_canonical_lines);
    tcase_add_test(tc, decoder_srt_maps_a_network_violation_to_exec);
    tcase_add_test(tc, decoder_srt_maps_a_write_violation_to_file_write);
    tcase_add_test(tc, decoder_srt_skips_other_hooks);
    tcase_add_test(tc, decoder_srt_command_ids_and_command_exit);
    tcase_add_test(tc, decoder_srt_rejects_malformed_records);
    tcase_add_test(tc, decoder_vault_maps_token_issue_from_the_response);
    tcase_add_test(tc, decoder_vault_hands_over_a_raw_client_token);
    tcase_add_test(tc, decoder_vault_maps_token_use_and_deny);
    tcase_add_test(tc, decoder_vault_maps_token_revoke);
    tcase_add_test(tc, decoder_vault_other_errors_and_malformed_entries);
    tcase_add_test(tc, decoder_rejects_empty_and_blank_lines);
    tcase_add_test(tc, decoder_survives_deep_nesting_and_long_values);
    tcase_add_test(tc, decoder_survives_mutated_and_foreign_lines);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
