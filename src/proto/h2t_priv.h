/*
 * h2t_priv -- shared by the files of the HTTP/2 transport (see h2t.c for
 * the design: threads, locks, who writes the socket).
 *
 *   h2t.c         connections: start, the reader, parking, closing, limits
 *   h2t_io.c      the output buffer, frames out, waiting for the socket
 *   h2t_hdr.c     request header fields checked (RFC 9113 section 8) and kept
 *   h2t_recv.c    nghttp2's receive callbacks, and the limits they enforce
 *   h2t_stream.c  streams as requests: their lifetime, the runners
 *   h2t_ops.c     tp_ops: a stream's response and request body
 *   h2t_mem.c     nghttp2's memory, per connection; resting connections give it back
 */
#ifndef SUROGAT_H2T_PRIV_H
#define SUROGAT_H2T_PRIV_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <nghttp2/nghttp2.h>

#include "surogat/http.h"
#include "surogat/pool.h"
#include "surogat/req.h"
#include "surogat/wrk.h"

struct req;
struct sess;
struct wrk;

/* Room for output frames; a DATA frame and its header fill one TLS record (H2_DATA_MAX). */
#define H2_OB_SIZE  (64 * 1024)
#define H2_DATA_MAX (16384 - 9)
#define H2_HOLD_MAX 16384
/*
 * A connection's streams keep at most H2_SPILL_MAX of promised writes the
 * windows did not take; writable() says yes only with room for one of
 * H2_SPILL_PIECE, the most the core writes at once after asking (a
 * backend read, the deliverer's DLV_CATCH_UP), so that past it a miss
 * falls behind (reads from the store) rather than wait for the client.
 */
#define H2_SPILL_MAX   (256 * 1024)
#define H2_SPILL_PIECE (64 * 1024)
/* Frames one header block may take (HEADERS and its CONTINUATIONs), and bytes per http_req_size. */
#define H2_HB_FRAMES 32

/*
 * What decoding a request's header block found, worst first wins.
 * H2_OK and the answered kinds go to a runner; the malformed ones reset
 * the stream (RFC 9113 section 8.1.1: a stream error, PROTOCOL_ERROR).
 */
enum h2_verdict {
    H2_OK,
    H2_ANSWER_400,   /* :authority and Host disagree, Host malformed: answered 400 */
    H2_ANSWER_431,   /* header list over http_req_size or http_max_hdr: answered 431 */
    H2_ANSWER_417,   /* Expect other than 100-continue: answered 417 */
    H2_ANSWER_501,   /* CONNECT: answered 501 */
    H2_BAD_PSEUDO,   /* a pseudo-header missing, repeated, unknown, empty or out of place */
    H2_BAD_FIELD,    /* connection-specific, uppercase or invalid name; bad value; TE */
};

/* Pseudo-header fields of a request, in h2s.pseudo[]. */
enum h2_pseudo { H2P_METHOD, H2P_SCHEME, H2P_AUTHORITY, H2P_PATH, H2P__N };

/* A field kept for the request: offsets into h2s.hb. */
struct h2_field {
    uint32_t no, nl; /* name */
    uint32_t vo, vl; /* value */
};

/* The state of decoding one header block (h2t_hdr.c), as the reader feeds it fields. */
struct h2_hdrs {
    char *hb; /* names and values, copied: the request points into it */
    size_t hb_len, hb_cap;
    struct h2_field *f;
    unsigned nf, fcap;
    struct h2_field pseudo[H2P__N];
    unsigned have;        /* bit (1 << enum h2_pseudo) for each pseudo-header seen */
    uint64_t list_size;   /* RFC 9113 6.5.2: names, values, 32 per field */
    uint64_t clen;        /* content-length, when has_clen */
    bool has_clen;
    bool regular;         /* a regular field came: no pseudo-header may follow */
    bool trailers;        /* the block is a trailer section: fields are checked, not kept */
    bool expect_100;
    enum h2_verdict verdict;
};

/* Check and keep one field of a block; never fails hard (the verdict says). */
void h2t__hdr_field(struct h2_hdrs *h, const uint8_t *name, size_t nl, const uint8_t *value,
                    size_t vl);
/* The block is complete: the checks on the whole (pseudo-headers present, Host). */
void h2t__hdr_end(struct h2_hdrs *h);
void h2t__hdr_free(struct h2_hdrs *h);
/*
 * Fill hp (http_init()ed by the caller, room for the fields and Host)
 * from a complete request block h with verdict H2_OK: method, url, proto
 * 20, the fields, Host from :authority.  Cookie crumbs are joined (RFC
 * 9113 8.2.3).  0, or -1 when hp has no room.
 */
int h2t__hdr_request(const struct h2_hdrs *h, struct http *hp);

/* A stream: one request and its response. */
struct h2s {
    unsigned magic;
#define H2S_MAGIC 0x3e9a5c17
    struct h2c *c;
    int32_t id;
    struct h2s *next;  /* on c's pending queue, or its list of waiters */
    struct h2s *lnext; /* on c's list of every stream */
    struct h2s *lprev;
    pthread_cond_t cond; /* its runner waits here */
    struct h2_hdrs h;  /* the request's block: the runner reads it, unlocked, once queued */
    struct h2_hdrs tr; /* a trailer block's checks: the reader's alone */
    bool in_trailers;  /* the block being decoded is tr */
    /* request body: DATA bytes in a ring until the runner takes them */
    char *ib;
    size_t ib_cap, ib_head, ib_len;
    size_t ib_handed;  /* given by the last body_next(), consumed at the next */
    uint64_t in_total; /* DATA payload received */
    bool in_end;       /* END_STREAM received */
    bool in_bad;       /* the body disagreed with content-length */
    bool discard;      /* nobody reads the body any more: consume and drop */
    bool has_body;     /* HEADERS came without END_STREAM */
    bool await_data;   /* ready once the body begins or ends (its framing is unknown) */
    /* who holds it: nghttp2 until on_stream_close(), a runner from queued to done */
    bool open;
    bool task;
    bool queued;
    bool closed;        /* nghttp2 closed it (a reset, either way, or both ends done) */
    bool reset;         /* closed before our response ended: by the client, or an error */
    bool end_sent;      /* our END_STREAM went out */
    bool zombie;        /* reset while its runner still works: counted in c->nzombie */
    bool waiting;       /* its runner waits for output (on c's waiters) */
    /* response */
    struct req *req;
    struct wrk_mem mem; /* a parked request's workspace (tp.h park()) */
    nghttp2_nv *nva;    /* a held-back head (workspace) */
    size_t nvlen;
    bool head_sent;     /* HEADERS submitted */
    bool eof;           /* end(): no more body */
    bool rst;           /* we reset it */
    bool interim_100;   /* 100 Continue sent */
    uint64_t olen;      /* the head's length, or TP_LEN_UNKNOWN/NONE */
    uint64_t oframed;   /* body bytes committed to DATA frames */
    uint64_t ocopied;   /* of those, copied to the output buffer */
    uint64_t ogiven;    /* handed by body() in all */
    const struct iovec *oiov; /* body() pieces not copied yet, the caller's memory */
    int oniov;
    size_t ooff;        /* into oiov[0] */
    char *fbuf;         /* file(): pieces read here (malloc'd, H2_OB_SIZE) */
    bool promised;      /* writable() said yes: the next body() must not wait for the client */
    char *spill;        /* what of such a body() the windows did not take yet (malloc'd) */
    size_t spill_cap;
    struct iovec spill_iov;
    double t_start;
};

/* Token bucket: `limit` a second, bursts of as many. */
struct h2_rate {
    double tokens;
    double t;
};

/* Why a connection is being torn down early. */
enum h2_kill {
    H2K_NONE,
    H2K_FRAME,        /* the frame layer's error (nghttp2) */
    H2K_RESET,        /* Rapid Reset */
    H2K_FLOOD,        /* control frames */
    H2K_CONTINUATION, /* header block too large or in too many frames */
    H2K_STALL,        /* window or socket shut for h2_window_timeout */
    H2K_IO,           /* the socket failed */
};

/* A block of nghttp2's mapped on its own (h2t_mem.c). */
struct h2_map {
    void *p;
    size_t len;
    struct h2_map *next;
};

struct h2c {
    unsigned magic;
#define H2C_MAGIC 0x71d4b2e8
    struct sess *sp;
    pthread_mutex_t mtx; /* everything below, every nghttp2 call and all socket I/O */
    nghttp2_session *ngh;
    struct h2_map *maps; /* nghttp2's blocks mapped on their own (h2t_mem.c) */
    void *fb;            /* of those, the session's frame buffer */
    void *smap;          /* nghttp2's stream map: a page of its own (h2t_mem.c) */
    bool creating;       /* nghttp2's session is being made: which block is which */
    bool had_unused;     /* its deflater's table was asked for (h2t_mem.c) */
    void *unused;        /* that table: a slot nothing touches (h2t_mem.c) */
    /*
     * Resting: no request and no output.  t_rest is tim_mono() when it
     * last began to rest, 0 while in use.  listed: on the list of
     * resting connections (h2t_mem.c), changed under that list's lock
     * and c->mtx both; rnext, rprev and t_listed place it there, under
     * the list's lock alone.
     */
    double t_rest;
    double t_listed;
    struct h2c *rnext, *rprev;
    bool listed;
    unsigned refcnt;   /* the connection's own (reader or waiter), one per runner */
    unsigned epoch;    /* sess_epoch() when it started */
    bool reader;       /* a worker reads it now */
    bool parked_busy;  /* in the waiter, parked busy */
    bool dead;         /* no more I/O: writes fail, streams end */
    bool goaway;       /* we sent (submitted) GOAWAY */
    enum h2_kill kill;
    /* streams */
    struct h2s *all;   /* every stream (lnext) */
    /* Streams under way: open in nghttp2, or reset but with their request still running. */
    unsigned nopen;
    unsigned nzombie;
    struct h2s *qhead; /* waiting for a runner, in order */
    struct h2s *qtail;
    unsigned nactive;  /* streams queued or running: the connection is busy */
    unsigned nrunners;
    bool helper_queued;
    struct pool_task helper;
    /* output */
    char *ob;          /* H2_OB_SIZE, while there is output */
    size_t ob_head, ob_len;
    bool flusher;      /* a thread waits for the socket to take ob */
    const void *holder; /* the runner holding back ob to send it with its next stream's */
    struct h2s *waiters; /* runners waiting for output progress (next) */
    double t_progress; /* tim_mono() of the last write that made progress */
    uint32_t local_window; /* our SETTINGS_INITIAL_WINDOW_SIZE */
    size_t spilled;    /* bytes of its streams' spill buffers, at most H2_SPILL_MAX */
    /* input limits */
    double now;        /* tim_mono() when the input being decoded was read */
    int32_t hb_stream; /* the header block being received */
    size_t hb_bytes;
    unsigned hb_frames;
    struct h2_rate rst_rate, frame_rate;
};

/* h2t.c */
extern nghttp2_session_callbacks *h2t__cb;
extern unsigned h2t__ncpu; /* the CPUs we may run on: runners a connection keeps busy at most */
/* c->mtx, the thread knowing it holds it (a runner's blocking hook runs in either state). */
void h2t__lock(struct h2c *c);
void h2t__unlock(struct h2c *c);
bool h2t__held(const struct h2c *c);
void h2t__wake_all(struct h2c *c); /* under c->mtx: every runner waiting on the connection */
void h2t__unref(struct h2c *c); /* the last one frees c and closes its session */
/* Under c->mtx: tear the connection down (GOAWAY with why, when it can still be said). */
void h2t__kill(struct h2c *c, enum h2_kill why, uint32_t code);
/* Under c->mtx: the connection's request count went to zero while parked busy. */
void h2t__rested(struct h2c *c);

/* h2t_recv.c */
void h2t__recv_callbacks(nghttp2_session_callbacks *cb);
/*
 * Under c->mtx: condemn the connection -- count why, have nghttp2 say
 * GOAWAY with code.  Safe in nghttp2's callbacks; h2t__kill() finishes.
 */
void h2t__doom(struct h2c *c, enum h2_kill why, uint32_t code);

/* h2t_io.c: all under c->mtx */
/* Frames out: into ob and on to the socket, until nghttp2 has no more or the socket is full. */
void h2t__pump(struct h2c *c);
/*
 * Wait for the socket to take ob (unlocked meanwhile), as the thread that
 * flushes; until deadline.  0 progress or nothing to do, -1 the
 * connection stalled or failed (killed).
 */
int h2t__flush_wait(struct h2c *c, double deadline);
/* Before a thread leaves the connection or blocks: see that ob gets written (h2t.c). */
void h2t__settle(struct h2c *c);
/*
 * A runner about to serve another stream of the connection holds back
 * what ob has, below H2_HOLD_MAX, so that both answers leave in one write
 * (one TLS record, one system call).  Whatever it does next that can
 * block lets go first (h2t__flush_wait(), wrk.on_block), and so does the
 * end of its run: h2t__release() sends what was held.
 */
void h2t__hold(struct h2c *c);
void h2t__release(struct h2c *c);
/* A non-blocking read: >0, 0 at EOF, -1 with errno (EAGAIN). */
ssize_t h2t__read(struct h2c *c, void *buf, size_t len);
void h2t__ob_free(struct h2c *c);
/* Copy len bytes of s's pending body pieces (s->oiov) to dst, consuming them. */
void h2t__take_body(struct h2s *s, char *dst, size_t len);
ssize_t h2t__send_cb(nghttp2_session *ngh, const uint8_t *data, size_t len, int flags,
                     void *priv);
int h2t__send_data_cb(nghttp2_session *ngh, nghttp2_frame *frame, const uint8_t *framehd,
                      size_t length, nghttp2_data_source *source, void *priv);
ssize_t h2t__data_read_cb(nghttp2_session *ngh, int32_t stream_id, uint8_t *buf, size_t length,
                          uint32_t *flags, nghttp2_data_source *source, void *priv);
/* Wake the runners waiting for output so that one takes the flusher's place. */
void h2t__wake_waiters(struct h2c *c);

/* h2t_mem.c */
/*
 * A connection resting this long (seconds) gives back its output buffer
 * and the pages of nghttp2's frame buffer and empty stream map; a test
 * may change it.
 */
#define H2_REST_RELEASE 1.0
extern double h2t__rest_release;
/* nghttp2's allocator for c's session (the session keeps a copy of *mem). */
void h2t__mem_init(struct h2c *c, nghttp2_mem *mem);
void h2t__mem_started(struct h2c *c); /* after: which block is the frame buffer */
/*
 * Under c->mtx: the connection rests (no request, no output): what it
 * holds for its traffic goes back once it has rested h2t__rest_release.
 */
void h2t__mem_rest(struct h2c *c);
/* Under c->mtx: a thread works on the connection: it rests no more. */
void h2t__mem_busy(struct h2c *c);
/* Give back what connections resting since before now - h2t__rest_release hold (tests). */
void h2t__mem_sweep(double now);
/* The last reference went: off the resting list (the sweeper may touch c no more). */
void h2t__mem_leave(struct h2c *c);
void h2t__mem_fini(struct h2c *c); /* after nghttp2_session_del() */
/*
 * The thread that sweeps resting connections, and the mapping of blocks
 * never written: made by h2t_init(), undone by h2t_fini().
 */
int h2t__rest_start(void);
void h2t__rest_stop(void);

/* h2t_stream.c */
struct h2s *h2t__stream_new(struct h2c *c, int32_t id);
/* Under c->mtx: nghttp2 let go of it, or the runner did: free it when both have. */
void h2t__stream_release(struct h2s *s);
/* Under c->mtx: s's request may run: queue it for a runner. */
void h2t__stream_ready(struct h2s *s);
/* Under c->mtx: DATA for s (copied, or consumed and dropped). */
void h2t__stream_data(struct h2s *s, const uint8_t *data, size_t len);
/* Under c->mtx, holding a reference: run queued streams until there are none (unlocks meanwhile). */
void h2t__run(struct wrk *wrk, struct h2c *c);
/* tp_ops park, resume and drop: a stream's request waiting without a worker (tp.h). */
void h2t__park(struct req *req, bool brief);
void h2t__resume(struct wrk *wrk, struct req *req);
void h2t__drop(struct req *req);
/* Under c->mtx: reset s with code (counted). */
void h2t__stream_rst(struct h2s *s, uint32_t code);

/* h2t_ops.c */
/* No more of the response can go: the connection died or the stream was reset. */
bool h2t__stream_gone(const struct h2s *s);
/* Under c->mtx: give back the window of n body bytes the runner has taken, and send. */
void h2t__consume(struct h2s *s, size_t n);
/* What serves a request that passed our checks: req_serve(); tests put their own here. */
typedef enum req_run h2t_serve_f(struct req *req);
extern h2t_serve_f *h2t__serve;

/*
 * Tests and fuzzing (tests/unit/proto, tests/fuzz/fuzz_h2.c): a connection
 * on sp -- its fd one end of a socketpair, no pool, no waiter -- fed on
 * the caller's thread.  h2t__test_feed() does with the bytes what the
 * reader does, then serves what got queued, inline (h2t__serve).
 * h2t__test_close() ends it and closes sp.
 */
struct h2c *h2t__test_conn(struct sess *sp);
void h2t__test_feed(struct h2c *c, struct wrk *wrk, const void *p, size_t n);
bool h2t__test_dead(struct h2c *c);
void h2t__test_close(struct h2c *c, struct wrk *wrk);

#endif
