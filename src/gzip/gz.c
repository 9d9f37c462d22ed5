/*
 * Streaming compression filters: gzip and zlib over zlib here, brotli
 * and zstd in gz_brzs.c.  A fetch runs one while it stores a body
 * (compressing it, or checking a backend's encoding), a delivery runs a
 * decoder for a client that does not take the stored encoding.  A filter
 * has one owner thread and no lock; its output goes through a fixed
 * buffer to the caller's callback, so memory stays bounded whatever the
 * body size.
 *
 * The decoders are strict because what they pass becomes a stored object
 * or a client's body: zlib checks the gzip header, the deflate stream,
 * and the trailer's CRC-32 and length (windowBits 15 + 16: gzip only, no
 * zlib or raw streams), and anything after the last member is an error,
 * not ignored, so a damaged body is never taken for a good one.  The
 * GZ_INFLATE decoder is the same for the zlib format (a backend's deflate
 * transfer coding), with its Adler-32.
 *
 * Every decoder's output is bounded by size and by its ratio to the
 * input consumed (gz_limit), checked each time the output buffer is
 * handed out: a bomb costs at most one buffer past the bound, never the
 * gigabytes it would inflate to.
 *
 * Two additions serve ESI pages stored gzip (gz_stitch.c): an encoder
 * cut into segments (gz_cut), each ending on a byte boundary with an
 * empty dictionary so that it can be sent without its neighbours, and a
 * decoder that records where a member's last deflate block lies
 * (gz_track), so that a whole gzip object can be spliced into another
 * stream without being decoded again.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "surogat/defs.h"
#include "surogat/gz.h"
#include "surogat/par.h"
#include "surogat/sb.h"

#include "gz_priv.h"

static bool
is_encoder(enum gz_kind k)
{
    return (k == GZ_ENCODE || k == GZ_ENCODE_BR || k == GZ_ENCODE_ZSTD);
}

static bool
is_zlib(enum gz_kind k)
{
    return (k == GZ_ENCODE || k == GZ_DECODE || k == GZ_INFLATE || k == GZ_DECODE_RAW);
}

struct gz *
gz_new(enum gz_kind kind, int level)
{
    struct gz *z;
    int rv = Z_OK;

    OBJ_NEW(z, GZ_MAGIC);
    z->kind = kind;
    z->nout = z->obuf;
    z->aout = GZ_OBUF;
    switch (kind) {
    case GZ_ENCODE:
        if (level < 1 || level > 9)
            level = Z_DEFAULT_COMPRESSION;
        /* windowBits 15 + 16: a gzip wrapper; memLevel 8 is zlib's default. */
        rv = deflateInit2(&z->zs, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
        z->seg_zoff = 10; /* the header zlib writes without deflateSetHeader() */
        z->seg_crc = crc32(0, NULL, 0);
        break;
    case GZ_DECODE:
    case GZ_INFLATE:
    case GZ_DECODE_RAW:
        /* windowBits 15 + 16: gzip only; 15: the zlib wrapper only; -15: raw deflate. */
        rv = inflateInit2(&z->zs, kind == GZ_INFLATE ? 15 : kind == GZ_DECODE_RAW ? -15 : 15 + 16);
        break;
    case GZ_ENCODE_BR:
    case GZ_DECODE_BR:
        gz__br_new(z, level);
        break;
    case GZ_ENCODE_ZSTD:
    case GZ_DECODE_ZSTD:
        gz__zstd_new(z, level);
        break;
    default:
        SRG_WRONG("gz_kind");
    }
    /* Only running out of memory can fail here: fatal for bookkeeping everywhere. */
    AZ(rv);
    if (!is_encoder(kind))
        gz_limit(z, par.gunzip_max_size, par.gunzip_max_ratio);
    return (z);
}

void
gz_free(struct gz **zp)
{
    struct gz *z = *zp;

    if (z == NULL)
        return;
    OBJ_CHECK(z, GZ_MAGIC);
    if (z->kind == GZ_ENCODE)
        (void)deflateEnd(&z->zs);
    else if (is_zlib(z->kind))
        (void)inflateEnd(&z->zs);
    else
        gz__lib_free(z);
    OBJ_FREE(zp);
}

void
gz_limit(struct gz *z, uint64_t max_out, unsigned ratio)
{
    OBJ_CHECK(z, GZ_MAGIC);
    SRG_ASSERT(!is_encoder(z->kind));
    z->max_out = max_out;
    z->ratio = ratio;
}

void
gz_track(struct gz *z)
{
    OBJ_CHECK(z, GZ_MAGIC);
    SRG_ASSERT(z->kind == GZ_DECODE || z->kind == GZ_ENCODE);
    SRG_ASSERT(z->in == 0);
    z->track = true;
}

/* Input the codec has taken so far; the rest of the current slice waits in ain. */
static uint64_t
consumed(const struct gz *z)
{
    return (z->in - z->ain);
}

/* Whether n more bytes of output pass the decoder's bound. */
static bool
over_bound(const struct gz *z, size_t n)
{
    uint64_t total = z->out + n;

    if (z->max_out > 0 && total > z->max_out)
        return (true);
    /* total > ratio * consumed, without the product overflowing. */
    return (z->ratio > 0 && (total - 1) / z->ratio >= consumed(z));
}

enum gz_status
gz__drain(struct gz *z, gz_out_f *out, void *priv)
{
    size_t n = GZ_OBUF - z->aout;

    z->nout = z->obuf;
    z->aout = GZ_OBUF;
    if (n == 0)
        return (GZ_OK);
    if (!is_encoder(z->kind) && over_bound(z, n)) {
        z->bomb = true;
        z->out += n; /* counted, for gz_explain(), though never handed out */
        return (GZ_E_BOMB);
    }
    z->out += n;
    return (out(priv, (const char *)z->obuf, n) == 0 ? GZ_OK : GZ_E_OUTPUT);
}

/* One zlib call on the current slice, keeping nin/ain and nout/aout in step. */
static int
zcall(struct gz *z, int flush)
{
    int rv;

    z->zs.next_in = (unsigned char *)(uintptr_t)z->nin;
    z->zs.avail_in = (uInt)z->ain;
    z->zs.next_out = z->nout;
    z->zs.avail_out = (uInt)z->aout;
    if (z->kind == GZ_ENCODE)
        rv = deflate(&z->zs, flush);
    else
        rv = inflate(&z->zs, flush);
    z->nin = z->zs.next_in;
    z->ain = z->zs.avail_in;
    z->nout = z->zs.next_out;
    z->aout = z->zs.avail_out;
    return (rv);
}

/*
 * Deflate the slice with flush; with Z_FULL_FLUSH or Z_SYNC_FLUSH every
 * byte so far is handed out and the output ends on a byte boundary.
 */
static enum gz_status
deflate_slice(struct gz *z, int flush, gz_out_f *out, void *priv)
{
    enum gz_status st;
    int rv;

    for (;;) {
        rv = zcall(z, flush);
        /* Z_BUF_ERROR only says no progress was possible: nothing to do, not a failure. */
        SRG_ASSERT(rv == Z_OK || rv == Z_STREAM_END || rv == Z_BUF_ERROR);
        if (z->aout == 0) {
            if ((st = gz__drain(z, out, priv)) != GZ_OK)
                return (st);
            continue; /* the buffer filled: there may be more */
        }
        /* Room was left, so deflate() has taken all input and flushed what flush asked. */
        SRG_ASSERT(z->ain == 0);
        if (rv == Z_STREAM_END) {
            if ((st = gz__drain(z, out, priv)) != GZ_OK)
                return (st);
            z->ended = true;
            return (GZ_END);
        }
        if (flush != Z_NO_FLUSH && (st = gz__drain(z, out, priv)) != GZ_OK)
            return (st);
        return (GZ_OK);
    }
}

static enum gz_status
encode(struct gz *z, enum gz_flush fl, gz_out_f *out, void *priv)
{
    enum gz_status st;

    if (fl == GZ_FLUSH_FINISH && z->track) {
        /*
         * Align first, so the last block is the empty one Z_FINISH adds,
         * on a byte boundary of its own: gz_bits() can then say where.
         */
        if ((st = deflate_slice(z, Z_SYNC_FLUSH, out, priv)) != GZ_OK)
            return (st);
        z->bits.last = z->out * 8;
        st = deflate_slice(z, Z_FINISH, out, priv);
        if (st == GZ_END) {
            z->bits.start = 80;
            z->bits.stop = z->bits.last + 10; /* BFINAL, BTYPE 01 and the 7-bit end code */
            z->bits.crc = (uint32_t)z->zs.adler;
            z->bits.len = z->in;
            z->bits_ok = true;
        }
        return (st);
    }
    return (deflate_slice(z,
                          fl == GZ_FLUSH_FINISH ? Z_FINISH
                          : fl == GZ_FLUSH_SYNC ? Z_SYNC_FLUSH
                                                : Z_NO_FLUSH,
                          out, priv));
}

/*
 * After inflate(Z_BLOCK) zlib's data_type holds the bits of the last
 * input byte not used yet (below 64), 64 once the last block has begun,
 * and 128 when inflate() stopped between blocks (or after the header).
 * Stopped between blocks with the last one not begun, the next block may
 * be the last: its start is where BFINAL sits.  Stopped with 64 too, the
 * last block has just ended: that is where the deflate data stops.
 */
static void
track(struct gz *z)
{
    uint64_t pos = 8 * consumed(z) - (uint64_t)(z->zs.data_type & 63);

    if (!(z->zs.data_type & 128))
        return;
    if (z->bits.start == 0)
        z->bits.start = pos;
    if (z->zs.data_type & 64)
        z->bits.stop = pos;
    else
        z->bits.last = pos;
}

static enum gz_status
inflate_all(struct gz *z, gz_out_f *out, void *priv)
{
    enum gz_status st;
    int rv;

    for (;;) {
        if (z->ended) {
            if (z->ain == 0)
                return (GZ_OK);
            if (z->kind != GZ_DECODE)
                return (GZ_E_DATA); /* zlib has no members: bytes after the end are junk */
            /*
             * Another member follows (RFC 1952 2.2): the bytes must be a
             * complete gzip member again, checked like the first.  It can
             * no longer be spliced whole (gz_bits).
             */
            AZ(inflateReset(&z->zs));
            z->ended = false;
            z->bits_ok = false;
            z->track = false;
        }
        rv = zcall(z, z->track ? Z_BLOCK : Z_NO_FLUSH);
        if (z->track && rv == Z_OK)
            track(z);
        if (rv == Z_STREAM_END) {
            z->ended = true;
            if (z->track && z->bits.stop > z->bits.last && z->bits.last >= z->bits.start) {
                /* The trailer's 8 bytes follow the last block and its padding. */
                z->bits.crc = (uint32_t)z->zs.adler;
                z->bits.len = z->zs.total_out;
                z->bits_ok = (z->bits.stop + 7) / 8 + 8 == consumed(z);
            }
        } else if (rv != Z_OK && rv != Z_BUF_ERROR) {
            return (GZ_E_DATA); /* Z_DATA_ERROR, Z_NEED_DICT, Z_MEM_ERROR */
        }
        if (z->aout == 0) {
            /* Full: zlib may hold more output for the same input. */
            if ((st = gz__drain(z, out, priv)) != GZ_OK)
                return (st);
            continue;
        }
        if (z->ended)
            continue;
        if (z->track && z->ain > 0)
            continue; /* Z_BLOCK stopped at a block boundary: go on */
        /* Output room left and not at the end: inflate() used up all input. */
        return (GZ_OK);
    }
}

static enum gz_status
decode(struct gz *z, enum gz_flush fl, gz_out_f *out, void *priv)
{
    enum gz_status st = inflate_all(z, out, priv);

    if (st != GZ_OK)
        return (st);
    if ((st = gz__drain(z, out, priv)) != GZ_OK)
        return (st);
    if (z->kind == GZ_DECODE_RAW)
        return (GZ_OK); /* segments have no end of their own: the caller knows where */
    if (fl == GZ_FLUSH_FINISH && !z->ended)
        return (z->in == 0 ? GZ_E_DATA : GZ_E_TRUNCATED);
    return (z->ended ? GZ_END : GZ_OK);
}

enum gz_status
gz_feed(struct gz *z, const void *in, size_t len, enum gz_flush fl, gz_out_f *out, void *priv)
{
    enum gz_status st;
    size_t left = len;
    const unsigned char *p = in;

    OBJ_CHECK(z, GZ_MAGIC);
    AN(out);
    if (z->failed)
        return (GZ_E_DATA);
    if (is_encoder(z->kind))
        SRG_ASSERT(!z->ended); /* the caller finished the stream already */
    /* zlib counts input in uInt: feed a larger piece in slices. */
    do {
        size_t n = left > (1u << 30) ? (1u << 30) : left;
        enum gz_flush f = left > n ? GZ_FLUSH_NONE : fl;

        z->nin = p;
        z->ain = n;
        if (n > 0) {
            if (z->kind == GZ_ENCODE)
                z->seg_crc = (uint32_t)crc32(z->seg_crc, p, (uInt)n);
            p += n; /* not on NULL: the end of the input is (NULL, 0) */
        }
        left -= n;
        z->in += n;
        if (z->kind == GZ_ENCODE)
            st = encode(z, f, out, priv);
        else if (is_zlib(z->kind))
            st = decode(z, f, out, priv);
        else if (is_encoder(z->kind))
            st = gz__lib_encode(z, f, out, priv);
        else
            st = gz__lib_decode(z, f, out, priv);
        if (st != GZ_OK && st != GZ_END) {
            z->failed = true;
            return (st);
        }
    } while (left > 0);
    return (st);
}

enum gz_status
gz_cut(struct gz *z, gz_out_f *out, void *priv, struct gz_seg *seg)
{
    enum gz_status st;

    OBJ_CHECK(z, GZ_MAGIC);
    SRG_ASSERT(z->kind == GZ_ENCODE && !z->ended && !z->failed);
    AN(seg);
    z->nin = NULL;
    z->ain = 0;
    /*
     * A full flush: the segment ends on a byte boundary (the empty stored
     * block 00 00 ff ff) and the next one refers to nothing before it,
     * so either can follow any other bytes in a stitched stream.
     */
    st = deflate_slice(z, Z_FULL_FLUSH, out, priv);
    if (st != GZ_OK) {
        z->failed = true;
        return (st);
    }
    /* zlib repeats no flush without input between: an empty segment may have no bytes. */
    seg->zoff = z->seg_zoff;
    seg->zlen = z->out > z->seg_zoff ? z->out - z->seg_zoff : 0;
    seg->len = z->in - z->seg_in;
    seg->crc = z->seg_crc;
    z->seg_zoff += seg->zlen;
    z->seg_in = z->in;
    z->seg_crc = (uint32_t)crc32(0, NULL, 0);
    return (GZ_OK);
}

bool
gz_bits(const struct gz *z, struct gz_bits *b)
{
    OBJ_CHECK(z, GZ_MAGIC);
    if (!z->bits_ok || !z->ended)
        return (false);
    *b = z->bits;
    return (true);
}

uint64_t
gz_bytes_in(const struct gz *z)
{
    OBJ_CHECK(z, GZ_MAGIC);
    return (z->in);
}

uint64_t
gz_bytes_out(const struct gz *z)
{
    OBJ_CHECK(z, GZ_MAGIC);
    return (z->out);
}

void
gz_explain(const struct gz *z, struct sb *out)
{
    OBJ_CHECK(z, GZ_MAGIC);
    AN(z->bomb);
    if (z->max_out > 0 && z->out > z->max_out)
        sb_printf(out, "over gunzip_max_size (%llu bytes)", (unsigned long long)z->max_out);
    else
        sb_printf(out, "over gunzip_max_ratio (%u:1)", z->ratio);
    sb_printf(out, ": %llu bytes from %llu", (unsigned long long)z->out,
              (unsigned long long)consumed(z));
}
