/*
 * par: the parameter table.  Every row of tbl/params.h is checked
 * generically (its default, min and max are accepted, get/set round-trip),
 * then a few rows by hand for bounds and types.
 */
#include <stdio.h>
#include <string.h>

#include "unit.h"
#include "surogat/defs.h"
#include "surogat/sb.h"
#include "surogat/par.h"

static const struct row {
    const char *name, *def, *min, *max;
    int flags;
} rows[] = {
#define PARAM(name, type, def, min, max, flags, doc) { #name, def, min, max, flags },
#include "surogat/tbl/params.h"
};

static char ebuf[1024];
static struct sb err;

static void
setup(void)
{
    par_init();
    sb_init(&err, ebuf, sizeof ebuf);
}

static void
set_ok(const char *name, const char *value)
{
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_msg(par_set(name, value, &err) == 0, "par_set(%s, \"%s\"): %s", name, value, ebuf);
}

static void
set_fails(const char *name, const char *value)
{
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_msg(par_set(name, value, &err) == -1, "par_set(%s, \"%s\") accepted", name, value);
    ck_assert_msg(err.len > 0, "par_set(%s, \"%s\") gave no reason", name, value);
    ck_assert_msg(strchr(ebuf, '\n') == NULL || strchr(ebuf, '\n') == ebuf + err.len - 1,
                  "reason is not one line: %s", ebuf);
}

static const char *
get(const char *name)
{
    static char buf[256];
    struct sb sb;

    sb_init(&sb, buf, sizeof buf);
    ck_assert_msg(par_get(name, &sb) == 0, "par_get(%s)", name);
    ck_assert(sb_ok(&sb));
    return buf;
}

START_TEST(defaults)
{
    ck_assert_uint_eq(par.thread_pools, 2);
    ck_assert_uint_eq(par.thread_pool_min, 4);
    ck_assert_uint_eq(par.thread_pool_max, 500);
    ck_assert(par.thread_pool_timeout > 300 - 1e-9 && par.thread_pool_timeout < 300 + 1e-9);
    ck_assert(par.timeout_linger > 0.05 - 1e-9 && par.timeout_linger < 0.05 + 1e-9);
    ck_assert(par.backend_connect_timeout > 3.5 - 1e-9 && par.backend_connect_timeout < 3.5 + 1e-9);
    ck_assert_uint_eq(par.http_req_size, 32768);
    ck_assert_uint_eq(par.http_req_hdr_len, 8192);
    ck_assert_uint_eq(par.http_chunk_ext_max, 1024);
    ck_assert_uint_eq(par.workspace_client, 65536);
    ck_assert_uint_eq(par.http_max_hdr, 64);
    ck_assert(par.xff == true);
    ck_assert(par.via == true);
    ck_assert_ptr_nonnull(par.access_log);
    ck_assert_str_eq(par.access_log, "");
    ck_assert_str_eq(par.error_log, "");
}
END_TEST

/* Each row: its default, min and max are all accepted. */
START_TEST(table_rows)
{
    const struct row *r = &rows[_i];

    set_ok(r->name, r->def);
    if (r->min != NULL)
        set_ok(r->name, r->min);
    if (r->max != NULL)
        set_ok(r->name, r->max);
    ck_assert(par_is_live(r->name) == ((r->flags & PAR_LIVE) != 0));
}
END_TEST

/* Each row: what par_get prints, par_set takes back unchanged. */
START_TEST(get_set_round_trip)
{
    const struct row *r = &rows[_i];
    char before[256], after[256];

    strcpy(before, get(r->name));
    set_ok(r->name, before);
    strcpy(after, get(r->name));
    ck_assert_str_eq(before, after);
}
END_TEST

START_TEST(uint_bounds)
{
    set_ok("thread_pools", "1");
    ck_assert_uint_eq(par.thread_pools, 1);
    set_ok("thread_pools", "64");
    ck_assert_uint_eq(par.thread_pools, 64);
    set_fails("thread_pools", "0");
    set_fails("thread_pools", "65");
    set_fails("thread_pools", "4294967296");
    set_fails("thread_pools", "-1");
    set_fails("thread_pools", "");
    set_fails("thread_pools", "abc");
    set_fails("thread_pools", "2s");
    ck_assert_uint_eq(par.thread_pools, 64); /* unchanged by the failures */
    ck_assert_str_eq(get("thread_pools"), "64");
    set_ok("log_level", "7");
    set_fails("log_level", "8");
    /* No max: anything that fits */
    set_ok("thread_queue_limit", "0");
    set_ok("thread_queue_limit", "4294967295");
    ck_assert_uint_eq(par.thread_queue_limit, 4294967295u);
}
END_TEST

START_TEST(bytes_bounds)
{
    set_ok("http_req_size", "64k");
    ck_assert_uint_eq(par.http_req_size, 65536);
    set_ok("http_req_size", "4m");
    ck_assert_uint_eq(par.http_req_size, 4194304);
    set_ok("http_req_size", "256");
    ck_assert_uint_eq(par.http_req_size, 256);
    set_fails("http_req_size", "255");
    set_fails("http_req_size", "4194305");
    set_fails("http_req_size", "5m");
    set_fails("http_req_size", "1x");
    ck_assert_uint_eq(par.http_req_size, 256);
    set_ok("http_chunk_ext_max", "0");
    ck_assert_uint_eq(par.http_chunk_ext_max, 0);
}
END_TEST

START_TEST(duration_bounds)
{
    set_ok("thread_pool_timeout", "2m");
    ck_assert(par.thread_pool_timeout > 120 - 1e-9 && par.thread_pool_timeout < 120 + 1e-9);
    set_ok("thread_pool_timeout", "10ms");
    set_fails("thread_pool_timeout", "5ms");
    set_fails("thread_pool_timeout", "0");
    set_fails("thread_pool_timeout", "-1s");
    set_fails("thread_pool_timeout", "soon");
    ck_assert(par.thread_pool_timeout > 0.01 - 1e-9 && par.thread_pool_timeout < 0.01 + 1e-9);
    set_ok("timeout_linger", "0");
    ck_assert(par.timeout_linger == 0);
    set_ok("backend_connect_timeout", "1ms");
    set_fails("backend_connect_timeout", "0.5ms");
}
END_TEST

START_TEST(bool_and_string)
{
    set_ok("xff", "off");
    ck_assert(par.xff == false);
    set_ok("xff", "yes");
    ck_assert(par.xff == true);
    set_fails("xff", "maybe");
    set_fails("xff", "");
    ck_assert(par.xff == true);
    set_ok("access_log", "/var/log/surogat/access.log");
    ck_assert_str_eq(par.access_log, "/var/log/surogat/access.log");
    ck_assert_str_eq(get("access_log"), "/var/log/surogat/access.log");
    set_ok("access_log", "");
    ck_assert_str_eq(par.access_log, "");
    set_ok("error_log", "with spaces and # hash");
    ck_assert_str_eq(par.error_log, "with spaces and # hash");
}
END_TEST

/* A string parameter must be a copy, not the caller's buffer. */
START_TEST(string_is_copied)
{
    char val[32];

    strcpy(val, "/tmp/a.log");
    set_ok("access_log", val);
    strcpy(val, "/tmp/CHANGED");
    ck_assert_str_eq(par.access_log, "/tmp/a.log");
}
END_TEST

START_TEST(unknown)
{
    char buf[64];
    struct sb sb;

    set_fails("no_such_param", "1");
    ck_assert_ptr_nonnull(strstr(ebuf, "no_such_param"));
    set_fails("", "1");
    set_fails("THREAD_POOLS", "4");
    set_fails("thread_pools ", "4");
    sb_init(&sb, buf, sizeof buf);
    ck_assert_int_eq(par_get("no_such_param", &sb), -1);
    ck_assert(!par_is_live("no_such_param"));
    ck_assert(par_is_live("timeout_idle"));
    ck_assert(!par_is_live("thread_pools"));
}
END_TEST

/* Sub-millisecond durations must survive par_get -> par_set. */
START_TEST(duration_precision)
{
    set_ok("backend_connect_timeout", "1.5ms");
    ck_assert(par.backend_connect_timeout > 0.0015 - 1e-12 &&
              par.backend_connect_timeout < 0.0015 + 1e-12);
    set_ok("backend_connect_timeout", get("backend_connect_timeout"));
    ck_assert_msg(par.backend_connect_timeout > 0.0015 - 1e-12 &&
                      par.backend_connect_timeout < 0.0015 + 1e-12,
                  "1.5ms came back as %s", get("backend_connect_timeout"));
}
END_TEST

START_TEST(get_values)
{
    ck_assert_str_eq(get("thread_pools"), "2");
    set_ok("thread_pools", "17");
    ck_assert_str_eq(get("thread_pools"), "17");
    set_ok("xff", "off");
    set_ok("xff", get("xff"));
    ck_assert(par.xff == false);
}
END_TEST

START_TEST(dumps)
{
    static char buf[65536];
    struct sb sb;

    sb_init(&sb, buf, sizeof buf);
    par_dump_doc(&sb);
    ck_assert(sb_ok(&sb));
    for (size_t i = 0; i < ARRAY_LEN(rows); i++)
        ck_assert_msg(strstr(buf, rows[i].name) != NULL, "%s not in doc", rows[i].name);
    ck_assert_ptr_nonnull(strstr(buf, "Backlog of each listen socket"));

    sb_init(&sb, buf, sizeof buf);
    par_show_all(PAR_SHOW_SHORT, false, &sb);
    ck_assert(sb_ok(&sb));
    /* "name value [unit] (default)" per line; the gap may be padded. */
    for (size_t i = 0; i < ARRAY_LEN(rows); i++) {
        size_t n = strlen(rows[i].name);
        const char *p = buf;

        while ((p = strstr(p, rows[i].name)) != NULL) {
            if ((p == buf || p[-1] == '\n') && (p[n] == ' ' || p[n] == '\t'))
                break;
            p += n;
        }
        ck_assert_msg(p != NULL, "%s not at a line start", rows[i].name);
        if (strcmp(rows[i].name, "thread_pools") == 0) {
            p += n;
            while (*p == ' ' || *p == '\t')
                p++;
            ck_assert_msg(strncmp(p, "2 (default)\n", 12) == 0, "%.20s", p);
        }
    }
}
END_TEST

Suite *
par_suite(void)
{
    Suite *s = suite_create("par");
    TCase *tc = tcase_create("par");

    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, defaults);
    tcase_add_loop_test(tc, table_rows, 0, (int)ARRAY_LEN(rows));
    tcase_add_loop_test(tc, get_set_round_trip, 0, (int)ARRAY_LEN(rows));
    tcase_add_test(tc, uint_bounds);
    tcase_add_test(tc, bytes_bounds);
    tcase_add_test(tc, duration_bounds);
    tcase_add_test(tc, bool_and_string);
    tcase_add_test(tc, string_is_copied);
    tcase_add_test(tc, unknown);
    tcase_add_test(tc, get_values);
    tcase_add_test(tc, duration_precision);
    tcase_add_test(tc, dumps);
    suite_add_tcase(s, tc);
    return s;
}
