/*
 * The parameter table: defaults, validation and text conversion, all
 * generated from tbl/params.h so that code, -x params and the man page
 * cannot disagree; Varnish's names come from tbl/vparams.h.
 *
 * Setting happens on the main thread at startup and on reload, and on the
 * CLI thread at runtime; readers take no lock (see par.h).  A replaced
 * STRING value is not freed at once, since a worker may still be reading
 * the old pointer: it goes on a retired list that par_fini() frees.
 * String parameters change rarely, so the list stays short.
 */
#include "config.h"

#include <errno.h>
#include <float.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "surogat/defs.h"
#include "surogat/num.h"
#include "surogat/par.h"
#include "surogat/sb.h"

#include "par_priv.h"

struct par par;

const struct par_def par__defs[] = {
#define PARAM(nm, ty, de, mi, ma, fl, dc) \
    { #nm, PT_##ty, de, mi, ma, fl, dc, offsetof(struct par, nm) },
#include "surogat/tbl/params.h"
};
const size_t par__ndefs = ARRAY_LEN(par__defs);

const char *const par__type_name[] = {
    [PT_UINT] = "count", [PT_BYTES] = "bytes",   [PT_DURATION] = "seconds",
    [PT_BOOL] = "bool",  [PT_STRING] = "string", [PT_FEATURE] = "feature",
};

static const struct {
    const char *vname, *name;
} vparams[] = {
#define VPARAM(v, s) { #v, #s },
#include "surogat/tbl/vparams.h"
};

struct retired {
    struct retired *next;
    char *str;
};
/*
 * Under retired_mtx: the main thread (a reload) and the CLI thread
 * (param.set) may both replace a string.
 */
static pthread_mutex_t retired_mtx = PTHREAD_MUTEX_INITIALIZER;
static struct retired *retired;

static const struct par_def *
find_native(const char *name)
{
    for (size_t i = 0; i < par__ndefs; i++)
        if (strcmp(par__defs[i].name, name) == 0)
            return (&par__defs[i]);
    return (NULL);
}

const struct par_def *
par__find(const char *name)
{
    const struct par_def *d = find_native(name);

    if (d != NULL)
        return (d);
    for (size_t i = 0; i < ARRAY_LEN(vparams); i++)
        if (strcmp(vparams[i].vname, name) == 0)
            return (find_native(vparams[i].name));
    return (NULL);
}

const char *
par__vname(const struct par_def *d)
{
    for (size_t i = 0; i < ARRAY_LEN(vparams); i++)
        if (strcmp(vparams[i].name, d->name) == 0)
            return (vparams[i].vname);
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
    case PT_FEATURE:
        *out = 0;
        return (0);
    }
    SRG_WRONG("bad parameter type");
}

/* A string field of base takes its own copy of value; the old one is retired. */
static void
set_string(const struct par_def *d, struct par *base, const char *value)
{
    char *field = (char *)base + d->off, *copy, *old;
    struct retired *r;

    copy = strdup(value);
    AN(copy);
    memcpy(&old, field, sizeof old);
    if (old != NULL) {
        r = malloc(sizeof *r);
        AN(r);
        r->str = old;
        AZ(pthread_mutex_lock(&retired_mtx));
        r->next = retired;
        retired = r;
        AZ(pthread_mutex_unlock(&retired_mtx));
    }
    memcpy(field, &copy, sizeof copy);
}

/*
 * Check value against d and store it into base (`par`, or a scratch copy
 * for par_check()).  `given` is the name the caller used, alias or not,
 * so that the reason speaks of what was written.
 */
static int
set_def(const struct par_def *d, const char *given, struct par *base, const char *value,
        struct sb *err)
{
    char *field = (char *)base + d->off;
    double v, lim;
    unsigned bits;
    bool bv;

    switch (d->type) {
    case PT_BOOL:
        if (num_bool(value, &bv) != 0) {
            sb_printf(err, "%s: '%s' is not on/off", given, value);
            return (-1);
        }
        memcpy(field, &bv, sizeof bv);
        return (0);
    case PT_STRING:
        set_string(d, base, value);
        return (0);
    case PT_FEATURE:
        if (par__feature_parse(given, value, &bits, err) != 0)
            return (-1);
        memcpy(field, &bits, sizeof bits);
        return (0);
    default:
        break;
    }
    if (parse_number(d, value, &v) != 0) {
        sb_printf(err, "%s: '%s' is not a valid %s value", given, value, par__type_name[d->type]);
        return (-1);
    }
    if (d->min != NULL) {
        AZ(parse_number(d, d->min, &lim));
        if (v < lim) {
            sb_printf(err, "%s: %s is below the minimum %s", given, value, d->min);
            return (-1);
        }
    }
    if (d->max != NULL) {
        AZ(parse_number(d, d->max, &lim));
        if (v > lim) {
            sb_printf(err, "%s: %s is above the maximum %s", given, value, d->max);
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
    for (size_t i = 0; i < par__ndefs; i++)
        AZ(set_def(&par__defs[i], par__defs[i].name, &par, par__defs[i].def, &err));
}

static void
free_strings(struct par *base)
{
    char *str;

    for (size_t i = 0; i < par__ndefs; i++) {
        if (par__defs[i].type != PT_STRING)
            continue;
        memcpy(&str, (char *)base + par__defs[i].off, sizeof str);
        free(str);
        str = NULL;
        memcpy((char *)base + par__defs[i].off, &str, sizeof str);
    }
}

void
par_fini(void)
{
    struct retired *r;

    AZ(pthread_mutex_lock(&retired_mtx));
    while ((r = retired) != NULL) {
        retired = r->next;
        free(r->str);
        free(r);
    }
    AZ(pthread_mutex_unlock(&retired_mtx));
    free_strings(&par);
}

/* par__find(), or NULL having said so in err. */
static const struct par_def *
find_or_say(const char *name, struct sb *err)
{
    const struct par_def *d;

    AN(name);
    d = par__find(name);
    if (d == NULL)
        sb_printf(err, "unknown parameter '%s'", name);
    return (d);
}

int
par_set(const char *name, const char *value, struct sb *err)
{
    const struct par_def *d = find_or_say(name, err);

    AN(value);
    return (d != NULL ? set_def(d, name, &par, value, err) : -1);
}

int
par_reset(const char *name, struct sb *err)
{
    const struct par_def *d = find_or_say(name, err);

    if (d == NULL)
        return (-1);
    AZ(set_def(d, name, &par, d->def, err));
    return (0);
}

int
par_check(const char *name, const char *value, struct sb *canon, struct sb *err)
{
    const struct par_def *d = find_or_say(name, err);
    struct par scratch;
    int rv;

    AN(value);
    if (d == NULL)
        return (-1);
    /* A zeroed copy holds no string, so nothing of `par` is retired. */
    memset(&scratch, 0, sizeof scratch);
    rv = set_def(d, name, &scratch, value, err);
    if (rv == 0 && canon != NULL)
        par__format(d, &scratch, canon);
    free_strings(&scratch);
    return (rv);
}

void
par__format(const struct par_def *d, const struct par *base, struct sb *out)
{
    const char *field = (const char *)base + d->off;

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
        sb_cat(out, s != NULL ? s : "");
        break;
    }
    case PT_FEATURE: {
        unsigned bits;
        memcpy(&bits, field, sizeof bits);
        par__feature_format(bits, out);
        break;
    }
    }
}

void
par__format_default(const struct par_def *d, struct sb *out)
{
    char ebuf[256];
    struct sb err;
    struct par scratch;

    memset(&scratch, 0, sizeof scratch);
    sb_init(&err, ebuf, sizeof ebuf);
    AZ(set_def(d, d->name, &scratch, d->def, &err));
    par__format(d, &scratch, out);
    free_strings(&scratch);
}

char *
par__text(const struct par_def *d, bool dflt)
{
    size_t cap = 256;
    struct sb sb;
    char *buf;

    /* A string parameter may be of any length (-p sets it): grow until it fits. */
    for (;;) {
        buf = malloc(cap);
        AN(buf);
        sb_init(&sb, buf, cap);
        if (dflt)
            par__format_default(d, &sb);
        else
            par__format(d, &par, &sb);
        if (sb_ok(&sb))
            return (buf);
        free(buf);
        cap *= 4;
    }
}

char *
par_text(const char *name, bool dflt)
{
    const struct par_def *d = par__find(name);

    return (d != NULL ? par__text(d, dflt) : NULL);
}

int
par_get(const char *name, struct sb *out)
{
    const struct par_def *d = par__find(name);

    if (d == NULL)
        return (-1);
    par__format(d, &par, out);
    return (0);
}

int
par_default(const char *name, struct sb *out)
{
    const struct par_def *d = par__find(name);

    if (d == NULL)
        return (-1);
    par__format_default(d, out);
    return (0);
}

const char *
par_name(const char *name)
{
    const struct par_def *d = par__find(name);

    return (d != NULL ? d->name : NULL);
}

int
par_flags(const char *name)
{
    const struct par_def *d = par__find(name);

    return (d != NULL ? (int)d->flags : -1);
}

bool
par_is_live(const char *name)
{
    return (par_flags(name) > 0 && (par_flags(name) & PAR_LIVE) != 0);
}
