/* accept.h: one input line through decode -> redact -> validate.
 *
 * The stage every input (file, stdin, later HTTP and tail) shares. The
 * decoder chosen by input.format maps the line onto event v1; the redactor
 * replaces every token-shaped value and canary by its marker; the result is
 * validated against the schema. Nothing leaves this stage unredacted: not
 * the event, not the text of a rejection. */
#ifndef ST_ACCEPT_H
#define ST_ACCEPT_H

#include <stddef.h>

#include "buf.h"
#include "json.h"

struct st_event;

struct st_collector_conf;
struct st_credset;
struct st_accept;

/* Loads the decoder, the HMAC key and the canaries; issued (lineage.h,
 * shared, not owned, may be NULL) is searched in every string. NULL with
 * errstr set (naming the file or the property) when one is missing or
 * refused. */
struct st_accept *st_accept_new(const struct st_collector_conf *conf,
                                const struct st_credset *issued, char *errstr,
                                size_t errsz);
/* As st_accept_new, the canaries taken from canaries_text (the content of
 * a canaries file, as st_accept_read_canaries reads it; NULL: none)
 * instead of redact.canaries_file, and the key from key (not kept) unless
 * NULL: a reload builds every executor's redactor from one reading of the
 * canaries file and with the key read at start. */
struct st_accept *st_accept_new_canaries(const struct st_collector_conf *conf,
                                         const struct st_credset *issued,
                                         const struct st_buf *key,
                                         const char *canaries_text, char *errstr,
                                         size_t errsz);
/* Reads the HMAC key that redact.key_file names into key. -1 with errstr
 * set (the file, never its content). The caller wipes it. */
int st_accept_load_key(const struct st_collector_conf *conf, struct st_buf *key,
                       char *errstr, size_t errsz);
/* Reads the canaries file path (NULL or "": none, *text NULL) into *text
 * (caller frees). -1 with errstr naming the file when it cannot be read. */
int st_accept_read_canaries(const char *path, char **text, char *errstr, size_t errsz);
void st_accept_destroy(struct st_accept *a); /* accepts NULL */

/* Returns 0 with *out (the event to produce, *outlen bytes) and *key (its
 * task_id) valid until the next call; 1 when the line carries no event in
 * this format (skip it); -1 with rej filled, its message redacted. */
int st_accept_line(struct st_accept *a, const char *line, size_t len, const char **out,
                   size_t *outlen, const char **key, struct st_reject *rej);

/* The event the last successful st_accept_line made (valid until the next
 * call). When the one-pass reader accepted it (input.single_pass, native
 * lines: onepass.h), ev->doc, ev->identity and ev->attrs are NULL: that
 * reader leaves identity.credential, the one case st_lineage_note reads
 * them for, to the tree path. */
const struct st_event *st_accept_event(const struct st_accept *a);

/* Lineage: the length of the identity.credential that the last accepted
 * event handed over (now identity.credential_fp), 0 when it had none; a
 * length below ST_CREDSET_MIN_LEN when the credential cannot be followed in
 * text (too short, too few distinct bytes: credset.h). */
size_t st_accept_issued_len(const struct st_accept *a);

/* A redacted copy of a rejected line, for its dead-letter record. Caller
 * frees. */
char *st_accept_redact_raw(struct st_accept *a, const char *line, size_t len,
                           size_t *outlen);

/* Redactions made so far, per rule (for the summary line and metrics). */
struct st_redactor *st_accept_redactor(struct st_accept *a);

/* Events the one pass printed by splicing (st_onepass_spliced); 0 without
 * the one pass. For tests. */
size_t st_accept_spliced(const struct st_accept *a);

#endif
