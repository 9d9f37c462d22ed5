/*
 * The cache side of a client request: which requests look up, and the
 * delivery of a hit.
 *
 * Without a policy script this is the built-in policy, Varnish's
 * builtin.vcl in spirit: GET and HEAD without Authorization or Cookie
 * are looked up, everything else passes, and a successful unsafe method
 * invalidates the URL (RFC 9111 section 4.4).  With one (pol_active()),
 * its recv and hash hooks decide instead, hit, miss and pass may turn
 * the outcome of the lookup around, and its deliver hook may edit the
 * head of every delivery.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "surogat/be.h"
#include "surogat/cc.h"
#include "surogat/ckey.h"
#include "surogat/defs.h"
#include "surogat/dlv.h"
#include "surogat/dir.h"
#include "surogat/fetch.h"
#include "surogat/fresh.h"
#include "surogat/gz.h"
#include "surogat/h1.h"
#include "surogat/hsh.h"
#include "surogat/log.h"
#include "surogat/par.h"
#include "surogat/pol.h"
#include "surogat/req.h"
#include "surogat/sb.h"
#include "surogat/sess.h"
#include "surogat/sfb.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/trace.h"
#include "surogat/wrk.h"

/* A cache key for this request's scheme (ckey_build()). */
static char *
make_key(struct req *req, const struct txt *host, const char *path, size_t plen, size_t *len)
{
    return (ckey_build(&req->wrk->ws, host, req->sp != NULL && sess_is_tls(req->sp), path, plen,
                       len));
}

static char *
cache_key(struct req *req, size_t *len)
{
    return (make_key(req, http_value(req->http, "Host"), req->http->url.b, req->http->url.len,
                     len));
}

char *
req_cache_key(struct req *req, size_t *len)
{
    return (cache_key(req, len));
}

static bool
is_method(const struct req *req, const char *m)
{
    return (req->http->method.len == strlen(m) &&
            memcmp(req->http->method.b, m, req->http->method.len) == 0);
}

/*
 * A successful unsafe method invalidates the target URL and the URLs its
 * response names in Location and Content-Location on the same host (RFC
 * 9111 section 4.4): other hosts' caches are not ours to empty on one
 * origin's word.  Called with the backend's response head, before the
 * client sees any of it: a client that has its answer and asks again
 * must not get the old copy, and neither may anyone after a crash.
 *
 * Only the unsafe methods that change a resource count, spelled exactly
 * (methods are case-sensitive, RFC 9110 section 9.1): "FOO" or "post"
 * changes nothing a cache knows of, and must not let any client empty it.
 */
void
req_invalidate(struct req *req, const struct http *resp)
{
    static const char *const fields[] = { "Location", "Content-Location" };
    static const char *const unsafe[] = { "POST", "PUT", "PATCH", "DELETE" };
    const struct http_hdr *host = http_find(req->http, "Host");
    char *key;
    size_t keylen;
    bool is_unsafe = false;

    if (!par.invalidate_on_unsafe || resp->status < 200 || resp->status >= 400)
        return;
    for (size_t i = 0; i < ARRAY_LEN(unsafe) && !is_unsafe; i++)
        is_unsafe = is_method(req, unsafe[i]);
    if (!is_unsafe)
        return;
    if ((key = cache_key(req, &keylen)) != NULL)
        (void)hsh_purge(key, keylen);
    if (host == NULL)
        return;
    for (size_t i = 0; i < ARRAY_LEN(fields); i++) {
        const struct txt *v = http_value(resp, fields[i]);
        const char *p, *e, *auth;
        size_t skip = 0;

        if (v == NULL || v->len == 0)
            continue;
        p = v->b;
        e = v->b + v->len;
        if (v->len > 7 && strncasecmp(p, "http://", 7) == 0)
            skip = 7;
        else if (v->len > 8 && strncasecmp(p, "https://", 8) == 0)
            skip = 8;
        else if (*p != '/')
            continue; /* a relative reference: not worth resolving */
        if (skip > 0) {
            /* An absolute URI must name our Host; then keep its path. */
            for (auth = p + skip, p = auth; p < e && *p != '/'; p++)
                continue;
            if ((size_t)(p - auth) != host->val.len ||
                strncasecmp(auth, host->val.b, host->val.len) != 0 || p == e)
                continue;
        }
        key = make_key(req, &host->val, p, (size_t)(e - p), &keylen);
        if (key == NULL)
            return;
        (void)hsh_purge(key, keylen);
    }
}

/*
 * The built-in policy passes a request that is not GET or HEAD, or that
 * carries credentials: say which, in Cache-Status and the trace.
 */
static void
builtin_pass(struct req *req)
{
    if (!is_method(req, "GET") && !is_method(req, "HEAD")) {
        req->cs_fwd = "method";
        TRACE(req->trace, BUILTIN, "recv pass: the method is not GET or HEAD");
    } else if (http_find(req->http, "Authorization") != NULL) {
        req->cs_fwd = "bypass", req->cs_detail = "authorization";
        TRACE(req->trace, BUILTIN, "recv pass: the request has Authorization");
    } else {
        req->cs_fwd = "bypass", req->cs_detail = "cookie";
        TRACE(req->trace, BUILTIN, "recv pass: the request has a Cookie");
    }
}

/* A policy failure: 503 (through the synth hook), logged by pol_ already. */
static void
policy_fail(struct req *req)
{
    dlv_synth(req, 503, "policy error");
}

/*
 * Static files skip the cache: the open-file cache and the page cache
 * hold them.  true when be is a static backend and the request was
 * answered from its files.
 */
static bool
deliver_static(struct req *req, struct be *be)
{
    if (be == NULL || be->sfb == NULL)
        return (false);
    req->be_name = be->name;
    dlv_static(req, be->sfb);
    return (true);
}

/* The request's director is a static backend: answered from its files. */
static bool
static_route(struct req *req)
{
    struct dir *d;

    /* Without static backends, a hit never resolves its route at all. */
    if (!pol_routes_static(req))
        return (false);
    d = pol_dir(req);
    return (d != NULL && dir_type(d) == DIR_BACKEND &&
            deliver_static(req, dir_pick(d, &(struct dir_ctx){ .req = req->http })));
}

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
        req->lookup_key = cache_key(req, &req->lookup_keylen);
    return (dir_pick(d, &(struct dir_ctx){ .req = req->http, .key = req->lookup_key,
                                           .keylen = req->lookup_keylen }));
}

/*
 * The request goes to the backend, not cached: through the pass hook
 * when a script is loaded.
 */
static void do_pass(struct req *req);

/* A hook said neither fetch nor deliver: pass, synth, restart, or it failed. */
static void
answer_other(struct req *req, enum pol_act act, const struct pol_synth *syn)
{
    if (act == POL_PASS)
        do_pass(req);
    else if (act == POL_SYNTH)
        dlv_synth(req, syn->status, syn->reason);
    else if (act == POL_RESTART)
        req->restart = true;
    else
        policy_fail(req);
}

static void
do_pass(struct req *req)
{
    struct pol_synth syn;
    enum pol_act act;

    if (req->cs_fwd == NULL) /* Cache-Status: a pass the policy chose, unless said otherwise */
        req->cs_fwd = "bypass", req->cs_detail = "policy";
    /* pass never answers "pass": no recursion */
    if (pol_active() && (act = pol_pass(req, &syn)) != POL_FETCH) {
        answer_other(req, act, &syn);
        return;
    }
    fetch_pass(req, pick_backend(req));
}

/*
 * A miss with the busy object *ocp: fetch it, unless the miss hook says
 * otherwise -- then the busy object is abandoned (waiters look up again)
 * and the stale copy let go.
 */
static void
do_miss(struct req *req, struct cobj **ocp, struct hsh_stale *stale)
{
    struct pol_synth syn;
    enum pol_act act = POL_FETCH;

    if (pol_active())
        act = pol_miss(req, &syn);
    if (act == POL_FETCH) {
        fetch_miss(req, pick_backend(req), ocp, stale);
        return;
    }
    hsh_abandon(ocp, 0);
    if (stale->oc != NULL)
        hsh_deref(&stale->oc);
    answer_other(req, act, &syn);
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
    size_t len = oc->head_len + 2, used;
    unsigned nhdr = 1;
    char *buf;

    buf = ws_alloc(&req->wrk->ws, len);
    h = ws_alloc(&req->wrk->ws, sizeof *h);
    if (buf == NULL || h == NULL) {
        STAT_INC(ws_overflow);
        return (NULL);
    }
    memcpy(buf, oc->head, oc->head_len);
    memcpy(buf + oc->head_len, "\r\n", 2);
    for (size_t i = 0; i < len; i++)
        nhdr += buf[i] == '\n';
    hdrs = ws_alloc(&req->wrk->ws, nhdr * sizeof *hdrs);
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
policy_hit(struct req *req, const struct cobj *oc, double now, struct pol_synth *syn)
{
    struct pol_obj obj = { .load = load_obj_head, .oc = oc, .req = req };

    obj.age = SRG_MAX(0.0, now - oc->fresh.t_origin);
    obj.ttl = oc->fresh.ttl - obj.age;
    obj.grace = oc->fresh.swr;
    obj.hits = __atomic_load_n(&oc->hits, __ATOMIC_RELAXED);
    return (pol_hit(req, &obj, syn));
}

/*
 * The policy's recv and hash hooks: true with the cache key to look up
 * (NULL: the workspace ran out, pass), false when the request was
 * answered here.
 */
static bool
policy_recv(struct req *req, char **key, size_t *keylen)
{
    struct pol_synth syn;
    enum pol_act act = pol_recv(req, &syn);

    /* Wherever recv sent it, a request routed to static files goes there. */
    if ((act == POL_HASH || act == POL_PASS || act == POL_PIPE) && static_route(req))
        return (false);
    switch (act) {
    case POL_HASH:
        break;
    case POL_PASS:
        do_pass(req);
        return (false);
    case POL_PIPE:
        req_pipe(req, pick_backend(req));
        return (false);
    case POL_PURGE:
        req_purge(req);
        return (false);
    case POL_SYNTH:
        dlv_synth(req, syn.status, syn.reason);
        return (false);
    default:
        policy_fail(req);
        return (false);
    }
    /* HEAD follows the method as the policy left it. */
    req->head_only = is_method(req, "HEAD");
    if (pol_hash(req, key, keylen) != 0) {
        policy_fail(req);
        return (false);
    }
    return (true);
}

static void
dispatch_once(struct req *req)
{
    struct cobj *oc = NULL, *so;
    struct hsh_stale stale;
    struct pol_synth syn;
    struct cc qcc;
    char *key;
    size_t keylen;
    double now;
    bool refresh = false; /* the hit hook said "miss": look up past fresh objects */

    OBJ_CHECK(req, REQ_MAGIC);
    req->lookup_key = NULL; /* a restart's recv may pass */
    if (!pol_active() && deliver_static(req, be_default()))
        return;
    if (pol_active()) {
        if (!policy_recv(req, &key, &keylen))
            return;
    } else if (is_method(req, "PURGE")) {
        TRACE(req->trace, BUILTIN, "recv purge");
        req_purge(req);
        return;
    } else if ((!is_method(req, "GET") && !is_method(req, "HEAD")) ||
               http_find(req->http, "Authorization") != NULL ||
               http_find(req->http, "Cookie") != NULL) {
        builtin_pass(req);
        fetch_pass(req, be_default());
        return;
    } else {
        TRACE(req->trace, BUILTIN, "recv hash");
        key = cache_key(req, &keylen);
    }
    if (key == NULL) {
        req->cs_fwd = "bypass", req->cs_detail = "workspace"; /* no room for the key */
        do_pass(req);
        return;
    }
    req->lookup_key = key;
    req->lookup_keylen = keylen;
    TRACE_KEY(req->trace, key, keylen);
    cc_parse_request(req->http, &qcc);
    if (req->hash_always_miss) {
        /* As the hit hook's "miss": a fresh object only serves to revalidate. */
        refresh = true;
        qcc.flags |= CC_NO_CACHE;
    }
lookup:
    now = tim_real();
    switch (hsh_lookup(key, keylen, req->http, &qcc, now,
                       (req->hash_ignore_busy ? HSH_L_IGNORE_BUSY : 0) |
                           (refresh ? HSH_L_FORCE_REVALIDATE : 0),
                       &oc, &stale)) {
    case HSH_PASS:
        TRACE_LOOKUP(req->trace, HSH_PASS, NULL, &stale, now);
        req->cs_fwd = stale.fwd, req->cs_detail = stale.detail; /* a marker, or coalescing */
        if (qcc.flags & CC_ONLY_IF_CACHED)
            break;
        do_pass(req);
        return;
    case HSH_HIT:
        TRACE_LOOKUP(req->trace, HSH_HIT, oc, &stale, now);
        if (!hsh_verify(oc)) {
            /* Recovered from a file store and corrupt: gone from the index, look again. */
            hsh_deref(&oc);
            goto lookup;
        }
        if (!refresh && pol_active() && pol_has_hit()) {
            enum pol_act act = policy_hit(req, oc, now, &syn);
            if (act != POL_DELIVER)
                hsh_deref(&oc);
            if (act == POL_MISS) {
                /*
                 * As a client's no-cache would: the object is only good for
                 * revalidation, so the lookup misses and the fetch replaces it.
                 */
                refresh = true;
                qcc.flags |= CC_NO_CACHE;
                goto lookup;
            }
            if (act != POL_DELIVER) {
                answer_other(req, act, &syn);
                return;
            }
        }
        STAT_INC(cache_hit);
        dlv_obj(req, oc, now, NULL);
        hsh_deref(&oc);
        return;
    case HSH_STREAM:
        TRACE_LOOKUP(req->trace, HSH_STREAM, oc, &stale, now);
        /*
         * Joining a fetch in progress is a hit on the object it stores
         * (its head is in): the hit hook decides.  "miss" cannot refresh
         * what is being fetched right now: it goes to the backend as a pass.
         */
        if (!refresh && pol_active() && pol_has_hit()) {
            enum pol_act act = policy_hit(req, oc, now, &syn);
            if (act != POL_DELIVER) {
                hsh_stream_leave(&oc);
                answer_other(req, act == POL_MISS ? POL_PASS : act, &syn);
                return;
            }
        }
        /*
         * Each wait is bounded: the fetch gives up after its between-bytes
         * timeout, but may also spend up to send_timeout on one write to
         * its own (slow) client before it reads on.
         */
        {
            /* The fetching request most likely went where this one would. */
            struct be *be = pick_backend(req);
            dlv_stream(req, oc, (be != NULL ? be_between_bytes_timeout(be)
                                                    : par.backend_between_bytes_timeout) +
                                            par.send_timeout + 1);
        }
        hsh_stream_leave(&oc);
        return;
    case HSH_GRACE:
        TRACE_LOOKUP(req->trace, HSH_GRACE, NULL, &stale, now);
        /*
         * Stale within its grace window and nobody refreshing it: this
         * request gets the stale copy at once too, and the refresh runs in
         * the background.  Cache-Status says hit (RFC 9211: served stale
         * from the cache without going forward; ttl is negative).
         */
        if (!hsh_verify(stale.oc)) {
            /* Recovered and corrupt: gone; this is a plain miss. */
            hsh_deref(&stale.oc);
            do_miss(req, &oc, &stale);
            return;
        }
        if (pol_active() && pol_has_hit()) {
            enum pol_act act = policy_hit(req, stale.oc, now, &syn);
            if (act == POL_MISS) {
                /* Refresh in the foreground: the stale copy only revalidates. */
                do_miss(req, &oc, &stale);
                return;
            }
            if (act != POL_DELIVER) {
                hsh_abandon(&oc, 0);
                hsh_deref(&stale.oc);
                answer_other(req, act, &syn);
                return;
            }
        }
        STAT_INC(cache_hit);
        so = stale.oc;
        hsh_ref(so);
        fetch_bg(req, pick_backend(req), &oc, &stale);
        dlv_obj(req, so, now, NULL);
        req->outcome = REQ_O_GRACE;
        hsh_deref(&so);
        return;
    case HSH_MISS:
        TRACE_LOOKUP(req->trace, HSH_MISS, NULL, &stale, now);
        if (qcc.flags & CC_ONLY_IF_CACHED) {
            hsh_abandon(&oc, 0);
            if (stale.oc != NULL)
                hsh_deref(&stale.oc);
            break;
        }
        /* A stale copy is revalidated or served on error: it must be intact too. */
        if (stale.oc != NULL && !hsh_verify(stale.oc))
            hsh_deref(&stale.oc);
        /* A Range miss fetches the whole object (fetch_miss) and cuts the range from it. */
        do_miss(req, &oc, &stale);
        return;
    }
    /* only-if-cached with nothing usable: never contact the origin (RFC 9111 5.2.1.7). */
    req->outcome = REQ_O_MISS;
    (void)dlv_error(req, 504, NULL, NULL);
}

void
req_dispatch(struct req *req)
{
    OBJ_CHECK(req, REQ_MAGIC);
    for (;;) {
        req->restart = false;
        dispatch_once(req);
        if (!req->restart)
            return;
        SRG_ASSERT(req->t_first == 0); /* hooks restart before anything is sent */
        if (req->restarts >= par.max_restarts) {
            log_msg(LOG_WARNING, "policy: \"restart\" past max_restarts (%u): 503",
                    par.max_restarts);
            (void)dlv_error(req, 503, NULL, "too many restarts");
            return;
        }
        if (req->body != H1_BODY_NONE && req->bereq != NULL) {
            /* Its body went to the backend already: there is none to send again. */
            (void)dlv_error(req, 503, NULL, "cannot restart a request whose body was sent");
            return;
        }
        req->restarts++;
        STAT_INC(policy_restart);
        TRACE_RESTART(req->trace, req->restarts);
        req->cs_fwd = req->cs_detail = NULL;
        req->bereq = NULL;
        req->retries = 0;
        req->be_name = NULL;
        req->status = 0;
        req->head_only = is_method(req, "HEAD");
    }
}
