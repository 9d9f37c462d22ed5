/*
 * TLS handshake and I/O for workers.
 *
 * Sockets are non-blocking, as everywhere: an SSL call that wants to
 * read or write waits in poll(2) for the time left to the caller's
 * deadline, then is retried with the same arguments (OpenSSL requires
 * that of a write).  Any fatal error marks the SSL for a quiet shutdown,
 * so that closing it sends no close_notify over a broken session.
 *
 * Failed handshakes are normal on the internet (scanners, old clients),
 * so each is counted but the log gets at most one line a second, with
 * the number left unsaid since the last one.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "surogat/defs.h"
#include "surogat/log.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/vio.h"
#include "tls_priv.h"

/* Plaintext gathered per SSL_write: one full record. */
#define TLS_COALESCE 16384

static struct log_limit fail_limit = LOG_LIMIT_INIT;

/*
 * OpenSSL's rule for SSL_get_error(): the thread's error queue must be
 * empty before the I/O call whose failure it then reads, or an error left
 * on this thread by another connection (or by anything else that uses
 * OpenSSL here) is read as this call's.  SSL_get_error() sees the queue
 * through ERR_peek_error() alone, so a queue that peeks empty is as good
 * as a cleared one; ERR_clear_error() itself frees the file and function
 * names of all 16 slots, 32 free()s, on every read and write, and the
 * queue is nearly always empty (whoever sees an error clears it).
 */
static void
err_empty(void)
{
    if (ERR_peek_error() != 0)
        ERR_clear_error();
}

/*
 * What to do after an SSL call failed with error e: 1 retry (after
 * waiting), 0 at EOF, -1 failed with errno set.
 */
static int
want(SSL *ssl, int fd, int e, double deadline)
{
    int w;

    switch (e) {
    case SSL_ERROR_WANT_READ:
        w = vio_wait(fd, POLLIN, deadline);
        break;
    case SSL_ERROR_WANT_WRITE:
        w = vio_wait(fd, POLLOUT, deadline);
        break;
    case SSL_ERROR_ZERO_RETURN:
        return (0);
    case SSL_ERROR_SYSCALL:
        SSL_set_quiet_shutdown(ssl, 1);
        if (errno == 0)
            errno = ECONNRESET;
        ERR_clear_error();
        return (-1);
    default:
        SSL_set_quiet_shutdown(ssl, 1);
        ERR_clear_error();
        errno = EPROTO;
        return (-1);
    }
    if (w == 0) {
        SSL_set_quiet_shutdown(ssl, 1); /* the peer is not reading: do not write to it */
        errno = ETIMEDOUT;
        return (-1);
    }
    return (w > 0 ? 1 : -1);
}

/* A failed handshake: counted, logged at most once a second, the SSL freed. */
static void
accept_failed(SSL **sslp, const char *peer, const char *why)
{
    STAT_INC(tls_handshake_fail);
    log_limited(&fail_limit, "tls_handshake_fail", LOG_NOTICE, "TLS handshake with %s failed: %s",
                peer, why);
    if (*sslp != NULL)
        tls_close(sslp);
}

enum tls_hs
tls_accept_step(struct tls_lsn *ln, int fd, SSL **sslp, const char *peer, double deadline)
{
    struct tls_gen *gen;
    char why[256];
    unsigned long ee;
    SSL *ssl = *sslp;
    int rv, e;

    if (ssl == NULL) {
        gen = tls__gen_get(ln);
        ssl = tls__ssl_new(gen);
        AN(SSL_set_app_data(ssl, gen)); /* the reference now belongs to the SSL */
        AN(SSL_set_fd(ssl, fd));
        SSL_set_accept_state(ssl);
        *sslp = ssl;
    }
    for (;;) {
        ERR_clear_error();
        errno = 0;
        rv = SSL_do_handshake(ssl);
        if (rv == 1)
            break;
        e = SSL_get_error(ssl, rv);
        if (e == SSL_ERROR_WANT_READ)
            return (TLS_HS_WANT_READ);
        ee = ERR_peek_error();
        if (e == SSL_ERROR_SSL && ee != 0)
            ERR_error_string_n(ee, why, sizeof why);
        else if (e == SSL_ERROR_SYSCALL || e == SSL_ERROR_ZERO_RETURN)
            snprintf(why, sizeof why, "%s", errno != 0 ? strerror(errno) : "client left");
        else
            snprintf(why, sizeof why, "timed out");
        /* A full socket during the first flight is rare: wait for it here. */
        if (want(ssl, fd, e, deadline) > 0)
            continue;
        accept_failed(sslp, peer, why);
        return (TLS_HS_FAIL);
    }
    STAT_INC(tls_handshake);
    if (SSL_session_reused(ssl))
        STAT_INC(tls_resumed);
    return (TLS_HS_DONE);
}

void
tls_accept_expired(struct ssl_st **sslp, const char *peer)
{
    accept_failed(sslp, peer, "timed out");
}

int
tls_accept(struct tls_lsn *ln, int fd, SSL **sslp, const char *peer, double deadline)
{
    *sslp = NULL;
    for (;;) {
        switch (tls_accept_step(ln, fd, sslp, peer, deadline)) {
        case TLS_HS_DONE:
            return (0);
        case TLS_HS_FAIL:
            return (-1);
        case TLS_HS_WANT_READ:
            if (vio_wait(fd, POLLIN, deadline) > 0)
                continue;
            tls_accept_expired(sslp, peer);
            return (-1);
        }
    }
}

void
tls_notify_close(SSL *ssl)
{
    AN(ssl);
    if (!SSL_is_init_finished(ssl) || (SSL_get_shutdown(ssl) & SSL_SENT_SHUTDOWN))
        return;
    /* One non-blocking try: a client that does not read loses its close_notify, nothing more. */
    ERR_clear_error();
    (void)SSL_shutdown(ssl);
    ERR_clear_error();
}

void
tls_close(SSL **sslp)
{
    SSL *ssl = *sslp;
    struct tls_gen *gen;

    *sslp = NULL;
    AN(ssl);
    tls_notify_close(ssl);
    gen = SSL_get_app_data(ssl);
    tls__ssl_done(gen, &ssl);
    tls__gen_unref(&gen);
}

ssize_t
tls_read(SSL *ssl, int fd, void *buf, size_t len, double deadline)
{
    size_t n;
    int w;

    for (;;) {
        err_empty();
        errno = 0;
        if (SSL_read_ex(ssl, buf, len, &n) == 1)
            return ((ssize_t)n);
        w = want(ssl, fd, SSL_get_error(ssl, 0), deadline);
        if (w <= 0)
            return (w);
    }
}

ssize_t
tls_read_nb(SSL *ssl, void *buf, size_t len)
{
    size_t n;
    int e;

    err_empty();
    errno = 0;
    if (SSL_read_ex(ssl, buf, len, &n) == 1)
        return ((ssize_t)n);
    e = SSL_get_error(ssl, 0);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        errno = EAGAIN;
        return (-1);
    }
    /* Not waiting (the deadline has passed): want() only sorts EOF from failure. */
    return (want(ssl, -1, e, 0));
}

int
tls_write(SSL *ssl, int fd, const void *buf, size_t len, double deadline)
{
    size_t n;
    int w;

    while (len > 0) {
        err_empty();
        errno = 0;
        if (SSL_write_ex(ssl, buf, len, &n) == 1) {
            buf = (const char *)buf + n;
            len -= n;
            continue;
        }
        w = want(ssl, fd, SSL_get_error(ssl, 0), deadline);
        if (w <= 0) {
            if (w == 0)
                errno = EPIPE; /* the client closed while we were writing */
            return (-1);
        }
    }
    return (0);
}

int
tls_writev(SSL *ssl, int fd, struct iovec *iov, int iovcnt, double deadline)
{
    char buf[TLS_COALESCE];
    size_t fill = 0, k;

    for (; iovcnt > 0; iov++, iovcnt--) {
        const char *p = iov->iov_base;
        size_t left = iov->iov_len;

        while (left > 0) {
            if (fill == 0 && left >= sizeof buf) {
                /* A large piece goes out in place; OpenSSL cuts it into full records. */
                if (tls_write(ssl, fd, p, left, deadline) != 0)
                    return (-1);
                break;
            }
            k = SRG_MIN(left, sizeof buf - fill);
            memcpy(buf + fill, p, k);
            fill += k;
            p += k;
            left -= k;
            if (fill == sizeof buf) {
                if (tls_write(ssl, fd, buf, fill, deadline) != 0)
                    return (-1);
                fill = 0;
            }
        }
        iov->iov_len = 0;
    }
    if (fill > 0 && tls_write(ssl, fd, buf, fill, deadline) != 0)
        return (-1);
    return (0);
}

int
tls_sendfile(SSL *ssl, int fd, int filefd, off_t off, size_t len, double deadline)
{
    char buf[TLS_COALESCE];
    ssize_t n;

    while (len > 0) {
        n = pread(filefd, buf, SRG_MIN(len, sizeof buf), off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            if (n == 0)
                errno = EIO; /* the file shrank under us: never pad a response */
            return (-1);
        }
        if (tls_write(ssl, fd, buf, (size_t)n, deadline) != 0)
            return (-1);
        off += n;
        len -= (size_t)n;
    }
    return (0);
}

void
tls__mux_mode(SSL *ssl)
{
    /*
     * A write returns once a record went, and a retry after WANT_WRITE
     * may come from a buffer the caller has since compacted or grown.
     */
    SSL_set_mode(ssl, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    tls__wbio_set(ssl);
}

/* What tls__write_nb() returns for a write that failed with SSL error e. */
static ssize_t
write_failed(SSL *ssl, int e)
{
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        errno = EAGAIN;
        return (-1);
    }
    /* Not waiting: want() only sorts EOF from failure. */
    if (want(ssl, -1, e, 0) == 0)
        errno = EPIPE; /* the client closed while we were writing */
    return (-1);
}

ssize_t
tls__write_nb(SSL *ssl, const void *buf, size_t len)
{
    struct tls_wbio *w = tls__wbio_of(ssl);
    const char *p = buf;
    size_t n, done = 0, k;
    int e = SSL_ERROR_NONE;

    if (w == NULL || len <= TLS_COALESCE) {
        err_empty();
        errno = 0;
        if (SSL_write_ex(ssl, buf, len, &n) == 1)
            return ((ssize_t)n);
        return (write_failed(ssl, SSL_get_error(ssl, 0)));
    }
    /*
     * A batch: a record per call (partial writes), the last one named,
     * so that the BIO sends them all with it (tls_wbio.c).  A record
     * OpenSSL keeps pending from an earlier call is at most one, and the
     * same bytes begin buf (OpenSSL's rule for a retry): it goes first.
     */
    tls__wbio_gather(w, true);
    while (done < len) {
        k = SRG_MIN(len - done, (size_t)TLS_COALESCE);
        tls__wbio_last(w, done + k == len);
        err_empty();
        errno = 0;
        if (SSL_write_ex(ssl, p + done, k, &n) != 1) {
            e = SSL_get_error(ssl, 0);
            break;
        }
        done += n;
    }
    tls__wbio_gather(w, false);
    if (done > 0)
        return ((ssize_t)done); /* a failure after is the next call's to report */
    return (write_failed(ssl, e));
}

void
tls_release(SSL *ssl)
{
    /* Mid-handshake they stay; with something pending they stay too (it returns 0). */
    if (SSL_is_init_finished(ssl))
        (void)SSL_free_buffers(ssl);
}

bool
tls_alpn_h2(const SSL *ssl)
{
    const unsigned char *p;
    unsigned len;

    SSL_get0_alpn_selected(ssl, &p, &len);
    return (len == 2 && memcmp(p, "h2", 2) == 0);
}

bool
tls_pending(SSL *ssl)
{
    char c;
    size_t n;
    int e;

    if (SSL_pending(ssl) > 0)
        return (true);
    /* Peeking during a handshake would run the handshake. */
    if (!SSL_has_pending(ssl) || !SSL_is_init_finished(ssl))
        return (false);
    /*
     * Bytes read ahead but not opened: a whole record would never be
     * signalled by the socket, the start of one will (by its rest).
     * Peeking opens what is whole; WANT_READ means only a part is there.
     */
    err_empty();
    errno = 0;
    if (SSL_peek_ex(ssl, &c, 1, &n) == 1)
        return (true);
    e = SSL_get_error(ssl, 0);
    err_empty();
    /* EOF and errors count as news: the next read reports them at once. */
    return (e != SSL_ERROR_WANT_READ && e != SSL_ERROR_WANT_WRITE);
}

int
tls_wait_readable(SSL *ssl, int fd, double timeout)
{
    if (tls_pending(ssl))
        return (1);
    return (vio_wait_readable(fd, timeout));
}
