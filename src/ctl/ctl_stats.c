/*
 * `surogatctl stats -r`: the counters with their rates, from two `stats`
 * answers taken an interval apart, as varnishstat -1 shows them.  The
 * daemon's `stats` sends values only; the rate is the client's business,
 * so that the CLI thread never sleeps.  surogatctl.c asks the daemon
 * (ctl_ask_f); nothing here does I/O on the connection.
 *
 * Every other option and the patterns go to the daemon as they are:
 * `stats -r -l 'backend.*'` asks `stats -l backend.*` first, for the
 * descriptions, then `stats backend.*`.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "surogat/cli.h"
#include "surogat/defs.h"

#include "ctl_priv.h"

struct rrow {
    char *name;
    char *doc; /* NULL without -l */
    uint64_t v0, v1;
};

struct rset {
    struct rrow *row;
    size_t n, cap;
};

static struct rrow *
find(struct rset *rs, const char *name)
{
    for (size_t i = 0; i < rs->n; i++)
        if (strcmp(rs->row[i].name, name) == 0)
            return (&rs->row[i]);
    return (NULL);
}

/*
 * "name value" or (docs) "name value  description" lines.  The first
 * sample adds rows, the second sets v1 of the rows it finds: a backend
 * that came in between has no rate and is left out, one that left too.
 */
static void
parse(struct rset *rs, char *body, bool first, bool docs)
{
    char *line, *save = NULL, *name, *val, *rest, *end;
    unsigned long long v;
    struct rrow *r;

    for (line = strtok_r(body, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        name = strtok_r(line, " ", &rest);
        val = name != NULL ? strtok_r(NULL, " ", &rest) : NULL;
        if (val == NULL)
            continue;
        errno = 0;
        v = strtoull(val, &end, 10);
        if (errno != 0 || *end != '\0')
            continue;
        if (!first) {
            if ((r = find(rs, name)) != NULL)
                r->v1 = v;
            continue;
        }
        if (rs->n == rs->cap) {
            rs->cap = rs->cap > 0 ? 2 * rs->cap : 256;
            rs->row = realloc(rs->row, rs->cap * sizeof *rs->row);
            AN(rs->row);
        }
        r = &rs->row[rs->n++];
        r->name = strdup(name);
        AN(r->name);
        while (*rest == ' ')
            rest++;
        r->doc = docs ? strdup(rest) : NULL;
        r->v0 = r->v1 = v;
    }
}

static void
json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s != '\0'; s++) {
        if (*s == '"' || *s == '\\')
            fprintf(f, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            fprintf(f, "\\u%04x", (unsigned char)*s);
        else
            fputc(*s, f);
    }
    fputc('"', f);
}

static void
print(const struct rset *rs, double dt, bool json, bool docs)
{
    for (size_t i = 0; i < rs->n; i++) {
        const struct rrow *r = &rs->row[i];
        /* Signed: a gauge may fall; a counter that went back (a restart) shows its fall too. */
        double rate = (double)(int64_t)(r->v1 - r->v0) / dt;
        if (json) {
            fputs(i > 0 ? ",\n  " : "{\n  ", stdout);
            json_str(stdout, r->name);
            printf(": {\"value\": %" PRIu64 ", \"rate\": %.3f", r->v1, rate);
            if (docs) {
                fputs(", \"description\": ", stdout);
                json_str(stdout, r->doc);
            }
            fputs("}", stdout);
        } else if (docs) {
            printf("%-44s %20" PRIu64 " %12.2f  %s\n", r->name, r->v1, rate, r->doc);
        } else {
            printf("%-44s %20" PRIu64 " %12.2f\n", r->name, r->v1, rate);
        }
    }
    if (json)
        fputs(rs->n > 0 ? "\n}\n" : "{}\n", stdout);
}

static void
sleep_for(double s)
{
    struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };

    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        continue;
}

static double
mono(void)
{
    struct timespec ts;

    (void)clock_gettime(CLOCK_MONOTONIC, &ts);
    return ((double)ts.tv_sec + (double)ts.tv_nsec * 1e-9);
}

int
ctl_stats_rates(int argc, char **argv, bool json, const char *prog, ctl_ask_f *ask, void *priv)
{
    char **av = calloc((size_t)argc + 1, sizeof *av), **av2 = calloc((size_t)argc + 1, sizeof *av);
    double interval = 1.0, t0, t1;
    struct rset rs = { 0 };
    unsigned status;
    bool docs = false;
    char *body, *end;
    int ac = 1, ac2 = 1, rc = 0;

    AN(av);
    AN(av2);
    av[0] = av2[0] = argv[0];
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "-r") == 0)
            continue;
        if (strcmp(argv[i], "-j") == 0) {
            json = true;
            continue;
        }
        if (strcmp(argv[i], "-d") == 0) {
            errno = 0;
            interval = i + 1 < argc ? strtod(argv[++i], &end) : 0;
            if (errno != 0 || i >= argc || end == argv[i] || *end != '\0' || interval < 0.1 ||
                interval > 3600) {
                fprintf(stderr, "%s: stats -r: -d wants 0.1 to 3600 seconds\n", prog);
                rc = 2;
                goto out;
            }
            continue;
        }
        av[ac++] = argv[i];
        /* The second sample without -l: its values are all it is for. */
        if (strcmp(argv[i], "-l") == 0)
            docs = true;
        else
            av2[ac2++] = argv[i];
    }

    t0 = mono();
    if (ask(priv, ac, av, &status, &body) != 0) {
        rc = 2;
        goto out;
    }
    if (status != CLI_OK) {
        fprintf(stderr, "%u\n%s\n", status, body);
        free(body);
        rc = 1;
        goto out;
    }
    parse(&rs, body, true, docs);
    free(body);
    sleep_for(interval);
    t1 = mono();
    if (ask(priv, ac2, av2, &status, &body) != 0) {
        rc = 2;
    } else if (status != CLI_OK) {
        fprintf(stderr, "%u\n%s\n", status, body);
        free(body);
        rc = 1;
    } else {
        parse(&rs, body, false, false);
        free(body);
        /* From request to request: each answer is read at its asking, near enough. */
        print(&rs, t1 - t0 > 0 ? t1 - t0 : interval, json, docs);
    }
out:
    for (size_t i = 0; i < rs.n; i++) {
        free(rs.row[i].name);
        free(rs.row[i].doc);
    }
    free(rs.row);
    free(av);
    free(av2);
    return (rc);
}
