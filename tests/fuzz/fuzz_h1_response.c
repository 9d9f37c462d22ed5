/*
 * Fuzz a backend response: the status-line and header parser, response
 * framing (with the transfer codings left under it, and whether a
 * bodiless answer announced a body), serialise + parse, and for chunked bodies the decoder on the
 * rest of the input, once in one piece and once in pseudo-random pieces:
 * both must give the same body and end at the same byte.
 */
#include <stdbool.h>
#include <string.h>

#include "surogat/sb.h"
#include "surogat/http.h"
#include "surogat/h1.h"

#include "fuzz.h"

#define MAXHDR 16
static const struct h1_limits lim = { 1024, 256, MAXHDR };
static const struct h1_limits lim_big = { 8192, 4096, MAXHDR };

static bool
txt_eq(const struct txt *a, const struct txt *b)
{
    return a->len == b->len && (a->len == 0 || memcmp(a->b, b->b, a->len) == 0);
}

static void
inside(const struct txt *t, const char *b, size_t used)
{
    if (t->len > 0)
        FUZZ_CHECK(t->b >= b && t->b + t->len <= b + used);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    struct http_hdr hdrs[MAXHDR], hdrs2[MAXHDR];
    struct http hp, hp2;
    size_t used = (size_t)-1, used2 = (size_t)-1;
    static char out[4096];
    struct sb sb;
    struct h1_framing fr;
    uint64_t clen = 0;
    enum h1_status st;
    enum h1_body b, bh;

    http_init(&hp, hdrs, MAXHDR);
    st = h1_parse_response(buf, size, &lim, &hp, &used);
    if (st == H1_MORE)
        FUZZ_CHECK(size <= lim.max_head);
    if (st != H1_DONE)
        return 0;

    FUZZ_CHECK(used > 0 && used <= size && used <= lim.max_head);
    FUZZ_CHECK(hp.proto == 10 || hp.proto == 11);
    FUZZ_CHECK(hp.status >= 100 && hp.status <= 999);
    FUZZ_CHECK(hp.nhdr <= MAXHDR);
    inside(&hp.reason, buf, used);
    for (size_t i = 0; i < hp.reason.len; i++) {
        unsigned char c = (unsigned char)hp.reason.b[i];
        FUZZ_CHECK(c == '\t' || (c >= ' ' && c != 0x7f));
    }
    for (unsigned i = 0; i < hp.nhdr; i++) {
        FUZZ_CHECK(hp.hdr[i].name.len > 0);
        inside(&hp.hdr[i].name, buf, used);
        inside(&hp.hdr[i].val, buf, used);
    }
    http_init(&hp2, hdrs2, MAXHDR);
    FUZZ_CHECK(h1_parse_response(buf, used - 1, &lim, &hp2, &used2) == H1_MORE);

    /* Framing */
    b = h1_resp_body(&hp, false, &fr);
    FUZZ_CHECK(b == H1_BODY_NONE || b == H1_BODY_LENGTH || b == H1_BODY_CHUNKED ||
               b == H1_BODY_EOF || b == H1_BODY_E_AMBIGUOUS || b == H1_BODY_E_CODING);
    FUZZ_CHECK((fr.err != H1_FE_NONE) == (b == H1_BODY_E_AMBIGUOUS || b == H1_BODY_E_CODING));
    FUZZ_CHECK((fr.clen > 0) == (b == H1_BODY_LENGTH));
    FUZZ_CHECK(fr.ncoding <= H1_CODINGS_MAX);
    /* Codings only on a body read by its chunks or until close; never with a length. */
    if (fr.ncoding > 0)
        FUZZ_CHECK(b == H1_BODY_CHUNKED || b == H1_BODY_EOF);
    if (fr.unread)
        FUZZ_CHECK(b == H1_BODY_NONE);
    clen = fr.clen;
    bh = h1_resp_body(&hp, true, &fr);
    FUZZ_CHECK(bh == H1_BODY_NONE && fr.ncoding == 0 && fr.clen == 0);
    /* A HEAD answer that announces a body may be followed by one: the connection is not reused. */
    if (http_count(&hp, "transfer-encoding") > 0 || (b == H1_BODY_LENGTH && clen > 0))
        FUZZ_CHECK(fr.unread);
    if (hp.status < 200 || hp.status == 204 || hp.status == 304)
        FUZZ_CHECK(b == H1_BODY_NONE);
    if (http_count(&hp, "transfer-encoding") > 0 && http_count(&hp, "content-length") > 0)
        FUZZ_CHECK(b == H1_BODY_E_AMBIGUOUS || b == H1_BODY_NONE);

    /* Serialise, parse again: the same head. */
    sb_init(&sb, out, sizeof out);
    h1_write_response(&sb, &hp);
    FUZZ_CHECK(sb_ok(&sb));
    http_init(&hp2, hdrs2, MAXHDR);
    FUZZ_CHECK(h1_parse_response(out, sb.len, &lim_big, &hp2, &used2) == H1_DONE);
    FUZZ_CHECK(used2 == sb.len);
    FUZZ_CHECK(hp.proto == hp2.proto && hp.status == hp2.status && hp.nhdr == hp2.nhdr);
    FUZZ_CHECK(txt_eq(&hp.reason, &hp2.reason));
    for (unsigned i = 0; i < hp.nhdr; i++) {
        FUZZ_CHECK(txt_eq(&hp.hdr[i].name, &hp2.hdr[i].name));
        FUZZ_CHECK(txt_eq(&hp.hdr[i].val, &hp2.hdr[i].val));
    }

    if (b == H1_BODY_CHUNKED) {
        struct fuzz_dechunk one, split;
        uint32_t seed = 0x9e3779b9u ^ (uint32_t)size;

        for (size_t i = 0; i < used; i++)
            seed = seed * 31 + (unsigned char)buf[i];
        if (seed == 0)
            seed = 1;
        fuzz_dechunk(buf + used, size - used, 64, 0, &one);
        fuzz_dechunk(buf + used, size - used, 64, seed, &split);
        FUZZ_CHECK(one.st == split.st);
        if (one.st != H1_CHUNK_ERROR) {
            FUZZ_CHECK(one.used == split.used);
            FUZZ_CHECK(one.blen == split.blen && one.hash == split.hash);
        }
        if (one.st == H1_CHUNK_MORE)
            FUZZ_CHECK(one.used == size - used);
    }
    return 0;
}
