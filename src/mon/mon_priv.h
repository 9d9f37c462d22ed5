/*
 * Shared inside the mon module only.  Everything here but the top-URL
 * table (its own mutex) belongs to the mon thread.
 */
#ifndef SUROGAT_MON_PRIV_H
#define SUROGAT_MON_PRIV_H

#include <stdint.h>

#include "surogat/stat.h"

struct evbuffer;

/* ---- mon_req.c: what workers feed in ---- */

/*
 * Latency buckets: stat_time_bounds.  The counters are the req_time_*
 * rows of tbl/stats.h.
 */
#define MON_NBUCKET        STAT_NBUCKET
#define MON_BUCKET_STAT(i) ((enum stat_id)(STAT_req_time_le_500us + (i)))

#define MON_URL_MAX 160 /* bytes of a URL kept in the top table; longer ones are cut */
#define MON_TOP_K   64  /* entries of the space-saving table */

struct mon_top {
    char url[MON_URL_MAX]; /* NUL-terminated */
    uint64_t count;        /* samples seen, overestimated by at most err */
    uint64_t err;
};

/* A copy of the table, most sampled first; returns the entries copied. */
unsigned mon__top_copy(struct mon_top *out, unsigned max);
void mon__top_clear(void);

/* ---- mon_big.c: the largest cached objects ---- */

#define MON_BIG_N   10  /* objects listed */
#define MON_KEY_MAX 200 /* bytes of "host url" kept */

struct mon_big {
    char key[MON_KEY_MAX]; /* "host url", NUL-terminated */
    uint64_t bytes;        /* body length */
    unsigned status;
    double ttl_left; /* seconds of freshness left, negative when stale */
};

/* The largest objects of the newest finished walk; returns how many. */
unsigned mon__big_get(struct mon_big *out, double now);
void mon__big_fini(void);

/* ---- mon_out.c: the answers ---- */

void mon__metrics(struct evbuffer *out);
void mon__status_json(struct evbuffer *out);
/* A label value or a JSON string's inside: backslash, quote and newline escaped. */
void mon__escaped(struct evbuffer *out, const char *s);
void mon__json_str(struct evbuffer *out, const char *s); /* quoted */
void mon__head(struct evbuffer *out, const char *name, const char *type, const char *help);
/*
 * A histogram's samples from buckets[STAT_NBUCKET] (each its own range),
 * cumulated; labels ("backend=\"x\"") go before le, or NULL.
 */
void mon__histogram(struct evbuffer *out, const char *name, const char *labels,
                    const uint64_t *buckets, uint64_t sum_us);
/* {"bounds":[...],"buckets":[...],"sum":seconds}, buckets as counted. */
void mon__json_hist(struct evbuffer *out, const uint64_t *buckets, uint64_t sum_us);

/* ---- mon_be.c: the backends' counters ---- */

void mon__metrics_backends(struct evbuffer *out);
void mon__json_backends(struct evbuffer *out); /* "backends":[...] */

/* ---- mon.c ---- */

extern double mon__t_start; /* tim_real() when the listener started */
/* Per second over the last `secs` seconds (clamped to what was sampled), 0 before two samples. */
double mon__rate(enum stat_id id, unsigned secs);

#endif
