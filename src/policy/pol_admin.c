/*
 * Named policy programs: the registry behind the admin commands
 * policy.load, policy.use, policy.list and policy.discard (Varnish's
 * vcl.*), and behind pol_load() and the SIGHUP reload.
 *
 * The registry holds one reference to each program it names; the
 * current program (pol.c's `cur`) is always one of them, so a program is
 * compiled once whether it is used now, later, or again.  A program
 * that is discarded leaves the registry at once but lives on while a
 * worker state built from it does: the worker drops it when it moves to
 * the current program at its next hook call.
 *
 * Callers are the main thread (pol_load at startup, pol_reload on
 * SIGHUP) and the CLI thread.  adm_mtx serialises them, and is held
 * while a script compiles, so that two loads never race to the same name
 * and a reload never replaces a program being discarded.  It ranks above
 * pol.c's mtx and the backend locks that compiling takes; workers never
 * take it.
 */
#include "config.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "surogat/be.h"
#include "surogat/defs.h"
#include "surogat/log.h"
#include "surogat/pol.h"
#include "surogat/sb.h"
#include "surogat/stat.h"

#include "pol_priv.h"

#define POL_NAME_MAX 64 /* a name for humans to type: Varnish's are shorter still */

struct pol_named {
    unsigned magic;
#define POL_NAMED_MAGIC 0x4f1c9a3e
    char *name;
    struct pol_prog *prog; /* a reference */
    struct pol_named *next;
};

static pthread_mutex_t adm_mtx = PTHREAD_MUTEX_INITIALIZER;
static struct pol_named *named; /* under adm_mtx, in load order */
/*
 * Under adm_mtx: pol_fini() has run, and the backends a new program
 * would declare could no longer be freed.  The admin listener outlives
 * the policy engine at shutdown, so a late policy.load must be refused.
 */
static bool closed;

static bool
name_ok(const char *name)
{
    size_t n = strlen(name);

    if (n == 0 || n > POL_NAME_MAX)
        return (false);
    if (!((name[0] >= 'a' && name[0] <= 'z') || (name[0] >= 'A' && name[0] <= 'Z')))
        return (false);
    return (strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.") == n);
}

/* Under adm_mtx. */
static struct pol_named **
find(const char *name)
{
    struct pol_named **pp;

    for (pp = &named; *pp != NULL; pp = &(*pp)->next) {
        OBJ_CHECK(*pp, POL_NAMED_MAGIC);
        if (strcmp((*pp)->name, name) == 0)
            return (pp);
    }
    return (NULL);
}

/* Under adm_mtx: the entry of the current program, or NULL. */
static struct pol_named *
find_cur(void)
{
    for (struct pol_named *np = named; np != NULL; np = np->next)
        if (pol__prog_is_cur(np->prog))
            return (np);
    return (NULL);
}

static void
named_free(struct pol_named **npp)
{
    struct pol_named *np;

    OBJ_TAKE(np, npp, POL_NAMED_MAGIC);
    pol__prog_unref(&np->prog);
    free(np->name);
    OBJ_FREE(&np);
}

/*
 * Compile path for the registry: the program, or NULL with the reason in
 * err.  With need_backend, a program with nowhere to send requests is
 * refused as startup refuses it (no -b, no declarations): switching to it
 * would answer every miss with 503.  A reload keeps what it always did:
 * the script's own choice.
 */
static struct pol_prog *
compile(const char *path, bool need_backend, struct sb *err)
{
    struct pol_prog *p;

    if (closed) {
        sb_cat(err, "the policy engine is shutting down");
        return (NULL);
    }
    p = pol__prog_check(path, err);
    if (p != NULL && need_backend && pol__decl_empty(pol__prog_cfg(p))) {
        sb_printf(err, "%s: declares no backend and there is no -b", path);
        pol__prog_unref(&p);
    }
    return (p);
}

/* Under adm_mtx: add p (the caller's reference) as name, or replace the program of that name. */
static struct pol_named *
put(const char *name, struct pol_prog *p)
{
    struct pol_named **pp = find(name), *np;

    if (pp != NULL) {
        np = *pp;
        pol__prog_unref(&np->prog);
        np->prog = p;
        return (np);
    }
    for (pp = &named; *pp != NULL; pp = &(*pp)->next)
        continue;
    OBJ_NEW(np, POL_NAMED_MAGIC);
    AN(np);
    np->name = strdup(name);
    AN(np->name);
    np->prog = p;
    *pp = np;
    return (np);
}

int
pol_load(const char *path, struct sb *err)
{
    struct pol_prog *p;

    AN(path);
    AZ(pthread_mutex_lock(&adm_mtx));
    closed = false;
    /* No backend check here: main.c says what is missing in the words of the command line. */
    p = pol__prog_check(path, err);
    if (p != NULL)
        pol__prog_install(put("boot", p)->prog);
    AZ(pthread_mutex_unlock(&adm_mtx));
    return (p != NULL ? 0 : -1);
}

/* A prepared reload: the program in use, compiled again, not yet installed. */
struct pol_reload {
    unsigned magic;
#define POL_RELOAD_MAGIC 0x1d7e93b5
    char *name;
    struct pol_prog *prog; /* our reference */
};

/*
 * Holds adm_mtx from here to _commit() or _abort() when it prepared
 * something, so that the program it replaces stays the current one.
 */
int
pol_reload_prepare(struct pol_reload **rp, struct sb *err)
{
    struct pol_named *np;
    struct pol_prog *p;
    struct pol_reload *r;

    AN(rp);
    *rp = NULL;
    if (!pol_active())
        return (0);
    AZ(pthread_mutex_lock(&adm_mtx));
    np = find_cur();
    if (np == NULL || pol__prog_is_inline(np->prog)) {
        AZ(pthread_mutex_unlock(&adm_mtx));
        return (0);
    }
    p = compile(pol__prog_path(np->prog), false, err);
    if (p == NULL) {
        AZ(pthread_mutex_unlock(&adm_mtx));
        return (-1);
    }
    OBJ_NEW(r, POL_RELOAD_MAGIC);
    AN(r);
    r->name = strdup(np->name);
    AN(r->name);
    r->prog = p;
    *rp = r;
    return (0);
}

void
pol_reload_commit(struct pol_reload **rp, struct sb *what)
{
    struct pol_reload *r;

    if (*rp == NULL)
        return;
    OBJ_TAKE(r, rp, POL_RELOAD_MAGIC);
    pol__prog_install(put(r->name, r->prog)->prog);
    log_msg(LOG_NOTICE, "policy: '%s' reloaded from %s", r->name, pol__prog_path(r->prog));
    AZ(pthread_mutex_unlock(&adm_mtx));
    STAT_INC(policy_reload);
    if (what != NULL)
        sb_printf(what, "policy %s reloaded", r->name);
    free(r->name);
    OBJ_FREE(&r);
}

void
pol_reload_abort(struct pol_reload **rp)
{
    struct pol_reload *r;

    if (*rp == NULL)
        return;
    OBJ_TAKE(r, rp, POL_RELOAD_MAGIC);
    pol__prog_unref(&r->prog);
    AZ(pthread_mutex_unlock(&adm_mtx));
    free(r->name);
    OBJ_FREE(&r);
}

int
pol_reload(struct sb *err)
{
    struct pol_reload *r;

    if (pol_reload_prepare(&r, err) != 0)
        return (-1);
    pol_reload_commit(&r, NULL);
    return (0);
}

/* policy.load and vcl.inline: path, or src when path is NULL. */
static int
prog_add(const char *name, const char *path, const char *src, size_t len, struct sb *err)
{
    struct pol_prog *p;

    AN(name);
    if (!name_ok(name)) {
        sb_printf(err,
                  "Bad program name '%.*s': a letter, then letters, digits, '_', '-' or '.', "
                  "at most %d.",
                  POL_NAME_MAX + 1, name, POL_NAME_MAX);
        return (-1);
    }
    AZ(pthread_mutex_lock(&adm_mtx));
    if (find(name) != NULL) {
        AZ(pthread_mutex_unlock(&adm_mtx));
        sb_printf(err, "A program named '%s' is loaded already: discard it first.", name);
        return (-1);
    }
    if (closed) {
        sb_cat(err, "the policy engine is shutting down");
        p = NULL;
    } else if (path != NULL) {
        p = compile(path, true, err);
    } else {
        p = pol__prog_check_src(name, src, len, err);
        if (p != NULL && pol__decl_empty(pol__prog_cfg(p))) {
            sb_printf(err, "%s: declares no backend and there is no -b", pol__prog_path(p));
            pol__prog_unref(&p);
        }
    }
    if (p != NULL)
        (void)put(name, p);
    AZ(pthread_mutex_unlock(&adm_mtx));
    if (p == NULL)
        return (-1);
    log_msg(LOG_NOTICE, "policy: %s loaded as '%s'", path != NULL ? path : "inline source", name);
    return (0);
}

int
pol_prog_load(const char *name, const char *path, struct sb *err)
{
    AN(path);
    return (prog_add(name, path, NULL, 0, err));
}

int
pol_prog_inline(const char *name, const char *src, size_t len, struct sb *err)
{
    AN(src);
    return (prog_add(name, NULL, src, len, err));
}

int
pol_prog_use(const char *name, struct sb *err)
{
    struct pol_named **pp;

    AN(name);
    AZ(pthread_mutex_lock(&adm_mtx));
    pp = find(name);
    if (pp != NULL)
        pol__prog_install((*pp)->prog);
    AZ(pthread_mutex_unlock(&adm_mtx));
    if (pp == NULL) {
        sb_printf(err, "No program named '%.*s'.", POL_NAME_MAX + 1, name);
        return (-1);
    }
    log_msg(LOG_NOTICE, "policy: '%s' is now in use", name);
    return (0);
}

int
pol_prog_discard(const char *name, struct sb *err)
{
    struct pol_named **pp, *np = NULL;
    bool is_cur = false;

    AN(name);
    AZ(pthread_mutex_lock(&adm_mtx));
    pp = find(name);
    if (pp != NULL) {
        is_cur = pol__prog_is_cur((*pp)->prog);
        if (!is_cur) {
            np = *pp;
            *pp = np->next;
        }
    }
    AZ(pthread_mutex_unlock(&adm_mtx));
    if (pp == NULL) {
        sb_printf(err, "No program named '%.*s'.", POL_NAME_MAX + 1, name);
        return (-1);
    }
    if (is_cur) {
        sb_printf(err, "'%s' is the program in use: policy.use another one first.", name);
        return (-1);
    }
    named_free(&np);
    log_msg(LOG_NOTICE, "policy: '%s' discarded", name);
    return (0);
}

void
pol_prog_list(struct sb *out)
{
    unsigned refs;
    bool is_cur;

    AZ(pthread_mutex_lock(&adm_mtx));
    sb_printf(out, "%-10s %7s  %-20s %s\n", "State", "Workers", "Name", "File");
    for (struct pol_named *np = named; np != NULL; np = np->next) {
        OBJ_CHECK(np, POL_NAMED_MAGIC);
        is_cur = pol__prog_is_cur(np->prog);
        /*
         * Besides the worker states: ours and, when current, pol.c's.  A
         * worker building a state holds one more for a moment: a count,
         * not a promise.
         */
        refs = pol__prog_refs(np->prog) - 1 - (is_cur ? 1 : 0);
        sb_printf(out, "%-10s %7u  %-20s %s\n", is_cur ? "active" : "available", refs, np->name,
                  pol__prog_path(np->prog));
    }
    AZ(pthread_mutex_unlock(&adm_mtx));
}

unsigned
pol_prog_foreach(pol_prog_visit_f *fn, void *priv)
{
    struct pol_prog_info pi;
    unsigned n = 0;

    AN(fn);
    AZ(pthread_mutex_lock(&adm_mtx));
    for (struct pol_named *np = named; np != NULL; np = np->next) {
        OBJ_CHECK(np, POL_NAMED_MAGIC);
        memset(&pi, 0, sizeof pi);
        pi.name = np->name;
        pi.path = pol__prog_path(np->prog);
        pi.active = pol__prog_is_cur(np->prog);
        pi.is_inline = pol__prog_is_inline(np->prog);
        /* As pol_prog_list() counts them. */
        pi.workers = pol__prog_refs(np->prog) - 1 - (pi.active ? 1 : 0);
        pi.src = pol__prog_src(np->prog, &pi.len);
        pol__decl_info(pol__prog_cfg(np->prog), &pi);
        fn(&pi, priv);
        n++;
    }
    AZ(pthread_mutex_unlock(&adm_mtx));
    return (n);
}

struct label {
    struct be_snap *v;
    unsigned n;
};

static void
label_prog(const struct pol_prog_info *pi, void *priv)
{
    struct label *l = priv;
    size_t len, pl = strlen(pi->name);

    for (unsigned k = 0; k < pi->nbe; k++) {
        for (unsigned i = 0; i < l->n; i++) {
            if (l->v[i].be != pi->be[k])
                continue;
            len = strlen(l->v[i].progs);
            /* Names are at most POL_NAME_MAX: two always fit; more than fit keep the oldest. */
            if (len + pl + 2 > sizeof l->v[i].progs)
                continue;
            snprintf(l->v[i].progs + len, sizeof l->v[i].progs - len, "%s%s", len > 0 ? "," : "",
                     pi->name);
        }
    }
}

void
pol_prog_label(struct be_snap *v, unsigned n)
{
    struct label l = { v, n };

    for (unsigned i = 0; i < n; i++)
        v[i].progs[0] = '\0';
    (void)pol_prog_foreach(label_prog, &l);
}

void
pol__admin_fini(void)
{
    AZ(pthread_mutex_lock(&adm_mtx));
    while (named != NULL) {
        struct pol_named *np = named;
        named = np->next;
        named_free(&np);
    }
    closed = true;
    AZ(pthread_mutex_unlock(&adm_mtx));
}
