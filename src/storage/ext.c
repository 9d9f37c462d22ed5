/*
 * The free-extent allocator: two-level segregated size classes (as in
 * TLSF, Masmano et al. 2004) for a good fit in constant time, and hash
 * tables by start and by end for coalescing.
 *
 * Class of a length n (in units): lengths below 8 have a class each;
 * above, the power of two holding n picks the first level and the next
 * three bits the second, so every class spans at most an eighth of its
 * lengths.  A request is rounded up to the next class boundary, so the
 * head of any list at or above it fits without looking further.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "surogat/defs.h"
#include "surogat/ext.h"

#define SL_LOG   3
#define SL_COUNT (1u << SL_LOG)
#define FL_COUNT 64
/* How far a list is searched for a fit its class does not promise. */
#define SCAN_MAX 32

struct ext_node {
    uint64_t start;
    uint64_t n;
    struct ext_node *prev;
    struct ext_node *next;
};

/* uint64 -> node, open addressing with linear probing; NULL value = empty slot. */
struct ext_map {
    uint64_t *keys;
    struct ext_node **vals;
    size_t cap; /* a power of two */
    size_t used;
};

struct ext_alloc {
    struct ext_node *bins[FL_COUNT][SL_COUNT];
    uint64_t fl_map;
    uint8_t sl_map[FL_COUNT];
    struct ext_map by_start;
    struct ext_map by_end; /* keyed by start + n */
    uint64_t free_units;
    uint64_t free_extents;
};

/* ---- the maps ---- */

static size_t
map_home(const struct ext_map *m, uint64_t key)
{
    return ((size_t)((key * 0x9e3779b97f4a7c15ULL) >> 20) & (m->cap - 1));
}

static void map_put(struct ext_map *m, uint64_t key, struct ext_node *v);

static void
map_grow(struct ext_map *m)
{
    struct ext_map old = *m;

    m->cap = old.cap == 0 ? 64 : old.cap * 2;
    m->used = 0;
    m->keys = calloc(m->cap, sizeof *m->keys);
    m->vals = calloc(m->cap, sizeof *m->vals);
    AN(m->keys);
    AN(m->vals);
    for (size_t i = 0; i < old.cap; i++)
        if (old.vals[i] != NULL)
            map_put(m, old.keys[i], old.vals[i]);
    free(old.keys);
    free(old.vals);
}

static void
map_put(struct ext_map *m, uint64_t key, struct ext_node *v)
{
    size_t i;

    if ((m->used + 1) * 2 > m->cap)
        map_grow(m);
    for (i = map_home(m, key); m->vals[i] != NULL; i = (i + 1) & (m->cap - 1))
        SRG_ASSERT(m->keys[i] != key);
    m->keys[i] = key;
    m->vals[i] = v;
    m->used++;
}

static struct ext_node *
map_get(const struct ext_map *m, uint64_t key)
{
    if (m->cap == 0)
        return (NULL);
    for (size_t i = map_home(m, key); m->vals[i] != NULL; i = (i + 1) & (m->cap - 1))
        if (m->keys[i] == key)
            return (m->vals[i]);
    return (NULL);
}

/* Remove key, shifting later members of its probe run back so lookups never stop early. */
static void
map_del(struct ext_map *m, uint64_t key)
{
    size_t mask = m->cap - 1, i = map_home(m, key), j;

    while (m->keys[i] != key || m->vals[i] == NULL) {
        AN(m->vals[i]);
        i = (i + 1) & mask;
    }
    m->vals[i] = NULL;
    m->used--;
    for (j = (i + 1) & mask; m->vals[j] != NULL; j = (j + 1) & mask) {
        size_t h = map_home(m, m->keys[j]);
        /* Move j into the hole at i unless its home lies cyclically in (i, j]. */
        bool stays = i <= j ? (h > i && h <= j) : (h > i || h <= j);
        if (stays)
            continue;
        m->keys[i] = m->keys[j];
        m->vals[i] = m->vals[j];
        m->vals[j] = NULL;
        i = j;
    }
}

/* ---- size classes ---- */

static unsigned
log2_floor(uint64_t n)
{
    return (63u - (unsigned)__builtin_clzll(n));
}

static void
class_of(uint64_t n, unsigned *fl, unsigned *sl)
{
    unsigned l;

    if (n < SL_COUNT) {
        *fl = 0;
        *sl = (unsigned)n;
        return;
    }
    l = log2_floor(n);
    *fl = l - SL_LOG + 1;
    *sl = (unsigned)(n >> (l - SL_LOG)) & (SL_COUNT - 1);
}

/* The first class whose every member is at least n long. */
static void
class_above(uint64_t n, unsigned *fl, unsigned *sl)
{
    if (n >= SL_COUNT) {
        uint64_t step = (uint64_t)1 << (log2_floor(n) - SL_LOG);
        if (n <= UINT64_MAX - step)
            n = (n + step - 1) & ~(step - 1);
    }
    class_of(n, fl, sl);
}

static void
bin_insert(struct ext_alloc *a, struct ext_node *e)
{
    unsigned fl, sl;

    class_of(e->n, &fl, &sl);
    e->prev = NULL;
    e->next = a->bins[fl][sl];
    if (e->next != NULL)
        e->next->prev = e;
    a->bins[fl][sl] = e;
    a->fl_map |= 1ULL << fl;
    a->sl_map[fl] |= (uint8_t)(1u << sl);
}

static void
bin_remove(struct ext_alloc *a, struct ext_node *e)
{
    unsigned fl, sl;

    class_of(e->n, &fl, &sl);
    if (e->prev != NULL)
        e->prev->next = e->next;
    else
        a->bins[fl][sl] = e->next;
    if (e->next != NULL)
        e->next->prev = e->prev;
    if (a->bins[fl][sl] == NULL) {
        a->sl_map[fl] &= (uint8_t) ~(1u << sl);
        if (a->sl_map[fl] == 0)
            a->fl_map &= ~(1ULL << fl);
    }
}

/* ---- free extents ---- */

static void
node_add(struct ext_alloc *a, uint64_t start, uint64_t n)
{
    struct ext_node *e = malloc(sizeof *e);

    AN(e);
    e->start = start;
    e->n = n;
    bin_insert(a, e);
    map_put(&a->by_start, start, e);
    map_put(&a->by_end, start + n, e);
    a->free_units += n;
    a->free_extents++;
}

/* Unlink e from every index; the caller frees or reuses it. */
static void
node_del(struct ext_alloc *a, struct ext_node *e)
{
    bin_remove(a, e);
    map_del(&a->by_start, e->start);
    map_del(&a->by_end, e->start + e->n);
    a->free_units -= e->n;
    a->free_extents--;
}

struct ext_alloc *
ext_new(void)
{
    struct ext_alloc *a = calloc(1, sizeof *a);

    AN(a);
    return (a);
}

void
ext_destroy(struct ext_alloc **ap)
{
    struct ext_alloc *a = *ap;

    *ap = NULL;
    if (a == NULL)
        return;
    for (unsigned fl = 0; fl < FL_COUNT; fl++) {
        for (unsigned sl = 0; sl < SL_COUNT; sl++) {
            struct ext_node *e, *next;
            for (e = a->bins[fl][sl]; e != NULL; e = next) {
                next = e->next;
                free(e);
            }
        }
    }
    free(a->by_start.keys);
    free(a->by_start.vals);
    free(a->by_end.keys);
    free(a->by_end.vals);
    free(a);
}

/* The head of the first non-empty class at or above (fl, sl), or NULL. */
static struct ext_node *
find_from(const struct ext_alloc *a, unsigned fl, unsigned sl)
{
    uint64_t fls;
    unsigned sls = sl < SL_COUNT ? a->sl_map[fl] & (~0u << sl) & 0xffu : 0;

    if (sls == 0) {
        fls = fl + 1 < FL_COUNT ? a->fl_map & (~0ULL << (fl + 1)) : 0;
        if (fls == 0)
            return (NULL);
        fl = (unsigned)__builtin_ctzll(fls);
        sls = a->sl_map[fl];
    }
    return (a->bins[fl][__builtin_ctz(sls)]);
}

/* The longest free extent, from the highest non-empty class. */
static struct ext_node *
find_largest(const struct ext_alloc *a)
{
    struct ext_node *best = NULL;
    unsigned fl, sl, scanned = 0;

    if (a->fl_map == 0)
        return (NULL);
    fl = log2_floor(a->fl_map);
    sl = 31u - (unsigned)__builtin_clz(a->sl_map[fl]);
    for (struct ext_node *e = a->bins[fl][sl]; e != NULL && scanned++ < SCAN_MAX; e = e->next)
        if (best == NULL || e->n > best->n)
            best = e;
    return (best);
}

/* Within want's own class: members may be shorter or longer; look at a few. */
static struct ext_node *
find_in_class(const struct ext_alloc *a, uint64_t want)
{
    unsigned fl, sl, scanned = 0;

    class_of(want, &fl, &sl);
    for (struct ext_node *e = a->bins[fl][sl]; e != NULL && scanned++ < SCAN_MAX; e = e->next)
        if (e->n >= want)
            return (e);
    return (NULL);
}

uint64_t
ext_get(struct ext_alloc *a, uint64_t want, uint64_t min, uint64_t *start)
{
    struct ext_node *e;
    unsigned fl, sl;
    uint64_t got;

    AN(a);
    AN(start);
    if (want == 0)
        want = 1;
    if (min == 0 || min > want)
        min = want;
    class_above(want, &fl, &sl);
    e = find_from(a, fl, sl);
    if (e == NULL)
        e = find_in_class(a, want);
    if (e == NULL) {
        e = find_largest(a);
        if (e == NULL || e->n < min)
            return (0);
    }
    got = e->n < want ? e->n : want;
    node_del(a, e);
    *start = e->start;
    if (e->n > got)
        node_add(a, e->start + got, e->n - got);
    free(e);
    return (got);
}

void
ext_put(struct ext_alloc *a, uint64_t start, uint64_t n, uint64_t *mstart, uint64_t *mn)
{
    struct ext_node *l, *r;

    AN(a);
    AN(n);
    l = map_get(&a->by_end, start);
    if (l != NULL) {
        node_del(a, l);
        start = l->start;
        n += l->n;
        free(l);
    }
    r = map_get(&a->by_start, start + n);
    if (r != NULL) {
        node_del(a, r);
        n += r->n;
        free(r);
    }
    node_add(a, start, n);
    if (mstart != NULL)
        *mstart = start;
    if (mn != NULL)
        *mn = n;
}

uint64_t
ext_free_at(const struct ext_alloc *a, uint64_t start)
{
    const struct ext_node *e = map_get(&a->by_start, start);

    return (e != NULL ? e->n : 0);
}

void
ext_trim(struct ext_alloc *a, uint64_t start, uint64_t n, uint64_t keep, uint64_t *mstart,
         uint64_t *mn)
{
    SRG_ASSERT(keep > 0 && keep < n);
    ext_put(a, start + keep, n - keep, mstart, mn);
}

void
ext_stats(const struct ext_alloc *a, struct ext_stats *st)
{
    const struct ext_node *big = find_largest(a);

    st->free_units = a->free_units;
    st->free_extents = a->free_extents;
    st->largest = big != NULL ? big->n : 0;
}

bool
ext_is_free(const struct ext_alloc *a, uint64_t start, uint64_t n)
{
    for (unsigned fl = 0; fl < FL_COUNT; fl++)
        for (unsigned sl = 0; sl < SL_COUNT; sl++)
            for (const struct ext_node *e = a->bins[fl][sl]; e != NULL; e = e->next)
                if (start >= e->start && start + n <= e->start + e->n)
                    return (true);
    return (false);
}
