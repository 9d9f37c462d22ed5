/*
 * Pages surogat makes itself: error pages, and the policy's synthetic
 * answers through the synth hook.  Built in the request's workspace (or on
 * the stack, for error pages: they must work when the workspace is full)
 * and sent through the request's transport.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "surogat/defs.h"
#include "surogat/dlv.h"
#include "surogat/pol.h"
#include "surogat/req.h"
#include "surogat/sb.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/tp.h"
#include "surogat/trace.h"
#include "surogat/ws.h"

/*
 * Head and body through the transport; the fields are complete lines.  A
 * hook may have made it a 204 or a 304: no body then, nor a length,
 * whatever it gave as one (RFC 9112 section 6.3).
 */
static int
send_page(struct req *req, unsigned status, struct txt reason, struct txt fields, struct txt body)
{
    bool bodyless = status == 204 || status == 304;
    struct tp_head h = { .status = status, .reason = reason, .nblock = 1,
                         .len = bodyless ? TP_LEN_NONE : body.len, .body = !bodyless };
    struct iovec iov = { (void *)(uintptr_t)body.b, body.len };

    if (bodyless)
        body.len = 0;
    h.block[0] = fields;
    TRACE_HEAD(req->trace, &h);
    if (req->tp->head(req, &h) != 0)
        return (-1);
    if (body.len > 0 && req->tp->body(req, &iov, 1) != 0)
        return (-1);
    return (req->tp->end(req));
}

int
dlv_error(struct req *req, unsigned status, const char *extra_fields, const char *msg)
{
    char date[TIM_HTTP_DATE_LEN + 1], fields[1024], body[1024];
    const char *reason = http_reason(status);
    struct sb fb, bb;

    OBJ_CHECK(req, REQ_MAGIC);
    sb_init(&bb, body, sizeof body);
    sb_printf(&bb, "<!DOCTYPE html>\n<html><head><title>%u %s</title></head>\n<body><h1>%u %s</h1>",
              status, reason, status, reason);
    sb_cat(&bb, "<p>");
    sb_html_escape(&bb, msg != NULL ? msg : "surogat");
    sb_cat(&bb, "</p></body></html>\n");
    tim_http_date(tim_real(), date);
    sb_init(&fb, fields, sizeof fields);
    sb_printf(&fb, "Date: %s\r\nServer: surogat\r\nContent-Type: text/html; charset=utf-8\r\n%s",
              date, extra_fields != NULL ? extra_fields : "");
    AN(sb_ok(&fb));
    AN(sb_ok(&bb));
    req->outcome = REQ_O_SYNTH;
    return (send_page(req, status, (struct txt){ reason, strlen(reason) },
                 (struct txt){ fields, fb.len }, (struct txt){ body, bb.len }));
}

int
dlv_send(struct req *req, const struct http *hp, struct txt body)
{
    char date[TIM_HTTP_DATE_LEN + 1], *buf;
    struct sb sb;
    size_t room;

    OBJ_CHECK(req, REQ_MAGIC);
    buf = ws_reserve_all(req->ws, &room);
    sb_init(&sb, buf, room);
    if (http_find(hp, "Date") == NULL) {
        tim_http_date(tim_real(), date);
        sb_printf(&sb, "Date: %s\r\n", date);
    }
    if (http_find(hp, "Server") == NULL)
        sb_cat(&sb, "Server: surogat\r\n");
    http_write_fields(&sb, hp);
    if (!sb_ok(&sb)) {
        ws_release(req->ws, 0);
        STAT_INC(ws_overflow);
        req->close = true;
        return (dlv_error(req, 500, NULL, "workspace_client exhausted"));
    }
    ws_release(req->ws, sb.len);
    return (send_page(req, hp->status, hp->reason, (struct txt){ buf, sb.len }, body));
}

void
dlv_synth(struct req *req, unsigned status, const char *reason)
{
    struct http_hdr *hdrs = ws_alloc(req->ws, (POL_HDR_ROOM + 2) * sizeof *hdrs);
    struct http resp;
    char *page;
    size_t room;
    struct sb sb;

    OBJ_CHECK(req, REQ_MAGIC);
    if (*reason == '\0')
        reason = http_reason(status);
    page = hdrs != NULL ? ws_reserve_all(req->ws, &room) : NULL;
    if (page != NULL) {
        sb_init(&sb, page, room);
        sb_printf(&sb, "<!DOCTYPE html>\n<html><head><title>%u ", status);
        sb_html_escape(&sb, reason);
        sb_printf(&sb, "</title></head>\n<body><h1>%u ", status);
        sb_html_escape(&sb, reason);
        sb_cat(&sb, "</h1></body></html>\n");
        ws_release(req->ws, sb_ok(&sb) ? sb.len : 0);
    }
    if (page == NULL || !sb_ok(&sb)) {
        STAT_INC(ws_overflow);
        (void)dlv_error(req, status, NULL, NULL);
        return;
    }
    http_init(&resp, hdrs, POL_HDR_ROOM + 2);
    resp.proto = 11;
    resp.status = status;
    resp.reason = (struct txt){ reason, strlen(reason) };
    AZ(http_add(&resp, TXT_LIT("Content-Type"), TXT_LIT("text/html; charset=utf-8")));
    struct txt body = { page, sb.len };
    req->outcome = REQ_O_SYNTH;
    if (pol_active()) {
        switch (pol_synth(req, &resp, &body)) {
        case POL_DELIVER:
            break;
        case POL_RESTART:
            req->restart = true;
            return;
        default:
            (void)dlv_error(req, 503, NULL, "policy error");
            return;
        }
    }
    (void)dlv_send(req, &resp, body);
    req->outcome = REQ_O_SYNTH;
}
