/* corpus.h: the inputs the differential tests walk (test_onepass: the
 * collector's one pass against its tree path; test_event_arena: the arena
 * parse against the tree parse): the files of a folder, line by line and
 * whole, and a generator's output, line by line. */
#ifndef ST_TEST_CORPUS_H
#define ST_TEST_CORPUS_H

#include <stddef.h>

/* Called with one input; text is valid during the call only. */
typedef void (*corpus_fn)(const char *text, size_t len, void *arg);

/* The whole file, NUL-terminated (malloc'd); NULL when it cannot be read. */
char *corpus_slurp(const char *path, size_t *len);

/* fn on every line of text (without its '\n'). */
void corpus_lines(const char *text, size_t len, corpus_fn fn, void *arg);

/* Every file under dir, recursively (names starting with '.' skipped): fn
 * on each line, and on the whole file when it is under 64 KiB (a
 * pretty-printed document is one value with newlines in it). Returns the
 * number of files; 0 when dir does not exist. */
size_t corpus_tree(const char *dir, corpus_fn fn, void *arg);

/* Runs the shell command head FILE tail, a generator writing FILE (a
 * temporary file, removed after), then fn on each of its lines; the output
 * must be over 100,000 bytes. Returns 0, or -1 when the command failed
 * (nothing called). */
int corpus_generated(const char *head, const char *tail, corpus_fn fn, void *arg);

/* The same string, or both NULL. */
int corpus_same_str(const char *a, const char *b);

/* The same document printed, or both NULL (cJSON *: the events' trees). */
struct cJSON;
int corpus_same_json(const struct cJSON *a, const struct cJSON *b);

#endif
