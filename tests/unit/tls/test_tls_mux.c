/*
 * tls_mux: an HTTP/2 connection's records leaving OpenSSL at the end of
 * the handshake (tls_mux.c, tls_rec.c), against a real OpenSSL client in
 * a thread over a socketpair.  The hand-over itself (which suites, which
 * protocol versions, the tickets OpenSSL writes after it), records both
 * ways and their sizes, KeyUpdate both ways, close_notify both ways, a
 * forged record, records the client writes in one go, the write
 * contract against a full socket, and resting and coming back.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "unit.h"
#include "tls_cert.h"
#include "surogat/defs.h"
#include "surogat/par.h"
#include "surogat/sb.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/tls.h"
#include "surogat/vio.h"
#include "src/tls/tls_priv.h"

static struct tls_test_files tf; /* the listener's certificate */
static struct tls_lsn *ln;
static int sv[2]; /* [0] server (non-blocking), [1] client (blocking) */
static SSL *cli;
static SSL_CTX *cctx;
static struct tls_mux *mux;

/* The h2 listener on the certificate, with the parameters as they are now. */
static void
new_lsn(void)
{
    struct tls_conf conf;
    char ebuf[512];
    struct sb err;

    memset(&conf, 0, sizeof conf);
    conf.h2 = true;
    conf.ncert = 1;
    conf.c[0].cert = tf.crt;
    conf.c[0].key = tf.key;
    sb_init(&err, ebuf, sizeof ebuf);
    ln = tls_lsn_new("unit", &conf, &err);
    ck_assert_msg(ln != NULL, "%s", ebuf);
}

static void
setup(void)
{

    par_init();
    ck_assert_int_eq(stat_init(), 0);
    ck_assert_int_eq(tls_init(), 0);
    tls_test_files_make(&tf, "surogat-tlsmux");
    new_lsn();
    cctx = SSL_CTX_new(TLS_client_method());
    sv[0] = sv[1] = -1;
}

/* Both ends of the connection gone (close_notify ours if the mux is still there). */
static void
disconnect(void)
{
    if (mux != NULL)
        tls_mux_close(&mux);
    SSL_free(cli);
    cli = NULL;
    if (sv[0] >= 0) {
        close(sv[0]);
        close(sv[1]);
    }
    sv[0] = sv[1] = -1;
}

static void
teardown(void)
{
    disconnect();
    SSL_CTX_free(cctx);
    tls_lsn_free(&ln);
    tls_test_files_rm(&tf);
}

static void *
client_handshake(void *priv)
{
    (void)priv;
    return ((void *)(long)SSL_connect(cli));
}

/*
 * A connection: the client offers h2 (and suites or a version when
 * given); the server's handshake, then tls_mux_new().  A byte through,
 * so that the client has taken the tickets off the wire too.
 */
static void
connect_h2(const char *suites, int max_version, SSL_SESSION *resume)
{
    static const unsigned char protos[] = "\x02h2\x08http/1.1";
    SSL *srv = NULL;
    pthread_t th;
    void *rv;
    char b;

    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ck_assert_int_eq(fcntl(sv[0], F_SETFL, O_NONBLOCK), 0);
    cli = SSL_new(cctx);
    SSL_set_fd(cli, sv[1]);
    ck_assert_int_eq(SSL_set_alpn_protos(cli, protos, sizeof protos - 1), 0);
    SSL_set_tlsext_host_name(cli, "www.unit.test");
    if (suites != NULL)
        ck_assert_int_eq(SSL_set_ciphersuites(cli, suites), 1);
    if (max_version != 0)
        ck_assert_int_eq(SSL_set_max_proto_version(cli, max_version), 1);
    if (resume != NULL)
        ck_assert_int_eq(SSL_set_session(cli, resume), 1);
    ck_assert_int_eq(pthread_create(&th, NULL, client_handshake, NULL), 0);
    ck_assert_int_eq(tls_accept(ln, sv[0], &srv, "unit", tim_mono() + 10), 0);
    ck_assert_int_eq(pthread_join(th, &rv), 0);
    ck_assert_int_eq((int)(long)rv, 1);
    ck_assert(tls_alpn_h2(srv));
    mux = tls_mux_new(&srv);
    ck_assert_ptr_nonnull(mux);
    ck_assert_ptr_null(srv);
    ck_assert_int_eq(tls_mux_write(mux, "p", 1), 1);
    ck_assert_int_eq(SSL_read(cli, &b, 1), 1);
    ck_assert_int_eq(b, 'p');
}

/* Read exactly len bytes from the mux, waiting for the socket as the h2 reader does. */
static void
mux_read_all(char *buf, size_t len)
{
    size_t got = 0;
    ssize_t n;

    while (got < len) {
        n = tls_mux_read(mux, buf + got, len - got);
        if (n > 0) {
            got += (size_t)n;
            continue;
        }
        ck_assert_int_eq(n, -1);
        ck_assert_int_eq(errno, EAGAIN);
        ck_assert_int_eq(vio_wait(sv[0], POLLIN, tim_mono() + 5), 1);
    }
}

/*
 * Write all of data as the h2 transport does: from where the last write
 * stopped, waiting for the socket when it is full.
 */
static void
mux_write_all(const char *data, size_t len)
{
    size_t off = 0;
    ssize_t n;

    while (off < len) {
        n = tls_mux_write(mux, data + off, len - off);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        ck_assert_int_eq(n, -1);
        ck_assert_int_eq(errno, EAGAIN);
        ck_assert_int_eq(vio_wait(sv[0], POLLOUT, tim_mono() + 10), 1);
    }
}

struct reading {
    size_t want;
    char *in;
    unsigned recs, maxrec; /* records seen on the wire, the largest body */
};

/* The client takes want bytes, the records fed to it by hand so that they are counted. */
static void *
client_reads(void *priv)
{
    struct reading *rd = priv;
    unsigned char hdr[5], rec[20000];
    BIO *rb = BIO_new(BIO_s_mem());
    size_t got = 0;

    SSL_set0_rbio(cli, rb);
    while (got < rd->want) {
        size_t len;
        if (recv(sv[1], hdr, 5, MSG_WAITALL) != 5)
            break;
        len = (size_t)hdr[3] << 8 | hdr[4];
        if (len > sizeof rec || recv(sv[1], rec, len, MSG_WAITALL) != (ssize_t)len)
            break;
        rd->recs++;
        if (len > rd->maxrec)
            rd->maxrec = (unsigned)len;
        BIO_write(rb, hdr, 5);
        BIO_write(rb, rec, (int)len);
        for (;;) {
            int r = SSL_read(cli, rd->in + got, (int)(rd->want - got));
            if (r <= 0)
                break;
            got += (size_t)r;
        }
    }
    return ((void *)got);
}

/* Back to reading the socket itself. */
static void
client_socket_again(void)
{
    BIO *b = BIO_new_socket(sv[1], BIO_NOCLOSE);

    SSL_set0_rbio(cli, b);
}

START_TEST(records_leave_openssl_at_the_handshake_end)
{
    static const char *suites[] = { "TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384",
                                    "TLS_CHACHA20_POLY1305_SHA256" };
    static char out[200000], in[200000];

    for (size_t i = 0; i < sizeof out; i++)
        out[i] = (char)(i * 7 + i / 251);
    for (size_t s = 0; s < ARRAY_LEN(suites); s++) {
        uint64_t own = stat_get(STAT_tls_mux_own);
        struct reading rd = { .want = sizeof out, .in = in };
        pthread_t th;
        void *got;
        char buf[64];

        connect_h2(suites[s], 0, NULL);
        ck_assert(tls_mux_own(mux));
        ck_assert_uint_eq(stat_get(STAT_tls_mux_own), own + 1);
        ck_assert_str_eq(tls_mux_fact(mux, TLS_FACT_VERSION), "TLSv1.3");
        ck_assert_str_eq(tls_mux_fact(mux, TLS_FACT_CIPHER), suites[s]);
        ck_assert_str_eq(tls_mux_fact(mux, TLS_FACT_SNI), "www.unit.test");
        /* The client's bytes, then ours: full records of 16 KiB, all of it in order. */
        ck_assert_int_eq(SSL_write(cli, "hello, server", 13), 13);
        mux_read_all(buf, 13);
        ck_assert(memcmp(buf, "hello, server", 13) == 0);
        ck_assert_int_eq(pthread_create(&th, NULL, client_reads, &rd), 0);
        mux_write_all(out, sizeof out);
        ck_assert_int_eq(pthread_join(th, &got), 0);
        ck_assert_uint_eq((size_t)got, sizeof out);
        ck_assert_int_eq(memcmp(in, out, sizeof out), 0);
        ck_assert_uint_eq(rd.recs, (sizeof out + 16383) / 16384);
        ck_assert_uint_eq(rd.maxrec, 16384 + 1 + 16);
        client_socket_again();
        /* close_notify ours: the client reads a clean end. */
        tls_mux_close(&mux);
        ck_assert_int_le(SSL_read(cli, buf, sizeof buf), 0);
        ck_assert_int_eq(SSL_get_error(cli, 0), SSL_ERROR_ZERO_RETURN);
        disconnect();
    }
}
END_TEST

START_TEST(the_tickets_sealed_at_the_hand_over_resume)
{
    SSL_SESSION *sess;
    uint64_t resumed = stat_get(STAT_tls_resumed);
    char buf[8];

    connect_h2(NULL, 0, NULL);
    ck_assert(tls_mux_own(mux));
    /* The tickets were OpenSSL's writes after it let go of its write key: sealed here. */
    sess = SSL_get1_session(cli);
    ck_assert_ptr_nonnull(sess);
    ck_assert(SSL_SESSION_has_ticket(sess));
    tls_mux_close(&mux);
    ck_assert_int_eq(SSL_read(cli, buf, sizeof buf), 0);
    /* A client that closes without close_notify spoils its session (OpenSSL's rule). */
    (void)SSL_shutdown(cli);
    disconnect();
    connect_h2(NULL, 0, sess);
    ck_assert(SSL_session_reused(cli));
    ck_assert_uint_eq(stat_get(STAT_tls_resumed), resumed + 1);
    ck_assert(tls_mux_own(mux));
    SSL_SESSION_free(sess);
}
END_TEST

/* A few bytes from the client, then more than a record's worth back to it, all read whole. */
static void
both_ways(char fill)
{
    static char out[70000], in[70000];
    struct reading rd = { .want = sizeof out, .in = in };
    pthread_t th;
    void *got;
    char buf[16];

    memset(out, fill, sizeof out);
    ck_assert_int_eq(SSL_write(cli, "ping", 4), 4);
    mux_read_all(buf, 4);
    ck_assert(memcmp(buf, "ping", 4) == 0);
    ck_assert_int_eq(pthread_create(&th, NULL, client_reads, &rd), 0);
    mux_write_all(out, sizeof out);
    ck_assert_int_eq(pthread_join(th, &got), 0);
    ck_assert_uint_eq((size_t)got, sizeof out);
    ck_assert_int_eq(memcmp(in, out, sizeof out), 0);
}

START_TEST(tls12_stays_with_openssl)
{
    connect_h2(NULL, TLS1_2_VERSION, NULL);
    ck_assert(!tls_mux_own(mux));
    ck_assert_str_eq(tls_mux_fact(mux, TLS_FACT_VERSION), "TLSv1.2");
    both_ways('z');
}
END_TEST

START_TEST(key_update_both_ways)
{
    uint64_t ku = stat_get(STAT_tls_key_update);
    unsigned char peek[256];
    char buf[16];

    connect_h2(NULL, 0, NULL);
    /* Not requested: the client's next record comes under its next key, we only follow. */
    ck_assert_int_eq(SSL_key_update(cli, SSL_KEY_UPDATE_NOT_REQUESTED), 1);
    ck_assert_int_eq(SSL_write(cli, "one", 3), 3);
    mux_read_all(buf, 3);
    ck_assert(memcmp(buf, "one", 3) == 0);
    ck_assert_uint_eq(stat_get(STAT_tls_key_update), ku + 1);
    mux_write_all("two", 3);
    ck_assert_int_eq(recv(sv[1], peek, sizeof peek, MSG_PEEK), 5 + 3 + 1 + 16);
    ck_assert_int_eq(SSL_read(cli, buf, sizeof buf), 3);
    ck_assert(memcmp(buf, "two", 3) == 0);
    /* Requested: our KeyUpdate goes before our next record, then that record under the new key. */
    ck_assert_int_eq(SSL_key_update(cli, SSL_KEY_UPDATE_REQUESTED), 1);
    ck_assert_int_eq(SSL_write(cli, "three", 5), 5);
    mux_read_all(buf, 5);
    ck_assert(memcmp(buf, "three", 5) == 0);
    ck_assert_uint_eq(stat_get(STAT_tls_key_update), ku + 2);
    mux_write_all("four", 4);
    ck_assert_int_eq(recv(sv[1], peek, sizeof peek, MSG_PEEK), (5 + 5 + 1 + 16) + (5 + 4 + 1 + 16));
    ck_assert_int_eq(SSL_read(cli, buf, sizeof buf), 4);
    ck_assert(memcmp(buf, "four", 4) == 0);
    /* And on, both ways. */
    ck_assert_int_eq(SSL_write(cli, "five", 4), 4);
    mux_read_all(buf, 4);
    ck_assert(memcmp(buf, "five", 4) == 0);
    mux_write_all("six", 3);
    ck_assert_int_eq(SSL_read(cli, buf, sizeof buf), 3);
}
END_TEST

START_TEST(close_notify_and_eof)
{
    char buf[16];

    connect_h2(NULL, 0, NULL);
    ck_assert_int_eq(tls_mux_read(mux, buf, sizeof buf), -1);
    ck_assert_int_eq(errno, EAGAIN);
    ck_assert(!tls_mux_pending(mux));
    /* The client's close_notify: EOF, and the read side stays at EOF. */
    ck_assert_int_eq(SSL_shutdown(cli), 0);
    ck_assert_int_eq(vio_wait(sv[0], POLLIN, tim_mono() + 5), 1);
    ck_assert_int_eq(tls_mux_read(mux, buf, sizeof buf), 0);
    ck_assert(tls_mux_pending(mux));
    ck_assert_int_eq(tls_mux_read(mux, buf, sizeof buf), 0);
    /* A TCP FIN without close_notify is EOF too. */
    disconnect();
    connect_h2(NULL, 0, NULL);
    shutdown(sv[1], SHUT_WR);
    ck_assert_int_eq(vio_wait(sv[0], POLLIN, tim_mono() + 5), 1);
    ck_assert_int_eq(tls_mux_read(mux, buf, sizeof buf), 0);
}
END_TEST

/* A record the client sealed, taken off its write side instead of the socket. */
static size_t
client_record(const char *data, size_t len, unsigned char *out, size_t cap)
{
    BIO *wb = BIO_new(BIO_s_mem());
    BIO *sock = BIO_new_socket(sv[1], BIO_NOCLOSE);
    int n;

    SSL_set0_wbio(cli, wb);
    ck_assert_int_eq(SSL_write(cli, data, (int)len), (int)len);
    n = BIO_read(wb, out, (int)cap);
    ck_assert_int_gt(n, 0);
    SSL_set0_wbio(cli, sock);
    return ((size_t)n);
}

START_TEST(a_forged_record_fails_the_connection)
{
    unsigned char rec[256];
    char buf[16];
    size_t n;

    connect_h2(NULL, 0, NULL);
    n = client_record("secret", 6, rec, sizeof rec);
    rec[7] ^= 0x01; /* one bit of the ciphertext */
    ck_assert_int_eq(write(sv[1], rec, n), (ssize_t)n);
    ck_assert_int_eq(vio_wait(sv[0], POLLIN, tim_mono() + 5), 1);
    ck_assert_int_eq(tls_mux_read(mux, buf, sizeof buf), -1);
    ck_assert_int_eq(errno, EBADMSG);
    ck_assert(tls_mux_pending(mux)); /* the failure is news: the next read says it at once */
    ck_assert_int_eq(tls_mux_read(mux, buf, sizeof buf), -1);
    ck_assert_int_eq(tls_mux_write(mux, "x", 1), -1);
    /* The client was told: bad_record_mac. */
    ck_assert_int_le(SSL_read(cli, buf, sizeof buf), 0);
    ck_assert_int_eq(SSL_get_error(cli, 0), SSL_ERROR_SSL);
    ck_assert_int_eq(ERR_GET_REASON(ERR_peek_last_error()), SSL_R_SSLV3_ALERT_BAD_RECORD_MAC);
    ERR_clear_error();
}
END_TEST

START_TEST(a_plaintext_record_after_the_handshake_is_refused)
{
    char buf[16];

    connect_h2(NULL, 0, NULL);
    /* A handshake record in the clear, as if the handshake went on. */
    ck_assert_int_eq(write(sv[1], "\x16\x03\x03\x00\x05hello", 10), 10);
    ck_assert_int_eq(vio_wait(sv[0], POLLIN, tim_mono() + 5), 1);
    ck_assert_int_eq(tls_mux_read(mux, buf, sizeof buf), -1);
    ck_assert_int_eq(errno, EPROTO);
    /* A record longer than TLS allows. */
    disconnect();
    connect_h2(NULL, 0, NULL);
    ck_assert_int_eq(write(sv[1], "\x17\x03\x03\x41\x01", 5), 5);
    ck_assert_int_eq(vio_wait(sv[0], POLLIN, tim_mono() + 5), 1);
    ck_assert_int_eq(tls_mux_read(mux, buf, sizeof buf), -1);
    ck_assert_int_eq(errno, EPROTO);
}
END_TEST

START_TEST(records_in_one_go_pending_and_rest)
{
    unsigned char recs[1024];
    char buf[64];
    size_t n;

    connect_h2(NULL, 0, NULL);
    /* Two records in one segment: one read takes both; what is left is pending. */
    n = client_record("first record", 12, recs, sizeof recs);
    n += client_record("second", 6, recs + n, sizeof recs - n);
    ck_assert_int_eq(write(sv[1], recs, n), (ssize_t)n);
    ck_assert_int_eq(vio_wait(sv[0], POLLIN, tim_mono() + 5), 1);
    ck_assert_int_eq(tls_mux_read(mux, buf, 5), 5);
    ck_assert(memcmp(buf, "first", 5) == 0);
    ck_assert(tls_mux_pending(mux)); /* the rest of the first record */
    ck_assert_int_eq(tls_mux_read(mux, buf, sizeof buf), 7);
    ck_assert(tls_mux_pending(mux)); /* a whole record read ahead: the socket is empty */
    ck_assert_int_eq(vio_wait(sv[0], POLLIN, tim_mono() + 0.05), 0);
    tls_mux_release(mux, true); /* holds bytes: keeps its buffer */
    ck_assert_int_eq(tls_mux_read(mux, buf, sizeof buf), 6);
    ck_assert(memcmp(buf, "second", 6) == 0);
    ck_assert(!tls_mux_pending(mux));
    /* Half a record: not pending; the rest makes it readable. */
    n = client_record("split", 5, recs, sizeof recs);
    ck_assert_int_eq(write(sv[1], recs, 8), 8);
    ck_assert_int_eq(tls_mux_read(mux, buf, sizeof buf), -1);
    ck_assert_int_eq(errno, EAGAIN);
    ck_assert(!tls_mux_pending(mux));
    ck_assert_int_eq(write(sv[1], recs + 8, n - 8), (ssize_t)(n - 8));
    mux_read_all(buf, 5);
    ck_assert(memcmp(buf, "split", 5) == 0);
    /* Rested: buffers and cipher states go, and everything comes back with the next bytes. */
    tls_mux_release(mux, true);
    ck_assert_int_eq(SSL_write(cli, "again", 5), 5);
    mux_read_all(buf, 5);
    ck_assert(memcmp(buf, "again", 5) == 0);
    mux_write_all("back", 4);
    ck_assert_int_eq(SSL_read(cli, buf, sizeof buf), 4);
    ck_assert(memcmp(buf, "back", 4) == 0);
}
END_TEST

START_TEST(a_full_socket_and_the_write_contract)
{
    size_t len = 3u << 20, sent = 0, moved;
    char *out = malloc(len), *in = malloc(len), *copy;
    struct reading rd = { .want = len, .in = in };
    int small = 4096;
    pthread_t th;
    void *got;
    ssize_t n;

    for (size_t i = 0; i < len; i++)
        out[i] = (char)(i * 13 + i / 4099);
    connect_h2(NULL, 0, NULL);
    ck_assert_int_eq(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small), 0);
    /* Writes until the socket is full: each takes something, the last says EAGAIN. */
    for (;;) {
        n = tls_mux_write(mux, out + sent, len - sent);
        if (n < 0)
            break;
        ck_assert_int_gt(n, 0);
        sent += (size_t)n;
    }
    ck_assert_int_eq(errno, EAGAIN);
    /* The next call presents the rest from another address (the transport's buffer moved). */
    moved = len - sent;
    copy = malloc(moved);
    memcpy(copy, out + sent, moved);
    ck_assert_int_eq(pthread_create(&th, NULL, client_reads, &rd), 0);
    for (size_t off = 0; off < moved;) {
        n = tls_mux_write(mux, copy + off, moved - off);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        ck_assert_int_eq(errno, EAGAIN);
        ck_assert_int_eq(vio_wait(sv[0], POLLOUT, tim_mono() + 10), 1);
    }
    ck_assert_int_eq(pthread_join(th, &got), 0);
    ck_assert_uint_eq((size_t)got, len);
    ck_assert_int_eq(memcmp(in, out, len), 0);
    free(copy);
    free(out);
    free(in);
}
END_TEST

/*
 * A suite the record layer does not seal (AES-128-CCM, when configured):
 * the hand-over is refused, OpenSSL keeps the records -- reading through
 * the socket BIO, writing through the gather one -- and all works.
 */
START_TEST(a_suite_we_do_not_seal_stays_with_openssl)
{
    char ebuf[256];
    struct sb err;

    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_int_eq(par_set("tls_ciphersuites", "TLS_AES_128_CCM_SHA256:TLS_AES_128_GCM_SHA256", &err), 0);
    tls_lsn_free(&ln);
    new_lsn();
    connect_h2("TLS_AES_128_CCM_SHA256", 0, NULL);
    ck_assert(!tls_mux_own(mux));
    ck_assert_str_eq(tls_mux_fact(mux, TLS_FACT_CIPHER), "TLS_AES_128_CCM_SHA256");
    both_ways('c');
}
END_TEST

/* The keys derived here from a secret are those OpenSSL offers for it (RFC 8446 7.3). */
START_TEST(key_schedule_matches_rfc8448)
{
    /* RFC 8448 3: the server's application traffic secret and its key and iv. */
    static const unsigned char secret[32] = {
        0xa1, 0x1a, 0xf9, 0xf0, 0x55, 0x31, 0xf8, 0x56, 0xad, 0x47, 0x11, 0x6b, 0x45, 0xa9, 0x50, 0x32,
        0x82, 0x04, 0xb4, 0xf4, 0x4b, 0xfb, 0x6b, 0x3a, 0x4b, 0x4f, 0x1f, 0x3f, 0xcb, 0x63, 0x16, 0x43,
    };
    static const unsigned char want_key[16] = { 0x9f, 0x02, 0x28, 0x3b, 0x6c, 0x9c, 0x07, 0xef,
                                                0xc2, 0x6b, 0xb9, 0xf2, 0xac, 0x92, 0xe3, 0x56 };
    static const unsigned char want_iv[12] = { 0xcf, 0x78, 0x2b, 0x88, 0xdd, 0x83,
                                               0x54, 0x9a, 0xad, 0xf1, 0xe9, 0x84 };
    unsigned char k[32], iv[12];

    ck_assert_int_eq(tls__rec_derive(TLS_AEAD_AES128GCM, secret, k, iv), 0);
    ck_assert_int_eq(memcmp(k, want_key, sizeof want_key), 0);
    ck_assert_int_eq(memcmp(iv, want_iv, sizeof want_iv), 0);
}
END_TEST

Suite *
tls_mux_suite(void)
{
    Suite *s = suite_create("tls_mux");
    TCase *tc = tcase_create("mux");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, records_leave_openssl_at_the_handshake_end);
    tcase_add_test(tc, the_tickets_sealed_at_the_hand_over_resume);
    tcase_add_test(tc, tls12_stays_with_openssl);
    tcase_add_test(tc, key_update_both_ways);
    tcase_add_test(tc, close_notify_and_eof);
    tcase_add_test(tc, a_forged_record_fails_the_connection);
    tcase_add_test(tc, a_plaintext_record_after_the_handshake_is_refused);
    tcase_add_test(tc, records_in_one_go_pending_and_rest);
    tcase_add_test(tc, a_full_socket_and_the_write_contract);
    tcase_add_test(tc, a_suite_we_do_not_seal_stays_with_openssl);
    tcase_add_test(tc, key_schedule_matches_rfc8448);
    suite_add_tcase(s, tc);
    return s;
}
