/*
 * log -- the daemon log: starts, stops, reloads, failures of the
 * environment.  One line per message, to stderr or the error_log file.
 * Thread-safe; a message is written with one write(2).
 */
#ifndef SUROGAT_LOG_H
#define SUROGAT_LOG_H

#include <syslog.h>

int log_init(const char *path); /* "" or NULL: stderr.  -1 with errno on failure. */
void log_fini(void);
int log_reopen(void);        /* SIGHUP: reopen the file, for logrotate */
void log_set_level(int lvl); /* syslog levels: LOG_ERR .. LOG_DEBUG */
void log_msg(int lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
