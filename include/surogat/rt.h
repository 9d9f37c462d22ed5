/*
 * rt -- routes: which director serves a request, by host and path.
 *
 * A route table is a list tried in order; the first route whose every
 * given condition holds wins.  Built once (policy load), then read-only:
 * rt_match() runs on any number of workers at once.  Regexes are PCRE2,
 * compiled once with JIT.
 */
#ifndef SUROGAT_RT_H
#define SUROGAT_RT_H

struct dir;
struct rt;
struct sb;
struct txt;

struct rt_conf {
    /*
     * Any of: an exact name, "*.example.com" (one or more labels before
     * .example.com, not example.com itself) or "~REGEX".  Compared
     * case-insensitively with the Host header, its port dropped.  None:
     * any host, even a request without Host.
     */
    const char *const *hosts;
    unsigned nhosts;
    const char *prefix; /* path prefix, or NULL */
    const char *path;   /* PCRE2 regex on the path (before '?'), or NULL */
    /* Any of these extensions of the last path segment, case-insensitive, no dot. */
    const char *const *exts;
    unsigned nexts;
    struct dir *to; /* not owned */
};

struct rt *rt_new(void);
void rt_free(struct rt **rtp); /* the routes, not their directors; *rtp = NULL */
/* Append a route; its strings are copied.  -1 with a message (a bad regex, an empty name). */
int rt_add(struct rt *rt, const struct rt_conf *c, struct sb *err);
/*
 * The director of the first matching route, or NULL.  host may be NULL
 * (no Host header); url is the request-target, origin or absolute form.
 * Lock-free and allocation-free after a thread's first call.
 */
struct dir *rt_match(const struct rt *rt, const struct txt *host, const struct txt *url);

#endif
