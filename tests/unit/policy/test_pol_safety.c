/*
 * pol: what a script cannot do, through the hook calls of pol.h -- change
 * a field that frames a message, or a status in a way that adds or drops
 * a body; load with a hook that can only answer a word it may not return.
 */
#include "pol_test.h"

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

    ck_assert_int_eq(pol_backend_fetch(&req, mkhead(&h, hh, 32, 0)), POL_FETCH);
    assert_refused(&h, "42");
    ck_assert_ptr_null(http_find(&h, "TE"));
    memset(&br, 0, sizeof br);
    br.resp = mkhead(&h, hh, 32, 200);
    ck_assert_int_eq(pol_backend_response(&req, &br), POL_DELIVER);
    assert_refused(&h, "30");
    ck_assert_int_eq(pol_deliver(&req, mkhead(&h, hh, 32, 200), &syn), POL_DELIVER);
    assert_refused(&h, "30");
    ck_assert_int_eq(pol_synth(&req, mkhead(&h, hh, 32, 503), &body), POL_DELIVER);
    assert_refused(&h, "30");
    ck_assert_int_eq(pol_backend_error(&req, mkhead(&h, hh, 32, 503), &body), POL_DELIVER);
    assert_refused(&h, "30");
    ck_assert_int_eq(pol_pipe(&req, mkhead(&h, hh, 32, 0), &syn), POL_PIPE);
    assert_refused(&h, "42");
}
END_TEST

START_TEST(status_keeps_the_body)
{
    static struct http_hdr hh[16];
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
    ck_assert_int_eq(pol_deliver(mkreq("GET", "/304", NULL), mkhead(&h, hh, 16, 200), &syn),
                     POL_ERROR);
    ck_assert_int_eq(pol_deliver(mkreq("GET", "/204", NULL), mkhead(&h, hh, 16, 200), &syn),
                     POL_ERROR);
    ck_assert_uint_eq(h.status, 200);
    /* a 304 (a conditional hit) cannot get its body back */
    ck_assert_int_eq(pol_deliver(mkreq("GET", "/200", NULL), mkhead(&h, hh, 16, 304), &syn),
                     POL_ERROR);
    ck_assert_int_eq(pol_deliver(mkreq("GET", "/204", NULL), mkhead(&h, hh, 16, 304), &syn),
                     POL_DELIVER);
    ck_assert_uint_eq(h.status, 204);
    ck_assert_int_eq(pol_deliver(mkreq("GET", "/404", NULL), mkhead(&h, hh, 16, 200), &syn),
                     POL_DELIVER);
    ck_assert_uint_eq(h.status, 404);
    memset(&br, 0, sizeof br);
    br.resp = mkhead(&h, hh, 16, 200);
    ck_assert_int_eq(pol_backend_response(mkreq("GET", "/", NULL), &br), POL_ERROR);
    /* a synthetic body is framed after the hook: there 204 is fine (and sent without it) */
    ck_assert_int_eq(pol_synth(mkreq("GET", "/", NULL), mkhead(&h, hh, 16, 200), &body),
                     POL_DELIVER);
    ck_assert_uint_eq(h.status, 204);
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

Suite *
pol_safety_suite(void)
{
    Suite *s = suite_create("pol_safety");
    TCase *tc = tcase_create("safety");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, framing_fields_read_only);
    tcase_add_test(tc, status_keeps_the_body);
    tcase_add_test(tc, constant_answer_checked_at_load);
    suite_add_tcase(s, tc);
    return s;
}
