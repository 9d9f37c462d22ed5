/*
 * Pipe: the request goes to the backend on a connection of its own and
 * from then on bytes are copied both ways, uninterpreted, until either
 * side closes or nothing moves for pipe_timeout.  For what surogat does
 * not speak (odd methods, protocols of one's own), as VCL's pipe.
 *
 * The head is the client's as parsed, framing fields included: the body
 * follows as the client sends it, raw.  The backend is told Connection:
 * close, so that it does not take later requests of the client for its
 * own, and the client connection is closed afterwards: what went through
 * it is not known to be at a request boundary.
 *
 * An upgrade (req->upgrade) is piped only once the backend agreed: it is
 * fetched with the pipe hook's request, and a 101 opens the tunnel
 * (req_upgrade.c) while any other answer is an ordinary response, the
 * connection staying HTTP.  Otherwise a backend that refused the switch
 * would get the client's next requests without the policy seeing them.
 * A transport that cannot tunnel (HTTP/2) has every pipe fetched so.
 */
#include "config.h"

#include <string.h>

#include "surogat/bcp.h"
#include "surogat/be.h"
#include "surogat/defs.h"
#include "surogat/dlv.h"
#include "surogat/fetch.h"
#include "surogat/h1.h"
#include "surogat/http.h"
#include "surogat/par.h"
#include "surogat/pol.h"
#include "surogat/req.h"
#include "surogat/sb.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/tp.h"
#include "surogat/trace.h"
#include "surogat/ws.h"

#include "req_priv.h"

void
req_pipe(struct req *req, struct be *be)
{
    struct tp_tunnel t = { .idle = par.pipe_timeout };
    struct pol_synth syn;
    struct bcp_conn *conn;
    struct pol_bctx bc;
    struct busyobj bo;
    struct http *bq;
    struct sb sb;
    char *buf;
    size_t room;

    AN(req->st);
    req->outcome = REQ_O_PIPE;
    req__busyobj(req, &bo, &bc, be, NULL, NULL);
    bo.trace = bc.trace = trace_fetch(req->trace, req->ws, "pass");
    if ((bq = fetch_pipe_bereq(&bo)) == NULL) {
        STAT_INC(ws_overflow);
        req->close = true;
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
        /* None healthy, or static files: nothing to pipe to. */
        (void)dlv_error(req, 503, NULL, NULL);
        return;
    }
    STAT_INC(policy_pipe);
    if (req->upgrade || req->tp->tunnel == NULL) {
        /* Cache-Status of the response, if the backend refuses the switch: the policy's pipe. */
        req->cs_fwd = "bypass", req->cs_detail = "policy";
        req->st->pipe_bereq = bq;
        req__fetch(req, be, NULL, NULL, false); /* a pipe's hook state stays */
        return;
    }
    req->close = true;
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
    STAT_INC(backend_req);
    if (bcp_write(conn, buf, sb.len, tim_mono() + be_between_bytes_timeout(be)) == 0)
        req__tunnel(req, conn, &t);
    bcp_close(&conn);
    if (req->t_first == 0)
        (void)dlv_error(req, 503, NULL, NULL); /* the backend said nothing at all */
}
