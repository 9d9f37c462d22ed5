/*
 * be -- backends: a named origin server address with its timeouts, its
 * connection pool and its health.
 *
 * A backend comes from -b (be_add, the one named "default") or from a
 * `backend` declaration in the policy (be_get).  Backends are refcounted
 * by the policy programs naming them: a reload that declares the same
 * backend again gets the same object back, with its pool and its probe
 * history.  The last be_release() stops the probe; the memory stays until
 * be_fini(), because requests in flight may still hold the pointer.
 */
#ifndef SUROGAT_BE_H
#define SUROGAT_BE_H

#include <stdbool.h>
#include <stdint.h>

#include "surogat/bcp.h"
#include "surogat/stat.h"

struct sb;
struct bcp;
struct bcp_tls;
struct http;
struct ws;
struct sfb_resp;

/*
 * A backend's kind: how a request reaches it.  An HTTP backend (answer
 * NULL) is fetched from over its connection pool.  A backend that answers
 * in place -- the static-file backend, sfb_be_ops -- fills a response for
 * the deliverer (struct sfb_resp: status, fields, a body from memory or a
 * file) without any fetch, and done() releases it once sent.
 */
struct be_ops {
    const char *kind; /* "http", "static" */
    void (*answer)(void *priv, const struct http *req, struct ws *ws, struct sfb_resp *r);
    void (*done)(void *priv, struct sfb_resp *r);
};
extern const struct be_ops be_http_ops;

struct be_probe_conf {
    const char *url;            /* default "/" */
    const char *request;        /* raw request text ("\r\n" line ends); overrides url */
    double interval, timeout;   /* default 5, 2 seconds; 0 means the default */
    unsigned window, threshold; /* default 8, 3; 1 <= threshold <= window <= 64; 0: default */
    int initial;                /* good results assumed at start; -1 = threshold - 1 */
    unsigned expected_status;   /* default 200; 0 means the default */
};

struct be_conf {
    const char *name, *host, *port; /* port default "80", "443" with tls */
    const char *path;               /* a Unix socket instead of host and port, or NULL */
    unsigned proxy_protocol;        /* 1 or 2: a PROXY header on each connection; 0: none */
    double connect_timeout, first_byte_timeout, between_bytes_timeout; /* <0: params */
    unsigned max_connections;                                          /* 0: the param */
    unsigned weight;                                                   /* 0 means 1 */
    const struct be_probe_conf *probe; /* NULL: healthy unless set sick */
    /*
     * HTTPS to the backend.  The certificate is checked unless tls_noverify:
     * against ca_file (PEM; NULL: the system store), for the name
     * verify_host (NULL: sni, else host, a name or an address).  sni NULL:
     * host when it is a name.  cert and key: a client certificate, or NULL.
     * Without tls, any of these is a conf error.
     */
    bool tls, tls_noverify;
    const char *ca_file, *sni, *verify_host, *cert, *key;
    /*
     * A backend that answers in place (ops->answer, with ops_priv): no
     * address, no pool, no probe, always healthy unless set sick.  NULL:
     * an HTTP backend.  ops_priv is stored, never dereferenced here.
     */
    const struct be_ops *ops;
    void *ops_priv;
};

enum be_admin {
    BE_ADMIN_AUTO,    /* the probe decides (healthy without a probe) */
    BE_ADMIN_HEALTHY, /* forced healthy, whatever the probe says */
    BE_ADMIN_SICK,    /* forced sick */
};

struct be_priv; /* registry, health and probe state: be.c */

/*
 * The fields are read-only after creation, so workers read them without
 * a lock; the mutable state is behind `priv`.
 */
struct be {
    unsigned magic;
#define BE_MAGIC 0x63e01b9a
    char *name;
    char *host;          /* as configured: for the Host header; NULL when it answers in place */
    char *port;          /* NULL when it answers in place */
    char *hostport;      /* "host:port", "[v6]:port"; "localhost" for a Unix socket; NULL when it answers in place */
    char *path;          /* a Unix socket, else NULL */
    unsigned proxy_protocol; /* PROXY header version sent on each connection, 0: none */
    struct bcp *pool;    /* NULL when it answers in place */
    const struct be_ops *ops; /* never NULL: be_http_ops, or an in-place kind */
    void *ops_priv;           /* the in-place kind's own (its struct sfb) */
    struct bcp_tls *tls; /* NULL: plain HTTP; freed with the backend */
    /* Negative: use the backend_* parameter of the same name. */
    double connect_timeout;
    double first_byte_timeout;
    double between_bytes_timeout;
    unsigned weight;          /* >= 1 */
    unsigned max_connections; /* 0: backend_max_connections */
    struct stat_be *stats;    /* its counters (tbl/be_stats.h); the pool counts into them */
    struct be_priv *priv;
};

/*
 * be_init() before any be_add() or be_get() (before the policy is
 * loaded); be_start() after daemonizing, before workers start: it starts
 * the probe thread, and the probes of backends declared so far begin.
 */
int be_init(void);
int be_start(void); /* -1 with errno */
void be_fini(void); /* stops every probe, frees every backend ever created */
/*
 * Resolve "host:port" (or "[v6]:port", port defaults to 80) and add it as
 * `name`, without probe, for the life of the process (-b).
 */
int be_add(const char *name, const char *hostport, struct sb *err);
/*
 * The first be_add() backend while it is healthy, else NULL, as
 * dir_pick(): the caller answers 503.  NULL too when there is none.
 */
struct be *be_default(void);
/*
 * Add a backend that answers in place (ops, its priv) as `name`, for the
 * life of the process (-b /DIR: the static files), the default backend if
 * it is the first.  priv stays the caller's: free it after be_fini().
 */
int be_add_local(const char *name, const struct be_ops *ops, void *priv, struct sb *err);
/* It answers in place: the deliverer sends be->ops->answer()'s response, nothing is fetched. */
static inline bool
be_local(const struct be *be)
{
    return (be->ops->answer != NULL);
}

/*
 * A referenced backend.  Reuses the live one with the same name and an
 * identical conf (a policy reload keeps its pool and probe history), else
 * creates it and starts its probe.  -1 with a message naming the backend
 * on a bad conf or an unresolvable host.  Main or CLI thread: may block
 * resolving the host.
 */
int be_get(const struct be_conf *c, struct be **bep, struct sb *err);
/*
 * Drop a reference; *bep = NULL.  The last one stops the probe and takes
 * the backend out of be_find() and backend.list; the memory stays until
 * be_fini(), since requests in flight may still use it.
 */
void be_release(struct be **bep);
/*
 * A connection to be for a request of the client session sp (NULL: a
 * background refresh, which has none): bcp_get() on its pool with the
 * connect timeout.  With proxy_protocol, a new connection first sends a
 * PROXY header naming the client (LOCAL without one), and an idle one is
 * reused only for the same client connection: the header describes the
 * whole connection.  May block: workers only.
 */
struct sess;
enum bcp_err be_conn_get(struct be *be, const struct sess *sp, bool fresh, struct bcp_conn **out);
/* Any thread, lock-free: the admin state, else the probe's verdict. */
bool be_healthy(const struct be *be);
/*
 * tim_mono() seconds when be came back healthy (its probe or the admin,
 * after having been healthy before) or joined (was created by a policy
 * reload, after be_start()).  0 for a backend healthy since the daemon
 * started, or since its first good probes then.  Any thread, lock-free;
 * for the shard director's ramp-up.
 */
double be_healthy_since(const struct be *be);
/*
 * Requests in flight to be: its connections in use, connecting included
 * (0 for the static-file backend).  Any thread, lock-free, approximate
 * while connections come and go.
 */
unsigned be_busy(const struct be *be);
/* -1: no live backend of that name.  Logs and counts a change of health. */
int be_set_admin(const char *name, enum be_admin a);
struct be *be_find(const char *name); /* the newest live backend by name, or NULL */
/*
 * backend.list: one line per live backend: name, address, health, admin
 * state, probe history (oldest first, 'H' good, '-' bad), connections.
 */
void be_list(struct sb *out);
/*
 * Its pieces: the header line, and one backend's line, named
 * "prefix.name" (prefix NULL: the name alone).  be_list_row() takes no
 * lock: the caller keeps be referenced (a program naming it, or inside
 * be_foreach()).
 */
void be_list_head(struct sb *out);
void be_list_row(const struct be *be, const char *prefix, struct sb *out);
/*
 * fn for each live backend, under the registry lock: fn must not call
 * back into be_ (be_healthy() excepted, which takes no lock).
 */
typedef void be_visit_f(const struct be *be, void *priv);
void be_foreach(be_visit_f *fn, void *priv);
/* The probe window of `be` as a bitmap (bit 0 the newest); 0 without a probe. */
uint64_t be_probe_bits(const struct be *be);
/*
 * Counting what the pool cannot see (the status of an answer, a first
 * byte deadline that passed between interim answers, no read timing
 * out); bad responses are counted by bcp_refused().  Any thread,
 * lock-free, one relaxed atomic add.  id is a COUNTER row of
 * tbl/be_stats.h.
 */
void be_count(const struct be *be, enum stat_be_id id);
void be_count_status(const struct be *be, unsigned status); /* its resp_Nxx row */
/* Every row of tbl/be_stats.h into out[STAT_BE__N], the GAUGE rows read now.  Any thread. */
void be_stats(const struct be *be, uint64_t *out);
/* tim_real() when the health of be last changed, else when it was created. */
double be_changed(const struct be *be);

/* A live backend as its counters are shown (surogatctl stats, /metrics, the status page). */
struct be_snap {
    const struct be *be; /* valid until be_fini() */
    const char *name;    /* be's own */
    const char *addr;    /* "host:port", a Unix socket's path, or the kind ("static") */
    uint64_t v[STAT_BE__N];
    unsigned window; /* of the probe; 0 without one */
    bool dup;        /* another live backend has this name (two programs declare it apart) */
    char progs[128]; /* the programs declaring it, comma-separated; "": none (-b); see pol.h */
};
/*
 * Every live backend, newest first, in a malloc'd array the caller
 * frees; *n of them.  progs is left empty for pol_prog_label().
 */
struct be_snap *be_snapshot(unsigned *n);

double be_connect_timeout(const struct be *be);
double be_first_byte_timeout(const struct be *be);
double be_between_bytes_timeout(const struct be *be);

#endif
