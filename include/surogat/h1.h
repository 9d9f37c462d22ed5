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
    H1_BODY_E_AMBIGUOUS, /* 400/502: CL with TE, differing or invalid CL, chunked not last */
    H1_BODY_E_CODING,    /* a transfer coding other than chunked: 501 for a request; a
                          * response is refused (502) rather than forwarded with a coding
                          * we cannot label once Transfer-Encoding is stripped */
};

enum h1_body h1_req_body(const struct http *req, uint64_t *clen);
/* `head`: the request was HEAD, so no body follows whatever the head says. */
enum h1_body h1_resp_body(const struct http *resp, bool head, uint64_t *clen);

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
