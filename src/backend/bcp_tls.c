/*
 * TLS to backends: the client side of OpenSSL.
 *
 * Each TLS backend owns one bcp_tls: an SSL_CTX built at policy load (so
 * a CA file that does not load is a load error, not a 503 later), read by
 * every worker that connects and by the probe thread.  The CTX carries
 * the checks: peer verification against ca_file or the system store, and
 * the host name (or IP address) the certificate must name, so that each
 * SSL made from it inherits them and no handshake can forget one.
 *
 * Sessions: OpenSSL hands every new session (in TLS 1.3 a ticket that
 * arrives after the handshake, during a read) to new_session(), which
 * keeps the latest under `mtx`; the next connection offers it.  A backend
 * behind one name rarely needs more than the last one.
 *
 * A failed handshake is normal when a backend is misconfigured, and every
 * request would repeat it, so the log gets at most one line a second per
 * process, with the number left unsaid.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "surogat/bcp.h"
#include "surogat/defs.h"
#include "surogat/log.h"
#include "surogat/sb.h"
#include "surogat/stat.h"
#include "surogat/tls.h"
#include "surogat/vio.h"

struct bcp_tls {
    unsigned magic;
#define BCP_TLS_MAGIC 0x2d7c94e1
    SSL_CTX *ctx;
    char *name; /* the backend's */
    char *sni;  /* NULL: no SNI */
    pthread_mutex_t mtx;
    SSL_SESSION *last; /* under mtx: offered to the next handshake, or NULL */
};

static struct log_limit fail_limit = LOG_LIMIT_INIT;

/*
 * OpenSSL's callback for a session the server gave us.  1: the reference
 * is ours now.  Runs on whichever thread reads the ticket.
 */
static int
new_session(SSL *ssl, SSL_SESSION *sess)
{
    struct bcp_tls *t = SSL_get_app_data(ssl);
    SSL_SESSION *old;

    if (t == NULL)
        return (0);
    OBJ_CHECK(t, BCP_TLS_MAGIC);
    AZ(pthread_mutex_lock(&t->mtx));
    old = t->last;
    t->last = sess;
    AZ(pthread_mutex_unlock(&t->mtx));
    if (old != NULL)
        SSL_SESSION_free(old);
    return (1);
}

static void
err_openssl(struct sb *err, const char *what, const char *file)
{
    char why[256];
    unsigned long e = ERR_peek_last_error();

    if (e != 0)
        ERR_error_string_n(e, why, sizeof why);
    else
        snprintf(why, sizeof why, "unknown error");
    ERR_clear_error();
    sb_printf(err, "%s '%s': %s", what, file, why);
}

static bool
is_ip(const char *s)
{
    unsigned char a[16];

    return (inet_pton(AF_INET, s, a) == 1 || inet_pton(AF_INET6, s, a) == 1);
}

/* A DNS name as SNI carries it: letters, digits, '-', '.', '_', at most 253 bytes. */
static bool
is_dns_name(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n > 253)
        return (false);
    for (; *s != '\0'; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '-' || *s == '.' || *s == '_'))
            return (false);
    return (true);
}

struct bcp_tls *
bcp_tls_new(const struct bcp_tls_conf *c, struct sb *err)
{
    X509_VERIFY_PARAM *vp;
    struct bcp_tls *t;
    SSL_CTX *ctx;

    AN(c);
    AN(c->name);
    if (c->sni != NULL && !is_ip(c->sni) && !is_dns_name(c->sni)) {
        sb_printf(err, "sni '%.64s' is not a host name", c->sni);
        return (NULL);
    }
    if (c->verify_host != NULL && !is_ip(c->verify_host) && !is_dns_name(c->verify_host)) {
        sb_printf(err, "verify_host '%.64s' is not a host name or address", c->verify_host);
        return (NULL);
    }
    ERR_clear_error();
    ctx = SSL_CTX_new(TLS_client_method());
    AN(ctx);
    /* TLS 1.0 and 1.1 are broken and refused by the client side too. */
    AN(SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION));
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    SSL_CTX_sess_set_new_cb(ctx, new_session);
    /* Say what we speak: a server that also offers h2 must not pick it. */
    AZ(SSL_CTX_set_alpn_protos(ctx, (const unsigned char *)"\x08http/1.1", 9));
    if (c->ca_file != NULL) {
        if (SSL_CTX_load_verify_locations(ctx, c->ca_file, NULL) != 1) {
            err_openssl(err, "ca_file", c->ca_file);
            goto fail;
        }
    } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
        err_openssl(err, "the system CA store", "default");
        goto fail;
    }
    if (c->cert != NULL || c->key != NULL) {
        if (c->cert == NULL || c->key == NULL) {
            sb_cat(err, "cert and key go together");
            goto fail;
        }
        if (SSL_CTX_use_certificate_chain_file(ctx, c->cert) != 1) {
            err_openssl(err, "cert", c->cert);
            goto fail;
        }
        if (SSL_CTX_use_PrivateKey_file(ctx, c->key, SSL_FILETYPE_PEM) != 1 ||
            SSL_CTX_check_private_key(ctx) != 1) {
            err_openssl(err, "key", c->key);
            goto fail;
        }
    }
    SSL_CTX_set_verify(ctx, c->verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
    if (c->verify && c->verify_host != NULL) {
        vp = SSL_CTX_get0_param(ctx);
        /* "*.example.com" matches one whole label; "w*.example.com" never. */
        X509_VERIFY_PARAM_set_hostflags(vp, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
        if (is_ip(c->verify_host) ? X509_VERIFY_PARAM_set1_ip_asc(vp, c->verify_host) != 1
                                  : X509_VERIFY_PARAM_set1_host(vp, c->verify_host, 0) != 1) {
            ERR_clear_error();
            sb_printf(err, "verify_host '%.64s' is not a host name or address", c->verify_host);
            goto fail;
        }
    }
    OBJ_NEW(t, BCP_TLS_MAGIC);
    t->ctx = ctx;
    t->name = strdup(c->name);
    AN(t->name);
    /* RFC 6066: SNI carries host names only, never an address. */
    if (c->sni != NULL && !is_ip(c->sni)) {
        t->sni = strdup(c->sni);
        AN(t->sni);
    }
    AZ(pthread_mutex_init(&t->mtx, NULL));
    return (t);
fail:
    SSL_CTX_free(ctx);
    return (NULL);
}

void
bcp_tls_free(struct bcp_tls **tp)
{
    struct bcp_tls *t;

    OBJ_TAKE(t, tp, BCP_TLS_MAGIC);
    if (t->last != NULL)
        SSL_SESSION_free(t->last);
    SSL_CTX_free(t->ctx);
    AZ(pthread_mutex_destroy(&t->mtx));
    free(t->name);
    free(t->sni);
    OBJ_FREE(&t);
}

SSL *
bcp_tls_ssl(struct bcp_tls *t, int fd)
{
    SSL *ssl;

    OBJ_CHECK(t, BCP_TLS_MAGIC);
    ssl = SSL_new(t->ctx);
    AN(ssl);
    AN(SSL_set_fd(ssl, fd));
    /* Ours: these SSLs never reach tls_close(), which reads its own there. */
    AN(SSL_set_app_data(ssl, t));
    if (t->sni != NULL)
        AN(SSL_set_tlsext_host_name(ssl, t->sni));
    SSL_set_connect_state(ssl);
    AZ(pthread_mutex_lock(&t->mtx));
    if (t->last != NULL)
        (void)SSL_set_session(ssl, t->last); /* takes its own reference */
    AZ(pthread_mutex_unlock(&t->mtx));
    return (ssl);
}

void
bcp_tls_ssl_free(SSL **sslp)
{
    SSL *ssl = *sslp;

    *sslp = NULL;
    AN(ssl);
    tls_notify_close(ssl);
    SSL_free(ssl);
}

/* Why the handshake on ssl failed with SSL error e, into why[len]. */
static void
fail_reason(SSL *ssl, int e, int sys_errno, char *why, size_t len)
{
    long v = SSL_get_verify_result(ssl);
    unsigned long ee = ERR_peek_last_error();

    if (v != X509_V_OK)
        snprintf(why, len, "certificate: %s", X509_verify_cert_error_string(v));
    else if (e == SSL_ERROR_SSL && ee != 0)
        ERR_error_string_n(ee, why, len);
    else if (e == SSL_ERROR_SYSCALL && sys_errno != 0)
        snprintf(why, len, "%s", strerror(sys_errno));
    else if (e == SSL_ERROR_SYSCALL || e == SSL_ERROR_ZERO_RETURN)
        snprintf(why, len, "the backend closed the connection");
    else
        snprintf(why, len, "timed out");
}

int
bcp_tls_connect(struct bcp_tls *t, int fd, SSL **sslp, double deadline)
{
    char why[256];
    SSL *ssl;
    int rv, e, w, saved;

    OBJ_CHECK(t, BCP_TLS_MAGIC);
    AN(sslp);
    ssl = bcp_tls_ssl(t, fd);
    for (;;) {
        ERR_clear_error();
        errno = 0;
        rv = SSL_do_handshake(ssl);
        if (rv == 1)
            break;
        e = SSL_get_error(ssl, rv);
        saved = errno;
        if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
            w = vio_wait(fd, e == SSL_ERROR_WANT_READ ? POLLIN : POLLOUT, deadline);
            if (w > 0)
                continue;
            saved = w < 0 ? errno : 0;
        }
        fail_reason(ssl, e, saved, why, sizeof why);
        ERR_clear_error();
        SSL_set_quiet_shutdown(ssl, 1); /* nothing more goes over a failed session */
        SSL_free(ssl);
        STAT_INC(backend_tls_fail);
        log_limited(&fail_limit, "backend_tls_fail", LOG_WARNING,
                    "backend %s: TLS handshake failed: %s", t->name, why);
        errno = saved != 0 ? saved : EPROTO;
        return (-1);
    }
    STAT_INC(backend_tls_handshake);
    if (SSL_session_reused(ssl))
        STAT_INC(backend_tls_resumed);
    *sslp = ssl;
    return (0);
}
