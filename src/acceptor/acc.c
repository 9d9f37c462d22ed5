/*
 * Listen sockets.
 *
 * Sockets are bound in acc_listen() on the main thread at startup, so a
 * bad -a stops the daemon before it forks anything.  acc_start() puts
 * them in the waiter's set (wtr_listen()): no thread of their own, the
 * worker taking ready sessions accepts and serves a new connection in a
 * row with everything else it takes (the waiter thread when no worker
 * takes), as nginx's event loop accepts in its own epoll set.  Each new
 * session joins the waiter's ready queue, and overload is shed from
 * there as for a ready keep-alive session.  acc_stop() takes the sockets
 * out of the set, waits for any accept in progress, and closes them (new
 * connections are then refused by the kernel); their memory stays until
 * acc_fini(), for the sessions that point at it.
 *
 * A tls address loads its certificates here too, so a bad file also
 * stops the start; the handshake itself is left to a worker.
 *
 * A Unix socket is created where no process of another kind could be
 * tricked: its path is checked with lstat(2) (never through a symbolic
 * link), an old socket file is removed only when nobody answers on it,
 * the mode comes from the umask at bind(2) (so no chmod(2) ever follows
 * a link planted after it), and the owner is set without following one.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "surogat/acc.h"
#include "surogat/defs.h"
#include "surogat/log.h"
#include "surogat/num.h"
#include "surogat/par.h"
#include "surogat/sb.h"
#include "surogat/sess.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/wtr.h"

#define ACC_MAX_LISTEN 32

static struct lsock *lsocks[ACC_MAX_LISTEN];
static unsigned nlsocks;
static bool acc_running; /* the sockets are in the waiter's set: acc_fini() frees them */

/*
 * Split "host:port", "[v6]:port" or ":port" into host (NULL for every
 * address) and port.  0, or -1 for a malformed spec.
 */
static int
split_spec(const char *spec, char *host, size_t hostlen, char *port, size_t portlen)
{
    const char *colon, *h = spec;
    size_t hl;

    if (*spec == '[') {
        const char *rb = strchr(spec, ']');
        if (rb == NULL || rb[1] != ':')
            return (-1);
        h = spec + 1;
        hl = (size_t)(rb - h);
        colon = rb + 1;
    } else {
        colon = strrchr(spec, ':');
        if (colon == NULL || memchr(spec, ':', (size_t)(colon - spec)) != NULL)
            return (-1);
        hl = (size_t)(colon - spec);
    }
    if (hl >= hostlen || strlen(colon + 1) >= portlen || colon[1] == '\0')
        return (-1);
    memcpy(host, h, hl);
    host[hl] = '\0';
    strcpy(port, colon + 1);
    return (0);
}

/* FILE made absolute: SIGHUP reloads it after -n has changed the directory. */
static char *
abs_path(const char *spec, const char *base, const char *opt, const char *val, struct sb *err)
{
    char cwd[4096], *p;

    if (*val == '\0') {
        sb_printf(err, "-a %s: %s= needs a file name", spec, opt);
        return (NULL);
    }
    if (*val == '/') {
        p = strdup(val);
    } else {
        if (base == NULL && (base = getcwd(cwd, sizeof cwd)) == NULL) {
            sb_printf(err, "-a %s: getcwd: %s", spec, strerror(errno));
            return (NULL);
        }
        if (asprintf(&p, "%s/%s", base, val) < 0)
            p = NULL;
    }
    AN(p);
    return (p);
}

#define ACC_OPTIONS                                                                     \
    "PROXY, tls, cert=, key=, ocsp=, h1only, h2c; for a Unix socket mode=, user=, group="

/* A user or group, by name or number. */
static int
owner_id(const char *spec, const char *opt, const char *val, struct acc_spec *as, struct sb *err)
{
    char *end;
    unsigned long v = strtoul(val, &end, 10);
    bool num = *val != '\0' && *end == '\0';

    if (*val == '\0') {
        sb_printf(err, "-a %s: %s= needs a name", spec, opt);
        return (-1);
    }
    if (*opt == 'u') {
        const struct passwd *pw = num ? NULL : getpwnam(val);
        if (!num && pw == NULL) {
            sb_printf(err, "-a %s: no user '%s'", spec, val);
            return (-1);
        }
        as->uid = num ? (uid_t)v : pw->pw_uid;
        as->has_uid = true;
    } else {
        const struct group *gr = num ? NULL : getgrnam(val);
        if (!num && gr == NULL) {
            sb_printf(err, "-a %s: no group '%s'", spec, val);
            return (-1);
        }
        as->gid = num ? (gid_t)v : gr->gr_gid;
        as->has_gid = true;
    }
    return (0);
}

/* An option of a Unix socket; 1 when opt is none of them. */
static int
unix_option(const char *spec, const char *opt, const char *val, struct acc_spec *as, struct sb *err)
{
    char *end;
    unsigned long m;

    if (strcmp(opt, "mode") == 0) {
        m = strtoul(val, &end, 8);
        if (*val == '\0' || *end != '\0' || m > 0777) {
            sb_printf(err, "-a %s: mode=%s is not an octal mode (0660)", spec, val);
            return (-1);
        }
        as->mode = (mode_t)m;
        as->has_mode = true;
        return (0);
    }
    if (strcmp(opt, "user") == 0 || strcmp(opt, "group") == 0)
        return (owner_id(spec, opt, val, as, err));
    return (1);
}

/* One option after the address; 0 or -1 with err. */
static int
spec_option(const char *spec, const char *base, char *opt, struct acc_spec *as, struct sb *err)
{
    struct tls_conf *tc = &as->tls_conf;
    char *val = strchr(opt, '='), **slot;
    int rv;

    if (val == NULL) {
        if (strcmp(opt, "tls") == 0) {
            as->tls = true;
            return (0);
        }
        if (strcasecmp(opt, "PROXY") == 0) {
            as->proxy = true;
            return (0);
        }
        if (strcmp(opt, "h2c") == 0 || strcmp(opt, "h1only") == 0) {
            *(opt[1] == '2' ? &as->h2c : &as->h1only) = true;
            return (0);
        }
        sb_printf(err, "-a %s: unknown option '%s' (" ACC_OPTIONS ")", spec, opt);
        return (-1);
    }
    *val++ = '\0';
    if ((rv = unix_option(spec, opt, val, as, err)) <= 0) {
        if (rv == 0 && as->path[0] == '\0') {
            sb_printf(err, "-a %s: %s= is for a Unix socket (an absolute path)", spec, opt);
            return (-1);
        }
        return (rv);
    }
    if (strcmp(opt, "cert") == 0) {
        if (tc->ncert == TLS_MAX_CERTS) {
            sb_printf(err, "-a %s: more than %d certificates", spec, TLS_MAX_CERTS);
            return (-1);
        }
        if (tc->ncert > 0 && tc->c[tc->ncert - 1].key == NULL) {
            sb_printf(err, "-a %s: cert=%s has no key=", spec, tc->c[tc->ncert - 1].cert);
            return (-1);
        }
        tc->c[tc->ncert].cert = abs_path(spec, base, opt, val, err);
        if (tc->c[tc->ncert].cert == NULL)
            return (-1);
        tc->ncert++;
        return (0);
    }
    if (strcmp(opt, "key") == 0 || strcmp(opt, "ocsp") == 0) {
        if (tc->ncert == 0) {
            sb_printf(err, "-a %s: %s= before any cert=", spec, opt);
            return (-1);
        }
        slot = opt[0] == 'k' ? &tc->c[tc->ncert - 1].key : &tc->c[tc->ncert - 1].ocsp;
        if (*slot != NULL) {
            sb_printf(err, "-a %s: two %s= for cert=%s", spec, opt, tc->c[tc->ncert - 1].cert);
            return (-1);
        }
        *slot = abs_path(spec, base, opt, val, err);
        return (*slot == NULL ? -1 : 0);
    }
    sb_printf(err, "-a %s: unknown option '%s' (" ACC_OPTIONS ")", spec, opt);
    return (-1);
}

int
acc_spec_parse(const char *spec, const char *base, struct acc_spec *as, struct sb *err)
{
    char buf[4096], *opts, *tok, *save = NULL;
    struct tls_conf *tc = &as->tls_conf;
    unsigned portnum;

    AN(spec);
    memset(as, 0, sizeof *as);
    if (strlen(spec) >= sizeof buf) {
        sb_printf(err, "-a %.64s...: too long", spec);
        return (-1);
    }
    strcpy(buf, spec);
    opts = strchr(buf, ',');
    if (opts != NULL)
        *opts++ = '\0';
    if (buf[0] == '/') {
        if (strlen(buf) >= sizeof as->path) {
            sb_printf(err, "-a %s: a Unix socket path is at most %zu bytes", spec,
                      sizeof as->path - 1);
            return (-1);
        }
        strcpy(as->path, buf);
    } else if (split_spec(buf, as->host, sizeof as->host, as->port, sizeof as->port) != 0) {
        sb_printf(err, "-a %s: expected HOST:PORT, [IPV6]:PORT, :PORT or /PATH", spec);
        return (-1);
    }
    if (as->path[0] == '\0' && num_port(as->port, &portnum) != 0) {
        sb_printf(err, "-a %s: '%s' is not a port number (0-65535)", spec, as->port);
        return (-1);
    }
    if (opts == NULL)
        return (0);
    for (tok = strtok_r(opts, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save))
        if (spec_option(spec, base, tok, as, err) != 0)
            return (-1);
    if (tc->ncert > 0 && !as->tls) {
        sb_printf(err, "-a %s: cert= without tls", spec);
        return (-1);
    }
    if (as->tls && tc->ncert == 0) {
        sb_printf(err, "-a %s: tls needs cert=FILE,key=FILE", spec);
        return (-1);
    }
    if (tc->ncert > 0 && tc->c[tc->ncert - 1].key == NULL) {
        sb_printf(err, "-a %s: cert=%s has no key=", spec, tc->c[tc->ncert - 1].cert);
        return (-1);
    }
    /* HTTP/2: by ALPN on tls (h1only refuses it), with prior knowledge on cleartext h2c. */
    if (as->h2c && (as->tls || as->h1only)) {
        sb_printf(err, "-a %s: h2c is for cleartext listeners without h1only (tls offers h2 by ALPN)",
                  spec);
        return (-1);
    }
    tc->h2 = as->tls && !as->h1only;
    return (0);
}

void
acc_spec_clear(struct acc_spec *as)
{
    tls_conf_clear(&as->tls_conf);
}

/* Register a bound, listening socket: its certificates, its lsock.  Closes fd on failure. */
static int
add_lsock(const char *spec, const struct acc_spec *as, int fd, struct sb *err)
{
    struct tls_lsn *tls = NULL;
    struct lsock *ls;
    char addr[INET6_ADDRSTRLEN];
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    struct stat st;

    if (as->tls) {
        tls = tls_lsn_new(spec, &as->tls_conf, err);
        if (tls == NULL) {
            close(fd);
            return (-1);
        }
    }
    AZ(fcntl(fd, F_SETFL, O_NONBLOCK));
    AZ(getsockname(fd, (struct sockaddr *)&ss, &sl));
    OBJ_NEW(ls, LSOCK_MAGIC);
    ls->fd = fd;
    ls->spec = strdup(spec);
    AN(ls->spec);
    ls->proto = tls != NULL ? "https" : "http";
    ls->tls = tls;
    ls->proxy = as->proxy;
    ls->h2c = as->h2c;
    if (as->path[0] != '\0') {
        ls->addr = strdup(as->path);
        ls->unix_path = true;
        if (lstat(as->path, &st) == 0) {
            ls->dev = st.st_dev;
            ls->ino = st.st_ino;
        }
    } else if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
        AN(inet_ntop(AF_INET6, &s6->sin6_addr, addr, sizeof addr));
        snprintf(ls->port, sizeof ls->port, "%u", ntohs(s6->sin6_port));
        ls->addr = strdup(addr);
    } else {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
        AN(inet_ntop(AF_INET, &s4->sin_addr, addr, sizeof addr));
        snprintf(ls->port, sizeof ls->port, "%u", ntohs(s4->sin_port));
        ls->addr = strdup(addr);
    }
    AN(ls->addr);
    lsocks[nlsocks++] = ls;
    return (0);
}

static int
bind_one(const char *spec, const struct acc_spec *as, const struct addrinfo *ai, struct sb *err)
{
    int fd, one = 1;

    if (nlsocks == ACC_MAX_LISTEN) {
        sb_printf(err, "-a %s: too many listen addresses", spec);
        return (-1);
    }
    fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
        sb_printf(err, "-a %s: socket: %s", spec, strerror(errno));
        return (-1);
    }
    AZ(setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one));
    if (ai->ai_family == AF_INET6)
        AZ(setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 ||
        listen(fd, (int)par.listen_depth) != 0) {
        sb_printf(err, "-a %s: cannot listen: %s", spec, strerror(errno));
        close(fd);
        return (-1);
    }
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
#if HAVE_TCP_DEFER_ACCEPT
    {
        /* Wake us only when the first request bytes are in: most clients send at once. */
        int secs = 1;
        (void)setsockopt(fd, IPPROTO_TCP, TCP_DEFER_ACCEPT, &secs, sizeof secs);
    }
#endif
    return (add_lsock(spec, as, fd, err));
}

/* Whether a process accepts connections on the Unix socket at sun. */
static bool
unix_in_use(const struct sockaddr_un *sun)
{
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    bool used;

    if (fd < 0)
        return (true); /* cannot tell: do not remove it */
    /* EAGAIN: its backlog is full, so it is very much in use. */
    used = connect(fd, (const struct sockaddr *)sun, sizeof *sun) == 0 || errno == EAGAIN;
    close(fd);
    return (used);
}

/*
 * Make room for the socket file: nothing there, or an old socket file
 * of a process that is gone.  lstat(2): a symbolic link is never
 * followed, whatever it points at.
 */
static int
unix_clear(const char *spec, const struct sockaddr_un *sun, struct sb *err)
{
    struct stat st;

    if (lstat(sun->sun_path, &st) != 0) {
        if (errno == ENOENT)
            return (0);
        sb_printf(err, "-a %s: %s: %s", spec, sun->sun_path, strerror(errno));
        return (-1);
    }
    if (!S_ISSOCK(st.st_mode)) {
        sb_printf(err, "-a %s: %s exists and is not a socket (%s): not replaced", spec,
                  sun->sun_path, S_ISLNK(st.st_mode) ? "a symbolic link" : "a file");
        return (-1);
    }
    if (unix_in_use(sun)) {
        sb_printf(err, "-a %s: %s: another process listens on it", spec, sun->sun_path);
        return (-1);
    }
    if (unlink(sun->sun_path) != 0 && errno != ENOENT) {
        sb_printf(err, "-a %s: cannot remove the old socket %s: %s", spec, sun->sun_path,
                  strerror(errno));
        return (-1);
    }
    return (0);
}

static int
bind_unix(const char *spec, const struct acc_spec *as, struct sb *err)
{
    struct sockaddr_un sun;
    mode_t old = 0;
    int fd, rv;

    if (nlsocks == ACC_MAX_LISTEN) {
        sb_printf(err, "-a %s: too many listen addresses", spec);
        return (-1);
    }
    memset(&sun, 0, sizeof sun);
    sun.sun_family = AF_UNIX;
    strcpy(sun.sun_path, as->path); /* acc_spec_parse() checked the length */
    if (unix_clear(spec, &sun, err) != 0)
        return (-1);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        sb_printf(err, "-a %s: socket: %s", spec, strerror(errno));
        return (-1);
    }
    /*
     * bind(2) creates the file with 0777 less the umask: setting the
     * umask for it gives the exact mode with no chmod(2) on a path.
     * Startup, main thread, before any other thread creates a file.
     */
    if (as->has_mode)
        old = umask(~as->mode & 0777);
    rv = bind(fd, (const struct sockaddr *)&sun, sizeof sun);
    if (as->has_mode)
        (void)umask(old);
    if (rv != 0) {
        sb_printf(err, "-a %s: cannot bind: %s", spec, strerror(errno));
        close(fd);
        return (-1);
    }
    if ((as->has_uid || as->has_gid) &&
        fchownat(AT_FDCWD, as->path, as->has_uid ? as->uid : (uid_t)-1,
                 as->has_gid ? as->gid : (gid_t)-1, AT_SYMLINK_NOFOLLOW) != 0) {
        sb_printf(err, "-a %s: cannot set the owner of %s: %s", spec, as->path, strerror(errno));
        (void)unlink(as->path);
        close(fd);
        return (-1);
    }
    if (listen(fd, (int)par.listen_depth) != 0) {
        sb_printf(err, "-a %s: cannot listen: %s", spec, strerror(errno));
        (void)unlink(as->path);
        close(fd);
        return (-1);
    }
    return (add_lsock(spec, as, fd, err));
}

int
acc_listen(const char *spec, const char *base, struct sb *err)
{
    struct addrinfo hints, *res, *ai;
    struct acc_spec as;
    int rv;

    if (acc_spec_parse(spec, base, &as, err) != 0) {
        acc_spec_clear(&as);
        return (-1);
    }
    if (as.path[0] != '\0') {
        rv = bind_unix(spec, &as, err);
        acc_spec_clear(&as);
        return (rv);
    }
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    rv = getaddrinfo(as.host[0] == '\0' ? NULL : as.host, as.port, &hints, &res);
    if (rv != 0) {
        sb_printf(err, "-a %s: %s", spec, gai_strerror(rv));
        acc_spec_clear(&as);
        return (-1);
    }
    rv = 0;
    for (ai = res; ai != NULL && rv == 0; ai = ai->ai_next)
        rv = bind_one(spec, &as, ai, err);
    freeaddrinfo(res);
    acc_spec_clear(&as);
    return (rv);
}

/*
 * The waiter's accept(): one connection from ls's backlog, made a session.
 * Any thread, several at once; never blocks.
 */
static enum wtr_acc
lsock_accept(void *priv, struct sess **spp, double *deadline)
{
    struct lsock *ls = priv;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    static long last_warn; /* atomic: tim_mono() seconds of the last warning */
    long now, last;
    struct sess *sp;
    int fd;

    OBJ_CHECK(ls, LSOCK_MAGIC);
    fd = accept4(ls->fd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED)
            return (WTR_ACC_RETRY);
        if (errno == EAGAIN)
            return (WTR_ACC_EMPTY);
        STAT_INC(sess_fail);
        now = (long)tim_mono();
        last = __atomic_load_n(&last_warn, __ATOMIC_RELAXED);
        if (now - last >= 10 &&
            __atomic_compare_exchange_n(&last_warn, &last, now, false, __ATOMIC_RELAXED,
                                        __ATOMIC_RELAXED))
            log_msg(LOG_WARNING, "accept on %s: %s", ls->spec, strerror(errno));
        /*
         * EMFILE and friends leave the socket readable: not asked again
         * until another connection arrives or the waiter's next sweep.
         */
        return (WTR_ACC_FAIL);
    }
    sp = sess_new(fd, ls, (struct sockaddr *)&ss);
    *deadline = sess_start(sp);
    *spp = sp;
    return (WTR_ACC_SESS);
}

int
acc_start(void)
{
    for (unsigned i = 0; i < nlsocks; i++) {
        struct lsock *ls = lsocks[i];

        ls->wl.magic = WTR_LSN_MAGIC;
        ls->wl.fd = ls->fd;
        ls->wl.accept = lsock_accept;
        ls->wl.priv = ls;
        /*
         * A TLS connection's first step is its handshake's dearest (key
         * share and signature, about 120 us): taken one at a time, they
         * interleave with the requests of connections already up instead of
         * queueing sixteen ahead of them (bench/RESULTS.md "08:50-09:00 UTC":
         * handshake p99 2.3-2.4 ms against 3.8-4.7 ms, CPU per handshake
         * alike).
         */
        ls->wl.batch = ls->tls != NULL ? 1 : 0;
        if (wtr_listen(&ls->wl) != 0) {
            log_msg(LOG_ERR, "cannot watch %s: %s", ls->spec, strerror(errno));
            return (-1);
        }
    }
    acc_running = true;
    return (0);
}

static void
lsock_free(struct lsock **lsp)
{
    struct lsock *ls = *lsp;

    if (ls->tls != NULL)
        tls_lsn_free(&ls->tls);
    free(ls->spec);
    free(ls->addr);
    OBJ_FREE(lsp);
}

void
acc_stop(void)
{
    for (unsigned i = 0; i < nlsocks; i++) {
        struct lsock *ls = lsocks[i];
        struct stat st;

        if (ls->fd < 0)
            continue;
        if (acc_running)
            wtr_unlisten(&ls->wl);
        close(ls->fd);
        ls->fd = -1;
        /* Only the file we made: another daemon may have replaced it since. */
        if (ls->unix_path && lstat(ls->addr, &st) == 0 && S_ISSOCK(st.st_mode) &&
            st.st_dev == ls->dev && st.st_ino == ls->ino)
            (void)unlink(ls->addr);
    }
    if (!acc_running)
        /* Never in the set: no thread or session can know them. */
        acc_fini();
}

void
acc_fini(void)
{
    for (unsigned i = 0; i < nlsocks; i++) {
        SRG_ASSERT(lsocks[i]->fd < 0);
        lsock_free(&lsocks[i]);
    }
    nlsocks = 0;
    acc_running = false;
}

void
acc_dump(struct sb *out)
{
    for (unsigned i = 0; i < nlsocks; i++)
        if (lsocks[i]->unix_path)
            sb_printf(out, "%s%s\n", lsocks[i]->addr, lsocks[i]->proxy ? " (PROXY)" : "");
        else
            sb_printf(out, strchr(lsocks[i]->addr, ':') != NULL ? "[%s]:%s%s%s\n" : "%s:%s%s%s\n",
                      lsocks[i]->addr, lsocks[i]->port, lsocks[i]->tls != NULL ? " (tls)" : "",
                      lsocks[i]->proxy ? " (PROXY)" : "");
}
