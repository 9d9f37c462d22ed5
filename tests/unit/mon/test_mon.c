/*
 * mon: what workers feed the admin listener.  Each request lands in
 * exactly one latency bucket (upper bounds inclusive) and adds to the sum;
 * the top-URL table samples one request in MON_TOP_SAMPLE, keeps a URL
 * that is asked for often even after a crowd of one-off URLs filled it,
 * and keeps out URLs that are not plain text.
 */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "unit.h"
#include "surogat/http.h"
#include "surogat/mon.h"
#include "surogat/req.h"
#include "surogat/stat.h"
#include "src/mon/mon_priv.h"

static struct req req;
static struct http_hdr hdrs[4];

static void
setup(void)
{
    if (stat_tls == NULL)
        stat_thread_enter();
    memset(&req, 0, sizeof req);
    req.magic = REQ_MAGIC;
    http_init(req.http, hdrs, 4);
    mon__top_clear();
}

/* One request of dt seconds for url; every one of them, sampled or not. */
static void
one(const char *url, double dt)
{
    req.http->url.b = url;
    req.http->url.len = strlen(url);
    req.t_mono = 0; /* so that dt is exact at the bucket bounds */
    req.t_end = dt;
    mon_req_end(&req);
}

START_TEST(each_request_in_one_bucket)
{
    static const struct {
        double dt;
        enum stat_id want;
    } v[] = {
        { 0, STAT_req_time_le_500us },    { 0.0005, STAT_req_time_le_500us },
        { 0.0006, STAT_req_time_le_1ms }, { 0.003, STAT_req_time_le_5ms },
        { 0.1, STAT_req_time_le_100ms },  { 0.3, STAT_req_time_le_500ms },
        { 10, STAT_req_time_le_10s },     { 11, STAT_req_time_over_10s },
        { -1, STAT_req_time_le_500us }, /* a clock step back counts as instant */
    };
    struct stat_block before, after;

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        stat_sum(&before);
        one("/x", v[i].dt);
        stat_sum(&after);
        for (unsigned b = 0; b < MON_NBUCKET; b++) {
            enum stat_id id = MON_BUCKET_STAT(b);
            ck_assert_uint_eq(after.v[id] - before.v[id], id == v[i].want ? 1 : 0);
        }
        ck_assert_uint_eq(after.v[STAT_req_time_us] - before.v[STAT_req_time_us],
                          v[i].dt > 0 ? (uint64_t)(v[i].dt * 1e6 + 0.5) : 0);
    }
}
END_TEST

/* Each answer in its status class; none for a client gone before any. */
START_TEST(status_classes)
{
    static const unsigned st[] = { 101, 200, 204, 301, 304, 404, 400, 500, 503, 0, 999 };
    static const unsigned want[5] = { 1, 2, 2, 2, 2 };
    struct stat_block before, after;

    stat_sum(&before);
    for (size_t i = 0; i < sizeof st / sizeof st[0]; i++) {
        req.status = st[i];
        one("/s", 0.001);
    }
    stat_sum(&after);
    for (unsigned c = 0; c < 5; c++)
        ck_assert_uint_eq(after.v[STAT_client_resp_1xx + c] - before.v[STAT_client_resp_1xx + c],
                          want[c]);
}
END_TEST

START_TEST(samples_one_in_n)
{
    struct mon_top top[MON_TOP_K];
    unsigned n;

    for (unsigned i = 0; i < 10 * MON_TOP_SAMPLE; i++)
        one("/a", 0.001);
    n = mon__top_copy(top, MON_TOP_K);
    ck_assert_uint_eq(n, 1);
    ck_assert_str_eq(top[0].url, "/a");
    ck_assert_uint_eq(top[0].count, 10);
    ck_assert_uint_eq(top[0].err, 0);
}
END_TEST

START_TEST(hot_url_survives_a_crowd)
{
    struct mon_top top[MON_TOP_K];
    char url[32];
    unsigned n;

    /* Three times as many one-off URLs as the table holds, each sampled once. */
    for (unsigned i = 0; i < 3 * MON_TOP_K; i++) {
        snprintf(url, sizeof url, "/once/%u", i);
        for (unsigned j = 0; j < MON_TOP_SAMPLE; j++)
            one(url, 0.001);
    }
    /* A URL seen in more than samples / MON_TOP_K samples must be in the table. */
    for (unsigned i = 0; i < 20 * MON_TOP_SAMPLE; i++)
        one("/hot", 0.001);
    n = mon__top_copy(top, MON_TOP_K);
    ck_assert_uint_eq(n, MON_TOP_K);
    ck_assert_str_eq(top[0].url, "/hot");
    ck_assert_uint_ge(top[0].count, 20);
    ck_assert_uint_le(top[0].count - top[0].err, 20);
    for (unsigned i = 1; i < n; i++)
        ck_assert_uint_le(top[i].count, top[i - 1].count);
}
END_TEST

START_TEST(only_plain_urls_capped)
{
    struct mon_top top[MON_TOP_K];
    char longurl[400];
    unsigned n;

    one("/with space", 0.001);
    for (unsigned j = 1; j < MON_TOP_SAMPLE; j++)
        one("/x", 0.001);
    one("/caf\xc3\xa9", 0.001);
    for (unsigned j = 1; j < MON_TOP_SAMPLE; j++)
        one("/x", 0.001);
    memset(longurl, 'a', sizeof longurl - 1);
    longurl[0] = '/';
    longurl[sizeof longurl - 1] = '\0';
    one(longurl, 0.001);
    n = mon__top_copy(top, MON_TOP_K);
    ck_assert_uint_eq(n, 1);
    ck_assert_uint_eq(strlen(top[0].url), MON_URL_MAX - 1);
    ck_assert_int_eq(strncmp(top[0].url, longurl, MON_URL_MAX - 1), 0);
}
END_TEST

Suite *
mon_suite(void)
{
    Suite *s = suite_create("mon");
    TCase *tc = tcase_create("feed");

    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, each_request_in_one_bucket);
    tcase_add_test(tc, samples_one_in_n);
    tcase_add_test(tc, status_classes);
    tcase_add_test(tc, hot_url_survives_a_crowd);
    tcase_add_test(tc, only_plain_urls_capped);
    suite_add_tcase(s, tc);
    return s;
}
