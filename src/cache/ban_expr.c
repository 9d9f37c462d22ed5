/*
 * Ban expressions: the parser and the matcher (see ban.h for the
 * language).  Pure functions over immutable parsed expressions: any
 * thread may match against an expression at any time, without locks.
 * Regular expressions are compiled once, with PCRE2's JIT when the
 * platform has it (the lurker may test millions of objects), and matched
 * with a match block allocated per call.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "surogat/ban.h"
#include "surogat/defs.h"
#include "surogat/hsh.h"
#include "surogat/http.h"
#include "surogat/sb.h"

enum ban_field { BF_URL, BF_HOST, BF_STATUS, BF_HTTP };
enum ban_op { BO_EQ, BO_NE, BO_MATCH, BO_NMATCH, BO_LT, BO_GT, BO_LE, BO_GE };

static const char *const op_text[] = {
    [BO_EQ] = "==", [BO_NE] = "!=", [BO_MATCH] = "~", [BO_NMATCH] = "!~",
    [BO_LT] = "<",  [BO_GT] = ">",  [BO_LE] = "<=",   [BO_GE] = ">=",
};

struct ban_cond {
    enum ban_field field;
    enum ban_op op;
    char *name; /* BF_HTTP: the field name, NUL-terminated */
    char *arg;  /* unescaped, NUL-terminated */
    size_t arglen;
    unsigned num; /* BF_STATUS */
    pcre2_code *re;
};

struct ban_expr {
    unsigned magic;
#define BAN_EXPR_MAGIC 0x3b1e9a52
    unsigned n;
    struct ban_cond *c;
};

/* One token: blanks end a bare word; a quoted one is unescaped into tok. */
struct lex {
    const char *s, *p;
    char *tok; /* malloc'ed, room for the whole input */
    size_t len;
    size_t pos; /* 1-based position of the token, for messages */
    bool quoted;
};

static bool
is_blank(char c)
{
    return (c == ' ' || c == '\t' || c == '\n' || c == '\r');
}

/* 1: a token, 0: end of input, -1: error (unterminated quote) written to err. */
static int
next_tok(struct lex *lx, struct sb *err)
{
    const char *p = lx->p;

    while (is_blank(*p))
        p++;
    lx->pos = (size_t)(p - lx->s) + 1;
    lx->len = 0;
    lx->quoted = *p == '"';
    if (*p == '\0') {
        lx->p = p;
        return (0);
    }
    if (!lx->quoted) {
        while (*p != '\0' && !is_blank(*p))
            lx->tok[lx->len++] = *p++;
    } else {
        for (p++; *p != '"'; p++) {
            if (*p == '\0') {
                sb_printf(err, "ban: at %zu: unterminated quoted string", lx->pos);
                return (-1);
            }
            if (*p == '\\' && (p[1] == '"' || p[1] == '\\'))
                p++;
            lx->tok[lx->len++] = *p;
        }
        p++;
        if (*p != '\0' && !is_blank(*p)) {
            sb_printf(err, "ban: at %zu: a blank must follow a quoted string",
                      (size_t)(p - lx->s) + 1);
            return (-1);
        }
    }
    lx->tok[lx->len] = '\0';
    lx->p = p;
    return (1);
}

static bool
tok_is(const struct lex *lx, const char *w)
{
    return (!lx->quoted && strcmp(lx->tok, w) == 0);
}

static bool
is_tchar(char c)
{
    /* RFC 9110 section 5.6.2 token characters. */
    return ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL));
}

static int
parse_field(struct lex *lx, struct ban_cond *c, struct sb *err)
{
    if (tok_is(lx, "req.url")) {
        c->field = BF_URL;
    } else if (tok_is(lx, "req.http.host")) {
        c->field = BF_HOST;
    } else if (tok_is(lx, "obj.status")) {
        c->field = BF_STATUS;
    } else if (!lx->quoted && strncmp(lx->tok, "obj.http.", 9) == 0) {
        for (const char *q = lx->tok + 9; *q != '\0'; q++) {
            if (!is_tchar(*q)) {
                sb_printf(err, "ban: at %zu: bad header name in '%.64s'", lx->pos, lx->tok);
                return (-1);
            }
        }
        if (lx->tok[9] == '\0') {
            sb_printf(err, "ban: at %zu: obj.http. needs a header name", lx->pos);
            return (-1);
        }
        c->field = BF_HTTP;
        c->name = strdup(lx->tok + 9);
        AN(c->name);
    } else {
        sb_printf(err,
                  "ban: at %zu: unknown field '%.64s' (req.url, req.http.host, obj.status, "
                  "obj.http.NAME)",
                  lx->pos, lx->tok);
        return (-1);
    }
    return (0);
}

static int
parse_op(struct lex *lx, struct ban_cond *c, struct sb *err)
{
    unsigned last = c->field == BF_STATUS ? BO_GE : BO_NMATCH;

    for (unsigned i = 0; i <= last; i++) {
        if (c->field == BF_STATUS && (i == BO_MATCH || i == BO_NMATCH))
            continue;
        if (tok_is(lx, op_text[i])) {
            c->op = (enum ban_op)i;
            return (0);
        }
    }
    sb_printf(err, "ban: at %zu: unknown operator '%.16s' (%s)", lx->pos, lx->tok,
              c->field == BF_STATUS ? "== != < > <= >= for obj.status" : "== != ~ !~");
    return (-1);
}

static int
parse_arg(struct lex *lx, struct ban_cond *c, struct sb *err)
{
    PCRE2_UCHAR msg[160];
    PCRE2_SIZE off;
    int ecode;

    c->arg = malloc(lx->len + 1);
    AN(c->arg);
    memcpy(c->arg, lx->tok, lx->len + 1);
    c->arglen = lx->len;
    if (c->field == BF_STATUS) {
        unsigned long v = 0;
        size_t i;
        for (i = 0; i < lx->len && lx->tok[i] >= '0' && lx->tok[i] <= '9' && v <= 999; i++)
            v = v * 10 + (unsigned long)(lx->tok[i] - '0');
        if (i == 0 || i != lx->len || v > 999) {
            sb_printf(err, "ban: at %zu: obj.status needs a number 0..999, not '%.16s'", lx->pos,
                      lx->tok);
            return (-1);
        }
        c->num = (unsigned)v;
        return (0);
    }
    if (c->op != BO_MATCH && c->op != BO_NMATCH)
        return (0);
    c->re = pcre2_compile((PCRE2_SPTR)c->arg, c->arglen, c->field == BF_HOST ? PCRE2_CASELESS : 0,
                          &ecode, &off, NULL);
    if (c->re == NULL) {
        (void)pcre2_get_error_message(ecode, msg, sizeof msg);
        sb_printf(err, "ban: at %zu: bad regular expression '%.64s': %s at offset %zu", lx->pos,
                  c->arg, (const char *)msg, (size_t)off);
        return (-1);
    }
    /* Not every platform has a JIT: interpreted matching is still right, only slower. */
    (void)pcre2_jit_compile(c->re, PCRE2_JIT_COMPLETE);
    return (0);
}

static void
cond_free(struct ban_cond *c)
{
    free(c->name);
    free(c->arg);
    if (c->re != NULL)
        pcre2_code_free(c->re);
}

void
ban_expr_free(struct ban_expr **exprp)
{
    struct ban_expr *e = *exprp;

    if (e == NULL)
        return;
    *exprp = NULL;
    OBJ_CHECK(e, BAN_EXPR_MAGIC);
    for (unsigned i = 0; i < e->n; i++)
        cond_free(&e->c[i]);
    free(e->c);
    OBJ_FREE(&e);
}

struct ban_expr *
ban_expr_parse(const char *s, struct sb *err)
{
    struct ban_expr *e;
    struct lex lx = { s, s, NULL, 0, 0, false };
    struct ban_cond *c;
    int rc;

    AN(s);
    OBJ_NEW(e, BAN_EXPR_MAGIC);
    lx.tok = malloc(strlen(s) + 1);
    AN(lx.tok);
    for (;;) {
        rc = next_tok(&lx, err);
        if (rc == 0)
            sb_printf(err, "ban: at %zu: expected a condition (FIELD OP ARG)", lx.pos);
        if (rc <= 0)
            goto fail;
        e->c = realloc(e->c, (e->n + 1) * sizeof *e->c);
        AN(e->c);
        c = &e->c[e->n++];
        memset(c, 0, sizeof *c);
        if (parse_field(&lx, c, err) != 0)
            goto fail;
        rc = next_tok(&lx, err);
        if (rc == 0)
            sb_printf(err, "ban: at %zu: expected an operator after the field", lx.pos);
        if (rc <= 0 || parse_op(&lx, c, err) != 0)
            goto fail;
        rc = next_tok(&lx, err);
        if (rc == 0)
            sb_printf(err, "ban: at %zu: expected an argument after '%s'", lx.pos, op_text[c->op]);
        if (rc <= 0 || parse_arg(&lx, c, err) != 0)
            goto fail;
        rc = next_tok(&lx, err);
        if (rc < 0)
            goto fail;
        if (rc == 0)
            break;
        if (!tok_is(&lx, "&&")) {
            sb_printf(err, "ban: at %zu: expected '&&' or the end, not '%.32s'", lx.pos, lx.tok);
            goto fail;
        }
    }
    free(lx.tok);
    return (e);
fail:
    free(lx.tok);
    ban_expr_free(&e);
    return (NULL);
}

void
ban_expr_print(const struct ban_expr *e, struct sb *out)
{
    static const char *const fname[] = { [BF_URL] = "req.url",
                                         [BF_HOST] = "req.http.host",
                                         [BF_STATUS] = "obj.status",
                                         [BF_HTTP] = "obj.http." };

    OBJ_CHECK(e, BAN_EXPR_MAGIC);
    for (unsigned i = 0; i < e->n; i++) {
        const struct ban_cond *c = &e->c[i];
        if (i > 0)
            sb_cat(out, " && ");
        sb_cat(out, fname[c->field]);
        if (c->field == BF_HTTP)
            sb_cat(out, c->name);
        sb_printf(out, " %s ", op_text[c->op]);
        if (c->field == BF_STATUS) {
            sb_printf(out, "%u", c->num);
            continue;
        }
        sb_cat(out, "\"");
        for (size_t j = 0; j < c->arglen; j++) {
            if (c->arg[j] == '"' || c->arg[j] == '\\')
                sb_cat(out, "\\");
            sb_bcat(out, &c->arg[j], 1);
        }
        sb_cat(out, "\"");
    }
}

/* ---- matching ---- */

/*
 * pcre2_match()'s verdict: > 0 a match (0 would only say the ovector was
 * short), PCRE2_ERROR_NOMATCH none, anything else a failure to decide --
 * PCRE2_ERROR_MATCHLIMIT, DEPTHLIMIT, HEAPLIMIT, JIT_STACKLIMIT, NOMEMORY.
 * PCRE2's default limits apply (a match limit of 10 million steps).
 */
static int
re_match(const pcre2_code *re, const char *s, size_t len, pcre2_match_data **mdp)
{
    if (*mdp == NULL) {
        *mdp = pcre2_match_data_create(1, NULL);
        AN(*mdp);
    }
    return (pcre2_match(re, (PCRE2_SPTR)s, len, 0, 0, *mdp, NULL));
}

static bool
cond_match(const struct ban_cond *c, const char *key, size_t keylen, const struct cobj *oc,
           pcre2_match_data **mdp, int *re_err)
{
    int rc;

    const char *nul = memchr(key, '\0', keylen);
    struct txt v = { NULL, 0 };
    bool eq;

    switch (c->field) {
    case BF_STATUS:
        switch (c->op) {
        case BO_EQ:
            return (oc->status == c->num);
        case BO_NE:
            return (oc->status != c->num);
        case BO_LT:
            return (oc->status < c->num);
        case BO_GT:
            return (oc->status > c->num);
        case BO_LE:
            return (oc->status <= c->num);
        case BO_GE:
            return (oc->status >= c->num);
        case BO_MATCH:
        case BO_NMATCH:
            break;
        }
        SRG_WRONG("regex on obj.status");
    case BF_URL:
        AN(nul);
        v = (struct txt){ nul + 1, keylen - (size_t)(nul + 1 - key) };
        break;
    case BF_HOST:
        AN(nul);
        v = (struct txt){ key, (size_t)(nul - key) };
        break;
    case BF_HTTP:
        /* A hit-for-miss marker has no stored head: it has no fields. */
        if (oc->head == NULL || !hsh_head_field(oc, c->name, &v))
            return (c->op == BO_NE || c->op == BO_NMATCH);
        break;
    }
    if (c->op == BO_MATCH || c->op == BO_NMATCH) {
        rc = re_match(c->re, v.b, v.len, mdp);
        if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) {
            /* Undecided: the ban is meant to invalidate, so the condition holds. */
            if (*re_err == 0)
                *re_err = rc;
            return (true);
        }
        return ((rc >= 0) == (c->op == BO_MATCH));
    }
    eq = v.len == c->arglen && (c->field == BF_HOST ? strncasecmp(v.b, c->arg, v.len) == 0
                                                    : memcmp(v.b, c->arg, v.len) == 0);
    return (eq == (c->op == BO_EQ));
}

bool
ban_expr_match(const struct ban_expr *e, const char *key, size_t keylen, const struct cobj *oc,
               int *re_err)
{
    pcre2_match_data *md = NULL;
    bool m = true;

    OBJ_CHECK(e, BAN_EXPR_MAGIC);
    AN(key);
    AN(oc);
    AN(re_err);
    *re_err = 0;
    for (unsigned i = 0; i < e->n && m; i++)
        m = cond_match(&e->c[i], key, keylen, oc, &md, re_err);
    if (md != NULL)
        pcre2_match_data_free(md);
    return (m);
}

void
ban_expr_re_error(int re_err, struct sb *out)
{
    PCRE2_UCHAR msg[160];

    if (pcre2_get_error_message(re_err, msg, sizeof msg) < 0)
        sb_printf(out, "PCRE2 error %d", re_err);
    else
        sb_cat(out, (const char *)msg);
}
