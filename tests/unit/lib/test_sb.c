/*
 * sb: the string builder over a caller's buffer.  It must never write
 * past cap, must keep a NUL after the bytes used, and once overflowed
 * must stay overflowed so that one check at the end is enough.
 */
#include <signal.h>
#include <stdint.h>
#include <string.h>

#include "unit.h"
#include "surogat/sb.h"

/* Guard bytes after the buffer catch writes past cap. */
#define GUARD 16

static void
check_guard(const char *g)
{
    for (int i = 0; i < GUARD; i++)
        ck_assert_msg(g[i] == '\x5a', "sb wrote past cap");
}

START_TEST(basic_appends)
{
    char buf[64];
    struct sb sb;

    sb_init(&sb, buf, sizeof buf);
    ck_assert(sb_ok(&sb));
    ck_assert_uint_eq(sb.len, 0);
    ck_assert_str_eq(sb.buf, "");
    sb_cat(&sb, "GET ");
    sb_bcat(&sb, "/abcdef", 2);
    sb_printf(&sb, " %s/%d.%d", "HTTP", 1, 1);
    sb_cat(&sb, " ");
    sb_uint(&sb, 0);
    sb_cat(&sb, " ");
    sb_uint(&sb, 18446744073709551615ULL);
    ck_assert(sb_ok(&sb));
    ck_assert_str_eq(buf, "GET /a HTTP/1.1 0 18446744073709551615");
    ck_assert_uint_eq(sb.len, strlen(buf));
}
END_TEST

START_TEST(binary_bytes)
{
    char buf[16];
    struct sb sb;

    sb_init(&sb, buf, sizeof buf);
    sb_bcat(&sb, "a\0b", 3);
    ck_assert(sb_ok(&sb));
    ck_assert_uint_eq(sb.len, 3);
    ck_assert(memcmp(buf, "a\0b", 4) == 0);
    sb_bcat(&sb, "", 0);
    ck_assert_uint_eq(sb.len, 3);
}
END_TEST

START_TEST(exact_fit)
{
    char buf[4 + GUARD];
    struct sb sb;

    memset(buf, 0x5a, sizeof buf);
    sb_init(&sb, buf, 4);
    sb_cat(&sb, "abc"); /* 3 bytes + NUL == cap */
    ck_assert(sb_ok(&sb));
    ck_assert_str_eq(buf, "abc");
    sb_cat(&sb, "d");
    ck_assert(!sb_ok(&sb));
    ck_assert(sb.len < 4);
    ck_assert(buf[sb.len] == '\0');
    check_guard(buf + 4);
}
END_TEST

START_TEST(overflow_is_sticky)
{
    char buf[8 + GUARD];
    struct sb sb;

    memset(buf, 0x5a, sizeof buf);
    sb_init(&sb, buf, 8);
    sb_cat(&sb, "0123456789");
    ck_assert(!sb_ok(&sb));
    ck_assert(sb.len < 8);
    ck_assert(buf[sb.len] == '\0');
    /* Something small that would fit must not un-overflow it. */
    sb_cat(&sb, "");
    sb_cat(&sb, "x");
    sb_uint(&sb, 1);
    sb_printf(&sb, "%d", 2);
    sb_bcat(&sb, "y", 1);
    ck_assert(!sb_ok(&sb));
    ck_assert(sb.len < 8);
    ck_assert(buf[sb.len] == '\0');
    check_guard(buf + 8);
}
END_TEST

START_TEST(overflow_each_kind)
{
    char buf[6 + GUARD];
    struct sb sb;

    memset(buf, 0x5a, sizeof buf);
    sb_init(&sb, buf, 6);
    sb_printf(&sb, "%s", "abcdefghijklmnop");
    ck_assert(!sb_ok(&sb));
    ck_assert(buf[sb.len] == '\0' && sb.len < 6);
    check_guard(buf + 6);

    memset(buf, 0x5a, sizeof buf);
    sb_init(&sb, buf, 6);
    sb_uint(&sb, 18446744073709551615ULL);
    ck_assert(!sb_ok(&sb));
    ck_assert(buf[sb.len] == '\0' && sb.len < 6);
    check_guard(buf + 6);

    memset(buf, 0x5a, sizeof buf);
    sb_init(&sb, buf, 6);
    sb_bcat(&sb, "abcdefghijklmnop", 16);
    ck_assert(!sb_ok(&sb));
    ck_assert(buf[sb.len] == '\0' && sb.len < 6);
    check_guard(buf + 6);

    /* cap 1: only the NUL fits */
    memset(buf, 0x5a, sizeof buf);
    sb_init(&sb, buf, 1);
    ck_assert(sb_ok(&sb));
    ck_assert(buf[0] == '\0');
    sb_uint(&sb, 7);
    ck_assert(!sb_ok(&sb));
    ck_assert_uint_eq(sb.len, 0);
    ck_assert(buf[0] == '\0');
    check_guard(buf + 1);
}
END_TEST

START_TEST(uint_digits)
{
    static const struct {
        unsigned long long v;
        const char *want;
    } v[] = { { 0, "0" },
              { 9, "9" },
              { 10, "10" },
              { 4096, "4096" },
              { 65535, "65535" },
              { 4294967296ULL, "4294967296" },
              { 18446744073709551615ULL, "18446744073709551615" } };
    char buf[32];
    struct sb sb;

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        sb_init(&sb, buf, sizeof buf);
        sb_uint(&sb, v[i].v);
        ck_assert(sb_ok(&sb));
        ck_assert_str_eq(buf, v[i].want);
    }
}
END_TEST

START_TEST(html_escape)
{
    static const struct {
        const char *in, *want;
    } v[] = { { "", "" },
              { "plain text", "plain text" },
              { "<script>alert('x')</script>", "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" },
              { "a&b", "a&amp;b" },
              { "&amp;", "&amp;amp;" },
              { "\"q\"", "&quot;q&quot;" },
              { "<", "&lt;" },
              { "caf\xc3\xa9 & co", "caf\xc3\xa9 &amp; co" } };
    char buf[128 + GUARD];
    struct sb sb;

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        sb_init(&sb, buf, 128);
        sb_cat(&sb, "[");
        sb_html_escape(&sb, v[i].in);
        sb_cat(&sb, "]");
        ck_assert(sb_ok(&sb));
        ck_assert_uint_eq(sb.len, strlen(v[i].want) + 2);
        ck_assert(strncmp(buf + 1, v[i].want, sb.len - 2) == 0);
    }
    ck_assert_ptr_null(sb_html_entity('a'));
    ck_assert_ptr_null(sb_html_entity('\0'));
    ck_assert_str_eq(sb_html_entity('\''), "&#39;");

    /* An entity that does not fit overflows the builder; nothing past cap is written. */
    memset(buf, 0x5a, sizeof buf);
    sb_init(&sb, buf, 8);
    sb_html_escape(&sb, "ab<<");
    ck_assert(!sb_ok(&sb));
    ck_assert(buf[sb.len] == '\0' && sb.len < 8);
    check_guard(buf + 8);
}
END_TEST

START_TEST(zero_cap_is_a_bug)
{
    char buf[1];
    struct sb sb;

    sb_init(&sb, buf, 0); /* contract: cap >= 1 */
}
END_TEST

Suite *
sb_suite(void)
{
    Suite *s = suite_create("sb");
    TCase *tc = tcase_create("sb");

    tcase_add_test(tc, basic_appends);
    tcase_add_test(tc, binary_bytes);
    tcase_add_test(tc, exact_fit);
    tcase_add_test(tc, overflow_is_sticky);
    tcase_add_test(tc, overflow_each_kind);
    tcase_add_test(tc, uint_digits);
    tcase_add_test(tc, html_escape);
    tcase_add_test_raise_signal(tc, zero_cap_is_a_bug, SIGABRT);
    suite_add_tcase(s, tc);
    return s;
}
