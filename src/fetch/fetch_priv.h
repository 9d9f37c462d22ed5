/*
 * fetch_priv -- shared by the files of the fetch module: the backend
 * request, the cache-side steps (fetch_store.c), the filters.
 */
#ifndef SUROGAT_FETCH_PRIV_H
#define SUROGAT_FETCH_PRIV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "surogat/bcp.h"
#include "surogat/fetch.h"
#include "surogat/gz.h"
#include "surogat/h1.h"
#include "surogat/hsh.h"
#include "surogat/http.h"

struct fetch_te;
struct gz;

/* The backend request of bo in workspace (*head); bo->bereq for the backend hooks. */
enum fetch_result fetch__bereq(struct busyobj *bo, struct txt *head);
/* Count and log a refused response, or a connection out of step, with the request concerned. */
void fetch__refused(const struct busyobj *bo, enum bcp_refuse why);
/*
 * After the response head: keep the busy object only if the response may
 * be stored.  -1 when the policy refused the response (answer 503); -2
 * when its backend_response said "retry" (the busy object is kept).
 */
int fetch__decide_store(struct busyobj *bo);
/*
 * Body bytes for the busy object: stored, or past max_object_size the
 * object is dropped (at once, or after its streaming readers got it all).
 */
void fetch__store_body(struct busyobj *bo, const char *p, size_t len);
/* The whole body is in: publish the busy object (or drop it, see above). */
void fetch__store_done(struct busyobj *bo);
/*
 * The backend said 304 to our revalidation: renew the stale copy into
 * bo->oc and publish it as bo->renewed (referenced; the stale copy itself
 * when there was no room for a renewed one).  -1: the stored head could
 * not be reused (answer 502).
 */
int fetch__revalidated(struct busyobj *bo);

/*
 * gzip (fetch_gz.c).  Plan from the response head, before
 * fetch__decide_store() builds the stored head from the plan.
 */
void fetch__gz_plan(struct busyobj *bo);
/* After fetch__decide_store(): make the filter the plan needs now that storing is decided. */
void fetch__gz_begin(struct busyobj *bo);
/*
 * Body bytes through the filter: the stored bytes go to the busy
 * object, the client's (bo->gz_client) to cl.  0; -1 the backend's gzip
 * is corrupt (the fetch must fail); FETCH_GZ_BOMB it inflates past
 * gunzip_max_size or gunzip_max_ratio (counted and logged here; the
 * fetch must fail); -2 cl failed.
 */
#define FETCH_GZ_BOMB (-4)
int fetch__gz_body(struct busyobj *bo, const char *p, size_t len, bool flush, gz_out_f *cl,
                   void *priv);
/* The body ended: finish the filter.  As fetch__gz_body(). */
int fetch__gz_end(struct busyobj *bo, gz_out_f *cl, void *priv);
void fetch__gz_free(struct busyobj *bo);

/*
 * ESI and object attributes (fetch_esi.c).  After fetch__gz_begin() on a
 * miss: whether the body is parsed for ESI (bo->esi; its bytes then go
 * to fetch__esi_body() instead of the gzip plan's filter), and for a
 * gzip body stored, recording where its deflate data lies.
 */
void fetch__oa_begin(struct busyobj *bo);
/*
 * Whether the response is parsed for ESI: a 200 stored with a body, and
 * someone asked (beresp.do_esi, Surrogate-Control).  Pure; known once the
 * backend_response hook ran, so the gzip plan asks too: an ESI page is
 * stored gzip.
 */
bool fetch__esi_wanted(const struct busyobj *bo);
/* Body bytes of an ESI page.  As fetch__gz_body(), without a client. */
int fetch__esi_body(struct busyobj *bo, const char *p, size_t len);
/*
 * The body is complete (after fetch__gz_end()), before fetch__store_done():
 * the ESI program and gzip bits become the object's attributes.  As
 * fetch__gz_body().
 */
int fetch__oa_end(struct busyobj *bo);
void fetch__oa_free(struct busyobj *bo);

/*
 * Transfer codings (fetch_te.c): a decoder for the fr->ncoding > 0
 * codings of a response, fed the body once its framing is undone.  What
 * comes out goes to sink, each piece valid only during the call.
 */
struct fetch_te *fetch__te_new(const struct h1_framing *fr);
/*
 * 0; what sink returned when it failed; FETCH_TE_CORRUPT when a coding is
 * bad; FETCH_TE_BOMB when one inflates past gunzip_max_size or
 * gunzip_max_ratio.
 */
int fetch__te_feed(struct fetch_te *te, const char *p, size_t len, gz_out_f *sink, void *priv);
#define FETCH_TE_CORRUPT (-3)
#define FETCH_TE_BOMB    (-5)
/* The body ended: every coding must be complete.  As fetch__te_feed(). */
int fetch__te_end(struct fetch_te *te, gz_out_f *sink, void *priv);
void fetch__te_free(struct fetch_te **tep); /* *tep = NULL; NULL is fine */

#endif
