/*
 * acc -- listen sockets and the acceptor thread.
 *
 * Listen addresses are opened at startup (so an unusable -a fails the
 * start with exit code 2) and served by one acceptor thread, which hands
 * each new connection straight to a pool: TCP_DEFER_ACCEPT means the
 * first request is normally already readable, so a trip through the
 * waiter would only add latency.
 */
#ifndef SUROGAT_ACC_H
#define SUROGAT_ACC_H

struct sb;

struct lsock {
    unsigned magic;
#define LSOCK_MAGIC 0x91ad03e4
    int fd;
    char *spec;     /* as given to -a */
    char *addr;     /* numeric address actually bound */
    char port[8];
    const char *proto; /* "http" */
};

/* Parse and bind one -a argument ("127.0.0.1:8080", "[::1]:80", ":80"); -1 and err. */
int acc_listen(const char *spec, struct sb *err);
int acc_start(void); /* start the acceptor thread */
void acc_stop(void); /* close the listen sockets, join the thread */
void acc_dump(struct sb *out); /* one "addr port" line per listen socket */

#endif
