/*
 * req_priv -- shared by the files of the request core.
 */
#ifndef SUROGAT_REQ_PRIV_H
#define SUROGAT_REQ_PRIV_H

#include <stdbool.h>
#include <string.h>

#include "surogat/cc.h"
#include "surogat/hsh.h"
#include "surogat/pool.h"
#include "surogat/pol.h"
#include "surogat/req.h"
#include "surogat/wtr.h"

struct be;
struct busyobj;
struct cobj;
struct hsh_stale;
struct pool;
struct req;

/*
 * req_fetch.c.  A pass to be, answered through the deliverer.  Never
 * fails: errors are answered.  true: it waits for its backend without
 * the worker (the steps stop at REQ_S_AWAIT).
 */
bool req_fetch_pass(struct req *req, struct be *be);
/*
 * A cache miss: fetch the full object for the busy *ocp (GET even for a
 * HEAD, without the client's conditional fields), deliver it while it is
 * stored, then publish it -- or abandon it when the response may not be
 * stored or the fetch fails.  With a stale object that has validators the
 * request is conditional, and a 304 renews the stale object instead; if
 * the backend fails and the stale object's stale-if-error window allows,
 * the stale object is served.  Takes the caller's references.  true: as
 * req_fetch_pass().
 */
bool req_fetch_miss(struct req *req, struct be *be, struct cobj **ocp, struct hsh_stale *stale);
/*
 * The fetch of either (oc NULL: a pass), its attempts, failovers and
 * retries.  may_wait: it may wait for its backend's answer without the
 * worker, when the request can (true returned: req->st->fetch and
 * req->st->watch say what it waits for; the steps stop at REQ_S_AWAIT and
 * req__fetch_resume() goes on, on a worker, once it is readable or late).
 */
bool req__fetch(struct req *req, struct be *be, struct cobj *oc, struct hsh_stale *stale,
                bool may_wait);
/* After REQ_S_AWAIT: the fetch goes on.  true: it waits again (a retried connection). */
bool req__fetch_resume(struct req *req);
/* After REQ_S_AWAIT: the request will never run again; its fetch lets go of what it holds. */
void req__fetch_drop(struct req *req);
/*
 * A busy object for req, and the policy context of its backend hooks
 * (bc, which bo points to): what the fetch needs of the request, copied
 * or borrowed.
 */
void req__busyobj(struct req *req, struct busyobj *bo, struct pol_bctx *bc, struct be *be,
                  struct cobj *oc, const struct hsh_stale *stale);
/*
 * req_bg.c.  Grace with nobody refreshing (HSH_GRACE): refresh the busy
 * *ocp from the stale copy stale->oc in a pool task (POOL_PRIO_BG,
 * through the bounded queue) while req delivers the stale copy.  Takes
 * both references.  When the queue is full the refresh is skipped and
 * the busy object abandoned (cache_bgfetch_skipped).  Never blocks on the
 * backend.
 */
void req_fetch_bg(struct req *req, struct be *be, struct cobj **ocp, struct hsh_stale *stale);

/*
 * The steps of the request state machine (req_step.c), in one table:
 * REQ_STEP(NAME, name), each run by step_name().
 */
#define REQ_STEPS                                 \
    REQ_STEP(RECV, recv)                          \
    REQ_STEP(HASH, hash)                          \
    REQ_STEP(LOOKUP, lookup)                      \
    REQ_STEP(HIT, hit)                            \
    REQ_STEP(MISS, miss)                          \
    REQ_STEP(PASS, pass)                          \
    REQ_STEP(PIPE, pipe)                          \
    REQ_STEP(PURGE, purge)                        \
    REQ_STEP(SYNTH, synth)                        \
    REQ_STEP(STATIC, static)                      \
    REQ_STEP(DELIVER, deliver)                    \
    REQ_STEP(GATEWAY_TIMEOUT, gateway_timeout)    \
    REQ_STEP(BACKEND, backend)

enum req_step {
#define REQ_STEP(U, l) REQ_S_##U,
    REQ_STEPS
#undef REQ_STEP
    REQ_S__N,
    REQ_S_RESTART = REQ_S__N, /* a hook said "restart": req_dispatch() goes back to recv */
    REQ_S_DONE,               /* answered */
    REQ_S_PARK,               /* on a waiting list: the lookup runs again when woken */
    REQ_S_AWAIT,              /* the fetch waits for its backend: REQ_S_BACKEND goes on */
};

/*
 * A request on a waiting list (req_park.c).  Its waiter may be woken by
 * another thread from the moment hsh_lookup() put it on the list, before
 * its worker has let go of it, so who runs it next is settled by one
 * atomic transition out of PARKING: the worker's (to PARKED, or to
 * ON_THREAD when it must wait on its worker) or the wake-up's (to WOKEN).
 */
enum req_park {
    REQ_P_NONE,      /* not waiting */
    REQ_P_PARKING,   /* on the list, its worker still holds it */
    REQ_P_PARKED,    /* its worker let go: the wake-up schedules it */
    REQ_P_ON_THREAD, /* its worker waits for the wake-up (pol_park() refused) */
    REQ_P_WOKEN,     /* woken before its worker let go or while it waited */
};
/* Set up the request's waiter for a lookup that may park it; NULL when it cannot park. */
struct hsh_waiter *req__waiter(struct req *req);
/* The lookup did not park it: no wake-up will come. */
void req__unwaited(struct req *req);
/*
 * The steps stopped at REQ_S_PARK: let go of the worker (true: the
 * caller returns REQ_RUN_PARKED), or wait on it until woken (false: run
 * the steps on).
 */
bool req__park(struct req *req);
/*
 * The steps stopped at REQ_S_AWAIT: the request lets go of its worker
 * and the waiter watches req->st->watch (its fd and deadline set); its
 * task runs REQ_S_BACKEND on whichever worker takes it.  Never blocks.
 */
void req__await(struct req *req);
/* req_step.c: run the steps on from the lookup (or the fetch) a parked request waited for. */
enum req_run req__dispatch_resume(struct req *req);
const char *req__step_name(enum req_step s);

/* What one step hands the next (req->st), in the request's workspace. */
struct req_state {
    enum req_step step;      /* the next one to run */
    enum hsh_result lookup;  /* what the lookup found */
    struct cobj *oc;         /* the hit's object, the busy object of a miss, or NULL */
    struct hsh_stale stale;  /* a stale copy the lookup found */
    struct cc qcc;           /* the client's Cache-Control */
    bool refresh;            /* look up past fresh objects (hash_always_miss, hit's "miss") */
    bool grace;              /* delivering a stale copy in grace (a refresh runs) */
    double t_lookup;         /* tim_real() of the lookup */
    const char *fwd;         /* Cache-Status forward detail of the delivery, NULL for a hit */
    struct be *be;           /* the static backend of REQ_S_STATIC */
    struct pol_synth syn;    /* the synthetic answer of REQ_S_SYNTH */
    /* Waiting lists (req_park.c). */
    struct hsh_waiter waiter;
    enum req_park park;      /* atomic */
    struct pool_task task;   /* resumes it */
    struct http *pipe_bereq; /* a pipe fetched rather than tunneled: its request (req_pipe.c) */
    /* A fetch waiting for its backend (REQ_S_AWAIT, req_fetch.c), and what watches it. */
    struct req_fetch *fetch;
    struct wtr_watch watch;
};

/*
 * req_upgrade.c.  The backend accepted bo's upgrade (FETCH_UPGRADE): its
 * 101 to the client, then the tunnel, with bo->conn taken and closed;
 * bo is done (fetch_done()) on return.
 */
void req__upgraded(struct req *req, struct busyobj *bo);
/*
 * A tunnel on conn, which the request's transport must be able to make:
 * counted (tunnel_active, tunnel_idle), closed for a pipe after idle
 * seconds of silence, tunnel_timeout for an upgrade.
 */
struct bcp_conn;
struct tp_tunnel;
void req__tunnel(struct req *req, struct bcp_conn *conn, const struct tp_tunnel *t);
/*
 * req_hints.c.  Send the 103 Early Hints the policy asked for
 * (surogat.early_hints, req->hints) if any, after the hook that asked.
 */
void req__hints_send(struct req *req);
/* fetch_interim_f for a fetch with a client behind it: the backend's 103s to it. */
int req__interim(void *priv, unsigned status, const struct txt *fields);
/*
 * Run an ESI include's steps from req->st->step on until the request is
 * done (REQ_S_DONE), or until the next step is one of `stop` (a mask of
 * 1u << REQ_S_*, 0 for none): that step is returned, not run.  An
 * include runs its lookup this way on the page's worker and the rest,
 * unless a hit, on a task of its own (req_esi.c).  REQ_S_PARK: its lookup
 * put it on a waiting list, with req__esi_waiter()'s waiter, whose
 * wake-up may come at once; the lookup runs again next.
 */
enum req_step req__run(struct req *req, unsigned stop);
/* req_esi.c: an include's waiter (req__waiter()); its wake-up goes to its page's side. */
struct hsh_waiter *req__esi_waiter(struct req *req);

/*
 * Whether the request's method is exactly m (methods are case-sensitive).
 * Inline: m is a literal, whose length the compiler knows.
 */
static inline bool
req__is_method(const struct req *req, const char *m)
{
    size_t l = strlen(m);

    return (req->http->method.len == l && memcmp(req->http->method.b, m, l) == 0);
}

#endif
