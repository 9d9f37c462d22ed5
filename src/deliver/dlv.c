/*
 * The deliverer's heads: what a response says before its body.
 *
 * A head is planned from its source -- a stored object's head, kept
 * encoded (shd.h), or a response head as a struct http -- and the request:
 * 304 when its conditions say the client has the representation, 206 or
 * 416 for a Range, the length, Age and Cache-Status.  Then the policy's
 * deliver hook runs on it, once for every kind of delivery, and the plan
 * goes to the transport as field blocks, a stored head's fields first:
 * still encoded to a transport that writes them itself where they go out
 * (tp_ops.stored_fields), so that a hit writes its head's text once.
 */
#include "config.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "surogat/defs.h"
#include "surogat/dlv.h"
#include "surogat/gz.h"
#include "surogat/h1.h"
#include "surogat/hsh.h"
#include "surogat/par.h"
#include "surogat/pol.h"
#include "surogat/req.h"
#include "surogat/sb.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/tp.h"
#include "surogat/trace.h"
#include "surogat/ws.h"

#include "dlv_priv.h"

/*
 * The validators of the head a delivery sends: h's when the head is made
 * over for another coding, else src's stored head.
 */
static void
validators(const struct cobj *src, const struct http *h, const struct txt **etag,
           const struct txt **lm, struct txt *buf)
{
    if (h != NULL) {
        *etag = http_value(h, "ETag");
        *lm = http_value(h, "Last-Modified");
        return;
    }
    *etag = hsh_head_field(src, "ETag", &buf[0]) ? &buf[0] : NULL;
    *lm = hsh_head_field(src, "Last-Modified", &buf[1]) ? &buf[1] : NULL;
}

/* oc is a 200 with validators the request's conditions match: a 304. */
static bool
not_modified(const struct req *req, const struct cobj *oc, const struct cobj *src,
             const struct http *h)
{
    const struct txt *etag, *lm;
    struct txt buf[2];

    /* Most hits are unconditional: do not scan the stored head for them. */
    if (oc->status != 200 || !http_is_conditional(req->http))
        return (false);
    validators(src, h, &etag, &lm, buf);
    return (http_not_modified(req->http, etag, lm));
}

/* http_range() for a stored object whose body sent has len bytes. */
static enum http_range
want_range(const struct req *req, const struct cobj *oc, const struct cobj *src, uint64_t len,
           uint64_t *first, uint64_t *last)
{
    const struct txt *etag, *lm;
    struct txt buf[2];

    if (oc->status != 200 || http_find(req->http, "Range") == NULL)
        return (HTTP_RANGE_NONE);
    validators(src, NULL, &etag, &lm, buf);
    return (http_range(req->http, etag, lm, len, first, last));
}

int
dlv__coding(const struct cobj *oc)
{
    struct txt ce;
    int c;

    if (oc->form != HSH_FORM_UNKNOWN)
        return ((oc->form & GZ_FORM_CODING) == GZ_FORM_OTHER ? -1
                                                             : (int)(oc->form & GZ_FORM_CODING));
    if (!hsh_head_field(oc, "Content-Encoding", &ce))
        return (GZ_C_IDENTITY);
    c = gz_coding_of(&ce);
    return (c);
}

struct gz_pick
dlv__negotiate(const struct req *req, enum gz_coding stored, unsigned copies)
{
    enum gz_coding formats[GZ_C__N];
    struct gz_ae ae;
    unsigned n;

    gz_ae_req(&ae, req->http);
    /* Most clients take the stored coding: gz_negotiate_held()'s answer, without the list. */
    if (gz_ae_takes(&ae, stored))
        return ((struct gz_pick){ stored, stored });
    n = gz_formats_now(formats);
    return (gz_negotiate_held(&ae, stored, copies, formats, n));
}

/*
 * A serialised head (status line and field lines, with or without the
 * empty line) parsed into workspace with `room` spare field slots.  NULL
 * when the workspace runs out.
 */
static struct http *
parse_head(struct req *req, const char *head, size_t len, unsigned room)
{
    struct h1_limits lim;
    struct http_hdr *hdrs;
    struct http *h = ws_alloc(req->ws, sizeof *h);
    char *buf = ws_alloc(req->ws, len + 2);
    unsigned nhdr = 1;
    size_t used;

    if (h == NULL || buf == NULL)
        return (NULL);
    memcpy(buf, head, len);
    if (len < 4 || memcmp(head + len - 4, "\r\n\r\n", 4) != 0) {
        memcpy(buf + len, "\r\n", 2);
        len += 2;
    }
    for (size_t i = 0; i < len; i++)
        nhdr += buf[i] == '\n';
    hdrs = ws_alloc(req->ws, (nhdr + room) * sizeof *hdrs);
    if (hdrs == NULL)
        return (NULL);
    http_init(h, hdrs, nhdr + room);
    lim = (struct h1_limits){ len + 1, len + 1, nhdr };
    if (h1_parse_response(buf, len, &lim, h, &used) != H1_DONE)
        return (NULL);
    return (h);
}

int
dlv__fields_block(struct req *req, const struct http *hp, struct txt *out)
{
    size_t room;
    char *p = ws_reserve_all(req->ws, &room);
    struct sb sb;

    sb_init(&sb, p, room);
    http_write_fields(&sb, hp);
    if (!sb_ok(&sb)) {
        ws_release(req->ws, 0);
        return (-1);
    }
    ws_release(req->ws, sb.len);
    *out = (struct txt){ p, sb.len };
    return (0);
}

/* The plan could not be made: answer 500 instead (workspace_client too small). */
static int
overflow(struct dlv_plan *d)
{
    STAT_INC(ws_overflow);
    d->syn.status = 500;
    snprintf(d->syn.reason, sizeof d->syn.reason, "%s", "workspace_client exhausted");
    return (-1);
}

int
dlv__head_decode(struct req *req, struct tp_head *h)
{
    char *p;

    if (h->stored == NULL)
        return (0);
    SRG_ASSERT(h->nblock < TP_HEAD_BLOCKS);
    if ((p = ws_alloc(req->ws, h->stored->room > 0 ? h->stored->room : 1)) == NULL)
        return (-1);
    memmove(&h->block[1], &h->block[0], h->nblock * sizeof h->block[0]);
    h->block[0] = (struct txt){ p, shd_decode_fields(h->stored, p) };
    h->nblock++;
    h->stored = NULL;
    return (0);
}

int
dlv__run_hook(struct req *req, struct http *h, unsigned hits, struct dlv_plan *d)
{
    switch (pol_deliver(req, h, hits, &d->syn)) {
    case POL_DELIVER:
        break;
    case POL_SYNTH:
        return (-1);
    case POL_RESTART:
        d->syn.status = 0;
        return (-1);
    default:
        d->syn.status = 503;
        snprintf(d->syn.reason, sizeof d->syn.reason, "%s", "policy error");
        return (-1);
    }
    d->head.status = h->status;
    d->head.reason = h->reason;
    return (0);
}

/*
 * The deliver hook on the planned head: the blocks parsed into workspace
 * with room for more fields, the hook run, the result made the one block.
 * 0, or -1 with d->syn set (status 0: the hook restarts the request).
 */
static int
deliver_hook(struct req *req, struct dlv_plan *d)
{
    size_t len = 0, off;
    struct http *h;
    char *buf;

    /* The hook may change any field: the head is built, not sent as stored. */
    if (dlv__head_decode(req, &d->head) != 0)
        return (overflow(d));
    len = 32 + d->head.reason.len;
    for (unsigned i = 0; i < d->head.nblock; i++)
        len += d->head.block[i].len;
    buf = ws_alloc(req->ws, len);
    if (buf == NULL)
        return (overflow(d));
    off = (size_t)snprintf(buf, len, "HTTP/1.1 %u %.*s\r\n", d->head.status,
                           (int)d->head.reason.len, d->head.reason.len > 0 ? d->head.reason.b : "");
    for (unsigned i = 0; i < d->head.nblock; i++) {
        memcpy(buf + off, d->head.block[i].b, d->head.block[i].len);
        off += d->head.block[i].len;
    }
    h = parse_head(req, buf, off, POL_HDR_ROOM);
    if (h == NULL)
        return (overflow(d));
    if (dlv__run_hook(req, h, d->hits, d) != 0)
        return (-1);
    d->head.nblock = 1;
    if (dlv__fields_block(req, h, &d->head.block[0]) != 0)
        return (overflow(d));
    return (0);
}

int
dlv__finish_head(struct req *req, struct dlv_plan *d)
{
    if (pol_active() && pol_has_deliver() && deliver_hook(req, d) != 0)
        return (-1);
    if (req->trace != NULL && dlv__head_decode(req, &d->head) != 0)
        return (overflow(d));
    TRACE_HEAD(req->trace, &d->head);
    return (0);
}

void
dlv__refused(struct req *req, const struct dlv_plan *d)
{
    if (d->syn.status == 0)
        req->restart = true;
    else
        dlv_synth(req, d->syn.status, d->syn.reason);
}

/*
 * Age and Cache-Status (RFC 9211) of a delivery of oc at `now`: "hit" or
 * fwd's forward reason, and the object's remaining freshness.  Written by
 * hand into one piece: printf's floating point, and even a string
 * builder's call per piece, show in a hit's profile.
 */
static void
cache_fields(struct sb *sb, const struct cobj *oc, double now, const char *fwd)
{
    double age = SRG_MAX(0.0, now - oc->fresh.t_origin);
    char buf[128], *o = buf; /* the longest: 97 bytes and fwd, which goes apart */

    o = SB_PUT_LIT(o, "Age: ");
    o = sb_put_uint(o, (uint64_t)age);
    o = SB_PUT_LIT(o, "\r\n");
    if (par.x_cache)
        o = fwd == NULL ? SB_PUT_LIT(o, "X-Cache: HIT\r\n") : SB_PUT_LIT(o, "X-Cache: MISS\r\n");
    if (par.cache_status) {
        o = SB_PUT_LIT(o, "Cache-Status: surogat; ");
        if (fwd == NULL) {
            o = SB_PUT_LIT(o, "hit");
        } else {
            sb_bcat(sb, buf, (size_t)(o - buf));
            sb_cat(sb, fwd);
            o = buf;
        }
        o = SB_PUT_LIT(o, "; ttl=");
        if (oc->fresh.ttl < age)
            *o++ = '-';
        o = sb_put_uint(
            o, (uint64_t)(oc->fresh.ttl < age ? age - oc->fresh.ttl : oc->fresh.ttl - age));
        o = SB_PUT_LIT(o, "\r\n");
    }
    SRG_ASSERT((size_t)(o - buf) <= sizeof buf);
    sb_bcat(sb, buf, (size_t)(o - buf));
}

/*
 * Workspace a head sent as stored leaves for the transport beyond the
 * decoded fields and the reason: its status line, framing and
 * connection fields, and this delivery's own (d->tail).  With less the
 * fields are decoded here, and a full workspace answers 500 as always.
 */
#define STORED_SLACK 512

int
dlv__plan_obj(struct req *req, const struct cobj *oc, const struct cobj *src, struct gz_pick pk,
              uint64_t len, double now, const char *fwd, unsigned hits, struct dlv_plan *d)
{
    const char *fields, *reason, *sl_end, *head = NULL;
    struct http *h = NULL;
    size_t flen, rlen, hlen = 0;
    struct sb sb;

    /* Up to its text buffers only, which are written before they are read. */
    memset(d, 0, offsetof(struct dlv_plan, tail));
    d->syn.status = 0;
    d->syn.reason[0] = '\0';
    d->pk = pk;
    d->xcode = pk.send != pk.from;
    if (!d->xcode && hsh_head_split(src, &d->sh)) {
        /*
         * Sent as stored: a transport that takes the fields encoded decodes
         * them straight into what it sends, so the text is written once,
         * where it goes out; for any other, or when the workspace would
         * leave it too little room to, they are decoded here.
         */
        d->head.stored = &d->sh;
        reason = d->sh.reason.b;
        rlen = d->sh.reason.len;
        fields = NULL;
        flen = 0;
        if ((!req->tp->stored_fields ||
             ws_free_bytes(req->ws) < d->sh.room + d->sh.reason.len + STORED_SLACK) &&
            dlv__head_decode(req, &d->head) != 0)
            return (overflow(d));
    } else if ((head = hsh_head_text(src, req->ws, &hlen)) == NULL) {
        return (overflow(d));
    } else {
        /* The stored head: a status line, field lines, the empty line. */
        sl_end = memchr(head, '\n', hlen);
        AN(sl_end);
        fields = sl_end + 1;
        flen = hlen - 2 - (size_t)(fields - head);
        reason = head + 13; /* "HTTP/1.1 200 " */
        rlen = hlen > 13 && sl_end - 1 > reason ? (size_t)(sl_end - 1 - reason) : 0;
    }
    if (d->xcode) {
        /*
         * Made on the fly: oc's head over for the coding sent.  Its length
         * is known only at the end; a Range would need it: a 200.
         */
        int stored = dlv__coding(oc);
        struct txt blk;

        SRG_ASSERT(stored >= 0);
        if (oc != src && (head = hsh_head_text(oc, req->ws, &hlen)) == NULL)
            return (overflow(d));
        h = parse_head(req, head, hlen, 2);
        len = DLV_LEN_UNKNOWN;
        if (h == NULL || gz_head_coding(h, req->ws, (enum gz_coding)stored, pk.send) != 0 ||
            dlv__fields_block(req, h, &blk) != 0)
            return (overflow(d));
        fields = blk.b;
        flen = blk.len;
        d->fields = blk;
    }
    d->nm = not_modified(req, oc, src, h);
    d->hits = hits;
    d->len = len;
    d->first = 0;
    d->last = len == DLV_LEN_UNKNOWN ? DLV_LEN_UNKNOWN - 1 : len > 0 ? len - 1 : 0;
    d->range = d->nm || len == DLV_LEN_UNKNOWN ? HTTP_RANGE_NONE
                                               : want_range(req, oc, src, len, &d->first, &d->last);
    d->head.status = d->nm                                   ? 304
                     : d->range == HTTP_RANGE_OK             ? 206
                     : d->range == HTTP_RANGE_UNSATISFIABLE ? 416
                                                             : oc->status;
    if (d->head.status == oc->status)
        d->head.reason = (struct txt){ reason, rlen };
    if (fields != NULL)
        d->head.block[d->head.nblock++] = (struct txt){ fields, flen };
    sb_init(&sb, d->tail, sizeof d->tail);
    if (d->range == HTTP_RANGE_OK)
        sb_printf(&sb, "Content-Range: bytes %llu-%llu/%llu\r\n", (unsigned long long)d->first,
                  (unsigned long long)d->last, (unsigned long long)len);
    else if (d->range == HTTP_RANGE_UNSATISFIABLE)
        sb_printf(&sb, "Content-Range: bytes */%llu\r\n", (unsigned long long)len);
    cache_fields(&sb, oc, now, fwd);
    AN(sb_ok(&sb));
    d->head.block[d->head.nblock++] = (struct txt){ d->tail, sb.len };
    if (d->nm) {
        STAT_INC(cache_304);
        d->head.len = TP_LEN_NONE;
    } else if (oc->status == 204) {
        d->head.len = TP_LEN_NONE; /* RFC 9110 section 8.6: a 204 has no Content-Length */
    } else {
        d->head.body = true;
        d->head.len = len == DLV_LEN_UNKNOWN              ? TP_LEN_UNKNOWN
                      : len == 0                          ? 0
                      : d->range == HTTP_RANGE_UNSATISFIABLE ? 0
                                                          : d->last - d->first + 1;
    }
    return (dlv__finish_head(req, d));
}

struct http *
dlv__head_parse(struct req *req, const char *head, size_t len, unsigned room)
{
    return (parse_head(req, head, len, room));
}

void
dlv__cache_fields(struct sb *sb, const struct cobj *oc, double now, const char *fwd)
{
    cache_fields(sb, oc, now, fwd);
}
