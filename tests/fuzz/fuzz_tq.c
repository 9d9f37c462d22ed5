/*
 * Fuzz the log query language (tq.h), which parses what an operator
 * types to `surogatctl log -q`, inside the daemon.
 *
 * Input: the query.  Its bytes go to tq_compile() as one exact-size heap
 * string, so ASan sees any read past its NUL.
 *
 * Invariants: a refused query says why, at an offset inside it; an
 * accepted one matches the same way twice on each of a few subjects
 * (fixed field values, some absent); "!(q)" is accepted too and matches
 * exactly when q does not; "(q) || (q)" and "(q) && (q)" match as q.
 */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "surogat/sb.h"
#include "surogat/tq.h"

#include "fuzz.h"

struct fv {
    enum tq_field f;
    const char *h, *v;
};

static const struct fv subj_a[] = {
    { TQ_F_REQ_URL, NULL, "/news/a?b=1" },
    { TQ_F_REQ_METHOD, NULL, "GET" },
    { TQ_F_REQ_HEADER, "Host", "example.test" },
    { TQ_F_REQ_HEADER, "Cookie", "a=b" },
    { TQ_F_RESP_STATUS, NULL, "200" },
    { TQ_F_BERESP_STATUS, NULL, "200" },
    { TQ_F_BERESP_STATUS, NULL, "503" },
    { TQ_F_BACKEND, NULL, "api" },
    { TQ_F_CLIENT, NULL, "192.0.2.1" },
    { TQ_F_DURATION, NULL, "0.25" },
    { TQ_F_CACHE, NULL, "MISS" },
    { TQ_F_TTL, NULL, "60.000" },
    { TQ_F__N, NULL, NULL },
};
static const struct fv subj_b[] = {
    { TQ_F_REQ_URL, NULL, "" },
    { TQ_F_RESP_STATUS, NULL, "x" },
    { TQ_F_RESP_HEADER, "Cache-Status", "surogat; hit" },
    { TQ_F_CACHE, NULL, "HIT" },
    { TQ_F__N, NULL, NULL },
};
static const struct fv subj_c[] = { { TQ_F__N, NULL, NULL } };

static bool
get(void *priv, enum tq_field f, const char *hname, unsigned i, struct tq_val *v)
{
    const struct fv *s = priv;

    FUZZ_CHECK((unsigned)f < TQ_F__N);
    FUZZ_CHECK((hname != NULL) == (f == TQ_F_REQ_HEADER || f == TQ_F_RESP_HEADER));
    for (; s->f != TQ_F__N; s++) {
        if (s->f != f || (hname != NULL && strcasecmp(hname, s->h) != 0))
            continue;
        if (i-- > 0)
            continue;
        *v = (struct tq_val){ s->v, strlen(s->v) };
        return (true);
    }
    return (false);
}

static struct tq *
compile(const char *src, size_t len)
{
    char err[512];
    struct sb sb;
    size_t pos = (size_t)-1;
    struct tq *q;

    sb_init(&sb, err, sizeof err);
    q = tq_compile(src, NULL, &sb, &pos);
    if (q == NULL) {
        FUZZ_CHECK(pos <= len);
        FUZZ_CHECK(sb.len > 0);
    }
    return (q);
}

/* "pre" src "post" in an exact-size heap copy, compiled. */
static struct tq *
wrapped(const char *pre, const char *src, const char *mid, const char *post)
{
    size_t n = strlen(pre) + 2 * strlen(src) + strlen(mid) + strlen(post) + 1;
    char *s = malloc(n);
    struct tq *q;

    FUZZ_CHECK(s != NULL);
    strcpy(s, pre);
    strcat(s, src);
    if (*mid != '\0') {
        strcat(s, mid);
        strcat(s, src);
    }
    strcat(s, post);
    q = compile(s, strlen(s));
    free(s);
    return (q);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const struct fv *const subjects[] = { subj_a, subj_b, subj_c };
    struct tq *q, *nq, *orq, *andq;
    char *src;

    if (size > 4096)
        return (0);
    src = malloc(size + 1);
    FUZZ_CHECK(src != NULL);
    memcpy(src, data, size);
    src[size] = '\0';
    q = compile(src, strlen(src));
    if (q != NULL) {
        nq = wrapped("!(", src, "", ")");
        orq = wrapped("(", src, ") || (", ")");
        andq = wrapped("(", src, ") && (", ")");
        for (size_t i = 0; i < sizeof subjects / sizeof subjects[0]; i++) {
            void *s = (void *)(uintptr_t)subjects[i];
            bool m = tq_match(q, get, s);
            FUZZ_CHECK(tq_match(q, get, s) == m);
            /* The wrapped forms may hit the nesting or size bound, never mean otherwise. */
            if (nq != NULL)
                FUZZ_CHECK(tq_match(nq, get, s) == !m);
            if (orq != NULL)
                FUZZ_CHECK(tq_match(orq, get, s) == m);
            if (andq != NULL)
                FUZZ_CHECK(tq_match(andq, get, s) == m);
        }
        tq_free(&nq);
        tq_free(&orq);
        tq_free(&andq);
        tq_free(&q);
    }
    free(src);
    return (0);
}
