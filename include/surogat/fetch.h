/*
 * fetch -- the backend side of a transaction, on a busy object (struct
 * busyobj): the backend request, built once (fetch_bereq.c), the
 * connection, the response head, and the body through its filters into
 * the cache object being filled and to whoever takes the pieces.
 *
 * Fetch fills, it never delivers: it knows no client connection and no
 * transport (it includes neither req.h nor sess.h).  What it needs of the
 * request it runs for is copied into the busy object by its caller: the
 * client's request head, the client's address, how to read the request
 * body.  A background refresh fills one with no request behind it at all.
 * Body pieces go to a sink (struct fetch_sink) the caller gives: the
 * deliverer, for the client that asked; nothing, for a background fetch.
 *
 * Results are named (enum fetch_result); the caller decides what a
 * failure means for its client (an error page, a stale copy, the policy's
 * backend_error hook, a retry).  Runs on a worker and blocks on the
 * backend, bounded by the backend's timeouts.
 */
#ifndef SUROGAT_FETCH_H
#define SUROGAT_FETCH_H

#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "surogat/bcp.h"
#include "surogat/gz.h"
#include "surogat/h1.h"
#include "surogat/hsh.h"
#include "surogat/http.h"

struct be;
struct cobj;
struct dir;
struct gz;
struct fetch_esi;
struct fetch_te;
struct pol_bctx;
struct trace_tx;
struct ws;

/* What a fetch does with content codings (fetch_gz.c); bo->coding says which. */
enum fetch_gz {
    FGZ_NONE,
    FGZ_COMPRESS, /* compress the identity body to bo->coding: for the store, and for a client
                   * taking it */
    FGZ_CHECK,    /* the backend sent bo->coding: check it, decode it for a client not taking it */
    FGZ_GUNZIP,   /* the backend sent bo->coding and beresp.do_gunzip: store and send it
                   * decoded */
};

/*
 * The content codings of a fetch's body as its plan has them (fetch_gz.c):
 * as the backend sent it, as the cache stores it, and as the client that
 * asked gets it (the filter's output when bo->gz_client).  All three are
 * the backend's coding with FGZ_NONE, whatever that is (bo->coding says
 * identity for one surogat cannot undo).
 */
struct fetch_codings {
    enum gz_coding be, store, client;
};
struct busyobj;
struct fetch_codings fetch_codings(const struct busyobj *bo);

/* Backends one fetch may try in turn when connecting fails (failover). */
#define FETCH_TRIED_MAX 8

enum fetch_result {
    FETCH_OK,          /* the response head is in (bo->beresp); fetch_body() gets the body */
    FETCH_REVALIDATED, /* our stale copy still holds (a 304): bo->renewed is the renewed object */
    FETCH_E_BUSY,      /* the backend is at max_connections: 503 */
    FETCH_E_CONNECT,   /* no connection: 503 */
    FETCH_E_SEND,      /* the request could not be sent: 503 */
    FETCH_E_TIMEOUT,   /* no response head in time: 504 */
    FETCH_E_BAD,       /* a response refused (malformed, ambiguous framing ...): 502 */
    FETCH_E_CLIENT,    /* the client's request body failed: gone, slow, or bad framing */
    FETCH_E_OVERFLOW,  /* the workspace ran out: 500 */
    FETCH_E_POLICY,    /* backend_fetch or backend_response abandoned the fetch or failed: 503 */
    FETCH_E_5XX,       /* the backend answered 500 to 504 and bo->stale_ok: the stale copy */
    FETCH_RETRY,       /* backend_response said "retry": the caller may fetch again */
    FETCH_FAILOVER,    /* connecting failed and bo->next_be, another healthy backend, may take it */
    /*
     * bo->upgrade, and the backend switched protocols: bo->beresp is its
     * 101, rxbuf[be_pos, be_len) what it sent past that head, bo->conn the
     * connection for the caller to tunnel and close (taken from bo before
     * fetch_done()).  No backend_response hook ran.
     */
    FETCH_UPGRADE,
    /*
     * bo->may_wait, and the request is sent: the answer is to be awaited
     * without blocking -- fetch_wait_fd(bo) turning readable, or
     * bo->first_deadline passing -- and then fetch_head_resume() called,
     * on any thread.  Nothing of the answer was read yet.
     */
    FETCH_WAIT,
};

/* The status a failure answers, as the comments above say; 0 for the others. */
unsigned fetch_result_status(enum fetch_result r);

/*
 * Where a fetch's body pieces go, ready for the client that asked
 * (coded as bo->gz_client says).  A piece points into the fetch's
 * buffers, valid until the next flush: flush() sends what was given.
 * Both return 0, or -1 when the client failed -- then the fetch goes on
 * for the cache if it stores the object (and for the requests streaming
 * from it), and stops otherwise.
 */
struct fetch_sink {
    int (*piece)(void *priv, const char *p, size_t len);
    int (*flush)(void *priv);
    void *priv;
};

/*
 * An interim response for the client that asked (103 Early Hints): its
 * field lines, "Name: value\r\n" each, hop-by-hop ones removed, valid
 * during the call.  Never stored.  What it returns is ignored: a client
 * gone is the final response's concern.
 */
typedef int fetch_interim_f(void *priv, unsigned status, const struct txt *fields);

/*
 * A busy object: one backend transaction.  The caller fills the fields
 * above the line before fetch_head(); the fetch owns those below it.
 */
struct busyobj {
    unsigned magic;
#define BUSYOBJ_MAGIC 0x3c90e5d7
    /* -- set by the caller -- */
    struct ws *ws;              /* where the fetch allocates (the request's workspace) */
    char *rxbuf;                /* the backend receive buffer (the worker's) */
    size_t rxsize;
    const struct http *creq;    /* the client's request head (the policy's view of it) */
    /*
     * The backend hooks' context (pol.h): what they see of the client and
     * the request, req.backend, where their strings go.  Needed when
     * pol_active(); a background refresh's has no request behind it.
     */
    struct pol_bctx *pol;
    char client_ip[INET6_ADDRSTRLEN]; /* X-Forwarded-For */
    bool client_tls;            /* X-Forwarded-Proto: https */
    bool head_only;             /* the client asked HEAD: a pass sends HEAD, a miss GET */
    enum h1_body body;          /* the request body's framing: H1_BODY_NONE, LENGTH, CHUNKED */
    uint64_t clen;              /* its length, for H1_BODY_LENGTH */
    /* The next piece of the request body, as tp_ops.body_next; NULL with no body. */
    ssize_t (*body_next)(void *priv, const char **data);
    void *body_priv;
    bool *body_bad;             /* set by body_next's owner when the client's framing was bad */
    const struct sess *sp;      /* the client connection, for PROXY headers to backends; NULL */
    struct be *be;              /* where it goes */
    struct dir *dir;            /* the director it came from: failover picks there; NULL */
    struct be *const *tried;    /* backends that failed to connect already (skip them) */
    unsigned ntried;
    const char *key;            /* the cache key, for directors that hash it */
    size_t keylen;
    struct cobj *oc;            /* the busy object to fill (a miss or refresh), NULL for a pass */
    struct hsh_stale stale;     /* a stale copy: to revalidate (borrowed from the caller) */
    bool stale_ok;              /* it may stand in for a backend's 5xx (FETCH_E_5XX) */
    bool bg;                    /* a background refresh: no client at all */
    bool include;               /* for an ESI include (req.esi_level > 0): kept gzip when
                                 * compressed, so that pages splice it (fetch_gz.c) */
    unsigned retries;           /* the policy's "retry"s so far (bereq.retries) */
    /*
     * The client asks to switch protocols (req->upgrade; a pass): its
     * Upgrade goes to the backend with Connection: upgrade, and a 101
     * ends the fetch with FETCH_UPGRADE.  Any other answer is an
     * ordinary response, after which the backend connection is closed.
     */
    bool upgrade;
    /*
     * A pipe's backend request (fetch_pipe_bereq(), then the pipe hook):
     * sent as it is but for the framing, which is ours, instead of one
     * built here; backend_fetch does not run.  NULL: build one.
     */
    struct http *pipe_bereq;
    fetch_interim_f *interim;   /* 103s as they come; NULL: nobody takes them */
    void *interim_priv;
    struct trace_tx *trace;     /* its backend transaction while traced (trace.h), or NULL */
    bool may_wait;              /* fetch_head() may answer FETCH_WAIT rather than block */
    /* -- the fetch's own -- */
    bool miss;                  /* it fetches the whole object for the cache (GET, no conditions) */
    struct http *bereq;         /* the backend request, as sent (for the backend hooks) */
    struct http beresp[1];      /* the response head, parsed into rxbuf */
    struct be *next_be;         /* FETCH_FAILOVER: the one to try next */
    struct bcp_conn *conn;
    size_t be_len;              /* bytes in rxbuf */
    size_t be_pos;              /* first unconsumed byte in rxbuf */
    enum h1_body rbody;         /* the response body's framing */
    uint64_t rclen;             /* its length, for H1_BODY_LENGTH */
    struct h1_framing frame;    /* the response's framing, from h1_resp_body() */
    bool be_keepalive;          /* the backend allows reuse of the connection */
    bool complete;              /* fetch_body() read the whole body: the connection may go back */
    bool client_failed;         /* the sink failed; the fetch went on for the cache */
    bool keep_for_readers;      /* over max_object_size with readers streaming: finish, do
                                 * not publish */
    uint64_t body_off;          /* body bytes received so far */
    enum fetch_gz gz_want;      /* the plan, from the response head (fetch__gz_plan) */
    enum gz_coding coding;      /* the plan's coding (see enum fetch_gz) */
    bool client_coded;          /* the client takes bo->coding as it is */
    enum gz_coding cl_coding;   /* the coding the client gets (fetch_codings()) */
    struct gz *gz_cl;           /* the encoder of the client's coding when it is neither
                                 * the stored one nor identity, or NULL */
    struct gz *gz;              /* the filter of the plan, once the fetch knows it needs one */
    bool gz_client;             /* the client gets the filter's output, not the backend's bytes */
    int pol_gzip;               /* beresp.do_gzip: -1 not set, 0 never compress, 1 compress */
    int pol_gunzip;             /* beresp.do_gunzip: 1 decode a gzip body */
    bool hold;                  /* beresp.do_stream = false: deliver once stored, not while */
    int pol_esi;                /* beresp.do_esi: -1 not set (Surrogate-Control decides), 0, 1 */
    struct fetch_esi *esi;      /* the body is parsed for ESI (fetch_esi.c): delivered complete */
    bool stored;                /* the response is being stored (bo->oc kept) */
    struct fetch_te *te;        /* the transfer codings to undo (fetch_te.c), or NULL */
    enum bcp_refuse why;        /* why the response was refused */
    struct cobj *renewed;       /* FETCH_REVALIDATED: the renewed object, referenced */
    /*
     * fetch__decide_store(): why the response is not stored (FRESH_STORE:
     * it is), for Cache-Status detail= on the client's head.
     */
    enum fresh_store store_why;
    double t_req;               /* tim_real() when the request went out */
    double first_deadline;      /* tim_mono(): the response head must have begun by then */
    struct txt xhead;           /* the backend request's head, for a retried exchange */
    unsigned xretries;          /* dead reused connections retried in this exchange */
    double t_resp;              /* tim_real() when the response head arrived */
};

/* Zero bo and set its magic; the caller then fills its part. */
void fetch_init(struct busyobj *bo);
/*
 * The backend request of a pipe, for the pipe hook (fetch_bereq.c): the
 * client's head as parsed, framing included (the body follows raw),
 * X-Forwarded-For and -Proto as on any backend request.  With bo->upgrade
 * its Upgrade and Connection stay; without, an Upgrade (h2c, an HTTP/1.0
 * one, one not listed in Connection) is removed and the backend is told
 * Connection: close, so that it takes nothing after this request for its
 * own.  NULL when the workspace is full.
 */
struct http *fetch_pipe_bereq(struct busyobj *bo);
/*
 * Build the backend request (the backend_fetch hook may edit it, or send
 * it elsewhere: bo->pol->dir, then bo->dir and bo->be follow), connect,
 * send it with the request body, read the response head, run
 * backend_response and decide whether the object is stored.  A miss asks
 * for the whole object (GET, no conditions, no Range); a stale copy with
 * validators makes it a revalidation.
 */
enum fetch_result fetch_head(struct busyobj *bo);
/*
 * After FETCH_WAIT: the socket to watch for the answer (plain TCP; a TLS
 * backend's connection never answers FETCH_WAIT).
 */
int fetch_wait_fd(const struct busyobj *bo);
/*
 * After FETCH_WAIT, on any worker: bo->rxbuf, bo->rxsize and bo->ws set
 * again for it, the socket readable, or `expired` when first_deadline came
 * first (FETCH_E_TIMEOUT, as a blocking fetch would have answered).  Goes
 * on as fetch_head() does; may answer FETCH_WAIT again (a dead reused
 * connection, retried on another).
 */
enum fetch_result fetch_head_resume(struct busyobj *bo, bool expired);
/*
 * The body, through its filters, into the object (when stored) and to
 * sink (NULL: nobody takes it).  0 complete; -1 the backend failed (the
 * object is not published); -2 the sink failed and nothing else wanted
 * the rest.
 */
int fetch_body(struct busyobj *bo, const struct fetch_sink *sink);
/*
 * The end of a fetch: the connection recycled or closed, the filters
 * freed, a busy object still held abandoned (waiters fetch again).
 */
void fetch_done(struct busyobj *bo);
/*
 * Whether a hook's "retry" may fetch again after `retries` of them:
 * within max_retries, and with no request body (framed as `body`: the
 * attempt that failed consumed it).  Logs why not.
 */
bool fetch_retry_allowed(enum h1_body body, unsigned retries);
/*
 * A fetch for the cache alone, with nobody to answer (fetch_bg.c): a
 * background refresh.  bo is filled as for fetch_head(), with bo->oc the
 * busy object to fill and bo->pol a context detached from any request
 * (pol_bctx_detach()).  Runs the attempts a request's fetch would -- the
 * policy's retries, failover within bo->dir -- and the body into the
 * object; a failure keeps the stale copy (cache_bgfetch_failed).  bo->oc
 * is published or abandoned when it returns.  Blocks on the backend.
 */
void fetch_refresh(struct busyobj *bo);

#endif
