/*
 * h1 -- HTTP/1.x wire format: head parsing, body framing, chunked coding
 * and head serialisation, strictly by RFC 9112.
 *
 * The parser never copies and never allocates: the struct http it fills
 * points into the caller's buffer.  When more bytes arrive the caller
 * parses again from the start (heads are small; this keeps the parser
 * stateless and simple to fuzz).
 *
 * Request smuggling is closed by construction: any head whose framing two
 * implementations could read differently is refused, never "repaired".
 */
#ifndef SUROGAT_H1_H
#define SUROGAT_H1_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct http;
struct sb;

enum h1_status {
    H1_DONE,           /* complete head; *used bytes consumed */
    H1_MORE,           /* incomplete: call again with the longer buffer */
    H1_E_SYNTAX,       /* 400 (requests) / 502 (responses) */
    H1_E_URI_TOO_LONG, /* 414: the request line exceeds max_line */
    H1_E_TOO_BIG,      /* 431: the head exceeds max_head, a line max_line, or max_hdr fields */
    H1_E_VERSION,      /* 505: well-formed HTTP-version other than 1.0/1.1 */
};

struct h1_limits {
    size_t max_head; /* whole head, request line and CRLFCRLF included */
    size_t max_line; /* one request line or header line */
    unsigned max_hdr;
};

/*
 * Parse a request head.  Lines may end in CRLF or a bare LF (RFC 9112
 * section 2.2); a bare CR, NUL or other control bytes, obs-fold, whitespace
 * before a colon, or an empty field name are syntax errors.
 * out->hdr must have room for lim->max_hdr fields.
 */
enum h1_status h1_parse_request(const char *buf, size_t len, const struct h1_limits *lim,
                                struct http *out, size_t *used);
/* Same for a backend response head (status-line). */
enum h1_status h1_parse_response(const char *buf, size_t len, const struct h1_limits *lim,
                                 struct http *out, size_t *used);

/* How a message body is delimited (RFC 9112 section 6.3). */
enum h1_body {
    H1_BODY_NONE,
    H1_BODY_LENGTH,  /* *clen bytes */
    H1_BODY_CHUNKED,
    H1_BODY_EOF,     /* responses only: until the connection closes */
    H1_BODY_E_AMBIGUOUS, /* 400/502: CL with TE, differing or invalid CL, chunked twice (or
                          * not last in a request) */
    H1_BODY_E_CODING,    /* a transfer coding other than chunked: 501 for a request; for a
                          * response, one surogat cannot undo (see h1_resp_body) */
};

enum h1_body h1_req_body(const struct http *req, uint64_t *clen);

/*
 * A transfer coding left on a response body once its framing is undone
 * (RFC 9112 section 7): "gzip, chunked" is chunked-framed with gzip
 * under it, "chunked, gzip" is read until close with gzip over chunked.
 */
enum h1_coding {
    H1_CODING_CHUNKED, /* under another coding: decoded like a chunked body */
    H1_CODING_GZIP,    /* gzip or x-gzip (RFC 9110 section 8.4.1.3) */
    H1_CODING_DEFLATE, /* deflate: the zlib format, RFC 1950 (RFC 9110 section 8.4.1.2) */
};
/*
 * Codings one response may stack under its framing.  Real servers apply
 * one; the bound keeps a decoding chain small and fixed.
 */
#define H1_CODINGS_MAX 4

/* Why a response's framing was refused, for the log. */
enum h1_frame_err {
    H1_FE_NONE,
    H1_FE_CL_TE,     /* Content-Length together with Transfer-Encoding */
    H1_FE_BAD_CL,    /* Content-Length not 1*DIGIT, too large, or two different values */
    H1_FE_TE_HTTP10, /* Transfer-Encoding in an HTTP/1.0 response (RFC 9112 section 6.1) */
    H1_FE_BAD_TE,    /* an empty Transfer-Encoding, or chunked applied twice */
    H1_FE_CODING,    /* a coding other than chunked, gzip, x-gzip, deflate and identity */
    H1_FE_CODINGS,   /* more than H1_CODINGS_MAX codings */
};

/* A response's framing, filled by h1_resp_body(). */
struct h1_framing {
    uint64_t clen;    /* H1_BODY_LENGTH: the body's length; else 0 */
    unsigned ncoding; /* codings left once the framing is undone (identity is none) */
    enum h1_coding coding[H1_CODINGS_MAX]; /* in the order applied: undo the last first */
    /*
     * The response carries no body (HEAD, 1xx, 204, 304) although its head
     * announces one (a Content-Length other than 0, or Transfer-Encoding):
     * a backend that gets this wrong may still write that body, so the
     * connection must not carry another request.
     */
    bool unread;
    enum h1_frame_err err; /* with H1_BODY_E_*: why */
};

/*
 * `head`: the request was HEAD, so no body follows whatever the head says.
 * A response is framed as RFC 9112 section 6.3 says: Transfer-Encoding
 * with chunked last is chunked, without chunked last it is read until
 * close, either way with the codings under it in fr->coding, for the
 * caller to undo (identity is taken as no coding, as RFC 2616 defined
 * it).  A coding surogat cannot undo is H1_BODY_E_CODING: the bytes could
 * not be labelled once Transfer-Encoding is gone.  Content-Length with
 * Transfer-Encoding stays an error, not the override the RFC allows: it
 * is what a response-splitting attempt looks like.
 */
enum h1_body h1_resp_body(const struct http *resp, bool head, struct h1_framing *fr);

/*
 * Incremental chunked-body decoder.  Feed it the bytes as they arrive;
 * each call consumes some and reports one event.
 */
struct h1_chunk {
    unsigned state;      /* private */
    unsigned ndigits;    /* private */
    size_t extlen;       /* private: bytes of extension or trailer so far */
    size_t ext_max;      /* limit on one chunk extension / the trailer section */
    uint64_t remain;     /* bytes of chunk data still expected */
};

enum h1_chunk_status {
    H1_CHUNK_DATA,  /* *data, *datalen: body bytes (inside the input) */
    H1_CHUNK_MORE,  /* everything consumed; feed more */
    H1_CHUNK_DONE,  /* last chunk and trailers read; *consumed ends the message */
    H1_CHUNK_ERROR, /* malformed: invalid size, bad extension syntax, missing CRLF,
                     * oversized extension; *consumed is where it went wrong */
};

void h1_chunk_init(struct h1_chunk *c, size_t ext_max);
enum h1_chunk_status h1_chunk_decode(struct h1_chunk *c, const char *in, size_t len,
                                     size_t *consumed, const char **data, size_t *datalen);
/* Chunk-size line for a chunk of n bytes ("1f4\r\n"); buf holds H1_CHUNK_HDR_MAX. */
#define H1_CHUNK_HDR_MAX 20
size_t h1_chunk_header(char *buf, uint64_t n);

/*
 * Serialise a head: request line or status line, each header, CRLF.
 * For requests, hp->method and hp->url; for responses, proto, status, reason.
 */
void h1_write_request(struct sb *sb, const struct http *hp);
void h1_write_response(struct sb *sb, const struct http *hp);

#endif
