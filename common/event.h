/* event.h: the sandtrail event, schema "sandtrail.event.v1".
 *
 * An event is parsed and validated once, at the collector, into a struct
 * st_event that every later stage shares. The struct keeps the whole cJSON
 * document, so fields the schema does not name are carried, not dropped.
 * The analyzer reads each consumed event again (st_event_read: the
 * one-pass reader, only attrs and identity as trees; st_event_parse, the
 * whole tree, where that reader is not sure or a marker may be): what it
 * makes lives in an arena of the event's own, one allocation per event. */
#ifndef ST_EVENT_H
#define ST_EVENT_H

#include <stddef.h>
#include <stdint.h>

#include "json.h"

#define ST_EVENT_SCHEMA "sandtrail.event.v1"
#define ST_EVENT_ID_MAX 128
/* attrs members the schema names for one type, at most */
#define ST_EVENT_ATTRS_MAX 8

/* The event times accepted: from 1970-01-01T00:00:00Z up to
 * 9999-12-31T23:59:59.999999Z. Inside PostgreSQL's timestamptz range, and
 * every time in it formats with a four-digit year; nothing a sandbox, proxy
 * or broker logs happened before the epoch. */
#define ST_EVENT_TS_MIN_US INT64_C(0)
#define ST_EVENT_TS_MAX_US INT64_C(253402300799999999)

enum st_source_kind { ST_SOURCE_SANDBOX, ST_SOURCE_PROXY, ST_SOURCE_BROKER };

enum st_decision { ST_DECISION_ALLOW, ST_DECISION_DENY, ST_DECISION_ERROR };

enum st_event_type {
    ST_TYPE_EXEC,
    ST_TYPE_FILE_READ,
    ST_TYPE_FILE_WRITE,
    ST_TYPE_COMMIT,
    ST_TYPE_UPLOAD,
    ST_TYPE_REQUEST,
    ST_TYPE_TOKEN_ISSUE,
    ST_TYPE_TOKEN_USE,
    ST_TYPE_TOKEN_DENY,
    ST_TYPE_TOKEN_REVOKE,
    ST_TYPE_TOKEN_EXPIRE,
    ST_TYPE__COUNT
};

struct st_arena;

struct st_event {
    /* the whole document; NULL when read by st_event_read (then !may_mark):
     * the fields below point into mem */
    cJSON *doc;
    struct st_arena *mem; /* owns doc when set (else doc is cJSON_Delete's) */
    /* st_arena_bytes(mem), taken by st_event_parse while the arena is in
     * cache (the document is read-only from then on), so that the reorder
     * buffer's accounting reads no cold arena header; 0 without mem */
    size_t mem_bytes;

    const char *event_id;
    int64_t ts_us; /* event time, microseconds since the epoch */
    enum st_source_kind source_kind;
    const char *source_name;
    const char *source_platform; /* NULL when absent */
    const char *task_id;
    const char *run_id;
    const char *trace_id; /* NULL when absent */
    enum st_event_type type;
    enum st_decision decision; /* ALLOW when absent */
    const char *reason;        /* NULL when absent */
    const char *content;       /* NULL when absent */
    const cJSON *identity;     /* NULL when absent */
    const cJSON *attrs;        /* NULL when absent */
    /* 0 when the text it was parsed from holds no redaction marker's
     * opening and no \u escape (which could spell one): then no string
     * of it holds a marker (redact.h), and a detector looking for markers
     * need not walk it. 1 otherwise, and for an event made from a tree. */
    int may_mark;
    /* st_hash_pair(task_id, run_id), set by st_event_parse while the ids
     * are in cache (0: not set; st_event_run_hash computes it) */
    uint64_t run_hash;
    /* Set by the validation, while the document is in cache, so that a
     * detector reading them later (the document long out of cache on a
     * busy analyzer) does not walk it: attrs_named 1, attr[i] the attrs
     * member named by st_event_type_info(type)->attrs[i] (NULL: absent or
     * null), target what st_event_target returns. attrs_named 0 (an event
     * not validated by event.c): st_event_attr and st_event_target look
     * them up. */
    int attrs_named;
    const cJSON *attr[ST_EVENT_ATTRS_MAX];
    const char *target;
};

/* Parses and validates one event from buf[0..len) (one NDJSON line, without
 * its newline). On success returns 0 and ev owns a document that
 * st_event_fini frees: its nodes and strings are in one arena of the
 * event's (ev->mem), so the document is read-only (no cJSON function that
 * adds or deletes nodes). On failure returns -1, ev is left empty and rej
 * says why (rej->code is one of the ST_REASON_* codes). */
int st_event_parse(struct st_event *ev, const char *buf, size_t len,
                   struct st_reject *rej);

struct st_onepass;

/* st_event_parse, faster: the event read by p (st_onepass_new(NULL), one
 * per thread) without a tree of the whole line. The same event, the same
 * refusals (a line p is not sure of, and every refusal, are
 * st_event_parse's), with one difference: ev->doc is NULL, but for an
 * event that may hold a redaction marker (ev->may_mark: a detector walks
 * its document) and a line p left undecided (onepass.h), both read by
 * st_event_parse, document and all. ev->attrs and ev->identity are trees
 * as st_event_parse makes them. p NULL: st_event_parse. */
int st_event_read(struct st_onepass *p, struct st_event *ev, const char *buf, size_t len,
                  struct st_reject *rej);

/* The same with a document of malloc'd nodes (st_json_parse, freed by
 * cJSON_Delete): the reference st_event_parse is tested against
 * (tests/unit/test_event.c); same event, same refusals. */
int st_event_parse_tree(struct st_event *ev, const char *buf, size_t len,
                        struct st_reject *rej);

/* Validates a document already parsed (by st_json_parse, or built by a
 * decoder). Takes ownership of doc: on failure it is freed and rej says why. */
int st_event_from_doc(struct st_event *ev, cJSON *doc, struct st_reject *rej);

/* Frees the document (its arena, or its cJSON tree). Accepts an event that
 * failed to parse. */
void st_event_fini(struct st_event *ev);

/* What the schema asks of each type's attrs and identity: the table
 * event_validate reads, shared with validators that hold no cJSON tree
 * (common/onepass.c). */
enum st_attr_kind { ST_ATTR_STRING, ST_ATTR_INT, ST_ATTR_NUMBER, ST_ATTR_ARRAY };

struct st_attr_spec {
    const char *name;
    enum st_attr_kind kind;
    int required;
};

struct st_type_info {
    const char *name;
    enum st_source_kind kind;
    struct st_attr_spec attrs[ST_EVENT_ATTRS_MAX]; /* ends at a NULL name */
    const char *identity_required; /* identity member that must be set */
};

/* The entry of type t (static, never NULL). */
const struct st_type_info *st_event_type_info(enum st_event_type t);

const char *st_event_type_name(enum st_event_type t);
const char *st_source_kind_name(enum st_source_kind k);
const char *st_decision_name(enum st_decision d);

/* The target an event acted on, for evidence and distinct-target counts: a
 * proxy request's host, an exec's command, a file's path, a broker event's
 * audience or requested scope. Never NULL (may be ""). */
const char *st_event_target(const struct st_event *ev);

/* ev's attrs member name: the node st_json_get(ev->attrs, name) finds,
 * from ev->attr when the type's schema names it (no walk of the
 * document), NULL when absent or null. */
const cJSON *st_event_attr(const struct st_event *ev, const char *name);
/* Its string, or NULL (st_json_str's rules). */
const char *st_event_attr_str(const struct st_event *ev, const char *name);
/* 1 and *out when it is an integer (st_json_int's rules), else 0. */
int st_event_attr_int(const struct st_event *ev, const char *name, int64_t *out);

/* st_hash_pair(ev->task_id, ev->run_id): the key of the run's state in the
 * analyzer's tables, computed once per parse. */
uint64_t st_event_run_hash(const struct st_event *ev);

#endif
