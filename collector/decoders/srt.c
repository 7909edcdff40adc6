/* srt.c: Anthropic's sandbox runtime (srt), as JSON lines of its hooks.
 *
 * Each line is one hook call, {"harness":"srt","hook":NAME,...}. The events
 * are in "violation-store" lines, what srt's violation store hands a
 * subscriber: {line, command, encodedCommand, timestamp}, one per denial
 * (the store records denials only). A bare store record without "hook" is
 * read the same way.
 *
 * Mapping (source.kind "sandbox", decision "deny", reason the violation text
 * ("line"), event_id "srt-" + hash of the raw line):
 *   "deny <op> /path"  (the write observer: openat, mkdir, ...)
 *       -> file_write, attrs.path, attrs.violation = op
 *   anything else ("deny network-outbound host:port (why)",
 *                  "deny http-request GET url (why)")
 *       -> exec: the command was refused something; attrs.violation = op and
 *          attrs.target = what was refused, without the "(why)"
 *   attrs.command is the command text, attrs.command_id the decoded id.
 * The write observer also reports mkdir of parents that already exist
 * ("mkdir -p" walking up to /tmp): they are real refusals of the call and
 * are kept; a decoder sees one line and cannot tell them apart.
 *
 * task_id and run_id: encodedCommand is base64 of the command id that the
 * caller gave srt, "T-42/tool-N" in the sample: the task, then the tool call.
 * task_id is the part before the first '/'. The sample's ids carry no run
 * (the run, "run-7", appears only inside commands and in filterRequest hooks,
 * which name no task), and a tool call is not a run: counting each tool call
 * as a run would split one run's denials into runs of one. So run_id is the
 * middle part of a "task/run/tool" id when the caller writes one, else
 * "unknown". Without encodedCommand both are "unknown".
 *
 * Other hooks (filterRequest, askCallback, annotated-stderr) carry no time or
 * no task, or repeat the store's violations: they are skipped. command-exit
 * is mapped to exec with attrs.exit_code only when it carries a "timestamp"
 * (the sample's do not: they are skipped rather than stamped with the time
 * of reading, which would make re-reading a file change the events). */
#include <stdlib.h>
#include <string.h>

#include "decoder.h"
#include "log.h"

static int b64_value(unsigned char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

/* Decodes standard base64 (RFC 4648 section 4, padding optional) into a new
 * buffer (caller frees) of *out_len bytes. Returns NULL when s is not
 * base64. */
static unsigned char *b64_decode(const char *s, size_t len, size_t *out_len)
{
    size_t pad = 0;
    while (len > 0 && s[len - 1] == '=' && pad < 2) {
        len--;
        pad++;
    }
    if (len % 4 == 1 || (pad && (len + pad) % 4 != 0))
        return NULL;
    unsigned char *out = st_malloc(len / 4 * 3 + 3);
    size_t o = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < len; i++) {
        int v = b64_value((unsigned char)s[i]);
        if (v < 0) {
            free(out);
            return NULL;
        }
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (unsigned char)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    if (acc != 0) { /* leftover bits must be zero in canonical base64 */
        free(out);
        return NULL;
    }
    *out_len = o;
    return out;
}

/* Adds task_id and run_id from a command id "task[/run]/tool" (see the file
 * comment); id NULL gives "unknown" for both. */
static void add_run_from_command_id(cJSON *ev, const char *id, size_t len)
{
    const char *slash = id ? memchr(id, '/', len) : NULL;
    size_t task_len = slash ? (size_t)(slash - id) : len;
    st_decode_add_id(ev, "task_id", id, task_len);
    if (slash) {
        const char *run = slash + 1;
        size_t left = len - (size_t)(run - id);
        const char *slash2 = memchr(run, '/', left);
        if (slash2 && slash2 > run) {
            st_decode_add_id(ev, "run_id", run, (size_t)(slash2 - run));
            return;
        }
    }
    st_decode_add_id(ev, "run_id", NULL, 0);
}

static int srt_violation(const char *line, size_t len, const cJSON *doc,
                         const struct st_decode_ctx *ctx, cJSON **out,
                         struct st_reject *rej)
{
    const char *text, *when, *command, *enc;
    unsigned char *cmd_id = NULL;
    size_t cmd_id_len = 0;
    char ts[40], id[64];

    if (st_decode_str(doc, "", "line", 1, &text, rej) < 0 ||
        st_decode_str(doc, "", "timestamp", 1, &when, rej) < 0 ||
        st_decode_str(doc, "", "command", 0, &command, rej) < 0 ||
        st_decode_str(doc, "", "encodedCommand", 0, &enc, rej) < 0)
        return -1;
    if (st_decode_ts(when, ts, sizeof(ts), NULL))
        return st_decode_reject(rej, ST_REASON_TIMESTAMP,
                                "field \"timestamp\" is not an RFC 3339 date-time");
    if (*text == '\0')
        return st_decode_reject(rej, ST_REASON_VALUE, "field \"line\" is empty");
    if (enc && *enc && !(cmd_id = b64_decode(enc, strlen(enc), &cmd_id_len)))
        return st_decode_reject(rej, ST_REASON_VALUE,
                                "field \"encodedCommand\" is not base64");

    /* "deny <op> <rest>" */
    const char *op = NULL, *rest = NULL;
    size_t op_len = 0;
    if (strncmp(text, "deny ", 5) == 0) {
        op = text + 5;
        op_len = strcspn(op, " ");
        rest = op[op_len] ? op + op_len + 1 : "";
    }
    int is_file = op && rest[0] == '/' && strncmp(op, "network", 7) != 0 &&
                  strncmp(op, "http", 4) != 0;

    st_decode_line_id("srt", line, len, id, sizeof(id));
    cJSON *ev = st_decode_event_new(ctx, "srt", id, ts, "sandbox");
    add_run_from_command_id(ev, (const char *)cmd_id, cmd_id_len);
    cJSON_AddStringToObject(ev, "type", is_file ? "file_write" : "exec");
    cJSON_AddStringToObject(ev, "decision", "deny");
    cJSON_AddStringToObject(ev, "reason", text);

    cJSON *attrs = cJSON_AddObjectToObject(ev, "attrs");
    if (is_file)
        cJSON_AddStringToObject(attrs, "path", rest);
    if (command)
        cJSON_AddStringToObject(attrs, "command", command);
    else if (!is_file)
        st_decode_add_id(attrs, "command", (const char *)cmd_id, cmd_id_len);
    if (cmd_id)
        st_decode_add_id(attrs, "command_id", (const char *)cmd_id, cmd_id_len);
    if (op) {
        st_decode_add_id(attrs, "violation", op, op_len);
        if (!is_file && *rest) {
            /* the target, without the trailing " (why)" */
            const char *why = strstr(rest, " (");
            size_t n = why ? (size_t)(why - rest) : strlen(rest);
            if (n > 0)
                st_decode_add_id(attrs, "target", rest, n);
        }
    }
    free(cmd_id);
    *out = ev;
    return 0;
}

static int srt_command_exit(const char *line, size_t len, const cJSON *doc,
                            const struct st_decode_ctx *ctx, cJSON **out,
                            struct st_reject *rej)
{
    const char *when, *cmd_id, *command;
    int64_t code = 0;
    int has_code;
    char ts[40], id[64];

    if (st_decode_str(doc, "", "timestamp", 0, &when, rej) < 0)
        return -1;
    if (!when)
        return 1; /* no time of its own: see the file comment */
    if (st_decode_str(doc, "", "commandId", 0, &cmd_id, rej) < 0 ||
        st_decode_str(doc, "", "command", 0, &command, rej) < 0 ||
        (has_code = st_decode_int(doc, "", "exit_code", 0, INT32_MIN, INT32_MAX, &code,
                                  rej)) < 0)
        return -1;
    if (st_decode_ts(when, ts, sizeof(ts), NULL))
        return st_decode_reject(rej, ST_REASON_TIMESTAMP,
                                "field \"timestamp\" is not an RFC 3339 date-time");

    st_decode_line_id("srt", line, len, id, sizeof(id));
    cJSON *ev = st_decode_event_new(ctx, "srt", id, ts, "sandbox");
    add_run_from_command_id(ev, cmd_id, cmd_id ? strlen(cmd_id) : 0);
    cJSON_AddStringToObject(ev, "type", "exec");
    cJSON *attrs = cJSON_AddObjectToObject(ev, "attrs");
    cJSON_AddStringToObject(attrs, "command", command ? command : cmd_id ? cmd_id : "");
    if (has_code)
        cJSON_AddNumberToObject(attrs, "exit_code", (double)code);
    st_decode_add_opt(attrs, "command_id", cmd_id);
    *out = ev;
    return 0;
}

static int srt_decode(const char *line, size_t len, const struct st_decode_ctx *ctx,
                      cJSON **out, struct st_reject *rej)
{
    const char *hook;
    int rc;

    *out = NULL;
    if (st_decode_check_line(line, len, rej))
        return -1;
    cJSON *doc = st_decode_parse_object(line, len, rej);
    if (!doc)
        return -1;
    if (st_decode_str(doc, "", "hook", 0, &hook, rej) < 0)
        rc = -1;
    else if (!hook && cJSON_HasObjectItem(doc, "line"))
        rc = srt_violation(line, len, doc, ctx, out, rej); /* a bare store record */
    else if (!hook)
        rc = st_decode_reject(rej, ST_REASON_MISSING, "missing required field \"hook\"");
    else if (strcmp(hook, "violation-store") == 0)
        rc = srt_violation(line, len, doc, ctx, out, rej);
    else if (strcmp(hook, "command-exit") == 0)
        rc = srt_command_exit(line, len, doc, ctx, out, rej);
    else
        rc = 1;
    cJSON_Delete(doc);
    return rc;
}

const struct st_decoder_ops st_srt_decoder = {
    .name = "srt",
    .decode = srt_decode,
};
