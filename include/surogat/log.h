/*
 * log -- the daemon log: starts, stops, reloads, failures of the
 * environment.  One line per message, to stderr, the error_log file or
 * syslog.  Thread-safe; a message is written with one write(2), or sent
 * as one datagram.
 *
 * Levels are syslog's; what surogatd writes at each:
 *   LOG_ERR      a failure the daemon survives: a log it cannot reopen, a
 *                policy that does not load, a failing hook, accept() errors
 *   LOG_WARNING  something to look at: a backend gone sick, an admin
 *                authentication failure, a shutdown that timed out
 *   LOG_NOTICE   changes made through the admin interface (param.set, ban,
 *                backend.set_health), failed TLS handshakes
 *   LOG_INFO     start, stop, listeners, reloads, SIGHUP (the default level)
 *   LOG_DEBUG    admin connections and the commands they send
 * LOG_EMERG .. LOG_CRIT are not used: a panic goes to stderr and aborts.
 */
#ifndef SUROGAT_LOG_H
#define SUROGAT_LOG_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <syslog.h>

struct sb;

/*
 * "" or NULL: stderr; "syslog": the syslog socket set up by
 * log_syslog_init(); otherwise a file.  -1 with errno on failure.
 */
int log_init(const char *path);
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
/*
 * Syslog, spoken directly on the datagram socket at `path` (as syslog(3)
 * does on /dev/log, but to any path), facility by name: "daemon", "user",
 * "local0" .. "local7" ...  Nothing is opened until something is sent.
 * 0, or -1 with the reason in err (unknown facility, path too long).
 */
int log_syslog_init(const char *path, const char *facility, struct sb *err);
/*
 * Send msg[0 .. len) as one RFC 3164 message "<PRI>Mmm dd hh:mm:ss
 * surogatd[pid]: msg" at severity lvl.  Never blocks: when the syslog
 * daemon is absent or its queue full the message is dropped.  Any thread.
 */
void log_syslog(int lvl, const char *msg, size_t len);

#endif
