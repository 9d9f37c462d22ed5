/*
 * The `stats` command: every counter of tbl/stats.h, then every row of
 * tbl/be_stats.h for each live backend, as backend.NAME.ROW (Varnish's
 * VBE.*), in one flat list.  Options pick the form:
 *
 *   stats                  "name value" lines
 *   stats -l               "name value description" lines, aligned
 *   stats -j               one JSON object of "name": value
 *   stats -j -l            one JSON object of "name": {"value", "kind", "description"}
 *   stats PATTERN...       only the names matching a glob (fnmatch(3), '*' crosses dots)
 *
 * A backend name that two live backends share (two programs declaring it
 * differently) gets the programs declaring it: backend.NAME@PROGRAMS.ROW.
 * Runs on the CLI thread under the handlers' lock; reads the counters the
 * lock-free way everyone does (stat_sum, be_snapshot).
 */
#include "config.h"

#include <fnmatch.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "surogat/be.h"
#include "surogat/cli.h"
#include "surogat/defs.h"
#include "surogat/pol.h"
#include "surogat/sb.h"
#include "surogat/stat.h"

#include "cli_priv.h"

#define NAME_MAX_ 256 /* backend.NAME@PROGRAMS.ROW: 64 + 128 + the longest row, with room */

struct form {
    bool json, docs;
    char *const *pat; /* globs; none: everything */
    int npat;
    unsigned nout; /* rows written */
};

static bool
wanted(const struct form *fm, const char *name)
{
    if (fm->npat == 0)
        return (true);
    for (int i = 0; i < fm->npat; i++)
        if (fnmatch(fm->pat[i], name, 0) == 0)
            return (true);
    return (false);
}

static void
json_str(struct sb *out, const char *s)
{
    sb_cat(out, "\"");
    for (; *s != '\0'; s++) {
        if (*s == '"' || *s == '\\')
            sb_printf(out, "\\%c", *s);
        else if ((unsigned char)*s < 0x20)
            sb_printf(out, "\\u%04x", (unsigned char)*s);
        else
            sb_bcat(out, s, 1);
    }
    sb_cat(out, "\"");
}

static void
row(struct sb *out, struct form *fm, const char *name, uint64_t v, bool gauge, const char *doc)
{
    if (!wanted(fm, name))
        return;
    if (fm->json) {
        sb_cat(out, fm->nout > 0 ? ",\n  " : "{\n  ");
        json_str(out, name);
        if (fm->docs) {
            sb_printf(out, ": {\"value\": %" PRIu64 ", \"kind\": \"%s\", \"description\": ", v,
                      gauge ? "gauge" : "counter");
            json_str(out, doc);
            sb_cat(out, "}");
        } else {
            sb_printf(out, ": %" PRIu64, v);
        }
    } else if (fm->docs) {
        sb_printf(out, "%-44s %20" PRIu64 "  %s\n", name, v, doc);
    } else {
        sb_printf(out, "%s %" PRIu64 "\n", name, v);
    }
    fm->nout++;
}

unsigned
cli__cmd_stats(int argc, char *const *argv, struct sb *out, void *priv)
{
    struct form fm = { 0 };
    struct stat_block b;
    struct be_snap *bs;
    char name[NAME_MAX_];
    unsigned n;
    int i;

    for (i = 1; i < argc && argv[i][0] == '-' && argv[i][1] != '\0'; i++) {
        if (strcmp(argv[i], "-j") == 0) {
            fm.json = true;
        } else if (strcmp(argv[i], "-l") == 0) {
            fm.docs = true;
        } else {
            sb_printf(out, "Unknown option '%s'.\nUsage: stats [-j] [-l] [PATTERN...]", argv[i]);
            return (CLI_USAGE);
        }
    }
    fm.pat = argv + i;
    fm.npat = argc - i;

    stat_sum(&b);
    for (unsigned k = 0; k < STAT__N; k++)
        row(out, &fm, stat_name((enum stat_id)k), b.v[k], stat_is_gauge((enum stat_id)k),
            stat_doc((enum stat_id)k));
    bs = be_snapshot(&n);
    pol_prog_label(bs, n);
    /* Oldest first, as they were declared. */
    for (unsigned j = n; j-- > 0;) {
        for (unsigned k = 0; k < STAT_BE__N; k++) {
            enum stat_be_id id = (enum stat_be_id)k;
            if (bs[j].dup)
                snprintf(name, sizeof name, "backend.%s@%s.%s", bs[j].name,
                         bs[j].progs[0] != '\0' ? bs[j].progs : "-", stat_be_name(id));
            else
                snprintf(name, sizeof name, "backend.%s.%s", bs[j].name, stat_be_name(id));
            row(out, &fm, name, bs[j].v[k], stat_be_is_gauge(id), stat_be_doc(id));
        }
    }
    free(bs);
    if (fm.json)
        sb_cat(out, fm.nout > 0 ? "\n}\n" : "{}\n");
    return (CLI_OK);
}
