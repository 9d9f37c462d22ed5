/*
 * esi -- Edge Side Includes: ESI 1.0's core as Varnish implements it,
 * <esi:include src=... alt=... onerror="continue"/>, <esi:remove>,
 * <esi:comment/> and <!--esi ... -->.
 *
 * A page is parsed once, when it is stored, into a program: literal
 * byte ranges of the stored body (offsets, never copies) and include
 * directives, in page order.  Each delivery walks the program
 * (esi_iter), sending the literals and fetching the includes.  The
 * parser is fed the body in pieces of any size, even one byte at a time,
 * and never holds more of it than one tag: a page may be large.
 *
 * What is ESI follows Varnish, so that pages written for it behave the
 * same: names are case-sensitive (XML is: <ESI:include> is not ESI), a
 * body whose first byte that is not white space is not '<' is not parsed
 * at all (not XML: JSON, images), ESI inside HTML comments and CDATA is
 * not processed, a tag not ours is literal to its '>', and malformed ESI
 * is counted as an error or warning and logged with its offset: a broken
 * ESI tag is dropped, an <esi:include> inside <esi:remove> too, an
 * unclosed <esi:remove> removes to the end.  Beyond Varnish: an ESI tag
 * still open at the end of the body, or longer than esi_conf.max_tag, is
 * left as literal bytes (nothing was hidden by it), and a page past
 * max_items ESI elements is literal from there on -- bounds on memory.
 *
 * For a page stored gzip, esi_gz (esi_gz.c) runs the parser beside
 * a segment-cutting gzip encoder, so that each literal is its own piece
 * of the stored gzip stream and a delivery can stitch them (gz_stitch)
 * without decoding.
 *
 * A parser has one owner thread; programs are immutable byte strings,
 * read by any thread.
 */
#ifndef SUROGAT_ESI_H
#define SUROGAT_ESI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "surogat/gz.h"
#include "surogat/http.h"

struct sb;

/* Called for each ESI error (error) or warning in a page: its offset and what. */
typedef void esi_log_f(void *priv, uint64_t off, bool error, const char *msg);

struct esi_conf {
    size_t max_tag;     /* longest ESI tag, '<' to '>'; 0: ESI_MAX_TAG */
    unsigned max_items; /* ESI elements in a page; 0: ESI_MAX_ITEMS */
    bool no_xml_check;  /* parse whatever the first byte (Varnish's esi_disable_xml_check) */
    bool remove_bom;    /* drop a leading UTF-8 BOM, then check (esi_remove_bom) */
    bool https_as_http; /* fetch https:// includes as http:// (esi_ignore_https); else
                         * they are ignored with a warning */
    const char *url;    /* the page's URL: relative src= are resolved against it; NULL: "/" */
    esi_log_f *log;     /* NULL: errors are only counted */
    void *log_priv;
};
#define ESI_MAX_TAG   8192  /* an <esi:include> with a long URL and alt fits */
#define ESI_MAX_ITEMS 10000 /* a program then stays below a few hundred KiB */

/*
 * When a gzip store cuts runs: each time the body's classification
 * changes, at offset end, the bytes since the previous cut being literal
 * (sent) or not; the callee ends its gzip segment there and describes
 * it in *seg.  0, or -1 to stop (the store failed).
 */
typedef int esi_cut_f(void *priv, uint64_t end, bool literal, struct gz_seg *seg);

struct esi_parser; /* opaque */
/* cut: NULL for a page stored as it came; else each literal records its gzip segment. */
struct esi_parser *esi_parser_new(const struct esi_conf *c, esi_cut_f *cut, void *cut_priv);
void esi_parser_free(struct esi_parser **pp); /* *pp = NULL; NULL is fine */
/* The next len bytes of the body.  0, or -1 when a cut failed (the parser is then unusable). */
int esi_parse(struct esi_parser *p, const void *buf, size_t len);
/*
 * Bytes from the start of the body whose fate is known: all bytes
 * before are literal or not, for good.  Those after (at most max_tag and
 * a few) wait for the rest of a tag.
 */
uint64_t esi_decided(const struct esi_parser *p);
struct esi_stats {
    uint64_t len;      /* body bytes parsed */
    unsigned includes; /* include directives in the program */
    unsigned literals; /* literal ranges */
    unsigned errors;
    unsigned warnings;
    bool found;  /* any ESI at all: without it the page needs no program (Varnish stores none) */
    bool notxml; /* the XML check failed: nothing was parsed */
};
/*
 * The body is complete: the program, a byte string to keep with the
 * object (its head's neighbour), in *prog (malloc'd, *plen bytes).  0, or
 * -1 when a cut failed.
 */
int esi_finish(struct esi_parser *p, unsigned char **prog, size_t *plen);
void esi_parser_stats(const struct esi_parser *p, struct esi_stats *st);

/*
 * Whether a backend response asks for ESI processing itself: a
 * Surrogate-Control field (W3C Edge Architecture 1.0) with a content=
 * directive listing ESI/1.0, untargeted or targeted ";surogat".  The
 * policy's beresp.do_esi is the other way.  Pure.
 */
bool esi_wanted(const struct http *resp);

/* ---- programs ---- */

enum esi_kind {
    ESI_LITERAL, /* send bytes [off, off + len) of the page */
    ESI_INCLUDE, /* fetch (or find in cache) and send another object */
};
struct esi_item {
    enum esi_kind kind;
    /* ESI_LITERAL */
    uint64_t off, len;   /* in the identity body */
    uint64_t zoff, zlen; /* gzip page: the segment's deflate bytes in the stored stream */
    uint32_t crc;        /* gzip page: CRC-32 of the len bytes */
    /* ESI_INCLUDE: pointers into the program, not NUL-terminated */
    struct txt host; /* from src="http://host/...": the Host to ask; empty: the page's */
    struct txt src;  /* an absolute path ("/..."), entities decoded, relative ones resolved */
    struct txt alt;  /* the same for alt=, tried when src fails; empty: none */
    bool cont;       /* onerror="continue": a failure leaves the fragment out, no abort */
};

struct esi_info {
    bool gzip;     /* literals carry gzip segments: the body is stored gzip */
    uint64_t len;  /* identity length of the page */
    unsigned nlit; /* literal items */
    unsigned ninc; /* include items */
};
enum esi_next {
    ESI_ITEM,      /* *item filled */
    ESI_DONE,      /* no more items */
    ESI_E_CORRUPT, /* the program is damaged: a delivery must stop */
};
struct esi_iter {
    unsigned magic;
#define ESI_ITER_MAGIC 0x4be5a1c7
    const unsigned char *p, *e;
    bool gzip;
    uint64_t len;       /* of the page */
    uint64_t off, zoff; /* ends of the previous literal */
};
/*
 * Check a program whole (its magic, CRC-32 and items) and describe it;
 * -1 if it is not a sound program.  Reads prog[0..len) only.
 */
int esi_prog_info(const void *prog, size_t len, struct esi_info *info);
/* Start walking prog (checked by esi_prog_info() first: -1 if unsound). */
int esi_iter_init(struct esi_iter *it, const void *prog, size_t len);
/* Both at once, with one check: a delivery's walk begins here. */
int esi_iter_info(struct esi_iter *it, const void *prog, size_t len, struct esi_info *info);
enum esi_next esi_iter_next(struct esi_iter *it, struct esi_item *item);

/* ---- ESI pages stored gzip ---- */

/*
 * The fetch side of an ESI page stored gzip: identity bytes in (from the
 * backend, or from a decoder of the backend's gzip), the gzip body to
 * store out, and at the end the program whose literals are segments of
 * it.  Holds back at most one tag of input while the parser decides.
 */
struct esi_gz; /* opaque */
struct esi_gz *esi_gz_new(const struct esi_conf *c, int level);
void esi_gz_free(struct esi_gz **gp); /* *gp = NULL; NULL is fine */
/* Identity bytes in; compressed bytes to out.  GZ_OK, or GZ_E_OUTPUT when out() failed. */
enum gz_status esi_gz_feed(struct esi_gz *g, const void *p, size_t len, gz_out_f *out, void *priv);
/* End of the body: the rest of the stream to out, the program in *prog (malloc'd). */
enum gz_status esi_gz_finish(struct esi_gz *g, gz_out_f *out, void *priv, unsigned char **prog,
                             size_t *plen);
void esi_gz_stats(const struct esi_gz *g, struct esi_stats *st);
/*
 * After esi_gz_finish(): where the stored stream's deflate data lies, so
 * that the page, included in another, can be spliced whole (gz_bits).
 */
bool esi_gz_bits(const struct esi_gz *g, struct gz_bits *b);
/* Bytes held back now (for tests: never more than max_tag and a few). */
size_t esi_gz_held(const struct esi_gz *g);

#endif
