/*
 * Fuzz the RFC 8941 Dictionary parser behind CDN-Cache-Control, and
 * cc_parse_targeted() on top of it.
 *
 * Input: field lines separated by '\n' (at most MAXLINE), each in its own
 * exact-size heap copy so ASan sees any read past a value.
 *
 * Invariants: parsing is deterministic; a Dictionary's keys are distinct
 * and well-formed, and every key and text points inside a field line;
 * each member's value is within its type's range and alphabet; the same
 * lines joined into one value with ", " give the same Dictionary (the
 * parser reads several lines as one); a smaller `max` gives SF_E_TOO_MANY
 * exactly when the members do not fit; cc_parse_targeted() answers a
 * declared status and leaves cc_init()'s struct on anything but CC_OK.
 */
#include <stdbool.h>
#include <string.h>

#include "surogat/cc.h"
#include "surogat/http.h"
#include "surogat/sf.h"

#include "fuzz.h"

#define MAXLINE 8
#define MAXM    32

static bool
inside(const struct txt *t, const struct txt *lines, unsigned nl)
{
    for (unsigned i = 0; i < nl; i++)
        if (t->b >= lines[i].b && t->b + t->len <= lines[i].b + lines[i].len)
            return true;
    return false;
}

static bool
key_ok(const struct txt *k)
{
    if (k->len == 0 || !((k->b[0] >= 'a' && k->b[0] <= 'z') || k->b[0] == '*'))
        return false;
    for (size_t i = 1; i < k->len; i++) {
        char c = k->b[i];
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || strchr("_-.*", c) != NULL))
            return false;
    }
    return true;
}

static bool
b64(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '+' ||
           c == '/' || c == '=';
}

static void
check_member(const struct sf_member *m, const struct txt *lines, unsigned nl)
{
    FUZZ_CHECK(key_ok(&m->key) && inside(&m->key, lines, nl));
    switch (m->type) {
    case SF_INTEGER:
        FUZZ_CHECK(m->num >= -SF_INTEGER_MAX && m->num <= SF_INTEGER_MAX);
        break;
    case SF_DECIMAL:
        FUZZ_CHECK(m->num >= -INT64_C(999999999999999) && m->num <= INT64_C(999999999999999));
        break;
    case SF_BOOLEAN:
        FUZZ_CHECK(m->num == 0 || m->num == 1);
        break;
    case SF_INNER_LIST:
        FUZZ_CHECK(m->num >= 0);
        break;
    case SF_STRING:
        FUZZ_CHECK(m->str.len == 0 || inside(&m->str, lines, nl));
        for (size_t i = 0; i < m->str.len; i++) {
            FUZZ_CHECK(m->str.b[i] >= 0x20 && m->str.b[i] <= 0x7e);
            if (m->str.b[i] == '\\') {
                FUZZ_CHECK(m->escaped && i + 1 < m->str.len &&
                           (m->str.b[i + 1] == '"' || m->str.b[i + 1] == '\\'));
                i++;
            } else {
                FUZZ_CHECK(m->str.b[i] != '"');
            }
        }
        break;
    case SF_TOKEN:
        FUZZ_CHECK(m->str.len > 0 && inside(&m->str, lines, nl));
        break;
    case SF_BYTES:
        FUZZ_CHECK(m->str.len == 0 || inside(&m->str, lines, nl));
        for (size_t i = 0; i < m->str.len; i++)
            FUZZ_CHECK(b64(m->str.b[i]));
        break;
    default:
        FUZZ_CHECK(false); /* an undeclared type */
    }
}

static bool
same(const struct sf_member *a, const struct sf_member *b)
{
    return a->type == b->type && a->num == b->num && a->key.len == b->key.len &&
           memcmp(a->key.b, b->key.b, a->key.len) == 0 && a->str.len == b->str.len &&
           (a->str.len == 0 || memcmp(a->str.b, b->str.b, a->str.len) == 0) &&
           a->escaped == b->escaped && a->nparams == b->nparams;
}

static void
check_joined(const struct txt *lines, unsigned nl, const struct sf_member *m, unsigned n)
{
    struct sf_member j[MAXM];
    size_t len = 0;
    unsigned jn;
    char *buf;

    for (unsigned i = 0; i < nl; i++)
        len += lines[i].len + 2;
    buf = malloc(len + 1);
    FUZZ_CHECK(buf != NULL);
    len = 0;
    for (unsigned i = 0; i < nl; i++) {
        if (i > 0) {
            memcpy(buf + len, ", ", 2);
            len += 2;
        }
        if (lines[i].len > 0)
            memcpy(buf + len, lines[i].b, lines[i].len);
        len += lines[i].len;
    }
    struct txt one = { buf, len };
    FUZZ_CHECK(sf_dict_parse(&one, 1, j, MAXM, &jn) == SF_OK && jn == n);
    for (unsigned i = 0; i < n; i++)
        FUZZ_CHECK(same(&m[i], &j[i]));
    free(buf);
}

static void
check_targeted(const struct txt *lines, unsigned nl)
{
    struct http_hdr hdrs[MAXLINE + 1];
    struct http hp;
    struct cc cc, again, init;
    enum cc_status st;

    http_init(&hp, hdrs, MAXLINE + 1);
    for (unsigned i = 0; i < nl; i++)
        FUZZ_CHECK(http_add(&hp, TXT_LIT("CDN-Cache-Control"), lines[i]) == 0);
    FUZZ_CHECK(http_add(&hp, TXT_LIT("Cache-Control"), TXT_LIT("max-age=1")) == 0);
    st = cc_parse_targeted(&hp, "CDN-Cache-Control", &cc);
    FUZZ_CHECK(st == CC_NONE || st == CC_OK || st == CC_E_SYNTAX || st == CC_E_TYPE);
    FUZZ_CHECK(cc_parse_targeted(&hp, "CDN-Cache-Control", &again) == st);
    FUZZ_CHECK(memcmp(&cc, &again, sizeof cc) == 0);
    cc_init(&init);
    if (st != CC_OK) {
        FUZZ_CHECK(memcmp(&cc, &init, sizeof cc) == 0);
        return;
    }
    FUZZ_CHECK(!(cc.flags & (CC_MALFORMED | CC_TARGETED | CC_PRAGMA)));
    FUZZ_CHECK(cc.src != NULL && strcmp(cc.src, "CDN-Cache-Control") == 0);
    FUZZ_CHECK(cc.max_age == CC_ABSENT || (cc.max_age >= 0 && cc.max_age <= CC_DELTA_MAX));
    FUZZ_CHECK(cc.s_maxage == CC_ABSENT || (cc.s_maxage >= 0 && cc.s_maxage <= CC_DELTA_MAX));
    FUZZ_CHECK(!((cc.flags & CC_NO_CACHE) && (cc.flags & CC_NO_CACHE_FIELDS)));
    FUZZ_CHECK(!((cc.flags & CC_PRIVATE) && (cc.flags & CC_PRIVATE_FIELDS)));
    if (cc.flags & CC_PRIVATE_FIELDS)
        FUZZ_CHECK(cc.private_fields.len > 0 && inside(&cc.private_fields, lines, nl));
    /* The targeted field wins over Cache-Control's max-age=1 in a response. */
    cc_parse_response(&hp, NULL, &again);
    FUZZ_CHECK(again.flags == (cc.flags | CC_TARGETED) && again.max_age == cc.max_age);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sf_member m[MAXM], m2[MAXM];
    struct txt lines[MAXLINE];
    char *copy[MAXLINE];
    unsigned nl = 0, n, n2;
    enum sf_status st;
    size_t off = 0;

    while (off <= size && nl < MAXLINE) {
        const uint8_t *nlp = off < size ? memchr(data + off, '\n', size - off) : NULL;
        size_t len = (nlp != NULL ? (size_t)(nlp - data) : size) - off;

        copy[nl] = malloc(len > 0 ? len : 1);
        FUZZ_CHECK(copy[nl] != NULL);
        if (len > 0)
            memcpy(copy[nl], data + off, len);
        lines[nl] = (struct txt){ copy[nl], len };
        nl++;
        off += len + 1;
    }

    st = sf_dict_parse(lines, nl, m, MAXM, &n);
    FUZZ_CHECK(st == SF_OK || st == SF_E_SYNTAX || st == SF_E_TOO_MANY);
    FUZZ_CHECK(sf_dict_parse(lines, nl, m2, MAXM, &n2) == st);
    if (st == SF_OK) {
        FUZZ_CHECK(n <= MAXM && n2 == n);
        for (unsigned i = 0; i < n; i++) {
            FUZZ_CHECK(same(&m[i], &m2[i]));
            check_member(&m[i], lines, nl);
            for (unsigned k = 0; k < i; k++)
                FUZZ_CHECK(m[k].key.len != m[i].key.len ||
                           memcmp(m[k].key.b, m[i].key.b, m[i].key.len) != 0);
        }
        check_joined(lines, nl, m, n);
        if (n > 0)
            FUZZ_CHECK(sf_dict_parse(lines, nl, m2, n - 1, &n2) == SF_E_TOO_MANY);
    }
    check_targeted(lines, nl);
    for (unsigned i = 0; i < nl; i++)
        free(copy[i]);
    return 0;
}
