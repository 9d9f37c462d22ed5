/*
 * pol_admin: named policy programs through pol.h -- load without using,
 * use, list, discard, the checks on names and scripts, the SIGHUP reload
 * of the program in use, and a discarded program living on in the worker
 * state that still runs it.  A worker's hook call (recv) shows which
 * program it runs: script A passes, script B purges.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "unit.h"
#include "surogat/be.h"
#include "surogat/defs.h"
#include "surogat/http.h"
#include "surogat/par.h"
#include "surogat/pol.h"
#include "surogat/req.h"
#include "surogat/sb.h"
#include "surogat/stat.h"
#include "surogat/wrk.h"

#define SCRIPT_A   "function recv(req) return 'pass' end\n"
#define SCRIPT_B   "function recv(req) return 'purge' end\n"
#define SCRIPT_BAD "function recv(req)\n  return 'pass'\n\nfunction deliver(req, resp)\nend\n"

static struct wrk wrk;
static struct req req;
static struct http_hdr hdrs[16];
static char wsbuf[64 * 1024];
static char paths[4][64];
static unsigned npaths;
static char ebuf[512];
static struct sb err;

static void
setup(void)
{
    char b[256];
    struct sb e;

    par_init();
    AZ(stat_init());
    AZ(be_init());
    /* -b: programs without declarations have somewhere to send requests. */
    sb_init(&e, b, sizeof b);
    ck_assert_msg(be_add("default", "127.0.0.1:9", &e) == 0, "%s", b);
    memset(&wrk, 0, sizeof wrk);
    wrk.magic = WRK_MAGIC;
    ws_init(&wrk.ws, wsbuf, sizeof wsbuf);
    npaths = 0;
    sb_init(&err, ebuf, sizeof ebuf);
}

static void
teardown(void)
{
    pol_wrk_fini(&wrk);
    pol_fini();
    be_fini();
    for (unsigned i = 0; i < npaths; i++)
        unlink(paths[i]);
}

static const char *
script(const char *src)
{
    char *p;
    FILE *f;
    int fd;

    ck_assert_uint_lt(npaths, ARRAY_LEN(paths));
    p = paths[npaths++];
    snprintf(p, sizeof paths[0], "/tmp/test_pol_admin_XXXXXX");
    fd = mkstemp(p);
    ck_assert_int_ge(fd, 0);
    f = fdopen(fd, "w");
    AN(f);
    fputs(src, f);
    fclose(f);
    return (p);
}

static void
rewrite(const char *path, const char *src)
{
    FILE *f = fopen(path, "w");

    AN(f);
    fputs(src, f);
    fclose(f);
}

/* The worker's recv on a fresh request: which program it ran. */
static enum pol_act
recv_act(void)
{
    struct pol_synth syn;

    memset(&req, 0, sizeof req);
    req.magic = REQ_MAGIC;
    req.wrk = &wrk;
    req.ws = &wrk.ws;
    http_init(req.http, hdrs, ARRAY_LEN(hdrs));
    req.http->method = (struct txt){ "GET", 3 };
    req.http->url = (struct txt){ "/", 1 };
    req.http->proto = 11;
    return (pol_recv(&req, &syn));
}

/* policy.list's line for name ("" when not listed), without the file. */
static const char *
listed(const char *name)
{
    static char line[256];
    char buf[4096], st[32], nm[80];
    unsigned workers;
    struct sb out;

    sb_init(&out, buf, sizeof buf);
    pol_prog_list(&out);
    ck_assert(sb_ok(&out));
    ck_assert_msg(strncmp(buf, "State", 5) == 0, "no header: %s", buf);
    line[0] = '\0';
    for (char *l = strchr(buf, '\n') + 1; *l != '\0'; l = strchr(l, '\n') + 1) {
        ck_assert_int_eq(sscanf(l, "%31s %u %79s", st, &workers, nm), 3);
        if (strcmp(nm, name) == 0)
            snprintf(line, sizeof line, "%s %u", st, workers);
    }
    return (line);
}

START_TEST(load_use_list_discard)
{
    const char *a = script(SCRIPT_A), *b = script(SCRIPT_B);

    ck_assert_msg(pol_load(a, &err) == 0, "%s", ebuf);
    ck_assert_int_eq(recv_act(), POL_PASS);
    ck_assert_str_eq(listed("boot"), "active 1");
    ck_assert_msg(pol_prog_load("b", b, &err) == 0, "%s", ebuf);
    ck_assert_str_eq(listed("b"), "available 0");
    ck_assert_int_eq(recv_act(), POL_PASS); /* loaded, not used */
    ck_assert_int_eq(pol_prog_use("b", &err), 0);
    ck_assert_int_eq(recv_act(), POL_PURGE);
    ck_assert_str_eq(listed("b"), "active 1");
    ck_assert_str_eq(listed("boot"), "available 0");
    /* the one in use stays */
    ck_assert_int_eq(pol_prog_discard("b", &err), -1);
    ck_assert_ptr_nonnull(strstr(ebuf, "in use"));
    ck_assert_int_eq(pol_prog_use("boot", &err), 0);
    ck_assert_int_eq(recv_act(), POL_PASS);
    ck_assert_int_eq(pol_prog_discard("b", &err), 0);
    ck_assert_str_eq(listed("b"), "");
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_int_eq(pol_prog_use("b", &err), -1);
    ck_assert_ptr_nonnull(strstr(ebuf, "No program named 'b'"));
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_int_eq(pol_prog_discard("b", &err), -1);
}
END_TEST

START_TEST(refusals_change_nothing)
{
    static const char *const bad_names[] = { "",
                                             "1a",
                                             "-a",
                                             "a b",
                                             "a/b",
                                             "a\"b",
                                             ("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                                              "aaaaaaaaaaaaaaa") };
    const char *a = script(SCRIPT_A), *bad = script(SCRIPT_BAD);
    char want[128];

    ck_assert_msg(pol_load(a, &err) == 0, "%s", ebuf);
    for (size_t i = 0; i < ARRAY_LEN(bad_names); i++) {
        sb_init(&err, ebuf, sizeof ebuf);
        ck_assert_int_eq(pol_prog_load(bad_names[i], a, &err), -1);
        ck_assert_msg(strstr(ebuf, "Bad program name") != NULL, "%s: %s", bad_names[i], ebuf);
    }
    ck_assert_int_eq(pol_prog_load("a-1_x.y", a, &err), 0);
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_int_eq(pol_prog_load("a-1_x.y", a, &err), -1);
    ck_assert_ptr_nonnull(strstr(ebuf, "loaded already"));
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_int_eq(pol_prog_load("bad", bad, &err), -1);
    snprintf(want, sizeof want, "%s:4:", strrchr(bad, '/') + 1);
    ck_assert_msg(strstr(ebuf, want) != NULL, "want %s in %s", want, ebuf);
    ck_assert_str_eq(listed("bad"), "");
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_int_eq(pol_prog_load("gone", "/nonexistent/x.lua", &err), -1);
    ck_assert_ptr_nonnull(strstr(ebuf, "/nonexistent/x.lua"));
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_int_eq(pol_prog_load("dir", "/tmp", &err), -1);
    ck_assert_ptr_nonnull(strstr(ebuf, "/tmp: not a regular file"));
    ck_assert_str_eq(listed("boot"), "active 0");
    ck_assert_int_eq(recv_act(), POL_PASS);
}
END_TEST

START_TEST(no_backend_refused)
{
    const char *a = script(SCRIPT_A);

    /* Without -b's backend a script without declarations has nowhere to send requests. */
    be_fini();
    AZ(be_init());
    ck_assert_int_eq(pol_prog_load("a", a, &err), -1);
    ck_assert_ptr_nonnull(strstr(ebuf, "declares no backend"));
    sb_init(&err, ebuf, sizeof ebuf);
    rewrite(a, "backend \"web\" { host = \"127.0.0.1\", port = 9 }\n" SCRIPT_A);
    ck_assert_msg(pol_prog_load("a", a, &err) == 0, "%s", ebuf);
}
END_TEST

START_TEST(reload_the_program_in_use)
{
    const char *a = script(SCRIPT_A), *b = script(SCRIPT_A);

    ck_assert_msg(pol_load(a, &err) == 0, "%s", ebuf);
    ck_assert_int_eq(pol_prog_load("b", b, &err), 0);
    ck_assert_int_eq(pol_prog_use("b", &err), 0);
    ck_assert_int_eq(recv_act(), POL_PASS);
    /* SIGHUP: b's file, not boot's, and under the name b */
    rewrite(a, SCRIPT_BAD);
    rewrite(b, SCRIPT_B);
    ck_assert_msg(pol_reload(&err) == 0, "%s", ebuf);
    ck_assert_int_eq(recv_act(), POL_PURGE);
    ck_assert_str_eq(listed("b"), "active 1");
    ck_assert_str_eq(listed("boot"), "available 0");
    rewrite(b, SCRIPT_BAD);
    ck_assert_int_eq(pol_reload(&err), -1);
    ck_assert_int_eq(recv_act(), POL_PURGE);
    ck_assert_str_eq(listed("b"), "active 1");
}
END_TEST

START_TEST(discarded_program_outlives_its_workers)
{
    const char *a = script(SCRIPT_A), *b = script(SCRIPT_B);

    ck_assert_msg(pol_load(a, &err) == 0, "%s", ebuf);
    ck_assert_int_eq(pol_prog_load("b", b, &err), 0);
    ck_assert_int_eq(pol_prog_use("b", &err), 0);
    ck_assert_int_eq(recv_act(), POL_PURGE);
    ck_assert_int_eq(pol_prog_use("boot", &err), 0);
    /* The worker still holds b's state: discarding b must not free it under the worker. */
    ck_assert_int_eq(pol_prog_discard("b", &err), 0);
    ck_assert_str_eq(listed("b"), "");
    ck_assert_int_eq(recv_act(), POL_PASS);
    ck_assert_str_eq(listed("boot"), "active 1");
}
END_TEST

START_TEST(load_at_runtime_without_boot)
{
    const char *b = script(SCRIPT_B);

    ck_assert(!pol_active());
    ck_assert_msg(pol_prog_load("b", b, &err) == 0, "%s", ebuf);
    ck_assert(!pol_active()); /* loading uses nothing */
    ck_assert_int_eq(pol_prog_use("b", &err), 0);
    ck_assert(pol_active());
    ck_assert_int_eq(recv_act(), POL_PURGE);
}
END_TEST

START_TEST(closed_after_fini)
{
    const char *a = script(SCRIPT_A);

    ck_assert_msg(pol_load(a, &err) == 0, "%s", ebuf);
    pol_wrk_fini(&wrk);
    pol_fini();
    ck_assert_int_eq(pol_prog_load("late", a, &err), -1);
    ck_assert_ptr_nonnull(strstr(ebuf, "shutting down"));
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_int_eq(pol_prog_use("boot", &err), -1);
}
END_TEST

Suite *
pol_admin_suite(void)
{
    Suite *s = suite_create("pol_admin");
    TCase *tc = tcase_create("programs");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, load_use_list_discard);
    tcase_add_test(tc, refusals_change_nothing);
    tcase_add_test(tc, no_backend_refused);
    tcase_add_test(tc, reload_the_program_in_use);
    tcase_add_test(tc, discarded_program_outlives_its_workers);
    tcase_add_test(tc, load_at_runtime_without_boot);
    tcase_add_test(tc, closed_after_fini);
    suite_add_tcase(s, tc);
    return s;
}
