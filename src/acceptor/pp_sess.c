/*
 * The PROXY header of a client session, and the one a backend gets.
 *
 * On a PROXY listen socket the header is the first thing on the wire
 * (before TLS on a tls,PROXY socket: a balancer passing TLS through
 * sends it in clear), so pp_sess_task() runs as the session's first
 * step on a worker.  It never reads a byte past the header: it peeks,
 * parses, and consumes only what the header is made of (a partial
 * header's bytes all belong to it, so they are consumed too, which lets
 * poll(2) wait for the rest).  What follows stays in the socket for the
 * TLS handshake or the first request, so the request core needs no
 * hand-over of early bytes.
 *
 * Threads: a session has one owner, the worker running this task.  A
 * connection that has sent nothing yet waits in the waiter, not on a
 * worker; one that has sent part of a header holds the worker until
 * proxy_header_timeout at most, counted from the accept.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "surogat/acc.h"
#include "surogat/defs.h"
#include "surogat/log.h"
#include "surogat/par.h"
#include "surogat/pp.h"
#include "surogat/sess.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/vio.h"
#include "surogat/wtr.h"

static struct log_limit fail_limit = LOG_LIMIT_INIT;

/*
 * Copy a TLV value that will be shown to the policy and written in logs:
 * printable US-ASCII only, else nothing (a balancer sends plain names).
 */
static void
copy_printable(char *dst, size_t size, const struct pp_bytes *v)
{
    dst[0] = '\0';
    if (v->len == 0 || v->len >= size)
        return;
    for (size_t i = 0; i < v->len; i++)
        if (v->b[i] < 0x20 || v->b[i] > 0x7e)
            return;
    memcpy(dst, v->b, v->len);
    dst[v->len] = '\0';
}

/* Take what the header says into the session. */
static void
apply(struct sess *sp, const struct pp_hdr *h)
{
    struct pp_sess *ps;

    OBJ_NEW(ps, PP_SESS_MAGIC);
    ps->version = h->version;
    ps->local = h->local;
    if (!h->local) {
        AN(inet_ntop(h->family, &h->src, sp->client_ip, sizeof sp->client_ip));
        snprintf(sp->client_port, sizeof sp->client_port, "%u", h->src_port);
        AN(inet_ntop(h->family, &h->dst, ps->server_ip, sizeof ps->server_ip));
        snprintf(ps->server_port, sizeof ps->server_port, "%u", h->dst_port);
    }
    if (h->ssl) {
        ps->tls = true;
        ps->tls_cert = (h->ssl_client & (PP2_CLIENT_CERT_CONN | PP2_CLIENT_CERT_SESS)) != 0;
        ps->tls_verified = ps->tls_cert && h->ssl_verify == 0;
        copy_printable(ps->tls_version, sizeof ps->tls_version, &h->ssl_version);
        copy_printable(ps->tls_cipher, sizeof ps->tls_cipher, &h->ssl_cipher);
        copy_printable(ps->tls_cn, sizeof ps->tls_cn, &h->ssl_cn);
        sp->tls_front = true;
    }
    copy_printable(ps->authority, sizeof ps->authority, &h->authority);
    sp->pp = ps;
    STAT_INC(proxy_hdr);
    if (h->local)
        STAT_INC(proxy_local);
}

static void
fail(struct sess *sp, const char *why)
{
    char peer[INET6_ADDRSTRLEN + 8];

    snprintf(peer, sizeof peer, "%s:%s", sp->client_ip, sp->client_port);
    log_limited(&fail_limit, "proxy_fail", LOG_NOTICE, "PROXY header from %s on %s: %s", peer,
                sp->ls->spec, why);
    STAT_INC(proxy_fail);
    sess_close(&sp);
}

void
pp_sess_task(struct wrk *wrk, void *priv)
{
    struct sess *sp = priv;
    uint8_t buf[PP_V2_MAX];
    double deadline, left;
    size_t have = 0, used = 0;
    struct pp_hdr h;
    enum pp_status st;
    ssize_t n;

    OBJ_CHECK(sp, SESS_MAGIC);
    deadline = sp->t_open + par.proxy_header_timeout; /* tim_real() seconds */
    for (;;) {
        n = recv(sp->fd, buf + have, sizeof buf - have, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0) {
            /* A balancer's TCP health check connects and leaves: nothing to count. */
            sess_close(&sp);
            return;
        }
        if (n < 0) {
            if (errno == EINTR)
                continue;
            if (errno != EAGAIN) {
                sess_close(&sp);
                return;
            }
            left = deadline - tim_real();
            if (left <= 0) {
                STAT_INC(proxy_timeout);
                fail(sp, "timed out");
                return;
            }
            if (have == 0) {
                /* Nothing of it yet: wait in the waiter, with no thread held. */
                sp->t_idle = tim_mono();
                wtr_enter(&sp);
                return;
            }
            vio_blocking();
            if (vio_wait_readable(sp->fd, left) < 0) {
                sess_close(&sp);
                return;
            }
            continue;
        }
        st = pp_parse(buf, have + (size_t)n, &h, &used);
        if (st == PP_DONE)
            break;
        if (st != PP_MORE) {
            fail(sp, pp_status_name(st));
            return;
        }
        /* Every byte of an incomplete header is the header's: take them off the socket. */
        if (recv(sp->fd, buf + have, (size_t)n, MSG_DONTWAIT) != n) {
            sess_close(&sp);
            return;
        }
        have += (size_t)n;
    }
    SRG_ASSERT(used > have);
    /* Peeked, so there: consume exactly the rest of the header. */
    if (recv(sp->fd, buf + have, used - have, MSG_DONTWAIT) != (ssize_t)(used - have)) {
        sess_close(&sp);
        return;
    }
    apply(sp, &h);
    sess_after_proxy(wrk, sp);
}

/*--------------------------------------------------------------------
 * The header a backend gets.
 */

/* Text address and port to a socket address; false when ip is no IP address. */
static bool
to_sa(const char *ip, const char *port, struct sockaddr_storage *ss)
{
    struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
    unsigned long p = strtoul(port, NULL, 10);

    memset(ss, 0, sizeof *ss);
    if (p > 65535)
        return (false);
    if (inet_pton(AF_INET, ip, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)p);
        return (true);
    }
    if (inet_pton(AF_INET6, ip, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)p);
        return (true);
    }
    return (false);
}

/* One family for both ends: an IPv4 end becomes IPv4-mapped IPv6 beside an IPv6 one. */
static void
to_v6(struct sockaddr_storage *ss)
{
    struct sockaddr_in s4;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;

    if (ss->ss_family != AF_INET)
        return;
    memcpy(&s4, ss, sizeof s4);
    memset(ss, 0, sizeof *ss);
    s6->sin6_family = AF_INET6;
    s6->sin6_port = s4.sin_port;
    s6->sin6_addr.s6_addr[10] = 0xff;
    s6->sin6_addr.s6_addr[11] = 0xff;
    memcpy(&s6->sin6_addr.s6_addr[12], &s4.sin_addr, 4);
}

size_t
pp_backend_header(unsigned version, const struct sess *sp, uint8_t buf[PP_BUILD_MAX])
{
    struct sockaddr_storage src, dst;
    socklen_t sl = sizeof dst;
    bool ok = false;

    if (sp != NULL && to_sa(sp->client_ip, sp->client_port, &src)) {
        /* The destination the client reached: the PROXY header's, else our socket's. */
        if (sp->pp != NULL && sp->pp->server_ip[0] != '\0')
            ok = to_sa(sp->pp->server_ip, sp->pp->server_port, &dst);
        else
            ok = getsockname(sp->fd, (struct sockaddr *)&dst, &sl) == 0 &&
                 (dst.ss_family == AF_INET || dst.ss_family == AF_INET6);
        /* A Unix-socket client is 0.0.0.0: it has no address to pass on. */
        if (ok && src.ss_family == AF_INET &&
            ((struct sockaddr_in *)&src)->sin_addr.s_addr == htonl(INADDR_ANY))
            ok = false;
        if (ok && src.ss_family != dst.ss_family) {
            to_v6(&src);
            to_v6(&dst);
        }
    }
    if (!ok)
        return (pp_build(version, NULL, NULL, buf));
    return (pp_build(version, (struct sockaddr *)&src, (struct sockaddr *)&dst, buf));
}
