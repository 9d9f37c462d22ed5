/*
 * unit -- what every Check test file includes.  meson builds one
 * executable per module from its test file and runner.c, defining
 * UNIT_SUITE as that module's suite function (-DUNIT_SUITE=num_suite).
 */
#ifndef SUROGAT_UNIT_H
#define SUROGAT_UNIT_H

#include <check.h>

#ifndef UNIT_SUITE
#error "build with -DUNIT_SUITE=<name>_suite"
#endif

Suite *UNIT_SUITE(void);

/* A test case of s whose tests each run between setup and teardown (either may be NULL). */
static inline TCase *
unit_tcase(Suite *s, const char *name, SFun setup, SFun teardown)
{
    TCase *tc = tcase_create(name);

    tcase_add_checked_fixture(tc, setup, teardown);
    suite_add_tcase(s, tc);
    return (tc);
}

#endif
