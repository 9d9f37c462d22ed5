/*
 * Splitting a request into arguments, for cli.c and cli_exec(), by the
 * Varnish CLI's rules (varnish-cli(7)): spaces separate arguments, and
 * inside double quotes \" \\ \n \r \t, \xHH (two hex digits) and \NNN
 * (up to three octal digits) are escapes.  Varnish refuses any other
 * escape; here it keeps its backslash, so that a quoted regex like
 * "req.url ~ \.png$" means what its author meant.  Outside quotes a
 * backslash is an ordinary byte.  A request whose line ends with the
 * arguments "<<" WORD goes on to the line that is WORD alone, and the
 * lines between, each with its newline, are its last argument in place of
 * those two: Varnish's here document, which `varnishadm vcl.inline NAME
 * '<< EOF ...'` sends.  Pure functions: any thread.
 */
#include "config.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "surogat/defs.h"
#include "surogat/num.h"
#include "surogat/sb.h"

#include "cli_priv.h"

/*
 * The escape at r (a backslash inside quotes) into *w: how many bytes of
 * r it took, or 0 when it must be refused (a NUL, or nothing after it).
 */
static size_t
unescape(const char *r, char **w)
{
    unsigned v = 0;
    size_t n;

    switch (r[1]) {
    case 'n':
        *(*w)++ = '\n';
        return (2);
    case 'r':
        *(*w)++ = '\r';
        return (2);
    case 't':
        *(*w)++ = '\t';
        return (2);
    case '"':
    case '\\':
        *(*w)++ = r[1];
        return (2);
    case 'x':
        if (num_hexdigit(r[2]) < 0 || num_hexdigit(r[3]) < 0)
            break;
        v = (unsigned)(num_hexdigit(r[2]) * 16 + num_hexdigit(r[3]));
        if (v == 0)
            return (0);
        *(*w)++ = (char)v;
        return (4);
    case '0':
    case '1':
    case '2':
    case '3':
    case '4':
    case '5':
    case '6':
    case '7':
        for (n = 1; n < 4 && r[n] >= '0' && r[n] <= '7'; n++)
            v = v * 8 + (unsigned)(r[n] - '0');
        if (v == 0 || v > 0xff)
            return (0);
        *(*w)++ = (char)v;
        return (n);
    case '\0':
        return (0);
    default:
        break;
    }
    *(*w)++ = '\\';
    *(*w)++ = r[1];
    return (2);
}

/* Split one line (no newline in it) in place. */
static int
split_line(char *line, char **argv, size_t max, int *argcp, struct sb *err)
{
    char *r = line, *w;
    size_t n;
    int argc = 0;

    for (;;) {
        while (*r == ' ' || *r == '\t')
            r++;
        if (*r == '\0')
            break;
        /* Unescaping only shrinks, so w never overtakes r. */
        w = r;
        argv[argc++] = w;
        SRG_ASSERT((size_t)argc < max);
        if (*r != '"') {
            while (*r != '\0' && *r != ' ' && *r != '\t')
                *w++ = *r++;
            if (*r != '\0')
                r++;
            *w = '\0';
            continue;
        }
        for (r++; *r != '"'; r++) {
            if (*r == '\0') {
                sb_cat(err, "Unterminated quoted argument");
                return (-1);
            }
            if (*r != '\\') {
                *w++ = *r;
                continue;
            }
            n = unescape(r, &w);
            if (n == 0) {
                sb_cat(err, r[1] == '\0' ? "Unterminated quoted argument"
                                         : "Escape for a NUL byte in an argument");
                return (-1);
            }
            r += n - 1;
        }
        r++;
        if (*r != '\0' && *r != ' ' && *r != '\t') {
            sb_cat(err, "Missing space after quoted argument");
            return (-1);
        }
        *w = '\0';
    }
    *argcp = argc;
    return (0);
}

/* Whether the line's arguments end with "<<" WORD: then WORD, else NULL. */
static const char *
heredoc_word(char *const *argv, int argc)
{
    if (argc >= 2 && strcmp(argv[argc - 2], "<<") == 0 && argv[argc - 1][0] != '\0')
        return (argv[argc - 1]);
    return (NULL);
}

/*
 * Where the line that is `word` alone (a CR before its end allowed)
 * starts in body[0 .. len), or NULL; *endp is just past its newline.  A
 * last line without a newline counts only when !need_nl.
 */
static const char *
find_terminator(const char *body, size_t len, const char *word, bool need_nl, const char **endp)
{
    size_t wl = strlen(word), ll;
    const char *p = body, *e = body + len, *nl;

    while (p < e) {
        nl = memchr(p, '\n', (size_t)(e - p));
        if (nl == NULL && need_nl)
            return (NULL);
        ll = (size_t)((nl != NULL ? nl : e) - p);
        if (ll > 0 && p[ll - 1] == '\r')
            ll--;
        if (ll == wl && memcmp(p, word, wl) == 0) {
            *endp = nl != NULL ? nl + 1 : e;
            return (p);
        }
        if (nl == NULL)
            return (NULL);
        p = nl + 1;
    }
    return (NULL);
}

int
cli__split(char *line, char ***argvp, int *argcp, struct sb *err)
{
    char **argv, *nl, *body;
    const char *word, *term, *end;
    size_t max;
    int argc = 0;

    AN(line);
    AN(argvp);
    AN(argcp);
    /* Each argument takes at least one byte and one separator. */
    max = strlen(line) / 2 + 2;
    argv = calloc(max, sizeof *argv);
    AN(argv);
    nl = strchr(line, '\n');
    if (nl != NULL) {
        *nl = '\0';
        if (nl > line && nl[-1] == '\r')
            nl[-1] = '\0';
    }
    if (split_line(line, argv, max, &argc, err) != 0) {
        free(argv);
        return (-1);
    }
    if (nl != NULL) {
        /* cli__request_len() let through only a complete here document. */
        word = heredoc_word(argv, argc);
        body = nl + 1;
        term = word != NULL ? find_terminator(body, strlen(body), word, false, &end) : NULL;
        if (term == NULL) {
            sb_cat(err, "A request of several lines must be a here document (<< WORD)");
            free(argv);
            return (-1);
        }
        body[term - body] = '\0';
        argv[argc - 2] = body;
        argc--;
    }
    argv[argc] = NULL;
    *argvp = argv;
    *argcp = argc;
    return (0);
}

size_t
cli__request_len(const char *buf, size_t len)
{
    const char *nl = memchr(buf, '\n', len), *word, *end;
    char ebuf[128], *line, **argv;
    size_t llen, rv;
    struct sb err;
    int argc;

    if (nl == NULL)
        return (0);
    llen = (size_t)(nl - buf);
    /* The cheap test first: a here document's line ends with its word, after "<<". */
    if (llen < 4 || memmem(buf, llen, "<<", 2) == NULL)
        return (llen + 1);
    line = malloc(llen + 1);
    AN(line);
    memcpy(line, buf, llen);
    line[llen] = '\0';
    if (llen > 0 && line[llen - 1] == '\r')
        line[llen - 1] = '\0';
    argv = calloc(llen / 2 + 2, sizeof *argv);
    AN(argv);
    sb_init(&err, ebuf, sizeof ebuf);
    rv = llen + 1;
    /* A line that does not split is answered with its error, alone. */
    if (split_line(line, argv, llen / 2 + 2, &argc, &err) == 0) {
        word = heredoc_word(argv, argc);
        if (word != NULL && find_terminator(nl + 1, len - llen - 1, word, true, &end) == NULL)
            rv = 0;
        else if (word != NULL)
            rv = (size_t)(end - buf);
    }
    free(argv);
    free(line);
    return (rv);
}
