/*
 * The helper tables of a policy state: `re` (PCRE2) and `surogat`.
 *
 * re: patterns are compiled once per state and JIT-compiled where PCRE2
 * can, kept in a registry table keyed by the pattern text (dropped whole
 * past RE_CACHE_MAX entries, so generated patterns cannot grow it
 * without bound).  Compiled code is PCRE2's malloc, freed by the
 * userdata's __gc.
 *
 * Time: PCRE2 bounds each match by its own limits (match_limit, ten
 * million backtracking steps, a few ms with JIT and some 100 ms without;
 * depth_limit; heap_limit, 20 MB), failing it with "match limit
 * exceeded"; every re.* call checks the hook's deadline before it
 * matches, and re.gsub after each replacement, so a loop of such calls,
 * or one gsub over a long subject, ends at policy_max_time.
 */
#include "config.h"

#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <lauxlib.h>

#include "surogat/acl.h"
#include "surogat/ban.h"
#include "surogat/defs.h"
#include "surogat/http.h"
#include "surogat/log.h"
#include "surogat/req.h"
#include "surogat/sb.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/ws.h"

#include "pol_priv.h"

#define RE_MT        "surogat.re"
#define ACL_MT       "surogat.acl"
#define RE_CACHE     "pol.re"
#define RE_CACHE_MAX 1000

struct re {
    pcre2_code *code;
};

static int
l_re_gc(lua_State *L)
{
    struct re *r = luaL_checkudata(L, 1, RE_MT);

    if (r->code != NULL)
        pcre2_code_free(r->code);
    r->code = NULL;
    return (0);
}

/* The compiled pattern at idx, from the cache or compiled now. */
static pcre2_code *
get_re(lua_State *L, int idx)
{
    size_t plen;
    const char *pat = luaL_checklstring(L, idx, &plen);
    struct re *r;
    struct pol_wrk *pw = pol__wrk(L);
    int ec;
    PCRE2_SIZE eo;

    lua_getfield(L, LUA_REGISTRYINDEX, RE_CACHE);
    lua_pushvalue(L, idx);
    if (lua_rawget(L, -2) != LUA_TNIL) {
        r = lua_touserdata(L, -1);
        lua_pop(L, 2);
        return (r->code);
    }
    lua_pop(L, 1);
    r = lua_newuserdatauv(L, sizeof *r, 0);
    r->code = NULL;
    luaL_setmetatable(L, RE_MT);
    r->code = pcre2_compile((PCRE2_SPTR)pat, plen, 0, &ec,
                            &eo, NULL);
    if (r->code == NULL) {
        PCRE2_UCHAR msg[128];
        pcre2_get_error_message(ec, msg, sizeof msg);
        (void)luaL_error(L, "bad pattern \"%s\": %s at offset %d", pat, (const char *)msg,
                         (int)eo);
    }
    (void)pcre2_jit_compile(r->code, PCRE2_JIT_COMPLETE); /* the interpreter if no JIT */
    /* Stack: cache, r.  A full cache is replaced by an empty one. */
    if (++pw->nre > RE_CACHE_MAX) {
        lua_newtable(L);
        lua_pushvalue(L, -1);
        lua_setfield(L, LUA_REGISTRYINDEX, RE_CACHE);
        lua_replace(L, -3);
        pw->nre = 1;
    }
    lua_pushvalue(L, idx);
    lua_pushvalue(L, -2);
    lua_rawset(L, -4);
    lua_pop(L, 2);
    return (r->code);
}

/* re.gsub's callout after each replacement: a negative answer ends the substitution. */
static int
sub_callout(pcre2_substitute_callout_block *blk, void *ud)
{
    struct pol_wrk *pw = ud;

    (void)blk;
    return (pol__limit_over(pw) ? -1 : 0);
}

/* Match subject at 1 against pattern at 2: rc (<0 none), with md owning the offsets. */
static int
do_match(lua_State *L, pcre2_code *code, const char *s, size_t len, pcre2_match_data **mdp)
{
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(code, NULL);
    int rc;

    if (md == NULL)
        return (luaL_error(L, "out of memory"));
    rc = pcre2_match(code, (PCRE2_SPTR)s, len, 0, 0, md, NULL);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
        PCRE2_UCHAR msg[128];
        pcre2_match_data_free(md);
        pcre2_get_error_message(rc, msg, sizeof msg);
        return (luaL_error(L, "re: %s", (const char *)msg));
    }
    *mdp = md;
    return (rc);
}

/*
 * re.match(s, pattern): whether it matches.  The worker's one-pair match
 * data is enough: a match that does not fit it (rc 0) is still a match.
 */
static int
l_re_match(lua_State *L)
{
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    pcre2_code *code = get_re(L, 2);
    struct pol_wrk *pw = pol__wrk(L);
    int rc;

    pol__limit_check(L);
    if (pw->re_md == NULL && (pw->re_md = pcre2_match_data_create(1, NULL)) == NULL)
        return (luaL_error(L, "out of memory"));
    rc = pcre2_match(code, (PCRE2_SPTR)s, len, 0, 0, pw->re_md, NULL);
    if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
        PCRE2_UCHAR msg[128];
        pcre2_get_error_message(rc, msg, sizeof msg);
        return (luaL_error(L, "re: %s", (const char *)msg));
    }
    lua_pushboolean(L, rc >= 0);
    return (1);
}

/* re.find(s, pattern): the match and its groups (nil for one that took no part), or nil. */
static int
l_re_find(lua_State *L)
{
    size_t len;
    const char *s = luaL_checklstring(L, 1, &len);
    pcre2_code *code = get_re(L, 2);
    pcre2_match_data *md;
    PCRE2_SIZE *ov;
    uint32_t ngroups;
    int rc;

    pol__limit_check(L);
    rc = do_match(L, code, s, len, &md);

    if (rc < 0) {
        pcre2_match_data_free(md);
        lua_pushnil(L);
        return (1);
    }
    ov = pcre2_get_ovector_pointer(md);
    AZ(pcre2_pattern_info(code, PCRE2_INFO_CAPTURECOUNT, &ngroups));
    if (!lua_checkstack(L, (int)ngroups + 1)) {
        pcre2_match_data_free(md);
        return (luaL_error(L, "re.find: too many groups"));
    }
    for (uint32_t i = 0; i <= ngroups; i++) {
        if (i < (uint32_t)rc && ov[2 * i] != PCRE2_UNSET)
            lua_pushlstring(L, s + ov[2 * i], ov[2 * i + 1] - ov[2 * i]);
        else
            lua_pushnil(L);
    }
    pcre2_match_data_free(md);
    return ((int)ngroups + 1);
}

/*
 * re.sub / re.gsub(s, pattern, replacement): the new string and the
 * count.  The output buffer doubles until the result fits, each round a
 * checked one (the callout runs after every replacement):
 * PCRE2_SUBSTITUTE_OVERFLOW_LENGTH would measure the rest without them.
 */
static int
substitute(lua_State *L, uint32_t opts)
{
    size_t len, rlen;
    const char *s = luaL_checklstring(L, 1, &len);
    pcre2_code *code = get_re(L, 2);
    const char *repl = luaL_checklstring(L, 3, &rlen);
    struct pol_wrk *pw = pol__wrk(L);
    PCRE2_SIZE cap = len + rlen + 64, olen;
    luaL_Buffer b;
    char *out;
    int rc;

    if (pw->re_mc == NULL) {
        if ((pw->re_mc = pcre2_match_context_create(NULL)) == NULL)
            return (luaL_error(L, "out of memory"));
        AZ(pcre2_set_substitute_callout(pw->re_mc, sub_callout, pw));
    }
    for (;;) {
        pol__limit_check(L);
        luaL_buffinit(L, &b);
        out = luaL_prepbuffsize(&b, cap);
        olen = cap;
        rc = pcre2_substitute(code, (PCRE2_SPTR)s, len, 0, opts, NULL, pw->re_mc, (PCRE2_SPTR)repl,
                              rlen, (PCRE2_UCHAR *)out, &olen);
        if (rc != PCRE2_ERROR_NOMEMORY)
            break;
        lua_pop(L, 1); /* the buffer's slot */
        cap *= 2;
    }
    /* The callout ended it at the deadline: the hook fails here. */
    pol__limit_check(L);
    if (rc < 0) {
        PCRE2_UCHAR msg[128];
        pcre2_get_error_message(rc, msg, sizeof msg);
        return (luaL_error(L, "re: %s", (const char *)msg));
    }
    luaL_addsize(&b, olen);
    luaL_pushresult(&b);
    lua_pushinteger(L, rc);
    return (2);
}

static int
l_re_sub(lua_State *L)
{
    return (substitute(L, 0));
}

static int
l_re_gsub(lua_State *L)
{
    return (substitute(L, PCRE2_SUBSTITUTE_GLOBAL));
}

/* ---- surogat ---- */

/* surogat.synth(status, reason): return it from recv, hit, miss, pass, pipe, purge or deliver. */
static int
l_synth(lua_State *L)
{
    struct pol_wrk *pw = pol__wrk(L);
    lua_Integer st = luaL_checkinteger(L, 1);
    size_t rlen;
    const char *reason = luaL_optlstring(L, 2, "", &rlen);

    if (pw->syn == NULL)
        return (luaL_error(L, "surogat.synth: only in recv, hit, miss, pass, pipe, purge and "
                              "deliver"));
    if (st < 200 || st > 999)
        return (luaL_error(L, "surogat.synth: status %d is not 200..999", (int)st));
    /* It becomes the status line's reason phrase. */
    for (size_t i = 0; i < rlen; i++)
        if (reason[i] == '\r' || reason[i] == '\n' || reason[i] == '\0')
            return (luaL_error(L, "surogat.synth: reason with CR, LF or NUL"));
    pw->syn->status = (unsigned)st;
    if (rlen >= sizeof pw->syn->reason)
        rlen = sizeof pw->syn->reason - 1;
    memcpy(pw->syn->reason, reason, rlen);
    pw->syn->reason[rlen] = '\0';
    lua_pushliteral(L, "synth");
    return (1);
}

/* The hints of one request, at most: a 103 is read by the client like any head. */
#define HINTS_MAX 8192

/* The Link value at the top of the stack, checked; its length through *len. */
static const char *
link_value(lua_State *L, int i, size_t *len)
{
    const char *v;

    if (lua_type(L, -1) != LUA_TSTRING)
        (void)luaL_error(L, "surogat.early_hints: entry %d is not a string", i);
    v = lua_tolstring(L, -1, len);
    if (*len == 0)
        (void)luaL_error(L, "surogat.early_hints: entry %d is empty", i);
    for (size_t k = 0; k < *len; k++)
        if (v[k] == '\r' || v[k] == '\n' || v[k] == '\0')
            (void)luaL_error(L, "surogat.early_hints: entry %d has CR, LF or NUL", i);
    return (v);
}

/*
 * surogat.early_hints{"</a.css>; rel=preload; as=style", ...} (or one
 * string), in recv and hit: Link fields of a 103 Early Hints, sent when
 * the hook returns (req_hints.c).  Calls add up.  The strings stay
 * referenced by the table (or the argument) while they are copied.
 */
static int
l_early_hints(lua_State *L)
{
    struct pol_wrk *pw = pol__wrk(L);
    struct req *req = pw->req;
    bool list = lua_type(L, 1) == LUA_TTABLE;
    lua_Integer n = list ? luaL_len(L, 1) : 1;
    size_t total = 0, len;
    char *out, *p;

    if (req == NULL || (pw->hook != POL_H_RECV && pw->hook != POL_H_HIT))
        return (luaL_error(L, "surogat.early_hints: only in recv and hit"));
    if (!list)
        luaL_checkstring(L, 1);
    for (lua_Integer i = 1; i <= n; i++) {
        list ? (void)lua_geti(L, 1, i) : lua_pushvalue(L, 1);
        (void)link_value(L, (int)i, &len);
        lua_pop(L, 1);
        total += sizeof "Link: \r\n" - 1 + len;
        if (req->hints.len + total > HINTS_MAX)
            return (luaL_error(L, "surogat.early_hints: more than %d bytes", HINTS_MAX));
    }
    if (total == 0)
        return (0);
    if ((out = ws_alloc(req->ws, req->hints.len + total)) == NULL) {
        /* Hints are a nicety: without room the page goes without them. */
        STAT_INC(ws_overflow);
        return (0);
    }
    if (req->hints.len > 0)
        memcpy(out, req->hints.b, req->hints.len);
    p = out + req->hints.len;
    for (lua_Integer i = 1; i <= n; i++) {
        const char *v;
        list ? (void)lua_geti(L, 1, i) : lua_pushvalue(L, 1);
        v = link_value(L, (int)i, &len);
        memcpy(p, "Link: ", 6);
        memcpy(p + 6, v, len);
        memcpy(p + 6 + len, "\r\n", 2);
        p += len + 8;
        lua_pop(L, 1);
    }
    req->hints = (struct txt){ out, (size_t)(p - out) };
    return (0);
}

/* surogat.hash_data(...): pieces of the cache key, in hash only. */
static int
l_hash_data(lua_State *L)
{
    struct pol_wrk *pw = pol__wrk(L);
    int n = lua_gettop(L);

    if (pw->req == NULL || pw->hook != POL_H_HASH)
        return (luaL_error(L, "surogat.hash_data: only in hash"));
    for (int i = 1; i <= n; i++) {
        size_t len;
        const char *s = luaL_checklstring(L, i, &len);
        if (pw->hlen + len + 1 > 65536)
            return (luaL_error(L, "surogat.hash_data: key longer than 64 KiB"));
        if (pw->hlen + len + 1 > pw->hcap) {
            size_t cap = pw->hcap == 0 ? 256 : pw->hcap;
            while (cap < pw->hlen + len + 1)
                cap *= 2;
            char *nb = realloc(pw->hbuf, cap);
            AN(nb);
            pw->hbuf = nb;
            pw->hcap = cap;
        }
        pw->hbuf[pw->hlen++] = '\0';
        memcpy(pw->hbuf + pw->hlen, s, len);
        pw->hlen += len;
    }
    return (0);
}

static int
l_now(lua_State *L)
{
    lua_pushnumber(L, tim_real());
    return (1);
}

/* surogat.log(...): one line in the daemon log, the arguments as tostring() joined. */
static int
l_log(lua_State *L)
{
    int n = lua_gettop(L);
    luaL_Buffer b;

    luaL_buffinit(L, &b);
    for (int i = 1; i <= n; i++) {
        if (i > 1)
            luaL_addchar(&b, ' ');
        luaL_tolstring(L, i, NULL);
        luaL_addvalue(&b);
    }
    luaL_pushresult(&b);
    log_msg(LOG_INFO, "policy: %s", lua_tostring(L, -1));
    return (0);
}

/* surogat.ban(expr): add a ban, as the admin command ban does. */
static int
l_ban(lua_State *L)
{
    const char *expr = luaL_checkstring(L, 1);
    char ebuf[256];
    struct sb err;

    sb_init(&err, ebuf, sizeof ebuf);
    if (ban_add(expr, &err) != 0)
        return (luaL_error(L, "surogat.ban: %s", ebuf));
    return (0);
}

struct lacl {
    struct acl *acl;
};

static int
l_acl_gc(lua_State *L)
{
    struct lacl *a = luaL_checkudata(L, 1, ACL_MT);

    acl_free(&a->acl);
    return (0);
}

static int
l_acl_match(lua_State *L)
{
    struct lacl *a = luaL_checkudata(L, 1, ACL_MT);

    lua_pushboolean(L, a->acl != NULL && acl_match_str(a->acl, luaL_checkstring(L, 2)));
    return (1);
}

/* surogat.acl{"10.0.0.0/8", "!10.1.0.0/16"} or surogat.acl("10.0.0.0/8, ::1"). */
static int
l_acl(lua_State *L)
{
    luaL_Buffer b;
    struct lacl *a;
    char ebuf[256];
    struct sb err;

    if (lua_type(L, 1) == LUA_TTABLE) {
        lua_Integer n = luaL_len(L, 1);
        luaL_buffinit(L, &b);
        for (lua_Integer i = 1; i <= n; i++) {
            lua_geti(L, 1, i);
            if (lua_type(L, -1) != LUA_TSTRING)
                return (luaL_error(L, "surogat.acl: entry %d is not a string", (int)i));
            if (i > 1)
                luaL_addchar(&b, ',');
            luaL_addvalue(&b);
        }
        luaL_pushresult(&b);
    } else {
        luaL_checkstring(L, 1);
        lua_pushvalue(L, 1);
    }
    a = lua_newuserdatauv(L, sizeof *a, 0);
    a->acl = NULL;
    luaL_setmetatable(L, ACL_MT);
    sb_init(&err, ebuf, sizeof ebuf);
    a->acl = acl_parse(lua_tostring(L, -2), &err);
    if (a->acl == NULL)
        return (luaL_error(L, "surogat.%s", ebuf));
    return (1);
}

void
pol__lib_open(lua_State *L)
{
    static const luaL_Reg re_lib[] = {
        { "match", l_re_match }, { "find", l_re_find }, { "sub", l_re_sub },
        { "gsub", l_re_gsub },   { NULL, NULL },
    };
    static const luaL_Reg srg_lib[] = {
        { "synth", l_synth },
        { "hash_data", l_hash_data },
        { "now", l_now },
        { "log", l_log },
        { "ban", l_ban },
        { "acl", l_acl },
        { "early_hints", l_early_hints },
        { NULL, NULL },
    };

    /* Locked (__metatable): a hook changing an ACL's methods would change them for good. */
    luaL_newmetatable(L, RE_MT);
    lua_pushcfunction(L, l_re_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushliteral(L, "locked");
    lua_setfield(L, -2, "__metatable");
    lua_pop(L, 1);
    luaL_newmetatable(L, ACL_MT);
    lua_pushcfunction(L, l_acl_gc);
    lua_setfield(L, -2, "__gc");
    lua_pushliteral(L, "locked");
    lua_setfield(L, -2, "__metatable");
    lua_newtable(L);
    lua_pushcfunction(L, l_acl_match);
    lua_setfield(L, -2, "match");
    lua_setfield(L, -2, "__index");
    lua_pop(L, 1);
    lua_newtable(L);
    lua_setfield(L, LUA_REGISTRYINDEX, RE_CACHE);
    luaL_newlib(L, re_lib);
    lua_setglobal(L, "re");
    luaL_newlib(L, srg_lib);
    pol__url_open(L);
    pol__tool_open(L);
    lua_setglobal(L, "surogat");
}
