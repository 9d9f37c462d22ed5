/*
 * cli -- the admin interface: a line protocol on a TCP or Unix socket,
 * compatible with the Varnish CLI, so that surogatctl (or varnishadm) can
 * ping the daemon, read counters and change live parameters.
 *
 * Wire format, both directions:
 *   request:  one line of at most CLI_LINE_MAX bytes; arguments are split
 *             on spaces and tabs; a double-quoted argument may contain
 *             spaces and the escapes \" \\ \n \r \t \xHH \NNN (octal).
 *             A line ending with the arguments "<<" WORD goes on to the
 *             line that is WORD alone; the lines between are its last
 *             argument (Varnish's here document), CLI_LINE_MAX in all.
 *   response: "%-3u %-8zu\n" (status, body length: CLI_HDR_LEN bytes),
 *             the body, then one "\n" not counted in the length.
 *
 * On connect the server sends CLI_OK with a banner, or, when a secret file
 * is configured, CLI_AUTH with a challenge that `auth <response>` must
 * answer (see cli.c for the scheme, which is Varnish's).
 */
#ifndef SUROGAT_CLI_H
#define SUROGAT_CLI_H

struct sb;

/* Response statuses; the numbers are Varnish's (CLIS_*), so varnishadm reads them. */
enum cli_status {
    CLI_UNKNOWN = 101, /* no such command */
    CLI_USAGE = 102,   /* syntax error or wrong number of arguments */
    CLI_BADVAL = 104,  /* an argument has a bad value */
    CLI_PARAM = 106,   /* parameter error: unknown, not live, value refused */
    CLI_AUTH = 107,    /* authentication required, or failed */
    CLI_OK = 200,
    CLI_TRUNCATED = 201, /* the answer did not fit CLI_BODY_MAX and was cut */
    CLI_FAILED = 300,    /* the command could not be done */
    CLI_CLOSE = 500,     /* the server closes the connection after this answer */
};

#define CLI_LINE_MAX 65536     /* longest request line, newline excluded */
#define CLI_BODY_MAX (1 << 20) /* room a handler has in `out` */
#define CLI_HDR_LEN  13        /* "%-3u %-8zu\n" */

/*
 * Start the admin listener on "ADDR:PORT" ("127.0.0.1:6082", "[::1]:6082",
 * ":6082" for every interface) or on a Unix socket path starting with '/'
 * (created mode 0600; a stale socket left by a dead daemon is replaced).
 * secret_file NULL or "" means no authentication; otherwise it is read
 * once, here.  Call after par_init() and stat_init().
 * 0, or -1 with a one-line reason in err (bind failure, unreadable or
 * empty secret file).
 */
int cli_init(const char *addr, const char *secret_file, struct sb *err);
/*
 * Close the listener and every admin connection, join the thread and
 * forget the registered commands.  Safe without a successful cli_init().
 */
void cli_fini(void);

/*
 * A command handler.  argv[0] is the command name and argv[1..argc-1] its
 * arguments (argc - 1 is within the registered bounds); argv[argc] is NULL.
 * The handler writes its answer into `out`, which holds CLI_BODY_MAX
 * bytes, and returns a status of enum cli_status.  Handlers run one at a
 * time, on the CLI thread (or the caller of cli_exec); they may block, but
 * every admin connection waits meanwhile.
 */
typedef unsigned cli_cmd_f(int argc, char *const *argv, struct sb *out, void *priv);
/*
 * Register a command; any thread, any time, before or after cli_init().
 * `usage` lists the arguments ("<name> <value>"; the name is prepended in
 * help), `help` says what the command does.  max_args -1: no upper bound.
 * The strings must outlive the registration (literals, usually).
 * Registering a name twice is a bug.
 */
void cli_register(const char *name, const char *usage, const char *help, int min_args, int max_args,
                  cli_cmd_f *fn, void *priv);
/*
 * Run one request line as an authenticated client would, on the calling
 * thread, and return its status with the body in `out`.  For tests and
 * for startup commands; `line` has no newline.
 */
unsigned cli_exec(const char *line, struct sb *out);

#endif
