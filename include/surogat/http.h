/*
 * http -- an HTTP message head as parsed fields pointing into a buffer.
 *
 * A struct http never owns the bytes it points at: the parser fills it
 * with pointers into the receive buffer, and builders point it at
 * workspace copies.  The header array is the caller's (usually workspace).
 */
#ifndef SUROGAT_HTTP_H
#define SUROGAT_HTTP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

struct txt {
    const char *b;
    size_t len;
};
#define TXT_LIT(s) ((struct txt){ (s), sizeof(s) - 1 })

struct http_hdr {
    struct txt name;
    struct txt val; /* leading and trailing whitespace already trimmed */
};

struct http {
    unsigned magic;
#define HTTP_MAGIC 0x7c1d95e2
    struct txt method; /* request */
    struct txt url;    /* request: request-target as sent */
    struct txt reason; /* response */
    unsigned proto;    /* 10 for HTTP/1.0, 11 for HTTP/1.1, 20 for HTTP/2 */
    unsigned status;   /* response: 100..999 */
    unsigned nhdr;     /* headers in use */
    unsigned maxhdr;   /* room in hdr[] */
    struct http_hdr *hdr;
};

void http_init(struct http *hp, struct http_hdr *hdrs, unsigned maxhdr);
/*
 * Case-insensitive name match against a NUL-terminated name.  Inline: the
 * names asked for are literals, whose length the compiler knows, and a
 * request runs this some hundred times.
 */
static inline bool
http_name_eq(const struct txt *name, const char *want)
{
    size_t l = strlen(want);

    return (name->len == l && strncasecmp(name->b, want, l) == 0);
}
/* First header named `name`, or NULL. */
const struct http_hdr *http_find(const struct http *hp, const char *name);
/* The value of the first header named `name`, or NULL. */
const struct txt *http_value(const struct http *hp, const char *name);
/* Number of headers named `name`. */
unsigned http_count(const struct http *hp, const char *name);
/* Append a header; -1 when hdr[] is full.  The text must outlive hp. */
int http_add(struct http *hp, struct txt name, struct txt val);
/* Remove every header named `name`; returns how many went. */
unsigned http_unset(struct http *hp, const char *name);
/*
 * Whether the comma-separated list in the field values of every `name`
 * header contains `token` (case-insensitive, as Connection: close).
 */
bool http_has_token(const struct http *hp, const char *name, const char *token);
/*
 * Remove the hop-by-hop headers of RFC 9110 section 7.6.1: Connection,
 * Keep-Alive, Proxy-Connection, TE, Trailer, Transfer-Encoding, Upgrade,
 * Proxy-Authenticate, Proxy-Authorization, and every header named in a
 * Connection field.
 */
void http_strip_hop_by_hop(struct http *hp);
/* "HTTP/1.0", "HTTP/1.1" or "HTTP/2.0" for a struct http proto, as logs and policies show it. */
const char *http_proto_name(unsigned proto);
/* Whether `m` is a method RFC 9110 calls idempotent (GET HEAD PUT DELETE OPTIONS TRACE). */
bool http_method_idempotent(const struct txt *m);
/*
 * Whether a Host field value is well-formed (RFC 9110 section 7.2, RFC
 * 3986 section 3.2.2): a reg-name (unreserved, pct-encoded and sub-delims
 * characters in non-empty dot-separated labels, one trailing dot
 * allowed), an IPv4 address or a bracketed IPv6 literal, then an
 * optional ":port" of at most 65535.  Empty is not well-formed.  Where a
 * Host may be empty (HTTP/1.0) the caller says so itself.
 */
bool http_host_valid(const struct txt *host);
/*
 * Conditional requests and ranges (http_cond.c): pure functions of a
 * request and the validators of the representation it would get (etag,
 * lm: its ETag and Last-Modified values, either may be NULL).
 */
/* Whether req is conditional at all (If-None-Match or If-Modified-Since): cheap, no parsing. */
bool http_is_conditional(const struct http *req);
/*
 * Whether req's If-None-Match (weak comparison), else If-Modified-Since,
 * says the client already has that representation: a 304 (RFC 9110
 * section 13.2.2).  GET and HEAD only.
 */
bool http_not_modified(const struct http *req, const struct txt *etag, const struct txt *lm);
enum http_range {
    HTTP_RANGE_NONE,          /* no usable Range (absent, not bytes=, several ranges, junk,
                               * If-Range not matching): the whole body, 200 */
    HTTP_RANGE_OK,            /* bytes [*first, *last] of the body: 206 */
    HTTP_RANGE_UNSATISFIABLE, /* 416 */
};
/*
 * req's single byte Range against a body of len bytes (RFC 9110 section
 * 14.1.2), kept only if If-Range matches the strong etag or exactly the lm
 * date (section 13.1.5).  *first and *last are set only for HTTP_RANGE_OK.
 */
enum http_range http_range(const struct http *req, const struct txt *etag, const struct txt *lm,
                           uint64_t len, uint64_t *first, uint64_t *last);
/*
 * Append hp's fields to sb as field lines, "Name: value\r\n" each, in
 * order: the form of a transport's head blocks (tp.h).  Without the
 * fields a transport owns: framing (Content-Length, Transfer-Encoding) and
 * connection management (Connection, Keep-Alive).
 */
struct sb;
void http_write_fields(struct sb *sb, const struct http *hp);
/* The standard reason phrase for a status, "Unknown" if none. */
const char *http_reason(unsigned status);

#endif
