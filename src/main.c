/*
 * surogatd: the command line, the order of init and fini, and the signal
 * loop.  Nothing else lives here.
 *
 * Every thread is started with SIGTERM, SIGINT, SIGHUP and SIGUSR1
 * blocked; the main thread takes them with sigwait(), so signal handling
 * is ordinary code and never runs inside a worker.  SIGHUP reloads the
 * configuration, SIGUSR1 reopens the logs (rld.h).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "surogat/acc.h"
#include "surogat/alog.h"
#include "surogat/rlog.h"
#include "surogat/trace.h"
#include "surogat/ban.h"
#include "surogat/clu.h"
#include "surogat/be.h"
#include "surogat/cfg.h"
#include "surogat/cli.h"
#include "surogat/defs.h"
#include "surogat/hsh.h"
#include "surogat/lfu.h"
#include "surogat/log.h"
#include "surogat/mon.h"
#include "surogat/ntf.h"
#include "surogat/num.h"
#include "surogat/par.h"
#include "surogat/pol.h"
#include "surogat/pool.h"
#include "surogat/realip.h"
#include "surogat/req.h"
#include "surogat/rld.h"
#include "surogat/sb.h"
#include "surogat/sess.h"
#include "surogat/sfb.h"
#include "surogat/stat.h"
#include "surogat/sto.h"
#include "surogat/tim.h"
#include "surogat/tls.h"
#include "surogat/tp.h"
#include "surogat/wtr.h"
#include "surogat/xkey.h"

#if HAVE_JEMALLOC
/*
 * jemalloc gives freed pages back to the kernel as they age, but without
 * a thread of its own only when the program allocates again: a daemon
 * that goes quiet after a burst would keep the burst's pages for as long
 * as it stays quiet -- 18 MiB after 10,000 HTTP/2 connections opened at
 * once and left idle (bench/RESULTS.md, 2026-11-27 10:05-11:19).  Its
 * background thread purges them on its own, and pages unused for a
 * second go (ten by default): a page the traffic wants again is reused
 * long before, so the hit path does not see it (measured there too).
 * MALLOC_CONF still wins.
 */
const char *malloc_conf = "background_thread:true,dirty_decay_ms:1000";
#endif

#define MAX_ARGS 64

struct opts {
    const char *listen[MAX_ARGS];
    unsigned nlisten;
    const char *params[MAX_ARGS];
    unsigned nparams;
    const char *backend;
    const char *policy;
    const char *storage[MAX_ARGS];
    unsigned nstorage;
    const char *admin;
    const char *admin_http; /* -M: wins over the admin_http parameter */
    const char *secret;
    const char *config;
    const char *workdir;
    const char *pidfile;
    const char *jail; /* -j as given; NULL: stay as started */
    bool jail_none;   /* -j none: stay as started, on purpose */
    bool jail_auto;   /* no -j, started as root: SUROGAT_USER, which exists */
    uid_t uid;        /* -j USER: whom to become, resolved at parse time */
    gid_t gid;
    char *user;
    bool foreground;
    bool check; /* -C: compile the -f script and exit */
    bool test;  /* -t: check the config file, the policy and the certificates, and exit */
    struct rld_conf rconf; /* -c, -p and -M, for rld_init() and the reloads */
    char *owned[4];        /* absolute -S, -P, -f and -c paths we made, freed at exit */
    char startdir[4096];   /* the directory we were started in, before -n */
    /* -b /DIR: the static-file backend's files, freed after be_fini(). */
    struct sfb *sfb;
};

static void
usage(FILE *f)
{
    fprintf(f,
            "usage: surogatd [options]\n"
            "  -a ADDR:PORT       listen address (repeatable; [::1]:80 for IPv6, :80 for all;"
            " default :80)\n"
            "  -a ADDR:PORT,tls,cert=FILE,key=FILE[,ocsp=FILE]...\n"
            "                     TLS listen address; more cert=,key= pairs are chosen by SNI\n"
            "  -b HOST:PORT       the backend (default port 80)\n"
            "  -b /DIR            serve the files under DIR instead (static-file backend)\n"
            "  -f FILE            policy script (Lua, see surogat-lua(7))\n"
            "  -C                 with -f: check the script and exit (2 on error)\n"
            "  -t                 check -c, -f and the -a certificates, and exit (1 on error)\n"
            "  -s malloc,SIZE     storage (repeatable); also file,PATH,SIZE\n"
            "  -T ADDR:PORT       admin interface (or a Unix socket path)\n"
            "  -S FILE            admin secret file\n"
            "  -M ADDR:PORT       HTTP admin listener: /metrics, status page (param admin_http)\n"
            "  -p NAME=VALUE      set a parameter (repeatable; see -x params)\n"
            "  -c FILE            configuration file of NAME = VALUE lines\n"
            "  -n DIR             working directory (created if missing)\n"
            "  -P FILE            write the process id to FILE\n"
            "  -j USER            after binding and opening files, run as USER\n"
            "  -j unix,user=USER[,group=GROUP]   the same, Varnish's syntax\n"
            "  -j none            keep running as the starting user (root: on purpose)\n"
            "                     (root without -j: as the " SUROGAT_USER " user if it exists)\n"
            "  -F                 stay in the foreground\n"
            "  -x params          print the parameter reference and exit\n"
            "  -V                 print the version and exit\n"
            "  -h                 this help\n");
}

static void __attribute__((noreturn, format(printf, 1, 2)))
die(const char *fmt, ...)
{
    va_list ap;

    fputs("surogatd: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(2);
}

static void
push(const char **arr, unsigned *n, const char *v, char flag)
{
    if (*n == MAX_ARGS)
        die("too many -%c options", flag);
    arr[(*n)++] = v;
}

/* Storage is parsed and checked now; the stores themselves come with the cache. */
static void
check_storage(const char *spec)
{
    char buf[1024], *f[4], *save = NULL, *tok;
    unsigned n = 0;
    uint64_t size;

    if (strlen(spec) >= sizeof buf)
        die("-s %s: too long", spec);
    strcpy(buf, spec);
    for (tok = strtok_r(buf, ",", &save); tok != NULL && n < 4; tok = strtok_r(NULL, ",", &save))
        f[n++] = tok;
    if (n == 2 && strcmp(f[0], "malloc") == 0) {
        if (num_bytes(f[1], &size) != 0 || size == 0)
            die("-s %s: bad size '%s'", spec, f[1]);
        return;
    }
    if (n == 3 && strcmp(f[0], "file") == 0) {
        if (num_bytes(f[2], &size) != 0 || size == 0)
            die("-s %s: bad size '%s'", spec, f[2]);
        return;
    }
    die("-s %s: expected malloc,SIZE or file,PATH,SIZE", spec);
}

static void
parse_args(int argc, char **argv, struct opts *o)
{
    int c;

    opterr = 0;
    while ((c = getopt(argc, argv, ":a:b:c:Cf:hj:M:n:p:s:FP:S:tT:Vx:")) != -1) {
        switch (c) {
        case 'a':
            push(o->listen, &o->nlisten, optarg, 'a');
            break;
        case 'b':
            o->backend = optarg;
            break;
        case 'c':
            o->config = optarg;
            break;
        case 'C':
            o->check = true;
            break;
        case 'f':
            o->policy = optarg;
            break;
        case 'h':
            usage(stdout);
            exit(0);
        case 'j':
            o->jail = optarg;
            break;
        case 'M':
            o->admin_http = optarg;
            break;
        case 'n':
            o->workdir = optarg;
            break;
        case 'p':
            push(o->params, &o->nparams, optarg, 'p');
            break;
        case 's':
            check_storage(optarg);
            push(o->storage, &o->nstorage, optarg, 's');
            break;
        case 'F':
            o->foreground = true;
            break;
        case 'P':
            o->pidfile = optarg;
            break;
        case 'S':
            o->secret = optarg;
            break;
        case 't':
            o->test = true;
            break;
        case 'T':
            o->admin = optarg;
            break;
        case 'V':
            printf("surogatd (surogat-%s)\n", SUROGAT_VERSION);
            exit(0);
        case 'x':
            if (strcmp(optarg, "params") == 0) {
                char *buf = malloc(1 << 20);
                struct sb sb;
                AN(buf);
                sb_init(&sb, buf, 1 << 20);
                par_dump_doc(&sb);
                fputs(buf, stdout);
                free(buf);
                exit(0);
            }
            die("-x %s: unknown (try -x params)", optarg);
        case ':':
            die("option -%c needs an argument", optopt);
        default:
            die("unknown option -%c (see -h)", optopt);
        }
    }
    if (optind < argc)
        die("unexpected argument '%s' (see -h)", argv[optind]);
}

static void
apply_params(struct opts *o)
{
    char ebuf[512];
    struct sb err;

    /* A reload reads -c again from -n: it must not depend on where we were started. */
    if (o->config != NULL && *o->config != '/' && !o->test) {
        o->owned[3] = realpath(o->config, NULL);
        if (o->owned[3] == NULL)
            die("-c %s: %s", o->config, strerror(errno));
        o->config = o->owned[3];
    }
    o->rconf.config = o->config;
    o->rconf.params = o->params;
    o->rconf.nparams = o->nparams;
    o->rconf.admin_http = o->admin_http;
    if (o->test)
        exit(rld_test(&o->rconf, o->policy, o->listen, o->nlisten, NULL));
    sb_init(&err, ebuf, sizeof ebuf);
    if (rld_init(&o->rconf, &err) != 0)
        die("%s", ebuf);
}

static void
enter_workdir(const char *dir)
{
    char *p, *s;

    if (dir == NULL)
        return;
    s = strdup(dir);
    AN(s);
    /* mkdir -p */
    for (p = s + 1; *p != '\0'; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(s, 0755) != 0 && errno != EEXIST)
            die("-n %s: cannot create %s: %s", dir, s, strerror(errno));
        *p = '/';
    }
    if (mkdir(s, 0755) != 0 && errno != EEXIST)
        die("-n %s: %s", dir, strerror(errno));
    free(s);
    if (chdir(dir) != 0)
        die("-n %s: %s", dir, strerror(errno));
}

/*
 * -j: whom the daemon becomes once it holds what needs root -- listen
 * sockets below 1024, the log files, the stores, the TLS keys, all opened
 * by then.  The user is looked up here, before anything is bound, so that
 * a typo stops the start with one line.  Root itself is refused: -j none
 * is how to say that root is meant.
 */
static void
jail_parse(struct opts *o)
{
    char buf[256], *tok, *save = NULL;
    const char *user = NULL, *group = NULL;
    struct passwd *pw;
    struct group *gr;

    if (o->jail == NULL && geteuid() == 0 && getpwnam(SUROGAT_USER) != NULL) {
        /* Root without -j: the user made for surogatd, as Varnish drops to its own. */
        o->jail = SUROGAT_USER;
        o->jail_auto = true;
    }
    if (o->jail == NULL)
        return;
    if (strcmp(o->jail, "none") == 0) {
        o->jail_none = true;
        return;
    }
    if (strlen(o->jail) >= sizeof buf)
        die("-j %s: too long", o->jail);
    strcpy(buf, o->jail);
    if (strncmp(buf, "unix", 4) == 0 && (buf[4] == '\0' || buf[4] == ',')) {
        /* Varnish's -j unix,user=U[,group=G]; its other keys have no meaning here. */
        for (tok = strtok_r(buf + 4, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
            if (strncmp(tok, "user=", 5) == 0 && user == NULL)
                user = tok + 5;
            else if (strncmp(tok, "group=", 6) == 0 && group == NULL)
                group = tok + 6;
            else
                die("-j %s: unexpected '%s' (expected unix,user=USER[,group=GROUP])", o->jail, tok);
        }
        if (user == NULL || *user == '\0' || (group != NULL && *group == '\0'))
            die("-j %s: expected unix,user=USER[,group=GROUP]", o->jail);
    } else if (buf[0] != '\0' && strpbrk(buf, ",=") == NULL) {
        user = buf;
    } else {
        die("-j %s: expected USER, unix,user=USER[,group=GROUP] or none", o->jail);
    }
    pw = getpwnam(user);
    if (pw == NULL)
        die("-j %s: no such user '%s'", o->jail, user);
    if (pw->pw_uid == 0)
        die("-j %s: '%s' is root; give -j none to run as root on purpose", o->jail, user);
    o->uid = pw->pw_uid;
    o->gid = pw->pw_gid;
    o->user = strdup(user);
    AN(o->user);
    if (group != NULL) {
        gr = getgrnam(group);
        if (gr == NULL)
            die("-j %s: no such group '%s'", o->jail, group);
        if (gr->gr_gid == 0)
            die("-j %s: group '%s' is root's", o->jail, group);
        o->gid = gr->gr_gid;
    }
}

/*
 * Give a file or directory made as root to the -j user, so that it can
 * reopen a log on SIGUSR1 or create a socket in -n.  Only what the starting
 * user owns, never through a symbolic link, never a shared directory such
 * as /tmp (sticky or writable by all).
 */
static void
jail_chown(const struct opts *o, const char *path, const char *what)
{
    struct stat st;

    if (path == NULL || *path == '\0' || fstatat(AT_FDCWD, path, &st, AT_SYMLINK_NOFOLLOW) != 0)
        return;
    if (st.st_uid != geteuid() || !(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)))
        return;
    if (S_ISDIR(st.st_mode) && (st.st_mode & (S_ISVTX | S_IWOTH)) != 0)
        return;
    if (fchownat(AT_FDCWD, path, o->uid, o->gid, AT_SYMLINK_NOFOLLOW) != 0)
        die("-j %s: cannot give %s %s to %s: %s", o->jail, what, path, o->user, strerror(errno));
}

/*
 * Become the -j user.  Called on the main thread before any other thread
 * starts, so that none ever runs as root (glibc would apply setuid() to
 * every thread anyway).  The admin listeners (-T, -M) bind after this.
 */
static void
jail_enter(const struct opts *o)
{
    char cwd[4096], spec[1024], *path, *save = NULL;

    if (o->jail == NULL || o->jail_none)
        return;
    if (geteuid() != 0) {
        if (geteuid() == o->uid && getegid() == o->gid)
            return;
        die("-j %s: only root can become %s (running as uid %u)", o->jail, o->user,
            (unsigned)geteuid());
    }
    if (o->workdir != NULL && getcwd(cwd, sizeof cwd) != NULL && strcmp(cwd, "/") != 0)
        jail_chown(o, ".", "the working directory");
    jail_chown(o, par.error_log, "error_log");
    jail_chown(o, par.access_log, "access_log");
    for (unsigned i = 0; i < o->nstorage; i++) {
        if (strncmp(o->storage[i], "file,", 5) != 0 || strlen(o->storage[i]) >= sizeof spec)
            continue;
        strcpy(spec, o->storage[i] + 5);
        path = strtok_r(spec, ",", &save); /* file,PATH,SIZE, checked by check_storage() */
        jail_chown(o, path, "the store");
    }
    if (initgroups(o->user, o->gid) != 0 || setgid(o->gid) != 0 || setuid(o->uid) != 0)
        die("-j %s: cannot become %s: %s", o->jail, o->user, strerror(errno));
    /* A saved uid of 0 would let an exploit take root back: prove it cannot. */
    if (setuid(0) != -1 || seteuid(0) != -1)
        die("-j %s: root could be regained after the switch", o->jail);
    /*
     * The switch made the process undumpable: no core file after a panic.
     * Varnish sets it back too; only processes of the same user gain the
     * right to trace it.
     */
    (void)prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
}

/*
 * Say whom the daemon runs as, once nothing can fail any more: a start that
 * fails prints its one error line alone.
 */
static void
jail_say(const struct opts *o)
{
    if (o->jail != NULL && !o->jail_none)
        log_msg(LOG_INFO, "running as %s (uid %u, gid %u)%s", o->user, (unsigned)getuid(),
                (unsigned)getgid(), o->jail_auto ? ", started as root without -j" : "");
    else if (geteuid() == 0 && o->jail_none)
        log_msg(LOG_NOTICE, "running as root (-j none)");
}

static void
raise_fd_limit(void)
{
    struct rlimit rl;

    /* 10,000 idle keep-alive clients need as many descriptors: take what we may. */
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
    }
}

/*
 * Fork into the background.  The parent waits on a pipe until the child
 * reports that startup completed, so a failure after the fork (an admin
 * port in use, say) still reaches the terminal -- the child keeps the
 * terminal's stderr until then -- and the exit code.
 */
static int ready_fd = -1;

static void
daemonize(void)
{
    int pfd[2], fd;
    char c;
    pid_t pid;

    if (pipe(pfd) != 0)
        die("pipe: %s", strerror(errno));
    pid = fork();
    if (pid < 0)
        die("fork: %s", strerror(errno));
    if (pid > 0) {
        close(pfd[1]);
        _exit(read(pfd[0], &c, 1) == 1 ? 0 : 2);
    }
    close(pfd[0]);
    ready_fd = pfd[1];
    if (setsid() < 0)
        die("setsid: %s", strerror(errno));
    fd = open("/dev/null", O_RDWR);
    if (fd >= 0) {
        dup2(fd, STDIN_FILENO);
        dup2(fd, STDOUT_FILENO);
        if (fd > STDERR_FILENO)
            close(fd);
    }
}

/* Startup is complete: let the parent exit 0 and leave the terminal. */
static void
daemon_ready(void)
{
    int fd = open("/dev/null", O_WRONLY);

    if (fd >= 0) {
        dup2(fd, STDERR_FILENO);
        if (fd > STDERR_FILENO)
            close(fd);
    }
    (void)!write(ready_fd, "R", 1);
    close(ready_fd);
}

static void
write_pidfile(const char *path)
{
    FILE *f;

    if (path == NULL)
        return;
    f = fopen(path, "w");
    if (f == NULL)
        die("-P %s: %s", path, strerror(errno));
    fprintf(f, "%d\n", (int)getpid());
    fclose(f);
}

/*
 * SIGTERM with shutdown_delay: go on serving for that long while /health
 * says "draining", so that a load balancer moves the traffic away before
 * the listeners close.  A second SIGTERM or SIGINT ends the wait.
 */
static void
shutdown_delay(double secs)
{
    struct timespec ts = { (time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9) };
    double deadline = tim_mono() + secs;
    sigset_t sigs;

    log_msg(LOG_INFO, "stopping: /health says draining, serving on for %.3gs", secs);
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    while (tim_mono() < deadline) {
        if (sigtimedwait(&sigs, NULL, &ts) >= 0) {
            log_msg(LOG_INFO, "stopping: a second signal cut shutdown_delay short");
            return;
        }
        if (errno == EAGAIN)
            return;
        secs = deadline - tim_mono(); /* EINTR: wait for what is left */
        ts = (struct timespec){ (time_t)secs, (long)((secs - (double)(time_t)secs) * 1e9) };
    }
}

/* SIGTERM: refuse new connections, let in-flight requests finish, then stop. */
static void
drain_and_stop(const struct opts *o)
{
    double deadline = tim_mono() + par.shutdown_timeout;
    unsigned busy;

    rld_fini(); /* a reload asked for by the admin interface is answered: none will run */
    /* From here /health says "draining" (mon), and keep-alive sessions close after a response. */
    sess_drain();
    if (par.shutdown_delay > 0)
        shutdown_delay(par.shutdown_delay);
    log_msg(LOG_INFO, "stopping: draining in-flight requests");
    acc_stop();
    while ((busy = pool_busy() + wtr_watched()) > 0 && tim_mono() < deadline)
        usleep(10000);
    if (busy > 0) {
        log_msg(LOG_WARNING, "shutdown_timeout: %u requests still running, exiting anyway", busy);
        if (o->pidfile != NULL)
            unlink(o->pidfile);
        _exit(0);
    }
    wtr_fini();
    pool_fini();
    acc_fini(); /* no thread left that could hold a listener's event */
    clu_stop();
    pol_fini();
    mon_fini();
    cli_fini();
    ban_lurker_stop();
    be_fini();
    if (o->sfb != NULL) {
        struct sfb *sfb = o->sfb;
        sfb_free(&sfb);
    }
    hsh_fini();
    xkey_fini();
    ban_persist_close();
    ban_fini();
    req_purge_fini();
    realip_fini();
    sto_fini();
    alog_fini();
    rlog_fini();
    trace_fini();
    tls_fini();
    h2t_fini();
    cfg_fini();
    if (o->pidfile != NULL)
        unlink(o->pidfile);
    log_msg(LOG_INFO, "stopped");
    log_fini();
    stat_fini();
    par_fini();
    free(o->owned[0]);
    free(o->owned[1]);
    free(o->owned[2]);
    free(o->owned[3]);
    free(o->user);
}

int
main(int argc, char **argv)
{
    struct opts o;
    char ebuf[512];
    struct sb err;
    sigset_t sigs;
    int sig;

    memset(&o, 0, sizeof o);
    par_init();
    AZ(stat_init());
    parse_args(argc, argv, &o);
    jail_parse(&o);
    apply_params(&o);
    if (o.check) {
        if (o.policy == NULL)
            die("-C needs -f FILE");
        sb_init(&err, ebuf, sizeof ebuf);
        AZ(be_init()); /* declared backends are resolved, as they will be */
        if (pol_check(o.policy, &err) != 0)
            die("%s", ebuf);
        printf("%s: ok\n", o.policy);
        exit(0);
    }
    if (o.backend == NULL && o.policy == NULL)
        die("no backend: give -b HOST:PORT or -b /DIR, or -f with backend declarations");
    for (unsigned i = 0; cfg_listen(i) != NULL; i++)
        push(o.listen, &o.nlisten, cfg_listen(i), 'a');
    if (o.nlisten == 0)
        o.listen[o.nlisten++] = ":80";
    /* Paths on the command line are relative to where we were started, not to -n. */
    if (o.secret != NULL && *o.secret != '\0') {
        char *abs = realpath(o.secret, NULL);
        if (abs == NULL)
            die("-S %s: %s", o.secret, strerror(errno));
        o.secret = o.owned[0] = abs;
    }
    if (o.policy != NULL && *o.policy != '/') {
        /* Kept relative, the script would be looked for in -n (and reloaded from there). */
        char *abs = realpath(o.policy, NULL);
        if (abs == NULL)
            die("-f %s: %s", o.policy, strerror(errno));
        o.policy = o.owned[2] = abs;
    }
    if (o.pidfile != NULL && *o.pidfile != '/') {
        char cwd[4096], *abs;
        if (getcwd(cwd, sizeof cwd) == NULL || asprintf(&abs, "%s/%s", cwd, o.pidfile) < 0)
            die("-P %s: %s", o.pidfile, strerror(errno));
        o.pidfile = o.owned[1] = abs;
    }
    /* Certificate paths on -a are relative to where we were started, not to -n. */
    if (getcwd(o.startdir, sizeof o.startdir) == NULL)
        die("getcwd: %s", strerror(errno));
    enter_workdir(o.workdir);
    sb_init(&err, ebuf, sizeof ebuf);
    if (log_syslog_init(par.syslog_socket, par.syslog_facility, &err) != 0)
        die("%s", ebuf);
    {
        /* Detached, standard error goes nowhere: the log goes to the -n directory. */
        const char *elog = *par.error_log != '\0' ? par.error_log
                           : o.foreground          ? ""
                                                   : "surogatd.log";
        if (log_init(elog) != 0)
            die("error_log %s: %s", elog, strerror(errno));
    }
    log_set_level((int)par.log_level);
    if (alog_init(par.access_log, par.access_log_format, par.access_log_syslog, &err) != 0)
        die("%s", ebuf);
    AZ(rlog_init(par.rlog_records));
    AZ(trace_init(par.trace_ring_size));
    AZ(be_init()); /* the policy declares backends */
    pol_init();
    /* -b first: the policy's default when its routes say nothing. */
    if (o.backend != NULL && o.backend[0] == '/') {
        /* A directory: the built-in static-file backend, set up by the sfb_* parameters. */
        o.sfb = sfb_new_params(o.backend, &err);
        if (o.sfb == NULL || be_add_local("default", &sfb_be_ops, o.sfb, &err) != 0)
            die("-b %s", ebuf);
    } else if (o.backend != NULL && be_add("default", o.backend, &err) != 0) {
        die("-b %s", ebuf);
    }
    if (o.policy != NULL && pol_load(o.policy, &err) != 0)
        die("%s", ebuf);
    if (o.backend == NULL && !pol_has_backend())
        die("no backend: %s declares none and there is no -b", o.policy);
    AZ(hsh_init());
    AZ(xkey_init());
    AZ(ban_init());
    for (unsigned i = 0; i < o.nstorage; i++)
        if (sto_init(o.storage[i], &err) != 0)
            die("%s", ebuf);
    if (o.nstorage == 0)
        AZ(sto_init("malloc,256m", &err));
    lfu_init(sto_size() / 4096); /* a guess of objects per store byte, for the sketch's width */
    hsh_recover();
    /* Kept in the -n directory only: a daemon without one leaves no files where it was started. */
    if (o.workdir != NULL && ban_persist_open("bans", &err) != 0)
        die("%s", ebuf);
    raise_fd_limit();
    if (tls_init() != 0)
        die("cannot initialise OpenSSL");
    for (unsigned i = 0; i < o.nlisten; i++)
        if (acc_listen(o.listen[i], o.startdir, &err) != 0)
            die("%s", ebuf);
    /*
     * Workers never run as root by accident: started as root, the daemon
     * drops to -j USER once its sockets are bound, or keeps root only when
     * told so (-j none).  Checked after everything else could fail, so that
     * a bad option still gets its own message.
     */
    if (geteuid() == 0 && o.jail == NULL)
        die("running as root: give -j USER to drop root's rights once the sockets are bound "
            "(or create the user " SUROGAT_USER "), or -j none to run as root on purpose");
    if (!o.foreground)
        daemonize();
    write_pidfile(o.pidfile);
    jail_enter(&o);

    signal(SIGPIPE, SIG_IGN);
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGHUP);
    sigaddset(&sigs, SIGUSR1);
    AZ(pthread_sigmask(SIG_BLOCK, &sigs, NULL));

    if (wtr_init() != 0)
        die("cannot start the waiter: %s", strerror(errno));
    if (be_start() != 0)
        die("cannot start the probe thread: %s", strerror(errno));
    pool_set_idle_source(wtr_take);
    sess_set_task(h1t_sess_task, h2t_sess_task);
    if (h2t_init() != 0)
        die("cannot set up HTTP/2");
    AZ(pool_init());
    if (ban_lurker_start() != 0)
        die("cannot start the ban lurker: %s", strerror(errno));
    if (sto_start() != 0)
        die("cannot start the stores' thread: %s", strerror(errno));
    if (clu_start(&err) != 0) /* a cluster member catches up before it serves */
        die("%s", ebuf);
    if (o.admin != NULL && cli_init(o.admin, o.secret, &err) != 0)
        die("-T %s: %s", o.admin, ebuf);
    if (*par.admin_http != '\0' && mon_init(par.admin_http, &err) != 0)
        die("%s", ebuf);
    if (acc_start() != 0)
        die("cannot serve the listen addresses: %s", strerror(errno));
    jail_say(&o);
    if (!o.foreground)
        daemon_ready();
    sb_init(&err, ebuf, sizeof ebuf);
    acc_dump(&err);
    for (char *l = ebuf, *nl; *l != '\0'; l = nl + 1) {
        nl = strchr(l, '\n');
        AN(nl);
        *nl = '\0';
        log_msg(LOG_INFO, "listening on %s, backend %s", l,
                o.backend != NULL ? o.backend : "from the policy");
    }
    ntf_ready("serving, backend %s", o.backend != NULL ? o.backend : o.policy);
    for (;;) {
        if (sigwait(&sigs, &sig) != 0)
            continue;
        if (sig == SIGHUP) {
            char line[1024];
            struct sb out;

            ntf_reloading();
            sb_init(&out, line, sizeof line);
            (void)rld_run(&out); /* logs its outcome */
            ntf_ready("serving, %s", line);
            continue;
        }
        if (sig == SIGUSR1) {
            sb_init(&err, ebuf, sizeof ebuf);
            log_msg(rld_reopen_logs(&err) == 0 ? LOG_INFO : LOG_ERR, "SIGUSR1: %s", ebuf);
            continue;
        }
        break;
    }
    ntf_stopping();
    drain_and_stop(&o);
    return (0);
}
