/*
 * sto -- object storage.  This is the malloc store (-s malloc,SIZE): body
 * bytes live in a chain of heap segments, counted against the store's
 * size.  An object is written once, by its fetch, and read by any number
 * of deliveries after it completes, so segments need no lock.
 */
#ifndef SUROGAT_STO_H
#define SUROGAT_STO_H

#include <stddef.h>
#include <stdint.h>

struct sb;

struct sto_seg {
    struct sto_seg *next;
    size_t len; /* bytes written */
    size_t cap; /* bytes of data[] */
    char data[];
};

struct sto_body {
    struct sto_seg *first;
    struct sto_seg *last;
    uint64_t len;   /* body bytes */
    uint64_t bytes; /* store bytes charged: segments and their headers */
    uint64_t size_hint; /* expected body length (Content-Length), 0 if unknown */
};

/* "malloc,SIZE"; 0, or -1 with a reason in err.  Without a call the store is malloc,256m. */
int sto_init(const char *spec, struct sb *err);
void sto_fini(void);
/*
 * Append to a body, charging the store.  0, or -1 when the store is full
 * (the caller evicts and retries, or gives up storing).
 */
int sto_append(struct sto_body *b, const void *p, size_t len);
void sto_body_free(struct sto_body *b); /* frees the segments and credits the store */
/* The body is complete: give the unused tail of its last segment back. */
void sto_body_trim(struct sto_body *b);
uint64_t sto_size(void);
uint64_t sto_used(void);

#endif
