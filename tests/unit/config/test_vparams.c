/*
 * vparams: Varnish's parameter names (tbl/vparams.h), its value formats,
 * the feature parameter (tbl/features.h) and param.show's forms.
 */
#include <stdio.h>
#include <string.h>

#include "unit.h"
#include "surogat/defs.h"
#include "surogat/par.h"
#include "surogat/sb.h"

static const struct {
    const char *vname, *name;
} vrows[] = {
#define VPARAM(v, s) { #v, #s },
#include "surogat/tbl/vparams.h"
};

static const char *const params[] = {
#define PARAM(name, ...) #name,
#include "surogat/tbl/params.h"
};

static const char *const features[] = {
#define FEATURE(name, state, why) #name,
#include "surogat/tbl/features.h"
};

static char ebuf[1024], obuf[65536];
static struct sb err, out;

static void
setup(void)
{
    par_init();
    sb_init(&err, ebuf, sizeof ebuf);
    sb_init(&out, obuf, sizeof obuf);
}

static void
teardown(void)
{
    par_fini();
}

static bool
is_param(const char *name)
{
    for (size_t i = 0; i < ARRAY_LEN(params); i++)
        if (strcmp(params[i], name) == 0)
            return (true);
    return (false);
}

static const char *
get(const char *name)
{
    static char buf[1024];
    struct sb sb;

    sb_init(&sb, buf, sizeof buf);
    ck_assert_msg(par_get(name, &sb) == 0, "par_get(%s)", name);
    return (buf);
}

static void
set_ok(const char *name, const char *value)
{
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_msg(par_set(name, value, &err) == 0, "par_set(%s, %s): %s", name, value, ebuf);
}

static void
set_fails(const char *name, const char *value, const char *why)
{
    sb_init(&err, ebuf, sizeof ebuf);
    ck_assert_msg(par_set(name, value, &err) == -1, "par_set(%s, %s) accepted", name, value);
    ck_assert_msg(strstr(ebuf, why) != NULL, "par_set(%s, %s): '%s' lacks '%s'", name, value, ebuf,
                  why);
}

/* Each row: its surogat name is a parameter; an alias is not one (no shadowing). */
START_TEST(rows_resolve)
{
    const char *v = vrows[_i].vname, *s = vrows[_i].name;

    ck_assert_msg(is_param(s), "%s names no parameter", s);
    ck_assert_msg(strcmp(v, s) == 0 || !is_param(v), "alias %s shadows a parameter", v);
    ck_assert_str_eq(par_name(v), s);
    ck_assert_str_eq(par_name(s), s);
    ck_assert_int_eq(par_flags(v), par_flags(s));
    for (size_t j = 0; j < ARRAY_LEN(vrows); j++) {
        ck_assert_msg(j == (size_t)_i || strcmp(vrows[j].vname, v) != 0, "%s twice", v);
        ck_assert_msg(j == (size_t)_i || strcmp(vrows[j].name, s) != 0, "%s named twice", s);
    }
}
END_TEST

/* Setting, checking, getting and resetting by the alias act on the parameter. */
START_TEST(alias_acts_on_the_parameter)
{
    set_ok("first_byte_timeout", "12.5");
    ck_assert(par.backend_first_byte_timeout > 12.5 - 1e-9 &&
              par.backend_first_byte_timeout < 12.5 + 1e-9);
    ck_assert_str_eq(get("first_byte_timeout"), "12.5");
    ck_assert_str_eq(get("backend_first_byte_timeout"), "12.5");
    set_ok("connect_timeout", "2s");
    ck_assert_str_eq(get("backend_connect_timeout"), "2");
    set_ok("between_bytes_timeout", "1m");
    ck_assert_str_eq(get("backend_between_bytes_timeout"), "60");
    /* The reason speaks of the name the caller wrote. */
    set_fails("first_byte_timeout", "soon", "first_byte_timeout: 'soon'");
    set_fails("connect_timeout", "0", "connect_timeout: 0 is below the minimum");
    ck_assert_int_eq(par_reset("first_byte_timeout", &err), 0);
    ck_assert_str_eq(get("backend_first_byte_timeout"), "60");
    ck_assert_int_eq(par_check("first_byte_timeout", "1.250", &out, &err), 0);
    ck_assert_str_eq(obuf, "1.25");
    ck_assert_str_eq(get("backend_first_byte_timeout"), "60"); /* checked, not set */
    ck_assert_ptr_null(par_name("no_such_alias"));
    ck_assert_int_eq(par_flags("no_such_alias"), -1);
    ck_assert_int_eq(par_reset("no_such_alias", &err), -1);
}
END_TEST

/* Values as varnishadm param.show prints them, and as Varnish users write them. */
START_TEST(varnish_value_formats)
{
    set_ok("default_ttl", "120.000");
    ck_assert_str_eq(get("default_ttl"), "120");
    set_ok("default_grace", "10.000");
    set_ok("timeout_idle", "5.000");
    set_ok("http_req_size", "32k");
    ck_assert_str_eq(get("http_req_size"), "32768");
    set_ok("http_resp_size", "0.25k");
    ck_assert_str_eq(get("http_resp_size"), "256");
    set_ok("http_req_hdr_len", "40b");
    set_ok("http_gzip_support", "disable");
    ck_assert(!par.http_gzip_support);
    set_ok("http_gzip_support", "enable");
    ck_assert(par.http_gzip_support);
    set_ok("thread_pool_min", "10");
    set_ok("gzip_level", "9");
    /* Varnish allows gzip_level 0; surogat's range says why not. */
    set_fails("gzip_level", "0", "below the minimum 1");
}
END_TEST

START_TEST(feature_values)
{
    const char *fixed = "+http2,+https_scheme,+esi_ignore_other_elements,+esi_include_onerror,"
                        "+wait_silo,+validate_headers,+busy_stats_rate";

    ck_assert_str_eq(get("feature"), fixed);
    set_ok("feature", "default");
    set_ok("feature", "+validate_headers");
    set_ok("feature", "+http2,-esi_remove_bom");
    set_ok("feature", "none,+http2,+https_scheme,+validate_headers,+wait_silo,+busy_stats_rate,"
                      "+esi_ignore_other_elements,+esi_include_onerror");
    set_ok("feature", "-http2,+http2");
    ck_assert_str_eq(get("feature"), fixed);
    /* The ESI ones Varnish leaves to the operator are choices here too. */
    set_ok("feature", "+esi_disable_xml_check,-esi_include_onerror");
    ck_assert(par.feature & (1u << PAR_FEAT_esi_disable_xml_check));
    ck_assert(!(par.feature & (1u << PAR_FEAT_esi_include_onerror)));
    set_ok("feature", "default");
    set_fails("feature", "-http2", "-http2 is not possible: HTTP/2 is chosen per listen");
    set_fails("feature", "-esi_ignore_other_elements", "passed through as text");
    set_fails("feature", "-validate_headers", "-validate_headers is not possible");
    set_fails("feature", "none", "is not possible");
    set_fails("feature", "+no_such_thing", "unknown feature 'no_such_thing'");
    set_fails("feature", "http2", "expected +NAME, -NAME, default or none");
    ck_assert_str_eq(get("feature"), fixed);
    /* Every feature of the table is known and shown by param.show feature. */
    ck_assert_int_eq(par_show("feature", PAR_SHOW_LONG, &out), 0);
    for (size_t i = 0; i < ARRAY_LEN(features); i++) {
        char plus[64], minus[64];
        snprintf(plus, sizeof plus, "+%s", features[i]);
        snprintf(minus, sizeof minus, "-%s", features[i]);
        sb_init(&err, ebuf, sizeof ebuf);
        ck_assert_msg(par_check("feature", plus, NULL, &err) == 0 ||
                          strstr(ebuf, "is not possible") != NULL,
                      "%s: %s", plus, ebuf);
        sb_init(&err, ebuf, sizeof ebuf);
        ck_assert_msg(par_check("feature", minus, NULL, &err) == 0 ||
                          strstr(ebuf, "is not possible") != NULL,
                      "%s: %s", minus, ebuf);
        ck_assert_msg(strstr(obuf, features[i]) != NULL, "%s not shown", features[i]);
    }
}
END_TEST

START_TEST(show_forms)
{
    const char *p, *want;

    /* One parameter, long: varnishadm's lines. */
    set_ok("default_ttl", "60");
    ck_assert_int_eq(par_show("default_ttl", PAR_SHOW_LONG, &out), 0);
    want = "default_ttl\n"
           "        Value is: 60 [seconds]\n"
           "        Default is: 0\n"
           "        Minimum is: 0s\n"
           "        Flags: runtime\n"
           "        Varnish name: the same\n"
           "\n"
           "        Freshness lifetime";
    ck_assert_msg(strncmp(obuf, want, strlen(want)) == 0, "%s", obuf);
    for (p = obuf; (p = strchr(p, '\n')) != NULL && p[1] != '\0'; p++)
        ck_assert_msg(strcspn(p + 1, "\n") <= 8 + 64, "line too long: %.80s", p + 1);
    /* An alias shows its parameter, under the parameter's name. */
    sb_init(&out, obuf, sizeof obuf);
    ck_assert_int_eq(par_show("first_byte_timeout", PAR_SHOW_LONG, &out), 0);
    ck_assert_msg(strstr(obuf, "backend_first_byte_timeout\n        Value is: 60 [seconds] "
                               "(default)\n") == obuf,
                  "%s", obuf);
    ck_assert_ptr_nonnull(strstr(obuf, "        Varnish name: first_byte_timeout\n"));
    ck_assert_ptr_nonnull(strstr(obuf, "        Minimum is: 1ms\n"));
    sb_init(&out, obuf, sizeof obuf);
    ck_assert_int_eq(par_show("tls_ciphers", PAR_SHOW_LONG, &out), 0);
    ck_assert_ptr_nonnull(strstr(obuf, "        Flags: reload\n"));
    sb_init(&out, obuf, sizeof obuf);
    ck_assert_int_eq(par_show("nope", PAR_SHOW_LONG, &out), -1);
    ck_assert_uint_eq(out.len, 0);
    /* Short: one line; "changed": only those off their default. */
    ck_assert_int_eq(par_show("xff", PAR_SHOW_SHORT, &out), 0);
    ck_assert_str_eq(obuf, "xff                           on [bool] (default)\n");
    set_ok("xff", "off");
    set_ok("http_req_size", "64k");
    sb_init(&out, obuf, sizeof obuf);
    par_show_all(PAR_SHOW_SHORT, true, &out);
    /* In table order. */
    ck_assert_str_eq(obuf, "http_req_size                 65536 [bytes]\n"
                           "xff                           off [bool]\n"
                           "default_ttl                   60 [seconds]\n");
    sb_init(&out, obuf, sizeof obuf);
    par_show_all(PAR_SHOW_LONG, true, &out);
    ck_assert_ptr_nonnull(
        strstr(obuf, "xff\n        Value is: off [bool]\n        Default is: on\n"));
    ck_assert_ptr_null(strstr(obuf, "via\n"));
}
END_TEST

/* A string parameter of any length is shown whole, and compared whole with its default. */
START_TEST(show_long_values)
{
    static char acl[8192];
    size_t n = 0;

    for (unsigned i = 0; n + 20 < sizeof acl - 1; i++)
        n += (size_t)snprintf(acl + n, sizeof acl - n, "%s10.%u.%u.0/24", i ? "," : "",
                              i / 250, i % 250);
    set_ok("purge_acl", acl);
    ck_assert_int_eq(par_show("purge_acl", PAR_SHOW_LONG, &out), 0);
    ck_assert_ptr_nonnull(strstr(obuf, acl));
    ck_assert_ptr_nonnull(strstr(obuf, "        Default is: 127.0.0.1,::1\n"));
    sb_init(&out, obuf, sizeof obuf);
    par_show_all(PAR_SHOW_SHORT, true, &out);
    ck_assert_ptr_nonnull(strstr(obuf, acl));
    sb_init(&out, obuf, sizeof obuf);
    ck_assert_int_eq(par_check("purge_acl", acl, &out, &err), 0);
    ck_assert_str_eq(obuf, acl);
}
END_TEST

START_TEST(doc_lists_varnish_names)
{
    static char buf[1 << 20];
    struct sb sb;

    sb_init(&sb, buf, sizeof buf);
    par_dump_doc(&sb);
    ck_assert(sb_ok(&sb));
    ck_assert_ptr_nonnull(strstr(buf, "backend_first_byte_timeout\n\tType: seconds\n"));
    ck_assert_ptr_nonnull(strstr(buf, "\tFlags: runtime\n\tVarnish: first_byte_timeout\n"));
    ck_assert_ptr_nonnull(strstr(buf, "\tFlags: reload\n"));
    for (size_t i = 0; i < ARRAY_LEN(vrows); i++) {
        char line[128];
        snprintf(line, sizeof line, "\tVarnish: %s\n", vrows[i].vname);
        ck_assert_msg(strstr(buf, line) != NULL, "%s not in -x params", vrows[i].vname);
    }
}
END_TEST

Suite *
vparams_suite(void)
{
    Suite *s = suite_create("vparams");
    TCase *tc = tcase_create("vparams");

    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_loop_test(tc, rows_resolve, 0, (int)ARRAY_LEN(vrows));
    tcase_add_test(tc, alias_acts_on_the_parameter);
    tcase_add_test(tc, varnish_value_formats);
    tcase_add_test(tc, feature_values);
    tcase_add_test(tc, show_forms);
    tcase_add_test(tc, show_long_values);
    tcase_add_test(tc, doc_lists_varnish_names);
    suite_add_tcase(s, tc);
    return s;
}
