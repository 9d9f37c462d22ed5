/*
 * Backends: the registry, references and health.
 *
 * Every backend ever created stays on one list until be_fini(), newest
 * first, because a request in flight may hold a pointer to a backend the
 * policy just dropped.  be_mtx guards the list, the refcounts and the
 * probe handles; it is taken by the main and CLI threads only (be_get,
 * be_release, be_find, be_set_admin, be_list), never on a request.
 *
 * Health is read on every request by many workers at once, so it is two
 * atomics per backend: the admin state (backend.set_health) and the
 * probe's verdict, written by the probe thread through probe_result().
 *
 * The backend's counters (tbl/be_stats.h) live with it, in a stat_be the
 * pool counts into and be_count() adds to, freed with the backend: a
 * reload that keeps the backend keeps them.
 */
#include "config.h"

#include <netdb.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "surogat/bcp.h"
#include "surogat/be.h"
#include "surogat/defs.h"
#include "surogat/log.h"
#include "surogat/num.h"
#include "surogat/par.h"
#include "surogat/pp.h"
#include "surogat/prb.h"
#include "surogat/sb.h"
#include "surogat/stat.h"
#include "surogat/tim.h"

struct be_priv {
    unsigned refcnt; /* under be_mtx; 0: retired */
    bool permanent;  /* from -b: never released */
    bool has_probe;
    /* The probe conf as checked, defaults filled in, strings owned. */
    struct be_probe_conf pc;
    struct prb *probe; /* under be_mtx; NULL when retired */
    /* The TLS fields as configured (not defaulted), for same_conf(); owned. */
    bool tls, tls_noverify;
    char *ca_file, *sni, *verify_host, *cert, *key;
    /* Atomics: read by workers and the CLI. */
    int admin;        /* enum be_admin */
    bool probe_ok;    /* the window's verdict; true without a probe */
    uint64_t bits;    /* probe history, bit 0 newest */
    double t_up;      /* be_healthy_since() */
    double t_changed; /* tim_real() of the last change of health, else of creation */
    bool up_once;     /* healthy before (or a reload's): its next coming up is a return */
    struct be *next;  /* every backend, newest first; under be_mtx */
};

const struct be_ops be_http_ops = { "http", NULL, NULL };

/* The conf declares a backend that answers in place: no address, pool or probe. */
static bool
conf_local(const struct be_conf *c)
{
    return (c->ops != NULL && c->ops->answer != NULL);
}

static pthread_mutex_t be_mtx = PTHREAD_MUTEX_INITIALIZER;
static struct be *be_all;      /* under be_mtx */
static struct be *be_default_; /* the first be_add(); set before workers start */
static bool be_started;        /* be_start() ran: a backend created now joins at run time */

int
be_init(void)
{
    return (prb_init());
}

int
be_start(void)
{
    __atomic_store_n(&be_started, true, __ATOMIC_RELAXED);
    return (prb_run());
}

static void
be_free(struct be *be)
{
    struct be_priv *bp = be->priv;

    if (be->pool != NULL)
        bcp_free(&be->pool);
    if (be->tls != NULL)
        bcp_tls_free(&be->tls);
    stat_be_free(&be->stats);
    free(bp->ca_file);
    free(bp->sni);
    free(bp->verify_host);
    free(bp->cert);
    free(bp->key);
    free(be->name);
    free(be->host);
    free(be->port);
    free(be->hostport);
    free(be->path);
    free((char *)(uintptr_t)bp->pc.url);
    free((char *)(uintptr_t)bp->pc.request);
    free(bp);
    OBJ_FREE(&be);
}

void
be_fini(void)
{
    struct be *be;

    /* First the probe thread, so that no callback runs on a freed backend. */
    prb_fini();
    AZ(pthread_mutex_lock(&be_mtx));
    while ((be = be_all) != NULL) {
        be_all = be->priv->next;
        be_free(be);
    }
    be_default_ = NULL;
    AZ(pthread_mutex_unlock(&be_mtx));
}

static const char *const admin_names[] = { "auto", "healthy", "sick" };

bool
be_healthy(const struct be *be)
{
    OBJ_CHECK(be, BE_MAGIC);
    switch (__atomic_load_n(&be->priv->admin, __ATOMIC_RELAXED)) {
    case BE_ADMIN_HEALTHY:
        return (true);
    case BE_ADMIN_SICK:
        return (false);
    default:
        return (__atomic_load_n(&be->priv->probe_ok, __ATOMIC_RELAXED));
    }
}

/* Log and count a change of effective health. */
static void
health_changed(const struct be *be, bool was, const char *why)
{
    bool now = be_healthy(be);
    double t = tim_mono(), t_real = tim_real();

    if (now == was)
        return;
    __atomic_store(&be->priv->t_changed, &t_real, __ATOMIC_RELAXED);
    /*
     * A backend declared at start and healthy for the first time comes up
     * with the rest of the fleet, cold like it: it does not ramp up.
     */
    if (now && __atomic_exchange_n(&be->priv->up_once, true, __ATOMIC_RELAXED))
        __atomic_store(&be->priv->t_up, &t, __ATOMIC_RELAXED);
    STAT_INC(backend_health_changed);
    log_msg(now ? LOG_NOTICE : LOG_WARNING, "backend %s: %s (%s)", be->name,
            now ? "healthy" : "sick", why);
}

/* On the probe thread. */
static void
probe_result(void *priv, uint64_t bits, bool healthy)
{
    struct be *be = priv;
    char hbuf[PRB_WINDOW_MAX + 32];
    struct sb why;
    bool was;

    OBJ_CHECK(be, BE_MAGIC);
    was = be_healthy(be);
    __atomic_store_n(&be->priv->bits, bits, __ATOMIC_RELAXED);
    __atomic_store_n(&be->priv->probe_ok, healthy, __ATOMIC_RELAXED);
    if (was == be_healthy(be))
        return;
    sb_init(&why, hbuf, sizeof hbuf);
    sb_cat(&why, "probe ");
    prb_history(bits, be->priv->pc.window, &why);
    health_changed(be, was, hbuf);
}

static bool
name_ok(const char *name)
{
    if (name == NULL || *name == '\0' || strlen(name) > 64)
        return (false);
    /* It appears in backend.list and as a CLI argument: no blanks, no quotes. */
    for (const char *p = name; *p != '\0'; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '_' || *p == '-' || *p == '.'))
            return (false);
    return (true);
}

static bool
str_eq(const char *a, const char *b)
{
    return (a == b || (a != NULL && b != NULL && strcmp(a, b) == 0));
}

/* Whether the live `be` is what conf `c` (probe conf `pc` as checked) asks for. */
static bool
same_conf(const struct be *be, const struct be_conf *c, const struct be_probe_conf *pc,
          const char *port, unsigned weight)
{
    const struct be_probe_conf *bpc = &be->priv->pc;

    if (strcmp(be->name, c->name) != 0 || be->ops != (conf_local(c) ? c->ops : &be_http_ops) ||
        be->ops_priv != c->ops_priv || !str_eq(be->host, c->host) ||
        !str_eq(be->port, conf_local(c) || c->path != NULL ? NULL : port) ||
        !str_eq(be->path, c->path) || be->proxy_protocol != c->proxy_protocol)
        return (false);
    if (be->connect_timeout != c->connect_timeout ||
        be->first_byte_timeout != c->first_byte_timeout ||
        be->between_bytes_timeout != c->between_bytes_timeout ||
        be->max_connections != c->max_connections || be->weight != weight)
        return (false);
    if (be->priv->has_probe != (pc != NULL))
        return (false);
    if (be->priv->tls != c->tls || be->priv->tls_noverify != c->tls_noverify ||
        !str_eq(be->priv->ca_file, c->ca_file) || !str_eq(be->priv->sni, c->sni) ||
        !str_eq(be->priv->verify_host, c->verify_host) || !str_eq(be->priv->cert, c->cert) ||
        !str_eq(be->priv->key, c->key))
        return (false);
    return (pc == NULL ||
            (str_eq(bpc->url, pc->url) && str_eq(bpc->request, pc->request) &&
             bpc->interval == pc->interval && bpc->timeout == pc->timeout &&
             bpc->window == pc->window && bpc->threshold == pc->threshold &&
             bpc->initial == pc->initial && bpc->expected_status == pc->expected_status));
}

static char *
xstrdup(const char *s)
{
    char *d;

    if (s == NULL)
        return (NULL);
    d = strdup(s);
    AN(d);
    return (d);
}

/*
 * The TLS context of conf c, its defaults filled in: SNI the host when it
 * is a name, the certificate checked for the SNI name, else for the host
 * (an address is checked against the certificate's IP addresses).
 */
static struct bcp_tls *
tls_new(const struct be_conf *c, struct sb *err)
{
    struct bcp_tls_conf tc;
    struct bcp_tls *t;
    size_t mark = err->len;

    memset(&tc, 0, sizeof tc);
    tc.name = c->name;
    tc.ca_file = c->ca_file;
    tc.sni = c->sni != NULL ? c->sni : c->host;
    tc.verify_host = c->verify_host != NULL ? c->verify_host : c->sni != NULL ? c->sni : c->host;
    tc.cert = c->cert;
    tc.key = c->key;
    tc.verify = !c->tls_noverify;
    sb_printf(err, "backend %s: ", c->name);
    t = bcp_tls_new(&tc, err);
    if (t != NULL) {
        err->len = mark;
        err->buf[mark] = '\0';
    }
    return (t);
}

/* Create a backend (not yet on the list), resolving its address. */
static struct be *
be_create(const struct be_conf *c, const struct be_probe_conf *pc, const char *port,
          unsigned weight, struct sb *err)
{
    struct addrinfo hints, *res = NULL;
    struct bcp_tls *tls = NULL;
    struct be *be;
    bool v6;
    int rv;

    if (c->path != NULL) {
        struct sockaddr_un *sun;
        /* One address, as getaddrinfo() would give it: the rest of the code cannot tell. */
        res = calloc(1, sizeof *res + sizeof *sun);
        AN(res);
        sun = (struct sockaddr_un *)(void *)(res + 1);
        sun->sun_family = AF_UNIX;
        strcpy(sun->sun_path, c->path); /* be_get() checked the length */
        res->ai_family = AF_UNIX;
        res->ai_addr = (struct sockaddr *)sun;
        res->ai_addrlen = sizeof *sun;
    } else if (!conf_local(c)) {
        memset(&hints, 0, sizeof hints);
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        rv = getaddrinfo(c->host, port, &hints, &res);
        if (rv != 0) {
            sb_printf(err, "backend %s: cannot resolve '%s' port %s: %s", c->name, c->host, port,
                      gai_strerror(rv));
            return (NULL);
        }
        if (c->tls && (tls = tls_new(c, err)) == NULL) {
            freeaddrinfo(res);
            return (NULL);
        }
    }
    OBJ_NEW(be, BE_MAGIC);
    be->priv = calloc(1, sizeof *be->priv);
    AN(be->priv);
    be->name = xstrdup(c->name);
    be->ops = conf_local(c) ? c->ops : &be_http_ops;
    be->ops_priv = c->ops_priv;
    be->connect_timeout = c->connect_timeout;
    be->first_byte_timeout = c->first_byte_timeout;
    be->between_bytes_timeout = c->between_bytes_timeout;
    be->max_connections = c->max_connections;
    be->weight = weight;
    be->priv->refcnt = 1;
    be->priv->probe_ok = true;
    be->priv->t_changed = tim_real();
    be->stats = stat_be_new();
    if (__atomic_load_n(&be_started, __ATOMIC_RELAXED)) {
        be->priv->t_up = tim_mono(); /* a reload's: joining a running fleet */
        be->priv->up_once = true;
    }
    be->tls = tls;
    be->priv->tls = c->tls;
    be->priv->tls_noverify = c->tls_noverify;
    be->priv->ca_file = xstrdup(c->ca_file);
    be->priv->sni = xstrdup(c->sni);
    be->priv->verify_host = xstrdup(c->verify_host);
    be->priv->cert = xstrdup(c->cert);
    be->priv->key = xstrdup(c->key);
    be->proxy_protocol = c->proxy_protocol;
    if (c->path != NULL) {
        be->path = xstrdup(c->path);
        /* The Host of a request that has none (HTTP/1.0) and of the probe. */
        be->hostport = xstrdup("localhost");
        be->pool =
            bcp_new(res->ai_addr, res->ai_addrlen, c->max_connections, NULL, be->name, be->stats);
    } else if (res != NULL) {
        be->host = xstrdup(c->host);
        be->port = xstrdup(port);
        v6 = strchr(c->host, ':') != NULL;
        rv = asprintf(&be->hostport, "%s%s%s:%s", v6 ? "[" : "", c->host, v6 ? "]" : "", port);
        SRG_ASSERT(rv > 0);
        be->pool =
            bcp_new(res->ai_addr, res->ai_addrlen, c->max_connections, tls, be->name, be->stats);
    }
    if (pc != NULL) {
        be->priv->has_probe = true;
        be->priv->pc = *pc;
        be->priv->pc.url = xstrdup(pc->url);
        be->priv->pc.request = xstrdup(pc->request);
        be->priv->probe_ok = prb_window_healthy(prb_initial_bits((unsigned)pc->initial, pc->window),
                                                pc->window, pc->threshold);
        be->priv->up_once |= be->priv->probe_ok; /* before the probe thread may change it */
        be->priv->probe =
            prb_start(be->name, res->ai_addr, res->ai_addrlen, be->hostport, tls, c->proxy_protocol,
                      &be->priv->pc, probe_result, be, &be->priv->bits);
    } else {
        be->priv->up_once = true; /* healthy from the start */
    }
    if (c->path != NULL)
        free(res);
    else if (res != NULL)
        freeaddrinfo(res);
    return (be);
}

int
be_get(const struct be_conf *c, struct be **bep, struct sb *err)
{
    struct be_probe_conf pcbuf, *pc = NULL;
    const char *port;
    unsigned portnum, weight;
    struct be *be;

    AN(c);
    AN(bep);
    *bep = NULL;
    if (!name_ok(c->name)) {
        sb_printf(err, "backend '%.64s': a name is 1-64 letters, digits, '_', '-' or '.'",
                  c->name != NULL ? c->name : "");
        return (-1);
    }
    if (c->path != NULL) {
        if (c->host != NULL || c->port != NULL || conf_local(c)) {
            sb_printf(err, "backend %s: path (a Unix socket) or host and port, not both", c->name);
            return (-1);
        }
        if (c->path[0] != '/' || strlen(c->path) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
            sb_printf(err, "backend %s: path must be an absolute path of at most %zu bytes",
                      c->name, sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
            return (-1);
        }
        if (c->tls) {
            sb_printf(err, "backend %s: no tls over a Unix socket (path)", c->name);
            return (-1);
        }
    } else if (!conf_local(c) && (c->host == NULL || *c->host == '\0')) {
        sb_printf(err, "backend %s: no host", c->name);
        return (-1);
    }
    if (c->proxy_protocol > 2) {
        sb_printf(err, "backend %s: proxy_protocol is 1 or 2", c->name);
        return (-1);
    }
    if (c->proxy_protocol > 0 && conf_local(c)) {
        sb_printf(err, "backend %s: a static backend (root) takes no proxy_protocol", c->name);
        return (-1);
    }
    if (!c->tls && (c->tls_noverify || c->ca_file != NULL || c->sni != NULL ||
                    c->verify_host != NULL || c->cert != NULL || c->key != NULL)) {
        sb_printf(err,
                  "backend %s: ca_file, sni, verify, verify_host, cert and key need tls = true",
                  c->name);
        return (-1);
    }
    /*
     * The policy is checked (-C) from where surogatd starts but loaded in
     * its -n directory: a relative path would name two different files.
     */
    if ((c->ca_file != NULL && c->ca_file[0] != '/') || (c->cert != NULL && c->cert[0] != '/') ||
        (c->key != NULL && c->key[0] != '/')) {
        sb_printf(err, "backend %s: ca_file, cert and key must be absolute paths", c->name);
        return (-1);
    }
    if (c->tls && conf_local(c)) {
        sb_printf(err, "backend %s: a static backend (root) has no tls", c->name);
        return (-1);
    }
    port = c->port != NULL ? c->port : c->tls ? "443" : "80";
    if (!conf_local(c) && c->path == NULL && (num_port(port, &portnum) != 0 || portnum == 0)) {
        sb_printf(err, "backend %s: '%.32s' is not a port number (1-65535)", c->name, port);
        return (-1);
    }
    if (c->connect_timeout > 86400 || c->first_byte_timeout > 86400 ||
        c->between_bytes_timeout > 86400) {
        sb_printf(err, "backend %s: a timeout is longer than a day", c->name);
        return (-1);
    }
    weight = c->weight == 0 ? 1 : c->weight;
    if (c->probe != NULL && !conf_local(c)) {
        size_t mark = err->len;
        sb_printf(err, "backend %s: ", c->name);
        if (prb_conf_check(c->probe, &pcbuf, err) != 0)
            return (-1);
        err->len = mark;
        err->buf[mark] = '\0';
        pc = &pcbuf;
    }
    AZ(pthread_mutex_lock(&be_mtx));
    for (be = be_all; be != NULL; be = be->priv->next) {
        if (be->priv->refcnt > 0 && same_conf(be, c, pc, port, weight)) {
            be->priv->refcnt++;
            AZ(pthread_mutex_unlock(&be_mtx));
            *bep = be;
            return (0);
        }
    }
    AZ(pthread_mutex_unlock(&be_mtx));
    /* Resolving may block: outside the lock. */
    be = be_create(c, pc, port, weight, err);
    if (be == NULL)
        return (-1);
    AZ(pthread_mutex_lock(&be_mtx));
    be->priv->next = be_all;
    be_all = be;
    AZ(pthread_mutex_unlock(&be_mtx));
    *bep = be;
    return (0);
}

void
be_release(struct be **bep)
{
    struct be *be;

    OBJ_TAKE(be, bep, BE_MAGIC);
    AZ(pthread_mutex_lock(&be_mtx));
    SRG_ASSERT(be->priv->refcnt > 0);
    if (--be->priv->refcnt == 0 && be->priv->probe != NULL)
        prb_stop(&be->priv->probe);
    SRG_ASSERT(be->priv->refcnt > 0 || !be->priv->permanent);
    AZ(pthread_mutex_unlock(&be_mtx));
}

/* -b: a backend for the life of the process, the default if it is the first. */
static int
add_permanent(const struct be_conf *c, struct sb *err)
{
    struct be *be;

    if (be_get(c, &be, err) != 0)
        return (-1);
    AZ(pthread_mutex_lock(&be_mtx));
    be->priv->permanent = true;
    if (be_default_ == NULL)
        be_default_ = be;
    AZ(pthread_mutex_unlock(&be_mtx));
    return (0);
}

int
be_add(const char *name, const char *hostport, struct sb *err)
{
    char host[256], port[32];
    const char *colon, *h = hostport;
    struct be_conf c;
    size_t hl;

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
    memset(&c, 0, sizeof c);
    c.name = name;
    c.host = host;
    c.port = port;
    c.connect_timeout = c.first_byte_timeout = c.between_bytes_timeout = -1;
    return (add_permanent(&c, err));
}

int
be_add_local(const char *name, const struct be_ops *ops, void *priv, struct sb *err)
{
    struct be_conf c;

    AN(ops);
    AN(ops->answer);
    memset(&c, 0, sizeof c);
    c.name = name;
    c.ops = ops;
    c.ops_priv = priv;
    c.connect_timeout = c.first_byte_timeout = c.between_bytes_timeout = -1;
    return (add_permanent(&c, err));
}

struct be *
be_default(void)
{
    struct be *be = be_default_;

    if (be == NULL)
        return (NULL);
    if (!be_healthy(be)) {
        STAT_INC(backend_unhealthy);
        return (NULL);
    }
    return (be);
}

struct be *
be_find(const char *name)
{
    struct be *be;

    AN(name);
    AZ(pthread_mutex_lock(&be_mtx));
    for (be = be_all; be != NULL; be = be->priv->next)
        if (be->priv->refcnt > 0 && strcmp(be->name, name) == 0)
            break;
    AZ(pthread_mutex_unlock(&be_mtx));
    return (be);
}

int
be_set_admin(const char *name, enum be_admin a)
{
    struct be *be;
    bool was;
    int found = -1;

    AN(name);
    SRG_ASSERT(a == BE_ADMIN_AUTO || a == BE_ADMIN_HEALTHY || a == BE_ADMIN_SICK);
    AZ(pthread_mutex_lock(&be_mtx));
    /* Every live one: during a reload the old and the new program each hold one. */
    for (be = be_all; be != NULL; be = be->priv->next) {
        if (be->priv->refcnt == 0 || strcmp(be->name, name) != 0)
            continue;
        was = be_healthy(be);
        __atomic_store_n(&be->priv->admin, (int)a, __ATOMIC_RELAXED);
        health_changed(be, was, a == BE_ADMIN_AUTO ? "set to auto" : "set by the admin");
        found = 0;
    }
    AZ(pthread_mutex_unlock(&be_mtx));
    return (found);
}

double
be_healthy_since(const struct be *be)
{
    double t;

    OBJ_CHECK(be, BE_MAGIC);
    __atomic_load(&be->priv->t_up, &t, __ATOMIC_RELAXED);
    return (t);
}

unsigned
be_busy(const struct be *be)
{
    OBJ_CHECK(be, BE_MAGIC);
    return (be->pool != NULL ? bcp_busy_count(be->pool) : 0);
}

uint64_t
be_probe_bits(const struct be *be)
{
    OBJ_CHECK(be, BE_MAGIC);
    return (be->priv->has_probe ? __atomic_load_n(&be->priv->bits, __ATOMIC_RELAXED) : 0);
}

void
be_count(const struct be *be, enum stat_be_id id)
{
    OBJ_CHECK(be, BE_MAGIC);
    stat_be_add(be->stats, id, 1);
}

void
be_count_status(const struct be *be, unsigned status)
{
    OBJ_CHECK(be, BE_MAGIC);
    stat_be_status(be->stats, status);
}

void
be_stats(const struct be *be, uint64_t *out)
{
    double t;

    OBJ_CHECK(be, BE_MAGIC);
    AN(out);
    stat_be_sum(be->stats, out);
    __atomic_load(&be->priv->t_changed, &t, __ATOMIC_RELAXED);
    out[STAT_BE_healthy] = be_healthy(be) ? 1 : 0;
    out[STAT_BE_changed] = (uint64_t)t;
    out[STAT_BE_happy] = be_probe_bits(be);
    out[STAT_BE_probe_window] = be->priv->has_probe ? be->priv->pc.window : 0;
    out[STAT_BE_probe_good] =
        be->priv->has_probe ? prb_good(out[STAT_BE_happy], be->priv->pc.window) : 0;
    out[STAT_BE_open_connections] = be->pool != NULL ? bcp_conn_count(be->pool) : 0;
    out[STAT_BE_busy_connections] = be_busy(be);
}

double
be_changed(const struct be *be)
{
    double t;

    OBJ_CHECK(be, BE_MAGIC);
    __atomic_load(&be->priv->t_changed, &t, __ATOMIC_RELAXED);
    return (t);
}

void
be_foreach(be_visit_f *fn, void *priv)
{
    AZ(pthread_mutex_lock(&be_mtx));
    for (struct be *be = be_all; be != NULL; be = be->priv->next)
        if (be->priv->refcnt > 0)
            fn(be, priv);
    AZ(pthread_mutex_unlock(&be_mtx));
}

struct be_snap *
be_snapshot(unsigned *np)
{
    struct be_snap *v;
    unsigned n = 0, cap = 0;

    AN(np);
    AZ(pthread_mutex_lock(&be_mtx));
    for (struct be *be = be_all; be != NULL; be = be->priv->next)
        cap += be->priv->refcnt > 0;
    v = calloc(cap > 0 ? cap : 1, sizeof *v);
    AN(v);
    for (struct be *be = be_all; be != NULL; be = be->priv->next) {
        if (be->priv->refcnt == 0)
            continue;
        v[n].be = be;
        v[n].name = be->name;
        v[n].addr = be_local(be) ? be->ops->kind : be->path != NULL ? be->path : be->hostport;
        be_stats(be, v[n].v);
        v[n].window = be->priv->has_probe ? be->priv->pc.window : 0;
        n++;
    }
    AZ(pthread_mutex_unlock(&be_mtx));
    /* XXX: quadratic in the backends, fine for the hundreds a policy declares. */
    for (unsigned i = 0; i < n; i++)
        for (unsigned j = 0; j < n && !v[i].dup; j++)
            v[i].dup = i != j && strcmp(v[i].name, v[j].name) == 0;
    *np = n;
    return (v);
}

void
be_list_head(struct sb *out)
{
    sb_printf(out, "%-24s %-28s %-8s %-8s %-6s %s\n", "Backend", "Address", "Health", "Admin",
              "Conns", "Probe");
}

/* No lock: what it reads is immutable or atomic, and the caller keeps be alive. */
void
be_list_row(const struct be *be, const char *prefix, struct sb *out)
{
    char name[256];
    int admin;

    OBJ_CHECK(be, BE_MAGIC);
    snprintf(name, sizeof name, "%s%s%s", prefix != NULL ? prefix : "", prefix != NULL ? "." : "",
             be->name);
    admin = __atomic_load_n(&be->priv->admin, __ATOMIC_RELAXED);
    sb_printf(out, "%-24s %-28s %-8s %-8s %-6u ", name,
              be->path != NULL       ? be->path
              : be->hostport != NULL ? be->hostport
                                     : "(static)",
              be_healthy(be) ? "healthy" : "sick", admin_names[admin],
              be->pool != NULL ? bcp_conn_count(be->pool) : 0);
    if (be->priv->has_probe) {
        uint64_t bits = be_probe_bits(be);
        sb_printf(out, "%u/%u ", prb_good(bits, be->priv->pc.window), be->priv->pc.window);
        prb_history(bits, be->priv->pc.window, out);
    } else {
        sb_cat(out, "-");
    }
    sb_cat(out, "\n");
}

void
be_list(struct sb *out)
{
    be_list_head(out);
    AZ(pthread_mutex_lock(&be_mtx));
    for (struct be *be = be_all; be != NULL; be = be->priv->next)
        if (be->priv->refcnt > 0)
            be_list_row(be, NULL, out);
    AZ(pthread_mutex_unlock(&be_mtx));
}

enum bcp_err
be_conn_get(struct be *be, const struct sess *sp, bool fresh, struct bcp_conn **out)
{
    uint8_t hdr[PP_BUILD_MAX];
    size_t n;

    OBJ_CHECK(be, BE_MAGIC);
    AN(be->pool);
    if (be->proxy_protocol == 0)
        return (bcp_get(be->pool, be_connect_timeout(be), fresh, out));
    /*
     * The header is built per request, but it only goes on the wire with
     * a new connection; it is also the tag that keeps connections opened
     * for one client from carrying another's requests.
     */
    n = pp_backend_header(be->proxy_protocol, sp, hdr);
    return (bcp_get_tagged(be->pool, be_connect_timeout(be), fresh, hdr, n, out));
}

double
be_connect_timeout(const struct be *be)
{
    return (be->connect_timeout >= 0 ? be->connect_timeout : par.backend_connect_timeout);
}

double
be_first_byte_timeout(const struct be *be)
{
    return (be->first_byte_timeout >= 0 ? be->first_byte_timeout : par.backend_first_byte_timeout);
}

double
be_between_bytes_timeout(const struct be *be)
{
    return (be->between_bytes_timeout >= 0 ? be->between_bytes_timeout
                                           : par.backend_between_bytes_timeout);
}
