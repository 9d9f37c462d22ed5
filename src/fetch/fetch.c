/*
 * The backend transaction of a pass: request out, response back, body
 * streamed from the backend buffer to the client as it arrives.
 *
 * Runs on the worker of the client request.  The backend connection
 * belongs to this function from bcp_get() until it is recycled (the
 * response was complete and the backend keeps the connection) or closed.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "surogat/bcp.h"
#include "surogat/be.h"
#include "surogat/defs.h"
#include "surogat/dlv.h"
#include "surogat/dir.h"
#include "surogat/fetch.h"
#include "surogat/cc.h"
#include "surogat/fresh.h"
#include "surogat/gz.h"
#include "surogat/h1.h"
#include "surogat/hsh.h"
#include "surogat/http.h"
#include "surogat/log.h"
#include "surogat/par.h"
#include "surogat/pol.h"
#include "surogat/req.h"
#include "surogat/sb.h"
#include "surogat/sess.h"
#include "surogat/sfb.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/trace.h"
#include "surogat/wrk.h"

#include "fetch_priv.h"

#define OUT_IOV 64

/* Client writes gathered into one writev(2): the head with the first body bytes. */
struct out {
    struct iovec iov[OUT_IOV];
    char chdr[OUT_IOV / 3 + 1][H1_CHUNK_HDR_MAX];
    int niov;
    int nchdr;
    uint64_t body_bytes; /* body bytes queued, for the log */
};

enum be_head {
    BEH_OK,
    BEH_RETRY,   /* a reused connection was dead before any byte came back */
    BEH_TIMEOUT, /* 504 */
    BEH_BAD,     /* 502 */
};

/*
 * Send what is queued.  A client that fails while the body is still being
 * stored does not stop the fetch: the cache, and the requests streaming
 * from the busy object, still want the rest.
 */
static int
out_flush(struct fetch *f, struct out *o)
{
    struct req *req = f->req;
    int rv = 0;

    if (o->niov > 0 && f->to_client) {
        if (req->t_first == 0)
            req->t_first = tim_mono();
        rv = sess_writev(req->sp, o->iov, o->niov, req_send_deadline(req));
        if (rv != 0 && f->oc != NULL) {
            f->to_client = false;
            f->client_failed = true;
            rv = 0;
        } else if (rv == 0) {
            req->resp_bytes += o->body_bytes;
            STAT_ADD(resp_body_bytes, o->body_bytes);
        }
    }
    o->niov = 0;
    o->nchdr = 0;
    o->body_bytes = 0;
    return (rv);
}

static int
out_add(struct fetch *f, struct out *o, const void *p, size_t len)
{
    if (len == 0)
        return (0);
    if (o->niov == OUT_IOV && out_flush(f, o) != 0)
        return (-1);
    o->iov[o->niov].iov_base = (void *)(uintptr_t)p;
    o->iov[o->niov].iov_len = len;
    o->niov++;
    return (0);
}

/* One piece of body for the client, in a chunk of its own when chunked.  -2: client failed. */
static int
out_piece(struct fetch *f, struct out *o, const char *p, size_t len)
{
    if (f->chunk_out) {
        if ((o->niov + 3 > OUT_IOV || o->nchdr == (int)ARRAY_LEN(o->chdr)) && out_flush(f, o) != 0)
            return (-2);
        size_t hl = h1_chunk_header(o->chdr[o->nchdr], len);
        if (out_add(f, o, o->chdr[o->nchdr++], hl) != 0)
            return (-2);
    }
    if (out_add(f, o, p, len) != 0)
        return (-2);
    o->body_bytes += len;
    if (f->chunk_out && out_add(f, o, "\r\n", 2) != 0)
        return (-2);
    return (0);
}

struct gz_client {
    struct fetch *f;
    struct out *o;
};

/* gz_out_f: gzip filter output for the client, sent at once (the filter reuses its buffer). */
static int
gz_client_out(void *priv, const char *p, size_t len)
{
    struct gz_client *c = priv;

    if (!c->f->body_to_client || !c->f->to_client)
        return (0);
    if (out_piece(c->f, c->o, p, len) != 0)
        return (-1);
    return (out_flush(c->f, c->o) == 0 ? 0 : -1);
}

/*
 * Body bytes, chunked or raw as this response is delivered, and stored.
 * 0; -1 the body is bad (a corrupt gzip body), FETCH_GZ_BOMB (a gzip
 * bomb); -2 the client failed.
 */
static int
out_body(struct fetch *f, struct out *o, const char *p, size_t len)
{
    uint64_t off = f->body_off;

    if (len == 0)
        return (0);
    if (f->gz != NULL) {
        /* The filter stores what is stored and sends the client its output. */
        struct gz_client c = { f, o };
        int rv = fetch__gz_body(f, p, len, false, gz_client_out, &c);
        f->body_off += len;
        if (rv != 0 || f->gz_client)
            return (rv);
    } else {
        if (f->oc != NULL)
            fetch__store_body(f, p, len);
        f->body_off += len;
    }
    if (!f->body_to_client || !f->to_client)
        return (0);
    if (f->range == 1) {
        /* Only the bytes of [r_first, r_last] that fall in this piece. */
        uint64_t from = f->r_first > off ? f->r_first : off;
        uint64_t to = f->r_last + 1 < off + len ? f->r_last + 1 : off + len;
        if (from >= to)
            return (0);
        p += from - off;
        len = (size_t)(to - from);
    }
    return (out_piece(f, o, p, len));
}

/* ---- the backend request ---- */

/* Build the backend request head into workspace.  NULL on overflow. */
/* Request fields that would turn the full response a miss must store into a 304, 412 or 206. */
static const char *const miss_strip[] = {
    "If-None-Match", "If-Modified-Since", "If-Match", "If-Unmodified-Since", "If-Range", "Range",
};

/*
 * The backend request head in workspace (*head), also kept as
 * req->bereq for the backend hooks.  0; -1 when the workspace ran out;
 * -2 when the backend_fetch hook abandoned it or failed (answer 503).
 */
static int
build_bereq(struct req *req, struct be *be, bool miss, const struct cobj *stale, struct txt *head)
{
    struct http *hp = req->http;
    struct http_hdr *hdrs;
    struct http *bq = ws_alloc(&req->wrk->ws, sizeof *bq);
    unsigned nhdr = hp->nhdr + 10 + (pol_active() ? POL_HDR_ROOM : 0);
    struct sb sb;
    char *buf, *xff;
    size_t room, xfflen = 0, n;

    hdrs = ws_alloc(&req->wrk->ws, nhdr * sizeof *hdrs);
    if (hdrs == NULL || bq == NULL)
        return (-1);
    http_init(bq, hdrs, nhdr);
    bq->method = hp->method;
    /* A miss fetches the body even for HEAD: it is what the cache stores. */
    if (miss && req->head_only)
        bq->method = TXT_LIT("GET");
    bq->url = hp->url;
    bq->proto = 11;
    memcpy(hdrs, hp->hdr, hp->nhdr * sizeof *hdrs);
    bq->nhdr = hp->nhdr;
    http_strip_hop_by_hop(bq);
    for (size_t i = 0; miss && i < ARRAY_LEN(miss_strip); i++)
        http_unset(bq, miss_strip[i]);
    if (miss && par.http_gzip_support) {
        /*
         * The object serves every client, so it is fetched in the one
         * coding we can undo for any of them (fetch_gz.c).
         */
        http_unset(bq, "Accept-Encoding");
        AZ(http_add(bq, TXT_LIT("Accept-Encoding"), TXT_LIT("gzip")));
    }
    if (stale != NULL) {
        /* Revalidation (RFC 9111 section 4.3.1): ask whether our stale copy still holds. */
        struct txt v;
        if (hsh_head_field(stale, "ETag", &v))
            AZ(http_add(bq, TXT_LIT("If-None-Match"), v));
        if (hsh_head_field(stale, "Last-Modified", &v))
            AZ(http_add(bq, TXT_LIT("If-Modified-Since"), v));
    }
    if (par.xff && req->sp != NULL) {
        /* One X-Forwarded-For with the client appended to what earlier proxies said. */
        for (unsigned i = 0; i < bq->nhdr; i++)
            if (http_name_eq(&bq->hdr[i].name, "X-Forwarded-For"))
                xfflen += bq->hdr[i].val.len + 2;
        xfflen += strlen(req->sp->client_ip) + 1;
        xff = ws_alloc(&req->wrk->ws, xfflen);
        if (xff == NULL)
            return (-1);
        n = 0;
        for (unsigned i = 0; i < bq->nhdr; i++) {
            if (!http_name_eq(&bq->hdr[i].name, "X-Forwarded-For"))
                continue;
            memcpy(xff + n, bq->hdr[i].val.b, bq->hdr[i].val.len);
            n += bq->hdr[i].val.len;
            memcpy(xff + n, ", ", 2);
            n += 2;
        }
        memcpy(xff + n, req->sp->client_ip, strlen(req->sp->client_ip));
        n += strlen(req->sp->client_ip);
        http_unset(bq, "X-Forwarded-For");
        http_unset(bq, "X-Forwarded-Proto");
        AZ(http_add(bq, TXT_LIT("X-Forwarded-For"), (struct txt){ xff, n }));
        AZ(http_add(bq, TXT_LIT("X-Forwarded-Proto"),
                    sess_is_tls(req->sp) ? TXT_LIT("https") : TXT_LIT("http")));
    }
    if (par.via)
        AZ(http_add(bq, TXT_LIT("Via"),
                    hp->proto == 10 ? TXT_LIT("1.0 surogat") : TXT_LIT("1.1 surogat")));
    if (http_find(bq, "Host") == NULL)
        AZ(http_add(bq, TXT_LIT("Host"), (struct txt){ be->hostport, strlen(be->hostport) }));
    /* The framing we send is ours, stated once, whatever the client wrote. */
    http_unset(bq, "Content-Length");
    if (req->body == H1_BODY_CHUNKED) {
        AZ(http_add(bq, TXT_LIT("Transfer-Encoding"), TXT_LIT("chunked")));
    } else if (req->body == H1_BODY_LENGTH) {
        char *cl = ws_alloc(&req->wrk->ws, 24);
        if (cl == NULL)
            return (-1);
        AZ(http_add(bq, TXT_LIT("Content-Length"),
                    (struct txt){ cl, (size_t)snprintf(cl, 24, "%llu",
                                                       (unsigned long long)req->clen) }));
    }
    req->bereq = bq;
    if (pol_active() && pol_backend_fetch(req, bq) != POL_FETCH)
        return (-2);
    buf = ws_reserve_all(&req->wrk->ws, &room);
    sb_init(&sb, buf, room);
    h1_write_request(&sb, bq);
    if (!sb_ok(&sb)) {
        ws_release(&req->wrk->ws, 0);
        return (-1);
    }
    ws_release(&req->wrk->ws, sb.len + 1);
    *head = (struct txt){ buf, sb.len };
    return (0);
}

/*
 * Send the head and stream the request body.  0 sent; -1 the backend
 * failed (retryable when nothing of the body was consumed); -2 the
 * client failed while we read its body.
 */
static int
send_bereq(struct fetch *f, struct txt head)
{
    struct req *req = f->req;
    double tmo = be_between_bytes_timeout(f->be);
    char chdr[H1_CHUNK_HDR_MAX];
    struct iovec iov[4];
    const char *data;
    ssize_t n;

    iov[0].iov_base = (void *)(uintptr_t)head.b;
    iov[0].iov_len = head.len;
    if (req->body == H1_BODY_NONE)
        return (bcp_writev(f->conn, iov, 1, tim_mono() + tmo) == 0 ? 0 : -1);
    /* First body piece with the head, so small uploads take one write. */
    n = req_body_next(req, &data);
    for (int first = 1;; first = 0) {
        int k = first ? 1 : 0;
        if (n < 0)
            return (-2);
        if (req->body == H1_BODY_CHUNKED) {
            size_t hl = h1_chunk_header(chdr, (uint64_t)n);
            if (n == 0) {
                iov[k].iov_base = (void *)(uintptr_t) "0\r\n\r\n";
                iov[k++].iov_len = 5;
            } else {
                iov[k].iov_base = chdr;
                iov[k++].iov_len = hl;
                iov[k].iov_base = (void *)(uintptr_t)data;
                iov[k++].iov_len = (size_t)n;
                iov[k].iov_base = (void *)(uintptr_t) "\r\n";
                iov[k++].iov_len = 2;
            }
        } else if (n > 0) {
            iov[k].iov_base = (void *)(uintptr_t)data;
            iov[k++].iov_len = (size_t)n;
        }
        if (k > 0 && bcp_writev(f->conn, iov, k, tim_mono() + tmo) != 0)
            return (-1);
        if (n == 0)
            return (0);
        n = req_body_next(req, &data);
    }
}

/* ---- the backend response ---- */

/* Count and log a refused response, or a connection out of step, with the request concerned. */
static void
refused(const struct fetch *f, enum bcp_refuse why)
{
    const struct http *hp = f->req->http;
    char what[300];

    snprintf(what, sizeof what, "%.*s %.*s", (int)hp->method.len, hp->method.b,
             (int)(hp->url.len > 256 ? 256 : hp->url.len), hp->url.b);
    bcp_refused(f->be->pool, why, what);
    TRACE(f->trace, FETCH_ERROR, "refused: %s", bcp_refuse_text(why));
}

/*
 * Interim responses (1xx) skipped before the final one, at most.  A
 * backend sends one 100 Continue and perhaps a few 103 Early Hints; one
 * that keeps sending them must not hold the fetch forever, each read
 * looking like progress.
 */
#define FETCH_INTERIM_MAX 16

/*
 * The final response head into wrk->be, interim ones skipped.  The first
 * byte deadline covers the whole interim sequence: every interim response
 * must be complete, and the final one must have begun, within
 * backend_first_byte_timeout of the request; a head once begun may pause
 * up to backend_between_bytes_timeout.  BEH_BAD sets f->why.
 */
static enum be_head
read_beresp_head(struct fetch *f)
{
    struct wrk *wrk = f->req->wrk;
    struct h1_limits lim = {
        .max_head = par.http_resp_size,
        .max_line = par.http_resp_size,
        .max_hdr = par.http_max_hdr,
    };
    double first = tim_mono() + be_first_byte_timeout(f->be), deadline = first;
    size_t used, room = par.http_resp_size + 1;
    unsigned ninterim = 0;
    enum h1_status st;
    ssize_t n;

    if (room > wrk->be_size)
        room = wrk->be_size;
    f->be_len = 0;
    for (;;) {
        if (f->be_len > 0) {
            st = h1_parse_response(wrk->be, f->be_len, &lim, f->resp, &used);
            if (st == H1_DONE && f->resp->status >= 100 && f->resp->status < 200 &&
                f->resp->status != 101) {
                /* Interim responses (100, 103) are for the backend's peer: skip them. */
                if (++ninterim > FETCH_INTERIM_MAX) {
                    f->why = BCP_R_INTERIM;
                    return (BEH_BAD);
                }
                if (tim_mono() > first)
                    return (BEH_TIMEOUT);
                memmove(wrk->be, wrk->be + used, f->be_len - used);
                f->be_len -= used;
                /* Not a new first byte: what comes next is still bound by the first deadline. */
                deadline = f->be_len > 0 ? tim_mono() + be_between_bytes_timeout(f->be) : first;
                continue;
            }
            if (st == H1_DONE) {
                f->be_pos = used;
                if (f->resp->status != 101)
                    return (BEH_OK);
                f->why = BCP_R_UPGRADE;
                return (BEH_BAD);
            }
            switch (st) {
            case H1_MORE:
                break;
            case H1_E_SYNTAX:
                f->why = BCP_R_HEAD_SYNTAX;
                return (BEH_BAD);
            case H1_E_VERSION:
                f->why = BCP_R_VERSION;
                return (BEH_BAD);
            case H1_E_URI_TOO_LONG:
            case H1_E_TOO_BIG:
                f->why = BCP_R_HEAD_TOO_BIG;
                return (BEH_BAD);
            case H1_DONE:
                SRG_WRONG("handled above");
            }
        }
        if (f->be_len >= room) {
            f->why = BCP_R_HEAD_TOO_BIG;
            return (BEH_BAD);
        }
        n = bcp_read_wait(f->conn, wrk->be + f->be_len, room - f->be_len, deadline);
        if (n > 0) {
            if (f->be_len == 0)
                deadline = tim_mono() + be_between_bytes_timeout(f->be);
            f->be_len += (size_t)n;
            continue;
        }
        if (n < 0 && errno == ETIMEDOUT)
            return (BEH_TIMEOUT);
        /* EOF or reset before a single byte on a reused connection: it was stale. */
        if (f->be_len == 0 && ninterim == 0 && f->conn->reused)
            return (BEH_RETRY);
        f->why = BCP_R_CLOSED;
        return (BEH_BAD);
    }
}

/*
 * Late bytes.  Whatever a backend writes past a response would be read as
 * the answer to the next request on that connection: another URL's,
 * cached under it.  What closes that:
 *   - bytes in the same read as the end of the response: the connection
 *     is not reused (read_body(), BCP_R_TRAILING_BYTES);
 *   - bytes waiting when a pooled connection is taken, just before the
 *     request is written: it is closed and the request goes on another,
 *     whatever its method, as nothing was sent (bcp_get(), BCP_R_LATE_BYTES);
 *   - a response after which more may come by design is never followed
 *     by another on its connection: a body read until close, and a HEAD,
 *     204 or 304 whose head announced a body (below).
 * What stays open: a backend that ends a response exactly where it said
 * and writes more later, arriving after that check, looks exactly like
 * its answer to our next request.  How soon an answer arrives proves
 * nothing (a fast backend answers at once), so nothing here guesses.
 *
 * Whether the connection may carry another request once this response
 * is read, as far as its head tells: the backend keeps it open, and no
 * body the head announced may still come (h1_framing.unread); the price
 * is one new connection after such a response.  read_body() adds what
 * the body tells.
 */
static bool
be_keepalive(const struct fetch *f)
{
    bool ka = f->resp->proto == 11 ? !http_has_token(f->resp, "Connection", "close")
                                   : http_has_token(f->resp, "Connection", "keep-alive");

    if (ka && f->frame.unread) {
        STAT_INC(backend_close_unread);
        return (false);
    }
    return (ka);
}

static enum bcp_refuse
frame_refusal(enum h1_frame_err e)
{
    switch (e) {
    case H1_FE_CL_TE:
        return (BCP_R_CL_TE);
    case H1_FE_BAD_CL:
        return (BCP_R_BAD_CL);
    case H1_FE_TE_HTTP10:
        return (BCP_R_TE_HTTP10);
    case H1_FE_BAD_TE:
        return (BCP_R_BAD_TE);
    case H1_FE_CODING:
        return (BCP_R_CODING);
    case H1_FE_CODINGS:
        return (BCP_R_CODINGS);
    case H1_FE_NONE:
        break;
    }
    SRG_WRONG("a refused framing without a reason");
}

/*
 * Build the client response head from the backend's.  -1 on workspace
 * overflow; -2 when the policy's deliver hook answers *syn instead, -3
 * when it restarts the request.
 */
static int
build_resp_head(struct fetch *f, struct out *o, struct pol_synth *syn)
{
    struct req *req = f->req;
    struct http *be = f->resp;
    struct http resp;
    struct http_hdr *hdrs;
    char *date, *buf;
    struct sb sb;
    size_t room;

    unsigned room_hdr = be->nhdr + 10 + (pol_active() ? POL_HDR_ROOM : 0);

    hdrs = ws_alloc(&req->wrk->ws, room_hdr * sizeof *hdrs);
    if (hdrs == NULL)
        return (-1);
    http_init(&resp, hdrs, room_hdr);
    memcpy(hdrs, be->hdr, be->nhdr * sizeof *hdrs);
    resp.nhdr = be->nhdr;
    resp.proto = 11;
    resp.status = be->status;
    resp.reason = be->reason.len > 0 ? be->reason : (struct txt){ http_reason(be->status),
                                                                   strlen(http_reason(be->status)) };
    if (f->status_override != 0) {
        resp.status = f->status_override;
        resp.reason = (struct txt){ http_reason(resp.status), strlen(http_reason(resp.status)) };
    }
    http_strip_hop_by_hop(&resp);
    /* Surrogate-Control is consumed here; CDN-Cache-Control goes on to other CDN layers. */
    http_unset(&resp, "Surrogate-Control");
    if (http_find(&resp, "Date") == NULL) {
        date = ws_alloc(&req->wrk->ws, TIM_HTTP_DATE_LEN + 1);
        if (date == NULL)
            return (-1);
        tim_http_date(tim_real(), date);
        AZ(http_add(&resp, TXT_LIT("Date"), (struct txt){ date, TIM_HTTP_DATE_LEN }));
    }
    if (par.via)
        AZ(http_add(&resp, TXT_LIT("Via"),
                    be->proto == 10 ? TXT_LIT("1.0 surogat") : TXT_LIT("1.1 surogat")));
    if (f->gz_want != FGZ_NONE && gz_head(&resp, &req->wrk->ws,
                                          !f->gz_client                ? GZ_HEAD_VARY
                                          : f->gz_want == FGZ_COMPRESS ? GZ_HEAD_ENCODED
                                                                       : GZ_HEAD_DECODED) != 0)
        return (-1);
    f->chunk_out = false;
    if (f->body == H1_BODY_LENGTH && !f->gz_client) {
        char *cl = ws_alloc(&req->wrk->ws, 24), *cr = ws_alloc(&req->wrk->ws, 72);
        uint64_t n = f->range == 1 ? f->r_last - f->r_first + 1 : f->range == 2 ? 0 : f->clen;
        if (cl == NULL || cr == NULL)
            return (-1);
        http_unset(&resp, "Content-Length");
        AZ(http_add(&resp, TXT_LIT("Content-Length"),
                    (struct txt){ cl, (size_t)snprintf(cl, 24, "%llu", (unsigned long long)n) }));
        if (f->range == 1)
            AZ(http_add(&resp, TXT_LIT("Content-Range"),
                        (struct txt){ cr, (size_t)snprintf(cr, 72, "bytes %llu-%llu/%llu",
                                                           (unsigned long long)f->r_first,
                                                           (unsigned long long)f->r_last,
                                                           (unsigned long long)f->clen) }));
        else if (f->range == 2)
            AZ(http_add(&resp, TXT_LIT("Content-Range"),
                        (struct txt){ cr, (size_t)snprintf(cr, 72, "bytes */%llu",
                                                           (unsigned long long)f->clen) }));
    }
    /* A body the filter makes has no length until it ends. */
    if ((f->body == H1_BODY_CHUNKED || f->body == H1_BODY_EOF || f->gz_client) &&
        f->status_override == 0) {
        if (req->http->proto == 11) {
            f->chunk_out = true;
            AZ(http_add(&resp, TXT_LIT("Transfer-Encoding"), TXT_LIT("chunked")));
        } else {
            req->close = true; /* an HTTP/1.0 client learns the end from the close */
        }
    }
    if (par.x_cache)
        AZ(http_add(&resp, TXT_LIT("X-Cache"),
                    req->outcome == REQ_O_MISS ? TXT_LIT("MISS") : TXT_LIT("PASS")));
    if (par.cache_status) {
        /*
         * RFC 9211: why we went forward, what came back if the client gets
         * another status, and why a pass passed or a miss was not stored
         * (detail=: req->cs_detail, f->store_why).
         */
        const char *fwd = req->outcome != REQ_O_MISS
                              ? (req->cs_fwd != NULL ? req->cs_fwd : "bypass")
                          : f->stale.fwd != NULL ? f->stale.fwd
                                                 : "miss";
        const char *detail = req->outcome != REQ_O_MISS ? req->cs_detail
                             : f->oc == NULL && f->store_why != FRESH_STORE
                                 ? fresh_store_name(f->store_why)
                                 : NULL;
        char *cs = ws_alloc(&req->wrk->ws, 128);
        int n;
        if (cs == NULL)
            return (-1);
        n = snprintf(cs, 128, "surogat; fwd=%s", fwd);
        if (resp.status != be->status)
            n += snprintf(cs + n, (size_t)(128 - n), "; fwd-status=%u", be->status);
        if (f->oc != NULL)
            n += snprintf(cs + n, (size_t)(128 - n), "; stored");
        else if (detail != NULL)
            n += snprintf(cs + n, (size_t)(128 - n), "; detail=%s", detail);
        AZ(http_add(&resp, TXT_LIT("Cache-Status"), (struct txt){ cs, (size_t)n }));
    }
    if (req->close || req->want_close || sess_draining())
        AZ(http_add(&resp, TXT_LIT("Connection"), TXT_LIT("close")));
    else if (req->keepalive_10)
        AZ(http_add(&resp, TXT_LIT("Connection"), TXT_LIT("keep-alive")));
    if (pol_active() && pol_has_deliver()) {
        switch (pol_deliver(req, &resp, 0, syn)) {
        case POL_DELIVER:
            break;
        case POL_SYNTH:
            return (-2);
        case POL_RESTART:
            return (-3);
        default:
            syn->status = 503;
            snprintf(syn->reason, sizeof syn->reason, "%s", "policy error");
            return (-2);
        }
    }
    TRACE_HTTP(req->trace, RESP, &resp);
    buf = ws_reserve_all(&req->wrk->ws, &room);
    sb_init(&sb, buf, room);
    h1_write_response(&sb, &resp);
    if (!sb_ok(&sb)) {
        ws_release(&req->wrk->ws, 0);
        return (-1);
    }
    ws_release(&req->wrk->ws, sb.len + 1);
    req->status = resp.status;
    STAT_ADD(resp_head_bytes, sb.len);
    return (out_add(f, o, buf, sb.len) == 0 ? 0 : -1);
}

/* gz_out_f: body bytes, transfer coding undone, sent at once (the decoder reuses its buffer). */
static int
te_out(void *priv, const char *p, size_t len)
{
    struct gz_client *c = priv;
    int rv = out_body(c->f, c->o, p, len);

    if (rv == 0 && out_flush(c->f, c->o) != 0)
        rv = -2;
    return (rv);
}

/*
 * What a decoding filter's failure means for the fetch: -1 for a body
 * refused (logged here with its reason, but a gzip bomb fetch_gz.c
 * logged already), -2 for a client that failed, 0 for none.
 */
static int
body_failed(const struct fetch *f, int rv)
{
    switch (rv) {
    case 0:
    case -2:
        return (rv);
    case -1:
        refused(f, BCP_R_BAD_GZIP);
        return (-1);
    case FETCH_GZ_BOMB:
        return (-1);
    case FETCH_TE_CORRUPT:
        refused(f, BCP_R_BAD_TCODING);
        return (-1);
    case FETCH_TE_BOMB:
        refused(f, BCP_R_TCODING_BOMB);
        return (-1);
    default:
        SRG_WRONG("a body filter's result");
    }
}

/* Body bytes off the wire, their framing removed: through the transfer decoder if any. */
static int
body_in(struct fetch *f, struct out *o, const char *p, size_t len)
{
    struct gz_client c = { f, o };

    if (f->te != NULL)
        return (body_failed(f, fetch__te_feed(f->te, p, len, te_out, &c)));
    return (body_failed(f, out_body(f, o, p, len)));
}

/*
 * Stream the body.  0 complete; -1 the backend failed (the client must be
 * aborted); -2 the client failed.
 */
static int
read_body(struct fetch *f, struct out *o)
{
    struct req *req = f->req;
    struct wrk *wrk = req->wrk;
    double tmo = be_between_bytes_timeout(f->be);
    uint64_t left = f->clen;
    struct h1_chunk ck;
    enum h1_chunk_status cs;
    struct gz_client gzc = { f, o };
    const char *data;
    size_t used, len;
    ssize_t n;
    int rv;
    bool done = false;

    if (f->body == H1_BODY_NONE) {
        fetch__store_done(f);
        goto end;
    }
    if (f->body == H1_BODY_CHUNKED)
        h1_chunk_init(&ck, par.http_chunk_ext_max);
    while (!done) {
        /* Consume what is buffered from be_pos to be_len. */
        switch (f->body) {
        case H1_BODY_LENGTH:
            len = f->be_len - f->be_pos;
            if (len > left)
                len = (size_t)left;
            if ((rv = body_in(f, o, wrk->be + f->be_pos, len)) != 0)
                return (rv);
            f->be_pos += len;
            left -= len;
            done = left == 0;
            break;
        case H1_BODY_CHUNKED:
            while (f->be_pos < f->be_len && !done) {
                cs = h1_chunk_decode(&ck, wrk->be + f->be_pos, f->be_len - f->be_pos, &used,
                                     &data, &len);
                f->be_pos += used;
                if (cs == H1_CHUNK_ERROR) {
                    refused(f, BCP_R_BAD_CHUNK);
                    return (-1);
                }
                if (cs == H1_CHUNK_DATA && (rv = body_in(f, o, data, len)) != 0)
                    return (rv);
                done = cs == H1_CHUNK_DONE;
            }
            break;
        case H1_BODY_EOF:
            if ((rv = body_in(f, o, wrk->be + f->be_pos, f->be_len - f->be_pos)) != 0)
                return (rv);
            f->be_pos = f->be_len;
            break;
        default:
            SRG_WRONG("response body framing");
        }
        if (done)
            break;
        /*
         * Compressed bytes held back would keep the client and the
         * requests streaming from the object waiting for this batch.
         */
        if (f->gz != NULL && (rv = fetch__gz_body(f, NULL, 0, true, gz_client_out, &gzc)) != 0)
            return (body_failed(f, rv));
        /* Everything buffered is queued for the client: send it before reusing the buffer. */
        if (out_flush(f, o) != 0)
            return (-2);
        if (f->client_failed && f->oc == NULL)
            return (-2); /* nobody wants the rest any more */
        f->be_pos = f->be_len = 0;
        n = bcp_read(f->conn, wrk->be, wrk->be_size, tim_mono() + tmo);
        if (n > 0) {
            f->be_len = (size_t)n;
            continue;
        }
        if (n == 0 && f->body == H1_BODY_EOF) {
            f->be_keepalive = false;
            break;
        }
        refused(f, n < 0 && errno == ETIMEDOUT ? BCP_R_BODY_TIMEOUT : BCP_R_BODY_CLOSED);
        return (-1);
    }
    /* A corrupt or truncated transfer coding or gzip body must fail before the object is out. */
    if (f->te != NULL && (rv = fetch__te_end(f->te, te_out, &gzc)) != 0)
        return (body_failed(f, rv));
    if (f->gz != NULL && (rv = fetch__gz_end(f, gz_client_out, &gzc)) != 0)
        return (body_failed(f, rv));
    fetch__store_done(f);
    if (f->chunk_out && f->body_to_client && out_add(f, o, "0\r\n\r\n", 5) != 0)
        return (-2);
end:
    /*
     * Bytes past the end of the response (its body, or the head of a
     * bodiless one): the backend is out of step, and whatever else it
     * still writes would answer the next request.
     */
    if (f->be_pos != f->be_len && f->be_keepalive) {
        refused(f, BCP_R_TRAILING_BYTES);
        f->be_keepalive = false;
    }
    return (out_flush(f, o) == 0 ? 0 : -2);
}

/* The body, through a transfer decoder when the response has codings under its framing. */
static int
deliver_body(struct fetch *f, struct out *o)
{
    int rv;

    if (f->frame.ncoding > 0 && f->body != H1_BODY_NONE)
        f->te = fetch__te_new(&f->frame);
    rv = read_body(f, o);
    fetch__te_free(&f->te);
    return (rv);
}

static bool
can_retry(const struct req *req, unsigned retries)
{
    return (retries < par.backend_max_retries && req->body == H1_BODY_NONE &&
            http_method_idempotent(&req->http->method));
}

/* Whether the stale copy may stand in for a failed backend (RFC 5861 section 4). */
static bool
stale_usable(const struct fetch *f)
{
    return (f->stale.oc != NULL && (f->stale.verdict == FRESH_V_STALE_IF_ERROR ||
                                    f->stale.verdict == FRESH_V_STALE_WHILE_REVALIDATE));
}

static void
serve_stale(struct fetch *f, unsigned status)
{
    char fwd[48];

    STAT_INC(cache_stale_if_error);
    snprintf(fwd, sizeof fwd, "fwd=stale; fwd-status=%u", status);
    dlv_obj(f->req, f->stale.oc, tim_real(), fwd);
    f->req->outcome = REQ_O_STALE;
}

/*
 * Whether a hook's "retry" may fetch again: within max_retries, and with
 * no request body (it was consumed by the attempt that failed).
 */
static bool
retry_allowed(const struct fetch *f)
{
    const struct req *req = f->req;

    if (req->body != H1_BODY_NONE) {
        log_msg(LOG_WARNING, "policy: \"retry\" of a request with a body: its body is gone, "
                             "the fetch fails");
        return (false);
    }
    if (req->retries >= par.max_retries) {
        log_msg(LOG_WARNING, "policy: \"retry\" past max_retries (%u): the fetch fails",
                par.max_retries);
        return (false);
    }
    return (true);
}

/*
 * The backend_error hook on a failed fetch with nothing sent yet: a
 * synthetic beresp the script may edit and deliver.  POL_RETRY (allowed),
 * POL_DELIVER (sent), or anything else: the plain error follows.
 */
static enum pol_act
backend_error(struct fetch *f, unsigned status)
{
    struct req *req = f->req;
    struct http_hdr *hdrs = ws_alloc(&req->wrk->ws, (POL_HDR_ROOM + 2) * sizeof *hdrs);
    struct http beresp;
    struct txt body = TXT_LIT("");
    enum pol_act act;

    if (hdrs == NULL) {
        STAT_INC(ws_overflow);
        return (POL_ERROR);
    }
    http_init(&beresp, hdrs, POL_HDR_ROOM + 2);
    beresp.proto = 11;
    beresp.status = status;
    beresp.reason = (struct txt){ http_reason(status), strlen(http_reason(status)) };
    act = pol_backend_error(req, &beresp, &body);
    if (act == POL_RETRY)
        return (retry_allowed(f) ? POL_RETRY : POL_ABANDON);
    if (act != POL_DELIVER)
        return (act);
    if (dlv_send(req, &beresp, body) != 0)
        req->close = true;
    req->outcome = req->outcome == REQ_O_MISS ? REQ_O_MISS : REQ_O_PASS;
    return (POL_DELIVER);
}

/* Give up without the policy: the stale copy if allowed, else the status. */
static void
fail_plain(struct fetch *f, unsigned status)
{
    fetch__gz_free(f);
    if (f->oc != NULL)
        hsh_abandon(&f->oc, 0); /* waiters retry: one of them fetches again */
    if (f->conn != NULL)
        bcp_close(&f->conn);
    if (f->bg) {
        /* Nobody to answer: the stale copy stays, and a later request tries again. */
        STAT_INC(cache_bgfetch_failed);
        return;
    }
    if (status >= 500 && stale_usable(f)) {
        serve_stale(f, status);
        return;
    }
    (void)dlv_error(f->req, status, NULL, NULL);
}

/*
 * The fetch failed before anything reached the client.  true: fetch again
 * (backend_error said "retry"; the busy object is kept for it).
 */
static bool
fail(struct fetch *f, unsigned status)
{
    fetch__gz_free(f);
    if (f->conn != NULL)
        bcp_close(&f->conn);
    if (!f->bg && f->req->t_first == 0 && !(status >= 500 && stale_usable(f)) && pol_active() &&
        pol_has_backend_error()) {
        switch (backend_error(f, status)) {
        case POL_RETRY:
            return (true);
        case POL_DELIVER:
            if (f->oc != NULL)
                hsh_abandon(&f->oc, 0);
            return (false);
        default:
            break;
        }
    }
    fail_plain(f, status);
    return (false);
}

/* The workspace ran out: a 500, and the connection closes (what was cut is unknown). */
static void
fail_overflow(struct fetch *f)
{
    STAT_INC(ws_overflow);
    STAT_INC(client_resp_500);
    f->req->close = true;
    fail_plain(f, 500);
}

/*
 * The answer to a miss is the whole object, fetched for the cache: cut it
 * to the client's Range here (RFC 9110 section 14), judged against the
 * fetched response's validators for If-Range.  Only with a known length;
 * a chunked body gets the whole 200, always a valid answer.
 */
static void
miss_range(struct fetch *f)
{
    enum http_range r;

    /* A body the filter makes has no known length: a 200 with all of it. */
    if (f->status_override != 0 || f->resp->status != 200 || f->body != H1_BODY_LENGTH ||
        f->gz_client)
        return;
    r = http_range(f->req->http, http_value(f->resp, "ETag"), http_value(f->resp, "Last-Modified"),
                   f->clen, &f->r_first, &f->r_last);
    if (r == HTTP_RANGE_OK) {
        f->range = 1;
        f->status_override = 206;
    } else if (r == HTTP_RANGE_UNSATISFIABLE) {
        f->range = 2;
        f->status_override = 416;
        f->body_to_client = false;
    }
}

/* backend_response on a pass: header edits only, nothing is stored.  -1: 503; -2: retry. */
static int
policy_pass(struct fetch *f)
{
    struct pol_beresp br = { .resp = f->resp, .uncacheable = true, .keep = -1,
                             .do_gzip = -1, .do_gunzip = -1, .do_stream = -1 };
    enum pol_act act = pol_backend_response(f->req, &br);

    f->pol_gzip = br.do_gzip;
    f->pol_gunzip = br.do_gunzip;
    switch (act) {
    case POL_DELIVER:
    case POL_PASS:
        return (0);
    case POL_RETRY:
        return (retry_allowed(f) ? -2 : -1);
    default:
        return (-1);
    }
}

/* What one attempt at the backend transaction ended with. */
enum attempt {
    ATTEMPT_DONE,  /* answered (or nobody to answer) */
    ATTEMPT_RETRY, /* a hook said "retry": once more, with the same busy object */
    ATTEMPT_HEAD,  /* exchange(): the response head is in, go on */
    ATTEMPT_FAILOVER, /* connecting failed: try f->next_be */
};

/*
 * Whether connecting to f->be failed in a way another backend of the
 * request's director can take over: an idempotent request without a
 * body, nothing sent yet.  Sets f->next_be.
 */
static bool
failover(struct fetch *f)
{
    struct req *req = f->req;
    struct be *skip[FETCH_TRIED_MAX + 1];

    if (req->dir == NULL || req->body != H1_BODY_NONE ||
        !http_method_idempotent(&req->http->method) || f->ntried >= FETCH_TRIED_MAX ||
        f->ntried >= par.max_retries)
        return (false);
    memcpy(skip, f->tried, f->ntried * sizeof *skip);
    skip[f->ntried] = f->be;
    f->next_be = dir_pick(req->dir, &(struct dir_ctx){ .req = req->http, .skip = skip,
                                                       .nskip = f->ntried + 1,
                                                       .key = req->lookup_key,
                                                       .keylen = req->lookup_keylen });
    return (f->next_be != NULL);
}

/* Connect, send, and read the response head, retrying dead reused connections. */
static enum attempt
exchange(struct fetch *f, struct txt head)
{
    struct req *req = f->req;
    struct be *be = f->be;
    unsigned retries = 0;
    int rv;

    for (;;) {
        switch (be_conn_get(be, req->sp, retries > 0, &f->conn)) {
        case BCP_OK:
            break;
        case BCP_E_BUSY:
            STAT_INC(backend_busy);
            TRACE(f->trace, FETCH_ERROR, "%s busy: max_connections reached", be->name);
            if (failover(f))
                return (ATTEMPT_FAILOVER);
            return (fail(f, 503) ? ATTEMPT_RETRY : ATTEMPT_DONE);
        case BCP_E_CONNECT:
            STAT_INC(backend_fail);
            TRACE(f->trace, FETCH_ERROR, "%s: connect failed", be->name);
            if (failover(f))
                return (ATTEMPT_FAILOVER);
            return (fail(f, 503) ? ATTEMPT_RETRY : ATTEMPT_DONE);
        }
        if (f->conn->reused)
            STAT_INC(backend_reuse);
        STAT_INC(backend_req);
        TRACE(f->trace, BACKEND, "%s %s %s", be->name, be->hostport != NULL ? be->hostport : "-",
              f->conn->reused ? "reused" : "new");
        f->t_req = tim_real();
        rv = send_bereq(f, head);
        if (rv == -2) {
            req->close = true;
            if (f->oc != NULL)
                hsh_abandon(&f->oc, 0);
            bcp_close(&f->conn);
            if (req->body_bad) {
                STAT_INC(client_req_400);
                (void)dlv_error(req, 400, NULL, NULL);
            }
            return (ATTEMPT_DONE); /* otherwise the client is gone: nobody to answer */
        }
        if (rv == -1) {
            if (f->conn->reused && can_retry(req, retries)) {
                bcp_close(&f->conn);
                retries++;
                STAT_INC(backend_retry);
                continue;
            }
            STAT_INC(backend_fail);
            TRACE(f->trace, FETCH_ERROR, "%s: sending the request failed", be->name);
            if (req->body != H1_BODY_NONE)
                req->close = true;
            return (fail(f, 503) ? ATTEMPT_RETRY : ATTEMPT_DONE);
        }
        TRACE_TS(f->trace, "Bereq");
        http_init(f->resp, ws_alloc(&req->wrk->ws, par.http_max_hdr * sizeof(struct http_hdr)),
                  par.http_max_hdr);
        if (f->resp->hdr == NULL) {
            fail_overflow(f);
            return (ATTEMPT_DONE);
        }
        switch (read_beresp_head(f)) {
        case BEH_OK:
            return (ATTEMPT_HEAD);
        case BEH_RETRY:
            if (can_retry(req, retries)) {
                bcp_close(&f->conn);
                retries++;
                STAT_INC(backend_retry);
                continue;
            }
            refused(f, BCP_R_CLOSED);
            return (fail(f, 502) ? ATTEMPT_RETRY : ATTEMPT_DONE);
        case BEH_TIMEOUT:
            STAT_INC(backend_timeout);
            TRACE(f->trace, FETCH_ERROR, "%s: no response within the first byte timeout", be->name);
            return (fail(f, 504) ? ATTEMPT_RETRY : ATTEMPT_DONE);
        case BEH_BAD:
            refused(f, f->why);
            return (fail(f, 502) ? ATTEMPT_RETRY : ATTEMPT_DONE);
        }
    }
}
/*
 * beresp.do_stream = false on a miss: the body is stored first, with
 * nothing sent, and the client gets the complete object as a hit would
 * (conditions and ranges answered there).  Requests joining the fetch
 * stream from it as usual.
 */
static enum attempt
held_miss(struct fetch *f, struct out *o)
{
    struct req *req = f->req;
    struct cobj *held = f->oc;
    char fwd[64];
    int rv;

    hsh_ref(held);
    f->to_client = f->body_to_client = false;
    rv = deliver_body(f, o);
    TRACE_BODY(f->trace, rv, f->body_off);
    fetch__gz_free(f);
    if (f->oc != NULL)
        hsh_abandon(&f->oc, 0); /* not published: deliver_body() failed */
    if (rv == 0 && f->be_keepalive)
        bcp_recycle(&f->conn);
    else
        bcp_close(&f->conn);
    if (rv == 0 && held->body_complete) {
        snprintf(fwd, sizeof fwd, "fwd=%s; stored", f->stale.fwd != NULL ? f->stale.fwd : "miss");
        dlv_obj(req, held, tim_real(), fwd);
        req->outcome = REQ_O_MISS;
    } else {
        (void)dlv_error(req, 502, NULL, NULL);
    }
    hsh_deref(&held);
    return (ATTEMPT_DONE);
}

/*
 * One attempt at the backend transaction, for a pass (f->oc NULL) or a
 * miss filling the busy object f->oc.
 */
static enum attempt
attempt(struct fetch *f, struct out *o)
{
    struct req *req = f->req;
    struct pol_synth syn;
    struct txt head;
    enum attempt a;
    int rv;

    struct dir *dir = req->dir;

    switch (build_bereq(req, f->be, f->oc != NULL, f->stale.oc, &head)) {
    case 0:
        break;
    case -1:
        fail_overflow(f);
        return (ATTEMPT_DONE);
    default:
        fail_plain(f, 503); /* backend_fetch said "abandon", or failed */
        return (ATTEMPT_DONE);
    }
    if (req->dir != dir) {
        /* backend_fetch set bereq.backend: go there instead. */
        f->be = dir_pick(req->dir, &(struct dir_ctx){ .req = req->http, .key = req->lookup_key,
                                                      .keylen = req->lookup_keylen });
        if (f->be == NULL)
            return (fail(f, 503) ? ATTEMPT_RETRY : ATTEMPT_DONE);
        req->be_name = f->be->name;
    }
    TRACE_HTTP(f->trace, BEREQ, req->bereq);
    if ((a = exchange(f, head)) != ATTEMPT_HEAD)
        return (a);
    f->t_resp = tim_real();
    TRACE_HTTP(f->trace, BERESP, f->resp);
    /* The backend saw HEAD only on a pass: a miss asked it for GET. */
    f->body = h1_resp_body(f->resp, req->head_only && f->oc == NULL, &f->frame);
    f->clen = f->frame.clen;
    if (f->stale.oc != NULL && f->oc != NULL && f->resp->status == 304) {
        f->be_keepalive = be_keepalive(f);
        if (f->be_keepalive && f->be_pos != f->be_len)
            refused(f, BCP_R_TRAILING_BYTES);
        if (f->be_keepalive && f->be_pos == f->be_len)
            bcp_recycle(&f->conn);
        else
            bcp_close(&f->conn);
        if (fetch__revalidated(f) != 0)
            fail_plain(f, 502);
        return (ATTEMPT_DONE);
    }
    if (f->resp->status >= 500 && f->resp->status <= 504 && stale_usable(f)) {
        /* stale-if-error covers the backend's own 5xx too (RFC 5861 section 4). */
        fail_plain(f, f->resp->status);
        return (ATTEMPT_DONE);
    }
    if (f->body == H1_BODY_E_AMBIGUOUS || f->body == H1_BODY_E_CODING) {
        refused(f, frame_refusal(f->frame.err));
        return (fail(f, 502) ? ATTEMPT_RETRY : ATTEMPT_DONE);
    }
    f->be_keepalive = be_keepalive(f);
    if (f->oc == NULL)
        req_invalidate(req, f->resp);
    if (f->oc == NULL && pol_active() && (rv = policy_pass(f)) != 0) {
        bcp_close(&f->conn);
        if (rv == -2)
            return (ATTEMPT_RETRY);
        fail_plain(f, 503);
        return (ATTEMPT_DONE);
    }
    if (f->oc == NULL) {
        fetch__gz_plan(f);
        fetch__gz_begin(f);
    }
    if (f->oc != NULL) {
        if ((rv = fetch__decide_store(f)) != 0) {
            bcp_close(&f->conn);
            if (rv == -2 && retry_allowed(f))
                return (ATTEMPT_RETRY);
            fail_plain(f, 503);
            return (ATTEMPT_DONE);
        }
        fetch__gz_begin(f);
        /*
         * With a filter the stored length is not the backend's (compressed),
         * or not yet known to be good (a gzip body is checked only at its
         * end): waiters stream chunked and learn the end from the fetch, so
         * a body that fails its check is cut, never complete by its length.
         */
        if (f->oc != NULL)
            hsh_stream_open(f->oc, f->gz != NULL               ? UINT64_MAX
                                   : f->body == H1_BODY_LENGTH ? f->clen
                                   : f->body == H1_BODY_NONE   ? 0
                                                             : UINT64_MAX);
        /*
         * The backend was asked without the client's conditional fields
         * and Range, so that a full object could be stored; answer the
         * client's own condition and range here.
         */
        if (f->resp->status == 200 && http_not_modified(req->http, http_value(f->resp, "ETag"),
                                                        http_value(f->resp, "Last-Modified"))) {
            f->status_override = 304;
            f->body_to_client = false;
        }
        miss_range(f);
    }
    if (f->hold && f->oc != NULL && !f->bg)
        return (held_miss(f, o));
    if (!f->bg && (rv = build_resp_head(f, o, &syn)) != 0) {
        if (rv == -1) {
            fail_overflow(f);
            return (ATTEMPT_DONE);
        }
        fetch__gz_free(f);
        if (f->oc != NULL)
            hsh_abandon(&f->oc, 0);
        bcp_close(&f->conn);
        if (rv == -3)
            req->restart = true; /* the deliver hook said "restart" */
        else
            dlv_synth(req, syn.status, syn.reason);
        return (ATTEMPT_DONE);
    }
    rv = deliver_body(f, o);
    TRACE_BODY(f->trace, rv, f->body_off);
    fetch__gz_free(f);
    if (f->oc != NULL) {
        SRG_ASSERT(rv != 0); /* a complete body was published by deliver_body() */
        hsh_abandon(&f->oc, 0);
    }
    if (f->bg && rv != 0)
        STAT_INC(cache_bgfetch_failed);
    if (f->client_failed)
        req->close = true;
    if (rv == 0 && f->be_keepalive) {
        bcp_recycle(&f->conn);
        return (ATTEMPT_DONE);
    }
    bcp_close(&f->conn);
    if (f->bg)
        return (ATTEMPT_DONE);
    if (rv == -1 && req->t_first == 0) {
        /* Nothing reached the client yet: it can still get a clean 502. */
        req->resp_bytes = 0;
        (void)dlv_error(req, 502, NULL, NULL);
    } else if (rv == -1) {
        /* The head is out: only a cut connection tells the client the body is short. */
        STAT_INC(fetch_aborted);
        req->abort = true;
    } else if (rv == -2) {
        req->close = true;
    }
    return (ATTEMPT_DONE);
}

/*
 * The backend transaction, for a pass (oc NULL) or a miss filling the
 * busy object oc; bg: a background refresh, with nobody to answer.  A
 * hook's "retry" runs it again from the backend request on.
 */
static void
fetch_run(struct req *req, struct be *be, struct cobj *oc, struct hsh_stale *stale, bool bg)
{
    struct be *tried[FETCH_TRIED_MAX];
    unsigned ntried = 0;
    struct fetch f;
    struct out o;
    enum attempt a;

    OBJ_CHECK(req, REQ_MAGIC);
    for (;;) {
        memset(&f, 0, sizeof f);
        memset(&o, 0, sizeof o);
        f.req = req;
        f.be = be;
        f.pol_gzip = f.pol_gunzip = -1;
        f.tried = tried;
        f.ntried = ntried;
        f.oc = oc;
        f.bg = bg;
        if (stale != NULL)
            f.stale = *stale; /* borrowed: the caller holds the reference */
        f.to_client = !bg;
        f.body_to_client = !req->head_only && !bg;
        req->outcome = oc != NULL ? REQ_O_MISS : REQ_O_PASS;
        req->bereq_uncacheable = oc == NULL;
        if (be != NULL && be->sfb != NULL) {
            /* A hook routed a fetch to static files: they are served, not fetched. */
            if (f.oc != NULL)
                hsh_abandon(&f.oc, 0);
            if (!bg)
                dlv_static(req, be->sfb);
            return;
        }
        f.trace = trace_fetch(req->trace, oc == NULL ? "pass" : bg ? "bgfetch" : "fetch");
        if (be != NULL) {
            OBJ_CHECK(be, BE_MAGIC);
            req->be_name = be->name;
            a = attempt(&f, &o);
        } else {
            TRACE(f.trace, FETCH_ERROR, "no healthy backend");
            a = fail(&f, 503) ? ATTEMPT_RETRY : ATTEMPT_DONE;
        }
        oc = f.oc; /* still busy, for the next attempt */
        if (a == ATTEMPT_FAILOVER) {
            tried[ntried++] = be;
            be = f.next_be;
            STAT_INC(backend_failover);
            TRACE(f.trace, RETRY, "failover to %s", be->name);
            continue;
        }
        if (a != ATTEMPT_RETRY)
            return;
        req->retries++;
        STAT_INC(policy_retry);
        TRACE(f.trace, RETRY, "the policy said retry (%u)", req->retries);
    }
}

void
fetch_pass(struct req *req, struct be *be)
{
    STAT_INC(cache_pass);
    fetch_run(req, be, NULL, NULL, false);
}

void
fetch_miss(struct req *req, struct be *be, struct cobj **ocp, struct hsh_stale *stale)
{
    struct cobj *oc;

    OBJ_TAKE(oc, ocp, COBJ_MAGIC);
    fetch_run(req, be, oc, stale, false);
    if (stale->oc != NULL)
        hsh_deref(&stale->oc);
}

void
fetch__run_bg(struct req *req, struct be *be, struct cobj **ocp, struct hsh_stale *stale)
{
    struct cobj *oc;

    OBJ_TAKE(oc, ocp, COBJ_MAGIC);
    fetch_run(req, be, oc, stale, true);
}
