/* input.h: the collector's inputs. Each reads lines and hands them to
 * st_ingest_line; each stops when *stop becomes non-zero. */
#ifndef ST_INPUT_H
#define ST_INPUT_H

#include <signal.h>
#include <stdio.h>

struct st_ingest;

/* Reads f to its end (--input FILE|-). Returns 0, or -1 on a read or
 * producer error. */
int st_input_file(FILE *f, struct st_ingest *in, volatile sig_atomic_t *stop);

/* Follows path as it grows, across rotation, checkpointing the delivered
 * position (--follow FILE). Runs until *stop. */
int st_input_follow(const char *path, struct st_ingest *in, volatile sig_atomic_t *stop);

/* Serves POST /v1/events on http.listen until *stop (--listen). */
int st_input_http(struct st_ingest *in, volatile sig_atomic_t *stop);

#endif
