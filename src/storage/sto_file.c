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
 * bodies that outgrow it, fragment extents numbered in body order, and a
 * tail fragment for the bytes known only once the body is complete
 * (sto_set_tail: the index's object attributes).
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
#include "surogat/num.h"
#include "surogat/sb.h"
#include "surogat/stat.h"

#include "sto_priv.h"
#include "sto_file_priv.h"

static uint64_t
units_for(uint64_t bytes)
{
    return ((bytes + SF_UNIT - 1) / SF_UNIT);
}

uint32_t
sf__hdr_crc(const struct sf_store *st, const struct sf_hdr *h)
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
    h->hcrc = sf__hdr_crc(st, h);
    __atomic_store_n(&h->magic, magic, __ATOMIC_RELEASE);
}

static void
set_magic(struct sf_hdr *h, uint32_t magic)
{
    __atomic_store_n(&h->magic, magic, __ATOMIC_RELEASE);
}

/* Headers for a free run; a run longer than a header can say gets several. */
void
sf__write_free(struct sf_store *st, uint64_t u, uint64_t n)
{
    while (n > 0) {
        uint32_t k = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
        hdr_write(st, u, SF_FREE, k, 0, 0, 0);
        u += k;
        n -= k;
    }
}

/* The gauge of free bytes outside the largest free extent, under st->mtx. */
void
sf__frag_gauge(struct sf_store *st)
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
            sf__write_free(st, *start + got, rest);
        hdr_write(st, *start, SF_BUSY, (uint32_t)got, 0, 0, 0);
        sf__frag_gauge(st);
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
    sf__write_free(st, ms, mn);
    sf__frag_gauge(st);
    AZ(pthread_mutex_unlock(&st->mtx));
    sto__credit(stv, units * SF_UNIT);
}

struct sf_seg *
sf__seg_new(uint64_t start, uint64_t units, char *data, size_t cap, bool in_record)
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

void
sf__seg_link(struct sto_body *b, struct sf_seg *fs)
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
    if (m->key_len > UINT32_MAX / 4 || m->head_len > UINT32_MAX / 4 || mlen > SF_EXT_MAX)
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
#define COPY(f)                          \
    do {                                 \
        if (m->f##_len > 0)              \
            memcpy(p, m->f, m->f##_len); \
        m->f = (void *)p;                \
        p += m->f##_len;                 \
    } while (0)
    COPY(attr); /* first: it starts 8-aligned, after the record */
    COPY(key);
    COPY(head);
    COPY(vary);
#undef COPY
    b->meta_stored = true;
    if (got * SF_UNIT > mlen)
        sf__seg_link(
            b, sf__seg_new(start, got, unit_ptr(st, start) + mlen, got * SF_UNIT - mlen, true));
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
            sf__seg_link(b, sf__seg_new(start, got, unit_ptr(st, start) + sizeof(struct sf_hdr),
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
    sf__write_free(st, ms, mn);
    hdr_write(st, fs->start, SF_BUSY, (uint32_t)keep, 0, 0, 0);
    sf__frag_gauge(st);
    AZ(pthread_mutex_unlock(&st->mtx));
    sto__credit(stv, (fs->units - keep) * SF_UNIT);
    b->bytes -= (fs->units - keep) * SF_UNIT;
    fs->seg.cap = keep * SF_UNIT - lead;
    if (fs->in_record)
        o->rec_units = (uint32_t)keep;
    fs->units = (uint32_t)keep;
}

uint32_t
sf__rec_crc(const struct sf_rec *r)
{
    struct sf_rec copy = *r;
    uLong c;

    copy.rcrc = 0;
    c = crc32(0L, (const Bytef *)&copy, sizeof copy);
    return ((uint32_t)crc32(c, (const Bytef *)(r + 1),
                            r->key_len + r->head_len + r->vary_len + r->attr_len));
}

/* The tail in an extent of its own, busy until the seal names it a fragment of the object. */
static int
sf_set_tail(struct stv *stv, struct sto_body *b, const void *p, size_t len)
{
    struct sf_store *st = stv->priv;
    struct sf_obj *o = b->priv;
    uint64_t units = units_for(sizeof(struct sf_hdr) + len), start;

    AN(o);
    SRG_ASSERT(o->tail_len == 0 && !o->sealed);
    if (len > SF_EXT_MAX || sf_alloc(stv, units, units, &start) == 0)
        return (-1);
    memcpy(unit_ptr(st, start) + sizeof(struct sf_hdr), p, len);
    o->tail_start = start;
    o->tail_units = (uint32_t)units;
    o->tail_len = (uint32_t)len;
    b->bytes += units * SF_UNIT;
    return (0);
}

static const void *
sf_tail(const struct stv *stv, const struct sto_body *b, size_t *len)
{
    const struct sf_store *st = stv->priv;
    const struct sf_obj *o = b->priv;

    if (o == NULL || o->tail_len == 0)
        return (NULL);
    *len = o->tail_len;
    return (unit_ptr(st, o->tail_start) + sizeof(struct sf_hdr));
}

/*
 * The body is complete: fragments first (the tail's too), then the
 * record's lengths and checksums, then the magic that makes it an object
 * to recovery.
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
    if (o->tail_len > 0)
        hdr_write(st, o->tail_start, SF_FRAG, o->tail_units, SF_TAIL_AUX, o->serial, o->tail_len);
    r->tail_len = o->tail_len;
    r->nfrags = o->nfrags;
    r->body_len = b->len;
    r->body_crc = o->crc;
    r->rcrc = sf__rec_crc(r);
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
        r->rcrc = sf__rec_crc(r);
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

void
sf__free(struct stv *stv, struct sto_body *b)
{
    struct sf_obj *o = b->priv;

    if (o != NULL) {
        for (struct sto_seg *s = b->first; s != NULL; s = s->next) {
            struct sf_seg *fs = (struct sf_seg *)(void *)s;
            if (!fs->in_record)
                sf_release_ext(stv, fs->start, fs->units);
        }
        if (o->tail_len > 0)
            sf_release_ext(stv, o->tail_start, o->tail_units);
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
            sf__write_free(st, (old_size - SF_DATA) / SF_UNIT,
                           st->nunits - (old_size - SF_DATA) / SF_UNIT);
    } else {
        if (getrandom(&st->salt, sizeof st->salt, 0) != (ssize_t)sizeof st->salt)
            return (sf_fail(st, err, "no random salt"));
        sf__write_free(st, 0, st->nunits);
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
    char hl[NUM_HUMAN_LEN];

    AZ(pthread_mutex_lock(&st->mtx));
    ext_stats(st->ext, &es);
    AZ(pthread_mutex_unlock(&st->mtx));
    sb_printf(out, " path=%s free_extents=%llu largest_free=%llu (%s) fragmentation=%.3f", st->path,
              (unsigned long long)es.free_extents, (unsigned long long)(es.largest * SF_UNIT),
              num_human_bytes(es.largest * SF_UNIT, hl),
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
    .free = sf__free,
    .release = sf_release,
    .set_attr = sf_set_attr,
    .set_tail = sf_set_tail,
    .tail = sf_tail,
    .verify = sf_verify,
    .recover = sf__recover,
    .list = sf_list,
    .fini = sf_fini,
};
