/*
 * h1 body framing (RFC 9112 section 6) and the chunked decoder (section
 * 7.1).  Framing is where request smuggling lives, so every head two
 * implementations could read differently must come out as an error.
 * The decoder is fed every possible split of its input and must give
 * the same body each time.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "unit.h"
#include "surogat/defs.h"
#include "surogat/http.h"
#include "surogat/h1.h"

#define MAXHDR 32
static struct http_hdr hdrs[MAXHDR];
static struct http hp;
static const struct h1_limits lim = { 8192, 4096, MAXHDR };

static const char *
body_name(enum h1_body b)
{
    switch (b) {
    case H1_BODY_NONE:
        return "NONE";
    case H1_BODY_LENGTH:
        return "LENGTH";
    case H1_BODY_CHUNKED:
        return "CHUNKED";
    case H1_BODY_EOF:
        return "EOF";
    case H1_BODY_E_AMBIGUOUS:
        return "E_AMBIGUOUS";
    case H1_BODY_E_CODING:
        return "E_CODING";
    }
    return "?";
}

/* Parse "<request line>\r\n" + fields + "\r\n" and frame it. */
static enum h1_body
req_body(const char *head, uint64_t *clen)
{
    size_t used;

    http_init(&hp, hdrs, MAXHDR);
    ck_assert_msg(h1_parse_request(head, strlen(head), &lim, &hp, &used) == H1_DONE,
                  "head does not parse: %s", head);
    *clen = 0xdeadbeef;
    return h1_req_body(&hp, clen);
}

static struct h1_framing fr;

static enum h1_body
resp_body(const char *head, bool is_head, uint64_t *clen)
{
    size_t used;
    enum h1_body b;

    http_init(&hp, hdrs, MAXHDR);
    ck_assert_msg(h1_parse_response(head, strlen(head), &lim, &hp, &used) == H1_DONE,
                  "head does not parse: %s", head);
    memset(&fr, 0xa5, sizeof fr); /* every field must be set */
    b = h1_resp_body(&hp, is_head, &fr);
    *clen = fr.clen;
    return b;
}

struct frame {
    const char *fields; /* between the start line and the empty line */
    enum h1_body want;
    uint64_t clen; /* for LENGTH */
};

static void
check_req(const char *proto, const struct frame *f)
{
    char head[1024];
    uint64_t clen;
    enum h1_body got;

    snprintf(head, sizeof head, "POST / %s\r\nHost: a\r\n%s\r\n", proto, f->fields);
    got = req_body(head, &clen);
    ck_assert_msg(got == f->want, "%s request with [%s]: got %s, want %s", proto, f->fields,
                  body_name(got), body_name(f->want));
    if (got == H1_BODY_LENGTH)
        ck_assert_msg(clen == f->clen, "[%s]: clen %ju, want %ju", f->fields, (uintmax_t)clen,
                      (uintmax_t)f->clen);
}

#define CL(v) "Content-Length: " v "\r\n"
#define TE(v) "Transfer-Encoding: " v "\r\n"
#define AMB(f)                    \
    {                             \
        f, H1_BODY_E_AMBIGUOUS, 0 \
    }

static const struct frame req_frames[] = {
    { "", H1_BODY_NONE, 0 },
    { "X-Other: 5\r\n", H1_BODY_NONE, 0 },
    { CL("10"), H1_BODY_LENGTH, 10 },
    { CL("1"), H1_BODY_LENGTH, 1 },
    { CL("007"), H1_BODY_LENGTH, 7 },
    { CL("   5  "), H1_BODY_LENGTH, 5 },
    { "content-length: 12\r\n", H1_BODY_LENGTH, 12 },
    { CL("4294967296"), H1_BODY_LENGTH, 4294967296ULL },
    { TE("chunked"), H1_BODY_CHUNKED, 0 },
    { TE("Chunked"), H1_BODY_CHUNKED, 0 },
    { TE("CHUNKED"), H1_BODY_CHUNKED, 0 },
    { TE(" chunked "), H1_BODY_CHUNKED, 0 },
    { "transfer-encoding: chunked\r\n", H1_BODY_CHUNKED, 0 },
    AMB(CL("10") TE("chunked")),
    AMB(TE("chunked") CL("10")),
    AMB(CL("0") TE("chunked")),
    AMB(CL("1") CL("2")),
    AMB(CL("1,2")),
    AMB(CL("1,1")),
    AMB(CL("1, 1")),
    AMB(CL("+5")),
    AMB(CL("-1")),
    AMB(CL("5 5")),
    AMB(CL("5\t5")),
    AMB(CL("")),
    AMB(CL("0x10")),
    AMB(CL("5a")),
    AMB(CL("a5")),
    AMB(CL("1.5")),
    AMB(CL("1e3")),
    AMB(CL("\"5\"")),
    AMB(CL("18446744073709551616")),
    AMB(CL("99999999999999999999999999")),
    AMB(CL("184467440737095516150")),
    AMB(TE("chunked, gzip")),
    AMB(TE("chunked") TE("gzip")),
    AMB(TE("chunked, chunked")),
    AMB(TE("chunked") TE("chunked")),
    AMB(TE("chunked,chunked")),
    { TE("gzip, chunked"), H1_BODY_E_CODING, 0 },
    { TE("gzip") TE("chunked"), H1_BODY_E_CODING, 0 },
    { TE("deflate, chunked"), H1_BODY_E_CODING, 0 },
    { TE("foo, chunked"), H1_BODY_E_CODING, 0 },
    { TE("foo"), H1_BODY_E_CODING, 0 },
};

START_TEST(request_framing)
{
    check_req("HTTP/1.1", &req_frames[_i]);
}
END_TEST

/*
 * A request with Content-Length: 0 has no body; LENGTH 0 and NONE
 * mean the same to a caller.
 */
START_TEST(request_cl_zero)
{
    uint64_t clen;
    enum h1_body b = req_body("POST / HTTP/1.1\r\nContent-Length: 0\r\n\r\n", &clen);

    ck_assert_msg(b == H1_BODY_NONE || (b == H1_BODY_LENGTH && clen == 0), "%s", body_name(b));
}
END_TEST

/*
 * A CL near UINT64_MAX is valid syntax; refusing lengths no body could
 * have is defensible, but if accepted it must be exact.
 */
START_TEST(huge_cl)
{
    static const char *const v[] = { "18446744073709551615", "4611686018427387904",
                                     "4611686018427387905", "9223372036854775808" };
    char head[256];
    uint64_t clen, want;
    enum h1_body b;

    for (size_t i = 0; i < ARRAY_LEN(v); i++) {
        want = strtoull(v[i], NULL, 10);
        snprintf(head, sizeof head, "POST / HTTP/1.1\r\nContent-Length: %s\r\n\r\n", v[i]);
        b = req_body(head, &clen);
        ck_assert_msg(b == H1_BODY_E_AMBIGUOUS || (b == H1_BODY_LENGTH && clen == want), "%s: %s",
                      v[i], body_name(b));
        snprintf(head, sizeof head, "HTTP/1.1 200 OK\r\nContent-Length: %s\r\n\r\n", v[i]);
        b = resp_body(head, false, &clen);
        ck_assert_msg(b == H1_BODY_E_AMBIGUOUS || (b == H1_BODY_LENGTH && clen == want), "%s: %s",
                      v[i], body_name(b));
    }
}
END_TEST

/* RFC 9110 section 8.6 lets a recipient collapse identical values; refusing is safer. */
START_TEST(request_cl_twice_same)
{
    uint64_t clen;
    enum h1_body b =
        req_body("POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", &clen);

    ck_assert_msg(b == H1_BODY_E_AMBIGUOUS || (b == H1_BODY_LENGTH && clen == 5), "%s",
                  body_name(b));
}
END_TEST

/*
 * A coding that is neither chunked nor ends in chunked is both "unknown"
 * (501) and "chunked not last" (400); either refuses the request.
 */
START_TEST(request_unknown_coding_alone)
{
    static const char *const v[] = { TE("gzip"), TE("identity"), TE("x-custom"), TE("") };
    char head[256];
    uint64_t clen;

    for (size_t i = 0; i < ARRAY_LEN(v); i++) {
        snprintf(head, sizeof head, "POST / HTTP/1.1\r\n%s\r\n", v[i]);
        enum h1_body b = req_body(head, &clen);
        ck_assert_msg(b == H1_BODY_E_CODING || b == H1_BODY_E_AMBIGUOUS, "[%s]: %s", v[i],
                      body_name(b));
    }
}
END_TEST

/* RFC 9112 section 6.1: Transfer-Encoding in HTTP/1.0 means faulty framing. */
START_TEST(request_http10_te)
{
    static const struct frame f[] = {
        AMB(TE("chunked")),
        AMB(TE("chunked") CL("5")),
        { CL("5"), H1_BODY_LENGTH, 5 },
        { "", H1_BODY_NONE, 0 },
    };

    for (size_t i = 0; i < ARRAY_LEN(f); i++)
        check_req("HTTP/1.0", &f[i]);
}
END_TEST

/* The method does not matter for request framing: a GET may carry a body. */
START_TEST(request_get_with_body)
{
    uint64_t clen;

    ck_assert_int_eq(req_body("GET / HTTP/1.1\r\nContent-Length: 3\r\n\r\n", &clen),
                     H1_BODY_LENGTH);
    ck_assert_uint_eq(clen, 3);
    ck_assert_int_eq(req_body("GET / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", &clen),
                     H1_BODY_CHUNKED);
}
END_TEST

#define GZ   H1_CODING_GZIP
#define DF   H1_CODING_DEFLATE
#define CH   H1_CODING_CHUNKED
#define H200 "HTTP/1.1 200 OK\r\n"

struct rframe {
    const char *head;
    bool is_head;
    enum h1_body want;
    uint64_t clen;
    bool unread;           /* NONE: the head announced a body it does not carry */
    enum h1_frame_err err; /* E_*: why */
    unsigned ncoding;      /* CHUNKED, EOF: the codings left under the framing */
    enum h1_coding coding[H1_CODINGS_MAX];
};

static const struct rframe resp_frames[] = {
    /* No body, whatever the head says; one it announces all the same may still come. */
    { H200 CL("10") "\r\n", true, H1_BODY_NONE, 0, .unread = true },
    { H200 CL("0") "\r\n", true, H1_BODY_NONE, 0, .unread = false },
    { H200 CL("x") "\r\n", true, H1_BODY_NONE, 0, .unread = true },
    { H200 TE("chunked") "\r\n", true, H1_BODY_NONE, 0, .unread = true },
    { H200 "\r\n", true, H1_BODY_NONE, 0, .unread = false },
    { "HTTP/1.1 100 Continue\r\n\r\n", false, H1_BODY_NONE, 0, .unread = false },
    { "HTTP/1.1 101 Switching Protocols\r\n\r\n", false, H1_BODY_NONE, 0, .unread = false },
    { "HTTP/1.1 103 Early Hints\r\nContent-Length: 5\r\n\r\n", false, H1_BODY_NONE, 0,
      .unread = true },
    { "HTTP/1.1 204 No Content\r\nContent-Length: 5\r\n\r\n", false, H1_BODY_NONE, 0,
      .unread = true },
    { "HTTP/1.1 204 No Content\r\n\r\n", false, H1_BODY_NONE, 0, .unread = false },
    { "HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n", false, H1_BODY_NONE, 0,
      .unread = true },
    { "HTTP/1.1 304 Not Modified\r\nContent-Length: 0\r\n\r\n", false, H1_BODY_NONE, 0,
      .unread = false },
    { "HTTP/1.1 304 Not Modified\r\nTransfer-Encoding: chunked\r\n\r\n", false, H1_BODY_NONE, 0,
      .unread = true },
    { H200 CL("10") "\r\n", false, H1_BODY_LENGTH, 10, .unread = false },
    { "HTTP/1.0 200 OK\r\nContent-Length: 10\r\n\r\n", false, H1_BODY_LENGTH, 10, .unread = false },
    { "HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\n", false, H1_BODY_LENGTH, 9,
      .unread = false },
    { H200 TE("chunked") "\r\n", false, H1_BODY_CHUNKED, 0, .unread = false },
    { H200 "\r\n", false, H1_BODY_EOF, 0, .unread = false },
    { "HTTP/1.0 200 OK\r\n\r\n", false, H1_BODY_EOF, 0, .unread = false },
    /*
     * RFC 9112 section 6.3: chunked last frames the body, with the
     * codings before it left on the data; without chunked last the body
     * is read until close, with every coding left on it.
     */
    { H200 TE("gzip, chunked") "\r\n", false, H1_BODY_CHUNKED, 0, .ncoding = 1, .coding = { GZ } },
    { H200 TE("gzip") TE("chunked") "\r\n", false, H1_BODY_CHUNKED, 0, .ncoding = 1,
      .coding = { GZ } },
    { H200 TE("X-Gzip , Chunked") "\r\n", false, H1_BODY_CHUNKED, 0, .ncoding = 1,
      .coding = { GZ } },
    { H200 TE("deflate, chunked") "\r\n", false, H1_BODY_CHUNKED, 0, .ncoding = 1,
      .coding = { DF } },
    { H200 TE("identity, chunked") "\r\n", false, H1_BODY_CHUNKED, 0, .unread = false },
    { H200 TE("gzip") "\r\n", false, H1_BODY_EOF, 0, .ncoding = 1, .coding = { GZ } },
    { H200 TE("identity") "\r\n", false, H1_BODY_EOF, 0, .unread = false },
    { H200 TE("chunked, gzip") "\r\n", false, H1_BODY_EOF, 0, .ncoding = 2, .coding = { CH, GZ } },
    { H200 TE("chunked") TE("deflate") "\r\n", false, H1_BODY_EOF, 0, .ncoding = 2,
      .coding = { CH, DF } },
    { H200 TE("deflate, gzip, identity, chunked") "\r\n", false, H1_BODY_CHUNKED, 0, .ncoding = 2,
      .coding = { DF, GZ } },
    { H200 TE("gzip, gzip, gzip, gzip, chunked") "\r\n", false, H1_BODY_CHUNKED, 0, .ncoding = 4,
      .coding = { GZ, GZ, GZ, GZ } },
    { H200 TE("gzip, gzip, gzip, gzip, gzip, chunked") "\r\n", false, H1_BODY_E_CODING, 0,
      .err = H1_FE_CODINGS },
    { H200 TE("gzip, gzip, gzip, gzip, gzip") "\r\n", false, H1_BODY_E_CODING, 0,
      .err = H1_FE_CODINGS },
    /* Codings nobody can undo here: the bytes could not be labelled once TE is gone. */
    { H200 TE("foo, chunked") "\r\n", false, H1_BODY_E_CODING, 0, .err = H1_FE_CODING },
    { H200 TE("foo") "\r\n", false, H1_BODY_E_CODING, 0, .err = H1_FE_CODING },
    { H200 TE("compress, chunked") "\r\n", false, H1_BODY_E_CODING, 0, .err = H1_FE_CODING },
    { H200 TE("gzip;level=1, chunked") "\r\n", false, H1_BODY_E_CODING, 0, .err = H1_FE_CODING },
    { H200 TE("chunked;x=1") "\r\n", false, H1_BODY_E_CODING, 0, .err = H1_FE_CODING },
    { H200 CL("10") TE("chunked") "\r\n", false, H1_BODY_E_AMBIGUOUS, 0, .err = H1_FE_CL_TE },
    { H200 TE("chunked") CL("10") "\r\n", false, H1_BODY_E_AMBIGUOUS, 0, .err = H1_FE_CL_TE },
    { H200 TE("gzip") CL("10") "\r\n", false, H1_BODY_E_AMBIGUOUS, 0, .err = H1_FE_CL_TE },
    { H200 CL("1") CL("2") "\r\n", false, H1_BODY_E_AMBIGUOUS, 0, .err = H1_FE_BAD_CL },
    { H200 CL("1,2") "\r\n", false, H1_BODY_E_AMBIGUOUS, 0, .err = H1_FE_BAD_CL },
    { H200 CL("-1") "\r\n", false, H1_BODY_E_AMBIGUOUS, 0, .err = H1_FE_BAD_CL },
    { H200 CL("+1") "\r\n", false, H1_BODY_E_AMBIGUOUS, 0, .err = H1_FE_BAD_CL },
    { H200 CL("1 1") "\r\n", false, H1_BODY_E_AMBIGUOUS, 0, .err = H1_FE_BAD_CL },
    { H200 CL("") "\r\n", false, H1_BODY_E_AMBIGUOUS, 0, .err = H1_FE_BAD_CL },
    { H200 CL("18446744073709551616") "\r\n", false, H1_BODY_E_AMBIGUOUS, 0, .err = H1_FE_BAD_CL },
    { H200 TE("chunked, chunked") "\r\n", false, H1_BODY_E_AMBIGUOUS, 0, .err = H1_FE_BAD_TE },
    { H200 TE("chunked") TE("chunked") "\r\n", false, H1_BODY_E_AMBIGUOUS, 0, .err = H1_FE_BAD_TE },
    { H200 TE("chunked, gzip, chunked") "\r\n", false, H1_BODY_E_AMBIGUOUS, 0,
      .err = H1_FE_BAD_TE },
    { H200 TE("") "\r\n", false, H1_BODY_E_AMBIGUOUS, 0, .err = H1_FE_BAD_TE },
    { H200 TE(" , ") "\r\n", false, H1_BODY_E_AMBIGUOUS, 0, .err = H1_FE_BAD_TE },
    /* RFC 9112 section 6.1: Transfer-Encoding in an HTTP/1.0 message is faulty framing. */
    { "HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", false, H1_BODY_E_AMBIGUOUS, 0,
      .err = H1_FE_TE_HTTP10 },
};

START_TEST(response_framing)
{
    const struct rframe *f = &resp_frames[_i];
    uint64_t clen;
    enum h1_body got = resp_body(f->head, f->is_head, &clen);

    ck_assert_msg(got == f->want, "%s response [%s]: got %s, want %s", f->is_head ? "HEAD" : "GET",
                  f->head, body_name(got), body_name(f->want));
    ck_assert_uint_eq(clen, got == H1_BODY_LENGTH ? f->clen : 0);
    ck_assert_msg(fr.unread == f->unread, "[%s]: unread %d", f->head, fr.unread);
    ck_assert_msg(fr.err == (got >= H1_BODY_E_AMBIGUOUS ? f->err : H1_FE_NONE), "[%s]: err %d",
                  f->head, fr.err);
    if (got >= H1_BODY_E_AMBIGUOUS)
        return;
    ck_assert_msg(fr.ncoding == f->ncoding, "[%s]: %u codings", f->head, fr.ncoding);
    for (unsigned i = 0; i < f->ncoding; i++)
        ck_assert_msg(fr.coding[i] == f->coding[i], "[%s]: coding %u is %d", f->head, i,
                      fr.coding[i]);
}
END_TEST

START_TEST(response_cl_zero)
{
    uint64_t clen;
    enum h1_body b = resp_body("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", false, &clen);

    ck_assert_msg(b == H1_BODY_NONE || (b == H1_BODY_LENGTH && clen == 0), "%s", body_name(b));
    ck_assert(!fr.unread);
}
END_TEST

/*
 * Chunked decoder.  decode() feeds `in` through a fresh decoder, handing
 * over at most `step` new bytes each time the decoder asks for more, each
 * time from an exact-size heap copy so that reads past `len` are caught.
 */
struct dec {
    enum h1_chunk_status st; /* DONE, ERROR, or MORE if the input ran out */
    size_t used;             /* bytes consumed in all */
    char body[8192];
    size_t blen;
};

static void
decode(const char *in, size_t len, size_t ext_max, size_t step, struct dec *d)
{
    struct h1_chunk c;
    size_t off = 0, lim_ = SRG_MIN(step, len);
    unsigned spins = 0;

    memset(d, 0, sizeof *d);
    h1_chunk_init(&c, ext_max);
    for (;;) {
        size_t avail = lim_ - off, consumed = (size_t)-1, datalen = (size_t)-1;
        const char *data = NULL;
        char *copy = malloc(avail ? avail : 1);
        enum h1_chunk_status st;

        ck_assert_ptr_nonnull(copy);
        memcpy(copy, in + off, avail);
        st = h1_chunk_decode(&c, copy, avail, &consumed, &data, &datalen);
        /* *consumed means nothing after ERROR */
        if (st != H1_CHUNK_ERROR)
            ck_assert_uint_le(consumed, avail);
        switch (st) {
        case H1_CHUNK_DATA:
            ck_assert_uint_gt(datalen, 0);
            ck_assert_ptr_nonnull(data);
            ck_assert(data >= copy && data + datalen <= copy + consumed);
            ck_assert_uint_le(d->blen + datalen, sizeof d->body);
            memcpy(d->body + d->blen, data, datalen);
            d->blen += datalen;
            off += consumed;
            if (off == lim_)
                lim_ = SRG_MIN(lim_ + step, len);
            break;
        case H1_CHUNK_MORE:
            ck_assert_msg(consumed == avail, "MORE consumed %zu of %zu", consumed, avail);
            off += consumed;
            if (lim_ == len) {
                free(copy);
                d->st = H1_CHUNK_MORE;
                d->used = off;
                return;
            }
            lim_ = SRG_MIN(lim_ + step, len);
            break;
        case H1_CHUNK_DONE:
            off += consumed;
            free(copy);
            d->st = st;
            d->used = off;
            return;
        case H1_CHUNK_ERROR:
            free(copy);
            d->st = st;
            d->used = off; /* up to the last good event */
            return;
        default:
            ck_abort_msg("bad status %d", (int)st);
        }
        free(copy);
        ck_assert_msg(++spins < 100000, "decoder makes no progress");
    }
}

/* s with control bytes escaped, for messages */
static const char *
esc(const char *s, size_t len)
{
    static char buf[512];
    size_t n = 0;

    for (size_t i = 0; i < len && n < sizeof buf - 8; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\r')
            n += (size_t)sprintf(buf + n, "\\r");
        else if (c == '\n')
            n += (size_t)sprintf(buf + n, "\\n");
        else if (c < 0x20 || c >= 0x7f)
            n += (size_t)sprintf(buf + n, "\\x%02x", c);
        else
            buf[n++] = (char)c;
    }
    buf[n] = '\0';
    return buf;
}

static struct dec *
new_dec(void)
{
    struct dec *d = malloc(sizeof *d);

    if (d == NULL)
        abort();
    return d;
}

static const char *
cst_name(enum h1_chunk_status st)
{
    switch (st) {
    case H1_CHUNK_DATA:
        return "DATA";
    case H1_CHUNK_MORE:
        return "MORE";
    case H1_CHUNK_DONE:
        return "DONE";
    case H1_CHUNK_ERROR:
        return "ERROR";
    }
    return "?";
}

struct chunked {
    const char *in;
    size_t len;
    const char *body; /* NULL: must be an error */
    size_t blen;
};

#define OK(s, b)                           \
    {                                      \
        s, sizeof(s) - 1, b, sizeof(b) - 1 \
    }
#define BAD(s)                    \
    {                             \
        s, sizeof(s) - 1, NULL, 0 \
    }

static const struct chunked chunked_cases[] = {
    OK("5\r\nhello\r\n0\r\n\r\n", "hello"),
    OK("0\r\n\r\n", ""),
    OK("1\r\na\r\n2\r\nbc\r\n3\r\ndef\r\n0\r\n\r\n", "abcdef"),
    OK("a\r\n0123456789\r\n0\r\n\r\n", "0123456789"),
    OK("A\r\n0123456789\r\n0\r\n\r\n", "0123456789"),
    OK("1f\r\n0123456789012345678901234567890\r\n0\r\n\r\n", "0123456789012345678901234567890"),
    OK("1F\r\n0123456789012345678901234567890\r\n0\r\n\r\n", "0123456789012345678901234567890"),
    OK("0005\r\nhello\r\n000\r\n\r\n", "hello"),
    OK("000000000000005\r\nhello\r\n0\r\n\r\n", "hello"),
    OK("5;name=value\r\nhello\r\n0\r\n\r\n", "hello"),
    OK("5;name\r\nhello\r\n0;last\r\n\r\n", "hello"),
    OK("5;a=b;c=d\r\nhello\r\n0\r\n\r\n", "hello"),
    OK("5;a=\"q;u\\\"o\\\\te\"\r\nhello\r\n0\r\n\r\n", "hello"),
    OK("5;a=\"\"\r\nhello\r\n0\r\n\r\n", "hello"),
    OK("5 ;a=b\r\nhello\r\n0\r\n\r\n", "hello"),
    OK("5\t; a = b\r\nhello\r\n0\r\n\r\n", "hello"),
    OK("5\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n", "hello"),
    OK("5\r\nhello\r\n0\r\nA: 1\r\nB: two words\r\n\r\n", "hello"),
    OK("3\r\n\r\n\r\r\n0\r\n\r\n", "\r\n\r"),
    OK("2\r\n\0\xff\r\n0\r\n\r\n", "\0\xff"),
    BAD("0x10\r\n0123456789abcdef\r\n0\r\n\r\n"),
    BAD("-1\r\nx\r\n0\r\n\r\n"),
    BAD("+1\r\nx\r\n0\r\n\r\n"),
    BAD(" 5\r\nhello\r\n0\r\n\r\n"),
    BAD("\r\nhello\r\n0\r\n\r\n"),
    BAD("g\r\nhello\r\n0\r\n\r\n"),
    BAD("5g\r\nhello\r\n0\r\n\r\n"),
    BAD("5\r\nhelloX\r\n0\r\n\r\n"),
    BAD("5\r\nhell\r\n0\r\n\r\n"),
    BAD("5\r\nhello\n0\r\n\r\n"),
    BAD("5\r\nhello\r0\r\n\r\n"),
    BAD("5\r\nhello0\r\n\r\n"),
    BAD("5\nhello\r\n0\r\n\r\n"),
    BAD("5\rhello\r\n0\r\n\r\n"),
    BAD("0\n\n"),
    BAD("0\r\n\n"),
    BAD("0\r\n\r\r\n"),
    BAD("0\r\nX: 1\n\r\n"),
    BAD("0\r\nX: 1\r\r\n\r\n"),
    BAD("11111111111111111\r\nx\r\n0\r\n\r\n"),
    BAD("FFFFFFFFFFFFFFFFF\r\nx\r\n0\r\n\r\n"),
    BAD("10000000000000000\r\nx\r\n0\r\n\r\n"),
    BAD("5;\r\nhello\r\n0\r\n\r\n"),
    BAD("5;=x\r\nhello\r\n0\r\n\r\n"),
    BAD("5;a=\"unterminated\r\nhello\r\n0\r\n\r\n"),
    BAD("5;a\0b\r\nhello\r\n0\r\n\r\n"),
    BAD("5;a=b\rc\r\nhello\r\n0\r\n\r\n"),
    BAD("5 x\r\nhello\r\n0\r\n\r\n"),
    BAD("5 5\r\nhello\r\n0\r\n\r\n"),
};

START_TEST(chunked_table)
{
    const struct chunked *t = &chunked_cases[_i];
    struct dec *d = new_dec();

    ck_assert_ptr_nonnull(d);
    decode(t->in, t->len, 1024, t->len, d);
    if (t->body == NULL) {
        ck_assert_msg(d->st == H1_CHUNK_ERROR, "\"%s\": got %s, want ERROR", esc(t->in, t->len),
                      cst_name(d->st));
    } else {
        ck_assert_msg(d->st == H1_CHUNK_DONE, "\"%s\": got %s, want DONE", esc(t->in, t->len),
                      cst_name(d->st));
        ck_assert_uint_eq(d->used, t->len);
        ck_assert_uint_eq(d->blen, t->blen);
        ck_assert(memcmp(d->body, t->body, t->blen) == 0);
    }
    free(d);
}
END_TEST

/* Every split point, and byte at a time: the same outcome as one shot. */
START_TEST(chunked_splits)
{
    const struct chunked *t = &chunked_cases[_i];
    struct dec *one = new_dec(), *d = new_dec();

    ck_assert_ptr_nonnull(one);
    ck_assert_ptr_nonnull(d);
    decode(t->in, t->len, 1024, t->len, one);
    for (size_t step = 1; step < t->len; step++) {
        decode(t->in, t->len, 1024, step, d);
        ck_assert_msg(d->st == one->st, "case %d step %zu: %s vs %s one-shot", _i, step,
                      cst_name(d->st), cst_name(one->st));
        if (d->st == H1_CHUNK_DONE) {
            ck_assert_uint_eq(d->used, one->used);
            ck_assert_uint_eq(d->blen, one->blen);
            ck_assert(memcmp(d->body, one->body, d->blen) == 0);
        }
    }
    free(one);
    free(d);
}
END_TEST

/* Two feeds split at every point k, the second from k on. */
START_TEST(chunked_every_split_point)
{
    static const char in[] = "4;x=\"y\"\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n"
                             "0\r\nExpires: never\r\n\r\nGET / HTTP/1.1\r\n";
    const size_t len = sizeof in - 1, end = len - 16;
    struct dec *d = new_dec();

    ck_assert_ptr_nonnull(d);
    for (size_t k = 0; k <= len; k++) {
        struct h1_chunk c;
        size_t off = 0, lim_ = k;
        unsigned spins = 0;

        h1_chunk_init(&c, 64);
        d->blen = 0;
        for (;;) {
            size_t consumed, datalen;
            const char *data;
            enum h1_chunk_status st;

            st = h1_chunk_decode(&c, in + off, lim_ - off, &consumed, &data, &datalen);
            if (st != H1_CHUNK_ERROR)
                ck_assert_uint_le(consumed, lim_ - off);
            if (st == H1_CHUNK_DATA) {
                ck_assert(data >= in + off && data + datalen <= in + off + consumed);
                memcpy(d->body + d->blen, data, datalen);
                d->blen += datalen;
                off += consumed;
            } else if (st == H1_CHUNK_MORE) {
                ck_assert_uint_eq(consumed, lim_ - off);
                off += consumed;
                ck_assert_msg(lim_ < len, "split %zu: ran out", k);
                lim_ = len;
            } else {
                ck_assert_msg(st == H1_CHUNK_DONE, "split %zu: %s", k, cst_name(st));
                off += consumed;
                break;
            }
            ck_assert(++spins < 1000);
        }
        ck_assert_msg(off == end, "split %zu: used %zu, want %zu", k, off, end);
        ck_assert_uint_eq(d->blen, 23);
        ck_assert(memcmp(d->body, "Wikipedia in\r\n\r\nchunks.", 23) == 0);
    }
    free(d);
}
END_TEST

/* DONE leaves the next pipelined request alone. */
START_TEST(chunked_done_consumed)
{
    static const char in[] = "5\r\nhello\r\n0\r\n\r\nGET / HTTP/1.1\r\n\r\n";
    struct dec *d = new_dec();

    decode(in, sizeof in - 1, 64, sizeof in - 1, d);
    ck_assert_int_eq(d->st, H1_CHUNK_DONE);
    ck_assert_uint_eq(d->used, 15);
    decode(in, sizeof in - 1, 64, 1, d);
    ck_assert_int_eq(d->st, H1_CHUNK_DONE);
    ck_assert_uint_eq(d->used, 15);
    free(d);
}
END_TEST

/* Not done until the empty line after the last chunk. */
START_TEST(chunked_incomplete)
{
    static const char *const v[] = {
        "",
        "5",
        "5\r",
        "5\r\n",
        "5\r\nhel",
        "5\r\nhello",
        "5\r\nhello\r",
        "5\r\nhello\r\n",
        "5\r\nhello\r\n0",
        "5\r\nhello\r\n0\r\n",
        "5\r\nhello\r\n0\r\n\r",
        "5\r\nhello\r\n0\r\nX: 1\r\n",
        "5;a=\"b",
        "5;a=b",
    };
    struct dec *d = new_dec();

    for (size_t i = 0; i < ARRAY_LEN(v); i++) {
        decode(v[i], strlen(v[i]), 64, strlen(v[i]), d);
        ck_assert_msg(d->st == H1_CHUNK_MORE, "\"%s\": %s", v[i], cst_name(d->st));
        ck_assert_uint_eq(d->used, strlen(v[i]));
    }
    free(d);
}
END_TEST

static char *
ext_chunk(size_t extlen)
{
    char *s = malloc(extlen + 64);
    size_t n = 0;

    if (s == NULL)
        abort();
    n += (size_t)sprintf(s, "5;x=");
    memset(s + n, 'e', extlen);
    n += extlen;
    strcpy(s + n, "\r\nhello\r\n0\r\n\r\n");
    return s;
}

START_TEST(chunk_ext_max)
{
    struct dec *d = new_dec();
    char *s;

    s = ext_chunk(8);
    decode(s, strlen(s), 32, strlen(s), d);
    ck_assert_int_eq(d->st, H1_CHUNK_DONE);
    free(s);
    s = ext_chunk(100);
    decode(s, strlen(s), 32, strlen(s), d);
    ck_assert_int_eq(d->st, H1_CHUNK_ERROR);
    /* Also when the extension has not ended yet. */
    decode(s, 60, 32, 60, d);
    ck_assert_int_eq(d->st, H1_CHUNK_ERROR);
    decode(s, strlen(s), 32, 1, d);
    ck_assert_int_eq(d->st, H1_CHUNK_ERROR);
    free(s);
    /* ext_max 0: no extension at all */
    s = ext_chunk(1);
    decode(s, strlen(s), 0, strlen(s), d);
    ck_assert_int_eq(d->st, H1_CHUNK_ERROR);
    free(s);
    decode("5\r\nhello\r\n0\r\n\r\n", 15, 0, 15, d);
    ck_assert_int_eq(d->st, H1_CHUNK_DONE);
    /* The limit is per extension: many short ones are fine. */
    {
        char buf[2048];
        size_t n = 0;

        for (int i = 0; i < 50; i++)
            n += (size_t)sprintf(buf + n, "1;k=vvvvvvvv\r\n%c\r\n", 'a' + i % 26);
        strcpy(buf + n, "0\r\n\r\n");
        decode(buf, strlen(buf), 32, strlen(buf), d);
        ck_assert_int_eq(d->st, H1_CHUNK_DONE);
        ck_assert_uint_eq(d->blen, 50);
    }
    free(d);
}
END_TEST

START_TEST(trailer_max)
{
    struct dec *d = new_dec();
    char buf[512];
    size_t n;

    n = (size_t)sprintf(buf, "0\r\nX-Long: ");
    memset(buf + n, 't', 200);
    strcpy(buf + n + 200, "\r\n\r\n");
    decode(buf, strlen(buf), 64, strlen(buf), d);
    ck_assert_int_eq(d->st, H1_CHUNK_ERROR);
    decode(buf, 150, 64, 150, d);
    ck_assert_int_eq(d->st, H1_CHUNK_ERROR);
    /* many small trailer fields add up to the section */
    n = (size_t)sprintf(buf, "0\r\n");
    for (int i = 0; i < 20; i++)
        n += (size_t)sprintf(buf + n, "T%d: x\r\n", i);
    strcpy(buf + n, "\r\n");
    decode(buf, strlen(buf), 64, strlen(buf), d);
    ck_assert_int_eq(d->st, H1_CHUNK_ERROR);
    decode(buf, strlen(buf), 1024, strlen(buf), d);
    ck_assert_int_eq(d->st, H1_CHUNK_DONE);
    free(d);
}
END_TEST

/* A big chunk arrives in pieces; DATA never runs past the chunk. */
START_TEST(big_chunk)
{
    size_t n = 5000;
    char *s = malloc(n + 64);
    struct dec *d = new_dec();

    if (s == NULL)
        abort();
    int k = sprintf(s, "%zx\r\n", n);

    for (size_t i = 0; i < n; i++)
        s[k + i] = (char)('a' + i % 26);
    strcpy(s + k + n, "\r\n0\r\n\r\nNEXT");
    for (size_t step = 1; step < 9000; step = step * 3 + 1) {
        decode(s, strlen(s), 64, step, d);
        ck_assert_int_eq(d->st, H1_CHUNK_DONE);
        ck_assert_uint_eq(d->used, strlen(s) - 4);
        ck_assert_uint_eq(d->blen, n);
        ck_assert(memcmp(d->body, s + k, n) == 0);
    }
    free(s);
    free(d);
}
END_TEST

/*
 * 16 hex digits is the most a uint64_t needs.  Refusing sizes no body
 * could have is defensible, but 16 digits that are mostly leading zeros
 * are a small size and must be accepted.
 */
START_TEST(max_size_chunk)
{
    struct dec *d = new_dec();

    decode("FFFFFFFFFFFFFFFF\r\nabc", 21, 64, 21, d);
    ck_assert(d->st == H1_CHUNK_ERROR || (d->st == H1_CHUNK_MORE && d->blen == 3));
    decode("0000000000000010\r\n0123456789abcdef\r\n0\r\n\r\n", 41, 64, 41, d);
    ck_assert_int_eq(d->st, H1_CHUNK_DONE);
    ck_assert_uint_eq(d->blen, 16);
    free(d);
}
END_TEST

/* RFC 9112 allows any number of leading zeros; refusing more than 16 digits is defensible. */
START_TEST(many_leading_zeros)
{
    struct dec *d = new_dec();

    decode("000000000000000000005\r\nhello\r\n0\r\n\r\n", 35, 64, 35, d);
    ck_assert_msg(d->st == H1_CHUNK_DONE || d->st == H1_CHUNK_ERROR, "%s", cst_name(d->st));
    if (d->st == H1_CHUNK_DONE)
        ck_assert_uint_eq(d->blen, 5);
    free(d);
}
END_TEST

/* After DONE or ERROR the decoder keeps saying so. */
START_TEST(sticky_end)
{
    struct h1_chunk c;
    size_t consumed, datalen;
    const char *data;

    h1_chunk_init(&c, 64);
    ck_assert_int_eq(h1_chunk_decode(&c, "x\r\n", 3, &consumed, &data, &datalen), H1_CHUNK_ERROR);
    ck_assert_int_eq(h1_chunk_decode(&c, "5\r\nhello\r\n", 10, &consumed, &data, &datalen),
                     H1_CHUNK_ERROR);
}
END_TEST

START_TEST(chunk_header)
{
    static const struct {
        uint64_t n;
        const char *want;
    } v[] = {
        { 0, "0\r\n" },
        { 1, "1\r\n" },
        { 15, "f\r\n" },
        { 16, "10\r\n" },
        { 500, "1f4\r\n" },
        { 65536, "10000\r\n" },
        { 0xdeadbeef, "deadbeef\r\n" },
        { UINT64_MAX, "ffffffffffffffff\r\n" },
    };
    char buf[H1_CHUNK_HDR_MAX + 8];

    for (size_t i = 0; i < ARRAY_LEN(v); i++) {
        memset(buf, 'Z', sizeof buf);
        size_t n = h1_chunk_header(buf, v[i].n);
        ck_assert_uint_eq(n, strlen(v[i].want));
        ck_assert_uint_le(n, H1_CHUNK_HDR_MAX);
        ck_assert(memcmp(buf, v[i].want, n) == 0);
        for (size_t j = H1_CHUNK_HDR_MAX; j < sizeof buf; j++)
            ck_assert(buf[j] == 'Z');
    }
}
END_TEST

/* Encode with h1_chunk_header, decode, get the same bytes back. */
START_TEST(chunk_round_trip)
{
    static char in[4096], wire[8192];
    struct dec *d = new_dec();
    size_t n = 0, sizes[] = { 1, 15, 16, 255, 256, 1000, 7 }, off = 0;

    for (size_t i = 0; i < sizeof in; i++)
        in[i] = (char)(i * 7 + 3);
    for (size_t i = 0; off < sizeof in; i++) {
        size_t sz = SRG_MIN(sizes[i % ARRAY_LEN(sizes)], sizeof in - off);
        n += h1_chunk_header(wire + n, sz);
        memcpy(wire + n, in + off, sz);
        n += sz;
        memcpy(wire + n, "\r\n", 2);
        n += 2;
        off += sz;
    }
    n += h1_chunk_header(wire + n, 0);
    memcpy(wire + n, "\r\n", 2);
    n += 2;
    decode(wire, n, 0, 333, d);
    ck_assert_int_eq(d->st, H1_CHUNK_DONE);
    ck_assert_uint_eq(d->used, n);
    ck_assert_uint_eq(d->blen, sizeof in);
    ck_assert(memcmp(d->body, in, sizeof in) == 0);
    free(d);
}
END_TEST

Suite *
h1_body_suite(void)
{
    Suite *s = suite_create("h1_body");
    TCase *tc = tcase_create("framing");

    tcase_add_loop_test(tc, request_framing, 0, (int)ARRAY_LEN(req_frames));
    tcase_add_test(tc, request_cl_zero);
    tcase_add_test(tc, huge_cl);
    tcase_add_test(tc, request_cl_twice_same);
    tcase_add_test(tc, request_unknown_coding_alone);
    tcase_add_test(tc, request_http10_te);
    tcase_add_test(tc, request_get_with_body);
    tcase_add_loop_test(tc, response_framing, 0, (int)ARRAY_LEN(resp_frames));
    tcase_add_test(tc, response_cl_zero);
    suite_add_tcase(s, tc);

    tc = tcase_create("chunked");
    tcase_add_loop_test(tc, chunked_table, 0, (int)ARRAY_LEN(chunked_cases));
    tcase_add_loop_test(tc, chunked_splits, 0, (int)ARRAY_LEN(chunked_cases));
    tcase_add_test(tc, chunked_every_split_point);
    tcase_add_test(tc, chunked_done_consumed);
    tcase_add_test(tc, chunked_incomplete);
    tcase_add_test(tc, chunk_ext_max);
    tcase_add_test(tc, trailer_max);
    tcase_add_test(tc, big_chunk);
    tcase_add_test(tc, max_size_chunk);
    tcase_add_test(tc, many_leading_zeros);
    tcase_add_test(tc, sticky_end);
    tcase_add_test(tc, chunk_header);
    tcase_add_test(tc, chunk_round_trip);
    suite_add_tcase(s, tc);
    return s;
}
