/*
 * http_cond: 304 decisions and byte ranges, table-driven, as every
 * deliverer (hit, miss, static file) asks them.
 */
#include <string.h>

#include "unit.h"
#include "surogat/http.h"

#define NHDR 8
static struct http_hdr hh[NHDR];
static struct http req;

static struct txt
T(const char *s)
{
    return (struct txt){ s, strlen(s) };
}

/* A request with method m and the "Name: value" lines of `lines` ('\n'-separated). */
static void
mkreq(const char *m, const char *lines)
{
    http_init(&req, hh, NHDR);
    req.method = T(m);
    while (lines != NULL && *lines != '\0') {
        const char *e = strchr(lines, '\n'), *c = strchr(lines, ':');
        if (e == NULL)
            e = lines + strlen(lines);
        ck_assert_int_eq(http_add(&req, (struct txt){ lines, (size_t)(c - lines) },
                                  (struct txt){ c + 2, (size_t)(e - c - 2) }),
                         0);
        lines = *e != '\0' ? e + 1 : e;
    }
}

#define LM  "Sun, 06 Nov 1994 08:49:37 GMT"
#define LM1 "Sun, 06 Nov 1994 08:49:38 GMT"
#define LM0 "Sun, 06 Nov 1994 08:49:36 GMT"

START_TEST(not_modified)
{
    static const struct {
        const char *method, *hdrs, *etag, *lm;
        bool nm;
    } v[] = {
        { "GET", "If-None-Match: \"a\"", "\"a\"", NULL, true },
        { "HEAD", "If-None-Match: \"a\"", "\"a\"", NULL, true },
        { "POST", "If-None-Match: \"a\"", "\"a\"", NULL, false },
        { "get", "If-None-Match: \"a\"", "\"a\"", NULL, false },
        { "GET", "If-None-Match: W/\"a\"", "\"a\"", NULL, true }, /* weak comparison */
        { "GET", "If-None-Match: \"a\"", "W/\"a\"", NULL, true },
        { "GET", "If-None-Match: \"x\", \"a\"", "\"a\"", NULL, true },
        { "GET", "If-None-Match: *", "\"a\"", NULL, true },
        { "GET", "If-None-Match: \"b\"", "\"a\"", NULL, false },
        { "GET", "If-None-Match: \"a\"", NULL, LM, false },
        /* If-None-Match wins over If-Modified-Since */
        { "GET", "If-None-Match: \"b\"\nIf-Modified-Since: " LM, "\"a\"", LM, false },
        { "GET", "If-Modified-Since: " LM, NULL, LM, true },
        { "GET", "If-Modified-Since: " LM1, NULL, LM, true },
        { "GET", "If-Modified-Since: " LM0, NULL, LM, false },
        { "GET", "If-Modified-Since: yesterday", NULL, LM, false },
        { "GET", "If-Modified-Since: " LM, NULL, NULL, false },
        { "GET", "", "\"a\"", LM, false },
    };

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        struct txt et = v[i].etag != NULL ? T(v[i].etag) : T(""), lm = T(v[i].lm ? v[i].lm : "");
        mkreq(v[i].method, v[i].hdrs);
        ck_assert_msg(http_not_modified(&req, v[i].etag ? &et : NULL, v[i].lm ? &lm : NULL) ==
                          v[i].nm,
                      "[%zu] %s %s", i, v[i].method, v[i].hdrs);
        ck_assert(http_is_conditional(&req) == (strstr(v[i].hdrs, "If-") != NULL));
    }
}
END_TEST

START_TEST(ranges)
{
    static const struct {
        const char *hdrs;
        uint64_t len;
        enum http_range want;
        uint64_t first, last;
    } v[] = {
        { "", 100, HTTP_RANGE_NONE, 0, 0 },
        { "Range: bytes=0-9", 100, HTTP_RANGE_OK, 0, 9 },
        { "Range: BYTES=10-", 100, HTTP_RANGE_OK, 10, 99 },
        { "Range: bytes=90-200", 100, HTTP_RANGE_OK, 90, 99 },
        { "Range: bytes=-10", 100, HTTP_RANGE_OK, 90, 99 },
        { "Range: bytes=-200", 100, HTTP_RANGE_OK, 0, 99 },
        { "Range: bytes=-0", 100, HTTP_RANGE_UNSATISFIABLE, 0, 0 },
        { "Range: bytes=100-", 100, HTTP_RANGE_UNSATISFIABLE, 0, 0 },
        { "Range: bytes=0-", 0, HTTP_RANGE_UNSATISFIABLE, 0, 0 },
        { "Range: bytes=-5", 0, HTTP_RANGE_UNSATISFIABLE, 0, 0 },
        { "Range: bytes=9-0", 100, HTTP_RANGE_NONE, 0, 0 },
        { "Range: bytes=0-9,20-29", 100, HTTP_RANGE_NONE, 0, 0 },
        { "Range: bytes=-", 100, HTTP_RANGE_NONE, 0, 0 },
        { "Range: bytes=a-b", 100, HTTP_RANGE_NONE, 0, 0 },
        { "Range: items=0-9", 100, HTTP_RANGE_NONE, 0, 0 },
        { "Range: bytes=0-9 ", 100, HTTP_RANGE_NONE, 0, 0 },
        { "Range: bytes=99999999999999999999-", 100, HTTP_RANGE_NONE, 0, 0 },
        { "Range: bytes=0-9\nRange: bytes=10-19", 100, HTTP_RANGE_NONE, 0, 0 },
        /* If-Range: strong ETag or the exact date, else the whole body */
        { "Range: bytes=0-9\nIf-Range: \"s\"", 100, HTTP_RANGE_OK, 0, 9 },
        { "Range: bytes=0-9\nIf-Range: \"t\"", 100, HTTP_RANGE_NONE, 0, 0 },
        { "Range: bytes=0-9\nIf-Range: " LM, 100, HTTP_RANGE_OK, 0, 9 },
        { "Range: bytes=0-9\nIf-Range: " LM1, 100, HTTP_RANGE_NONE, 0, 0 },
    };
    struct txt et = T("\"s\""), lm = T(LM);

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        uint64_t first = 7, last = 7;
        enum http_range r;

        mkreq("GET", v[i].hdrs);
        r = http_range(&req, &et, &lm, v[i].len, &first, &last);
        ck_assert_msg(r == v[i].want, "[%zu] %s: %d", i, v[i].hdrs, (int)r);
        if (r == HTTP_RANGE_OK)
            ck_assert_msg(first == v[i].first && last == v[i].last, "[%zu] %llu-%llu", i,
                          (unsigned long long)first, (unsigned long long)last);
    }
    /* A weak ETag never satisfies If-Range. */
    et = T("W/\"s\"");
    mkreq("GET", "Range: bytes=0-9\nIf-Range: W/\"s\"");
    ck_assert_int_eq(http_range(&req, &et, NULL, 100, &(uint64_t){ 0 }, &(uint64_t){ 0 }),
                     HTTP_RANGE_NONE);
}
END_TEST

Suite *
http_cond_suite(void)
{
    Suite *s = suite_create("http_cond");
    TCase *tc = tcase_create("http_cond");

    tcase_add_test(tc, not_modified);
    tcase_add_test(tc, ranges);
    suite_add_tcase(s, tc);
    return s;
}
