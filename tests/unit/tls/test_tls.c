/*
 * tls: the I/O seam under TLS, against a real OpenSSL client in a thread
 * over a socketpair.  A self-signed certificate is made in $TMPDIR, the
 * server side is tls_accept() on a listener from tls_lsn_new().  Checks
 * the details poll(2) cannot see: decrypted bytes OpenSSL holds and whole
 * records it read ahead count as readable, a part of a record does not,
 * small writes are gathered into one record, large ones are whole, EOF
 * and close_notify are told apart from errors.
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
static SSL *srv, *cli;
static SSL_CTX *cctx;

static void *
client_handshake(void *priv)
{
    (void)priv;
    return ((void *)(long)SSL_connect(cli));
}

static void
setup(void)
{
    struct tls_conf conf;
    char ebuf[512];
    struct sb err;
    pthread_t th;
    void *rv;

    par_init();
    ck_assert_int_eq(stat_init(), 0);
    ck_assert_int_eq(tls_init(), 0);
    tls_test_files_make(&tf, "surogat-tls");
    memset(&conf, 0, sizeof conf);
    conf.ncert = 1;
    conf.c[0].cert = tf.crt;
    conf.c[0].key = tf.key;
    sb_init(&err, ebuf, sizeof ebuf);
    ln = tls_lsn_new("unit", &conf, &err);
    ck_assert_msg(ln != NULL, "%s", ebuf);

    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    ck_assert_int_eq(fcntl(sv[0], F_SETFL, O_NONBLOCK), 0);
    cctx = SSL_CTX_new(TLS_client_method());
    cli = SSL_new(cctx);
    SSL_set_fd(cli, sv[1]);
    ck_assert_int_eq(pthread_create(&th, NULL, client_handshake, NULL), 0);
    ck_assert_int_eq(tls_accept(ln, sv[0], &srv, "unit", tim_mono() + 10), 0);
    ck_assert_int_eq(pthread_join(th, &rv), 0);
    ck_assert_int_eq((int)(long)rv, 1);
    /* A byte through, so the client has also taken the TLS 1.3 session tickets off the wire. */
    ck_assert_int_eq(tls_write(srv, sv[0], "p", 1, tim_mono() + 5), 0);
    ck_assert_int_eq(SSL_read(cli, ebuf, 1), 1);
}

static void
teardown(void)
{
    if (srv != NULL)
        tls_close(&srv);
    SSL_free(cli);
    SSL_CTX_free(cctx);
    close(sv[0]);
    close(sv[1]);
    tls_lsn_free(&ln);
    tls_test_files_rm(&tf);
}

START_TEST(pending_counts_as_readable)
{
    char big[10000], buf[100];

    memset(big, 'x', sizeof big);
    ck_assert_int_eq(SSL_write(cli, big, sizeof big), (int)sizeof big);
    ck_assert_int_eq(tls_read(srv, sv[0], buf, sizeof buf, tim_mono() + 5), (int)sizeof buf);
    /* The rest of the record is decrypted and held by OpenSSL: the socket is empty. */
    ck_assert_int_eq(tls_wait_readable(srv, sv[0], 0.05), 1);
    ck_assert(tls_pending(srv));
    for (size_t got = sizeof buf; got < sizeof big;) {
        ssize_t n = tls_read_nb(srv, buf, sizeof buf);
        ck_assert_int_gt(n, 0);
        got += (size_t)n;
    }
    ck_assert(!tls_pending(srv));
    ck_assert_int_eq(tls_read_nb(srv, buf, sizeof buf), -1);
    ck_assert_int_eq(errno, EAGAIN);
    ck_assert_int_eq(tls_wait_readable(srv, sv[0], 0.05), 0);
}
END_TEST

/* Raw TLS records arriving at the client: the number of application-data records. */
static unsigned
count_records(size_t want_plain, char *plain)
{
    unsigned char hdr[5], rec[20000];
    BIO *rb = BIO_new(BIO_s_mem());
    size_t got = 0;
    unsigned n = 0;

    /* Records are fed by hand, so the count is of what was on the wire. */
    SSL_set0_rbio(cli, rb);
    while (got < want_plain) {
        size_t len;
        ck_assert_int_eq(recv(sv[1], hdr, 5, MSG_WAITALL), 5);
        len = (size_t)hdr[3] << 8 | hdr[4];
        ck_assert_uint_le(len, sizeof rec);
        ck_assert_int_eq(recv(sv[1], rec, len, MSG_WAITALL), (int)len);
        n += hdr[0] == 0x17;
        BIO_write(rb, hdr, 5);
        BIO_write(rb, rec, (int)len);
        for (;;) {
            int r = SSL_read(cli, plain + got, (int)(want_plain - got));
            if (r <= 0)
                break;
            got += (size_t)r;
        }
    }
    return (n);
}

struct counting {
    size_t want;
    char *plain;
    unsigned recs;
};

static void *
count_thread(void *priv)
{
    struct counting *c = priv;

    c->recs = count_records(c->want, c->plain);
    return (NULL);
}

START_TEST(writev_gathers_small_pieces)
{
    static char out[300000], in[300000];
    struct iovec iov[40];
    unsigned recs;

    for (size_t i = 0; i < sizeof out; i++)
        out[i] = (char)(i * 7 + i / 251);
    /* 40 pieces of 100 bytes: one record, not 40. */
    for (int i = 0; i < 40; i++) {
        iov[i].iov_base = out + i * 100;
        iov[i].iov_len = 100;
    }
    ck_assert_int_eq(tls_writev(srv, sv[0], iov, 40, tim_mono() + 5), 0);
    recs = count_records(4000, in);
    ck_assert_uint_eq(recs, 1);
    ck_assert_int_eq(memcmp(in, out, 4000), 0);
    ck_assert_uint_eq(iov[39].iov_len, 0); /* advanced, as vio_writev does */
    /* A head, then a large body: full records, the body intact. */
    iov[0].iov_base = out;
    iov[0].iov_len = 200;
    iov[1].iov_base = out + 200;
    iov[1].iov_len = sizeof out - 200;
    {
        /* More than the socket buffer holds: the client reads while we write. */
        struct counting c = { .want = sizeof out, .plain = in };
        pthread_t th;
        ck_assert_int_eq(pthread_create(&th, NULL, count_thread, &c), 0);
        ck_assert_int_eq(tls_writev(srv, sv[0], iov, 2, tim_mono() + 10), 0);
        ck_assert_int_eq(pthread_join(th, NULL), 0);
        recs = c.recs;
    }
    ck_assert_uint_eq(recs, (sizeof out + 16383) / 16384);
    ck_assert_int_eq(memcmp(in, out, sizeof out), 0);
}
END_TEST

static void *
client_reads_all(void *priv)
{
    static char sink[1 << 16];
    size_t total = 0;
    int r;

    (void)priv;
    while ((r = SSL_read(cli, sink, sizeof sink)) > 0)
        total += (size_t)r;
    return ((void *)total);
}

START_TEST(large_write_against_a_slow_reader)
{
    size_t len = 8u << 20;
    char *big = malloc(len);
    pthread_t th;
    void *total;

    /* The socket buffer fills many times: WANT_WRITE, poll, retry with the same buffer. */
    memset(big, 'y', len);
    ck_assert_int_eq(pthread_create(&th, NULL, client_reads_all, NULL), 0);
    ck_assert_int_eq(tls_write(srv, sv[0], big, len, tim_mono() + 30), 0);
    /*
     * tls_close() tries close_notify once, without blocking: wait until the
     * reader made room, or a full buffer would swallow it and the reader
     * would wait for it forever.
     */
    ck_assert_int_eq(vio_wait(sv[0], POLLOUT, tim_mono() + 30), 1);
    tls_close(&srv); /* close_notify ends the client's loop cleanly */
    ck_assert_int_eq(pthread_join(th, &total), 0);
    ck_assert_uint_eq((size_t)total, len);
    ck_assert_int_eq(SSL_get_error(cli, 0), SSL_ERROR_ZERO_RETURN);
    free(big);
}
END_TEST

START_TEST(sendfile_falls_back_to_reads)
{
    static char data[100000], in[100000];
    char path[320];
    struct counting c = { .want = 60000, .plain = in };
    pthread_t th;
    int ffd;

    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (char)(i % 251);
    snprintf(path, sizeof path, "%s/body", tf.dir);
    ffd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    ck_assert_int_ge(ffd, 0);
    ck_assert_int_eq(write(ffd, data, sizeof data), (int)sizeof data);
    ck_assert_int_eq(pthread_create(&th, NULL, count_thread, &c), 0);
    ck_assert_int_eq(tls_sendfile(srv, sv[0], ffd, 1000, 60000, tim_mono() + 10), 0);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_int_eq(memcmp(in, data + 1000, 60000), 0);
    ck_assert_uint_eq(c.recs, 4); /* 16 KiB records: 3 full and the rest */
    /* Past the end of the file: an error, not a short response. */
    ck_assert_int_eq(tls_sendfile(srv, sv[0], ffd, sizeof data - 10, 20, tim_mono() + 5), -1);
    ck_assert_int_eq(errno, EIO);
    close(ffd);
    unlink(path);
}
END_TEST

START_TEST(eof_and_timeout)
{
    char buf[16];

    /* Nothing comes: ETIMEDOUT at the deadline. */
    ck_assert_int_eq(tls_read(srv, sv[0], buf, sizeof buf, tim_mono() + 0.05), -1);
    ck_assert_int_eq(errno, ETIMEDOUT);
    /* close_notify from the client reads as EOF. */
    ck_assert_int_eq(SSL_shutdown(cli), 0);
    ck_assert_int_eq(tls_read(srv, sv[0], buf, sizeof buf, tim_mono() + 5), 0);
}
END_TEST

START_TEST(garbage_is_an_error_not_eof)
{
    char buf[16];

    ck_assert_int_eq(write(sv[1], "\x17\x03\x03\x00\x05hello", 10), 10);
    ck_assert_int_eq(tls_read(srv, sv[0], buf, sizeof buf, tim_mono() + 5), -1);
    ck_assert_int_eq(errno, EPROTO);
    ck_assert_int_eq(tls_write(srv, sv[0], "x", 1, tim_mono() + 1), -1);
}
END_TEST

START_TEST(read_ahead_record_counts_as_readable)
{
    char buf[100];

    /* Two records in one segment: one read(2) takes both, the socket is then empty. */
    ck_assert_int_eq(SSL_write(cli, "first", 5), 5);
    ck_assert_int_eq(SSL_write(cli, "second", 6), 6);
    ck_assert_int_eq(vio_wait(sv[0], POLLIN, tim_mono() + 5), 1);
    usleep(20000); /* both records are in the socket */
    ck_assert_int_eq(tls_read(srv, sv[0], buf, sizeof buf, tim_mono() + 5), 5);
    ck_assert_int_eq(recv(sv[0], buf, 1, MSG_PEEK | MSG_DONTWAIT), -1);
    ck_assert(tls_pending(srv));
    ck_assert_int_eq(tls_wait_readable(srv, sv[0], 0.05), 1);
    ck_assert_int_eq(tls_read_nb(srv, buf, sizeof buf), 6);
    ck_assert(memcmp(buf, "second", 6) == 0);
    ck_assert(!tls_pending(srv));
}
END_TEST

START_TEST(partial_record_is_not_readable)
{
    char buf[100];

    /* A record, then the first bytes of another: the socket will signal the rest. */
    ck_assert_int_eq(SSL_write(cli, "whole", 5), 5);
    ck_assert_int_eq(write(sv[1], "\x17\x03\x03\x00\x40" "abc", 8), 8);
    usleep(20000);
    ck_assert_int_eq(tls_read(srv, sv[0], buf, sizeof buf, tim_mono() + 5), 5);
    ck_assert(!tls_pending(srv)); /* else a parked session would be woken over and over */
    ck_assert_int_eq(tls_wait_readable(srv, sv[0], 0.05), 0);
    ck_assert_int_eq(tls_read_nb(srv, buf, sizeof buf), -1);
    ck_assert_int_eq(errno, EAGAIN);
}
END_TEST

/*
 * What another connection's failure leaves on this thread's error queue:
 * a handshake with a server that answers garbage, on a client SSL of its
 * own, never cleared.
 */
static void
leave_an_error(void)
{
    SSL *other = SSL_new(cctx);
    BIO *in = BIO_new(BIO_s_mem()), *out = BIO_new(BIO_s_mem());
    int r;

    SSL_set_bio(other, in, out);
    BIO_write(in, "\x16\x03\x03\x00\x05hello", 10);
    r = SSL_connect(other);
    ck_assert_int_le(r, 0);
    ck_assert_int_eq(SSL_get_error(other, r), SSL_ERROR_SSL);
    SSL_free(other);
    ck_assert_uint_ne(ERR_peek_error(), 0);
}

struct reading {
    size_t want;
    char *in;
};

static void *
client_reads(void *priv)
{
    struct reading *rd = priv;
    size_t got = 0;
    int r;

    while (got < rd->want) {
        r = SSL_read(cli, rd->in + got, (int)SRG_MIN(rd->want - got, (size_t)1 << 20));
        if (r <= 0)
            break;
        got += (size_t)r;
    }
    return ((void *)got);
}

/*
 * Write all of data as the h2 transport does: non-blocking, from where the
 * last write stopped, waiting for the socket when it is full; an error
 * left on the thread's queue before each call.  false on anything but
 * EAGAIN.
 */
static bool
write_all_nb(const char *data, size_t len)
{
    size_t off = 0;
    ssize_t n;

    while (off < len) {
        leave_an_error();
        n = tls__write_nb(srv, data + off, len - off);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n == 0 || errno != EAGAIN)
            return (false);
        if (vio_wait(sv[0], POLLOUT, tim_mono() + 10) != 1)
            return (false);
    }
    return (true);
}

START_TEST(an_error_left_by_another_connection_is_not_ours)
{
    size_t len = 3u << 20, sent = 0;
    char *out = malloc(len), *in = malloc(len);
    struct reading rd = { .want = len, .in = in };
    char buf[16];
    pthread_t th;
    void *got;
    ssize_t n;

    for (size_t i = 0; i < len; i++)
        out[i] = (char)(i * 13 + i / 4099);
    tls__mux_mode(srv);
    /* Nothing to read: EAGAIN, not the other connection's protocol error. */
    leave_an_error();
    ck_assert_int_eq(tls_read_nb(srv, buf, sizeof buf), -1);
    ck_assert_int_eq(errno, EAGAIN);
    leave_an_error();
    ck_assert(!tls_pending(srv));
    /* Writes until the socket is full: each takes something, the last says EAGAIN. */
    for (;;) {
        leave_an_error();
        n = tls__write_nb(srv, out + sent, len - sent);
        if (n < 0)
            break;
        ck_assert_int_gt(n, 0);
        sent += (size_t)n;
    }
    ck_assert_int_eq(errno, EAGAIN);
    ck_assert_uint_gt(sent, 0);
    /* The client reads; the rest goes as the socket takes it, whole and in order. */
    ck_assert_int_eq(pthread_create(&th, NULL, client_reads, &rd), 0);
    ck_assert(write_all_nb(out + sent, len - sent));
    ck_assert_int_eq(pthread_join(th, &got), 0);
    ck_assert_uint_eq((size_t)got, len);
    ck_assert_int_eq(memcmp(in, out, len), 0);
    /* Both ways still. */
    ck_assert_int_eq(SSL_write(cli, "ping", 4), 4);
    leave_an_error();
    ck_assert_int_eq(tls_read(srv, sv[0], buf, sizeof buf, tim_mono() + 5), 4);
    ck_assert(memcmp(buf, "ping", 4) == 0);
    ck_assert(write_all_nb("pong", 4));
    ck_assert_int_eq(SSL_read(cli, buf, sizeof buf), 4);
    ck_assert(memcmp(buf, "pong", 4) == 0);
    ERR_clear_error();
    free(out);
    free(in);
}
END_TEST

/* A multiplexed connection's batch: its records in as few system calls as the buffer allows. */
START_TEST(batch_records_in_one_system_call)
{
    static char out[100 * 1024], in[100 * 1024];
    struct counting c = { .want = 64 * 1024, .plain = in };
    unsigned long before;
    pthread_t th;

    for (size_t i = 0; i < sizeof out; i++)
        out[i] = (char)(i * 31 + i / 509);
    tls__mux_mode(srv);
    ck_assert_ptr_nonnull(tls__wbio_of(srv));
    /* 64 KiB: four records, one sendmsg(2). */
    before = tls__wbio_sends;
    ck_assert_int_eq(tls__write_nb(srv, out, 64 * 1024), 64 * 1024);
    ck_assert_uint_eq(tls__wbio_sends - before, 1);
    ck_assert_int_eq(pthread_create(&th, NULL, count_thread, &c), 0);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_uint_eq(c.recs, 4);
    ck_assert_int_eq(memcmp(in, out, 64 * 1024), 0);
    /* 100 KiB: seven records; the buffer holds four, so two calls. */
    c = (struct counting){ .want = sizeof out, .plain = in };
    ck_assert_int_eq(pthread_create(&th, NULL, count_thread, &c), 0);
    before = tls__wbio_sends;
    ck_assert_int_eq(tls__write_nb(srv, out, sizeof out), (int)sizeof out);
    ck_assert_uint_eq(tls__wbio_sends - before, 2);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_uint_eq(c.recs, 7);
    ck_assert_int_eq(memcmp(in, out, sizeof out), 0);
    /* One record: in place, one call. */
    before = tls__wbio_sends;
    ck_assert_int_eq(tls__write_nb(srv, "tail", 4), 4);
    ck_assert_uint_eq(tls__wbio_sends - before, 1);
    c = (struct counting){ .want = 4, .plain = in };
    ck_assert_int_eq(pthread_create(&th, NULL, count_thread, &c), 0);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_uint_eq(c.recs, 1);
    ck_assert(memcmp(in, "tail", 4) == 0);
}
END_TEST

Suite *
tls_suite(void)
{
    Suite *s = suite_create("tls");
    TCase *tc = tcase_create("io");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, pending_counts_as_readable);
    tcase_add_test(tc, writev_gathers_small_pieces);
    tcase_add_test(tc, large_write_against_a_slow_reader);
    tcase_add_test(tc, sendfile_falls_back_to_reads);
    tcase_add_test(tc, eof_and_timeout);
    tcase_add_test(tc, garbage_is_an_error_not_eof);
    tcase_add_test(tc, read_ahead_record_counts_as_readable);
    tcase_add_test(tc, partial_record_is_not_readable);
    tcase_add_test(tc, an_error_left_by_another_connection_is_not_ours);
    tcase_add_test(tc, batch_records_in_one_system_call);
    suite_add_tcase(s, tc);
    return s;
}
