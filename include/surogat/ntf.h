/*
 * ntf -- the daemon's state, told to the service manager that started it
 * (sd_notify(3)): systemd's Type=notify counts the service as started when
 * READY=1 arrives, not when the process exists, so `systemctl start`
 * returns once surogatd serves, and a start that fails is seen as failed.
 *
 * Every call is a no-op unless the environment names a NOTIFY_SOCKET (and
 * in a build without libsystemd).  A message that cannot be sent is
 * logged once and costs nothing more.  Main thread only, as signals are.
 */
#ifndef SUROGAT_NTF_H
#define SUROGAT_NTF_H

/*
 * READY=1 with a STATUS= line: call once the listen sockets accept, the
 * workers run and privileges are dropped, and again after a reload.
 */
void ntf_ready(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* RELOADING=1 (SIGHUP): ntf_ready() says when it is done. */
void ntf_reloading(void);
/* STOPPING=1 (SIGTERM): in-flight requests drain from now on. */
void ntf_stopping(void);
/* A STATUS= line alone: what `systemctl status` shows. */
void ntf_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
