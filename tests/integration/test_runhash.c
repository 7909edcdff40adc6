/* test_runhash.c: the small states of a checkpoint's runs, every
 * detector's, in the run buckets (runhash.h), against the real Redis:
 *   - three detectors fed the same run in one batch: three fields of the
 *     run's bucket, written with one HSET and the bucket's EXPIRE, then
 *     the same two commands per checkpoint (the EXPIRE renewed);
 *   - runs of one bucket share one HSET, told apart by their fields, and
 *     a run of another bucket gets its own; a field is deleted (HDEL, no
 *     EXPIRE) when its detector's state empties, the key keeping its TTL;
 *   - upgrade: state written by the versions before the buckets loads --
 *     a field of the run's own hash <prefix>run:h:<run> (up to session 11)
 *     and one string <prefix><detector>:s:<run> per detector (up to
 *     session 6); the next write makes the bucket's field and deletes the
 *     older copies after it; an older copy beside a newer one (a crash
 *     between the two) is shadowed and deleted by the next write;
 *   - a run switched to the sorted sets and back beside the other
 *     detectors' fields; a run evicted and reloaded; every checkpoint run
 *     twice;
 *   - the sweep (runidx.h): a run whose index score is older than
 *     state.ttl_s loses its fields and its entry, one written since (in
 *     Redis or only in memory) keeps them, and a part without detectors to
 *     sweep (the global part) reads nothing. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "analyzer.h"
#include "buf.h"
#include "checkpoint.h"
#include "detect.h"
#include "fence.h"
#include "log.h"
#include "rpipe.h"
#include "runblob.h"
#include "runhash.h"
#include "runidx.h"
#include "runkeys.h"
#include "runwin.h"

#define NDET 3
static const char *const names[NDET] = {"da", "db", "dc"};
static struct st_analyzer_conf conf;
static struct st_runwin *wins[NDET];
static struct st_rpipe *p;
static struct st_runhash *rh;
/* the runs' records, shared by the windows as a worker's part shares its
 * (workers.c, runkeys.h) */
static struct st_runkeys *keys;
static char prefix[64];
static unsigned long last_sent;
static size_t last_n[NDET];
static struct st_detect_stats stats;

static int count_window(void *arg, const struct st_runwin_view *v)
{
    *(size_t *)arg = v->n;
    return 0;
}

/* every detector's windows, empty: one minute, kept 2 x window + 30 s */
static void new_wins(void)
{
    int64_t win = 60000000;
    for (int d = 0; d < NDET; d++)
        wins[d] = st_runwin_new(&conf, names[d], win, 2 * win + 30000000, 0, 0);
}

static void open_all(const char *tag)
{
    char err[256];
    snprintf(prefix, sizeof(prefix), "st_runhash_%d_%s:", (int)getpid(), tag);
    memset(&conf, 0, sizeof(conf));
    conf.redis_prefix = prefix;
    conf.state_ttl_s = 86400;
    conf.state_blob_max = 4096; /* the sizes below are made for it */
    conf.state_evict_s = 600;
    const char *url = getenv("SANDTRAIL_REDIS_URL");
    ck_assert_msg(url != NULL, "the services' environment: scripts/services env");
    p = st_rpipe_new(url, NULL, err, sizeof(err));
    ck_assert_msg(p != NULL, "%s", err);
    keys = st_runkeys_new();
    new_wins();
    rh = st_runhash_new(&conf);
}

/* drops every detector's memory (a restart) */
static void restart(void)
{
    for (int d = 0; d < NDET; d++)
        st_runwin_destroy(wins[d]);
    new_wins();
}

static void close_all(void)
{
    char err[256];
    struct st_buf b;
    st_buf_init(&b);
    const char *h = st_detect_run_hash_key_buf(&b, &conf, "task", "run");
    const char *d0[] = {"DEL", h};
    st_rpipe_cmd(p, NULL, NULL, 2, d0);
    for (uint64_t k = 0; k < ST_DETECT_RUN_BUCKETS; k++) {
        const char *bk = st_detect_run_bucket_key_buf(&b, &conf, k);
        const char *d1[] = {"DEL", bk};
        st_rpipe_cmd(p, NULL, NULL, 2, d1);
    }
    char *ik = st_detect_index_key(&conf, 0), *lk = st_detect_index_log_key(&conf, 0);
    const char *d2[] = {"DEL", ik, lk};
    st_rpipe_cmd(p, NULL, NULL, 3, d2);
    free(ik);
    free(lk);
    for (int d = 0; d < NDET; d++) {
        char *k = st_detect_key(&conf, names[d], "s", "task", "run");
        char *kw = st_detect_key(&conf, names[d], "w", "task", "run");
        char *ke = st_detect_key(&conf, names[d], "eps", "task", "run");
        char *kl = st_detect_key(&conf, names[d], "l", "task", "run");
        const char *del[] = {"DEL", k, kw, ke, kl};
        st_rpipe_cmd(p, NULL, NULL, 5, del);
        free(kl);
        free(k);
        free(kw);
        free(ke);
        st_runwin_destroy(wins[d]);
    }
    st_rpipe_exec(p, err, sizeof(err));
    st_buf_fini(&b);
    ck_assert_uint_eq(st_runkeys_count(keys), 0); /* freed with the windows */
    st_runkeys_destroy(keys);
    st_runhash_destroy(rh);
    st_rpipe_destroy(p);
}

/* One batch: event id of run "task"/"run" at ts fed to the detectors in
 * mask, each detector's end_batch into the shared runhash (workers.c's
 * part_end_batch), its flush, the checkpoint run, then the commit. */
static const char *payload = "{}";
static int64_t now_s; /* the batches' wall clock (eviction); 0: time() */
static int twice;     /* run each batch's checkpoint a second time (a redo) */

/* every detector's end_batch into the shared runhash, its flush, and the
 * checkpoint run (twice with twice); last_sent its commands */
static void end_batch(struct st_detect_ctx *ctx)
{
    char err[256];
    for (int d = 0; d < NDET; d++)
        st_runwin_end_batch(wins[d], ctx);
    st_runhash_flush(rh, ctx->ckpt);
    unsigned long before = st_rpipe_sent(p);
    ck_assert_msg(st_checkpoint_exec(ctx->ckpt, p, err, sizeof(err)) == 0, "%s", err);
    last_sent = st_rpipe_sent(p) - before;
    if (twice)
        ck_assert_msg(st_checkpoint_exec(ctx->ckpt, p, err, sizeof(err)) == 0, "%s", err);
}

static void batch(uint64_t seq, int mask, const char *id, int64_t ts)
{
    char err[256];
    struct st_event ev = {0};
    ev.event_id = id;
    ev.ts_us = ts;
    ev.source_name = "s";
    ev.task_id = "task";
    ev.run_id = "run";
    struct st_checkpoint *ck = st_checkpoint_new();
    struct st_detect_ctx ctx = {.redis = p, .conf = &conf, .runkeys = keys, .ckpt = ck, .seq = seq,
                                .runhash = rh, .stats = &stats, .now_s = now_s};
    for (int d = 0; d < NDET; d++) {
        st_runwin_begin(wins[d], 1);
        if (mask & (1 << d))
            st_runwin_prefetch(wins[d], &ctx, &ev);
    }
    ck_assert_int_eq(st_rpipe_exec(p, err, sizeof(err)), 0);
    for (int d = 0; d < NDET; d++)
        if (mask & (1 << d))
            st_runwin_feed(wins[d], &ctx, &ev, payload, 0, count_window, &last_n[d]);
    end_batch(&ctx);
    for (int d = 0; d < NDET; d++)
        st_runwin_after_commit(wins[d], &ctx);
    st_checkpoint_destroy(ck);
}

/* the checkpoint of the trims the last batch allowed (no event) */
static void trims_only(uint64_t seq)
{
    struct st_checkpoint *ck = st_checkpoint_new();
    struct st_detect_ctx ctx = {.redis = p, .conf = &conf, .runkeys = keys, .ckpt = ck, .seq = seq,
                                .runhash = rh};
    end_batch(&ctx);
    st_checkpoint_destroy(ck);
}

static long long int_reply;
static struct st_buf str_reply;
static int str_nil;

static int on_int(const redisReply *r, void *arg)
{
    (void)arg;
    int_reply = r->integer;
    return 0;
}

static int on_str(const redisReply *r, void *arg)
{
    (void)arg;
    str_nil = r->type == REDIS_REPLY_NIL;
    st_buf_reset(&str_reply);
    if (!str_nil)
        st_buf_add(&str_reply, r->str, r->len);
    st_buf_addc(&str_reply, '\0');
    str_reply.len--;
    return 0;
}

static long long redis_int(int argc, const char **argv)
{
    char err[256];
    st_rpipe_cmd(p, on_int, NULL, argc, argv);
    ck_assert_msg(st_rpipe_exec(p, err, sizeof(err)) == 0, "%s", err);
    return int_reply;
}

/* The newest score of task/run's entry in partition part's run index,
 * over its log and the sorted set older releases wrote; -1: none. */
static int64_t index_score(int32_t part, const char *run)
{
    char err[256];
    char *ik = st_detect_index_key(&conf, part), *lk = st_detect_index_log_key(&conf, part);
    char *m = st_detect_run_member("task", run);
    int64_t best = -1;
    const char *zs[] = {"ZSCORE", ik, m};
    st_rpipe_cmd(p, on_str, NULL, 3, zs);
    ck_assert_msg(st_rpipe_exec(p, err, sizeof(err)) == 0, "%s", err);
    if (!str_nil)
        best = strtoll(str_reply.data, NULL, 10);
    const char *get[] = {"GET", lk};
    st_rpipe_cmd(p, on_str, NULL, 2, get);
    ck_assert_msg(st_rpipe_exec(p, err, sizeof(err)) == 0, "%s", err);
    size_t ml = strlen(m);
    for (const char *r = str_nil ? NULL : str_reply.data; r && *r;) {
        const char *nl = strchr(r, '\n'), *sp = strchr(r, ' ');
        ck_assert_msg(nl && sp && sp < nl, "a log record without its parts: %s", r);
        if ((size_t)(nl - sp - 1) == ml && !memcmp(sp + 1, m, ml)) {
            int64_t t = strtoll(r, NULL, 10);
            best = t > best ? t : best;
        }
        r = nl + 1;
    }
    free(m);
    free(ik);
    free(lk);
    return best;
}

static char hkey[256], fkey[256];

/* the bucket of task/run (detect.h) */
static const char *hash_key(void)
{
    struct st_buf b;
    st_buf_init(&b);
    snprintf(hkey, sizeof(hkey), "%s",
             st_detect_run_bucket_key_buf(&b, &conf, st_runidx_hash("task", "run")));
    st_buf_fini(&b);
    return hkey;
}

/* run's field of detector name in its bucket */
static const char *field_of(const char *run, const char *name)
{
    struct st_buf b;
    st_buf_init(&b);
    snprintf(fkey, sizeof(fkey), "%s", st_detect_run_field_buf(&b, "task", run, name));
    st_buf_fini(&b);
    return fkey;
}

/* how many of the detectors' fields of run the bucket key holds */
static long long run_fields(const char *key, const char *run)
{
    long long n = 0;
    for (int d = 0; d < NDET; d++) {
        const char *c[] = {"HEXISTS", key, field_of(run, names[d])};
        n += redis_int(3, c);
    }
    return n;
}

/* the fields of task/run in its bucket */
static long long hlen(void)
{
    return run_fields(hash_key(), "run");
}

static long long ttl(void)
{
    const char *c[] = {"TTL", hash_key()};
    return redis_int(2, c);
}

/* members of detector d's field (-1: none) */
static long field_members(int d)
{
    char err[256];
    const char *c[] = {"HGET", hash_key(), field_of("run", names[d])};
    st_rpipe_cmd(p, on_str, NULL, 3, c);
    ck_assert_msg(st_rpipe_exec(p, err, sizeof(err)) == 0, "%s", err);
    if (str_nil)
        return -1;
    struct st_runblob_reader rd;
    uint64_t n;
    ck_assert_int_eq(st_runblob_open(&rd, str_reply.data, str_reply.len), 0);
    ck_assert_int_eq(st_runblob_get_count(&rd, &n), 0);
    return (long)n;
}

static long long old_exists(int d)
{
    char *k = st_detect_key(&conf, names[d], "s", "task", "run");
    const char *c[] = {"EXISTS", k};
    long long n = redis_int(2, c);
    free(k);
    return n;
}

/* an older version's state of detector d: one member, event id; the
 * string of the versions before the run's hash (legacy 0), or the field
 * of the run's own hash of the versions before the buckets (legacy 1) */
static void write_older(int d, const char *id, int64_t ts, int legacy)
{
    char err[256];
    struct st_buf b;
    st_buf_init(&b);
    int64_t prev;
    st_runblob_start(&b, &prev);
    st_runblob_count(&b, 1);
    char member[64];
    int ml = snprintf(member, sizeof(member), "s\x1f%s\x1f{}", id);
    st_runblob_member(&b, &prev, ts, member, (size_t)ml);
    st_runblob_count(&b, 0);
    st_runblob_count(&b, 0);
    char *k = st_detect_key(&conf, names[d], "s", "task", "run");
    const char *set[] = {"SET", k, b.data, "EX", "86400"};
    size_t lens[] = {3, strlen(k), b.len, 2, 5};
    struct st_buf hk;
    st_buf_init(&hk);
    const char *hset[] = {"HSET", st_detect_run_hash_key_buf(&hk, &conf, "task", "run"), names[d],
                          b.data};
    size_t hlens[] = {4, hk.len, strlen(names[d]), b.len};
    struct st_checkpoint *ck = st_checkpoint_new();
    if (legacy)
        st_checkpoint_cmd_lens(ck, 4, hset, hlens);
    else
        st_checkpoint_cmd_lens(ck, 5, set, lens);
    st_buf_fini(&hk);
    ck_assert_int_eq(st_checkpoint_exec(ck, p, err, sizeof(err)), 0);
    st_checkpoint_destroy(ck);
    free(k);
    st_buf_fini(&b);
}

static void write_old(int d, const char *id, int64_t ts)
{
    write_older(d, id, ts, 0);
}

/* whether the run's own hash (before the buckets) holds detector d's field */
static long long legacy_exists(int d)
{
    struct st_buf b;
    st_buf_init(&b);
    const char *c[] = {"HEXISTS", st_detect_run_hash_key_buf(&b, &conf, "task", "run"), names[d]};
    long long n = redis_int(3, c);
    st_buf_fini(&b);
    return n;
}

static const int64_t T = 1700000000000000LL, MIN10 = 600000000LL;

START_TEST(runhash_one_command_per_bucket)
{
    open_all("one");
    batch(1, 7, "e1", T);
    ck_assert_uint_eq(last_sent, 2); /* HSET of three fields, the bucket's EXPIRE */
    ck_assert_int_eq(hlen(), 3);
    ck_assert_uint_eq(st_runkeys_count(keys), 1); /* one record for the three windows */
    for (int d = 0; d < NDET; d++) {
        ck_assert_int_eq(field_members(d), 1);
        ck_assert_int_eq(old_exists(d), 0);
    }
    long long t = ttl();
    ck_assert_msg(t > 86000 && t <= 86400, "TTL %lld", t);
    batch(2, 7, "e2", T + 1000000);
    ck_assert_uint_eq(last_sent, 2); /* one HSET, the EXPIRE renewed */
    for (int d = 0; d < NDET; d++)
        ck_assert_int_eq(field_members(d), 2);
    batch(3, 2, "e3", T + 2000000); /* one detector: its field alone */
    ck_assert_uint_eq(last_sent, 2);
    ck_assert_int_eq(field_members(0), 2);
    ck_assert_int_eq(field_members(1), 3);
    t = ttl();
    ck_assert_msg(t > 86000 && t <= 86400, "TTL %lld", t);
    /* ten minutes on: the older members trimmed once it commits, the
     * three detectors' trims in the next checkpoint's one HSET */
    batch(4, 7, "e4", T + MIN10);
    ck_assert_uint_eq(last_sent, 2);
    trims_only(5);
    ck_assert_uint_eq(last_sent, 2);
    for (int d = 0; d < NDET; d++)
        ck_assert_int_eq(field_members(d), 1);
    /* reloaded after a restart: each detector's window from its field */
    restart();
    batch(6, 7, "e5", T + MIN10 + 1000000);
    for (int d = 0; d < NDET; d++)
        ck_assert_uint_eq(last_n[d], 2);
    ck_assert_uint_eq(last_sent, 2);
    close_all();
}
END_TEST

static unsigned long flush_run(void)
{
    char err[256];
    struct st_checkpoint *ck = st_checkpoint_new();
    st_runhash_flush(rh, ck);
    unsigned long n = st_checkpoint_len(ck);
    ck_assert_msg(st_checkpoint_exec(ck, p, err, sizeof(err)) == 0, "%s", err);
    st_checkpoint_destroy(ck);
    ck_assert_uint_eq(st_runhash_pending(rh), 0);
    return n;
}

/* runhash itself: fields of one run put by several detectors, among
 * another run's of the same bucket (the same hash value: told apart by
 * their fields), go in one HSET per bucket and its EXPIRE; a run of
 * another bucket in one of its own; an emptied state is an HDEL of its
 * field, with no EXPIRE (the fields left keep the key's TTL). */
START_TEST(runhash_delete_when_every_state_is_empty)
{
    open_all("del");
    const char *v = "\x01\x00\x00\x00";
    uint64_t h = st_runidx_hash("task", "run");
    /* run, then run2, then run again, then run2: one HSET, one EXPIRE */
    st_runhash_put(rh, h, "task", "run", "da", v, 4);
    st_runhash_put(rh, h, "task", "run2", "da", v, 4);
    st_runhash_put(rh, h, "task", "run", "db", v, 4);
    st_runhash_put(rh, h, "task", "run2", "db", v, 4);
    st_runhash_put(rh, h, "task", "run", "dc", v, 4);
    ck_assert_uint_eq(st_runhash_pending(rh), 5);
    ck_assert_uint_eq(flush_run(), 2);
    ck_assert_int_eq(hlen(), 3);
    ck_assert_int_eq(run_fields(hash_key(), "run2"), 2);
    const char *lc[] = {"HLEN", hash_key()};
    ck_assert_int_eq(redis_int(2, lc), 5);
    long long t = ttl();
    ck_assert_msg(t > 86000 && t <= 86400, "TTL %lld", t);
    /* a run of another bucket, with one of this bucket: an HSET and an
     * EXPIRE each */
    st_runhash_put(rh, h + 1, "task", "run3", "da", v, 4);
    st_runhash_put(rh, h, "task", "run4", "da", v, 4);
    ck_assert_uint_eq(flush_run(), 4);
    struct st_buf b;
    st_buf_init(&b);
    const char *k3 = st_detect_run_bucket_key_buf(&b, &conf, h + 1);
    ck_assert_str_ne(k3, hash_key());
    ck_assert_int_eq(run_fields(k3, "run3"), 1);
    ck_assert_int_eq(run_fields(hash_key(), "run4"), 1);
    const char *tc[] = {"TTL", k3};
    t = redis_int(2, tc);
    ck_assert_msg(t > 86000 && t <= 86400, "TTL %lld", t);
    st_buf_fini(&b);
    /* one state emptied: its field goes, the key keeps its TTL */
    const char *px[] = {"PERSIST", hash_key()};
    redis_int(2, px); /* so that an EXPIRE sent would show */
    st_runhash_put(rh, h, "task", "run", "da", NULL, 0);
    ck_assert_uint_eq(flush_run(), 1); /* HDEL alone: no EXPIRE */
    ck_assert_int_eq(hlen(), 2);
    ck_assert_int_eq(ttl(), -1);
    /* a field written and one deleted in one checkpoint: HSET, HDEL, EXPIRE */
    st_runhash_put(rh, h, "task", "run", "db", v, 4);
    st_runhash_put(rh, h, "task", "run", "dc", NULL, 0);
    ck_assert_uint_eq(flush_run(), 3);
    ck_assert_int_eq(hlen(), 1);
    t = ttl();
    ck_assert_msg(t > 86000 && t <= 86400, "TTL %lld", t);
    /* the run's last one: its fields gone, the other runs' stay */
    st_runhash_put(rh, h, "task", "run", "db", NULL, 0);
    ck_assert_uint_eq(flush_run(), 1);
    ck_assert_int_eq(hlen(), 0);
    ck_assert_int_eq(run_fields(hash_key(), "run2"), 2);
    close_all();
}
END_TEST

/* Commands of 64 KB or more go to the checkpoint as the bucket's own
 * buffer, their head written in the room before their arguments
 * (st_checkpoint_cmd_take): 4,000 fields set (an HSET of about 520 KB)
 * and, a checkpoint later, 3,000 of them deleted (an HDEL of about 72 KB)
 * with 3,000 more set, each after a small command already in the
 * checkpoint and before the bucket's EXPIRE; the checkpoint reused, so
 * that the buffers it gave back to the buckets are the ones written.
 * Redis must hold exactly the fields and values put. */
static void put_many(uint64_t h, const char *pfx, int from, int to, int del)
{
    char run[32], val[128];
    for (int i = from; i < to; i++) {
        snprintf(run, sizeof(run), "%s%d", pfx, i);
        int n = snprintf(val, sizeof(val), "%0100d", i);
        st_runhash_put(rh, h, "task", run, "da", del ? NULL : val, del ? 0 : (size_t)n);
    }
}

START_TEST(runhash_large_commands_move_whole)
{
    char err[256];
    open_all("big");
    uint64_t h = st_runidx_hash("task", "run");
    struct st_checkpoint *ck = st_checkpoint_new();
    const char *ping[] = {"PING"};
    for (int round = 0; round < 2; round++) {
        st_checkpoint_clear(ck);
        st_checkpoint_cmd(ck, 1, ping);
        if (round == 0)
            put_many(h, "a", 0, 4000, 0);
        else {
            put_many(h, "a", 0, 3000, 1);
            put_many(h, "b", 0, 3000, 0);
        }
        st_runhash_flush(rh, ck);
        st_checkpoint_cmd(ck, 1, ping);
        /* PING, HSET, (HDEL,) EXPIRE, PING */
        ck_assert_uint_eq(st_checkpoint_len(ck), round ? 5 : 4);
        ck_assert_msg(st_checkpoint_exec(ck, p, err, sizeof(err)) == 0, "%s", err);
    }
    st_checkpoint_destroy(ck);
    const char *lc[] = {"HLEN", hash_key()};
    ck_assert_int_eq(redis_int(2, lc), 4000);
    ck_assert_int_eq(run_fields(hash_key(), "a2999"), 0);
    ck_assert_int_eq(run_fields(hash_key(), "a3000"), 1);
    ck_assert_int_eq(run_fields(hash_key(), "b2999"), 1);
    const char *get[] = {"HGET", hash_key(), field_of("b1234", "da")};
    st_rpipe_cmd(p, on_str, NULL, 3, get);
    ck_assert_msg(st_rpipe_exec(p, err, sizeof(err)) == 0, "%s", err);
    char want[128];
    snprintf(want, sizeof(want), "%0100d", 1234);
    ck_assert_str_eq(str_reply.data, want);
    long long t = ttl();
    ck_assert_msg(t > 86000 && t <= 86400, "TTL %lld", t);
    close_all();
}
END_TEST

/* Upgrade: the older versions' strings and run hashes load; the next
 * write makes the bucket's field and deletes them; an older copy beside a
 * newer one is shadowed. */
START_TEST(runhash_old_strings_load_and_go)
{
    open_all("old");
    write_old(0, "o0", T);
    write_old(1, "o1", T);
    write_older(2, "h2", T, 1);
    batch(1, 7, "e1", T + 1000000);
    ck_assert_uint_eq(last_n[0], 2); /* the old string's member and e1 */
    ck_assert_uint_eq(last_n[1], 2);
    ck_assert_uint_eq(last_n[2], 2); /* the run hash's member and e1 */
    for (int d = 0; d < NDET; d++) {
        ck_assert_int_eq(old_exists(d), 0);
        ck_assert_int_eq(legacy_exists(d), 0);
    }
    ck_assert_int_eq(field_members(0), 2);
    ck_assert_int_eq(field_members(1), 2);
    ck_assert_int_eq(field_members(2), 2);
    long long t = ttl();
    ck_assert_msg(t > 86000 && t <= 86400, "TTL %lld", t);
    /* a string beside a field (a crash between the field's HSET and the
     * string's DEL, or an old process writing still): the field wins */
    write_old(0, "stale", T - 1000000);
    restart();
    batch(2, 1, "e2", T + 2000000);
    ck_assert_uint_eq(last_n[0], 3); /* o0, e1, e2: not "stale" */
    ck_assert_int_eq(old_exists(0), 0);
    ck_assert_int_eq(field_members(0), 3);
    /* a field not in our format: ignored and counted (its detector's run
     * starts without it, the old string beside it shadowed all the same),
     * replaced by the next write; the other fields load */
    char err[256];
    const char *bad[] = {"HSET", hash_key(), field_of("run", names[0]), "\x02junk"};
    st_rpipe_cmd(p, NULL, NULL, 4, bad);
    ck_assert_int_eq(st_rpipe_exec(p, err, sizeof(err)), 0);
    write_old(0, "stale", T - 1000000);
    /* and a run hash's field beside a bucket's (a crash between the two):
     * the bucket's wins, the other goes with the next write */
    write_older(1, "stale", T - 1000000, 1);
    restart();
    memset(&stats, 0, sizeof(stats));
    batch(3, 3, "e3", T + 3000000);
    ck_assert_int_eq(stats.malformed, 1);
    ck_assert_uint_eq(last_n[0], 1); /* e3 alone */
    ck_assert_uint_eq(last_n[1], 3); /* o1, e1, e3: not "stale" */
    ck_assert_int_eq(field_members(0), 1);
    ck_assert_int_eq(old_exists(0), 0);
    ck_assert_int_eq(legacy_exists(1), 0);
    close_all();
}
END_TEST

static long log_len; /* on_log: -2 no log, -1 not a log, else its members */

static int on_log(const redisReply *r, void *arg)
{
    (void)arg;
    if (r->type == REDIS_REPLY_NIL)
        log_len = -2;
    else if (r->type == REDIS_REPLY_STRING)
        log_len = st_runblob_log_count(r->str, r->len);
    else
        return -1;
    return 0;
}

/* the members of detector d's log (runblob.h; 0 without one) */
static long long zcard(int d)
{
    char err[256];
    char *k = st_detect_key(&conf, names[d], "l", "task", "run");
    const char *c[] = {"GET", k};
    log_len = -2;
    st_rpipe_cmd(p, on_log, NULL, 2, c);
    ck_assert_msg(st_rpipe_exec(p, err, sizeof(err)) == 0, "%s", err);
    free(k);
    ck_assert_int_ne(log_len, -1); /* a log */
    return log_len < 0 ? 0 : log_len;
}

/* A run's state grown past the string's limit leaves the hash for the
 * sorted sets (its field deleted in the switch's MULTI, the other
 * detectors' fields and the key's TTL kept) and comes back to it once
 * trimmed small (the sets deleted); a reload in each layout reads what
 * the last write left, never a stale field beside the sets or the
 * reverse. */
START_TEST(runhash_switch_to_sets_and_back)
{
    open_all("sw");
    batch(1, 7, "e1", T);
    ck_assert_int_eq(hlen(), 3);
    /* da alone fed a member of 5000 bytes: to the sorted sets */
    char *big = malloc(5001);
    memset(big, 'x', 5000);
    big[5000] = '\0';
    payload = big;
    batch(2, 1, "big", T + 1000000);
    payload = "{}";
    ck_assert_int_eq(field_members(0), -1);
    ck_assert_int_eq(zcard(0), 2);
    ck_assert_int_eq(hlen(), 2);
    long long t = ttl();
    ck_assert_msg(t > 86000 && t <= 86400, "TTL %lld", t);
    /* reloaded: da from its sets, the others from their fields */
    restart();
    batch(3, 7, "e2", T + 2000000);
    ck_assert_uint_eq(last_n[0], 3);
    ck_assert_uint_eq(last_n[1], 2);
    ck_assert_uint_eq(last_n[2], 2);
    ck_assert_int_eq(field_members(0), -1);
    ck_assert_int_eq(zcard(0), 3);
    /* ten minutes on, trimmed: da below the limit comes back to its field
     * (the sets deleted), beside the others' */
    batch(4, 7, "e3", T + MIN10);
    trims_only(5);
    ck_assert_int_eq(zcard(0), 0);
    for (int d = 0; d < NDET; d++)
        ck_assert_int_eq(field_members(d), 1);
    ck_assert_int_eq(hlen(), 3);
    t = ttl();
    ck_assert_msg(t > 86000 && t <= 86400, "TTL %lld", t);
    restart();
    batch(6, 7, "e4", T + MIN10 + 1000000);
    for (int d = 0; d < NDET; d++)
        ck_assert_uint_eq(last_n[d], 2);
    free(big);
    close_all();
}
END_TEST

/* A run evicted from memory and loaded again: its detectors' fields as
 * they were. */
START_TEST(runhash_evicted_run_reloads_and_expires)
{
    open_all("ev");
    now_s = 1000;
    batch(1, 7, "e1", T);
    batch(2, 7, "e2", T + 1000000);
    ck_assert_uint_eq(last_sent, 2);
    /* idle past state.evict_s: every detector's run evicted */
    struct st_detect_ctx ctx = {.redis = p, .conf = &conf, .runkeys = keys, .seq = 2, .runhash = rh,
                                .stats = &stats, .now_s = now_s + conf.state_evict_s + 1};
    memset(&stats, 0, sizeof(stats));
    for (int d = 0; d < NDET; d++)
        st_runwin_after_commit(wins[d], &ctx);
    ck_assert_int_eq(stats.evictions, NDET);
    ck_assert_uint_eq(st_runkeys_count(keys), 0); /* gone with its last window's run */
    now_s += conf.state_evict_s + 2;
    batch(3, 7, "e3", T + 2000000);
    for (int d = 0; d < NDET; d++) {
        ck_assert_uint_eq(last_n[d], 3);
        ck_assert_int_eq(field_members(d), 3);
    }
    ck_assert_uint_eq(last_sent, 2); /* HSET and EXPIRE */
    long long t = ttl();
    ck_assert_msg(t > 86000 && t <= 86400, "TTL %lld", t);
    now_s = 0;
    close_all();
}
END_TEST

/* Every checkpoint run twice (a redo of one whose reply was lost): the
 * upgrade's MULTI (field set, old string deleted), the plain HSETs, the
 * switch to the sorted sets and back leave what running each once does. */
START_TEST(runhash_checkpoints_run_twice_change_nothing)
{
    open_all("tw");
    twice = 1;
    write_old(0, "o0", T);
    batch(1, 7, "e1", T + 1000000);
    batch(2, 7, "e2", T + 2000000);
    char *big = malloc(5001);
    memset(big, 'x', 5000);
    big[5000] = '\0';
    payload = big;
    batch(3, 1, "big", T + 3000000);
    payload = "{}";
    ck_assert_int_eq(old_exists(0), 0);
    ck_assert_int_eq(field_members(0), -1);
    ck_assert_int_eq(zcard(0), 4);
    ck_assert_int_eq(field_members(1), 2);
    batch(4, 7, "e3", T + MIN10);
    trims_only(5);
    ck_assert_int_eq(zcard(0), 0);
    for (int d = 0; d < NDET; d++)
        ck_assert_int_eq(field_members(d), 1);
    long long t = ttl();
    ck_assert_msg(t > 86000 && t <= 86400, "TTL %lld", t);
    twice = 0;
    restart();
    batch(6, 7, "e4", T + MIN10 + 1000000);
    for (int d = 0; d < NDET; d++)
        ck_assert_uint_eq(last_n[d], 2);
    free(big);
    close_all();
}
END_TEST

/* A run whose windows' states sit on two partitions (a window's made after
 * the topic gained partitions, the task keyed to another): one checkpoint
 * writing both notes the run in both partitions' indexes, though the
 * windows share one record and note it once per partition. */
START_TEST(runhash_run_noted_in_each_partition_its_windows_are_on)
{
    open_all("np");
    char err[256];
    int64_t now = (int64_t)time(NULL);
    struct st_runidx *x = st_runidx_new(&conf);
    struct st_event ev = {0};
    ev.event_id = "e1";
    ev.ts_us = T;
    ev.source_name = "s";
    ev.task_id = "task";
    ev.run_id = "run";
    struct st_checkpoint *ck = st_checkpoint_new();
    struct st_detect_ctx ctx = {.redis = p, .conf = &conf, .runkeys = keys, .ckpt = ck,
                                .seq = 1, .runhash = rh, .runidx = x, .now_s = now};
    for (int d = 0; d < 2; d++)
        st_runwin_begin(wins[d], 1);
    for (int d = 0; d < 2; d++) {
        ctx.partition = d; /* da's state on partition 0, db's on 1 */
        st_runwin_prefetch(wins[d], &ctx, &ev);
    }
    ck_assert_int_eq(st_rpipe_exec(p, err, sizeof(err)), 0);
    for (int d = 0; d < 2; d++) {
        ctx.partition = d;
        st_runwin_feed(wins[d], &ctx, &ev, payload, 0, count_window, &last_n[d]);
    }
    ck_assert_uint_eq(st_runkeys_count(keys), 1);
    for (int d = 0; d < 2; d++)
        st_runwin_end_batch(wins[d], &ctx);
    st_runhash_flush(rh, ck);
    st_runidx_flush(x, ck, now);
    ck_assert_msg(st_checkpoint_exec(ck, p, err, sizeof(err)) == 0, "%s", err);
    for (int32_t part = 0; part < 2; part++) {
        ck_assert_msg(index_score(part, "run") == now, "run not in partition %d's index",
                      (int)part);
        char *ik = st_detect_index_key(&conf, part), *lk = st_detect_index_log_key(&conf, part);
        const char *del[] = {"DEL", ik, lk};
        redis_int(3, del);
        free(ik);
        free(lk);
    }
    for (int d = 0; d < 2; d++)
        st_runwin_after_commit(wins[d], &ctx);
    st_checkpoint_destroy(ck);
    st_runidx_destroy(x);
    close_all();
}
END_TEST

/* The sweep tests' helpers: partition 0, state.ttl_s 60, the fields
 * written through the runhash, the index entries straight into Redis. */
static const char *const sweep_dets[] = {"da", "db", "dc"};

/* run's fields of the first nf detectors, and its entry scored age s ago:
 * a record of the index's log, or (legacy) a member of the sorted set an
 * older release wrote */
static void seed_run_in(const char *run, int nf, int64_t now, int64_t age, int legacy)
{
    for (int d = 0; d < nf; d++)
        st_runhash_put(rh, st_runidx_hash("task", run), "task", run, sweep_dets[d],
                       "\x01\x00\x00\x00", 4);
    flush_run();
    char score[32];
    snprintf(score, sizeof(score), "%lld", (long long)(now - age));
    char *m = st_detect_run_member("task", run);
    if (legacy) {
        char *ik = st_detect_index_key(&conf, 0);
        const char *za[] = {"ZADD", ik, score, m};
        redis_int(4, za);
        free(ik);
    } else {
        char *lk = st_detect_index_log_key(&conf, 0), rec[256];
        snprintf(rec, sizeof(rec), "%s %s\n", score, m);
        const char *ap[] = {"APPEND", lk, rec};
        redis_int(3, ap);
        free(lk);
    }
    free(m);
}

static void seed_run(const char *run, int nf, int64_t now, int64_t age)
{
    seed_run_in(run, nf, now, age, 0);
}

/* A part's index of partition 0, loaded, trusted, sweeping the first nd
 * detectors (0: none, like the global part) */
static struct st_runidx *sweeper(int nd)
{
    char err[256];
    struct st_runidx *x = st_runidx_new(&conf);
    if (nd)
        st_runidx_set_sweep(x, sweep_dets, nd);
    st_runidx_set_since(x, 0); /* a fresh prefix */
    ck_assert_msg(st_runidx_check(x, p, 1, err, sizeof(err)) == 0, "%s", err);
    st_runidx_begin(x);
    ck_assert_int_eq(st_runidx_queue_load(x, p, 0), 1);
    ck_assert_int_eq(st_rpipe_exec(p, err, sizeof(err)), 0);
    return x;
}

/* One batch's sweep at now: its read (returns whether one was due) and its
 * flush's deletions, run */
static int sweep_at(struct st_runidx *x, int64_t now)
{
    char err[256];
    st_runidx_begin(x);
    int queued = st_runidx_queue_sweeps(x, p, now);
    ck_assert_int_eq(st_rpipe_exec(p, err, sizeof(err)), 0);
    struct st_checkpoint *ck = st_checkpoint_new();
    st_runidx_flush(x, ck, now);
    ck_assert_int_eq(st_checkpoint_exec(ck, p, err, sizeof(err)), 0);
    st_checkpoint_destroy(ck);
    return queued;
}

/* how many of the detectors' fields, among the first nd, run has */
static long long fields_of(const char *run, int nd)
{
    struct st_buf b;
    st_buf_init(&b);
    char key[256];
    snprintf(key, sizeof(key), "%s",
             st_detect_run_bucket_key_buf(&b, &conf, st_runidx_hash("task", run)));
    st_buf_fini(&b);
    long long n = 0;
    for (int d = 0; d < nd; d++) {
        const char *c[] = {"HEXISTS", key, field_of(run, sweep_dets[d])};
        n += redis_int(3, c);
    }
    return n;
}

/* The sweep (runidx.h) with state.ttl_s 60: runs A (score 100 s ago), B
 * (10 s ago), C (100 s ago in Redis, noted just now in memory: written by
 * this batch) and D (60 s ago) each have fields da and db, and A a field
 * dc of a window this part does not keep. A loses da and db, not dc; B, C
 * and D keep theirs; every index entry stays (another part may have
 * written the run since), C's moved on; the next sweep is not due before
 * a tenth of the TTL, then takes D; a part with nothing to sweep never
 * reads. */
START_TEST(runhash_sweep_deletes_expired_runs_only)
{
    open_all("sw2");
    conf.state_ttl_s = 60;
    int64_t now = (int64_t)time(NULL);
    const char *runs[] = {"runA", "runB", "runC", "runD"};
    int64_t ages[] = {100, 10, 100, 60};
    for (int i = 0; i < 4; i++)
        seed_run(runs[i], i ? 2 : 3, now, ages[i]);
    struct st_runidx *x = sweeper(2), *g = sweeper(0);
    /* C written by this batch: its entry noted now (before the flush) */
    st_runidx_note(x, 0, "task", "runC", st_runidx_hash("task", "runC"), 1, now);
    st_runidx_begin(g);
    ck_assert_int_eq(st_runidx_queue_sweeps(g, p, now), 0);
    ck_assert_int_eq(sweep_at(x, now), 1);
    long long want[] = {0, 2, 2, 2};
    for (int i = 0; i < 4; i++) {
        ck_assert_msg(fields_of(runs[i], 2) == want[i], "%s", runs[i]);
        int64_t score = index_score(0, runs[i]);
        ck_assert_msg(score >= 0, "%s left the index", runs[i]);
        if (i == 2)
            ck_assert_int_eq(score, now);
    }
    ck_assert_int_eq(fields_of("runA", 3), 1); /* dc */
    /* not due again before a tenth of the TTL, though D (60 s old, kept:
     * the TTL is not past) is past it a second later; then D goes */
    ck_assert_int_eq(sweep_at(x, now + 1), 0);
    ck_assert_int_eq(fields_of("runD", 2), 2);
    ck_assert_int_eq(sweep_at(x, now + 6), 1);
    ck_assert_int_eq(fields_of("runD", 2), 0);
    st_runidx_destroy(x);
    st_runidx_destroy(g);
    close_all();
}
END_TEST

/* A load reads both forms of a partition's index: a run named only by
 * the sorted set an older release wrote (P) and one named only by the log
 * (Q) are known, so their state is read; a run in neither (R) is new. */
START_TEST(runhash_index_load_reads_the_log_and_the_older_set)
{
    open_all("ldb");
    int64_t now = (int64_t)time(NULL);
    seed_run_in("runP", 1, now, 10, 1);
    seed_run_in("runQ", 1, now, 10, 0);
    /* a prefix whose index is complete (its marker 0, as st_runidx_marker
     * sets it on a fresh prefix): a run the index lacks is new */
    char mkey[128];
    snprintf(mkey, sizeof(mkey), "%sruns:complete_since", prefix);
    const char *mk[] = {"SET", mkey, "0"};
    st_rpipe_cmd(p, NULL, NULL, 3, mk);
    char err[256];
    ck_assert_int_eq(st_rpipe_exec(p, err, sizeof(err)), 0);
    struct st_runidx *x = sweeper(0);
    ck_assert_int_eq(st_runidx_trusted(x), 1);
    ck_assert_int_eq(st_runidx_has(x, 0, st_runidx_hash("task", "runP")), 1);
    ck_assert_int_eq(st_runidx_has(x, 0, st_runidx_hash("task", "runQ")), 1);
    ck_assert_int_eq(st_runidx_has(x, 0, st_runidx_hash("task", "runR")), 0);
    ck_assert_int_eq(st_runidx_size(x), 2);
    char skey[128], pkey[128];
    snprintf(skey, sizeof(skey), "%sruns:server", prefix);
    snprintf(pkey, sizeof(pkey), "%sruns:partitions", prefix);
    const char *dm[] = {"DEL", mkey, skey, pkey};
    redis_int(4, dm);
    st_runidx_destroy(x);
    close_all();
}
END_TEST

/* A run's newest record decides, wherever it is: in the index's log or in
 * the sorted set an older release wrote (state.ttl_s 60, a sweep of what
 * is 60 s old or more). G's only record is old (log): swept. H has an old
 * record in the log and a newer one in the log; I an old one in the set
 * and a newer one in the log; J an old one in the log and a newer one in
 * the set: all kept. K's only record is old, in the set: swept. */
START_TEST(runhash_sweep_takes_a_runs_newest_record)
{
    open_all("swn");
    conf.state_ttl_s = 60;
    int64_t now = (int64_t)time(NULL);
    seed_run_in("runG", 1, now, 100, 0);
    seed_run_in("runH", 1, now, 100, 0);
    seed_run_in("runH", 0, now, 10, 0);
    seed_run_in("runI", 1, now, 100, 1);
    seed_run_in("runI", 0, now, 10, 0);
    seed_run_in("runJ", 1, now, 100, 0);
    seed_run_in("runJ", 0, now, 10, 1);
    seed_run_in("runK", 1, now, 100, 1);
    struct st_runidx *x = sweeper(1);
    ck_assert_int_eq(sweep_at(x, now), 1);
    const char *runs[] = {"runG", "runH", "runI", "runJ", "runK"};
    long long want[] = {0, 1, 1, 1, 0};
    for (int i = 0; i < 5; i++)
        ck_assert_msg(fields_of(runs[i], 1) == want[i], "%s: %lld field(s)", runs[i],
                      fields_of(runs[i], 1));
    st_runidx_destroy(x);
    close_all();
}
END_TEST

/* The compaction tests' start: partition 0's log holds two records of L
 * (50 and 20 s old), one of M (200 s: older than the cutoff, 2 x
 * state.ttl_s) and one of N (30 s); a part's index of it is loaded and
 * flushed at now (with run O noted first when note_o), which makes the
 * compaction due. */
static struct st_runidx *compaction_due(int64_t now, int note_o)
{
    char err[256];
    conf.state_ttl_s = 60;
    seed_run_in("runL", 0, now, 50, 0);
    seed_run_in("runL", 0, now, 20, 0);
    seed_run_in("runM", 0, now, 200, 0);
    seed_run_in("runN", 0, now, 30, 0);
    struct st_runidx *x = sweeper(0);
    if (note_o)
        st_runidx_note(x, 0, "task", "runO", st_runidx_hash("task", "runO"), 1, now);
    struct st_checkpoint *ck = st_checkpoint_new();
    st_runidx_flush(x, ck, now); /* the first: its removal is due */
    ck_assert_int_eq(st_checkpoint_exec(ck, p, err, sizeof(err)), 0);
    st_checkpoint_destroy(ck);
    return x;
}

/* Partition 0's log (in str_reply): its number of records. */
static int log_records(void)
{
    char err[256];
    char *lk = st_detect_index_log_key(&conf, 0);
    const char *get[] = {"GET", lk};
    st_rpipe_cmd(p, on_str, NULL, 2, get);
    ck_assert_int_eq(st_rpipe_exec(p, err, sizeof(err)), 0);
    free(lk);
    ck_assert_int_eq(str_nil, 0);
    int lines = 0;
    for (const char *r = str_reply.data; (r = strchr(r, '\n')); r++)
        lines++;
    return lines;
}

/* The log's compaction (st_runidx_compact), due after a flush removed old
 * entries from memory: the log then holds one record per run, its newest,
 * and none older than the flush's cutoff (2 x state.ttl_s: 120 s). L has
 * two records, M one too old, N one; the records of a run noted by the
 * flush itself stay. A second compaction finds nothing to drop and leaves
 * the log as it is. */
START_TEST(runhash_index_log_compacts_to_newest_records)
{
    open_all("cmp");
    char err[256];
    int64_t now = (int64_t)time(NULL);
    struct st_runidx *x = compaction_due(now, 1);
    ck_assert_int_eq(st_runidx_compact(x, p, NULL, err, sizeof(err)), 0);
    ck_assert_msg(log_records() == 3, "log after compaction:\n%s", str_reply.data);
    char *before = st_strdup(str_reply.data);
    ck_assert_int_eq(index_score(0, "runL"), now - 20);
    ck_assert_int_eq(index_score(0, "runM"), -1);
    ck_assert_int_eq(index_score(0, "runN"), now - 30);
    ck_assert_int_eq(index_score(0, "runO"), now);
    /* nothing left to drop: the log is not rewritten */
    struct st_checkpoint *ck = st_checkpoint_new();
    st_runidx_flush(x, ck, now + 7); /* a tenth of the TTL later: due again */
    ck_assert_int_eq(st_checkpoint_exec(ck, p, err, sizeof(err)), 0);
    st_checkpoint_destroy(ck);
    ck_assert_int_eq(st_runidx_compact(x, p, NULL, err, sizeof(err)), 0);
    ck_assert_int_eq(log_records(), 3);
    ck_assert_str_eq(str_reply.data, before);
    free(before);
    st_runidx_destroy(x);
    close_all();
}
END_TEST

/* What a compaction-read hook does on a connection of its own (other),
 * once (reads counts its calls): append rec, or claim the partition. */
struct meanwhile {
    struct st_rpipe *other;
    const char *rec;
    int reads;
    int failed; /* the claim's INCR (claim_meanwhile), with err */
    char err[256];
};

/* Another analyzer's APPEND between the compaction's read and its rewrite
 * (the hook runs there once, on a connection of its own): the rewrite does
 * not run (the WATCH), the log is read again and compacted with the new
 * record in it. Without the WATCH the new run's record is lost; taking
 * the aborted EXEC for done leaves the stale records. */
static void append_meanwhile(int32_t partition, void *arg)
{
    struct meanwhile *a = arg;
    char err[256];
    if (a->reads++ == 0) {
        char *lk = st_detect_index_log_key(&conf, partition);
        const char *ap[] = {"APPEND", lk, a->rec};
        st_rpipe_cmd(a->other, NULL, NULL, 3, ap);
        ck_assert_msg(st_rpipe_exec(a->other, err, sizeof(err)) == 0, "%s", err);
        free(lk);
    }
}

START_TEST(runhash_index_log_compaction_rereads_a_log_appended_meanwhile)
{
    open_all("cmq");
    char err[256];
    int64_t now = (int64_t)time(NULL);
    struct st_runidx *x = compaction_due(now, 0);
    char rec[256];
    char *m = st_detect_run_member("task", "runQ");
    snprintf(rec, sizeof(rec), "%lld %s\n", (long long)(now - 5), m);
    free(m);
    struct meanwhile a = {.rec = rec};
    a.other = st_rpipe_new(getenv("SANDTRAIL_REDIS_URL"), NULL, err, sizeof(err));
    ck_assert_msg(a.other != NULL, "%s", err);
    st_runidx_on_compact_read(x, append_meanwhile, &a);
    ck_assert_int_eq(st_runidx_compact(x, p, NULL, err, sizeof(err)), 0);
    ck_assert_msg(log_records() == 3, "log after compaction:\n%s", str_reply.data);
    ck_assert_int_eq(index_score(0, "runL"), now - 20);
    ck_assert_int_eq(index_score(0, "runM"), -1);
    ck_assert_int_eq(index_score(0, "runN"), now - 30);
    ck_assert_int_eq(index_score(0, "runQ"), now - 5);
    ck_assert_int_eq(a.reads, 2); /* read, not rewritten; read again */
    st_rpipe_destroy(a.other);
    st_runidx_destroy(x);
    close_all();
}
END_TEST

/* The compaction fenced by the owner epoch: another analyzer claims the
 * partition (INCR of its epoch) between the compaction's read and its
 * rewrite; the rewrite does not run, and the log read again is left to
 * the new owner, its compaction still due. Claimed back, the same index
 * compacts it. Without the epoch in the WATCH, or without the check of
 * the epoch read, the log is rewritten under the new owner. */
static void claim_meanwhile(int32_t partition, void *arg)
{
    struct meanwhile *a = arg;
    if (a->reads++ == 0) {
        /* checked after the call (the test's log is being captured) */
        char *ek = st_detect_epoch_key(&conf, partition);
        const char *incr[] = {"INCR", ek};
        st_rpipe_cmd(a->other, NULL, NULL, 2, incr);
        a->failed = st_rpipe_exec(a->other, a->err, sizeof(a->err)) != 0;
        free(ek);
    }
}

/* stderr (the log) into a temporary file, until captured_count says how
 * many of its lines hold needle */
static FILE *cap_file;
static int cap_saved = -1;

static void capture_stderr(void)
{
    fflush(stderr);
    cap_file = tmpfile();
    ck_assert_ptr_nonnull(cap_file);
    cap_saved = dup(2);
    ck_assert_int_ge(cap_saved, 0);
    ck_assert_int_ge(dup2(fileno(cap_file), 2), 0);
}

static int captured_count(const char *needle)
{
    char line[1024];
    int n = 0;
    fflush(stderr);
    dup2(cap_saved, 2);
    close(cap_saved);
    cap_saved = -1;
    rewind(cap_file);
    while (fgets(line, sizeof(line), cap_file))
        n += strstr(line, needle) != NULL;
    fclose(cap_file);
    cap_file = NULL;
    return n;
}

START_TEST(runhash_index_log_compaction_leaves_a_claimed_partition_alone)
{
    static char topic[] = "events";
    open_all("cmf");
    conf.topic_events = topic;
    char err[256];
    int64_t now = (int64_t)time(NULL);
    struct st_runidx *x = compaction_due(now, 0);
    struct st_fence *f = st_fence_new(&conf, 0);
    int32_t part = 0;
    ck_assert_int_eq(st_fence_claim(f, p, &part, 1, err, sizeof(err)), 0);
    struct meanwhile a = {0};
    a.other = st_rpipe_new(getenv("SANDTRAIL_REDIS_URL"), NULL, err, sizeof(err));
    ck_assert_msg(a.other != NULL, "%s", err);
    st_runidx_on_compact_read(x, claim_meanwhile, &a);
    capture_stderr();
    int rc = st_runidx_compact(x, p, f, err, sizeof(err));
    /* the next batch's try, the partition still the other's: no line */
    int rc2 = st_runidx_compact(x, p, f, err, sizeof(err));
    int lines = captured_count("claimed by another analyzer");
    ck_assert_msg(!a.failed, "%s", a.err);
    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(rc2, 0);
    ck_assert_msg(log_records() == 4, "log compacted under another owner:\n%s",
                  str_reply.data);
    /* read, not rewritten; read again; read by the next try */
    ck_assert_int_eq(a.reads, 3);
    ck_assert_int_eq(lines, 1); /* one line for the claim, not one per try */
    /* ours again: the compaction, still due, runs */
    ck_assert_int_eq(st_fence_claim(f, p, &part, 1, err, sizeof(err)), 0);
    ck_assert_int_eq(st_runidx_compact(x, p, f, err, sizeof(err)), 0);
    ck_assert_msg(log_records() == 2, "log after compaction:\n%s", str_reply.data);
    ck_assert_int_eq(index_score(0, "runL"), now - 20);
    ck_assert_int_eq(index_score(0, "runM"), -1);
    char *ek = st_detect_epoch_key(&conf, 0);
    const char *del[] = {"DEL", ek};
    redis_int(2, del);
    free(ek);
    st_fence_destroy(f);
    st_rpipe_destroy(a.other);
    st_runidx_destroy(x);
    close_all();
}
END_TEST

/* After the events topic gained partitions (<prefix>runs:moved_since, read
 * by the check), a run may be written from another partition in the same
 * fields: the sweep keeps the runs scored before that time (E, 100 s old,
 * moved 95 s ago) and deletes the others (F, 90 s old). */
START_TEST(runhash_sweep_keeps_runs_that_may_have_moved)
{
    open_all("swm");
    conf.state_ttl_s = 60;
    int64_t now = (int64_t)time(NULL);
    seed_run("runE", 1, now, 100);
    seed_run("runF", 1, now, 90);
    char mkey[128], mval[32];
    snprintf(mkey, sizeof(mkey), "%sruns:moved_since", prefix);
    snprintf(mval, sizeof(mval), "%lld", (long long)(now - 95));
    const char *ms[] = {"SET", mkey, mval};
    redis_int(3, ms);
    struct st_runidx *x = sweeper(1);
    ck_assert_int_eq(sweep_at(x, now), 1);
    ck_assert_int_eq(fields_of("runE", 1), 1);
    ck_assert_int_eq(fields_of("runF", 1), 0);
    const char *dm[] = {"DEL", mkey};
    redis_int(2, dm);
    st_runidx_destroy(x);
    close_all();
}
END_TEST

/* A sweep cut at its limit (20,000 runs) goes on at the next batch, even
 * when more runs than that share one score: 20,001 expired runs with the
 * same score lose their field within three sweeps, none of them waiting a
 * tenth of the TTL. Fails when a full read's next one starts past the
 * score (the last run would keep its state) or at the same place with the
 * same limit (no progress). */
START_TEST(runhash_sweep_goes_on_past_its_limit)
{
    open_all("swl");
    conf.state_ttl_s = 60;
    int64_t now = (int64_t)time(NULL);
    enum { N = 20001 };
    static char names_[N][16];
    char *ik = st_detect_index_key(&conf, 0);
    const char **za = malloc((2 + 2 * N) * sizeof(*za));
    char **members = malloc(N * sizeof(*members));
    char score[32];
    snprintf(score, sizeof(score), "%lld", (long long)(now - 100));
    za[0] = "ZADD";
    za[1] = ik;
    for (int i = 0; i < N; i++) {
        snprintf(names_[i], sizeof(names_[i]), "m%d", i);
        st_runhash_put(rh, st_runidx_hash("task", names_[i]), "task", names_[i], "da",
                       "\x01\x00\x00\x00", 4);
        members[i] = st_detect_run_member("task", names_[i]);
        za[2 + 2 * i] = score;
        za[3 + 2 * i] = members[i];
    }
    flush_run();
    redis_int(2 + 2 * N, za); /* one command: seed_run's one per run is slow here */
    struct st_runidx *x = sweeper(1);
    int sweeps = 0;
    while (sweeps < 3 && sweep_at(x, now))
        sweeps++;
    long long left = 0;
    for (uint64_t k = 0; k < ST_DETECT_RUN_BUCKETS; k++) {
        struct st_buf b;
        st_buf_init(&b);
        const char *hl[] = {"HLEN", st_detect_run_bucket_key_buf(&b, &conf, k)};
        left += redis_int(2, hl);
        st_buf_fini(&b);
    }
    ck_assert_msg(left == 0, "%lld fields left after %d sweeps", left, sweeps);
    for (int i = 0; i < N; i++)
        free(members[i]);
    free(members);
    free(za);
    st_runidx_destroy(x);
    free(ik);
    close_all();
}
END_TEST

/* A detector's windows named like the run's hash would write over it:
 * refused when made. */
START_TEST(runhash_no_detector_state_named_like_the_hash)
{
    struct st_analyzer_conf c = {.redis_prefix = "st_runhash_never:"};
    st_runwin_new(&c, ST_DETECT_RUN_HASH, 60000000, 150000000, 0, 0);
}
END_TEST

int main(void)
{
    st_buf_init(&str_reply);
    Suite *s = suite_create("runhash");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, runhash_one_command_per_bucket);
    tcase_add_test(tc, runhash_delete_when_every_state_is_empty);
    tcase_add_test(tc, runhash_large_commands_move_whole);
    tcase_add_test(tc, runhash_old_strings_load_and_go);
    tcase_add_test(tc, runhash_switch_to_sets_and_back);
    tcase_add_test(tc, runhash_evicted_run_reloads_and_expires);
    tcase_add_test(tc, runhash_run_noted_in_each_partition_its_windows_are_on);
    tcase_add_test(tc, runhash_checkpoints_run_twice_change_nothing);
    tcase_add_test(tc, runhash_sweep_deletes_expired_runs_only);
    tcase_add_test(tc, runhash_sweep_goes_on_past_its_limit);
    tcase_add_test(tc, runhash_sweep_keeps_runs_that_may_have_moved);
    tcase_add_test(tc, runhash_index_load_reads_the_log_and_the_older_set);
    tcase_add_test(tc, runhash_sweep_takes_a_runs_newest_record);
    tcase_add_test(tc, runhash_index_log_compacts_to_newest_records);
    tcase_add_test(tc, runhash_index_log_compaction_rereads_a_log_appended_meanwhile);
    tcase_add_test(tc, runhash_index_log_compaction_leaves_a_claimed_partition_alone);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    /* the refusal aborts: in a child of its own */
    Suite *sn = suite_create("runhash_names");
    TCase *tn = tcase_create("names");
    tcase_add_test_raise_signal(tn, runhash_no_detector_state_named_like_the_hash, SIGABRT);
    suite_add_tcase(sn, tn);
    sr = srunner_create(sn);
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    nf += srunner_ntests_failed(sr);
    srunner_free(sr);
    st_buf_fini(&str_reply);
    return nf ? 1 : 0;
}
