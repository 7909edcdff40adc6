/* lineage.h: issued credentials shared between collectors.
 *
 * A collector that accepts a broker's token_issue carrying the credential
 * (identity.credential, fingerprinted by the redactor into
 * identity.credential_fp) adds the fingerprint to its set at once and
 * produces {"fp","len","credential_id","expires","source"} to the compacted
 * topic kafka.topic.credentials (key: the fingerprint). Every collector reads
 * that topic from the beginning: at start-up to its end (at most
 * lineage.catchup_ms) before any line is accepted, then in a thread of its
 * own, into the same set, which every redactor searches (credset.h). The
 * values never leave the collector; only fingerprints and lengths do.
 *
 * Threading: the consumer handle belongs to the lineage thread once
 * st_lineage_start returns; st_lineage_learn may be called from any accept
 * worker (the set has its lock, librdkafka's producer is thread-safe). */
#ifndef ST_LINEAGE_H
#define ST_LINEAGE_H

#include <stddef.h>

struct st_collector_conf;
struct st_credset;
struct st_event;
struct st_lineage;

/* Creates the topic if missing, reads it to its end and starts the thread.
 * *out is NULL (and 0 returned) when kafka.topic.credentials is empty:
 * lineage is off. Kafka not answering is not an error: a warning says the
 * set is incomplete and the thread keeps trying. Returns -1 with errstr set
 * when a Kafka client cannot be configured. */
int st_lineage_start(const struct st_collector_conf *conf, struct st_lineage **out,
                     char *errstr, size_t errsz);

/* Stops the thread and waits (at most 5 s) for the records produced to be
 * delivered. Accepts NULL. */
void st_lineage_stop(struct st_lineage *l);

/* The set the redactors search; shared, owned by l. NULL when l is. */
const struct st_credset *st_lineage_set(const struct st_lineage *l);

/* A credential of credlen bytes, fingerprint fp, was issued (credential_id,
 * expires and source may be NULL): added to the set and, when new, produced
 * to the topic. Returns 1 when new, 0 when known, -1 when it cannot be
 * followed (length out of range, see credset.h). Thread-safe. */
int st_lineage_learn(struct st_lineage *l, const char *fp, size_t credlen,
                     const char *credential_id, const char *expires, const char *source);

/* An event accepted (and allowed its source): when it is a broker's
 * token_issue that handed over a credential of credlen bytes (credlen as
 * st_accept_issued_len gives it), its identity.credential_fp is learned as
 * above. Accepts l NULL (lineage off). Thread-safe. */
void st_lineage_note(struct st_lineage *l, const struct st_event *ev, size_t credlen);

#endif
