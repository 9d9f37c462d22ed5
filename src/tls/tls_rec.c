/*
 * The TLS 1.3 record layer of a multiplexed connection once OpenSSL has
 * let go of it (tls_mux.c): records sealed and opened here, with
 * OpenSSL's ciphers.
 *
 * Why.  OpenSSL 3.0 keeps about 15 KiB for every live TLS 1.3 connection
 * that no call gives back while the connection lives (the SSL object,
 * two cipher states, the session): 144 MiB for 10,000 idle HTTP/2
 * connections.  Kernel TLS is OpenSSL's own way past it: after the
 * handshake the kernel seals and opens the records, OpenSSL hands it the
 * keys through the write BIO, and the SSL carries no traffic.  This file
 * is that other side, in user space: a connection whose records are
 * carried here holds its secrets, keys and sequence numbers (a few
 * hundred bytes), cipher states only while it has traffic, and no SSL.
 *
 * What is written here is RFC 8446's framing, section 5, and the
 * messages a server takes after the handshake: the header, the nonce per
 * record, the inner content type and its padding, the sequence numbers,
 * KeyUpdate (4.6.3) and alerts (6).  The cryptography is OpenSSL's: the
 * AEAD ciphers (EVP) and the key schedule's expansion (its TLS13-KDF).
 * The handshake is OpenSSL's, and so is every record before its end.
 *
 * Reads.  Bytes come from the socket into a buffer of one record's size
 * at most, records are opened in place, their plaintext is handed out
 * from there.  The buffer exists while it holds bytes or the connection
 * has traffic (tls__rec_release()).  What a peer may send after the
 * handshake: application data; alerts (close_notify is the end, the
 * others fatal, user_canceled ignored); KeyUpdate, alone in its record
 * (OpenSSL, NSS, BoringSSL and Go write it so; a KeyUpdate split across
 * records or sharing one is refused with unexpected_message, as is every
 * other handshake message).
 *
 * Writes.  Plaintext is cut into records of at most 16 KiB, sealed into
 * the calling thread's buffer (no copy before the cipher: it reads the
 * caller's bytes and writes the record) and sent in one sendmsg(2).  The
 * contract is OpenSSL's SSL_write with partial writes and moving
 * buffers, so that the HTTP/2 transport writes the same way over either:
 * the bytes returned are those whose records went out whole; records the
 * socket did not take are kept, already sealed (every nonce is used
 * once), and the caller's next write presents their plaintext first,
 * which is then skipped.  So output is never held here unbeknown to the
 * caller.  A KeyUpdate the peer asked for goes before our next record.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>

#include "surogat/defs.h"
#include "surogat/stat.h"
#include "tls_priv.h"

#define REC_HDR 5
#define REC_TAG 16
#define REC_PLAIN_MAX 16384                        /* 2^14: plaintext of one record */
#define REC_CT_MAX (REC_PLAIN_MAX + 256)           /* 2^14 + 256: a record's body */
#define REC_INNER_MAX (REC_PLAIN_MAX + 1)          /* content and its type byte */
#define RB_CAP (REC_HDR + REC_CT_MAX)              /* the read buffer: one whole record */
#define REC_OVERHEAD (REC_HDR + 1 + REC_TAG)       /* what a record adds to its plaintext */
#define BATCH_RECS 8
/*
 * Our keys are renewed after this many records (RFC 8446 5.5: AES-GCM
 * keys are good for 2^24.5 full records; 2^24 for every AEAD here).
 */
#define REC_REKEY_AT (UINT64_C(1) << 24)

/* Content types (RFC 8446 B.1) and the alerts we send or take. */
enum {
    CT_ALERT = 21,
    CT_HANDSHAKE = 22,
    CT_APPDATA = 23,
};
enum {
    AL_CLOSE_NOTIFY = 0,
    AL_UNEXPECTED_MESSAGE = 10,
    AL_BAD_RECORD_MAC = 20,
    AL_RECORD_OVERFLOW = 22,
    AL_DECODE_ERROR = 50,
    AL_ILLEGAL_PARAMETER = 47,
    AL_USER_CANCELED = 90,
};
#define HS_KEY_UPDATE 24

/* The AEADs, as OpenSSL names them, with their hash (the secrets' length) and key length. */
static const struct aead_info {
    const char *cipher;
    const char *md;
    unsigned hlen, klen;
} aeads[] = {
    [TLS_AEAD_AES128GCM] = { "AES-128-GCM", "SHA256", 32, 16 },
    [TLS_AEAD_AES256GCM] = { "AES-256-GCM", "SHA384", 48, 32 },
    [TLS_AEAD_CHACHA20] = { "ChaCha20-Poly1305", "SHA256", 32, 32 },
};

struct rec_dir {
    EVP_CIPHER_CTX *ctx; /* NULL while the connection rests */
    uint64_t seq;
    unsigned char secret[48];
    unsigned char key[32];
    unsigned char iv[12];
};

/* The read side's state: records open, or after the peer's close_notify or a failure. */
enum rec_rstate { REC_OPEN, REC_PEER_CLOSED, REC_FAILED };

struct tls_rec {
    unsigned magic;
#define TLS_REC_MAGIC 0x5e0c7a31
    int fd;
    enum tls_aead aead;
    enum rec_rstate rstate;
    int rerr;          /* errno of a failure (REC_FAILED) */
    bool have_rx;      /* read keys installed */
    bool kupd_owed;    /* a KeyUpdate of ours goes before our next record: asked for, or due */
    bool kupd_ask;     /* and it asks the peer for theirs */
    bool sent_close;   /* close_notify or a fatal alert went (or was tried): nothing more */
    bool wfailed;      /* the socket failed under a write */
    struct rec_dir tx, rx;
    unsigned char *rb; /* read buffer: raw records from rb_off to rb_end */
    size_t rb_off, rb_end;
    size_t pt_off, pt_len; /* an opened record's plaintext not yet read, in rb */
    struct tls_left left;  /* sealed records the socket did not take */
    size_t held;           /* plaintext of those records, presented again by the next write */
};

/*
 * Made once: the ciphers, and for each AEAD a TLS13-KDF context with its
 * digest, mode and prefix set, which each expansion reuses under its
 * lock, giving only the secret and the label.  A context given the
 * digest by name fetches it each time: four expansions a hand-over cost
 * more than the rest of it that way (OpenSSL 3.0 cannot duplicate one).
 */
static EVP_CIPHER *ciphers[ARRAY_LEN(aeads)];
static EVP_KDF_CTX *kdf_ctx[ARRAY_LEN(aeads)];
static pthread_mutex_t kdf_mtx[ARRAY_LEN(aeads)] = {
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER
};
static pthread_once_t rec_once = PTHREAD_ONCE_INIT;

static void
rec_init(void)
{
    static const char prefix[] = "tls13 ";
    int mode = EVP_KDF_HKDF_MODE_EXPAND_ONLY;
    OSSL_PARAM params[4];
    EVP_KDF *kdf;

    kdf = EVP_KDF_fetch(NULL, "TLS13-KDF", NULL);
    AN(kdf);
    for (size_t i = 0; i < ARRAY_LEN(aeads); i++) {
        ciphers[i] = EVP_CIPHER_fetch(NULL, aeads[i].cipher, NULL);
        AN(ciphers[i]);
        kdf_ctx[i] = EVP_KDF_CTX_new(kdf);
        AN(kdf_ctx[i]);
        params[0] = OSSL_PARAM_construct_int(OSSL_KDF_PARAM_MODE, &mode);
        params[1] = OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST,
                                                     (char *)(uintptr_t)aeads[i].md, 0);
        params[2] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_PREFIX,
                                                      (void *)(uintptr_t)prefix, sizeof prefix - 1);
        params[3] = OSSL_PARAM_construct_end();
        AN(EVP_KDF_CTX_set_params(kdf_ctx[i], params));
    }
    EVP_KDF_free(kdf); /* the contexts hold it */
}

unsigned
tls__aead_hlen(enum tls_aead a)
{
    return (aeads[a].hlen);
}

/* HKDF-Expand-Label(secret, label, "", olen) of RFC 8446 7.1, by OpenSSL's TLS13-KDF. */
static int
expand_label(enum tls_aead a, const unsigned char *secret, const char *label, unsigned char *out,
             size_t olen)
{
    OSSL_PARAM params[3];
    int rv;

    params[0] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, (void *)(uintptr_t)secret,
                                                  aeads[a].hlen);
    params[1] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_LABEL, (void *)(uintptr_t)label,
                                                  strlen(label));
    params[2] = OSSL_PARAM_construct_end();
    AZ(pthread_mutex_lock(&kdf_mtx[a]));
    rv = EVP_KDF_derive(kdf_ctx[a], out, olen, params) == 1 ? 0 : -1;
    AZ(pthread_mutex_unlock(&kdf_mtx[a]));
    return (rv);
}

int
tls__rec_derive(enum tls_aead a, const unsigned char *secret, unsigned char key[32], unsigned char iv[12])
{
    AZ(pthread_once(&rec_once, rec_init));
    if (expand_label(a, secret, "key", key, aeads[a].klen) != 0 ||
        expand_label(a, secret, "iv", iv, 12) != 0)
        return (-1);
    return (0);
}

/* d takes secret (the next key's, or the first), its key and iv, sequence seq. */
static int
dir_key(struct tls_rec *r, struct rec_dir *d, const unsigned char *secret, uint64_t seq, int enc)
{
    unsigned char key[32], iv[12];

    if (tls__rec_derive(r->aead, secret, key, iv) != 0)
        return (-1);
    memcpy(d->secret, secret, aeads[r->aead].hlen);
    memcpy(d->key, key, sizeof key);
    memcpy(d->iv, iv, sizeof iv);
    OPENSSL_cleanse(key, sizeof key);
    d->seq = seq;
    if (d->ctx != NULL && EVP_CipherInit_ex(d->ctx, NULL, NULL, d->key, NULL, enc) != 1)
        return (-1);
    return (0);
}

/* The next generation of d's secret (RFC 8446 7.2), after a KeyUpdate. */
static int
dir_update(struct tls_rec *r, struct rec_dir *d, int enc)
{
    unsigned char next[48];
    int rv;

    if (expand_label(r->aead, d->secret, "traffic upd", next, aeads[r->aead].hlen) != 0)
        return (-1);
    rv = dir_key(r, d, next, 0, enc);
    OPENSSL_cleanse(next, sizeof next);
    return (rv);
}

static EVP_CIPHER_CTX *
dir_ctx(struct tls_rec *r, struct rec_dir *d, int enc)
{
    if (d->ctx != NULL)
        return (d->ctx);
    d->ctx = EVP_CIPHER_CTX_new();
    if (d->ctx == NULL)
        return (NULL);
    if (EVP_CipherInit_ex(d->ctx, ciphers[r->aead], NULL, d->key, NULL, enc) != 1) {
        EVP_CIPHER_CTX_free(d->ctx);
        d->ctx = NULL;
    }
    return (d->ctx);
}

/* The per-record nonce: the iv with the sequence number xored into its last 8 bytes. */
static void
nonce(const struct rec_dir *d, unsigned char n[12])
{
    memcpy(n, d->iv, 12);
    for (int i = 0; i < 8; i++)
        n[11 - i] ^= (unsigned char)(d->seq >> (8 * i));
}

struct tls_rec *
tls__rec_new(int fd, enum tls_aead a)
{
    struct tls_rec *r;

    AZ(pthread_once(&rec_once, rec_init));
    SRG_ASSERT((unsigned)a < ARRAY_LEN(aeads));
    OBJ_NEW(r, TLS_REC_MAGIC);
    r->fd = fd;
    r->aead = a;
    r->rstate = REC_OPEN;
    return (r);
}

int
tls__rec_key(struct tls_rec *r, bool tx, const unsigned char *secret, uint64_t seq)
{
    OBJ_CHECK(r, TLS_REC_MAGIC);
    if (dir_key(r, tx ? &r->tx : &r->rx, secret, seq, tx ? 1 : 0) != 0)
        return (-1);
    if (!tx)
        r->have_rx = true;
    return (0);
}

bool
tls__rec_tx_is(const struct tls_rec *r, const unsigned char *key, const unsigned char iv[12])
{
    OBJ_CHECK(r, TLS_REC_MAGIC);
    return (CRYPTO_memcmp(r->tx.key, key, aeads[r->aead].klen) == 0 &&
            CRYPTO_memcmp(r->tx.iv, iv, 12) == 0);
}

/*
 * One record of type ct around n bytes of in, sealed into out (room for
 * n + REC_OVERHEAD): its length, or -1.
 */
static ssize_t
seal(struct tls_rec *r, unsigned ct, const void *in, size_t n, unsigned char *out)
{
    struct rec_dir *d = &r->tx;
    EVP_CIPHER_CTX *ctx = dir_ctx(r, d, 1);
    size_t len = n + 1 + REC_TAG;
    unsigned char nc[12], type = (unsigned char)ct;
    int k;

    SRG_ASSERT(n <= REC_PLAIN_MAX);
    if (ctx == NULL || d->seq == UINT64_MAX)
        return (-1); /* 2^64 records would reuse a nonce: never */
    out[0] = CT_APPDATA;
    out[1] = 0x03;
    out[2] = 0x03;
    out[3] = (unsigned char)(len >> 8);
    out[4] = (unsigned char)len;
    nonce(d, nc);
    if (EVP_CipherInit_ex(ctx, NULL, NULL, NULL, nc, 1) != 1 ||
        EVP_CipherUpdate(ctx, NULL, &k, out, REC_HDR) != 1 ||
        (n > 0 && EVP_CipherUpdate(ctx, out + REC_HDR, &k, in, (int)n) != 1) ||
        EVP_CipherUpdate(ctx, out + REC_HDR + n, &k, &type, 1) != 1 ||
        EVP_CipherFinal_ex(ctx, out + REC_HDR + n + 1, &k) != 1 ||
        EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_GET_TAG, REC_TAG, out + REC_HDR + n + 1) != 1)
        return (-1);
    d->seq++;
    return ((ssize_t)(REC_HDR + len));
}

int
tls__rec_flush(struct tls_rec *r)
{
    int lo;

    OBJ_CHECK(r, TLS_REC_MAGIC);
    lo = tls__left_out(&r->left, r->fd);
    if (lo < 0)
        r->wfailed = true;
    return (lo);
}

ssize_t
tls__rec_put(struct tls_rec *r, unsigned ct, const void *p, size_t n)
{
    unsigned char out[REC_PLAIN_MAX + REC_OVERHEAD];
    struct iovec iov;
    ssize_t len, s;

    OBJ_CHECK(r, TLS_REC_MAGIC);
    if (n > REC_PLAIN_MAX || (len = seal(r, ct, p, n, out)) < 0) {
        errno = EPROTO;
        return (-1);
    }
    s = 0;
    if (r->left.len == 0) {
        iov = (struct iovec){ out, (size_t)len };
        s = tls__send(r->fd, &iov, 1);
        if (s < 0) {
            r->wfailed = true;
            return (-1);
        }
    }
    if (s < len)
        tls__left_keep(&r->left, out + s, (size_t)(len - s));
    return ((ssize_t)n);
}

size_t
tls__rec_wpending(const struct tls_rec *r)
{
    OBJ_CHECK(r, TLS_REC_MAGIC);
    return (r->left.len);
}

/* A fatal alert of ours, once and without waiting, and the read side failed with err. */
static void
fail(struct tls_rec *r, unsigned desc, int err)
{
    unsigned char al[2] = { 2, (unsigned char)desc };

    r->rstate = REC_FAILED;
    r->rerr = err;
    if (!r->sent_close && !r->wfailed && r->left.len == 0) {
        r->sent_close = true;
        (void)tls__rec_put(r, CT_ALERT, al, sizeof al);
    }
    r->sent_close = true;
}

void
tls__rec_close_notify(struct tls_rec *r)
{
    static const unsigned char al[2] = { 1, AL_CLOSE_NOTIFY };

    OBJ_CHECK(r, TLS_REC_MAGIC);
    if (r->sent_close || r->wfailed || r->rstate == REC_FAILED)
        return;
    r->sent_close = true;
    /* One try: a client that does not read loses its close_notify, nothing more. */
    if (tls__rec_flush(r) > 0)
        (void)tls__rec_put(r, CT_ALERT, al, sizeof al);
}

/* The peer's KeyUpdate (RFC 8446 4.6.3): its next records come under its next key. */
static int
key_update(struct tls_rec *r, const unsigned char *m, size_t len)
{
    if (len != 5 || m[0] != HS_KEY_UPDATE || m[1] != 0 || m[2] != 0 || m[3] != 1) {
        fail(r, AL_UNEXPECTED_MESSAGE, EPROTO); /* any other message, or one not alone */
        return (-1);
    }
    if (m[4] > 1) {
        fail(r, AL_ILLEGAL_PARAMETER, EPROTO);
        return (-1);
    }
    if (dir_update(r, &r->rx, 0) != 0) {
        fail(r, AL_UNEXPECTED_MESSAGE, EPROTO);
        return (-1);
    }
    if (m[4] == 1)
        r->kupd_owed = true;
    STAT_INC(tls_key_update);
    return (0);
}

/*
 * Open the whole record at rb_off (len bytes of body after its header)
 * in place, and act on it: its plaintext becomes pt_off/pt_len when it is
 * application data.  0, or -1 with the read side failed.
 */
static int
open_record(struct tls_rec *r, size_t len)
{
    struct rec_dir *d = &r->rx;
    unsigned char *h = r->rb + r->rb_off, *body = h + REC_HDR, nc[12];
    EVP_CIPHER_CTX *ctx = dir_ctx(r, d, 0);
    size_t n = len - REC_TAG;
    int k;

    r->rb_off += REC_HDR + len;
    if (n > REC_INNER_MAX) {
        fail(r, AL_RECORD_OVERFLOW, EPROTO);
        return (-1);
    }
    if (ctx == NULL || d->seq == UINT64_MAX) {
        fail(r, AL_BAD_RECORD_MAC, EPROTO);
        return (-1);
    }
    nonce(d, nc);
    if (EVP_CipherInit_ex(ctx, NULL, NULL, NULL, nc, 0) != 1 ||
        EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_AEAD_SET_TAG, REC_TAG, body + n) != 1 ||
        EVP_CipherUpdate(ctx, NULL, &k, h, REC_HDR) != 1 ||
        EVP_CipherUpdate(ctx, body, &k, body, (int)n) != 1 ||
        EVP_CipherFinal_ex(ctx, body + n, &k) != 1) {
        fail(r, AL_BAD_RECORD_MAC, EBADMSG);
        return (-1);
    }
    d->seq++;
    /* The content type is the last byte that is not padding (zeros). */
    while (n > 0 && body[n - 1] == 0)
        n--;
    if (n == 0) {
        fail(r, AL_UNEXPECTED_MESSAGE, EPROTO);
        return (-1);
    }
    n--;
    switch (body[n]) {
    case CT_APPDATA:
        r->pt_off = (size_t)(body - r->rb);
        r->pt_len = n;
        return (0);
    case CT_ALERT:
        if (n != 2) {
            fail(r, AL_DECODE_ERROR, EPROTO);
            return (-1);
        }
        if (body[1] == AL_CLOSE_NOTIFY) {
            r->rstate = REC_PEER_CLOSED;
            return (0);
        }
        if (body[1] == AL_USER_CANCELED)
            return (0); /* its close_notify follows */
        r->rstate = REC_FAILED; /* the peer's fatal alert: no answer */
        r->rerr = ECONNRESET;
        r->sent_close = true;
        return (-1);
    case CT_HANDSHAKE:
        return (key_update(r, body, n));
    default:
        fail(r, AL_UNEXPECTED_MESSAGE, EPROTO);
        return (-1);
    }
}

/*
 * The body length of the whole record at rb_off, 0 when it is not all
 * there yet, -1 when its header is wrong (*alert says why).  No side
 * effect: tls__rec_pending() asks it too.
 */
static ssize_t
whole_record(const struct tls_rec *r, unsigned *alert)
{
    const unsigned char *h = r->rb + r->rb_off;
    size_t avail = r->rb_end - r->rb_off, len;

    if (avail < REC_HDR)
        return (0);
    len = (size_t)h[3] << 8 | h[4];
    /* After the handshake every record says application_data, TLS 1.2. */
    *alert = AL_UNEXPECTED_MESSAGE;
    if (h[0] != CT_APPDATA || h[1] != 0x03 || h[2] != 0x03)
        return (-1);
    *alert = len > REC_CT_MAX ? AL_RECORD_OVERFLOW : AL_DECODE_ERROR;
    if (len > REC_CT_MAX || len < 1 + REC_TAG)
        return (-1);
    return (avail >= REC_HDR + len ? (ssize_t)len : 0);
}

ssize_t
tls__rec_read(struct tls_rec *r, void *buf, size_t len)
{
    unsigned alert;
    ssize_t n;
    size_t k;

    OBJ_CHECK(r, TLS_REC_MAGIC);
    SRG_ASSERT(r->have_rx);
    for (;;) {
        if (r->pt_len > 0) {
            k = SRG_MIN(len, r->pt_len);
            memcpy(buf, r->rb + r->pt_off, k);
            r->pt_off += k;
            r->pt_len -= k;
            return ((ssize_t)k);
        }
        if (r->rstate == REC_PEER_CLOSED)
            return (0);
        if (r->rstate == REC_FAILED) {
            errno = r->rerr;
            return (-1);
        }
        if (r->rb != NULL && (n = whole_record(r, &alert)) != 0) {
            if (n > 0)
                (void)open_record(r, (size_t)n);
            else
                fail(r, alert, EPROTO);
            continue;
        }
        /* More bytes: the record's rest moves to the front when it would not fit. */
        if (r->rb == NULL) {
            r->rb = malloc(RB_CAP);
            AN(r->rb);
            r->rb_off = r->rb_end = 0;
        } else if (r->rb_off == r->rb_end) {
            r->rb_off = r->rb_end = 0;
        } else if (r->rb_end == RB_CAP || r->rb_off > RB_CAP / 2) {
            memmove(r->rb, r->rb + r->rb_off, r->rb_end - r->rb_off);
            r->rb_end -= r->rb_off;
            r->rb_off = 0;
        }
        n = read(r->fd, r->rb + r->rb_end, RB_CAP - r->rb_end);
        if (n > 0) {
            r->rb_end += (size_t)n;
            continue;
        }
        if (n == 0) {
            r->rstate = REC_PEER_CLOSED; /* TCP FIN without close_notify: EOF as well */
            return (0);
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            r->rstate = REC_FAILED;
            r->rerr = errno;
            r->wfailed = true;
        }
        return (-1);
    }
}

bool
tls__rec_pending(struct tls_rec *r)
{
    unsigned alert;

    OBJ_CHECK(r, TLS_REC_MAGIC);
    if (r->pt_len > 0 || r->rstate != REC_OPEN)
        return (true); /* plaintext, or EOF or a failure the next read reports at once */
    return (r->rb != NULL && whole_record(r, &alert) != 0);
}

void
tls__rec_release(struct tls_rec *r, bool rest)
{
    OBJ_CHECK(r, TLS_REC_MAGIC);
    if (r->rb != NULL && r->pt_len == 0 && r->rb_off == r->rb_end) {
        free(r->rb);
        r->rb = NULL;
        r->rb_off = r->rb_end = 0;
    }
    if (!rest)
        return;
    /* A cipher state is about 1 KiB a direction; the keys make it again in a microsecond. */
    EVP_CIPHER_CTX_free(r->tx.ctx);
    r->tx.ctx = NULL;
    EVP_CIPHER_CTX_free(r->rx.ctx);
    r->rx.ctx = NULL;
}

void
tls__rec_update_keys(struct tls_rec *r, bool ask)
{
    OBJ_CHECK(r, TLS_REC_MAGIC);
    r->kupd_owed = true;
    r->kupd_ask |= ask;
}

ssize_t
tls__rec_write(struct tls_rec *r, const void *buf, size_t len)
{
    unsigned char kupd[5] = { HS_KEY_UPDATE, 0, 0, 1, 0 };
    const unsigned char *p = buf;
    size_t done = 0, ends[BATCH_RECS], plain[BATCH_RECS];
    unsigned char *tb;
    struct iovec iov;
    ssize_t s;
    int lo;

    OBJ_CHECK(r, TLS_REC_MAGIC);
    SRG_ASSERT(len > 0);
    if (r->wfailed || r->sent_close) {
        errno = EPIPE;
        return (-1);
    }
    if (r->left.len > 0) {
        lo = tls__rec_flush(r);
        if (lo <= 0) {
            errno = lo == 0 ? EAGAIN : EPIPE;
            return (-1);
        }
        /* Those records held the first bytes of buf: they are out now. */
        SRG_ASSERT(len >= r->held);
        done = r->held;
        r->held = 0;
    }
    tb = tls__tbuf();
    while (done < len) {
        size_t fill = 0, taken = 0, sent_plain = 0, nrec = 0;

        if (r->tx.seq >= REC_REKEY_AT)
            r->kupd_owed = true;
        if (r->kupd_owed) {
            kupd[4] = r->kupd_ask ? 1 : 0;
            if ((s = seal(r, CT_HANDSHAKE, kupd, sizeof kupd, tb)) < 0 || dir_update(r, &r->tx, 1) != 0)
                goto failed;
            r->kupd_owed = r->kupd_ask = false;
            fill = (size_t)s;
            ends[nrec] = fill;
            plain[nrec++] = 0;
        }
        while (done + taken < len && nrec < BATCH_RECS) {
            size_t k = SRG_MIN(len - done - taken, (size_t)REC_PLAIN_MAX);

            if (fill + k + REC_OVERHEAD > TLS_TBUF_CAP)
                break;
            if ((s = seal(r, CT_APPDATA, p + done + taken, k, tb + fill)) < 0)
                goto failed;
            fill += (size_t)s;
            taken += k;
            ends[nrec] = fill;
            plain[nrec++] = k;
        }
        iov = (struct iovec){ tb, fill };
        s = tls__send(r->fd, &iov, 1);
        if (s < 0)
            goto failed;
        if ((size_t)s == fill) {
            done += taken;
            continue;
        }
        /* The socket is full: what went whole counts, the rest is kept sealed. */
        for (size_t i = 0; i < nrec && ends[i] <= (size_t)s; i++)
            sent_plain += plain[i];
        tls__left_keep(&r->left, tb + s, fill - (size_t)s);
        r->held = taken - sent_plain;
        done += sent_plain;
        break;
    }
    if (done > 0)
        return ((ssize_t)done);
    errno = EAGAIN;
    return (-1);
failed:
    r->wfailed = true;
    errno = EPIPE;
    return (done > 0 ? (ssize_t)done : -1);
}

void
tls__rec_free(struct tls_rec **rp)
{
    struct tls_rec *r;

    OBJ_TAKE(r, rp, TLS_REC_MAGIC);
    EVP_CIPHER_CTX_free(r->tx.ctx);
    EVP_CIPHER_CTX_free(r->rx.ctx);
    free(r->rb);
    tls__left_free(&r->left);
    OPENSSL_cleanse(&r->tx, sizeof r->tx);
    OPENSSL_cleanse(&r->rx, sizeof r->rx);
    OBJ_FREE(&r);
}
