/* consume.h: the analyzer's Kafka consumer.
 *
 * Joins a consumer group (cooperative-sticky assignment), hands out
 * messages in batches and commits offsets only when asked: the caller commits
 * a batch after the PostgreSQL transaction holding its rows has committed.
 * It also tracks, per assigned partition, whether the end of the partition
 * was reached, so that --drain knows when it has caught up. */
#ifndef ST_CONSUME_H
#define ST_CONSUME_H

#include <signal.h>
#include <stddef.h>

#include <librdkafka/rdkafka.h>

struct st_analyzer_conf;
struct st_consumer;

struct st_consumer *st_consumer_new(const struct st_analyzer_conf *conf,
                                    char *errstr, size_t errsz);

/* Leaves the group (without committing anything more) and frees. Accepts
 * NULL. */
void st_consumer_destroy(struct st_consumer *c);

/* Fills msgs with up to max messages, waiting at most timeout_ms in all;
 * when max are polled, at least max more wait in the assigned partitions
 * (st_consumer_backlog) and the last one polled was written to Kafka at
 * least behind_ms ago (by its timestamp; one without: at once), the
 * consumer is behind: the poll goes on up to behind_max (msgs holds that
 * many; behind_max <= max: never). So an analyzer near real time keeps
 * its batches, and its latency, small; one working through a backlog
 * writes fewer, larger transactions. A caught-up consumer returns what it
 * has at once. The caller destroys each message with
 * rd_kafka_message_destroy. Returns the count, or -1 on a fatal consumer
 * error. */
int st_consumer_poll_batch(struct st_consumer *c, rd_kafka_message_t **msgs,
                           int max, int behind_max, int64_t behind_ms, int timeout_ms);

/* Commits, synchronously, offsets[i] for partitions[i] of the subscribed
 * topic (entries with a negative offset are skipped), each with clocks[i],
 * the partition's clock as of that offset (reorder.h), in the offset's
 * metadata (clocks NULL, or an entry INT64_MIN: none), so that the clock is
 * committed exactly when its offset is. Returns 0, or -1 (the events will
 * then be seen again: processing is idempotent). */
int st_consumer_commit(struct st_consumer *c, const int32_t *partitions,
                       const int64_t *offsets, const int64_t *clocks, int n);

/* The list st_consumer_commit commits: offsets[i] for partitions[i], those
 * with a negative offset left out, each with its clock in the metadata.
 * The caller destroys it. */
rd_kafka_topic_partition_list_t *st_consumer_offsets(const struct st_consumer *c,
                                                     const int32_t *partitions,
                                                     const int64_t *offsets,
                                                     const int64_t *clocks, int n);

/* The group's metadata (generation, member), which a transaction that
 * commits offsets of this consumer sends along (KIP-447): the caller
 * destroys it (rd_kafka_consumer_group_metadata_destroy). */
rd_kafka_consumer_group_metadata_t *st_consumer_group_metadata(const struct st_consumer *c);

/* Called, inside st_consumer_poll_batch and before any message of it, for
 * each partition assigned (after st_consumer_assign_cb) whose committed offset carries a clock (the
 * metadata st_consumer_commit wrote): the offset the partition starts at
 * unless it is out of range, and the clock. A partition with no committed
 * offset, or one committed without a clock (by a release before clocks, or
 * reset by kafka-consumer-groups.sh), is not reported. */
typedef void (*st_consumer_resume_cb)(int32_t partition, int64_t offset, int64_t clock,
                                      void *arg);
void st_consumer_on_resume(struct st_consumer *c, st_consumer_resume_cb cb, void *arg);

/* The process's stop flag (a signal handler's): the read of an
 * assignment's committed offsets, tried again while it times out (up to
 * 70 s: an open transaction holds one of them until aborted), gives up
 * once it is set. */
void st_consumer_on_stop(struct st_consumer *c, const volatile sig_atomic_t *stop);

/* Called, inside st_consumer_poll_batch, for each partition taken away;
 * that batch then holds none of its messages. lost: the assignment was
 * lost, not handed back (this consumer was out of its group longer than
 * kafka.session.timeout.ms): another consumer may own the partition
 * already, so nothing of it may be written or committed any more. */
typedef void (*st_consumer_revoke_cb)(int32_t partition, int lost, void *arg);
void st_consumer_on_revoke(struct st_consumer *c, st_consumer_revoke_cb cb, void *arg);

/* Called, inside st_consumer_poll_batch, with the n partitions newly
 * assigned, before any message of them is fetched (the analyzer claims
 * their owner epochs: fence.h). */
typedef void (*st_consumer_assign_cb)(const int32_t *parts, int n, void *arg);
void st_consumer_on_assign(struct st_consumer *c, st_consumer_assign_cb cb, void *arg);

/* 1 once librdkafka considers the assignment lost (see
 * st_consumer_revoke_cb), and from the revoke that reported a loss on, for
 * good (librdkafka clears its own flag with that revoke's unassign, before
 * the batches still in flight reach their checkpoint; the analyzer stops
 * after a loss). Any thread: the store's committer asks it before each
 * checkpoint. */
int st_consumer_assignment_lost(struct st_consumer *c);

/* The partitions currently assigned; returns their count (at most max). */
int st_consumer_partitions(const struct st_consumer *c, int32_t *out, int max);

/* Messages in partition after offset, from the high watermark the last
 * fetch saw (no round trip); -1 when unknown. */
int64_t st_consumer_lag(const struct st_consumer *c, int32_t partition, int64_t offset);

/* Messages waiting in the assigned partitions after the last one polled
 * from each, from the high watermarks the last fetches saw (no round trip;
 * a partition nothing was polled from yet counts none). */
int64_t st_consumer_backlog(const struct st_consumer *c);

/* 1 when partitions are assigned and each has reached its end. */
int st_consumer_drained(const struct st_consumer *c);

/* The subscribed topic's partition count, read from Kafka's metadata at
 * the last assignment (the run index compares it with the count it
 * recorded: runidx.h); -1 before the first. */
int32_t st_consumer_topic_partitions(const struct st_consumer *c);

/* Number of partitions currently assigned. */
int st_consumer_assigned(const struct st_consumer *c);

#endif
