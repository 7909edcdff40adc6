/* reorder.c: the event-time reorder buffer (see reorder.h). One binary
 * min-heap per partition, ordered by (ts, offset), and beside it the
 * buffered events in push order (offset order), so that the commit point
 * is the first of those still buffered, without a walk of the heap. */
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "reorder.h"

struct part {
    int32_t partition;
    int used;
    int64_t max_ts;       /* newest event time pushed (the clock) */
    int have_ts;
    int64_t next_offset;  /* one past the newest offset pushed, -1 if none */
    /* st_reorder_resume's clock, taken if the first offset is resume_at */
    int resuming;
    int64_t resume_at, resume_clock;
    int64_t last_push_ms;
    struct st_reorder_item *heap;
    size_t n, cap;
    struct st_reorder_item *ready; /* skewed: leave at the next release */
    size_t nready, capready;
    /* every event pushed and not yet gone, in push order: a ring of
     * fifo_cap (a power of 2) from fifo_head, the first with sequence
     * number fifo_seq; an event's item holds its number (seq) */
    struct pushed *fifo;
    size_t fifo_head, fifo_n, fifo_cap;
    uint64_t fifo_seq;
    /* an offset was pushed below one before it (not seen: Kafka gives a
     * partition's offsets in order and a seek back drops the buffer): the
     * commit point then walks the buffer, as it always did */
    int unordered;
    int64_t last_pushed;
};

struct pushed {
    int64_t offset;
    int64_t clock;
    int gone;
};

struct st_reorder {
    int64_t lateness_us;
    struct part *parts;
    size_t nparts;
    size_t buffered;
};

struct st_reorder *st_reorder_new(int64_t lateness_us)
{
    struct st_reorder *r = st_calloc(1, sizeof(*r));
    r->lateness_us = lateness_us;
    return r;
}

void st_reorder_item_fini(struct st_reorder_item *it)
{
    st_event_fini(&it->ev);
}

static void part_clear(struct part *p)
{
    for (size_t i = 0; i < p->n; i++)
        st_reorder_item_fini(&p->heap[i]);
    for (size_t i = 0; i < p->nready; i++)
        st_reorder_item_fini(&p->ready[i]);
    free(p->heap);
    free(p->ready);
    free(p->fifo);
    memset(p, 0, sizeof(*p));
}

int st_reorder_skewed(int64_t ts_us, int64_t recv_us, int64_t max_future_us,
                      int64_t max_past_us)
{
    if (recv_us < 0)
        return 0;
    return (max_future_us > 0 && ts_us > recv_us + max_future_us) ||
           (max_past_us > 0 && ts_us < recv_us - max_past_us);
}

void st_reorder_destroy(struct st_reorder *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->nparts; i++)
        part_clear(&r->parts[i]);
    free(r->parts);
    free(r);
}

static struct part *part_get(struct st_reorder *r, int32_t partition, int create)
{
    for (size_t i = 0; i < r->nparts; i++)
        if (r->parts[i].used && r->parts[i].partition == partition)
            return &r->parts[i];
    if (!create)
        return NULL;
    struct part *p = NULL;
    for (size_t i = 0; i < r->nparts && !p; i++)
        if (!r->parts[i].used)
            p = &r->parts[i]; /* a revoked partition's slot */
    if (!p) {
        r->parts = st_realloc(r->parts, (r->nparts + 1) * sizeof(*r->parts));
        p = &r->parts[r->nparts++];
    }
    memset(p, 0, sizeof(*p));
    p->used = 1;
    p->partition = partition;
    p->next_offset = -1;
    return p;
}

/* The first offset pushed or noted for p: a clock resumed at it, or
 * before it (offsets that hold no message: control records, compaction),
 * is the partition's (st_reorder_resume). */
static void part_first(struct part *p, int64_t offset)
{
    if (!p->resuming)
        return;
    p->resuming = 0;
    if (offset >= p->resume_at && p->resume_clock != ST_REORDER_NO_CLOCK) {
        p->max_ts = p->resume_clock;
        p->have_ts = 1;
    }
}

/* Appends a pushed event to p's ring; returns its sequence number. */
static uint64_t fifo_add(struct part *p, int64_t offset, int64_t clock)
{
    if (p->fifo_n && offset < p->last_pushed)
        p->unordered = 1;
    p->last_pushed = offset;
    if (p->fifo_n == p->fifo_cap) {
        size_t cap = p->fifo_cap ? 2 * p->fifo_cap : 256;
        struct pushed *f = st_malloc(cap * sizeof(*f));
        for (size_t i = 0; i < p->fifo_n; i++)
            f[i] = p->fifo[(p->fifo_head + i) & (p->fifo_cap - 1)];
        free(p->fifo);
        p->fifo = f;
        p->fifo_cap = cap;
        p->fifo_head = 0;
    }
    p->fifo[(p->fifo_head + p->fifo_n) & (p->fifo_cap - 1)] =
        (struct pushed){.offset = offset, .clock = clock, .gone = 0};
    p->fifo_n++;
    return p->fifo_seq + p->fifo_n - 1;
}

/* The event numbered seq left the buffer; the ring's head moves past every
 * event gone. */
static void fifo_gone(struct part *p, uint64_t seq)
{
    if (seq < p->fifo_seq || seq - p->fifo_seq >= p->fifo_n)
        st_fatal("reorder: an event left the buffer twice");
    p->fifo[(p->fifo_head + (seq - p->fifo_seq)) & (p->fifo_cap - 1)].gone = 1;
    while (p->fifo_n && p->fifo[p->fifo_head].gone) {
        p->fifo_head = (p->fifo_head + 1) & (p->fifo_cap - 1);
        p->fifo_n--;
        p->fifo_seq++;
    }
}

static int item_less(const struct st_reorder_item *a, const struct st_reorder_item *b)
{
    if (a->ev.ts_us != b->ev.ts_us)
        return a->ev.ts_us < b->ev.ts_us;
    return a->offset < b->offset;
}

static void heap_push(struct part *p, struct st_reorder_item *it)
{
    if (p->n == p->cap) {
        p->cap = p->cap ? p->cap * 2 : 64;
        p->heap = st_realloc(p->heap, p->cap * sizeof(*p->heap));
    }
    size_t i = p->n++;
    p->heap[i] = *it;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!item_less(&p->heap[i], &p->heap[up]))
            break;
        struct st_reorder_item t = p->heap[i];
        p->heap[i] = p->heap[up];
        p->heap[up] = t;
        i = up;
    }
}

static struct st_reorder_item heap_pop(struct part *p)
{
    struct st_reorder_item top = p->heap[0];
    p->heap[0] = p->heap[--p->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, rr = l + 1, m = i;
        if (l < p->n && item_less(&p->heap[l], &p->heap[m]))
            m = l;
        if (rr < p->n && item_less(&p->heap[rr], &p->heap[m]))
            m = rr;
        if (m == i)
            break;
        struct st_reorder_item t = p->heap[i];
        p->heap[i] = p->heap[m];
        p->heap[m] = t;
        i = m;
    }
    return top;
}

static int64_t watermark(const struct st_reorder *r, const struct part *p)
{
    return p->have_ts ? p->max_ts - r->lateness_us : INT64_MIN;
}

void st_reorder_push(struct st_reorder *r, int32_t partition, int64_t offset,
                     struct st_event *ev, int64_t now_ms, int skewed)
{
    struct part *p = part_get(r, partition, 1);
    struct st_reorder_item it;

    it.ev = *ev;
    memset(ev, 0, sizeof(*ev));
    it.partition = partition;
    it.offset = offset;
    it.skewed = skewed;
    it.late = 0;
    part_first(p, offset);
    it.clock = p->have_ts ? p->max_ts : ST_REORDER_NO_CLOCK;
    it.seq = fifo_add(p, offset, it.clock);
    if (offset + 1 > p->next_offset)
        p->next_offset = offset + 1;
    p->last_push_ms = now_ms;
    r->buffered++;
    if (skewed) {
        if (p->nready == p->capready) {
            p->capready = p->capready ? p->capready * 2 : 8;
            p->ready = st_realloc(p->ready, p->capready * sizeof(*p->ready));
        }
        p->ready[p->nready++] = it;
        return;
    }
    it.late = p->have_ts && it.ev.ts_us < watermark(r, p);
    if (!p->have_ts || it.ev.ts_us > p->max_ts) {
        p->max_ts = it.ev.ts_us;
        p->have_ts = 1;
    }
    heap_push(p, &it);
}

int st_reorder_forget(struct st_reorder *r, int32_t partition, int64_t offset)
{
    struct part *p = part_get(r, partition, 0);
    if (!p)
        return 0;
    for (size_t i = 0; i < p->nready; i++) {
        if (p->ready[i].offset == offset) {
            fifo_gone(p, p->ready[i].seq);
            st_reorder_item_fini(&p->ready[i]);
            p->ready[i] = p->ready[--p->nready];
            r->buffered--;
            return 1;
        }
    }
    for (size_t i = 0; i < p->n; i++) {
        if (p->heap[i].offset != offset)
            continue;
        fifo_gone(p, p->heap[i].seq);
        st_reorder_item_fini(&p->heap[i]);
        p->heap[i] = p->heap[--p->n];
        r->buffered--;
        /* rebuild the heap: rare (a refused event), so simple */
        size_t n = p->n;
        struct st_reorder_item *items = p->heap;
        p->heap = NULL;
        p->n = p->cap = 0;
        for (size_t k = 0; k < n; k++)
            heap_push(p, &items[k]);
        free(items);
        return 1;
    }
    return 0;
}

void st_reorder_note(struct st_reorder *r, int32_t partition, int64_t offset)
{
    struct part *p = part_get(r, partition, 1);
    part_first(p, offset);
    if (offset + 1 > p->next_offset)
        p->next_offset = offset + 1;
}

size_t st_reorder_release(struct st_reorder *r, int flush, int64_t now_ms,
                          int64_t idle_ms, struct st_reorder_item **out,
                          size_t *cap)
{
    size_t n = 0;
    for (size_t i = 0; i < r->nparts; i++) {
        struct part *p = &r->parts[i];
        if (!p->used)
            continue;
        for (size_t k = 0; k < p->nready; k++) {
            if (n == *cap) {
                *cap = *cap ? *cap * 2 : 256;
                *out = st_realloc(*out, *cap * sizeof(**out));
            }
            (*out)[n++] = p->ready[k];
            fifo_gone(p, p->ready[k].seq);
            r->buffered--;
        }
        p->nready = 0;
        int all = flush || (idle_ms > 0 && now_ms - p->last_push_ms >= idle_ms);
        int64_t wm = watermark(r, p);
        /* a late event sorts before the watermark: it leaves with the rest */
        while (p->n > 0 && (all || p->heap[0].ev.ts_us <= wm || p->heap[0].late)) {
            if (n == *cap) {
                *cap = *cap ? *cap * 2 : 256;
                *out = st_realloc(*out, *cap * sizeof(**out));
            }
            (*out)[n++] = heap_pop(p);
            fifo_gone(p, (*out)[n - 1].seq);
            r->buffered--;
        }
    }
    return n;
}

int64_t st_reorder_commit_point(const struct st_reorder *r, int32_t partition,
                                int64_t *clock)
{
    const struct part *p = part_get((struct st_reorder *)r, partition, 0);
    *clock = ST_REORDER_NO_CLOCK;
    if (!p || p->next_offset < 0)
        return -1;
    /* nothing buffered: every event pushed is before the offset */
    int64_t min = p->next_offset;
    *clock = p->have_ts ? p->max_ts : ST_REORDER_NO_CLOCK;
    if (!p->unordered) {
        /* the oldest pushed of those still buffered (fifo_gone keeps the
         * ring's head on one) */
        if (p->fifo_n) {
            min = p->fifo[p->fifo_head].offset;
            *clock = p->fifo[p->fifo_head].clock;
        }
        return min;
    }
    for (size_t i = 0; i < p->n; i++)
        if (p->heap[i].offset < min) {
            min = p->heap[i].offset;
            *clock = p->heap[i].clock;
        }
    for (size_t i = 0; i < p->nready; i++)
        if (p->ready[i].offset < min) {
            min = p->ready[i].offset;
            *clock = p->ready[i].clock;
        }
    return min;
}

int64_t st_reorder_commit_offset(const struct st_reorder *r, int32_t partition)
{
    int64_t clock;
    return st_reorder_commit_point(r, partition, &clock);
}

void st_reorder_resume(struct st_reorder *r, int32_t partition, int64_t offset,
                       int64_t clock)
{
    struct part *p = part_get(r, partition, 1);
    if (p->next_offset >= 0)
        return; /* it holds events already: they made its clock */
    p->resuming = 1;
    p->resume_at = offset;
    p->resume_clock = clock;
}

void st_reorder_drop(struct st_reorder *r, int32_t partition)
{
    struct part *p = part_get(r, partition, 0);
    if (!p)
        return;
    r->buffered -= p->n + p->nready;
    part_clear(p);
}

size_t st_reorder_slots(const struct st_reorder *r)
{
    return r->nparts;
}

size_t st_reorder_buffered(const struct st_reorder *r)
{
    return r->buffered;
}
