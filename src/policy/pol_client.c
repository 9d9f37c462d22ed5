/*
 * The globals `client` and `server`: facts of the client a hook runs for
 * and of the address it reached, read-only.
 *
 * A hook reads them from the connection of the request it runs for at
 * each access, so they are never stale: a client-side hook from its
 * request's, a backend hook from the one its transaction's request came
 * in on (pol_bctx.sp; the request outlives its fetch).  A transaction
 * that outlives its request (a background refresh) reads them from the
 * copy made when it was detached (struct pol_client in its pol_bctx), so
 * that a refresh sees the client whose request started it, as that
 * request's own fetch would.  Copy and live reads go through one reader
 * of the connection (fact_read()), so they cannot differ; only what is
 * read is read (server.ip costs a getsockname()).
 */
#include "config.h"

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <lauxlib.h>

#include "surogat/defs.h"
#include "surogat/http.h"
#include "surogat/par.h"
#include "surogat/pol.h"
#include "surogat/pp.h"
#include "surogat/req.h"
#include "surogat/sess.h"
#include "surogat/tls.h"

#include "pol_priv.h"

/* The facts of a connection, each read as text. */
enum fact {
    F_IP,
    F_PORT,
    F_TLS, /* "1" or "": client.tls and server.tls */
    F_TLS_VERSION,
    F_TLS_CIPHER,
    F_TLS_CERT_CN,
    F_SNI,
    F_PROXY,
    F_SERVER_IP,
    F_SERVER_PORT,
    F__N
};

/*
 * TLS facts of the client's connection: from our own handshake, or from
 * the PROXY v2 header of a terminator in front.  NULL when unknown.
 */
static const char *
conn_tls_fact(const struct sess *sp, enum fact f)
{
    const struct pp_sess *ps = sp->pp;

    static const enum tls_fact tf[F__N] = {
        [F_TLS_VERSION] = TLS_FACT_VERSION,
        [F_TLS_CIPHER] = TLS_FACT_CIPHER,
        [F_SNI] = TLS_FACT_SNI,
    };

    if (sp->ssl != NULL || sp->mux != NULL) {
        if (f != F_TLS_VERSION && f != F_TLS_CIPHER && f != F_SNI)
            return (NULL);
        return (sp->ssl != NULL ? tls_fact(sp->ssl, tf[f]) : tls_mux_fact(sp->mux, tf[f]));
    } else if (ps != NULL) {
        if (f == F_TLS_VERSION && ps->tls)
            return (ps->tls_version);
        if (f == F_TLS_CIPHER && ps->tls)
            return (ps->tls_cipher);
        if (f == F_TLS_CERT_CN && ps->tls)
            return (ps->tls_cn);
        if (f == F_SNI)
            return (ps->authority);
    }
    return (NULL);
}

/*
 * The connection's own address (F_SERVER_IP), or its port:
 * behind a PROXY header the destination it carries, else the socket's,
 * which with a wildcard listen address is the one the client reached.
 */
static void
local_addr(const struct sess *sp, enum fact f, char *buf, size_t len)
{
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char host[INET6_ADDRSTRLEN], port[8];

    if (sp->pp != NULL && sp->pp->server_ip[0] != '\0') {
        snprintf(buf, len, "%s", f == F_SERVER_IP ? sp->pp->server_ip : sp->pp->server_port);
        return;
    }
    if (getsockname(sp->fd, (struct sockaddr *)&ss, &sl) != 0 ||
        getnameinfo((struct sockaddr *)&ss, sl, host, sizeof host, port, sizeof port,
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
        return;
    snprintf(buf, len, "%s", f == F_SERVER_IP ? host : port);
}

/*
 * Fact f of connection sp (NULL: none, as a unit test's request) as text:
 * a string of the connection's, or one made in buf; "" when unknown.
 */
static const char *
fact_read(const struct sess *sp, enum fact f, char *buf, size_t len)
{
    const char *v = NULL;

    if (sp == NULL)
        return ("");
    switch (f) {
    case F_IP:
        v = sp->client_ip;
        break;
    case F_PORT:
        v = sp->client_port;
        break;
    case F_TLS:
        v = sess_is_tls(sp) ? "1" : "";
        break;
    case F_TLS_VERSION:
    case F_TLS_CIPHER:
    case F_TLS_CERT_CN:
    case F_SNI:
        v = conn_tls_fact(sp, f);
        break;
    case F_PROXY:
        if (sp->pp == NULL)
            return ("");
        snprintf(buf, len, "%u", sp->pp->version);
        return (buf);
    case F_SERVER_IP:
    case F_SERVER_PORT:
        buf[0] = '\0';
        local_addr(sp, f, buf, len);
        return (buf);
    case F__N:
        SRG_WRONG("fact");
    }
    return (v != NULL ? v : "");
}

/* Where pc keeps fact f, and its size. */
static char *
fact_slot(struct pol_client *pc, enum fact f, size_t *len)
{
#define SLOT(field) (*len = sizeof pc->field, pc->field)
    switch (f) {
    case F_IP:
        return (SLOT(ip));
    case F_PORT:
        return (SLOT(port));
    case F_TLS:
        return (SLOT(tls));
    case F_TLS_VERSION:
        return (SLOT(tls_version));
    case F_TLS_CIPHER:
        return (SLOT(tls_cipher));
    case F_TLS_CERT_CN:
        return (SLOT(tls_cert_cn));
    case F_SNI:
        return (SLOT(sni));
    case F_PROXY:
        return (SLOT(proxy));
    case F_SERVER_IP:
        return (SLOT(server_ip));
    case F_SERVER_PORT:
        return (SLOT(server_port));
    case F__N:
        break;
    }
#undef SLOT
    SRG_WRONG("fact");
}

void
pol__client_fill(struct pol_client *pc, const struct sess *sp)
{
    size_t len;

    for (enum fact f = 0; f < F__N; f++) {
        char *slot = fact_slot(pc, f, &len);
        const char *v = fact_read(sp, f, slot, len);
        if (v != slot)
            snprintf(slot, len, "%s", v);
    }
    pc->filled = true;
}

/*
 * Fact f for the hook running: a detached backend transaction's copy,
 * else the connection of the request it runs for (buf: see fact_read()).
 */
static const char *
fact_get(struct pol_wrk *pw, enum fact f, char *buf, size_t len)
{
    if (pw->bc != NULL && pw->bc->client.filled)
        return (fact_slot(&pw->bc->client, f, &len));
    return (fact_read(pw->bc != NULL ? pw->bc->sp : pw->req->sp, f, buf, len));
}

/* Push fact f as its type: a string, a number, a boolean (tls); nil when unknown. */
static void
push_fact(lua_State *L, struct pol_wrk *pw, enum fact f)
{
    char buf[256];
    const char *v = fact_get(pw, f, buf, sizeof buf);

    if (f == F_TLS)
        lua_pushboolean(L, *v != '\0');
    else if (*v == '\0')
        lua_pushnil(L);
    else if (f == F_PORT || f == F_PROXY || f == F_SERVER_PORT)
        lua_pushinteger(L, strtol(v, NULL, 10));
    else
        lua_pushstring(L, v);
}

/* The client's protocol: the request's, or the one the transaction's request came in. */
static unsigned
client_proto(const struct pol_wrk *pw)
{
    return (pw->bc != NULL ? pw->bc->creq->proto : pw->req->http->proto);
}

static const struct {
    const char *key;
    enum fact f;
} client_keys[] = {
    { "ip", F_IP },
    { "port", F_PORT },
    { "tls", F_TLS },
    { "tls_version", F_TLS_VERSION },
    { "tls_cipher", F_TLS_CIPHER },
    { "tls_cert_cn", F_TLS_CERT_CN },
    { "tls_sni", F_SNI },
    { "sni", F_SNI },
    { "proxy", F_PROXY },
};

static int
l_client_index(lua_State *L)
{
    struct pol_wrk *pw = pol__wrk(L);
    const char *k = luaL_checkstring(L, 2);

    if (!pol__in_hook(pw))
        return (luaL_error(L, "client used outside a hook"));
    if (strcmp(k, "proto") == 0) {
        lua_pushstring(L, http_proto_name(client_proto(pw)));
        return (1);
    }
    for (size_t i = 0; i < ARRAY_LEN(client_keys); i++) {
        if (strcmp(k, client_keys[i].key) == 0) {
            push_fact(L, pw, client_keys[i].f);
            return (1);
        }
    }
    lua_pushnil(L);
    return (1);
}

static int
l_client_tostring(lua_State *L)
{
    struct pol_wrk *pw = pol__wrk(L);
    char ibuf[INET6_ADDRSTRLEN], pbuf[8];
    const char *ip, *port;

    if (pol__in_hook(pw)) {
        ip = fact_get(pw, F_IP, ibuf, sizeof ibuf);
        port = fact_get(pw, F_PORT, pbuf, sizeof pbuf);
        if (*ip != '\0') {
            lua_pushfstring(L, "%s:%s", ip, port);
            return (1);
        }
    }
    lua_pushliteral(L, "client");
    return (1);
}

/*
 * ---- server: this host, and the address the client connected to ----
 * (VCL's local.ip is server.ip here: `local` is a Lua keyword.)
 */

static int
l_server_index(lua_State *L)
{
    struct pol_wrk *pw = pol__wrk(L);
    const char *k = luaL_checkstring(L, 2);
    char name[256];

    if (strcmp(k, "ip") == 0 || strcmp(k, "port") == 0 || strcmp(k, "tls") == 0) {
        if (!pol__in_hook(pw)) {
            if (*k == 't')
                lua_pushboolean(L, false);
            else
                return (luaL_error(L, "server.%s used outside a hook", k));
            return (1);
        }
        push_fact(L, pw, *k == 'i' ? F_SERVER_IP : *k == 'p' ? F_SERVER_PORT : F_TLS);
    } else if (strcmp(k, "hostname") == 0) {
        if (gethostname(name, sizeof name) != 0)
            name[0] = '\0';
        name[sizeof name - 1] = '\0';
        lua_pushstring(L, name);
    } else if (strcmp(k, "identity") == 0) {
        pol__identity(name, sizeof name);
        lua_pushstring(L, name);
    } else {
        lua_pushnil(L);
    }
    return (1);
}

void
pol__identity(char *buf, size_t len)
{
    const char *id = __atomic_load_n(&par.identity, __ATOMIC_ACQUIRE);

    if (id != NULL && *id != '\0') {
        snprintf(buf, len, "%s", id);
        return;
    }
    if (gethostname(buf, len) != 0)
        buf[0] = '\0';
    buf[len - 1] = '\0';
}

static int
l_fact_newindex(lua_State *L)
{
    return (luaL_error(L, "%s is read-only", luaL_checkstring(L, lua_upvalueindex(1))));
}

/* A read-only global userdata `name` whose fields come from index. */
static void
fact_open(lua_State *L, const char *name, lua_CFunction index, lua_CFunction tostring)
{
    (void)lua_newuserdatauv(L, 0, 0);
    lua_newtable(L);
    lua_pushcfunction(L, index);
    lua_setfield(L, -2, "__index");
    lua_pushstring(L, name);
    lua_pushcclosure(L, l_fact_newindex, 1);
    lua_setfield(L, -2, "__newindex");
    if (tostring != NULL) {
        lua_pushcfunction(L, tostring);
        lua_setfield(L, -2, "__tostring");
    }
    lua_pushliteral(L, "locked");
    lua_setfield(L, -2, "__metatable");
    lua_setmetatable(L, -2);
    lua_setglobal(L, name);
}

void
pol__client_open(lua_State *L)
{
    fact_open(L, "client", l_client_index, l_client_tostring);
    fact_open(L, "server", l_server_index, NULL);
}
