/*
 * The HTTP/1 transport's request body: a stream of decoded pieces.
 *
 * Bytes that arrived with the head are used first; later reads refill
 * wrk->rx after the head, whose bytes must stay put because req->http
 * points into them.  Whatever follows the body in the buffer is the next
 * pipelined request, left at rx_pos for the session loop.
 */
#include "config.h"

#include <errno.h>

#include "surogat/defs.h"
#include "surogat/par.h"
#include "surogat/req.h"
#include "surogat/sess.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/wrk.h"

#include "h1t_priv.h"

static const char continue_100[] = "HTTP/1.1 100 Continue\r\n\r\n";

/* Refill the buffer after the head.  0 ok, -1 client gone or too slow. */
static int
refill(struct req *req)
{
    struct wrk *wrk = req->wrk;
    ssize_t n;

    SRG_ASSERT(req->rx_pos == req->rx_len);
    if (req->expect_100) {
        /* The client waits for our go-ahead before it sends the body. */
        req->expect_100 = false;
        if (sess_write(req->sp, continue_100, sizeof continue_100 - 1,
                      req_send_deadline(req)) != 0)
            return (-1);
    }
    req->rx_pos = req->rx_len = req->rx_head;
    n = sess_read(req->sp, wrk->rx + req->rx_head, wrk->rx_size - req->rx_head,
                 tim_mono() + par.timeout_idle);
    if (n <= 0)
        return (-1);
    req->rx_len += (size_t)n;
    return (0);
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
