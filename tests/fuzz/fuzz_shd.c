/*
 * Fuzz the stored head's encoding (shd.h): the bytes are read back from a
 * persistent store, so the decoder must refuse anything it did not make.
 *
 * Input, both ways: as a head's text, it must encode within shd_bound(),
 * be accepted, and decode to itself byte for byte; as an encoding (each
 * from an exact-size heap copy, so ASan sees any read past it),
 * shd_check() either refuses it or accepts a text that shd_decode()
 * writes in exactly the length it said and that encodes back to an
 * encoding of the same text; every field the iterator gives is part of it;
 * the fields of one that splits at its status line decode, in exactly the
 * room it says, to the text after that line.
 */
#include <stdbool.h>
#include <string.h>

#include "surogat/shd.h"

#include "fuzz.h"

/*
 * When enc (text's encoding, tlen bytes of text) splits, its fields
 * decode into a heap buffer of exactly the room it says, as the text
 * after the status line, less at most the empty line's two bytes.
 */
static void
split(const unsigned char *enc, size_t n, const char *text, size_t tlen)
{
    struct shd_head h;
    size_t sl, got;
    char *out;

    if (!shd_split(enc, n, &h))
        return;
    sl = 15 + h.reason.len;
    FUZZ_CHECK(tlen >= sl && h.room == tlen - sl && memcmp(text, "HTTP/1.", 7) == 0);
    FUZZ_CHECK(memcmp(text + sl - 2, "\r\n", 2) == 0);
    out = malloc(h.room > 0 ? h.room : 1);
    FUZZ_CHECK(out != NULL);
    got = shd_decode_fields(&h, out);
    FUZZ_CHECK((got == h.room || got + 2 == h.room) && memcmp(out, text + sl, got) == 0);
    free(out);
}

static void
as_text(const uint8_t *data, size_t size)
{
    unsigned char *enc = malloc(shd_bound(size));
    char *back = malloc(size + 1);
    size_t n, tlen;

    FUZZ_CHECK(enc != NULL && back != NULL);
    n = shd_encode((const char *)data, size, enc);
    FUZZ_CHECK(n <= shd_bound(size));
    FUZZ_CHECK(shd_check(enc, n, &tlen) && tlen == size);
    FUZZ_CHECK(shd_text_len(enc, n) == size);
    FUZZ_CHECK(shd_decode(enc, n, back) == size && memcmp(back, data, size) == 0);
    split(enc, n, (const char *)data, size);
    free(back);
    free(enc);
}

static void
as_encoding(const uint8_t *data, size_t size)
{
    unsigned char *enc = malloc(size > 0 ? size : 1), *again;
    struct shd_iter it;
    struct txt name, val;
    size_t tlen, n, tlen2;
    char *text, *text2;

    FUZZ_CHECK(enc != NULL);
    memcpy(enc, data, size);
    if (!shd_check(enc, size, &tlen)) {
        free(enc);
        return;
    }
    FUZZ_CHECK(shd_text_len(enc, size) == tlen);
    text = malloc(tlen + 1);
    FUZZ_CHECK(text != NULL);
    FUZZ_CHECK(shd_decode(enc, size, text) == tlen);
    split(enc, size, text, tlen);
    shd_iter_init(&it, enc, size);
    while (shd_next(&it, &name, &val))
        FUZZ_CHECK(name.len > 0 && name.len + val.len <= tlen); /* a field is part of the text */
    again = malloc(shd_bound(tlen));
    FUZZ_CHECK(again != NULL);
    n = shd_encode(text, tlen, again);
    FUZZ_CHECK(shd_check(again, n, &tlen2) && tlen2 == tlen);
    text2 = malloc(tlen + 1);
    FUZZ_CHECK(text2 != NULL);
    FUZZ_CHECK(shd_decode(again, n, text2) == tlen && memcmp(text, text2, tlen) == 0);
    free(text2);
    free(again);
    free(text);
    free(enc);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 65536)
        return (0);
    as_text(data, size);
    as_encoding(data, size);
    return (0);
}
