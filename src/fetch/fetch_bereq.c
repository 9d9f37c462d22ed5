/*
 * The backend request, built once per attempt by one function for every
 * kind of fetch -- a pass, a miss, a revalidation, a background refresh --
 * from the client's request head and what the busy object knows of the
 * client: hop-by-hop fields removed, X-Forwarded-For and -Proto, Via, our
 * own framing.  So the client's scheme reaches the backend the same way
 * whether a request or a background refresh asks.
 *
 * Upgrade and Connection are hop-by-hop and removed, except for an
 * upgrade (bo->upgrade: the transport found an HTTP/1.1 Upgrade listed in
 * Connection), whose Upgrade goes on with Connection: upgrade alone.  h2c
 * never goes on: we speak HTTP/1.1 to backends, and a backend switching
 * our connection to HTTP/2 would leave it in a protocol we cannot read
 * (the transport never marks an h2c request an upgrade, and a pipe's
 * request loses it here).
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "surogat/be.h"
#include "surogat/defs.h"
#include "surogat/fetch.h"
#include "surogat/gz.h"
#include "surogat/h1.h"
#include "surogat/hsh.h"
#include "surogat/http.h"
#include "surogat/par.h"
#include "surogat/pol.h"
#include "surogat/sb.h"
#include "surogat/ws.h"

#include "fetch_priv.h"

/* Request fields that would turn the full response a miss must store into a 304, 412 or 206. */
static const char *const miss_strip[] = {
    "If-None-Match", "If-Modified-Since", "If-Match", "If-Unmodified-Since", "If-Range", "Range",
};

/* One X-Forwarded-For: what earlier proxies said, then the client.  -1: the workspace is full. */
static int
add_xff(struct busyobj *bo, struct http *bq)
{
    size_t xfflen = strlen(bo->client_ip) + 1, n = 0;
    char *xff;

    for (unsigned i = 0; i < bq->nhdr; i++)
        if (http_name_eq(&bq->hdr[i].name, "X-Forwarded-For"))
            xfflen += bq->hdr[i].val.len + 2;
    xff = ws_alloc(bo->ws, xfflen);
    if (xff == NULL)
        return (-1);
    for (unsigned i = 0; i < bq->nhdr; i++) {
        if (!http_name_eq(&bq->hdr[i].name, "X-Forwarded-For"))
            continue;
        memcpy(xff + n, bq->hdr[i].val.b, bq->hdr[i].val.len);
        n += bq->hdr[i].val.len;
        memcpy(xff + n, ", ", 2);
        n += 2;
    }
    memcpy(xff + n, bo->client_ip, strlen(bo->client_ip));
    n += strlen(bo->client_ip);
    http_unset(bq, "X-Forwarded-For");
    http_unset(bq, "X-Forwarded-Proto");
    AZ(http_add(bq, TXT_LIT("X-Forwarded-For"), (struct txt){ xff, n }));
    AZ(http_add(bq, TXT_LIT("X-Forwarded-Proto"),
                bo->client_tls ? TXT_LIT("https") : TXT_LIT("http")));
    return (0);
}

/* The client's Upgrade fields onto bq, with the one connection option they need. */
static void
add_upgrade(const struct http *hp, struct http *bq)
{
    for (unsigned i = 0; i < hp->nhdr; i++)
        if (http_name_eq(&hp->hdr[i].name, "Upgrade"))
            AZ(http_add(bq, hp->hdr[i].name, hp->hdr[i].val));
    AZ(http_add(bq, TXT_LIT("Connection"), TXT_LIT("upgrade")));
}

/* A head of nhdr fields and room for ours, in workspace; NULL when it is full. */
static struct http *
new_head(struct busyobj *bo, const struct http *hp, unsigned extra)
{
    unsigned nhdr = hp->nhdr + extra + (pol_active() ? POL_HDR_ROOM : 0);
    struct http *bq = ws_alloc(bo->ws, sizeof *bq);
    struct http_hdr *hdrs = ws_alloc(bo->ws, nhdr * sizeof *hdrs);

    if (hdrs == NULL || bq == NULL)
        return (NULL);
    http_init(bq, hdrs, nhdr);
    bq->method = hp->method;
    bq->url = hp->url;
    bq->proto = hp->proto;
    memcpy(hdrs, hp->hdr, hp->nhdr * sizeof *hdrs);
    bq->nhdr = hp->nhdr;
    return (bq);
}

struct http *
fetch_pipe_bereq(struct busyobj *bo)
{
    struct http *bq;

    OBJ_CHECK(bo, BUSYOBJ_MAGIC);
    if ((bq = new_head(bo, bo->creq, 4)) == NULL)
        return (NULL);
    if (par.xff && bo->client_ip[0] != '\0' && add_xff(bo, bq) != 0)
        return (NULL);
    if (!bo->upgrade) {
        /* No switch may follow: the backend must not answer 101, nor read on for itself. */
        http_unset(bq, "Upgrade");
        http_unset(bq, "HTTP2-Settings");
        http_unset(bq, "Connection");
        AZ(http_add(bq, TXT_LIT("Connection"), TXT_LIT("close")));
    }
    return (bq);
}

/* The request of a pass, a miss or a refresh; NULL when the workspace is full. */
static struct http *
build(struct busyobj *bo)
{
    const struct http *hp = bo->creq;
    bool miss = bo->oc != NULL;
    struct http *bq;
    char *ae = NULL;

    /* Room for what is added below: 10 at most, and the framing. */
    if ((bq = new_head(bo, hp, 12)) == NULL)
        return (NULL);
    /* A miss fetches the body even for HEAD: it is what the cache stores. */
    if (miss && bo->head_only)
        bq->method = TXT_LIT("GET");
    http_strip_hop_by_hop(bq);
    if (bo->upgrade && !miss)
        add_upgrade(hp, bq);
    for (size_t i = 0; miss && i < ARRAY_LEN(miss_strip); i++)
        http_unset(bq, miss_strip[i]);
    if (miss && (ae = ws_alloc(bo->ws, GZ_AE_OFFER_MAX)) == NULL)
        return (NULL);
    if (miss && par.http_gzip_support) {
        /*
         * The object serves every client, so it is fetched in a coding
         * we can undo for any of them (fetch_gz.c).
         */
        http_unset(bq, "Accept-Encoding");
        /* An include is best gzip: a page splices it into its own stream whole. */
        AZ(http_add(bq, TXT_LIT("Accept-Encoding"),
                    bo->include ? TXT_LIT("gzip")
                                : (struct txt){ ae, gz_ae_offer(ae, GZ_AE_OFFER_MAX) }));
    } else if (miss) {
        /* The object is stored as the backend answers: under the value hsh_set_vary() keeps. */
        const char *norm = gz_ae_norm(hp);
        http_unset(bq, "Accept-Encoding");
        if (norm != NULL)
            AZ(http_add(bq, TXT_LIT("Accept-Encoding"), (struct txt){ norm, strlen(norm) }));
    }
    if (bo->stale.oc != NULL) {
        /* Revalidation (RFC 9111 section 4.3.1): ask whether our stale copy still holds. */
        const struct cobj *so = bo->stale.oc;
        struct txt v;
        if (hsh_head_field(so, "ETag", &v)) {
            /* Our own weak ETag of a body we encoded, as the origin knows it. */
            if (so->form != HSH_FORM_UNKNOWN && (so->form & GZ_FORM_MADE) &&
                gz_etag_origin(&v, (enum gz_coding)(so->form & GZ_FORM_CODING), bo->ws) != 0)
                return (NULL);
            AZ(http_add(bq, TXT_LIT("If-None-Match"), v));
        }
        if (hsh_head_field(so, "Last-Modified", &v))
            AZ(http_add(bq, TXT_LIT("If-Modified-Since"), v));
    }
    if (par.xff && bo->client_ip[0] != '\0' && add_xff(bo, bq) != 0)
        return (NULL);
    if (par.via)
        AZ(http_add(bq, TXT_LIT("Via"),
                    hp->proto == 10 ? TXT_LIT("1.0 surogat") : TXT_LIT("1.1 surogat")));
    if (http_find(bq, "Host") == NULL)
        AZ(http_add(bq, TXT_LIT("Host"),
                    (struct txt){ bo->be->hostport, strlen(bo->be->hostport) }));
    return (bq);
}

/*
 * The framing we send is ours, stated once, whatever the client wrote.
 * -1 when the workspace, or a pipe's head filled by its hook, is full.
 */
static int
add_framing(struct busyobj *bo, struct http *bq)
{
    char *cl;

    http_unset(bq, "Content-Length");
    http_unset(bq, "Transfer-Encoding"); /* a pipe's request still has the client's */
    if (bo->body == H1_BODY_CHUNKED)
        return (http_add(bq, TXT_LIT("Transfer-Encoding"), TXT_LIT("chunked")));
    if (bo->body != H1_BODY_LENGTH)
        return (0);
    if ((cl = ws_alloc(bo->ws, 24)) == NULL)
        return (-1);
    return (http_add(
        bq, TXT_LIT("Content-Length"),
        (struct txt){ cl, (size_t)snprintf(cl, 24, "%llu", (unsigned long long)bo->clen) }));
}

enum fetch_result
fetch__bereq(struct busyobj *bo, struct txt *head)
{
    struct http *bq = bo->pipe_bereq != NULL ? bo->pipe_bereq : build(bo);
    struct sb sb;
    size_t room;
    char *buf;

    if (bq == NULL || add_framing(bo, bq) != 0)
        return (FETCH_E_OVERFLOW);
    bq->proto = 11; /* what we speak to backends, whatever the client spoke */
    bo->bereq = bq;
    if (bo->pol != NULL)
        bo->pol->bereq = bq;
    /* A pipe's request was the pipe hook's to change. */
    if (bo->pipe_bereq == NULL && pol_active() && pol_backend_fetch(bo->pol, bq) != POL_FETCH)
        return (FETCH_E_POLICY);
    buf = ws_reserve_all(bo->ws, &room);
    sb_init(&sb, buf, room);
    h1_write_request(&sb, bq);
    if (!sb_ok(&sb)) {
        ws_release(bo->ws, 0);
        return (FETCH_E_OVERFLOW);
    }
    ws_release(bo->ws, sb.len + 1);
    *head = (struct txt){ buf, sb.len };
    return (FETCH_OK);
}
