/*
 * slab: the malloc store's exact-size small blocks, alone (costs, no
 * overlap, slabs given back) and under the store (small bodies of
 * announced and unknown length charged at their slab cost, the store's
 * accounts back to zero, bytes intact after a trim moved them).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "unit.h"
#include "tbuf.h"
#include "surogat/defs.h"
#include "surogat/par.h"
#include "surogat/sb.h"
#include "surogat/slab.h"
#include "surogat/stat.h"
#include "surogat/sto.h"

START_TEST(cost_is_the_share_of_a_slab)
{
    size_t prev = 0;

    /* 1,344 bytes: 48 regions fit 64 KiB less the header, 65,536 / 48 each. */
    ck_assert_uint_eq(slab_cost(1333), (SLAB_SIZE + 47) / 48);
    ck_assert_uint_lt(slab_cost(1333), sto_heap_cost(1333));
    for (size_t n = 1; n <= SLAB_MAX; n++) {
        size_t c = slab_cost(n);

        ck_assert_uint_ge(c, n);
        ck_assert_uint_ge(c, prev); /* never less for more */
        /* At most the step and one region of slack shared out, plus the header's share. */
        ck_assert_uint_le(c, ((n + SLAB_STEP - 1) & ~(size_t)(SLAB_STEP - 1)) * SLAB_SIZE /
                                     (SLAB_SIZE - 64 - n - SLAB_STEP) + 1);
        prev = c;
    }
}
END_TEST

struct blk {
    unsigned char *p;
    size_t n;
    unsigned char tag;
};

static void
check_blk(const struct blk *b)
{
    size_t i = 0;

    while (i < b->n && b->p[i] == b->tag)
        i++;
    ck_assert_uint_eq(i, b->n);
}

/* Random sizes, random frees: nothing overlaps, every block keeps its bytes, all go back. */
START_TEST(blocks_never_overlap)
{
    enum { N = 20000 };
    struct blk *v = calloc(N, sizeof *v);
    struct slab_stats st0, st;
    uint32_t x = 12345;

    ck_assert_ptr_nonnull(v);
    slab_stats(&st0);
    for (unsigned round = 0; round < 4; round++) {
        for (unsigned i = 0; i < N; i++) {
            (void)xrnd(&x);
            if (v[i].p != NULL && (x >> 8) % 3 != 0)
                continue;
            if (v[i].p != NULL) {
                check_blk(&v[i]);
                slab_free(v[i].p);
            }
            v[i].n = 1 + (x >> 12) % SLAB_MAX;
            v[i].tag = (unsigned char)(i * 7 + round);
            v[i].p = slab_alloc(v[i].n);
            ck_assert_uint_eq((uintptr_t)v[i].p % SLAB_STEP, 0);
            memset(v[i].p, v[i].tag, v[i].n);
        }
    }
    slab_stats(&st);
    ck_assert_uint_eq(st.blocks, st0.blocks + N);
    for (unsigned i = 0; i < N; i++) {
        check_blk(&v[i]);
        slab_free(v[i].p);
    }
    slab_stats(&st);
    ck_assert_uint_eq(st.blocks, st0.blocks);
    /* At most one slab kept per class. */
    ck_assert_uint_le(st.slabs, SLAB_MAX / SLAB_STEP);
    free(v);
}
END_TEST

/* A class's empty slabs are freed, all but the one kept for the next block. */
START_TEST(empty_slabs_go_back)
{
    enum { N = 200 }; /* 4,000-odd-byte regions: 15 a slab, so 14 slabs */
    void *p[N];
    struct slab_stats st0, st;

    slab_stats(&st0);
    for (unsigned i = 0; i < N; i++)
        p[i] = slab_alloc(2999);
    slab_stats(&st);
    ck_assert_uint_ge(st.slabs, st0.slabs + N / ((SLAB_SIZE - 64) / 3000));
    for (unsigned i = 0; i < N; i++)
        slab_free(p[i]);
    slab_stats(&st);
    ck_assert_uint_le(st.slabs, st0.slabs + 1);
}
END_TEST

/* ---- under the malloc store ---- */

static void
setup(void)
{
    char ebuf[256];
    struct sb err;

    (void)stat_init();
    par.sendfile_min_size = 64 * 1024;
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_msg(sto_init("malloc,64m", &err) == 0, "%s", ebuf);
}

static void
teardown(void)
{
    sto_fini();
}

static char want[64 * 1024];

/* len bytes, different for every seed (tbuf.h's generator). */
static void
fill(char *buf, size_t len, unsigned seed)
{
    uint32_t x = seed + 1;

    for (size_t i = 0; i < len; i++)
        buf[i] = (char)xrnd(&x);
}

static void
check_body(const struct sto_body *b, size_t len, unsigned seed)
{
    size_t off = 0;

    fill(want, len, seed);
    ck_assert_uint_eq(b->len, len);
    for (const struct sto_seg *s = b->first; s != NULL; s = s->next) {
        ck_assert_uint_le(off + s->len, len);
        ck_assert_mem_eq(s->data, want + off, s->len);
        off += s->len;
    }
    ck_assert_uint_eq(off, len);
}

static void
put(struct sto_body *b, struct sto_meta *m, size_t len, bool announce, unsigned seed)
{
    fill(want, len, seed);
    memset(b, 0, sizeof *b);
    b->size_hint = announce ? len : 0;
    ck_assert_int_eq(sto_open(b, m), 0);
    /* In pieces, as a fetch appends. */
    for (size_t off = 0; off < len; off += 700)
        ck_assert_int_eq(sto_append(b, want + off, SRG_MIN(len - off, (size_t)700)), 0);
    sto_body_trim(b);
    sto_seal(b);
}

/* A 1 KiB object with a 277-byte head: one slab block, charged as one. */
START_TEST(small_object_is_one_exact_block)
{
    char head[277];
    struct sto_meta m = { "k", 1, head, sizeof head, "", 0, NULL, 0, 100, NULL, 0 };
    struct sto_body b;
    size_t blk = sizeof(struct sto_seg) + sizeof head + 1024;

    memset(head, 'h', sizeof head);
    put(&b, &m, 1024, true, 1);
    ck_assert_ptr_eq(b.first, b.last);
    ck_assert(b.meta_stored);
    ck_assert_uint_eq(b.bytes, 100 + slab_cost(blk));
    ck_assert_uint_eq(sto_block_cost(blk), slab_cost(blk));
    ck_assert_uint_eq(sto_used(), b.bytes);
    ck_assert_uint_lt(b.bytes, 100 + sto_heap_cost(blk));
    check_body(&b, 1024, 1);
    ck_assert_mem_eq(m.head, head, sizeof head);
    sto_body_free(&b);
    ck_assert_uint_eq(sto_used(), 0);
}
END_TEST

/* Unknown lengths, a body of every size around the slab limit: trimmed, intact, all credited. */
START_TEST(unknown_lengths_trim_into_slabs)
{
    static const size_t lens[] = { 0, 1, 100, 1024, 2000, 3000, 3072 - 32, 3100, 4096, 5000, 9000 };
    struct sto_meta m = { "k", 1, "HTTP/1.1 200 OK\r\n", 17, "", 0, NULL, 0, 64, NULL, 0 };
    struct sto_body b[sizeof lens / sizeof lens[0]];

    for (unsigned i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        put(&b[i], &m, lens[i], false, i);
        if (lens[i] > 0 && lens[i] <= 4096) {
            /* One segment, trimmed to its length: charged at its block's cost. */
            size_t n = sizeof(struct sto_seg) + lens[i];

            ck_assert_ptr_eq(b[i].first, b[i].last);
            ck_assert_uint_eq(b[i].first->cap, lens[i]);
            ck_assert_uint_eq(b[i].bytes, 64 + sto_heap_cost(17) + sto_block_cost(n));
            ck_assert_uint_le(sto_block_cost(n), sto_heap_cost(n));
        }
    }
    for (unsigned i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        check_body(&b[i], lens[i], i);
        sto_body_free(&b[i]);
    }
    ck_assert_uint_eq(sto_used(), 0);
}
END_TEST

/* Announced lengths that turn out wrong either way: the bytes stay right, the accounts square. */
START_TEST(announced_length_wrong)
{
    struct sto_meta m = { "k", 1, "HTTP/1.1 200 OK\r\n", 17, "v\0x", 3, NULL, 0, 64, NULL, 0 };
    struct sto_body b;

    fill(want, 3000, 9);
    memset(&b, 0, sizeof b);
    b.size_hint = 1000; /* 3,000 come */
    ck_assert_int_eq(sto_open(&b, &m), 0);
    ck_assert_int_eq(sto_append(&b, want, 3000), 0);
    sto_body_trim(&b);
    check_body(&b, 3000, 9);
    ck_assert_mem_eq(m.vary, "v\0x", 3);
    sto_body_free(&b);
    memset(&b, 0, sizeof b);
    b.size_hint = 2000; /* 10 come */
    ck_assert_int_eq(sto_open(&b, &m), 0);
    ck_assert_int_eq(sto_append(&b, want, 10), 0);
    sto_body_trim(&b);
    check_body(&b, 10, 9);
    sto_body_free(&b);
    ck_assert_uint_eq(sto_used(), 0);
}
END_TEST

Suite *
slab_suite(void)
{
    Suite *s = suite_create("slab");
    TCase *tc = tcase_create("slab");
    TCase *st;

    tcase_add_test(tc, cost_is_the_share_of_a_slab);
    tcase_add_test(tc, blocks_never_overlap);
    tcase_add_test(tc, empty_slabs_go_back);
    suite_add_tcase(s, tc);
    st = unit_tcase(s, "malloc_store", setup, teardown);
    tcase_add_test(st, small_object_is_one_exact_block);
    tcase_add_test(st, unknown_lengths_trim_into_slabs);
    tcase_add_test(st, announced_length_wrong);
    return s;
}
