/*
 * sf: RFC 8941 Dictionaries -- every bare item type with its limits, the
 * parameters and inner lists, the Dictionary's own rules (lower-case keys,
 * commas, OWS, the last value of a repeated key), field lines joined with
 * ", ", and the strictness that makes any error fail the whole field.
 */
#include <stdio.h>
#include <string.h>

#include "unit.h"
#include "surogat/sf.h"

#define MAXM 16

static struct sf_member m[MAXM];
static unsigned n;

static struct txt
T(const char *s) {
    return (struct txt){ s, strlen(s) };
}

static enum sf_status
parse1(const char *s)
{
    struct txt v = T(s);

    return (sf_dict_parse(&v, 1, m, MAXM, &n));
}

static bool
txt_is(const struct txt *t, const char *want)
{
    return (t->len == strlen(want) && memcmp(t->b, want, t->len) == 0);
}

/* One member "k=<item>": the item's type, number and text. */
START_TEST(bare_items)
{
    static const struct {
        const char *in;
        enum sf_type type;
        int64_t num;
        const char *str; /* NULL: not checked */
        bool escaped;
    } v[] = {
        { "k=0", SF_INTEGER, 0, NULL, false },
        { "k=42", SF_INTEGER, 42, NULL, false },
        { "k=-42", SF_INTEGER, -42, NULL, false },
        { "k=-0", SF_INTEGER, 0, NULL, false },
        { "k=007", SF_INTEGER, 7, NULL, false },
        { "k=999999999999999", SF_INTEGER, SF_INTEGER_MAX, NULL, false },
        { "k=-999999999999999", SF_INTEGER, -SF_INTEGER_MAX, NULL, false },
        { "k=1.5", SF_DECIMAL, 1500, NULL, false },
        { "k=1.25", SF_DECIMAL, 1250, NULL, false },
        { "k=-0.001", SF_DECIMAL, -1, NULL, false },
        { "k=123456789012.123", SF_DECIMAL, INT64_C(123456789012123), NULL, false },
        { "k=0.0", SF_DECIMAL, 0, NULL, false },
        { "k=\"\"", SF_STRING, 0, "", false },
        { "k=\"hello world\"", SF_STRING, 0, "hello world", false },
        { "k=\"a\\\"b\\\\c\"", SF_STRING, 0, "a\\\"b\\\\c", true },
        { "k=\"~ !#\"", SF_STRING, 0, "~ !#", false },
        { "k=tok", SF_TOKEN, 0, "tok", false },
        { "k=*", SF_TOKEN, 0, "*", false },
        { "k=Text/HTML", SF_TOKEN, 0, "Text/HTML", false },
        { "k=a:b/c!#$%&'*+-.^_`|~9", SF_TOKEN, 0, "a:b/c!#$%&'*+-.^_`|~9", false },
        { "k=:aGVsbG8=:", SF_BYTES, 0, "aGVsbG8=", false },
        { "k=::", SF_BYTES, 0, "", false },
        { "k=:+/9=:", SF_BYTES, 0, "+/9=", false },
        { "k=?1", SF_BOOLEAN, 1, NULL, false },
        { "k=?0", SF_BOOLEAN, 0, NULL, false },
        { "k", SF_BOOLEAN, 1, NULL, false },
        { "k=()", SF_INNER_LIST, 0, NULL, false },
        { "k=(1)", SF_INNER_LIST, 1, NULL, false },
        { "k=(1 \"two\" three :NA==: ?0 4.5)", SF_INNER_LIST, 6, NULL, false },
        { "k=(  a   b  )", SF_INNER_LIST, 2, NULL, false },
        { "k=(a;x=1;y b;z)", SF_INNER_LIST, 2, NULL, false },
    };

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        ck_assert_msg(parse1(v[i].in) == SF_OK, "'%s' refused", v[i].in);
        ck_assert_uint_eq(n, 1);
        ck_assert(txt_is(&m[0].key, "k"));
        ck_assert_msg(m[0].type == v[i].type, "'%s': type %s", v[i].in, sf_type_name(m[0].type));
        ck_assert_msg(m[0].num == v[i].num, "'%s': num %lld", v[i].in, (long long)m[0].num);
        if (v[i].str != NULL)
            ck_assert_msg(txt_is(&m[0].str, v[i].str), "'%s': str '%.*s'", v[i].in,
                          (int)m[0].str.len, m[0].str.b);
        ck_assert_int_eq(m[0].escaped, v[i].escaped);
        ck_assert_uint_eq(m[0].nparams, 0);
    }
}
END_TEST

START_TEST(syntax_errors)
{
    static const char *const v[] = {
        /* keys */
        "K=1",
        "kEy=1",
        "1k=1",
        "_k=1",
        "-k",
        ".k",
        "=1",
        "k =1",
        "k= 1",
        "ké=1",
        /* Integers and Decimals */
        "k=1234567890123456",
        "k=-1234567890123456",
        "k=-",
        "k=--1",
        "k=+1",
        "k=1.",
        "k=1.1234",
        "k=1234567890123.1",
        "k=1.2.3",
        "k=1a",
        "k=0x10",
        "k=.5",
        "k=1e3",
        /* Strings */
        "k=\"open",
        "k=\"a\\x\"",
        "k=\"a\\\"",
        "k=\"tab\there\"",
        "k=\"\x7f\"",
        "k=\"\xc3\xa9\"",
        "k='single'",
        /* Tokens, Byte Sequences, Booleans */
        "k=to\"k",
        "k=:aGk",
        "k=:a*b:",
        "k=:a b:",
        "k=?",
        "k=?2",
        "k=?true",
        "k=!",
        /* RFC 9651 types, not RFC 8941's */
        "k=@1659578233",
        "k=%\"x\"",
        /* Inner lists */
        "k=(1,2)",
        "k=(1 2",
        "k=(",
        "k=(1)(2)",
        "k=(1)x",
        "k=((1))",
        "k=(1 ,2)",
        /* Parameters */
        "k;",
        "k;K",
        "k; =1",
        "k=1 ;a",
        "k;a=",
        "k;a=(1)",
        "k;a=?3",
        /* the Dictionary */
        ",",
        "k,",
        "k, ",
        "k,,j",
        ",k",
        "k j",
        "k=1 j=2",
        "k=1;a j",
        "\tk",
        "k=1\t,",
        "k,\x01",
    };

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        ck_assert_msg(parse1(v[i]) == SF_E_SYNTAX, "'%s' accepted", v[i]);
}
END_TEST

START_TEST(dictionary)
{
    /* Order of first appearance; a repeated key takes the last value in its first place. */
    ck_assert_int_eq(parse1("a=1, b=2;x, c, a=\"three\";p;q"), SF_OK);
    ck_assert_uint_eq(n, 3);
    ck_assert(txt_is(&m[0].key, "a") && m[0].type == SF_STRING && txt_is(&m[0].str, "three"));
    ck_assert_uint_eq(m[0].nparams, 2);
    ck_assert(txt_is(&m[1].key, "b") && m[1].type == SF_INTEGER && m[1].num == 2);
    ck_assert_uint_eq(m[1].nparams, 1);
    ck_assert(txt_is(&m[2].key, "c") && m[2].type == SF_BOOLEAN && m[2].num == 1);
    /* OWS around commas, SP at either end; keys of every allowed character. */
    ck_assert_int_eq(parse1("   a=1 ,\t b , *c.d_e-f*9=?0   "), SF_OK);
    ck_assert_uint_eq(n, 3);
    ck_assert(txt_is(&m[2].key, "*c.d_e-f*9") && m[2].num == 0);
    /* SP after ';' in parameters; parameters on an inner list count as the member's. */
    ck_assert_int_eq(parse1("a;  x=1; y=\"s\";z=:AA==:;w=?1;v=t;u=2.5"), SF_OK);
    ck_assert_uint_eq(m[0].nparams, 6);
    ck_assert_int_eq(parse1("a=(1 2);x;y"), SF_OK);
    ck_assert(m[0].type == SF_INNER_LIST && m[0].num == 2 && m[0].nparams == 2);
    /* Empty: no members, not an error. */
    ck_assert_int_eq(parse1(""), SF_OK);
    ck_assert_uint_eq(n, 0);
    ck_assert_int_eq(parse1("    "), SF_OK);
    ck_assert_uint_eq(n, 0);
    ck_assert_int_eq(sf_dict_parse(NULL, 0, m, MAXM, &n), SF_OK);
    ck_assert_uint_eq(n, 0);
}
END_TEST

START_TEST(too_many)
{
    struct txt v = T("a, b, a, c");

    ck_assert_int_eq(sf_dict_parse(&v, 1, m, 3, &n), SF_OK);
    ck_assert_uint_eq(n, 3);
    ck_assert_int_eq(sf_dict_parse(&v, 1, m, 2, &n), SF_E_TOO_MANY);
    v = T("a, a, a");
    ck_assert_int_eq(sf_dict_parse(&v, 1, m, 1, &n), SF_OK);
    ck_assert_uint_eq(n, 1);
}
END_TEST

/* Several field lines are one value joined with ", " (RFC 8941 section 4.2). */
START_TEST(field_lines)
{
    static const struct {
        const char *l[3];
        enum sf_status st;
        unsigned n;
    } v[] = {
        { { "a=1", "b=2", NULL }, SF_OK, 2 },
        { { "a=1", "a=2", NULL }, SF_OK, 1 },
        { { "a=(1 2)", "b", "c=\"x\"" }, SF_OK, 3 },
        { { "a=1 ", "  b", NULL }, SF_OK, 2 },
        { { "a=1;p", "b;q=:AA==:", NULL }, SF_OK, 2 },
        { { "", NULL, NULL }, SF_OK, 0 },
        /* ", " next to an empty line, or a comma already there, makes an empty member. */
        { { "a=1", "", NULL }, SF_E_SYNTAX, 0 },
        { { "", "a=1", NULL }, SF_E_SYNTAX, 0 },
        { { "", "", NULL }, SF_E_SYNTAX, 0 },
        { { "a=1,", "b=2", NULL }, SF_E_SYNTAX, 0 },
        { { "a=1", ",b=2", NULL }, SF_E_SYNTAX, 0 },
        /* Nothing runs on into the next line. */
        { { "a=\"x", "y\"", NULL }, SF_E_SYNTAX, 0 },
        { { "a=\"x\\", "\"", NULL }, SF_E_SYNTAX, 0 },
        { { "a=\"", "\"", NULL }, SF_E_SYNTAX, 0 },
        { { "a=(1", "2)", NULL }, SF_E_SYNTAX, 0 },
        { { "a=:AA", "==:", NULL }, SF_E_SYNTAX, 0 },
        { { "a;", "p", NULL }, SF_E_SYNTAX, 0 },
        { { "a=", "1", NULL }, SF_E_SYNTAX, 0 },
    };

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        struct txt lines[3];
        unsigned nl = 0;

        while (nl < 3 && v[i].l[nl] != NULL) {
            lines[nl] = T(v[i].l[nl]);
            nl++;
        }
        ck_assert_msg(sf_dict_parse(lines, nl, m, MAXM, &n) == v[i].st, "[%zu] '%s'", i, v[i].l[0]);
        if (v[i].st == SF_OK)
            ck_assert_msg(n == v[i].n, "[%zu]: %u members", i, n);
    }
}
END_TEST

/* Keys and texts point into the field values themselves, and nothing is read past a value. */
START_TEST(points_into_input)
{
    static const char a[] = "max-age=60, x=\"s\"";
    static const char b[] = "y=tok, z=:AA==:";
    struct txt lines[2] = { T(a), T(b) };

    ck_assert_int_eq(sf_dict_parse(lines, 2, m, MAXM, &n), SF_OK);
    ck_assert_uint_eq(n, 4);
    ck_assert_ptr_eq(m[0].key.b, a);
    ck_assert_ptr_eq(m[1].str.b, a + 15);
    ck_assert_ptr_eq(m[2].key.b, b);
    ck_assert_ptr_eq(m[2].str.b, b + 2);
    ck_assert_ptr_eq(m[3].str.b, b + 10);
    /* Lengths, not NULs, end the values. */
    lines[0] = (struct txt){ "k=123", 4 };
    ck_assert_int_eq(sf_dict_parse(lines, 1, m, MAXM, &n), SF_OK);
    ck_assert_int_eq(m[0].num, 12);
    lines[0] = (struct txt){ "k=\"ab\"", 5 };
    ck_assert_int_eq(sf_dict_parse(lines, 1, m, MAXM, &n), SF_E_SYNTAX);
}
END_TEST

START_TEST(type_names)
{
    ck_assert_str_eq(sf_type_name(SF_INTEGER), "Integer");
    ck_assert_str_eq(sf_type_name(SF_INNER_LIST), "Inner List");
    ck_assert_str_eq(sf_type_name((enum sf_type)99), "?");
}
END_TEST

Suite *
sf_suite(void)
{
    Suite *s = suite_create("sf");
    TCase *tc = tcase_create("dict");

    tcase_add_test(tc, bare_items);
    tcase_add_test(tc, syntax_errors);
    tcase_add_test(tc, dictionary);
    tcase_add_test(tc, too_many);
    tcase_add_test(tc, field_lines);
    tcase_add_test(tc, points_into_input);
    tcase_add_test(tc, type_names);
    suite_add_tcase(s, tc);
    return (s);
}
