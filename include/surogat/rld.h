/*
 * rld -- one reload story.
 *
 *   SIGHUP, `surogatctl reload`   read the configuration file (-c) again,
 *       compile the policy in use again and load the TLS certificates
 *       again; all three are checked before anything changes, and then
 *       all are applied, or none.  One log line says the outcome:
 *       "reload: ok (params 2 changed, policy boot reloaded, 1 certificate)"
 *       or "reload: failed: FILE:LINE: message; nothing changed".
 *   SIGUSR1, `surogatctl log.reopen`   reopen the access and error logs,
 *       and nothing else, so that logrotate never deploys a policy.
 *   surogatd -t   check the three and exit, as nginx -t.
 *
 * What a reload does with the parameters: each one the file names gets
 * the file's value; one the file named before and names no more goes back
 * to its default; the others keep what they have, param.set included.
 * A -p on the command line always wins over the file.  PAR_LIVE and
 * PAR_LOAD parameters are applied; a PAR_RESTART one whose value would
 * change is reported ("thread_pools needs a restart") and left, as is a
 * change of the listen lines.
 */
#ifndef SUROGAT_RLD_H
#define SUROGAT_RLD_H

struct sb;

/* What the command line said about the configuration. */
struct rld_conf {
    const char *config;        /* -c FILE, or NULL */
    const char *const *params; /* -p NAME=VALUE, in order */
    unsigned nparams;
    const char *admin_http; /* -M, or NULL: the admin_http parameter */
};

/*
 * Startup, main thread: the file, then each -p, then -M, into `par`,
 * remembering what came from where for the reloads.  0, or -1 with the
 * one-line reason in err ("FILE:LINE: message", "-p ...: message").
 * conf must stay valid until rld_fini().
 */
int rld_init(const struct rld_conf *conf, struct sb *err);
/*
 * A reload, on the main thread (SIGHUP).  0, or -1 when nothing changed;
 * the outcome line in out.  It is also logged and handed to every
 * rld_request() waiting.
 */
int rld_run(struct sb *out);
/*
 * Any other thread (the CLI): have the main thread run a reload -- the
 * process sends itself SIGHUP -- and wait for its outcome, at most
 * `timeout` seconds.  0 or -1 as rld_run(), with the outcome line in out.
 */
int rld_request(double timeout, struct sb *out);
/*
 * SIGUSR1 and log.reopen: reopen the error log and the access log.  Any
 * thread.  0 with "logs reopened" in out, or -1 with the reason.
 */
int rld_reopen_logs(struct sb *out);
/*
 * surogatd -t, as nginx -t: load conf (it calls rld_init()), compile the
 * policy script (NULL: none) and load the certificates of the listen
 * addresses -- the given ones and the file's, relative paths from base
 * (NULL: the current directory) -- without starting anything.  One line
 * per check, on standard output when it passed and standard error when
 * it failed, then the verdict.  0 when all passed, else 1.
 */
int rld_test(const struct rld_conf *conf, const char *policy, const char *const *listen,
             unsigned nlisten, const char *base);
/* At shutdown, before the CLI stops: wake the waiters; later requests fail at once. */
void rld_fini(void);

#endif
