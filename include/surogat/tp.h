/*
 * tp -- transports: the client protocols (HTTP/1 in h1t*.c, HTTP/2 in h2t*.c).
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
struct shd_head;
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
    /*
     * A stored head's field lines still encoded, to go before block[0],
     * or NULL: given only to a transport whose ops say it takes them
     * (tp_ops.stored_fields), which writes them with shd_decode_fields()
     * (shd.h) straight into what it sends, during head().
     */
    const struct shd_head *stored;
    uint64_t len;                    /* body bytes, or TP_LEN_NONE or TP_LEN_UNKNOWN */
    bool body;                       /* body bytes follow: false for HEAD, 304, 204 */
};

/*
 * Body bytes that may also lie in a file (a store's: sto_seg_file()):
 * len bytes at mem, and when fd >= 0 the same bytes at off in fd.  mem
 * may be NULL when fd is given (a static file).
 */
struct tp_fseg {
    const void *mem;
    size_t len;
    int fd;
    off_t off;
};

/* What a tunnel starts with (tp_ops.tunnel). */
struct tp_tunnel {
    /*
     * The backend's 101 Switching Protocols, to the client first: its
     * fields, Upgrade (the protocol switched to) included; the transport
     * adds the connection option that goes with it.  NULL for a pipe,
     * whose response is whatever bytes the backend sends.
     */
    const struct tp_head *head;
    struct txt early; /* backend bytes read past that head: to the client next */
    double idle;      /* seconds without a byte either way that end the tunnel */
};

/* How a tunnel ended. */
enum tp_tunnel_end {
    TP_TUN_CLOSED, /* a side closed, or failed */
    TP_TUN_IDLE,   /* nothing moved for tp_tunnel.idle */
};

struct tp_ops {
    const char *name; /* "HTTP/1.1", "HTTP/2.0": req.proto in the policy */
    bool stored_fields; /* head() takes tp_head.stored; else the deliverer decodes them */
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
    /*
     * Body pieces, some in files: sent from the file by reference where
     * the connection allows (plain HTTP/1: sendfile(2)), else from memory
     * (TLS encrypts a copy anyway).  Framed and counted as body().  NULL
     * in a transport that has no use for files: the deliverer calls body().
     */
    int (*body_fsegs)(struct req *req, const struct tp_fseg *seg, int n);
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
    /*
     * An interim response (100, 103) with field lines, sent at once, before
     * the final head: 1 sent, 0 not sent (an HTTP/1.0 client knows none),
     * -1 the client failed.
     */
    int (*interim)(struct req *req, unsigned status, const struct txt *fields);
    /*
     * The next piece of the decoded request body: >0 its length (*data
     * points into a buffer valid until the next call), 0 at the end, -1
     * when the client failed (req->close set; req->body_bad for bad framing).
     */
    ssize_t (*body_next)(struct req *req, const char **data);
    /*
     * A tunnel: the request went to the backend connection already (a
     * pipe's head, or an upgrade the backend accepted with t->head, its
     * 101); from here on bytes go both ways uninterpreted -- first t->head
     * and t->early to the client, and what the client sent past its
     * request -- until either side closes or nothing moves for t->idle
     * seconds.  Sets req->status (from the first bytes back for a pipe)
     * and counts req->resp_bytes; the connection is the backend's again
     * when it returns, and the client's must close.
     *
     * A tunnel is an HTTP/1 thing: the transport owns the whole
     * connection, TLS records included.  A transport that multiplexes
     * leaves this NULL and never sets req->upgrade.  HTTP/2 has no 101
     * and no Upgrade (RFC 9113 sections 8.6 and 8.2.2): its transport
     * refuses a request carrying Upgrade, Connection or another
     * connection-specific field as malformed, with a stream error
     * PROTOCOL_ERROR (RST_STREAM), or a 400 first, before the core sees
     * it; WebSocket over HTTP/2 would be extended CONNECT (RFC 8441),
     * which it does not offer in SETTINGS.  A policy's "pipe" over such
     * a transport is fetched as a pass, with the pipe hook's request.
     */
    enum tp_tunnel_end (*tunnel)(struct req *req, struct bcp_conn *conn, const struct tp_tunnel *t);
    /*
     * Waiting without a worker (a request coalesced on a busy object,
     * hsh.h's waiting lists); all three NULL when the transport cannot
     * let go of a request's worker (it then waits on it).
     *
     * park: let the request go from req->wrk -- its memory (workspace,
     * receive buffer) and its connection become the request's own, the
     * worker gets fresh ones -- and set req->wrk NULL.  `brief`: the wait
     * is short and common (a backend's answer), so the request's unused
     * pages stay (wrk_mem_take()).  The worker
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
    void (*park)(struct req *req, bool brief);
    void (*resume)(struct wrk *wrk, struct req *req);
    void (*drop)(struct req *req);
};

/* The HTTP/1 transport: its operations, and the pool task of its sessions. */
struct wrk;
extern const struct tp_ops h1t_ops;
void h1t_sess_task(struct wrk *wrk, void *priv);
/*
 * The HTTP/2 transport (h2t.c): its operations, and the pool task of its
 * connections -- after ALPN h2, or the first on an h2c listener, where it
 * hands a connection that does not start with the HTTP/2 preface to
 * h1t_sess_task().  h2t_init() before the pools start; h2t_fini() after.
 */
extern const struct tp_ops h2t_ops;
void h2t_sess_task(struct wrk *wrk, void *priv);
int h2t_init(void);
void h2t_fini(void);

#endif
