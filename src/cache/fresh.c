/*
 * HTTP caching rules for a shared cache: HTTP-dates, age, freshness
 * lifetime, storability and the lookup verdict (RFC 9111, RFC 5861).
 *
 * Pure: no allocation, no clock, no locks, callable from any thread.  The
 * caller supplies every time (tim_real() at fetch and at lookup), so the
 * tests can walk an object through its life second by second.
 */
#include "config.h"

#include <stdint.h>
#include <string.h>

#include "surogat/defs.h"
#include "surogat/sb.h"
#include "surogat/cc.h"
#include "surogat/fresh.h"

/* ---------------------------------------------------------------------- */
/* HTTP-date, RFC 9110 section 5.6.7 */

static const char day_short[7][4] = { "Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun" };
static const char *const day_long[7] = { "Monday", "Tuesday",  "Wednesday", "Thursday",
                                         "Friday", "Saturday", "Sunday" };
static const char mon_name[12][4] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                      "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };

static bool
is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* n digits at p as a number, or -1. */
static int
digits(const char *p, unsigned n)
{
    int v = 0;

    for (unsigned i = 0; i < n; i++) {
        if (!is_digit(p[i]))
            return -1;
        v = v * 10 + (p[i] - '0');
    }
    return v;
}

static bool
is_day_short(const char *p)
{
    for (unsigned i = 0; i < 7; i++)
        if (memcmp(p, day_short[i], 3) == 0)
            return true;
    return false;
}

/* Month 1..12 of the three letters at p, or 0. */
static int
month(const char *p)
{
    for (int i = 0; i < 12; i++)
        if (memcmp(p, mon_name[i], 3) == 0)
            return i + 1;
    return 0;
}

/* "HH:MM:SS" at p into seconds of the day, or -1.  Second 60 is a leap second. */
static int
time_of_day(const char *p)
{
    int h = digits(p, 2), m = digits(p + 3, 2), s = digits(p + 6, 2);

    if (p[2] != ':' || p[5] != ':' || h < 0 || m < 0 || s < 0 || h > 23 || m > 59 || s > 60)
        return -1;
    return h * 3600 + m * 60 + s;
}

static bool
leap(int y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

/* Days from 1970-01-01 to y-m-d (proleptic Gregorian; H. Hinnant's days_from_civil). */
static int64_t
days_from_civil(int64_t y, int m, int d)
{
    int64_t era, yoe, doy, doe;

    y -= m <= 2;
    era = (y >= 0 ? y : y - 399) / 400;
    yoe = y - era * 400;
    doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static int
make_date(int y, int m, int d, int tod, double *out)
{
    static const int mdays[12] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };

    if (y < 0 || m < 1 || d < 1 || tod < 0)
        return -1;
    if (d > mdays[m - 1] + (m == 2 && leap(y)))
        return -1;
    *out = (double)(days_from_civil(y, m, d) * 86400 + tod);
    return 0;
}

int
fresh_parse_date(const char *s, size_t len, double *out)
{
    AN(out);
    if (s == NULL)
        return -1;
    /* IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT" */
    if (len == 29 && s[3] == ',') {
        if (!is_day_short(s) || s[4] != ' ' || s[7] != ' ' || s[11] != ' ' || s[16] != ' ' ||
            s[25] != ' ' || memcmp(s + 26, "GMT", 3) != 0)
            return -1;
        return make_date(digits(s + 12, 4), month(s + 8), digits(s + 5, 2), time_of_day(s + 17),
                         out);
    }
    /* asctime: "Sun Nov  6 08:49:37 1994", the day as 2DIGIT or SP DIGIT */
    if (len == 24 && s[3] == ' ') {
        int d;

        if (!is_day_short(s) || s[7] != ' ' || s[10] != ' ' || s[19] != ' ')
            return -1;
        d = s[8] == ' ' ? digits(s + 9, 1) : digits(s + 8, 2);
        return make_date(digits(s + 20, 4), month(s + 4), d, time_of_day(s + 11), out);
    }
    /* rfc850-date: "Sunday, 06-Nov-94 08:49:37 GMT" */
    for (unsigned i = 0; i < 7; i++) {
        size_t dl = strlen(day_long[i]);
        const char *p = s + dl;
        int y;

        if (len != dl + 24 || memcmp(s, day_long[i], dl) != 0)
            continue;
        if (p[0] != ',' || p[1] != ' ' || p[4] != '-' || p[8] != '-' || p[11] != ' ' ||
            p[20] != ' ' || memcmp(p + 21, "GMT", 3) != 0)
            return -1;
        y = digits(p + 9, 2);
        if (y < 0)
            return -1;
        y += y < 70 ? 2000 : 1900; /* see fresh.h for why not the 50-year rule */
        return make_date(y, month(p + 5), digits(p + 2, 2), time_of_day(p + 12), out);
    }
    return -1;
}

/* ---------------------------------------------------------------------- */
/* Header fields */

/*
 * The date in every field named `name`: 1 with *out set when all of them
 * hold the same valid date, 0 when there is none, -1 when one is invalid
 * or two disagree (section 4.2.1: use the first, or consider it stale;
 * the callers take the stale reading).
 */
static int
hdr_date(const struct http *hp, const char *name, double *out)
{
    double v, first = 0;
    bool seen = false;

    for (unsigned i = 0; i < hp->nhdr; i++) {
        const struct txt *t = &hp->hdr[i].val;

        if (!http_name_eq(&hp->hdr[i].name, name))
            continue;
        if (fresh_parse_date(t->b, t->len, &v) != 0 || (seen && v != first))
            return -1;
        first = v;
        seen = true;
    }
    if (seen)
        *out = first;
    return seen ? 1 : 0;
}

double
fresh_date_value(const struct http *resp, double t_resp)
{
    double d;

    OBJ_CHECK(resp, HTTP_MAGIC);
    return hdr_date(resp, "Date", &d) == 1 ? d : t_resp;
}

double
fresh_age_value(const struct http *resp)
{
    const struct http_hdr *h;
    double v = 0;
    size_t i, n;

    OBJ_CHECK(resp, HTTP_MAGIC);
    h = http_find(resp, "Age");
    if (h == NULL)
        return 0;
    /* The first member of a list; Age is a singleton but section 5.1 says so. */
    for (n = 0; n < h->val.len && h->val.b[n] != ','; n++)
        continue;
    while (n > 0 && (h->val.b[n - 1] == ' ' || h->val.b[n - 1] == '\t'))
        n--;
    if (n == 0)
        return 0;
    for (i = 0; i < n; i++) {
        if (!is_digit(h->val.b[i]))
            return 0;
        v = v * 10 + (h->val.b[i] - '0');
        if (v > (double)CC_DELTA_MAX)
            v = (double)CC_DELTA_MAX;
    }
    return v;
}

/* ---------------------------------------------------------------------- */
/* Age, RFC 9111 section 4.2.3 */

double
fresh_apparent_age(double date_value, double t_resp)
{
    return SRG_MAX(0.0, t_resp - date_value);
}

double
fresh_response_delay(double t_req, double t_resp)
{
    /* Clamped: a clock stepped back must not make the object younger than Age says. */
    return SRG_MAX(0.0, t_resp - t_req);
}

double
fresh_corrected_age_value(double age_value, double t_req, double t_resp)
{
    return age_value + fresh_response_delay(t_req, t_resp);
}

double
fresh_corrected_initial_age(double apparent_age, double corrected_age_value)
{
    return SRG_MAX(apparent_age, corrected_age_value);
}

double
fresh_current_age(double corrected_initial_age, double t_resp, double now)
{
    return corrected_initial_age + SRG_MAX(0.0, now - t_resp);
}

/* ---------------------------------------------------------------------- */
/* Freshness lifetime, section 4.2.1 */

/* RFC 9110 section 15.1: these may be given a heuristic lifetime. */
static bool
heuristic_status(unsigned status)
{
    static const unsigned ok[] = { 200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501 };

    for (size_t i = 0; i < ARRAY_LEN(ok); i++)
        if (ok[i] == status)
            return true;
    return false;
}

/*
 * The final status codes RFC 9110 defines whose requirements this cache
 * meets, for must-understand (RFC 9111 section 5.2.2.3).  Not 206 or 304:
 * this cache stores neither.
 */
static bool
understood_status(unsigned status)
{
    static const unsigned ok[] = {
        200, 201, 202, 203, 204, 205, 300, 301, 302, 303, 307, 308, 400,
        401, 402, 403, 404, 405, 406, 407, 408, 409, 410, 411, 412, 413,
        414, 415, 416, 417, 421, 422, 426, 500, 501, 502, 503, 504, 505
    };

    for (size_t i = 0; i < ARRAY_LEN(ok); i++)
        if (ok[i] == status)
            return true;
    return false;
}

const char *
fresh_src_name(enum fresh_src src)
{
    switch (src) {
    case FRESH_SRC_S_MAXAGE:
        return "s-maxage";
    case FRESH_SRC_MAX_AGE:
        return "max-age";
    case FRESH_SRC_EXPIRES:
        return "expires";
    case FRESH_SRC_HEURISTIC:
        return "heuristic";
    case FRESH_SRC_DEFAULT:
        return "default";
    case FRESH_SRC_NONE:
        return "none";
    case FRESH_SRC_POLICY:
        return "policy";
    }
    return "?";
}

double
fresh_lifetime(const struct http *resp, const struct cc *rcc, double t_resp,
               const struct fresh_cfg *cfg, enum fresh_src *src)
{
    enum fresh_src dummy;
    double date, exp, lm;

    OBJ_CHECK(resp, HTTP_MAGIC);
    AN(rcc);
    AN(cfg);
    if (src == NULL)
        src = &dummy;
    /* This cache is shared: s-maxage first (section 5.2.2.10). */
    if (rcc->s_maxage >= 0) {
        *src = FRESH_SRC_S_MAXAGE;
        return (double)rcc->s_maxage;
    }
    if (rcc->max_age >= 0) {
        *src = FRESH_SRC_MAX_AGE;
        return (double)rcc->max_age;
    }
    date = fresh_date_value(resp, t_resp);
    if (!(rcc->flags & CC_TARGETED)) {
        switch (hdr_date(resp, "Expires", &exp)) {
        case 1:
            *src = FRESH_SRC_EXPIRES;
            return SRG_MAX(0.0, exp - date);
        case -1:
            /* Section 5.3: an invalid date, "0" above all, is in the past. */
            *src = FRESH_SRC_EXPIRES;
            return 0;
        default:
            break;
        }
    }
    /* Section 4.2.2: heuristics only without explicit expiry, and for these. */
    if (heuristic_status(resp->status) || (rcc->flags & CC_PUBLIC)) {
        if (hdr_date(resp, "Last-Modified", &lm) == 1 && date > lm) {
            double h = SRG_MIN(cfg->heuristic_fraction * (date - lm), cfg->heuristic_max);

            if (h > 0) {
                *src = FRESH_SRC_HEURISTIC;
                return h;
            }
        }
        if (cfg->default_ttl > 0) {
            *src = FRESH_SRC_DEFAULT;
            return cfg->default_ttl;
        }
    }
    *src = FRESH_SRC_NONE;
    return 0;
}

/* ---------------------------------------------------------------------- */
/* Storability, section 3 */

static const char *const store_token[FRESH_STORE__N] = {
#define FRESH_STORE_WHY(name, token, why) [FRESH_##name] = token,
#include "surogat/tbl/fresh_store.h"
};

static const char *const store_why[FRESH_STORE__N] = {
#define FRESH_STORE_WHY(name, token, why) [FRESH_##name] = why,
#include "surogat/tbl/fresh_store.h"
};

const char *
fresh_store_name(enum fresh_store st)
{
    return ((unsigned)st < FRESH_STORE__N ? store_token[st] : "?");
}

const char *
fresh_store_why(enum fresh_store st)
{
    return ((unsigned)st < FRESH_STORE__N ? store_why[st] : "?");
}

static bool
method_is(const struct txt *m, const char *want)
{
    size_t l = strlen(want);

    /* Methods are case-sensitive (RFC 9110 section 9.1): "get" is not GET. */
    return m->len == l && memcmp(m->b, want, l) == 0;
}

/* Whether a Set-Cookie is one the origin told us to strip. */
static bool
cookie_listed(const struct cc *rcc)
{
    static const struct txt sc = TXT_LIT("Set-Cookie");

    return ((rcc->flags & CC_PRIVATE_FIELDS) && cc_field_listed(&rcc->private_fields, &sc)) ||
           ((rcc->flags & CC_NO_CACHE_FIELDS) && cc_field_listed(&rcc->no_cache_fields, &sc));
}

bool
fresh_field_storable(const struct txt *name, const struct cc *rcc)
{
    AN(name);
    AN(rcc);
    if (http_name_eq(name, "Set-Cookie"))
        return (false);
    if ((rcc->flags & CC_PRIVATE_FIELDS) && cc_field_listed(&rcc->private_fields, name))
        return (false);
    return (!((rcc->flags & CC_NO_CACHE_FIELDS) && cc_field_listed(&rcc->no_cache_fields, name)));
}

static bool
has_validator(const struct http *resp)
{
    const struct http_hdr *et = http_find(resp, "ETag");
    double lm;

    return (et != NULL && et->val.len > 0) || hdr_date(resp, "Last-Modified", &lm) == 1;
}

enum fresh_store
fresh_storable(const struct http *req, const struct cc *qcc, const struct http *resp,
               const struct cc *rcc, const struct fresh_cfg *cfg)
{
    bool understood, explicit_exp;

    OBJ_CHECK(req, HTTP_MAGIC);
    OBJ_CHECK(resp, HTTP_MAGIC);
    AN(qcc);
    AN(rcc);
    AN(cfg);
    if (!method_is(&req->method, "GET") && !method_is(&req->method, "HEAD"))
        return FRESH_METHOD;
    if (resp->status < 200 || resp->status > 599 || resp->status == 206 || resp->status == 304)
        return FRESH_STATUS;
    understood = understood_status(resp->status);
    if ((rcc->flags & CC_MUST_UNDERSTAND) && !understood)
        return FRESH_MUST_UNDERSTAND;
    if (qcc->flags & CC_NO_STORE)
        return FRESH_NO_STORE_REQ;
    /* Section 5.2.2.3: must-understand is sent with no-store for caches that lack it. */
    if ((rcc->flags & CC_NO_STORE) && !((rcc->flags & CC_MUST_UNDERSTAND) && understood))
        return FRESH_NO_STORE_RESP;
    if (rcc->flags & CC_PRIVATE)
        return FRESH_PRIVATE;
    if (http_find(req, "Authorization") != NULL &&
        !(rcc->flags & (CC_PUBLIC | CC_MUST_REVALIDATE)) && rcc->s_maxage < 0)
        return FRESH_AUTHORIZATION;
    if (http_has_token(resp, "Vary", "*"))
        return FRESH_VARY_STAR;
    if (http_find(resp, "Set-Cookie") != NULL && !cfg->store_set_cookie && !cookie_listed(rcc))
        return FRESH_SET_COOKIE;
    explicit_exp = rcc->s_maxage >= 0 || rcc->max_age >= 0 ||
                   (!(rcc->flags & CC_TARGETED) && http_find(resp, "Expires") != NULL);
    if (explicit_exp || (rcc->flags & CC_PUBLIC))
        return FRESH_STORE;
    if (!heuristic_status(resp->status))
        return FRESH_NOT_CACHEABLE;
    if (cfg->default_ttl > 0 || has_validator(resp))
        return FRESH_STORE;
    return FRESH_NO_FRESHNESS_NO_VALIDATOR;
}

/* ---------------------------------------------------------------------- */
/* The stored object and the lookup verdict */

void
fresh_obj_init(struct fresh_obj *o, const struct http *resp, const struct cc *rcc, double t_req,
               double t_resp, const struct fresh_cfg *cfg)
{
    double apparent, corrected, initial;
    enum fresh_src src;

    AN(o);
    OBJ_CHECK(resp, HTTP_MAGIC);
    AN(rcc);
    AN(cfg);
    memset(o, 0, sizeof *o);
    apparent = fresh_apparent_age(fresh_date_value(resp, t_resp), t_resp);
    corrected = fresh_corrected_age_value(fresh_age_value(resp), t_req, t_resp);
    initial = fresh_corrected_initial_age(apparent, corrected);
    o->t_origin = t_resp - initial;
    o->ttl = fresh_lifetime(resp, rcc, t_resp, cfg, &src);
    o->src = (uint8_t)src;
    o->keep = -1;
    /* s-maxage carries proxy-revalidate's meaning (section 5.2.2.10). */
    if ((rcc->flags & (CC_MUST_REVALIDATE | CC_PROXY_REVALIDATE)) || rcc->s_maxage >= 0)
        o->flags |= FRESH_F_MUST_REVALIDATE;
    if (rcc->flags & CC_NO_CACHE)
        o->flags |= FRESH_F_NO_CACHE;
    if (rcc->flags & CC_IMMUTABLE)
        o->flags |= FRESH_F_IMMUTABLE;
    o->swr = rcc->swr >= 0 ? (double)rcc->swr : SRG_MAX(0.0, cfg->default_grace);
    o->sie = rcc->sie >= 0 ? (double)rcc->sie : SRG_MAX(0.0, cfg->default_sie);
    if (o->flags & (FRESH_F_MUST_REVALIDATE | FRESH_F_NO_CACHE))
        o->swr = o->sie = 0;
}

void
fresh_obj_dump(const struct fresh_obj *o, struct sb *out)
{
    AN(o);
    AN(out);
    sb_printf(out, "ttl=%.3f swr=%.3f sie=%.3f src=%s t_origin=%.3f", o->ttl, o->swr, o->sie,
              fresh_src_name((enum fresh_src)o->src), o->t_origin);
    if (o->flags & FRESH_F_MUST_REVALIDATE)
        sb_cat(out, " must-revalidate");
    if (o->flags & FRESH_F_NO_CACHE)
        sb_cat(out, " no-cache");
    if (o->flags & FRESH_F_IMMUTABLE)
        sb_cat(out, " immutable");
}

const char *
fresh_verdict_name(enum fresh_verdict v)
{
    switch (v) {
    case FRESH_V_FRESH:
        return "fresh";
    case FRESH_V_STALE_OK:
        return "stale-ok";
    case FRESH_V_STALE_WHILE_REVALIDATE:
        return "stale-while-revalidate";
    case FRESH_V_STALE_IF_ERROR:
        return "stale-if-error";
    case FRESH_V_REVALIDATE:
        return "revalidate";
    case FRESH_V_GATEWAY_TIMEOUT:
        return "gateway-timeout";
    }
    return "?";
}

static bool
within(double staleness, double window)
{
    return window > 0 && staleness <= window;
}

enum fresh_verdict
fresh_decide(const struct fresh_obj *o, const struct cc *qcc, double now)
{
    struct cc none;
    enum fresh_verdict miss;
    double age, stale;
    bool client_ok;

    if (qcc == NULL) {
        cc_init(&none);
        qcc = &none;
    }
    /* Section 5.2.1.7: without a usable stored response, 504 rather than a fetch. */
    miss = (qcc->flags & CC_ONLY_IF_CACHED) ? FRESH_V_GATEWAY_TIMEOUT : FRESH_V_REVALIDATE;
    if (o == NULL)
        return miss;
    /* Sections 5.2.1.4 and 5.2.2.4: no use at all without validation, not even on error. */
    if ((qcc->flags & CC_NO_CACHE) || (o->flags & FRESH_F_NO_CACHE))
        return miss;
    age = SRG_MAX(0.0, now - o->t_origin);
    /* Sections 5.2.1.1 and 5.2.1.3: the client's own limits. */
    client_ok = (qcc->max_age < 0 || age <= (double)qcc->max_age) &&
                (qcc->min_fresh < 0 || o->ttl - age >= (double)qcc->min_fresh);
    if (age < o->ttl) {
        if (client_ok)
            return FRESH_V_FRESH;
        /* Fresh, just not fresh enough for this client: still fine when the backend fails. */
        return qcc->flags & CC_ONLY_IF_CACHED ? FRESH_V_GATEWAY_TIMEOUT : FRESH_V_STALE_IF_ERROR;
    }
    /* Section 4.2.4: must-revalidate (and s-maxage) forbid any stale use. */
    if (o->flags & FRESH_F_MUST_REVALIDATE)
        return miss;
    stale = age - o->ttl;
    if (client_ok && within(stale, o->swr))
        return FRESH_V_STALE_WHILE_REVALIDATE;
    if (client_ok && qcc->max_stale >= 0 &&
        ((qcc->flags & CC_MAX_STALE_ANY) || within(stale, (double)qcc->max_stale)))
        return FRESH_V_STALE_OK;
    if (qcc->flags & CC_ONLY_IF_CACHED)
        return FRESH_V_GATEWAY_TIMEOUT;
    /* RFC 5861 section 4: either side may allow stale-if-error. */
    if (within(stale, SRG_MAX(o->sie, qcc->sie >= 0 ? (double)qcc->sie : 0.0)))
        return FRESH_V_STALE_IF_ERROR;
    return FRESH_V_REVALIDATE;
}
