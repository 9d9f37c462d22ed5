/*
 * The admin commands: the command registry and the built-in commands
 * (ping, help, param.*, backend.set_health, ban, storage.list, status,
 * banner, auth, quit; policy.*, vcl.*, backend.list, purge, reload and
 * log.reopen are in cli_admin.c, stats in cli_stats.c; requests are
 * split into arguments in cli_split.c).
 *
 * Built-ins live in a constant table; other modules add commands with
 * cli_register() into a list sorted by name.  Locks: reg_mtx guards the
 * list and is held only to look up or list; exec_mtx is held around each
 * handler so that handlers never run concurrently (the CLI thread and a
 * cli_exec() caller) and need no locking of their own.  exec_mtx ranks
 * above reg_mtx, so a handler may call cli_register().
 */
#include "config.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>

#include "surogat/ban.h"
#include "surogat/clu.h"
#include "surogat/be.h"
#include "surogat/defs.h"
#include "surogat/cli.h"
#include "surogat/log.h"
#include "surogat/par.h"
#include "surogat/pol.h"
#include "surogat/sb.h"
#include "surogat/stat.h"
#include "surogat/sto.h"

#include "cli_priv.h"

struct cli_cmd {
    unsigned magic;
#define CLI_CMD_MAGIC 0x2bd4a611
    const char *name;
    const char *usage; /* arguments only, or NULL */
    const char *help;
    int min_args;
    int max_args; /* -1: unbounded */
    cli_cmd_f *fn;
    void *priv;
    struct cli_cmd *next; /* registered commands, sorted by name; under reg_mtx */
};

static pthread_mutex_t reg_mtx = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t exec_mtx = PTHREAD_MUTEX_INITIALIZER;
static struct cli_cmd *cmd_list; /* under reg_mtx */

/*--------------------------------------------------------------------
 * Built-in commands.
 */

void
cli__banner(struct sb *out)
{
    struct utsname u;

    sb_cat(out, "-----------------------------\n"
                "surogat admin interface 1.0\n"
                "-----------------------------\n");
    if (uname(&u) == 0)
        sb_printf(out, "%s,%s,%s\n", u.sysname, u.release, u.machine);
    sb_cat(out, "surogat-" SUROGAT_VERSION "\n"
                "\n"
                "Type 'help' for command list.\n"
                "Type 'quit' to close CLI session.\n");
}

static unsigned
cmd_ping(int argc, char *const *argv, struct sb *out, void *priv)
{
    /* "1.0" is the protocol version Varnish answers; varnishadm checks nothing more. */
    sb_printf(out, "PONG %jd 1.0", (intmax_t)time(NULL));
    return (CLI_OK);
}

static unsigned
cmd_banner(int argc, char *const *argv, struct sb *out, void *priv)
{
    cli__banner(out);
    return (CLI_OK);
}

static unsigned
cmd_status(int argc, char *const *argv, struct sb *out, void *priv)
{
    /* Varnish's wording: monitoring scripts written for varnishadm grep for it. */
    sb_cat(out, "Child in state running");
    return (CLI_OK);
}

/*
 * The connection layer answers `auth` and `quit` itself (cli.c); these
 * bodies serve cli_exec() and a server without a secret.
 */
static unsigned
cmd_auth(int argc, char *const *argv, struct sb *out, void *priv)
{
    return (CLI_OK);
}

static unsigned
cmd_quit(int argc, char *const *argv, struct sb *out, void *priv)
{
    sb_cat(out, "Closing CLI connection");
    return (CLI_CLOSE);
}

/* Cut out back to `len`, dropping a partial answer. */
static void
sb_rewind(struct sb *out, size_t len)
{
    SRG_ASSERT(len <= out->len);
    out->len = len;
    out->buf[len] = '\0';
}

/* `param.show [-l] [<name>|changed]`, as varnishadm's (without -j). */
static unsigned
cmd_param_show(int argc, char *const *argv, struct sb *out, void *priv)
{
    enum par_show how = PAR_SHOW_SHORT;
    const char *what = NULL;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-l") == 0) {
            how = PAR_SHOW_LONG;
        } else if (argv[i][0] != '-' && what == NULL) {
            what = argv[i];
        } else {
            sb_printf(out, "Unexpected '%.64s'.\nUsage: param.show [-l] [<param>|changed]",
                      argv[i]);
            return (CLI_USAGE);
        }
    }
    if (what == NULL || strcmp(what, "changed") == 0) {
        par_show_all(how, what != NULL, out);
        return (CLI_OK);
    }
    /* One parameter: always the long form, as varnishadm shows it. */
    if (par_show(what, PAR_SHOW_LONG, out) != 0) {
        sb_printf(out, "Unknown parameter \"%.64s\".", what);
        return (CLI_PARAM);
    }
    return (CLI_OK);
}

/* What param.set and param.reset may change: a known parameter that takes effect at once. */
static bool
param_settable(const char *name, struct sb *out)
{
    int flags = par_flags(name);

    if (flags < 0) {
        sb_printf(out, "Unknown parameter \"%.64s\".", name);
        return (false);
    }
    if (!(flags & PAR_LIVE)) {
        sb_printf(out,
                  "Parameter '%s' is read at startup only: it needs a restart "
                  "(set it with -p or in the config file%s).",
                  name, (flags & PAR_LOAD) ? ", which a reload applies" : "");
        return (false);
    }
    return (true);
}

/* After a change: the parameters that are copied out of `par` when set. */
static void
param_applied(const char *name)
{
    if (strcmp(par_name(name), "log_level") == 0)
        log_set_level((int)par.log_level);
}

static unsigned
cmd_param_set(int argc, char *const *argv, struct sb *out, void *priv)
{
    if (!param_settable(argv[1], out) || par_set(argv[1], argv[2], out) != 0)
        return (CLI_PARAM);
    param_applied(argv[1]);
    log_msg(LOG_NOTICE, "cli: param.set %s %s", argv[1], argv[2]);
    return (CLI_OK);
}

static unsigned
cmd_param_reset(int argc, char *const *argv, struct sb *out, void *priv)
{
    if (!param_settable(argv[1], out) || par_reset(argv[1], out) != 0)
        return (CLI_PARAM);
    param_applied(argv[1]);
    log_msg(LOG_NOTICE, "cli: param.reset %s", argv[1]);
    return (CLI_OK);
}

static unsigned
cmd_storage_list(int argc, char *const *argv, struct sb *out, void *priv)
{
    sto_list(out);
    return (CLI_OK);
}

/*
 * `ban EXPR`: one argument is the whole expression (surogatctl ban
 * 'req.url ~ ^/news'); several are its tokens, as varnishadm sends them
 * (ban req.url ~ ^/news), rejoined with blanks, an argument holding a
 * blank or a quote being quoted again.
 */
static unsigned
cmd_ban(int argc, char *const *argv, struct sb *out, void *priv)
{
    size_t cap = 1, mark = out->len;
    char *expr, *w;
    struct clu_op op;
    struct clu *c;

    for (int i = 1; i < argc; i++)
        cap += 2 * strlen(argv[i]) + 3;
    expr = malloc(cap);
    AN(expr);
    w = expr;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        bool quote = argc > 2 && (a[0] == '\0' || strpbrk(a, " \t\"") != NULL);
        if (i > 1)
            *w++ = ' ';
        if (quote)
            *w++ = '"';
        for (; *a != '\0'; a++) {
            if (quote && (*a == '"' || *a == '\\'))
                *w++ = '\\';
            *w++ = *a;
        }
        if (quote)
            *w++ = '"';
    }
    *w = '\0';
    c = pol_cluster();
    clu_op_init(&op, c != NULL ? clu_self(c) : "local", CLU_OP_BAN, false, expr, strlen(expr));
    if (clu_op_apply(&op, out) != 0) {
        clu_unref(&c);
        free(expr);
        return (CLI_PARAM);
    }
    log_msg(LOG_NOTICE, "cli: ban %s", expr);
    sb_rewind(out, mark);
    /* In a cluster: the ban goes to every member, and a line says what each did. */
    if (c != NULL)
        (void)clu_fanout(c, &op, 0, out);
    clu_unref(&c);
    free(expr);
    return (CLI_OK);
}

static unsigned
cmd_ban_list(int argc, char *const *argv, struct sb *out, void *priv)
{
    ban_list(out);
    return (CLI_OK);
}

static unsigned
cmd_backend_set_health(int argc, char *const *argv, struct sb *out, void *priv)
{
    static const struct {
        const char *name;
        enum be_admin a;
    } states[] = { { "auto", BE_ADMIN_AUTO },
                   { "healthy", BE_ADMIN_HEALTHY },
                   { "sick", BE_ADMIN_SICK } };

    for (size_t i = 0; i < ARRAY_LEN(states); i++) {
        if (strcmp(argv[2], states[i].name) != 0)
            continue;
        if (be_set_admin(argv[1], states[i].a) == 0) {
            log_msg(LOG_NOTICE, "cli: backend.set_health %s %s", argv[1], argv[2]);
            return (CLI_OK);
        }
        sb_printf(out, "No backend named '%.64s'.", argv[1]);
        return (CLI_BADVAL);
    }
    sb_printf(out, "Unknown state '%.32s': auto, healthy or sick.", argv[2]);
    return (CLI_BADVAL);
}

static unsigned cmd_help(int argc, char *const *argv, struct sb *out, void *priv);

/* Sorted by name, as help lists them. */
static const struct cli_cmd builtins[] = {
    { CLI_CMD_MAGIC, "auth", "<response>", "Authenticate: answer the challenge sent on connect.", 1,
      1, cmd_auth, NULL, NULL },
    { CLI_CMD_MAGIC, "backend.list", NULL,
      "One line per backend: name (program.backend when several policy programs are loaded), "
      "address, health, admin state (auto, healthy, sick), open connections, and the probe "
      "window as good/window and its history, oldest first (H good, - bad); then the "
      "directors, with their type and members.",
      0, 0, cli__cmd_backend_list, NULL, NULL },
    { CLI_CMD_MAGIC, "backend.set_health", "<backend> auto|healthy|sick",
      "Force a backend healthy or sick, or give the decision back to its probe (auto).", 2, 2,
      cmd_backend_set_health, NULL, NULL },
    { CLI_CMD_MAGIC, "ban", "<field> <operator> <arg> [&& <field> <operator> <arg>]...",
      "Invalidate every object now cached that matches the expression; fields req.url, "
      "req.http.host, obj.status, obj.http.NAME; operators == != ~ !~ (see surogatd(8)).",
      1, -1, cmd_ban, NULL, NULL },
    { CLI_CMD_MAGIC, "ban.list", NULL,
      "List the bans, newest first: time added (UTC), objects pointing at it, C when "
      "completed, expression.",
      0, 0, cmd_ban_list, NULL, NULL },
    { CLI_CMD_MAGIC, "banner", NULL, "Print the welcome banner.", 0, 0, cmd_banner, NULL, NULL },
    { CLI_CMD_MAGIC, "help", "[<command>]", "List the commands, or show what one does.", 0, 1,
      cmd_help, NULL, NULL },
    { CLI_CMD_MAGIC, "log.reopen", NULL,
      "Reopen the access log and the error log, as SIGUSR1 does (after logrotate moved them).", 0,
      0, cli__cmd_log_reopen, NULL, NULL },
    { CLI_CMD_MAGIC, "param.reset", "<name>", "Set a runtime parameter back to its default.", 1, 1,
      cmd_param_reset, NULL, NULL },
    { CLI_CMD_MAGIC, "param.set", "<name> <value>",
      "Change a runtime parameter.  Only parameters that take effect at once may be set; "
      "the others need a restart.  Varnish's parameter names are taken too.",
      2, 2, cmd_param_set, NULL, NULL },
    { CLI_CMD_MAGIC, "param.show", "[-l] [<name>|changed]",
      "Show every parameter as \"name value [unit]\" lines, \"(default)\" after those at their "
      "default; with -l, or for one <name>, the long form: value, default, bounds, flags, "
      "Varnish name and documentation; \"changed\": only those not at their default.",
      0, 2, cmd_param_show, NULL, NULL },
    { CLI_CMD_MAGIC, "ping", "[<timestamp>]", "Keep the connection alive; answers PONG.", 0, 1,
      cmd_ping, NULL, NULL },
    { CLI_CMD_MAGIC, "policy.discard", "<name>",
      "Forget a loaded policy program; the one in use cannot be discarded.", 1, 1,
      cli__cmd_policy_discard, NULL, NULL },
    { CLI_CMD_MAGIC, "policy.list", NULL,
      "One line per loaded policy program: active or available, worker states built from it, "
      "name, file.",
      0, 0, cli__cmd_policy_list, NULL, NULL },
    { CLI_CMD_MAGIC, "policy.load", "<name> <file>",
      "Compile a policy script as a new program named <name>, without using it yet; an error "
      "is answered with file:line.  A relative <file> is relative to the daemon's directory.",
      2, 2, cli__cmd_policy_load, NULL, NULL },
    { CLI_CMD_MAGIC, "policy.use", "<name>",
      "Switch every worker to a loaded policy program; requests under way finish under the old.", 1,
      1, cli__cmd_policy_use, NULL, NULL },
    { CLI_CMD_MAGIC, "purge", "<url> [<host>]",
      "Remove every variant of a URL from the cache, as an HTTP PURGE does: <url> is a path with "
      "<host> as clients send it in Host, or http://host/path; without a host, that path on "
      "every host.",
      1, 2, cli__cmd_purge, NULL, NULL },
    { CLI_CMD_MAGIC, "quit", NULL, "Close the connection.", 0, 0, cmd_quit, NULL, NULL },
    { CLI_CMD_MAGIC, "reload", NULL,
      "Reload as SIGHUP does: the configuration file's parameters, the policy in use and the "
      "TLS certificates, all or nothing; answers the outcome (300 when nothing changed).",
      0, 0, cli__cmd_reload, NULL, NULL },
    { CLI_CMD_MAGIC, "stats", "[-j] [-l] [PATTERN...]",
      "Print every counter, then each backend's as backend.NAME.COUNTER, as \"name value\" "
      "lines, or with -j as one JSON object; -l adds each one's description; PATTERNs (globs) "
      "keep the names matching one.",
      0, -1, cli__cmd_stats, NULL, NULL },
    { CLI_CMD_MAGIC, "status", NULL, "Check the state of the cache process.", 0, 0, cmd_status,
      NULL, NULL },
    { CLI_CMD_MAGIC, "storage.list", NULL,
      "One line per store: kind, size and bytes used, each also in KiB, MiB or GiB; for a file "
      "store its path, free extents, largest free extent and fragmentation.",
      0, 0, cmd_storage_list, NULL, NULL },
    { CLI_CMD_MAGIC, "vcl.discard", "<name>...", "policy.discard, by Varnish's name.", 1, -1,
      cli__cmd_vcl_discard, NULL, NULL },
    { CLI_CMD_MAGIC, "vcl.inline", "<name> <quoted Lua source> [auto|warm]",
      "Compile a policy script given inline (quoted, or as a << here document) as program "
      "<name>, as vcl.inline does with VCL.",
      2, 3, cli__cmd_vcl_inline, NULL, NULL },
    { CLI_CMD_MAGIC, "vcl.list", NULL,
      "policy.list in Varnish's columns: status, state/temperature, busy (worker states built "
      "from it), name.",
      0, 0, cli__cmd_vcl_list, NULL, NULL },
    { CLI_CMD_MAGIC, "vcl.load", "<name> <file> [auto|warm]", "policy.load, by Varnish's name.", 2,
      3, cli__cmd_vcl_load, NULL, NULL },
    { CLI_CMD_MAGIC, "vcl.show", "[-v] [<name>]",
      "The source of a policy program (the one in use without <name>); -v adds builtin.lua, "
      "each after a \"// VCL.SHOW N SIZE FILE\" line as Varnish writes it.",
      0, 2, cli__cmd_vcl_show, NULL, NULL },
    { CLI_CMD_MAGIC, "vcl.use", "<name>", "policy.use, by Varnish's name.", 1, 1, cli__cmd_vcl_use,
      NULL, NULL },
};

static const struct cli_cmd *
find_builtin(const char *name)
{
    for (size_t i = 0; i < ARRAY_LEN(builtins); i++)
        if (strcmp(builtins[i].name, name) == 0)
            return (&builtins[i]);
    return (NULL);
}

/* Under reg_mtx. */
static const struct cli_cmd *
find_registered(const char *name)
{
    for (const struct cli_cmd *cp = cmd_list; cp != NULL; cp = cp->next)
        if (strcmp(cp->name, name) == 0)
            return (cp);
    return (NULL);
}

/* "name usage", tolerating a usage string that already starts with the name. */
static void
cmd_synopsis(const struct cli_cmd *cp, struct sb *out)
{
    size_t n = strlen(cp->name);

    if (cp->usage == NULL || cp->usage[0] == '\0')
        sb_cat(out, cp->name);
    else if (strncmp(cp->usage, cp->name, n) == 0 && (cp->usage[n] == '\0' || cp->usage[n] == ' '))
        sb_cat(out, cp->usage);
    else
        sb_printf(out, "%s %s", cp->name, cp->usage);
}

static void
help_line(const struct cli_cmd *cp, struct sb *out)
{
    char buf[256];
    struct sb syn;

    sb_init(&syn, buf, sizeof buf);
    cmd_synopsis(cp, &syn);
    sb_printf(out, "%-30s %s\n", syn.buf, cp->help != NULL ? cp->help : "");
}

static unsigned
cmd_help(int argc, char *const *argv, struct sb *out, void *priv)
{
    const struct cli_cmd *cp, *rp;
    size_t i = 0;

    AZ(pthread_mutex_lock(&reg_mtx));
    if (argc == 2) {
        cp = find_builtin(argv[1]);
        if (cp == NULL)
            cp = find_registered(argv[1]);
        if (cp != NULL) {
            cmd_synopsis(cp, out);
            sb_printf(out, "\n    %s\n", cp->help != NULL ? cp->help : "");
        }
        AZ(pthread_mutex_unlock(&reg_mtx));
        if (cp != NULL)
            return (CLI_OK);
        sb_printf(out, "Unknown command '%s'.", argv[1]);
        return (CLI_UNKNOWN);
    }
    /* Merge the two sorted lists. */
    rp = cmd_list;
    while (i < ARRAY_LEN(builtins) || rp != NULL) {
        if (rp == NULL || (i < ARRAY_LEN(builtins) && strcmp(builtins[i].name, rp->name) < 0)) {
            help_line(&builtins[i++], out);
        } else {
            help_line(rp, out);
            rp = rp->next;
        }
    }
    AZ(pthread_mutex_unlock(&reg_mtx));
    return (CLI_OK);
}

/*--------------------------------------------------------------------
 * The registry and dispatch.
 */

void
cli_register(const char *name, const char *usage, const char *help, int min_args, int max_args,
             cli_cmd_f *fn, void *priv)
{
    struct cli_cmd *cp, **pp;

    AN(name);
    AN(*name);
    AN(fn);
    SRG_ASSERT(min_args >= 0);
    SRG_ASSERT(max_args == -1 || max_args >= min_args);
    SRG_ASSERT(strchr(name, ' ') == NULL && strchr(name, '"') == NULL);
    if (find_builtin(name) != NULL)
        SRG_WRONG("cli_register: name of a built-in command");
    OBJ_NEW(cp, CLI_CMD_MAGIC);
    cp->name = name;
    cp->usage = usage;
    cp->help = help;
    cp->min_args = min_args;
    cp->max_args = max_args;
    cp->fn = fn;
    cp->priv = priv;
    AZ(pthread_mutex_lock(&reg_mtx));
    if (find_registered(name) != NULL)
        SRG_WRONG("cli_register: command registered twice");
    for (pp = &cmd_list; *pp != NULL && strcmp((*pp)->name, name) < 0; pp = &(*pp)->next)
        continue;
    cp->next = *pp;
    *pp = cp;
    AZ(pthread_mutex_unlock(&reg_mtx));
}

void
cli__cmds_fini(void)
{
    struct cli_cmd *cp;

    AZ(pthread_mutex_lock(&reg_mtx));
    while (cmd_list != NULL) {
        cp = cmd_list;
        cmd_list = cp->next;
        OBJ_CHECK(cp, CLI_CMD_MAGIC);
        OBJ_FREE(&cp);
    }
    AZ(pthread_mutex_unlock(&reg_mtx));
}

unsigned
cli__dispatch(int argc, char *const *argv, struct sb *out)
{
    const struct cli_cmd *cp;
    struct cli_cmd c;
    unsigned status;

    SRG_ASSERT(argc >= 1);
    AN(argv[0]);
    cp = find_builtin(argv[0]);
    AZ(pthread_mutex_lock(&reg_mtx));
    if (cp == NULL)
        cp = find_registered(argv[0]);
    /* A copy: cli_fini() may free the entry while the handler runs. */
    if (cp != NULL)
        c = *cp;
    AZ(pthread_mutex_unlock(&reg_mtx));
    if (cp == NULL) {
        sb_printf(out, "Unknown request '%s'.\nType 'help' for more info.", argv[0]);
        return (CLI_UNKNOWN);
    }
    OBJ_CHECK(&c, CLI_CMD_MAGIC);
    if (argc - 1 < c.min_args || (c.max_args >= 0 && argc - 1 > c.max_args)) {
        sb_printf(out, "Too %s arguments.\nUsage: ", argc - 1 < c.min_args ? "few" : "many");
        cmd_synopsis(&c, out);
        return (CLI_USAGE);
    }
    AZ(pthread_mutex_lock(&exec_mtx));
    status = c.fn(argc, argv, out, c.priv);
    AZ(pthread_mutex_unlock(&exec_mtx));
    SRG_ASSERT(status >= 100 && status <= 999);
    if (status == CLI_OK && !sb_ok(out))
        status = CLI_TRUNCATED;
    return (status);
}

unsigned
cli_exec(const char *line, struct sb *out)
{
    char *copy, **argv;
    unsigned status;
    int argc;

    AN(line);
    AN(out);
    copy = strdup(line);
    AN(copy);
    if (cli__split(copy, &argv, &argc, out) != 0) {
        free(copy);
        return (CLI_USAGE);
    }
    if (argc == 0) {
        sb_cat(out, "Empty request.");
        status = CLI_USAGE;
    } else {
        status = cli__dispatch(argc, argv, out);
    }
    free(argv);
    free(copy);
    return (status);
}
