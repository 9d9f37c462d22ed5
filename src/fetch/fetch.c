/*
 * The backend transaction on a busy object: connect, send the request and
 * its body, read the response head, decide what becomes of it, then read
 * the body through its filters into the object and to the caller's sink.
 *
 * Runs on the worker of whoever fetches (a request, or a background
 * refresh).  The backend connection belongs to the busy object from
 * bcp_get() until it is recycled (the response was complete and the
 * backend keeps it) or closed.  Nothing here writes to a client.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "surogat/bcp.h"
#include "surogat/be.h"
#include "surogat/defs.h"
#include "surogat/dir.h"
#include "surogat/fetch.h"
#include "surogat/gz.h"
#include "surogat/h1.h"
#include "surogat/hsh.h"
#include "surogat/http.h"
#include "surogat/par.h"
#include "surogat/pol.h"
#include "surogat/sb.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/trace.h"
#include "surogat/ws.h"

#include "fetch_priv.h"

void
fetch_init(struct busyobj *bo)
{
    memset(bo, 0, sizeof *bo);
    bo->magic = BUSYOBJ_MAGIC;
    bo->pol_gzip = bo->pol_gunzip = bo->pol_esi = -1;
}

unsigned
fetch_result_status(enum fetch_result r)
{
    switch (r) {
    case FETCH_E_BUSY:
    case FETCH_E_CONNECT:
    case FETCH_E_SEND:
    case FETCH_E_POLICY:
        return (503);
    case FETCH_E_TIMEOUT:
        return (504);
    case FETCH_E_BAD:
        return (502);
    case FETCH_E_OVERFLOW:
        return (500);
    case FETCH_OK:
    case FETCH_REVALIDATED:
    case FETCH_E_5XX:
    case FETCH_E_CLIENT:
    case FETCH_RETRY:
    case FETCH_FAILOVER:
    case FETCH_UPGRADE:
    case FETCH_WAIT:
        break;
    }
    return (0);
}

/* ---- the backend request ---- */

/*
 * Send the head and stream the request body.  0 sent; -1 the backend
 * failed (retryable when nothing of the body was consumed); -2 the
 * client failed while we read its body.
 */
static int
send_bereq(struct busyobj *bo, struct txt head)
{
    double tmo = be_between_bytes_timeout(bo->be);
    char chdr[H1_CHUNK_HDR_MAX];
    struct iovec iov[4];
    const char *data;
    ssize_t n;

    iov[0].iov_base = (void *)(uintptr_t)head.b;
    iov[0].iov_len = head.len;
    if (bo->body == H1_BODY_NONE)
        return (bcp_writev(bo->conn, iov, 1, tim_mono() + tmo) == 0 ? 0 : -1);
    /* First body piece with the head, so small uploads take one write. */
    n = bo->body_next(bo->body_priv, &data);
    for (int first = 1;; first = 0) {
        int k = first ? 1 : 0;
        if (n < 0)
            return (-2);
        if (bo->body == H1_BODY_CHUNKED) {
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
        if (k > 0 && bcp_writev(bo->conn, iov, k, tim_mono() + tmo) != 0)
            return (-1);
        if (n == 0)
            return (0);
        n = bo->body_next(bo->body_priv, &data);
    }
}

/* ---- the backend response ---- */

void
fetch__refused(const struct busyobj *bo, enum bcp_refuse why)
{
    const struct http *hp = bo->creq;
    char what[300];

    snprintf(what, sizeof what, "%.*s %.*s", (int)hp->method.len, hp->method.b,
             (int)(hp->url.len > 256 ? 256 : hp->url.len), hp->url.b);
    bcp_refused(bo->be->pool, why, what);
    TRACE(bo->trace, FETCH_ERROR, "refused: %s", bcp_refuse_text(why));
}

/*
 * A 103 Early Hints to the client that asked (bo->interim), as it came:
 * its fields but the hop-by-hop and framing ones.  It is that client's
 * alone: nothing of it is stored.
 */
static void
forward_hints(struct busyobj *bo)
{
    struct http *hp = bo->beresp;
    struct sb sb;
    size_t room;
    char *buf;

    if (bo->interim == NULL)
        return;
    http_strip_hop_by_hop(hp);
    buf = ws_reserve_all(bo->ws, &room);
    sb_init(&sb, buf, room);
    http_write_fields(&sb, hp);
    if (sb_ok(&sb))
        (void)bo->interim(bo->interim_priv, 103, &(struct txt){ buf, sb.len });
    ws_release(bo->ws, 0);
}

enum be_head {
    BEH_OK,
    BEH_RETRY,   /* a reused connection was dead before any byte came back */
    BEH_TIMEOUT, /* 504 */
    BEH_BAD,     /* 502, bo->why says why */
};

/*
 * The final response head into the receive buffer, interim ones skipped
 * (103s forwarded): at most backend_max_interim of them, or one that
 * keeps sending them would hold the fetch forever, each read looking like
 * progress.  A 101 is final for an upgrade, refused otherwise.
 * The first byte deadline covers the whole interim sequence: every
 * interim response must be complete, and the final one must have begun,
 * within backend_first_byte_timeout of the request; a head once begun may
 * pause up to backend_between_bytes_timeout.  `ready`: the socket is
 * known readable (the fetch waited for it without its worker), so the
 * first read does not ask first.
 */
static enum be_head
read_beresp_head(struct busyobj *bo, bool ready)
{
    struct h1_limits lim = {
        .max_head = par.http_resp_size,
        .max_line = par.http_resp_size,
        .max_hdr = par.http_max_hdr,
    };
    double first = bo->first_deadline, deadline = first;
    size_t used, room = par.http_resp_size + 1;
    unsigned ninterim = 0;
    enum h1_status st;
    ssize_t n;

    if (room > bo->rxsize)
        room = bo->rxsize;
    bo->be_len = 0;
    for (;;) {
        if (bo->be_len > 0) {
            st = h1_parse_response(bo->rxbuf, bo->be_len, &lim, bo->beresp, &used);
            if (st == H1_DONE && bo->beresp->status >= 100 && bo->beresp->status < 200 &&
                bo->beresp->status != 101) {
                /* 100 Continue was ours to send; only 103s go on, to the client. */
                if (++ninterim > par.backend_max_interim) {
                    bo->why = BCP_R_INTERIM;
                    return (BEH_BAD);
                }
                if (tim_mono() > first) {
                    /* No read timed out, so the pool did not see it: the final answer is late. */
                    be_count(bo->be, STAT_BE_fail_first_byte_timeout);
                    return (BEH_TIMEOUT);
                }
                if (bo->beresp->status == 103)
                    forward_hints(bo);
                memmove(bo->rxbuf, bo->rxbuf + used, bo->be_len - used);
                bo->be_len -= used;
                if (bo->be_len == 0)
                    bcp_interim(bo->conn);
                /* Not a new first byte: what comes next is still bound by the first deadline. */
                deadline = bo->be_len > 0 ? tim_mono() + be_between_bytes_timeout(bo->be) : first;
                continue;
            }
            if (st == H1_DONE) {
                bo->be_pos = used;
                /* A switch must say to what (RFC 9110 section 15.2.2). */
                if (bo->beresp->status != 101 ||
                    (bo->upgrade && http_find(bo->beresp, "Upgrade") != NULL))
                    return (BEH_OK);
                /* A final answer all the same: its class counts it, refused or not. */
                be_count_status(bo->be, bo->beresp->status);
                bo->why = BCP_R_UPGRADE;
                return (BEH_BAD);
            }
            switch (st) {
            case H1_MORE:
                break;
            case H1_E_SYNTAX:
                bo->why = BCP_R_HEAD_SYNTAX;
                return (BEH_BAD);
            case H1_E_VERSION:
                bo->why = BCP_R_VERSION;
                return (BEH_BAD);
            case H1_E_URI_TOO_LONG:
            case H1_E_TOO_BIG:
                bo->why = BCP_R_HEAD_TOO_BIG;
                return (BEH_BAD);
            case H1_DONE:
                SRG_WRONG("handled above");
            }
        }
        if (bo->be_len >= room) {
            bo->why = BCP_R_HEAD_TOO_BIG;
            return (BEH_BAD);
        }
        if (ready)
            n = bcp_read(bo->conn, bo->rxbuf + bo->be_len, room - bo->be_len, deadline);
        else
            n = bcp_read_wait(bo->conn, bo->rxbuf + bo->be_len, room - bo->be_len, deadline);
        ready = false;
        if (n > 0) {
            if (bo->be_len == 0)
                deadline = tim_mono() + be_between_bytes_timeout(bo->be);
            bo->be_len += (size_t)n;
            continue;
        }
        if (n < 0 && errno == ETIMEDOUT)
            return (BEH_TIMEOUT);
        /* EOF or reset before a single byte on a reused connection: it was stale. */
        if (bo->be_len == 0 && ninterim == 0 && bo->conn->reused)
            return (BEH_RETRY);
        bo->why = BCP_R_CLOSED;
        return (BEH_BAD);
    }
}

/*
 * Late bytes.  Whatever a backend writes past a response would be read as
 * the answer to the next request on that connection: another URL's,
 * cached under it.  What closes that:
 *   - bytes in the same read as the end of the response: the connection
 *     is not reused (fetch_body(), BCP_R_TRAILING_BYTES);
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
 * is one new connection after such a response.  fetch_body() adds what
 * the body tells.
 */
static bool
be_keepalive(const struct busyobj *bo)
{
    bool ka = bo->beresp->proto == 11 ? !http_has_token(bo->beresp, "Connection", "close")
                                      : http_has_token(bo->beresp, "Connection", "keep-alive");

    if (ka && bo->frame.unread) {
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

static bool
can_retry(const struct busyobj *bo, unsigned retries)
{
    return (retries < par.backend_max_retries && bo->body == H1_BODY_NONE &&
            http_method_idempotent(&bo->creq->method));
}

/*
 * Whether connecting to bo->be failed in a way another backend of the
 * request's director can take over: an idempotent request without a
 * body, nothing sent yet.  Sets bo->next_be.
 */
static bool
failover(struct busyobj *bo)
{
    struct be *skip[FETCH_TRIED_MAX + 1];

    if (bo->dir == NULL || bo->body != H1_BODY_NONE ||
        !http_method_idempotent(&bo->creq->method) || bo->ntried >= FETCH_TRIED_MAX ||
        bo->ntried >= par.max_retries)
        return (false);
    memcpy(skip, bo->tried, bo->ntried * sizeof *skip);
    skip[bo->ntried] = bo->be;
    bo->next_be = dir_pick(bo->dir, &(struct dir_ctx){ .req = bo->creq, .skip = skip,
                                                       .nskip = bo->ntried + 1, .key = bo->key,
                                                       .keylen = bo->keylen });
    return (bo->next_be != NULL);
}

/*
 * Where an exchange starts: with a connection, or -- resumed after
 * FETCH_WAIT -- at the answer, readable or past its first byte deadline.
 */
enum exchange_from {
    X_CONNECT,
    X_READABLE,
    X_EXPIRED,
};

/*
 * Connect, send, and read the response head, retrying dead reused
 * connections (bo->xretries).  With bo->may_wait it stops once the
 * request is sent (FETCH_WAIT) and goes on from `from` when resumed.
 */
static enum fetch_result
exchange(struct busyobj *bo, enum exchange_from from)
{
    enum be_head h;
    int rv;

    for (;; from = X_CONNECT) {
        if (from != X_CONNECT)
            goto answer;
        switch (be_conn_get(bo->be, bo->sp, bo->xretries > 0, &bo->conn)) {
        case BCP_OK:
            break;
        case BCP_E_BUSY:
            STAT_INC(backend_busy);
            TRACE(bo->trace, FETCH_ERROR, "%s busy: max_connections reached", bo->be->name);
            return (failover(bo) ? FETCH_FAILOVER : FETCH_E_BUSY);
        case BCP_E_CONNECT:
            STAT_INC(backend_fail);
            TRACE(bo->trace, FETCH_ERROR, "%s: connect failed", bo->be->name);
            return (failover(bo) ? FETCH_FAILOVER : FETCH_E_CONNECT);
        }
        if (bo->conn->reused)
            STAT_INC(backend_reuse);
        STAT_INC(backend_req);
        TRACE_CAT(bo->trace, BACKEND, bo->be->name, " ",
                  bo->be->hostport != NULL ? bo->be->hostport : "-", " ",
                  bo->conn->reused ? "reused" : "new");
        bo->t_req = tim_real();
        rv = send_bereq(bo, bo->xhead);
        if (rv == -2)
            return (FETCH_E_CLIENT);
        if (rv == -1) {
            if (bo->conn->reused && can_retry(bo, bo->xretries)) {
                bcp_close(&bo->conn);
                bo->xretries++;
                STAT_INC(backend_retry);
                continue;
            }
            STAT_INC(backend_fail);
            TRACE(bo->trace, FETCH_ERROR, "%s: sending the request failed", bo->be->name);
            return (FETCH_E_SEND);
        }
        TRACE_TS(bo->trace, "Bereq");
        http_init(bo->beresp, ws_alloc(bo->ws, par.http_max_hdr * sizeof(struct http_hdr)),
                  par.http_max_hdr);
        if (bo->beresp->hdr == NULL)
            return (FETCH_E_OVERFLOW);
        bo->first_deadline = tim_mono() + be_first_byte_timeout(bo->be);
        /* OpenSSL may hold decrypted bytes the socket will not signal: TLS waits here. */
        if (bo->may_wait && bo->conn->ssl == NULL)
            return (FETCH_WAIT);
    answer:
        if (from == X_EXPIRED) {
            /* No read timed out here, so the pool did not count it. */
            be_count(bo->be, STAT_BE_fail_first_byte_timeout);
            h = BEH_TIMEOUT;
        } else {
            h = read_beresp_head(bo, from == X_READABLE);
        }
        switch (h) {
        case BEH_OK:
            return (FETCH_OK);
        case BEH_RETRY:
            if (can_retry(bo, bo->xretries)) {
                bcp_close(&bo->conn);
                bo->xretries++;
                STAT_INC(backend_retry);
                continue;
            }
            fetch__refused(bo, BCP_R_CLOSED);
            return (FETCH_E_BAD);
        case BEH_TIMEOUT:
            STAT_INC(backend_timeout);
            TRACE(bo->trace, FETCH_ERROR, "%s: no response within the first byte timeout",
                  bo->be->name);
            return (FETCH_E_TIMEOUT);
        case BEH_BAD:
            fetch__refused(bo, bo->why);
            return (FETCH_E_BAD);
        }
    }
}

/* backend_response on a pass: header edits only, nothing is stored. */
static enum fetch_result
policy_pass(struct busyobj *bo)
{
    struct pol_beresp br = { .bereq = bo->bereq, .resp = bo->beresp, .uncacheable = true,
                             .keep = -1, .do_gzip = -1, .do_gunzip = -1, .do_stream = -1,
                             .do_esi = -1 };
    enum pol_act act = pol_backend_response(bo->pol, &br);

    bo->pol_gzip = br.do_gzip;
    bo->pol_gunzip = br.do_gunzip;
    switch (act) {
    case POL_DELIVER:
    case POL_PASS:
        return (FETCH_OK);
    case POL_RETRY:
        return (FETCH_RETRY);
    default:
        return (FETCH_E_POLICY);
    }
}

static enum fetch_result head_in(struct busyobj *bo, enum fetch_result r);

enum fetch_result
fetch_head(struct busyobj *bo)
{
    struct dir *dir = bo->pol != NULL ? bo->pol->dir : NULL;
    enum fetch_result r;

    OBJ_CHECK(bo, BUSYOBJ_MAGIC);
    AN(bo->be);
    bo->miss = bo->oc != NULL;
    bo->xretries = 0;
    if ((r = fetch__bereq(bo, &bo->xhead)) != FETCH_OK)
        return (r);
    if (bo->pol != NULL && bo->pol->dir != dir) {
        /* backend_fetch set bereq.backend: go there instead. */
        bo->dir = bo->pol->dir;
        bo->be = dir_pick(bo->dir, &(struct dir_ctx){ .req = bo->creq, .key = bo->key,
                                                      .keylen = bo->keylen });
        if (bo->be == NULL)
            return (FETCH_E_CONNECT);
        bo->pol->be_name = bo->be->name; /* bereq.backend in the hooks that follow */
    }
    TRACE_HTTP(bo->trace, BEREQ, bo->bereq);
    return (head_in(bo, exchange(bo, X_CONNECT)));
}

int
fetch_wait_fd(const struct busyobj *bo)
{
    OBJ_CHECK(bo, BUSYOBJ_MAGIC);
    AN(bo->conn);
    return (bo->conn->fd);
}

enum fetch_result
fetch_head_resume(struct busyobj *bo, bool expired)
{
    OBJ_CHECK(bo, BUSYOBJ_MAGIC);
    AN(bo->conn);
    return (head_in(bo, exchange(bo, expired ? X_EXPIRED : X_READABLE)));
}

/* The exchange ended: with a response head, what it means; else as it ended. */
static enum fetch_result
head_in(struct busyobj *bo, enum fetch_result r)
{
    int rv;

    if (r != FETCH_OK)
        return (r);
    bo->t_resp = tim_real();
    TRACE_HTTP(bo->trace, BERESP, bo->beresp);
    be_count_status(bo->be, bo->beresp->status);
    if (bo->upgrade) {
        if (bo->beresp->status == 101) {
            STAT_INC(tunnel_opened);
            return (FETCH_UPGRADE);
        }
        /* Refused: an ordinary response.  The connection, asked to switch, is not reused. */
        STAT_INC(tunnel_refused);
    }
    /* The backend saw HEAD only on a pass: a miss asked it for GET. */
    bo->rbody = h1_resp_body(bo->beresp, bo->head_only && bo->oc == NULL, &bo->frame);
    bo->rclen = bo->frame.clen;
    if (bo->stale.oc != NULL && bo->oc != NULL && bo->beresp->status == 304) {
        bo->be_keepalive = be_keepalive(bo);
        if (bo->be_keepalive && bo->be_pos != bo->be_len)
            fetch__refused(bo, BCP_R_TRAILING_BYTES);
        if (bo->be_keepalive && bo->be_pos == bo->be_len)
            bcp_recycle(&bo->conn);
        else
            bcp_close(&bo->conn);
        return (fetch__revalidated(bo) == 0 ? FETCH_REVALIDATED : FETCH_E_BAD);
    }
    if (bo->beresp->status >= 500 && bo->beresp->status <= 504 && bo->stale_ok)
        return (FETCH_E_5XX); /* stale-if-error covers the backend's own 5xx (RFC 5861 4) */
    if (bo->rbody == H1_BODY_E_AMBIGUOUS || bo->rbody == H1_BODY_E_CODING) {
        fetch__refused(bo, frame_refusal(bo->frame.err));
        return (FETCH_E_BAD);
    }
    bo->be_keepalive = !bo->upgrade && be_keepalive(bo);
    if (bo->oc == NULL) {
        if (pol_active() && (r = policy_pass(bo)) != FETCH_OK)
            return (r);
        fetch__gz_plan(bo);
        fetch__gz_begin(bo);
        return (FETCH_OK);
    }
    if ((rv = fetch__decide_store(bo)) != 0)
        return (rv == -2 ? FETCH_RETRY : FETCH_E_POLICY);
    fetch__gz_begin(bo);
    fetch__oa_begin(bo);
    bo->stored = bo->oc != NULL;
    /*
     * With a filter the stored length is not the backend's (compressed),
     * or not yet known to be good (a gzip body is checked only at its
     * end): waiters stream chunked and learn the end from the fetch, so a
     * body that fails its check is cut, never complete by its length.
     */
    if (bo->oc != NULL && bo->esi == NULL) /* an ESI page is delivered complete */
        hsh_stream_open(bo->oc, bo->gz != NULL                 ? UINT64_MAX
                                : bo->rbody == H1_BODY_LENGTH ? bo->rclen
                                : bo->rbody == H1_BODY_NONE   ? 0
                                                              : UINT64_MAX);
    return (FETCH_OK);
}

void
fetch_done(struct busyobj *bo)
{
    OBJ_CHECK(bo, BUSYOBJ_MAGIC);
    fetch__gz_free(bo);
    fetch__oa_free(bo);
    fetch__te_free(&bo->te);
    if (bo->oc != NULL)
        hsh_abandon(&bo->oc, 0); /* not published: waiters fetch again */
    if (bo->conn != NULL) {
        if (bo->complete && bo->be_keepalive)
            bcp_recycle(&bo->conn);
        else
            bcp_close(&bo->conn);
    }
}
