/*
 * ext -- a free-extent allocator over a range of units (the file store's
 * space, in units of its block size).  It knows nothing of files: it
 * hands out and takes back [start, start+n) ranges, coalescing free
 * neighbours, and the store writes what it needs on disk.
 *
 * Free extents are kept in segregated size classes (two levels: a power
 * of two, then eight linear steps inside it), so a request is served in
 * constant time by an extent at most one step larger than needed ("good
 * fit"): big free runs are not chipped away by small objects while a
 * closer fit exists, which keeps fragmentation low.  Two hash tables, by
 * start and by end, find the neighbours to merge with on free.
 *
 * Not thread-safe: the store holds its lock around every call.
 */
#ifndef SUROGAT_EXT_H
#define SUROGAT_EXT_H

#include <stdbool.h>
#include <stdint.h>

struct ext_alloc; /* opaque */

struct ext_alloc *ext_new(void); /* empty: nothing free until ext_put() */
void ext_destroy(struct ext_alloc **ap);
/*
 * An extent of `want` units, or failing that the largest free one of at
 * least `min` units.  Returns its length (0: nothing fits) and its start
 * in *start.  The remainder of a split extent stays free.
 */
uint64_t ext_get(struct ext_alloc *a, uint64_t want, uint64_t min, uint64_t *start);
/* Length of the free extent starting at start, 0 if none does (after a split: the rest). */
uint64_t ext_free_at(const struct ext_alloc *a, uint64_t start);
/*
 * Give [start, start+n) back.  It merges with free neighbours; the free
 * extent it became part of is returned in *mstart, *mn.
 */
void ext_put(struct ext_alloc *a, uint64_t start, uint64_t n, uint64_t *mstart, uint64_t *mn);
/*
 * Shrink the used extent [start, start+n) to its first `keep` units: the
 * tail is given back (merged as by ext_put, reported the same way).
 */
void ext_trim(struct ext_alloc *a, uint64_t start, uint64_t n, uint64_t keep, uint64_t *mstart,
              uint64_t *mn);

struct ext_stats {
    uint64_t free_units;
    uint64_t free_extents;
    uint64_t largest; /* units in the largest free extent */
};
void ext_stats(const struct ext_alloc *a, struct ext_stats *st);
/* Whether [start, start+n) lies entirely in free space (for tests and assertions). */
bool ext_is_free(const struct ext_alloc *a, uint64_t start, uint64_t n);

#endif
