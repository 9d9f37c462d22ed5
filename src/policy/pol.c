/*
 * The policy engine: programs, per-worker Lua states, hook calls.
 *
 * A program (struct pol_prog) is the script's source, checked once by
 * pol_load() in a scratch state and refcounted: the current program
 * holds one reference, each worker state built from it another.  A
 * reload installs a new program under `mtx` and bumps its generation;
 * each worker notices at its next hook call and rebuilds its own state,
 * so no state is ever used by two threads and none is changed under a
 * running hook.
 *
 * Limits: every hook call (and the top level of the script) runs under a
 * count hook that raises an error after policy_max_instructions VM
 * instructions, and the state's allocator refuses to grow past
 * policy_max_memory.  The sandbox opens base, string, table, math, utf8
 * and a reduced os (time, clock, date), and removes whatever reads files
 * or loads code: dofile, loadfile, load, require, io.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <lualib.h>

#include "surogat/defs.h"
#include "surogat/http.h"
#include "surogat/log.h"
#include "surogat/par.h"
#include "surogat/pol.h"
#include "surogat/req.h"
#include "surogat/sb.h"
#include "surogat/stat.h"
#include "surogat/wrk.h"

#include "pol_priv.h"
#include "src/pol_builtin.h" /* generated from vcl/builtin.lua: pol_builtin_lua[] */

struct pol_prog {
    unsigned magic;
#define POL_PROG_MAGIC 0x6a0f2d4b
    unsigned refcnt; /* atomic */
    unsigned gen;
    char *path;
    char *chunkname; /* "@path": Lua's messages then say path:line */
    char *src;
    size_t len;
    unsigned hooks;      /* bit per enum pol_hook defined by the script or builtin.lua */
    unsigned user_hooks; /* those the script defines */
};

static const char *const hook_name[POL_H_MAX] = {
    [POL_H_RECV] = "recv",
    [POL_H_HASH] = "hash",
    [POL_H_BACKEND_RESPONSE] = "backend_response",
    [POL_H_DELIVER] = "deliver",
    [POL_H_HIT] = "hit",
    [POL_H_MISS] = "miss",
    [POL_H_PASS] = "pass",
    [POL_H_LOG] = "log",
};

static pthread_mutex_t mtx = PTHREAD_MUTEX_INITIALIZER;
static struct pol_prog *cur; /* under mtx */
static unsigned cur_gen;     /* atomic: cur->gen */
static bool active;          /* a program was loaded; set before the workers start */
static unsigned cur_hooks;   /* atomic: cur->hooks */
static unsigned cur_user;    /* atomic: cur->user_hooks */
static uint64_t next_ctx_id; /* atomic */

static void
prog_unref(struct pol_prog **pp)
{
    struct pol_prog *p = *pp;

    *pp = NULL;
    if (p == NULL)
        return;
    OBJ_CHECK(p, POL_PROG_MAGIC);
    if (__atomic_sub_fetch(&p->refcnt, 1, __ATOMIC_ACQ_REL) > 0)
        return;
    free(p->path);
    free(p->chunkname);
    free(p->src);
    OBJ_FREE(&p);
}

/* ---- a Lua state ---- */

static void *
l_alloc(void *ud, void *ptr, size_t osize, size_t nsize)
{
    struct pol_wrk *pw = ud;
    size_t old = ptr != NULL ? osize : 0;
    void *n;

    if (nsize == 0) {
        free(ptr);
        pw->mem -= old;
        return (NULL);
    }
    if (nsize > old && pw->mem + (nsize - old) > par.policy_max_memory)
        return (NULL);
    n = realloc(ptr, nsize);
    if (n == NULL)
        return (NULL);
    pw->mem = pw->mem - old + nsize;
    return (n);
}

static void
count_hook(lua_State *L, lua_Debug *ar)
{
    (void)lua_getinfo(L, "Sl", ar);
    if (ar->currentline > 0)
        lua_pushfstring(L, "%s:%d: policy_max_instructions exceeded", ar->short_src,
                        ar->currentline);
    else
        lua_pushliteral(L, "policy_max_instructions exceeded");
    (void)lua_error(L);
}

static void
arm_limit(lua_State *L)
{
    lua_sethook(L, count_hook, LUA_MASKCOUNT, (int)par.policy_max_instructions);
}

static void
sandbox(lua_State *L)
{
    static const luaL_Reg libs[] = {
        { LUA_GNAME, luaopen_base },         { LUA_STRLIBNAME, luaopen_string },
        { LUA_TABLIBNAME, luaopen_table },   { LUA_MATHLIBNAME, luaopen_math },
        { LUA_UTF8LIBNAME, luaopen_utf8 },   { LUA_OSLIBNAME, luaopen_os },
    };
    static const char *const drop[] = { "dofile", "loadfile", "load", "require", "print" };
    static const char *const os_keep[] = { "time", "clock", "date" };

    for (size_t i = 0; i < ARRAY_LEN(libs); i++) {
        luaL_requiref(L, libs[i].name, libs[i].func, 1);
        lua_pop(L, 1);
    }
    for (size_t i = 0; i < ARRAY_LEN(drop); i++) {
        lua_pushnil(L);
        lua_setglobal(L, drop[i]);
    }
    lua_getglobal(L, "string");
    lua_pushnil(L);
    lua_setfield(L, -2, "dump");
    lua_pop(L, 1);
    lua_newtable(L);
    lua_getglobal(L, "os");
    for (size_t i = 0; i < ARRAY_LEN(os_keep); i++) {
        lua_getfield(L, -1, os_keep[i]);
        lua_setfield(L, -3, os_keep[i]);
    }
    lua_pop(L, 1);
    lua_setglobal(L, "os");
    /* package.loaded still holds the full os table: forget it. */
    lua_pushnil(L);
    lua_setfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
}

/* Run the chunk on top of the stack, limited; on error the message goes to err. */
static int
run_chunk(lua_State *L, struct sb *err)
{
    arm_limit(L);
    if (lua_pcall(L, 0, 0, 0) != LUA_OK) {
        sb_printf(err, "%s", lua_isstring(L, -1) ? lua_tostring(L, -1) : "error");
        lua_pop(L, 1);
        return (-1);
    }
    return (0);
}

static void
state_close(struct pol_wrk *pw)
{
    if (pw->L != NULL)
        lua_close(pw->L);
    pw->L = NULL;
    pw->ctx_id = 0;
    pw->ctx_ref = LUA_NOREF;
    prog_unref(&pw->prog);
}

/*
 * Build pw's state from program p (pw takes a reference to it): the
 * sandbox, the libraries, builtin.lua in its own environment, then the
 * script, and look the hooks up.
 */
static int
state_build(struct pol_wrk *pw, struct pol_prog *p, struct sb *err)
{
    lua_State *L;

    state_close(pw);
    __atomic_add_fetch(&p->refcnt, 1, __ATOMIC_ACQ_REL);
    pw->prog = p;
    pw->mem = 0;
    L = pw->L = lua_newstate(l_alloc, pw);
    if (L == NULL) {
        sb_printf(err, "%s: cannot create a Lua state (policy_max_memory?)", p->path);
        state_close(pw);
        return (-1);
    }
    *(struct pol_wrk **)lua_getextraspace(L) = pw;
    sandbox(L);
    pol__lib_open(L);
    pol__obj_open(L);
    pol__client_open(L);
    /* builtin.lua's globals land in a table of their own, reading through to _G. */
    if (luaL_loadbuffer(L, pol_builtin_lua, sizeof pol_builtin_lua - 1, "=builtin.lua") !=
        LUA_OK) {
        sb_printf(err, "%s", lua_tostring(L, -1));
        state_close(pw);
        return (-1);
    }
    lua_newtable(L);
    lua_newtable(L);
    lua_pushglobaltable(L);
    lua_setfield(L, -2, "__index");
    lua_setmetatable(L, -2);
    lua_pushvalue(L, -1);
    lua_setfield(L, LUA_REGISTRYINDEX, "pol.builtin");
    AN(lua_setupvalue(L, -2, 1));
    if (run_chunk(L, err) != 0 ||
        luaL_loadbuffer(L, p->src, p->len, p->chunkname) != LUA_OK ||
        run_chunk(L, err) != 0) {
        if (lua_gettop(L) > 0 && lua_isstring(L, -1))
            sb_printf(err, "%s", lua_tostring(L, -1));
        state_close(pw);
        return (-1);
    }
    p->hooks = p->user_hooks = 0;
    lua_getfield(L, LUA_REGISTRYINDEX, "pol.builtin");
    for (int h = 0; h < POL_H_MAX; h++) {
        pw->ref_user[h] = pw->ref_builtin[h] = LUA_NOREF;
        if (lua_getglobal(L, hook_name[h]) == LUA_TFUNCTION) {
            pw->ref_user[h] = luaL_ref(L, LUA_REGISTRYINDEX);
            p->hooks |= 1u << h;
            p->user_hooks |= 1u << h;
        } else {
            lua_pop(L, 1);
        }
        lua_pushstring(L, hook_name[h]);
        if (lua_rawget(L, -2) == LUA_TFUNCTION) { /* its own, not _G's through __index */
            pw->ref_builtin[h] = luaL_ref(L, LUA_REGISTRYINDEX);
            p->hooks |= 1u << h;
        } else {
            lua_pop(L, 1);
        }
    }
    lua_pop(L, 1);
    lua_gc(L, LUA_GCCOLLECT);
    return (0);
}

/* ---- programs ---- */

static struct pol_prog *
prog_read(const char *path, struct sb *err)
{
    struct pol_prog *p;
    FILE *f = fopen(path, "r");
    long sz;

    if (f == NULL) {
        sb_printf(err, "%s: %s", path, strerror(errno));
        return (NULL);
    }
    OBJ_NEW(p, POL_PROG_MAGIC);
    AN(p);
    p->refcnt = 1;
    p->path = strdup(path);
    AN(p->path);
    AN(asprintf(&p->chunkname, "@%s", path) > 0);
    if (fseek(f, 0, SEEK_END) != 0 || (sz = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) != 0) {
        sb_printf(err, "%s: %s", path, strerror(errno));
        fclose(f);
        prog_unref(&p);
        return (NULL);
    }
    p->src = malloc((size_t)sz + 1);
    AN(p->src);
    p->len = fread(p->src, 1, (size_t)sz, f);
    fclose(f);
    if (p->len != (size_t)sz) {
        sb_printf(err, "%s: short read", path);
        prog_unref(&p);
        return (NULL);
    }
    return (p);
}

/* Read and compile in a scratch state; the program on success. */
static struct pol_prog *
prog_check(const char *path, struct sb *err)
{
    struct pol_wrk pw;
    struct pol_prog *p = prog_read(path, err);

    if (p == NULL)
        return (NULL);
    memset(&pw, 0, sizeof pw);
    pw.magic = POL_WRK_MAGIC;
    if (state_build(&pw, p, err) != 0) {
        prog_unref(&p);
        return (NULL);
    }
    state_close(&pw);
    return (p);
}

int
pol_check(const char *path, struct sb *err)
{
    struct pol_prog *p = prog_check(path, err);

    if (p == NULL)
        return (-1);
    prog_unref(&p);
    return (0);
}

int
pol_load(const char *path, struct sb *err)
{
    struct pol_prog *p = prog_check(path, err), *old;

    if (p == NULL)
        return (-1);
    AZ(pthread_mutex_lock(&mtx));
    old = cur;
    p->gen = cur_gen + 1;
    cur = p;
    __atomic_store_n(&cur_hooks, p->hooks, __ATOMIC_RELEASE);
    __atomic_store_n(&cur_user, p->user_hooks, __ATOMIC_RELEASE);
    __atomic_store_n(&cur_gen, p->gen, __ATOMIC_RELEASE);
    AZ(pthread_mutex_unlock(&mtx));
    prog_unref(&old);
    active = true;
    return (0);
}

int
pol_reload(struct sb *err)
{
    char *path;
    int rv;

    if (!active)
        return (0);
    AZ(pthread_mutex_lock(&mtx));
    path = strdup(cur->path);
    AZ(pthread_mutex_unlock(&mtx));
    AN(path);
    rv = pol_load(path, err);
    free(path);
    if (rv == 0)
        STAT_INC(policy_reload);
    return (rv);
}

void
pol_fini(void)
{
    AZ(pthread_mutex_lock(&mtx));
    prog_unref(&cur);
    AZ(pthread_mutex_unlock(&mtx));
}

bool
pol_active(void)
{
    return (active);
}

bool
pol_has_deliver(void)
{
    return ((__atomic_load_n(&cur_hooks, __ATOMIC_ACQUIRE) & (1u << POL_H_DELIVER)) != 0);
}

static bool
user_has(enum pol_hook h)
{
    return ((__atomic_load_n(&cur_user, __ATOMIC_ACQUIRE) & (1u << h)) != 0);
}

bool
pol_has_hit(void)
{
    return (user_has(POL_H_HIT));
}

bool
pol_has_log(void)
{
    return (user_has(POL_H_LOG));
}

void
pol_wrk_fini(struct wrk *wrk)
{
    struct pol_wrk *pw = wrk->pol;

    if (pw == NULL)
        return;
    OBJ_CHECK(pw, POL_WRK_MAGIC);
    state_close(pw);
    free(pw->hbuf);
    OBJ_FREE(&pw);
    wrk->pol = NULL;
}

/* The worker's state for the current program, (re)built when needed; NULL logged. */
static struct pol_wrk *
get_state(struct wrk *wrk)
{
    struct pol_wrk *pw = wrk->pol;
    struct pol_prog *p;
    char ebuf[512];
    struct sb err;
    int rv;

    if (pw != NULL && pw->L != NULL &&
        pw->prog->gen == __atomic_load_n(&cur_gen, __ATOMIC_ACQUIRE))
        return (pw);
    if (pw == NULL) {
        OBJ_NEW(pw, POL_WRK_MAGIC);
        AN(pw);
        pw->ctx_ref = LUA_NOREF;
        wrk->pol = pw;
    }
    AZ(pthread_mutex_lock(&mtx));
    p = cur;
    __atomic_add_fetch(&p->refcnt, 1, __ATOMIC_ACQ_REL);
    AZ(pthread_mutex_unlock(&mtx));
    sb_init(&err, ebuf, sizeof ebuf);
    rv = state_build(pw, p, &err);
    prog_unref(&p);
    if (rv != 0) {
        STAT_INC(policy_error);
        log_msg(LOG_ERR, "policy: cannot build a worker's state: %s", ebuf);
        return (NULL);
    }
    STAT_INC(policy_state);
    return (pw);
}

/* ---- hook calls ---- */

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
    log_msg(LOG_ERR, "policy: %s: %s", hook_name[pw->hook], msg);
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
        arm_limit(L);
        if ((st = lua_pcall(L, nargs, 1, base + nargs)) != LUA_OK) {
            if (st == LUA_ERRMEM) {
                char msg[300];
                snprintf(msg, sizeof msg, "%s: not enough memory (policy_max_memory)",
                         pw->prog->path);
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
                      ar.linedefined, hook_name[h], a != NULL ? "\"" : "",
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
    return (get_state(req->wrk));
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
    if (!user_has(h))
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
        snprintf(syn->reason, sizeof syn->reason, "%s returned \"synth\"", hook_name[h]);
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

    if (!user_has(POL_H_LOG))
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
