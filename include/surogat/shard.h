/*
 * shard -- a consistent-hash ring with bounded load over backends: the
 * ring of the `shard` director (dir.h), as Varnish names it.
 *
 * Each backend puts replicas * weight points on a 64-bit ring, at the
 * hashes of "name-0", "name-1", ...; a key belongs to the backend of the
 * first point at or after its hash.  Placement depends only on the
 * backends' names, weights and the replica count: the same declaration
 * places a key on the same backend in every process, whatever the order
 * of the list.  When a backend leaves, only the keys it owned move (each
 * to the next point's backend); when one joins, it takes about 1/(N+1) of
 * the keys, from every other backend.
 *
 * A pick walks the ring from the key's point and takes the first backend
 * that is
 *   - healthy (the probes' verdict, be_healthy()) and not in the skip list;
 *   - not ramping up away from this key: a backend that joined or came
 *     back healthy less than `rampup` seconds ago takes a key only when
 *     the key's second hash, as a fraction of 2^64, is below the elapsed
 *     fraction of rampup, so its share grows linearly and the keys it
 *     accepts at 10% it keeps at 20%;
 *   - under its load bound: with L requests in flight over the usable
 *     backends of total weight W, a backend of weight w takes the key
 *     while it holds fewer than balance_factor * L * w / W + 1, i.e.
 *     balance_factor times its share plus one (the idea of HAProxy's
 *     hash-balance-factor, after Mirrokni, Thorup and Zadimoghaddam,
 *     "Consistent Hashing with Bounded Loads", 2018).  The +1 lets an idle
 *     ring admit, and keeps a backend with one request in flight from
 *     passing on the next key of a quiet fleet; with balance_factor >= 1
 *     the bounds add up to more than L, so some backend is always under
 *     its own.
 * When every usable backend is refused for ramp-up or load, the first
 * usable one takes the key anyway: a pick is NULL only when every backend
 * is sick or skipped.
 *
 * Skipping a sick backend's points gives exactly the placement of a ring
 * built without it, so the ring is built once and never changes: health
 * is read at each pick, membership changes build a new director (a policy
 * reload), and lookups take no lock and write nothing.
 */
#ifndef SUROGAT_SHARD_H
#define SUROGAT_SHARD_H

#include <stddef.h>
#include <stdint.h>

struct be;
struct sb;
struct shard;

/*
 * Points per unit of weight.  A backend's share of the ring is the sum of
 * the arcs before its points, whose relative spread shrinks as
 * 1/sqrt(points): with 256, shares stay within about 5% of their due (one
 * standard deviation; 12% at worst over 3 to 10 backends, measured on
 * 200,000 keys), where Varnish's 67 leaves about 12% (30% at worst).  The
 * ring of ten backends is still only 25 KB, and building it takes well
 * under a millisecond.
 */
#define SHARD_REPLICAS_DEFAULT 256
#define SHARD_REPLICAS_MAX     4096
#define SHARD_POINTS_MAX       (1u << 20) /* replicas * total weight: 10 MB of ring */

/* Seconds on a monotonic clock: tim_mono() unless a test injects its own. */
typedef double shard_clock_f(void);
/* Requests in flight to be: be_busy() unless a test injects its own. */
typedef unsigned shard_load_f(const struct be *be);

struct shard_conf {
    const char *name;          /* the director's, for messages */
    struct be *const *be;      /* distinct backends, borrowed: they outlive the ring */
    unsigned n;                /* 1 .. DIR_MEMBERS_MAX */
    const unsigned *weight;    /* NULL: each backend's weight; else n weights >= 1 */
    unsigned replicas;         /* points per unit of weight; 0: SHARD_REPLICAS_DEFAULT */
    double rampup;             /* seconds; 0: a backend takes its full share at once */
    double balance_factor;     /* 0: no load bound; else >= 1 (1.25: 25% above the mean) */
    shard_clock_f *now;        /* NULL: tim_mono */
    shard_load_f *load;        /* NULL: be_busy */
};

/* NULL with a message naming the director on a bad conf.  Main or CLI thread. */
struct shard *shard_new(const struct shard_conf *c, struct sb *err);
void shard_free(struct shard **shp); /* *shp = NULL */

/*
 * The backend for a key hash (shard_hash()), as described above, or NULL
 * when every backend is sick or in skip[0..nskip).  Any thread, lock-free.
 */
struct be *shard_pick(const struct shard *sh, uint64_t key, struct be *const *skip,
                      unsigned nskip);
/* The backend owning key on the ring, whatever its health, load or ramp-up. */
struct be *shard_owner(const struct shard *sh, uint64_t key);
unsigned shard_points(const struct shard *sh); /* points on the ring */

/*
 * The hash of keys and points: FNV-1a over the bytes, in steps, then the
 * splitmix64 finalizer (whose avalanche FNV-1a lacks in its high bits).
 * Stable across processes and versions: it decides which node caches what.
 *   h = SHARD_HASH_INIT; h = shard_hash_add(h, p, n); ...; shard_hash_end(h)
 */
#define SHARD_HASH_INIT 0xcbf29ce484222325ULL
uint64_t shard_hash_add(uint64_t h, const void *p, size_t len);
uint64_t shard_hash_end(uint64_t h); /* also a good 64-bit mix on its own */
uint64_t shard_hash(const void *p, size_t len);

#endif
