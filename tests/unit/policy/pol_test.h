/*
 * The harness of the policy unit tests: one worker, a hand-built request
 * (mkreq), and scripts written to a temporary file and loaded as the
 * current program (load, load_ok).
 */
#ifndef SUROGAT_TEST_POL_H
#define SUROGAT_TEST_POL_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "unit.h"
#include "surogat/defs.h"
#include "surogat/http.h"
#include "surogat/par.h"
#include "surogat/pol.h"
#include "surogat/req.h"
#include "surogat/sb.h"
#include "surogat/stat.h"
#include "surogat/wrk.h"
#include <lauxlib.h>

#include "src/policy/pol_priv.h"

static struct wrk wrk;
static struct req req;
static struct http_hdr hdrs[64];
static char wsbuf[64 * 1024];
static char path[64];

static inline void
setup(void)
{
    par_init();
    AZ(stat_init());
    memset(&wrk, 0, sizeof wrk);
    wrk.magic = WRK_MAGIC;
    ws_init(&wrk.ws, wsbuf, sizeof wsbuf);
    path[0] = '\0';
}

static inline void
teardown(void)
{
    pol_wrk_fini(&wrk);
    pol_fini();
    if (path[0] != '\0')
        unlink(path);
}

/* A GET for url with the fields given as "Name", "value" pairs, NULL-ended. */
static inline struct req *
mkreq(const char *method, const char *url, ...)
{
    va_list ap;
    const char *n, *v;

    memset(&req, 0, sizeof req);
    req.magic = REQ_MAGIC;
    req.wrk = &wrk;
    req.ws = &wrk.ws;
    http_init(req.http, hdrs, ARRAY_LEN(hdrs));
    req.http->method = (struct txt){ method, strlen(method) };
    req.http->url = (struct txt){ url, strlen(url) };
    req.http->proto = 11;
    va_start(ap, url);
    while ((n = va_arg(ap, const char *)) != NULL) {
        v = va_arg(ap, const char *);
        AZ(http_add(req.http, (struct txt){ n, strlen(n) }, (struct txt){ v, strlen(v) }));
    }
    va_end(ap);
    return (&req);
}

static inline int
load(const char *src, char *ebuf, size_t elen)
{
    struct sb err;
    FILE *f;
    int fd;

    if (path[0] != '\0')
        unlink(path);
    snprintf(path, sizeof path, "/tmp/test_pol_XXXXXX");
    fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    f = fdopen(fd, "w");
    AN(f);
    fputs(src, f);
    fclose(f);
    sb_init(&err, ebuf, elen);
    return (pol_load(path, &err));
}

static inline void
load_ok(const char *src)
{
    char ebuf[512];

    ck_assert_msg(load(src, ebuf, sizeof ebuf) == 0, "load: %s", ebuf);
    ck_assert(pol_active());
}

static inline enum pol_act
do_recv(struct req *r)
{
    struct pol_synth syn;

    return (pol_recv(r, &syn));
}

static inline const char *
val(const char *name)
{
    const struct txt *v = http_value(req.http, name);
    static char buf[256];

    if (v == NULL)
        return (NULL);
    snprintf(buf, sizeof buf, "%.*s", (int)v->len, v->b);
    return (buf);
}

#endif
