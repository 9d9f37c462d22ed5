/*
 * ckey: one site, one host part of the key, whatever spelling of its Host
 * arrives; another port or scheme's port is another site.
 */
#include <string.h>

#include "unit.h"
#include "surogat/ckey.h"
#include "surogat/http.h"
#include "surogat/ws.h"

START_TEST(host_forms)
{
    static const struct {
        const char *in;
        bool tls;
        const char *want;
    } v[] = {
        { "example.com", false, "example.com" },
        { "Example.COM", false, "example.com" },
        { "example.com.", false, "example.com" },
        { "example.com:80", false, "example.com" },
        { "EXAMPLE.com.:80", false, "example.com" },
        { "example.com:", false, "example.com" },
        { "example.com:443", false, "example.com:443" },
        { "example.com:443", true, "example.com" },
        { "example.com:80", true, "example.com:80" },
        { "example.com:8080", false, "example.com:8080" },
        { "example.com.:8080", false, "example.com:8080" },
        { "[::1]", false, "[::1]" },
        { "[::1]:80", false, "[::1]" },
        { "[2001:DB8::1]:8080", false, "[2001:db8::1]:8080" },
        { "127.0.0.1:80", false, "127.0.0.1" },
    };

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        struct txt h = { v[i].in, strlen(v[i].in) };
        char out[64];
        size_t n = ckey_host(&h, v[i].tls, out);
        ck_assert_msg(n == strlen(v[i].want) && memcmp(out, v[i].want, n) == 0,
                      "%s -> %.*s, wanted %s", v[i].in, (int)n, out, v[i].want);
    }
}
END_TEST

START_TEST(build)
{
    char mem[256];
    struct ws ws;
    struct txt host = TXT_LIT("WWW.Example.org.");
    size_t len;
    char *k;

    ws_init(&ws, mem, sizeof mem);
    k = ckey_build(&ws, &host, false, "/a?b", 4, &len);
    ck_assert_ptr_nonnull(k);
    ck_assert_uint_eq(len, strlen("www.example.org") + 1 + 4);
    ck_assert(memcmp(k, "www.example.org\0/a?b", len) == 0);
    /* No Host and an empty one: an empty host part, which no site has. */
    k = ckey_build(&ws, NULL, false, "/x", 2, &len);
    ck_assert(len == 3 && memcmp(k, "\0/x", 3) == 0);
    host = (struct txt){ "", 0 };
    k = ckey_build(&ws, &host, false, "/x", 2, &len);
    ck_assert(len == 3 && memcmp(k, "\0/x", 3) == 0);
    /* A full workspace is not a crash. */
    ck_assert_ptr_null(ckey_build(&ws, NULL, false, mem, sizeof mem, &len));
}
END_TEST

Suite *
ckey_suite(void)
{
    Suite *s = suite_create("ckey");
    TCase *tc = tcase_create("ckey");

    tcase_add_test(tc, host_forms);
    tcase_add_test(tc, build);
    suite_add_tcase(s, tc);
    return s;
}
