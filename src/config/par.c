/*
 * The parameter table: defaults, validation and text conversion, all
 * generated from tbl/params.h so that code, -x params and the man page
 * cannot disagree.
 *
 * Setting happens on the main thread at startup and on the CLI thread at
 * runtime; readers take no lock (see par.h).  A replaced STRING value is
 * not freed at once, since a worker may still be reading the old pointer:
 * it goes on a retired list that par_fini() frees.  String parameters
 * change rarely, so the list stays short.
 */
#include "config.h"

#include <errno.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "surogat/defs.h"
#include "surogat/num.h"
#include "surogat/par.h"
#include "surogat/sb.h"

struct par par;

enum par_type { PT_UINT, PT_BYTES, PT_DURATION, PT_BOOL, PT_STRING };

struct par_def {
    const char *name;
    enum par_type type;
    const char *def, *min, *max;
    unsigned flags;
    const char *doc;
    size_t off;
};

static const struct par_def par_defs[] = {
#define PARAM(nm, ty, de, mi, ma, fl, dc) \
    { #nm, PT_##ty, de, mi, ma, fl, dc, offsetof(struct par, nm) },
#include "surogat/tbl/params.h"
};

static const char *const type_name[] = {
    [PT_UINT] = "count", [PT_BYTES] = "bytes", [PT_DURATION] = "seconds",
    [PT_BOOL] = "bool",  [PT_STRING] = "string",
};

struct retired {
    struct retired *next;
    char *str;
};
static struct retired *retired;

static const struct par_def *
find_def(const char *name)
{
    for (size_t i = 0; i < ARRAY_LEN(par_defs); i++)
        if (strcmp(par_defs[i].name, name) == 0)
            return (&par_defs[i]);
    return (NULL);
}

/* Parse `s` as d's type into a double for bound checks; strings compare nothing. */
static int
parse_number(const struct par_def *d, const char *s, double *out)
{
    unsigned u;
    uint64_t b;

    switch (d->type) {
    case PT_UINT:
        if (num_uint(s, &u) != 0)
            return (-1);
        *out = u;
        return (0);
    case PT_BYTES:
        if (num_bytes(s, &b) != 0)
            return (-1);
        *out = (double)b;
        return (0);
    case PT_DURATION:
        return (num_duration(s, out));
    case PT_BOOL:
    case PT_STRING:
        *out = 0;
        return (0);
    }
    SRG_WRONG("bad parameter type");
}

static int
set_def(const struct par_def *d, const char *value, struct sb *err)
{
    char *field = (char *)&par + d->off;
    double v, lim;
    bool bv;
    char *copy;

    if (d->type == PT_BOOL) {
        if (num_bool(value, &bv) != 0) {
            sb_printf(err, "%s: '%s' is not on/off", d->name, value);
            return (-1);
        }
        memcpy(field, &bv, sizeof bv);
        return (0);
    }
    if (d->type == PT_STRING) {
        struct retired *r;
        char *old;

        copy = strdup(value);
        AN(copy);
        memcpy(&old, field, sizeof old);
        if (old != NULL) {
            r = malloc(sizeof *r);
            AN(r);
            r->str = old;
            r->next = retired;
            retired = r;
        }
        memcpy(field, &copy, sizeof copy);
        return (0);
    }
    if (parse_number(d, value, &v) != 0) {
        sb_printf(err, "%s: '%s' is not a valid %s value", d->name, value, type_name[d->type]);
        return (-1);
    }
    if (d->min != NULL) {
        AZ(parse_number(d, d->min, &lim));
        if (v < lim) {
            sb_printf(err, "%s: %s is below the minimum %s", d->name, value, d->min);
            return (-1);
        }
    }
    if (d->max != NULL) {
        AZ(parse_number(d, d->max, &lim));
        if (v > lim) {
            sb_printf(err, "%s: %s is above the maximum %s", d->name, value, d->max);
            return (-1);
        }
    }
    switch (d->type) {
    case PT_UINT: {
        unsigned u = (unsigned)v;
        memcpy(field, &u, sizeof u);
        break;
    }
    case PT_BYTES: {
        uint64_t b;
        AZ(num_bytes(value, &b));
        memcpy(field, &b, sizeof b);
        break;
    }
    case PT_DURATION:
        memcpy(field, &v, sizeof v);
        break;
    default:
        SRG_WRONG("bad parameter type");
    }
    return (0);
}

void
par_init(void)
{
    char ebuf[256];
    struct sb err;

    sb_init(&err, ebuf, sizeof ebuf);
    for (size_t i = 0; i < ARRAY_LEN(par_defs); i++)
        AZ(set_def(&par_defs[i], par_defs[i].def, &err));
}

void
par_fini(void)
{
    struct retired *r;
    char *str;

    while ((r = retired) != NULL) {
        retired = r->next;
        free(r->str);
        free(r);
    }
    for (size_t i = 0; i < ARRAY_LEN(par_defs); i++) {
        if (par_defs[i].type != PT_STRING)
            continue;
        memcpy(&str, (char *)&par + par_defs[i].off, sizeof str);
        free(str);
        str = NULL;
        memcpy((char *)&par + par_defs[i].off, &str, sizeof str);
    }
}

int
par_set(const char *name, const char *value, struct sb *err)
{
    const struct par_def *d;

    AN(name);
    AN(value);
    d = find_def(name);
    if (d == NULL) {
        sb_printf(err, "unknown parameter '%s'", name);
        return (-1);
    }
    return (set_def(d, value, err));
}

static void
format_value(const struct par_def *d, struct sb *out)
{
    const char *field = (const char *)&par + d->off;

    switch (d->type) {
    case PT_UINT: {
        unsigned u;
        memcpy(&u, field, sizeof u);
        sb_printf(out, "%u", u);
        break;
    }
    case PT_BYTES: {
        uint64_t b;
        memcpy(&b, field, sizeof b);
        sb_printf(out, "%llu", (unsigned long long)b);
        break;
    }
    case PT_DURATION: {
        double v;
        memcpy(&v, field, sizeof v);
        char tmp[40];
        size_t n;
        /* num_duration() keeps microseconds, so six decimals say it all. */
        n = (size_t)snprintf(tmp, sizeof tmp, "%.6f", v);
        while (n > 1 && tmp[n - 1] == '0')
            tmp[--n] = '\0';
        if (tmp[n - 1] == '.')
            tmp[--n] = '\0';
        sb_cat(out, tmp);
        break;
    }
    case PT_BOOL: {
        bool b;
        memcpy(&b, field, sizeof b);
        sb_cat(out, b ? "on" : "off");
        break;
    }
    case PT_STRING: {
        const char *s;
        memcpy(&s, field, sizeof s);
        sb_cat(out, s);
        break;
    }
    }
}

int
par_get(const char *name, struct sb *out)
{
    const struct par_def *d = find_def(name);

    if (d == NULL)
        return (-1);
    format_value(d, out);
    return (0);
}

bool
par_is_live(const char *name)
{
    const struct par_def *d = find_def(name);

    return (d != NULL && (d->flags & PAR_LIVE) != 0);
}

void
par_dump_values(struct sb *out)
{
    for (size_t i = 0; i < ARRAY_LEN(par_defs); i++) {
        sb_printf(out, "%-32s ", par_defs[i].name);
        format_value(&par_defs[i], out);
        sb_cat(out, "\n");
    }
}

void
par_dump_doc(struct sb *out)
{
    const struct par_def *d;

    for (size_t i = 0; i < ARRAY_LEN(par_defs); i++) {
        d = &par_defs[i];
        sb_printf(out, "%s\n\tType: %s\n\tDefault: %s\n", d->name, type_name[d->type],
                  d->def[0] == '\0' ? "(empty)" : d->def);
        if (d->min != NULL)
            sb_printf(out, "\tMinimum: %s\n", d->min);
        if (d->max != NULL)
            sb_printf(out, "\tMaximum: %s\n", d->max);
        sb_printf(out, "\tFlags: %s\n\n\t%s\n\n",
                  (d->flags & PAR_LIVE) ? "runtime" : "restart", d->doc);
    }
}
