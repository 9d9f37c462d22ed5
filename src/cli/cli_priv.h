/*
 * cli_priv -- shared between cli.c (listener, connections, authentication),
 * cli_cmd.c (request parsing, the command registry, the built-in
 * commands) and cli_admin.c (the policy and purge commands).
 */
#ifndef SUROGAT_CLI_PRIV_H
#define SUROGAT_CLI_PRIV_H

struct sb;

/*
 * Split a request line into arguments, in place: the argument strings are
 * the line's own bytes, unquoted and unescaped.  0 with a malloc'd,
 * NULL-terminated *argvp (free it; argc may be 0 for a blank line), or -1
 * with the reason in err.
 */
int cli__split(char *line, char ***argvp, int *argcp, struct sb *err);
/*
 * Look up argv[0], check the argument count and run the handler, under
 * the lock that keeps handlers one at a time.  argc >= 1.
 */
unsigned cli__dispatch(int argc, char *const *argv, struct sb *out);
/* What a client sees on connect and from `banner`. */
void cli__banner(struct sb *out);
/* Forget every registered command (cli_fini). */
void cli__cmds_fini(void);
/*
 * cli_admin.c: the handlers of policy.load, policy.use, policy.list,
 * policy.discard and purge, listed with the built-ins in cli_cmd.c.
 */
unsigned cli__cmd_policy_load(int argc, char *const *argv, struct sb *out, void *priv);
unsigned cli__cmd_policy_use(int argc, char *const *argv, struct sb *out, void *priv);
unsigned cli__cmd_policy_list(int argc, char *const *argv, struct sb *out, void *priv);
unsigned cli__cmd_policy_discard(int argc, char *const *argv, struct sb *out, void *priv);
unsigned cli__cmd_purge(int argc, char *const *argv, struct sb *out, void *priv);
/* cli_stats.c: `stats`. */
unsigned cli__cmd_stats(int argc, char *const *argv, struct sb *out, void *priv);

/*
 * Streams.  A handler run for a connection may ask to keep it: once the
 * handler's answer (CLI_OK) has been sent, the connection leaves the CLI
 * thread and fn(fd, priv) owns its non-blocking descriptor (fd -1 if the
 * connection died before the answer went out: fn must still free priv).
 * fn runs on the CLI thread and must not block.  0, or -1 when the
 * handler is not serving a connection (cli_exec).
 */
typedef void cli_stream_f(int fd, void *priv);
int cli__stream(cli_stream_f *fn, void *priv);

/* cli_log.c: `log`, registered by cli_init(); ended by cli_fini(). */
void cli__log_init(void);
void cli__log_fini(void); /* ends every log stream and joins its thread */

#endif
