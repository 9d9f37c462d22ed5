/*
 * The admission sketch.  Counters are bytes saturating at 15 (four bits
 * of information: enough to tell one-hit wonders from regulars, and
 * halving keeps them young).  Each thread batches its count of touches
 * into the shared total, so a hit costs four relaxed byte updates and no
 * shared write most of the time.
 */
#include "config.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "surogat/defs.h"
#include "surogat/lfu.h"

#define ROWS      4
#define CNT_MAX   15
#define BATCH     64
#define WIDTH_MIN 4096
#define BLOCK     64 /* bytes: a cache line */

static uint8_t *table; /* ROWS * width counters, in blocks of one cache line (counter()) */
static size_t width;   /* a power of two */
static uint64_t touches; /* atomic: since the last halving */
static uint64_t sample;  /* halve after this many touches */
static uint64_t resets;  /* atomic */
static unsigned halving; /* atomic: a thread is halving */
static __thread unsigned local_touches;

void
lfu_init(size_t objects)
{
    width = WIDTH_MIN;
    while (width < objects && width < ((size_t)1 << 26))
        width <<= 1;
    table = aligned_alloc(BLOCK, ROWS * width);
    AN(table);
    memset(table, 0, ROWS * width);
    sample = 10 * (uint64_t)width;
    touches = 0;
    resets = 0;
}

void
lfu_fini(void)
{
    free(table);
    table = NULL;
}

/*
 * Row r's counter for hash.  The table is blocks of one cache line, each
 * holding 16 counters of every row: the low bits of the hash pick a key's
 * block, the high bits its counter in each row's part of it.  A touch on
 * every hit then costs one cache line, not one per row (with rows apart,
 * a working set larger than the cache missed four times per hit); each
 * row still has `width` counters, as many as it had as a row of its own.
 */
static uint8_t *
counter(uint64_t hash, unsigned r)
{
    size_t nblocks = ROWS * width / BLOCK;
    uint64_t h2 = (hash >> 32) * 0x9e3779b97f4a7c15ULL;
    uint8_t *b = &table[(hash & (nblocks - 1)) * BLOCK];

    return (&b[r * (BLOCK / ROWS) + ((h2 >> (60 - 4 * r)) & (BLOCK / ROWS - 1))]);
}

static void
halve(void)
{
    unsigned expect = 0;

    if (!__atomic_compare_exchange_n(&halving, &expect, 1, false, __ATOMIC_ACQUIRE,
                                     __ATOMIC_RELAXED))
        return; /* another thread is at it */
    if (__atomic_load_n(&touches, __ATOMIC_RELAXED) >= sample) {
        for (size_t i = 0; i < ROWS * width; i++)
            __atomic_store_n(&table[i], (uint8_t)(__atomic_load_n(&table[i], __ATOMIC_RELAXED) >> 1),
                             __ATOMIC_RELAXED);
        __atomic_store_n(&touches, 0, __ATOMIC_RELAXED);
        __atomic_add_fetch(&resets, 1, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&halving, 0, __ATOMIC_RELEASE);
}

void
lfu_touch(uint64_t hash)
{
    if (table == NULL)
        return;
    for (unsigned r = 0; r < ROWS; r++) {
        uint8_t *c = counter(hash, r);
        uint8_t v = __atomic_load_n(c, __ATOMIC_RELAXED);
        if (v < CNT_MAX)
            __atomic_store_n(c, (uint8_t)(v + 1), __ATOMIC_RELAXED);
    }
    if (++local_touches < BATCH)
        return;
    if (__atomic_add_fetch(&touches, local_touches, __ATOMIC_RELAXED) >= sample)
        halve();
    local_touches = 0;
}

unsigned
lfu_estimate(uint64_t hash)
{
    unsigned est = CNT_MAX;

    if (table == NULL)
        return (0);
    for (unsigned r = 0; r < ROWS; r++) {
        unsigned v = __atomic_load_n(counter(hash, r), __ATOMIC_RELAXED);
        if (v < est)
            est = v;
    }
    return (est);
}

uint64_t
lfu_resets(void)
{
    return (__atomic_load_n(&resets, __ATOMIC_RELAXED));
}
