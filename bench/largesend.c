/*
 * largesend -- what one large response costs the sender over TCP on
 * loopback, by the way its bytes reach the socket: the mechanisms open to
 * a large cached body (issue 15, item 2).  A client on one core asks for
 * a body (one byte), reads it whole and asks again; the server on another
 * core sends it each time and counts its own CPU (utime+stime, which on
 * loopback includes the receive path the kernel runs in the sender) per
 * response, over COUNT responses after 20 unmeasured ones.
 *
 *   copy          send(2) from a mapping of a memory file (the writev path)
 *   sendfile      sendfile(2) from the memory file (the malloc store's large bodies)
 *   zerocopy      send(2) MSG_ZEROCOPY from the memory file's mapping
 *   filecopy      send(2) from a mapping of a file on disk
 *   filesendfile  sendfile(2) from that file (the file store)
 *   filezerocopy  send(2) MSG_ZEROCOPY from the file's mapping
 *
 * The zerocopy modes read the completions from the error queue and count
 * those the kernel flags SO_EE_CODE_ZEROCOPY_COPIED: it copied the pages
 * after all (on loopback it must, before a local socket may queue them).
 *
 *   cc -O2 -o largesend bench/largesend.c
 *   ./largesend MODE [SIZE [COUNT [SNDBUF [CHUNK [DIR]]]]]
 *
 * SIZE bytes per response (1048576), COUNT responses (1000), SNDBUF for
 * SO_SNDBUF (0: the kernel's autotuning), CHUNK bytes per call (SIZE),
 * DIR for the file modes' file (.).  Server on core 0, client on core 1.
 */
#define _GNU_SOURCE /* memfd_create, sched_setaffinity */
#include <errno.h>
#include <fcntl.h>
#include <linux/errqueue.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef SO_EE_ORIGIN_ZEROCOPY
#define SO_EE_ORIGIN_ZEROCOPY 5
#endif
#ifndef SO_EE_CODE_ZEROCOPY_COPIED
#define SO_EE_CODE_ZEROCOPY_COPIED 1
#endif

#define WARMUP 20

static long sends_done, messages, copied_messages, enobufs;

static void
pin(int cpu)
{
    cpu_set_t s;

    CPU_ZERO(&s);
    CPU_SET(cpu, &s);
    (void)sched_setaffinity(0, sizeof s, &s);
}

static double
cpu_seconds(void)
{
    struct rusage r;

    getrusage(RUSAGE_SELF, &r);
    return (r.ru_utime.tv_sec + r.ru_utime.tv_usec / 1e6 + r.ru_stime.tv_sec +
            r.ru_stime.tv_usec / 1e6);
}

/* Read the zerocopy completions queued so far: sends counted, and those copied anyway. */
static void
completions(int fd)
{
    char ctl[256];
    struct msghdr m;

    for (;;) {
        memset(&m, 0, sizeof m);
        m.msg_control = ctl;
        m.msg_controllen = sizeof ctl;
        if (recvmsg(fd, &m, MSG_ERRQUEUE) < 0)
            return;
        for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c != NULL; c = CMSG_NXTHDR(&m, c)) {
            struct sock_extended_err *e = (struct sock_extended_err *)(void *)CMSG_DATA(c);
            if (e->ee_origin != SO_EE_ORIGIN_ZEROCOPY)
                continue;
            sends_done += (long)(e->ee_data - e->ee_info + 1);
            messages++;
            if (e->ee_code & SO_EE_CODE_ZEROCOPY_COPIED)
                copied_messages++;
        }
    }
}

static void
client(const struct sockaddr_in *a, size_t size, int count)
{
    int c = socket(AF_INET, SOCK_STREAM, 0);
    char *buf = malloc(1 << 20);

    pin(1);
    if (c < 0 || buf == NULL || connect(c, (const struct sockaddr *)a, sizeof *a) != 0)
        _exit(1);
    for (int i = 0; i < count; i++) {
        if (write(c, "g", 1) != 1)
            _exit(1);
        for (size_t got = 0; got < size;) {
            ssize_t n = read(c, buf, 1 << 20);
            if (n <= 0)
                _exit(1);
            got += (size_t)n;
        }
    }
    _exit(0);
}

int
main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    size_t size = argc > 2 ? strtoul(argv[2], NULL, 0) : 1048576;
    int count = argc > 3 ? atoi(argv[3]) : 1000;
    int sndbuf = argc > 4 ? atoi(argv[4]) : 0;
    size_t chunk = argc > 5 ? strtoul(argv[5], NULL, 0) : size;
    const char *dir = argc > 6 ? argv[6] : ".";
    bool file = strncmp(mode, "file", 4) == 0;
    const char *how = file ? mode + 4 : mode;
    bool zc = strcmp(how, "zerocopy") == 0;
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001) };
    socklen_t alen = sizeof a;
    char path[4096], *map;
    int one = 1, ls, s, fd;
    long polls = 0;
    double c0 = 0, c1;
    struct timespec t0 = { 0 }, t1;
    pid_t pid;

    if (strcmp(how, "copy") != 0 && strcmp(how, "sendfile") != 0 && !zc) {
        fprintf(stderr, "usage: %s copy|sendfile|zerocopy|filecopy|filesendfile|filezerocopy "
                        "[SIZE [COUNT [SNDBUF [CHUNK [DIR]]]]]\n", argv[0]);
        return (2);
    }
    if (size == 0 || count <= 0 || chunk == 0)
        return (2);
    ls = socket(AF_INET, SOCK_STREAM, 0);
    if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof a) != 0 || listen(ls, 1) != 0 ||
        getsockname(ls, (struct sockaddr *)&a, &alen) != 0) {
        perror("listen");
        return (1);
    }
    if (file) {
        snprintf(path, sizeof path, "%s/largesend.%d", dir, (int)getpid());
        fd = open(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    } else {
        fd = memfd_create("largesend", MFD_CLOEXEC);
    }
    if (fd < 0 || ftruncate(fd, (off_t)size) != 0) {
        perror("body");
        return (1);
    }
    map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) {
        perror("mmap");
        return (1);
    }
    memset(map, 'x', size);
    if (file) {
        (void)fsync(fd); /* clean pages in the page cache, as the file store's */
        (void)unlink(path);
    }
    pid = fork();
    if (pid == 0)
        client(&a, size, count + WARMUP);
    pin(0);
    s = accept(ls, NULL, NULL);
    if (s < 0)
        return (1);
    (void)setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    if (sndbuf > 0)
        (void)setsockopt(s, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
    if (zc && setsockopt(s, SOL_SOCKET, SO_ZEROCOPY, &one, sizeof one) != 0) {
        perror("SO_ZEROCOPY");
        return (1);
    }
    (void)fcntl(s, F_SETFL, O_NONBLOCK);
    for (int i = 0; i < count + WARMUP; i++) {
        struct pollfd pr = { s, POLLIN, 0 };
        char g;

        if (i == WARMUP) {
            c0 = cpu_seconds();
            clock_gettime(CLOCK_MONOTONIC, &t0);
            polls = 0;
        }
        while (read(s, &g, 1) != 1)
            if (poll(&pr, 1, 10000) <= 0)
                return (1);
        for (size_t off = 0; off < size;) {
            size_t want = size - off < chunk ? size - off : chunk;
            struct pollfd pw = { s, POLLOUT, 0 };
            off_t o = (off_t)off;
            ssize_t n;

            if (strcmp(how, "sendfile") == 0)
                n = sendfile(s, fd, &o, want);
            else
                n = send(s, map + off, want, zc ? MSG_ZEROCOPY : 0);
            if (n > 0) {
                off += (size_t)n;
                continue;
            }
            if (n < 0 && errno == ENOBUFS) /* optmem_max: wait for completions */
                enobufs++;
            else if (n == 0 || errno != EAGAIN) {
                perror("send");
                return (1);
            }
            if (zc)
                completions(s);
            (void)poll(&pw, 1, 10000);
            polls++;
        }
        if (zc)
            completions(s);
    }
    c1 = cpu_seconds();
    clock_gettime(CLOCK_MONOTONIC, &t1);
    waitpid(pid, NULL, 0);
    printf("%-13s size %zu sndbuf %d chunk %zu: server CPU %.1f us/response, wall %.1f us, "
           "waits %.2f/response, zerocopy: %ld sends completed in %ld messages, %ld flagged copied, ENOBUFS %ld\n",
           mode, size, sndbuf, chunk, (c1 - c0) / count * 1e6,
           ((double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9) / count * 1e6,
           (double)polls / count, sends_done, messages, copied_messages, enobufs);
    return (0);
}
