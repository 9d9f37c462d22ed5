/*
 * HTTP/2 output: frames from nghttp2 into one buffer per connection, ob,
 * and from there to the socket, never blocking under the lock.
 *
 * Every frame nghttp2 makes is copied into ob (send_cb); a DATA frame's
 * payload is copied there straight from the pieces a runner handed to
 * body() (send_data_cb, nghttp2's no-copy mode), nine bytes of header and
 * at most H2_DATA_MAX of payload, so that a frame fills exactly one TLS
 * record.  That one copy is the one TLS needs anyway to build a record;
 * nghttp2 itself copies nothing.  ob is written from its front: under
 * TLS a write that would block is retried with the same bytes first
 * (ob may move and grow meanwhile), and the records of one write leave
 * in one system call (tls_mux_write()).  ob exists only
 * while there is output, so an idle connection holds none.
 *
 * Who waits for the socket.  Writes are non-blocking, under the lock; when
 * the socket is full, one thread, "the flusher", waits for it to drain
 * (poll(2), without the lock) and writes on.  Invariant: whenever ob holds
 * bytes after a thread lets go of the lock, a flusher exists, or that
 * thread has woken a runner waiting for output to become it
 * (h2t__settle()).  So the reader may park and a runner go back to the
 * core (and block there on a backend) without leaving bytes behind.  A
 * socket that takes nothing for h2_window_timeout ends the connection.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "surogat/defs.h"
#include "surogat/par.h"
#include "surogat/sess.h"
#include "surogat/tim.h"
#include "surogat/tls.h"
#include "surogat/tp.h"
#include "surogat/vio.h"

#include "h2t_priv.h"

static __thread char me; /* its address names this thread as a holder */

void
h2t__hold(struct h2c *c)
{
    c->holder = &me;
}

void
h2t__release(struct h2c *c)
{
    if (c->holder != &me)
        return;
    c->holder = NULL;
    h2t__pump(c);
}

ssize_t
h2t__read(struct h2c *c, void *buf, size_t len)
{
    struct sess *sp = c->sp;

    if (sp->in_buf != NULL)
        return ((ssize_t)sess_input_read(sp, buf, len)); /* kept bytes come first */
    if (sp->mux != NULL)
        return (sess_rx_note(sp, tls_mux_read(sp->mux, buf, len), len));
    return (sess_rx_note(sp, read(sp->fd, buf, len), len));
}

static ssize_t
sock_write(struct h2c *c, const void *buf, size_t len)
{
    struct sess *sp = c->sp;

    if (sp->mux != NULL)
        return (tls_mux_write(sp->mux, buf, len));
    return (send(sp->fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT));
}

void
h2t__ob_free(struct h2c *c)
{
    free(c->ob);
    c->ob = NULL;
    c->ob_head = c->ob_len = 0;
}

/* Room for need more bytes at the end of ob (made by moving its bytes to the front). */
static bool
ob_room(struct h2c *c, size_t need)
{
    if (c->ob == NULL) {
        c->ob = malloc(H2_OB_SIZE);
        AN(c->ob);
        c->ob_head = c->ob_len = 0;
    }
    if (c->ob_head + c->ob_len + need <= H2_OB_SIZE)
        return (true);
    if (c->ob_len + need > H2_OB_SIZE)
        return (false);
    memmove(c->ob, c->ob + c->ob_head, c->ob_len);
    c->ob_head = 0;
    return (true);
}

/* nghttp2_send_callback: every frame but DATA payloads. */
ssize_t
h2t__send_cb(nghttp2_session *ngh, const uint8_t *data, size_t len, int flags, void *priv)
{
    struct h2c *c = priv;
    size_t n;

    (void)ngh;
    (void)flags;
    OBJ_CHECK(c, H2C_MAGIC);
    n = SRG_MIN(len, H2_OB_SIZE - c->ob_len);
    if (n == 0)
        return (NGHTTP2_ERR_WOULDBLOCK); /* nghttp2 keeps the rest for the next call */
    AN(ob_room(c, n));
    memcpy(c->ob + c->ob_head + c->ob_len, data, n);
    c->ob_len += n;
    return ((ssize_t)n);
}

void
h2t__take_body(struct h2s *s, char *dst, size_t len)
{
    while (len > 0) {
        size_t k;

        AN(s->oniov);
        k = SRG_MIN(len, s->oiov->iov_len - s->ooff);
        memcpy(dst, (const char *)s->oiov->iov_base + s->ooff, k);
        dst += k;
        len -= k;
        s->ooff += k;
        if (s->ooff == s->oiov->iov_len) {
            s->oiov++;
            s->oniov--;
            s->ooff = 0;
        }
    }
}

/* nghttp2_send_data_callback: a DATA frame, its payload from the runner's pieces. */
int
h2t__send_data_cb(nghttp2_session *ngh, nghttp2_frame *frame, const uint8_t *framehd,
                  size_t length, nghttp2_data_source *source, void *priv)
{
    struct h2c *c = priv;
    struct h2s *s = source->ptr;
    char *p;

    (void)ngh;
    OBJ_CHECK(c, H2C_MAGIC);
    OBJ_CHECK(s, H2S_MAGIC);
    SRG_ASSERT(frame->data.padlen == 0);
    if (!ob_room(c, 9 + length))
        return (NGHTTP2_ERR_WOULDBLOCK); /* called again, the same, when ob has room */
    p = c->ob + c->ob_head + c->ob_len;
    memcpy(p, framehd, 9);
    h2t__take_body(s, p + 9, length);
    c->ob_len += 9 + length;
    s->ocopied += length;
    /* Its body() may return: all is in, or its stream is gone and what nghttp2 began is. */
    if (s->ocopied == s->ogiven || (h2t__stream_gone(s) && s->ocopied == s->oframed))
        AZ(pthread_cond_signal(&s->cond));
    return (0);
}

/*
 * nghttp2_data_source_read_callback: how much of s's body goes in the
 * next DATA frame (no copy: send_data_cb takes it); deferred while the
 * runner has handed nothing, until it does (nghttp2_session_resume_data()).
 * The frame that completes a body whose length the head announced ends
 * the stream, sparing an empty DATA frame for the end.
 */
ssize_t
h2t__data_read_cb(nghttp2_session *ngh, int32_t stream_id, uint8_t *buf, size_t length,
                  uint32_t *flags, nghttp2_data_source *source, void *priv)
{
    struct h2s *s = source->ptr;
    uint64_t avail;
    size_t n;

    (void)ngh;
    (void)stream_id;
    (void)buf;
    (void)priv;
    OBJ_CHECK(s, H2S_MAGIC);
    avail = s->ogiven - s->oframed;
    if (avail == 0) {
        if (s->eof || (s->olen < TP_LEN_UNKNOWN && s->oframed >= s->olen)) {
            *flags |= NGHTTP2_DATA_FLAG_EOF;
            return (0);
        }
        return (NGHTTP2_ERR_DEFERRED);
    }
    n = (size_t)SRG_MIN((uint64_t)SRG_MIN(length, (size_t)H2_DATA_MAX), avail);
    *flags |= NGHTTP2_DATA_FLAG_NO_COPY;
    s->oframed += n;
    if (s->olen < TP_LEN_UNKNOWN && s->oframed == s->olen)
        *flags |= NGHTTP2_DATA_FLAG_EOF;
    return ((ssize_t)n);
}

void
h2t__pump(struct h2c *c)
{
    ssize_t n;
    int rv;

    for (;;) {
        if (c->dead)
            return;
        rv = nghttp2_session_send(c->ngh);
        if (rv != 0) {
            /* Only a callback's failure or no memory: nothing left to say on it. */
            h2t__kill(c, H2K_FRAME, NGHTTP2_INTERNAL_ERROR);
            return;
        }
        if (c->holder == &me && c->ob_len < H2_HOLD_MAX)
            return; /* held back for the next answer (h2t__hold()) */
        if (c->ob == NULL || c->ob_len == 0) {
            c->t_progress = 0;
            return;
        }
        n = sock_write(c, c->ob + c->ob_head, c->ob_len);
        if (n > 0) {
            c->ob_head += (size_t)n;
            c->ob_len -= (size_t)n;
            if (c->ob_len == 0)
                c->ob_head = 0;
            c->t_progress = 0;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN) {
            if (c->t_progress == 0)
                c->t_progress = tim_mono(); /* blocked since */
            return;
        }
        h2t__kill(c, H2K_IO, 0);
        return;
    }
}

int
h2t__flush_wait(struct h2c *c, double deadline)
{
    struct pollfd pfd = { .fd = c->sp->fd, .events = POLLOUT };
    double stall, left;

    SRG_ASSERT(!c->flusher);
    if (c->holder == &me)
        c->holder = NULL; /* about to wait: nothing is held back any more */
    if (c->dead)
        return (-1);
    if (c->ob_len == 0)
        return (0);
    if (c->t_progress == 0)
        c->t_progress = tim_mono();
    stall = c->t_progress + par.h2_window_timeout;
    if (deadline > stall)
        deadline = stall;
    c->flusher = true;
    h2t__unlock(c);
    vio_blocking();
    left = deadline - tim_mono();
    if (left > 0)
        (void)poll(&pfd, 1, (int)(left * 1e3) + 1);
    h2t__lock(c);
    c->flusher = false;
    h2t__pump(c);
    if (c->dead)
        return (-1);
    if (c->ob_len > 0 && c->t_progress > 0 && tim_mono() >= c->t_progress + par.h2_window_timeout) {
        h2t__kill(c, H2K_STALL, NGHTTP2_ENHANCE_YOUR_CALM);
        return (-1);
    }
    if (c->ob_len > 0)
        h2t__wake_waiters(c); /* one of them may take over while we do other things */
    return (0);
}

void
h2t__wake_waiters(struct h2c *c)
{
    for (struct h2s *s = c->waiters; s != NULL; s = s->next)
        AZ(pthread_cond_signal(&s->cond));
}

void
h2t__settle(struct h2c *c)
{
    if (c->holder == &me)
        return; /* it sends what it holds itself, soon */
    while (!c->dead && c->ob_len > 0 && !c->flusher) {
        if (c->waiters != NULL) {
            /* A runner that waits anyway flushes: we may go. */
            h2t__wake_waiters(c);
            return;
        }
        (void)h2t__flush_wait(c, tim_mono() + par.h2_window_timeout);
    }
}
