/*
 * Shared inside src/tls: the generation of SSL_CTXs a handshake uses.
 */
#ifndef SUROGAT_TLS_PRIV_H
#define SUROGAT_TLS_PRIV_H

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
};

/* The current generation with a reference taken. */
struct tls_gen *tls__gen_get(struct tls_lsn *ln);
void tls__gen_unref(struct tls_gen **genp);

/* Session ticket keys (tls_ticket.c): current and previous, rotated every tls_ticket_rotate. */
void tls__ticket_init(void);
void tls__ticket_fini(void);
int tls__ticket_cb(SSL *ssl, unsigned char key_name[16], unsigned char *iv, EVP_CIPHER_CTX *cctx,
                   EVP_MAC_CTX *hctx, int enc);

#endif
