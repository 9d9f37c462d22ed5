/*
 * The write side of a multiplexed TLS connection (tls__mux_mode()): a BIO
 * that sends several TLS records in one system call.
 *
 * OpenSSL hands its write BIO one record at a time, each from the same
 * buffer of its own, and the socket BIO makes each a write(2): a 64 KiB
 * batch of HTTP/2 frames was four system calls, four TCP segments and
 * four wake-ups of the client.  Here, while tls__write_nb() writes a
 * batch (tls__wbio_gather()), the records before its last are copied
 * into a buffer of the calling thread, and the last goes out with them
 * in one sendmsg(2), itself in place; outside a batch every write goes
 * straight out, as the socket BIO's does.
 *
 * Order and ownership.  Bytes a full socket did not take are kept by the
 * connection (w->left, allocated then, freed once sent) and go before
 * anything else, whoever writes next.  The thread's buffer is empty
 * whenever no write of a batch is under way: what the socket does not
 * take of it moves to w->left at once.  Whenever w->left holds bytes,
 * the SSL_write_ex() that put them there has failed with WANT_WRITE and
 * OpenSSL keeps a record pending: its caller retries (OpenSSL's rule),
 * and that retry sends them.  So no byte waits here unbeknown to the
 * caller, who sees output pending exactly as with the socket BIO.  A
 * batch's last record is the one write that never waits in the buffer,
 * which is what makes this hold (tls__write_nb() names it).
 *
 * Threads: a connection's BIO is used under its owner's lock (the h2
 * transport's), by one thread at a time; the gather buffer is the
 * thread's, allocated at its first batch, freed when it exits.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include <openssl/bio.h>
#include <openssl/ssl.h>

#include "surogat/defs.h"
#include "tls_priv.h"

/*
 * The thread's buffer: the records of a batch but its last.  An h2
 * batch is at most 64 KiB of plaintext (H2_OB_SIZE): three full records
 * and their overhead wait here, the fourth goes in place.  A batch of
 * more sends what waits when the next record would not fit.
 */
#define TB_CAP TLS_TBUF_CAP

struct tls_wbio {
    unsigned magic;
#define TLS_WBIO_MAGIC 0x2c9e51f4
    int fd;
    bool gather; /* a batch is being written: records may wait in the thread's buffer */
    bool last;   /* the next write is the batch's last record: out with what waits */
    struct tls_left left; /* what a full socket did not take: goes first */
};

struct tbuf {
    unsigned char *p;
    size_t len;
};

static BIO_METHOD *wbio_meth;
static int wbio_type;
static pthread_once_t wbio_once = PTHREAD_ONCE_INIT;
static pthread_key_t tb_key;
static __thread struct tbuf tb;
unsigned long tls__wbio_sends; /* sendmsg(2) calls (tests) */

static void
tb_free(void *p)
{
    free(p);
}

ssize_t
tls__send(int fd, struct iovec *iov, int n)
{
    struct msghdr mh = { .msg_iov = iov, .msg_iovlen = (size_t)n };
    ssize_t r;

    do {
        __atomic_add_fetch(&tls__wbio_sends, 1, __ATOMIC_RELAXED);
        r = sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    } while (r < 0 && errno == EINTR);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return (0);
    return (r);
}

void
tls__left_keep(struct tls_left *l, const void *p, size_t len)
{
    unsigned char *np;

    np = malloc(l->len + len);
    AN(np);
    if (l->len > 0)
        memcpy(np, l->p + l->off, l->len);
    memcpy(np + l->len, p, len);
    free(l->p);
    l->p = np;
    l->off = 0;
    l->len += len;
}

int
tls__left_out(struct tls_left *l, int fd)
{
    struct iovec iov;
    ssize_t r;

    while (l->len > 0) {
        iov = (struct iovec){ l->p + l->off, l->len };
        r = tls__send(fd, &iov, 1);
        if (r <= 0)
            return ((int)r);
        l->off += (size_t)r;
        l->len -= (size_t)r;
    }
    free(l->p);
    l->p = NULL;
    l->off = 0;
    return (1);
}

void
tls__left_free(struct tls_left *l)
{
    free(l->p);
    *l = (struct tls_left){ 0 };
}

/*
 * The thread's buffer out, and data after it, in one system call; what
 * the socket does not take of the buffer is kept.  Bytes of data sent,
 * 0 when none (the buffer was not all taken, or the socket is full), -1
 * on error.
 */
static ssize_t
tb_out(struct tls_wbio *w, const char *data, size_t n)
{
    struct iovec iov[2];
    int niov = 0;
    size_t had = tb.len;
    ssize_t r;

    if (had > 0)
        iov[niov++] = (struct iovec){ tb.p, had };
    if (n > 0)
        iov[niov++] = (struct iovec){ (void *)(uintptr_t)data, n };
    if (niov == 0)
        return (0);
    r = tls__send(w->fd, iov, niov);
    tb.len = 0;
    if (r < 0)
        return (-1);
    if ((size_t)r < had) {
        tls__left_keep(&w->left, tb.p + r, had - (size_t)r);
        return (0);
    }
    return (r - (ssize_t)had);
}

static int
wbio_write(BIO *b, const char *data, size_t n, size_t *written)
{
    struct tls_wbio *w = BIO_get_data(b);
    int lo;
    ssize_t r;

    BIO_clear_retry_flags(b);
    *written = 0;
    lo = tls__left_out(&w->left, w->fd);
    if (lo <= 0) {
        if (lo == 0)
            BIO_set_retry_write(b);
        return (-1);
    }
    if (w->gather && !w->last && tb.len + n <= TB_CAP) {
        (void)tls__tbuf();
        memcpy(tb.p + tb.len, data, n);
        tb.len += n;
        *written = n;
        return (1);
    }
    r = tb_out(w, data, n);
    if (r <= 0) {
        if (r == 0)
            BIO_set_retry_write(b);
        return (-1);
    }
    *written = (size_t)r;
    return (1);
}

static long
wbio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    struct tls_wbio *w = BIO_get_data(b);
    int lo;

    (void)num;
    switch (cmd) {
    case BIO_CTRL_FLUSH:
        /* OpenSSL flushes after handshake messages (a KeyUpdate, tickets). */
        BIO_clear_retry_flags(b);
        if (w->gather && tb.len > 0 && tb_out(w, NULL, 0) < 0)
            return (0);
        lo = tls__left_out(&w->left, w->fd);
        if (lo == 0)
            BIO_set_retry_write(b);
        return (lo > 0 ? 1 : 0);
    case BIO_CTRL_WPENDING:
        return ((long)(w->left.len + (w->gather ? tb.len : 0)));
    case BIO_C_GET_FD:
        if (ptr != NULL)
            *(int *)ptr = w->fd;
        return (w->fd);
    case BIO_CTRL_DUP:
        return (1);
    default:
        return (0);
    }
}

static int
wbio_destroy(BIO *b)
{
    struct tls_wbio *w = BIO_get_data(b);

    if (w == NULL)
        return (1);
    OBJ_CHECK(w, TLS_WBIO_MAGIC);
    tls__left_free(&w->left);
    OBJ_FREE(&w);
    BIO_set_data(b, NULL);
    return (1);
}

static pthread_once_t tb_once = PTHREAD_ONCE_INIT;

static void
tb_init(void)
{
    AZ(pthread_key_create(&tb_key, tb_free));
}

unsigned char *
tls__tbuf(void)
{
    if (tb.p == NULL) {
        AZ(pthread_once(&tb_once, tb_init));
        tb.p = malloc(TB_CAP);
        AN(tb.p);
        AZ(pthread_setspecific(tb_key, tb.p));
    }
    return (tb.p);
}

static void
wbio_meth_init(void)
{
    wbio_type = BIO_get_new_index() | BIO_TYPE_SOURCE_SINK;
    wbio_meth = BIO_meth_new(wbio_type, "surogat gather");
    AN(wbio_meth);
    AN(BIO_meth_set_write_ex(wbio_meth, wbio_write));
    AN(BIO_meth_set_ctrl(wbio_meth, wbio_ctrl));
    AN(BIO_meth_set_destroy(wbio_meth, wbio_destroy));
}

void
tls__wbio_set(SSL *ssl)
{
    struct tls_wbio *w;
    BIO *b;

    AZ(pthread_once(&wbio_once, wbio_meth_init));
    if (tls__wbio_of(ssl) != NULL)
        return;
    OBJ_NEW(w, TLS_WBIO_MAGIC);
    w->fd = SSL_get_wfd(ssl);
    SRG_ASSERT(w->fd >= 0);
    b = BIO_new(wbio_meth);
    AN(b);
    BIO_set_data(b, w);
    BIO_set_init(b, 1);
    SSL_set0_wbio(ssl, b); /* the socket BIO stays the read side's */
}

struct tls_wbio *
tls__wbio_of(const SSL *ssl)
{
    BIO *b = SSL_get_wbio(ssl);

    if (b == NULL || wbio_meth == NULL || BIO_method_type(b) != wbio_type)
        return (NULL);
    return (BIO_get_data(b));
}

void
tls__wbio_gather(struct tls_wbio *w, bool on)
{
    OBJ_CHECK(w, TLS_WBIO_MAGIC);
    w->gather = on;
    w->last = false;
    if (on || tb.len == 0)
        return;
    /*
     * A batch that failed before its last record: what waits goes now,
     * and what the socket does not take is kept for the next write.
     */
    (void)tb_out(w, NULL, 0);
}

void
tls__wbio_last(struct tls_wbio *w, bool last)
{
    w->last = last;
}
