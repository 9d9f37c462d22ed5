/*
 * cli_priv -- shared between cli.c (listener, connections), cli_auth.c
 * (the secret and the challenge), cli_split.c (requests into arguments),
 * cli_cmd.c (the command registry, the built-in commands) and cli_admin.c
 * (the policy, vcl, backend, purge and reload commands).
 */
#ifndef SUROGAT_CLI_PRIV_H
#define SUROGAT_CLI_PRIV_H

#include <stdbool.h>
#include <stddef.h>

struct sb;

/*
 * cli_auth.c.  The secret file (-S) is read once, before the CLI thread
 * starts, and forgotten (wiped) after it stopped.
 */
#define CLI_CHALLENGE 32                                /* letters, as Varnish sends */
int cli__secret_read(const char *path, struct sb *err); /* 0, or -1 with the reason in err */
void cli__secret_forget(void);
bool cli__secret_set(void); /* whether connections must authenticate */
/* A fresh random challenge of CLI_CHALLENGE letters and a NUL.  -1: the RNG failed. */
int cli__challenge_new(char *challenge);
/* Whether `answer` is hex(SHA-256(challenge "\n" secret challenge "\n")); the secret is set. */
bool cli__auth_ok(const char *challenge, const char *answer);

/*
 * cli_split.c.  Split a request into arguments, in place: the argument
 * strings are the request's own bytes, unquoted and unescaped.  0 with a
 * malloc'd, NULL-terminated *argvp (free it; argc may be 0 for a blank
 * line), or -1 with the reason in err.
 */
int cli__split(char *line, char ***argvp, int *argcp, struct sb *err);
/*
 * The length of the first complete request in buf[0 .. len), its final
 * newline included, or 0 while it is incomplete.  A request is one line,
 * or, when the line ends with the two arguments "<<" WORD, that line and
 * the following ones up to a line that is WORD alone (a here document:
 * cli__split() makes those lines the last argument).
 */
size_t cli__request_len(const char *buf, size_t len);
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
 * cli_admin.c: the handlers of policy.*, their Varnish names vcl.*,
 * backend.list, purge, reload and log.reopen, listed with the built-ins
 * in cli_cmd.c.
 */
unsigned cli__cmd_policy_load(int argc, char *const *argv, struct sb *out, void *priv);
unsigned cli__cmd_policy_use(int argc, char *const *argv, struct sb *out, void *priv);
unsigned cli__cmd_policy_list(int argc, char *const *argv, struct sb *out, void *priv);
unsigned cli__cmd_policy_discard(int argc, char *const *argv, struct sb *out, void *priv);
unsigned cli__cmd_vcl_load(int argc, char *const *argv, struct sb *out, void *priv);
unsigned cli__cmd_vcl_inline(int argc, char *const *argv, struct sb *out, void *priv);
unsigned cli__cmd_vcl_use(int argc, char *const *argv, struct sb *out, void *priv);
unsigned cli__cmd_vcl_list(int argc, char *const *argv, struct sb *out, void *priv);
unsigned cli__cmd_vcl_show(int argc, char *const *argv, struct sb *out, void *priv);
unsigned cli__cmd_vcl_discard(int argc, char *const *argv, struct sb *out, void *priv);
unsigned cli__cmd_backend_list(int argc, char *const *argv, struct sb *out, void *priv);
unsigned cli__cmd_purge(int argc, char *const *argv, struct sb *out, void *priv);
unsigned cli__cmd_reload(int argc, char *const *argv, struct sb *out, void *priv);
unsigned cli__cmd_log_reopen(int argc, char *const *argv, struct sb *out, void *priv);
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
