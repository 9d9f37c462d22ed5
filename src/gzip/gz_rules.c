/*
 * When compression is used: what a client's Accept-Encoding allows and
 * prefers among the codings at hand, which responses are worth
 * compressing, and how a head changes with its body.  Pure functions
 * over header values; called by fetches and deliveries on any worker, no
 * state, no lock.
 */
#include "config.h"

#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "surogat/defs.h"
#include "surogat/gz.h"
#include "surogat/http.h"
#include "surogat/par.h"
#include "surogat/sb.h"
#include "surogat/ws.h"

/* ---- Accept-Encoding ---- */

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

static const char *const coding_names[GZ_C__N] = {
    [GZ_C_IDENTITY] = "identity",
    [GZ_C_GZIP] = "gzip",
    [GZ_C_BR] = "br",
    [GZ_C_ZSTD] = "zstd",
};

/* The coding a token names: x-gzip is gzip (RFC 9110 8.4.1.3); -1 for others. */
static int
coding_of(const char *p, size_t len)
{
    if (token_eq(p, len, "x-gzip"))
        return (GZ_C_GZIP);
    for (int c = 0; c < GZ_C__N; c++)
        if (token_eq(p, len, coding_names[c]))
            return (c);
    return (-1);
}

void
gz_ae_init(struct gz_ae *ae)
{
    ae->present = false;
    ae->star = -1;
    for (int c = 0; c < GZ_C__N; c++)
        ae->q[c] = -1;
}

void
gz_ae_add(struct gz_ae *ae, const char *v, size_t len)
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
        if (token_eq(s, (size_t)(ce - s), "*")) {
            ae->star = SRG_MAX(ae->star, w);
        } else {
            int c = coding_of(s, (size_t)(ce - s));

            if (c >= 0)
                ae->q[c] = SRG_MAX(ae->q[c], w);
        }
    }
}

void
gz_ae_req(struct gz_ae *ae, const struct http *req)
{
    OBJ_CHECK(req, HTTP_MAGIC);
    gz_ae_init(ae);
    for (unsigned i = 0; i < req->nhdr; i++) {
        if (!http_name_eq(&req->hdr[i].name, "Accept-Encoding"))
            continue;
        ae->present = true;
        gz_ae_add(ae, req->hdr[i].val.b, req->hdr[i].val.len);
    }
}

int
gz_ae_weight(const struct gz_ae *ae, enum gz_coding c)
{
    SRG_ASSERT(c < GZ_C__N);
    /*
     * RFC 9110 would take a request without the field to accept any
     * coding; every cache and server sends such clients identity, as
     * tools and old clients expect, and so do we.
     */
    if (!ae->present)
        return (c == GZ_C_IDENTITY ? 1000 : 0);
    if (ae->q[c] >= 0)
        return (ae->q[c]);
    if (ae->star >= 0)
        return (ae->star);
    return (c == GZ_C_IDENTITY ? 1000 : 0);
}

bool
gz_ae_takes(const struct gz_ae *ae, enum gz_coding c)
{
    int q = gz_ae_weight(ae, c);

    /* A client that weighs identity above c prefers it: honour that. */
    return (q > 0 && !(ae->q[GZ_C_IDENTITY] > q));
}

static bool
ae_gzip(const struct gz_ae *ae)
{
    return (gz_ae_takes(ae, GZ_C_GZIP));
}

bool
gz_ae_gzip(const char *v, size_t len)
{
    struct gz_ae ae;

    AN(v != NULL || len == 0);
    gz_ae_init(&ae);
    ae.present = true;
    gz_ae_add(&ae, v, len);
    return (ae_gzip(&ae));
}

bool
gz_accepts(const struct http *req)
{
    struct gz_ae ae;

    gz_ae_req(&ae, req);
    return (ae_gzip(&ae));
}

/* ---- codings ---- */

const char *
gz_coding_name(enum gz_coding c)
{
    SRG_ASSERT(c < GZ_C__N);
    return (coding_names[c]);
}

int
gz_coding_of(const struct txt *v)
{
    return (coding_of(v->b, v->len));
}

int
gz_coding_level(enum gz_coding c)
{
    switch (c) {
    case GZ_C_GZIP:
        return ((int)par.gzip_level);
    case GZ_C_BR:
        return ((int)par.brotli_level);
    case GZ_C_ZSTD:
        return ((int)par.zstd_level);
    case GZ_C_IDENTITY:
    case GZ_C__N:
        break;
    }
    return (0);
}

enum gz_kind
gz_coding_encoder(enum gz_coding c)
{
    switch (c) {
    case GZ_C_GZIP:
        return (GZ_ENCODE);
    case GZ_C_BR:
        return (GZ_ENCODE_BR);
    case GZ_C_ZSTD:
        return (GZ_ENCODE_ZSTD);
    case GZ_C_IDENTITY:
    case GZ_C__N:
        break;
    }
    SRG_WRONG("gz_coding_encoder");
}

enum gz_kind
gz_coding_decoder(enum gz_coding c)
{
    switch (c) {
    case GZ_C_GZIP:
        return (GZ_DECODE);
    case GZ_C_BR:
        return (GZ_DECODE_BR);
    case GZ_C_ZSTD:
        return (GZ_DECODE_ZSTD);
    case GZ_C_IDENTITY:
    case GZ_C__N:
        break;
    }
    SRG_WRONG("gz_coding_decoder");
}

int
gz_formats(const char *list, enum gz_coding *out, unsigned *n, struct sb *err)
{
    const char *p = list;
    unsigned seen = 0;

    *n = 0;
    while (p != NULL && *p != '\0') {
        const char *s;
        int c;

        while (*p == ',' || is_ows(*p))
            p++;
        for (s = p; *p != '\0' && *p != ',' && !is_ows(*p); p++)
            continue;
        if (p == s)
            continue;
        c = coding_of(s, (size_t)(p - s));
        if (c < 0 || c == GZ_C_IDENTITY) {
            sb_printf(err, "'%.*s': not a compression format (br, zstd, gzip)", (int)(p - s), s);
            return (-1);
        }
        if (seen & GZ_SET(c)) {
            sb_printf(err, "'%.*s' named twice", (int)(p - s), s);
            return (-1);
        }
        seen |= GZ_SET(c);
        out[(*n)++] = (enum gz_coding)c;
    }
    return (0);
}

unsigned
gz_formats_now(enum gz_coding out[GZ_C__N])
{
    char buf[128];
    struct sb err;
    unsigned n;

    sb_init(&err, buf, sizeof buf);
    if (gz_formats(par.compress_formats, out, &n, &err) != 0)
        return (0);
    return (n);
}

/* The server's rank of c for ties: its place in pref, then the rest, identity last. */
static unsigned
rank(enum gz_coding c, const enum gz_coding *pref, unsigned npref)
{
    for (unsigned i = 0; i < npref; i++)
        if (pref[i] == c)
            return (i);
    return (c == GZ_C_IDENTITY ? 2 * GZ_C__N : GZ_C__N + (unsigned)c);
}

/* The best of the codings in set by the client's weight, ties by rank; -1 if none is accepted. */
static int
best_of(const struct gz_ae *ae, unsigned set, const enum gz_coding *pref, unsigned npref)
{
    int best = -1, bestq = 0;

    for (int c = 0; c < GZ_C__N; c++) {
        int q;

        if (!(set & GZ_SET(c)))
            continue;
        q = gz_ae_weight(ae, (enum gz_coding)c);
        if (q <= 0)
            continue;
        if (q > bestq || (q == bestq && rank((enum gz_coding)c, pref, npref) <
                                            rank((enum gz_coding)best, pref, npref))) {
            best = c;
            bestq = q;
        }
    }
    return (best);
}

int
gz_ae_best(const struct gz_ae *ae, unsigned set, const enum gz_coding *pref, unsigned npref)
{
    return (best_of(ae, set, pref, npref));
}

struct gz_pick
gz_negotiate(const struct gz_ae *ae, unsigned stored, const enum gz_coding *pref, unsigned npref)
{
    /* Cheapest to turn into identity first: nothing, then by decoding speed. */
    static const enum gz_coding by_decode[] = { GZ_C_IDENTITY, GZ_C_ZSTD, GZ_C_BR, GZ_C_GZIP };
    struct gz_pick pk = { GZ_C_IDENTITY, GZ_C_IDENTITY };
    unsigned makeable = 0;
    int c;

    stored &= GZ_SET(GZ_C__N) - 1;
    AN(stored);
    for (size_t i = 0; i < ARRAY_LEN(by_decode); i++) {
        if (stored & GZ_SET(by_decode[i])) {
            pk.from = by_decode[i];
            break;
        }
    }
    c = best_of(ae, stored, pref, npref);
    /*
     * A client weighing identity explicitly above every stored coding
     * prefers it, and decoding is cheap: honour that, as for gzip
     * (gz_accepts()).
     */
    if (c >= 0 && !(ae->q[GZ_C_IDENTITY] > gz_ae_weight(ae, (enum gz_coding)c))) {
        pk.send = pk.from = (enum gz_coding)c;
        return (pk);
    }
    if (gz_ae_weight(ae, GZ_C_IDENTITY) > 0)
        return (pk);
    /* Identity refused: encode to what the client takes, among the formats configured. */
    for (unsigned i = 0; i < npref; i++)
        makeable |= GZ_SET(pref[i]);
    c = best_of(ae, makeable & ~GZ_SET(GZ_C_IDENTITY), pref, npref);
    if (c >= 0)
        pk.send = (enum gz_coding)c;
    return (pk);
}

/* The held coding cheapest to turn into identity: itself, then by decoding speed. */
static enum gz_coding
quickest(unsigned held)
{
    static const enum gz_coding by_decode[] = { GZ_C_IDENTITY, GZ_C_ZSTD, GZ_C_BR, GZ_C_GZIP };

    for (size_t i = 0; i < ARRAY_LEN(by_decode); i++)
        if (held & GZ_SET(by_decode[i]))
            return (by_decode[i]);
    SRG_WRONG("no coding held");
}

struct gz_pick
gz_negotiate_held(const struct gz_ae *ae, enum gz_coding stored, unsigned copies,
                  const enum gz_coding *pref, unsigned npref)
{
    unsigned make = 0, held = GZ_SET(stored) | copies;
    struct gz_pick pk;
    int c;

    SRG_ASSERT(stored < GZ_C__N);
    held &= GZ_SET(GZ_C__N) - 1;
    if (gz_ae_takes(ae, stored)) {
        pk.send = stored;
    } else {
        /*
         * Not taken: the coding it weighs highest among those it takes that
         * can be made -- identity unless it takes one ("deflate, gzip;q=0.8"
         * asks for gzip: identity's implicit weight does not count).
         */
        for (unsigned i = 0; i < npref; i++)
            if (gz_ae_takes(ae, pref[i]))
                make |= GZ_SET(pref[i]);
        c = best_of(ae, make, pref, npref);
        pk.send = c >= 0 ? (enum gz_coding)c : GZ_C_IDENTITY;
    }
    pk.from = held & GZ_SET(pk.send) ? pk.send : quickest(held);
    return (pk);
}

const char *
gz_ae_norm(const struct http *req)
{
    enum gz_coding formats[GZ_C__N];
    unsigned n = gz_formats_now(formats);
    struct gz_ae ae;
    int c;

    gz_ae_req(&ae, req);
    c = gz_ae_best(&ae, GZ_SET(GZ_C_GZIP) | GZ_SET(GZ_C_BR) | GZ_SET(GZ_C_ZSTD), formats, n);
    return (c >= 0 && gz_ae_takes(&ae, (enum gz_coding)c) ? coding_names[c] : NULL);
}

size_t
gz_ae_offer(char *buf, size_t cap)
{
    enum gz_coding formats[GZ_C__N];
    unsigned n = gz_formats_now(formats);
    bool gzip = false;
    struct sb sb;

    sb_init(&sb, buf, cap);
    for (unsigned i = 0; i < n; i++) {
        sb_printf(&sb, "%s%s", i > 0 ? ", " : "", coding_names[formats[i]]);
        gzip = gzip || formats[i] == GZ_C_GZIP;
    }
    if (!gzip)
        sb_printf(&sb, "%sgzip", n > 0 ? ", " : "");
    AN(sb_ok(&sb));
    return (sb.len);
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
    return (coding_of(v->b, v->len) == GZ_C_GZIP);
}

bool
gz_is_gzip(const struct http *resp)
{
    const struct txt *ce = http_value(resp, "Content-Encoding");

    return (ce != NULL && http_count(resp, "Content-Encoding") == 1 && gz_coding_is_gzip(ce));
}

int
gz_resp_coding(const struct http *resp)
{
    const struct txt *ce = http_value(resp, "Content-Encoding");

    OBJ_CHECK(resp, HTTP_MAGIC);
    if (ce == NULL)
        return (GZ_C_IDENTITY);
    return (http_count(resp, "Content-Encoding") == 1 ? coding_of(ce->b, ce->len) : -1);
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

/* The ETag suffix of a coding's own validator ("-br"), or NULL for gzip and identity. */
static const char *
etag_suffix(enum gz_coding c)
{
    return (c == GZ_C_BR ? "br" : c == GZ_C_ZSTD ? "zstd" : NULL);
}

/*
 * Each ETag made weak (the bytes are no longer the origin's), with
 * "-suffix" before its closing quote when suffix is not NULL -- a weak one
 * too then, so that every coding has its own.  A weak ETag that ends in
 * "-strip" loses that first: it was made for the coding the head said
 * before.
 */
static int
weaken_etags(struct http *h, struct ws *ws, const char *strip, const char *suffix)
{
    size_t sl = suffix != NULL ? strlen(suffix) + 1 : 0;
    size_t tl = strip != NULL ? strlen(strip) + 1 : 0;

    for (unsigned i = 0; i < h->nhdr; i++) {
        struct txt *v = &h->hdr[i].val;
        size_t body, n;
        bool weak, cut;
        char *w;

        if (!http_name_eq(&h->hdr[i].name, "ETag"))
            continue;
        weak = v->len >= 4 && memcmp(v->b, "W/\"", 3) == 0;
        cut = weak && tl > 0 && v->len >= 4 + tl && v->b[v->len - 1 - tl] == '-' &&
              memcmp(v->b + v->len - tl, strip, tl - 1) == 0;
        if ((!weak && (v->len < 2 || v->b[0] != '"')) || v->b[v->len - 1] != '"' ||
            (weak && sl == 0 && !cut))
            continue;
        body = weak ? v->len - 3 : v->len - 1; /* from the opening quote, without the closing */
        if (cut)
            body -= tl;
        n = 2 + body + sl + 1;
        w = ws_alloc(ws, n);
        if (w == NULL)
            return (-1);
        memcpy(w, "W/", 2);
        memcpy(w + 2, v->b + (weak ? 2 : 0), body);
        if (sl > 0) {
            w[2 + body] = '-';
            memcpy(w + 3 + body, suffix, sl - 1);
        }
        w[n - 1] = '"';
        *v = (struct txt){ w, n };
    }
    return (0);
}

bool
gz_etag_derived(const struct txt *stored, const struct txt *origin, enum gz_coding c)
{
    const char *sfx = etag_suffix(c);
    size_t sl = sfx != NULL ? strlen(sfx) + 1 : 0, ol;

    if (origin->len < 2 || origin->b[0] != '"' || origin->b[origin->len - 1] != '"')
        return (false);
    ol = origin->len - 1; /* without the closing quote */
    return (
        stored->len == 2 + ol + sl + 1 && memcmp(stored->b, "W/", 2) == 0 &&
        memcmp(stored->b + 2, origin->b, ol) == 0 &&
        (sl == 0 || (stored->b[2 + ol] == '-' && memcmp(stored->b + 3 + ol, sfx, sl - 1) == 0)) &&
        stored->b[stored->len - 1] == '"');
}

int
gz_etag_origin(struct txt *v, enum gz_coding c, struct ws *ws)
{
    const char *sfx = etag_suffix(c);
    size_t sl = sfx != NULL ? strlen(sfx) + 1 : 0;
    char *w;

    if (sl == 0 || v->len < 4 + sl || memcmp(v->b, "W/\"", 3) != 0 || v->b[v->len - 1] != '"' ||
        v->b[v->len - 1 - sl] != '-' || memcmp(v->b + v->len - sl, sfx, sl - 1) != 0)
        return (0);
    if ((w = ws_alloc(ws, v->len - sl)) == NULL)
        return (-1);
    memcpy(w, v->b, v->len - 1 - sl);
    w[v->len - 1 - sl] = '"';
    *v = (struct txt){ w, v->len - sl };
    return (0);
}

int
gz_head_coding(struct http *h, struct ws *ws, enum gz_coding from, enum gz_coding send)
{
    OBJ_CHECK(h, HTTP_MAGIC);
    SRG_ASSERT(from < GZ_C__N && send < GZ_C__N);
    if (!http_has_token(h, "Vary", "Accept-Encoding") && !http_has_token(h, "Vary", "*") &&
        http_add(h, TXT_LIT("Vary"), TXT_LIT("Accept-Encoding")) != 0)
        return (-1);
    if (from == send)
        return (0);
    http_unset(h, "Content-Encoding");
    http_unset(h, "Content-Length");
    if (send != GZ_C_IDENTITY &&
        http_add(h, TXT_LIT("Content-Encoding"),
                 (struct txt){ coding_names[send], strlen(coding_names[send]) }) != 0)
        return (-1);
    return (weaken_etags(h, ws, etag_suffix(from), etag_suffix(send)));
}

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
    return (weaken_etags(h, ws, NULL, NULL));
}
