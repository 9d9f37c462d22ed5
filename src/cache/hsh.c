/*
 * The cache index.
 *
 * Locks: one mutex per shard guards its hash table, its objheads, the
 * variant lists and flags of their objects, and its SIEVE queue.  Only
 * ban_mtx (ban.h) is taken while a shard lock is held, and object storage is
 * freed only after the lock is dropped (hsh_deref).  Reference counts are
 * atomic so a delivery drops its reference without the lock; the index's
 * own reference is dropped only by code holding the shard lock, after it
 * unlinked the object, so a count that reaches zero means nobody can find
 * the object any more.
 *
 * Eviction is SIEVE (Zhang et al., NSDI 2024), one queue per shard: new
 * objects enter at the head, a hit only sets `visited` (no lock, no list
 * move: a hit costs nothing here), and the hand walks from the tail
 * towards the head, sparing and clearing visited objects and evicting the
 * first unvisited one.  A scan of one-hit wonders therefore passes
 * through without displacing objects that are hit again.
 *
 * Streaming: once its fetch calls hsh_stream_open(), a busy object has
 * readers -- requests that coalesced on it and deliver its body as it is
 * appended.  Each holds a reference to the object and counts in the
 * objhead's nstream, so neither goes away under it; the body of an
 * abandoned object stays until the last reader leaves (COBJ_ORPHAN).  The
 * writer publishes the readable length with a release store after the
 * bytes are in place and wakes sleeping readers (oh->nsleep) on the
 * objhead's condition variable.
 */
#include "config.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "surogat/ban.h"
#include "surogat/defs.h"
#include "surogat/hsh.h"
#include "surogat/http.h"
#include "surogat/lfu.h"
#include "surogat/par.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/xkey.h"

#define HSH_SHARDS      64
#define HSH_BUCKETS_MIN 256

struct objhead {
    unsigned magic;
#define OBJHEAD_MAGIC 0x2f61c0d8
    struct objhead *hnext; /* hash chain */
    uint64_t hash;
    char *key;
    size_t keylen;
    struct cobj *objs;     /* variants, busy ones included */
    unsigned nwaiting;     /* requests waiting for a busy object */
    unsigned nstream;      /* requests streaming from a busy object: keep the objhead */
    unsigned nsleep;       /* atomic: streaming readers asleep, waiting for bytes */
    unsigned nobjs;
    /*
     * Broadcast when a busy object streams, is published or abandoned,
     * and when bytes are appended while readers sleep.
     */
    pthread_cond_t cond;
};

struct shard {
    pthread_mutex_t mtx;
    struct objhead **buckets;
    size_t nbuckets;  /* a power of two */
    size_t nheads;
    struct cobj *sv_head; /* newest */
    struct cobj *sv_tail; /* oldest */
    struct cobj *hand;    /* next to examine, moving towards the head; NULL: from the tail */
} __attribute__((aligned(64)));

static struct shard shards[HSH_SHARDS];
static unsigned evict_next; /* round-robin over shards for eviction */
static bool closing;        /* hsh_fini: objects are forgotten, not freed from their store */

/*
 * What the index keeps of an object in a persistent store, to rebuild it
 * after a restart.  The version changes whenever the layout does: an
 * attr of another length is refused, and its object dropped.
 */
struct hsh_attr {
    uint32_t version;
#define HSH_ATTR_VERSION 1
    uint32_t status;
    struct fresh_obj fresh;
    uint8_t has_validator;
};

/* FNV-1a, 64 bits: keys are short, and the key is compared in full anyway. */
static uint64_t
key_hash(const char *k, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ULL;

    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)k[i];
        h *= 0x100000001b3ULL;
    }
    return (h ^ (h >> 29));
}

static struct shard *
shard_of(uint64_t hash)
{
    return (&shards[hash % HSH_SHARDS]);
}

static size_t
bucket_of(const struct shard *sh, uint64_t hash)
{
    return ((size_t)(hash / HSH_SHARDS) & (sh->nbuckets - 1));
}

int
hsh_init(void)
{
    for (unsigned i = 0; i < HSH_SHARDS; i++) {
        AZ(pthread_mutex_init(&shards[i].mtx, NULL));
        shards[i].nbuckets = HSH_BUCKETS_MIN;
        shards[i].buckets = calloc(HSH_BUCKETS_MIN, sizeof *shards[i].buckets);
        AN(shards[i].buckets);
    }
    return (0);
}

static void
cobj_free(struct cobj *oc)
{
    /* Tags are read from the stored head: before the store may free it. */
    xkey_unindex(oc);
    ban_obj_free(oc);
    if (!oc->body.meta_stored) {
        free(oc->head);
        free(oc->vary);
    }
    if (closing)
        sto_body_release(&oc->body);
    else
        sto_body_free(&oc->body);
    STAT_DEC(n_object);
    OBJ_FREE(&oc);
}

/*
 * Free the body of an object that stays (a hit-for-miss marker) or is
 * about to go.  A stored head lives with the body in a persistent store:
 * it goes too.
 */
static void
body_drop(struct cobj *oc)
{
    if (oc->body.meta_stored) {
        oc->head = NULL;
        oc->head_len = 0;
    }
    sto_body_free(&oc->body);
}

void
hsh_deref(struct cobj **ocp)
{
    struct cobj *oc;

    OBJ_TAKE(oc, ocp, COBJ_MAGIC);
    if (__atomic_sub_fetch(&oc->refcnt, 1, __ATOMIC_ACQ_REL) == 0)
        cobj_free(oc);
}

/* ---- SIEVE queue, under the shard lock ---- */

static void
sieve_insert(struct shard *sh, struct cobj *oc)
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

static void
sieve_remove(struct shard *sh, struct cobj *oc)
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

/* ---- objheads and variants, under the shard lock ---- */

static struct objhead *
oh_find(struct shard *sh, uint64_t hash, const char *key, size_t keylen)
{
    struct objhead *oh;

    for (oh = sh->buckets[bucket_of(sh, hash)]; oh != NULL; oh = oh->hnext)
        if (oh->hash == hash && oh->keylen == keylen && memcmp(oh->key, key, keylen) == 0)
            return (oh);
    return (NULL);
}

static void
grow(struct shard *sh)
{
    size_t n = sh->nbuckets * 2;
    struct objhead **nb = calloc(n, sizeof *nb), *oh, *next;
    size_t old = sh->nbuckets;

    AN(nb);
    sh->nbuckets = n;
    for (size_t i = 0; i < old; i++) {
        for (oh = sh->buckets[i]; oh != NULL; oh = next) {
            next = oh->hnext;
            size_t b = bucket_of(sh, oh->hash);
            oh->hnext = nb[b];
            nb[b] = oh;
        }
    }
    free(sh->buckets);
    sh->buckets = nb;
}

static struct objhead *
oh_new(struct shard *sh, uint64_t hash, const char *key, size_t keylen)
{
    struct objhead *oh;
    size_t b;

    if (sh->nheads >= sh->nbuckets * 2)
        grow(sh);
    OBJ_NEW(oh, OBJHEAD_MAGIC);
    oh->hash = hash;
    oh->key = malloc(keylen + 1);
    AN(oh->key);
    memcpy(oh->key, key, keylen);
    oh->key[keylen] = '\0';
    oh->keylen = keylen;
    AZ(pthread_cond_init(&oh->cond, NULL));
    b = bucket_of(sh, hash);
    oh->hnext = sh->buckets[b];
    sh->buckets[b] = oh;
    sh->nheads++;
    STAT_INC(n_objecthead);
    return (oh);
}

/* Free an objhead nobody needs: no objects, nobody waiting. */
static void
oh_maybe_free(struct shard *sh, struct objhead *oh)
{
    struct objhead **pp;

    if (oh->objs != NULL || oh->nwaiting > 0 || oh->nstream > 0)
        return;
    for (pp = &sh->buckets[bucket_of(sh, oh->hash)]; *pp != oh; pp = &(*pp)->hnext)
        AN(*pp);
    *pp = oh->hnext;
    sh->nheads--;
    AZ(pthread_cond_destroy(&oh->cond));
    free(oh->key);
    STAT_DEC(n_objecthead);
    OBJ_FREE(&oh);
}

/*
 * Unlink a variant from the index.  Returns it with the index's reference
 * still counted: the caller drops it with hsh_deref() after unlocking.
 */
static struct cobj *
unlink_obj(struct shard *sh, struct cobj *oc)
{
    struct objhead *oh = oc->oh;
    struct cobj **pp;

    for (pp = &oh->objs; *pp != oc; pp = &(*pp)->next)
        AN(*pp);
    *pp = oc->next;
    oc->next = NULL;
    oh->nobjs--;
    if (!(oc->flags & COBJ_BUSY)) {
        sieve_remove(sh, oc);
        if (!closing)
            sto_retire(&oc->body);
    }
    oc->flags |= COBJ_DEAD;
    return (oc);
}

/* ---- stored heads ---- */

bool
hsh_head_field(const struct cobj *oc, const char *name, struct txt *val)
{
    const char *p = memchr(oc->head, '\n', oc->head_len), *e = oc->head + oc->head_len;
    size_t nl = strlen(name);

    OBJ_CHECK(oc, COBJ_MAGIC);
    AN(p);
    for (p = p + 1; p < e;) {
        const char *eol = memchr(p, '\n', (size_t)(e - p));
        if (eol == NULL)
            break;
        if ((size_t)(eol - p) > nl + 1 && p[nl] == ':' && strncasecmp(p, name, nl) == 0) {
            const char *v = p + nl + 1, *ve = eol[-1] == '\r' ? eol - 1 : eol;
            while (v < ve && (*v == ' ' || *v == '\t'))
                v++;
            *val = (struct txt){ v, (size_t)(ve - v) };
            return (true);
        }
        p = eol + 1;
    }
    return (false);
}

/* ---- Vary ---- */

/* The values of every field `name` of hp, joined with ", " as one field. */
static size_t
joined_value(const struct http *hp, const char *name, size_t nlen, char *out, size_t cap)
{
    size_t n = 0;
    bool first = true;

    for (unsigned i = 0; i < hp->nhdr; i++) {
        const struct txt *fn = &hp->hdr[i].name, *fv = &hp->hdr[i].val;
        if (fn->len != nlen || strncasecmp(fn->b, name, nlen) != 0)
            continue;
        if (!first && n + 2 <= cap) {
            memcpy(out + n, ", ", 2);
            n += 2;
        }
        first = false;
        if (n + fv->len > cap)
            return (cap + 1);
        memcpy(out + n, fv->b, fv->len);
        n += fv->len;
    }
    return (n);
}

/* Whether the request matches the Vary values stored with oc (RFC 9111 section 4.1). */
static bool
vary_match(const struct cobj *oc, const struct http *req)
{
    const char *p = oc->vary, *e = oc->vary + oc->vary_len;
    char buf[1024];

    while (p < e) {
        const char *name = p, *val;
        size_t nlen = strlen(name), vlen, got;

        val = name + nlen + 1;
        vlen = strlen(val);
        got = joined_value(req, name, nlen, buf, sizeof buf);
        if (got != vlen || memcmp(buf, val, vlen) != 0)
            return (false);
        p = val + vlen + 1;
    }
    return (true);
}

int
hsh_set_vary(struct cobj *oc, const struct http *req, const struct http *resp)
{
    char val[1024], *v;
    size_t len = 0, n;

    OBJ_CHECK(oc, COBJ_MAGIC);
    SRG_ASSERT(oc->flags & COBJ_BUSY);
    v = malloc(8192);
    AN(v);
    for (unsigned i = 0; i < resp->nhdr; i++) {
        const char *p, *end, *s, *t;

        if (!http_name_eq(&resp->hdr[i].name, "Vary"))
            continue;
        p = resp->hdr[i].val.b;
        end = p + resp->hdr[i].val.len;
        while (p < end) {
            while (p < end && (*p == ' ' || *p == '\t' || *p == ','))
                p++;
            for (s = p; p < end && *p != ','; p++)
                continue;
            for (t = p; t > s && (t[-1] == ' ' || t[-1] == '\t'); t--)
                continue;
            if (t == s)
                continue;
            n = joined_value(req, s, (size_t)(t - s), val, sizeof val);
            if (n > sizeof val || len + (size_t)(t - s) + n + 2 > 8192) {
                free(v);
                return (-1);
            }
            memcpy(v + len, s, (size_t)(t - s));
            len += (size_t)(t - s);
            v[len++] = '\0';
            memcpy(v + len, val, n);
            len += n;
            v[len++] = '\0';
        }
    }
    free(oc->vary);
    oc->vary = len > 0 ? realloc(v, len) : NULL;
    if (len == 0)
        free(v);
    oc->vary_len = len;
    return (0);
}

/* ---- lookup ---- */

static struct cobj *
busy_new(struct objhead *oh)
{
    struct cobj *oc;

    OBJ_NEW(oc, COBJ_MAGIC);
    oc->oh = oh;
    oc->shard = (uint8_t)(oh->hash % HSH_SHARDS);
    ban_obj_new(oc);
    oc->flags = COBJ_BUSY;
    oc->refcnt = 2; /* the index's and the fetch's */
    oc->next = oh->objs;
    oh->objs = oc;
    oh->nobjs++;
    STAT_INC(n_object);
    return (oc);
}

static void
abs_deadline(struct timespec *ts, double seconds)
{
    double t;

    AZ(clock_gettime(CLOCK_REALTIME, ts));
    t = (double)ts->tv_sec + ts->tv_nsec * 1e-9 + seconds;
    ts->tv_sec = (time_t)t;
    ts->tv_nsec = (long)((t - floor(t)) * 1e9);
}

/* Past any use: beyond its freshness, its stale windows and its keep time. */
static bool
obj_dead(const struct cobj *oc, double now)
{
    double stale = oc->fresh.swr > oc->fresh.sie ? oc->fresh.swr : oc->fresh.sie;
    double keep = oc->has_validator ? par.default_keep : 0;

    if (oc->flags & COBJ_BANNED)
        return (true);
    return (now - oc->fresh.t_origin > oc->fresh.ttl + stale + keep);
}

static void
take_ref(struct cobj *oc)
{
    __atomic_add_fetch(&oc->refcnt, 1, __ATOMIC_RELAXED);
}

enum hsh_result
hsh_lookup(const char *key, size_t keylen, const struct http *req, const struct cc *qcc,
           double now, struct cobj **ocp, struct hsh_stale *stale)
{
    uint64_t hash = key_hash(key, keylen);
    struct shard *sh = shard_of(hash);
    struct cobj *oc, *busy, *stream, *swr, *old, *dead[8];
    enum fresh_verdict v, old_v = FRESH_V_REVALIDATE;
    unsigned ndead = 0;
    struct objhead *oh;
    struct timespec ts;
    bool waited = false;

    AN(ocp);
    AN(stale);
    *ocp = NULL;
    memset(stale, 0, sizeof *stale);
    if (par.tinylfu)
        lfu_touch(hash);
    AZ(pthread_mutex_lock(&sh->mtx));
    oh = oh_find(sh, hash, key, keylen);
    if (oh == NULL)
        oh = oh_new(sh, hash, key, keylen);
    for (;;) {
        busy = stream = swr = old = NULL;
        for (oc = oh->objs; oc != NULL; oc = oc->next) {
            if (oc->flags & COBJ_BUSY) {
                /* Its Vary values are set before COBJ_STREAM, under this lock. */
                if ((oc->flags & COBJ_STREAM) && vary_match(oc, req))
                    stream = oc;
                busy = oc;
                continue;
            }
            if (ban_check_obj(oc, key, keylen))
                continue;
            if (!vary_match(oc, req))
                continue;
            if (oc->flags & COBJ_HFM) {
                if (oc->t_hfm_end > now) {
                    AZ(pthread_mutex_unlock(&sh->mtx));
                    STAT_INC(cache_hitmiss);
                    return (HSH_PASS);
                }
                continue;
            }
            v = fresh_decide(&oc->fresh, qcc, now);
            if (v == FRESH_V_FRESH || v == FRESH_V_STALE_OK) {
                take_ref(oc);
                oc->visited = true;
                AZ(pthread_mutex_unlock(&sh->mtx));
                *ocp = oc;
                return (HSH_HIT);
            }
            if (v == FRESH_V_STALE_WHILE_REVALIDATE && swr == NULL)
                swr = oc;
            if (obj_dead(oc, now))
                continue; /* past all use: dropped below, not revalidated */
            if (old == NULL || oc->fresh.t_origin > old->fresh.t_origin) {
                old = oc;
                old_v = v;
            }
        }
        if (busy != NULL && swr != NULL) {
            /* Grace: someone is already refreshing it; serve the stale copy now. */
            take_ref(swr);
            swr->visited = true;
            AZ(pthread_mutex_unlock(&sh->mtx));
            STAT_INC(cache_hit_grace);
            *ocp = swr;
            return (HSH_HIT);
        }
        if (stream != NULL) {
            /* The fetch stores what we want: deliver it as it arrives. */
            take_ref(stream);
            stream->nreaders++;
            oh->nstream++;
            AZ(pthread_mutex_unlock(&sh->mtx));
            if (!waited)
                STAT_INC(cache_coalesced);
            STAT_INC(cache_streamed);
            *ocp = stream;
            return (HSH_STREAM);
        }
        if (busy == NULL)
            break;
        /* Someone is fetching this key: wait for it rather than asking the backend too. */
        if (oh->nwaiting >= par.coalesce_max_waiters) {
            AZ(pthread_mutex_unlock(&sh->mtx));
            STAT_INC(coalesce_overflow);
            return (HSH_PASS);
        }
        if (!waited) {
            abs_deadline(&ts, par.coalesce_timeout);
            STAT_INC(cache_coalesced);
            waited = true;
        }
        oh->nwaiting++;
        int rc = pthread_cond_timedwait(&oh->cond, &sh->mtx, &ts);
        oh->nwaiting--;
        if (rc == ETIMEDOUT) {
            AZ(pthread_mutex_unlock(&sh->mtx));
            STAT_INC(coalesce_timeout);
            return (HSH_PASS);
        }
        now = tim_real();
    }
    /*
     * A miss, or grace with nobody refreshing (then the stale copy is
     * both what the caller delivers and what the refresh revalidates).
     * The newest stale variant stays in the index (later requests may get
     * it in grace while we refresh) and goes to the caller for
     * revalidation and stale-if-error; variants past all use go now.
     */
    if (swr != NULL) {
        old = swr;
        old_v = FRESH_V_STALE_WHILE_REVALIDATE;
        swr->visited = true;
    }
    for (oc = oh->objs; oc != NULL && ndead < ARRAY_LEN(dead);) {
        struct cobj *next = oc->next;
        if (oc != old && !(oc->flags & COBJ_BUSY) && vary_match(oc, req) && obj_dead(oc, now))
            dead[ndead++] = unlink_obj(sh, oc);
        oc = next;
    }
    if (old != NULL) {
        take_ref(old);
        stale->oc = old;
        stale->verdict = old_v;
    }
    *ocp = busy_new(oh);
    AZ(pthread_mutex_unlock(&sh->mtx));
    while (ndead > 0)
        hsh_deref(&dead[--ndead]);
    if (swr != NULL) {
        STAT_INC(cache_hit_grace);
        return (HSH_GRACE);
    }
    STAT_INC(cache_miss);
    return (HSH_MISS);
}

void
hsh_ref(struct cobj *oc)
{
    OBJ_CHECK(oc, COBJ_MAGIC);
    take_ref(oc);
}

/* ---- streaming ---- */

void
hsh_stream_open(struct cobj *oc, uint64_t clen)
{
    struct shard *sh;

    OBJ_CHECK(oc, COBJ_MAGIC);
    sh = shard_of(oc->oh->hash);
    oc->clen_known = clen != UINT64_MAX;
    oc->stream_clen = clen;
    AZ(pthread_mutex_lock(&sh->mtx));
    SRG_ASSERT(oc->flags & COBJ_BUSY);
    oc->flags |= COBJ_STREAM;
    AZ(pthread_cond_broadcast(&oc->oh->cond));
    AZ(pthread_mutex_unlock(&sh->mtx));
}

bool
hsh_stream_close(struct cobj *oc)
{
    struct shard *sh;
    bool read;

    OBJ_CHECK(oc, COBJ_MAGIC);
    sh = shard_of(oc->oh->hash);
    AZ(pthread_mutex_lock(&sh->mtx));
    oc->flags &= ~COBJ_STREAM;
    read = oc->nreaders > 0;
    AZ(pthread_mutex_unlock(&sh->mtx));
    return (read);
}

/* The writer made more bytes readable: wake the readers that sleep for them. */
static void
stream_publish(struct cobj *oc, uint64_t len)
{
    struct objhead *oh = oc->oh;
    struct shard *sh;

    __atomic_store_n(&oc->stream_len, len, __ATOMIC_RELEASE);
    /*
     * Pairs with the fence in hsh_stream_wait(): either we see its
     * sleeper count, or it sees our length before it sleeps.
     */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (__atomic_load_n(&oh->nsleep, __ATOMIC_RELAXED) == 0)
        return;
    sh = shard_of(oh->hash);
    AZ(pthread_mutex_lock(&sh->mtx));
    AZ(pthread_cond_broadcast(&oh->cond));
    AZ(pthread_mutex_unlock(&sh->mtx));
}

enum hsh_stream
hsh_stream_wait(struct cobj *oc, uint64_t have, double tmo, uint64_t *avail)
{
    struct objhead *oh;
    struct shard *sh;
    struct timespec ts;
    enum hsh_stream rv;
    bool timed_out = false;

    OBJ_CHECK(oc, COBJ_MAGIC);
    oh = oc->oh;
    sh = shard_of(oh->hash);
    abs_deadline(&ts, tmo);
    AZ(pthread_mutex_lock(&sh->mtx));
    SRG_ASSERT(oc->nreaders > 0);
    for (;;) {
        /* The end is decided under this lock, after the last byte was published. */
        if (!(oc->flags & COBJ_BUSY)) {
            *avail = __atomic_load_n(&oc->stream_len, __ATOMIC_ACQUIRE);
            rv = oc->body_complete ? HSH_S_DONE : HSH_S_FAILED;
            break;
        }
        __atomic_add_fetch(&oh->nsleep, 1, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        *avail = __atomic_load_n(&oc->stream_len, __ATOMIC_ACQUIRE);
        if (*avail > have || timed_out) {
            __atomic_sub_fetch(&oh->nsleep, 1, __ATOMIC_RELAXED);
            rv = *avail > have ? HSH_S_MORE : HSH_S_TIMEOUT;
            break;
        }
        timed_out = pthread_cond_timedwait(&oh->cond, &sh->mtx, &ts) == ETIMEDOUT;
        __atomic_sub_fetch(&oh->nsleep, 1, __ATOMIC_RELAXED);
    }
    AZ(pthread_mutex_unlock(&sh->mtx));
    return (rv);
}

void
hsh_stream_leave(struct cobj **ocp)
{
    struct cobj *oc = *ocp;
    struct objhead *oh;
    struct shard *sh;
    bool free_body = false;

    OBJ_CHECK(oc, COBJ_MAGIC);
    oh = oc->oh;
    sh = shard_of(oh->hash);
    AZ(pthread_mutex_lock(&sh->mtx));
    SRG_ASSERT(oc->nreaders > 0 && oh->nstream > 0);
    oc->nreaders--;
    oh->nstream--;
    if (oc->nreaders == 0 && (oc->flags & COBJ_ORPHAN)) {
        oc->flags &= ~COBJ_ORPHAN;
        free_body = true;
    }
    oh_maybe_free(sh, oh);
    AZ(pthread_mutex_unlock(&sh->mtx));
    /* Nobody can attach to an abandoned object: its body is ours alone now. */
    if (free_body)
        body_drop(oc);
    hsh_deref(ocp);
}

/* ---- publishing ---- */

void
hsh_unbusy(struct cobj **ocp)
{
    struct cobj *oc = *ocp, *o, *next, *old[8];
    unsigned nold = 0;
    struct objhead *oh;
    struct shard *sh;

    OBJ_CHECK(oc, COBJ_MAGIC);
    oh = oc->oh;
    sh = shard_of(oh->hash);
    /* Indexed before it is visible: a tag purge from now on finds it. */
    xkey_index(oc);
    AZ(pthread_mutex_lock(&sh->mtx));
    SRG_ASSERT(oc->flags & COBJ_BUSY);
    /*
     * Give back the unused tail of the last segment -- which may move it
     * (realloc) -- only if no reader streams from it: a reader reads
     * segments without a lock.  None can attach while we hold the lock,
     * and once published the object is immutable, so this is the one
     * moment the trim is safe.  A streamed object keeps its slack.
     */
    if (oc->nreaders == 0 || sto_trim_in_place(&oc->body))
        sto_body_trim(&oc->body);
    /* Older variants for the same request are superseded. */
    for (o = oh->objs; o != NULL && nold < ARRAY_LEN(old); o = next) {
        next = o->next;
        if (o != oc && !(o->flags & COBJ_BUSY) && o->vary_len == oc->vary_len &&
            (o->vary_len == 0 || memcmp(o->vary, oc->vary, o->vary_len) == 0))
            old[nold++] = unlink_obj(sh, o);
    }
    oc->flags &= ~(COBJ_BUSY | COBJ_STREAM);
    sto_seal(&oc->body);
    sieve_insert(sh, oc);
    AZ(pthread_cond_broadcast(&oh->cond));
    AZ(pthread_mutex_unlock(&sh->mtx));
    while (nold > 0)
        hsh_deref(&old[--nold]);
    hsh_deref(ocp);
}

void
hsh_abandon(struct cobj **ocp, double hfm_ttl)
{
    struct cobj *oc = *ocp, *gone = NULL;
    struct objhead *oh;
    struct shard *sh;
    bool read;

    OBJ_CHECK(oc, COBJ_MAGIC);
    oh = oc->oh;
    sh = shard_of(oh->hash);
    AZ(pthread_mutex_lock(&sh->mtx));
    SRG_ASSERT(oc->flags & COBJ_BUSY);
    read = oc->nreaders > 0;
    if (oc->body.meta_stored && oc->vary_len > 0) {
        /* A marker answers only matching requests: its Vary values outlive the body. */
        char *v = malloc(oc->vary_len);
        AN(v);
        memcpy(v, oc->vary, oc->vary_len);
        oc->vary = v;
    }
    if (hfm_ttl > 0) {
        oc->flags = COBJ_HFM;
        oc->t_hfm_end = tim_real() + hfm_ttl;
        sieve_insert(sh, oc);
    } else {
        gone = unlink_obj(sh, oc);
        oc->flags &= ~(COBJ_BUSY | COBJ_STREAM);
        oh_maybe_free(sh, oh);
    }
    /* A marker holds no body: it goes now, or with the last reader still sending it. */
    if (read)
        oc->flags |= COBJ_ORPHAN;
    AZ(pthread_cond_broadcast(&oh->cond));
    AZ(pthread_mutex_unlock(&sh->mtx));
    if (!read)
        body_drop(oc);
    if (gone != NULL)
        hsh_deref(&gone);
    hsh_deref(ocp);
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
evict_one(const struct stv *stv, uint64_t cand)
{
    double now = tim_real();

    for (unsigned tries = 0; tries < HSH_SHARDS; tries++) {
        struct shard *sh =
            &shards[__atomic_fetch_add(&evict_next, 1, __ATOMIC_RELAXED) % HSH_SHARDS];
        struct cobj *oc, *victim = NULL;
        unsigned steps = 0;

        if (pthread_mutex_trylock(&sh->mtx) != 0)
            continue; /* busy shard: try another rather than wait */
        oc = sh->hand != NULL ? sh->hand : sh->sv_tail;
        while (oc != NULL && steps++ < 1024) {
            if (oc->visited) {
                oc->visited = false;
            } else if (__atomic_load_n(&oc->refcnt, __ATOMIC_RELAXED) == 1 &&
                       (stv == NULL || oc->body.stv == stv)) {
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
            (void)unlink_obj(sh, victim);
            oh_maybe_free(sh, oh);
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
static int
make_room(struct cobj *oc, unsigned *nuked)
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

int
hsh_append(struct cobj *oc, const void *p, size_t len)
{
    unsigned nuked = 0;

    OBJ_CHECK(oc, COBJ_MAGIC);
    for (;;) {
        uint64_t before = oc->body.len;
        size_t done;

        if (sto_append(&oc->body, p, len) == 0) {
            stream_publish(oc, oc->body.len);
            return (0);
        }
        /* sto_append() may have stored a part: it stays, and we retry the rest. */
        done = (size_t)(oc->body.len - before);
        p = (const char *)p + done;
        len -= done;
        if (make_room(oc, &nuked) != 0)
            return (-1);
    }
}

static void
attr_of(const struct cobj *oc, struct hsh_attr *a)
{
    memset(a, 0, sizeof *a);
    a->version = HSH_ATTR_VERSION;
    a->status = oc->status;
    a->fresh = oc->fresh;
    a->has_validator = oc->has_validator;
}

int
hsh_store_begin(struct cobj *oc)
{
    struct hsh_attr attr;
    struct sto_meta m;
    unsigned nuked = 0;

    OBJ_CHECK(oc, COBJ_MAGIC);
    SRG_ASSERT(oc->flags & COBJ_BUSY);
    attr_of(oc, &attr);
    for (;;) {
        m = (struct sto_meta){ oc->oh->key, oc->oh->keylen, oc->head, oc->head_len,
                               oc->vary, oc->vary_len, &attr, sizeof attr,
                               sizeof *oc + sizeof *oc->oh + oc->oh->keylen };
        if (sto_open(&oc->body, &m) == 0)
            break;
        if (make_room(oc, &nuked) != 0) {
            oc->body.stv = NULL;
            return (-1);
        }
        oc->body.stv = NULL;
    }
    if (oc->body.meta_stored) {
        /* The store keeps its own copies, for as long as the body: ours can go. */
        free(oc->head);
        free(oc->vary);
        oc->head = (char *)(uintptr_t)m.head;
        oc->vary = oc->vary_len > 0 ? (char *)(uintptr_t)m.vary : NULL;
    }
    return (0);
}

void
hsh_store_attr(struct cobj *oc)
{
    struct hsh_attr attr;

    OBJ_CHECK(oc, COBJ_MAGIC);
    attr_of(oc, &attr);
    sto_set_attr(&oc->body, &attr, sizeof attr);
}

/*
 * One object a persistent store found at startup.  Objects past all use
 * are refused (the store frees them); of two for the same key and Vary
 * values the newer response stays.
 */
static int
recover_one(const struct sto_meta *m, struct sto_body *b, uint64_t serial)
{
    struct hsh_attr attr, *a = &attr;
    uint64_t hash = key_hash(m->key, m->key_len);
    struct shard *sh = shard_of(hash);
    struct cobj *oc, *o, *gone = NULL;
    struct objhead *oh;

    (void)serial;
    if (m->attr_len != sizeof attr)
        return (-1);
    memcpy(&attr, m->attr, sizeof attr); /* the store promises no alignment */
    if (a->version != HSH_ATTR_VERSION)
        return (-1);
    OBJ_NEW(oc, COBJ_MAGIC);
    oc->fresh = a->fresh;
    oc->status = a->status;
    oc->has_validator = a->has_validator != 0;
    oc->head = (char *)(uintptr_t)m->head;
    oc->head_len = m->head_len;
    oc->vary = m->vary_len > 0 ? (char *)(uintptr_t)m->vary : NULL;
    oc->vary_len = m->vary_len;
    oc->body_complete = true;
    oc->shard = (uint8_t)(hash % HSH_SHARDS);
    if (obj_dead(oc, tim_real())) {
        OBJ_FREE(&oc);
        return (-1);
    }
    AZ(pthread_mutex_lock(&sh->mtx));
    oh = oh_find(sh, hash, m->key, m->key_len);
    if (oh == NULL)
        oh = oh_new(sh, hash, m->key, m->key_len);
    for (o = oh->objs; o != NULL; o = o->next) {
        if (o->vary_len != oc->vary_len ||
            (o->vary_len > 0 && memcmp(o->vary, oc->vary, o->vary_len) != 0))
            continue;
        if (o->fresh.t_origin >= oc->fresh.t_origin) {
            AZ(pthread_mutex_unlock(&sh->mtx));
            OBJ_FREE(&oc);
            return (-1);
        }
        gone = unlink_obj(sh, o);
        break;
    }
    oc->body = *b;
    oc->oh = oh;
    ban_obj_new(oc); /* bans do not outlive the process: it starts past all of them */
    oc->refcnt = 1; /* the index's */
    oc->next = oh->objs;
    oh->objs = oc;
    oh->nobjs++;
    sieve_insert(sh, oc);
    STAT_INC(n_object);
    AZ(pthread_mutex_unlock(&sh->mtx));
    if (gone != NULL)
        hsh_deref(&gone);
    xkey_index(oc);
    return (0);
}

void
hsh_recover(void)
{
    sto_recover(recover_one);
}

bool
hsh_verify(struct cobj *oc)
{
    OBJ_CHECK(oc, COBJ_MAGIC);
    if (sto_verify(&oc->body))
        return (true);
    STAT_INC(sto_verify_fail);
    (void)hsh_kill(oc, false);
    return (false);
}


unsigned
hsh_purge(const char *key, size_t keylen)
{
    return (hsh_purge_key(key, keylen, false));
}

void
hsh_fini(void)
{
    closing = true;
    for (unsigned i = 0; i < HSH_SHARDS; i++) {
        struct shard *sh = &shards[i];
        for (size_t b = 0; b < sh->nbuckets; b++) {
            struct objhead *oh;
            while ((oh = sh->buckets[b]) != NULL) {
                struct cobj *oc;
                while ((oc = oh->objs) != NULL) {
                    (void)unlink_obj(sh, oc);
                    hsh_deref(&oc);
                }
                oh_maybe_free(sh, oh);
            }
        }
        free(sh->buckets);
        AZ(pthread_mutex_destroy(&sh->mtx));
    }
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
    return (unlink_obj(sh, oc));
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
    oh = oh_find(sh, hash, key, keylen);
    if (oh != NULL) {
        for (oc = oh->objs; oc != NULL && ngone < ARRAY_LEN(gone); oc = next) {
            next = oc->next;
            if (oc->flags & COBJ_BUSY)
                continue;
            n++;
            if ((gone[ngone] = purge_one(sh, oc, soft, now)) != NULL)
                ngone++;
        }
        oh_maybe_free(sh, oh);
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
    struct shard *sh = &shards[oc->shard];
    struct objhead *oh;
    struct cobj *gone;

    OBJ_CHECK(oc, COBJ_MAGIC);
    AZ(pthread_mutex_lock(&sh->mtx));
    if (oc->flags & (COBJ_BUSY | COBJ_DEAD)) {
        AZ(pthread_mutex_unlock(&sh->mtx));
        return (false);
    }
    oh = oc->oh;
    gone = purge_one(sh, oc, soft, tim_real());
    if (gone != NULL)
        oh_maybe_free(sh, oh);
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
        struct shard *sh = &shards[cur->shard];

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
                    gone[ngone++] = unlink_obj(sh, oc);
                }
                if (ngone > before)
                    oh_maybe_free(sh, oh);
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
