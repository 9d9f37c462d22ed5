/*
 * Fuzz the request head parser and request framing.  On H1_DONE the
 * head must point only into the consumed bytes, be well-formed by RFC
 * 9112, frame consistently (no smuggling: TE with CL or in HTTP/1.0 is
 * always refused), and survive serialise + parse unchanged.
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
tchar(unsigned char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c != 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

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

static void
check_head(const struct http *hp, const char *buf, size_t used)
{
    FUZZ_CHECK(hp->proto == 10 || hp->proto == 11);
    FUZZ_CHECK(hp->nhdr <= MAXHDR);
    FUZZ_CHECK(hp->method.len > 0 && hp->url.len > 0);
    inside(&hp->method, buf, used);
    inside(&hp->url, buf, used);
    for (size_t i = 0; i < hp->method.len; i++)
        FUZZ_CHECK(tchar((unsigned char)hp->method.b[i]));
    for (size_t i = 0; i < hp->url.len; i++) {
        unsigned char c = (unsigned char)hp->url.b[i];
        FUZZ_CHECK(c > ' ' && c != 0x7f);
    }
    for (unsigned i = 0; i < hp->nhdr; i++) {
        const struct http_hdr *h = &hp->hdr[i];

        FUZZ_CHECK(h->name.len > 0);
        inside(&h->name, buf, used);
        inside(&h->val, buf, used);
        for (size_t j = 0; j < h->name.len; j++)
            FUZZ_CHECK(tchar((unsigned char)h->name.b[j]));
        for (size_t j = 0; j < h->val.len; j++) {
            unsigned char c = (unsigned char)h->val.b[j];
            FUZZ_CHECK(c == '\t' || (c >= ' ' && c != 0x7f));
        }
        if (h->val.len > 0) {
            char f = h->val.b[0], l = h->val.b[h->val.len - 1];
            FUZZ_CHECK(f != ' ' && f != '\t' && l != ' ' && l != '\t');
        }
    }
}

static void
check_framing(const struct http *hp)
{
    uint64_t clen = 0;
    enum h1_body b = h1_req_body(hp, &clen);
    unsigned ncl = http_count(hp, "content-length"), nte = http_count(hp, "transfer-encoding");

    FUZZ_CHECK(b == H1_BODY_NONE || b == H1_BODY_LENGTH || b == H1_BODY_CHUNKED ||
               b == H1_BODY_E_AMBIGUOUS || b == H1_BODY_E_CODING);
    if (nte > 0) {
        FUZZ_CHECK(b != H1_BODY_NONE && b != H1_BODY_LENGTH);
        if (ncl > 0 || hp->proto == 10)
            FUZZ_CHECK(b == H1_BODY_E_AMBIGUOUS);
    }
    if (b == H1_BODY_CHUNKED)
        FUZZ_CHECK(nte > 0 && ncl == 0 && hp->proto == 11);
    if (b == H1_BODY_LENGTH) {
        const struct http_hdr *h = http_find(hp, "content-length");
        uint64_t v = 0;

        FUZZ_CHECK(h != NULL && nte == 0);
        FUZZ_CHECK(h->val.len > 0);
        for (size_t i = 0; i < h->val.len; i++) {
            FUZZ_CHECK(h->val.b[i] >= '0' && h->val.b[i] <= '9');
            FUZZ_CHECK(v <= (UINT64_MAX - 9) / 10 || i == h->val.len - 1);
            v = v * 10 + (uint64_t)(h->val.b[i] - '0');
        }
        FUZZ_CHECK(v == clen);
    }
    if (b == H1_BODY_NONE)
        FUZZ_CHECK(nte == 0);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *buf = (const char *)data;
    struct http_hdr hdrs[MAXHDR], hdrs2[MAXHDR];
    struct http hp, hp2;
    size_t used = (size_t)-1, used2 = (size_t)-1;
    enum h1_status st;
    static char out[4096];
    struct sb sb;

    http_init(&hp, hdrs, MAXHDR);
    st = h1_parse_request(buf, size, &lim, &hp, &used);
    FUZZ_CHECK(st == H1_DONE || st == H1_MORE || st == H1_E_SYNTAX || st == H1_E_URI_TOO_LONG ||
               st == H1_E_TOO_BIG || st == H1_E_VERSION);
    if (st == H1_MORE)
        FUZZ_CHECK(size <= lim.max_head); /* more than max_head and no end: TOO_BIG */
    if (st != H1_DONE)
        return 0;

    FUZZ_CHECK(used > 0 && used <= size && used <= lim.max_head);
    FUZZ_CHECK(buf[used - 1] == '\n');
    check_head(&hp, buf, used);
    check_framing(&hp);

    /* Stateless: the head alone parses the same, one byte less is MORE. */
    http_init(&hp2, hdrs2, MAXHDR);
    FUZZ_CHECK(h1_parse_request(buf, used, &lim, &hp2, &used2) == H1_DONE);
    FUZZ_CHECK(used2 == used && hp2.nhdr == hp.nhdr);
    http_init(&hp2, hdrs2, MAXHDR);
    FUZZ_CHECK(h1_parse_request(buf, used - 1, &lim, &hp2, &used2) == H1_MORE);

    /* Serialise, parse again: the same head, now with CRLF endings. */
    sb_init(&sb, out, sizeof out);
    h1_write_request(&sb, &hp);
    FUZZ_CHECK(sb_ok(&sb));
    http_init(&hp2, hdrs2, MAXHDR);
    FUZZ_CHECK(h1_parse_request(out, sb.len, &lim_big, &hp2, &used2) == H1_DONE);
    FUZZ_CHECK(used2 == sb.len);
    FUZZ_CHECK(txt_eq(&hp.method, &hp2.method) && txt_eq(&hp.url, &hp2.url));
    FUZZ_CHECK(hp.proto == hp2.proto && hp.nhdr == hp2.nhdr);
    for (unsigned i = 0; i < hp.nhdr; i++) {
        FUZZ_CHECK(txt_eq(&hp.hdr[i].name, &hp2.hdr[i].name));
        FUZZ_CHECK(txt_eq(&hp.hdr[i].val, &hp2.hdr[i].val));
    }
    {
        uint64_t c1 = 0, c2 = 0;
        FUZZ_CHECK(h1_req_body(&hp, &c1) == h1_req_body(&hp2, &c2) && c1 == c2);
    }
    return 0;
}
