/*
 * The HTTP/1 transport's tunnel (tp_ops.tunnel): after a pipe's request
 * head, or an upgrade the backend accepted with a 101, every byte both
 * ways, uninterpreted, until a side closes, fails, or nothing moves for
 * the tunnel's idle time.  Only a transport can do this: the bytes are its
 * connection's, TLS records included.  Runs on the request's worker, which
 * it holds for the tunnel's life; a daemon that stops closes its tunnels.
 *
 * And what makes a request an upgrade in HTTP/1 (RFC 9110 section 7.8),
 * so that the core knows one without parsing Connection.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>

#include "surogat/bcp.h"
#include "surogat/defs.h"
#include "surogat/http.h"
#include "surogat/par.h"
#include "surogat/req.h"
#include "surogat/sess.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/tp.h"
#include "surogat/wrk.h"

#include "h1t_priv.h"

bool
h1t_is_upgrade(const struct http *hp)
{
    /*
     * A server must ignore an Upgrade in HTTP/1.0, and one not listed in
     * Connection is not meant for us (RFC 9110 section 7.8).  h2c would
     * switch the backend connection to HTTP/2, which we do not read.
     */
    return (hp->proto == 11 && http_find(hp, "Upgrade") != NULL &&
            http_has_token(hp, "Connection", "upgrade") && !http_has_token(hp, "Upgrade", "h2c"));
}

/* The status of a response whose first bytes are p, for the log; 0 if not one. */
static unsigned
peek_status(const char *p, size_t len)
{
    unsigned st = 0;

    if (len < 12 || memcmp(p, "HTTP/1.", 7) != 0 || p[8] != ' ')
        return (0);
    for (int i = 9; i < 12; i++) {
        if (p[i] < '0' || p[i] > '9')
            return (0);
        st = st * 10 + (unsigned)(p[i] - '0');
    }
    return (st);
}

/* The backend's 101 and the bytes it sent past it, to the client in one write. */
static int
send_switch(struct req *req, const struct tp_tunnel *t)
{
    const struct tp_head *h = t->head;
    const char *reason = h->reason.len > 0 ? h->reason.b : http_reason(h->status);
    struct iovec iov[TP_HEAD_BLOCKS + 5];
    char line[32];
    int n = 0;

    iov[n++] =
        (struct iovec){ line, (size_t)snprintf(line, sizeof line, "HTTP/1.1 %u ", h->status) };
    iov[n++] = (struct iovec){ (void *)(uintptr_t)reason,
                               h->reason.len > 0 ? h->reason.len : strlen(reason) };
    iov[n++] = (struct iovec){ (void *)(uintptr_t) "\r\n", 2 };
    for (unsigned i = 0; i < h->nblock; i++)
        if (h->block[i].len > 0)
            iov[n++] = (struct iovec){ (void *)(uintptr_t)h->block[i].b, h->block[i].len };
    iov[n++] = (struct iovec){ (void *)(uintptr_t) "Connection: upgrade\r\n\r\n", 23 };
    if (t->early.len > 0)
        iov[n++] = (struct iovec){ (void *)(uintptr_t)t->early.b, t->early.len };
    req->status = h->status;
    req->t_first = tim_mono();
    if (sess_writev(req->sp, iov, n, tim_mono() + par.send_timeout) != 0)
        return (-1);
    req->resp_bytes += t->early.len;
    STAT_ADD(tunnel_bytes, t->early.len);
    return (0);
}

/*
 * How often an idle tunnel looks whether the daemon is stopping: a
 * tunnel never finishes by itself, so one waited for would only hold the
 * shutdown for shutdown_timeout.  Its client (a WebSocket's) reconnects.
 */
#define TUNNEL_TICK 0.5

/* Copy both ways until a side closes, fails, or idle seconds pass with nothing to copy. */
static enum tp_tunnel_end
shuffle(struct req *req, struct bcp_conn *conn, double idle)
{
    char *buf = req->wrk->be;
    size_t size = req->wrk->be_size;
    struct pollfd pfd[2] = { { .fd = req->sp->fd, .events = POLLIN },
                             { .fd = conn->fd, .events = POLLIN } };
    double last = tim_mono(), left;
    ssize_t n;

    for (;;) {
        bool held = sess_pending(req->sp); /* decrypted TLS bytes poll(2) cannot see */
        bool bheld = bcp_pending(conn);
        int rv;
        if (sess_draining())
            return (TP_TUN_CLOSED);
        left = last + idle - tim_mono();
        if (left <= 0)
            return (TP_TUN_IDLE);
        rv = poll(pfd, 2, held || bheld ? 0 : (int)(SRG_MIN(left, TUNNEL_TICK) * 1e3) + 1);
        if (rv < 0 && errno == EINTR)
            continue;
        if (rv < 0)
            return (TP_TUN_CLOSED);
        if (held || (pfd[0].revents & (POLLIN | POLLHUP | POLLERR))) {
            n = sess_read_nb(req->sp, buf, size);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
                return (TP_TUN_CLOSED);
            if (n > 0) {
                if (bcp_write(conn, buf, (size_t)n, tim_mono() + idle) != 0)
                    return (TP_TUN_CLOSED);
                STAT_ADD(tunnel_bytes, n);
                last = tim_mono();
            }
        }
        if (bheld || (pfd[1].revents & (POLLIN | POLLHUP | POLLERR))) {
            n = bcp_read_nb(conn, buf, size);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
                return (TP_TUN_CLOSED);
            if (n > 0) {
                if (req->t_first == 0) {
                    req->t_first = tim_mono();
                    req->status = peek_status(buf, (size_t)n);
                }
                if (sess_write(req->sp, buf, (size_t)n, tim_mono() + par.send_timeout) != 0)
                    return (TP_TUN_CLOSED);
                req->resp_bytes += (uint64_t)n;
                STAT_ADD(tunnel_bytes, n);
                last = tim_mono();
            }
        }
    }
}

enum tp_tunnel_end
h1t_tunnel(struct req *req, struct bcp_conn *conn, const struct tp_tunnel *t)
{
    size_t held;

    /* From here on the connection carries no HTTP of ours: whatever happens, it closes. */
    req->close = true;
    if (t->head != NULL && send_switch(req, t) != 0)
        return (TP_TUN_CLOSED);
    /* What the client sent past its request already: it went through raw, body or not. */
    held = req->rx_len - req->rx_pos;
    if (held > 0) {
        if (bcp_write(conn, req->wrk->rx + req->rx_pos, held, tim_mono() + t->idle) != 0)
            return (TP_TUN_CLOSED);
        STAT_ADD(tunnel_bytes, held);
    }
    req->rx_pos = req->rx_len;
    req->body_done = true;
    return (shuffle(req, conn, t->idle));
}
