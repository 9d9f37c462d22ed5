/*
 * wrk -- what a worker thread owns: its workspace and its I/O buffers,
 * allocated once when the thread starts and reused by every task it runs,
 * so that a request costs no malloc.
 */
#ifndef SUROGAT_WRK_H
#define SUROGAT_WRK_H

#include <stdbool.h>
#include <stddef.h>

#include "surogat/ws.h"

struct alog_buf;
struct rlog_ring;
struct pol_wrk;

struct wrk {
    unsigned magic;
#define WRK_MAGIC 0x2b6fa0c3
    struct ws ws;   /* per-request arena, reset between requests */
    char *ws_block; /* its memory */
    size_t ws_size;
    char *rx;       /* client receive buffer: request head, then body bytes */
    size_t rx_size;
    char *be;       /* backend receive buffer: response head, then body bytes */
    size_t be_size;
    struct alog_buf *alog; /* buffered access-log lines */
    struct pol_wrk *pol;   /* pol: this thread's Lua state, built on first use */
    /* Its ring of request records, for `surogatctl log`; NULL outside a pool. */
    struct rlog_ring *rlog;
    /*
     * Called with on_block_priv when this worker is about to block
     * (vio_blocking()): a transport serving several requests of one
     * connection in a row on it hands the ones waiting to another worker.
     * NULL: nothing to do.  The pool's; set and cleared by the task.
     */
    void (*on_block)(struct wrk *wrk);
    void *on_block_priv;
};

/*
 * Per-thread slots.  A module that keeps state per worker (the policy's
 * Lua state, the access log's buffer, the live log's ring) registers its
 * operations once, at its own init and before pool_init(); every worker
 * runs each `init` when it starts, each `fini` when it exits (reverse
 * order), and each `idle` between tasks and before it sleeps.  So the
 * pool knows no module that rides on its threads.  Any op may be NULL.
 */
enum wrk_moment {
    WRK_BETWEEN_TASKS, /* a task ended and the worker looks for the next one */
    WRK_BEFORE_SLEEP,  /* the worker found nothing and is about to block */
};
struct wrk_slot {
    const char *name;
    void (*init)(struct wrk *wrk);
    void (*fini)(struct wrk *wrk);
    void (*idle)(struct wrk *wrk, enum wrk_moment when);
};
/* Register a slot (static storage); at most WRK_SLOTS_MAX, once each. */
#define WRK_SLOTS_MAX 8
void wrk_slot_register(const struct wrk_slot *slot);
/* The pool's side: run the registered ops on this worker. */
void wrk_slots_init(struct wrk *wrk);
void wrk_slots_fini(struct wrk *wrk);
void wrk_slots_idle(struct wrk *wrk, enum wrk_moment when);

/* Allocate (or grow to the current parameters) the worker's buffers. */
void wrk_buffers_fit(struct wrk *wrk);
void wrk_buffers_free(struct wrk *wrk);

/*
 * A request's memory without a worker (a request parked on a waiting
 * list): the workspace and receive buffer it was served in, which hold
 * its parsed head, its state and its unread bytes, and so cannot be
 * copied (everything points into them).
 *
 * wrk_mem_take(): m gets the worker's workspace (its block and state) and
 * receive buffer, the worker gets others at once: spare ones if any, new
 * ones otherwise.  Unless `brief`, the pages of both past what is in use (the
 * workspace's top, rx_used bytes of the receive buffer) go back to the
 * kernel, so a request parked for long costs its pages in use; a brief
 * wait (a backend's answer, within first_byte_timeout) keeps them, which
 * saves the madvise(2) and the page faults that would fill them again.
 * m may live inside the workspace it takes.  wrk_mem_give(): the worker's
 * own become spare ones (freed when WRK_SPARE_MAX are spare already), m's
 * become the worker's (m->ws is copied into wrk->ws: point the request
 * there again).  wrk_mem_free(): m's are freed, m with them if it lives
 * there.  So parking and resuming in turn, on any workers, allocates
 * nothing: the spare sets are shared by all workers, since one worker
 * often parks several requests in a row (ready sessions come in bursts)
 * and another resumes them.
 */
struct wrk_mem {
    char *ws_block;
    size_t ws_size;
    struct ws ws;
    char *rx;
    size_t rx_size;
};
void wrk_mem_take(struct wrk *wrk, struct wrk_mem *m, size_t rx_used, bool brief);
void wrk_mem_give(struct wrk *wrk, struct wrk_mem *m);
void wrk_mem_free(struct wrk_mem *m);
/*
 * A worker is about to sleep on its pool's queue (not while it lingers for
 * ready work): when no request is parked, the spare sets go -- there is
 * no load left for them to serve.  Under load there are at most
 * WRK_SPARE_MAX, and no more than the most requests parked at once.
 */
#define WRK_SPARE_MAX 64
void wrk_spare_trim(void);
unsigned wrk_spare_count(void); /* spare sets now */

#endif
