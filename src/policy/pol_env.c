/*
 * The sandbox a policy script runs in, and what keeps one request's
 * changes from reaching the next.
 *
 * Libraries: base, string, table, math, utf8, and of os only time, clock
 * and date; no io, package, debug, coroutine, load, loadfile, dofile,
 * print or string.dump.  require() loads only the pure-Lua modules of
 * policy_modules.  string.find, match, gmatch, gsub and rep are
 * pol_pat.c's, which keep to the budget; the other functions of string,
 * table and utf8 check it before they run (l_checked).
 *
 * A worker's one state serves all its requests, so nothing a hook
 * changes may outlive its request.  Two mechanisms, chosen for what they
 * cost a cache hit:
 *
 *  - Shared tables are read-only views.  Each library table (string,
 *    table, math, utf8, os, re, surogat) is replaced by an empty table
 *    whose metatable reads through to it and refuses writes once the top
 *    level has run (the top level may still add to them: function
 *    string.trim(s) ... end).  The string metatable, whose __index is the
 *    real string table, is locked (__metatable), as are the views' and
 *    env's; rawset treats a view as an assignment; setmetatable refuses
 *    __gc, whose finalizer would run later, in another request's hook or
 *    outside any budget; collectgarbage cannot stop the collector.
 *    (xpcall is wrapped for the budget's sake: see l_msgh_guard.)
 *
 *  - Globals live in env, the _ENV of the script's chunks and modules
 *    (and _G): an empty table that reads through to the global table G.
 *    During the top level, assignments go to G: the hooks, helpers and
 *    configuration.  In a hook a global of G is read-only (an error
 *    names it), and any other lands in env, which is emptied before the
 *    first hook of another request (pol__env_reset(), from the request
 *    change pol_hooks.c notices for req.ctx).
 *
 * Both cost one more table lookup per global read in Lua code (the view
 * or env first, then the real table), and per request a flag test unless
 * a hook set a global.  Restoring the globals per request instead would
 * cost a walk of G on every request that runs a hook, and would still
 * need the views for the library tables, which any code can reach.
 * Tables the script builds itself (a top-level local or global table, a
 * module's) are its own: what a hook stores in them stays, as counters
 * and caches need.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include <lauxlib.h>
#include <lualib.h>

#include "surogat/defs.h"
#include "surogat/par.h"

#include "pol_priv.h"

/* Whether `name` is listed in policy_modules (names separated by commas or spaces). */
static bool
module_allowed(const char *name)
{
    const char *p = par.policy_modules, *e;
    size_t len = strlen(name);

    while (p != NULL && *p != '\0') {
        p += strspn(p, ", \t");
        e = p + strcspn(p, ", \t");
        if ((size_t)(e - p) == len && memcmp(p, name, len) == 0)
            return (true);
        p = e;
    }
    return (false);
}

/*
 * require(name) in the sandbox: only the modules of policy_modules, as
 * Lua source (never bytecode) from policy_module_path, each loaded once
 * per state, in the script's environment.  The module runs under the
 * same limits as the script.
 */
static int
l_require(lua_State *L)
{
    const char *name = luaL_checkstring(L, 1), *dir = par.policy_module_path, *slash;
    struct pol_wrk *pw = pol__wrk(L);
    char path[4096];
    int n;

    lua_getfield(L, LUA_REGISTRYINDEX, "pol.modules");
    if (lua_getfield(L, -1, name) != LUA_TNIL)
        return (1);
    lua_pop(L, 1);
    if (name[0] == '\0' ||
        name[strspn(name, "abcdefghijklmnopqrstuvwxyz"
                          "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.")] != '\0' ||
        name[0] == '.' || strstr(name, "..") != NULL)
        return (luaL_error(L, "require: bad module name \"%s\"", name));
    if (!module_allowed(name))
        return (luaL_error(L, "require: module \"%s\" is not in policy_modules", name));
    if (dir == NULL || *dir == '\0') {
        /* the script's own directory */
        const char *sp = pol__prog_path(pw->prog);
        slash = strrchr(sp, '/');
        n = slash == NULL ? snprintf(path, sizeof path, "./")
                          : snprintf(path, sizeof path, "%.*s/", (int)(slash - sp), sp);
    } else {
        n = snprintf(path, sizeof path, "%s/", dir);
    }
    for (const char *c = name; *c != '\0' && n > 0 && (size_t)n < sizeof path - 5; c++)
        path[n++] = *c == '.' ? '/' : *c;
    if (n <= 0 || (size_t)n >= sizeof path - 5)
        return (luaL_error(L, "require: module path too long"));
    memcpy(path + n, ".lua", 5);
    if (luaL_loadfilex(L, path, "t") != LUA_OK)
        return (lua_error(L));
    pol__env_chunk(L);
    lua_pushstring(L, name);
    lua_call(L, 1, 1);
    if (lua_isnil(L, -1)) {
        lua_pop(L, 1);
        lua_pushboolean(L, 1);
    }
    lua_pushvalue(L, -1);
    lua_setfield(L, -3, name);
    return (1);
}

/* ---- base functions that could reach past the views ---- */

/*
 * Push the table the view or env at idx shows; false (nothing pushed) for
 * any other table.  pw->views_ref: view -> the table it shows, env -> G
 * (an integer reference: a string key in the registry would slow the
 * lookups of the objects' metatables there, on every hit).
 */
static bool
push_shown(lua_State *L, int idx)
{
    lua_rawgeti(L, LUA_REGISTRYINDEX, pol__wrk(L)->views_ref);
    lua_pushvalue(L, idx);
    if (lua_rawget(L, -2) == LUA_TNIL) {
        lua_pop(L, 2);
        return (false);
    }
    lua_remove(L, -2);
    return (true);
}

/* rawget(t, k): through a view or env, what it shows. */
static int
l_rawget(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checkany(L, 2);
    lua_settop(L, 2);
    lua_pushvalue(L, 2);
    if (lua_rawget(L, 1) == LUA_TNIL && push_shown(L, 1)) {
        lua_pushvalue(L, 2);
        lua_rawget(L, -2);
    }
    return (1);
}

/* rawset(t, k, v): on a view or env, an assignment with its rules (read-only ...). */
static int
l_rawset(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_checkany(L, 2);
    luaL_checkany(L, 3);
    lua_settop(L, 3);
    if (push_shown(L, 1)) {
        lua_pop(L, 1);
        lua_settable(L, 1);
    } else {
        lua_rawset(L, 1);
    }
    return (1);
}

/* setmetatable(t, mt), Lua's, but no __gc: a finalizer runs at some later collection. */
static int
l_setmetatable(lua_State *L)
{
    int t = lua_type(L, 2);

    luaL_checktype(L, 1, LUA_TTABLE);
    luaL_argexpected(L, t == LUA_TNIL || t == LUA_TTABLE, 2, "nil or table");
    if (luaL_getmetafield(L, 1, "__metatable") != LUA_TNIL)
        return (luaL_error(L, "cannot change a protected metatable"));
    if (t == LUA_TTABLE) {
        lua_pushliteral(L, "__gc");
        if (lua_rawget(L, 2) != LUA_TNIL)
            return (luaL_error(L, "setmetatable: __gc is not allowed in a policy script"));
        lua_pop(L, 1);
    }
    lua_settop(L, 2);
    lua_setmetatable(L, 1);
    return (1);
}

/* The Lua function this one wraps (upvalue 1), called with its arguments: all it returns. */
static int
call_wrapped(lua_State *L)
{
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_insert(L, 1);
    lua_call(L, lua_gettop(L) - 1, LUA_MULTRET);
    return (lua_gettop(L));
}

/*
 * xpcall's message handler: the script's (upvalue 1), unless a limit has
 * tripped.  The limit's error is raised from inside the count hook, and
 * Lua runs the handler right there, with hooks off: a handler that loops
 * would never be stopped.  It gets nothing to run then.
 */
static int
l_msgh_guard(lua_State *L)
{
    if (pol__wrk(L)->lim.trip != POL_TRIP_NONE)
        return (1);
    return (call_wrapped(L));
}

/* xpcall(f, msgh, ...): Lua's (upvalue 1), with msgh guarded. */
static int
l_xpcall(lua_State *L)
{
    luaL_checktype(L, 2, LUA_TFUNCTION);
    lua_pushvalue(L, 2);
    lua_pushcclosure(L, l_msgh_guard, 1);
    lua_replace(L, 2);
    return (call_wrapped(L));
}

/* collectgarbage(opt, ...), Lua's (upvalue 1), without what would outlive the request. */
static int
l_collectgarbage(lua_State *L)
{
    static const char *const allowed[] = { "collect", "count", "step", "isrunning" };
    const char *opt = luaL_optstring(L, 1, "collect");

    for (size_t i = 0; i < ARRAY_LEN(allowed); i++)
        if (strcmp(opt, allowed[i]) == 0)
            return (call_wrapped(L));
    return (luaL_error(L, "collectgarbage(\"%s\") is not allowed in a policy script", opt));
}

/*
 * A library function run after a budget check: on data of megabytes
 * many run long without allocating (table.sort, utf8.len ...), and the
 * count hook sees one instruction for each call.  The check is a read of
 * the coarse clock, cheaper than looking at the arguments to tell a
 * large call from a small one.  Upvalue 1 holds the function, called
 * directly: none of them uses upvalues of its own.
 */
static int
l_checked(lua_State *L)
{
    lua_CFunction f = *(lua_CFunction *)lua_touserdata(L, lua_upvalueindex(1));

    pol__limit_check(L);
    return (f(L));
}

/* Every C function of the library table global `name`, checked as above. */
static void
check_calls(lua_State *L, const char *name)
{
    lua_getglobal(L, name);
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        bool plain = lua_iscfunction(L, -1);

        if (plain && lua_getupvalue(L, -1, 1) != NULL) {
            lua_pop(L, 1);
            plain = false;
        }
        if (plain) {
            lua_CFunction *f = lua_newuserdatauv(L, sizeof *f, 0);

            *f = lua_tocfunction(L, -2);
            lua_pushcclosure(L, l_checked, 1);
            lua_pushvalue(L, -3);
            lua_insert(L, -2);
            lua_rawset(L, -5); /* a field that exists: allowed while traversing */
        }
        lua_pop(L, 1);
    }
    lua_pop(L, 1);
}

void
pol__env_open(lua_State *L)
{
    static const luaL_Reg libs[] = {
        { LUA_GNAME, luaopen_base },       { LUA_STRLIBNAME, luaopen_string },
        { LUA_TABLIBNAME, luaopen_table }, { LUA_MATHLIBNAME, luaopen_math },
        { LUA_UTF8LIBNAME, luaopen_utf8 }, { LUA_OSLIBNAME, luaopen_os },
    };
    static const char *const drop[] = { "dofile", "loadfile", "load", "print" };
    static const char *const os_keep[] = { "time", "clock", "date" };
    static const luaL_Reg base[] = {
        { "rawget", l_rawget },   { "rawset", l_rawset }, { "setmetatable", l_setmetatable },
        { "require", l_require }, { NULL, NULL },
    };

    for (size_t i = 0; i < ARRAY_LEN(libs); i++) {
        luaL_requiref(L, libs[i].name, libs[i].func, 1);
        lua_pop(L, 1);
    }
    for (size_t i = 0; i < ARRAY_LEN(drop); i++) {
        lua_pushnil(L);
        lua_setglobal(L, drop[i]);
    }
    check_calls(L, LUA_STRLIBNAME);
    check_calls(L, LUA_TABLIBNAME);
    check_calls(L, LUA_UTF8LIBNAME);
    lua_getglobal(L, "string");
    lua_pushnil(L);
    lua_setfield(L, -2, "dump");
    pol__pat_open(L); /* they check as they go */
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
    lua_newtable(L);
    lua_setfield(L, LUA_REGISTRYINDEX, "pol.modules");
    lua_pushglobaltable(L);
    luaL_setfuncs(L, base, 0);
    lua_getfield(L, -1, "collectgarbage");
    lua_pushcclosure(L, l_collectgarbage, 1);
    lua_setfield(L, -2, "collectgarbage");
    lua_getfield(L, -1, "xpcall");
    lua_pushcclosure(L, l_xpcall, 1);
    lua_setfield(L, -2, "xpcall");
    lua_pop(L, 1);
}

/* ---- views and env ---- */

/* next(t, k) for the views' __pairs (Lua's own is not at hand in C). */
static int
l_next(lua_State *L)
{
    luaL_checktype(L, 1, LUA_TTABLE);
    lua_settop(L, 2);
    if (lua_next(L, 1))
        return (2);
    lua_pushnil(L);
    return (1);
}

/* pairs(view): the table it shows (upvalue 1). */
static int
l_view_pairs(lua_State *L)
{
    lua_pushcfunction(L, l_next);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_pushnil(L);
    return (3);
}

/* view[k] = v: into the table (upvalue 1) during the top level, else an error. */
static int
l_view_newindex(lua_State *L)
{
    const char *name = lua_tostring(L, lua_upvalueindex(2));

    if (pol__wrk(L)->loading) {
        lua_settop(L, 3);
        lua_rawset(L, lua_upvalueindex(1));
        return (0);
    }
    if (lua_type(L, 2) == LUA_TSTRING)
        return (luaL_error(L, "%s.%s: the %s table is read-only in hooks", name, lua_tostring(L, 2),
                           name));
    return (luaL_error(L, "the %s table is read-only in hooks", name));
}

/*
 * Push a view of the table at idx: an empty table reading through to it,
 * with a locked metatable whose __newindex is `newindex` (upvalues: the
 * table, and `name` unless NULL) and whose pairs() walks `pairs`
 * (upvalue: the table).  views_ref then knows what the view shows.
 */
static void
push_view(lua_State *L, int idx, lua_CFunction newindex, const char *name, lua_CFunction pairs)
{
    idx = lua_absindex(L, idx);
    lua_newtable(L);
    lua_createtable(L, 0, 4);
    lua_pushvalue(L, idx);
    lua_setfield(L, -2, "__index");
    lua_pushvalue(L, idx);
    if (name != NULL)
        lua_pushstring(L, name);
    lua_pushcclosure(L, newindex, name != NULL ? 2 : 1);
    lua_setfield(L, -2, "__newindex");
    lua_pushvalue(L, idx);
    lua_pushcclosure(L, pairs, 1);
    lua_setfield(L, -2, "__pairs");
    lua_pushliteral(L, "locked");
    lua_setfield(L, -2, "__metatable");
    lua_setmetatable(L, -2);
    lua_rawgeti(L, LUA_REGISTRYINDEX, pol__wrk(L)->views_ref);
    lua_pushvalue(L, -2);
    lua_pushvalue(L, idx);
    lua_rawset(L, -3);
    lua_pop(L, 1);
}

/*
 * env[k] = v for a k env does not hold: into G (upvalue 1) during the top
 * level; afterwards a global of G is read-only and any other goes into env.
 */
static int
l_env_newindex(lua_State *L)
{
    struct pol_wrk *pw = pol__wrk(L);

    lua_settop(L, 3);
    if (pw->loading) {
        lua_rawset(L, lua_upvalueindex(1));
        return (0);
    }
    lua_pushvalue(L, 2);
    if (lua_rawget(L, lua_upvalueindex(1)) != LUA_TNIL)
        return (luaL_error(L,
                           "global '%s' is the top level's, read-only in hooks "
                           "(req.ctx keeps a request's values)",
                           lua_type(L, 2) == LUA_TSTRING ? lua_tostring(L, 2) : "?"));
    lua_pop(L, 1);
    if (!lua_isnil(L, 3))
        pw->env_dirty = true;
    lua_rawset(L, 1);
    return (0);
}

/* The iterator of pairs(env): G's globals (upvalue 1), then env's (2); 3 and 4 its place. */
static int
l_env_iter(lua_State *L)
{
    for (;;) {
        int in_env = lua_toboolean(L, lua_upvalueindex(3));

        lua_settop(L, 0);
        lua_pushvalue(L, lua_upvalueindex(4));
        if (lua_next(L, lua_upvalueindex(in_env ? 2 : 1))) {
            lua_pushvalue(L, 1);
            lua_replace(L, lua_upvalueindex(4));
            return (2);
        }
        if (in_env)
            return (0);
        lua_pushboolean(L, 1);
        lua_replace(L, lua_upvalueindex(3));
        lua_pushnil(L);
        lua_replace(L, lua_upvalueindex(4));
    }
}

static int
l_env_pairs(lua_State *L)
{
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_pushvalue(L, 1);
    lua_pushboolean(L, 0);
    lua_pushnil(L);
    lua_pushcclosure(L, l_env_iter, 4);
    return (1);
}

void
pol__env_guard(lua_State *L)
{
    struct pol_wrk *pw = pol__wrk(L);
    int g;

    lua_newtable(L);
    pw->views_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    /* Strings' methods: the real string table, which the locked metatable hides. */
    lua_pushliteral(L, "");
    AN(lua_getmetatable(L, -1));
    lua_pushliteral(L, "locked");
    lua_setfield(L, -2, "__metatable");
    lua_pop(L, 2);
    lua_pushglobaltable(L);
    g = lua_gettop(L);
    /* Changing the value of a field while traversing is allowed; adding one is not. */
    lua_pushnil(L);
    while (lua_next(L, g)) {
        if (lua_type(L, -1) == LUA_TTABLE && !lua_rawequal(L, -1, g) &&
            lua_type(L, -2) == LUA_TSTRING) {
            push_view(L, -1, l_view_newindex, lua_tostring(L, -2), l_view_pairs);
            lua_pushvalue(L, -3);
            lua_insert(L, -2);
            lua_rawset(L, g);
        }
        lua_pop(L, 1);
    }
    /* env: a view of G, whose writes go where l_env_newindex says */
    push_view(L, g, l_env_newindex, NULL, l_env_pairs);
    lua_pushvalue(L, -1);
    lua_setfield(L, g, LUA_GNAME);
    pw->env_ref = luaL_ref(L, LUA_REGISTRYINDEX);
    pw->env_dirty = false;
    pw->loading = true;
    lua_pop(L, 1);
}

void
pol__env_chunk(lua_State *L)
{
    lua_rawgeti(L, LUA_REGISTRYINDEX, pol__wrk(L)->env_ref);
    /* A main chunk's one upvalue is its _ENV. */
    AN(lua_setupvalue(L, -2, 1));
}

void
pol__env_seal(struct pol_wrk *pw)
{
    pw->loading = false;
}

void
pol__env_reset(struct pol_wrk *pw)
{
    lua_State *L = pw->L;

    if (!pw->env_dirty)
        return;
    lua_rawgeti(L, LUA_REGISTRYINDEX, pw->env_ref);
    /* Clearing a field while traversing is allowed: the key stays valid for next. */
    lua_pushnil(L);
    while (lua_next(L, -2)) {
        lua_pop(L, 1);
        lua_pushvalue(L, -1);
        lua_pushnil(L);
        lua_rawset(L, -4);
    }
    lua_pop(L, 1);
    pw->env_dirty = false;
}
