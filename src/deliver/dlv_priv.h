/*
 * dlv_priv -- shared by the deliverer's files: the plan of a delivery,
 * made before anything is sent.
 */
#ifndef SUROGAT_DLV_PRIV_H
#define SUROGAT_DLV_PRIV_H

#include <stdbool.h>
#include <stdint.h>

#include "surogat/gz.h"
#include "surogat/http.h"
#include "surogat/pol.h"
#include "surogat/shd.h"
#include "surogat/tp.h"

struct cobj;
struct req;

/* A body length not known yet (a busy object streamed chunked, a gunzipped body). */
#define DLV_LEN_UNKNOWN UINT64_MAX

struct dlv_plan {
    struct tp_head head;   /* what the transport gets */
    bool nm;               /* 304 */
    /*
     * The coding the client gets and the held one it is made from (the
     * stored body's, or a copy's); xcode: they differ, the body is made on
     * the fly.  fields: then the head's fields for that coding, as a copy
     * in it would keep them (nothing of this delivery's own).
     */
    struct gz_pick pk;
    bool xcode;
    struct txt fields;
    enum http_range range; /* 206 (OK), 416 (UNSATISFIABLE) or the whole body */
    uint64_t len;          /* the body's length, or DLV_LEN_UNKNOWN */
    uint64_t first;        /* the body bytes to send: [first, last] */
    uint64_t last;
    unsigned hits;         /* the deliver hook's obj.hits: the object's count, 0 for a miss */
    /* dlv__plan_obj() zeroes the fields above only: new ones go above. */
    char tail[320];        /* this delivery's own fields: Age, Cache-Status, Content-Range */
    struct shd_head sh;    /* head.stored points here when the head goes as stored */
    struct pol_synth syn;  /* the plan was refused: answer this (status 0: restart) */
};

/*
 * Plan the delivery of the stored object oc in the coding pk.send, made
 * from src's body (oc itself, or a copy of it in pk.from), which has len
 * bytes (DLV_LEN_UNKNOWN: still growing, length not announced) at `now`;
 * fwd: NULL for a hit, else the Cache-Status forward detail; hits:
 * obj.hits for the deliver hook.  With pk.send == pk.from the head is
 * src's as stored; otherwise oc's made over for pk.send.  Runs the deliver
 * hook.  0, or -1 when the plan is refused (dlv__refused()).
 */
int dlv__plan_obj(struct req *req, const struct cobj *oc, const struct cobj *src, struct gz_pick pk,
                  uint64_t len, double now, const char *fwd, unsigned hits, struct dlv_plan *d);
/*
 * The coding oc's body is stored in (its form, or for an object stored
 * before forms were recorded, its Content-Encoding); -1 for one surogat
 * cannot undo or make: such a body goes to every client as it is.
 */
int dlv__coding(const struct cobj *oc);
/*
 * What a client gets of an object stored in `stored` (dlv__coding() >= 0)
 * with copies in the codings of `copies`: gz_negotiate_held() on the
 * request's Accept-Encoding and compress_formats.
 */
struct gz_pick dlv__negotiate(const struct req *req, enum gz_coding stored, unsigned copies);
/* hp's fields as one head block (http_write_fields()), in workspace.  -1 when it is full. */
int dlv__fields_block(struct req *req, const struct http *hp, struct txt *out);
/*
 * A head's stored fields (h->stored) decoded into workspace as its first
 * block, for what reads field lines as text (the deliver hook, the trace,
 * a transport that takes no stored fields).  -1 when the workspace is full.
 */
int dlv__head_decode(struct req *req, struct tp_head *h);
/*
 * The deliver hook on h, the head about to go (hits: the object's, 0 for a
 * fresh answer): 0 with d->head's status and reason taken from what the hook
 * left in h, or -1 with d->syn set (status 0: the hook restarts the request;
 * 503: the hook failed).
 */
int dlv__run_hook(struct req *req, struct http *h, unsigned hits, struct dlv_plan *d);
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

/*
 * A body made on the fly (pk.send != pk.from): the held bytes decoded
 * from pk.from unless that is identity, encoded to pk.send unless that is
 * identity, and the result sent to the client as it comes -- past `skip`
 * bytes it has already -- and, when a copy of the object is being made in
 * that coding, appended to the copy too.  Once the client is gone the copy
 * is still finished, so that the work is not lost.
 */
struct gz;
struct dlv_xcode {
    struct req *req;
    struct cobj *oc; /* the object delivered: removed if its body is a bomb */
    struct gz *dec;  /* NULL from identity */
    struct gz *enc;  /* NULL to identity */
    enum gz_coding from;
    uint64_t skip;     /* decoded bytes the client has already: not sent again */
    struct cobj *copy; /* a busy copy filled with the output (hsh_copy_begin), or NULL */
    bool client_gone;  /* the client failed: only the copy still takes the output */
    bool copy_failed;  /* no room for the copy: it is dropped at the end */
};
/* trusted: the held body is surogat's own (GZ_FORM_MADE, or a copy): no ratio bound. */
void dlv__xcode_begin(struct dlv_xcode *x, struct req *req, struct cobj *oc, struct gz_pick pk,
                      bool trusted);
/*
 * Held bytes in; fin: they were the last.  flush: the client should get
 * everything so far now (a streaming reader).  0, or -1 when the body is
 * bad (the connection cut, the object removed for a bomb) or the client
 * failed with no copy to finish.
 */
int dlv__xcode_feed(struct dlv_xcode *x, const char *p, size_t len, bool fin, bool flush);
void dlv__xcode_end(struct dlv_xcode *x); /* frees the filters */

/*
 * Reading an object's body back to a client from where the client is, as
 * it is stored (dlv_obj.c): a request streaming a busy object it joined
 * (dlv_stream), and the fetching request's own client once it fell
 * behind its fetch (dlv_fetch.c).  The client's body is the stored bytes
 * [first, last], or when pk.send != pk.from the stored body made over
 * (struct dlv_xcode); `sent` of its bytes went out already.  dlv__reader_send() sends what is
 * stored below avail, at most max stored bytes of it; dlv__reader_finish() ends the decoder
 * (complete: the body is all stored and sent; its check of the gzip end may fail) and returns 0
 * when the client may be told the body ended.  The reader holds no reference: the caller keeps the
 * object (and a streaming reader's place on it) meanwhile.
 */
struct sto_seg;
struct dlv_reader {
    struct req *req;
    struct cobj *oc;
    const struct sto_seg *seg; /* the cursor: NULL before the first segment */
    uint64_t seg_off;          /* body offset of seg's first byte */
    uint64_t pos;              /* the next stored byte to send */
    uint64_t last;             /* the last stored byte the client wants */
    bool xcode;
    struct dlv_xcode x;
};
void dlv__reader_init(struct dlv_reader *r, struct req *req, struct cobj *oc, struct gz_pick pk,
                      uint64_t first, uint64_t last, uint64_t sent);
int dlv__reader_send(struct dlv_reader *r, uint64_t avail, uint64_t max);
bool dlv__reader_done(const struct dlv_reader *r);
int dlv__reader_finish(struct dlv_reader *r, bool complete);

#endif
