/*
 * Busy objects, from the fetch's side: binding one to a store, appending
 * its body, letting the requests that coalesced on it stream that body,
 * and publishing or abandoning it.
 *
 * Streaming: once its fetch calls hsh_stream_open(), a busy object has
 * readers -- requests that coalesced on it and deliver its body as it is
 * appended.  Each holds a reference to the object and counts in the
 * objhead's nstream, so neither goes away under it; the body of an
 * abandoned object stays until the last reader leaves (COBJ_ORPHAN).  The
 * writer publishes the readable length with a release store after the
 * bytes are in place and wakes sleeping readers (oh->nsleep) on the
 * objhead's condition variable.
 *
 * Locks: the object's shard lock (hsh_priv.h), not held while storing:
 * hsh_store_begin() and hsh_append() may evict from any shard to make
 * room.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <zlib.h>

#include "surogat/defs.h"
#include "surogat/vio.h"
#include "surogat/hsh.h"
#include "surogat/par.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/xkey.h"

#include "hsh_priv.h"

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

/* ---- storing ---- */

static void
attr_of(const struct cobj *oc, struct hsh_attr *a)
{
    memset(a, 0, sizeof *a);
    a->version = HSH_ATTR_VERSION;
    a->status = oc->status;
    a->fresh = oc->fresh;
    a->has_validator = oc->has_validator;
    a->form = oc->form;
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
        m = (struct sto_meta){ .key = oc->oh->key,
                               .key_len = oc->oh->keylen,
                               .head = oc->head,
                               .head_len = oc->head_len,
                               .vary = oc->vary,
                               .vary_len = oc->vary_len,
                               .attr = &attr,
                               .attr_len = sizeof attr,
                               .mem = sto_heap_cost(sizeof *oc) +
                                      sto_heap_cost(HSH_OH_SIZE(oc->oh->keylen)) };
        if (sto_open(&oc->body, &m) == 0)
            break;
        if (hsh__make_room(oc, &nuked) != 0) {
            oc->body.stv = 0;
            return (-1);
        }
        oc->body.stv = 0;
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

/* ---- attributes ---- */

static void
put_u32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t
get_u32(const unsigned char *p)
{
    return ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

bool
hsh__oa_sound(const void *tail, size_t len)
{
    const unsigned char *p = tail, *e;

    if (len < 8 || memcmp(p, HSH_OA_MAGIC, 4) != 0)
        return (false);
    e = p + len - 4;
    if (get_u32(e) != (uint32_t)crc32(0, p, (uInt)(len - 4)))
        return (false);
    for (p += 4; p < e;) {
        if (e - p < 5 || *p >= HSH_OA__N || get_u32(p + 1) > (size_t)(e - p - 5))
            return (false);
        p += 5 + get_u32(p + 1);
    }
    return (true);
}

/* Keep tail[0..len) with oc's body, evicting others to make room. */
static int
set_tail(struct cobj *oc, const void *tail, size_t len)
{
    unsigned nuked = 0;

    while (sto_set_tail(&oc->body, tail, len) != 0)
        if (hsh__make_room(oc, &nuked) != 0)
            return (-1);
    return (0);
}

int
hsh_oa_set(struct cobj *oc, const struct txt *oa)
{
    size_t len = 8;
    unsigned char *buf, *p;
    int rv;

    OBJ_CHECK(oc, COBJ_MAGIC);
    SRG_ASSERT(oc->flags & COBJ_BUSY);
    for (unsigned i = 0; i < HSH_OA__N; i++)
        if (oa[i].len > 0)
            len += 5 + oa[i].len;
    if (len == 8)
        return (0);
    buf = malloc(len);
    AN(buf);
    memcpy(buf, HSH_OA_MAGIC, 4);
    p = buf + 4;
    for (unsigned i = 0; i < HSH_OA__N; i++) {
        if (oa[i].len == 0)
            continue;
        SRG_ASSERT(oa[i].len <= UINT32_MAX);
        *p = (unsigned char)i;
        put_u32(p + 1, (uint32_t)oa[i].len);
        memcpy(p + 5, oa[i].b, oa[i].len);
        p += 5 + oa[i].len;
    }
    put_u32(p, (uint32_t)crc32(0, buf, (uInt)(len - 4)));
    rv = set_tail(oc, buf, len);
    free(buf);
    return (rv);
}

int
hsh_oa_copy(struct cobj *dst, const struct cobj *src)
{
    const void *tail;
    size_t len;

    OBJ_CHECK(dst, COBJ_MAGIC);
    OBJ_CHECK(src, COBJ_MAGIC);
    tail = sto_tail(&src->body, &len);
    return (tail == NULL ? 0 : set_tail(dst, tail, len));
}

bool
hsh_oa_get(const struct cobj *oc, enum hsh_oa a, struct txt *v)
{
    const unsigned char *p, *e;
    size_t len;

    OBJ_CHECK(oc, COBJ_MAGIC);
    p = sto_tail(&oc->body, &len);
    if (p == NULL)
        return (false);
    /* Sound: made here, or checked when a store gave it back (hsh_recover). */
    for (e = p + len - 4, p += 4; p < e; p += 5 + get_u32(p + 1)) {
        if (*p == a) {
            *v = (struct txt){ (const char *)p + 5, get_u32(p + 1) };
            return (true);
        }
    }
    return (false);
}

/* ---- streaming ---- */

void
hsh_stream_open(struct cobj *oc, uint64_t clen)
{
    struct hsh_waiter *woken;
    struct shard *sh;

    OBJ_CHECK(oc, COBJ_MAGIC);
    sh = shard_of(oc->oh->hash);
    oc->stream_clen = clen;
    /* Indexed before anyone reads it: a tag purge from now on overtakes it. */
    xkey_index(oc);
    AZ(pthread_mutex_lock(&sh->mtx));
    SRG_ASSERT(oc->flags & COBJ_BUSY);
    oc->flags |= COBJ_STREAM;
    AZ(pthread_cond_broadcast(&sh->cond));
    woken = hsh__rush(sh, oc->oh, par.coalesce_rush);
    AZ(pthread_mutex_unlock(&sh->mtx));
    hsh__wake(woken);
}

void
hsh_stream_join(struct cobj *oc)
{
    struct shard *sh;

    OBJ_CHECK(oc, COBJ_MAGIC);
    hsh_ref(oc);
    sh = shard_of(oc->oh->hash);
    AZ(pthread_mutex_lock(&sh->mtx));
    SRG_ASSERT(oc->flags & COBJ_BUSY);
    oc->nreaders++;
    oc->oh->nstream++;
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
    AZ(pthread_cond_broadcast(&sh->cond));
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
    hsh__abs_deadline(&ts, tmo);
    AZ(pthread_mutex_lock(&sh->mtx));
    SRG_ASSERT(oc->nreaders > 0);
    for (;;) {
        /* The end is decided under this lock, after the last byte was published. */
        if (!(oc->flags & COBJ_BUSY)) {
            /* Its stream fields are the SIEVE queue's now: its writer is done. */
            *avail = oc->body.len;
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
        vio_blocking();
        timed_out = pthread_cond_timedwait(&sh->cond, &sh->mtx, &ts) == ETIMEDOUT;
        __atomic_sub_fetch(&oh->nsleep, 1, __ATOMIC_RELAXED);
    }
    AZ(pthread_mutex_unlock(&sh->mtx));
    return (rv);
}

uint64_t
hsh_stream_clen(struct cobj *oc)
{
    struct shard *sh;
    uint64_t n;

    OBJ_CHECK(oc, COBJ_MAGIC);
    sh = shard_of(oc->oh->hash);
    AZ(pthread_mutex_lock(&sh->mtx));
    if (oc->flags & COBJ_BUSY)
        n = oc->stream_clen;
    else
        n = oc->body_complete ? oc->body.len : UINT64_MAX;
    AZ(pthread_mutex_unlock(&sh->mtx));
    return (n);
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
    hsh__oh_maybe_free(sh, oh);
    AZ(pthread_mutex_unlock(&sh->mtx));
    /* Nobody can attach to an abandoned object: its body is ours alone now. */
    if (free_body)
        body_drop(oc);
    hsh_deref(ocp);
}

/* ---- the body ---- */

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
        if (hsh__make_room(oc, &nuked) != 0)
            return (-1);
    }
}

/* ---- publishing ---- */

void
hsh__overtake(struct cobj *oc)
{
    SRG_ASSERT(oc->flags & COBJ_BUSY);
    if (oc->flags & COBJ_OVERTAKEN)
        return;
    oc->flags |= COBJ_OVERTAKEN;
    STAT_INC(cache_overtaken);
}

void
hsh_overtake(struct cobj *oc)
{
    struct shard *sh;

    OBJ_CHECK(oc, COBJ_MAGIC);
    sh = shard_of(oc->oh->hash);
    AZ(pthread_mutex_lock(&sh->mtx));
    hsh__overtake(oc);
    AZ(pthread_mutex_unlock(&sh->mtx));
}

void
hsh_unbusy(struct cobj **ocp)
{
    struct cobj *oc = *ocp, *o, *next, *old[8], *gone = NULL;
    struct hsh_waiter *woken;
    unsigned nold = 0;
    struct objhead *oh;
    struct shard *sh;

    OBJ_CHECK(oc, COBJ_MAGIC);
    oh = oc->oh;
    sh = shard_of(oh->hash);
    /*
     * Indexed before it is visible: a tag purge from now on finds it.  One
     * that streamed was indexed then (hsh_stream_open); indexing finds no
     * tag a second time in an untagged one.
     */
    if (oc->xkey == NULL)
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
    if (oc->flags & COBJ_OVERTAKEN) {
        /*
         * Never published, so never sealed (a persistent store does not
         * bring it back): unlinked as the busy object it is, it goes with
         * the last of its readers, who read it to the end.
         */
        gone = hsh__unlink_obj(sh, oc);
        oc->flags &= ~(COBJ_BUSY | COBJ_STREAM);
    } else {
        /* Older variants for the same request are superseded. */
        for (o = oh->objs; o != NULL && nold < ARRAY_LEN(old); o = next) {
            next = o->next;
            if (o != oc && !(o->flags & COBJ_BUSY) && hsh__same_vary(o, oc))
                old[nold++] = hsh__unlink_obj(sh, o);
        }
        oc->flags &= ~(COBJ_BUSY | COBJ_STREAM);
        sto_seal(&oc->body);
        hsh__sieve_insert(sh, oc);
    }
    AZ(pthread_cond_broadcast(&sh->cond));
    woken = hsh__rush(sh, oh, par.coalesce_rush);
    if (gone != NULL)
        hsh__oh_maybe_free(sh, oh);
    AZ(pthread_mutex_unlock(&sh->mtx));
    hsh__wake(woken);
    while (nold > 0)
        hsh_deref(&old[--nold]);
    if (gone != NULL)
        hsh_deref(&gone);
    hsh_deref(ocp);
}

void
hsh_abandon(struct cobj **ocp, double hfm_ttl)
{
    struct cobj *oc = *ocp, *gone = NULL;
    struct hsh_waiter *woken;
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
        hsh__sieve_insert(sh, oc);
    } else {
        gone = hsh__unlink_obj(sh, oc);
        oc->flags &= ~(COBJ_BUSY | COBJ_STREAM);
    }
    /* A marker holds no body: it goes now, or with the last reader still sending it. */
    if (read)
        oc->flags |= COBJ_ORPHAN;
    AZ(pthread_cond_broadcast(&sh->cond));
    /* The first woken fetches again, or all pass on the marker, rushing the rest. */
    woken = hsh__rush(sh, oh, par.coalesce_rush);
    if (gone != NULL)
        hsh__oh_maybe_free(sh, oh);
    AZ(pthread_mutex_unlock(&sh->mtx));
    hsh__wake(woken);
    if (!read)
        body_drop(oc);
    if (gone != NULL)
        hsh_deref(&gone);
    hsh_deref(ocp);
}
