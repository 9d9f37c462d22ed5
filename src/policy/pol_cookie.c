/*
 * surogat.cookie: a Cookie field (RFC 6265 section 4.2) as a Lua table,
 * VCL's vmod_cookie.
 *
 *   local c = surogat.cookie.parse(req.http.cookie)    -- c.session, c["_ga"]
 *   surogat.cookie.keep(c, "session", "lang")
 *   req.http.cookie = surogat.cookie.serialise(c)      -- nil when none is left
 *
 * The table maps names to values and is plain: a script reads, sets and
 * clears fields as in any table.  The order the cookies came in is kept
 * in its metatable, a list of the names, so that serialise() writes them
 * back in that order; names the script added follow, sorted.
 *
 * Parsing is as lenient as browsers are in what they send:
 *   - pairs are separated by ';', blanks around names and values dropped;
 *   - a value in double quotes loses them, and may hold ';' (the quote
 *     ends it); serialise() quotes a value again when it needs it;
 *   - a piece without '=' (a nameless cookie, as browsers send one set
 *     without a name) is the value of the name "", which serialise()
 *     writes back without the '=';
 *   - a name sent twice keeps its first value, as most servers (PHP
 *     among them) read it: the later ones are dropped.
 *
 * keep_re/remove_re match names with re.match, the function the `re`
 * table had when the state was built (a script redefining re does not
 * change them): the same compiled-pattern cache, the same PCRE2.
 */
#include "config.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "surogat/defs.h"

#include "pol_priv.h"

#define COOKIE_NAME "surogat.cookies" /* the metatables' __name */

static bool
ows(char c)
{
    return (c == ' ' || c == '\t');
}

/* s[*b .. *e) without blanks at either end. */
static void
trim(const char *s, size_t *b, size_t *e)
{
    while (*b < *e && ows(s[*b]))
        (*b)++;
    while (*e > *b && ows(s[*e - 1]))
        (*e)--;
}

/* The table at idx gets name = value unless it has the name already (first wins). */
static void
add_pair(lua_State *L, int t, int order, const char *n, size_t nlen, const char *v, size_t vlen)
{
    lua_pushlstring(L, n, nlen);
    if (lua_rawget(L, t) != LUA_TNIL) {
        lua_pop(L, 1);
        return;
    }
    lua_pop(L, 1);
    lua_pushlstring(L, n, nlen);
    lua_pushlstring(L, v, vlen);
    lua_rawset(L, t);
    lua_pushlstring(L, n, nlen);
    lua_rawseti(L, order, (lua_Integer)lua_rawlen(L, order) + 1);
}

/* surogat.cookie.parse(s): the table; nil (no Cookie field) gives an empty one. */
static int
l_parse(lua_State *L)
{
    size_t len = 0, i = 0;
    const char *s = lua_isnoneornil(L, 1) ? "" : luaL_checklstring(L, 1, &len);
    int t, order;

    lua_settop(L, 1);
    lua_newtable(L);
    t = lua_gettop(L);
    lua_newtable(L);
    order = t + 1;
    lua_pushliteral(L, COOKIE_NAME);
    lua_setfield(L, order, "__name");
    while (i < len) {
        size_t nb, ne, vb, ve;

        while (i < len && (ows(s[i]) || s[i] == ';'))
            i++;
        if (i == len)
            break;
        nb = i;
        while (i < len && s[i] != '=' && s[i] != ';')
            i++;
        ne = i;
        if (i == len || s[i] == ';') {
            /* No '=': a nameless cookie, all of it the value. */
            trim(s, &nb, &ne);
            add_pair(L, t, order, "", 0, s + nb, ne - nb);
            continue;
        }
        trim(s, &nb, &ne);
        i++; /* the '=' */
        while (i < len && ows(s[i]))
            i++;
        vb = i;
        if (i < len && s[i] == '"') {
            const char *q = memchr(s + i + 1, '"', len - i - 1);
            size_t after = q != NULL ? (size_t)(q - s) + 1 : len;

            while (after < len && ows(s[after]))
                after++;
            if (q != NULL && (after == len || s[after] == ';')) {
                add_pair(L, t, order, s + nb, ne - nb, s + i + 1, (size_t)(q - s) - i - 1);
                i = after;
                continue;
            }
            /* Not a quoted value after all: taken as it is, quotes included. */
        }
        while (i < len && s[i] != ';')
            i++;
        ve = i;
        trim(s, &vb, &ve);
        add_pair(L, t, order, s + nb, ne - nb, s + vb, ve - vb);
    }
    lua_pushvalue(L, order);
    lua_setmetatable(L, t);
    lua_settop(L, t);
    return (1);
}

static int
check_cookies(lua_State *L, int idx, const char *fn)
{
    if (lua_type(L, idx) != LUA_TTABLE)
        return (luaL_error(L, "surogat.cookie.%s: a table of cookies expected, got %s", fn,
                           luaL_typename(L, idx)));
    return (idx);
}

/* A name to write back: no '=', ';', ',', blanks or controls (a token, loosely). */
static void
check_out_name(lua_State *L, const char *n, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)n[i];
        if (c <= 0x20 || c == 0x7f || c == '=' || c == ';' || c == ',')
            (void)luaL_error(L, "surogat.cookie.serialise: bad cookie name \"%s\"", n);
    }
}

/*
 * Push "name=value" for the key at kidx, the value quoted when it holds
 * a blank, ',', ';' or a backslash, just the value for the name ""; nothing
 * when t has no such cookie (any more).  Whether it pushed.
 */
static bool
push_pair(lua_State *L, int t, int kidx)
{
    size_t nlen, vlen;
    const char *n = lua_tolstring(L, kidx, &nlen), *v;
    bool quote = false, dquote = false;

    lua_pushvalue(L, kidx);
    switch (lua_rawget(L, t)) {
    case LUA_TNIL:
        lua_pop(L, 1);
        return (false);
    case LUA_TSTRING:
    case LUA_TNUMBER:
        break;
    default:
        (void)luaL_error(L, "surogat.cookie.serialise: cookie \"%s\" is a %s, not a string", n,
                         luaL_typename(L, -1));
    }
    v = lua_tolstring(L, -1, &vlen); /* a number becomes its text, on the stack only */
    check_out_name(L, n, nlen);
    for (size_t i = 0; i < vlen; i++) {
        unsigned char c = (unsigned char)v[i];
        if (c < 0x20 || c == 0x7f)
            (void)luaL_error(L, "surogat.cookie.serialise: cookie \"%s\": a control character "
                                "in its value", n);
        quote |= c == ' ' || c == ',' || c == ';' || c == '\\';
        dquote |= c == '"';
    }
    /* A '"' goes out as it came, unless the value needs quotes: then it cannot be written. */
    if (quote && dquote)
        (void)luaL_error(L, "surogat.cookie.serialise: cookie \"%s\": a value with '\"' and a "
                            "blank, ',', ';' or '\\' cannot be written", n);
    /* Both checked free of NULs: %s takes them whole. */
    if (nlen == 0 && !quote)
        lua_pushfstring(L, "%s", v);
    else
        lua_pushfstring(L, quote ? "%s=\"%s\"" : "%s=%s", n, v);
    lua_remove(L, -2);
    return (true);
}

/* A name added by the script, for sorting: its bytes and its place in `extra`. */
struct xname {
    const char *s;
    size_t len;
    lua_Integer idx;
};

static int
name_cmp(const void *a, const void *b)
{
    const struct xname *x = a, *y = b;
    int c = memcmp(x->s, y->s, SRG_MIN(x->len, y->len));

    return (c != 0 ? c : x->len < y->len ? -1 : x->len > y->len);
}

/*
 * surogat.cookie.serialise(t): "a=1; b=2", in the order they were parsed,
 * then the names added since, sorted; nil when no cookie is left (so that
 * req.http.cookie = serialise(c) removes the field).
 */
static int
l_serialise(lua_State *L)
{
    int t = check_cookies(L, 1, "serialise"), order, seen, extra, out;
    lua_Integer n, nout = 0;
    size_t nextra = 0;
    struct xname *names;
    luaL_Buffer b;

    lua_settop(L, 1);
    if (!lua_getmetatable(L, t))
        lua_newtable(L);
    order = lua_gettop(L);
    n = (lua_Integer)lua_rawlen(L, order);
    lua_newtable(L);
    seen = lua_gettop(L);
    lua_newtable(L);
    out = lua_gettop(L);
    /* The cookies in their order first, each once ... */
    for (lua_Integer i = 1; i <= n; i++) {
        int k;

        if (lua_rawgeti(L, order, i) != LUA_TSTRING) {
            lua_pop(L, 1);
            continue;
        }
        k = lua_gettop(L);
        lua_pushvalue(L, k);
        if (lua_rawget(L, seen) == LUA_TNIL) {
            lua_pushvalue(L, k);
            lua_pushboolean(L, 1);
            lua_rawset(L, seen);
            if (push_pair(L, t, k))
                lua_rawseti(L, out, ++nout);
        }
        lua_settop(L, out);
    }
    /* ... then the names the script added, sorted. */
    lua_newtable(L);
    extra = lua_gettop(L);
    lua_pushnil(L);
    while (lua_next(L, t) != 0) {
        lua_pop(L, 1);
        if (lua_type(L, -1) != LUA_TSTRING)
            return (luaL_error(L, "surogat.cookie.serialise: a cookie name is a %s, not a "
                                  "string", luaL_typename(L, -1)));
        lua_pushvalue(L, -1);
        if (lua_rawget(L, seen) == LUA_TNIL) {
            lua_pushvalue(L, -2);
            lua_rawseti(L, extra, (lua_Integer)++nextra);
        }
        lua_pop(L, 1);
    }
    names = lua_newuserdatauv(L, (nextra + 1) * sizeof *names, 0);
    for (size_t i = 0; i < nextra; i++) {
        names[i].idx = (lua_Integer)i + 1;
        lua_rawgeti(L, extra, names[i].idx);
        names[i].s = lua_tolstring(L, -1, &names[i].len); /* anchored in `extra` */
        lua_pop(L, 1);
    }
    qsort(names, nextra, sizeof *names, name_cmp);
    for (size_t i = 0; i < nextra; i++) {
        lua_rawgeti(L, extra, names[i].idx);
        if (push_pair(L, t, lua_gettop(L)))
            lua_rawseti(L, out, ++nout);
        lua_pop(L, 1);
    }
    if (nout == 0) {
        lua_pushnil(L);
        return (1);
    }
    luaL_buffinit(L, &b);
    for (lua_Integer i = 1; i <= nout; i++) {
        if (i > 1)
            luaL_addstring(&b, "; ");
        lua_rawgeti(L, out, i);
        luaL_addvalue(&b);
    }
    luaL_pushresult(&b);
    return (1);
}

/*
 * The names given to keep() or remove(): strings after the table, or one
 * list; into a set table pushed on the stack.
 */
static void
push_name_set(lua_State *L, const char *fn)
{
    int n = lua_gettop(L), set;

    lua_newtable(L);
    set = lua_gettop(L);
    for (int a = 2; a <= n; a++) {
        if (lua_type(L, a) == LUA_TTABLE) {
            for (lua_Integer i = 1; lua_rawgeti(L, a, i) != LUA_TNIL; i++) {
                if (lua_type(L, -1) != LUA_TSTRING)
                    (void)luaL_error(L, "surogat.cookie.%s: names are strings", fn);
                lua_pushboolean(L, 1);
                lua_rawset(L, set);
            }
            lua_pop(L, 1);
        } else if (lua_type(L, a) == LUA_TSTRING) {
            lua_pushvalue(L, a);
            lua_pushboolean(L, 1);
            lua_rawset(L, set);
        } else {
            (void)luaL_error(L, "surogat.cookie.%s: names are strings (or a list)", fn);
        }
    }
}

/*
 * Clear every cookie of t (idx 1) for which the name's test differs from
 * `keep`.  The test of the key on top of the stack: in set (at set), or
 * re.match(key, pattern) with re.match at upvalue 1 and the pattern at 2.
 */
static void
filter(lua_State *L, int set, bool keep)
{
    lua_pushnil(L);
    while (lua_next(L, 1) != 0) {
        bool in;

        lua_pop(L, 1);
        if (set != 0) {
            lua_pushvalue(L, -1);
            in = lua_rawget(L, set) != LUA_TNIL;
            lua_pop(L, 1);
        } else {
            lua_pushvalue(L, lua_upvalueindex(1));
            lua_pushvalue(L, -2);
            lua_pushvalue(L, 2);
            lua_call(L, 2, 1);
            in = lua_toboolean(L, -1);
            lua_pop(L, 1);
        }
        if (in != keep) {
            /* Assigning nil to an existing field is allowed during lua_next. */
            lua_pushvalue(L, -1);
            lua_pushnil(L);
            lua_rawset(L, 1);
        }
    }
}

static int
by_names(lua_State *L, bool keep, const char *fn)
{
    check_cookies(L, 1, fn);
    push_name_set(L, fn);
    filter(L, lua_gettop(L), keep);
    lua_settop(L, 1);
    return (1);
}

/* surogat.cookie.keep(t, name, ...): only the cookies so named stay; t is returned. */
static int
l_keep(lua_State *L)
{
    return (by_names(L, true, "keep"));
}

/* surogat.cookie.remove(t, name, ...): the cookies so named go; t is returned. */
static int
l_remove(lua_State *L)
{
    return (by_names(L, false, "remove"));
}

static int
by_re(lua_State *L, bool keep, const char *fn)
{
    check_cookies(L, 1, fn);
    luaL_checkstring(L, 2);
    lua_settop(L, 2);
    filter(L, 0, keep);
    lua_settop(L, 1);
    return (1);
}

/* surogat.cookie.keep_re(t, pattern): only the cookies whose name matches stay. */
static int
l_keep_re(lua_State *L)
{
    return (by_re(L, true, "keep_re"));
}

/* surogat.cookie.remove_re(t, pattern): the cookies whose name matches go. */
static int
l_remove_re(lua_State *L)
{
    return (by_re(L, false, "remove_re"));
}

void
pol__cookie_open(lua_State *L)
{
    static const luaL_Reg plain[] = {
        { "parse", l_parse },
        { "serialise", l_serialise },
        { "serialize", l_serialise },
        { "keep", l_keep },
        { "remove", l_remove },
        { NULL, NULL },
    };
    static const luaL_Reg with_re[] = {
        { "keep_re", l_keep_re },
        { "remove_re", l_remove_re },
        { NULL, NULL },
    };

    luaL_checktype(L, -1, LUA_TTABLE);
    luaL_newlib(L, plain);
    lua_getglobal(L, "re");
    luaL_checktype(L, -1, LUA_TTABLE);
    lua_getfield(L, -1, "match");
    luaL_checktype(L, -1, LUA_TFUNCTION);
    lua_remove(L, -2);
    luaL_setfuncs(L, with_re, 1);
    lua_setfield(L, -2, "cookie");
}
