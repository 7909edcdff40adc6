/* report.c: the review of an evidence bundle, as report.md and a
 * self-contained report.html (no script, no network), from the bundle's
 * own events and findings.
 *
 * Commands are grouped by class with a table of (class, extended regular
 * expression on the command line), first match wins. The built-in table is
 * below; SANDTRAIL_EVIDENCE_CLASSES names a file of "class<TAB>regex" lines
 * that replaces it (docs/evidence.md). Events were redacted by the
 * collector: the report shows rule names and fingerprints, never a secret. */
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "evidence.h"
#include "log.h"

static const char *const builtin_classes[][2] = {
    {"destructive", "(^|[;&|] *)(sudo +)?(rm +-[a-zA-Z]*[rf]|shred|mkfs|dd +|truncate|"
                    "git +(push +(-f|--force)|reset +--hard|clean +-[a-z]*f)|drop +table)"},
    {"secret access", "(printenv|^env( |$)|\\.env\\b|id_rsa|\\.netrc|credentials|"
                      "secrets?\\b|vault +(read|kv)|aws +sts|gh +auth +token|keychain)"},
    {"network", "^(curl|wget|ssh|scp|rsync|nc|ncat|telnet|ftp|git +(push|fetch|pull|clone)|"
                "python3? +[^ ]*(upload|download|fetch))"},
    {"dependency change", "^(npm +(install|i|add|update|uninstall)|pnpm +add|yarn +(add|"
                          "remove)|pip3? +install|poetry +add|cargo +(add|update)|"
                          "go +(get|mod +tidy)|apt(-get)? +install|gem +install)"},
    {"build", "^(make|cmake|ninja|cargo +build|go +build|npm +run +build|gcc|cc|clang|mvn|"
              "gradle|tsc|docker +build)"},
    {"local verification", "^(pytest|python3? +-m +pytest|npm +(test|run +test)|go +test|"
                           "cargo +test|ctest|make +(test|check)|tox|jest|ruff|eslint|"
                           "mypy|shellcheck)"},
    {"read-only inspection", "^(ls|cat|head|tail|less|grep|rg|find|tree|pwd|wc|stat|file|"
                             "which|git +(status|log|diff|show|branch|blame))( |$)"},
};

#define MAXCLASS 32

struct classes {
    char *name[MAXCLASS];
    regex_t re[MAXCLASS];
    int n;
};

static int classes_load(struct classes *c, const char *file, char *errstr, size_t errsz)
{
    memset(c, 0, sizeof(*c));
    if (!file || !*file) {
        for (size_t i = 0; i < sizeof(builtin_classes) / sizeof(builtin_classes[0]); i++) {
            if (regcomp(&c->re[c->n], builtin_classes[i][1], REG_EXTENDED | REG_NOSUB))
                st_fatal("built-in command class \"%s\" does not compile",
                         builtin_classes[i][0]);
            c->name[c->n++] = st_strdup(builtin_classes[i][0]);
        }
        return 0;
    }
    FILE *f = fopen(file, "r");
    char line[2048];
    int lineno = 0;
    if (!f) {
        snprintf(errstr, errsz, "could not open the command classes \"%s\"", file);
        return -1;
    }
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        line[strcspn(line, "\n")] = '\0';
        char *tab = strchr(line, '\t');
        if (line[0] == '#' || !line[0])
            continue;
        if (!tab || c->n == MAXCLASS ||
            regcomp(&c->re[c->n], tab + 1, REG_EXTENDED | REG_NOSUB)) {
            snprintf(errstr, errsz, "%s:%d: not \"class<TAB>regex\"", file, lineno);
            fclose(f);
            return -1;
        }
        *tab = '\0';
        c->name[c->n++] = st_strdup(line);
    }
    fclose(f);
    return 0;
}

static void classes_fini(struct classes *c)
{
    for (int i = 0; i < c->n; i++) {
        regfree(&c->re[i]);
        free(c->name[i]);
    }
}

static const char *classify(const struct classes *c, const char *cmd)
{
    for (int i = 0; i < c->n; i++)
        if (regexec(&c->re[i], cmd, 0, NULL, 0) == 0)
            return c->name[i];
    return "other";
}

/* --- small helpers ---------------------------------------------------- */

static const char *s_of(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static void num_of(const cJSON *o, const char *k, char *out, size_t size)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    if (cJSON_IsNumber(v))
        snprintf(out, size, "%.15g", v->valuedouble);
    else
        snprintf(out, size, "%s", "");
}

/* A table both formats render: rows of cells, the first row the header. */
struct table {
    const char *title;
    const char *note;
    int cols;
    char **cells;
    size_t n, cap;
};

static void cell(struct table *t, const char *s)
{
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 64;
        t->cells = st_realloc(t->cells, t->cap * sizeof(*t->cells));
    }
    t->cells[t->n++] = st_strdup(s ? s : "");
}

static void table_fini(struct table *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->cells[i]);
    free(t->cells);
}

/* Counts by key (distinct strings). */
struct counter {
    char **key;
    long *n[3];
    size_t len, cap;
};

static size_t counter_at(struct counter *c, const char *key)
{
    for (size_t i = 0; i < c->len; i++)
        if (!strcmp(c->key[i], key))
            return i;
    if (c->len == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 32;
        c->key = st_realloc(c->key, c->cap * sizeof(*c->key));
        for (int j = 0; j < 3; j++)
            c->n[j] = st_realloc(c->n[j], c->cap * sizeof(long));
    }
    c->key[c->len] = st_strdup(key);
    for (int j = 0; j < 3; j++)
        c->n[j][c->len] = 0;
    return c->len++;
}

static void counter_fini(struct counter *c)
{
    for (size_t i = 0; i < c->len; i++)
        free(c->key[i]);
    free(c->key);
    for (int j = 0; j < 3; j++)
        free(c->n[j]);
}

static void md_text(struct st_buf *b, const char *s)
{
    for (; *s; s++) {
        if (*s == '|' || *s == '\\' || *s == '`' || *s == '*' || *s == '_' || *s == '<')
            st_buf_addc(b, '\\');
        st_buf_addc(b, *s == '\n' ? ' ' : *s);
    }
}

static void html_text(struct st_buf *b, const char *s)
{
    for (; *s; s++) {
        switch (*s) {
        case '<': st_buf_adds(b, "&lt;"); break;
        case '>': st_buf_adds(b, "&gt;"); break;
        case '&': st_buf_adds(b, "&amp;"); break;
        case '"': st_buf_adds(b, "&quot;"); break;
        default: st_buf_addc(b, *s);
        }
    }
}

static void render(const struct table *t, struct st_buf *md, struct st_buf *html)
{
    st_buf_printf(md, "\n## %s\n\n", t->title);
    st_buf_adds(html, "<h2>");
    html_text(html, t->title);
    st_buf_adds(html, "</h2>\n");
    if (t->note) {
        st_buf_printf(md, "%s\n\n", t->note);
        st_buf_adds(html, "<p class=\"note\">");
        html_text(html, t->note);
        st_buf_adds(html, "</p>\n");
    }
    size_t rows = t->n / (size_t)t->cols;
    if (rows <= 1) {
        st_buf_adds(md, "(none)\n");
        st_buf_adds(html, "<p class=\"none\">(none)</p>\n");
        return;
    }
    st_buf_adds(html, "<table>\n");
    for (size_t r = 0; r < rows; r++) {
        st_buf_adds(md, "|");
        st_buf_adds(html, "<tr>");
        for (int c = 0; c < t->cols; c++) {
            const char *v = t->cells[r * (size_t)t->cols + (size_t)c];
            st_buf_addc(md, ' ');
            md_text(md, v);
            st_buf_adds(md, " |");
            st_buf_adds(html, r == 0 ? "<th>" : "<td>");
            html_text(html, v);
            st_buf_adds(html, r == 0 ? "</th>" : "</td>");
        }
        st_buf_adds(md, "\n");
        st_buf_adds(html, "</tr>\n");
        if (r == 0) {
            st_buf_adds(md, "|");
            for (int c = 0; c < t->cols; c++)
                st_buf_adds(md, "---|");
            st_buf_adds(md, "\n");
        }
    }
    st_buf_adds(html, "</table>\n");
}

static const char *css =
    "body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1100px;"
    "color:#1d2330;padding:0 1em}h1{font-size:1.6em;margin-bottom:.2em}"
    "h2{font-size:1.15em;margin-top:1.8em;border-bottom:1px solid #d7dbe3;"
    "padding-bottom:.2em}table{border-collapse:collapse;width:100%;font-size:13px}"
    "th,td{border:1px solid #d7dbe3;padding:4px 7px;text-align:left;vertical-align:top;"
    "word-break:break-word}th{background:#eef1f6}tr:nth-child(even) td{background:#fafbfc}"
    ".forced{background:#b3261e;color:#fff;padding:.6em 1em;font-weight:700}"
    ".note,.none{color:#5a6275}.meta td:first-child{width:14em;font-weight:600}";

int st_report_write(const struct report_in *in, const char *dir, char *errstr, size_t errsz)
{
    struct classes cls;
    if (classes_load(&cls, in->classes_file, errstr, errsz))
        return -1;
    struct st_buf md, html, runs;
    st_buf_init(&md);
    st_buf_init(&html);
    st_buf_init(&runs);
    st_buf_adds(&runs, "");
    const cJSON *r;
    cJSON_ArrayForEach(r, in->runs)
    {
        st_buf_printf(&runs, "%s%s", runs.len ? ", " : "", r->valuestring);
    }
    const char *first_ts = NULL, *last_ts = NULL;

    struct table meta = {.title = "Scope", .note = NULL, .cols = 2}, repo = {.title = "Repository", .note = NULL, .cols = 2};
    struct table cmds = {.title = "Commands",
                         .note = "Grouped by class (first matching rule of the command"
                                 " class table, docs/evidence.md); duration and exit code"
                                 " as the sandbox reported them.",
                         .cols = 6};
    struct table files = {.title = "Files read and written", .note = NULL, .cols = 4};
    struct table net = {.title = "Network destinations", .note = NULL, .cols = 4};
    struct table creds = {.title = "Credentials", .note = "Issued, used, denied, revoked and expired, with"
                                         " their scopes; credentials appear by id only.", .cols = 6};
    struct table integ = {.title = "Integrity",
                          .note = "Every event of events.ndjson has an inclusion proof"
                                  " (proofs.json) to a signed checkpoint"
                                  " (checkpoints.json); manifest.json and SHA256SUMS"
                                  " carry detached Ed25519 signatures.",
                          .cols = 2};
    struct table fnd = {.title = "Findings", .note = NULL, .cols = 6};
    struct table red = {.title = "Redactions", .note = "Values the collector removed before anything was"
                                      " stored: by rule and keyed fingerprint, never the"
                                      " value.", .cols = 4};
    cell(&cmds, "class");
    cell(&cmds, "command");
    cell(&cmds, "working directory");
    cell(&cmds, "exit code");
    cell(&cmds, "duration ms");
    cell(&cmds, "time");
    cell(&files, "path");
    cell(&files, "reads");
    cell(&files, "writes");
    cell(&files, "bytes");
    cell(&net, "destination");
    cell(&net, "allowed");
    cell(&net, "denied");
    cell(&net, "error");
    cell(&creds, "time");
    cell(&creds, "event");
    cell(&creds, "credential");
    cell(&creds, "scopes");
    cell(&creds, "audience");
    cell(&creds, "decision");
    cell(&fnd, "detector");
    cell(&fnd, "severity");
    cell(&fnd, "first seen");
    cell(&fnd, "last seen");
    cell(&fnd, "events");
    cell(&fnd, "summary");
    cell(&red, "rule");
    cell(&red, "fingerprint");
    cell(&red, "where");
    cell(&red, "count");
    cell(&repo, "attribute");
    cell(&repo, "value");

    struct counter fc = {0}, nc = {0}, rc = {0}, repoc = {0};
    struct table bycls[MAXCLASS + 1];
    memset(bycls, 0, sizeof(bycls));
    for (size_t i = 0; i < in->nevents; i++) {
        const cJSON *e = in->events[i];
        if (!e)
            continue;
        const char *type = s_of(e, "type"), *ts = s_of(e, "ts"), *dec = s_of(e, "decision");
        const cJSON *attrs = cJSON_GetObjectItemCaseSensitive(e, "attrs");
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "identity");
        if (!type)
            continue;
        if (ts && (!first_ts || strcmp(ts, first_ts) < 0))
            first_ts = ts;
        if (ts && (!last_ts || strcmp(ts, last_ts) > 0))
            last_ts = ts;
        if (!dec)
            dec = "allow";
        static const char *const repo_keys[] = {"repository", "repo", "branch", "commit",
                                                "sha", "commit_sha", NULL};
        for (int k = 0; repo_keys[k]; k++) {
            const char *v = s_of(attrs, repo_keys[k]);
            if (v) {
                char key[1200];
                snprintf(key, sizeof(key), "%s\x1f%s", repo_keys[k], v);
                counter_at(&repoc, key);
            }
        }
        if (!strcmp(type, "exec")) {
            const char *cmd = s_of(attrs, "command");
            char code[32], dur[32];
            num_of(attrs, "exit_code", code, sizeof(code));
            num_of(attrs, "duration_ms", dur, sizeof(dur));
            const char *c = classify(&cls, cmd ? cmd : "");
            int k = 0;
            while (k < cls.n && strcmp(cls.name[k], c))
                k++;
            struct table *t = &bycls[k];
            cell(t, c);
            cell(t, cmd);
            cell(t, s_of(attrs, "cwd"));
            cell(t, code);
            cell(t, dur);
            cell(t, ts);
        } else if (!strcmp(type, "file_read") || !strcmp(type, "file_write")) {
            const char *path = s_of(attrs, "path");
            size_t at = counter_at(&fc, path ? path : "");
            fc.n[type[5] == 'r' ? 0 : 1][at]++;
            const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(attrs, "bytes");
            if (cJSON_IsNumber(bytes))
                fc.n[2][at] += (long)bytes->valuedouble;
        } else if (!strcmp(type, "request")) {
            char dest[600];
            char port[32];
            num_of(attrs, "port", port, sizeof(port));
            snprintf(dest, sizeof(dest), "%s%s%s", s_of(attrs, "host") ? s_of(attrs, "host") : "",
                     port[0] ? ":" : "", port);
            size_t at = counter_at(&nc, dest);
            nc.n[!strcmp(dec, "allow") ? 0 : !strcmp(dec, "deny") ? 1 : 2][at]++;
        } else if (!strncmp(type, "token_", 6)) {
            struct st_buf scopes;
            st_buf_init(&scopes);
            st_buf_adds(&scopes, "");
            const cJSON *sc;
            cJSON_ArrayForEach(sc, cJSON_GetObjectItemCaseSensitive(id, "scopes"))
            {
                if (cJSON_IsString(sc))
                    st_buf_printf(&scopes, "%s%s", scopes.len ? " " : "", sc->valuestring);
            }
            const char *req = s_of(attrs, "requested_scope");
            if (req)
                st_buf_printf(&scopes, "%srequested: %s", scopes.len ? " " : "", req);
            cell(&creds, ts);
            cell(&creds, type + 6);
            cell(&creds, s_of(id, "credential_id"));
            cell(&creds, scopes.data);
            const char *aud = s_of(id, "audience");
            cell(&creds, aud ? aud : s_of(attrs, "requested_audience"));
            cell(&creds, dec);
            st_buf_fini(&scopes);
        }
        const cJSON *rd;
        cJSON_ArrayForEach(rd, cJSON_GetObjectItemCaseSensitive(e, "redactions"))
        {
            char key[1200];
            snprintf(key, sizeof(key), "%s\x1f%s\x1f%s",
                     s_of(rd, "rule") ? s_of(rd, "rule") : "",
                     s_of(rd, "fingerprint") ? s_of(rd, "fingerprint") : "",
                     s_of(rd, "path") ? s_of(rd, "path") : "");
            size_t at = counter_at(&rc, key); /* may move rc.n */
            rc.n[0][at]++;
        }
    }
    /* commands, class by class in table order */
    for (int k = 0; k <= cls.n; k++)
        for (size_t j = 0; j < bycls[k].n; j++)
            cell(&cmds, bycls[k].cells[j]);
    char num[3][32];
    for (size_t i = 0; i < fc.len; i++) {
        cell(&files, fc.key[i]);
        for (int j = 0; j < 3; j++) {
            snprintf(num[j], sizeof(num[j]), "%ld", fc.n[j][i]);
            cell(&files, num[j]);
        }
    }
    for (size_t i = 0; i < nc.len; i++) {
        cell(&net, nc.key[i]);
        for (int j = 0; j < 3; j++) {
            snprintf(num[j], sizeof(num[j]), "%ld", nc.n[j][i]);
            cell(&net, num[j]);
        }
    }
    for (size_t i = 0; i < rc.len; i++) {
        char *a = strchr(rc.key[i], '\x1f'), *b = strchr(a + 1, '\x1f');
        *a = *b = '\0';
        cell(&red, rc.key[i]);
        cell(&red, a + 1);
        cell(&red, b + 1);
        snprintf(num[0], sizeof(num[0]), "%ld", rc.n[0][i]);
        cell(&red, num[0]);
    }
    for (size_t i = 0; i < repoc.len; i++) {
        char *sep = strchr(repoc.key[i], '\x1f');
        *sep = '\0';
        cell(&repo, repoc.key[i]);
        cell(&repo, sep + 1);
    }
    const cJSON *f;
    cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(in->findings, "findings"))
    {
        char n[32];
        num_of(f, "event_count", n, sizeof(n));
        cell(&fnd, s_of(f, "detector"));
        cell(&fnd, s_of(f, "severity"));
        cell(&fnd, s_of(f, "first_seen"));
        cell(&fnd, s_of(f, "last_seen"));
        cell(&fnd, n);
        cell(&fnd, s_of(f, "summary"));
    }
    char count[32], line[256];
    cell(&integ, "item");
    cell(&integ, "value");
    cell(&integ, "signing key id");
    cell(&integ, in->key_id);
    snprintf(line, sizeof(line), "%d", in->ncheckpoints);
    cell(&integ, "signed checkpoints");
    cell(&integ, line);
    const cJSON *pt;
    cJSON_ArrayForEach(pt, in->partitions)
    {
        char part[32];
        num_of(pt, "partition", part, sizeof(part));
        char lo[32], hi[32];
        num_of(pt, "first_offset", lo, sizeof(lo));
        num_of(pt, "last_offset", hi, sizeof(hi));
        snprintf(line, sizeof(line), "%s[%s] offsets %s..%s",
                 s_of(pt, "topic") ? s_of(pt, "topic") : "", part, lo, hi);
        cell(&integ, "Kafka partition");
        cell(&integ, line);
    }
    snprintf(count, sizeof(count), "%zu", in->nevents);
    cell(&meta, "item");
    cell(&meta, "value");
    cell(&meta, "task");
    cell(&meta, in->task);
    cell(&meta, "runs");
    cell(&meta, runs.data);
    cell(&meta, "first event");
    cell(&meta, first_ts);
    cell(&meta, "last event");
    cell(&meta, last_ts);
    cell(&meta, "events");
    cell(&meta, count);
    cell(&meta, "generated");
    cell(&meta, in->generated);
    /* the parts of findings.json the export left out, and why (export.c) */
    const cJSON *left = cJSON_GetObjectItemCaseSensitive(in->findings, "not_exported");
    if (cJSON_GetArraySize(left) > 0) {
        struct st_buf l;
        st_buf_init(&l);
        const cJSON *it;
        cJSON_ArrayForEach(it, left)
        {
            st_buf_printf(&l, "%s%s (%s)", l.len ? "; " : "", it->string,
                          cJSON_IsString(it) ? it->valuestring : "?");
        }
        cell(&meta, "not exported");
        cell(&meta, l.data);
        st_buf_fini(&l);
    }

    /* the documents */
    if (in->forced)
        st_buf_adds(&md, "**FORCED EXPORT: the stored rows FAILED the audit; this bundle"
                         " was exported with --force.**\n\n");
    st_buf_adds(&html, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                       "<title>sandtrail evidence</title><style>");
    st_buf_adds(&html, css);
    st_buf_adds(&html, "</style></head><body>\n");
    if (in->forced) {
        st_buf_adds(&html, "<p class=\"forced\">FORCED EXPORT: the stored rows FAILED the"
                           " audit; this bundle was exported with --force.</p>\n<pre>");
        html_text(&html, in->forced);
        st_buf_adds(&html, "</pre>\n");
        st_buf_printf(&md, "```\n%s```\n\n", in->forced);
    }
    st_buf_printf(&md, "# Evidence: task %s\n", in->task);
    st_buf_adds(&html, "<h1>Evidence: task ");
    html_text(&html, in->task);
    st_buf_adds(&html, "</h1>\n<p class=\"note\">Generated by sandtrail. Check it with"
                       " <code>sandtrail evidence verify</code> or the commands in the"
                       " README (sha256sum, openssl).</p>\n");
    const struct table *all[] = {&meta, &repo, &cmds, &files, &net, &creds, &fnd, &red, &integ};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        render(all[i], &md, &html);
    st_buf_adds(&html, "</body></html>\n");
    int rcode = write_file(dir, "report.md", md.data, md.len, errstr, errsz) ||
                        write_file(dir, "report.html", html.data, html.len, errstr, errsz)
                    ? -1
                    : 0;
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        table_fini((struct table *)all[i]);
    for (int k = 0; k <= cls.n; k++)
        table_fini(&bycls[k]);
    counter_fini(&fc);
    counter_fini(&nc);
    counter_fini(&rc);
    counter_fini(&repoc);
    classes_fini(&cls);
    st_buf_fini(&md);
    st_buf_fini(&html);
    st_buf_fini(&runs);
    return rcode;
}
