/*
 * Upgrades (RFC 9110 section 7.8): WebSocket and any other protocol a
 * client asks to switch to, with or without a policy rule.
 *
 * A request its transport marked an upgrade (req->upgrade) is never
 * looked up: recv's "hash" passes it.  Its Upgrade goes to the backend
 * (fetch_bereq.c), and only the backend's 101 Switching Protocols turns
 * the connection into a tunnel (FETCH_UPGRADE, here).  Any other answer
 * is an ordinary response through the deliverer, and the connection stays
 * HTTP: what the client sends next is a request the policy sees, not
 * bytes for a backend that refused to switch.  The policy's "pipe" of an
 * upgrade follows the same rule (req_pipe.c).
 *
 * The tunnel holds its worker until a side closes or tunnel_timeout
 * passes without a byte; the request is logged when it ends (TUNNEL).
 */
#include "config.h"

#include <string.h>

#include "surogat/bcp.h"
#include "surogat/defs.h"
#include "surogat/dlv.h"
#include "surogat/fetch.h"
#include "surogat/http.h"
#include "surogat/par.h"
#include "surogat/req.h"
#include "surogat/sb.h"
#include "surogat/stat.h"
#include "surogat/tp.h"
#include "surogat/ws.h"

#include "req_priv.h"

/* Upgrade fields of a 101 kept, at most: one names the protocol, a few would be odd already. */
#define UPGRADE_FIELDS 8

void
req__tunnel(struct req *req, struct bcp_conn *conn, const struct tp_tunnel *t)
{
    AN(req->tp->tunnel);
    STAT_INC(tunnel_active);
    if (req->tp->tunnel(req, conn, t) == TP_TUN_IDLE)
        STAT_INC(tunnel_idle);
    STAT_DEC(tunnel_active);
    req->close = true;
}

/*
 * The 101's fields for the client, in workspace: the backend's, hop-by-hop
 * ones removed but for Upgrade, which names what the connection becomes;
 * Via as on any response.  false when the workspace is full.
 */
static bool
switch_fields(struct req *req, struct http *resp, struct txt *out)
{
    struct txt up[UPGRADE_FIELDS];
    unsigned nup = 0;
    struct sb sb;
    size_t room;
    char *buf;

    for (unsigned i = 0; i < resp->nhdr && nup < UPGRADE_FIELDS; i++)
        if (http_name_eq(&resp->hdr[i].name, "Upgrade"))
            up[nup++] = resp->hdr[i].val;
    http_strip_hop_by_hop(resp);
    buf = ws_reserve_all(req->ws, &room);
    sb_init(&sb, buf, room);
    http_write_fields(&sb, resp);
    for (unsigned i = 0; i < nup; i++) {
        sb_cat(&sb, "Upgrade: ");
        sb_bcat(&sb, up[i].b, up[i].len);
        sb_cat(&sb, "\r\n");
    }
    if (par.via)
        sb_cat(&sb, resp->proto == 10 ? "Via: 1.0 surogat\r\n" : "Via: 1.1 surogat\r\n");
    if (!sb_ok(&sb)) {
        ws_release(req->ws, 0);
        return (false);
    }
    ws_release(req->ws, sb.len);
    *out = (struct txt){ buf, sb.len };
    return (true);
}

void
req__upgraded(struct req *req, struct busyobj *bo)
{
    bool pipe = req->st != NULL && req->st->pipe_bereq != NULL;
    struct bcp_conn *conn = bo->conn;
    struct tp_head h = { .status = 101, .len = TP_LEN_NONE };
    struct tp_tunnel t = { .head = &h, .idle = pipe ? par.pipe_timeout : par.tunnel_timeout };

    OBJ_CHECK(bo, BUSYOBJ_MAGIC);
    SRG_ASSERT(bo->upgrade && bo->beresp->status == 101);
    bo->conn = NULL;
    h.reason = bo->beresp->reason;
    if (!switch_fields(req, bo->beresp, &h.block[0])) {
        fetch_done(bo);
        bcp_close(&conn);
        STAT_INC(ws_overflow);
        req->close = true;
        (void)dlv_error(req, 500, NULL, "workspace_client exhausted");
        return;
    }
    h.nblock = 1;
    /* Bytes the backend sent past its 101 (a first frame): in the fetch's buffer, sent first. */
    t.early = (struct txt){ bo->rxbuf + bo->be_pos, bo->be_len - bo->be_pos };
    fetch_done(bo);
    req->outcome = pipe ? REQ_O_PIPE : REQ_O_TUNNEL;
    req__tunnel(req, conn, &t);
    bcp_close(&conn);
}
