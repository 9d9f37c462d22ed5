/*
 * ESI and the object attributes on the fetch side: a 200 being stored
 * whose policy says beresp.do_esi, or whose backend asks with
 * Surrogate-Control: content="ESI/1.0", is parsed while it is stored
 * (esi.h: a streaming parser, never the whole body in memory) into a
 * program kept with the object (hsh_oa_set, HSH_OA_ESI).  The stored body
 * is what the gzip plan (fetch_gz.c) says, made so that a delivery can
 * assemble the page from it -- gzip whatever compress_formats names first
 * (fetch_codings()), since only gzip can be stitched:
 *
 *   compressed by the cache (FGZ_COMPRESS) -- compressed in segments cut
 *     where literals begin and end (esi_gz), so that a delivery to a
 *     client taking gzip stitches them without recompressing;
 *   coded by the backend (FGZ_CHECK: gzip, br or zstd) -- decoded
 *     (bounded as every decoder is) and compressed again in gzip
 *     segments, as Varnish does;
 *   decoded on the policy's word (FGZ_GUNZIP) -- decoded and parsed;
 *   anything else -- parsed as it comes and stored as it came.
 *
 * An ESI page is never streamed to readers while it is fetched: a
 * delivery needs the program, which is complete only at the end (the
 * fetch does not open the busy object; fetch.c).
 *
 * Every gzip body stored, ESI or not, also keeps where its deflate data
 * lies (gz_track, gz_bits: HSH_OA_GZBITS), so that a page including it
 * splices it into its own gzip stream without decoding it.
 *
 * Runs on the fetching worker; the state belongs to the busy object.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "surogat/defs.h"
#include "surogat/esi.h"
#include "surogat/gz.h"
#include "surogat/hsh.h"
#include "surogat/log.h"
#include "surogat/par.h"
#include "surogat/stat.h"
#include "surogat/ws.h"

#include "fetch_priv.h"

struct fetch_esi {
    unsigned magic;
#define FETCH_ESI_MAGIC 0x1e5c0a47
    struct busyobj *bo;
    struct esi_parser *p; /* the page is stored identity */
    struct esi_gz *g;     /* the page is stored gzip, in segments */
    struct gz *dec;       /* the backend's gzip, decoded first (FGZ_CHECK, FGZ_GUNZIP) */
    unsigned nlog;        /* messages logged for this page */
};

/* Messages one page may log; the rest are only counted (esi_errors, esi_warnings). */
#define FETCH_ESI_LOG_MAX 4

static bool
feature(enum par_feature f)
{
    return ((par.feature & (1u << f)) != 0);
}

/* esi_log_f: an ESI error or warning in the page, counted, and logged a few at a time. */
static void
esi_log(void *priv, uint64_t off, bool error, const char *msg)
{
    static struct log_limit ll = LOG_LIMIT_INIT;
    struct fetch_esi *fe = priv;
    const struct txt *url = &fe->bo->bereq->url;

    OBJ_CHECK(fe, FETCH_ESI_MAGIC);
    if (error)
        STAT_INC(esi_errors);
    else
        STAT_INC(esi_warnings);
    if (fe->nlog++ >= FETCH_ESI_LOG_MAX)
        return;
    log_limited(&ll, error ? "esi_errors" : "esi_warnings", LOG_WARNING,
                "esi: %.*s: offset %llu: %s%s", (int)SRG_MIN(url->len, 256), url->b,
                (unsigned long long)off, error ? "" : "warning: ", msg);
}

bool
fetch__esi_wanted(const struct busyobj *bo)
{
    if (bo->oc == NULL || bo->beresp->status != 200 || bo->rbody == H1_BODY_NONE ||
        (bo->rbody == H1_BODY_LENGTH && bo->rclen == 0))
        return (false);
    return (bo->pol_esi == 1 || (bo->pol_esi < 0 && esi_wanted(bo->beresp)));
}

void
fetch__oa_begin(struct busyobj *bo)
{
    struct esi_conf c = { 0 };
    struct fetch_esi *fe;

    if (!fetch__esi_wanted(bo)) {
        /* A gzip body stored as it is made or came: where its deflate data lies. */
        if (bo->gz != NULL && bo->oc != NULL && bo->coding == GZ_C_GZIP &&
            (bo->gz_want == FGZ_COMPRESS || bo->gz_want == FGZ_CHECK))
            gz_track(bo->gz);
        return;
    }
    OBJ_NEW(fe, FETCH_ESI_MAGIC);
    fe->bo = bo;
    c.url = ws_strndup(bo->ws, bo->bereq->url.b, bo->bereq->url.len); /* NULL: "/" */
    c.log = esi_log;
    c.log_priv = fe;
    c.no_xml_check = feature(PAR_FEAT_esi_disable_xml_check);
    c.remove_bom = feature(PAR_FEAT_esi_remove_bom);
    c.https_as_http = feature(PAR_FEAT_esi_ignore_https);
    switch (bo->gz_want) {
    case FGZ_COMPRESS:
        gz_free(&bo->gz); /* the segments' encoder replaces the gzip plan's */
        fe->g = esi_gz_new(&c, (int)par.gzip_level);
        break;
    case FGZ_CHECK:
        fe->dec = bo->gz; /* gz_new() bounded it by gunzip_max_ratio and gunzip_max_size */
        bo->gz = NULL;
        AN(fe->dec);
        fe->g = esi_gz_new(&c, (int)par.gzip_level);
        break;
    case FGZ_GUNZIP:
        fe->dec = bo->gz;
        bo->gz = NULL;
        AN(fe->dec);
        fe->p = esi_parser_new(&c, NULL, NULL);
        break;
    case FGZ_NONE:
        fe->p = esi_parser_new(&c, NULL, NULL);
        break;
    }
    bo->esi = fe;
}

/* gz_out_f: bytes of the stored body. */
static int
store_out(void *priv, const char *p, size_t len)
{
    struct busyobj *bo = priv;

    if (bo->oc != NULL)
        fetch__store_body(bo, p, len);
    return (0);
}

/* gz_out_f: identity bytes of the page, decoded: into the parser and the store. */
static int
page_out(void *priv, const char *p, size_t len)
{
    struct fetch_esi *fe = priv;

    if (fe->g != NULL)
        return (esi_gz_feed(fe->g, p, len, store_out, fe->bo) == GZ_OK ? 0 : -1);
    if (esi_parse(fe->p, p, len) != 0)
        return (-1);
    return (store_out(fe->bo, p, len));
}

/* A decoder's failure as fetch__gz_body() reports it. */
static int
dec_result(struct fetch_esi *fe, enum gz_status st)
{
    switch (st) {
    case GZ_OK:
    case GZ_END:
        return (0);
    case GZ_E_BOMB:
        STAT_INC(gunzip_bombs);
        log_msg(LOG_WARNING,
                "gzip: %.*s: backend body inflates past gunzip_max_ratio or "
                "gunzip_max_size: refused, not stored",
                (int)SRG_MIN(fe->bo->bereq->url.len, 256), fe->bo->bereq->url.b);
        return (FETCH_GZ_BOMB);
    case GZ_E_DATA:
    case GZ_E_TRUNCATED:
    case GZ_E_OUTPUT:
        return (-1);
    }
    SRG_WRONG("gz_status");
}

int
fetch__esi_body(struct busyobj *bo, const char *p, size_t len)
{
    struct fetch_esi *fe = bo->esi;

    OBJ_CHECK(fe, FETCH_ESI_MAGIC);
    if (bo->oc == NULL)
        return (0); /* no longer stored (too big, no room): nobody wants the page */
    if (fe->dec != NULL)
        return (dec_result(fe, gz_feed(fe->dec, p, len, GZ_FLUSH_NONE, page_out, fe)));
    return (page_out(fe, p, len) == 0 ? 0 : -1);
}

/* Count what the page held and give back its program (NULL when it holds no ESI). */
static void
account(const struct esi_stats *st, unsigned char **prog, size_t *plen)
{
    if (!st->found) {
        /* Nothing to do per delivery: a plain object (Varnish keeps no program either). */
        free(*prog);
        *prog = NULL;
        *plen = 0;
        return;
    }
    STAT_INC(esi_parsed);
}

int
fetch__oa_end(struct busyobj *bo)
{
    struct fetch_esi *fe = bo->esi;
    struct txt oa[HSH_OA__N] = { { NULL, 0 } };
    unsigned char *prog = NULL;
    struct esi_stats st;
    struct gz_bits bits;
    size_t plen = 0;
    int rv = 0;

    if (bo->oc == NULL)
        return (0);
    if (fe != NULL) {
        OBJ_CHECK(fe, FETCH_ESI_MAGIC);
        /* The decoder checks the backend's gzip ended where its body did. */
        if (fe->dec != NULL &&
            (rv = dec_result(fe, gz_feed(fe->dec, NULL, 0, GZ_FLUSH_FINISH, page_out, fe))) != 0)
            return (rv);
        if (fe->g != NULL) {
            if (esi_gz_finish(fe->g, store_out, bo, &prog, &plen) != GZ_OK)
                return (-1);
            esi_gz_stats(fe->g, &st);
            if (esi_gz_bits(fe->g, &bits))
                oa[HSH_OA_GZBITS] = (struct txt){ (const char *)&bits, sizeof bits };
        } else {
            if (esi_finish(fe->p, &prog, &plen) != 0)
                return (-1);
            esi_parser_stats(fe->p, &st);
        }
        account(&st, &prog, &plen);
        oa[HSH_OA_ESI] = (struct txt){ (const char *)prog, plen };
    } else if (bo->gz != NULL && gz_bits(bo->gz, &bits)) {
        oa[HSH_OA_GZBITS] = (struct txt){ (const char *)&bits, sizeof bits };
    }
    if (bo->oc != NULL && hsh_oa_set(bo->oc, oa) != 0)
        hsh_abandon(&bo->oc, 0); /* no room for them: not stored (the fetch is fine) */
    free(prog);
    return (0);
}

void
fetch__oa_free(struct busyobj *bo)
{
    struct fetch_esi *fe = bo->esi;

    if (fe == NULL)
        return;
    OBJ_CHECK(fe, FETCH_ESI_MAGIC);
    esi_parser_free(&fe->p);
    esi_gz_free(&fe->g);
    gz_free(&fe->dec);
    OBJ_FREE(&bo->esi);
}
