/*
 * The client address from X-Forwarded-For, for trusted peers only.
 *
 * The parsed trusted_proxies list is shared by every worker and parsed
 * again only when the parameter's value changes (a new pointer), under a
 * read-write lock that is only taken when the list is not empty.
 *
 * The walk is right to left: each proxy appends the address it got the
 * request from, so the right-most entries were written by proxies we
 * trust and the first untrusted one is as far as the chain can be
 * believed.  Anything left of it may be forged by the client.
 */
#include "config.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <string.h>

#include "surogat/acl.h"
#include "surogat/defs.h"
#include "surogat/http.h"
#include "surogat/log.h"
#include "surogat/par.h"
#include "surogat/realip.h"
#include "surogat/sb.h"
#include "surogat/sess.h"
#include "surogat/stat.h"

static pthread_rwlock_t acl_lck = PTHREAD_RWLOCK_INITIALIZER;
static const char *acl_src; /* the par.trusted_proxies value acl_cur was parsed from */
static struct acl *acl_cur; /* NULL: that value did not parse, nobody is trusted */

/* Read-lock a list parsed from src; the caller unlocks. */
static const struct acl *
acl_get(const char *src)
{
    char ebuf[256];
    struct sb err;

    AZ(pthread_rwlock_rdlock(&acl_lck));
    if (src == acl_src)
        return (acl_cur);
    AZ(pthread_rwlock_unlock(&acl_lck));
    AZ(pthread_rwlock_wrlock(&acl_lck));
    if (src != acl_src) {
        acl_free(&acl_cur);
        sb_init(&err, ebuf, sizeof ebuf);
        acl_cur = acl_parse(src, &err);
        if (acl_cur == NULL)
            log_msg(LOG_ERR, "trusted_proxies '%s': %s: no proxy is trusted", src, ebuf);
        acl_src = src;
    }
    AZ(pthread_rwlock_unlock(&acl_lck));
    return (acl_get(src));
}

/* An address in canonical text into out; false for anything else. */
static bool
canon(const char *p, size_t n, char out[INET6_ADDRSTRLEN])
{
    char tmp[INET6_ADDRSTRLEN];
    unsigned char a[16];

    if (n == 0 || n >= sizeof tmp)
        return (false);
    memcpy(tmp, p, n);
    tmp[n] = '\0';
    if (inet_pton(AF_INET, tmp, a) == 1)
        return (inet_ntop(AF_INET, a, out, INET6_ADDRSTRLEN) != NULL);
    if (inet_pton(AF_INET6, tmp, a) == 1)
        return (inet_ntop(AF_INET6, a, out, INET6_ADDRSTRLEN) != NULL);
    return (false);
}

enum walk {
    WALK_ON,   /* a trusted hop: go on to the left */
    WALK_DONE, /* the client found, in out */
    WALK_STOP, /* junk: believe nothing further left */
};

/* The entries of one X-Forwarded-For value, right to left. */
static enum walk
walk_value(const struct acl *acl, const struct txt *v, char out[INET6_ADDRSTRLEN], bool *any)
{
    const char *b = v->b, *e = v->b + v->len;
    char ip[INET6_ADDRSTRLEN];

    while (e > b) {
        const char *s = e, *te;
        while (s > b && s[-1] != ',')
            s--;
        te = e;
        e = s > b ? s - 1 : b;
        while (s < te && (*s == ' ' || *s == '\t'))
            s++;
        while (te > s && (te[-1] == ' ' || te[-1] == '\t'))
            te--;
        if (te == s)
            continue; /* an empty element ("a, , b") is no hop */
        if (!canon(s, (size_t)(te - s), ip))
            return (WALK_STOP);
        strcpy(out, ip);
        *any = true;
        if (!acl_match_str(acl, ip))
            return (WALK_DONE);
    }
    return (WALK_ON);
}

void
realip_apply(struct sess *sp, const struct http *hp)
{
    const char *src;
    const struct acl *acl;
    char client[INET6_ADDRSTRLEN];
    enum walk w = WALK_ON;
    bool any = false;

    if (sp == NULL)
        return;
    OBJ_CHECK(sp, SESS_MAGIC);
    if (sp->peer_ip[0] != '\0') {
        /* An earlier request on this connection took an X-Forwarded-For client. */
        strcpy(sp->client_ip, sp->peer_ip);
        strcpy(sp->client_port, sp->peer_port);
    }
    src = __atomic_load_n(&par.trusted_proxies, __ATOMIC_ACQUIRE);
    if (src == NULL || *src == '\0')
        return;
    acl = acl_get(src);
    if (acl != NULL && acl_match_str(acl, sp->client_ip)) {
        /* Fields in order, so the last one holds the right-most entries. */
        for (unsigned i = hp->nhdr; i-- > 0 && w == WALK_ON;)
            if (http_name_eq(&hp->hdr[i].name, "X-Forwarded-For"))
                w = walk_value(acl, &hp->hdr[i].val, client, &any);
    }
    AZ(pthread_rwlock_unlock(&acl_lck));
    /*
     * Junk stops the walk at the last trusted hop; every entry trusted:
     * the left-most.  Either way `client` is an address a trusted proxy
     * wrote, never one only the client did.
     */
    if (!any)
        return;
    if (sp->peer_ip[0] == '\0') {
        strcpy(sp->peer_ip, sp->client_ip);
        strcpy(sp->peer_port, sp->client_port);
    }
    strcpy(sp->client_ip, client);
    strcpy(sp->client_port, "0");
    STAT_INC(realip_xff);
}

void
realip_fini(void)
{
    AZ(pthread_rwlock_wrlock(&acl_lck));
    acl_free(&acl_cur);
    acl_src = NULL;
    AZ(pthread_rwlock_unlock(&acl_lck));
}
