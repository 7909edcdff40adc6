/* audit.h: walking a partition's evidence tree from the stored rows, for
 * `sandtrail evidence audit` and export's own audit (see audit.c). */
#ifndef ST_CLI_AUDIT_H
#define ST_CLI_AUDIT_H

#include <stdint.h>

#include <cjson/cJSON.h>
#include <libpq-fe.h>

#include "buf.h"
#include "evidence.h"
#include "merkle.h"

/* One signed checkpoint, its fields read from the signed body. */
struct cp {
    int64_t seq, first_offset, last_offset, first_index, tree_size;
    char root[65], prev[65], hash[65], key_id[ST_EVIDENCE_KEY_ID + 1], time[40];
    char *body, *sig;
    cJSON *doc;
};

struct walk {
    const char *topic;
    int32_t partition;
    struct cp *cps;
    int ncp;
    int collect;                  /* keep every leaf (export) */
    uint8_t (*leaves)[ST_MERKLE_HASH];
    int64_t *leaf_offset;
    size_t nleaves, cap;
    int64_t next_offset;          /* evidence_state (-1: none) */
    int64_t ahead_below;          /* events_ahead (sql/010; -1: none) */
    long faults;
    long ahead;                   /* rows stored ahead of their evidence */
    struct st_buf *out;           /* fault lines */
};

/* Walks one partition (w->topic, w->partition; w->out gets a line per
 * fault, w->faults their count): checkpoints from the first signed at or
 * after since (NULL: all), the stored rows and skips they cover, and the
 * rows after them. With w->collect, keeps every leaf hash and its offset.
 * Returns 0, or -1 with errstr when the database could not be read. */
int walk_partition(PGconn *pg, struct walk *w, const struct keyring *kr,
                   const char *since, char *errstr, size_t errsz);

/* Frees what walk_partition allocated (not w itself). */
void walk_fini(struct walk *w);

#endif
