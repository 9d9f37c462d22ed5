/*
 * h1t_priv -- shared by the files of the HTTP/1 transport.
 */
#ifndef SUROGAT_H1T_PRIV_H
#define SUROGAT_H1T_PRIV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "surogat/tp.h"
#include "surogat/wrk.h"

struct req;

/*
 * Make req an HTTP/1 request: its transport and the transport's state,
 * from the workspace (first thing after the request itself).  -1 when
 * even that does not fit.
 */
int h1t_req_init(struct req *req);
/* tp_ops.tunnel for HTTP/1 (h1t_pipe.c). */
struct bcp_conn;
struct tp_tunnel;
enum tp_tunnel_end h1t_tunnel(struct req *req, struct bcp_conn *conn, const struct tp_tunnel *t);
/* Whether hp asks to switch protocols as HTTP/1.1 lets it, h2c never (h1t_pipe.c). */
struct http;
bool h1t_is_upgrade(const struct http *hp);
/* tp_ops.body_next for HTTP/1: Content-Length or chunked, 100-continue on first use. */
ssize_t h1t_body_next(struct req *req, const char **data);

/*
 * The request side's state for one request, beside the response's (the
 * session loop fills it as the head and body arrive, h1t_body_next()
 * reads and updates it).
 */
struct h1t_in {
    double t_body;     /* tim_mono() when the head was complete: the body's deadline counts from it */
    uint64_t body_raw; /* body bytes received so far, framing included: req_body_min_rate's measure */
    size_t body_end;   /* the whole body is in wrk->rx and ends at this offset; 0 when it is not */
    /* Parked on a waiting list: its workspace and receive buffer, off any worker. */
    struct wrk_mem mem;
};
struct h1t_in *h1t_in_of(struct req *req);
/*
 * Answer Expect: 100-continue if the request asked and it was not done
 * yet (the session remembers it across parks).  0, or -1 when the client
 * is gone.  Blocks at most send_timeout (one small write).
 */
int h1t_continue(struct req *req);
/*
 * When the next request body byte must have arrived, for a body whose head
 * was complete at t_body (tim_mono()) and of which `got` bytes arrived: no
 * pause longer than timeout_idle, and on average req_body_min_rate bytes
 * a second once timeout_req has passed.  The same bound whether the body
 * waits in the waiter or a worker streams it.
 */
double h1t_body_deadline(double t_body, uint64_t got);
/* tp_ops.park, .resume and .drop for HTTP/1 (h1t_sess.c). */
struct wrk;
void h1t_park(struct req *req, bool brief);
void h1t_resume(struct wrk *wrk, struct req *req);
void h1t_drop(struct req *req);

#endif
