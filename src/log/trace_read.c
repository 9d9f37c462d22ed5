/*
 * The request trace, reader side: copying records out of the workers'
 * rings (the protocol is in trace.c), and reassembling them into
 * transactions and groups for a log stream.
 *
 * A reader keeps a cursor per ring: the position of the next record it
 * wants, and the record number it expects there.  It copies whole
 * records from the cursor up to the head it loaded, then checks that the
 * writer has not come round to overwrite them meanwhile; a cursor that
 * fell behind jumps to the first record of the oldest segment still
 * intact, and the gap in record numbers is what it missed.  Runs on the
 * log stream's thread; never touches a worker.
 *
 * The grouper is single-threaded, its stream's own: transactions by id
 * in a hash table, the roots of the groups in the order they began.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "surogat/defs.h"
#include "surogat/trace.h"

#include "trace_priv.h"

#define READ_CHUNK (256u * 1024) /* bytes copied out of a ring at once */

struct cursor {
    uint64_t pos;
    uint32_t seq; /* expected at pos, when known */
    bool seen, seq_known;
    bool counted; /* the ring existed when the reader started */
};

struct trace_reader {
    unsigned magic;
#define TRACE_READER_MAGIC 0x0b7e25d9
    bool history;
    bool started; /* a ring first seen from now on was made after the reader: all of it is wanted */
    unsigned ncur;
    struct cursor *cur;
    unsigned char *buf; /* READ_CHUNK */
};

/* A cursor for every ring there is now. */
static void
grow_cursors(struct trace_reader *rd)
{
    const struct log_ring *lr = log__rings_first(&trace__rings);
    unsigned n;

    if (lr == NULL || lr->id < rd->ncur)
        return; /* the newest ring has the highest id */
    n = SRG_MAX(2 * rd->ncur, lr->id + 16);
    rd->cur = realloc(rd->cur, n * sizeof *rd->cur);
    AN(rd->cur);
    memset(rd->cur + rd->ncur, 0, (n - rd->ncur) * sizeof *rd->cur);
    rd->ncur = n;
}

struct trace_reader *
trace_reader_new(bool history)
{
    struct trace_reader *rd;

    OBJ_NEW(rd, TRACE_READER_MAGIC);
    rd->buf = malloc(READ_CHUNK);
    AN(rd->buf);
    rd->history = true; /* rings made from now on are read from their start */
    if (!history) {
        rd->history = false;
        (void)trace_reader_poll(rd, NULL, NULL, NULL);
        rd->history = true;
    } else {
        /* The rings there now: their history is what they still hold, no more. */
        grow_cursors(rd);
        for (const struct log_ring *lr = log__rings_first(&trace__rings); lr != NULL; lr = lr->next)
            rd->cur[lr->id].counted = true;
    }
    rd->started = true;
    __atomic_add_fetch(&trace_readers, 1, __ATOMIC_RELAXED);
    return (rd);
}

void
trace_reader_free(struct trace_reader **rdp)
{
    struct trace_reader *rd;

    OBJ_TAKE(rd, rdp, TRACE_READER_MAGIC);
    __atomic_sub_fetch(&trace_readers, 1, __ATOMIC_RELAXED);
    free(rd->cur);
    free(rd->buf);
    OBJ_FREE(&rd);
}

/*
 * The first record boundary at or after the oldest byte still intact,
 * for a ring whose head is h: the first record of the segment after the
 * one being overwritten; h when there is none yet.
 */
static uint64_t
resync(const struct trace_ring *r, uint64_t h)
{
    uint64_t res = __atomic_load_n(&r->reserve, __ATOMIC_ACQUIRE), low, k, q;

    if (res <= r->size)
        return (0); /* nothing was ever overwritten */
    low = res - r->size;
    k = (low >> r->segshift) + 1;
    q = __atomic_load_n(&r->seg_first[k % TRACE_SEGS], __ATOMIC_ACQUIRE);
    if ((q >> r->segshift) != k || q >= h || q < low)
        return (h);
    return (q);
}

static void
copy_out(const struct trace_ring *r, uint64_t pos, unsigned char *dst, size_t len)
{
    size_t at = (size_t)(pos & r->mask), first = SRG_MIN(len, (size_t)r->size - at);

    memcpy(dst, r->buf + at, first);
    if (first < len)
        memcpy(dst + first, r->buf, len - first);
}

/* A Timestamp record as readers get it: rec->p points into buf from then on. */
static void
ts_text(struct trace_record *rec, char *buf, size_t cap)
{
    struct trace_ts_rec b;
    struct trace_fx f[3];
    size_t o, n;

    if (rec->len < sizeof b)
        return; /* not a worker's: left as it is */
    memcpy(&b, rec->p, sizeof b);
    n = SRG_MIN(rec->len - sizeof b, (size_t)TRACE_TS_EVENT_MAX);
    f[0] = trace__fx(b.t, 6);
    f[1] = trace__fx(b.since, 6);
    f[2] = trace__fx(b.prev, 6);
    SRG_ASSERT(cap >= TRACE_TS_EVENT_MAX + 2 + 3 * sizeof f[0].s);
    memcpy(buf, rec->p + sizeof b, n);
    memcpy(buf + n, ":", 1);
    o = n + 1;
    for (unsigned i = 0; i < 3; i++) {
        buf[o++] = ' ';
        n = strlen(f[i].s);
        memcpy(buf + o, f[i].s, n);
        o += n;
    }
    rec->p = buf;
    rec->len = o;
}

static size_t
poll_ring(struct trace_reader *rd, const struct trace_ring *r, trace_rec_f *fn, void *priv,
          uint64_t *lost)
{
    struct cursor *c = &rd->cur[r->lr.id];
    uint64_t h = __atomic_load_n(&r->head, __ATOMIC_ACQUIRE), res;
    size_t got = 0, len, off;
    struct trace_rh rh;

    if (!c->seen) {
        c->seen = true;
        c->pos = rd->history ? resync(r, h) : h;
        if (rd->started && !c->counted) {
            /* Made after the reader: what it lost of it counts from the first record. */
            c->seq = 0;
            c->seq_known = true;
        }
        c->counted = true;
    }
    while (c->pos < h) {
        if (h - c->pos > r->size)
            c->pos = resync(r, h);
        if (c->pos >= h)
            break;
        len = (size_t)SRG_MIN(h - c->pos, (uint64_t)READ_CHUNK);
        copy_out(r, c->pos, rd->buf, len);
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        res = __atomic_load_n(&r->reserve, __ATOMIC_RELAXED);
        if (res > r->size && c->pos < res - r->size) {
            /* The writer came round while we copied: start again where it is safe. */
            c->pos = resync(r, h);
            continue;
        }
        for (off = 0; off + sizeof rh <= len; off += TRACE_REC_SIZE(rh.len)) {
            memcpy(&rh, rd->buf + off, sizeof rh);
            if (rh.len > TRACE_PAYLOAD_MAX || rh.tag >= TRACE_T__N) {
                /* Cannot happen once the copy checked out; never deliver garbage. */
                c->pos = h;
                c->seq_known = false;
                return (got);
            }
            if (off + TRACE_REC_SIZE(rh.len) > len)
                break; /* cut by the chunk: the next round starts with it */
            if (c->seq_known && rh.seq != c->seq)
                *lost += (uint32_t)(rh.seq - c->seq);
            c->seq = rh.seq + 1;
            c->seq_known = true;
            if (fn != NULL) {
                struct trace_record rec = {
                    .tx = rh.tx,
                    .tag = (enum trace_tag)rh.tag,
                    .part = rh.part,
                    .p = (const char *)rd->buf + off + sizeof rh,
                    .len = rh.len,
                };
                char ts[TRACE_TS_EVENT_MAX + 2 + 3 * sizeof(struct trace_fx)];
                if (rec.tag == TRACE_T_TIMESTAMP)
                    ts_text(&rec, ts, sizeof ts);
                fn(priv, &rec);
            }
        }
        c->pos += off;
        got += off;
    }
    return (got);
}

size_t
trace_reader_poll(struct trace_reader *rd, trace_rec_f *fn, void *priv, uint64_t *missed)
{
    const struct trace_ring *r;
    uint64_t lost = 0;
    size_t got = 0;

    OBJ_CHECK(rd, TRACE_READER_MAGIC);
    for (struct log_ring *lr = log__rings_first(&trace__rings); lr != NULL; lr = lr->next) {
        r = LOG_RING_OF(lr, struct trace_ring, lr);
        OBJ_CHECK(r, TRACE_RING_MAGIC);
        if (lr->id >= rd->ncur)
            grow_cursors(rd);
        got += poll_ring(rd, r, fn, priv, &lost);
    }
    if (missed != NULL)
        *missed += lost;
    return (got);
}

/*--------------------------------------------------------------------
 * Grouping.
 */

#define GRP_BUCKETS 4096
/*
 * A transaction whose parent is not here (it was read and printed
 * already, or lost) waits this long after its end for the parent's Link,
 * which another ring may hold, before it is printed on its own.
 */
#define ORPHAN_WAIT 1.0

struct trace_grouper {
    unsigned magic;
#define TRACE_GROUPER_MAGIC 0x6e3a1d07
    enum trace_grouping how;
    struct trace_txn *bucket[GRP_BUCKETS];
    /* roots in the order they began: what flush walks */
    struct trace_txn **root;
    unsigned nroot, croot;
    double t_sweep; /* when flush last looked for stray transactions */
};

static unsigned
bucket_of(uint64_t id)
{
    return ((unsigned)((id * UINT64_C(0x9e3779b97f4a7c15)) >> 52) % GRP_BUCKETS);
}

static struct trace_txn *
txn_find(struct trace_grouper *g, uint64_t id)
{
    struct trace_txn *t;

    for (t = g->bucket[bucket_of(id)]; t != NULL; t = t->hnext)
        if (t->id == id)
            return (t);
    return (NULL);
}

static struct trace_txn *
txn_get(struct trace_grouper *g, uint64_t id, double now)
{
    struct trace_txn *t = txn_find(g, id);
    unsigned b;

    if (t != NULL)
        return (t);
    t = calloc(1, sizeof *t);
    AN(t);
    t->dcap = 512;
    t->data = malloc(t->dcap); /* never NULL: payloads point into it, empty ones too */
    AN(t->data);
    t->id = id;
    t->t_seen = now;
    b = bucket_of(id);
    t->hnext = g->bucket[b];
    g->bucket[b] = t;
    return (t);
}

static void
root_add(struct trace_grouper *g, struct trace_txn *t)
{
    if (t->in_roots)
        return;
    if (g->nroot == g->croot) {
        g->croot = g->croot > 0 ? 2 * g->croot : 64;
        g->root = realloc(g->root, g->croot * sizeof *g->root);
        AN(g->root);
    }
    g->root[g->nroot++] = t;
    t->in_roots = true;
}

static void
child_add(struct trace_txn *p, struct trace_txn *c)
{
    if (c->up == p)
        return;
    if (p->nchild == p->ccap) {
        p->ccap = p->ccap > 0 ? 2 * p->ccap : 4;
        p->child = realloc(p->child, p->ccap * sizeof *p->child);
        AN(p->child);
    }
    p->child[p->nchild++] = c;
    c->up = p;
}

struct trace_grouper *
trace_grouper_new(enum trace_grouping how)
{
    struct trace_grouper *g;

    OBJ_NEW(g, TRACE_GROUPER_MAGIC);
    g->how = how;
    return (g);
}

static void
txn_unhash(struct trace_grouper *g, struct trace_txn *t)
{
    struct trace_txn **tp;

    for (tp = &g->bucket[bucket_of(t->id)]; *tp != NULL; tp = &(*tp)->hnext) {
        if (*tp == t) {
            *tp = t->hnext;
            return;
        }
    }
}

/* Free t and its subtree. */
static void
txn_free(struct trace_grouper *g, struct trace_txn *t)
{
    for (unsigned i = 0; i < t->nchild; i++)
        txn_free(g, t->child[i]);
    txn_unhash(g, t);
    free(t->child);
    free(t->item);
    free(t->data);
    free(t);
}

void
trace_grouper_free(struct trace_grouper **gp)
{
    struct trace_grouper *g;

    OBJ_TAKE(g, gp, TRACE_GROUPER_MAGIC);
    for (unsigned i = 0; i < g->nroot; i++)
        txn_free(g, g->root[i]);
    free(g->root);
    OBJ_FREE(&g);
}

/* "bereq 13 fetch": the kind and the id. */
static void
parse_link(const char *p, size_t len, enum trace_kind *kind, uint64_t *id)
{
    char buf[64];
    size_t n = SRG_MIN(len, sizeof buf - 1);

    memcpy(buf, p, n);
    buf[n] = '\0';
    *kind = strncmp(buf, "bereq", 5) == 0 ? TRACE_K_BEREQ : TRACE_K_REQ;
    *id = strtoull(buf + strcspn(buf, " "), NULL, 10);
}

/* The top of t's group, and the last time anything of it was read. */
static struct trace_txn *
top_of(struct trace_txn *t)
{
    while (t->up != NULL)
        t = t->up;
    return (t);
}

/*
 * Where an item of `part` goes among t's: after every item of its part
 * or an earlier one (parts compared mod 256), so at the end but when a
 * later part was read first.
 */
static unsigned
item_slot(const struct trace_txn *t, uint8_t part)
{
    unsigned i = t->nitem;

    while (i > 0 && (int8_t)(uint8_t)(t->item[i - 1].part - part) > 0)
        i--;
    return (i);
}

void
trace_grouper_add(struct trace_grouper *g, double now, const struct trace_record *rec)
{
    enum trace_tag tag = rec->tag;
    const char *p = rec->p;
    size_t len = rec->len;
    struct trace_txn *t, *o;
    enum trace_kind kind;
    unsigned at;
    uint64_t id;

    OBJ_CHECK(g, TRACE_GROUPER_MAGIC);
    t = txn_get(g, rec->tx, now);
    if (tag == TRACE_T_BEGIN) {
        parse_link(p, len, &t->kind, &t->parent);
        t->begun = true;
        o = t->parent != 0 && g->how == TRACE_G_REQUEST ? txn_find(g, t->parent) : NULL;
        if (o != NULL && o->begun)
            child_add(o, t);
        else if (t->up == NULL)
            root_add(g, t);
    } else if (tag == TRACE_T_LINK && g->how == TRACE_G_REQUEST) {
        /* The parent waits for the child, which may have begun already. */
        parse_link(p, len, &kind, &id);
        o = txn_get(g, id, now);
        if (o->in_roots && o->up == NULL) {
            /* It began before its link was read: out of the roots, under us. */
            for (unsigned i = 0; i < g->nroot; i++)
                if (g->root[i] == o)
                    g->root[i] = NULL;
            o->in_roots = false;
        }
        child_add(t, o);
    } else if (tag == TRACE_T_END) {
        t->ended = true;
        t->t_end = now;
    }
    if (t->nitem == t->icap) {
        t->icap = t->icap > 0 ? 2 * t->icap : 32;
        t->item = realloc(t->item, t->icap * sizeof *t->item);
        AN(t->item);
    }
    if (t->dlen + len > t->dcap) {
        t->dcap = SRG_MAX(2 * t->dcap, t->dlen + len + 1024);
        t->data = realloc(t->data, t->dcap);
        AN(t->data);
    }
    if (len > 0)
        memcpy(t->data + t->dlen, p, len);
    at = item_slot(t, (uint8_t)rec->part);
    if (at < t->nitem)
        memmove(t->item + at + 1, t->item + at, (t->nitem - at) * sizeof *t->item);
    t->item[at] = (struct trace_item){ tag, (uint32_t)t->dlen, (uint32_t)len, (uint8_t)rec->part };
    t->nitem++;
    t->dlen += len;
    top_of(t)->t_seen = now;
}

/*
 * Whether t's subtree is done: every transaction ended, but one that was
 * linked and never began, given up on TRACE_LINK_WAIT after t ended.
 */
static bool
done(const struct trace_txn *t, double now)
{
    if (!t->begun)
        return (t->up != NULL && t->up->ended && now - t->up->t_end >= TRACE_LINK_WAIT);
    if (!t->ended)
        return (false);
    for (unsigned i = 0; i < t->nchild; i++)
        if (!done(t->child[i], now))
            return (false);
    return (true);
}

/* Roots by id (NULL last): ids are given in time order, and rings are read one by one. */
static int
cmp_root(const void *a, const void *b)
{
    const struct trace_txn *x = *(const struct trace_txn *const *)a;
    const struct trace_txn *y = *(const struct trace_txn *const *)b;

    if (x == NULL || y == NULL)
        return ((x == NULL) - (y == NULL));
    return ((x->id > y->id) - (x->id < y->id));
}

unsigned
trace_grouper_flush(struct trace_grouper *g, double now, bool all, trace_group_f *fn, void *priv)
{
    unsigned i, kept = 0, given = 0, open;
    struct trace_txn *t;
    bool complete;

    OBJ_CHECK(g, TRACE_GROUPER_MAGIC);
    if (g->nroot > 1)
        qsort(g->root, g->nroot, sizeof *g->root, cmp_root);
    open = g->nroot;
    for (i = 0; i < g->nroot; i++) {
        t = g->root[i];
        if (t == NULL) {
            open--;
            continue;
        }
        complete = t->begun && done(t, now) &&
                   !(g->how == TRACE_G_REQUEST && t->parent != 0 && now - t->t_end < ORPHAN_WAIT);
        if (!complete && !all && now - t->t_seen < TRACE_GROUP_TMO && open <= TRACE_GROUP_OPEN) {
            g->root[kept++] = t;
            continue;
        }
        open--;
        /* Records of a transaction whose Begin was lost: nothing to say what it is. */
        if (t->begun && fn != NULL) {
            fn(priv, t, complete);
            given++;
        }
        txn_free(g, t);
    }
    g->nroot = kept;
    /*
     * Transactions that never began and are no one's child (the end of
     * one whose start was overwritten) are dropped once quiet: looked for
     * once a second, not at every flush.
     */
    if (!all && now - g->t_sweep < 1.0)
        return (given);
    g->t_sweep = now;
    for (unsigned b = 0; b < GRP_BUCKETS; b++) {
        struct trace_txn **tp = &g->bucket[b];
        while ((t = *tp) != NULL) {
            if (!t->in_roots && t->up == NULL &&
                (all || now - t->t_seen >= TRACE_GROUP_TMO || (t->ended && !t->begun))) {
                *tp = t->hnext;
                t->hnext = NULL;
                for (unsigned c = 0; c < t->nchild; c++) {
                    /* Linked by a transaction whose start was lost: on their own now. */
                    t->child[c]->up = NULL;
                    if (t->child[c]->begun)
                        root_add(g, t->child[c]);
                }
                free(t->child);
                free(t->item);
                free(t->data);
                free(t);
                continue;
            }
            tp = &t->hnext;
        }
    }
    return (given);
}
