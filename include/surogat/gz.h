/*
 * gz -- compression for the cache, in the manner of Varnish's
 * http_gzip_support but for brotli and zstd too: the cache asks backends
 * for the codings it can undo, stores a compressible body compressed once,
 * and makes the coding a client prefers on the fly when it does not take
 * the stored one.  This module holds the
 * streaming filters (gzip, zlib and raw deflate over zlib, brotli, zstd),
 * the rules -- what a client's Accept-Encoding allows and prefers, and
 * which responses are worth compressing -- and the gzip stitcher that
 * assembles an ESI page from compressed pieces.  It knows nothing of
 * requests or objects.
 *
 * A filter belongs to one thread at a time; it allocates only when made
 * (zlib's state and one output buffer).
 *
 * A decoder's output is bounded (gz_limit), so that a small body that
 * inflates to gigabytes -- a decompression bomb -- fails as GZ_E_BOMB
 * instead of costing CPU, bandwidth and the client's patience.  gz_new()
 * takes the bound from gunzip_max_ratio and gunzip_max_size, so every
 * decoding path has it, whatever the coding.
 */
#ifndef SUROGAT_GZ_H
#define SUROGAT_GZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct http;
struct sb;
struct txt;
struct ws;
struct gz; /* opaque */

enum gz_kind {
    GZ_ENCODE,      /* identity in, gzip out */
    GZ_DECODE,      /* gzip in, identity out; the trailer's CRC-32 and length are checked */
    GZ_INFLATE,     /* zlib (RFC 1950) in, identity out, its Adler-32 checked: the deflate
                     * transfer coding; one stream, nothing may follow it */
    GZ_DECODE_RAW,  /* raw deflate (RFC 1951) in: segments cut by gz_cut(), one after the
                     * other; never GZ_END by itself, the caller knows where they stop */
    GZ_ENCODE_BR,   /* identity in, brotli (RFC 7932) out */
    GZ_DECODE_BR,   /* brotli in, identity out; nothing may follow the stream */
    GZ_ENCODE_ZSTD, /* identity in, zstd (RFC 8878) out, with the frame checksum */
    GZ_DECODE_ZSTD, /* zstd in, identity out; frames may follow each other; a window
                     * over 8 MiB is refused (RFC 9659) */
};

/* Levels when the one given is out of the codec's range. */
#define GZ_BR_LEVEL_DEFAULT   5
#define GZ_ZSTD_LEVEL_DEFAULT 6

enum gz_flush {
    GZ_FLUSH_NONE,   /* zlib may hold output back for better compression */
    GZ_FLUSH_SYNC,   /* encoder: emit all output so far (readers are waiting for it) */
    GZ_FLUSH_FINISH, /* the input is complete */
};

enum gz_status {
    GZ_OK,          /* input consumed; more is welcome */
    GZ_END,         /* the stream is complete: decoded and checked, or encoded whole */
    GZ_E_DATA,      /* decoder: not gzip, corrupt, bad CRC or length, or junk after the end */
    GZ_E_TRUNCATED, /* decoder: GZ_FLUSH_FINISH before the stream ended */
    GZ_E_OUTPUT,    /* the output callback failed; the filter is unusable */
    GZ_E_BOMB,      /* decoder: the output passed its bound (gz_limit); gz_explain() says how */
};

/*
 * Where a filter's output goes: len > 0 bytes at p, valid only during the
 * call.  0, or nonzero to stop the filter (GZ_E_OUTPUT).
 */
typedef int gz_out_f(void *priv, const char *p, size_t len);

/*
 * level: gzip 1 (fast) .. 9 (small), brotli 0 .. 11, zstd 1 .. 19 (past
 * 19 zstd's window outgrows the 8 MiB of RFC 9659); out of range: the
 * codec's default; ignored for the decoders.  Never NULL.  A decoder is
 * bounded by gunzip_max_size and gunzip_max_ratio as they are now
 * (gz_limit).
 */
struct gz *gz_new(enum gz_kind kind, int level);
void gz_free(struct gz **zp); /* *zp = NULL; NULL is fine */
/*
 * Bound a decoder: at most max_out bytes of output in all, and at most
 * ratio times the input it has consumed so far (0: no such bound).  The
 * output is checked before each hand-out to the callback (every 16 KiB at
 * most), and the piece that would pass a bound is not handed out:
 * gz_feed() returns GZ_E_BOMB instead.  Deflate cannot exceed about
 * 1032:1, so a ratio of 1000 lets through all but runs of one byte.
 */
void gz_limit(struct gz *z, uint64_t max_out, unsigned ratio);
/*
 * After GZ_E_BOMB: the bound passed and the counts, for logs ("over
 * gunzip_max_ratio (1000:1): 329728 bytes from 320").
 */
void gz_explain(const struct gz *z, struct sb *out);
/*
 * Run len bytes of input through the filter, handing every output byte
 * to out.  After an error or GZ_END further input is an error for a
 * decoder (bytes after the stream) and a bug for an encoder.  A decoder
 * accepts several gzip members one after the other (RFC 1952 2.2).
 */
enum gz_status gz_feed(struct gz *z, const void *in, size_t len, enum gz_flush fl, gz_out_f *out,
                       void *priv);
uint64_t gz_bytes_in(const struct gz *z);  /* input consumed so far */
uint64_t gz_bytes_out(const struct gz *z); /* output produced so far */

/*
 * One segment of a gzip stream cut by gz_cut(): its deflate bytes are
 * [zoff, zoff + zlen) of the stream, begin with an empty dictionary and
 * end on a byte boundary without the last-block bit, so they may follow
 * any other such bytes; they decode to len bytes of CRC-32 crc.
 */
struct gz_seg {
    uint64_t zoff, zlen;
    uint64_t len;
    uint32_t crc;
};
/*
 * GZ_ENCODE: end the current segment here (a zlib full flush, all output
 * handed out) and describe it in *seg; the next input begins the next
 * one.  The first segment starts after the 10-byte header, the last one
 * is cut before GZ_FLUSH_FINISH, which adds only the final empty block
 * and the trailer.  A segment may be empty (len 0, zlen 0 or 5).
 */
enum gz_status gz_cut(struct gz *z, gz_out_f *out, void *priv, struct gz_seg *seg);

/*
 * Where the deflate data of a single-member gzip stream lies, in bits
 * from its first byte: it starts at `start` (after the header), its last
 * block begins at `last` (the BFINAL bit) and ends at `stop`, padded to
 * a byte, then the 8-byte trailer.  crc and len are the member's.  Enough
 * for gz_stitch_member() to splice the member into another stream
 * without decoding it.
 */
struct gz_bits {
    uint64_t start, last, stop;
    uint32_t crc;
    uint64_t len;
};
/*
 * Before any input: record gz_bits while decoding (GZ_DECODE, with
 * inflate stopping at each block: no measurable cost) or encoding
 * (GZ_ENCODE: the stream ends with a sync flush and the empty last
 * block, 5 bytes more).
 */
void gz_track(struct gz *z);
/* After GZ_END of a tracked filter: the bits; false if there was more than one member. */
bool gz_bits(const struct gz *z, struct gz_bits *b);

/*
 * Whether an Accept-Encoding field value lets us send gzip (RFC 9110
 * section 12.5.3): gzip or x-gzip, else `*`, with a weight above 0, and
 * not below a weight the client gave identity explicitly.  Names and
 * `q` compare case-insensitively; an element with a malformed weight is
 * ignored.  Pure: no allocation, reads only v[0..len).
 */
bool gz_ae_gzip(const char *v, size_t len);
/* The same over every Accept-Encoding field of a request; none at all: no. */
bool gz_accepts(const struct http *req);
/*
 * Whether the media type of Content-Type value ctype is in list: media
 * types separated by commas or spaces, compared case-insensitively,
 * "type/ *" (without the space) matching a whole type.
 */
bool gz_type_match(const char *list, const struct txt *ctype);
/*
 * Whether a response would be compressed by the cache: a 200 without a
 * content coding (or with identity), no Cache-Control: no-transform, no
 * Content-Range, a type in `types`, and a body of at least min_size bytes
 * (len: its length, UINT64_MAX when not known yet, which counts as big
 * enough).
 */
bool gz_compressible(const struct http *resp, uint64_t len, const char *types, uint64_t min_size);
/* Whether a response's content coding is gzip (or x-gzip), and nothing else. */
bool gz_is_gzip(const struct http *resp);
/* Whether a Content-Encoding value is gzip (or x-gzip), and nothing else. */
bool gz_coding_is_gzip(const struct txt *v);

/* ---- codings and negotiation ---- */

/* The content codings the cache can store, send and make. */
enum gz_coding { GZ_C_IDENTITY, GZ_C_GZIP, GZ_C_BR, GZ_C_ZSTD, GZ_C__N };
#define GZ_SET(c) (1u << (c)) /* a set of codings is a mask of these bits */
/* "identity", "gzip", "br", "zstd": the Content-Encoding token. */
const char *gz_coding_name(enum gz_coding c);
/* The encoder and decoder kinds of a coding other than identity. */
enum gz_kind gz_coding_encoder(enum gz_coding c);
enum gz_kind gz_coding_decoder(enum gz_coding c);
/* The level configured for coding c: gzip_level, brotli_level, zstd_level. */
int gz_coding_level(enum gz_coding c);
/* The coding a Content-Encoding value names (x-gzip is gzip); -1 for any other. */
int gz_coding_of(const struct txt *v);
/*
 * A list of codings such as compress_formats ("br,zstd,gzip", commas or
 * spaces) in out[], best first, at most GZ_C__N; identity is not a
 * format.  -1 with a message in err for an unknown name or a repeat.
 */
int gz_formats(const char *list, enum gz_coding *out, unsigned *n, struct sb *err);

/*
 * A request's Accept-Encoding (RFC 9110 12.5.3), parsed once: weights in
 * thousandths, -1 where not mentioned.  Fill it with gz_ae_init() and
 * gz_ae_add() for each field value, or gz_ae_req().
 */
struct gz_ae {
    bool present;   /* the request had the field at all */
    int q[GZ_C__N]; /* gzip is gzip or x-gzip, the better weight */
    int star;       /* `*`: any coding not named */
};
void gz_ae_init(struct gz_ae *ae);
void gz_ae_add(struct gz_ae *ae, const char *v, size_t len);
void gz_ae_req(struct gz_ae *ae, const struct http *req);
/* The client's weight for c (thousandths, 0: refused); identity is acceptable unless refused. */
int gz_ae_weight(const struct gz_ae *ae, enum gz_coding c);
/*
 * Whether the client takes c as it is: weighed above 0, and not below a
 * weight it gave identity explicitly (it prefers identity then).
 */
bool gz_ae_takes(const struct gz_ae *ae, enum gz_coding c);
/*
 * The coding of set (a GZ_SET mask) the client weighs highest, ties
 * going to the earlier in pref, then to the others, identity last; -1
 * when it takes none of them.
 */
int gz_ae_best(const struct gz_ae *ae, unsigned set, const enum gz_coding *pref, unsigned npref);
/*
 * A response's content coding: GZ_C_IDENTITY without Content-Encoding
 * (or with identity), -1 for a coding we cannot undo or several.
 */
int gz_resp_coding(const struct http *resp);
/*
 * compress_formats as it is now, into out (best first); a list that does
 * not parse names none, as for gz_formats() failing.  Returns the count.
 */
unsigned gz_formats_now(enum gz_coding out[GZ_C__N]);

/*
 * A request's Accept-Encoding reduced to what matters to a cache that does
 * not negotiate itself (http_gzip_support off): the coding among br, zstd
 * and gzip the client prefers (ties in compress_formats' order), or NULL
 * for none -- so a backend's Vary: Accept-Encoding splits an object into
 * at most four variants, not one per browser's spelling of the field.
 */
const char *gz_ae_norm(const struct http *req);
/*
 * The Accept-Encoding value a miss offers its backend when the cache
 * negotiates (http_gzip_support): the codings of compress_formats, best
 * first, and gzip -- all of which the cache can undo for any client.
 * Written to buf (at least 32 bytes, no terminating NUL); returns its length.
 */
#define GZ_AE_OFFER_MAX 32
size_t gz_ae_offer(char *buf, size_t cap);

/*
 * The form of a cached body as the cache records it (struct cobj's form,
 * which the index keeps without reading): its content coding (enum
 * gz_coding), or GZ_FORM_OTHER for a coding surogat can neither undo nor
 * make -- sent to every client as it is -- with GZ_FORM_MADE when surogat
 * made it from the backend's body (encoded it, or decoded it): its ETag is
 * then derived from the origin's (gz_head_coding()), and the body is
 * trusted, decoded without the gunzip_max_ratio bound, which is there for
 * backends' bodies (brotli and zstd reach ratios far above deflate's
 * 1032:1 on repetitive text).
 */
#define GZ_FORM_OTHER  0x0fu
#define GZ_FORM_MADE   0x10u
#define GZ_FORM_CODING 0x0fu /* the mask of the coding */

/*
 * What to send a client: the coding `send`, made from the stored coding
 * `from` -- the same (no work), or, when the client accepts none of the
 * stored codings, a transcode: a decoder from `from`, and an encoder to
 * `send` unless send is identity.
 */
struct gz_pick {
    enum gz_coding send;
    enum gz_coding from;
};
/*
 * Pure.  stored: the codings available (a GZ_SET mask, not empty); pref,
 * npref: the server's order among codings for ties (compress_formats),
 * those not in it coming after, identity last.  The stored coding the
 * client weighs highest wins, unless it weighs identity higher still;
 * failing any, identity decoded from the stored coding quickest to
 * decode (zstd, br, gzip); if identity is
 * refused too, the coding the client weighs highest among pref, made
 * from that; if the client accepts nothing we can make, identity all the
 * same (RFC 9110 12.5.3 allows it).  A request without the field gets
 * identity, as every cache and server sends such clients.
 */
struct gz_pick gz_negotiate(const struct gz_ae *ae, unsigned stored, const enum gz_coding *pref,
                            unsigned npref);
/*
 * The same for a cached object, stored in the coding `stored`, which may
 * keep copies of its body in other codings (`copies`, a GZ_SET mask) and
 * can make identity and the codings of pref on the fly.  Pure.  send: the
 * stored coding if the client takes it (gz_ae_takes()); if it does not,
 * the coding it weighs highest among those of pref it takes (a client of
 * gzip alone gets gzip made from a brotli body, not identity), ties to the
 * earlier in pref, identity if it takes none of them.  What a client gets does not depend on
 * the copies, only what it costs: from is send when the object holds it,
 * else the held coding quickest to turn into identity (an identity copy,
 * zstd, br, gzip), to decode and, unless send is identity, encode again.
 */
struct gz_pick gz_negotiate_held(const struct gz_ae *ae, enum gz_coding stored, unsigned copies,
                                 const enum gz_coding *pref, unsigned npref);

/* ---- stitching gzip (ESI) ---- */

/*
 * A gzip stream assembled from pieces without decoding them: segments
 * cut by gz_cut() (their deflate bytes as they are), whole gzip members
 * with their gz_bits (last-block bit cleared, end padded to a byte), and
 * identity bytes (wrapped in stored blocks, no compression, as Varnish
 * does for an uncompressed fragment).  The header, the last block and the
 * trailer (CRC-32 combined from the pieces', length summed) are the
 * stitcher's.  The caller owns the struct (a workspace or the stack);
 * functions return 0, or -1 when out() failed or a member's bytes do not
 * match its bits, after which the stream is unusable.
 */
struct gz_stitch {
    unsigned magic;
#define GZ_STITCH_MAGIC 0x3a71c9e4
    gz_out_f *out;
    void *priv;
    uint32_t crc;
    uint64_t len;  /* identity bytes so far */
    uint64_t zout; /* bytes handed out */
    bool failed;
    /* The member being spliced. */
    struct gz_bits mb;
    uint64_t moff;
    bool in_member;
};
/* Begin a stream: the 10-byte gzip header goes out. */
int gz_stitch_begin(struct gz_stitch *s, gz_out_f *out, void *priv);
/* Bytes of cut segments, in order, in pieces of any size. */
int gz_stitch_deflate(struct gz_stitch *s, const void *p, size_t n);
/* The segments given whole since: they decode to len bytes of CRC-32 crc. */
void gz_stitch_account(struct gz_stitch *s, uint32_t crc, uint64_t len);
/* Identity bytes, as stored blocks. */
int gz_stitch_identity(struct gz_stitch *s, const void *p, size_t n);
/* A whole gzip member described by b, fed from its first byte in pieces of any size. */
int gz_stitch_member_begin(struct gz_stitch *s, const struct gz_bits *b);
int gz_stitch_member(struct gz_stitch *s, const void *p, size_t n);
int gz_stitch_member_end(struct gz_stitch *s); /* -1 if fewer bytes came than b said */
/* The last block and the trailer. */
int gz_stitch_end(struct gz_stitch *s);

/* What the cache did to a body, for gz_head(). */
enum gz_head {
    GZ_HEAD_VARY,    /* nothing (it was gzip already): only Vary changes */
    GZ_HEAD_ENCODED, /* compressed: Content-Encoding: gzip */
    GZ_HEAD_DECODED, /* gunzipped: no Content-Encoding */
};
/*
 * Fit a response head to its body: Vary gains Accept-Encoding (unless it
 * lists it, or is *), and for a body the cache transformed the content
 * coding changes, Content-Length goes (the caller frames the body) and a
 * strong ETag becomes weak -- the bytes are no longer the origin's, so
 * only a weak comparison may match them (RFC 9110 8.8.1).  Needs room
 * for two more fields in h; -1 when ws runs out.
 */
int gz_head(struct http *h, struct ws *ws, enum gz_head what);
/*
 * The same for any coding: the head of a body sent as `send`
 * (Content-Encoding set, or removed for identity), whose stored head said
 * `from`.  For send == from only Vary changes.  Otherwise Content-Length
 * goes and a strong ETag becomes weak, with "-br" or "-zstd" inside its
 * quotes for those codings, so that each coding has its own validator
 * (gzip's stays as gz_head() makes it, for objects stored before); a weak
 * ETag that ends in from's suffix loses it first, so that W/"x-br" of a
 * stored brotli body becomes W/"x" for identity and W/"x-zstd" for zstd.
 */
int gz_head_coding(struct http *h, struct ws *ws, enum gz_coding from, enum gz_coding send);
/*
 * Whether the ETag value `stored` of a body surogat encoded in c is what
 * gz_head_coding() made of the origin's strong ETag `origin`: the same,
 * weak, with c's suffix.  So a 304 repeating the origin's does not
 * replace it (the stored bytes are still not the origin's).
 */
bool gz_etag_derived(const struct txt *stored, const struct txt *origin, enum gz_coding c);
/*
 * The ETag value *v of a body surogat encoded in c, as the origin knows
 * it, for a conditional request: c's suffix gone (W/"x-br" becomes W/"x",
 * which a weak comparison matches with the origin's "x"), in ws; others
 * unchanged.  -1 when ws runs out.
 */
int gz_etag_origin(struct txt *v, enum gz_coding c, struct ws *ws);

#endif
