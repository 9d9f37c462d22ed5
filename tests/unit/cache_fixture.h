/*
 * The cache as the request core's tests use it: the parameters and
 * counters, the index with its tag index and bans, and a 16 MB malloc
 * store, set up for each test and torn down in reverse; and objects in
 * it as a fetch leaves them.
 */
#ifndef SUROGAT_TEST_CACHE_FIXTURE_H
#define SUROGAT_TEST_CACHE_FIXTURE_H

#include <stdlib.h>
#include <string.h>

#include "unit.h"
#include "surogat/ban.h"
#include "surogat/cc.h"
#include "surogat/defs.h"
#include "surogat/http.h"
#include "surogat/hsh.h"
#include "surogat/log.h"
#include "surogat/par.h"
#include "surogat/sb.h"
#include "surogat/stat.h"
#include "surogat/sto.h"
#include "surogat/tim.h"
#include "surogat/xkey.h"

/* The same with the store spec (sto_init()) given. */
static inline void
cache_setup_store(const char *spec)
{
    char ebuf[128];
    struct sb err;

    par_init();
    AZ(stat_init());
    log_set_level(LOG_CRIT); /* the refusals the tests provoke are logged as warnings */
    AZ(hsh_init());
    AZ(xkey_init());
    AZ(ban_init());
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_msg(sto_init(spec, &err) == 0, "%s", ebuf);
}

static inline void
cache_setup(void)
{
    cache_setup_store("malloc,16m");
}

static inline void
cache_teardown(void)
{
    hsh_fini();
    ban_fini();
    xkey_fini();
    sto_fini();
    stat_fini();
    par_fini();
}

/* A lookup of key now by a request without fields, not waiting on a busy object. */
static inline enum hsh_result
cache_lookup(const char *key, size_t keylen, struct cobj **ocp, struct hsh_stale *stale)
{
    struct http none;
    struct cc qcc;

    http_init(&none, NULL, 0);
    cc_parse_request(&none, &qcc);
    return (hsh_lookup(key, keylen, &none, &qcc, tim_real(), 0, ocp, stale, NULL));
}

/* The stored head of cache_busy()'s objects. */
#define CACHE_BUSY_HEAD             \
    "HTTP/1.1 200 OK\r\n"           \
    "Cache-Control: max-age=60\r\n" \
    "Content-Type: text/plain\r\n"  \
    "\r\n"

/*
 * A busy object for key, its fresh, storable 200 head stored, as a fetch
 * that has it leaves it; size_hint: its announced body length, 0 if none.
 */
static inline struct cobj *
cache_busy_sized(const char *key, size_t keylen, uint64_t size_hint)
{
    static const char head[] = CACHE_BUSY_HEAD;
    struct hsh_stale stale;
    struct cobj *oc;

    ck_assert_int_eq(cache_lookup(key, keylen, &oc, &stale), HSH_MISS);
    ck_assert_ptr_null(stale.oc);
    hsh_head_set(oc, head, sizeof head - 1);
    oc->status = 200;
    oc->fresh.t_origin = tim_real();
    oc->fresh.ttl = 60;
    oc->body.size_hint = size_hint;
    ck_assert_int_eq(hsh_store_begin(oc), 0);
    return (oc);
}

static inline struct cobj *
cache_busy(const char *key, size_t keylen)
{
    return (cache_busy_sized(key, keylen, 0));
}

/* The fetch of the busy *ocp completes with body: published, its waiters woken. */
static inline void
cache_publish(struct cobj **ocp, const char *body)
{
    ck_assert_int_eq(hsh_append(*ocp, body, strlen(body)), 0);
    (*ocp)->body_complete = true;
    hsh_unbusy(ocp);
}

#endif
