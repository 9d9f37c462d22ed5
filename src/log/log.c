/*
 * The daemon log.  Any thread may log; a message is formatted on the
 * caller's stack and written with one write(2) on an O_APPEND descriptor,
 * so lines never interleave.  Reopening swaps the descriptor under a lock
 * that writers also take, so a line never goes to a closed descriptor.
 *
 * Syslog is spoken here rather than through syslog(3), whose socket is
 * fixed at /dev/log: one unconnected datagram socket, opened on first use,
 * each message sent with sendto(MSG_DONTWAIT) to syslog_path.  A datagram
 * is delivered whole or not at all, so senders need no lock, and a syslog
 * daemon that is gone or behind costs a dropped message, never a blocked
 * worker (the access log sends from workers).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "surogat/defs.h"
#include "surogat/log.h"
#include "surogat/sb.h"
#include "surogat/tim.h"

static pthread_mutex_t log_mtx = PTHREAD_MUTEX_INITIALIZER;
static int log_fd = STDERR_FILENO;
static char *log_path;
static int log_level = LOG_INFO;
static bool log_to_syslog; /* error_log = syslog */

static int syslog_fd = -1; /* opened by the first sender: see syslog_socket() */
static struct sockaddr_un syslog_addr = { .sun_family = AF_UNIX, .sun_path = "/dev/log" };
static int syslog_facility = LOG_DAEMON;

static const struct {
    const char *name;
    int code;
} facilities[] = {
    { "auth", LOG_AUTH },     { "authpriv", LOG_AUTHPRIV }, { "cron", LOG_CRON },
    { "daemon", LOG_DAEMON }, { "ftp", LOG_FTP },           { "kern", LOG_KERN },
    { "local0", LOG_LOCAL0 }, { "local1", LOG_LOCAL1 },     { "local2", LOG_LOCAL2 },
    { "local3", LOG_LOCAL3 }, { "local4", LOG_LOCAL4 },     { "local5", LOG_LOCAL5 },
    { "local6", LOG_LOCAL6 }, { "local7", LOG_LOCAL7 },     { "lpr", LOG_LPR },
    { "mail", LOG_MAIL },     { "news", LOG_NEWS },         { "syslog", LOG_SYSLOG },
    { "user", LOG_USER },     { "uucp", LOG_UUCP },
};

static const char *const level_name[] = {
    "emerg", "alert", "crit", "error", "warning", "notice", "info", "debug",
};

static int
open_log(const char *path)
{
    return (open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640));
}

int
log_init(const char *path)
{
    int fd;

    if (path == NULL || *path == '\0')
        return (0);
    if (strcmp(path, "syslog") == 0) {
        log_to_syslog = true;
        return (0);
    }
    fd = open_log(path);
    if (fd < 0)
        return (-1);
    log_path = strdup(path);
    AN(log_path);
    log_fd = fd;
    return (0);
}

void
log_fini(void)
{
    AZ(pthread_mutex_lock(&log_mtx));
    if (log_fd != STDERR_FILENO)
        close(log_fd);
    log_fd = STDERR_FILENO;
    free(log_path);
    log_path = NULL;
    log_to_syslog = false;
    if (syslog_fd >= 0)
        (void)close(syslog_fd);
    syslog_fd = -1;
    AZ(pthread_mutex_unlock(&log_mtx));
}

int
log_reopen(void)
{
    int fd, old;

    if (log_path == NULL)
        return (0);
    fd = open_log(log_path);
    if (fd < 0)
        return (-1);
    AZ(pthread_mutex_lock(&log_mtx));
    old = log_fd;
    log_fd = fd;
    AZ(pthread_mutex_unlock(&log_mtx));
    close(old);
    return (0);
}

void
log_set_level(int lvl)
{
    __atomic_store_n(&log_level, lvl, __ATOMIC_RELAXED);
}

void
log_msg(int lvl, const char *fmt, ...)
{
    char buf[1024];
    struct tm tm;
    time_t now;
    va_list ap;
    int n, m;

    if (lvl > __atomic_load_n(&log_level, __ATOMIC_RELAXED))
        return;
    if (lvl < 0 || lvl > LOG_DEBUG)
        lvl = LOG_ERR;
    if (log_to_syslog) {
        /* The syslog header carries the time, the name and the pid. */
        n = snprintf(buf, sizeof buf, "%s: ", level_name[lvl]);
        va_start(ap, fmt);
        m = vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
        va_end(ap);
        if (m >= 0)
            log_syslog(lvl, buf, (size_t)n + SRG_MIN((size_t)m, sizeof buf - (size_t)n - 1));
        return;
    }
    now = time(NULL);
    gmtime_r(&now, &tm);
    n = snprintf(buf, sizeof buf,
                 "%04d-%02d-%02dT%02d:%02d:%02dZ surogatd[%d]: %s: ", tm.tm_year + 1900,
                 tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)getpid(),
                 level_name[lvl]);
    if (n < 0 || (size_t)n >= sizeof buf)
        return;
    va_start(ap, fmt);
    m = vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        return;
    n += SRG_MIN(m, (int)(sizeof buf - (size_t)n - 2));
    buf[n++] = '\n';
    AZ(pthread_mutex_lock(&log_mtx));
    (void)!write(log_fd, buf, (size_t)n);
    AZ(pthread_mutex_unlock(&log_mtx));
}

void
log_limited(struct log_limit *ll, const char *counter, int lvl, const char *fmt, ...)
{
    double now = tim_mono();
    unsigned skipped;
    char buf[768];
    va_list ap;

    AZ(pthread_mutex_lock(&ll->mtx));
    if (ll->last > 0 && now - ll->last < 1.0) {
        ll->skipped++;
        AZ(pthread_mutex_unlock(&ll->mtx));
        return;
    }
    ll->last = now;
    skipped = ll->skipped;
    ll->skipped = 0;
    AZ(pthread_mutex_unlock(&ll->mtx));
    va_start(ap, fmt);
    (void)vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (skipped > 0)
        log_msg(lvl, "%s (and %u more since the last message; see %s)", buf, skipped, counter);
    else
        log_msg(lvl, "%s", buf);
}

/*--------------------------------------------------------------------
 * Syslog.
 */

int
log_syslog_init(const char *path, const char *facility, struct sb *err)
{
    size_t i;

    AN(path);
    AN(facility);
    for (i = 0; i < sizeof facilities / sizeof facilities[0]; i++)
        if (strcmp(facilities[i].name, facility) == 0)
            break;
    if (i == sizeof facilities / sizeof facilities[0]) {
        sb_printf(err, "syslog_facility '%s': unknown (daemon, user, local0 .. local7 ...)",
                  facility);
        return (-1);
    }
    if (*path == '\0' || strlen(path) >= sizeof syslog_addr.sun_path) {
        sb_printf(err, "syslog_socket '%s': empty or longer than %zu bytes", path,
                  sizeof syslog_addr.sun_path - 1);
        return (-1);
    }
    syslog_facility = facilities[i].code;
    strcpy(syslog_addr.sun_path, path);
    return (0);
}

/* The datagram socket, made once by whichever thread sends first. */
static int
syslog_socket(void)
{
    int fd = __atomic_load_n(&syslog_fd, __ATOMIC_ACQUIRE), expect = -1;

    if (fd >= 0)
        return (fd);
    fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return (-1);
    if (!__atomic_compare_exchange_n(&syslog_fd, &expect, fd, false, __ATOMIC_ACQ_REL,
                                     __ATOMIC_ACQUIRE)) {
        (void)close(fd); /* another thread won */
        return (expect);
    }
    return (fd);
}

void
log_syslog(int lvl, const char *msg, size_t len)
{
    static const char mon[12][4] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                     "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };
    char buf[2048];
    struct tm tm;
    time_t now;
    int n, fd;

    if ((fd = syslog_socket()) < 0)
        return;
    now = time(NULL);
    localtime_r(&now, &tm);
    /* RFC 3164 as syslog(3) sends it: the day of the month padded with a space. */
    n = snprintf(buf, sizeof buf,
                 "<%d>%s %2d %02d:%02d:%02d surogatd[%d]: ", syslog_facility | (lvl & LOG_PRIMASK),
                 mon[tm.tm_mon], tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)getpid());
    if (n < 0 || (size_t)n >= sizeof buf)
        return;
    len = SRG_MIN(len, sizeof buf - (size_t)n);
    memcpy(buf + n, msg, len);
    (void)sendto(fd, buf, (size_t)n + len, MSG_DONTWAIT | MSG_NOSIGNAL,
                 (const struct sockaddr *)&syslog_addr, sizeof syslog_addr);
}
