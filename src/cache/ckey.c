/*
 * Cache keys.  See ckey.h for the form; the normalisation follows RFC 3986
 * section 6.2.2.1 (the host is case-insensitive) and 6.2.3 (an empty or
 * default port is the same as none), plus the DNS root's trailing dot,
 * which names the same host.  The request-target is not normalised: an
 * origin may tell "/a%2fb" from "/a/b", and the policy's hash hook is the
 * place to fold URLs an operator knows to be the same.
 */
#include "config.h"

#include <string.h>

#include "surogat/ckey.h"
#include "surogat/defs.h"
#include "surogat/http.h"
#include "surogat/ws.h"

size_t
ckey_host(const struct txt *host, bool tls, char *out)
{
    const char *p = host->b, *e = host->b + host->len, *colon = NULL;
    size_t n = 0;

    /* The port's colon: after a bracketed literal, or the last one of a reg-name. */
    for (const char *q = e; q > p; q--) {
        if (q[-1] == ']')
            break;
        if (q[-1] == ':') {
            colon = q - 1;
            break;
        }
    }
    if (colon != NULL) {
        size_t plen = (size_t)(e - colon - 1);
        const char *dflt = tls ? "443" : "80";
        if (plen == 0 || (plen == strlen(dflt) && memcmp(colon + 1, dflt, plen) == 0))
            e = colon;
    }
    for (; p < e; p++) {
        char c = *p;
        if (c == '.' && (p + 1 == e || p[1] == ':') && n > 0)
            continue; /* "example.com." and "example.com.:8080" are that host */
        out[n++] = (c >= 'A' && c <= 'Z') ? (char)(c + 32) : c;
    }
    return (n);
}

char *
ckey_build(struct ws *ws, const struct txt *host, bool tls, const char *path, size_t plen,
           size_t *len)
{
    size_t hl = host != NULL ? host->len : 0;
    char *k = ws_alloc(ws, hl + 1 + plen);

    if (k == NULL)
        return (NULL);
    if (hl > 0)
        hl = ckey_host(host, tls, k);
    k[hl] = '\0';
    memcpy(k + hl + 1, path, plen);
    *len = hl + 1 + plen;
    return (k);
}
