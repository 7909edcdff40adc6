/* event.c: parsing and validating sandtrail.event.v1 (see event.h and
 * schemas/event.v1.schema.json, which this code must agree with: the tests
 * run every example through both). */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "arena.h"
#include "buf.h"
#include "event.h"
#include "log.h"
#include "onepass.h"
#include "redact.h"
#include "timeutil.h"

static const struct st_type_info types[ST_TYPE__COUNT] = {
    [ST_TYPE_EXEC] = {"exec", ST_SOURCE_SANDBOX,
                      {{"command", ST_ATTR_STRING, 1},
                       {"exit_code", ST_ATTR_INT, 0},
                       {"cwd", ST_ATTR_STRING, 0},
                       {"duration_ms", ST_ATTR_NUMBER, 0}},
                      NULL},
    [ST_TYPE_FILE_READ] = {"file_read", ST_SOURCE_SANDBOX,
                           {{"path", ST_ATTR_STRING, 1}, {"bytes", ST_ATTR_INT, 0}}, NULL},
    [ST_TYPE_FILE_WRITE] = {"file_write", ST_SOURCE_SANDBOX,
                            {{"path", ST_ATTR_STRING, 1}, {"bytes", ST_ATTR_INT, 0}}, NULL},
    [ST_TYPE_COMMIT] = {"commit", ST_SOURCE_SANDBOX, {{"branch", ST_ATTR_STRING, 0}}, NULL},
    [ST_TYPE_UPLOAD] = {"upload", ST_SOURCE_SANDBOX,
                        {{"artifact", ST_ATTR_STRING, 1}, {"bytes", ST_ATTR_INT, 0}}, NULL},
    [ST_TYPE_REQUEST] = {"request", ST_SOURCE_PROXY,
                         {{"method", ST_ATTR_STRING, 0},
                          {"host", ST_ATTR_STRING, 1},
                          {"port", ST_ATTR_INT, 0},
                          {"path", ST_ATTR_STRING, 0},
                          {"status", ST_ATTR_INT, 0},
                          {"bytes_out", ST_ATTR_INT, 0},
                          {"bytes_in", ST_ATTR_INT, 0},
                          {"dst_ip", ST_ATTR_STRING, 0}},
                         NULL},
    [ST_TYPE_TOKEN_ISSUE] = {"token_issue", ST_SOURCE_BROKER,
                             {{"expires_at", ST_ATTR_STRING, 0}}, "credential_id"},
    [ST_TYPE_TOKEN_USE] = {"token_use", ST_SOURCE_BROKER,
                           {{"operation", ST_ATTR_STRING, 0}, {"audience", ST_ATTR_STRING, 0}},
                           "credential_id"},
    [ST_TYPE_TOKEN_DENY] = {"token_deny", ST_SOURCE_BROKER,
                            {{"requested_scope", ST_ATTR_STRING, 0},
                             {"requested_audience", ST_ATTR_STRING, 0}},
                            NULL},
    [ST_TYPE_TOKEN_REVOKE] = {"token_revoke", ST_SOURCE_BROKER, {{0}}, "credential_id"},
    [ST_TYPE_TOKEN_EXPIRE] = {"token_expire", ST_SOURCE_BROKER, {{0}}, "credential_id"},
};

static const char *kind_names[] = {"sandbox", "proxy", "broker"};
static const char *decision_names[] = {"allow", "deny", "error"};

const struct st_type_info *st_event_type_info(enum st_event_type t)
{
    return &types[t];
}

const char *st_event_type_name(enum st_event_type t)
{
    return types[t].name;
}

const char *st_source_kind_name(enum st_source_kind k)
{
    return kind_names[k];
}

const char *st_decision_name(enum st_decision d)
{
    return decision_names[d];
}

static int reject(struct st_reject *rej, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int reject(struct st_reject *rej, const char *code, const char *fmt, ...)
{
    va_list ap;
    rej->code = code;
    va_start(ap, fmt);
    vsnprintf(rej->msg, sizeof(rej->msg), fmt, ap);
    va_end(ap);
    return -1;
}

/* A required or optional non-empty string member: v is the member key of
 * an object (NULL when absent). path names the object for messages (""
 * at the top, "source." inside source). */
static int get_str(const cJSON *v, const char *path, const char *key,
                   int required, size_t max, const char **out,
                   struct st_reject *rej)
{
    *out = NULL;
    if (!v || st_json_is(v, cJSON_NULL)) {
        if (required)
            return reject(rej, ST_REASON_MISSING,
                          "missing required field \"%s%s\"", path, key);
        return 0;
    }
    if (!st_json_is(v, cJSON_String))
        return reject(rej, ST_REASON_TYPE, "field \"%s%s\" must be a string",
                      path, key);
    size_t n = strlen(v->valuestring);
    if (n == 0 || n > max)
        return reject(rej, ST_REASON_VALUE,
                      "field \"%s%s\" must be a non-empty string within the length limit",
                      path, key);
    *out = v->valuestring;
    return 0;
}

/* Identifiers join keys in Redis and PostgreSQL: no control characters. */
static int get_id(const cJSON *v, const char *path, const char *key,
                  int required, size_t max, const char **out,
                  struct st_reject *rej)
{
    if (get_str(v, path, key, required, max, out, rej))
        return -1;
    for (const unsigned char *p = (const unsigned char *)*out; p && *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            return reject(rej, ST_REASON_VALUE,
                          "field \"%s%s\" must not contain control characters",
                          path, key);
    return 0;
}

static int lookup(const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    return -1;
}

/* Checks the attrs members ti names; found[i] is the one ti->attrs[i]
 * names (NULL: absent or null). */
static int check_attrs(const struct st_type_info *ti, const cJSON *attrs,
                       const cJSON *found[ST_EVENT_ATTRS_MAX], struct st_reject *rej)
{
    for (int i = 0; i < ST_EVENT_ATTRS_MAX; i++)
        found[i] = NULL;
    for (const struct st_attr_spec *a = ti->attrs; a < ti->attrs + ST_EVENT_ATTRS_MAX && a->name;
         a++) {
        const cJSON *v = attrs ? st_json_get(attrs, a->name) : NULL;
        int64_t iv;
        if (!v || st_json_is(v, cJSON_NULL)) {
            if (a->required)
                return reject(rej, ST_REASON_MISSING,
                              "missing required field \"attrs.%s\" for type \"%s\"",
                              a->name, ti->name);
            continue;
        }
        int ok = 0;
        found[a - ti->attrs] = v;
        switch (a->kind) {
        case ST_ATTR_STRING: ok = st_json_is(v, cJSON_String); break;
        case ST_ATTR_INT: ok = st_json_as_int(v, &iv); break;
        case ST_ATTR_NUMBER: ok = st_json_is(v, cJSON_Number); break;
        case ST_ATTR_ARRAY: ok = st_json_is(v, cJSON_Array); break;
        }
        if (!ok)
            return reject(rej, ST_REASON_TYPE, "field \"attrs.%s\" must be %s",
                          a->name,
                          a->kind == ST_ATTR_STRING ? "a string"
                          : a->kind == ST_ATTR_INT  ? "an integer"
                          : a->kind == ST_ATTR_NUMBER ? "a number"
                                                : "an array");
    }
    return 0;
}

static int check_identity(const cJSON *id, struct st_reject *rej)
{
    static const char *strs[] = {"subject", "credential_id", "audience",
                                 "credential_fp"};
    const char *s;
    for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++)
        if (get_str(st_json_get(id, strs[i]), "identity.", strs[i], 0, 1024, &s, rej))
            return -1;
    const cJSON *scopes = st_json_get(id, "scopes");
    if (scopes && !st_json_is(scopes, cJSON_NULL)) {
        if (!st_json_is(scopes, cJSON_Array))
            return reject(rej, ST_REASON_TYPE,
                          "field \"identity.scopes\" must be an array of strings");
        const cJSON *sc;
        cJSON_ArrayForEach(sc, scopes) if (!st_json_is(sc, cJSON_String)) return reject(
            rej, ST_REASON_TYPE, "field \"identity.scopes\" must be an array of strings");
    }
    return 0;
}

/* The top-level members the schema names, found in one pass over the
 * document instead of a search for each: the first of a name wins, as
 * st_json_get's search would find it. */
enum top_field {
    F_SCHEMA, F_EVENT_ID, F_TS, F_SOURCE, F_TASK_ID, F_RUN_ID, F_TRACE_ID, F_TYPE,
    F_DECISION, F_REASON, F_CONTENT, F_IDENTITY, F_ATTRS, F__COUNT
};

static int top_field(const char *k)
{
#define IS(name, f) if (strcmp(k, name) == 0) return f
    switch (k[0]) {
    case 's': IS("schema", F_SCHEMA); IS("source", F_SOURCE); break;
    case 'e': IS("event_id", F_EVENT_ID); break;
    case 't':
        IS("ts", F_TS); IS("task_id", F_TASK_ID); IS("type", F_TYPE);
        IS("trace_id", F_TRACE_ID);
        break;
    case 'r': IS("run_id", F_RUN_ID); IS("reason", F_REASON); break;
    case 'd': IS("decision", F_DECISION); break;
    case 'c': IS("content", F_CONTENT); break;
    case 'i': IS("identity", F_IDENTITY); break;
    case 'a': IS("attrs", F_ATTRS); break;
    }
#undef IS
    return -1;
}

static void top_members(const cJSON *doc, const cJSON *top[F__COUNT])
{
    for (int f = 0; f < F__COUNT; f++)
        top[f] = NULL;
    for (const cJSON *c = doc->child; c; c = c->next) {
        int f = c->string ? top_field(c->string) : -1;
        if (f >= 0 && !top[f])
            top[f] = c;
    }
}

static int event_validate(struct st_event *ev, struct st_reject *rej)
{
    const cJSON *doc = ev->doc;
    const cJSON *top[F__COUNT];
    const char *s;

    if (!st_json_is(doc, cJSON_Object))
        return reject(rej, ST_REASON_NOT_OBJECT, "an event must be a JSON object");
    top_members(doc, top);
    if (get_str(top[F_SCHEMA], "", "schema", 1, 64, &s, rej))
        return -1;
    if (strcmp(s, ST_EVENT_SCHEMA) != 0)
        return reject(rej, ST_REASON_SCHEMA, "schema must be \"%s\"", ST_EVENT_SCHEMA);
    if (get_id(top[F_EVENT_ID], "", "event_id", 1, ST_EVENT_ID_MAX, &ev->event_id, rej))
        return -1;
    if (get_str(top[F_TS], "", "ts", 1, 64, &s, rej))
        return -1;
    if (st_time_parse_rfc3339(s, strlen(s), &ev->ts_us))
        return reject(rej, ST_REASON_TIMESTAMP,
                      "field \"ts\" is not an RFC 3339 date-time");
    if (ev->ts_us < ST_EVENT_TS_MIN_US || ev->ts_us > ST_EVENT_TS_MAX_US)
        return reject(rej, ST_REASON_TIMESTAMP,
                      "field \"ts\" is outside 1970-01-01T00:00:00Z .. "
                      "9999-12-31T23:59:59.999999Z");

    const cJSON *src = top[F_SOURCE];
    if (!src)
        return reject(rej, ST_REASON_MISSING, "missing required field \"source\"");
    if (!st_json_is(src, cJSON_Object))
        return reject(rej, ST_REASON_TYPE, "field \"source\" must be an object");
    if (get_str(st_json_get(src, "kind"), "source.", "kind", 1, 16, &s, rej))
        return -1;
    int k = lookup(s, kind_names, 3);
    if (k < 0)
        return reject(rej, ST_REASON_VALUE,
                      "field \"source.kind\" must be sandbox, proxy or broker");
    ev->source_kind = (enum st_source_kind)k;
    if (get_id(st_json_get(src, "name"), "source.", "name", 1, 256, &ev->source_name, rej) ||
        get_str(st_json_get(src, "platform"), "source.", "platform", 0, 256,
                &ev->source_platform, rej))
        return -1;

    if (get_id(top[F_TASK_ID], "", "task_id", 1, 256, &ev->task_id, rej) ||
        get_id(top[F_RUN_ID], "", "run_id", 1, 256, &ev->run_id, rej) ||
        get_id(top[F_TRACE_ID], "", "trace_id", 0, 256, &ev->trace_id, rej) ||
        get_str(top[F_TYPE], "", "type", 1, 64, &s, rej))
        return -1;

    int t;
    for (t = 0; t < ST_TYPE__COUNT; t++)
        if (strcmp(s, types[t].name) == 0)
            break;
    if (t == ST_TYPE__COUNT)
        return reject(rej, ST_REASON_EVENT_TYPE,
                      "field \"type\" is not a known event type");
    ev->type = (enum st_event_type)t;
    if (types[t].kind != ev->source_kind)
        return reject(rej, ST_REASON_VALUE,
                      "type \"%s\" cannot come from a source of kind \"%s\"",
                      types[t].name, kind_names[ev->source_kind]);

    const cJSON *dec = top[F_DECISION];
    ev->decision = ST_DECISION_ALLOW;
    if (dec && !st_json_is(dec, cJSON_NULL)) {
        if (!st_json_is(dec, cJSON_String))
            return reject(rej, ST_REASON_TYPE, "field \"decision\" must be a string");
        int d = lookup(dec->valuestring, decision_names, 3);
        if (d < 0)
            return reject(rej, ST_REASON_VALUE,
                          "field \"decision\" must be allow, deny or error");
        ev->decision = (enum st_decision)d;
    }

    const cJSON *reason = top[F_REASON];
    if (reason && !st_json_is(reason, cJSON_NULL) && !st_json_is(reason, cJSON_String))
        return reject(rej, ST_REASON_TYPE, "field \"reason\" must be a string");
    ev->reason = st_json_is(reason, cJSON_String) ? reason->valuestring : NULL;
    const cJSON *content = top[F_CONTENT];
    if (content && !st_json_is(content, cJSON_NULL) && !st_json_is(content, cJSON_String))
        return reject(rej, ST_REASON_TYPE, "field \"content\" must be a string");
    ev->content = st_json_is(content, cJSON_String) ? content->valuestring : NULL;

    const cJSON *id = top[F_IDENTITY];
    if (id && !st_json_is(id, cJSON_NULL)) {
        if (!st_json_is(id, cJSON_Object))
            return reject(rej, ST_REASON_TYPE, "field \"identity\" must be an object");
        if (check_identity(id, rej))
            return -1;
        ev->identity = id;
    }
    if (types[t].identity_required &&
        !st_json_str(ev->identity, types[t].identity_required))
        return reject(rej, ST_REASON_MISSING,
                      "missing required field \"identity.%s\" for type \"%s\"",
                      types[t].identity_required, types[t].name);

    const cJSON *attrs = top[F_ATTRS];
    if (attrs && !st_json_is(attrs, cJSON_NULL)) {
        if (!st_json_is(attrs, cJSON_Object))
            return reject(rej, ST_REASON_TYPE, "field \"attrs\" must be an object");
        ev->attrs = attrs;
    }
    if (check_attrs(&types[t], ev->attrs, ev->attr, rej))
        return -1;
    ev->attrs_named = 1;
    ev->target = st_event_target(ev);
    return 0;
}

/* The first block of an event's arena: a document of strings and cJSON
 * nodes (64 bytes each) takes 4 to 5 times the bytes of its text for the
 * events of the benchmarks; more blocks come if it takes more. */
#define ARENA_HINT(len) ((len) * 5 + 256)

/* 1 when s[0..len) holds needle (nlen >= 1). glibc's memmem costs about
 * a cycle a byte on an event's 600 bytes; memchr hops from one first byte
 * to the next (vectorized), and these needles' first bytes ('[', '\\') are
 * few in an event. */
static int holds(const char *s, size_t len, const char *needle, size_t nlen)
{
    const char *end = s + len;
    for (const char *p = s; (size_t)(end - p) >= nlen; p++) {
        if (!(p = memchr(p, needle[0], (size_t)(end - p) - nlen + 1)))
            return 0;
        if (memcmp(p + 1, needle + 1, nlen - 1) == 0)
            return 1;
    }
    return 0;
}

int st_event_parse(struct st_event *ev, const char *buf, size_t len,
                   struct st_reject *rej)
{
    memset(ev, 0, sizeof(*ev));
    struct st_arena *mem = st_arena_new(ARENA_HINT(len));
    cJSON *doc = st_json_parse_in(buf, len, mem, rej);
    if (!doc) {
        st_arena_destroy(mem);
        return -1;
    }
    ev->doc = doc;
    ev->mem = mem;
    if (event_validate(ev, rej)) {
        st_event_fini(ev);
        return -1;
    }
    ev->may_mark = holds(buf, len, ST_REDACT_MARKER_OPEN, strlen(ST_REDACT_MARKER_OPEN)) ||
                   holds(buf, len, "\\u", 2);
    ev->run_hash = st_hash_pair(ev->task_id, ev->run_id);
    ev->mem_bytes = st_arena_bytes(mem);
    return 0;
}

/* The first block of an event read by st_event_read: its ids and attrs
 * (strings and a few nodes), about twice its text */
#define READ_HINT(len) ((len) * 2 + 256)

int st_event_read(struct st_onepass *p, struct st_event *ev, const char *buf, size_t len,
                  struct st_reject *rej)
{
    /* may_mark: a marker, or a \\u escape (which may spell one); a line
     * the reader found no backslash in has no \\u to look for */
    if (!p || holds(buf, len, ST_REDACT_MARKER_OPEN, strlen(ST_REDACT_MARKER_OPEN)))
        return st_event_parse(ev, buf, len, rej); /* a detector walks its document */
    struct st_arena *mem = st_arena_new(READ_HINT(len));
    int undecided = st_onepass_read(p, buf, len, mem, ev);
    if (!undecided && st_onepass_escaped(p) && holds(buf, len, "\\u", 2)) {
        memset(ev, 0, sizeof(*ev)); /* its strings are in mem */
        undecided = 1;
    }
    if (undecided) {
        st_arena_destroy(mem);
        return st_event_parse(ev, buf, len, rej); /* the tree's */
    }
    ev->mem = mem;
    ev->may_mark = 0;
    ev->run_hash = st_hash_pair(ev->task_id, ev->run_id);
    ev->mem_bytes = st_arena_bytes(mem);
    return 0;
}

int st_event_parse_tree(struct st_event *ev, const char *buf, size_t len,
                        struct st_reject *rej)
{
    memset(ev, 0, sizeof(*ev));
    cJSON *doc = st_json_parse(buf, len, rej);
    if (!doc)
        return -1;
    return st_event_from_doc(ev, doc, rej);
}

int st_event_from_doc(struct st_event *ev, cJSON *doc, struct st_reject *rej)
{
    memset(ev, 0, sizeof(*ev));
    ev->doc = doc;
    if (event_validate(ev, rej)) {
        st_event_fini(ev);
        return -1;
    }
    ev->may_mark = 1; /* no text to look at */
    return 0;
}

void st_event_fini(struct st_event *ev)
{
    if (ev->mem)
        st_arena_destroy(ev->mem);
    else
        cJSON_Delete(ev->doc);
    memset(ev, 0, sizeof(*ev));
}

const cJSON *st_event_attr(const struct st_event *ev, const char *name)
{
    if (ev->attrs_named) {
        const struct st_attr_spec *a = types[ev->type].attrs;
        for (int i = 0; i < ST_EVENT_ATTRS_MAX && a[i].name; i++)
            if (a[i].name[0] == name[0] && strcmp(a[i].name, name) == 0)
                return ev->attr[i];
    }
    /* a member the schema does not name is carried, and may be asked for */
    const cJSON *v = st_json_get(ev->attrs, name);
    return st_json_is(v, cJSON_NULL) ? NULL : v;
}

const char *st_event_attr_str(const struct st_event *ev, const char *name)
{
    return st_json_as_str(st_event_attr(ev, name));
}

int st_event_attr_int(const struct st_event *ev, const char *name, int64_t *out)
{
    return st_json_as_int(st_event_attr(ev, name), out);
}

const char *st_event_target(const struct st_event *ev)
{
    if (ev->target)
        return ev->target;
    const char *s = NULL;
    switch (ev->type) {
    case ST_TYPE_REQUEST: s = st_event_attr_str(ev, "host"); break;
    case ST_TYPE_EXEC: s = st_event_attr_str(ev, "command"); break;
    case ST_TYPE_FILE_READ:
    case ST_TYPE_FILE_WRITE: s = st_event_attr_str(ev, "path"); break;
    case ST_TYPE_UPLOAD: s = st_event_attr_str(ev, "artifact"); break;
    case ST_TYPE_COMMIT: s = st_event_attr_str(ev, "branch"); break;
    case ST_TYPE_TOKEN_DENY:
        s = st_event_attr_str(ev, "requested_scope");
        if (!s)
            s = st_event_attr_str(ev, "requested_audience");
        break;
    default:
        s = st_event_attr_str(ev, "audience");
        if (!s)
            s = st_json_str(ev->identity, "audience");
        break;
    }
    return s ? s : "";
}

uint64_t st_event_run_hash(const struct st_event *ev)
{
    return ev->run_hash ? ev->run_hash : st_hash_pair(ev->task_id, ev->run_id);
}
