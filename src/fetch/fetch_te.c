/*
 * Transfer codings under a backend response's framing (RFC 9112 section
 * 7): what "Transfer-Encoding: gzip, chunked" leaves once the chunked
 * framing is decoded, or the whole body of "Transfer-Encoding: gzip",
 * read until the backend closes.
 *
 * A transfer coding belongs to one hop, not to the content: surogat
 * frames its own output, an HTTP/1.0 client cannot take one, and the
 * cache stores content.  So every coding is undone here, the last one
 * applied first, and what comes out is the body the backend would have
 * sent without them -- what is stored, filtered (fetch_gz.c) and sent.
 * h1_resp_body() refused the codings this cannot undo.
 *
 * A chain of at most H1_CODINGS_MAX stages, each feeding the one below,
 * the lowest the caller's sink.  Every stage is strict, as the gzip
 * check of a stored body is: a corrupt or truncated stream, or a byte
 * after its end, fails the fetch, since what passes becomes an object;
 * so does one that inflates past gunzip_max_size or gunzip_max_ratio
 * (gz_new() bounds every decoder).
 * Owned by the fetching worker; allocated once per response that needs it.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "surogat/defs.h"
#include "surogat/gz.h"
#include "surogat/h1.h"
#include "surogat/par.h"
#include "surogat/stat.h"

#include "fetch_priv.h"

struct te_stage {
    struct fetch_te *te;
    unsigned idx;
    enum h1_coding coding;
    struct gz *gz;      /* GZIP, DEFLATE */
    struct h1_chunk ck; /* CHUNKED */
};

struct fetch_te {
    unsigned magic;
#define FETCH_TE_MAGIC 0x7a4e21c9
    unsigned n;
    struct te_stage st[H1_CODINGS_MAX]; /* st[n - 1] takes the bytes off the wire */
    bool corrupt;                       /* a stage failed on its input */
    bool bomb;                          /* a stage inflated past its bound (gz_limit) */
    int sink_rv;                        /* the sink's nonzero answer, once it stopped */
    gz_out_f *sink;                     /* for the current call */
    void *priv;
};

struct fetch_te *
fetch__te_new(const struct h1_framing *fr)
{
    struct fetch_te *te;

    SRG_ASSERT(fr->ncoding > 0 && fr->ncoding <= H1_CODINGS_MAX);
    OBJ_NEW(te, FETCH_TE_MAGIC);
    te->n = fr->ncoding;
    for (unsigned i = 0; i < te->n; i++) {
        struct te_stage *s = &te->st[i];

        s->te = te;
        s->idx = i;
        s->coding = fr->coding[i];
        switch (s->coding) {
        case H1_CODING_GZIP:
            s->gz = gz_new(GZ_DECODE, 0);
            break;
        case H1_CODING_DEFLATE:
            s->gz = gz_new(GZ_INFLATE, 0);
            break;
        case H1_CODING_CHUNKED:
            h1_chunk_init(&s->ck, par.http_chunk_ext_max);
            break;
        }
    }
    STAT_INC(backend_te_decoded);
    return (te);
}

void
fetch__te_free(struct fetch_te **tep)
{
    struct fetch_te *te = *tep;

    if (te == NULL)
        return;
    OBJ_CHECK(te, FETCH_TE_MAGIC);
    for (unsigned i = 0; i < te->n; i++)
        gz_free(&te->st[i].gz);
    OBJ_FREE(tep);
}

static int stage_feed(struct fetch_te *te, unsigned i, const char *p, size_t len);

/*
 * Bytes for the stage below st[i] (the sink below st[0]).  0, or nonzero
 * once anything failed: te->corrupt or te->sink_rv say what.
 */
static int
below(struct fetch_te *te, unsigned i, const char *p, size_t len)
{
    int rv;

    if (len == 0)
        return (0);
    if (i > 0)
        return (stage_feed(te, i - 1, p, len));
    rv = te->sink(te->priv, p, len);
    if (rv != 0)
        te->sink_rv = rv;
    return (rv);
}

/* gz_out_f: a gzip or zlib stage's output, for the stage below it. */
static int
stage_out(void *priv, const char *p, size_t len)
{
    struct te_stage *s = priv;

    return (below(s->te, s->idx, p, len));
}

static int
stage_feed(struct fetch_te *te, unsigned i, const char *p, size_t len)
{
    struct te_stage *s = &te->st[i];
    enum h1_chunk_status cs;
    const char *data;
    size_t used, dlen;

    switch (s->coding) {
    case H1_CODING_GZIP:
    case H1_CODING_DEFLATE:
        switch (gz_feed(s->gz, p, len, GZ_FLUSH_NONE, stage_out, s)) {
        case GZ_OK:
        case GZ_END:
            return (0);
        case GZ_E_OUTPUT:
            return (-1); /* a stage below failed, and said how */
        case GZ_E_DATA:
        case GZ_E_TRUNCATED:
            te->corrupt = true;
            return (-1);
        case GZ_E_BOMB:
            te->bomb = true;
            return (-1);
        }
        SRG_WRONG("gz_status");
    case H1_CODING_CHUNKED:
        while (len > 0) {
            cs = h1_chunk_decode(&s->ck, p, len, &used, &data, &dlen);
            if (cs == H1_CHUNK_ERROR || (cs == H1_CHUNK_DONE && used < len)) {
                te->corrupt = true; /* malformed, or bytes after the last chunk */
                return (-1);
            }
            p += used;
            len -= used;
            if (cs == H1_CHUNK_DATA && below(te, i, data, dlen) != 0)
                return (-1);
        }
        return (0);
    }
    SRG_WRONG("h1_coding");
}

static int
result(struct fetch_te *te, int rv)
{
    if (rv == 0)
        return (0);
    if (te->sink_rv != 0)
        return (te->sink_rv);
    if (te->bomb)
        return (FETCH_TE_BOMB);
    SRG_ASSERT(te->corrupt);
    return (FETCH_TE_CORRUPT);
}

int
fetch__te_feed(struct fetch_te *te, const char *p, size_t len, gz_out_f *sink, void *priv)
{
    OBJ_CHECK(te, FETCH_TE_MAGIC);
    AN(sink);
    if (te->corrupt || te->bomb || te->sink_rv != 0)
        return (result(te, -1));
    if (len == 0)
        return (0);
    te->sink = sink;
    te->priv = priv;
    return (result(te, stage_feed(te, te->n - 1, p, len)));
}

int
fetch__te_end(struct fetch_te *te, gz_out_f *sink, void *priv)
{
    struct te_stage *s;

    OBJ_CHECK(te, FETCH_TE_MAGIC);
    AN(sink);
    if (te->corrupt || te->bomb || te->sink_rv != 0)
        return (result(te, -1));
    te->sink = sink;
    te->priv = priv;
    /* From the outermost coding in: what each one still holds flows into the ones below. */
    for (unsigned i = te->n; i-- > 0;) {
        s = &te->st[i];
        if (s->coding == H1_CODING_CHUNKED) {
            size_t used;
            const char *data;
            size_t dlen;

            /* Complete only once the last chunk and the trailer section were read. */
            if (h1_chunk_decode(&s->ck, "", 0, &used, &data, &dlen) != H1_CHUNK_DONE) {
                te->corrupt = true;
                return (result(te, -1));
            }
            continue;
        }
        switch (gz_feed(s->gz, NULL, 0, GZ_FLUSH_FINISH, stage_out, s)) {
        case GZ_OK:
        case GZ_END:
            break;
        case GZ_E_OUTPUT:
            return (result(te, -1));
        case GZ_E_DATA:
        case GZ_E_TRUNCATED:
            te->corrupt = true;
            return (result(te, -1));
        case GZ_E_BOMB:
            te->bomb = true;
            return (result(te, -1));
        }
    }
    return (0);
}
