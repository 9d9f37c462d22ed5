/*
 * The cache index: shards, objheads and their variants, Vary, lookup,
 * and the objects a persistent store brings back at startup.  Busy
 * objects (storing, streaming, publishing) are in hsh_busy.c, eviction
 * and purges in hsh_evict.c; the structures they share and the locking
 * rules are in hsh_priv.h.
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
#include "surogat/vio.h"
#include "surogat/gz.h"
#include "surogat/hsh.h"
#include "surogat/http.h"
#include "surogat/lfu.h"
#include "surogat/par.h"
#include "surogat/shd.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/ws.h"
#include "surogat/xkey.h"

#include "hsh_priv.h"

#define HSH_BUCKETS_MIN 256

struct shard hsh__shards[HSH_SHARDS];
static bool closing; /* hsh_fini: objects are forgotten, not freed from their store */

static size_t
bucket_of(const struct shard *sh, uint64_t hash)
{
    return ((size_t)(hash / HSH_SHARDS) & (sh->nbuckets - 1));
}

/* Every cached object costs this: keep it in its allocator size class. */
_Static_assert(sizeof(struct cobj) <= 192, "struct cobj grew past 192 bytes");
_Static_assert(offsetof(struct objhead, key) == 64, "struct objhead grew past 64 bytes");

int
hsh_init(void)
{
    hsh__wait_init();
    for (unsigned i = 0; i < HSH_SHARDS; i++) {
        AZ(pthread_mutex_init(&hsh__shards[i].mtx, NULL));
        AZ(pthread_cond_init(&hsh__shards[i].cond, NULL));
        hsh__shards[i].nbuckets = HSH_BUCKETS_MIN;
        hsh__shards[i].buckets = calloc(HSH_BUCKETS_MIN, sizeof *hsh__shards[i].buckets);
        AN(hsh__shards[i].buckets);
    }
    return (0);
}

static void
cobj_free(struct cobj *oc)
{
    /* Tags are read from the stored head: before the store may free it. */
    xkey_unindex(oc);
    ban_obj_free(oc);
    if (oc->flags & COBJ_COPY) {
        /* A copy that was published (no longer busy) counted in n_copy. */
        if (!(oc->flags & COBJ_BUSY)) {
            STAT_DEC(n_copy);
            STAT_ADD(copy_bytes, -(int64_t)oc->body.len);
        }
    } else {
        if (!(oc->flags & COBJ_HFM))
            hsh__copies_free(oc);
        STAT_DEC(n_object);
    }
    if (!oc->body.meta_stored) {
        free(oc->head);
        free(oc->vary);
    }
    if (closing)
        sto_body_release(&oc->body);
    else
        sto_body_free(&oc->body);
    OBJ_FREE(&oc);
}

void
hsh_deref(struct cobj **ocp)
{
    struct cobj *oc;

    OBJ_TAKE(oc, ocp, COBJ_MAGIC);
    if (__atomic_sub_fetch(&oc->refcnt, 1, __ATOMIC_ACQ_REL) == 0)
        cobj_free(oc);
}

/* ---- objheads and variants, under the shard lock ---- */

struct objhead *
hsh__oh_find(struct shard *sh, uint64_t hash, const char *key, size_t keylen)
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
    SRG_ASSERT(keylen < UINT32_MAX);
    oh = calloc(1, HSH_OH_SIZE(keylen));
    AN(oh);
    oh->magic = OBJHEAD_MAGIC;
    oh->hash = hash;
    memcpy(oh->key, key, keylen);
    oh->keylen = (uint32_t)keylen;
    b = bucket_of(sh, hash);
    oh->hnext = sh->buckets[b];
    sh->buckets[b] = oh;
    sh->nheads++;
    STAT_INC(n_objecthead);
    return (oh);
}

/* Free an objhead nobody needs: no objects, nobody waiting. */
void
hsh__oh_maybe_free(struct shard *sh, struct objhead *oh)
{
    struct objhead **pp;

    if (oh->objs != NULL || oh->nwaiting > 0 || oh->nstream > 0)
        return;
    for (pp = &sh->buckets[bucket_of(sh, oh->hash)]; *pp != oh; pp = &(*pp)->hnext)
        AN(*pp);
    *pp = oh->hnext;
    sh->nheads--;
    STAT_DEC(n_objecthead);
    OBJ_FREE(&oh);
}

/*
 * Unlink a variant from the index.  Returns it with the index's reference
 * still counted: the caller drops it with hsh_deref() after unlocking.
 */
struct cobj *
hsh__unlink_obj(struct shard *sh, struct cobj *oc)
{
    struct objhead *oh = oc->oh;
    struct cobj **pp;

    if (oc->flags & COBJ_COPY) {
        hsh__copies_unlink(sh, oc);
        if (!closing)
            sto_retire(&oc->body);
        oc->flags |= COBJ_DEAD;
        return (oc);
    }
    for (pp = &oh->objs; *pp != oc; pp = &(*pp)->next)
        AN(*pp);
    *pp = oc->next;
    oc->next = NULL;
    if (!(oc->flags & (COBJ_BUSY | COBJ_HFM)))
        hsh__copies_unlink(sh, oc);
    if (!(oc->flags & COBJ_BUSY)) {
        hsh__sieve_remove(sh, oc);
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
    static __thread char date_text[sizeof((struct shd_iter *)0)->date];
    size_t nl = strlen(name);
    struct shd_iter it;
    struct txt n, v;

    OBJ_CHECK(oc, COBJ_MAGIC);
    AN(oc->head);
    shd_iter_init(&it, (const unsigned char *)oc->head, oc->head_len);
    while (shd_next(&it, &n, &v)) {
        if (n.len != nl || strncasecmp(n.b, name, nl) != 0)
            continue;
        while (v.len > 0 && (*v.b == ' ' || *v.b == '\t')) {
            v.b++;
            v.len--;
        }
        if (v.b == it.date) {
            /* A Date or Expires kept as a number (shd.h): printed into the thread's buffer. */
            memcpy(date_text, it.date, sizeof date_text);
            v.b = date_text;
        }
        *val = v;
        return (true);
    }
    return (false);
}

void
hsh_head_set(struct cobj *oc, const char *text, size_t len)
{
    unsigned char *enc = malloc(shd_bound(len));
    size_t n;

    OBJ_CHECK(oc, COBJ_MAGIC);
    AN(enc);
    SRG_ASSERT(!oc->body.meta_stored);
    n = shd_encode(text, len, enc);
    SRG_ASSERT(n <= UINT32_MAX);
    /* Sized generously to encode; trimmed because it lives as long as the object. */
    free(oc->head);
    oc->head = realloc(enc, n);
    AN(oc->head);
    oc->head_len = (uint32_t)n;
}

size_t
hsh_head_size(const struct cobj *oc)
{
    OBJ_CHECK(oc, COBJ_MAGIC);
    AN(oc->head);
    return (shd_text_len((const unsigned char *)oc->head, oc->head_len));
}

size_t
hsh_head_copy(const struct cobj *oc, char *out)
{
    OBJ_CHECK(oc, COBJ_MAGIC);
    AN(oc->head);
    return (shd_decode((const unsigned char *)oc->head, oc->head_len, out));
}

bool
hsh_head_split(const struct cobj *oc, struct shd_head *h)
{
    OBJ_CHECK(oc, COBJ_MAGIC);
    AN(oc->head);
    return (shd_split((const unsigned char *)oc->head, oc->head_len, h));
}

const char *
hsh_head_text(const struct cobj *oc, struct ws *ws, size_t *len)
{
    size_t n = hsh_head_size(oc);
    char *p = ws_alloc(ws, n > 0 ? n : 1);

    if (p == NULL)
        return (NULL);
    *len = hsh_head_copy(oc, p);
    return (p);
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

/*
 * The value of field `name` of a request as Vary records and compares it:
 * as joined_value(), but Accept-Encoding reduced to the coding the client
 * prefers (gz_ae_norm()) -- a cache that does not negotiate codings itself
 * asks the backend with that alone (fetch_bereq.c), so requests that
 * reduce alike get the same response.
 */
static size_t
vary_value(const struct http *hp, const char *name, size_t nlen, char *out, size_t cap)
{
    const char *norm;

    if (nlen != strlen("Accept-Encoding") || strncasecmp(name, "Accept-Encoding", nlen) != 0)
        return (joined_value(hp, name, nlen, out, cap));
    norm = gz_ae_norm(hp);
    if (norm == NULL)
        return (0);
    memcpy(out, norm, strlen(norm)); /* a coding's name: far below cap */
    return (strlen(norm));
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
        got = vary_value(req, name, nlen, buf, sizeof buf);
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
            /*
             * With gzip support, a miss asks the backend for gzip whatever
             * the client sent, and each delivery gunzips for a client that
             * does not take it: the stored body does not depend on the
             * client's Accept-Encoding, so it must not split variants (one
             * copy serves everyone).  Leaving it out of the recorded values
             * makes vary_match() and hsh__same_vary() ignore it.
             */
            if (par.http_gzip_support && (size_t)(t - s) == strlen("Accept-Encoding") &&
                strncasecmp(s, "Accept-Encoding", (size_t)(t - s)) == 0)
                continue;
            n = vary_value(req, s, (size_t)(t - s), val, sizeof val);
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
    oc->form = HSH_FORM_UNKNOWN; /* until the fetch says */
    oc->refcnt = 2; /* the index's and the fetch's */
    oc->next = oh->objs;
    oh->objs = oc;
    STAT_INC(n_object);
    return (oc);
}

void
hsh__abs_deadline(struct timespec *ts, double seconds)
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
    double keep = !oc->has_validator ? 0
                  : oc->fresh.keep >= 0 ? (double)oc->fresh.keep
                                        : par.default_keep;

    if (oc->flags & COBJ_BANNED)
        return (true);
    return (now - oc->fresh.t_origin > oc->fresh.ttl + stale + keep);
}

/*
 * Whether the client's directives in qcc are why oc is not fresh for this
 * request (it is for one without them), and a revalidation forced by a
 * client already ran on this key within client_revalidate_interval (or
 * the interval is 0: client directives are ignored).  Otherwise the
 * caller's request becomes that interval's revalidation.  Shard lock held.
 */
static bool
client_reval_limited(struct objhead *oh, const struct cobj *oc, const struct cc *qcc,
                     double now)
{
    uint32_t now_ms = (uint32_t)(uint64_t)(now * 1e3);
    double ival = par.client_revalidate_interval;

    if (qcc == NULL || !(qcc->flags & CC_NO_CACHE || qcc->max_age >= 0 || qcc->min_fresh >= 0) ||
        fresh_decide(&oc->fresh, NULL, now) != FRESH_V_FRESH)
        return (false);
    if (ival > 0 && (double)(uint32_t)(now_ms - oh->t_client_reval) >= ival * 1e3) {
        oh->t_client_reval = now_ms;
        STAT_INC(cache_client_reval);
        return (false);
    }
    STAT_INC(cache_client_reval_limited);
    return (true);
}

static void
take_ref(struct cobj *oc)
{
    __atomic_add_fetch(&oc->refcnt, 1, __ATOMIC_RELAXED);
}

/* A lookup found oc usable: obj.hits.  Relaxed: deliveries read it without the lock. */
static void
count_hit(struct cobj *oc)
{
    __atomic_add_fetch(&oc->hits, 1, __ATOMIC_RELAXED);
}

/*
 * A lookup found the key's object usable (a hit, a stream, a marker that
 * says pass): let coalesce_rush more of its parked requests go, so that
 * each woken request wakes the next ones (hsh.h).
 */
static struct hsh_waiter *
rush_usable(struct shard *sh, struct objhead *oh)
{
    if (oh->wl_head == NULL)
        return (NULL);
    return (hsh__rush(sh, oh, par.coalesce_rush));
}

/* HSH_PASS: why, as RFC 9211's fwd= and detail=, for Cache-Status and the trace. */
static enum hsh_result
pass_why(struct hsh_stale *stale, const char *fwd, const char *detail)
{
    stale->fwd = fwd;
    stale->detail = detail;
    return (HSH_PASS);
}

/* hsh_lookup()'s work; *t_wait: tim_mono() when a wait on this thread began. */
static enum hsh_result
lookup(const char *key, size_t keylen, const struct http *req, const struct cc *qcc, double now,
       unsigned lflags, struct cobj **ocp, struct hsh_stale *stale, struct hsh_waiter *w,
       double *t_wait)
{
    uint64_t hash = key_hash(key, keylen);
    struct shard *sh = shard_of(hash);
    struct cobj *oc, *busy, *stream, *swr, *old, *dead[8];
    enum fresh_verdict v, old_v = FRESH_V_REVALIDATE;
    unsigned ndead = 0;
    struct objhead *oh;
    struct hsh_waiter *rushed = NULL;
    struct timespec ts;
    bool waited = w != NULL && w->deadline != 0; /* counted when it first parked */

    AN(ocp);
    AN(stale);
    *ocp = NULL;
    memset(stale, 0, sizeof *stale);
    if (par.tinylfu)
        lfu_touch(hash);
    AZ(pthread_mutex_lock(&sh->mtx));
    oh = hsh__oh_find(sh, hash, key, keylen);
    if (oh == NULL)
        oh = oh_new(sh, hash, key, keylen);
    for (;;) {
        busy = stream = swr = old = NULL;
        for (oc = oh->objs; oc != NULL; oc = oc->next) {
            if (oc->flags & COBJ_BUSY) {
                /*
                 * A fetch an invalidation overtook may bring back what was
                 * invalidated: nobody joins it, a request fetches alongside.
                 * Once its head is stored it is tested against the bans
                 * made since it began, as it would be once published.
                 */
                if (!(oc->flags & COBJ_OVERTAKEN) && (oc->flags & COBJ_STREAM) &&
                    ban_check_obj(oc, key, keylen))
                    hsh__overtake(oc);
                if (oc->flags & COBJ_OVERTAKEN)
                    continue;
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
                    rushed = rush_usable(sh, oh);
                    AZ(pthread_mutex_unlock(&sh->mtx));
                    hsh__wake(rushed);
                    STAT_INC(cache_hitmiss);
                    return (pass_why(stale, "uri-miss", "hit-for-miss"));
                }
                continue;
            }
            v = fresh_decide(&oc->fresh, qcc, now);
            if (v != FRESH_V_FRESH && v != FRESH_V_STALE_OK &&
                !(lflags & HSH_L_FORCE_REVALIDATE) && client_reval_limited(oh, oc, qcc, now))
                v = FRESH_V_FRESH;
            if (v == FRESH_V_FRESH || v == FRESH_V_STALE_OK) {
                take_ref(oc);
                oc->visited = true;
                count_hit(oc);
                rushed = rush_usable(sh, oh);
                AZ(pthread_mutex_unlock(&sh->mtx));
                hsh__wake(rushed);
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
        if (lflags & HSH_L_IGNORE_BUSY)
            busy = stream = NULL;
        if (busy != NULL && swr != NULL) {
            /* Grace: someone is already refreshing it; serve the stale copy now. */
            take_ref(swr);
            swr->visited = true;
            count_hit(swr);
            rushed = rush_usable(sh, oh);
            AZ(pthread_mutex_unlock(&sh->mtx));
            hsh__wake(rushed);
            STAT_INC(cache_hit_grace);
            *ocp = swr;
            return (HSH_HIT);
        }
        if (stream != NULL) {
            /* The fetch stores what we want: deliver it as it arrives. */
            take_ref(stream);
            count_hit(stream);
            stream->nreaders++;
            oh->nstream++;
            rushed = rush_usable(sh, oh);
            AZ(pthread_mutex_unlock(&sh->mtx));
            hsh__wake(rushed);
            if (!waited)
                STAT_INC(cache_coalesced);
            STAT_INC(cache_streamed);
            *ocp = stream;
            return (HSH_STREAM);
        }
        if (busy == NULL)
            break;
        /* Someone is fetching this key: wait for it rather than asking the backend too. */
        if (w != NULL) {
            /* Parked, without a thread: the fetch's events or the sweeper wake it. */
            if (waited && tim_mono() >= w->deadline) {
                AZ(pthread_mutex_unlock(&sh->mtx));
                STAT_INC(coalesce_timeout);
                return (pass_why(stale, "miss", "coalesce-timeout"));
            }
            if (!waited && oh->nwaiting >= par.coalesce_max_waiters) {
                AZ(pthread_mutex_unlock(&sh->mtx));
                STAT_INC(coalesce_overflow);
                return (pass_why(stale, "miss", "coalesce-full"));
            }
            if (!waited) {
                w->t_first = tim_mono();
                w->deadline = w->t_first + par.coalesce_timeout;
                STAT_INC(cache_coalesced);
            }
            hsh__park(sh, oh, w);
            AZ(pthread_mutex_unlock(&sh->mtx));
            return (HSH_BUSY);
        }
        if (oh->nwaiting >= par.coalesce_max_waiters) {
            AZ(pthread_mutex_unlock(&sh->mtx));
            STAT_INC(coalesce_overflow);
            return (pass_why(stale, "miss", "coalesce-full"));
        }
        if (!waited) {
            hsh__abs_deadline(&ts, par.coalesce_timeout);
            STAT_INC(cache_coalesced);
            STAT_INC(coalesce_on_thread);
            waited = true;
            *t_wait = tim_mono(); /* only a lookup that waits reads the clock */
        }
        oh->nwaiting++;
        vio_blocking();
        int rc = pthread_cond_timedwait(&sh->cond, &sh->mtx, &ts);
        oh->nwaiting--;
        if (rc == ETIMEDOUT) {
            AZ(pthread_mutex_unlock(&sh->mtx));
            STAT_INC(coalesce_timeout);
            return (pass_why(stale, "miss", "coalesce-timeout"));
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
        count_hit(swr);
    }
    stale->fwd = "uri-miss";
    for (oc = oh->objs; oc != NULL && ndead < ARRAY_LEN(dead);) {
        struct cobj *next = oc->next;
        if (!(oc->flags & (COBJ_BUSY | COBJ_HFM))) {
            if (!vary_match(oc, req))
                stale->fwd = stale->fwd[0] == 'u' ? "vary-miss" : stale->fwd;
            else
                stale->fwd = "miss"; /* ours, but past all use or banned */
        }
        if (oc != old && !(oc->flags & COBJ_BUSY) && vary_match(oc, req) && obj_dead(oc, now)) {
            STAT_ADD(n_expired, !(oc->flags & COBJ_BANNED));
            dead[ndead++] = hsh__unlink_obj(sh, oc);
        }
        oc = next;
    }
    if (old != NULL) {
        stale->fwd = "stale";
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

enum hsh_result
hsh_lookup(const char *key, size_t keylen, const struct http *req, const struct cc *qcc, double now,
           unsigned lflags, struct cobj **ocp, struct hsh_stale *stale, struct hsh_waiter *w)
{
    /* A parked request has waited since it first parked, across its lookups. */
    double t_wait = w != NULL && w->deadline != 0 ? w->t_first : 0;
    enum hsh_result r = lookup(key, keylen, req, qcc, now, lflags, ocp, stale, w, &t_wait);

    if (__builtin_expect(t_wait > 0, 0) && r != HSH_BUSY)
        stale->waited = tim_mono() - t_wait;
    return (r);
}

void
hsh_ref(struct cobj *oc)
{
    OBJ_CHECK(oc, COBJ_MAGIC);
    take_ref(oc);
}

/* ---- recovery and verification ---- */

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
    size_t tlen;

    (void)serial;
    if (m->attr_len != sizeof attr)
        return (-1);
    memcpy(&attr, m->attr, sizeof attr); /* the store promises no alignment */
    /*
     * Before version 4 heads were stored as text: such an object is
     * dropped (refetched when asked for), not read with the wrong format.
     * A head that is not a sound encoding goes too: every hit decodes it.
     */
    if (a->version != HSH_ATTR_VERSION ||
        !shd_check((const unsigned char *)m->head, m->head_len, &tlen))
        return (-1);
    /* Without its attributes (an ESI program) an object would be delivered wrong: it goes. */
    if (m->tail_len > 0 && !hsh__oa_sound(m->tail, m->tail_len))
        return (-1);
    OBJ_NEW(oc, COBJ_MAGIC);
    oc->form = a->form;
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
    oh = hsh__oh_find(sh, hash, m->key, m->key_len);
    if (oh == NULL)
        oh = oh_new(sh, hash, m->key, m->key_len);
    for (o = oh->objs; o != NULL; o = o->next) {
        if (!hsh__same_vary(o, oc))
            continue;
        if (o->fresh.t_origin >= oc->fresh.t_origin) {
            AZ(pthread_mutex_unlock(&sh->mtx));
            OBJ_FREE(&oc);
            return (-1);
        }
        gone = hsh__unlink_obj(sh, o);
        break;
    }
    oc->body = *b;
    oc->oh = oh;
    ban_obj_new(oc); /* bans do not outlive the process: it starts past all of them */
    oc->refcnt = 1;  /* the index's */
    oc->next = oh->objs;
    oh->objs = oc;
    hsh__sieve_insert(sh, oc);
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

void
hsh_fini(void)
{
    closing = true;
    hsh__wait_fini();
    for (unsigned i = 0; i < HSH_SHARDS; i++) {
        struct shard *sh = &hsh__shards[i];
        for (size_t b = 0; b < sh->nbuckets; b++) {
            struct objhead *oh;
            while ((oh = sh->buckets[b]) != NULL) {
                struct cobj *oc;
                while ((oc = oh->objs) != NULL) {
                    (void)hsh__unlink_obj(sh, oc);
                    hsh_deref(&oc);
                }
                hsh__oh_maybe_free(sh, oh);
            }
        }
        free(sh->buckets);
        AZ(pthread_cond_destroy(&sh->cond));
        AZ(pthread_mutex_destroy(&sh->mtx));
    }
}
