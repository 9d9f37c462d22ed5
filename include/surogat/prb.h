/*
 * prb -- backend health probes, as Varnish's: a backend is healthy while
 * at least `threshold` of its last `window` probes succeeded, and starts
 * with `initial` good results assumed.
 *
 * Every probe runs on one probe thread with its own libevent base, never
 * on a worker: each probe is a non-blocking connect, for a TLS backend a
 * non-blocking handshake with the backend's certificate checks, one
 * request and the status line of the answer, the whole bounded by the
 * probe's timeout.
 */
#ifndef SUROGAT_PRB_H
#define SUROGAT_PRB_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

struct sb;
struct bcp_tls;
struct be_probe_conf;
struct prb;

#define PRB_WINDOW_MAX 64 /* the history is one uint64_t */

/*
 * The window arithmetic, pure functions of the history bitmap `bits`,
 * whose bit 0 is the newest result (1 good).
 */
unsigned prb_good(uint64_t bits, unsigned window); /* good results in the window */
bool prb_window_healthy(uint64_t bits, unsigned window, unsigned threshold);
/* The history after one more result: shifted in, cut to the window. */
uint64_t prb_shift(uint64_t bits, unsigned window, bool good);
/* The history at start: `initial` good results (clamped to the window). */
uint64_t prb_initial_bits(unsigned initial, unsigned window);
/* The window as text, oldest first: 'H' good, '-' bad ("---HHHHH"). */
void prb_history(uint64_t bits, unsigned window, struct sb *out);

/*
 * Fill in the defaults of a probe conf and check it; -1 with a reason in
 * err (no name: the caller prefixes it).
 */
int prb_conf_check(const struct be_probe_conf *in, struct be_probe_conf *out, struct sb *err);

/*
 * Called on the probe thread after each probe, with the new history and
 * the window's verdict.  Must not block.
 */
typedef void prb_result_f(void *priv, uint64_t bits, bool healthy);

int prb_init(void); /* probes may be started from here on; they wait for prb_run() */
/*
 * Start the probe thread.  After daemonizing: a thread does not survive
 * fork().  -1 with errno when the event base or the eventfd fails.
 */
int prb_run(void);
void prb_fini(void); /* stop the thread if running; frees every probe */
/*
 * Start probing sa every interval, the first probe at once.  `host` is
 * the Host header of the default request.  tls: NULL for plain HTTP, else
 * borrowed until prb_fini() (the backend's).  The conf is copied (after
 * prb_conf_check()).  Any thread.  *bits0 gets the initial history.
 * proxy_protocol 1 or 2: each probe connection opens with a PROXY header
 * saying LOCAL (v1 UNKNOWN), before TLS, as the backend expects on every
 * connection; 0: none.
 */
struct prb *prb_start(const char *name, const struct sockaddr *sa, socklen_t salen,
                      const char *host, struct bcp_tls *tls, unsigned proxy_protocol,
                      const struct be_probe_conf *c, prb_result_f *cb, void *priv, uint64_t *bits0);
/*
 * Stop and free it at the probe thread's next turn; *pp = NULL.  A result
 * being delivered meanwhile may still reach the callback, so priv must
 * stay valid until prb_fini() (a backend's memory does).
 */
void prb_stop(struct prb **pp);

#endif
