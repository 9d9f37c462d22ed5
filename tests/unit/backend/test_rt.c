/*
 * rt: routes by host (exact, wildcard, regex; case and port), path
 * prefix, path regex and extension (query strings, dotfiles, no
 * extension), first match wins, and the errors of a bad route.
 */
#include <string.h>

#include "unit.h"
#include "surogat/be.h"
#include "surogat/defs.h"
#include "surogat/dir.h"
#include "surogat/http.h"
#include "surogat/log.h"
#include "surogat/par.h"
#include "surogat/rt.h"
#include "surogat/sb.h"
#include "surogat/stat.h"

static char ebuf[512];
static struct sb err;
static struct be *be[3];
static struct dir *d[3]; /* the route targets: leaves of backends r0, r1, r2 */
static struct rt *rt;

static void
setup(void)
{
    struct be_conf c;
    static const char *const names[] = { "r0", "r1", "r2" };

    par_init();
    AZ(stat_init());
    log_set_level(LOG_ERR);
    AZ(be_init());
    AZ(be_start());
    sb_init(&err, ebuf, sizeof ebuf);
    memset(&c, 0, sizeof c);
    c.host = "127.0.0.1";
    c.port = "9";
    c.connect_timeout = c.first_byte_timeout = c.between_bytes_timeout = -1;
    for (unsigned i = 0; i < 3; i++) {
        c.name = names[i];
        AZ(be_get(&c, &be[i], &err));
        d[i] = dir_backend(be[i]);
    }
    rt = rt_new();
}

static void
teardown(void)
{
    rt_free(&rt);
    for (unsigned i = 0; i < 3; i++) {
        dir_free(&d[i]);
        be_release(&be[i]);
    }
    be_fini();
    stat_fini();
    par_fini();
}

/* The index of the matched target, -1 for none.  host NULL: no Host header. */
static int
m(const char *host, const char *url)
{
    struct txt h = { host, host != NULL ? strlen(host) : 0 };
    struct txt u = { url, strlen(url) };
    struct dir *got = rt_match(rt, host != NULL ? &h : NULL, &u);

    for (int i = 0; i < 3; i++)
        if (got == d[i])
            return (i);
    ck_assert_ptr_null(got);
    return (-1);
}

static void
add(struct rt_conf *c, int to)
{
    c->to = d[to];
    ck_assert_msg(rt_add(rt, c, &err) == 0, "%s", ebuf);
}

START_TEST(hosts)
{
    const char *exact[] = { "Example.COM", "other.org" };
    const char *wild[] = { "*.b.com" };
    const char *re[] = { "~^www[0-9]+\\." };
    struct rt_conf c;

    memset(&c, 0, sizeof c);
    c.hosts = exact;
    c.nhosts = 2;
    add(&c, 0);
    c.hosts = wild;
    c.nhosts = 1;
    add(&c, 1);
    c.hosts = re;
    add(&c, 2);

    ck_assert_int_eq(m("example.com", "/"), 0);
    ck_assert_int_eq(m("EXAMPLE.com:8080", "/x"), 0); /* case, port */
    ck_assert_int_eq(m("example.com.", "/"), 0);      /* the root's dot */
    ck_assert_int_eq(m("other.org", "/"), 0);
    ck_assert_int_eq(m("www.example.com", "/"), -1);
    ck_assert_int_eq(m("example.comx", "/"), -1);
    ck_assert_int_eq(m("a.b.com", "/"), 1);
    ck_assert_int_eq(m("x.a.B.com:81", "/"), 1); /* more than one label */
    ck_assert_int_eq(m("b.com", "/"), -1);       /* not the bare domain */
    ck_assert_int_eq(m("xb.com", "/"), -1);
    ck_assert_int_eq(m("www12.site.net", "/"), 2);
    ck_assert_int_eq(m("WWW3.site.net", "/"), 2); /* caseless */
    ck_assert_int_eq(m("www.site.net", "/"), -1);
    ck_assert_int_eq(m(NULL, "/"), -1); /* no Host: no host route */
    ck_assert_int_eq(m("", "/"), -1);
    ck_assert_int_eq(m(":80", "/"), -1);
}
END_TEST

START_TEST(ipv6_host_and_absolute_url)
{
    const char *h[] = { "[::1]" };
    struct rt_conf c;

    memset(&c, 0, sizeof c);
    c.hosts = h;
    c.nhosts = 1;
    c.prefix = "/s/";
    add(&c, 0);
    ck_assert_int_eq(m("[::1]:6081", "/s/a"), 0);
    ck_assert_int_eq(m("[::1]", "/s/a"), 0);
    ck_assert_int_eq(m("[::1", "/s/a"), -1);
    memset(&c, 0, sizeof c);
    c.prefix = "/static/";
    add(&c, 1);
    ck_assert_int_eq(m("h", "http://Example.com/static/x.css"), 1);
    ck_assert_int_eq(m("h", "http://example.com?/static/"), -1);
    ck_assert_int_eq(m("h", "*"), -1);
}
END_TEST

START_TEST(prefix_and_path)
{
    struct rt_conf c;

    memset(&c, 0, sizeof c);
    c.prefix = "/static/";
    add(&c, 0);
    memset(&c, 0, sizeof c);
    c.path = "^/api/v[0-9]+/";
    add(&c, 1);
    memset(&c, 0, sizeof c);
    c.path = "x=1$"; /* the regex sees the path only, never the query */
    add(&c, 2);

    ck_assert_int_eq(m("h", "/static/a.css"), 0);
    ck_assert_int_eq(m("h", "/static/"), 0);
    ck_assert_int_eq(m("h", "/static"), -1);
    ck_assert_int_eq(m("h", "/STATIC/a"), -1); /* paths are case-sensitive */
    ck_assert_int_eq(m("h", "/api/static/a"), -1);
    ck_assert_int_eq(m("h", "/x?/static/"), -1);
    ck_assert_int_eq(m("h", "/api/v2/users?id=3"), 1);
    ck_assert_int_eq(m(NULL, "/api/v2/"), 1); /* no host condition: any request */
    ck_assert_int_eq(m("h", "/api/vx/"), -1);
    ck_assert_int_eq(m("h", "/a?x=1"), -1);
    ck_assert_int_eq(m("h", "/ax=1"), 2);
    ck_assert_int_eq(m("h", ""), -1);
}
END_TEST

START_TEST(extensions)
{
    const char *ext[] = { "jpg", ".css", "GZ" };
    struct rt_conf c;

    memset(&c, 0, sizeof c);
    c.exts = ext;
    c.nexts = 3;
    add(&c, 0);

    ck_assert_int_eq(m("h", "/a/b.jpg"), 0);
    ck_assert_int_eq(m("h", "/a/b.JPG"), 0);
    ck_assert_int_eq(m("h", "/s.css?v=3"), 0);
    ck_assert_int_eq(m("h", "/s.css#top"), 0);
    ck_assert_int_eq(m("h", "/x.tar.gz"), 0);
    ck_assert_int_eq(m("h", "/a.php?f=x.jpg"), -1); /* the query is not the path */
    ck_assert_int_eq(m("h", "/d.jpg/file"), -1);    /* a directory's dot */
    ck_assert_int_eq(m("h", "/d.jpg/"), -1);
    ck_assert_int_eq(m("h", "/.jpg"), -1); /* a dotfile has no extension */
    ck_assert_int_eq(m("h", "/a/.css"), -1);
    ck_assert_int_eq(m("h", "/a/..css"), 0);
    ck_assert_int_eq(m("h", "/README"), -1);
    ck_assert_int_eq(m("h", "/a."), -1);
    ck_assert_int_eq(m("h", "/ajpg"), -1);
    ck_assert_int_eq(m("h", "/a.jpeg"), -1);
}
END_TEST

START_TEST(first_match_and_all_conditions)
{
    const char *h[] = { "shop.example.com" };
    const char *ext[] = { "png" };
    struct rt_conf c;

    /* Every condition of a route must hold. */
    memset(&c, 0, sizeof c);
    c.hosts = h;
    c.nhosts = 1;
    c.prefix = "/img/";
    c.exts = ext;
    c.nexts = 1;
    add(&c, 0);
    memset(&c, 0, sizeof c);
    c.prefix = "/img/";
    add(&c, 1);
    memset(&c, 0, sizeof c); /* catch-all */
    add(&c, 2);

    ck_assert_int_eq(m("shop.example.com", "/img/a.png"), 0);
    ck_assert_int_eq(m("shop.example.com", "/img/a.gif"), 1);
    ck_assert_int_eq(m("blog.example.com", "/img/a.png"), 1);
    ck_assert_int_eq(m("shop.example.com", "/a.png"), 2);
    ck_assert_int_eq(m(NULL, "/"), 2);
}
END_TEST

START_TEST(bad_routes)
{
    const char *h[1];
    const char *ext[1];
    struct rt_conf c;

    memset(&c, 0, sizeof c);
    c.to = d[0];
    c.path = "^/(unclosed";
    ck_assert_int_eq(rt_add(rt, &c, &err), -1);
    ck_assert_msg(strncmp(ebuf, "route: path regex '^/(unclosed' at offset", 41) == 0, "%s", ebuf);
    c.path = NULL;
    c.hosts = h;
    c.nhosts = 1;
    static const char *const bad_hosts[] = { "", "~", "~(", "a*.com", "*x.com", "*.", "*.a.*" };
    for (size_t i = 0; i < ARRAY_LEN(bad_hosts); i++) {
        h[0] = bad_hosts[i];
        sb_init(&err, ebuf, sizeof ebuf);
        ck_assert_msg(rt_add(rt, &c, &err) == -1, "host '%s' accepted", bad_hosts[i]);
        ck_assert_msg(ebuf[0] != '\0', "host '%s': no message", bad_hosts[i]);
    }
    c.nhosts = 0;
    c.exts = ext;
    c.nexts = 1;
    static const char *const bad_exts[] = { "", ".", "tar.gz", "a/b" };
    for (size_t i = 0; i < ARRAY_LEN(bad_exts); i++) {
        ext[0] = bad_exts[i];
        ck_assert_msg(rt_add(rt, &c, &err) == -1, "ext '%s' accepted", bad_exts[i]);
    }
    c.nexts = 0;
    c.prefix = "static/";
    ck_assert_int_eq(rt_add(rt, &c, &err), -1);
    c.prefix = NULL;
    c.to = NULL;
    ck_assert_int_eq(rt_add(rt, &c, &err), -1);
    /* Nothing half-added: the table still matches nothing. */
    ck_assert_int_eq(m("a.com", "/x.png"), -1);
}
END_TEST

Suite *
rt_suite(void)
{
    Suite *s = suite_create("rt");
    TCase *tc = tcase_create("rt");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, hosts);
    tcase_add_test(tc, ipv6_host_and_absolute_url);
    tcase_add_test(tc, prefix_and_path);
    tcase_add_test(tc, extensions);
    tcase_add_test(tc, first_match_and_all_conditions);
    tcase_add_test(tc, bad_routes);
    suite_add_tcase(s, tc);
    return s;
}
