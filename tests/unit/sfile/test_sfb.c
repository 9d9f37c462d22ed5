/*
 * sfb: path normalisation (what is refused and what a path becomes), glob
 * matching, the default deny list, MIME lookup (file, overrides, built-in
 * fallback) and expiry rules, through sfb.h.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "unit.h"
#include "surogat/sb.h"
#include "surogat/sfb.h"

static char ebuf[512];
static struct sb err;
static char tmpdir[64];

static void
mk_tmpdir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/surogat-sfb-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void
rm_tmpdir(void)
{
    char cmd[128];

    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
}

/* A file in tmpdir with `text`; returns its path (static buffer). */
static const char *
write_file(const char *name, const char *text)
{
    static char path[128];
    FILE *f;

    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    return (path);
}

static struct sfb *
new_ok(struct sfb_conf *c)
{
    struct sfb *s;

    if (c->root == NULL)
        c->root = tmpdir;
    sb_init(&err, ebuf, sizeof ebuf);
    s = sfb_new(c, &err);
    ck_assert_msg(s != NULL, "sfb_new refused: %s", ebuf);
    return (s);
}

static void
new_fails(struct sfb_conf *c, const char *want)
{
    if (c->root == NULL)
        c->root = tmpdir;
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_ptr_null(sfb_new(c, &err));
    ck_assert_msg(strstr(ebuf, want) != NULL, "message '%s' lacks '%s'", ebuf, want);
}

START_TEST(norm_accepts)
{
    static const struct {
        const char *in, *want;
    } v[] = {
        { "/", "/" },
        { "/index.html", "/index.html" },
        { "/a/b/c.txt", "/a/b/c.txt" },
        { "/a/", "/a/" },
        { "//a//b//", "/a/b/" },
        { "/./a/./b/.", "/a/b/" },
        { "/.", "/" },
        { "/a/.?x=1", "/a/" },
        { "/a?b=/../../etc/passwd", "/a" }, /* the query is not the path */
        { "/a#../../x", "/a" },
        { "/%61%62c", "/abc" },
        { "/a%20b", "/a b" },
        { "/%25", "/%" },
        { "/%252e%252e/x", "/%2e%2e/x" }, /* decoded once: a file named "%2e%2e" */
        { "/%2E%2Ex", "/..x" },           /* ".." only as a whole segment */
        { "/...", "/..." },
        { "/a..b/..c", "/a..b/..c" },
        { "/.well-known/x", "/.well-known/x" },
        { "/caf%C3%A9", "/caf\xc3\xa9" },
        { "/%E2%82%AC", "/\xe2\x82\xac" },
        { "/%F0%9F%98%80", "/\xf0\x9f\x98\x80" },
        { "/%EF%BF%BD", "/\xef\xbf\xbd" },
        { "/%F4%8F%BF%BF", "/\xf4\x8f\xbf\xbf" }, /* U+10FFFF, the last one */
        { "/a%3Fb", "/a?b" },
    };
    char out[256];
    size_t n;

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        enum sfb_path st = sfb_path_norm(v[i].in, strlen(v[i].in), out, sizeof out, &n);

        ck_assert_msg(st == SFB_PATH_OK, "%s refused (%d)", v[i].in, st);
        ck_assert_str_eq(out, v[i].want);
        ck_assert_uint_eq(n, strlen(v[i].want));
    }
}
END_TEST

START_TEST(norm_refuses)
{
    static const struct {
        const char *in;
        enum sfb_path want;
    } v[] = {
        { "/..", SFB_PATH_TRAVERSAL },
        { "/../etc/passwd", SFB_PATH_TRAVERSAL },
        { "/a/../../etc/passwd", SFB_PATH_TRAVERSAL },
        { "/a/..", SFB_PATH_TRAVERSAL },
        { "/a/../b", SFB_PATH_TRAVERSAL }, /* refused even where it would stay inside */
        { "/%2e%2e/etc/passwd", SFB_PATH_TRAVERSAL },
        { "/%2E%2E/", SFB_PATH_TRAVERSAL },
        { "/.%2e/x", SFB_PATH_TRAVERSAL },
        { "/%2e./x", SFB_PATH_TRAVERSAL },
        { "/..%2fetc%2fpasswd", SFB_PATH_TRAVERSAL },
        { "/a%2fb", SFB_PATH_TRAVERSAL },
        { "/a%2Fb", SFB_PATH_TRAVERSAL },
        { "/%2f%2fetc/passwd", SFB_PATH_TRAVERSAL },
        { "/./../x", SFB_PATH_TRAVERSAL },
        { "//..//x", SFB_PATH_TRAVERSAL },
        { "/a/b/../../../../etc", SFB_PATH_TRAVERSAL },
        { "/..\\etc", SFB_PATH_BAD },
        { "/a\\b", SFB_PATH_BAD },
        { "/..%5cetc%5cpasswd", SFB_PATH_BAD },
        { "/%5c..%5c", SFB_PATH_BAD },
        { "/a%00.html", SFB_PATH_BAD },
        { "/a%00", SFB_PATH_BAD },
        { "/a%0d%0aSet-Cookie:x", SFB_PATH_BAD },
        { "/a%7f", SFB_PATH_BAD },
        { "/a%09", SFB_PATH_BAD },
        { "/%c0%ae%c0%ae/etc/passwd", SFB_PATH_BAD }, /* overlong '.' */
        { "/%c0%af", SFB_PATH_BAD },                  /* overlong '/' */
        { "/%e0%80%ae", SFB_PATH_BAD },               /* overlong '.' in three bytes */
        { "/%f0%80%80%ae", SFB_PATH_BAD },            /* ... and in four */
        { "/%c1%9c", SFB_PATH_BAD },                  /* overlong '\' */
        { "/%ed%a0%80", SFB_PATH_BAD },               /* a surrogate */
        { "/%f4%90%80%80", SFB_PATH_BAD },            /* past U+10FFFF */
        { "/%f5%80%80%80", SFB_PATH_BAD },
        { "/%ff", SFB_PATH_BAD },
        { "/%80", SFB_PATH_BAD }, /* a lone continuation byte */
        { "/%c3", SFB_PATH_BAD }, /* cut short */
        { "/%e2%82", SFB_PATH_BAD },
        { "/%c3%28", SFB_PATH_BAD },
        { "/%", SFB_PATH_BAD },
        { "/%2", SFB_PATH_BAD },
        { "/%zz", SFB_PATH_BAD },
        { "/%%32%65", SFB_PATH_BAD },
        { "", SFB_PATH_BAD },
        { "a/b", SFB_PATH_BAD },
        { "*", SFB_PATH_BAD },
        { "http://x/", SFB_PATH_BAD },
    };
    char out[256];
    size_t n;

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        enum sfb_path st = sfb_path_norm(v[i].in, strlen(v[i].in), out, sizeof out, &n);

        ck_assert_msg(st == v[i].want, "%s: got %d, want %d", v[i].in, st, v[i].want);
    }
}
END_TEST

START_TEST(norm_bounds)
{
    char url[300], out[16];
    size_t n;

    /* The length given counts, not a NUL: bytes past it are not read. */
    ck_assert_int_eq(sfb_path_norm("/ab/../x", 3, out, sizeof out, &n), SFB_PATH_OK);
    ck_assert_str_eq(out, "/ab");
    ck_assert_int_eq(sfb_path_norm("/a%2", 3, out, sizeof out, &n), SFB_PATH_BAD);
    /* Exactly filling out (15 bytes and the NUL) fits; one more does not. */
    ck_assert_int_eq(sfb_path_norm("/abcdefghijklmn", 15, out, sizeof out, &n), SFB_PATH_OK);
    ck_assert_uint_eq(n, 15);
    ck_assert_int_eq(sfb_path_norm("/abcdefghijklmno", 16, out, sizeof out, &n), SFB_PATH_TOO_LONG);
    ck_assert_int_eq(sfb_path_norm("/abcdefghijklmn/", 16, out, sizeof out, &n), SFB_PATH_TOO_LONG);
    /* A long target that shrinks by decoding fits. */
    memset(url, 0, sizeof url);
    url[0] = '/';
    for (int i = 0; i < 10; i++)
        memcpy(url + 1 + 3 * i, "%41", 3);
    ck_assert_int_eq(sfb_path_norm(url, strlen(url), out, sizeof out, &n), SFB_PATH_OK);
    ck_assert_str_eq(out, "/AAAAAAAAAA");
    ck_assert_int_eq(sfb_path_norm("/", 1, out, 1, &n), SFB_PATH_TOO_LONG);
}
END_TEST

START_TEST(glob_table)
{
    static const struct {
        const char *pat, *s;
        bool want;
    } v[] = {
        { "*.php", "index.php", true },
        { "*.php", "INDEX.PHP", true },
        { "*.php", "index.php5", false },
        { "*.php?", "index.php5", true },
        { "*.php.*", "x.php.bak", true },
        { "*.php", "php", false },
        { "*.php", ".php", true },
        { ".ht*", ".htaccess", true },
        { ".ht*", ".HTpasswd", true },
        { ".ht*", "x.htaccess", false },
        { ".*", ".git", true },
        { ".*", "git", false },
        { "*~", "index.html~", true },
        { "*~", "index.html", false },
        { "#*#", "#notes#", true },
        { "a?c", "abc", true },
        { "a?c", "ac", false },
        { "[abc]x", "bx", true },
        { "[abc]x", "dx", false },
        { "[a-c]x", "Bx", true },
        { "[!a-c]x", "dx", true },
        { "[!a-c]x", "ax", false },
        { "[x", "[x", true }, /* no ']': a literal '[' */
        { "*", "", true },
        { "", "", true },
        { "", "a", false },
        { "**a**b**", "xxaxxbxx", true },
        { "*a*b*c*d*e*f*", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false },
        { "image/*", "image/png", true },
        { "image/*", "text/png", false },
        { "text/css", "text/css", true },
    };

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        ck_assert_msg(sfb_glob(v[i].pat, v[i].s) == v[i].want, "glob '%s' on '%s'", v[i].pat,
                      v[i].s);
}
END_TEST

START_TEST(deny_default)
{
    static const struct {
        const char *path;
        bool want;
    } v[] = {
        { "/x.php", true },
        { "/a/b/X.PHP", true },
        { "/x.php5", true },
        { "/x.php.bak", true },
        { "/x.phtml", true },
        { "/x.phar", true },
        { "/config.inc", true },
        { "/config.inc.old", true },
        { "/.htaccess", true },
        { "/.htpasswd", true },
        { "/sub/.htaccess", true },
        { "/.git/config", true },
        { "/.git/", true },
        { "/.env", true },
        { "/a/.svn/entries", true },
        { "/index.html~", true },
        { "/index.html.bak", true },
        { "/index.html.orig", true },
        { "/.index.html.swp", true },
        { "/#index.html#", true },
        { "/index.html", false },
        { "/", false },
        { "/css/site.css", false },
        { "/php/readme.txt", false }, /* a directory named php is not php */
        { "/a.phps", true },
        { "/a.php-notes.txt", false },
        { "/.well-known/acme-challenge/t0k", false },
        { "/.well-known/", false },
        { "/.well-known/.git/config", true }, /* the exception is for that name only */
    };
    struct sfb_conf c = { 0 };
    struct sfb *s;

    mk_tmpdir();
    s = new_ok(&c);
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        ck_assert_msg(sfb_denied(s, v[i].path) == v[i].want, "%s", v[i].path);
    sfb_free(&s);
    ck_assert_ptr_null(s);
    rm_tmpdir();
}
END_TEST

START_TEST(deny_custom)
{
    static const char *const deny[] = { "secret*", "*.key", "!secret-ok" };
    struct sfb_conf c = { .deny = deny, .ndeny = 3 };
    struct sfb *s;

    mk_tmpdir();
    s = new_ok(&c);
    ck_assert(sfb_denied(s, "/secret.txt"));
    ck_assert(sfb_denied(s, "/a/server.KEY"));
    ck_assert(!sfb_denied(s, "/secret-ok"));
    ck_assert(!sfb_denied(s, "/x.php")); /* the default list is replaced, not extended */
    ck_assert(!sfb_denied(s, "/.htaccess"));
    sfb_free(&s);
    rm_tmpdir();
}
END_TEST

START_TEST(mime_file_and_overrides)
{
    static const char *const over[] = { "foo=application/x-bar", ".HTML=text/html; charset=utf-8" };
    struct sfb_conf c = { .mime = over, .nmime = 2 };
    struct sfb *s;

    mk_tmpdir();
    c.mime_file = write_file("mime.types", "# comment\n"
                                           "text/x-foo\tfoo fOo2\n"
                                           "image/png png\n"
                                           "\n"
                                           "application/x-tar tar # trailing comment\n"
                                           "text/x-css css\n");
    s = new_ok(&c);
    ck_assert_str_eq(sfb_mime_type(s, "/a.png"), "image/png");
    ck_assert_str_eq(sfb_mime_type(s, "/dir.d/A.PNG"), "image/png");
    ck_assert_str_eq(sfb_mime_type(s, "/x.foo2"), "text/x-foo");       /* ext lower-cased */
    ck_assert_str_eq(sfb_mime_type(s, "/x.foo"), "application/x-bar"); /* override wins */
    ck_assert_str_eq(sfb_mime_type(s, "/x.html"), "text/html; charset=utf-8");
    ck_assert_str_eq(sfb_mime_type(s, "/x.css"), "text/x-css");     /* the file beats built-in */
    ck_assert_str_eq(sfb_mime_type(s, "/x.js"), "text/javascript"); /* built-in remains */
    ck_assert_str_eq(sfb_mime_type(s, "/x.tar"), "application/x-tar");
    ck_assert_str_eq(sfb_mime_type(s, "/x.unknown"), "application/octet-stream");
    ck_assert_str_eq(sfb_mime_type(s, "/noext"), "application/octet-stream");
    ck_assert_str_eq(sfb_mime_type(s, "/.png"), "application/octet-stream"); /* a dotfile */
    ck_assert_str_eq(sfb_mime_type(s, "/x."), "application/octet-stream");
    ck_assert_str_eq(sfb_mime_type(s, "/a.png/readme"), "application/octet-stream");
    ck_assert_str_eq(sfb_mime_type(s, "/a.tar.png"), "image/png");
    sfb_free(&s);
    rm_tmpdir();
}
END_TEST

START_TEST(mime_system_file)
{
    struct sfb_conf c = { 0 };
    struct sfb *s;

    /* scripts/deps.sh installs media-types, which provides it. */
    ck_assert_msg(access("/etc/mime.types", R_OK) == 0, "/etc/mime.types: install media-types");
    mk_tmpdir();
    s = new_ok(&c);
    ck_assert_uint_gt(sfb_mime_count(s), 500); /* media-types lists about 1,500 */
    ck_assert_str_eq(sfb_mime_type(s, "/a.html"), "text/html");
    ck_assert_str_eq(sfb_mime_type(s, "/a.jpeg"), "image/jpeg");
    ck_assert_str_eq(sfb_mime_type(s, "/a.pdf"), "application/pdf");
    sfb_free(&s);
    rm_tmpdir();
}
END_TEST

START_TEST(mime_builtin)
{
    struct sfb_conf c = { 0 };
    struct sfb *s;

    mk_tmpdir();
    c.mime_file = write_file("empty.types", "");
    s = new_ok(&c);
    ck_assert_uint_ge(sfb_mime_count(s), 25);
    ck_assert_str_eq(sfb_mime_type(s, "/a.css"), "text/css");
    ck_assert_str_eq(sfb_mime_type(s, "/a.js"), "text/javascript");
    ck_assert_str_eq(sfb_mime_type(s, "/a.woff2"), "font/woff2");
    ck_assert_str_eq(sfb_mime_type(s, "/a.svg"), "image/svg+xml");
    sfb_free(&s);
    rm_tmpdir();
}
END_TEST

START_TEST(expires_rules)
{
    static const char *const exp[] = { "image/svg+xml=60", "image/*=30d", "text/css=604800",
                                       "*/javascript=1h" };
    struct sfb_conf c = { .expires = exp, .nexpires = 4 };
    struct sfb *s;

    mk_tmpdir();
    s = new_ok(&c);
    ck_assert_int_eq(sfb_expires(s, "image/svg+xml"), 60); /* the first match wins */
    ck_assert_int_eq(sfb_expires(s, "image/png"), 30 * 86400);
    ck_assert_int_eq(sfb_expires(s, "text/css"), 604800);
    ck_assert_int_eq(sfb_expires(s, "text/css; charset=utf-8"), 604800);
    ck_assert_int_eq(sfb_expires(s, "text/javascript"), 3600);
    ck_assert_int_eq(sfb_expires(s, "text/html"), -1);
    ck_assert_int_eq(sfb_expires(s, "TEXT/CSS"), 604800);
    sfb_free(&s);
    rm_tmpdir();
}
END_TEST

START_TEST(conf_errors)
{
    static const char *const bad_exp[] = { "image/*=soon" };
    static const char *const bad_exp2[] = { "=60" };
    static const char *const bad_mime[] = { "noequals" };
    static const char *const bad_mime2[] = { "x=notatype" };
    static const char *const bad_index[] = { "../index.html" };
    struct sfb_conf c;

    mk_tmpdir();
    c = (struct sfb_conf){ .root = "relative/dir" };
    new_fails(&c, "not an absolute path");
    c = (struct sfb_conf){ .root = "/nonexistent/surogat/root" };
    new_fails(&c, "No such file");
    c = (struct sfb_conf){ .root = write_file("plain", "x") };
    new_fails(&c, "Not a directory");
    c = (struct sfb_conf){ .expires = bad_exp, .nexpires = 1 };
    new_fails(&c, "image/*=soon");
    c = (struct sfb_conf){ .expires = bad_exp2, .nexpires = 1 };
    new_fails(&c, "type-pattern=duration");
    c = (struct sfb_conf){ .mime = bad_mime, .nmime = 1 };
    new_fails(&c, "noequals");
    c = (struct sfb_conf){ .mime = bad_mime2, .nmime = 1 };
    new_fails(&c, "ext=type/subtype");
    c = (struct sfb_conf){ .index = bad_index, .nindex = 1 };
    new_fails(&c, "want a file name");
    c = (struct sfb_conf){ .mime_file = "/nonexistent/mime.types" };
    new_fails(&c, "/nonexistent/mime.types");
    c = (struct sfb_conf){ .mime_file = write_file("bad.types", "notatype ext\n") };
    new_fails(&c, ":1: 'notatype' is not a type");
    rm_tmpdir();
}
END_TEST

START_TEST(free_null_is_a_bug)
{
    struct sfb *s = NULL;

    sfb_free(&s); /* must trip OBJ_TAKE */
}
END_TEST

Suite *
sfb_suite(void)
{
    Suite *s = suite_create("sfb");
    TCase *tc = tcase_create("path");

    tcase_add_test(tc, norm_accepts);
    tcase_add_test(tc, norm_refuses);
    tcase_add_test(tc, norm_bounds);
    tcase_add_test(tc, glob_table);
    suite_add_tcase(s, tc);
    tc = tcase_create("conf");
    tcase_add_test(tc, deny_default);
    tcase_add_test(tc, deny_custom);
    tcase_add_test(tc, mime_file_and_overrides);
    tcase_add_test(tc, mime_system_file);
    tcase_add_test(tc, mime_builtin);
    tcase_add_test(tc, expires_rules);
    tcase_add_test(tc, conf_errors);
    tcase_add_test_raise_signal(tc, free_null_is_a_bug, SIGABRT);
    suite_add_tcase(s, tc);
    return s;
}
