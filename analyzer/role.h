/* role.h: what one analyzer process does (analyzer.role).
 *
 *   all     stores every event (events, evidence tree) and detects
 *           (findings, alert outbox), both in one transaction per batch
 *   store   stores only: events, evidence tree and checkpoints, dead-letter
 *           records of invalid and refused messages; no detector, no Redis
 *   detect  detects only: findings, finding_events and the alert outbox;
 *           no events rows, no evidence; invalid messages are counted and
 *           logged, not dead-lettered (the store role does that, once)
 *
 * A store and a detect analyzer read the same topic in two consumer
 * groups, each committing its own offsets, so that detection never waits
 * for storage (docs/architecture.md, "Two roles"). Which sink parts a
 * role writes is listed once, in sink.c. */
#ifndef ST_ROLE_H
#define ST_ROLE_H

enum st_role { ST_ROLE_ALL, ST_ROLE_STORE, ST_ROLE_DETECT };

/* The role named name ("all", "store", "detect"); -1 for any other name. */
int st_role_parse(const char *name);

/* The name of a role (static string). */
const char *st_role_name(enum st_role role);

/* 1 when the role writes events and evidence / runs the detectors. */
int st_role_stores(enum st_role role);
int st_role_detects(enum st_role role);

/* The group an analyzer of any role uses unless told otherwise. A store or
 * detect analyzer refuses to start in it: the all role's offsets there
 * would pass events the other role never saw. */
#define ST_ROLE_DEFAULT_GROUP "sandtrail-analyzer"

#endif
