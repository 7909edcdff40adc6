/* world.h: isolated worlds for integration tests.
 *
 * Each world has its own PostgreSQL database, Kafka topics, consumer group
 * and Redis key prefix on the real services that scripts/services starts,
 * so tests neither see nor disturb each other. */
#ifndef ST_TEST_WORLD_H
#define ST_TEST_WORLD_H

#include <check.h>
#include <librdkafka/rdkafka.h>

#include <cjson/cJSON.h>

#define BIN SANDTRAIL_BINARY_DIR

struct world {
    char name[64];
    char dsn[700];
    char topic[96];
    char dlq[96];
};

/* The first line where x and y differ, cut to fit a Check message:
 * "line N: <xname> "..." vs "..."". */
void world_first_difference(const char *xname, const char *x, const char *y, char *out,
                            size_t outsz);

/* Reads the services' settings from the environment; -1 when absent. */
int world_setup(void);

/* Creates the world's database; tag is part of every name. */
void world_init(struct world *w, const char *tag);
void world_drop(struct world *w);

/* Runs a shell command (printf-style) with the world's settings, consumer
 * group and Redis prefix in its environment; returns its exit status. */
int run(const struct world *w, const char *group, const char *prefix,
        const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Every row of a query, '|' between columns, '\n' after each row. Caller
 * frees. */
char *rows(const char *dsn, const char *sql);

/* Waits up to seconds for the world's database to hold table (a daemon
 * started in the background migrates it first); fails the test after. */
void world_wait_table(const struct world *w, const char *table, int seconds);

/* Every message of a topic from the beginning, '\n' after each; *count
 * gets their number. Caller frees. */
char *topic_dump(const char *topic, int *count);

/* A producer of the services' Kafka, topic made first (partitions, once
 * every partition answers: st_kafka_ensure_topics); fails the test
 * otherwise. Caller destroys it. */
rd_kafka_t *world_topic_producer(const char *topic, int partitions);

/* What a shell command prints on stdout. Caller frees. */
char *world_sh(const char *cmd);

/* The same with the command made printf-style. Caller frees. */
char *world_shf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A whole file ("" when it cannot be read). Caller frees. */
char *world_slurp(const char *path);

/* The contents of a file as an integer (0 when unreadable). */
int world_read_int(const char *path);

/* A free TCP port on 127.0.0.1 (free when asked; the kernel's choice, so
 * that tests running at the same time never share one). Every port a test
 * listens on, or points a program at as "where nothing listens", comes from
 * here: a fixed port makes the test unsafe to run beside others. */
int world_free_port(void);

/* n distinct free ports (n <= 64), e.g. a private Kafka's broker and
 * controller ports. */
void world_free_ports(int *ports, int n);

/* A webhook receiver (tests/integration/alert_receiver.py: records every
 * request, checks signatures and the schema) in /tmp/st-alerts-PID-TAG;
 * opts are its options. */
struct world_receiver {
    char dir[160];
    int port;
    int pid;
};
void world_receiver_start(struct world_receiver *r, const char *tag, const char *opts);
void world_receiver_stop(struct world_receiver *r); /* and removes its folder */

/* Every request so far, one JSON object each. Caller deletes. */
cJSON *world_receiver_requests(const struct world_receiver *r);

/* An Alertmanager of the test's own on a free port, started by
 * scripts/services with the shipped configuration, routing to
 * webhook_port. */
struct world_am {
    char run[160];
    int port;
};
void world_am_start(struct world_am *a, int webhook_port);
void world_am_stop(struct world_am *a); /* and removes its data */

/* scripts/services VERB alertmanager for a's instance; its exit status. */
int world_am_services(const struct world_am *a, int webhook_port, const char *verb);

/* Runs the suite; the process's exit status. */
int world_run(Suite *s);

#endif
