/*
 * The static-file backend's configuration: its root, the MIME table, the
 * deny list and the expiry rules, built once on the main thread by
 * sfb_new() and read-only afterwards, so lookups take no lock.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "surogat/defs.h"
#include "surogat/num.h"
#include "surogat/par.h"
#include "surogat/sb.h"
#include "surogat/sfb.h"

#include "sfb_priv.h"

#define SFB_MIME_FILE    "/etc/mime.types"
#define SFB_DEFAULT_TYPE "application/octet-stream"

/*
 * Used when the mime file is missing (a minimal container): the types a
 * static site needs so that browsers do not refuse a script or a style.
 */
static const char *const builtin_mime[][2] = {
    { "html", "text/html" },      { "htm", "text/html" },
    { "css", "text/css" },        { "js", "text/javascript" },
    { "mjs", "text/javascript" }, { "json", "application/json" },
    { "txt", "text/plain" },      { "xml", "application/xml" },
    { "svg", "image/svg+xml" },   { "png", "image/png" },
    { "jpg", "image/jpeg" },      { "jpeg", "image/jpeg" },
    { "gif", "image/gif" },       { "webp", "image/webp" },
    { "avif", "image/avif" },     { "ico", "image/vnd.microsoft.icon" },
    { "woff", "font/woff" },      { "woff2", "font/woff2" },
    { "ttf", "font/ttf" },        { "otf", "font/otf" },
    { "pdf", "application/pdf" }, { "zip", "application/zip" },
    { "gz", "application/gzip" }, { "wasm", "application/wasm" },
    { "mp4", "video/mp4" },       { "webm", "video/webm" },
    { "mp3", "audio/mpeg" },      { "ogg", "audio/ogg" },
    { "csv", "text/csv" },        { "md", "text/markdown" },
};

static const char *const default_deny[] = { SFB_DENY_DEFAULT };

static char **
dup_list(const char *const *v, unsigned n)
{
    char **out = calloc(n + 1, sizeof *out);

    AN(out);
    for (unsigned i = 0; i < n; i++) {
        out[i] = strdup(v[i]);
        AN(out[i]);
    }
    return (out);
}

static void
free_list(char **v, unsigned n)
{
    if (v == NULL)
        return;
    for (unsigned i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/* The type string, interned: /etc/mime.types names each type once per line. */
static const char *
intern(struct sfb *sfb, const char *type, size_t len)
{
    for (size_t i = sfb->ntypes; i-- > 0;)
        if (strlen(sfb->types[i]) == len && memcmp(sfb->types[i], type, len) == 0)
            return (sfb->types[i]);
    sfb->types = realloc(sfb->types, (sfb->ntypes + 1) * sizeof *sfb->types);
    AN(sfb->types);
    sfb->types[sfb->ntypes] = strndup(type, len);
    AN(sfb->types[sfb->ntypes]);
    return (sfb->types[sfb->ntypes++]);
}

static void
add_mime(struct sfb *sfb, size_t *cap, const char *ext, size_t elen, const char *type, size_t tlen,
         unsigned rank)
{
    struct sfb_mime *m;

    if (sfb->nmime == *cap) {
        *cap = *cap == 0 ? 256 : *cap * 2;
        sfb->mime = realloc(sfb->mime, *cap * sizeof *sfb->mime);
        AN(sfb->mime);
    }
    m = &sfb->mime[sfb->nmime++];
    m->ext = strndup(ext, elen);
    AN(m->ext);
    for (char *p = m->ext; *p != '\0'; p++)
        if (*p >= 'A' && *p <= 'Z')
            *p = (char)(*p + 32);
    m->type = intern(sfb, type, tlen);
    m->rank = rank;
}

/* "type ext ext ..." lines, '#' comments. */
static int
read_mime_file(struct sfb *sfb, size_t *cap, const char *path, struct sb *err)
{
    char *line = NULL;
    size_t lcap = 0;
    unsigned lineno = 0;
    FILE *f = fopen(path, "re");

    if (f == NULL) {
        sb_printf(err, "mime file %s: %s", path, strerror(errno));
        return (-1);
    }
    while (getline(&line, &lcap, f) > 0) {
        const char *sep = " \t\r\n";
        char *save, *type, *ext;

        lineno++;
        if (strchr(line, '#') != NULL)
            *strchr(line, '#') = '\0';
        type = strtok_r(line, sep, &save);
        if (type == NULL)
            continue;
        if (strchr(type, '/') == NULL) {
            sb_printf(err, "mime file %s:%u: '%s' is not a type", path, lineno, type);
            free(line);
            fclose(f);
            return (-1);
        }
        while ((ext = strtok_r(NULL, sep, &save)) != NULL)
            add_mime(sfb, cap, ext, strlen(ext), type, strlen(type), 1);
    }
    free(line);
    fclose(f);
    return (0);
}

static int
mime_cmp(const void *a, const void *b)
{
    const struct sfb_mime *x = a, *y = b;
    int c = strcmp(x->ext, y->ext);

    if (c != 0)
        return (c);
    return (x->rank < y->rank ? 1 : x->rank > y->rank ? -1 : 0);
}

/* Sort by extension, the highest rank first, and keep one entry per extension. */
static void
mime_finish(struct sfb *sfb)
{
    size_t o = 0;

    qsort(sfb->mime, sfb->nmime, sizeof *sfb->mime, mime_cmp);
    for (size_t i = 0; i < sfb->nmime; i++) {
        if (o > 0 && strcmp(sfb->mime[o - 1].ext, sfb->mime[i].ext) == 0) {
            free(sfb->mime[i].ext);
            continue;
        }
        sfb->mime[o++] = sfb->mime[i];
    }
    sfb->nmime = o;
}

static int
build_mime(struct sfb *sfb, const struct sfb_conf *c, struct sb *err)
{
    size_t cap = 0;

    for (size_t i = 0; i < ARRAY_LEN(builtin_mime); i++)
        add_mime(sfb, &cap, builtin_mime[i][0], strlen(builtin_mime[i][0]), builtin_mime[i][1],
                 strlen(builtin_mime[i][1]), 0);
    if (c->mime_file != NULL && c->mime_file[0] != '\0') {
        if (read_mime_file(sfb, &cap, c->mime_file, err) != 0)
            return (-1);
    } else if (c->mime_file == NULL && access(SFB_MIME_FILE, R_OK) == 0) {
        if (read_mime_file(sfb, &cap, SFB_MIME_FILE, err) != 0)
            return (-1);
    }
    for (unsigned i = 0; i < c->nmime; i++) {
        const char *eq = strchr(c->mime[i], '='), *e = c->mime[i];

        if (*e == '.')
            e++;
        if (eq == NULL || eq <= e || eq[1] == '\0' || strchr(eq + 1, '/') == NULL ||
            memchr(e, '/', (size_t)(eq - e)) != NULL) {
            sb_printf(err, "mime '%s': want ext=type/subtype", c->mime[i]);
            return (-1);
        }
        add_mime(sfb, &cap, e, (size_t)(eq - e), eq + 1, strlen(eq + 1), 2);
    }
    mime_finish(sfb);
    return (0);
}

static int
build_expires(struct sfb *sfb, const struct sfb_conf *c, struct sb *err)
{
    sfb->exp = calloc(c->nexpires + 1, sizeof *sfb->exp);
    AN(sfb->exp);
    for (unsigned i = 0; i < c->nexpires; i++) {
        const char *eq = strrchr(c->expires[i], '=');
        double d;

        if (eq == NULL || eq == c->expires[i] || num_duration(eq + 1, &d) != 0) {
            sb_printf(err, "expires '%s': want type-pattern=duration", c->expires[i]);
            return (-1);
        }
        sfb->exp[i].pat = strndup(c->expires[i], (size_t)(eq - c->expires[i]));
        AN(sfb->exp[i].pat);
        sfb->exp[i].secs = (long)d;
        sfb->nexp = i + 1;
    }
    return (0);
}

struct sfb *
sfb_new(const struct sfb_conf *c, struct sb *err)
{
    static const char *const default_index[] = { "index.html" };
    struct sfb *sfb;
    struct stat st;

    AN(c);
    if (c->root == NULL || c->root[0] != '/') {
        sb_printf(err, "static root '%s': not an absolute path", c->root ? c->root : "");
        return (NULL);
    }
    for (unsigned i = 0; i < c->nindex; i++) {
        if (c->index[i][0] == '\0' || strchr(c->index[i], '/') != NULL ||
            strcmp(c->index[i], ".") == 0 || strcmp(c->index[i], "..") == 0) {
            sb_printf(err, "index '%s': want a file name", c->index[i]);
            return (NULL);
        }
    }
    OBJ_NEW(sfb, SFB_MAGIC);
    sfb->rootfd = open(c->root, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (sfb->rootfd < 0 || fstat(sfb->rootfd, &st) != 0) {
        sb_printf(err, "static root %s: %s", c->root, strerror(errno));
        sfb_free(&sfb);
        return (NULL);
    }
    sfb->root = strdup(c->root);
    sfb->rootreal = realpath(c->root, NULL);
    AN(sfb->root);
    AN(sfb->rootreal);
    if (c->index != NULL) {
        sfb->index = dup_list(c->index, c->nindex);
        sfb->nindex = c->nindex;
    } else {
        sfb->index = dup_list(default_index, 1);
        sfb->nindex = 1;
    }
    if (c->deny != NULL) {
        sfb->deny = dup_list(c->deny, c->ndeny);
        sfb->ndeny = c->ndeny;
    } else {
        sfb->deny = dup_list(default_deny, ARRAY_LEN(default_deny));
        sfb->ndeny = ARRAY_LEN(default_deny);
    }
    sfb->listing = c->listing;
    sfb->follow = c->follow_symlinks;
    if (build_mime(sfb, c, err) != 0 || build_expires(sfb, c, err) != 0) {
        sfb_free(&sfb);
        return (NULL);
    }
    sfb__cache_init(sfb);
    sfb__zcache_init(sfb);
    return (sfb);
}

/* A comma-separated parameter as a list: pointers into *buf (malloc'd), blanks trimmed. */
static const char **
split(const char *s, char **buf, unsigned *n)
{
    const char **v;
    char *save, *t;

    *buf = strdup(s);
    AN(*buf);
    v = calloc(strlen(s) / 2 + 2, sizeof *v);
    AN(v);
    *n = 0;
    for (t = strtok_r(*buf, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
        char *e = t + strlen(t);

        while (*t == ' ' || *t == '\t')
            t++;
        while (e > t && (e[-1] == ' ' || e[-1] == '\t'))
            *--e = '\0';
        if (*t != '\0')
            v[(*n)++] = t;
    }
    return (v);
}

struct sfb *
sfb_new_params(const char *root, struct sb *err)
{
    struct sfb_conf c = { .root = root };
    char *b[4];
    const char **v[4];
    struct sfb *sfb;

    v[0] = split(par.sfb_index, &b[0], &c.nindex);
    v[1] = split(par.sfb_deny, &b[1], &c.ndeny);
    v[2] = split(par.sfb_mime, &b[2], &c.nmime);
    v[3] = split(par.sfb_expires, &b[3], &c.nexpires);
    c.index = c.nindex > 0 ? v[0] : NULL;
    c.deny = c.ndeny > 0 ? v[1] : NULL;
    c.mime = v[2];
    c.expires = v[3];
    c.listing = par.sfb_listing;
    c.follow_symlinks = par.sfb_follow_symlinks;
    c.mime_file = par.sfb_mime_file;
    sfb = sfb_new(&c, err); /* copies what it keeps */
    for (int i = 0; i < 4; i++) {
        free(v[i]);
        free(b[i]);
    }
    return (sfb);
}

void
sfb_free(struct sfb **sfbp)
{
    struct sfb *sfb;

    OBJ_TAKE(sfb, sfbp, SFB_MAGIC);
    if (sfb->zbucket != NULL)
        sfb__zcache_fini(sfb);
    if (sfb->bucket != NULL)
        sfb__cache_fini(sfb);
    if (sfb->rootfd >= 0)
        close(sfb->rootfd);
    free(sfb->root);
    free(sfb->rootreal);
    free_list(sfb->index, sfb->nindex);
    free_list(sfb->deny, sfb->ndeny);
    for (size_t i = 0; i < sfb->nmime; i++)
        free(sfb->mime[i].ext);
    free(sfb->mime);
    free_list(sfb->types, (unsigned)sfb->ntypes);
    for (unsigned i = 0; i < sfb->nexp; i++)
        free(sfb->exp[i].pat);
    free(sfb->exp);
    OBJ_FREE(&sfb);
}

/* One segment (NUL-terminated) against the list: denied unless a '!' pattern allows it. */
static bool
segment_denied(const struct sfb *sfb, const char *seg)
{
    bool denied = false;

    for (unsigned i = 0; i < sfb->ndeny; i++) {
        const char *p = sfb->deny[i];

        if (*p == '!') {
            if (sfb_glob(p + 1, seg))
                return (false);
        } else if (!denied && sfb_glob(p, seg)) {
            denied = true;
        }
    }
    return (denied);
}

bool
sfb_denied(const struct sfb *sfb, const char *path)
{
    char seg[256]; /* NAME_MAX + 1 */

    OBJ_CHECK(sfb, SFB_MAGIC);
    for (const char *p = path, *e; *p != '\0'; p = e) {
        size_t n;

        while (*p == '/')
            p++;
        for (e = p; *e != '\0' && *e != '/'; e++)
            continue;
        n = (size_t)(e - p);
        if (n == 0)
            continue;
        if (n >= sizeof seg)
            return (true); /* no file system has such a name: nothing to serve */
        memcpy(seg, p, n);
        seg[n] = '\0';
        if (segment_denied(sfb, seg))
            return (true);
    }
    return (false);
}

static int
ext_cmp(const void *key, const void *elem)
{
    return (strcmp(key, ((const struct sfb_mime *)elem)->ext));
}

const char *
sfb_mime_type(const struct sfb *sfb, const char *path)
{
    const char *base = strrchr(path, '/'), *dot;
    const struct sfb_mime *m;
    char ext[32];
    size_t n;

    OBJ_CHECK(sfb, SFB_MAGIC);
    base = base != NULL ? base + 1 : path;
    dot = strrchr(base, '.');
    if (dot == NULL || dot == base || (n = strlen(dot + 1)) == 0 || n >= sizeof ext)
        return (SFB_DEFAULT_TYPE);
    for (size_t i = 0; i <= n; i++)
        ext[i] = dot[1 + i] >= 'A' && dot[1 + i] <= 'Z' ? (char)(dot[1 + i] + 32) : dot[1 + i];
    m = bsearch(ext, sfb->mime, sfb->nmime, sizeof *sfb->mime, ext_cmp);
    return (m != NULL ? m->type : SFB_DEFAULT_TYPE);
}

size_t
sfb_mime_count(const struct sfb *sfb)
{
    OBJ_CHECK(sfb, SFB_MAGIC);
    return (sfb->nmime);
}

long
sfb_expires(const struct sfb *sfb, const char *type)
{
    char bare[128];
    size_t n = strcspn(type, "; \t");

    OBJ_CHECK(sfb, SFB_MAGIC);
    if (n >= sizeof bare)
        return (-1);
    memcpy(bare, type, n);
    bare[n] = '\0';
    for (unsigned i = 0; i < sfb->nexp; i++)
        if (sfb_glob(sfb->exp[i].pat, bare))
            return (sfb->exp[i].secs);
    return (-1);
}

void
sfb__url_encode(struct sb *sb, const char *s)
{
    static const char hex[] = "0123456789ABCDEF";

    for (const unsigned char *p = (const unsigned char *)s; *p != '\0'; p++) {
        unsigned char c = *p;

        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            strchr("/-._~", c) != NULL) {
            sb_bcat(sb, p, 1);
        } else {
            char e[3] = { '%', hex[c >> 4], hex[c & 15] };
            sb_bcat(sb, e, 3);
        }
    }
}
