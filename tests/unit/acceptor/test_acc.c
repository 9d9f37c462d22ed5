/*
 * acc: parsing of -a listen specs (addresses and the tls options), and
 * the certificate name matching SNI selection relies on.  No socket is
 * bound and no file is read.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "unit.h"
#include "surogat/acc.h"
#include "surogat/sb.h"
#include "surogat/tls.h"

static char ebuf[1024];
static struct sb err;

static int
parse(const char *spec, struct acc_spec *as)
{
    sb_init(&err, ebuf, sizeof ebuf);
    return (acc_spec_parse(spec, NULL, as, &err));
}

START_TEST(plain_addresses)
{
    static const struct {
        const char *spec, *host, *port;
    } v[] = {
        { "127.0.0.1:8080", "127.0.0.1", "8080" },
        { "[::1]:80", "::1", "80" },
        { ":443", "", "443" },
        { "localhost:0", "localhost", "0" },
    };
    struct acc_spec as;

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        ck_assert_msg(parse(v[i].spec, &as) == 0, "%s: %s", v[i].spec, ebuf);
        ck_assert_str_eq(as.host, v[i].host);
        ck_assert_str_eq(as.port, v[i].port);
        ck_assert(!as.tls);
        ck_assert_uint_eq(as.tls_conf.ncert, 0);
        acc_spec_clear(&as);
    }
}
END_TEST

START_TEST(tls_pairs)
{
    struct acc_spec as;
    char cwd[4096], want[4200];

    ck_assert_int_eq(parse("[::1]:8443,tls,cert=/c/a.pem,key=/c/a.key,ocsp=/c/a.der,"
                           "cert=b.pem,key=b.key",
                           &as),
                     0);
    ck_assert(as.tls);
    ck_assert_str_eq(as.host, "::1");
    ck_assert_str_eq(as.port, "8443");
    ck_assert_uint_eq(as.tls_conf.ncert, 2);
    ck_assert_str_eq(as.tls_conf.c[0].cert, "/c/a.pem");
    ck_assert_str_eq(as.tls_conf.c[0].key, "/c/a.key");
    ck_assert_str_eq(as.tls_conf.c[0].ocsp, "/c/a.der");
    ck_assert_ptr_null(as.tls_conf.c[1].ocsp);
    /* Relative paths are made absolute now: SIGHUP reloads them after chdir(-n). */
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof cwd));
    snprintf(want, sizeof want, "%s/b.pem", cwd);
    ck_assert_str_eq(as.tls_conf.c[1].cert, want);
    snprintf(want, sizeof want, "%s/b.key", cwd);
    ck_assert_str_eq(as.tls_conf.c[1].key, want);
    acc_spec_clear(&as);
    ck_assert_uint_eq(as.tls_conf.ncert, 0);
}
END_TEST

START_TEST(bad_specs)
{
    static const struct {
        const char *spec, *says;
    } v[] = {
        { "8080", "expected HOST:PORT" },
        { "1.2.3.4:99999", "not a port number" },
        { ":443,tls", "tls needs cert=FILE,key=FILE" },
        { ":443,tls,cert=a.pem", "has no key=" },
        { ":443,tls,cert=a.pem,cert=b.pem,key=b.key", "has no key=" },
        { ":443,tls,key=a.key", "key= before any cert=" },
        { ":443,tls,cert=a.pem,key=a.key,key=b.key", "two key=" },
        { ":443,tls,cert=a.pem,key=a.key,ocsp=x,ocsp=y", "two ocsp=" },
        { ":443,tls,cert=,key=a.key", "cert= needs a file name" },
        { ":443,cert=a.pem,key=a.key", "cert= without tls" },
        { ":443,tls,cert=a.pem,key=a.key,http2", "unknown option 'http2'" },
        { ":443,tls,cert=a.pem,key=a.key,foo=bar", "unknown option 'foo'" },
        { ":80,PROXY,mode=0660", "mode= is for a Unix socket" },
        { "/run/x.sock,mode=0999", "not an octal mode" },
        { "/run/x.sock,mode=", "not an octal mode" },
        { "/run/x.sock,user=no-such-user-here", "no user 'no-such-user-here'" },
        { "/run/x.sock,group=no-such-group-here", "no group" },
        { "/run/x.sock,user=", "user= needs a name" },
        { "run/x.sock", "expected HOST:PORT" },
        { "/run/a-path-longer-than-a-sockaddr_un-can-hold/"
          ".........................................."
          "......................................sock",
          "at most 107 bytes" },
    };
    struct acc_spec as;

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        ck_assert_msg(parse(v[i].spec, &as) == -1, "%s accepted", v[i].spec);
        ck_assert_msg(strstr(ebuf, v[i].says) != NULL, "%s: '%s' lacks '%s'", v[i].spec, ebuf,
                      v[i].says);
        ck_assert_msg(strncmp(ebuf, "-a ", 3) == 0, "%s: '%s'", v[i].spec, ebuf);
        acc_spec_clear(&as);
    }
}
END_TEST

START_TEST(proxy_and_unix)
{
    struct acc_spec as;

    ck_assert_msg(parse(":8443,PROXY", &as) == 0, "%s", ebuf);
    ck_assert(as.proxy && !as.tls);
    ck_assert_str_eq(as.port, "8443");
    acc_spec_clear(&as);
    ck_assert_msg(parse("127.0.0.1:8443,proxy,tls,cert=/c,key=/k", &as) == 0, "%s", ebuf);
    ck_assert(as.proxy && as.tls);
    acc_spec_clear(&as);
    ck_assert_msg(parse("/run/surogat.sock,mode=0660,user=0,group=root,PROXY", &as) == 0, "%s",
                  ebuf);
    ck_assert_str_eq(as.path, "/run/surogat.sock");
    ck_assert_str_eq(as.host, "");
    ck_assert(as.proxy && as.has_mode && as.has_uid && as.has_gid);
    ck_assert_uint_eq(as.mode, 0660);
    ck_assert_uint_eq(as.uid, 0);
    ck_assert_uint_eq(as.gid, 0);
    acc_spec_clear(&as);
    ck_assert_msg(parse("/run/surogat.sock", &as) == 0, "%s", ebuf);
    ck_assert(!as.has_mode && !as.has_uid && !as.proxy);
    acc_spec_clear(&as);
}
END_TEST

/* Unix-socket listeners: created with their mode, stale sockets replaced, nothing else. */
START_TEST(unix_listen)
{
    char dir[] = "/tmp/test_acc_XXXXXX", path[128], spec[160], other[128];
    struct sockaddr_un sun = { .sun_family = AF_UNIX };
    struct stat st;
    int fd;

    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/s.sock", dir);
    snprintf(spec, sizeof spec, "%s,mode=0640", path);
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_msg(acc_listen(spec, NULL, &err) == 0, "%s", ebuf);
    ck_assert_int_eq(lstat(path, &st), 0);
    ck_assert(S_ISSOCK(st.st_mode));
    ck_assert_uint_eq(st.st_mode & 0777, 0640);
    /* a second daemon on a live socket: refused, the file left alone */
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_int_eq(acc_listen(spec, NULL, &err), -1);
    ck_assert_msg(strstr(ebuf, "another process listens") != NULL, "%s", ebuf);
    acc_stop(); /* unlinks what it made */
    ck_assert_int_eq(lstat(path, &st), -1);

    /* a stale socket file (its process gone) is replaced */
    fd = socket(AF_UNIX, SOCK_STREAM, 0);
    strcpy(sun.sun_path, path);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sun, sizeof sun), 0);
    close(fd);
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_msg(acc_listen(path, NULL, &err) == 0, "%s", ebuf);
    acc_stop();

    /* a symbolic link is never followed, a file never removed */
    snprintf(other, sizeof other, "%s/target", dir);
    fd = open(other, O_CREAT | O_WRONLY, 0600);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_int_eq(symlink(other, path), 0);
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_int_eq(acc_listen(path, NULL, &err), -1);
    ck_assert_msg(strstr(ebuf, "a symbolic link") != NULL, "%s", ebuf);
    ck_assert_int_eq(lstat(path, &st), 0);
    ck_assert(S_ISLNK(st.st_mode));
    ck_assert_int_eq(unlink(path), 0);
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_int_eq(acc_listen(other, NULL, &err), -1);
    ck_assert_msg(strstr(ebuf, "not a socket") != NULL, "%s", ebuf);
    ck_assert_int_eq(stat(other, &st), 0);
    ck_assert_int_eq(unlink(other), 0);
    ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

START_TEST(too_many_certs)
{
    char spec[8192];
    struct acc_spec as;
    size_t n;

    n = (size_t)snprintf(spec, sizeof spec, ":443,tls");
    for (int i = 0; i <= TLS_MAX_CERTS; i++)
        n += (size_t)snprintf(spec + n, sizeof spec - n, ",cert=/c%d,key=/k%d", i, i);
    ck_assert_int_eq(parse(spec, &as), -1);
    ck_assert_ptr_nonnull(strstr(ebuf, "more than"));
    acc_spec_clear(&as);
}
END_TEST

START_TEST(name_match)
{
    static const struct {
        const char *pattern, *host;
        bool want;
    } v[] = {
        { "a.test", "a.test", true },        { "a.test", "A.TEST", true },
        { "a.test", "b.test", false },       { "*.a.test", "x.a.test", true },
        { "*.a.test", "X.A.test", true },    { "*.a.test", "a.test", false },
        { "*.a.test", "x.y.a.test", false }, { "*.a.test", ".a.test", false },
        { "*.a.test", "xa.test", false },    { "a.test", "a.test.", false },
    };

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        ck_assert_msg(tls_name_match(v[i].pattern, v[i].host) == v[i].want, "%s vs %s",
                      v[i].pattern, v[i].host);
}
END_TEST

Suite *
acc_suite(void)
{
    Suite *s = suite_create("acc");
    TCase *tc = tcase_create("spec");

    tcase_add_test(tc, plain_addresses);
    tcase_add_test(tc, tls_pairs);
    tcase_add_test(tc, bad_specs);
    tcase_add_test(tc, too_many_certs);
    tcase_add_test(tc, proxy_and_unix);
    tcase_add_test(tc, unix_listen);
    tcase_add_test(tc, name_match);
    suite_add_tcase(s, tc);
    return s;
}
