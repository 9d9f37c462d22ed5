/*
 * par -- the runtime parameters of tbl/params.h.
 *
 * `par` is read everywhere without a lock: each field is one aligned word
 * (strings are pointers replaced whole, never edited in place), and a
 * reader that sees the old value for a moment is harmless.
 *
 * Every function taking a parameter name also takes Varnish's name for
 * it (tbl/vparams.h): "first_byte_timeout" is backend_first_byte_timeout.
 */
#ifndef SUROGAT_PAR_H
#define SUROGAT_PAR_H

#include <stdbool.h>
#include <stdint.h>

struct sb;

typedef unsigned par_UINT;
typedef uint64_t par_BYTES;
typedef double par_DURATION;
typedef bool par_BOOL;
typedef const char *par_STRING;
typedef unsigned par_FEATURE; /* a bit per row of tbl/features.h */

/* A parameter is PAR_LIVE or PAR_RESTART, and may also be PAR_LOAD. */
enum par_flags {
    PAR_LIVE = 1,    /* param.set and a reload change it, and it takes effect at once */
    PAR_RESTART = 2, /* read at startup only: a reload reports a change, and leaves it */
    /*
     * Also read when the policy or the certificates are loaded: a reload
     * sets it before it loads them, even when PAR_RESTART keeps it from
     * param.set, and puts it back when they fail.
     */
    PAR_LOAD = 4,
};

enum par_feature {
#define FEATURE(name, state, why) PAR_FEAT_##name,
#include "surogat/tbl/features.h"
    PAR_FEAT__N
};

struct par {
#define PARAM(name, type, ...) par_##type name;
#include "surogat/tbl/params.h"
};

extern struct par par;

void par_init(void); /* every parameter to its default */
void par_fini(void); /* free the string values; no thread may read `par` afterwards */
/*
 * Set one parameter from text, checked against its type and bounds.
 * 0, or -1 with a one-line reason written to err.
 */
int par_set(const char *name, const char *value, struct sb *err);
/* Set one parameter back to its default (param.reset).  0, or -1 for an unknown name. */
int par_reset(const char *name, struct sb *err);
/*
 * Check a value as par_set() would, without setting anything.  0 with
 * the value as par_get() would then print it appended to canon (which may
 * be NULL), or -1 with the reason in err.
 */
int par_check(const char *name, const char *value, struct sb *canon, struct sb *err);
/* Current value as text; -1 for an unknown name. */
int par_get(const char *name, struct sb *out);
/* The default as par_get() would print it; -1 for an unknown name. */
int par_default(const char *name, struct sb *out);
/*
 * The value (dflt: the default) as par_get() prints it, however long:
 * malloc'd, the caller frees it.  NULL for an unknown name.
 */
char *par_text(const char *name, bool dflt);
/* The surogat name of a parameter or of its Varnish alias; NULL when unknown. */
const char *par_name(const char *name);
/* Its enum par_flags, or -1 for an unknown name. */
int par_flags(const char *name);
bool par_is_live(const char *name); /* false also for unknown names */

/* param.show's forms, modelled on varnishadm's. */
enum par_show {
    PAR_SHOW_SHORT, /* "name value [unit]", "(default)" when it is */
    PAR_SHOW_LONG,  /* name, value, default, bounds, flags, Varnish name, the doc wrapped */
};
/* One parameter; -1 for an unknown name (nothing written). */
int par_show(const char *name, enum par_show how, struct sb *out);
/* Every parameter in table order; only_changed: those not at their default. */
void par_show_all(enum par_show how, bool only_changed, struct sb *out);
/* `surogatd -x params`: the table as text, one paragraph per parameter. */
void par_dump_doc(struct sb *out);

#endif
