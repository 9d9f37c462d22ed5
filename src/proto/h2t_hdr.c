/*
 * HTTP/2 request header blocks: each field checked as RFC 9113 section 8
 * says, as the reader decodes it, and kept for the request.
 *
 * nghttp2's own HTTP checks are off (h2t.c), so that every rule is here
 * once, counted by kind, and so that what reaches an HTTP/1 backend can
 * never change its framing: a name is a lowercase token, a value holds no
 * CR, LF or NUL, :path no space.  A malformed block is a stream error
 * (reset with PROTOCOL_ERROR, section 8.1.1); a well-formed request that
 * is wrong in HTTP's terms (Host against :authority, too large) is
 * answered with a status instead.
 *
 * Names and values are copied into the stream's own buffer, hb, because
 * the stream's request outlives the reader's input buffer and runs on
 * another worker; fields are kept as offsets until the block is complete,
 * as hb may move while it grows.  Pure functions of their input and the
 * parameters: the reader calls them under the connection lock.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "surogat/defs.h"
#include "surogat/http.h"
#include "surogat/par.h"

#include "h2t_priv.h"

/* RFC 9113 section 6.5.2: the size of a field in a header list. */
#define H2_FIELD_OVERHEAD 32

static const char *const pseudo_names[H2P__N] = { ":method", ":scheme", ":authority", ":path" };

/* RFC 9113 section 8.2.2: connection-specific fields, which HTTP/2 forbids. */
static const char *const conn_fields[] = { "connection", "keep-alive", "proxy-connection",
                                           "transfer-encoding", "upgrade" };

static void
verdict(struct h2_hdrs *h, enum h2_verdict v)
{
    if (v > h->verdict)
        h->verdict = v;
}

/* RFC 9110 section 5.6.2 token; field names without uppercase (RFC 9113 section 8.2.1). */
static bool
token_ok(const uint8_t *p, size_t n, bool upper)
{
    static const char extra[] = "!#$%&'*+-.^_`|~";

    if (n == 0)
        return (false);
    for (size_t i = 0; i < n; i++) {
        uint8_t ch = p[i];
        if ((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
            (upper && ch >= 'A' && ch <= 'Z'))
            continue;
        if (ch == 0 || strchr(extra, ch) == NULL)
            return (false);
    }
    return (true);
}

/* RFC 9113 section 8.2.1: no NUL, CR or LF; no whitespace first or last. */
static bool
value_ok(const uint8_t *p, size_t n)
{
    if (n > 0 && (p[0] == ' ' || p[0] == '\t' || p[n - 1] == ' ' || p[n - 1] == '\t'))
        return (false);
    for (size_t i = 0; i < n; i++)
        if (p[i] == '\0' || p[i] == '\r' || p[i] == '\n')
            return (false);
    return (true);
}

static bool
is(const uint8_t *p, size_t n, const char *want)
{
    return (n == strlen(want) && memcmp(p, want, n) == 0);
}

/*
 * Append n bytes to hb (p NULL: room for them); their offset, or
 * UINT32_MAX when hb may not grow (the list is too big).
 */
static uint32_t
keep(struct h2_hdrs *h, const uint8_t *p, size_t n)
{
    size_t want = h->hb_len + n, cap = h->hb_cap > 0 ? h->hb_cap : 512;
    uint32_t off;

    if (want > 2 * par.http_req_size + 1024)
        return (UINT32_MAX); /* only joined cookies go past http_req_size, and not twice */
    while (cap < want)
        cap *= 2;
    if (cap != h->hb_cap) {
        h->hb = realloc(h->hb, cap);
        AN(h->hb);
        h->hb_cap = cap;
    }
    off = (uint32_t)h->hb_len;
    if (n > 0 && p != NULL)
        memcpy(h->hb + off, p, n);
    h->hb_len = want;
    return (off);
}

static void
keep_field(struct h2_hdrs *h, const uint8_t *name, size_t nl, const uint8_t *value, size_t vl)
{
    struct h2_field fld;

    if (h->nf == par.http_max_hdr) {
        verdict(h, H2_ANSWER_431);
        return;
    }
    fld.no = keep(h, name, nl);
    fld.vo = keep(h, value, vl);
    if (fld.no == UINT32_MAX || fld.vo == UINT32_MAX) {
        verdict(h, H2_ANSWER_431);
        return;
    }
    fld.nl = (uint32_t)nl;
    fld.vl = (uint32_t)vl;
    if (h->nf == h->fcap) {
        h->fcap = h->fcap > 0 ? 2 * h->fcap : 16;
        h->f = realloc(h->f, h->fcap * sizeof *h->f);
        AN(h->f);
    }
    h->f[h->nf++] = fld;
}

/* content-length: digits only, and every one the same (RFC 9110 section 8.6). */
static void
content_length(struct h2_hdrs *h, const uint8_t *v, size_t vl)
{
    uint64_t n = 0;

    if (vl == 0 || vl > 19) {
        verdict(h, H2_BAD_FIELD);
        return;
    }
    for (size_t i = 0; i < vl; i++) {
        if (v[i] < '0' || v[i] > '9') {
            verdict(h, H2_BAD_FIELD);
            return;
        }
        n = n * 10 + (uint64_t)(v[i] - '0');
    }
    if (h->has_clen && h->clen != n)
        verdict(h, H2_BAD_FIELD);
    h->has_clen = true;
    h->clen = n;
}

static void
pseudo_field(struct h2_hdrs *h, const uint8_t *name, size_t nl, const uint8_t *value, size_t vl)
{
    int which = -1;

    for (int i = 0; i < H2P__N; i++)
        if (is(name, nl, pseudo_names[i]))
            which = i;
    /* Unknown (:protocol without extended CONNECT, :status), after a regular one, twice, in trailers. */
    if (which < 0 || h->regular || h->trailers || (h->have & (1u << which)) || vl == 0) {
        verdict(h, H2_BAD_PSEUDO);
        return;
    }
    h->have |= 1u << which;
    if (which == H2P_PATH) {
        /* It becomes an HTTP/1 request line: no space or control character may split it. */
        for (size_t i = 0; i < vl; i++)
            if (value[i] <= ' ' || value[i] == 0x7f) {
                verdict(h, H2_BAD_PSEUDO);
                return;
            }
    }
    if (which == H2P_METHOD && !token_ok(value, vl, true)) {
        verdict(h, H2_BAD_PSEUDO);
        return;
    }
    if (which == H2P_SCHEME && !token_ok(value, vl, true)) {
        verdict(h, H2_BAD_PSEUDO); /* ALPHA *( ALPHA / DIGIT / "+" / "-" / "." ), near enough */
        return;
    }
    h->pseudo[which].vo = keep(h, value, vl);
    h->pseudo[which].vl = (uint32_t)vl;
    if (h->pseudo[which].vo == UINT32_MAX)
        verdict(h, H2_ANSWER_431);
}

void
h2t__hdr_field(struct h2_hdrs *h, const uint8_t *name, size_t nl, const uint8_t *value,
               size_t vl)
{
    h->list_size += nl + vl + H2_FIELD_OVERHEAD;
    /* As an HTTP/1 head: no field longer than a header line may be, none over the size. */
    if (h->list_size > par.http_req_size || nl + vl + 2 > par.http_req_hdr_len)
        verdict(h, H2_ANSWER_431);
    if (!value_ok(value, vl)) {
        verdict(h, nl > 0 && name[0] == ':' ? H2_BAD_PSEUDO : H2_BAD_FIELD);
        return;
    }
    if (nl > 0 && name[0] == ':') {
        pseudo_field(h, name, nl, value, vl);
        return;
    }
    h->regular = true;
    if (!token_ok(name, nl, false)) {
        verdict(h, H2_BAD_FIELD);
        return;
    }
    for (size_t i = 0; i < ARRAY_LEN(conn_fields); i++)
        if (is(name, nl, conn_fields[i])) {
            verdict(h, H2_BAD_FIELD);
            return;
        }
    if (is(name, nl, "te")) {
        if (!(vl == 8 && strncasecmp((const char *)value, "trailers", 8) == 0))
            verdict(h, H2_BAD_FIELD);
        return; /* "TE: trailers" is about our response: not for the backend's */
    }
    if (h->trailers)
        return; /* checked; trailer fields are not passed on */
    if (is(name, nl, "content-length"))
        content_length(h, value, vl);
    if (is(name, nl, "expect")) {
        if (vl == 12 && strncasecmp((const char *)value, "100-continue", 12) == 0) {
            h->expect_100 = true;
            return; /* answered here, as HTTP/1's is */
        }
        verdict(h, H2_ANSWER_417);
        return;
    }
    if (h->verdict < H2_ANSWER_431)
        keep_field(h, name, nl, value, vl);
}

static bool
field_is(const struct h2_hdrs *h, const struct h2_field *f, const char *name)
{
    return (f->nl == strlen(name) && memcmp(h->hb + f->no, name, f->nl) == 0);
}

/* RFC 9113 section 8.2.3: cookie crumbs become one field again, joined by "; ". */
static void
join_cookies(struct h2_hdrs *h)
{
    unsigned n = 0, first = 0, k = 0;
    size_t len = 0, at;
    uint32_t off;

    for (unsigned i = 0; i < h->nf; i++)
        if (h->f[i].nl > 0 && field_is(h, &h->f[i], "cookie")) {
            if (n++ == 0)
                first = i;
            len += h->f[i].vl;
        }
    if (n < 2)
        return;
    len += 2 * (n - 1);
    off = keep(h, NULL, len);
    if (off == UINT32_MAX) {
        verdict(h, H2_ANSWER_431);
        return;
    }
    at = off;
    for (unsigned i = 0; i < h->nf; i++) {
        if (h->f[i].nl == 0 || !field_is(h, &h->f[i], "cookie"))
            continue;
        if (k > 0) {
            memcpy(h->hb + at, "; ", 2);
            at += 2;
        }
        memcpy(h->hb + at, h->hb + h->f[i].vo, h->f[i].vl);
        at += h->f[i].vl;
        if (k++ > 0)
            h->f[i].nl = 0; /* gone: joined into the first */
    }
    h->f[first].vo = off;
    h->f[first].vl = (uint32_t)len;
}

void
h2t__hdr_end(struct h2_hdrs *h)
{
    bool connect;

    if (h->trailers || h->verdict >= H2_BAD_PSEUDO)
        return;
    connect = (h->have & (1u << H2P_METHOD)) && h->pseudo[H2P_METHOD].vl == 7 &&
              memcmp(h->hb + h->pseudo[H2P_METHOD].vo, "CONNECT", 7) == 0;
    if (connect) {
        /* RFC 9113 section 8.5: :method and :authority only.  We are no tunnel. */
        if (h->have != ((1u << H2P_METHOD) | (1u << H2P_AUTHORITY)))
            verdict(h, H2_BAD_PSEUDO);
        else
            verdict(h, H2_ANSWER_501);
        return;
    }
    if ((h->have & ((1u << H2P_METHOD) | (1u << H2P_SCHEME) | (1u << H2P_PATH))) !=
        ((1u << H2P_METHOD) | (1u << H2P_SCHEME) | (1u << H2P_PATH))) {
        verdict(h, H2_BAD_PSEUDO);
        return;
    }
    /* Origin-form, or "*" for OPTIONS only (section 8.3.1). */
    {
        const char *path = h->hb + h->pseudo[H2P_PATH].vo;
        size_t pl = h->pseudo[H2P_PATH].vl;
        bool options = h->pseudo[H2P_METHOD].vl == 7 &&
                       memcmp(h->hb + h->pseudo[H2P_METHOD].vo, "OPTIONS", 7) == 0;
        if (path[0] != '/' && !(pl == 1 && path[0] == '*' && options)) {
            verdict(h, H2_BAD_PSEUDO);
            return;
        }
    }
    if (h->verdict != H2_OK)
        return;
    {
        /* Host: once at most, and what :authority says when both are there. */
        const struct h2_field *host = NULL;
        unsigned nhost = 0;
        for (unsigned i = 0; i < h->nf; i++)
            if (h->f[i].nl > 0 && field_is(h, &h->f[i], "host")) {
                host = &h->f[i];
                nhost++;
            }
        if (nhost > 1 || (host == NULL && !(h->have & (1u << H2P_AUTHORITY))))
            verdict(h, H2_ANSWER_400);
        else if (host != NULL && (h->have & (1u << H2P_AUTHORITY)) &&
                 (host->vl != h->pseudo[H2P_AUTHORITY].vl ||
                  strncasecmp(h->hb + host->vo, h->hb + h->pseudo[H2P_AUTHORITY].vo, host->vl) !=
                      0))
            verdict(h, H2_ANSWER_400);
    }
    join_cookies(h);
}

int
h2t__hdr_request(const struct h2_hdrs *h, struct http *hp)
{
    bool has_host = false;

    SRG_ASSERT(h->verdict == H2_OK);
    hp->method = (struct txt){ h->hb + h->pseudo[H2P_METHOD].vo, h->pseudo[H2P_METHOD].vl };
    hp->url = (struct txt){ h->hb + h->pseudo[H2P_PATH].vo, h->pseudo[H2P_PATH].vl };
    hp->proto = 20;
    for (unsigned i = 0; i < h->nf; i++) {
        const struct h2_field *f = &h->f[i];
        if (f->nl == 0)
            continue;
        if (field_is(h, f, "host"))
            has_host = true;
        if (http_add(hp, (struct txt){ h->hb + f->no, f->nl },
                     (struct txt){ h->hb + f->vo, f->vl }) != 0)
            return (-1);
    }
    /* :authority is the Host an HTTP/1 backend and the core know (RFC 9113 section 8.3.1). */
    if (!has_host && http_add(hp, TXT_LIT("Host"),
                              (struct txt){ h->hb + h->pseudo[H2P_AUTHORITY].vo,
                                            h->pseudo[H2P_AUTHORITY].vl }) != 0)
        return (-1);
    return (0);
}

void
h2t__hdr_free(struct h2_hdrs *h)
{
    free(h->hb);
    free(h->f);
    memset(h, 0, sizeof *h);
}
