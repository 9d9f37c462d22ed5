/*
 * The backends' counters (tbl/be_stats.h) on the admin listener: in
 * /metrics as families labelled backend="NAME" (and program="P1,P2",
 * the policy programs declaring it, when any do), and in /status.json
 * for the status page's backend table.  On the mon thread, from
 * be_snapshot(): the registry's lock is held only while it copies.
 *
 * The rows map onto families so that a dashboard aggregates by label
 * rather than by name: the fail_* rows are
 * surogat_backend_failures_total{kind}, the resp_* rows
 * surogat_backend_responses_total{class}, the fb_time_* and time_* rows
 * the histograms surogat_backend_first_byte_seconds and
 * surogat_backend_duration_seconds; every other row is
 * surogat_backend_ROW (a counter with _total).
 */
#include "config.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "surogat/be.h"
#include "surogat/defs.h"
#include "surogat/pol.h"
#include "surogat/prb.h"
#include "surogat/sb.h"
#include "surogat/stat.h"

#include "mon_priv.h"

#define LABELS_MAX 512 /* backend="64 bytes",program="128 bytes", escaped at worst twice as long \
                        */

enum fam {
    FAM_ROW,     /* surogat_backend_ROW */
    FAM_FAIL,    /* surogat_backend_failures_total{kind} */
    FAM_RESP,    /* surogat_backend_responses_total{class} */
    FAM_HIST,    /* a bucket or a sum of one of the two histograms */
    FAM_CHANGED, /* surogat_backend_health_changed_timestamp_seconds */
};

static enum fam
fam_of(enum stat_be_id id)
{
    if (id >= STAT_BE_fail_connect && id <= STAT_BE_fail_busy)
        return (FAM_FAIL);
    if (id >= STAT_BE_resp_1xx && id <= STAT_BE_resp_5xx)
        return (FAM_RESP);
    if (id >= STAT_BE_fb_time_us && id <= STAT_BE_time_over_10s)
        return (FAM_HIST);
    if (id == STAT_BE_changed)
        return (FAM_CHANGED);
    return (FAM_ROW);
}

_Static_assert(STAT_BE_fail_busy - STAT_BE_fail_connect == 5 &&
                   STAT_BE_fb_time_le_500us == STAT_BE_fb_time_us + 1 &&
                   STAT_BE_time_us == STAT_BE_fb_time_over_10s + 1 &&
                   STAT_BE_time_le_500us == STAT_BE_time_us + 1,
               "tbl/be_stats.h: the fail_*, fb_time_* and time_* rows in the order mon_be.c reads");

/* Into buf: a label value escaped as mon__escaped() does. */
static void
esc(struct sb *sb, const char *s)
{
    for (; *s != '\0'; s++) {
        if (*s == '\\' || *s == '"')
            sb_printf(sb, "\\%c", *s);
        else if (*s == '\n')
            sb_cat(sb, "\\n");
        else if ((unsigned char)*s >= 0x20)
            sb_bcat(sb, s, 1);
    }
}

/* backend="NAME"[,program="P"] of each backend, in labels[i * LABELS_MAX]. */
static char *
labels_of(const struct be_snap *v, unsigned n)
{
    char *labels = malloc((n > 0 ? n : 1) * LABELS_MAX);
    struct sb sb;

    AN(labels);
    for (unsigned i = 0; i < n; i++) {
        sb_init(&sb, labels + i * LABELS_MAX, LABELS_MAX);
        sb_cat(&sb, "backend=\"");
        esc(&sb, v[i].name);
        sb_cat(&sb, "\"");
        if (v[i].progs[0] != '\0') {
            sb_cat(&sb, ",program=\"");
            esc(&sb, v[i].progs);
            sb_cat(&sb, "\"");
        }
        AN(sb_ok(&sb));
    }
    return (labels);
}

static const struct {
    const char *name, *help;
    enum stat_be_id first, sum; /* the first bucket's row, the sum's */
} hists[] = {
    { "surogat_backend_first_byte_seconds",
      "Time from the start of a backend request to the first byte of its response.",
      STAT_BE_fb_time_le_500us, STAT_BE_fb_time_us },
    { "surogat_backend_duration_seconds",
      "Time from the start of a backend request to the end of its response body.",
      STAT_BE_time_le_500us, STAT_BE_time_us },
};

void
mon__metrics_backends(struct evbuffer *out)
{
    struct be_snap *v;
    char name[96], *labels;
    unsigned n;

    v = be_snapshot(&n);
    pol_prog_label(v, n);
    labels = labels_of(v, n);

    for (unsigned k = 0; k < STAT_BE__N; k++) {
        enum stat_be_id id = (enum stat_be_id)k;
        bool gauge = stat_be_is_gauge(id);
        if (fam_of(id) != FAM_ROW && fam_of(id) != FAM_CHANGED)
            continue;
        if (fam_of(id) == FAM_CHANGED)
            snprintf(name, sizeof name, "surogat_backend_health_changed_timestamp_seconds");
        else
            snprintf(name, sizeof name, "surogat_backend_%s%s", stat_be_name(id),
                     gauge ? "" : "_total");
        mon__head(out, name, gauge ? "gauge" : "counter", stat_be_doc(id));
        for (unsigned i = 0; i < n; i++) {
            evbuffer_add_printf(out, "%s{%s", name, labels + i * LABELS_MAX);
            /* The address on one family only, as an info label: it is no identity. */
            if (id == STAT_BE_healthy) {
                evbuffer_add(out, ",address=\"", 10);
                mon__escaped(out, v[i].addr);
                evbuffer_add(out, "\"", 1);
            }
            evbuffer_add_printf(out, "} %" PRIu64 "\n", v[i].v[k]);
        }
    }

    mon__head(out, "surogat_backend_failures_total", "counter",
              "Failed backend requests by kind: connect, connect_timeout, first_byte_timeout, "
              "between_bytes_timeout, bad_resp, busy (the fail_* rows of backend.NAME).");
    for (unsigned i = 0; i < n; i++)
        for (unsigned k = STAT_BE_fail_connect; k <= STAT_BE_fail_busy; k++)
            evbuffer_add_printf(out, "surogat_backend_failures_total{%s,kind=\"%s\"} %" PRIu64 "\n",
                                labels + i * LABELS_MAX,
                                stat_be_name((enum stat_be_id)k) + strlen("fail_"), v[i].v[k]);

    mon__head(out, "surogat_backend_responses_total", "counter",
              "Backend responses by status class (the resp_* rows of backend.NAME).");
    for (unsigned i = 0; i < n; i++)
        for (unsigned k = STAT_BE_resp_1xx; k <= STAT_BE_resp_5xx; k++)
            evbuffer_add_printf(out,
                                "surogat_backend_responses_total{%s,class=\"%s\"} %" PRIu64 "\n",
                                labels + i * LABELS_MAX,
                                stat_be_name((enum stat_be_id)k) + strlen("resp_"), v[i].v[k]);

    for (unsigned h = 0; h < ARRAY_LEN(hists); h++) {
        mon__head(out, hists[h].name, "histogram", hists[h].help);
        for (unsigned i = 0; i < n; i++)
            mon__histogram(out, hists[h].name, labels + i * LABELS_MAX, &v[i].v[hists[h].first],
                           v[i].v[hists[h].sum]);
    }
    free(labels);
    free(v);
}

void
mon__json_backends(struct evbuffer *out)
{
    char hbuf[PRB_WINDOW_MAX + 1];
    struct be_snap *v;
    struct sb sb;
    unsigned n;

    v = be_snapshot(&n);
    pol_prog_label(v, n);
    evbuffer_add(out, "\"backends\":[", 12);
    /* Oldest first, as they were declared. */
    for (unsigned j = n, first = 1; j-- > 0; first = 0) {
        const struct be_snap *b = &v[j];
        evbuffer_add(out, first ? "{\"name\":" : ",{\"name\":", first ? 8 : 9);
        mon__json_str(out, b->name);
        evbuffer_add(out, ",\"address\":", 11);
        mon__json_str(out, b->addr);
        evbuffer_add(out, ",\"program\":", 11);
        mon__json_str(out, b->progs);
        evbuffer_add_printf(out, ",\"healthy\":%s,\"changed\":%" PRIu64 ",\"probe\":",
                            b->v[STAT_BE_healthy] ? "true" : "false", b->v[STAT_BE_changed]);
        if (b->window > 0) {
            sb_init(&sb, hbuf, sizeof hbuf);
            prb_history(b->v[STAT_BE_happy], b->window, &sb);
            evbuffer_add_printf(
                out, "{\"window\":%u,\"good\":%" PRIu64 ",\"bits\":%" PRIu64 ",\"history\":\"%s\"}",
                b->window, b->v[STAT_BE_probe_good], b->v[STAT_BE_happy], hbuf);
        } else {
            evbuffer_add(out, "null", 4);
        }
        evbuffer_add(out, ",\"counters\":{", 13);
        for (unsigned k = 0; k < STAT_BE__N; k++)
            evbuffer_add_printf(out, "%s\"%s\":%" PRIu64, k > 0 ? "," : "",
                                stat_be_name((enum stat_be_id)k), b->v[k]);
        evbuffer_add(out, "},\"first_byte\":", 15);
        mon__json_hist(out, &b->v[STAT_BE_fb_time_le_500us], b->v[STAT_BE_fb_time_us]);
        evbuffer_add(out, ",\"total\":", 9);
        mon__json_hist(out, &b->v[STAT_BE_time_le_500us], b->v[STAT_BE_time_us]);
        evbuffer_add(out, "}", 1);
    }
    evbuffer_add(out, "]", 1);
    free(v);
}
