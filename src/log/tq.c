/*
 * The log query language (tq.h): a recursive-descent parser into a tree
 * of nodes in one array, and its evaluation over a subject's fields.
 *
 *     query   = or
 *     or      = and { "||" and }
 *     and     = unary { "&&" unary }
 *     unary   = "!" unary | "(" or ")" | test
 *     test    = field [ op literal ]
 *     field   = NAME [ ":" HEADER-NAME ]
 *     op      = "==" | "!=" | "<" | "<=" | ">" | ">=" | "~" | "!~"
 *     literal = '"' chars '"' | number
 *
 * Nesting is bounded (TQ_DEPTH_MAX) so that no input can exhaust the
 * stack.  Patterns are compiled with PCRE2 once, matched with one
 * match-data block per query: a query belongs to one thread.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "surogat/defs.h"
#include "surogat/sb.h"
#include "surogat/tq.h"

#define TQ_DEPTH_MAX 64
#define TQ_NODES_MAX 1024
#define TQ_HNAME_MAX 128

static const struct {
    const char *name;
    bool header; /* takes :NAME */
} fields[TQ_F__N] = {
    [TQ_F_REQ_URL] = { "ReqURL", false },
    [TQ_F_REQ_METHOD] = { "ReqMethod", false },
    [TQ_F_REQ_HEADER] = { "ReqHeader", true },
    [TQ_F_RESP_STATUS] = { "RespStatus", false },
    [TQ_F_RESP_HEADER] = { "RespHeader", true },
    [TQ_F_BERESP_STATUS] = { "BerespStatus", false },
    [TQ_F_BACKEND] = { "Backend", false },
    [TQ_F_CLIENT] = { "Client", false },
    [TQ_F_DURATION] = { "Duration", false },
    [TQ_F_CACHE] = { "Cache", false },
    [TQ_F_TTL] = { "TTL", false },
};

enum tq_op {
    OP_EXISTS,
    OP_EQ,
    OP_NE,
    OP_LT,
    OP_LE,
    OP_GT,
    OP_GE,
    OP_MATCH,
    OP_NOMATCH,
};

enum node_kind {
    N_AND,
    N_OR,
    N_NOT,
    N_TEST,
};

struct node {
    enum node_kind kind;
    int a, b; /* operands: node indices */
    /* N_TEST */
    enum tq_field f;
    char *hname;
    enum tq_op op;
    char *str; /* a string literal, NUL-terminated (may hold NULs: slen) */
    size_t slen;
    bool is_num;
    double num;
    pcre2_code *re;
};

struct tq {
    unsigned magic;
#define TQ_MAGIC 0x3a5d71c8
    struct node *n;
    unsigned nn, cap;
    int top;
    pcre2_match_data *md;
};

/* The parser's state. */
struct parse {
    const char *src, *p;
    struct tq *q;
    tq_check_f *check;
    struct sb *err;
    size_t errpos;
    bool failed;
    unsigned depth;
};

const char *
tq_field_name(enum tq_field f)
{
    return ((unsigned)f < TQ_F__N ? fields[f].name : NULL);
}

static int
fail(struct parse *ps, const char *at, const char *msg)
{
    if (!ps->failed) {
        ps->failed = true;
        ps->errpos = (size_t)(at - ps->src);
        sb_cat(ps->err, msg);
    }
    return (-1);
}

static void
skip_ws(struct parse *ps)
{
    while (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')
        ps->p++;
}

static int
node_new(struct parse *ps, enum node_kind kind)
{
    struct tq *q = ps->q;

    if (q->nn == TQ_NODES_MAX)
        return (fail(ps, ps->p, "the query is too long"));
    if (q->nn == q->cap) {
        q->cap = q->cap > 0 ? 2 * q->cap : 16;
        q->n = realloc(q->n, q->cap * sizeof *q->n);
        AN(q->n);
    }
    memset(&q->n[q->nn], 0, sizeof q->n[q->nn]);
    q->n[q->nn].kind = kind;
    q->n[q->nn].a = q->n[q->nn].b = -1;
    return ((int)q->nn++);
}

/* A double-quoted string at ps->p into a malloc'ed, NUL-terminated copy. */
static int
parse_string(struct parse *ps, struct node *t)
{
    const char *start = ps->p, *s = ps->p + 1;
    size_t n = 0;
    char *out;

    out = malloc(strlen(s) + 1);
    AN(out);
    for (;; s++) {
        if (*s == '\0') {
            free(out);
            return (fail(ps, start, "a string without its closing quote"));
        }
        if (*s == '"')
            break;
        if (*s == '\\') {
            if (s[1] != '"' && s[1] != '\\') {
                free(out);
                return (fail(ps, s, "only \\\" and \\\\ are escapes in a string"));
            }
            s++;
        }
        out[n++] = *s;
    }
    out[n] = '\0';
    t->str = out;
    t->slen = n;
    ps->p = s + 1;
    return (0);
}

static int
parse_number(struct parse *ps, struct node *t)
{
    const char *start = ps->p;
    char *end;
    double v;

    if (!(isdigit((unsigned char)*ps->p) || *ps->p == '-' || *ps->p == '.'))
        return (fail(ps, start, "expected a \"string\" or a number"));
    errno = 0;
    v = strtod(ps->p, &end);
    if (end == ps->p || errno != 0 || !isfinite(v) ||
        strspn(ps->p, "0123456789.-+eE") < (size_t)(end - ps->p))
        return (fail(ps, start, "not a number"));
    if (isalnum((unsigned char)*end) || *end == '_')
        return (fail(ps, start, "not a number"));
    t->is_num = true;
    t->num = v;
    /* Kept as written too: Status == 200 also compares the text "200". */
    t->slen = (size_t)(end - ps->p);
    t->str = malloc(t->slen + 1);
    AN(t->str);
    memcpy(t->str, ps->p, t->slen);
    t->str[t->slen] = '\0';
    ps->p = end;
    return (0);
}

static int
parse_op(struct parse *ps, enum tq_op *op)
{
    static const struct {
        const char *s;
        enum tq_op op;
    } ops[] = {
        /* two-character ones first */
        { "==", OP_EQ },      { "!=", OP_NE }, { "<=", OP_LE }, { ">=", OP_GE },
        { "!~", OP_NOMATCH }, { "<", OP_LT },  { ">", OP_GT },  { "~", OP_MATCH },
    };

    for (size_t i = 0; i < ARRAY_LEN(ops); i++) {
        size_t l = strlen(ops[i].s);
        if (strncmp(ps->p, ops[i].s, l) == 0) {
            *op = ops[i].op;
            ps->p += l;
            return (1);
        }
    }
    return (0);
}

static int
compile_re(struct parse *ps, struct node *t, const char *at)
{
    PCRE2_UCHAR msg[128];
    PCRE2_SIZE off;
    int ec;
    char buf[200];

    t->re = pcre2_compile((PCRE2_SPTR)t->str, t->slen, 0, &ec, &off, NULL);
    if (t->re == NULL) {
        (void)pcre2_get_error_message(ec, msg, sizeof msg);
        snprintf(buf, sizeof buf, "bad pattern: %s", (const char *)msg);
        /* at the offending byte of the pattern, inside its quotes */
        return (fail(ps, at + 1 + SRG_MIN((size_t)off, t->slen), buf));
    }
    return (0);
}

static int
parse_test(struct parse *ps)
{
    const char *start = ps->p, *lit;
    size_t len = 0;
    struct node *t;
    const char *why;
    int i, fi = -1;

    while (isalnum((unsigned char)ps->p[len]) || ps->p[len] == '_')
        len++;
    if (len == 0)
        return (fail(ps, start, "expected a field name, ! or ("));
    for (int f = 0; f < TQ_F__N; f++)
        if (strlen(fields[f].name) == len && strncasecmp(fields[f].name, start, len) == 0)
            fi = f;
    if (fi < 0)
        return (fail(ps, start,
                     "unknown field (ReqURL, ReqMethod, ReqHeader:NAME, RespStatus, "
                     "RespHeader:NAME, BerespStatus, Backend, Client, Duration, "
                     "Cache, TTL)"));
    if ((i = node_new(ps, N_TEST)) < 0)
        return (-1);
    t = &ps->q->n[i];
    t->f = (enum tq_field)fi;
    ps->p += len;
    if (fields[fi].header) {
        const char *h;
        if (*ps->p != ':')
            return (fail(ps, ps->p, "a header field needs its name: ReqHeader:Host"));
        h = ++ps->p;
        while (*ps->p > ' ' && *ps->p < 0x7f && strchr("()\"!=<>~&|:", *ps->p) == NULL)
            ps->p++;
        if (ps->p == h || ps->p - h > TQ_HNAME_MAX)
            return (fail(ps, h, "expected a header name after the colon"));
        t->hname = strndup(h, (size_t)(ps->p - h));
        AN(t->hname);
    } else if (*ps->p == ':') {
        return (fail(ps, ps->p, "only ReqHeader and RespHeader take a :NAME"));
    }
    if (ps->check != NULL && (why = ps->check(t->f, t->hname)) != NULL)
        return (fail(ps, start, why));
    skip_ws(ps);
    if (!parse_op(ps, &t->op)) {
        t->op = OP_EXISTS;
        return (i);
    }
    skip_ws(ps);
    lit = ps->p;
    if (*ps->p == '"' ? parse_string(ps, t) != 0 : parse_number(ps, t) != 0)
        return (-1);
    t = &ps->q->n[i];
    switch (t->op) {
    case OP_MATCH:
    case OP_NOMATCH:
        if (*lit != '"')
            return (fail(ps, lit, "~ and !~ take a \"pattern\""));
        if (compile_re(ps, t, lit) != 0)
            return (-1);
        break;
    case OP_LT:
    case OP_LE:
    case OP_GT:
    case OP_GE:
        if (!t->is_num)
            return (fail(ps, lit, "<, <=, > and >= take a number"));
        break;
    default:
        break;
    }
    return (i);
}

static int parse_or(struct parse *ps);

static int
parse_unary(struct parse *ps)
{
    int i, a;

    skip_ws(ps);
    if (++ps->depth > TQ_DEPTH_MAX)
        return (fail(ps, ps->p, "nested too deeply"));
    if (ps->p[0] == '!' && ps->p[1] != '=' && ps->p[1] != '~') {
        ps->p++;
        if ((a = parse_unary(ps)) < 0)
            return (-1);
        if ((i = node_new(ps, N_NOT)) < 0)
            return (-1);
        ps->q->n[i].a = a;
    } else if (*ps->p == '(') {
        const char *open = ps->p++;
        if ((i = parse_or(ps)) < 0)
            return (-1);
        skip_ws(ps);
        if (*ps->p != ')')
            return (fail(ps, *ps->p == '\0' ? open : ps->p,
                         *ps->p == '\0' ? "a ( without its )" : "expected ) or an operator"));
        ps->p++;
    } else {
        i = parse_test(ps);
    }
    ps->depth--;
    return (i);
}

static int
parse_bin(struct parse *ps, const char *tok, enum node_kind kind, int (*sub)(struct parse *))
{
    int l, r, i;

    if ((l = sub(ps)) < 0)
        return (-1);
    for (;;) {
        skip_ws(ps);
        if (strncmp(ps->p, tok, 2) != 0)
            return (l);
        ps->p += 2;
        if ((r = sub(ps)) < 0)
            return (-1);
        if ((i = node_new(ps, kind)) < 0)
            return (-1);
        ps->q->n[i].a = l;
        ps->q->n[i].b = r;
        l = i;
    }
}

static int
parse_and(struct parse *ps)
{
    return (parse_bin(ps, "&&", N_AND, parse_unary));
}

static int
parse_or(struct parse *ps)
{
    return (parse_bin(ps, "||", N_OR, parse_and));
}

void
tq_free(struct tq **qp)
{
    struct tq *q = *qp;

    if (q == NULL)
        return;
    OBJ_CHECK(q, TQ_MAGIC);
    *qp = NULL;
    for (unsigned i = 0; i < q->nn; i++) {
        free(q->n[i].hname);
        free(q->n[i].str);
        pcre2_code_free(q->n[i].re);
    }
    free(q->n);
    pcre2_match_data_free(q->md);
    OBJ_FREE(&q);
}

struct tq *
tq_compile(const char *src, tq_check_f *check, struct sb *err, size_t *errpos)
{
    struct parse ps = { .src = src, .p = src, .check = check, .err = err };
    struct tq *q;

    AN(src);
    OBJ_NEW(q, TQ_MAGIC);
    ps.q = q;
    q->top = parse_or(&ps);
    if (q->top >= 0) {
        skip_ws(&ps);
        if (*ps.p != '\0')
            (void)fail(&ps, ps.p, *ps.p == ')' ? "a ) without its (" : "expected && or ||");
    } else if (!ps.failed) {
        (void)fail(&ps, ps.p, "syntax error");
    }
    if (ps.failed) {
        if (errpos != NULL)
            *errpos = ps.errpos;
        tq_free(&q);
        return (NULL);
    }
    q->md = pcre2_match_data_create(1, NULL);
    AN(q->md);
    return (q);
}

/*--------------------------------------------------------------------
 * Matching.
 */

/* v as a number: all of it, else false. */
static bool
num_of(const struct tq_val *v, double *out)
{
    char buf[64], *end;

    if (v->len == 0 || v->len >= sizeof buf)
        return (false);
    memcpy(buf, v->p, v->len);
    buf[v->len] = '\0';
    *out = strtod(buf, &end);
    return (end != buf && *end == '\0' && isfinite(*out));
}

static bool
test_one(struct tq *q, const struct node *t, const struct tq_val *v)
{
    double x;
    bool eq;

    switch (t->op) {
    case OP_EXISTS:
        return (true);
    case OP_EQ:
    case OP_NE:
        if (t->is_num && num_of(v, &x))
            eq = x == t->num;
        else if (t->f == TQ_F_CACHE)
            eq = v->len == t->slen && strncasecmp(v->p, t->str, v->len) == 0;
        else
            eq = v->len == t->slen && memcmp(v->p, t->str, v->len) == 0;
        return (t->op == OP_EQ ? eq : !eq);
    case OP_LT:
        return (num_of(v, &x) && x < t->num);
    case OP_LE:
        return (num_of(v, &x) && x <= t->num);
    case OP_GT:
        return (num_of(v, &x) && x > t->num);
    case OP_GE:
        return (num_of(v, &x) && x >= t->num);
    case OP_MATCH:
    case OP_NOMATCH:
        eq = pcre2_match(t->re, (PCRE2_SPTR)(v->p != NULL ? v->p : ""), v->len, 0, 0, q->md,
                         NULL) >= 0;
        return (t->op == OP_MATCH ? eq : !eq);
    }
    return (false);
}

static bool
eval(struct tq *q, int i, tq_get_f *get, void *subj)
{
    const struct node *n = &q->n[i];
    struct tq_val v;

    switch (n->kind) {
    case N_AND:
        return (eval(q, n->a, get, subj) && eval(q, n->b, get, subj));
    case N_OR:
        return (eval(q, n->a, get, subj) || eval(q, n->b, get, subj));
    case N_NOT:
        return (!eval(q, n->a, get, subj));
    case N_TEST:
        for (unsigned k = 0; get(subj, n->f, n->hname, k, &v); k++)
            if (test_one(q, n, &v))
                return (true);
        return (false);
    }
    return (false);
}

bool
tq_match(struct tq *q, tq_get_f *get, void *subj)
{
    OBJ_CHECK(q, TQ_MAGIC);
    return (eval(q, q->top, get, subj));
}
