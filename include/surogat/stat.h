/*
 * stat -- counters of tbl/stats.h, one block per thread.
 *
 * A thread registers its block once (stat_thread_enter) and then counts
 * into it with plain loads and stores: only the owner writes it.  Readers
 * sum all blocks with relaxed loads.  A gauge may be raised on one thread
 * and lowered on another: the blocks wrap, and the sum comes out right.
 */
#ifndef SUROGAT_STAT_H
#define SUROGAT_STAT_H

#include <stdint.h>

struct sb;

enum stat_id {
#define STAT(name, kind, doc) STAT_##name,
#include "surogat/tbl/stats.h"
    STAT__N
};

struct stat_block {
    uint64_t v[STAT__N];
};

extern __thread struct stat_block *stat_tls;

int stat_init(void);
void stat_fini(void);
void stat_thread_enter(void); /* allocates and registers this thread's block */
void stat_thread_leave(void); /* folds it into the retired total and frees it */

static inline void
stat_add_id(enum stat_id id, uint64_t n)
{
    uint64_t *p = &stat_tls->v[id];
    __atomic_store_n(p, __atomic_load_n(p, __ATOMIC_RELAXED) + n, __ATOMIC_RELAXED);
}
#define STAT_ADD(name, n) stat_add_id(STAT_##name, (uint64_t)(n))
#define STAT_INC(name)    stat_add_id(STAT_##name, 1)
#define STAT_DEC(name)    stat_add_id(STAT_##name, (uint64_t)-1)

uint64_t stat_get(enum stat_id id);
void stat_sum(struct stat_block *out);
/* "name value" per line, in table order. */
void stat_dump(struct sb *out);

#endif
