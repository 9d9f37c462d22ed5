/*
 * The admin listener's answers: /metrics in the Prometheus text
 * exposition format 0.0.4, and /status.json for the status page.  Both
 * run on the mon thread and read the counters by summing the per-thread
 * blocks (stat_sum), so no worker is held up by a scrape.
 *
 * Metric names: surogat_ followed by the tbl/stats.h row, counters with
 * _total; the req_time_* rows become the histogram
 * surogat_request_duration_seconds, the client_resp_* rows the family
 * surogat_responses_total{class}.  Backends (mon_be.c) and stores are
 * labels.
 */
#include "config.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <event2/buffer.h>

#include "surogat/be.h"
#include "surogat/defs.h"
#include "surogat/mon.h"
#include "surogat/sb.h"
#include "surogat/stat.h"
#include "surogat/sto.h"
#include "surogat/tim.h"

#include "mon_priv.h"

#define RATE_WINDOW 10 /* seconds over which the server-side rates are taken */
#define MAX_STORES  16 /* stores listed; -s is rarely given more than a few times */
#define TOP_SHOWN   20 /* URLs listed of the MON_TOP_K sampled */

enum kind { KIND_COUNTER, KIND_GAUGE };

static const struct {
    const char *name;
    enum kind kind;
    const char *doc;
} stat_tbl[] = {
#define STAT(name, kind, doc) { #name, KIND_##kind, doc },
#include "surogat/tbl/stats.h"
};

static const char *const classes[] = { "1xx", "2xx", "3xx", "4xx", "5xx" };

struct store {
    char name[16];
    char kind[16];
    unsigned long long size, used;
};

/* The stores, from sto_list()'s "sN KIND size=N used=N ..." lines. */
static unsigned
stores_get(struct store *st, unsigned max)
{
    char buf[4096], *line, *save = NULL;
    struct sb sb;
    unsigned n = 0;

    sb_init(&sb, buf, sizeof buf);
    sto_list(&sb);
    for (line = strtok_r(buf, "\n", &save); line != NULL && n < max;
         line = strtok_r(NULL, "\n", &save)) {
        if (sscanf(line, "%15s %15s size=%llu used=%llu", st[n].name, st[n].kind, &st[n].size,
                   &st[n].used) == 4)
            n++;
    }
    return (n);
}

/* Rows /metrics shows otherwise: as a histogram, a labelled family, or surogat_uptime_seconds. */
static bool
is_special_row(unsigned i)
{
    return (i == STAT_req_time_us || (i >= STAT_req_time_le_500us && i <= STAT_req_time_over_10s) ||
            (i >= STAT_client_resp_1xx && i <= STAT_client_resp_5xx) || i == STAT_uptime);
}

static double
hit_ratio(const struct stat_block *b)
{
    uint64_t lookups = b->v[STAT_cache_hit] + b->v[STAT_cache_miss];

    return (lookups > 0 ? (double)b->v[STAT_cache_hit] / (double)lookups : 0);
}

/*
 * A histogram's samples: buckets[STAT_NBUCKET], each its own range, added
 * up here into the cumulative _bucket samples; sum_us in microseconds.
 * labels: "backend=\"x\"" to put before le, or NULL.
 */
void
mon__histogram(struct evbuffer *out, const char *name, const char *labels, const uint64_t *buckets,
               uint64_t sum_us)
{
    const char *sep = labels != NULL ? "," : "";
    uint64_t cum = 0;

    labels = labels != NULL ? labels : "";
    for (unsigned i = 0; i < STAT_NBUCKET; i++) {
        cum += buckets[i];
        if (i < STAT_NBUCKET - 1)
            evbuffer_add_printf(out, "%s_bucket{%s%sle=\"%g\"} %" PRIu64 "\n", name, labels, sep,
                                stat_time_bounds[i], cum);
        else
            evbuffer_add_printf(out, "%s_bucket{%s%sle=\"+Inf\"} %" PRIu64 "\n", name, labels, sep,
                                cum);
    }
    evbuffer_add_printf(out, "%s_sum%s%s%s %.6f\n", name, *labels ? "{" : "", labels,
                        *labels ? "}" : "", (double)sum_us / 1e6);
    evbuffer_add_printf(out, "%s_count%s%s%s %" PRIu64 "\n", name, *labels ? "{" : "", labels,
                        *labels ? "}" : "", cum);
}

/* {"bounds":[...],"buckets":[...],"sum":seconds}: per bucket, not cumulative. */
void
mon__json_hist(struct evbuffer *out, const uint64_t *buckets, uint64_t sum_us)
{
    evbuffer_add(out, "{\"bounds\":[", 11);
    for (unsigned i = 0; i < STAT_NBUCKET - 1; i++)
        evbuffer_add_printf(out, "%s%g", i > 0 ? "," : "", stat_time_bounds[i]);
    evbuffer_add(out, "],\"buckets\":[", 13);
    for (unsigned i = 0; i < STAT_NBUCKET; i++)
        evbuffer_add_printf(out, "%s%" PRIu64, i > 0 ? "," : "", buckets[i]);
    evbuffer_add_printf(out, "],\"sum\":%.6f}", (double)sum_us / 1e6);
}

/* A label value or a JSON string: backslash, quote and newline escaped, other controls dropped. */
void
mon__escaped(struct evbuffer *out, const char *s)
{
    for (; *s != '\0'; s++) {
        if (*s == '\\' || *s == '"')
            evbuffer_add_printf(out, "\\%c", *s);
        else if (*s == '\n')
            evbuffer_add(out, "\\n", 2);
        else if ((unsigned char)*s >= 0x20)
            evbuffer_add(out, s, 1);
    }
}

void
mon__head(struct evbuffer *out, const char *name, const char *type, const char *help)
{
    evbuffer_add_printf(out, "# HELP %s ", name);
    /* HELP text escapes only backslash and newline; the docs have neither, but be safe. */
    for (const char *p = help; *p != '\0'; p++) {
        if (*p == '\\')
            evbuffer_add(out, "\\\\", 2);
        else if (*p == '\n')
            evbuffer_add(out, "\\n", 2);
        else
            evbuffer_add(out, p, 1);
    }
    evbuffer_add_printf(out, "\n# TYPE %s %s\n", name, type);
}

void
mon__metrics(struct evbuffer *out)
{
    struct store st[MAX_STORES];
    struct stat_block b;
    unsigned n;

    stat_sum(&b);
    for (unsigned i = 0; i < STAT__N; i++) {
        char name[96];
        if (is_special_row(i))
            continue;
        snprintf(name, sizeof name, "surogat_%s%s", stat_tbl[i].name,
                 stat_tbl[i].kind == KIND_COUNTER ? "_total" : "");
        mon__head(out, name, stat_tbl[i].kind == KIND_COUNTER ? "counter" : "gauge",
                  stat_tbl[i].doc);
        evbuffer_add_printf(out, "%s %" PRIu64 "\n", name, b.v[i]);
    }

    mon__head(out, "surogat_request_duration_seconds", "histogram",
              "Time from a complete request head to the end of its response.");
    mon__histogram(out, "surogat_request_duration_seconds", NULL, &b.v[MON_BUCKET_STAT(0)],
                   b.v[STAT_req_time_us]);
    mon__head(out, "surogat_responses_total", "counter",
              "Responses to clients by status class (client_resp_1xx ... client_resp_5xx).");
    for (unsigned i = 0; i < ARRAY_LEN(classes); i++)
        evbuffer_add_printf(out, "surogat_responses_total{class=\"%s\"} %" PRIu64 "\n", classes[i],
                            b.v[STAT_client_resp_1xx + i]);

    mon__head(out, "surogat_cache_hit_ratio", "gauge",
              "cache_hit / (cache_hit + cache_miss) since start; 0 before the first lookup.");
    evbuffer_add_printf(out, "surogat_cache_hit_ratio %.6f\n", hit_ratio(&b));
    mon__head(out, "surogat_client_requests_per_second", "gauge",
              "Client requests per second over the last 10 seconds.");
    evbuffer_add_printf(out, "surogat_client_requests_per_second %.3f\n",
                        mon__rate(STAT_client_req, RATE_WINDOW));
    mon__head(out, "surogat_uptime_seconds", "gauge", "Seconds since surogatd started.");
    evbuffer_add_printf(out, "surogat_uptime_seconds %.3f\n", stat_uptime());

    mon__metrics_backends(out);

    n = stores_get(st, MAX_STORES);
    mon__head(out, "surogat_store_size_bytes", "gauge", "Bytes a store may use.");
    for (unsigned i = 0; i < n; i++)
        evbuffer_add_printf(out, "surogat_store_size_bytes{store=\"%s\",kind=\"%s\"} %llu\n",
                            st[i].name, st[i].kind, st[i].size);
    mon__head(out, "surogat_store_used_bytes", "gauge", "Bytes of a store in use.");
    for (unsigned i = 0; i < n; i++)
        evbuffer_add_printf(out, "surogat_store_used_bytes{store=\"%s\",kind=\"%s\"} %llu\n",
                            st[i].name, st[i].kind, st[i].used);
    mon__head(out, "surogat_store_fill_ratio", "gauge", "Used bytes of a store over its size.");
    for (unsigned i = 0; i < n; i++)
        evbuffer_add_printf(out, "surogat_store_fill_ratio{store=\"%s\",kind=\"%s\"} %.9g\n",
                            st[i].name, st[i].kind,
                            st[i].size > 0 ? (double)st[i].used / (double)st[i].size : 0);
}

void
mon__json_str(struct evbuffer *out, const char *s)
{
    evbuffer_add(out, "\"", 1);
    mon__escaped(out, s);
    evbuffer_add(out, "\"", 1);
}

void
mon__status_json(struct evbuffer *out)
{
    struct mon_top top[TOP_SHOWN];
    struct mon_big big[MON_BIG_N];
    struct store st[MAX_STORES];
    struct stat_block b;
    double now = tim_real();
    unsigned n;

    stat_sum(&b);
    evbuffer_add_printf(out, "{\"version\":\"%s\",\"time\":%.3f,\"uptime\":%.3f,", SUROGAT_VERSION,
                        now, stat_uptime());
    evbuffer_add_printf(out, "\"hit_ratio\":%.6f,\"counters\":{", hit_ratio(&b));
    for (unsigned i = 0; i < STAT__N; i++)
        evbuffer_add_printf(out, "%s\"%s\":%" PRIu64, i > 0 ? "," : "", stat_tbl[i].name, b.v[i]);
    evbuffer_add_printf(out,
                        "},\"rates\":{\"window\":%d,\"client_req\":%.3f,\"cache_hit\":%.3f,"
                        "\"resp_body_bytes\":%.3f},",
                        RATE_WINDOW, mon__rate(STAT_client_req, RATE_WINDOW),
                        mon__rate(STAT_cache_hit, RATE_WINDOW),
                        mon__rate(STAT_resp_body_bytes, RATE_WINDOW));

    evbuffer_add(out, "\"latency\":", 10);
    mon__json_hist(out, &b.v[MON_BUCKET_STAT(0)], b.v[STAT_req_time_us]);
    evbuffer_add(out, ",", 1);

    mon__json_backends(out);
    evbuffer_add(out, ",\"stores\":[", 11);
    n = stores_get(st, MAX_STORES);
    for (unsigned i = 0; i < n; i++)
        evbuffer_add_printf(out, "%s{\"name\":\"%s\",\"kind\":\"%s\",\"size\":%llu,\"used\":%llu}",
                            i > 0 ? "," : "", st[i].name, st[i].kind, st[i].size, st[i].used);

    evbuffer_add_printf(out, "],\"top_urls\":{\"sample\":%d,\"items\":[", MON_TOP_SAMPLE);
    n = mon__top_copy(top, TOP_SHOWN);
    for (unsigned i = 0; i < n; i++) {
        evbuffer_add_printf(out, "%s{\"url\":", i > 0 ? "," : "");
        mon__json_str(out, top[i].url);
        evbuffer_add_printf(out, ",\"count\":%" PRIu64 ",\"err\":%" PRIu64 "}", top[i].count,
                            top[i].err);
    }

    evbuffer_add(out, "]},\"biggest\":[", 14);
    n = mon__big_get(big, now);
    for (unsigned i = 0; i < n; i++) {
        evbuffer_add_printf(out, "%s{\"key\":", i > 0 ? "," : "");
        mon__json_str(out, big[i].key);
        evbuffer_add_printf(out, ",\"bytes\":%" PRIu64 ",\"status\":%u,\"ttl\":%.1f}", big[i].bytes,
                            big[i].status, big[i].ttl_left);
    }
    evbuffer_add(out, "]}\n", 3);
}
