/*
 * pol: the Lua bridge through its public calls on a hand-built request --
 * header semantics, action validation, the re and surogat helpers, the
 * sandbox, the instruction and memory limits, hash keys, req.ctx.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "unit.h"
#include "surogat/defs.h"
#include "surogat/http.h"
#include "surogat/par.h"
#include "surogat/pol.h"
#include "surogat/req.h"
#include "surogat/sb.h"
#include "surogat/stat.h"
#include "surogat/wrk.h"

static struct wrk wrk;
static struct req req;
static struct http_hdr hdrs[64];
static char wsbuf[64 * 1024];
static char path[64];

static void
setup(void)
{
    par_init();
    AZ(stat_init());
    memset(&wrk, 0, sizeof wrk);
    wrk.magic = WRK_MAGIC;
    ws_init(&wrk.ws, wsbuf, sizeof wsbuf);
    path[0] = '\0';
}

static void
teardown(void)
{
    pol_wrk_fini(&wrk);
    pol_fini();
    if (path[0] != '\0')
        unlink(path);
}

/* A GET for url with the fields given as "Name", "value" pairs, NULL-ended. */
static struct req *
mkreq(const char *method, const char *url, ...)
{
    va_list ap;
    const char *n, *v;

    memset(&req, 0, sizeof req);
    req.magic = REQ_MAGIC;
    req.wrk = &wrk;
    http_init(req.http, hdrs, ARRAY_LEN(hdrs));
    req.http->method = (struct txt){ method, strlen(method) };
    req.http->url = (struct txt){ url, strlen(url) };
    req.http->proto = 11;
    va_start(ap, url);
    while ((n = va_arg(ap, const char *)) != NULL) {
        v = va_arg(ap, const char *);
        AZ(http_add(req.http, (struct txt){ n, strlen(n) }, (struct txt){ v, strlen(v) }));
    }
    va_end(ap);
    return (&req);
}

static int
load(const char *src, char *ebuf, size_t elen)
{
    struct sb err;
    FILE *f;
    int fd;

    snprintf(path, sizeof path, "/tmp/test_pol_XXXXXX");
    fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    f = fdopen(fd, "w");
    AN(f);
    fputs(src, f);
    fclose(f);
    sb_init(&err, ebuf, elen);
    return (pol_load(path, &err));
}

static void
load_ok(const char *src)
{
    char ebuf[512];

    ck_assert_msg(load(src, ebuf, sizeof ebuf) == 0, "load: %s", ebuf);
    ck_assert(pol_active());
}

static enum pol_act
recv(struct req *r)
{
    struct pol_synth syn;

    return (pol_recv(r, &syn));
}

static const char *
val(const char *name)
{
    const struct txt *v = http_value(req.http, name);
    static char buf[256];

    if (v == NULL)
        return (NULL);
    snprintf(buf, sizeof buf, "%.*s", (int)v->len, v->b);
    return (buf);
}

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
    ck_assert_int_eq(recv(&req), POL_PASS);
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
        ck_assert_msg(recv(&req) == POL_ERROR, "%s accepted", bad[i]);
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
    ck_assert_int_eq(recv(mkreq("GET", "/bogus", NULL)), POL_ERROR);
    ck_assert_int_eq(recv(mkreq("GET", "/num", NULL)), POL_ERROR);
    ck_assert_int_eq(recv(mkreq("GET", "/lookup", NULL)), POL_HASH);
    ck_assert_int_eq(recv(mkreq("GET", "/pipe", NULL)), POL_PIPE);
    /* nil: builtin.lua decides */
    ck_assert_int_eq(recv(mkreq("GET", "/", NULL)), POL_HASH);
    ck_assert_int_eq(recv(mkreq("POST", "/", NULL)), POL_PASS);
    ck_assert_int_eq(recv(mkreq("PURGE", "/", NULL)), POL_PURGE);
    ck_assert_int_eq(recv(mkreq("GET", "/", "Authorization", "x", NULL)), POL_PASS);
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
    ck_assert_int_eq(recv(mkreq("GET", "/", NULL)), POL_PASS);
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
    ck_assert_int_eq(recv(mkreq("GET", "/", NULL)), POL_PASS);
}
END_TEST

START_TEST(sandbox)
{
    char ebuf[512];

    load_ok("function recv(req)\n"
            "  assert(io == nil and loadfile == nil and dofile == nil and load == nil)\n"
            "  assert(require == nil and package == nil and string.dump == nil)\n"
            "  assert(os.execute == nil and os.remove == nil and os.getenv == nil)\n"
            "  assert(os.time() > 0 and os.clock() >= 0 and os.date('%Y') ~= nil)\n"
            "  assert(string.format and table.concat and math.floor and utf8.char)\n"
            "  return 'pass'\n"
            "end\n");
    ck_assert_int_eq(recv(mkreq("GET", "/", NULL)), POL_PASS);
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
    ck_assert_int_eq(recv(mkreq("GET", "/loop", NULL)), POL_ERROR);
    /* the limit is per call: the next one starts afresh */
    for (int i = 0; i < 20; i++)
        ck_assert_int_eq(recv(mkreq("GET", "/", NULL)), POL_PASS);
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
    ck_assert_int_eq(recv(mkreq("GET", "/mem", NULL)), POL_ERROR);
    ck_assert_int_eq(recv(mkreq("GET", "/", NULL)), POL_PASS);
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
        ck_assert_int_eq(recv(&req), POL_HASH);
        ck_assert_int_eq(pol_hash(&req, &key, &len), 0);
    }
}
END_TEST

START_TEST(stale_object_refused)
{
    load_ok("saved = nil\n"
            "function recv(req)\n"
            "  if saved then return saved.url end\n"
            "  saved = req\n"
            "  return 'pass'\n"
            "end\n");
    ck_assert_int_eq(recv(mkreq("GET", "/", NULL)), POL_PASS);
    ck_assert_int_eq(recv(mkreq("GET", "/", NULL)), POL_ERROR);
}
END_TEST

START_TEST(reload_replaces_states)
{
    char ebuf[512];
    struct sb err;

    load_ok("function recv(req) return 'pass' end\n");
    ck_assert_int_eq(recv(mkreq("GET", "/", NULL)), POL_PASS);
    {
        FILE *f = fopen(path, "w");
        AN(f);
        fputs("function recv(req) return 'purge' end\n", f);
        fclose(f);
    }
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_int_eq(pol_reload(&err), 0);
    ck_assert_int_eq(recv(mkreq("GET", "/", NULL)), POL_PURGE);
    {
        FILE *f = fopen(path, "w");
        AN(f);
        fputs("function recv(req\n", f);
        fclose(f);
    }
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_int_eq(pol_reload(&err), -1);
    ck_assert_int_eq(recv(mkreq("GET", "/", NULL)), POL_PURGE);
}
END_TEST

Suite *
pol_suite(void)
{
    Suite *s = suite_create("pol");
    TCase *tc = tcase_create("bridge");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, headers);
    tcase_add_test(tc, header_injection_refused);
    tcase_add_test(tc, actions);
    tcase_add_test(tc, re_helpers);
    tcase_add_test(tc, surogat_helpers);
    tcase_add_test(tc, sandbox);
    tcase_add_test(tc, compile_error_file_line);
    tcase_add_test(tc, instruction_limit);
    tcase_add_test(tc, memory_limit);
    tcase_add_test(tc, hash_keys);
    tcase_add_test(tc, ctx_per_request);
    tcase_add_test(tc, stale_object_refused);
    tcase_add_test(tc, reload_replaces_states);
    suite_add_tcase(s, tc);
    return s;
}
