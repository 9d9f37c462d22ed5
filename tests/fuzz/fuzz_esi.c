/*
 * Fuzz the ESI parser, which reads every page a policy marks for ESI --
 * backend bytes -- and the gzip store beside it.
 *
 * Input: byte 0 sets options (bit 0 no_xml_check, bit 1 remove_bom, bit 2
 * https_as_http, bits 3-4 a small max_tag or max_items) and seeds the
 * piece sizes; the rest is the page.
 *
 * Invariants: the page fed whole, a byte at a time and in seeded random
 * pieces (each an exact-size heap copy, so ASan sees overreads) gives the
 * same program byte for byte; the program passes its own checks; its
 * literals are in order, inside the page, apart, never empty, and every
 * gap between them starts with ESI markup ("<esi:", "</esi:", "<!--esi",
 * "-->" or a removed BOM); includes name an absolute path; no more than
 * one tag is ever held undecided.  Stored gzip, the whole stream gunzips
 * to the page, its program has the same literals, and those literals
 * stitched into one stream gunzip (zlib checking CRC and length) to
 * exactly the literal bytes; and the whole stream, spliced into another
 * by its gz_bits, gunzips to the page.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "surogat/esi.h"
#include "surogat/gz.h"

#include "fuzz.h"

struct buf {
    unsigned char *p;
    size_t len, cap;
};

static int
collect(void *priv, const char *p, size_t len)
{
    struct buf *b = priv;

    if (b->len + len > b->cap) {
        b->cap = (b->len + len) * 2 + 64;
        b->p = realloc(b->p, b->cap);
        FUZZ_CHECK(b->p != NULL);
    }
    memcpy(b->p + b->len, p, len);
    b->len += len;
    return 0;
}

static size_t
piece(uint32_t *seed, int mode, size_t left)
{
    size_t n = mode == 0 ? left : mode == 1 ? 1 : 1 + fuzz_rand(seed) % 40;

    return n < left ? n : left;
}

static void
parse(const struct esi_conf *c, const uint8_t *page, size_t len, int mode, uint32_t seed,
      unsigned char **prog, size_t *plen)
{
    struct esi_parser *p = esi_parser_new(c, NULL, NULL);
    size_t off = 0;

    while (off < len) {
        size_t n = piece(&seed, mode, len - off);
        char *copy = malloc(n);

        FUZZ_CHECK(copy != NULL);
        memcpy(copy, page + off, n);
        FUZZ_CHECK(esi_parse(p, copy, n) == 0);
        free(copy);
        off += n;
        FUZZ_CHECK(off - esi_decided(p) <= c->max_tag + 8);
    }
    FUZZ_CHECK(esi_finish(p, prog, plen) == 0);
    esi_parser_free(&p);
}

static bool
gap_ok(const uint8_t *page, size_t len, uint64_t at, bool bom)
{
    static const char *const starts[] = { "<esi:", "</esi:", "<!--esi", "-->" };

    if (bom && at == 0)
        return true;
    for (size_t k = 0; k < sizeof starts / sizeof starts[0]; k++)
        if (len - at >= strlen(starts[k]) && memcmp(page + at, starts[k], strlen(starts[k])) == 0)
            return true;
    return false;
}

static void
check_prog(const uint8_t *page, size_t len, const unsigned char *prog, size_t plen, bool bom)
{
    struct esi_iter it;
    struct esi_item item;
    struct esi_info info;
    enum esi_next n;
    uint64_t end = 0;

    FUZZ_CHECK(esi_prog_info(prog, plen, &info) == 0);
    FUZZ_CHECK(info.len == len);
    FUZZ_CHECK(esi_iter_init(&it, prog, plen) == 0);
    for (;;) {
        uint64_t gap_end;

        n = esi_iter_next(&it, &item);
        FUZZ_CHECK(n != ESI_E_CORRUPT);
        if (n == ESI_ITEM && item.kind == ESI_INCLUDE) {
            FUZZ_CHECK(item.src.len > 0 && item.src.b[0] == '/');
            continue;
        }
        gap_end = n == ESI_DONE ? len : item.off;
        FUZZ_CHECK(gap_end >= end);
        if (gap_end > end)
            FUZZ_CHECK(gap_ok(page, len, end, bom));
        if (n == ESI_DONE)
            break;
        FUZZ_CHECK(item.len > 0 && item.off + item.len <= len);
        end = item.off + item.len;
    }
}

static void
gunzip(const struct buf *gz, struct buf *out)
{
    z_stream zs;
    unsigned char tmp[4096];
    int rv;

    memset(&zs, 0, sizeof zs);
    FUZZ_CHECK(inflateInit2(&zs, 15 + 16) == Z_OK);
    zs.next_in = gz->p;
    zs.avail_in = (uInt)gz->len;
    do {
        zs.next_out = tmp;
        zs.avail_out = sizeof tmp;
        rv = inflate(&zs, Z_NO_FLUSH);
        FUZZ_CHECK(rv == Z_OK || rv == Z_STREAM_END);
        collect(out, (const char *)tmp, sizeof tmp - zs.avail_out);
    } while (rv != Z_STREAM_END);
    FUZZ_CHECK(zs.avail_in == 0);
    inflateEnd(&zs);
}

static void
check_gzip(const struct esi_conf *c, const uint8_t *page, size_t len, uint32_t seed,
           const unsigned char *iprog, size_t iplen)
{
    struct esi_gz *g = esi_gz_new(c, 1 + seed % 9);
    struct buf gz = { 0 }, whole = { 0 }, st = { 0 }, back = { 0 }, lits = { 0 };
    struct esi_iter it, iit;
    struct esi_item item, iitem;
    struct gz_stitch sti;
    struct gz_bits bits;
    unsigned char *prog;
    size_t plen, off = 0;

    while (off < len) {
        size_t n = piece(&seed, 2, len - off);
        FUZZ_CHECK(esi_gz_feed(g, page + off, n, collect, &gz) == GZ_OK);
        FUZZ_CHECK(esi_gz_held(g) <= c->max_tag + 8);
        off += n;
    }
    FUZZ_CHECK(esi_gz_finish(g, collect, &gz, &prog, &plen) == GZ_OK);
    FUZZ_CHECK(esi_gz_bits(g, &bits));
    esi_gz_free(&g);
    gunzip(&gz, &whole);
    FUZZ_CHECK(whole.len == len && (len == 0 || memcmp(whole.p, page, len) == 0));
    /* The whole stream, spliced by its bits between two literals, decodes to the page. */
    FUZZ_CHECK(bits.crc == (uint32_t)crc32(0, page, (uInt)len) && bits.len == len);
    FUZZ_CHECK(gz_stitch_begin(&sti, collect, &st) == 0);
    FUZZ_CHECK(gz_stitch_identity(&sti, "<", 1) == 0);
    FUZZ_CHECK(gz_stitch_member_begin(&sti, &bits) == 0);
    FUZZ_CHECK(gz_stitch_member(&sti, gz.p, gz.len) == 0);
    FUZZ_CHECK(gz_stitch_member_end(&sti) == 0);
    FUZZ_CHECK(gz_stitch_identity(&sti, ">", 1) == 0);
    FUZZ_CHECK(gz_stitch_end(&sti) == 0);
    gunzip(&st, &back);
    FUZZ_CHECK(back.len == len + 2 && back.p[0] == '<' && back.p[len + 1] == '>' &&
               (len == 0 || memcmp(back.p + 1, page, len) == 0));
    st.len = back.len = 0;
    FUZZ_CHECK(esi_iter_init(&it, prog, plen) == 0);
    FUZZ_CHECK(esi_iter_init(&iit, iprog, iplen) == 0);
    FUZZ_CHECK(gz_stitch_begin(&sti, collect, &st) == 0);
    while (esi_iter_next(&it, &item) == ESI_ITEM) {
        FUZZ_CHECK(esi_iter_next(&iit, &iitem) == ESI_ITEM && item.kind == iitem.kind);
        if (item.kind == ESI_INCLUDE)
            continue;
        FUZZ_CHECK(item.off == iitem.off && item.len == iitem.len);
        FUZZ_CHECK(item.zoff + item.zlen <= gz.len);
        FUZZ_CHECK(gz_stitch_deflate(&sti, gz.p + item.zoff, (size_t)item.zlen) == 0);
        gz_stitch_account(&sti, item.crc, item.len);
        collect(&lits, (const char *)page + item.off, (size_t)item.len);
    }
    FUZZ_CHECK(esi_iter_next(&iit, &iitem) == ESI_DONE);
    FUZZ_CHECK(gz_stitch_end(&sti) == 0);
    gunzip(&st, &back);
    FUZZ_CHECK(back.len == lits.len && (lits.len == 0 || memcmp(back.p, lits.p, lits.len) == 0));
    free(prog);
    free(gz.p);
    free(whole.p);
    free(st.p);
    free(back.p);
    free(lits.p);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct esi_conf c = { .url = "/a/b.html?c=/d" };
    unsigned char *prog[3];
    size_t plen[3];
    uint32_t seed;

    if (size == 0)
        return 0;
    c.no_xml_check = data[0] & 1;
    c.remove_bom = data[0] & 2;
    c.https_as_http = data[0] & 4;
    c.max_tag = data[0] & 8 ? 24 : ESI_MAX_TAG;
    c.max_items = data[0] & 16 ? 3 : 0;
    seed = data[0] | 0x100u;
    data++;
    size--;
    for (int mode = 0; mode < 3; mode++)
        parse(&c, data, size, mode, seed, &prog[mode], &plen[mode]);
    for (int mode = 1; mode < 3; mode++)
        FUZZ_CHECK(plen[mode] == plen[0] && memcmp(prog[mode], prog[0], plen[0]) == 0);
    check_prog(data, size, prog[0], plen[0], c.remove_bom);
    check_gzip(&c, data, size, seed, prog[0], plen[0]);
    for (int mode = 0; mode < 3; mode++)
        free(prog[mode]);
    return 0;
}
