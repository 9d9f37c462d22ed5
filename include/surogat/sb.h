/*
 * sb -- a string builder over a caller-supplied buffer.  It never
 * allocates: when the buffer is full it marks itself overflowed and
 * ignores further appends, so callers check once at the end.
 */
#ifndef SUROGAT_SB_H
#define SUROGAT_SB_H

#include <stdbool.h>
#include <stddef.h>
#include <string.h>

struct sb {
    char *buf;
    size_t len; /* bytes used, excluding the NUL kept after them */
    size_t cap; /* bytes in buf, including room for that NUL */
    bool overflow;
};

void sb_init(struct sb *sb, char *buf, size_t cap); /* cap >= 1 */
void sb_bcat(struct sb *sb, const void *p, size_t len);
/* Inline: the hot paths append literals, whose length the compiler knows. */
static inline void
sb_cat(struct sb *sb, const char *s)
{
    sb_bcat(sb, s, strlen(s));
}
void sb_printf(struct sb *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sb_uint(struct sb *sb, unsigned long long v); /* faster than printf on hot paths */
/*
 * For a hot path writing many pieces into one buffer it has sized: v in
 * decimal at o (at most 20 bytes), and a literal at o; each returns the end.
 */
static inline char *
sb_put_uint(char *o, unsigned long long v)
{
    char tmp[20], *p = tmp + sizeof tmp;

    do {
        *--p = (char)('0' + v % 10);
        v /= 10;
    } while (v != 0);
    memcpy(o, p, (size_t)(tmp + sizeof tmp - p));
    return (o + (tmp + sizeof tmp - p));
}
#define SB_PUT_LIT(o, lit) (memcpy((o), (lit), sizeof(lit) - 1), (o) + sizeof(lit) - 1)
/*
 * The HTML entity that stands for c in text and in attribute values alike
 * (& < > " '), or NULL when c stands for itself.
 */
const char *sb_html_entity(char c);
/* The string s with every character sb_html_entity() names as its entity. */
void sb_html_escape(struct sb *sb, const char *s);
static inline bool
sb_ok(const struct sb *sb)
{
    return !sb->overflow;
}

#endif
