/*
 * http: the message object and its header helpers.  Heads are built with
 * http_add() over literals, as a builder would over workspace copies.
 */
#include <signal.h>
#include <string.h>

#include "unit.h"
#include "surogat/http.h"

#define NHDR 16
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

static bool
has(const char *name)
{
    return http_find(&hp, name) != NULL;
}

static void
setup(void)
{
    memset(hdrs, 0xa5, sizeof hdrs);
    http_init(&hp, hdrs, NHDR);
}

START_TEST(init)
{
    ck_assert_uint_eq(hp.magic, HTTP_MAGIC);
    ck_assert_uint_eq(hp.nhdr, 0);
    ck_assert_uint_eq(hp.maxhdr, NHDR);
    ck_assert_ptr_eq(hp.hdr, hdrs);
    ck_assert_ptr_null(http_find(&hp, "Host"));
    ck_assert_uint_eq(http_count(&hp, "Host"), 0);
}
END_TEST

START_TEST(add_until_full)
{
    for (unsigned i = 0; i < NHDR; i++)
        ck_assert_int_eq(http_add(&hp, TXT_LIT("X-N"), TXT_LIT("v")), 0);
    ck_assert_uint_eq(hp.nhdr, NHDR);
    ck_assert_int_eq(http_add(&hp, TXT_LIT("X-N"), TXT_LIT("v")), -1);
    ck_assert_uint_eq(hp.nhdr, NHDR);
    ck_assert_uint_eq(http_count(&hp, "x-n"), NHDR);
}
END_TEST

START_TEST(name_eq)
{
    struct txt n = TXT_LIT("Content-Length");

    ck_assert(http_name_eq(&n, "content-length"));
    ck_assert(http_name_eq(&n, "CONTENT-LENGTH"));
    ck_assert(http_name_eq(&n, "Content-Length"));
    ck_assert(!http_name_eq(&n, "Content-Lengt"));
    ck_assert(!http_name_eq(&n, "Content-Lengths"));
    ck_assert(!http_name_eq(&n, ""));
    ck_assert(!http_name_eq(&n, "Content_Length"));
    n = (struct txt){ "Hostile", 4 }; /* not NUL-terminated at len */
    ck_assert(http_name_eq(&n, "host"));
    ck_assert(!http_name_eq(&n, "hostile"));
    n = (struct txt){ "", 0 };
    ck_assert(http_name_eq(&n, ""));
    ck_assert(!http_name_eq(&n, "a"));
}
END_TEST

START_TEST(find_count)
{
    const struct http_hdr *h;

    add("Host", "a");
    add("Accept", "*/*");
    add("X-Dup", "1");
    add("x-dup", "2");
    add("X-DUP", "3");
    h = http_find(&hp, "host");
    ck_assert_ptr_nonnull(h);
    ck_assert_uint_eq(h->val.len, 1);
    ck_assert(h->val.b[0] == 'a');
    h = http_find(&hp, "X-Dup");
    ck_assert_ptr_nonnull(h);
    ck_assert(h->val.b[0] == '1'); /* the first */
    ck_assert_uint_eq(http_count(&hp, "x-dup"), 3);
    ck_assert_uint_eq(http_count(&hp, "accept"), 1);
    ck_assert_uint_eq(http_count(&hp, "accep"), 0);
    ck_assert_ptr_null(http_find(&hp, "Hos"));
    ck_assert_ptr_null(http_find(&hp, "Hostx"));
}
END_TEST

START_TEST(unset_keeps_others)
{
    add("A", "1");
    add("Cookie", "x");
    add("B", "2");
    add("cookie", "y");
    add("C", "3");
    add("COOKIE", "z");
    ck_assert_uint_eq(http_unset(&hp, "Cookie"), 3);
    ck_assert_uint_eq(hp.nhdr, 3);
    ck_assert(!has("cookie"));
    ck_assert(has("A") && has("B") && has("C"));
    /* Order of the survivors is kept: it matters for repeated fields. */
    ck_assert(http_name_eq(&hp.hdr[0].name, "A"));
    ck_assert(http_name_eq(&hp.hdr[1].name, "B"));
    ck_assert(http_name_eq(&hp.hdr[2].name, "C"));
    ck_assert_uint_eq(http_unset(&hp, "Cookie"), 0);
    ck_assert_uint_eq(http_unset(&hp, "C"), 1);
    ck_assert_uint_eq(http_unset(&hp, "A"), 1);
    ck_assert_uint_eq(http_unset(&hp, "B"), 1);
    ck_assert_uint_eq(hp.nhdr, 0);
}
END_TEST

START_TEST(has_token)
{
    add("Connection", "keep-alive, Close");
    add("Cache-Control", "no-cache=\"x\",  max-age=5 , private");
    add("Cache-Control", "public");
    add("X-Near", "closed, xclose, clos");
    add("X-Empty", "");
    add("X-Commas", ",, ,upgrade,,");
    ck_assert(http_has_token(&hp, "connection", "close"));
    ck_assert(http_has_token(&hp, "Connection", "keep-alive"));
    ck_assert(http_has_token(&hp, "connection", "KEEP-ALIVE"));
    ck_assert(!http_has_token(&hp, "Connection", "keep"));
    ck_assert(!http_has_token(&hp, "Connection", "alive"));
    ck_assert(http_has_token(&hp, "Cache-Control", "private"));
    ck_assert(http_has_token(&hp, "Cache-Control", "public")); /* second field */
    ck_assert(!http_has_token(&hp, "Cache-Control", "max-age"));
    ck_assert(!http_has_token(&hp, "X-Near", "close"));
    ck_assert(!http_has_token(&hp, "X-Empty", "close"));
    ck_assert(http_has_token(&hp, "X-Commas", "upgrade"));
    ck_assert(!http_has_token(&hp, "X-Missing", "close"));
}
END_TEST

START_TEST(strip_hop_by_hop)
{
    static const char *const hop[] = {
        "Connection",
        "Keep-Alive",
        "Proxy-Connection",
        "TE",
        "Trailer",
        "Transfer-Encoding",
        "Upgrade",
        "Proxy-Authenticate",
        "Proxy-Authorization",
    };

    add("Host", "a");
    add("Connection", "X-Foo, x-bar");
    for (size_t i = 1; i < sizeof hop / sizeof hop[0]; i++)
        add(hop[i], "v");
    add("X-Foo", "1");
    add("X-Keep", "2");
    add("x-BAR", "3");
    add("Trailers", "kept: not hop-by-hop");
    http_strip_hop_by_hop(&hp);
    for (size_t i = 0; i < sizeof hop / sizeof hop[0]; i++)
        ck_assert_msg(!has(hop[i]), "%s not stripped", hop[i]);
    ck_assert(!has("X-Foo"));
    ck_assert(!has("X-Bar"));
    ck_assert(has("Host"));
    ck_assert(has("X-Keep"));
    ck_assert(has("Trailers"));
    ck_assert_uint_eq(hp.nhdr, 3);
}
END_TEST

/* Connection may name a header appearing before it, and twice. */
START_TEST(strip_named_before)
{
    add("X-A", "1");
    add("X-B", "1");
    add("Connection", "x-a");
    add("Connection", "close, X-B");
    add("X-A", "2");
    add("Content-Length", "5");
    http_strip_hop_by_hop(&hp);
    ck_assert_uint_eq(hp.nhdr, 1);
    ck_assert(has("Content-Length"));
}
END_TEST

START_TEST(idempotent)
{
    static const char *const yes[] = { "GET", "HEAD", "PUT", "DELETE", "OPTIONS", "TRACE" };
    static const char *const no[] = { "POST", "PATCH", "CONNECT", "get", "GETS", "", "PURGE" };

    for (size_t i = 0; i < sizeof yes / sizeof yes[0]; i++) {
        struct txt m = T(yes[i]);
        ck_assert_msg(http_method_idempotent(&m), "%s", yes[i]);
    }
    for (size_t i = 0; i < sizeof no / sizeof no[0]; i++) {
        struct txt m = T(no[i]);
        ck_assert_msg(!http_method_idempotent(&m), "%s", no[i]);
    }
    struct txt pfx = { "GETX", 3 };
    ck_assert(http_method_idempotent(&pfx));
}
END_TEST

START_TEST(reasons)
{
    ck_assert_str_eq(http_reason(200), "OK");
    ck_assert_str_eq(http_reason(404), "Not Found");
    ck_assert_str_eq(http_reason(503), "Service Unavailable");
    ck_assert_str_eq(http_reason(304), "Not Modified");
    ck_assert_str_eq(http_reason(414), "URI Too Long");
    ck_assert_str_eq(http_reason(431), "Request Header Fields Too Large");
    ck_assert_str_eq(http_reason(505), "HTTP Version Not Supported");
    ck_assert_str_eq(http_reason(999), "Unknown");
    ck_assert_str_eq(http_reason(0), "Unknown");
    ck_assert_str_eq(http_reason(100000), "Unknown");
}
END_TEST

START_TEST(host_valid)
{
    static const char *const good[] = {
        "example.com", "Example.COM:8080", "example.com.", "example.com:", "127.0.0.1",
        "[::1]", "[::1]:80", "[2001:db8::1]:443", "a-b.c_d.example", "a%41.example",
        "xn--bcher-kva.ch", "x:65535", "localhost", "a~b!$&'()*+,;=c",
    };
    static const char *const bad[] = {
        "", "a b", "a/b", "a..b", "..", ".", ".a", "a\\b", "x:80x", "[::1", "[::1]x",
        "[]", "[zz::1]", "[v1.x]", "x:99999", "x:65536", "a@b", "a:80:80", "a%zz", "a%4",
        ":80", "a\tb", "exa\"mple", "host?", "host#",
    };

    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        struct txt t = { good[i], strlen(good[i]) };
        ck_assert_msg(http_host_valid(&t), "%s refused", good[i]);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct txt t = { bad[i], strlen(bad[i]) };
        ck_assert_msg(!http_host_valid(&t), "%s accepted", bad[i]);
    }
}
END_TEST

Suite *
http_suite(void)
{
    Suite *s = suite_create("http");
    TCase *tc = tcase_create("http");

    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, init);
    tcase_add_test(tc, add_until_full);
    tcase_add_test(tc, name_eq);
    tcase_add_test(tc, find_count);
    tcase_add_test(tc, unset_keeps_others);
    tcase_add_test(tc, has_token);
    tcase_add_test(tc, strip_hop_by_hop);
    tcase_add_test(tc, strip_named_before);
    tcase_add_test(tc, idempotent);
    tcase_add_test(tc, reasons);
    tcase_add_test(tc, host_valid);
    suite_add_tcase(s, tc);
    return s;
}
