/* conf.h: declarative configuration tables.
 *
 * Each daemon declares one table of properties (name, environment variable,
 * type, offset into its config struct, range, default, doc). Values come, in
 * increasing precedence, from the defaults, the environment, a config file of
 * "name = value" lines and -X name=value on the command line. An unknown name
 * is an error, never silently ignored. The docs in docs/config.md are printed
 * from the same tables (--config-doc). */
#ifndef ST_CONF_H
#define ST_CONF_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum st_conf_type { ST_CONF_STR, ST_CONF_INT, ST_CONF_BOOL };

struct st_conf_prop {
    const char *name;      /* "kafka.brokers" */
    const char *env;       /* "SANDTRAIL_KAFKA_BROKERS", or NULL */
    enum st_conf_type type;
    size_t offset;         /* of a char * (STR), int64_t (INT) or int (BOOL) */
    int64_t min, max;      /* INT only */
    const char *def;       /* default as text; NULL means unset (STR only) */
    const char *doc;
};

/* The table ends with an entry whose name is NULL. */

/* Applies every default to conf. Returns 0, or -1 with errstr set. */
int st_conf_defaults(const struct st_conf_prop *props, void *conf,
                     char *errstr, size_t errsz);

/* Sets one property from text (copied). Returns 0, or -1 with errstr naming
 * the property and why the value is refused. */
int st_conf_set(const struct st_conf_prop *props, void *conf, const char *name,
                const char *value, char *errstr, size_t errsz);

/* Sets every property whose environment variable is present. */
int st_conf_load_env(const struct st_conf_prop *props, void *conf,
                     char *errstr, size_t errsz);

/* Reads "name = value" lines; '#' starts a comment. Errors name the file and
 * line. */
int st_conf_load_file(const struct st_conf_prop *props, void *conf,
                      const char *path, char *errstr, size_t errsz);

/* A handler for names the table does not know (for families of names such
 * as overrides). Returns 0 when it took the name, 1 when the name is not
 * its own either (then it is an error), -1 with errstr set on a bad value. */
typedef int (*st_conf_extra_fn)(void *arg, const char *name, const char *value,
                                char *errstr, size_t errsz);

/* As st_conf_load_file, handing unknown names to extra first. */
int st_conf_load_file_extra(const struct st_conf_prop *props, void *conf,
                            const char *path, st_conf_extra_fn extra, void *arg,
                            char *errstr, size_t errsz);

/* As st_conf_set_arg, handing unknown names to extra first. */
int st_conf_set_arg_extra(const struct st_conf_prop *props, void *conf,
                          const char *arg, st_conf_extra_fn extra, void *xarg,
                          char *errstr, size_t errsz);

/* Everything a daemon's start-up does, in precedence order: defaults, the
 * environment, config_file (when not NULL), then the n "name=value"
 * arguments given with -X. extra (may be NULL) takes names the table does
 * not know. Returns 0, or -1 with errstr naming what was refused. */
int st_conf_load(const struct st_conf_prop *props, void *conf, const char *config_file,
                 char *const *args, int n, st_conf_extra_fn extra, void *arg,
                 char *errstr, size_t errsz);

/* Reload: logs "cannot change while running: NAME (restart to apply)" for
 * each property whose value differs between running and fresh (both
 * loaded from props) and whose name is not in live (NULL-terminated; the
 * properties the caller applies live). Returns how many. */
int st_conf_report_fixed(const struct st_conf_prop *props, const void *running,
                         const void *fresh, const char *const *live);

/* Parses a "name=value" argument (as given to -X). */
int st_conf_set_arg(const struct st_conf_prop *props, void *conf,
                    const char *arg, char *errstr, size_t errsz);

/* Reads a secret (a password) that property prop names: the one line of
 * path, its trailing newline dropped, 1..bufsz-2 bytes without NUL, into
 * buf. Returns 0, or -1 with errstr naming prop and path, never the content.
 * buf is wiped on failure; on success the caller wipes it after use. */
int st_conf_read_secret(const char *prop, const char *path, char *buf, size_t bufsz,
                        char *errstr, size_t errsz);

/* Frees the strings the table's STR properties own. Accepts NULL conf. */
void st_conf_fini(const struct st_conf_prop *props, void *conf);

/* Writes the table as a Markdown table. */
void st_conf_print_doc(const struct st_conf_prop *props, FILE *out);

/* A stable hash (hex, 16 chars) of the current values of the properties whose
 * name starts with prefix, recorded with findings so that a finding says which
 * detection settings produced it. */
void st_conf_hash(const struct st_conf_prop *props, const void *conf,
                  const char *prefix, char out[17]);

#endif
