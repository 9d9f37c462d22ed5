/*
 * Fuzz the gzip decoder that checks backend bodies before they are stored
 * and gunzips stored ones for clients, and the Accept-Encoding parser.
 *
 * Input: byte 0 seeds the piece sizes; the rest is fed to a decoder in
 * pieces (each from an exact-size heap copy, so ASan sees overreads),
 * then again in one piece.  The input is also an Accept-Encoding value
 * and a Content-Type, and is compressed and decoded back.
 *
 * Invariants: the result does not depend on how the input was cut; a
 * stream the decoder accepts is one zlib's own inflate accepts with the
 * same output (so nothing corrupt passes); output is bounded by zlib's
 * maximum ratio; a failed decoder stays failed; compression round-trips
 * exactly; the Accept-Encoding answer does not depend on bytes past the
 * value and is the same over a copy.  A decoder bounded with gz_limit()
 * (sizes and ratios from the seed) never hands out more than its size
 * bound, and either agrees with the unbounded one or stops with
 * GZ_E_BOMB; a size bound above the whole output changes nothing.
 */
#include <stdbool.h>
#include <string.h>

#include <zlib.h>

#include "surogat/gz.h"
#include "surogat/http.h"

#include "fuzz.h"

struct sink {
    uint64_t len;
    uint64_t hash; /* FNV-1a of the output */
    unsigned char *keep;
    size_t cap;
};

static int
sink_out(void *priv, const char *p, size_t len)
{
    struct sink *s = priv;

    FUZZ_CHECK(len > 0);
    for (size_t i = 0; i < len; i++)
        s->hash = (s->hash ^ (unsigned char)p[i]) * 1099511628211u;
    if (s->keep != NULL && s->len + len <= s->cap)
        memcpy(s->keep + s->len, p, len);
    s->len += len;
    return 0;
}

/* Decode in pieces cut by seed (0: one piece), bounded as gz_limit(max_out, ratio). */
static enum gz_status
decode(const uint8_t *in, size_t len, uint32_t seed, struct sink *s, uint64_t max_out,
       unsigned ratio)
{
    struct gz *z = gz_new(GZ_DECODE, 0);
    enum gz_status st = GZ_OK;
    size_t off = 0;

    gz_limit(z, max_out, ratio);
    s->len = 0;
    s->hash = 14695981039346656037u;
    while (off < len && (st == GZ_OK || st == GZ_END)) {
        size_t n = seed == 0 ? len : 1 + fuzz_rand(&seed) % 64;
        if (n > len - off)
            n = len - off;
        char *copy = malloc(n);
        FUZZ_CHECK(copy != NULL);
        memcpy(copy, in + off, n);
        st = gz_feed(z, copy, n, GZ_FLUSH_NONE, sink_out, s);
        free(copy);
        off += n;
    }
    if (st == GZ_OK || st == GZ_END)
        st = gz_feed(z, NULL, 0, GZ_FLUSH_FINISH, sink_out, s);
    FUZZ_CHECK(st == GZ_END || st == GZ_E_DATA || st == GZ_E_TRUNCATED ||
               (st == GZ_E_BOMB && (max_out > 0 || ratio > 0)));
    if (max_out > 0)
        FUZZ_CHECK(s->len <= max_out);
    if (st != GZ_END) /* a failed decoder stays failed */
        FUZZ_CHECK(gz_feed(z, in, len, GZ_FLUSH_FINISH, sink_out, s) == GZ_E_DATA);
    gz_free(&z);
    return st;
}

/* zlib's own verdict on the first member, for a stream we accepted. */
static void
check_reference(const uint8_t *in, size_t len, const struct sink *ours)
{
    z_stream zs;
    unsigned char buf[4096];
    uint64_t n = 0, h = 14695981039346656037u;
    int rv;

    memset(&zs, 0, sizeof zs);
    FUZZ_CHECK(inflateInit2(&zs, 15 + 16) == Z_OK);
    zs.next_in = (unsigned char *)(uintptr_t)in;
    zs.avail_in = (uInt)len;
    do {
        zs.next_out = buf;
        zs.avail_out = sizeof buf;
        rv = inflate(&zs, Z_NO_FLUSH);
        for (size_t i = 0; i < sizeof buf - zs.avail_out; i++)
            h = (h ^ buf[i]) * 1099511628211u;
        n += sizeof buf - zs.avail_out;
    } while (rv == Z_OK);
    FUZZ_CHECK(rv == Z_STREAM_END);
    /* One member must match exactly; with more, ours decoded a prefix of its output at least. */
    if (zs.avail_in == 0)
        FUZZ_CHECK(n == ours->len && h == ours->hash);
    else
        FUZZ_CHECK(n <= ours->len);
    inflateEnd(&zs);
}

static void
check_ae(const uint8_t *data, size_t size)
{
    char *copy = malloc(size + 8);
    bool a;

    FUZZ_CHECK(copy != NULL);
    memcpy(copy, data, size);
    a = gz_ae_gzip(copy, size);
    memcpy(copy + size, ",gzip;q=1", 8); /* bytes past the value must not count */
    FUZZ_CHECK(gz_ae_gzip(copy, size) == a);
    free(copy);
    copy = malloc(size > 0 ? size : 1);
    FUZZ_CHECK(copy != NULL);
    memcpy(copy, data, size);
    FUZZ_CHECK(gz_ae_gzip(copy, size) == a);
    struct txt ct = { copy, size };
    (void)gz_type_match("text/html text/* application/json", &ct);
    free(copy);
}

static void
check_round_trip(const uint8_t *data, size_t size, uint32_t seed)
{
    struct gz *z = gz_new(GZ_ENCODE, 1 + (int)(seed % 9));
    struct sink enc = { 0, 14695981039346656037u, NULL, 0 }, dec;
    size_t cap = compressBound((uLong)size) + 4096;

    enc.keep = malloc(cap);
    enc.cap = cap;
    FUZZ_CHECK(enc.keep != NULL);
    FUZZ_CHECK(gz_feed(z, data, size / 2, GZ_FLUSH_SYNC, sink_out, &enc) == GZ_OK);
    FUZZ_CHECK(gz_feed(z, data + size / 2, size - size / 2, GZ_FLUSH_FINISH, sink_out, &enc) ==
               GZ_END);
    gz_free(&z);
    FUZZ_CHECK(enc.len <= cap);
    memset(&dec, 0, sizeof dec);
    dec.keep = malloc(size > 0 ? size : 1);
    dec.cap = size;
    FUZZ_CHECK(decode(enc.keep, (size_t)enc.len, seed, &dec, 0, 0) == GZ_END);
    FUZZ_CHECK(dec.len == size && (size == 0 || memcmp(dec.keep, data, size) == 0));
    free(enc.keep);
    free(dec.keep);
}

/* The same input under a bound: the unbounded verdict, or GZ_E_BOMB. */
static void
check_bounded(const uint8_t *in, size_t len, uint32_t seed, enum gz_status whole,
              const struct sink *free_run)
{
    uint64_t max_out = (seed >> 1) % 5 == 0 ? 0 : 1 + (uint64_t)fuzz_rand(&seed) % 70000;
    unsigned ratio = seed % 3 == 0 ? 0 : 1 + fuzz_rand(&seed) % 1200;
    struct sink c;
    enum gz_status st;

    memset(&c, 0, sizeof c);
    st = decode(in, len, seed, &c, max_out, ratio);
    FUZZ_CHECK(st == whole || st == GZ_E_BOMB);
    if (st == GZ_END)
        FUZZ_CHECK(c.len == free_run->len && c.hash == free_run->hash);
    if (st == GZ_E_BOMB)
        FUZZ_CHECK(c.len <= free_run->len || whole != GZ_END);
    /* A size bound alone that the whole output fits in is no bound at all. */
    if (whole == GZ_END && ratio == 0 && max_out >= free_run->len) {
        memset(&c, 0, sizeof c);
        FUZZ_CHECK(decode(in, len, seed, &c, max_out, 0) == GZ_END);
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sink a, b;
    enum gz_status sa, sb;
    uint32_t seed;

    if (size == 0)
        return 0;
    seed = data[0] | 0x100u;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    sa = decode(data + 1, size - 1, seed, &a, 0, 0);
    sb = decode(data + 1, size - 1, 0, &b, 0, 0);
    /* Cut anywhere, the same verdict and the same bytes (up to where it failed). */
    FUZZ_CHECK(sa == sb);
    if (sa == GZ_END) {
        FUZZ_CHECK(a.len == b.len && a.hash == b.hash);
        check_reference(data + 1, size - 1, &a);
        /* deflate cannot expand more than 1032:1 */
        FUZZ_CHECK(a.len <= (uint64_t)(size - 1) * 1032);
    }
    check_bounded(data + 1, size - 1, seed, sa, &a);
    check_ae(data + 1, size - 1);
    check_round_trip(data + 1, size - 1, seed);
    return 0;
}
