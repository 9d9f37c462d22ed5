/*
 * sess -- a client connection.  One owner at a time: the acceptor while
 * it is new, the pool queue while it waits for a worker, a worker while a
 * request runs, the waiter while idle.  It moves by `struct sess **`.
 */
#ifndef SUROGAT_SESS_H
#define SUROGAT_SESS_H

#include <stdbool.h>
#include <stdint.h>
#include <netinet/in.h>

#include "surogat/pool.h"

struct lsock;

struct sess {
    unsigned magic;
#define SESS_MAGIC 0x4d1c8e27
    int fd;
    struct pool *pool;
    const struct lsock *ls; /* the listen socket it came in on */
    struct pool_task task;  /* runs req_sess_task */
    double t_open;          /* tim_real() at accept */
    double t_idle;          /* tim_mono() when the last response ended */
    uint64_t nreq;          /* requests served on it */
    struct event *ev;       /* the waiter's, while parked */
    struct sess *wnext;     /* the waiter's inbox and parked list */
    struct sess *wprev;
    char client_ip[INET6_ADDRSTRLEN];
    char client_port[8];
};

/* Takes ownership of fd, which is already non-blocking. */
struct sess *sess_new(int fd, const struct lsock *ls, const struct sockaddr *sa);
/* Close the connection and free the session. */
void sess_close(struct sess **spp);
/*
 * Close after an error response: shut down our side, then discard what
 * the client still sends for up to `linger` seconds so that the kernel
 * does not reset the connection before the client reads our answer.
 */
void sess_close_lingering(struct sess **spp, double linger);
/*
 * Queue the session for a worker.  When the queue is full the client gets
 * a canned 503 with Retry-After and the session is closed (sess_dropped).
 */
void sess_schedule(struct sess **spp);
/* SIGTERM: from now on sessions close after their current response. */
void sess_drain(void);
bool sess_draining(void);

#endif
