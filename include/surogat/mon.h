/*
 * mon -- the HTTP admin listener (-M, param admin_http): Prometheus text
 * exposition at /metrics, a live HTML status page at / and the data the
 * page polls at /status.json, and /health for a load balancer's checks
 * (200 "ok", 503 "draining" from SIGTERM until exit).  Anything else is
 * 404, methods other than GET and HEAD 405.
 *
 * It runs on a thread of its own with its own libevent base, apart from
 * client traffic: workers never wait for it.  What workers feed it
 * (mon_req_end) costs them a few per-thread counter increments and, for
 * one request in MON_TOP_SAMPLE, a try-lock that gives up rather than
 * wait.
 */
#ifndef SUROGAT_MON_H
#define SUROGAT_MON_H

struct req;
struct sb;

/* One request in this many is offered to the top-URL table. */
#define MON_TOP_SAMPLE 8

/*
 * Bind addr (HOST:PORT, [IPV6]:PORT or :PORT) and start the thread.  0, or
 * -1 with a one-line reason in err.  Main thread, after the cache and the
 * backends are up.
 */
int mon_init(const char *addr, struct sb *err);
void mon_fini(void); /* stops the thread and closes the listener; safe when never started */
/*
 * A worker finished req (t_mono and t_end set): count it in the latency
 * histogram and maybe sample its URL.  Never blocks, never allocates.
 */
void mon_req_end(const struct req *req);

#endif
