/*
 * pol_tool, pol_cookie, pol_shared: the toolbox of the `surogat` table
 * through pol.h, on hand-built requests -- digests and HMACs against the
 * RFC vectors, the encodings, cookies, random, healthy, req.xid, obj.hits
 * in hit and deliver, bereq.uncacheable, shared dictionaries (limits,
 * expiry, eviction, a reload keeping them, workers sharing them) and the
 * rate limiter.
 *
 * Most checks are Lua assertions in a recv hook that returns "pass" when
 * they all hold: a failing one fails the hook (POL_ERROR) and its message,
 * with the line, is in the log.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "unit.h"
#include "surogat/be.h"
#include "surogat/defs.h"
#include "surogat/http.h"
#include "surogat/par.h"
#include "surogat/pol.h"
#include "surogat/req.h"
#include "surogat/sb.h"
#include "surogat/stat.h"
#include "surogat/wrk.h"

/* eq(got, want, what): an error naming both when they differ. */
#define LUA_EQ                                                                                     \
    "local function eq(got, want, what)\n"                                                         \
    "  if got ~= want then\n"                                                                      \
    "    error(string.format('%s: got %q, want %q', what or '?', tostring(got), tostring(want)), " \
    "2)\n"                                                                                         \
    "  end\n"                                                                                      \
    "end\n"

static struct wrk wrk;
static struct req req;
static struct http_hdr hdrs[32];
static char wsbuf[64 * 1024];
static char paths[4][64];
static unsigned npaths;

static void
setup(void)
{
    char b[256];
    struct sb e;

    par_init();
    AZ(stat_init());
    AZ(be_init());
    sb_init(&e, b, sizeof b);
    ck_assert_msg(be_add("default", "127.0.0.1:9", &e) == 0, "%s", b);
    memset(&wrk, 0, sizeof wrk);
    wrk.magic = WRK_MAGIC;
    ws_init(&wrk.ws, wsbuf, sizeof wsbuf);
    npaths = 0;
}

static void
teardown(void)
{
    pol_wrk_fini(&wrk);
    pol_fini();
    be_fini();
    for (unsigned i = 0; i < npaths; i++)
        unlink(paths[i]);
}

static void
mkreq_on(struct req *r, struct wrk *w, struct http_hdr *h, unsigned nh, const char *method,
         const char *url)
{
    memset(r, 0, sizeof *r);
    r->magic = REQ_MAGIC;
    r->wrk = w;
    r->ws = &w->ws;
    http_init(r->http, h, nh);
    r->http->method = (struct txt){ method, strlen(method) };
    r->http->url = (struct txt){ url, strlen(url) };
    r->http->proto = 11;
}

static struct req *
mkreq(const char *method, const char *url, ...)
{
    va_list ap;
    const char *n, *v;

    mkreq_on(&req, &wrk, hdrs, ARRAY_LEN(hdrs), method, url);
    va_start(ap, url);
    while ((n = va_arg(ap, const char *)) != NULL) {
        v = va_arg(ap, const char *);
        AZ(http_add(req.http, (struct txt){ n, strlen(n) }, (struct txt){ v, strlen(v) }));
    }
    va_end(ap);
    return (&req);
}

static const char *
script(const char *src)
{
    char *p;
    FILE *f;
    int fd;

    ck_assert_uint_lt(npaths, ARRAY_LEN(paths));
    p = paths[npaths++];
    snprintf(p, sizeof paths[0], "/tmp/test_pol_tool_XXXXXX");
    fd = mkstemp(p);
    ck_assert_int_ge(fd, 0);
    f = fdopen(fd, "w");
    AN(f);
    fputs(src, f);
    fclose(f);
    return (p);
}

/* pol_load() of src: 0, or -1 with the message in ebuf. */
static int
load(const char *src, char *ebuf, size_t elen)
{
    struct sb err;

    sb_init(&err, ebuf, elen);
    return (pol_load(script(src), &err));
}

static void
load_ok(const char *src)
{
    char ebuf[512];

    ck_assert_msg(load(src, ebuf, sizeof ebuf) == 0, "load: %s", ebuf);
}

/* A script refused at load, its message containing want. */
static void
load_fails(const char *src, const char *want)
{
    char ebuf[512];

    ck_assert_msg(load(src, ebuf, sizeof ebuf) != 0, "loaded: %s", src);
    ck_assert_msg(strstr(ebuf, want) != NULL, "message \"%s\" lacks \"%s\"", ebuf, want);
    npaths--;
    unlink(paths[npaths]);
}

static enum pol_act
do_recv(struct req *r)
{
    struct pol_synth syn;

    return (pol_recv(r, &syn));
}

/* Run the checks of a recv hook that returns "pass" when they hold. */
static void
checks(const char *body)
{
    char src[16384];

    ck_assert_int_lt(snprintf(src, sizeof src, "%sfunction recv(req)\n%s\nreturn 'pass'\nend\n",
                              LUA_EQ, body),
                     (int)sizeof src);
    load_ok(src);
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_PASS);
}

static const char *
val(const struct http *hp, const char *name)
{
    const struct txt *v = http_value(hp, name);
    static char buf[512];

    if (v == NULL)
        return (NULL);
    snprintf(buf, sizeof buf, "%.*s", (int)v->len, v->b);
    return (buf);
}

/* ---- digests and encodings ---- */

START_TEST(digests)
{
    checks(
        "eq(surogat.hash('md5', ''), 'd41d8cd98f00b204e9800998ecf8427e', 'md5')\n"
        "eq(surogat.hash('sha1', 'abc'), 'a9993e364706816aba3e25717850c26c9cd0d89d', 'sha1')\n"
        "eq(surogat.hash('sha256', 'abc'),\n"
        "   'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad', 'sha256')\n"
        "eq(surogat.hash('SHA256', 'abc'), surogat.hash('sha256', 'abc'), 'any case')\n"
        "eq(surogat.hash('sha384', 'abc'), 'cb00753f45a35e8bb5a03d699ac65007272c32ab0eded163"
        "1a8b605a43ff5bed8086072ba1e7cc2358baeca134c825a7', 'sha384')\n"
        "eq(surogat.hash('sha512', 'abc'), 'ddaf35a193617abacc417349ae20413112e6fa4e89a97ea20a9e"
        "eee64b55d39a2192992a274fc1a836ba3c23a3feebbd454d4423643ce80e2a9ac94fa54ca49f', 'sha512')\n"
        "eq(surogat.hash('sha3-256', 'abc'),\n"
        "   '3a985da74fe225b2045c172d6bd390bd855f086e3e9d525b46bfe24511431532', 'sha3')\n"
        "eq(surogat.hash('sha256', 'abc', 'base64'), "
        "'ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0=', 'b64')\n"
        "eq(surogat.hash('sha256', 'abc', 'base64url'), "
        "'ungWv48Bz-pBQUDeXa4iI7ADYaOWF3qctBD_YfIAFa0', 'b64url')\n"
        "eq(#surogat.hash('sha256', 'abc', 'raw'), 32, 'raw')\n"
        "eq(surogat.hex_encode(surogat.hash('md5', 'x', 'raw')), surogat.hash('md5', 'x'), 'hex')\n"
        /* RFC 4231 test cases 1, 2, 3 and 6 */
        "eq(surogat.hmac('sha256', string.rep('\\x0b', 20), 'Hi There'),\n"
        "   'b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7', 'tc1')\n"
        "local jefe = 'what do ya want for nothing?'\n"
        "eq(surogat.hmac('sha224', 'Jefe', jefe),\n"
        "   'a30e01098bc6dbbf45690f3a7e9e6d0f8bbea2a39e6148008fd05e44', 'tc2 224')\n"
        "eq(surogat.hmac('sha256', 'Jefe', jefe),\n"
        "   '5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843', 'tc2 256')\n"
        "eq(surogat.hmac('sha384', 'Jefe', jefe), 'af45d2e376484031617f78d2b58a6b1b9c7ef464f5a01b4"
        "7e42ec3736322445e8e2240ca5e69e2c78b3239ecfab21649', 'tc2 384')\n"
        "eq(surogat.hmac('sha512', 'Jefe', jefe), '164b7a7bfcf819e2e395fbe73b56e0a387bd64222e831fd6"
        "10270cd7ea2505549758bf75c05a994a6d034f65f8f0e6fdcaeab1a34d4a6b4b636e070a38bce737', "
        "'tc2 512')\n"
        "eq(surogat.hmac('sha256', string.rep('\\xaa', 20), string.rep('\\xdd', 50)),\n"
        "   '773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe', 'tc3')\n"
        "eq(surogat.hmac('sha256', string.rep('\\xaa', 131),\n"
        "   'Test Using Larger Than Block-Size Key - Hash Key First'),\n"
        "   '60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54', 'tc6')\n"
        "eq(surogat.equal('abc', 'abc'), true, 'equal')\n"
        "eq(surogat.equal('abc', 'abd'), false, 'differ')\n"
        "eq(surogat.equal('abc', 'abcd'), false, 'lengths')\n"
        "eq(surogat.equal('', ''), true, 'empty')\n"
        "eq(pcall(surogat.hash, 'crc32', 'x'), false, 'unknown digest')\n"
        "eq(pcall(surogat.hash, 'sha256', 'x', 'octal'), false, 'unknown encoding')\n"
        "eq(pcall(surogat.hmac, 'sha256', nil, 'x'), false, 'no key')\n");
}
END_TEST

START_TEST(encodings)
{
    checks(
        /* RFC 4648 section 10 */
        "local v = { [''] = '', f = 'Zg==', fo = 'Zm8=', foo = 'Zm9v', foob = 'Zm9vYg==',\n"
        "            fooba = 'Zm9vYmE=', foobar = 'Zm9vYmFy' }\n"
        "for plain, enc in pairs(v) do\n"
        "  eq(surogat.base64_encode(plain), enc, 'b64 ' .. plain)\n"
        "  eq(surogat.base64_decode(enc), plain, 'unb64 ' .. enc)\n"
        "  eq(surogat.base64url_encode(plain), (enc:gsub('=', '')), 'b64url ' .. plain)\n"
        "  eq(surogat.base64url_decode(enc), plain, 'padded url ' .. enc)\n"
        "  eq(surogat.base64url_decode((enc:gsub('=', ''))), plain, 'unpadded ' .. enc)\n"
        "  eq(surogat.base64_decode((enc:gsub('=', ''))), plain, 'unpadded std ' .. enc)\n"
        "end\n"
        "eq(surogat.base64url_encode('\\xfb\\xff\\xfe'), '-__-', 'url alphabet')\n"
        "eq(surogat.base64_encode('\\xfb\\xff\\xfe'), '+//+', 'std alphabet')\n"
        "eq(surogat.base64url_decode('-__-'), '\\xfb\\xff\\xfe', 'url decode')\n"
        "local all = {}\n"
        "for i = 0, 255 do all[#all + 1] = string.char(i) end\n"
        "all = table.concat(all)\n"
        "eq(surogat.base64_decode(surogat.base64_encode(all)), all, 'every byte')\n"
        "eq(surogat.base64url_decode(surogat.base64url_encode(all)), all, 'every byte url')\n"
        "for _, bad in ipairs({ 'Zg=', 'Z', 'Zm9v=', 'Zh==', 'Zm 9v', '-__-', 'Zg===', '=' }) do\n"
        "  local r, err = surogat.base64_decode(bad)\n"
        "  eq(r, nil, 'refused ' .. bad)\n"
        "  assert(err:find('base64_decode'), err)\n"
        "end\n"
        "eq(surogat.base64url_decode('+//+'), nil, 'std alphabet in url')\n"
        "eq(surogat.hex_encode('foobar'), '666f6f626172', 'hex')\n"
        "eq(surogat.hex_decode('666F6f626172'), 'foobar', 'unhex')\n"
        "eq(surogat.hex_decode(''), '', 'empty hex')\n"
        "eq(surogat.hex_decode('abc'), nil, 'odd')\n"
        "eq(surogat.hex_decode('zz'), nil, 'non-hex')\n"
        "eq(surogat.hex_decode(surogat.hex_encode(all)), all, 'every byte hex')\n"
        /* URLs: RFC 3986's unreserved stay */
        "eq(surogat.url_encode('AZaz09-._~'), 'AZaz09-._~', 'unreserved')\n"
        "eq(surogat.url_encode('a b/c?d=e&f+\\0\\xff'), 'a%20b%2Fc%3Fd%3De%26f%2B%00%FF', 'enc')\n"
        "eq(surogat.url_decode('a%20b%2fc%2Bd+e'), 'a b/c+d+e', 'dec')\n"
        "eq(surogat.url_decode('a%20b+c', true), 'a b c', 'form')\n"
        "eq(surogat.url_decode(surogat.url_encode(all)), all, 'every byte url')\n"
        "for _, bad in ipairs({ '%', '%2', '%zz', 'a%g0', '100%' }) do\n"
        "  local r, err = surogat.url_decode(bad)\n"
        "  eq(r, nil, 'refused ' .. bad)\n"
        "  assert(err:find('percent'), err)\n"
        "end\n"
        "eq(surogat.html_escape([[<a href=\"x\" title='y'>&amp;</a>]]),\n"
        "   '&lt;a href=&quot;x&quot; title=&#39;y&#39;&gt;&amp;amp;&lt;/a&gt;', 'html')\n"
        "eq(surogat.html_escape('plain text'), 'plain text', 'html plain')\n");
}
END_TEST

START_TEST(cookies)
{
    checks(
        "local C = surogat.cookie\n"
        "local c = C.parse('a=1; b = two ;c=\"q; x\";  d=; e=\"half; =f; solo; a=dup;;')\n"
        "eq(c.a, '1', 'first wins')\n"
        "eq(c.b, 'two', 'blanks')\n"
        "eq(c.c, 'q; x', 'quoted')\n"
        "eq(c.d, '', 'empty value')\n"
        "eq(c.e, '\"half', 'unterminated quote kept')\n"
        "eq(c[''], 'f', 'empty name')\n"
        "eq(C.serialise(c), 'a=1; b=two; c=\"q; x\"; d=; e=\"half; f', 'round trip')\n"
        "local n = 0\n"
        "for k in pairs(c) do n = n + 1 end\n"
        "eq(n, 6, 'pairs sees the cookies only')\n"
        "eq(C.parse('solo')[''], 'solo', 'nameless')\n"
        "eq(C.serialise(C.parse('solo')), 'solo', 'nameless written back')\n"
        "eq(C.parse('x=\"1\"').x, '1', 'quotes dropped')\n"
        "eq(C.serialise(C.parse('x=\"1\"')), 'x=1', 'quotes only when needed')\n"
        "eq(C.parse('x=\"a\"b; y=2').x, '\"a\"b', 'not a quoted value')\n"
        "eq(next(C.parse(nil)), nil, 'no field')\n"
        "eq(next(C.parse('')), nil, 'empty field')\n"
        "eq(C.serialise(C.parse('')), nil, 'nothing left: nil')\n"
        /* keep and remove, by name and by regex; the order survives */
        "c = C.parse('_ga=GA1; sess=abc; lang=fr; _gid=x; __utmz=y; wordpress_logged_in_1=u')\n"
        "C.remove_re(c, '^(_g|__utm)')\n"
        "eq(C.serialise(c), 'sess=abc; lang=fr; wordpress_logged_in_1=u', 'remove_re')\n"
        "C.keep_re(c, '^(sess|wordpress_logged_in_)')\n"
        "eq(C.serialise(c), 'sess=abc; wordpress_logged_in_1=u', 'keep_re')\n"
        "c = C.parse('a=1; b=2; c=3; d=4')\n"
        "eq(C.keep(c, 'd', 'b', 'zz'), c, 'returns the table')\n"
        "eq(C.serialise(c), 'b=2; d=4', 'keep')\n"
        "C.remove(C.parse('a=1; b=2'), 'a')\n"
        "c = C.parse('a=1; b=2; c=3')\n"
        "C.remove(c, { 'a', 'c' })\n"
        "eq(C.serialise(c), 'b=2', 'remove a list')\n"
        /* edits: set, clear, add (sorted after the parsed ones), numbers */
        "c = C.parse('z=1; y=2')\n"
        "c.y = nil\n"
        "c.b = 'new'\n"
        "c.a = 42\n"
        "c.z = 'with space'\n"
        "eq(C.serialise(c), 'z=\"with space\"; a=42; b=new', 'edits')\n"
        "eq(C.serialise({ k = 'v' }), 'k=v', 'a table of the script')\n"
        "eq(pcall(C.serialise, { ['a b'] = '1' }), false, 'bad name')\n"
        "eq(pcall(C.serialise, { a = 'x\\r\\ny' }), false, 'control character')\n"
        "eq(pcall(C.serialise, { a = 'say \"hi\"' }), false, 'quote and blank')\n"
        "eq(pcall(C.serialise, { a = {} }), false, 'not a string')\n"
        "eq(pcall(C.keep_re, C.parse('a=1'), '('), false, 'bad pattern')\n"
        "eq(pcall(C.parse, {}), false, 'not a string')\n"
        /* the usual use: a request's cookies narrowed, the field dropped when none is left */
        "req.http.cookie = C.serialise(C.keep(C.parse(req.http.cookie), 'sess'))\n"
        "eq(req.http.cookie, nil, 'field gone')\n");
}
END_TEST

START_TEST(cookie_header_edit)
{
    load_ok("function recv(req)\n"
            "  local c = surogat.cookie.parse(req.http.cookie)\n"
            "  surogat.cookie.remove_re(c, '^_')\n"
            "  req.http.cookie = surogat.cookie.serialise(c)\n"
            "  return 'pass'\n"
            "end\n");
    ck_assert_int_eq(do_recv(mkreq("GET", "/", "Cookie", "_ga=1; id=7; _fbp=2; t=\"a b\"", NULL)),
                     POL_PASS);
    ck_assert_str_eq(val(req.http, "Cookie"), "id=7; t=\"a b\"");
    ck_assert_int_eq(do_recv(mkreq("GET", "/", "Cookie", "_ga=1", NULL)), POL_PASS);
    ck_assert_ptr_null(http_find(req.http, "Cookie"));
}
END_TEST

/* ---- random, healthy, xid ---- */

START_TEST(random_numbers)
{
    checks("local sum, lo, hi, seen = 0, 1, 0, {}\n"
           "for i = 1, 20000 do\n"
           "  local r = surogat.random()\n"
           "  assert(r >= 0 and r < 1, r)\n"
           "  sum = sum + r\n"
           "  seen[r] = true\n"
           "  lo = math.min(lo, r); hi = math.max(hi, r)\n"
           "end\n"
           "assert(math.abs(sum / 20000 - 0.5) < 0.02, sum / 20000)\n"
           "assert(lo < 0.001 and hi > 0.999, lo .. ' ' .. hi)\n"
           "local n = 0\n"
           "for _ in pairs(seen) do n = n + 1 end\n"
           "assert(n > 19990, n)\n"
           "local below = 0\n"
           "for i = 1, 20000 do\n"
           "  local r = surogat.random(10, 20)\n"
           "  assert(r >= 10 and r < 20, r)\n"
           "  if r < 11 then below = below + 1 end\n"
           "end\n"
           "assert(below > 1700 and below < 2300, below)\n"
           "eq(surogat.random(5, 5), 5, 'empty range')\n"
           "eq(pcall(surogat.random, 2, 1), false, 'lo above hi')\n"
           "eq(pcall(surogat.random, 1), false, 'hi missing')\n");
}
END_TEST

START_TEST(healthy)
{
    load_ok("backend \"app\" { host = \"127.0.0.1\", port = 9 }\n"
            "director \"pool\" { type = \"fallback\", backends = { \"app\" } }\n"
            "function recv(req)\n"
            "  req.http['X-H'] = tostring(surogat.healthy('app')) .. ' ' ..\n"
            "                    tostring(surogat.healthy('pool')) .. ' ' ..\n"
            "                    tostring(surogat.healthy(req.backend))\n"
            "  if req.url == '/bogus' then surogat.healthy('nope') end\n"
            "  return 'pass'\n"
            "end\n");
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_PASS);
    ck_assert_str_eq(val(req.http, "X-H"), "true true true");
    /* req.backend is -b's "default" here: it stays healthy. */
    AZ(be_set_admin("app", BE_ADMIN_SICK));
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_PASS);
    ck_assert_str_eq(val(req.http, "X-H"), "false false true");
    AZ(be_set_admin("default", BE_ADMIN_SICK));
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_PASS);
    ck_assert_str_eq(val(req.http, "X-H"), "false false false");
    AZ(be_set_admin("default", BE_ADMIN_AUTO));
    AZ(be_set_admin("app", BE_ADMIN_AUTO));
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_PASS);
    ck_assert_str_eq(val(req.http, "X-H"), "true true true");
    ck_assert_int_eq(do_recv(mkreq("GET", "/bogus", NULL)), POL_ERROR);
    /* Not at the top level: the declarations are built after it ran. */
    load_fails("backend \"app\" { host = \"127.0.0.1\", port = 9 }\n"
               "local h = surogat.healthy('app')\n",
               "in hooks only");
}
END_TEST

START_TEST(xid)
{
    char first[512];

    load_ok("function recv(req) req.http['X-Xid'] = tostring(req.xid) end\n"
            "function hash(req)\n"
            "  assert(tostring(req.xid) == req.http['X-Xid'], 'the same in every hook')\n"
            "end\n");
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_HASH);
    snprintf(first, sizeof first, "%s", val(req.http, "X-Xid"));
    ck_assert_int_gt(atoi(first), 0);
    {
        char *key;
        size_t len;
        ck_assert_int_eq(pol_hash(&req, &key, &len), 0);
    }
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_HASH);
    ck_assert_str_ne(val(req.http, "X-Xid"), first);
    ck_assert_int_gt(atoi(val(req.http, "X-Xid")), atoi(first));
}
END_TEST

/* ---- obj.hits and bereq.uncacheable ---- */

START_TEST(obj_hits)
{
    struct http_hdr rh[8 + POL_HDR_ROOM];
    struct pol_obj obj;
    struct pol_synth syn;
    struct http resp;

    load_ok("function hit(req, obj)\n"
            "  req.http['X-Hit-Hits'] = tostring(obj.hits)\n"
            "  if obj.hits > 2 then return 'miss' end\n"
            "end\n"
            "function deliver(req, resp, obj)\n"
            "  resp.http['X-Cache'] = obj.hits > 0 and 'HIT' or 'MISS'\n"
            "  resp.http['X-Hits'] = tostring(obj.hits)\n"
            "  resp.http['X-Other'] = tostring(obj.ttl) .. ' ' .. tostring(obj.http)\n"
            "  if req.url == '/write' then obj.hits = 0 end\n"
            "end\n");
    memset(&obj, 0, sizeof obj);
    obj.hits = 1;
    obj.ttl = 10;
    obj.req = mkreq("GET", "/", NULL);
    ck_assert_int_eq(pol_hit(&req, &obj, &syn), POL_DELIVER);
    ck_assert_str_eq(val(req.http, "X-Hit-Hits"), "1");
    obj.hits = 3;
    ck_assert_int_eq(pol_hit(mkreq("GET", "/", NULL), &obj, &syn), POL_MISS);

    http_init(&resp, rh, ARRAY_LEN(rh));
    resp.proto = 11;
    resp.status = 200;
    ck_assert_int_eq(pol_deliver(mkreq("GET", "/", NULL), &resp, 7, &syn), POL_DELIVER);
    ck_assert_str_eq(val(&resp, "X-Cache"), "HIT");
    ck_assert_str_eq(val(&resp, "X-Hits"), "7");
    ck_assert_str_eq(val(&resp, "X-Other"), "nil nil"); /* deliver's obj has hits only */
    http_init(&resp, rh, ARRAY_LEN(rh));
    ck_assert_int_eq(pol_deliver(mkreq("GET", "/", NULL), &resp, 0, &syn), POL_DELIVER);
    ck_assert_str_eq(val(&resp, "X-Cache"), "MISS");
    http_init(&resp, rh, ARRAY_LEN(rh));
    ck_assert_int_eq(pol_deliver(mkreq("GET", "/write", NULL), &resp, 0, &syn), POL_ERROR);
}
END_TEST

/*
 * The ported DokuWiki/WordPress VCL: Set-Cookie stripped from what is
 * cached, left alone on a pass (a login) -- bereq.uncacheable tells.
 */
START_TEST(bereq_uncacheable)
{
    struct http_hdr bh[8 + POL_HDR_ROOM], rh[8 + POL_HDR_ROOM];
    struct http bereq, beresp;
    struct pol_beresp br;
    struct txt body = { "", 0 };

    load_ok("function backend_fetch(bereq)\n"
            "  bereq.http['X-Uncacheable'] = tostring(bereq.uncacheable)\n"
            "end\n"
            "function backend_response(bereq, beresp)\n"
            "  if not bereq.uncacheable then\n"
            "    beresp.http['Set-Cookie'] = nil\n"
            "  end\n"
            "end\n"
            "function backend_error(bereq, beresp)\n"
            "  beresp.http['X-Uncacheable'] = tostring(bereq.uncacheable)\n"
            "  return 'deliver'\n"
            "end\n"
            "function pipe(req, bereq)\n"
            "  bereq.http['X-Uncacheable'] = tostring(bereq.uncacheable)\n"
            "end\n");
    for (int pass = 0; pass < 2; pass++) {
        struct pol_bctx bc;
        struct pol_synth syn;

        mkreq(pass ? "POST" : "GET", pass ? "/login" : "/page", NULL);
        req.bereq_uncacheable = pass;
        pol_bctx_init(&bc, &req);
        http_init(&bereq, bh, ARRAY_LEN(bh));
        bereq.method = req.http->method;
        bereq.url = req.http->url;
        ck_assert_int_eq(pol_backend_fetch(&bc, &bereq), POL_FETCH);
        ck_assert_str_eq(val(&bereq, "X-Uncacheable"), pass ? "true" : "false");
        bc.bereq = &bereq;
        http_init(&beresp, rh, ARRAY_LEN(rh));
        beresp.status = 200;
        AZ(http_add(&beresp, (struct txt){ "Set-Cookie", 10 }, (struct txt){ "sid=1", 5 }));
        memset(&br, 0, sizeof br);
        br.resp = &beresp;
        br.ttl = 60;
        br.uncacheable = pass;
        ck_assert_int_eq(pol_backend_response(&bc, &br), POL_DELIVER);
        if (pass)
            ck_assert_str_eq(val(&beresp, "Set-Cookie"), "sid=1");
        else
            ck_assert_ptr_null(http_find(&beresp, "Set-Cookie"));
        http_init(&beresp, rh, ARRAY_LEN(rh));
        beresp.status = 503;
        ck_assert_int_eq(pol_backend_error(&bc, &beresp, &body), POL_DELIVER);
        ck_assert_str_eq(val(&beresp, "X-Uncacheable"), pass ? "true" : "false");
        /* A pipe is never cached. */
        http_init(&bereq, bh, ARRAY_LEN(bh));
        ck_assert_int_eq(pol_pipe(mkreq("GET", "/ws", NULL), &bereq, &syn), POL_PIPE);
        ck_assert_str_eq(val(&bereq, "X-Uncacheable"), "true");
    }
}
END_TEST

/* ---- shared dictionaries ---- */

START_TEST(shared_declarations)
{
    load_fails("shared \"s\" { }\n", ":1: shared \"s\": size is missing");
    load_fails("shared \"s\" { size = \"10q\" }\n", "is not a size");
    load_fails("\n\nshared \"s\" { size = \"1k\" }\n", ":3: shared \"s\": size 1024 is not from");
    load_fails("shared \"s\" { size = \"1m\", ttl = 5 }\n", "unknown field \"ttl\"");
    load_fails("shared \"s\" { size = \"1m\" }\nshared \"s\" { size = \"1m\" }\n",
               ":2: shared \"s\": declared twice");
    load_fails("local d = surogat.shared('nope')\n", ":1: surogat.shared: no shared \"nope\"");
    load_fails("local d = surogat.shared('s')\nshared \"s\" { size = \"1m\" }\n",
               "is declared before");
    load_fails("shared \"s\" { size = \"1m\" }\nlocal d = surogat.shared('s')\nd:set('a', 1)\n",
               ":3: shared:set(): in hooks only");
    load_fails("function recv(req) shared \"s\" { size = \"1m\" } end\n"
               "local ok = pcall(recv)\n"
               "shared \"t\" { size = 5 }\n",
               ":3: shared \"t\": size 5 is not from");
    /* Its own namespace: a backend may have the same name; numbers are bytes. */
    load_ok("backend \"app\" { host = \"127.0.0.1\", port = 9 }\n"
            "shared \"app\" { size = 1048576 }\n"
            "local app = surogat.shared('app')\n"
            "function recv(req)\n"
            "  assert(tostring(app) == 'shared \"app\"')\n"
            "  assert(surogat.shared('app') == app, 'one handle per state')\n"
            "  local ok, err = pcall(surogat.shared, 'other')\n"
            "  assert(not ok and err:find('no shared \"other\"'), err)\n"
            "  return 'pass'\n"
            "end\n");
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_PASS);
    /* In a hook too, a declaration is refused. */
    load_ok("function recv(req) shared \"x\" { size = \"1m\" } end\n");
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_ERROR);
}
END_TEST

START_TEST(shared_values)
{
    load_ok(LUA_EQ "shared \"d\" { size = \"1m\" }\n"
            "local d = surogat.shared('d')\n"
            "function recv(req)\n"
            "  eq(d:get('none'), nil, 'missing')\n"
            "  eq(d:set('s', 'text'), true, 'set')\n"
            "  eq(d:get('s'), 'text', 'string')\n"
            "  d:set('z', 'a\\0b')\n"
            "  eq(d:get('z'), 'a\\0b', 'NUL inside')\n"
            "  local long = string.rep('0123456789', 300)\n"
            "  d:set('long', long)\n"
            "  eq(d:get('long'), long, 'longer than the copy buffer')\n"
            "  d:set('i', 42); eq(math.type(d:get('i')), 'integer', 'integer')\n"
            "  d:set('f', 1.5); eq(d:get('f'), 1.5, 'float')\n"
            "  d:set('t', true); eq(d:get('t'), true, 'true')\n"
            "  d:set('b', false); eq(d:get('b'), false, 'false')\n"
            "  d:set('s', nil); eq(d:get('s'), nil, 'nil deletes')\n"
            "  eq(d:add('a', 1), true, 'add')\n"
            "  local ok, err = d:add('a', 2)\n"
            "  eq(ok, false, 'add twice'); eq(err, 'exists', 'why')\n"
            "  eq(d:get('a'), 1, 'add kept the first')\n"
            "  eq(d:delete('a'), true, 'delete'); eq(d:delete('a'), false, 'deleted')\n"
            "  local n, e = d:incr('n')\n"
            "  eq(n, nil, 'incr missing'); eq(e, 'not found', 'why')\n"
            "  eq(d:incr('n', 1, 0), 1, 'init + by')\n"
            "  eq(d:incr('n'), 2, 'by 1')\n"
            "  eq(d:incr('n', -5), -3, 'negative')\n"
            "  eq(d:incr('n', 0.5), -2.5, 'float')\n"
            "  d:set('s', 'x')\n"
            "  n, e = d:incr('s', 1)\n"
            "  eq(e, 'not a number', 'incr a string')\n"
            "  d:set('max', math.maxinteger)\n"
            "  n, e = d:incr('max', 1)\n"
            "  eq(e, 'integer overflow', 'overflow'); eq(d:get('max'), math.maxinteger, 'kept')\n"
            "  eq(d:ttl('i'), 0, 'no expiry')\n"
            "  eq(d:expire('i', 100), true, 'expire')\n"
            "  assert(d:ttl('i') > 99 and d:ttl('i') <= 100, d:ttl('i'))\n"
            "  eq(d:expire('i', 0), true, 'no expiry again'); eq(d:ttl('i'), 0, 'again')\n"
            "  eq(select(2, d:ttl('none')), 'not found', 'ttl missing')\n"
            "  eq(select(2, d:expire('none', 1)), 'not found', 'expire missing')\n"
            "  eq(pcall(d.get, d, ''), false, 'empty key')\n"
            "  eq(pcall(d.get, d, string.rep('k', 1025)), false, 'long key')\n"
            "  eq(d:set(string.rep('k', 1024), 1), true, 'longest key')\n"
            "  eq(pcall(d.set, d, 'k', {}), false, 'a table')\n"
            "  eq(pcall(d.set, d, 'k', 1, -1), false, 'negative ttl')\n"
            "  eq(pcall(d.incr, d, 'n', '1'), false, 'incr by a string')\n"
            "  eq(pcall(d.add, d, 'k', nil), false, 'add nil')\n"
            "  return 'pass'\n"
            "end\n");
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_PASS);
}
END_TEST

START_TEST(shared_expiry)
{
    load_ok("shared \"d\" { size = \"1m\" }\n"
            "local d = surogat.shared('d')\n"
            "function recv(req)\n"
            "  if req.url == '/set' then\n"
            "    d:set('t', 'v', 0.2)\n"
            "    d:set('keep', 'v')\n"
            "    d:incr('c', 1, 0, 0.2)\n"
            "    assert(d:get('t') == 'v' and d:ttl('t') > 0.1)\n"
            "  else\n"
            "    req.http['X-T'] = tostring(d:get('t')) .. ' ' .. tostring(d:get('keep')) ..\n"
            "                      ' ' .. tostring(d:get('c'))\n"
            "  end\n"
            "  return 'pass'\n"
            "end\n");
    ck_assert_int_eq(do_recv(mkreq("GET", "/set", NULL)), POL_PASS);
    ck_assert_int_eq(do_recv(mkreq("GET", "/get", NULL)), POL_PASS);
    ck_assert_str_eq(val(req.http, "X-T"), "v v 1");
    usleep(300 * 1000);
    ck_assert_int_eq(do_recv(mkreq("GET", "/get", NULL)), POL_PASS);
    ck_assert_str_eq(val(req.http, "X-T"), "nil v nil");
}
END_TEST

/*
 * 64k: 16 shares of 4 KiB less their buckets, each holding three entries
 * of a 1000-byte value.  safe_set refuses past that; set drops the least
 * recently used; the memory held never passes the size.
 */
START_TEST(shared_memory)
{
    load_ok("shared \"d\" { size = \"64k\" }\n"
            "local d = surogat.shared('d')\n"
            "local v = string.rep('x', 1000)\n"
            "function recv(req)\n"
            "  local ok, err = d:set('huge', string.rep('x', 4000))\n"
            "  assert(ok == false and err == 'no memory', 'larger than a share')\n"
            "  local stored, refused = 0, 0\n"
            "  for i = 1, 200 do\n"
            "    local ok, err = d:safe_set('s' .. i, v)\n"
            "    if ok then stored = stored + 1 else\n"
            "      assert(err == 'no memory', err); refused = refused + 1 end\n"
            "  end\n"
            "  assert(stored >= 16 and stored <= 60 and refused > 0, stored .. ' ' .. refused)\n"
            "  local live = 0\n"
            "  for i = 1, 200 do if d:get('s' .. i) then live = live + 1 end end\n"
            "  assert(live == stored, live)\n"
            "  d:set('hot', 'h')\n"
            "  local forced = 0\n"
            "  for i = 1, 300 do\n"
            "    local ok, err, f = d:set('e' .. i, v)\n"
            "    assert(ok, err)\n"
            "    if f then forced = forced + 1 end\n"
            "    assert(d:get('hot') == 'h', 'a key in use stays')\n"
            "  end\n"
            "  assert(forced > 200, forced)\n"
            "  assert(d:get('e300') == v, 'the newest is there')\n"
            "  live = 0\n"
            "  for i = 1, 200 do if d:get('s' .. i) then live = live + 1 end end\n"
            "  assert(live == 0, 'the old ones went: ' .. live)\n"
            "  return 'pass'\n"
            "end\n");
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_PASS);
    ck_assert_uint_le(stat_get(STAT_shared_bytes), 64 * 1024);
    ck_assert_uint_gt(stat_get(STAT_shared_bytes), 32 * 1024);
    ck_assert_uint_gt(stat_get(STAT_shared_evicted), 200);
    ck_assert_uint_gt(stat_get(STAT_shared_nomem), 1);
}
END_TEST

#define RELOAD_SCRIPT(size)                                                                        \
    "shared \"d\" { size = \"" size "\" }\n"                                                       \
    "local d = surogat.shared('d')\n"                                                              \
    "function recv(req)\n"                                                                         \
    "  if req.url == '/set' then d:set('k', 'kept') end\n"                                         \
    "  req.http['X-V'] = tostring(d:get('k'))\n"                                                   \
    "  return 'pass'\n"                                                                            \
    "end\n"

/* A reload declaring it the same keeps it; another size makes a new one. */
START_TEST(shared_reload)
{
    char ebuf[512];
    struct sb err;

    load_ok(RELOAD_SCRIPT("1m"));
    ck_assert_int_eq(do_recv(mkreq("GET", "/set", NULL)), POL_PASS);
    ck_assert_str_eq(val(req.http, "X-V"), "kept");
    load_ok("-- another file, the same declaration\n" RELOAD_SCRIPT("1m"));
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_PASS);
    ck_assert_str_eq(val(req.http, "X-V"), "kept");
    /* SIGHUP's reload of the program in use. */
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_msg(pol_reload(&err) == 0, "%s", ebuf);
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_PASS);
    ck_assert_str_eq(val(req.http, "X-V"), "kept");
    /* A named program declaring it alike shares it while both are loaded. */
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_msg(pol_prog_load("other", script(RELOAD_SCRIPT("1m")), &err) == 0, "%s", ebuf);
    ck_assert_msg(pol_prog_use("other", &err) == 0, "%s", ebuf);
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_PASS);
    ck_assert_str_eq(val(req.http, "X-V"), "kept");
    /* Another size: a new, empty dictionary. */
    load_ok(RELOAD_SCRIPT("2m"));
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_PASS);
    ck_assert_str_eq(val(req.http, "X-V"), "nil");
    ck_assert_msg(pol_prog_use("other", &err) == 0, "%s", ebuf);
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_PASS);
    ck_assert_str_eq(val(req.http, "X-V"), "kept");
}
END_TEST

START_TEST(ratelimit)
{
    load_ok("shared \"ratelimit\" { size = \"1m\" }\n"
            "shared \"other\" { size = \"64k\" }\n"
            "function recv(req)\n"
            "  local n, wait = 0, nil\n"
            "  for i = 1, 20 do\n"
            "    local ok, w = surogat.ratelimit(req.url, 10, 5)\n"
            "    if ok then n = n + 1; assert(w == 0) else wait = wait or w end\n"
            "  end\n"
            "  req.http['X-N'] = tostring(n)\n"
            "  req.http['X-Wait'] = wait and string.format('%.3f', wait) or 'none'\n"
            "  return 'pass'\n"
            "end\n");
    ck_assert_int_eq(do_recv(mkreq("GET", "/a", NULL)), POL_PASS);
    ck_assert_str_eq(val(req.http, "X-N"), "5");
    ck_assert_double_gt(atof(val(req.http, "X-Wait")), 0.05);
    ck_assert_double_le(atof(val(req.http, "X-Wait")), 0.1);
    ck_assert_uint_eq(stat_get(STAT_ratelimit_denied), 15);
    /* Another key has its own bucket. */
    ck_assert_int_eq(do_recv(mkreq("GET", "/b", NULL)), POL_PASS);
    ck_assert_str_eq(val(req.http, "X-N"), "5");
    /* A quarter second: two or so more (more if this machine is slow), never past the burst. */
    usleep(250 * 1000);
    ck_assert_int_eq(do_recv(mkreq("GET", "/a", NULL)), POL_PASS);
    ck_assert_int_ge(atoi(val(req.http, "X-N")), 2);
    ck_assert_int_le(atoi(val(req.http, "X-N")), 5);
    /* Long enough for a full bucket, and no more than the burst. */
    usleep(600 * 1000);
    ck_assert_int_eq(do_recv(mkreq("GET", "/a", NULL)), POL_PASS);
    ck_assert_str_eq(val(req.http, "X-N"), "5");

    load_ok(LUA_EQ "shared \"ratelimit\" { size = \"1m\" }\n"
            "shared \"other\" { size = \"64k\" }\n"
            "local other = surogat.shared('other')\n"
            "function recv(req)\n"
            "  eq(surogat.ratelimit('k', '60/m', 1), true, 'N/m')\n"
            "  eq(surogat.ratelimit('k', '60/m', 1), false, 'one a second')\n"
            "  eq(surogat.ratelimit('k', 1, 1, other), true, 'another dictionary')\n"
            "  eq(surogat.ratelimit('k', 1, 1, 'other'), false, 'by name')\n"
            "  eq(pcall(surogat.ratelimit, 'k', '10/x', 1), false, 'bad unit')\n"
            "  eq(pcall(surogat.ratelimit, 'k', 0, 1), false, 'rate 0')\n"
            "  eq(pcall(surogat.ratelimit, 'k', 10, 0), false, 'burst 0')\n"
            "  eq(pcall(surogat.ratelimit, 'k', 10, 1, 'none'), false, 'undeclared')\n"
            "  return 'pass'\n"
            "end\n");
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_PASS);
    load_fails("shared \"ratelimit\" { size = \"1m\" }\n"
               "function recv(req) return surogat.ratelimit('k', 1, 1) and 'pass' end\n"
               "recv()\n",
               "in hooks only");
    load_ok("function recv(req) surogat.ratelimit('k', 1, 1) end\n");
    ck_assert_int_eq(do_recv(mkreq("GET", "/", NULL)), POL_ERROR);
}
END_TEST

/* Workers with states of their own, one dictionary: every update counts, once. */
#define NTHREADS 4

static void *
worker(void *arg)
{
    struct wrk w;
    struct req r;
    struct http_hdr h[8];
    char ws[16 * 1024];
    struct pol_synth syn;
    enum pol_act *act = arg;

    stat_thread_enter();
    memset(&w, 0, sizeof w);
    w.magic = WRK_MAGIC;
    ws_init(&w.ws, ws, sizeof ws);
    mkreq_on(&r, &w, h, ARRAY_LEN(h), "GET", "/");
    *act = pol_recv(&r, &syn);
    pol_wrk_fini(&w);
    stat_thread_leave();
    return (NULL);
}

START_TEST(shared_threads)
{
    pthread_t t[NTHREADS];
    enum pol_act act[NTHREADS];

    load_ok("shared \"d\" { size = \"1m\" }\n"
            "shared \"ratelimit\" { size = \"1m\" }\n"
            "local d = surogat.shared('d')\n"
            "function recv(req)\n"
            "  if req.url == '/total' then\n"
            "    req.http['X-Total'] = tostring(d:get('n')) .. ' ' .. tostring(d:get('allowed'))\n"
            "    return 'pass'\n"
            "  end\n"
            "  for i = 1, 5000 do\n"
            "    d:incr('n', 1, 0)\n"
            "    d:set('k' .. (i % 50), i)\n"
            "    if i <= 100 and surogat.ratelimit('all', '1/d', 100) then\n"
            "      d:incr('allowed', 1, 0)\n"
            "    end\n"
            "  end\n"
            "  return 'pass'\n"
            "end\n");
    for (int i = 0; i < NTHREADS; i++)
        AZ(pthread_create(&t[i], NULL, worker, &act[i]));
    for (int i = 0; i < NTHREADS; i++) {
        AZ(pthread_join(t[i], NULL));
        ck_assert_int_eq(act[i], POL_PASS);
    }
    ck_assert_int_eq(do_recv(mkreq("GET", "/total", NULL)), POL_PASS);
    /* 4 x 5000 increments; 4 x 100 tries at a burst of 100: 100 allowed. */
    ck_assert_str_eq(val(req.http, "X-Total"), "20000 100");
    ck_assert_uint_eq(stat_get(STAT_ratelimit_denied), 300);
}
END_TEST

Suite *
pol_tool_suite(void)
{
    Suite *s = suite_create("pol_tool");
    TCase *tc = tcase_create("tool");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, digests);
    tcase_add_test(tc, encodings);
    tcase_add_test(tc, cookies);
    tcase_add_test(tc, cookie_header_edit);
    tcase_add_test(tc, random_numbers);
    tcase_add_test(tc, healthy);
    tcase_add_test(tc, xid);
    tcase_add_test(tc, obj_hits);
    tcase_add_test(tc, bereq_uncacheable);
    tcase_add_test(tc, shared_declarations);
    tcase_add_test(tc, shared_values);
    tcase_add_test(tc, shared_expiry);
    tcase_add_test(tc, shared_memory);
    tcase_add_test(tc, shared_reload);
    tcase_add_test(tc, ratelimit);
    tcase_add_test(tc, shared_threads);
    suite_add_tcase(s, tc);
    return s;
}
