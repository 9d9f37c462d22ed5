/*
 * gzip in a fetch, Varnish's http_gzip_support done on the fetch side.
 * A miss asked the backend for gzip (fetch__bereq), so its body is one of:
 *
 *   gzip from the backend: stored as it came, but run through a decoder
 *     on the way (FGZ_CHECK), so a corrupt body or a decompression bomb
 *     (past gunzip_max_ratio or gunzip_max_size) fails the fetch instead
 *     of becoming an object every later client gets; the same decoder's
 *     output is what a client that does not take gzip receives;
 *   compressible identity: compressed once while stored (FGZ_COMPRESS);
 *     a client taking gzip gets the compressed bytes, another the
 *     backend's own;
 *   anything else: as it came.
 *
 * The policy may say otherwise (beresp.do_gzip: compress whatever the
 * type and size, or never; beresp.do_gunzip: store and send a gzip body
 * decoded, FGZ_GUNZIP).
 *
 * A pass kept the client's Accept-Encoding, so its body suits the client
 * already; with gzip_pass a compressible identity one is compressed on
 * the fly for a client that takes gzip.  Runs on the fetching worker.
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

void
fetch__gz_plan(struct busyobj *bo)
{
    bool miss = bo->oc != NULL;
    uint64_t len = bo->rbody == H1_BODY_LENGTH ? bo->rclen : UINT64_MAX;

    bo->gz_want = FGZ_NONE;
    bo->client_gz = !bo->bg && gz_accepts(bo->creq);
    if (bo->rbody == H1_BODY_NONE || (bo->rbody == H1_BODY_LENGTH && bo->rclen == 0))
        return;
    if (bo->pol_gunzip == 1 && gz_is_gzip(bo->beresp)) {
        bo->gz_want = FGZ_GUNZIP;
        return;
    }
    if (miss && par.http_gzip_support && gz_is_gzip(bo->beresp)) {
        /* Whatever the status: we asked for gzip, the client may not have. */
        bo->gz_want = FGZ_CHECK;
        return;
    }
    if (bo->pol_gzip == 0)
        return;
    if (bo->pol_gzip == 1 && (miss || bo->client_gz) && may_force(bo->beresp)) {
        bo->gz_want = FGZ_COMPRESS;
        return;
    }
    if ((miss ? par.http_gzip_support : par.gzip_pass && bo->client_gz) &&
        gz_compressible(bo->beresp, len, par.gzip_types, par.gzip_min_size))
        bo->gz_want = FGZ_COMPRESS;
}

void
fetch__gz_begin(struct busyobj *bo)
{
    switch (bo->gz_want) {
    case FGZ_NONE:
        return;
    case FGZ_CHECK:
        /* Not stored, and the client takes gzip: nothing needs the decoder. */
        if (bo->oc == NULL && bo->client_gz)
            return;
        bo->gz = gz_new(GZ_DECODE, 0);
        bo->gz_client = !bo->client_gz && !bo->bg;
        if (bo->oc != NULL)
            STAT_INC(gzip_backend);
        if (bo->gz_client && !bo->head_only)
            STAT_INC(gunzip_delivered);
        return;
    case FGZ_GUNZIP:
        /* Stored decoded: every client gets the decoder's output. */
        bo->gz = gz_new(GZ_DECODE, 0);
        bo->gz_client = !bo->bg;
        if (bo->gz_client && !bo->head_only)
            STAT_INC(gunzip_delivered);
        return;
    case FGZ_COMPRESS:
        if (bo->oc == NULL && !((par.gzip_pass || bo->pol_gzip == 1) && bo->client_gz))
            return;
        bo->gz = gz_new(GZ_ENCODE, (int)par.gzip_level);
        bo->gz_client = bo->client_gz && !bo->bg;
        if (bo->oc != NULL)
            STAT_INC(gzip_compressed);
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

static int
sink_out(void *priv, const char *p, size_t len)
{
    struct sink *s = priv;
    struct busyobj *bo = s->bo;

    if ((bo->gz_want == FGZ_COMPRESS || bo->gz_want == FGZ_GUNZIP) && bo->oc != NULL)
        fetch__store_body(bo, p, len);
    return (bo->gz_client ? s->cl(s->priv, p, len) : 0);
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
    struct sink s = { bo, cl, priv };

    AN(bo->gz);
    if (bo->gz_want == FGZ_CHECK && bo->oc != NULL && len > 0)
        fetch__store_body(bo, p, len);
    if (!wanted(bo))
        return (0);
    /* Only an encoder holds output back; a decoder hands out all it has each time. */
    if (len == 0 && (!flush || bo->gz_want != FGZ_COMPRESS))
        return (0);
    return (result(bo, gz_feed(bo->gz, p, len, flush ? GZ_FLUSH_SYNC : GZ_FLUSH_NONE, sink_out, &s)));
}

int
fetch__gz_end(struct busyobj *bo, gz_out_f *cl, void *priv)
{
    struct sink s = { bo, cl, priv };

    AN(bo->gz);
    if (!wanted(bo))
        return (0);
    return (result(bo, gz_feed(bo->gz, NULL, 0, GZ_FLUSH_FINISH, sink_out, &s)));
}

void
fetch__gz_free(struct busyobj *bo)
{
    if (bo->gz == NULL)
        return;
    if (bo->gz_want == FGZ_COMPRESS) {
        STAT_ADD(gzip_bytes_in, gz_bytes_in(bo->gz));
        STAT_ADD(gzip_bytes_out, gz_bytes_out(bo->gz));
    }
    gz_free(&bo->gz);
}
