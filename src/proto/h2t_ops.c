/*
 * The HTTP/2 transport's operations (tp.h) for a stream's request: its
 * response -- a head held back until the body or the end, body pieces
 * framed straight into the connection's output buffer -- and its request
 * body, read from the ring the reader fills.
 *
 * Body pieces are never copied but into the output buffer: body() hands
 * them to the stream and waits, its worker blocked but no other, until
 * they are all framed (h2t_io.c), within h2_window_timeout of no progress.
 * One exception keeps writable()'s word: after it said yes, the core
 * counts on the next write not waiting for the client (a miss's fetch
 * goes on at the backend's pace), so what of that write the windows do
 * not take is copied aside, as a socket buffer would hold it, and the
 * stream is not writable until it is out; the next write waits for it.
 * Every operation runs on the stream's runner and takes the connection's
 * lock for the time it touches nghttp2 or the stream, never while it
 * waits.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "surogat/defs.h"
#include "surogat/par.h"
#include "surogat/req.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/tp.h"
#include "surogat/vio.h"
#include "surogat/ws.h"

#include "h2t_priv.h"

/* file(): bytes read per round, a whole number of DATA frames. */
#define H2_FILE_ROUND (4 * H2_DATA_MAX)

static struct h2s *
stream_of(struct req *req)
{
    struct h2s *s = req->tp_priv;

    OBJ_CHECK(s, H2S_MAGIC);
    return (s);
}

bool
h2t__stream_gone(const struct h2s *s)
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
 * Under c->mtx: copy the body pieces s has not framed yet aside, into its
 * spill buffer, so that their caller may go.  false when the connection's
 * streams keep H2_SPILL_MAX already.
 */
static bool
spill(struct h2s *s)
{
    struct h2c *c = s->c;
    size_t left = (size_t)(s->ogiven - s->ocopied);
    char *p;

    SRG_ASSERT(s->oiov != &s->spill_iov);
    if (left > s->spill_cap) {
        if (c->spilled - s->spill_cap + left > H2_SPILL_MAX)
            return (false);
        p = realloc(s->spill, left);
        AN(p);
        c->spilled += left - s->spill_cap;
        s->spill = p;
        s->spill_cap = left;
    }
    h2t__take_body(s, s->spill, left);
    s->spill_iov = (struct iovec){ s->spill, left };
    s->oiov = &s->spill_iov;
    s->oniov = 1;
    s->ooff = 0;
    return (true);
}

/*
 * Under c->mtx: the body pieces handed to s are all in the output buffer
 * (or, when the stream or connection is gone, at least the frames
 * nghttp2 began), or, with may_spill, in its spill buffer.  0, or -1 when
 * the stream cannot go on.  A window that stays shut for
 * h2_window_timeout resets the stream, or ends the connection when its
 * own window is the one shut.
 */
static int
out_wait(struct h2s *s, bool may_spill)
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
        if (h2t__stream_gone(s) && s->ocopied == s->oframed) {
            h2t__settle(c);
            return (-1);
        }
        if (s->ocopied != seen) {
            seen = s->ocopied;
            t_wait = tim_mono();
        }
        if (may_spill && spill(s)) {
            h2t__settle(c);
            return (c->dead ? -1 : 0);
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

/* Under c->mtx: what an earlier write left in the spill buffer is out.  0 or -1. */
static int
spill_wait(struct h2s *s)
{
    if (s->ocopied == s->ogiven)
        return (0);
    SRG_ASSERT(s->oiov == &s->spill_iov);
    return (out_wait(s, false));
}

/* Hand pieces to the stream and wait until they are framed (or spilled, when promised). */
static int
send_body(struct req *req, struct h2s *s, const struct iovec *iov, int niov, uint64_t total)
{
    struct h2c *c = s->c;
    bool promised = s->promised;
    int rv = -1;

    s->promised = false;
    h2t__lock(c);
    if (!h2t__stream_gone(s) && submit_head(s) == 0 && spill_wait(s) == 0) {
        if (s->olen < TP_LEN_UNKNOWN && s->ogiven + total > s->olen)
            total = s->olen - s->ogiven; /* never past what the head announced */
        s->oiov = iov;
        s->oniov = niov;
        s->ooff = 0;
        s->ogiven += total;
        (void)nghttp2_session_resume_data(c->ngh, s->id);
        rv = out_wait(s, promised);
        if (rv != 0 || s->ocopied == s->ogiven) {
            s->oiov = NULL;
            s->oniov = 0;
        }
    }
    h2t__unlock(c);
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
        return (h2t__stream_gone(s) ? failed(req) : 0); /* HEAD: no body goes out */
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
            h2t__lock(s->c);
            h2t__stream_rst(s, NGHTTP2_INTERNAL_ERROR);
            h2t__unlock(s->c);
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

    s->promised = false;
    h2t__lock(c);
    if (!h2t__stream_gone(s) && submit_head(s) == 0 && spill_wait(s) == 0) {
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
    h2t__unlock(c);
    return (rv == 0 ? 0 : failed(req));
}

static bool
h2t_abort(struct req *req)
{
    struct h2s *s = stream_of(req);
    bool cut;

    h2t__lock(s->c);
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
    h2t__unlock(s->c);
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

    h2t__lock(c);
    ok = !h2t__stream_gone(s) && s->ocopied == s->ogiven && H2_OB_SIZE - c->ob_len >= 8192 &&
         nghttp2_session_get_stream_remote_window_size(c->ngh, s->id) >= 8192 &&
         nghttp2_session_get_remote_window_size(c->ngh) >= 8192 &&
         c->spilled - s->spill_cap + SRG_MAX(s->spill_cap, (size_t)H2_SPILL_PIECE) <= H2_SPILL_MAX;
    s->promised = ok;
    h2t__unlock(c);
    return (ok);
}

/* Under c->mtx: an interim response, out as far as the socket takes it. */
static int
send_interim(struct req *req, struct h2s *s, unsigned status, const struct txt *fields)
{
    struct h2c *c = s->c;
    nghttp2_nv *nva;
    size_t nvlen;

    if (h2t__stream_gone(s) || s->head_sent)
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

    h2t__lock(s->c);
    rv = send_interim(req, s, status, fields);
    h2t__unlock(s->c);
    return (rv == 0 ? 0 : failed(req));
}

void
h2t__consume(struct h2s *s, size_t n)
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
    h2t__lock(c);
    if (s->ib_handed > 0) {
        s->ib_head = (s->ib_head + s->ib_handed) % s->ib_cap;
        n = s->ib_handed;
        s->ib_handed = 0;
        h2t__consume(s, n);
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
        if (h2t__stream_gone(s) || tim_mono() >= deadline)
            break;
        h2t__release(c); /* what this runner held back goes before it waits */
        h2t__settle(c);
        (void)wait_for(s, false, deadline);
    }
    h2t__unlock(c);
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
    /* .tunnel: none through a stream (tp.h); a policy's pipe is fetched as a pass. */
    .park = h2t__park,
    .resume = h2t__resume,
    .drop = h2t__drop,
};
