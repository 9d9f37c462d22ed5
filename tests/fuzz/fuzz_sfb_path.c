/*
 * Fuzz the static-file backend's path normaliser, sfb_path_norm(), and
 * its glob matcher.
 *
 * Input: a request-target, from an exact-size heap copy so ASan sees any
 * read past its length.  When it holds a NUL, the bytes before it are
 * also a glob pattern matched against the bytes after it.
 *
 * Invariants of an accepted path: it starts with '/', is no longer than
 * the input, holds no NUL, control byte or backslash, no empty, "." or
 * ".." segment (so no "//", "/./" or "/../"), is valid UTF-8, joined to
 * a root it resolves lexically to a path under that root, and it is a
 * fixed point: normalising it again (with '%', '?' and '#' escaped)
 * gives it back.  A refusal is one of the declared statuses.
 */
#include <stdbool.h>
#include <string.h>

#include "surogat/sfb.h"

#include "fuzz.h"

#define ROOT "/srv/www"

/* RFC 3629, written independently of the normaliser's check. */
static bool
utf8_ok(const unsigned char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        unsigned cp, k;

        if (s[i] < 0x80) {
            i++;
            continue;
        }
        if ((s[i] & 0xe0) == 0xc0) {
            k = 1;
            cp = s[i] & 0x1f;
        } else if ((s[i] & 0xf0) == 0xe0) {
            k = 2;
            cp = s[i] & 0x0f;
        } else if ((s[i] & 0xf8) == 0xf0) {
            k = 3;
            cp = s[i] & 0x07;
        } else {
            return false;
        }
        if (i + k >= n)
            return false;
        for (unsigned j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80)
                return false;
            cp = cp << 6 | (s[i + j] & 0x3f);
        }
        if ((k == 1 && cp < 0x80) || (k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) ||
            cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return false;
        i += k + 1;
    }
    return true;
}

/* ROOT joined with p, resolved segment by segment as a kernel would (no symlinks). */
static void
check_under_root(const char *p)
{
    char buf[8192];
    size_t depth = 0;

    FUZZ_CHECK(strlen(ROOT) + strlen(p) < sizeof buf);
    strcpy(buf, ROOT);
    strcat(buf, p);
    for (const char *s = buf + strlen(ROOT); *s != '\0';) {
        const char *e;

        while (*s == '/')
            s++;
        for (e = s; *e != '\0' && *e != '/'; e++)
            continue;
        if (e - s == 2 && s[0] == '.' && s[1] == '.')
            FUZZ_CHECK(depth-- > 0);
        else if (e > s && !(e - s == 1 && s[0] == '.'))
            depth++;
        s = e;
    }
    FUZZ_CHECK(strncmp(buf, ROOT, strlen(ROOT)) == 0);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char out[4096], again[4096], esc[3 * 4096 + 1];
    char *in = malloc(size > 0 ? size : 1);
    const uint8_t *nul;
    size_t n, n2, e = 0;
    enum sfb_path st;

    FUZZ_CHECK(in != NULL);
    memcpy(in, data, size);
    st = sfb_path_norm(in, size, out, sizeof out, &n);
    FUZZ_CHECK(st == SFB_PATH_OK || st == SFB_PATH_BAD || st == SFB_PATH_TRAVERSAL ||
               st == SFB_PATH_TOO_LONG);
    if (st == SFB_PATH_OK) {
        FUZZ_CHECK(n >= 1 && n <= size && out[0] == '/' && out[n] == '\0' && strlen(out) == n);
        for (size_t i = 0; i < n; i++)
            FUZZ_CHECK((unsigned char)out[i] >= 0x20 && out[i] != 0x7f && out[i] != '\\');
        FUZZ_CHECK(strstr(out, "//") == NULL && strstr(out, "/./") == NULL &&
                   strstr(out, "/../") == NULL);
        FUZZ_CHECK(!(n >= 2 && strcmp(out + n - 2, "/.") == 0));
        FUZZ_CHECK(!(n >= 3 && strcmp(out + n - 3, "/..") == 0));
        FUZZ_CHECK(utf8_ok((const unsigned char *)out, n));
        check_under_root(out);
        for (size_t i = 0; i < n; i++) {
            if (out[i] == '%' || out[i] == '?' || out[i] == '#') {
                e += (size_t)sprintf(esc + e, "%%%02X", (unsigned char)out[i]);
            } else {
                esc[e++] = out[i];
            }
        }
        FUZZ_CHECK(sfb_path_norm(esc, e, again, sizeof again, &n2) == SFB_PATH_OK);
        FUZZ_CHECK(n2 == n && memcmp(again, out, n) == 0);
    }
    nul = memchr(data, '\0', size);
    if (nul != NULL && memchr(nul + 1, '\0', size - (size_t)(nul + 1 - data)) == NULL) {
        char *text = malloc(size - (size_t)(nul - data));

        FUZZ_CHECK(text != NULL);
        memcpy(text, nul + 1, size - (size_t)(nul + 1 - data));
        text[size - (size_t)(nul + 1 - data)] = '\0';
        /* The pattern is `in` up to its NUL; deterministic, and "*" matches everything. */
        FUZZ_CHECK(sfb_glob(in, text) == sfb_glob(in, text));
        FUZZ_CHECK(sfb_glob("*", text));
        free(text);
    }
    free(in);
    return 0;
}
