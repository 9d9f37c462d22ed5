/*
 * stat -- counters of tbl/stats.h, one block per thread, and the
 * per-backend counters of tbl/be_stats.h, one set per backend.
 *
 * A thread registers its block once (stat_thread_enter) and then counts
 * into it with plain loads and stores: only the owner writes it.  Readers
 * sum all blocks with relaxed loads.  A gauge may be raised on one thread
 * and lowered on another: the blocks wrap, and the sum comes out right.
 *
 * A backend's set cannot live in the thread blocks: backends come and go
 * with policy reloads, and a slot per backend in every thread would cost
 * threads x backends.  It is STAT_BE_STRIPES stripes of cache-line
 * aligned counters instead; a thread counts into the stripe of its slot
 * number with a relaxed atomic add, and readers sum the stripes.  Two
 * workers share a line only when more than STAT_BE_STRIPES of them fetch
 * from one backend at once, and even then the add costs far less than
 * one of the syscalls around it.
 */
#ifndef SUROGAT_STAT_H
#define SUROGAT_STAT_H

#include <stdbool.h>
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
extern __thread unsigned stat_slot; /* this thread's number, from 0 in order of registration */

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
/* Every counter summed; the computed rows (uptime, threads_idle) filled in. */
void stat_sum(struct stat_block *out);
/* "name value" per line, in table order. */
void stat_dump(struct sb *out);
const char *stat_name(enum stat_id id);
const char *stat_doc(enum stat_id id);
bool stat_is_gauge(enum stat_id id);
/* Seconds since stat_init(), the start of surogatd. */
double stat_uptime(void);

/*
 * Latency histograms (the client's req_time_* rows, a backend's fb_time_*
 * and time_* rows): STAT_NBUCKET buckets, each counting its own range;
 * these are the upper bounds in seconds of all but the last, unbounded.
 */
#define STAT_NBUCKET 15
extern const double stat_time_bounds[STAT_NBUCKET - 1];
/* The bucket of a duration of dt seconds (upper bounds inclusive; negative is 0). */
unsigned stat_time_bucket(double dt);

/* ---- per backend ---- */

enum stat_be_id {
#define BESTAT(name, kind, doc) STAT_BE_##name,
#include "surogat/tbl/be_stats.h"
    STAT_BE__N
};
/* The COUNTER rows come first: these are counted, the GAUGE rows read from the backend. */
#define STAT_BE__NCTR   STAT_BE_healthy
#define STAT_BE_STRIPES 16

struct stat_be; /* opaque: the stripes */

struct stat_be *stat_be_new(void);      /* zeroed; never NULL */
void stat_be_free(struct stat_be **sp); /* *sp = NULL */
/* Any thread, lock-free: a relaxed add to this thread's stripe.  id is a COUNTER row. */
void stat_be_add(struct stat_be *s, enum stat_be_id id, uint64_t n);
/* A response's status, as its resp_Nxx row (other than 1xx-5xx: not counted). */
void stat_be_status(struct stat_be *s, unsigned status);
/* One transaction: seconds to the first byte and to the end, in both histograms and sums. */
void stat_be_time(struct stat_be *s, double fb, double total);
/* The COUNTER rows summed over the stripes into out[0 .. STAT_BE__NCTR - 1]. */
void stat_be_sum(const struct stat_be *s, uint64_t *out);
const char *stat_be_name(enum stat_be_id id);
const char *stat_be_doc(enum stat_be_id id);
bool stat_be_is_gauge(enum stat_be_id id);

#endif
