/*
 * lfu: the admission sketch.  A count-min sketch never underestimates
 * (until it ages), saturates at 15, and halves everything once the
 * touches reach ten times its width.
 */
#include <stdint.h>

#include "unit.h"
#include "surogat/lfu.h"

static uint64_t
mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (x);
}

START_TEST(counts_and_saturates)
{
    lfu_init(4096);
    ck_assert_uint_eq(lfu_estimate(mix(1)), 0);
    for (int i = 0; i < 5; i++)
        lfu_touch(mix(1));
    ck_assert_uint_eq(lfu_estimate(mix(1)), 5);
    for (int i = 0; i < 100; i++)
        lfu_touch(mix(2));
    ck_assert_uint_eq(lfu_estimate(mix(2)), 15);
    lfu_fini();
}
END_TEST

START_TEST(never_underestimates_in_a_crowd)
{
    unsigned above = 0;

    lfu_init(4096);
    for (uint64_t k = 100; k < 3100; k++)
        lfu_touch(mix(k));
    for (int i = 0; i < 7; i++)
        lfu_touch(mix(7));
    ck_assert_uint_ge(lfu_estimate(mix(7)), 7);
    /* Keys never seen mostly read 0 or 1: collisions in all four rows are rare. */
    for (uint64_t k = 100000; k < 101000; k++)
        if (lfu_estimate(mix(k)) > 1)
            above++;
    ck_assert_uint_lt(above, 20);
    lfu_fini();
}
END_TEST

START_TEST(ages_by_halving)
{
    lfu_init(4096);
    for (int i = 0; i < 12; i++)
        lfu_touch(mix(3));
    ck_assert_uint_eq(lfu_estimate(mix(3)), 12);
    ck_assert_uint_eq(lfu_resets(), 0);
    /* 10 x width touches of other keys: one halving. */
    for (uint64_t k = 0; k < 10 * 4096 + 64; k++)
        lfu_touch(mix(1000000 + k % 50000));
    ck_assert_uint_eq(lfu_resets(), 1);
    ck_assert_uint_le(lfu_estimate(mix(3)), 7);
    ck_assert_uint_ge(lfu_estimate(mix(3)), 6);
    lfu_fini();
}
END_TEST

START_TEST(without_init_it_knows_nothing)
{
    lfu_touch(mix(1));
    ck_assert_uint_eq(lfu_estimate(mix(1)), 0);
}
END_TEST

Suite *
lfu_suite(void)
{
    Suite *s = suite_create("lfu");
    TCase *tc = tcase_create("lfu");

    tcase_add_test(tc, counts_and_saturates);
    tcase_add_test(tc, never_underestimates_in_a_crowd);
    tcase_add_test(tc, ages_by_halving);
    tcase_add_test(tc, without_init_it_knows_nothing);
    suite_add_tcase(s, tc);
    return s;
}
