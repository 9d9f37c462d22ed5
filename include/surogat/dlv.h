/*
 * dlv -- the one deliverer.  Whatever answers a request -- a cached
 * object, an object still being fetched, a static file, a page surogat
 * makes itself -- leaves through here: the client head is built here (Age,
 * Cache-Status, Via, X-Cache; 304, 206 and 416 decided from the request
 * with http_not_modified() and http_range()), the policy's deliver hook
 * runs on it exactly once, and the body goes out through the request's
 * transport (tp.h), from storage segments, a growing busy object, a file,
 * memory, or through gunzip for a client that does not take gzip.
 *
 * So a hook's "restart" or "synth" from deliver does the same on every
 * path: the request restarts (req->restart) or gets the synthetic answer.
 * Nothing here knows the client's protocol.  Runs on the request's worker
 * and blocks on the client, bounded by send_timeout per write.
 */
#ifndef SUROGAT_DLV_H
#define SUROGAT_DLV_H

#include <stdbool.h>

#include "surogat/http.h"

struct req;
struct cobj;

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
