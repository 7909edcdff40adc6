/* evidence.c: `sandtrail evidence`: what audit.c, export.c and verify.c
 * share (trusted keys, files, running tar), and the dispatch. */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <libpq-fe.h>

#include "buf.h"
#include "event.h"
#include "evidence.h"
#include "evkey.h"
#include "log.h"
#include "merkle.h"
#include "pg.h"
#include "timeutil.h"

/* --- keys ------------------------------------------------------------- */

int keyring_load(struct keyring *kr, const char *paths, char *errstr, size_t errsz)
{
    char *copy = st_strdup(paths), *save = NULL;
    for (char *p = strtok_r(copy, ":", &save); p; p = strtok_r(NULL, ":", &save)) {
        if (kr->n == (int)(sizeof(kr->keys) / sizeof(kr->keys[0]))) {
            snprintf(errstr, errsz, "too many public keys");
            free(copy);
            return -1;
        }
        if (st_evkey_load(&kr->keys[kr->n], p, 0, errstr, errsz)) {
            free(copy);
            return -1;
        }
        kr->n++;
    }
    free(copy);
    return 0;
}

const struct st_evkey *keyring_find(const struct keyring *kr, const char *id)
{
    for (int i = 0; i < kr->n; i++)
        if (id && strcmp(kr->keys[i].id, id) == 0)
            return &kr->keys[i];
    return NULL;
}

void keyring_fini(struct keyring *kr)
{
    for (int i = 0; i < kr->n; i++)
        st_evkey_fini(&kr->keys[i]);
    kr->n = 0;
}

int read_file(const char *dir, const char *name, struct st_buf *b)
{
    char path[4096], chunk[65536];
    size_t n;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    st_buf_reset(b);
    st_buf_adds(b, "");
    FILE *f = fopen(path, "rb");
    if (!f)
        return -1;
    while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
        st_buf_add(b, chunk, n);
    fclose(f);
    return 0;
}

int write_file(const char *dir, const char *name, const void *data, size_t len,
               char *errstr, size_t errsz)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, len, f) != len || fclose(f)) {
        snprintf(errstr, errsz, "could not write \"%s\": %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

int load_trusted(struct keyring *kr, const char *pubkeys, char *errstr,
                        size_t errsz)
{
    const char *env = getenv("SANDTRAIL_EVIDENCE_PUBLIC_KEY_FILE");
    const char *list = pubkeys ? pubkeys : env;
    if (!list || !*list) {
        snprintf(errstr, errsz, "no public key: give --pubkey FILE or set "
                                "SANDTRAIL_EVIDENCE_PUBLIC_KEY_FILE");
        return -1;
    }
    return keyring_load(kr, list, errstr, errsz);
}

int run_argv(char *const argv[])
{
    pid_t pid = fork();
    if (pid == 0) {
        execvp(argv[0], argv);
        _exit(127);
    }
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) < 0)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

int st_cli_evidence(int argc, char **argv, const char *pg_dsn)
{
    if (argc >= 2 && !strcmp(argv[1], "audit"))
        return st_cli_audit(argc - 1, argv + 1, pg_dsn);
    if (argc >= 2 && !strcmp(argv[1], "export"))
        return st_cli_export(argc - 1, argv + 1, pg_dsn);
    if (argc >= 2 && !strcmp(argv[1], "verify"))
        return st_cli_verify(argc - 1, argv + 1);
    fprintf(stderr, "usage: sandtrail evidence audit [--since T] [--pubkey FILE[:FILE]]\n"
                    "       sandtrail evidence export --task T (--run R | --since T1"
                    " [--until T2])\n"
                    "                 (--out DIR | --archive FILE.tar.gz) [--force]\n"
                    "       sandtrail evidence verify DIR|FILE.tar.gz [--pubkey FILE]\n");
    return 64;
}
