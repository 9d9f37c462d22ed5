/*
 * Content codings in a fetch, Varnish's http_gzip_support done on the
 * fetch side, for gzip, brotli and zstd.  A miss asked the backend for
 * the codings of compress_formats and gzip (fetch__bereq), so its body
 * is one of:
 *
 *   one of those codings from the backend: stored as it came, but run
 *     through a decoder on the way (FGZ_CHECK), so a corrupt body or a
 *     decompression bomb (past gunzip_max_ratio or gunzip_max_size)
 *     fails the fetch instead of becoming an object every later client
 *     gets; the same decoder's output is what the fetching client gets
 *     when it does not take that coding;
 *   compressible identity: compressed once while stored, in the first
 *     coding of compress_formats (FGZ_COMPRESS); the fetching client gets
 *     the compressed bytes if it takes that coding, else the backend's;
 *   anything else: as it came.
 *
 * A fetching client that takes neither the stored coding nor identity
 * best gets the coding it prefers as a later client would (dlv_obj.c),
 * from a second encoder (bo->gz_cl) fed the identity bytes: the backend's,
 * or the decoder's.
 *
 * Later clients get what they prefer among what can be made from the
 * stored body (dlv_obj.c).  The policy may say otherwise
 * (beresp.do_gzip: compress whatever the type and size, or never;
 * beresp.do_gunzip: store and send a coded body decoded, FGZ_GUNZIP).
 *
 * A pass kept the client's Accept-Encoding, so its body suits the client
 * already; with gzip_pass a compressible identity one is compressed on
 * the fly in the coding of compress_formats the client prefers.  Runs on
 * the fetching worker.
 */
#include "config.h"

#include <stdint.h>
#include <strings.h>

#include "surogat/defs.h"
#include "surogat/gz.h"
#include "surogat/hsh.h"
#include "surogat/log.h"
#include "surogat/par.h"
#include "surogat/sb.h"
#include "surogat/stat.h"

#include "fetch_priv.h"

/*
 * beresp.do_gzip: compressed whatever its type and size -- but not a body
 * encoded already, nor a range of one.
 */
static bool
may_force(const struct http *resp)
{
    const struct txt *ce = http_value(resp, "Content-Encoding");

    return (resp->status == 200 && http_find(resp, "Content-Range") == NULL &&
            (ce == NULL || (ce->len == 8 && strncasecmp(ce->b, "identity", 8) == 0)));
}

/*
 * The coding to compress in: for a miss the first of compress_formats (the
 * object serves every client), for a pass the one its client prefers among
 * them.  -1: none (an empty list, or a client taking none of them).
 */
static int
compress_coding(const struct busyobj *bo, const struct gz_ae *ae)
{
    enum gz_coding formats[GZ_C__N];
    unsigned n = gz_formats_now(formats), set = 0;

    if (n == 0)
        return (-1);
    /* An ESI page is stitched from gzip segments, an include spliced whole (dlv_esi.c). */
    if (bo->oc != NULL && (bo->include || fetch__esi_wanted(bo)))
        return (GZ_C_GZIP);
    if (bo->oc != NULL)
        return ((int)formats[0]);
    for (unsigned i = 0; i < n; i++)
        set |= GZ_SET(formats[i]);
    return (gz_ae_best(ae, set, formats, n));
}

static void plan(struct busyobj *bo, const struct gz_ae *ae);
static void plan_client(struct busyobj *bo, const struct gz_ae *ae);

void
fetch__gz_plan(struct busyobj *bo)
{
    struct gz_ae ae;

    gz_ae_init(&ae);
    if (!bo->bg)
        gz_ae_req(&ae, bo->creq);
    plan(bo, &ae);
    plan_client(bo, &ae);
}

/* The plan from the response head and the client's Accept-Encoding. */
static void
plan(struct busyobj *bo, const struct gz_ae *ae)
{
    bool miss = bo->oc != NULL;
    uint64_t len = bo->rbody == H1_BODY_LENGTH ? bo->rclen : UINT64_MAX;
    int rc, c;

    bo->gz_want = FGZ_NONE;
    bo->coding = GZ_C_IDENTITY;
    bo->client_coded = false;
    if (bo->rbody == H1_BODY_NONE || (bo->rbody == H1_BODY_LENGTH && bo->rclen == 0))
        return;
    rc = gz_resp_coding(bo->beresp);
    if (rc > GZ_C_IDENTITY) {
        bo->coding = (enum gz_coding)rc;
        bo->client_coded = gz_ae_takes(ae, bo->coding);
        if (bo->pol_gunzip == 1)
            bo->gz_want = FGZ_GUNZIP;
        else if (miss && par.http_gzip_support)
            bo->gz_want = FGZ_CHECK; /* whatever the status: we asked for it, the client may not */
        return;
    }
    if (bo->pol_gzip == 0 || (c = compress_coding(bo, ae)) < 0)
        return;
    bo->coding = (enum gz_coding)c;
    bo->client_coded = gz_ae_takes(ae, bo->coding);
    if (bo->pol_gzip == 1 && (miss || bo->client_coded) && may_force(bo->beresp)) {
        bo->gz_want = FGZ_COMPRESS;
        return;
    }
    if ((miss ? par.http_gzip_support : par.gzip_pass && bo->client_coded) &&
        gz_compressible(bo->beresp, len, par.gzip_types, par.gzip_min_size))
        bo->gz_want = FGZ_COMPRESS;
}

/* After the plan: the coding the client gets, as a hit would get it (dlv__negotiate()). */
static void
plan_client(struct busyobj *bo, const struct gz_ae *ae)
{
    enum gz_coding formats[GZ_C__N];

    if (bo->gz_want == FGZ_GUNZIP)
        bo->cl_coding = GZ_C_IDENTITY;
    else if (bo->oc != NULL && fetch__esi_wanted(bo))
        bo->cl_coding = fetch_codings(bo).store; /* delivered from the store once complete */
    else if (bo->gz_want == FGZ_NONE || bo->client_coded || bo->oc == NULL)
        bo->cl_coding = bo->client_coded || bo->gz_want == FGZ_NONE ? bo->coding : GZ_C_IDENTITY;
    else
        bo->cl_coding = gz_negotiate_held(ae, bo->coding, 0, formats, gz_formats_now(formats)).send;
}

struct fetch_codings
fetch_codings(const struct busyobj *bo)
{
    enum gz_coding c = bo->coding, i = GZ_C_IDENTITY;

    OBJ_CHECK(bo, BUSYOBJ_MAGIC);
    switch (bo->gz_want) {
    case FGZ_NONE:
        return ((struct fetch_codings){ c, c, c });
    case FGZ_CHECK:
        /* An ESI page is decoded and stored again in gzip segments (fetch_esi.c). */
        if (bo->oc != NULL && fetch__esi_wanted(bo))
            return ((struct fetch_codings){ c, GZ_C_GZIP, bo->cl_coding });
        return ((struct fetch_codings){ c, c, bo->cl_coding });
    case FGZ_COMPRESS:
        return ((struct fetch_codings){ i, c, bo->cl_coding });
    case FGZ_GUNZIP:
        return ((struct fetch_codings){ c, i, i });
    }
    SRG_WRONG("fetch_gz");
}

/* Count a body the fetch compresses for the cache, or checks from the backend, per coding. */
static void
count(enum gz_coding c, bool compressed)
{
    switch (c) {
    case GZ_C_GZIP:
        if (compressed)
            STAT_INC(gzip_compressed);
        else
            STAT_INC(gzip_backend);
        return;
    case GZ_C_BR:
        if (compressed)
            STAT_INC(br_compressed);
        else
            STAT_INC(br_backend);
        return;
    case GZ_C_ZSTD:
        if (compressed)
            STAT_INC(zstd_compressed);
        else
            STAT_INC(zstd_backend);
        return;
    case GZ_C_IDENTITY:
    case GZ_C__N:
        break;
    }
    SRG_WRONG("fetch_gz coding");
}

/* A decoder's output goes to the client: counted as a body made for it. */
static void
count_decoded(const struct busyobj *bo)
{
    if (bo->head_only)
        return;
    STAT_INC(transcode_delivered);
    if (bo->coding == GZ_C_GZIP)
        STAT_INC(gunzip_delivered);
}

void
fetch__gz_begin(struct busyobj *bo)
{
    switch (bo->gz_want) {
    case FGZ_NONE:
        return;
    case FGZ_CHECK:
        /* Not stored, and the client takes the coding: nothing needs the decoder. */
        if (bo->oc == NULL && bo->client_coded)
            return;
        bo->gz = gz_new(gz_coding_decoder(bo->coding), 0);
        bo->gz_client = bo->cl_coding != bo->coding && !bo->bg;
        if (bo->gz_client && bo->cl_coding != GZ_C_IDENTITY)
            bo->gz_cl = gz_new(gz_coding_encoder(bo->cl_coding), gz_coding_level(bo->cl_coding));
        if (bo->oc != NULL)
            count(bo->coding, false);
        if (bo->gz_client)
            count_decoded(bo);
        return;
    case FGZ_GUNZIP:
        /* Stored decoded: every client gets the decoder's output. */
        bo->gz = gz_new(gz_coding_decoder(bo->coding), 0);
        bo->gz_client = !bo->bg;
        if (bo->gz_client)
            count_decoded(bo);
        return;
    case FGZ_COMPRESS:
        if (bo->oc == NULL && !((par.gzip_pass || bo->pol_gzip == 1) && bo->client_coded))
            return;
        bo->gz = gz_new(gz_coding_encoder(bo->coding), gz_coding_level(bo->coding));
        bo->gz_client = bo->cl_coding != GZ_C_IDENTITY && !bo->bg;
        if (bo->gz_client && bo->cl_coding != bo->coding) {
            bo->gz_cl = gz_new(gz_coding_encoder(bo->cl_coding), gz_coding_level(bo->cl_coding));
            count_decoded(bo);
        }
        if (bo->oc != NULL)
            count(bo->coding, true);
        else
            STAT_INC(gzip_pass);
        return;
    }
    SRG_WRONG("fetch_gz");
}

/* Where the filter's output goes: the store (compressed bytes), then the client. */
struct sink {
    struct busyobj *bo;
    gz_out_f *cl;
    void *priv;
};

/* Whether the client still takes the filters' output. */
static bool
client_wants(const struct busyobj *bo)
{
    return (bo->gz_client && !bo->client_failed);
}

static int
sink_out(void *priv, const char *p, size_t len)
{
    struct sink *s = priv;
    struct busyobj *bo = s->bo;

    if ((bo->gz_want == FGZ_COMPRESS || bo->gz_want == FGZ_GUNZIP) && bo->oc != NULL)
        fetch__store_body(bo, p, len);
    if (!bo->gz_client)
        return (0);
    if (bo->gz_cl == NULL)
        return (s->cl(s->priv, p, len));
    /* Decoded bytes on to the client's encoder; the compressor's are the store's alone. */
    if (bo->gz_want != FGZ_CHECK || !client_wants(bo))
        return (0);
    return (gz_feed(bo->gz_cl, p, len, GZ_FLUSH_NONE, s->cl, s->priv) == GZ_OK ? 0 : -1);
}

static int
result(const struct busyobj *bo, enum gz_status st)
{
    char buf[160];
    struct sb sb;

    switch (st) {
    case GZ_OK:
    case GZ_END:
        return (0);
    case GZ_E_OUTPUT:
        return (-2);
    case GZ_E_DATA:
    case GZ_E_TRUNCATED:
        return (-1); /* counted (gzip_errors) and logged by the fetch, as a refused body */
    case GZ_E_BOMB:
        /* Refused like a corrupt body: nothing stored, and the client sees a failure. */
        STAT_INC(gunzip_bombs);
        sb_init(&sb, buf, sizeof buf);
        gz_explain(bo->gz, &sb);
        log_msg(LOG_WARNING, "gzip: %.*s: backend body %s: refused, not stored",
                (int)SRG_MIN(bo->creq->url.len, 256), bo->creq->url.b, sb.buf);
        return (FETCH_GZ_BOMB);
    }
    SRG_WRONG("gz_status");
}

/* Whether anyone still wants the filter's work: the store, or the client. */
static bool
wanted(const struct busyobj *bo)
{
    return (bo->oc != NULL || (bo->gz_client && !bo->client_failed));
}

int
fetch__gz_body(struct busyobj *bo, const char *p, size_t len, bool flush, gz_out_f *cl, void *priv)
{
    enum gz_flush fl = flush ? GZ_FLUSH_SYNC : GZ_FLUSH_NONE;
    struct sink s = { bo, cl, priv };
    int rv = 0;

    AN(bo->gz);
    if (bo->gz_want == FGZ_CHECK && bo->oc != NULL && len > 0)
        fetch__store_body(bo, p, len);
    if (!wanted(bo))
        return (0);
    /* The client's encoder takes the backend's identity bytes as they are. */
    if (bo->gz_cl != NULL && bo->gz_want == FGZ_COMPRESS && client_wants(bo) && (len > 0 || flush))
        rv = result(bo, gz_feed(bo->gz_cl, p, len, fl, cl, priv));
    /* Only an encoder holds output back; a decoder hands out all it has each time. */
    if (rv == 0 && (len > 0 || (flush && bo->gz_want == FGZ_COMPRESS)))
        rv = result(bo, gz_feed(bo->gz, p, len, fl, sink_out, &s));
    if (rv == 0 && flush && bo->gz_cl != NULL && bo->gz_want == FGZ_CHECK && client_wants(bo))
        rv = result(bo, gz_feed(bo->gz_cl, NULL, 0, fl, cl, priv));
    return (rv);
}

int
fetch__gz_end(struct busyobj *bo, gz_out_f *cl, void *priv)
{
    struct sink s = { bo, cl, priv };
    int rv;

    AN(bo->gz);
    if (!wanted(bo))
        return (0);
    rv = result(bo, gz_feed(bo->gz, NULL, 0, GZ_FLUSH_FINISH, sink_out, &s));
    if (rv == 0 && bo->gz_cl != NULL && client_wants(bo))
        rv = result(bo, gz_feed(bo->gz_cl, NULL, 0, GZ_FLUSH_FINISH, cl, priv));
    return (rv);
}

void
fetch__gz_free(struct busyobj *bo)
{
    if (bo->gz == NULL) {
        gz_free(&bo->gz_cl);
        return;
    }
    if (bo->gz_want == FGZ_COMPRESS && bo->coding == GZ_C_GZIP) {
        STAT_ADD(gzip_bytes_in, gz_bytes_in(bo->gz));
        STAT_ADD(gzip_bytes_out, gz_bytes_out(bo->gz));
    }
    gz_free(&bo->gz);
    gz_free(&bo->gz_cl);
}
