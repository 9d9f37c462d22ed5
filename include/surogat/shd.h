/*
 * shd -- the stored response head's compact encoding.  A cached object
 * keeps its response head serialised (status line, field lines, the empty
 * line), but most of those bytes repeat in every object: "HTTP/1.1 200
 * OK", the field names, ": " and CRLF.  The encoding keeps the status as
 * two bytes and a common field name as one, each value as its length and
 * its bytes; any line of another shape is kept as it is.  Decoding gives
 * the text back byte for byte, so every reader of a stored head sees what
 * it was given: encode(text) decodes to text for any bytes at all.  The
 * Date and Expires fields' dates are kept as numbers, printed back.
 *
 * The encoding is also what a persistent store keeps on disk: the name
 * table below (shd.c) is part of that format and only ever grows at its
 * end; the index's attribute version (hsh_priv.h) names the format.
 *
 * Pure: no I/O, no allocation, no locks.
 */
#ifndef SUROGAT_SHD_H
#define SUROGAT_SHD_H

#include <stdbool.h>
#include <stddef.h>

#include "surogat/http.h"

/*
 * The first byte of every encoded head.  No HTTP/1 status line starts
 * with it, so a head stored before the encoding is told apart.
 */
#define SHD_MAGIC 0xa5

/* The most an encoding of len text bytes takes (shd_encode() never writes more). */
size_t shd_bound(size_t len);
/* Encode text[0..len) into out (shd_bound(len) bytes); returns the bytes written. */
size_t shd_encode(const char *text, size_t len, unsigned char *out);
/*
 * Whether enc[0..len) is a sound encoding, and then the length of its
 * text (*tlen).  Every byte is checked: safe on any input.
 */
bool shd_check(const unsigned char *enc, size_t len, size_t *tlen);
/*
 * The length of the text of an encoding that shd_check() accepted (or that
 * shd_encode() made): read from its first bytes, without a walk.
 */
size_t shd_text_len(const unsigned char *enc, size_t len);
/*
 * Write the text of a sound encoding into out, which has room for
 * shd_text_len() bytes; returns that length.
 */
size_t shd_decode(const unsigned char *enc, size_t len, char *out);

/*
 * A stored response head split for a deliverer that writes the status
 * line itself: the status line's parts, and the field lines still
 * encoded, decoded by shd_decode_fields() straight into the buffer the
 * head goes out from (no text in between).  Points into the encoding.
 */
struct shd_head {
    unsigned minor;              /* HTTP/1.<minor> */
    unsigned status;             /* 100-999 */
    struct txt reason;           /* as stored, possibly empty */
    const unsigned char *fields; /* the ops after the status line */
    const unsigned char *end;    /* the encoding's end */
    size_t room;                 /* the length of the text after the status line */
};
/*
 * Split a sound encoding whose text starts with a status line "HTTP/1.M
 * SSS reason" CRLF, as every stored response head does; false when its
 * first line is of another shape (then read the text).  Reads the first
 * op only: no walk.
 */
bool shd_split(const unsigned char *enc, size_t len, struct shd_head *h);
/*
 * The text after the status line of a split encoding, written into out
 * (h->room bytes): the field lines, without the empty line when that is
 * what the text ends with (the caller adds fields of its own, then the
 * empty line).  Returns the length written: h->room, less 2 for the
 * empty line left out.
 */
size_t shd_decode_fields(const struct shd_head *h, char *out);

/*
 * The field lines of a sound encoding, in order: "name: value", and any
 * other line with a colon past its first byte, as a parser reads it
 * ("name:value").  The first line (the status line), the empty line and
 * lines without a colon are skipped.
 */
struct shd_iter {
    const unsigned char *p;
    const unsigned char *e;
    bool past_status;
    char date[29]; /* a date kept as a number, printed: valid until the next shd_next() */
};
void shd_iter_init(struct shd_iter *it, const unsigned char *enc, size_t len);
/*
 * The next field: its name and value (no CRLF), pointing into the
 * encoding, the name table or it->date.  False at the end.
 */
bool shd_next(struct shd_iter *it, struct txt *name, struct txt *val);

#endif
