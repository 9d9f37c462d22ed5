/*
 * The ESI parser: a state machine fed the page in pieces of any size,
 * deciding for each byte whether it is sent (literal) or is ESI markup,
 * and finding the include directives.  It keeps no page bytes but those
 * of the tag being read (at most max_tag), so a page of any size costs
 * the same memory; the literals are ranges of the stored body, written
 * to the program by the builder (esi_prog.c) as soon as they are known.
 *
 * Semantics follow Varnish's parser (see esi.h): same elements, same
 * errors, same leniency.  What is decided and when:
 *
 *   text             literal (or dropped inside <esi:remove>) as it comes
 *   '<' ...          undecided until the tag's kind is known (9 bytes at
 *                    most): an HTML comment or CDATA is literal to its end,
 *                    a tag not ours literal to its '>', "<!--esi" dropped
 *   an ESI tag       undecided until its '>': dropped, with its effect (an
 *                    include, <esi:remove> opening or closing); longer
 *                    than max_tag, or open at the end: literal
 *   "-->"            after <!--esi: undecided while it may be the end of
 *                    it (3 bytes), then dropped
 *
 * One owner thread, no lock.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "surogat/defs.h"
#include "surogat/esi.h"
#include "surogat/sb.h"

#include "esi_priv.h"

enum pst {
    P_START,   /* white space before the first tag: the XML check */
    P_BOM,     /* a UTF-8 BOM being matched (remove_bom) */
    P_NOTXML,  /* no ESI processing: all literal */
    P_TEXT,    /* between tags */
    P_LT,      /* after '<': which kind of tag (tbuf) */
    P_OTHER,   /* a tag not ours: literal to its '>' */
    P_UNTIL,   /* an HTML comment or CDATA: literal to `until` */
    P_ESINAME, /* after "<esi:" or "</esi:": the element's name */
    P_INTAG,   /* an ESI tag, between attributes */
    P_ATTR,    /* an attribute's name */
    P_VALSTART,
    P_VALUE,
    P_TAGERR, /* a broken ESI tag: dropped, to its '>' */
};

enum elem {
    EL_INCLUDE,
    EL_REMOVE,
    EL_COMMENT,
};

/* An attribute value kept for the include: bounded by the tag's length. */
struct val {
    char *p;
    size_t len;
    bool set;
};

struct esi_parser {
    unsigned magic;
#define ESI_PARSER_MAGIC 0x7e51c0a3
    struct esi_conf c;
    char *url;
    struct esi_build b;
    enum pst st;
    uint64_t off;     /* offset of the next byte */
    uint64_t tag_off; /* the '<' of the tag being read */
    bool remove;      /* inside <esi:remove> */
    bool esicmt;      /* inside <!--esi: "-->" ends it */
    unsigned cmt_k;   /* bytes of "-->" matched, from cmt_off */
    uint64_t cmt_off;
    const char *until; /* P_UNTIL: "-->" or "]]>" */
    unsigned until_k;
    unsigned bom_k;
    char tbuf[12]; /* P_LT: the bytes after '<' */
    unsigned tlen;
    char name[16]; /* P_ESINAME, P_ATTR */
    unsigned nlen;
    bool endtag, emptytag, canattr;
    enum elem elem;
    char delim;
    struct val *cur; /* the value being read, or NULL to skip it */
    bool dup;        /* cur was set already: a second src= or alt= */
    struct val val, src, alt;
    bool cont;
    unsigned nelem; /* ESI elements seen, against max_items */
    struct esi_stats stats;
};

static const char bom[] = "\xef\xbb\xbf";

struct esi_parser *
esi_parser_new(const struct esi_conf *c, esi_cut_f *cut, void *cut_priv)
{
    struct esi_parser *p;

    AN(c);
    OBJ_NEW(p, ESI_PARSER_MAGIC);
    p->c = *c;
    if (p->c.max_tag == 0)
        p->c.max_tag = ESI_MAX_TAG;
    if (p->c.max_items == 0)
        p->c.max_items = ESI_MAX_ITEMS;
    p->url = strdup(c->url != NULL ? c->url : "/");
    AN(p->url);
    p->c.url = p->url;
    esi__build_init(&p->b, cut, cut_priv);
    p->st = c->remove_bom ? P_BOM : c->no_xml_check ? P_TEXT : P_START;
    return (p);
}

void
esi_parser_free(struct esi_parser **pp)
{
    struct esi_parser *p = *pp;

    if (p == NULL)
        return;
    OBJ_CHECK(p, ESI_PARSER_MAGIC);
    esi__build_fini(&p->b);
    free(p->url);
    free(p->val.p);
    free(p->src.p);
    free(p->alt.p);
    OBJ_FREE(pp);
}

static void
report(struct esi_parser *p, bool error, const char *msg)
{
    if (error)
        p->stats.errors++;
    else
        p->stats.warnings++;
    if (p->c.log != NULL)
        p->c.log(p->c.log_priv, p->tag_off, error, msg);
}

/* Bytes up to end are text: sent, unless inside <esi:remove>. */
static void
text_to(struct esi_parser *p, uint64_t end)
{
    esi__build_range(&p->b, !p->remove, end);
}

static void
drop_to(struct esi_parser *p, uint64_t end)
{
    esi__build_range(&p->b, false, end);
}

static bool
is_ws(int c)
{
    return (c == ' ' || c == '\t' || c == '\n' || c == '\r');
}

static bool
name_start(int c)
{
    return ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':');
}

static bool
name_char(int c)
{
    return (name_start(c) || (c >= '0' && c <= '9') || c == '-' || c == '.');
}

/* ---- includes ---- */

static void
val_add(struct esi_parser *p, struct val *v, char ch)
{
    if (v->p == NULL) {
        v->p = malloc(p->c.max_tag + 1);
        AN(v->p);
    }
    /* The tag's own bound (max_tag) keeps any value within the buffer. */
    SRG_ASSERT(v->len < p->c.max_tag);
    v->p[v->len++] = ch;
}

/* ESI 1.0 and Varnish decode these five in src=; anything else stays as written. */
static void
decode_entities(struct sb *out, const char *s, size_t n)
{
    static const struct {
        const char *ent;
        char c;
    } ents[] = {
        { "&amp;", '&' }, { "&lt;", '<' }, { "&gt;", '>' }, { "&apos;", '\'' }, { "&quot;", '"' }
    };

    for (size_t i = 0; i < n;) {
        bool done = false;

        for (size_t k = 0; s[i] == '&' && k < ARRAY_LEN(ents) && !done; k++) {
            size_t el = strlen(ents[k].ent);

            if (n - i >= el && memcmp(s + i, ents[k].ent, el) == 0) {
                sb_bcat(out, &ents[k].c, 1);
                i += el;
                done = true;
            }
        }
        if (!done)
            sb_bcat(out, s + i++, 1);
    }
}

/*
 * src= (or alt=) as Varnish takes it: "http://host/path" gives a Host and
 * a path, "https://" is ignored (-1) unless https_as_http, "/path" is
 * kept, anything else is relative to the page's URL up to its last '/'
 * before a '?'.  The path has its entities decoded.  -1 with a report.
 */
static int
resolve(struct esi_parser *p, const struct val *v, struct sb *host, struct sb *path, bool alt)
{
    const char *s = v->p, *e = v->p + v->len, *slash;
    size_t skip = 0;

    if (v->len > 7 && memcmp(s, "http://", 7) == 0) {
        skip = 7;
    } else if (v->len > 8 && memcmp(s, "https://", 8) == 0) {
        if (!p->c.https_as_http) {
            report(p, false,
                   alt ? "ESI 1.0 <esi:include> alt= with https:// ignored"
                       : "ESI 1.0 <esi:include> with https:// ignored");
            return (-1);
        }
        report(p, false, "ESI 1.0 <esi:include> https:// treated as http://");
        skip = 8;
    }
    if (skip > 0) {
        slash = memchr(s + skip, '/', (size_t)(e - s - skip));
        if (slash == NULL || slash == s + skip) {
            report(p, true, "ESI 1.0 <esi:include> invalid src= URL");
            return (-1);
        }
        sb_bcat(host, s + skip, (size_t)(slash - s - skip));
        s = slash;
    } else if (*s != '/') {
        const char *u = p->url, *last = NULL;

        for (; *u != '\0' && *u != '?'; u++)
            if (*u == '/')
                last = u;
        if (last == NULL)
            sb_cat(path, "/");
        else
            sb_bcat(path, p->url, (size_t)(last - p->url + 1));
    }
    decode_entities(path, s, (size_t)(e - s));
    return (sb_ok(host) && sb_ok(path) ? 0 : -1);
}

static void
do_include(struct esi_parser *p)
{
    size_t cap = 2 * p->c.max_tag + strlen(p->url) + 16;
    char *buf = malloc(4 * cap);
    struct sb host, path, ahost, alt;

    AN(buf);
    sb_init(&host, buf, cap);
    sb_init(&path, buf + cap, cap);
    sb_init(&ahost, buf + 2 * cap, cap);
    sb_init(&alt, buf + 3 * cap, cap);
    if (!p->emptytag)
        report(p, false, "ESI 1.0 <esi:include> lacks final '/'");
    if (!p->src.set) {
        report(p, true, "ESI 1.0 <esi:include> lacks src attr");
    } else if (resolve(p, &p->src, &host, &path, false) == 0) {
        /* alt= with a host of its own keeps it in the string: "http://host/path". */
        if (p->alt.set && resolve(p, &p->alt, &ahost, &alt, true) == 0 && ahost.len > 0) {
            struct sb full;
            char *fb = malloc(2 * cap);

            AN(fb);
            sb_init(&full, fb, 2 * cap);
            sb_printf(&full, "http://%s%s", ahost.buf, alt.buf);
            esi__build_include(&p->b, host.buf, host.len, path.buf, path.len, full.buf, full.len,
                               p->cont);
            free(fb);
        } else {
            if (!p->alt.set || !sb_ok(&alt) || ahost.len > 0)
                alt.len = 0; /* none, or refused (https://) */
            esi__build_include(&p->b, host.buf, host.len, path.buf, path.len, alt.buf, alt.len,
                               p->cont);
        }
        p->stats.includes++;
    }
    free(buf);
}

/* ---- tags ---- */

/* An ESI tag ended at the current byte ('>'): it is dropped, and does what it says. */
static void
esi_tag_end(struct esi_parser *p)
{
    drop_to(p, p->off + 1);
    switch (p->elem) {
    case EL_INCLUDE:
        do_include(p);
        break;
    case EL_REMOVE:
        if (p->emptytag)
            report(p, true, "ESI 1.0 <esi:remove/> not legal");
        else if (p->remove && !p->endtag)
            report(p, true, "ESI 1.0 <esi:remove> already open");
        else if (!p->remove && p->endtag)
            report(p, true, "ESI 1.0 <esi:remove> not open");
        else
            p->remove = !p->endtag;
        break;
    case EL_COMMENT:
        if (!p->emptytag)
            report(p, true, "ESI 1.0 <esi:comment> needs final '/'");
        break;
    }
    p->st = P_TEXT;
}

static void
tag_error(struct esi_parser *p, const char *msg)
{
    report(p, true, msg);
    p->st = P_TAGERR;
}

/* One more ESI element: past max_items the rest of the page is literal. */
static bool
count_elem(struct esi_parser *p)
{
    p->stats.found = true;
    if (++p->nelem <= p->c.max_items)
        return (true);
    report(p, true, "ESI: more elements than max_items: the rest of the page is literal");
    p->remove = false;
    p->esicmt = false;
    text_to(p, p->tag_off);
    p->st = P_NOTXML;
    return (false);
}

/* The element name after "<esi:" is complete (c ended it). */
static void
esi_name_end(struct esi_parser *p)
{
    static const struct {
        const char *name;
        enum elem el;
    } names[] = { { "include", EL_INCLUDE }, { "remove", EL_REMOVE }, { "comment", EL_COMMENT } };
    size_t i;

    for (i = 0; i < ARRAY_LEN(names); i++)
        if (p->nlen == strlen(names[i].name) && memcmp(p->name, names[i].name, p->nlen) == 0)
            break;
    if (i == ARRAY_LEN(names)) {
        tag_error(p, "ESI 1.0 <esi:bogus> element");
        return;
    }
    p->elem = names[i].el;
    p->emptytag = false;
    p->canattr = false;
    p->src.set = p->alt.set = false;
    p->src.len = p->alt.len = 0;
    p->cont = false;
    p->st = P_INTAG;
    if (p->elem == EL_INCLUDE && p->remove)
        tag_error(p, "ESI 1.0 <esi:include> element nested in <esi:remove>");
    else if (p->elem == EL_INCLUDE && p->endtag)
        tag_error(p, "ESI 1.0 </esi:include> illegal end-tag");
    else if (p->elem == EL_COMMENT && p->remove)
        tag_error(p, "ESI 1.0 <esi:comment> element nested in <esi:remove>");
    else if (p->elem == EL_COMMENT && p->endtag)
        tag_error(p, "ESI 1.0 </esi:comment> illegal end-tag");
}

/* An attribute value ended: keep it if the include wants it. */
static void
value_end(struct esi_parser *p)
{
    struct val *v = p->cur;

    p->st = P_INTAG;
    p->canattr = p->delim == ' ';
    if (v == NULL)
        return;
    if (v == &p->val) {
        /* onerror= */
        p->cont = v->len == 8 && memcmp(v->p, "continue", 8) == 0;
        return;
    }
    if (p->dup) {
        tag_error(p, v == &p->src ? "ESI 1.0 <esi:include> has multiple src= attributes"
                                  : "ESI 1.0 <esi:include> has multiple alt= attributes");
        return;
    }
    for (size_t i = 0; i < v->len; i++) {
        if (is_ws(v->p[i])) {
            tag_error(p, "ESI 1.0 <esi:include> has whitespace in src= attribute");
            return;
        }
    }
    v->set = v->len > 0;
}

/* After '<': the bytes so far (tbuf) decide the kind of tag, or wait for more. */
static void
lt_byte(struct esi_parser *p, int ch)
{
    static const char *const pats[] = { "!--esi", "!--", "/esi:", "esi:", "![CDATA[" };
    bool maybe = false;

    p->tbuf[p->tlen++] = (char)ch;
    if (p->tlen == 6 && memcmp(p->tbuf, "!--esi", 6) == 0) {
        if (!count_elem(p))
            return;
        if (p->remove)
            report(p, true, "ESI 1.0 Nested <!--esi element in <esi:remove>");
        drop_to(p, p->off + 1);
        p->esicmt = true;
        p->cmt_k = 0;
        p->st = P_TEXT;
        return;
    }
    if (p->tlen == 4 && memcmp(p->tbuf, "esi:", 4) == 0) {
        p->endtag = false;
    } else if (p->tlen == 5 && memcmp(p->tbuf, "/esi:", 5) == 0) {
        p->endtag = true;
    } else if (p->tlen == 8 && memcmp(p->tbuf, "![CDATA[", 8) == 0) {
        p->until = "]]>";
        p->until_k = 0;
        p->st = P_UNTIL;
        return;
    } else {
        for (size_t i = 0; i < ARRAY_LEN(pats); i++)
            if (p->tlen < strlen(pats[i]) && memcmp(p->tbuf, pats[i], p->tlen) == 0)
                maybe = true;
        if (maybe)
            return;
        if (p->tlen >= 4 && memcmp(p->tbuf, "!--", 3) == 0) {
            /*
             * An HTML comment: ESI in it is not processed.  Like Varnish,
             * this also disarms an enclosing <!--esi: its "-->" ends both.
             */
            p->esicmt = false;
            p->until = "-->";
            p->until_k = 0;
            p->st = P_UNTIL;
            /* This byte is the comment's first (it may begin the "-->"). */
            if (ch == '-')
                p->until_k = 1;
            return;
        }
        /* Not ours: literal to the '>', which may be this very byte. */
        p->st = ch == '>' ? P_TEXT : P_OTHER;
        return;
    }
    if (!count_elem(p))
        return;
    p->nlen = 0;
    p->st = P_ESINAME;
}

/* One byte of an ESI tag, in whichever of its states. */
static void
tag_byte(struct esi_parser *p, int ch)
{
    switch (p->st) {
    case P_ESINAME:
        if (name_char(ch) && ch != ':' && p->nlen < sizeof p->name) {
            p->name[p->nlen++] = (char)ch;
            return;
        }
        esi_name_end(p);
        if (p->st == P_TAGERR) {
            tag_byte(p, ch); /* the byte that ended the name may be the '>' */
            return;
        }
        tag_byte(p, ch); /* the byte that ended the name, in P_INTAG */
        return;
    case P_INTAG:
        if (is_ws(ch) && !p->emptytag) {
            p->canattr = true;
        } else if (ch == '/' && !p->emptytag) {
            p->emptytag = true;
            p->canattr = false;
        } else if (ch == '>') {
            esi_tag_end(p);
        } else if (p->emptytag) {
            tag_error(p, "XML 1.0 '>' does not follow '/' in tag");
        } else if (p->canattr && name_start(ch)) {
            p->nlen = 0;
            p->name[p->nlen++] = (char)ch;
            p->st = P_ATTR;
        } else {
            tag_error(p, "XML 1.0 Illegal attribute start char");
        }
        return;
    case P_ATTR:
        if (name_char(ch)) {
            /* A longer name is none we want: kept cut, it matches nothing. */
            if (p->nlen < sizeof p->name)
                p->name[p->nlen++] = (char)ch;
            return;
        }
        if (ch == '=') {
            p->cur = NULL;
            if (p->elem == EL_INCLUDE && p->nlen == 3 && memcmp(p->name, "src", 3) == 0)
                p->cur = &p->src;
            else if (p->elem == EL_INCLUDE && p->nlen == 3 && memcmp(p->name, "alt", 3) == 0)
                p->cur = &p->alt;
            else if (p->elem == EL_INCLUDE && p->nlen == 7 && memcmp(p->name, "onerror", 7) == 0)
                p->cur = &p->val;
            p->dup = p->cur != NULL && p->cur->set;
            if (p->cur != NULL)
                p->cur->len = 0;
            p->st = P_VALSTART;
            return;
        }
        if (is_ws(ch) || ch == '/' || ch == '>') {
            /* A name without a value: skipped, as Varnish does. */
            p->st = P_INTAG;
            p->canattr = false;
            tag_byte(p, ch);
            return;
        }
        tag_error(p, "XML 1.0 Illegal attr char");
        return;
    case P_VALSTART:
        if (ch == '"' || ch == '\'') {
            p->delim = (char)ch;
            p->st = P_VALUE;
        } else if (is_ws(ch)) {
            tag_error(p, "XML 1.0 Illegal attribute delimiter");
        } else {
            p->delim = ' ';
            p->st = P_VALUE;
            tag_byte(p, ch);
        }
        return;
    case P_VALUE:
        if (ch == '>') {
            /* Varnish's reading too: the tag ends here, broken. */
            tag_error(p, "XML 1.0 Missing end attribute delimiter");
            tag_byte(p, ch);
        } else if (ch == p->delim || (p->delim == ' ' && is_ws(ch))) {
            value_end(p);
        } else if (p->cur != NULL) {
            val_add(p, p->cur, (char)ch);
        }
        return;
    case P_TAGERR:
        if (ch == '>') {
            drop_to(p, p->off + 1);
            p->st = P_TEXT;
        }
        return;
    default:
        SRG_WRONG("esi tag state");
    }
}

static bool
in_esi_tag(const struct esi_parser *p)
{
    return (p->st == P_ESINAME || p->st == P_INTAG || p->st == P_ATTR || p->st == P_VALSTART ||
            p->st == P_VALUE || p->st == P_TAGERR);
}

/* "-->" after <!--esi: byte ch of the text, matched against it. */
static void
cmt_byte(struct esi_parser *p, int ch)
{
    if (ch == "-->"[p->cmt_k]) {
        if (p->cmt_k == 0)
            p->cmt_off = p->off;
        if (++p->cmt_k == 3) {
            text_to(p, p->cmt_off);
            drop_to(p, p->off + 1);
            p->esicmt = false;
            p->cmt_k = 0;
        }
    } else if (ch == '-' && p->cmt_k == 2) {
        p->cmt_off++; /* "--" still: one more '-' before it was text */
    } else {
        p->cmt_k = ch == '-' ? 1 : 0;
        p->cmt_off = p->off;
    }
}

int
esi_parse(struct esi_parser *p, const void *buf, size_t len)
{
    const unsigned char *s = buf, *e = s + len;

    OBJ_CHECK(p, ESI_PARSER_MAGIC);
    AN(buf != NULL || len == 0);
    while (s < e) {
        int ch = *s;

        switch (p->st) {
        case P_NOTXML:
            p->off += (uint64_t)(e - s);
            s = e;
            text_to(p, p->off);
            continue;
        case P_BOM:
            if (ch == (unsigned char)bom[p->bom_k]) {
                if (++p->bom_k == 3) {
                    drop_to(p, 3);
                    p->st = p->c.no_xml_check ? P_TEXT : P_START;
                }
                break;
            }
            p->st = p->c.no_xml_check ? P_TEXT : P_START;
            if (p->bom_k > 0 && !p->c.no_xml_check) {
                p->st = P_NOTXML; /* not '<' first: not XML */
                report(p, false, "ESI: no processing, the first byte is not '<'");
                p->stats.notxml = true;
            }
            continue; /* this byte again, in the new state */
        case P_START:
            if (is_ws(ch))
                break;
            if (ch != '<') {
                report(p, false, "ESI: no processing, the first byte is not '<'");
                p->stats.notxml = true;
                p->st = P_NOTXML;
                continue;
            }
            p->st = P_TEXT;
            continue;
        case P_TEXT:
            if (!p->esicmt) {
                const unsigned char *lt = memchr(s, '<', (size_t)(e - s));

                if (lt == NULL) {
                    p->off += (uint64_t)(e - s);
                    s = e;
                    continue;
                }
                p->off += (uint64_t)(lt - s);
                s = lt;
            } else if (ch != '<') {
                cmt_byte(p, ch);
                break;
            }
            p->cmt_k = 0;
            text_to(p, p->off);
            p->tag_off = p->off;
            p->tlen = 0;
            p->st = P_LT;
            break;
        case P_LT:
            lt_byte(p, ch);
            break;
        case P_OTHER: {
            const unsigned char *gt = memchr(s, '>', (size_t)(e - s));

            if (gt == NULL) {
                p->off += (uint64_t)(e - s);
                s = e;
                continue;
            }
            p->off += (uint64_t)(gt - s);
            s = gt;
            p->st = P_TEXT;
            break;
        }
        case P_UNTIL:
            if (ch == p->until[p->until_k]) {
                if (++p->until_k == 3)
                    p->st = P_TEXT;
            } else if (!(ch == p->until[0] && p->until_k == 2)) {
                p->until_k = ch == p->until[0] ? 1 : 0;
            }
            break;
        default:
            tag_byte(p, ch);
            if (in_esi_tag(p) && p->off + 1 - p->tag_off >= p->c.max_tag) {
                report(p, true, "ESI tag longer than max_tag: left as it is");
                text_to(p, p->off + 1);
                p->st = P_OTHER;
            }
            break;
        }
        s++;
        p->off++;
    }
    /* What this piece decided: all but a tag being read or a "-->" being matched. */
    switch (p->st) {
    case P_BOM:
    case P_LT:
        break;
    case P_TEXT:
        text_to(p, p->esicmt && p->cmt_k > 0 ? p->cmt_off : p->off);
        break;
    case P_START:
    case P_NOTXML:
    case P_OTHER:
    case P_UNTIL:
        text_to(p, p->off);
        break;
    default:
        SRG_ASSERT(in_esi_tag(p));
        break;
    }
    return (p->b.failed ? -1 : 0);
}

uint64_t
esi_decided(const struct esi_parser *p)
{
    OBJ_CHECK(p, ESI_PARSER_MAGIC);
    return (p->b.end);
}

int
esi_finish(struct esi_parser *p, unsigned char **prog, size_t *plen)
{
    OBJ_CHECK(p, ESI_PARSER_MAGIC);
    if (in_esi_tag(p)) {
        report(p, true, "ESI: the page ended inside a tag: left as it is");
    }
    if (p->esicmt)
        report(p, false, "ESI 1.0 <!--esi not closed by -->");
    /* Whatever waited is text now: a partial BOM, tag or "-->". */
    text_to(p, p->off);
    if (p->remove)
        report(p, true, "ESI 1.0 <esi:remove> not closed: removed to the end");
    p->stats.len = p->off;
    if (esi__build_finish(&p->b, p->off, prog, plen) != 0)
        return (-1);
    p->stats.literals = p->b.nlit;
    return (0);
}

void
esi_parser_stats(const struct esi_parser *p, struct esi_stats *st)
{
    OBJ_CHECK(p, ESI_PARSER_MAGIC);
    *st = p->stats;
    st->len = p->off;
    st->literals = p->b.nlit;
}
