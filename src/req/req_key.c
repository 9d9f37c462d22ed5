/*
 * The cache keys of a request, built by ckey_build() (src/cache/ckey.c):
 * the one it looks up, and the ones a successful unsafe method
 * invalidates.
 */
#include "config.h"

#include <string.h>
#include <strings.h>

#include "surogat/ckey.h"
#include "surogat/defs.h"
#include "surogat/hsh.h"
#include "surogat/http.h"
#include "surogat/par.h"
#include "surogat/req.h"
#include "surogat/sess.h"

#include "req_priv.h"

/* A cache key for this request's scheme (ckey_build()). */
static char *
make_key(struct req *req, const struct txt *host, const char *path, size_t plen, size_t *len)
{
    return (ckey_build(req->ws, host, req->sp != NULL && sess_is_tls(req->sp), path, plen, len));
}

char *
req_cache_key(struct req *req, size_t *len)
{
    return (make_key(req, http_value(req->http, "Host"), req->http->url.b, req->http->url.len,
                     len));
}


/*
 * A successful unsafe method invalidates the target URL and the URLs its
 * response names in Location and Content-Location on the same host (RFC
 * 9111 section 4.4): other hosts' caches are not ours to empty on one
 * origin's word.  Called with the backend's response head, before the
 * client sees any of it: a client that has its answer and asks again
 * must not get the old copy, and neither may anyone after a crash.
 *
 * Only the unsafe methods that change a resource count, spelled exactly
 * (methods are case-sensitive, RFC 9110 section 9.1): "FOO" or "post"
 * changes nothing a cache knows of, and must not let any client empty it.
 */
void
req_invalidate(struct req *req, const struct http *resp)
{
    static const char *const fields[] = { "Location", "Content-Location" };
    static const char *const unsafe[] = { "POST", "PUT", "PATCH", "DELETE" };
    const struct http_hdr *host = http_find(req->http, "Host");
    char *key;
    size_t keylen;
    bool is_unsafe = false;

    if (!par.invalidate_on_unsafe || resp->status < 200 || resp->status >= 400)
        return;
    for (size_t i = 0; i < ARRAY_LEN(unsafe) && !is_unsafe; i++)
        is_unsafe = req__is_method(req, unsafe[i]);
    if (!is_unsafe)
        return;
    if ((key = req_cache_key(req, &keylen)) != NULL)
        (void)hsh_purge(key, keylen);
    if (host == NULL)
        return;
    for (size_t i = 0; i < ARRAY_LEN(fields); i++) {
        const struct txt *v = http_value(resp, fields[i]);
        const char *p, *e, *auth;
        size_t skip = 0;

        if (v == NULL || v->len == 0)
            continue;
        p = v->b;
        e = v->b + v->len;
        if (v->len > 7 && strncasecmp(p, "http://", 7) == 0)
            skip = 7;
        else if (v->len > 8 && strncasecmp(p, "https://", 8) == 0)
            skip = 8;
        else if (*p != '/')
            continue; /* a relative reference: not worth resolving */
        if (skip > 0) {
            /* An absolute URI must name our Host; then keep its path. */
            for (auth = p + skip, p = auth; p < e && *p != '/'; p++)
                continue;
            if ((size_t)(p - auth) != host->val.len ||
                strncasecmp(auth, host->val.b, host->val.len) != 0 || p == e)
                continue;
        }
        key = make_key(req, &host->val, p, (size_t)(e - p), &keylen);
        if (key == NULL)
            return;
        (void)hsh_purge(key, keylen);
    }
}
