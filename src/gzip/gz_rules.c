/*
 * When gzip is used: what a client's Accept-Encoding allows, which
 * responses are worth compressing, and how a head changes with its body.
 * Pure functions over header values; called by fetches and deliveries
 * on any worker, no state, no lock.
 */
#include "config.h"

#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "surogat/defs.h"
#include "surogat/gz.h"
#include "surogat/http.h"
#include "surogat/ws.h"

/* ---- Accept-Encoding ---- */

/* Weights as RFC 9110 12.4.2 writes them, in thousandths; -1: not mentioned. */
struct ae {
    int gzip;     /* gzip or x-gzip (RFC 9110 8.4.1.3: x-gzip is the same coding) */
    int star;     /* `*`: any coding not named */
    int identity; /* only an explicit weight counts: identity is acceptable by default */
};

static bool
is_ows(char c)
{
    return (c == ' ' || c == '\t');
}

static bool
token_eq(const char *p, size_t len, const char *want)
{
    return (len == strlen(want) && strncasecmp(p, want, len) == 0);
}

/* qvalue = ( "0" [ "." 0*3DIGIT ] ) / ( "1" [ "." 0*3("0") ] ), in thousandths; -1 if not. */
static int
qvalue(const char *p, size_t len)
{
    int q, scale = 100;

    if (len == 0 || (p[0] != '0' && p[0] != '1'))
        return (-1);
    q = (p[0] - '0') * 1000;
    if (len == 1)
        return (q);
    if (p[1] != '.' || len > 5)
        return (-1);
    for (size_t i = 2; i < len; i++, scale /= 10) {
        if (p[i] < '0' || p[i] > '9')
            return (-1);
        q += (p[i] - '0') * scale;
    }
    return (q > 1000 ? -1 : q);
}

/*
 * One element: coding *( OWS ";" OWS name OWS "=" OWS value ).  Its
 * weight, 1000 without a q, or -1 when a q parameter is malformed (the
 * element is then ignored: guessing a weight could send gzip to a client
 * that refused it).
 */
static int
element_weight(const char *p, const char *e)
{
    int w = 1000;

    while (p < e) {
        const char *n, *ne, *v, *ve;

        if (*p != ';')
            return (-1);
        for (p++; p < e && is_ows(*p); p++)
            continue;
        for (n = p; p < e && *p != '=' && *p != ';' && !is_ows(*p); p++)
            continue;
        ne = p;
        while (p < e && is_ows(*p))
            p++;
        if (p == e || *p != '=')
            return (-1);
        for (p++; p < e && is_ows(*p); p++)
            continue;
        for (v = p; p < e && *p != ';' && !is_ows(*p); p++)
            continue;
        ve = p;
        while (p < e && is_ows(*p))
            p++;
        if (token_eq(n, (size_t)(ne - n), "q")) {
            w = qvalue(v, (size_t)(ve - v));
            if (w < 0)
                return (-1);
        }
    }
    return (w);
}

static void
ae_scan(struct ae *ae, const char *v, size_t len)
{
    const char *p = v, *e = v + len;

    while (p < e) {
        const char *s, *ce, *ee;
        int w;

        while (p < e && (is_ows(*p) || *p == ','))
            p++;
        if (p == e)
            break;
        for (s = p; p < e && *p != ',' && *p != ';' && !is_ows(*p); p++)
            continue;
        ce = p;
        while (p < e && is_ows(*p))
            p++;
        for (ee = p; ee < e && *ee != ','; ee++)
            continue;
        w = element_weight(p, ee);
        p = ee;
        if (w < 0)
            continue;
        if (token_eq(s, (size_t)(ce - s), "gzip") || token_eq(s, (size_t)(ce - s), "x-gzip"))
            ae->gzip = SRG_MAX(ae->gzip, w);
        else if (token_eq(s, (size_t)(ce - s), "*"))
            ae->star = SRG_MAX(ae->star, w);
        else if (token_eq(s, (size_t)(ce - s), "identity"))
            ae->identity = SRG_MAX(ae->identity, w);
    }
}

static bool
ae_gzip(const struct ae *ae)
{
    int q = ae->gzip >= 0 ? ae->gzip : ae->star >= 0 ? ae->star : 0;

    /* A client that weighs identity above gzip prefers it: honour that. */
    return (q > 0 && !(ae->identity > q));
}

bool
gz_ae_gzip(const char *v, size_t len)
{
    struct ae ae = { -1, -1, -1 };

    AN(v != NULL || len == 0);
    ae_scan(&ae, v, len);
    return (ae_gzip(&ae));
}

bool
gz_accepts(const struct http *req)
{
    struct ae ae = { -1, -1, -1 };
    bool any = false;

    OBJ_CHECK(req, HTTP_MAGIC);
    for (unsigned i = 0; i < req->nhdr; i++) {
        if (!http_name_eq(&req->hdr[i].name, "Accept-Encoding"))
            continue;
        any = true;
        ae_scan(&ae, req->hdr[i].val.b, req->hdr[i].val.len);
    }
    /*
     * RFC 9110 would take a request without the field to accept any
     * coding; every cache and server sends such clients identity, as
     * tools and old clients expect, and so do we.
     */
    return (any && ae_gzip(&ae));
}

/* ---- which responses ---- */

bool
gz_type_match(const char *list, const struct txt *ctype)
{
    const char *t = ctype->b, *te = ctype->b + ctype->len, *p = list;
    size_t tlen;

    if (list == NULL)
        return (false);
    while (t < te && is_ows(*t))
        t++;
    for (tlen = 0; t + tlen < te && t[tlen] != ';' && !is_ows(t[tlen]); tlen++)
        continue;
    if (tlen == 0)
        return (false);
    while (*p != '\0') {
        const char *s;
        size_t n;

        while (*p == ',' || is_ows(*p))
            p++;
        for (s = p; *p != '\0' && *p != ',' && !is_ows(*p); p++)
            continue;
        n = (size_t)(p - s);
        if (n == 0)
            continue;
        if (n >= 2 && s[n - 2] == '/' && s[n - 1] == '*') {
            /* "text/ *": the type and its slash */
            if (tlen > n - 1 && strncasecmp(t, s, n - 1) == 0)
                return (true);
        } else if (n == tlen && strncasecmp(t, s, n) == 0) {
            return (true);
        }
    }
    return (false);
}

bool
gz_coding_is_gzip(const struct txt *v)
{
    return (token_eq(v->b, v->len, "gzip") || token_eq(v->b, v->len, "x-gzip"));
}

bool
gz_is_gzip(const struct http *resp)
{
    const struct txt *ce = http_value(resp, "Content-Encoding");

    return (ce != NULL && http_count(resp, "Content-Encoding") == 1 && gz_coding_is_gzip(ce));
}

bool
gz_compressible(const struct http *resp, uint64_t len, const char *types, uint64_t min_size)
{
    const struct txt *ct = http_value(resp, "Content-Type");
    const struct http_hdr *ce;

    OBJ_CHECK(resp, HTTP_MAGIC);
    if (resp->status != 200 || ct == NULL || len == 0)
        return (false);
    if (len != UINT64_MAX && len < min_size)
        return (false); /* too small to gain: the gzip header and trailer alone are 18 bytes */
    for (unsigned i = 0; i < resp->nhdr; i++) {
        ce = &resp->hdr[i];
        /* Compressing twice helps nobody; another coding we could not undo for a client. */
        if (http_name_eq(&ce->name, "Content-Encoding") &&
            !token_eq(ce->val.b, ce->val.len, "identity"))
            return (false);
    }
    /* Some bodies must arrive as sent: RFC 9111 5.2.2.6, and ranges of a representation. */
    if (http_has_token(resp, "Cache-Control", "no-transform") ||
        http_find(resp, "Content-Range") != NULL)
        return (false);
    return (gz_type_match(types, ct));
}

/* ---- heads ---- */

int
gz_head(struct http *h, struct ws *ws, enum gz_head what)
{
    OBJ_CHECK(h, HTTP_MAGIC);
    if (!http_has_token(h, "Vary", "Accept-Encoding") && !http_has_token(h, "Vary", "*") &&
        http_add(h, TXT_LIT("Vary"), TXT_LIT("Accept-Encoding")) != 0)
        return (-1);
    if (what == GZ_HEAD_VARY)
        return (0);
    http_unset(h, "Content-Encoding");
    http_unset(h, "Content-Length");
    if (what == GZ_HEAD_ENCODED && http_add(h, TXT_LIT("Content-Encoding"), TXT_LIT("gzip")) != 0)
        return (-1);
    for (unsigned i = 0; i < h->nhdr; i++) {
        struct txt *v = &h->hdr[i].val;
        char *w;

        if (!http_name_eq(&h->hdr[i].name, "ETag") || v->len == 0 || v->b[0] != '"')
            continue;
        w = ws_alloc(ws, v->len + 2);
        if (w == NULL)
            return (-1);
        memcpy(w, "W/", 2);
        memcpy(w + 2, v->b, v->len);
        *v = (struct txt){ w, v->len + 2 };
    }
    return (0);
}
