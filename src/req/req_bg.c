/*
 * Background refresh (bgfetch): a request that finds a stale object in
 * its stale-while-revalidate or grace window, with nobody refreshing it,
 * is answered with the stale copy at once while a pool task refreshes
 * the object -- revalidating it when it has a validator, so that a 304
 * renews it.
 *
 * The task cannot use the client request: it lives in the client's
 * worker's workspace, gone when the client's task ends.  So
 * req_fetch_bg() copies what the refresh needs to the heap -- the URL,
 * Host, the fields the stale copy's Vary names (so the new object answers
 * the same requests), X-Forwarded-For as it came, and the client's
 * address and scheme -- and the task rebuilds a GET from it in its own
 * workspace and runs the same fetch as a miss (req__fetch()), with nobody
 * to answer.  The backend request is built by the one function that
 * builds every backend request, from the client the copy names, so a TLS
 * client's refresh says X-Forwarded-Proto: https like its miss would.  The
 * conditional fields come from the stale copy's ETag and Last-Modified,
 * added by the fetch itself.  The task owns the busy object and a
 * reference to the stale copy until it ends.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "surogat/be.h"
#include "surogat/defs.h"
#include "surogat/hsh.h"
#include "surogat/http.h"
#include "surogat/par.h"
#include "surogat/pool.h"
#include "surogat/req.h"
#include "surogat/sess.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/trace.h"
#include "surogat/wrk.h"

#include "req_priv.h"

struct bgfetch {
    unsigned magic;
#define BGFETCH_MAGIC 0x7c2e91b4
    struct pool_task task;
    struct be *be;
    struct cobj *oc;        /* the busy object the refresh fills */
    struct hsh_stale stale; /* the stale copy it revalidates (referenced) */
    char client_ip[INET6_ADDRSTRLEN]; /* the client of the request that caused it */
    bool client_tls;
    struct trace_link tl; /* its transaction, linked to the request's; empty: untraced */
    unsigned nfield;
    char buf[]; /* the URL, NUL; then nfield times name, NUL, value, NUL */
};

/* Append "name\0value\0" at *p. */
static void
put_field(char **p, const char *name, size_t nlen, const char *val, size_t vlen)
{
    memcpy(*p, name, nlen);
    (*p)[nlen] = '\0';
    *p += nlen + 1;
    memcpy(*p, val, vlen);
    (*p)[vlen] = '\0';
    *p += vlen + 1;
}

static void
bg_task(struct wrk *wrk, void *priv)
{
    struct bgfetch *bg = priv;
    struct http_hdr *hdrs;
    struct req *req;
    const char *p;

    OBJ_CHECK(bg, BGFETCH_MAGIC);
    wrk_buffers_fit(wrk);
    req = ws_alloc(&wrk->ws, sizeof *req);
    hdrs = ws_alloc(&wrk->ws, (bg->nfield + 1) * sizeof *hdrs);
    AN(req); /* workspace_client's minimum is far above these */
    AN(hdrs);
    memset(req, 0, sizeof *req);
    OBJ_INIT(req, REQ_MAGIC);
    req->wrk = wrk;
    req->ws = &wrk->ws;
    req->bg = true;
    memcpy(req->client_ip, bg->client_ip, sizeof req->client_ip);
    req->client_tls = bg->client_tls;
    req->t_start = tim_real();
    req->t_mono = tim_mono();
    req->body = H1_BODY_NONE;
    req->body_done = true;
    req->trace = trace_bg_begin(req, &bg->tl);
    http_init(req->http, hdrs, bg->nfield + 1);
    req->http->method = TXT_LIT("GET");
    req->http->url = (struct txt){ bg->buf, strlen(bg->buf) };
    req->http->proto = 11;
    p = bg->buf + req->http->url.len + 1;
    for (unsigned i = 0; i < bg->nfield; i++) {
        struct txt n = { p, strlen(p) }, v;
        v = (struct txt){ p + n.len + 1, strlen(p + n.len + 1) };
        AZ(http_add(req->http, n, v));
        p = v.b + v.len + 1;
    }
    STAT_INC(cache_bgfetch);
    req__fetch(req, bg->be, bg->oc, &bg->stale);
    TRACE_REQ_END(req);
    bg->oc = NULL; /* the fetch took it */
    hsh_deref(&bg->stale.oc);
    OBJ_FREE(&bg);
}

void
req_fetch_bg(struct req *req, struct be *be, struct cobj **ocp, struct hsh_stale *stale)
{
    const struct http_hdr *host = http_find(req->http, "Host");
    const struct cobj *so = stale->oc;
    struct bgfetch *bg;
    size_t len = req->http->url.len + 1, xff = 0;
    char *p;

    OBJ_CHECK(so, COBJ_MAGIC);
    if (host != NULL)
        len += 6 + host->val.len;
    len += so->vary_len;
    /* X-Forwarded-For as it came: the fetch appends the client, as for any request. */
    for (unsigned i = 0; i < req->http->nhdr; i++)
        if (http_name_eq(&req->http->hdr[i].name, "X-Forwarded-For"))
            xff += sizeof "X-Forwarded-For" + req->http->hdr[i].val.len + 1;
    len += xff;
    bg = calloc(1, sizeof *bg + len);
    AN(bg);
    bg->magic = BGFETCH_MAGIC;
    bg->be = be;
    OBJ_TAKE(bg->oc, ocp, COBJ_MAGIC);
    bg->stale = *stale;
    stale->oc = NULL;
    p = bg->buf;
    memcpy(p, req->http->url.b, req->http->url.len);
    p += req->http->url.len + 1;
    if (host != NULL) {
        put_field(&p, "Host", 4, host->val.b, host->val.len);
        bg->nfield++;
    }
    /* The stored Vary values are the request's (the lookup matched them); empty: absent. */
    for (const char *v = so->vary, *e = so->vary + so->vary_len; v < e;) {
        const char *val = v + strlen(v) + 1;
        if (*val != '\0') {
            put_field(&p, v, strlen(v), val, strlen(val));
            bg->nfield++;
        }
        v = val + strlen(val) + 1;
    }
    for (unsigned i = 0; i < req->http->nhdr; i++) {
        const struct http_hdr *h = &req->http->hdr[i];
        if (!http_name_eq(&h->name, "X-Forwarded-For"))
            continue;
        put_field(&p, "X-Forwarded-For", 15, h->val.b, h->val.len);
        bg->nfield++;
    }
    memcpy(bg->client_ip, req->client_ip, sizeof bg->client_ip);
    bg->client_tls = req->client_tls;
    bg->task.func = bg_task;
    bg->task.priv = bg;
    TRACE_BG_LINK(req->trace, &bg->tl);
    if (be != NULL && pool_submit(req->sp->pool, &bg->task, POOL_PRIO_BG) == 0)
        return;
    /* No room in the queue: no refresh now; the next request in grace tries again. */
    STAT_INC(cache_bgfetch_skipped);
    TRACE(req->trace, FETCH_ERROR, "bgfetch skipped: the queue is full");
    hsh_abandon(&bg->oc, 0);
    hsh_deref(&bg->stale.oc);
    OBJ_FREE(&bg);
}
