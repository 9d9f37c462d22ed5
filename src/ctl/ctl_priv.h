/*
 * ctl_priv -- shared between surogatctl.c (options, connection,
 * protocol, the loop of `top`), ctl_top.c (what `top` shows) and
 * ctl_stats.c (`stats -r`).
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
/* The `stats -l` answer: each counter's description, shown beside it. */
void top_docs(struct top *tp, const char *text);
/* Show only the counters matching one of the globs (kept: the caller's); none: all. */
void top_filter(struct top *tp, char *const *pat, int npat);
/*
 * Write one frame: a title naming `addr`, the hit ratio, then one line per
 * counter shown, most active first, with its description cut to `cols`
 * characters a line (0: not cut), at most `rows` lines in all (0: no
 * limit).  Plain text; the caller clears the screen before it on a
 * terminal.
 */
void top_render(const struct top *tp, FILE *f, const char *addr, double interval, unsigned rows,
                unsigned cols);

/*
 * Send the command argv[0..argc-1] (quoted as needed) and read the
 * answer: 0 with its *status and a malloc'd, NUL-terminated *body; -1
 * when the connection failed (said on stderr).
 */
typedef int ctl_ask_f(void *priv, int argc, char **argv, unsigned *status, char **body);
/*
 * stats -r [-d SECONDS] [-j] [-l] [PATTERN...]: two samples SECONDS apart
 * (default 1), each counter with its value and its change per second.
 * Returns the exit status (0, 1 refused, 2 usage or connection).
 */
int ctl_stats_rates(int argc, char **argv, bool json, const char *prog, ctl_ask_f *ask, void *priv);

#endif
