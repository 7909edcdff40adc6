/* test_spool_records.c: the spool's segments without Kafka (spool.c): what
 * a replay hands over, from where, and the registry of spool folders. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "spool.h"

static char dir[128];

/* A replay callback that takes `room` records, then says the queue is full;
 * it writes down which records it took. */
struct taker {
    int room;
    int took[64];
    int64_t toks[64]; /* the token of each record taken */
    int n;
    int64_t seg;
};

static int take(void *arg, int64_t seg, int dlq, const char *topic, const char *key,
                size_t keylen, const char *value, size_t len)
{
    struct taker *t = arg;
    if (t->room <= 0)
        return 1;
    t->room--;
    t->toks[t->n] = seg;
    t->took[t->n++] = atoi(value);
    t->seg = seg;
    return 0;
}

static struct st_spool *open_fresh(void)
{
    char cmd[300], err[256];
    snprintf(dir, sizeof(dir), "/tmp/st_spoolrec_%d", (int)getpid());
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
    struct st_spool *s = st_spool_open(dir, 1 << 30, 0, err, sizeof(err));
    ck_assert_msg(s != NULL, "%s", err);
    return s;
}

static void close_and_remove(struct st_spool *s)
{
    char cmd[300];
    st_spool_close(s);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static int64_t append(struct st_spool *s, int i)
{
    char v[16];
    snprintf(v, sizeof(v), "%d", i);
    return st_spool_append(s, 0, "t", "k", 1, v, strlen(v));
}

/* Records 0..9; the queue took 0..2 and was full at 3: the replay starts at
 * 3, not at 0, and a second full queue resumes where the first replay
 * stopped. The segment goes once everything is acknowledged. */
START_TEST(spool_replay_resumes_at_the_first_unqueued_record)
{
    struct st_spool *s = open_fresh();
    int64_t seg = 0;
    for (int i = 0; i < 10; i++) {
        seg = append(s, i);
        ck_assert_int_gt(seg, 0);
        if (i < 3)
            st_spool_queued(s, seg, 1);
        else if (i == 3)
            st_spool_queued(s, seg, 0);
        /* later records wait behind it */
        ck_assert_int_eq(st_spool_unsent(s, seg), i >= 3);
    }
    ck_assert_int_eq(st_spool_sync(s), 0);

    struct taker t = {.room = 4};
    st_spool_maintain(s, take, &t);
    ck_assert_int_eq(t.n, 4);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(t.took[i], 3 + i);
    for (int i = 0; i < 4; i++)
        st_spool_queued(s, seg, 1);

    t.room = 100;
    t.n = 0;
    st_spool_maintain(s, take, &t);
    ck_assert_int_eq(t.n, 3);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(t.took[i], 7 + i);
        st_spool_queued(s, seg, 1);
    }
    ck_assert_int_eq(st_spool_segments(s), 1);
    for (int i = 0; i < 10; i++)
        st_spool_delivered(s, seg, 1);
    st_spool_maintain(s, take, &t);
    ck_assert_int_eq(st_spool_segments(s), 0);
    ck_assert_int_eq(st_spool_bytes(s), 0);
    close_and_remove(s);
}
END_TEST

/* Failed deliveries: those records again, not the ones Kafka acknowledged
 * beside them (each would be a second copy in the topic), once every
 * report of the segment is in; a record that fails again is produced
 * again, and the segment goes once all of it is acknowledged. */
START_TEST(spool_failed_delivery_replays_that_record_only)
{
    struct st_spool *s = open_fresh();
    int64_t tok[5];
    for (int i = 0; i < 5; i++) {
        tok[i] = append(s, i);
        ck_assert_int_gt(tok[i], 0);
        st_spool_queued(s, tok[i], 1);
    }
    st_spool_sync(s);
    st_spool_delivered(s, tok[3], 0); /* reports come in any order */
    st_spool_delivered(s, tok[1], 0);
    struct taker t = {.room = 100};
    st_spool_maintain(s, take, &t);
    ck_assert_int_eq(t.n, 0); /* three reports still to come */
    st_spool_delivered(s, tok[0], 1);
    st_spool_delivered(s, tok[2], 1);
    st_spool_delivered(s, tok[4], 1);
    st_spool_maintain(s, take, &t);
    ck_assert_int_eq(t.n, 2);
    ck_assert_int_eq(t.took[0], 1);
    ck_assert_int_eq(t.took[1], 3);
    ck_assert_int_eq(t.toks[0], tok[1]);
    ck_assert_int_eq(t.toks[1], tok[3]);

    /* produced again: 1 is acknowledged, 3 fails once more */
    st_spool_queued(s, t.toks[0], 1);
    st_spool_queued(s, t.toks[1], 1);
    st_spool_delivered(s, t.toks[0], 1);
    st_spool_delivered(s, t.toks[1], 0);
    t.n = 0;
    st_spool_maintain(s, take, &t);
    ck_assert_int_eq(t.n, 1);
    ck_assert_int_eq(t.took[0], 3);
    st_spool_queued(s, t.toks[0], 1);
    st_spool_delivered(s, t.toks[0], 1);
    t.n = 0;
    st_spool_maintain(s, take, &t);
    ck_assert_int_eq(t.n, 0);
    ck_assert_int_eq(st_spool_segments(s), 0);
    close_and_remove(s);
}
END_TEST

/* The queue full while failed records are produced again: the next replay
 * goes on with the failed records left, not the acknowledged ones. */
START_TEST(spool_failed_records_resume_after_a_full_queue)
{
    struct st_spool *s = open_fresh();
    int64_t tok[6];
    for (int i = 0; i < 6; i++) {
        tok[i] = append(s, i);
        st_spool_queued(s, tok[i], 1);
    }
    st_spool_sync(s);
    for (int i = 0; i < 6; i++)
        st_spool_delivered(s, tok[i], !(i == 1 || i == 2 || i == 4));
    struct taker t = {.room = 1};
    st_spool_maintain(s, take, &t);
    ck_assert_int_eq(t.n, 1);
    ck_assert_int_eq(t.took[0], 1);
    st_spool_queued(s, t.toks[0], 1);
    st_spool_delivered(s, t.toks[0], 1);
    t.room = 100;
    t.n = 0;
    st_spool_maintain(s, take, &t);
    ck_assert_int_eq(t.n, 2);
    ck_assert_int_eq(t.took[0], 2);
    ck_assert_int_eq(t.took[1], 4);
    for (int i = 0; i < 2; i++) {
        st_spool_queued(s, t.toks[i], 1);
        st_spool_delivered(s, t.toks[i], 1);
    }
    st_spool_maintain(s, take, &t);
    ck_assert_int_eq(st_spool_segments(s), 0);
    close_and_remove(s);
}
END_TEST

/* A segment found at start (a crash, Kafka down at exit): nothing is known
 * of its deliveries, so all of it is produced again. */
START_TEST(spool_found_at_start_replays_the_whole_segment)
{
    char err[256];
    struct st_spool *s = open_fresh();
    for (int i = 0; i < 3; i++)
        st_spool_queued(s, append(s, i), 1);
    st_spool_sync(s);
    st_spool_close(s);
    s = st_spool_open(dir, 1 << 30, 0, err, sizeof(err));
    ck_assert_msg(s != NULL, "%s", err);
    struct taker t = {.room = 100};
    st_spool_maintain(s, take, &t);
    ck_assert_int_eq(t.n, 3);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(t.took[i], i);
    close_and_remove(s);
}
END_TEST

/* A spool left in a folder the configuration no longer names is reported
 * for the input that used it, not for another input, and forgotten once
 * empty. */
START_TEST(spool_registry_reports_a_stranded_folder)
{
    char reg[300], cmd[600], folder[130];
    struct st_spool *s = open_fresh();
    snprintf(folder, sizeof(folder), "%s", dir);
    append(s, 1);
    st_spool_sync(s);
    st_spool_close(s);
    snprintf(reg, sizeof(reg), "%s.registry/spools", folder);

    ck_assert_int_eq(st_spool_registry(reg, "--input /a", folder), 0);
    ck_assert_int_gt(st_spool_registry(reg, "--input /a", NULL), 0);
    ck_assert_int_eq(st_spool_registry(reg, "--input /b", NULL), 0);
    ck_assert_int_gt(st_spool_registry(reg, "--input /a", "/tmp/elsewhere"), 0);
    snprintf(cmd, sizeof(cmd), "rm -f %s/*.seg", folder);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_int_eq(st_spool_registry(reg, "--input /a", NULL), 0);
    ck_assert_int_eq(st_spool_registry("", "--input /a", NULL), 0);
    snprintf(cmd, sizeof(cmd), "rm -rf %s %s.registry", folder, folder);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("spool_records");
    TCase *tc = tcase_create("segments");
    tcase_add_test(tc, spool_replay_resumes_at_the_first_unqueued_record);
    tcase_add_test(tc, spool_failed_delivery_replays_that_record_only);
    tcase_add_test(tc, spool_failed_records_resume_after_a_full_queue);
    tcase_add_test(tc, spool_found_at_start_replays_the_whole_segment);
    tcase_add_test(tc, spool_registry_reports_a_stranded_folder);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
