/*
 * Streaming gzip filters over zlib.  A fetch runs one while it stores a
 * body (compressing it, or checking a backend's gzip), a delivery runs a
 * decoder for a client that does not take gzip.  A filter has one owner
 * thread and no lock; its output goes through a fixed buffer to the
 * caller's callback, so memory stays bounded whatever the body size.
 *
 * The decoder is strict because what it passes becomes a stored object
 * or a client's body: zlib checks the gzip header, the deflate stream,
 * and the trailer's CRC-32 and length (windowBits 15 + 16: gzip only, no
 * zlib or raw streams), and anything after the last member is an error,
 * not ignored, so a damaged body is never taken for a good one.  The
 * GZ_INFLATE decoder is the same for the zlib format (a backend's deflate
 * transfer coding), with its Adler-32.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "surogat/defs.h"
#include "surogat/gz.h"

/* Output gathered before each callback: the size of a typical socket write. */
#define GZ_OBUF (16 * 1024)

struct gz {
    unsigned magic;
#define GZ_MAGIC 0x8d1c3e5b
    enum gz_kind kind;
    bool ended;  /* GZ_END was returned: the stream is complete */
    bool failed; /* an error was returned: the filter takes no more input */
    z_stream zs;
    uint64_t in, out;
    unsigned char obuf[GZ_OBUF];
};

struct gz *
gz_new(enum gz_kind kind, int level)
{
    struct gz *z;
    int rv;

    OBJ_NEW(z, GZ_MAGIC);
    z->kind = kind;
    if (kind == GZ_ENCODE) {
        if (level < 1 || level > 9)
            level = Z_DEFAULT_COMPRESSION;
        /* windowBits 15 + 16: a gzip wrapper; memLevel 8 is zlib's default. */
        rv = deflateInit2(&z->zs, level, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
    } else {
        /* windowBits 15 + 16: gzip only; 15: the zlib wrapper only. */
        rv = inflateInit2(&z->zs, kind == GZ_INFLATE ? 15 : 15 + 16);
    }
    /* Only Z_MEM_ERROR can fail here: out of memory for bookkeeping is fatal everywhere. */
    AZ(rv);
    z->zs.next_out = z->obuf;
    z->zs.avail_out = GZ_OBUF;
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
    else
        (void)inflateEnd(&z->zs);
    OBJ_FREE(zp);
}

/* Hand the output buffer's contents to the callback and empty it. */
static int
drain(struct gz *z, gz_out_f *out, void *priv)
{
    size_t n = GZ_OBUF - z->zs.avail_out;

    z->zs.next_out = z->obuf;
    z->zs.avail_out = GZ_OBUF;
    if (n == 0)
        return (0);
    z->out += n;
    return (out(priv, (const char *)z->obuf, n));
}

static enum gz_status
encode(struct gz *z, enum gz_flush fl, gz_out_f *out, void *priv)
{
    int flush = fl == GZ_FLUSH_FINISH ? Z_FINISH : fl == GZ_FLUSH_SYNC ? Z_SYNC_FLUSH : Z_NO_FLUSH;
    int rv;

    for (;;) {
        rv = deflate(&z->zs, flush);
        /* Z_BUF_ERROR only says no progress was possible: nothing to do, not a failure. */
        SRG_ASSERT(rv == Z_OK || rv == Z_STREAM_END || rv == Z_BUF_ERROR);
        if (z->zs.avail_out == 0) {
            if (drain(z, out, priv) != 0)
                return (GZ_E_OUTPUT);
            continue; /* the buffer filled: there may be more */
        }
        /* Room was left, so deflate() has taken all input and flushed what flush asked. */
        SRG_ASSERT(z->zs.avail_in == 0);
        if (rv == Z_STREAM_END) {
            if (drain(z, out, priv) != 0)
                return (GZ_E_OUTPUT);
            z->ended = true;
            return (GZ_END);
        }
        if (flush != Z_NO_FLUSH && drain(z, out, priv) != 0)
            return (GZ_E_OUTPUT);
        return (GZ_OK);
    }
}

static enum gz_status
decode(struct gz *z, enum gz_flush fl, gz_out_f *out, void *priv)
{
    int rv;

    for (;;) {
        if (z->ended) {
            if (z->zs.avail_in == 0)
                break;
            if (z->kind == GZ_INFLATE)
                return (GZ_E_DATA); /* zlib has no members: bytes after the end are junk */
            /*
             * Another member follows (RFC 1952 2.2): the bytes must be a
             * complete gzip member again, checked like the first.
             */
            AZ(inflateReset(&z->zs));
            z->ended = false;
        }
        rv = inflate(&z->zs, Z_NO_FLUSH);
        if (rv == Z_STREAM_END)
            z->ended = true;
        else if (rv != Z_OK && rv != Z_BUF_ERROR)
            return (GZ_E_DATA); /* Z_DATA_ERROR, Z_NEED_DICT, Z_MEM_ERROR */
        if (z->zs.avail_out == 0) {
            /* Full: zlib may hold more output for the same input. */
            if (drain(z, out, priv) != 0)
                return (GZ_E_OUTPUT);
            continue;
        }
        if (z->ended)
            continue;
        /* Output room left and not at the end: inflate() used up all input. */
        break;
    }
    if (drain(z, out, priv) != 0)
        return (GZ_E_OUTPUT);
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
    if (z->kind == GZ_ENCODE)
        SRG_ASSERT(!z->ended); /* the caller finished the stream already */
    /* zlib counts input in uInt: feed a larger piece in slices. */
    do {
        size_t n = left > (1u << 30) ? (1u << 30) : left;
        z->zs.next_in = (unsigned char *)(uintptr_t)p;
        z->zs.avail_in = (uInt)n;
        p += n;
        left -= n;
        z->in += n;
        if (z->kind == GZ_ENCODE)
            st = encode(z, left > 0 ? GZ_FLUSH_NONE : fl, out, priv);
        else
            st = decode(z, left > 0 ? GZ_FLUSH_NONE : fl, out, priv);
        if (st != GZ_OK && st != GZ_END) {
            z->failed = true;
            return (st);
        }
    } while (left > 0);
    return (st);
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
