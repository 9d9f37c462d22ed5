/*
 * Delivering cached objects: complete ones straight from their storage
 * segments (no copy: the iovecs point into the store; large bodies by
 * reference to their store's file, sendfile_min_size), objects still being
 * fetched as their bytes arrive, and either one gunzipped for a client
 * that does not take gzip.
 *
 * The caller holds a reference to the object for the whole delivery.  A
 * complete object is immutable and read without a lock; a busy object is
 * read only up to its published length (see stream_out()).
 */
#include "config.h"

#include <stdio.h>
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

/* gz_out_f: one piece of gunzipped body to the client, past what it has already. */
static int
gunzip_out(void *priv, const char *p, size_t len)
{
    struct gunzip *g = priv;
    struct iovec iov;

    if (g->skip > 0) {
        size_t k = g->skip < len ? (size_t)g->skip : len;
        g->skip -= k;
        p += k;
        len -= k;
        if (len == 0)
            return (0);
    }
    iov = (struct iovec){ (void *)(uintptr_t)p, len };
    return (g->req->tp->body(g->req, &iov, 1));
}

/*
 * The stored body inflates past gunzip_max_ratio or gunzip_max_size: the
 * object is corrupt for every client without gzip, so it goes (logged by
 * whoever removes it: once), and this client's connection is cut.  A busy
 * object cannot be removed yet: its first delivery once complete does it.
 */
static void
gunzip_bomb(struct gunzip *g)
{
    char buf[160];
    struct sb sb;

    STAT_INC(gunzip_bombs);
    cut(g->req);
    if (!hsh_kill(g->oc, false))
        return;
    sb_init(&sb, buf, sizeof buf);
    gz_explain(g->z, &sb);
    log_msg(LOG_WARNING, "gzip: %.*s: stored body %s: object removed",
            (int)SRG_MIN(g->req->http->url.len, 256), g->req->http->url.b, sb.buf);
}

/* Stored gzip bytes through the decoder to the client.  -1: the client or the body failed. */
static int
gunzip_feed(struct gunzip *g, const char *p, size_t len, bool last)
{
    enum gz_status st =
        gz_feed(g->z, p, len, last ? GZ_FLUSH_FINISH : GZ_FLUSH_NONE, gunzip_out, g);

    if (st == GZ_OK || st == GZ_END)
        return (0);
    if (st == GZ_E_BOMB) {
        gunzip_bomb(g);
        return (-1);
    }
    if (st != GZ_E_OUTPUT) {
        /*
         * Checked when it was fetched, so only damage since (or a body
         * stored before that check existed): the head is out, so only a
         * cut connection tells the client its body is bad.
         */
        STAT_INC(gzip_errors);
        cut(g->req);
    }
    return (-1);
}

static void
gunzip_begin(struct gunzip *g, struct req *req, struct cobj *oc)
{
    g->req = req;
    g->oc = oc;
    g->z = gz_new(GZ_DECODE, 0);
    g->skip = 0;
    STAT_INC(gunzip_delivered);
}

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

void
dlv_obj(struct req *req, struct cobj *oc, double now, const char *fwd)
{
    const struct tp_ops *tp = req->tp;
    struct iovec iov[DLV_IOV];
    struct dlv_plan d;
    struct txt prog;
    int n = 0;

    OBJ_CHECK(req, REQ_MAGIC);
    req->outcome = REQ_O_HIT;
    if (hsh_oa_get(oc, HSH_OA_ESI, &prog)) {
        /* An ESI page: assembled (dlv_esi.c). */
        dlv__esi(req, oc, prog, now, fwd,
                 fwd == NULL ? __atomic_load_n(&oc->hits, __ATOMIC_RELAXED) : 0);
        return;
    }
    /* A miss delivered from what it stored (fwd) is its first delivery: 0 hits. */
    if (dlv__plan_obj(req, oc, oc->body.len, now, fwd,
                      fwd == NULL ? __atomic_load_n(&oc->hits, __ATOMIC_RELAXED) : 0, &d) != 0) {
        dlv__refused(req, &d);
        return;
    }
    if (tp->head(req, &d.head) != 0)
        return;
    if (!d.head.body || d.head.len == 0 || req->head_only) {
        (void)tp->end(req);
        return;
    }
    if (d.gunzip) {
        struct gunzip g;
        bool ok = true;

        gunzip_begin(&g, req, oc);
        for (const struct sto_seg *sg = oc->body.first; sg != NULL && ok; sg = sg->next)
            ok = gunzip_feed(&g, sg->data, sg->len, sg->next == NULL) == 0;
        gz_free(&g.z);
        if (ok)
            (void)tp->end(req);
        return;
    }
    if (tp->body_fsegs != NULL && par.sendfile_min_size > 0 &&
        d.last - d.first + 1 >= par.sendfile_min_size) {
        if (body_fsegs(req, oc, d.first, d.last) == 0)
            (void)tp->end(req);
        return;
    }
    /* Bodies of more segments than fit go in rounds of iovecs. */
    for (uint64_t from = d.first; from <= d.last;) {
        uint64_t to = d.last, off = 0;
        n = 0;
        if (!body_iov(oc, from, d.last, iov, &n, DLV_IOV)) {
            /* Out of iovecs: send what fits, up to the last whole segment. */
            for (int i = 0; i < n; i++)
                off += iov[i].iov_len;
            to = from + off - 1;
        }
        if (tp->body(req, iov, n) != 0)
            return;
        from = to + 1;
    }
    (void)tp->end(req);
}

/*
 * Send body bytes [pos, to) of an object to the client, all of them
 * readable (to <= the published length), and through the decoder with
 * gunzip.  Segment lengths and links are read only up to that length: the
 * writer may be extending the last segment meanwhile, but everything below
 * the length was written before it was published (release/acquire), and
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
        if (r->gunzip) {
            for (int i = 0; i < n; i++)
                if (gunzip_feed(&r->g, iov[i].iov_base, iov[i].iov_len, false) != 0)
                    return (-1);
            continue;
        }
        if (r->req->tp->body(r->req, iov, n) != 0)
            return (-1);
    }
    return (0);
}

void
dlv__reader_init(struct dlv_reader *r, struct req *req, struct cobj *oc, bool gunzip,
                 uint64_t first, uint64_t last, uint64_t sent)
{
    memset(r, 0, sizeof *r);
    r->req = req;
    r->oc = oc;
    r->last = last;
    r->gunzip = gunzip;
    if (gunzip) {
        /* Decoded bytes cannot be sought: decode from the start, drop what it has. */
        gunzip_begin(&r->g, req, oc);
        r->g.skip = sent;
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

    if (r->gunzip) {
        /* The decoder checks that the stream ended where the body did. */
        if (complete && gunzip_feed(&r->g, NULL, 0, true) != 0)
            rv = -1;
        gz_free(&r->g.z);
    }
    return (rv);
}

void
dlv_stream(struct req *req, struct cobj *oc, double tmo)
{
    const struct tp_ops *tp = req->tp;
    uint64_t len = oc->stream_clen, avail;
    struct dlv_reader r;
    enum hsh_stream st;
    struct dlv_plan d;
    bool done = false;

    OBJ_CHECK(req, REQ_MAGIC);
    req->outcome = REQ_O_COLLAPSED;
    /* Joining a fetch counts as a hit on the object it stores. */
    if (dlv__plan_obj(req, oc, len == UINT64_MAX ? DLV_LEN_UNKNOWN : len, tim_real(),
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
    dlv__reader_init(&r, req, oc, d.gunzip, d.first, d.last, 0);
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
