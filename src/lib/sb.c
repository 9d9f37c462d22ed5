/*
 * String builder over a fixed buffer: no allocation, overflow remembered
 * and checked once by the caller.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "surogat/defs.h"
#include "surogat/sb.h"

void
sb_init(struct sb *sb, char *buf, size_t cap)
{
    AN(sb);
    AN(buf);
    SRG_ASSERT(cap >= 1);
    sb->buf = buf;
    sb->cap = cap;
    sb->len = 0;
    sb->overflow = false;
    buf[0] = '\0';
}

void
sb_bcat(struct sb *sb, const void *p, size_t len)
{
    if (sb->overflow)
        return;
    if (len >= sb->cap - sb->len) {
        sb->overflow = true;
        return;
    }
    memcpy(sb->buf + sb->len, p, len);
    sb->len += len;
    sb->buf[sb->len] = '\0';
}

void
sb_printf(struct sb *sb, const char *fmt, ...)
{
    va_list ap;
    size_t room;
    int n;

    if (sb->overflow)
        return;
    room = sb->cap - sb->len;
    va_start(ap, fmt);
    n = vsnprintf(sb->buf + sb->len, room, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= room) {
        sb->overflow = true;
        sb->buf[sb->len] = '\0';
        return;
    }
    sb->len += (size_t)n;
}

void
sb_uint(struct sb *sb, unsigned long long v)
{
    char tmp[20];

    sb_bcat(sb, tmp, (size_t)(sb_put_uint(tmp, v) - tmp));
}

const char *
sb_html_entity(char c)
{
    switch (c) {
    case '&':
        return ("&amp;");
    case '<':
        return ("&lt;");
    case '>':
        return ("&gt;");
    case '"':
        return ("&quot;");
    case '\'':
        return ("&#39;");
    default:
        return (NULL);
    }
}

void
sb_html_escape(struct sb *sb, const char *s)
{
    size_t run = 0; /* characters that stand for themselves, appended in one piece */
    size_t i;

    for (i = 0; s[i] != '\0'; i++) {
        const char *e = sb_html_entity(s[i]);

        if (e == NULL)
            continue;
        sb_bcat(sb, s + run, i - run);
        sb_cat(sb, e);
        run = i + 1;
    }
    sb_bcat(sb, s + run, i - run);
}
