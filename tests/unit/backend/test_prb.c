/*
 * prb: the window arithmetic as pure functions of the history bitmap,
 * the conf defaults and checks, and probes against a real listening
 * socket on 127.0.0.1 served by a small accept loop in a thread, which
 * answers 200, then 500, or nothing at all.  Every wait is bounded.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "unit.h"
#include "surogat/bcp.h"
#include "surogat/be.h"
#include "surogat/defs.h"
#include "surogat/log.h"
#include "surogat/par.h"
#include "surogat/prb.h"
#include "surogat/sb.h"
#include "surogat/stat.h"

static char ebuf[512];
static struct sb err;

START_TEST(window_arithmetic)
{
    char buf[80];
    struct sb out;
    uint64_t b;

    ck_assert_uint_eq(prb_good(0xff, 8), 8);
    ck_assert_uint_eq(prb_good(0xff, 4), 4); /* bits past the window do not count */
    ck_assert_uint_eq(prb_good(~(uint64_t)0, 64), 64);
    ck_assert(prb_window_healthy(0x7, 8, 3));
    ck_assert(!prb_window_healthy(0x3, 8, 3));
    ck_assert(prb_window_healthy(0x15, 8, 3)); /* any 3 of the last 8 */

    /* Varnish's default: initial = threshold - 1, so the first good probe makes it healthy. */
    b = prb_initial_bits(2, 8);
    ck_assert_uint_eq(b, 0x3);
    ck_assert(!prb_window_healthy(b, 8, 3));
    b = prb_shift(b, 8, true);
    ck_assert_uint_eq(b, 0x7);
    ck_assert(prb_window_healthy(b, 8, 3));
    /* Then sick once good results fall below the threshold in the window. */
    for (unsigned i = 0; i < 5; i++)
        b = prb_shift(b, 8, false);
    ck_assert_uint_eq(b, 0xe0);
    ck_assert(prb_window_healthy(b, 8, 3));
    b = prb_shift(b, 8, false); /* the oldest good one leaves the window */
    ck_assert_uint_eq(b, 0xc0);
    ck_assert(!prb_window_healthy(b, 8, 3));
    ck_assert_uint_eq(prb_shift(~(uint64_t)0, 64, false), ~(uint64_t)1);
    ck_assert_uint_eq(prb_initial_bits(9, 8), 0xff);
    ck_assert_uint_eq(prb_initial_bits(0, 8), 0);
    ck_assert_uint_eq(prb_initial_bits(64, 64), ~(uint64_t)0);

    sb_init(&out, buf, sizeof buf);
    prb_history(0x0f, 8, &out);
    ck_assert_str_eq(buf, "----HHHH"); /* oldest first */
    sb_init(&out, buf, sizeof buf);
    prb_history(0x1, 3, &out);
    ck_assert_str_eq(buf, "--H");
}
END_TEST

START_TEST(conf_defaults_and_errors)
{
    struct be_probe_conf in, out;

    memset(&in, 0, sizeof in);
    in.initial = -1;
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_int_eq(prb_conf_check(&in, &out, &err), 0);
    ck_assert_str_eq(out.url, "/");
    ck_assert_double_eq(out.interval, 5);
    ck_assert_double_eq(out.timeout, 2);
    ck_assert_uint_eq(out.window, 8);
    ck_assert_uint_eq(out.threshold, 3);
    ck_assert_int_eq(out.initial, 2);
    ck_assert_uint_eq(out.expected_status, 200);

    in.window = 65;
    ck_assert_int_eq(prb_conf_check(&in, &out, &err), -1);
    in.window = 2; /* threshold 3 > window */
    ck_assert_int_eq(prb_conf_check(&in, &out, &err), -1);
    in.window = 8;
    in.initial = 9;
    ck_assert_int_eq(prb_conf_check(&in, &out, &err), -1);
    in.initial = 0;
    in.interval = -1;
    ck_assert_int_eq(prb_conf_check(&in, &out, &err), -1);
    in.interval = 1;
    in.expected_status = 42;
    ck_assert_int_eq(prb_conf_check(&in, &out, &err), -1);
    in.expected_status = 204;
    in.url = "health";
    ck_assert_int_eq(prb_conf_check(&in, &out, &err), -1);
    in.url = "/a b";
    ck_assert_int_eq(prb_conf_check(&in, &out, &err), -1);
    in.url = "/ok";
    in.request = "GET / HTTP/1.0\r\n";
    ck_assert_int_eq(prb_conf_check(&in, &out, &err), -1);
    in.request = "GET / HTTP/1.0\r\n\r\n";
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_int_eq(prb_conf_check(&in, &out, &err), 0);
    ck_assert_str_eq(ebuf, "");
}
END_TEST

/*--------------------------------------------------------------------
 * A tiny origin: an accept loop answering every connection with the
 * current mode's status, or holding it silent.
 */

enum mode {
    ANSWER_200,
    ANSWER_500,
    SILENT,
};

struct origin {
    int lfd;
    unsigned short port;
    int mode;          /* atomic enum mode */
    unsigned accepted; /* atomic */
    char first_req[512];
    int held[64];
    unsigned nheld;
    bool stop;
    pthread_t thr;
};

static void *
origin_loop(void *arg)
{
    struct origin *o = arg;
    char buf[512];
    ssize_t n;
    size_t len;
    int fd;

    for (;;) {
        fd = accept(o->lfd, NULL, NULL);
        if (fd < 0 || __atomic_load_n(&o->stop, __ATOMIC_ACQUIRE)) {
            if (fd >= 0)
                close(fd);
            return (NULL);
        }
        if (__atomic_load_n(&o->mode, __ATOMIC_ACQUIRE) == SILENT) {
            if (o->nheld < ARRAY_LEN(o->held))
                o->held[o->nheld++] = fd;
            else
                close(fd);
            __atomic_add_fetch(&o->accepted, 1, __ATOMIC_RELEASE);
            continue;
        }
        /* Read the head: the request is small and comes in one segment or a few. */
        len = 0;
        while (len < sizeof buf - 1 && (n = read(fd, buf + len, sizeof buf - 1 - len)) > 0) {
            len += (size_t)n;
            buf[len] = '\0';
            if (strstr(buf, "\r\n\r\n") != NULL)
                break;
        }
        buf[len] = '\0';
        if (__atomic_load_n(&o->accepted, __ATOMIC_ACQUIRE) == 0)
            memcpy(o->first_req, buf, len + 1);
        if (__atomic_load_n(&o->mode, __ATOMIC_ACQUIRE) == ANSWER_200)
            (void)!write(fd, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", 38);
        else
            (void)!write(fd, "HTTP/1.1 500 Oops\r\nContent-Length: 0\r\n\r\n", 40);
        close(fd);
        __atomic_add_fetch(&o->accepted, 1, __ATOMIC_RELEASE);
    }
}

static void
origin_start(struct origin *o, enum mode mode)
{
    struct sockaddr_in sin;
    socklen_t sl = sizeof sin;

    memset(o, 0, sizeof *o);
    o->mode = mode;
    o->lfd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(o->lfd, 0);
    memset(&sin, 0, sizeof sin);
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(o->lfd, (struct sockaddr *)&sin, sizeof sin), 0);
    ck_assert_int_eq(listen(o->lfd, 16), 0);
    ck_assert_int_eq(getsockname(o->lfd, (struct sockaddr *)&sin, &sl), 0);
    o->port = ntohs(sin.sin_port);
    AZ(pthread_create(&o->thr, NULL, origin_loop, o));
}

static void
origin_stop(struct origin *o)
{
    struct sockaddr_in sin;
    int fd;

    __atomic_store_n(&o->stop, true, __ATOMIC_RELEASE);
    /* Wake accept() with one last connection. */
    memset(&sin, 0, sizeof sin);
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sin.sin_port = htons(o->port);
    fd = socket(AF_INET, SOCK_STREAM, 0);
    (void)connect(fd, (struct sockaddr *)&sin, sizeof sin);
    AZ(pthread_join(o->thr, NULL));
    close(fd);
    close(o->lfd);
    for (unsigned i = 0; i < o->nheld; i++)
        close(o->held[i]);
}

/* What the probe callback saw. */
struct seen {
    unsigned results;   /* atomic */
    uint64_t bits;      /* atomic */
    bool healthy;       /* atomic */
    uint64_t sick_bits; /* the history when it last went sick */
};

static void
on_result(void *priv, uint64_t bits, bool healthy)
{
    struct seen *s = priv;

    if (!healthy && __atomic_load_n(&s->healthy, __ATOMIC_RELAXED))
        __atomic_store_n(&s->sick_bits, bits, __ATOMIC_RELAXED);
    __atomic_store_n(&s->bits, bits, __ATOMIC_RELAXED);
    __atomic_store_n(&s->healthy, healthy, __ATOMIC_RELAXED);
    __atomic_add_fetch(&s->results, 1, __ATOMIC_RELEASE);
}

/* Poll cond every 10 ms for at most 10 s. */
#define WAIT_FOR(cond)                                            \
    do {                                                          \
        for (unsigned i_ = 0; i_ < 1000 && !(cond); i_++)         \
            usleep(10000);                                        \
        ck_assert_msg((cond), "timed out waiting for %s", #cond); \
    } while (0)

static void
setup(void)
{
    par_init();
    AZ(stat_init());
    log_set_level(LOG_ERR);
    AZ(prb_init());
    AZ(prb_run());
    sb_init(&err, ebuf, sizeof ebuf);
}

static void
teardown(void)
{
    prb_fini();
    stat_fini();
    par_fini();
}

static struct sockaddr_in
addr_of(unsigned short port)
{
    struct sockaddr_in sin;

    memset(&sin, 0, sizeof sin);
    sin.sin_family = AF_INET;
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sin.sin_port = htons(port);
    return (sin);
}

static struct prb *
start(unsigned short port, const struct be_probe_conf *in, struct seen *s, uint64_t *bits0)
{
    struct be_probe_conf pc;
    struct sockaddr_in sin = addr_of(port);

    ck_assert_msg(prb_conf_check(in, &pc, &err) == 0, "%s", ebuf);
    return (prb_start("t", (struct sockaddr *)&sin, sizeof sin, "127.0.0.1", NULL, 0, &pc, on_result,
                      s, bits0));
}

START_TEST(probe_200_then_500)
{
    struct be_probe_conf pc = {
        .url = "/health", .interval = 0.02, .timeout = 2, .window = 4, .threshold = 2, .initial = -1
    };
    struct origin o;
    struct seen s = { 0 };
    struct prb *p;
    uint64_t bits0;

    origin_start(&o, ANSWER_200);
    p = start(o.port, &pc, &s, &bits0);
    ck_assert_uint_eq(bits0, 0x1); /* initial = threshold - 1 = 1 */
    WAIT_FOR(__atomic_load_n(&s.results, __ATOMIC_ACQUIRE) >= 1);
    ck_assert(__atomic_load_n(&s.healthy, __ATOMIC_RELAXED)); /* healthy at the first good one */
    ck_assert_msg(strncmp(o.first_req, "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n", 39) == 0,
                  "request: %s", o.first_req);
    WAIT_FOR(__atomic_load_n(&s.bits, __ATOMIC_RELAXED) == 0xf);

    __atomic_store_n(&o.mode, ANSWER_500, __ATOMIC_RELEASE);
    WAIT_FOR(!__atomic_load_n(&s.healthy, __ATOMIC_RELAXED));
    /* Sick once fewer than 2 of the last 4 are good: exactly one good one is left. */
    ck_assert_uint_eq(__atomic_load_n(&s.sick_bits, __ATOMIC_RELAXED), 0x8);
    WAIT_FOR(__atomic_load_n(&s.bits, __ATOMIC_RELAXED) == 0);
    ck_assert_uint_ge(stat_get(STAT_probe_failed), 4);
    ck_assert_uint_ge(stat_get(STAT_probe_sent), 7); /* 3 good to 0xf, 4 bad to 0 */

    __atomic_store_n(&o.mode, ANSWER_200, __ATOMIC_RELEASE);
    WAIT_FOR(__atomic_load_n(&s.healthy, __ATOMIC_RELAXED));
    prb_stop(&p);
    ck_assert_ptr_null(p);
    prb_fini(); /* joins the thread: no callback after this */
    AZ(prb_init());
    AZ(prb_run());
    origin_stop(&o);
}
END_TEST

START_TEST(probe_expected_status_and_raw_request)
{
    struct be_probe_conf pc = { .request = "HEAD /raw HTTP/1.0\r\nX-Probe: 1\r\n\r\n",
                                .interval = 0.02,
                                .timeout = 2,
                                .window = 3,
                                .threshold = 3,
                                .initial = 0,
                                .expected_status = 500 };
    struct origin o;
    struct seen s = { 0 };
    struct prb *p;

    origin_start(&o, ANSWER_500);
    p = start(o.port, &pc, &s, NULL);
    WAIT_FOR(__atomic_load_n(&s.bits, __ATOMIC_RELAXED) == 0x7);
    ck_assert(__atomic_load_n(&s.healthy, __ATOMIC_RELAXED));
    ck_assert_str_eq(o.first_req, "HEAD /raw HTTP/1.0\r\nX-Probe: 1\r\n\r\n");
    prb_stop(&p);
    prb_fini();
    AZ(prb_init());
    AZ(prb_run());
    origin_stop(&o);
}
END_TEST

START_TEST(probe_timeout_and_refused)
{
    struct be_probe_conf pc = {
        .interval = 0.05, .timeout = 0.1, .window = 8, .threshold = 1, .initial = 1
    };
    struct origin o;
    struct seen s = { 0 }, r = { 0 };
    struct prb *p, *q;
    struct sockaddr_in sin;
    socklen_t sl = sizeof sin;
    int fd;

    /* A backend that accepts and never answers: each probe fails at its timeout. */
    origin_start(&o, SILENT);
    p = start(o.port, &pc, &s, NULL);
    ck_assert(prb_window_healthy(prb_initial_bits(1, 8), 8, 1));
    WAIT_FOR(__atomic_load_n(&s.results, __ATOMIC_ACQUIRE) >= 2);
    ck_assert_uint_eq(__atomic_load_n(&s.bits, __ATOMIC_RELAXED) & 0x3, 0);
    ck_assert_uint_ge(__atomic_load_n(&o.accepted, __ATOMIC_ACQUIRE), 1);

    /* A port nobody listens on: refused. */
    fd = socket(AF_INET, SOCK_STREAM, 0);
    sin = addr_of(0);
    AZ(bind(fd, (struct sockaddr *)&sin, sizeof sin));
    AZ(getsockname(fd, (struct sockaddr *)&sin, &sl));
    close(fd);
    q = start(ntohs(sin.sin_port), &pc, &r, NULL);
    WAIT_FOR(__atomic_load_n(&r.results, __ATOMIC_ACQUIRE) >= 2);
    ck_assert_uint_eq(__atomic_load_n(&r.bits, __ATOMIC_RELAXED) & 0x3, 0);
    /* Sick when the assumed good result leaves the window, 8 probes on. */
    WAIT_FOR(!__atomic_load_n(&r.healthy, __ATOMIC_RELAXED));
    ck_assert_uint_eq(__atomic_load_n(&r.sick_bits, __ATOMIC_RELAXED), 0);
    ck_assert_uint_ge(stat_get(STAT_probe_failed), 4);
    prb_stop(&p);
    prb_stop(&q);
    prb_fini();
    AZ(prb_init());
    AZ(prb_run());
    origin_stop(&o);
}
END_TEST

/* Probes declared before prb_run() (the policy loads before the daemon forks) wait for it. */
START_TEST(probe_waits_for_run)
{
    struct be_probe_conf pc = {
        .interval = 0.02, .timeout = 2, .window = 2, .threshold = 1, .initial = 0
    };
    struct origin o;
    struct seen s = { 0 }, never = { 0 };
    struct prb *p;

    prb_fini();
    AZ(prb_init());
    origin_start(&o, ANSWER_200);
    p = start(o.port, &pc, &s, NULL);
    (void)start(o.port, &pc, &never, NULL); /* never run: prb_fini() frees it */
    prb_fini();
    ck_assert_uint_eq(__atomic_load_n(&never.results, __ATOMIC_ACQUIRE), 0);
    ck_assert_uint_eq(__atomic_load_n(&o.accepted, __ATOMIC_ACQUIRE), 0);

    AZ(prb_init());
    p = start(o.port, &pc, &s, NULL);
    usleep(100000); /* five intervals: nothing may happen yet */
    ck_assert_uint_eq(__atomic_load_n(&s.results, __ATOMIC_ACQUIRE), 0);
    AZ(prb_run());
    WAIT_FOR(__atomic_load_n(&s.healthy, __ATOMIC_RELAXED));
    prb_stop(&p);
    origin_stop(&o);
}
END_TEST

/* A backend conf for the origin's port, with the parameters' timeouts; port is its buffer. */
static struct be_conf
origin_conf(const char *name, const struct origin *o, char *port, size_t portsz)
{
    struct be_conf c;

    snprintf(port, portsz, "%u", o->port);
    memset(&c, 0, sizeof c);
    c.name = name;
    c.host = "127.0.0.1";
    c.port = port;
    c.connect_timeout = c.first_byte_timeout = c.between_bytes_timeout = -1;
    return (c);
}

/* Through a backend: be_healthy, backend.list, the counters, and release stopping the probe. */
START_TEST(backend_probe)
{
    struct be_probe_conf pc = {
        .url = "/", .interval = 0.02, .timeout = 2, .window = 8, .threshold = 3, .initial = -1
    };
    struct be_conf c;
    struct origin o;
    struct be *be;
    char port[8], buf[2048];
    struct sb out;
    unsigned n;

    prb_fini(); /* be_start() starts its own */
    AZ(be_init());
    AZ(be_start());
    origin_start(&o, ANSWER_200);
    c = origin_conf("probed", &o, port, sizeof port);
    c.probe = &pc;
    ck_assert_msg(be_get(&c, &be, &err) == 0, "%s", ebuf);
    WAIT_FOR(be_healthy(be));
    ck_assert_uint_eq(stat_get(STAT_backend_health_changed), 1);
    WAIT_FOR(be_probe_bits(be) == 0xff);
    sb_init(&out, buf, sizeof buf);
    be_list(&out);
    ck_assert_msg(strstr(buf, "probed ") != NULL && strstr(buf, " healthy  auto ") != NULL &&
                      strstr(buf, "8/8 HHHHHHHH") != NULL,
                  "%s", buf);

    __atomic_store_n(&o.mode, ANSWER_500, __ATOMIC_RELEASE);
    WAIT_FOR(!be_healthy(be));
    ck_assert_uint_eq(stat_get(STAT_backend_health_changed), 2);
    /* The admin overrides the probe, and gives the decision back. */
    AZ(be_set_admin("probed", BE_ADMIN_HEALTHY));
    ck_assert(be_healthy(be));
    AZ(be_set_admin("probed", BE_ADMIN_AUTO));
    ck_assert(!be_healthy(be));

    be_release(&be);
    ck_assert_ptr_null(be_find("probed"));
    /* Stopped: at most the probe in flight still lands. */
    WAIT_FOR(__atomic_load_n(&o.accepted, __ATOMIC_ACQUIRE) >= 1);
    usleep(50000);
    n = __atomic_load_n(&o.accepted, __ATOMIC_ACQUIRE);
    usleep(200000); /* ten intervals */
    ck_assert_uint_le(__atomic_load_n(&o.accepted, __ATOMIC_ACQUIRE), n + 1);
    be_fini();
    AZ(prb_init());
    AZ(prb_run());
    origin_stop(&o);
}
END_TEST

/* max_connections: a backend's own limit, enforced by its pool, before the parameter's. */
START_TEST(backend_max_connections)
{
    struct be_conf c;
    struct origin o;
    struct be *be;
    struct bcp_conn *c1, *c2, *c3;
    char port[8];

    origin_start(&o, SILENT);
    c = origin_conf("small", &o, port, sizeof port);
    c.max_connections = 2;
    prb_fini();
    AZ(be_init());
    AZ(be_start());
    ck_assert_msg(be_get(&c, &be, &err) == 0, "%s", ebuf);
    par.backend_max_connections = 1; /* the backend's 2 wins */
    ck_assert_int_eq(bcp_get(be->pool, 2, true, &c1), BCP_OK);
    ck_assert_int_eq(bcp_get(be->pool, 2, true, &c2), BCP_OK);
    ck_assert_int_eq(bcp_get(be->pool, 2, true, &c3), BCP_E_BUSY);
    ck_assert_ptr_null(c3);
    ck_assert_uint_eq(bcp_conn_count(be->pool), 2);
    bcp_close(&c1);
    ck_assert_int_eq(bcp_get(be->pool, 2, true, &c3), BCP_OK);
    bcp_recycle(&c3); /* idle still counts */
    ck_assert_int_eq(bcp_get(be->pool, 2, true, &c1), BCP_E_BUSY);
    ck_assert_int_eq(bcp_get(be->pool, 2, false, &c1), BCP_OK); /* the idle one */
    ck_assert(c1->reused);
    bcp_close(&c1);
    bcp_close(&c2);
    ck_assert_uint_eq(bcp_conn_count(be->pool), 0);
    be_release(&be);
    be_fini();
    AZ(prb_init());
    AZ(prb_run());
    origin_stop(&o);
}
END_TEST

Suite *
prb_suite(void)
{
    Suite *s = suite_create("prb");
    TCase *pure = tcase_create("window");
    TCase *net = tcase_create("socket");

    tcase_add_test(pure, window_arithmetic);
    tcase_add_test(pure, conf_defaults_and_errors);
    suite_add_tcase(s, pure);
    tcase_add_checked_fixture(net, setup, teardown);
    tcase_add_test(net, probe_200_then_500);
    tcase_add_test(net, probe_expected_status_and_raw_request);
    tcase_add_test(net, probe_timeout_and_refused);
    tcase_add_test(net, probe_waits_for_run);
    tcase_add_test(net, backend_probe);
    tcase_add_test(net, backend_max_connections);
    suite_add_tcase(s, net);
    return s;
}
