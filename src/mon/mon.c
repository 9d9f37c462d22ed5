/*
 * The HTTP admin listener: one thread running its own libevent base with
 * an evhttp server on the -M address, apart from the client listeners, so
 * that a scrape never competes with client traffic for a worker and a
 * flood of client requests never keeps the operator from the numbers.
 *
 * evhttp parses the requests, bounds the head (MON_HDR_MAX) and the
 * body (MON_BODY_MAX) and answers malformed ones with 400 itself; every
 * request it lets through reaches route(), which serves its four paths
 * to GET and HEAD and answers everything else 404 or 405.
 *
 * Once a second the thread also samples the counters into a ring, for
 * the rates of /metrics and /status.json.  The ring, the evhttp server
 * and the base belong to the mon thread; mon_init() and mon_fini() touch
 * them only while it is not running.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>

#include "surogat/defs.h"
#include "surogat/log.h"
#include "surogat/mon.h"
#include "surogat/num.h"
#include "surogat/sb.h"
#include "surogat/sess.h"
#include "surogat/stat.h"
#include "surogat/tim.h"

#include "mon_priv.h"
#include "mon_page.h"

#define MON_HDR_MAX  16384 /* bytes of a request head: a browser's is under 2 KB */
#define MON_BODY_MAX 4096  /* bytes of a request body: none is wanted, refuse large ones early */
#define MON_TIMEOUT  10    /* seconds a connection may stall reading or writing */
#define MON_RING     64    /* one-second counter samples kept, for rates up to a minute */

static struct event_base *base;
static struct evhttp *http;
static struct event *wake_ev, *tick_ev;
static int wake_fd = -1;
static pthread_t mon_thr;
static bool running;

double mon__t_start;

static struct {
    double t; /* tim_mono() */
    struct stat_block b;
} ring[MON_RING];
static unsigned ring_n; /* samples taken; the newest is ring[(ring_n - 1) % MON_RING] */

static void
sample(void)
{
    unsigned i = ring_n % MON_RING;

    ring[i].t = tim_mono();
    stat_sum(&ring[i].b);
    ring_n++;
}

double
mon__rate(enum stat_id id, unsigned secs)
{
    unsigned newest, oldest, back;
    double dt;

    SRG_ASSERT(id < STAT__N);
    if (ring_n < 2)
        return (0);
    back = SRG_MIN(secs, SRG_MIN(ring_n - 1, (unsigned)MON_RING - 1));
    newest = (ring_n - 1) % MON_RING;
    oldest = (ring_n - 1 - back) % MON_RING;
    dt = ring[newest].t - ring[oldest].t;
    if (dt <= 0)
        return (0);
    return ((double)(ring[newest].b.v[id] - ring[oldest].b.v[id]) / dt);
}

static void
on_tick(evutil_socket_t fd, short what, void *priv)
{
    sample();
}

static void
on_wake(evutil_socket_t fd, short what, void *priv)
{
    event_base_loopbreak(base);
}

static void
reply(struct evhttp_request *r, int code, const char *reason, const char *ctype,
      struct evbuffer *body)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(r);

    AZ(evhttp_add_header(h, "Content-Type", ctype));
    /* Live numbers: a cached copy would only mislead. */
    AZ(evhttp_add_header(h, "Cache-Control", "no-store"));
    AZ(evhttp_add_header(h, "X-Content-Type-Options", "nosniff"));
    evhttp_send_reply(r, code, reason, body);
}

static void
route(struct evhttp_request *r, void *priv)
{
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(r);
    enum evhttp_cmd_type cmd = evhttp_request_get_command(r);
    const char *path = uri != NULL ? evhttp_uri_get_path(uri) : NULL;
    struct evbuffer *body = evbuffer_new();

    AN(body);
    STAT_INC(mon_req);
    if (cmd != EVHTTP_REQ_GET && cmd != EVHTTP_REQ_HEAD) {
        STAT_INC(mon_req_bad);
        AZ(evhttp_add_header(evhttp_request_get_output_headers(r), "Allow", "GET, HEAD"));
        evbuffer_add_printf(body, "405 method not allowed: GET or HEAD\n");
        reply(r, 405, "Method Not Allowed", "text/plain; charset=utf-8", body);
    } else if (path != NULL && strcmp(path, "/metrics") == 0) {
        mon__metrics(body);
        reply(r, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", body);
    } else if (path != NULL && strcmp(path, "/health") == 0) {
        /* For a load balancer's check: 503 from SIGTERM on, so it moves traffic away first. */
        bool draining = sess_draining();
        evbuffer_add_printf(body, "%s\n", draining ? "draining" : "ok");
        reply(r, draining ? 503 : 200, draining ? "Service Unavailable" : "OK",
              "text/plain; charset=utf-8", body);
    } else if (path != NULL && strcmp(path, "/status.json") == 0) {
        mon__status_json(body);
        reply(r, 200, "OK", "application/json", body);
    } else if (path != NULL &&
               (strcmp(path, "/") == 0 || (*path == '\0' && evhttp_uri_get_scheme(uri) != NULL))) {
        /* "GET http://host HTTP/1.1" has an empty path; "GET //x" is no way to ask for the page. */
        evbuffer_add_reference(body, mon_page_html, sizeof mon_page_html - 1, NULL, NULL);
        reply(r, 200, "OK", "text/html; charset=utf-8", body);
    } else {
        STAT_INC(mon_req_bad);
        evbuffer_add_printf(body, "404 not found: try /, /metrics, /status.json or /health\n");
        reply(r, 404, "Not Found", "text/plain; charset=utf-8", body);
    }
    evbuffer_free(body);
}

static void *
mon_thread(void *priv)
{
    stat_thread_enter();
    (void)event_base_dispatch(base);
    stat_thread_leave();
    return (NULL);
}

/* "HOST:PORT", "[V6]:PORT" or ":PORT" (every IPv4 interface) into host and port. */
static int
split_addr(const char *addr, char *host, size_t hsz, unsigned *port)
{
    const char *colon;
    size_t hl;

    if (addr[0] == '[') {
        colon = strstr(addr, "]:");
        if (colon == NULL)
            return (-1);
        hl = (size_t)(colon - addr) - 1;
        memcpy(host, addr + 1, SRG_MIN(hl, hsz - 1));
        colon++;
    } else {
        colon = strrchr(addr, ':');
        if (colon == NULL)
            return (-1);
        hl = (size_t)(colon - addr);
        memcpy(host, addr, SRG_MIN(hl, hsz - 1));
    }
    if (hl >= hsz || num_port(colon + 1, port) != 0)
        return (-1);
    host[hl] = '\0';
    if (hl == 0)
        snprintf(host, hsz, "0.0.0.0");
    return (0);
}

int
mon_init(const char *addr, struct sb *err)
{
    static const struct timeval one_sec = { 1, 0 };
    sigset_t all, old;
    char host[256];
    unsigned port;
    int e;

    AN(addr);
    SRG_ASSERT(!running && base == NULL);
    if (split_addr(addr, host, sizeof host, &port) != 0) {
        sb_printf(err, "admin_http %s: expected HOST:PORT, [IPV6]:PORT or :PORT", addr);
        return (-1);
    }
    base = event_base_new();
    AN(base);
    http = evhttp_new(base);
    AN(http);
    /* Every method reaches route(), which answers 405 with Allow rather than evhttp's bare 405. */
    evhttp_set_allowed_methods(http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD | EVHTTP_REQ_POST |
                                         EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS |
                                         EVHTTP_REQ_TRACE | EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
    evhttp_set_max_headers_size(http, MON_HDR_MAX);
    evhttp_set_max_body_size(http, MON_BODY_MAX);
    evhttp_set_timeout(http, MON_TIMEOUT);
    evhttp_set_gencb(http, route, NULL);
    errno = 0;
    if (evhttp_bind_socket_with_handle(http, host, (uint16_t)port) == NULL) {
        sb_printf(err, "admin_http %s: cannot listen: %s", addr,
                  errno != 0 ? strerror(errno) : "bad address");
        mon_fini();
        return (-1);
    }
    wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    AN(wake_fd >= 0);
    wake_ev = event_new(base, wake_fd, EV_READ | EV_PERSIST, on_wake, NULL);
    AN(wake_ev);
    AZ(event_add(wake_ev, NULL));
    tick_ev = event_new(base, -1, EV_PERSIST, on_tick, NULL);
    AN(tick_ev);
    AZ(event_add(tick_ev, &one_sec));
    mon__t_start = tim_real();
    sample();
    /* Signals belong to the main thread: start ours with all of them blocked. */
    AZ(sigfillset(&all));
    AZ(pthread_sigmask(SIG_SETMASK, &all, &old));
    e = pthread_create(&mon_thr, NULL, mon_thread, NULL);
    AZ(pthread_sigmask(SIG_SETMASK, &old, NULL));
    if (e != 0) {
        sb_printf(err, "admin_http thread: %s", strerror(e));
        mon_fini();
        return (-1);
    }
    running = true;
    log_msg(LOG_INFO, "admin_http: listening on %s (/metrics, /status.json, /health, /)", addr);
    return (0);
}

void
mon_fini(void)
{
    uint64_t one = 1;

    if (running) {
        AN(write(wake_fd, &one, sizeof one) == sizeof one);
        AZ(pthread_join(mon_thr, NULL));
        running = false;
    }
    if (http != NULL)
        evhttp_free(http);
    http = NULL;
    if (tick_ev != NULL)
        event_free(tick_ev);
    tick_ev = NULL;
    if (wake_ev != NULL)
        event_free(wake_ev);
    wake_ev = NULL;
    if (wake_fd >= 0)
        (void)close(wake_fd);
    wake_fd = -1;
    if (base != NULL)
        event_base_free(base);
    base = NULL;
    ring_n = 0;
    mon__top_clear();
    mon__big_fini();
}
