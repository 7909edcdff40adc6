/* collector.h: the collector's configuration (one table, in main.c). */
#ifndef ST_COLLECTOR_CONF_H
#define ST_COLLECTOR_CONF_H

#include <stdint.h>

struct st_collector_conf {
    char *brokers;
    char *topic_events;
    char *topic_dlq;
    int64_t topic_partitions;
    int64_t topic_replication;
    int64_t delivery_timeout_ms;
    int64_t linger_ms;
    int64_t queue_max_messages; /* kafka.queue.max_messages */
    int64_t queue_max_kbytes;
    int64_t max_line_bytes;
    int64_t workers;       /* input.workers: 0 one per CPU */
    int64_t dlq_raw_bytes;
    char *format;          /* input.format: a decoder's name */
    char *source_name;     /* input.source_name */
    char *platform;        /* input.platform */
    char *key_file;        /* redact.key_file */
    char *canaries_file;   /* redact.canaries_file */
    int64_t fp_chars;      /* redact.fingerprint_chars */
    char *fault_rule_off;  /* fault.redact_rule_off (tests only) */
    char *checkpoint;      /* input.checkpoint (--follow) */
    int64_t checkpoint_lines;
    int64_t poll_ms;
    char *metrics_listen;
    char *log_level;  /* log.level */
    char *log_format; /* log.format */
    char *http_listen;      /* http.listen (--listen) */
    char *http_tokens_file;
    int64_t http_max_body;
    char *spool_dir;        /* spool.dir */
    int64_t spool_max_bytes;
};

#endif
