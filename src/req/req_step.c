/*
 * The request state machine: the steps of VCL's request side, one
 * function each, listed in one table (tbl in req_priv.h), run by
 * req_dispatch() until a step says the request is done.
 *
 *   recv ──► hash ──► lookup ──► hit ──► deliver
 *     │                 │  └───► miss ─► (fetch, delivered as it comes)
 *     │                 └──────► pass ─► (fetch, delivered as it comes)
 *     ├──► pass, pipe, purge, synth, static
 *   any hook's "restart" ──► back to recv (req_dispatch(), bounded)
 *
 * Without a policy script the steps take builtin.vcl's decisions
 * (Varnish's, in spirit): GET and HEAD without Authorization or Cookie
 * are looked up, everything else passes, PURGE purges.  With one
 * (pol_active()), its recv and hash hooks decide, hit, miss and pass may
 * turn the outcome of the lookup around, and its deliver hook sees every
 * delivery.  What a step hands the next lives in the request (req->st->step
 * and the fields after it in struct req).
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "surogat/be.h"
#include "surogat/cc.h"
#include "surogat/defs.h"
#include "surogat/dir.h"
#include "surogat/dlv.h"
#include "surogat/h1.h"
#include "surogat/hsh.h"
#include "surogat/log.h"
#include "surogat/par.h"
#include "surogat/pol.h"
#include "surogat/req.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/tp.h"
#include "surogat/trace.h"
#include "surogat/ws.h"

#include "req_priv.h"

/*
 * The backend for a fetch: picked by the request's director (req.backend,
 * the routes) when a script is loaded, else -b's.  NULL when none is
 * healthy: the fetch answers 503, or stale content where allowed.
 */
static struct be *
pick_backend(struct req *req)
{
    struct dir *d;

    if (!pol_active() || (d = pol_dir(req)) == NULL)
        return (be_default());
    /* A pass or a pipe has not looked up: the key it would have, so it goes where a lookup would. */
    if (req->lookup_key == NULL)
        req->lookup_key = req_cache_key(req, &req->lookup_keylen);
    return (dir_pick(d, &(struct dir_ctx){ .req = req->http, .key = req->lookup_key,
                                           .keylen = req->lookup_keylen }));
}

/* The request's director is a static backend: its files answer it. */
static struct be *
static_route(struct req *req)
{
    struct dir *d;
    struct be *be;

    /* Without static backends, a hit never resolves its route at all. */
    if (!pol_routes_static(req))
        return (NULL);
    d = pol_dir(req);
    if (d == NULL || dir_type(d) != DIR_BACKEND)
        return (NULL);
    be = dir_pick(d, &(struct dir_ctx){ .req = req->http });
    return (be != NULL && be_local(be) ? be : NULL);
}

/* A hook said neither fetch nor deliver: the step its action leads to. */
static enum req_step
other(struct req *req, enum pol_act act, const struct pol_synth *syn)
{
    switch (act) {
    case POL_PASS:
        return (REQ_S_PASS);
    case POL_SYNTH:
        req->st->syn = *syn;
        return (REQ_S_SYNTH);
    case POL_RESTART:
        return (REQ_S_RESTART);
    default:
        /* A policy failure: 503 through the synth hook, logged by pol_ already. */
        req->st->syn.status = 503;
        snprintf(req->st->syn.reason, sizeof req->st->syn.reason, "%s", "policy error");
        return (REQ_S_SYNTH);
    }
}

/*
 * An upgrade's answer is a conversation, never an object: passed, with or
 * without a policy, whatever recv said (req_upgrade.c).
 */
static void
upgrade_pass(struct req *req)
{
    req->cs_fwd = "bypass", req->cs_detail = "upgrade";
    TRACE_CAT(req->trace, BUILTIN, "recv pass: the request is an upgrade (a tunnel after a 101)");
}

/*
 * Without a policy, builtin.vcl passes a request that is not GET or HEAD,
 * an upgrade, or one that carries credentials: say which, in Cache-Status
 * and the trace.
 */
static enum req_step
builtin_pass(struct req *req)
{
    if (!req__is_method(req, "GET") && !req__is_method(req, "HEAD")) {
        req->cs_fwd = "method";
        TRACE_CAT(req->trace, BUILTIN, "recv pass: the method is not GET or HEAD");
    } else if (req->upgrade) {
        upgrade_pass(req);
    } else if (http_find(req->http, "Authorization") != NULL) {
        req->cs_fwd = "bypass", req->cs_detail = "authorization";
        TRACE_CAT(req->trace, BUILTIN, "recv pass: the request has Authorization");
    } else {
        req->cs_fwd = "bypass", req->cs_detail = "cookie";
        TRACE_CAT(req->trace, BUILTIN, "recv pass: the request has a Cookie");
    }
    return (REQ_S_PASS);
}

/* Recv: the policy's recv hook, or builtin.vcl's decisions. */
static enum req_step
step_recv(struct req *req)
{
    enum pol_act act;

    req->lookup_key = NULL; /* a restart's recv may pass */
    req->st->refresh = false;
    if (!pol_active()) {
        struct be *dflt = be_default(); /* NULL: set sick */
        if (dflt != NULL && be_local(dflt)) {
            TRACE_CAT(req->trace, BUILTIN, "recv static: ", dflt->name);
            req->st->be = dflt;
            return (REQ_S_STATIC);
        }
        if (req__is_method(req, "PURGE")) {
            TRACE_CAT(req->trace, BUILTIN, "recv purge");
            return (REQ_S_PURGE);
        }
        if ((!req__is_method(req, "GET") && !req__is_method(req, "HEAD")) ||
            http_find(req->http, "Authorization") != NULL ||
            http_find(req->http, "Cookie") != NULL || req->upgrade)
            return (builtin_pass(req));
        TRACE_CAT(req->trace, BUILTIN, "recv hash");
        return (REQ_S_HASH);
    }
    act = pol_recv(req, &req->st->syn);
    req__hints_send(req);
    if (act == POL_HASH && req->upgrade) {
        upgrade_pass(req);
        act = POL_PASS;
    }
    /* Wherever recv sent it, a request routed to static files goes there. */
    if ((act == POL_HASH || act == POL_PASS || act == POL_PIPE) &&
        (req->st->be = static_route(req)) != NULL)
        return (REQ_S_STATIC);
    switch (act) {
    case POL_HASH:
        return (REQ_S_HASH);
    case POL_PIPE:
        return (REQ_S_PIPE);
    case POL_PURGE:
        return (REQ_S_PURGE);
    default:
        return (other(req, act, &req->st->syn));
    }
}

/* Hash: the cache key, the policy's hash hook adding to it or replacing it. */
static enum req_step
step_hash(struct req *req)
{
    char *key = NULL;
    size_t keylen = 0;

    /* HEAD follows the method as the policy left it. */
    req->head_only = req__is_method(req, "HEAD");
    if (!pol_active()) {
        key = req_cache_key(req, &keylen);
    } else if (pol_hash(req, &key, &keylen) != 0) {
        req->st->syn.status = 503;
        snprintf(req->st->syn.reason, sizeof req->st->syn.reason, "%s", "policy error");
        return (REQ_S_SYNTH);
    }
    if (key == NULL) {
        /* The workspace ran out: no lookup, and Cache-Status says why. */
        req->cs_fwd = "bypass", req->cs_detail = "workspace";
        return (REQ_S_PASS);
    }
    req->lookup_key = key;
    req->lookup_keylen = keylen;
    TRACE_KEY(req->trace, key, keylen);
    /* A new key: a wait for it starts its own coalesce_timeout. */
    memset(&req->st->waiter, 0, sizeof req->st->waiter);
    cc_parse_request(req->http, &req->st->qcc);
    if (req->hash_always_miss)
        req->st->refresh = true; /* set by recv */
    if (req->st->refresh) {
        /* As the hit hook's "miss": a fresh object only serves to revalidate. */
        req->st->qcc.flags |= CC_NO_CACHE;
    }
    return (REQ_S_LOOKUP);
}

/* Lookup: the index says hit, miss, pass, or a fetch in progress to join. */
static enum req_step
step_lookup(struct req *req)
{
    struct hsh_waiter *w = req__waiter(req);

    req->st->t_lookup = tim_real();
    req->st->oc = NULL;
    req->st->lookup = hsh_lookup(req->lookup_key, req->lookup_keylen, req->http, &req->st->qcc,
                             req->st->t_lookup,
                             (req->hash_ignore_busy ? HSH_L_IGNORE_BUSY : 0) |
                                 (req->st->refresh ? HSH_L_FORCE_REVALIDATE : 0),
                             &req->st->oc, &req->st->stale, w);
    /*
     * On HSH_BUSY the waiter is the index's, but the request stays this
     * worker's until req__park() lets go (a wake-up meanwhile only marks
     * it, req_park.c): its trace may still say it waits.
     */
    TRACE_LOOKUP(req->trace, req->st->lookup, req->st->oc, &req->st->stale, req->st->t_lookup);
    if (req->st->lookup == HSH_BUSY)
        return (REQ_S_PARK); /* the wake-up may run it already: touch nothing */
    if (w != NULL)
        req__unwaited(req);
    switch (req->st->lookup) {
    case HSH_PASS:
        /* Cache-Status: a hit-for-miss marker, or coalescing that gave up */
        req->cs_fwd = req->st->stale.fwd, req->cs_detail = req->st->stale.detail;
        if (req->st->qcc.flags & CC_ONLY_IF_CACHED)
            return (REQ_S_GATEWAY_TIMEOUT);
        return (REQ_S_PASS);
    case HSH_HIT:
    case HSH_STREAM:
    case HSH_GRACE:
        return (REQ_S_HIT);
    case HSH_MISS:
        if (req->st->qcc.flags & CC_ONLY_IF_CACHED) {
            hsh_abandon(&req->st->oc, 0);
            if (req->st->stale.oc != NULL)
                hsh_deref(&req->st->stale.oc);
            return (REQ_S_GATEWAY_TIMEOUT);
        }
        /* A stale copy is revalidated or served on error: it must be intact too. */
        if (req->st->stale.oc != NULL && !hsh_verify(req->st->stale.oc))
            hsh_deref(&req->st->stale.oc);
        return (REQ_S_MISS);
    case HSH_BUSY:
        break; /* returned above */
    }
    SRG_WRONG("hsh_result");
}

/*
 * pol_obj's load(): the object's stored head parsed into workspace (with
 * the empty line it is stored without), when the hit hook first reads it.
 */
static struct http *
load_obj_head(const struct pol_obj *obj)
{
    struct req *req = obj->req;
    const struct cobj *oc = obj->oc;
    struct h1_limits lim;
    struct http_hdr *hdrs;
    struct http *h;
    size_t hlen = hsh_head_size(oc), len = hlen + 2, used;
    unsigned nhdr = 1;
    char *buf;

    buf = ws_alloc(req->ws, len);
    h = ws_alloc(req->ws, sizeof *h);
    if (buf == NULL || h == NULL) {
        STAT_INC(ws_overflow);
        return (NULL);
    }
    (void)hsh_head_copy(oc, buf);
    memcpy(buf + hlen, "\r\n", 2);
    for (size_t i = 0; i < len; i++)
        nhdr += buf[i] == '\n';
    hdrs = ws_alloc(req->ws, nhdr * sizeof *hdrs);
    if (hdrs == NULL) {
        STAT_INC(ws_overflow);
        return (NULL);
    }
    http_init(h, hdrs, nhdr);
    lim = (struct h1_limits){ len + 1, len + 1, nhdr };
    if (h1_parse_response(buf, len, &lim, h, &used) != H1_DONE)
        return (NULL); /* we stored it: cannot happen, but not worth a panic */
    return (h);
}

/* The hit hook on object oc: its timing now, its head when the script reads it. */
static enum pol_act
policy_hit(struct req *req, const struct cobj *oc)
{
    struct pol_obj obj = { .load = load_obj_head, .oc = oc, .req = req };
    enum pol_act act;

    obj.age = SRG_MAX(0.0, req->st->t_lookup - oc->fresh.t_origin);
    obj.ttl = oc->fresh.ttl - obj.age;
    obj.grace = oc->fresh.swr;
    obj.hits = __atomic_load_n(&oc->hits, __ATOMIC_RELAXED);
    act = pol_hit(req, &obj, &req->st->syn);
    req__hints_send(req);
    return (act);
}

/*
 * Hit: a usable object (HSH_HIT), a fetch in progress whose head is in
 * (HSH_STREAM: joining it is a hit on the object it stores), or a stale
 * copy in grace with nobody refreshing it (HSH_GRACE: this request gets
 * it at once, and a refresh runs in the background).  The hit hook
 * decides; its "miss" looks up again past fresh objects, as a client's
 * no-cache would -- except for a fetch in progress, which cannot be
 * refreshed right now: that goes to the backend as a pass.
 */
static enum req_step
step_hit(struct req *req)
{
    bool hook = !req->st->refresh && pol_active() && pol_has_hit();
    struct cobj *so;
    enum pol_act act;

    switch (req->st->lookup) {
    case HSH_HIT:
        if (!hsh_verify(req->st->oc)) {
            /* Recovered from a file store and corrupt: gone from the index, look again. */
            hsh_deref(&req->st->oc);
            return (REQ_S_LOOKUP);
        }
        if (hook && (act = policy_hit(req, req->st->oc)) != POL_DELIVER) {
            hsh_deref(&req->st->oc);
            if (act != POL_MISS)
                return (other(req, act, &req->st->syn));
            req->st->refresh = true;
            req->st->qcc.flags |= CC_NO_CACHE;
            return (REQ_S_LOOKUP);
        }
        STAT_INC(cache_hit);
        req->st->fwd = NULL;
        return (REQ_S_DELIVER);
    case HSH_STREAM:
        if (hook && (act = policy_hit(req, req->st->oc)) != POL_DELIVER) {
            hsh_stream_leave(&req->st->oc);
            return (other(req, act == POL_MISS ? POL_PASS : act, &req->st->syn));
        }
        return (REQ_S_DELIVER);
    case HSH_GRACE:
        if (!hsh_verify(req->st->stale.oc)) {
            /* Recovered and corrupt: gone; this is a plain miss. */
            hsh_deref(&req->st->stale.oc);
            return (REQ_S_MISS);
        }
        if (pol_active() && pol_has_hit()) {
            act = policy_hit(req, req->st->stale.oc);
            if (act == POL_MISS)
                return (REQ_S_MISS); /* refresh in the foreground: the stale copy revalidates */
            if (act != POL_DELIVER) {
                hsh_abandon(&req->st->oc, 0);
                hsh_deref(&req->st->stale.oc);
                return (other(req, act, &req->st->syn));
            }
        }
        /*
         * Cache-Status says hit (RFC 9211: served stale from the cache
         * without going forward; ttl is negative).
         */
        STAT_INC(cache_hit);
        so = req->st->stale.oc;
        hsh_ref(so);
        req_fetch_bg(req, pick_backend(req), &req->st->oc, &req->st->stale);
        req->st->oc = so;
        req->st->lookup = HSH_HIT;
        req->st->grace = true;
        req->st->fwd = NULL;
        return (REQ_S_DELIVER);
    case HSH_MISS:
    case HSH_PASS:
    case HSH_BUSY:
        break;
    }
    SRG_WRONG("a hit without an object");
}

/*
 * Miss: the busy object is fetched, unless the miss hook says otherwise;
 * then it is abandoned (waiters look up again) and the stale copy let go.
 * A Range miss fetches the whole object and cuts the range from it.
 */
static enum req_step
step_miss(struct req *req)
{
    enum pol_act act = POL_FETCH;

    if (pol_active())
        act = pol_miss(req, &req->st->syn);
    if (act != POL_FETCH) {
        hsh_abandon(&req->st->oc, 0);
        if (req->st->stale.oc != NULL)
            hsh_deref(&req->st->stale.oc);
        return (other(req, act, &req->st->syn));
    }
    if (req_fetch_miss(req, pick_backend(req), &req->st->oc, &req->st->stale))
        return (REQ_S_AWAIT);
    return (REQ_S_DONE);
}

/* Pass: to the backend, not cached, through the pass hook when a script is loaded. */
static enum req_step
step_pass(struct req *req)
{
    enum pol_act act;

    if (req->cs_fwd == NULL) /* Cache-Status: a pass the policy chose, unless said otherwise */
        req->cs_fwd = "bypass", req->cs_detail = "policy";
    /* pass never answers "pass": no loop */
    if (pol_active() && (act = pol_pass(req, &req->st->syn)) != POL_FETCH)
        return (other(req, act, &req->st->syn));
    if (req_fetch_pass(req, pol_active() ? pick_backend(req) : be_default()))
        return (REQ_S_AWAIT);
    return (REQ_S_DONE);
}

/* A pass or miss whose fetch waited for its backend without a worker: it goes on. */
static enum req_step
step_backend(struct req *req)
{
    return (req__fetch_resume(req) ? REQ_S_AWAIT : REQ_S_DONE);
}

static enum req_step
step_pipe(struct req *req)
{
    req_pipe(req, pick_backend(req));
    return (REQ_S_DONE);
}

static enum req_step
step_purge(struct req *req)
{
    req_purge(req);
    return (REQ_S_DONE);
}

/* Synth: the policy's synthetic answer, through the synth hook (which may restart). */
static enum req_step
step_synth(struct req *req)
{
    dlv_synth(req, req->st->syn.status, req->st->syn.reason);
    return (REQ_S_DONE);
}

/* Static files skip the cache: the open-file cache and the page cache hold them. */
static enum req_step
step_static(struct req *req)
{
    dlv_local(req, req->st->be);
    return (REQ_S_DONE);
}

/* Deliver: the object a hit found, or the fetch in progress it joined. */
static enum req_step
step_deliver(struct req *req)
{
    if (req->st->lookup == HSH_STREAM) {
        /*
         * Each wait is bounded: the fetch gives up after its between-bytes
         * timeout, but may also spend up to send_timeout on one write to
         * its own (slow) client before it reads on.  The fetching request
         * most likely went where this one would.
         */
        struct be *be = pick_backend(req);
        dlv_stream(req, req->st->oc, (be != NULL ? be_between_bytes_timeout(be)
                                             : par.backend_between_bytes_timeout) +
                                     par.send_timeout + 1);
        hsh_stream_leave(&req->st->oc);
        return (REQ_S_DONE);
    }
    dlv_obj(req, req->st->oc, req->st->t_lookup, req->st->fwd);
    if (req->st->grace)
        req->outcome = REQ_O_GRACE;
    hsh_deref(&req->st->oc);
    return (REQ_S_DONE);
}

/* only-if-cached with nothing usable: never contact the origin (RFC 9111 5.2.1.7). */
static enum req_step
step_gateway_timeout(struct req *req)
{
    req->outcome = REQ_O_MISS;
    (void)dlv_error(req, 504, NULL, NULL);
    return (REQ_S_DONE);
}

static const struct {
    const char *name;
    enum req_step (*run)(struct req *req);
} steps[REQ_S__N] = {
#define REQ_STEP(U, l) [REQ_S_##U] = { #l, step_##l },
    REQ_STEPS
#undef REQ_STEP
};

const char *
req__step_name(enum req_step s)
{
    SRG_ASSERT(s < REQ_S__N);
    return (steps[s].name);
}

/* A hook said "restart": back to recv, within max_restarts.  false: answered instead. */
static bool
restart(struct req *req)
{
    SRG_ASSERT(req->t_first == 0); /* hooks restart before anything is sent */
    if (req->restarts >= par.max_restarts) {
        log_msg(LOG_WARNING, "policy: \"restart\" past max_restarts (%u): 503", par.max_restarts);
        (void)dlv_error(req, 503, NULL, "too many restarts");
        return (false);
    }
    if (req->body != H1_BODY_NONE && req->bereq != NULL) {
        /* Its body went to the backend already: there is none to send again. */
        (void)dlv_error(req, 503, NULL, "cannot restart a request whose body was sent");
        return (false);
    }
    req->restarts++;
    STAT_INC(policy_restart);
    TRACE_RESTART(req->trace, req->restarts);
    req->cs_fwd = req->cs_detail = NULL;
    req->bereq = NULL;
    req->retries = 0;
    req->be_name = NULL;
    req->status = 0;
    req->st->grace = false;
    req->head_only = req__is_method(req, "HEAD");
    return (true);
}

/*
 * Run the steps from req->st->step to the end, to a waiting list, or --
 * for an ESI include (req__run()) -- to a step in `stop`.  On a waiting
 * list the request is parked (REQ_RUN_PARKED: its worker is free, and
 * another may be running it already), or it waited on its worker and
 * goes on; an include is left to req_esi.c, which lets go of it.
 */
static enum req_run
run_steps(struct req *req, unsigned stop)
{
    /* A deliver hook run outside the steps (an ESI include's hit) said "restart". */
    if (req->restart) {
        req->restart = false;
        req->st->step = restart(req) ? REQ_S_RECV : REQ_S_DONE;
    }
    while (req->st->step != REQ_S_DONE) {
        if (stop & (1u << req->st->step))
            break;
        req->restart = false;
        req->st->step = steps[req->st->step].run(req);
        if (req->st->step == REQ_S_PARK) {
            /* Woken, it looks up again. */
            req->st->step = REQ_S_LOOKUP;
            if (req->esi_up != NULL)
                return (REQ_RUN_PARKED); /* an include: req_esi.c lets go of it */
            if (req__park(req))
                return (REQ_RUN_PARKED);
            continue;
        }
        if (req->st->step == REQ_S_AWAIT) {
            req->st->step = REQ_S_BACKEND;
            if (pol_active() && pol_park(req) != 0) {
                /* The script's state for it cannot leave this worker: it waits here. */
                STAT_INC(fetch_wait_on_thread);
                req->st->watch.expired = false;
                continue;
            }
            /* Another worker may run it from here on: touch nothing after. */
            req__await(req);
            return (REQ_RUN_PARKED);
        }
        /* The deliverer and the synth hook say "restart" through the request. */
        if (req->restart || req->st->step == REQ_S_RESTART)
            req->st->step = restart(req) ? REQ_S_RECV : REQ_S_DONE;
    }
    return (REQ_RUN_DONE);
}

enum req_step
req__run(struct req *req, unsigned stop)
{
    OBJ_CHECK(req, REQ_MAGIC);
    SRG_ASSERT(req->esi_up != NULL);
    if (run_steps(req, stop) == REQ_RUN_PARKED)
        return (REQ_S_PARK);
    return (req->st->step);
}

enum req_run
req_dispatch(struct req *req)
{
    OBJ_CHECK(req, REQ_MAGIC);
    req->st = ws_alloc(req->ws, sizeof *req->st);
    if (req->st == NULL) {
        STAT_INC(ws_overflow);
        req->close = true;
        (void)dlv_error(req, 500, NULL, "workspace_client exhausted");
        return (REQ_RUN_DONE);
    }
    memset(req->st, 0, sizeof *req->st);
    req->st->step = REQ_S_RECV;
    return (run_steps(req, 0));
}

enum req_run
req__dispatch_resume(struct req *req)
{
    OBJ_CHECK(req, REQ_MAGIC);
    SRG_ASSERT(req->st->step == REQ_S_LOOKUP || req->st->step == REQ_S_BACKEND);
    return (run_steps(req, 0));
}
