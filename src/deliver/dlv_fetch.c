/*
 * Delivering a fetch to the client that asked for it: the head made from
 * the backend's response (304, 206 or 416 when a miss fetched the whole
 * object, Cache-Status saying why it went forward), then the body as the
 * fetch produces it, through a sink (struct fetch_sink) that gathers its
 * pieces and hands them to the transport at each flush.
 *
 * The request's side (req_fetch.c) runs the fetch and joins the two: this
 * file knows the busy object's fields, never calls the fetch.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "surogat/defs.h"
#include "surogat/dlv.h"
#include "surogat/fetch.h"
#include "surogat/gz.h"
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

/* A field added to the client head: its value in workspace.  -1 when full. */
static int
add_num(struct req *req, struct http *h, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int
add_num(struct req *req, struct http *h, const char *name, const char *fmt, ...)
{
    char *v = ws_alloc(req->ws, 96);
    va_list ap;
    int n;

    if (v == NULL)
        return (-1);
    va_start(ap, fmt);
    n = vsnprintf(v, 96, fmt, ap);
    va_end(ap);
    return (http_add(h, (struct txt){ name, strlen(name) }, (struct txt){ v, (size_t)n }));
}

/* A HEAD pass: the length the backend announced for its GET, when it said one plainly. */
static uint64_t
announced_length(const struct http *resp)
{
    const struct txt *cl = http_value(resp, "Content-Length");
    uint64_t n = 0;

    if (cl == NULL || cl->len == 0 || cl->len > 18)
        return (TP_LEN_NONE);
    for (size_t i = 0; i < cl->len; i++) {
        if (cl->b[i] < '0' || cl->b[i] > '9')
            return (TP_LEN_NONE);
        n = n * 10 + (uint64_t)(cl->b[i] - '0');
    }
    return (n);
}

/*
 * The answer to a miss is the whole object, fetched for the cache: the
 * client's own condition and range are answered here, against the
 * fetched response's validators.  A Range only with a known length; a
 * body of unknown length gets the whole 200, always a valid answer.
 */
static void
miss_conditions(struct req *req, const struct busyobj *bo, struct dlv_fetch *df)
{
    const struct http *be = bo->beresp;

    if (!bo->miss || be->status != 200)
        return;
    if (http_not_modified(req->http, http_value(be, "ETag"), http_value(be, "Last-Modified"))) {
        df->status = 304;
        return;
    }
    if (bo->rbody != H1_BODY_LENGTH || bo->gz_client)
        return;
    switch (http_range(req->http, http_value(be, "ETag"), http_value(be, "Last-Modified"),
                       bo->rclen, &df->first, &df->last)) {
    case HTTP_RANGE_OK:
        df->range = true;
        df->status = 206;
        break;
    case HTTP_RANGE_UNSATISFIABLE:
        df->status = 416;
        break;
    case HTTP_RANGE_NONE:
        break;
    }
}

/* The client head from the backend's, into d.  -1 refused (dlv__refused), -2 workspace full. */
static int
plan(struct req *req, const struct busyobj *bo, const char *fwd, struct dlv_fetch *df,
     struct dlv_plan *d)
{
    const struct http *be = bo->beresp;
    unsigned nhdr = be->nhdr + 10 + (pol_active() ? POL_HDR_ROOM : 0);
    struct http_hdr *hdrs = ws_alloc(req->ws, nhdr * sizeof *hdrs);
    struct http *resp = ws_alloc(req->ws, sizeof *resp);
    struct fetch_codings cd = fetch_codings(bo);
    char *date;

    if (hdrs == NULL || resp == NULL)
        return (-2);
    http_init(resp, hdrs, nhdr);
    memcpy(hdrs, be->hdr, be->nhdr * sizeof *hdrs);
    resp->nhdr = be->nhdr;
    resp->proto = 11;
    resp->status = df->status;
    resp->reason = df->status == be->status && be->reason.len > 0
                       ? be->reason
                       : (struct txt){ http_reason(df->status), strlen(http_reason(df->status)) };
    http_strip_hop_by_hop(resp);
    /* Surrogate-Control is consumed here; CDN-Cache-Control goes on to other CDN layers. */
    http_unset(resp, "Surrogate-Control");
    if (http_find(resp, "Date") == NULL) {
        if ((date = ws_alloc(req->ws, TIM_HTTP_DATE_LEN + 1)) == NULL)
            return (-2);
        tim_http_date(tim_real(), date);
        AZ(http_add(resp, TXT_LIT("Date"), (struct txt){ date, TIM_HTTP_DATE_LEN }));
    }
    if (par.via)
        AZ(http_add(resp, TXT_LIT("Via"),
                    be->proto == 10 ? TXT_LIT("1.0 surogat") : TXT_LIT("1.1 surogat")));
    if (bo->gz_want != FGZ_NONE && gz_head_coding(resp, req->ws, cd.be, cd.client) != 0)
        return (-2);
    if (df->range && add_num(req, resp, "Content-Range", "bytes %llu-%llu/%llu",
                             (unsigned long long)df->first, (unsigned long long)df->last,
                             (unsigned long long)bo->rclen) != 0)
        return (-2);
    if (df->status == 416 &&
        add_num(req, resp, "Content-Range", "bytes */%llu", (unsigned long long)bo->rclen) != 0)
        return (-2);
    if (par.x_cache)
        AZ(http_add(resp, TXT_LIT("X-Cache"), fwd != NULL ? TXT_LIT("MISS") : TXT_LIT("PASS")));
    if (par.cache_status) {
        /*
         * RFC 9211: why we went forward, what came back if the client gets
         * another status, and why a pass passed or a miss was not stored
         * (detail=: req->cs_detail, bo->store_why).
         */
        const char *detail = fwd == NULL ? req->cs_detail
                             : !bo->stored && bo->store_why != FRESH_STORE
                                 ? fresh_store_name(bo->store_why)
                                 : NULL;
        char *cs = ws_alloc(req->ws, 128);
        struct sb sb;
        if (cs == NULL)
            return (-2);
        /* By hand: printf costs more than the rest of a pass's head. */
        sb_init(&sb, cs, 128);
        sb_cat(&sb, "surogat; fwd=");
        sb_cat(&sb, fwd != NULL           ? fwd
                    : req->cs_fwd != NULL ? req->cs_fwd
                                          : "bypass");
        if (df->status != be->status) {
            sb_cat(&sb, "; fwd-status=");
            sb_uint(&sb, be->status);
        }
        if (bo->stored) {
            sb_cat(&sb, "; stored");
        } else if (detail != NULL) {
            sb_cat(&sb, "; detail=");
            sb_cat(&sb, detail);
        }
        AZ(http_add(resp, TXT_LIT("Cache-Status"), (struct txt){ cs, sb.len }));
    }
    /* The length: the backend's, the range's, or none until the body ends. */
    memset(d, 0, sizeof *d);
    d->head.status = resp->status;
    d->head.reason = resp->reason;
    df->body = !req->head_only;
    if (df->status == 304 || df->status == 204 || df->status < 200) {
        d->head.len = TP_LEN_NONE;
        df->body = false;
    } else if (df->status == 416) {
        d->head.len = 0;
        df->body = false;
    } else if (df->range) {
        d->head.len = df->last - df->first + 1;
    } else if (bo->rbody == H1_BODY_LENGTH && !bo->gz_client) {
        d->head.len = bo->rclen;
    } else if (bo->rbody == H1_BODY_NONE) {
        d->head.len = req->head_only ? announced_length(be) : 0;
    } else {
        d->head.len = TP_LEN_UNKNOWN;
    }
    d->head.body = df->body || req->head_only;
    if (d->head.len == TP_LEN_NONE)
        d->head.body = false;
    if (pol_active() && pol_has_deliver()) {
        if (dlv__run_hook(req, resp, 0, d) != 0)
            return (-1);
    }
    d->head.nblock = 1;
    return (dlv__fields_block(req, resp, &d->head.block[0]) == 0 ? 0 : -2);
}

/* fetch_sink.piece: gather what falls in the range (all of it without one). */
static int
sink_piece(void *priv, const char *p, size_t len)
{
    struct dlv_fetch *df = priv;
    uint64_t off = df->off;

    df->off += len;
    if (df->range) {
        uint64_t from = df->first > off ? df->first : off;
        uint64_t to = df->last + 1 < off + len ? df->last + 1 : off + len;
        if (from >= to)
            return (0);
        p += from - off;
        len = (size_t)(to - from);
    }
    if (df->niov == (int)ARRAY_LEN(df->iov) && df->sink.flush(df) != 0)
        return (-1);
    df->iov[df->niov].iov_base = (void *)(uintptr_t)p;
    df->iov[df->niov++].iov_len = len;
    return (0);
}

/* Stored bytes a client that fell behind reads back per write while it can take them. */
#define DLV_CATCH_UP (64 * 1024)

/*
 * The client fell behind: send it what is stored while its socket takes
 * it, never waiting for it -- the fetch must go on.  -1 when it failed.
 */
static int
catch_up(struct dlv_fetch *df)
{
    struct req *req = df->req;
    uint64_t avail;

    while (req->tp->writable(req)) {
        (void)hsh_stream_wait(df->oc, df->lag->pos, 0, &avail);
        if (avail <= df->lag->pos || dlv__reader_done(df->lag))
            return (0);
        if (dlv__reader_send(df->lag, avail, DLV_CATCH_UP) != 0)
            return (-1);
    }
    return (0);
}

/*
 * Its socket is full: from now on the client reads from the store, as a
 * streaming reader of the busy object, and the fetch no longer waits for
 * it.  -1 when there is no room to keep its place: it is written to, and
 * waited for, as before.
 */
static int
fall_behind(struct dlv_fetch *df)
{
    struct req *req = df->req;
    struct dlv_reader *r;

    /*
     * Only while the fetch stores the object whole: what it stores is what
     * the client missed.  And not for a client of a coding encoded for it
     * alone: an encoder's bytes depend on where it was flushed, so the rest
     * made again from the store would not continue what it has.
     */
    if (df->bo->oc == NULL || !df->bo->stored ||
        (df->pick.send != df->pick.from && df->pick.send != GZ_C_IDENTITY) ||
        (r = ws_alloc(req->ws, sizeof *r)) == NULL)
        return (-1);
    df->oc = df->bo->oc;
    hsh_stream_join(df->oc);
    dlv__reader_init(r, req, df->oc, df->pick, df->range ? df->first : 0,
                     df->range ? df->last : UINT64_MAX - 1, df->sent);
    df->lag = r;
    STAT_INC(fetch_client_behind);
    return (0);
}

/* fetch_sink.flush: what was gathered, to the transport. */
static int
sink_flush(void *priv)
{
    struct dlv_fetch *df = priv;
    uint64_t bytes = 0;
    int n = df->niov, rv;

    df->niov = 0;
    if (df->lag != NULL)
        return (catch_up(df)); /* the store has the pieces */
    if (n == 0)
        return (0);
    if (df->bo != NULL && !df->req->tp->writable(df->req) && fall_behind(df) == 0)
        return (catch_up(df));
    for (int i = 0; i < n; i++)
        bytes += df->iov[i].iov_len;
    rv = df->req->tp->body(df->req, df->iov, n);
    if (rv == 0)
        df->sent += bytes;
    return (rv);
}

/*
 * The fetch ended (rv as for dlv_fetch_end()) and the client is behind:
 * the rest from the store -- the object is published now, or kept for
 * its readers -- with writes that may wait for the client, since nobody
 * waits for it any more.
 */
static void
lag_end(struct dlv_fetch *df, int rv)
{
    struct req *req = df->req;
    struct dlv_reader *r = df->lag;
    bool complete = false;
    uint64_t avail;

    if (rv == 0 && hsh_stream_wait(df->oc, r->pos, 0, &avail) == HSH_S_DONE)
        complete = dlv__reader_send(r, avail, UINT64_MAX) == 0 &&
                   (dlv__reader_done(r) || r->pos >= avail);
    if (dlv__reader_finish(r, complete) == 0) {
        (void)req->tp->end(req);
    } else if (rv != -2 && !req->close) {
        /* A body the store could not keep whole: only a cut tells the client it is short. */
        STAT_INC(fetch_aborted);
        (void)req->tp->abort(req);
        req->abort = req->close = true;
    }
    hsh_stream_leave(&df->oc);
}

int
dlv_fetch_begin(struct req *req, const struct busyobj *bo, const char *fwd, struct dlv_fetch *df)
{
    struct dlv_plan d;
    int rv;

    OBJ_CHECK(req, REQ_MAGIC);
    OBJ_CHECK(bo, BUSYOBJ_MAGIC);
    memset(df, 0, sizeof *df);
    df->req = req;
    df->status = bo->beresp->status;
    miss_conditions(req, bo, df);
    if ((rv = plan(req, bo, fwd, df, &d)) == -2) {
        STAT_INC(ws_overflow);
        d.syn.status = 500;
        snprintf(d.syn.reason, sizeof d.syn.reason, "%s", "workspace_client exhausted");
        rv = -1;
    }
    if (rv != 0) {
        dlv__refused(req, &d);
        return (-1);
    }
    if (df->status == 304)
        STAT_INC(cache_304);
    df->sink = (struct fetch_sink){ sink_piece, sink_flush, df };
    TRACE_HEAD(req->trace, &d.head);
    if (bo->miss && df->body) {
        df->bo = bo;
        /* Behind, its body is the stored one made over as it gets it now, if it differs. */
        struct fetch_codings cd = fetch_codings(bo);
        df->pick = (struct gz_pick){ cd.client, cd.store };
    }
    if (req->tp->head(req, &d.head) != 0)
        return (-1);
    /* No body for this client (304, 416, HEAD): it has its whole answer now,
     * not when the backend has finished filling the cache -- which goes on
     * even if this client has gone. */
    if (!df->body && req->tp->end(req) != 0)
        req->close = true;
    return (0);
}

void
dlv_fetch_end(struct dlv_fetch *df, int rv)
{
    struct req *req = df->req;

    df->bo = NULL; /* the fetch is over */
    /* The client was answered in dlv_fetch_begin(); the fetch was the cache's. */
    if (!df->body)
        return;
    if (df->lag != NULL) {
        lag_end(df, rv);
        return;
    }
    if (rv == 0) {
        if (sink_flush(df) == 0)
            (void)req->tp->end(req);
        return;
    }
    if (rv == -2) {
        req->close = true;
        return;
    }
    /* The backend failed mid-body. */
    if (!req->tp->abort(req)) {
        /* Nothing reached the client yet: it can still get a clean 502. */
        req->resp_bytes = 0;
        (void)dlv_error(req, 502, NULL, NULL);
        return;
    }
    /* The head is out: only a cut connection tells the client the body is short. */
    STAT_INC(fetch_aborted);
}
