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
