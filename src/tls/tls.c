/*
 * TLS listeners: certificates, SSL_CTXs, SNI, ALPN, OCSP stapling and the
 * SIGHUP reload.
 *
 * Each certificate gets its own SSL_CTX with the same settings; a
 * handshake starts on the first (the default) and the SNI callback
 * switches it to the certificate whose names match.  A listener's
 * SSL_CTXs form a generation (tls_priv.h); the listener points at the
 * current one under its mutex, taken once per handshake.  tls_lsn_new(),
 * tls_lsn_free() and tls_reload() run on the main thread only, so the
 * registry of listeners needs no lock.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <openssl/err.h>
#include <openssl/ocsp.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "surogat/defs.h"
#include "surogat/log.h"
#include "surogat/par.h"
#include "surogat/sb.h"
#include "surogat/stat.h"
#include "surogat/tls.h"
#include "tls_priv.h"

#define TLS_MAX_LSN  32
#define TLS_OCSP_MAX (64 * 1024)

struct tls_lsn {
    unsigned magic;
#define TLS_LSN_MAGIC 0x2c81f75a
    char *spec;
    struct tls_conf conf;
    pthread_mutex_t mtx;
    struct tls_gen *cur; /* under mtx */
};

static struct tls_lsn *lsns[TLS_MAX_LSN];
static unsigned nlsns;

static const unsigned char alpn_h11[] = "\x08http/1.1";
static const unsigned char alpn_h2[] = "\x02h2\x08http/1.1"; /* ours first: h2 when both can */

/* The first queued OpenSSL error, for a message; clears the queue. */
static const char *
ssl_reason(char *buf, size_t len)
{
    unsigned long e = ERR_peek_error();

    if (e == 0)
        snprintf(buf, len, "%s", errno != 0 ? strerror(errno) : "unknown error");
    else
        ERR_error_string_n(e, buf, len);
    ERR_clear_error();
    return (buf);
}

bool
tls_name_match(const char *pattern, const char *host)
{
    const char *dot;

    AN(pattern);
    AN(host);
    if (pattern[0] == '*' && pattern[1] == '.') {
        /* "*.example.com" stands for exactly one label: not "example.com", not "a.b.example.com".
         */
        dot = strchr(host, '.');
        if (dot == NULL || dot == host)
            return (false);
        return (strcasecmp(pattern + 1, dot) == 0);
    }
    return (strcasecmp(pattern, host) == 0);
}

static void
add_name(struct tls_cert *tc, const unsigned char *s, int len)
{
    char *n;

    if (len <= 0 || memchr(s, '\0', (size_t)len) != NULL)
        return; /* an embedded NUL is an attack on name matching, not a name */
    n = malloc((size_t)len + 1);
    AN(n);
    for (int i = 0; i < len; i++)
        n[i] = (char)tolower(s[i]);
    n[len] = '\0';
    tc->names = realloc(tc->names, (tc->nnames + 1) * sizeof *tc->names);
    AN(tc->names);
    tc->names[tc->nnames++] = n;
}

/* The names SNI selects a certificate by: its SAN dNSNames, else its subject CN (RFC 6125). */
static void
cert_names(struct tls_cert *tc, X509 *x)
{
    GENERAL_NAMES *gens;
    X509_NAME *subj;
    int i;

    gens = X509_get_ext_d2i(x, NID_subject_alt_name, NULL, NULL);
    if (gens != NULL) {
        for (i = 0; i < sk_GENERAL_NAME_num(gens); i++) {
            const GENERAL_NAME *g = sk_GENERAL_NAME_value(gens, i);
            if (g->type == GEN_DNS)
                add_name(tc, ASN1_STRING_get0_data(g->d.dNSName), ASN1_STRING_length(g->d.dNSName));
        }
        GENERAL_NAMES_free(gens);
    }
    if (tc->nnames > 0)
        return;
    subj = X509_get_subject_name(x);
    i = X509_NAME_get_index_by_NID(subj, NID_commonName, -1);
    if (i >= 0) {
        ASN1_STRING *cn = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(subj, i));
        add_name(tc, ASN1_STRING_get0_data(cn), ASN1_STRING_length(cn));
    }
}

static int
sni_cb(SSL *ssl, int *alert, void *arg)
{
    struct tls_gen *gen = SSL_get_app_data(ssl);
    const char *host = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
    unsigned i, j, wild = 0;

    (void)alert;
    (void)arg;
    OBJ_CHECK(gen, TLS_GEN_MAGIC);
    if (host == NULL)
        return (SSL_TLSEXT_ERR_OK); /* no SNI: the default certificate */
    /* An exact name wins over a wildcard, whatever the order of the certificates. */
    for (i = 0; i < gen->ncert; i++) {
        for (j = 0; j < gen->cert[i].nnames; j++) {
            if (strchr(gen->cert[i].names[j], '*') == NULL) {
                if (strcasecmp(gen->cert[i].names[j], host) == 0)
                    goto found;
            } else if (wild == 0 && i > 0 && tls_name_match(gen->cert[i].names[j], host)) {
                wild = i;
            }
        }
    }
    i = wild;
found:
    if (i > 0 && SSL_set_SSL_CTX(ssl, gen->cert[i].ctx) == NULL)
        return (SSL_TLSEXT_ERR_ALERT_FATAL);
    /* An unknown name gets the default certificate, as most servers do. */
    return (SSL_TLSEXT_ERR_OK);
}

static int
alpn_cb(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
        unsigned inlen, void *arg)
{
    unsigned char *sel;
    bool h2 = arg != NULL; /* the listener's: not ,h1only */

    if (SSL_select_next_proto(&sel, outlen, h2 ? alpn_h2 : alpn_h11,
                              h2 ? sizeof alpn_h2 - 1 : sizeof alpn_h11 - 1, in,
                              inlen) != OPENSSL_NPN_NEGOTIATED)
        return (SSL_TLSEXT_ERR_NOACK); /* none of ours: go on without ALPN, speak HTTP/1.1 */
    *out = sel;
    /*
     * HTTP/2 over TLS 1.3: its records may leave OpenSSL at the
     * handshake's end (tls_mux.c), with the secrets the twin SSL_CTX logs.
     * TLS 1.3 chooses the certificate after ALPN (as after SNI), so the
     * move is as safe here as SNI's; TLS 1.2 has chosen it already.
     */
    if (*outlen == 2 && memcmp(sel, "h2", 2) == 0 && SSL_version(ssl) == TLS1_3_VERSION) {
        const struct tls_cert *tc = SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));
        if (tc != NULL && tc->ctx_mux != NULL && SSL_set_SSL_CTX(ssl, tc->ctx_mux) != NULL)
            tls__hand_arm(ssl);
    }
    return (SSL_TLSEXT_ERR_OK);
}

static int
ocsp_cb(SSL *ssl, void *arg)
{
    const struct tls_cert *tc = arg;
    unsigned char *copy;

    if (tc == NULL || tc->ocsp == NULL)
        return (SSL_TLSEXT_ERR_NOACK);
    /* OpenSSL frees the response it is given, so each handshake gets a copy. */
    copy = OPENSSL_malloc(tc->ocsp_len);
    if (copy == NULL)
        return (SSL_TLSEXT_ERR_NOACK);
    memcpy(copy, tc->ocsp, tc->ocsp_len);
    if (SSL_set_tlsext_status_ocsp_resp(ssl, copy, (long)tc->ocsp_len) != 1) {
        OPENSSL_free(copy);
        return (SSL_TLSEXT_ERR_NOACK);
    }
    return (SSL_TLSEXT_ERR_OK);
}

/* Read a DER OCSP response and check that it parses: a broken one would break handshakes. */
static int
load_ocsp(struct tls_cert *tc, const char *path, struct sb *err)
{
    struct stat st;
    const unsigned char *p;
    OCSP_RESPONSE *resp;
    FILE *f;

    f = fopen(path, "rb");
    if (f == NULL) {
        sb_printf(err, "ocsp %s: %s", path, strerror(errno));
        return (-1);
    }
    if (fstat(fileno(f), &st) != 0 || st.st_size <= 0 || st.st_size > TLS_OCSP_MAX) {
        sb_printf(err, "ocsp %s: empty or larger than %d bytes", path, TLS_OCSP_MAX);
        fclose(f);
        return (-1);
    }
    tc->ocsp_len = (size_t)st.st_size;
    tc->ocsp = malloc(tc->ocsp_len);
    AN(tc->ocsp);
    if (fread(tc->ocsp, 1, tc->ocsp_len, f) != tc->ocsp_len) {
        sb_printf(err, "ocsp %s: short read", path);
        fclose(f);
        return (-1);
    }
    fclose(f);
    p = tc->ocsp;
    resp = d2i_OCSP_RESPONSE(NULL, &p, (long)tc->ocsp_len);
    if (resp == NULL) {
        ERR_clear_error();
        sb_printf(err, "ocsp %s: not a DER OCSP response", path);
        return (-1);
    }
    OCSP_RESPONSE_free(resp);
    return (0);
}

static SSL_CTX *
new_ctx(bool h2, struct sb *err)
{
    char rbuf[256];
    SSL_CTX *ctx;

    ctx = SSL_CTX_new(TLS_server_method());
    AN(ctx);
    AN(SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION));
    SSL_CTX_set_options(ctx, SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_NO_RENEGOTIATION |
                                 SSL_OP_NO_COMPRESSION | SSL_OP_IGNORE_UNEXPECTED_EOF);
    /*
     * 10,000 idle keep-alive clients must not each hold 2 x 16 KiB of
     * record buffers.  No automatic chain: the chain is what the cert=
     * file holds, and without NO_AUTO_CHAIN OpenSSL runs X509_verify_cert()
     * against the (empty) store on every handshake of a certificate that
     * has no intermediates, to find none.
     */
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS | SSL_MODE_NO_AUTO_CHAIN);
    /*
     * Read as much as the socket holds, not a record header and then its
     * body: the client's Finished and first request arrive together and
     * cost one read(2), not six.  Records read ahead are invisible to
     * poll(2): tls_pending() knows.
     */
    SSL_CTX_set_read_ahead(ctx, 1);
    if (SSL_CTX_set_cipher_list(ctx, par.tls_ciphers) != 1) {
        sb_printf(err, "tls_ciphers '%s': %s", par.tls_ciphers, ssl_reason(rbuf, sizeof rbuf));
        SSL_CTX_free(ctx);
        return (NULL);
    }
    if (SSL_CTX_set_ciphersuites(ctx, par.tls_ciphersuites) != 1) {
        sb_printf(err, "tls_ciphersuites '%s': %s", par.tls_ciphersuites,
                  ssl_reason(rbuf, sizeof rbuf));
        SSL_CTX_free(ctx);
        return (NULL);
    }
    /* Resumption is by ticket only: no per-session state on the server. */
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    AN(SSL_CTX_set_session_id_context(ctx, (const unsigned char *)"surogat", 7));
    /* A ticket opens for up to two periods (current and previous key): so long it may live. */
    SSL_CTX_set_timeout(ctx, (long)(2 * par.tls_ticket_rotate));
    AN(SSL_CTX_set_tlsext_ticket_key_evp_cb(ctx, tls__ticket_cb));
    /*
     * Every TLS 1.3 ticket is a session copied, a secret derived, the
     * session encrypted and a record written (a write(2) of its own): 6% of
     * a full handshake's instructions each (bench/tls_count.sh).
     */
    AN(SSL_CTX_set_num_tickets(ctx, par.tls_tickets));
    SSL_CTX_set_tlsext_servername_callback(ctx, sni_cb);
    /* Any non-NULL argument says h2: the callback only tests it. */
    SSL_CTX_set_alpn_select_cb(ctx, alpn_cb, h2 ? (void *)(uintptr_t)alpn_h2 : NULL);
    return (ctx);
}

static void
gen_free(struct tls_gen **genp)
{
    struct tls_gen *gen = *genp;

    OBJ_CHECK(gen, TLS_GEN_MAGIC);
    tls__ssl_drain(gen); /* before their SSL_CTXs */
    AZ(pthread_mutex_destroy(&gen->reuse_mtx));
    for (unsigned i = 0; i < gen->ncert; i++) {
        struct tls_cert *tc = &gen->cert[i];
        SSL_CTX_free(tc->ctx);
        SSL_CTX_free(tc->ctx_mux);
        for (unsigned j = 0; j < tc->nnames; j++)
            free(tc->names[j]);
        free(tc->names);
        free(tc->ocsp);
    }
    OBJ_FREE(genp);
}

/* An SSL_CTX with certificate i of conf and its key in *ctxp: 0, or -1 with err said. */
static int
cert_ctx(SSL_CTX **ctxp, const struct tls_conf *conf, unsigned i, struct sb *err)
{
    char rbuf[256];

    *ctxp = new_ctx(conf->h2, err);
    if (*ctxp == NULL)
        return (-1);
    ERR_clear_error();
    if (SSL_CTX_use_certificate_chain_file(*ctxp, conf->c[i].cert) != 1) {
        sb_printf(err, "cert %s: %s", conf->c[i].cert, ssl_reason(rbuf, sizeof rbuf));
        return (-1);
    }
    if (SSL_CTX_use_PrivateKey_file(*ctxp, conf->c[i].key, SSL_FILETYPE_PEM) != 1) {
        if (ERR_GET_REASON(ERR_peek_error()) != X509_R_KEY_VALUES_MISMATCH) {
            sb_printf(err, "key %s: %s", conf->c[i].key, ssl_reason(rbuf, sizeof rbuf));
            return (-1);
        }
    } else if (SSL_CTX_check_private_key(*ctxp) == 1) {
        return (0);
    }
    ERR_clear_error();
    sb_printf(err, "key %s does not match cert %s", conf->c[i].key, conf->c[i].cert);
    return (-1);
}

/* Build a generation from conf; NULL with the failing file named in err. */
static struct tls_gen *
gen_load(const struct tls_conf *conf, struct sb *err)
{
    struct tls_gen *gen;
    struct tls_cert *tc;

    OBJ_NEW(gen, TLS_GEN_MAGIC);
    gen->refcnt = 1;
    AZ(pthread_mutex_init(&gen->reuse_mtx, NULL));
    for (unsigned i = 0; i < conf->ncert; i++) {
        tc = &gen->cert[i];
        gen->ncert++;
        if (cert_ctx(&tc->ctx, conf, i, err) != 0)
            goto fail;
        cert_names(tc, SSL_CTX_get0_certificate(tc->ctx));
        if (conf->c[i].ocsp != NULL && load_ocsp(tc, conf->c[i].ocsp, err) != 0)
            goto fail;
        if (conf->h2) {
            if (cert_ctx(&tc->ctx_mux, conf, i, err) != 0)
                goto fail;
            SSL_CTX_set_keylog_callback(tc->ctx_mux, tls__keylog_cb); /* no file: tls_mux.c */
        }
        SSL_CTX *both[] = { tc->ctx, tc->ctx_mux };
        for (size_t k = 0; k < ARRAY_LEN(both) && both[k] != NULL; k++) {
            AN(SSL_CTX_set_app_data(both[k], tc)); /* the ALPN callback finds the twin */
            if (tc->ocsp != NULL) {
                SSL_CTX_set_tlsext_status_cb(both[k], ocsp_cb);
                SSL_CTX_set_tlsext_status_arg(both[k], tc);
            }
        }
    }
    return (gen);
fail:
    gen_free(&gen);
    return (NULL);
}

struct tls_gen *
tls__gen_get(struct tls_lsn *ln)
{
    struct tls_gen *gen;

    OBJ_CHECK(ln, TLS_LSN_MAGIC);
    AZ(pthread_mutex_lock(&ln->mtx));
    gen = ln->cur;
    OBJ_CHECK(gen, TLS_GEN_MAGIC);
    __atomic_add_fetch(&gen->refcnt, 1, __ATOMIC_RELAXED);
    AZ(pthread_mutex_unlock(&ln->mtx));
    return (gen);
}

void
tls__gen_unref(struct tls_gen **genp)
{
    struct tls_gen *gen = *genp;

    *genp = NULL;
    OBJ_CHECK(gen, TLS_GEN_MAGIC);
    if (__atomic_sub_fetch(&gen->refcnt, 1, __ATOMIC_ACQ_REL) == 0)
        gen_free(&gen);
}

void
tls_conf_clear(struct tls_conf *conf)
{
    for (unsigned i = 0; i < conf->ncert; i++) {
        free(conf->c[i].cert);
        free(conf->c[i].key);
        free(conf->c[i].ocsp);
    }
    memset(conf, 0, sizeof *conf);
}

static char *
dup_or_null(const char *s)
{
    char *d;

    if (s == NULL)
        return (NULL);
    d = strdup(s);
    AN(d);
    return (d);
}

struct tls_lsn *
tls_lsn_new(const char *spec, const struct tls_conf *conf, struct sb *err)
{
    struct tls_lsn *ln;
    struct tls_gen *gen;

    AN(spec);
    AN(conf);
    if (conf->ncert == 0) {
        sb_printf(err, "-a %s: tls needs cert=FILE,key=FILE", spec);
        return (NULL);
    }
    if (nlsns == TLS_MAX_LSN) {
        sb_printf(err, "-a %s: too many tls listen addresses", spec);
        return (NULL);
    }
    gen = gen_load(conf, err);
    if (gen == NULL)
        return (NULL);
    OBJ_NEW(ln, TLS_LSN_MAGIC);
    ln->spec = strdup(spec);
    AN(ln->spec);
    ln->conf.h2 = conf->h2;
    ln->conf.ncert = conf->ncert;
    for (unsigned i = 0; i < conf->ncert; i++) {
        ln->conf.c[i].cert = dup_or_null(conf->c[i].cert);
        ln->conf.c[i].key = dup_or_null(conf->c[i].key);
        ln->conf.c[i].ocsp = dup_or_null(conf->c[i].ocsp);
    }
    AZ(pthread_mutex_init(&ln->mtx, NULL));
    ln->cur = gen;
    lsns[nlsns++] = ln;
    return (ln);
}

void
tls_lsn_free(struct tls_lsn **lnp)
{
    struct tls_lsn *ln;
    unsigned i;

    OBJ_TAKE(ln, lnp, TLS_LSN_MAGIC);
    for (i = 0; i < nlsns && lsns[i] != ln; i++)
        continue;
    SRG_ASSERT(i < nlsns);
    lsns[i] = lsns[--nlsns];
    /* Sessions still open hold their own references on the generation. */
    tls__gen_unref(&ln->cur);
    AZ(pthread_mutex_destroy(&ln->mtx));
    tls_conf_clear(&ln->conf);
    free(ln->spec);
    OBJ_FREE(&ln);
}

/* A prepared reload: one new generation per listener, in lsns order. */
struct tls_reload {
    unsigned magic;
#define TLS_RELOAD_MAGIC 0x5b0e27c4
    unsigned n;
    struct tls_gen *gen[TLS_MAX_LSN];
};

int
tls_reload_prepare(struct tls_reload **rp, struct sb *err)
{
    struct tls_reload *r;
    struct tls_lsn *ln;

    AN(rp);
    *rp = NULL;
    if (nlsns == 0)
        return (0);
    OBJ_NEW(r, TLS_RELOAD_MAGIC);
    AN(r);
    for (r->n = 0; r->n < nlsns; r->n++) {
        ln = lsns[r->n];
        OBJ_CHECK(ln, TLS_LSN_MAGIC);
        r->gen[r->n] = gen_load(&ln->conf, err);
        if (r->gen[r->n] == NULL) {
            STAT_INC(tls_reload_fail);
            /* gen_load() named the file; say which listener it belongs to. */
            sb_printf(err, " (-a %s)", ln->spec);
            *rp = r;
            tls_reload_abort(rp);
            return (-1);
        }
    }
    *rp = r;
    return (0);
}

unsigned
tls_reload_commit(struct tls_reload **rp)
{
    struct tls_reload *r;
    struct tls_gen *old;
    unsigned ncert = 0;

    if (*rp == NULL)
        return (0);
    OBJ_TAKE(r, rp, TLS_RELOAD_MAGIC);
    SRG_ASSERT(r->n == nlsns);
    for (unsigned i = 0; i < r->n; i++) {
        struct tls_lsn *ln = lsns[i];
        AZ(pthread_mutex_lock(&ln->mtx));
        old = ln->cur;
        ln->cur = r->gen[i];
        AZ(pthread_mutex_unlock(&ln->mtx));
        tls__gen_unref(&old);
        ncert += ln->conf.ncert;
        STAT_INC(tls_reload);
        log_msg(LOG_INFO, "reload: -a %s: certificates reloaded", ln->spec);
    }
    OBJ_FREE(&r);
    return (ncert);
}

void
tls_reload_abort(struct tls_reload **rp)
{
    struct tls_reload *r;

    if (*rp == NULL)
        return;
    OBJ_TAKE(r, rp, TLS_RELOAD_MAGIC);
    for (unsigned i = 0; i < r->n; i++)
        if (r->gen[i] != NULL)
            tls__gen_unref(&r->gen[i]);
    OBJ_FREE(&r);
}

int
tls_check(const struct tls_conf *conf, struct sb *err)
{
    struct tls_gen *gen;

    AN(conf);
    if (conf->ncert == 0) {
        sb_cat(err, "tls needs cert=FILE,key=FILE");
        return (-1);
    }
    gen = gen_load(conf, err);
    if (gen == NULL)
        return (-1);
    tls__gen_unref(&gen);
    return (0);
}

int
tls_init(void)
{
    if (OPENSSL_init_ssl(OPENSSL_INIT_LOAD_SSL_STRINGS, NULL) != 1)
        return (-1);
    tls__ticket_init();
    return (0);
}

void
tls_fini(void)
{
    SRG_ASSERT(nlsns == 0); /* acc_stop() or acc_fini() freed them */
    tls__ticket_fini();
}
