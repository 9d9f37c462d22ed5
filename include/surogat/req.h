/*
 * req -- one client request, from its head to the end of its response.
 *
 * struct req is visible because every stage of the hot path reads it; the
 * comments say which module writes which field.  It lives in the worker's
 * workspace and dies when the request ends.
 */
#ifndef SUROGAT_REQ_H
#define SUROGAT_REQ_H

#include <stdbool.h>
#include <stdint.h>
#include <netinet/in.h>
#include <sys/types.h>

#include "surogat/http.h"
#include "surogat/h1.h"

struct esi_log;
struct req_state;
struct sess;
struct tp_ops;
struct wrk;
struct ws;
struct be;
struct dir;
struct trace_tx;

/* How a request was answered; names and docs in tbl/outcomes.h. */
enum req_outcome {
#define OUTCOME(name, doc) REQ_O_##name,
#include "surogat/tbl/outcomes.h"
    REQ_O__N
};
/* The name logs show ("HIT", "MISS" ...); "-" for REQ_O_NONE. */
const char *req_outcome_name(enum req_outcome o);
/* The outcome named name[0..len), ignoring case; REQ_O__N for none. */
enum req_outcome req_outcome_parse(const char *name, size_t len);

struct req {
    unsigned magic;
#define REQ_MAGIC 0x58a3c6f1
    struct sess *sp;
    struct wrk *wrk;
    struct ws *ws;            /* the request's arena */
    const struct tp_ops *tp;  /* its transport: the only way to its client */
    void *tp_priv;            /* the transport's, for this request's response */
    /*
     * Its client, as the backend is told (X-Forwarded-For and -Proto): set
     * once the client behind trusted_proxies is known (req_serve()).
     */
    char client_ip[INET6_ADDRSTRLEN];
    bool client_tls;
    /* req: the parsed request; points into wrk->rx */
    struct http http[1];
    enum h1_body body;   /* how the request body is framed */
    uint64_t clen;       /* its length, for H1_BODY_LENGTH */
    size_t rx_head;      /* bytes of wrk->rx taken by the head */
    size_t rx_pos;       /* first byte of wrk->rx not consumed yet */
    size_t rx_len;       /* bytes valid in wrk->rx */
    uint64_t body_left;  /* req_body: H1_BODY_LENGTH bytes still to read */
    struct h1_chunk chunk; /* req_body: the chunked decoder */
    bool body_done;      /* req_body: the whole request body has been read */
    bool body_bad;       /* req_body: the client's chunked framing was malformed */
    bool expect_100;     /* client sent Expect: 100-continue */
    /*
     * transport: the client asks to switch protocols (an HTTP/1.1 Upgrade
     * other than h2c, listed in Connection): passed, and tunneled only
     * if the backend answers 101.  Never set by a transport without tunnels.
     */
    bool upgrade;
    bool want_close;     /* client asked to close, or 1.0 without keep-alive */
    bool keepalive_10;   /* HTTP/1.0 client sent Connection: keep-alive */
    bool head_only;      /* HEAD */
    bool close;          /* anyone: close the session after this response */
    bool abort;          /* fetch: response truncated, close at once */
    /* delivery */
    unsigned status;     /* status sent to the client */
    uint64_t resp_bytes; /* body bytes sent */
    const char *be_name; /* backend used, for the log */
    enum req_outcome outcome; /* for the logs and the status page */
    double t_start;      /* tim_real() when the head was complete */
    double t_mono;       /* tim_mono() at the same time */
    double t_first;      /* tim_mono() when the first response byte was sent */
    double t_end;        /* tim_mono() when the response ended */
    uint64_t pol_id;     /* pol: names this request's req.ctx; 0 until a hook runs */
    uint32_t hooks;      /* pol: bit (1 << hook) for each policy hook run, for the logs */
    const void *pol_carry;  /* pol_park(): its policy state while it waits, in ws; or NULL */
    size_t pol_carry_len;
    /*
     * pol_park(): the program its hooks began under, referenced, so that
     * it finishes on it on any worker whatever a reload did meanwhile;
     * let go by pol_req_done().  NULL: its worker's, which keeps it.
     */
    struct pol_prog *pol_prog;
    /* policy controls */
    struct http *bereq;  /* fetch: the backend request as sent; NULL before any */
    struct dir *dir;     /* pol: where the request goes (req.backend, routes); NULL: -b's */
    const char *lookup_key; /* req_cache: the cache key looked up (a pass: the one it would */
    size_t lookup_keylen;   /* have), for the directors; NULL until known */
    unsigned restarts;   /* times the request went back to recv */
    unsigned retries;    /* fetch: backend attempts after the first */
    bool bereq_uncacheable; /* fetch: nothing of this fetch is stored (a pass, hit-for-miss) */
    bool restart;        /* a hook said "restart": req_dispatch() starts over */
    struct req_state *st; /* req_step.c: what its steps hand each other */
    bool hash_always_miss; /* recv: ignore cached objects, fetch and replace them */
    bool hash_ignore_busy; /* recv: do not wait for a fetch of the same object in progress */
    struct txt hints;    /* pol: "Link: ...\r\n" lines of surogat.early_hints, not sent yet */
    /*
     * req_cache: why a pass went forward, as RFC 9211's Cache-Status fwd=
     * and detail= ("bypass" and "policy", "uri-miss" and "hit-for-miss",
     * "method" ...); NULL: fwd=bypass, no detail.
     */
    const char *cs_fwd, *cs_detail;
    struct trace_tx *trace; /* trace: its transaction while a trace reader is attached */
    /* ESI (req_esi.c): an include's depth, 0 for a client's request (req.esi_level) */
    unsigned esi_level;
    const struct req *esi_up;  /* req_esi.c: the page an include is for; NULL: none */
    bool esi_foreign;          /* req_esi.c: an include of another host than its page's */
    bool esi_allow_host;       /* pol: recv lets such an include through (req.esi_allow_host) */
    struct esi_log *esi_log;   /* req_esi.c: the includes it delivered, for its log; NULL */
};

/* The includes of an ESI page a client's request got, for its log line (req_esi.c). */
#define REQ_ESI_LOG_MAX 16
struct esi_rec {
    const char *url;          /* NUL-terminated, in the request's workspace */
    enum req_outcome outcome; /* REQ_O_NONE: refused before it was made (depth, cycle, host) */
    unsigned status;          /* its response's; 0 for none */
    float time;               /* seconds from its start to its response complete */
    bool failed;              /* left out, or the page was cut */
};
struct esi_log {
    unsigned total;  /* includes, counting those past the records kept */
    unsigned failed;
    unsigned n;      /* records kept: the first REQ_ESI_LOG_MAX */
    struct esi_rec rec[REQ_ESI_LOG_MAX];
};

/* After the backend answered an unsafe method, before the client sees it: invalidate. */
struct http;
void req_invalidate(struct req *req, const struct http *resp);
/* Answer a checked request: from the cache, or through a fetch. */
/*
 * How far serving a request went: to its end (answered and logged), or
 * to a waiting list, without a worker (its transport's park(): tp.h),
 * from which req_resume() takes it on when its transport resumes it.
 */
enum req_run {
    REQ_RUN_DONE,
    REQ_RUN_PARKED,
};
enum req_run req_dispatch(struct req *req);
/*
 * The request's cache key in workspace: the Host lower-cased, a NUL, the
 * request-target.  NULL when the workspace is full.
 */
char *req_cache_key(struct req *req, size_t *len);
/*
 * req_pipe.c: copy bytes between the client and `be` until either closes;
 * an upgrade only once the backend answered 101 (see there).
 */
void req_pipe(struct req *req, struct be *be);
/* req_purge.c: answer a PURGE request (see there); req_purge_fini() at exit. */
void req_purge(struct req *req);
void req_purge_fini(void);
/*
 * Serve one request that its transport has read and checked for its own
 * protocol: the checks every protocol shares (a valid Host, TRACE, the
 * unkeyed fields), the request's steps, then its log lines.  On return the
 * response is complete, or the connection must close (req->close,
 * req->abort).
 */
enum req_run req_serve(struct req *req);
enum req_run req_resume(struct req *req);
/* Log a request answered without req_serve() (the transport refused its head). */
void req_log(struct req *req);
/*
 * The next piece of the (decoded) request body, from its transport
 * (tp_ops.body_next).  >0 its length, 0 at the end of the body, -1 when
 * the client failed (gone, too slow, or malformed chunking: req->close is
 * then set).
 */
ssize_t req_body_next(struct req *req, const char **data);
/* Deadline for the next write to the client. */
double req_send_deadline(const struct req *req);

/*
 * ESI includes (req_esi.c), for the deliverer assembling a page: each
 * include is a sub-request of the page's request, run through the
 * request's steps.  See req_esi.c for the threads.
 */
struct esi_item;
struct cobj;
struct req_esi;  /* the includes of one page being assembled */
struct req_frag; /* one include */
enum req_frag_kind {
    REQ_FRAG_OBJ,    /* a complete cached object for the deliverer to send (fi->oc) */
    REQ_FRAG_BYTES,  /* its response, decoded, as it arrives: req_esi_read() */
    REQ_FRAG_FAILED, /* nothing to send: refused (depth, cycle, host) or failed before its body */
};
struct req_frag_info {
    enum req_frag_kind kind;
    struct req *sub;  /* the include's request; NULL when refused before it was made */
    struct cobj *oc;  /* REQ_FRAG_OBJ: referenced until req_esi_done() */
    unsigned status;  /* REQ_FRAG_BYTES, REQ_FRAG_FAILED: its response's (0: none) */
};
/*
 * The includes of the page req delivers, whose program (valid until
 * req_esi_end()) the iterator it is about to walk in order, holding ninc
 * includes: the first esi_max_parallel are started now, and one more each
 * time one is done.  Never NULL.
 */
struct esi_iter;
struct req_esi *req_esi_begin(struct req *req, const struct esi_iter *it, unsigned ninc);
/* Whether req_esi_next() for the next include in page order would not wait. */
bool req_esi_ready(const struct req_esi *e);
/*
 * The next include in page order, item (alt: its alt= instead of its
 * src=, tried after a failure, outside the window), once it can be sent:
 * a cached object, or its response's first bytes or end.  Blocks.
 */
struct req_frag *req_esi_next(struct req_esi *e, const struct esi_item *item, bool alt,
                              struct req_frag_info *fi);
/*
 * REQ_FRAG_BYTES: the next piece, in *p until the next call: its length,
 * 0 at the end, -1 when the response failed.  Blocks.
 */
ssize_t req_esi_read(struct req_frag *f, const char **p);
/* Whether req_esi_read() would not wait. */
bool req_esi_readable(struct req_frag *f);
/*
 * REQ_FRAG_OBJ whose deliver hook did not deliver (synth: its page is in
 * the buffer; restart): the rest of its steps run here, and it becomes
 * REQ_FRAG_BYTES or REQ_FRAG_FAILED.
 */
void req_esi_rerun(struct req_frag *f, struct req_frag_info *fi);
/* The deliverer is done with *fp (ok: sent whole); *fp = NULL. */
void req_esi_done(struct req_esi *e, struct req_frag **fp, bool ok);
/* The page is over: includes not taken are dropped, running ones waited for.  *ep = NULL. */
void req_esi_end(struct req_esi **ep);

#endif
