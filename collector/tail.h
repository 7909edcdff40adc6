/* tail.h: following a log file as its writer appends to it.
 *
 * Lines are returned only once complete (newline-terminated). Rotation is
 * followed both ways logrotate does it: rename (a new file appears at the
 * path: the old one is read to its end first) and copytruncate (the file
 * shrinks: reading starts again at 0). The position after the last line
 * handed out can be saved to a checkpoint file; the caller saves it only
 * once everything before it is delivered, so that a restart re-reads at
 * most the last unacknowledged batch. */
#ifndef ST_TAIL_H
#define ST_TAIL_H

#include <stddef.h>
#include <stdint.h>

struct st_tail;

/* Opens path, resuming from the checkpoint in ckpt_path when it names the
 * same file (or its rotated predecessor path.1, which is then finished
 * first). Lines longer than max_line are cut as by linereader.h. NULL with
 * errstr set when path cannot be opened. */
struct st_tail *st_tail_open(const char *path, const char *ckpt_path, size_t max_line,
                             char *errstr, size_t errsz);
void st_tail_close(struct st_tail *t); /* accepts NULL */

/* 1 with the next complete line (valid until the next call; *too_long when
 * it was cut); 0 when nothing new is there yet; -1 on a read error. */
int st_tail_next(struct st_tail *t, const char **line, size_t *len, int *too_long);

/* Saves the position after the last line returned (atomically: temporary
 * file, fsync, rename). Returns 0, or -1 with errstr set. */
int st_tail_checkpoint(struct st_tail *t, char *errstr, size_t errsz);

#endif
