/*
 * fetch: the backend side of a transaction against a backend the test
 * plays.  The backend is a real struct be (be_get(), as a policy declares
 * one) on a loopback port, so the fetch reaches it through its own
 * connection pool (bcp); a thread serves that port from a script of
 * exchanges: it records each request as it arrives and answers with the
 * pieces it is given, pausing between them so that the fetch reads them
 * apart, then keeps or closes the connection.  It keeps every connection
 * the pool opens, and an exchange may wait for its request on a given one.
 *
 * Covered: the backend request as fetch_bereq.c builds it (hop-by-hop
 * fields gone, X-Forwarded-For appended, X-Forwarded-Proto, Via, Host,
 * our own framing of a request body; a miss's GET without conditions);
 * bodies framed by Content-Length, chunked coding and the end of the
 * connection, through a sink; storing into a busy object and the object
 * afterwards, and a reader streaming from it on another thread while it
 * fills; a 304 renewing a stale object; a gzip body checked, and a
 * corrupt or truncated one refused; a client that fails mid-body, which
 * stops a pass but not a miss; backends that refuse connections or are
 * at their max_connections (503), stay silent past first_byte_timeout
 * (504), close before the head, send something that is not HTTP or cut
 * a body short (502); kept connections found dead, retried once on a
 * fresh one (not for a POST); interim responses before the final one, and
 * 103s handed up as they come; an upgrade the backend switched
 * (FETCH_UPGRADE) or refused (an ordinary response, its connection closed);
 * a background refresh, a fetch with no request behind it (fetch_refresh()).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <zlib.h>

#include "unit.h"
#include "cache_fixture.h"
#include "surogat/bcp.h"
#include "surogat/be.h"
#include "surogat/cc.h"
#include "surogat/defs.h"
#include "surogat/fetch.h"
#include "surogat/hsh.h"
#include "surogat/http.h"
#include "surogat/par.h"
#include "surogat/sb.h"
#include "surogat/stat.h"
#include "surogat/sto.h"
#include "surogat/tim.h"
#include "surogat/ws.h"

/* How long the backend waits for anything before it gives up (a test that went wrong). */
#define PEER_WAIT_MS 5000
/* Pause between the pieces of an answer, so that the fetch reads them apart. */
#define PEER_PAUSE_US 20000

/* ---- the backend: a thread serving a script of exchanges ---- */

struct piece {
    const char *p;
    size_t len;
};

struct exch {
    struct piece piece[6]; /* written in turn, with a pause between */
    unsigned npiece;
    int on;     /* the connection it waits for a request on (0: the first
                 * accepted); -1 (answer()'s): whichever has one first */
    bool close; /* close the connection after the answer */
    bool hold;  /* after the answer, if any, wait until the fetch closes */
};

#define NEXCH 5
#define NCONN 4

static struct {
    int lfd;
    struct sockaddr_in sin;
    pthread_t thr;
    bool running;
    struct exch ex[NEXCH];
    unsigned nex;
    char got[NEXCH][8192]; /* each request as it arrived, NUL-terminated */
    size_t gotlen[NEXCH];
    int fd[NCONN];  /* the connections accepted, in order; -1 once closed */
    unsigned conns; /* connections accepted */
} peer;

/* Wait for fd to turn readable; false after PEER_WAIT_MS. */
static bool
readable(int fd)
{
    struct pollfd pfd = { .fd = fd, .events = POLLIN };

    return (poll(&pfd, 1, PEER_WAIT_MS) == 1);
}

/* The length of the request in b[0..len), 0 while incomplete: a head, then its body. */
static size_t
request_len(const char *b, size_t len)
{
    const char *e = memmem(b, len, "\r\n\r\n", 4), *cl;
    size_t head;

    if (e == NULL)
        return (0);
    head = (size_t)(e - b) + 4;
    if ((cl = memmem(b, head, "\r\nContent-Length: ", 18)) != NULL) {
        size_t n = strtoul(cl + 18, NULL, 10);
        return (len >= head + n ? head + n : 0);
    }
    if (memmem(b, head, "\r\nTransfer-Encoding: chunked\r\n", 30) != NULL) {
        e = memmem(b + head, len - head, "0\r\n\r\n", 5);
        return (e != NULL ? (size_t)(e - b) + 5 : 0);
    }
    return (head);
}

/* One request into peer.got[i]: false when the connection ended before any of it. */
static bool
read_request(int fd, unsigned i)
{
    char *b = peer.got[i];
    size_t len = 0;
    ssize_t n;

    for (;;) {
        if (!readable(fd))
            return (len > 0);
        n = read(fd, b + len, sizeof peer.got[i] - 1 - len);
        if (n <= 0)
            return (len > 0);
        len += (size_t)n;
        b[len] = '\0';
        peer.gotlen[i] = len;
        if (request_len(b, len) > 0)
            return (true);
    }
}

/*
 * Request i, read on connection `on` (-1: any), accepting connections
 * as they come: the index of its connection, or -1 when none came.
 * Connections the pool closed meanwhile are closed here too.
 */
static int
next_request(int on, unsigned i)
{
    struct pollfd pfd[1 + NCONN];
    unsigned conn[1 + NCONN], n;
    int fd;

    for (;;) {
        n = 0;
        pfd[n++] = (struct pollfd){ .fd = peer.lfd, .events = POLLIN };
        for (unsigned k = 0; k < peer.conns; k++) {
            if (peer.fd[k] < 0 || (on >= 0 && k != (unsigned)on))
                continue;
            conn[n] = k;
            pfd[n++] = (struct pollfd){ .fd = peer.fd[k], .events = POLLIN };
        }
        if (poll(pfd, n, PEER_WAIT_MS) <= 0)
            return (-1);
        for (unsigned j = 1; j < n; j++) {
            if (!(pfd[j].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            if (read_request(pfd[j].fd, i))
                return ((int)conn[j]);
            close(pfd[j].fd);
            peer.fd[conn[j]] = -1;
        }
        if ((pfd[0].revents & POLLIN) && peer.conns < NCONN) {
            if ((fd = accept(peer.lfd, NULL, NULL)) < 0)
                return (-1);
            peer.fd[peer.conns++] = fd;
        }
    }
}

static void *
peer_loop(void *arg)
{
    int k, fd;

    (void)arg;
    for (unsigned i = 0; i < peer.nex; i++) {
        const struct exch *x = &peer.ex[i];
        char c;

        if ((k = next_request(x->on, i)) < 0)
            break;
        fd = peer.fd[k];
        for (unsigned p = 0; p < x->npiece; p++) {
            if (p > 0)
                usleep(PEER_PAUSE_US);
            if (write(fd, x->piece[p].p, x->piece[p].len) != (ssize_t)x->piece[p].len)
                break;
        }
        if (x->hold) {
            /* Until the fetch gives up and closes. */
            while (readable(fd) && read(fd, &c, 1) > 0)
                continue;
        }
        if (x->close || x->hold) {
            close(fd);
            peer.fd[k] = -1;
        }
    }
    for (unsigned j = 0; j < peer.conns; j++)
        if (peer.fd[j] >= 0)
            close(peer.fd[j]);
    return (NULL);
}

/* An exchange answered with the NUL-terminated pieces given, NULL-ended. */
static struct exch *
answer(const char *first, ...)
{
    struct exch *x;
    va_list ap;

    ck_assert_uint_lt(peer.nex, NEXCH);
    x = &peer.ex[peer.nex++];
    x->on = -1;
    va_start(ap, first);
    for (const char *p = first; p != NULL; p = va_arg(ap, const char *)) {
        ck_assert_uint_lt(x->npiece, ARRAY_LEN(x->piece));
        x->piece[x->npiece++] = (struct piece){ p, strlen(p) };
    }
    va_end(ap);
    return (x);
}

/* An answer piece of binary bytes. */
static void
answer_bytes(struct exch *x, const void *p, size_t len)
{
    ck_assert_uint_lt(x->npiece, ARRAY_LEN(x->piece));
    x->piece[x->npiece++] = (struct piece){ p, len };
}

static void
peer_run(void)
{
    AZ(pthread_create(&peer.thr, NULL, peer_loop, NULL));
    peer.running = true;
}

/* ---- the backend as the fetch sees it, the client request, the busy object ---- */

static struct be *be;
static unsigned be_max; /* the backend's max_connections; 0: the parameter's */
/* What a worker lends a fetch: its workspace and its backend receive buffer. */
struct bomem {
    struct ws ws;
    char ws_block[64 * 1024];
    char rx[64 * 1024];
};
static struct bomem mem[2]; /* for two fetches at once */
static struct http_hdr chdrs[32];
static struct http creq;
static char portstr[8];

/* The backend on the peer's port, with these timeouts (<0: the parameters). */
static void
mkbe(double first_byte, double between_bytes)
{
    char ebuf[256];
    struct be_conf c;
    struct sb err;

    memset(&c, 0, sizeof c);
    c.name = "origin";
    c.host = "127.0.0.1";
    c.port = portstr;
    c.connect_timeout = 2;
    c.first_byte_timeout = first_byte;
    c.between_bytes_timeout = between_bytes;
    c.max_connections = be_max;
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_msg(be_get(&c, &be, &err) == 0, "%s", ebuf);
}

static void
add(struct http *hp, const char *n, const char *v)
{
    ck_assert_int_eq(http_add(hp, (struct txt){ n, strlen(n) }, (struct txt){ v, strlen(v) }), 0);
}

static void
setup(void)
{
    socklen_t sl = sizeof peer.sin;

    cache_setup();
    AZ(be_init());
    memset(&peer, 0, sizeof peer);
    peer.lfd = socket(AF_INET, SOCK_STREAM, 0);
    ck_assert_int_ge(peer.lfd, 0);
    peer.sin.sin_family = AF_INET;
    peer.sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(peer.lfd, (struct sockaddr *)&peer.sin, sizeof peer.sin), 0);
    ck_assert_int_eq(listen(peer.lfd, 8), 0);
    ck_assert_int_eq(getsockname(peer.lfd, (struct sockaddr *)&peer.sin, &sl), 0);
    snprintf(portstr, sizeof portstr, "%u", ntohs(peer.sin.sin_port));
    mkbe(2, 2);
    http_init(&creq, chdrs, ARRAY_LEN(chdrs));
    creq.method = TXT_LIT("GET");
    creq.url = TXT_LIT("/x");
    creq.proto = 11;
}

static void
teardown(void)
{
    be_fini(); /* closes the pooled connections: the peer sees them end */
    if (peer.running)
        AZ(pthread_join(peer.thr, NULL));
    if (peer.lfd >= 0)
        close(peer.lfd);
    cache_teardown();
}

/* A busy object for creq to the backend, in m: a pass (oc NULL) or the fill of oc. */
static void
mkbo_in(struct busyobj *bo, struct cobj *oc, struct bomem *m)
{
    ws_init(&m->ws, m->ws_block, sizeof m->ws_block);
    fetch_init(bo);
    bo->ws = &m->ws;
    bo->rxbuf = m->rx;
    bo->rxsize = sizeof m->rx;
    bo->creq = &creq;
    snprintf(bo->client_ip, sizeof bo->client_ip, "%s", "192.0.2.7");
    bo->be = be;
    bo->oc = oc;
}

static void
mkbo(struct busyobj *bo, struct cobj *oc)
{
    mkbo_in(bo, oc, &mem[0]);
}

static const char key[] = "example.com\0/x";
#define KEYLEN (sizeof key - 1)

/* A cache lookup of creq's key at now: what it found, the object, a stale copy. */
static enum hsh_result
lookup_at(double now, struct cobj **ocp, struct hsh_stale *stale)
{
    struct cc qcc;

    cc_parse_request(&creq, &qcc);
    return (hsh_lookup(key, KEYLEN, &creq, &qcc, now, 0, ocp, stale, NULL));
}

/* A new busy object for the key: the fetch of a miss fills it. */
static struct cobj *
miss(void)
{
    struct hsh_stale stale;
    struct cobj *oc;

    ck_assert_int_eq(lookup_at(tim_real(), &oc, &stale), HSH_MISS);
    ck_assert_ptr_null(stale.oc);
    return (oc);
}

/* The next request for the key misses: nothing stored, nobody fetching it. */
static void
misses_again(void)
{
    struct cobj *oc = miss();

    hsh_abandon(&oc, 0);
}

/* The body of a published object, NUL-terminated in buf. */
static size_t
obj_body(const struct cobj *oc, char *buf, size_t size)
{
    size_t n = 0;

    for (const struct sto_seg *s = oc->body.first; s != NULL; s = s->next) {
        ck_assert_uint_lt(n + s->len, size);
        memcpy(buf + n, s->data, s->len);
        n += s->len;
    }
    buf[n] = '\0';
    ck_assert_uint_eq(n, oc->body.len);
    return (n);
}

/* The stored head of oc (head_len bytes, not NUL-terminated) as a string. */
static const char *
obj_head(const struct cobj *oc)
{
    static char buf[2048];

    ck_assert_uint_lt(hsh_head_size(oc), sizeof buf);
    buf[hsh_head_copy(oc, buf)] = '\0';
    return (buf);
}

/* ---- the sink: what the client that asked would get ---- */

struct coll {
    char b[65536];
    size_t len;
    unsigned pieces, flushes;
    size_t unflushed; /* bytes given since the last flush */
    /*
     * The pieces given since the last flush, where the fetch gave them: a
     * piece stays valid until the next flush, so they must still hold the
     * bytes they had (the fetch reused no buffer under them).
     */
    struct pend {
        const char *p;
        size_t off, len; /* where its copy is in b */
    } pend[16];
    unsigned npend;
};

static void
coll_check(const struct coll *c)
{
    for (unsigned i = 0; i < c->npend; i++)
        ck_assert_msg(memcmp(c->pend[i].p, c->b + c->pend[i].off, c->pend[i].len) == 0,
                      "piece %u changed before it was flushed", i);
}

static int
coll_piece(void *priv, const char *p, size_t len)
{
    struct coll *c = priv;

    ck_assert_uint_gt(len, 0);
    ck_assert_uint_lt(c->len + len, sizeof c->b);
    coll_check(c);
    if (c->npend < ARRAY_LEN(c->pend))
        c->pend[c->npend++] = (struct pend){ p, c->len, len };
    memcpy(c->b + c->len, p, len);
    c->len += len;
    c->b[c->len] = '\0';
    c->pieces++;
    c->unflushed += len;
    return (0);
}

static int
coll_flush(void *priv)
{
    struct coll *c = priv;

    coll_check(c);
    c->npend = 0;
    c->flushes++;
    c->unflushed = 0;
    return (0);
}

static struct coll got;
static const struct fetch_sink sink = { coll_piece, coll_flush, &got };

/* The whole transaction of bo, as it should go: the head, the body to the sink, the end. */
static void
fetch_all(struct busyobj *bo)
{
    ck_assert_int_eq(fetch_head(bo), FETCH_OK);
    ck_assert_int_eq(fetch_body(bo, &sink), 0);
    fetch_done(bo);
}

/* ---- the backend request ---- */

/*
 * A pass: the client's fields in their order, the hop-by-hop ones gone
 * (Connection and every field it names, Keep-Alive, TE, Upgrade,
 * Proxy-Authorization ...), the client added to X-Forwarded-For, the
 * scheme stated in X-Forwarded-Proto whatever the client claimed, Via;
 * the client's conditions kept (a pass asks the backend).
 */
START_TEST(bereq_of_a_pass)
{
    struct busyobj bo;

    creq.url = TXT_LIT("/x?y=1");
    add(&creq, "Host", "example.com");
    add(&creq, "X-Forwarded-For", "10.0.0.1");
    add(&creq, "Connection", "keep-alive, X-Hop");
    add(&creq, "X-Hop", "secret");
    add(&creq, "Keep-Alive", "timeout=5");
    add(&creq, "TE", "trailers");
    add(&creq, "Upgrade", "h2c");
    add(&creq, "Proxy-Authorization", "Basic eDp5");
    add(&creq, "X-Forwarded-Proto", "https");
    add(&creq, "Accept-Encoding", "br");
    add(&creq, "If-None-Match", "\"abc\"");
    add(&creq, "Content-Length", "0");
    answer("HTTP/1.1 204 No Content\r\n\r\n", NULL);
    peer_run();
    mkbo(&bo, NULL);
    fetch_all(&bo);
    ck_assert_str_eq(peer.got[0], "GET /x?y=1 HTTP/1.1\r\n"
                                  "Host: example.com\r\n"
                                  "Accept-Encoding: br\r\n"
                                  "If-None-Match: \"abc\"\r\n"
                                  "X-Forwarded-For: 10.0.0.1, 192.0.2.7\r\n"
                                  "X-Forwarded-Proto: http\r\n"
                                  "Via: 1.1 surogat\r\n"
                                  "\r\n");
    ck_assert_uint_eq(bo.beresp->status, 204);
    ck_assert_uint_eq(got.len, 0);
}
END_TEST

/*
 * A miss for a HEAD over TLS, without Host: GET (the cache stores the
 * body), no conditions or Range (it stores the whole object), the codings
 * of compress_formats and gzip asked for, X-Forwarded-Proto https, Host the backend's, Via 1.0 for a 1.0
 * client.  A pass of the same HEAD keeps its method and conditions, and
 * with xff and via off it carries neither.
 */
START_TEST(bereq_of_a_miss)
{
    struct busyobj bo;
    struct cobj *oc;
    char want[256];

    creq.method = TXT_LIT("HEAD");
    creq.proto = 10;
    add(&creq, "If-Modified-Since", "Thu, 01 Jan 2015 00:00:00 GMT");
    add(&creq, "Range", "bytes=0-1");
    add(&creq, "Accept-Encoding", "identity");
    add(&creq, "Accept", "*/*");
    answer("HTTP/1.1 200 OK\r\nContent-Length: 0\r\nCache-Control: no-store\r\n\r\n", NULL);
    answer("HTTP/1.1 200 OK\r\nContent-Length: 0\r\nCache-Control: no-store\r\n\r\n", NULL);
    peer_run();
    oc = miss();
    mkbo(&bo, oc);
    bo.head_only = true;
    bo.client_tls = true;
    fetch_all(&bo);
    snprintf(want, sizeof want,
             "GET /x HTTP/1.1\r\n"
             "Accept: */*\r\n"
             "Accept-Encoding: br, gzip\r\n" /* compress_formats, and gzip */
             "X-Forwarded-For: 192.0.2.7\r\n"
             "X-Forwarded-Proto: https\r\n"
             "Via: 1.0 surogat\r\n"
             "Host: 127.0.0.1:%s\r\n"
             "\r\n",
             portstr);
    ck_assert_str_eq(peer.got[0], want);
    /* A pass for the HEAD, without X-Forwarded-* and Via: as the client asked. */
    par.xff = false;
    par.via = false;
    mkbo(&bo, NULL);
    bo.head_only = true;
    fetch_all(&bo);
    snprintf(want, sizeof want,
             "HEAD /x HTTP/1.1\r\n"
             "If-Modified-Since: Thu, 01 Jan 2015 00:00:00 GMT\r\n"
             "Range: bytes=0-1\r\n"
             "Accept-Encoding: identity\r\n"
             "Accept: */*\r\n"
             "Host: 127.0.0.1:%s\r\n"
             "\r\n",
             portstr);
    ck_assert_str_eq(peer.got[1], want);
}
END_TEST

/* The request body through body_next: one source of pieces for both framings. */
struct src {
    const char *const *piece;
    unsigned i;
};

static ssize_t
src_next(void *priv, const char **data)
{
    struct src *s = priv;
    const char *p = s->piece[s->i];

    if (p == NULL)
        return (0);
    s->i++;
    *data = p;
    return ((ssize_t)strlen(p));
}

/*
 * A request body goes in our own framing, whatever the client's: its
 * Content-Length restated, or chunked coding with chunks as the pieces
 * came.
 */
START_TEST(bereq_body_framing)
{
    static const char *const pieces[] = { "hello ", "world", NULL };
    static const struct {
        enum h1_body framing;
        const char *tail; /* the request after its Via field */
    } v[] = {
        { H1_BODY_LENGTH, "Content-Length: 11\r\n\r\nhello world" },
        { H1_BODY_CHUNKED,
          "Transfer-Encoding: chunked\r\n\r\n6\r\nhello \r\n5\r\nworld\r\n0\r\n\r\n" },
    };
    struct src s;
    struct busyobj bo;
    char want[512];

    creq.method = TXT_LIT("POST");
    add(&creq, "Host", "example.com");
    add(&creq, "Content-Length", "99");
    add(&creq, "Transfer-Encoding", "chunked");
    answer("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", NULL);
    answer("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", NULL);
    peer_run();
    for (unsigned i = 0; i < ARRAY_LEN(v); i++) {
        s = (struct src){ pieces, 0 };
        mkbo(&bo, NULL);
        bo.body = v[i].framing;
        bo.clen = 11;
        bo.body_next = src_next;
        bo.body_priv = &s;
        fetch_all(&bo);
        snprintf(want, sizeof want,
                 "POST /x HTTP/1.1\r\n"
                 "Host: example.com\r\n"
                 "X-Forwarded-For: 192.0.2.7\r\n"
                 "X-Forwarded-Proto: http\r\n"
                 "Via: 1.1 surogat\r\n"
                 "%s",
                 v[i].tail);
        ck_assert_str_eq(peer.got[i], want);
    }
    ck_assert_uint_eq(peer.conns, 1); /* the first answer was complete: its connection reused */
    ck_assert_str_eq(got.b, "okok");
}
END_TEST

/* ---- response bodies through the sink ---- */

/*
 * Content-Length: the body as it came, in the pieces it came in, every
 * piece flushed before the receive buffer is reused; a complete answer
 * on a keep-alive connection puts the connection back in the pool.
 */
START_TEST(body_content_length)
{
    struct busyobj bo;

    answer("HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\nhello", ", ", "world", NULL);
    peer_run();
    mkbo(&bo, NULL);
    ck_assert_int_eq(fetch_head(&bo), FETCH_OK);
    ck_assert_int_eq(bo.rbody, H1_BODY_LENGTH);
    ck_assert_uint_eq(bo.rclen, 12);
    ck_assert(bo.be_keepalive);
    ck_assert_int_eq(fetch_body(&bo, &sink), 0);
    ck_assert_str_eq(got.b, "hello, world");
    ck_assert_uint_eq(got.len, 12);
    ck_assert_uint_ge(got.pieces, 2); /* read apart, given apart: no copy */
    ck_assert_uint_eq(got.unflushed, 0);
    ck_assert(bo.complete);
    ck_assert_uint_eq(bo.body_off, 12);
    fetch_done(&bo);
    ck_assert_uint_eq(bcp_idle_count(be->pool), 1);
}
END_TEST

/* Chunked: the chunks' data joined, the framing gone; the connection kept. */
START_TEST(body_chunked)
{
    struct busyobj bo;

    answer("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n",
           "2\r\n, \r\n5\r\nwor", "ld\r\n0\r\n\r\n", NULL);
    peer_run();
    mkbo(&bo, NULL);
    ck_assert_int_eq(fetch_head(&bo), FETCH_OK);
    ck_assert_int_eq(bo.rbody, H1_BODY_CHUNKED);
    ck_assert_int_eq(fetch_body(&bo, &sink), 0);
    ck_assert_str_eq(got.b, "hello, world");
    ck_assert_uint_ge(got.pieces, 3);
    ck_assert_uint_eq(got.unflushed, 0);
    ck_assert(bo.complete);
    fetch_done(&bo);
    ck_assert_uint_eq(bcp_idle_count(be->pool), 1);
}
END_TEST

/* Neither: the body ends with the connection, which is then not reused. */
START_TEST(body_close_delimited)
{
    struct busyobj bo;

    answer("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n\r\nhello", ", world", NULL)->close =
        true;
    peer_run();
    mkbo(&bo, NULL);
    ck_assert_int_eq(fetch_head(&bo), FETCH_OK);
    ck_assert_int_eq(bo.rbody, H1_BODY_EOF);
    ck_assert_int_eq(fetch_body(&bo, &sink), 0);
    ck_assert_str_eq(got.b, "hello, world");
    ck_assert_uint_eq(got.unflushed, 0);
    ck_assert(bo.complete);
    ck_assert(!bo.be_keepalive);
    fetch_done(&bo);
    ck_assert_uint_eq(bcp_idle_count(be->pool), 0);
    ck_assert_uint_eq(bcp_conn_count(be->pool), 0);
}
END_TEST

/* ---- the cache side ---- */

/*
 * A miss stores the response: the busy object published with the head
 * every later client gets (hop-by-hop fields and framing gone, Via
 * added) and the body the client got, found by the next lookup.
 */
START_TEST(store_into_busy_object)
{
    char date[TIM_HTTP_DATE_LEN + 1], head[512], want[512];
    struct busyobj bo;
    struct hsh_stale stale;
    struct cobj *oc, *hit;
    uint64_t stored = stat_get(STAT_cache_stored);
    char body[64];

    tim_http_date(tim_real(), date);
    snprintf(head, sizeof head,
             "HTTP/1.1 200 OK\r\n"
             "Date: %s\r\n"
             "Cache-Control: max-age=60\r\n"
             "Connection: keep-alive\r\n"
             "Keep-Alive: timeout=5\r\n"
             "ETag: \"v1\"\r\n"
             "Content-Type: image/png\r\n"
             "Content-Length: 10\r\n"
             "\r\n",
             date);
    snprintf(want, sizeof want,
             "HTTP/1.1 200 OK\r\n"
             "Date: %s\r\n"
             "Cache-Control: max-age=60\r\n"
             "ETag: \"v1\"\r\n"
             "Content-Type: image/png\r\n"
             "Via: 1.1 surogat\r\n"
             "\r\n",
             date);
    answer(head, "01234", "56789", NULL);
    peer_run();
    oc = miss();
    mkbo(&bo, oc);
    ck_assert_int_eq(fetch_head(&bo), FETCH_OK);
    ck_assert(bo.miss);
    ck_assert(bo.stored);
    ck_assert_ptr_eq(bo.oc, oc);
    ck_assert_int_eq(bo.gz_want, FGZ_NONE); /* image/png is not compressed */
    ck_assert_int_eq(fetch_body(&bo, &sink), 0);
    ck_assert_str_eq(got.b, "0123456789");
    ck_assert_ptr_null(bo.oc); /* published */
    fetch_done(&bo);
    ck_assert_uint_eq(stat_get(STAT_cache_stored) - stored, 1);
    ck_assert_int_eq(lookup_at(tim_real(), &hit, &stale), HSH_HIT);
    ck_assert_ptr_eq(hit, oc);
    ck_assert(hit->body_complete);
    ck_assert_uint_eq(obj_body(hit, body, sizeof body), 10);
    ck_assert_str_eq(body, "0123456789");
    ck_assert_uint_eq(hit->status, 200);
    ck_assert_str_eq(obj_head(hit), want);
    ck_assert(hit->has_validator);
    hsh_deref(&hit);
}
END_TEST

/*
 * A stale object with validators is revalidated: the backend is asked
 * with If-None-Match and If-Modified-Since, its 304 renews the object --
 * the stored fields updated with the 304's, Content-Length and the body
 * kept -- and the renewed object is what the next lookup finds.
 */
START_TEST(revalidate_stale_object)
{
    static const char head[] = "HTTP/1.1 200 OK\r\n"
                               "Cache-Control: max-age=60\r\n"
                               "ETag: \"v1\"\r\n"
                               "Last-Modified: Mon, 01 Jan 2024 00:00:00 GMT\r\n"
                               "X-Version: 1\r\n"
                               "Content-Type: image/png\r\n"
                               "Content-Length: 5\r\n"
                               "\r\n"
                               "stale";
    struct busyobj bo;
    struct hsh_stale stale;
    struct cobj *oc, *hit;
    uint64_t reval = stat_get(STAT_cache_revalidated);
    char body[64], want[512];

    answer(head, NULL);
    answer("HTTP/1.1 304 Not Modified\r\n"
           "Cache-Control: max-age=300\r\n"
           "ETag: \"v1\"\r\n"
           "X-Version: 2\r\n"
           "Content-Length: 999\r\n"
           "\r\n",
           NULL);
    peer_run();
    oc = miss();
    mkbo(&bo, oc);
    fetch_all(&bo);
    /* Two minutes on, past its max-age, kept for its validators: a miss with a stale copy. */
    ck_assert_int_eq(lookup_at(tim_real() + 120, &oc, &stale), HSH_MISS);
    ck_assert_ptr_nonnull(stale.oc);
    ck_assert_str_eq(stale.fwd, "stale");
    mkbo(&bo, oc);
    bo.stale = stale;
    ck_assert_int_eq(fetch_head(&bo), FETCH_REVALIDATED);
    ck_assert_ptr_nonnull(bo.renewed);
    ck_assert_ptr_ne(bo.renewed, stale.oc);
    snprintf(want, sizeof want,
             "GET /x HTTP/1.1\r\n"
             "Accept-Encoding: br, gzip\r\n" /* compress_formats, and gzip */
             "If-None-Match: \"v1\"\r\n"
             "If-Modified-Since: Mon, 01 Jan 2024 00:00:00 GMT\r\n"
             "X-Forwarded-For: 192.0.2.7\r\n"
             "X-Forwarded-Proto: http\r\n"
             "Via: 1.1 surogat\r\n"
             "Host: 127.0.0.1:%s\r\n"
             "\r\n",
             portstr);
    ck_assert_str_eq(peer.got[1], want);
    ck_assert_uint_eq(stat_get(STAT_cache_revalidated) - reval, 1);
    ck_assert_uint_eq(obj_body(bo.renewed, body, sizeof body), 5);
    ck_assert_str_eq(body, "stale");
    ck_assert_ptr_nonnull(strstr(obj_head(bo.renewed), "Cache-Control: max-age=300\r\n"));
    ck_assert_ptr_nonnull(strstr(obj_head(bo.renewed), "X-Version: 2\r\n"));
    ck_assert_ptr_null(strstr(obj_head(bo.renewed), "X-Version: 1\r\n"));
    ck_assert_ptr_null(strstr(obj_head(bo.renewed), "Content-Length"));
    ck_assert_ptr_nonnull(strstr(obj_head(bo.renewed), "Last-Modified: Mon, 01 Jan 2024"));
    hit = bo.renewed;
    bo.renewed = NULL;
    fetch_done(&bo);
    hsh_deref(&hit);
    hsh_deref(&stale.oc);
    /* Now fresh again, at the same time as before. */
    ck_assert_int_eq(lookup_at(tim_real() + 120, &hit, &stale), HSH_HIT);
    ck_assert_uint_eq(obj_body(hit, body, sizeof body), 5);
    ck_assert_str_eq(body, "stale");
    ck_assert_ptr_nonnull(strstr(obj_head(hit), "X-Version: 2\r\n"));
    hsh_deref(&hit);
    ck_assert_uint_eq(peer.conns, 1);
}
END_TEST

/* ---- streaming into the busy object ---- */

/*
 * A request that joined the fetch (HSH_STREAM), reading the busy object
 * on its own thread as its bytes are stored: every answer of
 * hsh_stream_wait() and the bytes it copied.  Its copies are made while
 * the fetch waits in stream_piece() for it to catch up, so they never
 * race the fetch's appends.
 */
static struct {
    pthread_mutex_t mtx;
    pthread_cond_t cv;
    struct cobj *oc;
    char body[64]; /* under mtx: what it copied, as it became readable */
    size_t len;    /* under mtx */
    unsigned mores;
    enum hsh_stream last;
    unsigned behind; /* pieces the fetch gave while the object was not yet published */
} rd = { .mtx = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

static struct busyobj *stream_bo; /* the fetch stream_piece() serves */

/* Copy the busy object's bytes [from, to) into rd.body. */
static void
copy_stored(const struct cobj *oc, uint64_t from, uint64_t to)
{
    uint64_t off = 0;

    for (const struct sto_seg *sg = oc->body.first; sg != NULL && off < to; sg = sg->next) {
        for (size_t i = 0; i < sg->len && off < to; i++, off++)
            if (off >= from) {
                ck_assert_uint_lt(rd.len + 1, sizeof rd.body);
                rd.body[rd.len++] = sg->data[i];
            }
    }
    rd.body[rd.len] = '\0';
}

static void *
stream_reader(void *arg)
{
    uint64_t have = 0, avail = 0;
    enum hsh_stream st;

    (void)arg;
    stat_thread_enter();
    do {
        st = hsh_stream_wait(rd.oc, have, PEER_WAIT_MS / 1e3, &avail);
        AZ(pthread_mutex_lock(&rd.mtx));
        rd.last = st;
        if (st == HSH_S_MORE || st == HSH_S_DONE) {
            copy_stored(rd.oc, have, avail);
            have = avail;
        }
        if (st == HSH_S_MORE)
            rd.mores++;
        AZ(pthread_cond_broadcast(&rd.cv));
        AZ(pthread_mutex_unlock(&rd.mtx));
    } while (st == HSH_S_MORE);
    hsh_stream_leave(&rd.oc);
    stat_thread_leave();
    return (NULL);
}

/* The fetching client's sink: collect, then wait until the reader has what was stored. */
static int
stream_piece(void *priv, const char *p, size_t len)
{
    struct timespec ts;

    ck_assert_int_eq(coll_piece(priv, p, len), 0);
    AZ(clock_gettime(CLOCK_REALTIME, &ts));
    ts.tv_sec += PEER_WAIT_MS / 1000;
    AZ(pthread_mutex_lock(&rd.mtx));
    while (rd.len < got.len && pthread_cond_timedwait(&rd.cv, &rd.mtx, &ts) == 0)
        continue;
    ck_assert_msg(rd.len == got.len, "the reader has %zu of %zu bytes", rd.len, got.len);
    if (stream_bo->oc != NULL)
        rd.behind++;
    AZ(pthread_mutex_unlock(&rd.mtx));
    return (0);
}

/*
 * A miss fills its busy object as it reads: from the response head on,
 * a lookup of the key joins the fetch (HSH_STREAM, with the announced
 * length), and a reader on another thread gets each piece of the body
 * from the object while the fetch is still running -- before the fetch
 * reads on -- then the end (HSH_S_DONE) once it is published.
 */
START_TEST(streams_into_busy_object)
{
    static const struct fetch_sink ssink = { stream_piece, coll_flush, &got };
    struct busyobj bo;
    struct hsh_stale stale;
    struct cobj *oc;
    pthread_t t;

    answer("HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Type: image/png\r\n"
           "Content-Length: 10\r\n\r\n",
           "01234", "56789", NULL);
    peer_run();
    oc = miss();
    mkbo(&bo, oc);
    stream_bo = &bo;
    ck_assert_int_eq(fetch_head(&bo), FETCH_OK);
    ck_assert(bo.stored);
    ck_assert_int_eq(lookup_at(tim_real(), &rd.oc, &stale), HSH_STREAM);
    ck_assert_ptr_eq(rd.oc, oc);
    ck_assert_uint_eq(rd.oc->stream_clen, 10);
    AZ(pthread_create(&t, NULL, stream_reader, NULL));
    ck_assert_int_eq(fetch_body(&bo, &ssink), 0);
    ck_assert_ptr_null(bo.oc); /* published */
    fetch_done(&bo);
    AZ(pthread_join(t, NULL));
    ck_assert_str_eq(got.b, "0123456789");
    ck_assert_str_eq(rd.body, "0123456789");
    ck_assert_int_eq(rd.last, HSH_S_DONE);
    ck_assert_uint_ge(rd.mores, 1);
    ck_assert_uint_ge(rd.behind, 1);
    ck_assert_uint_eq(rd.behind, got.pieces);
}
END_TEST

/* A client that fails on the first piece it is given; nothing to flush goes well. */
static int
fail_piece(void *priv, const char *p, size_t len)
{
    (*(unsigned *)priv)++;
    return (-1);
}

static int
fail_flush(void *priv)
{
    return (0);
}

/*
 * The client goes away mid-body: a miss reads on for the cache (the
 * object is published whole, the connection kept), the client not asked
 * again; a pass has nobody else to read for and stops (-2), its
 * connection closed.
 */
START_TEST(failed_client_stops_only_a_pass)
{
    unsigned asked = 0;
    const struct fetch_sink fails = { fail_piece, fail_flush, &asked };
    struct busyobj bo;
    struct hsh_stale stale;
    struct cobj *oc, *hit;
    char body[64];

    answer("HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Type: image/png\r\n"
           "Content-Length: 10\r\n\r\n",
           "01234", "56789", NULL);
    answer("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789", NULL);
    peer_run();
    oc = miss();
    mkbo(&bo, oc);
    ck_assert_int_eq(fetch_head(&bo), FETCH_OK);
    ck_assert_int_eq(fetch_body(&bo, &fails), 0);
    ck_assert(bo.client_failed);
    ck_assert(bo.complete);
    ck_assert_uint_eq(asked, 1);
    fetch_done(&bo);
    ck_assert_int_eq(lookup_at(tim_real(), &hit, &stale), HSH_HIT);
    ck_assert_uint_eq(obj_body(hit, body, sizeof body), 10);
    ck_assert_str_eq(body, "0123456789");
    hsh_deref(&hit);
    ck_assert_uint_eq(bcp_idle_count(be->pool), 1);
    asked = 0;
    mkbo(&bo, NULL);
    ck_assert_int_eq(fetch_head(&bo), FETCH_OK);
    ck_assert_int_eq(fetch_body(&bo, &fails), -2);
    ck_assert(bo.client_failed);
    ck_assert(!bo.complete);
    ck_assert_uint_eq(asked, 1);
    fetch_done(&bo);
    ck_assert_uint_eq(bcp_conn_count(be->pool), 0);
}
END_TEST

/* ---- gzip ---- */

static const char plain[] = "The quick brown fox jumps over the lazy dog. "
                            "The quick brown fox jumps over the lazy dog. "
                            "The quick brown fox jumps over the lazy dog.";

/* plain, gzip-compressed into out; its length. */
static size_t
gzip_of(unsigned char *out, size_t size)
{
    z_stream z;

    memset(&z, 0, sizeof z);
    ck_assert_int_eq(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
    z.next_in = (unsigned char *)(uintptr_t)plain;
    z.avail_in = sizeof plain - 1;
    z.next_out = out;
    z.avail_out = (unsigned)size;
    ck_assert_int_eq(deflate(&z, Z_FINISH), Z_STREAM_END);
    deflateEnd(&z);
    return (size - z.avail_out);
}

static char gzhead[NEXCH][256];

/* An answer of gz[0..len) as a gzip body, its last `tail` bytes sent apart. */
static void
answer_gzip(const unsigned char *gz, size_t len, size_t tail)
{
    char *head = gzhead[peer.nex];
    struct exch *x;

    snprintf(head, sizeof gzhead[0],
             "HTTP/1.1 200 OK\r\n"
             "Cache-Control: max-age=60\r\n"
             "Content-Type: text/plain\r\n"
             "Content-Encoding: gzip\r\n"
             "Content-Length: %zu\r\n"
             "\r\n",
             len);
    x = answer(head, NULL);
    answer_bytes(x, gz, len - tail);
    if (tail > 0)
        answer_bytes(x, gz + len - tail, tail);
}

/*
 * A miss that asked for gzip and got it: checked by a decoder on the way
 * (FGZ_CHECK), stored as it came, and a client that does not take gzip
 * gets the decoder's output.
 */
START_TEST(gzip_checked)
{
    static unsigned char gz[512];
    size_t gzlen = gzip_of(gz, sizeof gz);
    struct busyobj bo;
    struct hsh_stale stale;
    struct cobj *oc, *hit;
    uint64_t checked = stat_get(STAT_gzip_backend);
    char body[1024];

    answer_gzip(gz, gzlen, 0);
    peer_run();
    oc = miss();
    mkbo(&bo, oc);
    ck_assert_int_eq(fetch_head(&bo), FETCH_OK);
    ck_assert_int_eq(bo.gz_want, FGZ_CHECK);
    ck_assert(bo.gz_client);
    ck_assert_int_eq(fetch_body(&bo, &sink), 0);
    fetch_done(&bo);
    ck_assert_str_eq(got.b, plain);
    ck_assert_uint_eq(stat_get(STAT_gzip_backend) - checked, 1);
    ck_assert_int_eq(lookup_at(tim_real(), &hit, &stale), HSH_HIT);
    ck_assert_uint_eq(obj_body(hit, body, sizeof body), gzlen);
    ck_assert(memcmp(body, gz, gzlen) == 0);
    ck_assert_ptr_nonnull(strstr(obj_head(hit), "Content-Encoding: gzip\r\n"));
    ck_assert_ptr_nonnull(strstr(obj_head(hit), "Vary: Accept-Encoding\r\n"));
    hsh_deref(&hit);
}
END_TEST

/*
 * A gzip body that fails its check -- corrupt (its CRC does not match),
 * or truncated (its Content-Length met, its trailer missing) -- fails the
 * fetch at its end, before the object is published: nothing is stored,
 * the failure is counted, and the next request misses again.  A client
 * taking gzip got the backend's bytes up to there, and its caller cuts
 * the response.
 */
START_TEST(gzip_bad_refused)
{
    static const char *const what[] = { "corrupt", "truncated" };
    static unsigned char gz[512], bad[512];
    size_t gzlen = gzip_of(gz, sizeof gz);
    struct busyobj bo;
    struct cobj *oc;
    uint64_t errs = stat_get(STAT_gzip_errors), stored = stat_get(STAT_cache_stored);

    memcpy(bad, gz, gzlen);
    bad[gzlen - 8] ^= 0xff;     /* the CRC32 of the trailer */
    answer_gzip(bad, gzlen, 8); /* the client has the rest when the trailer fails */
    answer_gzip(gz, gzlen - 8, 0);
    peer_run();
    add(&creq, "Accept-Encoding", "gzip");
    for (unsigned i = 0; i < ARRAY_LEN(what); i++) {
        memset(&got, 0, sizeof got);
        oc = miss();
        mkbo(&bo, oc);
        ck_assert_int_eq(fetch_head(&bo), FETCH_OK);
        ck_assert_int_eq(bo.gz_want, FGZ_CHECK);
        ck_assert(!bo.gz_client); /* the client takes the backend's bytes */
        ck_assert_msg(fetch_body(&bo, &sink) == -1, "%s: not refused", what[i]);
        ck_assert_uint_eq(got.len, gzlen - 8);
        ck_assert(memcmp(got.b, gz, gzlen - 8) == 0);
        ck_assert_ptr_nonnull(bo.oc); /* not published */
        fetch_done(&bo);
        ck_assert_uint_eq(stat_get(STAT_gzip_errors) - errs, i + 1);
        ck_assert_uint_eq(stat_get(STAT_cache_stored) - stored, 0);
    }
    misses_again();
}
END_TEST

/* ---- broken backends ---- */

/*
 * A response refused before its head is whole: the backend reads the
 * request and closes, or answers something that is not HTTP.  502,
 * counted with its reason, and the connection is not kept.
 */
START_TEST(backend_refused_502)
{
    static const struct {
        const char *answer;
        bool close;
        enum bcp_refuse why;
    } v[] = {
        { "HTTP/1.1 200 O", true, BCP_R_CLOSED }, /* part of a status line, then nothing */
        { "SSH-2.0-OpenSSH_9.2\r\nnot http at all\r\n\r\n", false, BCP_R_HEAD_SYNTAX },
    };
    struct busyobj bo;
    uint64_t bad;

    for (unsigned i = 0; i < ARRAY_LEN(v); i++)
        answer(v[i].answer, NULL)->close = v[i].close;
    peer_run();
    ck_assert_uint_eq(fetch_result_status(FETCH_E_BAD), 502);
    for (unsigned i = 0; i < ARRAY_LEN(v); i++) {
        bad = stat_get(STAT_backend_bad_resp);
        mkbo(&bo, NULL);
        ck_assert_int_eq(fetch_head(&bo), FETCH_E_BAD);
        ck_assert_int_eq(bo.why, v[i].why);
        ck_assert_uint_eq(stat_get(STAT_backend_bad_resp) - bad, 1);
        fetch_done(&bo);
        ck_assert_uint_eq(bcp_conn_count(be->pool), 0);
    }
}
END_TEST

/* Nothing within the backend's first_byte_timeout: 504, about when it said. */
START_TEST(backend_first_byte_timeout)
{
    struct busyobj bo;
    uint64_t tmo = stat_get(STAT_backend_timeout);
    double t0;

    be_release(&be);
    mkbe(0.2, 2);
    answer(NULL)->hold = true;
    peer_run();
    mkbo(&bo, NULL);
    t0 = tim_mono();
    ck_assert_int_eq(fetch_head(&bo), FETCH_E_TIMEOUT);
    ck_assert_double_ge(tim_mono() - t0, 0.2);
    ck_assert_double_lt(tim_mono() - t0, 1.5);
    ck_assert_uint_eq(fetch_result_status(FETCH_E_TIMEOUT), 504);
    ck_assert_uint_eq(stat_get(STAT_backend_timeout) - tmo, 1);
    fetch_done(&bo); /* closes: the backend sees the end */
    ck_assert_uint_eq(bcp_conn_count(be->pool), 0);
}
END_TEST

/*
 * bo->may_wait: the fetch stops once the request is sent (FETCH_WAIT),
 * nothing of the answer read; resumed once the socket is readable it goes
 * on as a blocking fetch, the connection reused after.
 */
START_TEST(wait_then_resume)
{
    struct busyobj bo;
    struct pollfd pfd;

    answer("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", NULL);
    peer_run();
    mkbo(&bo, NULL);
    bo.may_wait = true;
    ck_assert_int_eq(fetch_head(&bo), FETCH_WAIT);
    ck_assert_uint_eq(bo.be_len, 0);
    ck_assert_double_gt(bo.first_deadline, tim_mono());
    pfd = (struct pollfd){ .fd = fetch_wait_fd(&bo), .events = POLLIN };
    ck_assert_int_eq(poll(&pfd, 1, 5000), 1);
    ck_assert_int_eq(fetch_head_resume(&bo, false), FETCH_OK);
    ck_assert_uint_eq(bo.beresp->status, 200);
    ck_assert_int_eq(fetch_body(&bo, &sink), 0);
    ck_assert_str_eq(got.b, "ok");
    fetch_done(&bo);
    ck_assert_uint_eq(bcp_idle_count(be->pool), 1);
}
END_TEST

/* Resumed past its first byte deadline: 504 and counted as a blocking fetch's, never reused. */
START_TEST(wait_expired_504)
{
    struct busyobj bo;
    uint64_t tmo = stat_get(STAT_backend_timeout);

    be_release(&be);
    mkbe(0.2, 2);
    answer(NULL)->hold = true;
    peer_run();
    mkbo(&bo, NULL);
    bo.may_wait = true;
    ck_assert_int_eq(fetch_head(&bo), FETCH_WAIT);
    ck_assert_int_eq(fetch_head_resume(&bo, true), FETCH_E_TIMEOUT);
    ck_assert_uint_eq(stat_get(STAT_backend_timeout) - tmo, 1);
    fetch_done(&bo);
    ck_assert_uint_eq(bcp_conn_count(be->pool), 0);
}
END_TEST

/*
 * Fewer bytes than its Content-Length, then the end: the body fails (the
 * client's response is cut by its caller), the object is not published,
 * the connection is not reused.
 */
START_TEST(backend_body_short)
{
    struct busyobj bo;
    struct cobj *oc;
    uint64_t cut = stat_get(STAT_backend_body_cut);

    answer("HTTP/1.1 200 OK\r\nCache-Control: max-age=60\r\nContent-Type: image/png\r\n"
           "Content-Length: 10\r\n\r\n01234",
           NULL)
        ->close = true;
    peer_run();
    oc = miss();
    mkbo(&bo, oc);
    ck_assert_int_eq(fetch_head(&bo), FETCH_OK);
    ck_assert(bo.stored);
    ck_assert_int_eq(fetch_body(&bo, &sink), -1);
    ck_assert_str_eq(got.b, "01234");
    ck_assert(!bo.complete);
    ck_assert_ptr_nonnull(bo.oc);
    fetch_done(&bo);
    ck_assert_ptr_null(bo.oc);
    ck_assert_uint_eq(stat_get(STAT_backend_body_cut) - cut, 1);
    ck_assert_uint_eq(bcp_conn_count(be->pool), 0);
    misses_again();
}
END_TEST

/* A body that stalls past between_bytes_timeout: cut, not waited for. */
START_TEST(backend_body_stalls)
{
    struct busyobj bo;
    uint64_t cut = stat_get(STAT_backend_body_cut);
    double t0;

    be_release(&be);
    mkbe(2, 0.2);
    answer("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n01234", NULL)->hold = true;
    peer_run();
    mkbo(&bo, NULL);
    ck_assert_int_eq(fetch_head(&bo), FETCH_OK);
    t0 = tim_mono();
    ck_assert_int_eq(fetch_body(&bo, &sink), -1);
    ck_assert_double_ge(tim_mono() - t0, 0.2);
    ck_assert_double_lt(tim_mono() - t0, 1.5);
    ck_assert_str_eq(got.b, "01234");
    ck_assert_uint_eq(stat_get(STAT_backend_body_cut) - cut, 1);
    fetch_done(&bo);
}
END_TEST

/*
 * A stale copy of the key, with an ETag, stored from the backend's first
 * answer; then bo, the refresh of it with no request behind it (bo->bg,
 * no policy context), which the backend answers with `then`.
 */
static void
mkrefresh(struct busyobj *bo, struct hsh_stale *stale, const char *then)
{
    struct cobj *oc;

    answer("HTTP/1.1 200 OK\r\n"
           "Cache-Control: max-age=60\r\n"
           "ETag: \"v1\"\r\n"
           "Content-Length: 5\r\n"
           "\r\n"
           "stale",
           NULL);
    answer(then, NULL);
    peer_run();
    oc = miss();
    mkbo(bo, oc);
    fetch_all(bo);
    ck_assert_int_eq(lookup_at(tim_real() + 120, &oc, stale), HSH_MISS);
    ck_assert_ptr_nonnull(stale->oc);
    mkbo(bo, oc);
    bo->stale = *stale;
    bo->stale_ok = true;
    bo->bg = true;
    ck_assert_ptr_null(bo->pol);
}

/*
 * A background refresh: a busy object with no request behind it at all
 * (fetch_refresh()), its client only the facts copied into it.  It asks
 * the backend as the request's miss would -- conditional on the stale
 * copy's validators, X-Forwarded-Proto from the client's TLS -- and a
 * new 200 replaces the stale copy in the cache, with nothing delivered.
 */
START_TEST(refresh_without_a_request)
{
    struct busyobj bo;
    struct hsh_stale stale;
    struct cobj *hit;
    char body[64], want[512];

    mkrefresh(&bo, &stale,
              "HTTP/1.1 200 OK\r\n"
              "Cache-Control: max-age=300\r\n"
              "ETag: \"v2\"\r\n"
              "Content-Length: 5\r\n"
              "\r\n"
              "fresh");
    bo.client_tls = true;
    fetch_refresh(&bo);
    ck_assert_ptr_null(bo.oc); /* published */
    ck_assert_ptr_null(bo.conn);
    snprintf(want, sizeof want,
             "GET /x HTTP/1.1\r\n"
             "Accept-Encoding: br, gzip\r\n"
             "If-None-Match: \"v1\"\r\n"
             "X-Forwarded-For: 192.0.2.7\r\n"
             "X-Forwarded-Proto: https\r\n"
             "Via: 1.1 surogat\r\n"
             "Host: 127.0.0.1:%s\r\n"
             "\r\n",
             portstr);
    ck_assert_str_eq(peer.got[1], want);
    hsh_deref(&stale.oc);
    ck_assert_int_eq(lookup_at(tim_real() + 120, &hit, &stale), HSH_HIT);
    ck_assert_uint_eq(obj_body(hit, body, sizeof body), 5);
    ck_assert_str_eq(body, "fresh");
    hsh_deref(&hit);
}
END_TEST

/*
 * A refresh the backend fails (a 503 the stale copy may stand in for):
 * counted, its busy object given up, and the stale copy stays what the
 * next lookup finds.
 */
START_TEST(refresh_failure_keeps_the_stale_copy)
{
    struct busyobj bo;
    struct hsh_stale stale;
    struct cobj *oc;
    uint64_t failed = stat_get(STAT_cache_bgfetch_failed);

    mkrefresh(&bo, &stale, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n");
    fetch_refresh(&bo);
    ck_assert_ptr_null(bo.oc); /* abandoned */
    ck_assert_uint_eq(stat_get(STAT_cache_bgfetch_failed) - failed, 1);
    hsh_deref(&stale.oc);
    ck_assert_int_eq(lookup_at(tim_real() + 120, &oc, &stale), HSH_MISS);
    ck_assert_ptr_nonnull(stale.oc); /* still there, for the next refresh */
    hsh_abandon(&oc, 0);
    hsh_deref(&stale.oc);
}
END_TEST

/*
 * Nobody listens on the backend's port: 503, counted, and a miss's busy
 * object is still the caller's (a retry may fill it); fetch_done() gives
 * it up, so that the next request fetches instead of waiting.
 */
START_TEST(backend_refuses_connections)
{
    struct busyobj bo;
    struct cobj *oc;
    uint64_t fail = stat_get(STAT_backend_fail);

    close(peer.lfd);
    peer.lfd = -1;
    oc = miss();
    mkbo(&bo, oc);
    ck_assert_int_eq(fetch_head(&bo), FETCH_E_CONNECT);
    ck_assert_uint_eq(fetch_result_status(FETCH_E_CONNECT), 503);
    ck_assert_uint_eq(stat_get(STAT_backend_fail) - fail, 1);
    ck_assert_ptr_eq(bo.oc, oc);
    ck_assert_ptr_null(bo.conn);
    fetch_done(&bo);
    ck_assert_ptr_null(bo.oc);
    ck_assert_uint_eq(bcp_conn_count(be->pool), 0);
    misses_again();
}
END_TEST

/*
 * A backend at its max_connections: a second fetch is refused at once
 * (503, counted), not queued; once the first one's connection is back in
 * the pool, the next fetch rides on it.
 */
START_TEST(backend_at_max_connections)
{
    struct busyobj bo, bo2;
    uint64_t busy = stat_get(STAT_backend_busy);
    struct coll got2;
    const struct fetch_sink sink2 = { coll_piece, coll_flush, &got2 };
    double t0;

    be_max = 1;
    be_release(&be);
    mkbe(2, 2);
    answer("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", "first", NULL);
    answer("HTTP/1.1 200 OK\r\nContent-Length: 6\r\n\r\nsecond", NULL);
    peer_run();
    mkbo_in(&bo, NULL, &mem[0]);
    ck_assert_int_eq(fetch_head(&bo), FETCH_OK);
    mkbo_in(&bo2, NULL, &mem[1]);
    t0 = tim_mono();
    ck_assert_int_eq(fetch_head(&bo2), FETCH_E_BUSY);
    ck_assert_double_lt(tim_mono() - t0, 0.5);
    ck_assert_uint_eq(fetch_result_status(FETCH_E_BUSY), 503);
    ck_assert_uint_eq(stat_get(STAT_backend_busy) - busy, 1);
    fetch_done(&bo2);
    ck_assert_int_eq(fetch_body(&bo, &sink), 0);
    ck_assert_str_eq(got.b, "first");
    fetch_done(&bo);
    memset(&got2, 0, sizeof got2);
    mkbo_in(&bo2, NULL, &mem[1]);
    ck_assert_int_eq(fetch_head(&bo2), FETCH_OK);
    ck_assert(bo2.conn->reused);
    ck_assert_int_eq(fetch_body(&bo2, &sink2), 0);
    ck_assert_str_eq(got2.b, "second");
    fetch_done(&bo2);
    ck_assert_uint_eq(peer.conns, 1);
}
END_TEST

/*
 * Kept connections the backend dropped just as the next request went out
 * on them (it reads the request and closes without a word, as one that
 * restarts does): the request goes again, once and counted, on a fresh
 * connection -- not on the next kept one, which may be just as dead --
 * for an idempotent request.  A POST is not sent twice: 502.
 */
START_TEST(dead_kept_connections_retried_fresh)
{
    struct busyobj bo, bo2;
    struct coll got2;
    const struct fetch_sink sink2 = { coll_piece, coll_flush, &got2 };
    uint64_t retry;

    /* Two fetches at once: two kept connections. */
    answer("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\n", "a", NULL);
    answer("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nb", NULL);
    answer(NULL)->close = true; /* whichever the next request comes on */
    answer("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nagain", NULL)->on = 2;
    peer_run();
    memset(&got2, 0, sizeof got2);
    mkbo_in(&bo, NULL, &mem[0]);
    ck_assert_int_eq(fetch_head(&bo), FETCH_OK);
    mkbo_in(&bo2, NULL, &mem[1]);
    ck_assert_int_eq(fetch_head(&bo2), FETCH_OK);
    ck_assert_int_eq(fetch_body(&bo, &sink), 0);
    ck_assert_int_eq(fetch_body(&bo2, &sink2), 0);
    fetch_done(&bo);
    fetch_done(&bo2);
    ck_assert_uint_eq(bcp_idle_count(be->pool), 2);
    retry = stat_get(STAT_backend_retry);
    mkbo(&bo, NULL);
    ck_assert_int_eq(fetch_head(&bo), FETCH_OK);
    ck_assert(!bo.conn->reused);
    ck_assert_int_eq(fetch_body(&bo, &sink), 0);
    ck_assert_str_eq(got.b, "aagain");
    fetch_done(&bo);
    ck_assert_uint_eq(stat_get(STAT_backend_retry) - retry, 1);
    ck_assert_uint_eq(peer.conns, 3);
    ck_assert_str_eq(peer.got[3], peer.got[2]); /* the same request, again */
}
END_TEST

START_TEST(dead_kept_connection_post_not_resent)
{
    struct busyobj bo;
    uint64_t retry, bad;

    answer("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", NULL);
    answer(NULL)->close = true;
    peer_run();
    mkbo(&bo, NULL);
    fetch_all(&bo);
    retry = stat_get(STAT_backend_retry);
    bad = stat_get(STAT_backend_bad_resp);
    creq.method = TXT_LIT("POST");
    mkbo(&bo, NULL);
    ck_assert_int_eq(fetch_head(&bo), FETCH_E_BAD);
    ck_assert_uint_eq(fetch_result_status(FETCH_E_BAD), 502);
    fetch_done(&bo);
    ck_assert_uint_eq(stat_get(STAT_backend_retry) - retry, 0);
    ck_assert_uint_eq(stat_get(STAT_backend_bad_resp) - bad, 1);
    ck_assert_uint_eq(peer.conns, 1);
    ck_assert_uint_eq(strncmp(peer.got[1], "POST /x HTTP/1.1\r\n", 18), 0);
}
END_TEST

/*
 * Interim answers (100 Continue, 103 Early Hints) before the final one,
 * in separate reads and in one: skipped, the final head and its body are
 * the response.
 */
START_TEST(interim_before_final)
{
    struct busyobj bo;

    answer("HTTP/1.1 100 Continue\r\n\r\n",
           "HTTP/1.1 103 Early Hints\r\nLink: </s.css>; rel=preload\r\n\r\n"
           "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Final: yes\r\n\r\nfinal",
           NULL);
    peer_run();
    mkbo(&bo, NULL);
    ck_assert_int_eq(fetch_head(&bo), FETCH_OK);
    ck_assert_uint_eq(bo.beresp->status, 200);
    ck_assert_ptr_nonnull(http_find(bo.beresp, "X-Final"));
    ck_assert_ptr_null(http_find(bo.beresp, "Link"));
    ck_assert_int_eq(fetch_body(&bo, &sink), 0);
    ck_assert_str_eq(got.b, "final");
    fetch_done(&bo);
    ck_assert_uint_eq(bcp_idle_count(be->pool), 1);
}
END_TEST

/* What the interim callback was handed: each 103's fields, one after another. */
static struct {
    unsigned n;
    char fields[4][256];
} hints;

static int
hint_in(void *priv, unsigned status, const struct txt *fields)
{
    ck_assert_ptr_eq(priv, &hints);
    ck_assert_uint_eq(status, 103);
    ck_assert_uint_lt(hints.n, ARRAY_LEN(hints.fields));
    ck_assert_uint_lt(fields->len, sizeof hints.fields[0]);
    memcpy(hints.fields[hints.n], fields->b, fields->len);
    hints.fields[hints.n++][fields->len] = '\0';
    return (1);
}

/*
 * A 103 goes up through bo->interim as it comes, its hop-by-hop fields
 * gone; a 100 does not (the client's 100 Continue was ours to send); the
 * final response is the one after them, without their fields.
 */
START_TEST(interim_103_forwarded)
{
    struct busyobj bo;

    memset(&hints, 0, sizeof hints);
    answer("HTTP/1.1 100 Continue\r\n\r\n",
           "HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\nConnection: x-hop\r\n"
           "X-Hop: 1\r\nKeep-Alive: timeout=5\r\n\r\n",
           "HTTP/1.1 103 Early Hints\r\nLink: </b.js>; rel=preload\r\n\r\n"
           "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
           NULL);
    peer_run();
    mkbo(&bo, NULL);
    bo.interim = hint_in;
    bo.interim_priv = &hints;
    ck_assert_int_eq(fetch_head(&bo), FETCH_OK);
    ck_assert_uint_eq(hints.n, 2);
    ck_assert_str_eq(hints.fields[0], "Link: </a.css>; rel=preload\r\n");
    ck_assert_str_eq(hints.fields[1], "Link: </b.js>; rel=preload\r\n");
    ck_assert_uint_eq(bo.beresp->status, 200);
    ck_assert_ptr_null(http_find(bo.beresp, "Link"));
    ck_assert_int_eq(fetch_body(&bo, &sink), 0);
    ck_assert_str_eq(got.b, "ok");
    fetch_done(&bo);
}
END_TEST

/* The client's upgrade, as it reaches the backend: its Upgrade, Connection: upgrade alone. */
static void
upgrade_creq(void)
{
    add(&creq, "Upgrade", "websocket");
    add(&creq, "Connection", "Upgrade, X-Other");
    add(&creq, "X-Other", "hop");
}

/*
 * The backend switches: FETCH_UPGRADE, the connection handed over, the
 * bytes it sent past its 101 left in the receive buffer for the tunnel.
 */
START_TEST(upgrade_switched)
{
    uint64_t opened = stat_get(STAT_tunnel_opened);
    struct busyobj bo;

    upgrade_creq();
    answer("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           "\r\nfirst-frame",
           NULL)
        ->hold = true;
    peer_run();
    mkbo(&bo, NULL);
    bo.upgrade = true;
    ck_assert_int_eq(fetch_head(&bo), FETCH_UPGRADE);
    ck_assert_ptr_nonnull(strstr(peer.got[0], "\r\nUpgrade: websocket\r\n"));
    ck_assert_ptr_nonnull(strstr(peer.got[0], "\r\nConnection: upgrade\r\n"));
    ck_assert_ptr_null(strstr(peer.got[0], "X-Other"));
    ck_assert_uint_eq(bo.beresp->status, 101);
    ck_assert_ptr_nonnull(bo.conn);
    ck_assert_uint_eq(bo.be_len - bo.be_pos, 11);
    ck_assert_int_eq(memcmp(bo.rxbuf + bo.be_pos, "first-frame", 11), 0);
    ck_assert_uint_eq(stat_get(STAT_tunnel_opened) - opened, 1);
    fetch_done(&bo); /* the caller would have taken bo.conn: here it is closed */
    ck_assert_uint_eq(bcp_idle_count(be->pool), 0);
}
END_TEST

/*
 * The backend refuses the switch: an ordinary response, and the
 * connection it was asked to switch is closed, never pooled.  A 101
 * without Upgrade, or to a request that asked for no upgrade, is refused.
 */
START_TEST(upgrade_refused)
{
    uint64_t opened = stat_get(STAT_tunnel_opened), refused = stat_get(STAT_tunnel_refused);
    struct busyobj bo;

    upgrade_creq();
    answer("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nno", NULL);
    answer("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n\r\n", NULL);
    answer("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n", NULL);
    peer_run();
    mkbo(&bo, NULL);
    bo.upgrade = true;
    ck_assert_int_eq(fetch_head(&bo), FETCH_OK);
    ck_assert_uint_eq(bo.beresp->status, 200);
    ck_assert_int_eq(fetch_body(&bo, &sink), 0);
    ck_assert_str_eq(got.b, "no");
    fetch_done(&bo);
    ck_assert_uint_eq(bcp_idle_count(be->pool), 0);
    ck_assert_uint_eq(stat_get(STAT_tunnel_refused) - refused, 1);
    mkbo(&bo, NULL);
    bo.upgrade = true;
    ck_assert_int_eq(fetch_head(&bo), FETCH_E_BAD);
    fetch_done(&bo);
    mkbo(&bo, NULL);
    ck_assert_int_eq(fetch_head(&bo), FETCH_E_BAD);
    fetch_done(&bo);
    ck_assert_uint_eq(stat_get(STAT_tunnel_opened) - opened, 0);
}
END_TEST

Suite *
fetch_suite(void)
{
    Suite *s = suite_create("fetch");
    TCase *tc = unit_tcase(s, "bereq", setup, teardown);

    tcase_add_test(tc, bereq_of_a_pass);
    tcase_add_test(tc, bereq_of_a_miss);
    tcase_add_test(tc, bereq_body_framing);
    tc = unit_tcase(s, "body", setup, teardown);
    tcase_add_test(tc, body_content_length);
    tcase_add_test(tc, body_chunked);
    tcase_add_test(tc, body_close_delimited);
    tc = unit_tcase(s, "cache", setup, teardown);
    tcase_add_test(tc, store_into_busy_object);
    tcase_add_test(tc, revalidate_stale_object);
    tcase_add_test(tc, gzip_checked);
    tcase_add_test(tc, gzip_bad_refused);
    tc = unit_tcase(s, "stream", setup, teardown);
    tcase_add_test(tc, streams_into_busy_object);
    tcase_add_test(tc, failed_client_stops_only_a_pass);
    tc = unit_tcase(s, "broken_backend", setup, teardown);
    tcase_add_test(tc, backend_refused_502);
    tcase_add_test(tc, backend_first_byte_timeout);
    tcase_add_test(tc, wait_then_resume);
    tcase_add_test(tc, wait_expired_504);
    tcase_add_test(tc, backend_body_short);
    tcase_add_test(tc, backend_body_stalls);
    tcase_add_test(tc, backend_refuses_connections);
    tcase_add_test(tc, backend_at_max_connections);
    tcase_add_test(tc, dead_kept_connections_retried_fresh);
    tcase_add_test(tc, dead_kept_connection_post_not_resent);
    tcase_add_test(tc, interim_before_final);
    tcase_add_test(tc, interim_103_forwarded);
    tcase_add_test(tc, upgrade_switched);
    tcase_add_test(tc, upgrade_refused);
    tcase_add_test(tc, refresh_without_a_request);
    tcase_add_test(tc, refresh_failure_keeps_the_stale_copy);
    return s;
}
