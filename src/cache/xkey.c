/*
 * The tag index: tag -> the objects carrying it, in XKEY_SHARDS hash
 * tables, each behind its own mutex (see xkey.h for the lock rules).
 *
 * Each (tag, object) pair is a node, on two lists: the tag's objects
 * (doubly linked, under the tag's shard lock) and the object's nodes
 * (oc->xkey, singly linked through onext).  The object's list is written
 * once, by xkey_index() while the caller owns the object, and read once,
 * by xkey_unindex() after its last reference went, so it needs no lock.
 *
 * The index holds no reference: a node lives as long as its object.  A
 * purge therefore takes a reference only on objects whose count is not
 * already zero -- a zero means the object is being freed and its
 * xkey_unindex() is waiting for the lock the purge holds.
 */
#include "config.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "surogat/defs.h"
#include "surogat/hsh.h"
#include "surogat/shd.h"
#include "surogat/http.h"
#include "surogat/stat.h"
#include "surogat/xkey.h"

#define XKEY_SHARDS      16
#define XKEY_BUCKETS_MIN 64

struct xkey_node;

struct xkey_tag {
    unsigned magic;
#define XKEY_TAG_MAGIC 0x0c5e7d21
    struct xkey_tag *hnext; /* hash chain */
    uint64_t hash;
    struct xkey_node *objs; /* nodes of the objects with this tag */
    size_t len;
    char name[];
};

struct xkey_node {
    struct xkey_tag *tag;
    struct cobj *oc;
    struct xkey_node *tprev, *tnext; /* the tag's list */
    struct xkey_node *onext;         /* the object's list */
};

struct xshard {
    pthread_mutex_t mtx;
    struct xkey_tag **buckets;
    size_t nbuckets; /* a power of two */
    size_t ntags;
} __attribute__((aligned(64)));

static struct xshard xshards[XKEY_SHARDS];

static uint64_t
tag_hash(const char *s, size_t len)
{
    uint64_t h = 0xcbf29ce484222325ULL; /* FNV-1a: tags are short */

    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= 0x100000001b3ULL;
    }
    return (h ^ (h >> 31));
}

static struct xshard *
xshard_of(uint64_t hash)
{
    return (&xshards[hash % XKEY_SHARDS]);
}

static size_t
bucket_of(const struct xshard *xs, uint64_t hash)
{
    return ((size_t)(hash / XKEY_SHARDS) & (xs->nbuckets - 1));
}

int
xkey_init(void)
{
    for (unsigned i = 0; i < XKEY_SHARDS; i++) {
        AZ(pthread_mutex_init(&xshards[i].mtx, NULL));
        xshards[i].nbuckets = XKEY_BUCKETS_MIN;
        xshards[i].buckets = calloc(XKEY_BUCKETS_MIN, sizeof *xshards[i].buckets);
        AN(xshards[i].buckets);
        xshards[i].ntags = 0;
    }
    return (0);
}

void
xkey_fini(void)
{
    for (unsigned i = 0; i < XKEY_SHARDS; i++) {
        SRG_ASSERT(xshards[i].ntags == 0);
        free(xshards[i].buckets);
        xshards[i].buckets = NULL;
        AZ(pthread_mutex_destroy(&xshards[i].mtx));
    }
}

/* ---- parsing ---- */

unsigned
xkey_split(const char *s, size_t len, bool commas, struct txt *out, unsigned max)
{
    const char *p = s, *e = s + len, *t;
    unsigned n = 0;

    while (p < e && n < max) {
        while (p < e && (*p == ' ' || *p == '\t' || (commas && *p == ',')))
            p++;
        for (t = p; p < e && *p != ' ' && *p != '\t' && !(commas && *p == ','); p++)
            continue;
        if (p > t && (size_t)(p - t) <= XKEY_TAG_MAX)
            out[n++] = (struct txt){ t, (size_t)(p - t) };
    }
    return (n);
}

static bool
name_is(const char *p, size_t len, const char *name)
{
    return (len == strlen(name) && strncasecmp(p, name, len) == 0);
}

unsigned
xkey_obj_tags(const struct cobj *oc, struct txt *out, unsigned max)
{
    struct shd_iter it;
    struct txt name, val;
    unsigned n = 0;

    OBJ_CHECK(oc, COBJ_MAGIC);
    if (oc->head == NULL)
        return (0);
    shd_iter_init(&it, (const unsigned char *)oc->head, oc->head_len);
    while (n < max && shd_next(&it, &name, &val)) {
        bool commas = name_is(name.b, name.len, "xkey");
        unsigned got;

        if (!commas && !name_is(name.b, name.len, "Surrogate-Key"))
            continue;
        got = xkey_split(val.b, val.len, commas, out + n, max - n);
        /* Drop repeats: each object is on a tag's list once. */
        for (unsigned i = n; i < n + got;) {
            bool dup = false;
            for (unsigned j = 0; j < i && !dup; j++)
                dup = out[j].len == out[i].len && memcmp(out[j].b, out[i].b, out[i].len) == 0;
            if (dup)
                out[i] = out[n + --got];
            else
                i++;
        }
        n += got;
    }
    return (n);
}

/* ---- the index ---- */

/* Under xs->mtx. */
static struct xkey_tag *
tag_find(struct xshard *xs, uint64_t hash, const char *name, size_t len)
{
    for (struct xkey_tag *t = xs->buckets[bucket_of(xs, hash)]; t != NULL; t = t->hnext)
        if (t->hash == hash && t->len == len && memcmp(t->name, name, len) == 0)
            return (t);
    return (NULL);
}

/* Under xs->mtx. */
static void
grow(struct xshard *xs)
{
    size_t old = xs->nbuckets;
    struct xkey_tag **nb = calloc(old * 2, sizeof *nb), *t, *next;

    AN(nb);
    xs->nbuckets = old * 2;
    for (size_t i = 0; i < old; i++) {
        for (t = xs->buckets[i]; t != NULL; t = next) {
            size_t b = bucket_of(xs, t->hash);
            next = t->hnext;
            t->hnext = nb[b];
            nb[b] = t;
        }
    }
    free(xs->buckets);
    xs->buckets = nb;
}

void
xkey_index(struct cobj *oc)
{
    struct txt tags[XKEY_OBJ_MAX];
    unsigned n;

    OBJ_CHECK(oc, COBJ_MAGIC);
    AZ(oc->xkey);
    n = xkey_obj_tags(oc, tags, XKEY_OBJ_MAX);
    for (unsigned i = 0; i < n; i++) {
        uint64_t h = tag_hash(tags[i].b, tags[i].len);
        struct xshard *xs = xshard_of(h);
        struct xkey_node *nd = calloc(1, sizeof *nd);
        struct xkey_tag *t;

        AN(nd);
        AZ(pthread_mutex_lock(&xs->mtx));
        t = tag_find(xs, h, tags[i].b, tags[i].len);
        if (t == NULL) {
            if (xs->ntags >= xs->nbuckets * 2)
                grow(xs);
            t = calloc(1, sizeof *t + tags[i].len);
            AN(t);
            t->magic = XKEY_TAG_MAGIC;
            t->hash = h;
            t->len = tags[i].len;
            memcpy(t->name, tags[i].b, t->len);
            t->hnext = xs->buckets[bucket_of(xs, h)];
            xs->buckets[bucket_of(xs, h)] = t;
            xs->ntags++;
            STAT_INC(xkey_tags);
        }
        nd->tag = t;
        nd->oc = oc;
        nd->tnext = t->objs;
        if (t->objs != NULL)
            t->objs->tprev = nd;
        t->objs = nd;
        AZ(pthread_mutex_unlock(&xs->mtx));
        nd->onext = oc->xkey;
        oc->xkey = nd;
    }
}

/* Under xs->mtx: t lost its last object. */
static void
tag_free(struct xshard *xs, struct xkey_tag *t)
{
    struct xkey_tag **pp;

    for (pp = &xs->buckets[bucket_of(xs, t->hash)]; *pp != t; pp = &(*pp)->hnext)
        AN(*pp);
    *pp = t->hnext;
    xs->ntags--;
    STAT_DEC(xkey_tags);
    t->magic = 0;
    free(t);
}

void
xkey_unindex(struct cobj *oc)
{
    struct xkey_node *nd, *next;

    for (nd = oc->xkey; nd != NULL; nd = next) {
        struct xkey_tag *t = nd->tag;
        struct xshard *xs = xshard_of(t->hash);

        next = nd->onext;
        AZ(pthread_mutex_lock(&xs->mtx));
        OBJ_CHECK(t, XKEY_TAG_MAGIC);
        if (nd->tprev != NULL)
            nd->tprev->tnext = nd->tnext;
        else
            t->objs = nd->tnext;
        if (nd->tnext != NULL)
            nd->tnext->tprev = nd->tprev;
        if (t->objs == NULL)
            tag_free(xs, t);
        AZ(pthread_mutex_unlock(&xs->mtx));
        free(nd);
    }
    oc->xkey = NULL;
}

/* A reference on oc unless it is already on its way out (count zero). */
static bool
ref_if_alive(struct cobj *oc)
{
    unsigned n = __atomic_load_n(&oc->refcnt, __ATOMIC_RELAXED);

    while (n > 0)
        if (__atomic_compare_exchange_n(&oc->refcnt, &n, n + 1, true, __ATOMIC_ACQUIRE,
                                        __ATOMIC_RELAXED))
            return (true);
    return (false);
}

static int
ptr_cmp(const void *a, const void *b)
{
    uintptr_t x = (uintptr_t) * (struct cobj *const *)a, y = (uintptr_t) * (struct cobj *const *)b;

    return (x < y ? -1 : x > y);
}

unsigned
xkey_purge(const char *list, size_t len, bool soft)
{
    struct txt tags[XKEY_OBJ_MAX];
    struct cobj **objs = NULL;
    size_t nobj = 0, cap = 0;
    unsigned ntags = xkey_split(list, len, true, tags, XKEY_OBJ_MAX), n = 0;

    for (unsigned i = 0; i < ntags; i++) {
        uint64_t h = tag_hash(tags[i].b, tags[i].len);
        struct xshard *xs = xshard_of(h);
        struct xkey_tag *t;

        AZ(pthread_mutex_lock(&xs->mtx));
        t = tag_find(xs, h, tags[i].b, tags[i].len);
        for (struct xkey_node *nd = t != NULL ? t->objs : NULL; nd != NULL; nd = nd->tnext) {
            if (!ref_if_alive(nd->oc))
                continue;
            if (nobj == cap) {
                cap = cap == 0 ? 64 : cap * 2;
                objs = realloc(objs, cap * sizeof *objs);
                AN(objs);
            }
            objs[nobj++] = nd->oc;
        }
        AZ(pthread_mutex_unlock(&xs->mtx));
    }
    /* An object with several of the tags counts once. */
    if (nobj > 1)
        qsort(objs, nobj, sizeof *objs, ptr_cmp);
    for (size_t i = 0; i < nobj; i++) {
        if ((i == 0 || objs[i] != objs[i - 1]) && hsh_kill(objs[i], soft))
            n++;
        hsh_deref(&objs[i]);
    }
    free(objs);
    return (n);
}
