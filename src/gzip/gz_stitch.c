/*
 * Stitching a gzip stream from compressed pieces, for ESI pages stored
 * gzip: each delivery to a client that takes gzip assembles the page
 * from the stored segments and the included fragments without decoding
 * or compressing anything, as Varnish does.
 *
 * A deflate stream is a sequence of blocks, each with a BFINAL bit; a
 * gzip member wraps one stream in a 10-byte header and a trailer of
 * CRC-32 and length.  Pieces can be concatenated when each ends on a byte
 * boundary and none has BFINAL set:
 *
 *   cut segments (gz_cut)  end with a full flush: byte-aligned, no
 *                          BFINAL, no reference to earlier bytes -- sent
 *                          as they are;
 *   whole members          have a final block ending anywhere: its BFINAL
 *                          bit is cleared (where gz_bits says) and the
 *                          bits after it padded with an empty stored
 *                          block, so the next piece starts on a byte;
 *   identity bytes         go into stored blocks of up to 65535 bytes.
 *
 * The stitcher writes its own header, an empty final block and a trailer
 * whose CRC is crc32_combine() of the pieces' and whose length is their
 * sum.  A struct gz_stitch belongs to one delivery; no lock.
 */
#include "config.h"

#include <string.h>

#include <zlib.h>

#include "surogat/defs.h"
#include "surogat/gz.h"

/* A member header: magic, CM deflate, no flags, no mtime, XFL 0, OS unix (RFC 1952 2.3). */
static const unsigned char member_head[10] = { 0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3 };
/* A final fixed-Huffman block holding only its end code: BFINAL 1, BTYPE 01, 7 zero bits. */
static const unsigned char gz_last_block[2] = { 0x03, 0x00 };
/* An empty stored block's LEN and NLEN, after its header bits and padding. */
static const unsigned char gz_stored_empty[4] = { 0x00, 0x00, 0xff, 0xff };
/* The most a stored block holds (RFC 1951 3.2.4: LEN is 16 bits). */
#define GZ_STORED_MAX 65535

static int
emit(struct gz_stitch *s, const void *p, size_t n)
{
    if (s->failed)
        return (-1);
    if (n == 0)
        return (0);
    if (s->out(s->priv, p, n) != 0) {
        s->failed = true;
        return (-1);
    }
    s->zout += n;
    return (0);
}

int
gz_stitch_begin(struct gz_stitch *s, gz_out_f *out, void *priv)
{
    AN(s);
    AN(out);
    memset(s, 0, sizeof *s);
    s->magic = GZ_STITCH_MAGIC;
    s->out = out;
    s->priv = priv;
    s->crc = (uint32_t)crc32(0, NULL, 0);
    return (emit(s, member_head, sizeof member_head));
}

int
gz_stitch_deflate(struct gz_stitch *s, const void *p, size_t n)
{
    OBJ_CHECK(s, GZ_STITCH_MAGIC);
    SRG_ASSERT(!s->in_member);
    return (emit(s, p, n));
}

void
gz_stitch_account(struct gz_stitch *s, uint32_t crc, uint64_t len)
{
    OBJ_CHECK(s, GZ_STITCH_MAGIC);
    /* crc32_combine() takes the second piece's length as z_off64_t. */
    s->crc = (uint32_t)crc32_combine64(s->crc, crc, (z_off64_t)len);
    s->len += len;
}

int
gz_stitch_identity(struct gz_stitch *s, const void *p, size_t n)
{
    const unsigned char *b = p;

    OBJ_CHECK(s, GZ_STITCH_MAGIC);
    SRG_ASSERT(!s->in_member);
    while (n > 0) {
        size_t k = SRG_MIN(n, (size_t)GZ_STORED_MAX);
        /* BFINAL 0, BTYPE 00, then padding to the byte: all zero; LEN, NLEN little-endian. */
        unsigned char h[5] = { 0, (unsigned char)(k & 0xff), (unsigned char)(k >> 8),
                               (unsigned char)(~k & 0xff), (unsigned char)((~k >> 8) & 0xff) };

        if (emit(s, h, sizeof h) != 0 || emit(s, b, k) != 0)
            return (-1);
        gz_stitch_account(s, (uint32_t)crc32(0, b, (uInt)k), k);
        b += k;
        n -= k;
    }
    return (0);
}

int
gz_stitch_member_begin(struct gz_stitch *s, const struct gz_bits *b)
{
    OBJ_CHECK(s, GZ_STITCH_MAGIC);
    SRG_ASSERT(!s->in_member);
    AN(b);
    /* Bits from our own records, but a store can rot: refuse what cannot be a member. */
    if (b->start < 80 || b->start % 8 != 0 || b->last < b->start || b->stop <= b->last + 2) {
        s->failed = true;
        return (-1);
    }
    s->mb = *b;
    s->moff = 0;
    s->in_member = true;
    return (s->failed ? -1 : 0);
}

/*
 * The member's last deflate byte, as it must go out: bits from stop on
 * zeroed -- there the empty stored block's header (BFINAL 0, BTYPE 00)
 * and its padding begin.
 */
static unsigned char
last_byte(const struct gz_stitch *s, unsigned char c)
{
    unsigned used = (unsigned)(s->mb.stop % 8);

    return (used == 0 ? c : (unsigned char)(c & ((1u << used) - 1)));
}

int
gz_stitch_member(struct gz_stitch *s, const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t first = s->mb.start / 8, end = (s->mb.stop + 7) / 8; /* deflate bytes [first, end) */
    uint64_t fin = s->mb.last / 8;

    OBJ_CHECK(s, GZ_STITCH_MAGIC);
    SRG_ASSERT(s->in_member);
    while (n > 0 && !s->failed) {
        uint64_t o = s->moff;
        size_t k;

        if (o < first) {
            k = (size_t)SRG_MIN((uint64_t)n, first - o); /* the header */
        } else if (o >= end) {
            k = n; /* the trailer: the stitcher writes its own */
        } else if (o == fin || o == end - 1) {
            unsigned char c = b[0];

            if (o == fin)
                c &= (unsigned char)~(1u << (s->mb.last % 8)); /* not the last block any more */
            if (o == end - 1)
                c = last_byte(s, c);
            k = 1;
            if (emit(s, &c, 1) != 0)
                return (-1);
        } else {
            uint64_t upto = o < fin ? fin : end - 1;

            k = (size_t)SRG_MIN((uint64_t)n, upto - o);
            if (emit(s, b, k) != 0)
                return (-1);
        }
        b += k;
        n -= k;
        s->moff += k;
    }
    return (s->failed ? -1 : 0);
}

int
gz_stitch_member_end(struct gz_stitch *s)
{
    unsigned used;

    OBJ_CHECK(s, GZ_STITCH_MAGIC);
    SRG_ASSERT(s->in_member);
    s->in_member = false;
    if (s->moff < (s->mb.stop + 7) / 8 + 8) {
        s->failed = true; /* the member was cut short */
        return (-1);
    }
    used = (unsigned)(s->mb.stop % 8);
    if (used != 0) {
        /*
         * An empty stored block from bit `stop`: its 3 header bits went
         * out as zeros in the last byte when they fit (used <= 5), else
         * they spill into one more zero byte; LEN and NLEN follow on the
         * byte boundary.
         */
        static const unsigned char zero = 0;

        if (used > 5 && emit(s, &zero, 1) != 0)
            return (-1);
        if (emit(s, gz_stored_empty, sizeof gz_stored_empty) != 0)
            return (-1);
    }
    gz_stitch_account(s, s->mb.crc, s->mb.len);
    return (s->failed ? -1 : 0);
}

int
gz_stitch_end(struct gz_stitch *s)
{
    unsigned char t[8];

    OBJ_CHECK(s, GZ_STITCH_MAGIC);
    SRG_ASSERT(!s->in_member);
    for (int i = 0; i < 4; i++) {
        t[i] = (unsigned char)(s->crc >> (8 * i));
        t[4 + i] = (unsigned char)(s->len >> (8 * i)); /* ISIZE: the length modulo 2^32 */
    }
    if (emit(s, gz_last_block, sizeof gz_last_block) != 0)
        return (-1);
    return (emit(s, t, sizeof t));
}
