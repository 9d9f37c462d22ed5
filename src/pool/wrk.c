/*
 * A worker's buffers and per-thread slots.  Buffers are sized from the
 * parameters when the worker starts and re-fitted at the start of each
 * task if a parameter grew, so a runtime param.set takes effect without
 * restarting threads.  Slots are registered from the main thread before
 * the pools start, and only read afterwards: no lock.
 */
#include "config.h"

#include <stdlib.h>

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
