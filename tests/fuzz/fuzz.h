/*
 * fuzz -- what every fuzz target includes: the libFuzzer entry point,
 * and FUZZ_CHECK, an invariant check that stays on in every build (the
 * target aborts, so libFuzzer or replay reports the input).
 */
#ifndef SUROGAT_FUZZ_H
#define SUROGAT_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "surogat/h1.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/*
 * fuzz_util.c: run a chunked body through a fresh h1_chunk decoder,
 * checking the decoder's contract on every call.  seed 0 feeds all of
 * `in` at once; otherwise windows of pseudo-random sizes derived from
 * seed, each from an exact-size heap copy.  The body is hashed (FNV-1a)
 * so that two runs can be compared.
 */
struct fuzz_dechunk {
    enum h1_chunk_status st; /* DONE, ERROR, or MORE when the input ran out */
    size_t used;             /* bytes consumed in all */
    size_t blen;             /* body bytes */
    uint64_t hash;           /* of the body bytes */
};
void fuzz_dechunk(const char *in, size_t len, size_t ext_max, uint32_t seed,
                  struct fuzz_dechunk *out);
uint32_t fuzz_rand(uint32_t *state); /* xorshift32; state != 0 */

#define FUZZ_CHECK(e)                                                                 \
    do {                                                                              \
        if (!(e)) {                                                                   \
            fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #e); \
            abort();                                                                  \
        }                                                                             \
    } while (0)

#endif
