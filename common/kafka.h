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

/* Sets one librdkafka property; errors name the property. */
int st_kafka_conf_set(rd_kafka_conf_t *conf, const char *name,
                      const char *value, char *errstr, size_t errsz);

/* Creates each topic that does not exist yet, with partitions and
 * replication factor given. Existing topics are left as they are. Returns 0,
 * or -1 with errstr naming the topic. */
int st_kafka_ensure_topics(rd_kafka_t *rk, const char *const *topics, int n,
                           int partitions, int replication, int timeout_ms,
                           char *errstr, size_t errsz);

/* The same for one topic with cleanup.policy=compact (the last value of a
 * key is kept for good). */
int st_kafka_ensure_compacted(rd_kafka_t *rk, const char *topic, int partitions,
                              int replication, int timeout_ms, char *errstr,
                              size_t errsz);

#endif
