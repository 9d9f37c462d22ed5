/*
 * What workers feed the admin listener at the end of each request: the
 * latency histogram, the status class and the top-URL table.
 *
 * The histogram and the classes are rows of per-thread counters
 * (tbl/stats.h, req_time_*, client_resp_*): plain increments, no atomics,
 * no lock.
 *
 * The top URLs come from a space-saving table (Metwally, Agrawal and El
 * Abbadi, 2005): MON_TOP_K counters; a URL not in the table replaces the
 * least counted entry and inherits its count as its error bound.  Any URL
 * seen more often than samples / MON_TOP_K times is guaranteed to be in
 * it.  Only one request in MON_TOP_SAMPLE per worker is offered, and a
 * worker that finds top_mtx taken drops its sample instead of waiting:
 * the table is a sketch, and a worker must never queue behind the mon
 * thread reading it.
 */
#include "config.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "surogat/defs.h"
#include "surogat/mon.h"
#include "surogat/req.h"
#include "surogat/stat.h"

#include "mon_priv.h"

_Static_assert(STAT_client_resp_5xx - STAT_client_resp_1xx == 4,
               "tbl/stats.h: the client_resp_Nxx rows must be contiguous, in order");

static pthread_mutex_t top_mtx = PTHREAD_MUTEX_INITIALIZER;
static struct mon_top top[MON_TOP_K]; /* under top_mtx */
static unsigned ntop;                 /* under top_mtx */
static __thread unsigned top_tick;    /* this worker's requests, for sampling */

/* Under top_mtx: count one sample of url. */
static void
top_add(const char *url, size_t len)
{
    unsigned i, min = 0;

    for (i = 0; i < ntop; i++) {
        if (strncmp(top[i].url, url, len) == 0 && top[i].url[len] == '\0') {
            top[i].count++;
            return;
        }
        if (top[i].count < top[min].count)
            min = i;
    }
    if (ntop < MON_TOP_K) {
        i = ntop++;
        top[i].count = top[i].err = 0;
    } else {
        i = min;
        top[i].err = top[i].count;
    }
    memcpy(top[i].url, url, len);
    top[i].url[len] = '\0';
    top[i].count++;
}

void
mon_req_end(const struct req *req)
{
    const struct http *hp;
    double dt;
    size_t len;

    OBJ_CHECK(req, REQ_MAGIC);
    dt = req->t_end - req->t_mono;
    if (dt < 0)
        dt = 0;
    stat_add_id(MON_BUCKET_STAT(stat_time_bucket(dt)), 1);
    STAT_ADD(req_time_us, dt * 1e6 + 0.5);
    /* 0: the client left before any answer; a status outside 1xx-5xx is not one we send. */
    if (req->status >= 100 && req->status <= 599)
        stat_add_id((enum stat_id)(STAT_client_resp_1xx + req->status / 100 - 1), 1);

    if (top_tick++ % MON_TOP_SAMPLE != 0)
        return;
    hp = req->http;
    if (hp->url.len == 0)
        return; /* a malformed head: nothing worth listing */
    len = SRG_MIN(hp->url.len, (size_t)MON_URL_MAX - 1);
    /* A URL from the network is bytes: keep it out of the table unless it is plain text. */
    for (size_t j = 0; j < len; j++)
        if ((unsigned char)hp->url.b[j] <= 0x20 || (unsigned char)hp->url.b[j] >= 0x7f)
            return;
    if (pthread_mutex_trylock(&top_mtx) != 0)
        return;
    top_add(hp->url.b, len);
    AZ(pthread_mutex_unlock(&top_mtx));
}

static int
top_cmp(const void *a, const void *b)
{
    const struct mon_top *x = a, *y = b;

    if (x->count != y->count)
        return (x->count > y->count ? -1 : 1);
    return (strcmp(x->url, y->url));
}

unsigned
mon__top_copy(struct mon_top *out, unsigned max)
{
    struct mon_top all[MON_TOP_K];
    unsigned n;

    AZ(pthread_mutex_lock(&top_mtx));
    n = ntop;
    memcpy(all, top, n * sizeof *all);
    AZ(pthread_mutex_unlock(&top_mtx));
    qsort(all, n, sizeof *all, top_cmp);
    n = SRG_MIN(n, max);
    memcpy(out, all, n * sizeof *out);
    return (n);
}

void
mon__top_clear(void)
{
    AZ(pthread_mutex_lock(&top_mtx));
    ntop = 0;
    AZ(pthread_mutex_unlock(&top_mtx));
}
