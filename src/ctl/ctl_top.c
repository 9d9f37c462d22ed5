/*
 * What `surogatctl top` shows: the counters of the last two `stats -j`
 * answers, their change per second over the last interval and on average
 * since top started, most active first, under the hit ratio, as
 * varnishstat does.  surogatctl.c runs the loop (ask, sample, render,
 * wait); nothing here does I/O on the daemon.
 *
 * Which counters are gauges comes from the table this binary was built
 * with (tbl/stats.h, tbl/be_stats.h for backend.NAME.ROW): a gauge's
 * change may be negative, a counter's is not.  A name the tables lack (a
 * newer daemon) counts as a counter.  The descriptions come from the
 * daemon (`stats -l`, once), so they are those of the counters it has.
 * Glob patterns (fnmatch(3)) keep the rows whose names match one.
 */
#include "config.h"

#include <fnmatch.h>
#include <inttypes.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "surogat/defs.h"

#include "ctl_priv.h"

#define TOP_NAME_MAX 64 /* longer names are cut: the column is narrower anyway */
#define TOP_HEAD     5  /* lines above the counters: title, hit ratio, requests, blank, header */
#define TOP_COLS     90 /* characters of a line before its description */

static const struct {
    const char *name;
    const char *kind;
} kinds[] = {
#define STAT(name, kind, doc) { #name, #kind },
#include "surogat/tbl/stats.h"
}, be_kinds[] = {
#define BESTAT(name, kind, doc) { #name, #kind },
#include "surogat/tbl/be_stats.h"
};

struct top_doc {
    char *name, *doc;
};

struct top_row {
    char name[TOP_NAME_MAX + 1];
    bool gauge;
    uint64_t v;     /* in the last sample */
    uint64_t prev;  /* in the one before */
    uint64_t first; /* in the first sample that had it */
};

struct top {
    unsigned magic;
#define TOP_MAGIC 0x1d7be350
    struct top_row *row;
    size_t n, cap;
    unsigned samples;
    double t, t_prev, t_first; /* monotonic seconds of the last, previous and first sample */
    struct top_doc *doc;
    size_t ndoc;
    char *const *pat; /* the caller's; none: every row */
    int npat;
};

struct top *
top_new(void)
{
    struct top *tp;

    OBJ_NEW(tp, TOP_MAGIC);
    AN(tp);
    return (tp);
}

void
top_free(struct top **tpp)
{
    struct top *tp;

    OBJ_TAKE(tp, tpp, TOP_MAGIC);
    for (size_t i = 0; i < tp->ndoc; i++) {
        free(tp->doc[i].name);
        free(tp->doc[i].doc);
    }
    free(tp->doc);
    free(tp->row);
    OBJ_FREE(&tp);
}

void
top_filter(struct top *tp, char *const *pat, int npat)
{
    OBJ_CHECK(tp, TOP_MAGIC);
    tp->pat = pat;
    tp->npat = npat;
}

void
top_docs(struct top *tp, const char *text)
{
    const char *p = text, *nl, *sp, *v;

    OBJ_CHECK(tp, TOP_MAGIC);
    /* "name value  description" lines (cli_stats.c). */
    for (; *p != '\0'; p = *nl != '\0' ? nl + 1 : nl) {
        nl = strchr(p, '\n');
        if (nl == NULL)
            nl = p + strlen(p);
        sp = memchr(p, ' ', (size_t)(nl - p));
        if (sp == NULL)
            continue;
        for (v = sp; v < nl && *v == ' '; v++)
            continue;
        while (v < nl && *v != ' ')
            v++;
        while (v < nl && *v == ' ')
            v++;
        tp->doc = realloc(tp->doc, (tp->ndoc + 1) * sizeof *tp->doc);
        AN(tp->doc);
        tp->doc[tp->ndoc].name = strndup(p, (size_t)(sp - p));
        tp->doc[tp->ndoc].doc = strndup(v, (size_t)(nl - v));
        AN(tp->doc[tp->ndoc].name);
        AN(tp->doc[tp->ndoc].doc);
        tp->ndoc++;
    }
}

static const char *
doc_of(const struct top *tp, const char *name)
{
    for (size_t i = 0; i < tp->ndoc; i++)
        if (strcmp(tp->doc[i].name, name) == 0)
            return (tp->doc[i].doc);
    return ("");
}

static bool
shown(const struct top *tp, const char *name)
{
    if (tp->npat == 0)
        return (true);
    for (int i = 0; i < tp->npat; i++)
        if (fnmatch(tp->pat[i], name, 0) == 0)
            return (true);
    return (false);
}

static bool
is_gauge(const char *name)
{
    const char *row;

    for (size_t i = 0; i < ARRAY_LEN(kinds); i++)
        if (strcmp(kinds[i].name, name) == 0)
            return (strcmp(kinds[i].kind, "GAUGE") == 0);
    /* backend.NAME.ROW: the name may hold dots, the row does not. */
    if (strncmp(name, "backend.", 8) == 0 && (row = strrchr(name, '.')) != NULL)
        for (size_t i = 0; i < ARRAY_LEN(be_kinds); i++)
            if (strcmp(be_kinds[i].name, row + 1) == 0)
                return (strcmp(be_kinds[i].kind, "GAUGE") == 0);
    return (false);
}

/* The row of `name`; the daemon sends the counters in one order, so `hint` is usually it. */
static struct top_row *
row_of(struct top *tp, const char *name, size_t hint, bool *created)
{
    struct top_row *r;

    *created = false;
    if (hint < tp->n && strcmp(tp->row[hint].name, name) == 0)
        return (&tp->row[hint]);
    for (size_t i = 0; i < tp->n; i++)
        if (strcmp(tp->row[i].name, name) == 0)
            return (&tp->row[i]);
    if (tp->n == tp->cap) {
        tp->cap = tp->cap > 0 ? 2 * tp->cap : 256;
        tp->row = realloc(tp->row, tp->cap * sizeof *tp->row);
        AN(tp->row);
    }
    r = &tp->row[tp->n++];
    memset(r, 0, sizeof *r);
    snprintf(r->name, sizeof r->name, "%s", name);
    r->gauge = is_gauge(r->name);
    *created = true;
    return (r);
}

/*
 * The answer is one flat JSON object of "name": unsigned pairs (cli_cmd.c
 * writes it); anything else in it is skipped rather than trusted.
 */
int
top_sample(struct top *tp, const char *json, double t)
{
    char name[TOP_NAME_MAX + 1];
    const char *p = json, *q;
    unsigned long long v;
    struct top_row *r;
    size_t k = 0, len;
    bool created;
    char *end;

    OBJ_CHECK(tp, TOP_MAGIC);
    AN(json);
    while ((p = strchr(p, '"')) != NULL) {
        q = strchr(p + 1, '"');
        if (q == NULL)
            break;
        len = (size_t)(q - p - 1);
        p = q + 1;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p != ':')
            continue;
        p++;
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p < '0' || *p > '9')
            continue;
        v = strtoull(p, &end, 10);
        snprintf(name, sizeof name, "%.*s", (int)SRG_MIN(len, TOP_NAME_MAX), q - len);
        p = end;
        r = row_of(tp, name, k++, &created);
        if (created) {
            r->first = r->prev = r->v = v;
            continue;
        }
        r->prev = r->v;
        r->v = v;
    }
    if (k == 0)
        return (-1);
    if (tp->samples++ == 0)
        tp->t_first = tp->t_prev = t;
    else
        tp->t_prev = tp->t;
    tp->t = t;
    return (0);
}

bool
top_has_rates(const struct top *tp)
{
    OBJ_CHECK(tp, TOP_MAGIC);
    return (tp->samples >= 2);
}

/* Change per second between two values; a counter that went backwards (a restart) shows 0. */
static double
per_sec(const struct top_row *r, uint64_t from, double dt)
{
    if (dt <= 0)
        return (0);
    if (r->gauge)
        return ((double)(int64_t)(r->v - from) / dt);
    return (r->v >= from ? (double)(r->v - from) / dt : 0);
}

struct top_line {
    const struct top_row *r;
    size_t idx;
    double rate, avg;
};

static double
mag(double x)
{
    return (x < 0 ? -x : x);
}

/* Most active first: the last interval, then the average, then non-zero values, then table order.
 */
static int
line_cmp(const void *a, const void *b)
{
    const struct top_line *x = a, *y = b;

    if (mag(x->rate) != mag(y->rate))
        return (mag(x->rate) > mag(y->rate) ? -1 : 1);
    if (mag(x->avg) != mag(y->avg))
        return (mag(x->avg) > mag(y->avg) ? -1 : 1);
    if ((x->r->v != 0) != (y->r->v != 0))
        return (x->r->v != 0 ? -1 : 1);
    return (x->idx < y->idx ? -1 : x->idx > y->idx);
}

static const struct top_row *
find_row(const struct top *tp, const char *name)
{
    for (size_t i = 0; i < tp->n; i++)
        if (strcmp(tp->row[i].name, name) == 0)
            return (&tp->row[i]);
    return (NULL);
}

/* "85.3%" of hits in hits + misses, or "-" when there was no lookup. */
static void
ratio(char *buf, size_t len, uint64_t hit, uint64_t miss)
{
    if (hit + miss == 0)
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, "%.1f%%", 100.0 * (double)hit / (double)(hit + miss));
}

void
top_render(const struct top *tp, FILE *f, const char *addr, double interval, unsigned rows,
           unsigned cols)
{
    const struct top_row *h, *m, *req;
    double dt, dt_all;
    char last[16], since[16], ever[16], clock[16];
    struct top_line *lines;
    time_t now = time(NULL);
    struct tm tm;
    size_t n;

    OBJ_CHECK(tp, TOP_MAGIC);
    dt = tp->t - tp->t_prev;
    dt_all = tp->t - tp->t_first;
    (void)localtime_r(&now, &tm);
    strftime(clock, sizeof clock, "%H:%M:%S", &tm);
    fprintf(f, "surogat top  %s  %s  every %gs\n", addr, clock, interval);
    h = find_row(tp, "cache_hit");
    m = find_row(tp, "cache_miss");
    if (h != NULL && m != NULL) {
        ratio(last, sizeof last, h->v - h->prev, m->v - m->prev);
        ratio(since, sizeof since, h->v - h->first, m->v - m->first);
        ratio(ever, sizeof ever, h->v, m->v);
        fprintf(f, "Hit ratio: %s last %.1fs, %s since top started, %s since surogatd started\n",
                last, dt, since, ever);
    } else {
        fprintf(f, "Hit ratio: -\n");
    }
    req = find_row(tp, "client_req");
    if (req != NULL)
        fprintf(f, "Requests:  %.1f/s last %.1fs, %.1f/s since top started\n",
                per_sec(req, req->prev, dt), dt, per_sec(req, req->first, dt_all));
    else
        fputs("Requests:  -\n", f);
    fprintf(f, "\n%-40s %20s %14s %14s  %s\n", "NAME", "CURRENT", "CHANGE/s", "AVG/s",
            "DESCRIPTION");
    lines = calloc(tp->n + 1, sizeof *lines);
    AN(lines);
    n = 0;
    for (size_t i = 0; i < tp->n; i++) {
        if (!shown(tp, tp->row[i].name))
            continue;
        lines[n].r = &tp->row[i];
        lines[n].idx = i;
        lines[n].rate = per_sec(&tp->row[i], tp->row[i].prev, dt);
        lines[n].avg = per_sec(&tp->row[i], tp->row[i].first, dt_all);
        n++;
    }
    qsort(lines, n, sizeof *lines, line_cmp);
    if (rows > 0)
        n = rows > TOP_HEAD ? SRG_MIN(n, rows - TOP_HEAD) : 0;
    for (size_t i = 0; i < n; i++) {
        const struct top_row *r = lines[i].r;
        /* The description fills what is left of a terminal's line, and no more. */
        int left = cols > TOP_COLS + 2 ? (int)(cols - TOP_COLS - 2) : cols > 0 ? 0 : INT_MAX;
        if (r->gauge)
            fprintf(f, "%-40s %20" PRId64 " %14.1f %14.1f", r->name, (int64_t)r->v, lines[i].rate,
                    lines[i].avg);
        else
            fprintf(f, "%-40s %20" PRIu64 " %14.1f %14.1f", r->name, r->v, lines[i].rate,
                    lines[i].avg);
        if (left > 0 && *doc_of(tp, r->name) != '\0')
            fprintf(f, "  %.*s", left, doc_of(tp, r->name));
        fputc('\n', f);
    }
    free(lines);
}
