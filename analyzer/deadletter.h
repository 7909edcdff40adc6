/* deadletter.h: the analyzer's dead-letter producer.
 *
 * A consumed message that will never be stored goes to the dead-letter
 * topic (kafka.topic.dlq, by default the collector's sandtrail.events.dlq)
 * as a sandtrail.dlq.v1 record: the reason code, the error (redacted, cut
 * to 1 KiB), where the
 * message was (topic, partition, offset), when the collector produced it,
 * and the message itself, redacted, then cut to dlq.raw_bytes and made
 * valid UTF-8. Two reasons come from the analyzer: one of the collector's
 * validation codes (a message in the events topic that is not a valid
 * event) and "store_refused" (PostgreSQL refused the event's row for its
 * data; the error holds PostgreSQL's message).
 *
 * Exactly once, a crash or not: a record is produced only in the Kafka
 * transaction that also commits the offset passing its message (KIP-98,
 * consume-transform-produce), so readers that read committed records
 * (librdkafka's default isolation.level) see it once the offset moved past
 * its message, and never a second time: a redo starts at that offset. Each
 * partition of the events topic has a transactional producer of its own
 * (transactional.id "sandtrail-dlq.<group>.<topic>.<partition>", made
 * when it is first needed): the partition's next owner takes the same id,
 * which aborts a transaction its crashed owner left open and fences a
 * zombie out; the consumer group's metadata fences an owner whose
 * generation is gone (KIP-447). Until a commit passes its message, a record
 * is queued here, in memory: a crash loses it, and the redo dead-letters
 * the message again.
 *
 * @locality: any thread. The analyzer's main thread queues records of
 * invalid messages, its store thread (store.c) records of refused ones and
 * commits; the main thread commits at a revoke and at the end; a lock makes
 * each call whole. */
#ifndef ST_DEADLETTER_H
#define ST_DEADLETTER_H

#include <signal.h>
#include <stddef.h>

#include <librdkafka/rdkafka.h>

#include "analyzer.h"
#include "consume.h"

#define ST_DEADLETTER_STORE_REFUSED "store_refused"

struct st_deadletter;

/* Creates the producer and creates the topic if it is missing (a warning
 * when Kafka cannot be reached yet). Returns NULL with errstr set. */
struct st_deadletter *st_deadletter_new(const struct st_analyzer_conf *conf,
                                        char *errstr, size_t errsz);
void st_deadletter_destroy(struct st_deadletter *d); /* accepts NULL */

/* Queues the record for msg (nothing of msg is kept). reason is one of the
 * ST_REASON_* codes or ST_DEADLETTER_STORE_REFUSED; error says why. */
void st_deadletter_send(struct st_deadletter *d, const rd_kafka_message_t *msg,
                        const char *reason, const char *error);

/* Commits offsets[i] for partitions[i] of the consumer's topic (with
 * clocks[i], as st_consumer_commit) and, in the same transaction, the
 * queued records of the messages each offset passes (offset < offsets[i]):
 * one transaction per partition that has such records, on its producer;
 * the other partitions' offsets the consumer commits. Records of messages
 * at or past their partition's offset stay queued for a later commit.
 * Returns 0 when every offset was committed; -1 with errstr when a
 * transaction was not (nothing of it committed: its records stay queued;
 * call again: the offsets may not be passed over, or the records would
 * wait on a later commit unbounded); 1 when only the consumer's own
 * commit failed (st_consumer_commit: not worth a retry, the events are
 * seen again), and when the assignment was lost (nothing is committed
 * then: the next owner redoes the messages, records included). A commit
 * or abort that Kafka's absence holds up is resumed while Kafka is away;
 * one whose outcome cannot be known or settled (a commit that failed
 * neither retriably nor abortably; a fenced producer: another analyzer
 * owns the partition, or Kafka aborted the transaction after
 * transaction.timeout.ms; *stop set while it waits) stops the process with
 * status 1, as after a lost assignment; a producer the kafka.rdkafka.*
 * settings make impossible, with status 78. A record is at most 512 KiB
 * (its raw message cut further when dlq.raw_bytes would pass that), so
 * Kafka's default size limits never refuse one. */
int st_deadletter_commit(struct st_deadletter *d, struct st_consumer *c,
                         const int32_t *partitions, const int64_t *offsets,
                         const int64_t *clocks, int n, const volatile sig_atomic_t *stop,
                         char *errstr, size_t errsz);

/* Partitions assigned: each one's transactional producer made and
 * initialised at once (init_transactions: what a crashed owner left open
 * is aborted, an older owner fenced), not at the partition's first
 * dead-letter commit. Until that abort, the offset a crashed owner sent
 * into its open transaction keeps the group's committed offset of the
 * partition unstable, and the consumer's fetch of it (read_committed)
 * waits, retried, until Kafka aborts the transaction after
 * transaction.timeout.ms (60 s): a store restarted after such a crash
 * resumed a minute late (test_roles: 81-95 s instead of about 20). The
 * inits run on a thread of their own (started at the first claim, joined
 * by st_deadletter_destroy), so that the assignment does not wait for
 * Kafka's transaction coordinator (seconds while it loads, up to 10 s a
 * partition while it is away) when no offset is unstable; the
 * consumer's read of the committed offsets waits for the aborts it needs
 * (consume.c's tell_committed, tried again while it times out). A partition
 * forgotten before its init, or claimed by an assignment since lost (c),
 * is not initialised: that would fence its next owner. An init that
 * Kafka's absence holds up is left to the first commit, as before; a
 * fatal one stops the process as there. A producer initialised here is
 * closed after (the partition's first commit makes it again): one kept
 * per partition was four threads and two connections each. Does not
 * block. c is used until st_deadletter_detach. */
void st_deadletter_claim(struct st_deadletter *d, struct st_consumer *c,
                         const int32_t *partitions, int n);

/* Before the consumer of the claims is destroyed: the claimer no longer
 * uses it, and initialises none of the partitions still claimed (waits
 * for an init in progress). NULL: nothing. */
void st_deadletter_detach(struct st_deadletter *d);

/* A partition taken away: its queued records are dropped (its next owner
 * redoes their messages) and its producer closed. */
void st_deadletter_forget(struct st_deadletter *d, int32_t partition);

/* Test hooks: made(arg) is called on the claimer's thread once each round's
 * producers are made and before any of them is initialised (no lock held),
 * done(arg) once the round's inits are over; either may be NULL. Set before
 * the first claim. */
void st_deadletter_on_claim_round(struct st_deadletter *d, void (*made)(void *arg),
                                  void (*done)(void *arg), void *arg);

/* Records queued, not yet committed (for tests and the log). */
size_t st_deadletter_queued(struct st_deadletter *d);

#endif
