/*
 * vio -- blocking I/O with deadlines on non-blocking sockets, for workers.
 * Every socket surogat owns is non-blocking; a worker waits in poll(2)
 * with the time left to a deadline (tim_mono() seconds).
 */
#ifndef SUROGAT_VIO_H
#define SUROGAT_VIO_H

#include <stddef.h>
#include <sys/types.h>
#include <sys/uio.h>

/*
 * Called before a thread blocks in any of these (and by other code about
 * to block a worker: connect, condition variables): the pools use it to
 * hand a busy worker's taker slot to another.  Set once at start.
 */
typedef void vio_block_f(void);
extern vio_block_f *vio_block_hook;
static inline void
vio_blocking(void)
{
    if (vio_block_hook != NULL)
        vio_block_hook();
}

/*
 * Read at most len bytes.  >0 bytes read, 0 at EOF, -1 with errno
 * (ETIMEDOUT past the deadline).
 */
ssize_t vio_read(int fd, void *buf, size_t len, double deadline);
/*
 * The same, but poll(2) before the first read: for when the bytes are
 * known not to be there yet (an answer to what we just sent), saving the
 * read that would fail with EAGAIN.
 */
ssize_t vio_read_wait(int fd, void *buf, size_t len, double deadline);
/* Write everything, advancing iov in place.  0, or -1 with errno. */
int vio_writev(int fd, struct iovec *iov, int iovcnt, double deadline);
/*
 * The same on a socket, flagged MSG_MORE: the kernel holds a partial
 * segment back for what follows (a sendfile(2) body after its head).
 */
int vio_writev_more(int fd, struct iovec *iov, int iovcnt, double deadline);
int vio_write(int fd, const void *buf, size_t len, double deadline);
/* poll(2) fd for events until deadline: 1 ready, 0 deadline passed, -1 error. */
int vio_wait(int fd, short events, double deadline);
/* Wait until fd is readable: 1 readable (or EOF/error pending), 0 timed out, -1 error. */
int vio_wait_readable(int fd, double timeout);

#endif
