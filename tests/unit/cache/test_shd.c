/*
 * The stored head's encoding: every shape of head round-trips byte for
 * byte, the fields come out as a parser reads them, common heads shrink,
 * and no damaged encoding is accepted.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "unit.h"
#include "surogat/defs.h"
#include "surogat/shd.h"

/* Whether text starts with "HTTP/1.M SSS " (status 100-999), a reason and CRLF: its length. */
static size_t
status_line_len(const char *text, size_t len)
{
    const char *crlf;

    if (len < 15 || memcmp(text, "HTTP/1.", 7) != 0 || text[7] < '0' || text[7] > '9' ||
        text[8] != ' ' || text[9] < '1' || text[9] > '9' || text[10] < '0' || text[10] > '9' ||
        text[11] < '0' || text[11] > '9' || text[12] != ' ')
        return (0);
    crlf = memmem(text, len, "\r\n", 2);
    return (crlf != NULL ? (size_t)(crlf + 2 - text) : 0);
}

/*
 * The split of an encoding of text: accepted exactly when text starts
 * with a status line; its parts; the fields decoded into a heap buffer of
 * exactly h.room bytes (ASan sees a byte past it) as the text after the
 * status line, less the empty line when the text ends with one.
 */
static void
split_check(const char *text, size_t len, const unsigned char *enc, size_t n)
{
    size_t sl = status_line_len(text, len), rest, want;
    struct shd_head h;
    char *out;

    memset(&h, 0, sizeof h);
    ck_assert_msg(shd_split(enc, n, &h) == (sl > 0), "[%.*s] split wrong", (int)len, text);
    if (sl == 0)
        return;
    ck_assert_uint_eq(h.minor, (unsigned)(text[7] - '0'));
    ck_assert_uint_eq(h.status, (unsigned)atoi(text + 9));
    ck_assert_uint_eq(h.reason.len, sl - 15);
    ck_assert(memcmp(h.reason.b, text + 13, sl - 15) == 0);
    rest = len - sl;
    ck_assert_uint_eq(h.room, rest);
    want = rest;
    /* The text's last line is empty: it ends with CRLF after CRLF, or is the CRLF alone. */
    if (rest >= 2 && memcmp(text + len - 2, "\r\n", 2) == 0 &&
        (rest == 2 || (rest >= 4 && memcmp(text + len - 4, "\r\n", 2) == 0)))
        want -= 2;
    out = malloc(h.room > 0 ? h.room : 1);
    ck_assert_ptr_nonnull(out);
    ck_assert_uint_eq(shd_decode_fields(&h, out), want);
    ck_assert_msg(memcmp(out, text + sl, want) == 0, "[%.*s]: fields [%.*s]", (int)len, text,
                  (int)want, out);
    free(out);
}

/* text -> encoding -> text, checked; returns the encoding's length. */
static size_t
round_trip(const char *text, size_t len)
{
    unsigned char *enc = malloc(shd_bound(len));
    char *back;
    size_t n, tlen;

    ck_assert_ptr_nonnull(enc);
    n = shd_encode(text, len, enc);
    ck_assert_uint_le(n, shd_bound(len));
    ck_assert_int_eq(enc[0], SHD_MAGIC);
    ck_assert_msg(shd_check(enc, n, &tlen), "[%.*s] not sound", (int)len, text);
    ck_assert_uint_eq(tlen, len);
    ck_assert_uint_eq(shd_text_len(enc, n), len);
    back = malloc(len + 1);
    ck_assert_ptr_nonnull(back);
    ck_assert_uint_eq(shd_decode(enc, n, back), len);
    ck_assert_msg(memcmp(back, text, len) == 0, "[%.*s] came back as [%.*s]", (int)len, text,
                  (int)len, back);
    split_check(text, len, enc, n);
    free(back);
    free(enc);
    return (n);
}

static size_t
round_trip_str(const char *text)
{
    return (round_trip(text, strlen(text)));
}

START_TEST(shapes)
{
    static const char *const v[] = {
        "",
        "\r\n",
        "HTTP/1.1 200 OK\r\n\r\n",
        "HTTP/1.0 404 Not Found\r\nServer: x\r\n\r\n",
        "HTTP/1.1 200 \r\n\r\n",    /* empty reason */
        "HTTP/1.1 200\r\n\r\n",     /* no space: a line as it is */
        "HTTP/1.1 099 Low\r\n\r\n", /* not a status */
        "HTTP/2.0 200 OK\r\n\r\n",
        "HTTP/1.1 999 Nine: nine\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Type: text/html\r\ncontent-type: a\r\nCONTENT-TYPE: b\r\n",
        "HTTP/1.1 200 OK\r\nX-Empty: \r\nX-Bare:\r\nX-Tab:\tv\r\n:no-name\r\n no colon\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX-A:  two spaces\r\nX B: space in name\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX-Cr: a\rb\nc\r\n\r\n",        /* bare CR and LF inside a value */
        "HTTP/1.1 200 OK\r\n\r\n\r\nafter the empty line", /* a tail without CRLF */
        "no status line at all",
        "\r",
        "\n\r\n\r",
        "HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Fri, 27 Nov 2026 04:00:00 GMT\r\n"
        "Content-Type: application/octet-stream\r\nLast-Modified: Fri, 27 Nov 2026 03:00:00 "
        "GMT\r\nExpires: Fri, 27 Nov 2026 05:00:00 GMT\r\nCache-Control: max-age=3600\r\n"
        "Accept-Ranges: bytes\r\n\r\n",
    };

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        round_trip_str(v[i]);
}
END_TEST

/* Lengths on both sides of each LEB128 step, and bytes of every value, NUL included. */
START_TEST(long_and_binary)
{
    static const size_t lens[] = { 0, 1, 127, 128, 129, 16383, 16384, 70000 };
    char *text = malloc(160000);

    ck_assert_ptr_nonnull(text);
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        size_t n = 0;

        n += (size_t)sprintf(text, "HTTP/1.1 200 OK\r\nX-Long: ");
        memset(text + n, 'v', lens[i]);
        n += lens[i];
        memcpy(text + n, "\r\nServer: ", 10);
        n += 10;
        memset(text + n, 'w', lens[i]);
        n += lens[i];
        memcpy(text + n, "\r\n\r\n", 4);
        round_trip(text, n + 4);
        /* The same length as a status reason and as a name. */
        n = (size_t)sprintf(text, "HTTP/1.1 500 ");
        memset(text + n, 'r', lens[i]);
        n += lens[i];
        memcpy(text + n, "\r\n", 2);
        round_trip(text, n + 2);
    }
    for (size_t i = 0; i < 256; i++)
        text[i] = (char)i;
    round_trip(text, 256);
    free(text);
}
END_TEST

/* Up to 23 atoms (a "\0" is one NUL byte) drawn by *r appended to text[0..n); the new length. */
static size_t
random_atoms(char *text, size_t cap, size_t n, const char *const *atoms, size_t natoms, uint32_t *r)
{
    *r = *r * 1103515245u + 12345u;
    for (unsigned k = (*r >> 16) % 24; k > 0; k--) {
        *r = *r * 1103515245u + 12345u;
        const char *a = atoms[(*r >> 16) % natoms];
        size_t al = a[0] == '\0' ? 1 : strlen(a);
        if (n + al > cap)
            break;
        memcpy(text + n, a, al);
        n += al;
    }
    return (n);
}

/* Pseudo-random texts of CR, LF, ':', ' ', a name of the table and other bytes. */
START_TEST(random_texts)
{
    static const char *const atoms[] = { "\r\n",      "\r",   "\n",
                                         ":",         ": ",   " ",
                                         "Date",      "ETag", "HTTP/1.1 200 OK",
                                         "HTTP/1.1 ", "x",    "\0" };
    char text[512];
    uint32_t r = 12345;

    for (unsigned round = 0; round < 20000; round++) {
        size_t n = 0;

        n = random_atoms(text, sizeof text, n, atoms, ARRAY_LEN(atoms), &r);
        round_trip(text, n);
    }
}
END_TEST

/*
 * Heads split for a deliverer: every shape after a status line (fields of
 * the table and not, dates, bare lines, no empty line, text after it),
 * the fields decoded in a buffer of exactly their room (round_trip()).
 */
START_TEST(split_shapes)
{
    static const char *const v[] = {
        "HTTP/1.1 200 OK\r\n\r\n",
        "HTTP/1.1 200 OK\r\n",                  /* no empty line: nothing left out */
        "HTTP/1.1 200 OK\r\nServer: x\r\n",     /* nor here */
        "HTTP/1.1 200 OK\r\nServer: x",         /* a tail without CRLF */
        "HTTP/1.1 200 OK\r\n\r\n\r\n",          /* two empty lines: the last left out */
        "HTTP/1.1 200 OK\r\n\r\nafter\r\n\r\n", /* text after the first empty line */
        "HTTP/1.1 200 OK\r\n\r\nafter",
        "HTTP/1.0 404 Not Found\r\nServer: x\r\n\r\n",
        "HTTP/1.1 200 \r\nA: b\r\n\r\n", /* empty reason */
        "HTTP/1.1 999 Nine: nine\r\n\r\n",
        "HTTP/1.1 100 Continue\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX-Empty: \r\nX-Bare:\r\n no colon\r\n\r\n",
        "HTTP/1.1 200 OK\r\nX-Cr: a\rb\nc\r\n\r\n",
        "HTTP/1.1 200 OK\r\nA: \r\r\n\r\n",
        "HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Fri, 27 Nov 2026 04:00:00 GMT\r\n"
        "Content-Type: application/octet-stream\r\nContent-Length: 1024\r\nLast-Modified: Fri, "
        "27 Nov 2026 03:00:00 GMT\r\nExpires: Fri, 27 Nov 2026 05:00:00 GMT\r\nCache-Control: "
        "max-age=3600\r\nETag: \"6929a1c0-400\"\r\nAccept-Ranges: bytes\r\n\r\n",
        /* not split: the first line is not a status line */
        "",
        "\r\n",
        "HTTP/1.1 200\r\n\r\n",
        "HTTP/1.1 099 Low\r\n\r\n",
        "HTTP/2.0 200 OK\r\n\r\n",
        "HTTP/1.1 200 OK", /* no CRLF: a tail */
        "Server: x\r\n\r\n",
    };
    unsigned char enc[1024];
    struct shd_head h;
    size_t n;

    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++)
        round_trip_str(v[i]);
    /* The length a caller sizes by, and what comes back, exactly. */
    n = shd_encode(v[0], strlen(v[0]), enc);
    ck_assert(shd_split(enc, n, &h));
    ck_assert_uint_eq(h.room, 2);
    ck_assert_uint_eq(shd_decode_fields(&h, (char[2]){ 0 }), 0);
    n = shd_encode(v[14], strlen(v[14]), enc);
    ck_assert(shd_split(enc, n, &h));
    ck_assert_uint_eq(h.status, 200);
    ck_assert_uint_eq(h.reason.len, 2);
    ck_assert_uint_eq(h.room, strlen(v[14]) - strlen("HTTP/1.1 200 OK\r\n"));
}
END_TEST

/* Random texts after a status line, split and decoded (round_trip() checks each). */
START_TEST(split_random)
{
    static const char *const atoms[] = { "\r\n",   "\r",
                                         "\n",     ":",
                                         ": ",     " ",
                                         "Date: ", "ETag",
                                         "x",      "Expires: Fri, 27 Nov 2026 05:00:00 GMT",
                                         "\0",     "Content-Type: text/html" };
    char text[512];
    uint32_t r = 54321;

    for (unsigned round = 0; round < 20000; round++) {
        size_t n = (size_t)snprintf(text, sizeof text, "HTTP/1.%u %u R\r\n", round % 10,
                                    100 + round % 900);

        n = random_atoms(text, sizeof text, n, atoms, ARRAY_LEN(atoms), &r);
        round_trip(text, n);
    }
}
END_TEST

/* enc[0..n)'s fields decoded (split) into exactly their room, compared with want. */
static void
fields_are(const unsigned char *enc, size_t n, const char *want)
{
    struct shd_head h;
    char *out;

    ck_assert(shd_split(enc, n, &h));
    out = malloc(h.room);
    ck_assert_ptr_nonnull(out);
    ck_assert_uint_eq(shd_decode_fields(&h, out), strlen(want));
    ck_assert_msg(memcmp(out, want, strlen(want)) == 0, "got [%.*s], want [%s]", (int)strlen(want),
                  out, want);
    free(out);
}

/*
 * The thread's memo of the fields decoded last: filled once the same
 * fields come twice, never given for other fields -- of the same length,
 * at the same address (a freed head's room reused), or longer than it
 * keeps.
 */
START_TEST(split_memo)
{
    static const char a[] = "HTTP/1.1 200 OK\r\nServer: a\r\nETag: \"1\"\r\n\r\n";
    static const char b[] = "HTTP/1.1 200 OK\r\nServer: b\r\nETag: \"2\"\r\n\r\n";
    unsigned char *ea = malloc(shd_bound(sizeof a)), *eb = malloc(shd_bound(sizeof b));
    unsigned char *at = malloc(shd_bound(sizeof a)), *big;
    char *long_text;
    size_t na, nb, nbig;

    ck_assert(ea != NULL && eb != NULL && at != NULL);
    na = shd_encode(a, sizeof a - 1, ea);
    nb = shd_encode(b, sizeof b - 1, eb);
    ck_assert_uint_eq(na, nb);
    for (int i = 0; i < 3; i++) /* the second fills the memo, the third reads it */
        fields_are(ea, na, "Server: a\r\nETag: \"1\"\r\n");
    fields_are(eb, nb, "Server: b\r\nETag: \"2\"\r\n");
    fields_are(ea, na, "Server: a\r\nETag: \"1\"\r\n");
    /* One address, its bytes rewritten in between: each time what it holds now. */
    for (int i = 0; i < 4; i++) {
        memcpy(at, i % 2 == 0 ? ea : eb, na);
        fields_are(at, na,
                   i % 2 == 0 ? "Server: a\r\nETag: \"1\"\r\n" : "Server: b\r\nETag: \"2\"\r\n");
        fields_are(at, na,
                   i % 2 == 0 ? "Server: a\r\nETag: \"1\"\r\n" : "Server: b\r\nETag: \"2\"\r\n");
    }
    /* Fields longer than the memo keeps: decoded every time, right. */
    long_text = malloc(8192);
    ck_assert_ptr_nonnull(long_text);
    strcpy(long_text, "HTTP/1.1 200 OK\r\nX-Long: ");
    memset(long_text + strlen(long_text), 'v', 4000);
    strcpy(long_text + strlen("HTTP/1.1 200 OK\r\nX-Long: ") + 4000, "\r\n\r\n");
    big = malloc(shd_bound(strlen(long_text)));
    ck_assert_ptr_nonnull(big);
    nbig = shd_encode(long_text, strlen(long_text), big);
    long_text[strlen(long_text) - 2] = '\0'; /* the fields: without the empty line */
    for (int i = 0; i < 3; i++) {
        fields_are(big, nbig, long_text + strlen("HTTP/1.1 200 OK\r\n"));
        fields_are(ea, na, "Server: a\r\nETag: \"1\"\r\n");
    }
    free(big);
    free(long_text);
    free(at);
    free(eb);
    free(ea);
}
END_TEST

/* A head as origins send it takes well under its text: the reason for the encoding. */
START_TEST(smaller)
{
    static const char head[] =
        "HTTP/1.1 200 OK\r\nServer: nginx/1.22.1\r\nDate: Fri, 27 Nov 2026 04:00:00 GMT\r\n"
        "Content-Type: application/octet-stream\r\nLast-Modified: Fri, 27 Nov 2026 03:00:00 "
        "GMT\r\nExpires: Fri, 27 Nov 2026 05:00:00 GMT\r\nCache-Control: max-age=3600\r\n"
        "Accept-Ranges: bytes\r\n\r\n";
    size_t n = round_trip(head, sizeof head - 1);

    /*
     * 17 of status line to 6; per field, name and ": " and CRLF to 2
     * bytes; Date and Expires to 5 bytes each, two common values to one.
     */
    ck_assert_uint_le(n, (sizeof head - 1) / 3);
}
END_TEST

/*
 * Date and Expires keep a date as a number: every date that prints back
 * the same comes back, any other value of theirs stays as it is.
 */
START_TEST(dates)
{
    static const char *const v[] = {
        "Thu, 01 Jan 1970 00:00:00 GMT", /* 0 */
        "Sun, 06 Nov 1994 08:49:37 GMT", /* RFC 9110's */
        "Tue, 29 Feb 2000 23:59:59 GMT", /* a leap day of a leap century */
        "Mon, 01 Mar 2100 00:00:00 GMT", /* 2100 is not a leap year */
        "Sun, 07 Feb 2106 06:28:15 GMT", /* 2^32 - 1 seconds */
        "Sun, 07 Feb 2106 06:28:16 GMT", /* one more: kept as bytes */
        "Wed, 31 Dec 1969 23:59:59 GMT", /* before 1970: bytes */
        "Fri, 06 Nov 1994 08:49:37 GMT", /* the wrong weekday: bytes, as sent */
        "Sun, 6 Nov 1994 08:49:37 GMT",
        "Sunday, 06-Nov-94 08:49:37 GMT",
        "Sun Nov  6 08:49:37 1994",
        "Sun, 06 Nov 1994 08:49:37 UTC",
        "Mon, 31 Feb 2000 00:00:00 GMT",
        "Sun, 06 Nov 1994 24:00:00 GMT",
        "0",
        "",
    };
    static const char *const fields[] = { "Date", "Expires", "date", "Last-Modified", "X-Date" };
    char text[256], out[256];
    unsigned char enc[2048];

    for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) {
        for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
            int n =
                snprintf(text, sizeof text, "HTTP/1.1 200 OK\r\n%s: %s\r\n\r\n", fields[f], v[i]);
            size_t e = round_trip(text, (size_t)n);
            struct shd_iter it;
            struct txt name, val;

            /* Dates of the two fields below 2^32 s and printed the same take 5 bytes. */
            if (f < 3 && i < 5)
                ck_assert_msg(e <= (size_t)n - 29 - 10, "[%s] took %zu", text, e);
            n = (int)shd_encode(text, (size_t)n, enc);
            shd_iter_init(&it, enc, (size_t)n);
            ck_assert(shd_next(&it, &name, &val));
            ck_assert(val.len == strlen(v[i]) && memcmp(val.b, v[i], val.len) == 0);
            memcpy(out, val.b, val.len); /* still there after the call */
            ck_assert(!shd_next(&it, &name, &val));
        }
    }
}
END_TEST

/*
 * Many dates decoded on one thread, in an order that keeps reusing the
 * printed ones it remembers and replacing them: each comes back as sent.
 */
START_TEST(many_dates)
{
    static const char *const wd[] = { "Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed" };
    static const char *const mon[] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };
    uint32_t r = 7;

    for (unsigned i = 0; i < 20000; i++) {
        char text[128];
        time_t t;
        struct tm tm;
        int n;

        r = r * 1103515245u + 12345u;
        /* A few hundred distinct seconds, hit again and again. */
        t = (time_t)1700000000 + (time_t)((r >> 16) % 300) * 3600 + (time_t)(i % 7);
        gmtime_r(&t, &tm);
        n = snprintf(text, sizeof text,
                     "HTTP/1.1 200 OK\r\nDate: %s, %02d %s %04d %02d:%02d:%02d GMT\r\n\r\n",
                     wd[(t / 86400) % 7], tm.tm_mday, mon[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour,
                     tm.tm_min, tm.tm_sec);
        ck_assert_uint_le(round_trip(text, (size_t)n), (size_t)n - 24);
    }
}
END_TEST

START_TEST(fields)
{
    static const char head[] = "HTTP/1.1 200 OK: x\r\n"
                               "Content-Type: text/html\r\n"
                               "X-Mine: a: b\r\n"
                               "x-bare:c\r\n"
                               "no colon here\r\n"
                               ":leading colon\r\n"
                               "X-Empty: \r\n"
                               "\r\n";
    static const struct {
        const char *name, *val;
    } want[] = {
        { "Content-Type", "text/html" }, { "X-Mine", "a: b" }, { "x-bare", "c" }, { "X-Empty", "" }
    };
    unsigned char enc[512];
    size_t n = shd_encode(head, sizeof head - 1, enc);
    struct shd_iter it;
    struct txt name, val;
    unsigned i = 0;

    shd_iter_init(&it, enc, n);
    while (shd_next(&it, &name, &val)) {
        ck_assert_uint_lt(i, sizeof want / sizeof want[0]);
        ck_assert_msg(name.len == strlen(want[i].name) &&
                          memcmp(name.b, want[i].name, name.len) == 0,
                      "field %u: name [%.*s]", i, (int)name.len, name.b);
        ck_assert_msg(val.len == strlen(want[i].val) && memcmp(val.b, want[i].val, val.len) == 0,
                      "field %u: value [%.*s]", i, (int)val.len, val.b);
        i++;
    }
    ck_assert_uint_eq(i, sizeof want / sizeof want[0]);
    ck_assert(!shd_next(&it, &name, &val)); /* stays at the end */
}
END_TEST

/* Every cut, every flipped byte and every appended byte of a sound encoding is refused or sound. */
START_TEST(damaged)
{
    static const char head[] = "HTTP/1.1 200 OK\r\nServer: x\r\nX-Mine: y\r\nplain\r\n\r\ntail";
    unsigned char enc[512], bad[513];
    size_t n = shd_encode(head, sizeof head - 1, enc), tlen;

    for (size_t cut = 0; cut < n; cut++)
        ck_assert_msg(!shd_check(enc, cut, &tlen), "cut at %zu accepted", cut);
    memcpy(bad, enc, n);
    bad[n] = 0;
    ck_assert(!shd_check(bad, n + 1, &tlen)); /* a byte past OP_END */
    for (size_t i = 0; i < n; i++) {
        for (unsigned x = 1; x < 256; x <<= 1) {
            memcpy(bad, enc, n);
            bad[i] ^= (unsigned char)x;
            if (shd_check(bad, n, &tlen)) {
                /* Accepted: then it is a text of that length, and decodes to it. */
                char *out = malloc(tlen + 1);

                ck_assert_ptr_nonnull(out);
                ck_assert_uint_eq(shd_decode(bad, n, out), tlen);
                free(out);
            }
        }
    }
    /* Not the magic: a head stored as text before the encoding. */
    ck_assert(!shd_check((const unsigned char *)head, sizeof head - 1, &tlen));
}
END_TEST

Suite *
UNIT_SUITE(void)
{
    Suite *s = suite_create("shd");
    TCase *tc = tcase_create("shd");

    tcase_add_test(tc, shapes);
    tcase_add_test(tc, long_and_binary);
    tcase_add_test(tc, random_texts);
    tcase_add_test(tc, smaller);
    tcase_add_test(tc, dates);
    tcase_add_test(tc, many_dates);
    tcase_add_test(tc, fields);
    tcase_add_test(tc, damaged);
    tcase_add_test(tc, split_shapes);
    tcase_add_test(tc, split_random);
    tcase_add_test(tc, split_memo);
    suite_add_tcase(s, tc);
    return (s);
}
