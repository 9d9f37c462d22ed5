/*
 * fetch -- the backend transaction: send the request (streaming its body),
 * read the response head, and stream the response body to the client --
 * and to the cache, and through it to the requests waiting for the same
 * object.  A background refresh runs the same transaction with no client.
 *
 * Failures become the right status: connect failure or a busy backend
 * 503, no response in time 504, a malformed one 502.  Once the response
 * head has gone to the client a backend failure can only abort the client
 * connection, which fetch does, so that no truncated response ever looks
 * complete.
 */
#ifndef SUROGAT_FETCH_H
#define SUROGAT_FETCH_H

struct req;
struct be;
struct cobj;

/* Pass the request to `be` and deliver the answer.  Never fails: errors are answered. */
void fetch_pass(struct req *req, struct be *be);
struct hsh_stale;
/*
 * A cache miss: fetch the full object for the busy *ocp (GET even for a
 * HEAD, without the client's conditional fields), deliver it while it is
 * stored, then publish it -- or abandon it when the response may not be
 * stored or the fetch fails.  With a stale object that has validators the
 * request is conditional, and a 304 renews the stale object instead; if
 * the backend fails and the stale object's stale-if-error window allows,
 * the stale object is served.  Takes the caller's references.
 */
void fetch_miss(struct req *req, struct be *be, struct cobj **ocp, struct hsh_stale *stale);
/*
 * Grace with nobody refreshing (HSH_GRACE): refresh the busy *ocp from
 * the stale copy stale->oc in a pool task (POOL_PRIO_BG, through the
 * bounded queue) while the caller delivers the stale copy.  Takes both
 * references.  When the queue is full the refresh is skipped and the
 * busy object abandoned (cache_bgfetch_skipped): a later request tries
 * again.  Never blocks on the backend.
 */
void fetch_bg(struct req *req, struct be *be, struct cobj **ocp, struct hsh_stale *stale);

#endif
