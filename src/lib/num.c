/*
 * The single parser for numbers with units.  Config files, -p and the
 * admin interface all come through here, so "5m" means the same thing
 * everywhere (and a year is 365 days, not 365 x 30).
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "surogat/defs.h"
#include "surogat/num.h"

struct unit {
    const char *name;
    double mult;
};

static const struct unit duration_units[] = {
    { "", 1 },       { "s", 1 },         { "ms", 1e-3 },     { "us", 1e-6 },
    { "m", 60 },     { "h", 3600 },      { "d", 86400 },     { "w", 7 * 86400 },
    { "y", 365.0 * 86400 },
};

static const struct unit byte_units[] = {
    { "", 1 },           { "b", 1 },
    { "k", 1024.0 },     { "kb", 1024.0 },     { "kib", 1024.0 },
    { "m", 1048576.0 },  { "mb", 1048576.0 },  { "mib", 1048576.0 },
    { "g", 1073741824.0 }, { "gb", 1073741824.0 }, { "gib", 1073741824.0 },
    { "t", 1099511627776.0 }, { "tb", 1099511627776.0 }, { "tib", 1099511627776.0 },
};

/*
 * DIGITS [ "." DIGITS ] [ " "* unit ]: strtod() alone would also take
 * "inf", "nan", hex floats, exponents and leading blanks, so the syntax is
 * checked here and strtod() only converts.  *exact holds the value when
 * it is a whole number (no fraction), without the rounding of a double.
 */
static int
parse_with_unit(const char *s, const struct unit *units, size_t nunits, double *out,
                uint64_t *exact, double *mult)
{
    const char *p = s, *end;
    uint64_t whole = 0;
    bool overflow = false, fraction = false;

    AN(s);
    AN(out);
    if (*p < '0' || *p > '9') {
        errno = EINVAL;
        return (-1);
    }
    for (; *p >= '0' && *p <= '9'; p++) {
        uint64_t d = (uint64_t)(*p - '0');
        if (whole > UINT64_MAX / 10 || (whole == UINT64_MAX / 10 && d > UINT64_MAX % 10))
            overflow = true;
        whole = whole * 10 + d;
    }
    if (*p == '.') {
        fraction = true;
        if (p[1] < '0' || p[1] > '9') {
            errno = EINVAL;
            return (-1);
        }
        for (p++; *p >= '0' && *p <= '9'; p++)
            continue;
    }
    end = p;
    while (*end == ' ')
        end++;
    for (size_t i = 0; i < nunits; i++) {
        if (strcasecmp(end, units[i].name) != 0)
            continue;
        *out = strtod(s, NULL) * units[i].mult;
        if (!isfinite(*out) || (overflow && !fraction)) {
            errno = ERANGE;
            return (-1);
        }
        if (exact != NULL)
            *exact = fraction ? 0 : whole;
        if (mult != NULL)
            *mult = fraction ? 0 : units[i].mult;
        return (0);
    }
    errno = EINVAL;
    return (-1);
}

/*
 * Durations are kept to the microsecond and below NUM_DURATION_MAX, so
 * that "%.6f" prints every value back exactly (par_get, param.show).
 */
int
num_duration(const char *s, double *out)
{
    double v;

    if (parse_with_unit(s, duration_units, ARRAY_LEN(duration_units), &v, NULL, NULL) != 0)
        return (-1);
    if (v > NUM_DURATION_MAX) {
        errno = ERANGE;
        return (-1);
    }
    *out = round(v * 1e6) / 1e6;
    return (0);
}

int
num_bytes(const char *s, uint64_t *out)
{
    double v, mult;
    uint64_t whole;

    if (parse_with_unit(s, byte_units, ARRAY_LEN(byte_units), &v, &whole, &mult) != 0)
        return (-1);
    if (mult != 0) {
        /* Whole numbers stay exact: no detour through a double's 53 bits. */
        uint64_t m = (uint64_t)mult;
        if (m != 0 && whole > UINT64_MAX / m) {
            errno = ERANGE;
            return (-1);
        }
        *out = whole * m;
        return (0);
    }
    if (v >= 18446744073709551615.0) {
        errno = ERANGE;
        return (-1);
    }
    *out = (uint64_t)(v + 0.5);
    return (0);
}

int
num_uint(const char *s, unsigned *out)
{
    unsigned long long v = 0;

    AN(s);
    AN(out);
    if (*s == '\0') {
        errno = EINVAL;
        return (-1);
    }
    for (const char *p = s; *p != '\0'; p++) {
        if (*p < '0' || *p > '9') {
            errno = EINVAL;
            return (-1);
        }
        v = v * 10 + (unsigned)(*p - '0');
        if (v > 0xffffffffULL) {
            errno = ERANGE;
            return (-1);
        }
    }
    *out = (unsigned)v;
    return (0);
}

int
num_port(const char *s, unsigned *out)
{
    unsigned v;

    if (strlen(s) > 5 || num_uint(s, &v) != 0 || v > 65535) {
        errno = EINVAL;
        return (-1);
    }
    *out = v;
    return (0);
}

int
num_bool(const char *s, bool *out)
{
    static const char *const yes[] = { "on", "true", "yes", "enable", "1" };
    static const char *const no[] = { "off", "false", "no", "disable", "0" };

    AN(s);
    AN(out);
    for (size_t i = 0; i < ARRAY_LEN(yes); i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return (0);
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return (0);
        }
    }
    errno = EINVAL;
    return (-1);
}

const char *
num_human_bytes(uint64_t v, char *buf)
{
    static const char *const unit[] = { "KiB", "MiB", "GiB", "TiB", "PiB", "EiB" };
    double d = (double)v;
    unsigned i = 0;

    AN(buf);
    if (v < 1024) {
        snprintf(buf, NUM_HUMAN_LEN, "%u B", (unsigned)v);
        return (buf);
    }
    d /= 1024;
    /* 1023.96 KiB would print as "1024.0 KiB": move up a unit before rounding does. */
    while (d >= 1023.95 && i + 1 < ARRAY_LEN(unit)) {
        d /= 1024;
        i++;
    }
    snprintf(buf, NUM_HUMAN_LEN, "%.1f %s", d, unit[i]);
    return (buf);
}
