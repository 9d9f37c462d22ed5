/*
 * nghttp2's memory, one allocator per connection (mem_user_data is its
 * struct h2c), so that what a session holds can be told apart and, while
 * the connection rests, given back.
 *
 * Blocks below H2_MEM_MAP come from the heap as asked, with no header:
 * nghttp2's long-lived ones are powers of two (its stream map's 4 KiB,
 * the HPACK tables' 1 KiB), which any header would push into the next
 * size class.  Larger ones -- the session's frame buffer, 16 KiB kept for
 * the connection's life, of which an idle connection touched a page or
 * two -- are mapped on their own, listed on the connection: from the heap
 * such a block would be a recycled one, resident whole.  A block is known
 * as mapped by that list (a block or two a connection).  The stream map
 * (nghttp2 1.52 allocates 256 buckets of 16 bytes with the session and
 * never shrinks it) takes a page of its own: with no stream it is all
 * zeros, and a page of zeros can go back to the kernel and come back
 * zeroed at its next stream.  And the HPACK deflater's table of entries
 * (1 KiB, allocated with the session, the first block of that size) is
 * never written: our dynamic table is 0 (h2t_init()).  It takes a slot of
 * a reserved mapping that nothing touches, so it costs no memory; free
 * slots are listed apart, not in the slots.
 *
 * Resting connections.  A connection with no request and no output rests
 * (h2t__mem_rest()); one that has rested H2_REST_RELEASE gives back its
 * output buffer and the pages of its frame buffer and empty stream map.
 * Not at once: a client between two bursts of requests would pay a page
 * fault for each page and a 64 KiB allocation at every burst.  A
 * connection goes on the list of resting ones, oldest first, when it
 * begins to rest and is not on it already; the sweeper thread takes the
 * due ones off and, unless a thread works on the connection (its lock
 * taken, or t_rest 0) or it rested again since, gives back what it holds;
 * one that rested again goes back on the list.  So a connection costs the
 * list's lock at most once a H2_REST_RELEASE, however often it rests.
 *
 * Locks: rest_mtx ranks below c->mtx (taken holding it); the sweeper,
 * holding rest_mtx, only tries c->mtx.  A connection's last reference
 * takes it off the list first (h2t__mem_leave()), under rest_mtx, so the
 * sweeper never sees a connection being freed.  Everything else here is
 * under c->mtx, or before or after anyone else can reach c (the session's
 * creation and deletion).
 */
#include "config.h"

#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "surogat/defs.h"
#include "surogat/sess.h"
#include "surogat/tim.h"
#include "surogat/tls.h"

#include "h2t_priv.h"

#define H2_MEM_MAP (16 * 1024)
/* nghttp2 1.52's stream map as its session allocates it: 256 buckets of 16 bytes, a page. */
#define H2_SMAP_BUCKET 16
#define H2_SMAP_SIZE   4096

/* The deflater's table: 128 entries, nghttp2 1.52's for a 4 KiB table, made before 0 applies. */
#define H2_UNUSED_SLOT  1024
#define H2_UNUSED_SLOTS 65536 /* 64 MiB of address space: as many connections, then the heap */

double h2t__rest_release = H2_REST_RELEASE;
static pthread_mutex_t unused_mtx = PTHREAD_MUTEX_INITIALIZER;
static char *unused_base;
static uint32_t *unused_free; /* H2_UNUSED_SLOTS, nunused_free of them free slots' numbers */
static uint32_t nunused_free, unused_next;
static pthread_mutex_t rest_mtx = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t rest_cond;
static struct h2c *rest_head, *rest_tail; /* by t_listed, oldest first */
static pthread_t rest_thread;
static bool rest_running, rest_stopping;

static void *
mem_map(struct h2c *c, size_t size)
{
    struct h2_map *m = malloc(sizeof *m);
    void *p;

    if (m == NULL)
        return (NULL);
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        free(m);
        return (NULL);
    }
    *m = (struct h2_map){ p, size, c->maps };
    c->maps = m;
    return (p);
}

/* The entry before ptr's on c's list of mapped blocks (its link), or NULL: from the heap. */
static struct h2_map **
mapped(struct h2c *c, const void *ptr)
{
    for (struct h2_map **mp = &c->maps; *mp != NULL; mp = &(*mp)->next)
        if ((*mp)->p == ptr)
            return (mp);
    return (NULL);
}

static bool
is_unused(const void *p)
{
    return (unused_base != NULL && (const char *)p >= unused_base &&
            (const char *)p < unused_base + (size_t)H2_UNUSED_SLOTS * H2_UNUSED_SLOT);
}

/* A slot of the untouched mapping, or NULL when none is left. */
static void *
unused_get(void)
{
    void *p = NULL;

    AZ(pthread_mutex_lock(&unused_mtx));
    if (unused_base != NULL && nunused_free > 0)
        p = unused_base + (size_t)unused_free[--nunused_free] * H2_UNUSED_SLOT;
    else if (unused_base != NULL && unused_next < H2_UNUSED_SLOTS)
        p = unused_base + (size_t)unused_next++ * H2_UNUSED_SLOT;
    AZ(pthread_mutex_unlock(&unused_mtx));
    return (p);
}

static void
unused_put(void *p)
{
    AZ(pthread_mutex_lock(&unused_mtx));
    unused_free[nunused_free++] = (uint32_t)(((char *)p - unused_base) / H2_UNUSED_SLOT);
    AZ(pthread_mutex_unlock(&unused_mtx));
}

static void
mem_free(void *ptr, void *priv)
{
    struct h2c *c = priv;
    struct h2_map **mp, *m;

    if (ptr == NULL)
        return;
    if (ptr == c->smap)
        c->smap = NULL;
    if (is_unused(ptr)) {
        c->unused = NULL;
        unused_put(ptr);
        return;
    }
    mp = mapped(c, ptr);
    if (mp == NULL) {
        free(ptr);
        return;
    }
    m = *mp;
    *mp = m->next;
    if (m->p == c->fb)
        c->fb = NULL;
    AZ(munmap(m->p, m->len));
    free(m);
}

static void *
mem_malloc(size_t size, void *priv)
{
    struct h2c *c = priv;
    void *p;

    if (c->creating && !c->had_unused && size == H2_UNUSED_SLOT) {
        c->had_unused = true;
        p = unused_get();
        if (p != NULL) {
            c->unused = p;
            return (p);
        }
    }
    return (size >= H2_MEM_MAP ? mem_map(priv, size) : malloc(size));
}

static void *
mem_calloc(size_t nmemb, size_t size, void *priv)
{
    struct h2c *c = priv;
    void *p;

    if (size != 0 && nmemb > SIZE_MAX / size)
        return (NULL);
    if (c->creating && c->smap == NULL && size == H2_SMAP_BUCKET && nmemb * size == H2_SMAP_SIZE) {
        /* The stream map: a page to itself, to be given back while it is empty. */
        p = aligned_alloc(H2_SMAP_SIZE, H2_SMAP_SIZE);
        if (p != NULL)
            memset(p, 0, H2_SMAP_SIZE);
        c->smap = p;
        return (p);
    }
    if (nmemb * size >= H2_MEM_MAP)
        return (mem_map(priv, nmemb * size)); /* a fresh mapping is zero already */
    return (calloc(nmemb, size));
}

static void *
mem_realloc(void *ptr, size_t size, void *priv)
{
    struct h2c *c = priv;
    struct h2_map **mp;
    size_t old;
    void *p;

    if (ptr == NULL)
        return (mem_malloc(size, priv));
    if (ptr == c->smap)
        c->smap = NULL; /* not nghttp2 1.52's way: no longer known for the map */
    if (is_unused(ptr)) {
        /* Resized after all (not nghttp2 1.52's way): to the heap. */
        p = mem_malloc(size, priv);
        if (p != NULL) {
            memcpy(p, ptr, SRG_MIN((size_t)H2_UNUSED_SLOT, size));
            c->unused = NULL;
            unused_put(ptr);
        }
        return (p);
    }
    mp = mapped(c, ptr);
    if (mp == NULL && size < H2_MEM_MAP)
        return (realloc(ptr, size));
    /* Into or out of a mapping, or from one to another. */
    old = mp != NULL ? (*mp)->len : malloc_usable_size(ptr);
    p = mem_malloc(size, priv);
    if (p == NULL)
        return (NULL);
    memcpy(p, ptr, SRG_MIN(old, size));
    mem_free(ptr, priv);
    return (p);
}

void
h2t__mem_init(struct h2c *c, nghttp2_mem *mem)
{
    *mem = (nghttp2_mem){ .mem_user_data = c, .malloc = mem_malloc, .free = mem_free,
                          .calloc = mem_calloc, .realloc = mem_realloc };
    c->creating = true;
}

void
h2t__mem_started(struct h2c *c)
{
    c->creating = false;
    /* The one block a new session maps is its frame buffer (nghttp2 1.52: 16,394 bytes). */
    if (c->maps != NULL && c->maps->next == NULL)
        c->fb = c->maps->p;
}

static bool
all_zero(const void *p, size_t len)
{
    const uint64_t *w = p;
    uint64_t acc = 0;

    for (size_t i = 0; i < len / sizeof *w; i++)
        acc |= w[i];
    return (acc == 0);
}

/*
 * The whole pages inside [p, p + len), ours, back to the kernel.  Before
 * a block goes back to the heap, too: the allocator would keep the pages
 * a connection touched resident, as freed memory, for seconds.
 */
static void
drop_pages(void *p, size_t len)
{
    uintptr_t b = ((uintptr_t)p + 4095) & ~(uintptr_t)4095;
    uintptr_t e = ((uintptr_t)p + len) & ~(uintptr_t)4095;

    if (e > b)
        (void)madvise((void *)b, e - b, MADV_DONTNEED);
}

/* Under c->mtx, c rested long enough: give back what it holds for its traffic. */
static void
give_back(struct h2c *c)
{
    struct h2_map **mp;

    if (c->ob != NULL) {
        drop_pages(c->ob, H2_OB_SIZE);
        h2t__ob_free(c);
    }
    if (c->fb != NULL && !nghttp2_session_want_write(c->ngh)) {
        /* No frame on its way out: the buffer holds nothing nghttp2 needs. */
        mp = mapped(c, c->fb);
        AN(mp);
        drop_pages((*mp)->p, (*mp)->len);
    }
    if (c->smap != NULL && all_zero(c->smap, H2_SMAP_SIZE))
        drop_pages(c->smap, H2_SMAP_SIZE); /* no stream: zeros either way */
    if (c->sp->mux != NULL)
        tls_mux_release(c->sp->mux, true); /* its cipher states too */
}

/* Under rest_mtx. */
static void
rest_append(struct h2c *c, double t)
{
    if (rest_tail != NULL && t < rest_tail->t_listed)
        t = rest_tail->t_listed; /* kept in order: given back a little late at worst */
    c->t_listed = t;
    c->rnext = NULL;
    c->rprev = rest_tail;
    if (rest_tail != NULL)
        rest_tail->rnext = c;
    else
        rest_head = c;
    rest_tail = c;
}

/* Under rest_mtx. */
static void
rest_unlink(struct h2c *c)
{
    if (c->rprev != NULL)
        c->rprev->rnext = c->rnext;
    else
        rest_head = c->rnext;
    if (c->rnext != NULL)
        c->rnext->rprev = c->rprev;
    else
        rest_tail = c->rprev;
    c->rnext = c->rprev = NULL;
}

void
h2t__mem_rest(struct h2c *c)
{
    bool first;

    c->t_rest = tim_mono();
    if (c->listed)
        return; /* the sweeper looks at t_rest when its turn comes */
    AZ(pthread_mutex_lock(&rest_mtx));
    first = rest_head == NULL;
    rest_append(c, c->t_rest);
    c->listed = true;
    if (first)
        AZ(pthread_cond_signal(&rest_cond));
    AZ(pthread_mutex_unlock(&rest_mtx));
}

void
h2t__mem_busy(struct h2c *c)
{
    c->t_rest = 0;
}

/*
 * Under rest_mtx: c's turn came.  It goes to the end of the list, or
 * leaves it (c->listed, read under c->mtx, changes only with both locks).
 */
static void
sweep_one(struct h2c *c, double now)
{
    rest_unlink(c);
    if (pthread_mutex_trylock(&c->mtx) != 0) {
        rest_append(c, now); /* a thread works on it: looked at again later */
        return;
    }
    if (c->t_rest != 0 && !c->dead && now < c->t_rest + h2t__rest_release) {
        rest_append(c, c->t_rest); /* it rested again since it was listed */
    } else if (c->t_rest != 0 && !c->dead && (c->reader || c->nactive > 0 || c->ob_len > 0)) {
        rest_append(c, now); /* its last bytes still on their way out */
    } else {
        if (c->t_rest != 0 && !c->dead)
            give_back(c);
        c->listed = false; /* in use (it rests again later), dead, or given back */
    }
    AZ(pthread_mutex_unlock(&c->mtx));
}

void
h2t__mem_sweep(double now)
{
    struct h2c *c;

    AZ(pthread_mutex_lock(&rest_mtx));
    while ((c = rest_head) != NULL && c->t_listed + h2t__rest_release <= now)
        sweep_one(c, now);
    AZ(pthread_mutex_unlock(&rest_mtx));
}

static void *
rest_main(void *priv)
{
    struct timespec ts;
    double t;

    (void)priv;
    AZ(pthread_mutex_lock(&rest_mtx));
    while (!rest_stopping) {
        if (rest_head == NULL) {
            AZ(pthread_cond_wait(&rest_cond, &rest_mtx));
            continue;
        }
        t = rest_head->t_listed + h2t__rest_release;
        if (tim_mono() < t) {
            ts.tv_sec = (time_t)t;
            ts.tv_nsec = (long)((t - (double)ts.tv_sec) * 1e9);
            (void)pthread_cond_timedwait(&rest_cond, &rest_mtx, &ts);
            continue;
        }
        AZ(pthread_mutex_unlock(&rest_mtx));
        h2t__mem_sweep(tim_mono());
        AZ(pthread_mutex_lock(&rest_mtx));
    }
    AZ(pthread_mutex_unlock(&rest_mtx));
    return (NULL);
}

int
h2t__rest_start(void)
{
    pthread_condattr_t ca;
    void *p;

    /* Address space only: MAP_NORESERVE, and its pages are never touched. */
    p = mmap(NULL, (size_t)H2_UNUSED_SLOTS * H2_UNUSED_SLOT, PROT_READ | PROT_WRITE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p != MAP_FAILED) {
        unused_free = malloc(H2_UNUSED_SLOTS * sizeof *unused_free);
        AN(unused_free);
        nunused_free = unused_next = 0;
        unused_base = p;
    }

    AZ(pthread_condattr_init(&ca));
    AZ(pthread_condattr_setclock(&ca, CLOCK_MONOTONIC)); /* tim_mono()'s clock */
    AZ(pthread_cond_init(&rest_cond, &ca));
    AZ(pthread_condattr_destroy(&ca));
    rest_stopping = false;
    if (pthread_create(&rest_thread, NULL, rest_main, NULL) != 0) {
        AZ(pthread_cond_destroy(&rest_cond));
        return (-1);
    }
    rest_running = true;
    return (0);
}

void
h2t__rest_stop(void)
{
    if (!rest_running)
        return;
    AZ(pthread_mutex_lock(&rest_mtx));
    rest_stopping = true;
    AZ(pthread_cond_signal(&rest_cond));
    AZ(pthread_mutex_unlock(&rest_mtx));
    AZ(pthread_join(rest_thread, NULL));
    rest_running = false;
    AZ(pthread_cond_destroy(&rest_cond));
    if (unused_base != NULL && nunused_free == unused_next) {
        /* Every session is gone, and with it every slot (else the mapping stays). */
        AZ(munmap(unused_base, (size_t)H2_UNUSED_SLOTS * H2_UNUSED_SLOT));
        unused_base = NULL;
        free(unused_free);
        unused_free = NULL;
    }
}

void
h2t__mem_leave(struct h2c *c)
{
    AZ(pthread_mutex_lock(&rest_mtx));
    if (c->listed)
        rest_unlink(c); /* nobody else holds c: the sweeper only tries it under rest_mtx */
    c->listed = false;
    AZ(pthread_mutex_unlock(&rest_mtx));
}

void
h2t__mem_fini(struct h2c *c)
{
    SRG_ASSERT(c->maps == NULL); /* nghttp2_session_del() freed every block */
    SRG_ASSERT(c->smap == NULL && c->unused == NULL);
}
