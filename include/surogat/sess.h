/*
 * sess -- a client connection.  One owner at a time: the acceptor while
 * it is new, the pool queue while it waits for a worker, a worker while a
 * request runs, the waiter while idle.  It moves by `struct sess **`.
 */
#ifndef SUROGAT_SESS_H
#define SUROGAT_SESS_H

#include <stdbool.h>
#include <stdint.h>
#include <netinet/in.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "surogat/pool.h"
#include "surogat/tls.h"
#include "surogat/vio.h"

struct lsock;

struct sess {
    unsigned magic;
#define SESS_MAGIC 0x4d1c8e27
    int fd;
    struct pool *pool;
    const struct lsock *ls; /* the listen socket it came in on */
    struct pool_task task;  /* runs req_sess_task */
    double t_open;          /* tim_real() at accept */
    double t_idle;          /* tim_mono() when the last response ended */
    uint64_t nreq;          /* requests served on it */
    struct sess *wnext;     /* the waiter's parked list */
    struct sess *wprev;
    bool wparked;           /* on that list (under the waiter's lock) */
    bool wexpired;          /* idle too long: close when its event comes (same lock) */
    bool wregistered;       /* its descriptor is in the waiter's epoll set */
    bool wbusy;             /* parked busy (wtr_park()): never expires (same lock) */
    double t_ready;         /* tim_mono() when the set reported it ready */
    struct ssl_st *ssl; /* after the TLS handshake on a tls listen socket, else NULL */
    char client_ip[INET6_ADDRSTRLEN];
    char client_port[8];
    /*
     * A transport that keeps state for the whole connection and serves
     * several requests on it at once (HTTP/2) hangs that state here.  It
     * then does all the connection's I/O itself: the sess_ I/O functions
     * below refuse such a session, so that nothing above the transport
     * can write into its frames.  sess_close() hands the session to
     * tp_close, which closes it -- now, or when the last of its requests
     * ends -- after clearing tp_close.
     */
    void *tp_conn;
    void (*tp_close)(struct sess *sp);
};

/*
 * Client I/O goes through these, never through sp->fd directly, so that a
 * session's transport is decided in one place: plain TCP through vio_,
 * or TLS through tls_ when sp->ssl is set.  One predictable branch keeps
 * the plain path as cheap as before.  Same contracts as the vio_
 * functions; sess_read_nb() is one non-blocking read: -1 with EAGAIN
 * when nothing is there; sess_pending() counts bytes OpenSSL has already
 * decrypted, which poll(2) cannot see.  sendfile(2) cannot carry
 * TLS (no kernel TLS here): under TLS a file body goes through
 * tls_sendfile(), which reads it into full records.  On a session with
 * tp_conn set each of them fails with EPROTO (see struct sess).
 */
static inline bool
sess_is_tls(const struct sess *sp)
{
    return (sp->ssl != NULL);
}
int sess_muxed(void); /* -1 with errno EPROTO */
static inline ssize_t
sess_read(struct sess *sp, void *buf, size_t len, double deadline)
{
    if (__builtin_expect(sp->tp_conn != NULL, 0))
        return (sess_muxed());
    if (__builtin_expect(sp->ssl != NULL, 0))
        return (tls_read(sp->ssl, sp->fd, buf, len, deadline));
    return (vio_read(sp->fd, buf, len, deadline));
}
ssize_t sess_read_nb(struct sess *sp, void *buf, size_t len);
static inline int
sess_writev(struct sess *sp, struct iovec *iov, int iovcnt, double deadline)
{
    if (__builtin_expect(sp->tp_conn != NULL, 0))
        return (sess_muxed());
    if (__builtin_expect(sp->ssl != NULL, 0))
        return (tls_writev(sp->ssl, sp->fd, iov, iovcnt, deadline));
    return (vio_writev(sp->fd, iov, iovcnt, deadline));
}
static inline int
sess_write(struct sess *sp, const void *buf, size_t len, double deadline)
{
    if (__builtin_expect(sp->tp_conn != NULL, 0))
        return (sess_muxed());
    if (__builtin_expect(sp->ssl != NULL, 0))
        return (tls_write(sp->ssl, sp->fd, buf, len, deadline));
    return (vio_write(sp->fd, buf, len, deadline));
}
/*
 * Send len bytes of the file fd from offset off, zero-copy (sendfile(2);
 * tls_sendfile() under TLS), everything by the deadline.  0, or -1 with
 * errno: ETIMEDOUT, the socket's error, or ENODATA when the file ended
 * early (it shrank).
 */
int sess_sendfile(struct sess *sp, int fd, off_t off, size_t len, double deadline);
/* Request bytes already read and decrypted: the session must not wait for poll(2). */
static inline bool
sess_pending(const struct sess *sp)
{
    return (sp->ssl != NULL && tls_pending(sp->ssl));
}

/*
 * Hold back partial segments (TCP_CORK) while a head and a sendfile(2)
 * body go out, so that the head rides with the first file bytes and the
 * body leaves in full segments; off sends what is held.  No-op on TLS.
 */
void sess_cork(struct sess *sp, bool on);

/*
 * The pool tasks that serve a session's requests, one per protocol (the
 * transports': HTTP/1, HTTP/2), injected by main before any listener
 * accepts, so that the acceptor depends on no layer above it.  A new
 * session gets one by what it negotiated: ALPN "h2" on a tls listener,
 * the HTTP/2 connection preface first on an h2c one, HTTP/1 otherwise.
 */
void sess_set_task(pool_task_f *h1, pool_task_f *h2);
/* Takes ownership of fd, which is already non-blocking. */
struct sess *sess_new(int fd, const struct lsock *ls, const struct sockaddr *sa);
/* Close the connection and free the session. */
void sess_close(struct sess **spp);
/*
 * Close after an error response: shut down our side, then discard what
 * the client still sends for up to `linger` seconds so that the kernel
 * does not reset the connection before the client reads our answer.
 */
void sess_close_lingering(struct sess **spp, double linger);
/*
 * Queue the session for a worker.  When the queue is full the client gets
 * a canned 503 with Retry-After and the session is closed (sess_dropped).
 */
void sess_schedule(struct sess **spp);
/* SIGTERM: from now on sessions close after their current response. */
void sess_drain(void);
bool sess_draining(void);
/*
 * A reload succeeded (rld.h): sess_epoch() changes, and a transport that
 * keeps long-lived connections (HTTP/2) tells its clients to come back on
 * new ones, which use the reloaded certificates and parameters.
 */
void sess_reloaded(void);
unsigned sess_epoch(void);

#endif
