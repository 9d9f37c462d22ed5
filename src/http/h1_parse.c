/*
 * HTTP/1 head parser (RFC 9112 sections 2-5).  Stateless: it parses from
 * the start each time it is called and points into the caller's buffer.
 *
 * Strictness is the point.  A proxy that accepts a byte its backend reads
 * differently is a request-smuggling vector, so anything RFC 9112 lets a
 * recipient reject (bare CR, obs-fold, whitespace before the colon,
 * control bytes) is rejected rather than normalised.
 */
#include "config.h"

#include <pthread.h>
#include <string.h>

#include "surogat/defs.h"
#include "surogat/h1.h"
#include "surogat/http.h"

/* Character classes, built once from the RFC 9110 ABNF. */
enum {
    C_TCHAR = 1,  /* token: field names, methods */
    C_VALUE = 2,  /* field-value bytes: VCHAR, obs-text, SP, HTAB */
    C_TARGET = 4, /* request-target: VCHAR and obs-text, no SP */
    C_REASON = 8, /* reason-phrase: HTAB, SP, VCHAR, obs-text */
};

static unsigned char cclass[256];
static pthread_once_t cclass_once = PTHREAD_ONCE_INIT;

static void
init_classes(void)
{
    static const char tchar_extra[] = "!#$%&'*+-.^_`|~";

    for (unsigned c = 0; c < 256; c++) {
        unsigned char k = 0;
        if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
            (c != 0 && strchr(tchar_extra, (int)c) != NULL))
            k |= C_TCHAR;
        if ((c >= 0x21 && c <= 0x7e) || c >= 0x80)
            k |= C_VALUE | C_TARGET | C_REASON;
        if (c == ' ' || c == '\t')
            k |= C_VALUE | C_REASON;
        cclass[c] = k;
    }
}

static inline bool
is_class(unsigned char c, unsigned k)
{
    return ((cclass[c] & k) != 0);
}

struct line {
    const char *b; /* content, without the line ending */
    size_t len;
};

enum line_status { LINE_OK, LINE_MORE, LINE_BARE_CR };

/*
 * Next line from *pos: ends in LF, optionally preceded by CR.  A CR
 * anywhere else is a bare CR.
 */
static enum line_status
next_line(const char *buf, size_t len, size_t *pos, struct line *ln)
{
    const char *s = buf + *pos;
    const char *lf = memchr(s, '\n', len - *pos);
    const char *end, *cr;

    if (lf == NULL) {
        cr = memchr(s, '\r', len - *pos);
        if (cr != NULL && cr + 1 < buf + len)
            return (LINE_BARE_CR);
        return (LINE_MORE);
    }
    end = lf;
    if (end > s && end[-1] == '\r')
        end--;
    if (memchr(s, '\r', (size_t)(end - s)) != NULL)
        return (LINE_BARE_CR);
    ln->b = s;
    ln->len = (size_t)(end - s);
    *pos = (size_t)(lf - buf) + 1;
    return (LINE_OK);
}

/* HTTP-version = "HTTP/" DIGIT "." DIGIT */
static enum h1_status
parse_version(const char *p, size_t len, unsigned *proto)
{
    if (len != 8 || memcmp(p, "HTTP/", 5) != 0 || p[6] != '.' || p[5] < '0' || p[5] > '9' ||
        p[7] < '0' || p[7] > '9')
        return (H1_E_SYNTAX);
    if (p[5] != '1' || (p[7] != '0' && p[7] != '1'))
        return (H1_E_VERSION);
    *proto = p[7] == '0' ? 10 : 11;
    return (H1_DONE);
}

static enum h1_status
parse_request_line(const struct line *ln, struct http *hp)
{
    const char *p = ln->b, *e = ln->b + ln->len, *s;

    for (s = p; p < e && is_class((unsigned char)*p, C_TCHAR); p++)
        continue;
    if (p == s || p == e || *p != ' ')
        return (H1_E_SYNTAX);
    hp->method.b = s;
    hp->method.len = (size_t)(p - s);
    for (s = ++p; p < e && is_class((unsigned char)*p, C_TARGET); p++)
        continue;
    if (p == s || p == e || *p != ' ')
        return (H1_E_SYNTAX);
    hp->url.b = s;
    hp->url.len = (size_t)(p - s);
    p++;
    return (parse_version(p, (size_t)(e - p), &hp->proto));
}

static enum h1_status
parse_status_line(const struct line *ln, struct http *hp)
{
    const char *p = ln->b, *e = ln->b + ln->len;
    enum h1_status st;

    if (ln->len < 12 || p[8] != ' ')
        return (H1_E_SYNTAX);
    st = parse_version(p, 8, &hp->proto);
    if (st != H1_DONE)
        return (st);
    p += 9;
    for (int i = 0; i < 3; i++)
        if (p[i] < '0' || p[i] > '9')
            return (H1_E_SYNTAX);
    hp->status = (unsigned)((p[0] - '0') * 100 + (p[1] - '0') * 10 + (p[2] - '0'));
    if (hp->status < 100)
        return (H1_E_SYNTAX);
    p += 3;
    /* RFC 9112 requires the SP before an empty reason; many servers omit it. */
    if (p < e && *p++ != ' ')
        return (H1_E_SYNTAX);
    hp->reason.b = p;
    hp->reason.len = (size_t)(e - p);
    for (; p < e; p++)
        if (!is_class((unsigned char)*p, C_REASON))
            return (H1_E_SYNTAX);
    return (H1_DONE);
}

/* field-line = field-name ":" OWS field-value OWS */
static enum h1_status
parse_field(const struct line *ln, struct http *hp, unsigned max_hdr)
{
    const char *p = ln->b, *e = ln->b + ln->len, *s, *ve;
    struct http_hdr *h;

    if (*p == ' ' || *p == '\t')
        return (H1_E_SYNTAX); /* obs-fold, or whitespace before the first field */
    for (s = p; p < e && is_class((unsigned char)*p, C_TCHAR); p++)
        continue;
    if (p == s || p == e || *p != ':')
        return (H1_E_SYNTAX);
    if (hp->nhdr >= max_hdr || hp->nhdr >= hp->maxhdr)
        return (H1_E_TOO_BIG);
    h = &hp->hdr[hp->nhdr++];
    h->name.b = s;
    h->name.len = (size_t)(p - s);
    for (p++; p < e && (*p == ' ' || *p == '\t'); p++)
        continue;
    for (ve = e; ve > p && (ve[-1] == ' ' || ve[-1] == '\t'); ve--)
        continue;
    h->val.b = p;
    h->val.len = (size_t)(ve - p);
    for (; p < ve; p++)
        if (!is_class((unsigned char)*p, C_VALUE))
            return (H1_E_SYNTAX);
    return (H1_DONE);
}

/*
 * Incomplete first line: fail early on a bad method byte (a TLS hello on
 * a plain port, a binary probe) and on an over-long line.
 */
static enum h1_status
check_partial_first_line(const char *p, size_t len, const struct h1_limits *lim, bool request)
{
    if (request) {
        if (len == 1 && p[0] == '\r')
            return (H1_MORE); /* the start of an empty line before the request-line */
        for (size_t i = 0; i < len && p[i] != ' '; i++)
            if (!is_class((unsigned char)p[i], C_TCHAR))
                return (H1_E_SYNTAX);
    }
    if (len > lim->max_line || len > lim->max_head)
        return (request ? H1_E_URI_TOO_LONG : H1_E_TOO_BIG);
    return (H1_MORE);
}

static enum h1_status
parse_head(const char *buf, size_t len, const struct h1_limits *lim, struct http *hp,
           size_t *used, bool request)
{
    size_t pos = 0, start;
    struct line ln;
    enum line_status ls;
    enum h1_status st;

    AN(buf);
    AN(lim);
    OBJ_CHECK(hp, HTTP_MAGIC);
    AZ(pthread_once(&cclass_once, init_classes));
    hp->nhdr = 0;
    /* RFC 9112 section 2.2: ignore empty lines before the request-line. */
    if (request) {
        while (pos < len && (buf[pos] == '\n' || (buf[pos] == '\r' && pos + 1 < len &&
                                                  buf[pos + 1] == '\n')))
            pos += buf[pos] == '\r' ? 2 : 1;
        if (pos > lim->max_line)
            return (H1_E_SYNTAX);
    }
    start = pos;
    ls = next_line(buf, len, &pos, &ln);
    if (ls == LINE_BARE_CR)
        return (H1_E_SYNTAX);
    if (ls == LINE_MORE)
        return (check_partial_first_line(buf + start, len - start, lim, request));
    if (ln.len > lim->max_line)
        return (request ? H1_E_URI_TOO_LONG : H1_E_TOO_BIG);
    st = request ? parse_request_line(&ln, hp) : parse_status_line(&ln, hp);
    if (st != H1_DONE)
        return (st);
    for (;;) {
        if (pos > lim->max_head)
            return (H1_E_TOO_BIG);
        start = pos;
        ls = next_line(buf, len, &pos, &ln);
        if (ls == LINE_BARE_CR)
            return (H1_E_SYNTAX);
        if (ls == LINE_MORE) {
            if (len - start > lim->max_line || len > lim->max_head)
                return (H1_E_TOO_BIG);
            return (H1_MORE);
        }
        if (ln.len > lim->max_line)
            return (H1_E_TOO_BIG);
        if (ln.len == 0)
            break;
        st = parse_field(&ln, hp, lim->max_hdr);
        if (st != H1_DONE)
            return (st);
    }
    if (pos > lim->max_head)
        return (H1_E_TOO_BIG);
    *used = pos;
    return (H1_DONE);
}

enum h1_status
h1_parse_request(const char *buf, size_t len, const struct h1_limits *lim, struct http *out,
                 size_t *used)
{
    return (parse_head(buf, len, lim, out, used, true));
}

enum h1_status
h1_parse_response(const char *buf, size_t len, const struct h1_limits *lim, struct http *out,
                  size_t *used)
{
    return (parse_head(buf, len, lim, out, used, false));
}
