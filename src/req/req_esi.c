/*
 * ESI includes: the sub-requests of a page being assembled.  The
 * deliverer (dlv_esi.c) walks the page and asks here for each include in
 * turn; this file makes and runs the requests behind them.
 *
 * An include is an ordinary request through the policy: a struct req
 * made from its page's -- the fields as the policy left them, less the
 * conditional ones and Range; GET; the URL and Host of src= -- at
 * esi_level one more (req.esi_level, req.is_esi_subreq), run through the
 * steps of req_step.c.  Its recv, hash, lookup and hit steps run at once
 * on the page's worker.  A complete cached object is then sent by the
 * deliverer straight from the store, on that worker, when its turn comes.
 * Anything else -- a miss, a pass, a fetch in progress to join -- goes on
 * in a pool task of its own (POOL_PRIO_FETCH) whose transport is a buffer
 * here (esi_tp): its response, decoded, waits in memory until its turn,
 * at most esi_fragment_buffer bytes ahead of the page (the task then
 * waits).  esi_max_parallel includes are in flight at once, so their
 * fetches overlap while the page goes out in document order.  What the
 * include's hooks kept on the page's worker (req.ctx, globals) goes with
 * it to the task (pol_park()).
 *
 * An include whose lookup finds the object being fetched waits on the
 * object's waiting list (hsh.h) with a waiter of its own
 * (req__esi_waiter()), not on the worker that looked it up: that worker
 * lets go of it (F_PARKED) and goes on -- the page's, to its next
 * include.  The wake-up (frag_wake()) queues its task; the page's worker
 * runs it itself when its turn comes first.  The wake-up may come before
 * the worker has let go: then the worker runs on (f->woken).
 *
 * A task that no worker has picked up when its turn comes is run by the
 * page's worker itself, so a page never waits for a worker that other
 * pages hold.  The page's request outlives its includes: req_esi_end()
 * waits for the tasks still running, since they read the page's request,
 * its session and the program.
 *
 * Threads and locks: an include (struct req_frag) is shared by the page's
 * worker, which reads its buffer, its task, which writes it, and a waiting
 * list it is parked on; its state and buffer are under its mutex, and it
 * is freed by the last of them to let go of it (refcnt).  Its request and
 * workspace belong to whichever runs its steps: the page's worker until
 * the task is queued or it is parked, the task -- or the page's worker
 * that took it -- then.  The page's own request and the ancestors the cycle
 * check reads are not written while includes run (they are delivering).
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "surogat/defs.h"
#include "surogat/esi.h"
#include "surogat/gz.h"
#include "surogat/hsh.h"
#include "surogat/par.h"
#include "surogat/pol.h"
#include "surogat/pool.h"
#include "surogat/req.h"
#include "surogat/rlog.h"
#include "surogat/sess.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/tp.h"
#include "surogat/trace.h"
#include "surogat/vio.h"
#include "surogat/wrk.h"
#include "surogat/ws.h"

#include "req_priv.h"

/* The buffer of an include's response: chunks of this many bytes. */
#define FRAG_CHUNK (16 * 1024)

struct chunk {
    struct chunk *next;
    size_t len;
    char data[FRAG_CHUNK];
};

enum frag_state {
    F_READY,   /* its steps stopped on the page's worker (a hit, or nothing more to run) */
    F_QUEUED,  /* a task is queued to run the rest */
    F_RUNNING, /* the task runs it */
    F_INLINE,  /* the page's worker runs the rest itself */
    F_PARKED,  /* on a waiting list, let go: the wake-up queues it */
    F_DONE,    /* its steps are over */
};

/* Why an include was refused before it was made. */
enum frag_refused {
    FR_NONE,
    FR_DEPTH,
    FR_CYCLE,
    FR_HOST,
    FR_WORKSPACE,
};

struct req_frag {
    unsigned magic;
#define REQ_FRAG_MAGIC 0x4f2ab7e1
    unsigned refcnt; /* under mtx: the page's worker, and a queued or running task */
    unsigned index;  /* in page order; immutable */
    enum frag_refused refused;
    struct req *sub;   /* NULL when refused */
    struct cobj *oc;   /* a hit for the deliverer (REQ_FRAG_OBJ) */
    struct pool *pool; /* its page's, for its task; NULL: none */
    struct pool_task task;
    double t_start, t_ready; /* tim_mono(): made; response complete (or hit found) */
    struct esi_rec *rec;     /* under mtx: the log record to fill once DONE; NULL: none yet */
    pthread_mutex_t mtx;
    pthread_cond_t cond;
    /* -- under mtx -- */
    enum frag_state state;
    unsigned status; /* of the last head its transport got */
    bool head;
    bool ended, failed; /* the response is over; whole or not */
    bool cancel;        /* the page gave up on it: its transport's writes fail */
    bool woken;         /* its waiter was woken before its runner let go of it */
    bool task_queued;   /* its task is in the pool's queue, not begun */
    bool logged;        /* run_rest() wrote its live log record */
    uint64_t written;   /* bytes in the buffer, ever */
    uint64_t consumed;  /* bytes handed to the deliverer */
    struct chunk *first, *last;
    size_t rd; /* bytes of first handed out */
    /* -- its transport's, while it runs -- */
    struct gz *dec;   /* decoding the response's content coding; NULL: identity */
    bool undecodable; /* a coding we cannot decode */
    struct ws ws;     /* the include's workspace */
    char *ws_mem;
};

struct req_esi {
    unsigned magic;
#define REQ_ESI_MAGIC 0x0e5b1c93
    struct req *req;    /* the page's */
    struct esi_iter it; /* the program, walked ahead to start includes */
    unsigned ninc, nstarted, ntaken;
    struct req_frag **win; /* started, not taken: a ring of esi_max_parallel */
    unsigned win_cap, win_head, win_n;
    bool current;              /* one is taken and not done: it counts in the window */
    struct req_frag **pending; /* done but still running: waited for at the end */
    unsigned npending, pending_cap;
};

/* ---- the include's buffer ---- */

static void
frag_unref(struct req_frag **fp)
{
    struct req_frag *f = *fp;
    bool last;

    *fp = NULL;
    OBJ_CHECK(f, REQ_FRAG_MAGIC);
    AZ(pthread_mutex_lock(&f->mtx));
    SRG_ASSERT(f->refcnt > 0);
    last = --f->refcnt == 0;
    AZ(pthread_mutex_unlock(&f->mtx));
    if (!last)
        return;
    while (f->first != NULL) {
        struct chunk *c = f->first;
        f->first = c->next;
        free(c);
    }
    gz_free(&f->dec);
    if (f->sub != NULL)
        pol_req_done(f->sub); /* the program it was carried with (pol_park()) */
    AZ(pthread_cond_destroy(&f->cond));
    AZ(pthread_mutex_destroy(&f->mtx));
    free(f->ws_mem);
    OBJ_FREE(&f);
}

/*
 * Bytes of the response into the buffer.  Past esi_fragment_buffer bytes
 * ahead of the deliverer a task waits; the page's worker running the
 * include itself cannot (it is the deliverer).  -1 when the page gave up.
 */
static int
buf_append(struct req_frag *f, const char *p, size_t len)
{
    AZ(pthread_mutex_lock(&f->mtx));
    while (!f->cancel && f->state == F_RUNNING &&
           f->written - f->consumed >= par.esi_fragment_buffer)
        AZ(pthread_cond_wait(&f->cond, &f->mtx));
    if (f->cancel) {
        AZ(pthread_mutex_unlock(&f->mtx));
        return (-1);
    }
    while (len > 0) {
        struct chunk *c = f->last;
        size_t k;

        if (c == NULL || c->len == FRAG_CHUNK) {
            c = malloc(sizeof *c);
            AN(c);
            c->next = NULL;
            c->len = 0;
            if (f->last != NULL)
                f->last->next = c;
            else
                f->first = c;
            f->last = c;
        }
        k = SRG_MIN(len, FRAG_CHUNK - c->len);
        memcpy(c->data + c->len, p, k);
        c->len += k;
        f->written += k;
        p += k;
        len -= k;
    }
    AZ(pthread_cond_broadcast(&f->cond));
    AZ(pthread_mutex_unlock(&f->mtx));
    return (0);
}

/* The response is over (failed: cut short). */
static void
buf_end(struct req_frag *f, bool failed)
{
    AZ(pthread_mutex_lock(&f->mtx));
    if (!f->ended) {
        f->ended = true;
        f->failed = failed;
        f->t_ready = tim_mono();
    }
    AZ(pthread_cond_broadcast(&f->cond));
    AZ(pthread_mutex_unlock(&f->mtx));
}

ssize_t
req_esi_read(struct req_frag *f, const char **p)
{
    ssize_t rv;

    OBJ_CHECK(f, REQ_FRAG_MAGIC);
    AZ(pthread_mutex_lock(&f->mtx));
    for (;;) {
        struct chunk *c = f->first;

        /* What the last call handed out is sent: a chunk read whole and left behind goes. */
        if (c != NULL && f->rd == c->len && c->next != NULL) {
            f->first = c->next;
            f->rd = 0;
            free(c);
            continue;
        }
        if (c != NULL && f->rd < c->len) {
            rv = (ssize_t)(c->len - f->rd);
            *p = c->data + f->rd;
            f->rd = c->len;
            f->consumed += (uint64_t)rv;
            AZ(pthread_cond_broadcast(&f->cond)); /* a task may wait for room */
            break;
        }
        if (f->ended) {
            rv = f->failed || f->undecodable ? -1 : 0;
            break;
        }
        vio_blocking();
        AZ(pthread_cond_wait(&f->cond, &f->mtx));
    }
    AZ(pthread_mutex_unlock(&f->mtx));
    return (rv);
}

bool
req_esi_readable(struct req_frag *f)
{
    bool r;

    OBJ_CHECK(f, REQ_FRAG_MAGIC);
    AZ(pthread_mutex_lock(&f->mtx));
    r = f->ended || f->written > f->consumed;
    AZ(pthread_mutex_unlock(&f->mtx));
    return (r);
}

/* ---- esi_tp: the transport of an include, writing its buffer ---- */

static struct req_frag *
frag_of(const struct req *req)
{
    struct req_frag *f = req->tp_priv;

    OBJ_CHECK(f, REQ_FRAG_MAGIC);
    return (f);
}

/* The value of field `name` in a head's serialised field blocks. */
static bool
head_field(const struct tp_head *h, const char *name, struct txt *val)
{
    size_t nl = strlen(name);

    for (unsigned i = 0; i < h->nblock; i++) {
        const char *p = h->block[i].b, *e = p + h->block[i].len;

        while (p < e) {
            const char *eol = memchr(p, '\n', (size_t)(e - p));
            const char *le = eol != NULL ? eol : e;

            if ((size_t)(le - p) > nl && p[nl] == ':' && strncasecmp(p, name, nl) == 0) {
                const char *v = p + nl + 1, *ve = le;
                while (v < ve && (*v == ' ' || *v == '\t'))
                    v++;
                while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t'))
                    ve--;
                *val = (struct txt){ v, (size_t)(ve - v) };
                return (true);
            }
            p = le + 1;
        }
    }
    return (false);
}

static int
tp_head(struct req *req, const struct tp_head *h)
{
    struct req_frag *f = frag_of(req);
    struct txt ce;
    int c = GZ_C_IDENTITY;

    /* The page needs the include's bytes as they read: decoded here. */
    gz_free(&f->dec);
    f->undecodable = false;
    if (h->body && head_field(h, "Content-Encoding", &ce) &&
        !(ce.len == 8 && strncasecmp(ce.b, "identity", 8) == 0)) {
        c = gz_coding_of(&ce);
        if (c < 0)
            f->undecodable = true;
        else if (c != GZ_C_IDENTITY)
            f->dec = gz_new(gz_coding_decoder((enum gz_coding)c), 0);
    }
    AZ(pthread_mutex_lock(&f->mtx));
    f->status = h->status;
    f->head = true;
    AZ(pthread_mutex_unlock(&f->mtx));
    req->status = h->status;
    req->t_first = tim_mono();
    return (0);
}

/* gz_out_f: decoded bytes of the response. */
static int
dec_out(void *priv, const char *p, size_t len)
{
    return (buf_append(priv, p, len));
}

/* Body bytes as the transport gets them: decoded into the buffer. */
static int
put_body(struct req *req, const char *p, size_t len)
{
    struct req_frag *f = frag_of(req);
    enum gz_status st;

    req->resp_bytes += len;
    if (f->undecodable)
        return (-1);
    if (f->dec == NULL)
        return (buf_append(f, p, len));
    st = gz_feed(f->dec, p, len, GZ_FLUSH_NONE, dec_out, f);
    if (st == GZ_OK || st == GZ_END)
        return (0);
    if (st != GZ_E_OUTPUT) {
        STAT_INC(gzip_errors);
        f->undecodable = true;
    }
    return (-1);
}

static int
tp_body(struct req *req, struct iovec *iov, int niov)
{
    for (int i = 0; i < niov; i++)
        if (iov[i].iov_len > 0 && put_body(req, iov[i].iov_base, iov[i].iov_len) != 0)
            return (-1);
    return (0);
}

static int
tp_file(struct req *req, int fd, off_t off, size_t len)
{
    char *buf = malloc(FRAG_CHUNK);
    int rv = 0;

    AN(buf);
    while (len > 0 && rv == 0) {
        ssize_t n = pread(fd, buf, SRG_MIN(len, (size_t)FRAG_CHUNK), off);
        if (n <= 0) {
            rv = -1;
            break;
        }
        rv = put_body(req, buf, (size_t)n);
        off += n;
        len -= (size_t)n;
    }
    free(buf);
    return (rv);
}

static int
tp_end(struct req *req)
{
    struct req_frag *f = frag_of(req);
    bool failed = f->undecodable;

    /* The decoder checks that the coded body ended where the response did. */
    if (!failed && f->dec != NULL &&
        gz_feed(f->dec, NULL, 0, GZ_FLUSH_FINISH, dec_out, f) != GZ_END) {
        STAT_INC(gzip_errors);
        failed = true;
    }
    buf_end(f, failed);
    return (failed ? -1 : 0);
}

static bool
tp_abort(struct req *req)
{
    struct req_frag *f = frag_of(req);

    AZ(pthread_mutex_lock(&f->mtx));
    if (f->written == 0 && !f->ended) {
        /* Nothing of its body yet: the head is dropped, its request answers anew. */
        f->head = false;
        f->status = 0;
        AZ(pthread_mutex_unlock(&f->mtx));
        req->t_first = 0;
        return (false);
    }
    AZ(pthread_mutex_unlock(&f->mtx));
    buf_end(f, true);
    req->abort = req->close = true;
    return (true);
}

static bool
tp_writable(struct req *req)
{
    (void)req;
    return (true);
}

static int
tp_interim(struct req *req, unsigned status, const struct txt *fields)
{
    (void)req;
    (void)status;
    (void)fields;
    return (0); /* the page's client gets the page's head, no one else's */
}

static ssize_t
tp_body_next(struct req *req, const char **data)
{
    (void)req;
    (void)data;
    return (0); /* an include is a GET without a body */
}

static const struct tp_ops esi_tp_ops = {
    .name = "ESI",
    .head = tp_head,
    .body = tp_body,
    .file = tp_file,
    .end = tp_end,
    .abort = tp_abort,
    .writable = tp_writable,
    .interim = tp_interim,
    .body_next = tp_body_next,
    .tunnel = NULL, /* nothing to pipe to: an include is answered whole, as a pass */
};

/* ---- making an include ---- */

/* Request fields an include does not inherit from its page. */
static const char *const not_inherited[] = {
    "Host",     "If-None-Match",       "If-Modified-Since",
    "If-Match", "If-Unmodified-Since", "If-Range",
    "Range",    "Content-Length",      "Transfer-Encoding",
    "Expect",   "Content-Type",        "Content-Encoding",
};

static bool
inherited(const struct txt *name)
{
    for (size_t i = 0; i < ARRAY_LEN(not_inherited); i++)
        if (http_name_eq(name, not_inherited[i]))
            return (false);
    return (true);
}

static bool
txt_eq(const struct txt *a, const struct txt *b, bool icase)
{
    return (a->len == b->len &&
            (icase ? strncasecmp(a->b, b->b, a->len) == 0 : memcmp(a->b, b->b, a->len) == 0));
}

/* A request's Host, empty when it has none. */
static struct txt
host_of(const struct req *r)
{
    const struct txt *h = http_value(r->http, "Host");

    return (h != NULL ? *h : (struct txt){ "", 0 });
}

/* Whether host and url are those of the page or of a page it is included in. */
static bool
cycle(const struct req *page, const struct txt *host, const struct txt *url)
{
    for (const struct req *r = page; r != NULL; r = r->esi_up) {
        struct txt h = host_of(r);
        if (txt_eq(&r->http->url, url, false) && txt_eq(&h, host, true))
            return (true);
    }
    return (false);
}

static struct txt
ws_txt(struct ws *ws, const struct txt *t)
{
    char *p = ws_strndup(ws, t->b, t->len);

    return (p != NULL ? (struct txt){ p, t->len } : (struct txt){ NULL, 0 });
}

/* The include's request, in its workspace: false when it does not fit. */
static bool
sub_new(struct req_frag *f, struct req *page, const struct txt *host, const struct txt *url)
{
    struct ws *ws = &f->ws;
    const struct http *ph = page->http;
    struct http_hdr *hdrs;
    struct req *sub;

    sub = ws_alloc(ws, sizeof *sub);
    hdrs = ws_alloc(ws, ph->maxhdr * sizeof *hdrs);
    if (sub == NULL || hdrs == NULL)
        return (false);
    memset(sub, 0, sizeof *sub);
    OBJ_INIT(sub, REQ_MAGIC);
    sub->sp = page->sp;
    sub->wrk = page->wrk;
    sub->ws = ws;
    sub->tp = &esi_tp_ops;
    sub->tp_priv = f;
    memcpy(sub->client_ip, page->client_ip, sizeof sub->client_ip);
    sub->client_tls = page->client_tls;
    sub->body = H1_BODY_NONE;
    sub->body_done = true;
    sub->t_start = tim_real();
    sub->t_mono = tim_mono();
    sub->esi_level = page->esi_level + 1;
    sub->esi_up = page;
    http_init(sub->http, hdrs, ph->maxhdr);
    sub->http->method = TXT_LIT("GET");
    sub->http->url = ws_txt(ws, url);
    sub->http->proto = 11;
    if (sub->http->url.b == NULL)
        return (false);
    if (host->len > 0) {
        struct txt h = ws_txt(ws, host);
        if (h.b == NULL)
            return (false);
        AZ(http_add(sub->http, TXT_LIT("Host"), h));
    }
    /* The page's fields as its policy left them: the values stay where they are, read-only. */
    for (unsigned i = 0; i < ph->nhdr; i++)
        if (inherited(&ph->hdr[i].name) && sub->http->nhdr < sub->http->maxhdr)
            AZ(http_add(sub->http, ph->hdr[i].name, ph->hdr[i].val));
    sub->st = ws_alloc(ws, sizeof *sub->st);
    if (sub->st == NULL)
        return (false);
    memset(sub->st, 0, sizeof *sub->st);
    sub->st->step = REQ_S_RECV;
    sub->trace = trace_esi_begin(page->trace, sub); /* under the page's, in -g request */
    f->sub = sub;
    return (true);
}

/* Steps that run on a task of their own: those that fetch, or stream, or send a file. */
#define STOP_LOOKUP                                                                        \
    ((1u << REQ_S_MISS) | (1u << REQ_S_PASS) | (1u << REQ_S_PIPE) | (1u << REQ_S_STATIC) | \
     (1u << REQ_S_DELIVER))
/* An include of another host: recv first, then see whether it let the include through. */
#define STOP_RECV (~0u & ~(1u << REQ_S_RECV))
#define FORWARD \
    ((1u << REQ_S_HASH) | (1u << REQ_S_PASS) | (1u << REQ_S_PIPE) | (1u << REQ_S_STATIC))

/*
 * The include's lookup put it on a waiting list (req__run() said
 * REQ_S_PARK): its runner lets go of it, its policy state carried as a
 * parked request's (true: the wake-up queues it, frag_wake()).  When that
 * state cannot be carried, or the wake-up came first, the runner keeps
 * it and runs on, once it is woken (false).
 */
static bool
let_go(struct req_frag *f)
{
    bool carried = f->sub->pol_carry != NULL || pol_park(f->sub) == 0, gone = false;

    AZ(pthread_mutex_lock(&f->mtx));
    if (carried && !f->woken) {
        f->state = F_PARKED;
        f->refcnt++; /* the waiting list's, handed to the wake-up */
        gone = true;
    }
    while (!gone && !f->woken) {
        vio_blocking();
        AZ(pthread_cond_wait(&f->cond, &f->mtx));
    }
    f->woken = false;
    AZ(pthread_mutex_unlock(&f->mtx));
    return (gone);
}

/*
 * The task's or the page's worker: the rest of the include's steps, into
 * its buffer.  False when it was let go on a waiting list: it is not over.
 */
static bool
run_rest(struct req_frag *f, struct wrk *wrk)
{
    struct req *sub = f->sub;

    sub->wrk = wrk;
    while (req__run(sub, 0) == REQ_S_PARK)
        if (let_go(f))
            return (false);
    /* Steps that end without end() or abort() (the page gave up): the response is cut. */
    buf_end(f, true);
    sub->t_end = tim_mono();
    if (sub->t_first == 0)
        sub->t_first = sub->t_end;
    /* The live log's ring is this worker's: one writer. */
    if (wrk->rlog != NULL)
        rlog_req(wrk->rlog, sub);
    TRACE_REQ_END(sub);
    f->logged = true;
    return (true);
}

static void
count(const struct req_frag *f)
{
    STAT_INC(esi_includes);
    if (f->sub == NULL)
        return;
    switch (f->sub->outcome) {
    case REQ_O_HIT:
        STAT_INC(esi_include_hit);
        break;
    case REQ_O_MISS:
        STAT_INC(esi_include_miss);
        break;
    case REQ_O_PASS:
        STAT_INC(esi_include_pass);
        break;
    default:
        STAT_INC(esi_include_other);
        break;
    }
}

/* Under f->mtx, once its steps are over: the log record. */
static void
fill_rec(struct req_frag *f)
{
    struct esi_rec *r = f->rec;

    if (r == NULL)
        return;
    r->outcome = f->sub != NULL ? f->sub->outcome : REQ_O_NONE;
    r->status = f->sub != NULL ? f->sub->status : 0;
    r->time = f->t_ready > f->t_start ? (float)(f->t_ready - f->t_start) : 0;
    count(f);
    f->rec = NULL;
}

/* Its steps are over: tell the page. */
static void
frag_done(struct req_frag *f)
{
    AZ(pthread_mutex_lock(&f->mtx));
    f->state = F_DONE;
    fill_rec(f);
    AZ(pthread_cond_broadcast(&f->cond));
    AZ(pthread_mutex_unlock(&f->mtx));
}

static void
frag_task(struct wrk *wrk, void *priv)
{
    struct req_frag *f = priv;
    bool run;

    OBJ_CHECK(f, REQ_FRAG_MAGIC);
    AZ(pthread_mutex_lock(&f->mtx));
    f->task_queued = false;
    run = f->state == F_QUEUED; /* else the page ran it, or dropped it */
    if (run)
        f->state = F_RUNNING;
    AZ(pthread_mutex_unlock(&f->mtx));
    if (run) {
        wrk_buffers_fit(wrk);
        if (run_rest(f, wrk))
            frag_done(f);
    }
    frag_unref(&f);
}

/*
 * Give f's rest to its task (F_QUEUED, with a reference for it), whose
 * task_queued the caller set; false when no task takes it.
 */
static bool
submit(struct req_frag *f)
{
    if (f->pool != NULL && pool_submit(f->pool, &f->task, POOL_PRIO_FETCH) == 0)
        return (true);
    AZ(pthread_mutex_lock(&f->mtx));
    f->task_queued = false;
    AZ(pthread_mutex_unlock(&f->mtx));
    return (false);
}

/*
 * hsh_waiter.wake of an include: from the fetch's thread or the sweeper,
 * no index lock held.  A parked include goes to a task -- or to its page,
 * whose worker takes it when its turn comes first (await()); one whose
 * runner still holds it runs on there.
 */
static void
frag_wake(struct hsh_waiter *w)
{
    struct req_frag *f = w->priv;
    bool parked, again = false;

    OBJ_CHECK(f, REQ_FRAG_MAGIC);
    AZ(pthread_mutex_lock(&f->mtx));
    parked = f->state == F_PARKED;
    if (parked) {
        f->state = F_QUEUED; /* the waiting list's reference is the task's now */
        /* A task queued before the page took it, and let it go, runs it. */
        again = f->task_queued;
        f->task_queued = true;
    } else {
        f->woken = true;
    }
    AZ(pthread_cond_broadcast(&f->cond));
    AZ(pthread_mutex_unlock(&f->mtx));
    if (!parked)
        return;
    if (again || !submit(f)) {
        AZ(pthread_mutex_lock(&f->mtx));
        if (!again && f->state == F_QUEUED)
            f->state = F_READY; /* no task: its page runs it */
        AZ(pthread_mutex_unlock(&f->mtx));
        frag_unref(&f);
    }
}

struct hsh_waiter *
req__esi_waiter(struct req *req)
{
    struct hsh_waiter *w = &req->st->waiter;

    if (w->magic == 0) {
        w->magic = HSH_WAITER_MAGIC;
        w->wake = frag_wake;
        w->priv = frag_of(req);
    }
    return (w);
}

/*
 * A dropped include whose steps stopped on the page's worker: what they
 * hold goes (a busy object abandoned, so that those waiting fetch it).
 */
static void
drop_steps(struct req *sub)
{
    struct req_state *st = sub->st;

    switch (st->step) {
    case REQ_S_MISS:
        hsh_abandon(&st->oc, 0);
        if (st->stale.oc != NULL)
            hsh_deref(&st->stale.oc);
        break;
    case REQ_S_HIT:
    case REQ_S_DELIVER:
        if (st->lookup == HSH_STREAM)
            hsh_stream_leave(&st->oc);
        else if (st->oc != NULL)
            hsh_deref(&st->oc);
        break;
    default:
        break;
    }
    st->step = REQ_S_DONE;
}

static struct req_frag *
frag_alloc(unsigned index, struct pool *pool)
{
    struct req_frag *f;
    size_t wsz = par.workspace_client;

    OBJ_NEW(f, REQ_FRAG_MAGIC);
    f->ws_mem = malloc(wsz);
    AN(f->ws_mem);
    ws_init(&f->ws, f->ws_mem, wsz);
    AZ(pthread_mutex_init(&f->mtx, NULL));
    AZ(pthread_cond_init(&f->cond, NULL));
    f->refcnt = 1;
    f->index = index;
    f->pool = pool;
    f->task.func = frag_task;
    f->task.priv = f;
    f->t_start = tim_mono();
    return (f);
}

/*
 * Make the include of item for the page and run its steps as far as the
 * page's worker runs them; queue a task for the rest.
 */
static struct req_frag *
frag_start(struct req_esi *e, const struct esi_item *item, bool alt, unsigned index)
{
    struct req *page = e->req;
    struct txt phost = host_of(page), host = item->host.len > 0 ? item->host : phost;
    const struct txt *url = alt ? &item->alt : &item->src;
    struct req_frag *f = frag_alloc(index, page->sp != NULL ? page->sp->pool : NULL);
    enum req_step s;

    if (page->esi_level + 1 > par.esi_max_depth) {
        STAT_INC(esi_depth_limit);
        f->refused = FR_DEPTH;
    } else if (cycle(page, &host, url)) {
        STAT_INC(esi_cycles);
        f->refused = FR_CYCLE;
    } else if (!sub_new(f, page, &host, url)) {
        STAT_INC(ws_overflow);
        f->refused = FR_WORKSPACE;
    }
    if (f->refused != FR_NONE) {
        f->state = F_DONE;
        f->ended = f->failed = true;
        f->t_ready = tim_mono();
        return (f);
    }
    f->sub->esi_foreign = !txt_eq(&host, &phost, true);
    if (f->sub->esi_foreign) {
        s = req__run(f->sub, STOP_RECV);
        if (((1u << s) & FORWARD) && !f->sub->esi_allow_host) {
            f->sub->st->step = REQ_S_DONE;
            f->sub = NULL;
            f->refused = FR_HOST;
            f->state = F_DONE;
            f->ended = f->failed = true;
            f->t_ready = tim_mono();
            return (f);
        }
    }
    s = req__run(f->sub, STOP_LOOKUP);
    if (s == REQ_S_PARK) {
        /*
         * Someone fetches it: it waits on the object's waiting list, not
         * on this worker, which starts the next include meanwhile.
         */
        if (let_go(f)) {
            STAT_INC(esi_parallel);
            return (f);
        }
        s = REQ_S_LOOKUP; /* woken already: a task looks up again */
    }
    if (s == REQ_S_PIPE) /* nothing to pipe to: an include is answered whole, as a pass */
        f->sub->st->step = s = REQ_S_PASS;
    if (s == REQ_S_DELIVER && f->sub->st->lookup == HSH_HIT) {
        /* A complete object: the deliverer sends it from the store at its turn. */
        f->oc = f->sub->st->oc;
        f->sub->st->oc = NULL;
        f->sub->st->step = REQ_S_DONE;
        f->sub->outcome = f->sub->st->grace ? REQ_O_GRACE : REQ_O_HIT;
        f->sub->status = f->oc->status;
        f->state = F_DONE;
        f->t_ready = tim_mono();
        return (f);
    }
    if (s == REQ_S_DONE) {
        buf_end(f, true); /* answered already (synth ...); no-op when it ended */
        f->state = F_DONE;
        return (f);
    }
    /*
     * Anything else goes on while the page is sent: a task of its own, on
     * another worker, so what its hooks kept on this one's Lua state (its
     * req.ctx, its globals) goes with it, as with a request that waits
     * without its worker.  What cannot be carried keeps it here.
     */
    f->state = F_QUEUED;
    f->task_queued = true;
    f->refcnt++;
    if ((f->sub->pol_carry != NULL || pol_park(f->sub) == 0) && submit(f)) {
        STAT_INC(esi_parallel);
    } else {
        f->refcnt--;
        f->task_queued = false;
        f->state = F_READY; /* no task: the page runs it at its turn */
    }
    return (f);
}

/* ---- the page's side ---- */

static void fill_window(struct req_esi *e);

struct req_esi *
req_esi_begin(struct req *req, const struct esi_iter *it, unsigned ninc)
{
    struct req_esi *e;

    OBJ_CHECK(req, REQ_MAGIC);
    OBJ_CHECK(it, ESI_ITER_MAGIC);
    OBJ_NEW(e, REQ_ESI_MAGIC);
    e->req = req;
    e->it = *it; /* a walk of its own, ahead of the deliverer's */
    e->ninc = ninc;
    e->win_cap = SRG_MAX(1u, SRG_MIN(par.esi_max_parallel, ninc));
    e->win = calloc(e->win_cap, sizeof *e->win);
    AN(e->win);
    if (req->esi_log == NULL) {
        req->esi_log = ws_alloc(req->ws, sizeof *req->esi_log);
        if (req->esi_log != NULL)
            memset(req->esi_log, 0, sizeof *req->esi_log);
    }
    fill_window(e); /* before anything is sent: their lookups, and fetches, begin now */
    return (e);
}

/* Start the next include of the program, in the window. */
static void
start_next(struct req_esi *e)
{
    struct esi_item item;

    while (esi_iter_next(&e->it, &item) == ESI_ITEM) {
        if (item.kind != ESI_INCLUDE)
            continue;
        SRG_ASSERT(e->win_n < e->win_cap);
        e->win[(e->win_head + e->win_n) % e->win_cap] = frag_start(e, &item, false, e->nstarted);
        e->win_n++;
        e->nstarted++;
        return;
    }
}

/* Keep esi_max_parallel includes in flight (the one being sent counts). */
static void
fill_window(struct req_esi *e)
{
    while (e->nstarted < e->ninc && e->win_n + (e->current ? 1 : 0) < e->win_cap)
        start_next(e);
}

/*
 * Under f->mtx, with its first bytes or its end in: whether its response
 * can be sent -- a 200 or 204 that did not fail before its body.
 */
static void
judge(struct req_frag *f, struct req_frag_info *fi)
{
    fi->status = f->head ? f->status : 0;
    if (f->undecodable || (f->written == 0 && f->failed) ||
        (fi->status != 200 && fi->status != 204)) {
        fi->kind = REQ_FRAG_FAILED;
        f->cancel = true; /* nothing of it is wanted: its writes fail from now on */
        AZ(pthread_cond_broadcast(&f->cond));
    } else {
        fi->kind = REQ_FRAG_BYTES;
    }
}

/*
 * Under f->mtx, on the page's worker (wrk): when no worker has f's rest
 * (or none could), run it here, its turn having come -- true.  It may be
 * let go on a waiting list again meanwhile.
 */
static bool
take(struct req_frag *f, struct wrk *wrk)
{
    if (f->state != F_QUEUED && f->state != F_READY)
        return (false);
    if (f->state == F_QUEUED)
        STAT_INC(esi_stolen);
    f->state = F_INLINE;
    AZ(pthread_mutex_unlock(&f->mtx));
    if (run_rest(f, wrk))
        frag_done(f);
    AZ(pthread_mutex_lock(&f->mtx));
    return (true);
}

/* Wait for what the deliverer on wrk needs of f: its first bytes, or its end. */
static void
await(struct req_frag *f, struct wrk *wrk, struct req_frag_info *fi)
{
    AZ(pthread_mutex_lock(&f->mtx));
    while (f->written == 0 && !f->ended) {
        if (take(f, wrk))
            continue;
        vio_blocking();
        AZ(pthread_cond_wait(&f->cond, &f->mtx));
    }
    judge(f, fi);
    AZ(pthread_mutex_unlock(&f->mtx));
}

bool
req_esi_ready(const struct req_esi *e)
{
    struct req_frag *f;
    bool ready;

    OBJ_CHECK(e, REQ_ESI_MAGIC);
    if (e->win_n == 0)
        return (false);
    f = e->win[e->win_head];
    if (f->refused != FR_NONE || f->oc != NULL)
        return (true);
    AZ(pthread_mutex_lock(&f->mtx));
    ready = f->written > 0 || f->ended;
    AZ(pthread_mutex_unlock(&f->mtx));
    return (ready);
}

struct req_frag *
req_esi_next(struct req_esi *e, const struct esi_item *item, bool alt, struct req_frag_info *fi)
{
    struct req_frag *f;

    OBJ_CHECK(e, REQ_ESI_MAGIC);
    SRG_ASSERT(!e->current);
    memset(fi, 0, sizeof *fi);
    if (alt) {
        f = frag_start(e, item, true, e->ntaken - 1);
    } else {
        if (e->win_n == 0)
            start_next(e); /* the window was empty: esi_max_parallel lowered meanwhile */
        SRG_ASSERT(e->win_n > 0);
        f = e->win[e->win_head];
        e->win_head = (e->win_head + 1) % e->win_cap;
        e->win_n--;
        SRG_ASSERT(f->index == e->ntaken);
        e->ntaken++;
    }
    e->current = true;
    fi->sub = f->sub;
    if (f->refused != FR_NONE) {
        fi->kind = REQ_FRAG_FAILED;
    } else if (f->oc != NULL) {
        fi->kind = REQ_FRAG_OBJ;
        fi->oc = f->oc;
        fi->status = f->oc->status;
    } else {
        await(f, e->req->wrk, fi);
    }
    return (f);
}

void
req_esi_rerun(struct req_frag *f, struct req_frag_info *fi)
{
    OBJ_CHECK(f, REQ_FRAG_MAGIC);
    SRG_ASSERT(f->oc != NULL && f->state == F_DONE);
    /* The hit is not sent: the object goes back, and what its deliver hook asked follows. */
    hsh_deref(&f->oc);
    fi->oc = NULL;
    f->sub->st->step = REQ_S_DONE; /* unless restarted: req__run() sees req->restart */
    f->state = F_READY;            /* the hit was found on the page's worker: run there */
    await(f, f->sub->wrk, fi);
}

/* A log record for f in the page's log, NULL when there is no room. */
static struct esi_rec *
log_rec(struct req_esi *e, const struct req_frag *f, bool ok)
{
    struct esi_log *lg = e->req->esi_log;
    struct esi_rec *r;
    const struct txt *url;

    if (lg == NULL)
        return (NULL);
    lg->total++;
    if (!ok)
        lg->failed++;
    if (lg->n == REQ_ESI_LOG_MAX)
        return (NULL);
    r = &lg->rec[lg->n];
    memset(r, 0, sizeof *r);
    url = f->sub != NULL ? &f->sub->http->url : NULL;
    r->url = url != NULL ? ws_strndup(e->req->ws, url->b, SRG_MIN(url->len, 128)) : "-";
    if (r->url == NULL)
        return (NULL);
    r->failed = !ok;
    lg->n++;
    return (r);
}

void
req_esi_done(struct req_esi *e, struct req_frag **fp, bool ok)
{
    struct req_frag *f = *fp;
    struct esi_rec *r;
    bool running;

    *fp = NULL;
    OBJ_CHECK(e, REQ_ESI_MAGIC);
    OBJ_CHECK(f, REQ_FRAG_MAGIC);
    SRG_ASSERT(e->current);
    e->current = false;
    if (f->oc != NULL)
        hsh_deref(&f->oc);
    r = log_rec(e, f, ok);
    AZ(pthread_mutex_lock(&f->mtx));
    f->cancel = true; /* whatever is left of it is not wanted */
    AZ(pthread_cond_broadcast(&f->cond));
    f->rec = r != NULL ? r : NULL;
    running = f->state != F_DONE;
    if (!running) {
        if (f->rec != NULL)
            fill_rec(f);
        else
            count(f);
    } else if (f->rec == NULL) {
        /* No record: counted here, as it stands. */
        count(f);
    }
    AZ(pthread_mutex_unlock(&f->mtx));
    if (!running && !f->logged && f->sub != NULL) {
        /* Answered on this worker (a hit, a synth): its live log record is written here. */
        f->sub->t_end = tim_mono();
        if (f->sub->t_first == 0)
            f->sub->t_first = f->sub->t_end;
        if (e->req->wrk->rlog != NULL)
            rlog_req(e->req->wrk->rlog, f->sub);
        TRACE_REQ_END(f->sub);
    }
    if (running) {
        /* Its task still writes its log record and reads the page: waited for at the end. */
        if (e->npending == e->pending_cap) {
            e->pending_cap = e->pending_cap == 0 ? 8 : 2 * e->pending_cap;
            e->pending = realloc(e->pending, e->pending_cap * sizeof *e->pending);
            AN(e->pending);
        }
        e->pending[e->npending++] = f;
    } else {
        frag_unref(&f);
    }
    fill_window(e);
}

/*
 * At the page's end, on its worker (wrk): f's writes fail from now on;
 * wait for its steps to be over.  Steps stopped before any worker ran the
 * rest are dropped (a busy object abandoned, so that those waiting fetch
 * it) -- but one woken from a waiting list looks up here first, since
 * that lets those behind it on the list go (hsh.h), and no other worker
 * may be free to.
 */
static void
settle(struct req_frag *f, struct wrk *wrk)
{
    AZ(pthread_mutex_lock(&f->mtx));
    f->cancel = true;
    AZ(pthread_cond_broadcast(&f->cond));
    while (f->state != F_DONE) {
        bool idle = f->state == F_QUEUED || f->state == F_READY;

        if (idle && f->sub != NULL && f->sub->st->step == REQ_S_LOOKUP) {
            (void)take(f, wrk);
        } else if (idle) {
            f->state = F_READY; /* a queued task finds it taken and does nothing */
            AZ(pthread_mutex_unlock(&f->mtx));
            if (f->sub != NULL)
                drop_steps(f->sub);
            return;
        } else {
            vio_blocking();
            AZ(pthread_cond_wait(&f->cond, &f->mtx));
        }
    }
    AZ(pthread_mutex_unlock(&f->mtx));
}

void
req_esi_end(struct req_esi **ep)
{
    struct req_esi *e = *ep;

    *ep = NULL;
    OBJ_CHECK(e, REQ_ESI_MAGIC);
    SRG_ASSERT(!e->current);
    /* Started and never taken (the page was cut, or its client left). */
    while (e->win_n > 0) {
        struct req_frag *f = e->win[e->win_head];

        e->win_head = (e->win_head + 1) % e->win_cap;
        e->win_n--;
        if (f->oc != NULL)
            hsh_deref(&f->oc);
        settle(f, e->req->wrk);
        count(f);
        frag_unref(&f);
    }
    for (unsigned i = 0; i < e->npending; i++) {
        settle(e->pending[i], e->req->wrk);
        frag_unref(&e->pending[i]);
    }
    free(e->pending);
    free(e->win);
    OBJ_FREE(&e);
}
