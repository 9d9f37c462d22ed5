/*
 * dlv -- the one deliverer.  Whatever answers a request -- a cached
 * object, an object still being fetched, a static file, a page surogat
 * makes itself -- leaves through here: the client head is built here (Age,
 * Cache-Status, Via, X-Cache; 304, 206 and 416 decided from the request
 * with http_not_modified() and http_range()), the policy's deliver hook
 * runs on it exactly once, and the body goes out through the request's
 * transport (tp.h), from storage segments, a growing busy object, a file,
 * memory, or made over on the fly (decoded, and encoded again) for a
 * client that does not take the coding the body is stored in.
 *
 * So a hook's "restart" or "synth" from deliver does the same on every
 * path: the request restarts (req->restart) or gets the synthetic answer.
 * Nothing here knows the client's protocol.  Runs on the request's worker
 * and blocks on the client, bounded by send_timeout per write.
 */
#ifndef SUROGAT_DLV_H
#define SUROGAT_DLV_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "surogat/http.h"

struct req;
struct cobj;

/*
 * Deliver the stored object oc at `now`: its stored head with this
 * delivery's fields, or 304, 206, 416 as the request's conditions and
 * range say, then its body from the store -- in the coding the client
 * prefers among those that can be made: the stored one, a copy kept in
 * another (hsh_copy_get), or made on the fly, which may keep a copy
 * (hsh_copy_begin).  fwd: NULL for a hit, else RFC 9211's forward
 * detail ("fwd=stale; fwd-status=304" for a revalidated object).  The
 * caller holds a reference to oc.
 */
void dlv_obj(struct req *req, struct cobj *oc, double now, const char *fwd);
/*
 * Deliver the busy object oc (HSH_STREAM) as its fetch stores it: the
 * head at once, then body bytes as they are appended, waiting at most tmo
 * seconds for each piece.  A fetch that fails after the head went out
 * cuts the connection.  Cache-Status: fwd=miss; collapsed.
 */
void dlv_stream(struct req *req, struct cobj *oc, double tmo);
/*
 * Answer from a backend that answers in place (be_local(be): the static
 * files): its status and fields through the deliver hook, its body from
 * memory or with sendfile(2).  Sets req->be_name, req->outcome STATIC.
 */
struct be;
void dlv_local(struct req *req, struct be *be);
/*
 * Delivering a fetch to the client that asked (req_fetch.c joins the
 * two): dlv_fetch_begin() plans the head from bo's response -- 304, 206 or
 * 416 for a miss, which fetched the whole object; Cache-Status with fwd
 * (NULL: a pass, "bypass") -- runs the deliver hook and gives the head to
 * the transport; df->sink then takes the body from fetch_body() (df->body
 * false: nothing of it goes to the client, who was answered in full at
 * once -- the fetch goes on for the cache); dlv_fetch_end() ends the
 * response as fetch_body() ended (0 complete, -1 the backend failed: a
 * 502 if nothing went out yet, else a cut connection; -2 the client
 * failed).  begin returns 0, or -1 when the request was answered
 * otherwise (the hook's synth, a restart: req->restart) or the client
 * failed.
 */
#include "surogat/fetch.h"
struct cobj;
struct dlv_reader;
struct dlv_fetch {
    struct req *req;
    struct fetch_sink sink;
    unsigned status;  /* the client's status */
    bool body;        /* the body goes to the client */
    bool range;       /* only bytes [first, last] of it (206) */
    uint64_t first, last;
    uint64_t off;     /* body bytes the sink was given */
    struct iovec iov[64];
    int niov;
    /*
     * A client that falls behind a miss's fetch (its socket full) stops
     * being written to from the fetch: the fetch goes on at the backend's
     * pace, for the cache and the requests streaming from it, and this
     * client reads the rest back from the store as it can (dlv_fetch.c).
     */
    const struct busyobj *bo; /* a miss's, while its body is fetched; NULL for a pass */
    struct cobj *oc;          /* once behind: the busy object it reads, referenced */
    struct gz_pick pick;      /* the client's coding, made from the stored body's */
    uint64_t sent;            /* client body bytes given to the transport */
    struct dlv_reader *lag;   /* fell behind: where it is in the store */
};
int dlv_fetch_begin(struct req *req, const struct busyobj *bo, const char *fwd,
                    struct dlv_fetch *df);
void dlv_fetch_end(struct dlv_fetch *df, int rv);
/*
 * A page surogat answers on its own (a malformed request, a backend that
 * failed): status, its standard reason, msg (plain text, escaped here; NULL
 * for none) as the page's paragraph, extra_fields (serialised field lines,
 * NULL for none).  Through no hook.  Sets req->outcome SYNTH.  0, or -1
 * when the client is gone.
 */
int dlv_error(struct req *req, unsigned status, const char *extra_fields, const char *msg);
/*
 * The policy's synthetic answer (surogat.synth(), a failed hook): status
 * and reason in the status line and the page, through the synth hook,
 * which may edit both or restart the request (req->restart).
 */
void dlv_synth(struct req *req, unsigned status, const char *reason);
/*
 * Send resp (status, reason, fields; Date and Server added when missing,
 * framing by the transport) with body, through no hook.  0, or -1 when the
 * client is gone.
 */
int dlv_send(struct req *req, const struct http *resp, struct txt body);

#endif
