/*
 * surogatctl -- the admin client.  It connects to surogatd's admin
 * socket (-T), answers the authentication challenge with the secret file
 * (-S), then either sends one command built from its arguments, relays
 * the lines of stdin, or runs `top` (stats -j every second, shown by
 * ctl_top.c).  The protocol is described in surogat/cli.h.
 *
 * Single-threaded, blocking in poll(2) with a deadline of -t seconds for
 * every exchange, so a hung daemon cannot hang a monitoring script.
 *
 * Exit status: 0 success, 1 the daemon refused the command (to any
 * command, in interactive mode), 2 usage error or no usable connection
 * (refused, closed, timed out, authentication failed).  A refusal is any
 * status but 200, 201 (answer truncated: a warning) and 500 (the answer
 * to quit).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>
#include <netdb.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "surogat/defs.h"
#include "surogat/cli.h"

#include "ctl_priv.h"

#define DEFAULT_ADMIN   "127.0.0.1:6082"
#define DEFAULT_TIMEOUT 5.0
#define CHALLENGE_LEN   32
#define SECRET_MAX      65536

/*
 * `reload` without -t: the daemon answers once the reload is done, within
 * its own bound of 30 s (cli_admin.c), so wait a little longer than that.
 */
#define RELOAD_TIMEOUT 35.0

struct resp {
    unsigned status;
    char *body; /* NUL-terminated, malloc'd */
    size_t len;
};

static const char *prog = "surogatctl";
static double timeout = DEFAULT_TIMEOUT;
static bool timeout_given; /* -t: the user's bound holds for every command */

static void
usage(FILE *f)
{
    fprintf(f,
            "usage: %s [-T ADDR:PORT | -T /unix/path] [-S SECRETFILE] [-t TIMEOUT] [-j]\n"
            "                  [COMMAND [ARG...]]\n"
            "\n"
            "Send COMMAND to surogatd's admin interface and print the answer: to stdout\n"
            "when it succeeds (exit 0), to stderr when the daemon refuses it (exit 1).\n"
            "Without COMMAND, send each line of stdin and print each answer; 'quit'\n"
            "or end of input stops.  'top [-1] [-d SECONDS] [PATTERN...]' shows the\n"
            "counters live with their rates and descriptions (q or Ctrl-C quits; -1: one\n"
            "frame, then exit).  'stats -r [-d SECONDS] [-l] [PATTERN...]' prints each\n"
            "counter with its rate over SECONDS (default 1).\n"
            "\n"
            "  -T ADDR:PORT  admin address (\"127.0.0.1:6082\", \"[::1]:6082\") or Unix\n"
            "                socket path; default $SUROGAT_ADMIN, else " DEFAULT_ADMIN "\n"
            "  -S FILE       secret file, as given to surogatd -S\n"
            "  -t SECONDS    give up on the daemon after this long (default %.0f)\n"
            "  -j            ask for JSON (puts -j after COMMAND: \"stats -j\")\n"
            "  -h            this text\n"
            "\n"
            "'%s log [-d] [-j] [-g request|tx] [-q QUERY] [-u REGEX] [-s STATUS] [-c CACHE]\n"
            "[-i ACL]' streams one line per request, or with -g each request's trace,\n"
            "until Ctrl-C (see surogatctl(1)).  'reload' reloads the\n"
            "configuration file, the policy and the certificates, all or nothing, and\n"
            "prints the outcome; 'log.reopen' reopens the logs.\n"
            "\n"
            "Exit status: 0 success, 1 command failed, 2 usage or connection error.\n"
            "Try '%s help' for the daemon's commands.\n",
            prog, DEFAULT_TIMEOUT, prog, prog);
}

static double
now_mono(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return (ts.tv_sec + ts.tv_nsec * 1e-9);
}

/* Wait for `events` on fd until `deadline`: 1 ready, 0 timed out, -1 error. */
static int
wait_fd(int fd, short events, double deadline)
{
    struct pollfd pfd = { .fd = fd, .events = events };
    double left;
    int r;

    for (;;) {
        left = deadline - now_mono();
        if (left <= 0)
            return (0);
        r = poll(&pfd, 1, (int)(left * 1e3) + 1);
        if (r < 0 && errno == EINTR)
            continue;
        return (r < 0 ? -1 : r);
    }
}

/*--------------------------------------------------------------------
 * Connecting.
 */

/* Non-blocking connect within the deadline; the fd stays non-blocking. */
static int
connect_one(int family, const struct sockaddr *sa, socklen_t salen, double deadline)
{
    socklen_t elen = sizeof(int);
    int fd, e = 0;

    fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return (-1);
    if (connect(fd, sa, salen) == 0)
        return (fd);
    if (errno != EINPROGRESS && errno != EAGAIN) {
        e = errno;
    } else if (wait_fd(fd, POLLOUT, deadline) <= 0) {
        e = ETIMEDOUT;
    } else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &elen) != 0) {
        e = errno;
    }
    if (e == 0)
        return (fd);
    (void)close(fd);
    errno = e;
    return (-1);
}

static int
connect_admin(const char *addr, double deadline)
{
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM };
    struct sockaddr_un sun = { .sun_family = AF_UNIX };
    struct addrinfo *res, *ai;
    char host[256];
    const char *port;
    size_t hlen;
    int fd = -1, e;

    if (addr[0] == '/') {
        if (strlen(addr) >= sizeof sun.sun_path) {
            fprintf(stderr, "%s: %s: path too long\n", prog, addr);
            return (-1);
        }
        strcpy(sun.sun_path, addr);
        fd = connect_one(AF_UNIX, (struct sockaddr *)&sun, sizeof sun, deadline);
        if (fd < 0)
            fprintf(stderr, "%s: %s: %s\n", prog, addr, strerror(errno));
        return (fd);
    }
    if (addr[0] == '[') {
        port = strstr(addr, "]:");
        hlen = port == NULL ? 0 : (size_t)(port - addr) - 1;
        if (port != NULL) {
            memcpy(host, addr + 1, SRG_MIN(hlen, sizeof host - 1));
            port += 2;
        }
    } else {
        port = strrchr(addr, ':');
        hlen = port == NULL ? 0 : (size_t)(port - addr);
        if (port != NULL) {
            memcpy(host, addr, SRG_MIN(hlen, sizeof host - 1));
            port++;
        }
    }
    if (port == NULL || *port == '\0' || hlen >= sizeof host) {
        fprintf(stderr, "%s: -T %s: expected ADDR:PORT, [ADDR]:PORT or /path\n", prog, addr);
        return (-1);
    }
    host[hlen] = '\0';
    /* ":6082" names the daemon listening on every interface: reach it on loopback. */
    e = getaddrinfo(hlen == 0 ? NULL : host, port, &hints, &res);
    if (e != 0) {
        fprintf(stderr, "%s: %s: %s\n", prog, addr, gai_strerror(e));
        return (-1);
    }
    for (ai = res; ai != NULL && fd < 0; ai = ai->ai_next)
        fd = connect_one(ai->ai_family, ai->ai_addr, ai->ai_addrlen, deadline);
    if (fd < 0)
        fprintf(stderr, "%s: %s: %s\n", prog, addr, strerror(errno));
    freeaddrinfo(res);
    return (fd);
}

/*--------------------------------------------------------------------
 * The protocol.
 */

/* Read exactly len bytes before the deadline.  0, or -1 with errno (0 at EOF). */
static int
read_full(int fd, char *buf, size_t len, double deadline)
{
    ssize_t n;
    int r;

    while (len > 0) {
        n = read(fd, buf, len);
        if (n > 0) {
            buf += n;
            len -= (size_t)n;
            continue;
        }
        if (n == 0) {
            errno = 0;
            return (-1);
        }
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return (-1);
        r = wait_fd(fd, POLLIN, deadline);
        if (r == 0)
            errno = ETIMEDOUT;
        if (r <= 0)
            return (-1);
    }
    return (0);
}

static int
write_full(int fd, const char *buf, size_t len, double deadline)
{
    ssize_t n;
    int r;

    while (len > 0) {
        n = send(fd, buf, len, MSG_NOSIGNAL);
        if (n > 0) {
            buf += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            return (-1);
        r = wait_fd(fd, POLLOUT, deadline);
        if (r == 0)
            errno = ETIMEDOUT;
        if (r <= 0)
            return (-1);
    }
    return (0);
}

static void
comm_error(const char *what)
{
    if (errno == 0)
        fprintf(stderr, "%s: %s: connection closed by surogatd\n", prog, what);
    else
        fprintf(stderr, "%s: %s: %s\n", prog, what, strerror(errno));
}

/* One response.  0, or -1 after printing why. */
static int
read_resp(int fd, struct resp *rp)
{
    char hdr[CLI_HDR_LEN + 1], *end;
    double deadline = now_mono() + timeout;
    unsigned long st;
    unsigned long long len;

    if (read_full(fd, hdr, CLI_HDR_LEN, deadline) != 0) {
        comm_error("reading the answer");
        return (-1);
    }
    hdr[CLI_HDR_LEN] = '\0';
    errno = 0;
    st = strtoul(hdr, &end, 10);
    if (end != hdr + 3 || *end != ' ' || st < 100 || st > 999 || hdr[CLI_HDR_LEN - 1] != '\n')
        goto bad;
    len = strtoull(hdr + 4, &end, 10);
    if (end == hdr + 4 || (*end != ' ' && *end != '\n') || len > 99999999)
        goto bad;
    rp->status = (unsigned)st;
    rp->len = (size_t)len;
    rp->body = malloc(rp->len + 1);
    if (rp->body == NULL) {
        fprintf(stderr, "%s: out of memory\n", prog);
        return (-1);
    }
    /* The body, then the "\n" that ends every answer. */
    if (read_full(fd, rp->body, rp->len, deadline) != 0 || read_full(fd, hdr, 1, deadline) != 0) {
        comm_error("reading the answer");
        free(rp->body);
        return (-1);
    }
    rp->body[rp->len] = '\0';
    return (0);
bad:
    fprintf(stderr, "%s: not a surogat admin interface (bad answer header)\n", prog);
    return (-1);
}

/* Send one request line (without newline) and read its answer. */
static int
exchange(int fd, const char *line, struct resp *rp)
{
    double deadline = now_mono() + timeout;

    if (write_full(fd, line, strlen(line), deadline) != 0 ||
        write_full(fd, "\n", 1, deadline) != 0) {
        comm_error("sending the command");
        return (-1);
    }
    return (read_resp(fd, rp));
}

static char *
read_secret(const char *path, size_t *lenp)
{
    char *buf;
    size_t len = 0;
    ssize_t n = 0;
    int fd;

    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "%s: %s: %s\n", prog, path, strerror(errno));
        return (NULL);
    }
    buf = malloc(SECRET_MAX + 1);
    if (buf == NULL) {
        (void)close(fd);
        return (NULL);
    }
    while (len <= SECRET_MAX) {
        n = read(fd, buf + len, SECRET_MAX + 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    if (n < 0 || len > SECRET_MAX) {
        fprintf(stderr, "%s: %s: %s\n", prog, path, n < 0 ? strerror(errno) : "too large");
        OPENSSL_cleanse(buf, SECRET_MAX + 1);
        free(buf);
        buf = NULL;
    }
    (void)close(fd);
    *lenp = len;
    return (buf);
}

/* Varnish's scheme: hex(SHA-256(challenge "\n" secret challenge "\n")). */
static int
auth_response(const char *challenge, const char *secret_file, char *out /* 65 bytes */)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned mdlen = 0;
    EVP_MD_CTX *ctx;
    size_t slen;
    char *s;
    int ok;

    s = read_secret(secret_file, &slen);
    if (s == NULL)
        return (-1);
    ctx = EVP_MD_CTX_new();
    ok = ctx != NULL && EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1 &&
         EVP_DigestUpdate(ctx, challenge, CHALLENGE_LEN) == 1 &&
         EVP_DigestUpdate(ctx, "\n", 1) == 1 && EVP_DigestUpdate(ctx, s, slen) == 1 &&
         EVP_DigestUpdate(ctx, challenge, CHALLENGE_LEN) == 1 &&
         EVP_DigestUpdate(ctx, "\n", 1) == 1 && EVP_DigestFinal_ex(ctx, md, &mdlen) == 1 &&
         mdlen == 32;
    EVP_MD_CTX_free(ctx);
    OPENSSL_cleanse(s, slen);
    free(s);
    if (!ok) {
        fprintf(stderr, "%s: SHA-256 failed\n", prog);
        return (-1);
    }
    for (unsigned i = 0; i < mdlen; i++)
        snprintf(out + 2 * i, 3, "%02x", md[i]);
    OPENSSL_cleanse(md, sizeof md);
    return (0);
}

/*
 * Read the greeting and authenticate if asked.  0 with the banner in
 * *banner (the caller frees it), or -1 after printing why.
 */
static int
handshake(int fd, const char *secret_file, struct resp *banner)
{
    char line[5 + 64 + 1];
    struct resp r;

    if (read_resp(fd, &r) != 0)
        return (-1);
    if (r.status == CLI_AUTH) {
        if (secret_file == NULL) {
            fprintf(stderr, "%s: surogatd requires authentication: use -S SECRETFILE\n", prog);
            free(r.body);
            return (-1);
        }
        if (r.len < CHALLENGE_LEN ||
            strspn(r.body, "abcdefghijklmnopqrstuvwxyz") != CHALLENGE_LEN) {
            fprintf(stderr, "%s: malformed authentication challenge\n", prog);
            free(r.body);
            return (-1);
        }
        memcpy(line, "auth ", 5);
        if (auth_response(r.body, secret_file, line + 5) != 0) {
            free(r.body);
            return (-1);
        }
        free(r.body);
        if (exchange(fd, line, &r) != 0)
            return (-1);
        if (r.status == CLI_AUTH) {
            fprintf(stderr, "%s: authentication failed: wrong secret file?\n", prog);
            free(r.body);
            return (-1);
        }
    }
    if (r.status != CLI_OK) {
        fprintf(stderr, "%s: surogatd refused the connection: %u %s\n", prog, r.status, r.body);
        free(r.body);
        return (-1);
    }
    *banner = r;
    return (0);
}

/*--------------------------------------------------------------------
 * Modes.
 */

static void
print_body(FILE *f, const struct resp *rp)
{
    if (rp->len == 0)
        return;
    (void)fwrite(rp->body, 1, rp->len, f);
    if (rp->body[rp->len - 1] != '\n')
        (void)fputc('\n', f);
}

/* Append `arg` to line, quoted as the daemon splits it when it has to be. */
static void
append_arg(char *line, size_t *pos, const char *arg)
{
    char *w = line + *pos;

    if (*pos > 0)
        *w++ = ' ';
    if (*arg != '\0' && strpbrk(arg, " \t\"\\\n\r") == NULL) {
        w = stpcpy(w, arg);
    } else {
        *w++ = '"';
        for (const char *r = arg; *r != '\0'; r++) {
            switch (*r) {
            case '"':
            case '\\':
                *w++ = '\\';
                *w++ = *r;
                break;
            case '\n':
                w = stpcpy(w, "\\n");
                break;
            case '\r':
                w = stpcpy(w, "\\r");
                break;
            case '\t':
                w = stpcpy(w, "\\t");
                break;
            default:
                *w++ = *r;
            }
        }
        *w++ = '"';
    }
    *w = '\0';
    *pos = (size_t)(w - line);
}

/* Whether the daemon did what it was asked (see the exit statuses above). */
static bool
answer_ok(const struct resp *rp)
{
    if (rp->status == CLI_TRUNCATED)
        fprintf(stderr, "%s: the answer was too long and is cut short\n", prog);
    return (rp->status == CLI_OK || rp->status == CLI_TRUNCATED || rp->status == CLI_CLOSE);
}

/*
 * After `log` answered OK the connection carries request lines until it
 * closes: copy them to stdout as they come, with no deadline, until the
 * daemon closes it, stdout goes away, or a signal (Ctrl-C) ends us.
 */
static int
log_stream(int fd)
{
    char buf[65536];
    ssize_t n;

    fflush(stdout);
    for (;;) {
        n = read(fd, buf, sizeof buf);
        if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (errno != EINTR)
                (void)wait_fd(fd, POLLIN, now_mono() + 3600);
            continue;
        }
        if (n <= 0)
            return (n == 0 ? 0 : 2);
        if (fwrite(buf, 1, (size_t)n, stdout) != (size_t)n || fflush(stdout) != 0)
            return (0); /* the reader of our output left: done */
    }
}

/* The request line of argv, quoted; NULL (said on stderr) when too long. */
static char *
build_line(int argc, char **argv, bool json)
{
    size_t need = 16, pos = 0;
    char *line;

    /* Quoting at most doubles an argument, plus quotes and a space. */
    for (int i = 0; i < argc; i++)
        need += 2 * strlen(argv[i]) + 3;
    line = malloc(need);
    AN(line);
    line[0] = '\0';
    append_arg(line, &pos, argv[0]);
    if (json)
        append_arg(line, &pos, "-j");
    for (int i = 1; i < argc; i++)
        append_arg(line, &pos, argv[i]);
    if (pos > CLI_LINE_MAX) {
        fprintf(stderr, "%s: command longer than %d bytes\n", prog, CLI_LINE_MAX);
        free(line);
        return (NULL);
    }
    return (line);
}

/* ctl_ask_f for ctl_stats.c; priv points to the fd. */
static int
ask(void *priv, int argc, char **argv, unsigned *status, char **body)
{
    char *line = build_line(argc, argv, false);
    struct resp r;
    int rc;

    if (line == NULL)
        return (-1);
    rc = exchange(*(int *)priv, line, &r);
    free(line);
    if (rc != 0)
        return (-1);
    *status = r.status;
    *body = r.body;
    return (0);
}

static int
one_shot(int fd, int argc, char **argv, bool json)
{
    bool is_log = strcmp(argv[0], "log") == 0;
    struct resp r;
    char *line;
    int rc;

    if (strcmp(argv[0], "stats") == 0)
        for (int i = 1; i < argc; i++)
            if (strcmp(argv[i], "-r") == 0)
                return (ctl_stats_rates(argc, argv, json, prog, ask, &fd));
    line = build_line(argc, argv, json);
    if (line == NULL)
        return (2);
    if (strcmp(argv[0], "reload") == 0 && !timeout_given)
        timeout = RELOAD_TIMEOUT;
    rc = exchange(fd, line, &r);
    free(line);
    if (rc != 0)
        return (2);
    /* A log stream's stdout is its lines alone, so that it can be piped. */
    print_body(answer_ok(&r) && !is_log ? stdout : stderr, &r);
    rc = answer_ok(&r) ? 0 : 1;
    free(r.body);
    if (rc == 0 && is_log)
        rc = log_stream(fd);
    return (rc);
}

static int
interactive(int fd, const struct resp *banner)
{
    /* A person types: prompt, on stdout unless it goes to a file. */
    bool tty = isatty(STDIN_FILENO);
    FILE *pf = isatty(STDOUT_FILENO) ? stdout : stderr;
    char *line = NULL, *p;
    size_t cap = 0;
    ssize_t n;
    struct resp r;
    int rc = 0;

    if (tty)
        print_body(pf, banner);
    for (;;) {
        if (tty) {
            fputs("surogat> ", pf);
            fflush(pf);
        }
        n = getline(&line, &cap, stdin);
        if (n < 0)
            break;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = '\0';
        for (p = line; *p == ' ' || *p == '\t'; p++)
            continue;
        if (*p == '\0')
            continue;
        if (strcmp(p, "quit") == 0 || strcmp(p, "exit") == 0)
            break;
        if (n > CLI_LINE_MAX) {
            fprintf(stderr, "%s: line longer than %d bytes, not sent\n", prog, CLI_LINE_MAX);
            rc = 1;
            continue;
        }
        /* Its answer never ends: the stream would be read as the next answer's header. */
        if (strncmp(p, "log", 3) == 0 && (p[3] == '\0' || p[3] == ' ' || p[3] == '\t')) {
            fprintf(stderr, "%s: log streams until Ctrl-C: run '%s log ...' instead\n", prog, prog);
            rc = 1;
            continue;
        }
        if (exchange(fd, p, &r) != 0) {
            rc = 2;
            break;
        }
        if (!answer_ok(&r)) {
            fprintf(stderr, "%u\n", r.status);
            print_body(stderr, &r);
            rc = 1;
        } else {
            print_body(stdout, &r);
        }
        fflush(stdout);
        free(r.body);
    }
    if (tty && rc != 2)
        fputc('\n', pf);
    free(line);
    return (rc);
}

/*--------------------------------------------------------------------
 * top: stats -j every interval, shown by ctl_top.c.
 */

static volatile sig_atomic_t top_stop;

static void
top_signal(int sig)
{
    (void)sig;
    top_stop = 1;
}

/*
 * Sleep until `deadline`, watching the keyboard when keys: 0 on time, 1
 * to quit (q typed, or a signal).
 */
static int
top_wait(double deadline, bool keys)
{
    struct pollfd pfd = { .fd = STDIN_FILENO, .events = POLLIN };
    double left;
    char c;
    int r;

    while (!top_stop) {
        left = deadline - now_mono();
        if (left <= 0)
            return (0);
        r = poll(&pfd, keys ? 1 : 0, (int)(left * 1e3) + 1);
        if (r <= 0 || !(pfd.revents & (POLLIN | POLLHUP)))
            continue;
        if (read(STDIN_FILENO, &c, 1) != 1)
            keys = false; /* end of input: only a signal ends top now */
        else if (c == 'q' || c == 'Q')
            return (1);
    }
    return (1);
}

/* Lines (or columns) of the terminal on stdout; 0 when it is not one. */
static unsigned
term_size(bool cols)
{
    struct winsize ws;

    if (!isatty(STDOUT_FILENO) || ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) != 0)
        return (0);
    return (cols ? ws.ws_col : ws.ws_row);
}

static int
top(int fd, int argc, char **argv, const char *addr)
{
    struct sigaction sa = { .sa_handler = top_signal }; /* no SA_RESTART: poll() must return */
    struct termios saved, raw;
    double interval = 1.0, next;
    bool once = false, keys, ansi;
    struct top *tp;
    struct resp r;
    char *end;
    int rc = 0, i;

    for (i = 1; i < argc && argv[i][0] == '-'; i++) {
        if (strcmp(argv[i], "-1") == 0) {
            once = true;
            continue;
        }
        if (strcmp(argv[i], "-d") == 0 && i + 1 < argc) {
            errno = 0;
            interval = strtod(argv[++i], &end);
            if (errno == 0 && end != argv[i] && *end == '\0' && interval >= 0.1 && interval <= 3600)
                continue;
        }
        fprintf(stderr,
                "%s: top: bad argument '%s'\nusage: %s top [-1] [-d SECONDS] [PATTERN...]\n", prog,
                argv[i], prog);
        return (2);
    }
    tp = top_new();
    top_filter(tp, argv + i, argc - i);
    /* The descriptions, once: they do not change while the daemon runs. */
    if (exchange(fd, "stats -l", &r) != 0) {
        top_free(&tp);
        return (2);
    }
    if (r.status == CLI_OK)
        top_docs(tp, r.body);
    free(r.body);
    (void)sigemptyset(&sa.sa_mask);
    (void)sigaction(SIGINT, &sa, NULL);
    (void)sigaction(SIGTERM, &sa, NULL);
    /* Keys without Enter, not echoed; Ctrl-C still raises SIGINT. */
    keys = !once && isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved) == 0;
    if (keys) {
        raw = saved;
        raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
        raw.c_cc[VMIN] = 1;
        raw.c_cc[VTIME] = 0;
        keys = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
    }
    ansi = !once && isatty(STDOUT_FILENO);
    if (ansi)
        fputs("\033[?25l", stdout); /* hide the cursor while frames are drawn */
    next = now_mono();
    while (!top_stop) {
        if (exchange(fd, "stats -j", &r) != 0) {
            rc = 2;
            break;
        }
        if (r.status != CLI_OK || top_sample(tp, r.body, now_mono()) != 0) {
            fprintf(stderr, "%s: top: stats -j answered %u: %s\n", prog, r.status, r.body);
            free(r.body);
            rc = 1;
            break;
        }
        free(r.body);
        /* -1 waits for a second sample: a frame without rates says nothing. */
        if (!once || top_has_rates(tp)) {
            if (ansi)
                fputs("\033[H\033[2J", stdout);
            else if (!once && top_has_rates(tp))
                fputc('\n', stdout);
            /* A terminal that says no size is taken for 80x24: no room for descriptions. */
            top_render(tp, stdout, addr, interval,
                       ansi ? (term_size(false) > 0 ? term_size(false) : 24) : 0,
                       ansi ? (term_size(true) > 0 ? term_size(true) : 80) : 0);
            fflush(stdout);
            if (once)
                break;
        }
        next += interval;
        if (next < now_mono())
            next = now_mono(); /* a slow answer: do not try to catch up */
        if (top_wait(next, keys) != 0)
            break;
    }
    if (ansi)
        fputs("\033[?25h", stdout);
    if (keys)
        (void)tcsetattr(STDIN_FILENO, TCSANOW, &saved);
    fflush(stdout);
    top_free(&tp);
    return (rc);
}

int
main(int argc, char **argv)
{
    const char *addr = getenv("SUROGAT_ADMIN"), *secret_file = NULL;
    struct resp banner;
    bool json = false;
    char *end;
    int c, fd, rc;

    if (argc > 0 && argv[0] != NULL && strrchr(argv[0], '/') != NULL)
        prog = strrchr(argv[0], '/') + 1;
    else if (argc > 0 && argv[0] != NULL)
        prog = argv[0];
    if (addr == NULL || *addr == '\0')
        addr = DEFAULT_ADMIN;
    /* '+': stop at the command, so its own options ("stats -j") stay its own. */
    while ((c = getopt(argc, argv, "+T:S:t:jh")) != -1) {
        switch (c) {
        case 'T':
            addr = optarg;
            break;
        case 'S':
            secret_file = optarg[0] != '\0' ? optarg : NULL;
            break;
        case 't':
            errno = 0;
            timeout = strtod(optarg, &end);
            if (errno != 0 || end == optarg || *end != '\0' || !(timeout > 0)) {
                fprintf(stderr, "%s: -t %s: expected a positive number of seconds\n", prog, optarg);
                return (2);
            }
            timeout_given = true;
            break;
        case 'j':
            json = true;
            break;
        case 'h':
            usage(stdout);
            return (0);
        default:
            usage(stderr);
            return (2);
        }
    }
    argc -= optind;
    argv += optind;

    fd = connect_admin(addr, now_mono() + timeout);
    if (fd < 0)
        return (2);
    if (handshake(fd, secret_file, &banner) != 0) {
        (void)close(fd);
        return (2);
    }
    if (argc > 0 && strcmp(argv[0], "top") == 0)
        rc = top(fd, argc, argv, addr);
    else if (argc > 0)
        rc = one_shot(fd, argc, argv, json);
    else
        rc = interactive(fd, &banner);
    free(banner.body);
    (void)close(fd);
    return (rc);
}
