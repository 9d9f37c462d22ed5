/*
 * Shared inside src/tls: the generation of SSL_CTXs a handshake uses.
 */
#ifndef SUROGAT_TLS_PRIV_H
#define SUROGAT_TLS_PRIV_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <openssl/ssl.h>

#include "surogat/tls.h"

struct tls_cert {
    SSL_CTX *ctx;
    /*
     * The same certificate with OpenSSL's key log on, for a connection
     * that ALPN made HTTP/2 over TLS 1.3: the ALPN callback moves it
     * there, so that the secrets its records need after OpenSSL
     * (tls_mux.c) are logged for it alone -- OpenSSL formats every
     * secret it logs, about 10 us a handshake.  NULL on h1only listeners.
     */
    SSL_CTX *ctx_mux;
    char **names; /* lower-case SAN dNSNames, or the CN when there are none */
    unsigned nnames;
    unsigned char *ocsp; /* DER response to staple, or NULL */
    size_t ocsp_len;
};

/*
 * One load of a listener's files.  Referenced by the listener while
 * current and by every SSL made from it (SSL app data), so the callbacks
 * that run during a handshake (SNI, OCSP) always see a live generation.
 */
struct tls_gen {
    unsigned magic;
#define TLS_GEN_MAGIC 0x6b3f20d1
    unsigned refcnt; /* atomic */
    unsigned ncert;
    struct tls_cert cert[TLS_MAX_CERTS]; /* [0] is the default */
    /*
     * SSLs of finished connections, reset for the next (tls_reuse.c).
     * 64 covers the handshakes a burst has under way at once on two
     * cores; more would only hold memory (about 6 KiB each).
     */
#define TLS_REUSE_MAX 64
    pthread_mutex_t reuse_mtx;
    unsigned nreuse; /* under reuse_mtx */
    SSL *reuse[TLS_REUSE_MAX];
};

/* The current generation with a reference taken. */
struct tls_gen *tls__gen_get(struct tls_lsn *ln);
void tls__gen_unref(struct tls_gen **genp);

/* A new SSL on gen's default certificate: a kept one if there is, else SSL_new(). */
SSL *tls__ssl_new(struct tls_gen *gen);
/*
 * A connection's SSL, its close_notify sent, no longer used: kept for
 * the next handshake on gen when it ended well, else freed.  *sslp = NULL.
 * gen is the SSL's generation, still referenced by the caller.
 */
void tls__ssl_done(struct tls_gen *gen, SSL **sslp);
/* Free the kept SSLs: gen is being freed. */
void tls__ssl_drain(struct tls_gen *gen);

/* Session ticket keys (tls_ticket.c): current and previous, rotated every tls_ticket_rotate. */
void tls__ticket_init(void);
void tls__ticket_fini(void);
int tls__ticket_cb(SSL *ssl, unsigned char key_name[16], unsigned char *iv, EVP_CIPHER_CTX *cctx,
                   EVP_MAC_CTX *hctx, int enc);

/*
 * A multiplexed connection that OpenSSL keeps carrying (tls_io.c):
 * tls__mux_mode() once, then tls__write_nb() with tls_mux_write()'s
 * contract.
 */
void tls__mux_mode(SSL *ssl);
ssize_t tls__write_nb(SSL *ssl, const void *buf, size_t len);

/*
 * The write BIO of a multiplexed connection (tls_wbio.c): several records
 * per system call.  tls__wbio_set() puts it on ssl (the socket BIO stays
 * the read side); tls__wbio_of() is ssl's, or NULL when it has none.
 * tls__write_nb() brackets a batch of SSL_write_ex() calls with
 * tls__wbio_gather(w, true) and (w, false), and names the batch's last
 * record with tls__wbio_last() before the call that writes it.
 */
struct tls_wbio;
void tls__wbio_set(SSL *ssl);
struct tls_wbio *tls__wbio_of(const SSL *ssl);
void tls__wbio_gather(struct tls_wbio *w, bool on);
void tls__wbio_last(struct tls_wbio *w, bool last);
extern unsigned long tls__wbio_sends; /* tls__send()'s sendmsg(2) calls, all connections (tests) */
/* iov out without blocking: the bytes the socket took, 0 when it is full, -1 on error. */
ssize_t tls__send(int fd, struct iovec *iov, int n);
/*
 * Bytes a full socket did not take, kept by their connection to go
 * before anything else: tls__left_keep() appends, tls__left_out() sends
 * (1 all out and the buffer freed, 0 the socket is full, -1 failed).
 */
struct tls_left {
    unsigned char *p; /* malloc'd while it holds any */
    size_t off, len;
};
void tls__left_keep(struct tls_left *l, const void *p, size_t len);
int tls__left_out(struct tls_left *l, int fd);
void tls__left_free(struct tls_left *l);
/*
 * The calling thread's buffer for a batch of records (TLS_TBUF_CAP
 * bytes: 64 KiB of plaintext as records), allocated at its first use,
 * freed when the thread exits.  Empty between calls: whoever fills it
 * sends it or keeps what the socket did not take.
 */
#define TLS_TBUF_CAP (64 * 1024 + 1024)
unsigned char *tls__tbuf(void);

/*
 * The TLS 1.3 record layer after OpenSSL (tls_rec.c), for the AEADs
 * OpenSSL hands over.  Secrets are the traffic secrets of RFC 8446 7.1
 * (tls__aead_hlen() bytes); a direction gets its first with
 * tls__rec_key(), the next ones by KeyUpdate.  The read and write
 * functions have the contracts of tls_mux_read() and tls_mux_write().
 * tls__rec_put() seals one record of content type ct (OpenSSL's writes
 * during the hand-over: tickets, alerts), sends it or keeps it for
 * tls__rec_flush() (1 all out, 0 the socket is full, -1 failed).
 */
enum tls_aead { TLS_AEAD_AES128GCM, TLS_AEAD_AES256GCM, TLS_AEAD_CHACHA20 };
struct tls_rec;
unsigned tls__aead_hlen(enum tls_aead a);
int tls__rec_derive(enum tls_aead a, const unsigned char *secret, unsigned char key[32],
                    unsigned char iv[12]);
struct tls_rec *tls__rec_new(int fd, enum tls_aead a);
int tls__rec_key(struct tls_rec *r, bool tx, const unsigned char *secret, uint64_t seq);
/* Whether r's write key and iv are these (the hand-over checks OpenSSL's against ours). */
bool tls__rec_tx_is(const struct tls_rec *r, const unsigned char *key, const unsigned char iv[12]);
ssize_t tls__rec_put(struct tls_rec *r, unsigned ct, const void *p, size_t n);
int tls__rec_flush(struct tls_rec *r);
size_t tls__rec_wpending(const struct tls_rec *r);
ssize_t tls__rec_read(struct tls_rec *r, void *buf, size_t len);
ssize_t tls__rec_write(struct tls_rec *r, const void *buf, size_t len);
bool tls__rec_pending(struct tls_rec *r);
void tls__rec_release(struct tls_rec *r, bool rest);
void tls__rec_close_notify(struct tls_rec *r);
/* A KeyUpdate of ours before our next record (also due by itself after 2^24 records); ask: theirs too. */
void tls__rec_update_keys(struct tls_rec *r, bool ask);
void tls__rec_free(struct tls_rec **rp);

/*
 * The hand-over (tls_mux.c).  tls__hand_arm() is the ALPN callback's
 * when it chose h2: the SSL gets the BIO that takes OpenSSL's keys at
 * the end of the handshake.  tls__keylog_cb() is every SSL_CTX's key
 * log callback: it keeps an armed connection's traffic secrets.
 */
void tls__hand_arm(SSL *ssl);
void tls__keylog_cb(const SSL *ssl, const char *line);
/* Free an SSL that is not to be kept for another connection, and its generation's reference. */
void tls__ssl_drop(SSL **sslp);

#endif
