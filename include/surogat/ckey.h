/*
 * ckey -- the cache key of a request: its host, normalised, a NUL, then its
 * request-target as sent.
 *
 * One place builds it, so that lookups, the policy's hash hook, PURGE and
 * invalidation after unsafe methods always agree on what one object is.
 * Pure: no allocation beyond the workspace given, no locks.
 */
#ifndef SUROGAT_CKEY_H
#define SUROGAT_CKEY_H

#include <stdbool.h>
#include <stddef.h>

struct txt;
struct ws;

/*
 * The host part of a key from a Host field value (well-formed, see
 * http_host_valid()), into out (at least host->len bytes): lower case,
 * without one trailing dot, without a port that is the scheme's default
 * (80, or 443 when tls) or empty.  So "Example.COM.:80" and "example.com"
 * are one site; "example.com:8080" is another.  Returns its length.
 */
size_t ckey_host(const struct txt *host, bool tls, char *out);
/*
 * The key for host (NULL: none, as an HTTP/1.0 request without Host) and
 * path[0..plen) in workspace, *len its length.  A missing or empty Host
 * gives an empty host part, which no real host normalises to, so such
 * requests never share an object with named sites.  NULL when the
 * workspace is full.
 */
char *ckey_build(struct ws *ws, const struct txt *host, bool tls, const char *path, size_t plen,
                 size_t *len);

#endif
