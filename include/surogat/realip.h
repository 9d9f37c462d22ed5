/*
 * realip -- the client behind trusted proxies that do not speak the PROXY
 * protocol: for a request whose peer is in trusted_proxies, the client is
 * the right-most address of X-Forwarded-For that is not itself trusted
 * (nginx's set_real_ip_from with real_ip_recursive).  A peer not in the
 * list is never believed: its X-Forwarded-For changes nothing.
 */
#ifndef SUROGAT_REALIP_H
#define SUROGAT_REALIP_H

struct http;
struct sess;

/*
 * Once per request, right after its head is parsed and before anything
 * reads sp->client_ip: put the connection's own client back (an earlier
 * request on it may have replaced it), then, if trusted_proxies trusts
 * it, replace sp->client_ip with the X-Forwarded-For client of hp and
 * sp->client_port with "0".  Cheap when trusted_proxies is empty.  sp
 * NULL: nothing.  Any worker.
 */
void realip_apply(struct sess *sp, const struct http *hp);
void realip_fini(void); /* free the parsed list */

#endif
