/*
 * Delivering cached objects: complete ones straight from their storage
 * segments (no copy: the iovecs point into the store; large bodies by
 * reference to their store's file, sendfile_min_size), objects still being
 * fetched as their bytes arrive, and either one made over on the fly for a
 * client that does not take the coding it is stored in -- decoded, and
 * encoded again in the coding the client prefers (struct dlv_xcode).
 *
 * A complete object whose clients keep needing it in a coding it does not
 * hold gets a copy in that coding, kept beside it (hsh_copy_begin(), after
 * compress_copy_after such deliveries): the delivery that makes the body
 * on the fly fills the copy too, and later clients get the copy's bytes
 * as they are -- a client without compression of a page stored brotli
 * costs what a client of brotli costs.  A copy has its own head, made
 * once with the body, and its own length, so Range and 304 work on it.
 *
 * The caller holds a reference to the object for the whole delivery; a
 * copy is referenced here while it is read or made.  A complete object is
 * immutable and read without a lock; a busy object is read only up to its
 * published length (see reader_out()).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "surogat/be.h"
#include "surogat/defs.h"
#include "surogat/dlv.h"
#include "surogat/gz.h"
#include "surogat/hsh.h"
#include "surogat/log.h"
#include "surogat/par.h"
#include "surogat/req.h"
#include "surogat/sb.h"
#include "surogat/sfb.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/tp.h"
#include "surogat/ws.h"

#include "dlv_priv.h"

/* Iovecs per write: enough for a head and a body of many segments. */
#define DLV_IOV 64

/*
 * A body that cannot be delivered whole: cut the connection, or when
 * nothing went out yet, a 503 (the object is bad, not the request).
 */
static void
cut(struct req *req)
{
    if (!req->tp->abort(req)) {
        req->close = true;
        (void)dlv_error(req, 503, NULL, "the stored object is damaged");
    }
}

/* ---- bodies made on the fly ---- */

/* The made body's bytes: to the copy being made, and to the client past what it has. */
static int
xcode_out(struct dlv_xcode *x, const char *p, size_t len)
{
    struct iovec iov;

    if (x->copy != NULL && !x->copy_failed && hsh_copy_append(x->copy, p, len) != 0)
        x->copy_failed = true;
    if (x->client_gone)
        return (x->copy != NULL && !x->copy_failed ? 0 : -1);
    if (x->skip > 0) {
        size_t k = x->skip < len ? (size_t)x->skip : len;
        x->skip -= k;
        p += k;
        len -= k;
        if (len == 0)
            return (0);
    }
    iov = (struct iovec){ (void *)(uintptr_t)p, len };
    if (x->req->tp->body(x->req, &iov, 1) == 0)
        return (0);
    /* The copy is worth finishing: the decoding is most of the work, and is done. */
    x->client_gone = true;
    return (x->copy != NULL && !x->copy_failed ? 0 : -1);
}

/* gz_out_f of the encoder (or of the decoder when nothing is encoded). */
static int
xcode_final(void *priv, const char *p, size_t len)
{
    return (xcode_out(priv, p, len));
}

/* gz_out_f of the decoder when its output is encoded again. */
static int
xcode_encode(void *priv, const char *p, size_t len)
{
    struct dlv_xcode *x = priv;

    return (gz_feed(x->enc, p, len, GZ_FLUSH_NONE, xcode_final, x) == GZ_OK ? 0 : -1);
}

/*
 * The stored body inflates past gunzip_max_ratio or gunzip_max_size: the
 * object is corrupt for every client that needs it decoded, so it goes
 * (logged by whoever removes it: once), and this client's connection is
 * cut.  A busy object cannot be removed yet: its first delivery once
 * complete does it.
 */
static void
xcode_bomb(struct dlv_xcode *x)
{
    char buf[160];
    struct sb sb;

    STAT_INC(gunzip_bombs);
    if (!x->client_gone)
        cut(x->req);
    if (!hsh_kill(x->oc, false))
        return;
    sb_init(&sb, buf, sizeof buf);
    gz_explain(x->dec, &sb);
    log_msg(LOG_WARNING, "%s: %.*s: stored body %s: object removed", gz_coding_name(x->from),
            (int)SRG_MIN(x->req->http->url.len, 256), x->req->http->url.b, sb.buf);
}

void
dlv__xcode_begin(struct dlv_xcode *x, struct req *req, struct cobj *oc, struct gz_pick pk,
                 bool trusted)
{
    SRG_ASSERT(pk.send != pk.from);
    memset(x, 0, sizeof *x);
    x->req = req;
    x->oc = oc;
    x->from = pk.from;
    if (pk.from != GZ_C_IDENTITY) {
        x->dec = gz_new(gz_coding_decoder(pk.from), 0);
        if (trusted)
            gz_limit(x->dec, par.gunzip_max_size, 0);
        if (pk.from == GZ_C_GZIP)
            STAT_INC(gunzip_delivered);
    }
    if (pk.send != GZ_C_IDENTITY)
        x->enc = gz_new(gz_coding_encoder(pk.send), gz_coding_level(pk.send));
    STAT_INC(transcode_delivered);
}

int
dlv__xcode_feed(struct dlv_xcode *x, const char *p, size_t len, bool fin, bool flush)
{
    enum gz_flush fl = fin ? GZ_FLUSH_FINISH : flush ? GZ_FLUSH_SYNC : GZ_FLUSH_NONE;
    enum gz_status st = GZ_OK;

    if (x->dec != NULL) {
        st = gz_feed(x->dec, p, len, fin ? GZ_FLUSH_FINISH : GZ_FLUSH_NONE,
                     x->enc != NULL ? xcode_encode : xcode_final, x);
        /* The decoder's stream must end where the body does. */
        if ((st == GZ_OK || st == GZ_END) && x->enc != NULL && (fin || flush))
            st = gz_feed(x->enc, NULL, 0, fl, xcode_final, x) == GZ_E_OUTPUT ? GZ_E_OUTPUT : st;
    } else {
        st = gz_feed(x->enc, p, len, fl, xcode_final, x);
    }
    if (st == GZ_OK || st == GZ_END)
        return (0);
    if (st == GZ_E_BOMB) {
        xcode_bomb(x);
        return (-1);
    }
    if (st != GZ_E_OUTPUT) {
        /*
         * Checked when it was fetched, so only damage since (or a body
         * stored before that check existed): the head is out, so only a
         * cut connection tells the client its body is bad.
         */
        STAT_INC(gzip_errors);
        if (!x->client_gone)
            cut(x->req);
    }
    return (-1);
}

void
dlv__xcode_end(struct dlv_xcode *x)
{
    gz_free(&x->dec);
    gz_free(&x->enc);
}

/* ---- complete objects ---- */

/*
 * The part of segment s, whose first byte is body byte off, that falls in
 * the body bytes [first, last]: its bytes [*from, *to).  False when none.
 */
static bool
seg_part(const struct sto_seg *s, uint64_t off, uint64_t first, uint64_t last, uint64_t *from,
         uint64_t *to)
{
    uint64_t s_end = off + s->len; /* exclusive */

    if (s_end <= first || off > last)
        return (false);
    *from = first > off ? first - off : 0;
    *to = last + 1 < s_end ? last + 1 - off : s->len;
    return (true);
}

/* Body bytes [first, last] of an object into iovecs from *n on; false when out of room. */
static bool
body_iov(const struct cobj *oc, uint64_t first, uint64_t last, struct iovec *iov, int *n,
         int max)
{
    uint64_t off = 0, from, to;

    for (const struct sto_seg *s = oc->body.first; s != NULL && off <= last; s = s->next) {
        if (seg_part(s, off, first, last, &from, &to)) {
            if (*n == max)
                return (false);
            iov[*n].iov_base = (void *)(uintptr_t)(s->data + from);
            iov[(*n)++].iov_len = (size_t)(to - from);
        }
        off += s->len;
    }
    return (true);
}

/*
 * Body bytes [first, last] of a complete object to a transport that takes
 * files: each segment that also lies in a file (sto_seg_file()) with its
 * place there, in rounds of DLV_IOV segments.
 */
static int
body_fsegs(struct req *req, struct cobj *oc, uint64_t first, uint64_t last)
{
    struct tp_fseg seg[DLV_IOV];
    uint64_t off = 0, from, to;
    int n = 0, fd;
    off_t at;

    for (const struct sto_seg *s = oc->body.first; s != NULL && off <= last; s = s->next) {
        if (seg_part(s, off, first, last, &from, &to)) {
            if (n == DLV_IOV) {
                if (req->tp->body_fsegs(req, seg, n) != 0)
                    return (-1);
                n = 0;
            }
            seg[n] = (struct tp_fseg){ s->data + from, (size_t)(to - from), -1, 0 };
            if (sto_seg_file(&oc->body, s, &fd, &at)) {
                seg[n].fd = fd;
                seg[n].off = at + (off_t)from;
            }
            n++;
        }
        off += s->len;
    }
    return (n > 0 ? req->tp->body_fsegs(req, seg, n) : 0);
}

/* Bytes [first, last] of src's body to the client, in rounds of iovecs. */
static int
send_held(struct req *req, const struct cobj *src, uint64_t first, uint64_t last)
{
    struct iovec iov[DLV_IOV];
    int n;

    /* Bodies of more segments than fit go in rounds of iovecs. */
    for (uint64_t from = first; from <= last;) {
        uint64_t to = last, off = 0;
        n = 0;
        if (!body_iov(src, from, last, iov, &n, DLV_IOV)) {
            /* Out of iovecs: send what fits, up to the last whole segment. */
            for (int i = 0; i < n; i++)
                off += iov[i].iov_len;
            to = from + off - 1;
        }
        if (req->tp->body(req, iov, n) != 0)
            return (-1);
        from = to + 1;
    }
    return (0);
}

/*
 * The copy of oc in the coding this delivery makes, when enough clients
 * needed it (hsh_copy_begin): its head is the delivery's own made over
 * (d->fields) under oc's status line.  NULL: none is made now.
 */
static struct cobj *
copy_begin(struct req *req, struct cobj *oc, const struct dlv_plan *d)
{
    const char *text, *sl_end;
    size_t sl, len, tlen;
    char *head;

    if (par.compress_copy_after == 0)
        return (NULL);
    if ((text = hsh_head_text(oc, req->ws, &tlen)) == NULL)
        return (NULL);
    sl_end = memchr(text, '\n', tlen);
    AN(sl_end);
    sl = (size_t)(sl_end + 1 - text);
    len = sl + d->fields.len + 2;
    if ((head = ws_alloc(req->ws, len)) == NULL)
        return (NULL);
    memcpy(head, text, sl);
    memcpy(head + sl, d->fields.b, d->fields.len);
    memcpy(head + sl + d->fields.len, "\r\n", 2);
    return (hsh_copy_begin(oc, d->pk.send, par.compress_copy_after, head, len));
}

/* Whether a body of this form is surogat's own: decoded without the ratio bound. */
static bool
trusted(const struct cobj *oc, const struct cobj *src)
{
    return (src != oc || (oc->form != HSH_FORM_UNKNOWN && (oc->form & GZ_FORM_MADE)));
}

/* The body made on the fly from src's, and the copy filled with it if one is made. */
static void
send_made(struct req *req, struct cobj *oc, struct cobj *src, const struct dlv_plan *d)
{
    struct dlv_xcode x;
    bool ok = true;

    dlv__xcode_begin(&x, req, oc, d->pk, trusted(oc, src));
    x.copy = copy_begin(req, oc, d);
    for (const struct sto_seg *sg = src->body.first; sg != NULL && ok; sg = sg->next)
        ok = dlv__xcode_feed(&x, sg->data, sg->len, sg->next == NULL, false) == 0;
    if (ok && src->body.first == NULL)
        ok = dlv__xcode_feed(&x, NULL, 0, true, false) == 0;
    if (x.copy != NULL)
        hsh_copy_end(oc, &x.copy, ok && !x.copy_failed);
    dlv__xcode_end(&x);
    if (ok && !x.client_gone)
        (void)req->tp->end(req);
}

void
dlv_obj(struct req *req, struct cobj *oc, double now, const char *fwd)
{
    const struct tp_ops *tp = req->tp;
    struct gz_pick pk = { GZ_C_IDENTITY, GZ_C_IDENTITY };
    struct cobj *src = oc, *copy = NULL;
    int stored = dlv__coding(oc);
    unsigned copies = 0;
    struct dlv_plan d;
    struct txt prog;

    OBJ_CHECK(req, REQ_MAGIC);
    req->outcome = REQ_O_HIT;
    if (hsh_oa_get(oc, HSH_OA_ESI, &prog)) {
        /* An ESI page: assembled (dlv_esi.c). */
        dlv__esi(req, oc, prog, now, fwd,
                 fwd == NULL ? __atomic_load_n(&oc->hits, __ATOMIC_RELAXED) : 0);
        return;
    }
    /*
     * What the client gets, from which body.  An identity object without
     * copies goes to every client as it is: no Accept-Encoding to read.
     */
    if (stored >= 0)
        copies = hsh_copy_forms(oc);
    if (stored > GZ_C_IDENTITY || copies != 0) {
        pk = dlv__negotiate(req, (enum gz_coding)stored, copies);
        if (pk.from != (enum gz_coding)stored) {
            src = copy = hsh_copy_get(oc, pk.from);
            if (copy == NULL) {
                /* Evicted since: made from the stored body after all. */
                src = oc;
                pk = dlv__negotiate(req, (enum gz_coding)stored, 0);
            }
        }
    }
    /* Sent as a copy holds it (a copy may also be what another coding is made from). */
    if (copy != NULL && pk.send == pk.from)
        STAT_INC(copy_hit);
    /* A miss delivered from what it stored (fwd) is its first delivery: 0 hits. */
    if (dlv__plan_obj(req, oc, src, pk, src->body.len, now, fwd,
                      fwd == NULL ? __atomic_load_n(&oc->hits, __ATOMIC_RELAXED) : 0, &d) != 0) {
        dlv__refused(req, &d);
    } else if (tp->head(req, &d.head) != 0) {
        /* The client is gone. */
    } else if (!d.head.body || d.head.len == 0 || req->head_only) {
        (void)tp->end(req);
    } else if (d.xcode) {
        send_made(req, oc, src, &d);
    } else if (tp->body_fsegs != NULL && par.sendfile_min_size > 0 &&
               d.last - d.first + 1 >= par.sendfile_min_size) {
        /* Large bodies, a copy's as well, by reference to their store's file. */
        if (body_fsegs(req, src, d.first, d.last) == 0)
            (void)tp->end(req);
    } else if (send_held(req, src, d.first, d.last) == 0) {
        (void)tp->end(req);
    }
    if (copy != NULL)
        hsh_deref(&copy);
}

/* ---- reading back from the store as it fills ---- */

/*
 * Send body bytes [pos, to) of an object to the client, all of them
 * readable (to <= the published length), and made over with xcode.
 * Segment lengths and links are read only up to that length: the writer
 * may be extending the last segment meanwhile, but everything below the
 * length was written before it was published (release/acquire), and
 * trimming, which could move a segment, never happens while readers
 * stream.
 */
static int
reader_out(struct dlv_reader *r, uint64_t to)
{
    struct iovec iov[DLV_IOV];

    if (r->seg == NULL) {
        r->seg = __atomic_load_n(&r->oc->body.first, __ATOMIC_RELAXED);
        r->seg_off = 0;
    }
    /* In rounds of one write each. */
    while (r->pos < to) {
        int n = 0;

        while (r->pos < to && n < DLV_IOV) {
            size_t slen = __atomic_load_n(&r->seg->len, __ATOMIC_RELAXED);
            uint64_t end;

            if (r->pos >= r->seg_off + slen) {
                r->seg_off += slen;
                r->seg = __atomic_load_n(&r->seg->next, __ATOMIC_RELAXED);
                AN(r->seg);
                continue;
            }
            end = to < r->seg_off + slen ? to : r->seg_off + slen;
            iov[n].iov_base = (void *)(uintptr_t)(r->seg->data + (r->pos - r->seg_off));
            iov[n++].iov_len = (size_t)(end - r->pos);
            r->pos = end;
        }
        if (r->xcode) {
            /* An encoder holds output back: the client gets this round's now. */
            for (int i = 0; i < n; i++)
                if (dlv__xcode_feed(&r->x, iov[i].iov_base, iov[i].iov_len, false,
                                    r->pos >= to && i == n - 1) != 0)
                    return (-1);
            continue;
        }
        if (r->req->tp->body(r->req, iov, n) != 0)
            return (-1);
    }
    return (0);
}

void
dlv__reader_init(struct dlv_reader *r, struct req *req, struct cobj *oc, struct gz_pick pk,
                 uint64_t first, uint64_t last, uint64_t sent)
{
    memset(r, 0, sizeof *r);
    r->req = req;
    r->oc = oc;
    r->last = last;
    r->xcode = pk.send != pk.from;
    if (r->xcode) {
        /* Made bytes cannot be sought: make them from the start, drop what it has. */
        dlv__xcode_begin(&r->x, req, oc, pk, trusted(oc, oc));
        r->x.skip = sent;
        r->pos = 0;
    } else {
        r->pos = first + sent;
    }
}

int
dlv__reader_send(struct dlv_reader *r, uint64_t avail, uint64_t max)
{
    uint64_t end = avail < r->last + 1 ? avail : r->last + 1;

    if (r->pos >= end)
        return (0);
    if (end - r->pos > max)
        end = r->pos + max;
    return (reader_out(r, end));
}

bool
dlv__reader_done(const struct dlv_reader *r)
{
    return (r->pos > r->last);
}

int
dlv__reader_finish(struct dlv_reader *r, bool complete)
{
    int rv = complete ? 0 : -1;

    if (r->xcode) {
        /* The decoder checks that the stream ended where the body did. */
        if (complete && dlv__xcode_feed(&r->x, NULL, 0, true, false) != 0)
            rv = -1;
        dlv__xcode_end(&r->x);
    }
    return (rv);
}

void
dlv_stream(struct req *req, struct cobj *oc, double tmo)
{
    const struct tp_ops *tp = req->tp;
    uint64_t len = hsh_stream_clen(oc), avail;
    struct gz_pick pk = { GZ_C_IDENTITY, GZ_C_IDENTITY };
    int stored = dlv__coding(oc);
    struct dlv_reader r;
    enum hsh_stream st;
    struct dlv_plan d;
    bool done = false;

    OBJ_CHECK(req, REQ_MAGIC);
    req->outcome = REQ_O_COLLAPSED;
    if (stored > GZ_C_IDENTITY)
        pk = dlv__negotiate(req, (enum gz_coding)stored, 0);
    /* Joining a fetch counts as a hit on the object it stores. */
    if (dlv__plan_obj(req, oc, oc, pk, len == UINT64_MAX ? DLV_LEN_UNKNOWN : len, tim_real(),
                      "fwd=miss; collapsed", __atomic_load_n(&oc->hits, __ATOMIC_RELAXED),
                      &d) != 0) {
        dlv__refused(req, &d);
        return;
    }
    if (tp->head(req, &d.head) != 0)
        return;
    if (!d.head.body || len == 0 || req->head_only) {
        (void)tp->end(req);
        return;
    }
    dlv__reader_init(&r, req, oc, d.pk, d.first, d.last, 0);
    while (!dlv__reader_done(&r)) {
        st = hsh_stream_wait(oc, r.pos, tmo, &avail);
        if (st == HSH_S_FAILED || st == HSH_S_TIMEOUT) {
            /* The head is out: only a cut connection tells the client the body is short. */
            STAT_INC(cache_stream_aborted);
            (void)tp->abort(req); /* the head went out with the wait's first bytes, or none */
            req->abort = req->close = true;
            break;
        }
        if (dlv__reader_send(&r, avail, UINT64_MAX) != 0)
            break;
        if (st == HSH_S_DONE && r.pos >= avail) {
            done = true;
            break;
        }
    }
    if (dlv__reader_done(&r))
        done = true;
    if (dlv__reader_finish(&r, done) == 0)
        (void)tp->end(req);
}

/*
 * Rounds of sendfile(2), each with its own deadline: a slow client
 * reading a large file is not cut while it makes progress.
 */
#define DLV_FILE_ROUND (1024 * 1024)

void
dlv_local(struct req *req, struct be *be)
{
    const struct tp_ops *tp = req->tp;
    struct sfb_resp r;
    struct dlv_plan d;

    OBJ_CHECK(req, REQ_MAGIC);
    OBJ_CHECK(be, BE_MAGIC);
    AN(be_local(be));
    req->be_name = be->name;
    be->ops->answer(be->ops_priv, req->http, req->ws, &r);
    if (r.error) {
        char extra[64];
        snprintf(extra, sizeof extra, "%.*s", (int)r.fields.len, r.fields.b);
        (void)dlv_error(req, r.status, extra, NULL);
    } else {
        memset(&d, 0, sizeof d);
        d.head.status = r.status;
        d.head.block[d.head.nblock++] = r.fields;
        d.head.body = r.body;
        d.head.len = r.body ? r.len : TP_LEN_NONE;
        if (dlv__finish_head(req, &d) != 0) {
            dlv__refused(req, &d);
        } else if (tp->head(req, &d.head) == 0) {
            int rv = 0;
            if (r.body && r.len > 0 && !req->head_only && r.mem != NULL) {
                struct iovec iov = { (void *)(uintptr_t)r.mem, r.len };
                rv = tp->body(req, &iov, 1);
            } else if (r.body && r.len > 0 && !req->head_only) {
                for (uint64_t off = 0; off < r.len && rv == 0;) {
                    size_t n = (size_t)SRG_MIN(r.len - off, (uint64_t)DLV_FILE_ROUND);
                    rv = tp->file(req, r.fd, r.off + (off_t)off, n);
                    off += n;
                    if (rv == 0)
                        STAT_ADD(sfb_sendfile_bytes, n);
                }
            }
            if (rv == 0)
                (void)tp->end(req);
        }
    }
    be->ops->done(be->ops_priv, &r);
    req->outcome = REQ_O_STATIC;
}
