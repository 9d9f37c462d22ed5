/*
 * The admin listener's answers: /metrics in the Prometheus text
 * exposition format 0.0.4, and /status.json for the status page.  Both
 * run on the mon thread and read the counters by summing the per-thread
 * blocks (stat_sum), so no worker is held up by a scrape.
 *
 * Metric names: surogat_ followed by the tbl/stats.h row, counters with
 * _total; the req_time_* rows become the histogram
 * surogat_request_duration_seconds.  Backends and stores are labels.
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

struct store {
    char name[16];
    char kind[16];
    unsigned long long size, used;
};

static void add_escaped(struct evbuffer *out, const char *s);
static void json_str(struct evbuffer *out, const char *s);

/* One /metrics line per live backend: 1 while it takes traffic (probes, admin state). */
static void
metrics_backend(const struct be *be, void *priv)
{
    struct evbuffer *out = priv;

    evbuffer_add(out, "surogat_backend_healthy{backend=\"", 33);
    add_escaped(out, be->name);
    evbuffer_add(out, "\",address=\"", 11);
    add_escaped(out, be->hostport != NULL ? be->hostport : "static");
    evbuffer_add_printf(out, "\"} %d\n", be_healthy(be) ? 1 : 0);
}

/* One /status.json entry per live backend; *(bool *) in priv[1]: the first one is written. */
static void
json_backend(const struct be *be, void *priv)
{
    void **a = priv;
    struct evbuffer *out = a[0];
    bool *first = a[1];

    evbuffer_add(out, *first ? "{\"name\":" : ",{\"name\":", *first ? 8 : 9);
    *first = false;
    json_str(out, be->name);
    evbuffer_add(out, ",\"address\":", 11);
    json_str(out, be->hostport != NULL ? be->hostport : "static");
    evbuffer_add_printf(out, ",\"healthy\":%s}", be_healthy(be) ? "true" : "false");
}

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

static bool
is_hist_row(unsigned i)
{
    return (i == STAT_req_time_us || (i >= STAT_req_time_le_500us && i <= STAT_req_time_over_10s));
}

static double
hit_ratio(const struct stat_block *b)
{
    uint64_t lookups = b->v[STAT_cache_hit] + b->v[STAT_cache_miss];

    return (lookups > 0 ? (double)b->v[STAT_cache_hit] / (double)lookups : 0);
}

/* A label value or a JSON string: backslash, quote and newline escaped, other controls dropped. */
static void
add_escaped(struct evbuffer *out, const char *s)
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

static void
head(struct evbuffer *out, const char *name, const char *type, const char *help)
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
    uint64_t cum = 0;
    unsigned n;

    stat_sum(&b);
    for (unsigned i = 0; i < STAT__N; i++) {
        char name[96];
        if (is_hist_row(i))
            continue;
        snprintf(name, sizeof name, "surogat_%s%s", stat_tbl[i].name,
                 stat_tbl[i].kind == KIND_COUNTER ? "_total" : "");
        head(out, name, stat_tbl[i].kind == KIND_COUNTER ? "counter" : "gauge", stat_tbl[i].doc);
        evbuffer_add_printf(out, "%s %" PRIu64 "\n", name, b.v[i]);
    }

    head(out, "surogat_request_duration_seconds", "histogram",
         "Time from a complete request head to the end of its response.");
    for (unsigned i = 0; i < MON_NBUCKET; i++) {
        cum += b.v[MON_BUCKET_STAT(i)];
        if (i < MON_NBUCKET - 1)
            evbuffer_add_printf(out,
                                "surogat_request_duration_seconds_bucket{le=\"%g\"} %" PRIu64 "\n",
                                mon__bounds[i], cum);
        else
            evbuffer_add_printf(
                out, "surogat_request_duration_seconds_bucket{le=\"+Inf\"} %" PRIu64 "\n", cum);
    }
    evbuffer_add_printf(out, "surogat_request_duration_seconds_sum %.6f\n",
                        (double)b.v[STAT_req_time_us] / 1e6);
    evbuffer_add_printf(out, "surogat_request_duration_seconds_count %" PRIu64 "\n", cum);

    head(out, "surogat_cache_hit_ratio", "gauge",
         "cache_hit / (cache_hit + cache_miss) since start; 0 before the first lookup.");
    evbuffer_add_printf(out, "surogat_cache_hit_ratio %.6f\n", hit_ratio(&b));
    head(out, "surogat_client_requests_per_second", "gauge",
         "Client requests per second over the last 10 seconds.");
    evbuffer_add_printf(out, "surogat_client_requests_per_second %.3f\n",
                        mon__rate(STAT_client_req, RATE_WINDOW));
    head(out, "surogat_uptime_seconds", "gauge", "Seconds since the admin listener started.");
    evbuffer_add_printf(out, "surogat_uptime_seconds %.3f\n", tim_real() - mon__t_start);

    head(out, "surogat_backend_healthy", "gauge", "1 if the backend takes traffic, else 0.");
    be_foreach(metrics_backend, out);

    n = stores_get(st, MAX_STORES);
    head(out, "surogat_store_size_bytes", "gauge", "Bytes a store may use.");
    for (unsigned i = 0; i < n; i++)
        evbuffer_add_printf(out, "surogat_store_size_bytes{store=\"%s\",kind=\"%s\"} %llu\n",
                            st[i].name, st[i].kind, st[i].size);
    head(out, "surogat_store_used_bytes", "gauge", "Bytes of a store in use.");
    for (unsigned i = 0; i < n; i++)
        evbuffer_add_printf(out, "surogat_store_used_bytes{store=\"%s\",kind=\"%s\"} %llu\n",
                            st[i].name, st[i].kind, st[i].used);
    head(out, "surogat_store_fill_ratio", "gauge", "Used bytes of a store over its size.");
    for (unsigned i = 0; i < n; i++)
        evbuffer_add_printf(out, "surogat_store_fill_ratio{store=\"%s\",kind=\"%s\"} %.9g\n",
                            st[i].name, st[i].kind,
                            st[i].size > 0 ? (double)st[i].used / (double)st[i].size : 0);
}

static void
json_str(struct evbuffer *out, const char *s)
{
    evbuffer_add(out, "\"", 1);
    add_escaped(out, s);
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
                        now, now - mon__t_start);
    evbuffer_add_printf(out, "\"hit_ratio\":%.6f,\"counters\":{", hit_ratio(&b));
    for (unsigned i = 0; i < STAT__N; i++)
        evbuffer_add_printf(out, "%s\"%s\":%" PRIu64, i > 0 ? "," : "", stat_tbl[i].name, b.v[i]);
    evbuffer_add_printf(out,
                        "},\"rates\":{\"window\":%d,\"client_req\":%.3f,\"cache_hit\":%.3f,"
                        "\"resp_body_bytes\":%.3f},",
                        RATE_WINDOW, mon__rate(STAT_client_req, RATE_WINDOW),
                        mon__rate(STAT_cache_hit, RATE_WINDOW),
                        mon__rate(STAT_resp_body_bytes, RATE_WINDOW));

    evbuffer_add(out, "\"latency\":{\"bounds\":[", 21);
    for (unsigned i = 0; i < MON_NBUCKET - 1; i++)
        evbuffer_add_printf(out, "%s%g", i > 0 ? "," : "", mon__bounds[i]);
    evbuffer_add(out, "],\"buckets\":[", 13);
    for (unsigned i = 0; i < MON_NBUCKET; i++)
        evbuffer_add_printf(out, "%s%" PRIu64, i > 0 ? "," : "", b.v[MON_BUCKET_STAT(i)]);
    evbuffer_add_printf(out, "],\"sum\":%.6f},", (double)b.v[STAT_req_time_us] / 1e6);

    evbuffer_add(out, "\"backends\":[", 12);
    {
        bool first = true;
        void *a[2] = { out, &first };
        be_foreach(json_backend, a);
    }

    evbuffer_add(out, "],\"stores\":[", 12);
    n = stores_get(st, MAX_STORES);
    for (unsigned i = 0; i < n; i++)
        evbuffer_add_printf(out, "%s{\"name\":\"%s\",\"kind\":\"%s\",\"size\":%llu,\"used\":%llu}",
                            i > 0 ? "," : "", st[i].name, st[i].kind, st[i].size, st[i].used);

    evbuffer_add_printf(out, "],\"top_urls\":{\"sample\":%d,\"items\":[", MON_TOP_SAMPLE);
    n = mon__top_copy(top, TOP_SHOWN);
    for (unsigned i = 0; i < n; i++) {
        evbuffer_add_printf(out, "%s{\"url\":", i > 0 ? "," : "");
        json_str(out, top[i].url);
        evbuffer_add_printf(out, ",\"count\":%" PRIu64 ",\"err\":%" PRIu64 "}", top[i].count,
                            top[i].err);
    }

    evbuffer_add(out, "]},\"biggest\":[", 14);
    n = mon__big_get(big, now);
    for (unsigned i = 0; i < n; i++) {
        evbuffer_add_printf(out, "%s{\"key\":", i > 0 ? "," : "");
        json_str(out, big[i].key);
        evbuffer_add_printf(out, ",\"bytes\":%" PRIu64 ",\"status\":%u,\"ttl\":%.1f}", big[i].bytes,
                            big[i].status, big[i].ttl_left);
    }
    evbuffer_add(out, "]}\n", 3);
}
