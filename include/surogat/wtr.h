/*
 * wtr -- the waiter: one libevent thread watching idle keep-alive
 * sessions, so that an idle connection costs a few hundred bytes and no
 * thread.  Workers never call libevent: they post sessions into a locked
 * inbox and wake the waiter through an eventfd.
 */
#ifndef SUROGAT_WTR_H
#define SUROGAT_WTR_H

struct sess;

int wtr_init(void);
/* Close every parked session and stop the thread. */
void wtr_fini(void);
/*
 * Park an idle session.  When it turns readable it is scheduled on its
 * pool; after timeout_idle, or on EOF, it is closed.  Takes ownership.
 */
void wtr_enter(struct sess **spp);

#endif
