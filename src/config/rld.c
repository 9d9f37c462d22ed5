/*
 * Reloading (see rld.h): the configuration file, the policy in use and
 * the TLS certificates, checked first and applied all together or not at
 * all; and reopening the logs, which is something else.
 *
 * Threads.  Reloads run on the main thread only, where SIGHUP is taken:
 * the policy registry and the TLS listeners want it so, and two reloads
 * can then never interleave.  The CLI thread asks for one with
 * rld_request(): it sends the process SIGHUP and waits on `req_cond`
 * until the main thread has run a reload that began after the request,
 * and reads its outcome.  req_mtx guards the request counters and the
 * last outcome; it ranks below everything a reload takes, and is never
 * held while reloading.  The file values of the last good load (`fvals`)
 * belong to the main thread.  Log reopening may come from the main
 * thread (SIGUSR1) and the CLI thread (log.reopen) at once: reopen_mtx
 * makes them take turns.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "surogat/acc.h"
#include "surogat/alog.h"
#include "surogat/be.h"
#include "surogat/cfg.h"
#include "surogat/defs.h"
#include "surogat/log.h"
#include "surogat/par.h"
#include "surogat/pol.h"
#include "surogat/rld.h"
#include "surogat/sb.h"
#include "surogat/sess.h"
#include "surogat/tls.h"

#define RLD_LINE_MAX  1024 /* an outcome line: a file:line message and the summary */
#define RLD_PARAM_MAX 128  /* longest parameter name written on -p */

/* One `name = value` of the file, under the parameter's surogat name. */
struct fval {
    const char *name; /* par_name(): the table's string */
    char *value;      /* as written */
    char *canon;      /* as par_get() would print it */
};

/* What one reading of the file found. */
struct stage {
    struct fval *v;
    unsigned n, cap;
    char *listen[CFG_LISTEN_MAX];
    unsigned nlisten;
    bool set; /* startup: set each parameter as it is read */
};

static const struct rld_conf *conf;
static struct stage fvals;   /* the file of the last good load; main thread */
static const char **cmdline; /* parameters -p and -M set: the file never changes them */
static unsigned ncmdline;

static pthread_mutex_t req_mtx = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t req_cond = PTHREAD_COND_INITIALIZER;
static unsigned long req_asked, req_done; /* under req_mtx */
static char req_outcome[RLD_LINE_MAX];    /* under req_mtx: the last reload's line */
static int req_rv;                        /* under req_mtx */
static bool serving, closed;              /* under req_mtx */

static pthread_mutex_t reopen_mtx = PTHREAD_MUTEX_INITIALIZER;

/*--------------------------------------------------------------------
 * Reading the file.
 */

static void
stage_clear(struct stage *st)
{
    for (unsigned i = 0; i < st->n; i++) {
        free(st->v[i].value);
        free(st->v[i].canon);
    }
    free(st->v);
    for (unsigned i = 0; i < st->nlisten; i++)
        free(st->listen[i]);
    memset(st, 0, sizeof *st);
}

static struct fval *
stage_find(const struct stage *st, const char *name)
{
    for (unsigned i = 0; i < st->n; i++)
        if (strcmp(st->v[i].name, name) == 0)
            return (&st->v[i]);
    return (NULL);
}

/* cfg_parse()'s callback: check the line and keep it (the last one of a name wins). */
static int
stage_line(const char *name, const char *value, struct sb *err, void *priv)
{
    struct stage *st = priv;
    /* Room for the value as par_get() prints it: "1y" is "31536000", "default" a list. */
    size_t clen = strlen(value) + 256;
    char *cbuf;
    struct fval *f;
    struct sb canon;

    if (strcmp(name, "listen") == 0) {
        if (st->nlisten == CFG_LISTEN_MAX) {
            sb_printf(err, "more than %d listen lines", CFG_LISTEN_MAX);
            return (-1);
        }
        st->listen[st->nlisten] = strdup(value);
        AN(st->listen[st->nlisten]);
        st->nlisten++;
        return (st->set ? cfg_add_listen(value, err) : 0);
    }
    cbuf = malloc(clen);
    AN(cbuf);
    sb_init(&canon, cbuf, clen);
    if (par_check(name, value, &canon, err) != 0) {
        free(cbuf);
        return (-1);
    }
    AN(sb_ok(&canon));
    if (st->set)
        AZ(par_set(name, value, err));
    f = stage_find(st, par_name(name));
    if (f == NULL) {
        if (st->n == st->cap) {
            st->cap = st->cap == 0 ? 16 : 2 * st->cap;
            st->v = realloc(st->v, st->cap * sizeof *st->v);
            AN(st->v);
        }
        f = &st->v[st->n++];
        f->name = par_name(name);
    } else {
        free(f->value);
        free(f->canon);
    }
    f->value = strdup(value);
    AN(f->value);
    f->canon = cbuf;
    return (0);
}

static bool
on_cmdline(const char *name)
{
    for (unsigned i = 0; i < ncmdline; i++)
        if (strcmp(cmdline[i], name) == 0)
            return (true);
    return (false);
}

static void
cmdline_add(const char *name)
{
    const char **n = realloc(cmdline, (ncmdline + 1) * sizeof *cmdline);

    AN(n);
    cmdline = n;
    cmdline[ncmdline++] = par_name(name);
}

/* Set one parameter from the command line: "-p NAME: reason" (or "-M ...") in err on failure. */
static int
cmdline_set(const char *opt, const char *name, const char *value, struct sb *err)
{
    char ebuf[512];
    struct sb perr;

    sb_init(&perr, ebuf, sizeof ebuf);
    if (par_set(name, value, &perr) != 0) {
        sb_printf(err, "%s %s", opt, ebuf);
        return (-1);
    }
    cmdline_add(name);
    return (0);
}

int
rld_init(const struct rld_conf *c, struct sb *err)
{
    char name[RLD_PARAM_MAX];
    const char *p, *eq;

    AN(c);
    conf = c;
    stage_clear(&fvals);
    fvals.set = true;
    if (c->config != NULL && cfg_parse(c->config, stage_line, &fvals, err) != 0)
        return (-1);
    fvals.set = false;
    for (unsigned i = 0; i < c->nparams; i++) {
        p = c->params[i];
        eq = strchr(p, '=');
        if (eq == NULL || eq == p || (size_t)(eq - p) >= sizeof name) {
            sb_printf(err, "-p %s: expected NAME=VALUE", p);
            return (-1);
        }
        memcpy(name, p, (size_t)(eq - p));
        name[eq - p] = '\0';
        if (cmdline_set("-p", name, eq + 1, err) != 0)
            return (-1);
    }
    if (c->admin_http != NULL && cmdline_set("-M", "admin_http", c->admin_http, err) != 0)
        return (-1);
    AZ(pthread_mutex_lock(&req_mtx));
    serving = true;
    AZ(pthread_mutex_unlock(&req_mtx));
    return (0);
}

/*--------------------------------------------------------------------
 * A reload.
 */

/* A parameter the reload changes: its new value and, to put it back, its old one. */
struct change {
    const char *name;
    char *to, *from;
    int flags;
};

struct plan {
    struct change *c;
    unsigned n, cap;
    struct sb restart; /* ", "-separated: what changed and needs a restart */
    char rbuf[512];
};

static void
plan_clear(struct plan *pl)
{
    for (unsigned i = 0; i < pl->n; i++) {
        free(pl->c[i].to);
        free(pl->c[i].from);
    }
    free(pl->c);
    pl->c = NULL;
    pl->n = pl->cap = 0;
}

static void
restart_note(struct plan *pl, const char *what)
{
    sb_printf(&pl->restart, "%s%s", pl->restart.len > 0 ? ", " : "", what);
}

/* The file gives `name` the value `canon` (NULL: its default): what must happen. */
static void
plan_param(struct plan *pl, const char *name, const char *canon)
{
    char *cur, *to;
    struct change *c;
    int flags = par_flags(name);

    AN(flags > 0);
    if (on_cmdline(name))
        return;
    to = canon != NULL ? strdup(canon) : par_text(name, true);
    cur = par_text(name, false);
    AN(to);
    AN(cur);
    if (strcmp(cur, to) == 0 || !(flags & (PAR_LIVE | PAR_LOAD))) {
        if (strcmp(cur, to) != 0)
            restart_note(pl, name);
        free(to);
        free(cur);
        return;
    }
    if (pl->n == pl->cap) {
        pl->cap = pl->cap == 0 ? 16 : 2 * pl->cap;
        pl->c = realloc(pl->c, pl->cap * sizeof *pl->c);
        AN(pl->c);
    }
    c = &pl->c[pl->n++];
    c->name = name;
    c->flags = flags;
    c->to = to;
    c->from = cur;
}

static bool
listen_changed(const struct stage *st)
{
    unsigned i;

    for (i = 0; i < st->nlisten; i++)
        if (cfg_listen(i) == NULL || strcmp(cfg_listen(i), st->listen[i]) != 0)
            return (true);
    return (cfg_listen(i) != NULL);
}

/* Set the changes whose flags match: to their new values, or back to the old. */
static void
plan_apply(const struct plan *pl, int flags, bool back)
{
    char ebuf[256];
    struct sb err;

    for (unsigned i = 0; i < pl->n; i++) {
        if ((pl->c[i].flags & PAR_LOAD) != (flags & PAR_LOAD))
            continue;
        sb_init(&err, ebuf, sizeof ebuf);
        /* Both were printed by par_get() or checked by par_check(). */
        AZ(par_set(pl->c[i].name, back ? pl->c[i].from : pl->c[i].to, &err));
    }
    log_set_level((int)par.log_level);
}

static int
reload(struct sb *out)
{
    char ebuf[RLD_LINE_MAX], wbuf[128];
    struct stage st;
    struct plan pl;
    struct pol_reload *pr = NULL;
    struct tls_reload *tr = NULL;
    struct sb err, what;
    unsigned ncert;

    memset(&st, 0, sizeof st);
    memset(&pl, 0, sizeof pl);
    sb_init(&pl.restart, pl.rbuf, sizeof pl.rbuf);
    sb_init(&err, ebuf, sizeof ebuf);
    if (conf != NULL && conf->config != NULL) {
        if (cfg_parse(conf->config, stage_line, &st, &err) != 0)
            goto failed;
        for (unsigned i = 0; i < st.n; i++)
            plan_param(&pl, st.v[i].name, st.v[i].canon);
        /* What the file set before and sets no more goes back to its default. */
        for (unsigned i = 0; i < fvals.n; i++)
            if (stage_find(&st, fvals.v[i].name) == NULL)
                plan_param(&pl, fvals.v[i].name, NULL);
        if (listen_changed(&st))
            restart_note(&pl, "listen");
    }
    /* What loading the policy and the certificates reads must be in place first. */
    plan_apply(&pl, PAR_LOAD, false);
    if (pol_reload_prepare(&pr, &err) != 0) {
        plan_apply(&pl, PAR_LOAD, true);
        goto failed;
    }
    if (tls_reload_prepare(&tr, &err) != 0) {
        pol_reload_abort(&pr);
        plan_apply(&pl, PAR_LOAD, true);
        goto failed;
    }
    /* Everything checked: from here on nothing can fail. */
    plan_apply(&pl, 0, false);
    sb_init(&what, wbuf, sizeof wbuf);
    pol_reload_commit(&pr, &what);
    ncert = tls_reload_commit(&tr);
    sess_reloaded(); /* long-lived connections (HTTP/2) move to new ones */
    sb_cat(out, "reload: ok (");
    if (conf == NULL || conf->config == NULL)
        sb_cat(out, "no config file");
    else if (pl.n == 0)
        sb_cat(out, "params unchanged");
    else
        sb_printf(out, "params %u changed", pl.n);
    if (pl.restart.len > 0)
        sb_printf(out, ", %s need%s a restart", pl.restart.buf,
                  strchr(pl.restart.buf, ',') != NULL ? "" : "s");
    if (what.len > 0)
        sb_printf(out, ", %s", what.buf);
    else if (pol_active())
        sb_cat(out, ", policy kept (inline)");
    if (ncert > 0)
        sb_printf(out, ", %u certificate%s", ncert, ncert == 1 ? "" : "s");
    sb_cat(out, ")");
    stage_clear(&fvals);
    fvals = st;
    plan_clear(&pl);
    return (0);
failed:
    sb_printf(out, "reload: failed: %s; nothing changed", ebuf);
    stage_clear(&st);
    plan_clear(&pl);
    return (-1);
}

int
rld_run(struct sb *out)
{
    char line[RLD_LINE_MAX];
    unsigned long asked;
    struct sb sb;
    int rv;

    AZ(pthread_mutex_lock(&req_mtx));
    asked = req_asked;
    AZ(pthread_mutex_unlock(&req_mtx));
    sb_init(&sb, line, sizeof line);
    rv = reload(&sb);
    log_msg(rv == 0 ? LOG_INFO : LOG_ERR, "%s", line);
    if (out != NULL)
        sb_cat(out, line);
    AZ(pthread_mutex_lock(&req_mtx));
    if (req_done < asked)
        req_done = asked;
    snprintf(req_outcome, sizeof req_outcome, "%s", line);
    req_rv = rv;
    AZ(pthread_cond_broadcast(&req_cond));
    AZ(pthread_mutex_unlock(&req_mtx));
    return (rv);
}

int
rld_request(double timeout, struct sb *out)
{
    struct timespec until;
    unsigned long mine;
    int rv = -1, e = 0;

    AZ(pthread_mutex_lock(&req_mtx));
    if (!serving || closed) {
        AZ(pthread_mutex_unlock(&req_mtx));
        sb_cat(out, closed ? "reload: failed: shutting down; nothing changed"
                           : "reload: failed: no daemon to reload; nothing changed");
        return (-1);
    }
    mine = ++req_asked;
    AZ(pthread_mutex_unlock(&req_mtx));
    /* The main thread takes SIGHUP with sigwait(); every other thread blocks it. */
    AZ(kill(getpid(), SIGHUP));
    AZ(clock_gettime(CLOCK_REALTIME, &until));
    until.tv_sec += (time_t)timeout;
    AZ(pthread_mutex_lock(&req_mtx));
    while (req_done < mine && !closed && e != ETIMEDOUT)
        e = pthread_cond_timedwait(&req_cond, &req_mtx, &until);
    if (req_done >= mine) {
        sb_cat(out, req_outcome);
        rv = req_rv;
    } else if (closed) {
        sb_cat(out, "reload: failed: shutting down; nothing changed");
    } else {
        sb_printf(out, "reload: still running after %.0f s: its outcome will be in the log",
                  timeout);
    }
    AZ(pthread_mutex_unlock(&req_mtx));
    return (rv);
}

void
rld_fini(void)
{
    AZ(pthread_mutex_lock(&req_mtx));
    closed = true;
    AZ(pthread_cond_broadcast(&req_cond));
    AZ(pthread_mutex_unlock(&req_mtx));
    stage_clear(&fvals);
    free(cmdline);
    cmdline = NULL;
    ncmdline = 0;
}

/*--------------------------------------------------------------------
 * The logs.
 */

int
rld_reopen_logs(struct sb *out)
{
    int rv;

    AZ(pthread_mutex_lock(&reopen_mtx));
    rv = log_reopen();
    if (rv == 0)
        rv = alog_reopen();
    if (rv != 0)
        sb_printf(out, "cannot reopen the logs: %s", strerror(errno));
    else
        sb_cat(out, "logs reopened");
    AZ(pthread_mutex_unlock(&reopen_mtx));
    return (rv);
}

/*--------------------------------------------------------------------
 * surogatd -t
 */

static void say(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
say(bool ok, const char *fmt, ...)
{
    FILE *f = ok ? stdout : stderr;
    va_list ap;

    fputs("surogatd: ", f);
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
}

/*
 * The certificates of one listen address; true when it has none, or they
 * load.  `from` says where the address was given: "-a" or the file.
 */
static bool
test_listen(const char *from, const char *spec, const char *base)
{
    char ebuf[1024];
    struct acc_spec as;
    struct sb err;
    bool ok = true;

    sb_init(&err, ebuf, sizeof ebuf);
    if (acc_spec_parse(spec, base, &as, &err) != 0) {
        say(false, "%s: %s", from, ebuf);
        ok = false;
    } else if (as.tls) {
        if (tls_check(&as.tls_conf, &err) != 0) {
            say(false, "%s %s: %s", from, spec, ebuf);
            ok = false;
        } else {
            say(true, "certificates of %s %s ok", from, spec);
        }
    }
    acc_spec_clear(&as);
    return (ok);
}

int
rld_test(const struct rld_conf *c, const char *policy, const char *const *listen, unsigned nlisten,
         const char *base)
{
    char ebuf[RLD_LINE_MAX];
    struct sb err;
    bool ok = true;

    sb_init(&err, ebuf, sizeof ebuf);
    if (rld_init(c, &err) != 0) {
        say(false, "%s", ebuf);
        ok = false;
    } else if (c->config != NULL) {
        say(true, "configuration file %s syntax is ok", c->config);
    }
    if (policy != NULL) {
        sb_init(&err, ebuf, sizeof ebuf);
        /* Declared backends are resolved, as they will be. */
        if (be_init() != 0 || pol_check(policy, &err) != 0) {
            say(false, "%s", ebuf);
            ok = false;
        } else {
            say(true, "policy %s ok", policy);
        }
    }
    if (tls_init() != 0) {
        say(false, "cannot initialise OpenSSL");
        return (1);
    }
    for (unsigned i = 0; i < nlisten; i++)
        ok = test_listen("-a", listen[i], base) && ok;
    if (c->config != NULL) {
        char from[1024];
        snprintf(from, sizeof from, "%s: listen", c->config);
        for (unsigned i = 0; cfg_listen(i) != NULL; i++)
            ok = test_listen(from, cfg_listen(i), base) && ok;
    }
    say(ok, "configuration test %s", ok ? "is successful" : "failed");
    return (ok ? 0 : 1);
}
