/*
 * lfu -- a frequency sketch for cache admission (TinyLFU, Einziger and
 * Friedman 2017).  Every lookup counts its key; when a new object needs
 * room, it gets in only if its key has been asked for more often, lately,
 * than the key of the object it would evict.  A scan of one-hit wonders
 * therefore cannot flush objects that are asked for again.
 *
 * A count-min sketch: four rows of small saturating counters indexed by
 * the key's hash; the estimate is the smallest of the four.  When the
 * counts reach ten times the sketch's width every counter is halved, so
 * the frequencies follow the recent past.  Counting is racy by design:
 * a lost increment changes an estimate by one.
 */
#ifndef SUROGAT_LFU_H
#define SUROGAT_LFU_H

#include <stddef.h>
#include <stdint.h>

/* Size the sketch for about `objects` keys (rounded up to a power of two, at least 4096). */
void lfu_init(size_t objects);
void lfu_fini(void);
void lfu_touch(uint64_t hash);
unsigned lfu_estimate(uint64_t hash); /* 0 .. 15 */
uint64_t lfu_resets(void);            /* how many times the counts were halved */

#endif
