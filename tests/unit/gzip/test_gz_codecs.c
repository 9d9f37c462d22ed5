/*
 * gz codecs beyond gzip: brotli and zstd round trips against the
 * libraries' own one-shot functions both ways, in odd-sized pieces;
 * truncation, junk and corruption caught; the decompression-bomb bounds
 * on every decoder; and the Accept-Encoding negotiation among stored
 * codings, the compress_formats list and the per-coding head.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <brotli/decode.h>
#include <brotli/encode.h>
#include <zstd.h>

#include "unit.h"
#include "tbuf.h"
#include "surogat/gz.h"
#include "surogat/http.h"
#include "surogat/par.h"
#include "surogat/sb.h"
#include "surogat/ws.h"

static uint32_t rs = 2463534242u;

static uint32_t
rnd(void)
{
    return (xrnd(&rs));
}

static unsigned char *
make_data(size_t n, bool is_text)
{
    static const char *const words[] = { "<div class=\"x\">", "surogat ", "cache ", "</p>\n",
                                         "brotli ",           "zstd " };
    unsigned char *d = malloc(n ? n : 1);

    ck_assert_ptr_nonnull(d);
    for (size_t i = 0; i < n;) {
        if (!is_text) {
            d[i++] = (unsigned char)rnd();
            continue;
        }
        const char *w = words[rnd() % 6];
        for (size_t k = 0; w[k] != '\0' && i < n; k++)
            d[i++] = (unsigned char)w[k];
    }
    return (d);
}

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

static void
ref_decode(enum gz_coding c, const struct buf *enc, const unsigned char *want, size_t n)
{
    unsigned char *out = malloc(n + 1);
    size_t got = n + 1;

    if (c == GZ_C_BR) {
        ck_assert_int_eq(BrotliDecoderDecompress(enc->len, enc->p, &got, out),
                         BROTLI_DECODER_RESULT_SUCCESS);
    } else {
        got = ZSTD_decompress(out, n + 1, enc->p, enc->len);
        ck_assert(!ZSTD_isError(got));
    }
    ck_assert_uint_eq(got, n);
    ck_assert(n == 0 || memcmp(out, want, n) == 0);
    free(out);
}

static void
ref_encode(enum gz_coding c, const unsigned char *in, size_t n, struct buf *enc)
{
    if (c == GZ_C_BR) {
        enc->cap = BrotliEncoderMaxCompressedSize(n) + 16;
        enc->p = malloc(enc->cap);
        enc->len = enc->cap;
        ck_assert(BrotliEncoderCompress(9, 22, BROTLI_MODE_GENERIC, n, in, &enc->len, enc->p));
    } else {
        enc->cap = ZSTD_compressBound(n);
        enc->p = malloc(enc->cap);
        enc->len = ZSTD_compress(enc->p, enc->cap, in, n, 3);
        ck_assert(!ZSTD_isError(enc->len));
    }
}

static void
round_trip(enum gz_coding c, size_t n, bool is_text, int level, size_t maxpiece)
{
    unsigned char *data = make_data(n, is_text);
    struct buf enc = { 0 }, dec = { 0 }, ref = { 0 };
    struct gz *z;

    z = gz_new(gz_coding_encoder(c), level);
    ck_assert_int_eq(feed_pieces(z, data, n, maxpiece, &enc), GZ_END);
    ck_assert_uint_eq(gz_bytes_in(z), n);
    ck_assert_uint_eq(gz_bytes_out(z), enc.len);
    gz_free(&z);
    ref_decode(c, &enc, data, n);
    if (is_text && n > 10000 && maxpiece >= 1000)
        ck_assert_uint_lt(enc.len, n / 3);

    z = gz_new(gz_coding_decoder(c), 0);
    ck_assert_int_eq(feed_pieces(z, enc.p, enc.len, maxpiece, &dec), GZ_END);
    ck_assert_uint_eq(dec.len, n);
    ck_assert(n == 0 || memcmp(dec.p, data, n) == 0);
    gz_free(&z);

    /* The library's own stream through our decoder. */
    ref_encode(c, data, n, &ref);
    dec.len = 0;
    z = gz_new(gz_coding_decoder(c), 0);
    ck_assert_int_eq(feed_pieces(z, ref.p, ref.len, maxpiece, &dec), GZ_END);
    ck_assert_uint_eq(dec.len, n);
    ck_assert(n == 0 || memcmp(dec.p, data, n) == 0);
    gz_free(&z);
    free(data);
    free(enc.p);
    free(dec.p);
    free(ref.p);
}

START_TEST(round_trips)
{
    static const size_t sizes[] = { 0, 1, 17, 16384, 16385, 65537, 300001 };
    static const size_t pieces[] = { 1, 7, 1000, 70000 };
    enum gz_coding c = _i == 0 ? GZ_C_BR : GZ_C_ZSTD;

    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        for (size_t j = 0; j < sizeof pieces / sizeof pieces[0]; j++) {
            if (sizes[i] > 20000 && pieces[j] == 1)
                continue; /* a byte at a time is slow and proves nothing more */
            round_trip(c, sizes[i], true, -1, pieces[j]);
            round_trip(c, sizes[i], false, 1, pieces[j]);
        }
    round_trip(c, 100000, true, c == GZ_C_BR ? 11 : 19, 333);
    round_trip(c, 100000, true, 99, 333); /* out of range: the default */
}
END_TEST

static enum gz_status
decode_all(enum gz_coding c, const unsigned char *in, size_t len, size_t maxpiece, struct buf *out)
{
    struct gz *z = gz_new(gz_coding_decoder(c), 0);
    enum gz_status st = feed_pieces(z, in, len, maxpiece, out);

    /* A failed decoder stays failed. */
    if (st != GZ_END)
        ck_assert_int_ne(gz_feed(z, "x", 1, GZ_FLUSH_NONE, collect, out), GZ_OK);
    gz_free(&z);
    return (st);
}

START_TEST(corrupt_detected)
{
    enum gz_coding c = _i == 0 ? GZ_C_BR : GZ_C_ZSTD;
    size_t n = 50000;
    unsigned char *data = make_data(n, true), *bad;
    struct buf enc = { 0 }, out = { 0 };

    ref_encode(c, data, n, &enc);
    /* Truncated anywhere: never GZ_END. */
    for (size_t cut = 1; cut < enc.len; cut += 1 + enc.len / 13) {
        out.len = 0;
        ck_assert_int_eq(decode_all(c, enc.p, cut, 100, &out), GZ_E_TRUNCATED);
    }
    /* Nothing at all. */
    ck_assert_int_eq(decode_all(c, enc.p, 0, 100, &out), GZ_E_DATA);
    /*
     * A flipped byte in the middle: zstd as we encode it carries a
     * checksum and refuses it; brotli has none, so a flip may decode to
     * other bytes -- but never to the same ones, and never past bounds.
     */
    bad = malloc(enc.len + 2);
    memcpy(bad, enc.p, enc.len);
    bad[enc.len / 2] ^= 0x55;
    out.len = 0;
    if (c == GZ_C_ZSTD) {
        struct buf ours = { 0 };
        struct gz *z = gz_new(GZ_ENCODE_ZSTD, 3);

        ck_assert_int_eq(gz_feed(z, data, n, GZ_FLUSH_FINISH, collect, &ours), GZ_END);
        gz_free(&z);
        ours.p[ours.len - 2] ^= 0x01; /* in the checksum, the last 4 bytes */
        ck_assert_int_eq(decode_all(c, ours.p, ours.len, 500, &out), GZ_E_DATA);
        ours.p[ours.len - 2] ^= 0x01;
        ours.p[ours.len / 2] ^= 0x55;
        out.len = 0;
        ck_assert_int_eq(decode_all(c, ours.p, ours.len, 500, &out), GZ_E_DATA);
        free(ours.p);
    } else if (decode_all(c, bad, enc.len, 500, &out) == GZ_END) {
        ck_assert(out.len != n || memcmp(out.p, data, n) != 0);
    }
    /* Junk after the end. */
    memcpy(bad, enc.p, enc.len);
    bad[enc.len] = 'x';
    bad[enc.len + 1] = 'y';
    out.len = 0;
    ck_assert_int_eq(decode_all(c, bad, enc.len + 2, 500, &out), GZ_E_DATA);
    /* Not that coding at all. */
    out.len = 0;
    ck_assert_int_ne(decode_all(c, data, 1000, 500, &out), GZ_END);
    free(bad);
    free(enc.p);
    free(out.p);
    free(data);
}
END_TEST

START_TEST(zstd_frames_and_window)
{
    size_t n = 20000;
    unsigned char *a = make_data(n, true), *two;
    struct buf e1 = { 0 }, out = { 0 };
    ZSTD_CCtx *cc;
    size_t big = (size_t)32 << 20, blen;
    unsigned char *src, *dst;

    /* Two frames one after the other: both decoded (RFC 8878 3.1). */
    ref_encode(GZ_C_ZSTD, a, n, &e1);
    two = malloc(2 * e1.len);
    memcpy(two, e1.p, e1.len);
    memcpy(two + e1.len, e1.p, e1.len);
    ck_assert_int_eq(decode_all(GZ_C_ZSTD, two, 2 * e1.len, 999, &out), GZ_END);
    ck_assert_uint_eq(out.len, 2 * n);
    ck_assert(memcmp(out.p + n, a, n) == 0);

    /* A frame asking for a 32 MiB window: refused, whatever its size. */
    src = make_data(big, false);
    memcpy(src + big - 4096, src, 4096); /* a match 32 MiB back needs the window */
    cc = ZSTD_createCCtx();
    ZSTD_CCtx_setParameter(cc, ZSTD_c_windowLog, 25);
    ZSTD_CCtx_setParameter(cc, ZSTD_c_compressionLevel, 1);
    dst = malloc(ZSTD_compressBound(big));
    blen = ZSTD_compress2(cc, dst, ZSTD_compressBound(big), src, big);
    ck_assert(!ZSTD_isError(blen));
    out.len = 0;
    ck_assert_int_eq(decode_all(GZ_C_ZSTD, dst, blen, 1 << 20, &out), GZ_E_DATA);
    ZSTD_freeCCtx(cc);
    free(src);
    free(dst);
    free(two);
    free(a);
    free(e1.p);
    free(out.p);
}
END_TEST

/* Bombs: 64 MiB of one byte, which every codec squeezes far past 1000:1. */
START_TEST(bombs)
{
    enum gz_coding c = _i == 0 ? GZ_C_BR : _i == 1 ? GZ_C_ZSTD : GZ_C_GZIP;
    size_t n = (size_t)64 << 20;
    unsigned char *zeros = calloc(1, n);
    struct buf enc = { 0 }, out = { 0 };
    struct gz *z;
    char msg[128];
    struct sb sb;

    /* gzip at level 9 only: its fast levels stay near 230:1 on such input. */
    z = gz_new(gz_coding_encoder(c), c == GZ_C_GZIP ? 9 : 1);
    ck_assert_int_eq(gz_feed(z, zeros, n, GZ_FLUSH_FINISH, collect, &enc), GZ_END);
    gz_free(&z);
    ck_assert_uint_lt(enc.len, n / 1000);
    /* gz_new() takes the bound from the parameters, as for gunzip. */
    par.gunzip_max_ratio = 1000;
    par.gunzip_max_size = 0;
    for (size_t piece = 1; piece <= 1000000; piece *= 100) {
        out.len = 0;
        z = gz_new(gz_coding_decoder(c), 0);
        ck_assert_int_eq(feed_pieces(z, enc.p, enc.len, piece, &out), GZ_E_BOMB);
        ck_assert_uint_le(out.len, 1000 * gz_bytes_in(z));
        ck_assert_uint_lt(out.len, 2 << 20);
        sb_init(&sb, msg, sizeof msg);
        gz_explain(z, &sb);
        ck_assert_msg(strncmp(msg, "over gunzip_max_ratio (1000:1): ", 32) == 0, "%s", msg);
        gz_free(&z);
    }
    /* The size bound alike. */
    par.gunzip_max_ratio = 0;
    par.gunzip_max_size = 1 << 20;
    out.len = 0;
    z = gz_new(gz_coding_decoder(c), 0);
    ck_assert_int_eq(feed_pieces(z, enc.p, enc.len, 4096, &out), GZ_E_BOMB);
    ck_assert_uint_le(out.len, 1 << 20);
    sb_init(&sb, msg, sizeof msg);
    gz_explain(z, &sb);
    ck_assert_msg(strncmp(msg, "over gunzip_max_size (1048576 bytes)", 36) == 0, "%s", msg);
    gz_free(&z);
    /* No bounds: all of it. */
    par.gunzip_max_size = 0;
    out.len = 0;
    z = gz_new(gz_coding_decoder(c), 0);
    ck_assert_int_eq(feed_pieces(z, enc.p, enc.len, 1 << 20, &out), GZ_END);
    ck_assert_uint_eq(out.len, n);
    gz_free(&z);
    free(zeros);
    free(enc.p);
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
    enum gz_kind k[] = { GZ_ENCODE_BR, GZ_ENCODE_ZSTD };
    unsigned char *data = make_data(200000, false);

    for (size_t i = 0; i < 2; i++) {
        struct gz *z = gz_new(k[i], 1);

        ck_assert_int_eq(gz_feed(z, data, 200000, GZ_FLUSH_FINISH, out_fails, NULL), GZ_E_OUTPUT);
        gz_free(&z);
    }
    free(data);
}
END_TEST

/* ---- negotiation ---- */

#define I  GZ_C_IDENTITY
#define G  GZ_C_GZIP
#define B  GZ_C_BR
#define Z  GZ_C_ZSTD
#define SI GZ_SET(GZ_C_IDENTITY)
#define SG GZ_SET(GZ_C_GZIP)
#define SB GZ_SET(GZ_C_BR)
#define SZ GZ_SET(GZ_C_ZSTD)

/* The Accept-Encoding field value v (NULL: no field) parsed into *ae. */
static void
ae_of(struct gz_ae *ae, const char *v)
{
    gz_ae_init(ae);
    if (v != NULL) {
        ae->present = true;
        gz_ae_add(ae, v, strlen(v));
    }
}

START_TEST(negotiate_table)
{
    static const enum gz_coding pref[] = { GZ_C_BR, GZ_C_ZSTD, GZ_C_GZIP };
    static const struct {
        const char *ae; /* NULL: no Accept-Encoding field */
        unsigned stored;
        enum gz_coding send, from;
    } v[] = {
        /* what a browser sends */
        { "gzip, deflate, br, zstd", SB | SG, B, B },
        { "gzip, deflate, br, zstd", SG, G, G },
        { "gzip, deflate, br, zstd", SZ | SG, Z, Z },
        { "gzip, deflate, br", SZ | SG, G, G },
        { "gzip, deflate", SB, I, B },      /* br not taken: decoded */
        { "gzip, deflate", SB | SZ, I, Z }, /* decoded from the quicker one */
        { "gzip, deflate", SI | SB, I, I },
        /* q-values rule over the server's order */
        { "br;q=0.5, gzip;q=0.9", SB | SG, G, G },
        { "br;q=1.0, gzip;q=0.8, *;q=0.1", SB | SG, B, B },
        { "zstd;q=0.3, br;q=0.3", SZ | SB, B, B }, /* a tie: the server's order */
        { "zstd, br", SZ | SB, B, B },
        { "*", SZ | SG, Z, Z },
        { "*;q=0.5, gzip", SB | SG, G, G },
        { "*;q=0.5, gzip;q=0.1", SB | SG, B, B },
        { "br;q=0, *", SB | SG, G, G },
        { "x-gzip", SG, G, G },
        { "GZIP;Q=1", SG, G, G },
        { "BR", SB, B, B },
        /* identity */
        { "gzip;q=0.2, identity;q=0.8", SG | SI, I, I },
        { "gzip;q=0.2, identity;q=0.8", SG, I, G },
        { "gzip;q=0.5, identity;q=0.5", SG | SI, G, G }, /* a tie: compressed */
        { "identity", SB | SG, I, B },
        { "", SB | SG, I, B },
        { NULL, SB | SG, I, B }, /* no field: identity */
        { NULL, SI, I, I },
        { "br", SI, I, I },
        /* identity refused: made in a coding the client takes */
        { "gzip, identity;q=0", SB, G, B },
        { "zstd, *;q=0", SG, Z, G },
        { "gzip;q=0.3, zstd;q=0.6, identity;q=0", SI, Z, I },
        { "deflate, identity;q=0", SB, I, B }, /* nothing we can make: identity anyway */
        { "*;q=0", SG, I, G },
        /* malformed weights are ignored, as for gzip */
        { "br;q=2, gzip", SB | SG, G, G },
        { "br;q=abc", SB, I, B },
        { "brx, zstdx", SB | SZ, I, Z },
    };
    struct gz_ae ae;

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        struct gz_pick pk;

        ae_of(&ae, v[i].ae);
        pk = gz_negotiate(&ae, v[i].stored, pref, 3);
        ck_assert_msg(pk.send == v[i].send && pk.from == v[i].from,
                      "'%s' stored %#x: got %s from %s", v[i].ae ? v[i].ae : "(none)", v[i].stored,
                      gz_coding_name(pk.send), gz_coding_name(pk.from));
    }
}
END_TEST

START_TEST(negotiate_pref_order)
{
    static const enum gz_coding gz_first[] = { GZ_C_GZIP, GZ_C_ZSTD };
    struct gz_ae ae;
    struct gz_pick pk;

    gz_ae_init(&ae);
    ae.present = true;
    gz_ae_add(&ae, "br, gzip, zstd", 14);
    pk = gz_negotiate(&ae, SB | SG | SZ, gz_first, 2);
    ck_assert_int_eq(pk.send, G);
    /* br is not in the list: after those that are. */
    pk = gz_negotiate(&ae, SB | SZ, gz_first, 2);
    ck_assert_int_eq(pk.send, Z);
    /* Identity refused and only br wanted: br is not configured, so identity. */
    gz_ae_init(&ae);
    ae.present = true;
    gz_ae_add(&ae, "br, identity;q=0", 16);
    pk = gz_negotiate(&ae, SG, gz_first, 2);
    ck_assert_int_eq(pk.send, I);
    ck_assert_int_eq(pk.from, G);
}
END_TEST

/*
 * A cached object: what it holds (the stored coding and its copies) is
 * served as it is when the client takes it; otherwise made on the fly --
 * decoded, and encoded again when the client takes another coding.
 */
START_TEST(negotiate_held_table)
{
    static const enum gz_coding pref[] = { GZ_C_BR, GZ_C_GZIP };
    static const struct {
        const char *ae; /* NULL: no Accept-Encoding field */
        enum gz_coding stored;
        unsigned copies;
        enum gz_coding send, from;
    } v[] = {
        /* the stored coding, taken */
        { "gzip, deflate, br, zstd", B, 0, B, B },
        { "gzip, deflate, br, zstd", G, 0, G, G }, /* br would need work: gzip is stored */
        { "br;q=1, gzip;q=0.5", G, 0, G, G },      /* stored and taken beats preferred */
        { "gzip, deflate, br", Z, 0, B, Z },       /* zstd not taken: br made from it */
        { "gzip, br", B, SG | SI, B, B },
        /* identity */
        { NULL, B, 0, I, B },
        { NULL, B, SI, I, I }, /* an identity copy: no decoding */
        { NULL, B, SG | SI, I, I },
        { NULL, B, SG, I, B }, /* a gzip copy is no quicker to decode than the br body */
        { "", G, 0, I, G },
        { "identity", G, SI, I, I },
        { "gzip;q=0.2, identity;q=0.8", G, 0, I, G },
        { "gzip;q=0.2, identity;q=0.8", G, SI, I, I },
        { "gzip;q=0.5, identity;q=0.5", G, SI, G, G },
        /* another coding, made: decoded and encoded, from identity when a copy holds it */
        { "gzip", B, 0, G, B },
        { "gzip, deflate", B, SI, G, I }, /* the same answer with a copy, cheaper */
        { "gzip", B, SG | SI, G, G },     /* a gzip copy */
        { "br", G, 0, B, G },
        { "zstd", B, 0, I, B },               /* zstd is not in compress_formats: identity */
        { "zstd", B, SZ, I, Z },              /* ... whatever copies there are (cheaper) */
        { "zstd, identity;q=0", B, 0, I, B }, /* nothing we can make: identity all the same */
        { "gzip;q=0.4, identity;q=0.6", B, 0, I, B },
        { "gzip;q=0.6, identity;q=0.4", B, 0, G, B },
        { "*", Z, 0, Z, Z },
        { "*;q=0", G, 0, I, G },
        { "br;q=0, *", B, SI, G, I },           /* gzip and identity tie: gzip */
        { "deflate, gzip;q=0.8", B, 0, G, B },  /* identity's implicit weight does not count */
        { "gzip;q=0.5, br;q=0.1", B, 0, B, B }, /* the stored coding, taken */
    };
    struct gz_ae ae;

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        struct gz_pick pk;

        ae_of(&ae, v[i].ae);
        pk = gz_negotiate_held(&ae, v[i].stored, v[i].copies, pref, 2);
        ck_assert_msg(pk.send == v[i].send && pk.from == v[i].from,
                      "%zu: '%s' stored %s copies %#x: got %s from %s", i,
                      v[i].ae ? v[i].ae : "(none)", gz_coding_name(v[i].stored), v[i].copies,
                      gz_coding_name(pk.send), gz_coding_name(pk.from));
    }
}
END_TEST

START_TEST(ae_from_request)
{
    struct http_hdr hdr[4];
    struct http h;
    struct gz_ae ae;

    http_init(&h, hdr, 4);
    gz_ae_req(&ae, &h);
    ck_assert(!ae.present);
    ck_assert_int_eq(gz_ae_weight(&ae, GZ_C_IDENTITY), 1000);
    ck_assert_int_eq(gz_ae_weight(&ae, GZ_C_BR), 0);
    /* Two fields add up. */
    ck_assert_int_eq(http_add(&h, TXT_LIT("Accept-Encoding"), TXT_LIT("gzip;q=0.5")), 0);
    ck_assert_int_eq(http_add(&h, TXT_LIT("accept-encoding"), TXT_LIT("br;q=0.7, *;q=0.1")), 0);
    gz_ae_req(&ae, &h);
    ck_assert(ae.present);
    ck_assert_int_eq(gz_ae_weight(&ae, GZ_C_GZIP), 500);
    ck_assert_int_eq(gz_ae_weight(&ae, GZ_C_BR), 700);
    ck_assert_int_eq(gz_ae_weight(&ae, GZ_C_ZSTD), 100);
    ck_assert_int_eq(gz_ae_weight(&ae, GZ_C_IDENTITY), 100); /* * covers identity too */
}
END_TEST

START_TEST(formats_list)
{
    static const struct {
        const char *in;
        int rv;
        unsigned n;
        enum gz_coding first;
    } v[] = {
        { "br,zstd,gzip", 0, 3, GZ_C_BR },
        { "gzip", 0, 1, GZ_C_GZIP },
        { " zstd , br ", 0, 2, GZ_C_ZSTD },
        { "br gzip", 0, 2, GZ_C_BR },
        { "", 0, 0, GZ_C_IDENTITY },
        { "x-gzip", 0, 1, GZ_C_GZIP },
        { "deflate", -1, 0, 0 },
        { "identity", -1, 0, 0 },
        { "br,br", -1, 0, 0 },
        { "gzip,x-gzip", -1, 0, 0 },
    };

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        enum gz_coding out[GZ_C__N];
        unsigned n = 99;
        char e[128];
        struct sb err;

        sb_init(&err, e, sizeof e);
        ck_assert_int_eq(gz_formats(v[i].in, out, &n, &err), v[i].rv);
        if (v[i].rv == 0) {
            ck_assert_uint_eq(n, v[i].n);
            if (n > 0)
                ck_assert_int_eq(out[0], v[i].first);
        } else {
            ck_assert_uint_gt(err.len, 0);
        }
    }
}
END_TEST

START_TEST(coding_names)
{
    ck_assert_str_eq(gz_coding_name(GZ_C_BR), "br");
    ck_assert_str_eq(gz_coding_name(GZ_C_ZSTD), "zstd");
    ck_assert_int_eq(gz_coding_of(&TXT_LIT("x-gzip")), GZ_C_GZIP);
    ck_assert_int_eq(gz_coding_of(&TXT_LIT("Br")), GZ_C_BR);
    ck_assert_int_eq(gz_coding_of(&TXT_LIT("identity")), GZ_C_IDENTITY);
    ck_assert_int_eq(gz_coding_of(&TXT_LIT("compress")), -1);
}
END_TEST

START_TEST(head_per_coding)
{
    static const struct {
        const char *etag;
        enum gz_coding from, send;
        const char *want_etag, *want_ce;
    } v[] = {
        { "\"abc\"", I, B, "W/\"abc-br\"", "br" },
        { "\"abc\"", I, Z, "W/\"abc-zstd\"", "zstd" },
        { "\"abc\"", I, G, "W/\"abc\"", "gzip" },
        { "\"abc\"", B, I, "W/\"abc\"", NULL },
        { "W/\"abc\"", I, B, "W/\"abc-br\"", "br" },
        { "W/\"abc\"", B, I, "W/\"abc\"", NULL },
        { "\"abc\"", B, B, "\"abc\"", "br" }, /* unchanged: only Vary */
        { "junk", I, B, "junk", "br" },
        /* from a head made for another coding: its suffix goes first */
        { "W/\"abc-br\"", B, I, "W/\"abc\"", NULL },
        { "W/\"abc-br\"", B, G, "W/\"abc\"", "gzip" },
        { "W/\"abc-br\"", B, Z, "W/\"abc-zstd\"", "zstd" },
        { "W/\"abc-zstd\"", Z, B, "W/\"abc-br\"", "br" },
        { "W/\"abc\"", G, B, "W/\"abc-br\"", "br" },
        { "W/\"abc-br\"", G, I, "W/\"abc-br\"", NULL }, /* the origin's own: gzip has none */
        { "\"abc-br\"", B, I, "W/\"abc-br\"", NULL },   /* strong: the origin's, kept */
        { "W/\"-br\"", B, I, "W/\"\"", NULL },
    };

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        char wsbuf[1024];
        struct http_hdr hdr[8];
        struct http h;
        struct ws ws;
        const struct txt *t;

        ws_init(&ws, wsbuf, sizeof wsbuf);
        http_init(&h, hdr, 8);
        ck_assert_int_eq(
            http_add(&h, TXT_LIT("ETag"), (struct txt){ v[i].etag, strlen(v[i].etag) }), 0);
        ck_assert_int_eq(http_add(&h, TXT_LIT("Content-Length"), TXT_LIT("100")), 0);
        if (v[i].from != I) {
            const char *n = gz_coding_name(v[i].from);
            ck_assert_int_eq(
                http_add(&h, TXT_LIT("Content-Encoding"), (struct txt){ n, strlen(n) }), 0);
        }
        ck_assert_int_eq(gz_head_coding(&h, &ws, v[i].from, v[i].send), 0);
        t = http_value(&h, "ETag");
        ck_assert_msg(t->len == strlen(v[i].want_etag) && memcmp(t->b, v[i].want_etag, t->len) == 0,
                      "%zu: %.*s", i, (int)t->len, t->b);
        t = http_value(&h, "Content-Encoding");
        if (v[i].want_ce == NULL)
            ck_assert_ptr_null(t);
        else
            ck_assert(t != NULL && t->len == strlen(v[i].want_ce) &&
                      memcmp(t->b, v[i].want_ce, t->len) == 0);
        ck_assert(http_has_token(&h, "Vary", "Accept-Encoding"));
        ck_assert((http_value(&h, "Content-Length") != NULL) == (v[i].from == v[i].send));
    }
}
END_TEST

/* A request with Accept-Encoding v (NULL: without the field), in h over hdr[4]. */
static void
req_with_ae(struct http *h, struct http_hdr *hdr, const char *v)
{
    http_init(h, hdr, 4);
    if (v != NULL)
        ck_assert_int_eq(http_add(h, TXT_LIT("Accept-Encoding"), (struct txt){ v, strlen(v) }), 0);
}

/* What a cache that does not negotiate keeps of Accept-Encoding, and what a miss offers. */
START_TEST(ae_norm_and_offer)
{
    static const struct {
        const char *ae;
        const char *want; /* NULL: none */
    } v[] = {
        { NULL, NULL },
        { "", NULL },
        { "gzip, deflate", "gzip" },
        { "deflate, gzip", "gzip" },
        { "x-gzip;q=0.3", "gzip" },
        { "gzip, deflate, br, zstd", "br" }, /* ties: compress_formats' order */
        { "zstd, gzip;q=0.9", "zstd" },
        { "deflate", NULL },
        { "identity", NULL },
        { "gzip;q=0.5, identity;q=0.8", NULL }, /* prefers identity */
        { "*", "br" },
        { "*;q=0", NULL },
    };
    char ebuf[64], buf[GZ_AE_OFFER_MAX];
    struct http_hdr hdr[4];
    struct http h;
    struct sb err;

    par_init();
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        const char *got;

        req_with_ae(&h, hdr, v[i].ae);
        got = gz_ae_norm(&h);
        ck_assert_msg(v[i].want == NULL ? got == NULL : got != NULL && strcmp(got, v[i].want) == 0,
                      "%zu: '%s': got %s", i, v[i].ae ? v[i].ae : "(none)", got ? got : "none");
    }
    ck_assert_uint_eq(gz_ae_offer(buf, sizeof buf), strlen("br, gzip"));
    ck_assert_int_eq(memcmp(buf, "br, gzip", 8), 0);
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_int_eq(par_set("compress_formats", "zstd", &err), 0);
    ck_assert_uint_eq(gz_ae_offer(buf, sizeof buf), strlen("zstd, gzip")); /* gzip always */
    ck_assert_int_eq(memcmp(buf, "zstd, gzip", 10), 0);
    ck_assert_int_eq(par_set("compress_formats", "gzip zstd br", &err), 0);
    ck_assert_uint_eq(gz_ae_offer(buf, sizeof buf), strlen("gzip, zstd, br"));
    req_with_ae(&h, hdr, "br, zstd, gzip");
    ck_assert_str_eq(gz_ae_norm(&h), "gzip");
    ck_assert_int_eq(par_set("compress_formats", "bogus", &err), 0); /* checked where used */
    ck_assert_uint_eq(gz_ae_offer(buf, sizeof buf), strlen("gzip"));
    par_fini();
}
END_TEST

START_TEST(takes_and_resp_coding)
{
    static const struct {
        const char *ce; /* NULL: none */
        int want;
    } rc[] = {
        { NULL, GZ_C_IDENTITY }, { "identity", GZ_C_IDENTITY },
        { "gzip", GZ_C_GZIP },   { "X-Gzip", GZ_C_GZIP },
        { "br", GZ_C_BR },       { "zstd", GZ_C_ZSTD },
        { "compress", -1 },      { "gzip, br", -1 },
    };
    struct http_hdr hdr[4];
    struct http h;
    struct gz_ae ae;

    for (size_t i = 0; i < sizeof rc / sizeof rc[0]; i++) {
        http_init(&h, hdr, 4);
        if (rc[i].ce != NULL)
            ck_assert_int_eq(http_add(&h, TXT_LIT("Content-Encoding"),
                                      (struct txt){ rc[i].ce, strlen(rc[i].ce) }),
                             0);
        ck_assert_int_eq(gz_resp_coding(&h), rc[i].want);
    }
    /* Two Content-Encoding fields: two codings. */
    ck_assert_int_eq(http_add(&h, TXT_LIT("Content-Encoding"), TXT_LIT("gzip")), 0);
    ck_assert_int_eq(gz_resp_coding(&h), -1);
    req_with_ae(&h, hdr, "br;q=0.4, identity;q=0.5, gzip");
    gz_ae_req(&ae, &h);
    ck_assert(!gz_ae_takes(&ae, GZ_C_BR)); /* below identity */
    ck_assert(gz_ae_takes(&ae, GZ_C_GZIP));
    ck_assert(!gz_ae_takes(&ae, GZ_C_ZSTD));
    ck_assert(gz_ae_takes(&ae, GZ_C_IDENTITY));
    req_with_ae(&h, hdr, NULL);
    gz_ae_req(&ae, &h);
    ck_assert(!gz_ae_takes(&ae, GZ_C_GZIP));
    ck_assert(gz_ae_takes(&ae, GZ_C_IDENTITY));
}
END_TEST

/* ETags of bodies surogat encoded, against the origin's. */
START_TEST(etags_of_made_bodies)
{
    static const struct {
        const char *stored, *origin;
        enum gz_coding c;
        bool derived;
    } d[] = {
        { "W/\"x-br\"", "\"x\"", GZ_C_BR, true },
        { "W/\"x-zstd\"", "\"x\"", GZ_C_ZSTD, true },
        { "W/\"x\"", "\"x\"", GZ_C_GZIP, true },
        { "W/\"x\"", "\"x\"", GZ_C_IDENTITY, true }, /* decoded (do_gunzip) */
        { "W/\"x-br\"", "\"y\"", GZ_C_BR, false },
        { "W/\"x-br\"", "\"x\"", GZ_C_ZSTD, false },
        { "W/\"x\"", "\"x\"", GZ_C_BR, false },
        { "\"x\"", "\"x\"", GZ_C_GZIP, false },
        { "W/\"x-br\"", "W/\"x\"", GZ_C_BR, false }, /* only a strong one is weakened */
        { "W/\"x-br\"", "x", GZ_C_BR, false },
    };
    static const struct {
        const char *in, *out;
        enum gz_coding c;
    } o[] = {
        { "W/\"x-br\"", "W/\"x\"", GZ_C_BR },      { "W/\"x-zstd\"", "W/\"x\"", GZ_C_ZSTD },
        { "W/\"x-br\"", "W/\"x-br\"", GZ_C_ZSTD }, { "W/\"x\"", "W/\"x\"", GZ_C_GZIP },
        { "\"x-br\"", "\"x-br\"", GZ_C_BR }, /* strong: the origin's own */
        { "W/\"-br\"", "W/\"\"", GZ_C_BR },        { "W/\"br\"", "W/\"br\"", GZ_C_BR },
    };
    char mem[512];
    struct ws ws;

    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++) {
        struct txt s = { d[i].stored, strlen(d[i].stored) },
                   g = { d[i].origin, strlen(d[i].origin) };
        ck_assert_msg(gz_etag_derived(&s, &g, d[i].c) == d[i].derived, "derived %zu", i);
    }
    ws_init(&ws, mem, sizeof mem);
    for (size_t i = 0; i < sizeof o / sizeof o[0]; i++) {
        struct txt v = { o[i].in, strlen(o[i].in) };
        ck_assert_int_eq(gz_etag_origin(&v, o[i].c, &ws), 0);
        ck_assert_msg(v.len == strlen(o[i].out) && memcmp(v.b, o[i].out, v.len) == 0,
                      "origin %zu: %.*s", i, (int)v.len, v.b);
    }
}
END_TEST

Suite *
gz_codecs_suite(void)
{
    Suite *s = suite_create("gz_codecs");
    TCase *tc = tcase_create("codecs");
    TCase *tn = tcase_create("negotiate");

    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, round_trips, 0, 2);
    tcase_add_loop_test(tc, corrupt_detected, 0, 2);
    tcase_add_test(tc, zstd_frames_and_window);
    tcase_add_loop_test(tc, bombs, 0, 3);
    tcase_add_test(tc, output_failure);
    suite_add_tcase(s, tc);
    tcase_add_test(tn, negotiate_table);
    tcase_add_test(tn, negotiate_pref_order);
    tcase_add_test(tn, negotiate_held_table);
    tcase_add_test(tn, ae_from_request);
    tcase_add_test(tn, formats_list);
    tcase_add_test(tn, coding_names);
    tcase_add_test(tn, head_per_coding);
    tcase_add_test(tn, ae_norm_and_offer);
    tcase_add_test(tn, takes_and_resp_coding);
    tcase_add_test(tn, etags_of_made_bodies);
    suite_add_tcase(s, tn);
    return s;
}
