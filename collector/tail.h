/* tail.h: following a log file as its writer appends to it, across
 * rotation, without losing lines.
 *
 * Lines are returned only once complete (newline-terminated). A file is
 * known by its identity: device, inode and a SHA-256 fingerprint of its
 * first bytes (up to ST_TAIL_FP_MAX, fewer while the file is shorter), so
 * that a reused inode is never mistaken for the file it replaced. Rotated
 * files are found by a glob (default logrotate's numbered names FILE.1,
 * FILE.2, ...) and read oldest first, each to its end, before the live
 * FILE:
 *   - rename (and create): the renamed file stays open and is read until
 *     the writer has clearly moved on (a newer file has data and the old one
 *     has not grown for the grace period);
 *   - copytruncate: when FILE shrinks or its first bytes change, what was
 *     not read yet is taken from the copy (a rotated file with the same
 *     fingerprint), then FILE is read from 0; bytes that cannot be recovered
 *     are counted in sandtrail_collector_tail_bytes_at_risk_total and
 *     logged.
 * The position after the last line handed out, with the identity of its
 * file, can be saved to a checkpoint; the caller saves it only once
 * everything before it is delivered, so that a restart re-reads at most the
 * last unacknowledged batch. At start the checkpointed file is looked for
 * among FILE and its rotated files; when it cannot be found (deleted, inode
 * reused), the files changed since are read from their start, with a
 * warning, never from a stale offset. */
#ifndef ST_TAIL_H
#define ST_TAIL_H

#include <stddef.h>
#include <stdint.h>

#define ST_TAIL_FP_MAX 256 /* bytes of a file's start in its fingerprint */

struct st_metrics;
struct st_tail;

struct st_tail_opts {
    size_t max_line;          /* longer lines are cut as by linereader.h */
    const char *rotated_glob; /* FILE stands for the followed path; relative
                               * to its folder; "" or NULL: none */
    int64_t grace_ms;         /* how long a rotated file must stay still */
    struct st_metrics *metrics; /* may be NULL; not owned */
};

/* Opens path, resuming from the checkpoint in ckpt_path when it names FILE
 * or one of its rotated files (then finished first). NULL with errstr set
 * when nothing can be opened or the checkpoint is in a format this code
 * does not read. opts is copied (its strings too). */
struct st_tail *st_tail_open(const char *path, const char *ckpt_path,
                             const struct st_tail_opts *opts, char *errstr,
                             size_t errsz);
void st_tail_close(struct st_tail *t); /* accepts NULL */

/* 1 with the next complete line (valid until the next call; *too_long when
 * it was cut); 0 when nothing new is there yet; -1 on a read error. */
int st_tail_next(struct st_tail *t, const char **line, size_t *len, int *too_long);

/* Saves the identity of the file being read and the position after the
 * last line returned (atomically: temporary file, fsync, rename). Returns
 * 0, or -1 with errstr set. */
int st_tail_checkpoint(struct st_tail *t, char *errstr, size_t errsz);

#endif
