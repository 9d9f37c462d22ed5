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

/* Pass the request to `be` and deliver the answer.  Never fails: errors are answered. */
void fetch_pass(struct req *req, struct be *be);

#endif
