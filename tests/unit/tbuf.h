/*
 * tbuf -- what the compression and ESI tests share: a growing buffer
 * that is a gz_out_f sink, and a seeded xorshift generator, so that a
 * failing case repeats.  Static inline: each test executable takes what
 * it uses.
 */
#ifndef SUROGAT_TBUF_H
#define SUROGAT_TBUF_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <check.h>

struct buf {
    unsigned char *p;
    size_t len, cap;
};

/* Append len bytes, keeping a NUL after them (pages are printed in messages). */
static inline void
buf_add(struct buf *b, const void *p, size_t len)
{
    size_t need = b->len + len + 1;
    unsigned char *q;

    if (need > b->cap || b->p == NULL) {
        b->cap = need * 2 + 64;
        b->p = realloc(b->p, b->cap);
        ck_assert_ptr_nonnull(b->p);
    }
    q = b->p + b->len;
    if (len > 0)
        memcpy(q, p, len);
    q[len] = '\0';
    b->len += len;
}

/* gz_out_f into a struct buf; a filter never hands out nothing. */
static inline int
collect(void *priv, const char *p, size_t len)
{
    ck_assert_uint_gt(len, 0);
    buf_add(priv, p, len);
    return (0);
}

/* xorshift32 over the caller's state (not 0). */
static inline uint32_t
xrnd(uint32_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return (*s);
}

#endif
