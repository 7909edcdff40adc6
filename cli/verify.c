/* verify.c: `sandtrail evidence verify DIR|FILE.tar.gz [--pubkey FILE]`.
 *
 * Needs only the bundle and trusted public keys: no database, no network.
 * Checks, in this order, and stops at the first fault, which it names:
 * the manifest's signature; every file's SHA-256 (and that no file is
 * missing or extra); each checkpoint's signature and its chain; that every
 * event belongs to the bundle's scope; each event's inclusion proof; and
 * that the bundle holds every event of its runs that the checkpoints sign. */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "buf.h"
#include "evidence.h"
#include "evkey.h"
#include "log.h"
#include "merkle.h"

struct vcp {
    cJSON *doc;
    const char *topic;
    int64_t partition, seq, first_index, tree_size;
    uint8_t root[ST_MERKLE_HASH];
    char hash[65];
    long held; /* bundle events whose leaf falls in this checkpoint */
};

static char fault_msg[2048];

static int faultf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int faultf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fault_msg, sizeof(fault_msg), fmt, ap);
    va_end(ap);
    return 1;
}

static int64_t jnum(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsNumber(v) ? (int64_t)v->valuedouble : -1;
}

static const char *jstring(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(v) ? v->valuestring : "";
}

static int in_scope(const cJSON *man, const cJSON *ev)
{
    const cJSON *scope = cJSON_GetObjectItemCaseSensitive(man, "scope");
    if (strcmp(jstring(ev, "task_id"), jstring(scope, "task_id")) != 0)
        return 0;
    const cJSON *r;
    cJSON_ArrayForEach(r, cJSON_GetObjectItemCaseSensitive(scope, "run_ids"))
    {
        if (cJSON_IsString(r) && strcmp(r->valuestring, jstring(ev, "run_id")) == 0)
            return 1;
    }
    return 0;
}

static int verify_dir(const char *dir, const struct keyring *kr)
{
    struct st_buf man_b, sig_b, b;
    cJSON *man = NULL, *cps = NULL, *proofs = NULL;
    struct vcp *v = NULL;
    const char **lines = NULL;
    int nv = 0, nlines = 0, bad = 1;
    uint8_t sig[ST_EVIDENCE_SIG];
    st_buf_init(&man_b);
    st_buf_init(&sig_b);
    st_buf_init(&b);

    /* 1. the manifest and its signature */
    if (read_file(dir, "manifest.json", &man_b) || !(man = cJSON_Parse(man_b.data))) {
        faultf("manifest.json: missing or not JSON");
        goto out;
    }
    const char *key_id = jstring(man, "key_id");
    const struct st_evkey *key = keyring_find(kr, key_id);
    if (!key) {
        faultf("manifest.json: signed by key \"%s\", which is not a trusted key", key_id);
        goto out;
    }
    if (read_file(dir, "manifest.json.sig", &sig_b) || sig_b.len != ST_EVIDENCE_SIG ||
        !st_evkey_verify(key, man_b.data, man_b.len, (const uint8_t *)sig_b.data)) {
        faultf("manifest.json: its signature (manifest.json.sig) does not verify with key"
               " \"%s\"",
               key_id);
        goto out;
    }

    /* 2. every file's hash; nothing missing, nothing extra */
    const cJSON *files = cJSON_GetObjectItemCaseSensitive(man, "files"), *f;
    cJSON_ArrayForEach(f, files)
    {
        char hash[65];
        if (read_file(dir, f->string, &b)) {
            faultf("%s: missing from the bundle", f->string);
            goto out;
        }
        st_sha256_hex(b.data, b.len, hash);
        if (!cJSON_IsString(f) || strcmp(hash, f->valuestring) != 0) {
            faultf("%s: its SHA-256 differs from the manifest's", f->string);
            goto out;
        }
    }
    /* SHA256SUMS (the stock-tool route) must say the same, signed */
    struct st_buf sums;
    char mhash[65];
    st_buf_init(&sums);
    cJSON_ArrayForEach(f, files)
    {
        st_buf_printf(&sums, "%s  %s\n", f->valuestring, f->string);
    }
    st_sha256_hex(man_b.data, man_b.len, mhash);
    st_buf_printf(&sums, "%s  manifest.json\n", mhash);
    int sums_ok = read_file(dir, "SHA256SUMS", &b) == 0 && b.len == sums.len &&
                  memcmp(b.data, sums.data, sums.len) == 0;
    st_buf_fini(&sums);
    if (!sums_ok) {
        faultf("SHA256SUMS: does not list the manifest's files and hashes");
        goto out;
    }
    if (read_file(dir, "SHA256SUMS.sig", &sig_b) || sig_b.len != ST_EVIDENCE_SIG ||
        !st_evkey_verify(key, b.data, b.len, (const uint8_t *)sig_b.data)) {
        faultf("SHA256SUMS: its signature (SHA256SUMS.sig) does not verify with key \"%s\"",
               key_id);
        goto out;
    }
    DIR *d = opendir(dir);
    struct dirent *de;
    while (d && (de = readdir(d))) {
        if (de->d_name[0] == '.' || !strcmp(de->d_name, "manifest.json") ||
            !strcmp(de->d_name, "manifest.json.sig") || !strcmp(de->d_name, "SHA256SUMS") ||
            !strcmp(de->d_name, "SHA256SUMS.sig"))
            continue;
        if (!cJSON_GetObjectItemCaseSensitive(files, de->d_name)) {
            faultf("%s: not listed in the manifest", de->d_name);
            closedir(d);
            goto out;
        }
    }
    if (d)
        closedir(d);

    /* 3. checkpoints: signatures and chains */
    if (read_file(dir, "checkpoints.json", &b) || !(cps = cJSON_Parse(b.data))) {
        faultf("checkpoints.json: not JSON");
        goto out;
    }
    v = st_calloc((size_t)cJSON_GetArraySize(cps) + 1, sizeof(*v));
    const cJSON *c;
    cJSON_ArrayForEach(c, cps)
    {
        const char *body = jstring(c, "body"), *sighex = jstring(c, "signature");
        struct vcp *x = &v[nv++];
        x->doc = cJSON_Parse(body);
        st_sha256_hex(body, strlen(body), x->hash);
        if (!x->doc) {
            faultf("checkpoint %d of checkpoints.json: body is not JSON", nv);
            goto out;
        }
        x->topic = jstring(x->doc, "topic");
        x->partition = jnum(x->doc, "partition");
        x->seq = jnum(x->doc, "seq");
        x->first_index = jnum(x->doc, "first_index");
        x->tree_size = jnum(x->doc, "tree_size");
        const struct st_evkey *k = keyring_find(kr, jstring(x->doc, "key_id"));
        if (!k) {
            faultf("checkpoint %s[%" PRId64 "] #%" PRId64 ": signed by key \"%s\", which is"
                   " not a trusted key",
                   x->topic, x->partition, x->seq, jstring(x->doc, "key_id"));
            goto out;
        }
        if (st_from_hex(sighex, sig, sizeof(sig)) ||
            !st_evkey_verify(k, body, strlen(body), sig) ||
            st_from_hex(jstring(x->doc, "root"), x->root, sizeof(x->root))) {
            faultf("checkpoint %s[%" PRId64 "] #%" PRId64 ": its signature does not verify",
                   x->topic, x->partition, x->seq);
            goto out;
        }
        for (int j = nv - 2; j >= 0; j--) {
            if (strcmp(v[j].topic, x->topic) || v[j].partition != x->partition)
                continue;
            if (v[j].seq + 1 != x->seq || strcmp(jstring(x->doc, "prev"), v[j].hash) != 0 ||
                v[j].tree_size != x->first_index) {
                faultf("checkpoint %s[%" PRId64 "] #%" PRId64 ": does not chain to #%" PRId64,
                       x->topic, x->partition, x->seq, v[j].seq);
                goto out;
            }
            break;
        }
    }

    /* 4. events: scope and inclusion proofs */
    if (read_file(dir, "events.ndjson", &b)) {
        faultf("events.ndjson: missing");
        goto out;
    }
    lines = st_calloc(b.len + 2, sizeof(*lines)); /* at most one line a byte */
    for (char *p = b.data, *nl; *p; p = nl + 1) {
        if (!(nl = strchr(p, '\n'))) {
            faultf("events.ndjson: the last line has no newline");
            goto out;
        }
        *nl = '\0';
        lines[nlines++] = p;
    }
    struct st_buf pb;
    st_buf_init(&pb);
    if (read_file(dir, "proofs.json", &pb) || !(proofs = cJSON_Parse(pb.data))) {
        st_buf_fini(&pb);
        faultf("proofs.json: not JSON");
        goto out;
    }
    st_buf_fini(&pb);
    char *proved = st_calloc((size_t)nlines + 1, 1);
    const cJSON *p;
    cJSON_ArrayForEach(p, proofs)
    {
        int64_t line = jnum(p, "line"), idx = jnum(p, "leaf_index"), size = jnum(p, "tree_size");
        const char *eid = jstring(p, "event_id");
        if (line < 1 || line > nlines || proved[line - 1]) {
            faultf("proofs.json: the proof of event \"%s\" names no line of events.ndjson"
                   " or a line already proved",
                   eid);
            free(proved);
            goto out;
        }
        cJSON *evdoc = cJSON_Parse(lines[line - 1]);
        int scoped = evdoc && in_scope(man, evdoc);
        int same = evdoc && !strcmp(jstring(evdoc, "event_id"), eid);
        cJSON_Delete(evdoc);
        if (!scoped || !same) {
            faultf("event \"%s\" (events.ndjson line %" PRId64 "): %s", eid, line,
                   !scoped ? "not an event of the bundle's task and runs"
                           : "the line is not the event its proof names");
            free(proved);
            goto out;
        }
        struct vcp *x = NULL;
        for (int j = 0; j < nv; j++)
            if (!strcmp(v[j].topic, jstring(p, "topic")) &&
                v[j].partition == jnum(p, "partition") && v[j].seq == jnum(p, "checkpoint_seq"))
                x = &v[j];
        const cJSON *path = cJSON_GetObjectItemCaseSensitive(p, "path");
        int plen = cJSON_GetArraySize(path);
        uint8_t(*steps)[ST_MERKLE_HASH] = st_calloc((size_t)plen + 1, ST_MERKLE_HASH);
        int ok = x && size == x->tree_size && plen <= ST_MERKLE_MAX_DEPTH;
        for (int k = 0; ok && k < plen; k++) {
            const cJSON *step = cJSON_GetArrayItem(path, k);
            ok = cJSON_IsString(step) &&
                 st_from_hex(step->valuestring, steps[k], ST_MERKLE_HASH) == 0;
        }
        uint8_t leaf[ST_MERKLE_HASH];
        st_merkle_leaf_hash(lines[line - 1], strlen(lines[line - 1]), leaf);
        ok = ok && idx >= 0 &&
             st_merkle_verify(leaf, (uint64_t)idx, (uint64_t)size, (const uint8_t(*)[32])steps,
                              plen, x->root);
        free(steps);
        if (!ok) {
            faultf("event \"%s\" (events.ndjson line %" PRId64 "): its inclusion proof does"
                   " not lead to a signed checkpoint's root",
                   eid, line);
            free(proved);
            goto out;
        }
        proved[line - 1] = 1;
        /* which checkpoint signed this leaf's arrival */
        for (int j = 0; j < nv; j++)
            if (!strcmp(v[j].topic, x->topic) && v[j].partition == x->partition &&
                idx >= v[j].first_index && idx < v[j].tree_size)
                v[j].held++;
    }
    for (int i = 0; i < nlines; i++)
        if (!proved[i]) {
            faultf("events.ndjson line %d: no inclusion proof", i + 1);
            free(proved);
            goto out;
        }
    free(proved);

    /* 5. completeness: each checkpoint's signed count of the runs' events */
    const cJSON *scope = cJSON_GetObjectItemCaseSensitive(man, "scope");
    for (int j = 0; j < nv; j++) {
        long want = 0;
        const cJSON *e;
        cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(v[j].doc, "runs"))
        {
            const cJSON *t = cJSON_GetArrayItem(e, 0), *r = cJSON_GetArrayItem(e, 1),
                        *n = cJSON_GetArrayItem(e, 2), *s;
            if (!cJSON_IsString(t) || !cJSON_IsString(r) || !cJSON_IsNumber(n) ||
                strcmp(t->valuestring, jstring(scope, "task_id")))
                continue;
            cJSON_ArrayForEach(s, cJSON_GetObjectItemCaseSensitive(scope, "run_ids"))
            {
                if (cJSON_IsString(s) && !strcmp(s->valuestring, r->valuestring))
                    want += (long)n->valuedouble;
            }
        }
        if (want != v[j].held) {
            faultf("checkpoint %s[%" PRId64 "] #%" PRId64 ": signs %ld event(s) of the"
                   " bundle's runs, the bundle holds %ld",
                   v[j].topic, v[j].partition, v[j].seq, want, v[j].held);
            goto out;
        }
    }
    printf("valid: %d event(s), %d checkpoint(s), signed by key %s\n", nlines, nv, key_id);
    bad = 0;
out:
    for (int j = 0; j < nv; j++)
        cJSON_Delete(v[j].doc);
    free(v);
    free(lines);
    cJSON_Delete(man);
    cJSON_Delete(cps);
    cJSON_Delete(proofs);
    st_buf_fini(&man_b);
    st_buf_fini(&sig_b);
    st_buf_fini(&b);
    if (bad)
        printf("INVALID: %s\n", fault_msg);
    return bad;
}

int st_cli_verify(int argc, char **argv)
{
    static const struct option opts[] = {
        {"pubkey", required_argument, NULL, 'k'},
        {NULL, 0, NULL, 0},
    };
    const char *pubkeys = getenv("SANDTRAIL_EVIDENCE_PUBLIC_KEY_FILE");
    char errstr[1024];
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'k': pubkeys = optarg; break;
        default: return 64;
        }
    }
    if (optind + 1 != argc) {
        fprintf(stderr, "usage: sandtrail evidence verify DIR|FILE.tar.gz [--pubkey FILE]\n");
        return 64;
    }
    const char *target = argv[optind];
    struct keyring kr = {0};
    if (!pubkeys || !*pubkeys) {
        st_error("no public key: give --pubkey FILE or set SANDTRAIL_EVIDENCE_PUBLIC_KEY_FILE");
        return 2;
    }
    if (keyring_load(&kr, pubkeys, errstr, sizeof(errstr))) {
        st_error("%s", errstr);
        return 2;
    }
    struct stat sb;
    int rc;
    if (stat(target, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        rc = verify_dir(target, &kr);
    } else {
        char tmp[] = "/tmp/sandtrail-verify-XXXXXX";
        if (!mkdtemp(tmp)) {
            st_error("could not make a temporary folder");
            keyring_fini(&kr);
            return 2;
        }
        char *const tar[] = {"tar", "-xzf", (char *)target, "-C", tmp, NULL};
        if (run_argv(tar) != 0) {
            printf("INVALID: %s: not a readable .tar.gz bundle\n", target);
            rc = 1;
        } else {
            rc = verify_dir(tmp, &kr);
        }
        char *const rm[] = {"rm", "-rf", tmp, NULL};
        run_argv(rm);
    }
    keyring_fini(&kr);
    return rc;
}
