/*
 * The request trace, writer side: per-worker byte rings of tagged records
 * and the transactions that write them (see trace.h for the contract).
 *
 * A ring is `size` bytes (a power of two) addressed by a 64-bit position
 * that only grows; byte p lives at buf[p & mask].  A record is a header
 * (struct trace_rh) and its payload padded to 8 bytes, written at the
 * ring's head by the one worker that owns the ring:
 *
 *     reserve = head + n            relaxed: "bytes below this - size are going"
 *     seg_first[...] = head         relaxed, when the record starts a segment
 *     release fence
 *     header and payload
 *     head = head + n               release: published
 *
 * A reader copies bytes below the head it loaded, then (acquire fence)
 * loads reserve: whatever it copied below reserve - size may have been
 * overwritten while it copied, and is thrown away.  To start again at a
 * record boundary the ring is cut in TRACE_SEGS segments, and the
 * position of the first record starting in each is kept (seg_first): a
 * record is never as long as a segment, so every segment has one.  The
 * reader side is trace_read.c.
 *
 * Rings are made by the worker that first traces (the thread's tl_ring),
 * handed back when it exits, and taken over by the next worker that
 * traces (log_priv.h: the list is kept as the request log's is).
 * trace_fini() frees them.  A transaction lives in its request's
 * workspace.
 */
#include "config.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "surogat/defs.h"
#include "surogat/hsh.h"
#include "surogat/http.h"
#include "surogat/req.h"
#include "surogat/sess.h"
#include "surogat/tim.h"
#include "surogat/tp.h"
#include "surogat/trace.h"
#include "surogat/wrk.h"
#include "surogat/ws.h"

#include "trace_priv.h"

unsigned trace_readers;

struct log_rings trace__rings = LOG_RINGS_INIT;
static size_t ring_size = 1u << 20; /* bytes per ring; set before any ring is made */
static uint64_t next_tx;            /* atomic: transaction ids, 0 is none */

static __thread struct trace_ring *tl_ring; /* this thread's, once it traced */

static const char *const tag_name[TRACE_T__N] = {
#define TRACE_TAG(name, str, doc) [TRACE_T_##name] = str,
#include "surogat/tbl/trace_tags.h"
};

static const char *const tag_doc[TRACE_T__N] = {
#define TRACE_TAG(name, str, doc) [TRACE_T_##name] = doc,
#include "surogat/tbl/trace_tags.h"
};

struct trace_tx {
    unsigned magic;
#define TRACE_TX_MAGIC 0x1f6c83d2
    enum trace_kind kind;
    uint64_t id;
    double t_start;         /* tim_real() at its Begin */
    double t_last;          /* its previous timestamp */
    struct trace_tx *bereq; /* a request's open backend transaction, or NULL */
    /*
     * The ring it last wrote to, and how many times it moved to another
     * (mod 256): a request parked on a waiting list resumes on any
     * worker, and a reader that copies the new ring first puts the
     * records back in order by this (trace_priv.h).
     */
    const struct trace_ring *ring;
    uint8_t part;
    unsigned client_proto; /* a request's, from its head (11 or 20): its response's too */
};

const char *
trace_tag_name(enum trace_tag t)
{
    return ((unsigned)t < TRACE_T__N ? tag_name[t] : NULL);
}

const char *
trace_tag_doc(enum trace_tag t)
{
    return ((unsigned)t < TRACE_T__N ? tag_doc[t] : NULL);
}

/*--------------------------------------------------------------------
 * Rings.
 */

void
trace__wrk_exit(void)
{
    struct trace_ring *r = tl_ring;

    if (r == NULL)
        return;
    tl_ring = NULL;
    log__ring_put(&trace__rings, &r->lr);
}

int
trace_init(size_t ring_bytes)
{
    size_t n = TRACE_RING_MIN;

    if (log__rings_started(&trace__rings))
        return (-1);
    while (n < ring_bytes && n < TRACE_RING_MAX)
        n <<= 1;
    ring_size = n;
    return (0);
}

/* log_ring_free_f */
static void
ring_free(struct log_ring *lr)
{
    struct trace_ring *r = LOG_RING_OF(lr, struct trace_ring, lr);

    OBJ_CHECK(r, TRACE_RING_MAGIC);
    free(r->buf);
    OBJ_FREE(&r);
}

void
trace_fini(void)
{
    log__rings_fini(&trace__rings, ring_free, tl_ring != NULL ? &tl_ring->lr : NULL);
    tl_ring = NULL;
}

/* log_ring_make_f, under the list's lock. */
static struct log_ring *
ring_make(void)
{
    struct trace_ring *r = aligned_alloc(64, sizeof *r); /* a multiple of 64: see reserve */

    AN(r);
    memset(r, 0, sizeof *r);
    r->magic = TRACE_RING_MAGIC;
    r->size = ring_size;
    r->mask = ring_size - 1;
    while ((UINT64_C(1) << r->segshift) < ring_size / TRACE_SEGS)
        r->segshift++;
    /* Untouched until written: a ring costs memory only as it fills. */
    r->buf = calloc(1, ring_size);
    AN(r->buf);
    return (&r->lr);
}

/* This thread's ring: the one it has, one an exited worker left, or a new one. */
static struct trace_ring *
my_ring(void)
{
    if (tl_ring == NULL)
        tl_ring = LOG_RING_OF(log__ring_get(&trace__rings, ring_make), struct trace_ring, lr);
    return (tl_ring);
}

static void
ring_copy(struct trace_ring *r, uint64_t pos, const void *p, size_t len)
{
    size_t at = (size_t)(pos & r->mask), first = SRG_MIN(len, (size_t)r->size - at);

    memcpy(r->buf + at, p, first);
    if (first < len)
        memcpy(r->buf, (const char *)p + first, len - first);
}

/* One record of tx's: a then b (b may be NULL), cut to TRACE_PAYLOAD_MAX. */
static void
ring_put(struct trace_tx *tx, enum trace_tag tag, const char *a, size_t alen, const char *b,
         size_t blen)
{
    static const char zero[8];
    struct trace_ring *r = my_ring();
    struct trace_rh rh;
    uint64_t pos = r->head, seg, n;

    if (__builtin_expect(tx->ring != r, 0)) {
        if (tx->ring != NULL)
            tx->part++;
        tx->ring = r;
    }
    if (alen > TRACE_PAYLOAD_MAX)
        alen = TRACE_PAYLOAD_MAX;
    if (blen > TRACE_PAYLOAD_MAX - alen)
        blen = TRACE_PAYLOAD_MAX - alen;
    rh.tx = tx->id;
    rh.seq = r->seq++;
    rh.tag = (uint8_t)tag;
    rh.part = tx->part;
    rh.len = (uint16_t)(alen + blen);
    n = TRACE_REC_SIZE(rh.len);
    seg = pos >> r->segshift;
    __atomic_store_n(&r->reserve, pos + n, __ATOMIC_RELAXED);
    if (seg + 1 != r->last_seg) {
        __atomic_store_n(&r->seg_first[seg % TRACE_SEGS], pos, __ATOMIC_RELAXED);
        r->last_seg = seg + 1;
    }
    __atomic_thread_fence(__ATOMIC_RELEASE);
    ring_copy(r, pos, &rh, sizeof rh);
    if (alen > 0)
        ring_copy(r, pos + sizeof rh, a, alen);
    if (blen > 0)
        ring_copy(r, pos + sizeof rh + alen, b, blen);
    if (n > sizeof rh + rh.len)
        ring_copy(r, pos + sizeof rh + rh.len, zero, n - sizeof rh - rh.len);
    __atomic_store_n(&r->head, pos + n, __ATOMIC_RELEASE);
}

/*--------------------------------------------------------------------
 * Records.
 */

void
trace_rec(struct trace_tx *tx, enum trace_tag tag, const char *p, size_t len)
{
    OBJ_CHECK(tx, TRACE_TX_MAGIC);
    SRG_ASSERT((unsigned)tag < TRACE_T__N && tag != TRACE_T_TIMESTAMP);
    ring_put(tx, tag, p, len, NULL, 0);
}

static void __attribute__((format(printf, 3, 0)))
vrec(struct trace_tx *tx, enum trace_tag tag, const char *fmt, va_list ap)
{
    char buf[TRACE_PAYLOAD_MAX + 1];
    int n;

    n = vsnprintf(buf, sizeof buf, fmt, ap);
    if (n < 0)
        n = 0;
    trace_rec(tx, tag, buf, SRG_MIN((size_t)n, sizeof buf - 1));
}

void
trace_printf(struct trace_tx *tx, enum trace_tag tag, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vrec(tx, tag, fmt, ap);
    va_end(ap);
}

void
trace_cat(struct trace_tx *tx, enum trace_tag tag, ...)
{
    char buf[TRACE_PAYLOAD_MAX];
    const char *s;
    size_t o = 0, n;
    va_list ap;

    va_start(ap, tag);
    while ((s = va_arg(ap, const char *)) != NULL) {
        n = SRG_MIN(strlen(s), sizeof buf - o);
        memcpy(buf + o, s, n);
        o += n;
    }
    va_end(ap);
    trace_rec(tx, tag, buf, o);
}

/* "Name: value" without building it first. */
static void
rec_field(struct trace_tx *tx, enum trace_tag tag, const struct txt *name, const struct txt *val)
{
    char nb[256];
    size_t nl = SRG_MIN(name->len, sizeof nb - 2);

    memcpy(nb, name->b, nl);
    memcpy(nb + nl, ": ", 2);
    ring_put(tx, tag, nb, nl + 2, val->b, val->len);
}

/* Figures for records, written by hand: printf would be most of what a trace costs a worker. */
struct trace_fx
trace__ux(uint64_t v)
{
    struct trace_fx r;
    char digits[24];
    size_t o = 0, n = 0;

    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0);
    while (n > 0)
        r.s[o++] = digits[--n];
    r.s[o] = '\0';
    return (r);
}

struct trace_fx
trace__fx(double v, unsigned dec)
{
    static const uint64_t pow10[] = { 1, 10, 100, 1000, 10000, 100000, 1000000 };
    struct trace_fx r, ip;
    uint64_t scaled, fp;
    size_t o = 0, n;

    SRG_ASSERT(dec < ARRAY_LEN(pow10));
    if (!(v > -1e12 && v < 1e12)) { /* NaN, or past any time or size we log: rare */
        snprintf(r.s, sizeof r.s, "%.*f", (int)dec, v);
        return (r);
    }
    scaled = (uint64_t)((v < 0 ? -v : v) * (double)pow10[dec] + 0.5);
    if (v < 0 && scaled > 0)
        r.s[o++] = '-';
    ip = trace__ux(scaled / pow10[dec]);
    fp = scaled % pow10[dec];
    n = strlen(ip.s);
    memcpy(r.s + o, ip.s, n);
    o += n;
    if (dec > 0) {
        r.s[o++] = '.';
        for (unsigned i = dec; i-- > 0;) {
            r.s[o + i] = (char)('0' + fp % 10);
            fp /= 10;
        }
        o += dec;
    }
    r.s[o] = '\0';
    return (r);
}

/* A Timestamp: its figures as they are, formatted by the reader (trace_priv.h). */
static void
rec_ts(struct trace_tx *tx, const char *event, double t, double since, double prev)
{
    struct trace_ts_rec b = { t, since, prev };
    char buf[sizeof b + TRACE_TS_EVENT_MAX];
    size_t n = SRG_MIN(strlen(event), (size_t)TRACE_TS_EVENT_MAX);

    memcpy(buf, &b, sizeof b);
    memcpy(buf + sizeof b, event, n);
    OBJ_CHECK(tx, TRACE_TX_MAGIC);
    ring_put(tx, TRACE_T_TIMESTAMP, buf, sizeof b + n, NULL, 0);
}

void
trace_ts(struct trace_tx *tx, const char *event)
{
    double now = tim_real();

    OBJ_CHECK(tx, TRACE_TX_MAGIC);
    rec_ts(tx, event, now, now - tx->t_start, now - tx->t_last);
    tx->t_last = now;
}

/*--------------------------------------------------------------------
 * Transactions.
 */

/* In ws: the request's workspace, which goes with it when it parks. */
static struct trace_tx *
tx_new(struct ws *ws, enum trace_kind kind, uint64_t id, double t_start)
{
    struct trace_tx *tx = ws_alloc(ws, sizeof *tx);

    if (tx == NULL)
        return (NULL); /* not traced: the request answers as it would anyway */
    OBJ_INIT(tx, TRACE_TX_MAGIC);
    tx->kind = kind;
    tx->id = id != 0 ? id : __atomic_add_fetch(&next_tx, 1, __ATOMIC_RELAXED);
    tx->t_start = tx->t_last = t_start;
    return (tx);
}

static void
tx_end(struct trace_tx *tx)
{
    trace_ts(tx, "End");
    trace_rec(tx, TRACE_T_END, "", 0);
}

/* A request's transaction: a client's (parent NULL) or an ESI include's of page `parent`. */
static struct trace_tx *
req_tx(struct req *req, struct trace_tx *parent)
{
    struct trace_tx *tx;

    OBJ_CHECK(req, REQ_MAGIC);
    if (req->trace != NULL)
        return (req->trace);
    tx = tx_new(req->ws, TRACE_K_REQ, 0, req->t_start > 0 ? req->t_start : tim_real());
    if (tx == NULL)
        return (NULL);
    if (parent == NULL) {
        trace_rec(tx, TRACE_T_BEGIN, "req 0 rxreq", 11);
    } else {
        trace_cat(parent, TRACE_T_LINK, "req ", trace__ux(tx->id).s, " esi", NULL);
        trace_cat(tx, TRACE_T_BEGIN, "req ", trace__ux(parent->id).s, " esi", NULL);
    }
    rec_ts(tx, "Start", tx->t_start, 0, 0);
    if (req->sp != NULL)
        trace_cat(tx, TRACE_T_REQ_START, req->sp->client_ip, " ", req->sp->client_port, NULL);
    if (req->http->method.len > 0)
        trace_http(tx, TRACE_H_REQ, req->http);
    return (tx);
}

struct trace_tx *
trace__req_begin(struct req *req)
{
    return (req_tx(req, NULL));
}

struct trace_tx *
trace__esi_begin(struct trace_tx *page, struct req *sub)
{
    OBJ_CHECK(page, TRACE_TX_MAGIC);
    return (req_tx(sub, page));
}

void
trace__req_end(struct req *req)
{
    struct trace_tx *tx = req->trace;

    if (__builtin_expect(tx == NULL, 1)) {
        /*
         * A request without a connection (a unit test's) and an include
         * with no head of its own: only their own begin makes them traced.
         */
        if (!trace_wanted() || req->sp == NULL || req->esi_level > 0)
            return;
        /* Refused before the core saw it: the head as far as it was read. */
        if ((tx = req->trace = trace__req_begin(req)) == NULL)
            return;
    }
    OBJ_CHECK(tx, TRACE_TX_MAGIC);
    if (tx->bereq != NULL) {
        tx_end(tx->bereq);
        tx->bereq = NULL;
    }
    if (tx->kind == TRACE_K_REQ) {
        const char *c = req_outcome_name(req->outcome);
        trace_rec(tx, TRACE_T_CACHE, c, strlen(c));
        trace_cat(tx, TRACE_T_LENGTH, trace__ux(req->resp_bytes).s, NULL);
    }
    tx_end(tx);
    req->trace = NULL;
}

struct trace_tx *
trace__fetch(struct trace_tx *parent, struct ws *ws, const char *why)
{
    struct trace_tx *tx;

    OBJ_CHECK(parent, TRACE_TX_MAGIC);
    if (parent->kind == TRACE_K_BEREQ)
        return (parent); /* a background fetch: its own backend transaction */
    if (parent->bereq != NULL)
        return (parent->bereq);
    tx = tx_new(ws, TRACE_K_BEREQ, 0, tim_real());
    if (tx == NULL)
        return (NULL);
    trace_cat(parent, TRACE_T_LINK, "bereq ", trace__ux(tx->id).s, " ", why, NULL);
    trace_cat(tx, TRACE_T_BEGIN, "bereq ", trace__ux(parent->id).s, " ", why, NULL);
    rec_ts(tx, "Start", tx->t_start, 0, 0);
    parent->bereq = tx;
    return (tx);
}

struct trace_tx *
trace_backend(struct trace_tx *tx)
{
    if (tx == NULL)
        return (NULL);
    OBJ_CHECK(tx, TRACE_TX_MAGIC);
    return (tx->bereq != NULL ? tx->bereq : tx);
}

void
trace_restart(struct trace_tx *tx, unsigned n)
{
    OBJ_CHECK(tx, TRACE_TX_MAGIC);
    if (tx->bereq != NULL) {
        tx_end(tx->bereq);
        tx->bereq = NULL;
    }
    trace_printf(tx, TRACE_T_RESTART, "%u", n);
}

void
trace_bg_link(struct trace_tx *tx, struct trace_link *tl)
{
    OBJ_CHECK(tx, TRACE_TX_MAGIC);
    tl->parent = tx->id;
    tl->id = __atomic_add_fetch(&next_tx, 1, __ATOMIC_RELAXED);
    trace_cat(tx, TRACE_T_LINK, "bereq ", trace__ux(tl->id).s, " bgfetch", NULL);
}

struct trace_tx *
trace_bg_begin(struct ws *ws, const struct trace_link *tl)
{
    struct trace_tx *tx;

    if (tl->id == 0)
        return (NULL);
    tx = tx_new(ws, TRACE_K_BEREQ, tl->id, tim_real());
    if (tx == NULL)
        return (NULL);
    trace_cat(tx, TRACE_T_BEGIN, "bereq ", trace__ux(tl->parent).s, " bgfetch", NULL);
    rec_ts(tx, "Start", tx->t_start, 0, 0);
    return (tx);
}

void
trace_bg_end(struct trace_tx *tx)
{
    if (tx == NULL)
        return;
    OBJ_CHECK(tx, TRACE_TX_MAGIC);
    AZ(tx->bereq);
    tx_end(tx);
}

/*--------------------------------------------------------------------
 * Typed records.
 */

static void
rec_proto(struct trace_tx *tx, enum trace_tag tag, unsigned proto)
{
    trace_rec(tx, tag, http_proto_name(proto), 8);
}

/*
 * A response's status line from its Protocol tag on: Protocol, Status,
 * Reason (the rows of one message stay together in tbl/trace_tags.h).
 */
static void
rec_status(struct trace_tx *tx, enum trace_tag proto_tag, unsigned proto, unsigned status,
           const char *reason, size_t rlen)
{
    rec_proto(tx, proto_tag, proto);
    trace_cat(tx, proto_tag + 1, trace__ux(status).s, NULL);
    trace_rec(tx, proto_tag + 2, reason, rlen);
}

/* What trace_http() counts on. */
#define TAGS_IN_ORDER(a, b, c, d)                                                      \
    _Static_assert(TRACE_T_##b == TRACE_T_##a + 1 && TRACE_T_##c == TRACE_T_##a + 2 && \
                       TRACE_T_##d == TRACE_T_##a + 3,                                 \
                   #a " .. " #d " in order")
TAGS_IN_ORDER(REQ_METHOD, REQ_URL, REQ_PROTOCOL, REQ_HEADER);
TAGS_IN_ORDER(BEREQ_METHOD, BEREQ_URL, BEREQ_PROTOCOL, BEREQ_HEADER);
TAGS_IN_ORDER(BERESP_PROTOCOL, BERESP_STATUS, BERESP_REASON, BERESP_HEADER);
TAGS_IN_ORDER(RESP_PROTOCOL, RESP_STATUS, RESP_REASON, RESP_HEADER);

void
trace_http(struct trace_tx *tx, enum trace_http which, const struct http *hp)
{
    /* A request's Method, URL, Protocol, Header; a response's Protocol, Status, Reason, Header. */
    static const enum trace_tag first[] = {
        [TRACE_H_REQ] = TRACE_T_REQ_METHOD,
        [TRACE_H_BEREQ] = TRACE_T_BEREQ_METHOD,
        [TRACE_H_BERESP] = TRACE_T_BERESP_PROTOCOL,
        [TRACE_H_RESP] = TRACE_T_RESP_PROTOCOL,
    };
    enum trace_tag t = first[which];

    OBJ_CHECK(tx, TRACE_TX_MAGIC);
    OBJ_CHECK(hp, HTTP_MAGIC);
    if (which == TRACE_H_REQ || which == TRACE_H_BEREQ) {
        trace_rec(tx, t, hp->method.b, hp->method.len);
        trace_rec(tx, t + 1, hp->url.b, hp->url.len);
        rec_proto(tx, t + 2, hp->proto);
        if (which == TRACE_H_REQ)
            tx->client_proto = hp->proto;
    } else {
        trace_ts(tx, which == TRACE_H_BERESP ? "Beresp" : "Resp");
        rec_status(tx, t, hp->proto, hp->status, hp->reason.b, hp->reason.len);
    }
    for (unsigned i = 0; i < hp->nhdr; i++)
        rec_field(tx, t + 3, &hp->hdr[i].name, &hp->hdr[i].val);
}

void
trace_head(struct trace_tx *tx, const struct tp_head *h)
{
    const char *reason = h->reason.len > 0 ? h->reason.b : http_reason(h->status);

    OBJ_CHECK(tx, TRACE_TX_MAGIC);
    trace_ts(tx, "Resp");
    /* HTTP/1 transports answer HTTP/1.1 whatever the request said; HTTP/2 in HTTP/2. */
    rec_status(tx, TRACE_T_RESP_PROTOCOL, tx->client_proto == 20 ? 20 : 11, h->status, reason,
               h->reason.len > 0 ? h->reason.len : strlen(reason));
    /* The blocks are serialised field lines, each ending in CRLF. */
    for (unsigned i = 0; i < h->nblock; i++) {
        const char *p = h->block[i].b, *e = p + h->block[i].len, *nl;
        for (; p < e; p = nl + 1) {
            nl = memchr(p, '\n', (size_t)(e - p));
            if (nl == NULL)
                nl = e;
            size_t len = (size_t)(nl - p);
            if (len > 0 && p[len - 1] == '\r')
                len--;
            if (len > 0)
                trace_rec(tx, TRACE_T_RESP_HEADER, p, len);
        }
    }
}

void
trace_key(struct trace_tx *tx, const char *key, size_t len)
{
    char buf[TRACE_PAYLOAD_MAX];
    size_t o = 0;

    OBJ_CHECK(tx, TRACE_TX_MAGIC);
    /* The pieces are NUL-separated: shown as " | ". */
    for (size_t i = 0; i < len && o + 3 < sizeof buf; i++) {
        if (key[i] != '\0') {
            buf[o++] = key[i];
            continue;
        }
        memcpy(buf + o, " | ", 3);
        o += 3;
    }
    trace_rec(tx, TRACE_T_HASH, buf, o);
}

/* "what: age A ttl T grace G hits N" of oc at now, then the lookup's wait `w` (a "" list). */
static void
rec_obj(struct trace_tx *tx, const char *what, const struct cobj *oc, double now,
        const char *const w[3])
{
    double age = SRG_MAX(0.0, now - oc->fresh.t_origin);

    trace_cat(tx, TRACE_T_LOOKUP, what, ": age ", trace__fx(age, 3).s, " ttl ",
              trace__fx(oc->fresh.ttl - age, 3).s, " grace ", trace__fx(oc->fresh.swr, 3).s,
              " hits ", trace__ux(__atomic_load_n(&oc->hits, __ATOMIC_RELAXED)).s, w[0], w[1], w[2],
              NULL);
}

void
trace_lookup(struct trace_tx *tx, int res, const struct cobj *oc, const struct hsh_stale *stale,
             double now)
{
    struct trace_fx waited = trace__fx(stale->waited, 6);
    const char *w[3] = { "", "", "" };

    OBJ_CHECK(tx, TRACE_TX_MAGIC);
    trace_ts(tx, "Lookup");
    if (stale->waited > 0) {
        w[0] = ", after a busy wait of ";
        w[1] = waited.s;
        w[2] = " s";
    }
    switch ((enum hsh_result)res) {
    case HSH_HIT:
        rec_obj(tx,
                oc->fresh.t_origin + oc->fresh.ttl < now
                    ? "grace (stale, refreshed by another request)"
                    : "hit",
                oc, now, w);
        break;
    case HSH_STREAM:
        rec_obj(tx, "busy (streams from the fetch in progress)", oc, now, w);
        break;
    case HSH_GRACE:
        rec_obj(tx, "grace (stale, refreshed in the background)", stale->oc, now, w);
        break;
    case HSH_MISS:
        trace_cat(tx, TRACE_T_LOOKUP, "miss (", stale->fwd != NULL ? stale->fwd : "miss",
                  stale->oc != NULL ? ", revalidates a copy " : "",
                  stale->oc != NULL ? fresh_verdict_name(stale->verdict) : "", ")", w[0], w[1],
                  w[2], NULL);
        break;
    case HSH_PASS:
        trace_cat(tx, TRACE_T_LOOKUP, stale->detail != NULL ? stale->detail : "hit-for-miss", w[0],
                  w[1], w[2], NULL);
        break;
    case HSH_BUSY:
        /* The wait's length is in the next lookup's record, when it is over. */
        trace_cat(tx, TRACE_T_LOOKUP, "busy: waits for another request's fetch", NULL);
        break;
    }
}

void
trace_store(struct trace_tx *tx, enum fresh_store st, const struct fresh_obj *fo, double t_resp,
            double keep_dflt, double hfm_ttl)
{
    OBJ_CHECK(tx, TRACE_TX_MAGIC);
    if (st == FRESH_STORE && fo != NULL) {
        /* The ttl left on arrival, as the policy's beresp.ttl: the lifetime less the age. */
        double age = SRG_MAX(0.0, t_resp - fo->t_origin);
        trace_cat(tx, TRACE_T_STORE, "storable: ttl ", trace__fx(fo->ttl - age, 3).s, " grace ",
                  trace__fx(fo->swr, 3).s, " keep ",
                  trace__fx(fo->keep < 0 ? keep_dflt : (double)fo->keep, 3).s, " from ",
                  fresh_src_name((enum fresh_src)fo->src), "; age ", trace__fx(age, 3).s, NULL);
        return;
    }
    trace_cat(tx, TRACE_T_STORE, "uncacheable: ", fresh_store_name(st), " (", fresh_store_why(st),
              ")", hfm_ttl > 0 ? "; hit-for-miss " : "", hfm_ttl > 0 ? trace__fx(hfm_ttl, 3).s : "",
              NULL);
}

void
trace_body(struct trace_tx *tx, int rv, uint64_t bytes)
{
    OBJ_CHECK(tx, TRACE_TX_MAGIC);
    trace_ts(tx, "BerespBody");
    if (rv == -1)
        trace_printf(tx, TRACE_T_FETCH_ERROR, "the body failed after %llu bytes",
                     (unsigned long long)bytes);
    else if (rv == -2)
        trace_printf(tx, TRACE_T_FETCH_ERROR, "the client failed after %llu body bytes",
                     (unsigned long long)bytes);
}
