/* onepass.h: a native event line read, validated and redacted in one pass.
 *
 * The hot path of input.format=native (accept.c). Instead of building a
 * cJSON tree (st_json_parse), validating it (st_event_from_doc), walking it
 * to redact (st_redact_event), printing it and freeing it, the line is
 * tokenized once: each string is decoded, redacted (st_redact_value) and
 * written to the output as the tree printer would write it; the members
 * the schema names are recorded in slots as they are met (member dispatch)
 * and checked when the line ends, by the rules event.c applies.
 *
 * The tree path stays the reference. Whatever this reader is not sure to do
 * exactly as the tree path would -- any line the strict parser or the
 * validator refuses (so that the reason and its message are the tree path's
 * own), a duplicate key, a number out of range, a redacted object key, an
 * identity.credential to hand over, an object of more than 32
 * members -- it gives back undecided, having undone what it counted, and
 * the caller runs the tree path. tests/unit/test_onepass.c and
 * fuzz/fuzz_onepass.c compare the two on every line they have.
 *
 * The analyzer reads each consumed event with it too (st_onepass_read,
 * through st_event_read): no redactor, nothing printed, only attrs and
 * identity made into trees, which its detectors read. It tries a lean pass
 * first, which takes only the shape the collector prints
 * (st_onepass_lean_reads) and gives any other line to the full pass. */
#ifndef ST_ONEPASS_H
#define ST_ONEPASS_H

#include <stddef.h>

struct st_event;
struct st_redactor;
struct st_onepass;

/* A reader that redacts with r (kept, not owned: r outlives it; used from
 * the thread that uses r), or, with r NULL, one for st_onepass_read only.
 * Cannot fail. */
struct st_onepass *st_onepass_new(struct st_redactor *r);
void st_onepass_destroy(struct st_onepass *p); /* accepts NULL */

/* Reads line[0..len) (not NUL-terminated). Returns 0 when the line is a
 * valid event: *out, *outlen is what to produce (the line itself when
 * nothing was redacted, else the redacted event as cJSON_PrintUnformatted
 * would print it, in p's buffer), and ev is filled as st_event_from_doc
 * would fill it except that ev->doc, ev->identity and ev->attrs are NULL;
 * its strings belong to p. Both stay valid until the next call. Returns 1
 * when undecided: ev is empty and r's hit counts are as before the call. */
int st_onepass_event(struct st_onepass *p, const char *line, size_t len,
                     struct st_event *ev, const char **out, size_t *outlen);

struct st_arena;

/* Reads line[0..len) as st_event_parse reads it, for the analyzer: p
 * made with no redactor (st_onepass_new(NULL)); nothing is redacted or
 * printed. Returns 0 when the line is a valid event: ev is filled as
 * st_event_parse fills it (every string, and the attrs and identity
 * objects, in mem: each of those two read alone by st_json_parse_in), but
 * for ev->doc (NULL: no tree of the whole line), ev->mem, ev->may_mark,
 * ev->run_hash and ev->mem_bytes, left to the caller (st_event_read).
 * Returns 1 when undecided (as st_onepass_event: the tree path decides);
 * what was taken from mem stays until it is destroyed. */
int st_onepass_read(struct st_onepass *p, const char *line, size_t len,
                    struct st_arena *mem, struct st_event *ev);

/* After st_onepass_read returned 0: 1 when a string of the line had a
 * backslash (an escape); 0 when the line holds none at all (a valid line
 * has backslashes only in its strings). */
int st_onepass_escaped(const struct st_onepass *p);

/* Lines st_onepass_read took by its lean pass: the shape the collector
 * prints (no whitespace, no array, only source, identity and attrs
 * nested, their members scalars, no escaped key), read without what
 * redaction needs; any other line is read by the full pass. */
size_t st_onepass_lean_reads(const struct st_onepass *p);

/* How many events p printed by splicing their redacted strings into the
 * line rather than by a second pass (for tests). */
size_t st_onepass_spliced(const struct st_onepass *p);

#endif
