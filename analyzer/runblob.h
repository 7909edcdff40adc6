/* runblob.h: a run's whole windowed state as one byte string, the value of
 * its "s" key in Redis (runwin.c, detect.h).
 *
 * Our own format, version 1 (the first byte), every number a LEB128
 * varint (signed ones zigzag-coded):
 *   0x01
 *   count of members, then per member, sorted by (time, member):
 *     time (signed; the first absolute, the others the difference from the
 *     previous one), member length, member bytes ("source\x1fevent_id\x1fpayload")
 *   count of episodes, then per episode: 32 bytes of id, first (signed),
 *     last - first (signed)
 *   count of buckets, then per bucket: bucket (signed), sum (signed)
 * and nothing after. Version 2 (0x02 first) is the same followed by a
 * trailer, the run's pending trim: trim_ts (signed), the newest on-time
 * event fed since its last trim, and o_max (signed), the highest Kafka
 * offset among those events (runwin.c: a load applies the trim when the
 * partition's committed offset passed o_max; docs/architecture.md,
 * "Session 18"). A string with no trim pending is still version 1, which
 * every release reads. The bytes may hold NUL: they go to Redis with their
 * length (st_checkpoint_cmd_lens).
 *
 * Writing cannot fail. Reading checks every length against the bytes
 * left and reports a string that is not exactly this (another version, a
 * truncation, bytes after the end) as malformed: -1, nothing more. */
#ifndef ST_RUNBLOB_H
#define ST_RUNBLOB_H

#include <stddef.h>
#include <stdint.h>

struct st_buf;

#define ST_RUNBLOB_VERSION 1
#define ST_RUNBLOB_VERSION_TRIM 2 /* with the pending trim's trailer */

/* Writing: the caller appends, in this order, the version (start), the
 * member count and each member, the episode count and each episode, the
 * bucket count and each bucket. *prev_ts carries the previous member's
 * time (start sets it). */
void st_runblob_start(struct st_buf *b, int64_t *prev_ts);
void st_runblob_count(struct st_buf *b, uint64_t n);
void st_runblob_member(struct st_buf *b, int64_t *prev_ts, int64_t ts, const char *key,
                       size_t len);
void st_runblob_episode(struct st_buf *b, const char id[32], int64_t first_us,
                        int64_t last_us);
void st_runblob_bucket(struct st_buf *b, int64_t key, int64_t sum);
/* After the buckets, when a trim is pending: the trailer, which makes the
 * string version 2 (b must hold the string from its start). */
void st_runblob_pending_trim(struct st_buf *b, int64_t trim_ts, int64_t o_max);

/* Reading, in the same order. Each call returns 0, or -1 when the bytes
 * are not what it reads (the reader is then of no further use). Nothing
 * is copied: keys point into the bytes read. */
struct st_runblob_reader {
    const unsigned char *p, *end;
    int64_t prev_ts;
    int version; /* ST_RUNBLOB_VERSION_TRIM while its trailer is unread */
};
int st_runblob_open(struct st_runblob_reader *r, const char *data, size_t len);
/* a count is also checked against the bytes left (each item takes one at
 * least), so that a caller may size an array by it */
int st_runblob_get_count(struct st_runblob_reader *r, uint64_t *n);
int st_runblob_get_member(struct st_runblob_reader *r, int64_t *ts, const char **key,
                          size_t *len);
int st_runblob_get_episode(struct st_runblob_reader *r, const char **id, int64_t *first_us,
                           int64_t *last_us);
int st_runblob_get_bucket(struct st_runblob_reader *r, int64_t *key, int64_t *sum);
/* After the buckets: the pending trim of a version 2 string; trim_ts
 * INT64_MIN and o_max -1 for a version 1 string (none pending). */
int st_runblob_get_pending_trim(struct st_runblob_reader *r, int64_t *trim_ts,
                                int64_t *o_max);
/* 0 when every byte was read (a version 2 string's trailer may be left
 * unread: it is checked here) */
int st_runblob_close(const struct st_runblob_reader *r);

/* The log of a large run's members: the value of its "l" key (runwin.c),
 * to which each checkpoint APPENDs, and which a compaction rewrites
 * whole (SET). A sequence of frames, each a kind byte then its body:
 *   ST_RUNBLOB_LOG_MEMBERS: count, then the members as in the string
 *     above (the first member's time relative to 0): they are held
 *   ST_RUNBLOB_LOG_TRIM: a time T (signed): every member of the frames
 *     before it with time below T is gone
 * An empty log holds nothing. No version byte: another format would use
 * other kinds, which this one reads as malformed. What a log holds does
 * not change when a sequence of frames is appended twice in a row (a
 * trim removes only what is older than itself, and the members after it
 * come back), nor when a member comes twice (a set). */
enum { ST_RUNBLOB_LOG_MEMBERS = 'M', ST_RUNBLOB_LOG_TRIM = 'T' };

/* Appends (does not reset b) a members frame's head for n members; the
 * caller then appends exactly n with st_runblob_member, in any order,
 * from *prev_ts (set here). */
void st_runblob_log_members(struct st_buf *b, uint64_t n, int64_t *prev_ts);
/* Appends a trim frame: the members with time below below_us are gone. */
void st_runblob_log_trim(struct st_buf *b, int64_t below_us);

/* Calls fn(arg, ts, key, len) for each member the log holds: those of
 * its members frames that no later trim frame removes, in log order (a
 * member appended twice may come twice: the caller's set dedups). The
 * log is checked whole before the first call: -1, and no call, when the
 * bytes are not a log (a kind unknown, a frame cut short, a member
 * holding a NUL); 0 otherwise. key points into data. Linear in the
 * bytes (one allocation: the trims' times). */
typedef void (*st_runblob_member_fn)(void *arg, int64_t ts, const char *key, size_t len);
int st_runblob_log_read(const char *data, size_t len, st_runblob_member_fn fn, void *arg);

/* The number of distinct members the log holds (what a load of it gives),
 * or -1 when it is not a log. For tests and tools (a sort of them all). */
long st_runblob_log_count(const char *data, size_t len);

#endif
