/*
 * The feature parameter: Varnish's feature flags (tbl/features.h), read
 * with Varnish's syntax -- tokens separated by commas, each "default",
 * "none", "+name" or "-name", applied left to right -- and checked
 * against what surogat does.  Every feature is fixed, so the one value
 * accepted is surogat's own; the point is a clear refusal, naming the
 * feature and why, for a varnishd command line that asks for more.
 */
#include "config.h"

#include <stdbool.h>
#include <string.h>

#include "surogat/defs.h"
#include "surogat/par.h"
#include "surogat/sb.h"

#include "par_priv.h"

enum feat_state { FEAT_ON, FEAT_OFF, FEAT_CHOICE, FEAT_CHOICE_ON /* a choice, on by default */ };

static const struct {
    const char *name;
    enum feat_state state;
    const char *why;
} feats[] = {
#define FEATURE(n, s, w) { #n, s, w },
#include "surogat/tbl/features.h"
};

#define FEAT_TOKEN_MAX 64

/* The bits of the features surogat always has, and of the choices on by default. */
static unsigned
fixed_bits(void)
{
    unsigned bits = 0;

    for (unsigned i = 0; i < ARRAY_LEN(feats); i++)
        if (feats[i].state == FEAT_ON || feats[i].state == FEAT_CHOICE_ON)
            bits |= 1u << i;
    return (bits);
}

static int
find_feat(const char *name, size_t len)
{
    for (unsigned i = 0; i < ARRAY_LEN(feats); i++)
        if (strlen(feats[i].name) == len && memcmp(feats[i].name, name, len) == 0)
            return ((int)i);
    return (-1);
}

int
par__feature_parse(const char *pname, const char *value, unsigned *bits, struct sb *err)
{
    unsigned b = fixed_bits();
    const char *p = value, *e;
    size_t len;
    int i;

    SRG_ASSERT(ARRAY_LEN(feats) <= 32);
    while (*p != '\0') {
        p += strspn(p, " \t,");
        if (*p == '\0')
            break;
        e = p + strcspn(p, " \t,");
        len = (size_t)(e - p);
        if (len == 7 && memcmp(p, "default", 7) == 0) {
            b = fixed_bits();
        } else if (len == 4 && memcmp(p, "none", 4) == 0) {
            b = 0;
        } else if (*p != '+' && *p != '-') {
            sb_printf(err, "%s: '%.*s': expected +NAME, -NAME, default or none", pname,
                      (int)SRG_MIN(len, FEAT_TOKEN_MAX), p);
            return (-1);
        } else if ((i = find_feat(p + 1, len - 1)) < 0) {
            sb_printf(err, "%s: unknown feature '%.*s' (Varnish's are listed in surogat.conf(5))",
                      pname, (int)SRG_MIN(len - 1, FEAT_TOKEN_MAX), p + 1);
            return (-1);
        } else if (*p == '+') {
            b |= 1u << i;
        } else {
            b &= ~(1u << i);
        }
        p = e;
    }
    /* Every fixed feature must end up as it is; the first that does not says why. */
    for (unsigned f = 0; f < ARRAY_LEN(feats); f++) {
        bool on = (b & (1u << f)) != 0;
        if (feats[f].state == FEAT_CHOICE || feats[f].state == FEAT_CHOICE_ON ||
            on == (feats[f].state == FEAT_ON))
            continue;
        sb_printf(err, "%s: %c%s is not possible: %s", pname, on ? '+' : '-', feats[f].name,
                  feats[f].why);
        return (-1);
    }
    *bits = b;
    return (0);
}

void
par__feature_format(unsigned bits, struct sb *out)
{
    bool first = true;

    for (unsigned i = 0; i < ARRAY_LEN(feats); i++) {
        if (!(bits & (1u << i)))
            continue;
        sb_printf(out, "%s+%s", first ? "" : ",", feats[i].name);
        first = false;
    }
    if (first)
        sb_cat(out, "none");
}

void
par__feature_doc(struct sb *out, const char *indent)
{
    for (unsigned i = 0; i < ARRAY_LEN(feats); i++)
        /* A choice shows its default. */
        sb_printf(out, "%s%c%-26s %s\n", indent,
                  feats[i].state == FEAT_ON || feats[i].state == FEAT_CHOICE_ON ? '+' : '-',
                  feats[i].name, feats[i].why);
}
