/*
 * Shared inside the policy module: a worker's Lua state and the calls
 * between the engine (pol.c), the hook calls (pol_hooks.c), the message
 * objects (pol_obj.c) and the helper libraries (pol_lib.c, pol_url.c).
 */
#ifndef SUROGAT_POL_PRIV_H
#define SUROGAT_POL_PRIV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <lua.h>

#include "surogat/pol.h"

struct req;
struct sb;

enum pol_hook {
    POL_H_RECV,
    POL_H_HASH,
    POL_H_BACKEND_RESPONSE,
    POL_H_DELIVER,
    POL_H_HIT,
    POL_H_MISS,
    POL_H_PASS,
    POL_H_LOG,
    POL_H_SYNTH,
    POL_H_BACKEND_FETCH,
    POL_H_BACKEND_ERROR,
    POL_H_PIPE,
    POL_H_PURGE,
    POL_H_MAX,
};

struct pol_prog;

/* The limit that ended a call (pol_limit.c). */
enum pol_trip {
    POL_TRIP_NONE,
    POL_TRIP_INSNS, /* policy_max_instructions */
    POL_TRIP_TIME,  /* policy_max_time */
};

/* One Lua state and what a hook call in it needs; one per worker thread. */
struct pol_wrk {
    unsigned magic;
#define POL_WRK_MAGIC 0x3d91c0e5
    lua_State *L;
    struct pol_prog *prog; /* the program L was built from (a reference) */
    size_t mem;            /* bytes L has allocated: capped at policy_max_memory */
    /*
     * The script's hook functions and builtin.lua's, LUA_NOREF if none or
     * if the function is empty: calling it would change nothing.  `defined`
     * has a bit per hook with a function either way, for the record of
     * hooks taken.
     */
    int ref_user[POL_H_MAX];
    int ref_builtin[POL_H_MAX];
    unsigned defined;
    /* The word a hook function always returns (`return "deliver"`), else NULL. */
    char *konst_user[POL_H_MAX];
    char *konst_builtin[POL_H_MAX];
    /* req.ctx: the table of request ctx_id, a registry reference */
    uint64_t ctx_id;
    int ctx_ref;
    /*
     * The tables of the last requests whose hooks ran here before, kept by
     * id: an ESI page's includes run their hooks on the page's worker
     * before the page's own log hook, which must find its req.ctx.
     */
#define POL_CTX_KEEP 4
    uint64_t ctx_keep_id[POL_CTX_KEEP];
    int ctx_keep_ref[POL_CTX_KEEP];
    unsigned ctx_keep_next;
    /* during a hook call: for a request (client-side hooks), or a backend transaction */
    struct req *req;
    struct pol_bctx *bc;
    enum pol_hook hook;
    struct pol_synth *syn; /* where surogat.synth() writes; NULL in hooks without "synth" */
    const char *answered;  /* run_hook(): whose function answered: "script", "builtin", "default" */
    char *hbuf;            /* hash: surogat.hash_data() pieces, each after a NUL */
    size_t hlen, hcap;
    unsigned nre; /* patterns in the re cache */
    void *re_md;  /* re.match's pcre2_match_data, made once: no allocation per match */
    void *re_mc;  /* re.gsub's pcre2_match_context: its substitution callout */
    /* the budget of the call running (pol_limit.c) */
    struct pol_limit {
        bool armed;         /* a call (or the top level) runs */
        enum pol_trip trip; /* sticky until the call ends: every instruction then fails */
        uint64_t insns;     /* instructions the count hook has seen */
        unsigned step;      /* instructions until the count hook runs again */
        double deadline;    /* coarse monotonic seconds; 0 until the first clock check */
        double next_cpu;    /* past the deadline: when to read the thread's CPU clock */
        double cpu0;        /* its first reading then (seconds), 0 before */
        char msg[512];      /* "file:line: policy_max_... exceeded" once tripped */
    } lim;
    /* the environment (pol_env.c) */
    bool loading;   /* the top level runs: globals and library tables may be set */
    bool env_dirty; /* a hook set a global: cleared before another request's hook */
    int env_ref;    /* the script's _ENV, a registry reference */
    int views_ref;  /* read-only view -> the table behind it, env -> _G (a reference) */
};

/* The worker state behind a Lua state. */
static inline struct pol_wrk *
pol__wrk(lua_State *L)
{
    return (*(struct pol_wrk **)lua_getextraspace(L));
}

/* pol.c: the engine. */
extern const char *const pol__hook_name[POL_H_MAX]; /* the script's global of each hook */
/*
 * The worker's state for the current program, (re)built when needed; NULL
 * logged and counted.  in_request: a hook of this request already ran on
 * the state, which then stays as it is, so that a request that began
 * under one program ends under it even when a reload came in between.
 */
struct wrk;
struct pol_wrk *pol__state(struct wrk *wrk, bool in_request);
/*
 * The worker's state for program p itself (a detached backend
 * transaction's, pol_bctx), rebuilt from p when it is another's; the
 * worker's next request finds the generation moved and builds the
 * current one again.  NULL logged and counted.
 */
struct pol_wrk *pol__state_prog(struct wrk *wrk, struct pol_prog *p);
/* A reference to p for the caller (pol__prog_unref() it); p may be NULL. */
struct pol_prog *pol__prog_ref(struct pol_prog *p);
/*
 * During a hook call: whether one runs at all (not the top level), and
 * the workspace of whom it runs for (the request's, or the backend
 * transaction's).
 */
static inline bool
pol__in_hook(const struct pol_wrk *pw)
{
    return (pw->req != NULL || pw->bc != NULL);
}
struct ws *pol__ws(const struct pol_wrk *pw);
/* pol_park.c: req.ctx and the request's globals, as pol_park() carried them. */
void pol__unpark(struct pol_wrk *pw, struct req *req);
bool pol__user_has(enum pol_hook h);                  /* the current script defines hook h */
const char *pol__prog_path(const struct pol_prog *p); /* the script's file name */
const char *pol__prog_src(const struct pol_prog *p, size_t *lenp); /* its source, as compiled */
bool pol__prog_is_inline(const struct pol_prog *p); /* given as text (vcl.inline), no file */
struct pol_cfg *pol__prog_cfg(const struct pol_prog *p);
/*
 * Programs for pol_admin.c.  _check(): read and compile `path` in a
 * scratch state, with its declarations: a program holding one reference
 * for the caller, or NULL with "file:line: message" in err.  _install():
 * make p current (a new generation), taking a reference of its own.
 * _refs(): its references now (the registry's, the current slot's, one
 * per worker state built from it, and passing ones).  Main or CLI thread,
 * except _unref() and _refs(): any thread.
 */
struct pol_prog *pol__prog_check(const char *path, struct sb *err);
/* The same for a script given as text: known as "<inline:NAME>" in messages. */
struct pol_prog *pol__prog_check_src(const char *name, const char *src, size_t len, struct sb *err);
void pol__prog_install(struct pol_prog *p);
void pol__prog_unref(struct pol_prog **pp); /* *pp = NULL; NULL is fine */
unsigned pol__prog_refs(const struct pol_prog *p);
bool pol__prog_is_cur(const struct pol_prog *p);

/* pol_admin.c: drop every named program (pol_fini); later loads are refused until pol_load(). */
void pol__admin_fini(void);

/*
 * pol_decl.c: backend, director and route declarations.  _open() adds
 * the recording functions to a state; _build() turns what the scratch
 * state recorded into a program's configuration (NULL with "file:line:
 * message" in err); _find() a backend or director by name; _route() the
 * director of a request head by the routes (or the default; NULL without any).
 */
struct pol_cfg;
struct dir;
void pol__decl_open(lua_State *L);
struct pol_cfg *pol__decl_build(lua_State *L, struct sb *err);
void pol__decl_free(struct pol_cfg **cfgp);
void pol__decl_fini(void); /* at exit, after the programs: the static backends' files */
struct dir *pol__decl_find(const struct pol_cfg *cfg, const char *name);
struct dir *pol__decl_route(const struct pol_cfg *cfg, const struct http *hp); /* hp: request head */
bool pol__decl_empty(const struct pol_cfg *cfg);
bool pol__decl_has_static(const struct pol_cfg *cfg);
/* Fill pi's backends and directors from cfg (pol_prog_foreach). */
struct pol_prog_info;
void pol__decl_info(const struct pol_cfg *cfg, struct pol_prog_info *pi);

/*
 * pol_limit.c: the budget of one call -- policy_max_instructions VM
 * instructions and policy_max_time of wall-clock time.  _arm() before
 * the call (the script's top level, or a hook), _disarm() after it;
 * between the two, a limit that trips stays tripped: every further
 * instruction raises the error again, so no pcall or error handler can
 * carry on, and the caller finds pw->lim.trip set whatever the call
 * returned.  _check() is for C functions that may run long (the pattern
 * functions, re.*, the string, table and utf8 libraries): it raises when
 * a limit has tripped or the deadline has passed.  _alloc() is the
 * state's allocator (lua_Alloc, ud the pol_wrk): it caps memory at
 * policy_max_memory and reads the clock on large allocations.
 */
void pol__limit_arm(struct pol_wrk *pw);
void pol__limit_disarm(struct pol_wrk *pw);
/* After _disarm(): the tripped limit's "file:line: ... exceeded", or NULL. */
const char *pol__limit_tripped(struct pol_wrk *pw);
void pol__limit_check(lua_State *L);
/* The same without raising (from inside a library's callback): whether a limit has tripped. */
bool pol__limit_over(struct pol_wrk *pw);
void *pol__limit_alloc(void *ud, void *ptr, size_t osize, size_t nsize);

/*
 * pol_env.c: the sandbox.  _open() loads the libraries a script may use
 * (the allowed parts of them), first thing in a new state.  _guard(),
 * once every global of surogat's is set, puts a read-only view in place
 * of each library table, locks the string metatable and makes the
 * environment the script's chunks run in; pw->loading is then true.
 * _chunk() gives the function on top of the stack (a chunk just loaded)
 * that environment.  _seal() ends the top level: from then on the
 * globals it set and the library tables are read-only, and a global a
 * hook sets lasts until _reset(), called before the first hook of each
 * request.
 */
void pol__env_open(lua_State *L);
void pol__env_guard(lua_State *L);
void pol__env_chunk(lua_State *L);
void pol__env_seal(struct pol_wrk *pw);
void pol__env_reset(struct pol_wrk *pw);

/*
 * pol_pat.c: string.find, match, gmatch, gsub and rep in place of
 * Lua's, with the same results, checking the budget as they go (Lua's
 * own matcher cannot be interrupted).  Sets them in the table on top
 * of the stack.
 */
void pol__pat_open(lua_State *L);

/* pol_hooks.c: whether hook h may return action `word` (log: any); its actions, "a", "b" ... */
bool pol__hook_allows(enum pol_hook h, const char *word);
void pol__hook_acts(enum pol_hook h, struct sb *sb);

/* pol_lib.c: the global tables `re` and `surogat`. */
void pol__lib_open(lua_State *L);
/* pol_url.c: add the duration, date and URL helpers to the table on top of L's stack. */
void pol__url_open(lua_State *L);
/* pol_obj.c: metatables of the message objects. */
void pol__obj_open(lua_State *L);
/*
 * Push a message object over hp (kind POL_O_*).  Valid until
 * pol__obj_kill() on the same index: the object then raises an error
 * instead of touching a head that is gone.
 */
enum pol_obj_kind { POL_O_REQ, POL_O_BEREQ, POL_O_BERESP, POL_O_RESP, POL_O_OBJ };
/*
 * What a message object may carry besides its head: a beresp's timing
 * (br), a cached object's (obj), a synthetic body the hook may replace
 * (body: resp in synth, beresp in backend_error).
 */
struct pol_ex {
    struct pol_beresp *br;
    const struct pol_obj *obj;
    struct txt *body;
};
struct pol_beresp;
struct pol_obj;
/* ex may be NULL. */
void pol__obj_push(lua_State *L, enum pol_obj_kind kind, struct http *hp, const struct pol_ex *ex,
                   int ro);
void pol__obj_kill(lua_State *L, int idx);
/*
 * The head of the live message object at idx, which must be of `kind`
 * (else a Lua error); *exp, unless exp is NULL, points at its extras.
 */
struct http *pol__obj_check(lua_State *L, int idx, enum pol_obj_kind kind,
                            const struct pol_ex **exp);
/*
 * pol_client.c: the globals `client` and `server`, facts of the hook's
 * client, read-only.  _fill() copies all of them from connection sp
 * (NULL: none) into pc.
 */
void pol__client_open(lua_State *L);
struct pol_client;
struct sess;
void pol__client_fill(struct pol_client *pc, const struct sess *sp);

/*
 * The toolbox of `surogat`, each adding its functions to the table on
 * top of L's stack: digests, encodings, random, healthy (pol_tool.c,
 * which calls the other two), cookies (pol_cookie.c), shared
 * dictionaries and the rate limiter (pol_shared.c).
 */
void pol__tool_open(lua_State *L);
void pol__cookie_open(lua_State *L);
void pol__shared_open(lua_State *L);
/*
 * Shared dictionaries outlive programs: _get() the one named `name` of
 * `size` bytes, a new one unless a program declared that name and size
 * already, with a reference for the caller; NULL with a message in err
 * for a size out of bounds.  _release(): the last reference frees it.
 * Any thread.
 */
struct pol_shd;
struct pol_shd *pol__shd_get(const char *name, uint64_t size, struct sb *err);
void pol__shd_release(struct pol_shd **dp); /* *dp = NULL */
const char *pol__shd_name(const struct pol_shd *d);
/* pol_decl.c: the program's shared dictionary `name`, or NULL. */
struct pol_shd *pol__decl_shared(const struct pol_cfg *cfg, const char *name);
/* pol_decl.c: the program's cluster (not referenced), or NULL. */
struct clu;
struct clu *pol__decl_cluster(const struct pol_cfg *cfg);
/* pol_cluster.c: the table surogat.cluster, in the table on top of L's stack. */
void pol__cluster_open(lua_State *L);
/* pol_obj.c: server.identity: the identity parameter, else the host name. */
void pol__identity(char *buf, size_t len);
/* Whether the top level of L's script declared `kind` `name` so far. */
bool pol__decl_seen(lua_State *L, const char *kind, const char *name);

#endif
