/* rpipe.h: a Redis connection used as a pipeline.
 *
 * Stages queue commands, each with a callback for its reply; st_rpipe_exec
 * sends them all in one write and reads the replies in order, so a batch of
 * window updates costs one round trip. Callbacks see replies in the order
 * their commands were queued. */
#ifndef ST_RPIPE_H
#define ST_RPIPE_H

#include <stddef.h>
#include <stdint.h>

#include <hiredis/hiredis.h>

struct st_rpipe;

/* A reply callback: returns 0, or -1 when the reply is not what the stage
 * expects (the batch then fails and is retried). */
typedef int (*st_rpipe_cb)(const redisReply *r, void *arg);

/* Connects to url ("redis://[user[:password]@]host:port[/db]", user and
 * password percent-encoded) and logs in with AUTH when a password is given,
 * by the URL or, taking precedence, by password_file (may be NULL). Every
 * connection, and every reconnection, sends AUTH then checks the server
 * answers. Returns NULL with errstr set; errstr never holds the password. */
struct st_rpipe *st_rpipe_new(const char *url, const char *password_file, char *errstr,
                              size_t errsz);
void st_rpipe_destroy(struct st_rpipe *p);

/* The deadline of one round trip of st_rpipe_exec, from its first write
 * to its last reply, unless set (redis.round_trip_timeout_ms's default, main.c). */
#define ST_RPIPE_ROUND_TRIP_MS 30000

/* Sets that deadline (ms, > 0) for p's later execs. Each read or write of
 * the socket also waits at most 5 s (redisconn.h), but replies that come
 * one at a time, slowly, start that wait again on each: only the deadline
 * bounds a round trip of thousands of commands. */
void st_rpipe_set_round_trip_ms(struct st_rpipe *p, int64_t ms);

/* Queues one command (any number of arguments); argv strings are copied. cb may be NULL (the reply is
 * only checked for errors). */
void st_rpipe_cmd(struct st_rpipe *p, st_rpipe_cb cb, void *arg, int argc,
                  const char **argv);

/* Formats a command in the protocol's form into *cmd (NUL-terminated, free
 * with free: the bytes redisFormatCommandArgv would write); returns its
 * length. Cannot fail. */
size_t st_rpipe_format(int argc, const char **argv, char **cmd);

/* The same bytes appended to b (kept NUL-terminated); returns their length.
 * The checkpoints keep their commands end to end in one buffer this way,
 * with no allocation per command. */
struct st_buf;
size_t st_rpipe_format_buf(struct st_buf *b, int argc, const char **argv);

/* The same with each argument's length given (argvlen[i] bytes of
 * argv[i], which may hold NUL: a run's state, runblob.h); argvlen NULL:
 * strlen of each. */
size_t st_rpipe_format_buf_lens(struct st_buf *b, int argc, const char **argv,
                                const size_t *argvlen);

/* The same form built argument by argument, with no argv gathered first:
 * st_rpipe_format_head with the number of arguments, then that many
 * st_rpipe_format_arg, each one argument made of a[0 .. alen) followed by
 * a2[0 .. alen2) (alen2 0: a alone). b stays NUL-terminated. */
void st_rpipe_format_head(struct st_buf *b, size_t argc);
void st_rpipe_format_arg(struct st_buf *b, const char *a, size_t alen, const char *a2,
                         size_t alen2);

/* Queues a command already in the protocol's form (checkpoint.h), with no
 * callback. Not copied: cmd stays the caller's and must live until the
 * next st_rpipe_exec or st_rpipe_discard returns. */
void st_rpipe_formatted(struct st_rpipe *p, const char *cmd, size_t len);

/* Commands sent so far on p (every exec), for tests and logs. */
unsigned long st_rpipe_sent(const struct st_rpipe *p);

/* Connections made again, after one was lost, by any pipe of the process
 * since it started (the first connection of each pipe is not counted).
 * The run index reads it to learn that Redis may have restarted
 * (runidx.h). Any thread; an atomic read. */
unsigned long st_rpipe_reconnects(void);

/* Queues EVALSHA of a server-side script with numkeys keys followed by the
 * arguments: Redis hashes and compiles a script once, instead of on every
 * EVAL. body must outlive the pipeline (a string literal); it is loaded with
 * SCRIPT LOAD on each new connection. argv holds the keys and arguments. */
void st_rpipe_script(struct st_rpipe *p, st_rpipe_cb cb, void *arg, const char *body,
                     int numkeys, int argc, const char **argv);

/* Sends every queued command and runs the callbacks. A callback may queue
 * more commands (st_rpipe_cmd): they go in a round trip of their own once
 * this one's replies are all read, within the same exec, until none is
 * left (a load that reads more only when a first reply says there is
 * more: runwin.c). Returns 0, or -1 with errstr set; on error the queue is dropped and the connection is reopened
 * on the next exec. A round trip past its deadline (st_rpipe_set_round_trip_ms)
 * is such an error: errstr gives the commands' count, the replies read and
 * the time waited, never a key or value; the connection, whose replies may
 * still be coming, is closed (a MULTI not yet EXECed with it). A command Redis refuses is an error, also inside a
 * MULTI (an error element of EXEC's reply); MULTI's +OK and each queued
 * command's +QUEUED are replies like any other (a callback, when given,
 * sees them). */
int st_rpipe_exec(struct st_rpipe *p, char *errstr, size_t errsz);

/* Drops queued commands without sending them. */
void st_rpipe_discard(struct st_rpipe *p);

#endif
