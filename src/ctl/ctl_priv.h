/*
 * ctl_priv -- shared between surogatctl.c (options, connection,
 * protocol, the loop of `top`) and ctl_top.c (what `top` shows).
 */
#ifndef SUROGAT_CTL_PRIV_H
#define SUROGAT_CTL_PRIV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

struct top; /* opaque: the counters of the last two samples */

struct top *top_new(void); /* never NULL */
void top_free(struct top **tpp);
/*
 * Take a sample: the body of a `stats -j` answer, read at monotonic time
 * t (seconds).  0, or -1 when it holds no counter at all.
 */
int top_sample(struct top *tp, const char *json, double t);
/* Whether two samples were taken, so that rates exist. */
bool top_has_rates(const struct top *tp);
/*
 * Write one frame: a title naming `addr`, the hit ratio, then one line per
 * counter, most active first, at most `rows` lines in all (0: no limit).
 * Plain text; the caller clears the screen before it on a terminal.
 */
void top_render(const struct top *tp, FILE *f, const char *addr, double interval, unsigned rows);

#endif
