/*
 * A worker's buffers.  Sized from the parameters when the worker starts
 * and re-fitted at the start of each task if a parameter grew, so a
 * runtime param.set takes effect without restarting threads.
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
