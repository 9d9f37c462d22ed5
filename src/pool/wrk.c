/*
 * A worker's buffers and per-thread slots.  Buffers are sized from the
 * parameters when the worker starts and re-fitted at the start of each
 * task if a parameter grew, so a runtime param.set takes effect without
 * restarting threads.  Slots are registered from the main thread before
 * the pools start, and only read afterwards: no lock.
 */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "surogat/defs.h"
#include "surogat/par.h"
#include "surogat/wrk.h"

/* Room past the head limits for body bytes read along with the head. */
#define WRK_BODY_ROOM (64 * 1024)

static void
fit(char **buf, size_t *have, size_t want)
{
    if (*buf != NULL && *have == want)
        return;
    free(*buf);
    *buf = malloc(want);
    AN(*buf);
    *have = want;
}

/*
 * The spare sets (wrk.h): a stack linked through the workspace blocks
 * themselves, so that it needs no memory of its own.  `lent`: sets held
 * by parked requests (taken, not yet given back or freed).
 */
struct spare {
    struct spare *next;
    char *rx;
    size_t ws_size, rx_size;
};
static pthread_mutex_t spare_mtx = PTHREAD_MUTEX_INITIALIZER;
static struct spare *spares;
static unsigned nspare, lent;

static void
spare_free_list(struct spare *sp)
{
    while (sp != NULL) {
        struct spare *next = sp->next;
        free(sp->rx);
        free(sp); /* the workspace block */
        sp = next;
    }
}

unsigned
wrk_spare_count(void)
{
    unsigned n;

    AZ(pthread_mutex_lock(&spare_mtx));
    n = nspare;
    AZ(pthread_mutex_unlock(&spare_mtx));
    return (n);
}

void
wrk_spare_trim(void)
{
    struct spare *list = NULL;

    AZ(pthread_mutex_lock(&spare_mtx));
    if (lent == 0) {
        list = spares;
        spares = NULL;
        nspare = 0;
    }
    AZ(pthread_mutex_unlock(&spare_mtx));
    spare_free_list(list);
}

static const struct wrk_slot *slots[WRK_SLOTS_MAX];
static unsigned nslots;

void
wrk_slot_register(const struct wrk_slot *slot)
{
    AN(slot);
    for (unsigned i = 0; i < nslots; i++)
        if (slots[i] == slot)
            return; /* a module initialised twice (tests) registers once */
    SRG_ASSERT(nslots < WRK_SLOTS_MAX);
    slots[nslots++] = slot;
}

void
wrk_slots_init(struct wrk *wrk)
{
    OBJ_CHECK(wrk, WRK_MAGIC);
    for (unsigned i = 0; i < nslots; i++)
        if (slots[i]->init != NULL)
            slots[i]->init(wrk);
}

void
wrk_slots_fini(struct wrk *wrk)
{
    OBJ_CHECK(wrk, WRK_MAGIC);
    for (unsigned i = nslots; i-- > 0;)
        if (slots[i]->fini != NULL)
            slots[i]->fini(wrk);
}

void
wrk_slots_idle(struct wrk *wrk, enum wrk_moment when)
{
    for (unsigned i = 0; i < nslots; i++)
        if (slots[i]->idle != NULL)
            slots[i]->idle(wrk, when);
}

void
wrk_buffers_fit(struct wrk *wrk)
{
    OBJ_CHECK(wrk, WRK_MAGIC);
    if (wrk->ws_block == NULL || wrk->ws_size != par.workspace_client) {
        fit(&wrk->ws_block, &wrk->ws_size, par.workspace_client);
        ws_init(&wrk->ws, wrk->ws_block, wrk->ws_size);
    }
    fit(&wrk->rx, &wrk->rx_size, par.http_req_size + WRK_BODY_ROOM);
    fit(&wrk->be, &wrk->be_size, par.http_resp_size + WRK_BODY_ROOM);
}

void
wrk_buffers_free(struct wrk *wrk)
{
    OBJ_CHECK(wrk, WRK_MAGIC);
    free(wrk->ws_block);
    free(wrk->rx);
    free(wrk->be);
    wrk->ws_block = wrk->rx = wrk->be = NULL;
    wrk->ws_size = wrk->rx_size = wrk->be_size = 0;
}

/* The whole pages of p[from .. len) hold nothing: the kernel may have them back. */
static void
release_tail(char *p, size_t from, size_t len)
{
    static size_t page;
    uintptr_t a, e;

    if (page == 0)
        page = (size_t)sysconf(_SC_PAGESIZE);
    a = ((uintptr_t)p + from + page - 1) & ~(uintptr_t)(page - 1);
    e = ((uintptr_t)p + len) & ~(uintptr_t)(page - 1);
    /*
     * Zero pages on the next touch; the allocator's own pages (large
     * blocks are whole extents of their own) are never in the range.
     */
    if (e > a)
        (void)madvise((void *)a, (size_t)(e - a), MADV_DONTNEED);
}

void
wrk_mem_take(struct wrk *wrk, struct wrk_mem *m, size_t rx_used, bool brief)
{
    struct spare *sp;

    OBJ_CHECK(wrk, WRK_MAGIC);
    AN(m);
    m->ws_block = wrk->ws_block;
    m->ws_size = wrk->ws_size;
    m->ws = wrk->ws;
    m->rx = wrk->rx;
    m->rx_size = wrk->rx_size;
    wrk->ws_block = wrk->rx = NULL;
    wrk->ws_size = wrk->rx_size = 0;
    AZ(pthread_mutex_lock(&spare_mtx));
    lent++;
    if ((sp = spares) != NULL) {
        spares = sp->next;
        nspare--;
    }
    AZ(pthread_mutex_unlock(&spare_mtx));
    /* As they are: wrk_buffers_fit() refits one a parameter changed since. */
    if (sp != NULL) {
        wrk->rx = sp->rx;
        wrk->rx_size = sp->rx_size;
        wrk->ws_size = sp->ws_size;
        wrk->ws_block = (char *)sp;
        ws_init(&wrk->ws, wrk->ws_block, wrk->ws_size);
    }
    wrk_buffers_fit(wrk);
    if (brief)
        return;
    /* m may be in the block: read m->ws before its pages go. */
    release_tail(m->ws_block, (size_t)(m->ws.f - m->ws_block), m->ws_size);
    release_tail(m->rx, rx_used, m->rx_size);
}

void
wrk_mem_give(struct wrk *wrk, struct wrk_mem *m)
{
    struct spare *sp;

    OBJ_CHECK(wrk, WRK_MAGIC);
    AN(m);
    AN(wrk->ws_block);
    sp = (struct spare *)(void *)wrk->ws_block;
    sp->rx = wrk->rx;
    sp->ws_size = wrk->ws_size;
    sp->rx_size = wrk->rx_size;
    AZ(pthread_mutex_lock(&spare_mtx));
    SRG_ASSERT(lent > 0);
    lent--;
    if (nspare < WRK_SPARE_MAX) {
        sp->next = spares;
        spares = sp;
        nspare++;
        sp = NULL;
    }
    AZ(pthread_mutex_unlock(&spare_mtx));
    if (sp != NULL) {
        sp->next = NULL;
        spare_free_list(sp);
    }
    wrk->ws_block = m->ws_block;
    wrk->ws_size = m->ws_size;
    wrk->ws = m->ws;
    wrk->rx = m->rx;
    wrk->rx_size = m->rx_size;
}

void
wrk_mem_free(struct wrk_mem *m)
{
    char *ws_block = m->ws_block, *rx = m->rx;

    AZ(pthread_mutex_lock(&spare_mtx));
    SRG_ASSERT(lent > 0);
    lent--;
    AZ(pthread_mutex_unlock(&spare_mtx));
    free(rx);
    free(ws_block); /* m may be in it */
}
