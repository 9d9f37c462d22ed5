/*
 * log_priv -- shared by the log module's files: the list of per-worker
 * rings that the request log (rlog.c) and the request trace (trace.c)
 * each keep (log_ring.c).
 *
 * A ring is made by the first worker that needs one, handed back when
 * that worker exits, and taken over by the next worker that needs one,
 * its history kept; rings are freed only at the module's fini.  The list
 * only grows, so readers walk it without a lock: each ring is published
 * with a release store of the list's head.  The lock guards the list for
 * writers, the free list and the ring count.
 */
#ifndef SUROGAT_LOG_PRIV_H
#define SUROGAT_LOG_PRIV_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

/* Embedded in each kind of ring: its place in its list. */
struct log_ring {
    struct log_ring *next;      /* every ring of the list, newest first; set once */
    struct log_ring *next_free; /* under the list's lock */
    unsigned id;                /* 0, 1, 2 ... in creation order: a reader's cursor index */
    bool in_use;                /* under the list's lock: a worker owns it */
};
/* The ring of kind `type` whose `member` is the struct log_ring at p. */
#define LOG_RING_OF(p, type, member) ((type *)(void *)((char *)(p)-offsetof(type, member)))

struct log_rings {
    pthread_mutex_t mtx;
    struct log_ring *head; /* published with release stores */
    struct log_ring *free; /* under mtx: rings whose worker exited */
    unsigned n;            /* under mtx: rings made */
};
#define LOG_RINGS_INIT                           \
    {                                            \
        PTHREAD_MUTEX_INITIALIZER, NULL, NULL, 0 \
    }

/* The newest ring, for a reader's walk along ->next; NULL for none. */
static inline struct log_ring *
log__rings_first(struct log_rings *l)
{
    return (__atomic_load_n(&l->head, __ATOMIC_ACQUIRE));
}
/* Whether any ring was made (a ring's size may not change any more). */
bool log__rings_started(struct log_rings *l);
/*
 * A ring for a worker: one an exited worker handed back, else make()'s,
 * called under the lock, given its id and published.  Never NULL.
 */
typedef struct log_ring *log_ring_make_f(void);
struct log_ring *log__ring_get(struct log_rings *l, log_ring_make_f *make);
void log__ring_put(struct log_rings *l, struct log_ring *r); /* the worker exits */
/*
 * Unlink and destroy every ring no worker owns (and `mine`, the caller's
 * own, even if owned).  A worker counted out of its pool may not have
 * handed its ring back yet: such a ring stays, for log__ring_put() to
 * find.  The count starts again when no ring remains.
 */
typedef void log_ring_free_f(struct log_ring *r);
void log__rings_fini(struct log_rings *l, log_ring_free_f *destroy, const struct log_ring *mine);
/*
 * trace.c: a worker exits (the request log's worker slot calls it, one
 * slot for the module): the thread's trace ring, if it made one, goes
 * back to the list.
 */
void trace__wrk_exit(void);

#endif
