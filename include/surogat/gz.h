/*
 * gz -- gzip for the cache, in the manner of Varnish's http_gzip_support:
 * the cache asks backends for gzip, stores a compressible body
 * compressed once, and gunzips on the fly for the rare client that does
 * not take gzip.  This module holds the streaming zlib filters and the
 * rules: what a client's Accept-Encoding allows, and which responses
 * are worth compressing.  It knows nothing of requests or objects.
 *
 * A filter belongs to one thread at a time; it allocates only when made
 * (zlib's state and one output buffer).
 *
 * A decoder's output is bounded (gz_limit), so that a small body that
 * inflates to gigabytes -- a decompression bomb -- fails as GZ_E_BOMB
 * instead of costing CPU, bandwidth and the client's patience.  gz_new()
 * takes the bound from gunzip_max_ratio and gunzip_max_size, so every
 * gunzip path has it.
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
    GZ_ENCODE,  /* identity in, gzip out */
    GZ_DECODE,  /* gzip in, identity out; the trailer's CRC-32 and length are checked */
    GZ_INFLATE, /* zlib (RFC 1950) in, identity out, its Adler-32 checked: the deflate
                 * transfer coding; one stream, nothing may follow it */
};

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
 * level: 1 (fast) .. 9 (small), ignored for the decoders.  Never NULL.  A
 * decoder is bounded by gunzip_max_size and gunzip_max_ratio as they are
 * now (gz_limit).
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

#endif
