/*
 * The daemon configuration file: `name = value` lines setting parameters.
 * Loaded at startup on the main thread, before any other thread runs;
 * read again, without acting, by a reload (rld.c), which decides itself.
 * `listen = SPEC` lines, repeatable, add listen addresses as -a does.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "surogat/acc.h"
#include "surogat/cfg.h"
#include "surogat/defs.h"
#include "surogat/par.h"
#include "surogat/sb.h"

#define CFG_LINE_MAX 4096

static char *listens[CFG_LISTEN_MAX]; /* `listen = SPEC` values, in file order */
static unsigned nlistens;

/* A listen line is checked as it is read, so that its error names the file and line. */
static int
check_listen(const char *value, struct sb *err)
{
    char ebuf[512];
    struct acc_spec as;
    struct sb perr;
    int rv;

    sb_init(&perr, ebuf, sizeof ebuf);
    rv = acc_spec_parse(value, NULL, &as, &perr);
    acc_spec_clear(&as);
    if (rv != 0)
        sb_printf(err, "listen: %s", ebuf);
    return (rv);
}

int
cfg_add_listen(const char *value, struct sb *err)
{
    if (nlistens == CFG_LISTEN_MAX) {
        sb_printf(err, "more than %d listen lines", CFG_LISTEN_MAX);
        return (-1);
    }
    listens[nlistens] = strdup(value);
    AN(listens[nlistens]);
    nlistens++;
    return (0);
}

/* cfg_load()'s action for each line: set the parameter, or keep the listen address. */
static int
load_one(const char *name, const char *value, struct sb *err, void *priv)
{
    (void)priv;
    if (strcmp(name, "listen") == 0)
        return (cfg_add_listen(value, err));
    return (par_set(name, value, err));
}

const char *
cfg_listen(unsigned i)
{
    return (i < nlistens ? listens[i] : NULL);
}

void
cfg_fini(void)
{
    while (nlistens > 0)
        free(listens[--nlistens]);
}

static char *
trim(char *s)
{
    char *e;

    while (*s == ' ' || *s == '\t')
        s++;
    e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r' || e[-1] == '\n'))
        *--e = '\0';
    return (s);
}

/*
 * Unquote "..." in place, handling \" and \\.  A value not starting with
 * a quote loses its trailing comment.  NULL on an unterminated quote.
 */
static char *
parse_value(char *v)
{
    char *r, *w;

    if (*v != '"') {
        r = strchr(v, '#');
        if (r != NULL)
            *r = '\0';
        return (trim(v));
    }
    for (r = v + 1, w = v; *r != '\0' && *r != '"'; r++) {
        if (*r == '\\' && (r[1] == '"' || r[1] == '\\'))
            r++;
        *w++ = *r;
    }
    if (*r != '"')
        return (NULL);
    *w = '\0';
    r = trim(r + 1);
    if (*r != '\0' && *r != '#')
        return (NULL);
    return (v);
}

static int
parse_line(const char *path, unsigned lineno, char *line, cfg_line_f *fn, void *priv,
           struct sb *err)
{
    char *p, *eq, *name, *value;
    char ebuf[512];
    struct sb perr;

    p = trim(line);
    if (*p == '\0' || *p == '#')
        return (0);
    eq = strchr(p, '=');
    if (eq == NULL) {
        sb_printf(err, "%s:%u: expected 'name = value'", path, lineno);
        return (-1);
    }
    *eq = '\0';
    name = trim(p);
    value = parse_value(trim(eq + 1));
    if (*name == '\0') {
        sb_printf(err, "%s:%u: missing parameter name", path, lineno);
        return (-1);
    }
    if (value == NULL) {
        sb_printf(err, "%s:%u: unterminated or malformed quoted value", path, lineno);
        return (-1);
    }
    sb_init(&perr, ebuf, sizeof ebuf);
    if ((strcmp(name, "listen") == 0 && check_listen(value, &perr) != 0) ||
        fn(name, value, &perr, priv) != 0) {
        sb_printf(err, "%s:%u: %s", path, lineno, perr.buf);
        return (-1);
    }
    return (0);
}

int
cfg_parse(const char *path, cfg_line_f *fn, void *priv, struct sb *err)
{
    char *line = NULL;
    size_t cap = 0;
    unsigned lineno = 0;
    ssize_t len;
    FILE *f;
    int rv = 0;

    AN(path);
    AN(fn);
    f = fopen(path, "r");
    if (f == NULL) {
        sb_printf(err, "%s: %s", path, strerror(errno));
        return (-1);
    }
    while ((len = getline(&line, &cap, f)) >= 0) {
        lineno++;
        if (len > CFG_LINE_MAX) {
            sb_printf(err, "%s:%u: line too long", path, lineno);
            rv = -1;
            break;
        }
        if (strlen(line) != (size_t)len) {
            sb_printf(err, "%s:%u: NUL byte in line", path, lineno);
            rv = -1;
            break;
        }
        if (parse_line(path, lineno, line, fn, priv, err) != 0) {
            rv = -1;
            break;
        }
    }
    if (rv == 0 && ferror(f)) {
        sb_printf(err, "%s: read error", path);
        rv = -1;
    }
    free(line);
    fclose(f);
    return (rv);
}

int
cfg_load(const char *path, struct sb *err)
{
    return (cfg_parse(path, load_one, NULL, err));
}
