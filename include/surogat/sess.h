/*
 * sess -- a client connection.  One owner at a time: the acceptor while
 * it is new, the pool queue while it waits for a worker, a worker while a
 * request runs, the waiter while idle.  It moves by `struct sess **`.
 */
#ifndef SUROGAT_SESS_H
#define SUROGAT_SESS_H

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <netinet/in.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "surogat/pool.h"
#include "surogat/tls.h"
#include "surogat/vio.h"

struct lsock;
struct pp_sess;
struct wrk;

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
    bool wexpired;          /* idle too long or past wdeadline: close when its event comes */
    /*
     * The waiter's (wtr.c, under its lock): whether the session is parked
     * or owned, and whether an event came while it was owned; 1 + its
     * slot in the waiter's table while its descriptor is in the set (0:
     * never parked, or forgotten); wout: taken out of the set while owned.
     */
    unsigned char wstate;
    bool wout;
    /*
     * The last read of the socket may have left bytes in it (it filled
     * what it asked for, or it was TLS, or nothing tracked has read it
     * yet): parking then makes the waiter look again, since its set
     * reports only bytes arriving after the last read.  sess_rx_note().
     */
    bool rx_more;
    unsigned char wowned_events;
    unsigned wslot;
    bool wbusy;             /* parked busy (wtr_park()): never expires (same lock) */
    double t_ready;         /* tim_mono() when the set reported it ready */
    double wdeadline;       /* wtr_enter_until()'s deadline (tim_mono()); 0 for wtr_enter() */
    unsigned wheap;         /* 1 + its index in the waiter's deadline heap; 0 when not in it */
    struct ssl_st *ssl; /* from the TLS handshake's first step on a tls listen socket, else NULL */
    struct tls_mux *mux; /* an HTTP/2 connection's TLS after the handshake (then ssl is NULL) */
    bool tls_new;       /* new from accept, its handshake not begun: shed like a request */
    /*
     * The client: the peer's address, or on a PROXY listen socket the one
     * its header carries ("0.0.0.0" and "0" for a Unix-socket peer without
     * one); for a request from a trusted_proxies peer, realip_apply()
     * replaces it with the X-Forwarded-For client, request by request.
     */
    char client_ip[INET6_ADDRSTRLEN];
    char client_port[8];
    /* What a PROXY header said beyond the client (pp.h), else NULL; freed with the session. */
    struct pp_sess *pp;
    bool tls_front; /* TLS terminated in front: a PROXY v2 header said so (PP2_CLIENT_SSL) */
    char peer_ip[INET6_ADDRSTRLEN]; /* realip_apply(): client_ip before any X-Forwarded-For */
    char peer_port[8];
    /* Kept input (sess_keep_input()): in_buf[in_off .. in_len) not read yet. */
    char *in_buf;
    size_t in_off;
    size_t in_len;
    /*
     * The request being received, while it is parked with the waiter
     * half read (the HTTP/1 transport's): no worker holds it meanwhile.
     */
    double t_req;  /* tim_mono() at its first byte; 0 between requests */
    double t_body; /* tim_mono() when its head was complete; 0 before */
    bool sent_100; /* 100 Continue went out for it */
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
/*
 * Whether the client's connection is TLS: ours, or one a terminator in
 * front ended and said so in its PROXY header (scheme of the cache key,
 * client.tls, X-Forwarded-Proto).  I/O decisions look at sp->ssl.
 */
static inline bool
sess_is_tls(const struct sess *sp)
{
    return (sp->ssl != NULL || sp->mux != NULL || sp->tls_front);
}
int sess_muxed(void); /* -1 with errno EPROTO */
size_t sess_input_read(struct sess *sp, void *buf, size_t len);
/*
 * A read of sp's socket for len bytes returned n: note whether it may
 * have left some there (sp->rx_more).  A plain read that returned less
 * than asked, EOF or EAGAIN emptied the socket; a TLS read says nothing
 * of the socket unless it would block.  Every read of a session's socket
 * goes through here, the transports' own included.  Returns n.
 */
static inline ssize_t
sess_rx_note(struct sess *sp, ssize_t n, size_t len)
{
    if (n < 0)
        sp->rx_more = errno != EAGAIN && errno != EWOULDBLOCK;
    else
        sp->rx_more = n > 0 && (sp->ssl != NULL || sp->mux != NULL || (size_t)n == len);
    return (n);
}
static inline ssize_t
sess_read(struct sess *sp, void *buf, size_t len, double deadline)
{
    if (__builtin_expect(sp->tp_conn != NULL, 0))
        return (sess_muxed());
    if (__builtin_expect(sp->in_buf != NULL, 0))
        return ((ssize_t)sess_input_read(sp, buf, len));
    if (__builtin_expect(sp->ssl != NULL, 0))
        return (sess_rx_note(sp, tls_read(sp->ssl, sp->fd, buf, len, deadline), len));
    return (sess_rx_note(sp, vio_read(sp->fd, buf, len, deadline), len));
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
/* The same, held back to share segments with what follows (vio_writev_more()); as is under TLS. */
static inline int
sess_writev_more(struct sess *sp, struct iovec *iov, int iovcnt, double deadline)
{
    if (__builtin_expect(sp->tp_conn != NULL, 0))
        return (sess_muxed());
    if (__builtin_expect(sp->ssl != NULL, 0))
        return (tls_writev(sp->ssl, sp->fd, iov, iovcnt, deadline));
    return (vio_writev_more(sp->fd, iov, iovcnt, deadline));
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
/* Bytes TLS has decrypted or read ahead (tls_pending(), tls_mux_pending()). */
static inline bool
sess_tls_pending(const struct sess *sp)
{
    return ((sp->ssl != NULL && tls_pending(sp->ssl)) ||
            (sp->mux != NULL && tls_mux_pending(sp->mux)));
}
/*
 * Request bytes already read (kept input, or bytes TLS has decrypted):
 * the session must not wait for poll(2) before reading them.
 */
static inline bool
sess_pending(const struct sess *sp)
{
    return (sp->in_buf != NULL || sess_tls_pending(sp));
}
/* An idle TLS session gives its record buffers back while it waits (tls_release()). */
static inline void
sess_tls_release(struct sess *sp)
{
    if (sp->ssl != NULL)
        tls_release(sp->ssl);
    else if (sp->mux != NULL)
        tls_mux_release(sp->mux, false);
}

/*
 * Kept input: bytes read from the connection that nothing has consumed
 * yet, held by the session itself while no worker holds it: a request
 * head or body that arrived in part and waits in the waiter for the rest,
 * or whatever a step before the request loop read beyond its own bytes
 * (a protocol header read in bulk) for the first request to take.
 *
 * sess_keep_input() copies buf[0 .. len) into a buffer of exactly that
 * size (malloc), which the session owns; there must be none kept yet
 * (the reads below hand out kept bytes before any socket byte, so a read
 * that would block has emptied it).  sess_read() and sess_read_nb() return
 * kept bytes first and the socket's after them: whoever reads next sees
 * one stream and need not know.  The buffer is freed once read, or by
 * sess_close().  Kept bytes count as pending (sess_pending()), so
 * wtr_enter() hands such a session straight back to a pool; only
 * wtr_enter_until() parks one with its kept bytes, for the socket to
 * complete them.  The gauge sess_kept_bytes counts kept bytes.
 */
void sess_keep_input(struct sess *sp, const void *buf, size_t len);
/* Move up to len kept bytes into buf (in order); how many.  Any thread owning sp. */
size_t sess_input_read(struct sess *sp, void *buf, size_t len);
static inline size_t
sess_input_len(const struct sess *sp)
{
    return (sp->in_len - sp->in_off);
}

/*
 * A request that did not arrive in time (timeout_req, req_body_min_rate):
 * answer a canned 408 with Connection: close and close the session.  The
 * answer is written without blocking, on plain connections only: under
 * TLS it could need a second write or the handshake's state, so the
 * client just sees the close.  Counted in sess_timeout_req.  Any thread,
 * never blocks: the waiter calls it for sessions past their deadline.
 */
void sess_close_timeout(struct sess **spp);

/*
 * The pool tasks that serve a session's requests, one per protocol (the
 * transports': HTTP/1, HTTP/2), injected by main before any listener
 * accepts, so that the acceptor depends on no layer above it.  A new
 * session gets one by what it negotiated: ALPN "h2" on a tls listener,
 * the HTTP/2 connection preface first on an h2c one, HTTP/1 otherwise.
 */
void sess_set_task(pool_task_f *h1, pool_task_f *h2);
/*
 * The steps a new session runs on a worker before its first request, in
 * order: the PROXY header on a PROXY listen socket (pp_sess_task()), the
 * TLS handshake on a tls one, then the request loop of its protocol.  The
 * PROXY step calls sess_after_proxy() to run the rest.
 */
void sess_after_proxy(struct wrk *wrk, struct sess *sp);
/*
 * Ready a session just accepted for the waiter's ready queue, where it
 * waits its turn as a ready parked session does: its first bytes are
 * normally in (TCP_DEFER_ACCEPT).  Returns the deadline of a TLS
 * session's handshake (tim_mono()), 0 for any other.
 */
double sess_start(struct sess *sp);
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
