/*
 * dlv: the deliverer against a memory transport, which records what a
 * real one would frame: the head (status, reason, fields, announced
 * length, whether a body follows), the body bytes, the end, an abort.
 * Error pages, synthetic answers, a fetch's head planned from the
 * backend's (304, 206, 416 for a miss; Cache-Status), the range cut of
 * its body through the sink, and static files from a directory.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "unit.h"
#include "surogat/defs.h"
#include "surogat/dlv.h"
#include "surogat/fetch.h"
#include "surogat/par.h"
#include "surogat/req.h"
#include "surogat/sb.h"
#include "surogat/be.h"
#include "surogat/sfb.h"
#include "surogat/stat.h"
#include "surogat/tp.h"
#include "surogat/wrk.h"
#include "surogat/ws.h"

#include "cache_fixture.h"
#include "memtp.h"

static struct wrk wrk;
static char wsbuf[128 * 1024];
static struct http_hdr hdrs[16];
static struct req req;

static void
setup(void)
{
    static bool once;

    if (!once) {
        par_init();
        AZ(stat_init());
        once = true;
    }
    memtp_req(&req, &wrk, wsbuf, sizeof wsbuf, hdrs, 16, "/x");
}

static void
add(struct http *hp, const char *n, const char *v)
{
    ck_assert_int_eq(http_add(hp, (struct txt){ n, strlen(n) }, (struct txt){ v, strlen(v) }), 0);
}

START_TEST(error_page_escapes_its_message)
{
    ck_assert_int_eq(dlv_error(&req, 404, "X-Why: test\r\n", "<script>&"), 0);
    ck_assert_uint_eq(seen.status, 404);
    ck_assert_str_eq(seen.reason, "Not Found");
    ck_assert_ptr_nonnull(strstr(seen.fields, "Content-Type: text/html"));
    ck_assert_ptr_nonnull(strstr(seen.fields, "X-Why: test\r\n"));
    ck_assert_ptr_null(strstr(seen.fields, "Content-Length")); /* the transport's */
    seen.body[seen.blen] = '\0';
    ck_assert_ptr_nonnull(strstr(seen.body, "&lt;script&gt;&amp;"));
    ck_assert_ptr_null(strstr(seen.body, "<script>"));
    ck_assert_uint_eq(seen.len, seen.blen);
    ck_assert_uint_eq(seen.ends, 1);
    ck_assert_int_eq(req.outcome, REQ_O_SYNTH);
}
END_TEST

/* A 204 or 304 goes out without a body or a length, whatever it was given. */
START_TEST(send_bodiless_statuses)
{
    static const unsigned st[] = { 204, 304 };

    for (size_t i = 0; i < 2; i++) {
        struct http_hdr h[4];
        struct http resp;

        setup();
        http_init(&resp, h, 4);
        resp.status = st[i];
        resp.reason = TXT_LIT("X");
        add(&resp, "Content-Length", "5");
        add(&resp, "X-Kept", "1");
        ck_assert_int_eq(dlv_send(&req, &resp, TXT_LIT("hello")), 0);
        ck_assert_uint_eq(seen.status, st[i]);
        ck_assert(!seen.body_follows);
        ck_assert_uint_eq(seen.len, TP_LEN_NONE);
        ck_assert_uint_eq(seen.blen, 0);
        ck_assert_ptr_null(strstr(seen.fields, "Content-Length"));
        ck_assert_ptr_nonnull(strstr(seen.fields, "X-Kept: 1\r\n"));
        ck_assert_ptr_nonnull(strstr(seen.fields, "Date: "));
    }
}
END_TEST

START_TEST(synth_without_a_policy)
{
    dlv_synth(&req, 418, "Short & <Stout>");
    ck_assert_uint_eq(seen.status, 418);
    ck_assert_str_eq(seen.reason, "Short & <Stout>");
    seen.body[seen.blen] = '\0';
    ck_assert_ptr_nonnull(strstr(seen.body, "Short &amp; &lt;Stout&gt;"));
    ck_assert(!req.restart);
}
END_TEST

/* A busy object with beresp as the backend's answer (a miss, or a pass). */
static struct http_hdr behdrs[16];

static void
mkbo(struct busyobj *bo, bool miss, unsigned status, uint64_t clen)
{
    fetch_init(bo);
    bo->creq = req.http;
    bo->miss = miss;
    bo->stored = miss;
    http_init(bo->beresp, behdrs, 16);
    bo->beresp->proto = 11;
    bo->beresp->status = status;
    bo->beresp->reason = TXT_LIT("OK");
    add(bo->beresp, "ETag", "\"e1\"");
    add(bo->beresp, "Content-Length", "999"); /* the transport frames: never passed on */
    add(bo->beresp, "Connection", "keep-alive");
    add(bo->beresp, "Surrogate-Control", "max-age=60");
    bo->rbody = clen > 0 ? H1_BODY_LENGTH : H1_BODY_CHUNKED;
    bo->rclen = clen;
}

/* Pieces through the sink as a fetch would give them, in rounds of `step` bytes. */
static void
feed(struct dlv_fetch *df, const char *body, size_t len, size_t step)
{
    for (size_t off = 0; off < len; off += step) {
        size_t n = off + step > len ? len - off : step;
        ck_assert_int_eq(df->sink.piece(df->sink.priv, body + off, n), 0);
        ck_assert_int_eq(df->sink.flush(df->sink.priv), 0);
    }
    dlv_fetch_end(df, 0);
}

START_TEST(fetch_head_from_the_backend)
{
    struct busyobj bo;
    struct dlv_fetch df;

    mkbo(&bo, true, 200, 10);
    ck_assert_int_eq(dlv_fetch_begin(&req, &bo, "uri-miss", &df), 0);
    ck_assert_uint_eq(seen.status, 200);
    ck_assert_uint_eq(seen.len, 10);
    ck_assert_ptr_null(strstr(seen.fields, "Content-Length"));
    ck_assert_ptr_null(strstr(seen.fields, "Connection"));
    ck_assert_ptr_null(strstr(seen.fields, "Surrogate-Control"));
    ck_assert_ptr_nonnull(strstr(seen.fields, "Cache-Status: surogat; fwd=uri-miss; stored\r\n"));
    ck_assert_ptr_nonnull(strstr(seen.fields, "Via: 1.1 surogat\r\n"));
    feed(&df, "0123456789", 10, 3);
    ck_assert_uint_eq(seen.blen, 10);
    ck_assert(memcmp(seen.body, "0123456789", 10) == 0);
    ck_assert_uint_eq(seen.ends, 1);
    /* A pass says bypass, and has no stored. */
    setup();
    mkbo(&bo, false, 200, 0);
    ck_assert_int_eq(dlv_fetch_begin(&req, &bo, NULL, &df), 0);
    ck_assert_uint_eq(seen.len, TP_LEN_UNKNOWN);
    ck_assert_ptr_nonnull(strstr(seen.fields, "Cache-Status: surogat; fwd=bypass\r\n"));
    /* A slow client of a miss that stores nothing is written to all the same. */
    setup();
    seen.full = true;
    mkbo(&bo, true, 200, 10);
    ck_assert_int_eq(dlv_fetch_begin(&req, &bo, "miss", &df), 0);
    feed(&df, "0123456789", 10, 4);
    ck_assert_uint_eq(seen.blen, 10);
    ck_assert_uint_eq(seen.ends, 1);
}
END_TEST

/* The client's own condition, answered from what a miss fetched in full. */
START_TEST(fetch_miss_answers_the_clients_condition)
{
    struct busyobj bo;
    struct dlv_fetch df;

    add(req.http, "If-None-Match", "\"e1\"");
    mkbo(&bo, true, 200, 10);
    ck_assert_int_eq(dlv_fetch_begin(&req, &bo, "miss", &df), 0);
    ck_assert_uint_eq(seen.status, 304);
    ck_assert(!df.body);
    ck_assert_uint_eq(seen.ends, 1); /* answered at once: the fetch goes on for the cache */
    ck_assert_ptr_nonnull(strstr(seen.fields, "fwd-status=200"));
    /* A pass asked the backend with the condition: its answer goes as it is. */
    setup();
    add(req.http, "If-None-Match", "\"e1\"");
    mkbo(&bo, false, 200, 10);
    ck_assert_int_eq(dlv_fetch_begin(&req, &bo, NULL, &df), 0);
    ck_assert_uint_eq(seen.status, 200);
}
END_TEST

START_TEST(fetch_miss_cuts_the_range)
{
    struct busyobj bo;
    struct dlv_fetch df;

    add(req.http, "Range", "bytes=3-6");
    mkbo(&bo, true, 200, 10);
    ck_assert_int_eq(dlv_fetch_begin(&req, &bo, "miss", &df), 0);
    ck_assert_uint_eq(seen.status, 206);
    ck_assert_uint_eq(seen.len, 4);
    ck_assert_ptr_nonnull(strstr(seen.fields, "Content-Range: bytes 3-6/10\r\n"));
    feed(&df, "0123456789", 10, 2); /* the cut falls across pieces */
    ck_assert_uint_eq(seen.blen, 4);
    ck_assert(memcmp(seen.body, "3456", 4) == 0);
    /* Unsatisfiable: 416, no body. */
    setup();
    add(req.http, "Range", "bytes=20-");
    mkbo(&bo, true, 200, 10);
    ck_assert_int_eq(dlv_fetch_begin(&req, &bo, "miss", &df), 0);
    ck_assert_uint_eq(seen.status, 416);
    ck_assert(!df.body);
    ck_assert_ptr_nonnull(strstr(seen.fields, "Content-Range: bytes */10\r\n"));
}
END_TEST

/* A backend that fails mid-body: a 502 if nothing went out, else a cut. */
START_TEST(fetch_failure_mid_body)
{
    struct busyobj bo;
    struct dlv_fetch df;

    mkbo(&bo, false, 200, 10);
    ck_assert_int_eq(dlv_fetch_begin(&req, &bo, NULL, &df), 0);
    dlv_fetch_end(&df, -1); /* nothing written: the transport drops the head */
    ck_assert_uint_eq(seen.aborts, 1);
    ck_assert_uint_eq(seen.status, 502); /* a second head: the error page */
    setup();
    mkbo(&bo, false, 200, 10);
    ck_assert_int_eq(dlv_fetch_begin(&req, &bo, NULL, &df), 0);
    ck_assert_int_eq(df.sink.piece(df.sink.priv, "abc", 3), 0);
    ck_assert_int_eq(df.sink.flush(df.sink.priv), 0);
    dlv_fetch_end(&df, -1);
    ck_assert_uint_eq(seen.aborts, 1);
    ck_assert_uint_eq(seen.status, 200); /* the head stays: the connection is cut */
    ck_assert(req.abort);
}
END_TEST

START_TEST(static_file)
{
    char dir[] = "/tmp/dlv-static-XXXXXX", path[256], ebuf[256];
    struct sb err;
    struct sfb *sfb;
    struct be be = { .magic = BE_MAGIC, .name = (char *)"files", .ops = &sfb_be_ops };
    int fd;

    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/a.txt", dir);
    fd = open(path, O_WRONLY | O_CREAT, 0644);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "static bytes\n", 13), 13);
    close(fd);
    sb_init(&err, ebuf, sizeof ebuf);
    sfb = sfb_new_params(dir, &err);
    ck_assert_msg(sfb != NULL, "%s", ebuf);
    be.ops_priv = sfb;
    req.http->url = TXT_LIT("/a.txt");
    dlv_local(&req, &be);
    ck_assert_uint_eq(seen.status, 200);
    ck_assert_uint_eq(seen.len, 13);
    ck_assert_uint_eq(seen.blen, 13);
    ck_assert(memcmp(seen.body, "static bytes\n", 13) == 0);
    ck_assert_int_eq(req.outcome, REQ_O_STATIC);
    ck_assert_str_eq(req.be_name, "files");
    /* A range of it. */
    setup();
    req.http->url = TXT_LIT("/a.txt");
    add(req.http, "Range", "bytes=-6");
    dlv_local(&req, &be);
    ck_assert_uint_eq(seen.status, 206);
    ck_assert_uint_eq(seen.blen, 6);
    ck_assert(memcmp(seen.body, "bytes\n", 6) == 0);
    /* Refused: the core's own error page, with Allow. */
    setup();
    req.http->method = TXT_LIT("POST");
    req.http->url = TXT_LIT("/a.txt");
    dlv_local(&req, &be);
    ck_assert_uint_eq(seen.status, 405);
    ck_assert_ptr_nonnull(strstr(seen.fields, "Allow: GET, HEAD\r\n"));
    sfb_free(&sfb);
    unlink(path);
    rmdir(dir);
}
END_TEST

/* ---- hits: the stored head sent as stored, or decoded first ---- */

#define HIT_FIELDS                                                                                 \
    "Server: nginx/1.22.1\r\nDate: Fri, 27 Nov 2026 04:00:00 GMT\r\nContent-Type: text/plain\r\n"  \
    "Last-Modified: Fri, 27 Nov 2026 03:00:00 GMT\r\nExpires: Fri, 27 Nov 2026 05:00:00 GMT\r\n"  \
    "ETag: \"e1\"\r\nX-Odd:no space\r\nCache-Control: max-age=3600\r\n"

static void
hit_setup(void)
{
    cache_setup();
    memtp_req(&req, &wrk, wsbuf, sizeof wsbuf, hdrs, 16, "/x");
}

/* A published object at key with the status line sl, HIT_FIELDS and body. */
static void
hit_store(const char *key, const char *sl, const char *body)
{
    char head[1024];
    struct cobj *oc = cache_busy(key, strlen(key));

    snprintf(head, sizeof head, "%s\r\n" HIT_FIELDS "\r\n", sl);
    hsh_head_set(oc, head, strlen(head));
    oc->status = (uint16_t)atoi(sl + 9);
    cache_publish(&oc, body);
}

/* What a delivery of key's object at now got, through ops; with field f: v in the request. */
static void
hit(const char *key, const struct tp_ops *ops, double now, const char *f, const char *v)
{
    struct hsh_stale stale;
    struct cobj *oc;

    memtp_req(&req, &wrk, wsbuf, sizeof wsbuf, hdrs, 16, "/x");
    req.tp = ops;
    if (f != NULL)
        add(req.http, f, v);
    ck_assert_int_eq(cache_lookup(key, strlen(key), &oc, &stale), HSH_HIT);
    dlv_obj(&req, oc, now, NULL);
    hsh_deref(&oc);
}

/*
 * A hit sends the same bytes whether the transport takes the stored
 * fields encoded (h1t) or as text (h2t, a buffer): the stored fields as
 * they came, this delivery's own after them; a 304, a 206 and a 416 the
 * same; the reason as stored.
 */
START_TEST(hit_head_as_stored)
{
    static const struct {
        const char *f, *v;
        unsigned status;
        const char *body, *extra;
    } v[] = {
        { NULL, NULL, 200, "0123456789", "" },
        { "If-None-Match", "\"e1\"", 304, "", "" },
        { "If-None-Match", "\"e2\"", 200, "0123456789", "" },
        { "Range", "bytes=2-4", 206, "234", "Content-Range: bytes 2-4/10\r\n" },
        { "Range", "bytes=20-", 416, "", "Content-Range: bytes */10\r\n" },
    };
    double now = tim_real();
    char want[2048];
    const char *kinds[] = { "text", "stored" };

    hit_store("k1", "HTTP/1.1 200 Fine Thanks", "0123456789");
    for (size_t i = 0; i < ARRAY_LEN(v); i++) {
        for (int k = 0; k < 2; k++) {
            hit("k1", k == 0 ? &mem_ops : &mem_stored_ops, now, v[i].f, v[i].v);
            ck_assert_uint_eq(seen.heads, 1);
            ck_assert_uint_eq(seen.status, v[i].status);
            if (v[i].status == 200)
                ck_assert_str_eq(seen.reason, "Fine Thanks");
            snprintf(want, sizeof want,
                     HIT_FIELDS "%sAge: 0\r\nCache-Status: surogat; hit; ttl=60\r\n", v[i].extra);
            ck_assert_msg(strcmp(seen.fields, want) == 0, "%s, %s: got [%s]", kinds[k],
                          v[i].f != NULL ? v[i].f : "plain", seen.fields);
            ck_assert_uint_eq(seen.blen, strlen(v[i].body));
            ck_assert(memcmp(seen.body, v[i].body, seen.blen) == 0);
        }
    }
}
END_TEST

/*
 * A stored head the transport writes needs room in the workspace: with
 * less, the head is decoded by the deliverer as before, and with too
 * little even for that, a 500 as ever.
 */
START_TEST(hit_workspace_tight)
{
    static const size_t spare[] = { 400, 100 };
    struct hsh_stale stale;
    struct cobj *oc;

    hit_store("k2", "HTTP/1.1 200 OK", "0123456789");
    for (size_t i = 0; i < ARRAY_LEN(spare); i++) {
        memtp_req(&req, &wrk, wsbuf, sizeof wsbuf, hdrs, 16, "/x");
        req.tp = &mem_stored_ops;
        ck_assert_ptr_nonnull(ws_alloc(req.ws, ws_free_bytes(req.ws) - spare[i]));
        ck_assert_int_eq(cache_lookup("k2", 2, &oc, &stale), HSH_HIT);
        dlv_obj(&req, oc, tim_real(), NULL);
        hsh_deref(&oc);
        if (spare[i] > strlen("HTTP/1.1 200 OK\r\n" HIT_FIELDS "\r\n")) {
            ck_assert_uint_eq(seen.status, 200);
            ck_assert_ptr_nonnull(strstr(seen.fields, HIT_FIELDS "Age: "));
            ck_assert_uint_eq(seen.blen, 10);
        } else {
            ck_assert_uint_eq(seen.status, 500);
        }
    }
}
END_TEST

Suite *
dlv_suite(void)
{
    Suite *s = suite_create("dlv");
    TCase *tc = tcase_create("dlv");

    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, error_page_escapes_its_message);
    tcase_add_test(tc, send_bodiless_statuses);
    tcase_add_test(tc, synth_without_a_policy);
    tcase_add_test(tc, fetch_head_from_the_backend);
    tcase_add_test(tc, fetch_miss_answers_the_clients_condition);
    tcase_add_test(tc, fetch_miss_cuts_the_range);
    tcase_add_test(tc, fetch_failure_mid_body);
    tcase_add_test(tc, static_file);
    suite_add_tcase(s, tc);
    tc = tcase_create("hit");
    tcase_add_checked_fixture(tc, hit_setup, cache_teardown);
    tcase_add_test(tc, hit_head_as_stored);
    tcase_add_test(tc, hit_workspace_tight);
    suite_add_tcase(s, tc);
    return s;
}
