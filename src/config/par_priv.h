/*
 * par_priv -- shared between par.c (the table, setting and getting),
 * par_show.c (param.show and -x params) and par_feature.c (the values of
 * the feature parameter).
 */
#ifndef SUROGAT_PAR_PRIV_H
#define SUROGAT_PAR_PRIV_H

#include <stdbool.h>
#include <stddef.h>

struct par;
struct sb;

enum par_type { PT_UINT, PT_BYTES, PT_DURATION, PT_BOOL, PT_STRING, PT_FEATURE };

struct par_def {
    const char *name;
    enum par_type type;
    const char *def, *min, *max;
    unsigned flags;
    const char *doc;
    size_t off;
};

extern const struct par_def par__defs[];
extern const size_t par__ndefs;
extern const char *const par__type_name[]; /* "count", "bytes", "seconds" ... */

/* A parameter by its name or its Varnish alias; NULL when unknown. */
const struct par_def *par__find(const char *name);
/* Varnish's name for d (tbl/vparams.h), or NULL when Varnish has none. */
const char *par__vname(const struct par_def *d);
/* d's value in *base (`par`, or a scratch copy) as text. */
void par__format(const struct par_def *d, const struct par *base, struct sb *out);
/* d's default as par__format() prints it. */
void par__format_default(const struct par_def *d, struct sb *out);
/* d's value in `par`, or its default, as text however long: malloc'd (par_text()). */
char *par__text(const struct par_def *d, bool dflt);

/* par_feature.c.  0 with the bits, or -1 with the reason in err (named after `name`). */
int par__feature_parse(const char *name, const char *value, unsigned *bits, struct sb *err);
void par__feature_format(unsigned bits, struct sb *out); /* "+a,+b", or "none" */
/* One line per feature: its name, on or off, and why it is fixed so. */
void par__feature_doc(struct sb *out, const char *indent);

#endif
