/*
 * The request's side of a fetch: it fills a busy object with what the
 * fetch needs of the request (src/fetch/ knows no request), and the
 * policy context of its backend hooks (pol_bctx: the request's head,
 * req.backend, its client), runs it, and
 * decides what its outcome means for the client: the response through the
 * deliverer, the stale copy when the backend fails and stale-if-error
 * allows, the policy's backend_error hook, a retry or a failover, an
 * error page.  Runs on the request's worker.
 *
 * The busy object lives in the request's workspace, with its
 * allocations, so that between sending its request and the backend's
 * answer the request can wait without its worker (FETCH_WAIT: the steps
 * stop at REQ_S_AWAIT, the waiter watches the backend socket, and
 * req__fetch_resume() goes on wherever a worker takes it); on the
 * worker's stack when it cannot.  The cache object it fills (a miss) is
 * handed from one attempt to the next, so that waiters keep waiting on
 * one fetch.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "surogat/be.h"
#include "surogat/defs.h"
#include "surogat/dlv.h"
#include "surogat/fetch.h"
#include "surogat/hsh.h"
#include "surogat/par.h"
#include "surogat/pol.h"
#include "surogat/req.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/tp.h"
#include "surogat/trace.h"
#include "surogat/wrk.h"
#include "surogat/wtr.h"
#include "surogat/ws.h"

#include "req_priv.h"

/* fetch's body_next: the request body, from the request's transport. */
static ssize_t
body_next(void *priv, const char **data)
{
    return (req_body_next(priv, data));
}

/* Whether the stale copy may stand in for a failed backend (RFC 5861 section 4). */
static bool
stale_usable(const struct hsh_stale *stale)
{
    return (stale != NULL && stale->oc != NULL &&
            (stale->verdict == FRESH_V_STALE_IF_ERROR ||
             stale->verdict == FRESH_V_STALE_WHILE_REVALIDATE));
}

void
req__busyobj(struct req *req, struct busyobj *bo, struct pol_bctx *bc, struct be *be,
             struct cobj *oc, const struct hsh_stale *stale)
{
    fetch_init(bo);
    pol_bctx_init(bc, req);
    bo->ws = req->ws;
    bo->rxbuf = req->wrk->be;
    bo->rxsize = req->wrk->be_size;
    bo->creq = req->http;
    bo->pol = bc;
    _Static_assert(sizeof bo->client_ip == sizeof req->client_ip, "one address form");
    memcpy(bo->client_ip, req->client_ip, sizeof bo->client_ip); /* NUL-terminated in both */
    bo->client_tls = req->client_tls;
    bo->sp = req->sp;
    bo->head_only = req->head_only;
    bo->body = req->body;
    bo->clen = req->clen;
    if (req->body != H1_BODY_NONE) {
        bo->body_next = body_next;
        bo->body_priv = req;
    }
    bo->be = be;
    bo->dir = req->dir;
    bo->key = req->lookup_key;
    bo->keylen = req->lookup_keylen;
    bo->oc = oc;
    if (stale != NULL)
        bo->stale = *stale; /* borrowed: the caller holds the reference */
    bo->stale_ok = stale_usable(stale);
    bo->retries = req->retries;
    bo->include = req->esi_level > 0;
    bo->upgrade = req->upgrade && oc == NULL;
    bo->pipe_bereq = req->st != NULL ? req->st->pipe_bereq : NULL;
    bo->interim = req__interim;
    bo->interim_priv = req;
}

/* What the backend hooks of an attempt chose, for the request's next one and its log. */
static void
bctx_back(struct req *req, const struct pol_bctx *bc)
{
    req->dir = bc->dir;
    req->be_name = bc->be_name;
    req->hooks |= bc->hooks;
}

static void
serve_stale(struct req *req, struct cobj *stale, unsigned status)
{
    char fwd[48];

    STAT_INC(cache_stale_if_error);
    snprintf(fwd, sizeof fwd, "fwd=stale; fwd-status=%u", status);
    dlv_obj(req, stale, tim_real(), fwd);
    req->outcome = REQ_O_STALE;
}

/* Give up without the policy: the stale copy if allowed, else the status. */
static void
fail_plain(struct req *req, const struct hsh_stale *stale, unsigned status)
{
    if (status >= 500 && stale_usable(stale)) {
        serve_stale(req, stale->oc, status);
        return;
    }
    (void)dlv_error(req, status, NULL, NULL);
}

/*
 * The backend_error hook on a failed fetch with nothing sent yet: a
 * synthetic beresp the script may edit and deliver.  POL_RETRY (allowed),
 * POL_DELIVER (sent), or anything else: the plain error follows.
 */
static enum pol_act
backend_error(struct req *req, struct pol_bctx *bc, unsigned status)
{
    struct http_hdr *hdrs = ws_alloc(req->ws, (POL_HDR_ROOM + 2) * sizeof *hdrs);
    struct http beresp;
    struct txt body = TXT_LIT("");
    enum pol_act act;

    if (hdrs == NULL) {
        STAT_INC(ws_overflow);
        return (POL_ERROR);
    }
    http_init(&beresp, hdrs, POL_HDR_ROOM + 2);
    beresp.proto = 11;
    beresp.status = status;
    beresp.reason = (struct txt){ http_reason(status), strlen(http_reason(status)) };
    act = pol_backend_error(bc, &beresp, &body);
    bctx_back(req, bc);
    if (act == POL_RETRY)
        return (fetch_retry_allowed(req->body, req->retries) ? POL_RETRY : POL_ABANDON);
    if (act != POL_DELIVER)
        return (act);
    if (dlv_send(req, &beresp, body) != 0)
        req->close = true;
    req->outcome = req->outcome == REQ_O_MISS ? REQ_O_MISS : REQ_O_PASS;
    return (POL_DELIVER);
}

/*
 * The fetch failed before anything reached the client: the hook, the
 * stale copy, or the status.  true: fetch again (backend_error said
 * "retry").
 */
static bool
fail(struct req *req, struct pol_bctx *bc, const struct hsh_stale *stale, unsigned status)
{
    if (req->t_first == 0 && !(status >= 500 && stale_usable(stale)) && pol_active() &&
        pol_has_backend_error()) {
        switch (backend_error(req, bc, status)) {
        case POL_RETRY:
            return (true);
        case POL_DELIVER:
            return (false);
        default:
            break;
        }
    }
    fail_plain(req, stale, status);
    return (false);
}

/*
 * beresp.do_stream = false on a miss: the body is stored first, with
 * nothing sent, and the client gets the complete object as a hit would
 * (conditions and ranges answered there).  Requests joining the fetch
 * stream from it as usual.
 */
static void
held_miss(struct req *req, struct busyobj *bo)
{
    struct cobj *held = bo->oc;
    char fwd[64];
    int rv;

    hsh_ref(held);
    rv = fetch_body(bo, NULL);
    fetch_done(bo);
    if (rv == 0 && held->body_complete) {
        snprintf(fwd, sizeof fwd, "fwd=%s; stored", bo->stale.fwd != NULL ? bo->stale.fwd : "miss");
        dlv_obj(req, held, tim_real(), fwd);
        req->outcome = REQ_O_MISS;
    } else {
        (void)dlv_error(req, 502, NULL, NULL);
    }
    hsh_deref(&held);
}

/* The response is in: to the client as it is read. */
static void
deliver(struct req *req, struct busyobj *bo)
{
    struct dlv_fetch df;
    char fwd[48];
    int rv;

    if (bo->oc == NULL && !bo->miss)
        req_invalidate(req, bo->beresp);
    /* An ESI page is assembled from the complete object, with its program. */
    if ((bo->hold || bo->esi != NULL) && bo->oc != NULL) {
        held_miss(req, bo);
        return;
    }
    snprintf(fwd, sizeof fwd, "%s", bo->stale.fwd != NULL ? bo->stale.fwd : "miss");
    if (dlv_fetch_begin(req, bo, bo->miss ? fwd : NULL, &df) != 0) {
        fetch_done(bo); /* the deliver hook answered otherwise, or restarts */
        return;
    }
    rv = fetch_body(bo, df.body ? &df.sink : NULL);
    if (bo->client_failed)
        req->close = true;
    /*
     * A busy object the fetch did not publish goes before the client
     * hears of it: a client told at once might ask again and find it.
     */
    fetch_done(bo);
    dlv_fetch_end(&df, rv);
}

/*
 * A fetch of the request's: what its attempts carry from one to the next,
 * in the request's workspace when it may wait for its backend without
 * its worker (on the worker's stack otherwise).
 */
struct req_fetch {
    struct busyobj bo;
    struct pol_bctx bc;
    struct be *tried[FETCH_TRIED_MAX];
    unsigned ntried;
    struct be *be;           /* the backend of the attempt */
    struct hsh_stale *stale; /* a miss's stale copy (the caller's reference), or NULL */
    bool may_wait;
};

/*
 * Run attempts until the request is answered (false) or the fetch waits
 * for its backend (true).  `resumed`: the attempt in rf->bo ended with
 * r, after it waited; else a new one begins for oc.
 */
static bool
attempts(struct req *req, struct req_fetch *rf, struct cobj *oc, bool resumed,
         enum fetch_result r)
{
    struct busyobj *bo = &rf->bo;
    struct pol_bctx *bc = &rf->bc;
    struct hsh_stale *stale = rf->stale;

    for (;; resumed = false) {
        if (resumed)
            goto ended;
        req->outcome = oc != NULL ? REQ_O_MISS : REQ_O_PASS;
        req->bereq_uncacheable = oc == NULL;
        if (rf->be != NULL && be_local(rf->be)) {
            /* A hook routed a fetch to static files: they are served, not fetched. */
            if (oc != NULL)
                hsh_abandon(&oc, 0);
            dlv_local(req, rf->be);
            return (false);
        }
        if (rf->be == NULL) {
            TRACE(req->trace, FETCH_ERROR, "no healthy backend to fetch from");
            /* No healthy backend.  backend_error may retry: bounded by max_retries. */
            pol_bctx_init(bc, req);
            bc->trace = trace_backend(req->trace);
            if (fail(req, bc, stale, 503)) {
                req->retries++;
                STAT_INC(policy_retry);
                continue;
            }
            if (oc != NULL)
                hsh_abandon(&oc, 0);
            return (false);
        }
        OBJ_CHECK(rf->be, BE_MAGIC);
        req->be_name = rf->be->name;
        req__busyobj(req, bo, bc, rf->be, oc, stale);
        bo->trace = bc->trace = trace_fetch(req->trace, req->ws, oc == NULL ? "pass" : "fetch");
        bo->tried = rf->tried;
        bo->ntried = rf->ntried;
        bo->may_wait = rf->may_wait;
        r = fetch_head(bo);
    ended:
        bctx_back(req, bc);
        req->bereq = bo->bereq;
        switch (r) {
        case FETCH_WAIT:
            return (true);
        case FETCH_OK:
            deliver(req, bo);
            return (false);
        case FETCH_UPGRADE:
            req__upgraded(req, bo);
            return (false);
        case FETCH_REVALIDATED:
            fetch_done(bo);
            dlv_obj(req, bo->renewed, tim_real(),
                    bo->stored ? "fwd=stale; fwd-status=304; stored" : "fwd=stale; fwd-status=304");
            if (bo->stored)
                req->outcome = REQ_O_REVALIDATED;
            hsh_deref(&bo->renewed);
            return (false);
        case FETCH_FAILOVER:
            oc = bo->oc; /* still busy, for the next backend */
            bo->oc = NULL;
            fetch_done(bo);
            rf->tried[rf->ntried++] = rf->be;
            rf->be = bo->next_be;
            STAT_INC(backend_failover);
            TRACE(bo->trace, RETRY, "failover to %s", rf->be->name);
            continue;
        case FETCH_RETRY:
            oc = bo->oc; /* kept for the fetch again */
            bo->oc = NULL;
            fetch_done(bo);
            if (!fetch_retry_allowed(req->body, req->retries)) {
                if (oc != NULL)
                    hsh_abandon(&oc, 0);
                fail_plain(req, stale, 503);
                return (false);
            }
            req->retries++;
            STAT_INC(policy_retry);
            TRACE(bo->trace, RETRY, "the policy said retry (%u)", req->retries);
            continue;
        case FETCH_E_CLIENT:
            fetch_done(bo);
            req->close = true;
            if (req->body_bad) {
                STAT_INC(client_req_400);
                (void)dlv_error(req, 400, NULL, NULL);
            }
            return (false); /* otherwise the client is gone: nobody to answer */
        case FETCH_E_OVERFLOW:
            /* The workspace ran out: a 500, and the connection closes (what was cut is unknown). */
            fetch_done(bo);
            STAT_INC(ws_overflow);
            STAT_INC(client_resp_500);
            req->close = true;
            fail_plain(req, stale, 500);
            return (false);
        case FETCH_E_5XX:
            fetch_done(bo);
            fail_plain(req, stale, bo->beresp->status);
            return (false);
        case FETCH_E_POLICY:
            /* backend_fetch or backend_response said "abandon", or failed. */
            fetch_done(bo);
            fail_plain(req, stale, 503);
            return (false);
        case FETCH_E_SEND:
            if (req->body != H1_BODY_NONE)
                req->close = true;
            /* FALLTHROUGH */
        case FETCH_E_BUSY:
        case FETCH_E_CONNECT:
        case FETCH_E_TIMEOUT:
        case FETCH_E_BAD:
            oc = bo->oc; /* kept, should backend_error say "retry" */
            bo->oc = NULL;
            fetch_done(bo);
            if (fail(req, bc, stale, fetch_result_status(r))) {
                req->retries++;
                STAT_INC(policy_retry);
                continue;
            }
            if (oc != NULL)
                hsh_abandon(&oc, 0); /* waiters retry: one of them fetches again */
            return (false);
        }
        SRG_WRONG("fetch_result");
    }
}

/*
 * Whether the request can wait for its backend without its worker: its
 * transport lets go of requests, it is no ESI include (its page holds
 * that worker), and backend_wait_worker is off.  A script's per-request
 * state goes with it (pol_park()), or, when it cannot, the request waits
 * on its worker after all (run_steps()).
 */
static bool
can_wait(const struct req *req)
{
    return (!par.backend_wait_worker && req->esi_up == NULL && req->tp != NULL &&
            req->tp->park != NULL);
}

/* The fetch is over: a miss lets its stale copy go. */
static void
finished(struct req_fetch *rf)
{
    if (rf->stale != NULL && rf->stale->oc != NULL)
        hsh_deref(&rf->stale->oc);
}

/* The fetch waits: the watch its steps park it with (req_park.c). */
static bool
waits(struct req *req, struct req_fetch *rf)
{
    req->st->fetch = rf;
    req->st->watch.fd = fetch_wait_fd(&rf->bo);
    req->st->watch.deadline = rf->bo.first_deadline;
    return (true);
}

bool
req__fetch(struct req *req, struct be *be, struct cobj *oc, struct hsh_stale *stale,
           bool may_wait)
{
    struct req_fetch local, *rf = NULL;

    OBJ_CHECK(req, REQ_MAGIC);
    if (may_wait && req->st != NULL && can_wait(req))
        rf = ws_alloc(req->ws, sizeof *rf);
    if (rf == NULL) {
        rf = &local;
        may_wait = false;
    }
    rf->ntried = 0;
    rf->be = be;
    rf->stale = stale;
    rf->may_wait = may_wait;
    if (attempts(req, rf, oc, false, FETCH_OK))
        return (waits(req, rf));
    finished(rf);
    return (false);
}

bool
req__fetch_resume(struct req *req)
{
    struct req_fetch *rf = req->st->fetch;
    enum fetch_result r;

    OBJ_CHECK(req, REQ_MAGIC);
    AN(rf);
    req->st->fetch = NULL;
    /*
     * Another worker, perhaps: its buffers, the request's memory where it
     * is now, and what the script kept of it on the worker it left.
     */
    rf->bo.ws = req->ws;
    pol_bctx_resume(&rf->bc, req);
    rf->bo.rxbuf = req->wrk->be;
    rf->bo.rxsize = req->wrk->be_size;
    r = fetch_head_resume(&rf->bo, req->st->watch.expired);
    if (attempts(req, rf, NULL, true, r))
        return (waits(req, rf));
    finished(rf);
    return (false);
}

void
req__fetch_drop(struct req *req)
{
    struct req_fetch *rf = req->st->fetch;

    AN(rf);
    req->st->fetch = NULL;
    fetch_done(&rf->bo);
    finished(rf);
}

bool
req_fetch_pass(struct req *req, struct be *be)
{
    STAT_INC(cache_pass);
    return (req__fetch(req, be, NULL, NULL, true));
}

bool
req_fetch_miss(struct req *req, struct be *be, struct cobj **ocp, struct hsh_stale *stale)
{
    struct cobj *oc;

    OBJ_TAKE(oc, ocp, COBJ_MAGIC);
    return (req__fetch(req, be, oc, stale, true));
}
