/*
 * ESI programs: the builder the parser drives while a page is stored,
 * and the checks and iterator a delivery walks.  A program is a byte
 * string kept with the object; it is checked whole (magic, CRC-32, every
 * item within the page) before a delivery trusts any of it, since it may
 * come back from a file store after a restart.  Builder: one owner;
 * programs: read-only, any thread.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <zlib.h>

#include "surogat/defs.h"
#include "surogat/esi.h"

#include "esi_priv.h"

/* The gzip header before the first segment (gz_cut). */
#define ESI_GZ_HEAD 10

/* ---- building ---- */

static void
put(struct esi_build *b, const void *p, size_t n)
{
    if (b->len + n > b->cap) {
        b->cap = SRG_MAX(b->cap * 2, b->len + n + 64);
        b->buf = realloc(b->buf, b->cap);
        AN(b->buf);
    }
    memcpy(b->buf + b->len, p, n);
    b->len += n;
}

static void
put_varint(struct esi_build *b, uint64_t v)
{
    unsigned char t[10];
    size_t n = 0;

    do {
        t[n] = (unsigned char)(v & 0x7f);
        v >>= 7;
        if (v != 0)
            t[n] |= 0x80;
        n++;
    } while (v != 0);
    put(b, t, n);
}

static void
put_u32(struct esi_build *b, uint32_t v)
{
    unsigned char t[4] = { (unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                           (unsigned char)(v >> 24) };

    put(b, t, 4);
}

void
esi__build_init(struct esi_build *b, esi_cut_f *cut, void *priv)
{
    memset(b, 0, sizeof *b);
    b->cut = cut;
    b->cut_priv = priv;
    b->lit_zend = ESI_GZ_HEAD;
}

void
esi__build_fini(struct esi_build *b)
{
    free(b->buf);
    b->buf = NULL;
}

/* The run [start, end) is complete: a literal item, and for gzip a segment cut. */
static void
close_run(struct esi_build *b)
{
    struct gz_seg seg = { 0 };

    if (b->end == b->start)
        return;
    if (b->cut != NULL && !b->failed) {
        if (b->cut(b->cut_priv, b->end, b->lit, &seg) != 0)
            b->failed = true;
        else
            SRG_ASSERT(seg.len == b->end - b->start);
    }
    if (b->lit) {
        put(b, "L", 1);
        put_varint(b, b->start - b->lit_end);
        put_varint(b, b->end - b->start);
        if (b->cut != NULL) {
            put_varint(b, seg.zoff - b->lit_zend);
            put_varint(b, seg.zlen);
            put_u32(b, seg.crc);
            b->lit_zend = seg.zoff + seg.zlen;
        }
        b->lit_end = b->end;
        b->nlit++;
    }
    b->start = b->end;
}

void
esi__build_range(struct esi_build *b, bool literal, uint64_t end)
{
    if (end <= b->end)
        return;
    if (b->end > b->start && literal != b->lit)
        close_run(b);
    b->lit = literal;
    b->end = end;
}

void
esi__build_include(struct esi_build *b, const char *host, size_t hlen, const char *src, size_t slen,
                   const char *alt, size_t alen, bool cont)
{
    unsigned char fl = cont ? 1 : 0;

    /* The include follows whatever literal came before it. */
    if (b->lit)
        close_run(b);
    put(b, "I", 1);
    put(b, &fl, 1);
    put_varint(b, hlen);
    put(b, host, hlen);
    put_varint(b, slen);
    put(b, src, slen);
    put_varint(b, alen);
    put(b, alt, alen);
    b->ninc++;
}

int
esi__build_finish(struct esi_build *b, uint64_t len, unsigned char **prog, size_t *plen)
{
    struct esi_build out;
    unsigned char fl = b->cut != NULL ? 1 : 0;

    close_run(b);
    if (b->failed)
        return (-1);
    esi__build_init(&out, NULL, NULL);
    put(&out, ESI_PROG_MAGIC, 4);
    put(&out, &fl, 1);
    put_varint(&out, len);
    if (b->len > 0)
        put(&out, b->buf, b->len);
    put(&out, "E", 1);
    put_u32(&out, (uint32_t)crc32(0, out.buf, (uInt)out.len));
    *prog = out.buf;
    *plen = out.len;
    return (0);
}

/* ---- Surrogate-Control ---- */

static bool
sc_ws(char c)
{
    return (c == ' ' || c == '\t');
}

/* content="..." in one directive [p, e): its value lists the token ESI/1.0. */
static bool
directive_esi(const char *p, const char *e)
{
    const char *semi = memchr(p, ';', (size_t)(e - p)), *v, *ve;

    while (p < e && sc_ws(*p))
        p++;
    if (e - p < 8 || strncasecmp(p, "content", 7) != 0)
        return (false);
    for (p += 7; p < e && sc_ws(*p); p++)
        continue;
    if (p == e || *p != '=')
        return (false);
    for (p++; p < e && sc_ws(*p); p++)
        continue;
    v = p;
    if (p < e && *p == '"') {
        v = ++p;
        ve = memchr(v, '"', (size_t)(e - v));
        if (ve == NULL)
            return (false);
        /* A quoted value may hold ';': the target, if any, is after the closing quote. */
        semi = memchr(ve, ';', (size_t)(e - ve));
    } else {
        for (ve = v; ve < e && *ve != ';' && !sc_ws(*ve); ve++)
            continue;
    }
    if (semi != NULL) {
        const char *t = semi + 1, *te = e;

        while (t < te && sc_ws(*t))
            t++;
        while (te > t && sc_ws(te[-1]))
            te--;
        if (te - t != 7 || strncasecmp(t, "surogat", 7) != 0)
            return (false); /* meant for another surrogate */
    }
    for (const char *t = v; t < ve;) {
        const char *te;

        while (t < ve && sc_ws(*t))
            t++;
        for (te = t; te < ve && !sc_ws(*te); te++)
            continue;
        if (te - t == 7 && strncasecmp(t, "ESI/1.0", 7) == 0)
            return (true);
        t = te;
    }
    return (false);
}

bool
esi_wanted(const struct http *resp)
{
    OBJ_CHECK(resp, HTTP_MAGIC);
    for (unsigned i = 0; i < resp->nhdr; i++) {
        const struct txt *v = &resp->hdr[i].val;
        const char *p = v->b, *e = v->b + v->len;

        if (!http_name_eq(&resp->hdr[i].name, "Surrogate-Control"))
            continue;
        /* Directives are separated by commas outside quotes. */
        while (p < e) {
            const char *d = p;
            bool q = false;

            for (; p < e && (q || *p != ','); p++)
                if (*p == '"')
                    q = !q;
            if (directive_esi(d, p))
                return (true);
            if (p < e)
                p++;
        }
    }
    return (false);
}

/* ---- reading ---- */

static int
get_varint(const unsigned char **pp, const unsigned char *e, uint64_t *v)
{
    const unsigned char *p = *pp;
    unsigned shift = 0;

    *v = 0;
    for (;;) {
        if (p == e || shift > 63)
            return (-1);
        *v |= (uint64_t)(*p & 0x7f) << shift;
        if (!(*p++ & 0x80))
            break;
        shift += 7;
    }
    *pp = p;
    return (0);
}

static uint32_t
get_u32(const unsigned char *p)
{
    return ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24);
}

/* A string of the program: its length, then its bytes, as a txt into the program. */
static int
get_txt(const unsigned char **pp, const unsigned char *e, struct txt *t)
{
    uint64_t n;

    if (get_varint(pp, e, &n) != 0 || n > (uint64_t)(e - *pp))
        return (-1);
    *t = (struct txt){ (const char *)*pp, (size_t)n };
    *pp += n;
    return (0);
}

/* The header of a program whose length and CRC are right; -1 if not one. */
static int
open_prog(const unsigned char *p, size_t len, struct esi_iter *it)
{
    const unsigned char *e;

    if (len < 4 + 1 + 1 + 1 + 4 || memcmp(p, ESI_PROG_MAGIC, 4) != 0)
        return (-1);
    e = p + len - 5;
    if (*e != 'E' || get_u32(e + 1) != (uint32_t)crc32(0, p, (uInt)(len - 4)))
        return (-1);
    if (p[4] > 1)
        return (-1);
    memset(it, 0, sizeof *it);
    it->magic = ESI_ITER_MAGIC;
    it->gzip = p[4] == 1;
    it->p = p + 5;
    it->e = e;
    if (get_varint(&it->p, it->e, &it->len) != 0)
        return (-1);
    it->zoff = ESI_GZ_HEAD;
    return (0);
}

int
esi_prog_info(const void *prog, size_t len, struct esi_info *info)
{
    struct esi_iter it;
    struct esi_item item;
    enum esi_next n;

    AN(info);
    memset(info, 0, sizeof *info);
    if (prog == NULL || open_prog(prog, len, &it) != 0)
        return (-1);
    info->gzip = it.gzip;
    info->len = it.len;
    while ((n = esi_iter_next(&it, &item)) == ESI_ITEM) {
        if (item.kind == ESI_LITERAL)
            info->nlit++;
        else
            info->ninc++;
    }
    return (n == ESI_DONE ? 0 : -1);
}

int
esi_iter_init(struct esi_iter *it, const void *prog, size_t len)
{
    struct esi_info info;

    AN(it);
    if (esi_prog_info(prog, len, &info) != 0)
        return (-1);
    AZ(open_prog(prog, len, it));
    return (0);
}

int
esi_iter_info(struct esi_iter *it, const void *prog, size_t len, struct esi_info *info)
{
    AN(it);
    if (esi_prog_info(prog, len, info) != 0)
        return (-1);
    AZ(open_prog(prog, len, it));
    return (0);
}

enum esi_next
esi_iter_next(struct esi_iter *it, struct esi_item *item)
{
    uint64_t gap, zgap;

    OBJ_CHECK(it, ESI_ITER_MAGIC);
    memset(item, 0, sizeof *item);
    if (it->p == it->e)
        return (ESI_DONE);
    switch (*it->p++) {
    case 'L':
        item->kind = ESI_LITERAL;
        if (get_varint(&it->p, it->e, &gap) != 0 || get_varint(&it->p, it->e, &item->len) != 0)
            return (ESI_E_CORRUPT);
        /* Within the page, after the previous literal, never empty. */
        if (item->len == 0 || gap > it->len - it->off || item->len > it->len - it->off - gap)
            return (ESI_E_CORRUPT);
        item->off = it->off + gap;
        it->off = item->off + item->len;
        if (it->gzip) {
            if (get_varint(&it->p, it->e, &zgap) != 0 ||
                get_varint(&it->p, it->e, &item->zlen) != 0 || it->e - it->p < 4)
                return (ESI_E_CORRUPT);
            if (zgap > UINT64_MAX / 2 || item->zlen > UINT64_MAX / 2 || item->zlen == 0)
                return (ESI_E_CORRUPT);
            item->zoff = it->zoff + zgap;
            item->crc = get_u32(it->p);
            it->p += 4;
            it->zoff = item->zoff + item->zlen;
        }
        return (ESI_ITEM);
    case 'I':
        item->kind = ESI_INCLUDE;
        if (it->p == it->e || *it->p > 1)
            return (ESI_E_CORRUPT);
        item->cont = *it->p++ == 1;
        if (get_txt(&it->p, it->e, &item->host) != 0 || get_txt(&it->p, it->e, &item->src) != 0 ||
            get_txt(&it->p, it->e, &item->alt) != 0 || item->src.len == 0)
            return (ESI_E_CORRUPT);
        return (ESI_ITEM);
    default:
        return (ESI_E_CORRUPT);
    }
}
