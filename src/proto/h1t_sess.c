/*
 * The HTTP/1 transport's session loop: the pool task of a client
 * connection.
 *
 * A worker owns the session from the moment it is scheduled until the
 * connection goes idle: it reads a head, checks it as HTTP/1 demands, hands
 * the request to the core (req_serve()), and goes on with the next request
 * if one is already buffered (pipelining).  Otherwise the session goes back
 * to the waiter's set at once, and the worker takes whichever session is
 * ready next from that set (the pool's idle source): under load one worker
 * serves many connections in a row without a thread switch per request.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "surogat/defs.h"
#include "surogat/dlv.h"
#include "surogat/h1.h"
#include "surogat/par.h"
#include "surogat/realip.h"
#include "surogat/req.h"
#include "surogat/sess.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/tp.h"
#include "surogat/wrk.h"
#include "surogat/ws.h"
#include "surogat/wtr.h"

#include "h1t_priv.h"

/* After an error response, how long to swallow what the client still sends. */
#define REQ_ERROR_LINGER 0.5
/* Header slots beyond http_max_hdr, for the ones surogat adds (Host, X-Forwarded-For ...). */
#define REQ_EXTRA_HDR 8

enum head_result {
    HEAD_OK,     /* req->http parsed */
    HEAD_IDLE,   /* nothing arrived in time: park the session */
    HEAD_CLOSED, /* the client closed or failed: close the session */
    HEAD_ERROR,  /* answered with an error status: close after it */
};

static void
count_error(unsigned status)
{
    switch (status) {
    case 400:
        STAT_INC(client_req_400);
        break;
    case 414:
        STAT_INC(client_req_414);
        break;
    case 431:
        STAT_INC(client_req_431);
        break;
    case 501:
        STAT_INC(client_req_501);
        break;
    case 505:
        STAT_INC(client_req_505);
        break;
    default:
        break;
    }
}

/* Answer a bad request and mark the session for closing. */
static enum head_result
reject(struct req *req, unsigned status)
{
    /* Its log line names this request's client, not the last one behind trusted_proxies. */
    realip_apply(req->sp, req->http);
    count_error(status);
    req->close = true;
    if (req->t_mono == 0) {
        req->t_start = tim_real();
        req->t_mono = tim_mono();
    }
    (void)dlv_error(req, status, NULL, NULL);
    return (HEAD_ERROR);
}

static unsigned
h1_error_status(enum h1_status st)
{
    switch (st) {
    case H1_E_SYNTAX:
        return (400);
    case H1_E_URI_TOO_LONG:
        return (414);
    case H1_E_TOO_BIG:
        return (431);
    case H1_E_VERSION:
        return (505);
    case H1_DONE:
    case H1_MORE:
        break;
    }
    SRG_WRONG("not an h1 error");
}

/*
 * Read and parse a request head.  `fresh` means no byte of it has
 * arrived yet, so running out of time means idle, not a slow client.
 */
static enum head_result
read_head(struct req *req, bool expect_wait)
{
    struct wrk *wrk = req->wrk;
    struct h1_limits lim = {
        .max_head = par.http_req_size,
        .max_line = par.http_req_hdr_len,
        .max_hdr = par.http_max_hdr,
    };
    double deadline = 0;
    enum h1_status st;
    size_t room;
    ssize_t n;

    /*
     * Right after a response the next request is rarely in yet: park the
     * session rather than pay for a read that fails with EAGAIN.  The
     * set reports it the moment it turns readable.
     */
    if (expect_wait && req->rx_len == 0 && !sess_pending(req->sp))
        return (HEAD_IDLE);
    for (;;) {
        if (req->rx_len > 0) {
            st = h1_parse_request(wrk->rx, req->rx_len, &lim, req->http, &req->rx_head);
            if (st == H1_DONE)
                return (HEAD_OK);
            if (st != H1_MORE)
                return (reject(req, h1_error_status(st)));
        }
        room = par.http_req_size + 1 > wrk->rx_size ? wrk->rx_size : par.http_req_size + 1;
        SRG_ASSERT(req->rx_len < room);
        n = sess_read_nb(req->sp, wrk->rx + req->rx_len, room - req->rx_len);
        if (n > 0) {
            req->rx_len += (size_t)n;
            continue;
        }
        if (n == 0)
            return (HEAD_CLOSED);
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN)
            return (HEAD_CLOSED);
        if (req->rx_len == 0)
            return (HEAD_IDLE);
        if (deadline == 0)
            deadline = tim_mono() + par.timeout_idle;
        n = sess_read(req->sp, wrk->rx + req->rx_len, room - req->rx_len, deadline);
        if (n > 0) {
            req->rx_len += (size_t)n;
            continue;
        }
        if (n < 0 && errno == ETIMEDOUT) {
            req->close = true;
            (void)dlv_error(req, 408, NULL, NULL);
            return (HEAD_ERROR);
        }
        return (HEAD_CLOSED);
    }
}

/*
 * absolute-form ("http://host/path", RFC 9112 section 3.2.2): the
 * authority replaces any Host header and the backend gets origin-form.
 * 0, or -1 when the target is not a usable absolute URI.
 */
static int
absolute_form(struct req *req)
{
    struct http *hp = req->http;
    const char *p = hp->url.b, *e = p + hp->url.len, *auth, *path;
    size_t skip;

    if (hp->url.len > 7 && strncasecmp(p, "http://", 7) == 0)
        skip = 7;
    else if (hp->url.len > 8 && strncasecmp(p, "https://", 8) == 0)
        skip = 8;
    else
        return (-1);
    auth = p + skip;
    for (path = auth; path < e && *path != '/' && *path != '?' && *path != '#'; path++)
        if (*path == '@')
            return (-1); /* userinfo is not allowed in http(s) URIs (RFC 9110 4.2.4) */
    if (path == auth || (path < e && *path == '#'))
        return (-1);
    http_unset(hp, "Host");
    if (http_add(hp, TXT_LIT("Host"), (struct txt){ auth, (size_t)(path - auth) }) != 0)
        return (-1);
    if (path < e && *path == '/') {
        hp->url.b = path;
        hp->url.len = (size_t)(e - path);
    } else {
        char *u = ws_alloc(&req->wrk->ws, (size_t)(e - path) + 2);
        if (u == NULL)
            return (-1);
        u[0] = '/';
        memcpy(u + 1, path, (size_t)(e - path));
        hp->url.b = u;
        hp->url.len = (size_t)(e - path) + 1;
    }
    return (0);
}

/*
 * HTTP/1 checks on a parsed head that the parser cannot make alone: Host
 * present once, framing, the request-target form, Expect, persistence.
 * Answers and returns HEAD_ERROR for a request we refuse.  The checks
 * every protocol shares follow in req_serve().
 */
static enum head_result
check_request(struct req *req)
{
    struct http *hp = req->http;
    const struct http_hdr *h;
    unsigned nhost = http_count(hp, "Host");

    if (nhost > 1 || (hp->proto == 11 && nhost == 0))
        return (reject(req, 400));
    switch (h1_req_body(hp, &req->clen)) {
    case H1_BODY_NONE:
        req->body = H1_BODY_NONE;
        break;
    case H1_BODY_LENGTH:
        req->body = H1_BODY_LENGTH;
        req->body_left = req->clen;
        break;
    case H1_BODY_CHUNKED:
        req->body = H1_BODY_CHUNKED;
        h1_chunk_init(&req->chunk, par.http_chunk_ext_max);
        break;
    case H1_BODY_E_CODING:
        return (reject(req, 501));
    case H1_BODY_EOF:
    case H1_BODY_E_AMBIGUOUS:
        return (reject(req, 400));
    }
    if (hp->url.b[0] != '/') {
        /* asterisk-form is for OPTIONS only; authority-form is CONNECT, which we do not do. */
        if (hp->url.len == 1 && hp->url.b[0] == '*') {
            if (!(hp->method.len == 7 && memcmp(hp->method.b, "OPTIONS", 7) == 0))
                return (reject(req, 400));
        } else if (hp->method.len == 7 && memcmp(hp->method.b, "CONNECT", 7) == 0) {
            return (reject(req, 501));
        } else if (absolute_form(req) != 0) {
            return (reject(req, 400));
        }
    }
    h = http_find(hp, "Expect");
    if (h != NULL) {
        if (!(h->val.len == 12 && strncasecmp(h->val.b, "100-continue", 12) == 0) ||
            http_count(hp, "Expect") > 1) {
            req->close = true;
            (void)dlv_error(req, 417, NULL, NULL);
            return (HEAD_ERROR);
        }
        req->expect_100 = hp->proto == 11 && req->body != H1_BODY_NONE;
        http_unset(hp, "Expect"); /* we answer it ourselves */
    }
    req->upgrade = h1t_is_upgrade(hp);
    if (hp->proto == 11) {
        req->want_close = http_has_token(hp, "Connection", "close");
    } else {
        req->keepalive_10 = http_has_token(hp, "Connection", "keep-alive") &&
                            !http_has_token(hp, "Connection", "close");
        req->want_close = !req->keepalive_10;
    }
    return (HEAD_OK);
}

void
h1t_sess_task(struct wrk *wrk, void *priv)
{
    struct sess *sp = priv;
    struct http_hdr *hdrs;
    struct req *req;
    size_t carry = 0;
    unsigned served = 0;
    enum head_result hr;

    OBJ_CHECK(wrk, WRK_MAGIC);
    OBJ_CHECK(sp, SESS_MAGIC);
    wrk_buffers_fit(wrk);
    for (;;) {
        ws_reset(&wrk->ws);
        req = ws_alloc(&wrk->ws, sizeof *req);
        hdrs = ws_alloc(&wrk->ws, (par.http_max_hdr + REQ_EXTRA_HDR) * sizeof *hdrs);
        AN(req); /* workspace_client's minimum is far above sizeof(struct req) */
        OBJ_INIT(req, REQ_MAGIC);
        req->sp = sp;
        req->wrk = wrk;
        req->ws = &wrk->ws;
        AZ(h1t_req_init(req)); /* workspace_client's minimum is far above its needs */
        req->rx_len = carry;
        if (hdrs == NULL) {
            /* http_max_hdr set too high for workspace_client: say so, do not crash. */
            http_init(req->http, NULL, 0);
            STAT_INC(ws_overflow);
            STAT_INC(client_resp_500);
            req->close = true;
            (void)dlv_error(req, 500, NULL, NULL);
            req_log(req);
            sess_close_lingering(&sp, REQ_ERROR_LINGER);
            return;
        }
        http_init(req->http, hdrs, par.http_max_hdr + REQ_EXTRA_HDR);
        hr = read_head(req, served > 0);
        if (hr == HEAD_OK) {
            req->t_start = tim_real();
            req->t_mono = tim_mono();
            req->rx_pos = req->rx_head;
            STAT_INC(client_req);
            sp->nreq++;
            hr = check_request(req);
        }
        switch (hr) {
        case HEAD_IDLE:
            sp->t_idle = tim_mono();
            if (sess_draining()) {
                sess_close(&sp);
                return;
            }
            wtr_enter(&sp);
            return;
        case HEAD_CLOSED:
            sess_close(&sp);
            return;
        case HEAD_ERROR:
            req_log(req);
            sess_close_lingering(&sp, REQ_ERROR_LINGER);
            return;
        case HEAD_OK:
            break;
        }
        req_serve(req);
        /* A body we never read leaves the connection out of step: close it. */
        if (!req->body_done && req->body != H1_BODY_NONE)
            req->close = true;
        served++;
        if (req->abort) {
            sess_close(&sp);
            return;
        }
        carry = req->rx_len - req->rx_pos;
        if (req->close || req->want_close || sess_draining()) {
            if (carry > 0)
                sess_close_lingering(&sp, REQ_ERROR_LINGER);
            else
                sess_close(&sp);
            return;
        }
        if (carry > 0) {
            memmove(wrk->rx, wrk->rx + req->rx_pos, carry);
            STAT_INC(sess_herd);
        }
        sp->t_idle = tim_mono();
    }
}
