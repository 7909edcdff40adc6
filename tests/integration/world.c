/* world.c: an isolated world for integration tests against the real
 * services: a PostgreSQL database, a pair of Kafka topics, a consumer group
 * and a Redis key prefix of its own (see world.h). */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>
#include <librdkafka/rdkafka.h>

#include "buf.h"
#include "kafka.h"
#include "redisconn.h"
#include "world.h"

#define WORLD_SERVICES SANDTRAIL_SOURCE_DIR "/scripts/services"
#define WORLD_RECEIVER SANDTRAIL_SOURCE_DIR "/tests/integration/alert_receiver.py"

static char base_dsn[512];
static char brokers[256];


void world_init(struct world *w, const char *tag)
{
    static int seq;
    snprintf(w->name, sizeof(w->name), "st_it_%d_%ld_%d_%s", (int)getpid(),
             (long)time(NULL) % 100000, seq++, tag);
    snprintf(w->dsn, sizeof(w->dsn), "%s dbname=%s", base_dsn, w->name);
    snprintf(w->topic, sizeof(w->topic), "%s.events", w->name);
    snprintf(w->dlq, sizeof(w->dlq), "%s.dlq", w->name);

    char dsn[700], sql[200];
    snprintf(dsn, sizeof(dsn), "%s dbname=postgres", base_dsn);
    PGconn *pg = PQconnectdb(dsn);
    ck_assert_msg(PQstatus(pg) == CONNECTION_OK, "PostgreSQL: %s", PQerrorMessage(pg));
    snprintf(sql, sizeof(sql), "CREATE DATABASE %s", w->name);
    PGresult *r = PQexec(pg, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_COMMAND_OK, "%s", PQresultErrorMessage(r));
    PQclear(r);
    PQfinish(pg);
}

/* Deletes every topic whose name is the world's name followed by '.' or
 * '_' (its events, dead-letter and credentials topics and any a test made
 * with the name), so that repeated runs do not pile partitions up in the
 * shared broker (thousands of them exhaust its heap). Best effort: a
 * failure leaves the topics, it fails no test. */
static void world_drop_topics(const char *name)
{
    char err[512];
    size_t len = strlen(name);
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", brokers, err, sizeof(err));
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
    if (!rk)
        return;
    const struct rd_kafka_metadata *md;
    if (rd_kafka_metadata(rk, 1, NULL, &md, 10000) != RD_KAFKA_RESP_ERR_NO_ERROR) {
        rd_kafka_destroy(rk);
        return;
    }
    rd_kafka_DeleteTopic_t **del = calloc((size_t)md->topic_cnt + 1, sizeof(*del));
    size_t n = 0;
    for (int i = 0; del && i < md->topic_cnt; i++) {
        const char *t = md->topics[i].topic;
        if (strncmp(t, name, len) == 0 && (t[len] == '.' || t[len] == '_'))
            del[n++] = rd_kafka_DeleteTopic_new(t);
    }
    rd_kafka_metadata_destroy(md);
    if (n) {
        rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
        rd_kafka_DeleteTopics(rk, del, n, NULL, q);
        rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 15000);
        if (ev)
            rd_kafka_event_destroy(ev);
        rd_kafka_queue_destroy(q);
        rd_kafka_DeleteTopic_destroy_array(del, n);
    }
    free(del);
    rd_kafka_destroy(rk);
}

/* Deletes every Redis key whose name begins with the world's name (the
 * tests use it, or it followed by a tag, as redis.prefix). Best effort, as
 * above: detector state left behind would otherwise stay for state.ttl_s
 * and make every new prefix's first start scan it (runidx.h). */
static void world_drop_keys(const char *name)
{
    struct st_redis_target t;
    char err[256], match[96];
    const char *url = getenv("SANDTRAIL_REDIS_URL");
    if (!url || st_redis_target_parse(&t, url, getenv("SANDTRAIL_REDIS_PASSWORD_FILE"), err,
                                      sizeof(err)))
        return;
    redisContext *c = st_redis_connect(&t, 5000, NULL, err, sizeof(err));
    st_redis_target_fini(&t);
    if (!c)
        return;
    snprintf(match, sizeof(match), "%s*", name);
    char cursor[32] = "0";
    do {
        redisReply *r = redisCommand(c, "SCAN %s MATCH %s COUNT 10000", cursor, match);
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
            freeReplyObject(r);
            break;
        }
        snprintf(cursor, sizeof(cursor), "%s", r->element[0]->str);
        for (size_t i = 0; i < r->element[1]->elements; i++)
            freeReplyObject(redisCommand(c, "UNLINK %b", r->element[1]->element[i]->str,
                                         r->element[1]->element[i]->len));
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    redisFree(c);
}

void world_drop(struct world *w)
{
    char dsn[700], sql[200];
    world_drop_topics(w->name);
    world_drop_keys(w->name);
    snprintf(dsn, sizeof(dsn), "%s dbname=postgres", base_dsn);
    PGconn *pg = PQconnectdb(dsn);
    snprintf(sql, sizeof(sql), "DROP DATABASE IF EXISTS %s WITH (FORCE)", w->name);
    PQclear(PQexec(pg, sql));
    PQfinish(pg);
}

void world_first_difference(const char *xname, const char *x, const char *y, char *out,
                            size_t outsz)
{
    size_t i = 0, line = 1, start = 0;
    while (x[i] && x[i] == y[i]) {
        if (x[i] == '\n') {
            line++;
            start = i + 1;
        }
        i++;
    }
    size_t from = i - start > 120 ? i - 120 : start;
    snprintf(out, outsz, "line %zu: %s \"%.300s\" vs \"%.300s\"", line, xname, x + from,
             y + from);
}

/* Runs a program with the world's settings; returns its exit status. */
int run(const struct world *w, const char *group, const char *prefix,
               const char *fmt, ...)
{
    char cmd[4096], tail[1500];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tail, sizeof(tail), fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof(cmd),
             "SANDTRAIL_PG_DSN='%s' SANDTRAIL_TOPIC_EVENTS='%s' SANDTRAIL_TOPIC_DLQ='%s' "
             "SANDTRAIL_TOPIC_CREDENTIALS='%s.credentials' "
             "SANDTRAIL_GROUP='%s' SANDTRAIL_GROUP_INSTANCE_ID='%s-1' "
             "SANDTRAIL_REDIS_PREFIX='%s:' sh -c \"%s\"",
             w->dsn, w->topic, w->dlq, w->name, group, group, prefix, tail);
    int st = system(cmd);
    ck_assert_msg(st != -1 && WIFEXITED(st), "could not run: %s", cmd);
    return WEXITSTATUS(st);
}

/* Every row of a query, '|' between columns, '\n' after each row. */
char *rows(const char *dsn, const char *sql)
{
    PGconn *pg = PQconnectdb(dsn);
    ck_assert_msg(PQstatus(pg) == CONNECTION_OK, "%s", PQerrorMessage(pg));
    PGresult *r = PQexec(pg, sql);
    ck_assert_msg(PQresultStatus(r) == PGRES_TUPLES_OK, "%s: %s", sql,
                  PQresultErrorMessage(r));
    struct st_buf b;
    st_buf_init(&b);
    st_buf_adds(&b, "");
    for (int i = 0; i < PQntuples(r); i++) {
        for (int j = 0; j < PQnfields(r); j++) {
            if (j)
                st_buf_addc(&b, '|');
            st_buf_adds(&b, PQgetisnull(r, i, j) ? "NULL" : PQgetvalue(r, i, j));
        }
        st_buf_addc(&b, '\n');
    }
    PQclear(r);
    PQfinish(pg);
    return b.data;
}

void world_wait_table(const struct world *w, const char *table, int seconds)
{
    char sql[200];
    snprintf(sql, sizeof(sql), "SELECT to_regclass('public.%s') IS NOT NULL", table);
    for (int i = 0; i < seconds * 5; i++) {
        char *r = rows(w->dsn, sql);
        int there = !strcmp(r, "t\n");
        free(r);
        if (there)
            return;
        usleep(200000);
    }
    ck_abort_msg("table \"%s\" not made in %d s", table, seconds);
}

rd_kafka_t *world_topic_producer(const char *topic, int partitions)
{
    char err[512];
    rd_kafka_conf_t *kc = st_kafka_conf_new(getenv("SANDTRAIL_KAFKA_BROKERS"), err,
                                            sizeof(err));
    ck_assert_msg(kc != NULL, "%s", err);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, kc, err, sizeof(err));
    ck_assert_msg(rk != NULL, "%s", err);
    const char *topics[1] = {topic};
    ck_assert_msg(st_kafka_ensure_topics(rk, topics, 1, partitions, 1, 30000, err,
                                         sizeof(err)) == 0,
                  "%s", err);
    return rk;
}

/* Reads every committed message of a topic from the beginning, up to each
 * partition's high watermark when the reading starts. A partition is done
 * at its end-of-partition event at or past that mark (an earlier one, from
 * a fetch of a stale end, does not count: counting end events made a dump
 * miss the last records of a partition now and then), or once a message
 * at the mark's last offset is read.
 * The mark is the log's end, asked of a read_uncommitted handle: the
 * reader's own (read_committed) asks for the last stable offset, which
 * stays before a transaction's records until its commit marker is
 * written, after the producer's commit returned (Kafka writes markers
 * behind the commit's answer); a dump just after an analyzer's drain then
 * found the dead-letter topic empty, now and then. The reader waits for
 * the markers instead. */
char *topic_dump(const char *topic, int *count)
{
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    rd_kafka_conf_set(conf, "bootstrap.servers", brokers, err, sizeof(err));
    rd_kafka_conf_set(conf, "group.id", "st-it-reader", err, sizeof(err));
    rd_kafka_conf_set(conf, "enable.partition.eof", "true", err, sizeof(err));
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof(err));
    ck_assert_ptr_nonnull(rk);
    rd_kafka_conf_t *econf = rd_kafka_conf_new();
    rd_kafka_conf_set(econf, "bootstrap.servers", brokers, err, sizeof(err));
    ck_assert_int_eq(rd_kafka_conf_set(econf, "isolation.level", "read_uncommitted", err,
                                       sizeof(err)),
                     RD_KAFKA_CONF_OK);
    rd_kafka_t *ends = rd_kafka_new(RD_KAFKA_CONSUMER, econf, err, sizeof(err));
    ck_assert_ptr_nonnull(ends);
    const struct rd_kafka_metadata *md;
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    ck_assert_int_eq(rd_kafka_metadata(rk, 0, rkt, &md, 10000), 0);
    ck_assert_int_eq(md->topic_cnt, 1);
    int nparts = md->topics[0].partition_cnt;
    rd_kafka_metadata_destroy(md);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_topic_partition_list_t *l = rd_kafka_topic_partition_list_new(nparts);
    for (int p = 0; p < nparts; p++)
        rd_kafka_topic_partition_list_add(l, topic, p)->offset = RD_KAFKA_OFFSET_BEGINNING;
    rd_kafka_assign(rk, l);
    rd_kafka_topic_partition_list_destroy(l);

    int64_t high[256];
    char done[256] = {0};
    ck_assert_int_le(nparts, 256);
    int ndone = 0;
    for (int p = 0; p < nparts; p++) {
        int64_t low;
        rd_kafka_resp_err_t qe;
        /* a topic just made may not have its leader yet */
        for (int t = 0; (qe = rd_kafka_query_watermark_offsets(ends, topic, p, &low, &high[p],
                                                               10000)) &&
                        t < 100;
             t++)
            usleep(100000);
        ck_assert_msg(qe == 0, "%s [%d]: %s", topic, p, rd_kafka_err2str(qe));
        if (high[p] <= low) { /* empty */
            done[p] = 1;
            ndone++;
        }
    }
    rd_kafka_destroy(ends);

    struct st_buf b;
    st_buf_init(&b);
    st_buf_adds(&b, "");
    *count = 0;
    time_t deadline = time(NULL) + 30;
    while (ndone < nparts && time(NULL) < deadline) {
        rd_kafka_message_t *m = rd_kafka_consumer_poll(rk, 500);
        if (!m)
            continue;
        int p = m->partition;
        int end = 0;
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF)
            end = m->offset >= high[p];
        else if (!m->err) {
            st_buf_add(&b, m->payload, m->len);
            st_buf_addc(&b, '\n');
            (*count)++;
            end = m->offset + 1 >= high[p];
        }
        if (end && p >= 0 && p < nparts && !done[p]) {
            done[p] = 1;
            ndone++;
        }
        rd_kafka_message_destroy(m);
    }
    ck_assert_int_eq(ndone, nparts);
    rd_kafka_consumer_close(rk);
    rd_kafka_destroy(rk);
    return b.data;
}


int world_setup(void)
{
    const char *dsn = getenv("SANDTRAIL_PG_DSN");
    const char *b = getenv("SANDTRAIL_KAFKA_BROKERS");
    if (!dsn || !b) {
        fprintf(stderr, "integration tests need the services: "
                        "eval \"$(scripts/services up)\"\n");
        return -1;
    }
    /* the tests choose the database themselves */
    snprintf(base_dsn, sizeof(base_dsn), "%s", dsn);
    char *db = strstr(base_dsn, "dbname=");
    if (db)
        *db = '\0';
    snprintf(brokers, sizeof(brokers), "%s", b);
    return 0;
}

char *world_sh(const char *cmd)
{
    FILE *p = popen(cmd, "r");
    struct st_buf b;
    char chunk[4096];
    size_t n;
    st_buf_init(&b);
    st_buf_adds(&b, "");
    if (!p)
        return b.data;
    while ((n = fread(chunk, 1, sizeof(chunk), p)) > 0)
        st_buf_add(&b, chunk, n);
    pclose(p);
    return b.data;
}

char *world_shf(const char *fmt, ...)
{
    char cmd[4096];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    ck_assert_int_lt(n, (int)sizeof(cmd));
    return world_sh(cmd);
}

char *world_slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    struct st_buf b;
    char chunk[4096];
    size_t n;
    st_buf_init(&b);
    st_buf_adds(&b, "");
    if (!f)
        return b.data;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        st_buf_add(&b, chunk, n);
    fclose(f);
    return b.data;
}

int world_run(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

/* --- on-call: webhook receivers and Alertmanagers of the test's own --- */

int world_read_int(const char *path)
{
    char *s = world_slurp(path);
    int v = atoi(s);
    free(s);
    return v;
}

void world_receiver_start(struct world_receiver *r, const char *tag, const char *opts)
{
    char cmd[1024], path[256];
    snprintf(r->dir, sizeof(r->dir), "/tmp/st-alerts-%d-%s", (int)getpid(), tag);
    snprintf(cmd, sizeof(cmd),
             "rm -rf %s && mkdir -p %s && (python3 " WORLD_RECEIVER " %s %s > %s/log 2>&1 &"
             " echo $! > %s/pid)",
             r->dir, r->dir, r->dir, opts, r->dir, r->dir);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(path, sizeof(path), "%s/port", r->dir);
    for (int i = 0; i < 100 && access(path, R_OK); i++)
        usleep(100000);
    r->port = world_read_int(path);
    ck_assert_int_gt(r->port, 0);
    snprintf(path, sizeof(path), "%s/pid", r->dir);
    r->pid = world_read_int(path);
}

void world_receiver_stop(struct world_receiver *r)
{
    char cmd[256];
    kill(r->pid, SIGTERM);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", r->dir);
    ck_assert_int_eq(system(cmd), 0);
}

cJSON *world_receiver_requests(const struct world_receiver *r)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/requests.ndjson", r->dir);
    char *text = world_slurp(path);
    cJSON *arr = cJSON_CreateArray();
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
        cJSON_AddItemToArray(arr, cJSON_Parse(line));
    free(text);
    return arr;
}

/* Ports are asked of the kernel (bind to port 0), so that tests running at
 * the same time, here or in another checkout, never share one. Every socket
 * stays bound until all n are known, so the n are distinct; a port handed
 * out before by this process is not handed out again. The kernel gives
 * bind(0) odd ports first and connect() even ones, which keeps the window
 * between close() here and the server's bind() small and quiet. */
void world_free_ports(int *ports, int n)
{
    static int given[256];
    static int ngiven;
    int held[128], nheld = 0, found = 0;
    while (found < n) {
        struct sockaddr_in sa = {.sin_family = AF_INET};
        socklen_t len = sizeof(sa);
        ck_assert_int_lt(nheld, 128);
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        ck_assert_int_ge(fd, 0);
        held[nheld++] = fd; /* bound until the end, even when not taken */
        sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
        ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
        int port = ntohs(sa.sin_port), seen = 0;
        for (int j = 0; j < ngiven; j++)
            seen |= given[j] == port;
        if (seen)
            continue;
        ports[found++] = port;
        if (ngiven < (int)(sizeof(given) / sizeof(given[0])))
            given[ngiven++] = port;
    }
    for (int i = 0; i < nheld; i++)
        close(held[i]);
}

int world_free_port(void)
{
    int port;
    world_free_ports(&port, 1);
    return port;
}

int world_am_services(const struct world_am *a, int webhook_port, const char *verb)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd),
             "SANDTRAIL_RUN=%s SANDTRAIL_ALERTMANAGER_PORT=%d"
             " SANDTRAIL_ALERTMANAGER_WEBHOOK=http://127.0.0.1:%d/am " WORLD_SERVICES
             " %s alertmanager 2> /dev/null",
             a->run, a->port, webhook_port, verb);
    return system(cmd);
}

void world_am_start(struct world_am *a, int webhook_port)
{
    snprintf(a->run, sizeof(a->run), "/tmp/st-alerts-%d-am", (int)getpid());
    a->port = world_free_port();
    ck_assert_int_eq(world_am_services(a, webhook_port, "start"), 0);
}

void world_am_stop(struct world_am *a)
{
    char cmd[256];
    ck_assert_int_eq(world_am_services(a, 0, "stop"), 0);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", a->run);
    ck_assert_int_eq(system(cmd), 0);
}
