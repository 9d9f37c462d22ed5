/*
 * req_priv -- shared by the files of the request core.
 */
#ifndef SUROGAT_REQ_PRIV_H
#define SUROGAT_REQ_PRIV_H

struct be;
struct busyobj;
struct cobj;
struct hsh_stale;
struct pool;
struct req;

/*
 * req_fetch.c.  A pass to be, answered through the deliverer.  Never
 * fails: errors are answered.
 */
void req_fetch_pass(struct req *req, struct be *be);
/*
 * A cache miss: fetch the full object for the busy *ocp (GET even for a
 * HEAD, without the client's conditional fields), deliver it while it is
 * stored, then publish it -- or abandon it when the response may not be
 * stored or the fetch fails.  With a stale object that has validators the
 * request is conditional, and a 304 renews the stale object instead; if
 * the backend fails and the stale object's stale-if-error window allows,
 * the stale object is served.  Takes the caller's references.
 */
void req_fetch_miss(struct req *req, struct be *be, struct cobj **ocp, struct hsh_stale *stale);
/* The fetch of either (oc NULL: a pass), its attempts, failovers and retries. */
void req__fetch(struct req *req, struct be *be, struct cobj *oc, struct hsh_stale *stale);
/* A busy object for req: what the fetch needs of the request, copied or borrowed. */
void req__busyobj(struct req *req, struct busyobj *bo, struct be *be, struct cobj *oc,
                  const struct hsh_stale *stale);
/*
 * req_bg.c.  Grace with nobody refreshing (HSH_GRACE): refresh the busy
 * *ocp from the stale copy stale->oc in a pool task (POOL_PRIO_BG,
 * through the bounded queue) while req delivers the stale copy.  Takes
 * both references.  When the queue is full the refresh is skipped and
 * the busy object abandoned (cache_bgfetch_skipped).  Never blocks on the
 * backend.
 */
void req_fetch_bg(struct req *req, struct be *be, struct cobj **ocp, struct hsh_stale *stale);

#endif
