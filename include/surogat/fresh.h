/*
 * fresh -- the HTTP caching rules of a shared cache (RFC 9111, RFC 5861):
 * whether a response may be stored, how long it is fresh, how old it is,
 * and what a lookup may do with a stored response.
 *
 * Pure functions over parsed heads (struct http) and directives (struct
 * cc): no allocation, no I/O, no clock.  Times are doubles of seconds since
 * the epoch, as tim_real() returns; durations are seconds.  The cache calls
 * fresh_storable() and fresh_obj_init() once per backend response (at fetch
 * time: headers are parsed once, never on a hit), keeps the struct
 * fresh_obj with the object, and calls fresh_decide() on each lookup.
 */
#ifndef SUROGAT_FRESH_H
#define SUROGAT_FRESH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "surogat/cc.h"
#include "surogat/http.h"

struct sb;

/* Operator choices; every field has an RFC-conforming default in FRESH_CFG_DEFAULT. */
struct fresh_cfg {
    /*
     * Lifetime given to a response that allows heuristics but has no
     * usable Last-Modified (absent, invalid, or not before Date, which
     * gives a heuristic of 0).  0: such a response is stale at once,
     * so it is never served without revalidation (RFC 9111 section 4.2.2
     * leaves the heuristic to the cache; Varnish uses 120 s here).
     */
    double default_ttl;
    /* Stale-while-revalidate window for a response without one; 0 (section 4.2.4). */
    double default_grace;
    /*
     * Stale-if-error window for a response without one (RFC 5861 section
     * 4 lets a cache choose): how long past its ttl an object may stand in
     * for a failing backend.  Never under must-revalidate, proxy-revalidate,
     * s-maxage or no-cache, which forbid stale use (RFC 9111 4.2.4).
     */
    double default_sie;
    /* Share of (Date - Last-Modified) for heuristic freshness: 0.1 (section 4.2.2). */
    double heuristic_fraction;
    /* Cap of the heuristic lifetime: one day. */
    double heuristic_max;
    /*
     * Store a response carrying Set-Cookie (without the cookie: see
     * fresh_field_storable()).  Off: a page that sets a cookie is
     * usually one user's page (Varnish's builtin makes the same choice).
     * Cookies named in private="..." or no-cache="..." do not count: the
     * origin has said the page is shared and the cookie is not.
     */
    bool store_set_cookie;
};
#define FRESH_CFG_DEFAULT                           \
    ((struct fresh_cfg){ .default_ttl = 0,          \
                         .default_grace = 0,        \
                         .default_sie = 0,          \
                         .heuristic_fraction = 0.1, \
                         .heuristic_max = 86400,    \
                         .store_set_cookie = false })

/*
 * An HTTP-date (RFC 9110 section 5.6.7) into seconds since the epoch:
 * IMF-fixdate "Sun, 06 Nov 1994 08:49:37 GMT", obsolete RFC 850
 * "Sunday, 06-Nov-94 08:49:37 GMT" and asctime "Sun Nov  6 08:49:37 1994".
 * Exactly those bytes: no surrounding whitespace, names case-sensitive,
 * fields range-checked (Feb 30 fails; second 60 is a leap second).  The day
 * name must be a real one but need not match the date, as most parsers
 * allow.  A two-digit year is 20yy below 70 and 19yy from 70: the section's
 * "50 years ahead" rule needs the current time, which a pure parser lacks,
 * and it would read the common "Thursday, 01-Jan-70" as 2070, not expired.
 * Returns 0, or -1 leaving *out untouched.
 */
int fresh_parse_date(const char *s, size_t len, double *out);

/*
 * Age (RFC 9111 section 4.2.3).  t_req is when the request went to the
 * backend, t_resp when its response head arrived, both on our clock.
 */
/* The Date field, or t_resp when it is missing or invalid (RFC 9110 section 6.6.1). */
double fresh_date_value(const struct http *resp, double t_resp);
/*
 * The Age field: its first member (section 5.1), clamped to 2^31; 0 when
 * absent or invalid (negative, not digits), which section 5.1 says to ignore.
 */
double fresh_age_value(const struct http *resp);
double fresh_apparent_age(double date_value, double t_resp); /* max(0, t_resp - date) */
double fresh_response_delay(double t_req, double t_resp);    /* max(0, t_resp - t_req) */
double fresh_corrected_age_value(double age_value, double t_req, double t_resp);
double fresh_corrected_initial_age(double apparent_age, double corrected_age_value); /* max */
double fresh_current_age(double corrected_initial_age, double t_resp, double now);

/* Where a freshness lifetime came from (section 4.2.1 order), for logs. */
enum fresh_src {
    FRESH_SRC_S_MAXAGE,
    FRESH_SRC_MAX_AGE,
    FRESH_SRC_EXPIRES,   /* Expires - Date; 0 for an invalid Expires ("already expired") */
    FRESH_SRC_HEURISTIC, /* heuristic_fraction of Date - Last-Modified, capped */
    FRESH_SRC_DEFAULT,   /* default_ttl */
    FRESH_SRC_NONE,      /* 0: no information, or heuristics not allowed */
    FRESH_SRC_POLICY,    /* the policy's beresp.ttl (set by the fetch, never by fresh_) */
};
const char *fresh_src_name(enum fresh_src src);
/*
 * Freshness lifetime in seconds, >= 0 (section 4.2.1), from the response
 * directives rcc as cc_parse_response() gives them: s-maxage, max-age,
 * then Expires - Date unless rcc is CC_TARGETED (RFC 9213 section 2.1),
 * then -- only without any of those, and only for a heuristically
 * cacheable status (RFC 9110 section 15.1) or `public` -- the heuristic
 * from Last-Modified, then default_ttl.  Repeated Expires lines that
 * disagree count as invalid, hence expired (section 4.2.1: "consider it
 * stale").  A missing Date is t_resp.  *src may be NULL.
 */
double fresh_lifetime(const struct http *resp, const struct cc *rcc, double t_resp,
                      const struct fresh_cfg *cfg, enum fresh_src *src);

/*
 * Storability by a shared cache (section 3).  FRESH_STORE, or why not, in
 * the order the checks run, for the cache to log; then the reasons the
 * fetch adds (too big, the policy, stale on arrival ...).  The rows of
 * tbl/fresh_store.h.
 */
enum fresh_store {
#define FRESH_STORE_WHY(name, token, why) FRESH_##name,
#include "surogat/tbl/fresh_store.h"
    FRESH_STORE__N
};
/* Its token: "stored", "set-cookie", "no-store" ... (Cache-Status detail=); "?" for none. */
const char *fresh_store_name(enum fresh_store st);
/* Why, in words: "the response sets a cookie (Set-Cookie)"; "?" for none. */
const char *fresh_store_why(enum fresh_store st);
/*
 * req and qcc are the client request and its directives (cc_parse_request),
 * resp and rcc the backend response and its (cc_parse_response).  Storing
 * means storing without the fields fresh_field_storable() refuses.
 */
enum fresh_store fresh_storable(const struct http *req, const struct cc *qcc,
                                const struct http *resp, const struct cc *rcc,
                                const struct fresh_cfg *cfg);

/*
 * Whether a field of response rcc may be kept in a stored head that later
 * clients get without revalidation.  Never Set-Cookie: a cookie is one
 * client's, whatever stored the response (RFC 9111 section 3, the
 * policy's beresp.ttl, a 304's fields merged in section 4.3.4); never a
 * field named by private="..." (section 5.2.2.7) or no-cache="..."
 * (section 5.2.2.4: such a field may not be sent on a reuse without
 * revalidation, and this cache drops it rather than revalidate).
 */
bool fresh_field_storable(const struct txt *name, const struct cc *rcc);

enum fresh_obj_flag {
    FRESH_F_MUST_REVALIDATE = 1u << 0, /* must-revalidate, proxy-revalidate or s-maxage */
    FRESH_F_NO_CACHE = 1u << 1,        /* unqualified no-cache: validate every use */
    FRESH_F_IMMUTABLE = 1u << 2,       /* RFC 8246; recorded, no effect in a shared cache */
};

/* What the cache keeps with an object; the expiry heap orders by t_origin + ttl + max(swr, sie). */
struct fresh_obj {
    double t_origin; /* t_resp - corrected_initial_age: the object's age is now - t_origin */
    double ttl;      /* freshness lifetime: fresh while age < ttl */
    /*
     * Seconds past ttl it may be served while revalidating (swr), when the
     * backend fails (sie).  Floats, as keep: whole seconds are exact up to
     * 194 days, and a cached object stays in a smaller size class.
     */
    float swr;
    float sie;
    /*
     * Seconds past all of those an object with validators stays for a
     * conditional refetch; negative: the default_keep parameter.  A float
     * and narrow fields below keep the cached object at its size class.
     */
    float keep;
    uint16_t flags; /* enum fresh_obj_flag */
    uint8_t src;    /* enum fresh_src */
};
/*
 * Fill *o for a response received at t_resp for a request sent at t_req.
 * swr and sie are 0 under FRESH_F_MUST_REVALIDATE or FRESH_F_NO_CACHE,
 * which forbid stale use (RFC 9111 section 4.2.4 beats RFC 5861); swr is
 * default_grace without a stale-while-revalidate, sie default_sie without a
 * stale-if-error.  After a 304 the cache
 * merges the new header fields into the stored ones (section 4.3.4) and
 * calls this again.
 */
/* One line for logs and panic dumps: "ttl=60.000 swr=0.000 sie=0.000 src=max-age t_origin=...". */
void fresh_obj_dump(const struct fresh_obj *o, struct sb *out);
void fresh_obj_init(struct fresh_obj *o, const struct http *resp, const struct cc *rcc,
                    double t_req, double t_resp, const struct fresh_cfg *cfg);

/* What a lookup may do with a stored response (sections 4.2.4, 4.3, 5.2.1; RFC 5861). */
enum fresh_verdict {
    FRESH_V_FRESH,    /* serve it */
    FRESH_V_STALE_OK, /* stale within the client's max-stale: serve it, no refresh needed */
    FRESH_V_STALE_WHILE_REVALIDATE, /* serve it, and refresh it in the background */
    /*
     * Go to the backend (conditionally if the object has a validator); if
     * the backend fails (unreachable, 5xx) this object may be served.  Also
     * for a fresh object that is older than the client's max-age/min-fresh.
     */
    FRESH_V_STALE_IF_ERROR,
    FRESH_V_REVALIDATE,      /* go to the backend; never serve this object unvalidated */
    FRESH_V_GATEWAY_TIMEOUT, /* only-if-cached and nothing usable: answer 504 (5.2.1.7) */
};
const char *fresh_verdict_name(enum fresh_verdict v);
/*
 * o is the stored object, or NULL on a miss (then REVALIDATE, meaning
 * fetch, or GATEWAY_TIMEOUT); qcc the request's directives from
 * cc_parse_request(), NULL for none.  In order: request or object no-cache
 * needs validation; fresh and within the client's max-age and min-fresh is
 * FRESH; past ttl, must-revalidate forbids any stale use; then the
 * object's stale-while-revalidate window (unless the client's max-age or
 * min-fresh rules it out), then the client's max-stale, then the
 * stale-if-error window (the larger of the object's and the request's).
 * A window includes its end (staleness <= window); a window of 0 is none,
 * max-stale=0 included.  The age is max(0, now - t_origin).
 */
enum fresh_verdict fresh_decide(const struct fresh_obj *o, const struct cc *qcc, double now);

#endif
