/*
 * Fuzz the chunked decoder.  Byte 0 picks ext_max and the mode, bytes
 * 1-4 seed the split sizes, the rest is the input.
 *   decode: the input as a chunked body, one-shot and split; both runs
 *           must agree on the outcome, the body and where it ended.
 *   encode: the input as a body, framed with h1_chunk_header in chunks
 *           of pseudo-random sizes; decoding must give it back exactly.
 */
#include <string.h>

#include "surogat/defs.h"

#include "fuzz.h"

static void
decode(const char *in, size_t len, size_t ext_max, uint32_t seed)
{
    struct fuzz_dechunk one, split;

    fuzz_dechunk(in, len, ext_max, 0, &one);
    fuzz_dechunk(in, len, ext_max, seed, &split);
    FUZZ_CHECK(one.st == split.st);
    if (one.st != H1_CHUNK_ERROR) {
        FUZZ_CHECK(one.used == split.used);
        FUZZ_CHECK(one.blen == split.blen && one.hash == split.hash);
    }
    if (one.st == H1_CHUNK_MORE)
        FUZZ_CHECK(one.used == len);
    if (one.st == H1_CHUNK_DONE)
        FUZZ_CHECK(one.used >= 5); /* "0\r\n\r\n" at least */
}

static void
encode(const char *in, size_t len, uint32_t seed)
{
    char *wire = malloc(len * (H1_CHUNK_HDR_MAX + 3) + 64);
    struct fuzz_dechunk d;
    size_t n = 0, off = 0;

    FUZZ_CHECK(wire != NULL);
    while (off < len) {
        size_t sz = 1 + fuzz_rand(&seed) % 300; /* outside SRG_MIN: it evaluates twice */

        sz = SRG_MIN(len - off, sz);
        size_t hl = h1_chunk_header(wire + n, sz);

        FUZZ_CHECK(hl >= 3 && hl <= H1_CHUNK_HDR_MAX);
        FUZZ_CHECK(wire[n + hl - 2] == '\r' && wire[n + hl - 1] == '\n');
        n += hl;
        memcpy(wire + n, in + off, sz);
        n += sz;
        memcpy(wire + n, "\r\n", 2);
        n += 2;
        off += sz;
    }
    n += h1_chunk_header(wire + n, 0);
    memcpy(wire + n, "\r\n", 2);
    n += 2;

    fuzz_dechunk(wire, n, 0, seed, &d);
    FUZZ_CHECK(d.st == H1_CHUNK_DONE && d.used == n && d.blen == len);
    /* The same FNV-1a as fuzz_dechunk, over the body directly. */
    {
        uint64_t h = 0xcbf29ce484222325ULL;
        for (size_t i = 0; i < len; i++) {
            h ^= (unsigned char)in[i];
            h *= 0x100000001b3ULL;
        }
        FUZZ_CHECK(d.hash == h);
    }
    free(wire);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint32_t seed;
    size_t ext_max;

    if (size < 5)
        return 0;
    ext_max = (size_t)(data[0] >> 1) * 4; /* 0 .. 508 */
    seed = (uint32_t)data[1] | (uint32_t)data[2] << 8 | (uint32_t)data[3] << 16 |
           (uint32_t)data[4] << 24;
    if (seed == 0)
        seed = 1;
    if (data[0] & 1)
        encode((const char *)data + 5, size - 5, seed);
    else
        decode((const char *)data + 5, size - 5, ext_max, seed);
    return 0;
}
