/*
 * PURGE requests: the built-in purge policy.
 *
 *   PURGE /path HTTP/1.1            every variant of Host + /path
 *   Host: example.com
 *   Purge-Mode: soft                (or Fastly-Soft-Purge: 1) expire, do not remove
 *   Surrogate-Key: tag1 tag2        (or xkey-purge: tag1 tag2) every object carrying
 *                                   any of the tags, on every host, instead of the URL
 *
 * Allowed only from purge_acl (403 otherwise).  The answer is 200 with
 * the number of objects in the page, also when nothing was cached (as
 * Varnish's "200 Purged"): a purge succeeds by leaving nothing behind.
 * An unknown Purge-Mode is a 400, so that a typo never turns a soft purge
 * into a hard one.
 *
 * The parsed ACL is cached against the par.purge_acl pointer it came from:
 * a string parameter is replaced whole by a new allocation and the old one
 * is kept until exit (par.c), so a changed value always has a new pointer.
 * acl_mtx guards the cache and is held while matching, so the list a
 * worker matches against cannot be freed under it; PURGEs are rare enough
 * for one lock.  No other lock is taken under it.
 *
 * In a cluster (clu.h), a purge is sent on to every other member once
 * it is done here, and the page lists each member's count, or that it is
 * queued for a member that did not acknowledge it (then 202, not 200).
 * A PURGE of CLU_PATH is a message from another member: its signed hop
 * header stands for purge_acl, and it is answered by the cluster code.
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "surogat/acl.h"
#include "surogat/clu.h"
#include "surogat/defs.h"
#include "surogat/dlv.h"
#include "surogat/hsh.h"
#include "surogat/log.h"
#include "surogat/par.h"
#include "surogat/pol.h"
#include "surogat/req.h"
#include "surogat/sb.h"
#include "surogat/sess.h"
#include "surogat/stat.h"
#include "surogat/wrk.h"
#include "surogat/xkey.h"

static pthread_mutex_t acl_mtx = PTHREAD_MUTEX_INITIALIZER;
static const char *acl_src; /* the par.purge_acl value acl_cur was parsed from */
static struct acl *acl_cur; /* NULL: that value did not parse, nobody is allowed */

static bool
purge_allowed(const struct req *req)
{
    const char *src = __atomic_load_n(&par.purge_acl, __ATOMIC_ACQUIRE);
    char ebuf[256];
    struct sb err;
    bool ok;

    AZ(pthread_mutex_lock(&acl_mtx));
    if (src != acl_src) {
        acl_free(&acl_cur);
        sb_init(&err, ebuf, sizeof ebuf);
        acl_cur = acl_parse(src, &err);
        if (acl_cur == NULL)
            log_msg(LOG_ERR, "purge_acl '%s': %s: nobody may PURGE", src, ebuf);
        acl_src = src;
    }
    ok = acl_cur != NULL && acl_match_str(acl_cur, req->sp->client_ip);
    AZ(pthread_mutex_unlock(&acl_mtx));
    return (ok);
}

void
req_purge_fini(void)
{
    AZ(pthread_mutex_lock(&acl_mtx));
    acl_free(&acl_cur);
    acl_src = NULL;
    AZ(pthread_mutex_unlock(&acl_mtx));
}

/* Purge-Mode and Fastly-Soft-Purge: 0 hard, 1 soft, -1 an unknown value. */
static int
soft_mode(const struct req *req)
{
    const struct txt *m = http_value(req->http, "Purge-Mode");
    const struct txt *f = http_value(req->http, "Fastly-Soft-Purge");

    if (m != NULL) {
        if (m->len == 4 && strncasecmp(m->b, "soft", 4) == 0)
            return (1);
        if (m->len == 4 && strncasecmp(m->b, "hard", 4) == 0)
            return (0);
        return (-1);
    }
    if (f != NULL) {
        if (f->len == 1 && (f->b[0] == '0' || f->b[0] == '1'))
            return (f->b[0] - '0');
        return (-1);
    }
    return (0);
}

/*
 * The tags of every Surrogate-Key and xkey-purge field, joined by spaces
 * in workspace so that one purge counts each object once.  NULL with
 * *len 0 when there are none; NULL with *len 1 when the workspace is full.
 */
static char *
purge_tags(struct req *req, size_t *len)
{
    const struct http *hp = req->http;
    size_t n = 0;
    char *buf;

    *len = 0;
    for (unsigned i = 0; i < hp->nhdr; i++)
        if (http_name_eq(&hp->hdr[i].name, "Surrogate-Key") ||
            http_name_eq(&hp->hdr[i].name, "xkey-purge"))
            n += hp->hdr[i].val.len + 1;
    if (n == 0)
        return (NULL);
    buf = ws_alloc(req->ws, n);
    if (buf == NULL) {
        *len = 1;
        return (NULL);
    }
    for (unsigned i = 0; i < hp->nhdr; i++) {
        if (!http_name_eq(&hp->hdr[i].name, "Surrogate-Key") &&
            !http_name_eq(&hp->hdr[i].name, "xkey-purge"))
            continue;
        memcpy(buf + *len, hp->hdr[i].val.b, hp->hdr[i].val.len);
        *len += hp->hdr[i].val.len;
        buf[(*len)++] = ' ';
    }
    return (buf);
}

/*
 * The key a URL purge removes: the one a lookup of this request would
 * use, so with a policy its hash hook decides (as VCL's purge does).
 * NULL when the workspace ran out, or the hook failed (logged).
 */
static char *
purge_key(struct req *req, size_t *len)
{
    char *key;

    if (!pol_active())
        return (req_cache_key(req, len));
    if (pol_hash(req, &key, len) != 0)
        return (NULL);
    return (key);
}

/* A text/plain answer through no hook. */
static void
send_text(struct req *req, unsigned status, const char *text, size_t len)
{
    struct http_hdr hdrs[2];
    struct http resp;

    http_init(&resp, hdrs, ARRAY_LEN(hdrs));
    resp.proto = 11;
    resp.status = status;
    resp.reason = (struct txt){ http_reason(status), strlen(http_reason(status)) };
    AZ(http_add(&resp, TXT_LIT("Content-Type"), TXT_LIT("text/plain; charset=utf-8")));
    AZ(http_add(&resp, TXT_LIT("Cache-Control"), TXT_LIT("no-store")));
    (void)dlv_send(req, &resp, (struct txt){ text, len });
}

/* A PURGE of CLU_PATH: a message from another member of the cluster (clu_serve). */
static void
cluster_message(struct req *req)
{
    struct clu *c = pol_cluster();
    char *body = NULL, *big, abuf[512];
    size_t blen = 0, biglen;
    const char *data;
    unsigned status;
    struct sb ans;
    ssize_t n;

    if (c == NULL) {
        (void)dlv_error(req, 404, NULL, "This node is in no cluster.");
        return;
    }
    while ((n = req_body_next(req, &data)) > 0) {
        if (blen + (size_t)n > CLU_MSG_MAX) {
            req->close = true;
            free(body);
            clu_unref(&c);
            (void)dlv_error(req, 413, NULL, "A cluster message is at most 64 KiB.");
            return;
        }
        body = realloc(body, blen + (size_t)n);
        AN(body);
        memcpy(body + blen, data, (size_t)n);
        blen += (size_t)n;
    }
    if (n < 0) {
        req->close = true;
        free(body);
        clu_unref(&c);
        return; /* the client is gone, or its framing was bad */
    }
    sb_init(&ans, abuf, sizeof abuf);
    status = clu_serve(c, req->http, req->sp->client_ip, body != NULL ? body : "", blen, &ans, &big,
                       &biglen);
    clu_unref(&c);
    free(body);
    if (big != NULL) {
        send_text(req, status, big, biglen);
        free(big);
    } else {
        send_text(req, status, ans.buf, ans.len);
    }
}

/*
 * The purge done here, sent on to the other members of the cluster, if
 * any: -1 when there is none, else how many members did not acknowledge
 * it, with their lines in report.
 */
static int
cluster_fanout(enum clu_op_kind kind, bool soft, const char *arg, size_t len, unsigned n,
               struct sb *report)
{
    struct clu *c = pol_cluster();
    struct clu_op op;
    unsigned nack;

    if (c == NULL)
        return (-1);
    clu_op_init(&op, clu_self(c), kind, soft, arg, len);
    nack = clu_fanout(c, &op, (long)n, report);
    clu_unref(&c);
    return ((int)nack);
}

void
req_purge(struct req *req)
{
    int soft = soft_mode(req), nack;
    char msg[96], *key, *tags, *rbuf;
    size_t len;
    unsigned n;
    struct sb report;

    req->outcome = REQ_O_PURGE;
    if (req->http->url.len == strlen(CLU_PATH) &&
        memcmp(req->http->url.b, CLU_PATH, req->http->url.len) == 0) {
        cluster_message(req);
        return;
    }
    if (!purge_allowed(req)) {
        STAT_INC(purge_denied);
        (void)dlv_error(req, 403, NULL, "PURGE is not allowed from this address.");
        return;
    }
    if (soft < 0) {
        (void)dlv_error(req, 400, NULL,
                            "Unknown Purge-Mode (soft or hard) or Fastly-Soft-Purge (1 or 0).");
        return;
    }
    rbuf = malloc(CLU_MEMBERS_MAX * 256);
    AN(rbuf);
    sb_init(&report, rbuf, CLU_MEMBERS_MAX * 256);
    nack = -1;
    tags = purge_tags(req, &len);
    /* Each noted before the cache changes: a fetch under way then is not kept (clu.h). */
    if (tags != NULL) {
        clu_inval_note(CLU_OP_TAGS, tags, len);
        n = xkey_purge(tags, len, soft == 1);
        STAT_INC(purges_tag);
        nack = cluster_fanout(CLU_OP_TAGS, soft == 1, tags, len, n, &report);
    } else if (len == 0 && (key = purge_key(req, &len)) != NULL) {
        clu_inval_note(CLU_OP_KEY, key, len);
        n = hsh_purge_key(key, len, soft == 1);
        STAT_INC(purges);
        nack = cluster_fanout(CLU_OP_KEY, soft == 1, key, len, n, &report);
    } else if (len == 0 && pol_active()) {
        free(rbuf);
        dlv_synth(req, 503, "policy error"); /* the hash hook failed, logged */
        return;
    } else {
        free(rbuf);
        STAT_INC(ws_overflow);
        (void)dlv_error(req, 500, NULL, NULL);
        return;
    }
    if (soft == 1)
        STAT_INC(purges_soft);
    STAT_ADD(purge_objects, n);
    if (pol_active()) {
        struct pol_synth syn;
        switch (pol_purge(req, &syn)) {
        case POL_NONE:
            break;
        case POL_SYNTH:
            free(rbuf);
            dlv_synth(req, syn.status, syn.reason);
            return;
        case POL_RESTART:
            free(rbuf);
            req->restart = true;
            return;
        default:
            free(rbuf);
            dlv_synth(req, 503, "policy error");
            return;
        }
    }
    snprintf(msg, sizeof msg, "%s %u object%s.", soft == 1 ? "Soft-purged" : "Purged", n,
             n == 1 ? "" : "s");
    if (nack < 0) {
        (void)dlv_error(req, 200, NULL, msg);
    } else {
        /* Here, then a line per member: 202 while one of them has it queued only. */
        char *page = malloc(report.len + sizeof msg + 2);
        AN(page);
        len = (size_t)snprintf(page, report.len + sizeof msg + 2, "%s\n%s", msg, report.buf);
        send_text(req, nack == 0 ? 200 : 202, page, len);
        free(page);
    }
    free(rbuf);
}
