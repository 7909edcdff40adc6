/* evidence.h: `sandtrail evidence audit|export|verify` (issue 9).
 *
 *   audit   recomputes every partition's Merkle tree from the stored rows
 *           and names each row altered, deleted or added after the fact,
 *           each gap, and each checkpoint that does not match (audit.c)
 *   export  writes a run's signed evidence bundle (export.c, report.c)
 *   verify  checks a bundle offline: no database, no network (verify.c) */
#ifndef ST_CLI_EVIDENCE_H
#define ST_CLI_EVIDENCE_H

#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

#include "buf.h"
#include "evkey.h"

/* The subcommand: argv[0] is "evidence". Returns the exit status. */
int st_cli_evidence(int argc, char **argv, const char *pg_dsn);

/* Trusted public keys, matched by id. */
struct keyring {
    struct st_evkey keys[16];
    int n;
};

/* Loads each file of a ':'-separated list (PEM public keys). Returns 0, or
 * -1 with errstr naming the file. */
int keyring_load(struct keyring *kr, const char *paths, char *errstr, size_t errsz);
const struct st_evkey *keyring_find(const struct keyring *kr, const char *id);
void keyring_fini(struct keyring *kr);

/* Loads the trusted keys of pubkeys (':'-separated PEM files), or else of
 * SANDTRAIL_EVIDENCE_PUBLIC_KEY_FILE. Returns 0, or -1 with errstr. */
int load_trusted(struct keyring *kr, const char *pubkeys, char *errstr, size_t errsz);

/* The subcommands (argv[0] is the subcommand's name); exit statuses. */
int st_cli_audit(int argc, char **argv, const char *pg_dsn);
int st_cli_export(int argc, char **argv, const char *pg_dsn);
int st_cli_verify(int argc, char **argv);

/* The bundle's review, from its events (parsed, in event-time order) and
 * findings.json's document. Both files are written into dir. Returns 0, or
 * -1 with errstr. */
struct report_in {
    const char *task;
    const cJSON *runs;       /* array of run ids */
    cJSON **events;          /* parsed events.ndjson lines */
    size_t nevents;
    const cJSON *findings;   /* findings.json */
    const char *forced;      /* non-NULL: the audit faults --force overrode */
    const char *generated;   /* RFC 3339 */
    const char *classes_file; /* command classes (NULL: the built-in table) */
    const char *key_id;      /* of the signing key */
    const cJSON *partitions; /* manifest.json's partitions */
    int ncheckpoints;
};
int st_report_write(const struct report_in *in, const char *dir, char *errstr,
                    size_t errsz);

/* Runs argv (no shell) and waits; its exit status, or -1. */
int run_argv(char *const argv[]);

/* Reads dir/name whole into b (reset first, NUL-terminated). Returns 0, or
 * -1 when it cannot be opened. */
int read_file(const char *dir, const char *name, struct st_buf *b);

/* Writes len bytes to dir/name. Returns 0, or -1 with errstr. */
int write_file(const char *dir, const char *name, const void *data, size_t len,
               char *errstr, size_t errsz);

#endif
