/*
 * trace_priv -- shared by the trace's writer (trace.c) and its readers
 * (trace_read.c): the ring and the record header (see trace.c for the
 * protocol between them).
 */
#ifndef SUROGAT_TRACE_PRIV_H
#define SUROGAT_TRACE_PRIV_H

#include <stdbool.h>
#include <stdint.h>

#include "surogat/trace.h"

#include "log_priv.h"

#define TRACE_SEGS     16           /* resynchronisation points per ring */
#define TRACE_RING_MIN (64u * 1024) /* a segment (4 KiB) above the longest record */
#define TRACE_RING_MAX (1024u * 1024 * 1024)

/* A record's header, then its payload, padded to a multiple of 8 bytes. */
struct trace_rh {
    uint64_t tx;  /* its transaction */
    uint32_t seq; /* the ring's record number: a reader counts the gaps as missed */
    uint8_t tag;  /* enum trace_tag */
    /*
     * Which of its transaction's runs wrote it: bumped (mod 256) each time
     * the transaction writes into another ring than its last, as a parked
     * request resumed on another worker does.  Records of one run are in
     * one ring, in order; runs are ordered by this.
     */
    uint8_t part;
    uint16_t len; /* payload bytes, at most TRACE_PAYLOAD_MAX */
};
_Static_assert(TRACE_T__N <= 256, "a tag fits in trace_rh.tag");
#define TRACE_REC_SIZE(len) (sizeof(struct trace_rh) + (((size_t)(len) + 7) & ~(size_t)7))

/*
 * A Timestamp record as a worker writes it: the figures as they are,
 * then the event's name (at most TRACE_TS_EVENT_MAX bytes).  The reader
 * hands on the text, "Event: absolute since-start since-previous", so
 * the formatting costs its thread, not the worker's.
 */
struct trace_ts_rec {
    double t, since, prev;
};
#define TRACE_TS_EVENT_MAX 32

/* Figures by hand (trace.c): printf's would cost a worker several times as much. */
struct trace_fx {
    char s[32];
};
struct trace_fx trace__ux(uint64_t v);             /* decimal */
struct trace_fx trace__fx(double v, unsigned dec); /* as printf's %.*f, dec <= 6 */

struct trace_ring {
    unsigned magic;
#define TRACE_RING_MAGIC 0x52c0e9a4
    struct log_ring lr;  /* its place in trace__rings; lr.id: the readers' cursor index */
    uint64_t size, mask; /* bytes, a power of two; size - 1 */
    unsigned segshift;   /* log2(size / TRACE_SEGS) */
    /* the writer's own */
    uint32_t seq;
    uint64_t last_seg; /* segment of the last record's start, plus one; 0 none */
    /* shared with readers, on a line of their own */
    uint64_t reserve __attribute__((aligned(64))); /* bytes below reserve - size may be gone */
    uint64_t head;                                 /* bytes complete */
    uint64_t seg_first[TRACE_SEGS]; /* first record starting in segment k: at [k % SEGS] */
    unsigned char *buf;
};

extern struct log_rings trace__rings; /* every trace ring */

#endif
