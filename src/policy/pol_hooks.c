/*
 * Hook calls: push the request's objects, run the script's hook and then
 * builtin.lua's while the answer is nil, map the action returned to enum
 * pol_act.  Runs on the request's worker, in that worker's own Lua state
 * (pol__state()), so nothing here takes a lock.  The objects pushed for a
 * call are killed when it returns: a script that keeps one gets an error,
 * not a dangling head.
 *
 * The client-side hooks run for a struct req; the backend hooks for a
 * struct pol_bctx, the backend transaction's own context, on the worker
 * that fetches: the request's, or a background refresh's, which holds
 * the program it began under (pol__state_prog()).  Both share req.ctx by
 * the transaction id: a request's fetch has the request's.
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
#include "surogat/trace.h"
#include "surogat/wrk.h"
#include "surogat/ws.h"

#include "pol_priv.h"

static uint64_t next_ctx_id; /* atomic: req.ctx ids, 0 is "none yet" */

/* The actions each hook may return, and what each means; log's value is ignored. */
struct acts {
    const char *const *word;
    const enum pol_act *act;
    int n;
};
/* A word for each action: an array of negative size, a compile error, otherwise. */
#define ACTS(w, a)                                                                              \
    {                                                                                           \
        (w), (a), (int)(ARRAY_LEN(w) + 0 * sizeof(char[ARRAY_LEN(w) == ARRAY_LEN(a) ? 1 : -1])) \
    }

static const char *const recv_w[] = { "hash", "lookup", "pass", "pipe", "purge", "synth" };
static const enum pol_act recv_a[] = {
    POL_HASH, POL_HASH, POL_PASS, POL_PIPE, POL_PURGE, POL_SYNTH
};
static const char *const hash_w[] = { "lookup" };
static const enum pol_act hash_a[] = { POL_HASH };
static const char *const beresp_w[] = { "deliver", "pass", "abandon", "retry" };
static const enum pol_act beresp_a[] = { POL_DELIVER, POL_PASS, POL_ABANDON, POL_RETRY };
static const char *const deliver_w[] = { "deliver", "synth", "restart" };
static const enum pol_act deliver_a[] = { POL_DELIVER, POL_SYNTH, POL_RESTART };
static const char *const hit_w[] = { "deliver", "miss", "pass", "synth", "restart" };
static const enum pol_act hit_a[] = { POL_DELIVER, POL_MISS, POL_PASS, POL_SYNTH, POL_RESTART };
static const char *const miss_w[] = { "fetch", "pass", "synth", "restart" };
static const enum pol_act miss_a[] = { POL_FETCH, POL_PASS, POL_SYNTH, POL_RESTART };
static const char *const pass_w[] = { "fetch", "synth", "restart" };
static const enum pol_act pass_a[] = { POL_FETCH, POL_SYNTH, POL_RESTART };
static const char *const synth_w[] = { "deliver", "restart" };
static const enum pol_act synth_a[] = { POL_DELIVER, POL_RESTART };
static const char *const befetch_w[] = { "fetch", "abandon" };
static const enum pol_act befetch_a[] = { POL_FETCH, POL_ABANDON };
static const char *const beerr_w[] = { "deliver", "retry", "abandon" };
static const enum pol_act beerr_a[] = { POL_DELIVER, POL_RETRY, POL_ABANDON };
static const char *const pipe_w[] = { "pipe", "synth" };
static const enum pol_act pipe_a[] = { POL_PIPE, POL_SYNTH };
static const char *const purge_w[] = { "synth", "restart" };
static const enum pol_act purge_a[] = { POL_SYNTH, POL_RESTART };

static const struct acts hook_acts[POL_H_MAX] = {
    [POL_H_RECV] = ACTS(recv_w, recv_a),
    [POL_H_HASH] = ACTS(hash_w, hash_a),
    [POL_H_BACKEND_RESPONSE] = ACTS(beresp_w, beresp_a),
    [POL_H_DELIVER] = ACTS(deliver_w, deliver_a),
    [POL_H_HIT] = ACTS(hit_w, hit_a),
    [POL_H_MISS] = ACTS(miss_w, miss_a),
    [POL_H_PASS] = ACTS(pass_w, pass_a),
    [POL_H_LOG] = { NULL, NULL, 0 },
    [POL_H_SYNTH] = ACTS(synth_w, synth_a),
    [POL_H_BACKEND_FETCH] = ACTS(befetch_w, befetch_a),
    [POL_H_BACKEND_ERROR] = ACTS(beerr_w, beerr_a),
    [POL_H_PIPE] = ACTS(pipe_w, pipe_a),
    [POL_H_PURGE] = ACTS(purge_w, purge_a),
};

/* The index of `word` among hook h's actions; the number of them when it is none. */
static int
act_index(enum pol_hook h, const char *word)
{
    const struct acts *a = &hook_acts[h];
    int i;

    for (i = 0; i < a->n; i++)
        if (strcmp(word, a->word[i]) == 0)
            break;
    return (i);
}

bool
pol__hook_allows(enum pol_hook h, const char *word)
{
    return (hook_acts[h].word == NULL || act_index(h, word) < hook_acts[h].n);
}

void
pol__hook_acts(enum pol_hook h, struct sb *sb)
{
    for (int i = 0; i < hook_acts[h].n; i++)
        sb_printf(sb, "%s\"%s\"", i > 0 ? ", " : "", hook_acts[h].word[i]);
}

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
 * hook_acts[h] of the action returned, its count when both returned nil
 * (or none exists), -1 on error (logged).  Pops the arguments.  log's
 * value is ignored.
 */
static int
run_hook(struct pol_wrk *pw, enum pol_hook h, int nargs)
{
    lua_State *L = pw->L;
    const struct acts *acts = &hook_acts[h];
    int base = lua_gettop(L) - nargs + 1, rv = acts->n, st;
    const int refs[2] = { pw->ref_user[h], pw->ref_builtin[h] };
    const char *tripped;

    pw->hook = h;
    pw->answered = "default";
    lua_pushcfunction(L, msgh);
    for (int i = 0; i < 2 && rv == acts->n; i++) {
        const char *a;
        lua_Debug ar;

        if (refs[i] == LUA_NOREF)
            continue;
        lua_rawgeti(L, LUA_REGISTRYINDEX, refs[i]);
        for (int k = 0; k < nargs; k++)
            lua_pushvalue(L, base + k);
        pol__limit_arm(pw);
        st = lua_pcall(L, nargs, 1, base + nargs);
        pol__limit_disarm(pw);
        /* A limit that tripped fails the call, whatever came back (a caught error ...). */
        if (pw->lim.trip != POL_TRIP_NONE || st != LUA_OK) {
            if ((tripped = pol__limit_tripped(pw)) != NULL) {
                hook_fail(pw, tripped);
            } else if (st == LUA_ERRMEM) {
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
        if (lua_isnil(L, -1)) {
            lua_pop(L, 1);
            continue;
        }
        pw->answered = i == 0 ? "script" : "builtin";
        if (acts->word == NULL) {
            /* log: no action to take, the value is ignored */
            lua_pop(L, 1);
            break;
        }
        a = lua_type(L, -1) == LUA_TSTRING ? lua_tostring(L, -1) : NULL;
        if (a == NULL || (rv = act_index(h, a)) == acts->n) {
            char msg[400];
            struct sb sb;

            sb_init(&sb, msg, sizeof msg);
            lua_rawgeti(L, LUA_REGISTRYINDEX, refs[i]);
            AN(lua_getinfo(L, ">S", &ar));
            sb_printf(&sb, "%s:%d: %s returned %s%s%s, not one of ", ar.short_src, ar.linedefined,
                      pol__hook_name[h], a != NULL ? "\"" : "",
                      a != NULL ? a : luaL_typename(L, -1), a != NULL ? "\"" : "");
            pol__hook_acts(h, &sb);
            hook_fail(pw, msg);
            rv = -1;
        }
        lua_pop(L, 1);
    }
    lua_settop(L, base - 1);
    return (rv);
}

/*
 * req.ctx for request id: its own table if its hooks ran here before (kept
 * by id, so nothing of another request's reaches it), else none yet; the
 * current one is kept in its place, the oldest kept let go.
 */
static void
ctx_switch(struct pol_wrk *pw, uint64_t id)
{
    int ref = LUA_NOREF;

    for (unsigned i = 0; i < POL_CTX_KEEP; i++) {
        if (pw->ctx_keep_id[i] == id && pw->ctx_keep_ref[i] != LUA_NOREF) {
            ref = pw->ctx_keep_ref[i];
            pw->ctx_keep_ref[i] = LUA_NOREF;
            pw->ctx_keep_id[i] = 0;
            break;
        }
    }
    if (pw->ctx_ref != LUA_NOREF) {
        unsigned k = pw->ctx_keep_next++ % POL_CTX_KEEP;
        luaL_unref(pw->L, LUA_REGISTRYINDEX, pw->ctx_keep_ref[k]);
        pw->ctx_keep_ref[k] = pw->ctx_ref;
        pw->ctx_keep_id[k] = pw->ctx_id;
    }
    pw->ctx_ref = ref;
    pw->ctx_id = id;
}

static uint64_t
xid_new(void)
{
    return (__atomic_add_fetch(&next_ctx_id, 1, __ATOMIC_RELAXED));
}

/*
 * A hook of req (client side), or of backend transaction bc, is about to
 * run: make sure req.ctx is its own.
 */
static void
enter(struct pol_wrk *pw, struct req *req, struct pol_bctx *bc)
{
    uint64_t id;

    if (req != NULL) {
        if (req->pol_id == 0)
            req->pol_id = xid_new();
        id = req->pol_id;
    } else {
        id = bc->xid;
    }
    if (pw->ctx_id != id) {
        /* Another request: nothing of the last one's may reach this one. */
        ctx_switch(pw, id);
        pol__env_reset(pw);
        /* It waited without its worker: what its hooks kept comes back. */
        if (req != NULL && req->pol_carry != NULL)
            pol__unpark(pw, req);
    }
    pw->req = req;
    pw->bc = bc;
}

/* Push the request as kind over hp (req->http, or a pipe's backend request). */
static void
push_req(struct pol_wrk *pw, struct req *req, enum pol_obj_kind kind, struct http *hp, int ro)
{
    enter(pw, req, NULL);
    pol__obj_push(pw->L, kind, hp, NULL, ro);
}

/* Invalidate the objects of this call (n of them, from the stack's first slot on). */
static void
end_call(struct pol_wrk *pw, int first, int n)
{
    for (int i = 0; i < n; i++)
        pol__obj_kill(pw->L, first + i);
    lua_settop(pw->L, first - 1);
    pw->req = NULL;
    pw->bc = NULL;
    pw->syn = NULL;
}

/* Hooks run on the worker of the request; a failing state build answers POL_ERROR. */
static struct pol_wrk *
begin(struct req *req)
{
    OBJ_CHECK(req, REQ_MAGIC);
    OBJ_CHECK(req->wrk, WRK_MAGIC);
    if (req->pol_prog != NULL)
        return (pol__state_prog(req->wrk, req->pol_prog));
    return (pol__state(req->wrk, req->pol_id != 0));
}

/*
 * A backend transaction's hooks run on the worker that fetches, under
 * the program it began under: its request's (whose worker keeps it), or
 * the one a detached transaction holds.
 */
static struct pol_wrk *
begin_be(struct pol_bctx *bc)
{
    OBJ_CHECK(bc, POL_BCTX_MAGIC);
    OBJ_CHECK(bc->wrk, WRK_MAGIC);
    if (bc->prog != NULL)
        return (pol__state_prog(bc->wrk, bc->prog));
    if (bc->req_prog != NULL)
        return (pol__state_prog(bc->wrk, bc->req_prog));
    return (pol__state(bc->wrk, bc->in_request));
}

struct ws *
pol__ws(const struct pol_wrk *pw)
{
    AN(pol__in_hook(pw));
    return (pw->req != NULL ? pw->req->ws : pw->bc->ws);
}

void
pol_bctx_init(struct pol_bctx *bc, struct req *req)
{
    struct pol_wrk *pw;

    OBJ_CHECK(req, REQ_MAGIC);
    bc->magic = POL_BCTX_MAGIC;
    bc->wrk = req->wrk;
    bc->ws = req->ws;
    bc->in_request = req->pol_id != 0;
    if (req->pol_id == 0)
        req->pol_id = xid_new();
    bc->xid = req->pol_id;
    bc->creq = req->http;
    bc->bereq = NULL;
    bc->dir = req->dir;
    bc->be_name = req->be_name;
    bc->key = req->lookup_key;
    bc->keylen = req->lookup_keylen;
    bc->restarts = req->restarts;
    bc->retries = req->retries;
    bc->uncacheable = req->bereq_uncacheable;
    bc->bg = false;
    bc->hooks = 0;
    bc->trace = NULL;
    bc->sp = req->sp;
    bc->client.filled = false;
    bc->prog = NULL;
    bc->req_prog = req->pol_prog;
    /* It waited without its worker: its ctx and globals come back before a backend hook. */
    if (req->pol_carry != NULL && pol_active() && (pw = begin(req)) != NULL) {
        enter(pw, req, NULL);
        pw->req = NULL;
    }
}

void
pol_bctx_resume(struct pol_bctx *bc, struct req *req)
{
    struct pol_wrk *pw;

    OBJ_CHECK(bc, POL_BCTX_MAGIC);
    OBJ_CHECK(req, REQ_MAGIC);
    bc->wrk = req->wrk;
    bc->ws = req->ws;
    bc->req_prog = req->pol_prog;
    if (req->pol_carry != NULL && pol_active() && (pw = begin(req)) != NULL) {
        enter(pw, req, NULL);
        pw->req = NULL;
    }
}

void
pol_bctx_detach(struct pol_bctx *bc, struct req *req)
{
    struct pol_wrk *pw;

    OBJ_CHECK(bc, POL_BCTX_MAGIC);
    OBJ_CHECK(req, REQ_MAGIC);
    pol__client_fill(&bc->client, req->sp);
    bc->sp = NULL;
    bc->wrk = NULL;
    bc->ws = NULL;
    bc->trace = NULL;
    bc->bereq = NULL;
    bc->bg = true;
    bc->req_prog = NULL; /* its own reference follows, the request's may go */
    bc->xid = xid_new();
    AZ(bc->prog);
    if (pol_active() && (pw = begin(req)) != NULL)
        bc->prog = pol__prog_ref(pw->prog);
}

void
pol_bctx_fini(struct pol_bctx *bc)
{
    OBJ_CHECK(bc, POL_BCTX_MAGIC);
    pol__prog_unref(&bc->prog);
    bc->magic = 0;
}

/* One hook call: its objects, the actions it may return, what nil means. */
struct call {
    enum pol_hook h;
    enum pol_act dflt;      /* both hooks returned nil, or none exists */
    bool skip_builtin_only; /* no call at all unless the script defines the hook */
    struct pol_synth *syn; /* NULL: surogat.synth() is not allowed */
    int nargs;
    struct {
        enum pol_obj_kind kind;
        struct http *hp;
        struct pol_ex ex;
        int ro;
    } arg[3];
};

/*
 * The word hook h answers without running anything: the script's
 * function always returns it, or there is none (or an empty one) and
 * builtin.lua's always returns it.  NULL when a function must run; ""
 * when neither has one (the hook's default).
 */
/* Neither the script nor builtin.lua has a function for h that does anything. */
static bool
runs_nothing(const struct pol_wrk *pw, enum pol_hook h)
{
    return (pw->ref_user[h] == LUA_NOREF && pw->ref_builtin[h] == LUA_NOREF);
}

static const char *
konst_answer(const struct pol_wrk *pw, enum pol_hook h)
{
    if (runs_nothing(pw, h))
        return ("");
    return (pw->ref_user[h] != LUA_NOREF ? pw->konst_user[h] : pw->konst_builtin[h]);
}

/* The action for hook_acts[c->h]'s rv; "synth" without surogat.synth() is a 503. */
static enum pol_act
act_of(const struct call *c, int rv)
{
    enum pol_act act = hook_acts[c->h].act[rv];

    if (act == POL_SYNTH && c->syn->status == 0) {
        c->syn->status = 503;
        snprintf(c->syn->reason, sizeof c->syn->reason, "%s returned \"synth\"",
                 pol__hook_name[c->h]);
    }
    return (act);
}

/* The word for act in hook h's vocabulary, for the trace. */
static const char *
act_word(enum pol_hook h, enum pol_act act)
{
    for (int i = 0; i < hook_acts[h].n; i++)
        if (hook_acts[h].act[i] == act)
            return (hook_acts[h].word[i]);
    return (act == POL_ERROR ? "error" : act == POL_NONE ? "none" : "?");
}

/*
 * call_hook()'s work, for a request (req) or a backend transaction (bc);
 * *by: who answered, left NULL when no hook ran at all.
 */
static enum pol_act
call_hook_run(struct req *req, struct pol_bctx *bc, const struct call *c, const char **by)
{
    struct pol_wrk *pw;
    const char *word;
    int top, rv;

    if (c->syn != NULL)
        c->syn->status = 0;
    if (c->skip_builtin_only && !pol__user_has(c->h))
        return (c->dflt);
    *by = "default";
    if ((pw = req != NULL ? begin(req) : begin_be(bc)) == NULL)
        return (POL_ERROR);
    if (pw->defined & (1u << c->h))
        *(req != NULL ? &req->hooks : &bc->hooks) |= 1u << c->h; /* taken, even when empty */
    if ((word = konst_answer(pw, c->h)) != NULL) {
        if (*word == '\0')
            return (c->dflt);
        *by = pw->ref_user[c->h] != LUA_NOREF ? "script" : "builtin";
        /* A word not among the actions goes the long way, to its error message. */
        if ((rv = act_index(c->h, word)) < hook_acts[c->h].n)
            return (act_of(c, rv));
    }
    top = lua_gettop(pw->L);
    enter(pw, req, bc);
    for (int i = 0; i < c->nargs; i++)
        pol__obj_push(pw->L, c->arg[i].kind, c->arg[i].hp, &c->arg[i].ex, c->arg[i].ro);
    pw->syn = c->syn;
    for (int i = 0; i < c->nargs; i++)
        lua_pushvalue(pw->L, top + 1 + i);
    rv = run_hook(pw, c->h, c->nargs);
    *by = pw->answered;
    end_call(pw, top + 1, c->nargs);
    if (rv < 0)
        return (POL_ERROR);
    if (rv == hook_acts[c->h].n)
        return (c->dflt);
    return (act_of(c, rv));
}

/* One hook call of a request, and its record in the request's trace. */
static enum pol_act
call_hook(struct req *req, const struct call *c)
{
    const char *by = NULL;
    enum pol_act act = call_hook_run(req, NULL, c, &by);

    if (by != NULL)
        TRACE_CAT(req->trace, HOOK, pol__hook_name[c->h], " ", act_word(c->h, act), " ", by);
    return (act);
}

/* One backend hook call, and its record in the backend transaction's trace. */
static enum pol_act
call_hook_be(struct pol_bctx *bc, const struct call *c)
{
    const char *by = NULL;
    enum pol_act act = call_hook_run(NULL, bc, c, &by);

    if (by != NULL)
        TRACE_CAT(bc->trace, HOOK, pol__hook_name[c->h], " ", act_word(c->h, act), " ", by);
    return (act);
}

#define ARG_REQ(r)      { .kind = POL_O_REQ, .hp = (r)->http }
/* The backend request: as sent once the fetch built it, else the client's, read-only. */
#define ARG_BEREQ(bc)   { .kind = POL_O_BEREQ, .hp = (bc)->bereq != NULL ? (bc)->bereq : (bc)->creq, .ro = 1 }

enum pol_act
pol_recv(struct req *req, struct pol_synth *syn)
{
    const struct call c = { .h = POL_H_RECV, .dflt = POL_HASH, .syn = syn,
                            .nargs = 1, .arg = { ARG_REQ(req) } };

    return (call_hook(req, &c));
}

int
pol_hash(struct req *req, char **key, size_t *len)
{
    struct pol_wrk *pw = begin(req);
    size_t blen = 0, off;
    char *builtin = NULL, *k;
    int top, rv;

    *key = NULL;
    if (pw == NULL)
        return (-1);
    pw->hlen = 0;
    req->hooks |= 1u << POL_H_HASH;
    if (runs_nothing(pw, POL_H_HASH)) {
        rv = 1; /* both empty: the built-in key alone, no objects to build */
    } else {
        top = lua_gettop(pw->L);
        push_req(pw, req, POL_O_REQ, req->http, 0);
        lua_pushvalue(pw->L, -1);
        rv = run_hook(pw, POL_H_HASH, 1);
        end_call(pw, top + 1, 1);
        if (rv < 0)
            return (-1);
    }
    TRACE_CAT(req->trace, HOOK, "hash lookup ", rv == 0 ? pw->answered : "default");
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
    k = ws_alloc(req->ws, blen + pw->hlen);
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
pol_backend_response(struct pol_bctx *bc, struct pol_beresp *br)
{
    const struct call c = {
        .h = POL_H_BACKEND_RESPONSE, .dflt = POL_DELIVER, .nargs = 2,
        .arg = { { .kind = POL_O_BEREQ,
                   .hp = br->bereq != NULL   ? br->bereq
                         : bc->bereq != NULL ? bc->bereq
                                             : bc->creq,
                   .ro = 1 },
                 { .kind = POL_O_BERESP, .hp = br->resp, .ex.br = br } },
    };

    return (call_hook_be(bc, &c));
}

/* deliver's obj carries the hit count only: no load(), so nothing else reads. */
enum pol_act
pol_deliver(struct req *req, struct http *resp, unsigned hits, struct pol_synth *syn)
{
    const struct pol_obj obj = { .req = req, .hits = hits };
    const struct call c = { .h = POL_H_DELIVER, .dflt = POL_DELIVER,
                            .syn = syn, .nargs = 3,
                            .arg = { ARG_REQ(req), { .kind = POL_O_RESP, .hp = resp },
                                     { .kind = POL_O_OBJ, .ex.obj = &obj, .ro = 1 } } };

    return (call_hook(req, &c));
}

enum pol_act
pol_hit(struct req *req, const struct pol_obj *obj, struct pol_synth *syn)
{
    const struct call c = {
        .h = POL_H_HIT, .dflt = POL_DELIVER, .skip_builtin_only = true,
        .syn = syn, .nargs = 2,
        .arg = { ARG_REQ(req), { .kind = POL_O_OBJ, .hp = obj->resp, .ex.obj = obj, .ro = 1 } },
    };

    return (call_hook(req, &c));
}

enum pol_act
pol_miss(struct req *req, struct pol_synth *syn)
{
    const struct call c = { .h = POL_H_MISS, .dflt = POL_FETCH, .skip_builtin_only = true,
                            .syn = syn, .nargs = 1,
                            .arg = { ARG_REQ(req) } };

    return (call_hook(req, &c));
}

enum pol_act
pol_pass(struct req *req, struct pol_synth *syn)
{
    const struct call c = { .h = POL_H_PASS, .dflt = POL_FETCH, .skip_builtin_only = true,
                            .syn = syn, .nargs = 1,
                            .arg = { ARG_REQ(req) } };

    return (call_hook(req, &c));
}

enum pol_act
pol_synth(struct req *req, struct http *resp, struct txt *body)
{
    const struct call c = {
        .h = POL_H_SYNTH, .dflt = POL_DELIVER, .skip_builtin_only = true,
        .nargs = 2, .arg = { ARG_REQ(req), { .kind = POL_O_RESP, .hp = resp, .ex.body = body } },
    };

    return (call_hook(req, &c));
}

enum pol_act
pol_backend_fetch(struct pol_bctx *bc, struct http *bereq)
{
    const struct call c = { .h = POL_H_BACKEND_FETCH, .dflt = POL_FETCH,
                            .skip_builtin_only = true, .nargs = 1,
                            .arg = { { .kind = POL_O_BEREQ, .hp = bereq } } };

    return (call_hook_be(bc, &c));
}

bool
pol_has_backend_error(void)
{
    return (pol__user_has(POL_H_BACKEND_ERROR));
}

enum pol_act
pol_backend_error(struct pol_bctx *bc, struct http *beresp, struct txt *body)
{
    const struct call c = {
        .h = POL_H_BACKEND_ERROR, .dflt = POL_ABANDON, .skip_builtin_only = true,
        .nargs = 2,
        .arg = { ARG_BEREQ(bc), { .kind = POL_O_BERESP, .hp = beresp, .ex.body = body } },
    };

    return (call_hook_be(bc, &c));
}

enum pol_act
pol_pipe(struct req *req, struct http *bereq, struct pol_synth *syn)
{
    const struct call c = {
        .h = POL_H_PIPE, .dflt = POL_PIPE, .skip_builtin_only = true,
        .syn = syn, .nargs = 2,
        .arg = { ARG_REQ(req), { .kind = POL_O_BEREQ, .hp = bereq } },
    };

    return (call_hook(req, &c));
}

enum pol_act
pol_purge(struct req *req, struct pol_synth *syn)
{
    const struct call c = { .h = POL_H_PURGE, .dflt = POL_NONE, .skip_builtin_only = true,
                            .syn = syn, .nargs = 1,
                            .arg = { ARG_REQ(req) } };

    return (call_hook(req, &c));
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
    /* Both log functions empty, or none: nothing to run, no objects to build. */
    if (pw == NULL || runs_nothing(pw, POL_H_LOG))
        return;
    http_init(&resp, NULL, 0);
    resp.proto = req->http->proto == 10 ? 10 : 11;
    resp.status = req->status;
    reason = http_reason(req->status);
    resp.reason = (struct txt){ reason, strlen(reason) };
    top = lua_gettop(pw->L);
    push_req(pw, req, POL_O_REQ, req->http, 1);
    pol__obj_push(pw->L, POL_O_RESP, &resp, NULL, 1);
    lua_pushvalue(pw->L, -2);
    lua_pushvalue(pw->L, -2);
    /* Nothing to decide any more: an error is logged and counted, the client has its answer. */
    (void)run_hook(pw, POL_H_LOG, 2);
    end_call(pw, top + 1, 2);
}

struct dir *
pol_dir(struct req *req)
{
    struct pol_wrk *pw;

    if (req->dir != NULL)
        return (req->dir);
    if ((pw = begin(req)) == NULL)
        return (NULL);
    req->dir = pol__decl_route(pol__prog_cfg(pw->prog), req->http);
    return (req->dir);
}

bool
pol_routes_static(struct req *req)
{
    struct pol_wrk *pw = begin(req);

    return (pw != NULL && pol__decl_has_static(pol__prog_cfg(pw->prog)));
}
