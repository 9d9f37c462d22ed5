/*
 * Routes.
 *
 * The table is built on one thread and read-only afterwards.  Matching
 * copies the host, lower-cased and without its port, into a stack buffer
 * and cuts the path out of the URL in place (pointer and length), so a
 * match allocates nothing; the PCRE2 match data is per thread, created
 * at a thread's first regex and freed when the thread exits.
 *
 * XXX: a linear scan of the routes, fine for the tens a site declares.
 */
#include "config.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/types.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "surogat/defs.h"
#include "surogat/dir.h"
#include "surogat/http.h"
#include "surogat/rt.h"
#include "surogat/sb.h"

#define RT_HOST_MAX 255 /* a DNS name; a longer Host header matches no host pattern */

enum rt_host_kind {
    RT_HOST_EXACT,
    RT_HOST_WILD, /* s is the suffix: ".example.com" */
    RT_HOST_RE,
};

struct rt_host {
    enum rt_host_kind kind;
    char *s; /* lower case */
    size_t len;
    pcre2_code *re;
};

struct route {
    struct rt_host *hosts;
    unsigned nhosts;
    char *prefix;
    size_t plen;
    pcre2_code *path;
    char **exts;
    size_t *extlen;
    unsigned nexts;
    struct dir *to;
};

struct rt {
    unsigned magic;
#define RT_MAGIC 0x2a7f90d5
    struct route *r;
    unsigned n, cap;
};

static pthread_once_t md_once = PTHREAD_ONCE_INIT;
static pthread_key_t md_key;

static void
md_destroy(void *md)
{
    pcre2_match_data_free(md);
}

static void
md_key_create(void)
{
    AZ(pthread_key_create(&md_key, md_destroy));
}

static pcre2_match_data *
md_get(void)
{
    pcre2_match_data *md = pthread_getspecific(md_key);

    if (md == NULL) {
        md = pcre2_match_data_create(1, NULL);
        AN(md);
        AZ(pthread_setspecific(md_key, md));
    }
    return (md);
}

struct rt *
rt_new(void)
{
    struct rt *rt;

    AZ(pthread_once(&md_once, md_key_create));
    OBJ_NEW(rt, RT_MAGIC);
    return (rt);
}

static void
route_clear(struct route *r)
{
    for (unsigned i = 0; i < r->nhosts; i++) {
        free(r->hosts[i].s);
        pcre2_code_free(r->hosts[i].re);
    }
    free(r->hosts);
    free(r->prefix);
    pcre2_code_free(r->path);
    for (unsigned i = 0; i < r->nexts; i++)
        free(r->exts[i]);
    free(r->exts);
    free(r->extlen);
}

void
rt_free(struct rt **rtp)
{
    struct rt *rt;

    OBJ_TAKE(rt, rtp, RT_MAGIC);
    for (unsigned i = 0; i < rt->n; i++)
        route_clear(&rt->r[i]);
    free(rt->r);
    OBJ_FREE(&rt);
}

static pcre2_code *
re_compile(const char *re, uint32_t opts, const char *what, struct sb *err)
{
    PCRE2_UCHAR msg[128];
    PCRE2_SIZE off;
    pcre2_code *code;
    int ec;

    code = pcre2_compile((PCRE2_SPTR)re, PCRE2_ZERO_TERMINATED, opts, &ec, &off, NULL);
    if (code == NULL) {
        (void)pcre2_get_error_message(ec, msg, sizeof msg);
        sb_printf(err, "route: %s regex '%.64s' at offset %zu: %s", what, re, (size_t)off,
                  (const char *)msg);
        return (NULL);
    }
    (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE); /* the interpreter if no JIT */
    return (code);
}

static char *
lower_dup(const char *s)
{
    char *d = strdup(s);

    AN(d);
    for (char *p = d; *p != '\0'; p++)
        if (*p >= 'A' && *p <= 'Z')
            *p = (char)(*p - 'A' + 'a');
    return (d);
}

static int
host_add(struct rt_host *h, const char *pat, struct sb *err)
{
    if (pat == NULL || *pat == '\0' || strcmp(pat, "~") == 0 || strcmp(pat, "*.") == 0) {
        sb_cat(err, "route: an empty host pattern");
        return (-1);
    }
    if (pat[0] == '~') {
        h->kind = RT_HOST_RE;
        h->re = re_compile(pat + 1, PCRE2_CASELESS, "host", err);
        return (h->re != NULL ? 0 : -1);
    }
    if (pat[0] == '*') {
        if (pat[1] != '.' || strchr(pat + 1, '*') != NULL) {
            sb_printf(err, "route: host '%.64s': a wildcard is a leading \"*.\" only", pat);
            return (-1);
        }
        h->kind = RT_HOST_WILD;
        h->s = lower_dup(pat + 1);
    } else {
        if (strchr(pat, '*') != NULL) {
            sb_printf(err, "route: host '%.64s': a wildcard is a leading \"*.\" only", pat);
            return (-1);
        }
        h->kind = RT_HOST_EXACT;
        h->s = lower_dup(pat);
    }
    h->len = strlen(h->s);
    return (0);
}

static int
route_build(struct route *r, const struct rt_conf *c, struct sb *err)
{
    if (c->nhosts > 0) {
        r->hosts = calloc(c->nhosts, sizeof *r->hosts);
        AN(r->hosts);
        for (unsigned i = 0; i < c->nhosts; i++) {
            r->nhosts++;
            if (host_add(&r->hosts[i], c->hosts[i], err) != 0)
                return (-1);
        }
    }
    if (c->prefix != NULL) {
        if (c->prefix[0] != '/') {
            sb_printf(err, "route: prefix '%.64s' must start with '/'", c->prefix);
            return (-1);
        }
        r->prefix = strdup(c->prefix);
        AN(r->prefix);
        r->plen = strlen(r->prefix);
    }
    if (c->path != NULL && (r->path = re_compile(c->path, 0, "path", err)) == NULL)
        return (-1);
    if (c->nexts > 0) {
        r->exts = calloc(c->nexts, sizeof *r->exts);
        r->extlen = calloc(c->nexts, sizeof *r->extlen);
        AN(r->exts);
        AN(r->extlen);
        for (unsigned i = 0; i < c->nexts; i++) {
            const char *e = c->exts[i];
            if (e != NULL && *e == '.')
                e++; /* ".jpg" means jpg */
            if (e == NULL || *e == '\0' || strpbrk(e, "./?") != NULL) {
                sb_printf(err, "route: extension '%.32s' is not a name like \"jpg\"",
                          c->exts[i] != NULL ? c->exts[i] : "");
                return (-1);
            }
            r->exts[i] = lower_dup(e);
            r->extlen[i] = strlen(e);
            r->nexts++;
        }
    }
    return (0);
}

int
rt_add(struct rt *rt, const struct rt_conf *c, struct sb *err)
{
    struct route r;

    OBJ_CHECK(rt, RT_MAGIC);
    AN(c);
    if (c->to == NULL) {
        sb_cat(err, "route: no director to route to");
        return (-1);
    }
    memset(&r, 0, sizeof r);
    r.to = c->to;
    if (route_build(&r, c, err) != 0) {
        route_clear(&r);
        return (-1);
    }
    if (rt->n == rt->cap) {
        rt->cap = rt->cap == 0 ? 8 : rt->cap * 2;
        rt->r = realloc(rt->r, rt->cap * sizeof *rt->r);
        AN(rt->r);
    }
    rt->r[rt->n++] = r;
    return (0);
}

/*--------------------------------------------------------------------
 * Matching.
 */

/* The Host header lower-cased without port or final dot into buf; its length, or -1. */
static ssize_t
host_norm(const struct txt *host, char *buf)
{
    const char *b, *e, *c;
    size_t n;

    if (host == NULL || host->b == NULL || host->len == 0)
        return (-1);
    b = host->b;
    e = b + host->len;
    if (*b == '[') {
        c = memchr(b, ']', host->len);
        if (c == NULL)
            return (-1);
        e = c + 1;
    } else if ((c = memchr(b, ':', host->len)) != NULL) {
        e = c;
    }
    if (e > b && e[-1] == '.')
        e--;
    n = (size_t)(e - b);
    if (n == 0 || n > RT_HOST_MAX)
        return (-1);
    for (size_t i = 0; i < n; i++)
        buf[i] = (b[i] >= 'A' && b[i] <= 'Z') ? (char)(b[i] - 'A' + 'a') : b[i];
    buf[n] = '\0';
    return ((ssize_t)n);
}

/* The path of a request-target: origin form up to '?' or '#', or that of an absolute URL. */
static struct txt
url_path(const struct txt *url)
{
    const char *b = url->b, *e, *p;
    struct txt t;

    if (b == NULL)
        return ((struct txt){ "", 0 });
    e = b + url->len;
    if (url->len > 0 && b[0] != '/' && b[0] != '*') {
        p = memmem(b, url->len, "://", 3);
        if (p != NULL) {
            p += 3;
            while (p < e && *p != '/' && *p != '?' && *p != '#')
                p++;
            b = p;
        }
    }
    for (p = b; p < e && *p != '?' && *p != '#'; p++)
        continue;
    t.b = b;
    t.len = (size_t)(p - b);
    return (t);
}

static bool
host_match(const struct route *r, const char *h, size_t hl)
{
    for (unsigned i = 0; i < r->nhosts; i++) {
        const struct rt_host *p = &r->hosts[i];
        switch (p->kind) {
        case RT_HOST_EXACT:
            if (hl == p->len && memcmp(h, p->s, hl) == 0)
                return (true);
            break;
        case RT_HOST_WILD:
            if (hl > p->len && memcmp(h + hl - p->len, p->s, p->len) == 0)
                return (true);
            break;
        case RT_HOST_RE:
            if (pcre2_match(p->re, (PCRE2_SPTR)h, hl, 0, 0, md_get(), NULL) >= 0)
                return (true);
            break;
        }
    }
    return (false);
}

static bool
ext_match(const struct route *r, const struct txt *path)
{
    const char *b = path->b, *e = path->b + path->len, *seg, *dot = NULL;
    size_t n;

    for (seg = e; seg > b && seg[-1] != '/'; seg--)
        if (dot == NULL && seg[-1] == '.')
            dot = seg - 1;
    /* No dot, or only a leading one (".htaccess" is a name, not an extension). */
    if (dot == NULL || dot == seg)
        return (false);
    n = (size_t)(e - dot - 1);
    for (unsigned i = 0; i < r->nexts; i++)
        if (n == r->extlen[i] && strncasecmp(dot + 1, r->exts[i], n) == 0)
            return (true);
    return (false);
}

struct dir *
rt_match(const struct rt *rt, const struct txt *host, const struct txt *url)
{
    char hbuf[RT_HOST_MAX + 1];
    ssize_t hl = -2; /* not computed yet */
    struct txt path;

    OBJ_CHECK(rt, RT_MAGIC);
    AN(url);
    path = url_path(url);
    for (unsigned i = 0; i < rt->n; i++) {
        const struct route *r = &rt->r[i];
        if (r->nhosts > 0) {
            if (hl == -2)
                hl = host_norm(host, hbuf);
            if (hl < 0 || !host_match(r, hbuf, (size_t)hl))
                continue;
        }
        if (r->prefix != NULL && (path.len < r->plen || memcmp(path.b, r->prefix, r->plen) != 0))
            continue;
        if (r->path != NULL &&
            pcre2_match(r->path, (PCRE2_SPTR)path.b, path.len, 0, 0, md_get(), NULL) < 0)
            continue;
        if (r->nexts > 0 && !ext_match(r, &path))
            continue;
        return (r->to);
    }
    return (NULL);
}
