/*
 * HTTP/2 input: nghttp2's receive callbacks, which the reader's
 * nghttp2_session_mem_recv() calls under the connection's lock.  They
 * make streams, check and keep each request's fields (h2t_hdr.c) and body
 * bytes (h2t_stream.c), queue a stream once its request may start, and
 * enforce the limits that need the frames themselves: resets and control
 * frames per second (token buckets), a header block's bytes and frames,
 * streams under way.  A connection condemned here (h2t__doom()) says
 * GOAWAY when the reader next sends; nothing here writes the socket.
 */
#include "config.h"

#include "surogat/defs.h"
#include "surogat/par.h"
#include "surogat/stat.h"
#include "surogat/tim.h"

#include "h2t_priv.h"

/* ---- limits ---- */

/* Take a token from a bucket refilled at `limit` a second; false when it is empty. */
static bool
rate_take(struct h2_rate *r, double limit, double now)
{
    if (r->t == 0) {
        r->tokens = limit;
        r->t = now;
    }
    r->tokens += (now - r->t) * limit;
    if (r->tokens > limit)
        r->tokens = limit;
    r->t = now;
    if (r->tokens < 1)
        return (false);
    r->tokens -= 1;
    return (true);
}

void
h2t__doom(struct h2c *c, enum h2_kill why, uint32_t code)
{
    if (c->kill != H2K_NONE || c->dead)
        return;
    c->kill = why;
    switch (why) {
    case H2K_RESET:
        STAT_INC(h2_flood_reset);
        break;
    case H2K_FLOOD:
        STAT_INC(h2_flood_frames);
        break;
    case H2K_CONTINUATION:
        STAT_INC(h2_flood_continuation);
        break;
    case H2K_STALL:
        STAT_INC(h2_conn_stall);
        break;
    case H2K_FRAME:
        STAT_INC(h2_err_frame);
        break;
    case H2K_NONE:
    case H2K_IO:
        break;
    }
    if (why != H2K_IO)
        (void)nghttp2_session_terminate_session(c->ngh, code);
}

/* ---- nghttp2's callbacks, all under c->mtx ---- */

static int
on_begin_frame(nghttp2_session *ngh, const nghttp2_frame_hd *hd, void *priv)
{
    struct h2c *c = priv;
    bool flood = false;

    (void)ngh;
    switch (hd->type) {
    case NGHTTP2_HEADERS:
        c->hb_stream = hd->stream_id;
        c->hb_bytes = hd->length;
        c->hb_frames = 1;
        flood = hd->length == 0;
        break;
    case NGHTTP2_CONTINUATION:
        c->hb_bytes += hd->length;
        c->hb_frames++;
        flood = hd->length == 0;
        break;
    case NGHTTP2_DATA:
        flood = hd->length == 0 && !(hd->flags & NGHTTP2_FLAG_END_STREAM);
        break;
    case NGHTTP2_RST_STREAM:
        if (!rate_take(&c->rst_rate, par.h2_rapid_reset_limit, c->now)) {
            h2t__doom(c, H2K_RESET, NGHTTP2_ENHANCE_YOUR_CALM);
            return (NGHTTP2_ERR_CALLBACK_FAILURE);
        }
        break;
    case NGHTTP2_GOAWAY:
        break;
    default:
        /* SETTINGS, PING, PRIORITY, WINDOW_UPDATE, extensions: work for nothing asked. */
        flood = true;
        break;
    }
    if (hd->type == NGHTTP2_HEADERS || hd->type == NGHTTP2_CONTINUATION) {
        /* CONTINUATION flood (CVE-2024-27316): a block must end, and small. */
        if (c->hb_bytes > par.http_req_size || c->hb_frames > H2_HB_FRAMES) {
            h2t__doom(c, H2K_CONTINUATION, NGHTTP2_ENHANCE_YOUR_CALM);
            return (NGHTTP2_ERR_CALLBACK_FAILURE);
        }
    }
    if (flood && !rate_take(&c->frame_rate, par.h2_frame_flood_limit, c->now)) {
        h2t__doom(c, H2K_FLOOD, NGHTTP2_ENHANCE_YOUR_CALM);
        return (NGHTTP2_ERR_CALLBACK_FAILURE);
    }
    return (0);
}

static struct h2s *
stream_get(nghttp2_session *ngh, int32_t id)
{
    struct h2s *s = nghttp2_session_get_stream_user_data(ngh, id);

    if (s != NULL)
        OBJ_CHECK(s, H2S_MAGIC);
    return (s);
}

static int
on_begin_headers(nghttp2_session *ngh, const nghttp2_frame *frame, void *priv)
{
    struct h2c *c = priv;
    struct h2s *s;

    if (frame->hd.type != NGHTTP2_HEADERS)
        return (0);
    if (frame->headers.cat != NGHTTP2_HCAT_REQUEST) {
        /* A second block on an open stream: its trailers, checked apart. */
        s = stream_get(ngh, frame->hd.stream_id);
        if (s != NULL) {
            h2t__hdr_free(&s->tr);
            s->tr.trailers = true;
            s->in_trailers = true;
        }
        return (0);
    }
    STAT_INC(h2_streams);
    if (c->nopen + c->nzombie >= par.h2_max_concurrent_streams) {
        /* Counting streams reset but still running here: what nghttp2 cannot see. */
        STAT_INC(h2_refused);
        (void)nghttp2_submit_rst_stream(ngh, NGHTTP2_FLAG_NONE, frame->hd.stream_id,
                                        NGHTTP2_REFUSED_STREAM);
        return (NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE);
    }
    s = h2t__stream_new(c, frame->hd.stream_id);
    AZ(nghttp2_session_set_stream_user_data(ngh, frame->hd.stream_id, s));
    return (0);
}

/* Count a malformed request and reset its stream (RFC 9113 8.1.1). */
static void
malformed(struct h2s *s, const struct h2_hdrs *h)
{
    if (h->verdict == H2_BAD_PSEUDO)
        STAT_INC(h2_err_pseudo);
    else
        STAT_INC(h2_err_field);
    h2t__stream_rst(s, NGHTTP2_PROTOCOL_ERROR);
}

static int
on_header(nghttp2_session *ngh, const nghttp2_frame *frame, const uint8_t *name, size_t nl,
          const uint8_t *value, size_t vl, uint8_t flags, void *priv)
{
    struct h2s *s = stream_get(ngh, frame->hd.stream_id);
    struct h2_hdrs *h;

    (void)flags;
    (void)priv;
    if (s == NULL || s->rst)
        return (0);
    h = s->in_trailers ? &s->tr : &s->h;
    h2t__hdr_field(h, name, nl, value, vl);
    if (h->verdict >= H2_BAD_PSEUDO) {
        malformed(s, h);
        /* The rest of the block is decoded for HPACK's sake, and dropped. */
        return (NGHTTP2_ERR_TEMPORAL_CALLBACK_FAILURE);
    }
    return (0);
}

/* The request's body has ended (END_STREAM): check it against content-length. */
static void
body_end(struct h2s *s)
{
    s->in_end = true;
    if (s->h.has_clen && s->in_total != s->h.clen && !s->in_bad) {
        STAT_INC(h2_err_length);
        s->in_bad = true;
        h2t__stream_rst(s, NGHTTP2_PROTOCOL_ERROR);
    }
    AZ(pthread_cond_signal(&s->cond));
}

/* A body of unknown length began or ended: now we know how to frame it. */
static void
await_done(struct h2s *s)
{
    if (!s->await_data)
        return;
    s->await_data = false;
    if (s->in_end && s->in_total == 0)
        s->has_body = false; /* HEADERS, then an empty DATA that ends: no body at all */
    h2t__stream_ready(s);
}

static void
request_head(struct h2c *c, struct h2s *s, uint8_t flags)
{
    (void)c;
    h2t__hdr_end(&s->h);
    if (s->h.verdict >= H2_BAD_PSEUDO) {
        malformed(s, &s->h);
        return;
    }
    s->t_start = tim_real();
    s->has_body = !(flags & NGHTTP2_FLAG_END_STREAM);
    if (!s->has_body) {
        body_end(s); /* "content-length: 5" with no body is malformed too */
        if (s->in_bad)
            return;
    }
    if (s->h.verdict != H2_OK)
        s->discard = true; /* answered without looking at the body */
    if (s->has_body && !s->h.has_clen && !s->h.expect_100 && s->h.verdict == H2_OK) {
        s->await_data = true;
        return;
    }
    h2t__stream_ready(s);
}

static int
on_frame_recv(nghttp2_session *ngh, const nghttp2_frame *frame, void *priv)
{
    struct h2c *c = priv;
    struct h2s *s;

    switch (frame->hd.type) {
    case NGHTTP2_HEADERS:
        c->hb_stream = 0;
        s = stream_get(ngh, frame->hd.stream_id);
        if (s == NULL || s->rst)
            break;
        if (frame->headers.cat == NGHTTP2_HCAT_REQUEST) {
            request_head(c, s, frame->hd.flags);
        } else if (!(frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
            /* Trailers end the stream (RFC 9113 8.1): any other block is malformed. */
            s->tr.verdict = H2_BAD_PSEUDO;
            malformed(s, &s->tr);
        } else {
            body_end(s);
            await_done(s);
        }
        break;
    case NGHTTP2_DATA:
        s = stream_get(ngh, frame->hd.stream_id);
        if (s == NULL)
            break;
        if (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)
            body_end(s);
        if (s->in_total > 0 || s->in_end)
            await_done(s);
        break;
    case NGHTTP2_RST_STREAM:
        STAT_INC(h2_rst_received);
        break;
    case NGHTTP2_GOAWAY:
        STAT_INC(h2_goaway_received);
        break;
    default:
        break;
    }
    return (0);
}

static int
on_data_chunk(nghttp2_session *ngh, uint8_t flags, int32_t id, const uint8_t *data, size_t len,
              void *priv)
{
    struct h2s *s = stream_get(ngh, id);

    (void)flags;
    (void)priv;
    if (s == NULL) {
        (void)nghttp2_session_consume(ngh, id, len);
        return (0);
    }
    h2t__stream_data(s, data, len);
    return (0);
}

static int
on_stream_close(nghttp2_session *ngh, int32_t id, uint32_t code, void *priv)
{
    struct h2s *s = stream_get(ngh, id);
    struct h2c *c = priv;

    if (s == NULL)
        return (0);
    s->closed = true;
    s->reset = code != NGHTTP2_NO_ERROR || !s->end_sent;
    c->nopen--;
    if (s->reset && s->task) {
        s->zombie = true; /* its request goes on: it still counts */
        c->nzombie++;
    }
    s->open = false;
    (void)nghttp2_session_set_stream_user_data(ngh, id, NULL);
    AZ(pthread_cond_broadcast(&s->cond));
    h2t__stream_release(s);
    return (0);
}

static int
on_frame_send(nghttp2_session *ngh, const nghttp2_frame *frame, void *priv)
{
    struct h2c *c = priv;

    if ((frame->hd.type == NGHTTP2_HEADERS || frame->hd.type == NGHTTP2_DATA) &&
        (frame->hd.flags & NGHTTP2_FLAG_END_STREAM)) {
        struct h2s *s = stream_get(ngh, frame->hd.stream_id);
        if (s != NULL)
            s->end_sent = true;
    }
    if (frame->hd.type == NGHTTP2_RST_STREAM) {
        STAT_INC(h2_rst_sent);
    } else if (frame->hd.type == NGHTTP2_GOAWAY) {
        STAT_INC(h2_goaway_sent);
        /* One nghttp2 sent of its own accord: an error of the client's in the frame layer. */
        if (frame->goaway.error_code != NGHTTP2_NO_ERROR && c->kill == H2K_NONE) {
            c->kill = H2K_FRAME;
            STAT_INC(h2_err_frame);
        }
    }
    return (0);
}

void
h2t__recv_callbacks(nghttp2_session_callbacks *cb)
{
    nghttp2_session_callbacks_set_on_begin_frame_callback(cb, on_begin_frame);
    nghttp2_session_callbacks_set_on_begin_headers_callback(cb, on_begin_headers);
    nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
    nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame_recv);
    nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data_chunk);
    nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
    nghttp2_session_callbacks_set_on_frame_send_callback(cb, on_frame_send);
}
