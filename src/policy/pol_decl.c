/*
 * Declarations in a policy script: backends, directors and routes.
 *
 *   backend "apache" { host = "127.0.0.1", port = 8080, probe = { url = "/health" } }
 *   backend "static" { root = "/srv/www" }
 *   director "app" { type = "round_robin", backends = { "apache", "apache2" } }
 *   director "fleet" { type = "shard", backends = { "a", "b", "c" }, rampup = "30s" }
 *   route { ext = { "jpg", "css" }, to = "static" }
 *   route { to = "app" }
 *   shared "ratelimit" { size = "10m" }
 *   cluster "fleet" { peers = { n1 = "10.0.0.1:80", n2 = "10.0.0.2:80" }, origin = "apache" }
 *
 * `backend "x"` is a call returning a function that takes the table, so a
 * declaration reads like a Varnish one.  At the script's top level each
 * call only records what it was given, with its file and line; when a
 * program is checked (pol_load), pol__decl_build() turns the records of
 * the scratch state into the program's configuration: referenced
 * backends (be_get: a reload keeps the pools and probe history of
 * unchanged ones), directors and the route table.  Worker states record
 * the same declarations and ignore them.  Any mistake -- an unknown
 * field, a wrong type, a name declared twice or never -- is an error
 * naming the declaration's file and line, and the program is refused.
 *
 * Which director a request goes to: req.backend when the script set it,
 * else the first matching route, else the declaration named "default"
 * (or -b's backend), else the first backend declared.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <lauxlib.h>
#include <openssl/crypto.h>

#include "surogat/be.h"
#include "surogat/clu.h"
#include "surogat/defs.h"
#include "surogat/dir.h"
#include "surogat/http.h"
#include "surogat/num.h"
#include "surogat/rt.h"
#include "surogat/sb.h"
#include "surogat/sfb.h"
#include "surogat/shard.h"

#include "pol_priv.h"

#define DECL_KEY "pol.decl"

/*
 * Every static backend's files ever built.  A backend's memory outlives
 * the program that declared it (requests in flight may use it), and so
 * must what it points at: they go at exit (pol__decl_fini()).
 */
static pthread_mutex_t sfb_mtx = PTHREAD_MUTEX_INITIALIZER;
static struct sfb **sfb_all;
static unsigned sfb_n, sfb_cap;

static void
sfb_keep(struct sfb *sfb)
{
    AZ(pthread_mutex_lock(&sfb_mtx));
    if (sfb_n == sfb_cap) {
        sfb_cap = sfb_cap > 0 ? 2 * sfb_cap : 8;
        sfb_all = realloc(sfb_all, sfb_cap * sizeof *sfb_all);
        AN(sfb_all);
    }
    sfb_all[sfb_n++] = sfb;
    AZ(pthread_mutex_unlock(&sfb_mtx));
}

void
pol__decl_fini(void)
{
    AZ(pthread_mutex_lock(&sfb_mtx));
    while (sfb_n > 0)
        sfb_free(&sfb_all[--sfb_n]);
    free(sfb_all);
    sfb_all = NULL;
    sfb_cap = 0;
    AZ(pthread_mutex_unlock(&sfb_mtx));
}

/* A program's backends, directors and routes. */
struct pol_cfg {
    unsigned magic;
#define POL_CFG_MAGIC 0x2c85e9d1
    struct be **be; /* referenced */
    unsigned nbe;
    struct dir **dir; /* leaves for the backends first, then the directors */
    unsigned ndir;
    struct rt *rt;
    struct dir *dflt; /* NULL: nothing declared and no -b */
    unsigned nstatic; /* static-file backends it can route to: 0 spares every request the check */
    struct pol_shd **shd; /* its shared dictionaries, referenced (pol_shared.c) */
    unsigned nshd;
    struct clu *clu; /* its cluster, referenced, or NULL */
};

/* ---- recording, in every state ---- */

/* Append {kind, name, conf, where} to the registry's list. */
static void
record(lua_State *L, const char *kind, int name_idx, int conf_idx)
{
    lua_Debug ar;
    char where[300] = "?";

    if (lua_getstack(L, 1, &ar) && lua_getinfo(L, "Sl", &ar))
        snprintf(where, sizeof where, "%s:%d", ar.short_src, ar.currentline);
    lua_getfield(L, LUA_REGISTRYINDEX, DECL_KEY);
    lua_createtable(L, 0, 4);
    lua_pushstring(L, kind);
    lua_setfield(L, -2, "kind");
    if (name_idx != 0) {
        lua_pushvalue(L, name_idx);
        lua_setfield(L, -2, "name");
    }
    lua_pushvalue(L, conf_idx);
    lua_setfield(L, -2, "conf");
    lua_pushstring(L, where);
    lua_setfield(L, -2, "where");
    lua_rawseti(L, -2, (lua_Integer)lua_rawlen(L, -2) + 1);
    lua_pop(L, 1);
}

static void
only_at_top(lua_State *L, const char *kind)
{
    if (pol__in_hook(pol__wrk(L)))
        (void)luaL_error(L, "%s: declarations belong at the top level of the script", kind);
}

/* backend "name" { ... } / director "name" { ... }: the second call. */
static int
l_decl_conf(lua_State *L)
{
    const char *kind = lua_tostring(L, lua_upvalueindex(1));

    only_at_top(L, kind);
    luaL_checktype(L, 1, LUA_TTABLE);
    record(L, kind, lua_upvalueindex(2), 1);
    return (0);
}

static int
l_decl_named(lua_State *L)
{
    const char *kind = lua_tostring(L, lua_upvalueindex(1));

    only_at_top(L, kind);
    if (luaL_checkstring(L, 1)[0] == '\0')
        return (luaL_error(L, "%s: empty name", kind));
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_pushvalue(L, 1);
    lua_pushcclosure(L, l_decl_conf, 2);
    return (1);
}

static int
l_route(lua_State *L)
{
    only_at_top(L, "route");
    luaL_checktype(L, 1, LUA_TTABLE);
    record(L, "route", 0, 1);
    return (0);
}

void
pol__decl_open(lua_State *L)
{
    lua_newtable(L);
    lua_setfield(L, LUA_REGISTRYINDEX, DECL_KEY);
    lua_pushliteral(L, "backend");
    lua_pushcclosure(L, l_decl_named, 1);
    lua_setglobal(L, "backend");
    lua_pushliteral(L, "director");
    lua_pushcclosure(L, l_decl_named, 1);
    lua_setglobal(L, "director");
    lua_pushliteral(L, "shared");
    lua_pushcclosure(L, l_decl_named, 1);
    lua_setglobal(L, "shared");
    lua_pushliteral(L, "cluster");
    lua_pushcclosure(L, l_decl_named, 1);
    lua_setglobal(L, "cluster");
    lua_register(L, "route", l_route);
}

/* ---- building, from the scratch state's records ---- */

/* One declaration being read: its table on top of the stack, and where it was written. */
struct decl {
    lua_State *L;
    const char *kind;
    const char *name; /* NULL for a route */
    const char *where;
    struct sb *err;
    int failed;
};

static int
decl_fail(struct decl *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The first mistake only: "file:line: backend "x": message".  -1. */
static int
decl_fail(struct decl *d, const char *fmt, ...)
{
    char msg[400];
    va_list ap;

    if (!d->failed) {
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        sb_printf(d->err, "%s: %s", d->where, d->kind);
        if (d->name != NULL)
            sb_printf(d->err, " \"%s\"", d->name);
        sb_printf(d->err, ": %s", msg);
    }
    d->failed = 1;
    return (-1);
}

/* A message of be_get(), dir_new(), rt_add(), sfb_new(): they name what failed already. */
static int
decl_fail_from(struct decl *d, const char *msg)
{
    if (!d->failed)
        sb_printf(d->err, "%s: %s", d->where, msg);
    d->failed = 1;
    return (-1);
}

/* Every key of the table at idx is one of allowed[]. */
static void
check_fields(struct decl *d, int idx, const char *const *allowed, size_t n, const char *what)
{
    lua_State *L = d->L;

    lua_pushnil(L);
    while (lua_next(L, idx) != 0) {
        const char *k = lua_type(L, -2) == LUA_TSTRING ? lua_tostring(L, -2) : NULL;
        size_t i;
        for (i = 0; k != NULL && i < n; i++)
            if (strcmp(k, allowed[i]) == 0)
                break;
        if (k == NULL || i == n)
            (void)decl_fail(d, "unknown field \"%s\"%s", k != NULL ? k : "(not a name)", what);
        lua_pop(L, 1);
    }
}

/* A string field (NULL when absent); numbers are accepted as their text (port = 8080). */
static const char *
field_str(struct decl *d, int idx, const char *key)
{
    lua_State *L = d->L;
    const char *s = NULL;

    switch (lua_getfield(L, idx, key)) {
    case LUA_TNIL:
        break;
    case LUA_TSTRING:
    case LUA_TNUMBER:
        s = lua_tostring(L, -1);
        break;
    default:
        (void)decl_fail(d, "%s must be a string", key);
    }
    lua_pop(L, 1); /* the string stays reachable from the table: it is anchored there */
    return (s);
}

/* A number field; dflt when absent. */
static double
field_num(struct decl *d, int idx, const char *key, double dflt, double min, double max)
{
    lua_State *L = d->L;
    double v = dflt;
    int isnum;

    if (lua_getfield(L, idx, key) != LUA_TNIL) {
        v = lua_tonumberx(L, -1, &isnum);
        if (!isnum || !(v >= min && v <= max)) {
            (void)decl_fail(d, "%s must be a number from %g to %g", key, min, max);
            v = dflt;
        }
    }
    lua_pop(L, 1);
    return (v);
}

static bool
field_bool(struct decl *d, int idx, const char *key)
{
    lua_State *L = d->L;
    int t = lua_getfield(L, idx, key);
    bool v = lua_toboolean(L, -1);

    if (t != LUA_TNIL && t != LUA_TBOOLEAN)
        (void)decl_fail(d, "%s must be true or false", key);
    lua_pop(L, 1);
    return (v);
}

/*
 * A field that is a string or a list of strings, into out[] (at most max).
 * The strings are anchored in the declaration's table.  The count.
 */
static unsigned
field_list(struct decl *d, int idx, const char *key, const char **out, unsigned max)
{
    lua_State *L = d->L;
    unsigned n = 0;

    switch (lua_getfield(L, idx, key)) {
    case LUA_TNIL:
        break;
    case LUA_TSTRING:
        out[n++] = lua_tostring(L, -1);
        break;
    case LUA_TTABLE:
        for (lua_Integer i = 1;; i++) {
            int t = lua_rawgeti(L, -1, i);
            if (t == LUA_TNIL) {
                lua_pop(L, 1);
                break;
            }
            if (t != LUA_TSTRING || n == max) {
                lua_pop(L, 1);
                (void)decl_fail(d, "%s: a list of at most %u strings", key, max);
                break;
            }
            out[n++] = lua_tostring(L, -1);
            lua_pop(L, 1);
        }
        break;
    default:
        (void)decl_fail(d, "%s must be a string or a list of strings", key);
    }
    lua_pop(L, 1);
    return (n);
}

static struct sfb *
build_static(struct decl *d, int idx, const char *root, struct sb *e)
{
    const char *index[64], *deny[256], *mime[256], *expires[256];
    struct sfb_conf sc;

    memset(&sc, 0, sizeof sc);
    sc.root = root;
    sc.nindex = field_list(d, idx, "index", index, 64);
    sc.index = sc.nindex > 0 ? index : NULL;
    sc.listing = field_bool(d, idx, "listing");
    sc.follow_symlinks = field_bool(d, idx, "follow_symlinks");
    lua_getfield(d->L, idx, "deny");
    if (!lua_isnil(d->L, -1)) {
        sc.ndeny = field_list(d, idx, "deny", deny, 256);
        sc.deny = deny; /* an empty list: deny nothing */
    }
    lua_pop(d->L, 1);
    sc.mime_file = field_str(d, idx, "mime_file");
    sc.nmime = field_list(d, idx, "mime", mime, 256);
    sc.mime = mime;
    sc.nexpires = field_list(d, idx, "expires", expires, 256);
    sc.expires = expires;
    if (d->failed)
        return (NULL);
    return (sfb_new(&sc, e));
}

static int
build_backend(struct decl *d, int idx, struct pol_cfg *cfg)
{
    static const char *const fields[] = {
        "host", "port", "connect_timeout", "first_byte_timeout", "between_bytes_timeout",
        "max_connections", "weight", "probe", "root", "index", "listing", "follow_symlinks",
        "deny", "mime_file", "mime", "expires", "tls", "ca_file", "sni", "verify", "verify_host",
        "cert", "key", "path", "proxy_protocol",
    };
    static const char *const probe_fields[] = {
        "url", "request", "interval", "timeout", "window", "threshold", "initial",
        "expected_status",
    };
    struct be_probe_conf pc;
    struct be_conf c;
    const char *root;
    struct be *be;
    char ebuf[400];
    struct sb e;

    memset(&c, 0, sizeof c);
    check_fields(d, idx, fields, ARRAY_LEN(fields), "");
    c.name = d->name;
    c.host = field_str(d, idx, "host");
    c.port = field_str(d, idx, "port");
    c.path = field_str(d, idx, "path");
    {
        double pv = field_num(d, idx, "proxy_protocol", 0, 0, 2);
        if (pv != 0 && pv != 1 && pv != 2)
            (void)decl_fail(d, "proxy_protocol must be 1 or 2");
        c.proxy_protocol = (unsigned)pv;
    }
    c.connect_timeout = field_num(d, idx, "connect_timeout", -1, 0.001, 3600);
    c.first_byte_timeout = field_num(d, idx, "first_byte_timeout", -1, 0.001, 86400);
    c.between_bytes_timeout = field_num(d, idx, "between_bytes_timeout", -1, 0.001, 86400);
    c.max_connections = (unsigned)field_num(d, idx, "max_connections", 0, 1, 1e6);
    c.weight = (unsigned)field_num(d, idx, "weight", 1, 1, 1e6);
    c.tls = field_bool(d, idx, "tls");
    c.ca_file = field_str(d, idx, "ca_file");
    c.sni = field_str(d, idx, "sni");
    c.verify_host = field_str(d, idx, "verify_host");
    c.cert = field_str(d, idx, "cert");
    c.key = field_str(d, idx, "key");
    /* verify defaults to true: only an explicit false turns it off. */
    c.tls_noverify = lua_getfield(d->L, idx, "verify") != LUA_TNIL && !field_bool(d, idx, "verify");
    lua_pop(d->L, 1);
    root = field_str(d, idx, "root");
    if (root != NULL && (c.host != NULL || c.path != NULL))
        return (decl_fail(d, "either host or path (an HTTP server) or root (static files)"));
    if (c.path != NULL && (c.host != NULL || c.port != NULL))
        return (decl_fail(d, "either path (a Unix socket) or host and port"));
    if (c.path != NULL && c.tls)
        return (decl_fail(d, "tls is not spoken over a Unix socket (path)"));
    if (root == NULL && c.host == NULL && c.path == NULL)
        return (decl_fail(d, "host or path (an HTTP server) or root (static files) is missing"));
    if (lua_getfield(d->L, idx, "probe") == LUA_TTABLE) {
        int pidx = lua_gettop(d->L);
        memset(&pc, 0, sizeof pc);
        check_fields(d, pidx, probe_fields, ARRAY_LEN(probe_fields), " in probe");
        pc.url = field_str(d, pidx, "url");
        pc.request = field_str(d, pidx, "request");
        pc.interval = field_num(d, pidx, "interval", 0, 0.01, 86400);
        pc.timeout = field_num(d, pidx, "timeout", 0, 0.001, 3600);
        pc.window = (unsigned)field_num(d, pidx, "window", 0, 1, 64);
        pc.threshold = (unsigned)field_num(d, pidx, "threshold", 0, 1, 64);
        pc.initial = (int)field_num(d, pidx, "initial", -1, 0, 64);
        pc.expected_status = (unsigned)field_num(d, pidx, "expected_status", 0, 100, 999);
        c.probe = &pc;
    } else if (!lua_isnil(d->L, -1)) {
        (void)decl_fail(d, "probe must be a table");
    }
    if (root != NULL && c.probe != NULL)
        (void)decl_fail(d, "a static backend (root) has no probe");
    if (!d->failed && root != NULL) {
        sb_init(&e, ebuf, sizeof ebuf);
        if ((c.ops_priv = build_static(d, idx, root, &e)) == NULL && !d->failed) {
            (void)decl_fail_from(d, ebuf);
        } else if (c.ops_priv != NULL) {
            c.ops = &sfb_be_ops;
            sfb_keep(c.ops_priv);
        }
    }
    if (d->failed) {
        lua_pop(d->L, 1);
        return (-1);
    }
    sb_init(&e, ebuf, sizeof ebuf);
    if (be_get(&c, &be, &e) != 0) {
        lua_pop(d->L, 1);
        return (decl_fail_from(d, ebuf));
    }
    lua_pop(d->L, 1); /* probe, kept on the stack while pc pointed into it */
    cfg->be[cfg->nbe++] = be;
    cfg->dir[cfg->ndir++] = dir_backend(be);
    cfg->nstatic += be_local(be);
    return (0);
}

static struct dir *
find_dir(const struct pol_cfg *cfg, const char *name)
{
    for (unsigned i = 0; i < cfg->ndir; i++)
        if (strcmp(dir_name(cfg->dir[i]), name) == 0)
            return (cfg->dir[i]);
    return (NULL);
}

/* A shard director's fields (dir.h); the weights, when given, into w[]. */
static void
shard_fields(struct decl *d, int idx, struct dir_conf *c, unsigned *w)
{
    const char *rampup = field_str(d, idx, "rampup");
    lua_Integer i = 0;
    int isnum;

    c->replicas = (unsigned)field_num(d, idx, "replicas", 0, 1, SHARD_REPLICAS_MAX);
    c->balance_factor = field_num(d, idx, "balance_factor", 0, 0, 100);
    if (c->balance_factor > 0 && c->balance_factor < 1)
        (void)decl_fail(d, "balance_factor must be 0 (no bound) or at least 1");
    if (rampup != NULL && num_duration(rampup, &c->rampup) != 0)
        (void)decl_fail(d, "rampup must be a duration (\"30s\")");
    if (lua_getfield(d->L, idx, "weights") == LUA_TTABLE) {
        for (i = 1; lua_rawgeti(d->L, -1, i) != LUA_TNIL && i <= DIR_MEMBERS_MAX; i++) {
            double v = lua_tonumberx(d->L, -1, &isnum);
            if (!isnum || !(v >= 1 && v <= 1e6)) {
                (void)decl_fail(d, "weights: numbers from 1 to 1e6, one per backend");
                v = 1;
            }
            w[i - 1] = (unsigned)v;
            lua_pop(d->L, 1);
        }
        lua_pop(d->L, 1);
        if ((unsigned)(i - 1) != c->nmembers)
            (void)decl_fail(d, "weights: one per backend, in the same order");
        c->weights = w;
    } else if (!lua_isnil(d->L, -1)) {
        (void)decl_fail(d, "weights must be a list of numbers");
    }
    lua_pop(d->L, 1);
}

static int
build_director(struct decl *d, int idx, struct pol_cfg *cfg)
{
    static const char *const fields[] = { "type",    "backends", "key",           "weights",
                                          "replicas", "rampup",  "balance_factor" };
    static const struct {
        const char *name;
        enum dir_type type;
    } types[] = {
        { "round_robin", DIR_ROUND_ROBIN },
        { "random", DIR_RANDOM },
        { "hash", DIR_HASH },
        { "fallback", DIR_FALLBACK },
        { "shard", DIR_SHARD },
    };
    const char *names[DIR_MEMBERS_MAX], *type;
    unsigned weights[DIR_MEMBERS_MAX];
    struct dir *members[DIR_MEMBERS_MAX], *dr;
    struct dir_conf c;
    char ebuf[400];
    struct sb e;
    size_t t;

    memset(&c, 0, sizeof c);
    check_fields(d, idx, fields, ARRAY_LEN(fields), "");
    c.name = d->name;
    type = field_str(d, idx, "type");
    for (t = 0; type != NULL && t < ARRAY_LEN(types); t++)
        if (strcmp(type, types[t].name) == 0)
            break;
    if (type == NULL || t == ARRAY_LEN(types))
        return (decl_fail(d, "type must be \"round_robin\", \"random\", \"hash\", "
                             "\"fallback\" or \"shard\""));
    c.type = types[t].type;
    c.nmembers = field_list(d, idx, "backends", names, DIR_MEMBERS_MAX);
    c.key = field_str(d, idx, "key");
    shard_fields(d, idx, &c, weights);
    if (c.nmembers == 0 && !d->failed)
        return (decl_fail(d, "backends: the list of its members is missing"));
    for (unsigned i = 0; i < c.nmembers && !d->failed; i++) {
        members[i] = find_dir(cfg, names[i]);
        if (members[i] == NULL)
            return (decl_fail(d, "no backend or director \"%s\" declared before it", names[i]));
    }
    if (d->failed)
        return (-1);
    c.members = members;
    sb_init(&e, ebuf, sizeof ebuf);
    if ((dr = dir_new(&c, &e)) == NULL)
        return (decl_fail_from(d, ebuf));
    cfg->dir[cfg->ndir++] = dr;
    return (0);
}

static int
build_route(struct decl *d, int idx, struct pol_cfg *cfg)
{
    static const char *const fields[] = { "host", "prefix", "path", "ext", "to" };
    const char *hosts[64], *exts[256], *to;
    struct rt_conf c;
    char ebuf[400];
    struct sb e;

    memset(&c, 0, sizeof c);
    check_fields(d, idx, fields, ARRAY_LEN(fields), "");
    c.nhosts = field_list(d, idx, "host", hosts, 64);
    c.hosts = hosts;
    c.prefix = field_str(d, idx, "prefix");
    c.path = field_str(d, idx, "path");
    c.nexts = field_list(d, idx, "ext", exts, 256);
    c.exts = exts;
    to = field_str(d, idx, "to");
    if (d->failed)
        return (-1);
    if (to == NULL)
        return (decl_fail(d, "to: the backend or director it routes to is missing"));
    if ((c.to = find_dir(cfg, to)) == NULL)
        return (decl_fail(d, "to: no backend or director \"%s\" declared before it", to));
    sb_init(&e, ebuf, sizeof ebuf);
    if (rt_add(cfg->rt, &c, &e) != 0)
        return (decl_fail_from(d, ebuf));
    return (0);
}

/* shared "name" { size = "10m" }: a dictionary of its own namespace (pol_shared.c). */
static int
build_shared(struct decl *d, int idx, struct pol_cfg *cfg)
{
    static const char *const fields[] = { "size" };
    const char *size;
    struct pol_shd *shd;
    uint64_t bytes;
    char ebuf[400];
    struct sb e;

    check_fields(d, idx, fields, ARRAY_LEN(fields), "");
    size = field_str(d, idx, "size");
    if (d->failed)
        return (-1);
    if (size == NULL)
        return (decl_fail(d, "size is missing (size = \"10m\")"));
    if (num_bytes(size, &bytes) != 0)
        return (decl_fail(d, "size \"%s\" is not a size (\"64k\", \"10m\", \"1g\")", size));
    if (pol__decl_shared(cfg, d->name) != NULL)
        return (decl_fail(d, "declared twice"));
    sb_init(&e, ebuf, sizeof ebuf);
    if ((shd = pol__shd_get(d->name, bytes, &e)) == NULL)
        return (decl_fail_from(d, ebuf));
    cfg->shd[cfg->nshd++] = shd;
    return (0);
}

/* "host:port" or "[v6]:port" into host and port (their room: hcap, 8). */
static int
split_addr(const char *addr, char *host, size_t hcap, char *port)
{
    const char *colon, *h = addr;
    size_t hl;

    if (*h == '[') {
        colon = strchr(h, ']');
        if (colon == NULL || colon[1] != ':')
            return (-1);
        h++;
        hl = (size_t)(colon - h);
        colon++;
    } else {
        colon = strrchr(h, ':');
        if (colon == NULL)
            return (-1);
        hl = (size_t)(colon - h);
    }
    if (hl == 0 || hl >= hcap || strlen(colon + 1) == 0 || strlen(colon + 1) > 5 ||
        strspn(colon + 1, "0123456789") != strlen(colon + 1))
        return (-1);
    memcpy(host, h, hl);
    host[hl] = '\0';
    strcpy(port, colon + 1);
    return (0);
}

/* The secret of a cluster: `secret`, or the first line of `secret_file`.  Its length, or -1. */
static int
cluster_secret(struct decl *d, int idx, unsigned char *out)
{
    const char *s = field_str(d, idx, "secret"), *path = field_str(d, idx, "secret_file");
    size_t n = 0;
    FILE *f;

    if (s != NULL && path != NULL)
        return (decl_fail(d, "either secret or secret_file"));
    if (s != NULL) {
        n = strlen(s);
    } else if (path != NULL) {
        char buf[CLU_SECRET_MAX + 2];
        if (path[0] != '/')
            return (decl_fail(d, "secret_file must be an absolute path"));
        if ((f = fopen(path, "re")) == NULL)
            return (decl_fail(d, "secret_file %s: %s", path, strerror(errno)));
        n = fread(buf, 1, sizeof buf, f);
        (void)fclose(f);
        while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
            n--;
        if (n > CLU_SECRET_MAX)
            return (decl_fail(d, "secret_file %s: more than %d bytes", path, CLU_SECRET_MAX));
        memcpy(out, buf, n);
        OPENSSL_cleanse(buf, sizeof buf);
        if (n == 0)
            return (decl_fail(d, "secret_file %s is empty", path));
        return ((int)n);
    } else {
        return (0);
    }
    if (n == 0 || n > CLU_SECRET_MAX)
        return (decl_fail(d, "secret: 1 to %d bytes", CLU_SECRET_MAX));
    memcpy(out, s, n);
    return ((int)n);
}

/* A member's backend: its address, the cluster's probe of CLU_PATH, its timeouts. */
static struct be *
cluster_member(struct decl *d, int idx, const char *name, const char *addr,
               const struct be_probe_conf *pc, struct pol_cfg *cfg)
{
    char host[256], port[8], ebuf[400];
    struct be_conf bc;
    struct be *be;
    struct sb e;

    if (split_addr(addr, host, sizeof host, port) != 0) {
        (void)decl_fail(d, "peers: %s = \"%s\": an address is \"host:port\" or \"[v6]:port\"", name,
                        addr);
        return (NULL);
    }
    if (find_dir(cfg, name) != NULL) {
        (void)decl_fail(d, "peers: %s is declared already (a backend or director of that name)",
                        name);
        return (NULL);
    }
    memset(&bc, 0, sizeof bc);
    bc.name = name;
    bc.host = host;
    bc.port = port;
    bc.probe = pc;
    bc.connect_timeout = field_num(d, idx, "connect_timeout", 1, 0.001, 3600);
    bc.first_byte_timeout = field_num(d, idx, "first_byte_timeout", -1, 0.001, 86400);
    bc.between_bytes_timeout = field_num(d, idx, "between_bytes_timeout", -1, 0.001, 86400);
    bc.max_connections = (unsigned)field_num(d, idx, "max_connections", 0, 1, 1e6);
    if (d->failed)
        return (NULL);
    sb_init(&e, ebuf, sizeof ebuf);
    if (be_get(&bc, &be, &e) != 0) {
        (void)decl_fail_from(d, ebuf);
        return (NULL);
    }
    cfg->be[cfg->nbe++] = be;
    cfg->dir[cfg->ndir++] = dir_backend(be);
    return (be);
}

static int
cmp_str(const void *a, const void *b)
{
    return (strcmp(*(const char *const *)a, *(const char *const *)b));
}

/*
 * cluster "name" { peers = { NAME = "host:port", ... }, ... } (clu.h):
 * a backend per member, probed on CLU_PATH, then the cluster over them.
 */
static int
build_cluster(struct decl *d, int idx, struct pol_cfg *cfg)
{
    static const char *const fields[] = {
        "peers",
        "self",
        "origin",
        "local_ttl",
        "local_hot",
        "rampup",
        "secret",
        "secret_file",
        "probe",
        "connect_timeout",
        "first_byte_timeout",
        "between_bytes_timeout",
        "max_connections",
    };
    static const char *const probe_fields[] = { "interval", "timeout", "window", "threshold" };
    const char *names[CLU_MEMBERS_MAX], *addrs[CLU_MEMBERS_MAX], *self, *origin, *dur;
    struct clu_member_conf mc[CLU_MEMBERS_MAX];
    unsigned char secret[CLU_SECRET_MAX];
    char ident[256], ebuf[400];
    struct be_probe_conf pc;
    struct clu_conf cc;
    unsigned n = 0;
    int slen;
    struct sb e;

    if (cfg->clu != NULL)
        return (decl_fail(d, "a program declares one cluster at most"));
    check_fields(d, idx, fields, ARRAY_LEN(fields), "");
    memset(&cc, 0, sizeof cc);
    memset(&pc, 0, sizeof pc);
    pc.url = CLU_PATH;
    pc.interval = 1;
    pc.timeout = 1;
    pc.window = 3;
    pc.threshold = 2;
    if (lua_getfield(d->L, idx, "probe") == LUA_TTABLE) {
        int pidx = lua_gettop(d->L);
        check_fields(d, pidx, probe_fields, ARRAY_LEN(probe_fields), " in probe");
        pc.interval = field_num(d, pidx, "interval", 1, 0.01, 3600);
        pc.timeout = field_num(d, pidx, "timeout", 1, 0.001, 3600);
        pc.window = (unsigned)field_num(d, pidx, "window", 3, 1, 64);
        pc.threshold = (unsigned)field_num(d, pidx, "threshold", 2, 1, 64);
    } else if (!lua_isnil(d->L, -1)) {
        (void)decl_fail(d, "probe must be a table");
    }
    lua_pop(d->L, 1);
    /*
     * A member is sick until its first good probe: turning healthy for the
     * first time, it takes its keys at once, where a member assumed healthy
     * and found down at start would ramp up when it came.
     */
    pc.initial = -1;
    if (lua_getfield(d->L, idx, "peers") != LUA_TTABLE) {
        lua_pop(d->L, 1);
        return (decl_fail(d, "peers: the members, { name = \"host:port\", ... }, are missing"));
    }
    lua_pushnil(d->L);
    while (lua_next(d->L, -2) != 0) {
        if (lua_type(d->L, -2) != LUA_TSTRING || lua_type(d->L, -1) != LUA_TSTRING) {
            lua_pop(d->L, 2);
            (void)decl_fail(d, "peers: { name = \"host:port\", ... }");
            break;
        }
        if (n == CLU_MEMBERS_MAX) {
            lua_pop(d->L, 2);
            (void)decl_fail(d, "peers: at most %d members", CLU_MEMBERS_MAX);
            break;
        }
        /* Anchored in the peers table, which the declaration's table anchors. */
        names[n] = lua_tostring(d->L, -2);
        addrs[n] = lua_tostring(d->L, -1);
        n++;
        lua_pop(d->L, 1);
    }
    lua_pop(d->L, 1);
    if (n == 0 && !d->failed)
        return (decl_fail(d, "peers: the members, { name = \"host:port\", ... }, are missing"));
    self = field_str(d, idx, "self");
    if (self == NULL) {
        pol__identity(ident, sizeof ident);
        self = ident;
    }
    origin = field_str(d, idx, "origin");
    if (origin != NULL && find_dir(cfg, origin) == NULL)
        (void)decl_fail(d, "origin: no backend or director \"%s\" declared before it", origin);
    cc.local_ttl = 5;
    /* Not 0: a copy that may not be stored would leave a hit-for-miss marker, and passes. */
    if ((dur = field_str(d, idx, "local_ttl")) != NULL &&
        (num_duration(dur, &cc.local_ttl) != 0 || cc.local_ttl < 0.1))
        (void)decl_fail(d, "local_ttl must be a duration of at least 100ms (\"5s\")");
    cc.local_hot = (unsigned)field_num(d, idx, "local_hot", CLU_HOT_DEFAULT, 1, 255);
    cc.rampup = 30;
    if ((dur = field_str(d, idx, "rampup")) != NULL && num_duration(dur, &cc.rampup) != 0)
        (void)decl_fail(d, "rampup must be a duration (\"30s\")");
    slen = cluster_secret(d, idx, secret);
    if (d->failed)
        return (-1);
    /* Sorted by name, so that messages list them alike on every member. */
    for (unsigned i = 0; i < n; i++) {
        for (unsigned j = i + 1; j < n; j++) {
            if (cmp_str(&names[i], &names[j]) > 0) {
                const char *t = names[i];
                names[i] = names[j];
                names[j] = t;
                t = addrs[i];
                addrs[i] = addrs[j];
                addrs[j] = t;
            }
        }
    }
    for (unsigned i = 0; i < n; i++) {
        mc[i].name = names[i];
        mc[i].addr = addrs[i];
        if ((mc[i].be = cluster_member(d, idx, names[i], addrs[i], &pc, cfg)) == NULL)
            return (-1);
    }
    cc.name = d->name;
    cc.self = self;
    cc.member = mc;
    cc.nmember = n;
    cc.origin = origin;
    cc.secret = slen > 0 ? secret : NULL;
    cc.secretlen = slen > 0 ? (size_t)slen : 0;
    sb_init(&e, ebuf, sizeof ebuf);
    cfg->clu = clu_new(&cc, &e);
    OPENSSL_cleanse(secret, sizeof secret);
    if (cfg->clu == NULL)
        return (decl_fail_from(d, ebuf));
    return (0);
}

struct clu *
pol__decl_cluster(const struct pol_cfg *cfg)
{
    return (cfg != NULL ? cfg->clu : NULL);
}

void
pol__decl_free(struct pol_cfg **cfgp)
{
    struct pol_cfg *cfg = *cfgp;

    *cfgp = NULL;
    if (cfg == NULL)
        return;
    OBJ_CHECK(cfg, POL_CFG_MAGIC);
    clu_unref(&cfg->clu);
    rt_free(&cfg->rt);
    /* Directors before the backends they name; leaves are directors too. */
    for (unsigned i = cfg->ndir; i > 0; i--)
        dir_free(&cfg->dir[i - 1]);
    for (unsigned i = 0; i < cfg->nbe; i++)
        be_release(&cfg->be[i]);
    for (unsigned i = 0; i < cfg->nshd; i++)
        pol__shd_release(&cfg->shd[i]);
    free(cfg->shd);
    free(cfg->be);
    free(cfg->dir);
    OBJ_FREE(&cfg);
}

struct pol_cfg *
pol__decl_build(lua_State *L, struct sb *err)
{
    struct pol_cfg *cfg;
    lua_Integer n;
    struct be *b;
    int top = lua_gettop(L), rv = 0;

    lua_getfield(L, LUA_REGISTRYINDEX, DECL_KEY);
    n = (lua_Integer)lua_rawlen(L, -1);
    OBJ_NEW(cfg, POL_CFG_MAGIC);
    AN(cfg);
    /* A cluster declaration brings a backend per member. */
    cfg->be = calloc((size_t)n + 1 + CLU_MEMBERS_MAX, sizeof *cfg->be);
    cfg->dir = calloc((size_t)n + 2 + CLU_MEMBERS_MAX, sizeof *cfg->dir);
    cfg->rt = rt_new();
    cfg->shd = calloc((size_t)n + 1, sizeof *cfg->shd);
    AN(cfg->shd);
    AN(cfg->be);
    AN(cfg->dir);
    AN(cfg->rt);
    for (lua_Integer i = 1; i <= n && rv == 0; i++) {
        struct decl d = { .L = L, .err = err };
        int idx;

        lua_rawgeti(L, top + 1, i);
        lua_getfield(L, -1, "kind");
        d.kind = lua_tostring(L, -1);
        lua_getfield(L, -2, "name");
        d.name = lua_tostring(L, -1);
        lua_getfield(L, -3, "where");
        d.where = lua_tostring(L, -1);
        lua_getfield(L, -4, "conf");
        idx = lua_gettop(L);
        if (strcmp(d.kind, "shared") == 0)
            rv = build_shared(&d, idx, cfg);
        else if (strcmp(d.kind, "cluster") == 0)
            rv = build_cluster(&d, idx, cfg);
        else if (d.name != NULL && find_dir(cfg, d.name) != NULL)
            rv = decl_fail(&d, "declared twice");
        else if (strcmp(d.kind, "backend") == 0)
            rv = build_backend(&d, idx, cfg);
        else if (strcmp(d.kind, "director") == 0)
            rv = build_director(&d, idx, cfg);
        else
            rv = build_route(&d, idx, cfg);
        lua_settop(L, top + 1);
    }
    lua_settop(L, top);
    if (rv != 0) {
        pol__decl_free(&cfg);
        return (NULL);
    }
    /* The default: a declaration named "default", else -b's backend, else the first. */
    cfg->dflt = find_dir(cfg, "default");
    if (cfg->dflt == NULL && (b = be_find("default")) != NULL) {
        cfg->dflt = dir_backend(b); /* -b's lives as long as the process */
        cfg->dir[cfg->ndir++] = cfg->dflt;
        cfg->nstatic += be_local(b);
    }
    if (cfg->dflt == NULL && cfg->ndir > 0)
        cfg->dflt = cfg->dir[0];
    return (cfg);
}

struct dir *
pol__decl_find(const struct pol_cfg *cfg, const char *name)
{
    return (cfg != NULL ? find_dir(cfg, name) : NULL);
}

struct dir *
pol__decl_route(const struct pol_cfg *cfg, const struct http *hp)
{
    struct dir *d;

    if (cfg == NULL)
        return (NULL);
    d = rt_match(cfg->rt, http_value(hp, "Host"), &hp->url);
    return (d != NULL ? d : cfg->dflt);
}

struct pol_shd *
pol__decl_shared(const struct pol_cfg *cfg, const char *name)
{
    for (unsigned i = 0; cfg != NULL && i < cfg->nshd; i++)
        if (strcmp(pol__shd_name(cfg->shd[i]), name) == 0)
            return (cfg->shd[i]);
    return (NULL);
}

bool
pol__decl_seen(lua_State *L, const char *kind, const char *name)
{
    bool seen = false;

    lua_getfield(L, LUA_REGISTRYINDEX, DECL_KEY);
    for (lua_Integer i = 1; !seen && lua_rawgeti(L, -1, i) == LUA_TTABLE; i++) {
        lua_getfield(L, -1, "kind");
        lua_getfield(L, -2, "name");
        seen = strcmp(lua_tostring(L, -2), kind) == 0 && lua_isstring(L, -1) &&
               strcmp(lua_tostring(L, -1), name) == 0;
        lua_pop(L, 3);
    }
    lua_pop(L, seen ? 1 : 2); /* the list, and the nil that ended it */
    return (seen);
}

bool
pol__decl_has_static(const struct pol_cfg *cfg)
{
    return (cfg != NULL && cfg->nstatic > 0);
}

bool
pol__decl_empty(const struct pol_cfg *cfg)
{
    return (cfg == NULL || cfg->ndir == 0);
}

void
pol__decl_info(const struct pol_cfg *cfg, struct pol_prog_info *pi)
{
    if (cfg == NULL) {
        pi->nbe = pi->ndir = 0;
        return;
    }
    OBJ_CHECK(cfg, POL_CFG_MAGIC);
    pi->be = cfg->be;
    pi->nbe = cfg->nbe;
    pi->dir = cfg->dir;
    pi->ndir = cfg->ndir;
}
