/*
 * Helpers shared by the fuzz targets: the checked chunked-decoder driver.
 */
#include <string.h>

#include "fuzz.h"

uint32_t
fuzz_rand(uint32_t *state)
{
    uint32_t x = *state;

    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    *state = x;
    return x;
}

static uint64_t
fnv(uint64_t h, const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

/* The next window end: all of it for seed 0, else 1..64 more bytes. */
static size_t
next_lim(size_t lim, size_t len, uint32_t seed, uint32_t *rng)
{
    size_t step = 1 + fuzz_rand(rng) % 64; /* not inside SRG_MIN: it evaluates twice */

    return seed == 0 || len - lim < step ? len : lim + step;
}

void
fuzz_dechunk(const char *in, size_t len, size_t ext_max, uint32_t seed, struct fuzz_dechunk *out)
{
    struct h1_chunk c;
    uint32_t rng = seed;
    size_t off = 0, lim, spins = 0;

    memset(out, 0, sizeof *out);
    out->hash = 0xcbf29ce484222325ULL;
    h1_chunk_init(&c, ext_max);
    lim = next_lim(0, len, seed, &rng);
    for (;;) {
        size_t avail = lim - off, consumed = (size_t)-1, datalen = (size_t)-1;
        const char *data = NULL;
        char *copy = malloc(avail ? avail : 1);
        enum h1_chunk_status st;

        FUZZ_CHECK(copy != NULL);
        memcpy(copy, in + off, avail);
        st = h1_chunk_decode(&c, copy, avail, &consumed, &data, &datalen);
        if (st == H1_CHUNK_ERROR)
            consumed = 0; /* meaningless after ERROR */
        FUZZ_CHECK(consumed <= avail);
        switch (st) {
        case H1_CHUNK_DATA:
            FUZZ_CHECK(datalen > 0);
            FUZZ_CHECK(data != NULL && data >= copy && data + datalen <= copy + consumed);
            out->hash = fnv(out->hash, data, datalen);
            out->blen += datalen;
            break;
        case H1_CHUNK_MORE:
            FUZZ_CHECK(consumed == avail);
            break;
        case H1_CHUNK_DONE:
        case H1_CHUNK_ERROR:
            break;
        default:
            FUZZ_CHECK(!"unknown h1_chunk_status");
        }
        free(copy);
        off += consumed;
        FUZZ_CHECK(out->blen <= off);
        if (st == H1_CHUNK_DONE || st == H1_CHUNK_ERROR) {
            out->st = st;
            out->used = off;
            return;
        }
        if (st == H1_CHUNK_MORE && lim == len) {
            out->st = st;
            out->used = off;
            return;
        }
        if (off == lim)
            lim = next_lim(lim, len, seed, &rng);
        FUZZ_CHECK(++spins <= 2 * len + 2); /* every call but the last consumes */
    }
}
