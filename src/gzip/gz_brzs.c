/*
 * brotli (RFC 7932) and zstd (RFC 8878) behind the gz_ filter interface,
 * with the same contract as gzip: output through the shared buffer,
 * decoders bounded by gunzip_max_size and gunzip_max_ratio, and strict
 * about the end -- a truncated stream is an error, and so are bytes after
 * a brotli stream (zstd, like gzip, may hold several frames one after
 * the other).
 *
 * zstd's window is capped at 8 MiB both ways, as RFC 9659 asks of the
 * zstd content coding: an encoder level past 19 would exceed it, and a
 * decoder refuses a frame that needs more (its memory would be the
 * sender's to choose otherwise).
 */
#include "config.h"

#include <stdlib.h>

#include <brotli/decode.h>
#include <brotli/encode.h>
#include <zstd.h>

#include "surogat/defs.h"
#include "surogat/gz.h"

#include "gz_priv.h"

/* RFC 9659 section 3: the window of the zstd content coding, 2^23 bytes. */
#define GZ_ZSTD_WINDOW_LOG 23

void
gz__br_new(struct gz *z, int level)
{
    if (z->kind == GZ_ENCODE_BR) {
        BrotliEncoderState *s = BrotliEncoderCreateInstance(NULL, NULL, NULL);

        AN(s);
        if (level < BROTLI_MIN_QUALITY || level > BROTLI_MAX_QUALITY)
            level = GZ_BR_LEVEL_DEFAULT;
        AN(BrotliEncoderSetParameter(s, BROTLI_PARAM_QUALITY, (uint32_t)level));
        /* Text is what gets compressed (gzip_types): the model for it. */
        AN(BrotliEncoderSetParameter(s, BROTLI_PARAM_MODE, BROTLI_MODE_TEXT));
        z->lib = s;
    } else {
        z->lib = BrotliDecoderCreateInstance(NULL, NULL, NULL);
        AN(z->lib);
    }
}

void
gz__zstd_new(struct gz *z, int level)
{
    if (z->kind == GZ_ENCODE_ZSTD) {
        ZSTD_CCtx *c = ZSTD_createCCtx();

        AN(c);
        if (level < 1 || level > 19)
            level = GZ_ZSTD_LEVEL_DEFAULT;
        AZ(ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_compressionLevel, level)));
        /* The frame's own checksum: a decoder checks the content as gzip's CRC would. */
        AZ(ZSTD_isError(ZSTD_CCtx_setParameter(c, ZSTD_c_checksumFlag, 1)));
        z->lib = c;
    } else {
        ZSTD_DCtx *d = ZSTD_createDCtx();

        AN(d);
        AZ(ZSTD_isError(ZSTD_DCtx_setParameter(d, ZSTD_d_windowLogMax, GZ_ZSTD_WINDOW_LOG)));
        z->lib = d;
    }
}

void
gz__lib_free(struct gz *z)
{
    switch (z->kind) {
    case GZ_ENCODE_BR:
        BrotliEncoderDestroyInstance(z->lib);
        break;
    case GZ_DECODE_BR:
        BrotliDecoderDestroyInstance(z->lib);
        break;
    case GZ_ENCODE_ZSTD:
        ZSTD_freeCCtx(z->lib);
        break;
    case GZ_DECODE_ZSTD:
        ZSTD_freeDCtx(z->lib);
        break;
    default:
        SRG_WRONG("gz_kind");
    }
    z->lib = NULL;
}

static enum gz_status
br_encode(struct gz *z, enum gz_flush fl, gz_out_f *out, void *priv)
{
    BrotliEncoderOperation op = fl == GZ_FLUSH_FINISH ? BROTLI_OPERATION_FINISH
                                : fl == GZ_FLUSH_SYNC ? BROTLI_OPERATION_FLUSH
                                                      : BROTLI_OPERATION_PROCESS;
    enum gz_status st;

    for (;;) {
        /* Fails only on misuse (input after FINISH), which gz_feed() already refuses. */
        AN(BrotliEncoderCompressStream(z->lib, op, &z->ain, &z->nin, &z->aout, &z->nout, NULL));
        if (z->aout == 0) {
            if ((st = gz__drain(z, out, priv)) != GZ_OK)
                return (st);
            continue;
        }
        if (z->ain > 0 || BrotliEncoderHasMoreOutput(z->lib))
            continue;
        if (op == BROTLI_OPERATION_FINISH && !BrotliEncoderIsFinished(z->lib))
            continue;
        break;
    }
    if (op != BROTLI_OPERATION_PROCESS && (st = gz__drain(z, out, priv)) != GZ_OK)
        return (st);
    if (op == BROTLI_OPERATION_FINISH) {
        z->ended = true;
        return (GZ_END);
    }
    return (GZ_OK);
}

static enum gz_status
zstd_encode(struct gz *z, enum gz_flush fl, gz_out_f *out, void *priv)
{
    ZSTD_EndDirective mode = fl == GZ_FLUSH_FINISH ? ZSTD_e_end
                             : fl == GZ_FLUSH_SYNC ? ZSTD_e_flush
                                                   : ZSTD_e_continue;
    ZSTD_inBuffer ib = { z->nin, z->ain, 0 };
    enum gz_status st;
    size_t left;

    for (;;) {
        ZSTD_outBuffer ob = { z->nout, z->aout, 0 };

        left = ZSTD_compressStream2(z->lib, &ob, &ib, mode);
        /* Errors are misuse or memory: ours, not the input's. */
        AZ(ZSTD_isError(left));
        z->nout += ob.pos;
        z->aout -= ob.pos;
        z->nin = (const unsigned char *)ib.src + ib.pos;
        z->ain = ib.size - ib.pos;
        if (z->aout == 0) {
            if ((st = gz__drain(z, out, priv)) != GZ_OK)
                return (st);
            continue;
        }
        /* With room left, continue has taken all input; flush and end say what remains. */
        if (z->ain > 0 || (mode != ZSTD_e_continue && left > 0))
            continue;
        break;
    }
    if (mode != ZSTD_e_continue && (st = gz__drain(z, out, priv)) != GZ_OK)
        return (st);
    if (mode == ZSTD_e_end) {
        z->ended = true;
        return (GZ_END);
    }
    return (GZ_OK);
}

enum gz_status
gz__lib_encode(struct gz *z, enum gz_flush fl, gz_out_f *out, void *priv)
{
    return (z->kind == GZ_ENCODE_BR ? br_encode(z, fl, out, priv) : zstd_encode(z, fl, out, priv));
}

static enum gz_status
br_decode(struct gz *z)
{
    BrotliDecoderResult r;

    if (z->ended)
        return (z->ain > 0 ? GZ_E_DATA : GZ_OK); /* nothing may follow a brotli stream */
    r = BrotliDecoderDecompressStream(z->lib, &z->ain, &z->nin, &z->aout, &z->nout, NULL);
    switch (r) {
    case BROTLI_DECODER_RESULT_SUCCESS:
        z->ended = true;
        return (z->ain > 0 ? GZ_E_DATA : GZ_OK);
    case BROTLI_DECODER_RESULT_NEEDS_MORE_INPUT:
    case BROTLI_DECODER_RESULT_NEEDS_MORE_OUTPUT:
        return (GZ_OK);
    case BROTLI_DECODER_RESULT_ERROR:
        return (GZ_E_DATA);
    }
    return (GZ_E_DATA);
}

static enum gz_status
zstd_decode(struct gz *z)
{
    ZSTD_inBuffer ib = { z->nin, z->ain, 0 };
    ZSTD_outBuffer ob = { z->nout, z->aout, 0 };
    size_t r;

    if (z->ain == 0 && z->ended)
        return (GZ_OK);
    r = ZSTD_decompressStream(z->lib, &ob, &ib);
    if (ZSTD_isError(r))
        return (GZ_E_DATA); /* corrupt, bad checksum, or a window past 8 MiB */
    z->nout += ob.pos;
    z->aout -= ob.pos;
    z->nin += ib.pos;
    z->ain -= ib.pos;
    /* 0: a frame is complete and flushed; more input would begin another. */
    z->ended = r == 0;
    return (GZ_OK);
}

enum gz_status
gz__lib_decode(struct gz *z, enum gz_flush fl, gz_out_f *out, void *priv)
{
    enum gz_status st;

    for (;;) {
        size_t ain = z->ain, aout = z->aout;

        st = z->kind == GZ_DECODE_BR ? br_decode(z) : zstd_decode(z);
        if (st != GZ_OK)
            return (st);
        if (z->aout == 0) {
            if ((st = gz__drain(z, out, priv)) != GZ_OK)
                return (st);
            continue;
        }
        /* Output room left: the decoder wants input, or holds nothing more. */
        if (z->ain > 0 && (z->ain != ain || z->aout != aout))
            continue;
        if (z->ain > 0)
            return (GZ_E_DATA); /* no progress with input and room: cannot happen on valid data */
        break;
    }
    if ((st = gz__drain(z, out, priv)) != GZ_OK)
        return (st);
    if (fl == GZ_FLUSH_FINISH && !z->ended)
        return (z->in == 0 ? GZ_E_DATA : GZ_E_TRUNCATED);
    return (z->ended ? GZ_END : GZ_OK);
}
