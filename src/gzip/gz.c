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
 *
 * The decoder's output is bounded by size and by its ratio to the input
 * consumed (gz_limit), checked each time the output buffer is handed
 * out: a bomb costs at most one buffer past the bound, never the
 * gigabytes it would inflate to.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "surogat/defs.h"
#include "surogat/gz.h"
#include "surogat/par.h"
#include "surogat/sb.h"

/* Output gathered before each callback: the size of a typical socket write. */
#define GZ_OBUF (16 * 1024)

struct gz {
    unsigned magic;
#define GZ_MAGIC 0x8d1c3e5b
    enum gz_kind kind;
    bool ended;  /* GZ_END was returned: the stream is complete */
    bool failed; /* an error was returned: the filter takes no more input */
    bool bomb;   /* GZ_E_BOMB was returned */
    z_stream zs;
    uint64_t in, out;
    uint64_t max_out; /* decoder: bound on out, 0 none (gz_limit) */
    unsigned ratio;   /* decoder: bound on out / input consumed, 0 none */
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
        gz_limit(z, par.gunzip_max_size, par.gunzip_max_ratio);
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

void
gz_limit(struct gz *z, uint64_t max_out, unsigned ratio)
{
    OBJ_CHECK(z, GZ_MAGIC);
    SRG_ASSERT(z->kind != GZ_ENCODE);
    z->max_out = max_out;
    z->ratio = ratio;
}

/* Input zlib has taken so far; the rest of the current slice waits in avail_in. */
static uint64_t
consumed(const struct gz *z)
{
    return (z->in - z->zs.avail_in);
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

/* Hand the output buffer's contents to the callback and empty it. */
static enum gz_status
drain(struct gz *z, gz_out_f *out, void *priv)
{
    size_t n = GZ_OBUF - z->zs.avail_out;

    z->zs.next_out = z->obuf;
    z->zs.avail_out = GZ_OBUF;
    if (n == 0)
        return (GZ_OK);
    if (z->kind != GZ_ENCODE && over_bound(z, n)) {
        z->bomb = true;
        z->out += n; /* counted, for gz_explain(), though never handed out */
        return (GZ_E_BOMB);
    }
    z->out += n;
    return (out(priv, (const char *)z->obuf, n) == 0 ? GZ_OK : GZ_E_OUTPUT);
}

static enum gz_status
encode(struct gz *z, enum gz_flush fl, gz_out_f *out, void *priv)
{
    int flush = fl == GZ_FLUSH_FINISH ? Z_FINISH : fl == GZ_FLUSH_SYNC ? Z_SYNC_FLUSH : Z_NO_FLUSH;
    enum gz_status st;
    int rv;

    for (;;) {
        rv = deflate(&z->zs, flush);
        /* Z_BUF_ERROR only says no progress was possible: nothing to do, not a failure. */
        SRG_ASSERT(rv == Z_OK || rv == Z_STREAM_END || rv == Z_BUF_ERROR);
        if (z->zs.avail_out == 0) {
            if ((st = drain(z, out, priv)) != GZ_OK)
                return (st);
            continue; /* the buffer filled: there may be more */
        }
        /* Room was left, so deflate() has taken all input and flushed what flush asked. */
        SRG_ASSERT(z->zs.avail_in == 0);
        if (rv == Z_STREAM_END) {
            if ((st = drain(z, out, priv)) != GZ_OK)
                return (st);
            z->ended = true;
            return (GZ_END);
        }
        if (flush != Z_NO_FLUSH && (st = drain(z, out, priv)) != GZ_OK)
            return (st);
        return (GZ_OK);
    }
}

static enum gz_status
decode(struct gz *z, enum gz_flush fl, gz_out_f *out, void *priv)
{
    enum gz_status st;
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
            if ((st = drain(z, out, priv)) != GZ_OK)
                return (st);
            continue;
        }
        if (z->ended)
            continue;
        /* Output room left and not at the end: inflate() used up all input. */
        break;
    }
    if ((st = drain(z, out, priv)) != GZ_OK)
        return (st);
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
        if (n > 0)
            p += n; /* not on NULL: the end of the input is (NULL, 0) */
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
