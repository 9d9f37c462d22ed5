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
 * repeat (failed handshakes): callers share a static log_limit.
 */
struct log_limit {
    pthread_mutex_t mtx;
    double last;      /* tim_mono() of the last line; 0: none yet */
    unsigned skipped; /* under mtx: messages left out since */
};
#define LOG_LIMIT_INIT { PTHREAD_MUTEX_INITIALIZER, 0, 0 }
/* Whether to log now; if so, *skipped gets how many were left out since the last line. */
bool log_limit_ok(struct log_limit *ll, unsigned *skipped);

#endif
