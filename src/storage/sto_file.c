/*
 * The file store (-s file,PATH,SIZE): objects in a memory-mapped file,
 * delivered straight from the mapping, and found again after a restart
 * or a crash of the daemon.
 *
 * Layout.  A superblock (magic, version, size, a random salt), then the
 * data area in units of SF_UNIT bytes, tiled by extents.  Every extent
 * starts with a header: what it is (free, busy, a sealed object record,
 * a fragment of an object's body, a dead record), its length in units,
 * and a checksum of the header keyed with the salt.  An object is a
 * record extent -- header, record (lengths and checksums), attr, key,
 * stored head, Vary values, then as much of the body as fits -- plus, for
 * bodies that outgrow it, fragment extents numbered in body order.
 *
 * Crash safety comes from the order of writes, not from a journal.  The
 * mapping is shared, so after kill -9 the file holds exactly what memory
 * held.  A record becomes an object by the last write of its seal, the
 * magic, after its fragments, lengths and checksums are in place; an
 * object leaves (retire, free) by overwriting that magic first.  A split
 * writes the header of the free rest before the header of the part taken,
 * so at every instant the headers tile the area.  Recovery walks the
 * headers, keeps sealed records whose record checksum holds and whose
 * fragments are all there, and frees everything else; body checksums are
 * checked on first use (sto_verify), so startup reads only the headers.
 * The salt makes a header that an origin smuggled into a body useless
 * should recovery ever have to resynchronise past a torn header.
 *
 * After a power loss, pages that never reached the disk fail their
 * checksums and those objects are dropped: the store never promises
 * durability, only that nothing corrupt is served.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "surogat/defs.h"
#include "surogat/ext.h"
#include "surogat/log.h"
#include "surogat/num.h"
#include "surogat/sb.h"
#include "surogat/stat.h"

#include "sto_priv.h"

#define SF_UNIT    256u
#define SF_DATA    4096u              /* the superblock's room */
#define SF_EXT_MAX (8u * 1024 * 1024) /* the longest extent a body asks for */
#define SF_CHUNK   (16u * 1024)       /* a body of unknown length starts with this */
#define SF_VERSION 1u
#define SF_MAGIC   "surogat-store\n"

enum sf_magic {
    SF_FREE = 0x5346f4eeu,
    SF_BUSY = 0x5346b057u, /* being written: free space to recovery */
    SF_OBJ = 0x53460b1eu,  /* a sealed object record */
    SF_FRAG = 0x5346f7a9u, /* a fragment of a sealed object's body */
    SF_DEAD = 0x5346deadu, /* a record retired from the index */
};

struct sf_super {
    char magic[16];
    uint32_t version;
    uint32_t unit;
    uint64_t size;
    uint64_t salt;
    uint32_t crc; /* of the fields above */
};

struct sf_hdr {
    uint32_t magic;  /* enum sf_magic; not in hcrc, so it can flip alone */
    uint32_t hcrc;   /* of the salt and the fields below */
    uint32_t units;  /* extent length */
    uint32_t aux;    /* SF_FRAG: index in the body */
    uint64_t serial; /* SF_OBJ, SF_FRAG: the object */
    uint64_t len;    /* SF_FRAG: body bytes; SF_OBJ: bytes before the inline body */
};

struct sf_rec {
    uint32_t rcrc;     /* of this record (rcrc 0) and the attr, key, head and vary after it */
    uint32_t body_crc; /* of the whole body */
    uint32_t key_len;
    uint32_t head_len;
    uint32_t vary_len;
    uint32_t attr_len;
    uint32_t nfrags;
    uint32_t pad;
    uint64_t body_len;
    uint64_t inline_len; /* body bytes in the record extent */
};

struct sf_store {
    int fd;
    char *path;
    char *map;
    uint64_t size;   /* of the file */
    uint64_t nunits; /* in the data area */
    uint64_t salt;
    uint64_t serial; /* atomic: the next object's */
    pthread_mutex_t mtx; /* the allocator and the headers of free space */
    struct ext_alloc *ext;
    uint64_t frag_bytes; /* last value added to the sto_frag_bytes gauge */
    bool recovered;      /* the allocator knows the free space (recovery ran, or nothing to recover) */
};

/* A body segment: its extent, so it can be sealed and freed. */
struct sf_seg {
    struct sto_seg seg;
    uint64_t start;
    uint32_t units;
    bool in_record; /* the inline part of the record extent */
};

/* b->priv of a file-stored body. */
struct sf_obj {
    uint64_t rec;  /* first unit of the record extent */
    uint32_t rec_units;
    uint32_t nfrags;
    uint64_t serial;
    uint32_t crc;       /* the body's: running while written, expected once recovered */
    uint32_t meta_len;  /* record extent bytes before the inline body */
    bool sealed;
};

static uint64_t
units_for(uint64_t bytes)
{
    return ((bytes + SF_UNIT - 1) / SF_UNIT);
}

static char *
unit_ptr(const struct sf_store *st, uint64_t u)
{
    return (st->map + SF_DATA + u * SF_UNIT);
}

static struct sf_hdr *
hdr_at(const struct sf_store *st, uint64_t u)
{
    return ((struct sf_hdr *)(void *)unit_ptr(st, u));
}

static uint32_t
hdr_crc(const struct sf_store *st, const struct sf_hdr *h)
{
    uLong c = crc32(0L, (const Bytef *)&st->salt, sizeof st->salt);

    return ((uint32_t)crc32(c, (const Bytef *)&h->units,
                            (uInt)(sizeof *h - offsetof(struct sf_hdr, units))));
}

/* Write a header; the magic goes last, once the fields it vouches for are in place. */
static void
hdr_write(struct sf_store *st, uint64_t u, uint32_t magic, uint32_t units, uint32_t aux,
          uint64_t serial, uint64_t len)
{
    struct sf_hdr *h = hdr_at(st, u);

    h->units = units;
    h->aux = aux;
    h->serial = serial;
    h->len = len;
    h->hcrc = hdr_crc(st, h);
    __atomic_store_n(&h->magic, magic, __ATOMIC_RELEASE);
}

static void
set_magic(struct sf_hdr *h, uint32_t magic)
{
    __atomic_store_n(&h->magic, magic, __ATOMIC_RELEASE);
}

/* Headers for a free run; a run longer than a header can say gets several. */
static void
write_free(struct sf_store *st, uint64_t u, uint64_t n)
{
    while (n > 0) {
        uint32_t k = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
        hdr_write(st, u, SF_FREE, k, 0, 0, 0);
        u += k;
        n -= k;
    }
}

/* The gauge of free bytes outside the largest free extent, under st->mtx. */
static void
frag_gauge(struct sf_store *st)
{
    struct ext_stats es;
    uint64_t v;

    ext_stats(st->ext, &es);
    v = (es.free_units - es.largest) * SF_UNIT;
    STAT_ADD(sto_frag_bytes, v - st->frag_bytes);
    st->frag_bytes = v;
}

/*
 * An extent of want units, or at least min: marked busy, charged.  The
 * free rest of a split gets its header before the part taken does.
 */
static uint64_t
sf_alloc(struct stv *stv, uint64_t want, uint64_t min, uint64_t *start)
{
    struct sf_store *st = stv->priv;
    uint64_t got, rest;

    AZ(pthread_mutex_lock(&st->mtx));
    got = ext_get(st->ext, want, min, start);
    if (got > 0) {
        rest = ext_free_at(st->ext, *start + got);
        if (rest > 0)
            write_free(st, *start + got, rest);
        hdr_write(st, *start, SF_BUSY, (uint32_t)got, 0, 0, 0);
        frag_gauge(st);
    }
    AZ(pthread_mutex_unlock(&st->mtx));
    if (got > 0)
        AZ(sto__charge(stv, got * SF_UNIT)); /* the allocator is the real limit */
    return (got);
}

/* Free an extent: its own magic first, so it can never come back, then the merged run's. */
static void
sf_release_ext(struct stv *stv, uint64_t start, uint64_t units)
{
    struct sf_store *st = stv->priv;
    uint64_t ms, mn;

    AZ(pthread_mutex_lock(&st->mtx));
    set_magic(hdr_at(st, start), SF_FREE);
    ext_put(st->ext, start, units, &ms, &mn);
    write_free(st, ms, mn);
    frag_gauge(st);
    AZ(pthread_mutex_unlock(&st->mtx));
    sto__credit(stv, units * SF_UNIT);
}

static struct sf_seg *
seg_new(uint64_t start, uint64_t units, char *data, size_t cap, bool in_record)
{
    struct sf_seg *fs = calloc(1, sizeof *fs);

    AN(fs);
    fs->seg.data = data;
    fs->seg.cap = cap;
    fs->start = start;
    fs->units = (uint32_t)units;
    fs->in_record = in_record;
    return (fs);
}

static void
seg_link(struct sto_body *b, struct sf_seg *fs)
{
    if (b->last != NULL)
        b->last->next = &fs->seg;
    else
        b->first = &fs->seg;
    b->last = &fs->seg;
}

/* ---- writing an object ---- */

static size_t
meta_bytes(const struct sto_meta *m)
{
    size_t n = sizeof(struct sf_hdr) + sizeof(struct sf_rec) + m->key_len + m->head_len +
               m->vary_len + m->attr_len;

    return ((n + 7) & ~(size_t)7);
}

static int
sf_open(struct stv *stv, struct sto_body *b, struct sto_meta *m)
{
    struct sf_store *st = stv->priv;
    size_t mlen = meta_bytes(m);
    uint64_t body = b->size_hint > 0 ? b->size_hint : SF_CHUNK, start, got;
    struct sf_rec *r;
    struct sf_obj *o;
    char *p;

    if (body > SF_EXT_MAX)
        body = SF_EXT_MAX;
    if (m->key_len > UINT32_MAX / 4 || m->head_len > UINT32_MAX / 4 ||
        mlen > SF_EXT_MAX)
        return (-1);
    got = sf_alloc(stv, units_for(mlen + body), units_for(mlen), &start);
    if (got == 0)
        return (-1);
    o = calloc(1, sizeof *o);
    AN(o);
    o->rec = start;
    o->rec_units = (uint32_t)got;
    o->serial = __atomic_fetch_add(&st->serial, 1, __ATOMIC_RELAXED);
    o->meta_len = (uint32_t)mlen;
    o->crc = (uint32_t)crc32(0L, Z_NULL, 0);
    b->priv = o;
    b->bytes = got * SF_UNIT;
    /* The record's lengths now; its checksums and the magic at the seal. */
    p = unit_ptr(st, start);
    r = (struct sf_rec *)(void *)(p + sizeof(struct sf_hdr));
    memset(r, 0, sizeof *r);
    r->key_len = (uint32_t)m->key_len;
    r->head_len = (uint32_t)m->head_len;
    r->vary_len = (uint32_t)m->vary_len;
    r->attr_len = (uint32_t)m->attr_len;
    p = (char *)(r + 1);
#define COPY(f)                                         \
    do {                                                \
        if (m->f##_len > 0)                             \
            memcpy(p, m->f, m->f##_len);                \
        m->f = (void *)p;                               \
        p += m->f##_len;                                \
    } while (0)
    COPY(attr); /* first: it starts 8-aligned, after the record */
    COPY(key);
    COPY(head);
    COPY(vary);
#undef COPY
    b->meta_stored = true;
    if (got * SF_UNIT > mlen)
        seg_link(b, seg_new(start, got, unit_ptr(st, start) + mlen, got * SF_UNIT - mlen, true));
    return (0);
}

static int
sf_append(struct stv *stv, struct sto_body *b, const void *p, size_t len)
{
    struct sf_store *st = stv->priv;
    struct sf_obj *o = b->priv;
    struct sto_seg *s;
    uint64_t want, start, got;
    size_t n;

    AN(o);
    while (len > 0) {
        s = b->last;
        if (s == NULL || s->len == s->cap) {
            /* The announced length sizes the fragment exactly; otherwise they double. */
            if (b->size_hint > b->len)
                want = b->size_hint - b->len;
            else
                want = b->len > SF_CHUNK ? b->len : SF_CHUNK;
            if (want > SF_EXT_MAX)
                want = SF_EXT_MAX;
            if (want < len && len <= SF_EXT_MAX)
                want = len;
            got = sf_alloc(stv, units_for(sizeof(struct sf_hdr) + want),
                           units_for(sizeof(struct sf_hdr) + SRG_MIN(want, 4096)), &start);
            if (got == 0)
                return (-1);
            seg_link(b, seg_new(start, got, unit_ptr(st, start) + sizeof(struct sf_hdr),
                                got * SF_UNIT - sizeof(struct sf_hdr), false));
            o->nfrags++;
            b->bytes += got * SF_UNIT;
            s = b->last;
        }
        n = s->cap - s->len;
        if (n > len)
            n = len;
        memcpy(s->data + s->len, p, n);
        o->crc = (uint32_t)crc32(o->crc, (const Bytef *)p, (uInt)n);
        /* Release: a reader that sees the new length sees the bytes. */
        __atomic_store_n(&s->len, s->len + n, __ATOMIC_RELEASE);
        b->len += n;
        p = (const char *)p + n;
        len -= n;
    }
    return (0);
}

/* Give back the whole units past the last byte; the bytes before never move. */
static void
sf_trim(struct stv *stv, struct sto_body *b)
{
    struct sf_store *st = stv->priv;
    struct sf_obj *o = b->priv;
    struct sf_seg *fs;
    uint64_t keep, ms, mn, lead;

    if (o == NULL || o->sealed)
        return; /* a sealed header is not rewritten */
    fs = (struct sf_seg *)(void *)b->last;
    if (fs == NULL)
        return;
    lead = fs->in_record ? o->meta_len : sizeof(struct sf_hdr);
    keep = units_for(lead + fs->seg.len);
    if (keep == 0)
        keep = 1;
    if (keep >= fs->units)
        return;
    AZ(pthread_mutex_lock(&st->mtx));
    ext_trim(st->ext, fs->start, fs->units, keep, &ms, &mn);
    write_free(st, ms, mn);
    hdr_write(st, fs->start, SF_BUSY, (uint32_t)keep, 0, 0, 0);
    frag_gauge(st);
    AZ(pthread_mutex_unlock(&st->mtx));
    sto__credit(stv, (fs->units - keep) * SF_UNIT);
    b->bytes -= (fs->units - keep) * SF_UNIT;
    fs->seg.cap = keep * SF_UNIT - lead;
    if (fs->in_record)
        o->rec_units = (uint32_t)keep;
    fs->units = (uint32_t)keep;
}

static uint32_t
rec_crc(const struct sf_rec *r)
{
    struct sf_rec copy = *r;
    uLong c;

    copy.rcrc = 0;
    c = crc32(0L, (const Bytef *)&copy, sizeof copy);
    return ((uint32_t)crc32(c, (const Bytef *)(r + 1),
                            r->key_len + r->head_len + r->vary_len + r->attr_len));
}

static struct sf_rec *
rec_of(const struct sf_store *st, uint64_t u)
{
    return ((struct sf_rec *)(void *)(unit_ptr(st, u) + sizeof(struct sf_hdr)));
}

/*
 * The body is complete: fragments first, then the record's lengths and
 * checksums, then the magic that makes it an object to recovery.
 */
static void
sf_seal(struct stv *stv, struct sto_body *b)
{
    struct sf_store *st = stv->priv;
    struct sf_obj *o = b->priv;
    struct sf_rec *r;
    uint32_t i = 0;

    if (o == NULL || o->sealed)
        return;
    r = rec_of(st, o->rec);
    r->inline_len = 0;
    for (struct sto_seg *s = b->first; s != NULL; s = s->next) {
        struct sf_seg *fs = (struct sf_seg *)(void *)s;
        if (fs->in_record)
            r->inline_len = s->len;
        else
            hdr_write(st, fs->start, SF_FRAG, fs->units, i++, o->serial, s->len);
    }
    SRG_ASSERT(i == o->nfrags);
    r->nfrags = o->nfrags;
    r->body_len = b->len;
    r->body_crc = o->crc;
    r->rcrc = rec_crc(r);
    hdr_write(st, o->rec, SF_OBJ, o->rec_units, 0, o->serial, o->meta_len);
    o->sealed = true;
}

static void
sf_retire(struct stv *stv, struct sto_body *b)
{
    struct sf_store *st = stv->priv;
    struct sf_obj *o = b->priv;

    if (o != NULL && o->sealed)
        set_magic(hdr_at(st, o->rec), SF_DEAD);
}

static void
sf_set_attr(struct stv *stv, struct sto_body *b, const void *attr, size_t len)
{
    struct sf_store *st = stv->priv;
    struct sf_obj *o = b->priv;
    struct sf_rec *r;

    if (o == NULL)
        return;
    r = rec_of(st, o->rec);
    SRG_ASSERT(len == r->attr_len);
    memcpy(r + 1, attr, len);
    if (o->sealed)
        r->rcrc = rec_crc(r);
}

/* Forget the in-memory side of a body. */
static void
forget(struct sto_body *b)
{
    struct sto_seg *s;

    while ((s = b->first) != NULL) {
        b->first = s->next;
        free(s);
    }
    free(b->priv);
}

static void
sf_free(struct stv *stv, struct sto_body *b)
{
    struct sf_obj *o = b->priv;

    if (o != NULL) {
        for (struct sto_seg *s = b->first; s != NULL; s = s->next) {
            struct sf_seg *fs = (struct sf_seg *)(void *)s;
            if (!fs->in_record)
                sf_release_ext(stv, fs->start, fs->units);
        }
        /* The record last: while it stands, its fragments are claimed. */
        sf_release_ext(stv, o->rec, o->rec_units);
    }
    forget(b);
}

static void
sf_release(struct stv *stv, struct sto_body *b)
{
    (void)stv;
    forget(b);
}

static bool
sf_verify(struct stv *stv, struct sto_body *b)
{
    struct sf_obj *o = b->priv;
    uLong c = crc32(0L, Z_NULL, 0);

    (void)stv;
    if (o == NULL)
        return (false);
    for (const struct sto_seg *s = b->first; s != NULL; s = s->next)
        c = crc32(c, (const Bytef *)s->data, (uInt)s->len);
    return ((uint32_t)c == o->crc);
}

/* ---- recovery ---- */

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
    return (x->aux < y->aux ? -1 : x->aux > y->aux);
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
        break;
    default:
        return (false);
    }
    return (h->units > 0 && u + h->units <= st->nunits && h->hcrc == hdr_crc(st, h));
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
    if (meta != h->len || meta > room || r->inline_len > room - meta ||
        r->inline_len > r->body_len || (r->nfrags == 0 && r->inline_len != r->body_len) ||
        r->key_len == 0 || r->head_len == 0)
        return (false);
    return (r->rcrc == rec_crc(r));
}

/* Pass 1: walk the headers; sealed records and fragments are collected, the rest is free. */
static void
walk(struct sf_store *st, uint64_t limit, struct sf_vec *recs, struct sf_vec *frags,
     uint64_t *resyncs)
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
        }
        u += h->units;
    }
}

/*
 * Pass 2: a record lives if fragments 0..n-1 of its serial are all there
 * and with the inline part add up to its body.  Returns how many died.
 */
static size_t
claim(struct sf_store *st, struct sf_vec *recs, struct sf_vec *frags)
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
            if (frags->v[f].aux != k)
                break;
            sum += frags->v[f].len;
            k++;
            f++;
        }
        if (k != r->nfrags || sum != r->body_len ||
            (i + 1 < recs->n && recs->v[i + 1].serial == rec->serial) ||
            (i > 0 && recs->v[i - 1].serial == rec->serial)) {
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

/* Pass 3: the free space is everything no live extent covers. */
static void
rebuild_free(struct sf_store *st, const struct sf_vec *recs, const struct sf_vec *frags)
{
    struct sf_vec live = { 0 };
    uint64_t u = 0;

    for (size_t i = 0; i < recs->n; i++)
        if (recs->v[i].units > 0)
            vec_push(&live, &recs->v[i]);
    for (size_t i = 0; i < frags->n; i++) {
        if (frags->v[i].units & 0x80000000u) {
            struct sf_item it = frags->v[i];
            it.units &= 0x7fffffffu;
            vec_push(&live, &it);
        }
    }
    if (live.n > 0)
        qsort(live.v, live.n, sizeof *live.v, by_start);
    for (size_t i = 0; i <= live.n; i++) {
        uint64_t end = i < live.n ? live.v[i].start : st->nunits;
        if (end > u) {
            write_free(st, u, end - u);
            ext_put(st->ext, u, end - u, NULL, NULL);
        }
        if (i < live.n)
            u = live.v[i].start + live.v[i].units;
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
    b->stv = stv;
    b->priv = o;
    b->meta_stored = true;
    b->verified = false;
    b->len = r->body_len;
    b->bytes = (uint64_t)rec->units * SF_UNIT;
    if (r->inline_len > 0) {
        struct sf_seg *fs = seg_new(rec->start, rec->units, unit_ptr(st, rec->start) + h->len,
                                    r->inline_len, true);
        fs->seg.len = r->inline_len;
        seg_link(b, fs);
    }
    for (uint32_t k = 0; k < r->nfrags; k++) {
        const struct sf_item *fr = &frags->v[rec->aux + k];
        uint32_t units = fr->units & 0x7fffffffu;
        struct sf_seg *fs = seg_new(fr->start, units,
                                    unit_ptr(st, fr->start) + sizeof(struct sf_hdr),
                                    (size_t)units * SF_UNIT - sizeof(struct sf_hdr), false);
        fs->seg.len = fr->len;
        seg_link(b, fs);
        b->bytes += (uint64_t)units * SF_UNIT;
    }
}

static void
sf_recover(struct stv *stv, sto_recover_f *cb)
{
    struct sf_store *st = stv->priv;
    struct sf_vec recs = { 0 }, frags = { 0 };
    uint64_t resyncs = 0, max_serial = 0, kept = 0, refused = 0;
    size_t dropped;

    if (st->recovered)
        return;
    st->recovered = true;
    (void)madvise(st->map, st->size, MADV_SEQUENTIAL);
    walk(st, st->nunits, &recs, &frags, &resyncs);
    dropped = claim(st, &recs, &frags);
    AZ(pthread_mutex_lock(&st->mtx));
    rebuild_free(st, &recs, &frags);
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
            sf_free(stv, &b);
        }
    }
    (void)madvise(st->map, st->size, MADV_NORMAL);
    __atomic_store_n(&st->serial, max_serial + 1, __ATOMIC_RELAXED);
    AZ(pthread_mutex_lock(&st->mtx));
    frag_gauge(st);
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
}

/* ---- the file ---- */

static uint32_t
super_crc(const struct sf_super *s)
{
    return ((uint32_t)crc32(0L, (const Bytef *)s, offsetof(struct sf_super, crc)));
}

/* Whether the file holds a store we can read, and how much of it (its old size). */
static bool
super_ok(const struct sf_super *s, uint64_t *old_size)
{
    if (memcmp(s->magic, SF_MAGIC, sizeof SF_MAGIC) != 0 || s->version != SF_VERSION ||
        s->unit != SF_UNIT || s->crc != super_crc(s))
        return (false);
    *old_size = s->size;
    return (true);
}

static void
super_write(struct sf_store *st)
{
    struct sf_super *s = (struct sf_super *)(void *)st->map;

    memset(s, 0, sizeof *s);
    memcpy(s->magic, SF_MAGIC, sizeof SF_MAGIC);
    s->version = SF_VERSION;
    s->unit = SF_UNIT;
    s->size = st->size;
    s->salt = st->salt;
    s->crc = super_crc(s);
}

static int
sf_fail(struct sf_store *st, struct sb *err, const char *what)
{
    sb_printf(err, "-s file,%s: %s: %s", st->path, what, strerror(errno));
    if (st->map != NULL && st->map != MAP_FAILED)
        (void)munmap(st->map, st->size);
    if (st->fd >= 0)
        (void)close(st->fd);
    free(st->path);
    free(st);
    return (-1);
}

int
sto_file_new(struct stv *stv, const char *args, struct sb *err)
{
    const char *comma = strrchr(args, ',');
    struct sf_store *st;
    uint64_t size, old_size = 0;
    struct stat sbuf;
    bool keep;

    if (comma == NULL || comma == args || num_bytes(comma + 1, &size) != 0) {
        sb_printf(err, "-s file,%s: expected file,PATH,SIZE", args);
        return (-1);
    }
    if (size < 1024 * 1024) {
        sb_printf(err, "-s file,%s: the store needs at least 1m", args);
        return (-1);
    }
    size &= ~(uint64_t)(SF_UNIT - 1);
    st = calloc(1, sizeof *st);
    AN(st);
    st->fd = -1;
    st->path = strndup(args, (size_t)(comma - args));
    AN(st->path);
    st->fd = open(st->path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (st->fd < 0)
        return (sf_fail(st, err, "cannot open"));
    if (flock(st->fd, LOCK_EX | LOCK_NB) != 0)
        return (sf_fail(st, err, "in use by another process"));
    if (fstat(st->fd, &sbuf) != 0)
        return (sf_fail(st, err, "cannot stat"));
    if (!S_ISREG(sbuf.st_mode)) {
        errno = EINVAL;
        return (sf_fail(st, err, "not a regular file"));
    }
    if (ftruncate(st->fd, (off_t)size) != 0)
        return (sf_fail(st, err, "cannot size the file"));
    /* Blocks now, so that a full disk is an error here and not a SIGBUS later. */
    errno = posix_fallocate(st->fd, 0, (off_t)size);
    if (errno != 0 && errno != EOPNOTSUPP && errno != EINVAL)
        return (sf_fail(st, err, "cannot allocate the file's blocks"));
    st->size = size;
    st->nunits = (size - SF_DATA) / SF_UNIT;
    st->map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, st->fd, 0);
    if (st->map == MAP_FAILED)
        return (sf_fail(st, err, "cannot map the file"));
    AZ(pthread_mutex_init(&st->mtx, NULL));
    st->ext = ext_new();
    st->serial = 1;
    keep = sbuf.st_size >= (off_t)SF_DATA &&
           super_ok((const struct sf_super *)(const void *)st->map, &old_size);
    if (keep) {
        st->salt = ((const struct sf_super *)(const void *)st->map)->salt;
        /* A shrunk store keeps what lies inside; a grown one gains free space. */
        if (old_size < size && old_size > SF_DATA)
            write_free(st, (old_size - SF_DATA) / SF_UNIT,
                       st->nunits - (old_size - SF_DATA) / SF_UNIT);
    } else {
        if (getrandom(&st->salt, sizeof st->salt, 0) != (ssize_t)sizeof st->salt)
            return (sf_fail(st, err, "no random salt"));
        write_free(st, 0, st->nunits);
        ext_put(st->ext, 0, st->nunits, NULL, NULL);
        st->recovered = true; /* a new store: nothing to look for */
    }
    super_write(st);
    stv->priv = st;
    stv->size = st->nunits * SF_UNIT;
    return (0);
}

static void
sf_list(const struct stv *stv, struct sb *out)
{
    struct sf_store *st = stv->priv;
    struct ext_stats es;

    AZ(pthread_mutex_lock(&st->mtx));
    ext_stats(st->ext, &es);
    AZ(pthread_mutex_unlock(&st->mtx));
    sb_printf(out, " path=%s free_extents=%llu largest_free=%llu fragmentation=%.3f", st->path,
              (unsigned long long)es.free_extents, (unsigned long long)(es.largest * SF_UNIT),
              es.free_units > 0 ? 1.0 - (double)es.largest / (double)es.free_units : 0.0);
}

static void
sf_fini(struct stv *stv)
{
    struct sf_store *st = stv->priv;

    STAT_ADD(sto_frag_bytes, -st->frag_bytes);
    (void)munmap(st->map, st->size);
    (void)close(st->fd);
    ext_destroy(&st->ext);
    AZ(pthread_mutex_destroy(&st->mtx));
    free(st->path);
    free(st);
}

const struct stv_ops sto_file_ops = {
    .name = "file",
    .trim_in_place = true,
    .open = sf_open,
    .append = sf_append,
    .trim = sf_trim,
    .seal = sf_seal,
    .retire = sf_retire,
    .free = sf_free,
    .release = sf_release,
    .set_attr = sf_set_attr,
    .verify = sf_verify,
    .recover = sf_recover,
    .list = sf_list,
    .fini = sf_fini,
};
