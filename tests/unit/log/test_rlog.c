/*
 * rlog: the per-worker request rings and their readers.  A reader gets
 * every record once, in order, and counts what was overwritten before it
 * got there, never delivering a torn record; a ring keeps its history
 * across workers.  Also the access log's format compiler, through
 * alog_format_line(), and the JSON escaping both logs share.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unit.h"
#include "surogat/alog.h"
#include "surogat/http.h"
#include "surogat/req.h"
#include "surogat/rlog.h"
#include "surogat/sb.h"
#include "surogat/sess.h"

struct got {
    unsigned n;
    uint64_t bytes[4096];
};

static void
collect(const struct rlog_rec *rec, void *priv)
{
    struct got *g = priv;

    ck_assert_uint_lt(g->n, 4096);
    g->bytes[g->n++] = rec->bytes;
}

static void
put_n(struct rlog_ring *r, uint64_t from, uint64_t n)
{
    struct rlog_rec rec;

    memset(&rec, 0, sizeof rec);
    for (uint64_t i = from; i < from + n; i++) {
        rec.bytes = i;
        rec.status = 200;
        snprintf(rec.url, sizeof rec.url, "/%llu", (unsigned long long)i);
        rlog_put(r, &rec);
    }
}

START_TEST(history_and_live)
{
    static struct got g;
    struct rlog_reader *old, *now;
    struct rlog_ring *r;
    uint64_t missed = 0;

    ck_assert_int_eq(rlog_init(64), 0);
    r = rlog_ring_get();
    put_n(r, 0, 3);
    old = rlog_reader_new(true);
    now = rlog_reader_new(false);
    ck_assert_uint_eq(rlog_reader_poll(old, collect, &g, &missed), 3);
    ck_assert_uint_eq(g.bytes[0], 0);
    ck_assert_uint_eq(g.bytes[2], 2);
    ck_assert_uint_eq(rlog_reader_poll(now, collect, &g, &missed), 0);
    put_n(r, 3, 2);
    g.n = 0;
    ck_assert_uint_eq(rlog_reader_poll(now, collect, &g, &missed), 2);
    ck_assert_uint_eq(g.bytes[0], 3);
    ck_assert_uint_eq(g.bytes[1], 4);
    g.n = 0;
    ck_assert_uint_eq(rlog_reader_poll(old, collect, &g, &missed), 2);
    ck_assert_uint_eq(rlog_reader_poll(old, collect, &g, &missed), 0);
    ck_assert_uint_eq(missed, 0);
    rlog_reader_free(&old);
    rlog_reader_free(&now);
    ck_assert_ptr_null(old);
    rlog_ring_put(&r);
    rlog_fini();
}
END_TEST

START_TEST(wraparound_and_reader_behind)
{
    static struct got g;
    struct rlog_reader *rd, *hist;
    struct rlog_ring *r;
    uint64_t missed = 0;

    ck_assert_int_eq(rlog_init(5), 0); /* rounded up to 8 */
    r = rlog_ring_get();
    rd = rlog_reader_new(false);
    put_n(r, 0, 5);
    ck_assert_uint_eq(rlog_reader_poll(rd, collect, &g, &missed), 5);
    put_n(r, 5, 30); /* 35 written, 8 held: 27 .. 34 */
    g.n = 0;
    ck_assert_uint_eq(rlog_reader_poll(rd, collect, &g, &missed), 8);
    ck_assert_uint_eq(missed, 22);
    for (unsigned i = 0; i < 8; i++)
        ck_assert_uint_eq(g.bytes[i], 27 + i);
    /* History is what the ring still holds; what it no longer holds is not "missed". */
    hist = rlog_reader_new(true);
    g.n = 0;
    missed = 0;
    ck_assert_uint_eq(rlog_reader_poll(hist, collect, &g, &missed), 8);
    ck_assert_uint_eq(g.bytes[0], 27);
    ck_assert_uint_eq(missed, 0);
    rlog_reader_free(&rd);
    rlog_reader_free(&hist);
    rlog_ring_put(&r);
    rlog_fini();
}
END_TEST

START_TEST(ring_outlives_its_worker)
{
    static struct got g;
    struct rlog_ring *a, *b, *c;
    struct rlog_reader *rd;
    uint64_t missed = 0;

    ck_assert_int_eq(rlog_init(16), 0);
    a = rlog_ring_get();
    b = rlog_ring_get();
    ck_assert_ptr_ne(a, b);
    put_n(a, 100, 2);
    put_n(b, 200, 1);
    rlog_ring_put(&a);
    ck_assert_ptr_null(a);
    c = rlog_ring_get(); /* a new worker takes the exited one's ring, history and all */
    put_n(c, 102, 1);
    rd = rlog_reader_new(true);
    ck_assert_uint_eq(rlog_reader_poll(rd, collect, &g, &missed), 4);
    ck_assert_uint_eq(missed, 0);
    /* Per ring in order: 100 101 102 somewhere, 200 somewhere. */
    for (unsigned i = 0, last = 0; i < g.n; i++) {
        if (g.bytes[i] >= 100 && g.bytes[i] < 200) {
            ck_assert_uint_gt(g.bytes[i] + 1, last);
            last = (unsigned)g.bytes[i] + 1;
        }
    }
    /* Too late to resize once a ring exists. */
    ck_assert_int_eq(rlog_init(1024), -1);
    rlog_reader_free(&rd);
    rlog_ring_put(&b);
    rlog_ring_put(&c);
    rlog_fini();
}
END_TEST

/*
 * One writer at full speed, one reader polling: every record delivered
 * is whole (its fields agree with each other), in order, and delivered
 * plus missed is exactly what was written.
 */
#define CONC_N 300000

struct conc {
    struct rlog_ring *r;
    int done;
    uint64_t next, got, bad;
};

static void *
writer(void *priv)
{
    struct conc *c = priv;
    struct rlog_rec rec;

    memset(&rec, 0, sizeof rec);
    for (uint64_t i = 0; i < CONC_N; i++) {
        rec.bytes = i;
        rec.hooks = (uint32_t)(i * 2654435761u);
        rec.status = (uint16_t)(100 + i % 900);
        snprintf(rec.url, sizeof rec.url, "/obj/%llu/%0*d", (unsigned long long)i, (int)(i % 200),
                 0);
        rlog_put(c->r, &rec);
    }
    __atomic_store_n(&c->done, 1, __ATOMIC_RELEASE);
    return (NULL);
}

static void
check(const struct rlog_rec *rec, void *priv)
{
    struct conc *c = priv;
    char want[RLOG_URL_MAX];
    uint64_t i = rec->bytes;

    snprintf(want, sizeof want, "/obj/%llu/%0*d", (unsigned long long)i, (int)(i % 200), 0);
    if (rec->hooks != (uint32_t)(i * 2654435761u) || rec->status != 100 + i % 900 ||
        strcmp(rec->url, want) != 0 || i < c->next)
        c->bad++;
    c->next = i + 1;
    c->got++;
}

START_TEST(concurrent_writer_and_reader)
{
    struct conc c = { 0 };
    struct rlog_reader *rd;
    uint64_t missed = 0;
    pthread_t t;

    ck_assert_int_eq(rlog_init(256), 0);
    c.r = rlog_ring_get();
    rd = rlog_reader_new(false);
    ck_assert_int_eq(pthread_create(&t, NULL, writer, &c), 0);
    while (!__atomic_load_n(&c.done, __ATOMIC_ACQUIRE))
        (void)rlog_reader_poll(rd, check, &c, &missed);
    (void)rlog_reader_poll(rd, check, &c, &missed);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    ck_assert_uint_eq(c.bad, 0);
    ck_assert_uint_eq(c.got + missed, CONC_N);
    ck_assert_uint_gt(c.got, 0);
    ck_assert_uint_eq(c.next, CONC_N); /* the last record is always there at the end */
    rlog_reader_free(&rd);
    rlog_ring_put(&c.r);
    rlog_fini();
}
END_TEST

START_TEST(json_and_hooks)
{
    char buf[256];
    struct sb sb;

    sb_init(&sb, buf, sizeof buf);
    rlog_json_str(&sb, "a\"b\\c\n\x01\xff/", 9);
    ck_assert_str_eq(buf, "\"a\\\"b\\\\c\\u000a\\u0001\\u00ff/\"");
    sb_init(&sb, buf, sizeof buf);
    rlog_hooks_cat(&sb, 0);
    ck_assert_str_eq(buf, "-");
    sb_init(&sb, buf, sizeof buf);
    rlog_hooks_cat(&sb, 1u << 0 | 1u << 1 | 1u << 3 | 1u << 31);
    ck_assert_str_eq(buf, "recv,hash,deliver");
    ck_assert_str_eq(rlog_hook_name(12), "purge");
    ck_assert_ptr_null(rlog_hook_name(13));
    sb_init(&sb, buf, sizeof buf);
    rlog_json_time(&sb, 1795000000.25);
    ck_assert_str_eq(buf, "\"2026-11-18T11:06:40.250Z\"");
}
END_TEST

/*--------------------------------------------------------------------
 * The access log's formats, on a request built by hand.
 */

static struct sess sess;
static struct req req;
static struct http_hdr hdrs[8];

static void
fake_req(void)
{
    memset(&req, 0, sizeof req);
    memset(&sess, 0, sizeof sess);
    req.magic = REQ_MAGIC;
    req.sp = &sess;
    strcpy(sess.client_ip, "192.0.2.7");
    strcpy(sess.client_port, "40123");
    http_init(req.http, hdrs, 8);
    req.http->method = TXT_LIT("GET");
    req.http->url = TXT_LIT("/a/b?x=1");
    req.http->proto = 11;
    ck_assert_int_eq(http_add(req.http, TXT_LIT("Host"), TXT_LIT("example.com")), 0);
    ck_assert_int_eq(http_add(req.http, TXT_LIT("User-Agent"), TXT_LIT("say \"hi\"")), 0);
    req.status = 200;
    req.resp_bytes = 1234;
    req.t_start = 1795000000;
    req.t_mono = 10;
    req.t_first = 10.25;
    req.t_end = 11.5;
    req.outcome = REQ_O_HIT;
    req.be_name = "web1";
    req.restarts = 1;
    req.hooks = 1u << 0 | 1u << 3;
}

static const char *
fmt(const char *format, char *buf, size_t len)
{
    char ebuf[200];
    struct sb sb, err;

    sb_init(&sb, buf, len);
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_msg(alog_format_line(format, &req, &sb, &err) == 0, "%s", ebuf);
    return (buf);
}

START_TEST(access_formats)
{
    char buf[2048];

    fake_req();
    ck_assert_str_eq(fmt("combined", buf, sizeof buf),
                     "192.0.2.7 - - [18/Nov/2026:11:06:40 +0000] \"GET /a/b?x=1 HTTP/1.1\" 200 "
                     "1234 \"-\" \"say \\x22hi\\x22\" 1500000 250000 web1 HIT");
    ck_assert_str_eq(fmt("%a:%{port}x %m %U|%q %H %s %B %b %T %{ms}T %{us}T %{hooks}x "
                         "%{restarts}x/%{retries}x 100%% %{Host}i %{X-None}i",
                         buf, sizeof buf),
                     "192.0.2.7:40123 GET /a/b|?x=1 HTTP/1.1 200 1234 1234 1 1500 1500000 "
                     "recv,deliver 1/0 100% example.com -");
    req.resp_bytes = 0;
    ck_assert_str_eq(fmt("%b %B", buf, sizeof buf), "- 0");
    /* A request whose line could not be read. */
    req.http->method.len = 0;
    ck_assert_str_eq(fmt("\"%r\" %m %{Host}i", buf, sizeof buf), "\"-\" - -");
}
END_TEST

START_TEST(access_json)
{
    char buf[2048];

    fake_req();
    ck_assert_str_eq(fmt("json", buf, sizeof buf),
                     "{\"time\":\"2026-11-18T11:06:40.000Z\",\"client\":\"192.0.2.7\","
                     "\"port\":40123,\"method\":\"GET\",\"url\":\"/a/b?x=1\","
                     "\"proto\":\"HTTP/1.1\",\"host\":\"example.com\",\"status\":200,"
                     "\"bytes\":1234,\"referer\":null,\"user_agent\":\"say \\\"hi\\\"\","
                     "\"duration_us\":1500000,\"ttfb_us\":250000,\"cache\":\"HIT\","
                     "\"backend\":\"web1\",\"restarts\":1,\"retries\":0,"
                     "\"hooks\":[\"recv\",\"deliver\"]}");
}
END_TEST

START_TEST(access_bad_formats)
{
    static const char *const bad[] = { "%z", "%{Host", "%{nope}x", "%{}i", "%{ms}D", "abc %" };
    char buf[256], ebuf[200];
    struct sb sb, err;

    fake_req();
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sb_init(&sb, buf, sizeof buf);
        sb_init(&err, ebuf, sizeof ebuf);
        ck_assert_msg(alog_format_line(bad[i], &req, &sb, &err) == -1, "%s accepted", bad[i]);
        ck_assert_msg(strstr(ebuf, "access_log_format") != NULL, "%s: %s", bad[i], ebuf);
    }
}
END_TEST

Suite *
rlog_suite(void)
{
    Suite *s = suite_create("rlog");
    TCase *tc = tcase_create("ring");
    TCase *ta = tcase_create("alog");

    tcase_add_test(tc, history_and_live);
    tcase_add_test(tc, wraparound_and_reader_behind);
    tcase_add_test(tc, ring_outlives_its_worker);
    tcase_add_test(tc, concurrent_writer_and_reader);
    tcase_add_test(tc, json_and_hooks);
    suite_add_tcase(s, tc);
    tcase_add_test(ta, access_formats);
    tcase_add_test(ta, access_json);
    tcase_add_test(ta, access_bad_formats);
    suite_add_tcase(s, ta);
    return (s);
}
