/*
 * acl: parsing of address lists (v4, v6, prefixes, exclusions, bad input)
 * and matching, longest prefix first.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <string.h>

#include "unit.h"
#include "surogat/acl.h"
#include "surogat/sb.h"

static char ebuf[256];
static struct sb err;

static struct acl *
parse_ok(const char *spec)
{
    struct acl *a;

    sb_init(&err, ebuf, sizeof ebuf);
    a = acl_parse(spec, &err);
    ck_assert_msg(a != NULL, "'%s' refused: %s", spec, ebuf);
    return (a);
}

START_TEST(match_table)
{
    static const struct {
        const char *acl, *ip;
        bool want;
    } v[] = {
        { "127.0.0.1,::1", "127.0.0.1", true },
        { "127.0.0.1,::1", "127.0.0.2", false },
        { "127.0.0.1,::1", "::1", true },
        { "127.0.0.1,::1", "::2", false },
        { "127.0.0.1", "::ffff:127.0.0.1", true }, /* v4-mapped is the v4 address */
        { "::ffff:10.0.0.0/104", "10.9.8.7", true },
        { "10.0.0.0/8", "10.255.1.2", true },
        { "10.0.0.0/8", "11.0.0.0", false },
        { "10.1.2.3/8", "10.200.0.1", true }, /* host bits ignored */
        { "192.168.1.128/25", "192.168.1.127", false },
        { "192.168.1.128/25", "192.168.1.200", true },
        { "0.0.0.0/0", "8.8.8.8", true },
        { "0.0.0.0/0", "2001:db8::1", false }, /* a v4 /0 is not every v6 address */
        { "::/0", "2001:db8::1", true },
        { "2001:db8::/32", "2001:db8:ffff::1", true },
        { "2001:db8::/32", "2001:db9::1", false },
        { "2001:db8::/33", "2001:db8:8000::1", false },
        { "2001:db8::/33", "2001:db8:7fff::1", true },
        { "10.0.0.0/8, !10.1.0.0/16", "10.1.2.3", false },
        { "10.0.0.0/8, !10.1.0.0/16", "10.2.2.3", true },
        { "!10.1.0.0/16, 10.0.0.0/8", "10.1.2.3", false }, /* order does not matter */
        { "!10.0.0.0/8, 10.1.0.0/16", "10.1.2.3", true },  /* the longer prefix wins */
        { "10.1.2.3, !10.1.2.3", "10.1.2.3", false },      /* a tie: excluded */
        { "", "127.0.0.1", false },
        { "  ", "127.0.0.1", false },
        { " 127.0.0.1 ,\t::1 , ", "::1", true },
        { "127.0.0.1", "not an address", false },
        { "127.0.0.1", "", false },
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        struct acl *a = parse_ok(v[i].acl);
        ck_assert_msg(acl_match_str(a, v[i].ip) == v[i].want, "'%s' against '%s': want %d",
                      v[i].acl, v[i].ip, v[i].want);
        acl_free(&a);
        ck_assert_ptr_null(a);
    }
}
END_TEST

START_TEST(bad_input)
{
    static const struct {
        const char *acl, *msg;
    } v[] = {
        { "127.0.0.256", "'127.0.0.256' is not an IPv4 or IPv6 address" },
        { "localhost", "'localhost' is not" },
        { "10.0.0.0/33", "bad prefix length in '10.0.0.0/33' (at most 32)" },
        { "::/129", "(at most 128)" },
        { "10.0.0.0/", "bad prefix length" },
        { "10.0.0.0/-1", "bad prefix length" },
        { "10.0.0.0/8x", "bad prefix length" },
        { "1.2.3.4,,5.6.7.8", "empty entry" },
        { ",1.2.3.4", "empty entry" },
        { "!", "bad entry" },
        { "1.2.3.4 5.6.7.8", "is not an IPv4" },
        { "[::1]", "is not an IPv4" },
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        sb_init(&err, ebuf, sizeof ebuf);
        ck_assert_msg(acl_parse(v[i].acl, &err) == NULL, "'%s' accepted", v[i].acl);
        ck_assert_msg(strstr(ebuf, v[i].msg) != NULL, "'%s': got '%s', want '%s'", v[i].acl, ebuf,
                      v[i].msg);
        ck_assert_msg(strncmp(ebuf, "acl: ", 5) == 0, "%s", ebuf);
    }
}
END_TEST

START_TEST(sockaddrs)
{
    struct acl *a = parse_ok("192.0.2.0/24, 2001:db8::/48");
    struct sockaddr_in s4 = { .sin_family = AF_INET };
    struct sockaddr_in6 s6 = { .sin6_family = AF_INET6 };
    struct sockaddr un = { .sa_family = AF_UNIX };

    ck_assert_uint_eq(acl_entries(a), 2);
    ck_assert_int_eq(inet_pton(AF_INET, "192.0.2.77", &s4.sin_addr), 1);
    ck_assert(acl_match_sa(a, (struct sockaddr *)&s4));
    ck_assert_int_eq(inet_pton(AF_INET, "192.0.3.77", &s4.sin_addr), 1);
    ck_assert(!acl_match_sa(a, (struct sockaddr *)&s4));
    ck_assert_int_eq(inet_pton(AF_INET6, "2001:db8:0:1::5", &s6.sin6_addr), 1);
    ck_assert(acl_match_sa(a, (struct sockaddr *)&s6));
    ck_assert_int_eq(inet_pton(AF_INET6, "::ffff:192.0.2.1", &s6.sin6_addr), 1);
    ck_assert(acl_match_sa(a, (struct sockaddr *)&s6));
    ck_assert_int_eq(inet_pton(AF_INET6, "2001:db8:1::5", &s6.sin6_addr), 1);
    ck_assert(!acl_match_sa(a, (struct sockaddr *)&s6));
    ck_assert(!acl_match_sa(a, &un));
    acl_free(&a);
    acl_free(&a); /* NULL is fine */
}
END_TEST

START_TEST(null_spec_is_a_bug)
{
    sb_init(&err, ebuf, sizeof ebuf);
    (void)acl_parse(NULL, &err);
}
END_TEST

Suite *
acl_suite(void)
{
    Suite *s = suite_create("acl");
    TCase *tc = tcase_create("acl");

    tcase_add_test(tc, match_table);
    tcase_add_test(tc, bad_input);
    tcase_add_test(tc, sockaddrs);
    tcase_add_test_raise_signal(tc, null_spec_is_a_bug, SIGABRT);
    suite_add_tcase(s, tc);
    return s;
}
