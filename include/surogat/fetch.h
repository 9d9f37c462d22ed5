/*
 * fetch -- the backend transaction: send the request (streaming its body),
 * read the response head, and stream the response body to the client.
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
/*
 * A cache miss: fetch the full object for the busy *ocp (GET even for a
 * HEAD, without the client's conditional fields), deliver it while it is
 * stored, then publish it -- or abandon it when the response may not be
 * stored or the fetch fails.  Takes the caller's reference.
 */
void fetch_miss(struct req *req, struct be *be, struct cobj **ocp);

#endif
