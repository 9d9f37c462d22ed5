/*
 * Cache-Control family parsing.  Pure: no allocation, no locks, callable
 * from any thread; the struct cc it fills points into the parsed heads.
 *
 * A list element is token [ OWS "=" OWS ( token / quoted-string ) ]
 * (RFC 9111 section 5.2, with the OWS around "=" tolerated).  One pass
 * splits elements, quote-aware, so an unknown directive's quoted value may
 * hold commas; a table maps each known name to how its value is read.
 * cc.h states the rules for invalid and repeated directives.
 *
 * Targeted fields other than Surrogate-Control are RFC 8941 Dictionaries:
 * sf.c parses them, and the same table says which type each known
 * directive must have (RFC 9213 section 2.1).
 */
#include "config.h"

#include <stddef.h>
#include <string.h>
#include <strings.h>

#include "surogat/defs.h"
#include "surogat/sb.h"
#include "surogat/cc.h"
#include "surogat/sf.h"

const char *const cc_targets_default[] = { "CDN-Cache-Control", "Surrogate-Control", NULL };

/* RFC 9110 section 5.6.2 tchar. */
static bool
tchar(unsigned char c)
{
    static const char extra[] = "!#$%&'*+-.^_`|~";

    if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return true;
    return c != 0 && memchr(extra, c, sizeof extra - 1) != NULL;
}

static bool
ows(char c)
{
    return c == ' ' || c == '\t';
}

static bool
digit(char c)
{
    return c >= '0' && c <= '9';
}

/* One list element, as found. */
struct elem {
    struct txt name;
    struct txt val; /* without the quotes of a quoted-string */
    bool has_val;   /* there was an "=" */
    bool quoted;
    bool escaped; /* the quoted-string held a quoted-pair */
    bool ok;      /* well-formed */
};

/*
 * Skip to the next top-level comma (or the end), stepping over quoted
 * strings so that a comma inside quotes never starts an element.
 */
static const char *
skip_to_comma(const char *p, const char *e)
{
    while (p < e && *p != ',') {
        if (*p == '"') {
            for (p++; p < e && *p != '"'; p++)
                if (*p == '\\' && p + 1 < e)
                    p++;
        }
        if (p < e)
            p++;
    }
    return p;
}

/* The element at *pp, advancing *pp past it; false when the list is exhausted. */
static bool
next_elem(const char **pp, const char *e, struct elem *el)
{
    const char *p = *pp, *s, *q;

    while (p < e && (ows(*p) || *p == ','))
        p++;
    if (p == e)
        return false;
    memset(el, 0, sizeof *el);
    el->ok = true;
    for (s = p; p < e && tchar((unsigned char)*p); p++)
        continue;
    el->name = (struct txt){ s, (size_t)(p - s) };
    if (el->name.len == 0) {
        el->ok = false;
        *pp = skip_to_comma(p, e);
        return true;
    }
    for (q = p; q < e && ows(*q); q++)
        continue;
    if (q < e && *q == '=') {
        el->has_val = true;
        for (p = q + 1; p < e && ows(*p); p++)
            continue;
        if (p < e && *p == '"') {
            el->quoted = true;
            for (s = ++p; p < e && *p != '"'; p++) {
                if (*p == '\\') {
                    el->escaped = true;
                    if (p + 1 < e)
                        p++;
                }
            }
            el->val = (struct txt){ s, (size_t)(p - s) };
            if (p == e) {
                /* No closing quote: everything after it was inside. */
                el->ok = false;
                *pp = e;
                return true;
            }
            p++;
        } else {
            for (s = p; p < e && tchar((unsigned char)*p); p++)
                continue;
            el->val = (struct txt){ s, (size_t)(p - s) };
            if (el->val.len == 0)
                el->ok = false;
        }
        for (q = p; q < e && ows(*q); q++)
            continue;
    }
    if (q < e && *q != ',') {
        el->ok = false;
        q = skip_to_comma(q, e);
    }
    *pp = q;
    return true;
}

/*
 * delta-seconds (RFC 9111 section 1.2.2): 1*DIGIT, clamped to 2^31.  With
 * plus_ok, the Edge Architecture's "N+M" form reads as N.
 */
static bool
delta(const struct txt *v, bool plus_ok, int64_t *out)
{
    int64_t n = 0;
    size_t i;

    for (i = 0; i < v->len && digit(v->b[i]); i++) {
        n = n * 10 + (v->b[i] - '0');
        if (n > CC_DELTA_MAX)
            n = CC_DELTA_MAX; /* n * 10 + 9 still fits: no overflow on the next digit */
    }
    if (i == 0)
        return false;
    if (i < v->len) {
        if (!plus_ok || v->b[i] != '+' || i + 1 == v->len)
            return false;
        for (size_t j = i + 1; j < v->len; j++)
            if (!digit(v->b[j]))
                return false;
    }
    *out = n;
    return true;
}

enum kind {
    K_STRICT, /* restrictive flag: honoured even with a stray value */
    K_LOOSE,  /* permissive flag: only in its bare form */
    K_DELTA,  /* delta-seconds */
    K_STALE,  /* max-stale: delta-seconds, or bare for any staleness */
    K_LIST,   /* no-cache, private: bare, or with a field-name list */
};

static const struct dir {
    const char *name;
    enum kind kind;
    unsigned flag;   /* K_STRICT, K_LOOSE, K_STALE (bare), K_LIST (bare) */
    unsigned flag2;  /* K_LIST: the qualified form */
    size_t off;      /* K_DELTA, K_STALE: the int64_t; K_LIST: the struct txt */
    int64_t bad_val; /* K_DELTA, K_STALE: the most restrictive value, for invalid ones */
} dirs[] = {
    { "no-store", K_STRICT, CC_NO_STORE, 0, 0, 0 },
    { "no-cache", K_LIST, CC_NO_CACHE, CC_NO_CACHE_FIELDS, offsetof(struct cc, no_cache_fields),
      0 },
    { "private", K_LIST, CC_PRIVATE, CC_PRIVATE_FIELDS, offsetof(struct cc, private_fields), 0 },
    { "public", K_LOOSE, CC_PUBLIC, 0, 0, 0 },
    { "must-revalidate", K_STRICT, CC_MUST_REVALIDATE, 0, 0, 0 },
    { "proxy-revalidate", K_STRICT, CC_PROXY_REVALIDATE, 0, 0, 0 },
    { "no-transform", K_STRICT, CC_NO_TRANSFORM, 0, 0, 0 },
    /* Permissive: it lets a cache that knows the status ignore no-store (section 5.2.2.3). */
    { "must-understand", K_LOOSE, CC_MUST_UNDERSTAND, 0, 0, 0 },
    { "immutable", K_LOOSE, CC_IMMUTABLE, 0, 0, 0 },
    /* Restrictive in that it forbids going to the network for this request. */
    { "only-if-cached", K_STRICT, CC_ONLY_IF_CACHED, 0, 0, 0 },
    { "max-age", K_DELTA, 0, 0, offsetof(struct cc, max_age), 0 },
    { "s-maxage", K_DELTA, 0, 0, offsetof(struct cc, s_maxage), 0 },
    { "stale-while-revalidate", K_DELTA, 0, 0, offsetof(struct cc, swr), 0 },
    { "stale-if-error", K_DELTA, 0, 0, offsetof(struct cc, sie), 0 },
    { "min-fresh", K_DELTA, 0, 0, offsetof(struct cc, min_fresh), CC_DELTA_MAX },
    { "max-stale", K_STALE, CC_MAX_STALE_ANY, 0, offsetof(struct cc, max_stale), CC_ABSENT },
};

struct pstate {
    struct cc *cc;
    unsigned seen; /* bit i: dirs[i] already had a value */
    unsigned bad;  /* bit i: dirs[i] invalid or conflicting */
    bool surrogate;
};

static int64_t *
i64_at(struct cc *cc, size_t off)
{
    return (int64_t *)(void *)((char *)cc + off);
}

static struct txt *
txt_at(struct cc *cc, size_t off)
{
    return (struct txt *)(void *)((char *)cc + off);
}

static void
apply_delta(struct pstate *ps, unsigned i, const struct elem *el)
{
    const struct dir *d = &dirs[i];
    int64_t *f = i64_at(ps->cc, d->off), v;
    bool plus_ok = ps->surrogate && d->off == offsetof(struct cc, max_age);

    if (d->kind == K_STALE && !el->has_val && el->ok) {
        v = CC_DELTA_MAX;
        ps->cc->flags |= d->flag;
    } else if (!el->ok || !el->has_val || el->escaped || !delta(&el->val, plus_ok, &v)) {
        ps->bad |= 1u << i;
        return;
    }
    if ((ps->seen & (1u << i)) && *f != v)
        ps->bad |= 1u << i; /* section 4.2.1: conflicting duplicates */
    ps->seen |= 1u << i;
    *f = v;
}

/* Whether a qualified list names at least one field. */
static bool
list_nonempty(const struct txt *v)
{
    for (size_t i = 0; i < v->len; i++)
        if (!ows(v->b[i]) && v->b[i] != ',')
            return true;
    return false;
}

static void
apply_list(struct pstate *ps, const struct dir *d, const struct elem *el)
{
    struct cc *cc = ps->cc;
    struct txt *t = txt_at(cc, d->off);
    bool bare = !el->has_val;

    if (!bare && (!el->ok || el->escaped)) {
        /*
         * A list we cannot read exactly: the unqualified form is the
         * restrictive reading.  (With escapes a name would not match in
         * cc_field_listed, and a private field would be stored.)
         */
        cc->flags |= CC_INVALID;
        bare = true;
    } else if (!bare && !list_nonempty(&el->val)) {
        bare = true; /* no-cache="": an origin's slip more likely than "nothing" */
    } else if (!bare && (cc->flags & d->flag2) &&
               (t->len != el->val.len || memcmp(t->b, el->val.b, t->len) != 0)) {
        cc->flags |= CC_INVALID; /* two different lists: no merging without allocating */
        bare = true;
    }
    if (bare || (cc->flags & d->flag)) {
        cc->flags |= d->flag;
        cc->flags &= ~d->flag2;
        *t = (struct txt){ NULL, 0 };
        return;
    }
    cc->flags |= d->flag2;
    *t = el->val;
}

static void
apply(struct pstate *ps, const struct elem *el)
{
    for (unsigned i = 0; i < ARRAY_LEN(dirs); i++) {
        const struct dir *d = &dirs[i];

        if (!http_name_eq(&el->name, d->name))
            continue;
        switch (d->kind) {
        case K_STRICT:
            ps->cc->flags |= d->flag;
            break;
        case K_LOOSE:
            if (el->ok && !el->has_val)
                ps->cc->flags |= d->flag;
            else
                ps->cc->flags |= CC_INVALID;
            break;
        case K_DELTA:
        case K_STALE:
            apply_delta(ps, i, el);
            break;
        case K_LIST:
            apply_list(ps, d, el);
            break;
        }
        return;
    }
}

void
cc_init(struct cc *out)
{
    AN(out);
    memset(out, 0, sizeof *out);
    out->max_age = out->s_maxage = out->swr = out->sie = CC_ABSENT;
    out->max_stale = out->min_fresh = CC_ABSENT;
}

enum cc_status
cc_parse(const struct http *hp, const char *name, struct cc *out)
{
    struct pstate ps = { out, 0, 0, false };
    bool any = false, malformed = false;
    struct elem el;

    OBJ_CHECK(hp, HTTP_MAGIC);
    AN(name);
    cc_init(out);
    ps.surrogate = strcasecmp(name, "Surrogate-Control") == 0;
    for (unsigned h = 0; h < hp->nhdr; h++) {
        const struct txt *v = &hp->hdr[h].val;
        const char *p = v->b, *e = v->b + v->len;

        if (!http_name_eq(&hp->hdr[h].name, name))
            continue;
        while (next_elem(&p, e, &el)) {
            any = true;
            if (!el.ok)
                malformed = true;
            if (el.name.len > 0)
                apply(&ps, &el);
        }
    }
    for (unsigned i = 0; i < ARRAY_LEN(dirs); i++) {
        if (!(ps.bad & (1u << i)))
            continue;
        *i64_at(out, dirs[i].off) = dirs[i].bad_val;
        if (dirs[i].kind == K_STALE)
            out->flags &= ~dirs[i].flag;
        out->flags |= CC_INVALID;
    }
    if (!any)
        return CC_NONE;
    out->src = name;
    if (malformed) {
        out->flags |= CC_MALFORMED;
        return CC_E_SYNTAX;
    }
    return CC_OK;
}

/* Bounds of a targeted field we read: more is not a cache directive list, and is ignored. */
#define SF_LINES   16
#define SF_MEMBERS 64

/* Whether member m has the type RFC 9213 infers for directive d. */
static bool
sf_typed(const struct dir *d, const struct sf_member *m)
{
    bool is_true = m->type == SF_BOOLEAN && m->num == 1;

    switch (d->kind) {
    case K_STRICT:
    case K_LOOSE:
        return (is_true);
    case K_DELTA:
        return (m->type == SF_INTEGER && m->num >= 0);
    case K_STALE:
        return (is_true || (m->type == SF_INTEGER && m->num >= 0));
    case K_LIST:
        return (is_true || m->type == SF_STRING);
    }
    SRG_WRONG("cc kind");
}

/* A well-typed member of a targeted field: the Dictionary already dropped repeated keys. */
static void
sf_apply(struct pstate *ps, const struct dir *d, const struct sf_member *m)
{
    struct elem el;

    switch (d->kind) {
    case K_STRICT:
    case K_LOOSE:
        ps->cc->flags |= d->flag;
        return;
    case K_DELTA:
    case K_STALE:
        if (m->type == SF_BOOLEAN) {
            ps->cc->flags |= d->flag;
            *i64_at(ps->cc, d->off) = CC_DELTA_MAX;
        } else {
            *i64_at(ps->cc, d->off) = SRG_MIN(m->num, CC_DELTA_MAX);
        }
        return;
    case K_LIST:
        /* As the list syntax would give it: a String is the quoted form. */
        memset(&el, 0, sizeof el);
        el.name = m->key;
        el.ok = true;
        if (m->type == SF_STRING) {
            el.has_val = el.quoted = true;
            el.val = m->str;
            el.escaped = m->escaped;
        }
        apply_list(ps, d, &el);
        return;
    }
    SRG_WRONG("cc kind");
}

enum cc_status
cc_parse_targeted(const struct http *hp, const char *name, struct cc *out)
{
    struct sf_member m[SF_MEMBERS];
    struct txt lines[SF_LINES];
    struct pstate ps = { out, 0, 0, false };
    unsigned nl = 0, nm;

    OBJ_CHECK(hp, HTTP_MAGIC);
    AN(name);
    cc_init(out);
    for (unsigned h = 0; h < hp->nhdr; h++) {
        if (!http_name_eq(&hp->hdr[h].name, name))
            continue;
        if (nl == SF_LINES)
            return CC_E_SYNTAX;
        lines[nl++] = hp->hdr[h].val;
    }
    if (nl == 0)
        return CC_NONE;
    if (sf_dict_parse(lines, nl, m, SF_MEMBERS, &nm) != SF_OK)
        return CC_E_SYNTAX;
    if (nm == 0)
        return CC_NONE;
    for (unsigned i = 0; i < nm; i++) {
        for (unsigned j = 0; j < ARRAY_LEN(dirs); j++) {
            const struct dir *d = &dirs[j];

            /* Dictionary keys are lower case, as the table's names are. */
            if (strlen(d->name) != m[i].key.len || memcmp(d->name, m[i].key.b, m[i].key.len))
                continue;
            if (!sf_typed(d, &m[i])) {
                cc_init(out);
                return CC_E_TYPE;
            }
            sf_apply(&ps, d, &m[i]);
            break;
        }
    }
    out->src = name;
    return CC_OK;
}

void
cc_parse_request(const struct http *req, struct cc *out)
{
    OBJ_CHECK(req, HTTP_MAGIC);
    if (http_count(req, "Cache-Control") > 0) {
        (void)cc_parse(req, "Cache-Control", out);
        return;
    }
    cc_init(out);
    if (http_has_token(req, "Pragma", "no-cache")) {
        out->flags |= CC_NO_CACHE | CC_PRAGMA;
        out->src = "Pragma";
    }
}

/*
 * Whether a Surrogate-Control says anything about caching: one that only
 * asks for ESI (content="ESI/1.0", every directive unknown to us) leaves
 * Cache-Control in charge, as CDNs that read both do.
 */
static bool
says_something(const struct cc *c)
{
    return ((c->flags & ~(unsigned)(CC_INVALID | CC_MALFORMED)) != 0 || c->max_age != CC_ABSENT ||
            c->s_maxage != CC_ABSENT || c->swr != CC_ABSENT || c->sie != CC_ABSENT);
}

void
cc_parse_response(const struct http *resp, const char *const *targets, struct cc *out)
{
    OBJ_CHECK(resp, HTTP_MAGIC);
    if (targets == NULL)
        targets = cc_targets_default;
    for (; *targets != NULL; targets++) {
        bool sc = strcasecmp(*targets, "Surrogate-Control") == 0;
        enum cc_status st = sc ? cc_parse(resp, *targets, out) : cc_parse_targeted(resp, *targets, out);

        if (st == CC_OK && sc && !says_something(out))
            continue;
        if (st == CC_OK) {
            out->flags |= CC_TARGETED;
            return;
        }
    }
    (void)cc_parse(resp, "Cache-Control", out);
}

bool
cc_field_listed(const struct txt *list, const struct txt *name)
{
    const char *p, *e, *s, *t;

    AN(list);
    AN(name);
    if (list->len == 0 || name->len == 0)
        return false;
    for (p = list->b, e = list->b + list->len; p < e;) {
        while (p < e && (ows(*p) || *p == ','))
            p++;
        for (s = p; p < e && *p != ','; p++)
            continue;
        for (t = p; t > s && ows(t[-1]); t--)
            continue;
        if ((size_t)(t - s) == name->len && strncasecmp(s, name->b, name->len) == 0)
            return true;
    }
    return false;
}

void
cc_dump(const struct cc *cc, struct sb *out)
{
    AN(cc);
    AN(out);
    sb_printf(out, "%s:", cc->src != NULL ? cc->src : "(none)");
    for (unsigned i = 0; i < ARRAY_LEN(dirs); i++) {
        const struct dir *d = &dirs[i];
        const struct txt *t;
        int64_t v;

        switch (d->kind) {
        case K_STRICT:
        case K_LOOSE:
            if (cc->flags & d->flag)
                sb_printf(out, " %s", d->name);
            break;
        case K_DELTA:
        case K_STALE:
            v = *(const int64_t *)(const void *)((const char *)cc + d->off);
            if (d->kind == K_STALE && (cc->flags & d->flag))
                sb_printf(out, " %s", d->name);
            else if (v != CC_ABSENT)
                sb_printf(out, " %s=%lld", d->name, (long long)v);
            break;
        case K_LIST:
            t = (const struct txt *)(const void *)((const char *)cc + d->off);
            if (cc->flags & d->flag)
                sb_printf(out, " %s", d->name);
            else if (cc->flags & d->flag2)
                sb_printf(out, " %s=\"%.*s\"", d->name, (int)SRG_MIN(t->len, 256), t->b);
            break;
        }
    }
    if (cc->flags & CC_INVALID)
        sb_cat(out, " invalid");
    if (cc->flags & CC_MALFORMED)
        sb_cat(out, " malformed");
    if (cc->flags & CC_TARGETED)
        sb_cat(out, " targeted");
}
