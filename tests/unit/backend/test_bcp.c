/*
 * bcp: connection I/O through bcp_read()/bcp_write() on a plain pool, the
 * check of an idle connection as it is taken, refusals counted and logged
 * with the backend's name, and the TLS side's failures: files that do not load, a peer that answers
 * the handshake with plain HTTP, a peer that never answers.  The peer is
 * a real socket on 127.0.0.1, served by a thread.  Successful handshakes
 * and certificate checks are covered end to end (b_backend_tls_test.py),
 * where the openssl CLI makes the certificates.
 *
 * Also the backend counters a pool keeps (tbl/be_stats.h): requests, new
 * and reused connections, bytes, which timeout a read ran into, busy and
 * refused connects, the times of a connection that got an answer, idle
 * connections that fail their check, tagged (PROXY) pools, interim
 * answers and refusals; and their stripes, summed right whatever thread
 * counted.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "unit.h"
#include "surogat/bcp.h"
#include "surogat/defs.h"
#include "surogat/log.h"
#include "surogat/par.h"
#include "surogat/sb.h"
#include "surogat/stat.h"
#include "surogat/tim.h"

static char ebuf[512];
static struct sb err;

struct peer {
    int lfd;
    struct sockaddr_in sin;
    pthread_t thr;
    const char *answer; /* written after the first read, then the peer closes */
};

static void *
peer_loop(void *arg)
{
    struct peer *p = arg;
    char buf[4096];
    int fd;

    fd = accept(p->lfd, NULL, NULL);
    if (fd < 0)
        return (NULL);
    if (read(fd, buf, sizeof buf) > 0)
        (void)!write(fd, p->answer, strlen(p->answer));
    close(fd);
    return (NULL);
}

/* A listening socket; with answer, a thread serving one connection. */
static void
peer_start(struct peer *p, const char *answer)
{
    socklen_t sl = sizeof p->sin;

    memset(p, 0, sizeof *p);
    p->answer = answer;
    p->lfd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(p->lfd, 0);
    p->sin.sin_family = AF_INET;
    p->sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(p->lfd, (struct sockaddr *)&p->sin, sizeof p->sin), 0);
    ck_assert_int_eq(listen(p->lfd, 8), 0);
    ck_assert_int_eq(getsockname(p->lfd, (struct sockaddr *)&p->sin, &sl), 0);
    if (answer != NULL)
        AZ(pthread_create(&p->thr, NULL, peer_loop, p));
}

static void
peer_stop(struct peer *p)
{
    if (p->answer != NULL)
        AZ(pthread_join(p->thr, NULL));
    close(p->lfd);
}

static void
setup(void)
{
    par_init();
    AZ(stat_init());
    log_set_level(LOG_CRIT); /* the failed handshakes below are logged as warnings */
    sb_init(&err, ebuf, sizeof ebuf);
}

static void
teardown(void)
{
    stat_fini();
    par_fini();
}

START_TEST(tls_conf_errors)
{
    struct bcp_tls_conf c = { .name = "t", .verify = true };
    struct bcp_tls *t;

    c.ca_file = "/nonexistent/ca.pem";
    ck_assert_ptr_null(bcp_tls_new(&c, &err));
    ck_assert_msg(strstr(ebuf, "ca_file '/nonexistent/ca.pem'") != NULL, "%s", ebuf);
    sb_init(&err, ebuf, sizeof ebuf);
    c.ca_file = NULL;
    c.cert = "/etc/hostname";
    ck_assert_ptr_null(bcp_tls_new(&c, &err));
    ck_assert_msg(strstr(ebuf, "cert and key go together") != NULL, "%s", ebuf);
    sb_init(&err, ebuf, sizeof ebuf);
    c.cert = NULL;
    c.sni = c.verify_host = "127.0.0.1"; /* an address: checked, never sent */
    t = bcp_tls_new(&c, &err);
    ck_assert_msg(t != NULL, "%s", ebuf);
    bcp_tls_free(&t);
    ck_assert_ptr_null(t);
}
END_TEST

START_TEST(plain_io)
{
    struct peer p;
    struct bcp *bp;
    struct bcp_conn *c;
    struct iovec iov[2] = { { (void *)(uintptr_t) "pi", 2 }, { (void *)(uintptr_t) "ng", 2 } };
    char buf[16];
    int fd;

    peer_start(&p, NULL);
    bp = bcp_new((struct sockaddr *)&p.sin, sizeof p.sin, 0, NULL, "t", NULL);
    ck_assert_int_eq(bcp_get(bp, 2, true, &c), BCP_OK);
    ck_assert_ptr_null(c->ssl);
    fd = accept(p.lfd, NULL, NULL);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(bcp_writev(c, iov, 2, tim_mono() + 2), 0);
    ck_assert_int_eq(read(fd, buf, sizeof buf), 4);
    ck_assert_int_eq(memcmp(buf, "ping", 4), 0);
    ck_assert_int_eq(bcp_read_nb(c, buf, sizeof buf), -1); /* nothing sent yet */
    ck_assert_int_eq(errno, EAGAIN);
    ck_assert_int_eq(write(fd, "pong", 4), 4);
    ck_assert_int_eq(bcp_read_wait(c, buf, sizeof buf, tim_mono() + 2), 4);
    ck_assert_int_eq(memcmp(buf, "pong", 4), 0);
    ck_assert(!bcp_pending(c));
    ck_assert_int_eq(bcp_read(c, buf, sizeof buf, tim_mono() + 0.05), -1); /* silence */
    ck_assert_int_eq(errno, ETIMEDOUT);
    close(fd);
    ck_assert_int_eq(bcp_read(c, buf, sizeof buf, tim_mono() + 2), 0); /* EOF */
    bcp_close(&c);
    ck_assert_uint_eq(bcp_conn_count(bp), 0);
    bcp_free(&bp);
    peer_stop(&p);
}
END_TEST

static char *
slurp(const char *path)
{
    static char text[8192];
    FILE *fp = fopen(path, "r");
    size_t n;

    ck_assert_ptr_nonnull(fp);
    n = fread(text, 1, sizeof text - 1, fp);
    text[n] = '\0';
    fclose(fp);
    return (text);
}

static unsigned
count(const char *hay, const char *needle)
{
    unsigned n = 0;

    for (const char *p = hay; (p = strstr(p, needle)) != NULL; p++)
        n++;
    return (n);
}

/*
 * Taking an idle connection: a quiet one is reused; one the backend
 * closed is dropped silently; one with bytes waiting (a backend that
 * wrote past its response) is dropped, counted and logged, and a new
 * connection is made in its place.
 */
START_TEST(idle_connection_checked_when_taken)
{
    char logpath[] = "/tmp/bcp-log-XXXXXX";
    struct peer p;
    struct bcp *bp;
    struct bcp_conn *c;
    int fd, lfd = mkstemp(logpath);

    ck_assert_int_ge(lfd, 0);
    close(lfd);
    ck_assert_int_eq(log_init(logpath), 0);
    log_set_level(LOG_WARNING);
    peer_start(&p, NULL);
    bp = bcp_new((struct sockaddr *)&p.sin, sizeof p.sin, 0, NULL, "origin1", NULL);
    ck_assert_int_eq(bcp_get(bp, 2, false, &c), BCP_OK);
    ck_assert(!c->reused);
    fd = accept(p.lfd, NULL, NULL);
    ck_assert_int_ge(fd, 0);
    bcp_recycle(&c);
    ck_assert_int_eq(bcp_get(bp, 2, false, &c), BCP_OK);
    ck_assert(c->reused);

    /* Bytes the backend wrote unasked: out of step. */
    bcp_recycle(&c);
    ck_assert_int_eq(write(fd, "HTTP/1.1 200 OK\r\n", 17), 17);
    usleep(20000);
    ck_assert_int_eq(bcp_get(bp, 2, false, &c), BCP_OK);
    ck_assert(!c->reused);
    ck_assert_uint_eq(bcp_conn_count(bp), 1);
    ck_assert_uint_eq(stat_get(STAT_backend_out_of_step), 1);
    close(fd);
    fd = accept(p.lfd, NULL, NULL);
    ck_assert_int_ge(fd, 0);

    /* Closed by the backend: dropped, not counted as out of step. */
    bcp_recycle(&c);
    close(fd);
    usleep(20000);
    ck_assert_int_eq(bcp_get(bp, 2, false, &c), BCP_OK);
    ck_assert(!c->reused);
    ck_assert_uint_eq(bcp_conn_count(bp), 1);
    ck_assert_uint_eq(stat_get(STAT_backend_out_of_step), 1);
    bcp_close(&c);

    /* Refusals: each counted, logged with the backend's name, a line a second per reason. */
    for (int i = 0; i < 5; i++)
        bcp_refused(bp, BCP_R_CL_TE, "GET /x");
    bcp_refused(bp, BCP_R_BAD_CHUNK, NULL);
    ck_assert_uint_eq(stat_get(STAT_backend_bad_resp), 6);
    log_fini();
    {
        const char *text = slurp(logpath);

        ck_assert_msg(count(text, "backend origin1: bytes on an idle connection") == 1, "%s", text);
        ck_assert_msg(count(text, "backend origin1: response refused (502): both "
                                  "Content-Length and Transfer-Encoding (GET /x)") == 1,
                      "%s", text);
        ck_assert_msg(count(text, "backend origin1: response body refused: malformed chunked "
                                  "coding\n") == 1,
                      "%s", text);
    }
    ck_assert_str_eq(bcp_refuse_text(BCP_R_UPGRADE),
                     "response refused (502): unexpected 101 Switching Protocols");
    unlink(logpath);
    bcp_free(&bp);
    peer_stop(&p);
}
END_TEST

/* A failed handshake is a failed connect: no connection handed out, counted, slot freed. */
static void
tls_fails(const char *answer)
{
    struct bcp_tls_conf tc = {
        .name = "t", .sni = "a.test", .verify_host = "a.test", .verify = true
    };
    struct bcp_tls *t;
    struct peer p;
    struct bcp *bp;
    struct bcp_conn *c;

    peer_start(&p, answer);
    t = bcp_tls_new(&tc, &err);
    ck_assert_msg(t != NULL, "%s", ebuf);
    bp = bcp_new((struct sockaddr *)&p.sin, sizeof p.sin, 0, t, "t", NULL);
    ck_assert_int_eq(bcp_get(bp, 0.3, true, &c), BCP_E_CONNECT);
    ck_assert_ptr_null(c);
    ck_assert_uint_eq(stat_get(STAT_backend_tls_fail), 1);
    ck_assert_uint_eq(stat_get(STAT_backend_tls_handshake), 0);
    ck_assert_uint_eq(bcp_conn_count(bp), 0);
    bcp_free(&bp);
    bcp_tls_free(&t);
    peer_stop(&p);
}

START_TEST(tls_peer_speaks_plain_http)
{
    tls_fails("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
}
END_TEST

START_TEST(tls_peer_silent)
{
    tls_fails(NULL); /* the kernel completes the connect; nobody ever answers */
}
END_TEST

static uint64_t
ctr(const struct stat_be *st, enum stat_be_id id)
{
    uint64_t v[STAT_BE__N];

    stat_be_sum(st, v);
    return (v[id]);
}

static uint64_t
hist_count(const struct stat_be *st, enum stat_be_id first)
{
    uint64_t v[STAT_BE__N], n = 0;

    stat_be_sum(st, v);
    for (unsigned i = 0; i < STAT_NBUCKET; i++)
        n += v[first + i];
    return (n);
}

START_TEST(counts_what_it_sees)
{
    struct stat_be *st = stat_be_new();
    struct peer p, gone;
    struct bcp *bp;
    struct bcp_conn *c, *c2;
    char buf[16];
    int fd;

    peer_start(&p, NULL);
    bp = bcp_new((struct sockaddr *)&p.sin, sizeof p.sin, 1, NULL, "t", st);
    ck_assert_int_eq(bcp_get(bp, 2, true, &c), BCP_OK);
    ck_assert_uint_eq(ctr(st, STAT_BE_requests), 1);
    ck_assert_uint_eq(ctr(st, STAT_BE_connections), 1);
    fd = accept(p.lfd, NULL, NULL);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(bcp_write(c, "ping", 4, tim_mono() + 2), 0);
    ck_assert_uint_eq(ctr(st, STAT_BE_bytes_out), 4);
    /* Nothing back yet: a timeout before the first byte. */
    ck_assert_int_eq(bcp_read_wait(c, buf, sizeof buf, tim_mono() + 0.05), -1);
    ck_assert_int_eq(errno, ETIMEDOUT);
    ck_assert_uint_eq(ctr(st, STAT_BE_fail_first_byte_timeout), 1);
    ck_assert_int_eq(write(fd, "pong", 4), 4);
    ck_assert_int_eq(bcp_read_wait(c, buf, sizeof buf, tim_mono() + 2), 4);
    ck_assert_uint_eq(ctr(st, STAT_BE_bytes_in), 4);
    /* The answer began: now a timeout is between bytes. */
    ck_assert_int_eq(bcp_read(c, buf, sizeof buf, tim_mono() + 0.05), -1);
    ck_assert_uint_eq(ctr(st, STAT_BE_fail_between_bytes_timeout), 1);
    ck_assert_uint_eq(ctr(st, STAT_BE_fail_first_byte_timeout), 1);
    /* One connection allowed, and it is out. */
    ck_assert_int_eq(bcp_get(bp, 2, false, &c2), BCP_E_BUSY);
    ck_assert_uint_eq(ctr(st, STAT_BE_fail_busy), 1);
    /* Back to the pool: timed once, first byte within the total. */
    ck_assert_uint_eq(hist_count(st, STAT_BE_fb_time_le_500us), 0);
    bcp_recycle(&c);
    ck_assert_uint_eq(hist_count(st, STAT_BE_fb_time_le_500us), 1);
    ck_assert_uint_eq(hist_count(st, STAT_BE_time_le_500us), 1);
    ck_assert_uint_ge(ctr(st, STAT_BE_time_us), ctr(st, STAT_BE_fb_time_us));
    ck_assert_uint_ge(ctr(st, STAT_BE_time_us), 50000); /* the between-bytes wait */
    /* Reused: a request, no new connection; closed without an answer: not timed. */
    ck_assert_int_eq(bcp_get(bp, 2, false, &c), BCP_OK);
    ck_assert(c->reused);
    ck_assert_uint_eq(ctr(st, STAT_BE_requests), 2);
    ck_assert_uint_eq(ctr(st, STAT_BE_reused), 1);
    ck_assert_uint_eq(ctr(st, STAT_BE_connections), 1);
    bcp_close(&c);
    ck_assert_uint_eq(hist_count(st, STAT_BE_time_le_500us), 1);
    close(fd);
    bcp_free(&bp);
    peer_stop(&p);

    /* Nobody listening: refused, a failure to connect that is no timeout. */
    peer_start(&gone, NULL);
    close(gone.lfd);
    gone.lfd = socket(AF_INET, SOCK_STREAM, 0);
    bp = bcp_new((struct sockaddr *)&gone.sin, sizeof gone.sin, 0, NULL, "t", st);
    ck_assert_int_eq(bcp_get(bp, 2, true, &c), BCP_E_CONNECT);
    ck_assert_uint_eq(ctr(st, STAT_BE_fail_connect), 1);
    ck_assert_uint_eq(ctr(st, STAT_BE_fail_connect_timeout), 0);
    ck_assert_uint_eq(ctr(st, STAT_BE_requests), 2);
    bcp_free(&bp);
    peer_stop(&gone);
    stat_be_free(&st);
    ck_assert_ptr_null(st);
}
END_TEST

/*
 * Counting where taking a connection goes past the idle list.  An idle
 * connection that fails its check is neither a request nor a reuse: the
 * new one made in its place is.  An interim answer puts the first byte
 * back to come.  Refusals count as bad responses only when they are.  A
 * tagged pool reuses only its own tag's connections and, at its limit,
 * closes another tag's idle one rather than refuse (no busy refusal).
 */
START_TEST(counts_idle_checks_and_tags)
{
    struct stat_be *st = stat_be_new();
    struct peer p;
    struct bcp *bp;
    struct bcp_conn *c, *c2;
    char buf[64];
    int fd, fd2;

    peer_start(&p, NULL);
    bp = bcp_new((struct sockaddr *)&p.sin, sizeof p.sin, 1, NULL, "t", st);
    ck_assert_int_eq(bcp_get(bp, 2, false, &c), BCP_OK);
    fd = accept(p.lfd, NULL, NULL);
    ck_assert_int_ge(fd, 0);
    bcp_recycle(&c);
    ck_assert_int_eq(write(fd, "junk", 4), 4);
    usleep(20000);
    /* The only slot is the idle one, out of step: closed, and a new one in its place. */
    ck_assert_int_eq(bcp_get(bp, 2, false, &c), BCP_OK);
    ck_assert(!c->reused);
    ck_assert_uint_eq(ctr(st, STAT_BE_requests), 2);
    ck_assert_uint_eq(ctr(st, STAT_BE_connections), 2);
    ck_assert_uint_eq(ctr(st, STAT_BE_reused), 0);
    ck_assert_uint_eq(ctr(st, STAT_BE_fail_busy), 0);
    close(fd);
    fd2 = accept(p.lfd, NULL, NULL);
    ck_assert_int_ge(fd2, 0);

    /* 100 Continue, then silence: the final answer's first byte is what timed out. */
    ck_assert_int_eq(bcp_write(c, "GET", 3, tim_mono() + 2), 0);
    ck_assert_int_eq(write(fd2, "HTTP/1.1 100 Continue\r\n\r\n", 25), 25);
    ck_assert_int_eq(bcp_read_wait(c, buf, sizeof buf, tim_mono() + 2), 25);
    bcp_interim(c);
    ck_assert_int_eq(bcp_read(c, buf, sizeof buf, tim_mono() + 0.05), -1);
    ck_assert_uint_eq(ctr(st, STAT_BE_fail_first_byte_timeout), 1);
    ck_assert_uint_eq(ctr(st, STAT_BE_fail_between_bytes_timeout), 0);
    ck_assert_int_eq(write(fd2, "H", 1), 1);
    ck_assert_int_eq(bcp_read(c, buf, sizeof buf, tim_mono() + 2), 1);
    ck_assert_int_eq(bcp_read(c, buf, sizeof buf, tim_mono() + 0.05), -1);
    ck_assert_uint_eq(ctr(st, STAT_BE_fail_between_bytes_timeout), 1);
    /* Timed from the request to the final answer's first byte: past the 50ms wait. */
    bcp_close(&c);
    ck_assert_uint_eq(hist_count(st, STAT_BE_fb_time_le_500us), 1);
    ck_assert_uint_ge(ctr(st, STAT_BE_fb_time_us), 50000);
    close(fd2);

    bcp_refused(bp, BCP_R_BAD_CL, "GET /x");
    bcp_refused(bp, BCP_R_BAD_TCODING, NULL);
    ck_assert_uint_eq(ctr(st, STAT_BE_fail_bad_resp), 2);
    bcp_refused(bp, BCP_R_TRAILING_BYTES, NULL);
    bcp_refused(bp, BCP_R_BODY_CLOSED, NULL);
    bcp_refused(bp, BCP_R_BAD_GZIP, NULL);
    ck_assert_uint_eq(ctr(st, STAT_BE_fail_bad_resp), 2);
    bcp_free(&bp);
    stat_be_free(&st);

    /* Tagged, one connection at most. */
    st = stat_be_new();
    bp = bcp_new((struct sockaddr *)&p.sin, sizeof p.sin, 1, NULL, "t", st);
    ck_assert_int_eq(bcp_get_tagged(bp, 2, false, "A", 1, &c), BCP_OK);
    fd = accept(p.lfd, NULL, NULL);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(read(fd, buf, sizeof buf), 1); /* the tag, first on the wire */
    ck_assert_int_eq(bcp_write(c, "GET", 3, tim_mono() + 2), 0);
    ck_assert_uint_eq(ctr(st, STAT_BE_bytes_out), 3); /* the tag is no request byte */
    bcp_recycle(&c);
    ck_assert_int_eq(bcp_get_tagged(bp, 2, false, "A", 1, &c), BCP_OK);
    ck_assert(c->reused);
    ck_assert_uint_eq(ctr(st, STAT_BE_requests), 2);
    ck_assert_uint_eq(ctr(st, STAT_BE_reused), 1);
    ck_assert_uint_eq(ctr(st, STAT_BE_connections), 1);
    bcp_recycle(&c);
    /* Another client at the limit: A's idle connection makes room. */
    ck_assert_int_eq(bcp_get_tagged(bp, 2, false, "B", 1, &c), BCP_OK);
    ck_assert(!c->reused);
    ck_assert_uint_eq(bcp_conn_count(bp), 1);
    ck_assert_uint_eq(ctr(st, STAT_BE_requests), 3);
    ck_assert_uint_eq(ctr(st, STAT_BE_connections), 2);
    ck_assert_uint_eq(ctr(st, STAT_BE_fail_busy), 0);
    close(fd);
    fd = accept(p.lfd, NULL, NULL);
    ck_assert_int_ge(fd, 0);
    /* Nothing idle to close: refused, busy. */
    ck_assert_int_eq(bcp_get_tagged(bp, 2, false, "A", 1, &c2), BCP_E_BUSY);
    ck_assert_uint_eq(ctr(st, STAT_BE_fail_busy), 1);
    ck_assert_uint_eq(ctr(st, STAT_BE_requests), 3);
    bcp_close(&c);
    close(fd);
    bcp_free(&bp);
    stat_be_free(&st);
    peer_stop(&p);
}
END_TEST

#define NTHR 8
#define NADD 20000

static void *
adder(void *priv)
{
    struct stat_be *st = priv;

    stat_thread_enter();
    for (unsigned i = 0; i < NADD; i++) {
        stat_be_add(st, STAT_BE_requests, 1);
        stat_be_status(st, 200 + i % 400); /* 2xx to 5xx, 100 of each in turn */
    }
    stat_be_time(st, 0.002, 0.3);
    stat_thread_leave();
    return (NULL);
}

START_TEST(stripes_sum_right)
{
    struct stat_be *st = stat_be_new();
    pthread_t t[NTHR];
    uint64_t v[STAT_BE__N];

    for (unsigned i = 0; i < NTHR; i++)
        AZ(pthread_create(&t[i], NULL, adder, st));
    for (unsigned i = 0; i < NTHR; i++)
        AZ(pthread_join(t[i], NULL));
    stat_be_sum(st, v);
    ck_assert_uint_eq(v[STAT_BE_requests], NTHR * NADD);
    ck_assert_uint_eq(v[STAT_BE_resp_1xx], 0);
    for (unsigned c = STAT_BE_resp_2xx; c <= STAT_BE_resp_5xx; c++)
        ck_assert_uint_eq(v[c], NTHR * NADD / 4);
    ck_assert_uint_eq(v[STAT_BE_fb_time_le_2500us], NTHR);
    ck_assert_uint_eq(v[STAT_BE_time_le_500ms], NTHR);
    ck_assert_uint_eq(v[STAT_BE_fb_time_us], NTHR * 2000);
    ck_assert_uint_eq(v[STAT_BE_time_us], NTHR * 300000);
    stat_be_free(&st);
}
END_TEST

/* The table's promises that the code relies on: counters first, names unique. */
START_TEST(be_table_shape)
{
    for (unsigned i = 0; i < STAT_BE__N; i++) {
        ck_assert_int_eq(stat_be_is_gauge((enum stat_be_id)i), i >= STAT_BE__NCTR);
        ck_assert_ptr_nonnull(strchr(stat_be_doc((enum stat_be_id)i), '.'));
        ck_assert_ptr_null(strchr(stat_be_name((enum stat_be_id)i), '.'));
        for (unsigned j = 0; j < i; j++)
            ck_assert_str_ne(stat_be_name((enum stat_be_id)i), stat_be_name((enum stat_be_id)j));
    }
    ck_assert_uint_eq(stat_time_bucket(-1), 0);
    ck_assert_uint_eq(stat_time_bucket(0.0005), 0);
    ck_assert_uint_eq(stat_time_bucket(0.0006), 1);
    ck_assert_uint_eq(stat_time_bucket(10), STAT_NBUCKET - 2);
    ck_assert_uint_eq(stat_time_bucket(11), STAT_NBUCKET - 1);
}
END_TEST

Suite *
bcp_suite(void)
{
    Suite *s = suite_create("bcp");
    TCase *tc = tcase_create("bcp");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, tls_conf_errors);
    tcase_add_test(tc, plain_io);
    tcase_add_test(tc, idle_connection_checked_when_taken);
    tcase_add_test(tc, tls_peer_speaks_plain_http);
    tcase_add_test(tc, tls_peer_silent);
    tcase_add_test(tc, counts_what_it_sees);
    tcase_add_test(tc, counts_idle_checks_and_tags);
    tcase_add_test(tc, stripes_sum_right);
    tcase_add_test(tc, be_table_shape);
    suite_add_tcase(s, tc);
    return s;
}
