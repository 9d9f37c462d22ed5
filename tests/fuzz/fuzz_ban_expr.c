/*
 * Fuzz the ban expression parser (admin input, and later Lua's) and the
 * matcher.
 *
 * Input: the expression, up to the first '\n'; the rest, if any, is the
 * URL of the object it is matched against (its host is fixed).  The
 * expression lives in an exact-size heap copy so ASan sees any read past
 * its NUL.
 *
 * Invariants: a refusal says "ban: at N: " with N within the input; an
 * accepted expression prints a canonical form that parses back to the
 * same form and matches the same objects; matching is deterministic,
 * regex failures (PCRE2's limits) included.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "surogat/ban.h"
#include "surogat/hsh.h"
#include "surogat/sb.h"
#include "surogat/shd.h"

#include "fuzz.h"

static const char head[] = "HTTP/1.1 200 OK\r\n"
                           "Content-Type: text/html\r\n"
                           "X-Tag: a b c\r\n"
                           "Surrogate-Key: news\r\n";

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nl = memchr(data, '\n', size);
    size_t elen = nl != NULL ? (size_t)(nl - data) : size;
    char ebuf[512], pbuf[8192], pbuf2[8192], *expr, *key;
    struct sb err, pr, pr2;
    struct ban_expr *e, *e2;
    size_t ulen = nl != NULL ? size - elen - 1 : 0, klen;
    struct cobj oc;
    unsigned long pos;
    int re_err, re_err2;
    bool m;

    expr = malloc(elen + 1);
    FUZZ_CHECK(expr != NULL);
    memcpy(expr, data, elen);
    expr[elen] = '\0';
    sb_init(&err, ebuf, sizeof ebuf);
    e = ban_expr_parse(expr, &err);
    if (e == NULL) {
        FUZZ_CHECK(err.len > 0 && strncmp(ebuf, "ban: at ", 8) == 0);
        pos = strtoul(ebuf + 8, NULL, 10);
        /* Positions count bytes up to the NUL: a NUL inside the input ends it early. */
        FUZZ_CHECK(pos >= 1 && pos <= elen + 1);
        free(expr);
        return 0;
    }
    sb_init(&pr, pbuf, sizeof pbuf);
    ban_expr_print(e, &pr);
    e2 = NULL;
    if (sb_ok(&pr)) {
        e2 = ban_expr_parse(pbuf, &err);
        FUZZ_CHECK(e2 != NULL);
        sb_init(&pr2, pbuf2, sizeof pbuf2);
        ban_expr_print(e2, &pr2);
        FUZZ_CHECK(strcmp(pbuf, pbuf2) == 0);
    }

    /* Stored as the index stores heads: encoded (shd.h). */
    static unsigned char enc[512];
    static size_t enc_len;
    if (enc_len == 0)
        enc_len = shd_encode(head, sizeof head - 1, enc);
    memset(&oc, 0, sizeof oc);
    oc.magic = COBJ_MAGIC;
    oc.status = 200;
    oc.head = (char *)enc;
    oc.head_len = (uint32_t)enc_len;
    klen = 12 + ulen;
    key = malloc(klen);
    FUZZ_CHECK(key != NULL);
    memcpy(key, "example.com", 12); /* with its NUL */
    if (ulen > 0)
        memcpy(key + 12, nl + 1, ulen);
    m = ban_expr_match(e, key, klen, &oc, &re_err);
    FUZZ_CHECK(ban_expr_match(e, key, klen, &oc, &re_err2) == m && re_err2 == re_err);
    if (e2 != NULL)
        FUZZ_CHECK(ban_expr_match(e2, key, klen, &oc, &re_err2) == m && re_err2 == re_err);
    free(key);
    ban_expr_free(&e2);
    ban_expr_free(&e);
    free(expr);
    return 0;
}
