/*
 * tls_reuse: an SSL kept from a finished connection serves the next
 * client as a new one would.  A listener with two certificates (the
 * default and one chosen by SNI) and ALPN h2; real OpenSSL clients in a
 * thread over socketpairs.  Checks that the next client on a reused SSL
 * sees nothing of the last one's session, SNI certificate, ALPN protocol
 * or transport modes, that its ticket still resumes, that only clean
 * connections are kept, that a reload drops what the old certificates
 * kept, and that tls_tickets tickets are sent.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "unit.h"
#include "tls_cert.h"
#include "surogat/par.h"
#include "surogat/sb.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/tls.h"
#include "src/tls/tls_priv.h"

static char dir[256], crt[2][300], key[2][300];
static struct tls_lsn *ln;
static SSL_CTX *cctx;
static int ntickets; /* tickets the client took in the last handshake */

/* Certificate i, for name. */
static void
make_cert(unsigned i, const char *name)
{
    tls_test_cert(crt[i], key[i], name, 1 + i);
}

static int
count_ticket(SSL *ssl, SSL_SESSION *sess)
{
    (void)ssl;
    (void)sess;
    ntickets++;
    return (0); /* not kept: the test takes its own with SSL_get1_session() */
}

/* The listener, with tls_tickets as it is now. */
static void
new_lsn(void)
{
    struct tls_conf conf;
    char ebuf[512];
    struct sb err;

    memset(&conf, 0, sizeof conf);
    conf.h2 = true;
    conf.ncert = 2;
    for (unsigned i = 0; i < 2; i++) {
        conf.c[i].cert = crt[i];
        conf.c[i].key = key[i];
    }
    sb_init(&err, ebuf, sizeof ebuf);
    ln = tls_lsn_new("unit", &conf, &err);
    ck_assert_msg(ln != NULL, "%s", ebuf);
}

static void
setup(void)
{
    signal(SIGPIPE, SIG_IGN); /* a write to a client that left: EPIPE, as in surogatd */
    par_init();
    ck_assert_int_eq(stat_init(), 0);
    ck_assert_int_eq(tls_init(), 0);
    tls_test_dir(dir, sizeof dir, "surogat-tlsr");
    for (unsigned i = 0; i < 2; i++) {
        snprintf(crt[i], sizeof crt[i], "%s/c%u.pem", dir, i);
        snprintf(key[i], sizeof key[i], "%s/k%u.pem", dir, i);
    }
    make_cert(0, "default.test");
    make_cert(1, "other.test");
    new_lsn();
    cctx = SSL_CTX_new(TLS_client_method());
    SSL_CTX_set_session_cache_mode(cctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL);
    SSL_CTX_sess_set_new_cb(cctx, count_ticket);
}

static void
teardown(void)
{
    SSL_CTX_free(cctx);
    if (ln != NULL)
        tls_lsn_free(&ln);
    for (unsigned i = 0; i < 2; i++) {
        unlink(crt[i]);
        unlink(key[i]);
    }
    rmdir(dir);
}

/* One connection: the client's side and what it asks for. */
struct conn {
    int sv[2]; /* [0] server (non-blocking), [1] client */
    SSL *srv, *cli;
    const char *sni;     /* or NULL */
    bool alpn_h2;        /* offer h2 and http/1.1, else no ALPN */
    SSL_SESSION *resume; /* a ticket to offer, or NULL */
    bool garbage;        /* send no ClientHello, only junk */
};

static void *
client(void *priv)
{
    struct conn *c = priv;
    static const unsigned char protos[] = "\x02h2\x08http/1.1";
    char b;

    if (c->garbage) {
        ck_assert_int_eq(write(c->sv[1], "GET / HTTP/1.0\r\n\r\n", 18), 18);
        return (NULL);
    }
    c->cli = SSL_new(cctx);
    SSL_set_fd(c->cli, c->sv[1]);
    if (c->sni != NULL)
        SSL_set_tlsext_host_name(c->cli, c->sni);
    if (c->alpn_h2)
        ck_assert_int_eq(SSL_set_alpn_protos(c->cli, protos, sizeof protos - 1), 0);
    if (c->resume != NULL)
        SSL_set_session(c->cli, c->resume);
    if (SSL_connect(c->cli) != 1)
        return (NULL);
    /* The server's byte comes after the tickets: reading it takes them off the wire. */
    if (SSL_read(c->cli, &b, 1) != 1)
        return (NULL);
    return ((void *)1);
}

/* Handshake c; returns tls_accept()'s result.  The client thread is joined. */
static int
connect_one(struct conn *c)
{
    pthread_t th;
    void *rv;
    int r;

    ntickets = 0;
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, c->sv), 0);
    ck_assert_int_eq(fcntl(c->sv[0], F_SETFL, O_NONBLOCK), 0);
    ck_assert_int_eq(pthread_create(&th, NULL, client, c), 0);
    r = tls_accept(ln, c->sv[0], &c->srv, "unit", tim_mono() + (c->garbage ? 1 : 10));
    if (r == 0)
        ck_assert_int_eq(tls_write(c->srv, c->sv[0], "p", 1, tim_mono() + 5), 0);
    ck_assert_int_eq(pthread_join(th, &rv), 0);
    if (r == 0)
        ck_assert_ptr_eq(rv, (void *)1);
    return (r);
}

/* Both ends closed; the server's SSL through tls_close(), as a session's end. */
static void
close_one(struct conn *c)
{
    if (c->srv != NULL)
        tls_close(&c->srv);
    if (c->cli != NULL) {
        /* A client that closes without close_notify spoils its session (OpenSSL's rule). */
        (void)SSL_shutdown(c->cli);
        SSL_free(c->cli);
    }
    c->cli = NULL;
    close(c->sv[0]);
    close(c->sv[1]);
}

/* The CN of the certificate the client was shown. */
static void
peer_cn(SSL *cli, char *buf, size_t len)
{
    X509 *x = SSL_get0_peer_certificate(cli);

    ck_assert_ptr_nonnull(x);
    ck_assert_int_gt(
        X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName, buf, (int)len), 0);
}

START_TEST(reused_ssl_forgets_the_last_client)
{
    struct conn a = { .sni = "other.test", .alpn_h2 = true };
    struct conn b = { 0 };
    struct conn c = { .alpn_h2 = false };
    const unsigned char *p;
    unsigned plen;
    SSL *first;
    uint64_t reused;
    char cn[64];

    /* A: SNI picks the second certificate, ALPN h2, the HTTP/2 transport's modes. */
    ck_assert_int_eq(connect_one(&a), 0);
    ck_assert_str_eq(SSL_get_servername(a.srv, TLSEXT_NAMETYPE_host_name), "other.test");
    ck_assert(tls_alpn_h2(a.srv));
    peer_cn(a.cli, cn, sizeof cn);
    ck_assert_str_eq(cn, "other.test");
    SSL_set_mode(a.srv, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    ck_assert_int_eq(ntickets, 1); /* tls_tickets' default */
    c.resume = SSL_get1_session(a.cli);
    ck_assert_ptr_nonnull(c.resume);
    first = a.srv;
    reused = stat_get(STAT_tls_ssl_reused);
    close_one(&a);

    /* B: no SNI, no ALPN, on A's SSL object. */
    ck_assert_int_eq(connect_one(&b), 0);
    ck_assert_ptr_eq(b.srv, first);
    ck_assert_uint_eq(stat_get(STAT_tls_ssl_reused), reused + 1);
    ck_assert_ptr_null(SSL_get_servername(b.srv, TLSEXT_NAMETYPE_host_name));
    /* A's ALPN h2 armed the hand-over of its records (tls_mux.c): none of that is B's. */
    ck_assert((SSL_get_options(b.srv) & SSL_OP_ENABLE_KTLS) == 0);
    ck_assert_int_eq(SSL_get_read_ahead(b.srv), 1);
    peer_cn(b.cli, cn, sizeof cn);
    ck_assert_str_eq(cn, "default.test");
    SSL_get0_alpn_selected(b.srv, &p, &plen);
    ck_assert_uint_eq(plen, 0);
    ck_assert(!tls_alpn_h2(b.srv));
    ck_assert(!SSL_session_reused(b.srv));
    ck_assert_ptr_null(SSL_get0_peer_certificate(b.srv));
    ck_assert_uint_eq(SSL_get_mode(b.srv) &
                          (SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER),
                      0);
    ck_assert(!SSL_get_quiet_shutdown(b.srv));
    ck_assert_int_eq(ntickets, 1); /* a reused SSL still sends its ticket */
    /* Its session is new: not A's, whose ticket C presents. */
    ck_assert_ptr_ne(SSL_get_session(b.srv), NULL);
    close_one(&b);

    /* C: A's ticket resumes on the SSL that served A and B, and says nothing of A's SNI. */
    ck_assert_int_eq(connect_one(&c), 0);
    ck_assert_ptr_eq(c.srv, first);
    ck_assert(SSL_session_reused(c.srv));
    ck_assert_ptr_null(SSL_get_servername(c.srv, TLSEXT_NAMETYPE_host_name));
    ck_assert(!tls_alpn_h2(c.srv));
    SSL_SESSION_free(c.resume);
    close_one(&c);
}
END_TEST

START_TEST(failed_connections_are_not_kept)
{
    struct conn bad = { .garbage = true };
    struct conn ok = { 0 };
    struct conn broken = { 0 };
    struct conn next = { 0 };
    uint64_t reused = stat_get(STAT_tls_ssl_reused);
    SSL *ssl;

    /* A ClientHello that is not one: the handshake fails, its SSL is freed. */
    ck_assert_int_eq(connect_one(&bad), -1);
    ck_assert_ptr_null(bad.srv);
    close_one(&bad);
    ck_assert_int_eq(connect_one(&ok), 0);
    ck_assert_uint_eq(stat_get(STAT_tls_ssl_reused), reused);

    /* A session whose client went away mid-response: its write fails, the SSL is freed. */
    ssl = ok.srv;
    SSL_free(ok.cli);
    ok.cli = NULL;
    close(ok.sv[1]);
    {
        static char big[256 * 1024];
        ck_assert_int_eq(tls_write(ok.srv, ok.sv[0], big, sizeof big, tim_mono() + 5), -1);
    }
    ck_assert(SSL_get_quiet_shutdown(ssl));
    tls_close(&ok.srv);
    close(ok.sv[0]);
    ck_assert_int_eq(connect_one(&broken), 0);
    ck_assert_uint_eq(stat_get(STAT_tls_ssl_reused), reused);

    /* A clean one is kept and serves the next. */
    ssl = broken.srv;
    close_one(&broken);
    ck_assert_int_eq(connect_one(&next), 0);
    ck_assert_ptr_eq(next.srv, ssl);
    ck_assert_uint_eq(stat_get(STAT_tls_ssl_reused), reused + 1);
    close_one(&next);
}
END_TEST

START_TEST(reload_drops_what_the_old_certificates_kept)
{
    struct conn a = { 0 };
    struct conn b = { 0 };
    struct conn c = { 0 };
    struct tls_reload *r;
    char ebuf[256];
    struct sb err;
    uint64_t reused;
    SSL *old;

    ck_assert_int_eq(connect_one(&a), 0);
    ck_assert_int_eq(connect_one(&b), 0); /* open across the reload */
    old = a.srv;
    close_one(&a);
    reused = stat_get(STAT_tls_ssl_reused);
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_int_eq(tls_reload_prepare(&r, &err), 0);
    ck_assert_uint_eq(tls_reload_commit(&r), 2);
    /* The old generation lives on for b; what it kept is not handed to new handshakes. */
    ck_assert_int_eq(connect_one(&c), 0);
    ck_assert_uint_eq(stat_get(STAT_tls_ssl_reused), reused);
    ck_assert_ptr_ne(c.srv, old);
    /* b, still on the old certificates, closes last: its generation and its kept SSLs go. */
    close_one(&c);
    close_one(&b);
}
END_TEST

START_TEST(tickets_per_handshake)
{
    static const unsigned want[] = { 0, 2, 1 };

    for (unsigned i = 0; i < sizeof want / sizeof want[0]; i++) {
        struct conn c = { 0 };

        tls_lsn_free(&ln);
        par.tls_tickets = want[i];
        new_lsn();
        ck_assert_int_eq(connect_one(&c), 0);
        ck_assert_int_eq(ntickets, (int)want[i]);
        close_one(&c);
    }
}
END_TEST

/*
 * A resumed TLS 1.3 connection brings its client one new ticket (with
 * tls_tickets 1 or 2): a client uses a ticket once, so without it every
 * other connection would be a full handshake.  Each ticket resumes the
 * next connection, five in a row.
 */
START_TEST(resumption_brings_a_new_ticket)
{
    static const unsigned nt[] = { 1, 2 };

    for (unsigned i = 0; i < sizeof nt / sizeof nt[0]; i++) {
        struct conn c = { 0 };
        SSL_SESSION *last;
        uint64_t resumed;

        tls_lsn_free(&ln);
        par.tls_tickets = nt[i];
        new_lsn();
        ck_assert_int_eq(connect_one(&c), 0);
        ck_assert(!SSL_session_reused(c.cli));
        ck_assert_int_eq(ntickets, (int)nt[i]);
        last = SSL_get1_session(c.cli);
        close_one(&c);
        resumed = stat_get(STAT_tls_resumed);
        for (unsigned k = 0; k < 5; k++) {
            struct conn r = { .resume = last };

            ck_assert_int_eq(connect_one(&r), 0);
            ck_assert_msg(SSL_session_reused(r.cli), "connection %u not resumed", k + 2);
            ck_assert_int_eq(ntickets, 1);
            ck_assert_uint_eq(stat_get(STAT_tls_resumed), resumed + k + 1);
            /* The session the new ticket carries, not the one just used. */
            SSL_SESSION_free(last);
            last = SSL_get1_session(r.cli);
            ck_assert_ptr_ne(last, r.resume);
            close_one(&r);
        }
        SSL_SESSION_free(last);
    }
}
END_TEST

Suite *
tls_reuse_suite(void)
{
    Suite *s = suite_create("tls_reuse");
    TCase *tc = tcase_create("reuse");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, reused_ssl_forgets_the_last_client);
    tcase_add_test(tc, failed_connections_are_not_kept);
    tcase_add_test(tc, reload_drops_what_the_old_certificates_kept);
    tcase_add_test(tc, tickets_per_handshake);
    tcase_add_test(tc, resumption_brings_a_new_ticket);
    suite_add_tcase(s, tc);
    return s;
}
