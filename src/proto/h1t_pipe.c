/*
 * The HTTP/1 transport's tunnel: after a pipe's request head went to the
 * backend, the bytes the client sent after its head already, then every
 * byte both ways, uninterpreted, until a side closes, fails, or nothing
 * moves for pipe_timeout.  Only a transport can do this: the bytes are
 * its connection's, TLS records included.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <string.h>

#include "surogat/bcp.h"
#include "surogat/defs.h"
#include "surogat/par.h"
#include "surogat/req.h"
#include "surogat/sess.h"
#include "surogat/tim.h"
#include "surogat/wrk.h"

#include "h1t_priv.h"

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

/* Copy both ways until a side closes, fails, or pipe_timeout passes with nothing to copy. */
static void
shuffle(struct req *req, struct bcp_conn *conn)
{
    char *buf = req->wrk->be;
    size_t size = req->wrk->be_size;
    struct pollfd pfd[2] = { { .fd = req->sp->fd, .events = POLLIN },
                             { .fd = conn->fd, .events = POLLIN } };
    ssize_t n;

    for (;;) {
        bool held = sess_pending(req->sp); /* decrypted TLS bytes poll(2) cannot see */
        bool bheld = bcp_pending(conn);
        int rv = poll(pfd, 2, held || bheld ? 0 : (int)(par.pipe_timeout * 1e3));
        if (rv < 0 && errno == EINTR)
            continue;
        if (rv < 0 || (rv == 0 && !held && !bheld))
            return;
        if (held || (pfd[0].revents & (POLLIN | POLLHUP | POLLERR))) {
            n = sess_read_nb(req->sp, buf, size);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
                return;
            if (n > 0 && bcp_write(conn, buf, (size_t)n, tim_mono() + par.pipe_timeout) != 0)
                return;
        }
        if (bheld || (pfd[1].revents & (POLLIN | POLLHUP | POLLERR))) {
            n = bcp_read_nb(conn, buf, size);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
                return;
            if (n > 0) {
                if (req->t_first == 0) {
                    req->t_first = tim_mono();
                    req->status = peek_status(buf, (size_t)n);
                }
                if (sess_write(req->sp, buf, (size_t)n, tim_mono() + par.send_timeout) != 0)
                    return;
                req->resp_bytes += (uint64_t)n;
            }
        }
    }
}

int
h1t_tunnel(struct req *req, struct bcp_conn *conn)
{
    size_t held = req->rx_len - req->rx_pos;

    /* Whatever the client sent after its head already: it went through raw, body or not. */
    if (held > 0 && bcp_write(conn, req->wrk->rx + req->rx_pos, held,
                              tim_mono() + par.pipe_timeout) != 0)
        return (-1);
    req->rx_pos = req->rx_len;
    req->body_done = true;
    shuffle(req, conn);
    return (0);
}
