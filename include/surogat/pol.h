/*
 * pol -- the Lua policy engine: a script of VCL-style hooks (surogat-lua(7)).
 *
 * pol_load() compiles a script once, in a scratch state, and installs it
 * as the current program, bumping a generation counter.  Each worker
 * thread owns one lua_State, built lazily on its first hook call and
 * rebuilt when the generation moved on (a SIGHUP reload), so a reload
 * never touches a state in use.  Every hook runs the user's function,
 * then builtin.lua's (compiled into the binary) when the user's is
 * missing or returns nil.
 *
 * Without a script (pol_active() false) nothing here runs: the callers
 * keep the built-in C policy, at the cost of one load of a flag.
 *
 * A failing hook -- a Lua error, an action the hook may not return, the
 * instruction or memory limit -- is logged with file:line, counted
 * (policy_error) and returns POL_ERROR: the caller answers 503.
 */
#ifndef SUROGAT_POL_H
#define SUROGAT_POL_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct be;
struct cobj;
struct dir;
struct http;
struct req;
struct be_snap;
struct sb;
struct txt;
struct wrk;

enum pol_act {
    POL_ERROR = -1,
    POL_NONE = 0, /* the hook returned nothing (only from pol_deliver with no hook) */
    POL_HASH,     /* recv: look the request up ("hash", "lookup") */
    POL_PASS,     /* recv: to the backend, not cached; backend_response: do not store */
    POL_PIPE,     /* recv: treated as POL_PASS for now */
    POL_PURGE,    /* recv: the PURGE handling (purge_acl applies) */
    POL_SYNTH,    /* recv, deliver: surogat.synth(status, reason) */
    POL_DELIVER,  /* backend_response, deliver */
    POL_ABANDON,  /* backend_response: drop the response, answer 503 */
    POL_MISS,     /* hit: fetch anyway, the object is not used and the fetch replaces it */
    POL_FETCH,    /* miss, pass, backend_fetch: go to the backend */
    POL_RESTART,  /* hit, miss, pass, purge, deliver, synth: recv again (max_restarts) */
    POL_RETRY,    /* backend_response, backend_error: fetch again (max_retries) */
};

/*
 * Compile `path` (and builtin.lua) and run its top level in a scratch
 * state: what a worker will do.  0, or -1 with "file:line: message" in
 * err.  pol_load() then keeps it as the program named "boot" and
 * installs it for every worker; pol_check() only checks (surogatd -C).
 * Main thread only.
 */
int pol_check(const char *path, struct sb *err);
/* vcl/builtin.lua as compiled into the binary (vcl.show -v). */
const char *pol_builtin_source(size_t *lenp);
int pol_load(const char *path, struct sb *err);
/*
 * SIGHUP: load the current program's file again, as a new program under
 * the same name, and use it; on failure the running program stays.
 * pol_reload_prepare() and _commit() are its two halves, so that a reload
 * can go all or nothing with others: _prepare() compiles the file again
 * (0 with *rp NULL when there is nothing to reload: no policy, or a
 * program given inline), or -1 with "file:line: message"; then exactly
 * one of _commit(), which makes it current under the same name and says
 * so in `what` ("policy NAME reloaded"), or _abort().  No program may be
 * loaded, used or discarded in between (they wait).  Main thread.
 */
int pol_reload(struct sb *err);
struct pol_reload;
int pol_reload_prepare(struct pol_reload **rp, struct sb *err);
void pol_reload_commit(struct pol_reload **rp, struct sb *what);
void pol_reload_abort(struct pol_reload **rp);
/*
 * Named programs, as Varnish's vcl.load, vcl.use, vcl.list and
 * vcl.discard (the admin commands policy.*; pol_admin.c).  Several may
 * be loaded, one is current: workers switch to it at their next hook
 * call, and a request that began under the old one ends under it.  Main
 * or CLI thread.  0, or -1 with the reason in err and nothing changed.
 *
 * _load(): compile `path` as program `name` (a letter, then letters,
 * digits, '_', '-', '.'; at most 64), new and not used yet; a script
 * that fails to compile, or declares no backend when there is no -b,
 * is refused with "file:line: message".  _use(): make it current.
 * _discard(): forget it, refused for the current program; worker states
 * still built from it keep it alive until they move on.
 */
int pol_prog_load(const char *name, const char *path, struct sb *err);
/* _load() of a script given as text (vcl.inline); messages name it "<inline:NAME>". */
int pol_prog_inline(const char *name, const char *src, size_t len, struct sb *err);
int pol_prog_use(const char *name, struct sb *err);
int pol_prog_discard(const char *name, struct sb *err);
/* One line per program, oldest first: state, worker states built from it, name, file. */
void pol_prog_list(struct sb *out);
/* What the admin commands show of a program (vcl.list, vcl.show, backend.list). */
struct pol_prog_info {
    const char *name;
    const char *path; /* its file, or "<inline:NAME>" */
    bool active;      /* the current program */
    bool is_inline;
    unsigned workers; /* worker states built from it now: a count, not a promise */
    const char *src;  /* the source as compiled */
    size_t len;
    /* Its declarations: the backends, then the directors (leaves for the backends first). */
    struct be *const *be;
    unsigned nbe;
    struct dir *const *dir;
    unsigned ndir;
};
typedef void pol_prog_visit_f(const struct pol_prog_info *pi, void *priv);
/*
 * fn for each loaded program, oldest first, under the registry lock: fn
 * must not call back into pol_; the pointers are valid during the call.
 * The number of programs.
 */
unsigned pol_prog_foreach(pol_prog_visit_f *fn, void *priv);
/*
 * Fill in v[i].progs (be.h) from the registry: which named programs
 * declare each backend, oldest first.  Takes the registry lock.
 */
void pol_prog_label(struct be_snap *v, unsigned n);
/*
 * The cluster the current program declares (clu.h), referenced: the
 * caller clu_unref()s it.  NULL when it declares none.  Any thread.
 */
struct clu;
struct clu *pol_cluster(void);
/* Before pool_init(): the workers' Lua states are freed when they exit. */
void pol_init(void);
void pol_fini(void);
bool pol_active(void);
/* The worker's state, if any (worker exit). */
void pol_wrk_fini(struct wrk *wrk);

/*
 * A synthetic answer asked for by a hook: surogat.synth(status, reason).
 * The reason goes in the status line and the page (no CR, LF or NUL).
 */
struct pol_synth {
    unsigned status;
    char reason[256];
};

/* recv(req): POL_HASH, POL_PASS, POL_PIPE, POL_PURGE, POL_SYNTH (*syn) or POL_ERROR. */
enum pol_act pol_recv(struct req *req, struct pol_synth *syn);
/*
 * hash(req): the cache key in workspace.  The user's surogat.hash_data()
 * pieces follow the built-in key (Host lower-cased, NUL, request-target)
 * when the hook returns nil, replace it when it returns "lookup".  0 (with
 * *key NULL when the workspace ran out), or -1 when the hook failed.
 */
int pol_hash(struct req *req, char **key, size_t *len);

/*
 * A backend response as backend_response(bereq, beresp) sees and changes
 * it.  Setting ttl also sets uncacheable to ttl <= 0, unless the script
 * set uncacheable itself; the object is stored when, in the end,
 * !uncacheable && ttl > 0.
 */
struct pol_beresp {
    struct http *bereq;  /* the backend request as sent (read-only); NULL: req's */
    struct http *resp;   /* the backend's head: fields may be edited (copied to workspace) */
    double ttl;          /* in: RFC 9111's verdict; out: the policy's */
    double grace;        /* stale-while-revalidate */
    double stale_if_error;
    double keep;         /* kept for conditional refetches past that; negative: default_keep */
    /* do_gzip, do_gunzip, do_stream, do_esi: -1 the script left them, else 0/1 */
    int do_gzip;         /* compress an identity body whatever its type and size, or never */
    int do_gunzip;       /* store and send a gzip body decoded */
    int do_stream;       /* 0: the client gets a stored object only once it is complete */
    int do_esi;          /* ESI processing of a stored 200 (-1: Surrogate-Control decides) */
    bool uncacheable;    /* in: not storable; out: do not store */
    bool changed;        /* out: the policy set one of the above */
    bool uncacheable_set; /* the policy set uncacheable: setting ttl no longer changes it */
    /*
     * out: an invalidation that may concern the object came while it was
     * fetched (surogat.cluster.invalidated): answered, never kept nor
     * joined (hsh_overtake).
     */
    bool overtaken;
};
/*
 * What the policy knows of the client of a backend transaction (client.*
 * and server.* in the backend hooks), copied out of its connection as
 * text by pol_bctx_detach() for a transaction that outlives its request
 * (else the hooks read the request's connection).  "" for a fact unknown.
 */
struct pol_client {
    bool filled;
    char ip[INET6_ADDRSTRLEN];
    char port[8];
    char tls[2];          /* "1" or "" */
    char tls_version[32];
    char tls_cipher[64];
    char tls_cert_cn[128];
    char sni[256];
    char proxy[2];        /* "1", "2" or "" */
    char server_ip[INET6_ADDRSTRLEN];
    char server_port[8];
};

/*
 * The policy's side of one backend transaction: what the backend hooks
 * (backend_fetch, backend_response, backend_error) see and change, owned
 * by whoever owns the busy object (fetch.h) -- a request's fetch, or a
 * background refresh with no request at all.  The client-side hooks keep
 * struct req; these never read one.  pol_bctx_init() fills it from the
 * request that starts the fetch: the client's head as the policy left it
 * (what becomes bereq), req.backend, the cache key, bereq.retries and
 * uncacheable, req.xid (req.ctx's key), its client.  The caller gives the
 * worker and workspace the hooks run with, and reads back what they chose
 * (dir, be_name, hooks).
 */
struct sess;
struct trace_tx;
struct ws;
struct pol_prog;
struct pol_bctx {
    unsigned magic;
#define POL_BCTX_MAGIC 0x1f6c92a3
    struct wrk *wrk;          /* whose Lua state runs the hooks */
    struct ws *ws;            /* where strings the hooks set go */
    uint64_t xid;             /* bereq.xid; names req.ctx: the request's, a refresh's own */
    struct http *creq;        /* the client's head as the policy left it: bereq is built from it */
    struct http *bereq;       /* the backend request, once built (the fetch sets it) */
    struct dir *dir;          /* req.backend; bereq.backend = name changes it */
    const char *be_name;      /* the backend picked, once picked (bereq.backend) */
    const char *key;          /* the cache key (a pass: the one it would have); NULL */
    size_t keylen;
    unsigned restarts;        /* req.restarts when the fetch began */
    unsigned retries;         /* bereq.retries */
    bool uncacheable;         /* bereq.uncacheable: a pass, hit-for-miss */
    bool bg;                  /* a background refresh: no client waits (bereq.is_bgfetch) */
    bool in_request;          /* a hook of its request ran: the hooks keep that program */
    struct pol_prog *req_prog; /* that program when the request moved workers (req->pol_prog,
                                * borrowed), or NULL */
    uint32_t hooks;           /* out: bit (1 << hook) per hook taken, for the request's log */
    struct trace_tx *trace;   /* the backend transaction's trace, or NULL */
    const struct sess *sp;    /* the client's connection while the request lives; NULL */
    struct pol_client client; /* its facts, copied once detached (see above) */
    /*
     * The program the transaction began under, referenced while it is
     * detached from its request: its hooks run under it, and the
     * directors it named stay, whatever a reload did meanwhile.  NULL:
     * the request's own (its worker keeps it until the request ends).
     */
    struct pol_prog *prog;
};
/*
 * Fill bc for a fetch of req (the request's worker, workspace and
 * connection).  Before a request that waited without its worker runs a
 * backend hook, what its client-side hooks kept comes back (pol_park()).
 */
void pol_bctx_init(struct pol_bctx *bc, struct req *req);
/*
 * Make bc independent of its request, which may end before the fetch
 * begins (a background refresh): the client's facts are copied now, the
 * program referenced, and a transaction id of its own given (the
 * refresh's bereq.xid and req.ctx).  bc->creq, ->key and the strings
 * they point to are the caller's to copy.  Undone by pol_bctx_fini().
 */
void pol_bctx_detach(struct pol_bctx *bc, struct req *req);
/*
 * req's fetch goes on after waiting for its backend without a worker
 * (pol_park()), perhaps on another: bc follows the request's worker and
 * workspace, and what its hooks kept comes back before backend_response.
 */
void pol_bctx_resume(struct pol_bctx *bc, struct req *req);
void pol_bctx_fini(struct pol_bctx *bc);

/* backend_response(bereq, beresp): POL_DELIVER, POL_PASS, POL_ABANDON, POL_RETRY or POL_ERROR. */
enum pol_act pol_backend_response(struct pol_bctx *bc, struct pol_beresp *br);

/* Whether the program has a deliver hook: the response head must be editable. */
bool pol_has_deliver(void);
/*
 * deliver(req, resp, obj) on a response head with room for more fields;
 * obj.hits is `hits`: the cached object's hit count (struct cobj) on a
 * delivery from the cache, 0 for a response straight from the backend
 * or a static file.  POL_DELIVER (resp possibly edited), POL_SYNTH
 * (*syn), POL_RESTART, POL_ERROR.
 */
enum pol_act pol_deliver(struct req *req, struct http *resp, unsigned hits,
                         struct pol_synth *syn);

/*
 * A cached object as hit(req, obj) sees it, read-only: the stored head
 * (parsed, in workspace) and its timing.
 */
struct pol_obj {
    /*
     * status, reason, fields; NULL until the script reads one of them:
     * then load(obj) parses the stored head (a copy per hit saved when
     * the hook only looks at the timing, or at nothing).
     */
    struct http *resp;
    struct http *(*load)(const struct pol_obj *obj); /* NULL: workspace exhausted */
    const struct cobj *oc;
    struct req *req;
    double ttl;        /* seconds of freshness left: negative once stale (grace) */
    double age;        /* seconds since the response was generated */
    double grace;      /* stale-while-revalidate window, seconds after the ttl */
    unsigned hits;     /* obj.hits: the object's hit count, this lookup included */
};

/* Whether the script itself defines hit or log: else the callers skip the hook. */
bool pol_has_hit(void);
bool pol_has_log(void);
/*
 * hit(req, obj): POL_DELIVER, POL_MISS, POL_PASS, POL_SYNTH (*syn),
 * POL_RESTART or POL_ERROR.  Without a hit hook in the script,
 * POL_DELIVER at once.
 */
enum pol_act pol_hit(struct req *req, const struct pol_obj *obj, struct pol_synth *syn);
/* miss(req): POL_FETCH, POL_PASS, POL_SYNTH (*syn), POL_RESTART or POL_ERROR. */
enum pol_act pol_miss(struct req *req, struct pol_synth *syn);
/* pass(req): POL_FETCH, POL_SYNTH (*syn), POL_RESTART or POL_ERROR. */
enum pol_act pol_pass(struct req *req, struct pol_synth *syn);
/*
 * log(req, resp) once the response was sent: both read-only, resp
 * carries the status sent (its fields are gone by then).  A failure is
 * logged and counted only: the client has its answer.
 */
void pol_log(struct req *req);

/*
 * synth(req, resp) on a synthetic response about to be sent: resp (head
 * with room for POL_HDR_ROOM more fields) and *body (the page) may be
 * changed -- `resp.body = "..."` -- strings copied to workspace.
 * POL_DELIVER, POL_RESTART, POL_ERROR.  Without a synth hook in the
 * script, POL_DELIVER at once.
 */
enum pol_act pol_synth(struct req *req, struct http *resp, struct txt *body);
/*
 * backend_fetch(bereq): the request about to go to the backend, editable
 * (room for POL_HDR_ROOM more fields).  POL_FETCH, POL_ABANDON (the
 * client gets a 503), POL_ERROR.  Without the hook, POL_FETCH at once.
 */
enum pol_act pol_backend_fetch(struct pol_bctx *bc, struct http *bereq);
/*
 * backend_error(bereq, beresp): the fetch failed (no or a bad answer);
 * beresp is the synthetic error response, *body its page, both editable.
 * POL_DELIVER (send beresp), POL_RETRY, POL_ABANDON (the plain error),
 * POL_ERROR.  Without the hook, POL_ABANDON at once.
 */
bool pol_has_backend_error(void);
enum pol_act pol_backend_error(struct pol_bctx *bc, struct http *beresp, struct txt *body);
/* pipe(req, bereq): POL_PIPE, POL_SYNTH (*syn), POL_ERROR; POL_PIPE without the hook. */
enum pol_act pol_pipe(struct req *req, struct http *bereq, struct pol_synth *syn);
/*
 * purge(req) after a purge was done: POL_NONE (the built-in answer),
 * POL_SYNTH (*syn), POL_RESTART, POL_ERROR.
 */
enum pol_act pol_purge(struct req *req, struct pol_synth *syn);

/*
 * The director of a request under the program it runs on: req.backend
 * when a hook set it, else the script's routes, else its default (a
 * declaration named "default", -b's backend, the first declared).  NULL
 * when the program declares nothing and there is no -b.
 */
struct dir *pol_dir(struct req *req);
/*
 * Whether the program the request runs on declares a static-file backend
 * (or has -b's): when not, no request needs its route resolved before
 * the cache lookup.
 */
bool pol_routes_static(struct req *req);
/* Whether the current program has somewhere to send requests (a default director). */
bool pol_has_backend(void);
/*
 * The request is about to wait without its worker (a waiting list, or its
 * backend's answer) and resume on any: what its hooks kept on this
 * worker's Lua state -- req.ctx and the globals they set -- goes into its
 * workspace, and the next hook for it, wherever it runs, finds them
 * again, on the program they ran under (req->pol_prog, referenced).  0,
 * or -1 when they cannot be carried (a function, a userdata, a cycle,
 * more than 4 KiB: see pol_park.c); the request must then wait on its
 * worker.
 */
int pol_park(struct req *req);
/* The request ends (served, or dropped while it waited): the program it held goes. */
void pol_req_done(struct req *req);

/* Header slots a response head built for pol_deliver() keeps free for the hook. */
#define POL_HDR_ROOM 32

#endif
