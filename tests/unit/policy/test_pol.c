/*
 * pol: the Lua bridge through its public calls on a hand-built request --
 * header semantics, action validation, the re and surogat helpers, the
 * sandbox, the instruction and memory limits, hash keys, req.ctx.
 */
#include "pol_test.h"
#include "surogat/sess.h"

START_TEST(headers)
{
    load_ok("function recv(req)\n"
            "  assert(req.http.host == 'example.com')\n"
            "  assert(req.http['HOST'] == 'example.com' and req.http:get('hOsT') == 'example.com')\n"
            "  assert(req.http.x_missing == nil)\n"
            "  req.http.x_a = '1'\n"
            "  req.http:append('X-A', '2')\n"
            "  req.http.cookie = nil\n"
            "  req.http:set('X-B', 'b')\n"
            "  assert(req.http:unset('X-Nothing') == 0)\n"
            "  local n = 0\n"
            "  req.http:each(function(k, v) n = n + 1 end)\n"
            "  req.http['X-Count'] = tostring(n)\n"
            "  req.url = '/new'\n"
            "  assert(req.method == 'GET' and req.proto == 'HTTP/1.1')\n"
            "  return 'pass'\n"
            "end\n");
    mkreq("GET", "/", "Host", "example.com", "Cookie", "a=1", "cookie", "b=2", NULL);
    ck_assert_int_eq(do_recv(&req), POL_PASS);
    ck_assert_uint_eq(http_count(req.http, "X-A"), 2);
    ck_assert_ptr_null(http_find(req.http, "Cookie"));
    ck_assert_str_eq(val("X-B"), "b");
    ck_assert_str_eq(val("X-Count"), "4"); /* Host, X-A twice, X-B */
    ck_assert_int_eq((int)req.http->url.len, 4);
    ck_assert(memcmp(req.http->url.b, "/new", 4) == 0);
}
END_TEST

START_TEST(header_injection_refused)
{
    static const char *const bad[] = {
        "req.http.x = 'a\\r\\nB: c'", "req.http['Bad Name'] = 'v'", "req.http['X:Y'] = 'v'",
        "req.url = '/a b'", "req.http.x = {}",
    };
    char src[256];

    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        snprintf(src, sizeof src, "function recv(req) %s end\n", bad[i]);
        if (i > 0)
            unlink(path);
        load_ok(src);
        mkreq("GET", "/", NULL);
        ck_assert_msg(do_recv(&req) == POL_ERROR, "%s accepted", bad[i]);
        ck_assert_uint_eq(req.http->nhdr, 0);
    }
}
END_TEST

START_TEST(actions)
{
    struct pol_synth syn;

    load_ok("function recv(req)\n"
            "  if req.url == '/bogus' then return 'bogus' end\n"
            "  if req.url == '/num' then return 42 end\n"
            "  if req.url == '/lookup' then return 'lookup' end\n"
            "  if req.url == '/pipe' then return 'pipe' end\n"
            "  if req.url == '/synth' then return surogat.synth(404, 'not here') end\n"
            "end\n");
    ck_assert_int_eq(do_recv(mkreq("GET", "/bogus", NULL)), POL_ERROR);
    ck_assert_int_eq(do_recv(mkreq("GET", "/num", NULL)), POL_ERROR);
    ck_assert_int_eq(do_recv(mkreq("GET", "/lookup", NULL)), POL_HASH);
    ck_assert_int_eq(do_recv(mkreq("GET", "/pipe", NULL)), POL_PIPE);
    /* nil: builtin.lua decides */
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_HASH);
    ck_assert_int_eq(do_recv(mkreq("POST", "/", NULL)), POL_PASS);
    ck_assert_int_eq(do_recv(mkreq("PURGE", "/", NULL)), POL_PURGE);
    ck_assert_int_eq(do_recv(mkreq("GET", "/", "Authorization", "x", NULL)), POL_PASS);
    ck_assert_int_eq(pol_recv(mkreq("GET", "/synth", NULL), &syn), POL_SYNTH);
    ck_assert_uint_eq(syn.status, 404);
    ck_assert_str_eq(syn.reason, "not here");
    ck_assert_uint_ge(stat_get(STAT_policy_error), 2);
}
END_TEST

START_TEST(re_helpers)
{
    load_ok("function recv(req)\n"
            "  assert(re.match('abc', '^a'))\n"
            "  assert(not re.match('abc', '^b'))\n"
            "  local m, k, v = re.find('x foo=bar y', '(\\\\w+)=(\\\\w+)')\n"
            "  assert(m == 'foo=bar' and k == 'foo' and v == 'bar')\n"
            "  assert(re.find('abc', 'z') == nil)\n"
            "  local _, opt = re.find('a', '(b)?a')\n"
            "  assert(opt == nil)\n"
            "  assert(re.sub('aaa', 'a', 'b') == 'baa')\n"
            "  local s, n = re.gsub('aaa', 'a', 'bb')\n"
            "  assert(s == 'bbbbbb' and n == 3)\n"
            "  assert(re.gsub('/p?utm=1&x=2', '[?&]utm=[^&]*', '') == '/p&x=2')\n"
            "  assert(re.sub('k=v', '(\\\\w)=(\\\\w)', '$2=$1') == 'v=k')\n"
            "  local long = string.rep('ab', 5000)\n"
            "  assert(#re.gsub(long, 'a', 'xyz') == 20000)\n"
            "  assert(not pcall(re.match, 'a', '('))\n"
            "  for i = 1, 1500 do assert(re.match('x' .. i, 'x' .. i)) end\n"
            "  return 'pass'\n"
            "end\n");
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_PASS);
}
END_TEST

START_TEST(surogat_helpers)
{
    load_ok("local trusted = surogat.acl{'10.0.0.0/8', '!10.1.0.0/16'}\n"
            "local local_ = surogat.acl('127.0.0.1, ::1')\n"
            "function recv(req)\n"
            "  assert(trusted:match('10.2.3.4') and not trusted:match('10.1.2.3'))\n"
            "  assert(local_:match('::1') and not local_:match('junk'))\n"
            "  assert(not pcall(surogat.acl, {'300.1.1.1'}))\n"
            "  assert(math.abs(surogat.now() - os.time()) < 5)\n"
            "  assert(not pcall(surogat.hash_data, 'x'))\n"
            "  surogat.log('from', 'the', 'policy', 1)\n"
            "  return 'pass'\n"
            "end\n");
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_PASS);
}
END_TEST

START_TEST(duration_and_date)
{
    load_ok("local d = surogat.duration\n"
            "function recv(req)\n"
            "  assert(d('1h30m') == 5400 and math.type(d('1h30m')) == 'integer')\n"
            "  assert(d('90') == 90 and d('2.5') == 2.5 and d(42) == 42)\n"
            "  assert(d('250ms') == 0.25 and d('1m30s500ms') == 90.5)\n"
            "  assert(d('1d') == 86400 and d('2w') == 1209600 and d('1.5h') == 5400)\n"
            "  assert(d('0s') == 0)\n"
            "  for _, bad in ipairs({'', 'h', '1x', '1y', '1h30', '1 h', '-1s', 'abc', '1hh',\n"
            "                        '1h ', '..1s', '99999999999w'}) do\n"
            "    local v, err = d(bad)\n"
            "    assert(v == nil and err:find('bad duration', 1, true), bad)\n"
            "  end\n"
            "  assert(not pcall(d, {}))\n"
            "  local p = surogat.parse_time\n"
            "  assert(p('Sun, 06 Nov 1994 08:49:37 GMT') == 784111777)\n"
            "  assert(p('Sunday, 06-Nov-94 08:49:37 GMT') == 784111777)\n"
            "  assert(p('Sun Nov  6 08:49:37 1994') == 784111777)\n"
            "  local v, err = p('yesterday')\n"
            "  assert(v == nil and err:find('HTTP-date', 1, true))\n"
            "  assert(p('Sun, 30 Feb 1994 08:49:37 GMT') == nil)\n"
            "  return 'pass'\n"
            "end\n");
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_PASS);
}
END_TEST

START_TEST(url_helpers)
{
    load_ok("local s = surogat\n"
            "function recv(req)\n"
            "  assert(s.url_path('/a/b?x=1#f') == '/a/b' and s.url_path('/a') == '/a')\n"
            "  assert(s.url_path('/a#f?x') == '/a' and s.url_path('') == '')\n"
            "  assert(s.url_query('/a') == nil and s.url_query('/a?') == '')\n"
            "  assert(s.url_query('/a?x=1&y#f') == 'x=1&y' and s.url_query('/a#f?x') == nil)\n"
            "  local g = s.query_get\n"
            "  assert(g('/a?x=1&y=2', 'y') == '2' and g('/a?x=1', 'z') == nil)\n"
            "  assert(g('/a', 'x') == nil and g('/a?', 'x') == nil)\n"
            "  assert(g('/a?x=1&x=2', 'x') == '1' and g('/a?x&y=', 'x') == '')\n"
            "  assert(g('/a?y=', 'y') == '' and g('/a?x=1=2', 'x') == '1=2')\n"
            "  assert(g('/a?&&x=3&&', 'x') == '3' and g('/a?x=1#y=2', 'y') == nil)\n"
            "  assert(g('/a?a%20b=1', 'a%20b') == '1' and g('/a?a%20b=1', 'a b') == nil)\n"
            "  assert(g('/a?xy=1', 'x') == nil)\n"
            "  local r = s.query_remove\n"
            "  assert(r('/a?x=1&utm_a=2&y=3&utm_b', 'utm_*') == '/a?x=1&y=3')\n"
            "  assert(r('/a?x=1&y=2', 'x', 'y') == '/a' and r('/a?x=1&y=2', '*') == '/a')\n"
            "  assert(r('/a?x=1&x=2&xx=3', 'x') == '/a?xx=3')\n"
            "  assert(r('/a', 'x') == '/a' and r('/a?', 'x') == '/a' and r('/a?x') == '/a?x')\n"
            "  assert(r('/a?&&x=1&&y=2&', 'q') == '/a?x=1&y=2')\n"
            "  assert(r('/a?x=1&fbclid=9#top', 'fbclid') == '/a?x=1#top')\n"
            "  assert(r('/a#f?x=1', 'x') == '/a#f?x=1')\n"
            "  assert(not pcall(r, '/a?x', {}))\n"
            "  local q = s.query_sort\n"
            "  assert(q('/a?b=1&a=2&c=3') == '/a?a=2&b=1&c=3')\n"
            "  assert(q('/a?b=2&a=1&b=1&a=0') == '/a?a=1&a=0&b=2&b=1')\n"
            "  assert(q('/a?b&a=&ab=1&a') == '/a?a=&a&ab=1&b')\n"
            "  assert(q('/a') == '/a' and q('/a?') == '/a' and q('/a?&&b&&a&') == '/a?a&b')\n"
            "  assert(q('/a?z=1&y=2#frag') == '/a?y=2&z=1#frag')\n"
            "  assert(q('/a?B=1&a=1&_=1') == '/a?B=1&_=1&a=1')\n"
            "  local many = {}\n"
            "  for i = 300, 1, -1 do many[#many + 1] = 'p' .. string.format('%03d', i) end\n"
            "  local sorted = q('/m?' .. table.concat(many, '&'))\n"
            "  table.sort(many)\n"
            "  assert(sorted == '/m?' .. table.concat(many, '&'))\n"
            "  return 'pass'\n"
            "end\n");
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_PASS);
}
END_TEST

START_TEST(sandbox)
{
    char ebuf[512];

    load_ok("function recv(req)\n"
            "  assert(io == nil and loadfile == nil and dofile == nil and load == nil)\n"
            "  assert(package == nil and string.dump == nil)\n"
            "  -- require loads only what policy_modules lists: nothing by default\n"
            "  assert(not pcall(require, 'os'))\n"
            "  assert(os.execute == nil and os.remove == nil and os.getenv == nil)\n"
            "  assert(os.time() > 0 and os.clock() >= 0 and os.date('%Y') ~= nil)\n"
            "  assert(string.format and table.concat and math.floor and utf8.char)\n"
            "  return 'pass'\n"
            "end\n");
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_PASS);
    unlink(path);
    /* The top level runs in the sandbox too, when the script is loaded. */
    ck_assert_int_eq(load("\nio.open('/etc/passwd')\n", ebuf, sizeof ebuf), -1);
    ck_assert_msg(strstr(ebuf, ":2: attempt to index a nil value (global 'io')") != NULL, "%s",
                  ebuf);
}
END_TEST

START_TEST(compile_error_file_line)
{
    char ebuf[512];

    ck_assert_int_eq(load("function recv(req)\n  return 'pass'\nend end\n", ebuf, sizeof ebuf),
                     -1);
    ck_assert_msg(strstr(ebuf, path) != NULL && strstr(ebuf, ":3:") != NULL, "%s", ebuf);
    ck_assert(!pol_active());
}
END_TEST

START_TEST(instruction_limit)
{
    par.policy_max_instructions = 10000;
    load_ok("function recv(req)\n"
            "  if req.url == '/loop' then while true do end end\n"
            "  local n = 0\n"
            "  for i = 1, 100 do n = n + i end\n"
            "  return 'pass'\n"
            "end\n");
    ck_assert_int_eq(do_recv(mkreq("GET", "/loop", NULL)), POL_ERROR);
    /* the limit is per call: the next one starts afresh */
    for (int i = 0; i < 20; i++)
        ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_PASS);
    /* and the top level of the script is limited too */
    unlink(path);
    {
        char ebuf[512];
        ck_assert_int_eq(load("while true do end\n", ebuf, sizeof ebuf), -1);
        ck_assert_msg(strstr(ebuf, ":1: policy_max_instructions exceeded") != NULL, "%s", ebuf);
    }
}
END_TEST

START_TEST(memory_limit)
{
    par.policy_max_memory = 1024 * 1024;
    load_ok("function recv(req)\n"
            "  if req.url == '/mem' then\n"
            "    local t = {}\n"
            "    for i = 1, 1e7 do t[i] = string.rep('x', 64) .. i end\n"
            "  end\n"
            "  return 'pass'\n"
            "end\n");
    ck_assert_int_eq(do_recv(mkreq("GET", "/mem", NULL)), POL_ERROR);
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_PASS);
}
END_TEST

START_TEST(hash_keys)
{
    char *key;
    size_t len;

    load_ok("function hash(req)\n"
            "  if req.url == '/own' then surogat.hash_data('a', 'b'); return 'lookup' end\n"
            "  if req.url == '/more' then surogat.hash_data('v1') end\n"
            "  if req.url == '/bad' then return 'hash' end\n"
            "end\n");
    ck_assert_int_eq(pol_hash(mkreq("GET", "/own", "Host", "H", NULL), &key, &len), 0);
    ck_assert_uint_eq(len, 3);
    ck_assert(memcmp(key, "a\0b", 3) == 0);
    ck_assert_int_eq(pol_hash(mkreq("GET", "/more", "Host", "H", NULL), &key, &len), 0);
    ck_assert_uint_eq(len, 10);
    ck_assert(memcmp(key, "h\0/more\0v1", 10) == 0);
    ck_assert_int_eq(pol_hash(mkreq("GET", "/x", "Host", "Ex.COM", NULL), &key, &len), 0);
    ck_assert_uint_eq(len, 9);
    ck_assert(memcmp(key, "ex.com\0/x", 9) == 0);
    ck_assert_int_eq(pol_hash(mkreq("GET", "/bad", NULL), &key, &len), -1);
}
END_TEST

START_TEST(ctx_per_request)
{
    char *key;
    size_t len;

    load_ok("function recv(req)\n"
            "  assert(req.ctx.n == nil)\n"
            "  req.ctx.n = 1\n"
            "end\n"
            "function hash(req)\n"
            "  assert(req.ctx.n == 1)\n"
            "  req.ctx.n = 2\n"
            "end\n");
    for (int i = 0; i < 3; i++) {
        mkreq("GET", "/", NULL);
        ck_assert_int_eq(do_recv(&req), POL_HASH);
        ck_assert_int_eq(pol_hash(&req, &key, &len), 0);
    }
}
END_TEST

START_TEST(stale_object_refused)
{
    /* A top-level local outlives the request (a global would not). */
    load_ok("local saved\n"
            "function recv(req)\n"
            "  if saved then return saved.url end\n"
            "  saved = req\n"
            "  return 'pass'\n"
            "end\n");
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_PASS);
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_ERROR);
}
END_TEST

START_TEST(reload_replaces_states)
{
    char ebuf[512];
    struct sb err;

    load_ok("function recv(req) return 'pass' end\n");
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_PASS);
    {
        FILE *f = fopen(path, "w");
        AN(f);
        fputs("function recv(req) return 'purge' end\n", f);
        fclose(f);
    }
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_int_eq(pol_reload(&err), 0);
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_PURGE);
    {
        FILE *f = fopen(path, "w");
        AN(f);
        fputs("function recv(req\n", f);
        fclose(f);
    }
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_int_eq(pol_reload(&err), -1);
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_PURGE);
}
END_TEST

/* A stored response head for hit(req, obj): 200 with X-A: b, and its timing. */
static struct http_hdr ohdrs[8];
static struct http ohttp;

static struct pol_obj *
mkobj(struct pol_obj *o)
{
    memset(o, 0, sizeof *o);
    http_init(&ohttp, ohdrs, ARRAY_LEN(ohdrs));
    ohttp.proto = 11;
    ohttp.status = 200;
    ohttp.reason = (struct txt){ "OK", 2 };
    AZ(http_add(&ohttp, (struct txt){ "X-A", 3 }, (struct txt){ "b", 1 }));
    o->resp = &ohttp;
    o->ttl = 50;
    o->age = 10;
    o->grace = 5;
    return (o);
}

START_TEST(hit_miss_pass_actions)
{
    struct pol_synth syn;
    struct pol_obj obj;
    uint64_t e0;

    /* Without the hooks: builtin.lua's defaults, and no call at all. */
    load_ok("function recv(req) end\n");
    ck_assert(!pol_has_hit() && !pol_has_log());
    ck_assert_int_eq(pol_hit(mkreq("GET", "/", NULL), mkobj(&obj), &syn), POL_DELIVER);
    ck_assert_int_eq(pol_miss(mkreq("GET", "/", NULL), &syn), POL_FETCH);
    ck_assert_int_eq(pol_pass(mkreq("GET", "/", NULL), &syn), POL_FETCH);

    load_ok("function hit(req, obj)\n"
            "  if req.url == '/miss' then return 'miss' end\n"
            "  if req.url == '/pass' then return 'pass' end\n"
            "  if req.url == '/fetch' then return 'fetch' end\n"
            "  if req.url == '/plain' then return 'synth' end\n"
            "  if req.url == '/read' then\n"
            "    return surogat.synth(obj.status + 1, string.format('%s %s %d %d %d %s',\n"
            "      obj.http.x_a, obj.http:get('X-A'), obj.ttl, obj.age, obj.grace, obj.reason))\n"
            "  end\n"
            "  if req.url == '/ro-status' then obj.status = 500 end\n"
            "  if req.url == '/ro-http' then obj.http.x_a = 'c' end\n"
            "  if req.url == '/ro-unset' then obj.http:unset('X-A') end\n"
            "  if req.url == '/ttl' then obj.ttl = 1 end\n"
            "  req.http.x_hit = 'yes'\n"
            "end\n"
            "function miss(req)\n"
            "  if req.url == '/pass' then return 'pass' end\n"
            "  if req.url == '/synth' then return surogat.synth(404, 'none') end\n"
            "  if req.url == '/deliver' then return 'deliver' end\n"
            "end\n"
            "function pass(req)\n"
            "  if req.url == '/synth' then return surogat.synth(403, 'no') end\n"
            "  if req.url == '/pass' then return 'pass' end\n"
            "  return 'fetch'\n"
            "end\n");
    ck_assert(pol_has_hit() && !pol_has_log());
    e0 = stat_get(STAT_policy_error);
    ck_assert_int_eq(pol_hit(mkreq("GET", "/miss", NULL), mkobj(&obj), &syn), POL_MISS);
    ck_assert_int_eq(pol_hit(mkreq("GET", "/pass", NULL), mkobj(&obj), &syn), POL_PASS);
    /* nil: builtin.lua delivers; req stays writable in hit */
    ck_assert_int_eq(pol_hit(mkreq("GET", "/", NULL), mkobj(&obj), &syn), POL_DELIVER);
    ck_assert_str_eq(val("X-Hit"), "yes");
    ck_assert_int_eq(pol_hit(mkreq("GET", "/plain", NULL), mkobj(&obj), &syn), POL_SYNTH);
    ck_assert_uint_eq(syn.status, 503);
    ck_assert_str_eq(syn.reason, "hit returned \"synth\"");
    ck_assert_int_eq(pol_hit(mkreq("GET", "/read", NULL), mkobj(&obj), &syn), POL_SYNTH);
    ck_assert_uint_eq(syn.status, 201);
    ck_assert_str_eq(syn.reason, "b b 50 10 5 OK");
    ck_assert_int_eq(stat_get(STAT_policy_error), e0);
    /* obj is read-only; an action a hook may not return is an error */
    ck_assert_int_eq(pol_hit(mkreq("GET", "/ro-status", NULL), mkobj(&obj), &syn), POL_ERROR);
    ck_assert_int_eq(pol_hit(mkreq("GET", "/ro-http", NULL), mkobj(&obj), &syn), POL_ERROR);
    ck_assert_int_eq(pol_hit(mkreq("GET", "/ro-unset", NULL), mkobj(&obj), &syn), POL_ERROR);
    ck_assert_int_eq(pol_hit(mkreq("GET", "/ttl", NULL), mkobj(&obj), &syn), POL_ERROR);
    ck_assert_int_eq(pol_hit(mkreq("GET", "/fetch", NULL), mkobj(&obj), &syn), POL_ERROR);
    ck_assert_str_eq(http_value(&ohttp, "X-A")->b, "b");
    ck_assert_uint_eq(ohttp.status, 200);

    ck_assert_int_eq(pol_miss(mkreq("GET", "/", NULL), &syn), POL_FETCH);
    ck_assert_int_eq(pol_miss(mkreq("GET", "/pass", NULL), &syn), POL_PASS);
    ck_assert_int_eq(pol_miss(mkreq("GET", "/synth", NULL), &syn), POL_SYNTH);
    ck_assert_uint_eq(syn.status, 404);
    ck_assert_str_eq(syn.reason, "none");
    ck_assert_int_eq(pol_miss(mkreq("GET", "/deliver", NULL), &syn), POL_ERROR);

    ck_assert_int_eq(pol_pass(mkreq("GET", "/", NULL), &syn), POL_FETCH);
    ck_assert_int_eq(pol_pass(mkreq("GET", "/synth", NULL), &syn), POL_SYNTH);
    ck_assert_uint_eq(syn.status, 403);
    ck_assert_int_eq(pol_pass(mkreq("GET", "/pass", NULL), &syn), POL_ERROR);
    ck_assert_uint_eq(stat_get(STAT_policy_error), e0 + 7);
}
END_TEST

START_TEST(client_object)
{
    static struct sess sp;

    load_ok("function recv(req)\n"
            "  req.http.x_ip = tostring(client.ip)\n"
            "  req.http.x_port = tostring(client.port)\n"
            "  req.http.x_str = tostring(client)\n"
            "  if req.url == '/set' then client.ip = '10.0.0.1' end\n"
            "  return 'pass'\n"
            "end\n"
            "function pass(req)\n"
            "  if client.ip ~= '192.0.2.7' then return surogat.synth(403) end\n"
            "end\n");
    memset(&sp, 0, sizeof sp);
    sp.magic = SESS_MAGIC;
    snprintf(sp.client_ip, sizeof sp.client_ip, "%s", "192.0.2.7");
    snprintf(sp.client_port, sizeof sp.client_port, "%s", "40123");
    mkreq("GET", "/", NULL);
    req.sp = &sp;
    ck_assert_int_eq(do_recv(&req), POL_PASS);
    ck_assert_str_eq(val("X-Ip"), "192.0.2.7");
    ck_assert_str_eq(val("X-Port"), "40123");
    ck_assert_str_eq(val("X-Str"), "192.0.2.7:40123");
    ck_assert_int_eq(pol_pass(&req, &(struct pol_synth){ 0 }), POL_FETCH);
    /* read-only */
    mkreq("GET", "/set", NULL);
    req.sp = &sp;
    ck_assert_int_eq(do_recv(&req), POL_ERROR);
    /* the next request's session, not a cached copy */
    snprintf(sp.client_ip, sizeof sp.client_ip, "%s", "::1");
    mkreq("GET", "/", NULL);
    req.sp = &sp;
    ck_assert_int_eq(do_recv(&req), POL_PASS);
    ck_assert_str_eq(val("X-Ip"), "::1");
    ck_assert_int_eq(pol_pass(&req, &(struct pol_synth){ 0 }), POL_SYNTH);
    /* without a session: nil */
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_PASS);
    ck_assert_str_eq(val("X-Ip"), "nil");
}
END_TEST

START_TEST(log_hook)
{
    uint64_t e0;

    load_ok("local seen = 'none'\n"
            "function recv(req)\n"
            "  req.http.x_seen = seen\n"
            "  req.ctx.t = 'ctx'\n"
            "end\n"
            "function log(req, resp)\n"
            "  seen = string.format('%s %d %s %s %s', req.url, resp.status, resp.reason,\n"
            "                       req.ctx.t, tostring(resp.http.content_length))\n"
            "  if req.url == '/err' then error('boom') end\n"
            "  if req.url == '/ro' then req.url = '/x' end\n"
            "  if req.url == '/synth' then return surogat.synth(500) end\n"
            "  if req.url == '/value' then return 'anything' end\n"
            "end\n");
    ck_assert(pol_has_log() && !pol_has_hit());
    e0 = stat_get(STAT_policy_error);
    mkreq("GET", "/a", NULL);
    ck_assert_int_eq(do_recv(&req), POL_HASH);
    req.status = 404;
    pol_log(&req);
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_HASH);
    ck_assert_str_eq(val("X-Seen"), "/a 404 Not Found ctx nil");
    mkreq("GET", "/value", NULL);
    req.status = 200;
    pol_log(&req);
    ck_assert_int_eq(stat_get(STAT_policy_error), e0);
    static const char *const bad[] = { "/err", "/ro", "/synth" };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        mkreq("GET", bad[i], NULL);
        req.status = 200;
        pol_log(&req);
    }
    ck_assert_uint_eq(stat_get(STAT_policy_error), e0 + 3);
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_HASH);
    ck_assert_str_eq(val("X-Seen"), "/synth 200 OK nil nil");
}
END_TEST

START_TEST(empty_hooks_not_called)
{
    struct pol_wrk *pw;

    load_ok("function recv(req) end\n"
            "function hash(req)\n"
            "end\n"
            "function log(req, resp) end\n"
            "function miss(...) end\n"
            "function hit(req, obj) return nil end\n"
            "function pass(req) local x end\n");
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_HASH);
    pw = wrk.pol;
    AN(pw);
    /* Empty functions are dropped, on the script's side and builtin.lua's ... */
    ck_assert_int_eq(pw->ref_user[POL_H_RECV], LUA_NOREF);
    ck_assert_int_eq(pw->ref_user[POL_H_HASH], LUA_NOREF);
    ck_assert_int_eq(pw->ref_builtin[POL_H_HASH], LUA_NOREF);
    ck_assert_int_eq(pw->ref_user[POL_H_LOG], LUA_NOREF);
    ck_assert_int_eq(pw->ref_builtin[POL_H_LOG], LUA_NOREF);
    ck_assert_int_eq(pw->ref_user[POL_H_MISS], LUA_NOREF);
    /* ... anything with code is kept, and the hooks still count as taken */
    ck_assert_int_ne(pw->ref_builtin[POL_H_RECV], LUA_NOREF);
    ck_assert_int_ne(pw->ref_user[POL_H_HIT], LUA_NOREF);
    ck_assert_int_ne(pw->ref_user[POL_H_PASS], LUA_NOREF);
    ck_assert(pw->defined & (1u << POL_H_HASH));
    ck_assert(req.hooks & (1u << POL_H_RECV));
    /* An empty recv is no recv: builtin.lua's decides. */
    ck_assert_int_eq(do_recv(mkreq("GET", "/", "Cookie", "a=b", NULL)), POL_PASS);
    ck_assert_int_eq(do_recv(mkreq("POST", "/", NULL)), POL_PASS);
}
END_TEST

START_TEST(constant_answers)
{
    struct pol_wrk *pw;
    uint64_t e0;

    load_ok("function recv(req) return \"pass\" end\n"
            "function miss(req)\n  return 'fetch'\nend\n"
            "function pass(req) return req.url end\n"
            "function synth(req, resp) return \"deliver\", 1 end\n");
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_PASS);
    pw = wrk.pol;
    AN(pw);
    ck_assert_str_eq(pw->konst_user[POL_H_RECV], "pass");
    ck_assert_str_eq(pw->konst_user[POL_H_MISS], "fetch");
    ck_assert_ptr_null(pw->konst_user[POL_H_PASS]);  /* not a constant */
    ck_assert_ptr_null(pw->konst_user[POL_H_SYNTH]); /* returns two values */
    ck_assert_str_eq(pw->konst_builtin[POL_H_HIT], "deliver");
    ck_assert_ptr_null(pw->konst_builtin[POL_H_RECV]);
    ck_assert(req.hooks & (1u << POL_H_RECV));

    /* A constant that is no action is refused at load, at the line of its return. */
    {
        char ebuf[512];

        ck_assert_int_eq(load("function recv(req)\n  return 'bogus'\nend\n", ebuf, sizeof ebuf),
                         -1);
        ck_assert_msg(strstr(ebuf, ":2: recv returns \"bogus\", not one of \"hash\"") != NULL,
                      "%s", ebuf);
    }
    /* A word computed at run time still fails the way a call does. */
    load_ok("function recv(req) return ('bog' .. 'us') end\n");
    e0 = stat_get(STAT_policy_error);
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_ERROR);
    ck_assert_uint_eq(stat_get(STAT_policy_error), e0 + 1);
}
END_TEST

Suite *
pol_suite(void)
{
    Suite *s = suite_create("pol");
    TCase *tc = tcase_create("bridge");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, headers);
    tcase_add_test(tc, empty_hooks_not_called);
    tcase_add_test(tc, constant_answers);
    tcase_add_test(tc, header_injection_refused);
    tcase_add_test(tc, actions);
    tcase_add_test(tc, re_helpers);
    tcase_add_test(tc, surogat_helpers);
    tcase_add_test(tc, duration_and_date);
    tcase_add_test(tc, url_helpers);
    tcase_add_test(tc, sandbox);
    tcase_add_test(tc, compile_error_file_line);
    tcase_add_test(tc, instruction_limit);
    tcase_add_test(tc, memory_limit);
    tcase_add_test(tc, hash_keys);
    tcase_add_test(tc, ctx_per_request);
    tcase_add_test(tc, stale_object_refused);
    tcase_add_test(tc, reload_replaces_states);
    tcase_add_test(tc, hit_miss_pass_actions);
    tcase_add_test(tc, client_object);
    tcase_add_test(tc, log_hook);
    suite_add_tcase(s, tc);
    return s;
}
