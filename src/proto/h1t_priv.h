/*
 * h1t_priv -- shared by the files of the HTTP/1 transport.
 */
#ifndef SUROGAT_H1T_PRIV_H
#define SUROGAT_H1T_PRIV_H

#include <stdbool.h>
#include <sys/types.h>

#include "surogat/tp.h"

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

#endif
