/*
 * pp: the PROXY protocol header parser and writer, with byte-exact
 * vectors from HAProxy's proxy-protocol.txt (versions 1 and 2), every
 * error it names, every prefix of a valid header (PP_MORE, never an
 * error), CRC32C, and the header a backend gets written back.
 */
#include <arpa/inet.h>
#include <string.h>

#include "unit.h"
#include "surogat/pp.h"

#define LIT(s) (const uint8_t *)(s), sizeof(s) - 1

static enum pp_status
parse(const uint8_t *b, size_t n, struct pp_hdr *h, size_t *used)
{
    *used = 0;
    memset(h, 0xa5, sizeof *h); /* the parser must fill what it reports */
    return (pp_parse(b, n, h, used));
}

static void
want_v4(const struct pp_hdr *h, const char *src, const char *dst, unsigned sp, unsigned dp)
{
    char a[INET6_ADDRSTRLEN];

    ck_assert_int_eq(h->family, AF_INET);
    ck_assert(!h->local);
    ck_assert_ptr_nonnull(inet_ntop(AF_INET, &h->src.in4, a, sizeof a));
    ck_assert_str_eq(a, src);
    ck_assert_ptr_nonnull(inet_ntop(AF_INET, &h->dst.in4, a, sizeof a));
    ck_assert_str_eq(a, dst);
    ck_assert_uint_eq(h->src_port, sp);
    ck_assert_uint_eq(h->dst_port, dp);
}

/* Every strict prefix of a valid header is PP_MORE: a header split over packets is fine. */
static void
prefixes_more(const uint8_t *b, size_t n)
{
    struct pp_hdr h;
    size_t used;

    for (size_t i = 0; i < n; i++)
        ck_assert_msg(parse(b, i, &h, &used) == PP_MORE, "prefix %zu of %zu", i, n);
}

START_TEST(v1_spec_example)
{
    static const char in[] = "PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n"
                             "GET / HTTP/1.1\r\nHost: 192.168.0.11\r\n\r\n";
    struct pp_hdr h;
    size_t used;

    ck_assert_int_eq(parse(LIT(in), &h, &used), PP_DONE);
    ck_assert_uint_eq(used, 47); /* the bytes after it are the request's */
    ck_assert_uint_eq(h.version, 1);
    want_v4(&h, "192.168.0.1", "192.168.0.11", 56324, 443);
    ck_assert(memcmp(in + used, "GET / ", 6) == 0);
    prefixes_more((const uint8_t *)in, used);
}
END_TEST

START_TEST(v1_tcp6_and_unknown)
{
    static const char six[] = "PROXY TCP6 2001:db8::1 ::ffff:c000:201 65535 0\r\n";
    static const char worst[] = "PROXY UNKNOWN ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff "
                                "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff 65535 65535\r\n";
    struct pp_hdr h;
    size_t used;
    char a[INET6_ADDRSTRLEN];

    ck_assert_int_eq(parse(LIT(six), &h, &used), PP_DONE);
    ck_assert_uint_eq(used, sizeof six - 1);
    ck_assert_int_eq(h.family, AF_INET6);
    ck_assert_ptr_nonnull(inet_ntop(AF_INET6, &h.src.in6, a, sizeof a));
    ck_assert_str_eq(a, "2001:db8::1");
    ck_assert_uint_eq(h.src_port, 65535);
    ck_assert_uint_eq(h.dst_port, 0);

    ck_assert_int_eq(parse(LIT("PROXY UNKNOWN\r\n"), &h, &used), PP_DONE);
    ck_assert_uint_eq(used, 15);
    ck_assert(h.local);
    /* The specification's worst case, 107 bytes, is the longest line taken. */
    ck_assert_uint_eq(sizeof worst - 1, PP_V1_MAX);
    ck_assert_int_eq(parse(LIT(worst), &h, &used), PP_DONE);
    ck_assert_uint_eq(used, PP_V1_MAX);
    ck_assert(h.local);
}
END_TEST

START_TEST(v1_bad)
{
    static const char *const bad[] = {
        "PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n",        /* LF alone */
        "PROXY TCP4 1.2.3.4 5.6.7.8 1 2\rX",       /* CR alone */
        "PROXY TCP4  1.2.3.4 5.6.7.8 1 2\r\n",     /* two spaces */
        "PROXY TCP4 1.2.3.4 5.6.7.8 1 2 \r\n",     /* trailing space */
        "PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n",        /* a port short */
        "PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n",    /* a field too many */
        "PROXY TCP4 01.2.3.4 5.6.7.8 1 2\r\n",     /* leading zero in an address */
        "PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n",     /* leading zero in a port */
        "PROXY TCP4 1.2.3.4 5.6.7.8 1 65536\r\n",  /* port out of range */
        "PROXY TCP4 1.2.3.256 5.6.7.8 1 2\r\n",    /* octet out of range */
        "PROXY TCP4 ::1 ::2 1 2\r\n",              /* family mismatch */
        "PROXY TCP6 1.2.3.4 5.6.7.8 1 2\r\n",      /* family mismatch */
        "PROXY TCP6 ::ffff:1.2.3.4 ::1 1 2\r\n",   /* not hex groups */
        "PROXY TCP6 fe80::1%eth0 ::1 1 2\r\n",     /* scope */
        "PROXY TCP4 1.2.3.4 5.6.7.8 -1 2\r\n",     /* sign */
        "PROXY UDP4 1.2.3.4 5.6.7.8 1 2\r\n",      /* protocol */
        "PROXY tcp4 1.2.3.4 5.6.7.8 1 2\r\n",      /* case */
        "PROXY TCP4 garbage after the family\r\n", /* garbage after PROXY TCP4 */
        "PROXYTCP4 1.2.3.4 5.6.7.8 1 2\r\n",       /* no space */
        "PROXY UNKNOWNX\r\n",                      /* not the keyword */
        "PROXY TCP4 1.2.3.4\x01 5.6.7.8 1 2\r\n",  /* control byte */
        "PROXY \r\n",
    };
    struct pp_hdr h;
    size_t used;

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(parse((const uint8_t *)bad[i], strlen(bad[i]), &h, &used) == PP_E_SYNTAX,
                      "accepted %s", bad[i]);
}
END_TEST

START_TEST(v1_too_long_and_not_proxy)
{
    uint8_t buf[200];
    struct pp_hdr h;
    size_t used;

    memcpy(buf, "PROXY UNKNOWN ", 14);
    memset(buf + 14, 'a', sizeof buf - 14);
    ck_assert_int_eq(parse(buf, 106, &h, &used), PP_MORE);
    ck_assert_int_eq(parse(buf, 107, &h, &used), PP_E_TOO_LONG);
    /* CRLF as bytes 107 and 108: one byte over. */
    buf[106] = '\r';
    buf[107] = '\n';
    ck_assert_int_eq(parse(buf, 108, &h, &used), PP_E_TOO_LONG);
    buf[105] = '\r';
    buf[106] = '\n';
    ck_assert_int_eq(parse(buf, 108, &h, &used), PP_DONE);
    ck_assert_uint_eq(used, 107);

    ck_assert_int_eq(parse(LIT("GET / HTTP/1.1\r\n"), &h, &used), PP_E_NOT_PROXY);
    ck_assert_int_eq(parse(LIT("PROX "), &h, &used), PP_E_NOT_PROXY);
    ck_assert_int_eq(parse(LIT("\x16\x03\x01"), &h, &used), PP_E_NOT_PROXY); /* TLS */
    ck_assert_int_eq(parse(LIT("\r\n\r\n\x00\r\nQUIX"), &h, &used), PP_E_NOT_PROXY);
    ck_assert_int_eq(parse(LIT("PRO"), &h, &used), PP_MORE);
}
END_TEST

/* A v2 header: 16 bytes, then body (address block and TLVs). */
static size_t
v2(uint8_t *out, uint8_t vc, uint8_t fam, const uint8_t *body, size_t n)
{
    static const uint8_t sig[12] = { 0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D,
                                     0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A };
    memcpy(out, sig, 12);
    out[12] = vc;
    out[13] = fam;
    out[14] = (uint8_t)(n >> 8);
    out[15] = (uint8_t)n;
    memcpy(out + 16, body, n);
    return (16 + n);
}

static const uint8_t addr4[12] = { 192, 0, 2, 1, 198, 51, 100, 2, 0xdc, 0x04, 0x01, 0xbb };

START_TEST(v2_tcp4)
{
    uint8_t buf[256];
    struct pp_hdr h;
    size_t n = v2(buf, 0x21, 0x11, addr4, sizeof addr4), used;

    memcpy(buf + n, "GET", 3);
    ck_assert_int_eq(parse(buf, n + 3, &h, &used), PP_DONE);
    ck_assert_uint_eq(used, 28);
    ck_assert_uint_eq(h.version, 2);
    want_v4(&h, "192.0.2.1", "198.51.100.2", 56324, 443);
    ck_assert(!h.ssl);
    prefixes_more(buf, n);
}
END_TEST

START_TEST(v2_tcp6)
{
    uint8_t body[36] = { 0x20, 0x01, 0x0d,     0xb8,        [15] = 1, [16] = 0x20, 0x01,
                         0x0d, 0xb8, [31] = 2, [32] = 0x30, 0x39,     0x00,        0x50 };
    uint8_t buf[64];
    struct pp_hdr h;
    size_t used;
    char a[INET6_ADDRSTRLEN];

    ck_assert_int_eq(parse(buf, v2(buf, 0x21, 0x21, body, 36), &h, &used), PP_DONE);
    ck_assert_uint_eq(used, 52);
    ck_assert_int_eq(h.family, AF_INET6);
    ck_assert_ptr_nonnull(inet_ntop(AF_INET6, &h.src.in6, a, sizeof a));
    ck_assert_str_eq(a, "2001:db8::1");
    ck_assert_ptr_nonnull(inet_ntop(AF_INET6, &h.dst.in6, a, sizeof a));
    ck_assert_str_eq(a, "2001:db8::2");
    ck_assert_uint_eq(h.src_port, 12345);
    ck_assert_uint_eq(h.dst_port, 80);
}
END_TEST

START_TEST(v2_local_and_fallbacks)
{
    uint8_t buf[512], unix_block[216] = { 0 };
    struct pp_hdr h;
    size_t used;

    /* LOCAL, as HAProxy's health checks send it */
    ck_assert_int_eq(parse(buf, v2(buf, 0x20, 0x00, NULL, 0), &h, &used), PP_DONE);
    ck_assert_uint_eq(used, 16);
    ck_assert(h.local && h.v2_local_cmd);
    /* LOCAL with an address block anyway: skipped, never used */
    ck_assert_int_eq(parse(buf, v2(buf, 0x20, 0x11, addr4, 12), &h, &used), PP_DONE);
    ck_assert_uint_eq(used, 28);
    ck_assert(h.local);
    /* LOCAL with a block too short for its family: still LOCAL */
    ck_assert_int_eq(parse(buf, v2(buf, 0x20, 0x21, addr4, 12), &h, &used), PP_DONE);
    ck_assert(h.local);
    /* PROXY over UNSPEC, UDP or a Unix socket: the connection's own addresses */
    ck_assert_int_eq(parse(buf, v2(buf, 0x21, 0x00, NULL, 0), &h, &used), PP_DONE);
    ck_assert(h.local && !h.v2_local_cmd);
    ck_assert_int_eq(parse(buf, v2(buf, 0x21, 0x12, addr4, 12), &h, &used), PP_DONE);
    ck_assert(h.local);
    ck_assert_int_eq(parse(buf, v2(buf, 0x21, 0x31, unix_block, 216), &h, &used), PP_DONE);
    ck_assert(h.local);
    ck_assert_int_eq(h.family, AF_UNIX);
    ck_assert_uint_eq(used, 232);
}
END_TEST

START_TEST(v2_bad)
{
    uint8_t buf[8192];
    struct pp_hdr h;
    size_t used, n;

    ck_assert_int_eq(parse(buf, v2(buf, 0x11, 0x11, addr4, 12), &h, &used), PP_E_VERSION);
    ck_assert_int_eq(parse(buf, v2(buf, 0x31, 0x11, addr4, 12), &h, &used), PP_E_VERSION);
    ck_assert_int_eq(parse(buf, v2(buf, 0x22, 0x11, addr4, 12), &h, &used), PP_E_VERSION);
    ck_assert_int_eq(parse(buf, v2(buf, 0x21, 0x41, addr4, 12), &h, &used), PP_E_FAMILY);
    ck_assert_int_eq(parse(buf, v2(buf, 0x21, 0x13, addr4, 12), &h, &used), PP_E_FAMILY);
    ck_assert_int_eq(parse(buf, v2(buf, 0x21, 0x01, addr4, 12), &h, &used), PP_E_FAMILY);
    /* a header that lies about its length: shorter than its addresses */
    ck_assert_int_eq(parse(buf, v2(buf, 0x21, 0x11, addr4, 8), &h, &used), PP_E_LENGTH);
    ck_assert_int_eq(parse(buf, v2(buf, 0x21, 0x21, addr4, 12), &h, &used), PP_E_LENGTH);
    /* ... or longer than what arrives: more is awaited (the reader's deadline ends it) */
    n = v2(buf, 0x21, 0x11, addr4, 12);
    buf[15] = 200;
    ck_assert_int_eq(parse(buf, n, &h, &used), PP_MORE);
    /* ... or longer than anything a balancer sends */
    buf[14] = 0xff;
    buf[15] = 0xff;
    ck_assert_int_eq(parse(buf, n, &h, &used), PP_E_TOO_LONG);
    /* the signature with a wrong byte */
    n = v2(buf, 0x21, 0x11, addr4, 12);
    buf[7] = 'q';
    ck_assert_int_eq(parse(buf, n, &h, &used), PP_E_NOT_PROXY);
}
END_TEST

/* Address block + TLVs from raw bytes. */
static size_t
with_tlvs(uint8_t *buf, const uint8_t *tlv, size_t tn)
{
    uint8_t body[1024];

    memcpy(body, addr4, 12);
    memcpy(body + 12, tlv, tn);
    return (v2(buf, 0x21, 0x11, body, 12 + tn));
}

START_TEST(v2_ssl_tlvs)
{
    /*
     * What HAProxy's send-proxy-v2-ssl sends: PP2_TYPE_SSL with client
     * SSL, verify 0, VERSION and CIPHER sub-TLVs, and the SNI as
     * PP2_TYPE_AUTHORITY.
     */
    static const uint8_t tlv[] = {
        0x02, 0x00, 0x0b, 'e',  'x',  'a', 'm', 'p', 'l', 'e', '.', 'c', 'o', 'm', /* AUTHORITY */
        0x01, 0x00, 0x02, 'h',  '2',                                               /* ALPN */
        0x20, 0x00, 0x21,                                                          /* SSL */
        0x01, 0x00, 0x00, 0x00, 0x00,                          /* client, verify */
        0x21, 0x00, 0x07, 'T',  'L',  'S', 'v', '1', '.', '3', /* VERSION */
        0x23, 0x00, 0x0b, 'T',  'L',  'S', '_', 'A', 'E', 'S', '_', '1', '2', '8', /* CIPHER */
        0x04, 0x00, 0x01, 0x00,                                                    /* NOOP */
        0x7f, 0x00, 0x00,                                                          /* unknown */
    };
    uint8_t buf[256];
    struct pp_hdr h;
    size_t used, n = with_tlvs(buf, tlv, sizeof tlv);

    ck_assert_int_eq(parse(buf, n, &h, &used), PP_DONE);
    ck_assert_uint_eq(used, n);
    want_v4(&h, "192.0.2.1", "198.51.100.2", 56324, 443);
    ck_assert(h.ssl);
    ck_assert_uint_eq(h.ssl_client, PP2_CLIENT_SSL);
    ck_assert_uint_eq(h.ssl_verify, 0);
    ck_assert_uint_eq(h.ssl_version.len, 7);
    ck_assert(memcmp(h.ssl_version.b, "TLSv1.3", 7) == 0);
    ck_assert_uint_eq(h.ssl_cipher.len, 11);
    ck_assert(memcmp(h.ssl_cipher.b, "TLS_AES_128", 11) == 0);
    ck_assert_uint_eq(h.authority.len, 11);
    ck_assert(memcmp(h.authority.b, "example.com", 11) == 0);
    ck_assert_uint_eq(h.alpn.len, 2);
    ck_assert(!h.crc_checked);
    prefixes_more(buf, n);
}
END_TEST

START_TEST(v2_tlv_bad)
{
    static const struct {
        uint8_t b[16];
        size_t n;
    } bad[] = {
        { { 0x02, 0x00, 0x05, 'a' }, 4 },                        /* value past the header */
        { { 0x02, 0x00 }, 2 },                                   /* TLV head cut */
        { { 0x20, 0x00, 0x04, 1, 0, 0, 0 }, 7 },                 /* SSL shorter than 5 */
        { { 0x20, 0x00, 0x07, 1, 0, 0, 0, 0, 0x21, 0 }, 10 },    /* sub-TLV head cut */
        { { 0x20, 0x00, 0x08, 1, 0, 0, 0, 0, 0x21, 0, 9 }, 11 }, /* sub-TLV past SSL */
        { { 0x03, 0x00, 0x02, 0, 0 }, 5 },                       /* CRC32C not 4 bytes */
    };
    uint8_t buf[256];
    struct pp_hdr h;
    size_t used;

    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_msg(parse(buf, with_tlvs(buf, bad[i].b, bad[i].n), &h, &used) == PP_E_TLV,
                      "case %zu", i);
}
END_TEST

START_TEST(crc32c)
{
    uint8_t tlv[] = { 0x03, 0x00, 0x04, 0, 0, 0, 0, 0x02, 0x00, 0x01, 'x' };
    uint8_t buf[256];
    struct pp_hdr h;
    size_t used, n;
    uint32_t c;

    /* RFC 3720 B.4 and the usual check value */
    ck_assert_uint_eq(pp_crc32c((const uint8_t *)"123456789", 9), 0xE3069283u);
    {
        uint8_t z[32] = { 0 };
        ck_assert_uint_eq(pp_crc32c(z, 32), 0x8A9136AAu);
    }
    n = with_tlvs(buf, tlv, sizeof tlv);
    c = pp_crc32c(buf, n); /* over the header with the field zero */
    buf[28 + 3] = (uint8_t)(c >> 24);
    buf[28 + 4] = (uint8_t)(c >> 16);
    buf[28 + 5] = (uint8_t)(c >> 8);
    buf[28 + 6] = (uint8_t)c;
    ck_assert_int_eq(parse(buf, n, &h, &used), PP_DONE);
    ck_assert(h.crc_checked);
    buf[16] ^= 1; /* the client address changed in transit */
    ck_assert_int_eq(parse(buf, n, &h, &used), PP_E_CRC);
    buf[16] ^= 1;
    buf[28 + 6] ^= 0x80;
    ck_assert_int_eq(parse(buf, n, &h, &used), PP_E_CRC);
}
END_TEST

START_TEST(build_round_trip)
{
    struct sockaddr_in s4 = { .sin_family = AF_INET, .sin_port = htons(40000) };
    struct sockaddr_in d4 = { .sin_family = AF_INET, .sin_port = htons(80) };
    struct sockaddr_in6 s6 = { .sin6_family = AF_INET6, .sin6_port = htons(1) };
    struct sockaddr_in6 d6 = { .sin6_family = AF_INET6, .sin6_port = htons(2) };
    uint8_t buf[PP_BUILD_MAX];
    struct pp_hdr h;
    size_t n, used;

    inet_pton(AF_INET, "203.0.113.7", &s4.sin_addr);
    inet_pton(AF_INET, "10.0.0.1", &d4.sin_addr);
    inet_pton(AF_INET6, "2001:db8::7", &s6.sin6_addr);
    inet_pton(AF_INET6, "2001:db8::1", &d6.sin6_addr);

    n = pp_build(1, (struct sockaddr *)&s4, (struct sockaddr *)&d4, buf);
    ck_assert_uint_eq(n, strlen("PROXY TCP4 203.0.113.7 10.0.0.1 40000 80\r\n"));
    ck_assert(memcmp(buf, "PROXY TCP4 203.0.113.7 10.0.0.1 40000 80\r\n", n) == 0);
    for (unsigned v = 1; v <= 2; v++) {
        n = pp_build(v, (struct sockaddr *)&s4, (struct sockaddr *)&d4, buf);
        ck_assert_int_eq(parse(buf, n, &h, &used), PP_DONE);
        ck_assert_uint_eq(used, n);
        want_v4(&h, "203.0.113.7", "10.0.0.1", 40000, 80);
        n = pp_build(v, (struct sockaddr *)&s6, (struct sockaddr *)&d6, buf);
        ck_assert_int_eq(parse(buf, n, &h, &used), PP_DONE);
        ck_assert_int_eq(h.family, AF_INET6);
        ck_assert_uint_eq(h.src_port, 1);
        n = pp_build(v, NULL, NULL, buf); /* no client: LOCAL / UNKNOWN */
        ck_assert_int_eq(parse(buf, n, &h, &used), PP_DONE);
        ck_assert(h.local);
        /* mixed families are no connection */
        n = pp_build(v, (struct sockaddr *)&s4, (struct sockaddr *)&d6, buf);
        ck_assert_int_eq(parse(buf, n, &h, &used), PP_DONE);
        ck_assert(h.local);
    }
    /* IPv4-mapped IPv6 is written as hex groups, as the v1 grammar wants (found by fuzzing) */
    inet_pton(AF_INET6, "::ffff:192.0.2.1", &s6.sin6_addr);
    n = pp_build(1, (struct sockaddr *)&s6, (struct sockaddr *)&d6, buf);
    ck_assert(memcmp(buf, "PROXY TCP6 0:0:0:0:0:ffff:c000:201 2001:db8:0:0:0:0:0:1 1 2\r\n", n) ==
              0);
    ck_assert_int_eq(parse(buf, n, &h, &used), PP_DONE);
    ck_assert_uint_eq(pp_build(2, (struct sockaddr *)&s4, (struct sockaddr *)&d4, buf), 28);
    ck_assert_uint_eq(buf[12], 0x21);
    ck_assert_uint_eq(buf[13], 0x11);
    ck_assert(memcmp(buf + 16, "\xcb\x00\x71\x07\x0a\x00\x00\x01\x9c\x40\x00\x50", 12) == 0);
}
END_TEST

Suite *
pp_suite(void)
{
    Suite *s = suite_create("pp");
    TCase *tc = tcase_create("parse");

    tcase_add_test(tc, v1_spec_example);
    tcase_add_test(tc, v1_tcp6_and_unknown);
    tcase_add_test(tc, v1_bad);
    tcase_add_test(tc, v1_too_long_and_not_proxy);
    tcase_add_test(tc, v2_tcp4);
    tcase_add_test(tc, v2_tcp6);
    tcase_add_test(tc, v2_local_and_fallbacks);
    tcase_add_test(tc, v2_bad);
    tcase_add_test(tc, v2_ssl_tlvs);
    tcase_add_test(tc, v2_tlv_bad);
    tcase_add_test(tc, crc32c);
    tcase_add_test(tc, build_round_trip);
    suite_add_tcase(s, tc);
    return s;
}
