/* conf.c: declarative configuration tables (see conf.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "log.h"

#define FIELD(conf, prop) ((char *)(conf) + (prop)->offset)

static const struct st_conf_prop *conf_find(const struct st_conf_prop *props,
                                            const char *name)
{
    for (; props->name; props++)
        if (strcmp(props->name, name) == 0)
            return props;
    return NULL;
}

static int conf_assign(const struct st_conf_prop *p, void *conf,
                       const char *value, char *errstr, size_t errsz)
{
    switch (p->type) {
    case ST_CONF_STR: {
        char **dst = (char **)FIELD(conf, p);
        free(*dst);
        *dst = value ? st_strdup(value) : NULL;
        return 0;
    }
    case ST_CONF_INT: {
        char *end;
        errno = 0;
        long long v = strtoll(value, &end, 10);
        if (errno || end == value || *end != '\0') {
            snprintf(errstr, errsz, "invalid value for \"%s\": \"%s\" is not an integer",
                     p->name, value);
            return -1;
        }
        if (v < p->min || v > p->max) {
            snprintf(errstr, errsz,
                     "invalid value for \"%s\": %lld is outside %" PRId64 "..%" PRId64,
                     p->name, v, p->min, p->max);
            return -1;
        }
        *(int64_t *)FIELD(conf, p) = v;
        return 0;
    }
    case ST_CONF_BOOL:
        if (!strcmp(value, "true") || !strcmp(value, "1") || !strcmp(value, "yes")) {
            *(int *)FIELD(conf, p) = 1;
        } else if (!strcmp(value, "false") || !strcmp(value, "0") ||
                   !strcmp(value, "no")) {
            *(int *)FIELD(conf, p) = 0;
        } else {
            snprintf(errstr, errsz, "invalid value for \"%s\": \"%s\" is not a boolean",
                     p->name, value);
            return -1;
        }
        return 0;
    }
    return -1;
}

int st_conf_defaults(const struct st_conf_prop *props, void *conf,
                     char *errstr, size_t errsz)
{
    for (const struct st_conf_prop *p = props; p->name; p++)
        if ((p->def || p->type == ST_CONF_STR) &&
            conf_assign(p, conf, p->def, errstr, errsz))
            return -1;
    return 0;
}

int st_conf_set(const struct st_conf_prop *props, void *conf, const char *name,
                const char *value, char *errstr, size_t errsz)
{
    const struct st_conf_prop *p = conf_find(props, name);
    if (!p) {
        snprintf(errstr, errsz, "unknown configuration property \"%s\"", name);
        return -1;
    }
    return conf_assign(p, conf, value, errstr, errsz);
}

int st_conf_load_env(const struct st_conf_prop *props, void *conf,
                     char *errstr, size_t errsz)
{
    for (const struct st_conf_prop *p = props; p->name; p++) {
        const char *v = p->env ? getenv(p->env) : NULL;
        if (v && *v && conf_assign(p, conf, v, errstr, errsz))
            return -1;
    }
    return 0;
}

static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    char *e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'))
        *--e = '\0';
    return s;
}

static int set_extra(const struct st_conf_prop *props, void *conf, const char *name,
                     const char *value, st_conf_extra_fn extra, void *arg,
                     char *errstr, size_t errsz)
{
    if (extra && !conf_find(props, name)) {
        int rc = extra(arg, name, value, errstr, errsz);
        if (rc <= 0)
            return rc;
    }
    return st_conf_set(props, conf, name, value, errstr, errsz);
}

int st_conf_load_file(const struct st_conf_prop *props, void *conf,
                      const char *path, char *errstr, size_t errsz)
{
    return st_conf_load_file_extra(props, conf, path, NULL, NULL, errstr, errsz);
}

int st_conf_load_file_extra(const struct st_conf_prop *props, void *conf,
                            const char *path, st_conf_extra_fn extra, void *arg,
                            char *errstr, size_t errsz)
{
    char line[4096], err[256];
    int lineno = 0, rc = -1;
    FILE *f = fopen(path, "r");

    if (!f) {
        snprintf(errstr, errsz, "could not open config file \"%s\": %s", path,
                 strerror(errno));
        return -1;
    }
    while (fgets(line, sizeof(line), f)) {
        lineno++;
        char *s = trim(line);
        if (*s == '#' || *s == '\0')
            continue;
        char *eq = strchr(s, '=');
        if (!eq) {
            snprintf(errstr, errsz, "%s:%d: expected \"name = value\"", path, lineno);
            goto out;
        }
        *eq = '\0';
        if (set_extra(props, conf, trim(s), trim(eq + 1), extra, arg, err,
                      sizeof(err))) {
            snprintf(errstr, errsz, "%s:%d: %s", path, lineno, err);
            goto out;
        }
    }
    rc = 0;
out:
    fclose(f);
    return rc;
}

int st_conf_set_arg(const struct st_conf_prop *props, void *conf,
                    const char *arg, char *errstr, size_t errsz)
{
    return st_conf_set_arg_extra(props, conf, arg, NULL, NULL, errstr, errsz);
}

int st_conf_set_arg_extra(const struct st_conf_prop *props, void *conf,
                          const char *arg, st_conf_extra_fn extra, void *xarg,
                          char *errstr, size_t errsz)
{
    const char *eq = strchr(arg, '=');
    if (!eq) {
        snprintf(errstr, errsz, "expected name=value, got \"%s\"", arg);
        return -1;
    }
    char *name = st_strndup(arg, (size_t)(eq - arg));
    int rc = set_extra(props, conf, name, eq + 1, extra, xarg, errstr, errsz);
    free(name);
    return rc;
}

int st_conf_read_secret(const char *prop, const char *path, char *buf, size_t bufsz,
                        char *errstr, size_t errsz)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(errstr, errsz, "could not open %s \"%s\": %s", prop, path,
                 strerror(errno));
        return -1;
    }
    size_t n = fread(buf, 1, bufsz - 1, f);
    int bad = ferror(f) || !feof(f);
    fclose(f);
    buf[n] = '\0';
    /* one line: the newline an editor adds is not the password's */
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = '\0';
    if (bad || n == 0 || strlen(buf) != n) {
        snprintf(errstr, errsz, "%s \"%s\" must hold one password (1..%zu bytes, no NUL)",
                 prop, path, bufsz - 2);
        explicit_bzero(buf, bufsz);
        return -1;
    }
    return 0;
}

void st_conf_fini(const struct st_conf_prop *props, void *conf)
{
    if (!conf)
        return;
    for (const struct st_conf_prop *p = props; p->name; p++) {
        if (p->type == ST_CONF_STR) {
            char **dst = (char **)FIELD(conf, p);
            free(*dst);
            *dst = NULL;
        }
    }
}

void st_conf_print_doc(const struct st_conf_prop *props, FILE *out)
{
    static const char *types[] = {"string", "integer", "boolean"};
    fprintf(out, "| property | environment | type | range | default | description |\n");
    fprintf(out, "|---|---|---|---|---|---|\n");
    for (const struct st_conf_prop *p = props; p->name; p++) {
        char range[64] = "";
        if (p->type == ST_CONF_INT)
            snprintf(range, sizeof(range), "%" PRId64 "..%" PRId64, p->min, p->max);
        fprintf(out, "| `%s` | %s%s%s | %s | %s | %s%s%s | %s |\n", p->name,
                p->env ? "`" : "", p->env ? p->env : "", p->env ? "`" : "",
                types[p->type], range, p->def && *p->def ? "`" : "",
                p->def ? p->def : "", p->def && *p->def ? "`" : "", p->doc);
    }
}

/* FNV-1a, 64 bit: stable across runs and machines, not a security boundary */
static uint64_t fnv1a(uint64_t h, const void *data, size_t n)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

void st_conf_hash(const struct st_conf_prop *props, const void *conf,
                  const char *prefix, char out[17])
{
    uint64_t h = 0xcbf29ce484222325ULL;
    char buf[32];

    for (const struct st_conf_prop *p = props; p->name; p++) {
        if (strncmp(p->name, prefix, strlen(prefix)) != 0)
            continue;
        const char *v = buf;
        const char *field = (const char *)conf + p->offset;
        switch (p->type) {
        case ST_CONF_STR:
            v = *(char *const *)field ? *(char *const *)field : "";
            break;
        case ST_CONF_INT:
            snprintf(buf, sizeof(buf), "%" PRId64, *(const int64_t *)field);
            break;
        case ST_CONF_BOOL:
            snprintf(buf, sizeof(buf), "%d", *(const int *)field);
            break;
        }
        h = fnv1a(h, p->name, strlen(p->name) + 1);
        h = fnv1a(h, v, strlen(v) + 1);
    }
    snprintf(out, 17, "%016" PRIx64, h);
}

int st_conf_report_fixed(const struct st_conf_prop *props, const void *running,
                         const void *fresh, const char *const *live)
{
    int n = 0;
    for (const struct st_conf_prop *p = props; p->name; p++) {
        int is_live = 0;
        for (const char *const *l = live; l && *l && !is_live; l++)
            is_live = strcmp(*l, p->name) == 0;
        const char *a = (const char *)running + p->offset;
        const char *b = (const char *)fresh + p->offset;
        int differs = 0;
        switch (p->type) {
        case ST_CONF_STR: {
            const char *x = *(char *const *)a, *y = *(char *const *)b;
            differs = (!x != !y) || (x && strcmp(x, y) != 0);
            break;
        }
        case ST_CONF_INT:
            differs = *(const int64_t *)a != *(const int64_t *)b;
            break;
        case ST_CONF_BOOL:
            differs = *(const int *)a != *(const int *)b;
            break;
        }
        if (differs && !is_live) {
            st_warn("reload: cannot change while running: %s (restart to apply)", p->name);
            n++;
        }
    }
    return n;
}

int st_conf_load(const struct st_conf_prop *props, void *conf, const char *config_file,
                 char *const *args, int n, st_conf_extra_fn extra, void *arg,
                 char *errstr, size_t errsz)
{
    if (st_conf_defaults(props, conf, errstr, errsz) ||
        st_conf_load_env(props, conf, errstr, errsz) ||
        (config_file &&
         st_conf_load_file_extra(props, conf, config_file, extra, arg, errstr, errsz)))
        return -1;
    for (int i = 0; i < n; i++)
        if (st_conf_set_arg_extra(props, conf, args[i], extra, arg, errstr, errsz))
            return -1;
    return 0;
}
