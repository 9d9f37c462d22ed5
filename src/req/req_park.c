/*
 * req_park -- a request waiting for another request's fetch without a
 * worker: Varnish's waiting list, on the request's side (the list itself
 * is the cache's, hsh.h).
 *
 * The lookup step gives the index the request's waiter (req__waiter());
 * when someone is fetching the key, hsh_lookup() answers HSH_BUSY with
 * the waiter on the object's list, and the steps stop at REQ_S_PARK.
 * req__park() then carries the request's policy state into its workspace
 * (pol_park()), has the transport take its memory and connection off the
 * worker (tp->park()), and the worker returns to the pool: a waiting
 * request costs its workspace pages in use and a session, not a thread.
 * When the fetch streams or ends, or coalesce_timeout passes, the index
 * calls wake() (req_wake()), which submits the request's own pool task
 * (POOL_PRIO_RESUME: admitted once, never refused); the transport
 * resumes it on whichever worker takes that task, and the steps go on
 * with the lookup again.
 *
 * The wake-up can come from another thread at any moment after the
 * lookup, before the worker has let go: struct req_state's `park` settles
 * who runs the request next (req_priv.h, enum req_park).  A policy state
 * that cannot be carried (pol_park() refuses) makes the request wait on
 * its worker instead, woken the same way, as every request did before.
 *
 * A pass or miss waits for its backend's answer the same way
 * (req__await()): its fetch sent the request, the transport takes its
 * memory off the worker, and the waiter watches the backend socket
 * (wtr_watch()) until it is readable or the first byte timeout passes.
 * The same task then resumes it, run by the worker that takes the event
 * from the waiter's set (no wake-up) or queued at POOL_PRIO_RESUME.
 * Nothing wakes it from elsewhere, so no state settles a race: from the
 * moment the watch is armed the request is the waiter's.
 */
#include "config.h"

#include <pthread.h>
#include <string.h>

#include "surogat/defs.h"
#include "surogat/hsh.h"
#include "surogat/pol.h"
#include "surogat/pool.h"
#include "surogat/req.h"
#include "surogat/stat.h"
#include "surogat/tp.h"
#include "surogat/wtr.h"

#include "req_priv.h"

/* For the few requests that wait on their worker: rare, so one lock for all. */
static pthread_mutex_t thread_mtx = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t thread_cv = PTHREAD_COND_INITIALIZER;

static bool
cas(struct req_state *st, enum req_park from, enum req_park to, enum req_park *found)
{
    enum req_park f = from;
    bool ok = __atomic_compare_exchange_n(&st->park, &f, to, false, __ATOMIC_ACQ_REL,
                                          __ATOMIC_ACQUIRE);
    *found = f;
    return (ok);
}

/* The pool task of a woken request: its transport runs it on this worker. */
static void
resume_task(struct wrk *wrk, void *priv)
{
    struct req *req = priv;

    OBJ_CHECK(req, REQ_MAGIC);
    req->tp->resume(wrk, req);
}

/* Give the request to a worker; a pool that shuts down never will. */
static void
schedule(struct req *req)
{
    struct req_state *st = req->st;

    __atomic_store_n(&st->park, REQ_P_NONE, __ATOMIC_RELEASE);
    st->task = (struct pool_task){ .func = resume_task, .priv = req };
    if (pool_submit(pool_pick(), &st->task, POOL_PRIO_RESUME) != 0) {
        pol_req_done(req);
        req->tp->drop(req);
    }
}

/* hsh_waiter.wake: from the fetch's thread or the sweeper, no index lock held. */
static void
req_wake(struct hsh_waiter *w)
{
    struct req *req = w->priv;
    struct req_state *st;
    enum req_park found;

    OBJ_CHECK(req, REQ_MAGIC);
    st = req->st;
    if (cas(st, REQ_P_PARKING, REQ_P_WOKEN, &found))
        return; /* its worker still holds it and will see this */
    if (found == REQ_P_ON_THREAD) {
        AZ(pthread_mutex_lock(&thread_mtx));
        __atomic_store_n(&st->park, REQ_P_WOKEN, __ATOMIC_RELEASE);
        AZ(pthread_cond_broadcast(&thread_cv));
        AZ(pthread_mutex_unlock(&thread_mtx));
        return;
    }
    SRG_ASSERT(found == REQ_P_PARKED);
    schedule(req);
}

struct hsh_waiter *
req__waiter(struct req *req)
{
    struct req_state *st = req->st;

    if (req->esi_up != NULL)
        return (req__esi_waiter(req)); /* an include: its page hears the wake-up */
    if (req->tp == NULL || req->tp->park == NULL)
        return (NULL);
    if (st->waiter.magic == 0) {
        st->waiter.magic = HSH_WAITER_MAGIC;
        st->waiter.wake = req_wake;
        st->waiter.priv = req;
    }
    __atomic_store_n(&st->park, REQ_P_PARKING, __ATOMIC_RELEASE);
    return (&st->waiter);
}

void
req__unwaited(struct req *req)
{
    __atomic_store_n(&req->st->park, REQ_P_NONE, __ATOMIC_RELEASE);
}

bool
req__park(struct req *req)
{
    struct req_state *st = req->st;
    enum req_park found;

    if (pol_park(req) != 0) {
        /* Its policy state stays on this worker: so does it, until woken. */
        STAT_INC(coalesce_on_thread);
        AZ(pthread_mutex_lock(&thread_mtx));
        if (cas(st, REQ_P_PARKING, REQ_P_ON_THREAD, &found) || found != REQ_P_WOKEN) {
            while (__atomic_load_n(&st->park, __ATOMIC_ACQUIRE) != REQ_P_WOKEN)
                AZ(pthread_cond_wait(&thread_cv, &thread_mtx));
        }
        AZ(pthread_mutex_unlock(&thread_mtx));
        __atomic_store_n(&st->park, REQ_P_NONE, __ATOMIC_RELEASE);
        return (false);
    }
    req->tp->park(req, false);
    if (!cas(st, REQ_P_PARKING, REQ_P_PARKED, &found)) {
        /* Woken while letting go: it runs again as any woken request does. */
        SRG_ASSERT(found == REQ_P_WOKEN);
        schedule(req);
    }
    return (true);
}

/* wtr_watch.drop: the waiter stops before the backend answered. */
static void
await_drop(struct wtr_watch *w)
{
    struct req *req = w->task->priv;

    OBJ_CHECK(req, REQ_MAGIC);
    req__fetch_drop(req);
    pol_req_done(req);
    req->tp->drop(req);
}

void
req__await(struct req *req)
{
    struct req_state *st = req->st;

    SRG_ASSERT(st->step == REQ_S_BACKEND);
    st->task = (struct pool_task){ .func = resume_task, .priv = req };
    st->watch.magic = WTR_WATCH_MAGIC;
    st->watch.task = &st->task;
    st->watch.drop = await_drop;
    STAT_INC(fetch_waited);
    req->tp->park(req, true); /* a backend's answer comes soon */
    if (wtr_watch(&st->watch) == 0)
        return;
    /* Not watched (the waiter stops, or refused the socket): a worker reads it, blocking. */
    st->watch.expired = false;
    if (pool_submit(pool_pick(), &st->task, POOL_PRIO_RESUME) != 0)
        await_drop(&st->watch);
}
