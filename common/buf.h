/* buf.h: a growable byte buffer. */
#ifndef ST_BUF_H
#define ST_BUF_H

#include <stddef.h>
#include <stdint.h>

struct st_buf {
    char *data; /* always NUL-terminated once anything was added */
    size_t len;
    size_t cap;
};

void st_buf_init(struct st_buf *b);
void st_buf_fini(struct st_buf *b);            /* frees data */
void st_buf_reset(struct st_buf *b);           /* keeps the allocation */
/* Room for n more bytes and a NUL: data does not move until more is added
 * (a caller may then copy a part of b to its end). Cannot fail. */
void st_buf_reserve(struct st_buf *b, size_t n);
void st_buf_add(struct st_buf *b, const void *p, size_t n);
void st_buf_adds(struct st_buf *b, const char *s);
void st_buf_addc(struct st_buf *b, char c);
/* Appends v in decimal, as printf's "%" PRId64 would (without printf: the
 * detectors' checkpoints format several numbers per event). */
void st_buf_addi64(struct st_buf *b, int64_t v);
/* Writes v in decimal to out (at least ST_I64_LEN bytes), NUL-terminated;
 * returns its length. */
#define ST_I64_LEN 21
size_t st_fmt_i64(char *out, int64_t v);

/* FNV-1a (64-bit) of a, the byte 0x1f, then b: a pair of strings hashed as
 * one key (a run: task and run id; an event: source and event id). */
uint64_t st_hash_pair(const char *a, const char *b);
/* The slot of hash h in a table of cap slots (a power of two), for every
 * in-memory table keyed by an FNV-1a hash. FNV-1a's low bits depend only
 * on the low bits of the bytes hashed: a task and a run id with the same
 * digits ("T0080651", "r0080651") give every run the same lowest bit, and
 * 248,000 such runs took 105,000 of 262,144 slots by their low bits
 * (160,000 with this). Its high bits, mixed by every multiplication, are
 * folded into the low ones first. (Redis's run buckets,
 * st_detect_run_bucket, are a stored layout: they keep hash % 64.) */
static inline size_t st_hash_slot(uint64_t h, size_t cap)
{
    return (size_t)(h ^ (h >> 29)) & (cap - 1);
}
void st_buf_printf(struct st_buf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
