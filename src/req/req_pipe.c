/*
 * Pipe: the request goes to the backend on a connection of its own and
 * from then on bytes are copied both ways, uninterpreted, until either
 * side closes or nothing moves for pipe_timeout.  For what surogat does
 * not speak (WebSocket after its Upgrade, odd methods), as VCL's pipe.
 *
 * The head is the client's as parsed, framing fields included: the body
 * follows as the client sends it, raw.  Without an Upgrade the backend is
 * told Connection: close, so that it does not take later requests of the
 * client for its own.  The client connection is closed afterwards: what
 * went through it is not known to be at a request boundary.
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "surogat/bcp.h"
#include "surogat/be.h"
#include "surogat/defs.h"
#include "surogat/dlv.h"
#include "surogat/http.h"
#include "surogat/par.h"
#include "surogat/pol.h"
#include "surogat/req.h"
#include "surogat/sb.h"
#include "surogat/sess.h"
#include "surogat/tp.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/wrk.h"
#include "surogat/ws.h"

/* The backend request of a pipe, in workspace; NULL when it is full. */
static struct http *
pipe_bereq(struct req *req)
{
    const struct http *hp = req->http;
    unsigned nhdr = hp->nhdr + 4 + (pol_active() ? POL_HDR_ROOM : 0);
    struct http *bq = ws_alloc(req->ws, sizeof *bq);
    struct http_hdr *hdrs = ws_alloc(req->ws, nhdr * sizeof *hdrs);

    if (bq == NULL || hdrs == NULL)
        return (NULL);
    http_init(bq, hdrs, nhdr);
    bq->method = hp->method;
    bq->url = hp->url;
    bq->proto = hp->proto;
    memcpy(hdrs, hp->hdr, hp->nhdr * sizeof *hdrs);
    bq->nhdr = hp->nhdr;
    if (req->sp != NULL && par.xff)
        AZ(http_add(bq, TXT_LIT("X-Forwarded-For"),
                    (struct txt){ req->sp->client_ip, strlen(req->sp->client_ip) }));
    if (http_find(bq, "Upgrade") == NULL) {
        http_unset(bq, "Connection");
        AZ(http_add(bq, TXT_LIT("Connection"), TXT_LIT("close")));
    }
    return (bq);
}

void
req_pipe(struct req *req, struct be *be)
{
    struct pol_synth syn;
    struct bcp_conn *conn;
    struct http *bq;
    struct sb sb;
    char *buf;
    size_t room;

    req->outcome = REQ_O_PIPE;
    req->close = true;
    if ((bq = pipe_bereq(req)) == NULL) {
        STAT_INC(ws_overflow);
        (void)dlv_error(req, 500, NULL, NULL);
        return;
    }
    if (pol_active()) {
        switch (pol_pipe(req, bq, &syn)) {
        case POL_PIPE:
            break;
        case POL_SYNTH:
            dlv_synth(req, syn.status, syn.reason);
            return;
        default:
            dlv_synth(req, 503, "policy error");
            return;
        }
    }
    if (be == NULL || be->pool == NULL) {
        (void)dlv_error(req, 503, NULL, NULL); /* none healthy, or static files: nothing to pipe to */
        return;
    }
    buf = ws_reserve_all(req->ws, &room);
    sb_init(&sb, buf, room);
    h1_write_request(&sb, bq);
    if (!sb_ok(&sb)) {
        ws_release(req->ws, 0);
        STAT_INC(ws_overflow);
        (void)dlv_error(req, 500, NULL, NULL);
        return;
    }
    ws_release(req->ws, sb.len + 1);
    req->be_name = be->name;
    if (be_conn_get(be, req->sp, true, &conn) != BCP_OK) {
        STAT_INC(backend_fail);
        (void)dlv_error(req, 503, NULL, NULL);
        return;
    }
    STAT_INC(policy_pipe);
    STAT_INC(backend_req);
    if (bcp_write(conn, buf, sb.len, tim_mono() + be_between_bytes_timeout(be)) == 0)
        req->tp->tunnel(req, conn);
    bcp_close(&conn);
    if (req->t_first == 0)
        (void)dlv_error(req, 503, NULL, NULL); /* the backend said nothing at all */
}
