/*
 * rlog -- the live request log behind `surogatctl log`: one fixed-size
 * record per finished request in a ring owned by the worker that served
 * it.
 *
 * A ring has one writer, its worker, which stores a record with plain
 * stores and two atomic ones: no lock, no syscall, no wait.  The writer
 * never looks at readers: when the ring is full it overwrites the oldest
 * record.  Readers (the admin thread's log streams, any number) keep a
 * cursor per ring and copy records out under a per-slot sequence number,
 * a seqlock: a record overwritten while it was copied is detected and
 * counted as missed, never delivered torn.  So a slow reader loses
 * records and says how many; it never slows a worker.
 *
 * Rings outlive their workers: a worker that exits hands its ring back,
 * the next worker started takes it over with its history, and rings are
 * freed only by rlog_fini().  Every record is kept, whether a reader is
 * attached or not, so a reader may start with what the rings still hold.
 */
#ifndef SUROGAT_RLOG_H
#define SUROGAT_RLOG_H

#include <stdbool.h>
#include <stdint.h>

struct req;
struct sb;

#define RLOG_URL_MAX     256 /* bytes of the request-target kept, NUL included */
#define RLOG_HOST_MAX    64
#define RLOG_BACKEND_MAX 32

/* What a reader gets for one request.  Strings are NUL-terminated. */
struct rlog_rec {
    double t_start;   /* tim_real() when the request head was complete */
    float ttfb;       /* seconds from then to the first response byte */
    float total;      /* seconds from then to the end of the response */
    uint64_t bytes;   /* response body bytes sent */
    uint32_t hooks;   /* bit (1 << hook) for each policy hook run: see rlog_hook_name() */
    uint32_t url_len; /* length of the whole URL; more than url holds: truncated */
    uint16_t status;
    uint16_t restarts;
    uint16_t retries;
    uint16_t esi;       /* an ESI page's includes (UINT16_MAX: as many or more) */
    uint8_t proto;   /* 10, 11; 0 when the request line was not understood */
    uint8_t esi_level; /* an include's depth; 0 for a client's request */
    char client[46]; /* INET6_ADDRSTRLEN */
    char port[8];
    char method[16];
    char cache[12]; /* HIT, MISS, PASS, SYNTH ...; "-" when not set */
    char backend[RLOG_BACKEND_MAX];
    char host[RLOG_HOST_MAX];
    char url[RLOG_URL_MAX];
};

struct rlog_ring;   /* opaque: one per worker */
struct rlog_reader; /* opaque: one per log stream */

/*
 * Records per ring, rounded up to a power of two (at least 2).  Main
 * thread, before any worker starts; 0 or -1 if already started.
 */
int rlog_init(unsigned records);
void rlog_fini(void); /* no reader may remain; rings still owned by a worker are kept */
/* Worker start: a ring handed back by an exited worker, or a new one.  Never NULL. */
struct rlog_ring *rlog_ring_get(void);
void rlog_ring_put(struct rlog_ring **rp); /* worker exit; *rp = NULL; the records stay */
/* The worker of ring r finished req: record it.  Never blocks, never allocates. */
void rlog_req(struct rlog_ring *r, const struct req *req);
/* The same with a record built by the caller (tests, and anything not a struct req). */
void rlog_put(struct rlog_ring *r, const struct rlog_rec *rec);

/*
 * A reader.  history: begin with the records the rings hold now (oldest
 * first, ring by ring); otherwise only requests finished from now on.
 */
struct rlog_reader *rlog_reader_new(bool history);
void rlog_reader_free(struct rlog_reader **rdp); /* *rdp = NULL */
typedef void rlog_rec_f(const struct rlog_rec *rec, void *priv);
/*
 * Call fn for each record written since the last call, in order within
 * each ring, and add to *missed the records lost because they were
 * overwritten before this reader got to them.  Any thread, one at a time
 * per reader.  Returns the number of records delivered.
 */
unsigned rlog_reader_poll(struct rlog_reader *rd, rlog_rec_f *fn, void *priv, uint64_t *missed);

/* Name of hook bit h (0 .. 31) of rlog_rec.hooks, or NULL. */
const char *rlog_hook_name(unsigned h);
/* The hooks of a mask as "recv,hash,deliver", or "-" for none. */
void rlog_hooks_cat(struct sb *sb, uint32_t hooks);
/* The same as a JSON array: ["recv","hash"]. */
void rlog_hooks_json(struct sb *sb, uint32_t hooks);
/* t (seconds since the epoch) as a JSON string: "2026-11-22T10:44:45.123Z". */
void rlog_json_time(struct sb *sb, double t);
/* s[0 .. len) as a JSON string with its quotes; bytes >= 0x80 and controls as \u00XX. */
void rlog_json_str(struct sb *sb, const char *s, size_t len);

#endif
