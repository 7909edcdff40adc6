/* reorder.h: the event-time reorder buffer.
 *
 * Detectors must see each partition's events in event-time order, whatever
 * order they arrived in, so that a scenario shuffled within the allowed
 * lateness gives the same findings as the same scenario in order. Each
 * partition keeps a watermark, the newest event time seen minus the allowed
 * lateness; an event waits here until the watermark passes it, and leaves
 * in (ts, offset) order. An event older than the watermark when it arrives
 * is late: it leaves at once, marked late.
 *
 * An event whose time is far from the time the collector produced it
 * (skewed: see st_reorder_skewed) is pushed with the receive time as its
 * time: it leaves at once, marked skewed, and moves no watermark, so one
 * forged timestamp can neither hold a partition's commits back nor make
 * the events after it late.
 *
 * A buffered event is parked at the end of the batch it came in
 * (st_reorder_park): its parsed document (an arena of 2 or 4 KB) is freed and only
 * its text kept, with the few fields the buffer orders and commits by; it
 * is parsed again when it leaves (the same text gives the same event).
 * Events that leave in the batch they came in (detect.lateness_s=0, a
 * partition's late and skewed events) are never parked: they cost
 * nothing more.
 *
 * The buffered events need not survive a crash: the analyzer commits, per
 * partition, no further than the oldest offset still buffered, so a restart
 * reads them from Kafka again. The watermark must: a process that starts a
 * partition at a committed offset judges its events late against the
 * events before that offset, which it never reads. So each commit point has
 * a clock (st_reorder_commit_point: the newest event time before the
 * offset), which the analyzer commits with the offset (Kafka's offset
 * metadata, consume.h) and gives back when the partition is assigned
 * (st_reorder_resume): the next owner judges every event from the
 * committed offset on as the process before it did. */
#ifndef ST_REORDER_H
#define ST_REORDER_H

#include <stddef.h>
#include <stdint.h>

#include "event.h"

/* A partition's clock when none is known (nothing pushed before). */
#define ST_REORDER_NO_CLOCK INT64_MIN

/* An event released (st_reorder_release). */
struct st_reorder_item {
    struct st_event ev; /* owned */
    int32_t partition;
    int64_t offset;
    int64_t clock; /* the partition's clock before it was pushed */
    int late;
    int skewed; /* ev.ts_us is the receive time, not the event's own */
};

/* 1 when an event time ts_us lies more than max_future_us after or more
 * than max_past_us before its receive time recv_us (a bound of 0 is off;
 * recv_us < 0, unknown, is never skewed). */
int st_reorder_skewed(int64_t ts_us, int64_t recv_us, int64_t max_future_us,
                      int64_t max_past_us);

struct st_reorder;

struct st_reorder *st_reorder_new(int64_t lateness_us);
void st_reorder_destroy(struct st_reorder *r); /* frees buffered events too */

/* Takes ownership of *ev (left empty). raw[0..rawlen) is the text ev was
 * parsed from (st_event_parse; ev's fields may differ from it only in
 * ts_us): not copied, it must stay valid until the next st_reorder_park,
 * which copies it if the event is still buffered. now_ms is a monotonic
 * clock. With skewed set, ev->ts_us already holds the receive time; the
 * event leaves at the next release and moves no watermark. */
void st_reorder_push(struct st_reorder *r, int32_t partition, int64_t offset,
                     struct st_event *ev, const char *raw, size_t rawlen, int64_t now_ms,
                     int skewed);

/* Parks every event pushed since the last park and still buffered: its
 * document is freed, its text (push's raw) copied; it is parsed again
 * (st_event_parse, ts_us as pushed) when it leaves. Call it at the end of
 * each batch, once the events that may leave have left, while the texts
 * pushed in it are still valid. Costs nothing for an event gone already.
 * While the buffer holds at most keep events, those events are kept
 * parsed instead (a drain at the default lateness buffers a few thousand:
 * parking them would parse each twice for little memory). Returns the
 * count parked. */
size_t st_reorder_park(struct st_reorder *r, size_t keep);

/* Drops the buffered event at (partition, offset), if any (it went to the
 * dead-letter topic). Returns 1 when one was dropped. */
int st_reorder_forget(struct st_reorder *r, int32_t partition, int64_t offset);

/* Records that offset was consumed without an event to buffer (an invalid
 * message), so that commits move past it. */
void st_reorder_note(struct st_reorder *r, int32_t partition, int64_t offset);

/* Moves into out (grown as needed; caller frees items with
 * st_reorder_item_fini and the array with free) every event that may leave:
 * late ones, those the watermark passed, and, for a partition that received
 * nothing for idle_ms, all of its events (0 disables). flush releases
 * everything. Items come out per partition in (ts, offset) order. At most
 * max leave (0: no bound; a partition's skewed events leave together, even
 * past it): the rest stay buffered, in order, for the next call (which
 * gives what one call would have given after them), so that a flush
 * or an idle partition does not parse every parked event at once (the end
 * of --drain at the default lateness held 900,000 events parsed). A parked
 * event is parsed again here; one whose text no longer parses (it did
 * when pushed: not seen) is a per-message error: logged, counted
 * (st_reorder_unparsed), left out of out (not detected). Returns the
 * count. */
size_t st_reorder_release(struct st_reorder *r, int flush, int64_t now_ms,
                          int64_t idle_ms, size_t max, struct st_reorder_item **out,
                          size_t *cap);

void st_reorder_item_fini(struct st_reorder_item *it);

/* The offset to commit for partition: the oldest buffered offset, or one
 * past the newest pushed when nothing is buffered; -1 when nothing was ever
 * pushed for it. */
int64_t st_reorder_commit_offset(const struct st_reorder *r, int32_t partition);

/* The commit point of partition: returns the offset to commit, as
 * st_reorder_commit_offset, and sets *clock to the partition's clock as of
 * that offset: the newest time of the events pushed before it, skewed ones
 * aside (what the watermark is made from), or ST_REORDER_NO_CLOCK. Exact
 * because a partition's events are pushed in offset order: the clock
 * before the oldest buffered event is the one it was pushed with. */
int64_t st_reorder_commit_point(const struct st_reorder *r, int32_t partition,
                                int64_t *clock);

/* partition was assigned, its committed offset carrying clock (from
 * st_reorder_commit_point): if the first event pushed (or offset noted)
 * for it is at offset or after (offsets that hold no message in between:
 * transaction markers, compaction; or the committed offset was out of
 * range, its events deleted: the best clock there is), the partition
 * starts with that clock, so its watermark, and which events are late, are
 * those of a process that never stopped. A first offset before it (a seek
 * back) starts without, as does a partition never resumed. Ignored for a
 * partition that holds events already. */
void st_reorder_resume(struct st_reorder *r, int32_t partition, int64_t offset,
                       int64_t clock);

/* Forgets a partition (revoked): its buffered events are dropped, the next
 * owner reads them again from the committed offset. Its slot is reused by
 * the next partition pushed. */
void st_reorder_drop(struct st_reorder *r, int32_t partition);

/* Events buffered, in all partitions. */
size_t st_reorder_buffered(const struct st_reorder *r);

/* Events parked now, in all partitions. */
size_t st_reorder_parked(const struct st_reorder *r);

/* Bytes the buffer holds from the allocator: its arrays (at their
 * capacity), the parked events' texts, and the arenas of the events not
 * parked (a walk of those pushed since the last park). */
size_t st_reorder_bytes(const struct st_reorder *r);

/* Parked events that did not parse again when released, since start. */
size_t st_reorder_unparsed(const struct st_reorder *r);

/* Partition slots allocated (used or free), to check that revoked slots are
 * reused. */
size_t st_reorder_slots(const struct st_reorder *r);

#endif
