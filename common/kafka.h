/* kafka.h: librdkafka set-up shared by the collector, the analyzer and the
 * CLI. */
#ifndef ST_KAFKA_H
#define ST_KAFKA_H

#include <stddef.h>

#include <librdkafka/rdkafka.h>

/* A new librdkafka configuration with bootstrap.servers set, or NULL with
 * errstr set. Caller owns it (it is consumed by rd_kafka_new). */
rd_kafka_conf_t *st_kafka_conf_new(const char *brokers, char *errstr,
                                   size_t errsz);

/* librdkafka properties the operator passes through (security, mostly):
 * every "kafka.rdkafka.<name> = value" is handed to rd_kafka_conf_set as
 * <name>, and kafka.sasl.password_file names a file whose content becomes
 * sasl.password (so the secret is in no command line nor config file). */
struct st_kafka_props {
    char **names;         /* owned, n of them, in the order given */
    char **values;        /* owned */
    size_t n;
    char *password_file;  /* kafka.sasl.password_file: owned by the daemon's
                           * config table (st_conf_fini frees it) */
};

#define ST_KAFKA_PREFIX "kafka.rdkafka."

/* An st_conf_extra_fn (arg: struct st_kafka_props *): takes names that start
 * with "kafka.rdkafka." and returns 1 for any other. A name librdkafka does
 * not know, or a value it refuses, is refused here with librdkafka's own
 * error, so that start-up stops before anything connects. */
int st_kafka_props_parse(void *arg, const char *name, const char *value,
                         char *errstr, size_t errsz);

/* Applies the pass-through properties in the order given (a later one wins),
 * then the password file. Call it right after st_kafka_conf_new, before the
 * program's own settings, which therefore win (defaults the operator may
 * override go before it: st_kafka_conf_producer). Returns 0, or -1 with
 * errstr naming the property or the file; the password is never in
 * errstr. */
int st_kafka_props_apply(rd_kafka_conf_t *conf, const struct st_kafka_props *p,
                         char *errstr, size_t errsz);

/* Frees the pass-through list (not password_file). Accepts NULL. */
void st_kafka_props_fini(struct st_kafka_props *p);

/* For every error callback: when librdkafka reports that the broker refused
 * our credentials (_AUTHENTICATION) or that TLS failed (_SSL: a certificate
 * that does not verify against ssl.ca.location, a plaintext listener),
 * retrying cannot help and falling back is never done: logs why and ends the
 * process at once with status 78 (configuration). Returns for any other
 * error. Whatever was not yet acknowledged is left as after a crash (spool,
 * checkpoint and uncommitted offsets are replayed by the next start). */
void st_kafka_refused_exit(int err, const char *reason);

/* Every idempotent or transactional producer's configuration from the
 * operator's properties p (kafka.rdkafka.*, kafka.sasl.password_file),
 * applied after what we give each of them, so that the operator may
 * override it (tests/unit/test_kafka.c): one request in flight per broker
 * connection. librdkafka 2.0 (Debian 12's)
 * reports a batch that failed with NOT_LEADER as delivered once a later
 * batch to the same partition, sent meanwhile, was taken -- which a broker
 * does for a producer id it has no state of (a new one, on a partition
 * just made or just moved) -- though it is not in the log
 * ("implicitly acked"; README, failure model). With one request in
 * flight the later batch is not sent before the failure is known. The
 * collector's benchmark measured no cost (429-448k events/s against
 * 410-431k/s, three rounds each, docs/architecture.md "Session 22"). */
int st_kafka_conf_producer(rd_kafka_conf_t *conf, const struct st_kafka_props *p,
                           char *errstr, size_t errsz);

/* Sets one librdkafka property; errors name the property. */
int st_kafka_conf_set(rd_kafka_conf_t *conf, const char *name,
                      const char *value, char *errstr, size_t errsz);

/* Waits until every partition of topic answers a ListOffsets on its
 * leader, whoever leads it by then, within timeout_ms: 0, or -1 with
 * errstr naming the partition (kafka.c, wait_ready; st_kafka_ensure_topics
 * calls it for each topic). Returns by timeout_ms even while a leader it
 * asked is down. */
int st_kafka_wait_ready(rd_kafka_t *rk, const char *topic, int timeout_ms, char *errstr,
                        size_t errsz);

/* Creates each topic that does not exist yet, with partitions and
 * replication factor given. Existing topics are left as they are. Returns
 * once every partition of every topic answers on its leader (a topic just
 * made is not ready for a produce for a few tens of ms: kafka.c,
 * wait_ready), within timeout_ms: 0, or -1 with errstr naming the topic.
 * On a producer it serves rd_kafka_poll while it waits (error callbacks
 * run). */
int st_kafka_ensure_topics(rd_kafka_t *rk, const char *const *topics, int n,
                           int partitions, int replication, int timeout_ms,
                           char *errstr, size_t errsz);

/* The same for one topic with cleanup.policy=compact (the last value of a
 * key is kept for good). */
int st_kafka_ensure_compacted(rd_kafka_t *rk, const char *topic, int partitions,
                              int replication, int timeout_ms, char *errstr,
                              size_t errsz);

#endif
