/*
 * Shared dictionaries: key-value tables all workers see, as nginx's
 * lua_shared_dict and Varnish's vmod_var, declared in the script
 *
 *   shared "flags" { size = "1m" }
 *   local flags = surogat.shared("flags")
 *   function recv(req) if flags:get("maintenance") then ... end end
 *
 * and the rate limiter built on them, surogat.ratelimit().
 *
 * A dictionary belongs to no Lua state and to no program: the registry
 * here holds it with a reference per program declaring it (pol_decl.c),
 * so a reload that declares it again with the same size gets the same
 * one, values and all; another size makes a new, empty one.
 *
 * Memory: a dictionary never holds more than its size.  It is split in
 * SHD_SHARDS shards by the key's hash, each with its own lock, hash
 * table, LRU list and 1/SHD_SHARDS of the size, its hash table included;
 * an entry costs its key, its value and the bookkeeping (struct shd_ent).
 * set(), add() and incr() make room by dropping expired entries, then the
 * least recently used ones of the shard; safe_set() drops expired ones
 * only, and fails with "no memory" instead.
 *
 * Expiry is lazy: an expired entry is dropped when a lookup finds it, and
 * each write looks at the SHD_SWEEP least recently used entries of its
 * shard and drops those expired, so dead entries do not pile up in a
 * shard that is written but never read.
 *
 * Locks: one mutex per shard, a leaf: nothing else is taken under it, and
 * no Lua call runs under it (a Lua error would leave it locked), so values
 * are copied out before they are pushed, entries allocated before it is
 * taken and freed after it is let go.  reg_mtx guards the registry list
 * only and is never held with a shard lock.
 *
 * Keys come from clients (addresses, cookies): they are hashed with
 * SipHash-1-3 under a key drawn per dictionary from getrandom(2), so that
 * nobody can choose keys that pile up in one bucket.
 */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <lauxlib.h>

#include "surogat/defs.h"
#include "surogat/num.h"
#include "surogat/sb.h"
#include "surogat/stat.h"
#include "surogat/tim.h"

#include "pol_priv.h"

#define SHD_SHARDS       16
#define SHD_SIZE_MIN     ((uint64_t)64 << 10) /* a 4 KiB share still holds some entries */
#define SHD_SIZE_MAX     ((uint64_t)16 << 30)
#define SHD_KEY_MAX      1024 /* bytes: an entry with its key always fits a share */
#define SHD_BUCKET_BYTES 256  /* of a share per hash bucket: short chains at ~100 B an entry */
#define SHD_SWEEP        2    /* entries looked at for expiry by each write */
#define SHD_ROOM_SCAN    32   /* and by a write that finds its shard full */
#define SHD_MT           "surogat.shared"
#define SHD_CACHE        "pol.shd" /* registry: the state's handles by name */
#define RATELIMIT_DICT   "ratelimit"

enum shd_type { SHD_T_NIL, SHD_T_STR, SHD_T_INT, SHD_T_NUM, SHD_T_BOOL };

struct shd_val {
    enum shd_type type;
    int64_t i;
    double d;
    bool b;
    const char *s;
    size_t len;
};

struct shd_ent {
    struct shd_ent *hnext;  /* bucket chain; the free list once unlinked */
    struct shd_ent *newer;  /* LRU list */
    struct shd_ent *older;
    uint64_t hash;
    double expires;         /* tim_mono(); 0: never */
    size_t charge;          /* bytes counted against the shard */
    uint32_t klen;
    uint32_t vlen;          /* SHD_T_STR */
    enum shd_type type;
    union {
        int64_t i;
        double d;
        bool b;
    } num;
    char data[];            /* the key, then a string value */
};

struct shd_shard {
    pthread_mutex_t mtx;
    struct shd_ent **bucket;
    size_t nbucket; /* a power of two */
    struct shd_ent *newest;
    struct shd_ent *oldest;
    size_t used;   /* bytes of its entries */
    size_t budget; /* what they may take: the share less the buckets */
};

struct pol_shd {
    unsigned magic;
#define POL_SHD_MAGIC 0x4b1d73c2
    unsigned refs; /* under reg_mtx */
    char *name;
    uint64_t size;
    uint64_t sipkey[2];
    struct pol_shd *next; /* the registry, under reg_mtx */
    struct shd_shard shard[SHD_SHARDS];
};

static pthread_mutex_t reg_mtx = PTHREAD_MUTEX_INITIALIZER;
static struct pol_shd *reg; /* every dictionary a program holds */

/* ---- hashing ---- */

static uint64_t
rotl(uint64_t x, int b)
{
    return ((x << b) | (x >> (64 - b)));
}

#define SIPROUND                                                                                   \
    do {                                                                                           \
        v0 += v1;                                                                                  \
        v1 = rotl(v1, 13);                                                                         \
        v1 ^= v0;                                                                                  \
        v0 = rotl(v0, 32);                                                                         \
        v2 += v3;                                                                                  \
        v3 = rotl(v3, 16);                                                                         \
        v3 ^= v2;                                                                                  \
        v0 += v3;                                                                                  \
        v3 = rotl(v3, 21);                                                                         \
        v3 ^= v0;                                                                                  \
        v2 += v1;                                                                                  \
        v1 = rotl(v1, 17);                                                                         \
        v1 ^= v2;                                                                                  \
        v2 = rotl(v2, 32);                                                                         \
    } while (0)

/* SipHash-1-3 (Aumasson and Bernstein; one compression round, three finalisation rounds). */
static uint64_t
siphash13(const uint64_t k[2], const void *p, size_t len)
{
    const unsigned char *in = p;
    uint64_t v0 = k[0] ^ 0x736f6d6570736575ULL, v1 = k[1] ^ 0x646f72616e646f6dULL;
    uint64_t v2 = k[0] ^ 0x6c7967656e657261ULL, v3 = k[1] ^ 0x7465646279746573ULL;
    uint64_t m, b = (uint64_t)len << 56;
    size_t i;

    for (i = 0; i + 8 <= len; i += 8) {
        m = 0;
        for (int j = 7; j >= 0; j--)
            m = m << 8 | in[i + (size_t)j];
        v3 ^= m;
        SIPROUND;
        v0 ^= m;
    }
    for (size_t j = 0; i + j < len; j++)
        b |= (uint64_t)in[i + j] << (8 * j);
    v3 ^= b;
    SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIPROUND;
    SIPROUND;
    SIPROUND;
    return (v0 ^ v1 ^ v2 ^ v3);
}

/* ---- a shard, under its lock ---- */

static struct shd_shard *
shard_of(struct pol_shd *d, uint64_t hash)
{
    return (&d->shard[hash >> 60]); /* the top bits: the bucket takes the low ones */
}

static void
lru_unlink(struct shd_shard *sh, struct shd_ent *e)
{
    if (e->newer != NULL)
        e->newer->older = e->older;
    else
        sh->newest = e->older;
    if (e->older != NULL)
        e->older->newer = e->newer;
    else
        sh->oldest = e->newer;
    e->newer = e->older = NULL;
}

static void
lru_push(struct shd_shard *sh, struct shd_ent *e)
{
    e->older = sh->newest;
    e->newer = NULL;
    if (sh->newest != NULL)
        sh->newest->newer = e;
    sh->newest = e;
    if (sh->oldest == NULL)
        sh->oldest = e;
}

static void
ent_link(struct shd_shard *sh, struct shd_ent *e)
{
    struct shd_ent **bp = &sh->bucket[e->hash & (sh->nbucket - 1)];

    e->hnext = *bp;
    *bp = e;
    lru_push(sh, e);
    sh->used += e->charge;
    STAT_ADD(shared_bytes, e->charge);
}

/* Out of the shard and onto *grave, to be freed once the lock is let go. */
static void
ent_unlink(struct shd_shard *sh, struct shd_ent *e, struct shd_ent **grave)
{
    struct shd_ent **bp = &sh->bucket[e->hash & (sh->nbucket - 1)];

    while (*bp != e)
        bp = &(*bp)->hnext;
    *bp = e->hnext;
    lru_unlink(sh, e);
    sh->used -= e->charge;
    STAT_ADD(shared_bytes, -(int64_t)e->charge);
    e->hnext = *grave;
    *grave = e;
}

static bool
expired(const struct shd_ent *e, double now)
{
    return (e->expires != 0 && e->expires <= now);
}

/* The live entry of key k, or NULL; an expired one found is dropped. */
static struct shd_ent *
ent_find(struct shd_shard *sh, uint64_t hash, const char *k, size_t klen, double now,
         struct shd_ent **grave)
{
    struct shd_ent *e;

    for (e = sh->bucket[hash & (sh->nbucket - 1)]; e != NULL; e = e->hnext) {
        if (e->hash != hash || e->klen != klen || memcmp(e->data, k, klen) != 0)
            continue;
        if (expired(e, now)) {
            ent_unlink(sh, e, grave);
            return (NULL);
        }
        return (e);
    }
    return (NULL);
}

/* Drop the expired ones among the n least recently used entries. */
static void
sweep(struct shd_shard *sh, double now, unsigned n, struct shd_ent **grave)
{
    struct shd_ent *e = sh->oldest, *newer;

    for (; e != NULL && n > 0; e = newer, n--) {
        newer = e->newer;
        if (expired(e, now))
            ent_unlink(sh, e, grave);
    }
}

/*
 * Room for `need` more bytes: expired entries among the SHD_ROOM_SCAN
 * least recently used go first, then (when evict) the least recently
 * used.  Bounded, as it runs under the lock on every write to a full
 * shard: an expired entry further up goes when it is found or reaches
 * the end.  Whether there is room now; *forced set when a live entry had
 * to go.
 */
static bool
make_room(struct shd_shard *sh, size_t need, double now, bool evict, bool *forced,
          struct shd_ent **grave)
{
    if (sh->used + need <= sh->budget)
        return (true);
    sweep(sh, now, SHD_ROOM_SCAN, grave);
    while (evict && sh->used + need > sh->budget && sh->oldest != NULL) {
        ent_unlink(sh, sh->oldest, grave);
        STAT_INC(shared_evicted);
        *forced = true;
    }
    return (sh->used + need <= sh->budget);
}

static void
bury(struct shd_ent *grave)
{
    while (grave != NULL) {
        struct shd_ent *next = grave->hnext;
        free(grave);
        grave = next;
    }
}

/* A new entry for key k holding v (not yet linked); NULL for a string too long. */
static struct shd_ent *
ent_new(uint64_t hash, const char *k, size_t klen, const struct shd_val *v, double expires)
{
    size_t vlen = v->type == SHD_T_STR ? v->len : 0;
    struct shd_ent *e;

    if (vlen > UINT32_MAX)
        return (NULL);
    e = malloc(sizeof *e + klen + vlen);
    AN(e);
    memset(e, 0, sizeof *e);
    e->hash = hash;
    e->expires = expires;
    e->charge = sizeof *e + klen + vlen;
    e->klen = (uint32_t)klen;
    e->vlen = (uint32_t)vlen;
    e->type = v->type;
    memcpy(e->data, k, klen);
    if (vlen > 0)
        memcpy(e->data + klen, v->s, vlen);
    if (v->type == SHD_T_INT)
        e->num.i = v->i;
    else if (v->type == SHD_T_NUM)
        e->num.d = v->d;
    else if (v->type == SHD_T_BOOL)
        e->num.b = v->b;
    return (e);
}

/* ---- the registry ---- */

struct pol_shd *
pol__shd_get(const char *name, uint64_t size, struct sb *err)
{
    struct pol_shd *d;
    size_t share;

    if (size < SHD_SIZE_MIN || size > SHD_SIZE_MAX) {
        sb_printf(err, "shared \"%s\": size %llu is not from 64k to 16g", name,
                  (unsigned long long)size);
        return (NULL);
    }
    AZ(pthread_mutex_lock(&reg_mtx));
    for (d = reg; d != NULL; d = d->next)
        if (d->size == size && strcmp(d->name, name) == 0)
            break;
    if (d != NULL) {
        d->refs++;
        AZ(pthread_mutex_unlock(&reg_mtx));
        return (d);
    }
    OBJ_NEW(d, POL_SHD_MAGIC);
    d->refs = 1;
    d->name = strdup(name);
    AN(d->name);
    d->size = size;
    if (getrandom(d->sipkey, sizeof d->sipkey, 0) != (ssize_t)sizeof d->sipkey) {
        d->sipkey[0] = (uint64_t)(tim_mono() * 1e9);
        d->sipkey[1] = (uint64_t)(uintptr_t)d;
    }
    share = (size_t)(size / SHD_SHARDS);
    for (unsigned i = 0; i < SHD_SHARDS; i++) {
        struct shd_shard *sh = &d->shard[i];

        AZ(pthread_mutex_init(&sh->mtx, NULL));
        sh->nbucket = 16;
        while (sh->nbucket * 2 <= share / SHD_BUCKET_BYTES)
            sh->nbucket *= 2;
        sh->bucket = calloc(sh->nbucket, sizeof *sh->bucket);
        AN(sh->bucket);
        sh->budget = share - sh->nbucket * sizeof *sh->bucket;
    }
    d->next = reg;
    reg = d;
    AZ(pthread_mutex_unlock(&reg_mtx));
    return (d);
}

void
pol__shd_release(struct pol_shd **dp)
{
    struct pol_shd *d = *dp, **pp;

    *dp = NULL;
    if (d == NULL)
        return;
    OBJ_CHECK(d, POL_SHD_MAGIC);
    AZ(pthread_mutex_lock(&reg_mtx));
    if (--d->refs > 0) {
        AZ(pthread_mutex_unlock(&reg_mtx));
        return;
    }
    for (pp = &reg; *pp != d; pp = &(*pp)->next)
        continue;
    *pp = d->next;
    AZ(pthread_mutex_unlock(&reg_mtx));
    /* Nobody else can reach it now: no program declares it. */
    for (unsigned i = 0; i < SHD_SHARDS; i++) {
        struct shd_shard *sh = &d->shard[i];
        struct shd_ent *grave = NULL;

        while (sh->oldest != NULL)
            ent_unlink(sh, sh->oldest, &grave);
        bury(grave);
        free(sh->bucket);
        AZ(pthread_mutex_destroy(&sh->mtx));
    }
    free(d->name);
    OBJ_FREE(&d);
}

const char *
pol__shd_name(const struct pol_shd *d)
{
    OBJ_CHECK(d, POL_SHD_MAGIC);
    return (d->name);
}

/* ---- operations: each takes one shard lock ---- */

enum shd_rv {
    SHD_OK,
    SHD_OK_FORCED, /* stored, live entries dropped to make room */
    SHD_NOMEM,
    SHD_EXISTS,
    SHD_NOTFOUND,
    SHD_NOTNUM,
    SHD_OVERFLOW,
};

enum shd_mode { SHD_SET, SHD_SAFE_SET, SHD_ADD };

/*
 * Copy of the value of k into *out, a string into buf; SHD_NOTFOUND when
 * none is live.  A string longer than bufsz is not copied (out->s NULL,
 * out->len its length): the caller asks again with room for it.
 */
static enum shd_rv
shd_get(struct pol_shd *d, const char *k, size_t klen, double now, struct shd_val *out,
        char *buf, size_t bufsz)
{
    uint64_t hash = siphash13(d->sipkey, k, klen);
    struct shd_shard *sh = shard_of(d, hash);
    struct shd_ent *e, *grave = NULL;
    enum shd_rv rv = SHD_NOTFOUND;

    AZ(pthread_mutex_lock(&sh->mtx));
    e = ent_find(sh, hash, k, klen, now, &grave);
    if (e != NULL) {
        rv = SHD_OK;
        lru_unlink(sh, e);
        lru_push(sh, e);
        out->type = e->type;
        if (e->type == SHD_T_INT)
            out->i = e->num.i;
        else if (e->type == SHD_T_NUM)
            out->d = e->num.d;
        else if (e->type == SHD_T_BOOL)
            out->b = e->num.b;
        out->len = e->vlen;
        out->s = NULL;
        if (e->type == SHD_T_STR && e->vlen <= bufsz) {
            memcpy(buf, e->data + e->klen, e->vlen);
            out->s = buf;
        }
    }
    AZ(pthread_mutex_unlock(&sh->mtx));
    bury(grave);
    return (rv);
}

/* set, safe_set, add: store v under k for ttl seconds (0: no expiry); v SHD_T_NIL deletes. */
static enum shd_rv
shd_store(struct pol_shd *d, const char *k, size_t klen, const struct shd_val *v, double ttl,
          enum shd_mode mode, double now)
{
    uint64_t hash = siphash13(d->sipkey, k, klen);
    struct shd_shard *sh = shard_of(d, hash);
    struct shd_ent *e = NULL, *old, *grave = NULL;
    enum shd_rv rv = SHD_OK;
    bool forced = false;

    if (v->type != SHD_T_NIL) {
        e = ent_new(hash, k, klen, v, ttl > 0 ? now + ttl : 0);
        if (e == NULL || e->charge > sh->budget) {
            free(e);
            STAT_INC(shared_nomem);
            return (SHD_NOMEM);
        }
    }
    AZ(pthread_mutex_lock(&sh->mtx));
    sweep(sh, now, SHD_SWEEP, &grave);
    old = ent_find(sh, hash, k, klen, now, &grave);
    if (old != NULL && mode == SHD_ADD) {
        rv = SHD_EXISTS;
    } else if (e == NULL) {
        if (old != NULL)
            ent_unlink(sh, old, &grave);
    } else {
        /*
         * The old value's room counts as free (it goes if the new one
         * fits), and it must not be evicted meanwhile: out of the LRU
         * list and the count while room is made.
         */
        if (old != NULL) {
            lru_unlink(sh, old);
            sh->used -= old->charge;
        }
        if (!make_room(sh, e->charge, now, mode != SHD_SAFE_SET, &forced, &grave)) {
            rv = SHD_NOMEM;
        } else {
            ent_link(sh, e);
            e = NULL;
            rv = forced ? SHD_OK_FORCED : SHD_OK;
        }
        if (old != NULL) {
            lru_push(sh, old);
            sh->used += old->charge;
            if (rv != SHD_NOMEM)
                ent_unlink(sh, old, &grave);
        }
    }
    AZ(pthread_mutex_unlock(&sh->mtx));
    if (rv == SHD_NOMEM)
        STAT_INC(shared_nomem);
    free(e);
    bury(grave);
    return (rv);
}

/*
 * A read-modify-write of k's number: fn(ctx, e) on the live entry, or
 * on a new one of value init (not linked yet; NULL: do not create, the
 * answer is SHD_NOTFOUND) expiring at `expires`.  The new entry is made
 * before the lock and only if needed, so a key already there costs no
 * allocation.
 */
typedef enum shd_rv shd_rmw_f(void *ctx, struct shd_ent *e, bool created);

static enum shd_rv
shd_rmw(struct pol_shd *d, const char *k, size_t klen, const struct shd_val *init,
        double expires, double now, shd_rmw_f *fn, void *ctx)
{
    uint64_t hash = siphash13(d->sipkey, k, klen);
    struct shd_shard *sh = shard_of(d, hash);
    struct shd_ent *e, *fresh = NULL, *grave = NULL;
    enum shd_rv rv;
    bool forced = false;

    for (;;) {
        AZ(pthread_mutex_lock(&sh->mtx));
        sweep(sh, now, SHD_SWEEP, &grave);
        e = ent_find(sh, hash, k, klen, now, &grave);
        if (e != NULL) {
            rv = fn(ctx, e, false);
            lru_unlink(sh, e);
            lru_push(sh, e);
            break;
        }
        if (init == NULL) {
            rv = SHD_NOTFOUND;
            break;
        }
        if (fresh == NULL) {
            AZ(pthread_mutex_unlock(&sh->mtx));
            fresh = ent_new(hash, k, klen, init, expires);
            AN(fresh); /* a number: no string too long */
            continue;
        }
        rv = fn(ctx, fresh, true);
        if (rv != SHD_OK)
            break;
        if (!make_room(sh, fresh->charge, now, true, &forced, &grave)) {
            rv = SHD_NOMEM; /* cannot happen: a key and a number fit any share */
            break;
        }
        ent_link(sh, fresh);
        fresh = NULL;
        break;
    }
    AZ(pthread_mutex_unlock(&sh->mtx));
    free(fresh);
    bury(grave);
    return (rv);
}

struct incr {
    struct shd_val by;
    struct shd_val out;
};

/* Add by to the number: integers stay integers unless they would overflow (an error). */
static enum shd_rv
incr_fn(void *ctx, struct shd_ent *e, bool created)
{
    struct incr *c = ctx;
    int64_t r;

    (void)created;
    if (e->type != SHD_T_INT && e->type != SHD_T_NUM)
        return (SHD_NOTNUM);
    if (e->type == SHD_T_INT && c->by.type == SHD_T_INT) {
        if (__builtin_add_overflow(e->num.i, c->by.i, &r))
            return (SHD_OVERFLOW);
        e->num.i = r;
    } else {
        double a = e->type == SHD_T_INT ? (double)e->num.i : e->num.d;
        e->num.d = a + (c->by.type == SHD_T_INT ? (double)c->by.i : c->by.d);
        e->type = SHD_T_NUM;
    }
    c->out.type = e->type;
    if (e->type == SHD_T_INT)
        c->out.i = e->num.i;
    else
        c->out.d = e->num.d;
    return (SHD_OK);
}

struct gcra {
    double now;
    double interval; /* seconds per request: 1 / rate */
    double tau;      /* burst * interval: how far ahead of now the schedule may run */
    bool allowed;
    double wait;     /* denied: seconds until a request would be allowed */
};

/*
 * The generic cell rate algorithm: the entry holds the theoretical
 * arrival time (TAT) of the next request on the monotonic clock.  A
 * request is allowed when its TAT would be no more than tau ahead of
 * now, which lets `burst` requests through at once and then one per
 * interval; a refusal changes nothing.  The entry expires at its TAT:
 * from then on a missing entry means the same as an old one.
 */
static enum shd_rv
gcra_fn(void *ctx, struct shd_ent *e, bool created)
{
    struct gcra *c = ctx;
    double tat = created || e->type != SHD_T_NUM ? c->now : SRG_MAX(e->num.d, c->now);
    double next = tat + c->interval;

    /* A margin against rounding: burst requests at the same instant all pass. */
    if (next - c->now > c->tau + c->interval * 1e-9) {
        c->allowed = false;
        c->wait = next - c->now - c->tau;
        if (created)
            return (SHD_NOTFOUND); /* nothing to store */
        return (SHD_OK);
    }
    c->allowed = true;
    c->wait = 0;
    e->type = SHD_T_NUM;
    e->num.d = next;
    e->expires = next;
    return (SHD_OK);
}

/* ---- Lua ---- */

struct shd_handle {
    struct pol_shd *d; /* NULL until first used in a hook */
};

/* The dictionary of the handle at idx, for a method called in a hook. */
static struct pol_shd *
check_dict(lua_State *L, int idx, const char *method)
{
    struct shd_handle *h = luaL_checkudata(L, idx, SHD_MT);
    struct pol_wrk *pw = pol__wrk(L);

    if (!pol__in_hook(pw))
        (void)luaL_error(L, "shared:%s(): in hooks only, not at the top level of the script",
                         method);
    if (h->d == NULL) {
        lua_getiuservalue(L, idx, 1);
        h->d = pol__decl_shared(pol__prog_cfg(pw->prog), lua_tostring(L, -1));
        lua_pop(L, 1);
        AN(h->d); /* surogat.shared() checked the name against the declarations */
    }
    return (h->d);
}

static const char *
check_key(lua_State *L, int idx, size_t *len)
{
    const char *k = luaL_checklstring(L, idx, len);

    if (*len == 0 || *len > SHD_KEY_MAX)
        (void)luaL_error(L, "shared: a key is 1 to %d bytes", SHD_KEY_MAX);
    return (k);
}

static void
check_val(lua_State *L, int idx, struct shd_val *v)
{
    memset(v, 0, sizeof *v);
    switch (lua_type(L, idx)) {
    case LUA_TNONE:
    case LUA_TNIL:
        v->type = SHD_T_NIL;
        break;
    case LUA_TBOOLEAN:
        v->type = SHD_T_BOOL;
        v->b = lua_toboolean(L, idx);
        break;
    case LUA_TNUMBER:
        if (lua_isinteger(L, idx)) {
            v->type = SHD_T_INT;
            v->i = lua_tointeger(L, idx);
        } else {
            v->type = SHD_T_NUM;
            v->d = lua_tonumber(L, idx);
        }
        break;
    case LUA_TSTRING:
        v->type = SHD_T_STR;
        v->s = lua_tolstring(L, idx, &v->len);
        break;
    default:
        (void)luaL_error(L, "shared: values are strings, numbers or booleans, not %s",
                         luaL_typename(L, idx));
    }
}

/* A ttl argument: seconds, nil or 0 for none. */
static double
check_ttl(lua_State *L, int idx)
{
    double t = luaL_optnumber(L, idx, 0);

    if (!(t >= 0 && t <= NUM_DURATION_MAX))
        (void)luaL_error(L, "shared: ttl %f is not a number of seconds", t);
    return (t);
}

static void
push_val(lua_State *L, const struct shd_val *v)
{
    switch (v->type) {
    case SHD_T_STR:
        lua_pushlstring(L, v->s, v->len);
        break;
    case SHD_T_INT:
        lua_pushinteger(L, (lua_Integer)v->i);
        break;
    case SHD_T_NUM:
        lua_pushnumber(L, v->d);
        break;
    case SHD_T_BOOL:
        lua_pushboolean(L, v->b);
        break;
    case SHD_T_NIL:
        lua_pushnil(L);
        break;
    }
}

/* The usual failure: nil or false, and why. */
static int
fail(lua_State *L, bool with_false, enum shd_rv rv)
{
    static const char *const why[] = {
        [SHD_NOMEM] = "no memory",        [SHD_EXISTS] = "exists",
        [SHD_NOTFOUND] = "not found",     [SHD_NOTNUM] = "not a number",
        [SHD_OVERFLOW] = "integer overflow",
    };

    if (with_false)
        lua_pushboolean(L, 0);
    else
        lua_pushnil(L);
    lua_pushstring(L, why[rv]);
    return (2);
}

/* d:get(key): the value, or nil. */
static int
l_get(lua_State *L)
{
    struct pol_shd *d = check_dict(L, 1, "get");
    size_t klen;
    const char *k = check_key(L, 2, &klen);
    char buf[1024], *p = buf;
    size_t room = sizeof buf;
    struct shd_val v;
    luaL_Buffer b;

    /*
     * A long string: again with a Lua buffer of its size, made with no
     * lock held (it may raise an error), until it fits -- it may have
     * grown in between.
     */
    for (;;) {
        if (shd_get(d, k, klen, tim_mono(), &v, p, room) != SHD_OK) {
            lua_pushnil(L);
            return (1);
        }
        if (v.type != SHD_T_STR || v.s != NULL)
            break;
        if (p != buf)
            lua_pop(L, 1); /* the buffer's box */
        room = v.len;
        p = luaL_buffinitsize(L, &b, room);
    }
    if (p != buf && v.type == SHD_T_STR) {
        luaL_pushresultsize(&b, v.len);
        return (1);
    }
    if (p != buf)
        lua_pop(L, 1); /* no longer a string: the buffer goes unused */
    push_val(L, &v);
    return (1);
}

static int
store(lua_State *L, enum shd_mode mode, const char *method)
{
    struct pol_shd *d = check_dict(L, 1, method);
    size_t klen;
    const char *k = check_key(L, 2, &klen);
    double ttl = check_ttl(L, 4);
    struct shd_val v;
    enum shd_rv rv;

    check_val(L, 3, &v);
    if (v.type == SHD_T_NIL && mode == SHD_ADD)
        return (luaL_error(L, "shared:add(): nil is no value"));
    rv = shd_store(d, k, klen, &v, ttl, mode, tim_mono());
    if (rv != SHD_OK && rv != SHD_OK_FORCED)
        return (fail(L, true, rv));
    lua_pushboolean(L, 1);
    lua_pushnil(L);
    lua_pushboolean(L, rv == SHD_OK_FORCED);
    return (3);
}

/* d:set(key, value [, ttl]): true, nil, and whether others were dropped for it. */
static int
l_set(lua_State *L)
{
    return (store(L, SHD_SET, "set"));
}

/* d:safe_set(key, value [, ttl]): as set, but false, "no memory" rather than dropping any. */
static int
l_safe_set(lua_State *L)
{
    return (store(L, SHD_SAFE_SET, "safe_set"));
}

/* d:add(key, value [, ttl]): as set, but false, "exists" when the key has a value. */
static int
l_add(lua_State *L)
{
    return (store(L, SHD_ADD, "add"));
}

/* d:incr(key [, by [, init [, ttl]]]): the new number; init and ttl for a missing key. */
static int
l_incr(lua_State *L)
{
    struct pol_shd *d = check_dict(L, 1, "incr");
    size_t klen;
    const char *k = check_key(L, 2, &klen);
    struct incr c;
    struct shd_val init;
    double ttl = check_ttl(L, 5), now = tim_mono();
    enum shd_rv rv;

    memset(&c, 0, sizeof c);
    if (lua_isnoneornil(L, 3)) {
        c.by.type = SHD_T_INT;
        c.by.i = 1;
    } else {
        luaL_checktype(L, 3, LUA_TNUMBER);
        check_val(L, 3, &c.by);
    }
    if (!lua_isnoneornil(L, 4)) {
        luaL_checktype(L, 4, LUA_TNUMBER);
        check_val(L, 4, &init);
    }
    rv = shd_rmw(d, k, klen, lua_isnoneornil(L, 4) ? NULL : &init, ttl > 0 ? now + ttl : 0, now,
                 incr_fn, &c);
    if (rv != SHD_OK)
        return (fail(L, false, rv));
    push_val(L, &c.out);
    return (1);
}

/* d:delete(key): whether there was a value. */
static int
l_delete(lua_State *L)
{
    struct pol_shd *d = check_dict(L, 1, "delete");
    size_t klen;
    const char *k = check_key(L, 2, &klen);
    uint64_t hash = siphash13(d->sipkey, k, klen);
    struct shd_shard *sh = shard_of(d, hash);
    struct shd_ent *e, *grave = NULL;

    AZ(pthread_mutex_lock(&sh->mtx));
    e = ent_find(sh, hash, k, klen, tim_mono(), &grave);
    if (e != NULL)
        ent_unlink(sh, e, &grave);
    AZ(pthread_mutex_unlock(&sh->mtx));
    bury(grave);
    lua_pushboolean(L, e != NULL);
    return (1);
}

/* ttl(): the seconds left (0: no expiry); expire(): set them (0: none). */
struct ttl_op {
    double now;
    double set; /* expire(): the new ttl; negative: only read it (ttl()) */
    double left;
};

static enum shd_rv
ttl_fn(void *ctx, struct shd_ent *e, bool created)
{
    struct ttl_op *c = ctx;

    (void)created;
    if (c->set >= 0)
        e->expires = c->set > 0 ? c->now + c->set : 0;
    c->left = e->expires > 0 ? e->expires - c->now : 0;
    return (SHD_OK);
}

/* d:ttl(key): seconds until it expires, 0 if never; nil, "not found". */
static int
l_ttl(lua_State *L)
{
    struct pol_shd *d = check_dict(L, 1, "ttl");
    size_t klen;
    const char *k = check_key(L, 2, &klen);
    struct ttl_op c = { .now = tim_mono(), .set = -1 };
    enum shd_rv rv = shd_rmw(d, k, klen, NULL, 0, c.now, ttl_fn, &c);

    if (rv != SHD_OK)
        return (fail(L, false, rv));
    lua_pushnumber(L, c.left);
    return (1);
}

/* d:expire(key, ttl): a new ttl for the value (0: none); false, "not found". */
static int
l_expire(lua_State *L)
{
    struct pol_shd *d = check_dict(L, 1, "expire");
    size_t klen;
    const char *k = check_key(L, 2, &klen);
    struct ttl_op c = { .now = tim_mono(), .set = check_ttl(L, 3) };
    enum shd_rv rv = shd_rmw(d, k, klen, NULL, 0, c.now, ttl_fn, &c);

    if (rv != SHD_OK)
        return (fail(L, true, rv));
    lua_pushboolean(L, 1);
    return (1);
}

static int
l_shd_tostring(lua_State *L)
{
    luaL_checkudata(L, 1, SHD_MT);
    lua_getiuservalue(L, 1, 1);
    lua_pushfstring(L, "shared \"%s\"", lua_tostring(L, -1));
    return (1);
}

/*
 * The state's handle of dictionary `name` (at idx), made at its first
 * use.  Checked against the declarations: the program's, or in the
 * state that checks a script, those its top level made so far.
 */
static void
push_handle(lua_State *L, int idx, const char *fn)
{
    const char *name = luaL_checkstring(L, idx);
    struct pol_wrk *pw = pol__wrk(L);
    struct pol_cfg *cfg = pw->prog != NULL ? pol__prog_cfg(pw->prog) : NULL;
    struct shd_handle *h;

    lua_getfield(L, LUA_REGISTRYINDEX, SHD_CACHE);
    if (lua_getfield(L, -1, name) != LUA_TNIL) {
        lua_remove(L, -2);
        return;
    }
    lua_pop(L, 1);
    if (cfg != NULL ? pol__decl_shared(cfg, name) == NULL : !pol__decl_seen(L, "shared", name))
        (void)luaL_error(L, "%s: no shared \"%s\" { size = ... } is declared%s", fn, name,
                         cfg != NULL ? "" : " before");
    h = lua_newuserdatauv(L, sizeof *h, 1);
    h->d = NULL;
    luaL_setmetatable(L, SHD_MT);
    lua_pushvalue(L, idx);
    lua_setiuservalue(L, -2, 1);
    lua_pushvalue(L, -1);
    lua_setfield(L, -3, name);
    lua_remove(L, -2);
}

/* surogat.shared(name): the dictionary declared by `shared "name" { size = ... }`. */
static int
l_shared(lua_State *L)
{
    push_handle(L, 1, "surogat.shared");
    return (1);
}

/* A rate: requests per second, or "N/s", "N/m", "N/h", "N/d". */
static double
check_rate(lua_State *L, int idx)
{
    double r, per = 1;
    char unit = 's', *end;
    const char *s;

    if (lua_type(L, idx) == LUA_TNUMBER) {
        r = lua_tonumber(L, idx);
    } else {
        s = luaL_checkstring(L, idx);
        r = strtod(s, &end);
        if (end == s || *end != '/' || end[1] == '\0' || end[2] != '\0')
            (void)luaL_error(L, "surogat.ratelimit: rate \"%s\" is not N/s, N/m, N/h or N/d", s);
        unit = end[1];
        per = unit == 's' ? 1 : unit == 'm' ? 60 : unit == 'h' ? 3600 : unit == 'd' ? 86400 : 0;
        if (per == 0)
            (void)luaL_error(L, "surogat.ratelimit: rate \"%s\" is not N/s, N/m, N/h or N/d", s);
    }
    if (!(r > 0 && r / per >= 1e-9 && r <= 1e9))
        (void)luaL_error(L, "surogat.ratelimit: the rate must be above 0");
    return (r / per);
}

/*
 * surogat.ratelimit(key, rate, burst [, dict]): whether one more request
 * of `key` is allowed, and when not, the seconds until one would be.
 * dict: a handle or a name, by default the dictionary "ratelimit".
 */
static int
l_ratelimit(lua_State *L)
{
    size_t klen;
    const char *k = check_key(L, 1, &klen);
    double rate = check_rate(L, 2), burst = luaL_checknumber(L, 3);
    struct gcra c = { .now = tim_mono() };
    struct shd_val init = { .type = SHD_T_NUM };
    struct pol_shd *d;

    if (!(burst >= 1 && burst <= 1e9))
        return (luaL_error(L, "surogat.ratelimit: burst %f is not 1 or more", burst));
    if (lua_type(L, 4) == LUA_TUSERDATA) {
        lua_settop(L, 4);
    } else {
        lua_settop(L, 4);
        if (lua_isnil(L, 4)) {
            lua_pushliteral(L, RATELIMIT_DICT);
            lua_replace(L, 4);
        }
        push_handle(L, 4, "surogat.ratelimit");
        lua_replace(L, 4);
    }
    d = check_dict(L, 4, "ratelimit");
    c.interval = 1 / rate;
    c.tau = burst * c.interval;
    init.d = c.now;
    (void)shd_rmw(d, k, klen, &init, 0, c.now, gcra_fn, &c);
    if (!c.allowed)
        STAT_INC(ratelimit_denied);
    lua_pushboolean(L, c.allowed);
    lua_pushnumber(L, c.wait);
    return (2);
}

void
pol__shared_open(lua_State *L)
{
    static const luaL_Reg methods[] = {
        { "get", l_get },       { "set", l_set },       { "safe_set", l_safe_set },
        { "add", l_add },       { "incr", l_incr },     { "delete", l_delete },
        { "ttl", l_ttl },       { "expire", l_expire }, { NULL, NULL },
    };

    luaL_checktype(L, -1, LUA_TTABLE);
    luaL_newmetatable(L, SHD_MT);
    luaL_newlib(L, methods);
    lua_setfield(L, -2, "__index");
    lua_pushcfunction(L, l_shd_tostring);
    lua_setfield(L, -2, "__tostring");
    lua_pushliteral(L, "locked");
    lua_setfield(L, -2, "__metatable");
    lua_pop(L, 1);
    lua_newtable(L);
    lua_setfield(L, LUA_REGISTRYINDEX, SHD_CACHE);
    lua_pushcfunction(L, l_shared);
    lua_setfield(L, -2, "shared");
    lua_pushcfunction(L, l_ratelimit);
    lua_setfield(L, -2, "ratelimit");
}
