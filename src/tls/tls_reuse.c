/*
 * SSL objects kept for the next connection.
 *
 * SSL_new() makes an 8 KiB object, a lock and its ex_data, and copies
 * much of its SSL_CTX (the certificate set, the TLS 1.3 suites, the
 * group and point-format lists, the verify parameters); SSL_free() undoes
 * it all, taking the SSL_CTX's locks on the way: 9 allocations and 9
 * frees a connection, about 2 us, against about 0.4 us for SSL_clear()
 * on an object that has them all already (OpenSSL 3.0.19, jemalloc).  So
 * a connection that ended well gives its SSL back to its generation,
 * which keeps up to TLS_REUSE_MAX of them for the handshakes that start
 * on it.
 *
 * What a kept SSL must not carry to the next client, and how it is
 * removed (tests/unit/tls/test_tls_reuse.c checks each):
 *  - the session (keys, the peer's certificate, the SNI name of a TLS 1.2
 *    session): SSL_clear() keeps it after a clean shutdown, so it is
 *    dropped explicitly with SSL_set_session(NULL);
 *  - the certificate SNI chose: SSL_set_SSL_CTX() back to the default,
 *    else a client without SNI would get the last client's certificate;
 *  - the ALPN protocol, the handshake state and transcript, the record
 *    layer's keys and read-ahead bytes: SSL_clear() (ssl3_clear() and the
 *    record layer's reset);
 *  - what surogat itself set on the SSL: the transport's modes
 *    (tls__mux_mode()), the hand-over's option and exact reads
 *    (tls__hand_arm(), when OpenSSL kept the records), the quiet shutdown of a failed session, its app
 *    data (the generation), the OCSP response stapled (ocsp_cb()): reset
 *    to the SSL_CTX's, or NULL.
 * Only an SSL whose handshake finished and which never failed is kept;
 * anything else is freed, as is every kept one when its generation goes
 * (a reload: connections on the old certificates keep theirs, new ones
 * get SSLs made from the new).  No client certificates are asked for on
 * listeners, so no verified chain is ever left on an SSL.
 *
 * Threads: any worker; the free list is under the generation's own mutex,
 * held for a push or a pop only (SSL_clear() runs before it is taken).
 */
#include "config.h"

#include <pthread.h>
#include <stdbool.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "surogat/defs.h"
#include "surogat/stat.h"
#include "tls_priv.h"

SSL *
tls__ssl_new(struct tls_gen *gen)
{
    SSL *ssl = NULL;

    OBJ_CHECK(gen, TLS_GEN_MAGIC);
    AZ(pthread_mutex_lock(&gen->reuse_mtx));
    if (gen->nreuse > 0)
        ssl = gen->reuse[--gen->nreuse];
    AZ(pthread_mutex_unlock(&gen->reuse_mtx));
    if (ssl != NULL) {
        STAT_INC(tls_ssl_reused);
        return (ssl);
    }
    ssl = SSL_new(gen->cert[0].ctx);
    AN(ssl);
    return (ssl);
}

/*
 * Whether ssl may serve another client after reset(): its handshake
 * finished and nothing failed since.  A fatal alert puts OpenSSL's state
 * machine back "in init", and a failed read or write (tls_io.c's want())
 * set the quiet shutdown.
 */
static bool
reusable(SSL *ssl)
{
    return (SSL_is_init_finished(ssl) && !SSL_get_quiet_shutdown(ssl));
}

/* Everything of the last connection gone; 0, or -1 when OpenSSL refused (then freed). */
static int
reset(struct tls_gen *gen, SSL *ssl)
{
    SSL_CTX *ctx = gen->cert[0].ctx;

    ERR_clear_error();
    if (SSL_clear(ssl) != 1 || SSL_set_session(ssl, NULL) != 1)
        return (-1);
    if (SSL_get_SSL_CTX(ssl) != ctx && SSL_set_SSL_CTX(ssl, ctx) != ctx)
        return (-1);
    /* The staple the last client asked for: a new one is set each time one is asked for. */
    (void)SSL_set_tlsext_status_ocsp_resp(ssl, NULL, 0);
    (void)SSL_clear_mode(ssl, ~0L);
    (void)SSL_set_mode(ssl, SSL_CTX_get_mode(ctx));
    (void)SSL_clear_options(ssl, SSL_OP_ENABLE_KTLS);
    (void)SSL_set_options(ssl, SSL_CTX_get_options(ctx));
    SSL_set_read_ahead(ssl, SSL_CTX_get_read_ahead(ctx));
    SSL_set_quiet_shutdown(ssl, SSL_CTX_get_quiet_shutdown(ctx));
    AN(SSL_set_app_data(ssl, NULL));
    return (0);
}

void
tls__ssl_done(struct tls_gen *gen, SSL **sslp)
{
    SSL *ssl = *sslp;

    *sslp = NULL;
    OBJ_CHECK(gen, TLS_GEN_MAGIC);
    AN(ssl);
    if (!reusable(ssl) || reset(gen, ssl) != 0) {
        ERR_clear_error();
        SSL_free(ssl);
        return;
    }
    AZ(pthread_mutex_lock(&gen->reuse_mtx));
    if (gen->nreuse < TLS_REUSE_MAX) {
        gen->reuse[gen->nreuse++] = ssl;
        ssl = NULL;
    }
    AZ(pthread_mutex_unlock(&gen->reuse_mtx));
    if (ssl != NULL)
        SSL_free(ssl);
}

void
tls__ssl_drop(SSL **sslp)
{
    SSL *ssl = *sslp;
    struct tls_gen *gen;

    *sslp = NULL;
    AN(ssl);
    gen = SSL_get_app_data(ssl);
    SSL_free(ssl);
    tls__gen_unref(&gen);
}

void
tls__ssl_drain(struct tls_gen *gen)
{
    OBJ_CHECK(gen, TLS_GEN_MAGIC);
    /* The last reference is gone: nobody else can reach the list. */
    while (gen->nreuse > 0)
        SSL_free(gen->reuse[--gen->nreuse]);
}
