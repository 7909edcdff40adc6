/* test_smokescreen.c: the real Stripe Smokescreen (built by
 * scripts/peers/smokescreen) as an allowlist egress proxy with the ACL
 * collector/decoders/smokescreen.yaml, driven with curl
 * (tests/integration/smokescreen.sh), its log read by sandtrail-collector
 * -X input.format=smokescreen. Every canonical line becomes one event: the
 * decision and its reason, a report-mode request that enforcing would have
 * refused, the task and run from the role (the client certificate's CN), the
 * trace from X-Smokescreen-Trace-ID, the bytes of a tunnel from its close
 * line; a token in the trace header is redacted. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "world.h"

#define TOKEN "ghp_Ab3dEf6hIj9kLm2nOp5qRs8tUv1wXy4zAB7C"
#define TRACE "4bf92f3577b34da6a3ce929d0e0e4736"
#define BODY_BYTES 5000 /* big.txt, fetched through each tunnel */

struct events {
    cJSON *ev[64];
    int n;
};

/* Parses the topic dump, one event a line; every line must be an object. */
static void events_parse(struct events *e, const char *dump)
{
    const char *p = dump;
    e->n = 0;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        ck_assert_int_lt(e->n, 64);
        e->ev[e->n] = cJSON_ParseWithLength(p, len);
        ck_assert_msg(cJSON_IsObject(e->ev[e->n]), "not an event: %.*s", (int)len, p);
        e->n++;
        p += len + (nl != NULL);
    }
}

static void events_fini(struct events *e)
{
    for (int i = 0; i < e->n; i++)
        cJSON_Delete(e->ev[i]);
}

/* The member at a dotted path ("attrs.host"); NULL when absent. */
static const cJSON *at(const cJSON *obj, const char *path)
{
    char key[64];
    while (obj && *path) {
        size_t n = strcspn(path, ".");
        ck_assert_uint_lt(n, sizeof(key));
        memcpy(key, path, n);
        key[n] = '\0';
        obj = cJSON_GetObjectItemCaseSensitive(obj, key);
        path += n + (path[n] == '.');
    }
    return obj;
}

static int is_str(const cJSON *ev, const char *path, const char *want)
{
    const cJSON *v = at(ev, path);
    return cJSON_IsString(v) && strcmp(v->valuestring, want) == 0;
}

static int is_num(const cJSON *ev, const char *path, double want)
{
    const cJSON *v = at(ev, path);
    return cJSON_IsNumber(v) && v->valuedouble == want;
}

/* How many events have the string want at path. */
static int n_str(const struct events *e, const char *path, const char *want)
{
    int n = 0;
    for (int i = 0; i < e->n; i++)
        n += is_str(e->ev[i], path, want);
    return n;
}

/* How many events are of the run task/run and have decision d. */
static int n_run(const struct events *e, const char *task, const char *run,
                 const char *d)
{
    int n = 0;
    for (int i = 0; i < e->n; i++)
        n += is_str(e->ev[i], "task_id", task) && is_str(e->ev[i], "run_id", run) &&
             (!d || is_str(e->ev[i], "decision", d));
    return n;
}

/* How many times needle occurs in text. */
static int occurrences(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle))
        n++;
    return n;
}

/* Every CANONICAL-PROXY-CN-CLOSE line of Smokescreen's log has its event:
 * the close of the same connection (attrs.conn_id), with the line's
 * bytes_in and bytes_out and the run of its role. Returns how many. */
static int check_closes(const char *log, const struct events *e)
{
    int n = 0;
    for (const char *p = strstr(log, "CANONICAL-PROXY-CN-CLOSE"); p;
         p = strstr(p + 1, "CANONICAL-PROXY-CN-CLOSE")) {
        const char *start = p, *end = strchr(p, '\n');
        while (start > log && start[-1] != '\n')
            start--;
        size_t len = end ? (size_t)(end - start) : strlen(start);
        cJSON *line = cJSON_ParseWithLength(start, len);
        ck_assert_msg(cJSON_IsObject(line), "close line is not JSON");
        const cJSON *id = at(line, "id"), *in = at(line, "bytes_in"),
                    *out = at(line, "bytes_out"), *role = at(line, "role");
        ck_assert(cJSON_IsString(id) && cJSON_IsNumber(in) && cJSON_IsNumber(out) &&
                  cJSON_IsString(role));
        /* the tunnel carried big.txt from the upstream */
        ck_assert_double_ge(in->valuedouble, BODY_BYTES);
        ck_assert_double_gt(out->valuedouble, 0);

        const cJSON *ev = NULL;
        for (int i = 0; i < e->n; i++)
            if (is_str(e->ev[i], "attrs.conn_id", id->valuestring) &&
                is_str(e->ev[i], "attrs.phase", "close")) {
                ck_assert_msg(!ev, "two close events for %s", id->valuestring);
                ev = e->ev[i];
            }
        ck_assert_msg(ev != NULL, "no close event for connection %s", id->valuestring);
        ck_assert(is_num(ev, "attrs.bytes_in", in->valuedouble));
        ck_assert(is_num(ev, "attrs.bytes_out", out->valuedouble));
        ck_assert(is_str(ev, "decision", "allow"));
        ck_assert(cJSON_IsNumber(at(ev, "attrs.duration_ms")));
        /* role "T-SM/run-sm" is task T-SM, run run-sm */
        const cJSON *task = at(ev, "task_id"), *run_id = at(ev, "run_id");
        char task_run[256];
        ck_assert(cJSON_IsString(task) && cJSON_IsString(run_id));
        snprintf(task_run, sizeof(task_run), "%s/%s", task->valuestring,
                 run_id->valuestring);
        ck_assert_str_eq(task_run, role->valuestring);
        cJSON_Delete(line);
        n++;
    }
    return n;
}

START_TEST(smokescreen_requests_become_events_with_decisions)
{
    struct world w;
    char dir[128], path[160];
    snprintf(dir, sizeof(dir), "/tmp/st_smokescreen_%d", (int)getpid());
    world_init(&w, "smokescreen");
    ck_assert_int_eq(run(&w, w.name, w.name,
                         SANDTRAIL_SOURCE_DIR
                         "/tests/integration/smokescreen.sh %s " TOKEN,
                         dir),
                     0);
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/collector/sandtrail-collector --input %s/smokescreen.log"
                             " -X input.format=smokescreen"
                             " -X input.source_name=smokescreen-egress"
                             " -X input.platform=smokescreen 2>/dev/null",
                         dir),
                     0);

    /* what Smokescreen wrote: eleven decisions (one per request), and the
     * close of each of the two tunnels it let through */
    snprintf(path, sizeof(path), "%s/smokescreen.log", dir);
    char *log = world_slurp(path);
    ck_assert_int_eq(occurrences(log, "\"msg\":\"CANONICAL-PROXY-DECISION\""), 12);
    ck_assert_int_eq(occurrences(log, "\"msg\":\"CANONICAL-PROXY-CN-CLOSE\""), 2);
    ck_assert_ptr_nonnull(strstr(log, TOKEN)); /* the token did reach the log */

    int n;
    char *dump = topic_dump(w.topic, &n);
    struct events e;
    events_parse(&e, dump);
    ck_assert_int_eq(n, 14); /* none lost, none made of other lines */
    ck_assert_int_eq(e.n, 14);
    ck_assert_int_eq(n_str(&e, "type", "request"), 14);
    ck_assert_int_eq(n_str(&e, "source.name", "smokescreen-egress"), 14);
    ck_assert_int_eq(n_str(&e, "source.platform", "smokescreen"), 14);

    /* decisions, and the 407 with which Smokescreen refuses */
    ck_assert_int_eq(n_str(&e, "decision", "allow"), 8);
    ck_assert_int_eq(n_str(&e, "decision", "deny"), 6);
    int refused = 0, with_407 = 0;
    for (int i = 0; i < e.n; i++) {
        refused += is_str(e.ev[i], "decision", "deny") &&
                   is_num(e.ev[i], "attrs.status", 407);
        with_407 += is_num(e.ev[i], "attrs.status", 407);
    }
    ck_assert_int_eq(refused, 6);
    ck_assert_int_eq(with_407, 6);
    ck_assert_int_eq(n_str(&e, "reason", "host matched allowed domain in rule"), 4);
    ck_assert_int_eq(n_str(&e, "reason", "rule has enforce policy"), 2);
    ck_assert_int_eq(n_str(&e, "reason", "host matched rule in global deny list"), 2);
    ck_assert_int_eq(n_str(&e, "reason", "rule has allow and report policy"), 2);
    ck_assert_int_eq(n_str(&e, "reason", "default rule policy used"), 1);
    ck_assert_int_eq(n_str(&e, "reason", "Client role cannot be determined"), 1);

    /* task and run from the role: the enforce role's seven events (four
     * allowed: two requests, a tunnel and its close), the report role's
     * four, the unlisted certificate, and the client without one */
    ck_assert_int_eq(n_run(&e, "T-SM", "run-sm", NULL), 7);
    ck_assert_int_eq(n_run(&e, "T-SM", "run-sm", "deny"), 3);
    ck_assert_int_eq(n_run(&e, "T-RP", "run-rp", NULL), 4);
    ck_assert_int_eq(n_run(&e, "T-RP", "run-rp", "deny"), 1);
    ck_assert_int_eq(n_run(&e, "T-XX", "run-xx", "deny"), 1);
    ck_assert_int_eq(n_run(&e, "unknown", "unknown", "deny"), 1);
    /* the run from the certificate's OU, the ACL role beside it */
    ck_assert_int_eq(n_run(&e, "T-OU", "run-ou", NULL), 1);
    ck_assert_int_eq(n_run(&e, "T-OU", "run-ou", "deny"), 0);
    ck_assert_int_eq(n_str(&e, "attrs.role", "T-SM/run-sm"), 1);

    /* report mode: let through, marked as what enforcing would refuse;
     * only there */
    int would_deny = 0;
    for (int i = 0; i < e.n; i++) {
        const cJSON *wd = at(e.ev[i], "attrs.would_deny");
        if (!wd)
            continue;
        ck_assert(cJSON_IsTrue(wd));
        ck_assert(is_str(e.ev[i], "decision", "allow"));
        ck_assert(is_str(e.ev[i], "task_id", "T-RP"));
        ck_assert(is_str(e.ev[i], "reason", "rule has allow and report policy"));
        would_deny++;
    }
    ck_assert_int_eq(would_deny, 2);

    /* targets: plain HTTP and CONNECT, the refused CONNECT's port */
    ck_assert_int_eq(n_str(&e, "attrs.method", "CONNECT"), 5);
    ck_assert_int_eq(n_str(&e, "attrs.host", "blocked.invalid"), 2);
    ck_assert_int_eq(n_str(&e, "attrs.host", "x.evil.example"), 2);
    int blocked_443 = 0;
    for (int i = 0; i < e.n; i++)
        blocked_443 += is_str(e.ev[i], "attrs.host", "blocked.invalid") &&
                       is_num(e.ev[i], "attrs.port", 443) &&
                       is_str(e.ev[i], "attrs.method", "CONNECT");
    ck_assert_int_eq(blocked_443, 1);

    /* bytes: the close line of each tunnel, nowhere else */
    ck_assert_int_eq(check_closes(log, &e), 2);
    ck_assert_int_eq(n_str(&e, "attrs.phase", "close"), 2);
    int with_bytes = 0;
    for (int i = 0; i < e.n; i++)
        with_bytes += at(e.ev[i], "attrs.bytes_in") != NULL;
    ck_assert_int_eq(with_bytes, 2);

    /* the trace from X-Smokescreen-Trace-ID; the token sent in its place
     * is redacted */
    ck_assert_int_eq(n_str(&e, "trace_id", TRACE), 13);
    int redacted_trace = 0;
    for (int i = 0; i < e.n; i++) {
        const cJSON *t = at(e.ev[i], "trace_id");
        redacted_trace += cJSON_IsString(t) &&
                          strncmp(t->valuestring, "[REDACTED:github_token:", 23) == 0;
    }
    ck_assert_int_eq(redacted_trace, 1);
    ck_assert_ptr_null(strstr(dump, TOKEN));
    ck_assert_ptr_nonnull(strstr(dump, "[REDACTED:github_token:"));

    events_fini(&e);
    free(dump);
    free(log);
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
    world_drop(&w);
}
END_TEST

int main(void)
{
    if (world_setup())
        return EXIT_FAILURE;
    Suite *s = suite_create("smokescreen");
    TCase *tc = tcase_create("real smokescreen");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, smokescreen_requests_become_events_with_decisions);
    suite_add_tcase(s, tc);
    return world_run(s);
}
