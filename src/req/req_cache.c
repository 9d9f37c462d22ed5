/*
 * The cache side of a client request: which requests look up, and the
 * delivery of a hit.
 *
 * Without a policy script this is the built-in policy, Varnish's
 * builtin.vcl in spirit: GET and HEAD without Authorization or Cookie
 * are looked up, everything else passes, and a successful unsafe method
 * invalidates the URL (RFC 9111 section 4.4).  With one (pol_active()),
 * its recv and hash hooks decide instead, hit, miss and pass may turn
 * the outcome of the lookup around, and its deliver hook may edit the
 * head of every delivery.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "surogat/be.h"
#include "surogat/cc.h"
#include "surogat/ckey.h"
#include "surogat/defs.h"
#include "surogat/dir.h"
#include "surogat/fetch.h"
#include "surogat/fresh.h"
#include "surogat/gz.h"
#include "surogat/h1.h"
#include "surogat/hsh.h"
#include "surogat/log.h"
#include "surogat/par.h"
#include "surogat/pol.h"
#include "surogat/req.h"
#include "surogat/sb.h"
#include "surogat/sess.h"
#include "surogat/sfb.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/wrk.h"

/* A cache key for this request's scheme (ckey_build()). */
static char *
make_key(struct req *req, const struct txt *host, const char *path, size_t plen, size_t *len)
{
    return (ckey_build(&req->wrk->ws, host, req->sp != NULL && sess_is_tls(req->sp), path, plen,
                       len));
}

static char *
cache_key(struct req *req, size_t *len)
{
    return (make_key(req, http_value(req->http, "Host"), req->http->url.b, req->http->url.len,
                     len));
}

char *
req_cache_key(struct req *req, size_t *len)
{
    return (cache_key(req, len));
}

static bool
is_method(const struct req *req, const char *m)
{
    return (req->http->method.len == strlen(m) &&
            memcmp(req->http->method.b, m, req->http->method.len) == 0);
}

static bool
not_modified(const struct req *req, const struct cobj *oc)
{
    struct txt etag, lm;
    bool has_etag, has_lm;

    /* Most hits are unconditional: do not scan the stored head for them. */
    if (oc->status != 200 || !http_is_conditional(req->http))
        return (false);
    has_etag = hsh_head_field(oc, "ETag", &etag);
    has_lm = hsh_head_field(oc, "Last-Modified", &lm);
    return (http_not_modified(req->http, has_etag ? &etag : NULL, has_lm ? &lm : NULL));
}

/* http_range() for a stored object, with its validators: 1 206, 0 416, -1 the whole body. */
static int
want_range(const struct req *req, const struct cobj *oc, uint64_t len, uint64_t *first,
           uint64_t *last)
{
    struct txt etag, lm;
    bool has_etag, has_lm;

    if (oc->status != 200 || http_find(req->http, "Range") == NULL)
        return (-1);
    has_etag = hsh_head_field(oc, "ETag", &etag);
    has_lm = hsh_head_field(oc, "Last-Modified", &lm);
    switch (http_range(req->http, has_etag ? &etag : NULL, has_lm ? &lm : NULL, len, first,
                       last)) {
    case HTTP_RANGE_OK:
        return (1);
    case HTTP_RANGE_UNSATISFIABLE:
        return (0);
    case HTTP_RANGE_NONE:
        break;
    }
    return (-1);
}

/* Body bytes [first, last] of an object into iovecs from *n on; returns false if out of room. */
static bool
body_iov(const struct cobj *oc, uint64_t first, uint64_t last, struct iovec *iov, int *n,
         int max)
{
    uint64_t off = 0;

    for (const struct sto_seg *s = oc->body.first; s != NULL && off <= last; s = s->next) {
        uint64_t s_end = off + s->len; /* exclusive */
        if (s_end > first) {
            uint64_t from = first > off ? first - off : 0;
            uint64_t to = last + 1 < s_end ? last + 1 - off : s->len;
            if (*n == max)
                return (false);
            iov[*n].iov_base = (void *)(uintptr_t)(s->data + from);
            iov[(*n)++].iov_len = (size_t)(to - from);
        }
        off = s_end;
    }
    return (true);
}

/* How a delivery answers: decided from the request and the object's head. */
struct dlv {
    bool nm;         /* 304 */
    bool gunzip;     /* a gzip object for a client that does not take gzip */
    int range;       /* as req_range(): 1 206, 0 416, -1 the whole body */
    bool chunked;    /* the length is not known yet: chunked to an HTTP/1.1 client */
    uint64_t first;  /* the body bytes to send */
    uint64_t last;
    char status_line[64];
    char tail[320];
    struct pol_synth syn; /* deliver_head() returned -1: answer this instead (0: restart) */
    unsigned hits;        /* the deliver hook's obj.hits: the object's count, 0 for a miss */
};

/* The deliver hook refused the delivery: its synthetic answer, or a restart. */
static void
deliver_refused(struct req *req, const struct dlv *d)
{
    if (d->syn.status == 0)
        req->restart = true;
    else
        req_synth_pol(req, d->syn.status, d->syn.reason);
}

/*
 * The deliver hook on a head about to be sent (the iovecs): parse it into
 * workspace with room for more fields, run the hook, serialise the result
 * as the one iovec.  The number of iovecs, or -1 with d->syn set (a 503
 * when the hook failed or the workspace ran out).
 */
static int
deliver_policy(struct req *req, struct dlv *d, struct iovec *iov, int n)
{
    struct h1_limits lim;
    struct http_hdr *hdrs;
    struct http h;
    size_t len = 0, used, room;
    unsigned nhdr = 0;
    char *buf, *out;
    struct sb sb;

    for (int i = 0; i < n; i++)
        len += iov[i].iov_len;
    buf = ws_alloc(&req->wrk->ws, len);
    if (buf == NULL)
        goto overflow;
    len = 0;
    for (int i = 0; i < n; i++) {
        memcpy(buf + len, iov[i].iov_base, iov[i].iov_len);
        len += iov[i].iov_len;
    }
    for (size_t i = 0; i < len; i++)
        nhdr += buf[i] == '\n';
    lim = (struct h1_limits){ len + 1, len + 1, nhdr + 1 };
    hdrs = ws_alloc(&req->wrk->ws, (nhdr + POL_HDR_ROOM) * sizeof *hdrs);
    if (hdrs == NULL)
        goto overflow;
    http_init(&h, hdrs, nhdr + POL_HDR_ROOM);
    if (h1_parse_response(buf, len, &lim, &h, &used) != H1_DONE)
        goto overflow;
    switch (pol_deliver(req, &h, d->hits, &d->syn)) {
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
    req->status = h.status;
    out = ws_reserve_all(&req->wrk->ws, &room);
    sb_init(&sb, out, room);
    h1_write_response(&sb, &h);
    if (!sb_ok(&sb)) {
        ws_release(&req->wrk->ws, 0);
        goto overflow;
    }
    ws_release(&req->wrk->ws, sb.len);
    iov[0].iov_base = out;
    iov[0].iov_len = sb.len;
    return (1);
overflow:
    STAT_INC(ws_overflow);
    d->syn.status = 500;
    snprintf(d->syn.reason, sizeof d->syn.reason, "%s", "workspace_client exhausted");
    return (-1);
}

/*
 * Whether oc is delivered gunzipped: its body is gzip and the client
 * does not take gzip.  Clients taking gzip are most, and get the stored
 * bytes without the object's head being read.
 */
static bool
want_gunzip(const struct req *req, const struct cobj *oc)
{
    struct txt ce;

    return (!gz_accepts(req->http) && hsh_head_field(oc, "Content-Encoding", &ce) &&
            gz_coding_is_gzip(&ce));
}

/*
 * The stored head of oc as a gunzipped body's (gz_head(): no
 * Content-Encoding, a weak ETag), without the empty line, in workspace.
 * NULL when the workspace runs out.
 */
static char *
gunzip_head(struct req *req, const struct cobj *oc, size_t *len)
{
    struct h1_limits lim = { oc->head_len + 1, oc->head_len + 1, 1 };
    struct http_hdr *hdrs;
    struct http h;
    size_t used, room;
    char *out;
    struct sb sb;

    for (size_t i = 0; i < oc->head_len; i++)
        lim.max_hdr += oc->head[i] == '\n';
    hdrs = ws_alloc(&req->wrk->ws, (lim.max_hdr + 2) * sizeof *hdrs);
    if (hdrs == NULL)
        return (NULL);
    http_init(&h, hdrs, lim.max_hdr + 2);
    if (h1_parse_response(oc->head, oc->head_len, &lim, &h, &used) != H1_DONE ||
        gz_head(&h, &req->wrk->ws, GZ_HEAD_DECODED) != 0)
        return (NULL);
    out = ws_reserve_all(&req->wrk->ws, &room);
    sb_init(&sb, out, room);
    h1_write_response(&sb, &h);
    if (!sb_ok(&sb)) {
        ws_release(&req->wrk->ws, 0);
        return (NULL);
    }
    ws_release(&req->wrk->ws, sb.len);
    *len = sb.len - 2;
    return (out);
}

/*
 * The response head of a delivery of oc into iov (returns how many):
 * the stored head with this delivery's fields appended.  len: the body
 * length, UINT64_MAX when not known yet (a streamed chunked body).  -1
 * when a deliver hook answers otherwise: then send d->syn.
 */
static int
deliver_head(struct req *req, const struct cobj *oc, uint64_t len, double now, const char *fwd,
             struct dlv *d, struct iovec *iov)
{
    double age = now - oc->fresh.t_origin;
    const char *sl_end, *head = oc->head;
    size_t head_len = oc->head_len - 2; /* without the empty line: ours follows */
    struct sb sb;
    int n = 0;

    d->gunzip = want_gunzip(req, oc);
    if (d->gunzip) {
        /* The gunzipped length is known only at the end; a Range would need it: a 200. */
        len = UINT64_MAX;
        head = gunzip_head(req, oc, &head_len);
        if (head == NULL) {
            STAT_INC(ws_overflow);
            d->syn.status = 500;
            snprintf(d->syn.reason, sizeof d->syn.reason, "%s", "workspace_client exhausted");
            return (-1);
        }
    }
    d->nm = not_modified(req, oc);
    d->first = 0;
    d->last = len > 0 ? len - 1 : 0;
    d->chunked = false;
    d->range = d->nm || len == UINT64_MAX ? -1 : want_range(req, oc, len, &d->first, &d->last);
    req->status = d->nm ? 304 : d->range == 1 ? 206 : d->range == 0 ? 416 : oc->status;
    sb_init(&sb, d->tail, sizeof d->tail);
    if (d->range == 1)
        sb_printf(&sb, "Content-Range: bytes %llu-%llu/%llu\r\nContent-Length: %llu\r\n",
                  (unsigned long long)d->first, (unsigned long long)d->last,
                  (unsigned long long)len, (unsigned long long)(d->last - d->first + 1));
    else if (d->range == 0)
        sb_printf(&sb, "Content-Range: bytes */%llu\r\nContent-Length: 0\r\n",
                  (unsigned long long)len);
    else if (!d->nm && oc->status != 204 && len != UINT64_MAX) {
        sb_cat(&sb, "Content-Length: ");
        sb_uint(&sb, len);
        sb_cat(&sb, "\r\n");
    } else if (!d->nm && oc->status != 204 && !req->head_only) {
        /* Streamed without a known length: chunked, or the close ends it for HTTP/1.0. */
        d->last = UINT64_MAX - 1;
        if (req->http->proto == 11) {
            d->chunked = true;
            sb_cat(&sb, "Transfer-Encoding: chunked\r\n");
        } else {
            req->close = true;
        }
    }
    /* Integer formatting by hand: printf's floating point shows in a hit's profile. */
    if (age < 0)
        age = 0;
    sb_cat(&sb, "Age: ");
    sb_uint(&sb, (unsigned long long)age);
    sb_cat(&sb, "\r\n");
    if (par.x_cache)
        sb_cat(&sb, fwd == NULL ? "X-Cache: HIT\r\n" : "X-Cache: MISS\r\n");
    if (par.cache_status) {
        sb_cat(&sb, "Cache-Status: surogat; ");
        sb_cat(&sb, fwd == NULL ? "hit" : fwd);
        sb_cat(&sb, "; ttl=");
        if (oc->fresh.ttl < age)
            sb_cat(&sb, "-");
        sb_uint(&sb, (unsigned long long)(oc->fresh.ttl < age ? age - oc->fresh.ttl
                                                               : oc->fresh.ttl - age));
        sb_cat(&sb, "\r\n");
    }
    if (req->close || req->want_close || sess_draining())
        sb_cat(&sb, "Connection: close\r\n");
    else if (req->keepalive_10)
        sb_cat(&sb, "Connection: keep-alive\r\n");
    sb_cat(&sb, "\r\n");
    AN(sb_ok(&sb));
    if (d->nm || d->range >= 0) {
        /* 304, 206, 416: the stored fields with the status line replaced. */
        if (d->nm)
            STAT_INC(cache_304);
        sl_end = memchr(head, '\n', head_len);
        AN(sl_end);
        iov[n].iov_base = d->status_line;
        iov[n++].iov_len =
            (size_t)snprintf(d->status_line, sizeof d->status_line, "HTTP/1.1 %u %s\r\n",
                             req->status, http_reason(req->status));
        iov[n].iov_base = (void *)(uintptr_t)(sl_end + 1);
        iov[n++].iov_len = head_len - (size_t)(sl_end + 1 - head);
    } else {
        iov[n].iov_base = (void *)(uintptr_t)head;
        iov[n++].iov_len = head_len;
    }
    iov[n].iov_base = d->tail;
    iov[n++].iov_len = sb.len;
    if (pol_active() && pol_has_deliver()) {
        n = deliver_policy(req, d, iov, n);
        if (n < 0)
            return (-1);
    }
    for (int i = 0; i < n; i++)
        STAT_ADD(resp_head_bytes, iov[i].iov_len);
    req->t_first = tim_mono();
    return (n);
}

/* Whether a delivery sends no body at all. */
static bool
no_body(const struct req *req, const struct dlv *d)
{
    return (d->nm || d->range == 0 || req->head_only);
}

/* A gunzipping delivery: the decoder's output goes to the client as it comes. */
struct gunzip {
    struct req *req;
    struct cobj *oc;
    struct gz *z;
    bool chunked;
    uint64_t bytes; /* identity bytes sent */
};

/* gz_out_f: one piece of gunzipped body to the client, a chunk of its own when chunked. */
static int
gunzip_out(void *priv, const char *p, size_t len)
{
    struct gunzip *g = priv;
    char chdr[H1_CHUNK_HDR_MAX];
    struct iovec iov[3];
    int n = 0;

    if (g->chunked) {
        iov[n].iov_base = chdr;
        iov[n++].iov_len = h1_chunk_header(chdr, len);
    }
    iov[n].iov_base = (void *)(uintptr_t)p;
    iov[n++].iov_len = len;
    if (g->chunked) {
        iov[n].iov_base = (void *)(uintptr_t) "\r\n";
        iov[n++].iov_len = 2;
    }
    if (sess_writev(g->req->sp, iov, n, req_send_deadline(g->req)) != 0)
        return (-1);
    g->bytes += len;
    return (0);
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
    g->req->abort = true;
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
        g->req->abort = true;
    }
    return (-1);
}

static void
gunzip_begin(struct gunzip *g, struct req *req, struct cobj *oc, const struct dlv *d)
{
    g->req = req;
    g->oc = oc;
    g->z = gz_new(GZ_DECODE, 0);
    g->chunked = d->chunked;
    g->bytes = 0;
    STAT_INC(gunzip_delivered);
}

/* The decoder is done: the end of a chunked body, and the count. */
static void
gunzip_end(struct gunzip *g, bool ok)
{
    struct req *req = g->req;

    if (ok && g->chunked && sess_write(req->sp, "0\r\n\r\n", 5, req_send_deadline(req)) != 0)
        ok = false;
    if (!ok)
        req->close = true;
    req->resp_bytes += g->bytes;
    STAT_ADD(resp_body_bytes, g->bytes);
    gz_free(&g->z);
}

/*
 * Deliver a hit: the stored head with this delivery's fields appended,
 * then the body straight from its storage segments, in one writev(2)
 * when it fits.
 */
void
req_deliver_obj(struct req *req, struct cobj *oc, double now, const char *fwd)
{
    struct iovec iov[64];
    struct dlv d;
    int n;

    req->outcome = REQ_O_HIT;
    /* A miss delivered from what it stored (fwd) is its first delivery: 0 hits. */
    d.hits = fwd == NULL ? __atomic_load_n(&oc->hits, __ATOMIC_RELAXED) : 0;
    n = deliver_head(req, oc, oc->body.len, now, fwd, &d, iov);
    if (n < 0) {
        deliver_refused(req, &d);
        return;
    }
    if (no_body(req, &d) || oc->body.len == 0) {
        if (sess_writev(req->sp, iov, n, req_send_deadline(req)) != 0)
            req->close = true;
        return;
    }
    if (d.gunzip) {
        struct gunzip g;
        bool ok;

        if (sess_writev(req->sp, iov, n, req_send_deadline(req)) != 0) {
            req->close = true;
            return;
        }
        gunzip_begin(&g, req, oc, &d);
        ok = true;
        for (const struct sto_seg *sg = oc->body.first; sg != NULL && ok; sg = sg->next)
            ok = gunzip_feed(&g, sg->data, sg->len, sg->next == NULL) == 0;
        gunzip_end(&g, ok);
        return;
    }
    /* Bodies of more segments than fit go in rounds of iovecs. */
    for (uint64_t from = d.first; from <= d.last;) {
        uint64_t to = d.last, off = 0;
        int before = n;
        if (!body_iov(oc, from, d.last, iov, &n, (int)ARRAY_LEN(iov))) {
            /* Out of iovecs: send what fits, up to the last whole segment. */
            for (int i = before; i < n; i++)
                off += iov[i].iov_len;
            to = from + off - 1;
        }
        if (sess_writev(req->sp, iov, n, req_send_deadline(req)) != 0) {
            req->close = true;
            return;
        }
        n = 0;
        from = to + 1;
    }
    req->resp_bytes = d.last - d.first + 1;
    STAT_ADD(resp_body_bytes, req->resp_bytes);
}

/* A reader's place in a body that is still growing. */
struct cursor {
    const struct sto_seg *seg; /* NULL before the first segment */
    uint64_t off;              /* body offset of seg's first byte */
};

/*
 * Send body bytes [from, to) of a busy object, all of them readable
 * (to <= the published length), as one chunk when chunked.  Segment
 * lengths and links are read only up to that length: the writer may be
 * extending the last segment meanwhile, but everything below the length
 * was written before it was published (release/acquire), and trimming,
 * which could move a segment, never happens while readers stream.
 */
static int
stream_out(struct req *req, const struct cobj *oc, struct cursor *c, uint64_t from, uint64_t to,
           bool chunked, struct gunzip *g)
{
    struct iovec iov[64];
    char chdr[H1_CHUNK_HDR_MAX];

    if (c->seg == NULL) {
        c->seg = __atomic_load_n(&oc->body.first, __ATOMIC_RELAXED);
        c->off = 0;
    }
    /* In rounds of one writev(2), each one chunk when chunked. */
    while (from < to) {
        uint64_t round = 0;
        int n = chunked ? 1 : 0;

        while (from < to && n < (int)ARRAY_LEN(iov) - 1) {
            size_t slen = __atomic_load_n(&c->seg->len, __ATOMIC_RELAXED);
            uint64_t end;

            if (from >= c->off + slen) {
                c->off += slen;
                c->seg = __atomic_load_n(&c->seg->next, __ATOMIC_RELAXED);
                AN(c->seg);
                continue;
            }
            end = to < c->off + slen ? to : c->off + slen;
            iov[n].iov_base = (void *)(uintptr_t)(c->seg->data + (from - c->off));
            iov[n++].iov_len = (size_t)(end - from);
            round += end - from;
            from = end;
        }
        if (g != NULL) {
            /* Gunzipped: the decoder frames its own output. */
            for (int i = chunked ? 1 : 0; i < n; i++)
                if (gunzip_feed(g, iov[i].iov_base, iov[i].iov_len, false) != 0)
                    return (-1);
            continue;
        }
        if (chunked) {
            iov[0].iov_base = chdr;
            iov[0].iov_len = h1_chunk_header(chdr, round);
            iov[n].iov_base = (void *)(uintptr_t) "\r\n";
            iov[n++].iov_len = 2;
        }
        if (sess_writev(req->sp, iov, n, req_send_deadline(req)) != 0)
            return (-1);
    }
    return (0);
}

void
req_deliver_stream(struct req *req, struct cobj *oc, double tmo)
{
    uint64_t len = oc->stream_clen, pos, avail, end;
    struct cursor cur = { NULL, 0 };
    struct iovec iov[3];
    enum hsh_stream st;
    struct gunzip g;
    struct dlv d;
    bool done = false;
    int n;

    req->outcome = REQ_O_COLLAPSED;
    d.hits = __atomic_load_n(&oc->hits, __ATOMIC_RELAXED); /* joining counted as a hit */
    n = deliver_head(req, oc, len, tim_real(), "fwd=miss; collapsed", &d, iov);
    if (n < 0) {
        deliver_refused(req, &d);
        return;
    }
    if (sess_writev(req->sp, iov, n, req_send_deadline(req)) != 0) {
        req->close = true;
        return;
    }
    if (no_body(req, &d) || len == 0)
        return;
    if (d.gunzip)
        gunzip_begin(&g, req, oc, &d);
    for (pos = d.first; pos <= d.last;) {
        st = hsh_stream_wait(oc, pos, tmo, &avail);
        if (st == HSH_S_FAILED || st == HSH_S_TIMEOUT) {
            /* The head is out: only a cut connection tells the client the body is short. */
            STAT_INC(cache_stream_aborted);
            req->abort = true;
            break;
        }
        end = avail < d.last + 1 ? avail : d.last + 1;
        if (pos < end) {
            if (stream_out(req, oc, &cur, pos, end, d.chunked, d.gunzip ? &g : NULL) != 0) {
                req->close = true;
                break;
            }
            if (!d.gunzip) {
                req->resp_bytes += end - pos;
                STAT_ADD(resp_body_bytes, end - pos);
            }
            pos = end;
        }
        if (st == HSH_S_DONE && pos >= avail) {
            done = true;
            break;
        }
    }
    if (pos > d.last)
        done = true;
    if (d.gunzip) {
        /* The decoder checks that the stream ended where the body did. */
        gunzip_end(&g, done && gunzip_feed(&g, NULL, 0, true) == 0);
        return;
    }
    if (done && d.chunked && sess_write(req->sp, "0\r\n\r\n", 5, req_send_deadline(req)) != 0)
        req->close = true;
}

/*
 * A successful unsafe method invalidates the target URL and the URLs its
 * response names in Location and Content-Location on the same host (RFC
 * 9111 section 4.4): other hosts' caches are not ours to empty on one
 * origin's word.  Called with the backend's response head, before the
 * client sees any of it: a client that has its answer and asks again
 * must not get the old copy, and neither may anyone after a crash.
 *
 * Only the unsafe methods that change a resource count, spelled exactly
 * (methods are case-sensitive, RFC 9110 section 9.1): "FOO" or "post"
 * changes nothing a cache knows of, and must not let any client empty it.
 */
void
req_invalidate(struct req *req, const struct http *resp)
{
    static const char *const fields[] = { "Location", "Content-Location" };
    static const char *const unsafe[] = { "POST", "PUT", "PATCH", "DELETE" };
    const struct http_hdr *host = http_find(req->http, "Host");
    char *key;
    size_t keylen;
    bool is_unsafe = false;

    if (!par.invalidate_on_unsafe || resp->status < 200 || resp->status >= 400)
        return;
    for (size_t i = 0; i < ARRAY_LEN(unsafe) && !is_unsafe; i++)
        is_unsafe = is_method(req, unsafe[i]);
    if (!is_unsafe)
        return;
    if ((key = cache_key(req, &keylen)) != NULL)
        (void)hsh_purge(key, keylen);
    if (host == NULL)
        return;
    for (size_t i = 0; i < ARRAY_LEN(fields); i++) {
        const struct txt *v = http_value(resp, fields[i]);
        const char *p, *e, *auth;
        size_t skip = 0;

        if (v == NULL || v->len == 0)
            continue;
        p = v->b;
        e = v->b + v->len;
        if (v->len > 7 && strncasecmp(p, "http://", 7) == 0)
            skip = 7;
        else if (v->len > 8 && strncasecmp(p, "https://", 8) == 0)
            skip = 8;
        else if (*p != '/')
            continue; /* a relative reference: not worth resolving */
        if (skip > 0) {
            /* An absolute URI must name our Host; then keep its path. */
            for (auth = p + skip, p = auth; p < e && *p != '/'; p++)
                continue;
            if ((size_t)(p - auth) != host->val.len ||
                strncasecmp(auth, host->val.b, host->val.len) != 0 || p == e)
                continue;
        }
        key = make_key(req, &host->val, p, (size_t)(e - p), &keylen);
        if (key == NULL)
            return;
        (void)hsh_purge(key, keylen);
    }
}

/* A policy failure: 503 (through the synth hook), logged by pol_ already. */
static void
policy_fail(struct req *req)
{
    req_synth_pol(req, 503, "policy error");
}

/*
 * Static files skip the cache: the open-file cache and the page cache
 * hold them.  true when be is a static backend and the request was
 * answered from its files.
 */
static bool
deliver_static(struct req *req, struct be *be)
{
    if (be == NULL || be->sfb == NULL)
        return (false);
    req->be_name = be->name;
    sfb_deliver(req, be->sfb);
    return (true);
}

/* The request's director is a static backend: answered from its files. */
static bool
static_route(struct req *req)
{
    struct dir *d;

    /* Without static backends, a hit never resolves its route at all. */
    if (!pol_routes_static(req))
        return (false);
    d = pol_dir(req);
    return (d != NULL && dir_type(d) == DIR_BACKEND &&
            deliver_static(req, dir_pick(d, &(struct dir_ctx){ .req = req->http })));
}

/*
 * The backend for a fetch: picked by the request's director (req.backend,
 * the routes) when a script is loaded, else -b's.  NULL when none is
 * healthy: the fetch answers 503, or stale content where allowed.
 */
static struct be *
pick_backend(struct req *req)
{
    struct dir *d;

    if (!pol_active() || (d = pol_dir(req)) == NULL)
        return (be_default());
    /* A pass or a pipe has not looked up: the key it would have, so it goes where a lookup would. */
    if (req->lookup_key == NULL)
        req->lookup_key = cache_key(req, &req->lookup_keylen);
    return (dir_pick(d, &(struct dir_ctx){ .req = req->http, .key = req->lookup_key,
                                           .keylen = req->lookup_keylen }));
}

/*
 * The request goes to the backend, not cached: through the pass hook
 * when a script is loaded.
 */
static void do_pass(struct req *req);

/* A hook said neither fetch nor deliver: pass, synth, restart, or it failed. */
static void
answer_other(struct req *req, enum pol_act act, const struct pol_synth *syn)
{
    if (act == POL_PASS)
        do_pass(req);
    else if (act == POL_SYNTH)
        req_synth_pol(req, syn->status, syn->reason);
    else if (act == POL_RESTART)
        req->restart = true;
    else
        policy_fail(req);
}

static void
do_pass(struct req *req)
{
    struct pol_synth syn;
    enum pol_act act;

    /* pass never answers "pass": no recursion */
    if (pol_active() && (act = pol_pass(req, &syn)) != POL_FETCH) {
        answer_other(req, act, &syn);
        return;
    }
    fetch_pass(req, pick_backend(req));
}

/*
 * A miss with the busy object *ocp: fetch it, unless the miss hook says
 * otherwise -- then the busy object is abandoned (waiters look up again)
 * and the stale copy let go.
 */
static void
do_miss(struct req *req, struct cobj **ocp, struct hsh_stale *stale)
{
    struct pol_synth syn;
    enum pol_act act = POL_FETCH;

    if (pol_active())
        act = pol_miss(req, &syn);
    if (act == POL_FETCH) {
        fetch_miss(req, pick_backend(req), ocp, stale);
        return;
    }
    hsh_abandon(ocp, 0);
    if (stale->oc != NULL)
        hsh_deref(&stale->oc);
    answer_other(req, act, &syn);
}

/*
 * pol_obj's load(): the object's stored head parsed into workspace (with
 * the empty line it is stored without), when the hit hook first reads it.
 */
static struct http *
load_obj_head(const struct pol_obj *obj)
{
    struct req *req = obj->req;
    const struct cobj *oc = obj->oc;
    struct h1_limits lim;
    struct http_hdr *hdrs;
    struct http *h;
    size_t len = oc->head_len + 2, used;
    unsigned nhdr = 1;
    char *buf;

    buf = ws_alloc(&req->wrk->ws, len);
    h = ws_alloc(&req->wrk->ws, sizeof *h);
    if (buf == NULL || h == NULL) {
        STAT_INC(ws_overflow);
        return (NULL);
    }
    memcpy(buf, oc->head, oc->head_len);
    memcpy(buf + oc->head_len, "\r\n", 2);
    for (size_t i = 0; i < len; i++)
        nhdr += buf[i] == '\n';
    hdrs = ws_alloc(&req->wrk->ws, nhdr * sizeof *hdrs);
    if (hdrs == NULL) {
        STAT_INC(ws_overflow);
        return (NULL);
    }
    http_init(h, hdrs, nhdr);
    lim = (struct h1_limits){ len + 1, len + 1, nhdr };
    if (h1_parse_response(buf, len, &lim, h, &used) != H1_DONE)
        return (NULL); /* we stored it: cannot happen, but not worth a panic */
    return (h);
}

/* The hit hook on object oc: its timing now, its head when the script reads it. */
static enum pol_act
policy_hit(struct req *req, const struct cobj *oc, double now, struct pol_synth *syn)
{
    struct pol_obj obj = { .load = load_obj_head, .oc = oc, .req = req };

    obj.age = SRG_MAX(0.0, now - oc->fresh.t_origin);
    obj.ttl = oc->fresh.ttl - obj.age;
    obj.grace = oc->fresh.swr;
    obj.hits = __atomic_load_n(&oc->hits, __ATOMIC_RELAXED);
    return (pol_hit(req, &obj, syn));
}

/*
 * The policy's recv and hash hooks: true with the cache key to look up
 * (NULL: the workspace ran out, pass), false when the request was
 * answered here.
 */
static bool
policy_recv(struct req *req, char **key, size_t *keylen)
{
    struct pol_synth syn;
    enum pol_act act = pol_recv(req, &syn);

    /* Wherever recv sent it, a request routed to static files goes there. */
    if ((act == POL_HASH || act == POL_PASS || act == POL_PIPE) && static_route(req))
        return (false);
    switch (act) {
    case POL_HASH:
        break;
    case POL_PASS:
        do_pass(req);
        return (false);
    case POL_PIPE:
        req_pipe(req, pick_backend(req));
        return (false);
    case POL_PURGE:
        req_purge(req);
        return (false);
    case POL_SYNTH:
        req_synth_pol(req, syn.status, syn.reason);
        return (false);
    default:
        policy_fail(req);
        return (false);
    }
    /* HEAD follows the method as the policy left it. */
    req->head_only = is_method(req, "HEAD");
    if (pol_hash(req, key, keylen) != 0) {
        policy_fail(req);
        return (false);
    }
    return (true);
}

static void
dispatch_once(struct req *req)
{
    struct cobj *oc = NULL, *so;
    struct hsh_stale stale;
    struct pol_synth syn;
    struct cc qcc;
    char *key;
    size_t keylen;
    double now;
    bool refresh = false; /* the hit hook said "miss": look up past fresh objects */

    OBJ_CHECK(req, REQ_MAGIC);
    req->lookup_key = NULL; /* a restart's recv may pass */
    if (!pol_active() && deliver_static(req, be_default()))
        return;
    if (pol_active()) {
        if (!policy_recv(req, &key, &keylen))
            return;
    } else if (is_method(req, "PURGE")) {
        req_purge(req);
        return;
    } else if ((!is_method(req, "GET") && !is_method(req, "HEAD")) ||
               http_find(req->http, "Authorization") != NULL ||
               http_find(req->http, "Cookie") != NULL) {
        fetch_pass(req, be_default());
        return;
    } else {
        key = cache_key(req, &keylen);
    }
    if (key == NULL) {
        do_pass(req);
        return;
    }
    req->lookup_key = key;
    req->lookup_keylen = keylen;
    cc_parse_request(req->http, &qcc);
    if (req->hash_always_miss) {
        /* As the hit hook's "miss": a fresh object only serves to revalidate. */
        refresh = true;
        qcc.flags |= CC_NO_CACHE;
    }
lookup:
    now = tim_real();
    switch (hsh_lookup(key, keylen, req->http, &qcc, now,
                       (req->hash_ignore_busy ? HSH_L_IGNORE_BUSY : 0) |
                           (refresh ? HSH_L_FORCE_REVALIDATE : 0),
                       &oc, &stale)) {
    case HSH_PASS:
        if (qcc.flags & CC_ONLY_IF_CACHED)
            break;
        do_pass(req);
        return;
    case HSH_HIT:
        if (!hsh_verify(oc)) {
            /* Recovered from a file store and corrupt: gone from the index, look again. */
            hsh_deref(&oc);
            goto lookup;
        }
        if (!refresh && pol_active() && pol_has_hit()) {
            enum pol_act act = policy_hit(req, oc, now, &syn);
            if (act != POL_DELIVER)
                hsh_deref(&oc);
            if (act == POL_MISS) {
                /*
                 * As a client's no-cache would: the object is only good for
                 * revalidation, so the lookup misses and the fetch replaces it.
                 */
                refresh = true;
                qcc.flags |= CC_NO_CACHE;
                goto lookup;
            }
            if (act != POL_DELIVER) {
                answer_other(req, act, &syn);
                return;
            }
        }
        STAT_INC(cache_hit);
        req_deliver_obj(req, oc, now, NULL);
        hsh_deref(&oc);
        return;
    case HSH_STREAM:
        /*
         * Joining a fetch in progress is a hit on the object it stores
         * (its head is in): the hit hook decides.  "miss" cannot refresh
         * what is being fetched right now: it goes to the backend as a pass.
         */
        if (!refresh && pol_active() && pol_has_hit()) {
            enum pol_act act = policy_hit(req, oc, now, &syn);
            if (act != POL_DELIVER) {
                hsh_stream_leave(&oc);
                answer_other(req, act == POL_MISS ? POL_PASS : act, &syn);
                return;
            }
        }
        /*
         * Each wait is bounded: the fetch gives up after its between-bytes
         * timeout, but may also spend up to send_timeout on one write to
         * its own (slow) client before it reads on.
         */
        {
            /* The fetching request most likely went where this one would. */
            struct be *be = pick_backend(req);
            req_deliver_stream(req, oc, (be != NULL ? be_between_bytes_timeout(be)
                                                    : par.backend_between_bytes_timeout) +
                                            par.send_timeout + 1);
        }
        hsh_stream_leave(&oc);
        return;
    case HSH_GRACE:
        /*
         * Stale within its grace window and nobody refreshing it: this
         * request gets the stale copy at once too, and the refresh runs in
         * the background.  Cache-Status says hit (RFC 9211: served stale
         * from the cache without going forward; ttl is negative).
         */
        if (!hsh_verify(stale.oc)) {
            /* Recovered and corrupt: gone; this is a plain miss. */
            hsh_deref(&stale.oc);
            do_miss(req, &oc, &stale);
            return;
        }
        if (pol_active() && pol_has_hit()) {
            enum pol_act act = policy_hit(req, stale.oc, now, &syn);
            if (act == POL_MISS) {
                /* Refresh in the foreground: the stale copy only revalidates. */
                do_miss(req, &oc, &stale);
                return;
            }
            if (act != POL_DELIVER) {
                hsh_abandon(&oc, 0);
                hsh_deref(&stale.oc);
                answer_other(req, act, &syn);
                return;
            }
        }
        STAT_INC(cache_hit);
        so = stale.oc;
        hsh_ref(so);
        fetch_bg(req, pick_backend(req), &oc, &stale);
        req_deliver_obj(req, so, now, NULL);
        req->outcome = REQ_O_GRACE;
        hsh_deref(&so);
        return;
    case HSH_MISS:
        if (qcc.flags & CC_ONLY_IF_CACHED) {
            hsh_abandon(&oc, 0);
            if (stale.oc != NULL)
                hsh_deref(&stale.oc);
            break;
        }
        /* A stale copy is revalidated or served on error: it must be intact too. */
        if (stale.oc != NULL && !hsh_verify(stale.oc))
            hsh_deref(&stale.oc);
        /* A Range miss fetches the whole object (fetch_miss) and cuts the range from it. */
        do_miss(req, &oc, &stale);
        return;
    }
    /* only-if-cached with nothing usable: never contact the origin (RFC 9111 5.2.1.7). */
    req->outcome = REQ_O_MISS;
    (void)req_synth(req, 504, NULL);
}

void
req_dispatch(struct req *req)
{
    OBJ_CHECK(req, REQ_MAGIC);
    for (;;) {
        req->restart = false;
        dispatch_once(req);
        if (!req->restart)
            return;
        SRG_ASSERT(req->t_first == 0); /* hooks restart before anything is sent */
        if (req->restarts >= par.max_restarts) {
            log_msg(LOG_WARNING, "policy: \"restart\" past max_restarts (%u): 503",
                    par.max_restarts);
            (void)req_synth_msg(req, 503, NULL, "too many restarts");
            return;
        }
        if (req->body != H1_BODY_NONE && req->bereq != NULL) {
            /* Its body went to the backend already: there is none to send again. */
            (void)req_synth_msg(req, 503, NULL, "cannot restart a request whose body was sent");
            return;
        }
        req->restarts++;
        STAT_INC(policy_restart);
        req->bereq = NULL;
        req->retries = 0;
        req->be_name = NULL;
        req->status = 0;
        req->head_only = is_method(req, "HEAD");
    }
}
