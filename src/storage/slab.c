/*
 * slab -- exact-size small blocks (slab.h).
 *
 * Each class (block sizes in SLAB_STEP steps) keeps a list of its slabs
 * that have room.  A slab hands out its regions first from the never-used
 * end (`fresh`, so a new slab costs no pass over its regions), then from
 * its free list, chained through the first word of each free region.
 */
#include "config.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "surogat/defs.h"
#include "surogat/slab.h"

#define SLAB_NCLASS (SLAB_MAX / SLAB_STEP)
#define SLAB_HDR 64 /* the header's room at the slab's start: a cache line */

struct slab {
    unsigned magic;
#define SLAB_MAGIC 0x51ab0c1d
    unsigned cls;       /* index in classes[] */
    unsigned nfree;     /* free regions, fresh ones included */
    void *free;         /* freed regions, chained through their first word */
    char *fresh;        /* the first never-used region */
    struct slab *prev;  /* the class's slabs with room */
    struct slab *next;
};

_Static_assert(sizeof(struct slab) <= SLAB_HDR, "a slab's header fits its room");

struct slab_class {
    pthread_mutex_t mtx;
    struct slab *room; /* slabs with a free region, the one to use first */
    unsigned nroom;
};

static struct slab_class classes[SLAB_NCLASS];
static pthread_once_t classes_once = PTHREAD_ONCE_INIT;
static uint64_t nslabs;  /* atomic */
static uint64_t nblocks; /* atomic */

static void
classes_init(void)
{
    for (unsigned i = 0; i < SLAB_NCLASS; i++)
        AZ(pthread_mutex_init(&classes[i].mtx, NULL));
}

static size_t
cls_size(unsigned cls)
{
    return (((size_t)cls + 1) * SLAB_STEP);
}

static unsigned
cls_of(size_t n)
{
    return ((unsigned)((n + SLAB_STEP - 1) / SLAB_STEP) - 1);
}

static unsigned
cls_regions(unsigned cls)
{
    return ((unsigned)((SLAB_SIZE - SLAB_HDR) / cls_size(cls)));
}

size_t
slab_cost(size_t n)
{
    unsigned cls = cls_of(n > 0 ? n : 1);

    SRG_ASSERT(n <= SLAB_MAX);
    return ((SLAB_SIZE + cls_regions(cls) - 1) / cls_regions(cls));
}

static void
room_link(struct slab_class *c, struct slab *s)
{
    s->prev = NULL;
    s->next = c->room;
    if (c->room != NULL)
        c->room->prev = s;
    c->room = s;
    c->nroom++;
}

static void
room_unlink(struct slab_class *c, struct slab *s)
{
    if (s->prev != NULL)
        s->prev->next = s->next;
    else
        c->room = s->next;
    if (s->next != NULL)
        s->next->prev = s->prev;
    s->prev = s->next = NULL;
    c->nroom--;
}

void *
slab_alloc(size_t n)
{
    unsigned cls;
    struct slab_class *c;
    struct slab *s;
    void *p;

    SRG_ASSERT(n > 0 && n <= SLAB_MAX);
    AZ(pthread_once(&classes_once, classes_init));
    cls = cls_of(n);
    c = &classes[cls];
    AZ(pthread_mutex_lock(&c->mtx));
    s = c->room;
    if (s == NULL) {
        s = aligned_alloc(SLAB_SIZE, SLAB_SIZE);
        AN(s);
        s->magic = SLAB_MAGIC;
        s->cls = cls;
        s->nfree = cls_regions(cls);
        s->free = NULL;
        s->fresh = (char *)s + SLAB_HDR;
        room_link(c, s);
        __atomic_add_fetch(&nslabs, 1, __ATOMIC_RELAXED);
    }
    if (s->free != NULL) {
        p = s->free;
        s->free = *(void **)p;
    } else {
        p = s->fresh;
        s->fresh += cls_size(cls);
    }
    if (--s->nfree == 0)
        room_unlink(c, s);
    AZ(pthread_mutex_unlock(&c->mtx));
    __atomic_add_fetch(&nblocks, 1, __ATOMIC_RELAXED);
    return (p);
}

void
slab_free(void *p)
{
    struct slab *s = (struct slab *)((uintptr_t)p & ~(uintptr_t)(SLAB_SIZE - 1));
    struct slab_class *c;
    bool gone = false;

    if (p == NULL)
        return;
    OBJ_CHECK(s, SLAB_MAGIC);
    c = &classes[s->cls];
    SRG_ASSERT((char *)p >= (char *)s + SLAB_HDR && (char *)p < s->fresh &&
               ((char *)p - ((char *)s + SLAB_HDR)) % cls_size(s->cls) == 0);
    AZ(pthread_mutex_lock(&c->mtx));
    *(void **)p = s->free;
    s->free = p;
    if (s->nfree++ == 0)
        room_link(c, s);
    if (s->nfree == cls_regions(s->cls) && c->nroom > 1) {
        room_unlink(c, s);
        gone = true;
    }
    AZ(pthread_mutex_unlock(&c->mtx));
    __atomic_sub_fetch(&nblocks, 1, __ATOMIC_RELAXED);
    if (gone) {
        s->magic = 0;
        free(s);
        __atomic_sub_fetch(&nslabs, 1, __ATOMIC_RELAXED);
    }
}

void
slab_stats(struct slab_stats *st)
{
    st->slabs = __atomic_load_n(&nslabs, __ATOMIC_RELAXED);
    st->blocks = __atomic_load_n(&nblocks, __ATOMIC_RELAXED);
}
