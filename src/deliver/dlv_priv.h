/*
 * dlv_priv -- shared by the deliverer's files: the plan of a delivery,
 * made before anything is sent.
 */
#ifndef SUROGAT_DLV_PRIV_H
#define SUROGAT_DLV_PRIV_H

#include <stdbool.h>
#include <stdint.h>

#include "surogat/http.h"
#include "surogat/pol.h"
#include "surogat/tp.h"

struct cobj;
struct req;

/* A body length not known yet (a busy object streamed chunked, a gunzipped body). */
#define DLV_LEN_UNKNOWN UINT64_MAX

struct dlv_plan {
    struct tp_head head;   /* what the transport gets */
    bool nm;               /* 304 */
    bool gunzip;           /* a gzip body for a client that does not take gzip */
    enum http_range range; /* 206 (OK), 416 (UNSATISFIABLE) or the whole body */
    uint64_t len;          /* the body's length, or DLV_LEN_UNKNOWN */
    uint64_t first;        /* the body bytes to send: [first, last] */
    uint64_t last;
    unsigned hits;         /* the deliver hook's obj.hits: the object's count, 0 for a miss */
    char tail[320];        /* this delivery's own fields: Age, Cache-Status, Content-Range */
    struct pol_synth syn;  /* the plan was refused: answer this (status 0: restart) */
};

/*
 * Plan the delivery of the stored object oc, whose body has len bytes
 * (DLV_LEN_UNKNOWN: still growing, length not announced) at `now`; fwd:
 * NULL for a hit, else the Cache-Status forward detail; hits: obj.hits for
 * the deliver hook.  Runs the deliver hook.  0, or -1 when the plan is
 * refused (dlv__refused()).
 */
int dlv__plan_obj(struct req *req, const struct cobj *oc, uint64_t len, double now,
                  const char *fwd, unsigned hits, struct dlv_plan *d);
/* hp's fields as one head block (http_write_fields()), in workspace.  -1 when it is full. */
int dlv__fields_block(struct req *req, const struct http *hp, struct txt *out);
/* The deliver hook on a finished plan's head.  0, or -1 as dlv__plan_obj(). */
int dlv__finish_head(struct req *req, struct dlv_plan *d);
/* A refused plan: its synthetic answer, or the restart it asked for. */
void dlv__refused(struct req *req, const struct dlv_plan *d);

#endif
