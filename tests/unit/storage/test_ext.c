/*
 * ext: the free-extent allocator of the file store.  Besides the direct
 * cases, a long random run of gets and puts is checked against a unit
 * bitmap: nothing is handed out twice, nothing leaks, and every free
 * neighbour pair is merged (free extents never touch).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "unit.h"
#include "surogat/ext.h"

START_TEST(empty_gives_nothing)
{
    struct ext_alloc *a = ext_new();
    uint64_t s = 99;

    ck_assert_uint_eq(ext_get(a, 1, 1, &s), 0);
    ext_destroy(&a);
    ck_assert_ptr_null(a);
}
END_TEST

START_TEST(split_and_merge_back)
{
    struct ext_alloc *a = ext_new();
    struct ext_stats st;
    uint64_t s1, s2, s3, ms, mn;

    ext_put(a, 0, 100, &ms, &mn);
    ck_assert_uint_eq(ms, 0);
    ck_assert_uint_eq(mn, 100);
    ck_assert_uint_eq(ext_get(a, 10, 10, &s1), 10);
    ck_assert_uint_eq(ext_get(a, 20, 20, &s2), 20);
    ck_assert_uint_eq(ext_get(a, 30, 30, &s3), 30);
    ck_assert(s1 + 10 <= s2 || s2 + 20 <= s1);
    ext_stats(a, &st);
    ck_assert_uint_eq(st.free_units, 40);
    /* Free the middle one, then its neighbours: one extent again. */
    ext_put(a, s2, 20, &ms, &mn);
    ck_assert_uint_eq(mn, 20);
    ext_put(a, s1, 10, &ms, &mn);
    ext_put(a, s3, 30, &ms, &mn);
    ext_stats(a, &st);
    ck_assert_uint_eq(st.free_units, 100);
    ck_assert_uint_eq(st.free_extents, 1);
    ck_assert_uint_eq(st.largest, 100);
    ck_assert_uint_eq(ms, 0);
    ck_assert_uint_eq(mn, 100);
    ext_destroy(&a);
}
END_TEST

START_TEST(good_fit_spares_the_big_extent)
{
    struct ext_alloc *a = ext_new();
    uint64_t s;

    /* A small hole and a big run: a small request takes the hole. */
    ext_put(a, 0, 3, NULL, NULL);
    ext_put(a, 10, 1000, NULL, NULL);
    ck_assert_uint_eq(ext_get(a, 3, 3, &s), 3);
    ck_assert_uint_eq(s, 0);
    ck_assert(ext_is_free(a, 10, 1000));
    ext_destroy(&a);
}
END_TEST

START_TEST(min_takes_the_largest_that_fits)
{
    struct ext_alloc *a = ext_new();
    uint64_t s;

    ext_put(a, 0, 5, NULL, NULL);
    ext_put(a, 10, 7, NULL, NULL);
    ck_assert_uint_eq(ext_get(a, 50, 8, &s), 0); /* nothing reaches min */
    ck_assert_uint_eq(ext_get(a, 50, 6, &s), 7);
    ck_assert_uint_eq(s, 10);
    ck_assert_uint_eq(ext_get(a, 50, 1, &s), 5);
    ck_assert_uint_eq(ext_get(a, 1, 1, &s), 0);
    ext_destroy(&a);
}
END_TEST

START_TEST(trim_returns_the_tail)
{
    struct ext_alloc *a = ext_new();
    struct ext_stats st;
    uint64_t s, ms, mn;

    ext_put(a, 0, 64, NULL, NULL);
    ck_assert_uint_eq(ext_get(a, 64, 64, &s), 64);
    ext_trim(a, s, 64, 10, &ms, &mn);
    ck_assert_uint_eq(ms, 10);
    ck_assert_uint_eq(mn, 54);
    ext_stats(a, &st);
    ck_assert_uint_eq(st.free_units, 54);
    ck_assert(!ext_is_free(a, 0, 10));
    ext_destroy(&a);
}
END_TEST

START_TEST(exact_class_member_is_found)
{
    struct ext_alloc *a = ext_new();
    uint64_t s;

    /* 17 is in the class [16, 18): rounding 17 up skips that class, the scan must not. */
    ext_put(a, 100, 17, NULL, NULL);
    ck_assert_uint_eq(ext_get(a, 17, 17, &s), 17);
    ck_assert_uint_eq(s, 100);
    ext_destroy(&a);
}
END_TEST

#define SPACE 4096
#define SLOTS 300

START_TEST(random_against_a_bitmap)
{
    struct ext_alloc *a = ext_new();
    static unsigned char used[SPACE];
    uint64_t start[SLOTS], len[SLOTS], total_used = 0;
    struct ext_stats st;
    unsigned seed = 12345;

    memset(used, 0, sizeof used);
    memset(len, 0, sizeof len);
    ext_put(a, 0, SPACE, NULL, NULL);
    for (int round = 0; round < 200000; round++) {
        unsigned k = (unsigned)rand_r(&seed) % SLOTS;
        if (len[k] == 0) {
            uint64_t want = 1 + (uint64_t)rand_r(&seed) % 64, min = 1 + want / 2, s;
            uint64_t got = ext_get(a, want, min, &s);
            if (got == 0)
                continue;
            ck_assert(got >= min && got <= want);
            ck_assert(s + got <= SPACE);
            for (uint64_t u = s; u < s + got; u++) {
                ck_assert_msg(!used[u], "unit %llu handed out twice", (unsigned long long)u);
                used[u] = 1;
            }
            start[k] = s;
            len[k] = got;
            total_used += got;
        } else if (rand_r(&seed) % 4 == 0 && len[k] > 1) {
            uint64_t keep = 1 + (uint64_t)rand_r(&seed) % (len[k] - 1);
            ext_trim(a, start[k], len[k], keep, NULL, NULL);
            for (uint64_t u = start[k] + keep; u < start[k] + len[k]; u++)
                used[u] = 0;
            total_used -= len[k] - keep;
            len[k] = keep;
        } else {
            uint64_t ms, mn;
            ext_put(a, start[k], len[k], &ms, &mn);
            for (uint64_t u = start[k]; u < start[k] + len[k]; u++)
                used[u] = 0;
            /* The merged extent is free and bounded by used units or the edges. */
            ck_assert(ms == 0 || used[ms - 1]);
            ck_assert(ms + mn == SPACE || used[ms + mn]);
            total_used -= len[k];
            len[k] = 0;
        }
        ext_stats(a, &st);
        ck_assert_uint_eq(st.free_units + total_used, SPACE);
    }
    for (unsigned k = 0; k < SLOTS; k++)
        if (len[k] > 0)
            ext_put(a, start[k], len[k], NULL, NULL);
    ext_stats(a, &st);
    ck_assert_uint_eq(st.free_units, SPACE);
    ck_assert_uint_eq(st.free_extents, 1);
    ext_destroy(&a);
}
END_TEST

Suite *
ext_suite(void)
{
    Suite *s = suite_create("ext");
    TCase *tc = tcase_create("ext");

    tcase_add_test(tc, empty_gives_nothing);
    tcase_add_test(tc, split_and_merge_back);
    tcase_add_test(tc, good_fit_spares_the_big_extent);
    tcase_add_test(tc, min_takes_the_largest_that_fits);
    tcase_add_test(tc, trim_returns_the_tail);
    tcase_add_test(tc, exact_class_member_is_found);
    tcase_add_test(tc, random_against_a_bitmap);
    suite_add_tcase(s, tc);
    return s;
}
