/*
 * The waiter thread.
 *
 * It owns its event_base and every parked session.  Workers hand sessions
 * over through a locked inbox and an eventfd; the waiter moves them onto
 * its parked list and arms a read event with the time left of
 * timeout_idle.  A readable session goes back to a pool; one idle for
 * timeout_idle is closed here, without waking any worker.
 *
 * A TLS session is parked only when OpenSSL holds no decrypted bytes
 * (sess_pending()): those would never make the socket readable again.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/event.h>

#include "surogat/defs.h"
#include "surogat/log.h"
#include "surogat/par.h"
#include "surogat/sess.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/wtr.h"

static struct event_base *wtr_base;
static struct event *wake_ev;
static int wake_fd = -1;
static pthread_t wtr_thread;

static pthread_mutex_t inbox_mtx = PTHREAD_MUTEX_INITIALIZER;
static struct sess *inbox;   /* under inbox_mtx */
static bool inbox_stop;      /* under inbox_mtx */
static struct sess *parked;  /* waiter thread only */

static void
unpark(struct sess *sp)
{
    if (sp->wprev != NULL)
        sp->wprev->wnext = sp->wnext;
    else
        parked = sp->wnext;
    if (sp->wnext != NULL)
        sp->wnext->wprev = sp->wprev;
    sp->wnext = sp->wprev = NULL;
    event_free(sp->ev);
    sp->ev = NULL;
    STAT_DEC(sess_idle);
}

static void
on_session(evutil_socket_t fd, short what, void *priv)
{
    struct sess *sp = priv;

    (void)fd;
    OBJ_CHECK(sp, SESS_MAGIC);
    unpark(sp);
    if (what & EV_TIMEOUT) {
        STAT_INC(sess_timeout_idle);
        sess_close(&sp);
        return;
    }
    /*
     * Readable may also mean the client hung up; the worker's read finds
     * out.  Peeking here would cost a syscall on every request to spare a
     * worker wake-up once per connection.
     */
    sess_schedule(&sp);
}

static void
park(struct sess *sp)
{
    struct timeval tv;
    double left;

    left = par.timeout_idle - (tim_mono() - sp->t_idle);
    if (left < 0.001)
        left = 0.001;
    tv.tv_sec = (time_t)left;
    tv.tv_usec = (suseconds_t)((left - (double)tv.tv_sec) * 1e6);
    sp->ev = event_new(wtr_base, sp->fd, EV_READ, on_session, sp);
    AN(sp->ev);
    AZ(event_add(sp->ev, &tv));
    sp->wprev = NULL;
    sp->wnext = parked;
    if (parked != NULL)
        parked->wprev = sp;
    parked = sp;
}

static void
on_wake(evutil_socket_t fd, short what, void *priv)
{
    struct sess *list, *sp;
    uint64_t v;
    bool stop;

    (void)!read(fd, &v, sizeof v);
    AZ(pthread_mutex_lock(&inbox_mtx));
    list = inbox;
    inbox = NULL;
    stop = inbox_stop;
    AZ(pthread_mutex_unlock(&inbox_mtx));
    while (list != NULL) {
        sp = list;
        list = sp->wnext;
        OBJ_CHECK(sp, SESS_MAGIC);
        park(sp);
    }
    if (stop)
        event_base_loopbreak(wtr_base);
}

static void *
waiter_thread(void *priv)
{
    struct sess *sp;

    stat_thread_enter();
    (void)event_base_dispatch(wtr_base);
    while ((sp = parked) != NULL) {
        unpark(sp);
        sess_close(&sp);
    }
    stat_thread_leave();
    return (NULL);
}

int
wtr_init(void)
{
    wtr_base = event_base_new();
    if (wtr_base == NULL)
        return (-1);
    wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (wake_fd < 0)
        return (-1);
    wake_ev = event_new(wtr_base, wake_fd, EV_READ | EV_PERSIST, on_wake, NULL);
    AN(wake_ev);
    AZ(event_add(wake_ev, NULL));
    AZ(pthread_create(&wtr_thread, NULL, waiter_thread, NULL));
    return (0);
}

static void
wake(void)
{
    uint64_t one = 1;

    (void)!write(wake_fd, &one, sizeof one);
}

void
wtr_fini(void)
{
    struct sess *sp;

    AZ(pthread_mutex_lock(&inbox_mtx));
    inbox_stop = true;
    AZ(pthread_mutex_unlock(&inbox_mtx));
    wake();
    AZ(pthread_join(wtr_thread, NULL));
    /* Sessions posted after the loop ended were never parked. */
    while ((sp = inbox) != NULL) {
        inbox = sp->wnext;
        STAT_DEC(sess_idle);
        sess_close(&sp);
    }
    event_free(wake_ev);
    close(wake_fd);
    event_base_free(wtr_base);
    wtr_base = NULL;
}

void
wtr_enter(struct sess **spp)
{
    struct sess *sp;
    bool was_empty;

    OBJ_TAKE(sp, spp, SESS_MAGIC);
    if (sess_pending(sp)) {
        /*
         * OpenSSL holds decrypted request bytes the socket will never
         * signal again: parked, the session would wait for nothing.
         */
        sess_schedule(&sp);
        return;
    }
    STAT_INC(sess_waited);
    STAT_INC(sess_idle);
    AZ(pthread_mutex_lock(&inbox_mtx));
    was_empty = inbox == NULL;
    sp->wnext = inbox;
    inbox = sp;
    AZ(pthread_mutex_unlock(&inbox_mtx));
    /* One wake-up covers every session queued before the waiter drains the inbox. */
    if (was_empty)
        wake();
}
