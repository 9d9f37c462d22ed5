/*
 * refserver -- the reference for "as fast as a hit can be" (STYLE.md,
 * section 12): one thread, epoll, HTTP/1.1 keep-alive, every answer a
 * response already serialised in memory, sent with one writev.  For
 * bench/zipf.py: URLs /PREFIX/N (any prefix, N < the count given) get
 * their own 1 KiB body each, as a cache holding N objects would serve
 * them; anything else gets /0's.  Requests are read whole (no pipelining
 * beyond what one read brings, which wrk does not do).
 *
 *   cc -O2 -o refserver bench/refserver.c && ./refserver PORT [URLS]
 */
#define _GNU_SOURCE /* accept4 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define BODY 1024

static char *bodies;
static unsigned nurls;
static const char head[] = "HTTP/1.1 200 OK\r\n"
                           "Server: refserver\r\n"
                           "Date: Thu, 26 Nov 2026 22:00:00 GMT\r\n"
                           "Content-Type: application/octet-stream\r\n"
                           "Content-Length: 1024\r\n"
                           "Last-Modified: Thu, 26 Nov 2026 21:00:00 GMT\r\n"
                           "Cache-Control: max-age=3600\r\n"
                           "Accept-Ranges: bytes\r\n"
                           "Age: 0\r\n"
                           "\r\n";

/* The body for the request in buf: /anything/N picks body N. */
static const char *
body_of(const char *buf, size_t len)
{
    const char *sp = memchr(buf, ' ', len), *end, *p;
    unsigned long n = 0;

    if (sp == NULL)
        return (bodies);
    end = memchr(sp + 1, ' ', len - (size_t)(sp + 1 - buf));
    if (end == NULL)
        return (bodies);
    for (p = end; p > sp + 1 && p[-1] >= '0' && p[-1] <= '9'; p--)
        ;
    for (; p < end; p++)
        n = n * 10 + (unsigned long)(*p - '0');
    return (bodies + (n < nurls ? n : 0) * BODY);
}

int
main(int argc, char **argv)
{
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    struct epoll_event ev, evs[256];
    int lfd, ep, one = 1;
    char buf[8192];

    if (argc < 2)
        return (2);
    nurls = argc > 2 ? (unsigned)atoi(argv[2]) : 1;
    if (nurls == 0)
        nurls = 1;
    bodies = malloc((size_t)nurls * BODY);
    for (unsigned i = 0; i < nurls; i++) {
        int k = snprintf(bodies + (size_t)i * BODY, BODY, "%u ", i);
        memset(bodies + (size_t)i * BODY + k, 'a' + (int)(i % 26), (size_t)(BODY - k));
    }
    sa.sin_port = htons((unsigned short)atoi(argv[1]));
    lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(lfd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(lfd, 4096) != 0) {
        perror("bind/listen");
        return (1);
    }
    ep = epoll_create1(0);
    ev.events = EPOLLIN;
    ev.data.fd = lfd;
    epoll_ctl(ep, EPOLL_CTL_ADD, lfd, &ev);
    for (;;) {
        int n = epoll_wait(ep, evs, 256, -1);

        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;

            if (fd == lfd) {
                int c;

                while ((c = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    ev.events = EPOLLIN;
                    ev.data.fd = c;
                    epoll_ctl(ep, EPOLL_CTL_ADD, c, &ev);
                }
                continue;
            }
            for (;;) {
                ssize_t r = read(fd, buf, sizeof buf);
                struct iovec iov[2];

                if (r > 0) {
                    iov[0] = (struct iovec){ (void *)head, sizeof head - 1 };
                    iov[1] = (struct iovec){ (void *)body_of(buf, (size_t)r), BODY };
                    if (writev(fd, iov, 2) < 0)
                        r = 0;
                    else
                        break;
                }
                if (r < 0 && errno == EAGAIN)
                    break;
                close(fd);
                break;
            }
        }
    }
}
