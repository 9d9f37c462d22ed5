/*
 * HTTP/2 streams as requests: their lifetime, their request bodies as the
 * reader receives them, and the runners that serve them (their
 * responses' operations are h2t_ops.c's).
 *
 * A stream whose request is complete (or whose body has begun) joins its
 * connection's queue.  Runners take streams from the queue one after
 * another and serve each with req_serve() on the runner's own worker:
 * the reader that decoded them becomes the first runner once it has
 * parked the connection.  While the queue holds more, another runner is
 * queued in the pool (a "helper") as long as there are CPUs for it, and
 * whenever a runner is about to block (wrk.on_block: a slow backend, a
 * busy object, a closed window), so that a stream that blocks never holds
 * up the others -- any free worker takes the next -- while a burst of
 * cache hits is served back to back without a thread hand-off per stream.
 * At most one helper per connection waits in the pool queue.
 *
 * A stream is freed when both nghttp2 (until on_stream_close()) and its
 * runner (from queued to done) have let it go; both under the connection
 * lock.  The request itself lives in the runner's workspace; its header
 * fields point into the stream's own buffer (h2t_hdr.c).
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
    c->spilled -= s->spill_cap;
    free(s->spill);
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
    h2t__lock(c);
    c->helper_queued = false;
    h2t__run(wrk, c);
    h2t__unlock(c);
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

/*
 * Make the request for s in the worker's workspace and serve it.
 * REQ_RUN_PARKED: it waits without a worker (h2t__park()), and may run
 * anywhere from now on: touch nothing of s.
 */
static enum req_run
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
        return (REQ_RUN_DONE);
    }
    http_init(req->http, hdrs, nhdr);
    req->http->proto = 20;
    if (s->h.verdict != H2_OK) {
        (void)dlv_error(req, answer_status(s->h.verdict), NULL, NULL);
        req_log(req);
        return (REQ_RUN_DONE);
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
    return (h2t__serve(req));
}

/* Under c->mtx: off the queue or out of its runner: no request of s runs any more. */
static struct h2s *
dequeue(struct h2c *c)
{
    struct h2s *s = c->qhead;

    if (s == NULL)
        return (NULL);
    c->qhead = s->next;
    if (c->qhead == NULL)
        c->qtail = NULL;
    s->next = NULL;
    s->queued = false;
    return (s);
}

/* Under c->mtx: s has no request running any more; freed if nghttp2 let go too. */
static void
untask(struct h2s *s)
{
    struct h2c *c = s->c;

    s->task = false;
    if (s->zombie) {
        s->zombie = false;
        c->nzombie--;
    }
    c->nactive--;
    h2t__stream_release(s);
}

/* Under c->mtx: the runner is done with s. */
static void
finish(struct h2s *s)
{
    size_t n;

    if (!h2t__stream_gone(s)) {
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
    h2t__consume(s, n); /* out go the reset and the window update; nghttp2 may close s */
    s->req = NULL;
    s->nva = NULL;
    untask(s); /* s may be gone from here */
}

/*
 * wrk.on_block while a runner serves a stream of c: it is about to block
 * (a backend, a busy object, a window), so the streams queued behind it go
 * to a helper.  With its connection's lock held or not.
 */
static void
runner_blocking(struct wrk *wrk)
{
    struct h2c *c = wrk->on_block_priv;

    OBJ_CHECK(c, H2C_MAGIC);
    if (h2t__held(c)) {
        h2t__release(c);
        helper(c);
        return;
    }
    h2t__lock(c);
    h2t__release(c);
    h2t__settle(c);
    helper(c);
    h2t__unlock(c);
}

void
h2t__run(struct wrk *wrk, struct h2c *c)
{
    struct h2s *s;

    c->nrunners++;
    while (!c->dead && (s = dequeue(c)) != NULL) {
        /*
         * More runners while CPUs are left for them; beyond, only when a
         * runner blocks (runner_blocking()): a burst of cache hits is served
         * back to back, without a thread hand-off per stream.
         */
        if (c->nrunners + (c->helper_queued ? 1 : 0) < h2t__ncpu)
            helper(c);
        if (!h2t__stream_gone(s)) {
            /* A stream reset while it waited (Rapid Reset) costs no request. */
            enum req_run rr;

            h2t__unlock(c);
            wrk->on_block = runner_blocking;
            wrk->on_block_priv = c;
            rr = serve(wrk, s);
            wrk->on_block = NULL;
            wrk->on_block_priv = NULL;
            h2t__lock(c);
            if (rr == REQ_RUN_PARKED)
                continue; /* it goes on elsewhere, and finishes there */
        }
        finish(s);
        if (c->qhead != NULL)
            h2t__hold(c); /* its answer leaves with the next one's */
        else
            h2t__release(c);
        h2t__settle(c);
    }
    h2t__release(c);
    h2t__settle(c);
    /* Dead: what is still queued ends here. */
    while ((s = dequeue(c)) != NULL)
        untask(s);
    c->nrunners--;
    if (c->nactive == 0)
        h2t__rested(c);
}

/*
 * Waiting lists (tp.h): a request coalesced on a busy object lets go of
 * its runner.  The stream keeps the workspace the request lives in (with
 * its fields and state; its header fields are in the stream already) and
 * a reference on the connection, which cannot go while it waits; the
 * runner gets fresh memory and goes on with the connection's other
 * streams.  Resumed on any worker, it finishes there, and that worker
 * then serves what else the connection has queued.
 */
void
h2t__park(struct req *req, bool brief)
{
    struct h2s *s = req->tp_priv;
    struct h2c *c;

    OBJ_CHECK(s, H2S_MAGIC);
    c = s->c;
    OBJ_CHECK(req->wrk, WRK_MAGIC);
    wrk_mem_take(req->wrk, &s->mem, 0, brief);
    req->ws = &s->mem.ws;
    req->wrk = NULL;
    h2t__lock(c);
    c->refcnt++;
    h2t__unlock(c);
}

void
h2t__resume(struct wrk *wrk, struct req *req)
{
    struct h2s *s = req->tp_priv;
    struct h2c *c;
    enum req_run rr;

    OBJ_CHECK(wrk, WRK_MAGIC);
    OBJ_CHECK(s, H2S_MAGIC);
    c = s->c;
    wrk_buffers_fit(wrk);
    wrk_mem_give(wrk, &s->mem);
    req->wrk = wrk;
    req->ws = &wrk->ws;
    wrk->on_block = runner_blocking;
    wrk->on_block_priv = c;
    rr = req_resume(req);
    wrk->on_block = NULL;
    wrk->on_block_priv = NULL;
    if (rr == REQ_RUN_PARKED)
        return; /* waiting again, with the reference it took */
    h2t__lock(c);
    finish(s);
    h2t__settle(c);
    h2t__run(wrk, c);
    h2t__unlock(c);
    h2t__unref(c);
}

void
h2t__drop(struct req *req)
{
    struct h2s *s = req->tp_priv;
    struct wrk_mem mem;
    struct h2c *c;

    OBJ_CHECK(s, H2S_MAGIC);
    c = s->c;
    mem = s->mem; /* the request lives there: freed after the stream is done with it */
    h2t__lock(c);
    finish(s);
    h2t__unlock(c);
    wrk_mem_free(&mem);
    h2t__unref(c);
}
