/* collector.h: the collector's configuration (one table, in main.c). */
#ifndef ST_COLLECTOR_CONF_H
#define ST_COLLECTOR_CONF_H

#include <stdint.h>

#include "kafka.h"

struct st_collector_conf {
    char *brokers;
    struct st_kafka_props kafka; /* kafka.rdkafka.*, kafka.sasl.password_file */
    char *topic_events;
    char *topic_dlq;
    int64_t topic_partitions;
    int64_t topic_replication;
    int64_t delivery_timeout_ms;
    int64_t linger_ms;
    int64_t queue_max_messages; /* kafka.queue.max_messages */
    int64_t queue_max_kbytes;
    int64_t message_max_bytes; /* kafka.message_max_bytes: larger is too_large */
    int64_t max_line_bytes;
    int64_t workers;       /* input.workers: 0 one per CPU */
    int64_t dlq_raw_bytes;
    char *format;          /* input.format: a decoder's name */
    char *source_name;     /* input.source_name */
    char *platform;        /* input.platform */
    char *key_file;        /* redact.key_file */
    char *canaries_file;   /* redact.canaries_file */
    int64_t fp_chars;      /* redact.fingerprint_chars */
    int64_t single_pass;   /* input.single_pass: native lines without a tree */
    char *fault_rule_off;  /* fault.redact_rule_off (tests only) */
    char *checkpoint;      /* input.checkpoint (--follow) */
    int64_t checkpoint_lines;
    int64_t poll_ms;
    char *rotated_pattern;  /* input.rotated_pattern (--follow) */
    int64_t rotate_grace_ms;
    char *metrics_listen;
    char *log_level;  /* log.level */
    char *log_format; /* log.format */
    char *http_listen;      /* http.listen (--listen) */
    char *http_tokens_file;
    char *http_tls_cert;    /* http.tls_cert_file: HTTPS only when set */
    char *http_tls_key;     /* http.tls_key_file */
    int64_t http_max_body;
    int64_t http_concurrency;    /* http.concurrency: requests processed at once */
    int64_t http_max_conns;      /* http.max_connections */
    int64_t http_max_conns_ip;   /* http.max_connections_per_ip */
    int64_t http_header_ms;      /* http.header_timeout_ms */
    int64_t http_request_ms;     /* http.request_timeout_ms */
    int64_t http_idle_s;         /* http.idle_timeout_s */
    int64_t http_max_errors;     /* http.max_errors */
    int64_t http_max_dlq;        /* http.max_dlq_records */
    char *spool_dir;        /* spool.dir */
    int64_t spool_max_bytes;
    int64_t spool_min_free_bytes;
    char *spool_registry;   /* spool.registry: NULL default path, "" off */
    char *topic_credentials;    /* kafka.topic.credentials: "" lineage off */
    int64_t lineage_poll_ms;
    int64_t lineage_catchup_ms;
};

#endif
