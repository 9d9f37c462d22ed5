/*
 * Lua's string patterns -- string.find, match, gmatch and gsub -- and
 * string.rep, in place of the string library's, for policy states: the
 * same results and errors, within the budget.
 *
 * Patterns backtrack: ".-.-.-c" against 1500 bytes, or an innocent
 * "^/(.-)/(.-)/(.-)%.php$" against a URL an attacker chose, runs for
 * minutes in one C call, where the count hook never looks.  This matcher
 * counts its steps and calls pol__limit_check() every CHECK_STEPS of
 * them, so such a hook fails at policy_max_time (and a pcall around it
 * cannot carry on: the limit is sticky).  string.rep fills its result by
 * doubling, after a check, and its size is capped by policy_max_memory.
 *
 * The matcher is a plain backtracking one, as the Lua manual defines
 * patterns (section 6.4.1): classes (%a, %d ... and their complements;
 * %z too, which Lua 5.4 still takes),
 * sets with ranges, '.', the repetitions * + - ?, anchors ^ and $,
 * captures (position captures, back-references %1-%9), %b and %f.  Its
 * recursion is bounded as Lua's is ("pattern too complex"), with at most
 * 32 captures, and classes use the C locale's <ctype.h>, as Lua does.
 * tests/unit/policy/test_pol_pat.c compares it with the library's on
 * many patterns.
 */
#include "config.h"

#include <ctype.h>
#include <limits.h>
#include <stddef.h>
#include <string.h>

#include <lauxlib.h>

#include "surogat/defs.h"

#include "pol_priv.h"

#define CHECK_STEPS (1u << 14) /* matcher steps between two budget checks */
#define MAXDEPTH    200        /* nested matches: Lua's MAXCCALLS */
#define MAXCAP      32         /* Lua's LUA_MAXCAPTURES */
#define CAP_OPEN    (-1)       /* a capture not closed yet */
#define CAP_POS     (-2)       /* a position capture, "()" */
#define SPECIALS    "^$*+?.([%-"

struct pat {
    lua_State *L;
    const char *src, *src_end; /* the subject */
    const char *p_end;         /* the pattern's end */
    unsigned depth;            /* nested matches left */
    unsigned steps;            /* since the last budget check */
    unsigned ncap;
    struct {
        const char *at;
        ptrdiff_t len; /* or CAP_OPEN, CAP_POS */
    } cap[MAXCAP];
};

static void
pat_init(struct pat *ms, lua_State *L, const char *s, size_t ls, const char *p, size_t lp)
{
    ms->L = L;
    ms->src = s;
    ms->src_end = s + ls;
    ms->p_end = p + lp;
    ms->steps = 0;
}

/* Before each attempt at a position. */
static void
pat_restart(struct pat *ms)
{
    ms->ncap = 0;
    ms->depth = MAXDEPTH;
}

static void
tick(struct pat *ms)
{
    if (++ms->steps >= CHECK_STEPS) {
        ms->steps = 0;
        pol__limit_check(ms->L);
    }
}

/* Whether byte c is in class %cl (a letter: its class, upper case its complement; else cl). */
static bool
class_has(int c, int cl)
{
    bool in;

    switch (tolower(cl)) {
    case 'a':
        in = isalpha(c);
        break;
    case 'c':
        in = iscntrl(c);
        break;
    case 'd':
        in = isdigit(c);
        break;
    case 'g':
        in = isgraph(c);
        break;
    case 'l':
        in = islower(c);
        break;
    case 'p':
        in = ispunct(c);
        break;
    case 's':
        in = isspace(c);
        break;
    case 'u':
        in = isupper(c);
        break;
    case 'w':
        in = isalnum(c);
        break;
    case 'x':
        in = isxdigit(c);
        break;
    case 'z': /* NUL: no longer in the manual, still in Lua */
        in = c == 0;
        break;
    default:
        return (cl == c);
    }
    return (isupper(cl) ? !in : in);
}

/* Whether byte c is in the set from '[' at p to its ']' at close. */
static bool
set_has(int c, const char *p, const char *close)
{
    bool in = true;

    if (p[1] == '^') {
        in = false;
        p++;
    }
    while (++p < close) {
        if (*p == '%') {
            p++;
            if (class_has(c, (unsigned char)*p))
                return (in);
        } else if (p[1] == '-' && p + 2 < close) {
            if ((unsigned char)p[0] <= c && c <= (unsigned char)p[2])
                return (in);
            p += 2;
        } else if ((unsigned char)*p == c) {
            return (in);
        }
    }
    return (!in);
}

/* Past the single-character class at p: a byte, '.', %x or a set. */
static const char *
class_end(struct pat *ms, const char *p)
{
    char c = *p++;

    if (c == '%') {
        if (p == ms->p_end)
            (void)luaL_error(ms->L, "malformed pattern (ends with '%%')");
        return (p + 1);
    }
    if (c == '[') {
        if (p < ms->p_end && *p == '^')
            p++;
        /* The first member may be ']' itself; "%]" is one too. */
        do {
            if (p == ms->p_end)
                (void)luaL_error(ms->L, "malformed pattern (missing ']')");
            if (*p++ == '%' && p < ms->p_end)
                p++;
        } while (p == ms->p_end || *p != ']');
        return (p + 1);
    }
    return (p);
}

/* Whether the byte at s (none at the end) matches the class from p to ep. */
static bool
single(const struct pat *ms, const char *s, const char *p, const char *ep)
{
    int c;

    if (s >= ms->src_end)
        return (false);
    c = (unsigned char)*s;
    switch (*p) {
    case '.':
        return (true);
    case '%':
        return (class_has(c, (unsigned char)p[1]));
    case '[':
        return (set_has(c, p, ep - 1));
    default:
        return ((unsigned char)*p == c);
    }
}

static const char *do_match(struct pat *ms, const char *s, const char *p);

/* c* (and c+ after its first): as many as match, then fewer until the rest does. */
static const char *
greedy(struct pat *ms, const char *s, const char *p, const char *ep)
{
    ptrdiff_t n = 0;
    const char *res;

    while (single(ms, s + n, p, ep)) {
        n++;
        tick(ms);
    }
    for (; n >= 0; n--) {
        if ((res = do_match(ms, s + n, ep + 1)) != NULL)
            return (res);
    }
    return (NULL);
}

/* c-: as few as let the rest match. */
static const char *
lazy(struct pat *ms, const char *s, const char *p, const char *ep)
{
    const char *res;

    for (;;) {
        if ((res = do_match(ms, s, ep + 1)) != NULL)
            return (res);
        if (!single(ms, s, p, ep))
            return (NULL);
        s++;
    }
}

/* %bxy at s: x, then up to the y that balances it. */
static const char *
balance(struct pat *ms, const char *s, const char *p)
{
    int depth = 1;

    if (p >= ms->p_end - 1)
        (void)luaL_error(ms->L, "malformed pattern (missing arguments to '%%b')");
    if (s >= ms->src_end || *s != p[0])
        return (NULL);
    while (++s < ms->src_end) {
        tick(ms);
        if (*s == p[1]) {
            if (--depth == 0)
                return (s + 1);
        } else if (*s == p[0]) {
            depth++;
        }
    }
    return (NULL);
}

static const char *
cap_open(struct pat *ms, const char *s, const char *p, ptrdiff_t what)
{
    const char *res;

    if (ms->ncap >= MAXCAP)
        (void)luaL_error(ms->L, "too many captures");
    ms->cap[ms->ncap].at = s;
    ms->cap[ms->ncap].len = what;
    ms->ncap++;
    if ((res = do_match(ms, s, p)) == NULL)
        ms->ncap--;
    return (res);
}

static const char *
cap_close(struct pat *ms, const char *s, const char *p)
{
    const char *res;
    int i;

    for (i = (int)ms->ncap - 1; i >= 0 && ms->cap[i].len != CAP_OPEN; i--)
        continue;
    if (i < 0)
        (void)luaL_error(ms->L, "invalid pattern capture");
    ms->cap[i].len = s - ms->cap[i].at;
    if ((res = do_match(ms, s, p)) == NULL)
        ms->cap[i].len = CAP_OPEN;
    return (res);
}

/* %1-%9 at s: the text capture d ('1'...) holds, again. */
static const char *
backref(struct pat *ms, const char *s, int d)
{
    int i = d - '1';
    size_t len;

    if (i < 0 || i >= (int)ms->ncap || ms->cap[i].len == CAP_OPEN)
        (void)luaL_error(ms->L, "invalid capture index %%%d", i + 1);
    len = (size_t)ms->cap[i].len;
    if ((size_t)(ms->src_end - s) >= len && memcmp(ms->cap[i].at, s, len) == 0)
        return (s + len);
    return (NULL);
}

/* The end of the match of pattern p (to ms->p_end) at s, or NULL. */
static const char *
do_match(struct pat *ms, const char *s, const char *p)
{
    const char *ep, *res;
    char next;

    if (ms->depth-- == 0)
        (void)luaL_error(ms->L, "pattern too complex");
    tick(ms);
    while (p != ms->p_end && s != NULL) {
        if (*p == '(') {
            if (p + 1 < ms->p_end && p[1] == ')')
                s = cap_open(ms, s, p + 2, CAP_POS);
            else
                s = cap_open(ms, s, p + 1, CAP_OPEN);
            break;
        }
        if (*p == ')') {
            s = cap_close(ms, s, p + 1);
            break;
        }
        if (*p == '$' && p + 1 == ms->p_end) {
            s = s == ms->src_end ? s : NULL;
            break;
        }
        if (*p == '%' && p + 1 < ms->p_end) {
            if (p[1] == 'b') {
                if ((s = balance(ms, s, p + 2)) != NULL)
                    p += 4;
                continue;
            }
            if (p[1] == 'f') {
                int prev, cur;

                p += 2;
                if (p == ms->p_end || *p != '[')
                    (void)luaL_error(ms->L, "missing '[' after '%%f' in pattern");
                ep = class_end(ms, p);
                prev = s == ms->src ? '\0' : (unsigned char)s[-1];
                cur = s < ms->src_end ? (unsigned char)*s : '\0';
                if (!set_has(prev, p, ep - 1) && set_has(cur, p, ep - 1))
                    p = ep;
                else
                    s = NULL;
                continue;
            }
            if (isdigit((unsigned char)p[1])) {
                if ((s = backref(ms, s, (unsigned char)p[1])) != NULL)
                    p += 2;
                continue;
            }
        }
        /* A single-character class, perhaps repeated. */
        ep = class_end(ms, p);
        next = ep < ms->p_end ? *ep : '\0';
        if (!single(ms, s, p, ep)) {
            if (next == '*' || next == '?' || next == '-')
                p = ep + 1; /* none of it is fine */
            else
                s = NULL;
            continue;
        }
        if (next == '?') {
            if ((res = do_match(ms, s + 1, ep + 1)) != NULL) {
                s = res;
                break;
            }
            p = ep + 1;
        } else if (next == '+') {
            s = greedy(ms, s + 1, p, ep);
            break;
        } else if (next == '*') {
            s = greedy(ms, s, p, ep);
            break;
        } else if (next == '-') {
            s = lazy(ms, s, p, ep);
            break;
        } else {
            s++;
            p = ep;
        }
    }
    ms->depth++;
    return (s);
}

/*
 * Push capture i of the match from s to e (the whole match when there
 * are no captures and i is 0): a string, or a position capture's
 * position.
 */
static void
push_cap(struct pat *ms, unsigned i, const char *s, const char *e)
{
    const char *at;
    ptrdiff_t len;

    if (i >= ms->ncap) {
        if (i != 0)
            (void)luaL_error(ms->L, "invalid capture index %%%d", (int)i + 1);
        at = s;
        len = e - s;
    } else {
        at = ms->cap[i].at;
        len = ms->cap[i].len;
        if (len == CAP_OPEN)
            (void)luaL_error(ms->L, "unfinished capture");
        if (len == CAP_POS) {
            lua_pushinteger(ms->L, (at - ms->src) + 1);
            return;
        }
    }
    lua_pushlstring(ms->L, at, (size_t)len);
}

/* Push every capture (the whole match when none; nothing for find, s NULL): how many. */
static int
push_caps(struct pat *ms, const char *s, const char *e)
{
    unsigned n = ms->ncap == 0 && s != NULL ? 1 : ms->ncap;

    luaL_checkstack(ms->L, (int)n, "too many captures");
    for (unsigned i = 0; i < n; i++)
        push_cap(ms, i, s, e);
    return ((int)n);
}

/* init (1-based, negative from the end) as an offset: at most len + 1 past s. */
static size_t
start_of(lua_Integer init, size_t len)
{
    if (init > 0)
        return ((size_t)init - 1);
    if (init == 0 || init < -(lua_Integer)len)
        return (0);
    return (len - (size_t)-init);
}

static bool
has_specials(const char *p, size_t lp)
{
    for (size_t i = 0; i < lp; i++)
        if (p[i] != '\0' && strchr(SPECIALS, p[i]) != NULL)
            return (true);
    return (false);
}

/* string.find (find true) and string.match. */
static int
find_or_match(lua_State *L, bool find)
{
    size_t ls, lp;
    const char *s = luaL_checklstring(L, 1, &ls), *p = luaL_checklstring(L, 2, &lp);
    size_t init = start_of(luaL_optinteger(L, 3, 1), ls);
    const char *s1, *e;
    struct pat ms;
    bool anchor;

    if (init > ls) {
        luaL_pushfail(L);
        return (1);
    }
    if (find && (lua_toboolean(L, 4) || !has_specials(p, lp))) {
        /* glibc's memmem is linear, where a naive search is not */
        s1 = lp == 0 ? s + init : memmem(s + init, ls - init, p, lp);
        if (s1 != NULL) {
            lua_pushinteger(L, (s1 - s) + 1);
            lua_pushinteger(L, (lua_Integer)((s1 - s) + lp));
            return (2);
        }
        luaL_pushfail(L);
        return (1);
    }
    anchor = lp > 0 && *p == '^';
    if (anchor) {
        p++;
        lp--;
    }
    pat_init(&ms, L, s, ls, p, lp);
    s1 = s + init;
    do {
        pat_restart(&ms);
        if ((e = do_match(&ms, s1, p)) != NULL) {
            if (!find)
                return (push_caps(&ms, s1, e));
            lua_pushinteger(L, (s1 - s) + 1);
            lua_pushinteger(L, e - s);
            return (push_caps(&ms, NULL, NULL) + 2);
        }
    } while (s1++ < ms.src_end && !anchor);
    luaL_pushfail(L);
    return (1);
}

static int
l_find(lua_State *L)
{
    return (find_or_match(L, true));
}

static int
l_match(lua_State *L)
{
    return (find_or_match(L, false));
}

/* gmatch's iterator state, in its userdata. */
struct gm {
    struct pat ms;
    const char *at;   /* where the next search starts */
    const char *last; /* end of the last match: no empty match there again */
    const char *p;
};

static int
l_gmatch_next(lua_State *L)
{
    struct gm *gm = lua_touserdata(L, lua_upvalueindex(3));
    const char *e;

    gm->ms.L = L;
    for (const char *at = gm->at; at <= gm->ms.src_end; at++) {
        pat_restart(&gm->ms);
        if ((e = do_match(&gm->ms, at, gm->p)) != NULL && e != gm->last) {
            gm->at = gm->last = e;
            return (push_caps(&gm->ms, at, e));
        }
    }
    return (0);
}

/* string.gmatch(s, pattern [, init]); '^' is no anchor here, as in Lua. */
static int
l_gmatch(lua_State *L)
{
    size_t ls, lp;
    const char *s = luaL_checklstring(L, 1, &ls), *p = luaL_checklstring(L, 2, &lp);
    size_t init = start_of(luaL_optinteger(L, 3, 1), ls);
    struct gm *gm;

    lua_settop(L, 2); /* the strings, kept by the closure */
    gm = lua_newuserdatauv(L, sizeof *gm, 0);
    pat_init(&gm->ms, L, s, ls, p, lp);
    gm->at = s + (init > ls ? ls + 1 : init);
    gm->last = NULL;
    gm->p = p;
    lua_pushcclosure(L, l_gmatch_next, 3);
    return (1);
}

/* gsub's string replacement: %0-%9 and %% in the string at index 3. */
static void
add_string(struct pat *ms, luaL_Buffer *b, const char *s, const char *e)
{
    size_t len;
    const char *r = lua_tolstring(ms->L, 3, &len), *end = r + len, *pct;

    while ((pct = memchr(r, '%', (size_t)(end - r))) != NULL) {
        luaL_addlstring(b, r, (size_t)(pct - r));
        if (pct + 1 < end && pct[1] == '%') {
            luaL_addchar(b, '%');
        } else if (pct + 1 < end && pct[1] == '0') {
            luaL_addlstring(b, s, (size_t)(e - s));
        } else if (pct + 1 < end && isdigit((unsigned char)pct[1])) {
            /* a position capture is added as its number */
            push_cap(ms, (unsigned)(pct[1] - '1'), s, e);
            luaL_addvalue(b);
        } else {
            (void)luaL_error(ms->L, "invalid use of '%%' in replacement string");
        }
        r = pct + 2;
    }
    luaL_addlstring(b, r, (size_t)(end - r));
}

/* Add what replaces the match s..e; whether it differs from the match. */
static bool
add_replacement(struct pat *ms, luaL_Buffer *b, const char *s, const char *e, int tr)
{
    lua_State *L = ms->L;

    if (tr == LUA_TFUNCTION) {
        int n;

        lua_pushvalue(L, 3);
        n = push_caps(ms, s, e);
        lua_call(L, n, 1);
    } else if (tr == LUA_TTABLE) {
        push_cap(ms, 0, s, e);
        lua_gettable(L, 3);
    } else {
        add_string(ms, b, s, e);
        return (true);
    }
    if (!lua_toboolean(L, -1)) {
        /* nil or false: the match stays */
        lua_pop(L, 1);
        luaL_addlstring(b, s, (size_t)(e - s));
        return (false);
    }
    if (!lua_isstring(L, -1))
        (void)luaL_error(L, "invalid replacement value (a %s)", luaL_typename(L, -1));
    luaL_addvalue(b);
    return (true);
}

/* string.gsub(s, pattern, repl [, n]): the new string and the number of matches replaced. */
static int
l_gsub(lua_State *L)
{
    size_t ls, lp;
    const char *src = luaL_checklstring(L, 1, &ls), *p = luaL_checklstring(L, 2, &lp);
    int tr = lua_type(L, 3);
    lua_Integer max = luaL_optinteger(L, 4, (lua_Integer)ls + 1), n = 0;
    const char *last = NULL, *e;
    bool anchor = lp > 0 && *p == '^', changed = false;
    struct pat ms;
    luaL_Buffer b;

    luaL_argexpected(
        L, tr == LUA_TNUMBER || tr == LUA_TSTRING || tr == LUA_TFUNCTION || tr == LUA_TTABLE, 3,
        "string/function/table");
    luaL_buffinit(L, &b);
    if (anchor) {
        p++;
        lp--;
    }
    pat_init(&ms, L, src, ls, p, lp);
    while (n < max) {
        pat_restart(&ms);
        if ((e = do_match(&ms, src, p)) != NULL && e != last) {
            n++;
            changed = add_replacement(&ms, &b, src, e, tr) || changed;
            src = last = e;
        } else if (src < ms.src_end) {
            luaL_addchar(&b, *src++);
        } else {
            break;
        }
        if (anchor)
            break;
    }
    if (!changed) {
        lua_pushvalue(L, 1);
    } else {
        luaL_addlstring(&b, src, (size_t)(ms.src_end - src));
        luaL_pushresult(&b);
    }
    lua_pushinteger(L, n);
    return (2);
}

/*
 * string.rep(s, n [, sep]): the first copy (and separator), then the
 * result doubled into itself -- a 64 MB string of one byte is a few
 * memcpy calls, not 64 million.  Too large a result for Lua's string
 * functions (above INT_MAX) is its error; anything above
 * policy_max_memory fails to allocate.
 */
static int
l_rep(lua_State *L)
{
    size_t l, lsep, total, done, unit;
    const char *s = luaL_checklstring(L, 1, &l);
    lua_Integer n = luaL_checkinteger(L, 2);
    const char *sep = luaL_optlstring(L, 3, "", &lsep);
    luaL_Buffer b;
    char *out;

    if (n <= 0) {
        lua_pushliteral(L, "");
        return (1);
    }
    if (l + lsep < l || l + lsep > (size_t)INT_MAX / (size_t)n)
        return (luaL_error(L, "resulting string too large"));
    total = (size_t)n * l + (size_t)(n - 1) * lsep;
    if (total >= 4096)
        pol__limit_check(L);
    out = luaL_buffinitsize(L, &b, total);
    memcpy(out, s, l);
    unit = l;
    if (n > 1) {
        memcpy(out + l, sep, lsep);
        unit += lsep;
    }
    /* out[0, done) is whole copies of s and sep: copy it after itself, the last part short. */
    for (done = unit < total ? unit : total; done < total; done += unit) {
        unit = done < total - done ? done : total - done;
        memcpy(out + done, out, unit);
    }
    luaL_pushresultsize(&b, total);
    return (1);
}

void
pol__pat_open(lua_State *L)
{
    static const luaL_Reg fns[] = {
        { "find", l_find }, { "match", l_match }, { "gmatch", l_gmatch },
        { "gsub", l_gsub }, { "rep", l_rep },     { NULL, NULL },
    };

    luaL_setfuncs(L, fns, 0);
}
