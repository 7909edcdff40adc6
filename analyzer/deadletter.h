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
 * The producer is idempotent (acks=all). Records are kept until Kafka
 * acknowledges them: the caller commits offsets past a dead-lettered
 * message only after st_deadletter_flush returned 0, so a crash can
 * duplicate a record but never lose one.
 *
 * @locality: any thread. The analyzer's main thread queues records of
 * invalid messages, its store thread (store.c) records of refused ones and
 * flushes; a lock makes each call whole (a send waits for a flush in
 * progress). */
#ifndef ST_DEADLETTER_H
#define ST_DEADLETTER_H

#include <stddef.h>

#include <librdkafka/rdkafka.h>

#include "analyzer.h"

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

/* Waits up to timeout_ms until Kafka acknowledged every queued record;
 * records whose delivery failed are produced again. Returns 0 when none is
 * left, or -1 with errstr set (call again). */
int st_deadletter_flush(struct st_deadletter *d, int timeout_ms, char *errstr,
                        size_t errsz);

/* Records waiting for an acknowledgement. */
size_t st_deadletter_pending(struct st_deadletter *d);

#endif
