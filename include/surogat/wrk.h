/*
 * wrk -- what a worker thread owns: its workspace and its I/O buffers,
 * allocated once when the thread starts and reused by every task it runs,
 * so that a request costs no malloc.
 */
#ifndef SUROGAT_WRK_H
#define SUROGAT_WRK_H

#include <stddef.h>

#include "surogat/ws.h"

struct alog_buf;
struct rlog_ring;
struct pol_wrk;

struct wrk {
    unsigned magic;
#define WRK_MAGIC 0x2b6fa0c3
    struct ws ws;   /* per-request arena, reset between requests */
    char *ws_block; /* its memory */
    size_t ws_size;
    char *rx;       /* client receive buffer: request head, then body bytes */
    size_t rx_size;
    char *be;       /* backend receive buffer: response head, then body bytes */
    size_t be_size;
    struct alog_buf *alog; /* buffered access-log lines */
    struct pol_wrk *pol;   /* pol: this thread's Lua state, built on first use */
    /* Its ring of request records, for `surogatctl log`; NULL outside a pool. */
    struct rlog_ring *rlog;
};

/* Allocate (or grow to the current parameters) the worker's buffers. */
void wrk_buffers_fit(struct wrk *wrk);
void wrk_buffers_free(struct wrk *wrk);

#endif
