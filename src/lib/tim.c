/*
 * Clocks and date formatting.  Every response carries a Date header and
 * every log line a timestamp, so both formats are cached per thread and
 * rebuilt at most once a second.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include "surogat/defs.h"
#include "surogat/tim.h"

static const char wday_name[7][4] = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat" };
static const char mon_name[12][4] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                      "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };

double
tim_mono(void)
{
    struct timespec ts;

    AZ(clock_gettime(CLOCK_MONOTONIC, &ts));
    return ((double)ts.tv_sec + ts.tv_nsec * 1e-9);
}

double
tim_real(void)
{
    struct timespec ts;

    AZ(clock_gettime(CLOCK_REALTIME, &ts));
    return ((double)ts.tv_sec + ts.tv_nsec * 1e-9);
}

void
tim_http_date(double now, char *buf)
{
    static __thread time_t cached_sec = -1;
    static __thread char cached[TIM_HTTP_DATE_LEN + 1];
    time_t t = (time_t)now;
    struct tm tm;

    if (t != cached_sec) {
        AN(gmtime_r(&t, &tm));
        char tmp[64];

        snprintf(tmp, sizeof tmp, "%s, %02d %s %04d %02d:%02d:%02d GMT",
                 wday_name[tm.tm_wday], tm.tm_mday, mon_name[tm.tm_mon], tm.tm_year + 1900,
                 tm.tm_hour, tm.tm_min, tm.tm_sec);
        memcpy(cached, tmp, TIM_HTTP_DATE_LEN);
        cached[TIM_HTTP_DATE_LEN] = '\0';
        cached_sec = t;
    }
    memcpy(buf, cached, TIM_HTTP_DATE_LEN + 1);
}

void
tim_ncsa_date(double now, char *buf)
{
    static __thread time_t cached_sec = -1;
    static __thread char cached[TIM_NCSA_LEN + 1];
    time_t t = (time_t)now;
    struct tm tm;

    if (t != cached_sec) {
        AN(gmtime_r(&t, &tm));
        char tmp[64];

        snprintf(tmp, sizeof tmp, "%02d/%s/%04d:%02d:%02d:%02d +0000", tm.tm_mday,
                 mon_name[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
        memcpy(cached, tmp, TIM_NCSA_LEN);
        cached[TIM_NCSA_LEN] = '\0';
        cached_sec = t;
    }
    memcpy(buf, cached, TIM_NCSA_LEN + 1);
}
