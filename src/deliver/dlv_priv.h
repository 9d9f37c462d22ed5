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
/*
 * A serialised head (with or without its empty line) parsed into
 * workspace with room more field slots.  NULL when the workspace is full.
 */
struct http *dlv__head_parse(struct req *req, const char *head, size_t len, unsigned room);
/* Age, X-Cache and Cache-Status of a delivery of oc at now, fwd as dlv__plan_obj()'s. */
struct sb;
void dlv__cache_fields(struct sb *sb, const struct cobj *oc, double now, const char *fwd);
/*
 * dlv_esi.c: deliver oc, an ESI page whose program is prog, assembled
 * (see there).  dlv_obj() hands every object with a program over.
 */
void dlv__esi(struct req *req, struct cobj *oc, struct txt prog, double now, const char *fwd,
              unsigned hits);

/* A gunzipping delivery: the decoder's output goes to the client as it comes. */
struct gz;
struct gunzip {
    struct req *req;
    struct cobj *oc;
    struct gz *z;
    uint64_t skip; /* decoded bytes the client has already: not sent again */
};

/*
 * Reading an object's body back to a client from where the client is, as
 * it is stored (dlv_obj.c): a request streaming a busy object it joined
 * (dlv_stream), and the fetching request's own client once it fell
 * behind its fetch (dlv_fetch.c).  The client's body is the stored bytes
 * [first, last], or with gunzip the decoded stored body; `sent` of its
 * bytes went out already.  dlv__reader_send() sends what is stored below
 * avail, at most max stored bytes of it; dlv__reader_finish() ends the
 * decoder (complete: the body is all stored and sent; its check of the
 * gzip end may fail) and returns 0 when the client may be told the body
 * ended.  The reader holds no reference: the caller keeps the object
 * (and a streaming reader's place on it) meanwhile.
 */
struct sto_seg;
struct dlv_reader {
    struct req *req;
    struct cobj *oc;
    const struct sto_seg *seg; /* the cursor: NULL before the first segment */
    uint64_t seg_off;          /* body offset of seg's first byte */
    uint64_t pos;              /* the next stored byte to send */
    uint64_t last;             /* the last stored byte the client wants */
    bool gunzip;
    struct gunzip g;
};
void dlv__reader_init(struct dlv_reader *r, struct req *req, struct cobj *oc, bool gunzip,
                      uint64_t first, uint64_t last, uint64_t sent);
int dlv__reader_send(struct dlv_reader *r, uint64_t avail, uint64_t max);
bool dlv__reader_done(const struct dlv_reader *r);
int dlv__reader_finish(struct dlv_reader *r, bool complete);

#endif
