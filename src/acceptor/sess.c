/*
 * Client sessions: creation, scheduling on a pool, and closing.
 *
 * Closing matters more than it looks.  close(2) on a socket with unread
 * bytes makes Linux send a RST, and a RST can destroy the error response
 * we just wrote before the client reads it.  So error paths close by
 * shutting down our side and discarding what the client still sends.
 *
 * A new session waits in the waiter's ready queue (sess_start()).  One
 * from a tls listen socket then runs sess_tls_task() on a worker each
 * time the client's bytes come: the handshake in steps, bounded by tls_handshake_timeout, then
 * the request loop of the protocol ALPN agreed on, on the same worker.  One
 * from an h2c listen socket starts in the HTTP/2 task, which looks for
 * the connection preface (prior knowledge) and hands anything else to
 * the HTTP/1 one.  On a PROXY listen socket pp_sess_task() (pp_sess.c)
 * reads the PROXY header before any of them.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <stdint.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <sys/uio.h>
#include <unistd.h>

#include "surogat/acc.h"
#include "surogat/defs.h"
#include "surogat/par.h"
#include "surogat/pp.h"
#include "surogat/sess.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/tls.h"
#include "surogat/vio.h"
#include "surogat/wtr.h"

/* Built per refusal but from constant parts: this path must stay cheap under overload. */
static const char busy_head[] = "HTTP/1.1 503 Service Unavailable\r\n"
                                "Retry-After: 1\r\n"
                                "Content-Type: text/plain\r\n"
                                "Content-Length: 20\r\n"
                                "Connection: close\r\n"
                                "Date: ";
static const char busy_tail[] = "\r\n\r\nServer is too busy.\n";

static pool_task_f *sess_serve;    /* sess_set_task(): read and answer HTTP/1 requests */
static pool_task_f *sess_serve_h2; /* and HTTP/2 ones */

void
sess_set_task(pool_task_f *h1, pool_task_f *h2)
{
    sess_serve = h1;
    sess_serve_h2 = h2;
}

/*
 * The handshake, in steps: as far as the client's bytes allow, then back
 * to the waiter until its next flight (or tls_handshake_timeout from the
 * first step, after which the waiter closes it: sess_close_timeout()).
 * No worker sleeps in poll(2) between the flights, and whichever worker
 * takes ready sessions runs both, in a row with everything else it takes.
 */
static void
sess_tls_task(struct wrk *wrk, void *priv)
{
    struct sess *sp = priv;
    char peer[INET6_ADDRSTRLEN + 16];

    OBJ_CHECK(sp, SESS_MAGIC);
    AN(sp->ls->tls);
    if (sp->ssl == NULL)
        sp->t_idle = tim_mono(); /* the handshake's deadline counts from here */
    sp->tls_new = false;
    snprintf(peer, sizeof peer, "%s:%s", sp->client_ip, sp->client_port);
    switch (tls_accept_step(sp->ls->tls, sp->fd, &sp->ssl, peer,
                            sp->t_idle + par.tls_handshake_timeout)) {
    case TLS_HS_FAIL:
        sess_close(&sp);
        return;
    case TLS_HS_WANT_READ:
        sp->task.func = sess_tls_task; /* also after a PROXY header */
        wtr_enter_until(&sp, sp->t_idle + par.tls_handshake_timeout);
        return;
    case TLS_HS_DONE:
        break;
    }
    /* From the waiter on, it is an ordinary session of the protocol agreed on. */
    if (tls_alpn_h2(sp->ssl)) {
        sp->mux = tls_mux_new(&sp->ssl); /* the records may leave OpenSSL here */
        if (sp->mux == NULL) {
            sess_close(&sp);
            return;
        }
        sp->task.func = sess_serve_h2;
    } else {
        sp->task.func = sess_serve;
    }
    sp->t_idle = tim_mono();
    sp->task.func(wrk, sp);
}

void
sess_after_proxy(struct wrk *wrk, struct sess *sp)
{
    OBJ_CHECK(sp, SESS_MAGIC);
    if (sp->ls->tls != NULL) {
        sess_tls_task(wrk, sp);
        return;
    }
    sp->task.func = sp->ls->h2c ? sess_serve_h2 : sess_serve;
    sp->t_idle = tim_mono();
    sp->task.func(wrk, sp);
}

struct sess *
sess_new(int fd, const struct lsock *ls, const struct sockaddr *sa)
{
    struct sess *sp;

    OBJ_NEW(sp, SESS_MAGIC);
    sp->fd = fd;
    sp->ls = ls;
    sp->pool = pool_pick();
    AN(sess_serve);
    AN(sess_serve_h2);
    /* An h2c listener's sessions start in the HTTP/2 task, which hands HTTP/1 ones over. */
    sp->task.func = ls->proxy       ? pp_sess_task
                    : ls->tls != NULL ? sess_tls_task
                    : ls->h2c         ? sess_serve_h2
                                      : sess_serve;
    sp->task.priv = sp;
    sp->t_open = tim_real();
    sp->t_idle = tim_mono();
    sp->rx_more = true; /* whatever reads it first (a PROXY header, OpenSSL) is not tracked */
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *sin = (const struct sockaddr_in *)(const void *)sa;
        AN(inet_ntop(AF_INET, &sin->sin_addr, sp->client_ip, sizeof sp->client_ip));
        snprintf(sp->client_port, sizeof sp->client_port, "%u", ntohs(sin->sin_port));
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *sin6 = (const struct sockaddr_in6 *)(const void *)sa;
        AN(inet_ntop(AF_INET6, &sin6->sin6_addr, sp->client_ip, sizeof sp->client_ip));
        snprintf(sp->client_port, sizeof sp->client_port, "%u", ntohs(sin6->sin6_port));
    } else {
        strcpy(sp->client_ip, "0.0.0.0");
        strcpy(sp->client_port, "0");
    }
    STAT_INC(sess_conn);
    return (sp);
}

double
sess_start(struct sess *sp)
{
    OBJ_CHECK(sp, SESS_MAGIC);
    if (sp->task.func != sess_tls_task)
        return (0);
    /*
     * A TLS client's first flight: shed like a request when the pool is
     * full, and closed at the handshake's deadline if it never comes.
     */
    sp->tls_new = true;
    return (sp->t_idle + par.tls_handshake_timeout);
}

void
sess_close(struct sess **spp)
{
    struct sess *sp;

    OBJ_TAKE(sp, spp, SESS_MAGIC);
    if (sp->tp_close != NULL) {
        sp->tp_close(sp); /* the transport's state goes first; it calls us back */
        return;
    }
    if (sp->in_buf != NULL)
        (void)sess_input_read(sp, NULL, sess_input_len(sp)); /* frees it, counts it */
    if (sp->ssl != NULL)
        tls_close(&sp->ssl); /* close_notify first: the client knows the response is whole */
    if (sp->mux != NULL)
        tls_mux_close(&sp->mux);
    wtr_forget(sp); /* an event still on its way finds no session, not freed memory */
    if (sp->fd >= 0)
        close(sp->fd);
    if (sp->pp != NULL)
        OBJ_FREE(&sp->pp);
    STAT_INC(sess_closed);
    OBJ_FREE(&sp);
}

/* Discard what the client already sent so close(2) does not answer with a RST. */
static void
drain_nonblocking(int fd)
{
    char buf[4096];

    for (int i = 0; i < 16; i++)
        if (read(fd, buf, sizeof buf) <= 0)
            break;
}

void
sess_close_lingering(struct sess **spp, double linger)
{
    struct sess *sp = *spp;
    char buf[4096];
    double deadline;
    size_t total = 0;
    ssize_t n;

    OBJ_CHECK(sp, SESS_MAGIC);
    if (sp->ssl != NULL)
        tls_notify_close(sp->ssl);
    if (sp->mux != NULL)
        tls_mux_notify_close(sp->mux);
    if (shutdown(sp->fd, SHUT_WR) == 0 && linger > 0) {
        deadline = tim_mono() + linger;
        /* Bounded in bytes too: a client streaming forever must not hold the worker. */
        while (total < 1024 * 1024) {
            /* Raw bytes, even under TLS: they are discarded, not read. */
            n = vio_read(sp->fd, buf, sizeof buf, deadline);
            if (n <= 0)
                break;
            total += (size_t)n;
        }
    }
    sess_close(spp);
}

void
sess_schedule(struct sess **spp)
{
    char date[TIM_HTTP_DATE_LEN + 1];
    struct iovec iov[3];
    struct sess *sp;

    OBJ_TAKE(sp, spp, SESS_MAGIC);
    /*
     * A connection with a transport's state (HTTP/2) may have requests
     * running that wait for what it reads: it is never shed.  Its new
     * requests are bounded by the transport itself.
     */
    if (pool_submit(sp->pool, &sp->task, sp->tp_conn != NULL ? POOL_PRIO_FETCH : POOL_PRIO_REQ) ==
        0)
        return;
    if (sp->tp_conn != NULL) {
        sess_close(&sp); /* shutting down */
        return;
    }
    /* An idle client that hung up is not a refused request: just close it. */
    if (recv(sp->fd, date, 1, MSG_PEEK | MSG_DONTWAIT) == 0) {
        sess_close(&sp);
        return;
    }
    STAT_INC(sess_dropped);
    if (sp->ls->tls != NULL) {
        /*
         * No canned 503 under TLS: before the handshake there is no
         * channel to write it on, and after it the write could block the
         * waiter thread.  The client sees the connection close.
         */
        sess_close(&sp);
        return;
    }
    tim_http_date(tim_real(), date);
    iov[0].iov_base = (void *)(uintptr_t)busy_head;
    iov[0].iov_len = sizeof busy_head - 1;
    iov[1].iov_base = date;
    iov[1].iov_len = TIM_HTTP_DATE_LEN;
    iov[2].iov_base = (void *)(uintptr_t)busy_tail;
    iov[2].iov_len = sizeof busy_tail - 1;
    (void)!writev(sp->fd, iov, 3);
    (void)shutdown(sp->fd, SHUT_WR);
    drain_nonblocking(sp->fd);
    sess_close(&sp);
}

static volatile int drain_flag;
static unsigned epoch; /* atomic: successful reloads */

void
sess_reloaded(void)
{
    __atomic_add_fetch(&epoch, 1, __ATOMIC_RELEASE);
}

unsigned
sess_epoch(void)
{
    return (__atomic_load_n(&epoch, __ATOMIC_ACQUIRE));
}

int
sess_muxed(void)
{
    errno = EPROTO;
    return (-1);
}

void
sess_drain(void)
{
    __atomic_store_n(&drain_flag, 1, __ATOMIC_RELEASE);
}

bool
sess_draining(void)
{
    return (__atomic_load_n(&drain_flag, __ATOMIC_ACQUIRE) != 0);
}

ssize_t
sess_read_nb(struct sess *sp, void *buf, size_t len)
{
    if (sp->tp_conn != NULL)
        return (sess_muxed());
    if (sp->in_buf != NULL)
        return ((ssize_t)sess_input_read(sp, buf, len));
    if (sp->ssl != NULL)
        return (sess_rx_note(sp, tls_read_nb(sp->ssl, buf, len), len));
    return (sess_rx_note(sp, read(sp->fd, buf, len), len));
}

int
sess_sendfile(struct sess *sp, int fd, off_t off, size_t len, double deadline)
{
    struct pollfd pfd = { .fd = sp->fd, .events = POLLOUT };
    double left;
    ssize_t n;

    if (sp->tp_conn != NULL)
        return (sess_muxed());
    if (sp->ssl != NULL) {
        /* The kernel cannot encrypt: records built in user space, the same contract. */
        if (tls_sendfile(sp->ssl, sp->fd, fd, off, len, deadline) == 0)
            return (0);
        if (errno == EIO)
            errno = ENODATA;
        return (-1);
    }
    while (len > 0) {
        n = sendfile(sp->fd, fd, &off, len);
        if (n > 0) {
            len -= (size_t)n;
            continue;
        }
        if (n == 0) {
            errno = ENODATA;
            return (-1);
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN)
            return (-1);
        left = deadline - tim_mono();
        if (left <= 0) {
            errno = ETIMEDOUT;
            return (-1);
        }
        vio_blocking();
        if (poll(&pfd, 1, left > 86400 ? 86400000 : (int)ceil(left * 1e3)) < 0 && errno != EINTR)
            return (-1);
    }
    return (0);
}

/* ---- kept input and the request deadline (sess.h) ---- */

void
sess_keep_input(struct sess *sp, const void *buf, size_t len)
{
    OBJ_CHECK(sp, SESS_MAGIC);
    SRG_ASSERT(sp->in_buf == NULL);
    if (len == 0)
        return;
    /* Exactly the bytes received: a slow client costs what it sent, not a buffer. */
    sp->in_buf = malloc(len);
    AN(sp->in_buf);
    memcpy(sp->in_buf, buf, len);
    sp->in_off = 0;
    sp->in_len = len;
    STAT_ADD(sess_kept_bytes, len);
}

size_t
sess_input_read(struct sess *sp, void *buf, size_t len)
{
    size_t n = sess_input_len(sp);

    OBJ_CHECK(sp, SESS_MAGIC);
    if (n > len)
        n = len;
    if (buf != NULL)
        memcpy(buf, sp->in_buf + sp->in_off, n);
    sp->in_off += n;
    STAT_ADD(sess_kept_bytes, -(int64_t)n);
    if (sp->in_off == sp->in_len) {
        free(sp->in_buf);
        sp->in_buf = NULL;
        sp->in_off = sp->in_len = 0;
    }
    return (n);
}

static const char timeout_resp[] = "HTTP/1.1 408 Request Timeout\r\n"
                                   "Content-Type: text/plain\r\n"
                                   "Content-Length: 17\r\n"
                                   "Connection: close\r\n"
                                   "\r\n"
                                   "Request timeout.\n";

void
sess_close_timeout(struct sess **spp)
{
    struct sess *sp;

    OBJ_TAKE(sp, spp, SESS_MAGIC);
    if (sp->task.func == sess_tls_task) {
        /* A handshake, not a request, did not finish: nothing to answer on. */
        char peer[INET6_ADDRSTRLEN + 16];

        snprintf(peer, sizeof peer, "%s:%s", sp->client_ip, sp->client_port);
        tls_accept_expired(&sp->ssl, peer);
        sess_close(&sp);
        return;
    }
    STAT_INC(sess_timeout_req);
    if (sp->ssl == NULL && sp->tp_conn == NULL) {
        /*
         * One non-blocking write into an empty send buffer: it goes out
         * whole or not at all.  Then what the client sent is discarded,
         * so that close(2) does not reset the connection over our answer;
         * bytes it sends later may still cause a reset, which a client
         * this slow has earned.
         */
        (void)!write(sp->fd, timeout_resp, sizeof timeout_resp - 1);
        (void)shutdown(sp->fd, SHUT_WR);
        drain_nonblocking(sp->fd);
    }
    sess_close(&sp);
}
