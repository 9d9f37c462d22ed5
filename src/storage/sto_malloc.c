/*
 * The malloc store.  Its only shared state is the byte count, kept with
 * atomics: appends charge before they allocate, so concurrent fetches can
 * never overshoot the configured size together.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "surogat/defs.h"
#include "surogat/num.h"
#include "surogat/sb.h"
#include "surogat/stat.h"
#include "surogat/sto.h"

/* Segments grow with the object: small objects waste little, big ones need few. */
#define SEG_MIN (4 * 1024)
#define SEG_MAX (256 * 1024)

static uint64_t sto_bytes_max = 256ULL * 1024 * 1024;
static uint64_t sto_bytes_used;

int
sto_init(const char *spec, struct sb *err)
{
    uint64_t size;

    if (spec == NULL)
        return (0);
    if (strncmp(spec, "malloc,", 7) != 0 || num_bytes(spec + 7, &size) != 0 || size == 0) {
        sb_printf(err, "-s %s: expected malloc,SIZE", spec);
        return (-1);
    }
    sto_bytes_max = size;
    return (0);
}

void
sto_fini(void)
{
}

static int
charge(uint64_t n)
{
    uint64_t cur = __atomic_load_n(&sto_bytes_used, __ATOMIC_RELAXED);

    do {
        if (cur + n > sto_bytes_max)
            return (-1);
    } while (!__atomic_compare_exchange_n(&sto_bytes_used, &cur, cur + n, true, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
    STAT_ADD(sto_bytes, n);
    return (0);
}

static void
credit(uint64_t n)
{
    __atomic_fetch_sub(&sto_bytes_used, n, __ATOMIC_RELAXED);
    STAT_ADD(sto_bytes, -n);
}

int
sto_append(struct sto_body *b, const void *p, size_t len)
{
    struct sto_seg *s;
    size_t n, cap;

    AN(b);
    while (len > 0) {
        s = b->last;
        if (s == NULL || s->len == s->cap) {
            /* The announced length sizes segments exactly; otherwise they double. */
            if (b->size_hint > b->len)
                cap = b->size_hint - b->len > SEG_MAX ? SEG_MAX : (size_t)(b->size_hint - b->len);
            else
                cap = b->len < SEG_MIN ? SEG_MIN : (b->len > SEG_MAX ? SEG_MAX : (size_t)b->len);
            if (cap < len && cap < SEG_MIN)
                cap = len < SEG_MIN ? len : SEG_MIN;
            if (charge(sizeof *s + cap) != 0)
                return (-1);
            s = malloc(sizeof *s + cap);
            AN(s);
            s->next = NULL;
            s->len = 0;
            s->cap = cap;
            if (b->last != NULL)
                b->last->next = s;
            else
                b->first = s;
            b->last = s;
            b->bytes += sizeof *s + cap;
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

void
sto_body_trim(struct sto_body *b)
{
    struct sto_seg *s = b->last, *t, **pp;
    size_t spare, keep;

    if (s == NULL || s->len == s->cap)
        return;
    keep = s->len > 0 ? s->len : 1;
    spare = s->cap - keep;
    for (pp = &b->first; *pp != s; pp = &(*pp)->next)
        AN(*pp);
    t = realloc(s, sizeof *t + keep);
    AN(t);
    t->cap = keep;
    *pp = t;
    b->last = t;
    b->bytes -= spare;
    credit(spare);
}

void
sto_body_free(struct sto_body *b)
{
    struct sto_seg *s;

    while ((s = b->first) != NULL) {
        b->first = s->next;
        free(s);
    }
    credit(b->bytes);
    memset(b, 0, sizeof *b);
}

uint64_t
sto_size(void)
{
    return (sto_bytes_max);
}

uint64_t
sto_used(void)
{
    return (__atomic_load_n(&sto_bytes_used, __ATOMIC_RELAXED));
}
