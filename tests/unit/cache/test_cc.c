/*
 * cc: Cache-Control parsing (RFC 9111 section 5.2, RFC 5861, RFC 9213).
 * Each row is one or two field lines and the exact struct cc they must
 * give: every flag and every delta, so a directive that leaks into
 * another, or an invalid one that is not made restrictive, fails.
 * Targeted fields (CDN-Cache-Control) are RFC 8941 Dictionaries whose
 * directives must have the types RFC 9213 infers, or are ignored whole.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "unit.h"
#include "surogat/cc.h"
#include "surogat/http.h"
#include "surogat/sb.h"

#define NHDR 8
static struct http_hdr hdrs[NHDR];
static struct http hp;

static struct txt
T(const char *s) {
    return (struct txt){ s, strlen(s) };
}

static void
add(const char *n, const char *v)
{
    ck_assert_int_eq(http_add(&hp, T(n), T(v)), 0);
}

static void
setup(void)
{
    http_init(&hp, hdrs, NHDR);
}

#define _   CC_ABSENT
#define M   CC_DELTA_MAX
#define OK  CC_OK
#define SYN CC_E_SYNTAX
#define NON CC_NONE
#define INV CC_INVALID
#define MAL CC_MALFORMED

static const struct row {
    const char *v1, *v2; /* field lines; v2 may be NULL, v1 NULL for no field */
    enum cc_status st;
    unsigned flags;
    int64_t max_age, s_maxage, swr, sie, max_stale, min_fresh;
    const char *ncf, *pf; /* no_cache_fields, private_fields, or NULL */
} rows[] = {
    /* max-age: spelling, spacing, quoting */
    { "max-age=60", NULL, OK, 0, 60, _, _, _, _, _, NULL, NULL },
    { "MAX-AGE=60", NULL, OK, 0, 60, _, _, _, _, _, NULL, NULL },
    { "Max-Age=60", NULL, OK, 0, 60, _, _, _, _, _, NULL, NULL },
    { "  max-age=60  ", NULL, OK, 0, 60, _, _, _, _, _, NULL, NULL },
    { "max-age = 60", NULL, OK, 0, 60, _, _, _, _, _, NULL, NULL },
    { "max-age\t=\t60", NULL, OK, 0, 60, _, _, _, _, _, NULL, NULL },
    { "max-age=\"60\"", NULL, OK, 0, 60, _, _, _, _, _, NULL, NULL },
    { "max-age=00060", NULL, OK, 0, 60, _, _, _, _, _, NULL, NULL },
    { "max-age=0", NULL, OK, 0, 0, _, _, _, _, _, NULL, NULL },
    /* max-age: invalid values are stale (0) */
    { "max-age=\"6\\0\"", NULL, OK, INV, 0, _, _, _, _, _, NULL, NULL },
    { "max-age=-1", NULL, OK, INV, 0, _, _, _, _, _, NULL, NULL },
    { "max-age=abc", NULL, OK, INV, 0, _, _, _, _, _, NULL, NULL },
    { "max-age=1.5", NULL, OK, INV, 0, _, _, _, _, _, NULL, NULL },
    { "max-age=+60", NULL, OK, INV, 0, _, _, _, _, _, NULL, NULL },
    { "max-age=60s", NULL, OK, INV, 0, _, _, _, _, _, NULL, NULL },
    { "max-age=\"\"", NULL, OK, INV, 0, _, _, _, _, _, NULL, NULL },
    { "max-age=\" 60\"", NULL, OK, INV, 0, _, _, _, _, _, NULL, NULL },
    { "max-age", NULL, OK, INV, 0, _, _, _, _, _, NULL, NULL },
    { "max-age=", NULL, SYN, INV | MAL, 0, _, _, _, _, _, NULL, NULL },
    { "max-age==5", NULL, SYN, INV | MAL, 0, _, _, _, _, _, NULL, NULL },
    { "max-age=60 s", NULL, SYN, INV | MAL, 0, _, _, _, _, _, NULL, NULL },
    { "max-age=5;foo", NULL, SYN, INV | MAL, 0, _, _, _, _, _, NULL, NULL },
    { "max-age=5 public", NULL, SYN, INV | MAL, 0, _, _, _, _, _, NULL, NULL },
    { "max-age 60", NULL, SYN, INV | MAL, 0, _, _, _, _, _, NULL, NULL },
    { "max-age=30+60", NULL, OK, INV, 0, _, _, _, _, _, NULL, NULL },
    /* duplicates: equal values are fine, different ones are stale */
    { "max-age=60, max-age=60", NULL, OK, 0, 60, _, _, _, _, _, NULL, NULL },
    { "max-age=5, MAX-AGE=\"5\"", NULL, OK, 0, 5, _, _, _, _, _, NULL, NULL },
    { "max-age=60, max-age=120", NULL, OK, INV, 0, _, _, _, _, _, NULL, NULL },
    { "max-age=60", "max-age=120", OK, INV, 0, _, _, _, _, _, NULL, NULL },
    { "max-age=60, max-age=x, max-age=60", NULL, OK, INV, 0, _, _, _, _, _, NULL, NULL },
    { "max-age=2147483648, max-age=99999999999", NULL, OK, 0, M, _, _, _, _, _, NULL, NULL },
    /* overflow clamps to 2^31 (section 1.2.2) */
    { "max-age=2147483647", NULL, OK, 0, 2147483647, _, _, _, _, _, NULL, NULL },
    { "max-age=2147483648", NULL, OK, 0, M, _, _, _, _, _, NULL, NULL },
    { "max-age=2147483649", NULL, OK, 0, M, _, _, _, _, _, NULL, NULL },
    { "max-age=99999999999999999999999999999999", NULL, OK, 0, M, _, _, _, _, _, NULL, NULL },
    /* s-maxage */
    { "s-maxage=30", NULL, OK, 0, _, 30, _, _, _, _, NULL, NULL },
    { "S-MAXAGE=\"10\"", NULL, OK, 0, _, 10, _, _, _, _, NULL, NULL },
    { "s-maxage=30, max-age=60", NULL, OK, 0, 60, 30, _, _, _, _, NULL, NULL },
    { "s-maxage=x", NULL, OK, INV, _, 0, _, _, _, _, NULL, NULL },
    { "s-maxage=1, s-maxage=2, max-age=9", NULL, OK, INV, 9, 0, _, _, _, _, NULL, NULL },
    /* flags */
    { "no-store", NULL, OK, CC_NO_STORE, _, _, _, _, _, _, NULL, NULL },
    { "NO-STORE", NULL, OK, CC_NO_STORE, _, _, _, _, _, _, NULL, NULL },
    { "no-store=1", NULL, OK, CC_NO_STORE, _, _, _, _, _, _, NULL, NULL },
    { "no-store junk", NULL, SYN, CC_NO_STORE | MAL, _, _, _, _, _, _, NULL, NULL },
    { "public", NULL, OK, CC_PUBLIC, _, _, _, _, _, _, NULL, NULL },
    { "public=1", NULL, OK, INV, _, _, _, _, _, _, NULL, NULL },
    { "public=\"x\"", NULL, OK, INV, _, _, _, _, _, _, NULL, NULL },
    { "public junk", NULL, SYN, INV | MAL, _, _, _, _, _, _, NULL, NULL },
    { "must-revalidate", NULL, OK, CC_MUST_REVALIDATE, _, _, _, _, _, _, NULL, NULL },
    { "must-revalidate=\"x\"", NULL, OK, CC_MUST_REVALIDATE, _, _, _, _, _, _, NULL, NULL },
    { "proxy-revalidate", NULL, OK, CC_PROXY_REVALIDATE, _, _, _, _, _, _, NULL, NULL },
    { "no-transform", NULL, OK, CC_NO_TRANSFORM, _, _, _, _, _, _, NULL, NULL },
    { "must-understand, no-store", NULL, OK, CC_MUST_UNDERSTAND | CC_NO_STORE, _, _, _, _, _, _,
      NULL, NULL },
    { "must-understand=1", NULL, OK, INV, _, _, _, _, _, _, NULL, NULL },
    { "immutable", NULL, OK, CC_IMMUTABLE, _, _, _, _, _, _, NULL, NULL },
    { "immutable=yes", NULL, OK, INV, _, _, _, _, _, _, NULL, NULL },
    { "only-if-cached", NULL, OK, CC_ONLY_IF_CACHED, _, _, _, _, _, _, NULL, NULL },
    { "private, public", NULL, OK, CC_PRIVATE | CC_PUBLIC, _, _, _, _, _, _, NULL, NULL },
    { "no-store, no-store", NULL, OK, CC_NO_STORE, _, _, _, _, _, _, NULL, NULL },
    /* no-cache and private, bare or with field names */
    { "no-cache", NULL, OK, CC_NO_CACHE, _, _, _, _, _, _, NULL, NULL },
    { "No-Cache", NULL, OK, CC_NO_CACHE, _, _, _, _, _, _, NULL, NULL },
    { "no-cache=\"Set-Cookie\"", NULL, OK, CC_NO_CACHE_FIELDS, _, _, _, _, _, _, "Set-Cookie",
      NULL },
    { "no-cache=\"Set-Cookie, X-Foo\"", NULL, OK, CC_NO_CACHE_FIELDS, _, _, _, _, _, _,
      "Set-Cookie, X-Foo", NULL },
    { "no-cache=Set-Cookie", NULL, OK, CC_NO_CACHE_FIELDS, _, _, _, _, _, _, "Set-Cookie", NULL },
    { "no-cache = \"a\" , max-age=5", NULL, OK, CC_NO_CACHE_FIELDS, 5, _, _, _, _, _, "a", NULL },
    { "no-cache=\"\"", NULL, OK, CC_NO_CACHE, _, _, _, _, _, _, NULL, NULL },
    { "no-cache=\" , \"", NULL, OK, CC_NO_CACHE, _, _, _, _, _, _, NULL, NULL },
    { "no-cache=\"a\", no-cache", NULL, OK, CC_NO_CACHE, _, _, _, _, _, _, NULL, NULL },
    { "no-cache, no-cache=\"a\"", NULL, OK, CC_NO_CACHE, _, _, _, _, _, _, NULL, NULL },
    { "no-cache=\"a\", no-cache=\"a\"", NULL, OK, CC_NO_CACHE_FIELDS, _, _, _, _, _, _, "a", NULL },
    { "no-cache=\"a\", no-cache=\"b\"", NULL, OK, CC_NO_CACHE | INV, _, _, _, _, _, _, NULL, NULL },
    { "no-cache=\"Set-Cookie\"", "no-cache=\"set-cookie\"", OK, CC_NO_CACHE | INV, _, _, _, _, _, _,
      NULL, NULL },
    { "no-cache=\"Set-Cookie", NULL, SYN, CC_NO_CACHE | INV | MAL, _, _, _, _, _, _, NULL, NULL },
    { "no-cache=\"Set\\-Cookie\"", NULL, OK, CC_NO_CACHE | INV, _, _, _, _, _, _, NULL, NULL },
    { "private", NULL, OK, CC_PRIVATE, _, _, _, _, _, _, NULL, NULL },
    { "private=\"Set-Cookie\"", NULL, OK, CC_PRIVATE_FIELDS, _, _, _, _, _, _, NULL, "Set-Cookie" },
    { "private=\"x\", public, max-age=9", NULL, OK, CC_PRIVATE_FIELDS | CC_PUBLIC, 9, _, _, _, _, _,
      NULL, "x" },
    { "private=\"a\", private", NULL, OK, CC_PRIVATE, _, _, _, _, _, _, NULL, NULL },
    { "no-cache=\"a,b\", private=\"c\"", NULL, OK, CC_NO_CACHE_FIELDS | CC_PRIVATE_FIELDS, _, _, _,
      _, _, _, "a,b", "c" },
    /* RFC 5861 */
    { "stale-while-revalidate=30", NULL, OK, 0, _, _, 30, _, _, _, NULL, NULL },
    { "stale-if-error=86400", NULL, OK, 0, _, _, _, 86400, _, _, NULL, NULL },
    { "max-age=1, stale-while-revalidate=2, stale-if-error=3", NULL, OK, 0, 1, _, 2, 3, _, _, NULL,
      NULL },
    { "stale-while-revalidate", NULL, OK, INV, _, _, 0, _, _, _, NULL, NULL },
    { "stale-if-error=5, stale-if-error=6", NULL, OK, INV, _, _, _, 0, _, _, NULL, NULL },
    { "stale-while-revalidate=-5", NULL, OK, INV, _, _, 0, _, _, _, NULL, NULL },
    /* request directives */
    { "max-stale", NULL, OK, CC_MAX_STALE_ANY, _, _, _, _, M, _, NULL, NULL },
    { "max-stale=10", NULL, OK, 0, _, _, _, _, 10, _, NULL, NULL },
    { "max-stale=\"10\"", NULL, OK, 0, _, _, _, _, 10, _, NULL, NULL },
    { "max-stale=x", NULL, OK, INV, _, _, _, _, _, _, NULL, NULL },
    { "max-stale, max-stale=10", NULL, OK, INV, _, _, _, _, _, _, NULL, NULL },
    { "max-stale=10, max-stale=10", NULL, OK, 0, _, _, _, _, 10, _, NULL, NULL },
    { "max-stale, max-stale", NULL, OK, CC_MAX_STALE_ANY, _, _, _, _, M, _, NULL, NULL },
    { "min-fresh=5", NULL, OK, 0, _, _, _, _, _, 5, NULL, NULL },
    { "min-fresh=five", NULL, OK, INV, _, _, _, _, _, M, NULL, NULL },
    { "min-fresh=5, min-fresh=6", NULL, OK, INV, _, _, _, _, _, M, NULL, NULL },
    { "max-age=0, no-cache, only-if-cached, max-stale=5, min-fresh=1", NULL, OK,
      CC_NO_CACHE | CC_ONLY_IF_CACHED, 0, _, _, _, 5, 1, NULL, NULL },
    /* unknown directives, whatever their value */
    { "foo", NULL, OK, 0, _, _, _, _, _, _, NULL, NULL },
    { "foo=bar, max-age=5", NULL, OK, 0, 5, _, _, _, _, _, NULL, NULL },
    { "foo=\"a, max-age=1, b\", max-age=5", NULL, OK, 0, 5, _, _, _, _, _, NULL, NULL },
    { "foo=\"a\\\", max-age=1\", max-age=5", NULL, OK, 0, 5, _, _, _, _, _, NULL, NULL },
    { "foo=\"x,no-store\",max-age=5", NULL, OK, 0, 5, _, _, _, _, _, NULL, NULL },
    { "max-agex=5, max-ag=6, xmax-age=7", NULL, OK, 0, _, _, _, _, _, _, NULL, NULL },
    { "community=\"UCI\"", NULL, OK, 0, _, _, _, _, _, _, NULL, NULL },
    { "foo=\"unterminated, max-age=5", NULL, SYN, MAL, _, _, _, _, _, _, NULL, NULL },
    { "foo=\"a\"b, max-age=5", NULL, SYN, MAL, 5, _, _, _, _, _, NULL, NULL },
    /* list syntax */
    { "max-age=5,,,public", NULL, OK, CC_PUBLIC, 5, _, _, _, _, _, NULL, NULL },
    { "max-age=5 , public", NULL, OK, CC_PUBLIC, 5, _, _, _, _, _, NULL, NULL },
    { "max-age=5\t,\tpublic", NULL, OK, CC_PUBLIC, 5, _, _, _, _, _, NULL, NULL },
    { "public,max-age=5", NULL, OK, CC_PUBLIC, 5, _, _, _, _, _, NULL, NULL },
    { ", , public ,", NULL, OK, CC_PUBLIC, _, _, _, _, _, _, NULL, NULL },
    { ",,, ,", NULL, NON, 0, _, _, _, _, _, _, NULL, NULL },
    { "", NULL, NON, 0, _, _, _, _, _, _, NULL, NULL },
    { " \t ", NULL, NON, 0, _, _, _, _, _, _, NULL, NULL },
    { NULL, NULL, NON, 0, _, _, _, _, _, _, NULL, NULL },
    { "=5", NULL, SYN, MAL, _, _, _, _, _, _, NULL, NULL },
    { "\"max-age=5\"", NULL, SYN, MAL, _, _, _, _, _, _, NULL, NULL },
    { "max-age=5, \xff\xfe, public", NULL, SYN, CC_PUBLIC | MAL, 5, _, _, _, _, _, NULL, NULL },
    { "max-age=5, public;x=1", NULL, SYN, INV | MAL, 5, _, _, _, _, _, NULL, NULL },
    /* several field lines make one list */
    { "public", "max-age=10", OK, CC_PUBLIC, 10, _, _, _, _, _, NULL, NULL },
    { "foo=\"a", "max-age=10", SYN, MAL, 10, _, _, _, _, _, NULL, NULL },
    { "", "no-store", OK, CC_NO_STORE, _, _, _, _, _, _, NULL, NULL },
    { "no-cache=\"a", "b\"", SYN, CC_NO_CACHE | INV | MAL, _, _, _, _, _, _, NULL, NULL },
};

static bool
txt_is(const struct txt *t, const char *want)
{
    if (want == NULL)
        return t->b == NULL && t->len == 0;
    return t->len == strlen(want) && memcmp(t->b, want, t->len) == 0;
}

START_TEST(table)
{
    const struct row *r = &rows[_i];
    struct cc cc;
    enum cc_status st;

    if (r->v1 != NULL)
        add("Cache-Control", r->v1);
    if (r->v2 != NULL)
        add("cache-control", r->v2);
    add("X-Other", "max-age=999, no-store"); /* never read */
    memset(&cc, 0x5a, sizeof cc);
    st = cc_parse(&hp, "Cache-Control", &cc);
    ck_assert_msg(st == r->st, "[%d] \"%s\": status %d, want %d", _i, r->v1, st, r->st);
    ck_assert_msg(cc.flags == r->flags, "[%d] \"%s\": flags %#x, want %#x", _i, r->v1, cc.flags,
                  r->flags);
    ck_assert_msg(cc.max_age == r->max_age, "[%d] max_age %lld", _i, (long long)cc.max_age);
    ck_assert_msg(cc.s_maxage == r->s_maxage, "[%d] s_maxage %lld", _i, (long long)cc.s_maxage);
    ck_assert_msg(cc.swr == r->swr, "[%d] swr %lld", _i, (long long)cc.swr);
    ck_assert_msg(cc.sie == r->sie, "[%d] sie %lld", _i, (long long)cc.sie);
    ck_assert_msg(cc.max_stale == r->max_stale, "[%d] max_stale %lld", _i, (long long)cc.max_stale);
    ck_assert_msg(cc.min_fresh == r->min_fresh, "[%d] min_fresh %lld", _i, (long long)cc.min_fresh);
    ck_assert_msg(txt_is(&cc.no_cache_fields, r->ncf), "[%d] no_cache_fields \"%.*s\"", _i,
                  (int)cc.no_cache_fields.len, cc.no_cache_fields.b);
    ck_assert_msg(txt_is(&cc.private_fields, r->pf), "[%d] private_fields \"%.*s\"", _i,
                  (int)cc.private_fields.len, cc.private_fields.b);
    if (st == CC_NONE)
        ck_assert_ptr_null(cc.src);
    else
        ck_assert_str_eq(cc.src, "Cache-Control");
}
END_TEST

/* The Edge Architecture's max-age=N+M, only in Surrogate-Control. */
START_TEST(surrogate)
{
    static const struct {
        const char *v;
        int64_t max_age;
        unsigned flags;
    } v[] = {
        { "max-age=30+60", 30, 0 },
        { "content=\"ESI/1.0\", max-age=60", 60, 0 },
        { "max-age=60, content=\"ESI/1.0, x\"", 60, 0 },
        { "max-age=30+", 0, CC_INVALID },
        { "max-age=+60", 0, CC_INVALID },
        { "max-age=30+6x", 0, CC_INVALID },
        { "max-age=30+60+1", 0, CC_INVALID },
        { "no-store-remote, max-age=5", 5, 0 },
        { "no-store", CC_ABSENT, CC_NO_STORE },
    };
    struct cc cc;

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        setup();
        add("Surrogate-Control", v[i].v);
        ck_assert_int_eq(cc_parse(&hp, "surrogate-control", &cc), CC_OK);
        ck_assert_msg(cc.max_age == v[i].max_age, "\"%s\": %lld", v[i].v, (long long)cc.max_age);
        ck_assert_uint_eq(cc.flags, v[i].flags);
        ck_assert_int_eq(cc_parse(&hp, "Cache-Control", &cc), CC_NONE);
    }
}
END_TEST

START_TEST(request_pragma)
{
    static const struct {
        const char *cc, *pragma;
        unsigned flags;
        const char *src;
    } v[] = {
        { NULL, "no-cache", CC_NO_CACHE | CC_PRAGMA, "Pragma" },
        { NULL, "No-Cache", CC_NO_CACHE | CC_PRAGMA, "Pragma" },
        { NULL, "foo, no-cache", CC_NO_CACHE | CC_PRAGMA, "Pragma" },
        { NULL, "no-cachex", 0, NULL },
        { NULL, NULL, 0, NULL },
        { "max-age=5", "no-cache", 0, "Cache-Control" }, /* Cache-Control wins (5.4) */
        { "", "no-cache", 0, NULL },                     /* present though empty: Pragma ignored */
        { "no-store", "no-cache", CC_NO_STORE, "Cache-Control" },
        { "only-if-cached", NULL, CC_ONLY_IF_CACHED, "Cache-Control" },
    };
    struct cc cc;

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        setup();
        if (v[i].cc != NULL)
            add("Cache-Control", v[i].cc);
        if (v[i].pragma != NULL)
            add("Pragma", v[i].pragma);
        cc_parse_request(&hp, &cc);
        ck_assert_msg(cc.flags == v[i].flags, "[%zu] flags %#x", i, cc.flags);
        if (v[i].src == NULL)
            ck_assert_ptr_null(cc.src);
        else
            ck_assert_str_eq(cc.src, v[i].src);
    }
}
END_TEST

/*
 * cc_parse_targeted: RFC 8941 Dictionaries with the directive types RFC
 * 9213 infers.  Each row: the field lines, the status, and what it gives.
 */
START_TEST(targeted_table)
{
    static const struct {
        const char *v1, *v2;
        enum cc_status st;
        unsigned flags;
        int64_t max_age, s_maxage, swr, max_stale;
        const char *ncf, *pf;
    } v[] = {
        { "max-age=60", NULL, OK, 0, 60, _, _, _, NULL, NULL },
        { "  max-age=60  ", NULL, OK, 0, 60, _, _, _, NULL, NULL },
        { "max-age=60,s-maxage=5", NULL, OK, 0, 60, 5, _, _, NULL, NULL },
        { "max-age=60 ,\ts-maxage=5", NULL, OK, 0, 60, 5, _, _, NULL, NULL },
        { "max-age=60", "s-maxage=5", OK, 0, 60, 5, _, _, NULL, NULL },
        { "max-age=1, max-age=60", NULL, OK, 0, 60, _, _, _, NULL, NULL },
        { "max-age=1", "max-age=60", OK, 0, 60, _, _, _, NULL, NULL },
        { "max-age=0", NULL, OK, 0, 0, _, _, _, NULL, NULL },
        { "max-age=999999999999999", NULL, OK, 0, M, _, _, _, NULL, NULL },
        { "max-age=60;a=1;b, stale-while-revalidate=30", NULL, OK, 0, 60, _, 30, _, NULL, NULL },
        { "no-store, no-transform, must-revalidate", NULL, OK,
          CC_NO_STORE | CC_NO_TRANSFORM | CC_MUST_REVALIDATE, _, _, _, _, NULL, NULL },
        { "public=?1, immutable", NULL, OK, CC_PUBLIC | CC_IMMUTABLE, _, _, _, _, NULL, NULL },
        { "no-cache", NULL, OK, CC_NO_CACHE, _, _, _, _, NULL, NULL },
        { "no-cache=\"Set-Cookie, X-A\"", NULL, OK, CC_NO_CACHE_FIELDS, _, _, _, _,
          "Set-Cookie, X-A", NULL },
        { "private=\"X-A\", max-age=5", NULL, OK, CC_PRIVATE_FIELDS, 5, _, _, _, NULL, "X-A" },
        { "private=\"\"", NULL, OK, CC_PRIVATE, _, _, _, _, NULL, NULL },
        /* A list we cannot read exactly is the whole response, as in Cache-Control. */
        { "private=\"X-\\\"A\"", NULL, OK, CC_PRIVATE | CC_INVALID, _, _, _, _, NULL, NULL },
        { "max-stale", NULL, OK, CC_MAX_STALE_ANY, _, _, _, M, NULL, NULL },
        { "max-stale=7", NULL, OK, 0, _, _, _, 7, NULL, NULL },
        /* Unknown directives: any value, any type. */
        { "x=1.5, y=\"s\", z=:aGk=:, w=?0, v=tok/en:x, u=(1 \"a\" b;q);p, *t, a.b_c-d*", NULL, OK,
          0, _, _, _, _, NULL, NULL },
        { "none", NULL, OK, 0, _, _, _, _, NULL, NULL },
        { "", NULL, NON, 0, _, _, _, _, NULL, NULL },
        { "   ", NULL, NON, 0, _, _, _, _, NULL, NULL },
        /* Wrong types. */
        { "max-age=\"60\"", NULL, CC_E_TYPE, 0, _, _, _, _, NULL, NULL },
        { "max-age=60.0", NULL, CC_E_TYPE, 0, _, _, _, _, NULL, NULL },
        { "max-age=-1", NULL, CC_E_TYPE, 0, _, _, _, _, NULL, NULL },
        { "max-age", NULL, CC_E_TYPE, 0, _, _, _, _, NULL, NULL },
        { "max-age=x", NULL, CC_E_TYPE, 0, _, _, _, _, NULL, NULL },
        { "max-age=(60)", NULL, CC_E_TYPE, 0, _, _, _, _, NULL, NULL },
        { "max-age=:NjA=:", NULL, CC_E_TYPE, 0, _, _, _, _, NULL, NULL },
        { "max-age=60, no-store=?0", NULL, CC_E_TYPE, 0, _, _, _, _, NULL, NULL },
        { "public=1, max-age=60", NULL, CC_E_TYPE, 0, _, _, _, _, NULL, NULL },
        { "no-cache=set-cookie", NULL, CC_E_TYPE, 0, _, _, _, _, NULL, NULL },
        { "private=1", NULL, CC_E_TYPE, 0, _, _, _, _, NULL, NULL },
        { "max-stale=\"1\"", NULL, CC_E_TYPE, 0, _, _, _, _, NULL, NULL },
        /* ... but the last value of a repeated key is the one judged. */
        { "max-age=\"1\", max-age=60", NULL, OK, 0, 60, _, _, _, NULL, NULL },
        { "max-age=60, max-age=\"1\"", NULL, CC_E_TYPE, 0, _, _, _, _, NULL, NULL },
        /* Not a Dictionary. */
        { "max-age=60, ,", NULL, SYN, 0, _, _, _, _, NULL, NULL },
        { "max-age=60,", NULL, SYN, 0, _, _, _, _, NULL, NULL },
        { ",max-age=60", NULL, SYN, 0, _, _, _, _, NULL, NULL },
        { "Max-Age=60", NULL, SYN, 0, _, _, _, _, NULL, NULL },
        { "max-age=60 s-maxage=5", NULL, SYN, 0, _, _, _, _, NULL, NULL },
        { "max-age = 60", NULL, SYN, 0, _, _, _, _, NULL, NULL },
        { "\tmax-age=60", NULL, SYN, 0, _, _, _, _, NULL, NULL },
        { "max-age=1234567890123456", NULL, SYN, 0, _, _, _, _, NULL, NULL },
        { "max-age=60, x=\"open", NULL, SYN, 0, _, _, _, _, NULL, NULL },
        { "max-age=60, x=@1", NULL, SYN, 0, _, _, _, _, NULL, NULL },
        { "max-age=60", "", SYN, 0, _, _, _, _, NULL, NULL }, /* ", " then nothing */
        { "", "max-age=60", SYN, 0, _, _, _, _, NULL, NULL },
        { "x=\"a,", "b\"", SYN, 0, _, _, _, _, NULL, NULL }, /* a String across lines */
    };
    struct cc cc;
    enum cc_status st;

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        setup();
        add("Cache-Control", "max-age=999"); /* never read */
        if (v[i].v1 != NULL)
            add("CDN-Cache-Control", v[i].v1);
        if (v[i].v2 != NULL)
            add("cdn-cache-control", v[i].v2);
        memset(&cc, 0x5a, sizeof cc);
        st = cc_parse_targeted(&hp, "CDN-Cache-Control", &cc);
        ck_assert_msg(st == v[i].st, "[%zu] \"%s\": status %d, want %d", i, v[i].v1, st, v[i].st);
        ck_assert_msg(cc.flags == v[i].flags, "[%zu] flags %#x", i, cc.flags);
        ck_assert_msg(cc.max_age == v[i].max_age, "[%zu] max_age %lld", i, (long long)cc.max_age);
        ck_assert_msg(cc.s_maxage == v[i].s_maxage, "[%zu] s_maxage", i);
        ck_assert_msg(cc.swr == v[i].swr, "[%zu] swr", i);
        ck_assert_msg(cc.max_stale == v[i].max_stale, "[%zu] max_stale", i);
        ck_assert_msg(txt_is(&cc.no_cache_fields, v[i].ncf), "[%zu] no_cache_fields", i);
        ck_assert_msg(txt_is(&cc.private_fields, v[i].pf), "[%zu] private_fields", i);
        if (st == CC_OK)
            ck_assert_str_eq(cc.src, "CDN-Cache-Control");
        else
            ck_assert_ptr_null(cc.src);
    }
}
END_TEST

/* RFC 9213: the first present, non-empty, valid targeted field wins. */
START_TEST(response_targeted)
{
    static const struct {
        const char *cdn, *sur, *cc;
        const char *src;
        int64_t max_age;
        unsigned flags;
    } v[] = {
        { NULL, NULL, "max-age=10", "Cache-Control", 10, 0 },
        { "max-age=600", NULL, "max-age=10, private", "CDN-Cache-Control", 600, CC_TARGETED },
        { NULL, "max-age=300", "max-age=10", "Surrogate-Control", 300, CC_TARGETED },
        { "max-age=600", "max-age=300", "max-age=10", "CDN-Cache-Control", 600, CC_TARGETED },
        /* Parameters on a directive are ignored (RFC 9213 section 2.1). */
        { "max-age=60;x", "max-age=300", "max-age=10", "CDN-Cache-Control", 60, CC_TARGETED },
        { "max-age=60;x", NULL, "max-age=10", "CDN-Cache-Control", 60, CC_TARGETED },
        { "", NULL, "max-age=10", "Cache-Control", 10, 0 },
        { " , ", NULL, "no-store", "Cache-Control", CC_ABSENT, CC_NO_STORE },
        { "no-store", NULL, "max-age=10", "CDN-Cache-Control", CC_ABSENT,
          CC_TARGETED | CC_NO_STORE },
        /* Not a Dictionary, or a directive of the wrong type: the field is ignored whole. */
        { "max-age=x", NULL, "max-age=10", "Cache-Control", 10, 0 },
        { "max-age=\"60\"", NULL, "max-age=0", "Cache-Control", 0, 0 },
        { "max-age=60, ,", NULL, "no-store", "Cache-Control", CC_ABSENT, CC_NO_STORE },
        { "no-store, max-age=60,", NULL, "max-age=10", "Cache-Control", 10, 0 },
        { "Max-Age=60", NULL, "max-age=10", "Cache-Control", 10, 0 },
        { "max-age=\"60\"", "max-age=300", "max-age=10", "Surrogate-Control", 300, CC_TARGETED },
        { "private=?0", "max-age=30+5", "no-store", "Surrogate-Control", 30, CC_TARGETED },
        /* A valid Dictionary of unknown directives only still wins (RFC 9213 section 3.1). */
        { "none", NULL, "no-store", "CDN-Cache-Control", CC_ABSENT, CC_TARGETED },
        /* Surrogate-Control keeps the list syntax: malformed, it is skipped. */
        { NULL, "max-age=60;device", "max-age=10", "Cache-Control", 10, 0 },
        /* Only asking for ESI, it says nothing of caching: Cache-Control applies. */
        { NULL, "content=\"ESI/1.0\"", "max-age=10", "Cache-Control", 10, 0 },
        { NULL, "content=\"ESI/1.0\", max-age=30", "max-age=10", "Surrogate-Control", 30,
          CC_TARGETED },
        { NULL, NULL, NULL, NULL, CC_ABSENT, 0 },
    };
    struct cc cc;

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        setup();
        if (v[i].cc != NULL)
            add("Cache-Control", v[i].cc);
        if (v[i].cdn != NULL)
            add("CDN-Cache-Control", v[i].cdn);
        if (v[i].sur != NULL)
            add("Surrogate-Control", v[i].sur);
        cc_parse_response(&hp, NULL, &cc);
        ck_assert_msg(cc.max_age == v[i].max_age, "[%zu] max_age %lld", i, (long long)cc.max_age);
        ck_assert_msg(cc.flags == v[i].flags, "[%zu] flags %#x", i, cc.flags);
        if (v[i].src == NULL)
            ck_assert_ptr_null(cc.src);
        else
            ck_assert_str_eq(cc.src, v[i].src);
    }
}
END_TEST

/* A caller-chosen precedence, and an empty list meaning Cache-Control only. */
START_TEST(response_targets_custom)
{
    static const char *const sur_first[] = { "Surrogate-Control", "CDN-Cache-Control", NULL };
    static const char *const none[] = { NULL };
    struct cc cc;

    add("Cache-Control", "max-age=10");
    add("CDN-Cache-Control", "max-age=600");
    add("Surrogate-Control", "max-age=300");
    cc_parse_response(&hp, sur_first, &cc);
    ck_assert_int_eq(cc.max_age, 300);
    cc_parse_response(&hp, none, &cc);
    ck_assert_int_eq(cc.max_age, 10);
    ck_assert_uint_eq(cc.flags, 0);
}
END_TEST

START_TEST(field_listed)
{
    static const struct {
        const char *list, *name;
        bool want;
    } v[] = {
        { "Set-Cookie", "Set-Cookie", true },
        { "Set-Cookie", "set-cookie", true },
        { "Set-Cookie, X-Foo", "x-foo", true },
        { " Set-Cookie ,X-Foo ", "Set-Cookie", true },
        { "a,,b", "b", true },
        { "Set-Cookie2", "Set-Cookie", false },
        { "Set-Cookie", "Set-Cookie2", false },
        { "Set-Cookie", "Set", false },
        { "X-Set-Cookie", "Set-Cookie", false },
        { "", "Set-Cookie", false },
        { ", ,", "Set-Cookie", false },
        { "a b", "a", false },
    };

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        struct txt l = T(v[i].list), n = T(v[i].name);

        ck_assert_msg(cc_field_listed(&l, &n) == v[i].want, "\"%s\" has \"%s\"", v[i].list,
                      v[i].name);
    }
}
END_TEST

/* The field text stays pointing into the header, with no copy, in either syntax. */
START_TEST(fields_point_into_header)
{
    static const char v[] = "private=\"Set-Cookie\", max-age=5";
    struct cc cc;

    add("Cache-Control", v);
    add("CDN-Cache-Control", v);
    ck_assert_int_eq(cc_parse(&hp, "Cache-Control", &cc), CC_OK);
    ck_assert_ptr_eq(cc.private_fields.b, v + 9);
    ck_assert_uint_eq(cc.private_fields.len, 10);
    ck_assert_int_eq(cc_parse_targeted(&hp, "CDN-Cache-Control", &cc), CC_OK);
    ck_assert_ptr_eq(cc.private_fields.b, v + 9);
    ck_assert_uint_eq(cc.private_fields.len, 10);
}
END_TEST

/* A value that is not NUL-terminated at its length must not be read past. */
START_TEST(not_nul_terminated)
{
    struct cc cc;

    ck_assert_int_eq(http_add(&hp, T("Cache-Control"), (struct txt){ "max-age=601", 10 }), 0);
    ck_assert_int_eq(cc_parse(&hp, "Cache-Control", &cc), CC_OK);
    ck_assert_int_eq(cc.max_age, 60);
    setup();
    ck_assert_int_eq(http_add(&hp, T("Cache-Control"), (struct txt){ "foo=\"a\", max-age=1", 6 }),
                     0);
    ck_assert_int_eq(cc_parse(&hp, "Cache-Control", &cc), CC_E_SYNTAX);
    ck_assert_int_eq(cc.max_age, CC_ABSENT);
}
END_TEST

START_TEST(dump)
{
    static const struct {
        const char *v, *want;
    } v[] = {
        { "max-age=60, no-store", "Cache-Control: no-store max-age=60" },
        { "no-cache=\"Set-Cookie\", private, s-maxage=1, max-stale",
          "Cache-Control: no-cache=\"Set-Cookie\" private s-maxage=1 max-stale" },
        { "max-stale=5, min-fresh=x, public, immutable",
          "Cache-Control: public immutable min-fresh=2147483648 max-stale=5 invalid" },
        { "=, stale-while-revalidate=3, stale-if-error=4, only-if-cached",
          "Cache-Control: only-if-cached stale-while-revalidate=3 stale-if-error=4 malformed" },
    };
    char buf[256];
    struct sb sb;
    struct cc cc;

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        setup();
        add("Cache-Control", v[i].v);
        (void)cc_parse(&hp, "Cache-Control", &cc);
        sb_init(&sb, buf, sizeof buf);
        cc_dump(&cc, &sb);
        ck_assert(sb_ok(&sb));
        ck_assert_str_eq(buf, v[i].want);
    }
    cc_init(&cc);
    sb_init(&sb, buf, sizeof buf);
    cc_dump(&cc, &sb);
    ck_assert_str_eq(buf, "(none):");
}
END_TEST

START_TEST(init_absent)
{
    struct cc cc;

    memset(&cc, 0x11, sizeof cc);
    cc_init(&cc);
    ck_assert_uint_eq(cc.flags, 0);
    ck_assert_int_eq(cc.max_age, CC_ABSENT);
    ck_assert_int_eq(cc.s_maxage, CC_ABSENT);
    ck_assert_int_eq(cc.swr, CC_ABSENT);
    ck_assert_int_eq(cc.sie, CC_ABSENT);
    ck_assert_int_eq(cc.max_stale, CC_ABSENT);
    ck_assert_int_eq(cc.min_fresh, CC_ABSENT);
    ck_assert_ptr_null(cc.src);
}
END_TEST

START_TEST(null_http_is_a_bug)
{
    struct cc cc;

    (void)cc_parse(NULL, "Cache-Control", &cc);
}
END_TEST

START_TEST(wrong_magic_is_a_bug)
{
    struct cc cc;

    hp.magic = 0;
    cc_parse_request(&hp, &cc);
}
END_TEST

Suite *
cc_suite(void)
{
    Suite *s = suite_create("cc");
    TCase *tc = tcase_create("parse");

    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_loop_test(tc, table, 0, (int)(sizeof rows / sizeof rows[0]));
    tcase_add_test(tc, surrogate);
    tcase_add_test(tc, request_pragma);
    tcase_add_test(tc, targeted_table);
    tcase_add_test(tc, response_targeted);
    tcase_add_test(tc, response_targets_custom);
    tcase_add_test(tc, field_listed);
    tcase_add_test(tc, fields_point_into_header);
    tcase_add_test(tc, not_nul_terminated);
    tcase_add_test(tc, dump);
    tcase_add_test(tc, init_absent);
    tcase_add_test_raise_signal(tc, null_http_is_a_bug, SIGABRT);
    tcase_add_test_raise_signal(tc, wrong_magic_is_a_bug, SIGABRT);
    suite_add_tcase(s, tc);
    return s;
}
