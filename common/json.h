/* json.h: the checks that cJSON does not make on its own, and typed access.
 *
 * cJSON accepts invalid UTF-8, keeps duplicate keys and reports only a global
 * error position; sandtrail must reject all of these with a reason a sender
 * can read, so every untrusted document passes st_json_parse. */
#ifndef ST_JSON_H
#define ST_JSON_H

#include <stddef.h>
#include <stdint.h>

#include <string.h>

#include <cjson/cJSON.h>

/* Reason codes: stable strings that senders, metrics and the dead-letter topic
 * use. */
#define ST_REASON_EMPTY "empty_line"
#define ST_REASON_TOO_LONG "line_too_long"
#define ST_REASON_NUL "nul_byte"
#define ST_REASON_UTF8 "invalid_utf8"
#define ST_REASON_DEPTH "too_deep"
#define ST_REASON_JSON "invalid_json"
#define ST_REASON_DUPLICATE "duplicate_key"
#define ST_REASON_NOT_OBJECT "not_an_object"
#define ST_REASON_MISSING "missing_field"
#define ST_REASON_TYPE "wrong_type"
#define ST_REASON_VALUE "invalid_value"
#define ST_REASON_SCHEMA "unknown_schema"
#define ST_REASON_EVENT_TYPE "unknown_type"
#define ST_REASON_TIMESTAMP "invalid_timestamp"
#define ST_REASON_NUMBER "number_out_of_range"

/* Why a document was refused: code is one of ST_REASON_*, msg says where. */
struct st_reject {
    const char *code;
    char msg[200];
};

#define ST_JSON_MAX_DEPTH 64

/* The largest display scale (digits after the decimal point) of a number
 * PostgreSQL's numeric, and so jsonb, can hold. */
#define ST_JSON_MAX_SCALE 16383

/* The scanning rules of the strict parser, shared with the collector's one
 * pass (common/onepass.c) so that both accept the same strings.
 * st_json_utf8_len: bytes of the UTF-8 sequence at s (left bytes remain),
 * -1 when it is not valid (overlong, a UTF-16 surrogate, above U+10FFFF).
 * st_json_bytes_ok: 1 when s[0..n), a string's raw bytes, hold no control
 * byte and only valid UTF-8. st_json_hex4: the four hex digits at s (not
 * past end) in *out; 0, or -1 when they are not four hex digits. */
int st_json_utf8_len(const unsigned char *s, size_t left);
int st_json_bytes_ok(const unsigned char *s, size_t n);
int st_json_hex4(const unsigned char *s, const unsigned char *end, unsigned *out);

/* Parses buf[0..len) as one JSON document after checking that it is valid
 * UTF-8 without NUL bytes, nested at most ST_JSON_MAX_DEPTH deep, and has no
 * duplicate key in any object. A number must be a finite double and need at
 * most ST_JSON_MAX_SCALE digits after the point (ST_REASON_NUMBER), so that
 * PostgreSQL can store every accepted document as jsonb. Returns the document (caller frees with
 * cJSON_Delete) or NULL with *rej filled. */
cJSON *st_json_parse(const char *buf, size_t len, struct st_reject *rej);

struct st_arena;

/* st_json_parse with every node and string of the document taken from
 * arena (arena.h): the same tree, the same refusals, no malloc per node.
 * The document is freed with the arena, never with cJSON_Delete, and must
 * not be changed with cJSON's functions that free or allocate nodes. On
 * failure what the parse took stays in the arena until it is destroyed. */
cJSON *st_json_parse_in(const char *buf, size_t len, struct st_arena *arena,
                        struct st_reject *rej);

/* The pieces of st_json_parse_in's trees, for a reader that builds part
 * of one itself (onepass.c): a node of type t (cJSON_String, ...) from
 * arena, every other member zero; a number's value (valuedouble, and
 * valueint as cJSON sets it); item appended to parent's children (cJSON's
 * links: the first child's prev is the last). */
cJSON *st_json_node_in(struct st_arena *arena, int type);
void st_json_set_number(cJSON *c, double v);
void st_json_append(cJSON *parent, cJSON *item);

/* Returns 1 when buf[0..len) is valid UTF-8 (no overlongs, no surrogates). */
int st_utf8_valid(const char *buf, size_t len);

/* Copies at most max bytes of buf into a new NUL-terminated string that is
 * valid UTF-8: invalid bytes and NULs become '?', a cut never splits a
 * character. Used to quote rejected input. Caller frees. */
char *st_utf8_sanitize(const char *buf, size_t len, size_t max);

/* 1 when v is not NULL and of cJSON type t (cJSON_String, cJSON_Object...):
 * cJSON_IsString and the like, inlined (they are calls into libcjson). */
static inline int st_json_is(const cJSON *v, int t)
{
    return v && (v->type & 0xFF) == t;
}

/* Typed lookups: return NULL/0 when the member is absent or of another type. */
/* obj's member key (case-sensitive), or NULL. The same as
 * cJSON_GetObjectItemCaseSensitive, cheaper: most keys differ in their first
 * byte, so strcmp runs only for those that do not. */
static inline cJSON *st_json_get(const cJSON *obj, const char *key)
{
    if (!obj)
        return NULL;
    for (cJSON *c = obj->child; c; c = c->next)
        if (c->string && c->string[0] == key[0] && strcmp(c->string, key) == 0)
            return c;
    return NULL;
}

const char *st_json_str(const cJSON *obj, const char *key);
int st_json_int(const cJSON *obj, const char *key, int64_t *out);
/* The same of a node already found (NULL: absent): its string, or 1 and
 * *out when it is an integer (a number with no fraction, within 2^53). */
const char *st_json_as_str(const cJSON *v);
int st_json_as_int(const cJSON *v, int64_t *out);

#endif
