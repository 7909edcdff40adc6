/* test_detect_workers.c: detection workers (detect.workers, analyzer/
 * workers.c) change nothing but the speed, against the real Kafka,
 * PostgreSQL and Redis.
 *
 * One stream over four partitions -- every detector scenario of
 * tests/data/scenarios, forty more runs with a denial burst each, a
 * credential issued in one partition and used (and its fingerprint written)
 * in another, allowlist drift across platforms whose requests sit in
 * different partitions -- is drained by one analyzer with detect.workers=1
 * and by another with detect.workers=3 (so that worker 0 gets two of the
 * partitions), in two drains each (the second extends what the first
 * left in Redis). Both must give the same findings, evidence and Redis
 * state; the three workers must each have detected events.
 *
 * Among the bursts are messages of every cheap refusal (not JSON, a
 * duplicate key, not an object, a wrong schema, a bad time, a missing
 * field, an unknown type, invalid UTF-8) and events stamped hours after
 * their receive time (skewed: stored as they came, detected on the
 * receive time), in every partition. Batches of 64 messages and
 * detect.parse_split_min=40, so that with three workers the parse of a
 * full batch runs on the workers (analyzer/workers.c, st_workers_parse)
 * and that of the short last batches on the main thread: both must
 * store the same rows, dead-letter the same messages with the same
 * reasons in each partition's order, and find the same. Every message has
 * one receive time (the Kafka timestamp), so that what the skewed events
 * leave does not depend on when each analyzer's copy was produced.
 * The analyzer with one worker detects each batch on a thread of its own
 * while it parses the next (detect.overlap=1), the one with three detects
 * each batch before it polls the next (detect.overlap=0, which the split
 * parse needs): the two orders must give the same as well.
 * Each drain ends with state.write_final_trims=1: otherwise a small run's
 * string may carry its last trim (runblob version 2) or hold it applied,
 * as the batch boundaries fell, and the two would load the same but differ
 * in bytes (what a load of a carried trim gives: the exactly-once and
 * runwin suites). */
#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <librdkafka/rdkafka.h>

#include <cjson/cJSON.h>

#include "buf.h"
#include "kafka.h"
#include "rpipe.h"
#include "runblob.h"
#include "world.h"

#define ANALYZER BIN "/analyzer/sandtrail-analyzer"
#define SCENARIOS SANDTRAIL_SOURCE_DIR "/tests/data/scenarios"
#define PARTS 4
/* every message's Kafka timestamp: 2026-11-30T00:00:00Z */
#define RECV_MS INT64_C(1795996800000)

static const char *q_findings =
    "SELECT finding_id, detector, severity, task_id, run_id, first_seen, last_seen,"
    " event_count, late_event_count, evidence::text, summary FROM findings ORDER BY 1";
static const char *q_events =
    "SELECT source_name, event_id, ts, task_id, run_id, type, decision, target, body::text,"
    " kafka_partition, kafka_offset, skewed FROM events ORDER BY 1, 2, 3";
static const char *q_evidence =
    "SELECT finding_id, source_name, event_id, late FROM finding_events ORDER BY 1, 2, 3";

/* The partition of a task: the sum of its bytes, so that tasks differing in
 * their last character (T-AL0, T-AL1, T-AL2; T-XA, T-XB) land apart. */
static int partition_of(const char *task)
{
    unsigned sum = 0;
    for (const unsigned char *p = (const unsigned char *)task; *p; p++)
        sum += *p;
    return (int)(sum % PARTS);
}

static int cmp_line(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The value of "task_id" in an event line. */
static void task_of(const char *line, char *out, size_t outsz)
{
    const char *p = strstr(line, "\"task_id\":\"");
    ck_assert_ptr_nonnull(p);
    p += strlen("\"task_id\":\"");
    size_t n = strcspn(p, "\"");
    ck_assert_uint_lt(n, outsz);
    memcpy(out, p, n);
    out[n] = '\0';
}

#define REFUSAL_KINDS 8

/* A message the analyzer refuses, of kind t % REFUSAL_KINDS, in T-G<t>'s
 * partition (task_of finds its "task_id" even where it is not JSON; @
 * stands for t). */
static void add_refused(struct st_buf *b, int t)
{
    static const char *const fmt[REFUSAL_KINDS] = {
        "not JSON \"task_id\":\"T-G@\"\n",
        "{\"schema\":\"sandtrail.event.v1\",\"task_id\":\"T-G@\",\"task_id\":\"x\"}\n",
        "[{\"task_id\":\"T-G@\"}]\n",
        "{\"schema\":\"sandtrail.event.v0\",\"event_id\":\"bad\",\"task_id\":\"T-G@\"}\n",
        "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"bad\",\"ts\":\"yesterday\","
        "\"task_id\":\"T-G@\"}\n",
        "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"bad\","
        "\"ts\":\"2026-11-29T14:00:00Z\",\"task_id\":\"T-G@\"}\n",
        "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"bad\","
        "\"ts\":\"2026-11-29T14:00:00Z\",\"source\":{\"kind\":\"proxy\",\"name\":\"squid\"},"
        "\"task_id\":\"T-G@\",\"run_id\":\"r\",\"type\":\"teleport\"}\n",
        "{\"schema\":\"sandtrail.event.v1\",\"task_id\":\"T-G@\",\"x\":\"\xff\"}\n",
    };
    const char *f = fmt[t % REFUSAL_KINDS], *at = strchr(f, '@');
    st_buf_add(b, f, (size_t)(at - f));
    st_buf_printf(b, "%d", t);
    st_buf_adds(b, at + 1);
}

/* The dead-letter records of a topic, one line each (source partition,
 * offset, reason, error, raw), sorted by partition and offset: each
 * partition's records in the order its messages came. *n gets how many. */
static char *dlq_lines(const char *topic, int *n)
{
    char *dump = topic_dump(topic, n);
    char **lines = calloc((size_t)*n + 1, sizeof(*lines));
    int k = 0;
    for (char *l = dump; *l && k < *n;) {
        size_t len = strcspn(l, "\n");
        cJSON *o = cJSON_ParseWithLength(l, len);
        ck_assert_ptr_nonnull(o);
        const char *f[] = {"reason", "error", "raw"};
        const char *v[3];
        for (int i = 0; i < 3; i++) {
            const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, f[i]);
            ck_assert_msg(cJSON_IsString(j), "no %s in %.*s", f[i], (int)len, l);
            v[i] = j->valuestring;
        }
        ck_assert_int_gt(asprintf(&lines[k++], "%d %012.0f %s | %s | %s\n",
                                  cJSON_GetObjectItem(o, "partition")->valueint,
                                  cJSON_GetObjectItem(o, "offset")->valuedouble, v[0],
                                  v[1], v[2]),
                         0);
        cJSON_Delete(o);
        l += len + (l[len] == '\n');
    }
    qsort(lines, (size_t)k, sizeof(*lines), cmp_line);
    struct st_buf b;
    st_buf_init(&b);
    st_buf_adds(&b, "");
    for (int i = 0; i < k; i++) {
        st_buf_adds(&b, lines[i]);
        free(lines[i]);
    }
    free(lines);
    free(dump);
    return b.data;
}

/* The stream, one event a line: first what is drained before the rest
 * (the issue of a credential that the second part uses: across partitions
 * the order of a batch's events depends on Kafka's fetches, so a use in
 * the same drain could come first), then the rest. */
static void build_stream(struct st_buf *s, struct st_buf *later)
{
    DIR *d = opendir(SCENARIOS);
    struct dirent *de;
    char path[512];
    ck_assert_ptr_nonnull(d);
    while ((de = readdir(d))) {
        size_t len = strlen(de->d_name);
        if (len < 7 || strcmp(de->d_name + len - 7, ".ndjson"))
            continue;
        snprintf(path, sizeof(path), "%s/%s", SCENARIOS, de->d_name);
        char *text = world_slurp(path);
        /* requests of one platform to one host from two partitions: which
         * is the destination's first is Redis's choice, made in the order
         * Kafka's fetches happen to bring them, with one worker or many.
         * Only the allowlist scenario keeps its platforms (one request per
         * platform and host). */
        const char *plat = "\"name\":\"squid\",\"platform\":\"squid\"}";
        for (char *p = text; strncmp(de->d_name, "agg_", 4) && (p = strstr(p, plat));)
            memmove(p + strlen("\"name\":\"squid\""), p + strlen(plat) - 1,
                    strlen(p + strlen(plat) - 1) + 1);
        st_buf_adds(s, text);
        free(text);
    }
    closedir(d);
    /* a burst in forty more runs, so that every partition has runs; the
     * last denials of each come in the second part, extending the state
     * a new process reads back */
    for (int t = 0; t < 40; t++)
        for (int i = 0; i < 12; i++) {
            if (i == 4)
                add_refused(i < 9 ? s : later, t);
            st_buf_printf(i < 9 ? s : later,
                          "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"g%d-%d\","
                          "\"ts\":\"2026-11-29T14:%02d:%02d.000Z\",\"source\":{\"kind\":"
                          "\"proxy\",\"name\":\"squid\"},"
                          "\"task_id\":\"T-G%d\",\"run_id\":\"run-g%d\",\"type\":"
                          "\"request\",\"decision\":\"deny\",\"attrs\":{\"method\":"
                          "\"GET\",\"host\":\"h%d.example\",\"port\":443,\"status\":403}}\n",
                          t, i, t % 60, i * 3, t, t % 3, i % 4);
            /* hours after the receive time (RECV_MS): skewed */
            if (i == 6 && t % 4 == 1)
                st_buf_printf(s,
                              "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"sk%d\","
                              "\"ts\":\"2026-11-30T06:00:%02d.000Z\",\"source\":{\"kind\":"
                              "\"proxy\",\"name\":\"squid\"},"
                              "\"task_id\":\"T-G%d\",\"run_id\":\"run-g%d\",\"type\":"
                              "\"request\",\"decision\":\"deny\",\"attrs\":{\"method\":"
                              "\"GET\",\"host\":\"h9.example\",\"port\":443,\"status\":403}}\n",
                              t, t, t, t % 3);
        }
    /* issued in T-XA's partition, used and written in T-XB's */
    st_buf_adds(s, "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"x-issue\","
                   "\"ts\":\"2026-11-29T15:00:00.000Z\",\"source\":{\"kind\":\"broker\","
                   "\"name\":\"vault\"},\"task_id\":\"T-XA\",\"run_id\":\"run-xa\","
                   "\"type\":\"token_issue\",\"identity\":{\"subject\":\"agent\","
                   "\"scopes\":[\"repo:read\"],\"audience\":\"github.com\","
                   "\"credential_id\":\"x-cred\",\"credential_fp\":\"00aa11bb22cc33dd\"},"
                   "\"attrs\":{\"expires_at\":\"2026-11-29T16:00:00.000Z\"}}\n");
    st_buf_adds(later, "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"x-use\","
                   "\"ts\":\"2026-11-29T15:00:20.000Z\",\"source\":{\"kind\":\"broker\","
                   "\"name\":\"vault\"},\"task_id\":\"T-XB\",\"run_id\":\"run-xb\","
                   "\"type\":\"token_use\",\"identity\":{\"credential_id\":\"x-cred\"},"
                   "\"attrs\":{\"operation\":\"repo:read\",\"audience\":\"github.com\"}}\n");
    st_buf_adds(later, "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"x-write\","
                   "\"ts\":\"2026-11-29T15:00:30.000Z\",\"source\":{\"kind\":\"sandbox\","
                   "\"name\":\"sbx\"},\"task_id\":\"T-XB\",\"run_id\":\"run-xb\","
                   "\"type\":\"file_write\",\"attrs\":{\"path\":\"/work/x\"},\"content\":"
                   "\"key [REDACTED:github_token:00aa11bb22cc33dd]\"}\n");
}

/* Produces every line of the stream to its task's partition of w's topic
 * (created with PARTS partitions); counts[p] gets each partition's. */
static void produce(const struct world *w, const char *stream, int counts[PARTS])
{
    char task[128];
    rd_kafka_t *rk = world_topic_producer(w->topic, PARTS);
    memset(counts, 0, PARTS * sizeof(*counts));
    for (const char *l = stream; *l;) {
        size_t n = strcspn(l, "\n");
        char *line = strndup(l, n);
        task_of(line, task, sizeof(task));
        int p = partition_of(task);
        counts[p]++;
        ck_assert_int_eq(rd_kafka_producev(rk, RD_KAFKA_V_TOPIC(w->topic),
                                           RD_KAFKA_V_PARTITION(p),
                                           RD_KAFKA_V_KEY(task, strlen(task)),
                                           RD_KAFKA_V_TIMESTAMP(RECV_MS),
                                           RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
                                           RD_KAFKA_V_VALUE(line, n), RD_KAFKA_V_END),
                         0);
        free(line);
        l += n + (l[n] == '\n');
    }
    ck_assert_int_eq(rd_kafka_flush(rk, 30000), 0);
    rd_kafka_destroy(rk);
}

/* One member of a log, as a line "time member" (the member's bytes
 * printed as they are: ours hold no newline). */
static void log_line(void *arg, int64_t ts, const char *key, size_t len)
{
    st_buf_printf(arg, "%lld %.*s\n", (long long)ts, (int)len, key);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static struct st_buf log_reply;
static int on_log_get(const redisReply *r, void *arg)
{
    (void)arg;
    st_buf_reset(&log_reply);
    if (r->type != REDIS_REPLY_STRING ||
        st_runblob_log_read(r->str, r->len, log_line, &log_reply))
        st_buf_adds(&log_reply, "(not a log)\n");
    return 0;
}

/* The members a large run's log (<name>:l:<run>) loads to, one "time
 * member" line each, sorted and without repeats: its bytes depend on
 * where checkpoints fell (frames, rewrites), which the number of workers
 * changes; what a load gives does not. */
static void log_members(struct st_buf *out, const char *key)
{
    char err[256];
    struct st_rpipe *p = st_rpipe_new(getenv("SANDTRAIL_REDIS_URL"), NULL, err, sizeof(err));
    ck_assert_msg(p != NULL, "%s", err);
    const char *get[] = {"GET", key};
    st_buf_init(&log_reply);
    st_rpipe_cmd(p, on_log_get, NULL, 2, get);
    ck_assert_int_eq(st_rpipe_exec(p, err, sizeof(err)), 0);
    st_rpipe_destroy(p);
    char **lines = NULL;
    size_t n = 0;
    for (char *l = log_reply.data; l && *l;) {
        char *nl = strchr(l, '\n');
        *nl = '\0';
        lines = realloc(lines, (n + 1) * sizeof(*lines));
        lines[n++] = l;
        l = nl + 1;
    }
    if (n)
        qsort(lines, n, sizeof(*lines), cmp_str);
    for (size_t i = 0; i < n; i++)
        if (i == 0 || strcmp(lines[i - 1], lines[i]))
            st_buf_printf(out, "%s\n", lines[i]);
    free(lines);
    st_buf_fini(&log_reply);
}

static char *redis_state_raw(const struct world *w);

/* Every key under the world's prefix, the prefix cut, with its type and
 * contents (hash fields sorted; strings quoted, escaped: a run's state is
 * binary; a large run's log as the members it loads to); no TTLs, no
 * scores of the run index (runs:<partition>:log, each run once, sorted:
 * its records follow the batches and the wall clock), and no owner epochs (epoch:<topic>:<partition>,
 * fence.h), which count assignments. */
static char *redis_state(const struct world *w)
{
    char *raw = redis_state_raw(w);
    struct st_buf out;
    st_buf_init(&out);
    for (char *l = raw; *l;) {
        char *nl = strchr(l, '\n');
        size_t len = nl ? (size_t)(nl - l) : strlen(l);
        st_buf_printf(&out, "%.*s\n", (int)len, l);
        char key[512];
        /* "== <key> string" then "LOG": the log's members instead */
        if (len > 3 && !strncmp(l, "== ", 3) && nl && !strncmp(nl + 1, "LOG\n", 4) &&
            len < sizeof(key)) {
            const char *sp = memchr(l + 3, ' ', len - 3);
            ck_assert_ptr_nonnull(sp);
            snprintf(key, sizeof(key), "%s:%.*s", w->name, (int)(sp - (l + 3)), l + 3);
            log_members(&out, key);
            nl += 4; /* the LOG line */
        }
        l = nl ? nl + 1 : l + len;
    }
    free(raw);
    return out.data ? out.data : strdup("");
}

static char *redis_state_raw(const struct world *w)
{
    return world_shf(
        "u=\"$SANDTRAIL_REDIS_URL\"; "
        "redis-cli -u \"$u\" --scan --pattern '%s:*' | grep -v '^%s:epoch:' | sort |"
        " while read -r k; do "
        "t=$(redis-cli -u \"$u\" type \"$k\"); echo \"== ${k#%s:} $t\"; "
        "case ${k#%s:}:$t in "
        "runs:*:zset) redis-cli -u \"$u\" zrange \"$k\" 0 -1 | sort;; "
        "runs:*:log:string) redis-cli --raw -u \"$u\" get \"$k\" | cut -d' ' -f2- | sort -u;; "
        "*:zset) redis-cli -u \"$u\" zrange \"$k\" 0 -1 withscores;; "
        "run:[bh]:*:hash) redis-cli --no-raw -u \"$u\" hgetall \"$k\" | "
        "sed 's/^ *[0-9]*) //' | paste - - | sort;; "
        "*:hash) redis-cli -u \"$u\" hgetall \"$k\" | paste - - | sort;; "
        "*:l:*:string) echo LOG;; "
        "*:string) redis-cli --no-raw -u \"$u\" get \"$k\";; "
        "esac; done",
        w->name, w->name, w->name, w->name);
}

static void redis_drop(const struct world *w)
{
    free(world_shf("redis-cli -u \"$SANDTRAIL_REDIS_URL\" --scan --pattern '%s:*' | "
                   "xargs -r redis-cli -u \"$SANDTRAIL_REDIS_URL\" del >/dev/null",
                   w->name));
}

/* The per-worker counts of the analyzer's last log line
 * ("worker_events=a,b,c"). */
static int worker_events(const char *log, long *out, int max)
{
    char *text = world_slurp(log);
    const char *p = strstr(text, " worker_events=");
    ck_assert_msg(p, "no worker_events in %s", text);
    p += strlen(" worker_events=");
    int n = 0;
    while (n < max) {
        char *end;
        out[n++] = strtol(p, &end, 10);
        if (*end != ',')
            break;
        p = end + 1;
    }
    free(text);
    return n;
}

/* Fails with the first line where a and b differ (check's messages are
 * too short for whole tables). */
static void assert_same(const char *what, const char *a, const char *b)
{
    size_t i = 0, line = 1, start = 0;
    while (a[i] && a[i] == b[i]) {
        if (a[i] == '\n') {
            line++;
            start = i + 1;
        }
        i++;
    }
    if (!a[i] && !b[i])
        return;
    ck_abort_msg("%s differ at line %zu: workers=1 \"%.300s\" workers=3 \"%.300s\"", what,
                 line, a + start, b + start);
}

static void drain(const struct world *w, int workers, const char *log)
{
    ck_assert_int_eq(run(w, w->name, w->name,
                         "timeout 180 " ANALYZER " --drain -X batch.max_events=64 -X batch.behind_events=0 "
                         "-X detect.parse_split_min=40 -X detect.workers=%d -X detect.overlap=%d "
                         "-X state.write_final_trims=1 2>%s",
                         workers, workers == 1, log),
                     0);
}

START_TEST(detect_workers_give_the_findings_and_state_of_one)
{
    struct world one, three;
    struct st_buf stream, later;
    int counts[PARTS], counts2[PARTS];
    char log1[128], log3[128];
    long ev[8];

    world_init(&one, "dw1");
    world_init(&three, "dw3");
    snprintf(log1, sizeof(log1), "/tmp/%s.log", one.name);
    snprintf(log3, sizeof(log3), "/tmp/%s.log", three.name);
    st_buf_init(&stream);
    st_buf_init(&later);
    build_stream(&stream, &later);
    ck_assert_int_ne(partition_of("T-XA"), partition_of("T-XB"));
    ck_assert_int_ne(partition_of("T-AL0"), partition_of("T-AL1"));

    produce(&one, stream.data, counts);
    produce(&three, stream.data, counts);
    for (int p = 0; p < PARTS; p++)
        ck_assert_msg(counts[p] > 0, "partition %d has no event", p);
    drain(&one, 1, log1);
    drain(&three, 3, log3);
    produce(&one, later.data, counts2);
    produce(&three, later.data, counts2);
    drain(&one, 1, log1);
    drain(&three, 3, log3);

    /* the cross-partition findings are there at all */
    char *r = rows(one.dsn, "SELECT detector, run_id, severity FROM findings WHERE run_id "
                            "IN ('run-xb', '*') ORDER BY 1");
    ck_assert_msg(strstr(r, "scope_drift|*|medium\n") &&
                      strstr(r, "scope_drift|run-xb|critical\n") &&
                      strstr(r, "token_write|run-xb|critical\n"),
                  "cross-partition findings missing: %s", r);
    free(r);
    char *fa = rows(one.dsn, q_findings), *fb = rows(three.dsn, q_findings);
    ck_assert_uint_gt(strlen(fa), 0);
    assert_same("findings", fa, fb);
    free(fa);
    free(fb);
    /* the same rows stored, the same refusals in the same order */
    fa = rows(one.dsn, q_events);
    fb = rows(three.dsn, q_events);
    assert_same("events", fa, fb);
    free(fa);
    free(fb);
    r = rows(one.dsn, "SELECT count(*) FROM events WHERE skewed");
    ck_assert_str_eq(r, "10\n");
    free(r);
    int n1, n3;
    fa = dlq_lines(one.dlq, &n1);
    fb = dlq_lines(three.dlq, &n3);
    ck_assert_int_eq(n1, 40);
    ck_assert_int_eq(n3, 40);
    for (int k = 0; k < REFUSAL_KINDS; k++) {
        static const char *const reasons[REFUSAL_KINDS] = {
            " invalid_json |", " duplicate_key |", " not_an_object |", " unknown_schema |",
            " invalid_timestamp |", " missing_field |", " unknown_type |", " invalid_utf8 |"};
        ck_assert_msg(strstr(fa, reasons[k]), "no%s record in %s", reasons[k], fa);
    }
    assert_same("dead-letter records", fa, fb);
    free(fa);
    free(fb);
    fa = rows(one.dsn, q_evidence);
    fb = rows(three.dsn, q_evidence);
    assert_same("finding_events", fa, fb);
    free(fa);
    free(fb);
    fa = redis_state(&one);
    fb = redis_state(&three);
    /* a run's window: a field of the run's bucket while small, a log when
     * large */
    ck_assert_msg(strstr(fa, "== run:b:") || strstr(fa, "== denial_burst:l:"),
                  "no denial_burst window in Redis");
    ck_assert_ptr_nonnull(strstr(fa, "== scope_drift:cred:"));
    ck_assert_ptr_nonnull(strstr(fa, "== credfp:"));
    assert_same("Redis keys", fa, fb);
    free(fa);
    free(fb);

    /* one worker: all on it; three: every one had partitions, and events */
    ck_assert_int_eq(worker_events(log1, ev, 8), 1);
    long total = ev[0];
    ck_assert_int_gt(total, 0);
    ck_assert_int_eq(worker_events(log3, ev, 8), 3);
    for (int i = 0; i < 3; i++)
        ck_assert_msg(ev[i] > 0, "worker %d detected nothing", i);
    ck_assert_int_eq(ev[0] + ev[1] + ev[2], total);

    st_buf_fini(&stream);
    st_buf_fini(&later);
    redis_drop(&one);
    redis_drop(&three);
    unlink(log1);
    unlink(log3);
    world_drop(&one);
    world_drop(&three);
}
END_TEST

int main(void)
{
    if (world_setup())
        return EXIT_FAILURE;
    Suite *s = suite_create("detect_workers");
    TCase *tc = tcase_create("detect_workers");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, detect_workers_give_the_findings_and_state_of_one);
    suite_add_tcase(s, tc);
    return world_run(s);
}
