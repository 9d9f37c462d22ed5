/*
 * log -- the daemon log: starts, stops, reloads, failures of the
 * environment.  One line per message, to stderr or the error_log file.
 * Thread-safe; a message is written with one write(2).
 */
#ifndef SUROGAT_LOG_H
#define SUROGAT_LOG_H

#include <pthread.h>
#include <stdbool.h>
#include <syslog.h>

int log_init(const char *path); /* "" or NULL: stderr.  -1 with errno on failure. */
void log_fini(void);
int log_reopen(void);        /* SIGHUP: reopen the file, for logrotate */
void log_set_level(int lvl); /* syslog levels: LOG_ERR .. LOG_DEBUG */
void log_msg(int lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/*
 * At most one line a second for a message that a flood of failures would
 * repeat (failed handshakes): the callers of one message share a static
 * log_limit.
 */
struct log_limit {
    pthread_mutex_t mtx;
    double last;      /* tim_mono() of the last line; 0: none yet */
    unsigned skipped; /* under mtx: messages left out since */
};
#define LOG_LIMIT_INIT                  \
    {                                   \
        PTHREAD_MUTEX_INITIALIZER, 0, 0 \
    }
/*
 * log_msg() unless ll let a line through less than a second ago.  A line
 * after some were left out says how many, and that the counter named
 * `counter` has them all.
 */
void log_limited(struct log_limit *ll, const char *counter, int lvl, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
