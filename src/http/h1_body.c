/*
 * Message body framing (RFC 9112 section 6) and the chunked transfer
 * coding (section 7.1).
 *
 * Framing decides where one message ends and the next begins, so every
 * doubt is an error: a message two parsers could delimit differently is
 * never forwarded.
 */
#include "config.h"

#include <string.h>
#include <strings.h>

#include "surogat/defs.h"
#include "surogat/num.h"
#include "surogat/h1.h"
#include "surogat/http.h"

/* Largest body length accepted: leaves headroom in every uint64 sum. */
#define H1_CLEN_MAX (UINT64_C(1) << 62)

/*
 * Every Content-Length field must be 1*DIGIT; identical duplicates are
 * collapsed (RFC 9110 section 8.6), anything else is ambiguous.
 * 0 none, 1 found (*clen), -1 invalid.
 */
static int
content_length(const struct http *hp, uint64_t *clen)
{
    bool found = false;
    uint64_t v, first = 0;

    for (unsigned i = 0; i < hp->nhdr; i++) {
        const struct txt *t = &hp->hdr[i].val;

        if (!http_name_eq(&hp->hdr[i].name, "Content-Length"))
            continue;
        if (t->len == 0 || t->len > 19)
            return (-1);
        v = 0;
        for (size_t j = 0; j < t->len; j++) {
            if (t->b[j] < '0' || t->b[j] > '9')
                return (-1);
            v = v * 10 + (uint64_t)(t->b[j] - '0');
        }
        if (v > H1_CLEN_MAX || (found && v != first))
            return (-1);
        first = v;
        found = true;
    }
    if (found)
        *clen = first;
    return (found ? 1 : 0);
}

enum te_kind {
    TE_NONE,
    TE_CHUNKED,      /* chunked, once, last */
    TE_BAD_CHUNKED,  /* chunked twice, or not last, or an empty field */
    TE_OTHER,        /* a coding other than chunked, chunked (if any) last */
};

/* The elements of every Transfer-Encoding field, in order, as one list. */
struct te_list {
    bool any;          /* a Transfer-Encoding field is present */
    bool last_chunked; /* the final element is chunked */
    bool unknown;      /* an element this side does not know how to undo */
    unsigned nelem, nchunked;
    unsigned ncoding; /* elements other than identity, chunked included; may pass the cap */
    enum h1_coding coding[H1_CODINGS_MAX + 1]; /* the first H1_CODINGS_MAX + 1 of them */
};

static bool
elem_is(const char *s, size_t len, const char *name)
{
    return (len == strlen(name) && strncasecmp(s, name, len) == 0);
}

static void
te_walk(const struct http *hp, struct te_list *tl)
{
    enum h1_coding c;

    memset(tl, 0, sizeof *tl);
    for (unsigned i = 0; i < hp->nhdr; i++) {
        const char *p, *e, *s, *t;

        if (!http_name_eq(&hp->hdr[i].name, "Transfer-Encoding"))
            continue;
        tl->any = true;
        p = hp->hdr[i].val.b;
        e = p + hp->hdr[i].val.len;
        while (p < e) {
            while (p < e && (*p == ' ' || *p == '\t' || *p == ','))
                p++;
            if (p == e)
                break;
            s = p;
            while (p < e && *p != ',')
                p++;
            for (t = p; t > s && (t[-1] == ' ' || t[-1] == '\t'); t--)
                continue;
            tl->nelem++;
            tl->last_chunked = elem_is(s, (size_t)(t - s), "chunked");
            if (tl->last_chunked) {
                tl->nchunked++;
                c = H1_CODING_CHUNKED;
            } else if (elem_is(s, (size_t)(t - s), "gzip") ||
                       elem_is(s, (size_t)(t - s), "x-gzip")) {
                c = H1_CODING_GZIP;
            } else if (elem_is(s, (size_t)(t - s), "deflate")) {
                c = H1_CODING_DEFLATE;
            } else if (elem_is(s, (size_t)(t - s), "identity")) {
                continue;
            } else {
                /* compress (LZW), codings with parameters, names nobody registered. */
                tl->unknown = true;
                continue;
            }
            if (tl->ncoding < ARRAY_LEN(tl->coding))
                tl->coding[tl->ncoding] = c;
            tl->ncoding++;
        }
    }
}

/* A request's view of the list: anything but one final chunked is not for us. */
static enum te_kind
transfer_encoding(const struct http *hp)
{
    struct te_list tl;

    te_walk(hp, &tl);
    if (!tl.any)
        return (TE_NONE);
    if (tl.nelem == 0 || tl.nchunked > 1 || (tl.nchunked == 1 && !tl.last_chunked))
        return (TE_BAD_CHUNKED);
    if (tl.nelem > tl.nchunked)
        return (TE_OTHER);
    return (TE_CHUNKED);
}

enum h1_body
h1_req_body(const struct http *req, uint64_t *clen)
{
    enum te_kind te;
    int cl;

    OBJ_CHECK(req, HTTP_MAGIC);
    AN(clen);
    te = transfer_encoding(req);
    cl = content_length(req, clen);
    if (te != TE_NONE) {
        /* RFC 9112 6.1: TE in HTTP/1.0 means faulty framing; 6.3: CL and TE is an attack. */
        if (req->proto < 11 || cl != 0)
            return (H1_BODY_E_AMBIGUOUS);
        switch (te) {
        case TE_CHUNKED:
            return (H1_BODY_CHUNKED);
        case TE_BAD_CHUNKED:
            return (H1_BODY_E_AMBIGUOUS);
        case TE_OTHER:
            return (H1_BODY_E_CODING);
        case TE_NONE:
            break;
        }
        SRG_WRONG("transfer-encoding kind");
    }
    if (cl < 0)
        return (H1_BODY_E_AMBIGUOUS);
    if (cl == 0 || *clen == 0)
        return (H1_BODY_NONE);
    return (H1_BODY_LENGTH);
}

static enum h1_body
frame_err(struct h1_framing *fr, enum h1_body b, enum h1_frame_err why)
{
    fr->err = why;
    return (b);
}

enum h1_body
h1_resp_body(const struct http *resp, bool head, struct h1_framing *fr)
{
    struct te_list tl;
    uint64_t clen = 0;
    int cl;

    OBJ_CHECK(resp, HTTP_MAGIC);
    AN(fr);
    memset(fr, 0, sizeof *fr);
    cl = content_length(resp, &clen);
    if (head || resp->status < 200 || resp->status == 204 || resp->status == 304) {
        fr->unread = (cl > 0 && clen > 0) || cl < 0 || http_find(resp, "Transfer-Encoding");
        return (H1_BODY_NONE);
    }
    te_walk(resp, &tl);
    if (tl.any) {
        if (resp->proto < 11)
            return (frame_err(fr, H1_BODY_E_AMBIGUOUS, H1_FE_TE_HTTP10));
        if (cl != 0)
            return (frame_err(fr, H1_BODY_E_AMBIGUOUS, H1_FE_CL_TE));
        if (tl.nelem == 0 || tl.nchunked > 1)
            return (frame_err(fr, H1_BODY_E_AMBIGUOUS, H1_FE_BAD_TE));
        if (tl.unknown)
            return (frame_err(fr, H1_BODY_E_CODING, H1_FE_CODING));
        /* A final chunked frames the body; whatever comes before it is a coding to undo. */
        if (tl.last_chunked)
            tl.ncoding--;
        if (tl.ncoding > H1_CODINGS_MAX)
            return (frame_err(fr, H1_BODY_E_CODING, H1_FE_CODINGS));
        fr->ncoding = tl.ncoding;
        memcpy(fr->coding, tl.coding, tl.ncoding * sizeof *tl.coding);
        return (tl.last_chunked ? H1_BODY_CHUNKED : H1_BODY_EOF);
    }
    if (cl < 0)
        return (frame_err(fr, H1_BODY_E_AMBIGUOUS, H1_FE_BAD_CL));
    if (cl > 0 && clen > 0) {
        fr->clen = clen;
        return (H1_BODY_LENGTH);
    }
    return (cl > 0 ? H1_BODY_NONE : H1_BODY_EOF);
}

/* ---- chunked decoder ---- */

enum chunk_state {
    CS_SIZE_FIRST, /* expecting the first hex digit of a chunk-size */
    CS_SIZE,       /* in hex digits */
    CS_EXT_WS,     /* BWS after the size or a value: expect ';' or CR */
    CS_EXT_NAME0,  /* after ';': BWS, then the first tchar of a name */
    CS_EXT_NAME,   /* in a chunk-ext-name */
    CS_EXT_EQ,     /* BWS after a name: '=', ';' or CR */
    CS_EXT_VAL0,   /* after '=': BWS, then a token or a quoted-string */
    CS_EXT_TOKEN,  /* in a token value */
    CS_EXT_QS,     /* in a quoted-string */
    CS_EXT_QP,     /* after a backslash in a quoted-string */
    CS_SIZE_LF,    /* after the CR of the size line */
    CS_DATA,       /* in chunk data: remain bytes left */
    CS_DATA_CR,    /* expecting CR after data */
    CS_DATA_LF,    /* expecting LF after data */
    CS_TRL_START,  /* at the start of a trailer line (or the final CRLF) */
    CS_TRL_LINE,   /* inside a trailer line */
    CS_TRL_LF,     /* after the CR of a trailer line */
    CS_END_LF,     /* after the CR of the final empty line */
    CS_DONE,
    CS_ERROR,
};

/* Leading zeros are free; beyond this many digits a size line is abuse. */
#define CHUNK_DIGITS_MAX 32
/* 15 significant hex digits is 2^60: more than any sane chunk, and no overflow. */
#define CHUNK_SIGNIFICANT_MAX 15

void
h1_chunk_init(struct h1_chunk *c, size_t ext_max)
{
    AN(c);
    memset(c, 0, sizeof *c);
    c->state = CS_SIZE_FIRST;
    c->ext_max = ext_max;
}

/* Bytes allowed in trailer lines and quoted strings: HTAB, SP, VCHAR, obs-text. */
static inline bool
line_byte_ok(unsigned char ch)
{
    return (ch == '\t' || ch >= 0x20) && ch != 0x7f;
}

static inline bool
is_tchar(unsigned char ch)
{
    return ((ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
            (ch != 0 && strchr("!#$%&'*+-.^_`|~", ch) != NULL));
}

static inline bool
is_bws(unsigned char ch)
{
    return (ch == ' ' || ch == '\t');
}

/*
 * One byte of a chunk extension (RFC 9112 section 7.1.1):
 *   *( BWS ";" BWS name [ BWS "=" BWS ( token / quoted-string ) ] ) BWS CRLF
 * Returns false on a syntax error.
 */
static bool
chunk_ext_byte(struct h1_chunk *c, unsigned char ch)
{
    switch (c->state) {
    case CS_EXT_WS:
        if (ch == ';')
            c->state = CS_EXT_NAME0;
        else if (ch == '\r')
            c->state = CS_SIZE_LF;
        else if (!is_bws(ch))
            return (false);
        return (true);
    case CS_EXT_NAME0:
        if (is_tchar(ch))
            c->state = CS_EXT_NAME;
        else if (!is_bws(ch))
            return (false);
        return (true);
    case CS_EXT_NAME:
    case CS_EXT_EQ:
        if (c->state == CS_EXT_NAME && is_tchar(ch))
            return (true);
        if (is_bws(ch))
            c->state = CS_EXT_EQ;
        else if (ch == '=')
            c->state = CS_EXT_VAL0;
        else if (ch == ';')
            c->state = CS_EXT_NAME0;
        else if (ch == '\r')
            c->state = CS_SIZE_LF;
        else
            return (false);
        return (true);
    case CS_EXT_VAL0:
        if (ch == '"')
            c->state = CS_EXT_QS;
        else if (is_tchar(ch))
            c->state = CS_EXT_TOKEN;
        else if (!is_bws(ch))
            return (false);
        return (true);
    case CS_EXT_TOKEN:
        if (is_tchar(ch))
            return (true);
        c->state = CS_EXT_WS;
        return (chunk_ext_byte(c, ch));
    case CS_EXT_QS:
        if (ch == '"')
            c->state = CS_EXT_WS;
        else if (ch == '\\')
            c->state = CS_EXT_QP;
        else if (!line_byte_ok(ch))
            return (false);
        return (true);
    case CS_EXT_QP:
        if (!line_byte_ok(ch))
            return (false);
        c->state = CS_EXT_QS;
        return (true);
    default:
        SRG_WRONG("not in a chunk extension");
    }
}

static enum h1_chunk_status
chunk_fail(struct h1_chunk *c, size_t at, size_t *consumed)
{
    c->state = CS_ERROR;
    *consumed = at;
    return (H1_CHUNK_ERROR);
}

enum h1_chunk_status
h1_chunk_decode(struct h1_chunk *c, const char *in, size_t len, size_t *consumed,
                const char **data, size_t *datalen)
{
    size_t i = 0, n;
    int h;

    AN(c);
    AN(consumed);
    AN(data);
    AN(datalen);
    *data = NULL;
    *datalen = 0;
    while (i < len) {
        unsigned char ch = (unsigned char)in[i];

        switch (c->state) {
        case CS_SIZE_FIRST:
        case CS_SIZE:
            h = num_hexdigit((char)ch);
            if (h >= 0) {
                if (++c->ndigits > CHUNK_DIGITS_MAX ||
                    (c->remain >> (4 * (CHUNK_SIGNIFICANT_MAX - 1))) != 0)
                    return (chunk_fail(c, i, consumed));
                c->remain = (c->remain << 4) | (uint64_t)h;
                c->state = CS_SIZE;
            } else if (c->state == CS_SIZE_FIRST) {
                return (chunk_fail(c, i, consumed));
            } else if (ch == ';' || is_bws(ch)) {
                c->state = ch == ';' ? CS_EXT_NAME0 : CS_EXT_WS;
                c->extlen = 1;
            } else if (ch == '\r') {
                c->state = CS_SIZE_LF;
            } else {
                return (chunk_fail(c, i, consumed));
            }
            i++;
            break;
        case CS_EXT_WS:
        case CS_EXT_NAME0:
        case CS_EXT_NAME:
        case CS_EXT_EQ:
        case CS_EXT_VAL0:
        case CS_EXT_TOKEN:
        case CS_EXT_QS:
        case CS_EXT_QP:
            if (++c->extlen > c->ext_max || !chunk_ext_byte(c, ch))
                return (chunk_fail(c, i, consumed));
            i++;
            break;
        case CS_SIZE_LF:
            if (ch != '\n')
                return (chunk_fail(c, i, consumed));
            i++;
            c->ndigits = 0;
            c->extlen = 0;
            c->state = c->remain == 0 ? CS_TRL_START : CS_DATA;
            break;
        case CS_DATA:
            n = len - i;
            if (n > c->remain)
                n = (size_t)c->remain;
            c->remain -= n;
            if (c->remain == 0)
                c->state = CS_DATA_CR;
            *data = in + i;
            *datalen = n;
            *consumed = i + n;
            return (H1_CHUNK_DATA);
        case CS_DATA_CR:
            if (ch != '\r')
                return (chunk_fail(c, i, consumed));
            c->state = CS_DATA_LF;
            i++;
            break;
        case CS_DATA_LF:
            if (ch != '\n')
                return (chunk_fail(c, i, consumed));
            c->state = CS_SIZE_FIRST;
            i++;
            break;
        case CS_TRL_START:
            if (ch == '\r') {
                c->state = CS_END_LF;
            } else if (ch == ' ' || ch == '\t' || !line_byte_ok(ch)) {
                return (chunk_fail(c, i, consumed)); /* obs-fold in trailers, or a control byte */
            } else {
                c->state = CS_TRL_LINE;
                if (++c->extlen > c->ext_max)
                    return (chunk_fail(c, i, consumed));
            }
            i++;
            break;
        case CS_TRL_LINE:
            if (ch == '\r')
                c->state = CS_TRL_LF;
            else if (!line_byte_ok(ch) || ++c->extlen > c->ext_max)
                return (chunk_fail(c, i, consumed));
            i++;
            break;
        case CS_TRL_LF:
            if (ch != '\n')
                return (chunk_fail(c, i, consumed));
            c->state = CS_TRL_START;
            i++;
            break;
        case CS_END_LF:
            if (ch != '\n')
                return (chunk_fail(c, i, consumed));
            c->state = CS_DONE;
            *consumed = i + 1;
            return (H1_CHUNK_DONE);
        case CS_DONE:
            *consumed = 0;
            return (H1_CHUNK_DONE);
        case CS_ERROR:
            return (chunk_fail(c, i, consumed));
        }
    }
    *consumed = i;
    if (c->state == CS_DONE)
        return (H1_CHUNK_DONE);
    if (c->state == CS_ERROR)
        return (H1_CHUNK_ERROR);
    return (H1_CHUNK_MORE);
}

size_t
h1_chunk_header(char *buf, uint64_t n)
{
    static const char hex[] = "0123456789abcdef";
    char tmp[17];
    size_t k = 0, len = 0;

    do {
        tmp[k++] = hex[n & 0xf];
        n >>= 4;
    } while (n != 0);
    while (k > 0)
        buf[len++] = tmp[--k];
    buf[len++] = '\r';
    buf[len++] = '\n';
    return (len);
}
