/*
 * The cache side of a fetch: deciding whether a response is stored,
 * building the stored head, and renewing a stale copy on a 304.  Runs on
 * the worker of the request that fetches (or of a background refresh,
 * bo->bg, which delivers nothing); the busy object is its own
 * until hsh_unbusy() or hsh_abandon().
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "surogat/cc.h"
#include "surogat/defs.h"
#include "surogat/fresh.h"
#include "surogat/gz.h"
#include "surogat/h1.h"
#include "surogat/hsh.h"
#include "surogat/http.h"
#include "surogat/par.h"
#include "surogat/pol.h"
#include "surogat/sb.h"
#include "surogat/stat.h"
#include "surogat/sto.h"
#include "surogat/tim.h"
#include "surogat/trace.h"
#include "surogat/wrk.h"

#include "fetch_priv.h"

/* The cache's parameters as the freshness rules take them. */
static struct fresh_cfg
fresh_cfg_now(void)
{
    struct fresh_cfg cfg = FRESH_CFG_DEFAULT;

    cfg.default_ttl = par.default_ttl;
    cfg.default_grace = par.default_grace;
    cfg.default_sie = par.default_stale_if_error;
    cfg.heuristic_max = par.heuristic_max;
    return (cfg);
}

/*
 * Serialise h as oc's stored head (malloc'ed: it lives as long as the
 * object), without the fields no later client may get (rcc: h's own
 * directives).  Every stored head passes here, a fetched response's and a
 * 304's merge alike, so no path can keep one client's Set-Cookie.
 */
static void
set_head(struct cobj *oc, struct http *h, const struct cc *rcc)
{
    size_t cap = 512;
    struct sb sb;
    char *buf;

    /* In order: fields of one name keep theirs (RFC 9110 section 5.3). */
    unsigned kept = 0;
    for (unsigned i = 0; i < h->nhdr; i++) {
        if (fresh_field_storable(&h->hdr[i].name, rcc))
            h->hdr[kept++] = h->hdr[i];
        else if (http_name_eq(&h->hdr[i].name, "Set-Cookie"))
            STAT_INC(cache_set_cookie_stripped);
    }
    h->nhdr = kept;
    for (unsigned i = 0; i < h->nhdr; i++)
        cap += h->hdr[i].name.len + h->hdr[i].val.len + 4;
    buf = malloc(cap);
    AN(buf);
    sb_init(&sb, buf, cap);
    h1_write_response(&sb, h);
    AN(sb_ok(&sb));
    hsh_head_set(oc, buf, sb.len);
    free(buf);
    oc->status = h->status;
    oc->has_validator = http_find(h, "ETag") != NULL || http_find(h, "Last-Modified") != NULL;
}

/* The form of the stored body (gz.h): what every later delivery negotiates from. */
static uint8_t
stored_form(const struct busyobj *bo)
{
    int c;

    switch (bo->gz_want) {
    case FGZ_COMPRESS:
        return ((uint8_t)(bo->coding | GZ_FORM_MADE));
    case FGZ_CHECK:
        if (fetch_codings(bo).store != bo->coding)
            return ((uint8_t)(GZ_C_GZIP | GZ_FORM_MADE)); /* an ESI page, made gzip again */
        return ((uint8_t)bo->coding);
    case FGZ_GUNZIP:
        return (GZ_C_IDENTITY | GZ_FORM_MADE);
    case FGZ_NONE:
        c = gz_resp_coding(bo->beresp);
        return ((uint8_t)(c < 0 ? GZ_FORM_OTHER : (unsigned)c));
    }
    SRG_WRONG("fetch_gz");
}

/*
 * A stored head: the status line and fields of the backend response as
 * every later client gets them, minus what is per connection or per
 * delivery (hop-by-hop fields, framing, Age), ending with the empty line.
 * malloc'ed: it lives as long as the object.
 */
static int
store_head(struct busyobj *bo, const struct cc *rcc)
{
    struct http h;
    struct http_hdr *hdrs;
    struct cobj *oc = bo->oc;
    char date[TIM_HTTP_DATE_LEN + 1];
    struct fetch_codings cd;

    hdrs = ws_alloc(bo->ws, (bo->beresp->nhdr + 6) * sizeof *hdrs);
    if (hdrs == NULL)
        return (-1);
    http_init(&h, hdrs, bo->beresp->nhdr + 6);
    memcpy(hdrs, bo->beresp->hdr, bo->beresp->nhdr * sizeof *hdrs);
    h.nhdr = bo->beresp->nhdr;
    h.proto = 11;
    h.status = bo->beresp->status;
    h.reason = bo->beresp->reason.len > 0 ? bo->beresp->reason
                                        : (struct txt){ http_reason(h.status),
                                                        strlen(http_reason(h.status)) };
    http_strip_hop_by_hop(&h);
    http_unset(&h, "Content-Length");
    http_unset(&h, "Age");
    /*
     * Surrogate-Control is for us alone (Edge Architecture); CDN-Cache-Control
     * stays: CDN layers in front of us may use it too (RFC 9213 section 2).
     */
    http_unset(&h, "Surrogate-Control");
    if (http_find(&h, "Date") == NULL) {
        tim_http_date(bo->t_resp, date);
        AZ(http_add(&h, TXT_LIT("Date"), (struct txt){ date, TIM_HTTP_DATE_LEN }));
    }
    if (par.via)
        AZ(http_add(&h, TXT_LIT("Via"),
                    bo->beresp->proto == 10 ? TXT_LIT("1.0 surogat") : TXT_LIT("1.1 surogat")));
    /*
     * The stored body is coded either way (it serves clients with and
     * without that coding), or decoded on the policy's word.
     */
    cd = fetch_codings(bo);
    if (bo->gz_want != FGZ_NONE && gz_head_coding(&h, bo->ws, cd.be, cd.store) != 0)
        return (-1);
    set_head(oc, &h, rcc);
    oc->form = stored_form(bo);
    return (0);
}

/*
 * The policy's backend_response hook on a miss: it sees RFC 9111's
 * verdict as beresp.ttl, grace, stale_if_error and uncacheable, and what
 * it sets replaces that verdict.  -1 when the response must not reach
 * the client (the hook failed or abandoned it), -2 when it said "retry".
 */
static int
policy_store(struct busyobj *bo, const struct cc *rcc, const struct fresh_cfg *cfg,
             enum fresh_store *st)
{
    struct fresh_obj *fo = &bo->oc->fresh;
    enum pol_act act;
    double age = *st == FRESH_STORE ? bo->t_resp - fo->t_origin : 0;
    struct pol_beresp br = {
        .bereq = bo->bereq,
        .resp = bo->beresp,
        .ttl = *st == FRESH_STORE ? fo->ttl - age : 0,
        .grace = *st == FRESH_STORE ? fo->swr : 0,
        .stale_if_error = *st == FRESH_STORE ? fo->sie : 0,
        .keep = -1,
        .do_gzip = -1,
        .do_gunzip = -1,
        .do_stream = -1,
        .do_esi = -1,
        .uncacheable = *st != FRESH_STORE,
    };

    if (br.ttl < 0)
        br.ttl = 0;
    act = pol_backend_response(bo->pol, &br);
    if (br.overtaken)
        hsh_overtake(bo->oc);
    bo->pol_gzip = br.do_gzip;
    bo->pol_gunzip = br.do_gunzip;
    bo->hold = br.do_stream == 0;
    bo->pol_esi = br.do_esi;
    switch (act) {
    case POL_DELIVER:
        break;
    case POL_PASS:
        *st = FRESH_POLICY;
        return (0);
    case POL_RETRY:
        return (-2);
    default:
        return (-1);
    }
    if (!br.changed)
        return (0);
    if (br.uncacheable || br.ttl <= 0) {
        *st = FRESH_POLICY;
        return (0);
    }
    if (*st != FRESH_STORE) {
        /* Stored on the policy's word: the fields still give the validators and the Age. */
        fresh_obj_init(fo, bo->beresp, rcc, bo->t_req, bo->t_resp, cfg);
        age = bo->t_resp - fo->t_origin;
    }
    fo->ttl = age + br.ttl;
    fo->swr = br.grace;
    fo->sie = br.stale_if_error;
    fo->keep = (float)br.keep;
    fo->src = FRESH_SRC_POLICY; /* whatever the fields said, the ttl is the policy's now */
    fo->flags &= (uint16_t)~FRESH_F_NO_CACHE;
    *st = FRESH_STORE;
    return (0);
}

/* RFC 9111's verdict on the response, with its timing in the busy object when stored. */
static enum fresh_store
verdict(struct busyobj *bo, const struct cc *qcc, const struct cc *rcc, const struct fresh_cfg *cfg)
{
    enum fresh_store st = fresh_storable(bo->creq, qcc, bo->beresp, rcc, cfg);

    if (st == FRESH_STORE) {
        fresh_obj_init(&bo->oc->fresh, bo->beresp, rcc, bo->t_req, bo->t_resp, cfg);
        /*
         * Until revalidation exists, an object that every use must
         * revalidate -- stale on arrival (max-age below its Age), or
         * no-cache -- would be stored and never used, and requests would
         * queue behind each other's fetches: treat it as uncacheable.
         */
        if (bo->oc->fresh.flags & FRESH_F_NO_CACHE)
            st = FRESH_NO_CACHE;
        else if (bo->oc->fresh.t_origin + bo->oc->fresh.ttl <= bo->t_resp)
            st = FRESH_STALE_ON_ARRIVAL;
    }
    return (st);
}

/*
 * After the response head: keep the busy object only if the response may
 * be stored.  -1 when the policy refused the response: answer 503; -2
 * when it asked for the fetch again (the busy object is kept).
 */
int
fetch__decide_store(struct busyobj *bo)
{
    struct fresh_cfg cfg;
    struct cc qcc, rcc;
    enum fresh_store st;
    double hfm_ttl = par.hitmiss_ttl;
    int rv;

    cfg = fresh_cfg_now();
    cc_parse_request(bo->creq, &qcc);
    cc_parse_response(bo->beresp, NULL, &rcc);
    st = verdict(bo, &qcc, &rcc, &cfg);
    if (pol_active() && (rv = policy_store(bo, &rcc, &cfg, &st)) != 0) {
        if (rv == -1)
            hsh_abandon(&bo->oc, 0);
        return (rv); /* -2: "retry", with the busy object kept for it */
    }
    /*
     * The hook removed the Set-Cookie that alone kept the response out
     * (VCL's unset beresp.http.Set-Cookie): judged again without it.
     */
    if (st == FRESH_SET_COOKIE && http_find(bo->beresp, "Set-Cookie") == NULL)
        st = verdict(bo, &qcc, &rcc, &cfg);
    /* After the policy, which may have changed the fields gzip depends on. */
    fetch__gz_plan(bo);
    /* A marker must not outlive a reason that belongs to this request alone. */
    if (st == FRESH_NO_STORE_REQ || st == FRESH_AUTHORIZATION || st == FRESH_METHOD)
        hfm_ttl = 0;
    /* Markers and objects alike answer only requests with the same Vary values. */
    if (hsh_set_vary(bo->oc, bo->creq, bo->beresp) != 0) {
        st = FRESH_VARY_TOO_LONG;
        hfm_ttl = 0;
    }
    /*
     * Too big to keep (max_object_size, or the whole store): the client
     * still gets all of it; a marker lets the next requests pass at once
     * instead of queueing for a fetch that will not be stored either.
     */
    if (st == FRESH_STORE && bo->rbody == H1_BODY_LENGTH &&
        ((par.max_object_size > 0 && bo->rclen > par.max_object_size) || bo->rclen > sto_size())) {
        STAT_INC(cache_too_big);
        bo->store_why = FRESH_TOO_BIG;
        TRACE_STORE(bo->trace, FRESH_TOO_BIG, NULL, 0, 0, hfm_ttl);
        hsh_abandon(&bo->oc, hfm_ttl);
        return (0);
    }
    if (st == FRESH_STORE) {
        /* A compressed (or decoded) body's length is known only at its end. */
        if (bo->rbody == H1_BODY_LENGTH && bo->gz_want != FGZ_COMPRESS &&
            bo->gz_want != FGZ_GUNZIP)
            bo->oc->body.size_hint = bo->rclen;
        if (store_head(bo, &rcc) == 0 && hsh_store_begin(bo->oc) == 0) {
            TRACE_STORE(bo->trace, st, &bo->oc->fresh, bo->t_resp, par.default_keep, 0);
            return (0);
        }
        /*
         * No room, or the admission policy preferred what is stored: the
         * response was cacheable, and the next request may find room or
         * a higher frequency.  A marker would pass the URL for
         * hitmiss_ttl, and hold heap no store accounts for.
         */
        st = FRESH_STORE_FAILED;
        hfm_ttl = 0;
    }
    STAT_INC(cache_uncacheable);
    bo->store_why = st;
    TRACE_STORE(bo->trace, st, NULL, 0, 0, hfm_ttl);
    hsh_abandon(&bo->oc, hfm_ttl);
    return (0);
}

/*
 * Store body bytes in the busy object.  Past max_object_size the object
 * is not kept: abandoned at once, or -- when requests already stream from
 * it and need the rest -- filled to the end and then abandoned.
 */
void
fetch__store_body(struct busyobj *bo, const char *p, size_t len)
{
    uint64_t max = par.max_object_size;

    if (!bo->keep_for_readers && max > 0 && bo->body_off + len > max) {
        STAT_INC(cache_too_big);
        TRACE_STORE(bo->trace, FRESH_TOO_BIG, NULL, 0, 0, par.hitmiss_ttl);
        if (hsh_stream_close(bo->oc)) {
            bo->keep_for_readers = true;
        } else {
            hsh_abandon(&bo->oc, par.hitmiss_ttl);
            return;
        }
    }
    if (hsh_append(bo->oc, p, len) != 0) {
        TRACE_STORE(bo->trace, FRESH_STORE_FAILED, NULL, 0, 0, 0);
        hsh_abandon(&bo->oc, 0); /* no room: the client still gets everything */
    }
}

/*
 * The whole body is in: publish the object -- or, past max_object_size,
 * let its readers finish and drop it -- before the client gets its last
 * bytes, so that the client's next request finds it complete.
 */
void
fetch__store_done(struct busyobj *bo)
{
    if (bo->oc == NULL)
        return;
    bo->oc->body_complete = true;
    if (bo->keep_for_readers) {
        hsh_abandon(&bo->oc, par.hitmiss_ttl);
        return;
    }
    STAT_INC(cache_stored);
    hsh_unbusy(&bo->oc);
}

/* Fields a 304 must not change in the stored response (RFC 9111 section 3.2). */
static const char *const keep_on_304[] = {
    "Content-Length", "Content-Encoding", "Content-Range", "Age",
};

/*
 * Whether field u of a 304 is the strong ETag that the stored head holds
 * weakened, because the cache encoded the body (form): the stored body is
 * still not the origin's bytes, so its ETag stays as it is.
 */
static bool
gz_weakened(const struct http *stored, unsigned form, const struct http_hdr *u)
{
    const struct txt *v;

    /* Stored before forms were recorded: only gzip was made, with no suffix. */
    if (form == HSH_FORM_UNKNOWN)
        form = GZ_FORM_MADE | GZ_C_GZIP;
    if (!(form & GZ_FORM_MADE) || !http_name_eq(&u->name, "ETag"))
        return (false);
    v = http_value(stored, "ETag");
    return (v != NULL && gz_etag_derived(v, &u->val, (enum gz_coding)(form & GZ_FORM_CODING)));
}

/*
 * The backend answered our conditional request with 304: the stale copy
 * is good.  Build its renewed copy -- the stored fields updated with
 * those of the 304 (RFC 9111 section 4.3.4) and the same body -- publish
 * it and deliver it.  -1 if the stored head could not be reused (then the
 * caller answers 502).
 */
int
fetch__revalidated(struct busyobj *bo)
{
    struct cobj *old = bo->stale.oc, *oc = bo->oc;
    struct h1_limits lim;
    struct fresh_cfg cfg;
    struct http oh, upd, merged;
    struct http_hdr *hdrs;
    struct cc rcc;
    unsigned n304 = bo->beresp->nhdr;
    const char *head;
    size_t used, hlen;

    head = hsh_head_text(old, bo->ws, &hlen);
    hdrs = ws_alloc(bo->ws, 1024 * sizeof *hdrs);
    if (head == NULL || hdrs == NULL)
        return (-1);
    lim = (struct h1_limits){ hlen + 1, hlen + 1, 1024 };
    http_init(&oh, hdrs, 1024);
    if (h1_parse_response(head, hlen, &lim, &oh, &used) != H1_DONE)
        return (-1);
    hdrs = ws_alloc(bo->ws, (oh.nhdr + n304 + 3) * sizeof *hdrs);
    if (hdrs == NULL)
        return (-1);
    http_init(&merged, hdrs, oh.nhdr + n304 + 3);
    memcpy(hdrs, oh.hdr, oh.nhdr * sizeof *hdrs);
    merged.nhdr = oh.nhdr;
    merged.proto = 11;
    merged.status = oh.status;
    merged.reason = oh.reason;
    upd = *bo->beresp;
    http_strip_hop_by_hop(&upd);
    for (unsigned i = 0; i < upd.nhdr; i++) {
        bool keep = false;
        for (size_t k = 0; k < ARRAY_LEN(keep_on_304) && !keep; k++)
            keep = http_name_eq(&upd.hdr[i].name, keep_on_304[k]);
        if (keep || gz_weakened(&oh, old->form, &upd.hdr[i]))
            continue;
        /* Replace every stored field of that name with the 304's (all of them, in order). */
        char name[128];
        if (upd.hdr[i].name.len >= sizeof name)
            continue;
        memcpy(name, upd.hdr[i].name.b, upd.hdr[i].name.len);
        name[upd.hdr[i].name.len] = '\0';
        bool first = true;
        for (unsigned j = 0; j < i; j++)
            if (http_name_eq(&upd.hdr[j].name, name))
                first = false;
        if (first)
            http_unset(&merged, name);
        AZ(http_add(&merged, upd.hdr[i].name, upd.hdr[i].val));
    }
    /* A 304 without Date is dated on arrival (RFC 9110 6.6.1), not by the old copy's Date. */
    if (http_find(bo->beresp, "Date") == NULL) {
        char *date = ws_alloc(bo->ws, TIM_HTTP_DATE_LEN + 1);
        if (date == NULL)
            return (-1);
        tim_http_date(bo->t_resp, date);
        http_unset(&merged, "Date");
        AZ(http_add(&merged, TXT_LIT("Date"), (struct txt){ date, TIM_HTTP_DATE_LEN }));
    }
    cfg = fresh_cfg_now();
    cc_parse_response(&merged, NULL, &rcc);
    fresh_obj_init(&oc->fresh, &merged, &rcc, bo->t_req, bo->t_resp, &cfg);
    set_head(oc, &merged, &rcc);
    oc->form = old->form;
    if (old->vary_len > 0) {
        oc->vary = malloc(old->vary_len);
        AN(oc->vary);
        memcpy(oc->vary, old->vary, old->vary_len);
        oc->vary_len = old->vary_len;
    }
    oc->body.size_hint = old->body.len;
    bo->stored = false;
    if (hsh_store_begin(oc) != 0) {
        /* No room for a renewed copy: the client still gets the validated one. */
        hsh_abandon(&bo->oc, 0);
        hsh_ref(old);
        bo->renewed = old;
        return (0);
    }
    for (const struct sto_seg *s = old->body.first; s != NULL; s = s->next) {
        if (hsh_append(oc, s->data, s->len) != 0) {
            hsh_abandon(&bo->oc, 0);
            hsh_ref(old);
            bo->renewed = old;
            return (0);
        }
    }
    /* The same body: the same attributes (an ESI program, gzip bits). */
    if (hsh_oa_copy(oc, old) != 0) {
        hsh_abandon(&bo->oc, 0);
        hsh_ref(old);
        bo->renewed = old;
        return (0);
    }
    oc->body_complete = true;
    STAT_INC(cache_revalidated);
    TRACE_STORE(bo->trace, FRESH_STORE, &oc->fresh, bo->t_resp, par.default_keep, 0);
    bo->stored = true;
    hsh_ref(oc);
    bo->renewed = oc;
    hsh_unbusy(&bo->oc);
    return (0);
}
