/*
 * hsh_wait -- waiting lists: requests parked on a busy object without a
 * thread (hsh.h, struct hsh_waiter).
 *
 * A parked waiter is on two lists, both under its shard's lock: its
 * objhead's, oldest first, which the events of the fetch (streaming,
 * publication, abandonment) wake from, and its shard's, by deadline,
 * which the sweeper wakes from when coalesce_timeout has passed.  The
 * sweeper is one thread, started with the first waiter, that looks at
 * the oldest waiter of each shard every SWEEP_INTERVAL: a deadline is
 * kept to that precision, which is plenty for a timeout in seconds.
 *
 * Wake-ups are collected under the lock and delivered after it is
 * dropped (hsh__wake()): wake() submits to the pool, which has locks of
 * its own, and a woken request may look up the same shard at once.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>

#include "surogat/defs.h"
#include "surogat/hsh.h"
#include "surogat/par.h"
#include "surogat/stat.h"
#include "surogat/tim.h"

#include "hsh_priv.h"

#define SWEEP_INTERVAL 0.05 /* seconds between two looks at the deadlines */

static unsigned nparked; /* atomic: waiters on some list */

static pthread_mutex_t sweep_mtx = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sweep_cv = PTHREAD_COND_INITIALIZER;
static pthread_t sweep_thr;
static bool sweep_running; /* under sweep_mtx */
static bool sweep_stop;    /* under sweep_mtx */

unsigned
hsh_parked(void)
{
    return (__atomic_load_n(&nparked, __ATOMIC_RELAXED));
}

/* Off both lists, under the shard lock; the caller delivers the wake-up. */
static void
unlink_waiter(struct shard *sh, struct hsh_waiter *w)
{
    struct objhead *oh = w->oh;

    if (w->prev != NULL)
        w->prev->next = w->next;
    else
        oh->wl_head = w->next;
    if (w->next != NULL)
        w->next->prev = w->prev;
    else
        oh->wl_tail = w->prev;
    if (w->sprev != NULL)
        w->sprev->snext = w->snext;
    else
        sh->sw_head = w->snext;
    if (w->snext != NULL)
        w->snext->sprev = w->sprev;
    else
        sh->sw_tail = w->sprev;
    w->prev = w->sprev = w->snext = NULL;
    w->next = NULL;
    w->oh = NULL;
    SRG_ASSERT(oh->nwaiting > 0);
    oh->nwaiting--;
    (void)__atomic_sub_fetch(&nparked, 1, __ATOMIC_RELAXED);
    STAT_DEC(coalesce_parked);
}

static void *
sweep_thread(void *arg)
{
    struct timespec ts;

    (void)arg;
    stat_thread_enter();
    AZ(pthread_mutex_lock(&sweep_mtx));
    while (!sweep_stop) {
        AZ(pthread_mutex_unlock(&sweep_mtx));
        double now = tim_mono();
        for (unsigned i = 0; i < HSH_SHARDS; i++) {
            struct shard *sh = &hsh__shards[i];
            struct hsh_waiter *w, *woken = NULL, **tail = &woken;
            /* An unlocked peek: a waiter parked meanwhile is seen at the next round. */
            if (__atomic_load_n(&sh->sw_head, __ATOMIC_RELAXED) == NULL)
                continue;
            AZ(pthread_mutex_lock(&sh->mtx));
            while ((w = sh->sw_head) != NULL && w->deadline <= now) {
                struct objhead *oh = w->oh;
                unlink_waiter(sh, w);
                hsh__oh_maybe_free(sh, oh);
                *tail = w;
                tail = &w->next;
            }
            AZ(pthread_mutex_unlock(&sh->mtx));
            hsh__wake(woken);
        }
        AZ(pthread_mutex_lock(&sweep_mtx));
        if (sweep_stop)
            break;
        hsh__abs_deadline(&ts, SWEEP_INTERVAL);
        int rc = pthread_cond_timedwait(&sweep_cv, &sweep_mtx, &ts);
        SRG_ASSERT(rc == 0 || rc == ETIMEDOUT);
    }
    AZ(pthread_mutex_unlock(&sweep_mtx));
    stat_thread_leave();
    return (NULL);
}

/* The sweeper starts with the first waiter: before that no deadline needs it. */
static void
sweep_start(void)
{
    AZ(pthread_mutex_lock(&sweep_mtx));
    if (!sweep_running && !sweep_stop) {
        AZ(pthread_create(&sweep_thr, NULL, sweep_thread, NULL));
        sweep_running = true;
    }
    AZ(pthread_mutex_unlock(&sweep_mtx));
}

void
hsh__wait_init(void)
{
    AZ(pthread_mutex_lock(&sweep_mtx));
    sweep_stop = false;
    AZ(pthread_mutex_unlock(&sweep_mtx));
}

void
hsh__wait_fini(void)
{
    AZ(pthread_mutex_lock(&sweep_mtx));
    sweep_stop = true;
    AZ(pthread_cond_signal(&sweep_cv));
    bool join = sweep_running;
    sweep_running = false;
    AZ(pthread_mutex_unlock(&sweep_mtx));
    if (join)
        AZ(pthread_join(sweep_thr, NULL));
}

void
hsh__park(struct shard *sh, struct objhead *oh, struct hsh_waiter *w)
{
    struct hsh_waiter *after;

    OBJ_CHECK(w, HSH_WAITER_MAGIC);
    SRG_ASSERT(w->oh == NULL);
    AN(w->wake);
    w->oh = oh;
    w->next = NULL;
    w->prev = oh->wl_tail;
    if (oh->wl_tail != NULL)
        oh->wl_tail->next = w;
    else
        oh->wl_head = w;
    oh->wl_tail = w;
    /*
     * By deadline: from the newest, since a waiter parks again with the
     * deadline of its first wait and most park for the first time.
     */
    for (after = sh->sw_tail; after != NULL && after->deadline > w->deadline;)
        after = after->sprev;
    w->sprev = after;
    w->snext = after != NULL ? after->snext : sh->sw_head;
    if (w->snext != NULL)
        w->snext->sprev = w;
    else
        sh->sw_tail = w;
    if (after != NULL)
        after->snext = w;
    else
        sh->sw_head = w;
    oh->nwaiting++;
    if (__atomic_add_fetch(&nparked, 1, __ATOMIC_RELAXED) == 1)
        sweep_start(); /* sweep_mtx is only ever taken after a shard lock, never before */
    STAT_INC(coalesce_parked);
}

struct hsh_waiter *
hsh__rush(struct shard *sh, struct objhead *oh, unsigned n)
{
    struct hsh_waiter *w, *woken = NULL, **tail = &woken;

    for (unsigned i = 0; (n == 0 || i < n) && (w = oh->wl_head) != NULL; i++) {
        unlink_waiter(sh, w);
        *tail = w;
        tail = &w->next;
        STAT_INC(coalesce_rushed);
    }
    return (woken);
}

void
hsh__wake(struct hsh_waiter *w)
{
    struct hsh_waiter *next;

    for (; w != NULL; w = next) {
        next = w->next; /* wake() may free or reuse w */
        w->next = NULL;
        w->wake(w);
    }
}
