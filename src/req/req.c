/*
 * A request in the core: the checks every transport's requests share,
 * serving it (req_dispatch() and its steps), and logging it.  Transports
 * (src/proto/) make requests and call req_serve(); they own their
 * connections, this file owns none.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "surogat/alog.h"
#include "surogat/rlog.h"
#include "surogat/defs.h"
#include "surogat/dlv.h"
#include "surogat/mon.h"
#include "surogat/par.h"
#include "surogat/pol.h"
#include "surogat/realip.h"
#include "surogat/req.h"
#include "surogat/sb.h"
#include "surogat/sess.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/tp.h"
#include "surogat/trace.h"

#include "surogat/wrk.h"

#include "req_priv.h"

/* After an error response, how long to swallow what the client still sends. */
#define REQ_ERROR_LINGER 0.5
/* Header slots beyond http_max_hdr, for the ones surogat adds (Host, X-Forwarded-For ...). */
#define REQ_EXTRA_HDR 8

ssize_t
req_body_next(struct req *req, const char **data)
{
    OBJ_CHECK(req, REQ_MAGIC);
    return (req->tp->body_next(req, data));
}

double
req_send_deadline(const struct req *req)
{
    return (tim_mono() + par.send_timeout);
}

/*
 * Request fields a client may send that the cache key does not include,
 * while applications commonly build links, redirects, schemes or even
 * routes from them (Symfony, Laravel, Django, Rails, IIS URL rewriting,
 * method overrides).  A response built from a forged one would be cached
 * and served to everyone: cache poisoning with a single request.  So
 * they are removed from every client request before the policy and the
 * backend see it, unless trusted_client_headers names them (a proxy in
 * front that sets them itself); the policy may still set any of them.
 */
static const char *const unkeyed_fields[] = {
    "X-Forwarded-Host", "X-Forwarded-Server", "X-Forwarded-Port", "X-Forwarded-Prefix",
    "X-Forwarded-Scheme", "X-Forwarded-Ssl", "Front-End-Https", "X-Url-Scheme",
    "X-Host", "X-Original-Host", "X-Original-URL", "X-Rewrite-URL",
    "X-HTTP-Method-Override", "X-HTTP-Method", "X-Method-Override", "Forwarded",
};

/* Whether `name` is an element of a comma- or space-separated list, ignoring case. */
static bool
name_listed(const char *list, const char *name)
{
    size_t nl = strlen(name);

    for (const char *p = list; *p != '\0';) {
        size_t n;
        p += strspn(p, ", \t");
        n = strcspn(p, ", \t");
        if (n == nl && strncasecmp(p, name, n) == 0)
            return (true);
        p += n;
    }
    return (false);
}

/*
 * Remove the unkeyed fields the operator does not trust.  Which ones is
 * worked out again only when the parameter's value changes (a new
 * pointer): once per worker, not per request.
 */
static void
strip_unkeyed(struct http *hp)
{
    static __thread const char *seen;
    static __thread uint32_t strip;
    const char *cur = __atomic_load_n(&par.trusted_client_headers, __ATOMIC_ACQUIRE);

    if (cur != seen || seen == NULL) {
        strip = 0;
        for (size_t i = 0; i < ARRAY_LEN(unkeyed_fields); i++)
            if (!name_listed(cur, unkeyed_fields[i]))
                strip |= UINT32_C(1) << i;
        seen = cur;
    }
    /* One pass, in order; every name in the table starts with X or F. */
    unsigned kept = 0;
    for (unsigned h = 0; h < hp->nhdr; h++) {
        const struct txt *n = &hp->hdr[h].name;
        bool drop = false;
        if (n->len > 0 && (n->b[0] | 0x20) != 'x' && (n->b[0] | 0x20) != 'f') {
            hp->hdr[kept++] = hp->hdr[h];
            continue;
        }
        for (size_t i = 0; i < ARRAY_LEN(unkeyed_fields) && !drop; i++)
            drop = (strip & (UINT32_C(1) << i)) && http_name_eq(n, unkeyed_fields[i]);
        if (drop)
            STAT_INC(client_hdr_stripped);
        else
            hp->hdr[kept++] = hp->hdr[h];
    }
    hp->nhdr = kept;
}

void
req_log(struct req *req)
{
    req->t_end = tim_mono();
    if (req->t_mono == 0) {
        req->t_start = tim_real();
        req->t_mono = req->t_end;
    }
    if (req->t_first == 0)
        req->t_first = req->t_end;
    mon_req_end(req);
    if (alog_enabled())
        alog_req(req->wrk->alog, req);
    if (req->wrk->rlog != NULL)
        rlog_req(req->wrk->rlog, req);
    TRACE_REQ_END(req);
}

/*
 * The checks every protocol's requests get after their transport's own:
 * a well-formed Host, TRACE, the unkeyed fields.  false when the request
 * was answered (an error: the connection closes after it).
 */
static bool
req_check(struct req *req)
{
    struct http *hp = req->http;
    const struct http_hdr *h = http_find(hp, "Host");

    realip_apply(req->sp, hp); /* the client behind trusted_proxies, before anyone reads it */
    if (req->sp != NULL) {
        memcpy(req->client_ip, req->sp->client_ip, sizeof req->client_ip); /* both NUL-terminated arrays */
        req->client_tls = sess_is_tls(req->sp);
    }
    req->trace = trace_req_begin(req);
    /* HTTP/1.0 may send none or an empty one; a Host that is there must be one. */
    if (h != NULL && (h->val.len > 0 || hp->proto == 11) && !http_host_valid(&h->val)) {
        STAT_INC(client_req_400);
        req->close = true;
        (void)dlv_error(req, 400, NULL, NULL);
        return (false);
    }
    if (hp->method.len == 5 && memcmp(hp->method.b, "TRACE", 5) == 0) {
        /*
         * TRACE echoes the request, cookies and credentials included, to
         * whoever can make a browser send it (cross-site tracing); the
         * few who need it turn it on.  Then it still never carries them.
         */
        if (!par.allow_trace) {
            STAT_INC(client_req_405);
            req->close = true;
            (void)dlv_error(req, 405, "Allow: GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS\r\n",
                            NULL);
            return (false);
        }
        http_unset(hp, "Cookie");
        http_unset(hp, "Authorization");
        http_unset(hp, "Proxy-Authorization");
    }
    strip_unkeyed(hp);
    req->head_only = hp->method.len == 4 && memcmp(hp->method.b, "HEAD", 4) == 0;
    return (true);
}

/* Served: its log lines, and the log hook. */
static void
req_finish(struct req *req)
{
    req_log(req);
    if (pol_active() && pol_has_log())
        pol_log(req);
    pol_req_done(req);
}

enum req_run
req_serve(struct req *req)
{
    OBJ_CHECK(req, REQ_MAGIC);
    if (req_check(req) && req_dispatch(req) == REQ_RUN_PARKED)
        return (REQ_RUN_PARKED);
    req_finish(req);
    return (REQ_RUN_DONE);
}

enum req_run
req_resume(struct req *req)
{
    OBJ_CHECK(req, REQ_MAGIC);
    OBJ_CHECK(req->wrk, WRK_MAGIC);
    if (req__dispatch_resume(req) == REQ_RUN_PARKED)
        return (REQ_RUN_PARKED);
    req_finish(req);
    return (REQ_RUN_DONE);
}
