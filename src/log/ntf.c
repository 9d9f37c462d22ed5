/*
 * sd_notify(3) for the service manager.  libsystemd's sd_notify() does
 * the work: it reads NOTIFY_SOCKET on each call, sends one datagram and
 * returns 0 at once when the variable is unset, so a daemon started by
 * hand, by a test or under another supervisor pays one getenv().
 *
 * Each message is one datagram of "KEY=VALUE" lines, so a state and the
 * STATUS= that explains it arrive together.  Called from the main thread
 * only (startup and the signal loop): no lock.
 */
#include "config.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#if HAVE_LIBSYSTEMD
#include <systemd/sd-daemon.h>
#endif

#include "surogat/log.h"
#include "surogat/ntf.h"

/* STATUS= is one line; systemctl status shows it whole up to about this. */
#define NTF_STATUS_MAX 256

/* state: "KEY=VALUE\n" lines, or ""; status: NULL for none. */
static void
send_state(const char *state, const char *status)
{
#if HAVE_LIBSYSTEMD
    static bool failed; /* logged once: a manager that is gone stays gone */
    char msg[NTF_STATUS_MAX + 128];
    int r;

    (void)snprintf(msg, sizeof msg, "%s%s%s", state, status != NULL ? "STATUS=" : "",
                   status != NULL ? status : "");
    r = sd_notify(0, msg);
    if (r < 0 && !failed) {
        failed = true;
        log_msg(LOG_WARNING, "cannot notify the service manager (NOTIFY_SOCKET): %s",
                strerror(-r));
    }
#else
    (void)state;
    (void)status;
#endif
}

/*
 * state with a STATUS= line formatted as printf, on one line: a newline
 * would start another KEY=.
 */
static void __attribute__((format(printf, 2, 0)))
send_formatted(const char *state, const char *fmt, va_list ap)
{
    char status[NTF_STATUS_MAX];

    (void)vsnprintf(status, sizeof status, fmt, ap);
    for (char *p = status; *p != '\0'; p++)
        if (*p == '\n')
            *p = ' ';
    send_state(state, status);
}

void
ntf_ready(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    send_formatted("READY=1\n", fmt, ap);
    va_end(ap);
}

void
ntf_status(const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    send_formatted("", fmt, ap);
    va_end(ap);
}

void
ntf_reloading(void)
{
    struct timespec ts;
    char state[96];

    /*
     * MONOTONIC_USEC dates the reload for systemd 253 and later (a
     * Type=notify-reload unit); older ones ignore the field.
     */
    clock_gettime(CLOCK_MONOTONIC, &ts);
    (void)snprintf(state, sizeof state, "RELOADING=1\nMONOTONIC_USEC=%llu\n",
                   (unsigned long long)ts.tv_sec * 1000000ULL +
                       (unsigned long long)ts.tv_nsec / 1000ULL);
    send_state(state, "reloading: logs, policy script, certificates (SIGHUP)");
}

void
ntf_stopping(void)
{
    send_state("STOPPING=1\n", "stopping: draining in-flight requests");
}
