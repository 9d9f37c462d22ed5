/*
 * An ESI page stored gzip: the parser and a segment-cutting gzip encoder
 * run side by side while the page is stored, so that every literal of the
 * program is a gz_seg of the stored stream -- independent (full flush,
 * empty dictionary) and byte-aligned -- and a delivery to a client that
 * takes gzip stitches literals and fragments without compressing
 * anything (gz_stitch).  The stored body is still one valid gzip stream
 * of the whole page.
 *
 * The encoder may only take bytes whose fate is decided (the parser's
 * esi_decided()), since a cut must fall exactly where a literal begins or
 * ends; the undecided rest -- at most one tag -- is held here until the
 * next piece decides it.  One owner thread, no lock.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "surogat/defs.h"
#include "surogat/esi.h"
#include "surogat/gz.h"

struct esi_gz {
    unsigned magic;
#define ESI_GZ_MAGIC 0x95d2e03b
    struct esi_parser *p;
    struct gz *z;
    /* Body bytes [held_off, held_off + held_len) kept for the encoder. */
    unsigned char *held;
    size_t held_len, held_cap;
    uint64_t held_off;
    /* The piece being parsed: body bytes [cur_off, cur_off + cur_len). */
    const unsigned char *cur;
    size_t cur_len;
    uint64_t cur_off;
    uint64_t fed; /* body bytes given to the encoder */
    gz_out_f *out;
    void *priv;
    enum gz_status st; /* the first failure */
};

/* Give the encoder the body up to end, from the held bytes, then the current piece. */
static int
feed_to(struct esi_gz *g, uint64_t end)
{
    while (g->fed < end && g->st == GZ_OK) {
        const unsigned char *src;
        size_t n;

        if (g->fed < g->held_off + g->held_len) {
            SRG_ASSERT(g->fed >= g->held_off);
            src = g->held + (g->fed - g->held_off);
            n = (size_t)SRG_MIN(end, g->held_off + g->held_len) - (size_t)g->fed;
        } else {
            SRG_ASSERT(g->fed >= g->cur_off && end <= g->cur_off + g->cur_len);
            src = g->cur + (g->fed - g->cur_off);
            n = (size_t)(end - g->fed);
        }
        if (gz_feed(g->z, src, n, GZ_FLUSH_NONE, g->out, g->priv) != GZ_OK)
            g->st = GZ_E_OUTPUT;
        g->fed += n;
    }
    return (g->st == GZ_OK ? 0 : -1);
}

/* esi_cut_f: a run of the page ends at end: feed up to it and end the segment there. */
static int
cut(void *priv, uint64_t end, bool literal, struct gz_seg *seg)
{
    struct esi_gz *g = priv;

    (void)literal;
    OBJ_CHECK(g, ESI_GZ_MAGIC);
    if (feed_to(g, end) != 0)
        return (-1);
    if (gz_cut(g->z, g->out, g->priv, seg) != GZ_OK) {
        g->st = GZ_E_OUTPUT;
        return (-1);
    }
    return (0);
}

struct esi_gz *
esi_gz_new(const struct esi_conf *c, int level)
{
    struct esi_gz *g;

    OBJ_NEW(g, ESI_GZ_MAGIC);
    g->p = esi_parser_new(c, cut, g);
    g->z = gz_new(GZ_ENCODE, level);
    gz_track(g->z); /* the bits of the whole stream, for esi_gz_bits() */
    g->st = GZ_OK;
    return (g);
}

void
esi_gz_free(struct esi_gz **gp)
{
    struct esi_gz *g = *gp;

    if (g == NULL)
        return;
    OBJ_CHECK(g, ESI_GZ_MAGIC);
    esi_parser_free(&g->p);
    gz_free(&g->z);
    free(g->held);
    OBJ_FREE(gp);
}

/* Keep body bytes [from, cur_off + cur_len): the held ones still wanted, then the piece's. */
static void
hold_from(struct esi_gz *g, uint64_t from)
{
    uint64_t end = g->cur_off + g->cur_len;
    size_t keep_old = 0, n = (size_t)(end - from);

    if (from < g->held_off + g->held_len) {
        keep_old = (size_t)(g->held_off + g->held_len - from);
        memmove(g->held, g->held + (from - g->held_off), keep_old);
    }
    if (n > g->held_cap) {
        g->held_cap = n + 256;
        g->held = realloc(g->held, g->held_cap);
        AN(g->held);
    }
    if (n > keep_old) /* nothing new to keep: held may still be NULL */
        memcpy(g->held + keep_old, g->cur + (g->cur_len - (n - keep_old)), n - keep_old);
    g->held_off = from;
    g->held_len = n;
    g->cur = NULL;
    g->cur_off = end;
    g->cur_len = 0;
}

enum gz_status
esi_gz_feed(struct esi_gz *g, const void *p, size_t len, gz_out_f *out, void *priv)
{
    OBJ_CHECK(g, ESI_GZ_MAGIC);
    if (g->st != GZ_OK)
        return (g->st);
    g->out = out;
    g->priv = priv;
    g->cur = p;
    g->cur_len = len;
    if (esi_parse(g->p, p, len) != 0 || feed_to(g, esi_decided(g->p)) != 0)
        return (g->st);
    hold_from(g, g->fed);
    return (GZ_OK);
}

enum gz_status
esi_gz_finish(struct esi_gz *g, gz_out_f *out, void *priv, unsigned char **prog, size_t *plen)
{
    enum gz_status st;

    OBJ_CHECK(g, ESI_GZ_MAGIC);
    if (g->st != GZ_OK)
        return (g->st);
    g->out = out;
    g->priv = priv;
    if (esi_finish(g->p, prog, plen) != 0)
        return (g->st);
    /* The last run was cut at the end of the page: every byte is in. */
    SRG_ASSERT(g->fed == g->held_off + g->held_len);
    st = gz_feed(g->z, NULL, 0, GZ_FLUSH_FINISH, out, priv);
    if (st != GZ_END) {
        free(*prog);
        *prog = NULL;
        g->st = GZ_E_OUTPUT;
        return (g->st);
    }
    return (GZ_OK);
}

void
esi_gz_stats(const struct esi_gz *g, struct esi_stats *st)
{
    OBJ_CHECK(g, ESI_GZ_MAGIC);
    esi_parser_stats(g->p, st);
}

bool
esi_gz_bits(const struct esi_gz *g, struct gz_bits *b)
{
    OBJ_CHECK(g, ESI_GZ_MAGIC);
    return (g->st == GZ_OK && gz_bits(g->z, b));
}

size_t
esi_gz_held(const struct esi_gz *g)
{
    OBJ_CHECK(g, ESI_GZ_MAGIC);
    return (g->held_len);
}
