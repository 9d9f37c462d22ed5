/*
 * The admin listener: one thread running a poll(2) loop over the listen
 * socket, a wake-up eventfd and at most CLI_MAXCONN connections.
 *
 * Every socket is non-blocking and every connection has its own input
 * and output buffer, so a slow or stalled client never holds up another;
 * only a command handler, which runs on this thread, makes all of them
 * wait.  A connection reads no further request while an answer is still
 * unsent, which bounds its output buffer by one answer.
 *
 * Authentication (cli_auth.c) is Varnish's challenge-response.  Until a
 * connection has proven it is an operator's -- authenticated with -S, or
 * without -S (where being able to connect is the credential) sent a
 * command -- it is "new", and new connections can never lock an operator
 * out, however many come and however they behave (silent, sending half a
 * line a byte at a time, failing to authenticate):
 *   - with -S, a new connection is closed cli_auth_timeout after it
 *     connected, whatever it sent;
 *   - one address (all Unix-socket clients are one) holds at most
 *     cli_peer_max new connections: another closes its oldest;
 *   - a full table takes every newcomer, closing the oldest new
 *     connection, or when there is none the one whose last command is the
 *     oldest.
 * So a flood only ever pushes out itself -- or, when every slot holds an
 * operator's connection, the idlest of them -- and an operator connecting
 * gets in at once.
 *
 * The connection table and the listener belong to the CLI thread;
 * cli_init() and cli_fini() touch them only while it is not running.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <openssl/crypto.h>

#include "surogat/defs.h"
#include "surogat/cli.h"
#include "surogat/log.h"
#include "surogat/par.h"
#include "surogat/sb.h"
#include "surogat/stat.h"
#include "surogat/tim.h"

#include "cli_priv.h"

#define CLI_MAXCONN     16
#define CLI_IDLE        600.0 /* seconds an admin connection may stay silent */
#define CLI_ACCEPT_REST 0.1   /* seconds without accept() after EMFILE and friends */

struct cli_conn {
    unsigned magic;
#define CLI_CONN_MAGIC 0x6a0f3dc2
    int fd;
    bool authed;   /* may run commands: authenticated, or no secret is set */
    bool proven;   /* authenticated with -S; without, has run a command (see the top) */
    bool eof;      /* the client sent no more: answer what was read, then close */
    bool closing;  /* close once the output is sent */
    double t_last; /* tim_mono() of the last byte read or written */
    double t_open; /* tim_mono() of the accept */
    double t_cmd;  /* tim_mono() of the last command run (t_open before any) */
    char peer[INET6_ADDRSTRLEN + 8];
    char host[INET6_ADDRSTRLEN]; /* the peer's address without the port, "unix" for a socket */
    char challenge[CLI_CHALLENGE + 1];
    char *ibuf; /* CLI_LINE_MAX + 1 bytes: a line and its newline */
    size_t ilen;
    char *obuf; /* unsent answers: obuf[ooff .. olen) */
    size_t ooff, olen, ocap;
    /* cli__stream(): hand the connection to stream() once the output is sent. */
    cli_stream_f *stream;
    void *stream_priv;
};

static int listen_fd = -1;
static int wake_fd = -1;
static char *unix_path; /* to unlink at cli_fini(), or NULL */
static pthread_t cli_thr;
static bool running;
static struct cli_conn *conns[CLI_MAXCONN];
static double accept_rest_until; /* tim_mono(); 0 when accepting */
static char *body_buf;           /* CLI_BODY_MAX bytes for the handlers' answers */
/* The connection whose handler runs, for cli__stream(); per thread, for cli_exec(). */
static __thread struct cli_conn *cur_conn;

/*--------------------------------------------------------------------
 * Output.
 */

static void
out_append(struct cli_conn *cp, const void *p, size_t len)
{
    if (cp->olen + len > cp->ocap) {
        cp->ocap = SRG_MAX(cp->olen + len, 2 * cp->ocap);
        cp->obuf = realloc(cp->obuf, cp->ocap);
        AN(cp->obuf);
    }
    memcpy(cp->obuf + cp->olen, p, len);
    cp->olen += len;
}

static void
respond(struct cli_conn *cp, unsigned status, const char *body, size_t len)
{
    char hdr[CLI_HDR_LEN + 1];

    SRG_ASSERT(status >= 100 && status <= 999);
    SRG_ASSERT(len <= 99999999); /* eight digits */
    AN(snprintf(hdr, sizeof hdr, "%-3u %-8zu\n", status, len) == CLI_HDR_LEN);
    out_append(cp, hdr, CLI_HDR_LEN);
    out_append(cp, body, len);
    out_append(cp, "\n", 1);
}

static void
respond_str(struct cli_conn *cp, unsigned status, const char *body)
{
    respond(cp, status, body, strlen(body));
}

/* 0, or -1 when the connection is dead. */
static int
flush_out(struct cli_conn *cp)
{
    ssize_t n;

    while (cp->ooff < cp->olen) {
        n = send(cp->fd, cp->obuf + cp->ooff, cp->olen - cp->ooff, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return (0);
        if (n <= 0)
            return (-1);
        cp->ooff += (size_t)n;
        cp->t_last = tim_mono();
    }
    cp->ooff = cp->olen = 0;
    return (0);
}

/*--------------------------------------------------------------------
 * Greetings.
 */

static void
send_challenge(struct cli_conn *cp)
{
    char body[CLI_CHALLENGE + 32];

    snprintf(body, sizeof body, "%s\n\nAuthentication required.\n", cp->challenge);
    respond_str(cp, CLI_AUTH, body);
}

static void
send_banner(struct cli_conn *cp)
{
    char buf[1024];
    struct sb sb;

    sb_init(&sb, buf, sizeof buf);
    cli__banner(&sb);
    respond(cp, CLI_OK, sb.buf, sb.len);
}

/*--------------------------------------------------------------------
 * Requests.
 */

/* One request line, NUL-terminated without its newline. */
static void
handle_line(struct cli_conn *cp, char *line)
{
    unsigned status;
    struct sb out;
    char **argv;
    int argc;

    AN(body_buf);
    sb_init(&out, body_buf, CLI_BODY_MAX);
    if (cli__split(line, &argv, &argc, &out) != 0) {
        if (cp->authed)
            respond(cp, CLI_USAGE, out.buf, out.len);
        else
            respond_str(cp, CLI_AUTH, "Authentication required.\n");
        return;
    }
    if (argc == 0) {
        /* Blank lines get no answer, as in Varnish: telnet users press enter. */
    } else if (strcmp(argv[0], "auth") == 0 && cli__secret_set()) {
        if (argc == 2 && cli__auth_ok(cp->challenge, argv[1])) {
            cp->authed = cp->proven = true;
            cp->t_cmd = tim_mono();
            log_msg(LOG_INFO, "cli: %s authenticated", cp->peer);
            send_banner(cp);
        } else {
            log_msg(LOG_WARNING, "cli: authentication failure from %s", cp->peer);
            respond_str(cp, CLI_AUTH, "Authentication failed.\n");
            cp->closing = true;
        }
    } else if (!cp->authed) {
        if (strcmp(argv[0], "quit") == 0) {
            respond_str(cp, CLI_CLOSE, "Closing CLI connection");
            cp->closing = true;
        } else {
            respond_str(cp, CLI_AUTH, "Authentication required.\n");
        }
    } else {
        log_msg(LOG_DEBUG, "cli: %s: %s", cp->peer, argv[0]);
        cp->proven = true;
        cp->t_cmd = tim_mono();
        cur_conn = cp;
        status = cli__dispatch(argc, argv, &out);
        cur_conn = NULL;
        respond(cp, status, out.buf, out.len);
        if (status == CLI_CLOSE)
            cp->closing = true;
    }
    free(argv);
}

/* Answer the complete lines read so far, while the output stays empty. */
static void
handle_input(struct cli_conn *cp)
{
    char *nl;
    size_t n;

    while (!cp->closing && cp->olen == 0 && cp->stream == NULL) {
        n = cli__request_len(cp->ibuf, cp->ilen);
        if (n == 0)
            break;
        nl = cp->ibuf + n - 1;
        *nl = '\0';
        if (nl > cp->ibuf && nl[-1] == '\r')
            nl[-1] = '\0';
        handle_line(cp, cp->ibuf);
        memmove(cp->ibuf, cp->ibuf + n, cp->ilen - n);
        cp->ilen -= n;
    }
    /* A partial line at EOF is dropped: a request needs its newline. */
    if (cp->eof && !cp->closing && cli__request_len(cp->ibuf, cp->ilen) == 0)
        cp->closing = true;
}

/* 0, or -1 when the connection must close now. */
static int
read_in(struct cli_conn *cp)
{
    ssize_t n;

    /* Lines are answered as soon as the output is empty, so a full buffer is never read into. */
    SRG_ASSERT(cp->ilen < CLI_LINE_MAX + 1);
    n = recv(cp->fd, cp->ibuf + cp->ilen, CLI_LINE_MAX + 1 - cp->ilen, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
        return (0);
    if (n < 0)
        return (-1);
    if (n == 0) {
        cp->eof = true;
        return (0);
    }
    cp->t_last = tim_mono();
    cp->ilen += (size_t)n;
    if (cp->ilen == CLI_LINE_MAX + 1 && cli__request_len(cp->ibuf, cp->ilen) == 0) {
        log_msg(LOG_WARNING, "cli: %s: request line over %d bytes, closing", cp->peer,
                CLI_LINE_MAX);
        return (-1);
    }
    return (0);
}

/*--------------------------------------------------------------------
 * Connections.
 */

static void
conn_close(struct cli_conn **cpp)
{
    struct cli_conn *cp;

    OBJ_TAKE(cp, cpp, CLI_CONN_MAGIC);
    if (cp->stream != NULL)
        cp->stream(-1, cp->stream_priv);
    log_msg(LOG_DEBUG, "cli: %s closed", cp->peer);
    if (cp->fd >= 0)
        (void)close(cp->fd);
    OPENSSL_cleanse(cp->ibuf, CLI_LINE_MAX + 1); /* may hold an auth answer */
    free(cp->ibuf);
    free(cp->obuf);
    OBJ_FREE(&cp);
}

/* The peer as "host:port" (peer) and as its address alone (host), "unix" for a socket. */
static void
peer_name(const struct sockaddr_storage *ss, socklen_t sslen, struct cli_conn *cp)
{
    char port[8];

    if (ss->ss_family == AF_UNIX ||
        getnameinfo((const struct sockaddr *)ss, sslen, cp->host, sizeof cp->host, port,
                    sizeof port, NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        snprintf(cp->host, sizeof cp->host, "unix");
        snprintf(cp->peer, sizeof cp->peer, "unix");
        return;
    }
    snprintf(cp->peer, sizeof cp->peer, ss->ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", cp->host,
             port);
}

/* Close conns[slot] to make room for a newcomer; `why` is for the log. */
static void
evict(size_t slot, const char *why)
{
    struct cli_conn *cp = conns[slot];

    log_msg(LOG_INFO, "cli: %s %s %.1f s ago, closed: %s", cp->peer,
            cp->proven ? "last ran a command" : "connected", tim_mono() - cp->t_cmd, why);
    STAT_INC(cli_evicted);
    conn_close(&conns[slot]);
}

/*
 * Make room for a connection from `host` (see the top of the file): its
 * address's oldest new connection goes when it has cli_peer_max of them,
 * then a full table loses its oldest new connection, or when all are
 * proven the one whose last command is the oldest.  Returns a free slot.
 */
static size_t
admit(const char *host)
{
    size_t oldest_host = CLI_MAXCONN, oldest_new = CLI_MAXCONN, idlest = CLI_MAXCONN, slot;
    unsigned nhost = 0;

    for (size_t i = 0; i < CLI_MAXCONN; i++) {
        const struct cli_conn *cp = conns[i];

        if (cp == NULL)
            continue;
        if (cp->proven) {
            if (idlest == CLI_MAXCONN || cp->t_cmd < conns[idlest]->t_cmd)
                idlest = i;
            continue;
        }
        if (oldest_new == CLI_MAXCONN || cp->t_open < conns[oldest_new]->t_open)
            oldest_new = i;
        if (strcmp(cp->host, host) != 0)
            continue;
        nhost++;
        if (oldest_host == CLI_MAXCONN || cp->t_open < conns[oldest_host]->t_open)
            oldest_host = i;
    }
    if (nhost >= par.cli_peer_max && oldest_host < CLI_MAXCONN) {
        evict(oldest_host, "too many unauthenticated admin connections from its address "
                           "(cli_peer_max)");
        return (oldest_host);
    }
    for (slot = 0; slot < CLI_MAXCONN && conns[slot] != NULL; slot++)
        continue;
    if (slot < CLI_MAXCONN)
        return (slot);
    slot = oldest_new < CLI_MAXCONN ? oldest_new : idlest;
    AN(slot < CLI_MAXCONN);
    evict(slot, "the admin connection table is full");
    return (slot);
}

static void
accept_conns(void)
{
    struct sockaddr_storage ss;
    struct cli_conn *cp;
    socklen_t sslen;
    size_t slot;
    int fd;

    for (;;) {
        sslen = sizeof ss;
        fd = accept4(listen_fd, (struct sockaddr *)&ss, &sslen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno != EAGAIN && errno != EWOULDBLOCK) {
                /* Out of descriptors or memory: the listener stays readable, so rest. */
                log_msg(LOG_ERR, "cli: accept: %s", strerror(errno));
                accept_rest_until = tim_mono() + CLI_ACCEPT_REST;
            }
            return;
        }
        OBJ_NEW(cp, CLI_CONN_MAGIC);
        cp->fd = fd;
        cp->t_last = cp->t_open = cp->t_cmd = tim_mono();
        peer_name(&ss, sslen, cp);
        cp->ibuf = malloc(CLI_LINE_MAX + 1);
        AN(cp->ibuf);
        slot = admit(cp->host);
        log_msg(LOG_DEBUG, "cli: %s connected", cp->peer);
        if (!cli__secret_set()) {
            cp->authed = true;
            send_banner(cp);
        } else if (cli__challenge_new(cp->challenge) == 0) {
            send_challenge(cp);
        } else {
            log_msg(LOG_ERR, "cli: RAND_bytes failed, refusing %s", cp->peer);
            respond_str(cp, CLI_FAILED, "No randomness for a challenge.");
            cp->closing = true;
        }
        AZ(conns[slot]);
        conns[slot] = cp;
        if (flush_out(cp) != 0 || (cp->closing && cp->olen == 0))
            conn_close(&conns[slot]);
    }
}

/*
 * Serve one connection after poll() reported `revents` on it.
 * 0, or -1 when it must close.
 */
static int
conn_event(struct cli_conn *cp, short revents)
{
    if (revents & POLLNVAL)
        return (-1);
    if ((revents & (POLLIN | POLLHUP | POLLERR)) && !cp->eof && cp->olen == 0) {
        if (read_in(cp) != 0)
            return (-1);
    }
    /* Answer pipelined lines one at a time, for as long as the socket takes the answers. */
    for (;;) {
        handle_input(cp);
        if (cp->olen == 0)
            break;
        if (flush_out(cp) != 0)
            return (-1);
        if (cp->olen > 0)
            break;
    }
    if ((revents & POLLERR) && cp->olen > 0)
        return (-1);
    if (cp->stream != NULL && cp->olen == 0) {
        /* Answered: the connection is the stream's now; the table forgets it. */
        cp->stream(cp->fd, cp->stream_priv);
        cp->stream = NULL;
        cp->fd = -1;
        return (-1);
    }
    if (cp->closing && cp->olen == 0)
        return (-1);
    return (0);
}

int
cli__stream(cli_stream_f *fn, void *priv)
{
    AN(fn);
    if (cur_conn == NULL)
        return (-1);
    OBJ_CHECK(cur_conn, CLI_CONN_MAGIC);
    SRG_ASSERT(cur_conn->stream == NULL);
    cur_conn->stream = fn;
    cur_conn->stream_priv = priv;
    return (0);
}

static void *
cli_thread(void *arg)
{
    struct pollfd pfd[2 + CLI_MAXCONN];
    int idx[CLI_MAXCONN]; /* pfd index of conns[i], or -1 */
    double now, next;
    int n, tmo;

    (void)arg;
    /* No counters here, but a registered handler may count. */
    stat_thread_enter();
    body_buf = malloc(CLI_BODY_MAX);
    AN(body_buf);
    for (;;) {
        now = tim_mono();
        next = now + CLI_IDLE;
        n = 0;
        pfd[n++] = (struct pollfd){ .fd = wake_fd, .events = POLLIN };
        if (accept_rest_until <= now) {
            pfd[n++] = (struct pollfd){ .fd = listen_fd, .events = POLLIN };
        } else {
            pfd[n++] = (struct pollfd){ .fd = -1 };
            next = SRG_MIN(next, accept_rest_until);
        }
        for (int i = 0; i < CLI_MAXCONN; i++) {
            idx[i] = -1;
            if (conns[i] == NULL)
                continue;
            if (now - conns[i]->t_last >= CLI_IDLE) {
                log_msg(LOG_INFO, "cli: %s idle for %.0f s, closing", conns[i]->peer, CLI_IDLE);
                conn_close(&conns[i]);
                continue;
            }
            next = SRG_MIN(next, conns[i]->t_last + CLI_IDLE);
            if (!conns[i]->proven && cli__secret_set()) {
                /* Counted from the connect: bytes trickling in do not extend it. */
                double deadline = conns[i]->t_open + par.cli_auth_timeout;
                if (now >= deadline) {
                    log_msg(LOG_INFO, "cli: %s did not authenticate within %.1f s, closing",
                            conns[i]->peer, par.cli_auth_timeout);
                    STAT_INC(cli_unauth_closed);
                    conn_close(&conns[i]);
                    continue;
                }
                next = SRG_MIN(next, deadline);
            }
            idx[i] = n;
            pfd[n++] = (struct pollfd){
                .fd = conns[i]->fd,
                .events = (short)(conns[i]->olen > 0 ? POLLOUT
                                  : conns[i]->eof    ? 0
                                                     : POLLIN),
            };
        }
        tmo = (int)((next - now) * 1e3) + 1;
        if (poll(pfd, (nfds_t)n, tmo) < 0) {
            if (errno == EINTR)
                continue;
            log_msg(LOG_ERR, "cli: poll: %s", strerror(errno));
            SRG_WRONG("cli: poll failed");
        }
        if (pfd[0].revents != 0)
            break;
        for (int i = 0; i < CLI_MAXCONN; i++) {
            if (idx[i] < 0 || conns[i] == NULL || pfd[idx[i]].revents == 0)
                continue;
            if (conn_event(conns[i], pfd[idx[i]].revents) != 0)
                conn_close(&conns[i]);
        }
        /* After the events: a slot accept_conns() refills must not get its old tenant's. */
        if (pfd[1].revents != 0)
            accept_conns();
    }
    for (int i = 0; i < CLI_MAXCONN; i++)
        if (conns[i] != NULL)
            conn_close(&conns[i]);
    free(body_buf);
    body_buf = NULL;
    stat_thread_leave();
    return (NULL);
}

/*--------------------------------------------------------------------
 * Setup.
 */

/* Whether a process accepts connections on the Unix socket at sun. */
static bool
unix_in_use(const struct sockaddr_un *sun)
{
    bool used;
    int fd;

    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return (true); /* cannot tell: leave it alone */
    /* A full backlog (EAGAIN) still means somebody listens. */
    used = connect(fd, (const struct sockaddr *)sun, sizeof *sun) == 0 || errno == EAGAIN;
    (void)close(fd);
    return (used);
}

static int
listen_unix(const char *path, struct sb *err)
{
    struct sockaddr_un sun = { .sun_family = AF_UNIX };
    struct stat st;
    int fd;

    if (strlen(path) >= sizeof sun.sun_path) {
        sb_printf(err, "admin socket '%s': path too long", path);
        return (-1);
    }
    strcpy(sun.sun_path, path);
    /*
     * Replace a socket only if nobody answers on it: a dead daemon's.  Never
     * unlink anything else that happens to sit at the path.
     */
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            sb_printf(err, "admin socket '%s': exists and is not a socket", path);
            return (-1);
        }
        if (unix_in_use(&sun)) {
            sb_printf(err, "admin socket '%s': in use by another process", path);
            return (-1);
        }
        (void)unlink(path);
    }
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        sb_printf(err, "admin socket '%s': %s", path, strerror(errno));
        return (-1);
    }
    if (bind(fd, (struct sockaddr *)&sun, sizeof sun) != 0) {
        sb_printf(err, "admin socket '%s': %s", path, strerror(errno));
        (void)close(fd);
        return (-1);
    }
    /* Nobody can connect before listen(), so the mode is set in time. */
    if (chmod(path, 0600) != 0 || listen(fd, 16) != 0) {
        sb_printf(err, "admin socket '%s': %s", path, strerror(errno));
        (void)close(fd);
        (void)unlink(path);
        return (-1);
    }
    unix_path = strdup(path);
    AN(unix_path);
    return (fd);
}

static int
listen_tcp(const char *addr, struct sb *err)
{
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE };
    struct addrinfo *res, *ai;
    char host[256];
    const char *port, *h = host;
    size_t hlen;
    int fd = -1, e, one = 1, saved = 0;

    /* "[v6]:port", "host:port" or ":port" (every interface). */
    if (addr[0] == '[') {
        port = strstr(addr, "]:");
        if (port == NULL) {
            sb_printf(err, "admin address '%s': expected [ADDR]:PORT", addr);
            return (-1);
        }
        hlen = (size_t)(port - addr) - 1;
        memcpy(host, addr + 1, SRG_MIN(hlen, sizeof host - 1));
        port += 2;
    } else {
        port = strrchr(addr, ':');
        if (port == NULL) {
            sb_printf(err, "admin address '%s': expected ADDR:PORT or /path", addr);
            return (-1);
        }
        hlen = (size_t)(port - addr);
        memcpy(host, addr, SRG_MIN(hlen, sizeof host - 1));
        port++;
    }
    if (hlen >= sizeof host || *port == '\0') {
        sb_printf(err, "admin address '%s': bad host or port", addr);
        return (-1);
    }
    host[hlen] = '\0';
    if (hlen == 0)
        h = NULL;
    e = getaddrinfo(h, port, &hints, &res);
    if (e != 0) {
        sb_printf(err, "admin address '%s': %s", addr, gai_strerror(e));
        return (-1);
    }
    for (ai = res; ai != NULL; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0) {
            saved = errno;
            continue;
        }
        AZ(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && listen(fd, 16) == 0)
            break;
        saved = errno;
        (void)close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0)
        sb_printf(err, "admin address '%s': %s", addr, strerror(saved));
    return (fd);
}

int
cli_init(const char *addr, const char *secret_file, struct sb *err)
{
    sigset_t all, old;
    int e;

    AN(addr);
    AN(err);
    SRG_ASSERT(!running && listen_fd < 0);
    if (secret_file != NULL && secret_file[0] != '\0' && cli__secret_read(secret_file, err) != 0)
        return (-1);
    listen_fd = addr[0] == '/' ? listen_unix(addr, err) : listen_tcp(addr, err);
    if (listen_fd < 0) {
        cli__secret_forget();
        return (-1);
    }
    wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    AN(wake_fd >= 0);
    accept_rest_until = 0;
    cli__log_init();
    /* Signals belong to the main thread: start ours with all of them blocked. */
    AZ(sigfillset(&all));
    AZ(pthread_sigmask(SIG_SETMASK, &all, &old));
    e = pthread_create(&cli_thr, NULL, cli_thread, NULL);
    AZ(pthread_sigmask(SIG_SETMASK, &old, NULL));
    if (e != 0) {
        sb_printf(err, "admin thread: %s", strerror(e));
        cli_fini();
        return (-1);
    }
    running = true;
    log_msg(LOG_INFO, "cli: listening on %s%s", addr,
            cli__secret_set() ? " (authentication required)" : "");
    return (0);
}

void
cli_fini(void)
{
    uint64_t one = 1;

    if (running) {
        AN(write(wake_fd, &one, sizeof one) == sizeof one);
        AZ(pthread_join(cli_thr, NULL));
        running = false;
    }
    cli__log_fini();
    if (listen_fd >= 0)
        (void)close(listen_fd);
    listen_fd = -1;
    if (wake_fd >= 0)
        (void)close(wake_fd);
    wake_fd = -1;
    if (unix_path != NULL) {
        (void)unlink(unix_path);
        free(unix_path);
        unix_path = NULL;
    }
    cli__secret_forget();
    cli__cmds_fini();
}
