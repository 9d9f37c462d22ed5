/*
 * sto -- object storage.  Each -s adds a store: `malloc,SIZE` keeps
 * bodies on the heap; `file,PATH,SIZE` keeps them in a memory-mapped file
 * that comes back warm after a restart or a crash of the daemon.
 *
 * A body belongs to one store, chosen when it is opened.  It is written
 * once, by its fetch (sto_open, sto_append..., sto_seal), and read by any
 * number of deliveries straight from its segments without a lock: bytes
 * in a segment never move while the body lives.
 */
#ifndef SUROGAT_STO_H
#define SUROGAT_STO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct sb;
struct stv; /* a store */

struct sto_seg {
    struct sto_seg *next;
    char *data;
    size_t len; /* bytes written */
    size_t cap; /* bytes at data */
};

/*
 * What a persistent store keeps beside the body, so that it can give the
 * object back after a restart.  `attr` is opaque to the store: the
 * index's own description of the object (timing, status).
 */
struct sto_meta {
    const char *key;
    size_t key_len;
    const char *head;
    size_t head_len;
    const char *vary;
    size_t vary_len;
    const void *attr;
    size_t attr_len;
    size_t mem; /* heap bytes the object costs the index: a memory store counts them */
    /* Recovery only: the body's tail (sto_set_tail), in the store; NULL, 0: none. */
    const void *tail;
    size_t tail_len;
};

/*
 * Embedded in every cached object: 56 bytes, the store named by a small
 * number rather than a pointer (a cached object's size class depends on
 * it), and what a delivery reads in its first 32.
 */
struct sto_body {
    struct sto_seg *first;
    uint64_t len;         /* body bytes */
    void *priv;           /* the store's own record of the body */
    uint8_t stv;          /* its store: 0 until sto_open(), else the store's number from 1 */
    bool meta_stored;     /* the store holds the meta: sto_open() repointed it at its copy */
    bool verified;        /* the body matches its checksum (always, unless recovered) */
    /* Written while the body is: */
    struct sto_seg *last;
    uint64_t bytes;       /* store bytes charged */
    uint64_t size_hint;   /* expected body length (Content-Length), 0 if unknown */
};

/* "malloc,SIZE" or "file,PATH,SIZE": add a store.  0, or -1 with a reason in err. */
int sto_init(const char *spec, struct sb *err);
void sto_fini(void);
/*
 * Bind an empty body to the store with the most room and record m with
 * it.  A persistent store copies m and points m's fields at its copies,
 * which live as long as the body (then b->meta_stored is set).  0, or -1
 * when there is no room: b->stv then names the store that was tried, the
 * caller evicts from it (and sets b->stv back to 0) and tries again.
 */
int sto_open(struct sto_body *b, struct sto_meta *m);
/*
 * Append to an open body.  0, or -1 when its store is full (part of the
 * bytes may have been stored: b->len says how many).
 */
int sto_append(struct sto_body *b, const void *p, size_t len);
void sto_body_trim(struct sto_body *b); /* complete: give the unused tail back */
/* Whether sto_body_trim() leaves every written byte where it is (readers may go on). */
bool sto_trim_in_place(const struct sto_body *b);
/* The body is complete and its object published: a persistent store makes it recoverable. */
void sto_seal(struct sto_body *b);
/* The object left the index: a persistent store must not bring it back after a restart. */
void sto_retire(struct sto_body *b);
void sto_body_free(struct sto_body *b); /* give the space back */
void sto_body_release(struct sto_body *b); /* shutdown: forget the body, keep what is stored */
/*
 * Bytes kept with a body but not part of it: what its writer learns only
 * once the body is complete (the index's object attributes: an ESI
 * program, the bits of a gzip member).  Set at most once, after the last
 * sto_append() and before sto_seal(); a persistent store writes them
 * with the object and gives them back after a restart (sto_meta.tail).
 * 0, or -1 when the store has no room (nothing was kept: the caller may
 * evict and try again).
 */
int sto_set_tail(struct sto_body *b, const void *p, size_t len);
/* The tail, valid as long as the body; NULL (and *len 0) when there is none. */
const void *sto_tail(const struct sto_body *b, size_t *len);
/* Rewrite the meta's attr (same length) of a sealed body, e.g. after a soft purge. */
void sto_set_attr(struct sto_body *b, const void *attr, size_t len);
/*
 * Whether the body is intact.  A recovered body is checked against its
 * checksum on first use (once); a body that fails must not be served.
 */
bool sto_verify(struct sto_body *b);

/*
 * Bodies sent by reference.  A segment may also lie in a file: the file
 * store's own, or the memory file (memfd) of a large body of the malloc
 * store (sendfile_min_size).  sto_seg_file() says where -- *fd and *off --
 * or returns false: heap memory, send the bytes at s->data.
 *
 * sendfile(2) hands the kernel the file's pages, not a copy, and they stay
 * referenced until the receiver has the bytes -- for a peer on this host
 * (loopback, a Unix socket, a container), until it has *read* them, which
 * may be never.  Nothing on our side of the socket says when (the send
 * queue drains while the peer's receive queue still holds the pages), so
 * a store never rewrites a page a socket may hold: a memory file is
 * closed with its body and its pages die with their last reference; the
 * file store keeps the extents of a body freed after sto_seg_file() out
 * of use ("quarantined", sto_quarantine_bytes) until the kernel has let
 * their pages go from its page cache, which it does only once nothing
 * references them.  So call it only to send the bytes: it marks the body.
 */
bool sto_seg_file(struct sto_body *b, const struct sto_seg *s, int *fd, off_t *off);
/*
 * Give back the quarantined space that no socket can reference any more.
 * Returns the bytes still quarantined.  May block on disk writes (pages
 * are written before they can be dropped): the stores' thread calls it,
 * and a store found full calls it before it says so; never a worker
 * serving a client.
 */
uint64_t sto_sweep(void);
/* Start the stores' thread (after the daemon forked); sto_fini() stops it.  0 or -1. */
int sto_start(void);

/*
 * Recovery: every object a persistent store holds, sealed and intact in
 * its meta, is offered to cb with its body (bytes verified lazily, see
 * sto_verify).  cb returns 0 if it keeps the body (it then owns it), -1
 * to have the store free it.  Runs before any worker starts; until it
 * has run, a store that holds objects has no room for new ones.
 */
typedef int sto_recover_f(const struct sto_meta *m, struct sto_body *b, uint64_t serial);
void sto_recover(sto_recover_f *cb);

/*
 * The heap a malloc(n) really takes: n rounded up to the allocator's size
 * class, plus its bookkeeping per allocation (STO_HEAP_EXTRA).  A memory
 * store charges this, not n, so that a full -s malloc,SIZE holds the
 * process near SIZE: a 1,333-byte head and body sits in a 1,536-byte
 * class.  Pure arithmetic, any n (0 costs the smallest class).
 */
size_t sto_heap_cost(size_t n);
/*
 * What the malloc store charges for one of its blocks of n bytes (a
 * segment with its descriptor, and a small object's head in front): a
 * slab block's share of its slab (slab.h) where that is less than
 * sto_heap_cost(n), else sto_heap_cost(n).
 */
size_t sto_block_cost(size_t n);

uint64_t sto_size(void); /* all stores */
uint64_t sto_used(void);
/*
 * One line per store: "sN KIND size=BYTES used=BYTES (256.0 MiB, 1.2 MiB
 * used)", then for a file store path, free extents, largest free extent
 * (and in KiB, MiB ...) and fragmentation.
 */
void sto_list(struct sb *out);

#endif
