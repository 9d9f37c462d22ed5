/*
 * fresh: HTTP-dates, age, freshness lifetime, storability and the lookup
 * verdict (RFC 9111, RFC 5861, RFC 9213).  Heads are built from
 * "Name: value" literals; directives come from cc_parse_request() and
 * cc_parse_response(), as the cache will get them.
 */
#include <signal.h>
#include <string.h>

#include "unit.h"
#include "surogat/cc.h"
#include "surogat/fresh.h"
#include "surogat/http.h"
#include "surogat/sb.h"

#define NHDR 12
static struct http_hdr qh[NHDR], rh[NHDR];
static struct http req, resp;

static struct txt
T(const char *s) {
    return (struct txt){ s, strlen(s) };
}

/* Add the "Name: value" lines of `lines` ('\n'-separated; NULL for none), pointing into it. */
static void
fill(struct http *hp, const char *lines)
{
    const char *p = lines, *e, *c, *v;

    while (p != NULL && *p != '\0') {
        e = strchr(p, '\n');
        if (e == NULL)
            e = p + strlen(p);
        c = memchr(p, ':', (size_t)(e - p));
        ck_assert_ptr_nonnull(c);
        for (v = c + 1; *v == ' '; v++)
            continue;
        ck_assert_int_eq(
            http_add(hp, (struct txt){ p, (size_t)(c - p) }, (struct txt){ v, (size_t)(e - v) }),
            0);
        p = *e == '\n' ? e + 1 : e;
    }
}

static void
setup(void)
{
    http_init(&req, qh, NHDR);
    http_init(&resp, rh, NHDR);
    req.method = TXT_LIT("GET");
    resp.status = 200;
}

/* Operator settings a row may change from FRESH_CFG_DEFAULT. */
#define TTL120  1u
#define COOKIE  2u
#define GRACE10 4u
#define SIE300  8u

static struct fresh_cfg
cfg_of(unsigned mod)
{
    struct fresh_cfg c = FRESH_CFG_DEFAULT;

    if (mod & TTL120)
        c.default_ttl = 120;
    if (mod & COOKIE)
        c.store_set_cookie = true;
    if (mod & GRACE10)
        c.default_grace = 10;
    if (mod & SIE300)
        c.default_sie = 300;
    return c;
}

/* 784111777, and dates around it. */
#define T0        784111777.0
#define D0        "Sun, 06 Nov 1994 08:49:37 GMT"
#define D0P600    "Sun, 06 Nov 1994 08:59:37 GMT"
#define D0P3600   "Sun, 06 Nov 1994 09:49:37 GMT"
#define D0M100    "Sun, 06 Nov 1994 08:47:57 GMT"
#define D0M100000 "Sat, 05 Nov 1994 05:02:57 GMT"
#define D0M1E7    "Wed, 13 Jul 1994 15:02:57 GMT"

/* ---------------------------------------------------------------------- */

static const struct {
    const char *s;
    double t;
} good_dates[] = {
    { D0, T0 },
    { "Sunday, 06-Nov-94 08:49:37 GMT", T0 },
    { "Sun Nov  6 08:49:37 1994", T0 },
    { "Sun Nov 06 08:49:37 1994", T0 },
    { "Mon, 06 Nov 1994 08:49:37 GMT", T0 }, /* the day name need not match */
    { "Thu, 01 Jan 1970 00:00:00 GMT", 0 },
    { "Thursday, 01-Jan-70 00:00:00 GMT", 0 }, /* 1970, not 2070: expired */
    { "Wed, 31 Dec 1969 23:59:59 GMT", -1 },
    { "Tue, 29 Feb 2000 00:00:00 GMT", 951782400 },
    { "Sun Feb 29 00:00:00 2004", 1078012800 },
    { "Tue, 19 Jan 2038 03:14:08 GMT", 2147483648.0 },
    { "Fri, 01 Jan 2100 00:00:00 GMT", 4102444800.0 },
    { "Fri, 31 Dec 9999 23:59:59 GMT", 253402300799.0 },
    { "Sat, 31 Dec 2016 23:59:60 GMT", 1483228800 }, /* leap second */
    { "Tuesday, 01-Jan-69 00:00:00 GMT", 3124224000.0 },
    { "Thursday, 09-Sep-99 00:00:00 GMT", 936835200 },
    { "Wednesday, 09-Sep-99 00:00:00 GMT", 936835200 },
    { "Saturday, 31-Dec-16 00:00:00 GMT", 1483142400 },
    { "Friday, 31-Dec-99 23:59:59 GMT", 946684799 },
    { "Sat Dec 31 23:59:59 2016", 1483228799 },
    { "Mon Jan  1 00:00:00 0001", -62135596800.0 },
};

START_TEST(date_good)
{
    double t = 42;

    ck_assert_msg(fresh_parse_date(good_dates[_i].s, strlen(good_dates[_i].s), &t) == 0,
                  "\"%s\" rejected", good_dates[_i].s);
    ck_assert_msg(t == good_dates[_i].t, "\"%s\" = %.0f, want %.0f", good_dates[_i].s, t,
                  good_dates[_i].t);
}
END_TEST

static const char *const bad_dates[] = {
    "",
    "0",
    "-1",
    "garbage",
    "Sun, 06 Nov 1994 08:49:37 UTC",
    "Sun, 06 Nov 1994 08:49:37 gmt",
    "sun, 06 Nov 1994 08:49:37 GMT",
    "Sun, 06 nov 1994 08:49:37 GMT",
    "Xyz, 06 Nov 1994 08:49:37 GMT",
    "Sun, 06 Foo 1994 08:49:37 GMT",
    "Sun, 6 Nov 1994 08:49:37 GMT",
    "Sun, 06 Nov 94 08:49:37 GMT",
    "Sun,  06 Nov 1994 08:49:37 GMT",
    "Sun, 06 Nov 1994 08:49:37 GMT ",
    " Sun, 06 Nov 1994 08:49:37 GMT",
    "Sun, 06 Nov 1994 08:49:37 GMTX",
    "Sun, 06-Nov-1994 08:49:37 GMT",
    "Sun, 06 Nov 1994 8:49:37  GMT",
    "Sun, 06 Nov 1994 08-49-37 GMT",
    "Sun, 0a Nov 1994 08:49:37 GMT",
    "Sun, 06 Nov 19x4 08:49:37 GMT",
    "Sun, 06 Nov -994 08:49:37 GMT",
    "Sun, 00 Nov 1994 08:49:37 GMT",
    "Sun, 31 Nov 1994 08:49:37 GMT",
    "Sun, 29 Feb 1900 00:00:00 GMT",
    "Sun, 29 Feb 2001 00:00:00 GMT",
    "Sun, 32 Jan 1994 00:00:00 GMT",
    "Sun, 06 Nov 1994 24:00:00 GMT",
    "Sun, 06 Nov 1994 23:60:00 GMT",
    "Sun, 06 Nov 1994 23:59:61 GMT",
    "Sun, 06 Nov 1994 +8:49:37 GMT",
    "Sunday, 06 Nov 1994 08:49:37 GMT",
    "Sunday, 06-Nov-94 08:49:37 UTC",
    "Sunday, 06-Nov-94 08:49:37 GMT ",
    "Sunday, 31-Apr-94 08:49:37 GMT",
    "Sunday, 06-Nov-9x 08:49:37 GMT",
    "Sunday, 06/Nov/94 08:49:37 GMT",
    "Sundae, 06-Nov-94 08:49:37 GMT",
    "Sun, 06-Nov-94 08:49:37 GMT",
    "Sun Nov 6 08:49:37 1994",
    "Sun Nov  6 08:49:37 94",
    "Sun Nov  0 08:49:37 1994",
    "Sun Nov 6  08:49:37 1994",
    "Sun Nov  6 08:49:37 1994 ",
    "Sun Nov  6 08:49:37 GMT 1994",
    "Sun Xov  6 08:49:37 1994",
    "1994-11-06T08:49:37Z",
    "784111777",
};

START_TEST(date_bad)
{
    double t = 42;

    ck_assert_msg(fresh_parse_date(bad_dates[_i], strlen(bad_dates[_i]), &t) == -1,
                  "\"%s\" accepted as %.0f", bad_dates[_i], t);
    ck_assert(t == 42); /* untouched */
}
END_TEST

START_TEST(date_bounds)
{
    static const char nul[] = "Sun, 06 Nov 1994 08:49:37 G\0T";
    double t = 42;

    ck_assert_int_eq(fresh_parse_date(NULL, 0, &t), -1);
    ck_assert_int_eq(fresh_parse_date(nul, sizeof nul - 1, &t), -1);
    /* The length decides, not a NUL: a valid prefix of a longer buffer parses. */
    ck_assert_int_eq(fresh_parse_date(D0 "junk", 29, &t), 0);
    ck_assert(t == T0);
    ck_assert_int_eq(fresh_parse_date(D0, 28, &t), -1);
}
END_TEST

/* ---------------------------------------------------------------------- */

START_TEST(age_arithmetic)
{
    ck_assert(fresh_apparent_age(100, 110) == 10);
    ck_assert(fresh_apparent_age(120, 110) == 0); /* origin clock ahead */
    ck_assert(fresh_response_delay(100, 103) == 3);
    ck_assert(fresh_response_delay(103, 100) == 0);
    ck_assert(fresh_corrected_age_value(50, 100, 103) == 53);
    ck_assert(fresh_corrected_age_value(0, 100, 100) == 0);
    ck_assert(fresh_corrected_initial_age(10, 53) == 53);
    ck_assert(fresh_corrected_initial_age(60, 53) == 60);
    ck_assert(fresh_current_age(53, 110, 120) == 63);
    ck_assert(fresh_current_age(53, 110, 105) == 53); /* our clock stepped back */
    ck_assert(fresh_current_age(0, 110, 110) == 0);
}
END_TEST

START_TEST(age_value)
{
    static const struct {
        const char *v1, *v2;
        double want;
    } v[] = {
        { "30", NULL, 30 },
        { "007", NULL, 7 },
        { "0", NULL, 0 },
        { "30, 40", NULL, 30 },
        { "30 , 40", NULL, 30 },
        { "30", "40", 30 },
        { "-5", NULL, 0 },
        { "abc", NULL, 0 },
        { "1.5", NULL, 0 },
        { "", NULL, 0 },
        { "\"30\"", NULL, 0 },
        { "30s", NULL, 0 },
        { "2147483648", NULL, 2147483648.0 },
        { "99999999999999999999", NULL, 2147483648.0 },
        { NULL, NULL, 0 },
    };

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        setup();
        if (v[i].v1 != NULL)
            ck_assert_int_eq(http_add(&resp, T("Age"), T(v[i].v1)), 0);
        if (v[i].v2 != NULL)
            ck_assert_int_eq(http_add(&resp, T("age"), T(v[i].v2)), 0);
        ck_assert_msg(fresh_age_value(&resp) == v[i].want, "Age \"%s\": %f", v[i].v1,
                      fresh_age_value(&resp));
    }
}
END_TEST

START_TEST(date_value)
{
    static const struct {
        const char *v1, *v2;
        double want;
    } v[] = {
        { D0, NULL, T0 },           { D0, D0, T0 },      { NULL, NULL, 500 },
        { "yesterday", NULL, 500 }, { D0, D0P600, 500 }, /* two Dates that disagree: use our own
                                                            clock */
    };

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        setup();
        if (v[i].v1 != NULL)
            ck_assert_int_eq(http_add(&resp, T("Date"), T(v[i].v1)), 0);
        if (v[i].v2 != NULL)
            ck_assert_int_eq(http_add(&resp, T("Date"), T(v[i].v2)), 0);
        ck_assert(fresh_date_value(&resp, 500) == v[i].want);
    }
}
END_TEST

/* ---------------------------------------------------------------------- */

static const struct lrow {
    unsigned status;
    const char *h; /* header lines, "\n"-separated */
    double t_resp;
    unsigned cfg;
    double want;
    enum fresh_src src;
} lrows[] = {
    { 200, "Cache-Control: max-age=60", T0, 0, 60, FRESH_SRC_MAX_AGE },
    { 200, "Cache-Control: s-maxage=10, max-age=60", T0, 0, 10, FRESH_SRC_S_MAXAGE },
    { 200, "Cache-Control: max-age=60\nDate: " D0 "\nExpires: " D0P3600, T0, 0, 60,
      FRESH_SRC_MAX_AGE },
    { 200, "Cache-Control: max-age=60\nDate: " D0 "\nExpires: 0", T0, 0, 60, FRESH_SRC_MAX_AGE },
    { 200, "Date: " D0 "\nExpires: " D0P3600, T0 + 50, 0, 3600, FRESH_SRC_EXPIRES },
    { 200, "Expires: " D0P3600, T0 + 600, 0, 3000, FRESH_SRC_EXPIRES },
    { 200, "Expires: 0", T0, 0, 0, FRESH_SRC_EXPIRES },
    { 200, "Date: " D0 "\nExpires: garbage\nLast-Modified: " D0M100000, T0, TTL120, 0,
      FRESH_SRC_EXPIRES },
    { 200, "Date: " D0 "\nExpires: " D0M100, T0, 0, 0, FRESH_SRC_EXPIRES },
    { 200, "Date: " D0 "\nExpires: " D0P3600 "\nExpires: " D0P600, T0, 0, 0, FRESH_SRC_EXPIRES },
    { 200, "Date: " D0 "\nExpires: " D0P600 "\nExpires: " D0P600, T0, 0, 600, FRESH_SRC_EXPIRES },
    { 200, "Date: " D0 "\nExpires: " D0P3600 "\nLast-Modified: " D0M1E7, T0, 0, 3600,
      FRESH_SRC_EXPIRES },
    { 200, "Date: " D0 "\nLast-Modified: " D0M100000, T0, 0, 10000, FRESH_SRC_HEURISTIC },
    { 200, "Date: " D0 "\nLast-Modified: " D0M1E7, T0, 0, 86400, FRESH_SRC_HEURISTIC },
    { 200, "Last-Modified: " D0M100000, T0 + 100, 0, 10010, FRESH_SRC_HEURISTIC },
    { 200, "Date: garbage\nLast-Modified: " D0M100000, T0, 0, 10000, FRESH_SRC_HEURISTIC },
    { 200, "Date: " D0M100 "\nLast-Modified: " D0, T0, 0, 0, FRESH_SRC_NONE },
    { 200, "Date: " D0 "\nLast-Modified: " D0, T0, TTL120, 120, FRESH_SRC_DEFAULT },
    { 200, "Date: " D0 "\nLast-Modified: garbage", T0, TTL120, 120, FRESH_SRC_DEFAULT },
    { 301, "Last-Modified: " D0M100000, T0, 0, 10000, FRESH_SRC_HEURISTIC },
    { 206, "Date: " D0 "\nLast-Modified: " D0M100000, T0, 0, 10000, FRESH_SRC_HEURISTIC },
    { 302, "Date: " D0 "\nLast-Modified: " D0M100000, T0, TTL120, 0, FRESH_SRC_NONE },
    { 302, "Cache-Control: public\nDate: " D0 "\nLast-Modified: " D0M100000, T0, 0, 10000,
      FRESH_SRC_HEURISTIC },
    { 500, "Cache-Control: public\nLast-Modified: " D0M100000, T0, 0, 10000, FRESH_SRC_HEURISTIC },
    { 200, NULL, T0, TTL120, 120, FRESH_SRC_DEFAULT },
    { 200, NULL, T0, 0, 0, FRESH_SRC_NONE },
    { 500, NULL, T0, TTL120, 0, FRESH_SRC_NONE },
    { 404, NULL, T0, 0, 0, FRESH_SRC_NONE },
    { 200, "Cache-Control: max-age=abc\nDate: " D0 "\nExpires: " D0P3600, T0, 0, 0,
      FRESH_SRC_MAX_AGE },
    { 200, "Cache-Control: max-age=60, max-age=70", T0, 0, 0, FRESH_SRC_MAX_AGE },
    { 200, "Cache-Control: max-age=99999999999", T0, 0, 2147483648.0, FRESH_SRC_MAX_AGE },
    { 200, "Cache-Control: no-store, max-age=60", T0, 0, 60, FRESH_SRC_MAX_AGE },
    /* RFC 9213: the targeted field replaces Cache-Control and Expires */
    { 200, "CDN-Cache-Control: max-age=600\nCache-Control: max-age=60", T0, 0, 600,
      FRESH_SRC_MAX_AGE },
    { 200, "CDN-Cache-Control: no-transform\nDate: " D0 "\nExpires: " D0P3600, T0, 0, 0,
      FRESH_SRC_NONE },
    { 200, "Surrogate-Control: max-age=300\nCache-Control: max-age=10", T0, 0, 300,
      FRESH_SRC_MAX_AGE },
    { 200, "CDN-Cache-Control: max-age=60;x\nCache-Control: max-age=10", T0, 0, 60,
      FRESH_SRC_MAX_AGE },
    { 200, "CDN-Cache-Control: max-age=\"60\"\nCache-Control: max-age=10", T0, 0, 10,
      FRESH_SRC_MAX_AGE },
    { 200, "CDN-Cache-Control: max-age=60, ,\nCache-Control: max-age=10", T0, 0, 10,
      FRESH_SRC_MAX_AGE },
    { 200, "CDN-Cache-Control: s-maxage=5\nCache-Control: s-maxage=50", T0, 0, 5,
      FRESH_SRC_S_MAXAGE },
    { 200, "Surrogate-Control: max-age=30+60\nCache-Control: max-age=10", T0, 0, 30,
      FRESH_SRC_MAX_AGE },
};

START_TEST(lifetime)
{
    const struct lrow *r = &lrows[_i];
    struct fresh_cfg cfg = cfg_of(r->cfg);
    enum fresh_src src = (enum fresh_src) - 1;
    struct cc rcc;
    double got;

    resp.status = r->status;
    fill(&resp, r->h);
    cc_parse_response(&resp, NULL, &rcc);
    got = fresh_lifetime(&resp, &rcc, r->t_resp, &cfg, &src);
    ck_assert_msg(got == r->want, "[%d] lifetime %f, want %f", _i, got, r->want);
    ck_assert_msg(src == r->src, "[%d] src %s, want %s", _i, fresh_src_name(src),
                  fresh_src_name(r->src));
    ck_assert(fresh_lifetime(&resp, &rcc, r->t_resp, &cfg, NULL) == r->want);
}
END_TEST

/* ---------------------------------------------------------------------- */

static const struct srow {
    const char *method;
    const char *q; /* request header lines, or NULL */
    unsigned status;
    const char *h;
    unsigned cfg;
    enum fresh_store want;
} srows[] = {
    { "GET", NULL, 200, "Cache-Control: max-age=60", 0, FRESH_STORE },
    { "HEAD", NULL, 200, "Cache-Control: max-age=60", 0, FRESH_STORE },
    { "POST", NULL, 200, "Cache-Control: max-age=60", 0, FRESH_METHOD },
    { "get", NULL, 200, "Cache-Control: max-age=60", 0, FRESH_METHOD },
    { "PURGE", NULL, 200, "Cache-Control: max-age=60", 0, FRESH_METHOD },
    { "GET", NULL, 100, "Cache-Control: max-age=60", 0, FRESH_STATUS },
    { "GET", NULL, 199, "Cache-Control: max-age=60", 0, FRESH_STATUS },
    { "GET", NULL, 206, "Cache-Control: max-age=60", 0, FRESH_STATUS },
    { "GET", NULL, 304, "Cache-Control: max-age=60", 0, FRESH_STATUS },
    { "GET", NULL, 600, "Cache-Control: max-age=60", 0, FRESH_STATUS },
    { "GET", NULL, 207, "Cache-Control: max-age=60", 0, FRESH_STORE },
    { "GET", NULL, 299, "Cache-Control: must-understand, no-store, max-age=60", 0,
      FRESH_MUST_UNDERSTAND },
    { "GET", NULL, 200, "Cache-Control: must-understand, no-store, max-age=60", 0, FRESH_STORE },
    { "GET", NULL, 206, "Cache-Control: must-understand, no-store, max-age=60", 0, FRESH_STATUS },
    { "GET", NULL, 200, "Cache-Control: no-store, max-age=60", 0, FRESH_NO_STORE_RESP },
    { "GET", NULL, 200, "Cache-Control: must-understand=1, no-store, max-age=60", 0,
      FRESH_NO_STORE_RESP },
    { "GET", "Cache-Control: no-store", 200, "Cache-Control: max-age=60", 0, FRESH_NO_STORE_REQ },
    { "GET", NULL, 200, "Cache-Control: private, max-age=60", 0, FRESH_PRIVATE },
    { "GET", NULL, 200, "Cache-Control: private=\"Set-Cookie\", max-age=60", 0, FRESH_STORE },
    { "GET", NULL, 200, "Cache-Control: private, max-age=60\nSet-Cookie: a=b", 0, FRESH_PRIVATE },
    { "GET", "Authorization: Basic eDp5", 200, "Cache-Control: max-age=60", 0,
      FRESH_AUTHORIZATION },
    { "GET", "Authorization: Basic eDp5", 200, "Cache-Control: public, max-age=60", 0,
      FRESH_STORE },
    { "GET", "Authorization: Basic eDp5", 200, "Cache-Control: s-maxage=60", 0, FRESH_STORE },
    { "GET", "Authorization: Basic eDp5", 200, "Cache-Control: must-revalidate, max-age=60", 0,
      FRESH_STORE },
    { "GET", "Authorization: Basic eDp5", 200, "Cache-Control: proxy-revalidate, max-age=60", 0,
      FRESH_AUTHORIZATION },
    { "GET", "Authorization: Basic eDp5", 200, "ETag: \"x\"", 0, FRESH_AUTHORIZATION },
    { "GET", NULL, 200, "Cache-Control: max-age=60\nVary: *", 0, FRESH_VARY_STAR },
    { "GET", NULL, 200, "Cache-Control: max-age=60\nVary: Accept, *", 0, FRESH_VARY_STAR },
    { "GET", NULL, 200, "Cache-Control: max-age=60\nVary: Accept\nVary: *", 0, FRESH_VARY_STAR },
    { "GET", NULL, 200, "Cache-Control: max-age=60\nVary: Accept-Encoding", 0, FRESH_STORE },
    { "GET", NULL, 200, "Cache-Control: max-age=60\nSet-Cookie: a=b", 0, FRESH_SET_COOKIE },
    { "GET", NULL, 200, "Cache-Control: max-age=60\nSet-Cookie: a=b", COOKIE, FRESH_STORE },
    { "GET", NULL, 200, "Cache-Control: max-age=60, no-cache=\"set-cookie\"\nSet-Cookie: a=b", 0,
      FRESH_STORE },
    { "GET", NULL, 200, "Cache-Control: max-age=60, private=\"X-A, Set-Cookie\"\nSet-Cookie: a=b",
      0, FRESH_STORE },
    { "GET", NULL, 200, "Cache-Control: max-age=60, private=\"X-A\"\nSet-Cookie: a=b", 0,
      FRESH_SET_COOKIE },
    { "GET", NULL, 200, NULL, 0, FRESH_NO_FRESHNESS_NO_VALIDATOR },
    { "GET", NULL, 404, NULL, 0, FRESH_NO_FRESHNESS_NO_VALIDATOR },
    { "GET", NULL, 200, "ETag: \"x\"", 0, FRESH_STORE },
    { "GET", NULL, 200, "ETag: ", 0, FRESH_NO_FRESHNESS_NO_VALIDATOR },
    { "GET", NULL, 200, "Last-Modified: " D0, 0, FRESH_STORE },
    { "GET", NULL, 404, "Last-Modified: " D0, 0, FRESH_STORE },
    { "GET", NULL, 200, "Last-Modified: garbage", 0, FRESH_NO_FRESHNESS_NO_VALIDATOR },
    { "GET", NULL, 200, NULL, TTL120, FRESH_STORE },
    { "GET", NULL, 302, "ETag: \"x\"", 0, FRESH_NOT_CACHEABLE },
    { "GET", NULL, 500, NULL, TTL120, FRESH_NOT_CACHEABLE },
    { "GET", NULL, 302, "Cache-Control: max-age=60", 0, FRESH_STORE },
    { "GET", NULL, 500, "Expires: " D0, 0, FRESH_STORE },
    { "GET", NULL, 200, "Expires: 0", 0, FRESH_STORE },
    { "GET", NULL, 302, "Cache-Control: public", 0, FRESH_STORE },
    { "GET", NULL, 503, "Cache-Control: s-maxage=5", 0, FRESH_STORE },
    { "GET", NULL, 200, "Cache-Control: max-age=0", 0, FRESH_STORE },
    { "GET", NULL, 200, "Cache-Control: no-cache", 0, FRESH_NO_FRESHNESS_NO_VALIDATOR },
    { "GET", "Pragma: no-cache", 200, "Cache-Control: max-age=60", 0, FRESH_STORE },
    { "GET", "Cache-Control: max-age=0", 200, "Cache-Control: max-age=60", 0, FRESH_STORE },
    /* RFC 9213 */
    { "GET", NULL, 200, "CDN-Cache-Control: max-age=60\nCache-Control: private", 0, FRESH_STORE },
    { "GET", NULL, 200, "CDN-Cache-Control: no-store\nCache-Control: max-age=60", 0,
      FRESH_NO_STORE_RESP },
    { "GET", NULL, 302, "CDN-Cache-Control: no-transform\nExpires: " D0, 0, FRESH_NOT_CACHEABLE },
    { "GET", NULL, 302, "Surrogate-Control: max-age=60\nCache-Control: no-store", 0, FRESH_STORE },
};

START_TEST(storable)
{
    const struct srow *r = &srows[_i];
    struct fresh_cfg cfg = cfg_of(r->cfg);
    struct cc qcc, rcc;
    enum fresh_store got;

    req.method = T(r->method);
    fill(&req, r->q);
    resp.status = r->status;
    fill(&resp, r->h);
    cc_parse_request(&req, &qcc);
    cc_parse_response(&resp, NULL, &rcc);
    got = fresh_storable(&req, &qcc, &resp, &rcc, &cfg);
    ck_assert_msg(got == r->want, "[%d] %s, want %s", _i, fresh_store_name(got),
                  fresh_store_name(r->want));
}
END_TEST

START_TEST(names)
{
    ck_assert_str_eq(fresh_store_name(FRESH_STORE), "stored");
    ck_assert_str_eq(fresh_store_name(FRESH_NO_FRESHNESS_NO_VALIDATOR), "no-freshness");
    ck_assert_str_eq(fresh_store_name(FRESH_NO_STORE_RESP), "no-store");
    ck_assert_str_eq(fresh_store_name((enum fresh_store)99), "?");
    ck_assert_str_eq(fresh_store_why((enum fresh_store)99), "?");
    /* Each reason a distinct structured-field token (Cache-Status detail=), with its words. */
    for (int i = 0; i < FRESH_STORE__N; i++) {
        const char *t = fresh_store_name((enum fresh_store)i);
        ck_assert_msg(t[0] >= 'a' && t[0] <= 'z', "%s", t);
        ck_assert_msg(strspn(t, "abcdefghijklmnopqrstuvwxyz-") == strlen(t), "%s", t);
        ck_assert_msg(strlen(fresh_store_why((enum fresh_store)i)) > 5, "%s", t);
        for (int j = 0; j < i; j++)
            ck_assert_str_ne(t, fresh_store_name((enum fresh_store)j));
    }
    ck_assert_str_eq(fresh_src_name(FRESH_SRC_POLICY), "policy");
    ck_assert_str_eq(fresh_verdict_name(FRESH_V_STALE_WHILE_REVALIDATE), "stale-while-revalidate");
    ck_assert_str_eq(fresh_verdict_name(FRESH_V_GATEWAY_TIMEOUT), "gateway-timeout");
    ck_assert_str_eq(fresh_src_name(FRESH_SRC_HEURISTIC), "heuristic");
}
END_TEST

/* ---------------------------------------------------------------------- */

#define MR      FRESH_F_MUST_REVALIDATE
#define NC      FRESH_F_NO_CACHE
#define V_FRESH FRESH_V_FRESH
#define V_OK    FRESH_V_STALE_OK
#define V_SWR   FRESH_V_STALE_WHILE_REVALIDATE
#define V_SIE   FRESH_V_STALE_IF_ERROR
#define V_REV   FRESH_V_REVALIDATE
#define V_504   FRESH_V_GATEWAY_TIMEOUT

/* Objects originate at t = 1000. */
static const struct drow {
    double ttl, swr, sie;
    unsigned flags;
    const char *q; /* request header line, or NULL */
    double now;
    enum fresh_verdict want;
} drows[] = {
    { 60, 0, 0, 0, NULL, 1030, V_FRESH },
    { 60, 0, 0, 0, NULL, 1059.9, V_FRESH },
    { 60, 0, 0, 0, NULL, 1060, V_REV },  /* fresh while age < ttl */
    { 60, 0, 0, 0, NULL, 995, V_FRESH }, /* our clock behind the origin: age 0 */
    { 0, 0, 0, 0, NULL, 1000, V_REV },
    { 0, 10, 0, 0, NULL, 1005, V_SWR },
    /* client no-cache, object no-cache */
    { 60, 0, 0, 0, "Cache-Control: no-cache", 1010, V_REV },
    { 60, 0, 0, 0, "Pragma: no-cache", 1010, V_REV },
    { 60, 0, 0, 0, "Cache-Control: max-age=60", 1010, V_FRESH },
    { 60, 30, 100, 0, "Cache-Control: no-cache", 1070, V_REV },
    { 60, 0, 0, 0, "Cache-Control: no-cache, only-if-cached", 1010, V_504 },
    { 60, 0, 0, NC, NULL, 1010, V_REV },
    { 60, 0, 0, NC, "Cache-Control: max-stale", 1070, V_REV },
    { 60, 0, 0, NC, "Cache-Control: only-if-cached", 1010, V_504 },
    /* client max-age and min-fresh */
    { 60, 0, 0, 0, "Cache-Control: max-age=30", 1030, V_FRESH },
    { 60, 0, 0, 0, "Cache-Control: max-age=10", 1030, V_SIE },
    { 60, 0, 0, MR, "Cache-Control: max-age=10", 1030, V_SIE },
    { 60, 0, 0, 0, "Cache-Control: max-age=10, only-if-cached", 1030, V_504 },
    { 60, 0, 0, 0, "Cache-Control: min-fresh=30", 1030, V_FRESH },
    { 60, 0, 0, 0, "Cache-Control: min-fresh=31", 1030, V_SIE },
    { 60, 0, 0, 0, "Cache-Control: min-fresh=five", 1001, V_SIE },
    { 60, 30, 0, 0, "Cache-Control: max-age=0", 1070, V_REV },
    { 60, 30, 0, 0, "Cache-Control: max-age=100", 1070, V_SWR },
    { 60, 30, 0, 0, "Cache-Control: min-fresh=0", 1070, V_REV },
    /* stale-while-revalidate */
    { 60, 30, 0, 0, NULL, 1070, V_SWR },
    { 60, 30, 0, 0, NULL, 1090, V_SWR },
    { 60, 30, 0, 0, NULL, 1090.5, V_REV },
    { 60, 30, 0, MR, NULL, 1070, V_REV },
    { 60, 30, 0, 0, "Cache-Control: only-if-cached", 1070, V_SWR },
    { 60, 30, 0, 0, "Cache-Control: max-stale", 1070, V_SWR },
    /* stale-if-error, from the object or the request */
    { 60, 0, 100, 0, NULL, 1100, V_SIE },
    { 60, 0, 100, 0, NULL, 1160, V_SIE },
    { 60, 0, 100, 0, NULL, 1161, V_REV },
    { 60, 30, 100, 0, NULL, 1070, V_SWR },
    { 60, 30, 100, 0, NULL, 1100, V_SIE },
    { 60, 0, 100, 0, "Cache-Control: only-if-cached", 1100, V_504 },
    { 60, 0, 0, 0, "Cache-Control: stale-if-error=100", 1100, V_SIE },
    { 60, 0, 10, 0, "Cache-Control: stale-if-error=100", 1100, V_SIE },
    { 60, 0, 100, 0, "Cache-Control: stale-if-error=1", 1100, V_SIE },
    { 60, 0, 0, MR, "Cache-Control: stale-if-error=100", 1100, V_REV },
    { 60, 0, 0, 0, "Cache-Control: max-age=0, stale-if-error=100", 1100, V_SIE },
    /* client max-stale */
    { 60, 0, 0, 0, "Cache-Control: max-stale", 5000000, V_OK },
    { 60, 0, 0, 0, "Cache-Control: max-stale=10", 1065, V_OK },
    { 60, 0, 0, 0, "Cache-Control: max-stale=10", 1070, V_OK },
    { 60, 0, 0, 0, "Cache-Control: max-stale=10", 1071, V_REV },
    { 60, 0, 0, 0, "Cache-Control: max-stale=0", 1060, V_REV },
    { 60, 0, 0, MR, "Cache-Control: max-stale=10", 1065, V_REV },
    { 60, 0, 0, MR, "Cache-Control: max-stale, only-if-cached", 1065, V_504 },
    { 60, 0, 0, 0, "Cache-Control: max-stale=10, max-age=5", 1065, V_REV },
    { 60, 0, 0, 0, "Cache-Control: max-stale=10, min-fresh=1", 1065, V_REV },
    { 60, 0, 0, 0, "Cache-Control: max-stale, only-if-cached", 1070, V_OK },
    { 60, 0, 0, 0, "Cache-Control: max-stale, max-stale=5", 1062, V_REV },
    /* only-if-cached */
    { 60, 0, 0, 0, "Cache-Control: only-if-cached", 1030, V_FRESH },
    { 60, 0, 0, 0, "Cache-Control: only-if-cached", 1070, V_504 },
    { 60, 0, 0, MR, "Cache-Control: only-if-cached", 1070, V_504 },
};

START_TEST(decide)
{
    const struct drow *r = &drows[_i];
    struct fresh_obj o = { .t_origin = 1000, .ttl = r->ttl, .swr = r->swr, .sie = r->sie,
                           .keep = -1, .flags = r->flags, .src = FRESH_SRC_MAX_AGE };
    struct cc qcc;
    enum fresh_verdict got;

    fill(&req, r->q);
    cc_parse_request(&req, &qcc);
    got = fresh_decide(&o, &qcc, r->now);
    ck_assert_msg(got == r->want, "[%d] %s at %.1f: %s, want %s", _i, r->q ? r->q : "-", r->now,
                  fresh_verdict_name(got), fresh_verdict_name(r->want));
    if (r->q == NULL)
        ck_assert_int_eq(fresh_decide(&o, NULL, r->now), r->want);
}
END_TEST

START_TEST(decide_miss)
{
    struct cc qcc;

    ck_assert_int_eq(fresh_decide(NULL, NULL, 1000), FRESH_V_REVALIDATE);
    cc_init(&qcc);
    ck_assert_int_eq(fresh_decide(NULL, &qcc, 1000), FRESH_V_REVALIDATE);
    qcc.flags |= CC_ONLY_IF_CACHED;
    ck_assert_int_eq(fresh_decide(NULL, &qcc, 1000), FRESH_V_GATEWAY_TIMEOUT);
}
END_TEST

/* ---------------------------------------------------------------------- */

static void
obj_from(const char *h, double t_req, double t_resp, unsigned cfgmod, struct fresh_obj *o)
{
    struct fresh_cfg cfg = cfg_of(cfgmod);
    struct cc rcc;

    fill(&resp, h);
    cc_parse_response(&resp, NULL, &rcc);
    memset(o, 0x77, sizeof *o);
    fresh_obj_init(o, &resp, &rcc, t_req, t_resp, &cfg);
}

/* Section 4.2.3 end to end: Date 10 s behind, Age 30, 2 s round trip. */
START_TEST(obj_age_walk)
{
    struct fresh_obj o;

    obj_from("Date: " D0 "\nAge: 30\nCache-Control: max-age=60", T0 + 8, T0 + 10, 0, &o);
    ck_assert(o.t_origin == T0 + 10 - 32); /* max(apparent 10, 30 + 2) */
    ck_assert(o.ttl == 60);
    ck_assert_int_eq(o.src, FRESH_SRC_MAX_AGE);
    ck_assert_uint_eq(o.flags, 0);
    ck_assert(o.swr == 0 && o.sie == 0);
    ck_assert_int_eq(fresh_decide(&o, NULL, T0 + 10), FRESH_V_FRESH);
    ck_assert_int_eq(fresh_decide(&o, NULL, T0 + 37.9), FRESH_V_FRESH);
    ck_assert_int_eq(fresh_decide(&o, NULL, T0 + 38), FRESH_V_REVALIDATE);
    ck_assert(fresh_current_age(32, T0 + 10, T0 + 38) == 60);
}
END_TEST

START_TEST(obj_apparent_wins)
{
    struct fresh_obj o;

    obj_from("Date: " D0M100 "\nAge: 5\nCache-Control: max-age=300", T0 - 1, T0, 0, &o);
    ck_assert(o.t_origin == T0 - 100);
    ck_assert_int_eq(fresh_decide(&o, NULL, T0 + 199), FRESH_V_FRESH);
    ck_assert_int_eq(fresh_decide(&o, NULL, T0 + 200), FRESH_V_REVALIDATE);
}
END_TEST

START_TEST(obj_huge_age)
{
    struct fresh_obj o;

    obj_from("Age: 99999999999999\nCache-Control: max-age=2147483648", T0, T0, 0, &o);
    ck_assert(o.t_origin == T0 - 2147483648.0);
    ck_assert(o.ttl == 2147483648.0);
    ck_assert_int_eq(fresh_decide(&o, NULL, T0), FRESH_V_REVALIDATE);
}
END_TEST

START_TEST(obj_invalid_age_ignored)
{
    struct fresh_obj o;

    obj_from("Age: -30\nCache-Control: max-age=60", T0, T0, 0, &o);
    ck_assert(o.t_origin == T0);
}
END_TEST

START_TEST(obj_flags_and_windows)
{
    static const struct {
        const char *cc;
        unsigned cfg;
        unsigned flags;
        double swr, sie;
    } v[] = {
        { "max-age=60", 0, 0, 0, 0 },
        { "max-age=60", GRACE10, 0, 10, 0 },
        { "max-age=60, stale-while-revalidate=5", GRACE10, 0, 5, 0 },
        { "max-age=60, stale-while-revalidate=0", GRACE10, 0, 0, 0 },
        { "max-age=60, stale-while-revalidate=30, stale-if-error=600", 0, 0, 30, 600 },
        { "max-age=60, must-revalidate, stale-while-revalidate=30, stale-if-error=600", GRACE10,
          FRESH_F_MUST_REVALIDATE, 0, 0 },
        { "max-age=60, proxy-revalidate, stale-if-error=600", 0, FRESH_F_MUST_REVALIDATE, 0, 0 },
        { "s-maxage=60, stale-while-revalidate=30", 0, FRESH_F_MUST_REVALIDATE, 0, 0 },
        { "no-cache, stale-if-error=600", GRACE10, FRESH_F_NO_CACHE, 0, 0 },
        { "no-cache=\"Set-Cookie\", max-age=60", 0, 0, 0, 0 },
        { "max-age=60, immutable", 0, FRESH_F_IMMUTABLE, 0, 0 },
        { "max-age=60, stale-if-error=x", 0, 0, 0, 0 },
        /* default_stale_if_error: for responses without the directive, never when forbidden */
        { "max-age=60", SIE300, 0, 0, 300 },
        { "max-age=60, stale-if-error=5", SIE300, 0, 0, 5 },
        { "max-age=60, stale-if-error=0", SIE300, 0, 0, 0 },
        { "max-age=60, must-revalidate", SIE300, FRESH_F_MUST_REVALIDATE, 0, 0 },
        { "max-age=60, proxy-revalidate", SIE300, FRESH_F_MUST_REVALIDATE, 0, 0 },
        { "s-maxage=60", SIE300, FRESH_F_MUST_REVALIDATE, 0, 0 },
        { "max-age=60, no-cache", SIE300, FRESH_F_NO_CACHE, 0, 0 },
    };
    struct fresh_obj o;

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        char line[160];

        setup();
        strcpy(line, "Cache-Control: ");
        strcat(line, v[i].cc);
        obj_from(line, T0, T0, v[i].cfg, &o);
        ck_assert_msg(o.flags == v[i].flags, "[%zu] flags %#x", i, o.flags);
        ck_assert_msg(o.swr == v[i].swr, "[%zu] swr %f", i, o.swr);
        ck_assert_msg(o.sie == v[i].sie, "[%zu] sie %f", i, o.sie);
    }
}
END_TEST

/* No freshness, no validator: with the default default_ttl never served unvalidated. */
START_TEST(obj_no_info)
{
    static const char h[] = "Content-Type: text/plain";
    struct fresh_obj o;

    obj_from(h, T0, T0, 0, &o);
    ck_assert(o.ttl == 0);
    ck_assert_int_eq(o.src, FRESH_SRC_NONE);
    ck_assert_int_eq(fresh_decide(&o, NULL, T0), FRESH_V_REVALIDATE);
    setup();
    obj_from(h, T0, T0, TTL120, &o);
    ck_assert(o.ttl == 120);
    ck_assert_int_eq(fresh_decide(&o, NULL, T0 + 119), FRESH_V_FRESH);
}
END_TEST

START_TEST(obj_dump)
{
    struct fresh_obj o = { .t_origin = 1000, .ttl = 60, .swr = 30, .sie = 0, .keep = -1,
                           .flags = FRESH_F_MUST_REVALIDATE | FRESH_F_IMMUTABLE,
                           .src = FRESH_SRC_S_MAXAGE };
    char buf[160];
    struct sb sb;

    sb_init(&sb, buf, sizeof buf);
    fresh_obj_dump(&o, &sb);
    ck_assert_str_eq(buf, "ttl=60.000 swr=30.000 sie=0.000 src=s-maxage t_origin=1000.000 "
                          "must-revalidate immutable");
}
END_TEST

/* Which response fields a stored head may keep, for the directives on the left. */
START_TEST(field_storable)
{
    static const struct {
        const char *cc;
        const char *field;
        bool keep;
    } v[] = {
        { "max-age=60", "Set-Cookie", false },
        { "max-age=60", "set-cookie", false },
        { "max-age=60", "Content-Type", true },
        { "max-age=60, no-cache=\"Set-Cookie, X-User\"", "X-User", false },
        { "max-age=60, no-cache=\"Set-Cookie, X-User\"", "x-user", false },
        { "max-age=60, no-cache=\"Set-Cookie, X-User\"", "X-Users", true },
        { "max-age=60, private=\"X-Session\"", "X-Session", false },
        { "max-age=60, private=\"X-Session\"", "ETag", true },
        { "no-cache=X-Token, max-age=60", "X-Token", false },
    };

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        struct txt name = T(v[i].field);
        struct cc cc;

        setup();
        fill(&resp, "Cache-Control: x");
        resp.hdr[0].val = T(v[i].cc);
        cc_parse_response(&resp, NULL, &cc);
        ck_assert_msg(fresh_field_storable(&name, &cc) == v[i].keep, "%s / %s", v[i].cc,
                      v[i].field);
    }
}
END_TEST

START_TEST(storable_null_is_a_bug)
{
    struct fresh_cfg cfg = FRESH_CFG_DEFAULT;
    struct cc cc;

    cc_init(&cc);
    (void)fresh_storable(&req, &cc, NULL, &cc, &cfg);
}
END_TEST

Suite *
fresh_suite(void)
{
    Suite *s = suite_create("fresh");
    TCase *tc;

    tc = tcase_create("date");
    tcase_add_loop_test(tc, date_good, 0, (int)(sizeof good_dates / sizeof good_dates[0]));
    tcase_add_loop_test(tc, date_bad, 0, (int)(sizeof bad_dates / sizeof bad_dates[0]));
    tcase_add_test(tc, date_bounds);
    suite_add_tcase(s, tc);

    tc = tcase_create("age");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, age_arithmetic);
    tcase_add_test(tc, age_value);
    tcase_add_test(tc, date_value);
    suite_add_tcase(s, tc);

    tc = tcase_create("lifetime");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_loop_test(tc, lifetime, 0, (int)(sizeof lrows / sizeof lrows[0]));
    suite_add_tcase(s, tc);

    tc = tcase_create("storable");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_loop_test(tc, storable, 0, (int)(sizeof srows / sizeof srows[0]));
    tcase_add_test(tc, names);
    tcase_add_test(tc, field_storable);
    tcase_add_test_raise_signal(tc, storable_null_is_a_bug, SIGABRT);
    suite_add_tcase(s, tc);

    tc = tcase_create("decide");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_loop_test(tc, decide, 0, (int)(sizeof drows / sizeof drows[0]));
    tcase_add_test(tc, decide_miss);
    tcase_add_test(tc, obj_age_walk);
    tcase_add_test(tc, obj_apparent_wins);
    tcase_add_test(tc, obj_huge_age);
    tcase_add_test(tc, obj_invalid_age_ignored);
    tcase_add_test(tc, obj_flags_and_windows);
    tcase_add_test(tc, obj_no_info);
    tcase_add_test(tc, obj_dump);
    suite_add_tcase(s, tc);
    return s;
}
