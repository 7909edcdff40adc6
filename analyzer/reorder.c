/* reorder.c: the event-time reorder buffer (see reorder.h).
 *
 * Per partition, the buffered events are held in push order (offset
 * order), in a ring numbered by sequence (struct pushed: what the buffer
 * orders and commits by, and a parked event's text), so that the commit
 * point is the first of those still buffered without a walk, and the
 * events pushed in the last batch are the ring's tail (those st_reorder_park
 * parks). A binary min-heap of keys, ordered by (ts, offset), says which
 * leaves next. The parsed events not parked yet are in `fresh`, by
 * sequence from fresh_seq: every event numbered fresh_seq or more is
 * there, every older one still buffered is parked.
 *
 * An event that leaves another way than the heap's top (forgotten, or
 * skewed: the `ready` list) is marked gone in the ring; its heap key, if
 * any, stays and is skipped when it comes to the top (a key whose event
 * is gone). */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "reorder.h"

/* An event pushed and not yet gone (40 bytes: with its heap key and its
 * text, what a parked event holds). */
struct pushed {
    int64_t offset;
    int64_t clock; /* the partition's clock before it was pushed */
    int64_t ts_us; /* its time here (the receive time when skewed) */
    char *raw;     /* parked: its text (owned); NULL otherwise */
    struct st_event *kept; /* kept parsed past its batch (a small buffer:
                            * st_reorder_park's keep), owned; or NULL */
    uint32_t rawlen;
    uint8_t gone, late, skewed;
};

/* A parsed event pushed since the last park, with the text it was parsed
 * from (not ours: valid until the next park). */
struct fresh {
    struct st_event ev; /* empty once it left */
    const char *raw;
    size_t rawlen;
};

/* The heap's entry: the order, and the event's number. */
struct key {
    int64_t ts_us;
    int64_t offset;
    uint64_t seq;
};

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
    size_t live;          /* events buffered */
    struct key *heap;
    size_t n, cap;
    /* keys pushed in order, each not below the one pushed before it here
     * (most: a partition's events mostly come in time order), queued
     * from run_head to run_n; the others in the heap. The next to leave
     * is the smaller of the two fronts (keys_top), so an event in order
     * costs no sift of the heap. */
    struct key *run;
    size_t run_head, run_n, run_cap;
    uint64_t *ready;      /* skewed: leave at the next release (numbers) */
    size_t nready, capready;
    /* every event pushed and not yet gone, in push order: a ring of
     * fifo_cap (a power of 2) from fifo_head, the first with sequence
     * number fifo_seq */
    struct pushed *fifo;
    size_t fifo_head, fifo_n, fifo_cap;
    uint64_t fifo_seq;
    /* the events pushed since the last park: fresh[i] is number
     * fresh_seq + i; fresh_live of them still buffered */
    struct fresh *fresh;
    size_t nfresh, capfresh, fresh_live;
    uint64_t fresh_seq;
    size_t parked, parked_bytes;
    size_t kept, kept_bytes; /* events kept parsed past their batch, their arenas */
    /* an offset was pushed below one before it (not seen: Kafka gives a
     * partition's offsets in order and a seek back drops the buffer): the
     * commit point then walks the buffer, as it always did */
    int unordered;
    int64_t last_pushed;
};

struct st_reorder {
    int64_t lateness_us;
    struct part *parts;
    size_t nparts;
    size_t buffered;
    size_t unparsed;
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

static struct pushed *fifo_at(struct part *p, size_t i)
{
    return &p->fifo[(p->fifo_head + i) & (p->fifo_cap - 1)];
}

/* The event numbered seq, or NULL when it is gone. */
static struct pushed *entry(struct part *p, uint64_t seq)
{
    if (seq < p->fifo_seq)
        return NULL;
    if (seq - p->fifo_seq >= p->fifo_n)
        st_fatal("reorder: an event number past the buffer");
    struct pushed *e = fifo_at(p, (size_t)(seq - p->fifo_seq));
    return e->gone ? NULL : e;
}

static void part_clear(struct part *p)
{
    for (size_t i = 0; i < p->fifo_n; i++) {
        struct pushed *e = fifo_at(p, i);
        free(e->raw);
        if (e->kept) {
            st_event_fini(e->kept);
            free(e->kept);
        }
    }
    for (size_t i = 0; i < p->nfresh; i++)
        st_event_fini(&p->fresh[i].ev); /* an empty one too */
    free(p->heap);
    free(p->run);
    free(p->ready);
    free(p->fifo);
    free(p->fresh);
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
static uint64_t fifo_add(struct part *p, const struct pushed *e)
{
    if (p->fifo_n && e->offset < p->last_pushed)
        p->unordered = 1;
    p->last_pushed = e->offset;
    if (p->fifo_n == p->fifo_cap) {
        size_t cap = p->fifo_cap ? 2 * p->fifo_cap : 256;
        struct pushed *f = st_malloc(cap * sizeof(*f));
        for (size_t i = 0; i < p->fifo_n; i++)
            f[i] = *fifo_at(p, i);
        free(p->fifo);
        p->fifo = f;
        p->fifo_cap = cap;
        p->fifo_head = 0;
    }
    *fifo_at(p, p->fifo_n) = *e;
    p->fifo_n++;
    return p->fifo_seq + p->fifo_n - 1;
}

/* The event e (numbered seq) left the buffer, its event or text taken or
 * freed; the ring's head moves past every event gone. */
static void gone(struct st_reorder *r, struct part *p, struct pushed *e, uint64_t seq)
{
    e->gone = 1;
    if (seq >= p->fresh_seq && --p->fresh_live == 0) {
        /* nothing fresh is buffered: start the list again (every batch
         * at detect.lateness_s=0, so that it never grows) */
        p->nfresh = 0;
        p->fresh_seq = p->fifo_seq + p->fifo_n;
    }
    p->live--;
    r->buffered--;
    while (p->fifo_n && p->fifo[p->fifo_head].gone) {
        p->fifo_head = (p->fifo_head + 1) & (p->fifo_cap - 1);
        p->fifo_n--;
        p->fifo_seq++;
    }
}

/* Frees what the buffer holds of e (numbered seq) and marks it gone. */
static void drop_one(struct st_reorder *r, struct part *p, struct pushed *e, uint64_t seq)
{
    if (seq >= p->fresh_seq) {
        st_event_fini(&p->fresh[seq - p->fresh_seq].ev);
    } else if (e->kept) {
        p->kept--;
        p->kept_bytes -= e->kept->mem_bytes;
        st_event_fini(e->kept);
        free(e->kept);
        e->kept = NULL;
    } else {
        p->parked--;
        p->parked_bytes -= e->rawlen;
        free(e->raw);
        e->raw = NULL;
    }
    gone(r, p, e, seq);
}

/* Moves the event e (numbered seq) out of the buffer into *it: its parsed
 * event, or a parked one parsed again. Returns 0, or -1 when its text does
 * not parse (the event is gone all the same). */
static int take(struct st_reorder *r, struct part *p, struct pushed *e, uint64_t seq,
                struct st_reorder_item *it)
{
    int rc = 0;
    it->partition = p->partition;
    it->offset = e->offset;
    it->clock = e->clock;
    it->late = e->late;
    it->skewed = e->skewed;
    if (seq >= p->fresh_seq) {
        struct st_event *ev = &p->fresh[seq - p->fresh_seq].ev;
        it->ev = *ev;
        memset(ev, 0, sizeof(*ev));
    } else if (e->kept) {
        p->kept--;
        p->kept_bytes -= e->kept->mem_bytes;
        it->ev = *e->kept;
        free(e->kept);
        e->kept = NULL;
    } else {
        struct st_reject rej;
        if (st_event_parse(&it->ev, e->raw, e->rawlen, &rej) == 0) {
            it->ev.ts_us = e->ts_us; /* the receive time of a skewed one */
        } else {
            /* its reason only: the message may quote the event */
            st_error("reorder: the event at partition %" PRId32 " offset %" PRId64
                     " parsed when it came but not when it left (%s): not detected",
                     p->partition, e->offset, rej.code);
            r->unparsed++;
            rc = -1;
        }
        p->parked--;
        p->parked_bytes -= e->rawlen;
        free(e->raw);
        e->raw = NULL;
    }
    gone(r, p, e, seq);
    return rc;
}

static int key_less(const struct key *a, const struct key *b)
{
    if (a->ts_us != b->ts_us)
        return a->ts_us < b->ts_us;
    return a->offset < b->offset;
}

static void heap_push(struct part *p, const struct key *k)
{
    if (p->n == p->cap) {
        p->cap = p->cap ? p->cap * 2 : 64;
        p->heap = st_realloc(p->heap, p->cap * sizeof(*p->heap));
    }
    size_t i = p->n++;
    p->heap[i] = *k;
    while (i > 0) {
        size_t up = (i - 1) / 2;
        if (!key_less(&p->heap[i], &p->heap[up]))
            break;
        struct key t = p->heap[i];
        p->heap[i] = p->heap[up];
        p->heap[up] = t;
        i = up;
    }
}

static struct key heap_pop(struct part *p)
{
    struct key top = p->heap[0];
    p->heap[0] = p->heap[--p->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, rr = l + 1, m = i;
        if (l < p->n && key_less(&p->heap[l], &p->heap[m]))
            m = l;
        if (rr < p->n && key_less(&p->heap[rr], &p->heap[m]))
            m = rr;
        if (m == i)
            break;
        struct key t = p->heap[i];
        p->heap[i] = p->heap[m];
        p->heap[m] = t;
        i = m;
    }
    return top;
}

/* Queues k: on the run when it is not below the run's last key, else on
 * the heap. */
static void keys_push(struct part *p, const struct key *k)
{
    if (p->run_n > p->run_head && key_less(k, &p->run[p->run_n - 1])) {
        heap_push(p, k);
        return;
    }
    if (p->run_n == p->run_cap) {
        if (p->run_head > 0 && p->run_head >= p->run_cap / 2) { /* room at the front */
            memmove(p->run, p->run + p->run_head,
                    (p->run_n - p->run_head) * sizeof(*p->run));
            p->run_n -= p->run_head;
            p->run_head = 0;
        } else {
            p->run_cap = p->run_cap ? p->run_cap * 2 : 64;
            p->run = st_realloc(p->run, p->run_cap * sizeof(*p->run));
        }
    }
    p->run[p->run_n++] = *k;
}

/* The key that leaves next, or NULL when none is queued. */
static const struct key *keys_top(const struct part *p)
{
    const struct key *a = p->run_head < p->run_n ? &p->run[p->run_head] : NULL;
    const struct key *b = p->n ? &p->heap[0] : NULL;
    if (!a || !b)
        return a ? a : b;
    return key_less(b, a) ? b : a;
}

/* Takes the key keys_top gives. */
static struct key keys_pop(struct part *p)
{
    const struct key *t = keys_top(p);
    if (p->run_head == p->run_n || t != &p->run[p->run_head])
        return heap_pop(p);
    struct key k = p->run[p->run_head++];
    if (p->run_head == p->run_n)
        p->run_head = p->run_n = 0;
    return k;
}

static int64_t watermark(const struct st_reorder *r, const struct part *p)
{
    return p->have_ts ? p->max_ts - r->lateness_us : INT64_MIN;
}

void st_reorder_push(struct st_reorder *r, int32_t partition, int64_t offset,
                     struct st_event *ev, const char *raw, size_t rawlen, int64_t now_ms,
                     int skewed)
{
    struct part *p = part_get(r, partition, 1);
    struct pushed e = {.offset = offset, .ts_us = ev->ts_us, .skewed = (uint8_t)skewed};

    if (!raw || rawlen > UINT32_MAX) /* (Kafka's messages are far smaller) */
        st_fatal("reorder: an event pushed without its text");
    part_first(p, offset);
    e.clock = p->have_ts ? p->max_ts : ST_REORDER_NO_CLOCK;
    e.rawlen = (uint32_t)rawlen;
    if (!skewed) {
        e.late = p->have_ts && ev->ts_us < watermark(r, p);
        if (!p->have_ts || ev->ts_us > p->max_ts) {
            p->max_ts = ev->ts_us;
            p->have_ts = 1;
        }
    }
    uint64_t seq = fifo_add(p, &e);
    if (p->fresh_live == 0) {
        p->nfresh = 0;
        p->fresh_seq = seq;
    }
    if (p->nfresh == p->capfresh) {
        p->capfresh = p->capfresh ? p->capfresh * 2 : 256;
        p->fresh = st_realloc(p->fresh, p->capfresh * sizeof(*p->fresh));
    }
    p->fresh[p->nfresh++] = (struct fresh){.ev = *ev, .raw = raw, .rawlen = rawlen};
    memset(ev, 0, sizeof(*ev));
    p->fresh_live++;
    if (offset + 1 > p->next_offset)
        p->next_offset = offset + 1;
    p->last_push_ms = now_ms;
    p->live++;
    r->buffered++;
    if (skewed) {
        if (p->nready == p->capready) {
            p->capready = p->capready ? p->capready * 2 : 8;
            p->ready = st_realloc(p->ready, p->capready * sizeof(*p->ready));
        }
        p->ready[p->nready++] = seq;
        return;
    }
    keys_push(p, &(struct key){.ts_us = e.ts_us, .offset = offset, .seq = seq});
}

size_t st_reorder_park(struct st_reorder *r, size_t keep)
{
    size_t n = 0;
    /* a buffer that holds few events keeps them parsed: parking each would
     * cost a second parse for little memory (docs/architecture.md) */
    int park = r->buffered > keep;
    for (size_t i = 0; i < r->nparts; i++) {
        struct part *p = &r->parts[i];
        if (!p->used || p->fresh_live == 0)
            continue;
        for (size_t k = 0; k < p->nfresh; k++) {
            struct pushed *e = entry(p, p->fresh_seq + k);
            if (!e)
                continue; /* it left */
            struct fresh *f = &p->fresh[k];
            if (!park) {
                e->kept = st_malloc(sizeof(*e->kept));
                *e->kept = f->ev;
                memset(&f->ev, 0, sizeof(f->ev));
                p->kept++;
                p->kept_bytes += e->kept->mem_bytes;
                continue;
            }
            e->raw = st_malloc(f->rawlen ? f->rawlen : 1);
            memcpy(e->raw, f->raw, f->rawlen);
            st_event_fini(&f->ev);
            p->parked++;
            p->parked_bytes += f->rawlen;
            n++;
        }
        p->nfresh = p->fresh_live = 0;
        p->fresh_seq = p->fifo_seq + p->fifo_n;
    }
    return n;
}

int st_reorder_forget(struct st_reorder *r, int32_t partition, int64_t offset)
{
    struct part *p = part_get(r, partition, 0);
    if (!p)
        return 0;
    /* from the newest: a refused event is of a batch just stored (rare:
     * simple) */
    for (size_t i = p->fifo_n; i-- > 0;) {
        struct pushed *e = fifo_at(p, i);
        if (e->gone || e->offset != offset)
            continue;
        drop_one(r, p, e, p->fifo_seq + i);
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

/* One more slot in *out. */
static struct st_reorder_item *out_slot(struct st_reorder_item **out, size_t *cap, size_t n)
{
    if (n == *cap) {
        *cap = *cap ? *cap * 2 : 256;
        *out = st_realloc(*out, *cap * sizeof(**out));
    }
    return &(*out)[n];
}

size_t st_reorder_release(struct st_reorder *r, int flush, int64_t now_ms,
                          int64_t idle_ms, size_t max, struct st_reorder_item **out,
                          size_t *cap)
{
    size_t n = 0;
    if (max == 0)
        max = SIZE_MAX;
    for (size_t i = 0; i < r->nparts && n < max; i++) {
        struct part *p = &r->parts[i];
        if (!p->used)
            continue;
        for (size_t k = 0; k < p->nready; k++) {
            struct pushed *e = entry(p, p->ready[k]);
            if (e && take(r, p, e, p->ready[k], out_slot(out, cap, n)) == 0)
                n++;
        }
        p->nready = 0;
        int all = flush || (idle_ms > 0 && now_ms - p->last_push_ms >= idle_ms);
        int64_t wm = watermark(r, p);
        /* a late event sorts before the watermark: it leaves with the rest */
        const struct key *top;
        while ((top = keys_top(p)) && n < max) {
            struct pushed *e = entry(p, top->seq);
            if (e && !(all || top->ts_us <= wm || e->late))
                break;
            struct key k = keys_pop(p);
            if (e && take(r, p, e, k.seq, out_slot(out, cap, n)) == 0)
                n++;
        }
    }
    return n;
}

int64_t st_reorder_commit_point(const struct st_reorder *r, int32_t partition,
                                int64_t *clock)
{
    struct part *p = part_get((struct st_reorder *)r, partition, 0);
    *clock = ST_REORDER_NO_CLOCK;
    if (!p || p->next_offset < 0)
        return -1;
    /* nothing buffered: every event pushed is before the offset */
    int64_t min = p->next_offset;
    *clock = p->have_ts ? p->max_ts : ST_REORDER_NO_CLOCK;
    if (!p->unordered) {
        /* the oldest pushed of those still buffered (gone() keeps the
         * ring's head on one) */
        if (p->fifo_n) {
            min = p->fifo[p->fifo_head].offset;
            *clock = p->fifo[p->fifo_head].clock;
        }
        return min;
    }
    for (size_t i = 0; i < p->fifo_n; i++) {
        const struct pushed *e = fifo_at(p, i);
        if (!e->gone && e->offset < min) {
            min = e->offset;
            *clock = e->clock;
        }
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
    r->buffered -= p->live;
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

size_t st_reorder_parked(const struct st_reorder *r)
{
    size_t n = 0;
    for (size_t i = 0; i < r->nparts; i++)
        n += r->parts[i].used ? r->parts[i].parked : 0;
    return n;
}

size_t st_reorder_bytes(const struct st_reorder *r)
{
    size_t n = sizeof(*r) + r->nparts * sizeof(*r->parts);
    for (size_t i = 0; i < r->nparts; i++) {
        const struct part *p = &r->parts[i];
        if (!p->used)
            continue;
        n += p->cap * sizeof(*p->heap) + p->run_cap * sizeof(*p->run) +
             p->capready * sizeof(*p->ready) +
             p->fifo_cap * sizeof(*p->fifo) + p->capfresh * sizeof(*p->fresh) +
             p->parked_bytes + p->kept_bytes + p->kept * sizeof(struct st_event);
        for (size_t k = 0; k < p->nfresh; k++)
            n += p->fresh[k].ev.mem_bytes;
    }
    return n;
}

size_t st_reorder_unparsed(const struct st_reorder *r)
{
    return r->unparsed;
}
