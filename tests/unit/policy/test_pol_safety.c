/*
 * pol: what a script cannot do, through the hook calls of pol.h -- change
 * a field that frames a message, or a status in a way that adds or drops
 * a body; escape the instruction limit or the deadline (pcall, xpcall and
 * their handlers, callbacks, backtracking patterns, re.*, huge strings);
 * leave anything for the next request in globals, library tables or
 * metatables; load with a hook that can only answer a word it may not
 * return.  And the bounded pattern functions against Lua's own, on
 * thousands of generated patterns.
 */
#include <time.h>

#include <lualib.h>

#include "pol_test.h"
#include "surogat/tim.h"

/* A head with framing fields: Content-Length: 5, Connection: keep-alive. */
static struct http *
mkhead(struct http *h, struct http_hdr *hh, unsigned n, unsigned status)
{
    http_init(h, hh, n);
    h->proto = 11;
    h->status = status;
    h->reason = (struct txt){ "OK", 2 };
    h->method = (struct txt){ "GET", 3 };
    h->url = (struct txt){ "/", 1 };
    AZ(http_add(h, (struct txt){ "Content-Length", 14 }, (struct txt){ "5", 1 }));
    AZ(http_add(h, (struct txt){ "Connection", 10 }, (struct txt){ "keep-alive", 10 }));
    return (h);
}

static const char *
hval(const struct http *h, const char *name)
{
    const struct txt *v = http_value(h, name);
    static char buf[512];

    if (v == NULL)
        return (NULL);
    snprintf(buf, sizeof buf, "%.*s", (int)v->len, v->b);
    return (buf);
}

/* Every way of changing a framing field, on every writable header table. */
#define FRAMING_SCRIPT                                                                         \
    "local FRAMING = { 'Content-Length', 'transfer-encoding', 'CONNECTION', 'Keep-Alive',\n"   \
    "                  'Upgrade' }\n"                                                          \
    "local function attempts(h, extra)\n"                                                      \
    "  local names, refused, where = { table.unpack(FRAMING) }, 0, nil\n"                      \
    "  for _, n in ipairs(extra or {}) do names[#names + 1] = n end\n"                         \
    "  for _, n in ipairs(names) do\n"                                                         \
    "    for _, f in ipairs({\n"                                                               \
    "      function() h[n] = '1' end,\n"                                                       \
    "      function() h[n] = nil end,\n"                                                       \
    "      function() h[n:lower():gsub('-', '_')] = '1' end,\n"                                \
    "      function() h:set(n, '1') end,\n"                                                    \
    "      function() h:append(n, '1') end,\n"                                                 \
    "      function() h:unset(n) end,\n"                                                       \
    "    }) do\n"                                                                              \
    "      local ok, err = pcall(f)\n"                                                         \
    "      if not ok and err:find('is read-only: surogat frames the message', 1, true) then\n" \
    "        refused = refused + 1\n"                                                          \
    "        where = where or err\n"                                                           \
    "      end\n"                                                                              \
    "    end\n"                                                                                \
    "  end\n"                                                                                  \
    "  h['X-Refused'] = tostring(refused)\n"                                                   \
    "  h['X-Where'] = where\n"                                                                 \
    "  h['X-Read'] = h['Content-Length'] .. ' ' .. h.connection\n"                             \
    "end\n"                                                                                    \
    "local BEREQ = { 'TE', 'trailer' }\n"                                                      \
    "function recv(req)\n"                                                                     \
    "  attempts(req.http)\n"                                                                   \
    "  req.http.te = 'trailers'  -- TE is only surogat's on a backend request\n"               \
    "  return 'pass'\n"                                                                        \
    "end\n"                                                                                    \
    "function backend_fetch(bereq) attempts(bereq.http, BEREQ) end\n"                          \
    "function backend_response(bereq, beresp) attempts(beresp.http) end\n"                     \
    "function deliver(req, resp) attempts(resp.http) end\n"                                    \
    "function synth(req, resp) attempts(resp.http) end\n"                                      \
    "function backend_error(bereq, beresp) attempts(beresp.http) return 'deliver' end\n"       \
    "function pipe(req, bereq) attempts(bereq.http, BEREQ) end\n"

static void
assert_refused(const struct http *h, const char *n)
{
    ck_assert_str_eq(hval(h, "X-Refused"), n);
    ck_assert_str_eq(hval(h, "X-Read"), "5 keep-alive");
    ck_assert_str_eq(hval(h, "Content-Length"), "5");
    ck_assert_uint_eq(http_count(h, "Content-Length"), 1);
    ck_assert_str_eq(hval(h, "Connection"), "keep-alive");
    ck_assert_ptr_null(http_find(h, "Transfer-Encoding"));
    ck_assert_ptr_null(http_find(h, "Upgrade"));
}

START_TEST(framing_fields_read_only)
{
    static struct http_hdr hh[32];
    struct pol_bctx bc;
    struct pol_synth syn;
    struct pol_beresp br;
    struct txt body = { "", 0 };
    struct http h;

    load_ok(FRAMING_SCRIPT);
    mkreq("GET", "/", "Content-Length", "5", "Connection", "keep-alive", NULL);
    ck_assert_int_eq(do_recv(&req), POL_PASS);
    assert_refused(req.http, "30");
    ck_assert_msg(strstr(val("X-Where"), path) != NULL && strstr(val("X-Where"), ":8: ") != NULL,
                  "%s", val("X-Where"));
    ck_assert_str_eq(val("TE"), "trailers");

    pol_bctx_init(&bc, &req);
    ck_assert_int_eq(pol_backend_fetch(&bc, mkhead(&h, hh, 32, 0)), POL_FETCH);
    assert_refused(&h, "42");
    ck_assert_ptr_null(http_find(&h, "TE"));
    memset(&br, 0, sizeof br);
    br.resp = mkhead(&h, hh, 32, 200);
    ck_assert_int_eq(pol_backend_response(&bc, &br), POL_DELIVER);
    assert_refused(&h, "30");
    ck_assert_int_eq(pol_deliver(&req, mkhead(&h, hh, 32, 200), 0, &syn), POL_DELIVER);
    assert_refused(&h, "30");
    ck_assert_int_eq(pol_synth(&req, mkhead(&h, hh, 32, 503), &body), POL_DELIVER);
    assert_refused(&h, "30");
    ck_assert_int_eq(pol_backend_error(&bc, mkhead(&h, hh, 32, 503), &body), POL_DELIVER);
    assert_refused(&h, "30");
    ck_assert_int_eq(pol_pipe(&req, mkhead(&h, hh, 32, 0), &syn), POL_PIPE);
    assert_refused(&h, "42");
}
END_TEST

START_TEST(status_keeps_the_body)
{
    static struct http_hdr hh[16];
    struct pol_bctx bc;
    struct pol_synth syn;
    struct pol_beresp br;
    struct txt body = { "page", 4 };
    struct http h;

    load_ok("function deliver(req, resp)\n"
            "  local u = req.url\n"
            "  if u == '/304' then resp.status = 304 end\n"
            "  if u == '/204' then resp.status = 204 end\n"
            "  if u == '/404' then resp.status = 404 end\n"
            "  if u == '/200' then resp.status = 200 end\n"
            "end\n"
            "function backend_response(bereq, beresp) beresp.status = 304 end\n"
            "function synth(req, resp) resp.status = 204 end\n");
    ck_assert_int_eq(pol_deliver(mkreq("GET", "/304", NULL), mkhead(&h, hh, 16, 200), 0, &syn),
                     POL_ERROR);
    ck_assert_int_eq(pol_deliver(mkreq("GET", "/204", NULL), mkhead(&h, hh, 16, 200), 0, &syn),
                     POL_ERROR);
    ck_assert_uint_eq(h.status, 200);
    /* a 304 (a conditional hit) cannot get its body back */
    ck_assert_int_eq(pol_deliver(mkreq("GET", "/200", NULL), mkhead(&h, hh, 16, 304), 0, &syn),
                     POL_ERROR);
    ck_assert_int_eq(pol_deliver(mkreq("GET", "/204", NULL), mkhead(&h, hh, 16, 304), 0, &syn),
                     POL_DELIVER);
    ck_assert_uint_eq(h.status, 204);
    ck_assert_int_eq(pol_deliver(mkreq("GET", "/404", NULL), mkhead(&h, hh, 16, 200), 0, &syn),
                     POL_DELIVER);
    ck_assert_uint_eq(h.status, 404);
    memset(&br, 0, sizeof br);
    br.resp = mkhead(&h, hh, 16, 200);
    pol_bctx_init(&bc, mkreq("GET", "/", NULL));
    ck_assert_int_eq(pol_backend_response(&bc, &br), POL_ERROR);
    /* a synthetic body is framed after the hook: there 204 is fine (and sent without it) */
    ck_assert_int_eq(pol_synth(mkreq("GET", "/", NULL), mkhead(&h, hh, 16, 200), &body),
                     POL_DELIVER);
    ck_assert_uint_eq(h.status, 204);
}
END_TEST

/* Ways a script might try to carry on past the instruction limit. */
static const char *const escapes[] = {
    "/pcall",  "/xpcall", "/handler", "/error-table", "/gsub", "/sort",
    "/return", "/close",  "/index",   "/tostring",    "/deep",
};

START_TEST(instruction_limit_is_sticky)
{
    struct pol_wrk *pw;
    double t0;

    par.policy_max_instructions = 10000;
    load_ok(
        "local function spin() while true do end end\n"
        "function recv(req)\n"
        "  local u = req.url\n"
        "  if u == '/pcall' then while true do pcall(spin) end end\n"
        "  if u == '/xpcall' then while true do xpcall(spin, function() return 1 end) end end\n"
        "  if u == '/handler' then xpcall(spin, spin) return 'pass' end\n"
        "  if u == '/error-table' then while true do pcall(spin) pcall(error, {}) end end\n"
        "  if u == '/gsub' then while true do pcall(string.gsub, 'abc', '.', spin) end end\n"
        "  if u == '/sort' then\n"
        "    while true do pcall(table.sort, { 3, 2, 1 }, function() spin() end) end\n"
        "  end\n"
        "  if u == '/return' then pcall(spin) return 'pass' end\n"
        "  if u == '/close' then\n"
        "    local c <close> = setmetatable({}, { __close = function() return 1 end })\n"
        "    pcall(spin)\n"
        "    return 'pass'\n"
        "  end\n"
        "  if u == '/index' then\n"
        "    local t = setmetatable({}, { __index = function() spin() end })\n"
        "    while true do pcall(function() return t.x end) end\n"
        "  end\n"
        "  if u == '/tostring' then\n"
        "    local t = setmetatable({}, { __tostring = function() spin() end })\n"
        "    while true do pcall(tostring, t) end\n"
        "  end\n"
        "  if u == '/deep' then\n"
        "    local function f(n) if n == 0 then spin() end pcall(f, n - 1) return f(n - 1) end\n"
        "    f(50)\n"
        "  end\n"
        "  return 'pass'\n"
        "end\n");
    for (size_t i = 0; i < ARRAY_LEN(escapes); i++) {
        t0 = tim_mono();
        ck_assert_msg(do_recv(mkreq("GET", escapes[i], NULL)) == POL_ERROR, "%s", escapes[i]);
        ck_assert_msg(tim_mono() - t0 < 2, "%s", escapes[i]);
        pw = wrk.pol;
        ck_assert_int_eq(pw->lim.trip, POL_TRIP_INSNS);
        ck_assert_msg(strstr(pw->lim.msg, path) != NULL &&
                          strstr(pw->lim.msg, ": policy_max_instructions exceeded") != NULL,
                      "%s: %s", escapes[i], pw->lim.msg);
        /* the next call has its own budget */
        ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_PASS);
        ck_assert_int_eq(wrk.pol->lim.trip, POL_TRIP_NONE);
    }
    /* no coroutines to run on a stack of their own */
    load_ok("function recv(req) assert(coroutine == nil) return 'pass' end\n");
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_PASS);
}
END_TEST

/* What a few instructions start: C code that the count hook does not see. */
static const char *const slow[] = {
    "/find", "/match",   "/gmatch", "/gsub",  "/route", "/pcall-find", "/rep",
    "/re",   "/re-gsub", "/loop",   "/plain", "/sort",  "/utf8",
};

START_TEST(deadline)
{
    char url[4200];
    double t0;

    par.policy_max_time = 0.05;
    par.policy_max_instructions = 1000000000;
    load_ok(
        "local s = ('a'):rep(1500) .. 'b'\n"
        "local evil = '.-.-.-c'\n"
        "function recv(req)\n"
        "  local u = req.url\n"
        "  if u == '/find' then s:find(evil) end\n"
        "  if u == '/match' then string.match(s, '(' .. evil .. ')') end\n"
        "  if u == '/gmatch' then for m in s:gmatch(evil) do end end\n"
        "  if u == '/gsub' then s:gsub(evil, '%0') end\n"
        "  if u:sub(1, 7) == '/route/' then u:match('^/route/(.-)/(.-)/(.-)%.php$') end\n"
        "  if u == '/pcall-find' then while true do pcall(string.find, s, evil) end end\n"
        "  if u == '/rep' then while true do pcall(string.rep, 'x', 1e7) end end\n"
        "  if u == '/re' then\n"
        "    while true do pcall(re.match, ('a'):rep(100) .. '!', '(a+)+$') end\n"
        "  end\n"
        "  if u == '/re-gsub' then re.gsub((('a'):rep(20) .. '!'):rep(2000), '(a+)+b|!', '') end\n"
        "  if u == '/loop' then while true do end end\n"
        "  if u == '/plain' then\n"
        "    local h = ('a'):rep(1e6)\n"
        "    while true do pcall(string.find, h, ('a'):rep(5e5) .. 'b', 1, true) end\n"
        "  end\n"
        "  if u == '/sort' then\n"
        "    local t = { ('abcdefghij'):rep(5e4):byte(1, -1) }\n"
        "    while true do table.sort(t) end\n"
        "  end\n"
        "  if u == '/utf8' then\n"
        "    local h = ('\\u{20AC}'):rep(1e7)\n"
        "    while true do utf8.len(h) end\n"
        "  end\n"
        "  return 'pass'\n"
        "end\n");
    for (size_t i = 0; i < ARRAY_LEN(slow); i++) {
        const char *u = slow[i];

        if (strcmp(u, "/route") == 0) {
            memset(url, '/', sizeof url - 1);
            memcpy(url, "/route/x", 8);
            url[sizeof url - 2] = 'y';
            url[sizeof url - 1] = '\0';
            u = url;
        }
        t0 = tim_mono();
        ck_assert_msg(do_recv(mkreq("GET", u, NULL)) == POL_ERROR, "%s", slow[i]);
        /* the limit is CPU time: the wall-clock bound leaves room for a loaded machine */
        ck_assert_msg(tim_mono() - t0 < 3, "%s: %f s", slow[i], tim_mono() - t0);
        ck_assert_int_eq(wrk.pol->lim.trip, POL_TRIP_TIME);
        ck_assert_msg(strstr(wrk.pol->lim.msg, path) != NULL &&
                          strstr(wrk.pol->lim.msg, ": policy_max_time exceeded") != NULL,
                      "%s: %s", slow[i], wrk.pol->lim.msg);
        ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_PASS);
    }
}
END_TEST

/* A stand-in for the thread waiting for a CPU: sleep(ms), made a global of the state. */
static int
l_sleep(lua_State *L)
{
    struct timespec ts = { 0, (long)luaL_checkinteger(L, 1) * 1000000 };

    nanosleep(&ts, NULL);
    return (0);
}

START_TEST(waiting_is_not_running)
{
    double t0;

    par.policy_max_time = 0.05;
    par.policy_max_instructions = 1000000000;
    load_ok("function recv(req)\n"
            "  local a = req.url:sub(1, 2)\n"
            "  sleep(150)\n"
            "  local b = req.url:sub(1, 2)\n"
            "  if req.url == '/busy' then while true do end end\n"
            "  return 'pass'\n"
            "end\n");
    /* the worker's state exists after a first call: give it sleep() */
    ck_assert_int_eq(do_recv(mkreq("GET", "/none", NULL)), POL_ERROR);
    lua_pushcfunction(wrk.pol->L, l_sleep);
    lua_setglobal(wrk.pol->L, "sleep");
    /* 150 ms past a 50 ms deadline, but asleep: not failed for it */
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_PASS);
    /* ... while a hook that keeps running fails at a quarter of the budget more of CPU */
    t0 = tim_mono();
    ck_assert_int_eq(do_recv(mkreq("GET", "/busy", NULL)), POL_ERROR);
    ck_assert_int_eq(wrk.pol->lim.trip, POL_TRIP_TIME);
    ck_assert_msg(tim_mono() - t0 < 3, "%f", tim_mono() - t0); /* CPU-time limit, loaded machine */
}
END_TEST

START_TEST(huge_strings)
{
    struct pol_synth syn;

    par.policy_max_time = 10; /* memory is what this is about */
    load_ok(
        "function recv(req)\n"
        "  local ok1, e1 = pcall(string.rep, 'x', 1e9)\n"
        "  local ok2, e2 = pcall(string.rep, 'ab', 2^40, ',')\n"
        "  local ok3, e3 = pcall(function() local s = ('x'):rep(2^20) while true do s = s .. s end "
        "end)\n"
        "  assert(not ok1 and not ok2 and not ok3)\n"
        "  assert(('ab'):rep(3, ', ') == 'ab, ab, ab' and #('xyz'):rep(100000, '-') == 399999)\n"
        "  return surogat.synth(200, e1 .. '; ' .. e2 .. '; ' .. e3)\n"
        "end\n");
    ck_assert_int_eq(pol_recv(mkreq("GET", "/", NULL), &syn), POL_SYNTH);
    ck_assert_str_eq(syn.reason,
                     "not enough memory; resulting string too large; not enough memory");
}
END_TEST

START_TEST(no_state_between_requests)
{
    struct pol_synth syn;
    char mod[64], name[64], src[2400], ebuf[256];
    struct sb err;
    FILE *f;

    /* A module, required at the top level, whose function sets a global. */
    snprintf(mod, sizeof mod, "/tmp/polmod%d.lua", (int)getpid());
    f = fopen(mod, "w");
    AN(f);
    fputs("local M = {}\n"
          "function M.bump() counter = (counter or 0) + 1 return counter end\n"
          "return M\n",
          f);
    fclose(f);
    snprintf(name, sizeof name, "polmod%d", (int)getpid());
    sb_init(&err, ebuf, sizeof ebuf);
    AZ(par_set("policy_modules", name, &err));
    AZ(par_set("policy_module_path", "/tmp", &err));
    snprintf(
        src, sizeof src,
        "local M = require('polmod%d')\n"
        "local served = 0\n"
        "CONFIG = { ttl = 5 }\n"
        "function string.shout(s) return s:upper() .. '!' end\n"
        "local function refused(f, what)\n"
        "  local ok, err = pcall(f)\n"
        "  assert(not ok and err:find(what, 1, true), tostring(err))\n"
        "end\n"
        "function recv(req)\n"
        "  served = served + 1\n"
        "  if req.url == '/set' then\n"
        "    x = 'leak'\n"
        "    assert(_G.x == 'leak' and rawget(_G, 'x') == 'leak')\n"
        "    assert(M.bump() == 1 and M.bump() == 2)\n"
        "    CONFIG.ttl = 6\n"
        "    return 'pass'\n"
        "  end\n"
        "  refused(function() string.upper = nil end, 'the string table is read-only')\n"
        "  refused(function() rawset(table, 'concat', nil) end, 'read-only')\n"
        "  refused(function() surogat.synth = nil end, 'read-only')\n"
        "  refused(function() getmetatable('').__index = {} end, 'attempt to index')\n"
        "  refused(function() setmetatable(_G, {}) end, 'protected metatable')\n"
        "  refused(function() setmetatable(string, nil) end, 'protected metatable')\n"
        "  refused(function() setmetatable({}, { __gc = tostring }) end, '__gc is not allowed')\n"
        "  refused(function() collectgarbage('stop') end, 'not allowed')\n"
        "  refused(function() CONFIG = {} end, \"global 'CONFIG' is the top level's\")\n"
        "  refused(function() tostring = nil end, \"global 'tostring'\")\n"
        "  refused(function() rawset(_G, 'recv', nil) end, \"global 'recv'\")\n"
        "  assert(getmetatable('') == 'locked' and collectgarbage('count') > 0)\n"
        "  local n, g = 0, 0\n"
        "  for k in pairs(string) do n = n + 1 end\n"
        "  for k in pairs(_G) do if k == 'recv' or k == 'CONFIG' then g = g + 1 end end\n"
        "  assert(n > 15 and g == 2 and _G.string == string and rawget(string, 'find'))\n"
        "  return surogat.synth(200, string.format('%%s %%s %%s %%d %%s %%s', tostring(x),\n"
        "    ('hi'):shout(), tostring(counter), M.bump(), CONFIG.ttl, served))\n"
        "end\n"
        "function pass(req)\n"
        "  assert(x == 'leak')  -- a later hook of the same request\n"
        "end\n",
        (int)getpid());
    load_ok(src);
    ck_assert_int_eq(pol_recv(mkreq("GET", "/set", NULL), &syn), POL_PASS);
    ck_assert_int_eq(pol_pass(&req, &syn), POL_FETCH);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(pol_recv(mkreq("GET", "/", NULL), &syn), POL_SYNTH);
        /* the table the top level made is the script's own: its change stays */
        ck_assert_str_eq(syn.reason, i == 0   ? "nil HI! nil 1 6 2"
                                     : i == 1 ? "nil HI! nil 1 6 3"
                                              : "nil HI! nil 1 6 4");
    }
    unlink(mod);
}
END_TEST

START_TEST(constant_answer_checked_at_load)
{
    char ebuf[512], want[128];
    struct sb err;

    ck_assert_int_eq(load("function recv(req) end\n"
                          "function hash(req)\n"
                          "  return \"hsah\"\n"
                          "end\n",
                          ebuf, sizeof ebuf),
                     -1);
    snprintf(want, sizeof want, "%s:3: hash returns \"hsah\", not one of \"lookup\"", path);
    ck_assert_msg(strstr(ebuf, want) != NULL, "%s", ebuf);
    ck_assert(!pol_active());
    ck_assert_int_eq(load("\n\nfunction miss(...) return 'deliver' end\n", ebuf, sizeof ebuf), -1);
    snprintf(want, sizeof want, "%s:3: miss returns \"deliver\"", path);
    ck_assert_msg(strstr(ebuf, want) != NULL, "%s", ebuf);
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_int_eq(pol_check(path, &err), -1);
    ck_assert_msg(strstr(ebuf, want) != NULL, "%s", ebuf);
    load_ok("function recv(req) return 'purge' end\n"
            "function pass(req)\n  return \"fetch\"\nend\n"
            "function log(req, resp) return 'ignored' end\n");
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_PURGE);
}
END_TEST

/*
 * The bounded pattern functions next to the string library's, in a plain
 * state: the same results and the same errors, on hand-picked cases and
 * on patterns and subjects drawn at random from pieces of every kind.
 */
static const char differential[] =
    "local B = bounded\n"
    "local function pack(...) return { n = select('#', ...), ... } end\n"
    "local function show(t)\n"
    "  local o = {}\n"
    "  for i = 1, t.n do o[i] = string.format('%q', tostring(t[i])) end\n"
    "  return table.concat(o, ',')\n"
    "end\n"
    "local function same(a, b)\n"
    "  if a.n ~= b.n then return false end\n"
    "  for i = 1, a.n do\n"
    "    local x, y = a[i], b[i]\n"
    "    if type(y) == 'string' then y = y:gsub('bounded%.', 'string.') end\n"
    "    if x ~= y then return false end\n"
    "  end\n"
    "  return true\n"
    "end\n"
    "local checked = 0\n"
    "local function check(what, f1, f2, ...)\n"
    "  local r1, r2 = pack(pcall(f1, ...)), pack(pcall(f2, ...))\n"
    "  checked = checked + 1\n"
    "  if not same(r1, r2) then\n"
    "    error(string.format('%s(%s): Lua %s, bounded %s', what, show(pack(...)), show(r1),\n"
    "                        show(r2)), 0)\n"
    "  end\n"
    "end\n"
    "local function gm(f)\n"
    "  return function(s, p, init)\n"
    "    local out = {}\n"
    "    for a, b, c in f(s, p, init) do\n"
    "      out[#out + 1] = tostring(a) .. '|' .. tostring(b) .. '|' .. tostring(c)\n"
    "    end\n"
    "    return table.concat(out, ';')\n"
    "  end\n"
    "end\n"
    "local function all(s, p, init)\n"
    "  check('find', string.find, B.find, s, p)\n"
    "  check('find', string.find, B.find, s, p, init)\n"
    "  check('find', string.find, B.find, s, p, init, true)\n"
    "  check('match', string.match, B.match, s, p, init)\n"
    "  check('gmatch', gm(string.gmatch), gm(B.gmatch), s, p, init)\n"
    "  check('gsub', string.gsub, B.gsub, s, p, '<%0>')\n"
    "  check('gsub', string.gsub, B.gsub, s, p, '%1%%', init % 4)\n"
    "  check('gsub', string.gsub, B.gsub, s, p, { a = 'A', [''] = false, ['1'] = {} })\n"
    "  check('gsub', string.gsub, B.gsub, s, p, function(a, b)\n"
    "    if b then return '(' .. tostring(a) .. ',' .. tostring(b) .. ')' end\n"
    "    return a ~= 'b' and a or nil\n"
    "  end)\n"
    "end\n"
    "for _, c in ipairs({\n"
    "  { 'hello world', 'o w' }, { 'hello', 'l+' }, { '  trim  ', '^%s*(.-)%s*$' },\n"
    "  { 'key=val', '(%w+)=(%w+)' }, { 'THE (quick) fox', '%((%a+)%)' },\n"
    "  { 'f(a(b)c)d', '%b()' }, { 'THE (quick) fox', '%f[%a]%a+' }, { 'hello', '()ll()' },\n"
    "  { 'abcabc', '(abc)%1' }, { 'aaa', 'a-b' }, { 'aaab', 'a-b' }, { '', '' },\n"
    "  { 'abc', '' }, { 'abc', '$' }, { 'a$b', '$b' }, { 'a.b', '%.' }, { '[x]', '[]]' },\n"
    "  { 'x-y', '[a-]' }, { 'a\\0b', '%z' }, { 'a\\0b', '\\0' }, { 'a\\0b', '[\\0]' },\n"
    "  { 'ab', '%' }, { 'ab', '[a' }, { 'ab', '(a' }, { 'ab', 'a)' }, { 'ab', '%b' },\n"
    "  { 'ab', '%ba' }, { 'ab', '%f' }, { 'ab', '%fa' }, { 'ab', '%1' }, { 'ab', '(a%1)' },\n"
    "  { 'ab', '%0' }, { 'ab', '[%' }, { 'ab', '[^' }, { ('a'):rep(300), ('a?'):rep(300) },\n"
    "  { 'abc', ('()'):rep(33) }, { 'abc', ('()'):rep(32) }, { 'x=1, y=2', '(%w+)=(%w+)' },\n"
    "  { '^a', '^^a' }, { 'ab', '^' }, { 'a+b', 'a+b' }, { 'a+b', 'a%+b' },\n"
    "}) do\n"
    "  for init = -4, 6 do all(c[1], c[2], init) end\n"
    "end\n"
    "check('gsub', string.gsub, B.gsub, 'abc', '%w', '%')\n"
    "check('gsub', string.gsub, B.gsub, 'abc', '%w', '%2')\n"
    "check('gsub', string.gsub, B.gsub, 'abc', '%w', '%x')\n"
    "check('gsub', string.gsub, B.gsub, 'abc', '(%w)()', '%2:%1')\n"
    "check('gsub', string.gsub, B.gsub, 'abc', '%w')\n"
    "check('gsub', string.gsub, B.gsub, 'abc', '%w', true)\n"
    "check('gsub', string.gsub, B.gsub, 'abc', '%w', 'x', 'y')\n"
    "check('gsub', string.gsub, B.gsub, 'abc', '%w', 'x', 1.5)\n"
    "check('gsub', string.gsub, B.gsub, 'abc', '^%w', 'x')\n"
    "check('gsub', string.gsub, B.gsub, 'abc', '', '-')\n"
    "check('gsub', string.gsub, B.gsub, 'abc', '%w*', '-')\n"
    "check('gsub', string.gsub, B.gsub, 'abc', 'b*', '-')\n"
    "check('gsub', string.gsub, B.gsub, 'a b', '%w', 7)\n"
    "check('find', string.find, B.find, 'abc', 'b', 1.5)\n"
    "check('find', string.find, B.find, {}, 'b')\n"
    "check('find', string.find, B.find, 'abc')\n"
    "check('find', string.find, B.find, 12345, 34)\n"
    "check('find', string.find, B.find, 'abc', 'b', math.mininteger)\n"
    "check('find', string.find, B.find, 'abc', 'b', math.maxinteger)\n"
    "check('gmatch', gm(string.gmatch), gm(B.gmatch), 'abc', 'b', math.maxinteger)\n"
    "for _, n in ipairs({ -1, 0, 1, 2, 5, 2^31, 2^40 }) do\n"
    "  for _, sep in ipairs({ '', ',', '<->' }) do\n"
    "    for _, s in ipairs({ '', 'x', 'abc' }) do\n"
    "      -- Lua's own takes 2^40 steps to repeat nothing 2^40 times\n"
    "      if #s + #sep > 0 or n < 2^31 then check('rep', string.rep, B.rep, s, n, sep) end\n"
    "    end\n"
    "  end\n"
    "end\n"
    "check('rep', string.rep, B.rep, 'x', 2^31)\n"
    "check('rep', string.rep, B.rep, 'x', 3, nil)\n"
    "check('rep', string.rep, B.rep, 'x', 'y')\n"
    "math.randomseed(20261126)\n"
    "local tok = { 'a', 'b', 'x', '.', '%a', '%d', '%s', '%w', '%W', '%p', '%x', '%u', '%l',\n"
    "  '%c', '%g', '%S', '[ab]', '[^a]', '[a-c]', '[%d_]', '[]a]', '[^]]', '[a-]', '[%a-z]',\n"
    "  '*', '+', '-', '?', '(', ')', '()', '%1', '%2', '%b()', '%bab', '%f[%w]', '%f[%W]',\n"
    "  '^', '$', '%', '[', ']', '%z', '%.', '%%', '\\0', '1', '_', ' ', '%-' }\n"
    "local chars = { 'a', 'b', 'a', '1', '_', ' ', '(', ')', 'x', '\\0', '.', '-', 'A' }\n"
    "for i = 1, 4000 do\n"
    "  local p, s = {}, {}\n"
    "  for k = 1, math.random(1, 8) do p[k] = tok[math.random(#tok)] end\n"
    "  for k = 1, math.random(0, 14) do s[k] = chars[math.random(#chars)] end\n"
    "  all(table.concat(s), table.concat(p), math.random(-4, 16))\n"
    "end\n"
    "return checked\n";

START_TEST(patterns_as_lua)
{
    lua_State *L = luaL_newstate();

    AN(L);
    /* no policy worker behind it: the budget checks do nothing */
    *(void **)lua_getextraspace(L) = NULL;
    luaL_openlibs(L);
    lua_newtable(L);
    pol__pat_open(L);
    lua_setglobal(L, "bounded");
    lua_getfield(L, LUA_REGISTRYINDEX, LUA_LOADED_TABLE);
    lua_getglobal(L, "bounded");
    lua_setfield(L, -2, "bounded"); /* errors name the functions bounded.find ... */
    lua_pop(L, 1);
    ck_assert_int_eq(luaL_loadbuffer(L, differential, sizeof differential - 1, "=differential"),
                     LUA_OK);
    ck_assert_msg(lua_pcall(L, 0, 1, 0) == LUA_OK, "%s", lua_tostring(L, -1));
    ck_assert_int_gt(lua_tointeger(L, -1), 40000);
    lua_close(L);
}
END_TEST

Suite *
pol_safety_suite(void)
{
    Suite *s = suite_create("pol_safety");
    TCase *tc = tcase_create("safety");
    TCase *pat = tcase_create("patterns");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, framing_fields_read_only);
    tcase_add_test(tc, status_keeps_the_body);
    tcase_add_test(tc, instruction_limit_is_sticky);
    tcase_add_test(tc, deadline);
    tcase_add_test(tc, waiting_is_not_running);
    tcase_add_test(tc, huge_strings);
    tcase_add_test(tc, no_state_between_requests);
    tcase_add_test(tc, constant_answer_checked_at_load);
    suite_add_tcase(s, tc);
    tcase_add_test(pat, patterns_as_lua);
    suite_add_tcase(s, pat);
    return s;
}
