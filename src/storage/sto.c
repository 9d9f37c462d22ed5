/*
 * The stores: parsing -s, choosing a store for a new body, and the byte
 * accounts.  Each store charges before it allocates, with atomics, so
 * concurrent fetches can never overshoot its size together.
 *
 * One thread of the stores' own gives back quarantined space (sto.h,
 * sto_seg_file()): it sweeps every SWEEP_EVERY while a store holds some,
 * and sleeps until a store quarantines more.  Its lock, sweep_mtx, is a
 * leaf: kicking it never waits on anything else.
 */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "surogat/defs.h"
#include "surogat/num.h"
#include "surogat/sb.h"
#include "surogat/stat.h"

#include "sto_priv.h"

#define STV_MAX 16

/*
 * Seconds between sweeps while space is quarantined: a client that has
 * read its bytes gives them back within about this, and each store backs
 * off per extent from the ones still held, so a slow client costs little.
 */
#define SWEEP_EVERY 0.02

static struct stv *stores[STV_MAX];
static unsigned nstores;

/* A body's store (b->stv is its id). */
static struct stv *
stv_of(const struct sto_body *b)
{
    SRG_ASSERT(b->stv > 0 && b->stv <= nstores);
    return (stores[b->stv - 1]);
}

static pthread_mutex_t sweep_mtx = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sweep_cv;
static pthread_t sweep_thr;
static bool sweep_running, sweep_stop, sweep_kicked;

static struct stv *
stv_add(const struct stv_ops *ops)
{
    struct stv *stv;

    OBJ_NEW(stv, STV_MAGIC);
    stv->ops = ops;
    return (stv);
}

int
sto_init(const char *spec, struct sb *err)
{
    const struct stv_ops *ops;
    const char *args;
    struct stv *stv;
    int rv;

    if (nstores == STV_MAX) {
        sb_printf(err, "-s %s: at most %d stores", spec, STV_MAX);
        return (-1);
    }
    if (strncmp(spec, "malloc,", 7) == 0) {
        ops = &sto_malloc_ops;
        args = spec + 7;
    } else if (strncmp(spec, "file,", 5) == 0) {
        ops = &sto_file_ops;
        args = spec + 5;
    } else {
        sb_printf(err, "-s %s: expected malloc,SIZE or file,PATH,SIZE", spec);
        return (-1);
    }
    stv = stv_add(ops);
    rv = ops == &sto_malloc_ops ? sto_malloc_new(stv, args, err) : sto_file_new(stv, args, err);
    if (rv != 0) {
        OBJ_FREE(&stv);
        return (-1);
    }
    STAT_ADD(sto_size, stv->size);
    stv->id = (uint8_t)(nstores + 1);
    stores[nstores++] = stv;
    return (0);
}

void
sto_fini(void)
{
    if (sweep_running) {
        AZ(pthread_mutex_lock(&sweep_mtx));
        sweep_stop = true;
        AZ(pthread_cond_signal(&sweep_cv));
        AZ(pthread_mutex_unlock(&sweep_mtx));
        AZ(pthread_join(sweep_thr, NULL));
        AZ(pthread_cond_destroy(&sweep_cv));
        sweep_running = false;
    }
    for (unsigned i = 0; i < nstores; i++) {
        struct stv *stv = stores[i];
        if (stv->ops->fini != NULL)
            stv->ops->fini(stv);
        STAT_ADD(sto_size, -stv->size);
        OBJ_FREE(&stores[i]);
    }
    nstores = 0;
}

int
sto__charge(struct stv *stv, uint64_t n)
{
    uint64_t cur = __atomic_load_n(&stv->used, __ATOMIC_RELAXED);

    do {
        if (cur + n > stv->size)
            return (-1);
    } while (!__atomic_compare_exchange_n(&stv->used, &cur, cur + n, true, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
    STAT_ADD(sto_bytes, n);
    return (0);
}

void
sto__credit(struct stv *stv, uint64_t n)
{
    __atomic_fetch_sub(&stv->used, n, __ATOMIC_RELAXED);
    STAT_ADD(sto_bytes, -n);
}

int
sto_open(struct sto_body *b, struct sto_meta *m)
{
    struct stv *best = NULL;
    uint64_t room = 0;

    AN(b);
    SRG_ASSERT(b->stv == 0 && b->len == 0);
    SRG_ASSERT(nstores > 0);
    /* Most room first: stores fill evenly, and eviction starts where it is due. */
    for (unsigned i = 0; i < nstores; i++) {
        uint64_t used = __atomic_load_n(&stores[i]->used, __ATOMIC_RELAXED);
        uint64_t r = stores[i]->size > used ? stores[i]->size - used : 0;
        if (best == NULL || r > room) {
            best = stores[i];
            room = r;
        }
    }
    b->stv = best->id;
    b->verified = true;
    if (best->ops->open(best, b, m) != 0)
        return (-1);
    return (0);
}

int
sto_append(struct sto_body *b, const void *p, size_t len)
{
    OBJ_CHECK(stv_of(b), STV_MAGIC);
    return (stv_of(b)->ops->append(stv_of(b), b, p, len));
}

void
sto_body_trim(struct sto_body *b)
{
    if (b->stv != 0)
        stv_of(b)->ops->trim(stv_of(b), b);
}

bool
sto_trim_in_place(const struct sto_body *b)
{
    return (b->stv == 0 || stv_of(b)->ops->trim_in_place);
}

void
sto_seal(struct sto_body *b)
{
    if (b->stv != 0 && stv_of(b)->ops->seal != NULL)
        stv_of(b)->ops->seal(stv_of(b), b);
}

void
sto_retire(struct sto_body *b)
{
    if (b->stv != 0 && stv_of(b)->ops->retire != NULL)
        stv_of(b)->ops->retire(stv_of(b), b);
}

void
sto_body_free(struct sto_body *b)
{
    if (b->stv != 0)
        stv_of(b)->ops->free(stv_of(b), b);
    memset(b, 0, sizeof *b);
}

void
sto_body_release(struct sto_body *b)
{
    if (b->stv != 0)
        stv_of(b)->ops->release(stv_of(b), b);
    memset(b, 0, sizeof *b);
}

void
sto_set_attr(struct sto_body *b, const void *attr, size_t len)
{
    if (b->stv != 0 && stv_of(b)->ops->set_attr != NULL)
        stv_of(b)->ops->set_attr(stv_of(b), b, attr, len);
}

int
sto_set_tail(struct sto_body *b, const void *p, size_t len)
{
    OBJ_CHECK(stv_of(b), STV_MAGIC);
    AN(p);
    SRG_ASSERT(len > 0);
    return (stv_of(b)->ops->set_tail(stv_of(b), b, p, len));
}

const void *
sto_tail(const struct sto_body *b, size_t *len)
{
    *len = 0;
    if (b->stv == 0)
        return (NULL);
    return (stv_of(b)->ops->tail(stv_of(b), b, len));
}

bool
sto_verify(struct sto_body *b)
{
    if (__atomic_load_n(&b->verified, __ATOMIC_ACQUIRE))
        return (true);
    if (b->stv == 0 || stv_of(b)->ops->verify == NULL || !stv_of(b)->ops->verify(stv_of(b), b))
        return (false);
    __atomic_store_n(&b->verified, true, __ATOMIC_RELEASE);
    return (true);
}

bool
sto_seg_file(struct sto_body *b, const struct sto_seg *s, int *fd, off_t *off)
{
    if (b->stv == 0 || stv_of(b)->ops->seg_file == NULL)
        return (false);
    return (stv_of(b)->ops->seg_file(stv_of(b), b, s, fd, off));
}

uint64_t
sto_sweep(void)
{
    uint64_t held = 0;

    for (unsigned i = 0; i < nstores; i++)
        if (stores[i]->ops->sweep != NULL)
            held += stores[i]->ops->sweep(stores[i]);
    return (held);
}

void
sto__kick(void)
{
    if (!sweep_running)
        return; /* before the start (recovery) or in tests: sto_start() sweeps first */
    AZ(pthread_mutex_lock(&sweep_mtx));
    sweep_kicked = true;
    AZ(pthread_cond_signal(&sweep_cv));
    AZ(pthread_mutex_unlock(&sweep_mtx));
}

/* Under sweep_mtx: until kicked or stopped, or at most secs (< 0: no limit). */
static void
sweep_wait(double secs)
{
    struct timespec ts;
    double t;

    if (secs < 0) {
        AZ(pthread_cond_wait(&sweep_cv, &sweep_mtx));
        return;
    }
    AZ(clock_gettime(CLOCK_MONOTONIC, &ts));
    t = (double)ts.tv_sec + ts.tv_nsec * 1e-9 + secs;
    ts.tv_sec = (time_t)t;
    ts.tv_nsec = (long)((t - floor(t)) * 1e9);
    (void)pthread_cond_timedwait(&sweep_cv, &sweep_mtx, &ts);
}

static void *
sweep_thread(void *arg)
{
    uint64_t held;

    (void)arg;
    stat_thread_enter();
    AZ(pthread_mutex_lock(&sweep_mtx));
    while (!sweep_stop) {
        sweep_kicked = false;
        AZ(pthread_mutex_unlock(&sweep_mtx));
        held = sto_sweep();
        AZ(pthread_mutex_lock(&sweep_mtx));
        if (!sweep_stop && !sweep_kicked)
            sweep_wait(held > 0 ? SWEEP_EVERY : -1.0);
    }
    AZ(pthread_mutex_unlock(&sweep_mtx));
    stat_thread_leave();
    return (NULL);
}

int
sto_start(void)
{
    pthread_condattr_t ca;
    bool any = false;

    SRG_ASSERT(!sweep_running);
    for (unsigned i = 0; i < nstores; i++)
        any = any || stores[i]->ops->sweep != NULL;
    if (!any)
        return (0);
    AZ(pthread_condattr_init(&ca));
    AZ(pthread_condattr_setclock(&ca, CLOCK_MONOTONIC));
    AZ(pthread_cond_init(&sweep_cv, &ca));
    AZ(pthread_condattr_destroy(&ca));
    sweep_stop = false;
    if (pthread_create(&sweep_thr, NULL, sweep_thread, NULL) != 0) {
        AZ(pthread_cond_destroy(&sweep_cv));
        return (-1);
    }
    (void)pthread_setname_np(sweep_thr, "sto-sweep");
    sweep_running = true;
    return (0);
}

void
sto_recover(sto_recover_f *cb)
{
    for (unsigned i = 0; i < nstores; i++)
        if (stores[i]->ops->recover != NULL)
            stores[i]->ops->recover(stores[i], cb);
}

/*
 * jemalloc's size classes (the allocator surogatd links): multiples of 16
 * up to 128 (8 below 16), then four classes per doubling, so a class
 * wastes at most a fifth; pages beyond 16 KiB are in the same steps.
 * glibc's malloc rounds n + 8 up to 16, never more than this.  The extra
 * is jemalloc's metadata and slab slack per allocation, as its statistics
 * show it for a cache full of 1 KiB objects (bench/memory.py, about 24
 * bytes per allocation).
 */
#define STO_HEAP_EXTRA 24

size_t
sto_heap_cost(size_t n)
{
    size_t step;

    if (n <= 8)
        return (8 + STO_HEAP_EXTRA);
    if (n <= 128)
        return (((n + 15) & ~(size_t)15) + STO_HEAP_EXTRA);
    /* Four classes per power of two: the step is a quarter of the power below n. */
    step = (size_t)1 << (63 - __builtin_clzll((unsigned long long)(n - 1)) - 2);
    return (((n + step - 1) & ~(step - 1)) + STO_HEAP_EXTRA);
}

uint64_t
sto_size(void)
{
    uint64_t n = 0;

    for (unsigned i = 0; i < nstores; i++)
        n += stores[i]->size;
    return (n);
}

uint64_t
sto_used(void)
{
    uint64_t n = 0;

    for (unsigned i = 0; i < nstores; i++)
        n += __atomic_load_n(&stores[i]->used, __ATOMIC_RELAXED);
    return (n);
}

void
sto_list(struct sb *out)
{
    for (unsigned i = 0; i < nstores; i++) {
        const struct stv *stv = stores[i];
        uint64_t used = __atomic_load_n(&stv->used, __ATOMIC_RELAXED);
        char hs[NUM_HUMAN_LEN], hu[NUM_HUMAN_LEN];
        /* The byte counts first, for scripts; the same for people after them. */
        sb_printf(out, "s%u %s size=%llu used=%llu (%s, %s used)", i, stv->ops->name,
                  (unsigned long long)stv->size, (unsigned long long)used,
                  num_human_bytes(stv->size, hs), num_human_bytes(used, hu));
        if (stv->ops->list != NULL)
            stv->ops->list(stv, out);
        sb_cat(out, "\n");
    }
}
