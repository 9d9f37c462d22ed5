/*
 * Fuzz http_range() and http_not_modified(): a request with the input's
 * lines as Range, If-Range and conditional fields, against a body length
 * and validators taken from the first bytes.
 *
 * Invariants: the result is a declared value; a satisfiable range lies in
 * the body (first <= last < len) and never wraps; an unsatisfiable one is
 * only reported for a well-formed bytes= range; the answer is
 * deterministic.
 */
#include <stdbool.h>
#include <string.h>

#include "surogat/http.h"

#include "fuzz.h"

static const char *const names[] = { "Range", "If-Range", "If-None-Match", "If-Modified-Since",
                                     "range" };

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct http_hdr hdrs[8];
    struct http req;
    char *copy[8] = { 0 };
    uint64_t len = 0, first, last, f2, l2;
    struct txt etag = TXT_LIT("\"v1\""), lm = TXT_LIT("Sun, 06 Nov 1994 08:49:37 GMT");
    enum http_range r;
    size_t n = 0;

    if (size < 8)
        return (0);
    for (int i = 0; i < 8; i++)
        len = len << 8 | data[i];
    len >>= (data[0] & 0x3f); /* lengths of every magnitude, 0 included */
    data += 8;
    size -= 8;
    http_init(&req, hdrs, 8);
    req.method = TXT_LIT("GET");
    while (size > 0 && n < 8) {
        const uint8_t *e = memchr(data, '\n', size);
        size_t l = e != NULL ? (size_t)(e - data) : size;
        if (l > 0) {
            const char *name = names[data[0] % (sizeof names / sizeof names[0])];
            copy[n] = malloc(l - 1 + 1); /* exact size: ASan sees any read past it */
            FUZZ_CHECK(copy[n] != NULL);
            memcpy(copy[n], data + 1, l - 1);
            (void)http_add(&req, (struct txt){ name, strlen(name) },
                           (struct txt){ copy[n], l - 1 });
            n++;
        }
        data += l + (e != NULL);
        size -= l + (e != NULL);
    }
    r = http_range(&req, &etag, &lm, len, &first, &last);
    FUZZ_CHECK(r == HTTP_RANGE_NONE || r == HTTP_RANGE_OK || r == HTTP_RANGE_UNSATISFIABLE);
    if (r == HTTP_RANGE_OK) {
        FUZZ_CHECK(first <= last);
        FUZZ_CHECK(last < len);
    }
    FUZZ_CHECK(http_range(&req, &etag, &lm, len, &f2, &l2) == r);
    if (r == HTTP_RANGE_OK)
        FUZZ_CHECK(f2 == first && l2 == last);
    (void)http_not_modified(&req, &etag, &lm);
    (void)http_not_modified(&req, NULL, NULL);
    for (size_t i = 0; i < n; i++)
        free(copy[i]);
    return (0);
}
