/*
 * Backend connection pools.
 *
 * Each pool keeps its idle connections on a LIFO list under its mtx and
 * counts every open connection (idle or busy) against its backend's
 * max_connections, or backend_max_connections when that is 0.  Connecting happens outside the lock,
 * with the slot reserved first so concurrent connects cannot overshoot the limit.
 *
 * A TLS pool shakes hands right after connecting, within what is left of
 * the connect timeout: a connection is only handed out once the backend's
 * certificate has been checked.  The I/O functions below pick plain or
 * TLS per connection, so the fetch and the pipe never look at conn->fd.
 *
 * A pool also speaks for its backend in the daemon log: refused responses
 * and out-of-step connections, rate-limited per reason (bcp_refused).
 *
 * A pool whose backend takes a PROXY header keeps connections tagged
 * with the header they were opened with (bcp_get_tagged()): the header
 * describes the connection, so a connection only carries requests of the
 * client it names.  Untagged pools behave as before.  The pool also
 * works over a Unix socket: connect(2) there fails at once (EAGAIN when
 * the backlog is full) rather than in progress.
 *
 * Since every byte to and from a backend passes here, so does most of
 * what the backend's counters say (bcp.h lists it); a read's timeout is
 * told apart by whether the answer had begun.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "surogat/bcp.h"
#include "surogat/defs.h"
#include "surogat/log.h"
#include "surogat/par.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/tls.h"
#include "surogat/vio.h"

struct bcp {
    unsigned magic;
#define BCP_MAGIC 0x3c9d7b10
    pthread_mutex_t mtx;
    struct sockaddr_storage sa;
    socklen_t salen;
    struct bcp_conn *idle;              /* under mtx, most recently used first */
    unsigned nidle;                     /* under mtx */
    unsigned nconn;                     /* under mtx: open connections, busy or idle */
    unsigned max;                       /* 0: par.backend_max_connections */
    struct bcp_tls *tls;                /* NULL: plain TCP; the backend's */
    const char *name;                   /* the backend's, for the log */
    struct stat_be *st;                 /* NULL: not counted; the backend's */
    struct log_limit refused[BCP_R__N]; /* one line a second per reason */
};

static const struct {
    enum stat_id counter;
    const char *counter_name;
    const char *text;
} refuse_tbl[BCP_R__N] = {
#define REFUSE(name, counter, text) [BCP_R_##name] = { STAT_##counter, #counter, text },
#include "surogat/tbl/be_refuse.h"
};

static void
count(const struct bcp *bp, enum stat_be_id id, uint64_t n)
{
    if (bp->st != NULL && n > 0)
        stat_be_add(bp->st, id, n);
}

struct bcp *
bcp_new(const struct sockaddr *sa, socklen_t salen, unsigned max, struct bcp_tls *tls,
        const char *name, struct stat_be *st)
{
    struct bcp *bp;

    SRG_ASSERT(salen <= sizeof bp->sa);
    AN(name);
    OBJ_NEW(bp, BCP_MAGIC);
    AZ(pthread_mutex_init(&bp->mtx, NULL));
    memcpy(&bp->sa, sa, salen);
    bp->salen = salen;
    bp->max = max;
    bp->tls = tls;
    bp->name = name;
    bp->st = st;
    for (unsigned i = 0; i < BCP_R__N; i++)
        AZ(pthread_mutex_init(&bp->refused[i].mtx, NULL));
    return (bp);
}

static void
conn_free(struct bcp_conn *c)
{
    if (c->ssl != NULL)
        bcp_tls_ssl_free(&c->ssl);
    close(c->fd);
    STAT_DEC(backend_conn_open);
    OBJ_FREE(&c);
}

void
bcp_free(struct bcp **bpp)
{
    struct bcp *bp;
    struct bcp_conn *c;

    OBJ_TAKE(bp, bpp, BCP_MAGIC);
    while ((c = bp->idle) != NULL) {
        bp->idle = c->next;
        conn_free(c);
    }
    for (unsigned i = 0; i < BCP_R__N; i++)
        AZ(pthread_mutex_destroy(&bp->refused[i].mtx));
    AZ(pthread_mutex_destroy(&bp->mtx));
    OBJ_FREE(&bp);
}

const char *
bcp_refuse_text(enum bcp_refuse why)
{
    SRG_ASSERT(why < BCP_R__N);
    return (refuse_tbl[why].text);
}

void
bcp_refused(struct bcp *bp, enum bcp_refuse why, const char *what)
{
    OBJ_CHECK(bp, BCP_MAGIC);
    SRG_ASSERT(why < BCP_R__N);
    stat_add_id(refuse_tbl[why].counter, 1);
    /* The backend's own count of what the global backend_bad_resp counts, by the same rows. */
    if (refuse_tbl[why].counter == STAT_backend_bad_resp)
        count(bp, STAT_BE_fail_bad_resp, 1);
    /* A URL is request bytes: bounded here, and the parser let no control byte through. */
    log_limited(&bp->refused[why], refuse_tbl[why].counter_name, LOG_WARNING,
                "backend %s: %s%s%.256s%s", bp->name, refuse_tbl[why].text,
                what != NULL ? " (" : "", what != NULL ? what : "", what != NULL ? ")" : "");
}

/* What taking an idle connection finds on it. */
enum idle {
    IDLE_OK,
    IDLE_OLD,    /* idle longer than backend_idle_timeout */
    IDLE_CLOSED, /* the backend closed it (EOF, reset, close_notify or an alert) */
    IDLE_BYTES,  /* data the backend sent unasked: out of step with us */
};

/*
 * Bytes on an idle TLS connection may be a record that carries no data:
 * a session ticket that came after the response, or a key update.  Let
 * OpenSSL consume them (the socket is non-blocking): usable if nothing
 * else was there.  A close_notify or an alert closes it; data is out of
 * step.
 */
static enum idle
tls_idle(SSL *ssl)
{
    size_t got;
    char ch;
    int rv, e;

    ERR_clear_error();
    rv = SSL_peek_ex(ssl, &ch, 1, &got);
    e = rv == 1 ? SSL_ERROR_NONE : SSL_get_error(ssl, rv);
    ERR_clear_error();
    if (e == SSL_ERROR_WANT_READ)
        return (IDLE_OK);
    if (e == SSL_ERROR_NONE)
        return (IDLE_BYTES);
    SSL_set_quiet_shutdown(ssl, 1);
    return (IDLE_CLOSED);
}

/*
 * Whether an idle connection may carry a request: neither closed by the
 * backend nor holding anything it sent unasked (which would be read as
 * the next response).  One recv(2) with MSG_PEEK, non-blocking; OpenSSL
 * only when bytes are there.
 */
static enum idle
idle_check(const struct bcp_conn *c, double now)
{
    char ch;
    ssize_t n;

    if (now - c->t_idle > par.backend_idle_timeout)
        return (IDLE_OLD);
    if (c->ssl != NULL && SSL_pending(c->ssl) > 0)
        return (IDLE_BYTES);
    n = recv(c->fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return (IDLE_OK);
    if (n <= 0)
        return (IDLE_CLOSED);
    if (c->ssl == NULL)
        return (IDLE_BYTES);
    return (tls_idle(c->ssl));
}

static int
connect_tmo(const struct bcp *bp, double tmo)
{
    struct pollfd pfd;
    socklen_t sl = sizeof(int);
    int fd, one = 1, soerr = 0, ms;

    fd = socket(bp->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return (-1);
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (connect(fd, (const struct sockaddr *)&bp->sa, bp->salen) == 0)
        return (fd);
    if (errno != EINPROGRESS)
        goto fail;
    pfd.fd = fd;
    pfd.events = POLLOUT;
    ms = (int)(tmo * 1e3);
    if (ms < 1)
        ms = 1;
    vio_blocking();
    for (;;) {
        int n = poll(&pfd, 1, ms);
        if (n > 0)
            break;
        if (n == 0) {
            errno = ETIMEDOUT;
            goto fail;
        }
        if (errno != EINTR)
            goto fail;
    }
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0)
        goto fail;
    if (soerr != 0) {
        errno = soerr;
        goto fail;
    }
    return (fd);
fail:
    soerr = errno;
    close(fd);
    errno = soerr;
    return (-1);
}

/* Close the oldest idle connection to make room; false when none is idle. */
static bool
evict_oldest_locked(struct bcp *bp, struct bcp_conn **stale)
{
    struct bcp_conn **cp, *c;

    if (bp->idle == NULL)
        return (false);
    for (cp = &bp->idle; (*cp)->next != NULL; cp = &(*cp)->next)
        continue;
    c = *cp;
    *cp = NULL;
    bp->nidle--;
    bp->nconn--;
    c->next = *stale;
    *stale = c;
    return (true);
}

enum bcp_err
bcp_get(struct bcp *bp, double tmo, bool fresh, struct bcp_conn **out)
{
    return (bcp_get_tagged(bp, tmo, fresh, NULL, 0, out));
}

enum bcp_err
bcp_get_tagged(struct bcp *bp, double tmo, bool fresh, const void *tag, size_t taglen,
               struct bcp_conn **out)
{
    struct bcp_conn *c, *stale = NULL, **cp;
    double now = tim_mono();
    struct ssl_st *ssl = NULL;
    unsigned max;
    int fd;

    OBJ_CHECK(bp, BCP_MAGIC);
    AN(out);
    SRG_ASSERT(taglen <= sizeof c->tag);
    *out = NULL;
    while (!fresh) {
        AZ(pthread_mutex_lock(&bp->mtx));
        /*
         * The first idle connection opened with our tag (untagged pools:
         * the head, all their connections are alike); others' connections
         * past backend_idle_timeout go on the way.
         */
        for (cp = &bp->idle; (c = *cp) != NULL;) {
            if (c->taglen == taglen && (taglen == 0 || memcmp(c->tag, tag, taglen) == 0))
                break;
            if (now - c->t_idle <= par.backend_idle_timeout) {
                cp = &c->next;
                continue;
            }
            *cp = c->next;
            bp->nidle--;
            c->next = stale;
            stale = c;
        }
        if (c != NULL) {
            *cp = c->next;
            bp->nidle--;
        }
        AZ(pthread_mutex_unlock(&bp->mtx));
        while (stale != NULL) {
            struct bcp_conn *old = stale;
            stale = old->next;
            old->next = NULL;
            bcp_close(&old);
        }
        if (c == NULL)
            break;
        /* Checked without the lock: the connection is ours now, and the check is a syscall. */
        c->next = NULL;
        switch (idle_check(c, now)) {
        case IDLE_OK:
            c->reused = true;
            c->t_sent = c->t_first = 0;
            count(bp, STAT_BE_requests, 1);
            count(bp, STAT_BE_reused, 1);
            *out = c;
            return (BCP_OK);
        case IDLE_BYTES:
            bcp_refused(bp, BCP_R_LATE_BYTES, NULL);
            break;
        case IDLE_OLD:
        case IDLE_CLOSED:
            break;
        }
        bcp_close(&c);
    }
    AZ(pthread_mutex_lock(&bp->mtx));
    max = bp->max > 0 ? bp->max : par.backend_max_connections;
    if (max > 0 && bp->nconn >= max && (taglen == 0 || !evict_oldest_locked(bp, &stale))) {
        AZ(pthread_mutex_unlock(&bp->mtx));
        count(bp, STAT_BE_fail_busy, 1);
        return (BCP_E_BUSY);
    }
    bp->nconn++;
    AZ(pthread_mutex_unlock(&bp->mtx));
    while ((c = stale) != NULL) {
        stale = c->next;
        conn_free(c);
    }
    fd = connect_tmo(bp, tmo);
    /* The PROXY header goes first, in clear, as the backend reads it before any TLS. */
    if (fd >= 0 && taglen > 0 && vio_write(fd, tag, taglen, now + tmo) != 0) {
        close(fd);
        fd = -1;
    }
    if (fd >= 0 && bp->tls != NULL && bcp_tls_connect(bp->tls, fd, &ssl, now + tmo) != 0) {
        close(fd);
        fd = -1;
    }
    if (fd < 0) {
        /* A handshake that ran out of time fails with EPROTO: the clock tells. */
        bool timeout = errno == ETIMEDOUT || tim_mono() >= now + tmo;
        AZ(pthread_mutex_lock(&bp->mtx));
        bp->nconn--;
        AZ(pthread_mutex_unlock(&bp->mtx));
        count(bp, timeout ? STAT_BE_fail_connect_timeout : STAT_BE_fail_connect, 1);
        return (BCP_E_CONNECT);
    }
    OBJ_NEW(c, BCP_CONN_MAGIC);
    c->fd = fd;
    c->ssl = ssl;
    c->pool = bp;
    c->taglen = (unsigned char)taglen;
    if (taglen > 0)
        memcpy(c->tag, tag, taglen);
    STAT_INC(backend_conn);
    STAT_INC(backend_conn_open);
    count(bp, STAT_BE_requests, 1);
    count(bp, STAT_BE_connections, 1);
    *out = c;
    return (BCP_OK);
}

/* The connection's use ends: time it if an answer began (a pipe's length is the client's). */
static void
timed(struct bcp_conn *c, double now)
{
    if (c->pool->st != NULL && c->t_first > 0 && !c->piped)
        stat_be_time(c->pool->st, c->t_first - c->t_sent, now - c->t_sent);
    c->t_sent = c->t_first = 0;
    c->piped = false;
}

void
bcp_recycle(struct bcp_conn **connp)
{
    struct bcp_conn *c;
    struct bcp *bp;

    OBJ_TAKE(c, connp, BCP_CONN_MAGIC);
    bp = c->pool;
    OBJ_CHECK(bp, BCP_MAGIC);
    c->t_idle = tim_mono();
    timed(c, c->t_idle);
    AZ(pthread_mutex_lock(&bp->mtx));
    c->next = bp->idle;
    bp->idle = c;
    bp->nidle++;
    AZ(pthread_mutex_unlock(&bp->mtx));
    STAT_INC(backend_recycle);
}

void
bcp_close(struct bcp_conn **connp)
{
    struct bcp_conn *c;
    struct bcp *bp;

    OBJ_TAKE(c, connp, BCP_CONN_MAGIC);
    bp = c->pool;
    OBJ_CHECK(bp, BCP_MAGIC);
    timed(c, tim_mono());
    AZ(pthread_mutex_lock(&bp->mtx));
    bp->nconn--;
    AZ(pthread_mutex_unlock(&bp->mtx));
    conn_free(c);
}

unsigned
bcp_idle_count(const struct bcp *bp)
{
    OBJ_CHECK(bp, BCP_MAGIC);
    return (__atomic_load_n(&bp->nidle, __ATOMIC_RELAXED));
}

unsigned
bcp_conn_count(const struct bcp *bp)
{
    OBJ_CHECK(bp, BCP_MAGIC);
    return (__atomic_load_n(&bp->nconn, __ATOMIC_RELAXED));
}

unsigned
bcp_busy_count(const struct bcp *bp)
{
    unsigned n, idle;

    OBJ_CHECK(bp, BCP_MAGIC);
    n = __atomic_load_n(&bp->nconn, __ATOMIC_RELAXED);
    idle = __atomic_load_n(&bp->nidle, __ATOMIC_RELAXED);
    /* Two loads without the lock: a connection going idle between them may count twice. */
    return (n > idle ? n - idle : 0);
}

/*--------------------------------------------------------------------
 * I/O on a connection, plain or TLS, counted.
 */

/* After a read: its bytes, the first byte of an answer, or which timeout it was. */
static ssize_t
got(struct bcp_conn *c, ssize_t n)
{
    int e = errno;

    if (n > 0) {
        count(c->pool, STAT_BE_bytes_in, (uint64_t)n);
        if (c->t_first == 0 && c->t_sent > 0)
            c->t_first = tim_mono();
    } else if (n < 0 && e == ETIMEDOUT) {
        count(c->pool,
              c->t_first == 0 ? STAT_BE_fail_first_byte_timeout
                              : STAT_BE_fail_between_bytes_timeout,
              1);
    }
    errno = e;
    return (n);
}

/* Before a write: the start of the request, for the times. */
static void
sending(struct bcp_conn *c)
{
    if (c->t_sent == 0)
        c->t_sent = tim_mono();
}

ssize_t
bcp_read(struct bcp_conn *c, void *buf, size_t len, double deadline)
{
    OBJ_CHECK(c, BCP_CONN_MAGIC);
    if (c->ssl != NULL)
        return (got(c, tls_read(c->ssl, c->fd, buf, len, deadline)));
    return (got(c, vio_read(c->fd, buf, len, deadline)));
}

ssize_t
bcp_read_wait(struct bcp_conn *c, void *buf, size_t len, double deadline)
{
    OBJ_CHECK(c, BCP_CONN_MAGIC);
    /* tls_read() waits on its own when OpenSSL holds nothing decrypted. */
    if (c->ssl != NULL)
        return (got(c, tls_read(c->ssl, c->fd, buf, len, deadline)));
    return (got(c, vio_read_wait(c->fd, buf, len, deadline)));
}

ssize_t
bcp_read_nb(struct bcp_conn *c, void *buf, size_t len)
{
    OBJ_CHECK(c, BCP_CONN_MAGIC);
    c->piped = true;
    if (c->ssl != NULL)
        return (got(c, tls_read_nb(c->ssl, buf, len)));
    return (got(c, read(c->fd, buf, len)));
}

void
bcp_interim(struct bcp_conn *c)
{
    OBJ_CHECK(c, BCP_CONN_MAGIC);
    c->t_first = 0;
}

bool
bcp_pending(const struct bcp_conn *c)
{
    OBJ_CHECK(c, BCP_CONN_MAGIC);
    return (c->ssl != NULL && tls_pending(c->ssl));
}

int
bcp_writev(struct bcp_conn *c, struct iovec *iov, int iovcnt, double deadline)
{
    uint64_t n = 0;
    int rv;

    OBJ_CHECK(c, BCP_CONN_MAGIC);
    sending(c);
    /* Counted before: the writers may consume iov as they go. */
    for (int i = 0; i < iovcnt; i++)
        n += iov[i].iov_len;
    if (c->ssl != NULL)
        rv = tls_writev(c->ssl, c->fd, iov, iovcnt, deadline);
    else
        rv = vio_writev(c->fd, iov, iovcnt, deadline);
    if (rv == 0)
        count(c->pool, STAT_BE_bytes_out, n);
    return (rv);
}

int
bcp_write(struct bcp_conn *c, const void *buf, size_t len, double deadline)
{
    int rv;

    OBJ_CHECK(c, BCP_CONN_MAGIC);
    sending(c);
    if (c->ssl != NULL)
        rv = tls_write(c->ssl, c->fd, buf, len, deadline);
    else
        rv = vio_write(c->fd, buf, len, deadline);
    if (rv == 0)
        count(c->pool, STAT_BE_bytes_out, len);
    return (rv);
}
