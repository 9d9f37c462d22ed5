/*
 * Recovery of the file store: at startup, find the objects a previous run
 * left in the file (see the top of sto_file.c for the layout and the order
 * of writes this relies on).  Three passes, reading only headers and
 * records: walk the extents, collecting sealed records and fragments;
 * claim for each record the fragments of its body, dropping incomplete
 * objects; then rebuild the free space from what no live extent covers.
 * Each live object is then offered to the index, which may refuse it
 * (expired, superseded).
 *
 * Sockets of the previous run may still hold pages of the file (a local
 * client that has not read its response yet): what that run held
 * (SF_HELD), and what it may have been sending when it stopped -- records
 * retired or dropped, fragments no record claims, bodies the index
 * refuses -- is held again rather than freed, when it owns its pages as
 * everything sent from the file does (sto_file.c).
 *
 * Runs once per store (st->recovered), through sto_recover(): at startup
 * that is hsh_recover(), before any worker starts.
 */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <zlib.h>

#include "surogat/defs.h"
#include "surogat/ext.h"
#include "surogat/log.h"
#include "surogat/stat.h"

#include "sto_priv.h"
#include "sto_file_priv.h"

struct sf_item {
    uint64_t start;
    uint64_t serial;
    uint64_t len; /* SF_FRAG: body bytes */
    uint32_t units;
    uint32_t aux; /* SF_FRAG: index; records: claimed fragments */
};

struct sf_vec {
    struct sf_item *v;
    size_t n, cap;
};

static void
vec_push(struct sf_vec *vec, const struct sf_item *it)
{
    if (vec->n == vec->cap) {
        vec->cap = vec->cap == 0 ? 1024 : vec->cap * 2;
        vec->v = realloc(vec->v, vec->cap * sizeof *vec->v);
        AN(vec->v);
    }
    vec->v[vec->n++] = *it;
}

static int
by_serial(const void *a, const void *b)
{
    const struct sf_item *x = a, *y = b;

    if (x->serial != y->serial)
        return (x->serial < y->serial ? -1 : 1);
    /* Fragments by their index; the flag beside it does not order them. */
    return ((x->aux & ~SF_FRAG_PAGE) < (y->aux & ~SF_FRAG_PAGE)
                ? -1
                : (x->aux & ~SF_FRAG_PAGE) > (y->aux & ~SF_FRAG_PAGE));
}

static int
by_start(const void *a, const void *b)
{
    const struct sf_item *x = a, *y = b;

    return (x->start < y->start ? -1 : x->start > y->start);
}

static bool
hdr_ok(const struct sf_store *st, uint64_t u, const struct sf_hdr *h)
{
    switch (h->magic) {
    case SF_FREE:
    case SF_BUSY:
    case SF_OBJ:
    case SF_FRAG:
    case SF_DEAD:
    case SF_HELD:
        break;
    default:
        return (false);
    }
    return (h->units > 0 && u + h->units <= st->nunits && h->hcrc == sf__hdr_crc(st, h));
}

/* A sealed record that is whole in itself: lengths inside its extent, checksum right. */
static bool
rec_ok(const struct sf_store *st, uint64_t u, const struct sf_hdr *h)
{
    const struct sf_rec *r = rec_of(st, u);
    uint64_t room = (uint64_t)h->units * SF_UNIT, meta;

    if (room < sizeof *h + sizeof *r)
        return (false);
    meta = sizeof *h + sizeof *r + (uint64_t)r->key_len + r->head_len + r->vary_len + r->attr_len;
    meta = (meta + 7) & ~(uint64_t)7;
    /* The inline body follows the meta, or the next page (a record that owns its pages). */
    if (h->len != meta && h->len != (meta + st->pg - 1) / st->pg * st->pg)
        return (false);
    meta = h->len;
    if (meta > room || r->inline_len > room - meta ||
        r->inline_len > r->body_len || (r->nfrags == 0 && r->inline_len != r->body_len) ||
        r->key_len == 0 || r->head_len == 0)
        return (false);
    return (r->rcrc == sf__rec_crc(r));
}

/* An extent the previous run may have sent from: kept for the quarantine. */
static void
suspect(const struct sf_store *st, struct sf_vec *held, const struct sf_item *it)
{
    if (st->zc && page_excl(st, it->start, it->units & 0x7fffffffu))
        vec_push(held, it);
}

/*
 * Pass 1: walk the headers; sealed records and fragments are collected,
 * and extents the previous run held or may have sent from; the rest is
 * free.
 */
static void
walk(struct sf_store *st, uint64_t limit, struct sf_vec *recs, struct sf_vec *frags,
     struct sf_vec *held, uint64_t *resyncs)
{
    uint64_t u = 0;

    while (u < limit) {
        const struct sf_hdr *h = hdr_at(st, u);
        struct sf_item it;

        if (!hdr_ok(st, u, h) || u + h->units > limit) {
            u++; /* torn or foreign: look for the next header unit by unit */
            (*resyncs)++;
            continue;
        }
        it = (struct sf_item){ u, h->serial, h->len, h->units, h->aux };
        if (h->magic == SF_OBJ && rec_ok(st, u, h)) {
            it.aux = 0;
            vec_push(recs, &it);
        } else if (h->magic == SF_FRAG && h->units < 0x80000000u) {
            vec_push(frags, &it);
        } else if (h->magic != SF_FREE && h->magic != SF_BUSY) {
            suspect(st, held, &it); /* held, retired, or a record that does not hold */
        }
        u += h->units;
    }
}

/*
 * Pass 2: a record lives if fragments 0..n-1 of its serial are all there
 * and with the inline part add up to its body.  Returns how many died.
 */
static size_t
claim(struct sf_store *st, struct sf_vec *recs, struct sf_vec *frags, struct sf_vec *held)
{
    size_t dropped = 0, f = 0;

    if (recs->n > 0)
        qsort(recs->v, recs->n, sizeof *recs->v, by_serial);
    if (frags->n > 0)
        qsort(frags->v, frags->n, sizeof *frags->v, by_serial);
    for (size_t i = 0; i < recs->n; i++) {
        struct sf_item *rec = &recs->v[i];
        const struct sf_rec *r = rec_of(st, rec->start);
        uint64_t sum = r->inline_len;
        size_t first;
        uint32_t k = 0;

        while (f < frags->n && frags->v[f].serial < rec->serial)
            f++;
        first = f;
        while (f < frags->n && frags->v[f].serial == rec->serial) {
            const struct sf_item *fr = &frags->v[f];
            uint64_t lead = fr->aux & SF_FRAG_PAGE ? st->pg : sizeof(struct sf_hdr);
            if ((fr->aux & ~SF_FRAG_PAGE) != k || lead >= (uint64_t)fr->units * SF_UNIT ||
                fr->len > (uint64_t)fr->units * SF_UNIT - lead)
                break;
            sum += frags->v[f].len;
            k++;
            f++;
        }
        /* The tail sorts after the body's fragments (SF_TAIL_AUX), and must be whole. */
        if (r->tail_len > 0 && f < frags->n && frags->v[f].serial == rec->serial &&
            frags->v[f].aux == SF_TAIL_AUX && frags->v[f].len == r->tail_len &&
            sizeof(struct sf_hdr) + (uint64_t)r->tail_len <= (uint64_t)frags->v[f].units * SF_UNIT)
            f++;
        else if (r->tail_len > 0)
            k = UINT32_MAX; /* missing or torn: the object dies */
        if (k != r->nfrags || sum != r->body_len ||
            (i + 1 < recs->n && recs->v[i + 1].serial == rec->serial) ||
            (i > 0 && recs->v[i - 1].serial == rec->serial)) {
            suspect(st, held, rec);
            rec->units = 0; /* dead: its extent and fragments become free */
            dropped++;
            continue;
        }
        for (size_t j = first; j < f; j++)
            frags->v[j].units |= 0x80000000u; /* claimed (units fit in 31 bits: checked) */
        rec->aux = (uint32_t)first;
    }
    return (dropped);
}

/*
 * Pass 3: the free space is everything no live extent covers, but for the
 * extents held again (marked in the list by the top bit of units).  Under
 * st->mtx.
 */
static void
rebuild_free(struct stv *stv, const struct sf_vec *recs, const struct sf_vec *frags,
             struct sf_vec *held)
{
    struct sf_store *st = stv->priv;
    struct sf_vec live = { 0 };
    uint64_t u = 0;

    for (size_t i = 0; i < recs->n; i++)
        if (recs->v[i].units > 0)
            vec_push(&live, &recs->v[i]);
    for (size_t i = 0; i < frags->n; i++) {
        struct sf_item it = frags->v[i];
        if (it.units & 0x80000000u) {
            it.units &= 0x7fffffffu;
            vec_push(&live, &it);
        } else {
            suspect(st, held, &it); /* a fragment of no live object */
        }
    }
    for (size_t i = 0; i < held->n; i++) {
        struct sf_item it = held->v[i];
        it.units |= 0x80000000u; /* live items have this bit clear */
        vec_push(&live, &it);
    }
    if (live.n > 0)
        qsort(live.v, live.n, sizeof *live.v, by_start);
    for (size_t i = 0; i <= live.n; i++) {
        uint64_t end = i < live.n ? live.v[i].start : st->nunits;
        if (end > u) {
            sf__write_free(st, u, end - u);
            ext_put(st->ext, u, end - u, NULL, NULL);
        }
        if (i < live.n) {
            uint32_t units = live.v[i].units & 0x7fffffffu;
            if (live.v[i].units & 0x80000000u)
                sf__hold(stv, live.v[i].start, units, true);
            u = live.v[i].start + units;
        }
    }
    free(live.v);
}

/* The body of a live record, as it was written. */
static void
rebuild_body(struct stv *stv, const struct sf_item *rec, const struct sf_vec *frags,
             struct sto_body *b, struct sto_meta *m)
{
    struct sf_store *st = stv->priv;
    const struct sf_rec *r = rec_of(st, rec->start);
    const struct sf_hdr *h = hdr_at(st, rec->start);
    const char *p = (const char *)(r + 1);
    struct sf_obj *o = calloc(1, sizeof *o);

    AN(o);
    memset(b, 0, sizeof *b);
    memset(m, 0, sizeof *m);
    m->attr = p;
    m->attr_len = r->attr_len;
    m->key = p += r->attr_len;
    m->key_len = r->key_len;
    m->head = p += r->key_len;
    m->head_len = r->head_len;
    m->vary = p += r->head_len;
    m->vary_len = r->vary_len;
    o->rec = rec->start;
    o->rec_units = rec->units;
    o->nfrags = r->nfrags;
    o->serial = rec->serial;
    o->crc = r->body_crc;
    o->meta_len = (uint32_t)h->len;
    o->sealed = true;
    o->sent = true; /* the previous run may have: held when freed, if it owns its pages */
    b->stv = stv->id;
    b->priv = o;
    b->meta_stored = true;
    b->verified = false;
    b->len = r->body_len;
    b->bytes = (uint64_t)rec->units * SF_UNIT;
    if (r->tail_len > 0) {
        /* Claimed right after the body's fragments (claim()). */
        const struct sf_item *t = &frags->v[rec->aux + r->nfrags];
        o->tail_start = t->start;
        o->tail_units = t->units & 0x7fffffffu;
        o->tail_len = r->tail_len;
        m->tail = unit_ptr(st, t->start) + sizeof(struct sf_hdr);
        m->tail_len = r->tail_len;
        b->bytes += (uint64_t)o->tail_units * SF_UNIT;
    }
    if (r->inline_len > 0) {
        struct sf_seg *fs = sf__seg_new(rec->start, rec->units, unit_ptr(st, rec->start) + h->len,
                                        r->inline_len, true);
        fs->seg.len = r->inline_len;
        sf__seg_link(b, fs);
    }
    for (uint32_t k = 0; k < r->nfrags; k++) {
        const struct sf_item *fr = &frags->v[rec->aux + k];
        uint32_t units = fr->units & 0x7fffffffu;
        size_t lead = fr->aux & SF_FRAG_PAGE ? st->pg : sizeof(struct sf_hdr);
        struct sf_seg *fs = sf__seg_new(fr->start, units, unit_ptr(st, fr->start) + lead,
                                        (size_t)units * SF_UNIT - lead, false);
        fs->seg.len = fr->len;
        sf__seg_link(b, fs);
        b->bytes += (uint64_t)units * SF_UNIT;
    }
}

void
sf__recover(struct stv *stv, sto_recover_f *cb)
{
    struct sf_store *st = stv->priv;
    struct sf_vec recs = { 0 }, frags = { 0 }, held = { 0 };
    uint64_t resyncs = 0, max_serial = 0, kept = 0, refused = 0;
    size_t dropped;

    if (st->recovered)
        return;
    st->recovered = true;
    (void)madvise(st->map, st->size, MADV_SEQUENTIAL);
    walk(st, st->nunits, &recs, &frags, &held, &resyncs);
    dropped = claim(st, &recs, &frags, &held);
    AZ(pthread_mutex_lock(&st->mtx));
    rebuild_free(stv, &recs, &frags, &held);
    AZ(pthread_mutex_unlock(&st->mtx));
    for (size_t i = 0; i < recs.n; i++) {
        if (recs.v[i].units == 0)
            continue;
        struct sto_body b;
        struct sto_meta m;
        rebuild_body(stv, &recs.v[i], &frags, &b, &m);
        AZ(sto__charge(stv, b.bytes));
        if (recs.v[i].serial > max_serial)
            max_serial = recs.v[i].serial;
        if (cb(&m, &b, recs.v[i].serial) == 0) {
            kept++;
        } else {
            refused++;
            sf__free(stv, &b);
        }
    }
    (void)madvise(st->map, st->size, MADV_NORMAL);
    __atomic_store_n(&st->serial, max_serial + 1, __ATOMIC_RELAXED);
    AZ(pthread_mutex_lock(&st->mtx));
    sf__frag_gauge(st);
    AZ(pthread_mutex_unlock(&st->mtx));
    STAT_ADD(sto_recovered, kept);
    STAT_ADD(sto_recover_dropped, dropped);
    log_msg(LOG_INFO,
            "%s: recovered %llu objects (%llu expired or superseded, %zu incomplete or "
            "corrupt dropped, %llu units resynchronised)",
            st->path, (unsigned long long)kept, (unsigned long long)refused, dropped,
            (unsigned long long)resyncs);
    free(recs.v);
    free(frags.v);
    free(held.v);
}
