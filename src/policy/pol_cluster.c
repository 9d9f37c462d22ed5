/*
 * surogat.cluster: what a policy asks of its `cluster` declaration
 * (clu.h), so that the request path needs no code of its own for a
 * fleet; vcl/cluster.lua is the policy that uses it.
 *
 *   recv(req)          in recv, first: answers the members' probe
 *                      (synth 200/503), lets a cluster message through
 *                      ("purge"), says whether the request came from a
 *                      member ("peer": a valid hop header), crossed one
 *                      ("loop": the cluster's Via mark without one) or a
 *                      client (nil), and removes a hop header that is
 *                      not believed.  The verdict is kept in req.ctx.cluster.
 *   route(bereq)       in backend_fetch, last: sends the fetch to the
 *                      member owning the key, with a signed hop header
 *                      and the cluster's Via element, or to the origin
 *                      (the owner is this node, the request crossed a
 *                      member, a pass, no member usable); returns the
 *                      backend's name and why
 *   is_peer(name)      a member other than this node (bereq.backend)
 *   failed(name)       a fetch from that member failed: the next member
 *                      on the ring takes its keys for a few seconds
 *   local_ttl()        seconds a copy from a member may be kept here
 *   invalidated(beresp) in backend_response: an invalidation applied here
 *                      since route() sent the fetch may concern its object
 *                      (the answer may be what it removed): then it is
 *                      answered but neither kept nor joined (overtaken)
 *   ban(expr)          ban here and on every member: ok, report
 *   ready()            this node caught up and is not draining
 *   info()             { name, self, origin, local_ttl, peers = { name = addr } }
 *
 * Each function reads the cluster of the program its state was built
 * from: a request that began under one program ends under it.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <lauxlib.h>

#include "surogat/clu.h"
#include "surogat/defs.h"
#include "surogat/dir.h"
#include "surogat/http.h"
#include "surogat/log.h"
#include "surogat/req.h"
#include "surogat/sb.h"
#include "surogat/sess.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/ws.h"
#include "surogat/xkey.h"

#include "pol_priv.h"

#define REPORT_MAX (CLU_MEMBERS_MAX * 256)

static struct clu *
cluster_of(lua_State *L, const char *fn)
{
    struct pol_wrk *pw = pol__wrk(L);
    struct clu *c = pw->prog != NULL ? pol__decl_cluster(pol__prog_cfg(pw->prog)) : NULL;

    if (c == NULL)
        (void)luaL_error(L, "surogat.cluster.%s: the program declares no cluster", fn);
    return (c);
}

/*
 * The worker's state, the hook running being h (else a Lua error): its
 * request's for recv, its backend transaction's (pw->bc) for a backend hook.
 */
static struct pol_wrk *
in_hook(lua_State *L, enum pol_hook h, const char *fn)
{
    struct pol_wrk *pw = pol__wrk(L);

    if (!pol__in_hook(pw) || pw->hook != h)
        (void)luaL_error(L, "surogat.cluster.%s: only in %s", fn, pol__hook_name[h]);
    return (pw);
}

static bool
txt_is(const struct txt *t, const char *s)
{
    return (t->len == strlen(s) && memcmp(t->b, s, t->len) == 0);
}

/*
 * What this module keeps in req.ctx: cluster (recv's verdict),
 * cluster_since (from when invalidations concern the fetch: tim_mono()
 * as it started, less clu_inval_window() for one from a member), cluster_nostore
 * (route() asked not to store).  _set() pops the value on top of the stack
 * into field `name`, making the table if there is none yet; _get()
 * pushes the field (nil without a table) and returns its type.
 */
static void
ctx_set(lua_State *L, struct pol_wrk *pw, const char *name)
{
    if (pw->ctx_ref == LUA_NOREF) {
        lua_newtable(L);
        pw->ctx_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    }
    lua_rawgeti(L, LUA_REGISTRYINDEX, pw->ctx_ref);
    lua_insert(L, -2);
    lua_setfield(L, -2, name);
    lua_pop(L, 1);
}

static int
ctx_get(lua_State *L, struct pol_wrk *pw, const char *name)
{
    if (pw->ctx_ref == LUA_NOREF) {
        lua_pushnil(L);
        return (LUA_TNIL);
    }
    lua_rawgeti(L, LUA_REGISTRYINDEX, pw->ctx_ref);
    lua_getfield(L, -1, name);
    lua_remove(L, -2);
    return (lua_type(L, -1));
}

/* recv's verdict, or NULL (a client, or no recv on this state: a background fetch). */
static const char *
verdict_get(lua_State *L, struct pol_wrk *pw, char *buf, size_t len)
{
    const char *v = NULL;

    if (ctx_get(L, pw, "cluster") == LUA_TSTRING) {
        snprintf(buf, len, "%s", lua_tostring(L, -1));
        v = buf;
    }
    lua_pop(L, 1);
    return (v);
}

/*
 * "peer", "loop" or NULL for req's head, removing a hop header not
 * believed.  *self: the hop header is this node's own, come back.
 */
static const char *
judge(const struct clu *c, struct http *hp, const char *client_ip, bool *self)
{
    unsigned from;

    *self = false;
    switch (clu_hop_check(c, hp, client_ip, NULL, 0, tim_real(), &from)) {
    case CLU_HOP_OK:
        *self = from == clu_self_index(c);
        return ("peer");
    case CLU_HOP_BAD:
        STAT_INC(cluster_hop_refused);
        (void)http_unset(hp, CLU_HOP_HEADER);
        break;
    case CLU_HOP_NONE:
        break;
    }
    return (clu_via_crossed(c, hp, self) ? "loop" : NULL);
}

/* At most a line a minute: every such request would say the same. */
static void
self_loop_warn(const struct clu *c)
{
    static double last; /* tim_mono(); racy by design: a line more or less */
    double now = tim_mono();

    if (now - last < 60)
        return;
    last = now;
    log_msg(LOG_WARNING,
            "cluster %s: a request %s sent to another member came back to it: a member's "
            "address in the peer list leads here",
            clu_name(c), clu_self(c));
}

static int
l_recv(lua_State *L)
{
    struct req *req = in_hook(L, POL_H_RECV, "recv")->req;
    struct clu *c = cluster_of(L, "recv");
    struct pol_wrk *pw = pol__wrk(L);
    struct http *hp = req->http;
    const char *v;
    bool ready, self;

    if (txt_is(&hp->url, CLU_PATH) && (txt_is(&hp->method, "GET") || txt_is(&hp->method, "HEAD"))) {
        /* The members' probe: ready once caught up at start, until draining. */
        ready = clu_ready() && !sess_draining();
        AN(pw->syn);
        pw->syn->status = ready ? 200 : 503;
        snprintf(pw->syn->reason, sizeof pw->syn->reason, "%s %s of cluster %s",
                 ready ? "Ready:" : "Not ready:", clu_self(c), clu_name(c));
        lua_pushliteral(L, "synth");
        lua_pushliteral(L, "probe");
        return (2);
    }
    if (txt_is(&hp->url, CLU_PATH) && txt_is(&hp->method, "PURGE")) {
        /* A cluster message: its hop header signs its body too, checked with it (req_purge). */
        lua_pushliteral(L, "purge");
        lua_pushliteral(L, "message");
        return (2);
    }
    v = judge(c, hp, req->sp != NULL ? req->sp->client_ip : NULL, &self);
    if (self) {
        /*
         * A member's address leads back here (a wrong peer list, or one
         * through the balancer): this very node holds the key's busy
         * object for the request that sent this one, so waiting for it
         * would wait for itself.  Fetch alongside instead.
         */
        req->hash_ignore_busy = true;
        self_loop_warn(c);
    }
    if (v != NULL)
        lua_pushstring(L, v);
    else
        lua_pushnil(L);
    ctx_set(L, pw, "cluster");
    lua_pushnil(L);
    if (v != NULL)
        lua_pushstring(L, v);
    else
        lua_pushnil(L);
    return (2);
}

/* The name of the director d, or of -b's backend when d is NULL. */
static void
push_dir_name(lua_State *L, const struct dir *d)
{
    if (d != NULL)
        lua_pushstring(L, dir_name(d));
    else
        lua_pushliteral(L, "default");
}

/* Add a field to the backend request, its value copied to the transaction's workspace. */
static void
bereq_add(lua_State *L, struct pol_bctx *bc, struct http *bq, const char *name, const char *val)
{
    size_t n = strlen(val);
    char *p = ws_alloc(bc->ws, n);

    if (p == NULL)
        (void)luaL_error(L, "surogat.cluster.route: workspace_client exhausted");
    memcpy(p, val, n);
    if (http_add(bq, (struct txt){ name, strlen(name) }, (struct txt){ p, n }) != 0)
        (void)luaL_error(L, "surogat.cluster.route: too many header fields (http_max_hdr)");
}

/*
 * The request's no-store that route() adds to keep a cold key's answer
 * out of this node's cache: for this fetch from a member only, never for
 * the member itself, nor for a retry that fetches here.
 */
#define NOSTORE "no-store, surogat-cluster-cold"

static void
unset_nostore(struct http *hp)
{
    unsigned k = 0;

    for (unsigned i = 0; i < hp->nhdr; i++) {
        const struct http_hdr *h = &hp->hdr[i];
        if (http_name_eq(&h->name, "Cache-Control") && h->val.len == strlen(NOSTORE) &&
            memcmp(h->val.b, NOSTORE, h->val.len) == 0)
            continue;
        hp->hdr[k++] = *h;
    }
    hp->nhdr = k;
}

static int
l_route(lua_State *L)
{
    struct pol_bctx *bc = in_hook(L, POL_H_BACKEND_FETCH, "route")->bc;
    struct http *bq = pol__obj_check(L, 1, POL_O_BEREQ, NULL);
    struct clu *c = cluster_of(L, "route");
    struct pol_wrk *pw = pol__wrk(L);
    const struct pol_cfg *cfg = pol__prog_cfg(pw->prog);
    char vbuf[16], hop[CLU_HOP_LEN], via[CLU_NAME_MAX * 2 + 32];
    const char *v, *why;
    struct dir *origin;
    unsigned m = 0;
    struct sb sb;
    bool self;

    if (ctx_get(L, pw, "cluster_nostore") != LUA_TNIL) {
        /* A retry: decided again below, maybe to fetch (and store) here. */
        unset_nostore(bc->creq);
        unset_nostore(bq);
        lua_pushnil(L);
        ctx_set(L, pw, "cluster_nostore");
    }
    lua_pop(L, 1);
    v = verdict_get(L, pw, vbuf, sizeof vbuf);
    if (v == NULL && bc->bg) /* a background refresh: its recv's verdict is its request's */
        v = judge(c, bc->creq, NULL, &self);
    (void)http_unset(bq, CLU_HOP_HEADER);
    if (clu_origin(c) != NULL)
        origin = pol__decl_find(cfg, clu_origin(c));
    else if (bc->dir != NULL && !clu_is_peer(c, dir_name(bc->dir)))
        origin = bc->dir;
    else
        origin = pol__decl_route(cfg, bc->creq);
    if (v != NULL) {
        why = "crossed";
        STAT_INC(cluster_crossed);
    } else if (bc->uncacheable || bc->key == NULL) {
        why = "pass";
    } else {
        switch (clu_route(c, bc->key, bc->keylen, &m)) {
        case CLU_R_PEER:
            bc->dir = pol__decl_find(cfg, clu_member_name(c, m));
            AN(bc->dir);
            /*
             * A key this node seldom asks for: its answer is not stored
             * here (RFC 9111's no-store in the request: nor is a
             * hit-for-miss marker left, which would send the next
             * requests to the origin), so that copies of the others'
             * keys do not evict the keys this node owns.
             */
            if (clu_hot_touch(bc->key, bc->keylen) < clu_local_hot(c) &&
                http_add(bc->creq, TXT_LIT("Cache-Control"), TXT_LIT(NOSTORE)) == 0) {
                lua_pushboolean(L, true);
                ctx_set(L, pw, "cluster_nostore");
                STAT_INC(cluster_fwd_cold);
            }
            clu_hop_make(c, &bq->method, http_value(bq, "Host"), &bq->url, NULL, 0, tim_real(), hop,
                         sizeof hop);
            bereq_add(L, bc, bq, CLU_HOP_HEADER, hop);
            sb_init(&sb, via, sizeof via);
            clu_via(c, &sb);
            bereq_add(L, bc, bq, "Via", via);
            lua_pushnumber(L, tim_mono() - clu_inval_window(c));
            ctx_set(L, pw, "cluster_since");
            STAT_INC(cluster_fwd);
            lua_pushstring(L, clu_member_name(c, m));
            lua_pushliteral(L, "peer");
            return (2);
        case CLU_R_SELF:
            why = "owner";
            STAT_INC(cluster_owner);
            break;
        case CLU_R_ALONE:
        default:
            why = "alone";
            STAT_INC(cluster_alone);
            break;
        }
    }
    bc->dir = origin;
    lua_pushnumber(L, tim_mono());
    ctx_set(L, pw, "cluster_since");
    push_dir_name(L, origin);
    lua_pushstring(L, why);
    return (2);
}

#define TAGS_MAX 64 /* the response's tags looked at; past them, any tag purge concerns it */

/*
 * invalidated(beresp), in backend_response: whether an invalidation
 * applied here since route() sent this fetch -- or, for a fetch from a
 * member, shortly before, while the member may not have had it yet
 * (clu.h: clu_inval_window) -- may concern its object (the same key, a
 * surrogate key of beresp in common, a ban): its answer may be what the
 * invalidation removed.  Then the busy object is overtaken (hsh_overtake): its client
 * gets the answer, nobody joins it from now on, and it is dropped rather
 * than published.  The index overtakes by itself a fetch whose key or
 * tags an invalidation finds once the head is stored; this covers the
 * time before, when the object's tags were not known.
 */
static int
l_invalidated(lua_State *L)
{
    struct pol_bctx *bc = in_hook(L, POL_H_BACKEND_RESPONSE, "invalidated")->bc;
    struct pol_wrk *pw = pol__wrk(L);
    const struct pol_ex *ex;
    struct txt tags[TAGS_MAX];
    unsigned ntags = 0;
    double since = 0;
    bool known = false, overflow = false;
    int t;

    (void)cluster_of(L, "invalidated");
    (void)pol__obj_check(L, 1, POL_O_BERESP, &ex);
    if (ex->br == NULL)
        return (luaL_argerror(L, 1, "backend_response's beresp expected"));
    if (ctx_get(L, pw, "cluster_since") == LUA_TNUMBER) {
        since = lua_tonumber(L, -1);
        known = true;
    }
    lua_pop(L, 1);
    if (!known || clu_inval_last() < since) {
        lua_pushboolean(L, false);
        return (1);
    }
    /*
     * for name, value in beresp.http:each(): the tags of its Surrogate-Key
     * and xkey fields, the values kept in a table so that they live while
     * they are compared.
     */
    lua_newtable(L);
    t = lua_gettop(L);
    lua_getfield(L, 1, "http");
    lua_getfield(L, -1, "each");
    lua_insert(L, -2);
    lua_call(L, 1, 1);
    for (;;) {
        size_t nl, vl;
        const char *n, *v;
        lua_pushvalue(L, -1);
        lua_call(L, 0, 2);
        if (lua_isnil(L, -2)) {
            lua_pop(L, 2);
            break;
        }
        n = lua_tolstring(L, -2, &nl);
        v = lua_tolstring(L, -1, &vl);
        if ((nl == 13 && strncasecmp(n, "Surrogate-Key", 13) == 0) ||
            (nl == 4 && strncasecmp(n, "xkey", 4) == 0)) {
            if (ntags == TAGS_MAX)
                overflow = true;
            else
                ntags += xkey_split(v, vl, true, tags + ntags, TAGS_MAX - ntags);
            lua_rawseti(L, t, (lua_Integer)lua_rawlen(L, t) + 1); /* keeps v */
            lua_pop(L, 1);
        } else {
            lua_pop(L, 2);
        }
    }
    lua_pop(L, 1);
    /* More tags than looked at: any surrogate-key purge may concern it. */
    ex->br->overtaken =
        overflow || clu_inval_since(since, bc->key, bc->keylen, tags, ntags);
    lua_pushboolean(L, ex->br->overtaken);
    return (1);
}

static int
l_is_peer(lua_State *L)
{
    struct clu *c = cluster_of(L, "is_peer");
    const char *name = luaL_optstring(L, 1, NULL);

    lua_pushboolean(L, name != NULL && clu_is_peer(c, name));
    return (1);
}

static int
l_failed(lua_State *L)
{
    struct clu *c = cluster_of(L, "failed");
    const char *name = luaL_checkstring(L, 1);
    int i = clu_member_find(c, name);

    if (i >= 0 && (unsigned)i != clu_self_index(c)) {
        clu_failed(c, (unsigned)i);
        STAT_INC(cluster_peer_failed);
    }
    return (0);
}

static int
l_local_ttl(lua_State *L)
{
    lua_pushnumber(L, clu_local_ttl(cluster_of(L, "local_ttl")));
    return (1);
}

static int
l_ready(lua_State *L)
{
    (void)cluster_of(L, "ready");
    lua_pushboolean(L, clu_ready() && !sess_draining());
    return (1);
}

static int
l_ban(lua_State *L)
{
    struct clu *c = cluster_of(L, "ban");
    size_t len;
    const char *expr = luaL_checklstring(L, 1, &len);
    char ebuf[256], *rep;
    struct clu_op op;
    struct sb err, out;
    unsigned nack;

    if (!pol__in_hook(pol__wrk(L)))
        return (luaL_error(L, "surogat.cluster.ban: in hooks only"));
    sb_init(&err, ebuf, sizeof ebuf);
    clu_op_init(&op, clu_self(c), CLU_OP_BAN, false, expr, len);
    if (memchr(expr, '\0', len) != NULL || clu_op_apply(&op, &err) < 0) {
        lua_pushnil(L);
        lua_pushstring(L, memchr(expr, '\0', len) != NULL ? "ban: NUL in the expression" : ebuf);
        return (2);
    }
    rep = malloc(REPORT_MAX);
    AN(rep);
    sb_init(&out, rep, REPORT_MAX);
    nack = clu_fanout(c, &op, 0, &out);
    lua_pushboolean(L, nack == 0);
    lua_pushlstring(L, out.buf, out.len);
    free(rep);
    return (2);
}

static int
l_info(lua_State *L)
{
    struct clu *c = cluster_of(L, "info");

    lua_createtable(L, 0, 5);
    lua_pushstring(L, clu_name(c));
    lua_setfield(L, -2, "name");
    lua_pushstring(L, clu_self(c));
    lua_setfield(L, -2, "self");
    if (clu_origin(c) != NULL) {
        lua_pushstring(L, clu_origin(c));
        lua_setfield(L, -2, "origin");
    }
    lua_pushnumber(L, clu_local_ttl(c));
    lua_setfield(L, -2, "local_ttl");
    lua_createtable(L, 0, (int)clu_nmember(c));
    for (unsigned i = 0; i < clu_nmember(c); i++) {
        lua_pushstring(L, clu_member_addr(c, i));
        lua_setfield(L, -2, clu_member_name(c, i));
    }
    lua_setfield(L, -2, "peers");
    return (1);
}

void
pol__cluster_open(lua_State *L)
{
    static const luaL_Reg lib[] = {
        { "recv", l_recv },
        { "route", l_route },
        { "is_peer", l_is_peer },
        { "failed", l_failed },
        { "local_ttl", l_local_ttl },
        { "ready", l_ready },
        { "ban", l_ban },
        { "info", l_info },
        { "invalidated", l_invalidated },
        { NULL, NULL },
    };

    luaL_checktype(L, -1, LUA_TTABLE);
    luaL_newlib(L, lib);
    lua_setfield(L, -2, "cluster");
}
