/*
 * Hook calls: push the request's objects, run the script's hook and then
 * builtin.lua's while the answer is nil, map the action returned to enum
 * pol_act.  Runs on the request's worker, in that worker's own Lua state
 * (pol__state()), so nothing here takes a lock.  The objects pushed for a
 * call are killed when it returns: a script that keeps one gets an error,
 * not a dangling head.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <lauxlib.h>

#include "surogat/defs.h"
#include "surogat/http.h"
#include "surogat/log.h"
#include "surogat/pol.h"
#include "surogat/req.h"
#include "surogat/sb.h"
#include "surogat/stat.h"
#include "surogat/wrk.h"
#include "surogat/ws.h"

#include "pol_priv.h"

static uint64_t next_ctx_id; /* atomic: req.ctx ids, 0 is "none yet" */

static int
msgh(lua_State *L)
{
    if (!lua_isstring(L, 1))
        lua_pushliteral(L, "error object is not a string");
    return (1);
}

static void
hook_fail(struct pol_wrk *pw, const char *msg)
{
    STAT_INC(policy_error);
    log_msg(LOG_ERR, "policy: %s: %s", pol__hook_name[pw->hook], msg);
}

/*
 * Call hook h with the nargs values on top of the stack: the script's
 * function, then builtin.lua's while the answer is nil.  The index in
 * acts[] of the action returned, acts_n when both returned nil (or none
 * exists), -1 on error (logged).  Pops the arguments.  acts NULL: any
 * value is accepted and ignored (log).
 */
static int
run_hook(struct pol_wrk *pw, enum pol_hook h, int nargs, const char *const *acts, int acts_n)
{
    lua_State *L = pw->L;
    int base = lua_gettop(L) - nargs + 1, rv = acts_n, st;
    const int refs[2] = { pw->ref_user[h], pw->ref_builtin[h] };

    pw->hook = h;
    lua_pushcfunction(L, msgh);
    for (int i = 0; i < 2 && rv == acts_n; i++) {
        const char *a;
        lua_Debug ar;

        if (refs[i] == LUA_NOREF)
            continue;
        lua_rawgeti(L, LUA_REGISTRYINDEX, refs[i]);
        for (int k = 0; k < nargs; k++)
            lua_pushvalue(L, base + k);
        pol__arm_limit(L);
        if ((st = lua_pcall(L, nargs, 1, base + nargs)) != LUA_OK) {
            if (st == LUA_ERRMEM) {
                char msg[300];
                snprintf(msg, sizeof msg, "%s: not enough memory (policy_max_memory)",
                         pol__prog_path(pw->prog));
                hook_fail(pw, msg);
            } else {
                hook_fail(pw, lua_tostring(L, -1));
            }
            lua_pop(L, 1);
            rv = -1;
            break;
        }
        lua_sethook(L, NULL, 0, 0);
        if (lua_isnil(L, -1)) {
            lua_pop(L, 1);
            continue;
        }
        if (acts == NULL) {
            /* log: no action to take, the value is ignored */
            lua_pop(L, 1);
            break;
        }
        a = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
        for (rv = 0; a != NULL && rv < acts_n; rv++)
            if (strcmp(a, acts[rv]) == 0)
                break;
        if (a == NULL || rv == acts_n) {
            char msg[400];
            struct sb sb;

            sb_init(&sb, msg, sizeof msg);
            lua_rawgeti(L, LUA_REGISTRYINDEX, refs[i]);
            AN(lua_getinfo(L, ">S", &ar));
            sb_printf(&sb, "%s:%d: %s returned %s%s%s, not one of", ar.short_src,
                      ar.linedefined, pol__hook_name[h], a != NULL ? "\"" : "",
                      a != NULL ? a : luaL_typename(L, -1), a != NULL ? "\"" : "");
            for (int k = 0; k < acts_n; k++)
                sb_printf(&sb, "%s \"%s\"", k > 0 ? "," : "", acts[k]);
            hook_fail(pw, msg);
            rv = -1;
        }
        lua_pop(L, 1);
    }
    lua_settop(L, base - 1);
    lua_sethook(L, NULL, 0, 0);
    return (rv);
}

/* Push req as kind (and make sure req.ctx is this request's). */
static void
push_req(struct pol_wrk *pw, struct req *req, enum pol_obj_kind kind, int ro)
{
    lua_State *L = pw->L;

    if (req->pol_id == 0)
        req->pol_id = __atomic_add_fetch(&next_ctx_id, 1, __ATOMIC_RELAXED);
    if (pw->ctx_id != req->pol_id) {
        luaL_unref(L, LUA_REGISTRYINDEX, pw->ctx_ref);
        pw->ctx_ref = LUA_NOREF;
        pw->ctx_id = req->pol_id;
    }
    pw->req = req;
    pol__obj_push(L, kind, req->http, NULL, ro);
}

/* Invalidate the objects of this call (n of them, from the stack's first slot on). */
static void
end_call(struct pol_wrk *pw, int first, int n)
{
    for (int i = 0; i < n; i++)
        pol__obj_kill(pw->L, first + i);
    lua_settop(pw->L, first - 1);
    pw->req = NULL;
    pw->syn = NULL;
}

/* Hooks run on the worker of the request; a failing state build answers POL_ERROR. */
static struct pol_wrk *
begin(struct req *req)
{
    OBJ_CHECK(req, REQ_MAGIC);
    OBJ_CHECK(req->wrk, WRK_MAGIC);
    return (pol__state(req->wrk));
}

enum pol_act
pol_recv(struct req *req, struct pol_synth *syn)
{
    static const char *const acts[] = { "hash", "lookup", "pass", "pipe", "purge", "synth" };
    static const enum pol_act map[] = { POL_HASH, POL_HASH, POL_PASS, POL_PIPE, POL_PURGE,
                                        POL_SYNTH };
    struct pol_wrk *pw = begin(req);
    int top, rv;

    if (pw == NULL)
        return (POL_ERROR);
    top = lua_gettop(pw->L);
    push_req(pw, req, POL_O_REQ, 0);
    pw->syn = syn;
    syn->status = 0;
    lua_pushvalue(pw->L, -1);
    rv = run_hook(pw, POL_H_RECV, 1, acts, (int)ARRAY_LEN(acts));
    end_call(pw, top + 1, 1);
    if (rv < 0)
        return (POL_ERROR);
    if (rv == (int)ARRAY_LEN(acts))
        return (POL_HASH);
    if (map[rv] == POL_SYNTH && syn->status == 0) {
        syn->status = 503;
        snprintf(syn->reason, sizeof syn->reason, "%s", "recv returned \"synth\"");
    }
    return (map[rv]);
}

int
pol_hash(struct req *req, char **key, size_t *len)
{
    static const char *const acts[] = { "lookup" };
    struct pol_wrk *pw = begin(req);
    size_t blen = 0, off;
    char *builtin = NULL, *k;
    int top, rv;

    *key = NULL;
    if (pw == NULL)
        return (-1);
    top = lua_gettop(pw->L);
    pw->hlen = 0;
    push_req(pw, req, POL_O_REQ, 0);
    lua_pushvalue(pw->L, -1);
    rv = run_hook(pw, POL_H_HASH, 1, acts, 1);
    end_call(pw, top + 1, 1);
    if (rv < 0)
        return (-1);
    if (rv == 1 || pw->hlen == 0) {
        builtin = req_cache_key(req, &blen);
        if (builtin == NULL)
            return (0);
        if (pw->hlen == 0) {
            *key = builtin;
            *len = blen;
            return (0);
        }
    }
    /* "lookup": the user's pieces alone, without the NUL before the first. */
    off = builtin != NULL ? 0 : 1;
    k = ws_alloc(&req->wrk->ws, blen + pw->hlen);
    if (k == NULL)
        return (0);
    if (builtin != NULL)
        memcpy(k, builtin, blen);
    memcpy(k + blen, pw->hbuf + off, pw->hlen - off);
    *key = k;
    *len = blen + pw->hlen - off;
    return (0);
}

enum pol_act
pol_backend_response(struct req *req, struct pol_beresp *br)
{
    static const char *const acts[] = { "deliver", "pass", "abandon" };
    static const enum pol_act map[] = { POL_DELIVER, POL_PASS, POL_ABANDON };
    struct pol_wrk *pw = begin(req);
    int top, rv;

    if (pw == NULL)
        return (POL_ERROR);
    if (pw->ref_user[POL_H_BACKEND_RESPONSE] == LUA_NOREF &&
        pw->ref_builtin[POL_H_BACKEND_RESPONSE] == LUA_NOREF)
        return (POL_DELIVER);
    top = lua_gettop(pw->L);
    push_req(pw, req, POL_O_BEREQ, 1);
    pol__obj_push(pw->L, POL_O_BERESP, br->resp, br, 0);
    lua_pushvalue(pw->L, -2);
    lua_pushvalue(pw->L, -2);
    rv = run_hook(pw, POL_H_BACKEND_RESPONSE, 2, acts, (int)ARRAY_LEN(acts));
    end_call(pw, top + 1, 2);
    if (rv < 0)
        return (POL_ERROR);
    return (rv == (int)ARRAY_LEN(acts) ? POL_DELIVER : map[rv]);
}

enum pol_act
pol_deliver(struct req *req, struct http *resp, struct pol_synth *syn)
{
    static const char *const acts[] = { "deliver", "synth" };
    struct pol_wrk *pw = begin(req);
    int top, rv;

    if (pw == NULL)
        return (POL_ERROR);
    top = lua_gettop(pw->L);
    push_req(pw, req, POL_O_REQ, 0);
    pol__obj_push(pw->L, POL_O_RESP, resp, NULL, 0);
    pw->syn = syn;
    syn->status = 0;
    lua_pushvalue(pw->L, -2);
    lua_pushvalue(pw->L, -2);
    rv = run_hook(pw, POL_H_DELIVER, 2, acts, (int)ARRAY_LEN(acts));
    end_call(pw, top + 1, 2);
    if (rv < 0)
        return (POL_ERROR);
    if (rv == 1) {
        if (syn->status == 0) {
            syn->status = 503;
            snprintf(syn->reason, sizeof syn->reason, "%s", "deliver returned \"synth\"");
        }
        return (POL_SYNTH);
    }
    return (POL_DELIVER);
}

/*
 * hit, miss and pass: (req[, obj]) with synth allowed.  A script without
 * the hook gets dflt at once -- builtin.lua's answer -- without a call;
 * so does one whose hook and builtin.lua's both return nil.
 */
static enum pol_act
decide(struct req *req, enum pol_hook h, const struct pol_obj *obj, struct pol_synth *syn,
       const char *const *acts, const enum pol_act *map, int nacts, enum pol_act dflt)
{
    struct pol_wrk *pw;
    int top, rv, nargs = obj != NULL ? 2 : 1;

    syn->status = 0;
    if (!pol__user_has(h))
        return (dflt);
    pw = begin(req);
    if (pw == NULL)
        return (POL_ERROR);
    top = lua_gettop(pw->L);
    push_req(pw, req, POL_O_REQ, 0);
    if (obj != NULL)
        pol__obj_push(pw->L, POL_O_OBJ, obj->resp, (void *)(uintptr_t)obj, 1);
    pw->syn = syn;
    for (int i = 0; i < nargs; i++)
        lua_pushvalue(pw->L, top + 1 + i);
    rv = run_hook(pw, h, nargs, acts, nacts);
    end_call(pw, top + 1, nargs);
    if (rv < 0)
        return (POL_ERROR);
    if (rv == nacts)
        return (dflt);
    if (map[rv] == POL_SYNTH && syn->status == 0) {
        syn->status = 503;
        snprintf(syn->reason, sizeof syn->reason, "%s returned \"synth\"", pol__hook_name[h]);
    }
    return (map[rv]);
}

enum pol_act
pol_hit(struct req *req, const struct pol_obj *obj, struct pol_synth *syn)
{
    static const char *const acts[] = { "deliver", "miss", "pass", "synth" };
    static const enum pol_act map[] = { POL_DELIVER, POL_MISS, POL_PASS, POL_SYNTH };

    AN(obj);
    return (decide(req, POL_H_HIT, obj, syn, acts, map, (int)ARRAY_LEN(acts), POL_DELIVER));
}

enum pol_act
pol_miss(struct req *req, struct pol_synth *syn)
{
    static const char *const acts[] = { "fetch", "pass", "synth" };
    static const enum pol_act map[] = { POL_FETCH, POL_PASS, POL_SYNTH };

    return (decide(req, POL_H_MISS, NULL, syn, acts, map, (int)ARRAY_LEN(acts), POL_FETCH));
}

enum pol_act
pol_pass(struct req *req, struct pol_synth *syn)
{
    static const char *const acts[] = { "fetch", "synth" };
    static const enum pol_act map[] = { POL_FETCH, POL_SYNTH };

    return (decide(req, POL_H_PASS, NULL, syn, acts, map, (int)ARRAY_LEN(acts), POL_FETCH));
}

void
pol_log(struct req *req)
{
    struct pol_wrk *pw;
    struct http resp;
    const char *reason;
    int top;

    if (!pol__user_has(POL_H_LOG))
        return;
    pw = begin(req);
    if (pw == NULL)
        return;
    http_init(&resp, NULL, 0);
    resp.proto = req->http->proto == 10 ? 10 : 11;
    resp.status = req->status;
    reason = http_reason(req->status);
    resp.reason = (struct txt){ reason, strlen(reason) };
    top = lua_gettop(pw->L);
    push_req(pw, req, POL_O_REQ, 1);
    pol__obj_push(pw->L, POL_O_RESP, &resp, NULL, 1);
    lua_pushvalue(pw->L, -2);
    lua_pushvalue(pw->L, -2);
    /* Nothing to decide any more: an error is logged and counted, the client has its answer. */
    (void)run_hook(pw, POL_H_LOG, 2, NULL, 0);
    end_call(pw, top + 1, 2);
}
