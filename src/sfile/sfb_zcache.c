/*
 * Compression for the static-file backend: precompressed siblings
 * (file.css.br, .zst, .gz beside file.css, as nginx's gzip_static) and
 * compressed copies made on the fly and kept, so that a CSS file costs
 * one compression per coding and version, not one per request.
 *
 * A copy is keyed by the file's identity -- path, device, inode, size,
 * mtime -- and coding: a file changed on disk gets a new copy, and the
 * old one is dropped when the new one is made.  Copies are kept within
 * sfb_compress_cache bytes, the least recently used dropped first; a
 * file bigger than a quarter of that is not compressed on the fly.  A
 * copy being made is in the table, not ready: other requests for it send
 * the file as it is meanwhile rather than wait or compress it again.
 *
 * Siblings are looked for (three opens) at most once per sfb_cache_check
 * for each entry of the open-file cache, so a site without them pays
 * nothing per request.
 *
 * Locking: zmtx over the copies' table, LRU list, refcounts and byte
 * count; sfb->mtx over an sfb_file's sibling mask.  Compression and disk
 * reads are never done under either.  A copy out of the table lives on
 * until the last response sending it lets go.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "surogat/defs.h"
#include "surogat/gz.h"
#include "surogat/par.h"
#include "surogat/sfb.h"
#include "surogat/stat.h"
#include "surogat/tim.h"

#include "sfb_priv.h"

/* Reads while compressing a file not held in memory. */
#define SFB_ZREAD (64 * 1024)

const char *
sfb__sibling_ext(enum gz_coding c)
{
    switch (c) {
    case GZ_C_BR:
        return (".br");
    case GZ_C_ZSTD:
        return (".zst");
    case GZ_C_GZIP:
        return (".gz");
    case GZ_C_IDENTITY:
    case GZ_C__N:
        break;
    }
    SRG_WRONG("sibling coding");
}

/*
 * Matching the type against gzip_types is most of what a small file costs
 * in user time (a type not on the list is compared with each entry), so
 * the answer is kept with the file for as long as the list stays.
 */
static bool
type_compressible(struct sfb_file *f)
{
    const char *list = par.gzip_types;
    uintptr_t v = __atomic_load_n(&f->ztype, __ATOMIC_RELAXED);
    struct txt t;
    bool ok;

    if (list == NULL)
        return (false);
    if ((v & ~(uintptr_t)1) == (uintptr_t)list)
        return ((v & 1) != 0);
    t = (struct txt){ f->type, strlen(f->type) };
    ok = gz_type_match(list, &t);
    if (((uintptr_t)list & 1) == 0) /* always, for a malloc'd copy: else judged each time */
        __atomic_store_n(&f->ztype, (uintptr_t)list | ok, __ATOMIC_RELAXED);
    return (ok);
}

bool
sfb__compressible(struct sfb_file *f)
{
    return (f->size > 0 && f->size >= par.gzip_min_size && f->size <= par.sfb_compress_cache / 4 &&
            type_compressible(f));
}

/* ---- siblings ---- */

unsigned
sfb__siblings(struct sfb *sfb, struct sfb_file *f)
{
    static const enum gz_coding codings[] = { GZ_C_BR, GZ_C_ZSTD, GZ_C_GZIP };
    double now = tim_mono();
    unsigned mask;
    char path[4096 + 8];

    if (!par.sfb_precompressed || f->plen + 5 > sizeof path - 1)
        return (0);
    AZ(pthread_mutex_lock(&sfb->mtx));
    mask = f->sib_mask;
    if (f->t_sib > 0 && now - f->t_sib < par.sfb_cache_check) {
        AZ(pthread_mutex_unlock(&sfb->mtx));
        return (mask);
    }
    AZ(pthread_mutex_unlock(&sfb->mtx));
    mask = 0;
    memcpy(path, f->path, f->plen);
    for (size_t i = 0; i < ARRAY_LEN(codings); i++) {
        const char *ext = sfb__sibling_ext(codings[i]);
        struct stat st;
        int fd;

        strcpy(path + f->plen, ext);
        if (sfb_denied(sfb, path))
            continue;
        fd = sfb__openat(sfb, path, 0);
        if (fd < 0)
            continue;
        /* A sibling older than the file was made from an older version: never sent. */
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
            (st.st_mtim.tv_sec > f->mtime.tv_sec ||
             (st.st_mtim.tv_sec == f->mtime.tv_sec && st.st_mtim.tv_nsec >= f->mtime.tv_nsec)))
            mask |= GZ_SET(codings[i]);
        close(fd);
    }
    AZ(pthread_mutex_lock(&sfb->mtx));
    f->sib_mask = mask;
    f->t_sib = now;
    AZ(pthread_mutex_unlock(&sfb->mtx));
    return (mask);
}

/* ---- compressed copies ---- */

void
sfb__zcache_init(struct sfb *sfb)
{
    sfb->zbucket = calloc(SFB_ZBUCKETS, sizeof *sfb->zbucket);
    AN(sfb->zbucket);
    AZ(pthread_mutex_init(&sfb->zmtx, NULL));
}

static void
zfree(struct sfb_zcopy *z)
{
    OBJ_CHECK(z, SFB_ZCOPY_MAGIC);
    AZ(z->refcnt);
    free(z->data);
    z->magic = 0;
    free(z);
}

static uint32_t
zhash(const char *path, size_t plen, enum gz_coding c)
{
    uint32_t h = 2166136261u ^ (uint32_t)c;

    for (size_t i = 0; i < plen; i++)
        h = (h ^ (unsigned char)path[i]) * 16777619u;
    return (h);
}

/* Out of the table and the LRU list (zmtx held); the table's reference is the caller's now. */
static void
zunlink(struct sfb *sfb, struct sfb_zcopy *z)
{
    struct sfb_zcopy **pp = &sfb->zbucket[z->hash % SFB_ZBUCKETS];

    while (*pp != z)
        pp = &(*pp)->hnext;
    *pp = z->hnext;
    if (z->lprev != NULL)
        z->lprev->lnext = z->lnext;
    else
        sfb->zlru_head = z->lnext;
    if (z->lnext != NULL)
        z->lnext->lprev = z->lprev;
    else
        sfb->zlru_tail = z->lprev;
    z->hnext = z->lprev = z->lnext = NULL;
    z->in_table = false;
    if (z->ready && !z->useless) {
        sfb->zbytes -= z->len;
        STAT_ADD(sfb_compress_bytes, -(int64_t)z->len);
    }
}

/* Drop a reference (zmtx held); the caller frees what is returned, outside the lock. */
static struct sfb_zcopy *
zderef(struct sfb_zcopy *z)
{
    SRG_ASSERT(z->refcnt > 0);
    return (--z->refcnt == 0 ? z : NULL);
}

void
sfb__zcache_fini(struct sfb *sfb)
{
    struct sfb_zcopy *z;

    while ((z = sfb->zlru_head) != NULL) {
        zunlink(sfb, z);
        z->refcnt--;
        zfree(z); /* asserts nobody else holds it */
    }
    free(sfb->zbucket);
    sfb->zbucket = NULL;
    AZ(pthread_mutex_destroy(&sfb->zmtx));
}

static void
zfront(struct sfb *sfb, struct sfb_zcopy *z)
{
    if (sfb->zlru_head == z)
        return;
    if (z->lprev != NULL)
        z->lprev->lnext = z->lnext;
    if (z->lnext != NULL)
        z->lnext->lprev = z->lprev;
    else if (sfb->zlru_tail == z)
        sfb->zlru_tail = z->lprev;
    z->lprev = NULL;
    z->lnext = sfb->zlru_head;
    if (sfb->zlru_head != NULL)
        sfb->zlru_head->lprev = z;
    sfb->zlru_head = z;
    if (sfb->zlru_tail == NULL)
        sfb->zlru_tail = z;
}

static bool
same_version(const struct sfb_zcopy *z, const struct sfb_file *f)
{
    return (z->dev == f->dev && z->ino == f->ino && z->size == f->size &&
            z->mtime.tv_sec == f->mtime.tv_sec && z->mtime.tv_nsec == f->mtime.tv_nsec);
}

/* The entry for f's path in coding c, whatever its version (zmtx held). */
static struct sfb_zcopy *
zfind(struct sfb *sfb, const struct sfb_file *f, enum gz_coding c, uint32_t h)
{
    for (struct sfb_zcopy *z = sfb->zbucket[h % SFB_ZBUCKETS]; z != NULL; z = z->hnext)
        if (z->hash == h && z->coding == c && z->plen == f->plen &&
            memcmp(z->path, f->path, f->plen) == 0)
            return (z);
    return (NULL);
}

struct zout {
    char *p;
    size_t len, cap, max;
};

/* gz_out_f: the copy grows in memory, up to the size of the file (else it is useless). */
static int
zcollect(void *priv, const char *p, size_t len)
{
    struct zout *o = priv;

    if (o->len + len >= o->max)
        return (-1);
    if (o->len + len > o->cap) {
        o->cap = SRG_MIN(SRG_MAX(o->cap * 2, o->len + len), o->max);
        o->p = realloc(o->p, o->cap);
        AN(o->p);
    }
    memcpy(o->p + o->len, p, len);
    o->len += len;
    return (0);
}

/*
 * Compress f's bytes -- from memory when the open-file cache holds them,
 * else read -- into o.  0; 1 when the result is no smaller than the file;
 * -1 when reading failed or the file changed meanwhile.
 */
static int
compress_file(const struct sfb_file *f, enum gz_coding c, struct zout *o)
{
    struct gz *z = gz_new(gz_coding_encoder(c), gz_coding_level(c));
    enum gz_status st = GZ_OK;
    char *rb = NULL;
    struct stat sb;
    uint64_t off = 0;

    o->max = (size_t)f->size;
    if (f->mem != NULL) {
        st = gz_feed(z, f->mem, (size_t)f->size, GZ_FLUSH_FINISH, zcollect, o);
    } else {
        rb = malloc(SFB_ZREAD);
        AN(rb);
        while (off < f->size && st == GZ_OK) {
            ssize_t n =
                pread(f->fd, rb, (size_t)SRG_MIN(f->size - off, (uint64_t)SFB_ZREAD), (off_t)off);
            if (n < 0 && errno == EINTR)
                continue;
            if (n <= 0)
                break;
            off += (uint64_t)n;
            st = gz_feed(z, rb, (size_t)n, off == f->size ? GZ_FLUSH_FINISH : GZ_FLUSH_NONE,
                         zcollect, o);
        }
        free(rb);
        if (off != f->size || fstat(f->fd, &sb) != 0 || sb.st_size != (off_t)f->size ||
            sb.st_mtim.tv_sec != f->mtime.tv_sec || sb.st_mtim.tv_nsec != f->mtime.tv_nsec) {
            gz_free(&z);
            return (-1);
        }
    }
    gz_free(&z);
    if (st == GZ_E_OUTPUT)
        return (1); /* it grew to the file's size: not worth sending */
    AN(st == GZ_END);
    return (0);
}

struct sfb_zcopy *
sfb__zcopy_get(struct sfb *sfb, const struct sfb_file *f, enum gz_coding c)
{
    uint32_t h = zhash(f->path, f->plen, c);
    struct sfb_zcopy *z, *nz, *gone = NULL;
    struct zout o = { 0 };
    int rv;

    OBJ_CHECK(sfb, SFB_MAGIC);
    SRG_ASSERT(c != GZ_C_IDENTITY);
    AZ(pthread_mutex_lock(&sfb->zmtx));
    z = zfind(sfb, f, c, h);
    if (z != NULL && same_version(z, f)) {
        if (!z->ready || z->useless) {
            AZ(pthread_mutex_unlock(&sfb->zmtx));
            if (!z->ready)
                STAT_INC(sfb_compress_busy);
            return (NULL);
        }
        z->refcnt++;
        zfront(sfb, z);
        AZ(pthread_mutex_unlock(&sfb->zmtx));
        STAT_INC(sfb_compress_hit);
        return (z);
    }
    if (z != NULL) {
        /* An older version: dropped now, its successor takes its place. */
        zunlink(sfb, z);
        gone = zderef(z);
    }
    nz = calloc(1, sizeof *nz + f->plen + 1);
    AN(nz);
    nz->magic = SFB_ZCOPY_MAGIC;
    nz->refcnt = 1; /* the table's */
    nz->coding = c;
    nz->dev = f->dev;
    nz->ino = f->ino;
    nz->size = f->size;
    nz->mtime = f->mtime;
    nz->hash = h;
    nz->plen = f->plen;
    memcpy(nz->path, f->path, f->plen);
    nz->hnext = sfb->zbucket[h % SFB_ZBUCKETS];
    sfb->zbucket[h % SFB_ZBUCKETS] = nz;
    nz->in_table = true;
    zfront(sfb, nz);
    /*
     * Ours too, while we make it: another request may replace it (a newer
     * version) or evict it meanwhile.
     */
    nz->refcnt++;
    AZ(pthread_mutex_unlock(&sfb->zmtx));
    if (gone != NULL)
        zfree(gone);
    gone = NULL;

    rv = compress_file(f, c, &o);

    AZ(pthread_mutex_lock(&sfb->zmtx));
    if (rv < 0) {
        /* Changed on disk while read: forget it, the next request looks again. */
        if (nz->in_table) {
            zunlink(sfb, nz);
            (void)zderef(nz); /* the table's; ours remains */
        }
        gone = zderef(nz);
        AZ(pthread_mutex_unlock(&sfb->zmtx));
        if (gone != NULL)
            zfree(gone);
        free(o.p);
        return (NULL);
    }
    STAT_INC(sfb_compressed);
    nz->ready = true;
    nz->useless = rv > 0;
    if (rv > 0) {
        free(o.p);
    } else {
        nz->data = o.p;
        nz->len = o.len;
        if (nz->in_table) {
            sfb->zbytes += nz->len;
            STAT_ADD(sfb_compress_bytes, nz->len);
        }
    }
    /* Within the bound: the least recently used go, this one last of all. */
    while (sfb->zbytes > par.sfb_compress_cache && sfb->zlru_tail != NULL) {
        struct sfb_zcopy *t = sfb->zlru_tail;
        struct sfb_zcopy *g;

        zunlink(sfb, t);
        STAT_INC(sfb_compress_evict);
        g = zderef(t);
        if (g != NULL) {
            /* Freed outside the lock: collect, at most a few per call. */
            AZ(pthread_mutex_unlock(&sfb->zmtx));
            zfree(g);
            AZ(pthread_mutex_lock(&sfb->zmtx));
        }
    }
    if (nz->useless) {
        gone = zderef(nz);
        AZ(pthread_mutex_unlock(&sfb->zmtx));
        if (gone != NULL)
            zfree(gone);
        return (NULL);
    }
    AZ(pthread_mutex_unlock(&sfb->zmtx));
    return (nz); /* with our reference: it lives while it is sent, evicted or not */
}

void
sfb__zcopy_put(struct sfb *sfb, struct sfb_zcopy **zp)
{
    struct sfb_zcopy *z = *zp, *gone;

    *zp = NULL;
    OBJ_CHECK(z, SFB_ZCOPY_MAGIC);
    AZ(pthread_mutex_lock(&sfb->zmtx));
    gone = zderef(z);
    AZ(pthread_mutex_unlock(&sfb->zmtx));
    if (gone != NULL)
        zfree(gone);
}
