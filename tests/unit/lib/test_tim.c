/*
 * tim: clocks and HTTP dates.  The date is cached per thread per second,
 * so the tests move time forwards, backwards and across threads to make
 * sure the cache never hands out a stale string.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "unit.h"
#include "surogat/tim.h"

static const struct {
    double t;
    const char *http;
    const char *ncsa;
} dates[] = {
    { 0, "Thu, 01 Jan 1970 00:00:00 GMT", "01/Jan/1970:00:00:00 +0000" },
    { 784111777, "Sun, 06 Nov 1994 08:49:37 GMT", "06/Nov/1994:08:49:37 +0000" },
    { 784111777.999, "Sun, 06 Nov 1994 08:49:37 GMT", "06/Nov/1994:08:49:37 +0000" },
    { 951782400, "Tue, 29 Feb 2000 00:00:00 GMT", "29/Feb/2000:00:00:00 +0000" },
    { 1078099199, "Sun, 29 Feb 2004 23:59:59 GMT", "29/Feb/2004:23:59:59 +0000" },
    { 1234567890, "Fri, 13 Feb 2009 23:31:30 GMT", "13/Feb/2009:23:31:30 +0000" },
    { 1798000378, "Wed, 23 Dec 2026 04:32:58 GMT", "23/Dec/2026:04:32:58 +0000" },
    { 2147483647, "Tue, 19 Jan 2038 03:14:07 GMT", "19/Jan/2038:03:14:07 +0000" },
    { 2147483648.0, "Tue, 19 Jan 2038 03:14:08 GMT", "19/Jan/2038:03:14:08 +0000" },
    { 4102444800.0, "Fri, 01 Jan 2100 00:00:00 GMT", "01/Jan/2100:00:00:00 +0000" },
    { 1700000000, "Tue, 14 Nov 2023 22:13:20 GMT", "14/Nov/2023:22:13:20 +0000" },
    { 1704067199, "Sun, 31 Dec 2023 23:59:59 GMT", "31/Dec/2023:23:59:59 +0000" },
    { 1704067200, "Mon, 01 Jan 2024 00:00:00 GMT", "01/Jan/2024:00:00:00 +0000" },
};

static void
utc(void)
{
    setenv("TZ", "UTC0", 1);
    tzset();
}

START_TEST(http_dates)
{
    char buf[TIM_HTTP_DATE_LEN + 1 + 8];

    for (size_t i = 0; i < sizeof dates / sizeof dates[0]; i++) {
        memset(buf, 'Z', sizeof buf);
        tim_http_date(dates[i].t, buf);
        ck_assert_msg(memcmp(buf, dates[i].http, TIM_HTTP_DATE_LEN) == 0,
                      "tim_http_date(%.3f) = \"%.29s\", want \"%s\"", dates[i].t, buf,
                      dates[i].http);
        ck_assert(buf[TIM_HTTP_DATE_LEN] == '\0');
        ck_assert(buf[TIM_HTTP_DATE_LEN + 1] == 'Z');
    }
}
END_TEST

/* The same second twice, then back and forth: the cache must follow. */
START_TEST(http_date_cache)
{
    char a[TIM_HTTP_DATE_LEN + 1], b[TIM_HTTP_DATE_LEN + 1];

    tim_http_date(1000.0, a);
    tim_http_date(1000.9, b);
    ck_assert_str_eq(a, b);
    ck_assert_str_eq(a, "Thu, 01 Jan 1970 00:16:40 GMT");
    tim_http_date(1001.0, b);
    ck_assert_str_eq(b, "Thu, 01 Jan 1970 00:16:41 GMT");
    tim_http_date(999.5, b);
    ck_assert_str_eq(b, "Thu, 01 Jan 1970 00:16:39 GMT");
    tim_http_date(1000.2, b);
    ck_assert_str_eq(b, a);
    for (size_t i = sizeof dates / sizeof dates[0]; i-- > 0;) {
        tim_http_date(dates[i].t, b);
        ck_assert_str_eq(b, dates[i].http);
    }
}
END_TEST

static void *
other_thread(void *arg)
{
    char *out = arg;

    tim_http_date(784111777, out);
    return NULL;
}

START_TEST(http_date_threads)
{
    char mine[TIM_HTTP_DATE_LEN + 1], theirs[TIM_HTTP_DATE_LEN + 1];
    pthread_t th;

    tim_http_date(0, mine);
    ck_assert_int_eq(pthread_create(&th, NULL, other_thread, theirs), 0);
    ck_assert_int_eq(pthread_join(th, NULL), 0);
    ck_assert_str_eq(theirs, "Sun, 06 Nov 1994 08:49:37 GMT");
    tim_http_date(0.5, mine);
    ck_assert_str_eq(mine, "Thu, 01 Jan 1970 00:00:00 GMT");
}
END_TEST

START_TEST(ncsa_dates)
{
    char buf[TIM_NCSA_LEN + 1 + 8];

    utc();
    for (size_t i = 0; i < sizeof dates / sizeof dates[0]; i++) {
        memset(buf, 'Z', sizeof buf);
        tim_ncsa_date(dates[i].t, buf);
        ck_assert_msg(memcmp(buf, dates[i].ncsa, TIM_NCSA_LEN) == 0,
                      "tim_ncsa_date(%.3f) = \"%.26s\", want \"%s\"", dates[i].t, buf,
                      dates[i].ncsa);
        ck_assert(buf[TIM_NCSA_LEN] == '\0');
        ck_assert(buf[TIM_NCSA_LEN + 1] == 'Z');
    }
}
END_TEST

START_TEST(clocks)
{
    double m0 = tim_mono(), m1, r = tim_real();
    struct timespec ts = { 0, 2000000 };

    ck_assert(r > (double)time(NULL) - 2 && r < (double)time(NULL) + 2);
    nanosleep(&ts, NULL);
    m1 = tim_mono();
    ck_assert(m1 >= m0 + 0.0015);
    ck_assert(m1 < m0 + 5);
}
END_TEST

Suite *
tim_suite(void)
{
    Suite *s = suite_create("tim");
    TCase *tc = tcase_create("tim");

    tcase_add_test(tc, http_dates);
    tcase_add_test(tc, http_date_cache);
    tcase_add_test(tc, http_date_threads);
    tcase_add_test(tc, ncsa_dates);
    tcase_add_test(tc, clocks);
    suite_add_tcase(s, tc);
    return s;
}
