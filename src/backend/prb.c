/*
 * Health probes.
 *
 * One probe thread owns an event_base and every running probe; workers
 * never touch it.  Other threads hand probes over through a locked inbox
 * and an eventfd, as the waiter does: prb_start() queues a new probe,
 * prb_stop() marks it and queues it again, and the thread frees it.  A
 * probe owns its history; the thread reports each result through the
 * callback, which is how a backend learns its health.
 *
 * A probe is one connection per tick: non-blocking connect, the TLS
 * handshake for a TLS backend, the request, then the status line of the
 * answer.  Every step re-arms the socket event with what is left of the
 * probe's timeout, so a silent backend costs one failed result, never a
 * stuck thread.  Over TLS each step asks OpenSSL, on the non-blocking
 * socket, and waits for whichever of readable or writable it wants: a
 * read may need to write and the reverse.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "surogat/bcp.h"
#include "surogat/be.h"
#include "surogat/defs.h"
#include "surogat/prb.h"
#include "surogat/sb.h"
#include "surogat/pp.h"
#include "surogat/stat.h"
#include "surogat/tim.h"

enum prb_state {
    PRB_IDLE,       /* waiting for the next tick */
    PRB_CONNECTING, /* fd open, waiting for writable */
    PRB_HANDSHAKE,  /* TLS */
    PRB_SENDING,
    PRB_READING,
};

struct prb {
    unsigned magic;
#define PRB_MAGIC 0x9b41d27e
    char *name; /* for the log */
    struct sockaddr_storage sa;
    socklen_t salen;
    char *req; /* the request bytes */
    size_t reqlen;
    double interval, timeout;
    unsigned window, threshold, expected;
    prb_result_f *cb;
    void *priv;
    struct bcp_tls *tls; /* NULL: plain HTTP */
    uint8_t pp[PP_BUILD_MAX]; /* the PROXY header each connection opens with */
    size_t pplen;             /* 0: none */
    /* The rest belongs to the probe thread. */
    uint64_t bits;
    enum prb_state state;
    int fd;
    SSL *ssl; /* TLS: the session on fd */
    size_t sent;
    char buf[32]; /* "HTTP/1.1 200" is all we read */
    size_t blen;
    double deadline; /* tim_mono() */
    struct event *tick, *io;
    struct prb *next; /* the thread's list of running probes */
    /* Under inbox_mtx. */
    bool queued, stop;
    struct prb *inext;
};

static struct event_base *prb_base;
static struct event *wake_ev;
static int wake_fd = -1;
static pthread_t prb_thread;
static pthread_mutex_t inbox_mtx = PTHREAD_MUTEX_INITIALIZER;
static struct prb *inbox;   /* under inbox_mtx */
static bool inbox_halt;     /* under inbox_mtx */
static struct prb *running; /* probe thread only */

/*--------------------------------------------------------------------
 * The window.
 */

static uint64_t
window_mask(unsigned window)
{
    SRG_ASSERT(window >= 1 && window <= PRB_WINDOW_MAX);
    return (window == 64 ? ~(uint64_t)0 : ((uint64_t)1 << window) - 1);
}

unsigned
prb_good(uint64_t bits, unsigned window)
{
    return ((unsigned)__builtin_popcountll(bits & window_mask(window)));
}

bool
prb_window_healthy(uint64_t bits, unsigned window, unsigned threshold)
{
    return (prb_good(bits, window) >= threshold);
}

uint64_t
prb_shift(uint64_t bits, unsigned window, bool good)
{
    return (((bits << 1) | (good ? 1 : 0)) & window_mask(window));
}

uint64_t
prb_initial_bits(unsigned initial, unsigned window)
{
    return (initial >= 64 ? ~(uint64_t)0 : ((uint64_t)1 << initial) - 1) & window_mask(window);
}

void
prb_history(uint64_t bits, unsigned window, struct sb *out)
{
    SRG_ASSERT(window >= 1 && window <= PRB_WINDOW_MAX);
    for (unsigned i = window; i-- > 0;)
        sb_cat(out, (bits >> i) & 1 ? "H" : "-");
}

int
prb_conf_check(const struct be_probe_conf *in, struct be_probe_conf *out, struct sb *err)
{
    AN(in);
    AN(out);
    *out = *in;
    if (out->url == NULL)
        out->url = "/";
    if (out->interval == 0)
        out->interval = 5;
    if (out->timeout == 0)
        out->timeout = 2;
    if (out->window == 0)
        out->window = 8;
    if (out->threshold == 0)
        out->threshold = 3;
    if (out->expected_status == 0)
        out->expected_status = 200;
    if (!(out->interval > 0 && out->interval <= 86400) ||
        !(out->timeout > 0 && out->timeout <= 86400)) {
        sb_cat(err, "probe interval and timeout must be above 0 and at most a day");
        return (-1);
    }
    if (out->window > PRB_WINDOW_MAX || out->threshold > out->window) {
        sb_printf(err, "probe needs 1 <= threshold (%u) <= window (%u) <= %u", out->threshold,
                  out->window, PRB_WINDOW_MAX);
        return (-1);
    }
    if (out->initial < 0)
        out->initial = (int)out->threshold - 1;
    if ((unsigned)out->initial > out->window) {
        sb_printf(err, "probe initial (%d) is above the window (%u)", out->initial, out->window);
        return (-1);
    }
    if (out->expected_status < 100 || out->expected_status > 999) {
        sb_printf(err, "probe expected_status %u is not an HTTP status", out->expected_status);
        return (-1);
    }
    if (out->request != NULL) {
        size_t n = strlen(out->request);
        /* Anything else would leave the backend waiting for the end of the head. */
        if (n < 4 || strcmp(out->request + n - 4, "\r\n\r\n") != 0) {
            sb_cat(err, "probe request must end with an empty line (\"\\r\\n\\r\\n\")");
            return (-1);
        }
    } else if (out->url[0] != '/' || strpbrk(out->url, " \t\r\n") != NULL) {
        sb_printf(err, "probe url '%.64s' must start with '/' and hold no blank", out->url);
        return (-1);
    }
    return (0);
}

/*--------------------------------------------------------------------
 * One probe, on the probe thread.
 */

static void on_io(evutil_socket_t fd, short what, void *arg);

static void
finish(struct prb *p, bool good)
{
    bool healthy;

    if (p->fd >= 0) {
        (void)event_del(p->io);
        if (p->ssl != NULL)
            bcp_tls_ssl_free(&p->ssl);
        close(p->fd);
        p->fd = -1;
    }
    p->state = PRB_IDLE;
    if (!good)
        STAT_INC(probe_failed);
    p->bits = prb_shift(p->bits, p->window, good);
    healthy = prb_window_healthy(p->bits, p->window, p->threshold);
    p->cb(p->priv, p->bits, healthy);
}

/* Wait for `what` on the probe's socket with the rest of its time. */
static void
arm(struct prb *p, short what)
{
    double left = p->deadline - tim_mono();
    struct timeval tv;

    if (left <= 0) {
        finish(p, false);
        return;
    }
    tv.tv_sec = (time_t)left;
    tv.tv_usec = (suseconds_t)((left - (double)tv.tv_sec) * 1e6);
    AZ(event_assign(p->io, prb_base, p->fd, what, on_io, p));
    AZ(event_add(p->io, &tv));
}

/* "HTTP/1.1 200": a good probe is a well-formed status line with the expected code. */
static bool
status_good(const struct prb *p)
{
    const char *b = p->buf;
    unsigned st;

    if (p->blen < 12 || memcmp(b, "HTTP/1.", 7) != 0 || b[8] != ' ')
        return (false);
    if (b[9] < '1' || b[9] > '9' || b[10] < '0' || b[10] > '9' || b[11] < '0' || b[11] > '9')
        return (false);
    st = (unsigned)(b[9] - '0') * 100 + (unsigned)(b[10] - '0') * 10 + (unsigned)(b[11] - '0');
    return (st == p->expected);
}

/*
 * One send or receive, plain or TLS.  >0 bytes, 0 at EOF, -1 with *want
 * the event to wait for (EV_READ or EV_WRITE) when it would block, else
 * -1 with *want 0: failed.
 */
static ssize_t
pio(struct prb *p, bool wr, char *buf, size_t len, short *want)
{
    size_t n;
    ssize_t rv;
    int e;

    *want = 0;
    if (p->ssl == NULL) {
        rv = wr ? send(p->fd, buf, len, MSG_NOSIGNAL) : recv(p->fd, buf, len, 0);
        if (rv < 0 && (errno == EAGAIN || errno == EINTR))
            *want = wr ? EV_WRITE : EV_READ;
        return (rv);
    }
    ERR_clear_error();
    if ((wr ? SSL_write_ex(p->ssl, buf, len, &n) : SSL_read_ex(p->ssl, buf, len, &n)) == 1)
        return ((ssize_t)n);
    e = SSL_get_error(p->ssl, 0);
    ERR_clear_error();
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        *want = e == SSL_ERROR_WANT_READ ? EV_READ : EV_WRITE;
        return (-1);
    }
    if (e == SSL_ERROR_ZERO_RETURN)
        return (0);
    SSL_set_quiet_shutdown(p->ssl, 1);
    return (-1);
}

/* Drive the handshake: true when done; else it re-armed or finished the probe. */
static bool
handshake(struct prb *p)
{
    int rv, e;

    ERR_clear_error();
    rv = SSL_do_handshake(p->ssl);
    if (rv == 1)
        return (true);
    e = SSL_get_error(p->ssl, rv);
    ERR_clear_error();
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        arm(p, e == SSL_ERROR_WANT_READ ? EV_READ : EV_WRITE);
        return (false);
    }
    /* A certificate that does not verify fails the probe, as it fails requests. */
    SSL_set_quiet_shutdown(p->ssl, 1);
    finish(p, false);
    return (false);
}

static void
on_io(evutil_socket_t fd, short what, void *arg)
{
    struct prb *p = arg;
    socklen_t sl = sizeof(int);
    int soerr = 0;
    ssize_t n;
    short want;

    OBJ_CHECK(p, PRB_MAGIC);
    if (what & EV_TIMEOUT) {
        finish(p, false);
        return;
    }
    switch (p->state) {
    case PRB_CONNECTING:
        if (getsockopt(p->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0 || soerr != 0) {
            finish(p, false);
            return;
        }
        /* A fresh socket's buffer takes a PROXY header whole: one write, before TLS. */
        if (p->pplen > 0 && write(p->fd, p->pp, p->pplen) != (ssize_t)p->pplen) {
            finish(p, false);
            return;
        }
        p->state = PRB_SENDING;
        if (p->tls != NULL) {
            p->ssl = bcp_tls_ssl(p->tls, p->fd);
            p->state = PRB_HANDSHAKE;
        }
        /* FALLTHROUGH */
    case PRB_HANDSHAKE:
        if (p->state == PRB_HANDSHAKE) {
            if (!handshake(p))
                return;
            p->state = PRB_SENDING;
        }
        /* FALLTHROUGH */
    case PRB_SENDING:
        n = pio(p, true, p->req + p->sent, p->reqlen - p->sent, &want);
        if (n <= 0 && want == 0) {
            finish(p, false);
            return;
        }
        if (n > 0)
            p->sent += (size_t)n;
        if (p->sent < p->reqlen) {
            arm(p, n > 0 ? EV_WRITE : want);
            return;
        }
        p->state = PRB_READING;
        arm(p, EV_READ);
        return;
    case PRB_READING:
        n = pio(p, false, p->buf + p->blen, sizeof p->buf - p->blen, &want);
        if (n < 0 && want != 0) {
            arm(p, want);
            return;
        }
        if (n > 0)
            p->blen += (size_t)n;
        /* Twelve bytes decide it; an early close or error judges what came. */
        if (n > 0 && p->blen < 12) {
            arm(p, EV_READ);
            return;
        }
        finish(p, status_good(p));
        return;
    case PRB_IDLE:
        break;
    }
    SRG_WRONG("probe event while idle");
}

static void
on_tick(evutil_socket_t fd_, short what, void *arg)
{
    struct prb *p = arg;
    struct timeval tv;
    int fd;

    OBJ_CHECK(p, PRB_MAGIC);
    tv.tv_sec = (time_t)p->interval;
    tv.tv_usec = (suseconds_t)((p->interval - (double)tv.tv_sec) * 1e6);
    AZ(event_add(p->tick, &tv));
    /* Only when timeout > interval: the one still running counts as failed. */
    if (p->state != PRB_IDLE)
        finish(p, false);
    STAT_INC(probe_sent);
    p->sent = p->blen = 0;
    p->deadline = tim_mono() + p->timeout;
    fd = socket(p->sa.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        finish(p, false);
        return;
    }
    p->fd = fd;
    if (connect(fd, (const struct sockaddr *)&p->sa, p->salen) != 0 && errno != EINPROGRESS) {
        finish(p, false);
        return;
    }
    p->state = PRB_CONNECTING;
    arm(p, EV_WRITE);
}

static void
prb_free(struct prb *p)
{
    if (p->tick != NULL) {
        if (p->fd >= 0) {
            (void)event_del(p->io);
            if (p->ssl != NULL)
                bcp_tls_ssl_free(&p->ssl);
            close(p->fd);
        }
        event_free(p->tick);
        event_free(p->io);
    }
    free(p->name);
    free(p->req);
    OBJ_FREE(&p);
}

/*--------------------------------------------------------------------
 * The thread and its inbox.
 */

static void
unlink_running(struct prb *p)
{
    struct prb **pp;

    for (pp = &running; *pp != p; pp = &(*pp)->next)
        AN(*pp);
    *pp = p->next;
}

static void
on_wake(evutil_socket_t fd, short what, void *arg)
{
    struct timeval now = { 0, 0 };
    struct prb *p;
    uint64_t v;
    bool halt, stop;

    (void)!read(fd, &v, sizeof v);
    /*
     * One at a time under the lock: a probe taken out to start may be
     * queued again by prb_stop() meanwhile, and is then seen again here.
     */
    for (;;) {
        AZ(pthread_mutex_lock(&inbox_mtx));
        p = inbox;
        if (p != NULL) {
            inbox = p->inext;
            p->queued = false;
            stop = p->stop;
        }
        halt = inbox_halt;
        AZ(pthread_mutex_unlock(&inbox_mtx));
        if (p == NULL)
            break;
        OBJ_CHECK(p, PRB_MAGIC);
        if (stop) {
            if (p->tick != NULL)
                unlink_running(p);
            prb_free(p);
        } else if (p->tick == NULL) {
            p->tick = evtimer_new(prb_base, on_tick, p);
            p->io = event_new(prb_base, -1, 0, on_io, p);
            AN(p->tick);
            AN(p->io);
            p->next = running;
            running = p;
            AZ(event_add(p->tick, &now)); /* the first probe at once */
        }
    }
    if (halt)
        (void)event_base_loopbreak(prb_base);
}

static void *
probe_thread(void *priv)
{
    stat_thread_enter();
    (void)event_base_dispatch(prb_base);
    stat_thread_leave();
    return (NULL);
}

static void
wake(void)
{
    uint64_t one = 1;
    int fd = __atomic_load_n(&wake_fd, __ATOMIC_ACQUIRE);

    /* Before prb_run() nobody listens: the thread drains the inbox when it starts. */
    if (fd >= 0)
        (void)!write(fd, &one, sizeof one);
}

int
prb_init(void)
{
    AZ(pthread_mutex_lock(&inbox_mtx));
    inbox_halt = false;
    AZ(pthread_mutex_unlock(&inbox_mtx));
    return (0);
}

int
prb_run(void)
{
    sigset_t all, old;
    int fd;

    SRG_ASSERT(prb_base == NULL);
    prb_base = event_base_new();
    if (prb_base == NULL)
        return (-1);
    fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (fd < 0) {
        event_base_free(prb_base);
        prb_base = NULL;
        return (-1);
    }
    wake_ev = event_new(prb_base, fd, EV_READ | EV_PERSIST, on_wake, NULL);
    AN(wake_ev);
    AZ(event_add(wake_ev, NULL));
    /* Born with every signal blocked: main's sigwait() must get SIGTERM and SIGHUP. */
    sigfillset(&all);
    AZ(pthread_sigmask(SIG_SETMASK, &all, &old));
    AZ(pthread_create(&prb_thread, NULL, probe_thread, NULL));
    AZ(pthread_sigmask(SIG_SETMASK, &old, NULL));
    __atomic_store_n(&wake_fd, fd, __ATOMIC_RELEASE);
    wake(); /* for the probes queued before */
    return (0);
}

void
prb_fini(void)
{
    struct prb *p;

    if (prb_base != NULL) {
        AZ(pthread_mutex_lock(&inbox_mtx));
        inbox_halt = true;
        AZ(pthread_mutex_unlock(&inbox_mtx));
        wake();
        AZ(pthread_join(prb_thread, NULL));
    }
    /* Queued after the loop ended (or before it began): never started, or stopped since. */
    while ((p = inbox) != NULL) {
        inbox = p->inext;
        if (p->tick != NULL)
            unlink_running(p);
        prb_free(p);
    }
    while ((p = running) != NULL) {
        running = p->next;
        prb_free(p);
    }
    if (prb_base != NULL) {
        event_free(wake_ev);
        close(wake_fd);
        wake_fd = -1;
        event_base_free(prb_base);
        prb_base = NULL;
    }
}

/* Queue p for the probe thread, to start it or, with stop, to free it. */
static void
post(struct prb *p, bool stop)
{
    bool was_empty;

    AZ(pthread_mutex_lock(&inbox_mtx));
    if (stop)
        p->stop = true;
    was_empty = inbox == NULL;
    if (!p->queued) {
        p->queued = true;
        p->inext = inbox;
        inbox = p;
    }
    AZ(pthread_mutex_unlock(&inbox_mtx));
    if (was_empty)
        wake();
}

struct prb *
prb_start(const char *name, const struct sockaddr *sa, socklen_t salen, const char *host,
          struct bcp_tls *tls, unsigned proxy_protocol, const struct be_probe_conf *c,
          prb_result_f *cb, void *priv, uint64_t *bits0)
{
    struct prb *p;
    int rv;

    AN(name);
    AN(c);
    AN(cb);
    SRG_ASSERT(salen <= sizeof p->sa);
    SRG_ASSERT(c->window >= 1 && c->window <= PRB_WINDOW_MAX);
    SRG_ASSERT(c->threshold >= 1 && c->threshold <= c->window);
    OBJ_NEW(p, PRB_MAGIC);
    p->name = strdup(name);
    AN(p->name);
    memcpy(&p->sa, sa, salen);
    p->salen = salen;
    if (c->request != NULL) {
        p->req = strdup(c->request);
        AN(p->req);
    } else {
        rv = asprintf(&p->req,
                      "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n"
                      "User-Agent: surogat-probe\r\n\r\n",
                      c->url, host);
        SRG_ASSERT(rv > 0);
    }
    p->reqlen = strlen(p->req);
    p->interval = c->interval;
    p->timeout = c->timeout;
    p->window = c->window;
    p->threshold = c->threshold;
    p->expected = c->expected_status;
    p->cb = cb;
    p->priv = priv;
    p->tls = tls;
    if (proxy_protocol > 0)
        p->pplen = pp_build(proxy_protocol, NULL, NULL, p->pp);
    p->fd = -1;
    p->bits = prb_initial_bits((unsigned)c->initial, c->window);
    if (bits0 != NULL)
        *bits0 = p->bits;
    post(p, false);
    return (p);
}

void
prb_stop(struct prb **pp)
{
    struct prb *p;

    OBJ_TAKE(p, pp, PRB_MAGIC);
    post(p, true);
}
