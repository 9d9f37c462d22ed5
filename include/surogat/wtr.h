/*
 * wtr -- the waiter: one libevent thread watching idle keep-alive
 * sessions and sessions whose request is still arriving, so that an idle
 * or slow connection costs a few hundred bytes and no thread.  A session
 * joins the waiter's epoll set the first time it parks and stays in it
 * until it closes, so that parking it again costs no system call and
 * wakes nobody; the waiter hands it back to a pool when it turns readable.
 */
#ifndef SUROGAT_WTR_H
#define SUROGAT_WTR_H

#include <stdbool.h>

struct pool_task;
struct sess;

/*
 * A listen socket in the set, accepted from by whoever scans the set and
 * receives its event: a worker taking ready sessions (wtr_take()), or the
 * waiter thread when none takes.  Watched edge-triggered: one event per
 * burst of arrivals, never one per waiting thread.  The receiver calls
 * accept() up to a batch per event; each new session joins the ready
 * queue (the taker runs the first at once) and from there is served or
 * shed as a ready parked session is.  accept() is called by any thread,
 * by several at once, never after wtr_unlisten() returned.
 */
enum wtr_acc {
    WTR_ACC_SESS,  /* *spp is a new session; *deadline its handshake's (tim_mono()) or 0 */
    WTR_ACC_RETRY, /* none this time (aborted, interrupted): ask again */
    WTR_ACC_EMPTY, /* the backlog is empty */
    WTR_ACC_FAIL,  /* cannot accept now (EMFILE ...): asked again at the next arrival or sweep */
};
typedef enum wtr_acc wtr_accept_f(void *priv, struct sess **spp, double *deadline);

struct wtr_lsn {
    unsigned magic;
#define WTR_LSN_MAGIC 0x5e1f20b3
    int fd; /* non-blocking, listening */
    wtr_accept_f *accept;
    void *priv;
    /*
     * New connections taken per event of this listener before the sessions
     * that turned ready meanwhile: 0 for the waiter's default (16).  1 where
     * a new connection's first step is dear (a TLS handshake's first flight,
     * a signature): then a request on an established connection waits behind
     * one such step, not sixteen.
     */
    unsigned batch;
    /* Private to the waiter. */
    unsigned users;       /* receivers inside accept() (atomic) */
    bool closing;         /* wtr_unlisten() began: its events are ignored */
    bool stalled;         /* accept() failed: re-armed by the sweep */
    struct wtr_lsn *next; /* the listeners in the set */
};

int wtr_init(void);
/* Close every parked session and stop the thread. */
void wtr_fini(void);
/*
 * Park an idle session.  When it turns readable (data or EOF) it is
 * scheduled on its pool; after timeout_idle it is closed.  Any thread;
 * never blocks.  Takes ownership.
 */
void wtr_enter(struct sess **spp);
/*
 * Park a session whose request arrived in part, its bytes kept by the
 * session (sess_keep_input()): a slow client then costs those bytes and
 * no worker.  When it turns readable it is scheduled as wtr_enter() does;
 * if it has not by `deadline` (tim_mono()), it is answered 408 and closed
 * (sess_close_timeout()), at most about a second late.  Any thread; never
 * blocks.  Takes ownership.
 */
void wtr_enter_until(struct sess **spp, double deadline);
/*
 * Park a session whose transport serves several requests at once
 * (HTTP/2) and keeps its own state; it may hold its own lock meanwhile
 * (it ranks above the waiter's).  busy: requests are running on it, so it
 * does not expire; else it expires after timeout_idle as wtr_enter()'s
 * do.  When it turns readable its task is scheduled.  The caller has read
 * everything OpenSSL decrypted (sess_pending() is false).  0, or -1 with
 * errno when the waiter is stopping or cannot watch it: then the session
 * is still the caller's.  Never blocks.
 */
int wtr_park(struct sess *sp, bool busy);
/*
 * A session parked busy whose last request ended: from now on it expires
 * as an idle one.  No-op when it is not parked busy (its event came, and
 * its new owner decides).  Any thread, under the same transport lock.
 */
void wtr_rest(struct sess *sp);
/*
 * sp, owned by the caller, is closing: the waiter forgets it, so that an
 * event of its descriptor already taken from the set by another thread
 * finds nothing instead of freed memory.  Called by sess_close() before
 * it closes the descriptor (which takes it out of the set).  Never blocks.
 */
void wtr_forget(struct sess *sp);
/*
 * A worker with nothing queued takes a ready session from the set itself:
 * its pool task (which runs it), or NULL when none turned ready within
 * `wait` seconds (0: do not block).  The pools' idle source.
 */
struct pool_task *wtr_take(double wait);
/*
 * Add a listen socket to the set (after wtr_init()); 0, or -1 with errno.
 * wl, filled in by the caller, stays its until wtr_unlisten() and must
 * stay allocated until the workers and the waiter are stopped: a thread
 * may hold its event a moment longer (and then ignores it).
 */
int wtr_listen(struct wtr_lsn *wl);
/*
 * Take a listen socket out of the set and wait until no thread is inside
 * its accept() (which never blocks): the caller may then close wl->fd.
 * Connections still in its backlog are the caller's to refuse (close).
 */
void wtr_unlisten(struct wtr_lsn *wl);

/*
 * A socket a request waits on without a worker: the answer of the
 * backend it sent a request to.  The owner fills the fields above the
 * line and hands it to wtr_watch(); from then on the waiter owns it
 * until `task` runs or `drop` is called, exactly one of them, once.
 */
struct wtr_watch {
    unsigned magic;
#define WTR_WATCH_MAGIC 0x6a2f93c1
    int fd;                 /* watched for readable (data, EOF, error) */
    double deadline;        /* tim_mono(): by then the task runs, expired */
    struct pool_task *task; /* run on a worker (POOL_PRIO_RESUME when queued) */
    void (*drop)(struct wtr_watch *w); /* the waiter stops: task will never run; no lock held */
    /* -- the waiter's -- */
    bool expired;            /* the deadline came first: the task reads it */
    bool linked;             /* on the deadline list */
    double t_ready;
    struct wtr_watch *next, *prev;
};
/*
 * Watch w->fd, armed once (a socket watched before is simply re-armed).
 * When it turns readable w->task runs on a worker: one taking from the
 * set runs it itself, with no wake-up, or the waiter queues it.  If the
 * deadline comes first (kept to the millisecond by a timer in the set),
 * w->expired is set, the read side of w->fd is shut and the task runs
 * the same way: the socket is not to be read or reused after that.
 * Any thread; never blocks.  0, or -1 with errno when the waiter is
 * stopping or cannot watch the socket: then w is still the caller's.
 */
int wtr_watch(struct wtr_watch *w);
/* Watches whose task has not been handed on yet: SIGTERM drains them with the pools' tasks. */
unsigned wtr_watched(void);

#endif
