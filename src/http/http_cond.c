/*
 * Conditional requests and byte ranges (RFC 9110 sections 13 and 14), as
 * pure functions of a request and the validators of the representation it
 * would get: whoever answers -- a cache hit, a miss cut from the fetched
 * response, a static file -- asks the same questions here.  No I/O, no
 * allocation.
 */
#include "config.h"

#include <stdint.h>
#include <string.h>
#include <strings.h>

#include "surogat/defs.h"
#include "surogat/fresh.h"
#include "surogat/http.h"

static bool
method_is(const struct http *req, const char *m)
{
    size_t l = strlen(m);

    return (req->method.len == l && memcmp(req->method.b, m, l) == 0);
}

/* Whether an entity-tag list (If-None-Match) matches etag, weakly (section 13.1.2). */
static bool
etag_list_match(const struct txt *list, const struct txt *etag)
{
    const char *p = list->b, *e = list->b + list->len;
    struct txt tag = *etag;

    if (tag.len > 2 && tag.b[0] == 'W' && tag.b[1] == '/') {
        tag.b += 2;
        tag.len -= 2;
    }
    while (p < e) {
        const char *s, *t;
        while (p < e && (*p == ' ' || *p == '\t' || *p == ','))
            p++;
        if (p < e && *p == '*')
            return (true);
        for (s = p; p < e && *p != ','; p++)
            continue;
        for (t = p; t > s && (t[-1] == ' ' || t[-1] == '\t'); t--)
            continue;
        if (t - s > 2 && s[0] == 'W' && s[1] == '/')
            s += 2;
        if ((size_t)(t - s) == tag.len && memcmp(s, tag.b, tag.len) == 0)
            return (true);
    }
    return (false);
}

bool
http_not_modified(const struct http *req, const struct txt *etag, const struct txt *lm)
{
    const struct http_hdr *inm, *ims;
    double t_ims, t_lm;

    OBJ_CHECK(req, HTTP_MAGIC);
    if (!method_is(req, "GET") && !method_is(req, "HEAD"))
        return (false);
    inm = http_find(req, "If-None-Match");
    if (inm != NULL)
        return (etag != NULL && etag_list_match(&inm->val, etag));
    ims = http_find(req, "If-Modified-Since");
    if (ims == NULL || lm == NULL)
        return (false);
    if (fresh_parse_date(ims->val.b, ims->val.len, &t_ims) != 0 ||
        fresh_parse_date(lm->b, lm->len, &t_lm) != 0)
        return (false);
    return (t_lm <= t_ims);
}

bool
http_is_conditional(const struct http *req)
{
    return (http_find(req, "If-None-Match") != NULL ||
            http_find(req, "If-Modified-Since") != NULL);
}

/* A decimal number of at most 2^62, so that sums and +1 never overflow. */
static const char *
range_num(const char *p, const char *e, uint64_t *v, bool *have)
{
    *v = 0;
    *have = false;
    for (; p < e && *p >= '0' && *p <= '9'; p++) {
        *v = *v * 10 + (uint64_t)(*p - '0');
        if (*v > (UINT64_C(1) << 62))
            return (NULL);
        *have = true;
    }
    return (p);
}

enum http_range
http_range(const struct http *req, const struct txt *etag, const struct txt *lm, uint64_t len,
           uint64_t *first, uint64_t *last)
{
    const struct http_hdr *rh, *ir;
    const char *p, *e;
    uint64_t a, b;
    bool have_a, have_b;

    OBJ_CHECK(req, HTTP_MAGIC);
    rh = http_find(req, "Range");
    if (rh == NULL || http_count(req, "Range") > 1)
        return (HTTP_RANGE_NONE);
    ir = http_find(req, "If-Range");
    if (ir != NULL) {
        /* Only a strong validator that matches exactly keeps the range (section 13.1.5). */
        if (!((etag != NULL && etag->len == ir->val.len && etag->len > 0 &&
               memcmp(etag->b, ir->val.b, etag->len) == 0 && etag->b[0] == '"') ||
              (lm != NULL && lm->len == ir->val.len && lm->len > 0 &&
               memcmp(lm->b, ir->val.b, lm->len) == 0)))
            return (HTTP_RANGE_NONE);
    }
    p = rh->val.b;
    e = p + rh->val.len;
    if (e - p < 6 || strncasecmp(p, "bytes=", 6) != 0)
        return (HTTP_RANGE_NONE);
    p = range_num(p + 6, e, &a, &have_a);
    if (p == NULL || p == e || *p != '-')
        return (HTTP_RANGE_NONE);
    p = range_num(p + 1, e, &b, &have_b);
    if (p != e || (!have_a && !have_b))
        return (HTTP_RANGE_NONE); /* several ranges or junk: a 200 is always a valid answer */
    if (!have_a) {                /* suffix: the last b bytes */
        if (b == 0 || len == 0)
            return (HTTP_RANGE_UNSATISFIABLE);
        *first = b >= len ? 0 : len - b;
        *last = len - 1;
        return (HTTP_RANGE_OK);
    }
    if (have_b && b < a)
        return (HTTP_RANGE_NONE);
    if (a >= len)
        return (HTTP_RANGE_UNSATISFIABLE);
    *first = a;
    *last = !have_b || b >= len ? len - 1 : b;
    return (HTTP_RANGE_OK);
}
