/* accept.c: decode -> redact -> validate (see accept.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "accept.h"
#include "buf.h"
#include "collector.h"
#include "credset.h"
#include "decoder.h"
#include "event.h"
#include "json.h"
#include "log.h"
#include "onepass.h"
#include "redact.h"

struct st_accept {
    const struct st_decoder_ops *decoder;
    struct st_decode_ctx ctx;
    struct st_redactor *redactor;
    struct st_onepass *onepass; /* native lines without a tree; NULL: off */
    struct st_event ev; /* the last accepted event */
    char *text;         /* its serialization, when it was not the line itself */
    /* matches of the text pass over a foreign line (see st_accept_line) */
    const char **mrule;
    char (*mfp)[ST_REDACT_FP_MAX + 1];
    size_t capm;
    size_t issued_len; /* see st_accept_issued_len */
};

static int read_all(const char *path, struct st_buf *out, char *errstr, size_t errsz,
                    const char *what)
{
    char chunk[4096];
    size_t n;
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(errstr, errsz, "could not open %s \"%s\": %s", what, path,
                 strerror(errno));
        return -1;
    }
    st_buf_adds(out, "");
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        st_buf_add(out, chunk, n);
    fclose(f);
    return 0;
}

/* The key file holds the key as hex (64 chars for 32 bytes) or raw bytes. */
static int load_key(const char *path, struct st_buf *key, char *errstr, size_t errsz)
{
    struct st_buf raw;
    st_buf_init(&raw);
    if (read_all(path, &raw, errstr, errsz, "redaction key file")) {
        st_buf_fini(&raw);
        return -1;
    }
    size_t n = raw.len;
    while (n && (raw.data[n - 1] == '\n' || raw.data[n - 1] == '\r'))
        n--;
    int hex = n >= 2 && n % 2 == 0 && strspn(raw.data, "0123456789abcdefABCDEF") == n;
    if (hex) {
        for (size_t i = 0; i < n; i += 2) {
            char b[3] = {raw.data[i], raw.data[i + 1], 0};
            st_buf_addc(key, (char)strtol(b, NULL, 16));
        }
    } else {
        st_buf_add(key, raw.data, n);
    }
    st_buf_fini(&raw);
    return 0;
}

int st_accept_read_canaries(const char *path, char **text, char *errstr, size_t errsz)
{
    struct st_buf buf;
    *text = NULL;
    if (!path || !*path)
        return 0;
    st_buf_init(&buf);
    if (read_all(path, &buf, errstr, errsz, "canaries file")) {
        st_buf_fini(&buf);
        return -1;
    }
    *text = st_strndup(buf.data, buf.len);
    st_buf_fini(&buf);
    return 0;
}

struct st_accept *st_accept_new(const struct st_collector_conf *conf,
                                const struct st_credset *issued, char *errstr,
                                size_t errsz)
{
    char *text;
    if (st_accept_read_canaries(conf->canaries_file, &text, errstr, errsz))
        return NULL;
    struct st_accept *a = st_accept_new_canaries(conf, issued, NULL, text, errstr, errsz);
    free(text);
    return a;
}

int st_accept_load_key(const struct st_collector_conf *conf, struct st_buf *key,
                       char *errstr, size_t errsz)
{
    if (!conf->key_file || !*conf->key_file) {
        snprintf(errstr, errsz,
                 "\"redact.key_file\" is not set: the collector needs a key to fingerprint "
                 "the secrets it removes (scripts/services env prints one)");
        return -1;
    }
    return load_key(conf->key_file, key, errstr, errsz);
}

struct st_accept *st_accept_new_canaries(const struct st_collector_conf *conf,
                                         const struct st_credset *issued,
                                         const struct st_buf *the_key,
                                         const char *canaries_text, char *errstr,
                                         size_t errsz)
{
    struct st_accept *a = st_calloc(1, sizeof(*a));
    struct st_buf key;
    char *canaries = canaries_text ? st_strdup(canaries_text) : NULL;
    char **list = NULL, *save = NULL;
    size_t nlist = 0;

    st_buf_init(&key);
    a->decoder = st_decoder_find(conf->format);
    if (!a->decoder) {
        snprintf(errstr, errsz,
                 "invalid value for \"input.format\": \"%s\" (native, squid, smokescreen, "
                 "srt or vault)",
                 conf->format);
        goto fail;
    }
    a->ctx.source_name = conf->source_name;
    a->ctx.platform = conf->platform && *conf->platform ? conf->platform : NULL;
    if (the_key)
        st_buf_add(&key, the_key->data, the_key->len);
    else if (st_accept_load_key(conf, &key, errstr, errsz))
        goto fail;
    /* strtok_r: executors of several lanes may be built at once (reload) */
    for (char *s = canaries ? strtok_r(canaries, "\r\n", &save) : NULL; s;
         s = strtok_r(NULL, "\r\n", &save)) {
        if (*s == '#' || *s == '\0')
            continue;
        list = st_realloc(list, (nlist + 1) * sizeof(*list));
        list[nlist++] = s;
    }
    struct st_redact_conf rc = {(const unsigned char *)key.data, key.len,
                                (const char *const *)list, nlist, (int)conf->fp_chars,
                                conf->fault_rule_off, issued};
    a->redactor = st_redactor_new(&rc, errstr, errsz);
    if (!a->redactor)
        goto fail;
    if (a->decoder == &st_native_decoder && conf->single_pass)
        a->onepass = st_onepass_new(a->redactor);
    if (key.data)
        memset(key.data, 0, key.len);
    st_buf_fini(&key);
    free(canaries);
    free(list);
    return a;
fail:
    if (key.data)
        memset(key.data, 0, key.len);
    st_buf_fini(&key);
    free(canaries);
    free(list);
    st_accept_destroy(a);
    return NULL;
}

void st_accept_destroy(struct st_accept *a)
{
    if (!a)
        return;
    st_event_fini(&a->ev);
    free(a->text);
    st_onepass_destroy(a->onepass);
    st_redactor_destroy(a->redactor);
    free(a->mrule);
    free(a->mfp);
    free(a);
}

static void redact_message(struct st_accept *a, struct st_reject *rej)
{
    int n = 0;
    char *clean = st_redact_text(a->redactor, rej->msg, strlen(rej->msg), &n);
    if (n)
        snprintf(rej->msg, sizeof(rej->msg), "%s", clean);
    free(clean);
}

/* Keeps the matches of the text pass over a foreign line. */
static size_t save_matches(struct st_accept *a, size_t n)
{
    if (n > a->capm) {
        a->capm = n;
        a->mrule = st_realloc(a->mrule, n * sizeof(*a->mrule));
        a->mfp = st_realloc(a->mfp, n * sizeof(*a->mfp));
    }
    for (size_t i = 0; i < n; i++) {
        const char *fp = "";
        a->mrule[i] = st_redact_match(a->redactor, i, &fp);
        snprintf(a->mfp[i], sizeof(a->mfp[i]), "%s", fp ? fp : "");
    }
    return n;
}

/* What the text pass redacted is recorded like the event's own
 * redactions, its place being the source line: {"path":"(line)",...}. */
static void record_line_matches(struct st_accept *a, cJSON *doc, size_t n)
{
    if (!n)
        return;
    cJSON *arr = st_json_get(doc, "redactions");
    if (!arr)
        arr = cJSON_AddArrayToObject(doc, "redactions");
    for (size_t i = 0; i < n && arr; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "path", "(line)");
        cJSON_AddStringToObject(e, "rule", a->mrule[i] ? a->mrule[i] : "unknown");
        cJSON_AddStringToObject(e, "fingerprint", a->mfp[i]);
        cJSON_AddItemToArray(arr, e);
    }
}

/* Lineage: the text pass may have redacted the credential a broker's issue
 * hands over (a rule knows its shape, hvs., or its name, client_token), so
 * the decoder did not see it. Then the line as sent is decoded again and
 * only its identity.credential is taken, which st_redact_event removes
 * (fingerprinted into identity.credential_fp) like any other. Decoders keep
 * no state (ctx is const): decoding twice changes nothing else. */
static void hand_over_credential(struct st_accept *a, cJSON *doc, const char *sent,
                                 size_t sentlen)
{
    cJSON *identity = st_json_get(doc, "identity"), *raw = NULL;
    struct st_reject rj;
    const char *type = st_json_str(doc, "type");

    if (!type || strcmp(type, "token_issue") != 0 || !cJSON_IsObject(identity) ||
        st_json_get(identity, "credential"))
        return;
    if (a->decoder->decode(sent, sentlen, &a->ctx, &raw, &rj) == 0) {
        const char *cred = st_json_str(st_json_get(raw, "identity"), "credential");
        if (cred && !cJSON_AddStringToObject(identity, "credential", cred))
            st_fatal("out of memory handing over a credential");
    }
    cJSON_Delete(raw);
}

int st_accept_line(struct st_accept *a, const char *line, size_t len, const char **out,
                   size_t *outlen, const char **key, struct st_reject *rej)
{
    cJSON *doc = NULL;

    st_event_fini(&a->ev);
    free(a->text);
    a->text = NULL;
    a->issued_len = 0;
    /* A native line is read, validated and redacted in one pass; a line
     * that pass leaves undecided (refused, or a case it does not handle:
     * onepass.h) takes the tree path below, which decides as before. */
    if (a->onepass && st_onepass_event(a->onepass, line, len, &a->ev, out, outlen) == 0) {
        *key = a->ev.task_id;
        return 0;
    }
    /* A decoder derives fields from the source's values -- splits a proxy
     * role "task/run", decodes a base64 command id -- and a part of a secret
     * need not match the rule its whole matched: a foreign line is redacted
     * as text before it is decoded, and again as an event after. */
    char *pre = NULL;
    size_t npre = 0;
    const char *sent = line;
    size_t sentlen = len;
    if (a->decoder != &st_native_decoder) {
        int n = 0;
        size_t plen;
        char *p = st_redact_bytes(a->redactor, line, len, &n, &plen);
        if (n > 0) {
            pre = p;
            line = p;
            len = plen;
            npre = save_matches(a, (size_t)n);
        } else {
            free(p);
        }
    }
    int rc = a->decoder->decode(line, len, &a->ctx, &doc, rej);
    if (rc != 0) {
        free(pre);
        if (rc == 1)
            return 1;
        redact_message(a, rej);
        return -1;
    }
    free(pre);
    pre = NULL;
    if (npre)
        hand_over_credential(a, doc, sent, sentlen);
    /* a sender's own "redactions" member is dropped by the redactor: then
     * the line as sent is not what may leave */
    int forged = st_json_get(doc, "redactions") != NULL;
    const char *cred = st_json_str(st_json_get(doc, "identity"), "credential");
    size_t credlen = cred ? strlen(cred) : 0;
    size_t issued_len = !cred ? 0 : st_credset_followable(cred, credlen) ? credlen : 1;
    int changed = st_redact_event(a->redactor, doc) > 0 || forged ||
                  a->decoder != &st_native_decoder;
    record_line_matches(a, doc, npre);
    if (st_event_from_doc(&a->ev, doc, rej)) {
        redact_message(a, rej);
        return -1;
    }
    if (changed) {
        a->text = cJSON_PrintUnformatted(a->ev.doc);
        if (!a->text)
            st_fatal("out of memory printing an event");
        *out = a->text;
        *outlen = strlen(a->text);
    } else {
        /* nothing redacted in a native line: its bytes are the event */
        *out = line;
        *outlen = len;
    }
    *key = a->ev.task_id;
    a->issued_len = issued_len;
    return 0;
}

size_t st_accept_issued_len(const struct st_accept *a)
{
    return a->issued_len;
}

char *st_accept_redact_raw(struct st_accept *a, const char *line, size_t len,
                           size_t *outlen)
{
    int n = 0;
    char *s = st_redact_text(a->redactor, line, len, &n);
    *outlen = n ? strlen(s) : len;
    return s;
}

struct st_redactor *st_accept_redactor(struct st_accept *a)
{
    return a->redactor;
}

size_t st_accept_spliced(const struct st_accept *a)
{
    return a->onepass ? st_onepass_spliced(a->onepass) : 0;
}

const struct st_event *st_accept_event(const struct st_accept *a)
{
    return &a->ev;
}
