/*
 * The HTTP/1 transport's request body: a stream of decoded pieces.
 *
 * Bytes that arrived before the request was dispatched are used first:
 * the session loop has buffered the whole body after the head when it is
 * at most req_body_buffer bytes, else that much of it (h1t_sess.c).  Later
 * reads refill wrk->rx after the head, whose bytes must stay put because
 * req->http points into them; each must come by h1t_body_deadline(), or
 * the client is answered 408 -- a worker streams this body, so a client
 * slower than req_body_min_rate must not keep it.  Whatever follows the
 * body in the buffer is the next pipelined request, left at rx_pos for
 * the session loop.
 */
#include "config.h"

#include <errno.h>

#include "surogat/defs.h"
#include "surogat/dlv.h"
#include "surogat/par.h"
#include "surogat/req.h"
#include "surogat/sess.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/wrk.h"

#include "h1t_priv.h"

static const char continue_100[] = "HTTP/1.1 100 Continue\r\n\r\n";

int
h1t_continue(struct req *req)
{
    if (!req->expect_100)
        return (0);
    /* The client waits for our go-ahead before it sends the body. */
    req->expect_100 = false;
    req->sp->sent_100 = true;
    return (sess_write(req->sp, continue_100, sizeof continue_100 - 1, req_send_deadline(req)));
}

double
h1t_body_deadline(double t_body, uint64_t got)
{
    double d = tim_mono() + par.timeout_idle, r;

    if (par.req_body_min_rate > 0) {
        r = t_body + par.timeout_req + (double)got / (double)par.req_body_min_rate;
        if (r < d)
            d = r;
    }
    return (d);
}

/*
 * The body came too slowly: answer 408 unless a response is under way
 * (then the client only sees the connection close).
 */
static void
too_slow(struct req *req)
{
    req->close = true;
    if (req->status != 0 || req->t_first != 0)
        return;
    STAT_INC(client_req_408);
    (void)dlv_error(req, 408, NULL, NULL);
}

/* Refill the buffer after the head.  0 ok, -1 client gone or too slow. */
static int
refill(struct req *req)
{
    struct h1t_in *in = h1t_in_of(req);
    struct wrk *wrk = req->wrk;
    ssize_t n;

    SRG_ASSERT(req->rx_pos == req->rx_len);
    if (h1t_continue(req) != 0)
        return (-1);
    req->rx_pos = req->rx_len = req->rx_head;
    n = sess_read(req->sp, wrk->rx + req->rx_head, wrk->rx_size - req->rx_head,
                 h1t_body_deadline(in->t_body, in->body_raw));
    if (n > 0) {
        req->rx_len += (size_t)n;
        in->body_raw += (uint64_t)n;
        return (0);
    }
    if (n < 0 && errno == ETIMEDOUT)
        too_slow(req);
    return (-1);
}

static ssize_t
fail(struct req *req)
{
    req->close = true;
    return (-1);
}

ssize_t
h1t_body_next(struct req *req, const char **data)
{
    struct wrk *wrk = req->wrk;
    enum h1_chunk_status cs;
    size_t used, len, avail;
    uint64_t n;

    OBJ_CHECK(req, REQ_MAGIC);
    if (req->body_done)
        return (0);
    switch (req->body) {
    case H1_BODY_NONE:
        req->body_done = true;
        return (0);
    case H1_BODY_LENGTH:
        if (req->body_left == 0) {
            req->body_done = true;
            return (0);
        }
        if (req->rx_pos == req->rx_len && refill(req) != 0)
            return (fail(req));
        n = req->rx_len - req->rx_pos;
        if (n > req->body_left)
            n = req->body_left;
        *data = wrk->rx + req->rx_pos;
        req->rx_pos += (size_t)n;
        req->body_left -= n;
        STAT_ADD(client_body_bytes, n);
        return ((ssize_t)n);
    case H1_BODY_CHUNKED:
        for (;;) {
            avail = req->rx_len - req->rx_pos;
            if (avail == 0) {
                if (refill(req) != 0)
                    return (fail(req));
                continue;
            }
            cs = h1_chunk_decode(&req->chunk, wrk->rx + req->rx_pos, avail, &used, data, &len);
            req->rx_pos += used;
            switch (cs) {
            case H1_CHUNK_DATA:
                STAT_ADD(client_body_bytes, len);
                return ((ssize_t)len);
            case H1_CHUNK_MORE:
                continue;
            case H1_CHUNK_DONE:
                req->body_done = true;
                return (0);
            case H1_CHUNK_ERROR:
                req->body_bad = true;
                return (fail(req));
            }
        }
    case H1_BODY_EOF:
    case H1_BODY_E_AMBIGUOUS:
    case H1_BODY_E_CODING:
        break;
    }
    SRG_WRONG("request body framing");
}
