/* test_diskfull.c: a full disk under the spool is back-pressure, never an
 * exit (issue 12, item 4). The spool lives on a tmpfs of 2 MiB of the
 * test's own, filled by a dummy file and then freed: --input waits for
 * room and delivers everything; a restarted collector produces what the
 * spool holds before it appends; HTTP answers 503 with Retry-After while
 * the disk is full and 200 once there is room. Against the real Kafka;
 * needs root (mount). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "world.h"

/* Where nothing listens (below the kernel's range for world_free_port):
 * Kafka out of reach. */
#define NO_KAFKA "127.0.0.1:19099"

static char dir[128], mnt[160];
static int port; /* the HTTP collector's, from world_free_port() */

/* A tmpfs of 2 MiB at DIR/mnt; leave_kb left free by a dummy file. */
static void mount_small_disk(int leave_kb)
{
    char cmd[1000];
    snprintf(dir, sizeof(dir), "/tmp/st_diskfull_%d", (int)getpid());
    snprintf(mnt, sizeof(mnt), "%s/mnt", dir);
    snprintf(cmd, sizeof(cmd),
             "rm -rf %s && mkdir -p %s && mount -t tmpfs -o size=2m tmpfs %s && "
             "dd if=/dev/zero of=%s/dummy bs=1k count=%d status=none",
             dir, mnt, mnt, mnt, 2048 - leave_kb);
    ck_assert_msg(system(cmd) == 0, "could not mount a tmpfs (root needed): %s", cmd);
}

static void fill(int leave_kb)
{
    char cmd[800];
    snprintf(cmd, sizeof(cmd), "rm -f %s/dummy; avail=$(df -k --output=avail %s | tail -1);"
             " dd if=/dev/zero of=%s/dummy bs=1k count=$((avail - %d)) status=none",
             mnt, mnt, mnt, leave_kb);
    ck_assert_int_eq(system(cmd), 0);
}

static void unmount_small_disk(void)
{
    char cmd[500];
    snprintf(cmd, sizeof(cmd), "umount %s && rm -rf %s", mnt, dir);
    ck_assert_int_eq(system(cmd), 0);
}

static void write_input(const char *path, const char *tag, int n)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < n; i++)
        fprintf(f,
                "{\"schema\":\"sandtrail.event.v1\",\"event_id\":\"%s-%05d\","
                "\"ts\":\"2026-11-29T16:00:00Z\",\"source\":{\"kind\":\"sandbox\","
                "\"name\":\"sbx\"},\"task_id\":\"T-DF%d\",\"run_id\":\"run-df\","
                "\"type\":\"exec\",\"attrs\":{\"command\":\"make all in a folder whose "
                "name is long enough to make the spool grow\"}}\n",
                tag, i, i % 7);
    fclose(f);
}

/* How many of tag-0 .. tag-(n-1) the dump holds; *twice those seen twice. */
static int present(const char *dump, const char *tag, int n, int *twice)
{
    int found = 0;
    *twice = 0;
    for (int i = 0; i < n; i++) {
        char id[48];
        snprintf(id, sizeof(id), "\"%s-%05d\"", tag, i);
        const char *p = strstr(dump, id);
        found += p != NULL;
        *twice += p && strstr(p + 1, id);
    }
    return found;
}

/* ENOSPC itself (no free-space margin): the input waits for Kafka to take
 * the spool and delete segments, then goes on; exit 0, everything there. */
START_TEST(diskfull_input_waits_on_enospc_and_delivers_everything)
{
    struct world w;
    char in[200];
    int n, twice;
    mount_small_disk(96);
    world_init(&w, "diskfull");
    snprintf(in, sizeof(in), "%s/in.ndjson", dir);
    write_input(in, "df", 4000); /* about 1.2 MB: many times the room left */
    int st = run(&w, w.name, w.name,
                 BIN "/collector/sandtrail-collector --input %s -X spool.registry="
                     " -X spool.dir=%s/spool -X spool.min_free_bytes=0 2>%s/collector.log",
                 in, mnt, dir);
    char path[300];
    snprintf(path, sizeof(path), "%s/collector.log", dir);
    char *log = world_slurp(path);
    ck_assert_msg(st == 0, "exit %d:\n%.3000s", st, log);
    ck_assert_msg(strstr(log, "the disk is full") != NULL, "ENOSPC was never hit:\n%.2000s",
                  log);
    free(log);
    char *dump = topic_dump(w.topic, &n);
    ck_assert_int_eq(present(dump, "df", 4000, &twice), 4000);
    ck_assert_int_eq(twice, 0);
    free(dump);
    unmount_small_disk();
    world_drop(&w);
}
END_TEST

/* Kafka out of reach fills the spool; restarted on a disk with little room
 * left, the collector produces the spool before it appends: it neither
 * exits on ENOSPC nor loses the earlier run's events. */
START_TEST(diskfull_restart_replays_before_appending)
{
    struct world w;
    char in1[200], in2[200];
    int n, twice;
    mount_small_disk(2000);
    world_init(&w, "dfreplay");
    snprintf(in1, sizeof(in1), "%s/in1.ndjson", dir);
    snprintf(in2, sizeof(in2), "%s/in2.ndjson", dir);
    write_input(in1, "r1", 1500);
    write_input(in2, "r2", 1500);
    int st = run(&w, w.name, w.name,
                 BIN "/collector/sandtrail-collector --input %s -X spool.registry="
                     " -X spool.dir=%s/spool -X spool.min_free_bytes=0"
                     " -X kafka.brokers=" NO_KAFKA " -X kafka.delivery.timeout.ms=1000"
                     " 2>%s/first.log",
                 in1, mnt, dir);
    ck_assert_int_eq(st, 2); /* everything left in the spool */
    fill(32);
    st = run(&w, w.name, w.name,
             BIN "/collector/sandtrail-collector --input %s -X spool.registry="
                 " -X spool.dir=%s/spool -X spool.min_free_bytes=0 2>%s/second.log",
             in2, mnt, dir);
    char path[300];
    snprintf(path, sizeof(path), "%s/second.log", dir);
    char *log = world_slurp(path);
    ck_assert_msg(st == 0, "exit %d:\n%.3000s", st, log);
    /* replayed records are not failures */
    ck_assert_msg(strstr(log, " failed=0 ") != NULL, "%s", log);
    free(log);
    char *dump = topic_dump(w.topic, &n);
    ck_assert_int_eq(present(dump, "r1", 1500, &twice), 1500);
    ck_assert_int_eq(twice, 0);
    ck_assert_int_eq(present(dump, "r2", 1500, &twice), 1500);
    ck_assert_int_eq(twice, 0);
    free(dump);
    unmount_small_disk();
    world_drop(&w);
}
END_TEST

static int post(const char *batch, char *headers, size_t hsz)
{
    char cmd[700];
    snprintf(cmd, sizeof(cmd),
             "curl -s -o /dev/null -D %s/headers -w '%%{http_code}' --max-time 20 -H "
             "'Authorization: Bearer df-token-0123456789' --data-binary @%s "
             "http://127.0.0.1:%d/v1/events",
             dir, batch, port);
    char *r = world_sh(cmd);
    int status = atoi(r);
    free(r);
    snprintf(cmd, sizeof(cmd), "%s/headers", dir);
    char *h = world_slurp(cmd);
    snprintf(headers, hsz, "%s", h);
    free(h);
    return status;
}

/* HTTP with a full disk (ENOSPC itself, no free-space margin): a batch
 * that does not fit is answered 503 with Retry-After, and so is every
 * batch while the disk is full, the collector running; 200 once the dummy
 * file is gone. Kafka out of reach: only the disk decides. */
START_TEST(diskfull_http_answers_503_until_there_is_room)
{
    struct world w;
    char batch[200], headers[2000], cmd[900];
    mount_small_disk(2000);
    world_init(&w, "dfhttp");
    snprintf(batch, sizeof(batch), "%s/batch.ndjson", dir);
    write_input(batch, "h", 600); /* about 190 KB */
    snprintf(cmd, sizeof(cmd), "echo 'df-token-0123456789 sandbox sbx' > %s/tokens", dir);
    ck_assert_int_eq(system(cmd), 0);
    fill(100);
    port = world_free_port();
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/collector/sandtrail-collector --listen 127.0.0.1:%d"
                             " -X spool.registry= -X http.tokens_file=%s/tokens"
                             " -X spool.dir=%s/spool -X spool.min_free_bytes=0"
                             " -X kafka.brokers=" NO_KAFKA " 2>%s/collector.log &"
                             " echo \\$! > %s/pid",
                         port, dir, mnt, dir, dir),
                     0);
    int up = 0;
    for (int i = 0; i < 100 && !up; i++) {
        char *r = world_shf("curl -s -o /dev/null -w '%%{http_code}' -X POST "
                            "http://127.0.0.1:%d/v1/events", port);
        up = !strcmp(r, "401");
        free(r);
        if (!up)
            usleep(100000);
    }
    ck_assert_msg(up, "the collector did not start");

    ck_assert_int_eq(post(batch, headers, sizeof(headers)), 503);
    ck_assert_msg(strcasestr(headers, "Retry-After:") != NULL, "%s", headers);
    usleep(1200000);
    ck_assert_int_eq(post(batch, headers, sizeof(headers)), 503);
    /* still running: pushing back, not exited */
    snprintf(cmd, sizeof(cmd), "kill -0 $(cat %s/pid)", dir);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(cmd, sizeof(cmd), "%s/collector.log", dir);
    char *log = world_slurp(cmd);
    ck_assert_msg(strstr(log, "No space left on device") != NULL, "ENOSPC not hit:\n%s", log);
    free(log);

    snprintf(cmd, sizeof(cmd), "rm %s/dummy", mnt);
    ck_assert_int_eq(system(cmd), 0);
    int status = 0;
    for (int i = 0; i < 30 && status != 200; i++) {
        status = post(batch, headers, sizeof(headers));
        if (status != 200)
            usleep(200000);
    }
    ck_assert_int_eq(status, 200);
    snprintf(cmd, sizeof(cmd),
             "pid=$(cat %s/pid); kill $pid; for i in $(seq 1 100); do kill -0 $pid "
             "2>/dev/null || exit 0; sleep 0.1; done; kill -9 $pid; exit 1",
             dir);
    ck_assert_int_eq(system(cmd), 0);
    unmount_small_disk();
    world_drop(&w);
}
END_TEST

/* --follow with a full disk: the tail reads nothing more (nothing is
 * produced, nothing lost) and goes on once there is room. */
START_TEST(diskfull_tail_waits_until_there_is_room)
{
    struct world w;
    char in[200], cmd[900];
    int n = 0, twice;
    mount_small_disk(2000);
    world_init(&w, "dftail");
    snprintf(in, sizeof(in), "%s/followed.ndjson", dir);
    write_input(in, "tw", 50);
    fill(100);
    ck_assert_int_eq(run(&w, w.name, w.name,
                         BIN "/collector/sandtrail-collector --follow %s -X input.poll_ms=50"
                             " -X spool.registry= -X spool.dir=%s/spool"
                             " -X spool.min_free_bytes=262144 2>%s/collector.log &"
                             " echo \\$! > %s/pid",
                         in, mnt, dir, dir),
                     0);
    usleep(4000000);
    char *dump = topic_dump(w.topic, &n);
    ck_assert_int_eq(present(dump, "tw", 50, &twice), 0);
    free(dump);
    snprintf(cmd, sizeof(cmd), "kill -0 $(cat %s/pid)", dir);
    ck_assert_msg(system(cmd) == 0, "the collector stopped");

    snprintf(cmd, sizeof(cmd), "rm %s/dummy", mnt);
    ck_assert_int_eq(system(cmd), 0);
    int found = 0;
    for (int i = 0; i < 40 && found < 50; i++) {
        usleep(500000);
        dump = topic_dump(w.topic, &n);
        found = present(dump, "tw", 50, &twice);
        free(dump);
    }
    ck_assert_int_eq(found, 50);
    ck_assert_int_eq(twice, 0);
    snprintf(cmd, sizeof(cmd),
             "pid=$(cat %s/pid); kill $pid; for i in $(seq 1 100); do kill -0 $pid "
             "2>/dev/null || exit 0; sleep 0.1; done; kill -9 $pid; exit 1",
             dir);
    ck_assert_int_eq(system(cmd), 0);
    unmount_small_disk();
    world_drop(&w);
}
END_TEST

/* A failed test leaves no collector behind (nor, here, a mount). */
static void teardown(void)
{
    char cmd[1000];
    if (!*dir)
        return;
    snprintf(cmd, sizeof(cmd),
             "test -f %s/pid && kill $(cat %s/pid) 2>/dev/null; sleep 0.3;"
             " mountpoint -q %s/mnt && umount %s/mnt; rm -rf %s",
             dir, dir, dir, dir, dir);
    if (system(cmd)) {
        /* nothing was left */
    }
}

int main(void)
{
    if (world_setup())
        return EXIT_FAILURE;
    Suite *s = suite_create("diskfull");
    TCase *tc = tcase_create("tmpfs");
    tcase_set_timeout(tc, 90);
    tcase_add_checked_fixture(tc, NULL, teardown);
    tcase_add_test(tc, diskfull_input_waits_on_enospc_and_delivers_everything);
    tcase_add_test(tc, diskfull_restart_replays_before_appending);
    tcase_add_test(tc, diskfull_http_answers_503_until_there_is_room);
    tcase_add_test(tc, diskfull_tail_waits_until_there_is_room);
    suite_add_tcase(s, tc);
    return world_run(s);
}
