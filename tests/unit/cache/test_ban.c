/*
 * ban: the expression language (parsing, error messages with positions,
 * canonical printing), matching against cache keys and stored heads
 * (a regex PCRE2 cannot finish counting as a match), the ban list (lazy
 * tests, folding of duplicates, trimming), and the tag
 * parsing of xkey.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "unit.h"
#include "surogat/ban.h"
#include "surogat/defs.h"
#include "surogat/hsh.h"
#include "surogat/http.h"
#include "surogat/log.h"
#include "surogat/par.h"
#include "surogat/sb.h"
#include "surogat/shd.h"
#include "surogat/stat.h"
#include "surogat/tim.h"
#include "surogat/xkey.h"

static char ebuf[512];
static struct sb err;

static void
setup(void)
{
    par_init();
    AZ(stat_init());
    log_set_level(LOG_ERR); /* ban_add() logs each ban at LOG_INFO */
    sb_init(&err, ebuf, sizeof ebuf);
}

static void
teardown(void)
{
    stat_fini();
    par_fini();
}

/* A published-looking object with a stored head (encoded as the index stores it). */
static struct cobj
obj(unsigned status, const char *head)
{
    static unsigned char enc[8][16384];
    static unsigned next;
    unsigned char *e = enc[next++ % 8];
    struct cobj oc;

    ck_assert_uint_le(shd_bound(strlen(head)), sizeof enc[0]);
    memset(&oc, 0, sizeof oc);
    oc.magic = COBJ_MAGIC;
    oc.status = status;
    oc.head = (char *)e;
    oc.head_len = (uint32_t)shd_encode(head, strlen(head), e);
    return (oc);
}

#define KEY(host, url) host "\0" url, sizeof(host "\0" url) - 1

START_TEST(parse_and_print)
{
    static const struct {
        const char *in, *canon;
    } v[] = {
        { "req.url ~ ^/news", "req.url ~ \"^/news\"" },
        { "  req.url   ==   /a  ", "req.url == \"/a\"" },
        { "req.http.host != example.com && obj.status >= 500",
          "req.http.host != \"example.com\" && obj.status >= 500" },
        { "obj.http.Content-Type !~ \"^text/(html|css)\"",
          "obj.http.Content-Type !~ \"^text/(html|css)\"" },
        { "req.url == \"a \\\"quoted\\\" \\\\ word\"",
          "req.url == \"a \\\"quoted\\\" \\\\ word\"" },
        { "req.url ~ \"\\.png$\"", "req.url ~ \"\\\\.png$\"" }, /* unknown escapes stay */
        { "req.url == \"\"", "req.url == \"\"" },
        { "obj.status == 200 && obj.status != 0 && obj.status < 999 && obj.status > 1 && "
          "obj.status <= 5",
          "obj.status == 200 && obj.status != 0 && obj.status < 999 && obj.status > 1 && "
          "obj.status <= 5" },
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        char out[512];
        struct sb sb;
        struct ban_expr *e;

        sb_init(&err, ebuf, sizeof ebuf);
        e = ban_expr_parse(v[i].in, &err);
        ck_assert_msg(e != NULL, "'%s' refused: %s", v[i].in, ebuf);
        sb_init(&sb, out, sizeof out);
        ban_expr_print(e, &sb);
        ck_assert_str_eq(out, v[i].canon);
        ban_expr_free(&e);
        ck_assert_ptr_null(e);
        /* The canonical form parses back to itself. */
        e = ban_expr_parse(out, &err);
        ck_assert_ptr_nonnull(e);
        sb_init(&sb, out, sizeof out);
        ban_expr_print(e, &sb);
        ck_assert_str_eq(out, v[i].canon);
        ban_expr_free(&e);
    }
}
END_TEST

START_TEST(parse_errors)
{
    static const struct {
        const char *in, *msg;
    } v[] = {
        { "", "ban: at 1: expected a condition (FIELD OP ARG)" },
        { "   ", "ban: at 4: expected a condition" },
        { "req.uri ~ x", "ban: at 1: unknown field 'req.uri'" },
        { "req.url =~ x", "ban: at 9: unknown operator '=~' (== != ~ !~)" },
        { "req.url", "ban: at 8: expected an operator after the field" },
        { "req.url ==", "ban: at 11: expected an argument after '=='" },
        { "req.url ~ (", "ban: at 11: bad regular expression '(': missing closing parenthesis" },
        { "req.url ~ a && ", "ban: at 16: expected a condition" },
        { "req.url ~ a || req.url ~ b", "ban: at 13: expected '&&' or the end, not '||'" },
        { "req.url ~ a req.url ~ b", "ban: at 13: expected '&&'" },
        { "req.url == \"abc", "ban: at 12: unterminated quoted string" },
        { "req.url == \"abc\\\"", "unterminated quoted string" },
        { "req.url == \"a\"b", "ban: at 15: a blank must follow a quoted string" },
        { "obj.status ~ 200", "ban: at 12: unknown operator '~' (== != < > <= >= for obj.status)" },
        { "obj.status == 2x", "ban: at 15: obj.status needs a number 0..999, not '2x'" },
        { "obj.status == 1000", "needs a number" },
        { "obj.status == 99999999999999999999", "needs a number" },
        { "obj.status == \"\"", "needs a number" },
        { "req.url < a", "unknown operator '<' (== != ~ !~)" },
        { "obj.http. == a", "ban: at 1: obj.http. needs a header name" },
        { "obj.http.a:b == a", "ban: at 1: bad header name in 'obj.http.a:b'" },
        { "\"req.url\" == a", "unknown field 'req.url'" }, /* a quoted field is an argument */
        { "req.url \"==\" a", "unknown operator" },
        { "&& req.url == a", "unknown field '&&'" },
    };
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        sb_init(&err, ebuf, sizeof ebuf);
        ck_assert_msg(ban_expr_parse(v[i].in, &err) == NULL, "'%s' accepted", v[i].in);
        ck_assert_msg(strstr(ebuf, v[i].msg) != NULL, "'%s': got '%s', want '%s'", v[i].in, ebuf,
                      v[i].msg);
    }
}
END_TEST

START_TEST(matching)
{
    static const char head[] = "HTTP/1.1 200 OK\r\n"
                               "Content-Type: image/png\r\n"
                               "X-Empty:\r\n"
                               "x-tag:  one\r\n"
                               "X-Tag: two\r\n";
    static const struct {
        const char *expr;
        bool want;
    } v[] = {
        { "req.url ~ ^/news", true },
        { "req.url ~ ^/new$", false },
        { "req.url !~ ^/news", false },
        { "req.url == /news/1?x=1", true },
        { "req.url == /news/1", false },
        { "req.url != /news/1", true },
        { "req.url ~ example", false }, /* the host is not part of the URL */
        { "req.http.host == example.com", true },
        { "req.http.host == EXAMPLE.com", true }, /* hosts are case-insensitive */
        { "req.http.host ~ ^EXAMPLE\\.", true },
        { "req.http.host ~ /news", false },
        { "req.http.host != example.org", true },
        { "obj.status == 200", true },
        { "obj.status != 200", false },
        { "obj.status >= 200 && obj.status < 300", true },
        { "obj.status > 200", false },
        { "obj.status <= 199", false },
        { "obj.http.content-type ~ ^image/", true },
        { "obj.http.CONTENT-TYPE == image/png", true },
        { "obj.http.Content-Type == Image/png", false }, /* values are case-sensitive */
        { "obj.http.x-tag == one", true },               /* the first field, trimmed */
        { "obj.http.x-tag == two", false },
        { "obj.http.x-empty == \"\"", true },
        { "obj.http.x-missing == \"\"", false }, /* a missing field equals nothing */
        { "obj.http.x-missing != \"\"", true },
        { "obj.http.x-missing ~ .*", false },
        { "obj.http.x-missing !~ .", true },
        { "obj.http.content ~ .", false }, /* a prefix of a name is not the name */
        { "req.url ~ ^/news && obj.status == 200 && obj.http.content-type ~ png$", true },
        { "req.url ~ ^/news && obj.status == 404", false },
    };
    struct cobj oc = obj(200, head);
    int re_err;

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        struct ban_expr *e;

        sb_init(&err, ebuf, sizeof ebuf);
        e = ban_expr_parse(v[i].expr, &err);
        ck_assert_msg(e != NULL, "'%s': %s", v[i].expr, ebuf);
        re_err = 12345;
        ck_assert_msg(ban_expr_match(e, KEY("example.com", "/news/1?x=1"), &oc, &re_err) ==
                          v[i].want,
                      "'%s': want %d", v[i].expr, v[i].want);
        ck_assert_int_eq(re_err, 0);
        ban_expr_free(&e);
    }
}
END_TEST

START_TEST(matching_marker_without_head)
{
    struct cobj oc = obj(0, "");
    struct ban_expr *e;

    oc.head = NULL;
    oc.head_len = 0;
    e = ban_expr_parse("obj.http.x != a && req.url == \"\"", &err);
    ck_assert_ptr_nonnull(e);
    int re_err;
    ck_assert(ban_expr_match(e, KEY("h", ""), &oc, &re_err));
    ban_expr_free(&e);
}
END_TEST

/*
 * (a|aa)+ on 60 a's has ~10^12 paths to try: PCRE2 gives up at its match
 * limit before the second alternative, which matches, is reached.
 */
#define BOMB_RE  "^/(a|aa)+$|\\.css$"
#define BOMB_URL "/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.css"

START_TEST(matching_regex_limit)
{
    static const struct {
        const char *expr;
        const char *url;
        bool want, err;
    } v[] = {
        /* Short enough to be decided: a match by the second alternative. */
        { "req.url ~ " BOMB_RE, "/aaaaaaaaaa.css", true, false },
        { "req.url !~ " BOMB_RE, "/aaaaaaaaaa.css", false, false },
        { "req.url ~ " BOMB_RE, "/aaaaaaaaaa.html", false, false },
        /* Undecided: a match, whichever the operator. */
        { "req.url ~ " BOMB_RE, BOMB_URL, true, true },
        { "req.url !~ " BOMB_RE, BOMB_URL, true, true },
        { "req.http.host == h && req.url ~ " BOMB_RE, BOMB_URL, true, true },
        /* The other conditions still count. */
        { "req.http.host == other && req.url ~ " BOMB_RE, BOMB_URL, false, false },
        { "req.url ~ " BOMB_RE " && obj.status == 404", BOMB_URL, false, true },
        { "req.url ~ " BOMB_RE " && obj.status == 200", BOMB_URL, true, true },
        { "obj.http.x-a ~ " BOMB_RE, NULL, true, true },
    };
    struct cobj oc = obj(200, "HTTP/1.1 200 OK\r\nX-A: " BOMB_URL "\r\n");
    char key[256], msg[160];
    struct sb sb;
    int re_err;

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        const char *url = v[i].url != NULL ? v[i].url : "/";
        struct ban_expr *e;
        size_t keylen = (size_t)snprintf(key, sizeof key, "h%c%s", 0, url);

        e = ban_expr_parse(v[i].expr, &err);
        ck_assert_msg(e != NULL, "'%s': %s", v[i].expr, ebuf);
        ck_assert_msg(ban_expr_match(e, key, keylen, &oc, &re_err) == v[i].want, "'%s' on %s",
                      v[i].expr, url);
        ck_assert_msg((re_err != 0) == v[i].err, "'%s' on %s: error %d", v[i].expr, url, re_err);
        if (v[i].err) {
            ck_assert_int_eq(re_err, -47); /* PCRE2_ERROR_MATCHLIMIT */
            sb_init(&sb, msg, sizeof msg);
            ban_expr_re_error(re_err, &sb);
            ck_assert_str_eq(msg, "match limit exceeded");
        }
        ban_expr_free(&e);
    }
}
END_TEST

START_TEST(ban_list_regex_limit)
{
    struct cobj a = obj(200, "HTTP/1.1 200 OK\r\n");
    struct cobj b = obj(200, "HTTP/1.1 200 OK\r\n");
    struct cobj c = obj(200, "HTTP/1.1 200 OK\r\n");

    AZ(ban_init());
    ban_obj_new(&a);
    ban_obj_new(&b);
    ban_obj_new(&c);
    ck_assert_int_eq(ban_add("req.url ~ " BOMB_RE, &err), 0);
    /* Undecided on a and b: banned, and counted; decided (no match) on c: kept. */
    ck_assert(ban_check_obj(&a, KEY("h", BOMB_URL)));
    ck_assert(ban_check_obj(&b, KEY("h", BOMB_URL "?x")));
    ck_assert(!ban_check_obj(&c, KEY("h", "/aaaa.html")));
    ck_assert(a.flags & COBJ_BANNED && b.flags & COBJ_BANNED && !(c.flags & COBJ_BANNED));
    ck_assert_uint_eq(stat_get(STAT_bans_regex_errors), 2);
    ck_assert_uint_eq(stat_get(STAT_bans_lookup_killed), 2);
    ban_obj_free(&a);
    ban_obj_free(&b);
    ban_obj_free(&c);
    ban_fini();
}
END_TEST

START_TEST(ban_list_lazy)
{
    struct cobj before = obj(200, "HTTP/1.1 200 OK\r\n");
    struct cobj before2 = obj(200, "HTTP/1.1 200 OK\r\n");
    struct cobj after = obj(200, "HTTP/1.1 200 OK\r\n");
    char out[1024];
    struct sb sb;

    AZ(ban_init());
    ck_assert_uint_eq(ban_count(), 1);
    ban_obj_new(&before);
    ban_obj_new(&before2);
    ck_assert(!ban_check_obj(&before, KEY("h", "/a/1")));
    ck_assert_int_eq(ban_add("req.url ~ ^/a/", &err), 0);
    ck_assert_int_eq(ban_add("req.url ~ ^/zzz", &err), 0);
    ck_assert_int_eq(ban_add("req.url ~ (", &err), -1);
    ck_assert_uint_eq(ban_count(), 3);
    ban_obj_new(&after);
    /* Objects from before the bans are tested, those from after are not. */
    ck_assert(ban_check_obj(&before, KEY("h", "/a/1")));
    ck_assert(before.flags & COBJ_BANNED);
    ck_assert(ban_check_obj(&before, KEY("h", "/b"))); /* stays banned */
    ck_assert(!ban_check_obj(&before2, KEY("h", "/b/1")));
    ck_assert(!ban_check_obj(&before2, KEY("h", "/a/1"))); /* tested already: not again */
    ck_assert(!ban_check_obj(&after, KEY("h", "/a/1")));
    ck_assert_uint_eq(stat_get(STAT_bans_lookup_killed), 1);
    ck_assert_uint_eq(stat_get(STAT_bans_lookup_tested), 4); /* 2 + 2, none for banned */
    ck_assert_uint_eq(stat_get(STAT_bans), 3);

    sb_init(&sb, out, sizeof out);
    ban_list(&sb);
    ck_assert_msg(strstr(out, "Present bans:\n") == out, "%s", out);
    ck_assert_msg(strstr(out, "          2 - req.url ~ \"^/zzz\"\n") != NULL, "%s", out);
    ck_assert_msg(strstr(out, "          0 - req.url ~ \"^/a/\"\n") != NULL, "%s", out);
    /* The first ban still holds `before`, banned but not yet freed. */
    ck_assert_msg(strstr(out, "          1 C \n") != NULL, "%s", out);

    /* A duplicate supersedes the older identical ban. */
    ck_assert_int_eq(ban_add("req.url   ~ \"^/zzz\"", &err), 0);
    ck_assert_uint_eq(stat_get(STAT_bans_dups), 1);
    ban_obj_free(&before);
    ban_obj_free(&before2);
    ban_obj_free(&after);
    ck_assert_ptr_null(before.ban);
    /* Nobody points at the older bans any more: only the newest is left. */
    ck_assert_uint_eq(ban_count(), 1);
    ck_assert_uint_eq(stat_get(STAT_bans_trimmed), 3);
    ban_fini();
}
END_TEST

START_TEST(tags)
{
    static const char head[] = "HTTP/1.1 200 OK\r\n"
                               "Surrogate-Key: a  b,c a\r\n"
                               "X-Other: z\r\n"
                               "XKEY: d, e,,f\r\n"
                               "xkey-not: nope\r\n"
                               "surrogate-key:\tg\r\n"
                               "xkey: b\r\n";
    struct cobj oc = obj(200, head);
    struct txt t[16];
    unsigned n;

    n = xkey_obj_tags(&oc, t, 16);
    ck_assert_uint_eq(n, 7);
    ck_assert(t[0].len == 1 && memcmp(t[0].b, "a", 1) == 0);
    ck_assert(t[1].len == 3 && memcmp(t[1].b, "b,c", 3) == 0); /* Surrogate-Key: blanks only */
    ck_assert(t[2].len == 1 && memcmp(t[2].b, "d", 1) == 0);
    ck_assert(t[3].len == 1 && memcmp(t[3].b, "e", 1) == 0);
    ck_assert(t[4].len == 1 && memcmp(t[4].b, "f", 1) == 0);
    ck_assert(t[5].len == 1 && memcmp(t[5].b, "g", 1) == 0);
    ck_assert(t[6].len == 1 && memcmp(t[6].b, "b", 1) == 0); /* not "b,c" */
    ck_assert_uint_eq(xkey_obj_tags(&oc, t, 2), 2);

    n = xkey_split(" x ,y\tz,, ", 10, true, t, 16);
    ck_assert_uint_eq(n, 3);
    ck_assert(t[2].len == 1 && t[2].b[0] == 'z');
    ck_assert_uint_eq(xkey_split("", 0, true, t, 16), 0);
    ck_assert_uint_eq(xkey_split(" ,, ", 4, true, t, 16), 0);
    ck_assert_uint_eq(xkey_split(" ,, ", 4, false, t, 16), 1);

    char big[XKEY_TAG_MAX + 10];
    memset(big, 'k', sizeof big);
    big[0] = ' ';
    ck_assert_uint_eq(xkey_split(big, XKEY_TAG_MAX + 1, true, t, 16), 1);
    ck_assert_uint_eq(xkey_split(big, XKEY_TAG_MAX + 2, true, t, 16), 0); /* too long */

    oc = obj(200, "HTTP/1.1 200 OK\r\nX: y\r\n");
    ck_assert_uint_eq(xkey_obj_tags(&oc, t, 16), 0);
}
END_TEST

START_TEST(ban_before)
{
    struct cobj old = obj(200, "HTTP/1.1 200 OK\r\n");
    struct cobj young = obj(200, "HTTP/1.1 200 OK\r\n");
    double now = tim_real();

    AZ(ban_init());
    old.fresh.t_origin = now - 100;
    young.fresh.t_origin = now - 10;
    ban_obj_new(&old);
    ban_obj_new(&young);
    /* Made 50 s ago: the object fetched 10 s ago is not concerned. */
    ck_assert_int_eq(ban_add_before("req.url ~ ^/", now - 50, &err), 0);
    ck_assert(ban_check_obj(&old, KEY("h", "/a")));
    ck_assert(!ban_check_obj(&young, KEY("h", "/a")));
    /* An identical ban made later supersedes it; one made earlier does not. */
    ck_assert_int_eq(ban_add_before("req.url ~ ^/", now - 80, &err), 0);
    ck_assert_uint_eq(stat_get(STAT_bans_dups), 0);
    ck_assert_int_eq(ban_add("req.url ~ ^/", &err), 0);
    ck_assert_uint_eq(stat_get(STAT_bans_dups), 2);
    ck_assert(ban_check_obj(&young, KEY("h", "/a")));
    ban_obj_free(&old);
    ban_obj_free(&young);
    ban_fini();
}
END_TEST

/* The whole file, or "" when there is none. */
static char *
slurp(const char *path)
{
    static char buf[8192];
    FILE *f = fopen(path, "r");
    size_t n = 0;

    if (f != NULL) {
        n = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
    }
    buf[n] = '\0';
    return (buf);
}

START_TEST(ban_persist)
{
    char dir[] = "/tmp/test_ban.XXXXXX", path[64], tmp[80], out[2048];
    struct cobj before, after;
    struct sb sb;
    double now = tim_real();
    FILE *f;

    AN(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/bans", dir);
    par.ban_persist = 3600;

    /* First life: two bans are written as they are added, a bad one is not. */
    AZ(ban_init());
    ck_assert_int_eq(ban_persist_open(path, &err), 0);
    ck_assert_str_eq(slurp(path), "");
    ck_assert_int_eq(ban_add("req.url ~ ^/a", &err), 0);
    ck_assert_int_eq(ban_add("obj.http.x == \"50%\nz\"", &err), 0);
    ck_assert_int_eq(ban_add("req.url ~ (", &err), -1);
    ck_assert_msg(strstr(slurp(path), " req.url ~ \"^/a\"\n") != NULL, "%s", slurp(path));
    ck_assert_msg(strstr(slurp(path), " obj.http.x == \"50%25%0Az\"\n") != NULL, "%s", slurp(path));
    ban_persist_close();
    ban_fini();

    /* An expired line and a broken one, appended by hand. */
    f = fopen(path, "a");
    AN(f);
    fprintf(f, "%.6f %.6f req.url == /gone\n", now - 7200, now - 3600);
    fprintf(f, "garbage\n");
    fclose(f);

    /* Second life: an object recovered from before the restart, one fetched after. */
    AZ(ban_init());
    before = obj(200, "HTTP/1.1 200 OK\r\n");
    after = obj(200, "HTTP/1.1 200 OK\r\n");
    before.fresh.t_origin = now - 60;
    after.fresh.t_origin = tim_real() + 1;
    ban_obj_new(&before);
    ban_obj_new(&after);
    ck_assert_int_eq(ban_persist_open(path, &err), 0);
    ck_assert_uint_eq(ban_count(), 3); /* the first, empty one and the two replayed */
    ck_assert(ban_check_obj(&before, KEY("h", "/a/1")));
    ck_assert(!ban_check_obj(&after, KEY("h", "/a/1")));
    sb_init(&sb, out, sizeof out);
    ban_list(&sb);
    ck_assert_msg(strstr(out, "obj.http.x == \"50%\nz\"") != NULL, "%s", out);
    /* Rewritten without the expired and the broken lines. */
    ck_assert_msg(strstr(slurp(path), "/gone") == NULL && strstr(slurp(path), "garbage") == NULL,
                  "%s", slurp(path));
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    ck_assert_int_eq(access(tmp, F_OK), -1);
    ban_obj_free(&before);
    ban_obj_free(&after);
    ban_persist_close();
    ban_fini();

    /* ban_persist 0: nothing read, nothing written. */
    par.ban_persist = 0;
    AZ(ban_init());
    ck_assert_int_eq(ban_persist_open(path, &err), 0);
    ck_assert_uint_eq(ban_count(), 1);
    ck_assert_int_eq(ban_add("req.url ~ ^/zz", &err), 0);
    ck_assert_msg(strstr(slurp(path), "zz") == NULL, "%s", slurp(path));
    ban_persist_close();
    ban_fini();
    unlink(path);
    rmdir(dir);
}
END_TEST

START_TEST(null_expr_is_a_bug)
{
    (void)ban_expr_parse(NULL, &err);
}
END_TEST

Suite *
ban_suite(void)
{
    Suite *s = suite_create("ban");
    TCase *tc = tcase_create("ban");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, parse_and_print);
    tcase_add_test(tc, parse_errors);
    tcase_add_test(tc, matching);
    tcase_add_test(tc, matching_marker_without_head);
    tcase_add_test(tc, matching_regex_limit);
    tcase_add_test(tc, ban_list_lazy);
    tcase_add_test(tc, ban_list_regex_limit);
    tcase_add_test(tc, tags);
    tcase_add_test(tc, ban_before);
    tcase_add_test(tc, ban_persist);
    tcase_add_test_raise_signal(tc, null_expr_is_a_bug, SIGABRT);
    suite_add_tcase(s, tc);
    return s;
}
