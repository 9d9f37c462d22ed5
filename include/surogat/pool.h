/*
 * pool -- worker threads fed by bounded priority queues.
 *
 * There are `thread_pools` pools, each with its own lock, queue and
 * threads (thread_pool_min .. thread_pool_max).  A pool grows while tasks
 * wait and shrinks when threads idle for thread_pool_timeout.  Submitting
 * never blocks: a task either goes to an idle worker, waits in the queue,
 * or is refused when thread_queue_limit tasks already wait, and the
 * caller sheds the load (a 503 to the client).
 */
#ifndef SUROGAT_POOL_H
#define SUROGAT_POOL_H

#include <stdbool.h>

struct pool;
struct wrk;

typedef void pool_task_f(struct wrk *wrk, void *priv);

/* Embedded in the object it runs for; owned by the pool while queued. */
struct pool_task {
    pool_task_f *func;
    void *priv;
    struct pool_task *next; /* private to pool */
    double t_queued;        /* private to pool: tim_mono() when it joined the queue */
};

enum pool_prio {
    POOL_PRIO_FETCH,  /* first: requests parked on a busy object wait on it */
    POOL_PRIO_RESUME, /* parked requests the fetch woke: admitted before, never refused */
    POOL_PRIO_REQ,    /* client requests; thread_queue_limit refuses them when full */
    POOL_PRIO_BG,    /* background refreshes, probes, housekeeping; bounded like REQ */
    POOL_PRIO__N
};

int pool_init(void); /* starts thread_pools pools with thread_pool_min workers each */
/* Stop taking tasks, let queued and running tasks finish, join all threads. */
void pool_fini(void);
struct pool *pool_pick(void); /* round-robin over the pools */
/* 0, or -1 when the queue is full (REQ and BG) or the pool is shutting down. */
int pool_submit(struct pool *pp, struct pool_task *t, enum pool_prio prio);
/*
 * A second source of work, asked by a worker whose pool queue is empty
 * before it sleeps: the waiter's set of idle sessions.  `wait` is 0 (do
 * not block) or how long the worker may block for one (timeout_linger).
 * NULL when there is nothing.  Set once, before pool_init().
 */
typedef struct pool_task *pool_take_f(double wait);
void pool_set_idle_source(pool_take_f *take);
/*
 * Workers now holding a taker slot: running (not blocked on I/O) and
 * about to ask the idle source again.  At most the CPUs we may run on.
 */
unsigned pool_takers(void);
/* Tasks running or queued in every pool: SIGTERM drains until this is 0. */
unsigned pool_busy(void);

#endif
