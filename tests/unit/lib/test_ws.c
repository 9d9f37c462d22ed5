/*
 * ws: the per-request arena.  Running out is normal (NULL), so the
 * tests push it to the end, and check alignment and that nothing is
 * ever handed out beyond the block.
 */
#include <signal.h>
#include <stdint.h>
#include <string.h>

#include "unit.h"
#include "surogat/ws.h"

static _Alignas(16) char block[1024];

static void
in_block(const struct ws *ws, const void *p, size_t len)
{
    const char *c = p;

    ck_assert(c >= ws->s && c + len <= ws->e);
    ck_assert(c >= block && c + len <= block + sizeof block);
}

START_TEST(alloc_aligned)
{
    struct ws ws;
    char *a, *b, *c;

    ws_init(&ws, block, sizeof block);
    ck_assert_uint_eq(ws.magic, WS_MAGIC);
    ck_assert_uint_eq(ws_free_bytes(&ws), sizeof block);
    a = ws_alloc(&ws, 1);
    b = ws_alloc(&ws, 1);
    c = ws_alloc(&ws, 13);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_nonnull(c);
    ck_assert_uint_eq((uintptr_t)a % 8, 0);
    ck_assert_uint_eq((uintptr_t)b % 8, 0);
    ck_assert_uint_eq((uintptr_t)c % 8, 0);
    ck_assert(b >= a + 1 && c >= b + 1);
    in_block(&ws, c, 13);
    ck_assert_uint_le(ws_free_bytes(&ws), sizeof block - 15);
    ck_assert_uint_ge(ws_free_bytes(&ws), sizeof block - 32);
}
END_TEST

START_TEST(unaligned_block)
{
    struct ws ws;
    char *p;

    ws_init(&ws, block + 3, sizeof block - 3);
    p = ws_alloc(&ws, 8);
    ck_assert_ptr_nonnull(p);
    ck_assert_uint_eq((uintptr_t)p % 8, 0);
    ck_assert(p >= block + 3 && p + 8 <= block + sizeof block);
}
END_TEST

START_TEST(runs_out)
{
    struct ws ws;
    size_t n = 0;
    char *p;

    ws_init(&ws, block, sizeof block);
    while ((p = ws_alloc(&ws, 24)) != NULL) {
        in_block(&ws, p, 24);
        memset(p, 0xaa, 24);
        n++;
        ck_assert_uint_le(n, sizeof block / 24);
    }
    ck_assert_uint_ge(n, sizeof block / 24 - 1);
    ck_assert_uint_lt(ws_free_bytes(&ws), 24);
    /* Full is not a bug, and stays full. */
    ck_assert_ptr_null(ws_alloc(&ws, 24));
    ck_assert_ptr_null(ws_alloc(&ws, sizeof block));
}
END_TEST

START_TEST(huge_does_not_wrap)
{
    struct ws ws;

    ws_init(&ws, block, sizeof block);
    ck_assert_ptr_nonnull(ws_alloc(&ws, 8));
    ck_assert_ptr_null(ws_alloc(&ws, SIZE_MAX));
    ck_assert_ptr_null(ws_alloc(&ws, SIZE_MAX - 3));
    ck_assert_ptr_null(ws_alloc(&ws, SIZE_MAX - 7));
    ck_assert_ptr_null(ws_alloc(&ws, SIZE_MAX / 2));
    ck_assert_ptr_null(ws_alloc(&ws, sizeof block));
    ck_assert_uint_eq(ws_free_bytes(&ws), sizeof block - 8);
    ck_assert_ptr_nonnull(ws_alloc(&ws, sizeof block - 8));
}
END_TEST

START_TEST(strndup_copies)
{
    struct ws ws;
    const char src[] = "Host: example.com";
    char *p;

    ws_init(&ws, block, sizeof block);
    p = ws_strndup(&ws, src, 4);
    ck_assert_ptr_nonnull(p);
    ck_assert_str_eq(p, "Host");
    ck_assert_ptr_ne(p, src);
    in_block(&ws, p, 5);
    p = ws_strndup(&ws, src, 0);
    ck_assert_ptr_nonnull(p);
    ck_assert_str_eq(p, "");
}
END_TEST

START_TEST(strndup_full)
{
    struct ws ws;
    char big[64];

    memset(big, 'x', sizeof big);
    ws_init(&ws, block, 32);
    ck_assert_ptr_null(ws_strndup(&ws, big, 32)); /* 32 + NUL */
    ck_assert_ptr_nonnull(ws_strndup(&ws, big, 31));
}
END_TEST

START_TEST(reset_gives_all_back)
{
    struct ws ws;
    void *first, *again;

    ws_init(&ws, block, sizeof block);
    first = ws_alloc(&ws, 100);
    while (ws_alloc(&ws, 100) != NULL)
        ;
    ws_reset(&ws);
    ck_assert_uint_eq(ws_free_bytes(&ws), sizeof block);
    again = ws_alloc(&ws, 100);
    ck_assert_ptr_eq(first, again);
}
END_TEST

START_TEST(reserve_release)
{
    struct ws ws;
    size_t len = 0, before;
    char *r, *p;

    ws_init(&ws, block, sizeof block);
    (void)ws_alloc(&ws, 10);
    before = ws_free_bytes(&ws);
    r = ws_reserve_all(&ws, &len);
    ck_assert_ptr_nonnull(r);
    ck_assert_uint_eq(len, before);
    in_block(&ws, r, len);
    memset(r, 'h', len);
    ws_release(&ws, 100);
    ck_assert_uint_le(ws_free_bytes(&ws), before - 100);
    ck_assert_uint_ge(ws_free_bytes(&ws), before - 100 - 8);
    p = ws_alloc(&ws, 8);
    ck_assert_ptr_nonnull(p);
    ck_assert(p >= r + 100); /* must not hand out what was kept */
    ck_assert(r[99] == 'h');

    /* Releasing 0 gives everything back. */
    before = ws_free_bytes(&ws);
    r = ws_reserve_all(&ws, &len);
    ck_assert_uint_eq(len, before);
    ws_release(&ws, 0);
    ck_assert_uint_eq(ws_free_bytes(&ws), before);
}
END_TEST

START_TEST(reserve_when_full)
{
    struct ws ws;
    size_t len = 99;

    ws_init(&ws, block, 64);
    ck_assert_ptr_nonnull(ws_alloc(&ws, 64));
    ck_assert_uint_eq(ws_free_bytes(&ws), 0);
    (void)ws_reserve_all(&ws, &len);
    ck_assert_uint_eq(len, 0);
    ws_release(&ws, 0);
    ck_assert_uint_eq(ws_free_bytes(&ws), 0);
}
END_TEST

START_TEST(bad_magic_is_a_bug)
{
    struct ws ws;

    memset(&ws, 0, sizeof ws); /* never ws_init()ed: OBJ_CHECK must trip */
    (void)ws_alloc(&ws, 8);
}
END_TEST

START_TEST(over_release_is_a_bug)
{
    struct ws ws;
    size_t len;

    ws_init(&ws, block, 64);
    (void)ws_reserve_all(&ws, &len);
    ws_release(&ws, len + 1);
}
END_TEST

Suite *
ws_suite(void)
{
    Suite *s = suite_create("ws");
    TCase *tc = tcase_create("ws");

    tcase_add_test(tc, alloc_aligned);
    tcase_add_test(tc, unaligned_block);
    tcase_add_test(tc, runs_out);
    tcase_add_test(tc, huge_does_not_wrap);
    tcase_add_test(tc, strndup_copies);
    tcase_add_test(tc, strndup_full);
    tcase_add_test(tc, reset_gives_all_back);
    tcase_add_test(tc, reserve_release);
    tcase_add_test(tc, reserve_when_full);
    tcase_add_test_raise_signal(tc, bad_magic_is_a_bug, SIGABRT);
    tcase_add_test_raise_signal(tc, over_release_is_a_bug, SIGABRT);
    suite_add_tcase(s, tc);
    return s;
}
