/*
 * be -- backends: a named origin server address with its timeouts and
 * connection pool.  For now the one backend comes from -b; the policy
 * loader will add named backends and directors.
 */
#ifndef SUROGAT_BE_H
#define SUROGAT_BE_H

struct sb;
struct bcp;
struct sfb;

struct be {
    unsigned magic;
#define BE_MAGIC 0x63e01b9a
    char *name;
    char *host;     /* as configured: for the Host header of HTTP/1.0 requests */
    char *port;
    char *hostport; /* "host:port" */
    struct bcp *pool;
    /* Negative: use the backend_* parameter of the same name. */
    double connect_timeout;
    double first_byte_timeout;
    double between_bytes_timeout;
    struct sfb *sfb; /* a static-file backend (no address, no pool), else NULL */
};

int be_init(void);
void be_fini(void);
/* Resolve "host:port" (or "[v6]:port", port defaults to 80) and add it as `name`. */
int be_add(const char *name, const char *hostport, struct sb *err);
/* Add the static-file backend sfb as `name`; it is the backend's from now on. */
int be_add_static(const char *name, struct sfb *sfb, struct sb *err);
struct be *be_default(void); /* NULL when no backend is configured */

double be_connect_timeout(const struct be *be);
double be_first_byte_timeout(const struct be *be);
double be_between_bytes_timeout(const struct be *be);

#endif
