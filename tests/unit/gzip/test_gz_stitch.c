/*
 * gzip for ESI: the segment encoder (gz_cut) and the stitcher.  Random
 * pages are cut at random points; any subset of their segments, in
 * order, with identity pieces and whole gzip members (made by zlib with
 * every strategy, so their last block ends on any bit) between them, is
 * stitched and gunzipped by zlib itself, which must give exactly the
 * expected bytes and accept the CRC and length.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "unit.h"
#include "tbuf.h"
#include "surogat/gz.h"

static uint32_t rs = 88172645u;

static uint32_t
rnd(void)
{
    return (xrnd(&rs));
}

static unsigned char *
make_page(size_t n)
{
    static const char *const words[] = { "<div class=\"menu\">", "<esi:include src=\"/f\"/>",
                                         "Lorem ipsum ",         "</div>\n",
                                         "dolor sit amet ",      "\xc3\xa9" };
    unsigned char *d = malloc(n ? n : 1);

    for (size_t i = 0; i < n;) {
        if (rnd() % 50 == 0) {
            d[i++] = (unsigned char)rnd(); /* a little noise */
            continue;
        }
        const char *w = words[rnd() % 6];
        for (size_t k = 0; w[k] != '\0' && i < n; k++)
            d[i++] = (unsigned char)w[k];
    }
    return (d);
}

/* zlib's one-shot gunzip; the whole stream must be one member ending exactly. */
static void
check_gunzip(const struct buf *gz, const struct buf *want)
{
    z_stream zs;
    unsigned char *out = malloc(want->len + 1);

    memset(&zs, 0, sizeof zs);
    ck_assert_int_eq(inflateInit2(&zs, 15 + 16), Z_OK);
    zs.next_in = gz->p;
    zs.avail_in = (uInt)gz->len;
    zs.next_out = out;
    zs.avail_out = (uInt)want->len + 1;
    ck_assert_int_eq(inflate(&zs, Z_FINISH), Z_STREAM_END);
    ck_assert_uint_eq(zs.avail_in, 0);
    ck_assert_uint_eq(zs.total_out, want->len);
    ck_assert(want->len == 0 || memcmp(out, want->p, want->len) == 0);
    inflateEnd(&zs);
    free(out);
}

/* A page encoded with a cut at each of cuts[0..n) (increasing offsets), then finished. */
static void
encode_cut(const unsigned char *page, size_t len, const size_t *cuts, size_t ncut, int level,
           struct buf *gz, struct gz_seg *segs)
{
    struct gz *z = gz_new(GZ_ENCODE, level);
    size_t off = 0;

    for (size_t i = 0; i <= ncut; i++) {
        size_t end = i < ncut ? cuts[i] : len;

        /* In random pieces, as a fetch would. */
        while (off < end) {
            size_t k = 1 + rnd() % 5000;

            if (k > end - off)
                k = end - off;
            ck_assert_int_eq(gz_feed(z, page + off, k, GZ_FLUSH_NONE, collect, gz), GZ_OK);
            off += k;
        }
        ck_assert_int_eq(gz_cut(z, collect, gz, &segs[i]), GZ_OK);
    }
    ck_assert_int_eq(gz_feed(z, NULL, 0, GZ_FLUSH_FINISH, collect, gz), GZ_END);
    gz_free(&z);
}

/* Random increasing cut points in (0, len), some repeated (empty segments). */
static size_t
random_cuts(size_t len, size_t *cuts, size_t max)
{
    size_t n = rnd() % max;

    for (size_t i = 0; i < n; i++)
        cuts[i] = len > 0 ? rnd() % len : 0;
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && cuts[j - 1] > cuts[j]; j--) {
            size_t t = cuts[j];
            cuts[j] = cuts[j - 1];
            cuts[j - 1] = t;
        }
    return (n);
}

START_TEST(segments_describe_the_stream)
{
    for (int round = 0; round < 40; round++) {
        size_t len = rnd() % (round < 20 ? 3000 : 300000), cuts[64], ncut, at = 10, pos = 0;
        unsigned char *page = make_page(len);
        struct gz_seg segs[65];
        struct buf gz = { 0 }, whole = { 0 };

        ncut = random_cuts(len, cuts, 64);
        encode_cut(page, len, cuts, ncut, 1 + round % 9, &gz, segs);
        /* Still one valid gzip of the whole page: the stored object is sound. */
        buf_add(&whole, page, len);
        check_gunzip(&gz, &whole);
        /* The segments tile the deflate data, and each says what it holds. */
        for (size_t i = 0; i <= ncut; i++) {
            ck_assert_uint_eq(segs[i].zoff, at);
            ck_assert_uint_eq(segs[i].len, (i < ncut ? cuts[i] : len) - pos);
            /* Each ends with the full flush's empty stored block; an empty one may be nothing. */
            if (segs[i].len > 0 || segs[i].zlen > 0) {
                ck_assert_uint_ge(segs[i].zlen, 5);
                ck_assert(memcmp(gz.p + segs[i].zoff + segs[i].zlen - 4, "\0\0\xff\xff", 4) == 0);
            }
            ck_assert_uint_eq(segs[i].crc, (uint32_t)crc32(0, page + pos, (uInt)segs[i].len));
            at += segs[i].zlen;
            pos += segs[i].len;
        }
        ck_assert_uint_eq(at + 2 + 8, gz.len); /* the empty last block and the trailer */
        free(page);
        free(gz.p);
        free(whole.p);
    }
}
END_TEST

/* A gzip member of data made by zlib: level, strategy, windowBits vary, as backends do. */
static void
zlib_member(const unsigned char *data, size_t len, int level, int strategy, struct buf *out)
{
    z_stream zs;
    size_t cap = deflateBound(NULL, (uLong)len) + 64;

    memset(&zs, 0, sizeof zs);
    ck_assert_int_eq(deflateInit2(&zs, level, Z_DEFLATED, 31, 8, strategy), Z_OK);
    out->len = 0;
    out->cap = cap + 32;
    out->p = realloc(out->p, out->cap);
    zs.next_in = (unsigned char *)(uintptr_t)data;
    zs.avail_in = (uInt)len;
    zs.next_out = out->p;
    zs.avail_out = (uInt)out->cap;
    ck_assert_int_eq(deflate(&zs, Z_FINISH), Z_STREAM_END);
    out->len = zs.total_out;
    deflateEnd(&zs);
}

/* The bits of a member, found by our tracking decoder fed in random pieces. */
static void
member_bits(const struct buf *m, const unsigned char *want, size_t len, struct gz_bits *b)
{
    struct gz *z = gz_new(GZ_DECODE, 0);
    struct buf out = { 0 };
    size_t off = 0;

    gz_track(z);
    while (off < m->len) {
        size_t k = 1 + rnd() % 3000;
        if (k > m->len - off)
            k = m->len - off;
        ck_assert_int_ne(gz_feed(z, m->p + off, k, GZ_FLUSH_NONE, collect, &out), GZ_E_DATA);
        off += k;
    }
    ck_assert_int_eq(gz_feed(z, NULL, 0, GZ_FLUSH_FINISH, collect, &out), GZ_END);
    ck_assert_uint_eq(out.len, len);
    ck_assert(len == 0 || memcmp(out.p, want, len) == 0);
    ck_assert(gz_bits(z, b));
    ck_assert_uint_eq(b->len, len);
    ck_assert_uint_eq(b->crc, (uint32_t)crc32(0, want, (uInt)len));
    ck_assert_uint_eq((b->stop + 7) / 8 + 8, m->len);
    gz_free(&z);
    free(out.p);
}

static void
feed_member(struct gz_stitch *st, const struct buf *m, const struct gz_bits *b)
{
    size_t off = 0;

    ck_assert_int_eq(gz_stitch_member_begin(st, b), 0);
    while (off < m->len) {
        size_t k = 1 + rnd() % 700;
        if (k > m->len - off)
            k = m->len - off;
        ck_assert_int_eq(gz_stitch_member(st, m->p + off, k), 0);
        off += k;
    }
    ck_assert_int_eq(gz_stitch_member_end(st), 0);
}

START_TEST(stitch_random_pages)
{
    static const int strategies[] = { Z_DEFAULT_STRATEGY, Z_FIXED, Z_HUFFMAN_ONLY, Z_RLE,
                                      Z_FILTERED };

    for (int round = 0; round < 60; round++) {
        size_t len = rnd() % (round % 3 == 0 ? 200000 : 5000), cuts[32], ncut;
        unsigned char *page = make_page(len);
        struct gz_seg segs[33];
        struct buf gz = { 0 }, want = { 0 }, out = { 0 }, m = { 0 }, raw = { 0 }, rawwant = { 0 };
        struct gz_stitch st;
        struct gz *rz = gz_new(GZ_DECODE_RAW, 0);
        size_t pos = 0;

        ncut = random_cuts(len, cuts, 32);
        encode_cut(page, len, cuts, ncut, 6, &gz, segs);
        ck_assert_int_eq(gz_stitch_begin(&st, collect, &out), 0);
        for (size_t i = 0; i <= ncut; i++) {
            unsigned what = rnd() % 8;

            if (what == 0) {
                /* An identity fragment before the segment. */
                size_t fl = rnd() % 70000;
                unsigned char *f = make_page(fl);
                ck_assert_int_eq(gz_stitch_identity(&st, f, fl), 0);
                buf_add(&want, f, fl);
                free(f);
            } else if (what == 1) {
                /* A gzip fragment, made any way zlib can. */
                size_t fl = rnd() % 3 == 0 ? 0 : rnd() % 40000;
                unsigned char *f = make_page(fl);
                struct gz_bits b;
                zlib_member(f, fl, rnd() % 10, strategies[rnd() % 5], &m);
                member_bits(&m, f, fl, &b);
                feed_member(&st, &m, &b);
                buf_add(&want, f, fl);
                free(f);
            }
            /* The segment itself, or skipped (ESI markup) one time in four. */
            if (rnd() % 4 != 0) {
                const unsigned char *p = gz.p + segs[i].zoff;
                size_t left = (size_t)segs[i].zlen;

                while (left > 0) {
                    size_t k = 1 + rnd() % 1000;
                    if (k > left)
                        k = left;
                    ck_assert_int_eq(gz_stitch_deflate(&st, p, k), 0);
                    ck_assert_int_eq(gz_feed(rz, p, k, GZ_FLUSH_NONE, collect, &raw), GZ_OK);
                    p += k;
                    left -= k;
                }
                gz_stitch_account(&st, segs[i].crc, segs[i].len);
                buf_add(&want, page + pos, (size_t)segs[i].len);
                buf_add(&rawwant, page + pos, (size_t)segs[i].len);
            }
            pos += (size_t)segs[i].len;
        }
        ck_assert_int_eq(gz_stitch_end(&st), 0);
        ck_assert_uint_eq(st.zout, out.len);
        check_gunzip(&out, &want);
        /* The raw decoder takes the kept segments one after the other (an identity client). */
        ck_assert_uint_eq(raw.len, rawwant.len);
        ck_assert(raw.len == 0 || memcmp(raw.p, rawwant.p, raw.len) == 0);
        gz_free(&rz);
        free(page);
        free(gz.p);
        free(want.p);
        free(out.p);
        free(m.p);
        free(raw.p);
        free(rawwant.p);
    }
}
END_TEST

/* Every end bit a last block can have, 0..7, and members spliced back to back. */
START_TEST(members_any_alignment)
{
    unsigned seen = 0;
    struct buf out = { 0 }, want = { 0 }, m = { 0 };
    struct gz_stitch st;

    ck_assert_int_eq(gz_stitch_begin(&st, collect, &out), 0);
    for (int i = 0; i < 400 && seen != 0xff; i++) {
        size_t fl = rnd() % 300;
        unsigned char *f = make_page(fl);
        struct gz_bits b;

        zlib_member(f, fl, 1 + rnd() % 9, i % 2 ? Z_FIXED : Z_DEFAULT_STRATEGY, &m);
        member_bits(&m, f, fl, &b);
        seen |= 1u << (b.stop % 8);
        feed_member(&st, &m, &b);
        buf_add(&want, f, fl);
        free(f);
    }
    ck_assert_uint_eq(seen, 0xff);
    ck_assert_int_eq(gz_stitch_end(&st), 0);
    check_gunzip(&out, &want);
    free(out.p);
    free(want.p);
    free(m.p);
}
END_TEST

/* The encoder's own bits: an object the cache compressed is spliced as any other. */
START_TEST(encoder_bits)
{
    for (int i = 0; i < 10; i++) {
        size_t len = rnd() % 100000;
        unsigned char *page = make_page(len);
        struct buf gz = { 0 }, out = { 0 }, want = { 0 };
        struct gz *z = gz_new(GZ_ENCODE, 6);
        struct gz_bits b, b2;
        struct gz_stitch st;

        gz_track(z);
        ck_assert_int_eq(gz_feed(z, page, len, GZ_FLUSH_FINISH, collect, &gz), GZ_END);
        ck_assert(gz_bits(z, &b));
        gz_free(&z);
        ck_assert_uint_eq(b.len, len);
        ck_assert_uint_eq((b.stop + 7) / 8 + 8, gz.len);
        /* What the decoder finds agrees. */
        member_bits(&gz, page, len, &b2);
        ck_assert_uint_eq(b.start, b2.start);
        ck_assert_uint_eq(b.last, b2.last);
        ck_assert_uint_eq(b.stop, b2.stop);
        ck_assert_uint_eq(b.crc, b2.crc);
        ck_assert_int_eq(gz_stitch_begin(&st, collect, &out), 0);
        ck_assert_int_eq(gz_stitch_identity(&st, "<p>", 3), 0);
        feed_member(&st, &gz, &b);
        ck_assert_int_eq(gz_stitch_identity(&st, "</p>", 4), 0);
        ck_assert_int_eq(gz_stitch_end(&st), 0);
        buf_add(&want, "<p>", 3);
        buf_add(&want, page, len);
        buf_add(&want, "</p>", 4);
        check_gunzip(&out, &want);
        free(page);
        free(gz.p);
        free(out.p);
        free(want.p);
    }
}
END_TEST

START_TEST(no_bits_for_two_members)
{
    struct buf m = { 0 }, two = { 0 }, out = { 0 };
    struct gz *z = gz_new(GZ_DECODE, 0);
    struct gz_bits b;

    zlib_member((const unsigned char *)"hello", 5, 6, Z_DEFAULT_STRATEGY, &m);
    buf_add(&two, m.p, m.len);
    buf_add(&two, m.p, m.len);
    gz_track(z);
    ck_assert_int_eq(gz_feed(z, two.p, two.len, GZ_FLUSH_FINISH, collect, &out), GZ_END);
    ck_assert(!gz_bits(z, &b));
    gz_free(&z);
    /* Untracked: none either. */
    z = gz_new(GZ_DECODE, 0);
    out.len = 0;
    ck_assert_int_eq(gz_feed(z, m.p, m.len, GZ_FLUSH_FINISH, collect, &out), GZ_END);
    ck_assert(!gz_bits(z, &b));
    gz_free(&z);
    free(m.p);
    free(two.p);
    free(out.p);
}
END_TEST

START_TEST(bad_bits_refused)
{
    struct buf m = { 0 }, out = { 0 };
    struct gz_bits b, bad;
    struct gz_stitch st;

    zlib_member((const unsigned char *)"hello world", 11, 6, Z_DEFAULT_STRATEGY, &m);
    member_bits(&m, (const unsigned char *)"hello world", 11, &b);
    bad = b;
    bad.start = 12; /* inside the header */
    ck_assert_int_eq(gz_stitch_begin(&st, collect, &out), 0);
    ck_assert_int_eq(gz_stitch_member_begin(&st, &bad), -1);
    ck_assert_int_eq(gz_stitch_end(&st), -1); /* unusable after */
    /* A member cut short. */
    out.len = 0;
    ck_assert_int_eq(gz_stitch_begin(&st, collect, &out), 0);
    ck_assert_int_eq(gz_stitch_member_begin(&st, &b), 0);
    ck_assert_int_eq(gz_stitch_member(&st, m.p, m.len - 3), 0);
    ck_assert_int_eq(gz_stitch_member_end(&st), -1);
    free(m.p);
    free(out.p);
}
END_TEST

static int
out_fails(void *priv, const char *p, size_t len)
{
    (void)priv;
    (void)p;
    (void)len;
    return (-1);
}

START_TEST(output_failure)
{
    struct gz_stitch st;

    ck_assert_int_eq(gz_stitch_begin(&st, out_fails, NULL), -1);
    ck_assert_int_eq(gz_stitch_identity(&st, "x", 1), -1);
    ck_assert_int_eq(gz_stitch_end(&st), -1);
}
END_TEST

/* An empty page, and a stream of nothing but identity: still valid gzip. */
START_TEST(empty_and_identity_only)
{
    struct buf out = { 0 }, want = { 0 };
    struct gz_stitch st;
    unsigned char *big = make_page(200000);

    ck_assert_int_eq(gz_stitch_begin(&st, collect, &out), 0);
    ck_assert_int_eq(gz_stitch_end(&st), 0);
    check_gunzip(&out, &want);
    out.len = 0;
    ck_assert_int_eq(gz_stitch_begin(&st, collect, &out), 0);
    ck_assert_int_eq(gz_stitch_identity(&st, big, 200000), 0); /* several stored blocks */
    ck_assert_int_eq(gz_stitch_identity(&st, big, 0), 0);
    ck_assert_int_eq(gz_stitch_end(&st), 0);
    buf_add(&want, big, 200000);
    check_gunzip(&out, &want);
    free(big);
    free(out.p);
    free(want.p);
}
END_TEST

Suite *
gz_stitch_suite(void)
{
    Suite *s = suite_create("gz_stitch");
    TCase *tc = tcase_create("stitch");

    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, segments_describe_the_stream);
    tcase_add_test(tc, stitch_random_pages);
    tcase_add_test(tc, members_any_alignment);
    tcase_add_test(tc, encoder_bits);
    tcase_add_test(tc, no_bits_for_two_members);
    tcase_add_test(tc, bad_bits_refused);
    tcase_add_test(tc, output_failure);
    tcase_add_test(tc, empty_and_identity_only);
    suite_add_tcase(s, tc);
    return s;
}
