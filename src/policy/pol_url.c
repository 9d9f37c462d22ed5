/*
 * The pure helpers of the `surogat` table: durations, HTTP-dates and the
 * parts and parameters of a request-target.
 *
 * A request-target is path[?query][#fragment]; the first '?' starts the
 * query and the first '#' after it (or in the path) the fragment, which
 * clients should not send but which is kept where it was.  Parameters are
 * the '&'-separated pieces of the query, the name being what precedes the
 * first '='.  Nothing is percent-decoded: names and values compare as the
 * raw bytes of the URL, so "a%20b" and "a b" are different names, as they
 * are different cache keys.
 *
 * No state: scratch arrays are Lua userdata, so they count against
 * policy_max_memory and an error cannot leak them.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>

#include "surogat/defs.h"
#include "surogat/fresh.h"
#include "surogat/num.h"

#include "pol_priv.h"

/* ---- durations and dates ---- */

/*
 * One segment of a duration: digits (with an optional fraction) then a
 * unit.  Only the units listed in surogat-lua(7): num_duration also
 * knows "y", which a policy has no use for and a typo of "h" could hit.
 */
static bool
duration_unit_ok(const char *u, size_t len)
{
    static const char *const units[] = { "ms", "s", "m", "h", "d", "w" };

    for (size_t i = 0; i < ARRAY_LEN(units); i++) {
        if (strlen(units[i]) == len && memcmp(units[i], u, len) == 0)
            return (true);
    }
    return (false);
}

/*
 * surogat.duration("1h30m"): seconds, or nil and a message.  Segments add
 * up ("1h30m", "2d12h", "1m30s500ms"); a bare number is seconds, and only
 * as the whole string, since "1h30" could mean minutes or seconds.  Each
 * segment goes through num_duration, the parser of every other duration.
 */
static int
l_duration(lua_State *L)
{
    size_t len, i = 0;
    const char *s;
    double total = 0, v;
    char seg[64];

    if (lua_type(L, 1) == LUA_TNUMBER) {
        lua_settop(L, 1);
        return (1);
    }
    s = luaL_checklstring(L, 1, &len);
    if (len == 0)
        goto bad;
    while (i < len) {
        size_t n0 = i, u0;
        while (i < len && ((s[i] >= '0' && s[i] <= '9') || s[i] == '.'))
            i++;
        u0 = i;
        while (i < len && s[i] >= 'a' && s[i] <= 'z')
            i++;
        if (u0 == n0 || i - n0 >= sizeof seg)
            goto bad;
        if (u0 == i ? (n0 != 0 || i != len) : !duration_unit_ok(s + u0, i - u0))
            goto bad;
        memcpy(seg, s + n0, i - n0);
        seg[i - n0] = '\0';
        if (num_duration(seg, &v) != 0)
            goto bad;
        total += v;
    }
    if (total > NUM_DURATION_MAX)
        goto bad;
    if (total == floor(total))
        lua_pushinteger(L, (lua_Integer)total);
    else
        lua_pushnumber(L, total);
    return (1);
bad:
    lua_pushnil(L);
    lua_pushfstring(L, "surogat.duration: bad duration \"%s\" (units ms s m h d w)", s);
    return (2);
}

/* surogat.parse_time(http_date): seconds since the epoch, or nil and a message. */
static int
l_parse_time(lua_State *L)
{
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    double t;

    if (fresh_parse_date(s, len, &t) != 0) {
        lua_pushnil(L);
        lua_pushfstring(L, "surogat.parse_time: not an HTTP-date: \"%s\"", s);
        return (2);
    }
    lua_pushinteger(L, (lua_Integer)t);
    return (1);
}

/* ---- request-targets ---- */

struct url {
    const char *path;
    size_t plen;
    const char *query; /* after the '?'; NULL if there is none */
    size_t qlen;
    const char *frag; /* from the '#' on, or "" */
    size_t flen;
};

struct qparam {
    const char *b;
    size_t len;  /* the whole name=value */
    size_t nlen; /* the name */
    size_t idx;  /* position in the query: sorting ties keep it */
};

static void
url_split(const char *s, size_t len, struct url *u)
{
    const char *hash = memchr(s, '#', len);
    size_t end = hash != NULL ? (size_t)(hash - s) : len;
    const char *q = memchr(s, '?', end);

    u->path = s;
    u->plen = q != NULL ? (size_t)(q - s) : end;
    u->query = q != NULL ? q + 1 : NULL;
    u->qlen = q != NULL ? end - u->plen - 1 : 0;
    u->frag = s + end;
    u->flen = len - end;
}

/*
 * The query's non-empty parameters ("&&" and a trailing '&' have none),
 * in a userdata left on the stack; *np of them.
 */
static struct qparam *
query_params(lua_State *L, const struct url *u, size_t *np)
{
    size_t n = 1, k = 0, i = 0;
    struct qparam *p;

    for (size_t j = 0; j < u->qlen; j++)
        n += u->query[j] == '&';
    p = lua_newuserdatauv(L, n * sizeof *p, 0);
    while (u->query != NULL && i <= u->qlen) {
        const char *b = u->query + i;
        const char *amp = memchr(b, '&', u->qlen - i);
        size_t len = amp != NULL ? (size_t)(amp - b) : u->qlen - i;
        if (len > 0) {
            const char *eq = memchr(b, '=', len);
            SRG_ASSERT(k < n);
            p[k] = (struct qparam){ b, len, eq != NULL ? (size_t)(eq - b) : len, k };
            k++;
        }
        i += len + 1;
    }
    *np = k;
    return (p);
}

/* Push the path, '?' and the parameters not cleared (if any), then the fragment. */
static void
push_url(lua_State *L, const struct url *u, const struct qparam *p, size_t n)
{
    luaL_Buffer b;
    bool first = true;

    luaL_buffinit(L, &b);
    luaL_addlstring(&b, u->path, u->plen);
    for (size_t i = 0; i < n; i++) {
        if (p[i].b == NULL)
            continue;
        luaL_addchar(&b, first ? '?' : '&');
        luaL_addlstring(&b, p[i].b, p[i].len);
        first = false;
    }
    luaL_addlstring(&b, u->frag, u->flen);
    luaL_pushresult(&b);
}

/* surogat.url_path(url): the path, without query or fragment. */
static int
l_url_path(lua_State *L)
{
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    struct url u;

    url_split(s, len, &u);
    lua_pushlstring(L, u.path, u.plen);
    return (1);
}

/* surogat.url_query(url): the query without its '?' ("" for "/p?"), nil if none. */
static int
l_url_query(lua_State *L)
{
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    struct url u;

    url_split(s, len, &u);
    if (u.query == NULL)
        lua_pushnil(L);
    else
        lua_pushlstring(L, u.query, u.qlen);
    return (1);
}

/* surogat.query_get(url, name): the first value of name ("" if it has none), or nil. */
static int
l_query_get(lua_State *L)
{
    size_t len, nlen, np;
    const char *s = luaL_checklstring(L, 1, &len);
    const char *name = luaL_checklstring(L, 2, &nlen);
    struct qparam *p;
    struct url u;

    url_split(s, len, &u);
    p = query_params(L, &u, &np);
    for (size_t i = 0; i < np; i++) {
        if (p[i].nlen == nlen && memcmp(p[i].b, name, nlen) == 0) {
            size_t vo = p[i].nlen < p[i].len ? p[i].nlen + 1 : p[i].len;
            lua_pushlstring(L, p[i].b + vo, p[i].len - vo);
            return (1);
        }
    }
    lua_pushnil(L);
    return (1);
}

/*
 * surogat.query_remove(url, name...): the URL without the parameters so
 * named; a name ending in '*' is a prefix ("utm_*"; "*" alone, every
 * parameter).  The query is rebuilt: empty parameters go, and so does a
 * '?' with nothing left after it.  A URL without a query comes back as is.
 */
static int
l_query_remove(lua_State *L)
{
    size_t len, np;
    const char *s = luaL_checklstring(L, 1, &len);
    int nargs = lua_gettop(L);
    struct qparam *p;
    struct url u;

    for (int a = 2; a <= nargs; a++)
        (void)luaL_checkstring(L, a);
    url_split(s, len, &u);
    if (u.query == NULL) {
        lua_settop(L, 1);
        return (1);
    }
    p = query_params(L, &u, &np);
    for (size_t i = 0; i < np; i++) {
        for (int a = 2; a <= nargs; a++) {
            size_t plen;
            const char *pat = lua_tolstring(L, a, &plen);
            bool prefix = plen > 0 && pat[plen - 1] == '*';
            if (prefix ? p[i].nlen >= plen - 1 && memcmp(p[i].b, pat, plen - 1) == 0
                       : p[i].nlen == plen && memcmp(p[i].b, pat, plen) == 0) {
                p[i].b = NULL;
                break;
            }
        }
    }
    push_url(L, &u, p, np);
    return (1);
}

static int
param_cmp(const void *a, const void *b)
{
    const struct qparam *x = a, *y = b;
    size_t n = x->nlen < y->nlen ? x->nlen : y->nlen;
    int c = memcmp(x->b, y->b, n);

    if (c != 0)
        return (c);
    if (x->nlen != y->nlen)
        return (x->nlen < y->nlen ? -1 : 1);
    /* qsort is not stable: the original order breaks ties */
    return (x->idx < y->idx ? -1 : x->idx > y->idx);
}

/*
 * surogat.query_sort(url): the parameters sorted by name (bytes), those
 * of one name in their original order, rebuilt as query_remove does.
 */
static int
l_query_sort(lua_State *L)
{
    size_t len, np;
    const char *s = luaL_checklstring(L, 1, &len);
    struct qparam *p;
    struct url u;

    url_split(s, len, &u);
    if (u.query == NULL) {
        lua_settop(L, 1);
        return (1);
    }
    p = query_params(L, &u, &np);
    if (np > 1)
        qsort(p, np, sizeof *p, param_cmp);
    push_url(L, &u, p, np);
    return (1);
}

void
pol__url_open(lua_State *L)
{
    static const luaL_Reg lib[] = {
        { "duration", l_duration },     { "parse_time", l_parse_time },
        { "url_path", l_url_path },     { "url_query", l_url_query },
        { "query_get", l_query_get },   { "query_remove", l_query_remove },
        { "query_sort", l_query_sort }, { NULL, NULL },
    };

    luaL_checktype(L, -1, LUA_TTABLE);
    luaL_setfuncs(L, lib, 0);
}
