/*
 * The malloc store (-s malloc,SIZE): body bytes in a chain of heap
 * segments, each allocated with its descriptor in front.  Nothing
 * survives the process; the meta stays with the caller.  A body's tail
 * (sto_set_tail) is one more heap block, b->priv.  Every block is charged
 * at what the heap really spends on it (sto_heap_cost), so SIZE bounds
 * the process, not just the bytes asked for.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "surogat/defs.h"
#include "surogat/num.h"
#include "surogat/sb.h"

#include "sto_priv.h"

/* Segments grow with the object: small objects waste little, big ones need few. */
#define SEG_MIN (4 * 1024)
#define SEG_MAX (256 * 1024)

int
sto_malloc_new(struct stv *stv, const char *args, struct sb *err)
{
    uint64_t size;

    if (num_bytes(args, &size) != 0 || size == 0) {
        sb_printf(err, "-s malloc,%s: bad size", args);
        return (-1);
    }
    stv->size = size;
    return (0);
}

static struct sto_seg *
seg_new(struct sto_body *b, size_t lead, size_t cap)
{
    struct sto_seg *s = malloc(sizeof *s + lead + cap);

    AN(s);
    s->next = NULL;
    s->data = (char *)(s + 1) + lead;
    s->len = 0;
    s->cap = cap;
    if (b->last != NULL)
        b->last->next = s;
    else
        b->first = s;
    b->last = s;
    b->bytes += sto_heap_cost(sizeof *s + lead + cap);
    return (s);
}

/*
 * The stored head, the Vary values and the index's own entries are heap
 * too: counted against the store, so that the process stays near the
 * configured size however small the bodies are.  A body of announced
 * length that fits one segment gets it now, with the head and Vary
 * values in front: one allocation per object instead of two.
 */
static int
sm_open(struct stv *stv, struct sto_body *b, struct sto_meta *m)
{
    size_t lead = m->head_len + m->vary_len;
    struct sto_seg *s;
    uint64_t n;
    char *p;

    if (b->size_hint == 0 || b->size_hint > SEG_MAX) {
        /* Head and Vary values stay in the caller's own blocks. */
        n = m->mem + sto_heap_cost(m->head_len) +
            (m->vary_len > 0 ? sto_heap_cost(m->vary_len) : 0);
        if (sto__charge(stv, n) != 0)
            return (-1);
        b->bytes += n;
        return (0);
    }
    if (sto__charge(stv, m->mem + sto_heap_cost(sizeof *s + lead + b->size_hint)) != 0)
        return (-1);
    s = seg_new(b, lead, (size_t)b->size_hint);
    b->bytes += m->mem;
    p = (char *)(s + 1);
    memcpy(p, m->head, m->head_len);
    m->head = p;
    if (m->vary_len > 0)
        memcpy(p + m->head_len, m->vary, m->vary_len);
    m->vary = p + m->head_len;
    b->meta_stored = true;
    return (0);
}

/* The announced length sizes segments exactly; otherwise they double. */
static size_t
seg_cap(const struct sto_body *b, size_t len)
{
    size_t cap;

    if (b->size_hint > b->len)
        cap = b->size_hint - b->len > SEG_MAX ? SEG_MAX : (size_t)(b->size_hint - b->len);
    else
        cap = b->len < SEG_MIN ? SEG_MIN : (b->len > SEG_MAX ? SEG_MAX : (size_t)b->len);
    if (cap < len && cap < SEG_MIN)
        cap = len < SEG_MIN ? len : SEG_MIN;
    return (cap);
}

static int
sm_append(struct stv *stv, struct sto_body *b, const void *p, size_t len)
{
    struct sto_seg *s;
    size_t n, cap;

    while (len > 0) {
        s = b->last;
        if (s == NULL || s->len == s->cap) {
            cap = seg_cap(b, len);
            if (sto__charge(stv, sto_heap_cost(sizeof *s + cap)) != 0)
                return (-1);
            s = seg_new(b, 0, cap);
        }
        n = s->cap - s->len;
        if (n > len)
            n = len;
        memcpy(s->data + s->len, p, n);
        s->len += n;
        b->len += n;
        p = (const char *)p + n;
        len -= n;
    }
    return (0);
}

static void
sm_trim(struct stv *stv, struct sto_body *b)
{
    struct sto_seg *s = b->last, *t, **pp;
    size_t spare, keep;

    /* A segment with the head in front is sized exactly, and must not move. */
    if (s == NULL || s->len == s->cap || s->data != (char *)(s + 1))
        return;
    keep = s->len > 0 ? s->len : 1;
    spare = sto_heap_cost(sizeof *s + s->cap) - sto_heap_cost(sizeof *s + keep);
    for (pp = &b->first; *pp != s; pp = &(*pp)->next)
        AN(*pp);
    t = realloc(s, sizeof *t + keep);
    AN(t);
    t->data = (char *)(t + 1);
    t->cap = keep;
    *pp = t;
    b->last = t;
    b->bytes -= spare;
    sto__credit(stv, spare);
}

/* A body's tail: its length, then its bytes. */
struct sm_tail {
    size_t len;
    char data[];
};

static int
sm_set_tail(struct stv *stv, struct sto_body *b, const void *p, size_t len)
{
    struct sm_tail *t;

    SRG_ASSERT(b->priv == NULL);
    if (sto__charge(stv, sto_heap_cost(sizeof *t + len)) != 0)
        return (-1);
    t = malloc(sizeof *t + len);
    AN(t);
    t->len = len;
    memcpy(t->data, p, len);
    b->bytes += sto_heap_cost(sizeof *t + len);
    b->priv = t;
    return (0);
}

static const void *
sm_tail(const struct stv *stv, const struct sto_body *b, size_t *len)
{
    const struct sm_tail *t = b->priv;

    (void)stv;
    if (t == NULL)
        return (NULL);
    *len = t->len;
    return (t->data);
}

static void
sm_free(struct stv *stv, struct sto_body *b)
{
    struct sto_seg *s;

    while ((s = b->first) != NULL) {
        b->first = s->next;
        free(s);
    }
    free(b->priv);
    b->priv = NULL;
    sto__credit(stv, b->bytes);
}

const struct stv_ops sto_malloc_ops = {
    .name = "malloc",
    .open = sm_open,
    .append = sm_append,
    .trim = sm_trim,
    .free = sm_free,
    .release = sm_free,
    .set_tail = sm_set_tail,
    .tail = sm_tail,
};
