/*
 * bcp -- backend connection pools.  One pool per endpoint.  A connection
 * has one owner: the pool while idle, a fetch while busy.  Idle
 * connections are reused last-in first-out so the warmest one goes first.
 *
 * A pool may speak TLS (a `bcp_tls`, owned by the backend): bcp_get()
 * then hands out connections whose handshake and certificate check are
 * done, and the bcp_read()/bcp_write() family hides which one it is.
 * Code holding a bcp_conn does its I/O through them, never on conn->fd.
 */
#ifndef SUROGAT_BCP_H
#define SUROGAT_BCP_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/uio.h>

struct bcp;
struct bcp_tls;
struct sb;
struct stat_be;
struct ssl_st; /* OpenSSL's SSL */

struct bcp_conn {
    unsigned magic;
#define BCP_CONN_MAGIC 0x1f8e5a73
    int fd;
    struct ssl_st *ssl;     /* NULL: plain TCP */
    bool reused;            /* came from the idle list: may have been closed by the peer */
    bool piped;             /* read with bcp_read_nb(): a pipe, whose length is the client's */
    unsigned char taglen;   /* bytes of tag; 0: none */
    unsigned char tag[108]; /* bcp_get_tagged(): what it was opened with (a PROXY header) */
    double t_idle;          /* tim_mono() when it went idle */
    /* tim_mono() of the first write since handed out, of the first byte after it; 0: none */
    double t_sent, t_first;
    struct bcp *pool;
    struct bcp_conn *next; /* idle list, under the pool lock */
};

enum bcp_err {
    BCP_OK,
    BCP_E_CONNECT, /* refused, unreachable, timed out, TLS handshake failed: 503 */
    BCP_E_BUSY,    /* max connections reached: 503 */
};

/*
 * max: most open connections, busy or idle; 0 means backend_max_connections.
 * tls: NULL for plain HTTP; else borrowed, and must outlive the pool.
 * name: the backend's, for the log; borrowed, and must outlive the pool.
 * st: the backend's counters (tbl/be_stats.h), or NULL; borrowed likewise.
 * The pool counts into st what it sees: requests (connections handed
 * out), new and reused connections, failures to connect, busy refusals,
 * bytes both ways (a PROXY header and TLS records aside: what HTTP
 * sends), timeouts of reads (before the first byte of an answer: first
 * byte, after it: between bytes), the refused responses bcp_refused()
 * is told of, and at bcp_recycle()/bcp_close() the times to first byte
 * and to the end of a connection that got one.
 */
struct bcp *bcp_new(const struct sockaddr *sa, socklen_t salen, unsigned max, struct bcp_tls *tls,
                    const char *name, struct stat_be *st);
void bcp_free(struct bcp **bpp); /* closes idle connections; none may be busy */
/*
 * A recycled connection unless `fresh`, else a new one within tmo seconds,
 * the TLS handshake included.  A failed handshake or certificate check is
 * BCP_E_CONNECT, counted (backend_tls_fail) and logged with its reason.
 *
 * A recycled connection is checked as it is taken, just before the
 * caller writes its request: one that is too old, that the backend
 * closed, or on which bytes are waiting is closed and the next one (or a
 * new one) is taken instead.  Waiting bytes are what a backend wrote past
 * its last response; read as the answer to the next request they would
 * answer (and be cached for) the wrong URL, so they are BCP_R_LATE_BYTES
 * (counted and logged).  Bytes that arrive after this check cannot be
 * told from the answer to the request that follows: the fetch keeps
 * connections whose last response may still be followed by something
 * out of the pool instead (see fetch.c).
 * May block: workers only.
 */
enum bcp_err bcp_get(struct bcp *bp, double tmo, bool fresh, struct bcp_conn **out);
/*
 * bcp_get() for connections that say who they are for: a new one sends
 * the taglen bytes of tag first (a PROXY header, before any TLS), and an
 * idle one is reused only if it was opened with the same tag, so that a
 * request never rides on a connection that names another client.  At
 * the pool's limit an idle connection of another tag is closed to make
 * room.  taglen at most sizeof conn->tag; 0 is bcp_get().
 */
enum bcp_err bcp_get_tagged(struct bcp *bp, double tmo, bool fresh, const void *tag, size_t taglen,
                            struct bcp_conn **out);
void bcp_recycle(struct bcp_conn **connp); /* back to the idle list */
void bcp_close(struct bcp_conn **connp);
unsigned bcp_idle_count(const struct bcp *bp);
unsigned bcp_conn_count(const struct bcp *bp); /* open, busy or idle */
unsigned bcp_busy_count(const struct bcp *bp); /* handed out or connecting */

/* Why a backend response or connection was refused: the rows of tbl/be_refuse.h. */
enum bcp_refuse {
#define REFUSE(name, counter, text) BCP_R_##name,
#include "surogat/tbl/be_refuse.h"
    BCP_R__N
};
/*
 * Count a refusal (the row's counter) and log it at LOG_WARNING as
 * "backend NAME: TEXT (what)", what being the request concerned ("GET
 * /x") or NULL.  At most a line a second per pool and reason: the next
 * line after a quiet second says how many were left out.  Any thread.
 */
void bcp_refused(struct bcp *bp, enum bcp_refuse why, const char *what);
const char *bcp_refuse_text(enum bcp_refuse why);

/*
 * I/O on a connection, with the vio_ contracts: deadlines in tim_mono()
 * seconds, -1 with errno (ETIMEDOUT past the deadline), writes complete.
 */
ssize_t bcp_read(struct bcp_conn *c, void *buf, size_t len, double deadline);
/* As vio_read_wait(): for an answer to what was just sent. */
ssize_t bcp_read_wait(struct bcp_conn *c, void *buf, size_t len, double deadline);
/* One non-blocking attempt: -1 with EAGAIN when nothing (no whole TLS record) is there. */
ssize_t bcp_read_nb(struct bcp_conn *c, void *buf, size_t len);
/*
 * What was read on c so far was an interim answer (1xx), skipped: the
 * next byte read begins the final one, for the time to first byte and
 * for which timeout a read's is.
 */
void bcp_interim(struct bcp_conn *c);
/* Decrypted bytes OpenSSL holds, which poll(2) on c->fd cannot see. */
bool bcp_pending(const struct bcp_conn *c);
int bcp_writev(struct bcp_conn *c, struct iovec *iov, int iovcnt, double deadline);
int bcp_write(struct bcp_conn *c, const void *buf, size_t len, double deadline);

/*
 * TLS to a backend: one client SSL_CTX with the trust store, the name to
 * send in SNI, the name (or address) the certificate must carry, and the
 * last session, offered for resumption by the next handshake.
 */
struct bcp_tls_conf {
    const char *name;        /* the backend's, for the log */
    const char *ca_file;     /* PEM CAs to trust; NULL: the system store */
    const char *sni;         /* server name sent; NULL: none (an address has none) */
    const char *verify_host; /* DNS name or IP address checked; NULL: none */
    const char *cert, *key;  /* PEM client certificate chain and key, or NULL */
    bool verify;             /* false: any certificate (and name) is accepted */
};

/* NULL with "ca_file 'x': reason" in err when a file does not load.  Any thread. */
struct bcp_tls *bcp_tls_new(const struct bcp_tls_conf *c, struct sb *err);
void bcp_tls_free(struct bcp_tls **tp); /* *tp = NULL */
/*
 * A client SSL on the non-blocking fd, SNI and the session to resume set:
 * for a caller driving the handshake itself (the probe thread).  Free it
 * with bcp_tls_ssl_free().
 */
struct ssl_st *bcp_tls_ssl(struct bcp_tls *t, int fd);
void bcp_tls_ssl_free(struct ssl_st **sslp); /* close_notify if healthy, once; *sslp = NULL */
/*
 * The handshake on fd within deadline.  0 with *sslp set, or -1 after
 * counting (backend_tls_fail) and logging why (at most a line a second).
 * Blocks: workers only.
 */
int bcp_tls_connect(struct bcp_tls *t, int fd, struct ssl_st **sslp, double deadline);

#endif
