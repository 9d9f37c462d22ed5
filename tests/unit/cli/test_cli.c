/*
 * cli: how a request is split into arguments -- Varnish's quoting, its
 * escapes and its here documents -- seen through cli_exec() and a
 * command that echoes what it was given.
 */
#include <stdio.h>
#include <string.h>

#include "unit.h"
#include "surogat/cli.h"
#include "surogat/defs.h"
#include "surogat/par.h"
#include "surogat/sb.h"
#include "surogat/stat.h"

static char obuf[CLI_BODY_MAX];
static struct sb out;

/* "N|arg|arg|" with each argument's bytes, \n shown as \n. */
static unsigned
cmd_echo(int argc, char *const *argv, struct sb *o, void *priv)
{
    (void)priv;
    sb_printf(o, "%d|", argc - 1);
    for (int i = 1; i < argc; i++) {
        for (const char *p = argv[i]; *p != '\0'; p++) {
            if (*p == '\n')
                sb_cat(o, "\\n");
            else if (*p == '\r')
                sb_cat(o, "\\r");
            else
                sb_bcat(o, p, 1);
        }
        sb_cat(o, "|");
    }
    return (CLI_OK);
}

static void
setup(void)
{
    par_init();
    (void)stat_init();
    cli_register("echo", "[<arg>...]", "Echo the arguments.", 0, -1, cmd_echo, NULL);
}

static void
teardown(void)
{
    cli_fini();
    stat_fini();
    par_fini();
}

static const char *
run(const char *line, unsigned want)
{
    unsigned st;

    sb_init(&out, obuf, sizeof obuf);
    st = cli_exec(line, &out);
    ck_assert_msg(st == want, "'%s': status %u, want %u: %s", line, st, want, obuf);
    return (obuf);
}

START_TEST(quoting)
{
    static const struct {
        const char *line, *want;
    } v[] = {
        { "echo", "0|" },
        { "echo a  b\tc", "3|a|b|c|" },
        { "echo \"a b\" c", "2|a b|c|" },
        { "echo \"\"", "1||" },
        { "echo \"say \\\"hi\\\"\"", "1|say \"hi\"|" },
        { "echo \"a\\\\b\"", "1|a\\b|" },
        { "echo \"l1\\nl2\\tx\\ry\"", "1|l1\\nl2\tx\\ry|" },
        /* Varnish's \xHH and \NNN */
        { "echo \"\\x41\\x62c\"", "1|Abc|" },
        { "echo \"\\101\\60\\7x\"", "1|A0\007x|" },
        { "echo \"\\1012\"", "1|A2|" }, /* three octal digits at most */
        /* an unknown escape keeps its backslash: regexes stay as written */
        { "echo \"req.url ~ \\.png$\"", "1|req.url ~ \\.png$|" },
        { "echo \"\\xZZ\"", "1|\\xZZ|" },
        /* outside quotes a backslash is a byte */
        { "echo a\\nb", "1|a\\nb|" },
        /* a quoted "<<" with no following lines is an argument like any other */
        { "echo \"<<\"", "1|<<|" },
    };

    for (size_t i = 0; i < ARRAY_LEN(v); i++)
        ck_assert_msg(strcmp(run(v[i].line, CLI_OK), v[i].want) == 0, "'%s' gave '%s', want '%s'",
                      v[i].line, obuf, v[i].want);
}
END_TEST

START_TEST(quoting_errors)
{
    static const struct {
        const char *line, *why;
    } v[] = {
        { "echo \"open", "Unterminated quoted argument" },
        { "echo \"ends with \\", "Unterminated quoted argument" },
        { "echo \"a\"b", "Missing space after quoted argument" },
        { "echo \"\\0\"", "NUL" },
        { "echo \"\\x00\"", "NUL" },
        { "echo \"\\000\"", "NUL" },
    };

    for (size_t i = 0; i < ARRAY_LEN(v); i++)
        ck_assert_msg(strstr(run(v[i].line, CLI_USAGE), v[i].why) != NULL, "'%s' gave '%s'",
                      v[i].line, obuf);
}
END_TEST

/* Varnish's here document: the lines up to WORD are the last argument, each with its newline. */
START_TEST(here_documents)
{
    static const struct {
        const char *line, *want;
    } v[] = {
        { "echo name << EOF\nline 1\n  \"line\" 2\\n\nEOF", "2|name|line 1\\n  \"line\" 2\\n\\n|" },
        { "echo name << END\nEND", "2|name||" },
        { "echo << X\na\nX", "1|a\\n|" },
        /* the token keeps its meaning quoted, as in Varnish */
        { "echo n \"<<\" EOF\nx\nEOF", "2|n|x\\n|" },
        /* a CR before a line's end, as a telnet user sends */
        { "echo n << EOF\r\nx\r\nEOF\r", "2|n|x\\r\\n|" },
        /* the first line that is WORD alone ends it; WORD inside a line does not */
        { "echo n << EOF\nEOF is here\n EOF\nEOF", "2|n|EOF is here\\n EOF\\n|" },
    };

    for (size_t i = 0; i < ARRAY_LEN(v); i++)
        ck_assert_msg(strcmp(run(v[i].line, CLI_OK), v[i].want) == 0, "'%s' gave '%s', want '%s'",
                      v[i].line, obuf, v[i].want);
    /* Lines without a here document to hold them are refused. */
    ck_assert_ptr_nonnull(strstr(run("echo a\nb", CLI_USAGE), "here document"));
    ck_assert_ptr_nonnull(strstr(run("echo a << EOF\nb\nEOX", CLI_USAGE), "here document"));
}
END_TEST

/* The commands by Varnish's names exist and check their argument counts. */
START_TEST(varnish_commands)
{
    ck_assert_ptr_nonnull(strstr(run("help", CLI_OK), "vcl.inline <name>"));
    ck_assert_ptr_nonnull(strstr(obuf, "param.reset <name>"));
    ck_assert_ptr_nonnull(strstr(obuf, "reload"));
    ck_assert_ptr_nonnull(strstr(obuf, "log.reopen"));
    ck_assert_ptr_nonnull(strstr(run("vcl.load x", CLI_USAGE), "Too few arguments"));
    ck_assert_ptr_nonnull(strstr(run("vcl.use", CLI_USAGE), "Too few arguments"));
    ck_assert_ptr_nonnull(strstr(run("vcl.load a b cold", CLI_PARAM), "warm"));
    ck_assert_ptr_nonnull(strstr(run("param.show first_byte_timeout", CLI_OK),
                                 "backend_first_byte_timeout\n        Value is: 60 [seconds]"));
    ck_assert_ptr_nonnull(strstr(run("param.show nope", CLI_PARAM), "Unknown parameter \"nope\""));
    ck_assert_ptr_nonnull(strstr(run("param.show -x", CLI_USAGE), "Usage"));
    run("param.set connect_timeout 1.5", CLI_OK);
    ck_assert_ptr_nonnull(strstr(run("param.show changed", CLI_OK), "backend_connect_timeout"));
    run("param.reset connect_timeout", CLI_OK);
    ck_assert_str_eq(run("param.show changed", CLI_OK), "");
    ck_assert_ptr_nonnull(strstr(run("param.set thread_pools 3", CLI_PARAM), "restart"));
    ck_assert_ptr_nonnull(strstr(run("param.set tls_ciphers x", CLI_PARAM), "a reload applies"));
    /* No main loop here: a reload is refused, not waited for. */
    ck_assert_ptr_nonnull(strstr(run("reload", CLI_FAILED), "nothing changed"));
}
END_TEST

Suite *
cli_suite(void)
{
    Suite *s = suite_create("cli");
    TCase *tc = tcase_create("cli");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, quoting);
    tcase_add_test(tc, quoting_errors);
    tcase_add_test(tc, here_documents);
    tcase_add_test(tc, varnish_commands);
    suite_add_tcase(s, tc);
    return s;
}
