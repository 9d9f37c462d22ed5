/*
 * memtp -- a memory transport for the deliverer's unit tests: it records
 * what a real one would frame -- the head (status, reason, fields,
 * announced length, whether a body follows), the body bytes, the end, an
 * abort; given a stored head's fields encoded or as text.  Included by one
 * test file each.
 */
#ifndef SUROGAT_TEST_MEMTP_H
#define SUROGAT_TEST_MEMTP_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "unit.h"
#include "surogat/req.h"
#include "surogat/sb.h"
#include "surogat/shd.h"
#include "surogat/tp.h"
#include "surogat/wrk.h"
#include "surogat/ws.h"

/* What the memory transport saw. */
static struct {
    unsigned status;
    char reason[128];
    char fields[4096];
    uint64_t len;
    bool body_follows;
    char body[65536];
    size_t blen;
    unsigned heads, ends, aborts;
    bool fail_writes; /* a client that is gone */
    bool full;        /* a client that reads slowly */
} seen;

static int
mem_head(struct req *req, const struct tp_head *h)
{
    struct sb sb;

    seen.heads++;
    seen.status = h->status;
    snprintf(seen.reason, sizeof seen.reason, "%.*s", (int)h->reason.len,
             h->reason.len > 0 ? h->reason.b : "");
    sb_init(&sb, seen.fields, sizeof seen.fields);
    if (h->stored != NULL) {
        /* Only to mem_stored_ops: decoded as a transport writes them, into exactly their room. */
        char *f = malloc(h->stored->room > 0 ? h->stored->room : 1);
        ck_assert(req->tp->stored_fields);
        ck_assert_ptr_nonnull(f);
        sb_bcat(&sb, f, shd_decode_fields(h->stored, f));
        free(f);
    }
    for (unsigned i = 0; i < h->nblock; i++)
        sb_bcat(&sb, h->block[i].b, h->block[i].len);
    ck_assert(sb_ok(&sb));
    seen.len = h->len;
    seen.body_follows = h->body;
    req->status = h->status;
    return (0);
}

static int
mem_body(struct req *req, struct iovec *iov, int n)
{
    if (seen.fail_writes)
        return (-1);
    for (int i = 0; i < n; i++) {
        ck_assert_uint_le(seen.blen + iov[i].iov_len, sizeof seen.body);
        memcpy(seen.body + seen.blen, iov[i].iov_base, iov[i].iov_len);
        seen.blen += iov[i].iov_len;
        req->resp_bytes += iov[i].iov_len;
    }
    return (0);
}

static int
mem_file(struct req *req, int fd, off_t off, size_t len)
{
    ck_assert_uint_le(seen.blen + len, sizeof seen.body);
    ck_assert_int_eq(pread(fd, seen.body + seen.blen, len, off), (ssize_t)len);
    seen.blen += len;
    req->resp_bytes += len;
    return (0);
}

static int
mem_end(struct req *req)
{
    (void)req;
    seen.ends++;
    return (0);
}

static bool
mem_abort(struct req *req)
{
    seen.aborts++;
    req->abort = true;
    return (seen.blen > 0);
}

/* A client whose socket is full: a miss with nothing stored must still wait for it. */
static bool
mem_writable(struct req *req)
{
    (void)req;
    return (!seen.full);
}

#define MEM_OPS                                                                     \
    .name = "memory", .writable = mem_writable, .head = mem_head, .body = mem_body, \
    .file = mem_file, .end = mem_end, .abort = mem_abort

static const struct tp_ops mem_ops = { MEM_OPS };
/* The same transport taking a stored head's fields encoded (tp_ops.stored_fields), as h1t does. */
static const struct tp_ops mem_stored_ops = { MEM_OPS, .stored_fields = true };

/* A GET for url as a transport would hand it over, answered through the memory transport. */
static void
memtp_req(struct req *req, struct wrk *wrk, char *wsbuf, size_t wslen, struct http_hdr *hdrs,
          unsigned nhdr, const char *url)
{
    memset(&seen, 0, sizeof seen);
    memset(wrk, 0, sizeof *wrk);
    wrk->magic = WRK_MAGIC;
    ws_init(&wrk->ws, wsbuf, wslen);
    memset(req, 0, sizeof *req);
    req->magic = REQ_MAGIC;
    req->wrk = wrk;
    req->ws = &wrk->ws;
    req->tp = &mem_ops;
    http_init(req->http, hdrs, nhdr);
    req->http->method = TXT_LIT("GET");
    req->http->url = (struct txt){ url, strlen(url) };
    req->http->proto = 11;
}

#endif
