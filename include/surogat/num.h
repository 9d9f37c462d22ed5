/*
 * num -- the one parser for counts, sizes, durations and booleans, used by
 * the command line, the config file and the admin interface alike.
 * Each returns 0, or -1 (errno EINVAL or ERANGE) leaving *out untouched.
 */
#ifndef SUROGAT_NUM_H
#define SUROGAT_NUM_H

#include <stdbool.h>
#include <stdint.h>

int num_uint(const char *s, unsigned *out);
/* "4096", "64k", "1.5m", "2g", "1t" (binary multiples; b/B suffixes allowed) */
int num_bytes(const char *s, uint64_t *out);
/*
 * "0.5", "250ms", "5s", "2m", "1h", "1d", "1w", "1y" (365 days); plain
 * numbers are seconds.  Rounded to the microsecond; at most
 * NUM_DURATION_MAX seconds (about 31 years).
 */
#define NUM_DURATION_MAX 1e9
int num_duration(const char *s, double *out);
/* A TCP port number, 0..65535, digits only. */
int num_port(const char *s, unsigned *out);
/* on/off, true/false, yes/no, enable/disable (Varnish's), 1/0 */
int num_bool(const char *s, bool *out);
/* The value of a hexadecimal digit, either case, or -1.  Inline: chunk sizes are parsed with it. */
static inline int
num_hexdigit(char c)
{
    if (c >= '0' && c <= '9')
        return (c - '0');
    if (c >= 'a' && c <= 'f')
        return (c - 'a' + 10);
    if (c >= 'A' && c <= 'F')
        return (c - 'A' + 10);
    return (-1);
}
/*
 * A size for people: "512 B", "1.5 KiB", "256.0 MiB", "2.0 GiB" (binary
 * multiples, one decimal), into buf of at least NUM_HUMAN_LEN bytes.
 */
#define NUM_HUMAN_LEN 16
const char *num_human_bytes(uint64_t v, char *buf);

#endif
