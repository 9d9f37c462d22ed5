/*
 * How objects leave the index, other than superseded by a newer variant
 * (hsh_unbusy) or dropped past all use by a lookup: evicted to make room
 * in a full store, or purged -- by key, by tag, or by a walk for bans.
 *
 * Eviction is SIEVE (Zhang et al., NSDI 2024), one queue per shard: new
 * objects enter at the head, a hit only sets `visited` (no lock, no list
 * move: a hit costs nothing here), and the hand walks from the tail
 * towards the head, sparing and clearing visited objects and evicting the
 * first unvisited one.  A scan of one-hit wonders therefore passes
 * through without displacing objects that are hit again.
 * With tinylfu on, the victim stays if its key is wanted more than the
 * newcomer's (lfu.h), and the newcomer is not stored.
 *
 * Everything here runs under the shard lock of the object concerned
 * (hsh_priv.h), one shard at a time.
 */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>

#include "surogat/defs.h"
#include "surogat/hsh.h"
#include "surogat/lfu.h"
#include "surogat/par.h"
#include "surogat/stat.h"
#include "surogat/tim.h"

#include "hsh_priv.h"

static unsigned evict_next; /* round-robin over shards for eviction */

/* ---- SIEVE queue, under the shard lock ---- */

void
hsh__sieve_insert(struct shard *sh, struct cobj *oc)
{
    oc->sv_older = NULL;
    oc->sv_newer = NULL;
    oc->sv_older = sh->sv_head;
    if (sh->sv_head != NULL)
        sh->sv_head->sv_newer = oc;
    sh->sv_head = oc;
    if (sh->sv_tail == NULL)
        sh->sv_tail = oc;
}

void
hsh__sieve_remove(struct shard *sh, struct cobj *oc)
{
    if (sh->hand == oc)
        sh->hand = oc->sv_newer;
    if (oc->sv_newer != NULL)
        oc->sv_newer->sv_older = oc->sv_older;
    else
        sh->sv_head = oc->sv_older;
    if (oc->sv_older != NULL)
        oc->sv_older->sv_newer = oc->sv_newer;
    else
        sh->sv_tail = oc->sv_newer;
    oc->sv_newer = oc->sv_older = NULL;
}

enum evict_result {
    EVICTED,
    EVICT_NONE,     /* nothing evictable: everything busy, in use or in another store */
    EVICT_REJECTED, /* the victim is wanted more than the newcomer (tinylfu) */
};

/*
 * Whether the newcomer with key hash `cand` may take victim's place:
 * frequency decides, except that a stale victim always goes.  A tie
 * admits: among one-hit wonders the newer is the better bet.
 */
static bool
admit(const struct cobj *victim, uint64_t cand, double now)
{
    if (!par.tinylfu || now - victim->fresh.t_origin > victim->fresh.ttl)
        return (true);
    return (lfu_estimate(cand) >= lfu_estimate(victim->oh->hash));
}

/*
 * Evict one object of store stv (any store if NULL) from some shard, to
 * make room for a newcomer whose key hashes to cand.
 */
static enum evict_result
evict_one(uint8_t stv, uint64_t cand)
{
    double now = tim_real();

    for (unsigned tries = 0; tries < HSH_SHARDS; tries++) {
        struct shard *sh =
            &hsh__shards[__atomic_fetch_add(&evict_next, 1, __ATOMIC_RELAXED) % HSH_SHARDS];
        struct cobj *oc, *victim = NULL;
        unsigned steps = 0;

        if (pthread_mutex_trylock(&sh->mtx) != 0)
            continue; /* busy shard: try another rather than wait */
        oc = sh->hand != NULL ? sh->hand : sh->sv_tail;
        while (oc != NULL && steps++ < 1024) {
            if (oc->visited) {
                oc->visited = false;
            } else if (__atomic_load_n(&oc->refcnt, __ATOMIC_RELAXED) == 1 &&
                       (stv == 0 || oc->body.stv == stv)) {
                victim = oc;
                break;
            }
            oc = oc->sv_newer != NULL ? oc->sv_newer : sh->sv_tail;
        }
        if (victim != NULL && !admit(victim, cand, now)) {
            /* It stays, as if hit: the next newcomer is weighed against the next object. */
            sh->hand = victim->sv_newer;
            AZ(pthread_mutex_unlock(&sh->mtx));
            return (EVICT_REJECTED);
        }
        if (victim != NULL) {
            struct objhead *oh = victim->oh;
            sh->hand = victim->sv_newer;
            (void)hsh__unlink_obj(sh, victim);
            hsh__oh_maybe_free(sh, oh);
        }
        AZ(pthread_mutex_unlock(&sh->mtx));
        if (victim != NULL) {
            STAT_INC(n_lru_nuked);
            hsh_deref(&victim);
            return (EVICTED);
        }
    }
    return (EVICT_NONE);
}

/* Make room in oc's store for oc: 0, or -1 when oc should not be stored. */
int
hsh__make_room(struct cobj *oc, unsigned *nuked)
{
    switch (*nuked >= par.nuke_limit ? EVICT_NONE : evict_one(oc->body.stv, oc->oh->hash)) {
    case EVICTED:
        (*nuked)++;
        return (0);
    case EVICT_REJECTED:
        STAT_INC(cache_admission_rejected);
        return (-1);
    case EVICT_NONE:
        break;
    }
    STAT_INC(n_lru_limited);
    return (-1);
}

/* ---- purge, soft purge, tags and bans ---- */

/*
 * Soft purge: freshness ends now, the stale windows stay.  This is the one
 * field of a published object written after hsh_unbusy(), and it is safe
 * because: it is written under the shard lock, and the decisions that
 * read it (fresh_decide() and obj_dead() in hsh_lookup, the visits of
 * hsh_walk) run under that lock; the other readers, deliveries writing
 * Cache-Status's ttl and fetches revalidating the object, hold only a
 * reference and are right with either value; the store is one atomic
 * 8-byte write, so no reader sees a torn double; and it only ever lowers
 * the ttl, so an object never turns fresher.
 */
static void
expire_now(struct cobj *oc, double now)
{
    double ttl = now - oc->fresh.t_origin;

    if (ttl < 0)
        ttl = 0;
    if (ttl < oc->fresh.ttl) {
        __atomic_store(&oc->fresh.ttl, &ttl, __ATOMIC_RELAXED);
        hsh_store_attr(oc); /* so a restart does not bring it back fresh */
    }
}

/* Under the shard lock: soft-purge oc, or unlink it for the caller to drop (returned). */
static struct cobj *
purge_one(struct shard *sh, struct cobj *oc, bool soft, double now)
{
    if (soft && !(oc->flags & (COBJ_HFM | COBJ_BANNED))) {
        expire_now(oc, now);
        return (NULL);
    }
    return (hsh__unlink_obj(sh, oc));
}

unsigned
hsh_purge(const char *key, size_t keylen)
{
    return (hsh_purge_key(key, keylen, false));
}

unsigned
hsh_purge_key(const char *key, size_t keylen, bool soft)
{
    uint64_t hash = key_hash(key, keylen);
    struct shard *sh = shard_of(hash);
    struct cobj *oc, *next, *gone[64];
    double now = tim_real();
    struct objhead *oh;
    unsigned n = 0, ngone = 0;

    AZ(pthread_mutex_lock(&sh->mtx));
    oh = hsh__oh_find(sh, hash, key, keylen);
    if (oh != NULL) {
        for (oc = oh->objs; oc != NULL && ngone < ARRAY_LEN(gone); oc = next) {
            next = oc->next;
            if (oc->flags & COBJ_BUSY) {
                hsh__overtake(oc);
                continue;
            }
            n++;
            if ((gone[ngone] = purge_one(sh, oc, soft, now)) != NULL)
                ngone++;
        }
        hsh__oh_maybe_free(sh, oh);
    }
    AZ(pthread_mutex_unlock(&sh->mtx));
    while (ngone > 0)
        hsh_deref(&gone[--ngone]);
    return (n);
}

bool
hsh_kill(struct cobj *oc, bool soft)
{
    /* Not oc->oh->hash: once the object is dead its objhead may be gone. */
    struct shard *sh = &hsh__shards[oc->shard];
    struct objhead *oh;
    struct cobj *gone;

    OBJ_CHECK(oc, COBJ_MAGIC);
    AZ(pthread_mutex_lock(&sh->mtx));
    if (oc->flags & (COBJ_BUSY | COBJ_DEAD)) {
        if (oc->flags & COBJ_BUSY)
            hsh__overtake(oc);
        AZ(pthread_mutex_unlock(&sh->mtx));
        return (false);
    }
    oh = oc->oh;
    gone = purge_one(sh, oc, soft, tim_real());
    if (gone != NULL)
        hsh__oh_maybe_free(sh, oh);
    AZ(pthread_mutex_unlock(&sh->mtx));
    if (gone != NULL)
        hsh_deref(&gone); /* the index's reference: the caller's keeps it alive */
    return (true);
}

bool
hsh_walk(struct hsh_cursor *cur, unsigned max, hsh_visit_f *fn, void *priv)
{
    struct cobj **gone = NULL;
    size_t ngone = 0, cap = 0;
    unsigned seen = 0;
    bool done = false;

    AN(cur);
    AN(fn);
    SRG_ASSERT(cur->shard < HSH_SHARDS);
    while (seen < max && !done) {
        struct shard *sh = &hsh__shards[cur->shard];

        AZ(pthread_mutex_lock(&sh->mtx));
        for (; seen < max && cur->bucket < sh->nbuckets; cur->bucket++) {
            struct objhead *oh, *ohnext;
            for (oh = sh->buckets[cur->bucket]; oh != NULL; oh = ohnext) {
                struct cobj *oc, *next;
                size_t before = ngone;
                ohnext = oh->hnext;
                for (oc = oh->objs; oc != NULL; oc = next) {
                    next = oc->next;
                    if (oc->flags & COBJ_BUSY)
                        continue;
                    seen++;
                    if (!fn(oc, oh->key, oh->keylen, priv))
                        continue;
                    if (ngone == cap) {
                        cap = cap == 0 ? 64 : cap * 2;
                        gone = realloc(gone, cap * sizeof *gone);
                        AN(gone);
                    }
                    gone[ngone++] = hsh__unlink_obj(sh, oc);
                }
                if (ngone > before)
                    hsh__oh_maybe_free(sh, oh);
            }
        }
        if (cur->bucket >= sh->nbuckets) {
            cur->bucket = 0;
            if (++cur->shard == HSH_SHARDS) {
                cur->shard = 0;
                done = true;
            }
        }
        AZ(pthread_mutex_unlock(&sh->mtx));
    }
    while (ngone > 0)
        hsh_deref(&gone[--ngone]);
    free(gone);
    return (done);
}
