/* rpipe.c: pipelined Redis commands with per-reply callbacks (see rpipe.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <openssl/sha.h>

#include "buf.h"
#include "log.h"
#include "redisconn.h"
#include "rpipe.h"
#include "timeutil.h"

/* The socket's timeout (redisconn.c): each read or write waits at most
 * this long. A round trip as a whole is bounded by round_trip_ms. */
#define CALL_TIMEOUT_MS 5000

struct pending {
    st_rpipe_cb cb;
    void *arg;
    int borrowed; /* the command is the caller's (st_rpipe_formatted): not freed */
};

struct script {
    const char *body; /* not copied */
    char sha[41];
};

/* Connections made again after one was lost, by any pipe of the process
 * (st_rpipe_reconnects). */
static _Atomic unsigned long reconnects;

struct st_rpipe {
    redisContext *rc;
    int connected_once; /* a later connection is a reconnection */
    struct script scripts[16];
    int nscripts;
    struct st_redis_target target; /* where, and the login (redisconn.h) */
    /* Commands are formatted when queued and written at exec time. */
    char **cmds;
    size_t *cmdlens;
    struct pending *pend;
    size_t n, cap;
    unsigned long sent; /* commands sent, ever (tests: no command per event) */
    int64_t round_trip_ms; /* st_rpipe_set_round_trip_ms */
    int sock_ms;           /* the socket's timeout now (fit_timeout) */
};

static int rpipe_connect(struct st_rpipe *p, char *errstr, size_t errsz)
{
    if (p->rc)
        redisFree(p->rc);
    if (!(p->rc = st_redis_connect(&p->target, CALL_TIMEOUT_MS, NULL, errstr, errsz)))
        return -1;
    p->sock_ms = CALL_TIMEOUT_MS;
    if (p->connected_once)
        reconnects++;
    p->connected_once = 1;
    /* a restarted Redis has forgotten them: load before any EVALSHA */
    for (int i = 0; i < p->nscripts; i++) {
        redisReply *r = redisCommand(p->rc, "SCRIPT LOAD %s", p->scripts[i].body);
        int ok = r && r->type == REDIS_REPLY_STRING;
        if (r)
            freeReplyObject(r);
        if (!ok) {
            snprintf(errstr, errsz, "could not load a script into Redis at \"%s:%d\"",
                     p->target.host, p->target.port);
            redisFree(p->rc);
            p->rc = NULL;
            return -1;
        }
    }
    return 0;
}

struct st_rpipe *st_rpipe_new(const char *url, const char *password_file, char *errstr,
                              size_t errsz)
{
    struct st_rpipe *p = st_calloc(1, sizeof(*p));
    p->round_trip_ms = ST_RPIPE_ROUND_TRIP_MS;
    if (st_redis_target_parse(&p->target, url, password_file, errstr, errsz) ||
        rpipe_connect(p, errstr, errsz)) {
        st_rpipe_destroy(p);
        return NULL;
    }
    return p;
}

void st_rpipe_destroy(struct st_rpipe *p)
{
    if (!p)
        return;
    st_rpipe_discard(p);
    if (p->rc)
        redisFree(p->rc);
    free(p->cmds);
    free(p->cmdlens);
    free(p->pend);
    st_redis_target_fini(&p->target);
    free(p);
}

static void queue(struct st_rpipe *p, st_rpipe_cb cb, void *arg, char *cmd, size_t n)
{
    if (p->n == p->cap) {
        p->cap = p->cap ? p->cap * 2 : 256;
        p->cmds = st_realloc(p->cmds, p->cap * sizeof(*p->cmds));
        p->cmdlens = st_realloc(p->cmdlens, p->cap * sizeof(*p->cmdlens));
        p->pend = st_realloc(p->pend, p->cap * sizeof(*p->pend));
    }
    p->cmds[p->n] = cmd;
    p->cmdlens[p->n] = n;
    p->pend[p->n].cb = cb;
    p->pend[p->n].arg = arg;
    p->pend[p->n].borrowed = 0;
    p->n++;
}

/* "<c><v>\r\n" at p (c: '*' or '$'); returns the bytes written. */
static size_t resp_head(char *p, char c, size_t v)
{
    char digits[24];
    size_t n = 0, k = 0;
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    p[k++] = c;
    while (n)
        p[k++] = digits[--n];
    p[k++] = '\r';
    p[k++] = '\n';
    return k;
}

/* The protocol's form written here, not by redisFormatCommandArgv: its
 * sprintf per argument was the largest cost of a checkpoint. */
size_t st_rpipe_format_buf(struct st_buf *b, int argc, const char **argv)
{
    return st_rpipe_format_buf_lens(b, argc, argv, NULL);
}

size_t st_rpipe_format_buf_lens(struct st_buf *b, int argc, const char **argv,
                                const size_t *argvlen)
{
    size_t small[32] = {0};
    int heap = argc > 32;
    size_t *lens = heap ? st_malloc((size_t)argc * sizeof(*lens)) : small;
    size_t total = 24 + 3;

    for (int i = 0; i < argc; i++) {
        lens[i] = argvlen ? argvlen[i] : strlen(argv[i]);
        total += 24 + 3 + lens[i] + 2;
    }
    st_buf_reserve(b, total);
    char *out = b->data + b->len;
    size_t at = resp_head(out, '*', (size_t)argc);
    for (int i = 0; i < argc; i++) {
        at += resp_head(out + at, '$', lens[i]);
        memcpy(out + at, argv[i], lens[i]);
        at += lens[i];
        out[at++] = '\r';
        out[at++] = '\n';
    }
    out[at] = '\0';
    b->len += at;
    if (heap)
        free(lens);
    return at;
}

void st_rpipe_format_head(struct st_buf *b, size_t argc)
{
    st_buf_reserve(b, 24 + 3);
    b->len += resp_head(b->data + b->len, '*', argc);
    b->data[b->len] = '\0';
}

void st_rpipe_format_arg(struct st_buf *b, const char *a, size_t alen, const char *a2,
                         size_t alen2)
{
    st_buf_reserve(b, 24 + 3 + alen + alen2 + 2);
    char *out = b->data + b->len;
    size_t at = resp_head(out, '$', alen + alen2);
    memcpy(out + at, a, alen);
    at += alen;
    if (alen2) {
        memcpy(out + at, a2, alen2);
        at += alen2;
    }
    out[at++] = '\r';
    out[at++] = '\n';
    out[at] = '\0';
    b->len += at;
}

size_t st_rpipe_format(int argc, const char **argv, char **cmd)
{
    struct st_buf b;
    st_buf_init(&b);
    size_t n = st_rpipe_format_buf(&b, argc, argv);
    *cmd = b.data; /* ours now */
    return n;
}

void st_rpipe_cmd(struct st_rpipe *p, st_rpipe_cb cb, void *arg, int argc,
                  const char **argv)
{
    char *cmd;
    size_t n = st_rpipe_format(argc, argv, &cmd);
    queue(p, cb, arg, cmd, n);
}

void st_rpipe_formatted(struct st_rpipe *p, const char *cmd, size_t len)
{
    queue(p, NULL, NULL, (char *)cmd, len);
    p->pend[p->n - 1].borrowed = 1;
}

unsigned long st_rpipe_reconnects(void)
{
    return reconnects;
}

void st_rpipe_set_round_trip_ms(struct st_rpipe *p, int64_t ms)
{
    p->round_trip_ms = ms;
}

unsigned long st_rpipe_sent(const struct st_rpipe *p)
{
    return p->sent;
}

void st_rpipe_script(struct st_rpipe *p, st_rpipe_cb cb, void *arg, const char *body,
                     int numkeys, int argc, const char **argv)
{
    struct script *sc = NULL;
    for (int i = 0; i < p->nscripts && !sc; i++)
        if (p->scripts[i].body == body)
            sc = &p->scripts[i];
    if (!sc) {
        unsigned char md[SHA_DIGEST_LENGTH];
        if (p->nscripts == 16)
            st_fatal("more than 16 Redis scripts");
        sc = &p->scripts[p->nscripts++];
        sc->body = body;
        SHA1((const unsigned char *)body, strlen(body), md);
        for (int i = 0; i < SHA_DIGEST_LENGTH; i++)
            snprintf(sc->sha + 2 * i, 3, "%02x", md[i]);
        /* loaded now on this connection, and on every reconnect */
        if (p->rc) {
            redisReply *r = redisCommand(p->rc, "SCRIPT LOAD %s", body);
            if (r)
                freeReplyObject(r);
        }
    }
    const char *full[32];
    char nk[8];
    if (argc + 3 > 32)
        st_fatal("redis script with %d arguments", argc);
    snprintf(nk, sizeof(nk), "%d", numkeys);
    full[0] = "EVALSHA";
    full[1] = sc->sha;
    full[2] = nk;
    for (int i = 0; i < argc; i++)
        full[3 + i] = argv[i];
    st_rpipe_cmd(p, cb, arg, argc + 3, full);
}

void st_rpipe_discard(struct st_rpipe *p)
{
    for (size_t i = 0; i < p->n; i++)
        if (!p->pend[i].borrowed)
            free(p->cmds[i]);
    p->n = 0;
}

/* The socket's timeout lowered so that the next read or write ends by
 * deadline (st_time_mono_ms): the per-call timeout alone does not bound a
 * round trip, as each reply that trickles in (a slow Redis answers a
 * MULTI's +QUEUED one by one) starts it again. Set only when it changes:
 * no system call while more than CALL_TIMEOUT_MS is left. Returns 0, or
 * -1 when the deadline has passed. */
static int fit_timeout(struct st_rpipe *p, int64_t deadline)
{
    int64_t left = deadline - st_time_mono_ms();
    if (left <= 0)
        return -1;
    int ms = left < CALL_TIMEOUT_MS ? (int)left : CALL_TIMEOUT_MS;
    if (ms != p->sock_ms) {
        struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
        /* hiredis marks the connection failed when it cannot set it
         * (every later read fails): the exec fails as on a lost
         * connection, which drops it */
        if (redisSetTimeout(p->rc, tv) != REDIS_OK)
            return -1;
        p->sock_ms = ms;
    }
    return 0;
}

/* Writes every queued command to the socket, from where it lies, the
 * commands that lie end to end (a checkpoint's) in one span: hiredis's
 * redisAppendFormattedCommand would copy them all into its output buffer
 * (grown by reallocs) and, on each partial write of a large pipeline, move
 * what is left to the buffer's front (sdsrange): a checkpoint of a few MB
 * was copied over and over (docs/architecture.md, "Where the analyzer's
 * memory goes"). The bytes on the wire are the same; hiredis's output
 * buffer stays empty, so redisGetReply only reads. The socket is blocking,
 * with the connection's timeout (redisconn.c): a write that times out is a
 * connection error, as in hiredis; so is a connection Redis closed
 * (MSG_NOSIGNAL: no SIGPIPE), and so is the round trip's deadline passed
 * (fit_timeout). Returns 0, or -1 with errno set. */
static int send_cmds(struct st_rpipe *p, int64_t deadline)
{
    struct iovec iov[64];
    size_t i = 0;
    while (i < p->n) {
        int niov = 0;
        while (i < p->n && niov < (int)(sizeof(iov) / sizeof(iov[0]))) {
            iov[niov].iov_base = p->cmds[i];
            iov[niov].iov_len = p->cmdlens[i];
            /* the commands after it that follow it in memory: one span */
            for (i++; i < p->n && p->cmds[i] == (char *)iov[niov].iov_base +
                                                     iov[niov].iov_len;
                 i++)
                iov[niov].iov_len += p->cmdlens[i];
            niov++;
        }
        struct iovec *v = iov;
        while (niov > 0) {
            struct msghdr msg = {.msg_iov = v, .msg_iovlen = (size_t)niov};
            if (fit_timeout(p, deadline)) {
                errno = ETIMEDOUT;
                return -1;
            }
            /* MSG_NOSIGNAL: a connection Redis closed is an error to retry,
             * not a SIGPIPE */
            ssize_t w = sendmsg(p->rc->fd, &msg, MSG_NOSIGNAL);
            if (w < 0) {
                if (errno == EINTR)
                    continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK)
                    errno = ETIMEDOUT;
                return -1;
            }
            if (w == 0) {
                errno = EPIPE;
                return -1;
            }
            size_t left = (size_t)w;
            while (niov > 0 && left >= v->iov_len) {
                left -= v->iov_len;
                v++;
                niov--;
            }
            if (niov > 0) {
                v->iov_base = (char *)v->iov_base + left;
                v->iov_len -= left;
            }
        }
    }
    return 0;
}

/* The next reply into *r, as redisGetReply (hiredis's output buffer is
 * empty: send_cmds), each read of the socket ending by deadline. Returns
 * 0, or -1 (the connection's error set, or the deadline passed). */
static int read_reply(struct st_rpipe *p, int64_t deadline, redisReply **r)
{
    void *aux = NULL;
    for (;;) {
        if (redisGetReplyFromReader(p->rc, &aux) != REDIS_OK)
            return -1;
        if (aux) {
            *r = aux;
            return 0;
        }
        if (fit_timeout(p, deadline) || redisBufferRead(p->rc) != REDIS_OK)
            return -1;
    }
}

/* The commands [0, k) of the queue dropped (sent and answered), those
 * queued after them -- by the callbacks of that round -- moved to the
 * front. */
static void drop_front(struct st_rpipe *p, size_t k)
{
    for (size_t i = 0; i < k; i++)
        if (!p->pend[i].borrowed)
            free(p->cmds[i]);
    memmove(p->cmds, p->cmds + k, (p->n - k) * sizeof(*p->cmds));
    memmove(p->cmdlens, p->cmdlens + k, (p->n - k) * sizeof(*p->cmdlens));
    memmove(p->pend, p->pend + k, (p->n - k) * sizeof(*p->pend));
    p->n -= k;
}

int st_rpipe_exec(struct st_rpipe *p, char *errstr, size_t errsz)
{
    size_t i = 0, round = 0;
    int rc = -1;
    int64_t t0 = 0;

    if (p->n == 0)
        return 0;
again:
    if (!p->rc && rpipe_connect(p, errstr, errsz))
        goto out;
    /* this round's commands: what its callbacks queue goes after them, to
     * a round of its own */
    round = p->n;
    i = 0; /* (replies read: the error messages say it) */
    p->sent += round;
    t0 = st_time_mono_ms();
    int64_t deadline = t0 + p->round_trip_ms;
    if (send_cmds(p, deadline) != 0) {
        if (st_time_mono_ms() >= deadline)
            goto late;
        snprintf(errstr, errsz, "Redis at \"%s:%d\": %s", p->target.host, p->target.port,
                 strerror(errno));
        redisFree(p->rc);
        p->rc = NULL;
        goto out;
    }
    for (i = 0; i < round; i++) {
        redisReply *r = NULL;
        if (read_reply(p, deadline, &r) != 0 || !r) {
            if (st_time_mono_ms() >= deadline)
                goto late;
            goto conn_error;
        }
        /* an EXEC's reply holds its commands' errors inside the array (a
         * command of a MULTI that Redis queued and then refused, as a
         * WRONGTYPE): refused all the same. No other reply holds an error
         * element. */
        const redisReply *err = r->type == REDIS_REPLY_ERROR ? r : NULL;
        for (size_t e = 0; !err && r->type == REDIS_REPLY_ARRAY && e < r->elements; e++)
            if (r->element[e] && r->element[e]->type == REDIS_REPLY_ERROR)
                err = r->element[e];
        if (err) {
            snprintf(errstr, errsz, "Redis refused a command: %s", err->str);
            freeReplyObject(r);
            /* the stream of replies is still in step, but the batch is not
             * whole: drop the connection so nothing half-read remains */
            redisFree(p->rc);
            p->rc = NULL;
            goto out;
        }
        /* (the callback may queue more: p->pend may move) */
        st_rpipe_cb cb = p->pend[i].cb;
        int cbrc = cb ? cb(r, p->pend[i].arg) : 0;
        freeReplyObject(r);
        if (cbrc) {
            snprintf(errstr, errsz, "unexpected Redis reply");
            redisFree(p->rc);
            p->rc = NULL;
            goto out;
        }
    }
    if (p->n > round) {
        drop_front(p, round);
        goto again;
    }
    rc = 0;
    goto out;
late:
    /* replies may still be on their way: the stream cannot be put back in
     * step, so the connection goes (a MULTI not yet EXECed with it) */
    snprintf(errstr, errsz,
             "Redis at \"%s:%d\": a round trip of %zu commands got %zu replies in %" PRId64
             " ms (redis.round_trip_timeout_ms %" PRId64 "): connection dropped",
             p->target.host, p->target.port, round, i, st_time_mono_ms() - t0,
             p->round_trip_ms);
    redisFree(p->rc);
    p->rc = NULL;
    goto out;
conn_error:
    snprintf(errstr, errsz, "Redis at \"%s:%d\": %s", p->target.host, p->target.port,
             p->rc && p->rc->err ? p->rc->errstr : "connection lost");
    redisFree(p->rc);
    p->rc = NULL;
out:
    /* the full timeout back for what runs outside an exec (SCRIPT LOAD) */
    if (p->rc && p->sock_ms != CALL_TIMEOUT_MS) {
        struct timeval tv = {CALL_TIMEOUT_MS / 1000, 0};
        if (redisSetTimeout(p->rc, tv) != REDIS_OK) {
            /* failed for good (hiredis): the next exec connects again */
            redisFree(p->rc);
            p->rc = NULL;
        }
        p->sock_ms = CALL_TIMEOUT_MS;
    }
    st_rpipe_discard(p);
    return rc;
}
