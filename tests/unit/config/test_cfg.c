/*
 * cfg: the config file.  Each test writes a file under $TMPDIR, loads
 * it, and checks the parameters it set, or that the error names the
 * file and the right line.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "unit.h"
#include "surogat/sb.h"
#include "surogat/par.h"
#include "surogat/cfg.h"

static char path[512];
static char ebuf[1024];
static struct sb err;

static void
setup(void)
{
    const char *tmp = getenv("TMPDIR");
    int fd;

    snprintf(path, sizeof path, "%s/surogat-cfg-XXXXXX", tmp != NULL ? tmp : "/tmp");
    fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    par_init();
    sb_init(&err, ebuf, sizeof ebuf);
}

static void
teardown(void)
{
    unlink(path);
}

static void
write_file(const char *text, size_t len)
{
    FILE *f = fopen(path, "w");

    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(text, 1, len, f), len);
    ck_assert_int_eq(fclose(f), 0);
}

static int
load(const char *text)
{
    write_file(text, strlen(text));
    sb_init(&err, ebuf, sizeof ebuf);
    return cfg_load(path, &err);
}

static void
load_ok(const char *text)
{
    ck_assert_msg(load(text) == 0, "cfg_load failed: %s\n--\n%s", ebuf, text);
}

/* The error is "path:line: message". */
static void
load_fails_at(const char *text, unsigned line)
{
    char want[600];

    ck_assert_msg(load(text) == -1, "cfg_load accepted:\n%s", text);
    snprintf(want, sizeof want, "%s:%u: ", path, line);
    ck_assert_msg(strncmp(ebuf, want, strlen(want)) == 0, "error \"%s\", want prefix \"%s\"", ebuf,
                  want);
    ck_assert_msg(strlen(ebuf) > strlen(want), "no message after \"%s\"", want);
}

START_TEST(valid_file)
{
    load_ok("# surogat.conf\n"
            "\n"
            "thread_pools = 4\n"
            "timeout_idle=10s\n"
            "  http_req_size   =   64k  \n"
            "\txff = off\n"
            "access_log = \"/var/log/surogat/access log.txt\"\n"
            "   # indented comment\n"
            "error_log = /var/log/e.log\n");
    ck_assert_uint_eq(par.thread_pools, 4);
    ck_assert(par.timeout_idle > 10 - 1e-9 && par.timeout_idle < 10 + 1e-9);
    ck_assert_uint_eq(par.http_req_size, 65536);
    ck_assert(par.xff == false);
    ck_assert_str_eq(par.access_log, "/var/log/surogat/access log.txt");
    ck_assert_str_eq(par.error_log, "/var/log/e.log");
    /* untouched */
    ck_assert_uint_eq(par.thread_pool_max, 500);
}
END_TEST

START_TEST(listen_lines)
{
    load_ok("listen = 127.0.0.1:8080\n"
            "thread_pools = 3\n"
            "listen = \":443,tls,cert=/c/a.pem,key=/c/a.key\"\n");
    ck_assert_str_eq(cfg_listen(0), "127.0.0.1:8080");
    ck_assert_str_eq(cfg_listen(1), ":443,tls,cert=/c/a.pem,key=/c/a.key");
    ck_assert_ptr_null(cfg_listen(2));
    ck_assert_uint_eq(par.thread_pools, 3);
    /* A bad spec is refused at its line, with the -a message. */
    ck_assert_int_eq(load("thread_pools = 2\nlisten = :443,tls\n"), -1);
    ck_assert_ptr_nonnull(strstr(ebuf, ":2: listen: -a :443,tls: tls needs cert=FILE,key=FILE"));
    ck_assert_ptr_null(cfg_listen(2));
    cfg_fini();
    ck_assert_ptr_null(cfg_listen(0));
}
END_TEST

START_TEST(empty_and_comments_only)
{
    load_ok("");
    load_ok("\n\n\n");
    load_ok("# only\n# comments\n");
    load_ok("   \n\t\n");
    ck_assert_uint_eq(par.thread_pools, 2);
}
END_TEST

START_TEST(trailing_comment)
{
    load_ok("thread_pools = 3 # three pools\nlog_level = 5# no space\n");
    ck_assert_uint_eq(par.thread_pools, 3);
    ck_assert_uint_eq(par.log_level, 5);
}
END_TEST

START_TEST(quoting)
{
    load_ok("access_log = \"/tmp/a#b.log\"\n");
    ck_assert_str_eq(par.access_log, "/tmp/a#b.log");
    load_ok("access_log = \"  padded  \"  # comment\n");
    ck_assert_str_eq(par.access_log, "  padded  ");
    load_ok("access_log = \"\"\n");
    ck_assert_str_eq(par.access_log, "");
    load_ok("thread_pools = \"5\"\n");
    ck_assert_uint_eq(par.thread_pools, 5);
    load_ok("error_log = \"a = b\"\n");
    ck_assert_str_eq(par.error_log, "a = b");
}
END_TEST

START_TEST(no_final_newline)
{
    load_ok("thread_pools = 6");
    ck_assert_uint_eq(par.thread_pools, 6);
}
END_TEST

START_TEST(crlf_lines)
{
    load_ok("thread_pools = 7\r\naccess_log = /x\r\n");
    ck_assert_uint_eq(par.thread_pools, 7);
    ck_assert_str_eq(par.access_log, "/x");
}
END_TEST

START_TEST(later_wins)
{
    load_ok("thread_pools = 3\nthread_pools = 9\n");
    ck_assert_uint_eq(par.thread_pools, 9);
}
END_TEST

START_TEST(unknown_param_line)
{
    load_fails_at("# comment\n\nno_such_thing = 1\nthread_pools = 4\n", 3);
    ck_assert_ptr_nonnull(strstr(ebuf, "no_such_thing"));
    /* lines after the error are not applied */
    ck_assert_uint_eq(par.thread_pools, 2);
}
END_TEST

START_TEST(set_before_error_stays)
{
    load_fails_at("thread_pools = 4\nlog_level = 5\nbogus = 1\n", 3);
    ck_assert_uint_eq(par.thread_pools, 4);
    ck_assert_uint_eq(par.log_level, 5);
}
END_TEST

START_TEST(bad_values)
{
    load_fails_at("thread_pools = 0\n", 1);
    load_fails_at("\n\nthread_pools = 65\n", 3);
    load_fails_at("#\nhttp_req_size = 5m\n", 2);
    load_fails_at("xff = maybe\n", 1);
    load_fails_at("timeout_idle = soon\n", 1);
    load_fails_at("thread_pools =\n", 1);
    load_fails_at("thread_pools = 4 5\n", 1);
}
END_TEST

START_TEST(bad_syntax)
{
    load_fails_at("thread_pools 4\n", 1);
    load_fails_at("\n= 4\n", 2);
    load_fails_at("a\n", 1);
    load_fails_at("thread_pools == 4\n", 1);
    load_fails_at("thread pools = 4\n", 1);
    load_fails_at("x\n\n\naccess_log = \"unterminated\n", 1);
    load_fails_at("access_log = \"unterminated\n", 1);
    load_fails_at("\n\naccess_log = \"a\" trailing\n", 3);
}
END_TEST

/* Line numbers count every line: blank ones, comments and CRLF ones. */
START_TEST(line_numbers)
{
    load_fails_at("# 1\r\n\r\nthread_pools = 2\r\n   \r\n# 5\r\nnope = 1\r\n", 6);
    load_fails_at("thread_pools = 2\n\n\n\n\n\n\n\n\n\n\nnope = 1\n", 12);
}
END_TEST

START_TEST(nul_byte)
{
    static const char text[] = "thread_pools = 4\0junk\nlog_level = 3\n";

    write_file(text, sizeof text - 1);
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_int_eq(cfg_load(path, &err), -1);
    ck_assert_ptr_nonnull(strstr(ebuf, ":1: "));
}
END_TEST

START_TEST(long_line)
{
    size_t n = 100000;
    char *s = malloc(n + 64);

    if (s == NULL)
        abort();
    strcpy(s, "access_log = ");
    memset(s + 13, 'a', n);
    strcpy(s + 13 + n, "\nthread_pools = 3\n");
    write_file(s, strlen(s));
    sb_init(&err, ebuf, sizeof ebuf);
    if (cfg_load(path, &err) == 0) {
        ck_assert_uint_eq(strlen(par.access_log), n);
        ck_assert_uint_eq(par.thread_pools, 3);
    } else {
        ck_assert_ptr_nonnull(strstr(ebuf, ":1: "));
    }
    free(s);
}
END_TEST

START_TEST(missing_file)
{
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_int_eq(cfg_load("/nonexistent/surogat.conf", &err), -1);
    ck_assert_ptr_nonnull(strstr(ebuf, "/nonexistent/surogat.conf"));
}
END_TEST

START_TEST(directory)
{
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_int_eq(cfg_load("/", &err), -1);
    ck_assert(err.len > 0);
}
END_TEST

Suite *
cfg_suite(void)
{
    Suite *s = suite_create("cfg");
    TCase *tc = tcase_create("cfg");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, valid_file);
    tcase_add_test(tc, listen_lines);
    tcase_add_test(tc, empty_and_comments_only);
    tcase_add_test(tc, trailing_comment);
    tcase_add_test(tc, quoting);
    tcase_add_test(tc, no_final_newline);
    tcase_add_test(tc, crlf_lines);
    tcase_add_test(tc, later_wins);
    tcase_add_test(tc, unknown_param_line);
    tcase_add_test(tc, set_before_error_stays);
    tcase_add_test(tc, bad_values);
    tcase_add_test(tc, bad_syntax);
    tcase_add_test(tc, line_numbers);
    tcase_add_test(tc, nul_byte);
    tcase_add_test(tc, long_line);
    tcase_add_test(tc, missing_file);
    tcase_add_test(tc, directory);
    suite_add_tcase(s, tc);
    return s;
}
