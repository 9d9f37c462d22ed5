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
 */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "surogat/acl.h"
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

void
req_purge(struct req *req)
{
    int soft = soft_mode(req);
    char msg[96], *key, *tags;
    size_t len;
    unsigned n;

    req->outcome = REQ_O_PURGE;
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
    tags = purge_tags(req, &len);
    if (tags != NULL) {
        n = xkey_purge(tags, len, soft == 1);
        STAT_INC(purges_tag);
    } else if (len == 0 && (key = purge_key(req, &len)) != NULL) {
        n = hsh_purge_key(key, len, soft == 1);
        STAT_INC(purges);
    } else if (len == 0 && pol_active()) {
        dlv_synth(req, 503, "policy error"); /* the hash hook failed, logged */
        return;
    } else {
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
            dlv_synth(req, syn.status, syn.reason);
            return;
        case POL_RESTART:
            req->restart = true;
            return;
        default:
            dlv_synth(req, 503, "policy error");
            return;
        }
    }
    snprintf(msg, sizeof msg, "%s %u object%s.", soft == 1 ? "Soft-purged" : "Purged", n,
             n == 1 ? "" : "s");
    (void)dlv_error(req, 200, NULL, msg);
}
