/*
 * slab -- exact-size small blocks for the malloc store.  A block of n
 * bytes (1 to SLAB_MAX) takes a region of n rounded up to SLAB_STEP in a
 * slab of SLAB_SIZE bytes holding regions of that one size, instead of a
 * general allocator's size class (jemalloc's step is a quarter of the
 * power of two below n: a 1,333-byte head and body took 1,536 bytes, it
 * takes 1,344 here).  A slab is one SLAB_SIZE-aligned heap allocation:
 * its header at the start finds the class of any block in it, so a block
 * carries no header of its own.  A slab whose last block goes is freed,
 * unless it is its class's only slab with room (kept against churn).
 *
 * Thread-safe: one lock per class.
 */
#ifndef SUROGAT_SLAB_H
#define SUROGAT_SLAB_H

#include <stddef.h>
#include <stdint.h>

#define SLAB_SIZE ((size_t)64 * 1024)
/*
 * Blocks start on a cache line, as the heap's classes of 1 KiB and more
 * do: a hit reads the segment descriptor and the stored head at the
 * block's start, and 8-byte steps (which waste about 28 bytes less per
 * block) let them straddle one line more: 0.3 more last-level misses per
 * hit on the Zipf working set (bench/zipfmiss.py).
 */
#define SLAB_STEP 64
#define SLAB_MAX 3072 /* larger: the general allocator's classes waste a fifth or less */

/*
 * What a block of n bytes (n <= SLAB_MAX) really takes of the heap: its
 * share of a slab, header and unusable end included.  Pure arithmetic.
 */
size_t slab_cost(size_t n);
/* A block of n bytes, 1 <= n <= SLAB_MAX; never NULL (aborts when the heap is out). */
void *slab_alloc(size_t n);
/* Give back a block from slab_alloc(). */
void slab_free(void *p);

struct slab_stats {
    uint64_t slabs;  /* slabs held */
    uint64_t blocks; /* blocks handed out and not given back */
};
void slab_stats(struct slab_stats *st);

#endif
