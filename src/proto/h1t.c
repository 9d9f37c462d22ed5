/*
 * The HTTP/1 transport's response side: framing and writing what the
 * deliverer hands over (tp.h).
 *
 * A head is held back until the first body piece or the end, so that a
 * small response leaves in one writev(2): the status line, a stored
 * object's fields (tp_head.stored, decoded straight into the head's one
 * piece: their text is written once), the field blocks, our framing and
 * Connection fields, and the body.  Framing is decided here only:
 * Content-Length when the length is known, chunked to an HTTP/1.1 client
 * when it is not, and for HTTP/1.0 the end of the connection.  Runs on the
 * request's worker; each write is bounded by send_timeout.
 *
 * Bodies in files (a static file, a cached body in its store's file or
 * memory file) go with sendfile(2) on plain connections: the held-back
 * head and any bytes from memory before the file's go first in one write
 * flagged MSG_MORE, so that they leave in the same segments as the file's
 * first bytes.  Under TLS the kernel cannot encrypt, so bytes that are
 * also in memory go from there, and a file without memory through
 * tls_sendfile().
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "surogat/defs.h"
#include "surogat/h1.h"
#include "surogat/par.h"
#include "surogat/req.h"
#include "surogat/sb.h"
#include "surogat/sess.h"
#include "surogat/shd.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/tp.h"
#include "surogat/ws.h"

#include "h1t_priv.h"

/* Body iovecs gathered into one writev(2) with a held-back head and chunk framing. */
#define H1T_IOV 64
/* A head up to this long is copied into one piece of the writev(2) (see h1t_head()). */
#define H1T_HEAD_JOIN 2048

/* The per-response state, in the request's workspace from head() on. */
struct h1t_resp {
    unsigned magic;
#define H1T_RESP_MAGIC 0x6a2b95c1
    int nhead;
    size_t head_len;
    bool chunked; /* body pieces go as chunks, then the last chunk */
    bool body;    /* the head said a body follows */
    bool failed;  /* a write failed: every later one fails at once */
    struct h1t_in in; /* the request side's, kept across heads */
    /*
     * Not zeroed when the request is made (h1t_req_init()), as each is
     * written before it is read: head[0 .. nhead), and the text head()
     * builds.  New fields go above.
     */
    struct iovec head[TP_HEAD_BLOCKS + 4]; /* held back: status line, blocks, our fields */
    char line[64];
    char tail[96];
};

static double
deadline(void)
{
    return (tim_mono() + par.send_timeout);
}

static struct h1t_resp *
resp_of(struct req *req)
{
    struct h1t_resp *r = req->tp_priv;

    OBJ_CHECK(r, H1T_RESP_MAGIC);
    return (r);
}

struct h1t_in *
h1t_in_of(struct req *req)
{
    return (&resp_of(req)->in);
}

/*
 * Write iov (the held-back head first, if any); with more, held back for
 * a file that follows.  On failure the client is gone or too slow: the
 * session closes after this request.
 */
static int
send_iov(struct req *req, struct h1t_resp *r, struct iovec *iov, int n, bool more)
{
    struct iovec all[H1T_IOV + TP_HEAD_BLOCKS + 4];
    double dl;
    int k = 0;

    if (r->failed)
        return (-1);
    if (r->nhead > 0) {
        memcpy(all, r->head, (size_t)r->nhead * sizeof *all);
        k = r->nhead;
    }
    SRG_ASSERT(n <= H1T_IOV);
    if (n > 0) /* iov may be NULL then: memcpy() wants a pointer even for 0 bytes */
        memcpy(all + k, iov, (size_t)n * sizeof *all);
    k += n;
    if (k == 0)
        return (0);
    /*
     * With the head, the clock head() read just now serves: a hit's one
     * write reads it once.
     */
    dl = r->nhead > 0 && req->t_first != 0 ? req->t_first + par.send_timeout : deadline();
    if ((more ? sess_writev_more : sess_writev)(req->sp, all, k, dl) != 0) {
        r->failed = true;
        req->close = true;
        return (-1);
    }
    if (r->nhead > 0) {
        STAT_ADD(resp_head_bytes, r->head_len);
        r->nhead = 0;
    }
    return (0);
}

/*
 * The response state, taken from the workspace when the request is made,
 * before anything else: an error page must go out even when the request
 * filled the workspace.
 */
int
h1t_req_init(struct req *req)
{
    struct h1t_resp *r = ws_alloc(req->ws, sizeof *r);

    if (r == NULL)
        return (-1);
    /* Once per request: the buffers below are a third of it and need no zeroing. */
    memset(r, 0, offsetof(struct h1t_resp, head));
    r->magic = H1T_RESP_MAGIC;
    req->tp = &h1t_ops;
    req->tp_priv = r;
    return (0);
}

/* "HTTP/1.1 SSS " at o (at most H1T_LINE bytes); returns the end. */
#define H1T_LINE 30
static char *
put_line(char *o, unsigned status)
{
    o = SB_PUT_LIT(o, "HTTP/1.1 ");
    o = sb_put_uint(o, status);
    *o++ = ' ';
    return (o);
}

/*
 * Our framing and connection fields and the empty line that ends the head
 * at o (at most sizeof r->tail bytes), deciding the framing; the end.
 */
static char *
put_framing(struct req *req, struct h1t_resp *r, const struct tp_head *h, char *o)
{
    if (h->len == TP_LEN_UNKNOWN) {
        if (!r->body) {
            /* HEAD of a body whose length is not known yet: say nothing of it. */
        } else if (req->http->proto == 11) {
            r->chunked = true;
            o = SB_PUT_LIT(o, "Transfer-Encoding: chunked\r\n");
        } else {
            req->close = true; /* an HTTP/1.0 client learns the end from the close */
        }
    } else if (h->len != TP_LEN_NONE) {
        o = SB_PUT_LIT(o, "Content-Length: ");
        o = sb_put_uint(o, h->len);
        o = SB_PUT_LIT(o, "\r\n");
    }
    if (req->close || req->want_close || sess_draining())
        o = SB_PUT_LIT(o, "Connection: close\r\n");
    else if (req->keepalive_10)
        o = SB_PUT_LIT(o, "Connection: keep-alive\r\n");
    return (SB_PUT_LIT(o, "\r\n"));
}

static int
h1t_head(struct req *req, const struct tp_head *h)
{
    struct h1t_resp *r = resp_of(req);
    const char *reason = h->reason.len > 0 ? h->reason.b : http_reason(h->status);
    size_t rlen = h->reason.len > 0 ? h->reason.len : strlen(reason), len;
    char *joined, *o;

    /*
     * A second head: the first was dropped by abort() before anything
     * went out.  The request side's state (in) and the buffers stay.
     */
    memset(r, 0, offsetof(struct h1t_resp, in));
    r->magic = H1T_RESP_MAGIC;
    req->status = h->status;
    r->body = h->body && !req->head_only;
    /* The reason as given, never cut: a policy's may be long. */
    len = H1T_LINE + rlen + 2 + (h->stored != NULL ? h->stored->room : 0) + sizeof r->tail;
    for (unsigned i = 0; i < h->nblock; i++)
        len += h->block[i].len;
    /*
     * Each piece of an iovec costs the kernel a copy round of its own: a
     * head of a few hundred bytes is written as one piece (as cheap as one
     * of those rounds), so that a hit's writev(2) is two.  A stored head's
     * fields are decoded into it: the text is written once, where it goes
     * out from.
     */
    if ((len <= H1T_HEAD_JOIN || h->stored != NULL) && (joined = ws_alloc(req->ws, len)) != NULL) {
        o = put_line(joined, h->status);
        memcpy(o, reason, rlen);
        o = SB_PUT_LIT(o + rlen, "\r\n");
        if (h->stored != NULL)
            o += shd_decode_fields(h->stored, o);
        for (unsigned i = 0; i < h->nblock; i++) {
            if (h->block[i].len > 0)
                memcpy(o, h->block[i].b, h->block[i].len);
            o += h->block[i].len;
        }
        o = put_framing(req, r, h, o);
        SRG_ASSERT((size_t)(o - joined) <= len);
        r->head[r->nhead++] = (struct iovec){ joined, (size_t)(o - joined) };
    } else if (h->stored != NULL) {
        /* No room to write the stored fields into: the deliverer left some (STORED_SLACK). */
        STAT_INC(ws_overflow);
        r->failed = true;
        req->close = true;
        return (-1);
    } else {
        /* A long head goes as it is given, a piece each. */
        r->head[r->nhead++] =
            (struct iovec){ r->line, (size_t)(put_line(r->line, h->status) - r->line) };
        r->head[r->nhead++] = (struct iovec){ (void *)(uintptr_t)reason, rlen };
        r->head[r->nhead++] = (struct iovec){ (void *)(uintptr_t) "\r\n", 2 };
        for (unsigned i = 0; i < h->nblock; i++) {
            if (h->block[i].len == 0)
                continue;
            r->head[r->nhead].iov_base = (void *)(uintptr_t)h->block[i].b;
            r->head[r->nhead++].iov_len = h->block[i].len;
        }
        r->head[r->nhead].iov_base = r->tail;
        r->head[r->nhead++].iov_len = (size_t)(put_framing(req, r, h, r->tail) - r->tail);
    }
    for (int i = 0; i < r->nhead; i++)
        r->head_len += r->head[i].iov_len;
    req->t_first = tim_mono();
    return (0);
}

static int
h1t_body(struct req *req, struct iovec *iov, int niov)
{
    struct h1t_resp *r = resp_of(req);
    struct iovec out[H1T_IOV];
    char chdr[H1_CHUNK_HDR_MAX];
    uint64_t len = 0;
    int n = 0;

    if (!r->body)
        return (r->failed ? -1 : 0);
    /* In rounds that fit one writev(2), each a chunk of its own when chunked. */
    while (niov > 0) {
        int take = SRG_MIN(niov, H1T_IOV - 2);
        len = 0;
        n = 0;
        if (r->chunked)
            out[n++] = (struct iovec){ chdr, 0 };
        for (int i = 0; i < take; i++) {
            if (iov[i].iov_len == 0)
                continue;
            out[n++] = iov[i];
            len += iov[i].iov_len;
        }
        if (r->chunked) {
            if (len == 0) {
                n = 0; /* an empty chunk would end the body */
            } else {
                out[0].iov_len = h1_chunk_header(chdr, len);
                out[n++] = (struct iovec){ (void *)(uintptr_t) "\r\n", 2 };
            }
        }
        if (n > 0 && send_iov(req, r, out, n, false) != 0)
            return (-1);
        req->resp_bytes += len;
        STAT_ADD(resp_body_bytes, len);
        iov += take;
        niov -= take;
    }
    return (0);
}

/* len bytes of a file, after the held-back head; a failure cuts the response. */
static int
send_file(struct req *req, struct h1t_resp *r, int fd, off_t off, size_t len)
{
    if (r->nhead > 0 && send_iov(req, r, NULL, 0, true) != 0)
        return (-1);
    if (sess_sendfile(req->sp, fd, off, len, deadline()) != 0) {
        r->failed = true;
        req->close = true;
        /* The head promised a length: only a cut connection says it was not kept. */
        req->abort = true;
        return (-1);
    }
    req->resp_bytes += len;
    STAT_ADD(resp_body_bytes, len);
    STAT_ADD(resp_sendfile_bytes, len);
    return (0);
}

static int
h1t_body_fsegs(struct req *req, const struct tp_fseg *seg, int n)
{
    struct h1t_resp *r = resp_of(req);
    struct iovec iov[H1T_IOV - 2];
    uint64_t len = 0;
    int k = 0;

    if (!r->body || r->failed)
        return (r->failed ? -1 : 0);
    for (int i = 0; i < n; i++) {
        bool file = seg[i].fd >= 0 && (seg[i].mem == NULL || (req->sp->ssl == NULL && !r->chunked));

        if (!file || seg[i].len == 0) {
            if (seg[i].len == 0)
                continue;
            AN(seg[i].mem);
            if (k == (int)ARRAY_LEN(iov)) {
                if (h1t_body(req, iov, k) != 0)
                    return (-1);
                k = 0;
                len = 0;
            }
            iov[k++] = (struct iovec){ (void *)(uintptr_t)seg[i].mem, seg[i].len };
            len += seg[i].len;
            continue;
        }
        /* A file is not framed by chunks here: only known lengths come as files. */
        if (r->chunked)
            SRG_WRONG("file body with chunked framing");
        if (k > 0) {
            /* What came from memory goes with the head, held back for the file's bytes. */
            if (send_iov(req, r, iov, k, true) != 0)
                return (-1);
            req->resp_bytes += len;
            STAT_ADD(resp_body_bytes, len);
            k = 0;
            len = 0;
        }
        if (send_file(req, r, seg[i].fd, seg[i].off, seg[i].len) != 0)
            return (-1);
    }
    return (k > 0 ? h1t_body(req, iov, k) : 0);
}

static int
h1t_file(struct req *req, int fd, off_t off, size_t len)
{
    const struct tp_fseg seg = { NULL, len, fd, off };

    return (h1t_body_fsegs(req, &seg, 1));
}

static int
h1t_end(struct req *req)
{
    struct h1t_resp *r = resp_of(req);
    struct iovec last = { (void *)(uintptr_t) "0\r\n\r\n", 5 };

    if (r->failed)
        return (-1);
    if (r->chunked)
        return (send_iov(req, r, &last, 1, false));
    return (send_iov(req, r, NULL, 0, false));
}

static bool
h1t_abort(struct req *req)
{
    struct h1t_resp *r = resp_of(req);

    if (r->nhead > 0 && !r->failed) {
        /* Nothing went out yet: the head is dropped, the caller answers anew. */
        r->nhead = 0;
        req->t_first = 0;
        return (false);
    }
    req->abort = true;
    req->close = true;
    return (true);
}

static bool
h1t_writable(struct req *req)
{
    struct pollfd pfd = { .fd = req->sp->fd, .events = POLLOUT };

    return (poll(&pfd, 1, 0) == 1 && (pfd.revents & POLLOUT));
}

static int
h1t_interim(struct req *req, unsigned status, const struct txt *fields)
{
    char line[64];
    struct iovec iov[3];
    int n;

    /* HTTP/1.0 knows no interim responses (RFC 9110 section 15.2). */
    if (req->http->proto != 11)
        return (0);
    n = snprintf(line, sizeof line, "HTTP/1.1 %u %s\r\n", status, http_reason(status));
    iov[0] = (struct iovec){ line, (size_t)n };
    iov[1] = (struct iovec){ (void *)(uintptr_t)(fields != NULL ? fields->b : ""),
                             fields != NULL ? fields->len : 0 };
    iov[2] = (struct iovec){ (void *)(uintptr_t) "\r\n", 2 };
    if (sess_writev(req->sp, iov, 3, deadline()) != 0) {
        req->close = true;
        return (-1);
    }
    return (1);
}

const struct tp_ops h1t_ops = {
    .name = "HTTP/1.1",
    .stored_fields = true,
    .head = h1t_head,
    .body = h1t_body,
    .file = h1t_file,
    .body_fsegs = h1t_body_fsegs,
    .end = h1t_end,
    .abort = h1t_abort,
    .writable = h1t_writable,
    .interim = h1t_interim,
    .body_next = h1t_body_next,
    .tunnel = h1t_tunnel,
    .park = h1t_park,
    .resume = h1t_resume,
    .drop = h1t_drop,
};
