/*
 * The live request log: per-worker rings of fixed-size records (see
 * rlog.h for the contract).
 *
 * Writer (the ring's worker only), for record number s in slot s & mask:
 *
 *     slot.seq = 2s + 1            odd: being written
 *     release fence
 *     the record's bytes
 *     slot.seq = 2s + 2            release: complete
 *     ring.head = s + 1            release: published
 *
 * Reader, for each s from its cursor to ring.head: load slot.seq
 * (acquire); unless it is 2s + 2 the slot has been reused already; copy
 * the record; acquire fence; load slot.seq again: if it changed, the
 * copy may be torn and is dropped.  Both cases count as missed.  A reader
 * more than a ring behind skips straight to the oldest record still held.
 *
 * The list of rings only grows, so readers walk it without a lock
 * (log_priv.h: the bookkeeping is shared with the request trace).  Ring
 * memory is allocated untouched (calloc of a large block is mmap'd), so
 * a ring costs memory only as its worker fills it.
 */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "surogat/defs.h"
#include "surogat/http.h"
#include "surogat/req.h"
#include "surogat/rlog.h"
#include "surogat/sb.h"
#include "surogat/sess.h"
#include "surogat/wrk.h"

#include "log_priv.h"

#define RLOG_DEFAULT_RECORDS 1024

struct rlog_slot {
    uint64_t seq; /* 2s + 2 once record s is complete, 2s + 1 while it is written */
    struct rlog_rec rec;
};

struct rlog_ring {
    unsigned magic;
#define RLOG_RING_MAGIC 0x3c91e5b7
    struct log_ring lr; /* its place in the list; lr.id: the reader's cursor index */
    uint64_t mask;      /* records - 1 */
    /* The writer's line of its own: readers poll `head` while the worker writes it. */
    uint64_t head __attribute__((aligned(64))); /* records ever written */
    struct rlog_slot *slot;
};

struct rlog_reader {
    unsigned magic;
#define RLOG_READER_MAGIC 0x71d20a4e
    bool history;
    unsigned ncur;
    uint64_t *cur; /* cur[ring id]: next record number wanted */
    bool *seen;    /* seen[ring id]: cursor set */
    struct rlog_rec tmp;
};

static struct log_rings rings = LOG_RINGS_INIT;
static uint64_t ring_records = RLOG_DEFAULT_RECORDS; /* set before any ring is made */

/* In the order of enum pol_hook (policy/pol_priv.h): bit h is hook h. */
static const char *const hook_name[] = {
    "recv", "hash",  "backend_response", "deliver",       "hit",  "miss",  "pass",
    "log",  "synth", "backend_fetch",    "backend_error", "pipe", "purge",
};

static void
slot_init(struct wrk *wrk)
{
    wrk->rlog = rlog_ring_get();
}

static void
slot_fini(struct wrk *wrk)
{
    rlog_ring_put(&wrk->rlog);
    trace__wrk_exit(); /* one slot for the module: each costs every worker a call */
}

static const struct wrk_slot rlog_slot = { "rlog", slot_init, slot_fini, NULL };

int
rlog_init(unsigned records)
{
    uint64_t n = 2;

    if (log__rings_started(&rings))
        return (-1);
    while (n < records)
        n <<= 1;
    ring_records = n;
    wrk_slot_register(&rlog_slot);
    return (0);
}

/* log_ring_free_f */
static void
ring_free(struct log_ring *lr)
{
    struct rlog_ring *r = LOG_RING_OF(lr, struct rlog_ring, lr);

    OBJ_CHECK(r, RLOG_RING_MAGIC);
    free(r->slot);
    OBJ_FREE(&r);
}

void
rlog_fini(void)
{
    /* pool_fini() returns a moment before its workers hand their rings back: those stay. */
    log__rings_fini(&rings, ring_free, NULL);
    if (!log__rings_started(&rings))
        ring_records = RLOG_DEFAULT_RECORDS;
}

/* log_ring_make_f, under the list's lock. */
static struct log_ring *
ring_make(void)
{
    struct rlog_ring *r = aligned_alloc(64, sizeof *r); /* a multiple of 64: see head */

    AN(r);
    memset(r, 0, sizeof *r);
    r->magic = RLOG_RING_MAGIC;
    r->mask = ring_records - 1;
    r->slot = calloc(ring_records, sizeof *r->slot);
    AN(r->slot);
    return (&r->lr);
}

struct rlog_ring *
rlog_ring_get(void)
{
    return (LOG_RING_OF(log__ring_get(&rings, ring_make), struct rlog_ring, lr));
}

void
rlog_ring_put(struct rlog_ring **rp)
{
    struct rlog_ring *r;

    OBJ_TAKE(r, rp, RLOG_RING_MAGIC);
    log__ring_put(&rings, &r->lr);
}

/*--------------------------------------------------------------------
 * The writer.
 */

static struct rlog_rec *
put_begin(struct rlog_ring *r, struct rlog_slot **slp)
{
    uint64_t s = r->head; /* ours alone to write */
    struct rlog_slot *sl = &r->slot[s & r->mask];

    __atomic_store_n(&sl->seq, 2 * s + 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    *slp = sl;
    return (&sl->rec);
}

static void
put_end(struct rlog_ring *r, struct rlog_slot *sl)
{
    uint64_t s = r->head;

    __atomic_store_n(&sl->seq, 2 * s + 2, __ATOMIC_RELEASE);
    __atomic_store_n(&r->head, s + 1, __ATOMIC_RELEASE);
}

/* Copy at most dst_len - 1 bytes of src and a NUL; src need not be terminated. */
static void
copy_str(char *dst, size_t dst_len, const char *src, size_t len)
{
    if (len >= dst_len)
        len = dst_len - 1;
    if (len > 0) /* src may be NULL then (an empty field): memcpy must not see it */
        memcpy(dst, src, len);
    dst[len] = '\0';
}

void
rlog_put(struct rlog_ring *r, const struct rlog_rec *rec)
{
    struct rlog_slot *sl;

    OBJ_CHECK(r, RLOG_RING_MAGIC);
    *put_begin(r, &sl) = *rec;
    put_end(r, sl);
}

void
rlog_req(struct rlog_ring *r, const struct req *req)
{
    const struct http *hp;
    const struct http_hdr *h;
    struct rlog_slot *sl;
    struct rlog_rec *rec;
    const char *s;

    OBJ_CHECK(r, RLOG_RING_MAGIC);
    OBJ_CHECK(req, REQ_MAGIC);
    hp = req->http;
    rec = put_begin(r, &sl);
    rec->t_start = req->t_start;
    rec->ttfb = (float)(req->t_first - req->t_mono);
    rec->total = (float)(req->t_end - req->t_mono);
    rec->bytes = req->resp_bytes;
    rec->hooks = req->hooks;
    rec->status = (uint16_t)req->status;
    rec->restarts = (uint16_t)SRG_MIN(req->restarts, 0xffffu);
    rec->retries = (uint16_t)SRG_MIN(req->retries, 0xffffu);
    rec->proto = hp->method.len > 0 ? (uint8_t)hp->proto : 0;
    rec->esi_level = (uint8_t)SRG_MIN(req->esi_level, 0xffu);
    rec->esi = req->esi_log != NULL ? (uint16_t)SRG_MIN(req->esi_log->total, 0xffffu) : 0;
    copy_str(rec->client, sizeof rec->client, req->sp->client_ip, strlen(req->sp->client_ip));
    copy_str(rec->port, sizeof rec->port, req->sp->client_port, strlen(req->sp->client_port));
    copy_str(rec->method, sizeof rec->method, hp->method.b, hp->method.len);
    s = req_outcome_name(req->outcome);
    copy_str(rec->cache, sizeof rec->cache, s, strlen(s));
    s = req->be_name != NULL ? req->be_name : "-";
    copy_str(rec->backend, sizeof rec->backend, s, strlen(s));
    h = hp->method.len > 0 ? http_find(hp, "Host") : NULL;
    if (h != NULL)
        copy_str(rec->host, sizeof rec->host, h->val.b, h->val.len);
    else
        rec->host[0] = '\0';
    rec->url_len = (uint32_t)SRG_MIN(hp->url.len, (size_t)UINT32_MAX);
    copy_str(rec->url, sizeof rec->url, hp->url.b, hp->url.len);
    put_end(r, sl);
}

/*--------------------------------------------------------------------
 * Readers.
 */

struct rlog_reader *
rlog_reader_new(bool history)
{
    struct rlog_reader *rd;

    OBJ_NEW(rd, RLOG_READER_MAGIC);
    rd->history = true; /* rings created after this are read from their start */
    if (!history) {
        /* Every ring that exists now starts at its head. */
        rd->history = false;
        (void)rlog_reader_poll(rd, NULL, NULL, NULL);
        rd->history = true;
    }
    return (rd);
}

void
rlog_reader_free(struct rlog_reader **rdp)
{
    struct rlog_reader *rd;

    OBJ_TAKE(rd, rdp, RLOG_READER_MAGIC);
    free(rd->cur);
    free(rd->seen);
    OBJ_FREE(&rd);
}

static void
grow_cursors(struct rlog_reader *rd, unsigned id)
{
    unsigned n = SRG_MAX(2 * rd->ncur, id + 16);

    rd->cur = realloc(rd->cur, n * sizeof *rd->cur);
    rd->seen = realloc(rd->seen, n * sizeof *rd->seen);
    AN(rd->cur);
    AN(rd->seen);
    memset(rd->cur + rd->ncur, 0, (n - rd->ncur) * sizeof *rd->cur);
    memset(rd->seen + rd->ncur, 0, (n - rd->ncur) * sizeof *rd->seen);
    rd->ncur = n;
}

/* Copy record s of r into out: 0, or -1 when it was overwritten. */
static int
read_slot(const struct rlog_ring *r, uint64_t s, struct rlog_rec *out)
{
    const struct rlog_slot *sl = &r->slot[s & r->mask];
    uint64_t want = 2 * s + 2;

    if (__atomic_load_n(&sl->seq, __ATOMIC_ACQUIRE) != want)
        return (-1);
    memcpy(out, &sl->rec, sizeof *out);
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&sl->seq, __ATOMIC_RELAXED) != want)
        return (-1);
    return (0);
}

unsigned
rlog_reader_poll(struct rlog_reader *rd, rlog_rec_f *fn, void *priv, uint64_t *missed)
{
    const struct rlog_ring *r;
    uint64_t head, s, lost = 0, n;
    unsigned got = 0, id;

    OBJ_CHECK(rd, RLOG_READER_MAGIC);
    for (struct log_ring *lr = log__rings_first(&rings); lr != NULL; lr = lr->next) {
        r = LOG_RING_OF(lr, struct rlog_ring, lr);
        OBJ_CHECK(r, RLOG_RING_MAGIC);
        id = lr->id;
        if (id >= rd->ncur)
            grow_cursors(rd, id);
        head = __atomic_load_n(&r->head, __ATOMIC_ACQUIRE);
        n = r->mask + 1;
        if (!rd->seen[id]) {
            rd->seen[id] = true;
            /* History: the oldest record still held; and nothing lost before it. */
            rd->cur[id] = !rd->history ? head : head > n ? head - n : 0;
        }
        s = rd->cur[id];
        if (head - s > n) {
            lost += head - s - n;
            s = head - n;
        }
        for (; s < head; s++) {
            if (read_slot(r, s, &rd->tmp) != 0) {
                lost++;
                continue;
            }
            got++;
            if (fn != NULL)
                fn(&rd->tmp, priv);
        }
        rd->cur[id] = head;
    }
    if (missed != NULL)
        *missed += lost;
    return (got);
}

/*--------------------------------------------------------------------
 * Formatting helpers shared by the log streams and the access log.
 */

const char *
rlog_hook_name(unsigned h)
{
    return (h < sizeof hook_name / sizeof hook_name[0] ? hook_name[h] : NULL);
}

void
rlog_hooks_cat(struct sb *sb, uint32_t hooks)
{
    const char *sep = "";
    const char *name;

    if (hooks == 0) {
        sb_cat(sb, "-");
        return;
    }
    for (unsigned h = 0; h < 32; h++) {
        if ((hooks & (1u << h)) == 0 || (name = rlog_hook_name(h)) == NULL)
            continue;
        sb_cat(sb, sep);
        sb_cat(sb, name);
        sep = ",";
    }
}

void
rlog_json_str(struct sb *sb, const char *s, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    char esc[6] = { '\\', 'u', '0', '0', 0, 0 };
    size_t i, run = 0;

    sb_cat(sb, "\"");
    for (i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c < 0x7f && c != '"' && c != '\\')
            continue;
        sb_bcat(sb, s + run, i - run);
        run = i + 1;
        if (c == '"' || c == '\\') {
            esc[1] = (char)c;
            sb_bcat(sb, esc, 2);
            esc[1] = 'u';
        } else {
            /* Controls and bytes past ASCII: never invalid JSON, whatever the client sent. */
            esc[4] = hex[c >> 4];
            esc[5] = hex[c & 15];
            sb_bcat(sb, esc, 6);
        }
    }
    sb_bcat(sb, s + run, i - run);
    sb_cat(sb, "\"");
}

void
rlog_json_time(struct sb *sb, double t)
{
    time_t sec = (time_t)t;
    struct tm tm;

    gmtime_r(&sec, &tm);
    sb_printf(sb, "\"%04d-%02d-%02dT%02d:%02d:%02d.%03dZ\"", tm.tm_year + 1900, tm.tm_mon + 1,
              tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, (int)((t - (double)sec) * 1e3) % 1000);
}

void
rlog_hooks_json(struct sb *sb, uint32_t hooks)
{
    const char *sep = "";
    const char *name;

    sb_cat(sb, "[");
    for (unsigned h = 0; h < 32; h++) {
        if ((hooks & (1u << h)) == 0 || (name = rlog_hook_name(h)) == NULL)
            continue;
        sb_printf(sb, "%s\"%s\"", sep, name);
        sep = ",";
    }
    sb_cat(sb, "]");
}
