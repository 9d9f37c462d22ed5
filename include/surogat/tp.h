/*
 * tp -- transports: the client protocols (HTTP/1 in h1t.c; HTTP/2 next).
 *
 * A transport owns its connection and is the only code that reads and
 * writes client sockets.  It turns bytes into requests (struct req) for
 * the request core, and the core's answers -- a head, body pieces, a file
 * range, an end -- back into bytes, framing them as its protocol does:
 * Content-Length or chunked and Connection for HTTP/1, frames for HTTP/2.
 * So every step above it is shared by all protocols, and nothing above it
 * calls sess_write*().
 *
 * Every operation runs on the request's worker and may block, bounded by
 * send_timeout per write.  Writes return 0, or -1 when the client failed:
 * the transport has then set req->close, and later writes are no-ops that
 * fail again, so a caller may write on and check once.
 */
#ifndef SUROGAT_TP_H
#define SUROGAT_TP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include "surogat/http.h"

struct bcp_conn;
struct req;
struct wrk;

/* The body length a head announces. */
#define TP_LEN_NONE    UINT64_MAX       /* announce none (304, 204, HEAD of an unknown length) */
#define TP_LEN_UNKNOWN (UINT64_MAX - 1) /* a body follows whose length is known at its end */

/*
 * A response head as the deliverer made it.  The fields are serialised
 * lines, "Name: value\r\n" each, in blocks that need not be copied
 * together (a stored object's head, this delivery's own fields), and
 * never carry framing or connection fields: those are the transport's.
 */
#define TP_HEAD_BLOCKS 4
struct tp_head {
    unsigned status;
    struct txt reason;               /* empty: the standard phrase */
    struct txt block[TP_HEAD_BLOCKS];
    unsigned nblock;
    uint64_t len;                    /* body bytes, or TP_LEN_NONE or TP_LEN_UNKNOWN */
    bool body;                       /* body bytes follow: false for HEAD, 304, 204 */
};

struct tp_ops {
    const char *name; /* "HTTP/1.1", "HTTP/2.0": req.proto in the policy */
    /*
     * Send a response head.  The transport may hold it back until the
     * first body piece or the end, to send both in one system call.
     * Sets req->status and req->t_first.
     */
    int (*head)(struct req *req, const struct tp_head *h);
    /* Body bytes, decoded; framed by the transport.  Counts req->resp_bytes. */
    int (*body)(struct req *req, struct iovec *iov, int niov);
    /* len body bytes from a file at off, zero-copy where the transport can. */
    int (*file)(struct req *req, int fd, off_t off, size_t len);
    /* The response is complete (the last chunk, the end of the stream). */
    int (*end)(struct req *req);
    /*
     * The response cannot be completed (a backend or a stored body failed
     * after the head was given): cut it, so that the client cannot take a
     * short body for a whole one, and return true.  false when nothing had
     * gone out yet: the head is dropped and the caller answers anew (a 502
     * rather than a cut connection).
     */
    bool (*abort)(struct req *req);
    /* Whether a write of some kilobytes would not block now (never blocks). */
    bool (*writable)(struct req *req);
    /* An interim response (100, 103) with field lines; 0 also when not sent (HTTP/1.0). */
    int (*interim)(struct req *req, unsigned status, const struct txt *fields);
    /*
     * The next piece of the decoded request body: >0 its length (*data
     * points into a buffer valid until the next call), 0 at the end, -1
     * when the client failed (req->close set; req->body_bad for bad framing).
     */
    ssize_t (*body_next)(struct req *req, const char **data);
    /*
     * A pipe (VCL's pipe, an upgrade): the request head went to the
     * backend connection already; from here on bytes go both ways
     * uninterpreted until either side closes or nothing moves for
     * pipe_timeout.  Sets req->status from the first bytes back.  -1
     * when the transport cannot tunnel (HTTP/2 streams).
     */
    int (*tunnel)(struct req *req, struct bcp_conn *conn);
    /*
     * Waiting without a worker (a request coalesced on a busy object,
     * hsh.h's waiting lists); all three NULL when the transport cannot
     * let go of a request's worker (it then waits on it).
     *
     * park: let the request go from req->wrk -- its memory (workspace,
     * receive buffer) and its connection become the request's own, the
     * worker gets fresh ones -- and set req->wrk NULL.  The worker
     * returns to the pool once req_serve() or req_resume() has said
     * REQ_RUN_PARKED up the stack.
     *
     * resume: a pool task runs it on wrk: give the request its memory on
     * wrk (req->wrk = wrk), call req_resume(), and go on with the
     * connection as after req_serve().
     *
     * drop: it will never run again (the pool is shutting down): free
     * what park() kept and close the connection.  No worker.
     */
    void (*park)(struct req *req);
    void (*resume)(struct wrk *wrk, struct req *req);
    void (*drop)(struct req *req);
};

/* The HTTP/1 transport: its operations, and the pool task of its sessions. */
struct wrk;
extern const struct tp_ops h1t_ops;
void h1t_sess_task(struct wrk *wrk, void *priv);

#endif
