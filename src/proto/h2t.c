/*
 * The HTTP/2 transport (RFC 9113), with nghttp2 as the protocol engine:
 * frames and HPACK are its; the connection around it -- who reads and
 * writes the socket, streams as requests, flow control tied to the
 * deliverer, the limits -- is ours.
 *
 * Threads.  A connection is served by the pool's workers and waits in the
 * waiter, as HTTP/1 sessions do; no thread is its own.  When it turns
 * readable a worker takes it, the reader (h2t_sess_task()): it reads what
 * the socket holds and feeds it to nghttp2, whose callbacks check and
 * keep each request's fields and body bytes and queue each stream whose
 * request may start (its head complete; with a body of unknown length,
 * once the body begins).  Then the reader parks the connection in the
 * waiter again -- "busy" while requests run, so that it does not expire
 * (wtr_park()) -- and, if streams are queued, serves them itself as the
 * first runner (h2t_stream.c): more input, such as the window updates a
 * response waits for, goes to whichever worker the waiter finds next.
 * Each stream runs req_serve() on its runner's worker, so many streams of
 * one connection are served at once by as many workers, and a slow one
 * holds up only its own worker.  One thread of the transport's own, the
 * sweeper (h2t_mem.c), gives back what connections that have rested a
 * second hold for their traffic; it never reads or writes a socket.
 *
 * Locks.  nghttp2 is not thread-safe: every call on a connection's
 * session, every read and write of its socket (OpenSSL's SSL is not
 * either), and all the state in struct h2c and its streams are under the
 * connection's one mutex, c->mtx.  It ranks above the waiter's lock
 * (wtr_park() and wtr_rest() are called holding it) and the pools' (a
 * helper runner is submitted holding it) and the resting list's
 * (h2t_mem.c), and below nothing: no lock is held when it is taken, but
 * by the sweeper, which only tries it.  Nobody blocks holding it: reads and writes are
 * non-blocking, and a thread that must wait -- for the socket to drain,
 * a window to open, body bytes to come -- waits unlocked (poll(2), or its
 * stream's condition variable).
 *
 * Who writes the socket: whoever holds the lock and has frames to send
 * -- the reader after its input, a runner after its response's pieces --
 * writes what the socket takes; when it takes no more, one thread waits
 * for it and writes on (the flusher, h2t_io.c).
 *
 * Lifetime.  struct h2c is counted: one reference for the connection
 * itself (the reader's while it reads, the waiter's while parked), one
 * per runner.  Closing marks it dead -- every waiting runner wakes and
 * fails -- and drops the connection's reference; the last one frees the
 * nghttp2 session and closes the socket.  The waiter closes an expired or
 * left-over connection through sess_close(), which calls conn_close().
 *
 * Limits, each counted: streams under way, counting those reset but still
 * running (h2_max_concurrent_streams); resets per second (Rapid Reset);
 * control and empty frames per second; a header block's bytes and frames
 * (CONTINUATION flood); the decoded header list (http_req_size: HPACK
 * bomb, answered 431); request body bytes per stream and connection
 * (flow-control windows we grant only as runners take the bytes); time
 * without progress on a closed window or a full socket
 * (h2_window_timeout); idle time (timeout_idle, in the waiter).  SIGTERM
 * and a reload make every connection send GOAWAY at its next activity (or
 * when the waiter closes it) and finish the streams it has.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "surogat/defs.h"
#include "surogat/log.h"
#include "surogat/par.h"
#include "surogat/sess.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/tls.h"
#include "surogat/tp.h"
#include "surogat/vio.h"
#include "surogat/wrk.h"
#include "surogat/wtr.h"

#include "h2t_priv.h"

nghttp2_session_callbacks *h2t__cb;
unsigned h2t__ncpu = 1;
static nghttp2_option *h2t_opt;
static __thread const struct h2c *held; /* the connection whose lock this thread holds */

void
h2t__lock(struct h2c *c)
{
    AZ(pthread_mutex_lock(&c->mtx));
    held = c;
}

void
h2t__unlock(struct h2c *c)
{
    SRG_ASSERT(held == c);
    held = NULL;
    AZ(pthread_mutex_unlock(&c->mtx));
}

bool
h2t__held(const struct h2c *c)
{
    return (held == c);
}

/* RFC 9113 section 3.4: what a client with prior knowledge sends first. */
static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

void
h2t__wake_all(struct h2c *c)
{
    for (struct h2s *s = c->all; s != NULL; s = s->lnext)
        AZ(pthread_cond_broadcast(&s->cond));
}

void
h2t__kill(struct h2c *c, enum h2_kill why, uint32_t code)
{
    if (c->dead)
        return;
    h2t__doom(c, why, code);
    if (c->kill != H2K_IO)
        h2t__pump(c); /* the GOAWAY, as far as the socket takes it now */
    c->dead = true;
    h2t__wake_all(c);
}

void
h2t__rested(struct h2c *c)
{
    if (!c->reader)
        h2t__mem_rest(c);
    if (c->parked_busy) {
        c->parked_busy = false;
        wtr_rest(c->sp);
    }
}

/* ---- connections ---- */

static void conn_close(struct sess *sp);

static struct h2c *
conn_new(struct sess *sp)
{
    nghttp2_settings_entry iv[5];
    nghttp2_mem mem;
    struct h2c *c;
    int32_t win;

    OBJ_NEW(c, H2C_MAGIC);
    c->sp = sp;
    AZ(pthread_mutex_init(&c->mtx, NULL));
    c->refcnt = 1;
    c->epoch = sess_epoch();
    c->local_window = (uint32_t)SRG_MIN(par.h2_initial_window_size, (uint64_t)INT32_MAX);
    h2t__mem_init(c, &mem);
    AZ(nghttp2_session_server_new3(&c->ngh, h2t__cb, c, h2t_opt, &mem));
    h2t__mem_started(c);
    iv[0] = (nghttp2_settings_entry){ NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS,
                                      par.h2_max_concurrent_streams };
    iv[1] = (nghttp2_settings_entry){ NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, c->local_window };
    iv[2] = (nghttp2_settings_entry){ NGHTTP2_SETTINGS_MAX_HEADER_LIST_SIZE,
                                      (uint32_t)par.http_req_size };
    iv[3] = (nghttp2_settings_entry){ NGHTTP2_SETTINGS_ENABLE_PUSH, 0 };
    /* No RFC 7540 priority tree to keep: PRIORITY frames then cost nothing. */
    iv[4] = (nghttp2_settings_entry){ NGHTTP2_SETTINGS_NO_RFC7540_PRIORITIES, 1 };
    AZ(nghttp2_submit_settings(c->ngh, NGHTTP2_FLAG_NONE, iv, ARRAY_LEN(iv)));
    /* The connection holds at most 16 streams' windows of request body. */
    win = (int32_t)SRG_MIN((uint64_t)c->local_window * 16, (uint64_t)INT32_MAX);
    if (win > NGHTTP2_INITIAL_CONNECTION_WINDOW_SIZE)
        AZ(nghttp2_session_set_local_window_size(c->ngh, NGHTTP2_FLAG_NONE, 0, win));
    sp->tp_conn = c;
    sp->tp_close = conn_close;
    STAT_INC(h2_sess);
    STAT_INC(h2_sess_open);
    return (c);
}

void
h2t__unref(struct h2c *c)
{
    struct sess *sp;
    struct h2s *s;
    bool last;

    OBJ_CHECK(c, H2C_MAGIC);
    h2t__lock(c);
    SRG_ASSERT(c->refcnt > 0);
    last = --c->refcnt == 0;
    h2t__unlock(c);
    if (!last)
        return;
    SRG_ASSERT(c->dead && c->nrunners == 0 && c->qhead == NULL);
    h2t__mem_leave(c);
    /* Streams nghttp2 still held: nobody else can reach them now. */
    while ((s = c->all) != NULL) {
        SRG_ASSERT(!s->task);
        s->open = false;
        h2t__stream_release(s);
    }
    nghttp2_session_del(c->ngh);
    h2t__mem_fini(c);
    h2t__ob_free(c);
    AZ(pthread_mutex_destroy(&c->mtx));
    sp = c->sp;
    sp->tp_conn = NULL;
    sp->tp_close = NULL;
    OBJ_FREE(&c);
    STAT_DEC(h2_sess_open);
    sess_close(&sp);
}

/* sess_close() of a connection its reader does not hold: say GOAWAY if we can, and let go. */
static void
conn_close(struct sess *sp)
{
    struct h2c *c = sp->tp_conn;

    OBJ_CHECK(c, H2C_MAGIC);
    h2t__lock(c);
    if (!c->dead && !c->goaway) {
        (void)nghttp2_submit_goaway(c->ngh, NGHTTP2_FLAG_NONE,
                                    nghttp2_session_get_last_proc_stream_id(c->ngh),
                                    NGHTTP2_NO_ERROR, NULL, 0);
        c->goaway = true;
        h2t__pump(c); /* one try: the connection is closing either way */
    }
    c->dead = true;
    c->parked_busy = false;
    h2t__wake_all(c);
    h2t__unlock(c);
    h2t__unref(c);
}

/* Input for nghttp2; then its answers out as far as the socket takes them. */
static void
feed(struct h2c *c, const uint8_t *p, size_t n)
{
    ssize_t rv;

    c->now = tim_mono();
    rv = nghttp2_session_mem_recv(c->ngh, p, n);
    if (rv < 0 && c->kill == H2K_NONE) {
        /* Not one of our limits: the library's own (a bad preface, too many acks queued). */
        h2t__doom(c, rv == NGHTTP2_ERR_FLOODED ? H2K_FLOOD : H2K_FRAME,
             rv == NGHTTP2_ERR_FLOODED ? NGHTTP2_ENHANCE_YOUR_CALM : NGHTTP2_PROTOCOL_ERROR);
    }
    if (rv < 0) {
        h2t__kill(c, c->kill, 0);
        return;
    }
    h2t__pump(c);
}

/* SIGTERM or a reload since the connection began: GOAWAY, and finish what was asked. */
static void
maybe_goaway(struct h2c *c)
{
    if (c->goaway || c->dead || (!sess_draining() && c->epoch == sess_epoch()))
        return;
    (void)nghttp2_submit_goaway(c->ngh, NGHTTP2_FLAG_NONE,
                                nghttp2_session_get_last_proc_stream_id(c->ngh), NGHTTP2_NO_ERROR,
                                NULL, 0);
    c->goaway = true;
}

/* Read until the socket holds nothing.  Under c->mtx. */
static void
read_all(struct h2c *c, struct wrk *wrk)
{
    ssize_t n;

    while (!c->dead) {
        n = h2t__read(c, wrk->rx, wrk->rx_size);
        if (n > 0) {
            feed(c, (const uint8_t *)wrk->rx, (size_t)n);
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        /* The client closed or the connection failed: nobody to talk to. */
        h2t__kill(c, H2K_IO, 0);
    }
}

/*
 * Nobody else will write ob: wait for the socket, either way, and read
 * what comes meanwhile.  Under c->mtx; unlocked while waiting.
 */
static void
io_wait(struct h2c *c)
{
    struct pollfd pfd = { .fd = c->sp->fd, .events = POLLIN | POLLOUT };
    double left;

    if (c->t_progress == 0)
        c->t_progress = tim_mono();
    left = c->t_progress + par.h2_window_timeout - tim_mono();
    if (left <= 0) {
        h2t__kill(c, H2K_STALL, NGHTTP2_ENHANCE_YOUR_CALM);
        return;
    }
    c->flusher = true;
    h2t__unlock(c);
    vio_blocking();
    (void)poll(&pfd, 1, (int)(left * 1e3) + 1);
    h2t__lock(c);
    c->flusher = false;
    h2t__pump(c);
}

/* RFC 9113 section 3.4: HTTP/2 with prior knowledge, or HTTP/1 (an h2c listener's session). */
enum sniff { SNIFF_H2, SNIFF_H1, SNIFF_WAIT, SNIFF_CLOSE };

static enum sniff
sniff(struct sess *sp)
{
    char buf[sizeof preface - 1];
    double deadline = tim_mono() + par.timeout_idle;
    ssize_t n;

    for (;;) {
        n = recv(sp->fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
        if (n > 0 && memcmp(buf, preface, (size_t)n) != 0)
            return (SNIFF_H1);
        if (n == (ssize_t)sizeof buf)
            return (SNIFF_H2);
        if (n == 0)
            return (SNIFF_CLOSE);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return (errno == EAGAIN ? SNIFF_WAIT : SNIFF_CLOSE);
        /*
         * A part of the preface, the rest to come: the socket stays
         * readable with what we peeked, so poll(2) cannot wait for more.
         */
        if (tim_mono() >= deadline)
            return (SNIFF_CLOSE);
        vio_blocking();
        (void)usleep(5000);
    }
}

void
h2t_sess_task(struct wrk *wrk, void *priv)
{
    struct sess *sp = priv;
    struct h2c *c;
    bool busy;

    OBJ_CHECK(wrk, WRK_MAGIC);
    OBJ_CHECK(sp, SESS_MAGIC);
    if (sp->tp_conn == NULL && sp->mux == NULL) {
        switch (sniff(sp)) {
        case SNIFF_H2:
            break;
        case SNIFF_H1:
            sp->task.func = h1t_sess_task;
            h1t_sess_task(wrk, sp);
            return;
        case SNIFF_WAIT:
            wtr_enter(&sp); /* this task runs again when the first bytes come */
            return;
        case SNIFF_CLOSE:
            sess_close(&sp);
            return;
        }
    }
    c = sp->tp_conn != NULL ? sp->tp_conn : conn_new(sp);
    OBJ_CHECK(c, H2C_MAGIC);
    wrk_buffers_fit(wrk);
    h2t__lock(c);
    c->reader = true;
    c->parked_busy = false;
    h2t__mem_busy(c);
    for (;;) {
        read_all(c, wrk);
        maybe_goaway(c);
        h2t__pump(c);
        if (!c->dead && !nghttp2_session_want_read(c->ngh) &&
            !nghttp2_session_want_write(c->ngh) && c->ob_len == 0 && c->nactive == 0)
            c->dead = true; /* GOAWAY said and every stream done: the end */
        if (c->dead)
            break;
        if (c->ob_len > 0 && !c->flusher) {
            if (c->waiters == NULL) {
                io_wait(c);
                continue;
            }
            h2t__wake_waiters(c); /* a runner waiting for output takes over */
        }
        /* Park: busy while requests run, so that it cannot expire under them. */
        busy = c->nactive > 0;
        c->reader = false;
        c->parked_busy = busy;
        if (!busy) {
            sp->t_idle = tim_mono();
            h2t__mem_rest(c); /* its buffers go back if it rests a while */
        }
        if (wtr_park(sp, busy) != 0) {
            c->reader = true;
            c->parked_busy = false;
            c->dead = true;
            break;
        }
        /* The waiter has the connection; queued streams are ours to start serving. */
        if (c->qhead != NULL) {
            c->refcnt++;
            h2t__run(wrk, c);
            h2t__unlock(c);
            h2t__unref(c);
        } else {
            h2t__unlock(c);
        }
        return;
    }
    /* Closing: runners fail fast, queued streams end, the last reference closes. */
    h2t__wake_all(c);
    c->reader = false;
    h2t__run(wrk, c);
    h2t__unlock(c);
    h2t__unref(c);
}

struct h2c *
h2t__test_conn(struct sess *sp)
{
    OBJ_CHECK(sp, SESS_MAGIC);
    AZ(sp->pool);
    return (conn_new(sp));
}

void
h2t__test_feed(struct h2c *c, struct wrk *wrk, const void *p, size_t n)
{
    OBJ_CHECK(c, H2C_MAGIC);
    h2t__lock(c);
    if (!c->dead) {
        feed(c, p, n);
        maybe_goaway(c);
        h2t__pump(c);
        h2t__run(wrk, c);
    }
    h2t__unlock(c);
}

bool
h2t__test_dead(struct h2c *c)
{
    bool dead;

    h2t__lock(c);
    dead = c->dead;
    h2t__unlock(c);
    return (dead);
}

void
h2t__test_close(struct h2c *c, struct wrk *wrk)
{
    h2t__lock(c);
    c->dead = true;
    h2t__wake_all(c);
    h2t__run(wrk, c);
    h2t__unlock(c);
    h2t__unref(c);
}

int
h2t_init(void)
{
    nghttp2_session_callbacks *cb;
    cpu_set_t cpus;

    if (sched_getaffinity(0, sizeof cpus, &cpus) == 0 && CPU_COUNT(&cpus) > 0)
        h2t__ncpu = (unsigned)CPU_COUNT(&cpus);

    if (nghttp2_session_callbacks_new(&cb) != 0 || nghttp2_option_new(&h2t_opt) != 0)
        return (-1);
    nghttp2_session_callbacks_set_send_callback(cb, h2t__send_cb);
    nghttp2_session_callbacks_set_send_data_callback(cb, h2t__send_data_cb);
    h2t__recv_callbacks(cb);
    h2t__cb = cb;
    /* HTTP's rules are checked by h2t_hdr.c; windows open as runners take the body. */
    nghttp2_option_set_no_http_messaging(h2t_opt, 1);
    nghttp2_option_set_no_auto_window_update(h2t_opt, 1);
    nghttp2_option_set_no_closed_streams(h2t_opt, 1);
    /* The library's own flood limits, looser than ours, which count what they catch. */
    nghttp2_option_set_max_continuations(h2t_opt, H2_HB_FRAMES + 1);
    nghttp2_option_set_stream_reset_rate_limit(h2t_opt, UINT32_MAX / 2, UINT32_MAX / 2);
    /*
     * Responses are encoded from the static table and literals only, as
     * nginx and HAProxy do: a dynamic table of our own would keep each
     * idle connection's last response fields (about 2 KiB a connection
     * with 10,000 of them) to save a few bytes a response.
     */
    nghttp2_option_set_max_deflate_dynamic_table_size(h2t_opt, 0);
    return (h2t__rest_start());
}

void
h2t_fini(void)
{
    h2t__rest_stop();
    nghttp2_session_callbacks_del(h2t__cb);
    h2t__cb = NULL;
    nghttp2_option_del(h2t_opt);
    h2t_opt = NULL;
}
