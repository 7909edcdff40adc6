/* onepass.c: a native event line read, validated and redacted in one pass
 * (see onepass.h).
 *
 * Every rule here mirrors one of the tree path, and the comments say which:
 * the grammar and the string and number decoding are json.c's (jp_*), the
 * walk order and the paths are redact.c's (walk, path_build), the output is
 * cJSON_PrintUnformatted's (libcjson 1.7.15: print_string_ptr, print_number) and
 * the checks at the end are event.c's (event_validate). A case that one of
 * them handles and this reader does not is given back undecided (bail). */
#include <assert.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "arena.h"
#include "buf.h"
#include "event.h"
#include "json.h"
#include "log.h"
#include "onepass.h"
#include "redact.h"
#include "timeutil.h"

/* Objects with more members than this are left to the tree path, whose
 * duplicate check costs n log n on a hostile object; this one compares
 * each key with the ones before it. */
#define ONEPASS_KEYS 32

/* What a member holds, as cJSON would type it. */
enum vt { V_ABSENT, V_NULL, V_FALSE, V_TRUE, V_NUMBER, V_STRING, V_ARRAY, V_OBJECT };

/* The members event_validate looks at: one slot each. */
enum field {
    F_SCHEMA,
    F_EVENT_ID,
    F_TS,
    F_SOURCE,
    F_TASK_ID,
    F_RUN_ID,
    F_TRACE_ID,
    F_TYPE,
    F_DECISION,
    F_REASON,
    F_CONTENT,
    F_IDENTITY,
    F_ATTRS,
    F_KIND, /* source.* */
    F_NAME,
    F_PLATFORM,
    F_SUBJECT, /* identity.* */
    F_CREDENTIAL_ID,
    F_AUDIENCE,
    F_CREDENTIAL_FP,
    F_SCOPES,
    F_ATTR0, /* attrs.<name>: F_ATTR0 + the name's index in p->attr_names */
    NATTR = ST_TYPE__COUNT * ST_EVENT_ATTRS_MAX,
    F__COUNT = F_ATTR0 + NATTR
};

/* The object a member belongs to. */
enum ctx { C_NONE, C_TOP, C_SOURCE, C_IDENTITY, C_ATTRS };

struct name {
    const char *s;
    size_t len;
    int field;
};

#define N(s, f) {s, sizeof(s) - 1, f}
static const struct name top_names[] = {
    N("schema", F_SCHEMA),     N("event_id", F_EVENT_ID), N("ts", F_TS),
    N("source", F_SOURCE),     N("task_id", F_TASK_ID),   N("run_id", F_RUN_ID),
    N("trace_id", F_TRACE_ID), N("type", F_TYPE),         N("decision", F_DECISION),
    N("reason", F_REASON),     N("content", F_CONTENT),   N("identity", F_IDENTITY),
    N("attrs", F_ATTRS),       {NULL, 0, 0}};
static const struct name source_names[] = {
    N("kind", F_KIND), N("name", F_NAME), N("platform", F_PLATFORM), {NULL, 0, 0}};
static const struct name identity_names[] = {
    N("subject", F_SUBJECT),         N("credential_id", F_CREDENTIAL_ID),
    N("audience", F_AUDIENCE),       N("credential_fp", F_CREDENTIAL_FP),
    N("scopes", F_SCOPES),           {NULL, 0, 0}};
#undef N

/* A context's names by hash (open addressing): one probe for most keys. */
#define DISPATCH_SLOTS 128
_Static_assert(NATTR < DISPATCH_SLOTS, "every attrs name has a slot");

struct dispatch {
    const struct name *tab;
    short slot[DISPATCH_SLOTS]; /* index in tab, -1: empty */
};

/* Keys shorter than this whose st_redact_key found nothing are
 * remembered with their kmask: the answer depends only on the key and on
 * the redactor's rules, canaries and key, fixed for its life -- not on the
 * issued credentials, which are ST_CREDSET_MIN_LEN (16) bytes at least,
 * nor on the decoded forms of a key this short, shorter still. Most events
 * repeat the same few dozen names. */
#define KEYCACHE_LEN 16
#define KEYCACHE_SLOTS 256
_Static_assert(KEYCACHE_LEN == 16, "keycache_equal loads a key's sixteen bytes");

struct keycache {
    size_t len; /* 0: empty */
    char s[KEYCACHE_LEN];
    uint64_t kmask;
    short field[5]; /* its field in each enum ctx */
};

/* A replacement found in the first pass: the ord-th string read (not
 * counting the sender's "redactions") becomes repl[off..off+len); its
 * bytes in the line, between its quotes, are line[at..at+was) (splice). */
struct repl {
    size_t ord, off, len;
    size_t at, was;
};

/* The member or element being read at one depth (redact.c's struct frame):
 * its key, for the path of a redaction, is p->kref[key]. */
struct frame {
    int in_array;
    size_t idx;
    size_t key;
};

struct st_onepass {
    struct st_redactor *r; /* kept, not owned */
    const unsigned char *p, *end;
    int bail;  /* set when the line is left to the tree path */
    int write; /* the second pass: only an event that changed is printed */

    struct st_buf out;     /* the event as printed */
    struct st_buf entries; /* the "redactions" elements, comma-separated */
    struct st_buf path;    /* a redaction's path */
    struct st_buf keytmp;  /* a key of it, NUL-terminated */
    const unsigned char *line; /* the line being read */
    struct st_buf keys; /* the open objects' keys that had escapes, decoded */
    struct keyref {
        size_t off, len;
        int decoded; /* off is in keys, else in the line (no escape) */
    } *kref; /* the keys of the open objects, not copied when plain */
    size_t nk, capk;
    struct st_buf str;  /* a string with escapes, decoded */
    struct st_buf vals; /* the slots' strings, NUL-terminated */
    unsigned *hits;     /* the rule of each redaction counted, to undo */
    size_t nhits, caphits;
    struct frame frames[ST_JSON_MAX_DEPTH];
    int mute;     /* > 0 inside the sender's "redactions": read, not kept */
    int canon;    /* the line so far is as cJSON_PrintUnformatted prints it */
    size_t spliced; /* events printed by splice (st_onepass_spliced) */
    int forged;   /* the line had a top-level "redactions" */
    size_t nred;  /* redactions made */

    /* where the top-level attrs and identity values are in the line
     * (st_onepass_read parses them alone): offset and length */
    size_t span_at[2], span_len[2];
    /* st_onepass_read's: the arena (NULL otherwise), and the attrs object
     * built from the tokens as they are read while its members are all
     * scalars (attrs_built; a nested one leaves it to the parse of its
     * span); the last string and number a value read */
    struct st_arena *mem;
    cJSON *attrs_tree;
    int attrs_built;
    const char *last_s;
    size_t last_n;
    double last_num;
    unsigned char vt[F__COUNT]; /* enum vt of each slot */
    unsigned char vctl[F__COUNT]; /* an id (is_id) holds a control character */
    size_t voff[F__COUNT], vlen[F__COUNT];
    double vnum[F__COUNT];
    /* the lean pass's: each attrs slot's node in attrs_tree (leaned: it
     * read the line; escaped: a string of the line had a backslash) */
    const cJSON *vnode[F__COUNT];
    int leaned, escaped;
    /* the lean pass's keys of the last line it read, by object (its enum
     * ctx) and position: the collector prints the events of a kind with
     * the same members in the same order, so most keys are found here by
     * one compare */
    struct leankey {
        size_t len; /* 0: none */
        char s[KEYCACHE_LEN];
        int field;
    } leankeys[C_ATTRS + 1][ONEPASS_KEYS];
    size_t lean_reads; /* lines it read (st_onepass_lean_reads) */
    int scopes_strings; /* identity.scopes holds only strings */

    size_t nstr;          /* strings read so far in this pass */
    struct st_buf rtext;  /* the redacted strings */
    struct repl *repl;    /* where they go */
    size_t nrepl, caprepl, nextrepl;
    struct keycache kc[KEYCACHE_SLOTS];

    struct name attr_names[NATTR + 1]; /* every attrs member a type names */
    struct dispatch top, source, identity, attrs;
    /* validate's look-ups, made once: each type's name (field: its enum
     * st_event_type), the slot of each attrs member it names, in the order
     * of its st_type_info, and the slot of its identity_required member
     * (-1: not a slot, -2: none required) */
    struct name type_names[ST_TYPE__COUNT + 1];
    struct dispatch types;
    short attr_field[ST_TYPE__COUNT][ST_EVENT_ATTRS_MAX];
    short idreq_field[ST_TYPE__COUNT];
};

static unsigned dispatch_hash(const char *k, size_t n)
{
    return ((unsigned)n * 7u + (unsigned char)k[0] * 3u + (unsigned char)k[n - 1]) %
           DISPATCH_SLOTS;
}

static void dispatch_init(struct dispatch *d, const struct name *tab)
{
    d->tab = tab;
    memset(d->slot, -1, sizeof(d->slot));
    for (int i = 0; tab[i].s; i++) {
        unsigned h = dispatch_hash(tab[i].s, tab[i].len);
        while (d->slot[h] >= 0)
            h = (h + 1) % DISPATCH_SLOTS;
        d->slot[h] = (short)i;
    }
}

/* The field of member k[0..n) of an object read in d's context, or -1. */
static int field_of(const struct dispatch *d, const char *k, size_t n)
{
    if (n == 0)
        return -1;
    for (unsigned h = dispatch_hash(k, n); d->slot[h] >= 0; h = (h + 1) % DISPATCH_SLOTS) {
        const struct name *e = &d->tab[d->slot[h]];
        if (e->len == n && memcmp(e->s, k, n) == 0)
            return e->field;
    }
    return -1;
}

struct st_onepass *st_onepass_new(struct st_redactor *r)
{
    struct st_onepass *p = st_calloc(1, sizeof(*p));
    size_t n = 0;

    p->r = r;
    st_buf_init(&p->out);
    st_buf_init(&p->entries);
    st_buf_init(&p->path);
    st_buf_init(&p->keytmp);
    st_buf_init(&p->keys);
    st_buf_init(&p->str);
    st_buf_init(&p->vals);
    st_buf_init(&p->rtext);
    for (int t = 0; t < ST_TYPE__COUNT; t++) {
        const struct st_type_info *ti = st_event_type_info((enum st_event_type)t);
        for (size_t a = 0; a < ST_EVENT_ATTRS_MAX && ti->attrs[a].name; a++) {
            size_t i;
            for (i = 0; i < n; i++)
                if (strcmp(p->attr_names[i].s, ti->attrs[a].name) == 0)
                    break;
            if (i == n) {
                p->attr_names[n].s = ti->attrs[a].name;
                p->attr_names[n].len = strlen(ti->attrs[a].name);
                p->attr_names[n].field = F_ATTR0 + (int)n;
                n++;
            }
        }
    }
    p->attr_names[n].s = NULL;
    dispatch_init(&p->top, top_names);
    dispatch_init(&p->source, source_names);
    dispatch_init(&p->identity, identity_names);
    dispatch_init(&p->attrs, p->attr_names);
    for (int t = 0; t < ST_TYPE__COUNT; t++) {
        const struct st_type_info *ti = st_event_type_info((enum st_event_type)t);
        p->type_names[t].s = st_event_type_name((enum st_event_type)t);
        p->type_names[t].len = strlen(p->type_names[t].s);
        p->type_names[t].field = t;
        for (size_t a = 0; a < ST_EVENT_ATTRS_MAX && ti->attrs[a].name; a++)
            p->attr_field[t][a] = (short)field_of(&p->attrs, ti->attrs[a].name,
                                                  strlen(ti->attrs[a].name));
        p->idreq_field[t] =
            ti->identity_required
                ? (short)field_of(&p->identity, ti->identity_required,
                                  strlen(ti->identity_required))
                : -2;
    }
    p->type_names[ST_TYPE__COUNT].s = NULL;
    dispatch_init(&p->types, p->type_names);
    return p;
}

void st_onepass_destroy(struct st_onepass *p)
{
    if (!p)
        return;
    st_buf_fini(&p->out);
    st_buf_fini(&p->entries);
    st_buf_fini(&p->path);
    st_buf_fini(&p->keytmp);
    st_buf_fini(&p->keys);
    st_buf_fini(&p->str);
    st_buf_fini(&p->vals);
    st_buf_fini(&p->rtext);
    free(p->repl);
    free(p->kref);
    free(p->hits);
    free(p);
}

static int bail(struct st_onepass *p)
{
    p->bail = 1;
    return -1;
}

/* ---- output, as cJSON_PrintUnformatted writes it ------------------------- */

/* st_buf_add without the NUL it writes each time (callers add their own
 * where they need one). */
static inline void add(struct st_buf *b, const void *s, size_t n)
{
    if (b->cap - b->len > n) {
        memcpy(b->data + b->len, s, n);
        b->len += n;
    } else {
        st_buf_add(b, s, n);
    }
}

static inline int writing(const struct st_onepass *p)
{
    return p->write && !p->mute;
}

static inline void put(struct st_onepass *p, const void *s, size_t n)
{
    if (writing(p))
        add(&p->out, s, n);
}

/* s[0..n) as a JSON string: print_string_ptr escapes '"', '\\', and the
 * bytes below 0x20 (\b \f \n \r \t by name, the others \u00xx) and copies
 * every other byte. */
static void put_string(struct st_buf *b, const char *s, size_t n)
{
    static const char hex[] = "0123456789abcdef";
    size_t from = 0;

    st_buf_addc(b, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[6] = {'\\', 0, '0', '0', 0, 0};
        size_t elen = 2;
        if (c >= 0x20 && c != '"' && c != '\\')
            continue;
        st_buf_add(b, s + from, i - from);
        from = i + 1;
        switch (c) {
        case '"': esc[1] = '"'; break;
        case '\\': esc[1] = '\\'; break;
        case '\b': esc[1] = 'b'; break;
        case '\f': esc[1] = 'f'; break;
        case '\n': esc[1] = 'n'; break;
        case '\r': esc[1] = 'r'; break;
        case '\t': esc[1] = 't'; break;
        default:
            esc[1] = 'u';
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            elen = 6;
        }
        st_buf_add(b, esc, elen);
    }
    st_buf_add(b, s + from, n - from);
    st_buf_addc(b, '"');
}

/* A number as print_number (cJSON 1.7.15) writes it: %1.15g when that
 * reads back within DBL_EPSILON of the double, else %1.17g. */
static void put_number(struct st_onepass *p, double d)
{
    char b[32];
    snprintf(b, sizeof(b), "%1.15g", d);
    double t = strtod(b, NULL);
    double m = fabs(t) > fabs(d) ? fabs(t) : fabs(d);
    if (!(fabs(t - d) <= m * DBL_EPSILON))
        snprintf(b, sizeof(b), "%1.17g", d);
    put(p, b, strlen(b));
}

/* ---- tokens, as json.c reads them ---------------------------------------- */

static inline void ws(struct st_onepass *p)
{
    if (p->p < p->end && *p->p > ' ')
        return;
    const unsigned char *from = p->p;
    while (p->p < p->end &&
           (*p->p == ' ' || *p->p == '\t' || *p->p == '\n' || *p->p == '\r'))
        p->p++;
    if (p->p != from) /* the printer writes none */
        p->canon = 0;
}

static int read_escaped(struct st_onepass *p, const unsigned char *b,
                        const unsigned char *q, const char **s, size_t *n,
                        int *plain);

/* p->p at the opening quote: the decoded string in *s, *n (in the line when
 * it has no escape, *plain then set: it needs none in the output either;
 * else in p->str). -1 (bail) where jp_string fails. Inline: most strings
 * are short and have no escape; read_escaped decodes the others. */
static inline __attribute__((always_inline)) int
read_string(struct st_onepass *p, const char **s, size_t *n, int *plain)
{
    const unsigned char *b = ++p->p, *q = b, *end = p->end;
    /* one scan for the closing quote, a backslash, a control byte and
     * UTF-8 (what jp_string does in three), sixteen bytes at a time while
     * they are printable ASCII other than '"' and '\\' */
    for (;;) {
#ifdef __SSE2__
        if (end - q >= 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)(const void *)q);
            /* signed: below 0x20 or from 0x80 up */
            __m128i odd = _mm_or_si128(
                _mm_cmplt_epi8(v, _mm_set1_epi8(0x20)),
                _mm_or_si128(_mm_cmpeq_epi8(v, _mm_set1_epi8('"')),
                             _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))));
            unsigned m = (unsigned)_mm_movemask_epi8(odd);
            if (!m) {
                q += 16;
                continue;
            }
            q += __builtin_ctz(m);
        }
#endif
        if (q >= end)
            return bail(p);
        if (*q == '"' || *q == '\\')
            break;
        if (*q < 0x20)
            return bail(p);
        if (*q < 0x80) {
            q++;
            continue;
        }
        int len = st_json_utf8_len(q, (size_t)(end - q));
        if (len < 0)
            return bail(p);
        q += len;
    }
    if (*q == '"') {
        *s = (const char *)b;
        *n = (size_t)(q - b);
        *plain = 1;
        p->p = q + 1;
        return 0;
    }
    return read_escaped(p, b, q, s, n, plain);
}

/* The closing quote of a string at or after e, which starts no escape (a
 * backslash takes the byte after it); end or past it when there is none:
 * json.c's loop, sixteen bytes a load between the quotes and backslashes. */
static const unsigned char *string_end(const unsigned char *e, const unsigned char *end)
{
    while (e < end) {
#ifdef __SSE2__
        if (end - e >= 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)(const void *)e);
            unsigned m = (unsigned)_mm_movemask_epi8(_mm_or_si128(
                _mm_cmpeq_epi8(v, _mm_set1_epi8('"')), _mm_cmpeq_epi8(v, _mm_set1_epi8('\\'))));
            if (!m) {
                e += 16;
                continue;
            }
            e += __builtin_ctz(m);
        }
#endif
        if (*e == '"')
            return e;
        e += *e == '\\' ? 2 : 1;
    }
    return e;
}

/* read_string's string from b (after the quote), whose first backslash is
 * at q. */
static __attribute__((noinline)) int read_escaped(struct st_onepass *p,
                                                  const unsigned char *b,
                                                  const unsigned char *q,
                                                  const char **s, size_t *n,
                                                  int *plain)
{
    /* b..q was checked by read_string's scan (q, a backslash, ends no
     * UTF-8 sequence): the raw bytes are checked from q on */
    const unsigned char *e = string_end(q, p->end);
    p->escaped = 1;
    if (e >= p->end || !st_json_bytes_ok(q, (size_t)(e - q)))
        return bail(p);
    struct st_buf *o = &p->str;
    st_buf_reset(o);
    for (const unsigned char *x = b; x < e;) {
        const unsigned char *run = x;
        x = memchr(x, '\\', (size_t)(e - x));
        if (!x)
            x = e;
        st_buf_add(o, run, (size_t)(x - run));
        if (x >= e)
            break;
        x++;
        unsigned cp, lo;
        char u[4];
        /* print_string_ptr writes '/' itself, and \u only for the control
         * bytes without a short escape, as \u00 and two lowercase digits:
         * any other escape makes the line one the printer writes
         * otherwise (p->canon) */
        switch (*x) {
        case '/': p->canon = 0; /* fall through */
        case '"': case '\\': st_buf_addc(o, (char)*x++); continue;
        case 'b': st_buf_addc(o, '\b'); x++; continue;
        case 'f': st_buf_addc(o, '\f'); x++; continue;
        case 'n': st_buf_addc(o, '\n'); x++; continue;
        case 'r': st_buf_addc(o, '\r'); x++; continue;
        case 't': st_buf_addc(o, '\t'); x++; continue;
        case 'u': break;
        default: return bail(p);
        }
        if (st_json_hex4(x + 1, e, &cp))
            return bail(p);
        if (!(cp < 0x20 && cp != '\b' && cp != '\t' && cp != '\n' && cp != '\f' &&
              cp != '\r' && x[1] == '0' && x[2] == '0' && (x[3] == '0' || x[3] == '1') &&
              ((x[4] >= '0' && x[4] <= '9') || (x[4] >= 'a' && x[4] <= 'f'))))
            p->canon = 0;
        x += 5;
        if (cp >= 0xDC00 && cp <= 0xDFFF)
            return bail(p);
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (e - x < 6 || x[0] != '\\' || x[1] != 'u' || st_json_hex4(x + 2, e, &lo) ||
                lo < 0xDC00 || lo > 0xDFFF)
                return bail(p);
            x += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        if (cp == 0)
            return bail(p);
        if (cp < 0x80) {
            st_buf_addc(o, (char)cp);
        } else if (cp < 0x800) {
            u[0] = (char)(0xC0 | cp >> 6);
            u[1] = (char)(0x80 | (cp & 0x3F));
            st_buf_add(o, u, 2);
        } else if (cp < 0x10000) {
            u[0] = (char)(0xE0 | cp >> 12);
            u[1] = (char)(0x80 | (cp >> 6 & 0x3F));
            u[2] = (char)(0x80 | (cp & 0x3F));
            st_buf_add(o, u, 3);
        } else {
            u[0] = (char)(0xF0 | cp >> 18);
            u[1] = (char)(0x80 | (cp >> 12 & 0x3F));
            u[2] = (char)(0x80 | (cp >> 6 & 0x3F));
            u[3] = (char)(0x80 | (cp & 0x3F));
            st_buf_add(o, u, 4);
        }
    }
    st_buf_adds(o, ""); /* NUL-terminated even when empty */
    *s = o->data;
    *n = o->len;
    *plain = 0;
    p->p = e + 1;
    return 0;
}

/* A number, read as jp_number reads it; one jp_number would mark out of
 * range (j->big) is left to the tree path. Written as the line has it when
 * print_number would write the same: an integer of at most 15 digits
 * (which %1.15g writes in full, "-0" included). */
static int read_number(struct st_onepass *p, double *out)
{
    const unsigned char *s = p->p, *q = s, *end = p->end;
    int simple = 1;
    if (q < end && *q == '-')
        q++;
    if (q < end && *q == '0') {
        q++;
    } else if (q < end && *q >= '1' && *q <= '9') {
        while (q < end && *q >= '0' && *q <= '9')
            q++;
    } else {
        return bail(p);
    }
    int64_t frac = 0, exp = 0, expsign = 1;
    if (q < end && *q == '.') {
        simple = 0;
        if (++q >= end || *q < '0' || *q > '9')
            return bail(p);
        while (q < end && *q >= '0' && *q <= '9')
            q++, frac++;
    }
    if (q < end && (*q == 'e' || *q == 'E')) {
        simple = 0;
        q++;
        if (q < end && (*q == '+' || *q == '-'))
            expsign = *q++ == '-' ? -1 : 1;
        if (q >= end || *q < '0' || *q > '9')
            return bail(p);
        while (q < end && *q >= '0' && *q <= '9') {
            if (exp < 1000000)
                exp = exp * 10 + (*q - '0');
            q++;
        }
    }
    size_t n = (size_t)(q - s);
    double v;
    if (simple && n <= 16) {
        int64_t i = 0;
        for (const unsigned char *d = *s == '-' ? s + 1 : s; d < q; d++)
            i = i * 10 + (*d - '0');
        v = *s == '-' ? -(double)i : (double)i;
    } else {
        char small[64], *buf = n < sizeof(small) ? small : st_malloc(n + 1);
        memcpy(buf, s, n);
        buf[n] = '\0';
        v = strtod(buf, NULL);
        if (buf != small)
            free(buf);
    }
    if (!isfinite(v) || frac - expsign * exp > ST_JSON_MAX_SCALE)
        return bail(p);
    p->p = q;
    *out = v;
    if (!(simple && n - (*s == '-') <= 15))
        p->canon = 0; /* print_number may write it otherwise */
    if (!writing(p))
        return 0;
    if (simple && n - (*s == '-') <= 15)
        put(p, s, n);
    else
        put_number(p, v);
    return 0;
}

/* 1 when s[0..n) holds a byte below 0x20 or 0x7f (event.c's get_id). */
/* The fields get_id reads. */
static int is_id(int f)
{
    return f == F_EVENT_ID || f == F_NAME || f == F_TASK_ID || f == F_RUN_ID ||
           f == F_TRACE_ID;
}

static int has_control(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return 1;
    return 0;
}

/* ---- redaction, as redact.c's walk does it ------------------------------- */

/* The path of frames[0..depth] (path_build). */
static inline const char *key_at(const struct st_onepass *p, size_t i)
{
    const struct keyref *k = &p->kref[i];
    return k->decoded ? p->keys.data + k->off : (const char *)p->line + k->off;
}

static const char *path_of(struct st_onepass *p, int depth)
{
    st_buf_reset(&p->path);
    for (int i = 0; i <= depth; i++) {
        if (p->frames[i].in_array) {
            st_buf_printf(&p->path, "[%zu]", p->frames[i].idx);
        } else { /* st_redact_path_add_key takes it NUL-terminated */
            const struct keyref *k = &p->kref[p->frames[i].key];
            st_buf_reset(&p->keytmp);
            st_buf_add(&p->keytmp, key_at(p, p->frames[i].key), k->len);
            st_redact_path_add_key(&p->path, p->keytmp.data);
        }
    }
    return p->path.data ? p->path.data : "";
}

/* Notes the hits the k matches of the last redaction counted, to undo
 * them on a bail. */
static void note_hits(struct st_onepass *p, size_t k)
{
    for (size_t i = 0; i < k; i++) {
        if (p->nhits == p->caphits) {
            p->caphits = p->caphits ? p->caphits * 2 : 16;
            p->hits = st_realloc(p->hits, p->caphits * sizeof(*p->hits));
        }
        p->hits[p->nhits++] = st_redact_match_rule(p->r, i);
    }
}

/* Notes the k matches of the last redaction, of the string at frames[depth]:
 * their hits and their "redactions" entries (add_entry). */
static void note_matches(struct st_onepass *p, size_t k, int depth)
{
    const char *path = path_of(p, depth);
    note_hits(p, k);
    for (size_t i = 0; i < k; i++) {
        const char *fp = "";
        const char *rule = st_redact_match(p->r, i, &fp);
        if (p->entries.len)
            st_buf_addc(&p->entries, ',');
        st_buf_adds(&p->entries, "{\"path\":");
        put_string(&p->entries, path, strlen(path));
        st_buf_adds(&p->entries, ",\"rule\":");
        put_string(&p->entries, rule, strlen(rule));
        st_buf_adds(&p->entries, ",\"fingerprint\":");
        put_string(&p->entries, fp, strlen(fp));
        st_buf_addc(&p->entries, '}');
    }
    p->nred += k;
}

/* The field of key k[0..n) in an object read in ctx, or -1. */
static int field_in(const struct st_onepass *p, enum ctx ctx, const char *k, size_t n)
{
    switch (ctx) {
    case C_TOP: return field_of(&p->top, k, n);
    case C_SOURCE: return field_of(&p->source, k, n);
    case C_IDENTITY: return field_of(&p->identity, k, n);
    case C_ATTRS: return field_of(&p->attrs, k, n);
    case C_NONE: break;
    }
    return -1;
}

/* st_redact_key and the key's field in ctx, through the cache: 0 with
 * *kmask and *field, or -1 when the key is redacted (its hits noted, to be
 * undone: the tree path's case). */
static inline int keycache_equal(const struct st_onepass *p, const struct keycache *c,
                                  const char *key, size_t klen, int in_line)
{
    if (c->len != klen)
        return 0;
#ifdef __SSE2__
    /* one compare of sixteen bytes when they all are the line's (c->s has
     * sixteen): the first klen must be equal */
    if (in_line && p->end - (const unsigned char *)key >= 16) {
        __m128i a = _mm_loadu_si128((const __m128i *)(const void *)key);
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)c->s);
        unsigned eq = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(a, b));
        unsigned need = (1u << klen) - 1; /* klen < 16 */
        return (eq & need) == need;
    }
#else
    (void)p;
    (void)in_line;
#endif
    return memcmp(c->s, key, klen) == 0;
}

/* A key's hash: its slots in the key cache, its bit in object()'s filter
 * of the keys met. */
static inline unsigned key_hash(const char *key, size_t klen)
{
    return klen ? (unsigned)klen * 31u + (unsigned char)key[0] * 7u +
                      (unsigned char)key[klen - 1] * 13u + (unsigned char)key[klen / 2]
                : 0u;
}

/* in_line: key is in the line being read (not decoded); h its key_hash. */
static int key_info(struct st_onepass *p, const char *key, size_t klen, unsigned h,
                    int in_line, enum ctx ctx, uint64_t *kmask, int *field)
{
    struct keycache *c = NULL;
    if (klen > 0 && klen < KEYCACHE_LEN) {
        /* two slots a key: two names of one event whose hashes meet
         * (schema and method, trace_id and cwd) would otherwise put each
         * other out on every event; a miss replaces the second slot's key
         * unless the first is empty */
        struct keycache *c0 = &p->kc[h % KEYCACHE_SLOTS], *c1 = &p->kc[(h ^ 1) % KEYCACHE_SLOTS];
        if (keycache_equal(p, c0, key, klen, in_line))
            c = c0;
        else if (keycache_equal(p, c1, key, klen, in_line))
            c = c1;
        if (c) {
            *kmask = c->kmask;
            *field = c->field[ctx];
            return 0;
        }
        c = c0->len ? c1 : c0;
    }
    size_t k = p->r ? st_redact_key(p->r, key, klen, kmask) : (*kmask = 0, 0);
    if (k) { /* frames[depth] is not this member's yet: no path, no entry */
        note_hits(p, k);
        return -1;
    }
    *field = field_in(p, ctx, key, klen);
    if (c) {
        c->len = klen;
        memcpy(c->s, key, klen);
        c->kmask = *kmask;
        for (int x = C_NONE; x <= C_ATTRS; x++)
            c->field[x] = (short)field_in(p, (enum ctx)x, key, klen);
    }
    return 0;
}

/* ---- values -------------------------------------------------------------- */

/* 1 when s[0..n) holds a 0x7f: sixteen bytes in one compare when s is in
 * the line with sixteen bytes after it. */
static inline int has_del(const struct st_onepass *p, const char *s, size_t n)
{
#ifdef __SSE2__
    if (n < 16 && (const unsigned char *)s >= p->line && p->end - (const unsigned char *)s >= 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(const void *)s);
        unsigned m = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(0x7f)));
        return (m & ((1u << n) - 1)) != 0;
    }
#else
    (void)p;
#endif
    return memchr(s, 0x7f, n) != NULL;
}

/* true, false or null at p->p: its type, or -1 after a bail. */
static int read_word(struct st_onepass *p)
{
    static const struct {
        const char *s;
        size_t n;
        int t;
    } words[] = {{"true", 4, V_TRUE}, {"false", 5, V_FALSE}, {"null", 4, V_NULL}};
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++)
        if (*p->p == words[i].s[0]) {
            if (p->end - p->p < (ptrdiff_t)words[i].n || memcmp(p->p, words[i].s, words[i].n))
                break;
            p->p += words[i].n;
            put(p, words[i].s, words[i].n);
            return words[i].t;
        }
    return bail(p);
}

/* A string s[0..n) read for slot field (plain: as it was in the line, with
 * no escape; else decoded or redacted): kept in vals, an id's control
 * bytes noted. An attrs member's slot is checked for its type only
 * (check_attrs): its string is not kept. */
static void slot_string(struct st_onepass *p, int field, const char *s, size_t n, int plain)
{
    if (field < 0 || field >= F_ATTR0)
        return;
    /* only ids are held to having no control character (get_id); a string
     * without escapes has no byte below 0x20 */
    if (is_id(field))
        p->vctl[field] = plain ? has_del(p, s, n) : has_control(s, n);
    p->voff[field] = p->vals.len;
    p->vlen[field] = n;
    add(&p->vals, s, n);
    add(&p->vals, "", 1);
}

/* The value of slot field, of type t (d: its number), read from start to
 * p->p. */
static void slot_value(struct st_onepass *p, int field, int t, double d,
                       const unsigned char *start)
{
    p->vt[field] = (unsigned char)t;
    p->vnum[field] = d;
    if (field == F_ATTRS || field == F_IDENTITY) {
        int i = field == F_IDENTITY;
        p->span_at[i] = (size_t)(start - p->line);
        p->span_len[i] = (size_t)(p->p - start);
    }
}

/* The value at p->p, at depth (the frame of the member or element that
 * holds it), recorded in slot field (-1: none), its members read in ctx
 * when it is an object; name/namelen/kmask as st_redact_value takes them.
 * Returns its type, or -1 after a bail. */
static int value(struct st_onepass *p, int depth, int field, enum ctx ctx,
                 const char *name, size_t namelen, uint64_t kmask);

/* st_onepass_read's attrs member key[0..klen), of type t (a scalar: the
 * last string or number read), as st_json_parse_in makes it */
static const cJSON *attrs_member(struct st_onepass *p, const char *key, size_t klen, int field,
                                 int t)
{
    static const int types[] = {[V_NULL] = cJSON_NULL, [V_FALSE] = cJSON_False,
                                [V_TRUE] = cJSON_True, [V_NUMBER] = cJSON_Number,
                                [V_STRING] = cJSON_String};
    cJSON *c = st_json_node_in(p->mem, types[t]);
    if (field >= F_ATTR0) { /* a name the schema has: its own string, static */
        c->string = (char *)p->attr_names[field - F_ATTR0].s;
    } else {
        char *k = st_arena_alloc_bytes(p->mem, klen + 1);
        memcpy(k, key, klen);
        k[klen] = '\0';
        c->string = k;
    }
    if (t == V_NUMBER) {
        st_json_set_number(c, p->last_num);
    } else if (t == V_STRING) {
        char *v = st_arena_alloc_bytes(p->mem, p->last_n + 1);
        memcpy(v, p->last_s, p->last_n);
        v[p->last_n] = '\0';
        c->valuestring = v;
    }
    st_json_append(p->attrs_tree, c);
    return c;
}

static int object(struct st_onepass *p, int depth, enum ctx ctx)
{
    size_t k0 = p->nk, keys0 = p->keys.len;
    int wrote = 0;
    /* st_onepass_read: the top-level attrs object, built as it is read */
    int build = ctx == C_ATTRS && p->mem;
    if (build) {
        p->attrs_tree = st_json_node_in(p->mem, cJSON_Object);
        p->attrs_built = 1;
    }
    /* a bit per key of this object, from its key_hash (also its slots in
     * the key cache): a key whose bit is not set yet cannot be a duplicate,
     * so the keys before it are compared only when it is (equal keys have
     * equal bits) */
    uint64_t seen = 0;

    if (depth >= ST_JSON_MAX_DEPTH)
        return bail(p);
    put(p, "{", 1);
    p->p++;
    ws(p);
    if (p->p < p->end && *p->p == '}') {
        p->p++;
        put(p, "}", 1);
        return V_OBJECT;
    }
    for (;;) {
        const char *key;
        size_t klen;
        int plain;
        if (p->p >= p->end || *p->p != '"' || read_string(p, &key, &klen, &plain))
            return bail(p);
        /* a duplicate is the tree path's to name */
        if (p->nk - k0 >= ONEPASS_KEYS)
            return bail(p);
        unsigned h = key_hash(key, klen);
        uint64_t bit = (uint64_t)1 << (h & 63u);
        if (seen & bit)
            for (size_t i = k0; i < p->nk; i++) {
                if (p->kref[i].len == klen && memcmp(key_at(p, i), key, klen) == 0)
                    return bail(p);
            }
        seen |= bit;
        if (p->nk == p->capk) {
            p->capk = p->capk ? p->capk * 2 : 64;
            p->kref = st_realloc(p->kref, p->capk * sizeof(*p->kref));
        }
        size_t kidx = p->nk;
        if (plain) { /* in the line, where it stays */
            p->kref[p->nk++] = (struct keyref){(size_t)((const unsigned char *)key - p->line),
                                               klen, 0};
        } else { /* p->str is the next string's */
            p->kref[p->nk++] = (struct keyref){p->keys.len, klen, 1};
            add(&p->keys, key, klen);
            key = p->keys.data + p->kref[kidx].off;
        }
        ws(p);
        if (p->p >= p->end || *p->p != ':')
            return bail(p);
        p->p++;
        ws(p);

        /* st_redact_event drops the sender's top-level "redactions" before
         * it walks (st_accept_line then prints the event) and takes
         * identity.credential away to fingerprint it: the tree path's */
        int muted = ctx == C_TOP && klen == 10 && memcmp(key, "redactions", 10) == 0;
        if (ctx == C_IDENTITY && klen == 10 && memcmp(key, "credential", 10) == 0 &&
            p->p < p->end && *p->p == '"')
            return bail(p);
        uint64_t km = 0;
        int field = -1;
        enum ctx sub = C_NONE;
        if (muted) {
            p->forged = 1;
            p->mute++;
        } else if (!p->mute && !p->write) {
            if (key_info(p, key, klen, h, plain, ctx, &km, &field))
                return bail(p);
            if (ctx == C_TOP)
                sub = field == F_SOURCE     ? C_SOURCE
                      : field == F_IDENTITY ? C_IDENTITY
                      : field == F_ATTRS    ? C_ATTRS
                                            : C_NONE;
        } else if (writing(p)) {
            if (wrote)
                put(p, ",", 1);
            if (plain) {
                put(p, "\"", 1);
                put(p, key, klen);
                put(p, "\"", 1);
            } else {
                put_string(&p->out, key, klen);
            }
            put(p, ":", 1);
        }
        if (!muted)
            wrote = 1;
        p->frames[depth].in_array = 0;
        p->frames[depth].key = kidx;
        int t = value(p, depth, field, sub, key, klen, km);
        if (muted)
            p->mute--;
        if (t < 0)
            return -1;
        if (build && p->attrs_built) {
            if (t == V_OBJECT || t == V_ARRAY)
                p->attrs_built = 0; /* its span is parsed instead */
            else
                attrs_member(p, key, klen, field, t);
        }
        ws(p);
        if (p->p < p->end && *p->p == ',') {
            p->p++;
            ws(p);
            continue;
        }
        if (p->p < p->end && *p->p == '}') {
            p->p++;
            break;
        }
        return bail(p);
    }
    p->nk = k0;
    p->keys.len = keys0;
    if (depth == 0 && p->entries.len && p->write) {
        /* add_entry's array, appended to the top-level object */
        if (wrote)
            put(p, ",", 1);
        put(p, "\"redactions\":[", 14);
        put(p, p->entries.data, p->entries.len);
        put(p, "]", 1);
    }
    put(p, "}", 1);
    return V_OBJECT;
}

static int array(struct st_onepass *p, int depth, int field)
{
    if (depth >= ST_JSON_MAX_DEPTH)
        return bail(p);
    put(p, "[", 1);
    p->p++;
    ws(p);
    if (p->p < p->end && *p->p == ']') {
        p->p++;
        put(p, "]", 1);
        return V_ARRAY;
    }
    for (size_t idx = 0;; idx++) {
        if (idx)
            put(p, ",", 1);
        p->frames[depth].in_array = 1;
        p->frames[depth].idx = idx;
        int t = value(p, depth, -1, C_NONE, NULL, 0, 0);
        if (t < 0)
            return -1;
        if (field == F_SCOPES && t != V_STRING)
            p->scopes_strings = 0;
        ws(p);
        if (p->p < p->end && *p->p == ',') {
            p->p++;
            ws(p);
            continue;
        }
        if (p->p < p->end && *p->p == ']') {
            p->p++;
            break;
        }
        return bail(p);
    }
    put(p, "]", 1);
    return V_ARRAY;
}

static int value(struct st_onepass *p, int depth, int field, enum ctx ctx,
                 const char *name, size_t namelen, uint64_t kmask)
{
    int t;
    double d = 0;
    const unsigned char *start = p->p;

    if (p->p >= p->end)
        return bail(p);
    switch (*p->p) {
    case '{': t = object(p, depth + 1, ctx); break;
    case '[':
        if (field == F_SCOPES)
            p->scopes_strings = 1;
        t = array(p, depth + 1, field);
        break;
    case '"': {
        const char *s;
        size_t n;
        int plain;
        const unsigned char *open = p->p; /* for splice */
        if (read_string(p, &s, &n, &plain))
            return -1;
        p->last_s = s;
        p->last_n = n;
        if (p->mute)
            ; /* the sender's "redactions": dropped */
        else if (!p->write) {
            const char *red;
            size_t rlen;
            size_t k = p->r ? st_redact_value(p->r, s, n, name, namelen, kmask, &red, &rlen)
                            : 0;
            if (k) {
                note_matches(p, k, depth);
                if (p->nrepl == p->caprepl) {
                    p->caprepl = p->caprepl ? p->caprepl * 2 : 16;
                    p->repl = st_realloc(p->repl, p->caprepl * sizeof(*p->repl));
                }
                p->repl[p->nrepl++] = (struct repl){
                    p->nstr, p->rtext.len, rlen, (size_t)(open + 1 - p->line),
                    (size_t)(p->p - 1 - (open + 1))};
                add(&p->rtext, red, rlen);
                s = red;
                n = rlen;
            }
            slot_string(p, field, s, n, plain && !k);
        } else {
            if (p->nextrepl < p->nrepl && p->repl[p->nextrepl].ord == p->nstr) {
                const struct repl *x = &p->repl[p->nextrepl++];
                s = p->rtext.data + x->off;
                n = x->len;
                plain = 0;
            }
            if (plain) {
                put(p, "\"", 1);
                put(p, s, n);
                put(p, "\"", 1);
            } else {
                put_string(&p->out, s, n);
            }
        }
        if (!p->mute)
            p->nstr++;
        t = V_STRING;
        break;
    }
    case 't':
    case 'f':
    case 'n': t = read_word(p); break;
    default:
        if (*p->p != '-' && (*p->p < '0' || *p->p > '9'))
            return bail(p);
        if (read_number(p, &d))
            return -1;
        p->last_num = d;
        t = V_NUMBER;
    }
    if (t < 0)
        return -1;
    if (field >= 0 && !p->mute && !p->write)
        slot_value(p, field, t, d, start);
    return t;
}

/* ---- the checks of event_validate, on the slots -------------------------- */

static const char *slot_str(const struct st_onepass *p, int f)
{
    return p->vt[f] == V_STRING ? p->vals.data + p->voff[f] : NULL;
}

/* get_str: 0 with *out (NULL when absent or null and not required), -1
 * where get_str rejects. */
static int get_str(const struct st_onepass *p, int f, int required, size_t max,
                   const char **out)
{
    *out = NULL;
    if (p->vt[f] == V_ABSENT || p->vt[f] == V_NULL)
        return required ? -1 : 0;
    if (p->vt[f] != V_STRING || p->vlen[f] == 0 || p->vlen[f] > max)
        return -1;
    *out = slot_str(p, f);
    return 0;
}

/* get_id: get_str, and no control character. */
static int get_id(const struct st_onepass *p, int f, int required, size_t max,
                  const char **out)
{
    if (get_str(p, f, required, max, out))
        return -1;
    assert(is_id(f));
    return *out && p->vctl[f] ? -1 : 0;
}

static int name_index(const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0)
            return i;
    return -1;
}

static int check_attrs(const struct st_onepass *p, enum st_event_type type,
                       const struct st_type_info *ti)
{
    for (const struct st_attr_spec *a = ti->attrs;
         a < ti->attrs + ST_EVENT_ATTRS_MAX && a->name; a++) {
        int f = p->attr_field[type][a - ti->attrs];
        int t = p->vt[F_ATTRS] == V_OBJECT ? p->vt[f] : V_ABSENT;
        if (t == V_ABSENT || t == V_NULL) {
            if (a->required)
                return -1;
            continue;
        }
        double d = p->vnum[f];
        int ok = 0;
        switch (a->kind) {
        case ST_ATTR_STRING: ok = t == V_STRING; break;
        case ST_ATTR_INT: /* st_json_int */
            ok = t == V_NUMBER && d == floor(d) && fabs(d) <= 9007199254740992.0;
            break;
        case ST_ATTR_NUMBER: ok = t == V_NUMBER; break;
        case ST_ATTR_ARRAY: ok = t == V_ARRAY; break;
        }
        if (!ok)
            return -1;
    }
    return 0;
}

/* event_validate on the slots: 0 with ev filled, or -1 where it rejects. */
static int validate(struct st_onepass *p, struct st_event *ev)
{
    static const char *kinds[] = {"sandbox", "proxy", "broker"};
    static const char *decisions[] = {"allow", "deny", "error"};
    const char *s;

    if (get_str(p, F_SCHEMA, 1, 64, &s) || strcmp(s, ST_EVENT_SCHEMA) != 0 ||
        get_id(p, F_EVENT_ID, 1, ST_EVENT_ID_MAX, &ev->event_id) ||
        get_str(p, F_TS, 1, 64, &s) ||
        st_time_parse_rfc3339(s, p->vlen[F_TS], &ev->ts_us) ||
        ev->ts_us < ST_EVENT_TS_MIN_US || ev->ts_us > ST_EVENT_TS_MAX_US)
        return -1;
    if (p->vt[F_SOURCE] != V_OBJECT || get_str(p, F_KIND, 1, 16, &s))
        return -1;
    int k = name_index(s, kinds, 3);
    if (k < 0)
        return -1;
    ev->source_kind = (enum st_source_kind)k;
    if (get_id(p, F_NAME, 1, 256, &ev->source_name) ||
        get_str(p, F_PLATFORM, 0, 256, &ev->source_platform) ||
        get_id(p, F_TASK_ID, 1, 256, &ev->task_id) ||
        get_id(p, F_RUN_ID, 1, 256, &ev->run_id) ||
        get_id(p, F_TRACE_ID, 0, 256, &ev->trace_id) || get_str(p, F_TYPE, 1, 64, &s))
        return -1;
    /* the slot's string has no NUL in it (read_string refuses \u0000):
     * equal bytes and length are strcmp's equality */
    int t = field_of(&p->types, s, p->vlen[F_TYPE]);
    if (t < 0)
        return -1;
    const struct st_type_info *ti = st_event_type_info((enum st_event_type)t);
    ev->type = (enum st_event_type)t;
    if (ti->kind != ev->source_kind)
        return -1;

    ev->decision = ST_DECISION_ALLOW;
    if (p->vt[F_DECISION] != V_ABSENT && p->vt[F_DECISION] != V_NULL) {
        if (p->vt[F_DECISION] != V_STRING)
            return -1;
        int d = name_index(slot_str(p, F_DECISION), decisions, 3);
        if (d < 0)
            return -1;
        ev->decision = (enum st_decision)d;
    }
    if ((p->vt[F_REASON] != V_ABSENT && p->vt[F_REASON] != V_NULL &&
         p->vt[F_REASON] != V_STRING) ||
        (p->vt[F_CONTENT] != V_ABSENT && p->vt[F_CONTENT] != V_NULL &&
         p->vt[F_CONTENT] != V_STRING))
        return -1;
    ev->reason = slot_str(p, F_REASON);
    ev->content = slot_str(p, F_CONTENT);

    int has_identity = p->vt[F_IDENTITY] != V_ABSENT && p->vt[F_IDENTITY] != V_NULL;
    if (has_identity) {
        if (p->vt[F_IDENTITY] != V_OBJECT ||
            get_str(p, F_SUBJECT, 0, 1024, &s) ||
            get_str(p, F_CREDENTIAL_ID, 0, 1024, &s) ||
            get_str(p, F_AUDIENCE, 0, 1024, &s) ||
            get_str(p, F_CREDENTIAL_FP, 0, 1024, &s))
            return -1;
        if (p->vt[F_SCOPES] != V_ABSENT && p->vt[F_SCOPES] != V_NULL &&
            (p->vt[F_SCOPES] != V_ARRAY || !p->scopes_strings))
            return -1;
    }
    if (p->idreq_field[t] != -2) {
        int f = p->idreq_field[t];
        if (!has_identity || f < 0 || p->vt[f] != V_STRING)
            return -1;
    }
    if (p->vt[F_ATTRS] != V_ABSENT && p->vt[F_ATTRS] != V_NULL &&
        p->vt[F_ATTRS] != V_OBJECT)
        return -1;
    return check_attrs(p, (enum st_event_type)t, ti);
}

/* ---- st_onepass_read's lean pass ----------------------------------------- */

/* key[0..klen), in the line, is lk's key (klen, lk->len's, is from 1 to
 * KEYCACHE_LEN - 1). */
static inline int lean_key_equal(const struct st_onepass *p, const struct leankey *lk,
                                 const char *key, size_t klen)
{
#ifdef __SSE2__
    if (p->end - (const unsigned char *)key >= 16) { /* keycache_equal's compare */
        __m128i a = _mm_loadu_si128((const __m128i *)(const void *)key);
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)lk->s);
        unsigned eq = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(a, b));
        unsigned need = (1u << klen) - 1;
        return (eq & need) == need;
    }
#endif
    return memcmp(lk->s, key, klen) == 0;
}

/* The shape the collector prints an event in (cJSON_PrintUnformatted: no
 * whitespace), read into the slots as pass() reads it, without what
 * redaction and printing need (the keys' paths and frames, the output, the
 * sender's "redactions"). It takes only: keys without escapes; scalars
 * and, at the top level, the source, identity and attrs objects, whose
 * members are scalars. Anything else (an array, another object, an escaped
 * key, whitespace, a top-level "redactions", an identity.credential, a
 * duplicate key, more than ONEPASS_KEYS members) gives -1, and pass()
 * reads the line from its start. What it takes, it reads with pass()'s own
 * token readers, into the same slots. */
static int lean_object(struct st_onepass *p, int depth, enum ctx ctx)
{
    const unsigned char *end = p->end;
    /* a duplicate: a slot met twice (equal slots are equal names), or an
     * equal name among the keys that have none (others[]) */
    const char *others[ONEPASS_KEYS];
    size_t olens[ONEPASS_KEYS];
    int nk = 0, no = 0;
    uint64_t seen[(F__COUNT + 63) / 64] = {0};
    int build = ctx == C_ATTRS;
    if (build) {
        p->attrs_tree = st_json_node_in(p->mem, cJSON_Object);
        p->attrs_built = 1;
    }
    p->p++; /* its '{' */
    if (p->p < end && *p->p == '}') {
        p->p++;
        return 0;
    }
    for (;;) {
        const char *key;
        size_t klen;
        int plain;
        if (p->p >= end || *p->p != '"' || read_string(p, &key, &klen, &plain) || !plain ||
            nk == ONEPASS_KEYS)
            return -1;
        if ((ctx == C_TOP && klen == 10 && memcmp(key, "redactions", 10) == 0) ||
            (ctx == C_IDENTITY && klen == 10 && memcmp(key, "credential", 10) == 0))
            return -1;
        struct leankey *lk = &p->leankeys[ctx][nk++];
        int field;
        if (lk->len == klen && klen > 0 && lean_key_equal(p, lk, key, klen)) {
            field = lk->field;
        } else {
            uint64_t km;
            key_info(p, key, klen, key_hash(key, klen), 1, ctx, &km, &field); /* no redactor */
            if (klen > 0 && klen < KEYCACHE_LEN) {
                lk->len = klen;
                memcpy(lk->s, key, klen);
                lk->field = field;
            }
        }
        if (field >= 0) {
            uint64_t bit = (uint64_t)1 << (field % 64);
            if (seen[field / 64] & bit)
                return -1;
            seen[field / 64] |= bit;
        } else {
            for (int i = 0; i < no; i++)
                if (olens[i] == klen && memcmp(others[i], key, klen) == 0)
                    return -1;
            others[no] = key;
            olens[no++] = klen;
        }
        if (p->p >= end || *p->p != ':')
            return -1;
        p->p++;

        const unsigned char *start = p->p;
        double d = 0;
        int t;
        if (p->p >= end)
            return -1;
        switch (*p->p) {
        case '{': {
            enum ctx sub = depth > 0              ? C_NONE
                           : field == F_SOURCE   ? C_SOURCE
                           : field == F_IDENTITY ? C_IDENTITY
                           : field == F_ATTRS    ? C_ATTRS
                                                 : C_NONE;
            if (sub == C_NONE || lean_object(p, depth + 1, sub))
                return -1;
            t = V_OBJECT;
            break;
        }
        case '"': {
            const char *v;
            size_t n;
            int vplain;
            if (read_string(p, &v, &n, &vplain))
                return -1;
            p->last_s = v;
            p->last_n = n;
            slot_string(p, field, v, n, vplain);
            t = V_STRING;
            break;
        }
        case 't':
        case 'f':
        case 'n':
            if ((t = read_word(p)) < 0)
                return -1;
            break;
        default:
            if ((*p->p != '-' && (*p->p < '0' || *p->p > '9')) || read_number(p, &d))
                return -1;
            p->last_num = d;
            t = V_NUMBER;
        }
        if (field >= 0)
            slot_value(p, field, t, d, start);
        if (build) { /* a scalar: an object here went back to pass() */
            const cJSON *c = attrs_member(p, key, klen, field, t);
            if (field >= F_ATTR0)
                p->vnode[field] = c;
        }
        if (p->p < end && *p->p == ',') {
            p->p++;
            continue;
        }
        if (p->p < end && *p->p == '}') {
            p->p++;
            return 0;
        }
        return -1;
    }
}

/* The lean pass over the whole line: 0 when it took it. */
static int lean(struct st_onepass *p, const char *line, size_t len)
{
    p->p = p->line = (const unsigned char *)line;
    p->end = p->p + len;
    p->write = 0;
    p->mute = 0;
    if (len < 2 || *p->p != '{' || lean_object(p, 0, C_TOP))
        return -1;
    return p->p == p->end ? 0 : -1;
}

/* ---- the line ------------------------------------------------------------ */

/* One pass over the line from its start. */
static int pass(struct st_onepass *p, const char *line, size_t len, int write)
{
    p->p = p->line = (const unsigned char *)line;
    p->end = p->p + len;
    p->write = write;
    p->mute = 0;
    p->nk = 0;
    p->nstr = 0;
    p->nextrepl = 0;
    st_buf_reset(&p->keys);
    ws(p);
    if (p->p >= p->end || *p->p != '{' || value(p, -1, -1, C_TOP, NULL, 0, 0) < 0)
        return -1;
    ws(p);
    return p->p < p->end ? -1 : 0;
}

/* The event's line with its redacted strings put in place and the
 * "redactions" array added before its last '}': what the second pass
 * writes, for a line that is already as the printer prints it (p->canon:
 * no whitespace between tokens, only the escapes the printer writes, every
 * number an integer of at most 15 digits) but for those strings, and has
 * no "redactions" of its
 * own. Every member is printed as it is in the line then, and the top
 * object, valid, has members: the array follows a ','. */
static void splice(struct st_onepass *p, const char *line, size_t len)
{
    size_t pos = 0;
    assert(len > 1 && line[len - 1] == '}' && !p->forged);
    for (size_t i = 0; i < p->nrepl; i++) {
        const struct repl *x = &p->repl[i];
        assert(x->at > pos && line[x->at - 1] == '"' && line[x->at + x->was] == '"');
        add(&p->out, line + pos, x->at - 1 - pos); /* up to its opening quote */
        put_string(&p->out, p->rtext.data + x->off, x->len);
        pos = x->at + x->was + 1; /* past its closing quote */
    }
    add(&p->out, line + pos, len - 1 - pos);
    add(&p->out, ",\"redactions\":[", 15);
    add(&p->out, p->entries.data, p->entries.len);
    add(&p->out, "]}", 2);
    p->spliced++;
}

int st_onepass_escaped(const struct st_onepass *p)
{
    return p->escaped;
}

size_t st_onepass_lean_reads(const struct st_onepass *p)
{
    return p->lean_reads;
}

size_t st_onepass_spliced(const struct st_onepass *p)
{
    return p->spliced;
}

int st_onepass_event(struct st_onepass *p, const char *line, size_t len,
                     struct st_event *ev, const char **out, size_t *outlen)
{
    memset(ev, 0, sizeof(*ev));
    p->bail = 0;
    p->forged = 0;
    p->nred = 0;
    p->nhits = 0;
    p->nrepl = 0;
    p->canon = 1;
    st_buf_reset(&p->entries);
    st_buf_reset(&p->vals);
    st_buf_reset(&p->rtext);
    memset(p->vt, V_ABSENT, sizeof(p->vt));

    /* the first pass reads, redacts and validates; an event that changed
     * (most do not: the line itself is produced) is printed by a second,
     * which puts the first's redacted strings in place */
    if (pass(p, line, len, 0) || validate(p, ev))
        goto undecided;
    if (p->nred || p->forged) {
        st_buf_reset(&p->out);
        if (p->canon && !p->forged && len > 1 && line[len - 1] == '}')
            splice(p, line, len); /* most: no second pass */
        else if (pass(p, line, len, 1))
            goto undecided; /* cannot happen: the same line passed once */
        add(&p->out, "", 1); /* NUL-terminated, as printed text is */
        p->out.len--;
        *out = p->out.data;
        *outlen = p->out.len;
    } else {
        *out = line;
        *outlen = len;
    }
    return 0;

undecided:
    for (size_t i = 0; i < p->nhits; i++)
        st_redact_uncount(p->r, p->hits[i]);
    memset(ev, 0, sizeof(*ev));
    return 1;
}

int st_onepass_read(struct st_onepass *p, const char *line, size_t len,
                    struct st_arena *mem, struct st_event *ev)
{
    assert(!p->r);
    memset(ev, 0, sizeof(*ev));
    p->bail = 0;
    p->forged = 0;
    p->nred = 0;
    p->nhits = 0;
    p->nrepl = 0;
    p->canon = 1;
    st_buf_reset(&p->vals);
    memset(p->vt, V_ABSENT, sizeof(p->vt));
    p->mem = mem;
    p->attrs_tree = NULL;
    p->attrs_built = 0;
    p->escaped = 0;
    p->leaned = !lean(p, line, len);
    if (!p->leaned) { /* the slots as they were, for pass() */
        p->bail = 0;
        st_buf_reset(&p->vals);
        memset(p->vt, V_ABSENT, sizeof(p->vt));
        p->attrs_tree = NULL;
        p->attrs_built = 0;
        if (pass(p, line, len, 0)) {
            p->mem = NULL;
            goto undecided;
        }
    }
    int rc = validate(p, ev);
    p->mem = NULL;
    if (rc)
        goto undecided;

    /* the slots' strings, moved into mem with ev's pointers to them */
    char *v = st_arena_alloc_bytes(mem, p->vals.len + 1);
    memcpy(v, p->vals.data, p->vals.len);
    const char **strs[] = {&ev->event_id, &ev->source_name, &ev->source_platform,
                           &ev->task_id,  &ev->run_id,      &ev->trace_id,
                           &ev->reason,   &ev->content};
    for (size_t i = 0; i < sizeof(strs) / sizeof(strs[0]); i++)
        if (*strs[i])
            *strs[i] = v + (*strs[i] - p->vals.data);

    /* attrs and identity as the tree path has them: attrs built as it was
     * read when its members are all scalars (most); else, and identity,
     * each read alone by the strict parser, which accepts them (the whole
     * line passed) */
    struct st_reject rej;
    if (p->vt[F_ATTRS] == V_OBJECT && p->attrs_built)
        ev->attrs = p->attrs_tree;
    else if (p->vt[F_ATTRS] == V_OBJECT &&
             !(ev->attrs = st_json_parse_in(line + p->span_at[0], p->span_len[0], mem, &rej)))
        goto undecided;
    if (p->vt[F_IDENTITY] == V_OBJECT &&
        !(ev->identity = st_json_parse_in(line + p->span_at[1], p->span_len[1], mem, &rej)))
        goto undecided;
    const struct st_type_info *ti = st_event_type_info(ev->type);
    for (size_t i = 0; i < ST_EVENT_ATTRS_MAX && ti->attrs[i].name; i++) {
        const cJSON *a;
        if (p->leaned) { /* the node the lean pass made for its slot */
            int f = p->attr_field[ev->type][i];
            a = p->vt[F_ATTRS] == V_OBJECT && p->vt[f] != V_ABSENT ? p->vnode[f] : NULL;
        } else {
            a = st_json_get(ev->attrs, ti->attrs[i].name);
        }
        ev->attr[i] = st_json_is(a, cJSON_NULL) ? NULL : a;
    }
    p->lean_reads += (size_t)p->leaned;
    ev->attrs_named = 1;
    ev->target = st_event_target(ev);
    return 0;

undecided:
    memset(ev, 0, sizeof(*ev));
    return 1;
}
