/*
 * par -- the runtime parameters of tbl/params.h.
 *
 * `par` is read everywhere without a lock: each field is one aligned word
 * (strings are pointers replaced whole, never edited in place), and a
 * reader that sees the old value for a moment is harmless.
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

enum par_flags {
    PAR_LIVE = 1,    /* takes effect at once when changed at runtime */
    PAR_RESTART = 2, /* read at startup only */
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
/* Current value as text; -1 for an unknown name. */
int par_get(const char *name, struct sb *out);
bool par_is_live(const char *name); /* false also for unknown names */
/* `surogatd -x params`: the table as text, one paragraph per parameter. */
void par_dump_doc(struct sb *out);
/* Every parameter with its value, one "name value" line each. */
void par_dump_values(struct sb *out);

#endif
