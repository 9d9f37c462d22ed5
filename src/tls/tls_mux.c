/*
 * A multiplexed (HTTP/2) connection's TLS after its handshake, and the
 * hand-over that takes its records out of OpenSSL (see tls_rec.c for why).
 *
 * The hand-over, step by step:
 *  1. ALPN chose h2 over TLS 1.3 (tls.c's callback moves the SSL to its
 *     certificate's twin SSL_CTX, the one with the key log, and calls
 *     tls__hand_arm()): the SSL gets a write BIO of ours, OpenSSL's
 *     kernel-TLS option and exact reads (no read-ahead from then on: the
 *     bytes after the client's Finished must stay in the socket, for us).
 *  2. OpenSSL logs each secret as it derives it: the key log callback
 *     keeps the two application traffic secrets of an armed connection.
 *  3. After sending its Finished, OpenSSL offers its write keys to the
 *     BIO as it would to the kernel (BIO_CTRL_SET_KTLS, with the record
 *     sequence number).  The BIO takes them when the cipher is one of
 *     ours and the keys it derives from the logged secret are the very
 *     ones offered; from then on OpenSSL writes plaintext to the BIO with
 *     its content type (the session tickets), and the BIO seals records.
 *  4. tls_mux_new(), at the handshake's end: the read keys from the
 *     client's secret at sequence 0, the record layer moves to the
 *     tls_mux, and the SSL is freed.
 * Whenever a condition fails -- TLS 1.2 (never armed), a cipher suite we
 * do not seal, an OpenSSL that offers nothing -- OpenSSL keeps the
 * records and the tls_mux carries the SSL (tls_io.c's non-blocking calls,
 * and their gather BIO in place of ours).  The cost of the hand-over
 * is OpenSSL's: it formats every secret it logs, five a handshake, with
 * a sprintf per byte (about 240,000 instructions; bench/RESULTS.md,
 * 2026-11-27 10:05-11:19), which is why only these connections log.
 *
 * OpenSSL 3.0 names its kernel-TLS controls in bio.h (73 and 76 are
 * public, 72, 74 and 75 listed as internal) and hands a Linux
 * tls_crypto_info (linux/tls.h): both are what a kernel-TLS socket BIO
 * gets, and both are checked here (the keys must match).
 */
#include "config.h"

#include <linux/tls.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "surogat/defs.h"
#include "surogat/stat.h"
#include "tls_priv.h"

/* OpenSSL's kernel-TLS BIO controls (bio.h lists the first three as internal). */
enum {
    HAND_SET_KTLS = 72,
    HAND_SET_CTRL_MSG = 74,
    HAND_CLEAR_CTRL_MSG = 75,
};

/* An armed connection's handshake: the BIO's data. */
struct hand {
    unsigned magic;
#define HAND_MAGIC 0x1d7e4b92
    int fd;
    unsigned ctype; /* content type of OpenSSL's next write, once it writes plaintext (23 unless set) */
    size_t sec_len[2];             /* [0] the client's (read), [1] ours (write); 0: not logged */
    unsigned char sec[2][48];
    struct tls_rec *rec;           /* from the write keys' hand-over on */
    enum tls_aead aead;
};

struct tls_mux {
    unsigned magic;
#define TLS_MUX_MAGIC 0x40a2f6c5
    SSL *ssl;            /* OpenSSL carries the records, or */
    struct tls_rec *rec; /* they are carried here */
    const char *version; /* the facts of the handshake (OpenSSL's static names) */
    const char *cipher;
    char *sni; /* the client's server name, or NULL */
};

static BIO_METHOD *hand_meth;
static int hand_type;
static pthread_once_t hand_once = PTHREAD_ONCE_INIT;

static int
hand_write(BIO *b, const char *p, size_t n, size_t *written)
{
    struct hand *h = BIO_get_data(b);
    struct iovec iov;
    int lo;
    ssize_t r;

    BIO_clear_retry_flags(b);
    *written = 0;
    if (h->rec == NULL) {
        /* Before the hand-over: records OpenSSL sealed, straight out. */
        iov = (struct iovec){ (void *)(uintptr_t)p, n };
        r = tls__send(h->fd, &iov, 1);
        if (r <= 0) {
            if (r == 0)
                BIO_set_retry_write(b);
            return (-1);
        }
        *written = (size_t)r;
        return (1);
    }
    /* After: one plaintext record of h->ctype to seal; what the socket leaves is kept. */
    lo = tls__rec_flush(h->rec);
    if (lo <= 0) {
        if (lo == 0)
            BIO_set_retry_write(b);
        return (-1);
    }
    /* The type holds for this one write (as a kernel-TLS socket BIO's flag does). */
    if (tls__rec_put(h->rec, h->ctype, p, n) < 0)
        return (-1);
    h->ctype = 23;
    *written = n;
    return (1);
}

/* The AEAD of a Linux cipher type, and where its info keeps the sequence number; -1: not ours. */
static int
aead_of(const struct tls_crypto_info *ci, enum tls_aead *a, const unsigned char **seq,
        const unsigned char **key, const unsigned char **salt, const unsigned char **iv)
{
    switch (ci->cipher_type) {
    case TLS_CIPHER_AES_GCM_128: {
        const struct tls12_crypto_info_aes_gcm_128 *g = (const void *)ci;
        *a = TLS_AEAD_AES128GCM;
        *seq = g->rec_seq, *key = g->key, *salt = g->salt, *iv = g->iv;
        return (0);
    }
    case TLS_CIPHER_AES_GCM_256: {
        const struct tls12_crypto_info_aes_gcm_256 *g = (const void *)ci;
        *a = TLS_AEAD_AES256GCM;
        *seq = g->rec_seq, *key = g->key, *salt = g->salt, *iv = g->iv;
        return (0);
    }
    case TLS_CIPHER_CHACHA20_POLY1305: {
        const struct tls12_crypto_info_chacha20_poly1305 *g = (const void *)ci;
        *a = TLS_AEAD_CHACHA20;
        *seq = g->rec_seq, *key = g->key, *salt = g->salt, *iv = g->iv;
        return (0);
    }
    default:
        return (-1);
    }
}

/*
 * OpenSSL offers its write keys: take them (1) when the connection is
 * TLS 1.3 with one of our AEADs, the secret was logged, and the keys the
 * record layer derives from it are the ones offered; else 0, and OpenSSL
 * keeps them.
 */
static long
hand_take(struct hand *h, long which, const struct tls_crypto_info *ci)
{
    const unsigned char *seq, *key, *salt, *iv;
    unsigned char v[12];
    enum tls_aead a;
    uint64_t sq = 0;
    size_t slen;

    /* Only the first write key: OpenSSL 3.0 offers no read key for TLS 1.3. */
    if ((which & SSL3_CC_WRITE) == 0 || h->rec != NULL || ci->version != TLS_1_3_VERSION ||
        aead_of(ci, &a, &seq, &key, &salt, &iv) != 0 || h->sec_len[1] != tls__aead_hlen(a))
        return (0);
    for (int i = 0; i < 8; i++)
        sq = sq << 8 | seq[i];
    /* The iv as one: GCM's info splits off its first 4 bytes as the "salt". */
    slen = a == TLS_AEAD_CHACHA20 ? 0 : 4;
    memcpy(v, salt, slen);
    memcpy(v + slen, iv, 12 - slen);
    h->rec = tls__rec_new(h->fd, a);
    h->aead = a;
    if (tls__rec_key(h->rec, true, h->sec[1], sq) != 0 || !tls__rec_tx_is(h->rec, key, v)) {
        tls__rec_free(&h->rec);
        return (0);
    }
    return (1);
}

static long
hand_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    struct hand *h = BIO_get_data(b);
    int lo;

    switch (cmd) {
    case HAND_SET_KTLS:
        return (hand_take(h, num, ptr));
    case BIO_CTRL_GET_KTLS_SEND:
        return (h->rec != NULL);
    case BIO_CTRL_GET_KTLS_RECV:
        return (0);
    case HAND_SET_CTRL_MSG:
        h->ctype = (unsigned)num;
        return (1);
    case HAND_CLEAR_CTRL_MSG:
        h->ctype = 23;
        return (1);
    case BIO_CTRL_FLUSH:
        BIO_clear_retry_flags(b);
        if (h->rec == NULL)
            return (1);
        lo = tls__rec_flush(h->rec);
        if (lo == 0)
            BIO_set_retry_write(b);
        return (lo > 0 ? 1 : 0);
    case BIO_CTRL_WPENDING:
        return (h->rec != NULL ? (long)tls__rec_wpending(h->rec) : 0);
    case BIO_C_GET_FD:
        if (ptr != NULL)
            *(int *)ptr = h->fd;
        return (h->fd);
    case BIO_CTRL_DUP:
        return (1);
    default:
        return (0);
    }
}

static int
hand_destroy(BIO *b)
{
    struct hand *h = BIO_get_data(b);

    if (h == NULL)
        return (1);
    OBJ_CHECK(h, HAND_MAGIC);
    if (h->rec != NULL)
        tls__rec_free(&h->rec);
    OPENSSL_cleanse(h->sec, sizeof h->sec);
    OBJ_FREE(&h);
    BIO_set_data(b, NULL);
    return (1);
}

static void
hand_meth_init(void)
{
    /* A descriptor BIO: SSL_get_fd() and friends find the socket through it. */
    hand_type = BIO_get_new_index() | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR;
    hand_meth = BIO_meth_new(hand_type, "surogat hand-over");
    AN(hand_meth);
    AN(BIO_meth_set_write_ex(hand_meth, hand_write));
    AN(BIO_meth_set_ctrl(hand_meth, hand_ctrl));
    AN(BIO_meth_set_destroy(hand_meth, hand_destroy));
}

/* The hand-over BIO of an armed SSL (SSL_get_wbio() sees past a handshake's buffering BIO). */
static struct hand *
hand_of(const SSL *ssl)
{
    BIO *b = SSL_get_wbio(ssl);

    if (b == NULL || hand_meth == NULL || BIO_method_type(b) != hand_type)
        return (NULL);
    return (BIO_get_data(b));
}

void
tls__hand_arm(SSL *ssl)
{
    struct hand *h;
    BIO *b;

    AZ(pthread_once(&hand_once, hand_meth_init));
    if (hand_of(ssl) != NULL)
        return;
    OBJ_NEW(h, HAND_MAGIC);
    h->fd = SSL_get_wfd(ssl);
    h->ctype = 23;
    SRG_ASSERT(h->fd >= 0);
    b = BIO_new(hand_meth);
    AN(b);
    BIO_set_data(b, h);
    BIO_set_init(b, 1);
    SSL_set0_wbio(ssl, b); /* the socket BIO stays the read side's */
    SSL_set_options(ssl, SSL_OP_ENABLE_KTLS);
    SSL_set_read_ahead(ssl, 0);
}

/* "LABEL <client random, 64 hex> <secret, hex>": the secret into out, its length; 0 if not. */
static size_t
keylog_secret(const char *line, const char *label, unsigned char *out, size_t cap)
{
    size_t ll = strlen(label), n = 0;
    const char *p;

    if (strncmp(line, label, ll) != 0 || line[ll] != ' ')
        return (0);
    p = strchr(line + ll + 1, ' ');
    if (p == NULL)
        return (0);
    for (p++; p[0] != '\0' && p[1] != '\0' && n < cap; p += 2) {
        int hi = OPENSSL_hexchar2int((unsigned char)p[0]), lo = OPENSSL_hexchar2int((unsigned char)p[1]);
        if (hi < 0 || lo < 0)
            return (0);
        out[n++] = (unsigned char)(hi << 4 | lo);
    }
    return (*p == '\0' ? n : 0);
}

void
tls__keylog_cb(const SSL *ssl, const char *line)
{
    struct hand *h = hand_of(ssl);
    unsigned char sec[48];
    size_t n;
    int d;

    if (h == NULL)
        return;
    OBJ_CHECK(h, HAND_MAGIC);
    /* The other secrets OpenSSL logs (handshake, exporter) are not kept. */
    if ((n = keylog_secret(line, "CLIENT_TRAFFIC_SECRET_0", sec, sizeof sec)) > 0)
        d = 0;
    else if ((n = keylog_secret(line, "SERVER_TRAFFIC_SECRET_0", sec, sizeof sec)) > 0)
        d = 1;
    else
        return;
    memcpy(h->sec[d], sec, n);
    h->sec_len[d] = n;
    OPENSSL_cleanse(sec, sizeof sec);
}

struct tls_mux *
tls_mux_new(SSL **sslp)
{
    SSL *ssl = *sslp;
    struct hand *h = hand_of(ssl);
    struct tls_mux *m;
    const char *sni;

    AN(ssl);
    *sslp = NULL;
    OBJ_NEW(m, TLS_MUX_MAGIC);
    m->version = SSL_get_version(ssl);
    m->cipher = SSL_get_cipher_name(ssl);
    sni = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
    if (sni != NULL) {
        m->sni = strdup(sni);
        AN(m->sni);
    }
    if (h == NULL || h->rec == NULL) {
        /* OpenSSL keeps the records. */
        if (h != NULL)
            SSL_set_read_ahead(ssl, 1);
        m->ssl = ssl;
        tls__mux_mode(ssl);
        return (m);
    }
    /*
     * The write side went at the hand-over.  The read side starts at the
     * client's first record after its Finished, still in the socket --
     * unless OpenSSL read something after it, which exact reads forbid:
     * then the connection cannot go on either way.
     */
    if (!SSL_is_init_finished(ssl) || SSL_version(ssl) != TLS1_3_VERSION || SSL_has_pending(ssl) ||
        h->sec_len[0] != tls__aead_hlen(h->aead) || tls__rec_key(h->rec, false, h->sec[0], 0) != 0) {
        STAT_INC(tls_handshake_fail);
        tls__ssl_drop(&ssl);
        free(m->sni);
        OBJ_FREE(&m);
        return (NULL);
    }
    m->rec = h->rec;
    h->rec = NULL;
    tls__ssl_drop(&ssl); /* and with it the BIO and the secrets it kept */
    STAT_INC(tls_mux_own);
    return (m);
}

bool
tls_mux_own(const struct tls_mux *m)
{
    OBJ_CHECK(m, TLS_MUX_MAGIC);
    return (m->rec != NULL);
}

ssize_t
tls_mux_read(struct tls_mux *m, void *buf, size_t len)
{
    OBJ_CHECK(m, TLS_MUX_MAGIC);
    if (m->rec != NULL)
        return (tls__rec_read(m->rec, buf, len));
    return (tls_read_nb(m->ssl, buf, len));
}

ssize_t
tls_mux_write(struct tls_mux *m, const void *buf, size_t len)
{
    OBJ_CHECK(m, TLS_MUX_MAGIC);
    if (m->rec != NULL)
        return (tls__rec_write(m->rec, buf, len));
    return (tls__write_nb(m->ssl, buf, len));
}

bool
tls_mux_pending(struct tls_mux *m)
{
    OBJ_CHECK(m, TLS_MUX_MAGIC);
    if (m->rec != NULL)
        return (tls__rec_pending(m->rec));
    return (tls_pending(m->ssl));
}

void
tls_mux_release(struct tls_mux *m, bool rest)
{
    OBJ_CHECK(m, TLS_MUX_MAGIC);
    if (m->rec != NULL)
        tls__rec_release(m->rec, rest);
    else
        tls_release(m->ssl);
}

void
tls_mux_notify_close(struct tls_mux *m)
{
    OBJ_CHECK(m, TLS_MUX_MAGIC);
    if (m->rec != NULL)
        tls__rec_close_notify(m->rec);
    else
        tls_notify_close(m->ssl);
}

void
tls_mux_close(struct tls_mux **mp)
{
    struct tls_mux *m;

    OBJ_TAKE(m, mp, TLS_MUX_MAGIC);
    if (m->rec != NULL) {
        tls__rec_close_notify(m->rec);
        tls__rec_free(&m->rec);
    } else {
        tls_close(&m->ssl);
    }
    free(m->sni);
    OBJ_FREE(&m);
}

const char *
tls_mux_fact(const struct tls_mux *m, enum tls_fact f)
{
    OBJ_CHECK(m, TLS_MUX_MAGIC);
    switch (f) {
    case TLS_FACT_VERSION:
        return (m->version);
    case TLS_FACT_CIPHER:
        return (m->cipher);
    case TLS_FACT_SNI:
        return (m->sni);
    }
    return (NULL);
}

const char *
tls_fact(const SSL *ssl, enum tls_fact f)
{
    switch (f) {
    case TLS_FACT_VERSION:
        return (SSL_get_version(ssl));
    case TLS_FACT_CIPHER:
        return (SSL_get_cipher_name(ssl));
    case TLS_FACT_SNI:
        return (SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name));
    }
    return (NULL);
}
