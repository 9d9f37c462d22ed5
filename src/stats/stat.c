/*
 * Per-thread counter blocks.  A thread's block is written only by that
 * thread; readers (the CLI) sum every live block plus the total of the
 * threads that have exited, under stat_mtx, which writers never take.
 *
 * Also the per-backend counter stripes (see stat.h for why stripes), the
 * names and docs of both tables, and the latency buckets they share.
 */
#include "config.h"

#include <pthread.h>
#include <stdalign.h>
#include <stdlib.h>
#include <string.h>

#include "surogat/defs.h"
#include "surogat/sb.h"
#include "surogat/stat.h"
#include "surogat/tim.h"

__thread struct stat_block *stat_tls;
__thread unsigned stat_slot;

struct stat_node {
    struct stat_block blk; /* first: stat_tls points here */
    struct stat_node *next;
};

static pthread_mutex_t stat_mtx = PTHREAD_MUTEX_INITIALIZER;
static struct stat_node *stat_live;
static struct stat_block stat_retired;
static unsigned stat_nthreads; /* under stat_mtx: threads ever registered */
static double t_start;         /* tim_mono() at stat_init() */

static const struct {
    const char *name;
    bool gauge;
    const char *doc;
} stat_tbl[] = {
#define STAT(name, kind, doc) { #name, STAT_KIND_##kind, doc },
#define STAT_KIND_COUNTER     false
#define STAT_KIND_GAUGE       true
#include "surogat/tbl/stats.h"
}, stat_be_tbl[] = {
#define BESTAT(name, kind, doc) { #name, STAT_KIND_##kind, doc },
#include "surogat/tbl/be_stats.h"
};

/* Prometheus' default buckets, with 500us and 1ms below them: a cache hit takes well under 5ms. */
const double stat_time_bounds[STAT_NBUCKET - 1] = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10,
};

_Static_assert(STAT_req_time_over_10s - STAT_req_time_le_500us == STAT_NBUCKET - 1,
               "tbl/stats.h: the req_time_* rows must match stat_time_bounds, in order");
_Static_assert(STAT_BE_fb_time_over_10s - STAT_BE_fb_time_le_500us == STAT_NBUCKET - 1,
               "tbl/be_stats.h: the fb_time_* rows must match stat_time_bounds, in order");
_Static_assert(STAT_BE_resp_5xx - STAT_BE_resp_1xx == 4,
               "tbl/be_stats.h: the resp_Nxx rows must be contiguous, in order");
_Static_assert(STAT_BE_time_over_10s - STAT_BE_time_le_500us == STAT_NBUCKET - 1,
               "tbl/be_stats.h: the time_* rows must match stat_time_bounds, in order");

int
stat_init(void)
{
    t_start = tim_mono();
    stat_thread_enter();
    return (0);
}

void
stat_fini(void)
{
    stat_thread_leave();
}

void
stat_thread_enter(void)
{
    struct stat_node *n;

    SRG_ASSERT(stat_tls == NULL);
    n = calloc(1, sizeof *n);
    AN(n);
    AZ(pthread_mutex_lock(&stat_mtx));
    n->next = stat_live;
    stat_live = n;
    stat_slot = stat_nthreads++;
    AZ(pthread_mutex_unlock(&stat_mtx));
    stat_tls = &n->blk;
}

void
stat_thread_leave(void)
{
    struct stat_node *n = (struct stat_node *)stat_tls, **pp;

    AN(n);
    AZ(pthread_mutex_lock(&stat_mtx));
    for (pp = &stat_live; *pp != n; pp = &(*pp)->next)
        AN(*pp);
    *pp = n->next;
    for (unsigned i = 0; i < STAT__N; i++)
        stat_retired.v[i] += n->blk.v[i];
    AZ(pthread_mutex_unlock(&stat_mtx));
    stat_tls = NULL;
    free(n);
}

void
stat_sum(struct stat_block *out)
{
    AZ(pthread_mutex_lock(&stat_mtx));
    *out = stat_retired;
    for (struct stat_node *n = stat_live; n != NULL; n = n->next)
        for (unsigned i = 0; i < STAT__N; i++)
            out->v[i] += __atomic_load_n(&n->blk.v[i], __ATOMIC_RELAXED);
    AZ(pthread_mutex_unlock(&stat_mtx));
    out->v[STAT_uptime] = (uint64_t)stat_uptime();
    /* Two gauges summed from different threads' blocks: one may run ahead of the other. */
    out->v[STAT_threads_idle] = (int64_t)(out->v[STAT_threads] - out->v[STAT_threads_busy]) > 0
                                    ? out->v[STAT_threads] - out->v[STAT_threads_busy]
                                    : 0;
}

uint64_t
stat_get(enum stat_id id)
{
    struct stat_block b;

    SRG_ASSERT(id < STAT__N);
    stat_sum(&b);
    return (b.v[id]);
}

void
stat_dump(struct sb *out)
{
    struct stat_block b;

    stat_sum(&b);
    for (unsigned i = 0; i < STAT__N; i++)
        sb_printf(out, "%s %llu\n", stat_tbl[i].name, (unsigned long long)b.v[i]);
}

const char *
stat_name(enum stat_id id)
{
    SRG_ASSERT(id < STAT__N);
    return (stat_tbl[id].name);
}

const char *
stat_doc(enum stat_id id)
{
    SRG_ASSERT(id < STAT__N);
    return (stat_tbl[id].doc);
}

bool
stat_is_gauge(enum stat_id id)
{
    SRG_ASSERT(id < STAT__N);
    return (stat_tbl[id].gauge);
}

double
stat_uptime(void)
{
    return (t_start > 0 ? tim_mono() - t_start : 0);
}

unsigned
stat_time_bucket(double dt)
{
    unsigned i;

    for (i = 0; i < STAT_NBUCKET - 1 && dt > stat_time_bounds[i]; i++)
        continue;
    return (i);
}

/*--------------------------------------------------------------------
 * Per backend.
 */

struct stat_be_stripe {
    alignas(64) uint64_t v[STAT_BE__NCTR];
};

struct stat_be {
    unsigned magic;
#define STAT_BE_MAGIC 0x7a0c5e21
    struct stat_be_stripe s[STAT_BE_STRIPES];
};

struct stat_be *
stat_be_new(void)
{
    struct stat_be *s;

    /* Aligned for the stripes: calloc() promises only 16 bytes. */
    AZ(posix_memalign((void **)&s, alignof(struct stat_be), sizeof *s));
    memset(s, 0, sizeof *s);
    s->magic = STAT_BE_MAGIC;
    return (s);
}

void
stat_be_free(struct stat_be **sp)
{
    struct stat_be *s;

    OBJ_TAKE(s, sp, STAT_BE_MAGIC);
    OBJ_FREE(&s);
}

void
stat_be_add(struct stat_be *s, enum stat_be_id id, uint64_t n)
{
    OBJ_CHECK(s, STAT_BE_MAGIC);
    SRG_ASSERT(id < STAT_BE__NCTR);
    (void)__atomic_fetch_add(&s->s[stat_slot % STAT_BE_STRIPES].v[id], n, __ATOMIC_RELAXED);
}

void
stat_be_status(struct stat_be *s, unsigned status)
{
    if (status >= 100 && status <= 599)
        stat_be_add(s, (enum stat_be_id)(STAT_BE_resp_1xx + status / 100 - 1), 1);
}

void
stat_be_time(struct stat_be *s, double fb, double total)
{
    fb = fb > 0 ? fb : 0;
    total = total > fb ? total : fb;
    stat_be_add(s, (enum stat_be_id)(STAT_BE_fb_time_le_500us + stat_time_bucket(fb)), 1);
    stat_be_add(s, STAT_BE_fb_time_us, (uint64_t)(fb * 1e6 + 0.5));
    stat_be_add(s, (enum stat_be_id)(STAT_BE_time_le_500us + stat_time_bucket(total)), 1);
    stat_be_add(s, STAT_BE_time_us, (uint64_t)(total * 1e6 + 0.5));
}

void
stat_be_sum(const struct stat_be *s, uint64_t *out)
{
    OBJ_CHECK(s, STAT_BE_MAGIC);
    AN(out);
    memset(out, 0, STAT_BE__NCTR * sizeof *out);
    for (unsigned k = 0; k < STAT_BE_STRIPES; k++)
        for (unsigned i = 0; i < STAT_BE__NCTR; i++)
            out[i] += __atomic_load_n(&s->s[k].v[i], __ATOMIC_RELAXED);
}

const char *
stat_be_name(enum stat_be_id id)
{
    SRG_ASSERT(id < STAT_BE__N);
    return (stat_be_tbl[id].name);
}

const char *
stat_be_doc(enum stat_be_id id)
{
    SRG_ASSERT(id < STAT_BE__N);
    return (stat_be_tbl[id].doc);
}

bool
stat_be_is_gauge(enum stat_be_id id)
{
    SRG_ASSERT(id < STAT_BE__N);
    return (stat_be_tbl[id].gauge);
}
