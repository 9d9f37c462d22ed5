/*
 * Worker pools.
 *
 * Threads: per pool, a herder that starts workers while tasks wait, and
 * thread_pool_min .. thread_pool_max detached workers.  Everything in a
 * pool is under its mtx.  An idle worker sleeps on its own condition
 * variable on the pool's idle stack; pool_submit() hands a task straight
 * to the most recently idle worker (its cache is warmest) and only queues
 * it when none is idle.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "surogat/defs.h"
#include "surogat/log.h"
#include "surogat/par.h"
#include "surogat/pool.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/wrk.h"
#include "surogat/vio.h"

struct worker {
    struct wrk wrk;
    pthread_cond_t cond;
    struct pool_task *task;   /* handed over by pool_submit, under pool mtx */
    struct worker *next_idle; /* idle stack, under pool mtx */
    bool taker;               /* holds a taker slot */
    struct pool *pp;
};

struct pool {
    unsigned magic;
#define POOL_MAGIC 0x0a17c3d5
    pthread_mutex_t mtx;
    pthread_cond_t herder_cond; /* tasks wait and more threads may start */
    pthread_cond_t exit_cond;   /* a worker exited (for pool_fini) */
    struct pool_task *qhead[POOL_PRIO__N];
    struct pool_task **qtail[POOL_PRIO__N];
    unsigned nqueued[POOL_PRIO__N];
    struct worker *idle; /* most recently idle first */
    unsigned nthreads;   /* started or starting */
    unsigned nleaving;   /* left nthreads, still running their slots' fini (pool_fini waits) */
    unsigned nstarting;  /* started but not yet looking for work */
    unsigned nidle;
    bool shutdown;
    pthread_t herder;
};

static struct pool **pools;
/*
 * Taker slots: workers allowed to take from the idle source at once, the
 * CPUs this process may run on.  A worker keeps its slot while it finds
 * work there and gives it back when it finds none.
 */
static unsigned taker_cap;
static unsigned takers; /* atomic: slots held */
static __thread struct worker *self;
static pool_take_f *idle_source;
static unsigned npools;
static unsigned next_pool;

static void *worker_thread(void *priv);

static unsigned
queued_total(const struct pool *pp)
{
    unsigned n = 0;

    for (int i = 0; i < POOL_PRIO__N; i++)
        n += pp->nqueued[i];
    return (n);
}

static struct pool_task *
dequeue(struct pool *pp)
{
    struct pool_task *t;

    for (int i = 0; i < POOL_PRIO__N; i++) {
        t = pp->qhead[i];
        if (t == NULL)
            continue;
        pp->qhead[i] = t->next;
        if (pp->qhead[i] == NULL)
            pp->qtail[i] = &pp->qhead[i];
        pp->nqueued[i]--;
        t->next = NULL;
        return (t);
    }
    return (NULL);
}

/* Called with pp->mtx held; the count was already raised by the caller. */
static int
spawn_worker(struct pool *pp)
{
    pthread_attr_t attr;
    pthread_t thr;
    struct worker *w;
    int err;

    w = calloc(1, sizeof *w);
    AN(w);
    w->wrk.magic = WRK_MAGIC;
    w->pp = pp;
    AZ(pthread_cond_init(&w->cond, NULL));
    AZ(pthread_attr_init(&attr));
    AZ(pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED));
    /* Workers keep their big buffers on the heap; 256k of stack is plenty. */
    AZ(pthread_attr_setstacksize(&attr, 256 * 1024));
    err = pthread_create(&thr, &attr, worker_thread, w);
    AZ(pthread_attr_destroy(&attr));
    if (err != 0) {
        AZ(pthread_cond_destroy(&w->cond));
        free(w);
        errno = err;
        return (-1);
    }
    return (0);
}

static double
timeout_abs(struct timespec *ts, double seconds)
{
    double t;

    AZ(clock_gettime(CLOCK_REALTIME, ts));
    t = (double)ts->tv_sec + ts->tv_nsec * 1e-9 + seconds;
    ts->tv_sec = (time_t)t;
    ts->tv_nsec = (long)((t - floor(t)) * 1e9);
    return (t);
}

static bool
slot_get(void)
{
    unsigned n = __atomic_load_n(&takers, __ATOMIC_RELAXED);

    do {
        if (n >= taker_cap)
            return (false);
    } while (
        !__atomic_compare_exchange_n(&takers, &n, n + 1, true, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
    return (true);
}

static void
slot_put(struct worker *w)
{
    w->taker = false;
    __atomic_sub_fetch(&takers, 1, __ATOMIC_RELAXED);
}

/* vio_block_hook: a worker about to block gives its slot to a runnable one. */
static void
pool_blocking(void)
{
    if (self != NULL && self->taker)
        slot_put(self);
    if (self != NULL && self->wrk.on_block != NULL)
        self->wrk.on_block(&self->wrk);
}

unsigned
pool_takers(void)
{
    return (__atomic_load_n(&takers, __ATOMIC_RELAXED));
}

/*
 * Called with pp->mtx held and an empty queue: work from the idle source
 * (sessions the waiter watches), taken without sleeping or, right after
 * a task, waiting timeout_linger for it.  Only slot holders take: one
 * worker per CPU serving ready sessions in a row is what spares a context
 * switch per request, while more takers on the same CPUs would only
 * preempt each other with a request half served.  Sessions the takers do
 * not get to go through the waiter to other workers.
 */
static struct pool_task *
take_idle(struct worker *w, bool may_linger)
{
    struct pool *pp = w->pp;
    struct pool_task *t;

    if (!w->taker && !slot_get())
        return (NULL);
    w->taker = true;
    AZ(pthread_mutex_unlock(&pp->mtx));
    wrk_slots_idle(&w->wrk, WRK_BETWEEN_TASKS);
    t = idle_source(0);
    if (t == NULL && may_linger && par.timeout_linger > 0) {
        wrk_slots_idle(&w->wrk, WRK_BEFORE_SLEEP);
        t = idle_source(par.timeout_linger);
    }
    if (t == NULL && w->taker)
        slot_put(w);
    AZ(pthread_mutex_lock(&pp->mtx));
    return (t);
}

static void *
worker_thread(void *priv)
{
    struct worker *w = priv;
    struct pool *pp = w->pp;
    struct pool_task *t;
    struct timespec ts;
    struct worker **wp;
    bool queued, ran = false;
    int rc;

    stat_thread_enter();
    self = w;
    STAT_INC(threads_created);
    STAT_INC(threads);
    wrk_buffers_fit(&w->wrk);
    wrk_slots_init(&w->wrk);
    AZ(pthread_mutex_lock(&pp->mtx));
    pp->nstarting--;
    for (;;) {
        t = dequeue(pp);
        queued = t != NULL;
        if (t == NULL && !pp->shutdown && idle_source != NULL) {
            /* Linger once after a task; a worker that found nothing then sleeps. */
            t = take_idle(w, ran);
            ran = false;
            if (t == NULL)
                queued = (t = dequeue(pp)) != NULL;
        }
        if (t == NULL && !pp->shutdown) {
            /* About to sleep: the slots finish what they buffered first. */
            AZ(pthread_mutex_unlock(&pp->mtx));
            wrk_slots_idle(&w->wrk, WRK_BEFORE_SLEEP);
            wrk_spare_trim();
            AZ(pthread_mutex_lock(&pp->mtx));
            queued = (t = dequeue(pp)) != NULL;
        }
        if (t == NULL && !pp->shutdown) {
            w->task = NULL;
            w->next_idle = pp->idle;
            pp->idle = w;
            pp->nidle++;
            timeout_abs(&ts, par.thread_pool_timeout);
            rc = 0;
            while (w->task == NULL && !pp->shutdown && rc != ETIMEDOUT)
                rc = pthread_cond_timedwait(&w->cond, &pp->mtx, &ts);
            t = w->task;
            w->task = NULL;
            queued = t != NULL;
            if (t == NULL) {
                /* Not handed anything: we are still on the idle stack. */
                for (wp = &pp->idle; *wp != w; wp = &(*wp)->next_idle)
                    AN(*wp);
                *wp = w->next_idle;
                pp->nidle--;
                if (pp->shutdown || pp->nthreads > par.thread_pool_min)
                    break;
                continue;
            }
        }
        if (t == NULL)
            break; /* shutdown and nothing left to run */
        AZ(pthread_mutex_unlock(&pp->mtx));
        if (queued)
            STAT_DEC(queue_len); /* the idle source's tasks were never counted */
        STAT_INC(threads_busy);
        t->func(&w->wrk, t->priv);
        STAT_DEC(threads_busy);
        ran = true;
        ws_reset(&w->wrk.ws);
        AZ(pthread_mutex_lock(&pp->mtx));
    }
    if (w->taker)
        slot_put(w);
    /*
     * Out of the count at once, so that the next idle worker to time out
     * sees how many stay; but pool_fini() also waits for what reaches
     * outside the worker, since its caller then tears down what the
     * slots' fini and the counters use (main.c: pol_fini(), stat_fini()).
     */
    pp->nthreads--;
    pp->nleaving++;
    AZ(pthread_mutex_unlock(&pp->mtx));
    wrk_slots_fini(&w->wrk);
    wrk_buffers_free(&w->wrk);
    STAT_INC(threads_destroyed);
    STAT_DEC(threads);
    stat_thread_leave();
    AZ(pthread_mutex_lock(&pp->mtx));
    pp->nleaving--;
    AZ(pthread_cond_broadcast(&pp->exit_cond));
    AZ(pthread_mutex_unlock(&pp->mtx));
    AZ(pthread_cond_destroy(&w->cond));
    free(w);
    return (NULL);
}

/* tim_mono() at which the longest-waiting task was queued; 0 if none waits. */
static double
oldest_queued(const struct pool *pp)
{
    double t = 0;

    for (int i = 0; i < POOL_PRIO__N; i++)
        if (pp->qhead[i] != NULL && (t == 0 || pp->qhead[i]->t_queued < t))
            t = pp->qhead[i]->t_queued;
    return (t);
}

/*
 * The herder starts a worker for a task that has waited thread_pool_add_delay
 * without one.  Starting one at once for every queued task would be wrong
 * for CPU-bound work such as cache hits: the running workers drain the
 * queue anyway, and every extra thread only adds context switches.  A
 * task that waits is a sign the workers are blocked (on backends): then a
 * new thread helps.
 */
static void *
herder_thread(void *priv)
{
    struct pool *pp = priv;
    struct timespec ts;
    double due;

    stat_thread_enter();
    AZ(pthread_mutex_lock(&pp->mtx));
    for (;;) {
        /* One new thread per waiting task not already covered by a starting thread. */
        while (!pp->shutdown && !(queued_total(pp) > pp->nstarting && pp->nidle == 0 &&
                                  pp->nthreads < par.thread_pool_max))
            AZ(pthread_cond_wait(&pp->herder_cond, &pp->mtx));
        if (pp->shutdown)
            break;
        due = oldest_queued(pp) + par.thread_pool_add_delay - tim_mono();
        if (due > 0) {
            timeout_abs(&ts, due);
            (void)pthread_cond_timedwait(&pp->herder_cond, &pp->mtx, &ts);
            continue;
        }
        pp->nthreads++;
        pp->nstarting++;
        if (spawn_worker(pp) != 0) {
            pp->nthreads--;
            pp->nstarting--;
            STAT_INC(threads_failed);
            AZ(pthread_mutex_unlock(&pp->mtx));
            log_msg(LOG_WARNING, "cannot start a worker thread: %s", strerror(errno));
            usleep(100000); /* the limit is usually transient: back off */
            AZ(pthread_mutex_lock(&pp->mtx));
        }
    }
    AZ(pthread_mutex_unlock(&pp->mtx));
    stat_thread_leave();
    return (NULL);
}

static struct pool *
pool_new(void)
{
    struct pool *pp;

    OBJ_NEW(pp, POOL_MAGIC);
    AZ(pthread_mutex_init(&pp->mtx, NULL));
    AZ(pthread_cond_init(&pp->herder_cond, NULL));
    AZ(pthread_cond_init(&pp->exit_cond, NULL));
    for (int i = 0; i < POOL_PRIO__N; i++)
        pp->qtail[i] = &pp->qhead[i];
    AZ(pthread_mutex_lock(&pp->mtx));
    for (unsigned i = 0; i < par.thread_pool_min; i++) {
        pp->nthreads++;
        pp->nstarting++;
        if (spawn_worker(pp) != 0) {
            pp->nthreads--;
            pp->nstarting--;
            break;
        }
    }
    AZ(pthread_mutex_unlock(&pp->mtx));
    AZ(pthread_create(&pp->herder, NULL, herder_thread, pp));
    return (pp);
}

int
pool_init(void)
{
    cpu_set_t cpus;
    int ncpu = 0;

    if (sched_getaffinity(0, sizeof cpus, &cpus) == 0)
        ncpu = CPU_COUNT(&cpus);
    taker_cap = ncpu > 0 ? (unsigned)ncpu : 1;
    vio_block_hook = pool_blocking;
    npools = par.thread_pools;
    pools = calloc(npools, sizeof *pools);
    AN(pools);
    for (unsigned i = 0; i < npools; i++)
        pools[i] = pool_new();
    return (0);
}

void
pool_fini(void)
{
    struct pool *pp;

    for (unsigned i = 0; i < npools; i++) {
        pp = pools[i];
        AZ(pthread_mutex_lock(&pp->mtx));
        pp->shutdown = true;
        AZ(pthread_cond_broadcast(&pp->herder_cond));
        for (struct worker *w = pp->idle; w != NULL; w = w->next_idle)
            AZ(pthread_cond_signal(&w->cond));
        AZ(pthread_mutex_unlock(&pp->mtx));
        AZ(pthread_join(pp->herder, NULL));
    }
    for (unsigned i = 0; i < npools; i++) {
        pp = pools[i];
        AZ(pthread_mutex_lock(&pp->mtx));
        while (pp->nthreads > 0 || pp->nleaving > 0)
            AZ(pthread_cond_wait(&pp->exit_cond, &pp->mtx));
        AZ(pthread_mutex_unlock(&pp->mtx));
        AZ(pthread_cond_destroy(&pp->herder_cond));
        AZ(pthread_cond_destroy(&pp->exit_cond));
        AZ(pthread_mutex_destroy(&pp->mtx));
        OBJ_FREE(&pools[i]);
    }
    free(pools);
    pools = NULL;
    npools = 0;
}

struct pool *
pool_pick(void)
{
    unsigned i = __atomic_fetch_add(&next_pool, 1, __ATOMIC_RELAXED);

    return (pools[i % npools]);
}

int
pool_submit(struct pool *pp, struct pool_task *t, enum pool_prio prio)
{
    struct worker *w;

    OBJ_CHECK(pp, POOL_MAGIC);
    AN(t);
    AN(t->func);
    SRG_ASSERT(prio < POOL_PRIO__N);
    AZ(pthread_mutex_lock(&pp->mtx));
    if (pp->shutdown) {
        AZ(pthread_mutex_unlock(&pp->mtx));
        return (-1);
    }
    w = pp->idle;
    if (w != NULL) {
        pp->idle = w->next_idle;
        pp->nidle--;
        w->task = t;
        STAT_INC(queue_len); /* the worker lowers it when it starts the task */
        AZ(pthread_cond_signal(&w->cond));
        AZ(pthread_mutex_unlock(&pp->mtx));
        return (0);
    }
    /*
     * Client requests and background work shed load; fetches others wait
     * on and requests already admitted (resumed from a waiting list) never do.
     */
    if (prio >= POOL_PRIO_REQ && pp->nqueued[prio] >= par.thread_queue_limit) {
        AZ(pthread_mutex_unlock(&pp->mtx));
        return (-1);
    }
    t->next = NULL;
    t->t_queued = tim_mono();
    *pp->qtail[prio] = t;
    pp->qtail[prio] = &t->next;
    pp->nqueued[prio]++;
    STAT_INC(queue_len);
    STAT_INC(sess_queued);
    if (pp->nthreads < par.thread_pool_max)
        AZ(pthread_cond_signal(&pp->herder_cond));
    AZ(pthread_mutex_unlock(&pp->mtx));
    return (0);
}

void
pool_set_idle_source(pool_take_f *take)
{
    idle_source = take;
}

unsigned
pool_busy(void)
{
    unsigned n = 0;
    struct pool *pp;

    for (unsigned i = 0; i < npools; i++) {
        pp = pools[i];
        AZ(pthread_mutex_lock(&pp->mtx));
        n += pp->nthreads - pp->nstarting - pp->nidle + queued_total(pp);
        AZ(pthread_mutex_unlock(&pp->mtx));
    }
    return (n);
}
