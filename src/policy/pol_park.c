/*
 * pol_park -- what the policy keeps of a request, carried from one worker
 * to another while the request waits without a thread.
 *
 * Each worker has its own Lua state, and a request's per-request values
 * live in it: req.ctx (a table in the registry, pw->ctx_ref) and the
 * globals its hooks set (raw fields of the script's _ENV, pw->env_ref).
 * A request parked on a waiting list resumes on whichever worker is free,
 * whose state knows nothing of it.  So before it lets go of its worker,
 * both are written into the request's workspace -- which goes with the
 * request -- as a flat byte string, and the first hook that runs for it
 * afterwards, on any worker, builds them again (pol__unpark(), from
 * push_req()).
 *
 * Carried are what can be copied faithfully: nil-free tables of booleans,
 * numbers, strings and such tables, without metatables, nested at most
 * PARK_DEPTH deep, PARK_MAX bytes in all.  A function, a userdata (a
 * request object kept in ctx, say), a cycle or anything larger cannot be:
 * pol_park() refuses, and the request waits on its worker as it did
 * before waiting lists existed (counted in coalesce_on_thread).  Every
 * shipped policy keeps strings and numbers in req.ctx.
 */
#include "config.h"

#include <lauxlib.h>
#include <lua.h>
#include <stdbool.h>
#include <string.h>

#include "surogat/defs.h"
#include "surogat/log.h"
#include "surogat/pol.h"
#include "surogat/req.h"
#include "surogat/wrk.h"
#include "surogat/ws.h"

#include "pol_priv.h"

#define PARK_MAX 4096 /* bytes of a request's carried state */
#define PARK_DEPTH 8  /* tables within tables */

/* The encoding: a tag byte, then its payload; a table is key, value pairs ending in T_END. */
enum tag {
    T_END,
    T_FALSE,
    T_TRUE,
    T_INT,   /* 8 bytes, host order: the bytes never leave the process */
    T_FLOAT, /* 8 bytes */
    T_STR,   /* 4-byte length, the bytes */
    T_TABLE, /* pairs, T_END */
    T_NONE,  /* where a table is absent (no ctx, no request globals) */
};

struct buf {
    char b[PARK_MAX];
    size_t len;
};

static int
put(struct buf *o, const void *p, size_t n)
{
    if (n > sizeof o->b - o->len)
        return (-1);
    memcpy(o->b + o->len, p, n);
    o->len += n;
    return (0);
}

static int
put_tag(struct buf *o, enum tag t)
{
    char c = (char)t;

    return (put(o, &c, 1));
}

static int put_fields(lua_State *L, int idx, struct buf *o, unsigned depth, bool env);

/* The value at idx, or -1 when it cannot be carried. */
static int
put_value(lua_State *L, int idx, struct buf *o, unsigned depth)
{
    switch (lua_type(L, idx)) {
    case LUA_TBOOLEAN:
        return (put_tag(o, lua_toboolean(L, idx) ? T_TRUE : T_FALSE));
    case LUA_TNUMBER:
        if (lua_isinteger(L, idx)) {
            lua_Integer i = lua_tointeger(L, idx);
            return (put_tag(o, T_INT) != 0 ? -1 : put(o, &i, sizeof i));
        } else {
            lua_Number d = lua_tonumber(L, idx);
            return (put_tag(o, T_FLOAT) != 0 ? -1 : put(o, &d, sizeof d));
        }
    case LUA_TSTRING: {
        size_t n;
        const char *s = lua_tolstring(L, idx, &n);
        uint32_t n32 = (uint32_t)n;
        if (n > PARK_MAX)
            return (-1);
        if (put_tag(o, T_STR) != 0 || put(o, &n32, sizeof n32) != 0)
            return (-1);
        return (put(o, s, n));
    }
    case LUA_TTABLE:
        return (put_fields(L, idx, o, depth + 1, false));
    default:
        return (-1);
    }
}

/*
 * A table's own fields.  Its metatable would not come along: refused,
 * except for _ENV's (depth 0 with env), whose metatable is the view of
 * the script's globals that every state has.
 */
static int
put_fields(lua_State *L, int idx, struct buf *o, unsigned depth, bool env)
{
    idx = lua_absindex(L, idx);
    /* A cycle always ends here too: it nests without end. */
    if (depth > PARK_DEPTH)
        return (-1);
    if (!env && lua_getmetatable(L, idx)) {
        lua_pop(L, 1);
        return (-1);
    }
    if (!lua_checkstack(L, 4) || put_tag(o, T_TABLE) != 0)
        return (-1);
    lua_pushnil(L);
    while (lua_next(L, idx)) {
        int kt = lua_type(L, -2);
        if ((kt != LUA_TSTRING && kt != LUA_TNUMBER && kt != LUA_TBOOLEAN) ||
            put_value(L, -2, o, depth) != 0 || put_value(L, -1, o, depth) != 0) {
            lua_pop(L, 2);
            return (-1);
        }
        lua_pop(L, 1);
    }
    return (put_tag(o, T_END));
}

/* The registry table ref, or T_NONE. */
static int
put_ref(lua_State *L, int ref, struct buf *o, bool env)
{
    int rv;

    if (ref == LUA_NOREF)
        return (put_tag(o, T_NONE));
    lua_rawgeti(L, LUA_REGISTRYINDEX, ref);
    rv = put_fields(L, -1, o, 0, env);
    lua_pop(L, 1);
    return (rv);
}

int
pol_park(struct req *req)
{
    struct pol_wrk *pw;
    struct buf o;
    lua_State *L;
    char *blob;

    OBJ_CHECK(req, REQ_MAGIC);
    OBJ_CHECK(req->wrk, WRK_MAGIC);
    pw = req->wrk->pol;
    req->pol_carry = NULL;
    /* Its hooks ran here: wherever it resumes, they run on this program again. */
    if (pw != NULL && pw->L != NULL && req->pol_id != 0 && req->pol_prog == NULL)
        req->pol_prog = pol__prog_ref(pw->prog);
    /* No hook ran for it (or another request's since): nothing of it is here. */
    if (pw == NULL || req->pol_id == 0 || pw->ctx_id != req->pol_id)
        return (0);
    if (pw->ctx_ref == LUA_NOREF && !pw->env_dirty)
        return (0);
    L = pw->L;
    o.len = 0;
    if (put_ref(L, pw->ctx_ref, &o, false) != 0 ||
        put_ref(L, pw->env_dirty ? pw->env_ref : LUA_NOREF, &o, true) != 0)
        return (-1);
    if ((blob = ws_alloc(req->ws, o.len)) == NULL)
        return (-1);
    memcpy(blob, o.b, o.len);
    req->pol_carry = blob;
    req->pol_carry_len = o.len;
    /* It is the request's now: this state forgets it, as for the next request. */
    luaL_unref(L, LUA_REGISTRYINDEX, pw->ctx_ref);
    pw->ctx_ref = LUA_NOREF;
    pw->ctx_id = 0;
    pol__env_reset(pw);
    return (0);
}

void
pol_req_done(struct req *req)
{
    OBJ_CHECK(req, REQ_MAGIC);
    pol__prog_unref(&req->pol_prog);
}

struct rd {
    const char *p, *e;
};

static int
get(struct rd *r, void *out, size_t n)
{
    if ((size_t)(r->e - r->p) < n)
        return (-1);
    memcpy(out, r->p, n);
    r->p += n;
    return (0);
}

static int get_table(lua_State *L, struct rd *r);

/* Push the value that starts with tag t; -1 on a malformed string (cannot happen: ours). */
static int
get_value(lua_State *L, struct rd *r, char t)
{
    switch (t) {
    case T_FALSE:
    case T_TRUE:
        lua_pushboolean(L, t == T_TRUE);
        return (0);
    case T_INT: {
        lua_Integer i;
        if (get(r, &i, sizeof i) != 0)
            return (-1);
        lua_pushinteger(L, i);
        return (0);
    }
    case T_FLOAT: {
        lua_Number d;
        if (get(r, &d, sizeof d) != 0)
            return (-1);
        lua_pushnumber(L, d);
        return (0);
    }
    case T_STR: {
        uint32_t n;
        if (get(r, &n, sizeof n) != 0 || (size_t)(r->e - r->p) < n)
            return (-1);
        lua_pushlstring(L, r->p, n);
        r->p += n;
        return (0);
    }
    case T_TABLE:
        return (get_table(L, r));
    default:
        return (-1);
    }
}

static int
get_table(lua_State *L, struct rd *r)
{
    char t;

    if (!lua_checkstack(L, 4))
        return (-1);
    lua_newtable(L);
    for (;;) {
        if (get(r, &t, 1) != 0)
            return (-1);
        if (t == T_END)
            return (0);
        if (get_value(L, r, t) != 0)
            return (-1);
        if (get(r, &t, 1) != 0 || get_value(L, r, t) != 0)
            return (-1);
        lua_rawset(L, -3);
    }
}

/* Under lua_pcall(): building tables may meet policy_max_memory, which raises. */
static int
unpark_protected(lua_State *L)
{
    struct pol_wrk *pw = lua_touserdata(L, 1);
    struct rd *r = lua_touserdata(L, 2);
    char t;

    /* req.ctx */
    if (get(r, &t, 1) != 0 || (t == T_TABLE && get_table(L, r) != 0))
        return (luaL_error(L, "request state damaged"));
    if (t == T_TABLE)
        pw->ctx_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    /* the request's globals, into this state's _ENV */
    if (get(r, &t, 1) != 0 || (t == T_TABLE && get_table(L, r) != 0))
        return (luaL_error(L, "request state damaged"));
    if (t == T_TABLE) {
        lua_rawgeti(L, LUA_REGISTRYINDEX, pw->env_ref);
        lua_pushnil(L);
        while (lua_next(L, -3)) {
            lua_pushvalue(L, -2);
            lua_insert(L, -2);
            lua_rawset(L, -4);
        }
        pw->env_dirty = true;
    }
    return (0);
}

void
pol__unpark(struct pol_wrk *pw, struct req *req)
{
    struct rd r = { req->pol_carry, (const char *)req->pol_carry + req->pol_carry_len };
    lua_State *L = pw->L;
    int top = lua_gettop(L);

    req->pol_carry = NULL;
    lua_pushcfunction(L, unpark_protected);
    lua_pushlightuserdata(L, pw);
    lua_pushlightuserdata(L, &r);
    if (lua_pcall(L, 2, 0, 0) != LUA_OK) {
        /* Out of policy_max_memory: the hooks go on without what it kept. */
        log_msg(LOG_ERR, "policy: a request's req.ctx could not be restored after it waited: %s",
                lua_tostring(L, -1));
        if (pw->ctx_ref != LUA_NOREF) {
            luaL_unref(L, LUA_REGISTRYINDEX, pw->ctx_ref);
            pw->ctx_ref = LUA_NOREF;
        }
    }
    lua_settop(L, top);
}
