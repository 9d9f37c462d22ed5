/*
 * The shard director's ring (see shard.h for what a pick decides).
 *
 * The ring is two arrays sorted by point hash: the hashes, searched by
 * bisection, and beside them each point's member index.  Both are built
 * once by shard_new() and only read afterwards, so any number of workers
 * pick at once without a lock; what changes between picks -- health,
 * the time since a backend came up, the requests in flight -- is read
 * from the backends at each pick.  Those reads are a few relaxed atomic
 * loads per member, and a pick only happens on a miss or a pass, which
 * goes to a backend anyway.
 *
 * Ties between point hashes (two names hashing alike) are broken by the
 * member's name then the replica index, never by the order of the list or
 * by pointer values, so placement is a function of the declaration alone.
 */
#include "config.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "surogat/be.h"
#include "surogat/defs.h"
#include "surogat/dir.h"
#include "surogat/sb.h"
#include "surogat/shard.h"
#include "surogat/tim.h"

struct shard {
    unsigned magic;
#define SHARD_MAGIC 0x8e2b57d4
    struct be **be;     /* members, borrowed */
    unsigned *weight;   /* each >= 1 */
    unsigned n;
    uint64_t *hash;     /* npoints point hashes, ascending */
    uint16_t *member;   /* the member owning each point */
    unsigned npoints;
    double rampup;         /* seconds, 0: none */
    double balance_factor; /* 0: no bound */
    shard_clock_f *now;
    shard_load_f *load;
};

_Static_assert(DIR_MEMBERS_MAX <= 65536, "shard: a member index is a uint16_t");

/*--------------------------------------------------------------------
 * Hashing.
 */

uint64_t
shard_hash_add(uint64_t h, const void *p, size_t len)
{
    const unsigned char *b = p;

    for (size_t i = 0; i < len; i++) {
        h ^= b[i];
        h *= 0x100000001b3ULL; /* the 64-bit FNV prime */
    }
    return (h);
}

/* splitmix64's finalizer (Steele, Lea and Flood, 2014): every input bit reaches every output bit. */
uint64_t
shard_hash_end(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return (x);
}

uint64_t
shard_hash(const void *p, size_t len)
{
    return (shard_hash_end(shard_hash_add(SHARD_HASH_INIT, p, len)));
}

/*--------------------------------------------------------------------
 * Building.
 */

/* A point while sorting: the tie-breakers travel with it. */
struct pt {
    uint64_t hash;
    const char *name;
    unsigned replica;
    uint16_t member;
};

static int
pt_cmp(const void *a, const void *b)
{
    const struct pt *x = a, *y = b;
    int c;

    if (x->hash != y->hash)
        return (x->hash < y->hash ? -1 : 1);
    if ((c = strcmp(x->name, y->name)) != 0)
        return (c);
    return (x->replica < y->replica ? -1 : x->replica > y->replica);
}

static unsigned
default_load(const struct be *be)
{
    return (be_busy(be));
}

static int
check_conf(const struct shard_conf *c, unsigned replicas, struct sb *err)
{
    uint64_t total = 0;

    if (c->n == 0 || c->n > DIR_MEMBERS_MAX) {
        sb_printf(err, "director %s: needs 1 to %u backends", c->name, DIR_MEMBERS_MAX);
        return (-1);
    }
    if (replicas > SHARD_REPLICAS_MAX) {
        sb_printf(err, "director %s: replicas must be 1 to %u", c->name, SHARD_REPLICAS_MAX);
        return (-1);
    }
    if (!(c->rampup >= 0 && c->rampup <= 86400)) {
        sb_printf(err, "director %s: rampup must be 0 to 1 day", c->name);
        return (-1);
    }
    if (!(c->balance_factor == 0 || (c->balance_factor >= 1 && c->balance_factor <= 100))) {
        sb_printf(err, "director %s: balance_factor must be 0 (no bound) or 1 to 100", c->name);
        return (-1);
    }
    for (unsigned i = 0; i < c->n; i++) {
        OBJ_CHECK(c->be[i], BE_MAGIC);
        for (unsigned j = 0; j < i; j++) {
            if (strcmp(c->be[i]->name, c->be[j]->name) == 0) {
                sb_printf(err, "director %s: backend %s is listed twice", c->name,
                          c->be[i]->name);
                return (-1);
            }
        }
        if (c->weight != NULL && c->weight[i] == 0) {
            sb_printf(err, "director %s: the weight of %s must be at least 1", c->name,
                      c->be[i]->name);
            return (-1);
        }
        total += c->weight != NULL ? c->weight[i] : c->be[i]->weight;
    }
    if (total * replicas > SHARD_POINTS_MAX) {
        sb_printf(err,
                  "director %s: replicas x total weight is %llu points, more than %u: lower "
                  "replicas or the weights",
                  c->name, (unsigned long long)(total * replicas), SHARD_POINTS_MAX);
        return (-1);
    }
    return (0);
}

struct shard *
shard_new(const struct shard_conf *c, struct sb *err)
{
    unsigned replicas;
    struct shard *sh;
    struct pt *pts;
    unsigned k = 0;

    AN(c);
    AN(c->name);
    replicas = c->replicas != 0 ? c->replicas : SHARD_REPLICAS_DEFAULT;
    if (check_conf(c, replicas, err) != 0)
        return (NULL);
    OBJ_NEW(sh, SHARD_MAGIC);
    sh->n = c->n;
    sh->be = calloc(c->n, sizeof *sh->be);
    sh->weight = calloc(c->n, sizeof *sh->weight);
    AN(sh->be);
    AN(sh->weight);
    for (unsigned i = 0; i < c->n; i++) {
        sh->be[i] = c->be[i];
        sh->weight[i] = c->weight != NULL ? c->weight[i] : c->be[i]->weight;
        sh->npoints += sh->weight[i] * replicas;
    }
    sh->rampup = c->rampup;
    sh->balance_factor = c->balance_factor;
    sh->now = c->now != NULL ? c->now : tim_mono;
    sh->load = c->load != NULL ? c->load : default_load;
    pts = calloc(sh->npoints, sizeof *pts);
    sh->hash = calloc(sh->npoints, sizeof *sh->hash);
    sh->member = calloc(sh->npoints, sizeof *sh->member);
    AN(pts);
    AN(sh->hash);
    AN(sh->member);
    for (unsigned i = 0; i < c->n; i++) {
        const char *name = c->be[i]->name;
        size_t nl = strlen(name);
        uint64_t h0 = shard_hash_add(SHARD_HASH_INIT, name, nl);

        for (unsigned r = 0; r < sh->weight[i] * replicas; r++) {
            char suffix[16];
            int sl = snprintf(suffix, sizeof suffix, "-%u", r);
            /* The hash of "name-r": the name's FNV state goes on with the suffix. */
            pts[k].hash = shard_hash_end(shard_hash_add(h0, suffix, (size_t)sl));
            pts[k].name = name;
            pts[k].replica = r;
            pts[k].member = (uint16_t)i;
            k++;
        }
    }
    SRG_ASSERT(k == sh->npoints);
    qsort(pts, sh->npoints, sizeof *pts, pt_cmp);
    for (unsigned i = 0; i < sh->npoints; i++) {
        sh->hash[i] = pts[i].hash;
        sh->member[i] = pts[i].member;
    }
    free(pts);
    return (sh);
}

void
shard_free(struct shard **shp)
{
    struct shard *sh;

    OBJ_TAKE(sh, shp, SHARD_MAGIC);
    free(sh->be);
    free(sh->weight);
    free(sh->hash);
    free(sh->member);
    OBJ_FREE(&sh);
}

unsigned
shard_points(const struct shard *sh)
{
    OBJ_CHECK(sh, SHARD_MAGIC);
    return (sh->npoints);
}

/*--------------------------------------------------------------------
 * Picking.
 */

/* The first point at or after key, wrapping past the last. */
static unsigned
first_point(const struct shard *sh, uint64_t key)
{
    unsigned lo = 0, hi = sh->npoints;

    while (lo < hi) {
        unsigned mid = lo + (hi - lo) / 2;
        if (sh->hash[mid] < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (lo == sh->npoints ? 0 : lo);
}

struct be *
shard_owner(const struct shard *sh, uint64_t key)
{
    OBJ_CHECK(sh, SHARD_MAGIC);
    return (sh->be[sh->member[first_point(sh, key)]]);
}

static bool
skipped(const struct be *be, struct be *const *skip, unsigned nskip)
{
    for (unsigned i = 0; i < nskip; i++)
        if (skip[i] == be)
            return (true);
    return (false);
}

/*
 * Whether member m, ramping up, lets this key go on to the next one.  The
 * test uses a second hash of the key, independent of its ring position, so
 * that a backend ramping up takes an even sample of its own keys.
 */
static bool
ramp_refuses(const struct shard *sh, unsigned m, uint64_t key, double *now)
{
    double since = be_healthy_since(sh->be[m]), frac;

    if (sh->rampup <= 0 || since <= 0)
        return (false);
    if (*now < 0)
        *now = sh->now();
    frac = (*now - since) / sh->rampup;
    if (frac >= 1)
        return (false);
    /* 53 bits of the second hash as a fraction in [0, 1). */
    return ((double)(shard_hash_end(key ^ 0x9e3779b97f4a7c15ULL) >> 11) * 0x1.0p-53 >= frac);
}

struct be *
shard_pick(const struct shard *sh, uint64_t key, struct be *const *skip, unsigned nskip)
{
    uint64_t usable[(DIR_MEMBERS_MAX + 63) / 64], seen[(DIR_MEMBERS_MAX + 63) / 64];
    unsigned load[DIR_MEMBERS_MAX];
    uint64_t total_load = 0, total_weight = 0;
    unsigned nusable = 0, nseen = 0, p, fallback = UINT32_MAX;
    double now = -1;

    OBJ_CHECK(sh, SHARD_MAGIC);
    memset(usable, 0, sizeof usable);
    memset(seen, 0, sizeof seen);
    for (unsigned i = 0; i < sh->n; i++) {
        if (!be_healthy(sh->be[i]) || skipped(sh->be[i], skip, nskip))
            continue;
        usable[i / 64] |= (uint64_t)1 << (i % 64);
        nusable++;
        if (sh->balance_factor > 0) {
            load[i] = sh->load(sh->be[i]);
            total_load += load[i];
            total_weight += sh->weight[i];
        }
    }
    if (nusable == 0)
        return (NULL);
    p = first_point(sh, key);
    /* Each member is judged once, at its first point: nseen stops the walk when all are. */
    for (unsigned step = 0; step < sh->npoints && nseen < sh->n; step++, p++) {
        unsigned m;

        if (p == sh->npoints)
            p = 0;
        m = sh->member[p];
        if ((seen[m / 64] >> (m % 64)) & 1)
            continue;
        seen[m / 64] |= (uint64_t)1 << (m % 64);
        nseen++;
        if (!((usable[m / 64] >> (m % 64)) & 1))
            continue;
        if (fallback == UINT32_MAX)
            fallback = m;
        if (ramp_refuses(sh, m, key, &now))
            continue;
        if (sh->balance_factor > 0) {
            /* c times its share of what is in flight, plus one so that an idle ring admits. */
            double bound = sh->balance_factor * (double)total_load * sh->weight[m] /
                               (double)total_weight +
                           1;
            if ((double)load[m] >= bound)
                continue;
        }
        return (sh->be[m]);
    }
    SRG_ASSERT(fallback != UINT32_MAX);
    return (sh->be[fallback]);
}
