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
 *
 * Slow clients hold no worker.  Reads are non-blocking: when a head, or a
 * body of at most req_body_buffer bytes, has arrived in part and the rest
 * is not there yet, the bytes received so far are copied into the session
 * (sess_keep_input(), exactly their size) and the session goes to the
 * waiter with a deadline (wtr_enter_until()): the head within timeout_req
 * of its first byte, the body as h1t_body_deadline() says.  When more
 * bytes come, whichever worker takes the session gets the kept bytes back
 * into its receive buffer and parses the head again from the start (the
 * parser keeps no state, and a head is small); what must survive between
 * two visits -- when the head began and ended, whether 100 Continue went
 * out -- lives in the session.  A body is thus read whole before the
 * request is dispatched and served from memory, like nginx's
 * client_body_buffer_size; of a larger one the first req_body_buffer bytes
 * are read that way, and the rest is streamed by the worker (h1t_body.c)
 * at req_body_min_rate or better.  Past its deadline a parked session is
 * answered 408 and closed by whoever receives its event, without blocking
 * (sess_close_timeout()), so expiring thousands costs no worker either.
 * A slow connection costs its kept bytes (a few hundred for a head), its
 * struct sess and a descriptor: the receive buffer and the thread are a
 * worker's, and return to the pool at once.
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
    HEAD_OK,      /* req->http parsed (and, after read_body(), the body buffered) */
    HEAD_IDLE,    /* nothing arrived: park the session */
    HEAD_PARTIAL, /* part of the request arrived and the rest is not there yet */
    HEAD_CLOSED,  /* the client closed or failed: close the session */
    HEAD_ERROR,   /* answered with an error status: close after it */
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
 * One non-blocking read of at most `room` bytes into wrk->rx after
 * rx_len: HEAD_OK when bytes came (*got of them), HEAD_PARTIAL when none
 * are there yet, HEAD_CLOSED when the client closed or failed.
 */
static enum head_result
read_more(struct req *req, size_t room, size_t *got)
{
    ssize_t n;

    do {
        n = sess_read_nb(req->sp, req->wrk->rx + req->rx_len, room);
    } while (n < 0 && errno == EINTR);
    if (n > 0) {
        req->rx_len += (size_t)n;
        *got = (size_t)n;
        return (HEAD_OK);
    }
    return (n < 0 && errno == EAGAIN ? HEAD_PARTIAL : HEAD_CLOSED);
}

/*
 * Read and parse a request head, never waiting: HEAD_IDLE when no byte of
 * it is there, HEAD_PARTIAL when some are and the rest is not yet.
 * `expect_wait`: a response just went out, so the next head is rarely in.
 */
static enum head_result
read_head(struct req *req, bool expect_wait)
{
    struct wrk *wrk = req->wrk;
    struct sess *sp = req->sp;
    struct h1_limits lim = {
        .max_head = par.http_req_size,
        .max_line = par.http_req_hdr_len,
        .max_hdr = par.http_max_hdr,
    };
    enum head_result hr;
    enum h1_status st;
    size_t room, got;

    /*
     * Right after a response the next request is rarely in yet: park the
     * session rather than pay for a read that fails with EAGAIN.  The
     * set reports it the moment it turns readable.
     */
    if (expect_wait && req->rx_len == 0 && !sess_pending(sp))
        return (HEAD_IDLE);
    for (;;) {
        if (req->rx_len > 0) {
            st = h1_parse_request(wrk->rx, req->rx_len, &lim, req->http, &req->rx_head);
            if (st == H1_DONE)
                return (HEAD_OK);
            if (st != H1_MORE)
                return (reject(req, h1_error_status(st)));
            /*
             * timeout_req counts from here, the first bytes' arrival: read
             * only for a head that is not all in, as a whole one is timed
             * by head_done().
             */
            if (sp->t_req == 0)
                sp->t_req = tim_mono();
        }
        room = par.http_req_size + 1 > wrk->rx_size ? wrk->rx_size : par.http_req_size + 1;
        SRG_ASSERT(req->rx_len < room);
        hr = read_more(req, room - req->rx_len, &got);
        if (hr != HEAD_OK)
            return (hr == HEAD_PARTIAL && req->rx_len == 0 ? HEAD_IDLE : hr);
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
    if (http_has_token(hp, "Upgrade", "h2c")) {
        /*
         * RFC 9113 dropped the upgrade to HTTP/2 (section 3.1): the request
         * is served as HTTP/1.1, and neither the offer nor its settings
         * reach a backend, piped or not.
         */
        http_unset(hp, "Upgrade");
        http_unset(hp, "HTTP2-Settings");
    }
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

/*
 * A head is complete: its times and counters, once per request even when
 * it is parsed again after its body waited in the waiter; then the
 * checks.
 */
static enum head_result
head_done(struct req *req)
{
    struct sess *sp = req->sp;
    double now = tim_mono();

    req->rx_pos = req->rx_head;
    if (sp->t_body == 0) {
        sp->t_body = now;
        STAT_INC(client_req);
        sp->nreq++;
    }
    req->t_mono = sp->t_body;
    req->t_start = tim_real() - (now - sp->t_body);
    return (check_request(req));
}

/* Run the chunked decoder over p[0 .. len): DONE (*used ends the body), MORE or ERROR. */
static enum h1_chunk_status
chunked_scan(struct h1_chunk *ck, const char *p, size_t len, size_t *used)
{
    enum h1_chunk_status cs = H1_CHUNK_MORE;
    const char *data;
    size_t off = 0, n, dlen;

    while (off < len) {
        cs = h1_chunk_decode(ck, p + off, len - off, &n, &data, &dlen);
        off += n;
        if (cs != H1_CHUNK_DATA)
            break;
        cs = H1_CHUNK_MORE;
    }
    *used = off;
    return (cs);
}

/*
 * Buffer the request body after the head in wrk->rx, never waiting: all
 * of it when it is at most req_body_buffer bytes (h1t_in.body_end then
 * says where it ends), else its first req_body_buffer bytes, the rest
 * being streamed later by h1t_body_next().  HEAD_PARTIAL when bytes are
 * missing and not there yet.  100 Continue goes out before the first wait
 * for the body, as the client waits for it to send the body at all.
 */
static enum head_result
read_body(struct req *req)
{
    struct h1t_in *in = h1t_in_of(req);
    struct wrk *wrk = req->wrk;
    struct sess *sp = req->sp;
    size_t limit, want, scanned = req->rx_head, used, got;
    enum head_result hr;
    struct h1_chunk ck;

    in->t_body = sp->t_body;
    in->body_raw = req->rx_len - req->rx_head;
    in->body_end = 0;
    if (req->body == H1_BODY_NONE)
        return (HEAD_OK);
    if (sp->sent_100)
        req->expect_100 = false;
    limit = wrk->rx_size - req->rx_head;
    if (par.req_body_buffer < limit)
        limit = par.req_body_buffer;
    want = limit;
    if (req->body == H1_BODY_LENGTH && req->clen < want)
        want = (size_t)req->clen;
    h1_chunk_init(&ck, par.http_chunk_ext_max);
    for (;;) {
        if (req->body == H1_BODY_LENGTH) {
            if (req->rx_len - req->rx_head >= req->clen) {
                in->body_end = req->rx_head + (size_t)req->clen;
                STAT_INC(client_body_buffered);
                return (HEAD_OK);
            }
        } else {
            switch (chunked_scan(&ck, wrk->rx + scanned, req->rx_len - scanned, &used)) {
            case H1_CHUNK_DONE:
                in->body_end = scanned + used;
                STAT_INC(client_body_buffered);
                return (HEAD_OK);
            case H1_CHUNK_ERROR:
                req->body_bad = true;
                return (reject(req, 400));
            case H1_CHUNK_MORE:
            case H1_CHUNK_DATA:
                scanned += used;
                break;
            }
        }
        if (req->rx_len - req->rx_head >= want)
            return (HEAD_OK); /* the rest is streamed */
        if (h1t_continue(req) != 0)
            return (HEAD_CLOSED);
        hr = read_more(req, req->rx_head + want - req->rx_len, &got);
        if (hr != HEAD_OK)
            return (hr);
        in->body_raw += got;
    }
}

/*
 * Part of a request is in and the rest is not: the session keeps the
 * bytes and waits in the waiter until its deadline, holding no worker.
 */
static void
park_partial(struct req *req, struct sess **spp)
{
    struct sess *sp = *spp;
    double deadline;

    if (sp->t_body == 0)
        deadline = sp->t_req + par.timeout_req;
    else
        deadline = h1t_body_deadline(sp->t_body, req->rx_len - req->rx_head);
    if (tim_mono() >= deadline) {
        sess_close_timeout(spp);
        return;
    }
    sess_keep_input(sp, req->wrk->rx, req->rx_len);
    wtr_enter_until(spp, deadline);
}

/*
 * A request was served: skip a body nobody read, and say whether the
 * session goes on with the bytes after it (true, *carry of them, moved to
 * the start of wrk->rx) or was closed.
 */
static bool
served_next(struct wrk *wrk, struct req *req, struct sess **spp, size_t *carry)
{
    if (!req->body_done && req->body != H1_BODY_NONE) {
        /*
         * A body nobody read (a hit, an error page): skipped when it is
         * all in the buffer, else the connection is out of step: close.
         */
        if (h1t_in_of(req)->body_end != 0)
            req->rx_pos = h1t_in_of(req)->body_end;
        else
            req->close = true;
    }
    if (req->abort) {
        sess_close(spp);
        return (false);
    }
    *carry = req->rx_len - req->rx_pos;
    if (req->close || req->want_close || sess_draining()) {
        if (*carry > 0)
            sess_close_lingering(spp, REQ_ERROR_LINGER);
        else
            sess_close(spp);
        return (false);
    }
    if (*carry > 0) {
        memmove(wrk->rx, wrk->rx + req->rx_pos, *carry);
        STAT_INC(sess_herd);
    }
    (*spp)->t_idle = req->t_end; /* the request's log entry read the clock just now */
    return (true);
}

/*
 * Read, check and serve requests on the session until it idles, closes or
 * a request parks (then the request owns the session: touch nothing).
 */
static void
sess_loop(struct wrk *wrk, struct sess *sp, size_t carry, unsigned served)
{
    struct http_hdr *hdrs;
    struct req *req;
    enum head_result hr;

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
        if (hr == HEAD_OK)
            hr = head_done(req);
        if (hr == HEAD_OK)
            hr = read_body(req);
        switch (hr) {
        case HEAD_IDLE:
            /* After a request served_next() set it from the clock its log entry read. */
            if (served == 0)
                sp->t_idle = tim_mono();
            if (sess_draining()) {
                sess_close(&sp);
                return;
            }
            wtr_enter(&sp);
            return;
        case HEAD_PARTIAL:
            park_partial(req, &sp);
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
        /* The request is all in (or its body streams from here): the next one starts afresh. */
        sp->t_req = sp->t_body = 0;
        sp->sent_100 = false;
        if (req_serve(req) == REQ_RUN_PARKED)
            return;
        served++;
        if (!served_next(wrk, req, &sp, &carry))
            return;
    }
}

void
h1t_sess_task(struct wrk *wrk, void *priv)
{
    struct sess *sp = priv;
    size_t carry = 0;

    OBJ_CHECK(wrk, WRK_MAGIC);
    OBJ_CHECK(sp, SESS_MAGIC);
    wrk_buffers_fit(wrk);
    /* A request that arrived in part before: its bytes back where they are parsed. */
    if (sess_input_len(sp) > 0)
        carry = sess_input_read(sp, wrk->rx, wrk->rx_size);
    sess_loop(wrk, sp, carry, 0);
}

/*
 * Waiting lists (tp.h): a parked request keeps the workspace and receive
 * buffer it was read into -- its head, its state and any pipelined bytes
 * are there -- and its session; the worker gets fresh buffers.
 */
void
h1t_park(struct req *req, bool brief)
{
    struct h1t_in *in = h1t_in_of(req);

    OBJ_CHECK(req->wrk, WRK_MAGIC);
    wrk_mem_take(req->wrk, &in->mem, req->rx_len, brief);
    req->ws = &in->mem.ws;
    req->wrk = NULL;
}

void
h1t_resume(struct wrk *wrk, struct req *req)
{
    struct h1t_in *in = h1t_in_of(req);
    struct sess *sp = req->sp;
    size_t carry;

    OBJ_CHECK(wrk, WRK_MAGIC);
    OBJ_CHECK(req, REQ_MAGIC);
    wrk_buffers_fit(wrk);
    wrk_mem_give(wrk, &in->mem);
    req->wrk = wrk;
    req->ws = &wrk->ws;
    if (req_resume(req) == REQ_RUN_PARKED)
        return;
    if (served_next(wrk, req, &sp, &carry))
        sess_loop(wrk, sp, carry, 1);
}

void
h1t_drop(struct req *req)
{
    struct h1t_in *in = h1t_in_of(req);
    struct sess *sp = req->sp;

    sess_close(&sp);
    wrk_mem_free(&in->mem); /* the request with it */
}
