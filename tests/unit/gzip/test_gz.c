/*
 * gz: Accept-Encoding negotiation, type matching, the head rewrite, and
 * the streaming filters -- round trips of random and compressible data in
 * odd-sized pieces, and corrupt streams caught (bad CRC, bad length,
 * truncation, junk after the end) against zlib's own one-shot output,
 * and the decoder's bound on decompression bombs.
 */
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "unit.h"
#include "surogat/gz.h"
#include "surogat/http.h"
#include "surogat/par.h"
#include "surogat/sb.h"
#include "surogat/ws.h"

static struct txt
T(const char *s) {
    return (struct txt){ s, strlen(s) };
}

/* ---- negotiation ---- */

START_TEST(ae_table)
{
    static const struct {
        const char *ae;
        bool gzip;
    } v[] = {
        { "gzip", true },
        { "GZIP", true },
        { "x-gzip", true },
        { "X-Gzip", true },
        { "gzip, deflate, br", true },
        { "deflate,gzip", true },
        { "br;q=1.0, gzip;q=0.8, *;q=0.1", true },
        { "  gzip  ;  q=0.5  ", true },
        { "gzip;Q=1", true },
        { "gzip;q=1.000", true },
        { "gzip;q=0.001", true },
        { "*", true },
        { "identity;q=0, *", true },
        { "gzip;q=0.5, identity;q=0.5", true }, /* a tie: gzip */
        { "gzip;q=0, x-gzip", true },           /* the better weight of the two names */
        { ",,gzip,,", true },
        { "gzip;level=9", true }, /* unknown parameter: ignored */
        { "gzip;q=0", false },
        { "gzip;q=0.0", false },
        { "gzip;q=0.000", false },
        { "gzip ; q = 0", false },
        { "gzip;q=0, *", false }, /* named beats * */
        { "*;q=0", false },
        { "deflate, br", false },
        { "", false },
        { "identity", false },
        { "gzip;q=0.2, identity;q=0.8", false }, /* the client prefers identity */
        { "gzip;q=2", false },                   /* malformed weight: element ignored */
        { "gzip;q=1.5", false },
        { "gzip;q=0.1234", false },
        { "gzip;q=", false },
        { "gzip;q=abc", false },
        { "gzip;q", false },
        { "gzipx", false },
        { "xgzip", false },
        { "gzip x", false },
        { "g zip", false },
        { ";q=1", false },
    };

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        ck_assert_msg(gz_ae_gzip(v[i].ae, strlen(v[i].ae)) == v[i].gzip, "%s", v[i].ae);
}
END_TEST

START_TEST(ae_no_nul_needed)
{
    /* The value is a counted slice of a buffer: never read past it. */
    const char buf[] = "gzip;q=0.5XXXX";

    ck_assert(gz_ae_gzip(buf, 10));
    ck_assert(!gz_ae_gzip(buf, 8)); /* "gzip;q=0" */
    ck_assert(!gz_ae_gzip(NULL, 0));
}
END_TEST

START_TEST(accepts_request)
{
    struct http_hdr hdrs[8];
    struct http req;

    http_init(&req, hdrs, 8);
    ck_assert(!gz_accepts(&req)); /* no field: identity */
    ck_assert_int_eq(http_add(&req, T("Host"), T("a")), 0);
    ck_assert_int_eq(http_add(&req, T("Accept-Encoding"), T("br")), 0);
    ck_assert(!gz_accepts(&req));
    ck_assert_int_eq(http_add(&req, T("accept-encoding"), T("gzip")), 0);
    ck_assert(gz_accepts(&req)); /* several fields make one list */
    ck_assert_int_eq(http_add(&req, T("Accept-Encoding"), T("gzip;q=0")), 0);
    ck_assert(gz_accepts(&req)); /* the best weight given to gzip counts */
    http_init(&req, hdrs, 8);
    ck_assert_int_eq(http_add(&req, T("Accept-Encoding"), T("*")), 0);
    ck_assert_int_eq(http_add(&req, T("Accept-Encoding"), T("gzip;q=0")), 0);
    ck_assert(!gz_accepts(&req));
}
END_TEST

/* ---- types and responses ---- */

START_TEST(type_match)
{
    static const char *list = "text/html, text/css application/json\timage/svg+xml, font/*";
    static const struct {
        const char *ct;
        bool want;
    } v[] = {
        { "text/html", true },
        { "TEXT/HTML", true },
        { "text/html; charset=utf-8", true },
        { "text/html;charset=utf-8", true },
        { "  text/css", true },
        { "application/json", true },
        { "image/svg+xml", true },
        { "font/woff2", true },
        { "font/", false },
        { "font", false },
        { "fonts/x", false },
        { "text/htmlx", false },
        { "text/htm", false },
        { "text/plain", false },
        { "image/png", false },
        { "", false },
        { ";", false },
    };

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        struct txt ct = T(v[i].ct);
        ck_assert_msg(gz_type_match(list, &ct) == v[i].want, "%s", v[i].ct);
    }
    struct txt html = T("text/html");
    ck_assert(!gz_type_match("", &html));
    ck_assert(!gz_type_match(NULL, &html));
    ck_assert(gz_type_match(",,text/html,,", &html));
}
END_TEST

static struct http_hdr rh[16];
static struct http resp;

static void
resp_setup(const char *ct)
{
    http_init(&resp, rh, 16);
    resp.status = 200;
    if (ct != NULL)
        ck_assert_int_eq(http_add(&resp, T("Content-Type"), T(ct)), 0);
}

START_TEST(compressible_rules)
{
    const char *types = "text/html text/plain";

    resp_setup("text/html");
    ck_assert(gz_compressible(&resp, 5000, types, 1024));
    ck_assert(gz_compressible(&resp, UINT64_MAX, types, 1024)); /* unknown: big enough */
    ck_assert(gz_compressible(&resp, 1024, types, 1024));
    ck_assert(!gz_compressible(&resp, 1023, types, 1024));
    ck_assert(!gz_compressible(&resp, 0, types, 0));
    ck_assert(!gz_compressible(&resp, 5000, "text/css", 1024));
    resp.status = 404;
    ck_assert(!gz_compressible(&resp, 5000, types, 1024));

    resp_setup("text/plain");
    ck_assert_int_eq(http_add(&resp, T("Content-Encoding"), T("identity")), 0);
    ck_assert(gz_compressible(&resp, 5000, types, 1024));
    ck_assert_int_eq(http_add(&resp, T("Content-Encoding"), T("gzip")), 0);
    ck_assert(!gz_compressible(&resp, 5000, types, 1024)); /* never twice */

    resp_setup("text/plain");
    ck_assert_int_eq(http_add(&resp, T("Content-Encoding"), T("br")), 0);
    ck_assert(!gz_compressible(&resp, 5000, types, 1024));

    resp_setup("text/plain");
    ck_assert_int_eq(http_add(&resp, T("Cache-Control"), T("public, No-Transform")), 0);
    ck_assert(!gz_compressible(&resp, 5000, types, 1024));

    resp_setup("text/plain");
    ck_assert_int_eq(http_add(&resp, T("Content-Range"), T("bytes 0-9/100")), 0);
    ck_assert(!gz_compressible(&resp, 5000, types, 1024));

    resp_setup(NULL);
    ck_assert(!gz_compressible(&resp, 5000, types, 1024));
}
END_TEST

START_TEST(is_gzip)
{
    struct txt v;

    resp_setup("text/html");
    ck_assert(!gz_is_gzip(&resp));
    ck_assert_int_eq(http_add(&resp, T("Content-Encoding"), T("x-gzip")), 0);
    ck_assert(gz_is_gzip(&resp));
    ck_assert_int_eq(http_add(&resp, T("Content-Encoding"), T("gzip")), 0);
    ck_assert(!gz_is_gzip(&resp)); /* gzip twice: not something one decoder undoes */
    v = T("gzip, br");
    ck_assert(!gz_coding_is_gzip(&v));
    v = T("GZip");
    ck_assert(gz_coding_is_gzip(&v));
}
END_TEST

START_TEST(head_rewrite)
{
    char block[4096];
    struct ws ws;
    const struct txt *v;

    ws_init(&ws, block, sizeof block);
    resp_setup("text/html");
    ck_assert_int_eq(http_add(&resp, T("Content-Length"), T("5000")), 0);
    ck_assert_int_eq(http_add(&resp, T("ETag"), T("\"abc\"")), 0);
    ck_assert_int_eq(gz_head(&resp, &ws, GZ_HEAD_ENCODED), 0);
    ck_assert(http_find(&resp, "Content-Length") == NULL);
    v = http_value(&resp, "Content-Encoding");
    ck_assert(v != NULL && v->len == 4 && memcmp(v->b, "gzip", 4) == 0);
    v = http_value(&resp, "ETag");
    ck_assert(v != NULL && v->len == 7 && memcmp(v->b, "W/\"abc\"", 7) == 0);
    ck_assert(http_has_token(&resp, "Vary", "Accept-Encoding"));
    ck_assert_uint_eq(http_count(&resp, "Vary"), 1);

    /* Again, as the gunzipped one: one Vary, the weak ETag not weakened twice. */
    ck_assert_int_eq(gz_head(&resp, &ws, GZ_HEAD_DECODED), 0);
    ck_assert(http_find(&resp, "Content-Encoding") == NULL);
    ck_assert_uint_eq(http_count(&resp, "Vary"), 1);
    v = http_value(&resp, "ETag");
    ck_assert(v != NULL && v->len == 7);

    /* Only Vary for a body left as it came; Vary: * stays alone. */
    resp_setup("text/html");
    ck_assert_int_eq(http_add(&resp, T("ETag"), T("\"x\"")), 0);
    ck_assert_int_eq(http_add(&resp, T("Vary"), T("Cookie")), 0);
    ck_assert_int_eq(gz_head(&resp, &ws, GZ_HEAD_VARY), 0);
    ck_assert(http_has_token(&resp, "Vary", "accept-encoding"));
    v = http_value(&resp, "ETag");
    ck_assert(v->len == 3);
    resp_setup("text/html");
    ck_assert_int_eq(http_add(&resp, T("Vary"), T("*")), 0);
    ck_assert_int_eq(gz_head(&resp, &ws, GZ_HEAD_VARY), 0);
    ck_assert_uint_eq(http_count(&resp, "Vary"), 1);

    /* Out of workspace: -1, not a crash. */
    ws_init(&ws, block, 16);
    resp_setup("text/html");
    ck_assert_int_eq(http_add(&resp, T("ETag"), T("\"a-rather-long-entity-tag\"")), 0);
    ck_assert_int_eq(gz_head(&resp, &ws, GZ_HEAD_ENCODED), -1);
}
END_TEST

/* ---- filters ---- */

struct buf {
    unsigned char *p;
    size_t len, cap;
    unsigned calls;
    unsigned fail_after; /* 0: never fail */
};

static int
collect(void *priv, const char *p, size_t len)
{
    struct buf *b = priv;

    ck_assert_uint_gt(len, 0);
    if (b->fail_after > 0 && ++b->calls >= b->fail_after)
        return (-1);
    if (b->len + len > b->cap) {
        b->cap = (b->len + len) * 2;
        b->p = realloc(b->p, b->cap);
        ck_assert_ptr_nonnull(b->p);
    }
    memcpy(b->p + b->len, p, len);
    b->len += len;
    return (0);
}

static uint32_t rnd_state = 2463534242u;

static uint32_t
rnd(void)
{
    rnd_state ^= rnd_state << 13;
    rnd_state ^= rnd_state >> 17;
    rnd_state ^= rnd_state << 5;
    return (rnd_state);
}

static unsigned char *
make_data(size_t n, bool is_text)
{
    static const char *const words[] = { "<div>", "surogat ", "cache ", "</p>\n", "gzip " };
    unsigned char *d = malloc(n ? n : 1);

    ck_assert_ptr_nonnull(d);
    for (size_t i = 0; i < n;) {
        if (!is_text) {
            d[i++] = (unsigned char)rnd();
            continue;
        }
        const char *w = words[rnd() % 5];
        for (size_t k = 0; w[k] != '\0' && i < n; k++)
            d[i++] = (unsigned char)w[k];
    }
    return (d);
}

/* Feed in pieces of 1 .. maxpiece bytes, flushing now and then; the last call finishes. */
static enum gz_status
feed_pieces(struct gz *z, const unsigned char *in, size_t len, size_t maxpiece, struct buf *out)
{
    enum gz_status st = GZ_OK;
    size_t off = 0;

    while (off < len) {
        size_t n = 1 + rnd() % maxpiece;
        if (n > len - off)
            n = len - off;
        st = gz_feed(z, in + off, n, rnd() % 7 == 0 ? GZ_FLUSH_SYNC : GZ_FLUSH_NONE, collect, out);
        if (st != GZ_OK && st != GZ_END)
            return (st);
        off += n;
    }
    return (gz_feed(z, NULL, 0, GZ_FLUSH_FINISH, collect, out));
}

/* zlib's own one-shot gunzip, as the reference. */
static void
ref_gunzip(const unsigned char *gz, size_t gzlen, const unsigned char *want, size_t wantlen)
{
    z_stream zs;
    unsigned char *out = malloc(wantlen + 1);

    memset(&zs, 0, sizeof zs);
    ck_assert_int_eq(inflateInit2(&zs, 15 + 16), Z_OK);
    zs.next_in = (unsigned char *)(uintptr_t)gz;
    zs.avail_in = (uInt)gzlen;
    zs.next_out = out;
    zs.avail_out = (uInt)wantlen + 1;
    ck_assert_int_eq(inflate(&zs, Z_FINISH), Z_STREAM_END);
    ck_assert_uint_eq(zs.total_out, wantlen);
    ck_assert_uint_eq(zs.avail_in, 0);
    ck_assert(wantlen == 0 || memcmp(out, want, wantlen) == 0);
    inflateEnd(&zs);
    free(out);
}

static void
round_trip(size_t n, bool is_text, int level, size_t maxpiece)
{
    unsigned char *data = make_data(n, is_text);
    struct buf enc = { 0 }, dec = { 0 };
    struct gz *z;

    z = gz_new(GZ_ENCODE, level);
    ck_assert_int_eq(feed_pieces(z, data, n, maxpiece, &enc), GZ_END);
    ck_assert_uint_eq(gz_bytes_in(z), n);
    ck_assert_uint_eq(gz_bytes_out(z), enc.len);
    gz_free(&z);
    ck_assert_ptr_null(z);
    ref_gunzip(enc.p, enc.len, data, n);
    /* (Small pieces flush often, and each flush costs bytes.) */
    if (is_text && n > 10000 && maxpiece >= 1000)
        ck_assert_uint_lt(enc.len, n / 3);

    z = gz_new(GZ_DECODE, 0);
    ck_assert_int_eq(feed_pieces(z, enc.p, enc.len, maxpiece, &dec), GZ_END);
    ck_assert_uint_eq(dec.len, n);
    ck_assert(n == 0 || memcmp(dec.p, data, n) == 0);
    ck_assert_uint_eq(gz_bytes_out(z), n);
    gz_free(&z);
    free(data);
    free(enc.p);
    free(dec.p);
}

START_TEST(round_trips)
{
    static const size_t sizes[] = { 0, 1, 2, 17, 4095, 16384, 16385, 65537, 300001 };
    static const size_t pieces[] = { 1, 7, 1000, 70000 };

    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        for (size_t j = 0; j < sizeof pieces / sizeof pieces[0]; j++) {
            if (sizes[i] > 70000 && pieces[j] == 1)
                continue; /* a byte at a time is slow and proves nothing more */
            round_trip(sizes[i], true, 6, pieces[j]);
            round_trip(sizes[i], false, 1, pieces[j]);
        }
    round_trip(100000, true, 9, 333);
    round_trip(100000, true, 0, 333); /* out of range: zlib's default */
}
END_TEST

/* A gzip stream made by zlib, with our decoder as the party under test. */
static unsigned char *
ref_gzip(const unsigned char *in, size_t n, size_t *outlen)
{
    z_stream zs;
    size_t cap = compressBound((uLong)n) + 64;
    unsigned char *out = malloc(cap);

    memset(&zs, 0, sizeof zs);
    ck_assert_int_eq(deflateInit2(&zs, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY), Z_OK);
    zs.next_in = (unsigned char *)(uintptr_t)in;
    zs.avail_in = (uInt)n;
    zs.next_out = out;
    zs.avail_out = (uInt)cap;
    ck_assert_int_eq(deflate(&zs, Z_FINISH), Z_STREAM_END);
    *outlen = zs.total_out;
    deflateEnd(&zs);
    return (out);
}

static enum gz_status
decode_all(const unsigned char *in, size_t len, size_t maxpiece, struct buf *out)
{
    struct gz *z = gz_new(GZ_DECODE, 0);
    enum gz_status st = feed_pieces(z, in, len, maxpiece, out);

    gz_free(&z);
    return (st);
}

START_TEST(corrupt_detected)
{
    size_t n = 50000, glen;
    unsigned char *data = make_data(n, true);
    unsigned char *g = ref_gzip(data, n, &glen);
    unsigned char *bad = malloc(glen + 16);
    struct buf out = { 0 };

    ck_assert_int_eq(decode_all(g, glen, 999, &out), GZ_END);
    ck_assert_uint_eq(out.len, n);

    /* Each trailer byte (CRC-32, then length) and a byte inside the deflate data. */
    for (size_t pos = glen - 8; pos < glen; pos++) {
        memcpy(bad, g, glen);
        bad[pos] ^= 0x01;
        out.len = 0;
        ck_assert_msg(decode_all(bad, glen, 999, &out) == GZ_E_DATA, "trailer byte %zu", pos);
    }
    memcpy(bad, g, glen);
    bad[glen / 2] ^= 0xff;
    out.len = 0;
    ck_assert_int_eq(decode_all(bad, glen, 999, &out), GZ_E_DATA);

    /* Truncated anywhere: never GZ_END. */
    for (size_t cut = 1; cut < glen; cut += 1 + cut / 3) {
        out.len = 0;
        ck_assert_msg(decode_all(g, cut, 999, &out) == GZ_E_TRUNCATED, "cut at %zu", cut);
    }
    out.len = 0;
    ck_assert_int_eq(decode_all(g, 0, 999, &out), GZ_E_DATA); /* nothing at all */

    /* Junk after the end, and a second member that is not one. */
    memcpy(bad, g, glen);
    memcpy(bad + glen, "garbage!", 8);
    out.len = 0;
    ck_assert_int_eq(decode_all(bad, glen + 8, 999, &out), GZ_E_DATA);
    bad[glen] = 0x1f;
    bad[glen + 1] = 0x8b;
    out.len = 0;
    ck_assert(decode_all(bad, glen + 8, 3, &out) != GZ_END);

    /* Not gzip: a zlib stream and plain text. */
    out.len = 0;
    ck_assert_int_eq(
        decode_all((const unsigned char *)"\x78\x9c\x03\x00\x00\x00\x00\x01", 8, 8, &out),
        GZ_E_DATA);
    out.len = 0;
    ck_assert_int_eq(decode_all(data, 100, 10, &out), GZ_E_DATA);

    /* A failed filter stays failed. */
    struct gz *z = gz_new(GZ_DECODE, 0);
    ck_assert_int_eq(gz_feed(z, "nope", 4, GZ_FLUSH_NONE, collect, &out), GZ_E_DATA);
    ck_assert_int_eq(gz_feed(z, g, glen, GZ_FLUSH_FINISH, collect, &out), GZ_E_DATA);
    gz_free(&z);
    free(data);
    free(g);
    free(bad);
    free(out.p);
}
END_TEST

START_TEST(members)
{
    unsigned char *a = make_data(3000, true), *b = make_data(5000, false);
    size_t la, lb;
    unsigned char *ga = ref_gzip(a, 3000, &la), *gb = ref_gzip(b, 5000, &lb);
    unsigned char *both = malloc(la + lb);
    struct buf out = { 0 };

    memcpy(both, ga, la);
    memcpy(both + la, gb, lb);
    ck_assert_int_eq(decode_all(both, la + lb, 100, &out), GZ_END);
    ck_assert_uint_eq(out.len, 8000);
    ck_assert(memcmp(out.p, a, 3000) == 0 && memcmp(out.p + 3000, b, 5000) == 0);
    free(a);
    free(b);
    free(ga);
    free(gb);
    free(both);
    free(out.p);
}
END_TEST

/* The deflate transfer coding: the zlib format, one stream, checked by its Adler-32. */
START_TEST(inflate_zlib)
{
    unsigned char *a = make_data(70000, true);
    uLongf zl = compressBound(70000);
    unsigned char *zd = malloc(zl + 1), *g;
    struct buf out = { 0 };
    struct gz *z;
    size_t gl;

    ck_assert_int_eq(compress2(zd, &zl, a, 70000, 6), Z_OK);
    for (size_t step = 1; step < 70000; step = step * 7 + 3) {
        z = gz_new(GZ_INFLATE, 0);
        out.len = 0;
        for (size_t off = 0; off < zl; off += step)
            ck_assert_int_le(gz_feed(z, zd + off, off + step > zl ? zl - off : step, GZ_FLUSH_NONE,
                                     collect, &out),
                             GZ_END);
        ck_assert_int_eq(gz_feed(z, NULL, 0, GZ_FLUSH_FINISH, collect, &out), GZ_END);
        ck_assert_uint_eq(out.len, 70000);
        ck_assert(memcmp(out.p, a, 70000) == 0);
        gz_free(&z);
    }
    /* A byte after the stream: zlib has no members, so it is junk. */
    zd[zl] = 'x';
    z = gz_new(GZ_INFLATE, 0);
    ck_assert_int_eq(gz_feed(z, zd, zl + 1, GZ_FLUSH_FINISH, collect, &out), GZ_E_DATA);
    gz_free(&z);
    /* The Adler-32 is checked. */
    zd[zl - 1] ^= 1;
    z = gz_new(GZ_INFLATE, 0);
    ck_assert_int_eq(gz_feed(z, zd, zl, GZ_FLUSH_FINISH, collect, &out), GZ_E_DATA);
    gz_free(&z);
    /* Cut short. */
    zd[zl - 1] ^= 1;
    z = gz_new(GZ_INFLATE, 0);
    ck_assert_int_eq(gz_feed(z, zd, zl - 2, GZ_FLUSH_FINISH, collect, &out), GZ_E_TRUNCATED);
    gz_free(&z);
    /* gzip is not zlib, and zlib is not gzip. */
    g = ref_gzip(a, 1000, &gl);
    z = gz_new(GZ_INFLATE, 0);
    ck_assert_int_eq(gz_feed(z, g, gl, GZ_FLUSH_FINISH, collect, &out), GZ_E_DATA);
    gz_free(&z);
    z = gz_new(GZ_DECODE, 0);
    ck_assert_int_eq(gz_feed(z, zd, zl, GZ_FLUSH_FINISH, collect, &out), GZ_E_DATA);
    gz_free(&z);
    free(g);
    free(a);
    free(zd);
    free(out.p);
}
END_TEST

/* n zeros as one gzip stream made by zlib: the most compressible body there is (~1030:1). */
static unsigned char *
zeros_gzip(size_t n, size_t *outlen)
{
    unsigned char *z = calloc(1, n);
    unsigned char *g = ref_gzip(z, n, outlen);

    free(z);
    return (g);
}

START_TEST(bomb_ratio)
{
    size_t glen;
    unsigned char *g = zeros_gzip(64 << 20, &glen);
    struct buf out = { 0 };
    struct gz *z;
    char msg[128];
    struct sb sb;

    ck_assert_uint_lt(glen, (64 << 20) / 1000);
    /* Unbounded, it all comes out. */
    z = gz_new(GZ_DECODE, 0);
    gz_limit(z, 0, 0);
    ck_assert_int_eq(feed_pieces(z, g, glen, 70000, &out), GZ_END);
    ck_assert_uint_eq(out.len, 64 << 20);
    gz_free(&z);
    /* 1000:1 stops it long before the end, whatever the piece size. */
    for (size_t piece = 1; piece <= 1000000; piece *= 100) {
        out.len = 0;
        z = gz_new(GZ_DECODE, 0);
        gz_limit(z, 0, 1000);
        ck_assert_int_eq(feed_pieces(z, g, glen, piece, &out), GZ_E_BOMB);
        /* Nothing past the bound was handed out. */
        ck_assert_uint_le(out.len, 1000 * gz_bytes_in(z));
        ck_assert_uint_lt(out.len, 1 << 20);
        sb_init(&sb, msg, sizeof msg);
        gz_explain(z, &sb);
        ck_assert_msg(strncmp(msg, "over gunzip_max_ratio (1000:1): ", 32) == 0, "%s", msg);
        /* Failed for good. */
        ck_assert_int_ne(gz_feed(z, g, 10, GZ_FLUSH_NONE, collect, &out), GZ_OK);
        gz_free(&z);
    }
    /* 2000:1 is more than deflate can do: the whole stream passes. */
    out.len = 0;
    z = gz_new(GZ_DECODE, 0);
    gz_limit(z, 0, 2000);
    ck_assert_int_eq(feed_pieces(z, g, glen, 5000, &out), GZ_END);
    ck_assert_uint_eq(out.len, 64 << 20);
    gz_free(&z);
    free(g);
    free(out.p);
}
END_TEST

START_TEST(bomb_size)
{
    size_t n = 300001, glen;
    unsigned char *data = make_data(n, true);
    unsigned char *g = ref_gzip(data, n, &glen);
    struct buf out = { 0 };
    struct gz *z;
    char msg[128];
    struct sb sb;

    /* Exactly the size: fine.  One byte less: a bomb, and no byte past the bound is out. */
    z = gz_new(GZ_DECODE, 0);
    gz_limit(z, n, 1000);
    ck_assert_int_eq(feed_pieces(z, g, glen, 999, &out), GZ_END);
    ck_assert_uint_eq(out.len, n);
    gz_free(&z);
    for (uint64_t max = n - 1; max > 0; max /= 7) {
        out.len = 0;
        z = gz_new(GZ_DECODE, 0);
        gz_limit(z, max, 0);
        ck_assert_int_eq(feed_pieces(z, g, glen, 999, &out), GZ_E_BOMB);
        ck_assert_uint_le(out.len, max);
        ck_assert(memcmp(out.p, data, out.len) == 0);
        sb_init(&sb, msg, sizeof msg);
        gz_explain(z, &sb);
        ck_assert_msg(strstr(msg, "over gunzip_max_size (") == msg, "%s", msg);
        gz_free(&z);
    }
    /* The bound counts every member of a multi-member body. */
    unsigned char *two = malloc(2 * glen);
    memcpy(two, g, glen);
    memcpy(two + glen, g, glen);
    out.len = 0;
    z = gz_new(GZ_DECODE, 0);
    gz_limit(z, n + n / 2, 0);
    ck_assert_int_eq(feed_pieces(z, two, 2 * glen, 5000, &out), GZ_E_BOMB);
    gz_free(&z);
    free(two);
    free(data);
    free(g);
    free(out.p);
}
END_TEST

START_TEST(bomb_bound_from_params)
{
    size_t glen;
    unsigned char *g = zeros_gzip(8 << 20, &glen);
    struct buf out = { 0 };
    struct gz *z;

    /* gz_new() takes the bound from the parameters as they are when it is called. */
    par_init();
    ck_assert_int_eq(par.gunzip_max_ratio, 1000);
    ck_assert_uint_eq(par.gunzip_max_size, UINT64_C(1) << 30);
    z = gz_new(GZ_DECODE, 0);
    ck_assert_int_eq(feed_pieces(z, g, glen, 4096, &out), GZ_E_BOMB);
    gz_free(&z);
    par.gunzip_max_ratio = 0;
    par.gunzip_max_size = 1 << 20;
    out.len = 0;
    z = gz_new(GZ_DECODE, 0);
    ck_assert_int_eq(feed_pieces(z, g, glen, 4096, &out), GZ_E_BOMB);
    ck_assert_uint_le(out.len, 1 << 20);
    gz_free(&z);
    par.gunzip_max_size = 0;
    out.len = 0;
    z = gz_new(GZ_DECODE, 0);
    ck_assert_int_eq(feed_pieces(z, g, glen, 4096, &out), GZ_END);
    ck_assert_uint_eq(out.len, 8 << 20);
    gz_free(&z);
    par_fini();
    free(g);
    free(out.p);
}
END_TEST

START_TEST(limit_on_encoder_is_a_bug)
{
    struct gz *z = gz_new(GZ_ENCODE, 6);

    gz_limit(z, 1, 1);
}
END_TEST

START_TEST(output_failure)
{
    unsigned char *data = make_data(200000, false);
    struct buf out = { .fail_after = 2 };
    struct gz *z = gz_new(GZ_ENCODE, 1);

    ck_assert_int_eq(gz_feed(z, data, 200000, GZ_FLUSH_FINISH, collect, &out), GZ_E_OUTPUT);
    gz_free(&z);
    gz_free(&z); /* NULL is fine */
    free(data);
    free(out.p);
}
END_TEST

START_TEST(encoder_after_end_is_a_bug)
{
    struct buf out = { 0 };
    struct gz *z = gz_new(GZ_ENCODE, 6);

    ck_assert_int_eq(gz_feed(z, "x", 1, GZ_FLUSH_FINISH, collect, &out), GZ_END);
    (void)gz_feed(z, "x", 1, GZ_FLUSH_NONE, collect, &out);
}
END_TEST

Suite *
gz_suite(void)
{
    Suite *s = suite_create("gz");
    TCase *tc = tcase_create("negotiation");

    tcase_add_test(tc, ae_table);
    tcase_add_test(tc, ae_no_nul_needed);
    tcase_add_test(tc, accepts_request);
    tcase_add_test(tc, type_match);
    tcase_add_test(tc, compressible_rules);
    tcase_add_test(tc, is_gzip);
    tcase_add_test(tc, head_rewrite);
    suite_add_tcase(s, tc);
    tc = tcase_create("filters");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, round_trips);
    tcase_add_test(tc, corrupt_detected);
    tcase_add_test(tc, members);
    tcase_add_test(tc, inflate_zlib);
    tcase_add_test(tc, bomb_ratio);
    tcase_add_test(tc, bomb_size);
    tcase_add_test(tc, bomb_bound_from_params);
    tcase_add_test_raise_signal(tc, limit_on_encoder_is_a_bug, SIGABRT);
    tcase_add_test(tc, output_failure);
    tcase_add_test_raise_signal(tc, encoder_after_end_is_a_bug, SIGABRT);
    suite_add_tcase(s, tc);
    return s;
}
