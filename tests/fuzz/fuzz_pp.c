/*
 * Fuzz the PROXY protocol header parser (pp_parse()), on an exact-size
 * heap copy so that any read past the input is caught.
 *
 * Invariants: on PP_DONE the header is 15..107 bytes (v1) or 16..
 * PP_V2_MAX (v2), every TLV value lies inside it, a client address is
 * AF_INET or AF_INET6 unless the header is LOCAL, parsing exactly the
 * header gives the same answer, every strict prefix of it is PP_MORE (a
 * header split over packets is never refused), and writing the
 * addresses back with pp_build() parses to the same addresses.  PP_MORE
 * never comes back for an input the parser could already refuse at
 * PP_V1_MAX or PP_V2_MAX bytes.
 */
#include <stdbool.h>
#include <string.h>

#include "surogat/pp.h"

#include "fuzz.h"

static void
inside(const struct pp_bytes *v, const uint8_t *b, size_t used)
{
    if (v->len > 0)
        FUZZ_CHECK(v->b >= b && v->b + v->len <= b + used);
}

static void
round_trip(const struct pp_hdr *h)
{
    struct sockaddr_storage s, d;
    uint8_t out[PP_BUILD_MAX];
    struct pp_hdr h2;
    size_t n, used;

    memset(&s, 0, sizeof s);
    memset(&d, 0, sizeof d);
    if (h->family == AF_INET) {
        struct sockaddr_in *s4 = (struct sockaddr_in *)&s, *d4 = (struct sockaddr_in *)&d;
        s4->sin_family = d4->sin_family = AF_INET;
        s4->sin_addr = h->src.in4;
        d4->sin_addr = h->dst.in4;
        s4->sin_port = htons(h->src_port);
        d4->sin_port = htons(h->dst_port);
    } else {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&s, *d6 = (struct sockaddr_in6 *)&d;
        s6->sin6_family = d6->sin6_family = AF_INET6;
        s6->sin6_addr = h->src.in6;
        d6->sin6_addr = h->dst.in6;
        s6->sin6_port = htons(h->src_port);
        d6->sin6_port = htons(h->dst_port);
    }
    for (unsigned v = 1; v <= 2; v++) {
        n = pp_build(v, (struct sockaddr *)&s, (struct sockaddr *)&d, out);
        FUZZ_CHECK(n <= PP_BUILD_MAX);
        FUZZ_CHECK(pp_parse(out, n, &h2, &used) == PP_DONE && used == n);
        FUZZ_CHECK(!h2.local && h2.family == h->family);
        FUZZ_CHECK(memcmp(&h2.src, &h->src, sizeof h->src) == 0 || h->family == AF_INET);
        FUZZ_CHECK(h2.src_port == h->src_port && h2.dst_port == h->dst_port);
        if (h->family == AF_INET)
            FUZZ_CHECK(h2.src.in4.s_addr == h->src.in4.s_addr &&
                       h2.dst.in4.s_addr == h->dst.in4.s_addr);
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size > 0 ? size : 1);
    struct pp_hdr h, h2;
    enum pp_status st;
    size_t used = 0, used2 = 0;

    FUZZ_CHECK(buf != NULL);
    memcpy(buf, data, size);
    st = pp_parse(buf, size, &h, &used);
    if (st == PP_MORE)
        FUZZ_CHECK(size < PP_V2_MAX);
    if (st == PP_DONE) {
        FUZZ_CHECK(used <= size);
        FUZZ_CHECK(h.version == 1 || h.version == 2);
        if (h.version == 1)
            FUZZ_CHECK(used >= 15 && used <= PP_V1_MAX);
        else
            FUZZ_CHECK(used >= PP_V2_HEAD && used <= PP_V2_MAX);
        inside(&h.ssl_version, buf, used);
        inside(&h.ssl_cipher, buf, used);
        inside(&h.ssl_cn, buf, used);
        inside(&h.ssl_sig_alg, buf, used);
        inside(&h.ssl_key_alg, buf, used);
        inside(&h.authority, buf, used);
        inside(&h.alpn, buf, used);
        inside(&h.unique_id, buf, used);
        if (!h.local)
            FUZZ_CHECK(h.family == AF_INET || h.family == AF_INET6);
        /* The header alone says the same; what followed it changed nothing. */
        FUZZ_CHECK(pp_parse(buf, used, &h2, &used2) == PP_DONE && used2 == used);
        FUZZ_CHECK(h2.local == h.local && h2.family == h.family && h2.ssl == h.ssl);
        FUZZ_CHECK(h2.src_port == h.src_port && h2.dst_port == h.dst_port);
        for (size_t i = 0; i < used; i++)
            FUZZ_CHECK(pp_parse(buf, i, &h2, &used2) == PP_MORE);
        if (!h.local)
            round_trip(&h);
    }
    free(buf);
    return (0);
}
