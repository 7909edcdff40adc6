/* test_transport.c: transport security and authentication against real
 * servers configured for it (tests/integration/transport.sh: a throwaway CA
 * from tls_ca.sh and a server of the test's own on other ports, loopback
 * only). Each service carries events end to end over TLS with a login, and
 * a wrong password, a wrong CA or a missing certificate stops the program
 * with a clear message: it never falls back to plaintext or to no login. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "world.h"

/* The value of "key=" in the script's output; -1 when absent. */
static long value(const char *out, const char *key)
{
    char pat[96];
    snprintf(pat, sizeof(pat), "%s=", key);
    for (const char *p = strstr(out, pat); p; p = strstr(p + 1, pat))
        if (p == out || p[-1] == '\n')
            return strtol(p + strlen(pat), NULL, 10);
    return -1;
}

/* Runs transport.sh for one service in the world; its key=value output.
 * Caller frees. */
static char *transport(const struct world *w, const char *what)
{
    char dir[128], out[160];
    snprintf(dir, sizeof(dir), "/tmp/st_transport_%s_%d", what, (int)getpid());
    snprintf(out, sizeof(out), "%s.out", dir);
    run(w, w->name, w->name,
        SANDTRAIL_SOURCE_DIR "/tests/integration/transport.sh %s %s " BIN " >%s", what,
        dir, out);
    char *text = world_slurp(out);
    fprintf(stderr, "%s:\n%s", what, text);
    unlink(out);
    return text;
}

/* Removes what transport.sh left (kept when a test fails, to read). */
static void transport_done(const char *what)
{
    char cmd[160];
    snprintf(cmd, sizeof(cmd), "rm -rf /tmp/st_transport_%s_%d", what, (int)getpid());
    ck_assert_int_eq(system(cmd), 0);
}

/* A run refused at start: non-zero, and its stderr said why. */
#define ck_refused(out, name, status)                                                  \
    do {                                                                               \
        ck_assert_int_eq(value(out, name "_status"), status);                          \
        ck_assert_int_eq(value(out, name "_said"), 1);                                 \
    } while (0)

START_TEST(transport_kafka_sasl_ssl_carries_events_and_refuses_wrong_secrets)
{
    struct world w;
    world_init(&w, "tkafka");
    char *out = transport(&w, "kafka");
    /* the collector produced and the analyzer consumed over SASL_SSL */
    ck_assert_int_eq(value(out, "produce_status"), 0);
    ck_assert_int_eq(value(out, "consume_status"), 0);
    char *n = rows(w.dsn, "SELECT count(*) FROM events");
    ck_assert_str_eq(n, "14\n");
    free(n);
    /* librdkafka's own error for a misspelt property, at start */
    ck_refused(out, "unknown", 78);
    /* refused login or certificate: stop at once, never fall back */
    ck_refused(out, "wrong_password", 78);
    ck_refused(out, "wrong_ca", 78);
    ck_refused(out, "analyzer_wrong_password", 78);
    ck_refused(out, "analyzer_wrong_ca", 78);
    ck_assert_int_ne(value(out, "missing_ca_status"), 0);
    ck_assert_int_eq(value(out, "missing_ca_said"), 1);
    ck_assert_int_eq(value(out, "password_logged"), 0);
    free(out);
    transport_done("kafka");
    world_drop(&w);
}
END_TEST

START_TEST(transport_pg_verify_full_scram_and_no_password_in_messages)
{
    struct world w;
    world_init(&w, "tpg");
    char *out = transport(&w, "pg");
    /* the analyzer stored every event over TLS with scram-sha-256 */
    ck_assert_int_eq(value(out, "produce_status"), 0);
    ck_assert_int_eq(value(out, "consume_status"), 0);
    ck_assert_int_eq(value(out, "events"), 14);
    ck_assert_ptr_nonnull(strstr(out, "\nssl=t\n"));
    /* wrong or missing CA, wrong password: refused at start, clearly */
    ck_refused(out, "wrong_ca", 1);
    ck_refused(out, "missing_ca", 1);
    ck_refused(out, "wrong_password", 1);
    /* the server takes no plaintext at all */
    ck_refused(out, "plaintext", 1);
    /* a password in the DSN is never logged, even from a DSN libpq cannot
     * read (it quotes the bad part of a URI) */
    ck_refused(out, "inline_password", 1);
    ck_refused(out, "bad_uri", 1);
    ck_assert_int_eq(value(out, "password_logged"), 0);
    free(out);
    transport_done("pg");
    world_drop(&w);
}
END_TEST

START_TEST(transport_redis_acl_user_through_tls_tunnel)
{
    struct world w;
    world_init(&w, "tredis");
    char *out = transport(&w, "redis");
    /* the analyzer logged in as the ACL user, through the tunnel, and its
     * detectors wrote their state */
    ck_assert_int_eq(value(out, "produce_status"), 0);
    ck_assert_int_eq(value(out, "consume_status"), 0);
    ck_assert_int_gt(value(out, "keys"), 0);
    ck_assert_int_eq(value(out, "url_password_status"), 0);
    char *n = rows(w.dsn, "SELECT count(*) FROM events");
    ck_assert_str_eq(n, "14\n");
    free(n);
    /* a wrong password or none: refused at start with Redis's words */
    ck_refused(out, "wrong_password", 1);
    ck_refused(out, "no_login", 1);
    /* a tunnel that does not trust the server's CA carries nothing */
    ck_refused(out, "wrong_ca", 1);
    ck_assert_int_eq(value(out, "tunnel_refused_ca"), 1);
    /* the password of a URL is masked in messages */
    ck_refused(out, "bad_url", 1);
    /* the alerter logs in the same ways, and is refused the same way */
    ck_assert_int_eq(value(out, "alerter_login_status"), 0);
    ck_assert_int_eq(value(out, "alerter_unthrottled"), 0);
    ck_assert_int_eq(value(out, "alerter_url_password_status"), 0);
    ck_assert_int_eq(value(out, "alerter_url_unthrottled"), 0);
    ck_refused(out, "alerter_wrong_password", 1);
    ck_assert_int_eq(value(out, "password_logged"), 0);
    free(out);
    transport_done("redis");
    world_drop(&w);
}
END_TEST

START_TEST(transport_https_listener_serves_tls_only)
{
    struct world w;
    world_init(&w, "thttps");
    char *out = transport(&w, "https");
    /* a client trusting the CA posts as before: answered, events in Kafka */
    ck_assert_ptr_nonnull(strstr(out, "\"accepted\":2"));
    ck_assert_ptr_nonnull(strstr(out, "} 200\n"));
    int n;
    free(topic_dump(w.topic, &n));
    /* 4: the same two events twice, by the first token and the task-bound one */
    ck_assert_int_eq(n, 4);
    /* a token bound to a pattern of task ids: events of other tasks are
     * refused like those of another source */
    ck_assert_ptr_nonnull(strstr(out, "task_h={\"accepted\":2,\"rejected\":2"));
    ck_assert_ptr_nonnull(strstr(out, "task_x={\"accepted\":0,\"rejected\":4"));
    ck_assert_ptr_nonnull(strstr(out, "may send only for tasks matching T-X*"));
    /* plain HTTP on the same port gets no answer (curl: empty reply) */
    ck_assert_int_gt(value(out, "plain_curl"), 0);
    /* a client trusting another CA refuses the server (curl: 60) */
    ck_assert_int_eq(value(out, "wrong_ca_curl"), 60);
    /* stopped cleanly; 1: the batch had rejected lines */
    ck_assert_int_eq(value(out, "listener_status"), 1);
    /* a certificate without its key, or a key that cannot be read: no start */
    ck_refused(out, "half", 2);
    ck_refused(out, "missing_key", 2);
    free(out);
    transport_done("https");
    world_drop(&w);
}
END_TEST

int main(void)
{
    if (world_setup())
        return EXIT_FAILURE;
    Suite *s = suite_create("transport");
    TCase *tc = tcase_create("tls");
    tcase_set_timeout(tc, 180);
    tcase_add_test(tc, transport_kafka_sasl_ssl_carries_events_and_refuses_wrong_secrets);
    tcase_add_test(tc, transport_pg_verify_full_scram_and_no_password_in_messages);
    tcase_add_test(tc, transport_redis_acl_user_through_tls_tunnel);
    tcase_add_test(tc, transport_https_listener_serves_tls_only);
    suite_add_tcase(s, tc);
    return world_run(s);
}
