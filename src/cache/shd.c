/*
 * The stored head's compact encoding (shd.h).  Layout:
 *
 *   SHD_MAGIC, the text's length (LEB128), then ops, then OP_END:
 *   OP_STATUS   minor digit, status (2 bytes, LE), reason: len, bytes
 *               -> "HTTP/1.<minor> <status> <reason>" CRLF
 *   OP_FIELD    name: len, bytes; a value -> name ": " value CRLF
 *   OP_NAME + i a value -> names[i] ": " value CRLF
 *   OP_LINE     len, bytes -> bytes CRLF (a line of no other shape)
 *   OP_EMPTY    -> CRLF (the empty line that ends a head)
 *   OP_TAIL     len, bytes -> bytes (text after the last CRLF), last
 *
 * Lengths are LEB128, at most five bytes.  A field's value is one LEB128
 * number v and what its kind (v & 3) says follows:
 *   VAL_BYTES   v >> 2 bytes, the value as it is
 *   VAL_DATE    4 bytes (LE): seconds since 1970 of an IMF-fixdate (RFC
 *               9110 section 5.6.7) that prints back exactly so
 *   VAL_TABLE   none: vals[v >> 2], a value origins send often
 * Dates are kept as numbers in Date and Expires only (date_field()).
 * A 1 KiB object's head as nginx sends it (nine fields, 277 bytes, three
 * of them dates) takes 80.  Decoding is copies and, for a date, a
 * few integer divisions: no table lookup by name, no calendar library.
 */
#include "config.h"

#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "surogat/defs.h"
#include "surogat/shd.h"

enum {
    OP_END = 0x00,
    OP_STATUS = 0x01,
    OP_FIELD = 0x02,
    OP_LINE = 0x03,
    OP_EMPTY = 0x04,
    OP_TAIL = 0x05,
    OP_NAME = 0x40, /* OP_NAME + i: names[i], i < NNAMES */
};

/*
 * Field names stored as one byte: the ones origins send most, spelt as
 * they send them (a name spelt otherwise is stored as it is).  On disk:
 * append only, never reorder.
 */
static const struct txt names[] = {
    TXT_LIT("Server"),
    TXT_LIT("Date"),
    TXT_LIT("Content-Type"),
    TXT_LIT("Content-Length"),
    TXT_LIT("Last-Modified"),
    TXT_LIT("Expires"),
    TXT_LIT("Cache-Control"),
    TXT_LIT("Accept-Ranges"),
    TXT_LIT("ETag"),
    TXT_LIT("Vary"),
    TXT_LIT("Content-Encoding"),
    TXT_LIT("Age"),
    TXT_LIT("Connection"),
    TXT_LIT("Keep-Alive"),
    TXT_LIT("Transfer-Encoding"),
    TXT_LIT("Location"),
    TXT_LIT("Content-Language"),
    TXT_LIT("Content-Disposition"),
    TXT_LIT("Content-Range"),
    TXT_LIT("Content-Location"),
    TXT_LIT("Link"),
    TXT_LIT("Pragma"),
    TXT_LIT("Via"),
    TXT_LIT("Alt-Svc"),
    TXT_LIT("Allow"),
    TXT_LIT("Retry-After"),
    TXT_LIT("WWW-Authenticate"),
    TXT_LIT("Access-Control-Allow-Origin"),
    TXT_LIT("Access-Control-Allow-Credentials"),
    TXT_LIT("Access-Control-Allow-Methods"),
    TXT_LIT("Access-Control-Allow-Headers"),
    TXT_LIT("Access-Control-Expose-Headers"),
    TXT_LIT("Access-Control-Max-Age"),
    TXT_LIT("Strict-Transport-Security"),
    TXT_LIT("Content-Security-Policy"),
    TXT_LIT("X-Content-Type-Options"),
    TXT_LIT("X-Frame-Options"),
    TXT_LIT("X-XSS-Protection"),
    TXT_LIT("Referrer-Policy"),
    TXT_LIT("Permissions-Policy"),
    TXT_LIT("Cross-Origin-Resource-Policy"),
    TXT_LIT("Cross-Origin-Opener-Policy"),
    TXT_LIT("Cross-Origin-Embedder-Policy"),
    TXT_LIT("Timing-Allow-Origin"),
    TXT_LIT("Server-Timing"),
    TXT_LIT("X-Powered-By"),
    TXT_LIT("Surrogate-Key"),
    TXT_LIT("Surrogate-Control"),
    TXT_LIT("xkey"),
    TXT_LIT("X-Cache"),
    TXT_LIT("Cache-Status"),
    TXT_LIT("X-Request-Id"),
    TXT_LIT("Report-To"),
    TXT_LIT("NEL"),
    TXT_LIT("Accept-CH"),
    TXT_LIT("P3P"),
    TXT_LIT("content-type"),
    TXT_LIT("content-length"),
    TXT_LIT("cache-control"),
    TXT_LIT("date"),
    TXT_LIT("server"),
    TXT_LIT("last-modified"),
    TXT_LIT("etag"),
    TXT_LIT("expires"),
    TXT_LIT("vary"),
    TXT_LIT("content-encoding"),
    TXT_LIT("accept-ranges"),
};
#define NNAMES (sizeof names / sizeof names[0])

enum { VAL_BYTES, VAL_DATE, VAL_TABLE };

/* Whole values stored as their index (VAL_TABLE).  On disk: append only, never reorder. */
static const struct txt vals[] = {
    TXT_LIT("bytes"),
    TXT_LIT("application/octet-stream"),
    TXT_LIT("text/html"),
    TXT_LIT("text/html; charset=utf-8"),
    TXT_LIT("text/html; charset=UTF-8"),
    TXT_LIT("text/plain"),
    TXT_LIT("text/plain; charset=utf-8"),
    TXT_LIT("text/css"),
    TXT_LIT("text/javascript"),
    TXT_LIT("application/javascript"),
    TXT_LIT("application/json"),
    TXT_LIT("image/png"),
    TXT_LIT("image/jpeg"),
    TXT_LIT("image/gif"),
    TXT_LIT("image/webp"),
    TXT_LIT("image/svg+xml"),
    TXT_LIT("gzip"),
    TXT_LIT("br"),
    TXT_LIT("Accept-Encoding"),
    TXT_LIT("keep-alive"),
    TXT_LIT("close"),
    TXT_LIT("nosniff"),
    TXT_LIT("SAMEORIGIN"),
    TXT_LIT("DENY"),
    TXT_LIT("*"),
    TXT_LIT("no-cache"),
    TXT_LIT("no-store"),
    TXT_LIT("public"),
    TXT_LIT("private"),
    TXT_LIT("nginx"),
    TXT_LIT("Apache"),
    TXT_LIT("cloudflare"),
    TXT_LIT("chunked"),
    TXT_LIT("Origin"),
    TXT_LIT("max-age=0"),
    TXT_LIT("max-age=3600"),
    TXT_LIT("max-age=31536000"),
    TXT_LIT("public, max-age=31536000, immutable"),
    TXT_LIT("0"),
    TXT_LIT("-1"),
};
#define NVALS (sizeof vals / sizeof vals[0])

#define DATE_LEN 29 /* "Sun, 06 Nov 1994 08:49:37 GMT" */

static const char wdays[] = "ThuFriSatSunMonTueWed"; /* from 1970-01-01, a Thursday */
static const char months[] = "JanFebMarAprMayJunJulAugSepOctNovDec";

static void
two(char *o, unsigned v)
{
    o[0] = (char)('0' + v / 10);
    o[1] = (char)('0' + v % 10);
}

/*
 * t (seconds since 1970) as an IMF-fixdate, DATE_LEN bytes at o.  The
 * civil date from a day count as in Howard Hinnant's "chrono-compatible
 * low-level date algorithms" (public domain arithmetic), for days >= 0.
 */
static void
date_format(char *o, uint32_t t)
{
    uint32_t days = t / 86400, sod = t % 86400;
    uint32_t z = days + 719468, era = z / 146097, doe = z - era * 146097;
    uint32_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    uint32_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100), mp = (5 * doy + 2) / 153;
    uint32_t d = doy - (153 * mp + 2) / 5 + 1, m = mp < 10 ? mp + 3 : mp - 9;
    uint32_t y = yoe + era * 400 + (m <= 2);

    memcpy(o, wdays + 3 * (days % 7), 3);
    memcpy(o + 3, ", ", 2);
    two(o + 5, d);
    o[7] = ' ';
    memcpy(o + 8, months + 3 * (m - 1), 3);
    o[11] = ' ';
    two(o + 12, y / 100);
    two(o + 14, y % 100);
    o[16] = ' ';
    two(o + 17, sod / 3600);
    o[19] = ':';
    two(o + 20, sod / 60 % 60);
    o[22] = ':';
    two(o + 23, sod % 60);
    memcpy(o + 25, " GMT", 4);
}

static bool
digits(const char *p, unsigned n, uint32_t *v)
{
    *v = 0;
    for (unsigned i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return (false);
        *v = *v * 10 + (uint32_t)(p[i] - '0');
    }
    return (true);
}

/* Whether p[0..n) is an IMF-fixdate that date_format() prints back exactly, and its time. */
static bool
date_parse(const char *p, size_t n, uint32_t *t)
{
    uint32_t d, y, hh, mm, ss, m, yy, doy, era, yoe;
    uint64_t days, v;
    char back[DATE_LEN];
    const char *mp;

    if (n != DATE_LEN || !digits(p + 5, 2, &d) || !digits(p + 12, 4, &y) ||
        !digits(p + 17, 2, &hh) || !digits(p + 20, 2, &mm) || !digits(p + 23, 2, &ss))
        return (false);
    mp = memmem(months, sizeof months - 1, p + 8, 3);
    if (mp == NULL || (mp - months) % 3 != 0 || y < 1970 || d < 1 || d > 31 || hh > 23 || mm > 59 ||
        ss > 59)
        return (false);
    m = (uint32_t)(mp - months) / 3 + 1;
    /* Days since 1970 (Hinnant's days_from_civil), then seconds: must fit 32 bits. */
    yy = y - (m <= 2);
    era = yy / 400;
    yoe = yy - era * 400;
    doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    days = (uint64_t)era * 146097 + yoe * 365 + yoe / 4 - yoe / 100 + doy - 719468;
    v = days * 86400 + hh * 3600 + mm * 60 + ss;
    if (v > UINT32_MAX)
        return (false);
    *t = (uint32_t)v;
    date_format(back, *t);
    return (memcmp(back, p, DATE_LEN) == 0);
}

static int
val_index(const char *p, size_t n)
{
    for (size_t i = 0; i < NVALS; i++)
        if (vals[i].len == n && memcmp(vals[i].b, p, n) == 0)
            return ((int)i);
    return (-1);
}
_Static_assert(OP_NAME + NNAMES <= 0x100, "the name table outgrew its ops");
_Static_assert(sizeof(((struct shd_iter *)0)->date) == 29, "an IMF-fixdate is 29 bytes");

#define LEN_MAX ((size_t)UINT32_MAX) /* a stored head is far smaller; more is refused */

/* ---- encoding ---- */

static unsigned char *
put_len(unsigned char *o, size_t n)
{
    while (n >= 0x80) {
        *o++ = (unsigned char)(n | 0x80);
        n >>= 7;
    }
    *o++ = (unsigned char)n;
    return (o);
}

static unsigned char *
put_bytes(unsigned char *o, const char *p, size_t n)
{
    o = put_len(o, n);
    memcpy(o, p, n);
    return (o + n);
}

/*
 * Only these fields' dates are kept as numbers: their values are passed
 * on, never read by the cache itself, which reads Last-Modified in place
 * (conditional requests, revalidation).
 */
static bool
date_field(int name)
{
    const struct txt *n = name >= 0 ? &names[name] : NULL;

    return (n != NULL && ((n->len == 4 && strncasecmp(n->b, "Date", 4) == 0) ||
                          (n->len == 7 && strncasecmp(n->b, "Expires", 7) == 0)));
}

static unsigned char *
put_value(unsigned char *o, const char *p, size_t n, int name)
{
    uint32_t t;
    int k;

    if (date_field(name) && date_parse(p, n, &t)) {
        o = put_len(o, VAL_DATE);
        for (int i = 0; i < 4; i++)
            *o++ = (unsigned char)(t >> (8 * i));
    } else if ((k = val_index(p, n)) >= 0) {
        o = put_len(o, (size_t)k << 2 | VAL_TABLE);
    } else {
        o = put_len(o, n << 2 | VAL_BYTES);
        memcpy(o, p, n);
        o += n;
    }
    return (o);
}

static int
name_index(const char *p, size_t n)
{
    for (size_t i = 0; i < NNAMES; i++)
        if (names[i].len == n && memcmp(names[i].b, p, n) == 0)
            return ((int)i);
    return (-1);
}

/* "HTTP/1.M SSS reason": the status line shape the encoding keeps in five bytes and the reason. */
static bool
status_line(const char *p, size_t n)
{
    return (n >= 13 && memcmp(p, "HTTP/1.", 7) == 0 && p[7] >= '0' && p[7] <= '9' && p[8] == ' ' &&
            p[9] >= '1' && p[9] <= '9' && p[10] >= '0' && p[10] <= '9' && p[11] >= '0' &&
            p[11] <= '9' && p[12] == ' ');
}

/* The length of the name of a field line "name: value", or 0 when the line is not one. */
static size_t
field_name(const char *p, size_t n)
{
    size_t i;

    for (i = 0; i < n && p[i] != ':'; i++)
        if ((unsigned char)p[i] <= ' ' || (unsigned char)p[i] >= 0x7f)
            return (0);
    return (i > 0 && i + 1 < n && p[i + 1] == ' ' ? i : 0);
}

static unsigned char *
encode_line(unsigned char *o, const char *p, size_t n)
{
    size_t nl;
    int k;

    if (n == 0) {
        *o++ = OP_EMPTY;
    } else if (status_line(p, n)) {
        unsigned st =
            (unsigned)(p[9] - '0') * 100 + (unsigned)(p[10] - '0') * 10 + (unsigned)(p[11] - '0');
        *o++ = OP_STATUS;
        *o++ = (unsigned char)(p[7] - '0');
        *o++ = (unsigned char)(st & 0xff);
        *o++ = (unsigned char)(st >> 8);
        o = put_bytes(o, p + 13, n - 13);
    } else if ((nl = field_name(p, n)) > 0) {
        if ((k = name_index(p, nl)) >= 0) {
            *o++ = (unsigned char)(OP_NAME + (unsigned)k);
        } else {
            *o++ = OP_FIELD;
            o = put_bytes(o, p, nl);
        }
        o = put_value(o, p + nl + 2, n - nl - 2, k);
    } else {
        *o++ = OP_LINE;
        o = put_bytes(o, p, n);
    }
    return (o);
}

size_t
shd_bound(size_t len)
{
    /* Per line at most 11 bytes of ops and lengths, against its 2 of CRLF. */
    return (16 + len * 6);
}

size_t
shd_encode(const char *text, size_t len, unsigned char *out)
{
    const char *p = text, *e = text + len, *eol;
    unsigned char *o = out;

    AN(out);
    SRG_ASSERT(len <= LEN_MAX);
    *o++ = SHD_MAGIC;
    o = put_len(o, len);
    while (p < e) {
        eol = memmem(p, (size_t)(e - p), "\r\n", 2);
        if (eol == NULL) {
            *o++ = OP_TAIL;
            o = put_bytes(o, p, (size_t)(e - p));
            break;
        }
        o = encode_line(o, p, (size_t)(eol - p));
        p = eol + 2;
    }
    *o++ = OP_END;
    SRG_ASSERT((size_t)(o - out) <= shd_bound(len));
    return ((size_t)(o - out));
}

/* ---- decoding ---- */

/* A length at *pp, moved past; false when it runs past e or past LEN_MAX. */
static bool
get_len(const unsigned char **pp, const unsigned char *e, size_t *n)
{
    const unsigned char *p = *pp;
    size_t v = 0;

    for (unsigned shift = 0; shift < 35; shift += 7) {
        if (p >= e)
            return (false);
        v |= (size_t)(*p & 0x7f) << shift;
        if (!(*p++ & 0x80)) {
            *pp = p;
            *n = v;
            return (v <= LEN_MAX);
        }
    }
    return (false);
}

/* Bytes of length n at *pp, moved past; false when they run past e. */
static bool
get_bytes(const unsigned char **pp, const unsigned char *e, struct txt *t)
{
    size_t n;

    if (!get_len(pp, e, &n) || n > (size_t)(e - *pp))
        return (false);
    *t = (struct txt){ (const char *)*pp, n };
    *pp += n;
    return (true);
}

/* One op read and checked; the text it stands for is t[0..nt) with crlf after it or not. */
struct op {
    unsigned code;
    struct txt t[3];
    unsigned nt;
    bool crlf;
    char sl[13];         /* a status line's "HTTP/1.M SSS " */
    char date[DATE_LEN]; /* a VAL_DATE value, printed */
};

/* A field's value at *pp into op->t[2]; false when it is not sound. */
static bool
get_value(const unsigned char **pp, const unsigned char *e, struct op *op)
{
    const unsigned char *p = *pp;
    uint32_t t = 0;
    size_t v;

    if (!get_len(&p, e, &v))
        return (false);
    switch (v & 3) {
    case VAL_BYTES:
        if (v >> 2 > (size_t)(e - p))
            return (false);
        op->t[2] = (struct txt){ (const char *)p, v >> 2 };
        p += v >> 2;
        break;
    case VAL_DATE:
        if (v != VAL_DATE || e - p < 4)
            return (false);
        for (int i = 0; i < 4; i++)
            t |= (uint32_t)p[i] << (8 * i);
        p += 4;
        date_format(op->date, t);
        op->t[2] = (struct txt){ op->date, DATE_LEN };
        break;
    case VAL_TABLE:
        if (v >> 2 >= NVALS)
            return (false);
        op->t[2] = vals[v >> 2];
        break;
    default:
        return (false);
    }
    *pp = p;
    return (true);
}

/* Read the op at *pp.  False when it is not sound. */
static bool
get_op(const unsigned char **pp, const unsigned char *e, struct op *op)
{
    const unsigned char *p = *pp;
    unsigned st;

    if (p >= e)
        return (false);
    op->code = *p++;
    op->nt = 0;
    op->crlf = true;
    switch (op->code) {
    case OP_END:
        break;
    case OP_STATUS:
        if (e - p < 3 || p[0] > 9)
            return (false);
        st = (unsigned)p[1] | (unsigned)p[2] << 8;
        if (st < 100 || st > 999)
            return (false);
        memcpy(op->sl, "HTTP/1.0 000 ", 13);
        op->sl[7] = (char)('0' + p[0]);
        op->sl[9] = (char)('0' + st / 100);
        op->sl[10] = (char)('0' + st / 10 % 10);
        op->sl[11] = (char)('0' + st % 10);
        p += 3;
        op->t[op->nt++] = (struct txt){ op->sl, 13 };
        if (!get_bytes(&p, e, &op->t[op->nt++]))
            return (false);
        break;
    case OP_FIELD:
        if (!get_bytes(&p, e, &op->t[0]) || !get_value(&p, e, op))
            return (false);
        op->t[1] = TXT_LIT(": ");
        op->nt = 3;
        break;
    case OP_LINE:
    case OP_TAIL:
        if (!get_bytes(&p, e, &op->t[op->nt++]))
            return (false);
        op->crlf = op->code == OP_LINE;
        break;
    case OP_EMPTY:
        break;
    default:
        if (op->code < OP_NAME || op->code - OP_NAME >= NNAMES)
            return (false);
        op->t[0] = names[op->code - OP_NAME];
        op->t[1] = TXT_LIT(": ");
        if (!get_value(&p, e, op))
            return (false);
        op->nt = 3;
        break;
    }
    *pp = p;
    return (true);
}

static size_t
op_len(const struct op *op)
{
    size_t n = op->crlf && op->code != OP_END ? 2 : 0;

    for (unsigned i = 0; i < op->nt; i++)
        n += op->t[i].len;
    return (n);
}

bool
shd_check(const unsigned char *enc, size_t len, size_t *tlen)
{
    const unsigned char *p = enc, *e = enc + len;
    size_t want, got = 0;
    bool tail = false;
    struct op op;

    AN(enc);
    AN(tlen);
    if (len < 1 || *p++ != SHD_MAGIC || !get_len(&p, e, &want))
        return (false);
    for (;;) {
        if (!get_op(&p, e, &op))
            return (false);
        if (op.code == OP_END)
            break;
        if (tail) /* nothing follows the text after the last CRLF */
            return (false);
        tail = op.code == OP_TAIL;
        got += op_len(&op);
        if (got > want)
            return (false);
    }
    if (p != e || got != want)
        return (false);
    *tlen = got;
    return (true);
}

size_t
shd_text_len(const unsigned char *enc, size_t len)
{
    const unsigned char *p = enc + 1;
    size_t n;

    SRG_ASSERT(len > 0 && enc[0] == SHD_MAGIC);
    AN(get_len(&p, enc + len, &n));
    return (n);
}

/*
 * The decoder of a hit: the encoding was checked when it was made or read
 * back, so it trusts it (bounds are asserted once, at the end) and takes
 * each op by hand -- a delivery pays for this on every hit.
 */
/*
 * n bytes from p to o, for the short names and values of a head: two
 * overlapping loads and stores instead of a call into memcpy.
 */
static inline char *
copy(char *o, const void *p, size_t n)
{
    const char *s = p;
    uint64_t a, b;
    uint32_t c, d;

    if (n >= 8 && n <= 16) {
        memcpy(&a, s, 8);
        memcpy(&b, s + n - 8, 8);
        memcpy(o, &a, 8);
        memcpy(o + n - 8, &b, 8);
    } else if (n >= 4 && n < 8) {
        memcpy(&c, s, 4);
        memcpy(&d, s + n - 4, 4);
        memcpy(o, &c, 4);
        memcpy(o + n - 4, &d, 4);
    } else if (n < 4) {
        for (size_t i = 0; i < n; i++)
            o[i] = s[i];
    } else {
        memcpy(o, s, n);
    }
    return (o + n);
}

static inline size_t
fast_len(const unsigned char **pp)
{
    const unsigned char *p = *pp;
    size_t v = *p++;

    if (v & 0x80) {
        v &= 0x7f;
        for (unsigned shift = 7; *(p - 1) & 0x80; shift += 7)
            v |= (size_t)(*p++ & 0x7f) << shift;
    }
    *pp = p;
    return (v);
}

static inline char *
fast_bytes(char *o, const unsigned char **pp)
{
    size_t n = fast_len(pp);

    o = copy(o, *pp, n);
    *pp += n;
    return (o);
}

/*
 * Printing a date costs more than the rest of a head's decoding, and a
 * hot object's dates are the same on every hit (as are those of objects
 * fetched in the same second): each thread keeps the last few printed.
 */
#define DATE_MEMO 16 /* a power of two */

static void
date_print(char *o, uint32_t t)
{
    static __thread struct {
        uint32_t t;
        bool set;
        char s[DATE_LEN];
    } memo[DATE_MEMO];
    /* Hashed: a Date and its Expires are often a round number of minutes apart. */
    unsigned i = (unsigned)((t * 2654435761u) >> 28) % DATE_MEMO;

    if (!memo[i].set || memo[i].t != t) {
        date_format(memo[i].s, t);
        memo[i].t = t;
        memo[i].set = true;
    }
    memcpy(o, memo[i].s, DATE_LEN);
}

static inline char *
fast_value(char *o, const unsigned char **pp)
{
    const unsigned char *p = *pp;
    size_t v = fast_len(&p);

    switch (v & 3) {
    case VAL_DATE:
        date_print(o, (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                          (uint32_t)p[3] << 24);
        p += 4;
        o += DATE_LEN;
        break;
    case VAL_TABLE:
        o = copy(o, vals[v >> 2].b, vals[v >> 2].len);
        break;
    default:
        o = copy(o, p, v >> 2);
        p += v >> 2;
        break;
    }
    *pp = p;
    return (o);
}

/*
 * The ops from *pp up to and with OP_END, written at o; returns the end of
 * what was written.  fields: an OP_EMPTY that is the last op (the empty
 * line ending a head) writes nothing, for a caller that writes more fields
 * and the empty line itself.
 */
static inline char *
decode_ops(const unsigned char **pp, char *o, bool fields)
{
    const unsigned char *p = *pp;
    unsigned st, c;

    for (;;) {
        c = *p++;
        if (c >= OP_NAME) {
            o = copy(o, names[c - OP_NAME].b, names[c - OP_NAME].len);
            *o++ = ':';
            *o++ = ' ';
            o = fast_value(o, &p);
        } else if (c == OP_STATUS) {
            st = (unsigned)p[1] | (unsigned)p[2] << 8;
            memcpy(o, "HTTP/1.", 7);
            o[7] = (char)('0' + p[0]);
            o[8] = ' ';
            o[9] = (char)('0' + st / 100);
            o[10] = (char)('0' + st / 10 % 10);
            o[11] = (char)('0' + st % 10);
            o[12] = ' ';
            p += 3;
            o = fast_bytes(o + 13, &p);
        } else if (c == OP_FIELD) {
            o = fast_bytes(o, &p);
            *o++ = ':';
            *o++ = ' ';
            o = fast_value(o, &p);
        } else if (c == OP_LINE) {
            o = fast_bytes(o, &p);
        } else if (c == OP_TAIL) {
            o = fast_bytes(o, &p);
            continue; /* no CRLF: the text ended without one */
        } else if (c == OP_END) {
            break;
        } else if (c == OP_EMPTY && fields && *p == OP_END) {
            continue; /* the head's empty line, left to the caller */
        }
        /* OP_EMPTY is the CRLF alone */
        *o++ = '\r';
        *o++ = '\n';
    }
    *pp = p;
    return (o);
}

size_t
shd_decode(const unsigned char *enc, size_t len, char *out)
{
    const unsigned char *p = enc + 1;
    char *o;
    size_t n;

    SRG_ASSERT(len > 0 && enc[0] == SHD_MAGIC);
    n = fast_len(&p);
    o = decode_ops(&p, out, false);
    SRG_ASSERT((size_t)(p - enc) == len && (size_t)(o - out) == n);
    return (n);
}

bool
shd_split(const unsigned char *enc, size_t len, struct shd_head *h)
{
    const unsigned char *p = enc + 1;
    size_t tlen, rlen;

    AN(h);
    SRG_ASSERT(len > 0 && enc[0] == SHD_MAGIC);
    tlen = fast_len(&p);
    if (*p != OP_STATUS)
        return (false);
    h->minor = p[1];
    h->status = (unsigned)p[2] | (unsigned)p[3] << 8;
    p += 4;
    rlen = fast_len(&p);
    h->reason = (struct txt){ (const char *)p, rlen };
    h->fields = p + rlen;
    h->end = enc + len;
    /* "HTTP/1.M SSS " reason CRLF: the rest of the text is the fields' */
    SRG_ASSERT(h->fields < h->end && tlen >= 15 + rlen);
    h->room = tlen - 15 - rlen;
    return (true);
}

/*
 * The hits on a hot object decode the same fields again and again: each
 * thread keeps the last fields it decoded twice in a row, and copies them
 * out while they come again.  The key is the encoded bytes, compared
 * whole, so that another object's head at a freed one's address is never
 * taken for it; the address only says when filling the memo is worth its
 * copies (a working set of many objects, each hit once in a while, pays
 * one comparison of addresses).
 */
#define MEMO_ENC  256  /* nginx's fields of a 1 KiB object: 69 bytes */
#define MEMO_TEXT 1024 /* their text: 258 */

static __thread struct {
    const unsigned char *last; /* the fields decoded last, filled or not */
    size_t elen;               /* the filled key's length; 0: none */
    size_t tlen;
    unsigned char enc[MEMO_ENC];
    char text[MEMO_TEXT];
} memo;

size_t
shd_decode_fields(const struct shd_head *h, char *out)
{
    const unsigned char *p = h->fields;
    size_t elen = (size_t)(h->end - h->fields), n;

    AN(h->fields);
    if (elen == memo.elen && memcmp(memo.enc, h->fields, elen) == 0) {
        SRG_ASSERT(memo.tlen <= h->room);
        memcpy(out, memo.text, memo.tlen);
        return (memo.tlen);
    }
    n = (size_t)(decode_ops(&p, out, true) - out);
    SRG_ASSERT(p == h->end && n <= h->room);
    if (memo.last == h->fields && elen <= MEMO_ENC && n <= MEMO_TEXT) {
        memcpy(memo.enc, h->fields, elen);
        memcpy(memo.text, out, n);
        memo.elen = elen;
        memo.tlen = n;
    }
    memo.last = h->fields;
    return (n);
}

/* ---- fields ---- */

void
shd_iter_init(struct shd_iter *it, const unsigned char *enc, size_t len)
{
    size_t n;

    AN(it);
    SRG_ASSERT(len > 0 && enc[0] == SHD_MAGIC);
    it->p = enc + 1;
    it->e = enc + len;
    it->past_status = false;
    AN(get_len(&it->p, it->e, &n));
}

bool
shd_next(struct shd_iter *it, struct txt *name, struct txt *val)
{
    struct op op;

    for (;;) {
        AN(get_op(&it->p, it->e, &op));
        if (op.code == OP_END) {
            it->p--; /* stay at the end */
            return (false);
        }
        if (!it->past_status) {
            it->past_status = true; /* the first line is the status line, whatever its shape */
            continue;
        }
        if (op.code == OP_FIELD || op.code >= OP_NAME) {
            *name = op.t[0];
            *val = op.t[2];
            if (val->b == op.date) {
                memcpy(it->date, op.date, DATE_LEN);
                val->b = it->date;
            }
            return (true);
        }
        /* "name:value" without the space: a field all the same, as a parser reads it. */
        if (op.code == OP_LINE && op.t[0].len > 0 && op.t[0].b[0] != ':') {
            const char *c = memchr(op.t[0].b, ':', op.t[0].len);

            if (c != NULL) {
                *name = (struct txt){ op.t[0].b, (size_t)(c - op.t[0].b) };
                *val = (struct txt){ c + 1, op.t[0].len - name->len - 1 };
                return (true);
            }
        }
    }
}
