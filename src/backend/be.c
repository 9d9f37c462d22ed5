/*
 * Backends.  Configured on the main thread before workers start and
 * read-only afterwards, so lookups take no lock.
 */
#include "config.h"

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "surogat/bcp.h"
#include "surogat/be.h"
#include "surogat/defs.h"
#include "surogat/num.h"
#include "surogat/par.h"
#include "surogat/sb.h"
#include "surogat/sfb.h"

#define BE_MAX 64

static struct be *backends[BE_MAX];
static unsigned nbackends;

int
be_init(void)
{
    return (0);
}

void
be_fini(void)
{
    for (unsigned i = 0; i < nbackends; i++) {
        struct be *be = backends[i];
        if (be->pool != NULL)
            bcp_free(&be->pool);
        if (be->sfb != NULL)
            sfb_free(&be->sfb);
        free(be->name);
        free(be->host);
        free(be->port);
        free(be->hostport);
        OBJ_FREE(&backends[i]);
    }
    nbackends = 0;
}

int
be_add(const char *name, const char *hostport, struct sb *err)
{
    struct addrinfo hints, *res;
    char host[256], port[32];
    const char *colon, *h = hostport;
    size_t hl;
    struct be *be;
    unsigned portnum;
    int rv;

    if (nbackends == BE_MAX) {
        sb_printf(err, "backend %s: too many backends", name);
        return (-1);
    }
    if (*hostport == '[') {
        const char *rb = strchr(hostport, ']');
        if (rb == NULL || (rb[1] != '\0' && rb[1] != ':')) {
            sb_printf(err, "backend %s: malformed address '%s'", name, hostport);
            return (-1);
        }
        h = hostport + 1;
        hl = (size_t)(rb - h);
        colon = rb[1] == ':' ? rb + 1 : NULL;
    } else {
        colon = strrchr(hostport, ':');
        hl = colon != NULL ? (size_t)(colon - hostport) : strlen(hostport);
    }
    if (hl == 0 || hl >= sizeof host || (colon != NULL && strlen(colon + 1) >= sizeof port) ||
        (colon != NULL && colon[1] == '\0')) {
        sb_printf(err, "backend %s: malformed address '%s'", name, hostport);
        return (-1);
    }
    memcpy(host, h, hl);
    host[hl] = '\0';
    snprintf(port, sizeof port, "%s", colon != NULL ? colon + 1 : "80");
    if (num_port(port, &portnum) != 0 || portnum == 0) {
        sb_printf(err, "backend %s: '%s' is not a port number (1-65535)", name, port);
        return (-1);
    }
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    rv = getaddrinfo(host, port, &hints, &res);
    if (rv != 0) {
        sb_printf(err, "backend %s: cannot resolve '%s': %s", name, hostport, gai_strerror(rv));
        return (-1);
    }
    OBJ_NEW(be, BE_MAGIC);
    be->name = strdup(name);
    be->host = strdup(host);
    be->port = strdup(port);
    AN(be->name);
    AN(be->host);
    AN(be->port);
    rv = asprintf(&be->hostport, "%s%s%s:%s", strchr(host, ':') ? "[" : "", host,
                  strchr(host, ':') ? "]" : "", port);
    SRG_ASSERT(rv > 0);
    be->pool = bcp_new(res->ai_addr, res->ai_addrlen);
    freeaddrinfo(res);
    be->connect_timeout = be->first_byte_timeout = be->between_bytes_timeout = -1;
    backends[nbackends++] = be;
    return (0);
}

int
be_add_static(const char *name, struct sfb *sfb, struct sb *err)
{
    struct be *be;

    if (nbackends == BE_MAX) {
        sb_printf(err, "backend %s: too many backends", name);
        return (-1);
    }
    OBJ_NEW(be, BE_MAGIC);
    be->name = strdup(name);
    AN(be->name);
    be->sfb = sfb;
    be->connect_timeout = be->first_byte_timeout = be->between_bytes_timeout = -1;
    backends[nbackends++] = be;
    return (0);
}

struct be *
be_default(void)
{
    return (nbackends > 0 ? backends[0] : NULL);
}

double
be_connect_timeout(const struct be *be)
{
    return (be->connect_timeout >= 0 ? be->connect_timeout : par.backend_connect_timeout);
}

double
be_first_byte_timeout(const struct be *be)
{
    return (be->first_byte_timeout >= 0 ? be->first_byte_timeout
                                        : par.backend_first_byte_timeout);
}

double
be_between_bytes_timeout(const struct be *be)
{
    return (be->between_bytes_timeout >= 0 ? be->between_bytes_timeout
                                           : par.backend_between_bytes_timeout);
}
