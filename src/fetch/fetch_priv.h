/*
 * fetch_priv -- shared by the files of the fetch module: the transaction
 * state and the cache-side steps (fetch_store.c).
 */
#ifndef SUROGAT_FETCH_PRIV_H
#define SUROGAT_FETCH_PRIV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "surogat/bcp.h"
#include "surogat/gz.h"
#include "surogat/h1.h"
#include "surogat/hsh.h"
#include "surogat/http.h"
#include "surogat/fresh.h"

struct bcp_conn;
struct fetch_te;
struct gz;
struct trace_tx;

/* What a fetch does with gzip (fetch_gz.c). */
enum fetch_gz {
    FGZ_NONE,
    FGZ_COMPRESS, /* compress the identity body: for the store, and for a client taking gzip */
    FGZ_CHECK,    /* the backend sent gzip: check it, gunzip it for a client not taking gzip */
    FGZ_GUNZIP,   /* the backend sent gzip and beresp.do_gunzip: store and send it decoded */
};

/* Backends one fetch may try in turn when connecting fails (failover). */
#define FETCH_TRIED_MAX 8

struct fetch {
    struct req *req;
    struct be *be;
    struct be *const *tried; /* backends that failed to connect already (skip them) */
    unsigned ntried;
    struct be *next_be;      /* exchange(): the healthy one to fail over to */
    struct bcp_conn *conn;
    struct http resp[1];
    size_t be_len;       /* bytes in wrk->be */
    size_t be_pos;       /* first unconsumed byte in wrk->be */
    enum h1_body body;
    uint64_t clen;
    bool be_keepalive;   /* the backend allows reuse of the connection */
    bool chunk_out;      /* we chunk the body towards the client */
    bool body_to_client; /* false for HEAD, 304 and 416: the body is only stored */
    bool to_client;      /* anything goes to the client: false for a background fetch,
                          * and once the client failed while the body is still stored */
    bool bg;             /* a background refresh: there is no client at all */
    bool client_failed;  /* a write to the client failed; the fetch went on for the cache */
    bool keep_for_readers; /* over max_object_size with readers streaming: finish, do
                            * not publish */
    unsigned status_override; /* 304, 206 or 416 for a miss, or 0 */
    int range;           /* 0 the whole body; 1 bytes [r_first, r_last] (206); 2 none (416) */
    uint64_t r_first, r_last;
    uint64_t body_off;   /* body bytes received so far */
    struct cobj *oc;     /* the busy object being filled, or NULL for a pass */
    struct hsh_stale stale; /* a stale copy: to revalidate, or to serve on error */
    enum fetch_gz gz_want;  /* the plan, from the response head (fetch__gz_plan) */
    struct gz *gz;          /* the filter of the plan, once the fetch knows it needs one */
    bool client_gz;         /* the client accepts gzip */
    bool gz_client;         /* the client gets the filter's output, not the backend's bytes */
    int pol_gzip;           /* beresp.do_gzip: -1 not set, 0 never compress, 1 compress */
    int pol_gunzip;         /* beresp.do_gunzip: 1 decode a gzip body */
    bool hold;              /* beresp.do_stream = false: deliver once stored, not while */
    struct fetch_te *te;    /* the transfer codings to undo (fetch_te.c), or NULL */
    struct h1_framing frame; /* the response's framing, from h1_resp_body() */
    enum bcp_refuse why;    /* read_beresp_head(): why it refused the head */
    double t_req;        /* tim_real() when the request went out */
    double t_resp;       /* tim_real() when the response head arrived */
    /*
     * fetch__decide_store(): why the response is not stored (FRESH_STORE:
     * it is), for Cache-Status detail= on the client's head.
     */
    enum fresh_store store_why;
    struct trace_tx *trace; /* the backend transaction being traced, or NULL */
};

/*
 * A background refresh of the busy *ocp (taken) for the stale copy in
 * stale (borrowed), on a pool worker, for a request built by fetch_bg.
 */
void fetch__run_bg(struct req *req, struct be *be, struct cobj **ocp, struct hsh_stale *stale);
/* Keep the response's Location and Content-Location for invalidation (unsafe methods). */
/*
 * After the response head: keep the busy object only if the response may
 * be stored.  -1 when the policy refused the response (answer 503); -2
 * when its backend_response said "retry" (the busy object is kept).
 */
int fetch__decide_store(struct fetch *f);
/*
 * Body bytes for the busy object: stored, or past max_object_size the
 * object is dropped (at once, or after its streaming readers got it all).
 */
void fetch__store_body(struct fetch *f, const char *p, size_t len);
/* The whole body is in: publish the busy object (or drop it, see above). */
void fetch__store_done(struct fetch *f);
/* The backend said 304 to our revalidation: renew, publish and deliver.  -1: answer 502. */
int fetch__revalidated(struct fetch *f);

/*
 * gzip (fetch_gz.c).  Plan from the response head, before
 * fetch__decide_store() builds the stored head from the plan.
 */
void fetch__gz_plan(struct fetch *f);
/* After fetch__decide_store(): make the filter the plan needs now that storing is decided. */
void fetch__gz_begin(struct fetch *f);
/*
 * Body bytes through the filter: the stored bytes go to the busy
 * object, the client's (f->gz_client) to cl.  0; -1 the backend's gzip
 * is corrupt (the fetch must fail); FETCH_GZ_BOMB it inflates past
 * gunzip_max_size or gunzip_max_ratio (counted and logged here; the
 * fetch must fail); -2 cl failed.
 */
#define FETCH_GZ_BOMB (-4)
int fetch__gz_body(struct fetch *f, const char *p, size_t len, bool flush, gz_out_f *cl,
                   void *priv);
/* The body ended: finish the filter.  As fetch__gz_body(). */
int fetch__gz_end(struct fetch *f, gz_out_f *cl, void *priv);
void fetch__gz_free(struct fetch *f);

/*
 * Transfer codings (fetch_te.c): a decoder for the fr->ncoding > 0
 * codings of a response, fed the body once its framing is undone.  What
 * comes out goes to sink, each piece valid only during the call.
 */
struct fetch_te *fetch__te_new(const struct h1_framing *fr);
/*
 * 0; what sink returned when it failed; FETCH_TE_CORRUPT when a coding is
 * bad; FETCH_TE_BOMB when one inflates past gunzip_max_size or
 * gunzip_max_ratio.
 */
int fetch__te_feed(struct fetch_te *te, const char *p, size_t len, gz_out_f *sink, void *priv);
#define FETCH_TE_CORRUPT (-3)
#define FETCH_TE_BOMB    (-5)
/* The body ended: every coding must be complete.  As fetch__te_feed(). */
int fetch__te_end(struct fetch_te *te, gz_out_f *sink, void *priv);
void fetch__te_free(struct fetch_te **tep); /* *tep = NULL; NULL is fine */

#endif
