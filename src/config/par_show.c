/*
 * Parameters as text for people: param.show in varnishadm's two forms,
 * and `surogatd -x params`, from which scripts/gen_params.py makes the
 * man page and the sample configuration.  Read-only; any thread.
 */
#include "config.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "surogat/defs.h"
#include "surogat/par.h"
#include "surogat/sb.h"

#include "par_priv.h"

#define SHOW_NAME_WIDTH 29 /* varnishadm's column: the longest name and one blank */
#define SHOW_INDENT     "        "
#define SHOW_WRAP       64 /* doc columns after the indent, as varnishadm's */

/* The unit varnishadm shows in brackets; counts and text have none. */
static const char *
unit(const struct par_def *d)
{
    switch (d->type) {
    case PT_BYTES:
        return ("bytes");
    case PT_DURATION:
        return ("seconds");
    case PT_BOOL:
        return ("bool");
    default:
        return (NULL);
    }
}

/* "runtime", "restart" or "reload", as -x params and param.show -l say it. */
static const char *
flags_word(const struct par_def *d)
{
    if (d->flags & PAR_LIVE)
        return ("runtime");
    return ((d->flags & PAR_LOAD) ? "reload" : "restart");
}

/* The value and the default (free both), and whether they are the same. */
static bool
value_text(const struct par_def *d, char **vp, char **dp)
{
    *vp = par__text(d, false);
    *dp = par__text(d, true);
    return (strcmp(*vp, *dp) == 0);
}

/* Words of `text` on lines of at most SHOW_WRAP columns, each after the indent. */
static void
wrap(const char *text, struct sb *out)
{
    const char *p = text, *w;
    size_t col = 0, len;

    while (*p != '\0') {
        while (*p == ' ')
            p++;
        if (*p == '\0')
            break;
        w = p;
        len = strcspn(w, " ");
        if (col > 0 && col + 1 + len > SHOW_WRAP) {
            sb_cat(out, "\n");
            col = 0;
        }
        sb_printf(out, "%s%.*s", col == 0 ? SHOW_INDENT : " ", (int)len, w);
        col += (col == 0 ? 0 : 1) + len;
        p = w + len;
    }
    if (col > 0)
        sb_cat(out, "\n");
}

static void
show_one(const struct par_def *d, enum par_show how, struct sb *out)
{
    char *vbuf, *dbuf;
    bool dflt = value_text(d, &vbuf, &dbuf);
    const char *u = unit(d), *vn;

    if (how == PAR_SHOW_SHORT) {
        sb_printf(out, "%-*s %s", SHOW_NAME_WIDTH, d->name, vbuf[0] != '\0' ? vbuf : "\"\"");
        if (u != NULL)
            sb_printf(out, " [%s]", u);
        sb_cat(out, dflt ? " (default)\n" : "\n");
        free(vbuf);
        free(dbuf);
        return;
    }
    sb_printf(out, "%s\n" SHOW_INDENT "Value is: %s", d->name, vbuf[0] != '\0' ? vbuf : "\"\"");
    if (u != NULL)
        sb_printf(out, " [%s]", u);
    sb_cat(out, dflt ? " (default)\n" : "\n");
    if (!dflt)
        sb_printf(out, SHOW_INDENT "Default is: %s\n", dbuf[0] != '\0' ? dbuf : "\"\"");
    free(vbuf);
    free(dbuf);
    if (d->min != NULL)
        sb_printf(out, SHOW_INDENT "Minimum is: %s\n", d->min);
    if (d->max != NULL)
        sb_printf(out, SHOW_INDENT "Maximum is: %s\n", d->max);
    sb_printf(out, SHOW_INDENT "Flags: %s\n", flags_word(d));
    vn = par__vname(d);
    if (vn != NULL && strcmp(vn, d->name) != 0)
        sb_printf(out, SHOW_INDENT "Varnish name: %s\n", vn);
    else if (vn != NULL)
        sb_cat(out, SHOW_INDENT "Varnish name: the same\n");
    sb_cat(out, "\n");
    wrap(d->doc, out);
    if (d->type == PT_FEATURE) {
        sb_cat(out, "\n");
        par__feature_doc(out, SHOW_INDENT "   ");
    }
    sb_cat(out, "\n");
}

int
par_show(const char *name, enum par_show how, struct sb *out)
{
    const struct par_def *d = par__find(name);

    if (d == NULL)
        return (-1);
    show_one(d, how, out);
    return (0);
}

void
par_show_all(enum par_show how, bool only_changed, struct sb *out)
{
    char *vbuf, *dbuf;
    bool same;

    for (size_t i = 0; i < par__ndefs; i++) {
        if (only_changed) {
            same = value_text(&par__defs[i], &vbuf, &dbuf);
            free(vbuf);
            free(dbuf);
            if (same)
                continue;
        }
        show_one(&par__defs[i], how, out);
    }
}

void
par_dump_doc(struct sb *out)
{
    const struct par_def *d;
    const char *vn;

    for (size_t i = 0; i < par__ndefs; i++) {
        d = &par__defs[i];
        sb_printf(out, "%s\n\tType: %s\n\tDefault: %s\n", d->name, par__type_name[d->type],
                  d->def[0] == '\0' ? "(empty)" : d->def);
        if (d->min != NULL)
            sb_printf(out, "\tMinimum: %s\n", d->min);
        if (d->max != NULL)
            sb_printf(out, "\tMaximum: %s\n", d->max);
        sb_printf(out, "\tFlags: %s\n", flags_word(d));
        vn = par__vname(d);
        if (vn != NULL)
            sb_printf(out, "\tVarnish: %s\n", vn);
        sb_printf(out, "\n\t%s\n\n", d->doc);
    }
}
