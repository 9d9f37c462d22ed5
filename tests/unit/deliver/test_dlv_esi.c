/*
 * dlv_esi: ESI pages assembled by the deliverer against a memory
 * transport, their includes taken from a real cache index (no policy, no
 * backend: an include that is not cached fails with 503).  A page stored
 * gzip in segments and one stored identity; includes stored gzip with
 * their bits (spliced whole), identity, themselves ESI pages, missing;
 * onerror="continue", esi_max_depth, cycles.  What a gzip client gets
 * must decode to exactly what an identity client gets.
 */
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "unit.h"
#include "cache_fixture.h"
#include "surogat/cc.h"
#include "surogat/defs.h"
#include "surogat/dlv.h"
#include "surogat/esi.h"
#include "surogat/gz.h"
#include "surogat/hsh.h"
#include "surogat/par.h"
#include "surogat/req.h"
#include "surogat/stat.h"
#include "surogat/sto.h"
#include "surogat/tim.h"
#include "surogat/wrk.h"
#include "surogat/ws.h"

#include "memtp.h"
#include "tbuf.h"

#define HOST "esi.test"

static struct wrk wrk;
static char wsbuf[256 * 1024];
static struct http_hdr hdrs[16];
static struct req req;

static void
setup(void)
{
    cache_setup();
    memtp_req(&req, &wrk, wsbuf, sizeof wsbuf, hdrs, 16, "/page");
    ck_assert_int_eq(http_add(req.http, TXT_LIT("Host"), TXT_LIT(HOST)), 0);
}

/* A request as the transport would have made it again, for another delivery. */
static void
again(bool gzip)
{
    memset(&seen, 0, sizeof seen);
    ws_reset(&wrk.ws);
    req.esi_log = NULL;
    req.outcome = REQ_O_NONE;
    http_unset(req.http, "Accept-Encoding");
    if (gzip)
        ck_assert_int_eq(http_add(req.http, TXT_LIT("Accept-Encoding"), TXT_LIT("gzip")), 0);
}

/* ---- objects in the cache ---- */

/*
 * Store url's object: head (fields, the status line added), body, and its
 * attributes; published, no reference kept.
 */
static void
store(const char *url, const char *fields, const void *body, size_t len, struct txt prog,
      struct txt bits)
{
    char key[128], head[512];
    struct txt oa[HSH_OA__N] = { [HSH_OA_ESI] = prog, [HSH_OA_GZBITS] = bits };
    struct hsh_stale stale;
    struct cobj *oc;
    struct cc qcc;
    size_t klen = (size_t)snprintf(key, sizeof key, "%s%c%s", HOST, 0, url);

    cc_init(&qcc);
    ck_assert_int_eq(hsh_lookup(key, klen, req.http, &qcc, tim_real(), 0, &oc, &stale, NULL),
                     HSH_MISS);
    snprintf(head, sizeof head, "HTTP/1.1 200 OK\r\n%s\r\n", fields);
    hsh_head_set(oc, head, strlen(head));
    oc->status = 200;
    oc->fresh.t_origin = tim_real();
    oc->fresh.ttl = 60;
    ck_assert_int_eq(hsh_store_begin(oc), 0);
    if (len > 0)
        ck_assert_int_eq(hsh_append(oc, body, len), 0);
    ck_assert_int_eq(hsh_oa_set(oc, oa), 0);
    oc->body_complete = true;
    hsh_unbusy(&oc);
}

/* An ESI page, parsed and stored as the fetch stores it: gzip in segments, or identity. */
static void
store_page(const char *url, const char *src, bool gzip)
{
    struct esi_conf c = { .url = url };
    unsigned char *prog = NULL;
    struct gz_bits bits;
    struct buf b = { NULL, 0, 0 };
    size_t plen = 0;

    if (gzip) {
        struct esi_gz *g = esi_gz_new(&c, 6);
        ck_assert_int_eq(esi_gz_feed(g, src, strlen(src), collect, &b), GZ_OK);
        ck_assert_int_eq(esi_gz_finish(g, collect, &b, &prog, &plen), GZ_OK);
        ck_assert(esi_gz_bits(g, &bits));
        esi_gz_free(&g);
        store(url, "Content-Type: text/html\r\nContent-Encoding: gzip\r\nETag: \"p1\"\r\n", b.p,
              b.len, (struct txt){ (char *)prog, plen },
              (struct txt){ (const char *)&bits, sizeof bits });
    } else {
        struct esi_parser *p = esi_parser_new(&c, NULL, NULL);
        ck_assert_int_eq(esi_parse(p, src, strlen(src)), 0);
        ck_assert_int_eq(esi_finish(p, &prog, &plen), 0);
        esi_parser_free(&p);
        store(url, "Content-Type: text/html\r\nETag: \"p2\"\r\n", src, strlen(src),
              (struct txt){ (char *)prog, plen }, (struct txt){ "", 0 });
    }
    free(prog);
    free(b.p);
}

/* A fragment stored gzip, with the bits that let it be spliced (or without). */
static void
store_gzip(const char *url, const char *text, bool with_bits)
{
    struct gz *z = gz_new(GZ_ENCODE, 6);
    struct buf b = { NULL, 0, 0 };
    struct gz_bits bits;

    gz_track(z);
    ck_assert_int_eq(gz_feed(z, text, strlen(text), GZ_FLUSH_FINISH, collect, &b), GZ_END);
    ck_assert(gz_bits(z, &bits));
    gz_free(&z);
    store(url, "Content-Type: text/html\r\nContent-Encoding: gzip\r\n", b.p, b.len,
          (struct txt){ "", 0 },
          with_bits ? (struct txt){ (const char *)&bits, sizeof bits } : (struct txt){ "", 0 });
    free(b.p);
}

static void
store_text(const char *url, const char *text)
{
    store(url, "Content-Type: text/html\r\n", text, strlen(text), (struct txt){ "", 0 },
          (struct txt){ "", 0 });
}

/* Deliver the page at url as the hit step would. */
static void
deliver(const char *url)
{
    char key[128];
    size_t klen = (size_t)snprintf(key, sizeof key, "%s%c%s", HOST, 0, url);
    struct hsh_stale stale;
    struct cobj *oc;
    struct cc qcc;

    cc_init(&qcc);
    ck_assert_int_eq(hsh_lookup(key, klen, req.http, &qcc, tim_real(), 0, &oc, &stale, NULL),
                     HSH_HIT);
    req.http->url = (struct txt){ url, strlen(url) };
    dlv_obj(&req, oc, tim_real(), NULL);
    hsh_deref(&oc);
}

/* What a gzip client got, decoded: it must be one whole gzip member. */
static char *
gunzip(const char *p, size_t len, size_t *out_len)
{
    static char out[65536];
    z_stream zs;

    memset(&zs, 0, sizeof zs);
    ck_assert_int_eq(inflateInit2(&zs, 16 + MAX_WBITS), Z_OK);
    zs.next_in = (Bytef *)(uintptr_t)p;
    zs.avail_in = (uInt)len;
    zs.next_out = (Bytef *)out;
    zs.avail_out = sizeof out - 1;
    ck_assert_int_eq(inflate(&zs, Z_FINISH), Z_STREAM_END);
    ck_assert_uint_eq(zs.avail_in, 0); /* nothing after the member */
    *out_len = zs.total_out;
    out[*out_len] = '\0';
    inflateEnd(&zs);
    return (out);
}

static const char *
body_str(void)
{
    seen.body[seen.blen] = '\0';
    return (seen.body);
}

/* ---- the tests ---- */

/* Words that compress: a fragment worth storing gzip. */
#define F1                                                                      \
    "<ul><li>one fish</li><li>two fish</li><li>red fish</li><li>blue fish</li>" \
    "<li>one fish</li><li>two fish</li><li>red fish</li><li>blue fish</li></ul>"

static void
fragments(void)
{
    store_gzip("/f1", F1, true);
    store_text("/f2", "[two]");
    store_gzip("/f3", "[three, gzip without bits]", false);
    store_page("/nested", "<div>(<esi:include src=\"/f2\"/>)</div>", false);
}

#define PAGE                                                                                \
    "<html>[A]<esi:include src=\"/f1\"/>[B]<esi:include src=\"f2\"/>[C]"                    \
    "<esi:include src=\"/missing\" onerror=\"continue\"/>[D]<esi:include src=\"/nested\"/>" \
    "<esi:remove>not for clients</esi:remove>[E]<esi:include src=\"/f3\"/></html>"
#define WANT "<html>[A]" F1 "[B][two][C][D]<div>([two])</div>[E][three, gzip without bits]</html>"

static void
check_page(const char *url, bool gzip_stored)
{
    const char *got;
    size_t len;
    uint64_t spliced;

    /* An identity client. */
    again(false);
    deliver(url);
    ck_assert_uint_eq(seen.status, 200);
    ck_assert_uint_eq(seen.len, TP_LEN_UNKNOWN); /* no Content-Length: the transport frames */
    ck_assert(seen.body_follows);
    ck_assert_uint_eq(seen.ends, 1);
    ck_assert_uint_eq(seen.aborts, 0);
    ck_assert_str_eq(body_str(), WANT);
    ck_assert_ptr_null(strstr(seen.fields, "ETag"));
    ck_assert_ptr_null(strstr(seen.fields, "Content-Encoding"));
    ck_assert_ptr_nonnull(req.esi_log);
    ck_assert_uint_eq(req.esi_log->total, 5);
    ck_assert_uint_eq(req.esi_log->failed, 1); /* /missing, left out */
    ck_assert_str_eq(req.esi_log->rec[0].url, "/f1");
    ck_assert_int_eq(req.esi_log->rec[0].outcome, REQ_O_HIT);
    ck_assert(req.esi_log->rec[2].failed);
    /* A gzip client: the same page, one gzip stream, decoded. */
    again(true);
    spliced = stat_get(STAT_esi_spliced);
    deliver(url);
    ck_assert_uint_eq(seen.ends, 1);
    if (gzip_stored) {
        ck_assert_ptr_nonnull(strstr(seen.fields, "Content-Encoding: gzip\r\n"));
        got = gunzip(seen.body, seen.blen, &len);
        ck_assert_str_eq(got, WANT);
        ck_assert_uint_eq(len, strlen(WANT));
        ck_assert_uint_eq(stat_get(STAT_esi_spliced), spliced + 1); /* /f1, not /f3 */
    } else {
        /* A page stored identity is sent identity, whatever the client takes. */
        ck_assert_ptr_null(strstr(seen.fields, "Content-Encoding"));
        ck_assert_str_eq(body_str(), WANT);
    }
}

START_TEST(gzip_page)
{
    fragments();
    store_page("/page", PAGE, true);
    check_page("/page", true);
}
END_TEST

START_TEST(identity_page)
{
    fragments();
    store_page("/page", PAGE, false);
    check_page("/page", false);
}
END_TEST

/* An include that fails without onerror="continue" cuts the page: no end. */
START_TEST(failing_include_cuts)
{
    fragments();
    store_page("/cut", "<html>[A]<esi:include src=\"/f2\"/>[B]<esi:include src=\"/missing\"/>[C]",
               true);
    again(false);
    deliver("/cut");
    ck_assert_uint_eq(seen.ends, 0);
    ck_assert_uint_eq(seen.aborts, 1);
    ck_assert_ptr_null(strstr(body_str(), "[C]"));
    /* With alt=, the alternative stands in. */
    store_page("/alt", "<html>[A]<esi:include src=\"/missing\" alt=\"/f2\"/>[B]</html>", true);
    again(true);
    deliver("/alt");
    ck_assert_uint_eq(seen.ends, 1);
    ck_assert_str_eq(gunzip(seen.body, seen.blen, &(size_t){ 0 }), "<html>[A][two][B]</html>");
    /* Nothing sent yet when it fails: the head is dropped, a 503 instead of a cut. */
    store_page("/first", "<esi:include src=\"/missing\"/><html>", false);
    again(false);
    deliver("/first");
    ck_assert_uint_eq(seen.heads, 2);
    ck_assert_uint_eq(seen.status, 503);
    ck_assert_uint_eq(seen.ends, 1);
    ck_assert_uint_eq(seen.aborts, 1);
}
END_TEST

/* Includes past esi_max_depth, and of a page that includes them, fail. */
START_TEST(depth_and_cycles)
{
    uint64_t depth = stat_get(STAT_esi_depth_limit), cycles = stat_get(STAT_esi_cycles);

    fragments();
    store_page("/loop", "<p>[L]<esi:include src=\"/loop\" onerror=\"continue\"/></p>", false);
    again(false);
    deliver("/loop");
    ck_assert_str_eq(body_str(), "<p>[L]</p>");
    ck_assert_uint_eq(stat_get(STAT_esi_cycles), cycles + 1);
    /* /nested at level 1 includes /f2 at level 2: past a depth of 1, so /nested fails. */
    par.esi_max_depth = 1;
    store_page("/deep", "<p>[D]<esi:include src=\"/nested\" onerror=\"continue\"/>[E]</p>", false);
    again(false);
    deliver("/deep");
    ck_assert_uint_eq(seen.ends, 1);
    ck_assert_str_eq(body_str(), "<p>[D]<div>([E]</p>"); /* /nested left where it broke */
    ck_assert_uint_eq(stat_get(STAT_esi_depth_limit), depth + 1);
    /* Without onerror the page is cut (what was ready went out before /missing was waited for). */
    again(false);
    store_page("/deeper",
               "<p>[D]<esi:include src=\"/missing\" onerror=\"continue\"/>"
               "<esi:include src=\"/nested\"/>[E]</p>",
               false);
    deliver("/deeper");
    ck_assert_uint_eq(seen.ends, 0);
    ck_assert_uint_eq(seen.aborts, 1);
    ck_assert_str_eq(body_str(), "<p>[D]");
}
END_TEST

/* Every include ready at once (cached): the page goes out whole, with its length. */
START_TEST(all_ready_has_a_length)
{
    fragments();
    again(false);
    deliver("/nested");
    ck_assert_str_eq(body_str(), "<div>([two])</div>");
    ck_assert_uint_eq(seen.len, seen.blen);
    ck_assert_uint_eq(seen.ends, 1);
    /* Not with an include that had to be waited for: /missing is fetched. */
    store_page("/wait", "<p><esi:include src=\"/missing\" onerror=\"continue\"/></p>", false);
    again(false);
    deliver("/wait");
    ck_assert_str_eq(body_str(), "<p></p>");
    ck_assert_uint_eq(seen.len, TP_LEN_UNKNOWN);
}
END_TEST

/* HEAD: the head only, and no include is even looked up. */
START_TEST(head_request)
{
    uint64_t n = stat_get(STAT_esi_includes);

    fragments();
    store_page("/page", PAGE, true);
    again(false);
    req.head_only = true;
    deliver("/page");
    ck_assert_uint_eq(seen.status, 200);
    ck_assert_uint_eq(seen.blen, 0);
    ck_assert_uint_eq(seen.ends, 1);
    ck_assert_uint_eq(stat_get(STAT_esi_includes), n);
}
END_TEST

Suite *
dlv_esi_suite(void)
{
    Suite *s = suite_create("dlv_esi");
    TCase *tc = tcase_create("esi");

    tcase_add_checked_fixture(tc, setup, cache_teardown);
    tcase_add_test(tc, gzip_page);
    tcase_add_test(tc, identity_page);
    tcase_add_test(tc, failing_include_cuts);
    tcase_add_test(tc, depth_and_cycles);
    tcase_add_test(tc, head_request);
    tcase_add_test(tc, all_ready_has_a_length);
    suite_add_tcase(s, tc);
    return s;
}
