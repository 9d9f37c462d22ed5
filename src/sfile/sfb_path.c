/*
 * Request paths of the static-file backend: decoding, normalisation and
 * glob matching.  Pure functions, no state, no allocation: they parse
 * bytes from the network and are fuzzed (tests/fuzz/fuzz_sfb_path.c).
 *
 * The normaliser refuses rather than resolves.  nginx and Apache resolve
 * "/a/../b" lexically, and every traversal bug in their history came from
 * a second decoding or a second notion of "segment" disagreeing with the
 * first.  A static site never needs "..", an encoded '/', a backslash or
 * an overlong UTF-8 sequence, so any of them answers 400 and the file
 * system only ever sees clean, already-decoded names.
 */
#include "config.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "surogat/defs.h"
#include "surogat/num.h"
#include "surogat/sfb.h"

/*
 * Whether s[0..len) is valid UTF-8 by RFC 3629: no overlong forms (C0 AE
 * is an old way of writing '.'), no surrogates, nothing past U+10FFFF.
 */
static bool
utf8_valid(const unsigned char *s, size_t len)
{
    size_t i = 0;

    while (i < len) {
        unsigned char c = s[i];
        unsigned n, lo = 0x80, hi = 0xbf;

        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xc2 && c <= 0xdf) {
            n = 1;
        } else if (c >= 0xe0 && c <= 0xef) {
            n = 2;
            if (c == 0xe0)
                lo = 0xa0; /* overlong */
            else if (c == 0xed)
                hi = 0x9f; /* surrogates */
        } else if (c >= 0xf0 && c <= 0xf4) {
            n = 3;
            if (c == 0xf0)
                lo = 0x90; /* overlong */
            else if (c == 0xf4)
                hi = 0x8f; /* past U+10FFFF */
        } else {
            return (false); /* continuation byte, C0, C1 or F5..FF */
        }
        if (len - i <= n)
            return (false);
        if (s[i + 1] < lo || s[i + 1] > hi)
            return (false);
        for (unsigned k = 2; k <= n; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xbf)
                return (false);
        i += n + 1;
    }
    return (true);
}

/*
 * One segment has been copied to out[seg..*o): drop it if it is "." or
 * empty, refuse "..".  The separator before it is already in out.
 */
static enum sfb_path
end_segment(char *out, size_t seg, size_t *o)
{
    size_t n = *o - seg;

    if (n == 2 && out[seg] == '.' && out[seg + 1] == '.')
        return (SFB_PATH_TRAVERSAL);
    if (n == 1 && out[seg] == '.')
        *o = seg;
    return (SFB_PATH_OK);
}

enum sfb_path
sfb_path_norm(const char *url, size_t len, char *out, size_t cap, size_t *outlen)
{
    size_t i, o = 0, seg;
    enum sfb_path st;

    AN(url);
    AN(out);
    if (cap < 2)
        return (SFB_PATH_TOO_LONG);
    if (len == 0 || url[0] != '/')
        return (SFB_PATH_BAD);
    out[o++] = '/';
    seg = o;
    for (i = 1; i < len && url[i] != '?' && url[i] != '#'; i++) {
        unsigned char c = (unsigned char)url[i];

        if (c == '/') {
            st = end_segment(out, seg, &o);
            if (st != SFB_PATH_OK)
                return (st);
            if (o > seg) {
                if (o + 1 >= cap)
                    return (SFB_PATH_TOO_LONG);
                out[o++] = '/';
            }
            seg = o; /* "//" and "/./" leave nothing behind */
            continue;
        }
        if (c == '%') {
            int h, l;

            if (len - i < 3 || (h = num_hexdigit(url[i + 1])) < 0 ||
                (l = num_hexdigit(url[i + 2])) < 0)
                return (SFB_PATH_BAD);
            c = (unsigned char)(h << 4 | l);
            i += 2;
            /* An encoded '/' would make two different segmentations of one path. */
            if (c == '/')
                return (SFB_PATH_TRAVERSAL);
        }
        if (c < 0x20 || c == 0x7f || c == '\\')
            return (SFB_PATH_BAD);
        if (o + 1 >= cap)
            return (SFB_PATH_TOO_LONG);
        out[o++] = (char)c;
    }
    st = end_segment(out, seg, &o);
    if (st != SFB_PATH_OK)
        return (st);
    out[o] = '\0';
    if (!utf8_valid((const unsigned char *)out, o))
        return (SFB_PATH_BAD);
    *outlen = o;
    return (SFB_PATH_OK);
}

static char
lower(char c)
{
    return (c >= 'A' && c <= 'Z' ? (char)(c + 32) : c);
}

/* A bracket expression at *pp ("[a-z]", "[!0-9]") against c; false when malformed. */
static bool
class_match(const char **pp, char c, bool *matched)
{
    const char *p = *pp + 1;
    bool neg = false, hit = false;

    if (*p == '!' || *p == '^') {
        neg = true;
        p++;
    }
    for (bool first = true; *p != '\0' && (first || *p != ']'); first = false) {
        char a = lower(*p), b = a;

        if (p[1] == '-' && p[2] != '\0' && p[2] != ']') {
            b = lower(p[2]);
            p += 3;
        } else {
            p++;
        }
        if (c >= a && c <= b)
            hit = true;
    }
    if (*p != ']')
        return (false);
    *pp = p + 1;
    *matched = hit != neg;
    return (true);
}

/*
 * Iterative, with one backtrack point for the last '*': linear in
 * practice, never exponential whatever the pattern.
 */
bool
sfb_glob(const char *pat, const char *s)
{
    const char *star = NULL, *resume = NULL;

    AN(pat);
    AN(s);
    while (*s != '\0') {
        const char *p = pat;
        bool ok = false;

        if (*p == '*') {
            star = ++pat;
            resume = s;
            continue;
        }
        if (*p == '?') {
            ok = true;
            p++;
        } else if (*p == '[') {
            bool m;
            if (class_match(&p, lower(*s), &m)) {
                ok = m;
            } else {
                ok = *s == '['; /* a '[' without its ']' is literal */
                p = pat + 1;
            }
        } else if (*p != '\0') {
            ok = lower(*p) == lower(*s);
            p++;
        }
        if (ok) {
            pat = p;
            s++;
            continue;
        }
        if (star == NULL)
            return (false);
        pat = star;
        s = ++resume;
    }
    while (*pat == '*')
        pat++;
    return (*pat == '\0');
}
