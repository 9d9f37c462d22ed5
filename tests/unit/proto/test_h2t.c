/*
 * h2t: the HTTP/2 transport's glue, driven by an nghttp2 client session
 * in the test over a socketpair.  Requests become struct req and are
 * answered through h2t_ops by a responder standing in for req_serve();
 * the limits end streams and connections as they should, and count.
 * The transport runs on the test's thread (h2t__test_feed()).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "unit.h"
#include "surogat/defs.h"
#include "surogat/dlv.h"
#include "surogat/h1.h"
#include "surogat/par.h"
#include "surogat/req.h"
#include "surogat/sess.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/tp.h"
#include "surogat/wrk.h"
#include "src/proto/h2t_priv.h"

#define MAXID 1024

struct result {
    int status;        /* final */
    int interim;       /* a 1xx seen */
    size_t len;        /* body bytes */
    char body[256];    /* the first of them */
    char clen[24];     /* its content-length */
    uint32_t rst;      /* RST_STREAM code from the server, or 0 */
    bool end;
};

static struct {
    nghttp2_session *cli;
    struct h2c *c;
    struct sess *sp;
    int peer;
    struct wrk wrk;
    struct result r[MAXID];
    bool goaway;
    uint32_t goaway_code;
    int32_t goaway_last;
    bool closed;
    /* what the responder saw of the last request */
    unsigned proto;
    enum h1_body framing;
    char host[64];
    size_t body_read;
    /* /promise: what writable() and body() did */
    bool writable_before, writable_after;
    int promise_rv;
    double promise_took;
    size_t spilled;
} T;

static char bigbuf[100000];

/* ---- the client ---- */

static int
cli_header(nghttp2_session *s, const nghttp2_frame *f, const uint8_t *n, size_t nl,
           const uint8_t *v, size_t vl, uint8_t flags, void *u)
{
    struct result *r = &T.r[f->hd.stream_id % MAXID];
    char num[16];

    (void)s, (void)flags, (void)u;
    if (nl == 7 && memcmp(n, ":status", 7) == 0) {
        snprintf(num, sizeof num, "%.*s", (int)vl, v);
        if (num[0] == '1')
            r->interim = atoi(num);
        else
            r->status = atoi(num);
    } else if (nl == 14 && memcmp(n, "content-length", 14) == 0) {
        snprintf(r->clen, sizeof r->clen, "%.*s", (int)vl, v);
    }
    return (0);
}

static int
cli_data(nghttp2_session *s, uint8_t flags, int32_t id, const uint8_t *d, size_t len, void *u)
{
    struct result *r = &T.r[id % MAXID];

    (void)s, (void)flags, (void)u;
    if (r->len < sizeof r->body)
        memcpy(r->body + r->len, d, SRG_MIN(len, sizeof r->body - r->len));
    r->len += len;
    return (0);
}

static int
cli_frame(nghttp2_session *s, const nghttp2_frame *f, void *u)
{
    (void)s, (void)u;
    if ((f->hd.type == NGHTTP2_DATA || f->hd.type == NGHTTP2_HEADERS) &&
        (f->hd.flags & NGHTTP2_FLAG_END_STREAM))
        T.r[f->hd.stream_id % MAXID].end = true;
    if (f->hd.type == NGHTTP2_RST_STREAM)
        T.r[f->hd.stream_id % MAXID].rst = f->rst_stream.error_code;
    if (f->hd.type == NGHTTP2_GOAWAY) {
        T.goaway = true;
        T.goaway_code = f->goaway.error_code;
        T.goaway_last = f->goaway.last_stream_id;
    }
    return (0);
}

/*
 * Move bytes both ways until neither side has more.  All the client has
 * to say goes in one feed, as one read would bring it: the transport
 * serves requests on this thread, so a request whose body came in pieces
 * would wait for the rest here.
 */
static void
exchange(void)
{
    static uint8_t in[4 << 20];
    uint8_t buf[65536];
    const uint8_t *out;
    size_t len;
    ssize_t n;
    bool moved = true;

    for (int round = 0; round < 1000 && moved; round++) {
        moved = false;
        len = 0;
        while ((n = nghttp2_session_mem_send(T.cli, &out)) > 0) {
            ck_assert_uint_le(len + (size_t)n, sizeof in);
            memcpy(in + len, out, (size_t)n);
            len += (size_t)n;
        }
        if (len > 0) {
            h2t__test_feed(T.c, &T.wrk, in, len);
            moved = true;
        }
        while ((n = read(T.peer, buf, sizeof buf)) > 0) {
            ck_assert_int_eq(nghttp2_session_mem_recv(T.cli, buf, (size_t)n), n);
            moved = true;
        }
        if (n == 0)
            T.closed = true;
    }
}

static int32_t
get(const char *method, const char *path, const nghttp2_nv *extra, size_t nextra,
    const nghttp2_data_provider *body)
{
    nghttp2_nv nva[16] = {
        { (uint8_t *)":method", (uint8_t *)method, 7, strlen(method), 0 },
        { (uint8_t *)":scheme", (uint8_t *)"https", 7, 5, 0 },
        { (uint8_t *)":authority", (uint8_t *)"a.test", 10, 6, 0 },
        { (uint8_t *)":path", (uint8_t *)path, 5, strlen(path), 0 },
    };
    int32_t id;

    if (nextra > 0)
        memcpy(nva + 4, extra, nextra * sizeof *extra);
    id = nghttp2_submit_request(T.cli, NULL, nva, 4 + nextra, body, NULL);
    ck_assert_int_gt(id, 0);
    return (id);
}

/* ---- the responder, in place of req_serve() ---- */

static int
head(struct req *req, unsigned status, uint64_t len, bool body)
{
    struct tp_head h = { .status = status, .nblock = 1, .len = len, .body = body };

    h.block[0] = TXT_LIT("Content-Type: text/plain\r\nX-Test: yes\r\nConnection: keep-alive\r\n");
    return (req->tp->head(req, &h));
}

static int
body(struct req *req, const void *p, size_t len)
{
    struct iovec iov = { (void *)(uintptr_t)p, len };

    return (req->tp->body(req, &iov, 1));
}

static bool
is(const struct req *req, const char *path)
{
    return (req->http->url.len == strlen(path) && memcmp(req->http->url.b, path, req->http->url.len) == 0);
}

static enum req_run
respond(struct req *req)
{
    const struct txt *host = http_value(req->http, "Host");
    char msg[64];

    /* What req_serve() does first (req_check()), as the transport relies on it. */
    req->head_only = req->http->method.len == 4 && memcmp(req->http->method.b, "HEAD", 4) == 0;
    T.proto = req->http->proto;
    T.framing = req->body;
    snprintf(T.host, sizeof T.host, "%.*s", host != NULL ? (int)host->len : 1,
             host != NULL ? host->b : "-");
    if (is(req, "/hello")) {
        if (head(req, 200, 5, true) == 0 && body(req, "hello", 5) == 0)
            (void)req->tp->end(req);
    } else if (is(req, "/big")) {
        /* in pieces, as a store's segments */
        int rv = head(req, 200, sizeof bigbuf, true);
        for (size_t off = 0; rv == 0 && off < sizeof bigbuf; off += 10000)
            rv = body(req, bigbuf + off, 10000);
        if (rv == 0)
            (void)req->tp->end(req);
    } else if (is(req, "/stream")) {
        if (head(req, 200, TP_LEN_UNKNOWN, true) == 0 && body(req, "abc", 3) == 0 &&
            body(req, "def", 3) == 0)
            (void)req->tp->end(req);
    } else if (is(req, "/empty")) {
        if (head(req, 204, TP_LEN_NONE, false) == 0)
            (void)req->tp->end(req);
    } else if (is(req, "/echo")) {
        const char *d;
        ssize_t n;
        T.body_read = 0;
        while ((n = req_body_next(req, &d)) > 0)
            T.body_read += (size_t)n;
        snprintf(msg, sizeof msg, "%zu %zd", T.body_read, n);
        if (head(req, 200, strlen(msg), true) == 0 && body(req, msg, strlen(msg)) == 0)
            (void)req->tp->end(req);
    } else if (is(req, "/abort")) {
        if (head(req, 200, 100, true) == 0 && body(req, "0123456789", 10) == 0)
            ck_assert(req->tp->abort(req)); /* after bytes went out: cut */
    } else if (is(req, "/retry")) {
        /* abort() before anything went out: the head is dropped, another goes */
        ck_assert_int_eq(head(req, 200, 5, true), 0);
        ck_assert(!req->tp->abort(req));
        (void)dlv_error(req, 503, NULL, NULL);
    } else if (is(req, "/promise") || is(req, "/promise-big")) {
        /* A write writable() allowed, larger than the window: it must not wait. */
        static char big[400000];
        size_t len = is(req, "/promise") ? 30000 : sizeof big;
        double t0;
        ck_assert_int_eq(head(req, 200, len, true), 0);
        T.writable_before = req->tp->writable(req);
        t0 = tim_mono();
        T.promise_rv = body(req, big, len);
        T.promise_took = tim_mono() - t0;
        T.writable_after = req->tp->writable(req);
        T.spilled = ((struct h2s *)req->tp_priv)->c->spilled;
    } else if (is(req, "/noend")) {
        (void)head(req, 200, TP_LEN_UNKNOWN, true);
        (void)body(req, "x", 1);
    } else if (is(req, "/early")) {
        struct txt link = TXT_LIT("Link: </s.css>; rel=preload\r\n");
        ck_assert_int_eq(req->tp->interim(req, 103, &link), 0);
        if (head(req, 200, 5, true) == 0 && body(req, "early", 5) == 0)
            (void)req->tp->end(req);
    } else {
        (void)dlv_error(req, 404, NULL, NULL);
    }
    return (REQ_RUN_DONE);
}

static void
setup(void)
{
    nghttp2_session_callbacks *cb;
    struct sess *sp;
    int fds[2];

    par_init();
    AZ(stat_init());
    par.h2_initial_window_size = 1024 * 1024;
    AZ(h2t_init());
    h2t__serve = respond;
    memset(&T, 0, sizeof T);
    memset(bigbuf, 'z', sizeof bigbuf);
    T.wrk.magic = WRK_MAGIC;
    wrk_buffers_fit(&T.wrk);
    AZ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds));
    sp = calloc(1, sizeof *sp);
    AN(sp);
    sp->magic = SESS_MAGIC;
    sp->fd = fds[0];
    strcpy(sp->client_ip, "127.0.0.1");
    strcpy(sp->client_port, "4000");
    T.peer = fds[1];
    T.sp = sp;
    AZ(nghttp2_session_callbacks_new(&cb));
    nghttp2_session_callbacks_set_on_header_callback(cb, cli_header);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, cli_data);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, cli_frame);
    AZ(nghttp2_session_client_new(&T.cli, cb, NULL));
    nghttp2_session_callbacks_del(cb);
}

/*
 * Client SETTINGS, and the server's taken.  Windows are large unless iv
 * says otherwise: a response waiting for one would wait on this thread.
 */
static void
start(const nghttp2_settings_entry *iv, size_t n)
{
    nghttp2_settings_entry big = { NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 1 << 20 };

    T.c = h2t__test_conn(T.sp); /* with the parameters as the test set them */
    AZ(nghttp2_submit_settings(T.cli, NGHTTP2_FLAG_NONE, n > 0 ? iv : &big, n > 0 ? n : 1));
    AZ(nghttp2_session_set_local_window_size(T.cli, NGHTTP2_FLAG_NONE, 0, 16 << 20));
    exchange();
}

static void
teardown(void)
{
    h2t__test_close(T.c, &T.wrk);
    nghttp2_session_del(T.cli);
    close(T.peer);
    wrk_buffers_free(&T.wrk);
    h2t_fini();
    stat_fini();
}

START_TEST(hello)
{
    int32_t id;

    start(NULL, 0);
    id = get("GET", "/hello", NULL, 0, NULL);
    exchange();
    ck_assert_int_eq(T.r[id].status, 200);
    ck_assert(T.r[id].end && T.r[id].len == 5 && memcmp(T.r[id].body, "hello", 5) == 0);
    ck_assert_str_eq(T.r[id].clen, "5");
    ck_assert_uint_eq(T.proto, 20);
    ck_assert_str_eq(T.host, "a.test");
    ck_assert_int_eq(T.framing, H1_BODY_NONE);
    ck_assert_uint_eq(stat_get(STAT_h2_sess), 1);
    ck_assert_uint_eq(stat_get(STAT_h2_streams), 1);
    ck_assert_uint_eq(stat_get(STAT_client_req), 1);
    ck_assert(!T.goaway && !h2t__test_dead(T.c));
}
END_TEST

START_TEST(head_empty_unknown_length)
{
    int32_t h, e, s, b, n;

    start(NULL, 0);
    h = get("HEAD", "/hello", NULL, 0, NULL);
    e = get("GET", "/empty", NULL, 0, NULL);
    s = get("GET", "/stream", NULL, 0, NULL);
    b = get("GET", "/big", NULL, 0, NULL);
    n = get("GET", "/nope", NULL, 0, NULL);
    exchange();
    ck_assert(T.r[h].status == 200 && T.r[h].len == 0 && T.r[h].end);
    ck_assert_str_eq(T.r[h].clen, "5"); /* HEAD says the length it would have */
    ck_assert(T.r[e].status == 204 && T.r[e].len == 0 && T.r[e].end && T.r[e].clen[0] == '\0');
    ck_assert(T.r[s].status == 200 && T.r[s].len == 6 && memcmp(T.r[s].body, "abcdef", 6) == 0);
    ck_assert(T.r[s].end && T.r[s].clen[0] == '\0');
    ck_assert(T.r[b].status == 200 && T.r[b].len == sizeof bigbuf && T.r[b].end);
    ck_assert(T.r[n].status == 404 && T.r[n].end);
}
END_TEST

START_TEST(many_streams)
{
    int32_t id[100];

    start(NULL, 0);
    for (int i = 0; i < 100; i++)
        id[i] = get("GET", i % 2 ? "/hello" : "/stream", NULL, 0, NULL);
    exchange();
    for (int i = 0; i < 100; i++) {
        ck_assert_int_eq(T.r[id[i]].status, 200);
        ck_assert(T.r[id[i]].end && T.r[id[i]].len == (i % 2 ? 5u : 6u));
    }
    ck_assert_uint_eq(stat_get(STAT_h2_streams), 100);
    ck_assert_uint_eq(stat_get(STAT_h2_refused), 0);
}
END_TEST

static size_t body_left;

static ssize_t
body_cb(nghttp2_session *s, int32_t id, uint8_t *buf, size_t len, uint32_t *flags,
        nghttp2_data_source *src, void *u)
{
    size_t n = SRG_MIN(len, body_left);

    (void)s, (void)id, (void)src, (void)u;
    memset(buf, 'q', n);
    body_left -= n;
    if (body_left == 0)
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    return ((ssize_t)n);
}

START_TEST(request_bodies)
{
    nghttp2_data_provider prd = { .read_callback = body_cb };
    nghttp2_nv cl = { (uint8_t *)"content-length", (uint8_t *)"300000", 14, 6, 0 };
    int32_t id;

    start(NULL, 0);
    /* no content-length: chunked to an HTTP/1.1 backend; more than 64 KiB of DATA */
    body_left = 300000;
    id = get("POST", "/echo", NULL, 0, &prd);
    exchange();
    ck_assert_int_eq(T.r[id].status, 200);
    ck_assert_str_eq(T.r[id].body, "300000 0");
    ck_assert_int_eq(T.framing, H1_BODY_CHUNKED);
    /* with one, its length */
    body_left = 300000;
    id = get("POST", "/echo", &cl, 1, &prd);
    exchange();
    ck_assert_str_eq(T.r[id].body, "300000 0");
    ck_assert_int_eq(T.framing, H1_BODY_LENGTH);
    /* HEADERS, then a DATA that ends at once: no body at all */
    body_left = 0;
    id = get("POST", "/echo", NULL, 0, &prd);
    exchange();
    ck_assert_str_eq(T.r[id].body, "0 0");
    ck_assert_int_eq(T.framing, H1_BODY_NONE);
    ck_assert_uint_eq(stat_get(STAT_client_body_bytes), 600000);
    /* the windows came back: the connection still takes bodies */
    body_left = 300000;
    id = get("PUT", "/echo", NULL, 0, &prd);
    exchange();
    ck_assert_str_eq(T.r[id].body, "300000 0");
}
END_TEST

START_TEST(content_length_mismatch)
{
    nghttp2_data_provider prd = { .read_callback = body_cb };
    nghttp2_nv cl = { (uint8_t *)"content-length", (uint8_t *)"10", 14, 2, 0 };
    int32_t id;

    start(NULL, 0);
    body_left = 20;
    id = get("POST", "/echo", &cl, 1, &prd);
    exchange();
    ck_assert_uint_eq(T.r[id].rst, NGHTTP2_PROTOCOL_ERROR);
    ck_assert_uint_eq(stat_get(STAT_h2_err_length), 1);
    ck_assert(!T.goaway);
}
END_TEST

START_TEST(malformed_and_answered)
{
    /* NO_COPY_NAME: nghttp2 would lowercase it */
    nghttp2_nv up = { (uint8_t *)"X-Up", (uint8_t *)"1", 4, 1, NGHTTP2_NV_FLAG_NO_COPY_NAME };
    nghttp2_nv host = { (uint8_t *)"host", (uint8_t *)"b.test", 4, 6, 0 };
    nghttp2_nv conn = { (uint8_t *)"connection", (uint8_t *)"close", 10, 5, 0 };
    int32_t a, b, c, d;

    start(NULL, 0);
    a = get("GET", "/hello", &up, 1, NULL);
    b = get("GET", "/hello", &conn, 1, NULL);
    c = get("GET", "/hello", &host, 1, NULL);
    d = get("GET", "/hello", NULL, 0, NULL);
    exchange();
    ck_assert_msg(T.r[a].rst == NGHTTP2_PROTOCOL_ERROR, "rst %u status %d", T.r[a].rst,
                  T.r[a].status);
    ck_assert_uint_eq(T.r[b].rst, NGHTTP2_PROTOCOL_ERROR);
    ck_assert_int_eq(T.r[a].status, 0);
    ck_assert_int_eq(T.r[c].status, 400); /* :authority and Host disagree */
    ck_assert_int_eq(T.r[d].status, 200);
    ck_assert_uint_eq(stat_get(STAT_h2_err_field), 2);
    ck_assert_uint_eq(stat_get(STAT_client_req_400), 1);
    ck_assert(!T.goaway);
}
END_TEST

START_TEST(abort_noend_retry_interim)
{
    int32_t a, n, r, e;

    start(NULL, 0);
    a = get("GET", "/abort", NULL, 0, NULL);
    n = get("GET", "/noend", NULL, 0, NULL);
    r = get("GET", "/retry", NULL, 0, NULL);
    e = get("GET", "/early", NULL, 0, NULL);
    exchange();
    /* a short body is never taken for a whole one */
    ck_assert(T.r[a].status == 200 && !T.r[a].end && T.r[a].rst == NGHTTP2_INTERNAL_ERROR);
    ck_assert(!T.r[n].end && T.r[n].rst == NGHTTP2_INTERNAL_ERROR);
    ck_assert(T.r[r].status == 503 && T.r[r].end);
    ck_assert(T.r[e].interim == 103 && T.r[e].status == 200 && T.r[e].len == 5);
}
END_TEST

START_TEST(rapid_reset)
{
    /* RST_STREAM frames as a client sends them, raw: nghttp2 would cancel unsent streams */
    uint8_t rst[13] = { 0, 0, 4, NGHTTP2_RST_STREAM, 0, 0, 0, 0, 0, 0, 0, 0, NGHTTP2_CANCEL };

    par.h2_rapid_reset_limit = 10;
    start(NULL, 0);
    for (int i = 0; i < 40; i++) {
        int32_t id = get("GET", "/hello", NULL, 0, NULL);
        exchange();
        rst[8] = (uint8_t)id;
        rst[7] = (uint8_t)(id >> 8);
        h2t__test_feed(T.c, &T.wrk, rst, sizeof rst);
    }
    exchange();
    ck_assert(T.goaway && T.goaway_code == NGHTTP2_ENHANCE_YOUR_CALM);
    ck_assert(h2t__test_dead(T.c));
    ck_assert_uint_eq(stat_get(STAT_h2_flood_reset), 1);
}
END_TEST

START_TEST(ping_flood)
{
    par.h2_frame_flood_limit = 10;
    start(NULL, 0);
    for (int i = 0; i < 40; i++)
        AZ(nghttp2_submit_ping(T.cli, NGHTTP2_FLAG_NONE, NULL));
    exchange();
    ck_assert(T.goaway && T.goaway_code == NGHTTP2_ENHANCE_YOUR_CALM);
    ck_assert_uint_eq(stat_get(STAT_h2_flood_frames), 1);
}
END_TEST

START_TEST(window_stall)
{
    nghttp2_settings_entry iv = { NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 0 };
    int32_t id, h;

    par.h2_window_timeout = 0.2;
    start(&iv, 1);
    id = get("GET", "/big", NULL, 0, NULL);
    exchange();
    ck_assert_int_eq(T.r[id].status, 200);
    ck_assert(T.r[id].len == 0 && T.r[id].rst == NGHTTP2_CANCEL);
    ck_assert_uint_eq(stat_get(STAT_h2_window_stall), 1);
    /* the connection goes on: what needs no window gets out */
    h = get("HEAD", "/hello", NULL, 0, NULL);
    exchange();
    ck_assert(T.r[h].status == 200 && T.r[h].end && !T.goaway);
}
END_TEST

START_TEST(promised_write_spills)
{
    nghttp2_settings_entry iv = { NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 10000 };
    int32_t id;

    par.h2_window_timeout = 0.3;
    start(&iv, 1);
    id = get("GET", "/promise", NULL, 0, NULL);
    exchange();
    /* the window's worth went, the rest was kept aside, and the writer did not wait */
    ck_assert(T.writable_before && !T.writable_after);
    ck_assert_int_eq(T.promise_rv, 0);
    ck_assert(T.promise_took < 0.1);
    ck_assert_uint_eq(T.spilled, 20000);
    ck_assert_uint_eq(T.r[id].len, 10000);
    /* no end(): cut, and the kept bytes freed with the stream */
    ck_assert_uint_eq(T.r[id].rst, NGHTTP2_INTERNAL_ERROR);
    ck_assert_uint_eq(T.c->spilled, 0);
    /* more than a connection may keep: the write waits, as any, and the stream stalls */
    id = get("GET", "/promise-big", NULL, 0, NULL);
    exchange();
    ck_assert(T.writable_before);
    ck_assert_int_eq(T.promise_rv, -1);
    ck_assert(T.promise_took >= 0.25);
    ck_assert_uint_eq(T.r[id].rst, NGHTTP2_CANCEL);
    ck_assert_uint_eq(stat_get(STAT_h2_window_stall), 1);
    ck_assert_uint_eq(T.c->spilled, 0);
}
END_TEST

START_TEST(goaway_on_reload)
{
    int32_t a, b;

    start(NULL, 0);
    a = get("GET", "/hello", NULL, 0, NULL);
    exchange();
    ck_assert(!T.goaway);
    sess_reloaded();
    b = get("GET", "/hello", NULL, 0, NULL);
    exchange();
    ck_assert(T.goaway && T.goaway_code == NGHTTP2_NO_ERROR && T.goaway_last == b);
    ck_assert(T.r[a].status == 200 && T.r[b].status == 200 && T.r[b].end);
    ck_assert_uint_eq(stat_get(STAT_h2_goaway_sent), 1);
}
END_TEST

START_TEST(settings_sent)
{
    par.h2_max_concurrent_streams = 42;
    par.h2_initial_window_size = 12345;
    par.http_req_size = 20000;
    start(NULL, 0);
    ck_assert_uint_eq(nghttp2_session_get_remote_settings(
                          T.cli, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS), 42);
    ck_assert_uint_eq(nghttp2_session_get_remote_settings(
                          T.cli, NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE), 12345);
    ck_assert_uint_eq(nghttp2_session_get_remote_settings(
                          T.cli, NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE), 20000);
}
END_TEST

/* Whether the first page at p is resident. */
static bool
resident(const void *p)
{
    unsigned char v = 0;

    AZ(mincore((void *)((uintptr_t)p & ~(uintptr_t)4095), 1, &v));
    return ((v & 1) != 0);
}

/*
 * A connection that rests keeps its output buffer and the pages of its
 * frame buffer and stream map while a next burst may come; once it has
 * rested h2t__rest_release it gives them back, and the next frames are
 * built in zeroed pages as before.  Its mapped blocks are its own (the
 * frame buffer alone); the stream map is a page of its own; the HPACK
 * deflater's table sits in memory nothing touches.
 */
START_TEST(idle_frame_buffer)
{
    int32_t a, b, c;
    void *fb, *smap;

    h2t__rest_release = 3600; /* the sweeper thread stays out: the test sweeps */
    for (size_t i = 0; i < sizeof bigbuf; i++)
        bigbuf[i] = (char)(i * 7 + 1);
    start(NULL, 0);
    fb = T.c->fb;
    smap = T.c->smap;
    ck_assert_ptr_nonnull(fb);
    ck_assert_ptr_nonnull(smap);
    ck_assert_uint_eq((uintptr_t)smap % 4096, 0);
    ck_assert(T.c->maps != NULL && T.c->maps->p == fb && T.c->maps->next == NULL);
    a = get("GET", "/hello", NULL, 0, NULL);
    exchange();
    ck_assert(T.r[a].status == 200 && T.r[a].end);
    /* Resting, but not for long: nothing goes back yet. */
    ck_assert(T.c->listed && T.c->t_rest > 0);
    h2t__mem_sweep(T.c->t_rest + 1);
    ck_assert(resident(fb) && resident(smap));
    ck_assert_ptr_nonnull(T.c->ob);
    b = get("GET", "/hello", NULL, 0, NULL);
    exchange();
    ck_assert(T.r[b].status == 200 && T.r[b].end);
    /* Rested a while: the output buffer and the pages go back. */
    h2t__mem_sweep(T.c->t_rest + h2t__rest_release);
    ck_assert(!T.c->listed);
    ck_assert_ptr_null(T.c->ob);
    ck_assert(!resident(fb));
    ck_assert(!resident(smap));
    c = get("GET", "/big", NULL, 0, NULL);
    exchange();
    ck_assert(T.r[c].status == 200 && T.r[c].end && T.r[c].len == sizeof bigbuf);
    ck_assert(memcmp(T.r[c].body, bigbuf, sizeof T.r[c].body) == 0);
    ck_assert(T.c->maps != NULL && T.c->maps->p == fb && T.c->maps->next == NULL);
    ck_assert(T.c->smap == smap && T.c->listed);
    /* The deflater's table (our dynamic table is 0) is never written. */
    ck_assert_ptr_nonnull(T.c->unused);
    ck_assert(!resident(T.c->unused));
    h2t__rest_release = H2_REST_RELEASE;
}
END_TEST

Suite *
h2t_suite(void)
{
    Suite *s = suite_create("h2t");
    TCase *tc = tcase_create("core");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, hello);
    tcase_add_test(tc, head_empty_unknown_length);
    tcase_add_test(tc, many_streams);
    tcase_add_test(tc, request_bodies);
    tcase_add_test(tc, content_length_mismatch);
    tcase_add_test(tc, malformed_and_answered);
    tcase_add_test(tc, abort_noend_retry_interim);
    tcase_add_test(tc, rapid_reset);
    tcase_add_test(tc, ping_flood);
    tcase_add_test(tc, window_stall);
    tcase_add_test(tc, promised_write_spills);
    tcase_add_test(tc, goaway_on_reload);
    tcase_add_test(tc, settings_sent);
    tcase_add_test(tc, idle_frame_buffer);
    suite_add_tcase(s, tc);
    return (s);
}
