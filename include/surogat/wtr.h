/*
 * wtr -- the waiter: one libevent thread watching idle keep-alive
 * sessions, so that an idle connection costs a few hundred bytes and no
 * thread.  Workers park a session straight into the waiter's epoll set
 * (one-shot, one system call, no wake-up); the waiter hands it back to a
 * pool when it turns readable.
 */
#ifndef SUROGAT_WTR_H
#define SUROGAT_WTR_H

struct sess;

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
 * A worker with nothing queued takes a ready session from the set itself:
 * its pool task (which runs it), or NULL when none turned ready within
 * `wait` seconds (0: do not block).  The pools' idle source.
 */
struct pool_task *wtr_take(double wait);

#endif
