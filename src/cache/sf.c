/*
 * RFC 8941 Dictionary parsing (see sf.h).  Pure: no allocation, no locks,
 * callable from any thread.
 *
 * The parser follows the algorithms of RFC 8941 section 4.2 step by step,
 * over a reader that walks the field lines as if they were one value
 * joined with ", ": the separator is read as two virtual characters, so
 * the grammar needs no copy of the field.  Every bare item but a String
 * stops at a comma or a space, so only a String can reach a separator,
 * and there it fails (its bytes would not be contiguous).
 */
#include "config.h"

#include <stddef.h>
#include <string.h>

#include "surogat/defs.h"
#include "surogat/sf.h"

/* Where the parser reads: line i at off, or the separator after it (sep 1: ',', 2: ' '). */
struct rd {
    const struct txt *v;
    unsigned nv, i;
    size_t off;
    unsigned sep;
};

/* At the end of a line with another to come, the separator is next. */
static void
settle(struct rd *r)
{
    if (r->sep == 0 && r->i + 1 < r->nv && r->off == r->v[r->i].len)
        r->sep = 1;
}

/* The next character, or -1 at the end of the last line. */
static int
peek(const struct rd *r)
{
    if (r->sep == 1)
        return (',');
    if (r->sep == 2)
        return (' ');
    if (r->i < r->nv && r->off < r->v[r->i].len)
        return ((unsigned char)r->v[r->i].b[r->off]);
    return (-1);
}

static void
advance(struct rd *r)
{
    if (r->sep == 1) {
        r->sep = 2;
        return;
    }
    if (r->sep == 2) {
        r->sep = 0;
        r->i++;
        r->off = 0;
    } else {
        SRG_ASSERT(r->i < r->nv && r->off < r->v[r->i].len);
        r->off++;
    }
    settle(r);
}

/* The current position as a pointer into a field line; only where no separator is. */
static const char *
here(const struct rd *r)
{
    SRG_ASSERT(r->sep == 0 && r->i < r->nv);
    return (r->v[r->i].b + r->off);
}

static bool
lcalpha(int c)
{
    return (c >= 'a' && c <= 'z');
}

static bool
alpha(int c)
{
    return (lcalpha(c) || (c >= 'A' && c <= 'Z'));
}

static bool
digit(int c)
{
    return (c >= '0' && c <= '9');
}

/* RFC 9110 section 5.6.2 tchar. */
static bool
tchar(int c)
{
    return (alpha(c) || digit(c) || (c > 0 && strchr("!#$%&'*+-.^_`|~", c) != NULL));
}

static void
skip_sp(struct rd *r)
{
    while (peek(r) == ' ')
        advance(r);
}

static void
skip_ows(struct rd *r)
{
    while (peek(r) == ' ' || peek(r) == '\t')
        advance(r);
}

/* Section 4.2.3.3: key = ( lcalpha / "*" ) *( lcalpha / DIGIT / "_" / "-" / "." / "*" ). */
static int
parse_key(struct rd *r, struct txt *key)
{
    int c = peek(r);

    if (!lcalpha(c) && c != '*')
        return (-1);
    key->b = here(r);
    key->len = 0;
    for (;;) {
        c = peek(r);
        if (!lcalpha(c) && !digit(c) && c != '_' && c != '-' && c != '.' && c != '*')
            return (0);
        /* A key holds no comma or space, so it never reaches a separator. */
        SRG_ASSERT(r->sep == 0);
        advance(r);
        key->len++;
    }
}

/* Section 4.2.4: Integer or Decimal. */
static int
parse_number(struct rd *r, struct sf_member *m)
{
    int64_t ip = 0, fp = 0;
    unsigned ndig = 0, nfrac = 0;
    bool decimal = false, neg = false;
    int c;

    if (peek(r) == '-') {
        neg = true;
        advance(r);
    }
    if (!digit(peek(r)))
        return (-1);
    for (;;) {
        c = peek(r);
        if (digit(c)) {
            if (decimal) {
                fp = fp * 10 + (c - '0');
                nfrac++;
            } else {
                ip = ip * 10 + (c - '0');
            }
            ndig++;
        } else if (!decimal && c == '.') {
            if (ndig > 12)
                return (-1);
            decimal = true;
        } else {
            break;
        }
        advance(r);
        /* Counted as the RFC counts input_number: the dot included. */
        if (!decimal && ndig > 15)
            return (-1);
        if (decimal && ndig + 1 > 16)
            return (-1);
    }
    if (decimal) {
        if (nfrac == 0 || nfrac > 3)
            return (-1);
        while (nfrac++ < 3)
            fp *= 10;
        m->type = SF_DECIMAL;
        m->num = ip * 1000 + fp;
    } else {
        m->type = SF_INTEGER;
        m->num = ip;
    }
    if (neg)
        m->num = -m->num;
    return (0);
}

/* Section 4.2.5: String, between DQUOTEs, VCHAR and SP only, escapes \" and \\. */
static int
parse_string(struct rd *r, struct sf_member *m)
{
    int c;

    advance(r); /* the opening quote */
    m->type = SF_STRING;
    m->escaped = false;
    m->str.len = 0;
    if (r->sep != 0)
        return (-1); /* it would run on into the next field line */
    m->str.b = here(r);
    for (;;) {
        if (r->sep != 0)
            return (-1);
        c = peek(r);
        if (c < 0)
            return (-1); /* no closing quote */
        if (c == '"') {
            advance(r);
            return (0);
        }
        if (c < 0x20 || c > 0x7e)
            return (-1);
        advance(r);
        m->str.len++;
        if (c == '\\') {
            if (r->sep != 0)
                return (-1);
            c = peek(r);
            if (c != '"' && c != '\\')
                return (-1);
            advance(r);
            m->str.len++;
            m->escaped = true;
        }
    }
}

/* Section 4.2.6: Token. */
static void
parse_token(struct rd *r, struct sf_member *m)
{
    m->type = SF_TOKEN;
    m->str.b = here(r);
    m->str.len = 0;
    do {
        advance(r);
        m->str.len++;
    } while (tchar(peek(r)) || peek(r) == ':' || peek(r) == '/');
}

/* Section 4.2.7: Byte Sequence, base64 between colons (not decoded). */
static int
parse_bytes(struct rd *r, struct sf_member *m)
{
    int c;

    advance(r);
    m->type = SF_BYTES;
    m->str.len = 0;
    if (r->sep != 0)
        return (-1);
    m->str.b = here(r);
    for (;;) {
        c = peek(r);
        if (c == ':') {
            advance(r);
            return (0);
        }
        if (!alpha(c) && !digit(c) && c != '+' && c != '/' && c != '=')
            return (-1);
        advance(r);
        m->str.len++;
    }
}

/* Section 4.2.3.1: a bare item, its type chosen by its first character. */
static int
parse_bare(struct rd *r, struct sf_member *m)
{
    int c = peek(r);

    m->str = (struct txt){ NULL, 0 };
    m->escaped = false;
    if (c == '-' || digit(c))
        return (parse_number(r, m));
    if (c == '"')
        return (parse_string(r, m));
    if (alpha(c) || c == '*') {
        parse_token(r, m);
        return (0);
    }
    if (c == ':')
        return (parse_bytes(r, m));
    if (c == '?') {
        advance(r);
        c = peek(r);
        if (c != '0' && c != '1')
            return (-1);
        advance(r);
        m->type = SF_BOOLEAN;
        m->num = c == '1';
        return (0);
    }
    return (-1);
}

/* Section 4.2.3.2: *( ";" *SP key [ "=" bare-item ] ); returns how many, or -1. */
static int
parse_params(struct rd *r)
{
    struct sf_member scratch;
    struct txt key;
    int n = 0;

    while (peek(r) == ';') {
        advance(r);
        skip_sp(r);
        if (parse_key(r, &key) != 0)
            return (-1);
        if (peek(r) == '=') {
            advance(r);
            if (parse_bare(r, &scratch) != 0)
                return (-1);
        }
        n++;
    }
    return (n);
}

/* Section 4.2.1.2: "(" *SP [ item *( 1*SP item ) *SP ] ")" parameters. */
static int
parse_inner_list(struct rd *r, struct sf_member *m)
{
    struct sf_member item;
    int c;

    advance(r);
    m->type = SF_INNER_LIST;
    m->num = 0;
    m->str = (struct txt){ NULL, 0 };
    m->escaped = false;
    for (;;) {
        skip_sp(r);
        if (peek(r) == ')') {
            advance(r);
            return (0);
        }
        if (parse_bare(r, &item) != 0 || parse_params(r) < 0)
            return (-1);
        m->num++;
        c = peek(r);
        if (c != ' ' && c != ')')
            return (-1);
    }
}

/* Store a member: a key seen before gets the new value in its old place. */
static int
put(const struct sf_member *nm, struct sf_member *m, unsigned max, unsigned *n)
{
    for (unsigned i = 0; i < *n; i++) {
        if (m[i].key.len == nm->key.len && memcmp(m[i].key.b, nm->key.b, nm->key.len) == 0) {
            m[i] = *nm;
            return (0);
        }
    }
    if (*n == max)
        return (-1);
    m[(*n)++] = *nm;
    return (0);
}

enum sf_status
sf_dict_parse(const struct txt *v, unsigned nv, struct sf_member *m, unsigned max, unsigned *n)
{
    struct rd r = { v, nv, 0, 0, 0 };
    struct sf_member nm;
    int np;

    AN(n);
    AN(v != NULL || nv == 0);
    *n = 0;
    settle(&r);
    skip_sp(&r);
    if (peek(&r) < 0)
        return (SF_OK);
    for (;;) {
        memset(&nm, 0, sizeof nm);
        if (parse_key(&r, &nm.key) != 0)
            return (SF_E_SYNTAX);
        if (peek(&r) == '=') {
            advance(&r);
            if (peek(&r) == '(') {
                if (parse_inner_list(&r, &nm) != 0)
                    return (SF_E_SYNTAX);
            } else if (parse_bare(&r, &nm) != 0) {
                return (SF_E_SYNTAX);
            }
        } else {
            nm.type = SF_BOOLEAN;
            nm.num = 1;
        }
        if ((np = parse_params(&r)) < 0)
            return (SF_E_SYNTAX);
        nm.nparams = (unsigned)np;
        if (put(&nm, m, max, n) != 0)
            return (SF_E_TOO_MANY);
        skip_ows(&r);
        if (peek(&r) < 0)
            return (SF_OK);
        if (peek(&r) != ',')
            return (SF_E_SYNTAX);
        advance(&r);
        skip_ows(&r);
        if (peek(&r) < 0)
            return (SF_E_SYNTAX); /* a trailing comma */
    }
}

const char *
sf_type_name(enum sf_type t)
{
    switch (t) {
    case SF_INTEGER:
        return ("Integer");
    case SF_DECIMAL:
        return ("Decimal");
    case SF_STRING:
        return ("String");
    case SF_TOKEN:
        return ("Token");
    case SF_BYTES:
        return ("Byte Sequence");
    case SF_BOOLEAN:
        return ("Boolean");
    case SF_INNER_LIST:
        return ("Inner List");
    }
    return ("?");
}
