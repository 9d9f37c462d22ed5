/*
 * trace -- the request trace behind `surogatctl log -g`: the detailed mode
 * of the live request log (rlog.h keeps one record per request; this says
 * what happened inside it).
 *
 * A trace is a sequence of variable-length records, each a tag
 * (tbl/trace_tags.h), the id of its transaction and a payload of text,
 * written by a worker into a byte ring of its own, as Varnish's shared
 * memory log is.  A transaction is a client request (kind req) or a
 * backend transaction (bereq): the fetch of a miss or a pass, linked to
 * its request, or a background refresh, linked to the request that
 * started it.
 *
 * Records are written only while a trace reader is attached
 * (trace_readers, read without a lock): a request begins its transaction
 * then, and every emission point is a macro that costs one predictable
 * branch on a NULL transaction otherwise.  The writer never waits for a
 * reader: it overwrites the oldest bytes, and a reader that fell behind
 * detects it, resynchronises at a record boundary and counts what it lost.
 *
 * Emission is one line at each point in the request core:
 *
 *     TRACE(req->trace, FETCH_ERROR, "%s", ...);  printf-style, any tag
 *     TRACE_CAT(req->trace, HOOK, a, " ", b);     strings end to end
 *     TRACE_HTTP(f->trace, BERESP, f->resp);      a whole head
 *     TRACE_TS(f->trace, "Bereq");                a timestamp
 *
 * Workers only.  A transaction lives in its request's workspace and goes
 * with it when it parks on a waiting list; it writes into the ring of
 * whichever worker runs it.
 */
#ifndef SUROGAT_TRACE_H
#define SUROGAT_TRACE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "surogat/fresh.h"
#include "surogat/tq.h"

struct cobj;
struct hsh_stale;
struct http;
struct req;
struct sb;
struct tp_head;
struct ws;

enum trace_tag {
#define TRACE_TAG(name, str, doc) TRACE_T_##name,
#include "surogat/tbl/trace_tags.h"
    TRACE_T__N
};
const char *trace_tag_name(enum trace_tag t); /* "ReqURL"; NULL past the table */
const char *trace_tag_doc(enum trace_tag t);  /* its documentation; NULL past the table */

/* Bytes of one record's payload at most: longer ones are cut there. */
#define TRACE_PAYLOAD_MAX 4000

/*
 * Per-worker rings of ring_bytes each (rounded up to a power of two, at
 * least 64 KiB), allocated by a worker when it first traces and kept
 * after it exits for the next one.  Main thread, before the workers;
 * trace_fini() when no reader or worker remains.
 */
int trace_init(size_t ring_bytes);
void trace_fini(void);

/* Trace readers attached now.  Workers read it without a lock, once per request. */
extern unsigned trace_readers;
static inline bool
trace_wanted(void)
{
    return (__builtin_expect(__atomic_load_n(&trace_readers, __ATOMIC_RELAXED) != 0, 0));
}

/*--------------------------------------------------------------------
 * Writing.  A NULL struct trace_tx * means "not traced" everywhere.
 */

struct trace_tx; /* opaque: a transaction being traced */

/*
 * A client request's transaction, when a reader is attached: its Begin,
 * Timestamp Start, ReqStart and request head records.  NULL otherwise or
 * when the workspace is full.
 */
struct trace_tx *trace__req_begin(struct req *req);
static inline struct trace_tx *
trace_req_begin(struct req *req)
{
    return (trace_wanted() ? trace__req_begin(req) : NULL);
}
/*
 * An ESI include's request `sub` of a traced page (its request's
 * transaction): a transaction of its own, linked to the page's ("req N
 * esi"), with its Begin, Start, ReqStart and head.  NULL when page is.
 * The include ends it as any request, TRACE_REQ_END(sub).
 */
struct trace_tx *trace__esi_begin(struct trace_tx *page, struct req *sub);
static inline struct trace_tx *
trace_esi_begin(struct trace_tx *page, struct req *sub)
{
    return (page != NULL ? trace__esi_begin(page, sub) : NULL);
}
/*
 * The request is over: its open
 * backend transaction ends, then Cache, Length, Timestamp End and End.  A
 * request refused before trace_req_begin() (a bad head) gets its
 * transaction here if a reader is attached.  A macro: req is a struct
 * req * at the call site, whose trace field it reads.
 */
void trace__req_end(struct req *req);
#define TRACE_REQ_END(req)                                               \
    do {                                                                 \
        if (__builtin_expect((req)->trace != NULL, 0) || trace_wanted()) \
            trace__req_end(req);                                         \
    } while (0)
/*
 * The backend transaction of a fetch for req's transaction `parent`
 * (why: "fetch", "pass", "bgfetch"): the open one again after a retry,
 * or a new one in ws (the request's workspace), linked.  A background fetch's request is its own
 * backend transaction.  NULL when parent is.
 */
struct trace_tx *trace__fetch(struct trace_tx *parent, struct ws *ws, const char *why);
static inline struct trace_tx *
trace_fetch(struct trace_tx *parent, struct ws *ws, const char *why)
{
    return (parent != NULL ? trace__fetch(parent, ws, why) : NULL);
}
/*
 * Where a backend hook's records go: tx's open backend transaction, tx
 * itself when it is one (a background fetch) or has none; NULL for NULL.
 */
struct trace_tx *trace_backend(struct trace_tx *tx);
/* A restart: the open backend transaction ends; Restart n. */
void trace_restart(struct trace_tx *tx, unsigned n);

/*
 * A background fetch crosses to another worker: trace_bg_link() gives
 * it an id and writes the Link in the request's transaction;
 * trace_bg_begin() starts it on the worker that runs it, in that
 * worker's workspace (NULL when the link is empty: the request was not
 * traced); trace_bg_end() ends it (NULL is fine).
 */
struct trace_link {
    uint64_t id, parent;
};
void trace_bg_link(struct trace_tx *tx, struct trace_link *tl);
struct trace_tx *trace_bg_begin(struct ws *ws, const struct trace_link *tl);
void trace_bg_end(struct trace_tx *tx);

/*
 * One record of any tag but Timestamp (trace_ts()'s): bytes, printf-style
 * text, or strings end to end (the list ends with NULL).  trace_cat() for
 * what every request writes: printf costs a worker several times as much.
 */
void trace_rec(struct trace_tx *tx, enum trace_tag tag, const char *p, size_t len);
void trace_printf(struct trace_tx *tx, enum trace_tag tag, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void trace_cat(struct trace_tx *tx, enum trace_tag tag, ...) __attribute__((sentinel));
/*
 * A whole head: method, URL, protocol and fields for REQ and BEREQ;
 * protocol, status, reason and fields for BERESP and RESP.  BERESP and
 * RESP add their timestamp (Beresp, Resp).
 */
enum trace_http {
    TRACE_H_REQ,
    TRACE_H_BEREQ,
    TRACE_H_BERESP,
    TRACE_H_RESP,
};
void trace_http(struct trace_tx *tx, enum trace_http which, const struct http *hp);
/* A response head as the deliverer hands it to the transport: RESP records and Resp. */
void trace_head(struct trace_tx *tx, const struct tp_head *h);
/* The cache key: "host | url | piece ...". */
void trace_key(struct trace_tx *tx, const char *key, size_t len);
/* Timestamp event: now, since the transaction's start, since its previous timestamp. */
void trace_ts(struct trace_tx *tx, const char *event);
/*
 * What hsh_lookup() answered (res: enum hsh_result), with the object it
 * gave (oc on a hit or a stream, stale->oc on grace), at `now`.
 */
void trace_lookup(struct trace_tx *tx, int res, const struct cobj *oc,
                  const struct hsh_stale *stale, double now);
/*
 * The cacheability decision: st, and for a stored response its timing fo
 * (times relative to t_resp) and keep_dflt (default_keep); for one not
 * stored, the hit-for-miss marker's lifetime.
 */
void trace_store(struct trace_tx *tx, enum fresh_store st, const struct fresh_obj *fo,
                 double t_resp, double keep_dflt, double hfm_ttl);
/* The body of a fetch ended (rv: 0 complete, -1 the backend failed, -2 the client). */
void trace_body(struct trace_tx *tx, int rv, uint64_t bytes);

/* Each a no-op, one branch, when the transaction is NULL. */
#define TRACE_CALL(tx, fn, ...)                \
    do {                                       \
        if (__builtin_expect((tx) != NULL, 0)) \
            fn((tx), __VA_ARGS__);             \
    } while (0)
#define TRACE(tx, tag, ...)              TRACE_CALL(tx, trace_printf, TRACE_T_##tag, __VA_ARGS__)
#define TRACE_CAT(tx, tag, ...)          TRACE_CALL(tx, trace_cat, TRACE_T_##tag, __VA_ARGS__, NULL)
#define TRACE_HTTP(tx, which, hp)        TRACE_CALL(tx, trace_http, TRACE_H_##which, hp)
#define TRACE_HEAD(tx, h)                TRACE_CALL(tx, trace_head, h)
#define TRACE_KEY(tx, key, len)          TRACE_CALL(tx, trace_key, key, len)
#define TRACE_TS(tx, event)              TRACE_CALL(tx, trace_ts, event)
#define TRACE_LOOKUP(tx, res, oc, st, t) TRACE_CALL(tx, trace_lookup, res, oc, st, t)
#define TRACE_STORE(tx, st, ...)         TRACE_CALL(tx, trace_store, st, __VA_ARGS__)
#define TRACE_BODY(tx, rv, bytes)        TRACE_CALL(tx, trace_body, rv, bytes)
#define TRACE_BG_LINK(tx, tl)            TRACE_CALL(tx, trace_bg_link, tl)
#define TRACE_RESTART(tx, n)             TRACE_CALL(tx, trace_restart, n)

/*--------------------------------------------------------------------
 * Reading: the admin thread's log streams.
 */

struct trace_reader; /* opaque: one per stream */

/*
 * A reader, counted in trace_readers from now on (so workers start
 * tracing).  history: begin with what the rings hold now; otherwise with
 * records written from now on.
 */
struct trace_reader *trace_reader_new(bool history);
void trace_reader_free(struct trace_reader **rdp); /* *rdp = NULL; uncounted */
/* One record as a reader copied it: p valid during the call only. */
struct trace_record {
    uint64_t tx;
    enum trace_tag tag;
    /*
     * Its transaction's run that wrote it, mod 256: a transaction that
     * moved to another worker (a parked request, resumed) may be read
     * from the new worker's ring before the old one's.
     */
    unsigned part;
    const char *p;
    size_t len;
};
typedef void trace_rec_f(void *priv, const struct trace_record *rec);
/*
 * fn for each record written since the last call, in order within each
 * ring; *missed += records overwritten before this reader got to them.
 * One thread at a time per reader.  Returns the bytes read.
 */
size_t trace_reader_poll(struct trace_reader *rd, trace_rec_f *fn, void *priv, uint64_t *missed);

/*
 * Grouping records into transactions, and transactions into what a
 * stream prints: a request with its backend transactions (-g request;
 * a background fetch under the request that started it), or each
 * transaction alone (-g tx).
 */
enum trace_grouping {
    TRACE_G_REQUEST,
    TRACE_G_TX,
};
enum trace_kind {
    TRACE_K_REQ,
    TRACE_K_BEREQ,
};
struct trace_item {
    enum trace_tag tag;
    uint32_t off, len; /* payload: txn->data + off */
    uint8_t part;      /* trace_record.part: items are in part order, then read order */
};
/* A transaction as a reader reassembled it. */
struct trace_txn {
    uint64_t id, parent;
    enum trace_kind kind;
    bool begun; /* its Begin was read */
    bool ended; /* its End was read */
    unsigned nitem;
    struct trace_item *item;
    char *data;
    unsigned nchild; /* its children in link order (-g request only) */
    struct trace_txn **child;
    /* the grouper's */
    size_t dlen, dcap, icap, ccap;
    struct trace_txn *hnext; /* hash chain */
    struct trace_txn *up;    /* its parent, when present */
    double t_seen;           /* when its last record (or its group's) was read */
    double t_end;            /* when its End was read */
    bool in_roots;
};
struct trace_grouper;
struct trace_grouper *trace_grouper_new(enum trace_grouping g);
void trace_grouper_free(struct trace_grouper **gp);
/*
 * Add one record read at `now` (seconds, any clock the caller keeps
 * using), after its transaction's records of the same or earlier parts.
 */
void trace_grouper_add(struct trace_grouper *g, double now, const struct trace_record *rec);
/*
 * fn for each group that is ready: complete (its transactions ended),
 * or given up on (nothing read for it in TRACE_GROUP_TMO seconds, a
 * linked transaction that never began in TRACE_LINK_WAIT, or too many
 * groups open); `all`: every group, complete or not.  complete says
 * which.  The group is freed when fn returns.  Returns the groups given.
 */
#define TRACE_GROUP_TMO  120.0
#define TRACE_LINK_WAIT  5.0
#define TRACE_GROUP_OPEN 8192
typedef void trace_group_f(void *priv, const struct trace_txn *root, bool complete);
unsigned trace_grouper_flush(struct trace_grouper *g, double now, bool all, trace_group_f *fn,
                             void *priv);

/*
 * Output of a group (trace_fmt.c): varnishlog-like text, a line per
 * record, the request's backend transactions indented under it, and a
 * blank line after; or one JSON object on one line.
 */
void trace_group_text(struct sb *sb, const struct trace_txn *root, bool complete);
void trace_group_json(struct sb *sb, const struct trace_txn *root, bool complete);
/*
 * tq_get_f over a group (subj: its root), for -q: the fields of the
 * request and of its backend transactions.  Duration is the root's.
 */
bool trace_group_get(void *subj, enum tq_field f, const char *hname, unsigned i, struct tq_val *v);

#endif
