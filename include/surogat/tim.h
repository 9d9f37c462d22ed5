/*
 * tim -- clocks and HTTP dates.
 */
#ifndef SUROGAT_TIM_H
#define SUROGAT_TIM_H

#include <stddef.h>

/* CLOCK_MONOTONIC in seconds: for timeouts and durations. */
double tim_mono(void);
/* CLOCK_REALTIME in seconds since the epoch: for Date headers and logs. */
double tim_real(void);
/*
 * IMF-fixdate ("Sun, 06 Nov 1994 08:49:37 GMT") of `now` into buf, which
 * must hold TIM_HTTP_DATE_LEN + 1 bytes.  Cached per thread per second,
 * since every response carries one.
 */
#define TIM_HTTP_DATE_LEN 29
void tim_http_date(double now, char *buf);
/* "22/Nov/2026:04:52:58 +0000" for NCSA logs; buf holds 27 bytes. */
#define TIM_NCSA_LEN 26
void tim_ncsa_date(double now, char *buf);

#endif
