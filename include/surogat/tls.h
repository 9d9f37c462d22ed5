/*
 * tls -- TLS for client connections (OpenSSL).
 *
 * A TLS listen socket owns a `tls_lsn`: the certificate files it was
 * given and the generation of SSL_CTXs built from them.  SIGHUP builds a
 * new generation and swaps it in; handshakes that start later use it,
 * connections already open keep the one they started with (each SSL holds
 * a reference on its generation), so a reload drops nothing.
 *
 * The handshake runs on a worker, never on the acceptor or the waiter.
 * After it, the session's I/O goes through tls_read() and friends, which
 * keep the vio_ contracts: deadlines, -1 with errno, writes complete.
 */
#ifndef SUROGAT_TLS_H
#define SUROGAT_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

struct sb;
struct ssl_st;  /* OpenSSL's SSL, without pulling its headers into every file */
struct tls_lsn; /* opaque */

#define TLS_MAX_CERTS 16

/* The files of one TLS listen address, as given on -a.  Paths are absolute. */
struct tls_conf {
    bool h2; /* ALPN offers h2 before http/1.1 (not with ,h1only) */
    unsigned ncert;
    struct {
        char *cert; /* PEM certificate chain, leaf first */
        char *key;  /* PEM private key */
        char *ocsp; /* DER OCSP response to staple, or NULL */
    } c[TLS_MAX_CERTS];
};

int tls_init(void); /* ticket keys; before the first tls_lsn_new() */
void tls_fini(void);

/*
 * Load the certificates of conf (copied) and build the SSL_CTXs.  NULL
 * with "spec: file: reason" in err when a file does not load.  Main
 * thread only, like tls_lsn_free() and tls_reload().
 */
struct tls_lsn *tls_lsn_new(const char *spec, const struct tls_conf *conf, struct sb *err);
void tls_lsn_free(struct tls_lsn **lnp); /* *lnp = NULL */
/*
 * A reload (SIGHUP) in two steps, so that it can go all or nothing with
 * the rest of the configuration.  _prepare() loads every listener's files
 * again, with the cipher parameters as they are now: 0 (*rp NULL when
 * there is no TLS listener), or -1 with "file: reason (-a SPEC)" in err
 * and nothing kept.  Then exactly one of _commit(), which puts the new
 * certificates in place for the handshakes that start from then on (those
 * under way finish with the old) and returns how many certificates it
 * loaded, or _abort().  Main thread.
 */
struct tls_reload;
int tls_reload_prepare(struct tls_reload **rp, struct sb *err);
unsigned tls_reload_commit(struct tls_reload **rp);
void tls_reload_abort(struct tls_reload **rp);
/* surogatd -t: whether conf's files load.  0, or -1 with "file: reason" in err. */
int tls_check(const struct tls_conf *conf, struct sb *err);
void tls_conf_clear(struct tls_conf *conf); /* free the paths */

/*
 * Whether a certificate name (a SAN dNSName or CN, "*.example.com"
 * allowed: one whole left-most label) matches a host name from SNI.
 * Case-insensitive; a wildcard never matches a bare "example.com".
 */
bool tls_name_match(const char *pattern, const char *host);

/*
 * Server-side handshake on the non-blocking fd, within deadline
 * (tim_mono() seconds).  0 with *sslp set, or -1 after counting
 * (tls_handshake_fail) and logging (at most once a second; peer names
 * the client).  Blocks: workers only.
 */
int tls_accept(struct tls_lsn *ln, int fd, struct ssl_st **sslp, const char *peer, double deadline);
/*
 * The same handshake in steps, for a caller that waits for the client's
 * flights without a thread (the waiter).  The first call, with *sslp
 * NULL, makes the SSL; each call runs the handshake as far as the bytes
 * there allow.  TLS_HS_WANT_READ: call again when fd turns readable
 * (*sslp is kept; nothing decrypted is pending, so poll(2) tells).
 * TLS_HS_DONE: counted as tls_handshake above.  TLS_HS_FAIL: counted and
 * logged as tls_accept()'s failures, *sslp freed and NULL.  A socket too
 * full for our flight is waited for here, until deadline.
 */
enum tls_hs { TLS_HS_DONE, TLS_HS_WANT_READ, TLS_HS_FAIL };
enum tls_hs tls_accept_step(struct tls_lsn *ln, int fd, struct ssl_st **sslp, const char *peer,
                            double deadline);
/*
 * A handshake whose client did not finish in time, found by whoever
 * watched it: counted and logged as a failure; *sslp (NULL when it never
 * began) is freed.
 */
void tls_accept_expired(struct ssl_st **sslp, const char *peer);
/* Send close_notify if the session is healthy (once), without waiting for the reply. */
void tls_notify_close(struct ssl_st *ssl);
/* tls_notify_close(), free the SSL and its reference on its generation; *sslp = NULL. */
void tls_close(struct ssl_st **sslp);

/* As vio_read(): >0, 0 at EOF (close_notify or TCP FIN), -1 with errno. */
ssize_t tls_read(struct ssl_st *ssl, int fd, void *buf, size_t len, double deadline);
/* One non-blocking attempt: -1 with EAGAIN when no whole record is there. */
ssize_t tls_read_nb(struct ssl_st *ssl, void *buf, size_t len);
/*
 * A multiplexed connection (HTTP/2) after its handshake.  tls_mux_new()
 * takes the SSL (*sslp NULL after).  Over TLS 1.3 with an AEAD suite --
 * all OpenSSL offers by default -- the records leave OpenSSL there: it
 * hands its keys over as it would to kernel TLS, the records are sealed
 * and opened in src/tls (tls_rec.c), and the SSL, about 15 KiB, is
 * freed.  Otherwise OpenSSL keeps carrying them.  NULL: the hand-over
 * failed halfway (counted as tls_handshake_fail); close the socket.
 *
 * tls_mux_read() is tls_read_nb() over the connection.  tls_mux_write()
 * writes buf as records, those of one call in as few system calls as it
 * can (one for 64 KiB), and returns the bytes written (>0) once the
 * socket takes no more or all is written, or -1 with EAGAIN when the
 * socket is full, or -1 with errno when the session failed.  After a
 * short write or EAGAIN the next call must present the bytes not written
 * first, at the same or another address, possibly followed by more:
 * records of them may be sealed already, and what the socket did not
 * take is sent by that call.  tls_mux_pending() and tls_mux_release()
 * are tls_pending() and tls_release(); with rest, a connection that has
 * rested a while also gives back its cipher states.  One thread at a
 * time (the transport's lock).
 */
struct tls_mux;
struct tls_mux *tls_mux_new(struct ssl_st **sslp);
ssize_t tls_mux_read(struct tls_mux *m, void *buf, size_t len);
ssize_t tls_mux_write(struct tls_mux *m, const void *buf, size_t len);
bool tls_mux_pending(struct tls_mux *m);
void tls_mux_release(struct tls_mux *m, bool rest);
void tls_mux_notify_close(struct tls_mux *m); /* as tls_notify_close() */
void tls_mux_close(struct tls_mux **mp);      /* as tls_close(); *mp = NULL */
bool tls_mux_own(const struct tls_mux *m);    /* whether the records left OpenSSL */

/* Facts of a handshake, for logs and policy: OpenSSL's names, or NULL (no SNI). */
enum tls_fact { TLS_FACT_VERSION, TLS_FACT_CIPHER, TLS_FACT_SNI };
const char *tls_fact(const struct ssl_st *ssl, enum tls_fact f);
const char *tls_mux_fact(const struct tls_mux *m, enum tls_fact f);

/*
 * The session goes idle: give its record buffers back (about 17 KiB with
 * read-ahead), unless they still hold bytes.  A read that found nothing
 * leaves OpenSSL's read buffer allocated, release mode or not, so an idle
 * connection would keep one for as long as it stays.  The next read or
 * write allocates them again.
 */
void tls_release(struct ssl_st *ssl);
/* Whether the handshake agreed on HTTP/2 (ALPN "h2"). */
bool tls_alpn_h2(const struct ssl_st *ssl);
/*
 * As vio_writev(): everything or -1.  Small pieces are gathered into
 * 16 KiB records (a head and a small body make one record, not two);
 * large ones are written in place.
 */
int tls_writev(struct ssl_st *ssl, int fd, struct iovec *iov, int iovcnt, double deadline);
int tls_write(struct ssl_st *ssl, int fd, const void *buf, size_t len, double deadline);
/*
 * sendfile(2) for a TLS session, which must encrypt in user space: len
 * bytes of filefd from off, read in 16 KiB pieces (one full record each)
 * and written.  0, or -1 with errno (EIO when the file is shorter).
 */
int tls_sendfile(struct ssl_st *ssl, int fd, int filefd, off_t off, size_t len, double deadline);
/*
 * As vio_wait_readable(), but what OpenSSL already holds counts as
 * readable: poll(2) cannot see it.
 */
int tls_wait_readable(struct ssl_st *ssl, int fd, double timeout);
/*
 * Whether a read would find something without the socket signalling:
 * decrypted bytes, or a whole record read ahead (listeners read ahead).
 * Never blocks (a peek may try one non-blocking read of the rest).
 */
bool tls_pending(struct ssl_st *ssl);

#endif
