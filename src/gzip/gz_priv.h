/*
 * gz_priv.h -- what the compression module's files share: the filter
 * object and the codec steps each file provides.  A codec step runs its
 * library on z->ain bytes at z->nin, writes into the output buffer
 * (z->nout, z->aout) and hands the buffer out through gz__drain() when
 * it fills, so every codec shares one buffer, one bound and one count.
 */
#ifndef SUROGAT_GZ_PRIV_H
#define SUROGAT_GZ_PRIV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <zlib.h>

#include "surogat/gz.h"

/* Output gathered before each callback: the size of a typical socket write. */
#define GZ_OBUF (16 * 1024)

struct gz {
    unsigned magic;
#define GZ_MAGIC 0x8d1c3e5b
    enum gz_kind kind;
    bool ended;  /* GZ_END was returned: the stream is complete */
    bool failed; /* an error was returned: the filter takes no more input */
    bool bomb;   /* GZ_E_BOMB was returned */
    /* The codec's state: zs for the zlib kinds, lib for brotli and zstd. */
    z_stream zs;
    void *lib;
    /* The current input slice: what the codec has not taken yet. */
    const unsigned char *nin;
    size_t ain;
    /* Room left in obuf. */
    unsigned char *nout;
    size_t aout;
    uint64_t in, out;
    uint64_t max_out; /* decoder: bound on out, 0 none (gz_limit) */
    unsigned ratio;   /* decoder: bound on out / input consumed, 0 none */
    /* Encoder segments (gz_cut): where the current one began and its CRC so far. */
    uint64_t seg_zoff, seg_in;
    uint32_t seg_crc;
    /* Decoder bit tracking (gz_track): see struct gz_bits. */
    bool track;
    bool bits_ok;
    struct gz_bits bits;
    unsigned char obuf[GZ_OBUF];
};

/* Hand the output buffer's contents to the callback and empty it (bounded for a decoder). */
enum gz_status gz__drain(struct gz *z, gz_out_f *out, void *priv);

/* gz_brzs.c: brotli and zstd. */
void gz__br_new(struct gz *z, int level);
void gz__zstd_new(struct gz *z, int level);
void gz__lib_free(struct gz *z);
enum gz_status gz__lib_encode(struct gz *z, enum gz_flush fl, gz_out_f *out, void *priv);
enum gz_status gz__lib_decode(struct gz *z, enum gz_flush fl, gz_out_f *out, void *priv);

#endif
