/* decoder.h: mapping the log lines of real programs onto sandtrail.event.v1.
 *
 * A decoder turns one raw line of its format (Squid's JSON access log,
 * Smokescreen's logrus lines, the sandbox runtime's violation store, Vault's
 * audit device, or lines that already are events) into one event object.
 * Each format is one file in decoders/ behind a const struct st_decoder_ops;
 * decoder.c holds the registry and the helpers the decoders share.
 *
 * Lines are untrusted: a decoder never aborts on its input, keeps its memory
 * bounded by a small multiple of the line length, and either maps a line,
 * skips it (valid for the format but not an event), or refuses it with a
 * reason. The caller validates every decoded event with st_event_parse. */
#ifndef ST_DECODER_H
#define ST_DECODER_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "json.h"

struct st_decode_ctx {
    const char *source_name; /* source.name to set, from the input's config */
    const char *platform;    /* source.platform to set, or NULL */
};

struct st_decoder_ops {
    const char *name; /* "native", "squid", "smokescreen", "srt", "vault" */
    /* Maps one raw line (no newline, not NUL-terminated, untrusted bytes) to
     * a new cJSON object in sandtrail.event.v1 form (*out, caller frees with
     * cJSON_Delete). Returns 0 with *out set; 1 when the line is valid for
     * the format but carries no event (the caller skips it silently); -1
     * with *rej filled (code from ST_REASON_*, message saying what is wrong)
     * when the line is malformed. *out is NULL unless 0 is returned. */
    int (*decode)(const char *line, size_t len, const struct st_decode_ctx *ctx,
                  cJSON **out, struct st_reject *rej);
};

extern const struct st_decoder_ops st_native_decoder;
extern const struct st_decoder_ops st_squid_decoder;
extern const struct st_decoder_ops st_smokescreen_decoder;
extern const struct st_decoder_ops st_srt_decoder;
extern const struct st_decoder_ops st_vault_decoder;

/* The decoder called name, or NULL if there is none. */
const struct st_decoder_ops *st_decoder_find(const char *name);

/* ---- Helpers shared by the decoders in decoders/, not for callers ---- */

/* What a missing task or run is called. */
#define ST_DECODE_UNKNOWN "unknown"

/* Longest identifier the decoders write (event.c accepts 256 bytes). */
#define ST_DECODE_ID_MAX 256

/* Fills *rej and returns -1, so that decoders can `return st_decode_reject()`. */
int st_decode_reject(struct st_reject *rej, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Common entry checks: an empty line is refused (ST_REASON_EMPTY). Returns 0
 * or -1 with *rej filled. */
int st_decode_check_line(const char *line, size_t len, struct st_reject *rej);

/* Parses line strictly (st_json_parse) and requires a JSON object. Returns the
 * document (caller frees) or NULL with *rej filled. */
cJSON *st_decode_parse_object(const char *line, size_t len, struct st_reject *rej);

/* Writes "<prefix>-" followed by the first 24 hex digits of the SHA-256 of
 * line[0..len) into out (size >= 64): the event id of a line whose format
 * has none. Deterministic: reading a line again gives the same id. */
void st_decode_line_id(const char *prefix, const char *line, size_t len, char *out,
                       size_t size);

/* Creates an event object holding schema, event_id, ts and source ({kind,
 * name, platform} from ctx; name falls back to fallback_name). The strings
 * are copied. */
cJSON *st_decode_event_new(const struct st_decode_ctx *ctx, const char *fallback_name,
                           const char *event_id, const char *ts, const char *kind);

/* Adds obj.key = an identifier made from s[0..len): control characters and
 * invalid UTF-8 become U+FFFD, and a value longer than ST_DECODE_ID_MAX is
 * cut and suffixed with a hash of the whole (so that distinct long values stay
 * distinct). s NULL or empty adds ST_DECODE_UNKNOWN. */
void st_decode_add_id(cJSON *obj, const char *key, const char *s, size_t len);

/* Adds task_id and run_id (either NULL or "" means ST_DECODE_UNKNOWN). */
void st_decode_add_run(cJSON *ev, const char *task_id, const char *run_id);

/* Rewrites the RFC 3339 date-time s as "YYYY-MM-DDTHH:MM:SS.ffffffZ" (UTC,
 * microseconds) into out (size >= 40), so that a decoded ts always fits the
 * schema whatever precision or offset the source wrote. Returns 0 with *us
 * set (us may be NULL), or -1 when s is not an RFC 3339 date-time from 1970
 * to 9999. */
int st_decode_ts(const char *s, char *out, size_t size, int64_t *us);

/* Extracts the 32-hex trace id from a W3C traceparent
 * ("00-<trace id>-<parent id>-<flags>") into out (size >= 33). Returns 0, or
 * -1 when s is not a traceparent or its trace id is all zeros. */
int st_decode_traceparent(const char *s, char *out, size_t size);

/* Parses an unsigned decimal integer s[0..len) (digits only) no greater than
 * max. Returns 0 with *out set, -1 otherwise. */
int st_decode_uint(const char *s, size_t len, int64_t max, int64_t *out);

/* Splits "host:port", "[v6]:port", "host" or "[v6]" into host (copied into
 * host, brackets dropped) and port (-1 when absent). Returns 0, or -1 when
 * the host is empty or too long for host_size, or the port is not a number
 * from 0 to 65535. */
int st_decode_host_port(const char *s, size_t len, char *host, size_t host_size,
                        int64_t *port);

/* Typed member lookups that tell "absent" from "wrong type". path prefixes
 * key in messages ("" at the top, "auth." inside auth). A JSON null counts as
 * absent. Each returns 1 with *out set, 0 when absent and not required, -1
 * with *rej filled when present with another type (ST_REASON_TYPE), out of
 * range (ST_REASON_VALUE), or absent and required (ST_REASON_MISSING). */
int st_decode_str(const cJSON *obj, const char *path, const char *key, int required,
                  const char **out, struct st_reject *rej);
int st_decode_int(const cJSON *obj, const char *path, const char *key, int required,
                  int64_t min, int64_t max, int64_t *out, struct st_reject *rej);
int st_decode_bool(const cJSON *obj, const char *path, const char *key, int required,
                   int *out, struct st_reject *rej);
/* An object member; *out points into obj. */
int st_decode_obj(const cJSON *obj, const char *path, const char *key, int required,
                  const cJSON **out, struct st_reject *rej);

/* Length of the UTF-8 sequence at p (left bytes available): 1 to 4, or -1
 * when it is invalid (truncated, overlong, surrogate, above U+10FFFF). */
int st_decode_utf8_len(const unsigned char *p, size_t left);

/* Adds obj.key = s unless s is NULL, empty or "-" (how the logs say "none"). */
void st_decode_add_opt(cJSON *obj, const char *key, const char *s);

#endif
