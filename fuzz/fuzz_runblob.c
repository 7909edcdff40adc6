/* fuzz_runblob.c: a run's state string (analyzer/runblob.c) read from any
 * bytes, as a load reads what Redis holds: never a crash, and what reads
 * whole is written again into bytes that read back the same; the same
 * bytes read as a large run's log (st_runblob_log_read). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "runblob.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* reads data; writes what it read into out (when not NULL). Returns 0 when
 * every byte was read. */
static int reread(const char *data, size_t size, struct st_buf *out)
{
    struct st_runblob_reader r;
    uint64_t n;
    int64_t prev = 0;
    if (st_runblob_open(&r, data, size) || st_runblob_get_count(&r, &n))
        return -1;
    if (out) {
        st_runblob_start(out, &prev);
        st_runblob_count(out, n);
    }
    for (uint64_t i = 0; i < n; i++) {
        int64_t ts;
        const char *k;
        size_t kl;
        if (st_runblob_get_member(&r, &ts, &k, &kl))
            return -1;
        if (out)
            st_runblob_member(out, &prev, ts, k, kl);
    }
    if (st_runblob_get_count(&r, &n))
        return -1;
    if (out)
        st_runblob_count(out, n);
    for (uint64_t i = 0; i < n; i++) {
        const char *id;
        int64_t first, last;
        if (st_runblob_get_episode(&r, &id, &first, &last))
            return -1;
        if (out)
            st_runblob_episode(out, id, first, last);
    }
    if (st_runblob_get_count(&r, &n))
        return -1;
    if (out)
        st_runblob_count(out, n);
    for (uint64_t i = 0; i < n; i++) {
        int64_t key, sum;
        if (st_runblob_get_bucket(&r, &key, &sum))
            return -1;
        if (out)
            st_runblob_bucket(out, key, sum);
    }
    return st_runblob_close(&r);
}

static void count_member(void *arg, int64_t ts, const char *key, size_t len)
{
    (void)ts;
    if (memchr(key, '\0', len))
        abort(); /* the reader refuses a member holding NUL */
    (*(long *)arg)++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    /* the same bytes as a large run's log: never a crash; what reads whole
     * hands out no more members than its count of distinct members
     * claims, and a log read twice in a row reads as once */
    long handed = 0;
    if (st_runblob_log_read((const char *)data, size, count_member, &handed) == 0) {
        long distinct = st_runblob_log_count((const char *)data, size);
        if (distinct < 0 || distinct > handed)
            abort();
        char *twice = malloc(2 * size + 1);
        memcpy(twice, data, size);
        memcpy(twice + size, data, size);
        if (st_runblob_log_count(twice, 2 * size) != distinct)
            abort();
        free(twice);
    }
    struct st_buf once, twice;
    st_buf_init(&once);
    st_buf_init(&twice);
    if (reread((const char *)data, size, &once) == 0) {
        /* written again: reads whole, and writes the same bytes again */
        if (reread(once.data, once.len, &twice) != 0 || once.len != twice.len ||
            memcmp(once.data, twice.data, once.len) != 0)
            abort();
    }
    st_buf_fini(&once);
    st_buf_fini(&twice);
    return 0;
}
