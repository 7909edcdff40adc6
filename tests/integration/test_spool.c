/* test_spool.c: a collector with a spool whose Kafka is unreachable (it is
 * given a broker address where nothing listens, so the shared broker is left
 * alone). Batches posted meanwhile are answered as soon as they are on disk;
 * the collector is stopped with nothing acknowledged; started again with
 * the real broker, it produces the spool to the topics the records name,
 * and every event is there: nothing lost. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

#include "buf.h"
#include "world.h"

static char dir[128], pidf[160];
static int port; /* the collector's, from world_free_port() */


static void start(struct world *w, const char *brokers)
{
    run(w, w->name, w->name,
        BIN "/collector/sandtrail-collector --listen 127.0.0.1:%d"
            " -X http.tokens_file=%s/tokens -X spool.dir=%s/spool -X kafka.brokers=%s"
            " -X kafka.delivery.timeout.ms=4000 2>>%s/collector.log & echo \\$! > %s",
        port, dir, dir, brokers, dir, pidf);
    for (int i = 0; i < 50; i++) {
        char *r = world_shf("curl -s -o /dev/null -w '%%{http_code}' -X POST "
                           "http://127.0.0.1:%d/v1/events", port);
        int up = !strcmp(r, "401");
        free(r);
        if (up)
            return;
        usleep(200000);
    }
    ck_abort_msg("the collector did not start");
}

static void stop(void)
{
    char cmd[640];
    snprintf(cmd, sizeof(cmd),
             "pid=$(cat %s); kill $pid; for i in $(seq 1 300); do kill -0 $pid 2>/dev/null"
             " || exit 0; sleep 0.1; done; exit 1",
             pidf);
    ck_assert_int_eq(system(cmd), 0);
}

/* Posts events first..last-1; returns the HTTP status; *ms the time. */
static int post(int first, int last, double *ms)
{
    char path[200], cmd[512];
    snprintf(path, sizeof(path), "%s/batch", dir);
    FILE *f = fopen(path, "w");
    for (int i = first; i < last; i++)
        fprintf(f,
                "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"s-%04d\","
                "\"ts\":\"2026-11-29T16:00:00Z\",\"source\":{\"kind\":\"sandbox\","
                "\"name\":\"sbx\"},\"task_id\":\"T-SP%d\",\"run_id\":\"run-sp\","
                "\"type\":\"exec\",\"attrs\":{\"command\":\"make\"}}\n",
                i, i % 5);
    fclose(f);
    snprintf(cmd, sizeof(cmd),
             "curl -s -o /dev/null -w '%%{http_code}' --max-time 60 -H 'Authorization: Bearer "
             "sbx-token-0123456789' --data-binary @%s http://127.0.0.1:%d/v1/events",
             path, port);
    struct timeval a, b;
    gettimeofday(&a, NULL);
    char *r = world_sh(cmd);
    gettimeofday(&b, NULL);
    *ms = (double)(b.tv_sec - a.tv_sec) * 1000 + (double)(b.tv_usec - a.tv_usec) / 1000;
    int status = atoi(r);
    free(r);
    return status;
}

static int present(const char *dump, int upto)
{
    int n = 0;
    char id[32];
    for (int i = 0; i < upto; i++) {
        snprintf(id, sizeof(id), "\"s-%04d\"", i);
        n += strstr(dump, id) != NULL;
    }
    return n;
}

START_TEST(spool_keeps_every_event_through_a_kafka_outage)
{
    struct world w;
    char cmd[512], *dump = NULL;
    double ms;
    int n = 0;
    port = world_free_port();
    snprintf(dir, sizeof(dir), "/tmp/st_spool_%d", (int)getpid());
    snprintf(pidf, sizeof(pidf), "%s/pid", dir);
    snprintf(cmd, sizeof(cmd),
             "rm -rf %s && mkdir -p %s && echo 'sbx-token-0123456789 sandbox sbx' > %s/tokens",
             dir, dir, dir);
    ck_assert_int_eq(system(cmd), 0);
    world_init(&w, "spool");
    const char *real = getenv("SANDTRAIL_KAFKA_BROKERS");
    start(&w, real);

    /* with a spool the answer waits for the disk, Kafka follows shortly */
    ck_assert_int_eq(post(0, 50, &ms), 200);
    for (int i = 0; i < 40 && n < 50; i++) {
        free(dump);
        dump = topic_dump(w.topic, &n);
        usleep(250000);
    }
    ck_assert_int_eq(n, 50);
    free(dump);
    dump = NULL;

    /* Kafka out of reach: answered once on disk, without waiting for it */
    stop();
    start(&w, "127.0.0.1:19099");
    ck_assert_int_eq(post(50, 100, &ms), 200);
    ck_assert_msg(ms < 3000, "the answer waited %.0f ms for Kafka", ms);
    ck_assert_int_eq(post(100, 150, &ms), 200);
    ck_assert_int_eq(post(150, 200, &ms), 200);
    /* stopped with nothing acknowledged: it all stays on disk */
    stop();
    snprintf(cmd, sizeof(cmd), "test -n \"$(ls %s/spool | grep seg)\"", dir);
    ck_assert_msg(system(cmd) == 0, "the spool is empty while Kafka never saw the events");

    /* Kafka within reach again: the spool is produced */
    start(&w, real);
    for (int i = 0; i < 120; i++) {
        free(dump);
        dump = topic_dump(w.topic, &n);
        if (present(dump, 200) == 200)
            break;
        usleep(500000);
    }
    ck_assert_int_eq(present(dump, 200), 200);
    free(dump);
    /* acknowledged segments are deleted (soon after the delivery reports:
     * polled, up to 30 s, since the suite runs eight tests on two cores) */
    snprintf(cmd, sizeof(cmd), "test -z \"$(ls %s/spool | grep seg)\"", dir);
    int emptied = 0;
    for (int i = 0; i < 150 && !emptied; i++) {
        emptied = system(cmd) == 0;
        if (!emptied)
            usleep(200000);
    }
    ck_assert_msg(emptied, "the spool was not emptied");
    stop();
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
    world_drop(&w);
}
END_TEST

int main(void)
{
    if (world_setup())
        return EXIT_FAILURE;
    Suite *s = suite_create("spool");
    TCase *tc = tcase_create("outage");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, spool_keeps_every_event_through_a_kafka_outage);
    suite_add_tcase(s, tc);
    return world_run(s);
}
