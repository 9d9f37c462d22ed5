/*
 * num: the single parser of counts, sizes, durations and booleans.
 * Table-driven: each row is an input and what it must give, and every
 * error must leave *out untouched and set errno.
 */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "unit.h"
#include "surogat/num.h"

START_TEST(duration_units)
{
    static const struct {
        const char *in;
        double want;
    } v[] = {
        { "0", 0 },       { "0.5", 0.5 },  { "5", 5 },          { "250ms", 0.25 },
        { "1ms", 0.001 }, { "5s", 5 },     { "2m", 120 },       { "1h", 3600 },
        { "1.5h", 5400 }, { "1d", 86400 }, { "1w", 7 * 86400 }, { "1y", 365 * 86400 },
        { "0s", 0 },      { "3.5s", 3.5 }, { "300s", 300 },     { "10ms", 0.01 },
        { "0.5m", 30 },   { "60", 60 },
    };
    double got;

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        got = -1;
        ck_assert_msg(num_duration(v[i].in, &got) == 0, "num_duration(\"%s\") failed", v[i].in);
        ck_assert_msg(fabs(got - v[i].want) <= 1e-12 * fmax(1, v[i].want),
                      "num_duration(\"%s\") = %g, want %g", v[i].in, got, v[i].want);
    }
}
END_TEST

START_TEST(duration_errors)
{
    static const char *const v[] = {
        "",    "5x",   "-1", "-1s", "ms",  "s",     "5 x", "1e999", "1e400s",
        "5ss", "5msx", "x5", "nan", "inf", "1..5s", ".",   "5s5",
    };
    double got;

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        got = 42;
        errno = 0;
        ck_assert_msg(num_duration(v[i], &got) == -1, "num_duration(\"%s\") accepted (%g)", v[i],
                      got);
        ck_assert_msg(errno == EINVAL || errno == ERANGE, "num_duration(\"%s\") errno %d", v[i],
                      errno);
        ck_assert_msg(got == 42, "num_duration(\"%s\") touched *out on error", v[i]);
    }
}
END_TEST

START_TEST(bytes_units)
{
    static const struct {
        const char *in;
        uint64_t want;
    } v[] = {
        { "0", 0 },
        { "4096", 4096 },
        { "1k", 1024 },
        { "64k", 64 * 1024 },
        { "64kb", 64 * 1024 },
        { "64kB", 64 * 1024 },
        { "1.5m", 1572864 },
        { "1m", 1048576 },
        { "2g", 2ULL << 30 },
        { "1t", 1ULL << 40 },
        { "10b", 10 },
        { "10B", 10 },
        { "256", 256 },
        { "32k", 32768 },
        { "4m", 4194304 },
        { "16777215t", 16777215ULL << 40 },
        { "18446744073709551615", UINT64_MAX },
    };
    uint64_t got;

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        got = 1;
        ck_assert_msg(num_bytes(v[i].in, &got) == 0, "num_bytes(\"%s\") failed", v[i].in);
        ck_assert_msg(got == v[i].want, "num_bytes(\"%s\") = %ju, want %ju", v[i].in,
                      (uintmax_t)got, (uintmax_t)v[i].want);
    }
}
END_TEST

START_TEST(bytes_errors)
{
    static const char *const v[] = {
        "",
        "5x",
        "-1",
        "k",
        "kb",
        "5kk",
        "5 5",
        "x5",
        "-1k",
        "0x10",
        "16777216t",
        "18446744073709551616",
        "99999999999999999999999",
        "1e3",
        "5.5.5k",
    };
    uint64_t got;

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        got = 42;
        errno = 0;
        ck_assert_msg(num_bytes(v[i], &got) == -1, "num_bytes(\"%s\") accepted (%ju)", v[i],
                      (uintmax_t)got);
        ck_assert_msg(errno == EINVAL || errno == ERANGE, "num_bytes(\"%s\") errno %d", v[i],
                      errno);
        ck_assert_msg(got == 42, "num_bytes(\"%s\") touched *out on error", v[i]);
    }
}
END_TEST

START_TEST(bytes_overflow_is_erange)
{
    uint64_t got = 42;

    errno = 0;
    ck_assert_int_eq(num_bytes("18446744073709551616", &got), -1);
    ck_assert_int_eq(errno, ERANGE);
    errno = 0;
    ck_assert_int_eq(num_bytes("16777216t", &got), -1);
    ck_assert_int_eq(errno, ERANGE);
    ck_assert(got == 42);
}
END_TEST

START_TEST(uint_values)
{
    unsigned got;

    ck_assert_int_eq(num_uint("0", &got), 0);
    ck_assert_uint_eq(got, 0);
    ck_assert_int_eq(num_uint("42", &got), 0);
    ck_assert_uint_eq(got, 42);
    ck_assert_int_eq(num_uint("4294967295", &got), 0);
    ck_assert_uint_eq(got, 4294967295u);
}
END_TEST

START_TEST(uint_errors)
{
    static const char *const v[] = {
        "", "-1", "1x", "x", "4294967296", "99999999999999999999", "1.5", "0x10", "1 2",
    };
    unsigned got;

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        got = 42;
        errno = 0;
        ck_assert_msg(num_uint(v[i], &got) == -1, "num_uint(\"%s\") accepted (%u)", v[i], got);
        ck_assert_msg(errno == EINVAL || errno == ERANGE, "num_uint(\"%s\") errno %d", v[i], errno);
        ck_assert_msg(got == 42, "num_uint(\"%s\") touched *out on error", v[i]);
    }
    errno = 0;
    ck_assert_int_eq(num_uint("4294967296", &got), -1);
    ck_assert_int_eq(errno, ERANGE);
}
END_TEST

START_TEST(bool_values)
{
    static const struct {
        const char *in;
        bool want;
    } v[] = {
        { "on", true },     { "off", false },     { "true", true },   { "false", false },
        { "yes", true },    { "no", false },      { "1", true },      { "0", false },
        { "enable", true }, { "disable", false }, { "ENABLE", true }, /* Varnish's */
    };
    bool got;

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        got = !v[i].want;
        ck_assert_msg(num_bool(v[i].in, &got) == 0, "num_bool(\"%s\") failed", v[i].in);
        ck_assert_msg(got == v[i].want, "num_bool(\"%s\") wrong", v[i].in);
    }
}
END_TEST

START_TEST(bool_errors)
{
    static const char *const v[] = { "", "maybe", "2", "onn", "of", "-1", "yess", "truefalse" };
    bool got;

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        got = true;
        errno = 0;
        ck_assert_msg(num_bool(v[i], &got) == -1, "num_bool(\"%s\") accepted", v[i]);
        ck_assert_int_eq(errno, EINVAL);
        ck_assert(got == true);
    }
}
END_TEST

START_TEST(human_bytes)
{
    static const struct {
        uint64_t in;
        const char *want;
    } v[] = {
        { 0, "0 B" },
        { 1023, "1023 B" },
        { 1024, "1.0 KiB" },
        { 1536, "1.5 KiB" },
        { 1048524, "1023.9 KiB" },
        { 1048525, "1.0 MiB" }, /* 1023.95 KiB: a unit up, not "1024.0 KiB" */
        { 268435456, "256.0 MiB" },
        { 3ull << 30, "3.0 GiB" },
        { 5ull << 40, "5.0 TiB" },
        { UINT64_MAX, "16.0 EiB" },
    };
    char buf[NUM_HUMAN_LEN];

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        ck_assert_str_eq(num_human_bytes(v[i].in, buf), v[i].want);
}
END_TEST

START_TEST(hex_digits)
{
    static const char digits[] = "0123456789abcdef";

    for (int i = 0; i < 16; i++) {
        ck_assert_int_eq(num_hexdigit(digits[i]), i);
        ck_assert_int_eq(num_hexdigit((char)(digits[i] >= 'a' ? digits[i] - 32 : digits[i])), i);
    }
    ck_assert_int_eq(num_hexdigit('g'), -1);
    ck_assert_int_eq(num_hexdigit('G'), -1);
    ck_assert_int_eq(num_hexdigit('/'), -1);
    ck_assert_int_eq(num_hexdigit(':'), -1);
    ck_assert_int_eq(num_hexdigit('\0'), -1);
}
END_TEST

START_TEST(null_is_a_bug)
{
    double got;

    (void)num_duration(NULL, &got); /* must trip AN() */
}
END_TEST

START_TEST(null_bytes_is_a_bug)
{
    uint64_t got;

    (void)num_bytes(NULL, &got);
}
END_TEST

Suite *
num_suite(void)
{
    Suite *s = suite_create("num");
    TCase *tc = tcase_create("duration");

    tcase_add_test(tc, duration_units);
    tcase_add_test(tc, duration_errors);
    tcase_add_test_raise_signal(tc, null_is_a_bug, SIGABRT);
    suite_add_tcase(s, tc);

    tc = tcase_create("bytes");
    tcase_add_test(tc, bytes_units);
    tcase_add_test(tc, bytes_errors);
    tcase_add_test(tc, bytes_overflow_is_erange);
    tcase_add_test_raise_signal(tc, null_bytes_is_a_bug, SIGABRT);
    suite_add_tcase(s, tc);

    tc = tcase_create("uint_bool");
    tcase_add_test(tc, uint_values);
    tcase_add_test(tc, uint_errors);
    tcase_add_test(tc, bool_values);
    tcase_add_test(tc, bool_errors);
    tcase_add_test(tc, human_bytes);
    tcase_add_test(tc, hex_digits);
    suite_add_tcase(s, tc);
    return s;
}
