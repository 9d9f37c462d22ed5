/*
 * Delivering an ESI page: the stored page and its program (esi.h), walked
 * in order, literals sent from the store and each include in its place,
 * as one response.  The includes are sub-requests (req_esi.c) started
 * ahead, up to esi_max_parallel at once, so that their fetches overlap;
 * the page waits for each only when its turn comes, and sends what is
 * ready before it waits.
 *
 * The head has no ETag or Last-Modified (the bytes are assembled anew
 * each time: no 304, no Range), and goes with the first write: a page
 * whose includes were all ready is sent whole with its Content-Length,
 * another one framed by the transport as it goes (chunked, or the end of
 * an HTTP/1.0 connection).  The body is
 * gzip when the page is stored gzip and the client takes it, identity
 * otherwise:
 *
 *   gzip out     literals are the stored deflate segments, sent as they
 *                are; a cached include stored gzip with its bits
 *                (HSH_OA_GZBITS) is spliced whole; anything else goes in
 *                stored blocks -- gz_stitch makes one valid gzip stream,
 *                its CRC and length combined, recompressing nothing;
 *   identity     literals of a gzip page through one raw inflater for the
 *                delivery; includes decoded.
 *
 * An include that is itself an ESI page is assembled in its place, on
 * this worker when it is a cached object.  An include fails when it is
 * refused (esi_max_depth, a cycle, another host), its status is not 200
 * or 204, or its fetch fails: then its alt= is tried, and if that fails
 * too it is left out with onerror="continue" (or feature
 * -esi_include_onerror), else the page is cut -- the connection closed
 * without the chunked end, so that no client takes half a page for a
 * whole one; or, when nothing was sent yet, answered 503 instead.  An
 * include that fails part-way is left where it stopped with
 * onerror="continue", and cuts the page otherwise.
 *
 * Runs on the request's worker; the objects are held by the caller (the
 * page) and by req_esi (its includes) for the whole delivery.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "surogat/defs.h"
#include "surogat/dlv.h"
#include "surogat/esi.h"
#include "surogat/gz.h"
#include "surogat/hsh.h"
#include "surogat/par.h"
#include "surogat/pol.h"
#include "surogat/req.h"
#include "surogat/sb.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/tp.h"
#include "surogat/ws.h"

#include "dlv_priv.h"

/*
 * Iovecs gathered per write; pieces up to ESI_COPY bytes (the stitcher's
 * headers and trailers, made on its stack) are copied, and so are bytes
 * that do not outlive the call (a decoder's output, an include's buffer),
 * into a copy buffer of ESI_BUF bytes at most.
 */
#define ESI_IOV  64
#define ESI_COPY 64
#define ESI_BUF  (16 * 1024)

/*
 * Where the assembled bytes go: the page's transport, gathered into few
 * writes.  The head waits for the first write: a page whose includes were
 * all ready goes out whole in one write, with its length.
 */
struct out {
    struct req *req;
    bool gzip; /* the body is one stitched gzip stream */
    struct gz_stitch st;
    struct tp_head *head; /* not given to the transport yet */
    struct iovec iov[ESI_IOV];
    int niov;
    char *buf; /* the copy buffer */
    size_t cap, used;
    bool failed;         /* the client is gone */
    uint64_t frag_bytes; /* identity bytes of the include being sent */
};

/* How a page or an include went. */
enum res {
    R_OK,
    R_FAILED, /* an include: nothing of it sent */
    R_BROKE,  /* an include: failed after some of it was sent */
    R_CUT,    /* the page must be cut */
    R_CLIENT, /* the client failed */
};

/* The head, when it has not gone yet: the body's length is not known (chunked). */
static int
send_head(struct out *o)
{
    struct tp_head *h = o->head;

    o->head = NULL;
    if (h != NULL && o->req->tp->head(o->req, h) != 0)
        o->failed = true;
    return (o->failed ? -1 : 0);
}

static int
flush(struct out *o)
{
    if (o->failed || send_head(o) != 0)
        return (-1);
    if (o->niov > 0 && o->req->tp->body(o->req, o->iov, o->niov) != 0)
        o->failed = true;
    o->niov = 0;
    o->used = 0;
    return (o->failed ? -1 : 0);
}

/* Add n bytes at p, copied when copy (or small), else pointed at until the next flush(). */
static int
add(struct out *o, const char *p, size_t n, bool copy)
{
    if (n == 0)
        return (o->failed ? -1 : 0);
    copy = copy || n <= ESI_COPY;
    while (copy && n > o->cap - o->used) {
        /* Fill the copy buffer, send, go on with the rest. */
        size_t k = o->cap - o->used;
        if (k > 0 && add(o, p, k, true) != 0)
            return (-1);
        p += k;
        n -= k;
        if (flush(o) != 0)
            return (-1);
    }
    if (o->niov == ESI_IOV && flush(o) != 0)
        return (-1);
    if (copy) {
        memcpy(o->buf + o->used, p, n);
        p = o->buf + o->used;
        o->used += n;
    }
    o->iov[o->niov++] = (struct iovec){ (void *)(uintptr_t)p, n };
    return (0);
}

/* Bytes that live as long as the delivery (the store's, ours). */
static int
put(struct out *o, const char *p, size_t n)
{
    return (add(o, p, n, false));
}

/* gz_out_f: the stitcher's output (stored bytes, or its own small pieces). */
static int
stitch_out(void *priv, const char *p, size_t len)
{
    return (put(priv, p, len));
}

/* gz_out_f: stitched pieces of bytes that do not outlive the call. */
static int
copy_out(void *priv, const char *p, size_t len)
{
    return (add(priv, p, len, true));
}

/*
 * Bytes that do not outlive the call (a decoder's output, an include's
 * buffer): copied.  While they are stitched the stitcher's output is
 * copied too (its stored blocks point at them).
 */
static int
put_copy(struct out *o, const char *p, size_t n)
{
    if (!o->gzip)
        return (add(o, p, n, true));
    o->st.out = copy_out;
    n = gz_stitch_identity(&o->st, p, n) == 0 ? 0 : 1;
    o->st.out = stitch_out;
    return (n == 0 ? 0 : -1);
}

/* Identity bytes of the page or an include, in place: as they are, or as stored blocks. */
static int
identity(struct out *o, const char *p, size_t n)
{
    o->frag_bytes += n;
    if (o->gzip)
        return (gz_stitch_identity(&o->st, p, n));
    return (put(o, p, n));
}

/* gz_out_f: a decoder's output, which reuses its buffer: copied. */
static int
decoded_out(void *priv, const char *p, size_t len)
{
    struct out *o = priv;

    o->frag_bytes += len;
    return (put_copy(o, p, len));
}

/* ---- the stored bytes ---- */

/* A reader's place in a stored body, moving forward only. */
struct cursor {
    const struct sto_seg *seg;
    uint64_t base; /* body offset of seg's first byte */
};

typedef int piece_f(void *priv, const char *p, size_t n);

/* Body bytes [off, off + len) of oc, in the pieces the segments hold, to fn. */
static int
body_range(const struct cobj *oc, struct cursor *c, uint64_t off, uint64_t len, piece_f *fn,
           void *priv)
{
    if (c->seg == NULL) {
        c->seg = oc->body.first;
        c->base = 0;
    }
    if (off + len > oc->body.len || off < c->base)
        return (-1); /* the program does not match the body */
    while (len > 0) {
        uint64_t in;
        size_t k;

        AN(c->seg);
        if (off >= c->base + c->seg->len) {
            c->base += c->seg->len;
            c->seg = c->seg->next;
            continue;
        }
        in = off - c->base;
        k = (size_t)SRG_MIN(len, c->seg->len - in);
        if (fn(priv, c->seg->data + in, k) != 0)
            return (-1);
        off += k;
        len -= k;
    }
    return (0);
}

static int
piece_identity(void *priv, const char *p, size_t n)
{
    return (identity(priv, p, n));
}

static int
piece_deflate(void *priv, const char *p, size_t n)
{
    struct out *o = priv;

    return (gz_stitch_deflate(&o->st, p, n));
}

/* A stored body decoded on its way: the gz filter and where its output goes. */
struct decode {
    struct gz *z;
    struct out *o;
    bool bad; /* corrupt, or a bomb: not the client's fault */
};

static int
piece_decode(void *priv, const char *p, size_t n)
{
    struct decode *d = priv;
    enum gz_status st = gz_feed(d->z, p, n, GZ_FLUSH_NONE, decoded_out, d->o);

    if (st == GZ_OK || st == GZ_END)
        return (0);
    d->bad = st != GZ_E_OUTPUT;
    return (-1);
}

static int
piece_member(void *priv, const char *p, size_t n)
{
    struct out *o = priv;

    return (gz_stitch_member(&o->st, p, n));
}

/* What a failure while sending stored bytes means: the client's, or the object's. */
static enum res
stored_failed(const struct out *o)
{
    if (o->failed)
        return (R_CLIENT);
    return (o->gzip && o->st.failed ? R_CUT : R_BROKE);
}

/* ---- a cached include ---- */

static enum res page(struct out *o, struct req *req, struct cobj *oc, struct txt prog);

/* The whole body of the cached include oc, in place. */
static enum res
obj_body(struct out *o, struct req *sub, struct cobj *oc)
{
    struct cursor c = { NULL, 0 };
    struct gz_bits bits;
    struct txt v, ce;
    struct decode d;
    int coding = GZ_C_IDENTITY;
    enum gz_status st;

    if (oc->status == 204 || oc->body.len == 0)
        return (R_OK);
    if (hsh_oa_get(oc, HSH_OA_ESI, &v))
        return (page(o, sub, oc, v));
    if (hsh_head_field(oc, "Content-Encoding", &ce) &&
        !(ce.len == 8 && memcmp(ce.b, "identity", 8) == 0))
        coding = gz_coding_of(&ce);
    if (coding < 0)
        return (R_FAILED); /* nothing we can decode */
    if (coding == GZ_C_IDENTITY) {
        if (body_range(oc, &c, 0, oc->body.len, piece_identity, o) != 0)
            return (stored_failed(o));
        return (R_OK);
    }
    if (coding == GZ_C_GZIP && o->gzip && hsh_oa_get(oc, HSH_OA_GZBITS, &v) &&
        v.len == sizeof bits) {
        /* Spliced whole: not decoded, not compressed. */
        memcpy(&bits, v.b, sizeof bits);
        if (gz_stitch_member_begin(&o->st, &bits) != 0 ||
            body_range(oc, &c, 0, oc->body.len, piece_member, o) != 0 ||
            gz_stitch_member_end(&o->st) != 0)
            return (o->failed ? R_CLIENT : R_CUT);
        o->frag_bytes += bits.len;
        STAT_INC(esi_spliced);
        return (R_OK);
    }
    d = (struct decode){ gz_new(gz_coding_decoder((enum gz_coding)coding), 0), o, false };
    /* A body surogat compressed itself is trusted: no ratio bound (gz.h, GZ_FORM_MADE). */
    if (oc->form != HSH_FORM_UNKNOWN && (oc->form & GZ_FORM_MADE))
        gz_limit(d.z, par.gunzip_max_size, 0);
    if (body_range(oc, &c, 0, oc->body.len, piece_decode, &d) == 0) {
        st = gz_feed(d.z, NULL, 0, GZ_FLUSH_FINISH, decoded_out, o);
        d.bad = st != GZ_END && st != GZ_E_OUTPUT;
    }
    gz_free(&d.z);
    if (d.bad) {
        STAT_INC(gzip_errors);
        return (o->frag_bytes > 0 ? R_BROKE : R_FAILED);
    }
    return (o->failed ? R_CLIENT : R_OK);
}

/*
 * The cached include's deliver hook, as any delivery of it runs one: on
 * a head planned as for any client (its request has no conditions).
 * false when it did not deliver: its synthetic page or restart follow.
 */
static bool
obj_hook(struct req *sub, struct cobj *oc, unsigned *status)
{
    struct dlv_plan d;

    *status = oc->status;
    if (!pol_active() || !pol_has_deliver())
        return (true);
    /* Its head as stored: the include is sent decoded or spliced, whatever it holds. */
    if (dlv__plan_obj(sub, oc, oc, (struct gz_pick){ GZ_C_IDENTITY, GZ_C_IDENTITY },
                      oc->body.len, tim_real(), NULL,
                      __atomic_load_n(&oc->hits, __ATOMIC_RELAXED), &d) != 0) {
        dlv__refused(sub, &d);
        return (false);
    }
    *status = d.head.status;
    return (true);
}

/* An include delivered from its buffer: a response fetched meanwhile, decoded. */
static enum res
bytes_body(struct out *o, struct req_frag *f)
{
    const char *p;
    ssize_t n;

    for (;;) {
        /* What is ready goes out before the page waits for more of this include. */
        if (!req_esi_readable(f) && flush(o) != 0)
            return (R_CLIENT);
        if ((n = req_esi_read(f, &p)) <= 0)
            break;
        /* The piece lives until the next read: copied. */
        o->frag_bytes += (uint64_t)n;
        if (put_copy(o, p, (size_t)n) != 0)
            return (o->failed ? R_CLIENT : R_CUT);
    }
    if (n == 0)
        return (R_OK);
    return (o->frag_bytes > 0 ? R_BROKE : R_FAILED);
}

/* One include (src= or alt=), sent in place. */
static enum res
include(struct out *o, struct req_esi *e, const struct esi_item *item, bool alt)
{
    uint64_t outer = o->frag_bytes; /* of the include this page is in, if any */
    struct req_frag_info fi;
    struct req_frag *f;
    unsigned status = 0;
    enum res r;

    /* What is ready goes out before the page waits for this include. */
    if ((alt || !req_esi_ready(e)) && flush(o) != 0)
        return (R_CLIENT);
    f = req_esi_next(e, item, alt, &fi);
    o->frag_bytes = 0;
    if (fi.kind == REQ_FRAG_OBJ && !obj_hook(fi.sub, fi.oc, &status))
        req_esi_rerun(f, &fi);
    else if (fi.kind == REQ_FRAG_OBJ && status != 200 && status != 204)
        fi.kind = REQ_FRAG_FAILED;
    switch (fi.kind) {
    case REQ_FRAG_OBJ:
        r = status == 204 ? R_OK : obj_body(o, fi.sub, fi.oc);
        /* An included page cut by its own include: this include failed, the stream is sound. */
        if (r == R_CUT && !(o->gzip && o->st.failed))
            r = o->frag_bytes > 0 ? R_BROKE : R_FAILED;
        break;
    case REQ_FRAG_BYTES:
        r = fi.status == 204 ? R_OK : bytes_body(o, f);
        break;
    case REQ_FRAG_FAILED:
    default:
        r = R_FAILED;
        break;
    }
    if (fi.sub != NULL && fi.kind == REQ_FRAG_OBJ)
        fi.sub->resp_bytes = o->frag_bytes;
    o->frag_bytes += outer;
    req_esi_done(e, &f, r == R_OK);
    if (r == R_FAILED || r == R_BROKE)
        STAT_INC(esi_include_failed);
    return (r);
}

/* An include's failure: its alt=, then onerror decides whether the page goes on. */
static enum res
include_item(struct out *o, struct req_esi *e, const struct esi_item *item)
{
    enum res r = include(o, e, item, false);

    if (r == R_FAILED && item->alt.len > 0)
        r = include(o, e, item, true);
    if (r != R_FAILED && r != R_BROKE)
        return (r);
    if (item->cont || !(par.feature & (1u << PAR_FEAT_esi_include_onerror)))
        return (R_OK); /* left out (or left where it broke) */
    return (R_CUT);
}

/* ---- the page ---- */

/* One literal of the page, as the client takes it. */
static enum res
literal(struct out *o, const struct cobj *oc, const struct esi_info *info,
        const struct esi_item *item, struct cursor *c, struct decode *raw)
{
    int rv;

    if (!info->gzip) {
        rv = body_range(oc, c, item->off, item->len, piece_identity, o);
    } else if (o->gzip) {
        rv = body_range(oc, c, item->zoff, item->zlen, piece_deflate, o);
        if (rv == 0)
            gz_stitch_account(&o->st, item->crc, item->len);
    } else {
        /* Segments one after the other are raw deflate: one inflater for them all. */
        if (raw->z == NULL)
            raw->z = gz_new(GZ_DECODE_RAW, 0);
        rv = body_range(oc, c, item->zoff, item->zlen, piece_decode, raw);
    }
    if (rv == 0)
        return (R_OK);
    if (o->failed)
        return (R_CLIENT);
    if (raw->bad)
        STAT_INC(gzip_errors);
    return (R_CUT); /* the stored page does not match its program */
}

/* Walk the page oc, delivered for req, into o: it is about to walk its program. */
static enum res
walk(struct out *o, struct req *req, struct cobj *oc, struct esi_iter *it,
     const struct esi_info *info)
{
    struct req_esi *e = NULL;
    struct esi_item item;
    struct cursor c = { NULL, 0 };
    struct decode raw = { NULL, o, false };
    enum esi_next n = ESI_DONE;
    enum res r = R_OK;

    STAT_INC(esi_deliveries);
    if (info->ninc > 0)
        e = req_esi_begin(req, it, info->ninc);
    while (r == R_OK && (n = esi_iter_next(it, &item)) == ESI_ITEM) {
        if (item.kind == ESI_LITERAL)
            r = literal(o, oc, info, &item, &c, &raw);
        else
            r = include_item(o, e, &item);
    }
    if (r == R_OK && n == ESI_E_CORRUPT)
        r = R_CUT;
    gz_free(&raw.z);
    if (e != NULL)
        req_esi_end(&e);
    return (r);
}

/* An included page: its program checked, then walked. */
static enum res
page(struct out *o, struct req *req, struct cobj *oc, struct txt prog)
{
    struct esi_info info;
    struct esi_iter it;

    if (esi_iter_info(&it, prog.b, prog.len, &info) != 0)
        return (R_CUT);
    return (walk(o, req, oc, &it, &info));
}

/*
 * The page's head: the stored one without what an assembled body
 * cannot keep, the coding it is sent in, Age and Cache-Status; then the
 * deliver hook.  0, or -1 when the plan was refused (d->syn).
 */
static int
plan(struct req *req, const struct cobj *oc, bool stored_gzip, bool gzip, double now,
     const char *fwd, unsigned hits, struct dlv_plan *d)
{
    size_t hlen = 0;
    const char *head = hsh_head_text(oc, req->ws, &hlen);
    struct http *h = head != NULL ? dlv__head_parse(req, head, hlen, 2) : NULL;
    struct sb sb;

    memset(d, 0, sizeof *d);
    if (h == NULL || (stored_gzip && !gzip && gz_head(h, req->ws, GZ_HEAD_DECODED) != 0)) {
        STAT_INC(ws_overflow);
        d->syn.status = 500;
        snprintf(d->syn.reason, sizeof d->syn.reason, "%s", "workspace_client exhausted");
        return (-1);
    }
    http_unset(h, "ETag");
    http_unset(h, "Last-Modified");
    http_unset(h, "Content-Length");
    http_unset(h, "Accept-Ranges");
    if (dlv__fields_block(req, h, &d->head.block[d->head.nblock++]) != 0) {
        STAT_INC(ws_overflow);
        d->syn.status = 500;
        snprintf(d->syn.reason, sizeof d->syn.reason, "%s", "workspace_client exhausted");
        return (-1);
    }
    d->head.status = oc->status;
    d->head.reason = h->reason;
    d->hits = hits;
    d->len = DLV_LEN_UNKNOWN;
    sb_init(&sb, d->tail, sizeof d->tail);
    dlv__cache_fields(&sb, oc, now, fwd);
    AN(sb_ok(&sb));
    d->head.block[d->head.nblock++] = (struct txt){ d->tail, sb.len };
    d->head.body = oc->status != 204;
    d->head.len = d->head.body ? TP_LEN_UNKNOWN : TP_LEN_NONE;
    return (dlv__finish_head(req, d));
}

void
dlv__esi(struct req *req, struct cobj *oc, struct txt prog, double now, const char *fwd,
         unsigned hits)
{
    const struct tp_ops *tp = req->tp;
    struct esi_info info;
    struct esi_iter it;
    struct dlv_plan d;
    struct out *o;
    uint64_t len = 0;
    enum res r;

    OBJ_CHECK(req, REQ_MAGIC);
    if (esi_iter_info(&it, prog.b, prog.len, &info) != 0) {
        /* Its attributes passed their checks, its program not: the object is damaged. */
        (void)hsh_kill(oc, false);
        req->close = true;
        (void)dlv_error(req, 503, NULL, "the stored object is damaged");
        return;
    }
    o = ws_alloc(req->ws, sizeof *o);
    if (o != NULL) {
        /* The copy buffer: what the workspace spares, within bounds. */
        memset(o, 0, sizeof *o);
        o->cap = SRG_MIN((size_t)ESI_BUF, ws_free_bytes(req->ws) / 4);
        o->buf = o->cap >= 4 * ESI_COPY ? ws_alloc(req->ws, o->cap) : NULL;
    }
    if (o == NULL || o->buf == NULL) {
        STAT_INC(ws_overflow);
        req->close = true;
        (void)dlv_error(req, 500, NULL, "workspace_client exhausted");
        return;
    }
    o->req = req;
    /* An include's bytes are decoded by the page taking them: it gets identity. */
    o->gzip = info.gzip && req->esi_level == 0 && gz_accepts(req->http);
    if (plan(req, oc, info.gzip, o->gzip, now, fwd, hits, &d) != 0) {
        dlv__refused(req, &d);
        return;
    }
    if (!d.head.body || req->head_only) {
        if (tp->head(req, &d.head) == 0)
            (void)tp->end(req);
        return;
    }
    o->head = &d.head; /* with the first write */
    if (o->gzip) {
        STAT_INC(esi_gzip);
        AZ(gz_stitch_begin(&o->st, stitch_out, o)); /* into the batch: it cannot fail */
    }
    r = walk(o, req, oc, &it, &info);
    if (r == R_OK && o->gzip && gz_stitch_end(&o->st) != 0)
        r = R_CLIENT;
    if (r == R_OK && o->head != NULL) {
        /* Nothing had to wait: the whole page is here, with its length, in one write. */
        for (int i = 0; i < o->niov; i++)
            len += o->iov[i].iov_len;
        o->head->len = len;
    }
    if (r == R_OK && flush(o) == 0) {
        (void)tp->end(req);
        return;
    }
    if (r != R_CUT)
        return; /* the client is gone */
    STAT_INC(esi_aborted);
    if (o->head != NULL || !tp->abort(req)) {
        /* Nothing went out yet: a whole answer instead of a cut one. */
        req->close = true;
        (void)dlv_error(req, 503, NULL, "an ESI include failed");
    }
}
