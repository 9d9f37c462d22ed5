/*
 * Background refresh (bgfetch): a request that finds a stale object in
 * its stale-while-revalidate or grace window, with nobody refreshing it,
 * is answered with the stale copy at once while a pool task refreshes
 * the object -- revalidating it when it has a validator, so that a 304
 * renews it.
 *
 * The refresh is a busy object with no request behind it: the request
 * fills one as for its own miss (req__busyobj()), with the policy context
 * of its backend hooks, then detaches both from itself, since it ends
 * long before the task runs: its head as the policy left it (what a miss
 * would send: the URL, every field, the ones recv set), the cache key and
 * the director are copied to the heap; the client's facts are copied into
 * the context (client.ip, client.tls ...: so X-Forwarded-For and -Proto
 * say what the request's own miss would), which also holds the program
 * the request ran under, so that a reload meanwhile leaves the refresh
 * its backends and directors.  The task then gives the busy object its
 * worker's buffers and runs fetch_refresh(): the fetch every request
 * runs, with nobody to answer.  The conditional fields come from the
 * stale copy's ETag and Last-Modified, added by the fetch itself.  The
 * task owns the busy object, its context, and a reference to the stale
 * copy until it ends.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "surogat/defs.h"
#include "surogat/fetch.h"
#include "surogat/hsh.h"
#include "surogat/http.h"
#include "surogat/pol.h"
#include "surogat/pool.h"
#include "surogat/req.h"
#include "surogat/sess.h"
#include "surogat/stat.h"
#include "surogat/trace.h"
#include "surogat/wrk.h"

#include "req_priv.h"

/* Field slots the copied head keeps free: the backend hooks may add to it (the cluster's). */
#define BG_HDR_ROOM 4

struct bgfetch {
    unsigned magic;
#define BGFETCH_MAGIC 0x7c2e91b4
    struct pool_task task;
    struct busyobj bo;      /* the refresh, as the request filled it */
    struct pol_bctx pol;    /* its backend hooks' context, detached from the request */
    struct hsh_stale stale; /* the stale copy it revalidates (referenced; bo borrows it) */
    struct http creq[1];    /* the request's head, copied */
    struct trace_link tl;   /* its transaction, linked to the request's; empty: untraced */
    struct http_hdr hdr[];  /* creq's fields; then the strings they and the key point to */
};

/* A copy of t at *p. */
static struct txt
put(char **p, struct txt t)
{
    struct txt c = { *p, t.len };

    if (t.len > 0)
        memcpy(*p, t.b, t.len);
    *p += t.len;
    return (c);
}

static void
bg_task(struct wrk *wrk, void *priv)
{
    struct bgfetch *bg = priv;
    struct trace_tx *tx;

    OBJ_CHECK(bg, BGFETCH_MAGIC);
    wrk_buffers_fit(wrk);
    bg->bo.ws = &wrk->ws;
    bg->bo.rxbuf = wrk->be;
    bg->bo.rxsize = wrk->be_size;
    bg->pol.wrk = wrk;
    bg->pol.ws = &wrk->ws;
    tx = bg->bo.trace = bg->pol.trace = trace_bg_begin(&wrk->ws, &bg->tl);
    STAT_INC(cache_bgfetch);
    fetch_refresh(&bg->bo); /* takes the busy object */
    trace_bg_end(tx);
    hsh_deref(&bg->stale.oc);
    pol_bctx_fini(&bg->pol);
    OBJ_FREE(&bg);
}

/*
 * The refresh's busy object, filled from req as its miss would be, then
 * made independent of it: the head and key copied, no client connection,
 * no request body, nobody for interim responses.
 */
static struct bgfetch *
bg_new(struct req *req, struct be *be, struct cobj **ocp, struct hsh_stale *stale)
{
    const struct http *hp = req->http;
    unsigned nslot = hp->nhdr + BG_HDR_ROOM;
    size_t len = hp->method.len + hp->url.len + req->lookup_keylen;
    struct bgfetch *bg;
    char *p;

    for (unsigned i = 0; i < hp->nhdr; i++)
        len += hp->hdr[i].name.len + hp->hdr[i].val.len;
    bg = calloc(1, sizeof *bg + nslot * sizeof bg->hdr[0] + len);
    AN(bg);
    bg->magic = BGFETCH_MAGIC;
    bg->stale = *stale;
    stale->oc = NULL;
    req__busyobj(req, &bg->bo, &bg->pol, be, *ocp, &bg->stale);
    *ocp = NULL; /* taken */
    pol_bctx_detach(&bg->pol, req);
    /* The head as the policy left it: what the request's own miss would send. */
    p = (char *)&bg->hdr[nslot];
    http_init(bg->creq, bg->hdr, nslot);
    bg->creq->method = put(&p, hp->method);
    bg->creq->url = put(&p, hp->url);
    bg->creq->proto = hp->proto;
    for (unsigned i = 0; i < hp->nhdr; i++) {
        bg->hdr[i].name = put(&p, hp->hdr[i].name);
        bg->hdr[i].val = put(&p, hp->hdr[i].val);
    }
    bg->creq->nhdr = hp->nhdr;
    bg->bo.creq = bg->pol.creq = bg->creq;
    if (req->lookup_key != NULL) {
        bg->bo.key = bg->pol.key = p;
        put(&p, (struct txt){ req->lookup_key, req->lookup_keylen });
    }
    bg->bo.ws = NULL; /* the task's worker's, when it runs */
    bg->bo.rxbuf = NULL;
    bg->bo.rxsize = 0;
    bg->bo.sp = NULL;
    bg->bo.body = H1_BODY_NONE;
    bg->bo.clen = 0;
    bg->bo.body_next = NULL;
    bg->bo.body_priv = NULL;
    bg->bo.interim = NULL;
    bg->bo.interim_priv = NULL;
    bg->bo.pipe_bereq = NULL;
    bg->bo.upgrade = false;
    bg->bo.retries = bg->pol.retries = 0;
    bg->pol.uncacheable = false;
    bg->bo.bg = true;
    bg->task.func = bg_task;
    bg->task.priv = bg;
    return (bg);
}

void
req_fetch_bg(struct req *req, struct be *be, struct cobj **ocp, struct hsh_stale *stale)
{
    struct bgfetch *bg;

    OBJ_CHECK(stale->oc, COBJ_MAGIC);
    bg = bg_new(req, be, ocp, stale);
    TRACE_BG_LINK(req->trace, &bg->tl);
    if (be != NULL && pool_submit(req->sp->pool, &bg->task, POOL_PRIO_BG) == 0)
        return;
    /* No room in the queue: no refresh now; the next request in grace tries again. */
    STAT_INC(cache_bgfetch_skipped);
    TRACE(req->trace, FETCH_ERROR, "bgfetch skipped: the queue is full");
    hsh_abandon(&bg->bo.oc, 0);
    hsh_deref(&bg->stale.oc);
    pol_bctx_fini(&bg->pol);
    OBJ_FREE(&bg);
}
