/*
 * h1 head serialisation: byte-exact output, overflow reported through
 * the sb, and parse(write(x)) == x.
 */
#include <string.h>

#include "unit.h"
#include "surogat/defs.h"
#include "surogat/sb.h"
#include "surogat/http.h"
#include "surogat/h1.h"

#define NHDR 16
static struct http_hdr hdrs[NHDR];
static struct http hp;
static char out[4096];
static struct sb sb;

static void
setup(void)
{
    http_init(&hp, hdrs, NHDR);
    memset(out, 'Z', sizeof out);
    sb_init(&sb, out, sizeof out);
}

START_TEST(request_exact)
{
    const char want[] = "GET /a?b=c HTTP/1.1\r\nHost: example.com\r\nX-Empty: \r\n"
                        "Accept: */*\r\n\r\n";

    hp.method = TXT_LIT("GET");
    hp.url = TXT_LIT("/a?b=c");
    hp.proto = 11;
    ck_assert_int_eq(http_add(&hp, TXT_LIT("Host"), TXT_LIT("example.com")), 0);
    ck_assert_int_eq(http_add(&hp, TXT_LIT("X-Empty"), TXT_LIT("")), 0);
    ck_assert_int_eq(http_add(&hp, TXT_LIT("Accept"), TXT_LIT("*/*")), 0);
    h1_write_request(&sb, &hp);
    ck_assert(sb_ok(&sb));
    /* An empty value may be written "X-Empty: " or "X-Empty:"; both parse the same. */
    if (strstr(out, "X-Empty:\r\n") != NULL) {
        ck_assert_str_eq(out, "GET /a?b=c HTTP/1.1\r\nHost: example.com\r\nX-Empty:\r\n"
                              "Accept: */*\r\n\r\n");
    } else {
        ck_assert_str_eq(out, want);
    }
    ck_assert_uint_eq(sb.len, strlen(out));
}
END_TEST

START_TEST(request_http10_no_headers)
{
    hp.method = TXT_LIT("HEAD");
    hp.url = TXT_LIT("*");
    hp.proto = 10;
    h1_write_request(&sb, &hp);
    ck_assert(sb_ok(&sb));
    ck_assert_str_eq(out, "HEAD * HTTP/1.0\r\n\r\n");
}
END_TEST

/* Only the given lengths are written, not up to a NUL. */
START_TEST(request_txt_lengths)
{
    hp.method = (struct txt){ "POSTER", 4 };
    hp.url = (struct txt){ "/abc def", 4 };
    hp.proto = 11;
    ck_assert_int_eq(http_add(&hp, (struct txt){ "Hostname", 4 }, (struct txt){ "a.b c", 3 }), 0);
    h1_write_request(&sb, &hp);
    ck_assert_str_eq(out, "POST /abc HTTP/1.1\r\nHost: a.b\r\n\r\n");
}
END_TEST

START_TEST(response_exact)
{
    hp.proto = 11;
    hp.status = 200;
    hp.reason = TXT_LIT("OK");
    ck_assert_int_eq(http_add(&hp, TXT_LIT("Content-Length"), TXT_LIT("5")), 0);
    ck_assert_int_eq(http_add(&hp, TXT_LIT("Age"), TXT_LIT("0")), 0);
    h1_write_response(&sb, &hp);
    ck_assert(sb_ok(&sb));
    ck_assert_str_eq(out, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nAge: 0\r\n\r\n");
}
END_TEST

START_TEST(response_statuses)
{
    static const struct {
        unsigned proto, status;
        const char *reason, *want;
    } v[] = {
        { 10, 404, "Not Found", "HTTP/1.0 404 Not Found\r\n\r\n" },
        { 11, 100, "Continue", "HTTP/1.1 100 Continue\r\n\r\n" },
        { 11, 999, "Odd", "HTTP/1.1 999 Odd\r\n\r\n" },
        { 11, 503, "Service Unavailable", "HTTP/1.1 503 Service Unavailable\r\n\r\n" },
    };

    for (size_t i = 0; i < ARRAY_LEN(v); i++) {
        setup();
        hp.proto = v[i].proto;
        hp.status = v[i].status;
        hp.reason = (struct txt){ v[i].reason, strlen(v[i].reason) };
        h1_write_response(&sb, &hp);
        ck_assert_str_eq(out, v[i].want);
    }
}
END_TEST

/* RFC 9112 section 4: the SP after the status code is required even with no reason. */
START_TEST(response_empty_reason)
{
    hp.proto = 11;
    hp.status = 204;
    hp.reason = (struct txt){ "", 0 };
    h1_write_response(&sb, &hp);
    ck_assert(sb_ok(&sb));
    ck_assert_str_eq(out, "HTTP/1.1 204 \r\n\r\n");
}
END_TEST

START_TEST(overflow)
{
    char small[32 + 8];

    memset(small, 'Z', sizeof small);
    sb_init(&sb, small, 32);
    hp.method = TXT_LIT("GET");
    hp.url = TXT_LIT("/a-rather-long-url/that/does/not/fit");
    hp.proto = 11;
    ck_assert_int_eq(http_add(&hp, TXT_LIT("Host"), TXT_LIT("x")), 0);
    h1_write_request(&sb, &hp);
    ck_assert(!sb_ok(&sb));
    for (size_t i = 32; i < sizeof small; i++)
        ck_assert(small[i] == 'Z');

    /* One byte short of the exact size must overflow; the exact size must not. */
    static const char want[] = "HTTP/1.1 200 OK\r\nA: b\r\n\r\n";
    char exact[sizeof want];
    setup();
    hp.proto = 11;
    hp.status = 200;
    hp.reason = TXT_LIT("OK");
    ck_assert_int_eq(http_add(&hp, TXT_LIT("A"), TXT_LIT("b")), 0);
    sb_init(&sb, exact, sizeof want);
    h1_write_response(&sb, &hp);
    ck_assert(sb_ok(&sb));
    ck_assert_str_eq(exact, want);
    sb_init(&sb, exact, sizeof want - 1);
    h1_write_response(&sb, &hp);
    ck_assert(!sb_ok(&sb));
}
END_TEST

/* Appends to what the sb already holds. */
START_TEST(appends)
{
    sb_cat(&sb, "prefix|");
    hp.proto = 11;
    hp.status = 200;
    hp.reason = TXT_LIT("OK");
    h1_write_response(&sb, &hp);
    ck_assert_str_eq(out, "prefix|HTTP/1.1 200 OK\r\n\r\n");
}
END_TEST

/* parse(write(parse(x))) == parse(x), LF-only input coming out as CRLF. */
START_TEST(round_trip)
{
    static const char *const reqs[] = {
        "GET /x?y HTTP/1.1\nHost:  a  \nX-Y:z\n\n",
        "POST http://h/p HTTP/1.0\r\nContent-Length: 3\r\nA: \x80\xff\r\n\r\n",
        "OPTIONS * HTTP/1.1\r\n\r\n",
    };
    const struct h1_limits lim = { 4096, 1024, NHDR };
    struct http_hdr hdrs2[NHDR];
    struct http hp2;
    size_t used;

    for (size_t i = 0; i < ARRAY_LEN(reqs); i++) {
        setup();
        ck_assert_int_eq(h1_parse_request(reqs[i], strlen(reqs[i]), &lim, &hp, &used), H1_DONE);
        h1_write_request(&sb, &hp);
        ck_assert(sb_ok(&sb));
        ck_assert(strchr(out, '\n') == NULL || strstr(out, "\r\n") != NULL);
        ck_assert_str_eq(out + sb.len - 4, "\r\n\r\n");
        http_init(&hp2, hdrs2, NHDR);
        ck_assert_int_eq(h1_parse_request(out, sb.len, &lim, &hp2, &used), H1_DONE);
        ck_assert_uint_eq(used, sb.len);
        ck_assert_uint_eq(hp2.proto, hp.proto);
        ck_assert_uint_eq(hp2.nhdr, hp.nhdr);
        ck_assert(hp2.method.len == hp.method.len &&
                  memcmp(hp2.method.b, hp.method.b, hp.method.len) == 0);
        ck_assert(hp2.url.len == hp.url.len && memcmp(hp2.url.b, hp.url.b, hp.url.len) == 0);
        for (unsigned j = 0; j < hp.nhdr; j++) {
            ck_assert(hp2.hdr[j].name.len == hp.hdr[j].name.len &&
                      memcmp(hp2.hdr[j].name.b, hp.hdr[j].name.b, hp.hdr[j].name.len) == 0);
            ck_assert(hp2.hdr[j].val.len == hp.hdr[j].val.len &&
                      memcmp(hp2.hdr[j].val.b, hp.hdr[j].val.b, hp.hdr[j].val.len) == 0);
        }
    }
    setup();
    static const char resp[] = "HTTP/1.0 304 Not  Modified\nETag: \"x\"\n\n";
    ck_assert_int_eq(h1_parse_response(resp, sizeof resp - 1, &lim, &hp, &used), H1_DONE);
    h1_write_response(&sb, &hp);
    ck_assert_str_eq(out, "HTTP/1.0 304 Not  Modified\r\nETag: \"x\"\r\n\r\n");
}
END_TEST

Suite *
h1_write_suite(void)
{
    Suite *s = suite_create("h1_write");
    TCase *tc = tcase_create("write");

    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, request_exact);
    tcase_add_test(tc, request_http10_no_headers);
    tcase_add_test(tc, request_txt_lengths);
    tcase_add_test(tc, response_exact);
    tcase_add_test(tc, response_statuses);
    tcase_add_test(tc, response_empty_reason);
    tcase_add_test(tc, overflow);
    tcase_add_test(tc, appends);
    tcase_add_test(tc, round_trip);
    suite_add_tcase(s, tc);
    return s;
}
