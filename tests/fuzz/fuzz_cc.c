/*
 * Fuzz the caching rules: cc_parse() and friends, the HTTP-date parser,
 * and the fresh_ decisions built on them.
 *
 * Input: lines separated by '\n'.  The first byte of each line picks the
 * header name (from names[] below, modulo), the rest is the value; each
 * value lives in its own exact-size heap copy so ASan sees any read past
 * it.  Every line is also fed to fresh_parse_date() alone.
 *
 * Invariants: deltas are CC_ABSENT or in 0..2^31; a bare and a qualified
 * no-cache (or private) never coexist; field lists point inside their
 * header value; parsing is deterministic; CC_NONE means "nothing"; every
 * lifetime is finite and >= 0; every enum result is a declared value; an
 * accepted IMF-fixdate prints back the same (day name aside).
 */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "surogat/http.h"
#include "surogat/cc.h"
#include "surogat/fresh.h"
#include "surogat/sb.h"
#include "surogat/tim.h"

#include "fuzz.h"

#define MAXLINE 16

static const char *const names[] = {
    "Cache-Control",
    "CDN-Cache-Control",
    "Surrogate-Control",
    "Pragma",
    "Date",
    "Expires",
    "Age",
    "Last-Modified",
    "ETag",
    "Vary",
    "Set-Cookie",
    "Authorization",
    "cache-control",
    "SURROGATE-CONTROL",
};

static bool
inside(const struct txt *t, const struct http *hp)
{
    for (unsigned i = 0; i < hp->nhdr; i++) {
        const struct txt *v = &hp->hdr[i].val;

        if (t->b >= v->b && t->b + t->len <= v->b + v->len)
            return true;
    }
    return false;
}

static void
check_delta(int64_t v)
{
    FUZZ_CHECK(v == CC_ABSENT || (v >= 0 && v <= CC_DELTA_MAX));
}

static void
check_cc(const struct cc *cc, enum cc_status st, const struct http *hp)
{
    char buf[64];
    struct cc again;
    struct sb sb;

    FUZZ_CHECK(st == CC_NONE || st == CC_OK || st == CC_E_SYNTAX);
    check_delta(cc->max_age);
    check_delta(cc->s_maxage);
    check_delta(cc->swr);
    check_delta(cc->sie);
    check_delta(cc->max_stale);
    check_delta(cc->min_fresh);
    FUZZ_CHECK(!((cc->flags & CC_NO_CACHE) && (cc->flags & CC_NO_CACHE_FIELDS)));
    FUZZ_CHECK(!((cc->flags & CC_PRIVATE) && (cc->flags & CC_PRIVATE_FIELDS)));
    if (cc->flags & CC_NO_CACHE_FIELDS)
        FUZZ_CHECK(cc->no_cache_fields.len > 0 && inside(&cc->no_cache_fields, hp));
    else
        FUZZ_CHECK(cc->no_cache_fields.b == NULL && cc->no_cache_fields.len == 0);
    if (cc->flags & CC_PRIVATE_FIELDS)
        FUZZ_CHECK(cc->private_fields.len > 0 && inside(&cc->private_fields, hp));
    else
        FUZZ_CHECK(cc->private_fields.b == NULL && cc->private_fields.len == 0);
    if (cc->flags & CC_MAX_STALE_ANY)
        FUZZ_CHECK(cc->max_stale == CC_DELTA_MAX);
    FUZZ_CHECK(((cc->flags & CC_MALFORMED) != 0) == (st == CC_E_SYNTAX));
    if (st == CC_NONE) {
        FUZZ_CHECK(cc->flags == 0 && cc->src == NULL);
        FUZZ_CHECK(cc->max_age == CC_ABSENT && cc->s_maxage == CC_ABSENT);
        FUZZ_CHECK(cc->swr == CC_ABSENT && cc->sie == CC_ABSENT);
        FUZZ_CHECK(cc->max_stale == CC_ABSENT && cc->min_fresh == CC_ABSENT);
    }
    sb_init(&sb, buf, sizeof buf); /* small: overflow is part of the test */
    cc_dump(cc, &sb);
    FUZZ_CHECK(sb.len < sizeof buf && buf[sb.len] == '\0');
    if (cc->src != NULL) {
        FUZZ_CHECK(cc_parse(hp, cc->src, &again) == st);
        FUZZ_CHECK(memcmp(&again, cc, sizeof again) == 0);
    }
}

static void
check_date(const char *s, size_t len)
{
    double t = 12345, t2;
    char out[TIM_HTTP_DATE_LEN + 1];

    if (fresh_parse_date(s, len, &t) != 0) {
        FUZZ_CHECK(t == 12345);
        return;
    }
    /* Years 0000..9999, whole seconds. */
    FUZZ_CHECK(t >= -62167219200.0 && t < 253402300801.0 && t == (double)(int64_t)t);
    FUZZ_CHECK(fresh_parse_date(s, len, &t2) == 0 && t2 == t);
    /* An IMF-fixdate after 1970 without a leap second prints back as itself. */
    if (len == 29 && s[3] == ',' && t >= 0 && t < 253402300800.0 && memcmp(s + 23, "60", 2)) {
        tim_http_date(t, out);
        FUZZ_CHECK(memcmp(out + 3, s + 3, 26) == 0);
        FUZZ_CHECK(fresh_parse_date(out, TIM_HTTP_DATE_LEN, &t2) == 0 && t2 == t);
    }
}

static void
check_fresh(const struct http *req, const struct http *resp, uint8_t seed)
{
    struct fresh_cfg cfg = FRESH_CFG_DEFAULT;
    char buf[256];
    struct sb sb;
    struct cc qcc, rcc;
    struct fresh_obj o;
    enum fresh_store st;
    enum fresh_src src;
    double l, now;

    if (seed & 1)
        cfg.default_ttl = 120;
    if (seed & 2)
        cfg.default_grace = 10;
    if (seed & 4)
        cfg.store_set_cookie = true;
    cc_parse_request(req, &qcc);
    cc_parse_response(resp, NULL, &rcc);
    st = fresh_storable(req, &qcc, resp, &rcc, &cfg);
    FUZZ_CHECK(st >= FRESH_STORE && st <= FRESH_NO_FRESHNESS_NO_VALIDATOR);
    FUZZ_CHECK(strcmp(fresh_store_name(st), "?") != 0);
    l = fresh_lifetime(resp, &rcc, 1e9, &cfg, &src);
    FUZZ_CHECK(isfinite(l) && l >= 0 && l <= (double)CC_DELTA_MAX + 1e13);
    FUZZ_CHECK(src >= FRESH_SRC_S_MAXAGE && src <= FRESH_SRC_NONE);
    if (src == FRESH_SRC_NONE)
        FUZZ_CHECK(l == 0);
    fresh_obj_init(&o, resp, &rcc, 1e9 - 1, 1e9, &cfg);
    sb_init(&sb, buf, sizeof buf);
    fresh_obj_dump(&o, &sb);
    FUZZ_CHECK(o.ttl == l && o.src == src);
    FUZZ_CHECK(isfinite(o.t_origin) && o.t_origin <= 1e9);
    FUZZ_CHECK(o.swr >= 0 && o.sie >= 0);
    if (o.flags & (FRESH_F_MUST_REVALIDATE | FRESH_F_NO_CACHE))
        FUZZ_CHECK(o.swr == 0 && o.sie == 0);
    for (now = 1e9 - 10; now < 1e9 + 1e6; now = now * 1.0000003 + 7) {
        enum fresh_verdict v = fresh_decide(&o, &qcc, now);

        FUZZ_CHECK(v >= FRESH_V_FRESH && v <= FRESH_V_GATEWAY_TIMEOUT);
        if (v == FRESH_V_FRESH)
            FUZZ_CHECK(now - o.t_origin < o.ttl);
        if (o.flags & FRESH_F_NO_CACHE || qcc.flags & CC_NO_CACHE)
            FUZZ_CHECK(v == FRESH_V_REVALIDATE || v == FRESH_V_GATEWAY_TIMEOUT);
        if (qcc.flags & CC_ONLY_IF_CACHED)
            FUZZ_CHECK(v != FRESH_V_REVALIDATE && v != FRESH_V_STALE_IF_ERROR);
    }
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct http_hdr hdrs[MAXLINE];
    struct http hp, req;
    char *copy[MAXLINE];
    unsigned n = 0;
    size_t off = 0;
    struct cc cc;

    http_init(&hp, hdrs, MAXLINE);
    while (off < size && n < MAXLINE) {
        const uint8_t *nl = memchr(data + off, '\n', size - off);
        size_t len = (nl != NULL ? (size_t)(nl - data) : size) - off;
        const char *name = names[data[off] % (sizeof names / sizeof names[0])];

        /* The value without the selector byte, in its own exact-size allocation. */
        copy[n] = malloc(len > 1 ? len - 1 : 1);
        FUZZ_CHECK(copy[n] != NULL);
        if (len > 1)
            memcpy(copy[n], data + off + 1, len - 1);
        check_date(copy[n], len > 1 ? len - 1 : 0);
        FUZZ_CHECK(http_add(&hp, (struct txt){ name, strlen(name) },
                            (struct txt){ copy[n], len > 1 ? len - 1 : 0 }) == 0);
        n++;
        off += len + 1;
    }
    check_date((const char *)data, size);

    for (size_t i = 0; i < 3; i++)
        check_cc(&cc, cc_parse(&hp, names[i], &cc), &hp);
    cc_parse_request(&hp, &cc);
    if (cc.src != NULL && strcmp(cc.src, "Pragma") == 0)
        FUZZ_CHECK(cc.flags == (CC_NO_CACHE | CC_PRAGMA));
    cc_parse_response(&hp, NULL, &cc);
    for (unsigned i = 0; i < hp.nhdr; i++) {
        (void)cc_field_listed(&cc.no_cache_fields, &hp.hdr[i].name);
        (void)cc_field_listed(&cc.private_fields, &hp.hdr[i].val);
    }

    /* The same fields as both request and response. */
    req = hp;
    req.method = (size > 0 && data[0] & 8) ? TXT_LIT("HEAD") : TXT_LIT("GET");
    hp.status = size > 0 ? 100 + data[size - 1] * 2 : 200;
    check_fresh(&req, &hp, size > 0 ? data[0] : 0);

    for (unsigned i = 0; i < n; i++)
        free(copy[i]);
    return 0;
}
