/*
 * HTTP/2 streams as requests: the runners that serve them, and the
 * transport's operations (tp.h) for their responses and request bodies.
 *
 * A stream whose request is complete (or whose body has begun) joins its
 * connection's queue.  Runners take streams from the queue one after
 * another and serve each with req_serve() on the runner's own worker:
 * the reader that decoded them becomes the first runner once it has
 * parked the connection, and while the queue holds more, one more runner
 * is always queued in the pool (a "helper"), so that a stream that blocks
 * (a slow backend, a closed window) never holds up the others -- any free
 * worker takes the next -- while a burst of cache hits is served back to
 * back without a thread hand-off per stream.  At most one helper per
 * connection waits in the pool queue.
 *
 * A stream is freed when both nghttp2 (until on_stream_close()) and its
 * runner (from queued to done) have let it go; both under the connection
 * lock.  The request itself lives in the runner's workspace; its header
 * fields point into the stream's own buffer (h2t_hdr.c).
 *
 * Body pieces are never copied but into the output buffer: body() hands
 * them to the stream and waits, its worker blocked but no other, until
 * they are all framed into it (h2t_io.c), within h2_window_timeout of no
 * progress.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "surogat/defs.h"
#include "surogat/dlv.h"
#include "surogat/h1.h"
#include "surogat/par.h"
#include "surogat/pool.h"
#include "surogat/req.h"
#include "surogat/sess.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/tp.h"
#include "surogat/vio.h"
#include "surogat/wrk.h"
#include "surogat/ws.h"

#include "h2t_priv.h"

/* Header slots beyond the block's fields: Host, and those surogat adds (X-Forwarded-For ...). */
#define H2_EXTRA_HDR 8
/* file(): bytes read per round, a whole number of DATA frames. */
#define H2_FILE_ROUND (4 * H2_DATA_MAX)

struct h2s *
h2t__stream_new(struct h2c *c, int32_t id)
{
    struct h2s *s;

    OBJ_NEW(s, H2S_MAGIC);
    s->c = c;
    s->id = id;
    s->open = true;
    s->olen = TP_LEN_NONE;
    AZ(pthread_cond_init(&s->cond, NULL));
    s->lnext = c->all;
    if (c->all != NULL)
        c->all->lprev = s;
    c->all = s;
    c->nopen++;
    return (s);
}

void
h2t__stream_release(struct h2s *s)
{
    struct h2c *c = s->c;

    if (s->open || s->task)
        return;
    if (s->lprev != NULL)
        s->lprev->lnext = s->lnext;
    else
        c->all = s->lnext;
    if (s->lnext != NULL)
        s->lnext->lprev = s->lprev;
    h2t__hdr_free(&s->h);
    h2t__hdr_free(&s->tr);
    free(s->ib);
    free(s->fbuf);
    AZ(pthread_cond_destroy(&s->cond));
    OBJ_FREE(&s);
}

void
h2t__stream_rst(struct h2s *s, uint32_t code)
{
    if (s->rst || s->closed)
        return;
    s->rst = true;
    (void)nghttp2_submit_rst_stream(s->c->ngh, NGHTTP2_FLAG_NONE, s->id, code);
    AZ(pthread_cond_signal(&s->cond));
}

/* The helper's task: a runner from the pool, with the reference taken when it was queued. */
static void
helper_task(struct wrk *wrk, void *priv)
{
    struct h2c *c = priv;

    OBJ_CHECK(c, H2C_MAGIC);
    wrk_buffers_fit(wrk);
    AZ(pthread_mutex_lock(&c->mtx));
    c->helper_queued = false;
    h2t__run(wrk, c);
    AZ(pthread_mutex_unlock(&c->mtx));
    h2t__unref(c);
}

h2t_serve_f *h2t__serve = req_serve;

/* Under c->mtx: one more runner in the pool while streams wait and none is queued yet. */
static void
helper(struct h2c *c)
{
    if (c->helper_queued || c->qhead == NULL || c->dead || c->sp->pool == NULL)
        return;
    c->helper.func = helper_task;
    c->helper.priv = c;
    c->refcnt++;
    c->helper_queued = true;
    if (pool_submit(c->sp->pool, &c->helper, POOL_PRIO_REQ) != 0) {
        /* The queue is full: the runners at work drain ours anyway. */
        c->helper_queued = false;
        c->refcnt--;
    }
}

void
h2t__stream_ready(struct h2s *s)
{
    struct h2c *c = s->c;

    SRG_ASSERT(!s->task);
    s->task = s->queued = true;
    s->next = NULL;
    if (c->qtail != NULL)
        c->qtail->next = s;
    else
        c->qhead = s;
    c->qtail = s;
    c->nactive++;
}

void
h2t__stream_data(struct h2s *s, const uint8_t *data, size_t len)
{
    struct h2c *c = s->c;
    size_t at, k;

    s->in_total += len;
    if (s->h.has_clen && s->in_total > s->h.clen && !s->in_bad) {
        STAT_INC(h2_err_length);
        s->in_bad = true;
        h2t__stream_rst(s, NGHTTP2_PROTOCOL_ERROR);
    }
    if (s->discard || s->in_bad || s->rst) {
        (void)nghttp2_session_consume(c->ngh, s->id, len);
        return;
    }
    if (s->ib == NULL) {
        /* Until the client acknowledges our SETTINGS it may fill the default window. */
        s->ib_cap = SRG_MAX((size_t)c->local_window, (size_t)NGHTTP2_INITIAL_WINDOW_SIZE);
        s->ib = malloc(s->ib_cap);
        AN(s->ib);
    }
    if (s->ib_len + s->ib_handed + len > s->ib_cap) {
        /* More than the window we gave: nghttp2 lets no such DATA through. */
        (void)nghttp2_session_consume(c->ngh, s->id, len);
        h2t__stream_rst(s, NGHTTP2_FLOW_CONTROL_ERROR);
        return;
    }
    while (len > 0) {
        at = (s->ib_head + s->ib_handed + s->ib_len) % s->ib_cap;
        k = SRG_MIN(len, s->ib_cap - at);
        memcpy(s->ib + at, data, k);
        s->ib_len += k;
        data += k;
        len -= k;
    }
    AZ(pthread_cond_signal(&s->cond));
}

static struct h2s *
stream_of(struct req *req)
{
    struct h2s *s = req->tp_priv;

    OBJ_CHECK(s, H2S_MAGIC);
    return (s);
}

/* No more of the response can go: the connection died or the stream was reset. */
static bool
stream_gone(const struct h2s *s)
{
    return (s->c->dead || s->rst || s->reset);
}

/* Under c->mtx: wait for s's signal, on the waiters list when it waits for output. */
static int
wait_for(struct h2s *s, bool output, double deadline)
{
    struct h2c *c = s->c;
    struct timespec ts;
    double t = tim_real() + (deadline - tim_mono());
    int rv;

    if (output) {
        s->next = c->waiters;
        c->waiters = s;
        s->waiting = true;
    }
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
    vio_blocking();
    rv = pthread_cond_timedwait(&s->cond, &c->mtx, &ts);
    if (output) {
        struct h2s **pp = &c->waiters;
        while (*pp != s)
            pp = &(*pp)->next;
        *pp = s->next;
        s->next = NULL;
        s->waiting = false;
    }
    return (rv);
}

/*
 * Under c->mtx: the body pieces handed to s are all in the output buffer
 * (or, when the stream or connection is gone, at least the frames
 * nghttp2 began).  0, or -1 when the stream cannot go on.  A window that
 * stays shut for h2_window_timeout resets the stream, or ends the
 * connection when its own window is the one shut.
 */
static int
out_wait(struct h2s *s)
{
    struct h2c *c = s->c;
    uint64_t seen = s->ocopied;
    double t_wait = tim_mono();

    for (;;) {
        h2t__pump(c);
        if (c->dead)
            return (-1);
        if (s->ocopied == s->ogiven) {
            h2t__settle(c);
            return (c->dead ? -1 : 0);
        }
        if (stream_gone(s) && s->ocopied == s->oframed) {
            h2t__settle(c);
            return (-1);
        }
        if (s->ocopied != seen) {
            seen = s->ocopied;
            t_wait = tim_mono();
        }
        if (c->ob_len > 0 && !c->flusher) {
            (void)h2t__flush_wait(c, t_wait + par.h2_window_timeout);
            continue;
        }
        if (tim_mono() >= t_wait + par.h2_window_timeout && c->ob_len == 0) {
            if (nghttp2_session_get_remote_window_size(c->ngh) <= 0) {
                h2t__kill(c, H2K_STALL, NGHTTP2_FLOW_CONTROL_ERROR);
                return (-1);
            }
            STAT_INC(h2_window_stall);
            h2t__stream_rst(s, NGHTTP2_CANCEL);
            continue; /* until what nghttp2 began is out */
        }
        (void)wait_for(s, true, t_wait + par.h2_window_timeout);
    }
}

/* Fail a write: the client or the connection is gone. */
static int
failed(struct req *req)
{
    req->close = true;
    return (-1);
}

/* Lowercase copy of a field name into the workspace (HTTP/2 names are lowercase). */
static uint8_t *
lower(struct ws *ws, const char *p, size_t n)
{
    uint8_t *d = ws_alloc(ws, n + 1);

    if (d == NULL)
        return (NULL);
    for (size_t i = 0; i < n; i++)
        d[i] = (uint8_t)(p[i] >= 'A' && p[i] <= 'Z' ? p[i] + 32 : p[i]);
    return (d);
}

/* Fields HTTP/2 forbids in a response (RFC 9113 8.2.2), and framing, which is ours. */
static bool
dropped(const char *n, size_t len)
{
    static const char *const names[] = { "connection", "keep-alive", "proxy-connection",
                                         "transfer-encoding", "upgrade", "content-length" };

    for (size_t i = 0; i < ARRAY_LEN(names); i++)
        if (len == strlen(names[i]) && strncasecmp(n, names[i], len) == 0)
            return (true);
    return (false);
}

/*
 * nghttp2 name/value pairs in the workspace for a status and serialised
 * field lines ("Name: value\r\n"), plus content-length when len says one.
 * NULL when the workspace is full.
 */
static nghttp2_nv *
make_nva(struct req *req, unsigned status, const struct txt *blocks, unsigned nblock,
         uint64_t len, size_t *nvlen)
{
    size_t lines = 2, n = 0;
    nghttp2_nv *nva;
    char *num;

    for (unsigned b = 0; b < nblock; b++)
        for (size_t i = 0; i < blocks[b].len; i++)
            lines += blocks[b].b[i] == '\n';
    nva = ws_alloc(req->ws, lines * sizeof *nva);
    num = ws_alloc(req->ws, 32);
    if (nva == NULL || num == NULL)
        return (NULL);
    nva[n++] = (nghttp2_nv){ (uint8_t *)(uintptr_t) ":status", (uint8_t *)num, 7,
                             (size_t)snprintf(num, 4, "%03u", status % 1000),
                             NGHTTP2_NV_FLAG_NONE };
    for (unsigned b = 0; b < nblock; b++) {
        const char *p = blocks[b].b, *e = p + blocks[b].len;
        while (p < e) {
            const char *eol = memchr(p, '\n', (size_t)(e - p)), *colon, *v, *ve;
            if (eol == NULL)
                eol = e;
            colon = memchr(p, ':', (size_t)(eol - p));
            if (colon != NULL && colon > p && !dropped(p, (size_t)(colon - p))) {
                for (v = colon + 1; v < eol && (*v == ' ' || *v == '\t'); v++)
                    continue;
                for (ve = eol; ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t');)
                    ve--;
                uint8_t *name = lower(req->ws, p, (size_t)(colon - p));
                if (name == NULL)
                    return (NULL);
                nva[n++] = (nghttp2_nv){ name, (uint8_t *)(uintptr_t)v, (size_t)(colon - p),
                                         (size_t)(ve - v), NGHTTP2_NV_FLAG_NONE };
            }
            p = eol + 1;
        }
    }
    if (len < TP_LEN_UNKNOWN) {
        nva[n++] = (nghttp2_nv){ (uint8_t *)(uintptr_t) "content-length", (uint8_t *)num + 4, 14,
                                 (size_t)snprintf(num + 4, 28, "%llu", (unsigned long long)len),
                                 NGHTTP2_NV_FLAG_NONE };
    }
    SRG_ASSERT(n <= lines);
    *nvlen = n;
    return (nva);
}

static int
h2t_head(struct req *req, const struct tp_head *h)
{
    struct h2s *s = stream_of(req);
    bool body = h->body && !req->head_only;

    if (s->head_sent)
        return (failed(req)); /* a second head comes only after abort() dropped the first */
    s->nva = make_nva(req, h->status, h->block, h->nblock, h->len, &s->nvlen);
    if (s->nva == NULL) {
        STAT_INC(ws_overflow);
        return (failed(req));
    }
    req->status = h->status;
    req->t_first = tim_mono();
    /* No body: the head ends the stream.  A length we know ends it with its last byte. */
    s->olen = body ? h->len : TP_LEN_NONE;
    if (!body)
        s->eof = true;
    return (0);
}

/* Under c->mtx: submit the held-back head, with a body to come or not. */
static int
submit_head(struct h2s *s)
{
    nghttp2_data_provider prd = { .source.ptr = s, .read_callback = h2t__data_read_cb };
    bool body = !s->eof || s->olen < TP_LEN_UNKNOWN;

    if (s->head_sent)
        return (0);
    if (s->nva == NULL)
        return (-1); /* no head() before: nothing to frame the body with */
    s->head_sent = true;
    if (body && s->olen == 0)
        body = false; /* an empty body: the head ends the stream */
    if (nghttp2_submit_response(s->c->ngh, s->id, s->nva, s->nvlen, body ? &prd : NULL) != 0)
        return (-1);
    return (0);
}

/* Hand pieces to the stream and wait until they are framed. */
static int
send_body(struct req *req, struct h2s *s, const struct iovec *iov, int niov, uint64_t total)
{
    struct h2c *c = s->c;
    int rv = -1;

    AZ(pthread_mutex_lock(&c->mtx));
    if (!stream_gone(s) && submit_head(s) == 0) {
        if (s->olen < TP_LEN_UNKNOWN && s->ogiven + total > s->olen)
            total = s->olen - s->ogiven; /* never past what the head announced */
        s->oiov = iov;
        s->oniov = niov;
        s->ooff = 0;
        s->ogiven += total;
        (void)nghttp2_session_resume_data(c->ngh, s->id);
        rv = out_wait(s);
        s->oiov = NULL;
        s->oniov = 0;
    }
    AZ(pthread_mutex_unlock(&c->mtx));
    if (rv != 0)
        return (failed(req));
    req->resp_bytes += total;
    STAT_ADD(resp_body_bytes, total);
    return (0);
}

static int
h2t_body(struct req *req, struct iovec *iov, int niov)
{
    struct h2s *s = stream_of(req);
    uint64_t total = 0;

    if (s->olen == TP_LEN_NONE && s->eof)
        return (stream_gone(s) ? failed(req) : 0); /* HEAD: no body goes out */
    for (int i = 0; i < niov; i++)
        total += iov[i].iov_len;
    if (total == 0)
        return (0);
    return (send_body(req, s, iov, niov, total));
}

static int
h2t_file(struct req *req, int fd, off_t off, size_t len)
{
    struct h2s *s = stream_of(req);
    struct iovec iov;
    ssize_t n;

    if (s->olen == TP_LEN_NONE && s->eof)
        return (0);
    if (s->fbuf == NULL) {
        s->fbuf = malloc(H2_FILE_ROUND);
        AN(s->fbuf);
    }
    /* No sendfile(2) into frames: read from the page cache, one copy, a round at a time. */
    while (len > 0) {
        n = pread(fd, s->fbuf, SRG_MIN(len, (size_t)H2_FILE_ROUND), off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            /* The file shrank or failed: the head promised a length, so the stream is cut. */
            AZ(pthread_mutex_lock(&s->c->mtx));
            h2t__stream_rst(s, NGHTTP2_INTERNAL_ERROR);
            AZ(pthread_mutex_unlock(&s->c->mtx));
            req->abort = true;
            return (failed(req));
        }
        iov = (struct iovec){ s->fbuf, (size_t)n };
        if (send_body(req, s, &iov, 1, (uint64_t)n) != 0)
            return (-1);
        off += n;
        len -= (size_t)n;
    }
    return (0);
}

static int
h2t_end(struct req *req)
{
    struct h2s *s = stream_of(req);
    struct h2c *c = s->c;
    int rv = -1;

    AZ(pthread_mutex_lock(&c->mtx));
    if (!stream_gone(s) && submit_head(s) == 0) {
        if (!s->eof) {
            s->eof = true;
            (void)nghttp2_session_resume_data(c->ngh, s->id);
        }
        /*
         * Out it goes as the window allows: the last frame needs nothing
         * of ours, so a closed window does not hold the runner.
         */
        h2t__pump(c);
        h2t__settle(c);
        rv = c->dead ? -1 : 0;
    }
    AZ(pthread_mutex_unlock(&c->mtx));
    return (rv == 0 ? 0 : failed(req));
}

static bool
h2t_abort(struct req *req)
{
    struct h2s *s = stream_of(req);
    bool cut;

    AZ(pthread_mutex_lock(&s->c->mtx));
    cut = s->head_sent;
    if (cut) {
        /* The client must not take a short body for a whole one. */
        h2t__stream_rst(s, NGHTTP2_INTERNAL_ERROR);
    } else {
        s->nva = NULL; /* nothing went out: the caller answers anew */
        s->eof = false;
        s->olen = TP_LEN_NONE;
        req->t_first = 0;
    }
    AZ(pthread_mutex_unlock(&s->c->mtx));
    if (cut)
        req->abort = req->close = true;
    return (cut);
}

static bool
h2t_writable(struct req *req)
{
    struct h2s *s = stream_of(req);
    struct h2c *c = s->c;
    bool ok;

    AZ(pthread_mutex_lock(&c->mtx));
    ok = !stream_gone(s) && H2_OB_SIZE - c->ob_len >= 8192 &&
         nghttp2_session_get_stream_remote_window_size(c->ngh, s->id) >= 8192 &&
         nghttp2_session_get_remote_window_size(c->ngh) >= 8192;
    AZ(pthread_mutex_unlock(&c->mtx));
    return (ok);
}

/* Under c->mtx: an interim response, out as far as the socket takes it. */
static int
send_interim(struct req *req, struct h2s *s, unsigned status, const struct txt *fields)
{
    struct h2c *c = s->c;
    nghttp2_nv *nva;
    size_t nvlen;

    if (stream_gone(s) || s->head_sent)
        return (-1);
    nva = make_nva(req, status, fields, fields != NULL ? 1 : 0, TP_LEN_NONE, &nvlen);
    if (nva == NULL ||
        nghttp2_submit_headers(c->ngh, NGHTTP2_FLAG_NONE, s->id, NULL, nva, nvlen, NULL) != 0)
        return (-1);
    h2t__pump(c);
    h2t__settle(c);
    return (c->dead ? -1 : 0);
}

static int
h2t_interim(struct req *req, unsigned status, const struct txt *fields)
{
    struct h2s *s = stream_of(req);
    int rv;

    AZ(pthread_mutex_lock(&s->c->mtx));
    rv = send_interim(req, s, status, fields);
    AZ(pthread_mutex_unlock(&s->c->mtx));
    return (rv == 0 ? 0 : failed(req));
}

/* Under c->mtx: give back the window of the body bytes the runner has taken, and send. */
static void
consume(struct h2s *s, size_t n)
{
    if (n > 0)
        (void)nghttp2_session_consume(s->c->ngh, s->id, n);
    h2t__pump(s->c);
}

static ssize_t
h2t_body_next(struct req *req, const char **data)
{
    struct h2s *s = stream_of(req);
    struct h2c *c = s->c;
    double deadline = tim_mono() + par.timeout_idle;
    ssize_t rv = -1;
    size_t n;

    if (req->body_done)
        return (0);
    AZ(pthread_mutex_lock(&c->mtx));
    if (s->ib_handed > 0) {
        s->ib_head = (s->ib_head + s->ib_handed) % s->ib_cap;
        n = s->ib_handed;
        s->ib_handed = 0;
        consume(s, n);
    }
    if (req->expect_100 && !s->interim_100 && s->ib_len == 0 && !s->in_end) {
        /* The client waits for our go-ahead before it sends the body. */
        s->interim_100 = true;
        (void)send_interim(req, s, 100, NULL);
    }
    for (;;) {
        if (s->ib_len > 0) {
            n = SRG_MIN(s->ib_len, s->ib_cap - s->ib_head);
            *data = s->ib + s->ib_head;
            s->ib_len -= n;
            s->ib_handed = n;
            STAT_ADD(client_body_bytes, n);
            rv = (ssize_t)n;
            break;
        }
        if (s->in_bad) {
            req->body_bad = true;
            break;
        }
        if (s->in_end) {
            req->body_done = true;
            rv = 0;
            break;
        }
        if (stream_gone(s) || tim_mono() >= deadline)
            break;
        h2t__settle(c);
        (void)wait_for(s, false, deadline);
    }
    AZ(pthread_mutex_unlock(&c->mtx));
    if (rv < 0)
        req->close = true;
    return (rv);
}

const struct tp_ops h2t_ops = {
    .name = "HTTP/2.0",
    .head = h2t_head,
    .body = h2t_body,
    .file = h2t_file,
    .end = h2t_end,
    .abort = h2t_abort,
    .writable = h2t_writable,
    .interim = h2t_interim,
    .body_next = h2t_body_next,
};

/* The status a refused request gets, and its counter. */
static unsigned
answer_status(enum h2_verdict v)
{
    switch (v) {
    case H2_ANSWER_400:
        STAT_INC(client_req_400);
        return (400);
    case H2_ANSWER_431:
        STAT_INC(client_req_431);
        STAT_INC(h2_hdr_too_big);
        return (431);
    case H2_ANSWER_417:
        return (417);
    case H2_ANSWER_501:
        STAT_INC(client_req_501);
        return (501);
    case H2_OK:
    case H2_BAD_PSEUDO:
    case H2_BAD_FIELD:
        break;
    }
    SRG_WRONG("not an answered verdict");
}

/* Make the request for s in the worker's workspace and serve it. */
static void
serve(struct wrk *wrk, struct h2s *s)
{
    unsigned nhdr = par.http_max_hdr + H2_EXTRA_HDR;
    struct http_hdr *hdrs;
    struct req *req;

    ws_reset(&wrk->ws);
    req = ws_alloc(&wrk->ws, sizeof *req);
    hdrs = ws_alloc(&wrk->ws, nhdr * sizeof *hdrs);
    AN(req); /* workspace_client's minimum is far above sizeof(struct req) */
    OBJ_INIT(req, REQ_MAGIC);
    req->sp = s->c->sp;
    req->wrk = wrk;
    req->ws = &wrk->ws;
    req->tp = &h2t_ops;
    req->tp_priv = s;
    req->t_start = s->t_start;
    req->t_mono = tim_mono();
    s->req = req;
    STAT_INC(client_req);
    if (hdrs == NULL) {
        http_init(req->http, NULL, 0);
        STAT_INC(ws_overflow);
        STAT_INC(client_resp_500);
        (void)dlv_error(req, 500, NULL, NULL);
        req_log(req);
        return;
    }
    http_init(req->http, hdrs, nhdr);
    req->http->proto = 20;
    if (s->h.verdict != H2_OK) {
        (void)dlv_error(req, answer_status(s->h.verdict), NULL, NULL);
        req_log(req);
        return;
    }
    AZ(h2t__hdr_request(&s->h, req->http)); /* nhdr holds the block's fields and Host */
    if (!s->has_body) {
        req->body = H1_BODY_NONE;
        req->body_done = true;
    } else if (s->h.has_clen) {
        req->body = s->h.clen > 0 ? H1_BODY_LENGTH : H1_BODY_NONE;
        req->clen = req->body_left = s->h.clen;
        req->body_done = s->h.clen == 0;
    } else {
        req->body = H1_BODY_CHUNKED; /* the backend learns the end from the chunks */
    }
    req->expect_100 = s->h.expect_100 && !req->body_done;
    h2t__serve(req);
}

/* Under c->mtx: the runner is done with s. */
static void
finish(struct h2s *s)
{
    struct h2c *c = s->c;
    size_t n;

    if (!stream_gone(s)) {
        if (!s->end_sent && (!s->eof || !s->head_sent)) {
            /* No complete response: a reset says so. */
            h2t__stream_rst(s, NGHTTP2_INTERNAL_ERROR);
        } else if (!s->in_end) {
            /* RFC 9113 8.1: answered before the whole request came; stop the rest of it. */
            h2t__stream_rst(s, NGHTTP2_NO_ERROR);
        }
    }
    /* Whatever of the body nobody will read gives its window back. */
    s->discard = true;
    n = s->ib_len + s->ib_handed;
    s->ib_len = s->ib_handed = 0;
    consume(s, n); /* out go the reset and the window update; nghttp2 may close s */
    s->req = NULL;
    s->nva = NULL;
    s->task = false;
    if (s->zombie) {
        s->zombie = false;
        c->nzombie--;
    }
    c->nactive--;
    h2t__stream_release(s); /* s may be gone from here */
}

void
h2t__run(struct wrk *wrk, struct h2c *c)
{
    struct h2s *s;

    c->nrunners++;
    while (!c->dead && (s = c->qhead) != NULL) {
        c->qhead = s->next;
        if (c->qhead == NULL)
            c->qtail = NULL;
        s->next = NULL;
        s->queued = false;
        helper(c);
        if (!stream_gone(s)) {
            /* A stream reset while it waited (Rapid Reset) costs no request. */
            AZ(pthread_mutex_unlock(&c->mtx));
            serve(wrk, s);
            AZ(pthread_mutex_lock(&c->mtx));
        }
        finish(s);
        h2t__settle(c);
    }
    /* Dead: what is still queued ends here. */
    while ((s = c->qhead) != NULL) {
        c->qhead = s->next;
        if (c->qhead == NULL)
            c->qtail = NULL;
        s->next = NULL;
        s->queued = false;
        s->task = false;
        if (s->zombie) {
            s->zombie = false;
            c->nzombie--;
        }
        c->nactive--;
        h2t__stream_release(s);
    }
    c->nrunners--;
    if (c->nactive == 0)
        h2t__rested(c);
}
