/*
 * A fetch for the cache alone: a background refresh of a stale object
 * (stale-while-revalidate, grace), on a pool task, with no request
 * behind it and nobody to answer.
 *
 * It is the fetch every request runs -- fetch_head(), fetch_body(),
 * fetch_done(), the backend request built by the one function that
 * builds them all, the backend hooks on the busy object's own policy
 * context (pol_bctx) -- driven here instead of by a request: what a
 * failure means is simple, as there is no client, so the stale copy
 * stays and a later request tries again.  The attempts are a request's:
 * the policy's "retry" within max_retries, failover to another backend of
 * the director when connecting fails.
 *
 * The busy object and its context belong to the task that runs this; its
 * workspace and receive buffer are that worker's.
 */
#include "config.h"

#include "surogat/be.h"
#include "surogat/defs.h"
#include "surogat/fetch.h"
#include "surogat/hsh.h"
#include "surogat/log.h"
#include "surogat/par.h"
#include "surogat/pol.h"
#include "surogat/stat.h"
#include "surogat/trace.h"

#include "fetch_priv.h"

bool
fetch_retry_allowed(enum h1_body body, unsigned retries)
{
    if (body != H1_BODY_NONE) {
        log_msg(LOG_WARNING, "policy: \"retry\" of a request with a body: its body is gone, "
                             "the fetch fails");
        return (false);
    }
    if (retries >= par.max_retries) {
        log_msg(LOG_WARNING, "policy: \"retry\" past max_retries (%u): the fetch fails",
                par.max_retries);
        return (false);
    }
    return (true);
}

/*
 * The next attempt on bo, as the caller first filled it (first), going
 * to be with the busy object oc still held.
 */
static void
again(struct busyobj *bo, const struct busyobj *first, struct be *be, struct cobj *oc)
{
    unsigned retries = bo->retries;
    struct dir *dir = bo->pol != NULL && bo->pol->dir != NULL ? bo->pol->dir : bo->dir;

    *bo = *first;
    bo->be = be;
    bo->dir = dir; /* where backend_fetch sent it, if it did */
    bo->oc = oc;
    bo->retries = retries;
}

void
fetch_refresh(struct busyobj *bo)
{
    const struct busyobj first = *bo;
    struct be *tried[FETCH_TRIED_MAX];
    unsigned ntried = 0;
    struct be *target = bo->be; /* the backend of the next attempt but backend_fetch's moves */
    struct cobj *oc;

    OBJ_CHECK(bo, BUSYOBJ_MAGIC);
    AN(bo->bg);
    AZ(bo->body_next);
    for (;;) {
        if (bo->be == NULL || be_local(bo->be)) {
            /* No healthy backend, or one that answers in place: nothing to refresh from. */
            TRACE(bo->trace, FETCH_ERROR, "no backend to fetch from");
            STAT_INC(cache_bgfetch_failed);
            hsh_abandon(&bo->oc, 0);
            return;
        }
        if (bo->pol != NULL)
            bo->pol->be_name = bo->be->name;
        bo->tried = tried;
        bo->ntried = ntried;
        switch (fetch_head(bo)) {
        case FETCH_OK:
            if (fetch_body(bo, NULL) != 0)
                STAT_INC(cache_bgfetch_failed);
            fetch_done(bo);
            return;
        case FETCH_REVALIDATED:
            fetch_done(bo);
            hsh_deref(&bo->renewed);
            return;
        case FETCH_FAILOVER:
            OBJ_TAKE(oc, &bo->oc, COBJ_MAGIC); /* still busy, for the next backend */
            target = bo->next_be;
            tried[ntried++] = bo->be;
            fetch_done(bo);
            STAT_INC(backend_failover);
            TRACE(bo->trace, RETRY, "failover to %s", target->name);
            again(bo, &first, target, oc);
            continue;
        case FETCH_RETRY:
            OBJ_TAKE(oc, &bo->oc, COBJ_MAGIC); /* kept for the fetch again */
            fetch_done(bo);
            if (!fetch_retry_allowed(bo->body, bo->retries)) {
                hsh_abandon(&oc, 0);
                STAT_INC(cache_bgfetch_failed);
                return;
            }
            bo->retries++;
            if (bo->pol != NULL)
                bo->pol->retries = bo->retries;
            STAT_INC(policy_retry);
            TRACE(bo->trace, RETRY, "the policy said retry (%u)", bo->retries);
            again(bo, &first, target, oc);
            continue;
        case FETCH_E_OVERFLOW:
            STAT_INC(ws_overflow);
            /* FALLTHROUGH */
        case FETCH_E_BUSY:
        case FETCH_E_CONNECT:
        case FETCH_E_SEND:
        case FETCH_E_TIMEOUT:
        case FETCH_E_BAD:
        case FETCH_E_CLIENT:
        case FETCH_E_POLICY:
        case FETCH_E_5XX:
            /* Nobody to answer: the stale copy stays, and a later request tries again. */
            fetch_done(bo);
            STAT_INC(cache_bgfetch_failed);
            return;
        case FETCH_UPGRADE:
        case FETCH_WAIT:
            break; /* a refresh asks for no upgrade, and blocks (bo->may_wait is off) */
        }
        SRG_WRONG("fetch_result of a refresh");
    }
}
