/*
 * req: the request core without sockets.  Requests are built in a
 * worker's workspace, as a transport builds them, and answered through a
 * memory transport that records the head, the body and the end -- and
 * that can park a request (take its memory off the worker, as HTTP/1
 * does) and resume it on a pool worker.  No backend is configured: what
 * needs one answers 503, and the answers tested come from the core's own
 * checks, the cache, and PURGE.
 *
 * Covered: the checks req_serve() makes before the steps (a bad Host is
 * 400, TRACE 405 unless allowed and then without credentials, the
 * unkeyed fields removed unless trusted); PURGE refused outside
 * purge_acl and done inside it; the outcome names both ways for every
 * row of tbl/outcomes.h; req_cache_key()'s Host normalisation; the steps
 * a request goes through, as a policy script sees them (each hook notes
 * its name in a request field), for every way through the table of
 * steps, and the restarts a hook asks for: back to recv with its edits,
 * and bounded by max_restarts whether hit, deliver or the synth hook
 * asks; and the waiting-list handshake of req_park.c: a request
 * coalesced on a busy object parks without its worker and a wake-up runs
 * it on through the pool, whether the wake-up comes after it let go or
 * while it was letting go, whether the fetch published, failed (the
 * woken request fetches itself) or never ended (coalesce_timeout: a
 * pass); many parked on one object cost no thread each; a request whose
 * policy state cannot be carried waits on its worker and is woken there;
 * a fetch detached from its request (a background refresh's) whose
 * backend hooks run after the request is gone and its program replaced.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "unit.h"
#include "cache_fixture.h"
#include "surogat/cc.h"
#include "surogat/fetch.h"
#include "surogat/http.h"
#include "surogat/pol.h"
#include "surogat/pool.h"
#include "surogat/req.h"
#include "surogat/sess.h"
#include "surogat/tim.h"
#include "surogat/tp.h"
#include "surogat/wrk.h"
#include "surogat/ws.h"

#include "src/req/req_priv.h"

/* Longest a test waits for another thread (a test that went wrong). */
#define WAIT_S 5.0

/* ---- the memory transport ---- */

/* What it saw, written by whichever thread runs the request: under mtx. */
static pthread_mutex_t mtx = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static struct {
    unsigned status;
    char fields[4096];
    char body[4096];
    size_t blen;
    unsigned heads, ends, aborts;
    unsigned parks, resumes, drops, done;
    enum req_park in_park;   /* the request's park state when park() returned */
    pthread_t resume_thread; /* where it ran on */
    struct wrk *resume_wrk;
    enum req_outcome outcome; /* when it was done */
} seen;

/* A request and what its transport keeps of it, all in the workspace. */
struct treq {
    struct req req;
    struct wrk_mem mem; /* its memory while parked */
    struct http_hdr hdrs[32];
};

/* Called by park() after the request let go of its memory: a wake-up at that moment. */
static void (*park_hook)(struct req *req);
/* The request the thread that ends the fetch watches, for uncarried_state_waits_on_thread. */
static struct req *volatile waiting;
static bool saw_on_thread;        /* the fetch ended while the request waited on its worker */
static bool gate_open, gate_held; /* under mtx: dropped_when_pool_stops's gate task */

static int
mem_head(struct req *req, const struct tp_head *h)
{
    struct sb sb;

    AZ(pthread_mutex_lock(&mtx));
    seen.heads++;
    seen.status = h->status;
    sb_init(&sb, seen.fields, sizeof seen.fields);
    for (unsigned i = 0; i < h->nblock; i++)
        sb_bcat(&sb, h->block[i].b, h->block[i].len);
    AN(sb_ok(&sb));
    AZ(pthread_mutex_unlock(&mtx));
    req->status = h->status;
    return (0);
}

static int
mem_body(struct req *req, struct iovec *iov, int n)
{
    AZ(pthread_mutex_lock(&mtx));
    for (int i = 0; i < n; i++) {
        SRG_ASSERT(seen.blen + iov[i].iov_len < sizeof seen.body);
        memcpy(seen.body + seen.blen, iov[i].iov_base, iov[i].iov_len);
        seen.blen += iov[i].iov_len;
        req->resp_bytes += iov[i].iov_len;
    }
    seen.body[seen.blen] = '\0';
    AZ(pthread_mutex_unlock(&mtx));
    return (0);
}

static int
mem_file(struct req *req, int fd, off_t off, size_t len)
{
    SRG_WRONG("no files here");
}

static int
mem_end(struct req *req)
{
    AZ(pthread_mutex_lock(&mtx));
    seen.ends++;
    AZ(pthread_mutex_unlock(&mtx));
    return (0);
}

static bool
mem_abort(struct req *req)
{
    AZ(pthread_mutex_lock(&mtx));
    seen.aborts++;
    AZ(pthread_mutex_unlock(&mtx));
    req->abort = true;
    return (true);
}

static bool
mem_writable(struct req *req)
{
    return (true);
}

static ssize_t
mem_body_next(struct req *req, const char **data)
{
    return (0);
}

/* As HTTP/1's: the request keeps the workspace it was built in, the worker gets a new one. */
static void
mem_park(struct req *req, bool brief)
{
    struct treq *t = req->tp_priv;

    OBJ_CHECK(req->wrk, WRK_MAGIC);
    wrk_mem_take(req->wrk, &t->mem, 0, brief);
    req->ws = &t->mem.ws;
    req->wrk = NULL;
    AZ(pthread_mutex_lock(&mtx));
    seen.parks++;
    AZ(pthread_mutex_unlock(&mtx));
    if (park_hook != NULL)
        park_hook(req);
    AZ(pthread_mutex_lock(&mtx));
    seen.in_park = __atomic_load_n(&req->st->park, __ATOMIC_ACQUIRE);
    AZ(pthread_mutex_unlock(&mtx));
}

static void
mem_resume(struct wrk *wrk, struct req *req)
{
    struct treq *t = req->tp_priv;
    enum req_run r;

    OBJ_CHECK(wrk, WRK_MAGIC);
    wrk_buffers_fit(wrk);
    wrk_mem_give(wrk, &t->mem);
    req->wrk = wrk;
    req->ws = &wrk->ws;
    AZ(pthread_mutex_lock(&mtx));
    seen.resumes++;
    seen.resume_thread = pthread_self();
    seen.resume_wrk = wrk;
    AZ(pthread_mutex_unlock(&mtx));
    r = req_resume(req);
    AZ(pthread_mutex_lock(&mtx));
    if (r == REQ_RUN_DONE) {
        seen.done++;
        seen.outcome = req->outcome;
    }
    AZ(pthread_cond_broadcast(&cv));
    AZ(pthread_mutex_unlock(&mtx));
}

static void
mem_drop(struct req *req)
{
    struct treq *t = req->tp_priv;

    AZ(pthread_mutex_lock(&mtx));
    seen.drops++;
    AZ(pthread_mutex_unlock(&mtx));
    wrk_mem_free(&t->mem);
}

static const struct tp_ops mem_ops = {
    .name = "memory",
    .head = mem_head,
    .body = mem_body,
    .file = mem_file,
    .end = mem_end,
    .abort = mem_abort,
    .writable = mem_writable,
    .body_next = mem_body_next,
    .park = mem_park,
    .resume = mem_resume,
    .drop = mem_drop,
};

/* ---- the worker, the session, the requests ---- */

static struct wrk w0; /* the test's thread, as the worker a transport runs on */
static struct sess sess;
static bool pool_up;
static char polpath[64];

static void
setup(void)
{
    cache_setup();
    memset(&seen, 0, sizeof seen);
    park_hook = NULL;
    pool_up = false;
    gate_open = gate_held = false;
    waiting = NULL;
    saw_on_thread = false;
    polpath[0] = '\0';
    memset(&w0, 0, sizeof w0);
    w0.magic = WRK_MAGIC;
    wrk_buffers_fit(&w0);
    memset(&sess, 0, sizeof sess);
    sess.magic = SESS_MAGIC;
    sess.fd = -1;
    snprintf(sess.client_ip, sizeof sess.client_ip, "%s", "192.0.2.1");
}

static void
teardown(void)
{
    if (pool_up)
        pool_fini();
    pol_wrk_fini(&w0);
    pol_fini();
    if (polpath[0] != '\0')
        unlink(polpath);
    wrk_buffers_free(&w0);
    req_purge_fini();
    cache_teardown();
}

/* A copy of s in the request's workspace, as the parser leaves it in the receive buffer. */
static struct txt
wtxt(const char *s)
{
    char *p = ws_strndup(&w0.ws, s, strlen(s));

    AN(p);
    return ((struct txt){ p, strlen(s) });
}

/*
 * A request read by the memory transport on the test's worker, from its
 * session: method, URL, then "Name", "value" pairs, NULL-ended.  The
 * workspace starts afresh, as for each request of a session.
 */
static struct req *
mkreq(const char *method, const char *url, ...)
{
    struct treq *t;
    struct req *req;
    const char *n, *v;
    va_list ap;

    ws_reset(&w0.ws);
    t = ws_alloc(&w0.ws, sizeof *t);
    AN(t);
    memset(t, 0, sizeof *t);
    req = &t->req;
    OBJ_INIT(req, REQ_MAGIC);
    req->wrk = &w0;
    req->ws = &w0.ws;
    req->sp = &sess;
    req->tp = &mem_ops;
    req->tp_priv = t;
    http_init(req->http, t->hdrs, ARRAY_LEN(t->hdrs));
    req->http->method = wtxt(method);
    req->http->url = wtxt(url);
    req->http->proto = 11;
    va_start(ap, url);
    while ((n = va_arg(ap, const char *)) != NULL) {
        v = va_arg(ap, const char *);
        AZ(http_add(req->http, wtxt(n), wtxt(v)));
    }
    va_end(ap);
    return (req);
}

/* ---- cached objects ---- */

static const char key[] = "example.com\0/p";
#define KEYLEN (sizeof key - 1)

static bool
has_field(const struct req *req, const char *name)
{
    return (http_find(req->http, name) != NULL);
}

/* The value of the request field name, NUL-terminated in buf ("" when absent). */
static const char *
field(const struct req *req, const char *name, char *buf, size_t size)
{
    const struct http_hdr *h = http_find(req->http, name);

    snprintf(buf, size, "%.*s", h != NULL ? (int)h->val.len : 0, h != NULL ? h->val.b : "");
    return (buf);
}

/* Load the policy script src as the current program, from a temporary file. */
static void
load_policy(const char *src)
{
    char ebuf[256];
    struct sb err;
    FILE *f;
    int fd;

    snprintf(polpath, sizeof polpath, "/tmp/test_req_XXXXXX");
    fd = mkstemp(polpath);
    ck_assert_int_ge(fd, 0);
    f = fdopen(fd, "w");
    AN(f);
    fputs(src, f);
    fclose(f);
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_msg(pol_load(polpath, &err) == 0, "%s", ebuf);
}

/* ---- the checks before the steps ---- */

/* A Host that is not a host: 400 and close, before anything else runs. */
START_TEST(bad_host_is_400)
{
    static const char *const bad[] = { "exa mple.com", "a..b", "[::1", "x/y", "" };
    struct req *req;

    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        memset(&seen, 0, sizeof seen);
        req = mkreq("GET", "/p", "Host", bad[i], NULL);
        ck_assert_int_eq(req_serve(req), REQ_RUN_DONE);
        ck_assert_msg(seen.status == 400, "Host '%s': %u", bad[i], seen.status);
        ck_assert(req->close);
        ck_assert_uint_eq(seen.ends, 1);
        ck_assert_int_eq(req->outcome, REQ_O_SYNTH);
    }
    /* HTTP/1.0 may send an empty one: then it goes on (to no backend: 503). */
    memset(&seen, 0, sizeof seen);
    req = mkreq("GET", "/p", "Host", "", NULL);
    req->http->proto = 10;
    ck_assert_int_eq(req_serve(req), REQ_RUN_DONE);
    ck_assert_uint_eq(seen.status, 503);
}
END_TEST

/* TRACE: 405 with Allow and close; allowed, it goes on without the credentials. */
START_TEST(trace_is_405)
{
    struct req *req;

    req = mkreq("TRACE", "/p", "Host", "example.com", "Cookie", "s=1", NULL);
    ck_assert_int_eq(req_serve(req), REQ_RUN_DONE);
    ck_assert_uint_eq(seen.status, 405);
    ck_assert_ptr_nonnull(
        strstr(seen.fields, "Allow: GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS\r\n"));
    ck_assert(req->close);
    par.allow_trace = true;
    memset(&seen, 0, sizeof seen);
    req = mkreq("TRACE", "/p", "Host", "example.com", "Cookie", "s=1", "Authorization",
                "Basic eDp5", "Proxy-Authorization", "Basic eDp5", "X-Kept", "1", NULL);
    ck_assert_int_eq(req_serve(req), REQ_RUN_DONE);
    ck_assert_uint_eq(seen.status, 503); /* passed, to no backend */
    ck_assert(!has_field(req, "Cookie"));
    ck_assert(!has_field(req, "Authorization"));
    ck_assert(!has_field(req, "Proxy-Authorization"));
    ck_assert(has_field(req, "X-Kept"));
    ck_assert(has_field(req, "Host"));
}
END_TEST

/*
 * The fields the cache key does not include that applications build
 * links from are gone before the lookup (here a hit), unless
 * trusted_client_headers names them; the others stay, in order.
 */
START_TEST(unkeyed_fields_stripped)
{
    struct cobj *oc = cache_busy(key, KEYLEN);
    uint64_t stripped = stat_get(STAT_client_hdr_stripped);
    struct req *req;

    cache_publish(&oc, "cached");
    req = mkreq("GET", "/p", "Host", "example.com", "X-Forwarded-Host", "evil.example", "Forwarded",
                "host=evil.example", "X-Original-URL", "/admin", "X-Custom", "1",
                "X-HTTP-Method-Override", "DELETE", "Accept", "*/*", NULL);
    ck_assert_int_eq(req_serve(req), REQ_RUN_DONE);
    ck_assert_uint_eq(seen.status, 200);
    ck_assert_str_eq(seen.body, "cached");
    ck_assert_int_eq(req->outcome, REQ_O_HIT);
    ck_assert_uint_eq(req->http->nhdr, 3);
    ck_assert(http_name_eq(&req->http->hdr[0].name, "Host"));
    ck_assert(http_name_eq(&req->http->hdr[1].name, "X-Custom"));
    ck_assert(http_name_eq(&req->http->hdr[2].name, "Accept"));
    ck_assert_uint_eq(stat_get(STAT_client_hdr_stripped) - stripped, 4);
    /* A proxy in front sets X-Forwarded-Host itself: kept. */
    AZ(par_set("trusted_client_headers", "X-Forwarded-Host, forwarded", NULL));
    memset(&seen, 0, sizeof seen);
    req = mkreq("GET", "/p", "Host", "example.com", "X-Forwarded-Host", "front.example",
                "Forwarded", "host=front.example", "X-Forwarded-Port", "8443", NULL);
    ck_assert_int_eq(req_serve(req), REQ_RUN_DONE);
    ck_assert_uint_eq(seen.status, 200);
    ck_assert(has_field(req, "X-Forwarded-Host"));
    ck_assert(has_field(req, "Forwarded"));
    ck_assert(!has_field(req, "X-Forwarded-Port"));
}
END_TEST

/* PURGE: 403 outside purge_acl, the object stays; inside it, it goes. */
START_TEST(purge_needs_the_acl)
{
    struct cobj *oc = cache_busy(key, KEYLEN);
    uint64_t denied = stat_get(STAT_purge_denied);
    struct hsh_stale stale;
    struct req *req;

    cache_publish(&oc, "cached");
    req = mkreq("PURGE", "/p", "Host", "example.com", NULL);
    ck_assert_int_eq(req_serve(req), REQ_RUN_DONE);
    ck_assert_uint_eq(seen.status, 403);
    ck_assert_uint_eq(stat_get(STAT_purge_denied) - denied, 1);
    ck_assert_int_eq(cache_lookup(key, KEYLEN, &oc, &stale), HSH_HIT);
    hsh_deref(&oc);
    /* From an address purge_acl allows (127.0.0.1 by default). */
    snprintf(sess.client_ip, sizeof sess.client_ip, "%s", "127.0.0.1");
    memset(&seen, 0, sizeof seen);
    req = mkreq("PURGE", "/p", "Host", "Example.com", NULL);
    ck_assert_int_eq(req_serve(req), REQ_RUN_DONE);
    ck_assert_uint_eq(seen.status, 200);
    ck_assert_ptr_nonnull(strstr(seen.body, "Purged 1 object."));
    ck_assert_int_eq(cache_lookup(key, KEYLEN, &oc, &stale), HSH_MISS);
    hsh_abandon(&oc, 0);
    /* And the ACL follows the parameter: now nobody. */
    AZ(par_set("purge_acl", "10.0.0.0/8", NULL));
    memset(&seen, 0, sizeof seen);
    req = mkreq("PURGE", "/p", "Host", "example.com", NULL);
    ck_assert_int_eq(req_serve(req), REQ_RUN_DONE);
    ck_assert_uint_eq(seen.status, 403);
}
END_TEST

/* ---- names and keys ---- */

/* Every outcome's name parses back to it, in any case; nothing else parses. */
START_TEST(outcome_names_round_trip)
{
    static const struct {
        enum req_outcome o;
        const char *name;
    } rows[] = {
#define OUTCOME(name, doc) { REQ_O_##name, #name },
#include "surogat/tbl/outcomes.h"
    };
    char lower[32];

    ck_assert_uint_eq(ARRAY_LEN(rows), REQ_O__N);
    for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
        const char *n = req_outcome_name(rows[i].o);
        size_t len = strlen(rows[i].name);

        if (rows[i].o == REQ_O_NONE) {
            ck_assert_str_eq(n, "-");
            ck_assert_int_eq(req_outcome_parse("-", 1), REQ_O__N);
            ck_assert_int_eq(req_outcome_parse("NONE", 4), REQ_O__N);
            continue;
        }
        ck_assert_str_eq(n, rows[i].name);
        ck_assert_int_eq(req_outcome_parse(n, strlen(n)), rows[i].o);
        for (size_t k = 0; k <= len; k++)
            lower[k] = (char)(rows[i].name[k] | (k < len ? 0x20 : 0));
        ck_assert_int_eq(req_outcome_parse(lower, len), rows[i].o);
        /* A prefix or a longer name is not it. */
        ck_assert_int_eq(req_outcome_parse(n, len - 1), REQ_O__N);
        snprintf(lower, sizeof lower, "%sX", rows[i].name);
        ck_assert_int_eq(req_outcome_parse(lower, len + 1), REQ_O__N);
    }
    ck_assert_int_eq(req_outcome_parse("", 0), REQ_O__N);
    ck_assert_int_eq(req_outcome_parse("HITS", 4), REQ_O__N);
    ck_assert_str_eq(req_outcome_name(REQ_O_MISS), "MISS");
}
END_TEST

/*
 * The cache key: the Host lower-cased, without a trailing dot or the
 * scheme's default port, a NUL, then the request-target as sent.
 */
START_TEST(cache_key_normalises_host)
{
    static const struct {
        const char *host; /* NULL: no Host field */
        bool tls;
        const char *url;
        const char *want; /* '|' for the NUL */
    } v[] = {
        { "example.com", false, "/p", "example.com|/p" },
        { "Example.COM.", false, "/p", "example.com|/p" },
        { "EXAMPLE.com:80", false, "/p?q=A", "example.com|/p?q=A" },
        { "example.com:", false, "/p", "example.com|/p" },
        { "example.com:8080", false, "/p", "example.com:8080|/p" },
        { "example.com:443", false, "/p", "example.com:443|/p" },
        { "example.com:443", true, "/p", "example.com|/p" },
        { "example.com:80", true, "/p", "example.com:80|/p" },
        { "[::1]:80", false, "/p", "[::1]|/p" },
        { "", false, "/p", "|/p" },
        { NULL, false, "/a/../b%41", "|/a/../b%41" },
    };
    struct req *req;
    char want[64], *k;
    size_t len;

    for (size_t i = 0; i < ARRAY_LEN(v); i++) {
        if (v[i].host != NULL)
            req = mkreq("GET", v[i].url, "Host", v[i].host, NULL);
        else
            req = mkreq("GET", v[i].url, NULL);
        sess.tls_front = v[i].tls;
        k = req_cache_key(req, &len);
        ck_assert_ptr_nonnull(k);
        snprintf(want, sizeof want, "%s", v[i].want);
        *strchr(want, '|') = '\0';
        ck_assert_msg(len == strlen(v[i].want) && memcmp(k, want, len) == 0,
                      "Host '%s' tls %d: key '%.*s' (%zu)", v[i].host ? v[i].host : "(none)",
                      v[i].tls, (int)len, k, len);
    }
    sess.tls_front = false;
    /* A full workspace: NULL, not a crash. */
    req = mkreq("GET", "/p", "Host", "example.com", NULL);
    (void)ws_alloc(req->ws, ws_free_bytes(req->ws));
    ck_assert_ptr_null(req_cache_key(req, &len));
}
END_TEST

/* ---- the steps ---- */

/*
 * Every hook notes its name in req.ctx, kept across restarts, and in the
 * request field X-Trail, which the test reads after the request: the
 * steps the request went through, in order.  Request fields steer the
 * hooks.  No backend is declared: a fetch answers 503.
 */
static const char trail_src[] =
    "local function note(req, what)\n"
    "  req.ctx.trail = (req.ctx.trail or '') .. what .. ' '\n"
    "  req.http['X-Trail'] = req.ctx.trail\n"
    "end\n"
    "function recv(req)\n"
    "  note(req, 'recv')\n"
    "  if req.url == '/synth' then return surogat.synth(418, 'Short and stout') end\n"
    "end\n"
    "function hash(req) note(req, 'hash') end\n"
    "function hit(req, obj)\n"
    "  note(req, 'hit')\n"
    "  local how = req.http['X-Hit']\n"
    "  if how == 'restart' then return 'restart' end\n"
    "  if how == 'pass' then return 'pass' end\n"
    "  if how == 'elsewhere' and req.restarts == 0 then\n"
    "    req.url = '/q'\n"
    "    return 'restart'\n"
    "  end\n"
    "end\n"
    "function miss(req) note(req, 'miss') end\n"
    "function pass(req) note(req, 'pass') end\n"
    "function deliver(req, resp)\n"
    "  note(req, 'deliver')\n"
    "  local how = req.http['X-Deliver']\n"
    "  if how == 'synth' then return surogat.synth(451, 'Gone dark') end\n"
    "  if how == 'restart' then return 'restart' end\n"
    "  resp.http['X-Restarts'] = tostring(req.restarts)\n"
    "end\n"
    "function synth(req, resp)\n"
    "  note(req, 'synth')\n"
    "  if req.http['X-Synth'] == 'restart' then return 'restart' end\n"
    "  resp.http['X-Synth-Hook'] = '1'\n"
    "end\n";

static const char key_q[] = "example.com\0/q";

/* /p and /q cached, the trail policy loaded. */
static void
trail_setup(void)
{
    struct cobj *oc;

    oc = cache_busy(key, KEYLEN);
    cache_publish(&oc, "cached p");
    oc = cache_busy(key_q, sizeof key_q - 1);
    cache_publish(&oc, "cached q");
    load_policy(trail_src);
}

/* Whether a lookup of k now finds nothing and nobody fetching it. */
static bool
nothing_cached(const char *k, size_t klen)
{
    struct hsh_stale stale;
    struct cobj *oc;
    enum hsh_result r = cache_lookup(k, klen, &oc, &stale);

    if (stale.oc != NULL)
        hsh_deref(&stale.oc);
    if (r == HSH_MISS)
        hsh_abandon(&oc, 0);
    else if (r == HSH_HIT || r == HSH_STREAM)
        hsh_deref(&oc);
    return (r == HSH_MISS);
}

/*
 * Each way through the table of steps, the hooks it runs and where it
 * ends: a hit delivered; a hit whose hook edits the URL and restarts,
 * looked up anew (the other object, one restart); a miss, which fetches
 * (no backend: 503) and gives its busy object up; a method that passes;
 * a hit the hook turns into a pass; recv's synthetic answer through the
 * synth hook; deliver's, likewise; only-if-cached with nothing cached
 * (504, no miss hook, no fetch).  An error page is an answer surogat
 * made itself (SYNTH) whatever the path; the counters say which it was.
 */
START_TEST(steps_as_the_hooks_say)
{
    static const struct {
        const char *method, *url, *n, *v; /* n: a field to send, or NULL */
        unsigned status;
        const char *trail;
        enum req_outcome outcome;
        unsigned restarts;
        const char *body;              /* NULL: not checked */
        const char *field;             /* in the response head, or NULL */
        unsigned hits, misses, passes; /* counted: cache_hit, cache_miss, cache_pass */
    } v[] = {
        { "GET", "/p", NULL, NULL, 200, "recv hash hit deliver ", REQ_O_HIT, 0, "cached p",
          "X-Restarts: 0\r\n", 1, 0, 0 },
        { "GET", "/p", "X-Hit", "elsewhere", 200, "recv hash hit recv hash hit deliver ", REQ_O_HIT,
          1, "cached q", "X-Restarts: 1\r\n", 1, 0, 0 },
        { "GET", "/m", NULL, NULL, 503, "recv hash miss ", REQ_O_SYNTH, 0, NULL, NULL, 0, 1, 0 },
        { "POST", "/p", NULL, NULL, 503, "recv pass ", REQ_O_SYNTH, 0, NULL, NULL, 0, 0, 1 },
        { "GET", "/p", "X-Hit", "pass", 503, "recv hash hit pass ", REQ_O_SYNTH, 0, NULL, NULL, 0,
          0, 1 },
        { "GET", "/synth", NULL, NULL, 418, "recv synth ", REQ_O_SYNTH, 0, NULL,
          "X-Synth-Hook: 1\r\n", 0, 0, 0 },
        { "GET", "/p", "X-Deliver", "synth", 451, "recv hash hit deliver synth ", REQ_O_SYNTH, 0,
          NULL, "X-Synth-Hook: 1\r\n", 1, 0, 0 },
        { "GET", "/m", "Cache-Control", "only-if-cached", 504, "recv hash ", REQ_O_SYNTH, 0, NULL,
          NULL, 0, 1, 0 },
    };
    uint64_t hits, misses, passes;
    char buf[256];
    struct req *req;

    trail_setup();
    for (size_t i = 0; i < ARRAY_LEN(v); i++) {
        hits = stat_get(STAT_cache_hit);
        misses = stat_get(STAT_cache_miss);
        passes = stat_get(STAT_cache_pass);
        memset(&seen, 0, sizeof seen);
        req = mkreq(v[i].method, v[i].url, "Host", "example.com", v[i].n, v[i].v, NULL);
        ck_assert_int_eq(req_serve(req), REQ_RUN_DONE);
        ck_assert_msg(seen.status == v[i].status, "#%zu: status %u", i, seen.status);
        ck_assert_msg(strcmp(field(req, "X-Trail", buf, sizeof buf), v[i].trail) == 0,
                      "#%zu: trail '%s'", i, buf);
        ck_assert_msg(req->outcome == v[i].outcome, "#%zu: outcome %s", i,
                      req_outcome_name(req->outcome));
        ck_assert_uint_eq(req->restarts, v[i].restarts);
        ck_assert_int_eq(req->st->step, REQ_S_DONE);
        ck_assert_uint_eq(seen.heads, 1);
        ck_assert_uint_eq(seen.ends, 1);
        if (v[i].body != NULL)
            ck_assert_str_eq(seen.body, v[i].body);
        if (v[i].field != NULL)
            ck_assert_msg(strstr(seen.fields, v[i].field) != NULL, "#%zu: no %s in %s", i,
                          v[i].field, seen.fields);
        ck_assert_msg(stat_get(STAT_cache_hit) - hits == v[i].hits &&
                          stat_get(STAT_cache_miss) - misses == v[i].misses &&
                          stat_get(STAT_cache_pass) - passes == v[i].passes,
                      "#%zu: hits %u misses %u passes %u", i,
                      (unsigned)(stat_get(STAT_cache_hit) - hits),
                      (unsigned)(stat_get(STAT_cache_miss) - misses),
                      (unsigned)(stat_get(STAT_cache_pass) - passes));
    }
    /* The miss gave its busy object up with its failed fetch: nobody waits on it. */
    ck_assert(nothing_cached("example.com\0/m", 14));
}
END_TEST

/*
 * "restart" from hit, deliver or the synth hook goes back to recv at
 * most max_restarts times; the one after is answered 503 (too many
 * restarts) without the synth hook, and counted restarts are the ones
 * done.
 */
START_TEST(restarts_bounded)
{
    static const struct {
        const char *url, *n;
        const char *round; /* the hooks of one round, as the trail shows them */
    } v[] = {
        { "/p", "X-Hit", "recv hash hit " },
        { "/p", "X-Deliver", "recv hash hit deliver " },
        { "/synth", "X-Synth", "recv synth " },
    };
    static const unsigned max[] = { 4, 1, 0 };
    char buf[512], want[512];
    uint64_t before;
    struct req *req;

    trail_setup();
    for (size_t i = 0; i < ARRAY_LEN(v); i++) {
        for (size_t k = 0; k < ARRAY_LEN(max); k++) {
            par.max_restarts = max[k];
            want[0] = '\0';
            for (unsigned r = 0; r <= max[k]; r++)
                strcat(want, v[i].round);
            before = stat_get(STAT_policy_restart);
            memset(&seen, 0, sizeof seen);
            req = mkreq("GET", v[i].url, "Host", "example.com", v[i].n, "restart", NULL);
            ck_assert_int_eq(req_serve(req), REQ_RUN_DONE);
            ck_assert_msg(seen.status == 503, "%s, max %u: %u", v[i].n, max[k], seen.status);
            ck_assert_ptr_nonnull(strstr(seen.body, "too many restarts"));
            ck_assert_msg(strcmp(field(req, "X-Trail", buf, sizeof buf), want) == 0,
                          "%s, max %u: trail '%s'", v[i].n, max[k], buf);
            ck_assert_uint_eq(req->restarts, max[k]);
            ck_assert_uint_eq(stat_get(STAT_policy_restart) - before, max[k]);
            ck_assert_ptr_null(strstr(seen.fields, "X-Synth-Hook"));
            ck_assert_uint_eq(seen.heads, 1);
        }
    }
}
END_TEST

/* ---- waiting lists ---- */

static void
start_pool(void)
{
    par.thread_pools = 1;
    par.thread_pool_min = 1;
    par.thread_pool_max = 2;
    ck_assert_int_eq(pool_init(), 0);
    pool_up = true;
}

/* Wait until the resumed request is done; how many are. */
static unsigned
wait_done(unsigned want)
{
    struct timespec ts;
    unsigned n;

    AZ(clock_gettime(CLOCK_REALTIME, &ts));
    ts.tv_sec += (time_t)WAIT_S;
    AZ(pthread_mutex_lock(&mtx));
    while (seen.done < want && pthread_cond_timedwait(&cv, &mtx, &ts) == 0)
        continue;
    n = seen.done;
    AZ(pthread_mutex_unlock(&mtx));
    return (n);
}

/* What a resumed request must have got: the object, from the cache, on a pool worker. */
static void
check_resumed(void)
{
    AZ(pthread_mutex_lock(&mtx));
    ck_assert_uint_eq(seen.parks, 1);
    ck_assert_uint_eq(seen.resumes, 1);
    ck_assert_uint_eq(seen.drops, 0);
    ck_assert_uint_eq(seen.heads, 1);
    ck_assert_uint_eq(seen.status, 200);
    ck_assert_str_eq(seen.body, "fetched");
    ck_assert_uint_eq(seen.ends, 1);
    ck_assert_int_eq(seen.outcome, REQ_O_HIT);
    ck_assert(!pthread_equal(seen.resume_thread, pthread_self()));
    ck_assert_ptr_ne(seen.resume_wrk, &w0);
    AZ(pthread_mutex_unlock(&mtx));
    ck_assert_uint_eq(hsh_parked(), 0);
}

/*
 * Someone is fetching the object: the request parks -- its transport
 * takes its memory, the worker is free (req_serve() says PARKED), the
 * waiter is on the object's list -- and nothing runs it until the fetch
 * ends; then the wake-up submits its resume task and a pool worker runs
 * it on from the lookup, to a hit.
 */
START_TEST(woken_after_parked)
{
    struct cobj *oc = cache_busy(key, KEYLEN);
    uint64_t coalesced = stat_get(STAT_cache_coalesced);
    struct req *req;
    char *block = w0.ws_block;

    start_pool();
    req = mkreq("GET", "/p", "Host", "example.com", NULL);
    ck_assert_int_eq(req_serve(req), REQ_RUN_PARKED);
    ck_assert_uint_eq(seen.parks, 1);
    ck_assert_int_eq(seen.in_park, REQ_P_PARKING); /* its worker still held it there */
    ck_assert_int_eq(__atomic_load_n(&req->st->park, __ATOMIC_ACQUIRE), REQ_P_PARKED);
    ck_assert_int_eq(req->st->step, REQ_S_LOOKUP);
    ck_assert_ptr_null(req->wrk);
    ck_assert_ptr_ne(w0.ws_block, block); /* the worker has new memory */
    ck_assert_ptr_eq(req->ws->s, block);  /* the request kept its own */
    ck_assert_uint_eq(hsh_parked(), 1);
    ck_assert_uint_eq(stat_get(STAT_cache_coalesced) - coalesced, 1);
    /* Nothing runs it while the fetch goes on. */
    usleep(50000);
    ck_assert_uint_eq(seen.resumes, 0);
    cache_publish(&oc, "fetched");
    ck_assert_uint_eq(wait_done(1), 1);
    check_resumed();
}
END_TEST

static struct cobj *hook_oc;

/* The fetch ends while the request's worker is still letting go of it. */
static void
publish_in_park(struct req *req)
{
    ck_assert_int_eq(__atomic_load_n(&req->st->park, __ATOMIC_ACQUIRE), REQ_P_PARKING);
    cache_publish(&hook_oc, "fetched");
}

/*
 * The wake-up comes before the worker has let go (between the lookup and
 * the end of park()): it only marks the request woken, and the worker,
 * finding that, hands it to the pool itself -- it runs once, on a pool
 * worker, not on the worker that was letting go.
 */
START_TEST(woken_while_parking)
{
    struct req *req;

    hook_oc = cache_busy(key, KEYLEN);
    park_hook = publish_in_park;
    start_pool();
    req = mkreq("GET", "/p", "Host", "example.com", NULL);
    ck_assert_int_eq(req_serve(req), REQ_RUN_PARKED);
    ck_assert_ptr_null(hook_oc);
    AZ(pthread_mutex_lock(&mtx));
    ck_assert_int_eq(seen.in_park, REQ_P_WOKEN);
    AZ(pthread_mutex_unlock(&mtx));
    ck_assert_uint_eq(wait_done(1), 1);
    check_resumed();
    /* Exactly once, whatever came late. */
    usleep(20000);
    ck_assert_uint_eq(wait_done(1), 1);
    AZ(pthread_mutex_lock(&mtx));
    ck_assert_uint_eq(seen.resumes, 1);
    AZ(pthread_mutex_unlock(&mtx));
}
END_TEST

/* A task that holds its worker until the test opens the gate. */

static void
gate_task(struct wrk *wrk, void *priv)
{
    struct timespec ts;

    AZ(clock_gettime(CLOCK_REALTIME, &ts));
    ts.tv_sec += (time_t)WAIT_S * 2;
    AZ(pthread_mutex_lock(&mtx));
    gate_held = true;
    AZ(pthread_cond_broadcast(&cv));
    while (!gate_open && pthread_cond_timedwait(&cv, &mtx, &ts) == 0)
        continue;
    AZ(pthread_mutex_unlock(&mtx));
}

static void
noop_task(struct wrk *wrk, void *priv)
{
}

static void *
stopper(void *priv)
{
    pool_fini();
    return (NULL);
}

/*
 * The pool is shutting down when the request is woken: it will never
 * run again, and its transport drops it (its memory and connection).
 */
START_TEST(dropped_when_pool_stops)
{
    static struct pool_task gate = { .func = gate_task }, probe[256];
    struct cobj *oc = cache_busy(key, KEYLEN);
    struct timespec ts;
    struct req *req;
    pthread_t t;
    unsigned i;

    start_pool();
    req = mkreq("GET", "/p", "Host", "example.com", NULL);
    ck_assert_int_eq(req_serve(req), REQ_RUN_PARKED);
    /* A task keeps pool_fini() waiting, with the pool refusing new work meanwhile. */
    ck_assert_int_eq(pool_submit(pool_pick(), &gate, POOL_PRIO_FETCH), 0);
    AZ(clock_gettime(CLOCK_REALTIME, &ts));
    ts.tv_sec += (time_t)WAIT_S;
    AZ(pthread_mutex_lock(&mtx));
    while (!gate_held && pthread_cond_timedwait(&cv, &mtx, &ts) == 0)
        continue;
    ck_assert(gate_held);
    AZ(pthread_mutex_unlock(&mtx));
    AZ(pthread_create(&t, NULL, stopper, NULL));
    pool_up = false;
    for (i = 0; i < ARRAY_LEN(probe); i++) {
        probe[i].func = noop_task;
        if (pool_submit(pool_pick(), &probe[i], POOL_PRIO_RESUME) != 0)
            break; /* shutting down: resumes are refused for no other reason */
        usleep(2000);
    }
    ck_assert_uint_lt(i, ARRAY_LEN(probe));
    cache_publish(&oc, "fetched");
    AZ(pthread_mutex_lock(&mtx));
    ck_assert_uint_eq(seen.parks, 1);
    ck_assert_uint_eq(seen.drops, 1);
    ck_assert_uint_eq(seen.resumes, 0);
    gate_open = true;
    AZ(pthread_cond_broadcast(&cv));
    AZ(pthread_mutex_unlock(&mtx));
    AZ(pthread_join(t, NULL));
    ck_assert_uint_eq(hsh_parked(), 0);
}
END_TEST

/*
 * The fetch fails (its busy object abandoned): the parked request is
 * woken all the same, looks up again, finds nothing and fetches itself --
 * here to no backend, a 503 -- on a pool worker; its own busy object goes
 * with its failed fetch.
 */
START_TEST(woken_by_a_failed_fetch)
{
    struct cobj *oc = cache_busy(key, KEYLEN);
    uint64_t misses = stat_get(STAT_cache_miss), passes = stat_get(STAT_cache_pass);
    struct req *req;

    start_pool();
    req = mkreq("GET", "/p", "Host", "example.com", NULL);
    ck_assert_int_eq(req_serve(req), REQ_RUN_PARKED);
    usleep(20000);
    AZ(pthread_mutex_lock(&mtx));
    ck_assert_uint_eq(seen.resumes, 0);
    AZ(pthread_mutex_unlock(&mtx));
    hsh_abandon(&oc, 0);
    ck_assert_uint_eq(wait_done(1), 1);
    ck_assert_uint_eq(stat_get(STAT_cache_miss) - misses, 1);
    ck_assert_uint_eq(stat_get(STAT_cache_pass) - passes, 0);
    AZ(pthread_mutex_lock(&mtx));
    ck_assert_uint_eq(seen.resumes, 1);
    ck_assert_uint_eq(seen.status, 503);
    ck_assert(!pthread_equal(seen.resume_thread, pthread_self()));
    AZ(pthread_mutex_unlock(&mtx));
    ck_assert_uint_eq(hsh_parked(), 0);
    ck_assert(nothing_cached(key, KEYLEN));
}
END_TEST

/*
 * A fetch that never ends: coalesce_timeout after it parked, the request
 * is woken by the index's sweeper and passes (no backend: 503), counted.
 */
START_TEST(coalesce_timeout_passes)
{
    struct cobj *oc = cache_busy(key, KEYLEN);
    uint64_t timeouts = stat_get(STAT_coalesce_timeout), passes = stat_get(STAT_cache_pass);
    struct req *req;
    double t0, waited;

    par.coalesce_timeout = 0.3;
    start_pool();
    req = mkreq("GET", "/p", "Host", "example.com", NULL);
    t0 = tim_mono();
    ck_assert_int_eq(req_serve(req), REQ_RUN_PARKED);
    ck_assert_uint_eq(wait_done(1), 1);
    waited = tim_mono() - t0;
    ck_assert_msg(waited >= 0.3, "woken after %.3f s", waited);
    AZ(pthread_mutex_lock(&mtx));
    ck_assert_uint_eq(seen.status, 503);
    AZ(pthread_mutex_unlock(&mtx));
    ck_assert_uint_eq(stat_get(STAT_coalesce_timeout) - timeouts, 1);
    ck_assert_uint_eq(stat_get(STAT_cache_pass) - passes, 1);
    ck_assert_uint_eq(hsh_parked(), 0);
    cache_publish(&oc, "late");
}
END_TEST

/*
 * Many requests for one object being fetched, with at most two workers:
 * every one parks (none holds a thread: the test's own thread took them
 * all in turn), and once the fetch ends every one is answered from the
 * cache by the pool, which never grew past its two.
 */
START_TEST(crowd_parks_without_threads)
{
    enum { N = 40 };
    struct cobj *oc = cache_busy(key, KEYLEN);
    struct req *req;

    start_pool();
    for (unsigned i = 0; i < N; i++) {
        req = mkreq("GET", "/p", "Host", "example.com", NULL);
        ck_assert_int_eq(req_serve(req), REQ_RUN_PARKED);
    }
    ck_assert_uint_eq(hsh_parked(), N);
    ck_assert_uint_eq(stat_get(STAT_coalesce_parked), N);
    ck_assert_uint_eq(seen.parks, N);
    ck_assert_uint_eq(seen.resumes, 0);
    cache_publish(&oc, "fetched");
    ck_assert_uint_eq(wait_done(N), N);
    AZ(pthread_mutex_lock(&mtx));
    ck_assert_uint_eq(seen.resumes, N);
    ck_assert_uint_eq(seen.heads, N);
    ck_assert_uint_eq(seen.ends, N);
    ck_assert_uint_eq(seen.drops, 0);
    ck_assert_uint_eq(seen.blen, N * strlen("fetched"));
    AZ(pthread_mutex_unlock(&mtx));
    ck_assert_uint_eq(hsh_parked(), 0);
    ck_assert_uint_le(stat_get(STAT_threads_created), par.thread_pool_max);
}
END_TEST

static void *
fetcher(void *priv)
{
    struct cobj *oc = priv;
    double end = tim_mono() + WAIT_S;
    struct req_state *st = NULL;

    stat_thread_enter();
    /* Until the request waits on its worker (or the test gives up). */
    while (tim_mono() < end) {
        if (st == NULL && waiting != NULL)
            st = __atomic_load_n(&waiting->st, __ATOMIC_ACQUIRE);
        if (st != NULL && __atomic_load_n(&st->park, __ATOMIC_ACQUIRE) == REQ_P_ON_THREAD) {
            saw_on_thread = true;
            break;
        }
        usleep(1000);
    }
    cache_publish(&oc, "fetched");
    stat_thread_leave();
    return (NULL);
}

/*
 * A request whose policy state cannot be carried to another worker (a
 * function in req.ctx) does not park: it waits on its worker, and the
 * wake-up lets it go on there, to a hit.
 */
START_TEST(uncarried_state_waits_on_thread)
{
    static const char src[] = "function recv(req)\n"
                              "  req.ctx.f = function() end\n"
                              "end\n";
    struct cobj *oc = cache_busy(key, KEYLEN);
    uint64_t on_thread = stat_get(STAT_coalesce_on_thread);
    struct req *req;
    pthread_t t;

    load_policy(src);
    req = mkreq("GET", "/p", "Host", "example.com", NULL);
    waiting = req;
    AZ(pthread_create(&t, NULL, fetcher, oc));
    ck_assert_int_eq(req_serve(req), REQ_RUN_DONE);
    AZ(pthread_join(t, NULL));
    ck_assert(saw_on_thread);
    ck_assert_uint_eq(seen.parks, 0);
    ck_assert_uint_eq(seen.status, 200);
    ck_assert_str_eq(seen.body, "fetched");
    ck_assert_int_eq(req->outcome, REQ_O_HIT);
    ck_assert_ptr_eq(req->wrk, &w0);
    ck_assert_int_eq(__atomic_load_n(&req->st->park, __ATOMIC_ACQUIRE), REQ_P_NONE);
    ck_assert_uint_eq(stat_get(STAT_coalesce_on_thread) - on_thread, 1);
    ck_assert_uint_eq(hsh_parked(), 0);
}
END_TEST

/* ---- a fetch detached from its request (a background refresh's) ---- */

/* What the script's backend_fetch wrote into x-seen of a backend request made from hp. */
static const char *
backend_fetch_sees(struct pol_bctx *bc, const struct http *hp, char *buf, size_t size)
{
    static struct http_hdr hh[40];
    const struct http_hdr *h;
    struct http bq;

    http_init(&bq, hh, ARRAY_LEN(hh));
    bq.method = hp->method;
    bq.url = hp->url;
    bq.proto = 11;
    for (unsigned i = 0; i < hp->nhdr; i++)
        AZ(http_add(&bq, hp->hdr[i].name, hp->hdr[i].val));
    ck_assert_int_eq(pol_backend_fetch(bc, &bq), POL_FETCH);
    h = http_find(&bq, "X-Seen");
    snprintf(buf, size, "%.*s", h != NULL ? (int)h->val.len : 0, h != NULL ? h->val.b : "");
    return (buf);
}

/*
 * A fetch started from a request and detached from it, as a background
 * refresh's (req__busyobj(), then pol_bctx_detach()): its backend hooks
 * run with no request at all -- the request's workspace reused by the
 * next one, its connection's facts changed, its program no longer the
 * current one and discarded -- and see what the request knew when the
 * fetch began: its head as recv left it, its client, the program it ran
 * under; and it is a transaction of its own (bereq.is_bgfetch, its xid).
 */
START_TEST(fetch_detached_from_its_request)
{
    static const char a[] = "function recv(req) req.http.x_recv = 'recv A' end\n"
                            "function backend_fetch(bereq)\n"
                            "  bereq.http.x_seen = table.concat({ tostring(client.ip),\n"
                            "    tostring(client.tls), tostring(bereq.is_bgfetch),\n"
                            "    tostring(bereq.http.x_recv), tostring(bereq.xid), 'A' }, ' ')\n"
                            "end\n";
    static const char b[] = "function backend_fetch(bereq)\n"
                            "  bereq.http.x_seen = tostring(client.ip) .. ' B'\n"
                            "end\n";
    static struct http_hdr ch[32];
    static char strings[1024];
    struct pol_bctx bc, now;
    struct busyobj bo;
    struct pol_synth syn;
    struct http copy;
    struct req *req;
    char buf[256], want[256];
    size_t n = 0;

    load_policy(a);
    req = mkreq("GET", "/p", "Host", "example.com", NULL);
    ck_assert_int_eq(pol_recv(req, &syn), POL_HASH);
    req__busyobj(req, &bo, &bc, NULL, NULL, NULL);
    ck_assert_ptr_eq(bo.pol, &bc);
    ck_assert_ptr_eq(bc.creq, req->http);
    ck_assert_uint_eq(bc.xid, req->pol_id);
    /* The request's own fetch: the request's xid, no refresh. */
    snprintf(want, sizeof want, "192.0.2.1 false false recv A %ju A", (uintmax_t)req->pol_id);
    ck_assert_str_eq(backend_fetch_sees(&bc, req->http, buf, sizeof buf), want);
    ck_assert_uint_ne(bc.hooks & (1u << 9), 0); /* POL_H_BACKEND_FETCH, for the request's log */
    pol_bctx_detach(&bc, req);
    ck_assert(bc.bg);
    ck_assert_uint_ne(bc.xid, req->pol_id);
    ck_assert_ptr_null(bc.wrk);
    /* The head as the refresh keeps it: a copy, out of the request's workspace. */
    http_init(&copy, ch, ARRAY_LEN(ch));
    copy.method = TXT_LIT("GET");
    copy.url = TXT_LIT("/p");
    copy.proto = 11;
    for (unsigned i = 0; i < req->http->nhdr; i++) {
        const struct http_hdr *h = &req->http->hdr[i];
        ck_assert_uint_lt(n + h->name.len + h->val.len, sizeof strings);
        memcpy(strings + n, h->name.b, h->name.len);
        memcpy(strings + n + h->name.len, h->val.b, h->val.len);
        AZ(http_add(&copy, (struct txt){ strings + n, h->name.len },
                    (struct txt){ strings + n + h->name.len, h->val.len }));
        n += h->name.len + h->val.len;
    }
    bc.creq = &copy;
    /* The request is gone: its workspace reused, its connection's client another. */
    memset(w0.ws.s, 0x5a, w0.ws.e - w0.ws.s);
    req = mkreq("GET", "/q", "Host", "example.com", NULL);
    snprintf(sess.client_ip, sizeof sess.client_ip, "%s", "198.51.100.9");
    /* Another program is current, and the refresh's is discarded. */
    unlink(polpath);
    load_policy(b);
    pol_bctx_init(&now, req);
    ck_assert_str_eq(backend_fetch_sees(&now, req->http, buf, sizeof buf), "198.51.100.9 B");
    bc.wrk = &w0;
    bc.ws = &w0.ws;
    snprintf(want, sizeof want, "192.0.2.1 false true recv A %ju A", (uintmax_t)bc.xid);
    ck_assert_str_eq(backend_fetch_sees(&bc, &copy, buf, sizeof buf), want);
    pol_bctx_fini(&bc);
    /* The worker's state goes back to the current program. */
    req = mkreq("GET", "/q", "Host", "example.com", NULL);
    pol_bctx_init(&now, req);
    ck_assert_str_eq(backend_fetch_sees(&now, req->http, buf, sizeof buf), "198.51.100.9 B");
}
END_TEST

Suite *
req_suite(void)
{
    Suite *s = suite_create("req");
    TCase *tc = unit_tcase(s, "checks", setup, teardown);

    tcase_add_test(tc, bad_host_is_400);
    tcase_add_test(tc, trace_is_405);
    tcase_add_test(tc, unkeyed_fields_stripped);
    tcase_add_test(tc, purge_needs_the_acl);
    tc = unit_tcase(s, "names", setup, teardown);
    tcase_add_test(tc, outcome_names_round_trip);
    tcase_add_test(tc, cache_key_normalises_host);
    tc = unit_tcase(s, "steps", setup, teardown);
    tcase_add_test(tc, steps_as_the_hooks_say);
    tcase_add_test(tc, restarts_bounded);
    tc = unit_tcase(s, "park", setup, teardown);
    tcase_add_test(tc, woken_after_parked);
    tcase_add_test(tc, woken_while_parking);
    tcase_add_test(tc, dropped_when_pool_stops);
    tcase_add_test(tc, woken_by_a_failed_fetch);
    tcase_add_test(tc, coalesce_timeout_passes);
    tcase_add_test(tc, crowd_parks_without_threads);
    tcase_add_test(tc, uncarried_state_waits_on_thread);
    tc = unit_tcase(s, "detached", setup, teardown);
    tcase_add_test(tc, fetch_detached_from_its_request);
    return s;
}
