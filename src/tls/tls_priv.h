/*
 * Shared inside src/tls: the generation of SSL_CTXs a handshake uses.
 */
#ifndef SUROGAT_TLS_PRIV_H
#define SUROGAT_TLS_PRIV_H

#include <pthread.h>
#include <stdbool.h>

#include <openssl/ssl.h>

#include "surogat/tls.h"

struct tls_cert {
    SSL_CTX *ctx;
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
 * The write BIO of a multiplexed connection (tls_wbio.c): several records
 * per system call.  tls__wbio_set() puts it on ssl (the socket BIO stays
 * the read side); tls__wbio_of() is ssl's, or NULL when it has none.
 * tls_write_nb() brackets a batch of SSL_write_ex() calls with
 * tls__wbio_gather(w, true) and (w, false), and names the batch's last
 * record with tls__wbio_last() before the call that writes it.
 */
struct tls_wbio;
void tls__wbio_set(SSL *ssl);
struct tls_wbio *tls__wbio_of(const SSL *ssl);
void tls__wbio_gather(struct tls_wbio *w, bool on);
void tls__wbio_last(struct tls_wbio *w, bool last);
extern unsigned long tls__wbio_sends; /* its sendmsg(2) calls, all connections (tests) */

#endif
