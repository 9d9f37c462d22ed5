/*
 * The waiter thread.
 *
 * Parked sessions live in an epoll set of their own ("the set").  A
 * session's descriptor joins it, edge-triggered, the first time the
 * session parks, and stays until it closes: a worker parks a session
 * itself by linking it on the parked list under the lock, with no system
 * call and no wake-up.  (Armed one-shot, every keep-alive request would
 * cost an epoll_ctl(2) to re-arm it.)  The waiter's libevent loop watches
 * the set's descriptor and a sweep timer; when the set turns readable it
 * drains the ready sessions into the pools.
 *
 * Ownership.  A session is owned by one thread at a time, or parked.
 * Its state (sp->wstate, under park_mtx) says which, and every event of
 * its descriptor is judged by it under park_mtx: the receiver of an
 * event of a parked session owns it (claims it); an event of an owned
 * session is not lost but noted (WS_PENDING), and when its owner parks it
 * again it goes straight to the ready queue, as if the event came then.
 * Only the owner may free a session.  Events carry no pointer but a
 * handle, a slot of a table that never shrinks and the slot's generation
 * (a session's slot is taken when it first parks, released by
 * wtr_forget() as it closes): an event another thread took from the set
 * before the session closed finds a newer generation and is dropped, so
 * no stale event reaches freed memory.  An owned session whose input
 * keeps coming (a request body, a tunnel) would wake a scanner for each
 * piece: after a few such events it is taken out of the set
 * (EPOLL_CTL_DEL, sp->wout) and added back when it parks, which reports
 * what is already readable.  The sweep never frees: it marks a session
 * idle for timeout_idle as expired and shuts its read side, which makes
 * the descriptor readable; the event's receiver sees the mark and closes.
 * A worker that parks a session and a sweep that expires it can
 * therefore never both own it, and the sweep walks parked sessions only:
 * an owned one never expires.
 *
 * Taking in batches.  epoll(7) puts events that arrive while another
 * thread scans the set at the front of its ready list, so with several
 * threads taking one event at a time an early session could be overtaken
 * again and again.  Whoever scans therefore takes every ready event at
 * once, claims them all, and queues them on the ready queue, which is
 * served strictly in order.  An eventfd in the set stays readable while
 * that queue holds sessions, so a worker blocked in the set and the
 * waiter see queued work exactly as they see new events.
 *
 * A TLS session is parked only when OpenSSL holds no decrypted bytes
 * (sess_pending()): those would never make the socket readable again.
 * Parked idle, it gives OpenSSL's record buffers back (tls_release()).
 *
 * Deadlines.  An idle session (wtr_enter()) expires timeout_idle after it
 * went idle; as every one shares that timeout, the parked list is in
 * expiry order and the sweep stops at its first live entry.  A session
 * parked half way through a request (wtr_enter_until(): a head or body
 * still arriving, its bytes kept in the session) has a deadline of its
 * own, which no order of parking predicts, so those sessions sit in a
 * binary min-heap on their deadline instead (O(log n) to park, unpark
 * and expire, under the same lock).  The sweep runs when the earliest
 * deadline of either comes, and at least once a second (a deadline set
 * after the sweep was armed may be that late).  A session past its
 * deadline is expired like an idle one, and its event's receiver answers
 * it with sess_close_timeout() (a canned 408, never blocking) rather than
 * a silent close.
 *
 * Listen sockets are in the set too (wtr_listen()), edge-triggered, their
 * events tagged (bit 0 of the pointer) apart from sessions'.  Whoever
 * receives one accepts a batch and queues the new sessions on the ready
 * queue: a worker taking ready sessions then runs the first new
 * connection itself, with no acceptor thread woken to accept it and no
 * sleeping worker woken to serve it, and the waiter thread accepts when
 * no worker takes.  A listener's memory outlives its last event: a thread
 * may hold the event a moment after wtr_unlisten(), which is why the
 * receiver claims it (users) under park_mtx and ignores it once closing.
 *
 * A connection that serves several requests at once (HTTP/2) is parked
 * while its requests run on other workers, so that what it reads next
 * (a new request, a window update they wait for) finds a worker.  Parked
 * busy (wtr_park()) it is on the busy list, which no sweep walks: it
 * cannot expire while its requests run.  wtr_rest() moves it to the
 * parked list when the last one ends.  Its transport calls both with its
 * own lock held, so that lock ranks above park_mtx, and nothing here calls
 * the transport (sess_close()) with park_mtx held.
 *
 * Watches (wtr_watch()).  A request that sent its backend a request
 * waits for the answer without a worker: the backend socket goes into
 * the set like a session, its event's data a struct wtr_watch (told
 * apart from a session by its magic).  A ready watch joins a queue of
 * its own, served before the sessions' (its client has waited already):
 * a taking worker runs its task itself, the waiter queues it at
 * POOL_PRIO_RESUME.  Its deadline is the backend's first byte timeout,
 * which a second late would break, so watches sit on a list in deadline
 * order (a shared timeout appends at the tail) and a timerfd in the set
 * fires at the earliest; whoever receives it expires the watches due as
 * the sweep expires sessions (marked, read side shut: their own event
 * still comes, once, to one receiver).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "surogat/defs.h"
#include "surogat/log.h"
#include "surogat/par.h"
#include "surogat/pool.h"
#include "surogat/sess.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/wtr.h"

#define WTR_BATCH     64
#define WTR_SWEEP_MAX 1.0   /* seconds between sweeps at most: timeout_idle may change */
#define WTR_DEFER     0.001 /* how long the waiter leaves ready sessions to the workers */
#define WTR_DEFER_MAX 0.008 /* the same, at most, while the takers keep taking (on_defer()) */
#define WTR_DEFER_PARTIAL 0.05 /* the same for a partial request's next bytes (see schedule()) */
#define WTR_DEFER_BUSY    0.05 /* the longest a session waits for takers that keep up (on_defer()) */
#define WTR_STUCK_CPU     0.002 /* CPU seconds a taker runs without taking before it is stuck */
/*
 * New connections accepted per listener event unless it says otherwise
 * (wtr_lsn.batch): a flood is shared with the sessions already ready and
 * the other listeners; the listener is re-armed when the batch ends before
 * its backlog does, and its next event comes after those already in the set.
 */
#define WTR_ACCEPT_BATCH 16
#define WTR_LSN_TAG      ((uintptr_t)1)
/* A session's event: this bit, its slot's generation (31 bits) and index (32 bits). */
#define WTR_SESS_TAG ((uint64_t)1 << 63)
#define WTR_GEN_MASK 0x7fffffffu
/* Slots are allocated a chunk at a time and never move (an event may name one any time). */
#define WTR_SLOT_CHUNK  1024u
#define WTR_SLOT_CHUNKS 16384u /* 16M sessions at once */
/* Events of an owned session before it is taken out of the set (a stream of input). */
#define WTR_OWNED_EVENTS_MAX 3

/* A session's state, sp->wstate (under park_mtx). */
enum wtr_state {
    WS_OWNED = 0, /* a thread runs it (new sessions are); its events are noted */
    WS_PENDING,   /* owned, and its descriptor had an event since it was taken */
    WS_PARKED,    /* waiting: its next event's receiver owns it */
};

/* What a session's handle names: the session while it has the slot. */
struct wslot {
    struct sess *sp;    /* NULL when free */
    uint32_t gen;       /* bumped at each release: stale handles do not match */
    uint32_t next_free; /* 1 + index of the next free slot, 0 at the end */
};

static struct event_base *wtr_base;
static struct event *set_ev, *sweep_ev, *stop_ev, *defer_ev;
static int set_fd = -1;
static int ready_fd = -1; /* in the set: readable while the ready queue holds sessions */
static int stop_fd = -1;
static int timer_fd = -1; /* in the set: fires at the earliest watch's deadline */
static const unsigned timer_tag = 0x7e3a11d5; /* its event's data */
static pthread_t wtr_thread;

/* The parked list, oldest first, so that a sweep stops at the first live one. */
static pthread_mutex_t park_mtx = PTHREAD_MUTEX_INITIALIZER;
static struct sess *park_head; /* under park_mtx */
static struct sess *park_tail; /* under park_mtx */
static bool stopping;          /* under park_mtx */
/* The ready queue: claimed sessions in the order their events came (wnext). */
static struct sess *ready_head; /* under park_mtx */
static struct sess *ready_tail; /* under park_mtx */
static bool ready_signaled;     /* under park_mtx: ready_fd is readable */
/* Parked busy (wtr_park()): no expiry, in no particular order. */
static struct sess *busy_head; /* under park_mtx */
static struct sess *busy_tail; /* under park_mtx */
/* Sessions parked with a deadline: a min-heap on sp->wdeadline (sp->wheap is 1 + index). */
static struct sess **heap; /* under park_mtx */
static unsigned heap_len;  /* under park_mtx */
static unsigned heap_cap;  /* under park_mtx */
static struct wtr_lsn *lsns; /* under park_mtx: the listeners in the set */
/* Watches: waiting, in deadline order; ready, in event order. */
static struct wtr_watch *watch_head, *watch_tail;   /* under park_mtx */
static struct wtr_watch *wready_head, *wready_tail; /* under park_mtx */
static double timer_at; /* under park_mtx: what timer_fd is set to, 0 when disarmed */
static unsigned nwatched; /* under park_mtx: watches linked or ready */
/*
 * What the takers did, for the waiter thread to tell takers that keep up
 * from takers that are stuck (takers_look()): sessions and watches taken
 * (wtr_take()), and the thread that took last, its tid and its CPU clock,
 * each set by that thread (atomics; the three may be read a take apart,
 * which costs one look a wrong answer, never more).
 */
static unsigned long taken_seq;
static pid_t taker_tid;
static clockid_t taker_clock;
static __thread pid_t self_tid; /* this thread's tid, once it took */
static __thread clockid_t self_clock;
static double defer_s = WTR_DEFER; /* the waiter thread's: its next look, seconds away */
/* The waiter thread's: what it saw at its last look. */
static struct {
    unsigned long taken;
    pid_t tid;
    double cpu;  /* that thread's CPU time, seconds */
    double idle_cpu; /* of it, spent since the takers last took */
    double t;    /* tim_mono() */
    int stat_fd; /* /proc/self/task/<tid>/stat, -1 until opened */
} seen = { .stat_fd = -1 };
/* The session handles' table. */
static struct wslot *slots[WTR_SLOT_CHUNKS]; /* under park_mtx; chunks never freed */
static unsigned nslots;                      /* under park_mtx: slots allocated */
static unsigned slot_free;                   /* under park_mtx: 1 + first free, 0 none */

static struct wslot *
slot_at(unsigned i)
{
    return (&slots[i / WTR_SLOT_CHUNK][i % WTR_SLOT_CHUNK]);
}

/* Under park_mtx: give sp a slot; false when the table is full. */
static bool
slot_take_locked(struct sess *sp)
{
    struct wslot *ws;
    unsigned i;

    if (slot_free == 0) {
        if (nslots == WTR_SLOT_CHUNK * WTR_SLOT_CHUNKS)
            return (false);
        slots[nslots / WTR_SLOT_CHUNK] = calloc(WTR_SLOT_CHUNK, sizeof(struct wslot));
        AN(slots[nslots / WTR_SLOT_CHUNK]);
        for (i = 0; i < WTR_SLOT_CHUNK; i++)
            slots[nslots / WTR_SLOT_CHUNK][i].next_free = i + 1 < WTR_SLOT_CHUNK
                                                              ? nslots + i + 2
                                                              : 0;
        slot_free = nslots + 1;
        nslots += WTR_SLOT_CHUNK;
    }
    i = slot_free - 1;
    ws = slot_at(i);
    AZ(ws->sp);
    slot_free = ws->next_free;
    ws->sp = sp;
    sp->wslot = i + 1;
    return (true);
}

/* Under park_mtx: sp leaves its slot; events naming it are stale from now on. */
static void
slot_release_locked(struct sess *sp)
{
    struct wslot *ws = slot_at(sp->wslot - 1);

    SRG_ASSERT(ws->sp == sp);
    ws->sp = NULL;
    ws->gen = (ws->gen + 1) & WTR_GEN_MASK;
    ws->next_free = slot_free;
    slot_free = sp->wslot;
    sp->wslot = 0;
    sp->wout = false;
}

/* Under park_mtx: the event data naming sp's slot as it is now. */
static uint64_t
handle_locked(const struct sess *sp)
{
    return (WTR_SESS_TAG | (uint64_t)slot_at(sp->wslot - 1)->gen << 32 | (sp->wslot - 1));
}

/* Under park_mtx: the session a handle names, or NULL when it is stale. */
static struct sess *
handle_sess_locked(uint64_t h)
{
    unsigned i = (unsigned)(h & 0xffffffffu);
    struct wslot *ws;

    if (i >= nslots)
        return (NULL);
    ws = slot_at(i);
    if (ws->sp == NULL || ws->gen != (unsigned)((h >> 32) & WTR_GEN_MASK))
        return (NULL);
    OBJ_CHECK(ws->sp, SESS_MAGIC);
    return (ws->sp);
}

/* Append sp to the list of *headp .. *tailp (the parked list or the ready queue). */
static void
append(struct sess **headp, struct sess **tailp, struct sess *sp)
{
    sp->wprev = *tailp;
    sp->wnext = NULL;
    if (*tailp != NULL)
        (*tailp)->wnext = sp;
    else
        *headp = sp;
    *tailp = sp;
}

static void
link_tail(struct sess *sp)
{
    append(&park_head, &park_tail, sp);
    sp->wparked = true;
}

static void
heap_set(unsigned i, struct sess *sp)
{
    heap[i] = sp;
    sp->wheap = i + 1;
}

/* Move the entry at i up or down until the heap is in order again. */
static void
heap_fix(unsigned i)
{
    struct sess *sp = heap[i];
    unsigned c;

    while (i > 0 && heap[(i - 1) / 2]->wdeadline > sp->wdeadline) {
        heap_set(i, heap[(i - 1) / 2]);
        i = (i - 1) / 2;
    }
    for (;;) {
        c = 2 * i + 1;
        if (c >= heap_len)
            break;
        if (c + 1 < heap_len && heap[c + 1]->wdeadline < heap[c]->wdeadline)
            c++;
        if (heap[c]->wdeadline >= sp->wdeadline)
            break;
        heap_set(i, heap[c]);
        i = c;
    }
    heap_set(i, sp);
}

static void
heap_push(struct sess *sp)
{
    if (heap_len == heap_cap) {
        heap_cap = heap_cap == 0 ? 64 : 2 * heap_cap;
        heap = realloc(heap, heap_cap * sizeof *heap);
        AN(heap);
    }
    heap_set(heap_len++, sp);
    heap_fix(heap_len - 1);
    sp->wparked = true;
}

static void
heap_remove(struct sess *sp)
{
    unsigned i = sp->wheap - 1;

    SRG_ASSERT(i < heap_len && heap[i] == sp);
    sp->wheap = 0;
    sp->wparked = false;
    if (i == --heap_len)
        return;
    heap_set(i, heap[heap_len]);
    heap_fix(i);
}

static void
unlink_from(struct sess **headp, struct sess **tailp, struct sess *sp)
{
    if (sp->wprev != NULL)
        sp->wprev->wnext = sp->wnext;
    else
        *headp = sp->wnext;
    if (sp->wnext != NULL)
        sp->wnext->wprev = sp->wprev;
    else
        *tailp = sp->wprev;
    sp->wnext = sp->wprev = NULL;
}

static void
unlink_parked(struct sess *sp)
{
    if (sp->wbusy) {
        unlink_from(&busy_head, &busy_tail, sp);
        sp->wbusy = false;
        return;
    }
    if (!sp->wparked)
        return;
    if (sp->wheap != 0) {
        heap_remove(sp);
        return;
    }
    unlink_from(&park_head, &park_tail, sp);
    sp->wparked = false;
}

/* Under park_mtx: the receiver of a session's event takes it.  Expired? */
static bool
claim_locked(struct sess *sp)
{
    bool expired;

    if (!sp->wbusy)
        STAT_DEC(sess_idle); /* a busy one was never counted idle */
    unlink_parked(sp);
    sp->wstate = WS_OWNED;
    sp->wowned_events = 0;
    expired = sp->wexpired;
    sp->wexpired = false;
    return (expired);
}

static struct sess *
ready_pop_locked(void)
{
    struct sess *sp = ready_head;

    if (sp == NULL)
        return (NULL);
    ready_head = sp->wnext;
    if (ready_head == NULL)
        ready_tail = NULL;
    sp->wnext = sp->wprev = NULL;
    return (sp);
}

/*
 * Under park_mtx, before it is released: make ready_fd readable exactly
 * while the ready queue holds sessions.  Once per locked section, not per
 * push and pop: a scan that finds one session and hands it straight to
 * its taker then costs no eventfd write and read.
 */
static void
ready_sync_locked(void)
{
    bool want = ready_head != NULL || wready_head != NULL;
    uint64_t v = 1;

    if (want == ready_signaled)
        return;
    if (want)
        (void)!write(ready_fd, &v, sizeof v);
    else
        (void)!read(ready_fd, &v, sizeof v);
    ready_signaled = want;
}

/* Under park_mtx: set timer_fd to fire at `at` (tim_mono()), or disarm it (0). */
static void
timer_set_locked(double at)
{
    struct itimerspec its;
    double ns;

    memset(&its, 0, sizeof its);
    if (at > 0) {
        /* Rounded up: fired early, it would find nothing due and fire again at once. */
        its.it_value.tv_sec = (time_t)at;
        ns = ceil((at - (double)its.it_value.tv_sec) * 1e9);
        its.it_value.tv_nsec = ns > 999999999 ? 999999999 : (long)ns;
        if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0)
            its.it_value.tv_nsec = 1;
    }
    AZ(timerfd_settime(timer_fd, TFD_TIMER_ABSTIME, &its, NULL));
    timer_at = at;
}

static void
watch_unlink_locked(struct wtr_watch *w)
{
    if (w->prev != NULL)
        w->prev->next = w->next;
    else
        watch_head = w->next;
    if (w->next != NULL)
        w->next->prev = w->prev;
    else
        watch_tail = w->prev;
    w->next = w->prev = NULL;
    w->linked = false;
}

/* Under park_mtx: timer_fd fired.  Expire the watches due; set it for the next. */
static void
watch_timer_locked(double now)
{
    struct wtr_watch *w;
    uint64_t v;

    (void)!read(timer_fd, &v, sizeof v); /* EAGAIN when another receiver read it first */
    timer_at = 0;
    while ((w = watch_head) != NULL && w->deadline <= now) {
        watch_unlink_locked(w);
        w->expired = true;
        (void)shutdown(w->fd, SHUT_RD); /* its event comes now, to one receiver */
    }
    if (watch_head != NULL)
        timer_set_locked(watch_head->deadline);
}

/* Under park_mtx: w's event came, to us.  It joins the ready watches. */
static void
watch_claim_locked(struct wtr_watch *w, double now)
{
    OBJ_CHECK(w, WTR_WATCH_MAGIC);
    if (w->linked)
        watch_unlink_locked(w);
    w->t_ready = now;
    w->next = NULL;
    w->prev = wready_tail;
    if (wready_tail != NULL)
        wready_tail->next = w;
    else
        wready_head = w;
    wready_tail = w;
}

static struct wtr_watch *
watch_pop_locked(void)
{
    struct wtr_watch *w = wready_head;

    if (w == NULL)
        return (NULL);
    wready_head = w->next;
    if (wready_head == NULL)
        wready_tail = NULL;
    w->next = w->prev = NULL;
    nwatched--;
    return (w);
}

/*
 * Under park_mtx: an event of a session a thread owns.  Noted, for its
 * owner's next park; after a few it is taken out of the set, so that a
 * stream of input (a body, a tunnel) does not wake a scanner per piece.
 * Its owner cannot close it meanwhile: wtr_forget() waits for park_mtx,
 * so sp->fd is still its descriptor.
 */
static void
owned_event_locked(struct sess *sp)
{
    sp->wstate = WS_PENDING;
    if (sp->wout || ++sp->wowned_events < WTR_OWNED_EVENTS_MAX)
        return;
    (void)epoll_ctl(set_fd, EPOLL_CTL_DEL, sp->fd, NULL);
    sp->wout = true;
    STAT_INC(sess_wtr_out);
}

/*
 * Under park_mtx: claim the sessions of one scan of the set.  Live ones
 * join the ready queue in event order; expired ones go on *closep for the
 * caller to close outside the lock.  Listeners with an event go in lv
 * (*nlp of them), claimed: the caller accepts (accept_from()).  Watches
 * join theirs.
 */
static void
collect_locked(const struct epoll_event *evs, int n, struct sess **closep, struct wtr_lsn **lv,
               int *nlp)
{
    double now = tim_mono();
    struct wtr_lsn *wl;
    struct sess *sp;

    *nlp = 0;
    for (int i = 0; i < n; i++) {
        if ((evs[i].data.u64 & WTR_SESS_TAG) != 0) {
            sp = handle_sess_locked(evs[i].data.u64);
            if (sp == NULL)
                continue; /* closed since this scan: its slot moved on */
            if (sp->wstate != WS_PARKED) {
                owned_event_locked(sp);
                continue;
            }
            if (claim_locked(sp)) {
                sp->wnext = *closep;
                *closep = sp;
            } else {
                sp->t_ready = now;
                append(&ready_head, &ready_tail, sp);
            }
            continue;
        }
        if ((evs[i].data.u64 & WTR_LSN_TAG) != 0) {
            wl = (struct wtr_lsn *)(uintptr_t)(evs[i].data.u64 & ~(uint64_t)WTR_LSN_TAG);
            OBJ_CHECK(wl, WTR_LSN_MAGIC);
            if (wl->closing)
                continue; /* taken out of the set since this scan */
            __atomic_add_fetch(&wl->users, 1, __ATOMIC_ACQ_REL);
            lv[(*nlp)++] = wl;
            continue;
        }
        sp = evs[i].data.ptr;
        if (sp == NULL)
            continue; /* ready_fd: the queue itself */
        if (evs[i].data.ptr == &timer_tag) {
            watch_timer_locked(now);
            continue;
        }
        watch_claim_locked(evs[i].data.ptr, now);
    }
}

/* Close the sessions of a list (wnext) built outside the lock. */
static void
close_list(struct sess *list)
{
    struct sess *sp;

    while ((sp = list) != NULL) {
        list = sp->wnext;
        sp->wnext = NULL;
        sess_close(&sp);
    }
}

static void
close_expired(struct sess *list)
{
    struct sess *sp;

    while ((sp = list) != NULL) {
        list = sp->wnext;
        sp->wnext = NULL;
        if (sp->wdeadline > 0) {
            sess_close_timeout(&sp); /* a request too slow to arrive: 408 */
            continue;
        }
        STAT_INC(sess_timeout_idle);
        sess_close(&sp);
    }
}

/* Queue an event for wl if it is (still) readable: an edge-triggered MOD looks again. */
static void
lsn_rearm(struct wtr_lsn *wl)
{
    struct epoll_event e = { .events = EPOLLIN | EPOLLET };

    e.data.u64 = (uint64_t)(uintptr_t)wl | WTR_LSN_TAG;
    (void)epoll_ctl(set_fd, EPOLL_CTL_MOD, wl->fd, &e);
}

/*
 * Accept from the listeners claimed by one scan (collect_locked()), up to
 * a batch each, and release them.  The new sessions join the ready queue
 * in order; with `take`, the head of that queue is popped for the caller
 * in the same locked section (NULL when empty).  While stopping, the new
 * sessions are closed instead.
 */
static struct sess *
accept_from(struct wtr_lsn **lv, int nl, bool take)
{
    struct sess *list = NULL, **tail = &list, *sp, *closing = NULL;
    enum wtr_acc r = WTR_ACC_EMPTY;
    double now, deadline;
    int k;

    for (int i = 0; i < nl; i++) {
        int batch = lv[i]->batch > 0 ? (int)lv[i]->batch : WTR_ACCEPT_BATCH;

        for (k = 0; k < batch; k++) {
            sp = NULL;
            deadline = 0;
            r = lv[i]->accept(lv[i]->priv, &sp, &deadline);
            if (r == WTR_ACC_RETRY)
                continue;
            if (r != WTR_ACC_SESS)
                break;
            OBJ_CHECK(sp, SESS_MAGIC);
            sp->wdeadline = deadline;
            *tail = sp;
            tail = &sp->wnext;
        }
        /* Its fd stays open while we are a user: wtr_unlisten() waits for us. */
        if (k == batch)
            lsn_rearm(lv[i]);
        else if (r == WTR_ACC_FAIL)
            __atomic_store_n(&lv[i]->stalled, true, __ATOMIC_RELEASE);
        __atomic_sub_fetch(&lv[i]->users, 1, __ATOMIC_ACQ_REL);
    }
    if (list == NULL && !take)
        return (NULL);
    now = tim_mono();
    AZ(pthread_mutex_lock(&park_mtx));
    while ((sp = list) != NULL) {
        list = sp->wnext;
        sp->wnext = NULL;
        if (stopping) {
            sp->wnext = closing;
            closing = sp;
            continue;
        }
        sp->t_ready = now;
        append(&ready_head, &ready_tail, sp);
    }
    sp = take && !stopping ? ready_pop_locked() : NULL;
    ready_sync_locked();
    AZ(pthread_mutex_unlock(&park_mtx));
    close_list(closing);
    return (sp);
}

/*
 * Whether workers are taking ready sessions themselves: a slot holder is
 * running or blocked in the set, and will ask again.  Then the waiter
 * stays out of the way; otherwise every ready session would go through a
 * pool hand-off and wake a thread of its own.
 */
static bool
takers_active(void)
{
    return (pool_takers() > 0);
}

/*
 * Hand a ready session to its pool; false when it stays in the ready
 * queue.  A session whose request is arriving in part is cheap to serve
 * (a non-blocking read and a parse) but may turn ready with thousands of
 * others in the same millisecond, so it is treated apart.  While workers
 * take sessions themselves (*takers) it is left to them for up to
 * WTR_DEFER_PARTIAL: queued tasks would have the pool start threads for
 * work the running ones finish in microseconds.  With no taker about,
 * one such session goes to the pool and wakes a worker, which then takes
 * the others.  It goes at background priority, with a quota of its own,
 * so as not to take the place of a complete request in the queue, and is
 * never refused with a 503 like one: when that quota is full it waits in
 * the ready queue.
 */
static bool
schedule(struct sess *sp, double now, bool *takers)
{
    if (sp->wdeadline > 0) {
        if (*takers && now - sp->t_ready < WTR_DEFER_PARTIAL)
            return (false);
        if (sp->tls_new) {
            /* A new client, not one half served: refused (closed) when the queue is full. */
            sess_schedule(&sp);
            *takers = true;
            return (true);
        }
        if (pool_submit(sp->pool, &sp->task, POOL_PRIO_BG) != 0)
            return (false);
        *takers = true;
        return (true);
    }
    sess_schedule(&sp);
    return (true);
}

/*
 * Hand sessions to the pools: from one scan of the set and the ready
 * queue, those ready since `before` or earlier (all of them for +inf).
 * True when some stay, back at the front of the ready queue: the caller
 * looks again after WTR_DEFER rather than spin.
 */
static bool
dispatch(double before)
{
    struct epoll_event evs[WTR_BATCH];
    struct sess *sp, *list = NULL, **tail = &list, *expired, *back = NULL, *blast = NULL;
    struct wtr_lsn *lv[WTR_BATCH];
    struct wtr_watch *w, *wlist = NULL;
    bool takers = takers_active(), wstay;
    double now = tim_mono();
    int n, nl;

    do {
        expired = NULL;
        n = epoll_wait(set_fd, evs, WTR_BATCH, 0);
        AZ(pthread_mutex_lock(&park_mtx));
        collect_locked(evs, n, &expired, lv, &nl);
        if (nl > 0) {
            /* New connections first, so that they are dispatched with the rest. */
            ready_sync_locked();
            AZ(pthread_mutex_unlock(&park_mtx));
            (void)accept_from(lv, nl, false);
            AZ(pthread_mutex_lock(&park_mtx));
        }
        while (ready_head != NULL && ready_head->t_ready <= before) {
            sp = ready_pop_locked();
            *tail = sp;
            tail = &sp->wnext;
        }
        while (wready_head != NULL && wready_head->t_ready <= before) {
            w = watch_pop_locked();
            w->next = wlist;
            wlist = w;
        }
        wstay = wready_head != NULL;
        ready_sync_locked();
        AZ(pthread_mutex_unlock(&park_mtx));
        close_expired(expired);
    } while (n == WTR_BATCH);
    /* Newest first on wlist: the pool's queue is FIFO, so submit in reverse. */
    for (struct wtr_watch *rev = NULL; wlist != NULL || rev != NULL;) {
        if (wlist != NULL) {
            w = wlist;
            wlist = w->next;
            w->next = rev;
            rev = w;
            continue;
        }
        w = rev;
        rev = w->next;
        w->next = NULL;
        if (pool_submit(pool_pick(), w->task, POOL_PRIO_RESUME) != 0)
            w->drop(w); /* the pool shuts down */
    }
    while ((sp = list) != NULL) {
        list = sp->wnext;
        sp->wnext = NULL;
        /*
         * Readable may also mean the client hung up; the worker's read
         * finds out.  Peeking here would cost a syscall on every request
         * to spare a worker wake-up once per connection.
         */
        if (back == NULL && schedule(sp, now, &takers))
            continue;
        /* Kept, or after one kept: back in order, in front of the queue. */
        if (back == NULL)
            back = sp;
        else
            blast->wnext = sp;
        blast = sp;
    }
    if (back == NULL)
        return (wstay);
    AZ(pthread_mutex_lock(&park_mtx));
    blast->wnext = ready_head;
    if (ready_head == NULL)
        ready_tail = blast;
    ready_head = back;
    ready_sync_locked();
    AZ(pthread_mutex_unlock(&park_mtx));
    return (true);
}

/* The set stays readable while sessions wait: look again in defer_s, not at once. */
static void
defer(void)
{
    struct timeval tv = { 0, (suseconds_t)(defer_s * 1e6) };

    AZ(event_del(set_ev));
    AZ(evtimer_add(defer_ev, &tv));
}

/* The scheduler state of thread `tid` of ours ('R' runnable, 'S' asleep ...), '?' if unknown. */
static char
thread_state(pid_t tid)
{
    char path[64], buf[512], *p;
    ssize_t n;

    if (tid != seen.tid && seen.stat_fd >= 0) {
        (void)close(seen.stat_fd);
        seen.stat_fd = -1;
    }
    if (seen.stat_fd < 0) {
        (void)snprintf(path, sizeof path, "/proc/self/task/%d/stat", (int)tid);
        seen.stat_fd = open(path, O_RDONLY | O_CLOEXEC);
        if (seen.stat_fd < 0)
            return ('?');
    }
    n = pread(seen.stat_fd, buf, sizeof buf - 1, 0);
    if (n <= 0)
        return ('?');
    buf[n] = '\0';
    p = strrchr(buf, ')'); /* after the command name, which may hold anything */
    return (p != NULL && p[1] == ' ' ? p[2] : '?');
}

enum takers {
    TAKERS_NONE,      /* no worker holds a taker slot */
    TAKERS_KEEP_UP,   /* they took since the last look */
    TAKERS_PREEMPTED, /* they took nothing, and the last one waits for a CPU */
    TAKERS_STUCK,     /* they took nothing, and the last one works or sleeps */
};

/*
 * Under the waiter thread: what the takers did since the last look.  A
 * taker that took nothing is stuck if it ran WTR_STUCK_CPU since it last
 * took (work that takes long and never blocks: a long policy script) or
 * sleeps (blocked without vio_blocking(), which would have given its slot
 * back: a page fault on a slow disk); one runnable without running is only
 * preempted by other processes, and a session handed to another worker
 * would wait for the same CPU beside it.
 */
static enum takers
takers_look(void)
{
    unsigned long taken = __atomic_load_n(&taken_seq, __ATOMIC_RELAXED);
    pid_t tid = __atomic_load_n(&taker_tid, __ATOMIC_RELAXED);
    clockid_t clk = __atomic_load_n(&taker_clock, __ATOMIC_RELAXED);
    double now = tim_mono(), cpu = -1;
    struct timespec ts;
    enum takers r;

    if (tid != 0 && clock_gettime(clk, &ts) == 0)
        cpu = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
    if (!takers_active())
        r = TAKERS_NONE;
    else if (taken != seen.taken || tid != seen.tid)
        r = TAKERS_KEEP_UP;
    else if (cpu < 0 || (seen.idle_cpu += cpu - seen.cpu) >= WTR_STUCK_CPU ||
             thread_state(tid) != 'R')
        r = TAKERS_STUCK; /* also a taker thread gone: nothing to wait for */
    else
        r = TAKERS_PREEMPTED;
    if (r != TAKERS_STUCK && r != TAKERS_PREEMPTED)
        seen.idle_cpu = 0;
    if (tid != seen.tid)
        (void)thread_state(tid); /* reopened for the new one now, not at the next look */
    seen.taken = taken;
    seen.tid = tid;
    seen.cpu = cpu;
    seen.t = now;
    return (r);
}

/*
 * The deferral ends.  While the takers keep taking, or wait for a CPU,
 * the ready queue stays theirs, however long it is: they serve it in
 * order, one per CPU the process may use, and a session handed to another
 * worker now would run on those same CPUs beside them.  The scheduler
 * would then slice the CPU between request workers, and a request
 * preempted half way waits out the others' slices: every request finishes
 * later, none sooner (with the daemon on one core this was the tail of
 * the latency distribution).  Only a session that waited WTR_DEFER_BUSY
 * goes to the pool regardless, where a full queue sheds it (503) rather
 * than let the ready queue grow without bound.  Takers that are stuck, or
 * none at all (a taker that blocks gives its slot back): what waited
 * WTR_DEFER or longer goes to other workers, younger ones stay.
 */
static void
on_defer(evutil_socket_t fd, short what, void *priv)
{
    double before = INFINITY;
    enum takers r = takers_look();

    (void)fd;
    (void)what;
    (void)priv;
    STAT_INC(wtr_looks);
    /*
     * Each look wakes this thread, which preempts a taker sharing its CPU:
     * two context switches, and the taker's caches partly refilled after
     * (at a look a millisecond, most of a busy server's context switches).
     * Takers that took since the last look are looked at half as often
     * each time, down to one look in WTR_DEFER_MAX; any other answer brings
     * the next look back to WTR_DEFER.  A taker stuck just after it took is
     * then found within two looks, 2 * WTR_DEFER_MAX at worst.
     */
    defer_s = r == TAKERS_KEEP_UP ? fmin(2 * defer_s, WTR_DEFER_MAX) : WTR_DEFER;
    switch (r) {
    case TAKERS_NONE:
        break;
    case TAKERS_STUCK:
        before = tim_mono() - WTR_DEFER;
        break;
    case TAKERS_KEEP_UP:
    case TAKERS_PREEMPTED:
        before = tim_mono() - WTR_DEFER_BUSY;
        break;
    }
    if (dispatch(before)) {
        defer();
        return;
    }
    AZ(event_add(set_ev, NULL));
}

static void
on_ready(evutil_socket_t fd, short what, void *priv)
{
    (void)fd;
    (void)what;
    (void)priv;
    if (takers_active()) {
        /*
         * Look again in a moment: the set stays readable, so leaving the
         * event armed would spin.  After a quiet spell, at WTR_DEFER: what
         * the takers did before it says nothing of them now.
         */
        if (tim_mono() - seen.t > WTR_DEFER_MAX)
            defer_s = WTR_DEFER;
        (void)takers_look(); /* what the next look compares with */
        defer();
        STAT_INC(wtr_deferred);
        return;
    }
    if (dispatch(INFINITY))
        defer();
}

static void
arm_sweep(double delay)
{
    struct timeval tv;

    if (delay < 0.001)
        delay = 0.001;
    if (delay > WTR_SWEEP_MAX)
        delay = WTR_SWEEP_MAX;
    tv.tv_sec = (time_t)delay;
    tv.tv_usec = (suseconds_t)((delay - (double)tv.tv_sec) * 1e6);
    AZ(evtimer_add(sweep_ev, &tv));
}

/*
 * Under park_mtx: sp is past its time.  Until its event is claimed the
 * session cannot be freed, so sp->fd is still its descriptor.  A shut
 * read side is readable, and the write side stays open for a clean close
 * (and the 408 of a deadline).
 */
static void
expire_locked(struct sess *sp)
{
    unlink_parked(sp);
    sp->wexpired = true;
    (void)shutdown(sp->fd, SHUT_RD);
}

static void
on_sweep(evutil_socket_t fd, short what, void *priv)
{
    double now = tim_mono(), tmo = par.timeout_idle, next = tmo;
    struct sess *sp;

    (void)fd;
    (void)what;
    (void)priv;
    AZ(pthread_mutex_lock(&park_mtx));
    while ((sp = park_head) != NULL) {
        if (sp->t_idle + tmo > now) {
            next = sp->t_idle + tmo - now;
            break;
        }
        expire_locked(sp);
    }
    while (heap_len > 0) {
        sp = heap[0];
        if (sp->wdeadline > now) {
            if (sp->wdeadline - now < next)
                next = sp->wdeadline - now;
            break;
        }
        expire_locked(sp);
    }
    /* A listener accept() failed on (EMFILE ...): look at its backlog again. */
    for (struct wtr_lsn *wl = lsns; wl != NULL; wl = wl->next)
        if (__atomic_exchange_n(&wl->stalled, false, __ATOMIC_ACQ_REL))
            lsn_rearm(wl);
    AZ(pthread_mutex_unlock(&park_mtx));
    arm_sweep(next);
}

static void
on_stop(evutil_socket_t fd, short what, void *priv)
{
    uint64_t v;

    (void)what;
    (void)priv;
    (void)!read(fd, &v, sizeof v);
    event_base_loopbreak(wtr_base);
}

static void *
waiter_thread(void *priv)
{
    (void)priv;
    stat_thread_enter();
    (void)event_base_dispatch(wtr_base);
    stat_thread_leave();
    return (NULL);
}

int
wtr_init(void)
{
    wtr_base = event_base_new();
    if (wtr_base == NULL)
        return (-1);
    if (set_fd < 0)
        set_fd = epoll_create1(EPOLL_CLOEXEC);
    if (set_fd < 0)
        return (-1);
    if (ready_fd < 0) {
        struct epoll_event e = { .events = EPOLLIN, .data.ptr = NULL };

        ready_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (ready_fd < 0 || epoll_ctl(set_fd, EPOLL_CTL_ADD, ready_fd, &e) != 0)
            return (-1);
    }
    if (timer_fd < 0) {
        struct epoll_event e = { .events = EPOLLIN, .data.ptr = (void *)(uintptr_t)&timer_tag };

        timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
        if (timer_fd < 0 || epoll_ctl(set_fd, EPOLL_CTL_ADD, timer_fd, &e) != 0)
            return (-1);
    }
    stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (stop_fd < 0)
        return (-1);
    stopping = false;
    defer_s = WTR_DEFER;
    set_ev = event_new(wtr_base, set_fd, EV_READ | EV_PERSIST, on_ready, NULL);
    stop_ev = event_new(wtr_base, stop_fd, EV_READ | EV_PERSIST, on_stop, NULL);
    sweep_ev = evtimer_new(wtr_base, on_sweep, NULL);
    defer_ev = evtimer_new(wtr_base, on_defer, NULL);
    AN(defer_ev);
    AN(set_ev);
    AN(stop_ev);
    AN(sweep_ev);
    AZ(event_add(set_ev, NULL));
    AZ(event_add(stop_ev, NULL));
    arm_sweep(par.timeout_idle);
    AZ(pthread_create(&wtr_thread, NULL, waiter_thread, NULL));
    return (0);
}

void
wtr_fini(void)
{
    uint64_t one = 1;
    struct sess *sp, *closing = NULL;
    struct wtr_watch *w, *dropping = NULL;

    AZ(pthread_mutex_lock(&park_mtx));
    stopping = true;
    AZ(pthread_mutex_unlock(&park_mtx));
    (void)!write(stop_fd, &one, sizeof one);
    AZ(pthread_join(wtr_thread, NULL));
    /*
     * Nobody receives events any more (the workers are idle, the thread
     * is gone), so every parked session is ours to close, outside the
     * lock: closing one may call its transport (see above).
     */
    AZ(pthread_mutex_lock(&park_mtx));
    while ((sp = park_head) != NULL || (sp = busy_head) != NULL ||
           (sp = heap_len > 0 ? heap[0] : NULL) != NULL) {
        (void)claim_locked(sp);
        sp->wnext = closing;
        closing = sp;
    }
    free(heap);
    heap = NULL;
    heap_len = heap_cap = 0;
    while ((sp = ready_pop_locked()) != NULL) {
        sp->wnext = closing;
        closing = sp;
    }
    while ((w = watch_head) != NULL || (w = watch_pop_locked()) != NULL) {
        if (w->linked) {
            watch_unlink_locked(w);
            nwatched--;
        }
        w->next = dropping;
        dropping = w;
    }
    if (timer_at > 0)
        timer_set_locked(0);
    ready_sync_locked();
    AZ(pthread_mutex_unlock(&park_mtx));
    while ((w = dropping) != NULL) {
        dropping = w->next;
        w->next = NULL;
        w->drop(w);
    }
    close_list(closing);
    event_free(set_ev);
    event_free(stop_ev);
    event_free(sweep_ev);
    event_free(defer_ev);
    /*
     * set_fd and ready_fd stay open: a worker of a pool still shutting
     * down may be about to wait in the set (and will find nothing), and a
     * closed number could meanwhile name another file.  The process exits
     * next.
     */
    close(stop_fd);
    stop_fd = -1;
    if (seen.stat_fd >= 0)
        (void)close(seen.stat_fd);
    memset(&seen, 0, sizeof seen);
    seen.stat_fd = -1;
    event_base_free(wtr_base);
    wtr_base = NULL;
}

/*
 * Arm a watch's one-shot event, its data `ptr`, with `op`; false if the
 * set refused it.  From the epoll_ctl(2) on the event may fire and
 * another thread own what ptr points to, so nothing reads it after.
 */
static bool
arm(int fd, void *ptr, int op)
{
    struct epoll_event e;

    memset(&e, 0, sizeof e);
    e.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
    e.data.ptr = ptr;
    if (epoll_ctl(set_fd, op, fd, &e) == 0)
        return (true);
    /* A registration we did not expect either way: try the other verb. */
    if (errno == ENOENT || errno == EEXIST) {
        op = op == EPOLL_CTL_MOD ? EPOLL_CTL_ADD : EPOLL_CTL_MOD;
        if (epoll_ctl(set_fd, op, fd, &e) == 0)
            return (true);
    }
    return (false);
}

/* What parking a session takes (settle_locked()). */
enum wtr_settle {
    SETTLE_PARKED, /* nothing more: it is in the set and waits */
    SETTLE_ADD,    /* add its descriptor to the set after unlocking */
    SETTLE_MOD,    /* look at its descriptor again after unlocking (sp->rx_more) */
    SETTLE_READY,  /* an event came while it was owned: it is on the ready queue */
    SETTLE_FAIL,   /* no slot for it (errno): unlinked again, still the caller's */
};

/*
 * Under park_mtx, sp just linked where it waits (its owner's last touch
 * but the system call SETTLE_ADD or SETTLE_MOD asks for): it is parked
 * now.  A session not in the set (new, or taken out while owned) goes
 * in: *add gets its handle, and adding it reports what is readable
 * already.  One with an event while it was owned is ready at once:
 * claimed back and queued, as its event would have done a moment later.
 * One whose last read may have left bytes in the socket (a body read to
 * its length, TLS) is looked at again with EPOLL_CTL_MOD, which reports
 * them.  Otherwise nothing: the common case, a keep-alive session whose
 * last read emptied the socket, costs no system call -- any byte that
 * arrived since made an event, noted as pending or to come.
 */
static enum wtr_settle
settle_locked(struct sess *sp, uint64_t *add)
{
    bool add_it = sp->wout || sp->wslot == 0;

    if (sp->wslot == 0 && !slot_take_locked(sp)) {
        (void)claim_locked(sp);
        errno = ENFILE;
        return (SETTLE_FAIL);
    }
    sp->wout = false;
    if (add_it) {
        sp->wstate = WS_PARKED;
        sp->wowned_events = 0;
        *add = handle_locked(sp);
        return (SETTLE_ADD);
    }
    if (sp->wstate == WS_PENDING) {
        (void)claim_locked(sp);
        sp->t_ready = tim_mono();
        append(&ready_head, &ready_tail, sp);
        ready_sync_locked();
        STAT_INC(sess_wtr_pending);
        return (SETTLE_READY);
    }
    sp->wstate = WS_PARKED;
    sp->wowned_events = 0;
    if (sp->rx_more) {
        /* Bytes may wait in the socket that no edge will report: look again. */
        *add = handle_locked(sp);
        return (SETTLE_MOD);
    }
    return (SETTLE_PARKED);
}

/*
 * Add a parked session's descriptor to the set (SETTLE_ADD), or have the
 * set look at it again (SETTLE_MOD), edge-triggered, its data the handle
 * `h`; either reports a descriptor readable already.  False if the set
 * refused it.  From the epoll_ctl(2) on an event may come and another
 * thread own the session, so nothing reads it after.
 */
static bool
add_sess(int fd, uint64_t h, enum wtr_settle st)
{
    struct epoll_event e;

    memset(&e, 0, sizeof e);
    e.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
    e.data.u64 = h;
    return (epoll_ctl(set_fd, st == SETTLE_ADD ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &e) == 0);
}

/*
 * The set refused sp (it is parked, but no event will ever come for it,
 * so it is still ours): take it back.  The caller closes it or keeps it.
 */
static void
add_failed(struct sess *sp, int err)
{
    AZ(pthread_mutex_lock(&park_mtx));
    (void)claim_locked(sp);
    slot_release_locked(sp);
    AZ(pthread_mutex_unlock(&park_mtx));
    log_msg(LOG_WARNING, "waiter: cannot watch a session: %s", strerror(err));
}

/* Park sp: on the idle list (deadline 0) or on the deadline heap. */
static void
park(struct sess *sp, double deadline)
{
    enum wtr_settle st;
    uint64_t h = 0;
    int fd = sp->fd;

    /* Still ours: an idle TLS session holds no record buffers while it waits. */
    sess_tls_release(sp);
    AZ(pthread_mutex_lock(&park_mtx));
    if (stopping) {
        AZ(pthread_mutex_unlock(&park_mtx));
        sess_close(&sp);
        return;
    }
    sp->wdeadline = deadline;
    if (deadline > 0)
        heap_push(sp);
    else
        link_tail(sp);
    STAT_INC(sess_idle);
    st = settle_locked(sp, &h);
    AZ(pthread_mutex_unlock(&park_mtx));
    if (st == SETTLE_FAIL) {
        log_msg(LOG_WARNING, "waiter: cannot watch a session: %s", strerror(errno));
        sess_close(&sp);
        return;
    }
    if ((st != SETTLE_ADD && st != SETTLE_MOD) || add_sess(fd, h, st))
        return;
    add_failed(sp, errno);
    sess_close(&sp);
}

void
wtr_enter(struct sess **spp)
{
    struct sess *sp;

    OBJ_TAKE(sp, spp, SESS_MAGIC);
    if (sess_pending(sp)) {
        /*
         * Request bytes already read -- kept by the session, or decrypted
         * by OpenSSL -- which the socket will never signal again: parked,
         * the session would wait for nothing.
         */
        sess_schedule(&sp);
        return;
    }
    STAT_INC(sess_waited);
    park(sp, 0);
}

void
wtr_enter_until(struct sess **spp, double deadline)
{
    struct sess *sp;

    OBJ_TAKE(sp, spp, SESS_MAGIC);
    SRG_ASSERT(deadline > 0);
    /* Kept bytes are the incomplete request itself: only decrypted ones mean "ready". */
    if (sess_tls_pending(sp)) {
        sess_schedule(&sp);
        return;
    }
    STAT_INC(sess_wait_partial);
    park(sp, deadline);
}

int
wtr_park(struct sess *sp, bool busy)
{
    enum wtr_settle st;
    uint64_t h = 0;
    int err, fd = sp->fd;

    OBJ_CHECK(sp, SESS_MAGIC);
    /* Its requests will write soon: only an idle connection lets its buffers go. */
    if (!busy)
        sess_tls_release(sp);
    AZ(pthread_mutex_lock(&park_mtx));
    if (stopping) {
        AZ(pthread_mutex_unlock(&park_mtx));
        errno = ESHUTDOWN;
        return (-1);
    }
    sp->wdeadline = 0;
    if (busy) {
        append(&busy_head, &busy_tail, sp);
        sp->wbusy = true;
    } else {
        link_tail(sp);
        STAT_INC(sess_idle);
    }
    st = settle_locked(sp, &h);
    AZ(pthread_mutex_unlock(&park_mtx));
    if (st == SETTLE_FAIL) {
        err = errno;
        log_msg(LOG_WARNING, "waiter: cannot watch a session: %s", strerror(err));
        errno = err;
        return (-1);
    }
    STAT_INC(sess_waited);
    if ((st != SETTLE_ADD && st != SETTLE_MOD) || add_sess(fd, h, st))
        return (0);
    err = errno;
    add_failed(sp, err);
    errno = err;
    return (-1);
}

void
wtr_rest(struct sess *sp)
{
    OBJ_CHECK(sp, SESS_MAGIC);
    AZ(pthread_mutex_lock(&park_mtx));
    /* Not busy any more: its event came (its new owner decides), or it was never parked busy. */
    if (sp->wbusy) {
        unlink_from(&busy_head, &busy_tail, sp);
        sp->wbusy = false;
        sp->t_idle = tim_mono();
        link_tail(sp);
        STAT_INC(sess_idle);
    }
    AZ(pthread_mutex_unlock(&park_mtx));
}

void
wtr_forget(struct sess *sp)
{
    OBJ_CHECK(sp, SESS_MAGIC);
    /* Never parked: no event ever named it.  (wslot is set by its owner's park, so ours.) */
    if (sp->wslot == 0)
        return;
    AZ(pthread_mutex_lock(&park_mtx));
    SRG_ASSERT(sp->wstate != WS_PARKED);
    slot_release_locked(sp);
    AZ(pthread_mutex_unlock(&park_mtx));
}

struct pool_task *
wtr_take(double wait)
{
    struct epoll_event evs[WTR_BATCH];
    int n, nl, ms = wait > 0 ? (int)(wait * 1e3 + 0.5) : 0;
    struct wtr_lsn *lv[WTR_BATCH];
    struct sess *sp, *expired;
    struct wtr_watch *w;

    for (;;) {
        AZ(pthread_mutex_lock(&park_mtx));
        /* Stopping: wtr_fini() closes what is parked or queued. */
        w = stopping ? NULL : watch_pop_locked();
        sp = stopping || w != NULL ? NULL : ready_pop_locked();
        ready_sync_locked();
        AZ(pthread_mutex_unlock(&park_mtx));
        if (w != NULL || sp != NULL)
            break;
        n = epoll_wait(set_fd, evs, WTR_BATCH, ms);
        if (n <= 0)
            return (NULL);
        expired = NULL;
        AZ(pthread_mutex_lock(&park_mtx));
        if (stopping) {
            AZ(pthread_mutex_unlock(&park_mtx));
            return (NULL);
        }
        collect_locked(evs, n, &expired, lv, &nl);
        w = nl > 0 ? NULL : watch_pop_locked();
        sp = nl > 0 || w != NULL ? NULL : ready_pop_locked();
        ready_sync_locked();
        AZ(pthread_mutex_unlock(&park_mtx));
        close_expired(expired);
        if (w != NULL)
            break;
        /* A new connection: accepted and served here, with no thread woken for it. */
        if (nl > 0)
            sp = accept_from(lv, nl, true);
        if (sp != NULL)
            break;
        /* Only expired sessions, or another worker emptied the queue first. */
    }
    if (self_tid == 0) {
        self_tid = gettid();
        AZ(pthread_getcpuclockid(pthread_self(), &self_clock));
    }
    if (__atomic_load_n(&taker_tid, __ATOMIC_RELAXED) != self_tid) {
        __atomic_store_n(&taker_clock, self_clock, __ATOMIC_RELAXED);
        __atomic_store_n(&taker_tid, self_tid, __ATOMIC_RELAXED);
    }
    __atomic_add_fetch(&taken_seq, 1, __ATOMIC_RELAXED);
    if (w != NULL)
        return (w->task);
    STAT_INC(sess_taken);
    if (ms > 0)
        STAT_INC(sess_linger_hit);
    return (&sp->task);
}

int
wtr_listen(struct wtr_lsn *wl)
{
    struct epoll_event e = { .events = EPOLLIN | EPOLLET };

    OBJ_CHECK(wl, WTR_LSN_MAGIC);
    AN(wl->accept);
    SRG_ASSERT(((uintptr_t)wl & WTR_LSN_TAG) == 0);
    wl->users = 0;
    wl->closing = false;
    wl->stalled = false;
    e.data.u64 = (uint64_t)(uintptr_t)wl | WTR_LSN_TAG;
    AZ(pthread_mutex_lock(&park_mtx));
    if (epoll_ctl(set_fd, EPOLL_CTL_ADD, wl->fd, &e) != 0) {
        AZ(pthread_mutex_unlock(&park_mtx));
        return (-1);
    }
    wl->next = lsns;
    lsns = wl;
    AZ(pthread_mutex_unlock(&park_mtx));
    return (0);
}

void
wtr_unlisten(struct wtr_lsn *wl)
{
    struct wtr_lsn **wp;

    OBJ_CHECK(wl, WTR_LSN_MAGIC);
    AZ(pthread_mutex_lock(&park_mtx));
    for (wp = &lsns; *wp != NULL && *wp != wl; wp = &(*wp)->next)
        continue;
    if (*wp == NULL) {
        AZ(pthread_mutex_unlock(&park_mtx));
        return; /* never listened, or already out */
    }
    *wp = wl->next;
    wl->next = NULL;
    wl->closing = true;
    (void)epoll_ctl(set_fd, EPOLL_CTL_DEL, wl->fd, NULL);
    AZ(pthread_mutex_unlock(&park_mtx));
    /* Receivers claimed it before closing was set; accept() never blocks. */
    while (__atomic_load_n(&wl->users, __ATOMIC_ACQUIRE) > 0)
        (void)usleep(1000);
}

int
wtr_watch(struct wtr_watch *w)
{
    struct wtr_watch *at;
    int err;

    OBJ_CHECK(w, WTR_WATCH_MAGIC);
    AN(w->task);
    AN(w->drop);
    w->expired = false;
    AZ(pthread_mutex_lock(&park_mtx));
    if (stopping) {
        AZ(pthread_mutex_unlock(&park_mtx));
        errno = ESHUTDOWN;
        return (-1);
    }
    /* In deadline order, from the tail: where a timeout shared by all puts it. */
    for (at = watch_tail; at != NULL && at->deadline > w->deadline; at = at->prev)
        continue;
    w->prev = at;
    w->next = at != NULL ? at->next : watch_head;
    if (w->next != NULL)
        w->next->prev = w;
    else
        watch_tail = w;
    if (at != NULL)
        at->next = w;
    else
        watch_head = w;
    w->linked = true;
    nwatched++;
    if (timer_at == 0 || w->deadline < timer_at)
        timer_set_locked(w->deadline);
    AZ(pthread_mutex_unlock(&park_mtx));
    /* A socket watched before is still in the set, disarmed: re-arm it. */
    if (arm(w->fd, w, EPOLL_CTL_MOD))
        return (0);
    err = errno;
    AZ(pthread_mutex_lock(&park_mtx));
    if (w->linked)
        watch_unlink_locked(w);
    nwatched--; /* linked, or expired meanwhile: no event will come either way */
    AZ(pthread_mutex_unlock(&park_mtx));
    errno = err;
    return (-1);
}

unsigned
wtr_watched(void)
{
    unsigned n;

    AZ(pthread_mutex_lock(&park_mtx));
    n = nwatched;
    AZ(pthread_mutex_unlock(&park_mtx));
    return (n);
}
