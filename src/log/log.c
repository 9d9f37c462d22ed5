/*
 * The daemon log.  Any thread may log; a message is formatted on the
 * caller's stack and written with one write(2) on an O_APPEND descriptor,
 * so lines never interleave.  Reopening swaps the descriptor under a lock
 * that writers also take, so a line never goes to a closed descriptor.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "surogat/defs.h"
#include "surogat/log.h"
#include "surogat/tim.h"

static pthread_mutex_t log_mtx = PTHREAD_MUTEX_INITIALIZER;
static int log_fd = STDERR_FILENO;
static char *log_path;
static int log_level = LOG_INFO;

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
    now = time(NULL);
    gmtime_r(&now, &tm);
    n = snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02dZ surogatd[%d]: %s: ",
                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                 (int)getpid(), level_name[lvl]);
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
