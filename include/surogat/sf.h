/*
 * sf -- Structured Field Values for HTTP (RFC 8941): a strict parser of
 * Dictionaries, the syntax RFC 9213 gives targeted cache-control fields
 * such as CDN-Cache-Control.
 *
 * Pure: no allocation, no I/O, no locks.  The members it returns point
 * into the field values it was given, so they live no longer than those
 * bytes.
 *
 * Strict, as RFC 8941 section 4.2 requires: anything that is not a
 * Dictionary fails the whole field and nothing is repaired -- upper case
 * in a key, a trailing or doubled comma, a bare item of no known type, an
 * Integer of more than 15 digits, a Decimal with more than 3 fraction
 * digits, a String with a control character or an escape other than \"
 * and \\, a Byte Sequence with a character outside base64.  The types are
 * RFC 8941's: RFC 9651's Date (@) and Display String (%"") are errors.
 *
 * Several field lines are one Dictionary, as if joined with ", " (RFC
 * 8941 section 4.2), with one restriction: a String may not run on from
 * one field line into the next (it could not point into the field
 * values); such a field fails to parse.
 */
#ifndef SUROGAT_SF_H
#define SUROGAT_SF_H

#include <stdbool.h>
#include <stdint.h>

#include "surogat/http.h"

enum sf_type {
    SF_INTEGER,
    SF_DECIMAL,
    SF_STRING,
    SF_TOKEN,
    SF_BYTES,
    SF_BOOLEAN,
    SF_INNER_LIST,
};

/* One Dictionary member.  Its parameters are checked and counted, not returned. */
struct sf_member {
    struct txt key; /* lcalpha / "*", then lcalpha DIGIT "_" "-" "." "*" */
    enum sf_type type;
    /*
     * SF_INTEGER: the value, within +-999,999,999,999,999.  SF_DECIMAL:
     * the value times 1000.  SF_BOOLEAN: 0 or 1.  SF_INNER_LIST: how
     * many items it holds (they are checked, not returned).
     */
    int64_t num;
    /*
     * SF_STRING: the bytes between the quotes, escapes as sent (see
     * escaped).  SF_TOKEN: the token.  SF_BYTES: the base64 text
     * between the colons, not decoded.
     */
    struct txt str;
    bool escaped;     /* SF_STRING: holds \" or \\, so str is not the value byte for byte */
    unsigned nparams; /* parameters on the member (for an inner list, on the list itself) */
};

#define SF_INTEGER_MAX INT64_C(999999999999999)

enum sf_status {
    SF_OK,         /* a Dictionary of *n members; 0 for an empty field */
    SF_E_SYNTAX,   /* not a Dictionary: the field must be ignored whole */
    SF_E_TOO_MANY, /* a Dictionary of more than `max` distinct keys */
};

/*
 * Parse the field lines v[0 .. nv) (their values, without the name) as
 * one Dictionary (RFC 8941 section 4.2.2).  Members land in m[0 .. *n)
 * in the order their keys first appear; a key that comes again replaces
 * its value there (the last one wins).  On failure *n and m are
 * unspecified.
 */
enum sf_status sf_dict_parse(const struct txt *v, unsigned nv, struct sf_member *m, unsigned max,
                             unsigned *n);
/* "Integer", "Decimal" ...: for logs and messages. */
const char *sf_type_name(enum sf_type t);

#endif
