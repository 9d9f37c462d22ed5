/*
 * A fetch's response body: read off the backend connection, its framing
 * removed (Content-Length, chunked, the end of the connection), its
 * transfer codings undone (fetch_te.c), through the gzip plan's filter
 * (fetch_gz.c), into the busy object when stored, and to the caller's sink
 * as the client that asked takes it.
 *
 * The sink gets pieces where they lie -- the receive buffer, a filter's
 * output -- and a flush before that memory is reused: a pass costs no copy
 * of its body here.  A sink that fails does not stop a fetch that stores
 * the object: the cache, and the requests streaming from the busy object,
 * still want the rest.
 */
#include "config.h"

#include <errno.h>

#include "surogat/bcp.h"
#include "surogat/be.h"
#include "surogat/defs.h"
#include "surogat/fetch.h"
#include "surogat/h1.h"
#include "surogat/par.h"
#include "surogat/tim.h"
#include "surogat/trace.h"

#include "fetch_priv.h"

/* A sink and the busy object it serves, for the filters' output callbacks. */
struct out {
    struct busyobj *bo;
    const struct fetch_sink *sink;
};

/* A piece for the client, unless it failed or nobody takes the body. */
static int
to_sink(struct out *o, const char *p, size_t len)
{
    struct busyobj *bo = o->bo;

    if (o->sink == NULL || bo->client_failed || len == 0)
        return (0);
    if (o->sink->piece(o->sink->priv, p, len) == 0)
        return (0);
    bo->client_failed = true;
    return (bo->oc != NULL ? 0 : -2);
}

static int
flush_sink(struct out *o)
{
    struct busyobj *bo = o->bo;

    if (o->sink == NULL || bo->client_failed)
        return (0);
    if (o->sink->flush(o->sink->priv) == 0)
        return (0);
    bo->client_failed = true;
    return (bo->oc != NULL ? 0 : -2);
}

/* gz_out_f: the filter's output for the client (the filter reuses its buffer: flushed now). */
static int
gz_client_out(void *priv, const char *p, size_t len)
{
    struct out *o = priv;

    if (to_sink(o, p, len) != 0 || flush_sink(o) != 0)
        return (-1);
    return (0);
}

/*
 * Body bytes, their framing and transfer codings removed: stored, and
 * given to the sink.  0; -1 the body is bad (a corrupt gzip body),
 * FETCH_GZ_BOMB (a gzip bomb); -2 the sink failed and nothing else wants
 * the rest.
 */
static int
body_bytes(struct out *o, const char *p, size_t len)
{
    struct busyobj *bo = o->bo;

    if (len == 0)
        return (0);
    if (bo->esi != NULL) {
        bo->body_off += len;
        return (fetch__esi_body(bo, p, len)); /* stored only: nobody streams an ESI page */
    }
    if (bo->gz != NULL) {
        /* The filter stores what is stored and gives the client its output. */
        int rv = fetch__gz_body(bo, p, len, false, gz_client_out, o);
        bo->body_off += len;
        if (rv != 0 || bo->gz_client)
            return (rv);
    } else {
        if (bo->oc != NULL)
            fetch__store_body(bo, p, len);
        bo->body_off += len;
    }
    return (to_sink(o, p, len));
}

/* gz_out_f: body bytes, transfer coding undone (the decoder reuses its buffer: flushed now). */
static int
te_out(void *priv, const char *p, size_t len)
{
    struct out *o = priv;
    int rv = body_bytes(o, p, len);

    if (rv == 0 && flush_sink(o) != 0)
        rv = -2;
    return (rv);
}

/*
 * What a decoding filter's failure means for the fetch: -1 for a body
 * refused (logged here with its reason, but a gzip bomb fetch_gz.c
 * logged already), -2 for a sink that failed, 0 for none.
 */
static int
body_failed(const struct busyobj *bo, int rv)
{
    switch (rv) {
    case 0:
    case -2:
        return (rv);
    case -1:
        fetch__refused(bo, BCP_R_BAD_GZIP);
        return (-1);
    case FETCH_GZ_BOMB:
        return (-1);
    case FETCH_TE_CORRUPT:
        fetch__refused(bo, BCP_R_BAD_TCODING);
        return (-1);
    case FETCH_TE_BOMB:
        fetch__refused(bo, BCP_R_TCODING_BOMB);
        return (-1);
    default:
        SRG_WRONG("a body filter's result");
    }
}

/* Body bytes off the wire, their framing removed: through the transfer decoder if any. */
static int
body_in(struct out *o, const char *p, size_t len)
{
    struct busyobj *bo = o->bo;

    if (bo->te != NULL)
        return (body_failed(bo, fetch__te_feed(bo->te, p, len, te_out, o)));
    return (body_failed(bo, body_bytes(o, p, len)));
}

static int
read_body(struct busyobj *bo, struct out *o)
{
    double tmo = be_between_bytes_timeout(bo->be);
    uint64_t left = bo->rclen;
    struct h1_chunk ck;
    enum h1_chunk_status cs;
    const char *data;
    size_t used, len;
    ssize_t n;
    int rv;
    bool done = false;

    if (bo->rbody == H1_BODY_NONE) {
        fetch__store_done(bo);
        goto end;
    }
    if (bo->rbody == H1_BODY_CHUNKED)
        h1_chunk_init(&ck, par.http_chunk_ext_max);
    while (!done) {
        /* Consume what is buffered from be_pos to be_len. */
        switch (bo->rbody) {
        case H1_BODY_LENGTH:
            len = bo->be_len - bo->be_pos;
            if (len > left)
                len = (size_t)left;
            if ((rv = body_in(o, bo->rxbuf + bo->be_pos, len)) != 0)
                return (rv);
            bo->be_pos += len;
            left -= len;
            done = left == 0;
            break;
        case H1_BODY_CHUNKED:
            while (bo->be_pos < bo->be_len && !done) {
                cs = h1_chunk_decode(&ck, bo->rxbuf + bo->be_pos, bo->be_len - bo->be_pos, &used,
                                     &data, &len);
                bo->be_pos += used;
                if (cs == H1_CHUNK_ERROR) {
                    fetch__refused(bo, BCP_R_BAD_CHUNK);
                    return (-1);
                }
                if (cs == H1_CHUNK_DATA && (rv = body_in(o, data, len)) != 0)
                    return (rv);
                done = cs == H1_CHUNK_DONE;
            }
            break;
        case H1_BODY_EOF:
            if ((rv = body_in(o, bo->rxbuf + bo->be_pos, bo->be_len - bo->be_pos)) != 0)
                return (rv);
            bo->be_pos = bo->be_len;
            break;
        default:
            SRG_WRONG("response body framing");
        }
        if (done)
            break;
        /*
         * Compressed bytes held back would keep the client and the
         * requests streaming from the object waiting for this batch.
         */
        if (bo->gz != NULL && (rv = fetch__gz_body(bo, NULL, 0, true, gz_client_out, o)) != 0)
            return (body_failed(bo, rv));
        /* Everything buffered went to the sink: it sends it before the buffer is reused. */
        if (flush_sink(o) != 0 || (bo->client_failed && bo->oc == NULL))
            return (-2); /* nobody wants the rest any more */
        bo->be_pos = bo->be_len = 0;
        n = bcp_read(bo->conn, bo->rxbuf, bo->rxsize, tim_mono() + tmo);
        if (n > 0) {
            bo->be_len = (size_t)n;
            continue;
        }
        if (n == 0 && bo->rbody == H1_BODY_EOF) {
            bo->be_keepalive = false;
            break;
        }
        fetch__refused(bo, n < 0 && errno == ETIMEDOUT ? BCP_R_BODY_TIMEOUT : BCP_R_BODY_CLOSED);
        return (-1);
    }
    /* A corrupt or truncated transfer coding or gzip body must fail before the object is out. */
    if (bo->te != NULL && (rv = fetch__te_end(bo->te, te_out, o)) != 0)
        return (body_failed(bo, rv));
    if (bo->gz != NULL && (rv = fetch__gz_end(bo, gz_client_out, o)) != 0)
        return (body_failed(bo, rv));
    if ((rv = fetch__oa_end(bo)) != 0)
        return (body_failed(bo, rv));
    fetch__store_done(bo);
end:
    /*
     * Bytes past the end of the response (its body, or the head of a
     * bodiless one): the backend is out of step, and whatever else it
     * still writes would answer the next request.
     */
    if (bo->be_pos != bo->be_len && bo->be_keepalive) {
        fetch__refused(bo, BCP_R_TRAILING_BYTES);
        bo->be_keepalive = false;
    }
    bo->complete = true;
    return (flush_sink(o) == 0 ? 0 : -2);
}

int
fetch_body(struct busyobj *bo, const struct fetch_sink *sink)
{
    struct out o = { bo, sink };
    int rv;

    OBJ_CHECK(bo, BUSYOBJ_MAGIC);
    if (bo->frame.ncoding > 0 && bo->rbody != H1_BODY_NONE)
        bo->te = fetch__te_new(&bo->frame);
    rv = read_body(bo, &o);
    TRACE_BODY(bo->trace, rv, bo->body_off);
    fetch__te_free(&bo->te);
    return (rv);
}
