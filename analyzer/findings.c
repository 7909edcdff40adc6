/* findings.c: per-batch finding accumulation (see findings.h). */
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "escape.h"
#include "findings.h"
#include "log.h"

const char *st_severity_name(enum st_severity s)
{
    static const char *names[] = {"low", "medium", "high", "critical"};
    return names[s];
}

void st_findings_init(struct st_findings *fs)
{
    memset(fs, 0, sizeof(*fs));
}

static void finding_fini(struct st_finding *f)
{
    free(f->task_id);
    free(f->run_id);
    free(f->summary);
    for (size_t i = 0; i < f->nevents; i++) {
        free(f->events[i].source_name);
        free(f->events[i].event_id);
    }
    free(f->events);
}

void st_findings_reset(struct st_findings *fs)
{
    for (size_t i = 0; i < fs->n; i++)
        finding_fini(&fs->items[i]);
    fs->n = 0;
}

void st_findings_fini(struct st_findings *fs)
{
    st_findings_reset(fs);
    free(fs->items);
    memset(fs, 0, sizeof(*fs));
}

/* Merges src's finding into dst's (the same id), by st_findings_update's
 * rules, src being the later update: severity only rises, the window
 * widens, src's summary replaces dst's, src's events follow dst's. src's
 * strings are moved or freed; src is left empty. */
static void finding_merge(struct st_finding *dst, struct st_finding *src)
{
    if (src->severity > dst->severity)
        dst->severity = src->severity;
    if (src->first_us < dst->first_us)
        dst->first_us = src->first_us;
    if (src->last_us > dst->last_us)
        dst->last_us = src->last_us;
    free(dst->summary);
    dst->summary = src->summary;
    src->summary = NULL;
    for (size_t i = 0; i < src->nevents; i++) {
        if (dst->nevents == dst->capevents) {
            dst->capevents = dst->capevents ? dst->capevents * 2 : 16;
            dst->events = st_realloc(dst->events, dst->capevents * sizeof(*dst->events));
        }
        dst->events[dst->nevents++] = src->events[i];
    }
    src->nevents = 0;
    finding_fini(src);
}

/* A finding id's first 16 hex digits (ids are SHA-256 output: uniform) */
static uint64_t id_hash(const char *id)
{
    uint64_t h = 0;
    for (int i = 0; i < 16 && id[i]; i++)
        h = h * 16 + (uint64_t)(id[i] <= '9' ? id[i] - '0' : (id[i] | 32) - 'a' + 10);
    return h;
}

/* The index in fs (its first n items) of id, or -1; table: n's ids by
 * their first 16 hex digits, open addressing over mask + 1 slots (NULL:
 * a linear scan, for few findings). */
static long find_id(const struct st_findings *fs, size_t n, const long *table, size_t mask,
                    const char *id)
{
    if (!table) {
        for (size_t i = 0; i < n; i++)
            if (!strcmp(fs->items[i].id, id))
                return (long)i;
        return -1;
    }
    for (size_t k = id_hash(id) & mask;; k = (k + 1) & mask) {
        if (table[k] < 0)
            return -1;
        if (!strcmp(fs->items[table[k]].id, id))
            return table[k];
    }
}

void st_findings_take(struct st_findings *dst, struct st_findings *src)
{
    if (src->n == 0)
        return; /* and its arrays may not exist yet */
    if (dst->n + src->n > dst->cap) {
        dst->cap = dst->n + src->n > 2 * dst->cap ? dst->n + src->n : 2 * dst->cap;
        dst->items = st_realloc(dst->items, dst->cap * sizeof(*dst->items));
    }
    /* A finding of src whose id dst holds is merged into it: a run's
     * events come from one partition, and so from one worker, but not
     * after partitions were added to the topic (a task's older events in
     * one partition, its newer in another), and the sink writes a batch's
     * findings in one statement that refuses an id twice (sinks/findings.c) */
    size_t n0 = dst->n, mask = 0;
    long *table = NULL;
    if (n0 > 16) {
        while (mask + 1 < 2 * n0)
            mask = 2 * mask + 1;
        table = st_malloc((mask + 1) * sizeof(*table));
        for (size_t k = 0; k <= mask; k++)
            table[k] = -1;
        for (size_t i = 0; i < n0; i++) {
            size_t k = id_hash(dst->items[i].id) & mask;
            while (table[k] >= 0)
                k = (k + 1) & mask;
            table[k] = (long)i;
        }
    }
    /* the items own their strings: moved, not copied */
    for (size_t i = 0; i < src->n; i++) {
        long at = find_id(dst, n0, table, mask, src->items[i].id);
        if (at >= 0)
            finding_merge(&dst->items[at], &src->items[i]);
        else
            dst->items[dst->n++] = src->items[i];
    }
    free(table);
    src->n = 0;
}

void st_finding_id(char out[33], const char *detector, const char *task_id,
                   const char *run_id, const char *key)
{
    const char *parts[4] = {detector, task_id, run_id, key};
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();

    if (!ctx)
        st_fatal("out of memory hashing a finding id");
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    for (int i = 0; i < 4; i++)
        EVP_DigestUpdate(ctx, parts[i], strlen(parts[i]) + 1); /* NUL separates */
    EVP_DigestFinal_ex(ctx, md, &mdlen);
    EVP_MD_CTX_free(ctx);
    for (int i = 0; i < 16; i++) {
        static const char hex[] = "0123456789abcdef";
        out[2 * i] = hex[md[i] >> 4];
        out[2 * i + 1] = hex[md[i] & 15];
    }
    out[32] = '\0';
}

struct st_finding *st_findings_update(struct st_findings *fs, const char *id,
                                      const char *detector, int version,
                                      enum st_severity sev, const char *task_id,
                                      const char *run_id, int64_t first_us,
                                      int64_t last_us, const char *summary)
{
    struct st_finding *f = NULL;
    /* a batch holds few findings: a linear scan is cheaper than a hash */
    for (size_t i = 0; i < fs->n; i++)
        if (strcmp(fs->items[i].id, id) == 0)
            f = &fs->items[i];
    if (!f) {
        if (fs->n == fs->cap) {
            fs->cap = fs->cap ? fs->cap * 2 : 16;
            fs->items = st_realloc(fs->items, fs->cap * sizeof(*fs->items));
        }
        f = &fs->items[fs->n++];
        memset(f, 0, sizeof(*f));
        memcpy(f->id, id, 33);
        f->detector = detector;
        f->detector_version = version;
        f->severity = sev;
        f->task_id = st_strdup(task_id);
        f->run_id = st_strdup(run_id);
        f->first_us = first_us;
        f->last_us = last_us;
    }
    if (sev > f->severity)
        f->severity = sev;
    if (first_us < f->first_us)
        f->first_us = first_us;
    if (last_us > f->last_us)
        f->last_us = last_us;
    free(f->summary);
    /* summaries quote event data (paths, hosts, commands): their control
     * characters are stored escaped, so no reader's terminal acts on them */
    struct st_buf b;
    st_buf_init(&b);
    st_escape_ctl(&b, summary, strlen(summary), 0);
    st_buf_addc(&b, '\0');
    f->summary = st_strdup(b.data);
    st_buf_fini(&b);
    return f;
}

void st_finding_add_event_n(struct st_finding *f, const char *source_name, size_t slen,
                            const char *event_id, size_t idlen, int late)
{
    if (f->nevents == f->capevents) {
        f->capevents = f->capevents ? f->capevents * 2 : 16;
        f->events = st_realloc(f->events, f->capevents * sizeof(*f->events));
    }
    f->events[f->nevents].source_name = st_strndup(source_name, slen);
    f->events[f->nevents].event_id = st_strndup(event_id, idlen);
    f->events[f->nevents].late = late;
    f->nevents++;
}

void st_finding_add_event(struct st_finding *f, const char *source_name,
                          const char *event_id, int late)
{
    st_finding_add_event_n(f, source_name, strlen(source_name), event_id, strlen(event_id),
                           late);
}

void st_findings_forget_event(struct st_findings *fs, const char *source_name,
                              const char *event_id)
{
    size_t keep = 0;
    for (size_t i = 0; i < fs->n; i++) {
        struct st_finding *f = &fs->items[i];
        size_t k = 0, removed = 0;
        for (size_t j = 0; j < f->nevents; j++) {
            struct st_finding_event *e = &f->events[j];
            if (strcmp(e->source_name, source_name) == 0 &&
                strcmp(e->event_id, event_id) == 0) {
                free(e->source_name);
                free(e->event_id);
                removed++;
                continue;
            }
            f->events[k++] = *e;
        }
        f->nevents = k;
        if (removed && k == 0) {
            finding_fini(f);
            continue;
        }
        if (keep != i)
            fs->items[keep] = *f;
        keep++;
    }
    fs->n = keep;
}
