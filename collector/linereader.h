/* linereader.h: NDJSON lines from a file or stdin, with a bound on the
 * memory one line may take. A longer line is reported (its first bytes and
 * the fact that it was cut) and the rest of it is skipped, so that one
 * hostile line costs neither memory nor the lines after it. */
#ifndef ST_LINEREADER_H
#define ST_LINEREADER_H

#include <stddef.h>
#include <stdio.h>

struct st_linereader;

/* Reads from f (not closed by the reader) with lines of at most max_line
 * bytes. */
struct st_linereader *st_linereader_new(FILE *f, size_t max_line);
void st_linereader_destroy(struct st_linereader *r);

/* Next line, without its newline (and without a trailing '\r'). Returns 1
 * and sets *line and *len (valid until the next call), with *too_long set when
 * the line was longer than max_line and *line holds its first max_line
 * bytes; returns 0 at the end of input and -1 on a read error. */
int st_linereader_next(struct st_linereader *r, const char **line, size_t *len,
                       int *too_long);

/* 1 when the next st_linereader_next would wait for input: no whole line
 * is buffered and nothing is ready to read (a pipe or terminal that is
 * quiet for now). A regular file never waits. */
int st_linereader_would_block(const struct st_linereader *r);

#endif
