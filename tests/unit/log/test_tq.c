/*
 * tq: the log query language.  Queries against a subject of fixed field
 * values, table-driven: operators, precedence, several values per field,
 * absent fields, numbers and strings, patterns; and bad queries refused
 * with the offset of the fault.
 */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "unit.h"
#include "surogat/sb.h"
#include "surogat/tq.h"

/* A transaction: field, header name (or NULL), value. */
static const struct {
    enum tq_field f;
    const char *h, *v;
} subj[] = {
    { TQ_F_REQ_URL, NULL, "/news/today?x=1" },
    { TQ_F_REQ_METHOD, NULL, "GET" },
    { TQ_F_REQ_HEADER, "Host", "example.test" },
    { TQ_F_REQ_HEADER, "Accept", "text/html" },
    { TQ_F_REQ_HEADER, "Accept", "image/webp" },
    { TQ_F_RESP_STATUS, NULL, "503" },
    { TQ_F_RESP_HEADER, "Cache-Status", "surogat; fwd=uri-miss; detail=set-cookie" },
    { TQ_F_BERESP_STATUS, NULL, "500" },
    { TQ_F_BERESP_STATUS, NULL, "503" }, /* a retry */
    { TQ_F_BACKEND, NULL, "api" },
    { TQ_F_CLIENT, NULL, "192.0.2.7" },
    { TQ_F_DURATION, NULL, "0.612000" },
    { TQ_F_CACHE, NULL, "MISS" },
};

static bool
get(void *priv, enum tq_field f, const char *hname, unsigned i, struct tq_val *v)
{
    (void)priv;
    for (size_t k = 0; k < sizeof subj / sizeof subj[0]; k++) {
        if (subj[k].f != f || (hname != NULL && strcasecmp(hname, subj[k].h) != 0))
            continue;
        if (i-- > 0)
            continue;
        *v = (struct tq_val){ subj[k].v, strlen(subj[k].v) };
        return (true);
    }
    return (false);
}

START_TEST(matches)
{
    static const struct {
        const char *q;
        bool want;
    } t[] = {
        { "ReqURL ~ \"^/news\"", true },
        { "ReqURL ~ \"^/sport\"", false },
        { "ReqURL !~ \"^/sport\"", true },
        { "ReqURL == \"/news/today?x=1\"", true },
        { "requrl == \"/news/today?x=1\"", true }, /* field names in any case */
        { "ReqURL ~ \"^/news\" && RespStatus >= 500", true },
        { "ReqURL ~ \"^/news\" && RespStatus < 500", false },
        { "RespStatus == 503 && RespStatus != 200 && RespStatus > 502 && RespStatus <= 503", true },
        { "RespStatus == \"503\"", true },
        { "RespStatus >= 5e2", true },
        /* several values: one passing is enough */
        { "BerespStatus == 503", true },
        { "BerespStatus == 500", true },
        { "BerespStatus == 200", false },
        { "ReqHeader:Accept ~ \"webp\"", true },
        { "ReqHeader:accept == \"text/html\"", true },
        { "ReqHeader:Host", true },
        { "ReqHeader:Cookie", false },
        { "!ReqHeader:Cookie", true },
        /* absent: every comparison is false, != included */
        { "ReqHeader:Cookie != \"a\"", false },
        { "TTL > 0 || TTL <= 0", false },
        { "!(TTL > 0)", true },
        /* precedence: ! > && > || */
        { "RespStatus == 200 || Cache == \"MISS\" && Backend == \"api\"", true },
        { "(RespStatus == 200 || Cache == \"MISS\") && Backend == \"web\"", false },
        { "RespStatus == 200 || Cache == \"MISS\" && Backend == \"web\"", false },
        { "!RespStatus == 200", true }, /* ! applies to the test */
        { "!!Backend", true },
        { "Cache == \"miss\"", true },   /* outcome names in any case */
        { "Backend == \"API\"", false }, /* other strings exactly */
        { "Duration > 0.5 && Duration < 1", true },
        { "Client == \"192.0.2.7\" && Client ~ \"^192\\\\.0\\\\.2\\\\.\"", true },
        { "RespHeader:Cache-Status ~ \"detail=set-cookie\"", true },
        { "ReqMethod == \"GET\" &&(Backend==\"api\")", true },
        { " \t( ( ReqMethod == \"POST\" ) ) || ReqMethod == \"GET\" ", true },
        { "ReqURL == \"/news/today?x=\\\"\"", false },
        { "ReqURL ~ \"x=[0-9]$\"", true },
    };
    char err[256];
    struct sb sb;
    struct tq *q;
    size_t pos;

    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        sb_init(&sb, err, sizeof err);
        q = tq_compile(t[i].q, NULL, &sb, &pos);
        ck_assert_msg(q != NULL, "[%zu] %s: %s at %zu", i, t[i].q, err, pos);
        ck_assert_msg(tq_match(q, get, NULL) == t[i].want, "[%zu] %s", i, t[i].q);
        tq_free(&q);
        ck_assert_ptr_null(q);
    }
}
END_TEST

START_TEST(refused_with_the_place)
{
    static const struct {
        const char *q;
        size_t pos;
        const char *msg;
    } t[] = {
        { "", 0, "expected a field name" },
        { "ReqURL ~", 8, "expected a \"string\" or a number" },
        { "ReqURL ~ /news", 9, "expected a \"string\"" },
        { "ReqURL ~ 5", 9, "~ and !~ take a \"pattern\"" },
        { "ReqUrl ~ \"(\"", 11, "bad pattern" },
        { "Status == 200", 0, "unknown field" },
        { "RespStatus > \"5xx\"", 13, "take a number" },
        { "RespStatus == 200 &&", 20, "expected a field name" },
        { "RespStatus == 200 & Cache", 18, "expected && or ||" },
        { "(RespStatus == 200", 0, "a ( without its )" },
        { "RespStatus == 200)", 17, "a ) without its (" },
        { "ReqHeader == \"x\"", 9, "a header field needs its name" },
        { "ReqHeader: == \"x\"", 10, "expected a header name" },
        { "ReqURL:x", 6, "only ReqHeader and RespHeader" },
        { "ReqURL == \"abc", 10, "a string without its closing quote" },
        { "ReqURL == \"a\\nb\"", 12, "only \\\" and \\\\ are escapes" },
        { "RespStatus == 20x", 14, "not a number" },
        { "RespStatus == 0x10", 14, "not a number" },
        { "RespStatus === 200", 13, "expected a \"string\" or a number" },
    };
    char err[256];
    struct sb sb;
    size_t pos;

    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        sb_init(&sb, err, sizeof err);
        pos = 9999;
        ck_assert_msg(tq_compile(t[i].q, NULL, &sb, &pos) == NULL, "[%zu] %s", i, t[i].q);
        ck_assert_msg(strstr(err, t[i].msg) != NULL, "[%zu] %s: %s", i, t[i].q, err);
        ck_assert_msg(pos == t[i].pos, "[%zu] %s: at %zu, want %zu (%s)", i, t[i].q, pos, t[i].pos,
                      err);
    }
}
END_TEST

START_TEST(bounded_nesting)
{
    char q[4096], err[256];
    struct sb sb;
    struct tq *tq;
    size_t pos, n = 0;

    for (int i = 0; i < 60; i++)
        q[n++] = '(';
    n += (size_t)snprintf(q + n, sizeof q - n, "Backend");
    for (int i = 0; i < 60; i++)
        q[n++] = ')';
    q[n] = '\0';
    sb_init(&sb, err, sizeof err);
    tq = tq_compile(q, NULL, &sb, &pos);
    ck_assert_msg(tq != NULL, "%s", err);
    ck_assert(tq_match(tq, get, NULL));
    tq_free(&tq);
    memset(q, '!', 3000);
    strcpy(q + 3000, "Backend");
    sb_init(&sb, err, sizeof err);
    ck_assert_ptr_null(tq_compile(q, NULL, &sb, &pos));
    ck_assert_ptr_nonnull(strstr(err, "nested too deeply"));
    /* A long flat chain is no nesting, but the node count is bounded. */
    n = 0;
    for (int i = 0; i < 400; i++)
        n += (size_t)snprintf(q + n, sizeof q - n, "%sBackend", i > 0 ? "||" : "");
    sb_init(&sb, err, sizeof err);
    tq = tq_compile(q, NULL, &sb, &pos);
    ck_assert_msg(tq != NULL, "%s", err);
    tq_free(&tq);
}
END_TEST

static const char *
only_url(enum tq_field f, const char *hname)
{
    (void)hname;
    return (f == TQ_F_REQ_URL ? NULL : "not here");
}

START_TEST(fields_checked_where_the_query_runs)
{
    char err[256];
    struct sb sb;
    struct tq *q;
    size_t pos;

    sb_init(&sb, err, sizeof err);
    q = tq_compile("ReqURL ~ \"a\"", only_url, &sb, &pos);
    ck_assert_ptr_nonnull(q);
    tq_free(&q);
    sb_init(&sb, err, sizeof err);
    ck_assert_ptr_null(tq_compile("ReqURL ~ \"a\" || TTL > 1", only_url, &sb, &pos));
    ck_assert_str_eq(err, "not here");
    ck_assert_uint_eq(pos, 16);
    ck_assert_str_eq(tq_field_name(TQ_F_BERESP_STATUS), "BerespStatus");
    ck_assert_ptr_null(tq_field_name(TQ_F__N));
    tq_free(&q); /* NULL is fine */
}
END_TEST

Suite *
tq_suite(void)
{
    Suite *s = suite_create("tq");
    TCase *tc = tcase_create("tq");

    tcase_add_test(tc, matches);
    tcase_add_test(tc, refused_with_the_place);
    tcase_add_test(tc, bounded_nesting);
    tcase_add_test(tc, fields_checked_where_the_query_runs);
    suite_add_tcase(s, tc);
    return s;
}
