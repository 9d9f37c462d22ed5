/*
 * cc -- Cache-Control directives (RFC 9111 section 5.2, RFC 5861, RFC 8246)
 * and their targeted variants CDN-Cache-Control (RFC 9213) and
 * Surrogate-Control (W3C Edge Architecture 1.0), parsed into one struct.
 *
 * Pure functions: no allocation, no I/O, no locks.  A struct cc points into
 * the header values of the struct http it was parsed from (the two field
 * lists), so it lives no longer than those bytes.
 *
 * Two syntaxes.  CDN-Cache-Control, like every targeted field of RFC 9213,
 * is an RFC 8941 Dictionary, read strictly (cc_parse_targeted): a field
 * that does not parse, or a known directive with a value of the wrong
 * type, is ignored whole.  Cache-Control and Surrogate-Control use the
 * list syntax of RFC 9111 (cc_parse) -- Surrogate-Control because the Edge
 * Architecture's own forms, max-age=N+M and directives targeted with
 * ";device", are not Structured Fields, and RFC 9213 does not cover it.
 *
 * The list syntax is lenient where RFC 9111 asks recipients to be (quoted
 * delta-seconds, upper case names, odd spacing, unknown directives with any
 * value) and conservative where input is contradictory.  The rules, in one
 * place, because every caller depends on them:
 *
 *  - Every field line with the name is parsed, in order, as one list
 *    (RFC 9110 section 5.3).  A quoted string never runs on into the next
 *    field line.
 *  - Names compare case-insensitively; OWS around "=" is tolerated.
 *  - delta-seconds is 1*DIGIT, optionally quoted (section 5.2 says senders
 *    should not quote, recipients should accept it); values above 2^31 are
 *    clamped to CC_DELTA_MAX (section 1.2.2).
 *  - An invalid directive (bad or missing value, or a directive repeated
 *    with a different value, section 4.2.1) takes its most restrictive
 *    meaning and sets CC_INVALID:
 *      max-age, s-maxage          0: stale at once (section 4.2.1 allows
 *                                 "consider it stale" for both cases)
 *      stale-while-revalidate,
 *      stale-if-error             0: no stale serving
 *      request max-stale          absent: no staleness accepted
 *      request min-fresh          CC_DELTA_MAX: nothing is fresh enough
 *      no-cache="..", private=".." (unterminated quote, quoted-pair,
 *                                 two different lists, or with the bare
 *                                 form) the unqualified form: the whole
 *                                 response.  An empty list ("") reads as
 *                                 bare too, without CC_INVALID.
 *  - A restrictive flag directive with a stray value (no-store=1,
 *    must-revalidate="x") still counts; a permissive one (public=1,
 *    immutable=x, must-understand=x) is ignored and sets CC_INVALID.
 *  - Unknown directives are ignored, whatever their value.
 *  - An element that does not parse (max-age 60, "=x", a quote without
 *    its end) sets CC_MALFORMED; the rest of the list still counts.
 */
#ifndef SUROGAT_CC_H
#define SUROGAT_CC_H

#include <stdbool.h>
#include <stdint.h>

#include "surogat/http.h"

struct sb;

/* 2^31: the value a cache must assume for larger delta-seconds (RFC 9111 section 1.2.2). */
#define CC_DELTA_MAX INT64_C(2147483648)
#define CC_ABSENT    (-1)

enum cc_flag {
    CC_NO_STORE = 1u << 0,
    CC_NO_CACHE = 1u << 1,        /* unqualified: validate the whole response */
    CC_NO_CACHE_FIELDS = 1u << 2, /* no-cache="a, b": only those fields; see no_cache_fields */
    CC_PRIVATE = 1u << 3,         /* unqualified: a shared cache must not store it */
    CC_PRIVATE_FIELDS = 1u << 4,  /* private="a, b": store without those fields */
    CC_PUBLIC = 1u << 5,
    CC_MUST_REVALIDATE = 1u << 6,
    CC_PROXY_REVALIDATE = 1u << 7,
    CC_NO_TRANSFORM = 1u << 8,
    CC_MUST_UNDERSTAND = 1u << 9,
    CC_IMMUTABLE = 1u << 10,      /* RFC 8246 */
    CC_ONLY_IF_CACHED = 1u << 11, /* request */
    CC_MAX_STALE_ANY = 1u << 12,  /* request max-stale without a value */
    CC_INVALID = 1u << 13,        /* some directive invalid or conflicting (see above) */
    CC_MALFORMED = 1u << 14,      /* some list element did not parse and was skipped */
    CC_TARGETED = 1u << 15,       /* from a targeted field: Expires is to be ignored */
    CC_PRAGMA = 1u << 16,         /* request no-cache came from Pragma: no-cache */
};

struct cc {
    unsigned flags; /* enum cc_flag */
    /* Seconds, 0..CC_DELTA_MAX, or CC_ABSENT. */
    int64_t max_age;
    int64_t s_maxage;
    int64_t swr;       /* stale-while-revalidate (RFC 5861 section 3) */
    int64_t sie;       /* stale-if-error (RFC 5861 section 4), request or response */
    int64_t max_stale; /* request; CC_DELTA_MAX with CC_MAX_STALE_ANY */
    int64_t min_fresh; /* request */
    /*
     * The text between the quotes of no-cache="..." and private="..."
     * (or the bare token of no-cache=Set-Cookie), valid while the
     * CC_*_FIELDS flag is set.  Test names with cc_field_listed().
     */
    struct txt no_cache_fields;
    struct txt private_fields;
    const char *src; /* the field name the directives came from, for logs; NULL if none */
};

enum cc_status {
    CC_NONE,     /* no such field, or only empty list elements: *out is cc_init() */
    CC_OK,       /* at least one element, all well-formed */
    CC_E_SYNTAX, /* cc_parse: some element malformed (CC_MALFORMED); the others were applied.
                    cc_parse_targeted: not a Dictionary, ignored: *out is cc_init() */
    CC_E_TYPE,   /* cc_parse_targeted: a known directive of the wrong type, ignored likewise */
};

/* Every value CC_ABSENT, no flags. */
void cc_init(struct cc *out);
/*
 * Parse every field named `name` in hp into *out (cc_init first).  With
 * name "Surrogate-Control", "max-age=N+M" (the Edge Architecture
 * extension) reads as max-age=N; content="..." and no-store-remote are
 * unknown here, hence ignored.
 */
enum cc_status cc_parse(const struct http *hp, const char *name, struct cc *out);
/*
 * Parse every field named `name` as a targeted field (RFC 9213 section
 * 2.1): one RFC 8941 Dictionary over all its field lines (sf.h), whose
 * members are cache directives.  The types RFC 9213 infers are required
 * of the known directives: max-age, s-maxage, stale-while-revalidate,
 * stale-if-error and min-fresh an Integer >= 0 (clamped to CC_DELTA_MAX);
 * max-stale that or Boolean true; no-cache and private Boolean true or a
 * String listing field names; every other known directive Boolean true
 * (no-store=?0 is an error, not "store").  Unknown directives may have
 * any value; parameters are ignored.  A repeated directive takes its last
 * value, as Dictionary keys do.
 * CC_OK: *out holds the directives; CC_NONE: no such field, or an empty
 * Dictionary; CC_E_SYNTAX: not a Dictionary (or more than 16 field lines
 * or 64 members); CC_E_TYPE: a known directive of the wrong type.  On
 * anything but CC_OK *out is cc_init()'s: the field is to be ignored as a
 * whole, as if absent (RFC 9213 section 2.1).
 */
enum cc_status cc_parse_targeted(const struct http *hp, const char *name, struct cc *out);
/*
 * Directives of a client request: Cache-Control, or when there is no
 * Cache-Control field at all, "Pragma: no-cache" as request no-cache
 * (RFC 9111 section 5.4) with CC_PRAGMA set.
 */
void cc_parse_request(const struct http *req, struct cc *out);
/*
 * Directives of a backend response as this cache must apply them.  The
 * first field of `targets` (NULL-terminated, in precedence order; NULL for
 * cc_targets_default) that is present, non-empty and valid wins, with
 * CC_TARGETED set: RFC 9213 section 2.1 then has the cache ignore
 * Cache-Control and Expires.  Surrogate-Control is read with cc_parse()
 * (valid: CC_OK), every other target with cc_parse_targeted().  An
 * invalid or empty targeted field is skipped as if absent (section 2.1).
 * Otherwise Cache-Control.
 */
void cc_parse_response(const struct http *resp, const char *const *targets, struct cc *out);
/*
 * CDN-Cache-Control, then Surrogate-Control.  Both address a reverse proxy
 * run for the origin; the one with an RFC goes first.
 */
extern const char *const cc_targets_default[];
/*
 * Whether header `name` is an element of a no_cache_fields or
 * private_fields list (comma-separated, OWS around elements, compared
 * case-insensitively).  The cache strips listed private fields before
 * storing (RFC 9111 section 5.2.2.7) and listed no-cache fields from a
 * response it serves without revalidating (section 5.2.2.4).
 */
bool cc_field_listed(const struct txt *list, const struct txt *name);
/*
 * One line for logs and panic dumps, directives in table order:
 * "Cache-Control: no-cache=\"Set-Cookie\" max-age=60 invalid".
 */
void cc_dump(const struct cc *cc, struct sb *out);

#endif
