/*
 * h2t_hdr: RFC 9113 section 8 checks of request header blocks, field by
 * field as the reader decodes them, and the request they become.
 */
#include <string.h>

#include "unit.h"
#include "surogat/defs.h"
#include "surogat/http.h"
#include "surogat/par.h"
#include "src/proto/h2t_priv.h"

struct f {
    const char *n, *v;
};

/* Decode a block of NUL-terminated fields (values may hold NUL: give vlen). */
static enum h2_verdict
block(struct h2_hdrs *h, const struct f *fs, size_t n)
{
    memset(h, 0, sizeof *h);
    for (size_t i = 0; i < n; i++)
        h2t__hdr_field(h, (const uint8_t *)fs[i].n, strlen(fs[i].n), (const uint8_t *)fs[i].v,
                       strlen(fs[i].v));
    h2t__hdr_end(h);
    return (h->verdict);
}

#define BASE                                                                              \
    { ":method", "GET" }, { ":scheme", "https" }, { ":authority", "a.test" },             \
    {                                                                                     \
        ":path", "/x?y"                                                                   \
    }

static void
setup(void)
{
    par_init();
}

START_TEST(well_formed)
{
    struct f fs[] = { BASE, { "accept", "*/*" }, { "cookie", "a=1" }, { "x-b", "in side" },
                      { "cookie", "b=2" }, { "te", "trailers" } };
    struct http_hdr hdrs[16];
    struct http hp;
    struct h2_hdrs h;

    ck_assert_int_eq(block(&h, fs, ARRAY_LEN(fs)), H2_OK);
    http_init(&hp, hdrs, 16);
    ck_assert_int_eq(h2t__hdr_request(&h, &hp), 0);
    ck_assert(hp.method.len == 3 && memcmp(hp.method.b, "GET", 3) == 0);
    ck_assert(hp.url.len == 4 && memcmp(hp.url.b, "/x?y", 4) == 0);
    ck_assert_uint_eq(hp.proto, 20);
    /* :authority is the Host; TE is not passed on; cookie crumbs are one field */
    ck_assert(http_value(&hp, "Host") != NULL && http_value(&hp, "Host")->len == 6);
    ck_assert(http_find(&hp, "te") == NULL);
    ck_assert_uint_eq(http_count(&hp, "cookie"), 1);
    ck_assert(http_value(&hp, "cookie")->len == 8 &&
              memcmp(http_value(&hp, "cookie")->b, "a=1; b=2", 8) == 0);
    ck_assert_uint_eq(hp.nhdr, 4); /* accept, cookie, x-b, Host */
    h2t__hdr_free(&h);
}
END_TEST

START_TEST(pseudo_rules)
{
    static const struct {
        struct f fs[6];
        size_t n;
    } v[] = {
        { { { ":scheme", "http" }, { ":authority", "a" }, { ":path", "/" } }, 3 },
        { { { ":method", "GET" }, { ":authority", "a" }, { ":path", "/" } }, 3 },
        { { { ":method", "GET" }, { ":scheme", "http" }, { ":authority", "a" } }, 3 },
        { { BASE, { ":path", "/" } }, 5 },
        { { { ":method", "GET" }, { "x", "1" }, { ":scheme", "http" }, { ":path", "/" } }, 4 },
        { { BASE, { ":status", "200" } }, 5 },
        { { BASE, { ":protocol", "websocket" } }, 5 },
        { { { ":method", "GET" }, { ":scheme", "http" }, { ":path", "" } }, 3 },
        { { { ":method", "GET" }, { ":scheme", "http" }, { ":path", "/a b" } }, 3 },
        { { { ":method", "GET" }, { ":scheme", "http" }, { ":path", "a" } }, 3 },
        { { { ":method", "GET" }, { ":scheme", "http" }, { ":path", "*" } }, 3 },
        { { { ":method", "G T" }, { ":scheme", "http" }, { ":path", "/" } }, 3 },
        { { { ":method", "CONNECT" }, { ":authority", "a:1" }, { ":path", "/" } }, 3 },
    };
    struct h2_hdrs h;

    for (size_t i = 0; i < ARRAY_LEN(v); i++) {
        ck_assert_msg(block(&h, v[i].fs, v[i].n) == H2_BAD_PSEUDO, "case %zu: %d", i,
                      h.verdict);
        h2t__hdr_free(&h);
    }
}
END_TEST

START_TEST(field_rules)
{
    static const struct f bad[] = {
        { "X-Up", "1" },           { "connection", "close" }, { "keep-alive", "1" },
        { "proxy-connection", "x" }, { "transfer-encoding", "chunked" },
        { "upgrade", "h2c" },      { "te", "gzip" },         { "x", " lead" },
        { "x", "trail\t" },        { "x:y", "1" },           { "x y", "1" },
        { "", "1" },               { "content-length", "-1" }, { "content-length", "" },
        { "x\"y", "1" },
    };
    struct h2_hdrs h;

    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        struct f fs[] = { BASE, bad[i] };
        ck_assert_msg(block(&h, fs, ARRAY_LEN(fs)) == H2_BAD_FIELD, "%s: %s -> %d", bad[i].n,
                      bad[i].v, h.verdict);
        h2t__hdr_free(&h);
    }
    /* CR, LF and NUL in a value, which strlen() cannot carry */
    for (int i = 0; i < 3; i++) {
        const uint8_t val[3] = { 'a', (uint8_t)("\r\n\0"[i]), 'b' };
        struct f fs[] = { BASE };
        memset(&h, 0, sizeof h);
        for (size_t k = 0; k < ARRAY_LEN(fs); k++)
            h2t__hdr_field(&h, (const uint8_t *)fs[k].n, strlen(fs[k].n),
                           (const uint8_t *)fs[k].v, strlen(fs[k].v));
        h2t__hdr_field(&h, (const uint8_t *)"x-a", 3, val, 3);
        h2t__hdr_end(&h);
        ck_assert_int_eq(h.verdict, H2_BAD_FIELD);
        h2t__hdr_free(&h);
    }
    /* two content-lengths that agree are one; that disagree, malformed */
    {
        struct f ok[] = { BASE, { "content-length", "5" }, { "content-length", "5" } };
        struct f ko[] = { BASE, { "content-length", "5" }, { "content-length", "6" } };
        ck_assert_int_eq(block(&h, ok, ARRAY_LEN(ok)), H2_OK);
        ck_assert(h.has_clen && h.clen == 5);
        h2t__hdr_free(&h);
        ck_assert_int_eq(block(&h, ko, ARRAY_LEN(ko)), H2_BAD_FIELD);
        h2t__hdr_free(&h);
    }
}
END_TEST

START_TEST(answered)
{
    struct f host_differs[] = { BASE, { "host", "b.test" } };
    struct f host_same[] = { BASE, { "host", "A.TEST" } };
    struct f no_host[] = { { ":method", "GET" }, { ":scheme", "http" }, { ":path", "/" } };
    struct f host_only[] = { { ":method", "GET" }, { ":scheme", "http" }, { ":path", "/" },
                             { "host", "h.test" } };
    struct f two_hosts[] = { BASE, { "host", "a.test" }, { "host", "a.test" } };
    struct f connect[] = { { ":method", "CONNECT" }, { ":authority", "a.test:443" } };
    struct f expect[] = { BASE, { "expect", "202-accepted" } };
    struct f cont[] = { BASE, { "expect", "100-continue" } };
    struct f options[] = { { ":method", "OPTIONS" }, { ":scheme", "http" }, { ":path", "*" },
                           { ":authority", "a" } };
    struct h2_hdrs h;

    ck_assert_int_eq(block(&h, host_differs, ARRAY_LEN(host_differs)), H2_ANSWER_400);
    h2t__hdr_free(&h);
    ck_assert_int_eq(block(&h, host_same, ARRAY_LEN(host_same)), H2_OK);
    h2t__hdr_free(&h);
    ck_assert_int_eq(block(&h, no_host, ARRAY_LEN(no_host)), H2_ANSWER_400);
    h2t__hdr_free(&h);
    ck_assert_int_eq(block(&h, host_only, ARRAY_LEN(host_only)), H2_OK);
    h2t__hdr_free(&h);
    ck_assert_int_eq(block(&h, two_hosts, ARRAY_LEN(two_hosts)), H2_ANSWER_400);
    h2t__hdr_free(&h);
    ck_assert_int_eq(block(&h, connect, ARRAY_LEN(connect)), H2_ANSWER_501);
    h2t__hdr_free(&h);
    ck_assert_int_eq(block(&h, expect, ARRAY_LEN(expect)), H2_ANSWER_417);
    h2t__hdr_free(&h);
    ck_assert_int_eq(block(&h, cont, ARRAY_LEN(cont)), H2_OK);
    ck_assert(h.expect_100);
    h2t__hdr_free(&h);
    ck_assert_int_eq(block(&h, options, ARRAY_LEN(options)), H2_OK);
    h2t__hdr_free(&h);
}
END_TEST

START_TEST(sizes)
{
    char big[4000];
    struct f fs[40] = { BASE };
    struct h2_hdrs h;
    size_t n = 4;

    /* the decoded list over http_req_size (an HPACK bomb decodes to this): 431 */
    par.http_req_size = 32 * 1024;
    memset(big, 'b', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    while (n < 14)
        fs[n++] = (struct f){ "x-bomb", big };
    ck_assert_int_eq(block(&h, fs, n), H2_ANSWER_431);
    ck_assert(h.hb_len < 2 * par.http_req_size + 1024); /* nothing kept past the limit */
    h2t__hdr_free(&h);
    /* more fields than http_max_hdr: 431 */
    par.http_max_hdr = 8;
    n = 4;
    while (n < 13)
        fs[n++] = (struct f){ "x-a", "1" };
    ck_assert_int_eq(block(&h, fs, n), H2_ANSWER_431);
    h2t__hdr_free(&h);
    /* one field over http_req_hdr_len: 431 */
    par.http_max_hdr = 64;
    par.http_req_hdr_len = 1000;
    fs[4] = (struct f){ "x-a", big };
    ck_assert_int_eq(block(&h, fs, 5), H2_ANSWER_431);
    h2t__hdr_free(&h);
    /* a malformed field wins over a size: it is a stream error */
    fs[5] = (struct f){ "Upper", "1" };
    ck_assert_int_eq(block(&h, fs, 6), H2_BAD_FIELD);
    h2t__hdr_free(&h);
}
END_TEST

START_TEST(trailers)
{
    struct h2_hdrs h;

    memset(&h, 0, sizeof h);
    h.trailers = true;
    h2t__hdr_field(&h, (const uint8_t *)"x-sum", 5, (const uint8_t *)"1", 1);
    h2t__hdr_end(&h);
    ck_assert_int_eq(h.verdict, H2_OK);
    ck_assert_uint_eq(h.nf, 0); /* checked, not kept */
    h2t__hdr_field(&h, (const uint8_t *)":path", 5, (const uint8_t *)"/", 1);
    ck_assert_int_eq(h.verdict, H2_BAD_PSEUDO);
    h2t__hdr_free(&h);
}
END_TEST

Suite *
h2t_hdr_suite(void)
{
    Suite *s = suite_create("h2t_hdr");
    TCase *tc = tcase_create("core");

    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, well_formed);
    tcase_add_test(tc, pseudo_rules);
    tcase_add_test(tc, field_rules);
    tcase_add_test(tc, answered);
    tcase_add_test(tc, sizes);
    tcase_add_test(tc, trailers);
    suite_add_tcase(s, tc);
    return (s);
}
