/*
 * The client side of a request: the session loop a worker runs.
 *
 * A worker owns the session from the moment it is scheduled until the
 * connection goes idle: it reads a head, checks it, hands it to fetch,
 * logs it, and goes on with the next request if one is already buffered
 * (pipelining).  Otherwise the session goes back to the waiter's set at
 * once, and the worker takes whichever session is ready next from that
 * set (the pool's idle source): under load one worker serves many
 * connections in a row without a thread switch per request.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "surogat/alog.h"
#include "surogat/rlog.h"
#include "surogat/be.h"
#include "surogat/defs.h"
#include "surogat/fetch.h"
#include "surogat/mon.h"
#include "surogat/par.h"
#include "surogat/pol.h"
#include "surogat/pool.h"
#include "surogat/realip.h"
#include "surogat/req.h"
#include "surogat/sb.h"
#include "surogat/sess.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/wrk.h"
#include "surogat/wtr.h"

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

double
req_send_deadline(const struct req *req)
{
    return (tim_mono() + par.send_timeout);
}

int
req_synth(struct req *req, unsigned status, const char *extra_hdr)
{
    return (req_synth_msg(req, status, extra_hdr, "surogat"));
}

int
req_synth_msg(struct req *req, unsigned status, const char *extra_hdr, const char *msg)
{
    char date[TIM_HTTP_DATE_LEN + 1], head[1024], body[512];
    struct sb hb, bb;
    const char *reason = http_reason(status);
    struct iovec iov[2];
    int rv;

    sb_init(&bb, body, sizeof body);
    sb_printf(&bb,
              "<!DOCTYPE html>\n<html><head><title>%u %s</title></head>\n"
              "<body><h1>%u %s</h1><p>%s</p></body></html>\n",
              status, reason, status, reason, msg);
    tim_http_date(tim_real(), date);
    sb_init(&hb, head, sizeof head);
    sb_printf(&hb,
              "HTTP/1.1 %u %s\r\nDate: %s\r\nServer: surogat\r\n"
              "Content-Type: text/html; charset=utf-8\r\nContent-Length: %zu\r\n%s%s",
              status, reason, date, bb.len, extra_hdr != NULL ? extra_hdr : "",
              req->close || req->want_close ? "Connection: close\r\n"
              : req->keepalive_10           ? "Connection: keep-alive\r\n"
                                            : "");
    sb_cat(&hb, "\r\n");
    AN(sb_ok(&hb));
    AN(sb_ok(&bb));
    iov[0].iov_base = head;
    iov[0].iov_len = hb.len;
    iov[1].iov_base = body;
    iov[1].iov_len = req->head_only ? 0 : bb.len;
    req->status = status;
    req->outcome = REQ_O_SYNTH;
    req->t_first = tim_mono();
    rv = sess_writev(req->sp, iov, 2, req_send_deadline(req));
    if (rv == 0) {
        req->resp_bytes = req->head_only ? 0 : bb.len;
        STAT_ADD(resp_head_bytes, hb.len);
        STAT_ADD(resp_body_bytes, req->resp_bytes);
    }
    return (rv);
}

int
req_send_synth(struct req *req, const struct http *hp, struct txt body)
{
    char date[TIM_HTTP_DATE_LEN + 1], *buf;
    struct iovec iov[2];
    struct sb sb;
    size_t room;
    int rv;

    buf = ws_reserve_all(&req->wrk->ws, &room);
    sb_init(&sb, buf, room);
    sb_printf(&sb, "HTTP/1.1 %u %.*s\r\n", hp->status, (int)hp->reason.len,
              hp->reason.b != NULL ? hp->reason.b : "");
    if (http_find(hp, "Date") == NULL) {
        tim_http_date(tim_real(), date);
        sb_printf(&sb, "Date: %s\r\n", date);
    }
    if (http_find(hp, "Server") == NULL)
        sb_cat(&sb, "Server: surogat\r\n");
    for (unsigned i = 0; i < hp->nhdr; i++) {
        const struct http_hdr *h = &hp->hdr[i];
        if (http_name_eq(&h->name, "Content-Length") || http_name_eq(&h->name, "Connection") ||
            http_name_eq(&h->name, "Transfer-Encoding"))
            continue;
        sb_printf(&sb, "%.*s: %.*s\r\n", (int)h->name.len, h->name.b, (int)h->val.len,
                  h->val.b != NULL ? h->val.b : "");
    }
    sb_printf(&sb, "Content-Length: %zu\r\n%s\r\n", body.len,
              req->close || req->want_close ? "Connection: close\r\n"
              : req->keepalive_10           ? "Connection: keep-alive\r\n"
                                            : "");
    if (!sb_ok(&sb)) {
        ws_release(&req->wrk->ws, 0);
        STAT_INC(ws_overflow);
        req->close = true;
        return (req_synth(req, 500, NULL));
    }
    ws_release(&req->wrk->ws, sb.len + 1);
    iov[0].iov_base = buf;
    iov[0].iov_len = sb.len;
    iov[1].iov_base = (void *)(uintptr_t)body.b;
    iov[1].iov_len = req->head_only ? 0 : body.len;
    req->status = hp->status;
    req->t_first = tim_mono();
    rv = sess_writev(req->sp, iov, 2, req_send_deadline(req));
    if (rv == 0) {
        req->resp_bytes = iov[1].iov_len;
        STAT_ADD(resp_head_bytes, sb.len);
        STAT_ADD(resp_body_bytes, req->resp_bytes);
    }
    return (rv);
}

/* s with &, <, > and " as HTML entities, in workspace; NULL when it is full. */
static char *
html_escape(struct ws *ws, const char *s)
{
    size_t n = 0;
    char *out, *p;

    for (const char *q = s; *q != '\0'; q++)
        n += strchr("&<>\"", *q) != NULL ? 6 : 1;
    if ((out = ws_alloc(ws, n + 1)) == NULL)
        return (NULL);
    for (p = out; *s != '\0'; s++) {
        switch (*s) {
        case '&':
            p = stpcpy(p, "&amp;");
            break;
        case '<':
            p = stpcpy(p, "&lt;");
            break;
        case '>':
            p = stpcpy(p, "&gt;");
            break;
        case '"':
            p = stpcpy(p, "&quot;");
            break;
        default:
            *p++ = *s;
        }
    }
    *p = '\0';
    return (out);
}

void
req_synth_pol(struct req *req, unsigned status, const char *reason)
{
    struct http_hdr *hdrs = ws_alloc(&req->wrk->ws, (POL_HDR_ROOM + 2) * sizeof *hdrs);
    const char *esc = html_escape(&req->wrk->ws, reason);
    struct http resp;
    struct txt body;
    char *page;
    int len;

    if (*reason == '\0')
        reason = http_reason(status);
    if (hdrs == NULL || esc == NULL ||
        (page = ws_alloc(&req->wrk->ws, 2 * strlen(esc) + 160)) == NULL) {
        STAT_INC(ws_overflow);
        (void)req_synth(req, status, NULL);
        return;
    }
    len = snprintf(page, 2 * strlen(esc) + 160,
                   "<!DOCTYPE html>\n<html><head><title>%u %s</title></head>\n"
                   "<body><h1>%u %s</h1></body></html>\n",
                   status, esc, status, esc);
    body = (struct txt){ page, (size_t)len };
    http_init(&resp, hdrs, POL_HDR_ROOM + 2);
    resp.proto = 11;
    resp.status = status;
    resp.reason = (struct txt){ reason, strlen(reason) };
    AZ(http_add(&resp, TXT_LIT("Content-Type"), TXT_LIT("text/html; charset=utf-8")));
    req->outcome = REQ_O_SYNTH;
    if (pol_active()) {
        switch (pol_synth(req, &resp, &body)) {
        case POL_DELIVER:
            break;
        case POL_RESTART:
            req->restart = true;
            return;
        default:
            (void)req_synth_msg(req, 503, NULL, "policy error");
            return;
        }
    }
    (void)req_send_synth(req, &resp, body);
    req->outcome = REQ_O_SYNTH;
}

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
    count_error(status);
    req->close = true;
    if (req->t_mono == 0) {
        req->t_start = tim_real();
        req->t_mono = tim_mono();
    }
    (void)req_synth(req, status, NULL);
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
            (void)req_synth(req, 408, NULL);
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
 * Request fields a client may send that the cache key does not include,
 * while applications commonly build links, redirects, schemes or even
 * routes from them (Symfony, Laravel, Django, Rails, IIS URL rewriting,
 * method overrides).  A response built from a forged one would be cached
 * and served to everyone: cache poisoning with a single request.  So
 * they are removed from every client request before the policy and the
 * backend see it, unless trusted_client_headers names them (a proxy in
 * front that sets them itself); the policy may still set any of them.
 */
static const char *const unkeyed_fields[] = {
    "X-Forwarded-Host", "X-Forwarded-Server", "X-Forwarded-Port", "X-Forwarded-Prefix",
    "X-Forwarded-Scheme", "X-Forwarded-Ssl", "Front-End-Https", "X-Url-Scheme",
    "X-Host", "X-Original-Host", "X-Original-URL", "X-Rewrite-URL",
    "X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override", "Forwarded",
};

/* Whether `name` is an element of a comma- or space-separated list, ignoring case. */
static bool
name_listed(const char *list, const char *name)
{
    size_t nl = strlen(name);

    for (const char *p = list; *p != '\0';) {
        size_t n;
        p += strspn(p, ", \t");
        n = strcspn(p, ", \t");
        if (n == nl && strncasecmp(p, name, n) == 0)
            return (true);
        p += n;
    }
    return (false);
}

/*
 * Remove the unkeyed fields the operator does not trust.  Which ones is
 * worked out again only when the parameter's value changes (a new
 * pointer): once per worker, not per request.
 */
static void
strip_unkeyed(struct http *hp)
{
    static __thread const char *seen;
    static __thread uint32_t strip;
    const char *cur = __atomic_load_n(&par.trusted_client_headers, __ATOMIC_ACQUIRE);

    if (cur != seen || seen == NULL) {
        strip = 0;
        for (size_t i = 0; i < ARRAY_LEN(unkeyed_fields); i++)
            if (!name_listed(cur, unkeyed_fields[i]))
                strip |= UINT32_C(1) << i;
        seen = cur;
    }
    /* One pass, in order; every name in the table starts with X or F. */
    unsigned kept = 0;
    for (unsigned h = 0; h < hp->nhdr; h++) {
        const struct txt *n = &hp->hdr[h].name;
        bool drop = false;
        if (n->len > 0 && (n->b[0] | 0x20) != 'x' && (n->b[0] | 0x20) != 'f') {
            hp->hdr[kept++] = hp->hdr[h];
            continue;
        }
        for (size_t i = 0; i < ARRAY_LEN(unkeyed_fields) && !drop; i++)
            drop = (strip & (UINT32_C(1) << i)) && http_name_eq(n, unkeyed_fields[i]);
        if (drop)
            STAT_INC(client_hdr_stripped);
        else
            hp->hdr[kept++] = hp->hdr[h];
    }
    hp->nhdr = kept;
}

/*
 * Checks on a parsed head that the parser cannot make alone: Host,
 * framing, the request-target form, Expect.  Answers and returns
 * HEAD_ERROR for a request we refuse.
 */
static enum head_result
check_request(struct req *req)
{
    struct http *hp = req->http;
    const struct http_hdr *h;
    unsigned nhost = http_count(hp, "Host");

    realip_apply(req->sp, hp); /* the client behind trusted_proxies, before anyone reads it */
    if (nhost > 1 || (hp->proto == 11 && nhost == 0))
        return (reject(req, 400));
    /* HTTP/1.0 may send none or an empty one; a Host that is there must be one. */
    h = http_find(hp, "Host");
    if (h != NULL && (h->val.len > 0 || hp->proto == 11) && !http_host_valid(&h->val))
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
        } else if (absolute_form(req) != 0 || !http_host_valid(http_value(hp, "Host"))) {
            return (reject(req, 400));
        }
    }
    h = http_find(hp, "Expect");
    if (h != NULL) {
        if (!(h->val.len == 12 && strncasecmp(h->val.b, "100-continue", 12) == 0) ||
            http_count(hp, "Expect") > 1) {
            req->close = true;
            (void)req_synth(req, 417, NULL);
            return (HEAD_ERROR);
        }
        req->expect_100 = hp->proto == 11 && req->body != H1_BODY_NONE;
        http_unset(hp, "Expect"); /* we answer it ourselves */
    }
    if (hp->method.len == 5 && memcmp(hp->method.b, "TRACE", 5) == 0) {
        /*
         * TRACE echoes the request, cookies and credentials included, to
         * whoever can make a browser send it (cross-site tracing); the
         * few who need it turn it on.  Then it still never carries them.
         */
        if (!par.allow_trace) {
            STAT_INC(client_req_405);
            req->close = true;
            (void)req_synth(req, 405, "Allow: GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS\r\n");
            return (HEAD_ERROR);
        }
        http_unset(hp, "Cookie");
        http_unset(hp, "Authorization");
        http_unset(hp, "Proxy-Authorization");
    }
    strip_unkeyed(hp);
    req->head_only = hp->method.len == 4 && memcmp(hp->method.b, "HEAD", 4) == 0;
    if (hp->proto == 11) {
        req->want_close = http_has_token(hp, "Connection", "close");
    } else {
        req->keepalive_10 = http_has_token(hp, "Connection", "keep-alive") &&
                            !http_has_token(hp, "Connection", "close");
        req->want_close = !req->keepalive_10;
    }
    return (HEAD_OK);
}

/* A request has been answered: count, log, and work out what the session does next. */
static void
req_finish(struct req *req)
{
    req->t_end = tim_mono();
    if (req->t_mono == 0) {
        req->t_start = tim_real();
        req->t_mono = req->t_end;
    }
    if (req->t_first == 0)
        req->t_first = req->t_end;
    mon_req_end(req);
    if (alog_enabled())
        alog_req(req->wrk->alog, req);
    if (req->wrk->rlog != NULL)
        rlog_req(req->wrk->rlog, req);
    /* A body we never read leaves the connection out of step: close it. */
    if (!req->body_done && req->body != H1_BODY_NONE)
        req->close = true;
}

void
req_sess_task(struct wrk *wrk, void *priv)
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
        req->rx_len = carry;
        if (hdrs == NULL) {
            /* http_max_hdr set too high for workspace_client: say so, do not crash. */
            http_init(req->http, NULL, 0);
            STAT_INC(ws_overflow);
            STAT_INC(client_resp_500);
            req->close = true;
            (void)req_synth(req, 500, NULL);
            req_finish(req);
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
            req_finish(req);
            sess_close_lingering(&sp, REQ_ERROR_LINGER);
            return;
        case HEAD_OK:
            break;
        }
        req_dispatch(req);
        req_finish(req);
        if (pol_active() && pol_has_log())
            pol_log(req);
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
