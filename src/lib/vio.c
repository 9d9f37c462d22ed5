/*
 * Deadline I/O for workers.  Sockets are non-blocking; when one would
 * block we poll(2) for the time left.  A worker is a thread of its own, so
 * blocking it is the design: the waiter is the only place that must
 * never block.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <math.h>
#include <poll.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <unistd.h>

#include "surogat/defs.h"
#include "surogat/tim.h"
#include "surogat/vio.h"

vio_block_f *vio_block_hook;

/* 1 ready, 0 deadline passed, -1 poll error. */
static int
wait_fd(int fd, short events, double deadline)
{
    struct pollfd pfd = { .fd = fd, .events = events };
    double left;
    int ms, n;

    vio_blocking();
    for (;;) {
        left = deadline - tim_mono();
        if (left <= 0)
            return (0);
        ms = left > 86400 ? 86400000 : (int)ceil(left * 1e3);
        n = poll(&pfd, 1, ms);
        if (n > 0)
            return (1);
        if (n < 0 && errno != EINTR)
            return (-1);
    }
}

ssize_t
vio_read(int fd, void *buf, size_t len, double deadline)
{
    ssize_t n;
    int w;

    for (;;) {
        n = read(fd, buf, len);
        if (n >= 0)
            return (n);
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN)
            return (-1);
        w = wait_fd(fd, POLLIN, deadline);
        if (w == 0) {
            errno = ETIMEDOUT;
            return (-1);
        }
        if (w < 0)
            return (-1);
    }
}

ssize_t
vio_read_wait(int fd, void *buf, size_t len, double deadline)
{
    int w = wait_fd(fd, POLLIN, deadline);

    if (w == 0) {
        errno = ETIMEDOUT;
        return (-1);
    }
    if (w < 0)
        return (-1);
    return (vio_read(fd, buf, len, deadline));
}

/* Write everything; with more, as sendmsg(2) with MSG_MORE. */
static int
writev_all(int fd, struct iovec *iov, int iovcnt, bool more, double deadline)
{
    ssize_t n;
    int w;

    while (iovcnt > 0) {
        if (iov->iov_len == 0) {
            iov++;
            iovcnt--;
            continue;
        }
        if (more) {
            struct msghdr mh = { .msg_iov = iov,
                                 .msg_iovlen = (size_t)(iovcnt > IOV_MAX ? IOV_MAX : iovcnt) };
            n = sendmsg(fd, &mh, MSG_MORE | MSG_NOSIGNAL);
        } else {
            n = writev(fd, iov, iovcnt > IOV_MAX ? IOV_MAX : iovcnt);
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN)
                return (-1);
            w = wait_fd(fd, POLLOUT, deadline);
            if (w == 0) {
                errno = ETIMEDOUT;
                return (-1);
            }
            if (w < 0)
                return (-1);
            continue;
        }
        while (n > 0 && iovcnt > 0) {
            if ((size_t)n >= iov->iov_len) {
                n -= (ssize_t)iov->iov_len;
                iov->iov_len = 0;
                iov++;
                iovcnt--;
            } else {
                iov->iov_base = (char *)iov->iov_base + n;
                iov->iov_len -= (size_t)n;
                n = 0;
            }
        }
    }
    return (0);
}

int
vio_writev(int fd, struct iovec *iov, int iovcnt, double deadline)
{
    return (writev_all(fd, iov, iovcnt, false, deadline));
}

int
vio_writev_more(int fd, struct iovec *iov, int iovcnt, double deadline)
{
    return (writev_all(fd, iov, iovcnt, true, deadline));
}

int
vio_write(int fd, const void *buf, size_t len, double deadline)
{
    struct iovec iov = { .iov_base = (void *)(uintptr_t)buf, .iov_len = len };

    return (vio_writev(fd, &iov, 1, deadline));
}

int
vio_wait(int fd, short events, double deadline)
{
    return (wait_fd(fd, events, deadline));
}

int
vio_wait_readable(int fd, double timeout)
{
    return (wait_fd(fd, POLLIN, tim_mono() + timeout));
}
