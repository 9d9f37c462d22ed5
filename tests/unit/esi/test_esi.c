/*
 * esi: the parser against a table of pages (Varnish's behaviour for each
 * construct and each kind of malformed ESI), each fed whole, a byte at a
 * time and in random pieces, which must all give the same program; the
 * program's checks; and ESI pages stored gzip, whose literal segments
 * stitched into one stream must gunzip to exactly the literal bytes.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <zlib.h>

#include "unit.h"
#include "tbuf.h"
#include "surogat/defs.h"
#include "surogat/esi.h"
#include "surogat/gz.h"

static uint32_t rs = 362436069u;

static uint32_t
rnd(void)
{
    return (xrnd(&rs));
}

/* The page as a delivery would make it, includes shown as {host|src|alt|c}. */
static void
render(const unsigned char *page, const unsigned char *prog, size_t plen, struct buf *out)
{
    struct esi_iter it;
    struct esi_item item;
    enum esi_next n;

    out->len = 0;
    buf_add(out, "", 0);
    ck_assert_int_eq(esi_iter_init(&it, prog, plen), 0);
    while ((n = esi_iter_next(&it, &item)) == ESI_ITEM) {
        if (item.kind == ESI_LITERAL) {
            buf_add(out, page + item.off, (size_t)item.len);
            continue;
        }
        buf_add(out, "{", 1);
        buf_add(out, item.host.b, item.host.len);
        buf_add(out, "|", 1);
        buf_add(out, item.src.b, item.src.len);
        if (item.alt.len > 0 || item.cont) {
            buf_add(out, "|", 1);
            buf_add(out, item.alt.b, item.alt.len);
        }
        if (item.cont)
            buf_add(out, "|c", 2);
        buf_add(out, "}", 1);
    }
    ck_assert_int_eq(n, ESI_DONE);
}

/* Parse page in pieces: mode 0 whole, 1 a byte at a time, else random sizes. */
static void
parse(const struct esi_conf *c, const char *page, size_t len, int mode, unsigned char **prog,
      size_t *plen, struct esi_stats *st)
{
    struct esi_parser *p = esi_parser_new(c, NULL, NULL);
    size_t off = 0;

    while (off < len) {
        size_t n = mode == 0 ? len : mode == 1 ? 1 : 1 + rnd() % 17;
        char *copy;

        if (n > len - off)
            n = len - off;
        /* An exact-size copy: the parser must not read past what it is given. */
        copy = malloc(n);
        memcpy(copy, page + off, n);
        ck_assert_int_eq(esi_parse(p, copy, n), 0);
        free(copy);
        off += n;
        /* Never more undecided than one tag. */
        ck_assert_uint_le(off - esi_decided(p), (c->max_tag ? c->max_tag : ESI_MAX_TAG) + 8);
    }
    ck_assert_int_eq(esi_finish(p, prog, plen), 0);
    esi_parser_stats(p, st);
    esi_parser_free(&p);
    ck_assert_ptr_null(p);
}

struct ecase {
    const char *page;
    const char *want; /* rendered */
    unsigned errors, warnings;
    bool found;
};

static void
check_case(const struct esi_conf *c, const struct ecase *k)
{
    unsigned char *prog[3];
    size_t plen[3];
    struct esi_stats st[3];
    struct buf out = { 0 };
    size_t len = strlen(k->page);

    for (int mode = 0; mode < 3; mode++)
        parse(c, k->page, len, mode, &prog[mode], &plen[mode], &st[mode]);
    render((const unsigned char *)k->page, prog[0], plen[0], &out);
    ck_assert_msg(strcmp((char *)out.p, k->want) == 0, "page [%s]\n got [%s]\nwant [%s]", k->page,
                  out.p, k->want);
    ck_assert_msg(st[0].errors == k->errors && st[0].warnings == k->warnings,
                  "page [%s]: %u errors %u warnings, want %u %u", k->page, st[0].errors,
                  st[0].warnings, k->errors, k->warnings);
    ck_assert_msg(st[0].found == k->found, "page [%s]: found %d", k->page, st[0].found);
    ck_assert_uint_eq(st[0].len, len);
    /* However it was cut, the same program. */
    for (int mode = 1; mode < 3; mode++) {
        ck_assert_msg(plen[mode] == plen[0] && memcmp(prog[mode], prog[0], plen[0]) == 0,
                      "page [%s] cut %d: another program", k->page, mode);
        ck_assert_uint_eq(st[mode].errors, st[0].errors);
        ck_assert_uint_eq(st[mode].warnings, st[0].warnings);
    }
    for (int mode = 0; mode < 3; mode++)
        free(prog[mode]);
    free(out.p);
}

START_TEST(constructs)
{
    static const struct esi_conf c = { .url = "/dir/page.html?q=/x/y" };
    static const struct ecase v[] = {
        /* no ESI */
        { "<html>hello</html>", "<html>hello</html>", 0, 0, false },
        { "", "", 0, 0, false },
        { "<", "<", 0, 0, false },
        { "<p>a < b > c</p>", "<p>a < b > c</p>", 0, 0, false },
        /* include */
        { "<p>a<esi:include src=\"/x\"/>b</p>", "<p>a{|/x}b</p>", 0, 0, true },
        { "<p><esi:include src='/x'/></p>", "<p>{|/x}</p>", 0, 0, true },
        { "<p><esi:include src=/x /></p>", "<p>{|/x}</p>", 0, 0, true },
        { "<esi:include src=\"/x\"/>", "{|/x}", 0, 0, true },
        { "<p><esi:include\n\tsrc=\"/x\"\n/></p>", "<p>{|/x}</p>", 0, 0, true },
        { "<p><esi:include src=\"/x\" foo=\"bar\" data-y='z'/></p>", "<p>{|/x}</p>", 0, 0, true },
        { "<p><esi:include src=\"/x\"></p>", "<p>{|/x}</p>", 0, 1, true }, /* lacks '/' */
        { "<p><esi:include src=\"/x\" onerror=\"continue\"/></p>", "<p>{|/x||c}</p>", 0, 0, true },
        { "<p><esi:include src=\"/x\" onerror=\"abort\"/></p>", "<p>{|/x}</p>", 0, 0, true },
        { "<p><esi:include src=\"/x\" alt=\"/y\"/></p>", "<p>{|/x|/y}</p>", 0, 0, true },
        { "<p><esi:include alt=\"z\" src=\"/x\"/></p>", "<p>{|/x|/dir/z}</p>", 0, 0, true },
        { "<p><esi:include src=\"/x\" alt=\"http://h2/y\"/></p>", "<p>{|/x|http://h2/y}</p>", 0, 0,
          true },
        /* entities in src, relative and absolute URLs */
        { "<p><esi:include src=\"/a?b=1&amp;c=2\"/></p>", "<p>{|/a?b=1&c=2}</p>", 0, 0, true },
        { "<p><esi:include src=\"/&lt;&gt;&quot;&apos;&foo;&amp\"/></p>",
          "<p>{|/<>\"'&foo;&amp}</p>", 0, 0, true },
        { "<p><esi:include src=\"frag?x=1\"/></p>", "<p>{|/dir/frag?x=1}</p>", 0, 0, true },
        { "<p><esi:include src=\"http://example.com/f\"/></p>", "<p>{example.com|/f}</p>", 0, 0,
          true },
        { "<p><esi:include src=\"http://example.com\"/></p>", "<p></p>", 1, 0, true },
        { "<p><esi:include src=\"https://example.com/f\"/></p>", "<p></p>", 0, 1, true },
        /* malformed includes: dropped, counted */
        { "<p><esi:include/></p>", "<p></p>", 1, 0, true },
        { "<p><esi:include src=\"\"/></p>", "<p></p>", 1, 0, true },
        { "<p><esi:include src=\"/a\" src=\"/b\"/></p>", "<p></p>", 1, 0, true },
        { "<p><esi:include src=\"/a b\"/></p>", "<p></p>", 1, 0, true },
        { "<p><esi:include src=\"/x>b</p>", "<p>b</p>", 1, 0, true },
        { "<p><esi:include src=\"/x\"alt=\"/y\"/></p>", "<p></p>", 1, 0, true },
        { "<p><esi:include src= \"/x\"/></p>", "<p></p>", 1, 0, true },
        { "<p><esi:include src=\"/x\"/ ></p>", "<p></p>", 1, 0, true },
        { "<p></esi:include></p>", "<p></p>", 1, 0, true },
        { "<p><esi:includex src=\"/x\"/></p>", "<p></p>", 1, 0, true },
        { "<p><esi:choose><esi:when test=\"1\">a</esi:when></esi:choose></p>", "<p>a</p>", 4, 0,
          true },
        /* case matters, as in XML and Varnish */
        { "<p><ESI:include src=\"/x\"/></p>", "<p><ESI:include src=\"/x\"/></p>", 0, 0, false },
        { "<p><esi:Include src=\"/x\"/></p>", "<p></p>", 1, 0, true },
        /* remove */
        { "<p>a<esi:remove>fallback</esi:remove>b</p>", "<p>ab</p>", 0, 0, true },
        { "<p>a<esi:remove>x<esi:include src=\"/i\"/>y</esi:remove>b</p>", "<p>ab</p>", 1, 0,
          true },
        { "<p>a<esi:remove>x<esi:remove>y</esi:remove>z</esi:remove>b", "<p>azb", 2, 0, true },
        { "<p>a</esi:remove>b</p>", "<p>ab</p>", 1, 0, true },
        { "<p>a<esi:remove/>b</p>", "<p>ab</p>", 1, 0, true },
        { "<p>a<esi:remove>b</p>", "<p>a", 1, 0, true }, /* not closed: to the end */
        { "<p>a<esi:remove><!--esi x -->y</esi:remove>b</p>", "<p>ab</p>", 1, 0, true },
        { "<p>a<esi:remove><esi:comment/>y</esi:remove>b</p>", "<p>ab</p>", 1, 0, true },
        /* <!--esi ... --> */
        { "<p><!--esi <b>x</b> --></p>", "<p> <b>x</b> </p>", 0, 0, true },
        { "<p><!--esi<esi:include src=\"/a\"/>--></p>", "<p>{|/a}</p>", 0, 0, true },
        { "<p><!--esi a---></p>", "<p> a-</p>", 0, 0, true },
        { "<p><!--esi a - -- -> b--></p>", "<p> a - -- -> b</p>", 0, 0, true },
        { "<p><!--esi a</p>", "<p> a</p>", 0, 1, true }, /* not closed */
        { "<p><!--esix--></p>", "<p>x</p>", 0, 0, true },
        /* Varnish's reading: an HTML comment inside ends it, the outer --> stays. */
        { "<p><!--esi a<!-- c -->b--></p>", "<p> a<!-- c -->b--></p>", 0, 0, true },
        /* comments, CDATA: not processed */
        { "<p><!-- <esi:include src=\"/a\"/> --></p>", "<p><!-- <esi:include src=\"/a\"/> --></p>",
          0, 0, false },
        { "<p><!----><esi:include src=\"/a\"/></p>", "<p><!---->{|/a}</p>", 0, 0, true },
        { "<p><!---- x ---></p>", "<p><!---- x ---></p>", 0, 0, false },
        { "<p><![CDATA[<esi:include src=\"/a\"/>]]></p>",
          "<p><![CDATA[<esi:include src=\"/a\"/>]]></p>", 0, 0, false },
        { "<p><![CDATA[x]]]></p><esi:include src=\"/a\"/>", "<p><![CDATA[x]]]></p>{|/a}", 0, 0,
          true },
        /* <esi:comment> */
        { "<p>a<esi:comment text=\"note\"/>b</p>", "<p>ab</p>", 0, 0, true },
        { "<p>a<esi:comment text=\"note\">b</p>", "<p>ab</p>", 1, 0, true },
        { "<p>a</esi:comment>b</p>", "<p>ab</p>", 1, 0, true },
        /* other tags are literal to their '>', ESI inside them not processed */
        { "<p title=\"<esi:include src='/a'/>\">t</p>",
          "<p title=\"<esi:include src='/a'/>\">t</p>", 0, 0, false },
        { "<e><es><esi>", "<e><es><esi>", 0, 0, false },
        { "<!DOCTYPE html><esi:include src=\"/a\"/>", "<!DOCTYPE html>{|/a}", 0, 0, true },
        /* the end of the page inside a tag: literal */
        { "<p>a<esi:include src=\"/x\"", "<p>a<esi:include src=\"/x\"", 1, 0, true },
        { "<p>a<esi:", "<p>a<esi:", 1, 0, true },
        { "<p>a<!--es", "<p>a<!--es", 0, 0, false },
        { "<p>a<!--esi b --", "<p>a b --", 0, 1, true },
        /* the XML check */
        { "{\"a\": \"<esi:include src=\\\"/x\\\"/>\"}",
          "{\"a\": \"<esi:include src=\\\"/x\\\"/>\"}", 0, 1, false },
        { " \n\t<esi:include src=\"/x\"/>", " \n\t{|/x}", 0, 0, true },
        { "\xef\xbb\xbf<esi:include src=\"/x\"/>", "\xef\xbb\xbf<esi:include src=\"/x\"/>", 0, 1,
          false },
    };

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        check_case(&c, &v[i]);
}
END_TEST

START_TEST(options)
{
    struct esi_conf c = { .remove_bom = true };
    static const struct ecase bom = { "\xef\xbb\xbf<p><esi:include src=\"/x\"/></p>",
                                      "<p>{|/x}</p>", 0, 0, true };
    static const struct ecase notbom = { "\xef\xbb<p>", "\xef\xbb<p>", 0, 1, false };
    static const struct ecase json = { "{\"a\": \"<esi:include src='x'/>\"}", "{\"a\": \"{|/x}\"}",
                                       0, 0, true };
    static const struct ecase https = { "<esi:include src=\"https://h/f\"/>", "{h|/f}", 0, 1,
                                        true };
    static const struct ecase longtag = {
        "<p><esi:include src=\"/0123456789abcdef\"/></p><esi:include src=\"/a\"/>",
        "<p><esi:include src=\"/0123456789abcdef\"/></p>{|/a}", 1, 0, true
    };
    static const struct ecase items = {
        "<esi:include src=\"/a\"/><esi:include src=\"/b\"/><esi:include src=\"/c\"/>",
        "{|/a}{|/b}<esi:include src=\"/c\"/>", 1, 0, true
    };

    check_case(&c, &bom);
    check_case(&c, &notbom);
    c = (struct esi_conf){ .no_xml_check = true };
    check_case(&c, &json);
    c = (struct esi_conf){ .https_as_http = true };
    check_case(&c, &https);
    c = (struct esi_conf){ .max_tag = 30 };
    check_case(&c, &longtag);
    c = (struct esi_conf){ .max_items = 2 };
    check_case(&c, &items);
    /* A URL without a slash: relative src against "/". */
    c = (struct esi_conf){ .url = "page" };
    check_case(&c, &(struct ecase){ "<esi:include src=\"f\"/>", "{|/f}", 0, 0, true });
}
END_TEST

struct logged {
    unsigned n;
    uint64_t off[8];
    bool error[8];
};

static void
log_cb(void *priv, uint64_t off, bool error, const char *msg)
{
    struct logged *l = priv;

    ck_assert_ptr_nonnull(msg);
    if (l->n < 8) {
        l->off[l->n] = off;
        l->error[l->n] = error;
    }
    l->n++;
}

START_TEST(errors_logged_with_offsets)
{
    struct logged l = { 0 };
    struct esi_conf c = { .log = log_cb, .log_priv = &l };
    const char *page = "<p>0123<esi:bogus/>45<esi:include src=\"/x\">";
    struct esi_parser *p = esi_parser_new(&c, NULL, NULL);
    unsigned char *prog;
    size_t plen;

    ck_assert_int_eq(esi_parse(p, page, strlen(page)), 0);
    ck_assert_int_eq(esi_finish(p, &prog, &plen), 0);
    ck_assert_uint_eq(l.n, 2);
    ck_assert_uint_eq(l.off[0], 7); /* the bogus tag's '<' */
    ck_assert(l.error[0]);
    ck_assert_uint_eq(l.off[1], 21); /* the include lacking its '/' */
    ck_assert(!l.error[1]);
    free(prog);
    esi_parser_free(&p);
}
END_TEST

/* A page of random text and ESI, for the invariants. */
static char *
random_page(size_t *len)
{
    static const char *const bits[] = {
        "text ",
        "<p>",
        "</p>\n",
        "<esi:include src=\"/f\"/>",
        "<esi:include src='/g' alt=\"/h\"/>",
        "<esi:remove>",
        "</esi:remove>",
        "<!--esi ",
        "-->",
        "<!-- c -->",
        "<![CDATA[x]]>",
        "<esi:comment text=\"x\"/>",
        "<esi:bogus>",
        "<esi:include ",
        "\"",
        ">",
        "<",
        "-",
        "&amp;",
        "<ESI:include src=\"/u\"/>",
        "<a href=\"/\">",
    };
    size_t n = rnd() % 200, cap = 64 + n * 40;
    char *p = malloc(cap);

    *len = 0;
    p[(*len)++] = '<';
    for (size_t i = 0; i < n; i++) {
        const char *b = bits[rnd() % ARRAY_LEN(bits)];
        memcpy(p + *len, b, strlen(b));
        *len += strlen(b);
    }
    return (p);
}

/* Literals in order, within the page, apart; every gap starts with ESI markup. */
static void
check_invariants(const char *page, size_t len, const unsigned char *prog, size_t plen)
{
    static const char *const starts[] = { "<esi:", "</esi:", "<!--esi", "-->" };
    struct esi_iter it;
    struct esi_item item;
    uint64_t end = 0;
    enum esi_next n;
    struct esi_info info;

    ck_assert_int_eq(esi_prog_info(prog, plen, &info), 0);
    ck_assert_uint_eq(info.len, len);
    ck_assert_int_eq(esi_iter_init(&it, prog, plen), 0);
    for (;;) {
        uint64_t gap_end;

        n = esi_iter_next(&it, &item);
        ck_assert_int_ne(n, ESI_E_CORRUPT);
        if (n == ESI_ITEM && item.kind == ESI_INCLUDE) {
            ck_assert(item.src.len > 0 && item.src.b[0] == '/');
            continue;
        }
        gap_end = n == ESI_DONE ? len : item.off;
        ck_assert_uint_ge(gap_end, end);
        if (gap_end > end) {
            bool ok = false;
            for (size_t k = 0; k < ARRAY_LEN(starts); k++)
                ok |= len - end >= strlen(starts[k]) &&
                      memcmp(page + end, starts[k], strlen(starts[k])) == 0;
            ck_assert_msg(ok, "a gap at %llu: [%.20s]", (unsigned long long)end, page + end);
        }
        if (n == ESI_DONE)
            break;
        ck_assert_uint_gt(item.len, 0);
        end = item.off + item.len;
        ck_assert_uint_le(end, len);
    }
}

START_TEST(random_pages_any_cut)
{
    struct esi_conf c = { .max_tag = 64 };

    for (int round = 0; round < 300; round++) {
        size_t len, plen[3];
        char *page = random_page(&len);
        unsigned char *prog[3];
        struct esi_stats st[3];

        for (int mode = 0; mode < 3; mode++)
            parse(&c, page, len, mode, &prog[mode], &plen[mode], &st[mode]);
        check_invariants(page, len, prog[0], plen[0]);
        for (int mode = 1; mode < 3; mode++) {
            ck_assert(plen[mode] == plen[0] && memcmp(prog[mode], prog[0], plen[0]) == 0);
            free(prog[mode]);
        }
        free(prog[0]);
        free(page);
    }
}
END_TEST

START_TEST(damaged_programs)
{
    const char *page = "<p>a<esi:include src=\"/x\"/>b<esi:include src=\"/y\"/>c</p>";
    unsigned char *prog, *bad;
    size_t plen;
    struct esi_stats st;
    struct esi_conf c = { 0 };
    struct esi_info info;
    struct esi_iter it;

    parse(&c, page, strlen(page), 0, &prog, &plen, &st);
    ck_assert_int_eq(esi_prog_info(prog, plen, &info), 0);
    ck_assert(!info.gzip);
    ck_assert_uint_eq(info.nlit, 3);
    ck_assert_uint_eq(info.ninc, 2);
    bad = malloc(plen);
    /* Any byte changed, or any length cut: refused whole. */
    for (size_t i = 0; i < plen; i++) {
        memcpy(bad, prog, plen);
        bad[i] ^= 0x20;
        ck_assert_int_eq(esi_prog_info(bad, plen, &info), -1);
        ck_assert_int_eq(esi_iter_init(&it, bad, plen), -1);
        ck_assert_int_eq(esi_prog_info(prog, i, &info), -1);
    }
    ck_assert_int_eq(esi_prog_info(NULL, 0, &info), -1);
    free(bad);
    free(prog);
}
END_TEST

/* A program made by hand, its CRC right, its items not: refused by the items' checks. */
START_TEST(forged_programs)
{
    static const unsigned char bodies[][16] = {
        { 'L', 0, 5 },            /* past the page (len 4) */
        { 'L', 0, 0 },            /* empty literal */
        { 'L', 2, 2, 'L', 0, 1 }, /* the second past the end */
        { 'I', 0, 0, 0, 0 },      /* include without src */
        { 'I', 2, 0, 1, '/', 0 }, /* bad flags */
        { 'X' },                  /* unknown item */
        { 'I', 0, 0, 9, '/' },    /* string past the program */
    };
    static const size_t blen[] = { 3, 3, 6, 5, 6, 1, 5 };

    for (size_t i = 0; i < ARRAY_LEN(blen); i++) {
        unsigned char prog[64];
        size_t n = 0;
        uint32_t crc;
        struct esi_info info;

        memcpy(prog, "SGE1", 4);
        n = 4;
        prog[n++] = 0; /* identity */
        prog[n++] = 4; /* page length */
        memcpy(prog + n, bodies[i], blen[i]);
        n += blen[i];
        prog[n++] = 'E';
        crc = (uint32_t)crc32(0, prog, (uInt)n);
        for (int k = 0; k < 4; k++)
            prog[n++] = (unsigned char)(crc >> (8 * k));
        ck_assert_msg(esi_prog_info(prog, n, &info) == -1, "forged %zu accepted", i);
    }
}
END_TEST

START_TEST(surrogate_control)
{
    static const struct {
        const char *v;
        bool want;
    } v[] = {
        { "content=\"ESI/1.0\"", true },
        { "max-age=300, content=\"ESI/1.0\"", true },
        { "content=\"ESI/1.0 ESI-Inline/1.0\", max-age=60", true },
        { "CONTENT=\"esi/1.0\"", true },
        { "content=ESI/1.0", true },
        { "content = \"ESI/1.0\"", true },
        { "content=\"ESI/1.0\";surogat", true },
        { "content=\"ESI/1.0\";other", false },
        { "content=\"ESI-Inline/1.0\"", false },
        { "content=\"ESI/1.01\"", false },
        { "max-age=300", false },
        { "no-store", false },
        { "x=\"a, content=ESI/1.0\"", false }, /* inside another directive's quotes */
        { "content=\"ESI/1.0", false },        /* unterminated */
        { "", false },
    };

    for (size_t i = 0; i < ARRAY_LEN(v); i++) {
        struct http_hdr hdr[4];
        struct http h;

        http_init(&h, hdr, 4);
        ck_assert_int_eq(
            http_add(&h, TXT_LIT("Surrogate-Control"), (struct txt){ v[i].v, strlen(v[i].v) }), 0);
        ck_assert_msg(esi_wanted(&h) == v[i].want, "%s", v[i].v);
    }
}
END_TEST

/* ---- stored gzip ---- */

static void
gunzip_all(const struct buf *gz, struct buf *out)
{
    z_stream zs;
    unsigned char tmp[4096];
    int rv;

    memset(&zs, 0, sizeof zs);
    ck_assert_int_eq(inflateInit2(&zs, 15 + 16), Z_OK);
    zs.next_in = gz->p;
    zs.avail_in = (uInt)gz->len;
    out->len = 0;
    do {
        zs.next_out = tmp;
        zs.avail_out = sizeof tmp;
        rv = inflate(&zs, Z_NO_FLUSH);
        ck_assert(rv == Z_OK || rv == Z_STREAM_END);
        buf_add(out, tmp, sizeof tmp - zs.avail_out);
    } while (rv != Z_STREAM_END);
    ck_assert_uint_eq(zs.avail_in, 0);
    inflateEnd(&zs);
}

START_TEST(gzip_pages)
{
    struct esi_conf c = { .max_tag = 64 };

    for (int round = 0; round < 150; round++) {
        size_t len, plen, iplen;
        char *page = random_page(&len);
        struct esi_gz *g = esi_gz_new(&c, 1 + round % 9);
        struct buf gz = { 0 }, whole = { 0 }, lits = { 0 }, stitched = { 0 }, back = { 0 };
        unsigned char *prog, *iprog;
        struct esi_stats st;
        struct esi_iter it, iit;
        struct esi_item item, iitem;
        struct gz_stitch sti;
        struct esi_info info;
        size_t off = 0;

        if (round % 10 == 0) {
            /* Some long ones, so that segments span many output buffers. */
            page = realloc(page, len + 300000);
            for (size_t i = 0; i < 300000; i++)
                page[len + i] = "abcdefgh <p>\n"[rnd() % 13];
            len += 300000;
        }
        while (off < len) {
            size_t n = 1 + rnd() % (round % 2 ? 7 : 5000);
            if (n > len - off)
                n = len - off;
            ck_assert_int_eq(esi_gz_feed(g, page + off, n, collect, &gz), GZ_OK);
            ck_assert_uint_le(esi_gz_held(g), 64 + 8);
            off += n;
        }
        ck_assert_int_eq(esi_gz_finish(g, collect, &gz, &prog, &plen), GZ_OK);
        esi_gz_stats(g, &st);
        esi_gz_free(&g);
        /* The stored body: the whole page. */
        gunzip_all(&gz, &whole);
        ck_assert_uint_eq(whole.len, len);
        ck_assert(memcmp(whole.p, page, len) == 0);
        /* Its program: the identity parser's, with segments. */
        parse(&c, page, len, 2, &iprog, &iplen, &st);
        ck_assert_int_eq(esi_prog_info(prog, plen, &info), 0);
        ck_assert(info.gzip);
        ck_assert_int_eq(esi_iter_init(&it, prog, plen), 0);
        ck_assert_int_eq(esi_iter_init(&iit, iprog, iplen), 0);
        ck_assert_int_eq(gz_stitch_begin(&sti, collect, &stitched), 0);
        while (esi_iter_next(&it, &item) == ESI_ITEM) {
            ck_assert_int_eq(esi_iter_next(&iit, &iitem), ESI_ITEM);
            ck_assert_int_eq(item.kind, iitem.kind);
            if (item.kind == ESI_INCLUDE) {
                ck_assert(item.src.len == iitem.src.len &&
                          memcmp(item.src.b, iitem.src.b, item.src.len) == 0);
                continue;
            }
            ck_assert_uint_eq(item.off, iitem.off);
            ck_assert_uint_eq(item.len, iitem.len);
            ck_assert_uint_le(item.zoff + item.zlen, gz.len);
            ck_assert_uint_eq(item.crc,
                              (uint32_t)crc32(0, (unsigned char *)page + item.off, (uInt)item.len));
            ck_assert_int_eq(gz_stitch_deflate(&sti, gz.p + item.zoff, (size_t)item.zlen), 0);
            gz_stitch_account(&sti, item.crc, item.len);
            buf_add(&lits, page + item.off, (size_t)item.len);
        }
        ck_assert_int_eq(esi_iter_next(&iit, &iitem), ESI_DONE);
        ck_assert_int_eq(gz_stitch_end(&sti), 0);
        /* The literals stitched gunzip to exactly the literal bytes (zlib checks CRC, length). */
        gunzip_all(&stitched, &back);
        ck_assert_uint_eq(back.len, lits.len);
        ck_assert(lits.len == 0 || memcmp(back.p, lits.p, lits.len) == 0);
        free(prog);
        free(iprog);
        free(page);
        free(gz.p);
        free(whole.p);
        free(lits.p);
        free(stitched.p);
        free(back.p);
    }
}
END_TEST

Suite *
esi_suite(void)
{
    Suite *s = suite_create("esi");
    TCase *tc = tcase_create("parse");
    TCase *tg = tcase_create("gzip");

    tcase_add_test(tc, constructs);
    tcase_add_test(tc, options);
    tcase_add_test(tc, errors_logged_with_offsets);
    tcase_add_test(tc, random_pages_any_cut);
    tcase_add_test(tc, damaged_programs);
    tcase_add_test(tc, forged_programs);
    tcase_add_test(tc, surrogate_control);
    suite_add_tcase(s, tc);
    tcase_set_timeout(tg, 120);
    tcase_add_test(tg, gzip_pages);
    suite_add_tcase(s, tg);
    return s;
}
