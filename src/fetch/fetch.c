/*
 * The backend transaction of a pass: request out, response back, body
 * streamed from the backend buffer to the client as it arrives.
 *
 * Runs on the worker of the client request.  The backend connection
 * belongs to this function from bcp_get() until it is recycled (the
 * response was complete and the backend keeps the connection) or closed.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "surogat/bcp.h"
#include "surogat/be.h"
#include "surogat/defs.h"
#include "surogat/fetch.h"
#include "surogat/cc.h"
#include "surogat/fresh.h"
#include "surogat/h1.h"
#include "surogat/hsh.h"
#include "surogat/http.h"
#include "surogat/par.h"
#include "surogat/req.h"
#include "surogat/sb.h"
#include "surogat/sess.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/vio.h"
#include "surogat/wrk.h"

#define OUT_IOV 64

/* Client writes gathered into one writev(2): the head with the first body bytes. */
struct out {
    struct iovec iov[OUT_IOV];
    char chdr[OUT_IOV / 3 + 1][H1_CHUNK_HDR_MAX];
    int niov;
    int nchdr;
    uint64_t body_bytes; /* body bytes queued, for the log */
};

enum be_head {
    BEH_OK,
    BEH_RETRY,   /* a reused connection was dead before any byte came back */
    BEH_TIMEOUT, /* 504 */
    BEH_BAD,     /* 502 */
};

struct fetch {
    struct req *req;
    struct be *be;
    struct bcp_conn *conn;
    struct http resp[1];
    size_t be_len;       /* bytes in wrk->be */
    size_t be_pos;       /* first unconsumed byte in wrk->be */
    enum h1_body body;
    uint64_t clen;
    bool be_keepalive;   /* the backend allows reuse of the connection */
    bool chunk_out;      /* we chunk the body towards the client */
    bool body_to_client; /* false for HEAD and 304: the body is only stored */
    unsigned status_override; /* 304 for a conditional miss, or 0 */
    struct cobj *oc;     /* the busy object being filled, or NULL for a pass */
    struct hsh_stale stale; /* a stale copy: to revalidate, or to serve on error */
    double t_req;        /* tim_real() when the request went out */
    double t_resp;       /* tim_real() when the response head arrived */
};

static int
out_flush(struct req *req, struct out *o)
{
    int rv = 0;

    if (o->niov > 0) {
        if (req->t_first == 0)
            req->t_first = tim_mono();
        rv = vio_writev(req->sp->fd, o->iov, o->niov, req_send_deadline(req));
    }
    if (rv == 0) {
        req->resp_bytes += o->body_bytes;
        STAT_ADD(resp_body_bytes, o->body_bytes);
    }
    o->niov = 0;
    o->nchdr = 0;
    o->body_bytes = 0;
    return (rv);
}

static int
out_add(struct req *req, struct out *o, const void *p, size_t len)
{
    if (len == 0)
        return (0);
    if (o->niov == OUT_IOV && out_flush(req, o) != 0)
        return (-1);
    o->iov[o->niov].iov_base = (void *)(uintptr_t)p;
    o->iov[o->niov].iov_len = len;
    o->niov++;
    return (0);
}

/* Body bytes, chunked or raw as this response is delivered. */
static int
out_body(struct fetch *f, struct out *o, const char *p, size_t len)
{
    struct req *req = f->req;

    if (len == 0)
        return (0);
    if (f->oc != NULL && hsh_append(f->oc, p, len) != 0)
        hsh_abandon(&f->oc, 0); /* no room: the client still gets everything */
    if (!f->body_to_client)
        return (0);
    if (f->chunk_out) {
        if ((o->niov + 3 > OUT_IOV || o->nchdr == (int)ARRAY_LEN(o->chdr)) &&
            out_flush(req, o) != 0)
            return (-1);
        size_t hl = h1_chunk_header(o->chdr[o->nchdr], len);
        if (out_add(req, o, o->chdr[o->nchdr++], hl) != 0)
            return (-1);
    }
    if (out_add(req, o, p, len) != 0)
        return (-1);
    o->body_bytes += len;
    if (f->chunk_out && out_add(req, o, "\r\n", 2) != 0)
        return (-1);
    return (0);
}

/* ---- the backend request ---- */

/* Build the backend request head into workspace.  NULL on overflow. */
/* Request fields that would turn the full response a miss must store into a 304, 412 or 206. */
static const char *const miss_strip[] = {
    "If-None-Match", "If-Modified-Since", "If-Match", "If-Unmodified-Since", "If-Range", "Range",
};

/* Find a field of a stored head; the stored head is ours, so it is well-formed. */
static bool
stored_field(const struct cobj *oc, const char *name, struct txt *val)
{
    const char *p = memchr(oc->head, '\n', oc->head_len), *e = oc->head + oc->head_len;
    size_t nl = strlen(name);

    for (p = p + 1; p < e;) {
        const char *eol = memchr(p, '\n', (size_t)(e - p));
        if (eol == NULL)
            break;
        if ((size_t)(eol - p) > nl + 1 && p[nl] == ':' && strncasecmp(p, name, nl) == 0) {
            const char *v = p + nl + 1, *ve = eol[-1] == '\r' ? eol - 1 : eol;
            while (v < ve && (*v == ' ' || *v == '\t'))
                v++;
            *val = (struct txt){ v, (size_t)(ve - v) };
            return (true);
        }
        p = eol + 1;
    }
    return (false);
}

static struct txt
build_bereq(struct req *req, struct be *be, bool miss, const struct cobj *stale)
{
    struct http *hp = req->http;
    struct http_hdr *hdrs;
    struct http bereq;
    struct sb sb;
    char *buf, *xff;
    size_t room, xfflen = 0, n;
    struct txt empty = { NULL, 0 };

    hdrs = ws_alloc(&req->wrk->ws, (hp->nhdr + 10) * sizeof *hdrs);
    if (hdrs == NULL)
        return (empty);
    http_init(&bereq, hdrs, hp->nhdr + 10);
    bereq.method = hp->method;
    /* A miss fetches the body even for HEAD: it is what the cache stores. */
    if (miss && req->head_only)
        bereq.method = TXT_LIT("GET");
    bereq.url = hp->url;
    bereq.proto = 11;
    memcpy(hdrs, hp->hdr, hp->nhdr * sizeof *hdrs);
    bereq.nhdr = hp->nhdr;
    http_strip_hop_by_hop(&bereq);
    for (size_t i = 0; miss && i < ARRAY_LEN(miss_strip); i++)
        http_unset(&bereq, miss_strip[i]);
    if (stale != NULL) {
        /* Revalidation (RFC 9111 section 4.3.1): ask whether our stale copy still holds. */
        struct txt v;
        if (stored_field(stale, "ETag", &v))
            AZ(http_add(&bereq, TXT_LIT("If-None-Match"), v));
        if (stored_field(stale, "Last-Modified", &v))
            AZ(http_add(&bereq, TXT_LIT("If-Modified-Since"), v));
    }
    if (par.xff) {
        /* One X-Forwarded-For with the client appended to what earlier proxies said. */
        for (unsigned i = 0; i < bereq.nhdr; i++)
            if (http_name_eq(&bereq.hdr[i].name, "X-Forwarded-For"))
                xfflen += bereq.hdr[i].val.len + 2;
        xfflen += strlen(req->sp->client_ip) + 1;
        xff = ws_alloc(&req->wrk->ws, xfflen);
        if (xff == NULL)
            return (empty);
        n = 0;
        for (unsigned i = 0; i < bereq.nhdr; i++) {
            if (!http_name_eq(&bereq.hdr[i].name, "X-Forwarded-For"))
                continue;
            memcpy(xff + n, bereq.hdr[i].val.b, bereq.hdr[i].val.len);
            n += bereq.hdr[i].val.len;
            memcpy(xff + n, ", ", 2);
            n += 2;
        }
        memcpy(xff + n, req->sp->client_ip, strlen(req->sp->client_ip));
        n += strlen(req->sp->client_ip);
        http_unset(&bereq, "X-Forwarded-For");
        http_unset(&bereq, "X-Forwarded-Proto");
        AZ(http_add(&bereq, TXT_LIT("X-Forwarded-For"), (struct txt){ xff, n }));
        AZ(http_add(&bereq, TXT_LIT("X-Forwarded-Proto"), TXT_LIT("http")));
    }
    if (par.via)
        AZ(http_add(&bereq, TXT_LIT("Via"),
                    hp->proto == 10 ? TXT_LIT("1.0 surogat") : TXT_LIT("1.1 surogat")));
    if (http_find(&bereq, "Host") == NULL)
        AZ(http_add(&bereq, TXT_LIT("Host"), (struct txt){ be->hostport, strlen(be->hostport) }));
    /* The framing we send is ours, stated once, whatever the client wrote. */
    http_unset(&bereq, "Content-Length");
    if (req->body == H1_BODY_CHUNKED) {
        AZ(http_add(&bereq, TXT_LIT("Transfer-Encoding"), TXT_LIT("chunked")));
    } else if (req->body == H1_BODY_LENGTH) {
        char *cl = ws_alloc(&req->wrk->ws, 24);
        if (cl == NULL)
            return (empty);
        AZ(http_add(&bereq, TXT_LIT("Content-Length"),
                    (struct txt){ cl, (size_t)snprintf(cl, 24, "%llu",
                                                       (unsigned long long)req->clen) }));
    }
    buf = ws_reserve_all(&req->wrk->ws, &room);
    sb_init(&sb, buf, room);
    h1_write_request(&sb, &bereq);
    if (!sb_ok(&sb)) {
        ws_release(&req->wrk->ws, 0);
        return (empty);
    }
    ws_release(&req->wrk->ws, sb.len + 1);
    return ((struct txt){ buf, sb.len });
}

/*
 * Send the head and stream the request body.  0 sent; -1 the backend
 * failed (retryable when nothing of the body was consumed); -2 the
 * client failed while we read its body.
 */
static int
send_bereq(struct fetch *f, struct txt head)
{
    struct req *req = f->req;
    int fd = f->conn->fd;
    double tmo = be_between_bytes_timeout(f->be);
    char chdr[H1_CHUNK_HDR_MAX];
    struct iovec iov[4];
    const char *data;
    ssize_t n;

    iov[0].iov_base = (void *)(uintptr_t)head.b;
    iov[0].iov_len = head.len;
    if (req->body == H1_BODY_NONE)
        return (vio_writev(fd, iov, 1, tim_mono() + tmo) == 0 ? 0 : -1);
    /* First body piece with the head, so small uploads take one write. */
    n = req_body_next(req, &data);
    for (int first = 1;; first = 0) {
        int k = first ? 1 : 0;
        if (n < 0)
            return (-2);
        if (req->body == H1_BODY_CHUNKED) {
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
        if (k > 0 && vio_writev(fd, iov, k, tim_mono() + tmo) != 0)
            return (-1);
        if (n == 0)
            return (0);
        n = req_body_next(req, &data);
    }
}

/* ---- the backend response ---- */

static enum be_head
read_beresp_head(struct fetch *f)
{
    struct wrk *wrk = f->req->wrk;
    struct h1_limits lim = {
        .max_head = par.http_resp_size,
        .max_line = par.http_resp_size,
        .max_hdr = par.http_max_hdr,
    };
    double deadline = tim_mono() + be_first_byte_timeout(f->be);
    size_t used, room = par.http_resp_size + 1;
    enum h1_status st;
    ssize_t n;

    if (room > wrk->be_size)
        room = wrk->be_size;
    f->be_len = 0;
    for (;;) {
        if (f->be_len > 0) {
            st = h1_parse_response(wrk->be, f->be_len, &lim, f->resp, &used);
            if (st == H1_DONE && f->resp->status >= 100 && f->resp->status < 200 &&
                f->resp->status != 101) {
                /* Interim responses (100, 103) are for the backend's peer: skip them. */
                memmove(wrk->be, wrk->be + used, f->be_len - used);
                f->be_len -= used;
                continue;
            }
            if (st == H1_DONE) {
                f->be_pos = used;
                return (f->resp->status == 101 ? BEH_BAD : BEH_OK);
            }
            if (st != H1_MORE)
                return (BEH_BAD);
        }
        if (f->be_len >= room)
            return (BEH_BAD);
        n = vio_read_wait(f->conn->fd, wrk->be + f->be_len, room - f->be_len, deadline);
        if (n > 0) {
            if (f->be_len == 0)
                deadline = tim_mono() + be_between_bytes_timeout(f->be);
            f->be_len += (size_t)n;
            continue;
        }
        if (n < 0 && errno == ETIMEDOUT)
            return (BEH_TIMEOUT);
        /* EOF or reset before a single byte on a reused connection: it was stale. */
        if (f->be_len == 0 && f->conn->reused)
            return (BEH_RETRY);
        return (BEH_BAD);
    }
}

/* Build the client response head from the backend's.  -1 on workspace overflow. */
static int
build_resp_head(struct fetch *f, struct out *o)
{
    struct req *req = f->req;
    struct http *be = f->resp;
    struct http resp;
    struct http_hdr *hdrs;
    char *date, *buf;
    struct sb sb;
    size_t room;

    hdrs = ws_alloc(&req->wrk->ws, (be->nhdr + 7) * sizeof *hdrs);
    if (hdrs == NULL)
        return (-1);
    http_init(&resp, hdrs, be->nhdr + 7);
    memcpy(hdrs, be->hdr, be->nhdr * sizeof *hdrs);
    resp.nhdr = be->nhdr;
    resp.proto = 11;
    resp.status = be->status;
    resp.reason = be->reason.len > 0 ? be->reason : (struct txt){ http_reason(be->status),
                                                                   strlen(http_reason(be->status)) };
    if (f->status_override != 0) {
        resp.status = f->status_override;
        resp.reason = (struct txt){ http_reason(resp.status), strlen(http_reason(resp.status)) };
    }
    http_strip_hop_by_hop(&resp);
    /* Targeted fields are addressed to this cache, not to clients (RFC 9213 section 2.1). */
    http_unset(&resp, "CDN-Cache-Control");
    http_unset(&resp, "Surrogate-Control");
    if (http_find(&resp, "Date") == NULL) {
        date = ws_alloc(&req->wrk->ws, TIM_HTTP_DATE_LEN + 1);
        if (date == NULL)
            return (-1);
        tim_http_date(tim_real(), date);
        AZ(http_add(&resp, TXT_LIT("Date"), (struct txt){ date, TIM_HTTP_DATE_LEN }));
    }
    if (par.via)
        AZ(http_add(&resp, TXT_LIT("Via"),
                    be->proto == 10 ? TXT_LIT("1.0 surogat") : TXT_LIT("1.1 surogat")));
    f->chunk_out = false;
    if (f->body == H1_BODY_LENGTH) {
        char *cl = ws_alloc(&req->wrk->ws, 24);
        if (cl == NULL)
            return (-1);
        http_unset(&resp, "Content-Length");
        AZ(http_add(&resp, TXT_LIT("Content-Length"),
                    (struct txt){ cl, (size_t)snprintf(cl, 24, "%llu",
                                                       (unsigned long long)f->clen) }));
    }
    if ((f->body == H1_BODY_CHUNKED || f->body == H1_BODY_EOF) && f->status_override == 0) {
        if (req->http->proto == 11) {
            f->chunk_out = true;
            AZ(http_add(&resp, TXT_LIT("Transfer-Encoding"), TXT_LIT("chunked")));
        } else {
            req->close = true; /* an HTTP/1.0 client learns the end from the close */
        }
    }
    if (par.cache_status)
        AZ(http_add(&resp, TXT_LIT("Cache-Status"),
                    f->oc != NULL ? TXT_LIT("surogat; fwd=miss; stored")
                    : *req->cache == 'M' ? TXT_LIT("surogat; fwd=miss")
                                         : TXT_LIT("surogat; fwd=bypass")));
    if (req->close || req->want_close || sess_draining())
        AZ(http_add(&resp, TXT_LIT("Connection"), TXT_LIT("close")));
    else if (req->keepalive_10)
        AZ(http_add(&resp, TXT_LIT("Connection"), TXT_LIT("keep-alive")));
    buf = ws_reserve_all(&req->wrk->ws, &room);
    sb_init(&sb, buf, room);
    h1_write_response(&sb, &resp);
    if (!sb_ok(&sb)) {
        ws_release(&req->wrk->ws, 0);
        return (-1);
    }
    ws_release(&req->wrk->ws, sb.len + 1);
    req->status = resp.status;
    STAT_ADD(resp_head_bytes, sb.len);
    return (out_add(req, o, buf, sb.len) == 0 ? 0 : -1);
}

/*
 * Stream the body.  0 complete; -1 the backend failed (the client must be
 * aborted); -2 the client failed.
 */
static int
deliver_body(struct fetch *f, struct out *o)
{
    struct req *req = f->req;
    struct wrk *wrk = req->wrk;
    double tmo = be_between_bytes_timeout(f->be);
    uint64_t left = f->clen;
    struct h1_chunk ck;
    enum h1_chunk_status cs;
    const char *data;
    size_t used, len;
    ssize_t n;
    bool done = false;

    if (f->body == H1_BODY_NONE)
        return (out_flush(req, o) == 0 ? 0 : -2);
    if (f->body == H1_BODY_CHUNKED)
        h1_chunk_init(&ck, par.http_chunk_ext_max);
    while (!done) {
        /* Consume what is buffered from be_pos to be_len. */
        switch (f->body) {
        case H1_BODY_LENGTH:
            len = f->be_len - f->be_pos;
            if (len > left)
                len = (size_t)left;
            if (out_body(f, o, wrk->be + f->be_pos, len) != 0)
                return (-2);
            f->be_pos += len;
            left -= len;
            done = left == 0;
            break;
        case H1_BODY_CHUNKED:
            while (f->be_pos < f->be_len && !done) {
                cs = h1_chunk_decode(&ck, wrk->be + f->be_pos, f->be_len - f->be_pos, &used,
                                     &data, &len);
                f->be_pos += used;
                if (cs == H1_CHUNK_ERROR) {
                    STAT_INC(backend_bad_resp);
                    return (-1);
                }
                if (cs == H1_CHUNK_DATA && out_body(f, o, data, len) != 0)
                    return (-2);
                done = cs == H1_CHUNK_DONE;
            }
            break;
        case H1_BODY_EOF:
            if (out_body(f, o, wrk->be + f->be_pos, f->be_len - f->be_pos) != 0)
                return (-2);
            f->be_pos = f->be_len;
            break;
        default:
            SRG_WRONG("response body framing");
        }
        if (done)
            break;
        /* Everything buffered is queued for the client: send it before reusing the buffer. */
        if (out_flush(req, o) != 0)
            return (-2);
        f->be_pos = f->be_len = 0;
        n = vio_read(f->conn->fd, wrk->be, wrk->be_size, tim_mono() + tmo);
        if (n > 0) {
            f->be_len = (size_t)n;
            continue;
        }
        if (n == 0 && f->body == H1_BODY_EOF) {
            f->be_keepalive = false;
            break;
        }
        return (-1);
    }
    if (f->chunk_out && f->body_to_client && out_add(req, o, "0\r\n\r\n", 5) != 0)
        return (-2);
    /* Bytes past the end of the body: the backend is out of step, do not reuse it. */
    if (f->be_pos != f->be_len)
        f->be_keepalive = false;
    return (out_flush(req, o) == 0 ? 0 : -2);
}

static bool
can_retry(const struct req *req, unsigned retries)
{
    return (retries < par.backend_max_retries && req->body == H1_BODY_NONE &&
            http_method_idempotent(&req->http->method));
}

/* Whether the stale copy may stand in for a failed backend (RFC 5861 section 4). */
static bool
stale_usable(const struct fetch *f)
{
    return (f->stale.oc != NULL && (f->stale.verdict == FRESH_V_STALE_IF_ERROR ||
                                    f->stale.verdict == FRESH_V_STALE_WHILE_REVALIDATE));
}

static void
serve_stale(struct fetch *f)
{
    STAT_INC(cache_stale_if_error);
    req_deliver_obj(f->req, f->stale.oc, tim_real());
    f->req->cache = "STALE";
}

static void
fail(struct fetch *f, unsigned status)
{
    if (f->oc != NULL)
        hsh_abandon(&f->oc, 0); /* waiters retry: one of them fetches again */
    if (f->conn != NULL)
        bcp_close(&f->conn);
    if (status >= 500 && stale_usable(f)) {
        serve_stale(f);
        return;
    }
    (void)req_synth(f->req, status, NULL);
}

/*
 * A stored head: the status line and fields of the backend response as
 * every later client gets them, minus what is per connection or per
 * delivery (hop-by-hop fields, framing, Age), ending with the empty line.
 * malloc'ed: it lives as long as the object.
 */
static int
store_head(struct fetch *f, const struct cc *rcc)
{
    struct http h;
    struct http_hdr *hdrs;
    struct cobj *oc = f->oc;
    char date[TIM_HTTP_DATE_LEN + 1];
    size_t cap = 512;
    struct sb sb;
    char *buf;

    hdrs = ws_alloc(&f->req->wrk->ws, (f->resp->nhdr + 4) * sizeof *hdrs);
    if (hdrs == NULL)
        return (-1);
    http_init(&h, hdrs, f->resp->nhdr + 4);
    memcpy(hdrs, f->resp->hdr, f->resp->nhdr * sizeof *hdrs);
    h.nhdr = f->resp->nhdr;
    h.proto = 11;
    h.status = f->resp->status;
    h.reason = f->resp->reason.len > 0 ? f->resp->reason
                                        : (struct txt){ http_reason(h.status),
                                                        strlen(http_reason(h.status)) };
    http_strip_hop_by_hop(&h);
    http_unset(&h, "Content-Length");
    http_unset(&h, "Age");
    /* Fields the origin marked private="..." are for the requester only (RFC 9111 5.2.2.7). */
    if (rcc->flags & CC_PRIVATE_FIELDS) {
        for (unsigned i = 0; i < h.nhdr;) {
            if (cc_field_listed(&rcc->private_fields, &h.hdr[i].name))
                h.hdr[i] = h.hdr[--h.nhdr];
            else
                i++;
        }
    }
    /* Targeted fields are for us, not for clients (RFC 9213 section 2.1). */
    http_unset(&h, "CDN-Cache-Control");
    http_unset(&h, "Surrogate-Control");
    if (http_find(&h, "Date") == NULL) {
        tim_http_date(f->t_resp, date);
        AZ(http_add(&h, TXT_LIT("Date"), (struct txt){ date, TIM_HTTP_DATE_LEN }));
    }
    if (par.via)
        AZ(http_add(&h, TXT_LIT("Via"),
                    f->resp->proto == 10 ? TXT_LIT("1.0 surogat") : TXT_LIT("1.1 surogat")));
    for (unsigned i = 0; i < h.nhdr; i++)
        cap += h.hdr[i].name.len + h.hdr[i].val.len + 4;
    buf = malloc(cap);
    AN(buf);
    sb_init(&sb, buf, cap);
    h1_write_response(&sb, &h);
    AN(sb_ok(&sb));
    oc->head = buf;
    oc->head_len = sb.len;
    oc->status = h.status;
    oc->has_validator = http_find(&h, "ETag") != NULL || http_find(&h, "Last-Modified") != NULL;
    return (0);
}

/*
 * The response head is overwritten by body bytes as they stream: copy the
 * fields the cache needs after the response (invalidation) to workspace.
 */
static void
keep_locations(struct fetch *f)
{
    static const char *const names[] = { "Location", "Content-Location" };
    struct req *req = f->req;
    struct txt *loc = ws_alloc(&req->wrk->ws, 2 * sizeof *loc);

    if (loc == NULL)
        return;
    for (int i = 0; i < 2; i++) {
        const struct txt *v = http_value(f->resp, names[i]);
        loc[i].b = v != NULL ? ws_strndup(&req->wrk->ws, v->b, v->len) : NULL;
        loc[i].len = loc[i].b != NULL ? v->len : 0;
    }
    req->resp_loc = loc;
}

/* The workspace ran out: a 500, and the connection closes (what was cut is unknown). */
static void
fail_overflow(struct fetch *f)
{
    STAT_INC(ws_overflow);
    STAT_INC(client_resp_500);
    f->req->close = true;
    fail(f, 500);
}

/* After the response head: keep the busy object only if the response may be stored. */
static void
decide_store(struct fetch *f)
{
    struct req *req = f->req;
    struct fresh_cfg cfg = FRESH_CFG_DEFAULT;
    struct cc qcc, rcc;
    enum fresh_store st;
    double hfm_ttl = par.hitmiss_ttl;

    cfg.default_ttl = par.default_ttl;
    cfg.default_grace = par.default_grace;
    cfg.heuristic_max = par.heuristic_max;
    cc_parse_request(req->http, &qcc);
    cc_parse_response(f->resp, NULL, &rcc);
    st = fresh_storable(req->http, &qcc, f->resp, &rcc, &cfg);
    if (st == FRESH_STORE) {
        fresh_obj_init(&f->oc->fresh, f->resp, &rcc, f->t_req, f->t_resp, &cfg);
        /*
         * Until revalidation exists, an object that every use must
         * revalidate -- stale on arrival (max-age below its Age), or
         * no-cache -- would be stored and never used, and requests would
         * queue behind each other's fetches: treat it as uncacheable.
         */
        if (f->oc->fresh.t_origin + f->oc->fresh.ttl <= f->t_resp ||
            (f->oc->fresh.flags & FRESH_F_NO_CACHE))
            st = FRESH_NOT_CACHEABLE;
    }
    /* A marker must not outlive a reason that belongs to this request alone. */
    if (st == FRESH_NO_STORE_REQ || st == FRESH_AUTHORIZATION || st == FRESH_METHOD)
        hfm_ttl = 0;
    /* Markers and objects alike answer only requests with the same Vary values. */
    if (hsh_set_vary(f->oc, req->http, f->resp) != 0) {
        st = FRESH_VARY_STAR;
        hfm_ttl = 0;
    }
    if (st == FRESH_STORE) {
        if (f->body == H1_BODY_LENGTH)
            f->oc->body.size_hint = f->clen;
        if (store_head(f, &rcc) == 0)
            return;
    }
    STAT_INC(cache_uncacheable);
    hsh_abandon(&f->oc, hfm_ttl);
}

/* Fields a 304 must not change in the stored response (RFC 9111 section 3.2). */
static const char *const keep_on_304[] = {
    "Content-Length", "Content-Encoding", "Content-Range", "Age",
};

/*
 * The backend answered our conditional request with 304: the stale copy
 * is good.  Build its renewed copy -- the stored fields updated with
 * those of the 304 (RFC 9111 section 4.3.4) and the same body -- publish
 * it and deliver it.  -1 if the stored head could not be reused (then the
 * caller answers 502).
 */
static int
revalidated(struct fetch *f)
{
    struct req *req = f->req;
    struct cobj *old = f->stale.oc, *oc = f->oc;
    struct h1_limits lim = { old->head_len + 1, old->head_len + 1, 1024 };
    struct fresh_cfg cfg = FRESH_CFG_DEFAULT;
    struct http oh, upd, merged;
    struct http_hdr *hdrs;
    struct cc rcc;
    unsigned n304 = f->resp->nhdr;
    size_t used, cap = 512;
    struct sb sb;
    char *buf;

    hdrs = ws_alloc(&req->wrk->ws, 1024 * sizeof *hdrs);
    if (hdrs == NULL)
        return (-1);
    http_init(&oh, hdrs, 1024);
    if (h1_parse_response(old->head, old->head_len, &lim, &oh, &used) != H1_DONE)
        return (-1);
    hdrs = ws_alloc(&req->wrk->ws, (oh.nhdr + n304 + 3) * sizeof *hdrs);
    if (hdrs == NULL)
        return (-1);
    http_init(&merged, hdrs, oh.nhdr + n304 + 3);
    memcpy(hdrs, oh.hdr, oh.nhdr * sizeof *hdrs);
    merged.nhdr = oh.nhdr;
    merged.proto = 11;
    merged.status = oh.status;
    merged.reason = oh.reason;
    upd = *f->resp;
    http_strip_hop_by_hop(&upd);
    for (unsigned i = 0; i < upd.nhdr; i++) {
        bool keep = false;
        for (size_t k = 0; k < ARRAY_LEN(keep_on_304) && !keep; k++)
            keep = http_name_eq(&upd.hdr[i].name, keep_on_304[k]);
        if (keep)
            continue;
        /* Replace every stored field of that name with the 304's (all of them, in order). */
        char name[128];
        if (upd.hdr[i].name.len >= sizeof name)
            continue;
        memcpy(name, upd.hdr[i].name.b, upd.hdr[i].name.len);
        name[upd.hdr[i].name.len] = '\0';
        bool first = true;
        for (unsigned j = 0; j < i; j++)
            if (http_name_eq(&upd.hdr[j].name, name))
                first = false;
        if (first)
            http_unset(&merged, name);
        AZ(http_add(&merged, upd.hdr[i].name, upd.hdr[i].val));
    }
    /* A 304 without Date is dated on arrival (RFC 9110 6.6.1), not by the old copy's Date. */
    if (http_find(f->resp, "Date") == NULL) {
        char *date = ws_alloc(&req->wrk->ws, TIM_HTTP_DATE_LEN + 1);
        if (date == NULL)
            return (-1);
        tim_http_date(f->t_resp, date);
        http_unset(&merged, "Date");
        AZ(http_add(&merged, TXT_LIT("Date"), (struct txt){ date, TIM_HTTP_DATE_LEN }));
    }
    cfg.default_ttl = par.default_ttl;
    cfg.default_grace = par.default_grace;
    cfg.heuristic_max = par.heuristic_max;
    cc_parse_response(&merged, NULL, &rcc);
    fresh_obj_init(&oc->fresh, &merged, &rcc, f->t_req, f->t_resp, &cfg);
    for (unsigned i = 0; i < merged.nhdr; i++)
        cap += merged.hdr[i].name.len + merged.hdr[i].val.len + 4;
    buf = malloc(cap);
    AN(buf);
    sb_init(&sb, buf, cap);
    h1_write_response(&sb, &merged);
    AN(sb_ok(&sb));
    oc->head = buf;
    oc->head_len = sb.len;
    oc->status = old->status;
    oc->has_validator = old->has_validator;
    if (old->vary_len > 0) {
        oc->vary = malloc(old->vary_len);
        AN(oc->vary);
        memcpy(oc->vary, old->vary, old->vary_len);
        oc->vary_len = old->vary_len;
    }
    oc->body.size_hint = old->body.len;
    for (const struct sto_seg *s = old->body.first; s != NULL; s = s->next) {
        if (hsh_append(oc, s->data, s->len) != 0) {
            /* No room for the renewed copy: this client still gets the validated one. */
            hsh_abandon(&f->oc, 0);
            req_deliver_obj(req, old, tim_real());
            return (0);
        }
    }
    oc->body_complete = true;
    STAT_INC(cache_revalidated);
    hsh_ref(oc);
    hsh_unbusy(&f->oc);
    req_deliver_obj(req, oc, tim_real());
    req->cache = "REVALIDATED";
    hsh_deref(&oc);
    return (0);
}

/*
 * The backend transaction, for a pass (oc NULL) or a miss filling the
 * busy object oc.
 */
static void
fetch_run(struct req *req, struct be *be, struct cobj *oc, struct hsh_stale *stale)
{
    struct fetch f;
    struct out o;
    struct txt head;
    unsigned retries = 0;
    int rv;

    OBJ_CHECK(req, REQ_MAGIC);
    memset(&f, 0, sizeof f);
    memset(&o, 0, sizeof o);
    f.req = req;
    f.be = be;
    f.oc = oc;
    if (stale != NULL)
        f.stale = *stale; /* borrowed: the caller holds the reference */
    f.body_to_client = !req->head_only;
    req->cache = oc != NULL ? "MISS" : "PASS";
    if (be == NULL) {
        fail(&f, 503);
        return;
    }
    OBJ_CHECK(be, BE_MAGIC);
    req->be_name = be->name;
    head = build_bereq(req, be, oc != NULL, f.stale.oc);
    if (head.b == NULL) {
        fail_overflow(&f);
        return;
    }
    for (;;) {
        switch (bcp_get(be->pool, be_connect_timeout(be), retries > 0, &f.conn)) {
        case BCP_OK:
            break;
        case BCP_E_BUSY:
            STAT_INC(backend_busy);
            fail(&f, 503);
            return;
        case BCP_E_CONNECT:
            STAT_INC(backend_fail);
            fail(&f, 503);
            return;
        }
        if (f.conn->reused)
            STAT_INC(backend_reuse);
        STAT_INC(backend_req);
        f.t_req = tim_real();
        rv = send_bereq(&f, head);
        if (rv == -2) {
            req->close = true;
            if (f.oc != NULL)
                hsh_abandon(&f.oc, 0);
            bcp_close(&f.conn);
            if (req->body_bad) {
                STAT_INC(client_req_400);
                (void)req_synth(req, 400, NULL);
            }
            return; /* otherwise the client is gone: nobody to answer */
        }
        if (rv == -1) {
            if (f.conn->reused && can_retry(req, retries)) {
                bcp_close(&f.conn);
                retries++;
                STAT_INC(backend_retry);
                continue;
            }
            STAT_INC(backend_fail);
            if (req->body != H1_BODY_NONE)
                req->close = true;
            fail(&f, 503);
            return;
        }
        http_init(f.resp, ws_alloc(&req->wrk->ws, par.http_max_hdr * sizeof(struct http_hdr)),
                  par.http_max_hdr);
        if (f.resp->hdr == NULL) {
            fail_overflow(&f);
            return;
        }
        switch (read_beresp_head(&f)) {
        case BEH_OK:
            break;
        case BEH_RETRY:
            if (can_retry(req, retries)) {
                bcp_close(&f.conn);
                retries++;
                STAT_INC(backend_retry);
                continue;
            }
            STAT_INC(backend_bad_resp);
            fail(&f, 502);
            return;
        case BEH_TIMEOUT:
            STAT_INC(backend_timeout);
            fail(&f, 504);
            return;
        case BEH_BAD:
            STAT_INC(backend_bad_resp);
            fail(&f, 502);
            return;
        }
        break;
    }
    f.t_resp = tim_real();
    if (f.stale.oc != NULL && f.oc != NULL && f.resp->status == 304) {
        f.be_keepalive = f.resp->proto == 11 ? !http_has_token(f.resp, "Connection", "close")
                                             : http_has_token(f.resp, "Connection", "keep-alive");
        if (f.be_keepalive && http_find(f.resp, "Content-Length") == NULL &&
            http_find(f.resp, "Transfer-Encoding") == NULL)
            bcp_recycle(&f.conn);
        else
            bcp_close(&f.conn);
        if (revalidated(&f) != 0)
            fail(&f, 502);
        return;
    }
    if (f.resp->status >= 500 && f.resp->status <= 504 && stale_usable(&f)) {
        /* stale-if-error covers the backend's own 5xx too (RFC 5861 section 4). */
        fail(&f, f.resp->status);
        return;
    }
    /* The backend saw HEAD only on a pass: a miss asked it for GET. */
    f.body = h1_resp_body(f.resp, req->head_only && oc == NULL, &f.clen);
    if (f.body == H1_BODY_E_AMBIGUOUS || f.body == H1_BODY_E_CODING) {
        STAT_INC(backend_bad_resp);
        fail(&f, 502);
        return;
    }
    f.be_keepalive = f.resp->proto == 11 ? !http_has_token(f.resp, "Connection", "close")
                                         : http_has_token(f.resp, "Connection", "keep-alive");
    if (oc == NULL && !http_method_idempotent(&req->http->method))
        keep_locations(&f);
    if (oc != NULL) {
        decide_store(&f);
        /*
         * The backend was asked without the client's conditional fields, so
         * that a full object could be stored; answer the client's own
         * condition here.
         */
        if (f.resp->status == 200 && req_not_modified(req, http_value(f.resp, "ETag"),
                                                      http_value(f.resp, "Last-Modified"))) {
            f.status_override = 304;
            f.body_to_client = false;
        }
    }
    if (build_resp_head(&f, &o) != 0) {
        fail_overflow(&f);
        return;
    }
    rv = deliver_body(&f, &o);
    if (f.oc != NULL) {
        if (rv == 0) {
            sto_body_trim(&f.oc->body);
            f.oc->body_complete = true;
            STAT_INC(cache_stored);
            hsh_unbusy(&f.oc);
        } else {
            hsh_abandon(&f.oc, 0);
        }
    }
    if (rv == 0 && f.be_keepalive) {
        bcp_recycle(&f.conn);
        return;
    }
    bcp_close(&f.conn);
    if (rv == -1 && req->t_first == 0) {
        /* Nothing reached the client yet: it can still get a clean 502. */
        req->resp_bytes = 0;
        (void)req_synth(req, 502, NULL);
    } else if (rv == -1) {
        /* The head is out: only a cut connection tells the client the body is short. */
        STAT_INC(fetch_aborted);
        req->abort = true;
    } else if (rv == -2) {
        req->close = true;
    }
}

void
fetch_pass(struct req *req, struct be *be)
{
    STAT_INC(cache_pass);
    fetch_run(req, be, NULL, NULL);
}

void
fetch_miss(struct req *req, struct be *be, struct cobj **ocp, struct hsh_stale *stale)
{
    struct cobj *oc;

    OBJ_TAKE(oc, ocp, COBJ_MAGIC);
    fetch_run(req, be, oc, stale);
    if (stale->oc != NULL)
        hsh_deref(&stale->oc);
}
