/*
 * The message objects hooks get: req, bereq, beresp, resp, obj.  Each is a
 * userdata over a struct http owned by the request (its workspace), so
 * it is valid only during the hook call that got it: pol__obj_kill()
 * clears it afterwards and a copy kept in req.ctx raises an error.
 *
 * Strings a script stores (header fields, url, method, reason) are copied
 * into the request's workspace; header names and values are checked for
 * characters that would split the head (CR, LF, NUL; names are tokens).
 * Header names compare case-insensitively; as a field (req.http.x_foo)
 * an underscore stands for a dash, while :get("x_foo") takes the name as
 * written.
 *
 * The framing of a message is surogat's, computed after the hooks: the
 * fields that carry it (Content-Length, Transfer-Encoding, Connection,
 * Keep-Alive, Upgrade; TE and Trailer on a backend request) may be read
 * but not set, appended or removed, and a status may not move between
 * one that has a body and one that has none (204, 304) where the body is
 * already framed (deliver, backend_response).  Otherwise a script could
 * send a client, or a backend, a head whose framing disagrees with the
 * bytes that follow: the next message would be read from the middle of
 * this one.
 *
 * obj (in hit) is a read-only view of the cached object's stored head
 * and timing.  (`client` and `server` are pol_client.c's.)
 */
#include "config.h"

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <lauxlib.h>
#include <openssl/ssl.h>

#include "surogat/defs.h"
#include "surogat/dir.h"
#include "surogat/http.h"
#include "surogat/par.h"
#include "surogat/pp.h"
#include "surogat/req.h"
#include "surogat/sess.h"
#include "surogat/wrk.h"
#include "surogat/ws.h"

#include "pol_priv.h"

#define MSG_MT    "surogat.msg"
#define HDRS_MT   "surogat.http"

struct msg {
    unsigned magic;
#define POL_MSG_MAGIC 0x1f7a5c93
    enum pol_obj_kind kind;
    struct http *hp; /* NULL once the hook call ended */
    struct pol_ex ex;
    int ro;
};

static const char *const kind_name[] = { "req", "bereq", "beresp", "resp", "obj" };

/* obj's head before the script reads it: check_msg() loads it then. */
static struct http obj_unloaded;
/* The registry key of a state's obj of deliver: its address, no string to hash. */
static const char deliver_obj_key;

void
pol__obj_push(lua_State *L, enum pol_obj_kind kind, struct http *hp, const struct pol_ex *ex,
              int ro)
{
    struct msg *m;

    if (kind == POL_O_OBJ && hp == NULL && ex != NULL && ex->obj->resp == NULL &&
        ex->obj->load == NULL) {
        /*
         * deliver's obj, a hit count and nothing else: one per state,
         * armed again for each call, so that a hit costs no garbage for
         * it.  Killed after each call as any other.
         */
        if (lua_rawgetp(L, LUA_REGISTRYINDEX, &deliver_obj_key) == LUA_TNIL) {
            lua_pop(L, 1);
            (void)lua_newuserdatauv(L, sizeof *m, 1);
            luaL_setmetatable(L, MSG_MT);
            lua_pushvalue(L, -1);
            lua_rawsetp(L, LUA_REGISTRYINDEX, &deliver_obj_key);
        }
        m = lua_touserdata(L, -1);
    } else {
        m = lua_newuserdatauv(L, sizeof *m, 1);
        luaL_setmetatable(L, MSG_MT);
    }
    m->magic = POL_MSG_MAGIC;
    m->kind = kind;
    m->hp = hp;
    memset(&m->ex, 0, sizeof m->ex);
    if (ex != NULL)
        m->ex = *ex;
    if (kind == POL_O_OBJ && hp == NULL)
        m->hp = &obj_unloaded;
    m->ro = ro;
}

void
pol__obj_kill(lua_State *L, int idx)
{
    struct msg *m = luaL_checkudata(L, idx, MSG_MT);

    m->hp = NULL;
    memset(&m->ex, 0, sizeof m->ex);
}

static struct msg *
check_msg(lua_State *L, int idx)
{
    struct msg *m = luaL_checkudata(L, idx, MSG_MT);

    if (m->hp == NULL)
        (void)luaL_error(L, "%s used after its hook returned", kind_name[m->kind]);
    if (m->hp == &obj_unloaded && m->ex.obj->load == NULL)
        (void)luaL_error(L, "obj has only hits in deliver");
    if (m->hp == &obj_unloaded && (m->hp = m->ex.obj->load(m->ex.obj)) == NULL) {
        m->hp = &obj_unloaded;
        (void)luaL_error(L, "workspace_client exhausted");
    }
    return (m);
}

struct http *
pol__obj_check(lua_State *L, int idx, enum pol_obj_kind kind, const struct pol_ex **exp)
{
    struct msg *m = check_msg(L, idx);

    if (m->kind != kind)
        (void)luaL_argerror(L, idx, lua_pushfstring(L, "%s expected", kind_name[kind]));
    if (exp != NULL)
        *exp = &m->ex;
    return (m->hp);
}

static void
check_writable(lua_State *L, const struct msg *m, const char *what)
{
    if (m->ro)
        (void)luaL_error(L, "%s.%s is read-only here", kind_name[m->kind], what);
}

/* A copy in the workspace of whom the hook runs for. */
static struct txt
ws_txt(lua_State *L, const char *s, size_t len)
{
    struct pol_wrk *pw = pol__wrk(L);
    char *p;

    p = ws_strndup(pol__ws(pw), s, len);
    if (p == NULL)
        (void)luaL_error(L, "workspace_client exhausted");
    return ((struct txt){ p, len });
}

static bool
is_tchar(unsigned char c)
{
    return (c > 0x20 && c < 0x7f && strchr("\"(),/:;<=>?@[\\]{}", c) == NULL);
}

static const char *
check_name(lua_State *L, int idx, size_t *len, bool field)
{
    static _Thread_local char buf[256];
    const char *s = luaL_checklstring(L, idx, len);

    if (*len == 0 || *len >= sizeof buf)
        (void)luaL_error(L, "bad header name");
    for (size_t i = 0; i < *len; i++) {
        buf[i] = field && s[i] == '_' ? '-' : s[i];
        if (!is_tchar((unsigned char)buf[i]))
            (void)luaL_error(L, "bad header name \"%s\"", s);
    }
    buf[*len] = '\0';
    return (buf);
}

static const char *
check_value(lua_State *L, int idx, size_t *len)
{
    const char *s = luaL_checklstring(L, idx, len);

    for (size_t i = 0; i < *len; i++)
        if (s[i] == '\r' || s[i] == '\n' || s[i] == '\0')
            (void)luaL_error(L, "header value with CR, LF or NUL");
    return (s);
}

/* ---- headers: req.http ---- */

/* Whether name (len bytes, any case) frames messages of this kind: read-only for scripts. */
static bool
framing_field(enum pol_obj_kind kind, const char *name, size_t len)
{
    static const struct {
        const char *name;
        size_t len;
        bool bereq; /* on a backend request only */
    } f[] = {
        { "Content-Length", 14, false }, { "Transfer-Encoding", 17, false },
        { "Connection", 10, false },     { "Keep-Alive", 10, false },
        { "Upgrade", 7, false },         { "TE", 2, true },
        { "Trailer", 7, true },
    };

    /* The length first: a deliver hook setting a field runs this on every hit. */
    for (size_t i = 0; i < ARRAY_LEN(f); i++)
        if (len == f[i].len && (!f[i].bereq || kind == POL_O_BEREQ) &&
            strcasecmp(name, f[i].name) == 0)
            return (true);
    return (false);
}

/* A change of field `name` (NUL-terminated): a writable message, a field that is not framing. */
static void
check_field_writable(lua_State *L, const struct msg *m, const char *name, size_t len)
{
    check_writable(L, m, "http");
    if (framing_field(m->kind, name, len))
        (void)luaL_error(L, "%s.http: %s is read-only: surogat frames the message",
                         kind_name[m->kind], name);
}

static struct msg *
hdrs_msg(lua_State *L, int idx)
{
    struct msg *m;

    luaL_checkudata(L, idx, HDRS_MT);
    lua_getiuservalue(L, idx, 1);
    m = check_msg(L, -1);
    lua_pop(L, 1);
    return (m);
}

static int
hdr_get(lua_State *L, struct msg *m, const char *name)
{
    const struct txt *v = http_value(m->hp, name);

    if (v == NULL)
        lua_pushnil(L);
    else
        lua_pushlstring(L, v->b != NULL ? v->b : "", v->len);
    return (1);
}

static void
hdr_add(lua_State *L, struct msg *m, const char *name, size_t nlen, int vidx)
{
    size_t vlen;
    const char *v = check_value(L, vidx, &vlen);
    struct txt n = ws_txt(L, name, nlen), tv = ws_txt(L, v, vlen);

    if (http_add(m->hp, n, tv) != 0)
        (void)luaL_error(L, "%s: too many header fields", kind_name[m->kind]);
}

static void
hdr_set(lua_State *L, struct msg *m, const char *name, size_t nlen, int vidx)
{
    check_field_writable(L, m, name, nlen);
    if (!lua_isnil(L, vidx))
        (void)check_value(L, vidx, &(size_t){ 0 });
    (void)http_unset(m->hp, name);
    if (!lua_isnil(L, vidx))
        hdr_add(L, m, name, nlen, vidx);
}

static int
l_hdrs_index(lua_State *L)
{
    struct msg *m = hdrs_msg(L, 1);
    size_t len;

    /* Methods first: req.http:get(...) */
    if (lua_type(L, 2) == LUA_TSTRING) {
        luaL_getmetafield(L, 1, "methods");
        if (lua_getfield(L, -1, lua_tostring(L, 2)) != LUA_TNIL)
            return (1);
        lua_pop(L, 2);
    }
    return (hdr_get(L, m, check_name(L, 2, &len, true)));
}

static int
l_hdrs_newindex(lua_State *L)
{
    struct msg *m = hdrs_msg(L, 1);
    size_t len;
    const char *name = check_name(L, 2, &len, true);

    hdr_set(L, m, name, len, 3);
    return (0);
}

static int
l_hdrs_get(lua_State *L)
{
    size_t len;
    struct msg *m = hdrs_msg(L, 1);

    return (hdr_get(L, m, check_name(L, 2, &len, false)));
}

static int
l_hdrs_set(lua_State *L)
{
    size_t len;
    struct msg *m = hdrs_msg(L, 1);
    const char *name = check_name(L, 2, &len, false);

    lua_settop(L, 3);
    hdr_set(L, m, name, len, 3);
    return (0);
}

static int
l_hdrs_append(lua_State *L)
{
    size_t len;
    struct msg *m = hdrs_msg(L, 1);
    const char *name = check_name(L, 2, &len, false);

    check_field_writable(L, m, name, len);
    hdr_add(L, m, name, len, 3);
    return (0);
}

static int
l_hdrs_unset(lua_State *L)
{
    size_t len;
    struct msg *m = hdrs_msg(L, 1);
    const char *name = check_name(L, 2, &len, false);

    check_field_writable(L, m, name, len);
    lua_pushinteger(L, http_unset(m->hp, name));
    return (1);
}

/* The iterator of :each(): (headers, index) -> index + 1, name, value. */
static int
l_hdrs_next(lua_State *L)
{
    struct msg *m = hdrs_msg(L, 1);
    lua_Integer i = luaL_checkinteger(L, 2);
    const struct http_hdr *h;

    if (i < 0 || (lua_Unsigned)i >= m->hp->nhdr)
        return (0);
    h = &m->hp->hdr[i];
    lua_pushinteger(L, i + 1);
    lua_pushlstring(L, h->name.b, h->name.len);
    lua_pushlstring(L, h->val.b != NULL ? h->val.b : "", h->val.len);
    return (3);
}

/* The generic for's iterator over (name, value): drops the index l_hdrs_next() carries. */
static int
l_hdrs_iter(lua_State *L)
{
    lua_Integer i = lua_tointeger(L, lua_upvalueindex(2));

    lua_settop(L, 0);
    lua_pushvalue(L, lua_upvalueindex(1));
    lua_pushinteger(L, i);
    if (l_hdrs_next(L) == 0)
        return (0);
    lua_copy(L, 3, lua_upvalueindex(2));
    return (2);
}

/*
 * for name, value in req.http:each() do ... end -- every field in order;
 * req.http:each(function(name, value) ... end) does the same with a callback.
 */
static int
l_hdrs_each(lua_State *L)
{
    struct msg *m = hdrs_msg(L, 1);

    if (lua_isnoneornil(L, 2)) {
        lua_settop(L, 1);
        lua_pushinteger(L, 0);
        lua_pushcclosure(L, l_hdrs_iter, 2);
        return (1);
    }
    luaL_checktype(L, 2, LUA_TFUNCTION);
    for (unsigned i = 0; m->hp != NULL && i < m->hp->nhdr; i++) {
        const struct http_hdr *h = &m->hp->hdr[i];
        lua_pushvalue(L, 2);
        lua_pushlstring(L, h->name.b, h->name.len);
        lua_pushlstring(L, h->val.b != NULL ? h->val.b : "", h->val.len);
        lua_call(L, 2, 0);
    }
    return (0);
}

/* ---- req, bereq, beresp, resp ---- */

static void
push_txt(lua_State *L, struct txt t)
{
    lua_pushlstring(L, t.b != NULL ? t.b : "", t.len);
}

/*
 * req.backend: the director's name; bereq.backend: the backend's, once
 * picked.  Of the request, or (a backend hook) of the transaction.
 */
static void
push_backend(lua_State *L, const struct msg *m)
{
    struct pol_wrk *pw = pol__wrk(L);
    const char *be_name = pw->bc != NULL ? pw->bc->be_name : pw->req->be_name;
    const struct dir *d = pw->bc != NULL ? pw->bc->dir : pw->req->dir;

    if (m->kind == POL_O_BEREQ && be_name != NULL) {
        lua_pushstring(L, be_name);
        return;
    }
    if (d == NULL)
        d = pol__decl_route(pol__prog_cfg(pw->prog),
                            pw->bc != NULL ? pw->bc->creq : pw->req->http);
    if (d != NULL)
        lua_pushstring(L, dir_name(d));
    else if (be_name != NULL)
        lua_pushstring(L, be_name);
    else
        lua_pushnil(L);
}

/* req.backend = name (bereq.backend in backend_fetch): a backend or director declared. */
static void
set_backend(lua_State *L, const struct msg *m)
{
    struct pol_wrk *pw = pol__wrk(L);
    const char *name = luaL_checkstring(L, 3);
    struct dir *d = pol__decl_find(pol__prog_cfg(pw->prog), name);

    if (d == NULL)
        (void)luaL_error(L, "%s.backend: no backend or director \"%s\" is declared",
                         kind_name[m->kind], name);
    if (pw->bc != NULL)
        pw->bc->dir = d;
    else
        pw->req->dir = d;
}

/*
 * The request's facts and switches (req.restarts, req.hash_always_miss,
 * bereq.retries ...): pushes the value, nil when k is none of them.
 */
static void
push_req_fact(lua_State *L, const struct msg *m, const char *k)
{
    const struct pol_wrk *pw = pol__wrk(L);
    const struct req *req = pw->req;
    const struct pol_bctx *bc = pw->bc; /* a backend hook's transaction; then req is NULL */

    if (!pol__in_hook(pw))
        lua_pushnil(L);
    else if (strcmp(k, "restarts") == 0)
        lua_pushinteger(L, bc != NULL ? bc->restarts : req->restarts);
    else if (strcmp(k, "xid") == 0) /* set before the first hook ran */
        lua_pushinteger(L, (lua_Integer)(bc != NULL ? bc->xid : req->pol_id));
    else if (m->kind == POL_O_BEREQ && strcmp(k, "retries") == 0)
        lua_pushinteger(L, bc != NULL ? bc->retries : req->retries);
    else if (m->kind == POL_O_BEREQ && strcmp(k, "uncacheable") == 0)
        lua_pushboolean(L, bc != NULL ? bc->uncacheable
                                      : req->bereq_uncacheable || pw->hook == POL_H_PIPE);
    else if (m->kind == POL_O_BEREQ && strcmp(k, "is_bgfetch") == 0)
        lua_pushboolean(L, bc != NULL && bc->bg);
    else if (strcmp(k, "backend") == 0)
        push_backend(L, m);
    else if (req == NULL)
        lua_pushnil(L);
    else if (m->kind == POL_O_REQ && strcmp(k, "hash_always_miss") == 0)
        lua_pushboolean(L, req->hash_always_miss);
    else if (m->kind == POL_O_REQ && strcmp(k, "hash_ignore_busy") == 0)
        lua_pushboolean(L, req->hash_ignore_busy);
    else if (m->kind == POL_O_REQ && strcmp(k, "esi_level") == 0)
        lua_pushinteger(L, req->esi_level);
    else if (m->kind == POL_O_REQ && strcmp(k, "is_esi_subreq") == 0)
        lua_pushboolean(L, req->esi_level > 0);
    else if (m->kind == POL_O_REQ && strcmp(k, "esi_allow_host") == 0)
        lua_pushboolean(L, !req->esi_foreign || req->esi_allow_host);
    else
        lua_pushnil(L);
}

/* beresp.do_gzip, do_gunzip, do_stream, do_esi: the field, or NULL for another name. */
static int *
do_flag(struct pol_beresp *br, const char *k)
{
    if (strcmp(k, "do_gzip") == 0)
        return (&br->do_gzip);
    if (strcmp(k, "do_gunzip") == 0)
        return (&br->do_gunzip);
    if (strcmp(k, "do_stream") == 0)
        return (&br->do_stream);
    if (strcmp(k, "do_esi") == 0)
        return (&br->do_esi);
    return (NULL);
}

static int
l_msg_index(lua_State *L)
{
    struct msg *m = luaL_checkudata(L, 1, MSG_MT);
    const char *k = luaL_checkstring(L, 2);

    if (m->ex.obj != NULL && strcmp(k, "hits") == 0) {
        lua_pushinteger(L, m->ex.obj->hits);
        return (1);
    }
    /* deliver's obj: the hit count and nothing else (no head, no way to load one). */
    if (m->ex.obj != NULL && m->ex.obj->resp == NULL && m->ex.obj->load == NULL) {
        lua_pushnil(L);
        return (1);
    }
    /* obj's timing needs no head: answered without parsing it. */
    if (m->ex.obj != NULL && (strcmp(k, "ttl") == 0 || strcmp(k, "age") == 0 ||
                              strcmp(k, "grace") == 0)) {
        lua_pushnumber(L, *k == 't' ? m->ex.obj->ttl : *k == 'a' ? m->ex.obj->age
                                                                 : m->ex.obj->grace);
        return (1);
    }
    m = check_msg(L, 1);
    bool isreq = m->kind == POL_O_REQ || m->kind == POL_O_BEREQ;

    if (strcmp(k, "http") == 0) {
        /* One headers object per message, kept in its user value: no garbage per access. */
        if (lua_getiuservalue(L, 1, 1) == LUA_TNIL) {
            lua_pop(L, 1);
            lua_newuserdatauv(L, 0, 1);
            lua_pushvalue(L, 1);
            lua_setiuservalue(L, -2, 1);
            luaL_setmetatable(L, HDRS_MT);
            lua_pushvalue(L, -1);
            lua_setiuservalue(L, 1, 1);
        }
    } else if (isreq && strcmp(k, "method") == 0) {
        push_txt(L, m->hp->method);
    } else if (isreq && strcmp(k, "url") == 0) {
        push_txt(L, m->hp->url);
    } else if (strcmp(k, "proto") == 0) {
        lua_pushstring(L, http_proto_name(m->hp->proto));
    } else if (!isreq && strcmp(k, "status") == 0) {
        lua_pushinteger(L, m->hp->status);
    } else if (!isreq && strcmp(k, "reason") == 0) {
        push_txt(L, m->hp->reason);
    } else if (m->kind == POL_O_REQ && strcmp(k, "ctx") == 0) {
        struct pol_wrk *pw = pol__wrk(L);
        if (pw->ctx_ref == LUA_NOREF) {
            lua_newtable(L);
            pw->ctx_ref = luaL_ref(L, LUA_REGISTRYINDEX);
        }
        lua_rawgeti(L, LUA_REGISTRYINDEX, pw->ctx_ref);
    } else if (m->ex.br != NULL && strcmp(k, "ttl") == 0) {
        lua_pushnumber(L, m->ex.br->ttl);
    } else if (m->ex.br != NULL && strcmp(k, "grace") == 0) {
        lua_pushnumber(L, m->ex.br->grace);
    } else if (m->ex.br != NULL && strcmp(k, "stale_if_error") == 0) {
        lua_pushnumber(L, m->ex.br->stale_if_error);
    } else if (m->ex.br != NULL && strcmp(k, "uncacheable") == 0) {
        lua_pushboolean(L, m->ex.br->uncacheable);
    } else if (m->ex.br != NULL && strcmp(k, "keep") == 0) {
        lua_pushnumber(L, m->ex.br->keep);
    } else if (m->ex.br != NULL && do_flag(m->ex.br, k) != NULL) {
        /* Left alone: do_stream is on, the others off (parameters, Surrogate-Control decide). */
        int v = *do_flag(m->ex.br, k);
        lua_pushboolean(L, v == 1 || (v < 0 && strcmp(k, "do_stream") == 0));
    } else if (m->ex.body != NULL && strcmp(k, "body") == 0) {
        push_txt(L, *m->ex.body);
    } else if (isreq) {
        push_req_fact(L, m, k);
    } else {
        lua_pushnil(L);
    }
    return (1);
}

/* A response with this status has no body, whatever its fields say (RFC 9112 section 6.3). */
static bool
bodyless(unsigned status)
{
    return (status == 204 || status == 304);
}

static double
check_duration(lua_State *L, int idx, const char *what)
{
    double d = luaL_checknumber(L, idx);

    if (!(d >= 0 && d <= 10.0 * 365 * 86400))
        (void)luaL_error(L, "beresp.%s: %f is not a duration in seconds", what, d);
    return (d);
}

static int
l_msg_newindex(lua_State *L)
{
    struct msg *m = check_msg(L, 1);
    const char *k = luaL_checkstring(L, 2);
    bool isreq = m->kind == POL_O_REQ || m->kind == POL_O_BEREQ;
    size_t len;
    const char *s;

    check_writable(L, m, k);
    if (isreq && (strcmp(k, "url") == 0 || strcmp(k, "method") == 0)) {
        s = luaL_checklstring(L, 3, &len);
        for (size_t i = 0; i < len; i++)
            if ((unsigned char)s[i] <= 0x20 || s[i] == 0x7f)
                return (luaL_error(L, "%s.%s: no spaces or control characters",
                                   kind_name[m->kind], k));
        if (len == 0)
            return (luaL_error(L, "%s.%s: empty", kind_name[m->kind], k));
        if (*k == 'u')
            m->hp->url = ws_txt(L, s, len);
        else
            m->hp->method = ws_txt(L, s, len);
    } else if (!isreq && strcmp(k, "status") == 0) {
        lua_Integer st = luaL_checkinteger(L, 3);
        if (st < 200 || st > 999)
            return (luaL_error(L, "%s.status: %d is not 200..999", kind_name[m->kind], (int)st));
        /* A synthetic body (ex.body) is framed after the hook: there any status goes. */
        if (m->ex.body == NULL && bodyless((unsigned)st) != bodyless(m->hp->status))
            return (luaL_error(L, "%s.status: %d to %d would %s the body surogat frames",
                               kind_name[m->kind], (int)m->hp->status, (int)st,
                               bodyless((unsigned)st) ? "drop" : "add"));
        m->hp->status = (unsigned)st;
        m->hp->reason = (struct txt){ http_reason(m->hp->status),
                                      strlen(http_reason(m->hp->status)) };
    } else if (!isreq && strcmp(k, "reason") == 0) {
        s = check_value(L, 3, &len);
        m->hp->reason = ws_txt(L, s, len);
    } else if (m->ex.br != NULL && strcmp(k, "ttl") == 0) {
        m->ex.br->ttl = check_duration(L, 3, k);
        if (!m->ex.br->uncacheable_set)
            m->ex.br->uncacheable = !(m->ex.br->ttl > 0);
        m->ex.br->changed = true;
    } else if (m->ex.br != NULL && strcmp(k, "grace") == 0) {
        m->ex.br->grace = check_duration(L, 3, k);
        m->ex.br->changed = true;
    } else if (m->ex.br != NULL && strcmp(k, "stale_if_error") == 0) {
        m->ex.br->stale_if_error = check_duration(L, 3, k);
        m->ex.br->changed = true;
    } else if (m->ex.br != NULL && strcmp(k, "uncacheable") == 0) {
        m->ex.br->uncacheable = lua_toboolean(L, 3);
        m->ex.br->uncacheable_set = true;
        m->ex.br->changed = true;
    } else if (m->ex.br != NULL && strcmp(k, "keep") == 0) {
        m->ex.br->keep = check_duration(L, 3, k);
        m->ex.br->changed = true;
    } else if (m->ex.br != NULL && do_flag(m->ex.br, k) != NULL) {
        luaL_checktype(L, 3, LUA_TBOOLEAN);
        *do_flag(m->ex.br, k) = lua_toboolean(L, 3);
    } else if (m->ex.body != NULL && strcmp(k, "body") == 0) {
        s = luaL_checklstring(L, 3, &len);
        *m->ex.body = ws_txt(L, s, len);
    } else if (isreq && strcmp(k, "backend") == 0) {
        set_backend(L, m);
    } else if (m->kind == POL_O_REQ &&
               (strcmp(k, "hash_always_miss") == 0 || strcmp(k, "hash_ignore_busy") == 0)) {
        struct req *req = pol__wrk(L)->req;
        if (k[5] == 'a')
            req->hash_always_miss = lua_toboolean(L, 3);
        else
            req->hash_ignore_busy = lua_toboolean(L, 3);
    } else if (m->kind == POL_O_REQ && strcmp(k, "esi_allow_host") == 0) {
        luaL_checktype(L, 3, LUA_TBOOLEAN);
        pol__wrk(L)->req->esi_allow_host = lua_toboolean(L, 3);
    } else {
        return (luaL_error(L, "%s.%s cannot be set", kind_name[m->kind], k));
    }
    return (0);
}

static int
l_msg_tostring(lua_State *L)
{
    struct msg *m = luaL_checkudata(L, 1, MSG_MT);

    lua_pushstring(L, kind_name[m->kind]);
    return (1);
}

void
pol__obj_open(lua_State *L)
{
    static const luaL_Reg msg_mt[] = {
        { "__index", l_msg_index },
        { "__newindex", l_msg_newindex },
        { "__tostring", l_msg_tostring },
        { NULL, NULL },
    };
    static const luaL_Reg hdrs_mt[] = {
        { "__index", l_hdrs_index },
        { "__newindex", l_hdrs_newindex },
        { NULL, NULL },
    };
    static const luaL_Reg hdrs_methods[] = {
        { "get", l_hdrs_get },       { "set", l_hdrs_set },   { "append", l_hdrs_append },
        { "unset", l_hdrs_unset },   { "each", l_hdrs_each }, { NULL, NULL },
    };

    luaL_newmetatable(L, MSG_MT);
    luaL_setfuncs(L, msg_mt, 0);
    lua_pushliteral(L, "locked");
    lua_setfield(L, -2, "__metatable");
    lua_pop(L, 1);
    luaL_newmetatable(L, HDRS_MT);
    luaL_setfuncs(L, hdrs_mt, 0);
    luaL_newlib(L, hdrs_methods);
    lua_setfield(L, -2, "methods");
    lua_pushliteral(L, "locked");
    lua_setfield(L, -2, "__metatable");
    lua_pop(L, 1);
}
